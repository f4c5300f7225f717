//! The access log: one line per request, in the combined format (Apache's and nginx's default)
//! or as JSON lines with the cache status, the upstream and the time to the response head.
//!
//! It is a [`Phase`]: `request_filter` notes the request, `logging` formats the line and hands
//! it to a writer thread through a bounded queue, so a request never waits for the disk. When
//! the queue is full the line is dropped and counted (`dropped()`), never the request.
//! [`AccessLog::reopen`] (SIGUSR1) makes the writer open the file again, for log rotation.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use http::{request, response, Response};
use slipstream_http::Body;

use crate::phase::{CacheOutcome, Ctx, Phase};
use crate::Clock;

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `host - - [time] "request" status bytes "referer" "user-agent"`.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

/// Marks a request to a control endpoint (`/_slipstream/…`) in its context: its JSON line
/// says `"control": true`.
#[derive(Debug, Clone, Copy)]
pub struct Control;

/// Lines waiting for the writer at most; beyond, lines are dropped and counted.
pub const QUEUE_LINES: usize = 16_384;

enum Message {
    Line(Vec<u8>),
    Reopen,
}

/// The access log phase. Cheap to clone; the writer stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct AccessLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `None` only while dropping: the writer ends when the queue's sender is gone.
    tx: Option<SyncSender<Message>>,
    format: Format,
    clock: Clock,
    dropped: AtomicU64,
    writer: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the log keeps of a request until its response.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    version: http::Version,
    referer: Option<String>,
    user_agent: Option<String>,
    at: SystemTime,
}

impl AccessLog {
    /// Appends to `path` (created if missing) in `format`.
    pub fn open(path: &Path, format: Format, clock: Clock) -> std::io::Result<AccessLog> {
        let file = append(path)?;
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let path = path.to_owned();
        let writer = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_lines(rx, file, path))?;
        Ok(AccessLog {
            inner: Arc::new(Inner {
                tx: Some(tx),
                format,
                clock,
                dropped: AtomicU64::new(0),
                writer: parking_lot::Mutex::new(Some(writer)),
            }),
        })
    }

    /// Asks the writer to open the file again (after it was moved away by log rotation).
    pub fn reopen(&self) {
        if let Some(tx) = &self.inner.tx {
            let _ = tx.try_send(Message::Reopen);
        }
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    fn send(&self, line: Vec<u8>) {
        let sent = self
            .inner
            .tx
            .as_ref()
            .map(|tx| tx.try_send(Message::Line(line)));
        if matches!(
            sent,
            None | Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_)))
        ) {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Inner {
    /// Waits for the writer to write what is queued, so a stopping node loses no line.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(w) = self.writer.get_mut().take() {
            let _ = w.join();
        }
    }
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

fn write_lines(rx: Receiver<Message>, file: std::fs::File, path: PathBuf) {
    let mut out = std::io::BufWriter::new(file);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        // Write everything already queued, then flush once.
        while let Some(message) = next {
            match message {
                Message::Line(line) => {
                    if let Err(e) = out.write_all(&line) {
                        tracing::warn!(path = %path.display(), error = %e, "access log write failed");
                    }
                }
                Message::Reopen => {
                    let _ = out.flush();
                    match append(&path) {
                        Ok(f) => out = std::io::BufWriter::new(f),
                        Err(e) => {
                            tracing::warn!(path = %path.display(), error = %e, "cannot reopen the access log");
                        }
                    }
                }
            }
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

#[async_trait]
impl Phase for AccessLog {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        let header = |name: http::header::HeaderName| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        ctx.extensions.insert(Seen {
            method: req.method.to_string(),
            target: req
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.to_string()),
            version: req.version,
            referer: header(http::header::REFERER),
            user_agent: header(http::header::USER_AGENT),
            at: self.inner.clock.now(),
        });
        None
    }

    fn logging(&self, ctx: &Ctx, res: &response::Parts) {
        let Some(seen) = ctx.extensions.get::<Seen>() else {
            return;
        };
        let bytes = res
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut line = match self.inner.format {
            Format::Combined => combined(ctx, seen, res.status.as_u16(), bytes),
            Format::Json => {
                let cache = res
                    .headers
                    .get("cache-status")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .or_else(|| {
                        ctx.cache.map(|c| match c {
                            CacheOutcome::Hit => "hit".to_owned(),
                            CacheOutcome::Stale => "stale".to_owned(),
                            CacheOutcome::Miss => "miss".to_owned(),
                        })
                    });
                let head_ms = self
                    .inner
                    .clock
                    .instant()
                    .saturating_duration_since(ctx.arrived)
                    .as_secs_f64()
                    * 1e3;
                let v = serde_json::json!({
                    "time": httpdate::fmt_http_date(seen.at),
                    "client": ctx.peer.ip().to_string(),
                    "method": seen.method,
                    "target": seen.target,
                    "version": format!("{:?}", seen.version),
                    "status": res.status.as_u16(),
                    "bytes": bytes,
                    "cache": cache,
                    "upstream": ctx.upstream,
                    "head_ms": (head_ms * 1000.0).round() / 1000.0,
                    "referer": seen.referer,
                    "user_agent": seen.user_agent,
                    "control": ctx.extensions.get::<Control>().is_some(),
                });
                serde_json::to_string(&v).unwrap_or_default()
            }
        }
        .into_bytes();
        line.push(b'\n');
        self.send(line);
    }
}

/// `host - - [10/Oct/2000:13:55:36 +0000] "GET /a HTTP/1.1" 200 2326 "referer" "agent"`.
fn combined(ctx: &Ctx, seen: &Seen, status: u16, bytes: Option<u64>) -> String {
    let quoted = |v: &Option<String>| {
        v.as_deref().map_or_else(
            || "-".to_owned(),
            |s| s.replace('\\', "\\\\").replace('"', "\\\""),
        )
    };
    format!(
        "{} - - [{}] \"{} {} {:?}\" {} {} \"{}\" \"{}\"",
        ctx.peer.ip(),
        clf_time(seen.at),
        seen.method,
        seen.target.replace('"', "%22"),
        seen.version,
        status,
        bytes.map_or_else(|| "-".to_owned(), |b| b.to_string()),
        quoted(&seen.referer),
        quoted(&seen.user_agent),
    )
}

/// `10/Oct/2000:13:55:36 +0000`, in UTC.
fn clf_time(t: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{day:02}/{}/{year}:{:02}:{:02}:{:02} +0000",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn clf_time_is_the_combined_formats_date() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(971_185_336);
        assert_eq!(clf_time(t), "10/Oct/2000:13:42:16 +0000");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(clf_time(leap), "29/Feb/2000:00:00:00 +0000");
    }

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rotation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("access.log");
        let log = AccessLog::open(&path, Format::Combined, Clock::System).expect("open");
        log.send(b"one\n".to_vec());
        std::fs::rename(&path, dir.path().join("access.log.1")).expect("rotate");
        log.reopen();
        log.send(b"two\n".to_vec());
        drop(log);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("access.log.1")).expect("old"),
            "one\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "two\n");
    }
}
