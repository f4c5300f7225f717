//! The phase that watches the demand stream: every successful GET that is not a prefetch
//! trains the predictor, and demand and prefetch responses are counted in bytes.
//!
//! Training happens off the request path: the phase queues (client, URL) on a bounded channel
//! and a task learns them in batches under the model's lock; when the queue is full a request
//! is not learnt (counted as `unqueued` on the status), never waited for.
//!
//! A request is a prefetch when it says so (`Sec-Purpose: prefetch`, what browsers send for
//! Speculation Rules and `<link rel=prefetch>`; the older `Purpose: prefetch`) or arrived
//! through the prefetch listener ([`ViaPrefetchListener`]). Clients are told apart by address
//! and user agent, which is all a server sees without cookies.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::{request, response, Method, Response};
use slipstream_http::Body;
use slipstream_node::{Ctx, Phase};
use slipstream_prefetch::sessions::is_embedded;
use tokio::sync::mpsc;

use crate::{Nps, PROBE_HEADER};

/// Requests queued for training at most.
pub const QUEUE: usize = 4096;

/// Bytes of a user agent that tell clients apart in the model's key.
const MAX_UA_IN_KEY: usize = 256;

/// A request extension set by a listener that serves prefetches only.
#[derive(Debug, Clone, Copy)]
pub struct ViaPrefetchListener;

/// The demand phase. Register it on the origin; [`Demand::new`] also starts the learner task.
#[derive(Debug, Clone)]
pub struct Demand {
    nps: Arc<Nps>,
    queue: mpsc::Sender<(String, String)>,
}

/// What the request filter notes for logging.
#[derive(Debug, Clone)]
struct Seen {
    /// Training key and URL, for a demand GET.
    learn: Option<(String, String)>,
    prefetch: bool,
    probe: bool,
    /// A GET (demand or prefetch: a prefetched page is munged too, since it is shown later).
    get: bool,
    /// Through the prefetch listener.
    via_listener: bool,
}

/// The munger (000 §5, §6.1: "augments each HTML document" so that it prefetches): adds the
/// agent's registration script to the head of a page, which hands the page to the Service
/// Worker, which asks for hints once the page has loaded and the browser is idle. With a
/// prefetch listener the script names it (`data-prefetch-base`), so that the worker's first
/// hint request goes there as well as its later ones. The bare `data-prefetch` announces
/// prefetching: an agent asks for hints only on a page that says so (a cluster member's pages
/// register the agent without it).
#[derive(Debug)]
struct Munger {
    /// The script element added to the head.
    script: String,
}

impl Munger {
    /// The script for a page whose prefetch listener is `prefetch_base` (if any) and whose
    /// agent is told to wait `hints_wait` before its first hint request (if any). The wait
    /// goes with the time it was given (`data-hints-wait-at`, Unix milliseconds), so that an
    /// agent reading a stale copy of the page (a browser's or a shared cache's) can tell.
    fn new(
        prefetch_base: Option<&str>,
        hints_wait: Option<PageWait>,
        served: Option<ServedAt>,
    ) -> Munger {
        let base = prefetch_base
            .map(|b| format!(r#" data-prefetch-base="{}""#, attribute_escaped(b)))
            .unwrap_or_default();
        let served = served
            .map(|ServedAt(ms)| format!(r#" data-served-ms="{ms}""#))
            .unwrap_or_default();
        let wait = hints_wait
            .map(|PageWait { ms, at_unix_ms }| {
                format!(r#" data-hints-wait-ms="{ms}" data-hints-wait-at="{at_unix_ms}""#)
            })
            .unwrap_or_default();
        Munger {
            script: format!(
                r#"<script src="/_slipstream/agent/register.js" data-prefetch{base}{wait}{served} defer></script>"#
            ),
        }
    }
}

/// The wait, in milliseconds, a page's response told its agent ([`crate::HINTS_WAIT_HEADER`])
/// and when (Unix milliseconds); kept for the munger, so that the header and the script say
/// the same.
#[derive(Debug, Clone, Copy)]
struct PageWait {
    ms: u64,
    at_unix_ms: u64,
}

/// When a page was served ([`crate::SERVED_HEADER`]), kept for the munger, so that the agent
/// in the page can read it too (`data-served-ms`).
#[derive(Debug, Clone, Copy)]
struct ServedAt(u64);

/// `s` escaped for a double-quoted HTML attribute value.
fn attribute_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

impl slipstream_node::html::HtmlHandler for Munger {
    fn selector(&self) -> &str {
        "head"
    }

    fn element(
        &self,
        el: &mut slipstream_node::html::Element<'_, '_>,
    ) -> slipstream_node::html::HandlerResult {
        el.prepend(&self.script, slipstream_node::html::ContentType::Html);
        Ok(())
    }
}

fn says_prefetch(req: &request::Parts, name: &str) -> bool {
    req.headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(';')
                .any(|t| t.trim().eq_ignore_ascii_case("prefetch"))
        })
}

/// Whether a request says it is a prefetch: through the prefetch listener, a browser's own
/// (`Sec-Purpose: prefetch`), or the agent's on the page's origin (`Purpose: prefetch`).
pub fn is_prefetch(req: &request::Parts) -> bool {
    req.extensions.get::<ViaPrefetchListener>().is_some()
        || says_prefetch(req, "sec-purpose")
        || says_prefetch(req, "purpose")
}

/// Whether a request is a browser's own prefetch, which no hint list granted: `Sec-Purpose:
/// prefetch` (a header pages and workers cannot set) on the demand listener.
pub fn is_native_prefetch(req: &request::Parts) -> bool {
    req.extensions.get::<ViaPrefetchListener>().is_none() && says_prefetch(req, "sec-purpose")
}

impl Demand {
    /// Whether the munger rewrites this response: a page answering a GET that is not a probe.
    fn munges(&self, ctx: &Ctx, res: &response::Parts) -> bool {
        self.nps.settings().munge
            && ctx
                .extensions
                .get::<Seen>()
                .is_some_and(|s| s.get && !s.probe)
            && slipstream_node::html::is_page(res)
    }

    /// The phase, and the task that trains `nps`'s model from it (on the current runtime).
    pub fn new(nps: Arc<Nps>) -> Demand {
        let (queue, mut rx) = mpsc::channel::<(String, String)>(QUEUE);
        let model = nps.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(256);
            while rx.recv_many(&mut batch, 256).await > 0 {
                let mut m = model.model().lock();
                for (client, url) in batch.drain(..) {
                    let page = !is_embedded(&url);
                    m.learn(&client, &url, page);
                }
            }
        });
        Demand { nps, queue }
    }
}

#[async_trait]
impl Phase for Demand {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        let probe = req.headers.contains_key(PROBE_HEADER);
        let prefetch = is_prefetch(req);
        // A browser's own prefetch (Speculation Rules, <link rel=prefetch>) is served only
        // within the budget; refused, it costs one short answer. Prefetches through the
        // prefetch listener were granted with their hint list already.
        // (`admit_prefetch` refuses them while shedding too, and counts them.) Any prefetch
        // while the monitor finds the node overloaded is refused as well: lists granted before
        // a burst must not be served through it.
        let native_refused = is_native_prefetch(req) && !self.nps.admit_prefetch();
        let shed = prefetch && !probe && self.nps.shedding();
        if shed {
            self.nps.shed_prefetches.fetch_add(1, Ordering::Relaxed);
        }
        if shed || native_refused {
            let mut r = slipstream_node::respond::text(
                http::StatusCode::SERVICE_UNAVAILABLE,
                "prefetch refused: the server has no spare capacity for prefetching now",
            );
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            r.headers_mut().insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static("no-store"),
            );
            return Some(r);
        }
        // A personal request (cookies, credentials) is not learnt: its URL may answer
        // differently for someone else (crate::guard).
        let personal = crate::guard::personal_request(&req.headers);
        if personal && req.method == Method::GET && !prefetch && !probe {
            self.nps.personal_not_learnt.fetch_add(1, Ordering::Relaxed);
        }
        let learn = (req.method == Method::GET && !prefetch && !probe && !personal)
            .then(|| {
                let ua = req
                    .headers
                    .get(http::header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let url = req.uri.path_and_query().map_or("/", |p| p.as_str());
                // The model would not learn a longer URL: it is not queued either. The client key
                // is hashed by the model; its user agent is cut so the queue stays small.
                let ua = &ua[..ua.floor_char_boundary(MAX_UA_IN_KEY)];
                (url.len() <= self.nps.settings().model.max_url_len)
                    .then(|| (format!("{} {ua}", ctx.peer.ip()), url.to_owned()))
            })
            .flatten();
        ctx.extensions.insert(Seen {
            learn,
            prefetch,
            probe,
            get: req.method == Method::GET,
            via_listener: req.extensions.get::<ViaPrefetchListener>().is_some(),
        });
        None
    }

    fn response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {
        if self.munges(ctx, res) {
            // The page sent is not the file's bytes: its validator becomes weak (RFC 9110
            // §8.8.1) and it offers no ranges, which would count in the file's bytes.
            if let Some(tag) = res
                .headers
                .get(http::header::ETAG)
                .and_then(|v| v.to_str().ok())
            {
                if !tag.starts_with("W/") {
                    if let Ok(weak) = http::HeaderValue::from_str(&format!("W/{tag}")) {
                        res.headers.insert(http::header::ETAG, weak);
                    }
                }
            }
            res.headers.remove(http::header::ACCEPT_RANGES);
        }
        // What follows is for pages a client asked for on demand.
        if !slipstream_node::html::is_page(res) {
            return;
        }
        let Some((url, via_listener)) = ctx.extensions.get::<Seen>().and_then(|s| {
            let (_, url) = s.learn.as_ref()?;
            Some((url.clone(), s.via_listener))
        }) else {
            return;
        };
        // A page names the prefetch listener, so that the agent's first hint request after it
        // goes there too, at the listener's priority, not on demand's port.
        if !via_listener {
            if let Some(v) = self
                .nps
                .prefetch_base()
                .and_then(|b| http::HeaderValue::from_str(&b).ok())
            {
                res.headers.insert(crate::PREFETCH_BASE_HEADER, v);
            }
        }
        // When it was served, for its agent to report back with its response time (what
        // prefetching costs demand, `cost_target`).
        if let Some(ms) = self.nps.served_at_ms() {
            res.headers
                .insert(crate::SERVED_HEADER, http::HeaderValue::from(ms));
            ctx.extensions.insert(ServedAt(ms));
        }
        // A page whose agent would only be told to wait says so itself, so that no hint
        // request is made for nothing.
        if let Some(wait) = self.nps.page_hint_wait() {
            // Rounded up: an agent that comes back early is refused again.
            let ms = u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
            res.headers
                .insert(crate::HINTS_WAIT_HEADER, http::HeaderValue::from(ms));
            let at_unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            ctx.extensions.insert(PageWait { ms, at_unix_ms });
        }
        if self.nps.settings().speculation_rules {
            let q: String = form_urlencoded::byte_serialize(url.as_bytes()).collect();
            if let Ok(v) =
                http::HeaderValue::from_str(&format!("\"/_slipstream/speculationrules?url={q}\""))
            {
                res.headers.insert("speculation-rules", v);
            }
        }
    }

    fn body_filter(
        &self,
        ctx: &mut Ctx,
        res: &response::Parts,
    ) -> Option<Box<dyn slipstream_node::body::BodyFilter>> {
        if !self.munges(ctx, res) {
            return None;
        }
        let munger = Munger::new(
            self.nps.prefetch_base().as_deref(),
            ctx.extensions.get::<PageWait>().copied(),
            ctx.extensions.get::<ServedAt>().copied(),
        );
        let handlers: [Arc<dyn slipstream_node::html::HtmlHandler>; 1] = [Arc::new(munger)];
        match slipstream_node::html::Rewriter::new(&handlers) {
            Ok(r) => Some(Box::new(r)),
            Err(e) => {
                tracing::error!(error = %e, "the munger's rewriter");
                None
            }
        }
    }

    fn logging(&self, ctx: &Ctx, res: &response::Parts) {
        let Some(seen) = ctx.extensions.get::<Seen>() else {
            return;
        };
        if seen.probe || !res.status.is_success() {
            return;
        }
        let bytes = res
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if seen.prefetch {
            self.nps.prefetch.add(bytes);
            if seen.via_listener {
                self.nps.via_listener.add(bytes);
            }
            return;
        }
        self.nps.demand.add(bytes);
        if let Some((_, url)) = &seen.learn {
            if crate::guard::personal_response(&res.headers) {
                // Neither learnt nor ever hinted (crate::guard).
                self.nps.personal.mark(url);
                self.nps.personal_not_learnt.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if let Some(learn) = &seen.learn {
            if self.queue.try_send(learn.clone()).is_err() {
                self.nps.unlearnt.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Trains `nps`'s model from a Common Log Format log (the paper's prototype trained offline
/// from a day's log, §7): its successful GETs in order, clients by address. Malformed lines
/// are passed over and counted; returns (requests learnt, lines passed over).
pub fn train_from_log(nps: &Nps, path: &std::path::Path) -> Result<(usize, u64), String> {
    let trace = slipstream_workload::trace::read_path_lenient(path)
        .map_err(|e| format!("cannot train from {}: {e}", path.display()))?;
    if trace.clients.len() != trace.requests.len() {
        return Err(format!(
            "cannot train from {}: it names no clients (a Common Log Format log is needed)",
            path.display()
        ));
    }
    let mut m = nps.model().lock();
    for (req, client) in trace.requests.iter().zip(&trace.clients) {
        m.learn(client, &req.key, !is_embedded(&req.key));
    }
    Ok((trace.requests.len(), trace.malformed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_munged_script_names_the_prefetch_listener_escaped() {
        assert_eq!(
            Munger::new(None, None, None).script,
            r#"<script src="/_slipstream/agent/register.js" data-prefetch defer></script>"#
        );
        assert_eq!(
            Munger::new(Some("http://127.0.0.1:8081"), None, None).script,
            r#"<script src="/_slipstream/agent/register.js" data-prefetch data-prefetch-base="http://127.0.0.1:8081" defer></script>"#
        );
        assert_eq!(
            Munger::new(
                Some("http://127.0.0.1:8081"),
                Some(PageWait {
                    ms: 4200,
                    at_unix_ms: 1_790_000_000_000
                }),
                Some(ServedAt(1234)),
            )
            .script,
            r#"<script src="/_slipstream/agent/register.js" data-prefetch data-prefetch-base="http://127.0.0.1:8081" data-hints-wait-ms="4200" data-hints-wait-at="1790000000000" data-served-ms="1234" defer></script>"#
        );
        assert_eq!(
            attribute_escaped(r#"http://x/"><script>&"#),
            "http://x/&quot;&gt;&lt;script&gt;&amp;"
        );
    }
}
