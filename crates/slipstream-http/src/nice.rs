//! A connection that gives way when the network path fills: TCP Nice's signal (paper 000 §4,
//! after Venkataramani et al.) read at the application level, for the prefetch listener.
//!
//! The kernel here offers no less-than-best-effort congestion control (only reno, cubic and
//! bbr), so a prefetch connection would compete for a bottleneck as hard as demand does. Nice's
//! idea needs no kernel change: a queue building at the bottleneck shows as a round-trip time
//! above the path's least. Every time hyper writes, [`Nice`] reads the connection's `TCP_INFO`
//! ([`slipstream_sys::tcp_info`]) and lets through only what fits a window of its own, which
//! [`Pacer`] sets once a round trip:
//!
//! - a round is **congested** when the smoothed RTT is above the least seen by more than
//!   `threshold_pct` per cent of the spread between the least and the greatest (Nice's t, 20 %
//!   by default), and by more than `floor` (so that the jitter of an idle path is no signal);
//! - a congested round halves the window, down to two segments (one segment would wait for the
//!   peer's delayed acknowledgement, and read as a longer round trip);
//! - congested at two segments, the connection **pauses**: one round trip, then two, four, …,
//!   at most `max_pause` (Nice's window below one packet: a probe every few round trips);
//! - a new connection starts at two segments (LEDBAT's initial window, RFC 6817); a round that
//!   is not congested, in which the window held the writer back, grows it: by doubling until
//!   the first congested round (slow start), then by one segment.
//!
//! A connection's least RTT is the path's, not its own: a connection opened while the
//! bottleneck's queue is full never sees the empty path, and would take the full queue for the
//! base and never back off. So the listener remembers the least RTT seen to each client
//! address ([`PathMemory`], for five minutes, the kernel's own window for it) and a new
//! connection starts from it. Measured, it made no difference: in the loopback experiment
//! (docs/experiments/000-network-loopback.md) demand was ×10.5 without it and ×10.8 with it,
//! the connections backing off at two segments either way; what is left is that there are
//! 80-odd of them, each with its own window.
//!
//! What the window counts is what the kernel holds unacknowledged: segments in flight and bytes
//! not yet sent. The kernel's own congestion control still runs underneath; this only ever
//! sends less than it would.
//!
//! Limits, stated: the smoothed RTT moves by an eighth of each new sample (RFC 6298's gain),
//! so by that arithmetic the connection notices a queue within a few acknowledgements but
//! needs a dozen or so to believe it gone; a
//! paused connection sends a probe at most every `max_pause`. Both make it slow to come back,
//! which is the side to err on for prefetching.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use slipstream_sys::TcpInfo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The smallest window, in segments.
const MIN_SEGMENTS: u64 = 2;
/// The first window, in segments: LEDBAT's (RFC 6817 §2.4.2), not the kernel's ten, since a
/// prefetch connection that opens into a full queue should add as little to it as it can.
const INITIAL_SEGMENTS: u64 = 2;
/// The largest window: past this the kernel's own window is the limit anyway.
const MAX_WINDOW: u64 = 16 << 20;
/// The shortest round the pacer counts: a loopback round trip is tens of microseconds, and a
/// decision every few of those would be all noise.
const MIN_ROUND: Duration = Duration::from_millis(1);
/// How long a writer held back by a full window waits before the pacer looks again, at most.
const MAX_RECHECK: Duration = Duration::from_millis(20);

/// How a paced connection backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NiceConfig {
    /// A round is congested when its RTT is more than this per cent of the way from the least
    /// RTT seen to the greatest (TCP Nice's t).
    pub threshold_pct: u8,
    /// ... and more than this above the least.
    pub floor: Duration,
    /// The longest pause between probes at the smallest window.
    pub max_pause: Duration,
}

impl Default for NiceConfig {
    fn default() -> Self {
        NiceConfig {
            threshold_pct: 20,
            floor: Duration::from_millis(1),
            max_pause: Duration::from_millis(500),
        }
    }
}

/// What every paced connection of a listener did, for its status.
#[derive(Debug, Default)]
pub struct NiceStats {
    /// Connections paced.
    pub connections: AtomicU64,
    /// Connections served unpaced because `TCP_INFO` could not be read.
    pub unpaced: AtomicU64,
    /// Congested rounds (each halved a window or began a pause).
    pub backoffs: AtomicU64,
    /// Pauses begun.
    pub pauses: AtomicU64,
    /// Times a writer was held back (a full window or a pause).
    pub holds: AtomicU64,
}

impl NiceStats {
    /// A copy of the counters.
    pub fn snapshot(&self) -> NiceSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NiceSnapshot {
            connections: get(&self.connections),
            unpaced: get(&self.unpaced),
            backoffs: get(&self.backoffs),
            pauses: get(&self.pauses),
            holds: get(&self.holds),
        }
    }
}

/// [`NiceStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NiceSnapshot {
    /// See [`NiceStats::connections`].
    pub connections: u64,
    /// See [`NiceStats::unpaced`].
    pub unpaced: u64,
    /// See [`NiceStats::backoffs`].
    pub backoffs: u64,
    /// See [`NiceStats::pauses`].
    pub pauses: u64,
    /// See [`NiceStats::holds`].
    pub holds: u64,
}

/// A listener's pacing: its configuration and the counters its connections share.
#[derive(Debug, Clone, Default)]
pub struct Pacing {
    /// How to back off.
    pub config: NiceConfig,
    /// What the connections did.
    pub stats: Arc<NiceStats>,
    /// The least RTT seen to each client address.
    pub paths: Arc<PathMemory>,
}

/// How long a path's least RTT is remembered (the kernel's `tcp_min_rtt_wlen`, 300 s).
const PATH_MEMORY: Duration = Duration::from_secs(300);
/// Addresses remembered at most; when full, those not seen within [`PATH_MEMORY`] go, and if
/// none has, all.
const PATHS_KEPT: usize = 65_536;

/// The least round-trip time seen to each client address, shared by a listener's connections.
#[derive(Debug, Default)]
pub struct PathMemory {
    paths: parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, (Duration, Instant)>>,
}

impl PathMemory {
    /// The least RTT to `ip` seen within the memory's window, if any.
    pub fn least(&self, ip: std::net::IpAddr, now: Instant) -> Option<Duration> {
        let paths = self.paths.lock();
        let (rtt, seen) = paths.get(&ip)?;
        (now.saturating_duration_since(*seen) < PATH_MEMORY).then_some(*rtt)
    }

    /// Notes `rtt` as seen to `ip` at `now`: kept if it is the least in the window.
    pub fn note(&self, ip: std::net::IpAddr, rtt: Duration, now: Instant) {
        let mut paths = self.paths.lock();
        if paths.len() >= PATHS_KEPT && !paths.contains_key(&ip) {
            paths.retain(|_, (_, seen)| now.saturating_duration_since(*seen) < PATH_MEMORY);
            if paths.len() >= PATHS_KEPT {
                paths.clear();
            }
        }
        let e = paths.entry(ip).or_insert((rtt, now));
        if rtt <= e.0 || now.saturating_duration_since(e.1) >= PATH_MEMORY {
            *e = (rtt, now);
        }
    }
}

/// What the pacer lets a writer do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Write at most this many bytes.
    Write(usize),
    /// Write nothing before this instant.
    Wait(Instant),
}

/// The window of one connection (no I/O: it is told what `TCP_INFO` said and when).
#[derive(Debug)]
pub struct Pacer {
    config: NiceConfig,
    min_rtt: Option<Duration>,
    max_rtt: Duration,
    /// Bytes the connection may hold unacknowledged; 0 until the first reading gives the MSS.
    window: u64,
    slow_start: bool,
    round_end: Option<Instant>,
    /// A congested reading in this round.
    congested: bool,
    /// The window held the writer back in this round.
    limited: bool,
    pause_until: Option<Instant>,
    /// Round trips the next pause lasts.
    pause_rounds: u32,
}

/// What one reading changed, for the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events {
    /// A congested round ended.
    pub backoff: bool,
    /// A pause began.
    pub pause: bool,
}

impl Pacer {
    /// A pacer for a new connection.
    pub fn new(config: NiceConfig) -> Pacer {
        Pacer {
            config,
            min_rtt: None,
            max_rtt: Duration::ZERO,
            window: 0,
            slow_start: true,
            round_end: None,
            congested: false,
            limited: false,
            pause_until: None,
            pause_rounds: 0,
        }
    }

    /// Starts from the least RTT seen on this path by earlier connections.
    pub fn with_path_min(mut self, min: Option<Duration>) -> Pacer {
        self.min_rtt = min;
        self
    }

    /// The window now, in bytes.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The least RTT this connection knows of (its own, or its path's).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Whether a reading of `rtt` is congested against the RTTs seen so far.
    fn is_congested(&self, rtt: Duration) -> bool {
        let Some(min) = self.min_rtt else {
            return false;
        };
        let spread = self.max_rtt.saturating_sub(min);
        let over = (spread * u32::from(self.config.threshold_pct) / 100).max(self.config.floor);
        rtt > min + over
    }

    /// Takes a reading of the connection made at `now`, from a writer with `want` bytes to
    /// write, and says how much it may.
    pub fn gate(&mut self, now: Instant, info: &TcpInfo, want: usize) -> (Gate, Events) {
        let mut events = Events::default();
        let mss = u64::from(info.snd_mss.max(536));
        let floor_window = MIN_SEGMENTS * mss;
        if self.window == 0 {
            self.window = INITIAL_SEGMENTS * mss;
        }
        let rtt = info.rtt;
        // The kernel's least RTT is over every sample; the smoothed one is what is left when
        // the kernel cannot say.
        let seen_min = info.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.min_rtt = Some(self.min_rtt.map_or(seen_min, |m| m.min(seen_min)));
        self.max_rtt = self.max_rtt.max(rtt);
        if let Some(until) = self.pause_until {
            if now < until {
                return (Gate::Wait(until), events);
            }
            // The pause is over: a new round starts with what the probe brings back.
            self.pause_until = None;
            self.round_end = None;
        }
        if self.is_congested(rtt) {
            self.congested = true;
        }
        let round = rtt.max(MIN_ROUND);
        match self.round_end {
            None => self.round_end = Some(now + round),
            Some(end) if now >= end => {
                if self.congested {
                    events.backoff = true;
                    self.slow_start = false;
                    if self.window <= floor_window {
                        self.pause_rounds = (self.pause_rounds * 2).max(1);
                        let pause =
                            (round * self.pause_rounds).min(self.config.max_pause.max(round));
                        self.pause_until = Some(now + pause);
                        events.pause = true;
                    }
                    self.window = (self.window / 2).max(floor_window);
                } else {
                    self.pause_rounds = 0;
                    if self.limited {
                        let step = if self.slow_start { self.window } else { mss };
                        self.window = (self.window + step).min(MAX_WINDOW);
                    }
                }
                self.congested = false;
                self.limited = false;
                self.round_end = Some(now + round);
                if let Some(until) = self.pause_until {
                    return (Gate::Wait(until), events);
                }
            }
            Some(_) => {}
        }
        let outstanding = info.outstanding_bytes();
        if outstanding >= self.window {
            self.limited = true;
            let recheck = (rtt / 4).clamp(MIN_ROUND, MAX_RECHECK);
            return (Gate::Wait(now + recheck), events);
        }
        let room = usize::try_from(self.window - outstanding).unwrap_or(usize::MAX);
        if room < want {
            self.limited = true;
        }
        (Gate::Write(room.min(want)), events)
    }
}

/// A TCP stream whose writes go through a [`Pacer`] when the listener paces (and straight
/// through when it does not).
#[derive(Debug)]
pub struct Nice {
    inner: TcpStream,
    paced: Option<Paced>,
}

#[derive(Debug)]
struct Paced {
    pacer: Pacer,
    stats: Arc<NiceStats>,
    sleep: Pin<Box<Sleep>>,
    paths: Arc<PathMemory>,
    /// The peer's address, and the least RTT last noted for it.
    peer: Option<(std::net::IpAddr, Option<Duration>)>,
}

impl Nice {
    /// Wraps an accepted stream, paced by `pacing` if given and if its `TCP_INFO` can be read.
    pub fn new(inner: TcpStream, pacing: Option<&Pacing>) -> Nice {
        let paced = pacing.and_then(|p| match slipstream_sys::tcp_info(&inner) {
            Ok(_) => {
                p.stats.connections.fetch_add(1, Ordering::Relaxed);
                let ip = inner.peer_addr().ok().map(|a| a.ip());
                let known = ip.and_then(|ip| p.paths.least(ip, Instant::now()));
                Some(Paced {
                    pacer: Pacer::new(p.config).with_path_min(known),
                    stats: p.stats.clone(),
                    sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
                    paths: p.paths.clone(),
                    peer: ip.map(|ip| (ip, known)),
                })
            }
            Err(e) => {
                if p.stats.unpaced.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(error = %e, "cannot read TCP_INFO: connections are not paced");
                }
                None
            }
        });
        Nice { inner, paced }
    }
}

impl AsyncRead for Nice {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Nice {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let Some(paced) = this.paced.as_mut() else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        if buf.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        // A timer coarser than the wait may find it already over: look again, a few times.
        for _ in 0..4 {
            let info = match slipstream_sys::tcp_info(&this.inner) {
                Ok(info) => info,
                // The socket is failing: let the write say how.
                Err(_) => return Pin::new(&mut this.inner).poll_write(cx, buf),
            };
            let now = Instant::now();
            let (gate, events) = paced.pacer.gate(now, &info, buf.len());
            if let (Some((ip, noted)), Some(min)) = (paced.peer.as_mut(), paced.pacer.min_rtt()) {
                if noted.is_none_or(|n| min < n) {
                    paced.paths.note(*ip, min, now);
                    *noted = Some(min);
                }
            }
            if events.backoff {
                paced.stats.backoffs.fetch_add(1, Ordering::Relaxed);
            }
            if events.pause {
                paced.stats.pauses.fetch_add(1, Ordering::Relaxed);
            }
            match gate {
                Gate::Write(n) => return Pin::new(&mut this.inner).poll_write(cx, &buf[..n]),
                Gate::Wait(until) => {
                    paced.sleep.as_mut().reset(until);
                    if paced.sleep.as_mut().poll(cx).is_pending() {
                        paced.stats.holds.fetch_add(1, Ordering::Relaxed);
                        return Poll::Pending;
                    }
                    // Already due (a coarse timer): look again.
                }
            }
        }
        // Still held after several looks: come back on the next turn of the runtime.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.paced.is_none() {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        // Paced, the writer is told it cannot write vectored; should it all the same, the
        // first buffer that has anything goes through the pacer.
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        self.poll_write(cx, first)
    }

    fn is_write_vectored(&self) -> bool {
        self.paced.is_none() && self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    fn info(rtt_ms: u64, unacked: u32) -> TcpInfo {
        TcpInfo {
            rtt: Duration::from_millis(rtt_ms),
            rtt_var: Duration::ZERO,
            min_rtt: None,
            snd_mss: MSS,
            snd_cwnd: 10,
            unacked,
            notsent_bytes: Some(0),
        }
    }

    /// Readings a round apart (`rtt_ms` each), the writer always wanting more than the window
    /// and the connection holding `unacked` segments; returns the window after each and the
    /// events.
    fn rounds(
        p: &mut Pacer,
        t: &mut Instant,
        rtt_ms: u64,
        unacked: u32,
        n: usize,
    ) -> Vec<(u64, Events)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let _ = p.gate(*t, &info(rtt_ms, unacked), usize::MAX);
            *t += Duration::from_millis(rtt_ms.max(1));
            let (_, e) = p.gate(*t, &info(rtt_ms, unacked), usize::MAX);
            out.push((p.window(), e));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn an_uncongested_window_doubles_while_it_holds_the_writer_back() {
        let mut p = Pacer::new(NiceConfig::default());
        let mut t = Instant::now();
        // The connection holds 2 segments: the first window (2 segments) is full.
        let w = rounds(&mut p, &mut t, 10, 2, 3);
        assert_eq!(
            w.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            [4_000, 8_000, 16_000]
        );
        assert!(w.iter().all(|(_, e)| *e == Events::default()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_the_writer_does_not_fill_does_not_grow() {
        let mut p = Pacer::new(NiceConfig::default());
        let mut t = Instant::now();
        // Small writes on an empty connection, round after round.
        for _ in 0..4 {
            let (g, _) = p.gate(t, &info(10, 0), 100);
            assert_eq!(g, Gate::Write(100));
            t += Duration::from_millis(10);
        }
        assert_eq!(p.window(), 2_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rising_rtt_halves_the_window_and_ends_slow_start() {
        let mut p = Pacer::new(NiceConfig::default());
        let mut t = Instant::now();
        rounds(&mut p, &mut t, 10, 10, 2); // 2 → 4 → 8 segments
        assert_eq!(p.window(), 8_000);
        // A queue: 10 ms → 50 ms, far past 1 ms and 20 % of the spread.
        let w = rounds(&mut p, &mut t, 50, 10, 1);
        assert_eq!(w[0].0, 4_000);
        assert!(w[0].1.backoff && !w[0].1.pause);
        // The queue drains. The round begun at 50 ms runs out first (four readings 10 ms
        // apart); then growth is one segment a round, not doubling.
        let w = rounds(&mut p, &mut t, 10, 20, 7);
        assert_eq!(
            w.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            [4_000, 4_000, 4_000, 4_000, 5_000, 6_000, 7_000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_under_the_floor_is_no_signal() {
        let mut p = Pacer::new(NiceConfig::default());
        let mut t = Instant::now();
        // 0.1 ms paths whose RTT wobbles to 0.9 ms: under the 1 ms floor.
        for (i, us) in [100u64, 900, 100, 900, 100, 900].into_iter().enumerate() {
            let mut i_ = info(0, 10);
            i_.rtt = Duration::from_micros(us);
            let (_, e) = p.gate(t, &i_, usize::MAX);
            assert!(!e.backoff, "reading {i}");
            t += Duration::from_millis(1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn congested_at_the_smallest_window_the_connection_pauses_longer_each_time() {
        let cfg = NiceConfig {
            max_pause: Duration::from_millis(300),
            ..NiceConfig::default()
        };
        let mut p = Pacer::new(cfg);
        let mut t = Instant::now();
        rounds(&mut p, &mut t, 10, 10, 1);
        // Congested every round: 4 → 2 segments, then pauses.
        let mut pauses = Vec::new();
        for _ in 0..12 {
            let (g, e) = p.gate(t, &info(100, 2), usize::MAX);
            if e.pause {
                let Gate::Wait(until) = g else {
                    panic!("a pause that lets the writer on")
                };
                pauses.push((until - t).as_millis());
                // Nothing is let through before it ends.
                let (g2, _) = p.gate(t + Duration::from_millis(1), &info(100, 0), usize::MAX);
                assert_eq!(g2, Gate::Wait(until));
                t = until;
            } else {
                t += Duration::from_millis(100);
            }
        }
        assert_eq!(p.window(), 2_000);
        assert!(pauses.len() >= 3, "{pauses:?}");
        assert_eq!(&pauses[..3], [100, 200, 300]);
        assert!(pauses.iter().all(|&ms| ms <= 300), "{pauses:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_opened_into_a_full_queue_backs_off_from_the_paths_least_rtt() {
        let ip: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        let paths = PathMemory::default();
        let mut t = Instant::now();
        // An earlier connection saw the empty path: 12 ms.
        paths.note(ip, Duration::from_millis(12), t);
        // A new one opens into a standing queue: every reading is 300 ms.
        let run = |min: Option<Duration>, t: &mut Instant| {
            let mut p = Pacer::new(NiceConfig::default()).with_path_min(min);
            rounds(&mut p, t, 300, 2, 3).iter().any(|(_, e)| e.backoff)
        };
        assert!(
            !run(None, &mut t),
            "alone, the queue is its base: no back-off"
        );
        assert!(
            run(paths.least(ip, t), &mut t),
            "from the path's 12 ms it backs off"
        );
        // A larger RTT later does not replace the least; five minutes on, it is forgotten.
        paths.note(ip, Duration::from_millis(40), t);
        assert_eq!(paths.least(ip, t), Some(Duration::from_millis(12)));
        t += PATH_MEMORY;
        assert_eq!(paths.least(ip, t), None);
        paths.note(ip, Duration::from_millis(40), t);
        assert_eq!(paths.least(ip, t), Some(Duration::from_millis(40)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_window_holds_the_writer_and_room_is_let_through() {
        let mut p = Pacer::new(NiceConfig::default());
        let t = Instant::now();
        let (g, _) = p.gate(t, &info(10, 1), 100_000);
        assert_eq!(g, Gate::Write(1_000), "2 segments, 1 out");
        let (g, _) = p.gate(t, &info(10, 2), 100);
        assert_eq!(g, Gate::Wait(t + Duration::from_micros(2_500)));
    }
}
