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
//! So by default ([`NiceConfig::shared`]) a client address's connections share one window
//! ([`SharedPacer`], RFC 3124's shared congestion state): every connection's reading feeds one
//! congestion signal, and together they write at most a window a round trip, so that a
//! client's prefetching backs off as one flow however many connections carry it. The
//! smallest window is then two segments a round trip for the address, not for each
//! connection. Measured on the loopback experiment's congested 1 Mbit/s link, demand was then
//! ×1.02–1.06 of no prefetching (×10.5 with a window a connection). On the same link with room
//! to spare, the shared window let through 41–44 % of what was prefetched without back-off,
//! where a window a connection let all of it through: a hint list's own burst queues for
//! hundreds of milliseconds behind a sub-millisecond least RTT and reads as congestion. That is
//! why `rtt_backoff` is off by default.
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
    /// One window for all the connections to a client address ([`SharedPacer`]), not one
    /// each ([`Pacer`]).
    pub shared: bool,
}

impl Default for NiceConfig {
    fn default() -> Self {
        NiceConfig {
            threshold_pct: 20,
            floor: Duration::from_millis(1),
            max_pause: Duration::from_millis(500),
            shared: true,
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
    /// The least RTT seen to each client address (connections with windows of their own).
    pub paths: Arc<PathMemory>,
    /// The windows client addresses' connections share (with [`NiceConfig::shared`]).
    pub clients: Arc<ClientWindows>,
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

/// The window of one connection, or of one client address (no I/O: it is told what
/// `TCP_INFO` said and when): the least and greatest RTT seen, the window, and the rounds.
#[derive(Debug)]
struct Window {
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

impl Window {
    fn new(config: NiceConfig) -> Window {
        Window {
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

    /// Whether a reading of `rtt` is congested against the RTTs seen so far.
    fn is_congested(&self, rtt: Duration) -> bool {
        let Some(min) = self.min_rtt else {
            return false;
        };
        let spread = self.max_rtt.saturating_sub(min);
        let over = (spread * u32::from(self.config.threshold_pct) / 100).max(self.config.floor);
        rtt > min + over
    }

    /// Takes a reading made at `now` and ends the round if it is due; `Some(until)` while
    /// the writer must pause.
    fn observe(&mut self, now: Instant, info: &TcpInfo) -> (Option<Instant>, Events) {
        let mut events = Events::default();
        let mss = mss(info);
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
                return (Some(until), events);
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
            }
            Some(_) => {}
        }
        (self.pause_until, events)
    }
}

fn mss(info: &TcpInfo) -> u64 {
    u64::from(info.snd_mss.max(536))
}

/// The window of one connection: it may hold at most the window unacknowledged.
#[derive(Debug)]
pub struct Pacer {
    w: Window,
}

impl Pacer {
    /// A pacer for a new connection.
    pub fn new(config: NiceConfig) -> Pacer {
        Pacer {
            w: Window::new(config),
        }
    }

    /// Starts from the least RTT seen on this path by earlier connections.
    pub fn with_path_min(mut self, min: Option<Duration>) -> Pacer {
        self.w.min_rtt = min;
        self
    }

    /// The window now, in bytes.
    pub fn window(&self) -> u64 {
        self.w.window
    }

    /// The least RTT this connection knows of (its own, or its path's).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.w.min_rtt
    }

    /// Takes a reading of the connection made at `now`, from a writer with `want` bytes to
    /// write, and says how much it may.
    pub fn gate(&mut self, now: Instant, info: &TcpInfo, want: usize) -> (Gate, Events) {
        let (pause, events) = self.w.observe(now, info);
        if let Some(until) = pause {
            return (Gate::Wait(until), events);
        }
        let outstanding = info.outstanding_bytes();
        if outstanding >= self.w.window {
            self.w.limited = true;
            let recheck = (info.rtt / 4).clamp(MIN_ROUND, MAX_RECHECK);
            return (Gate::Wait(now + recheck), events);
        }
        let room = usize::try_from(self.w.window - outstanding).unwrap_or(usize::MAX);
        if room < want {
            self.w.limited = true;
        }
        (Gate::Write(room.min(want)), events)
    }
}

/// One window for all of a listener's connections to one client address, so that they back
/// off as one flow (the shared congestion state of RFC 3124's congestion manager). A
/// connection's own unacknowledged bytes say nothing of its neighbours', and a neighbour that
/// has stopped writing cannot be asked, so the window is spent as a rate: the connections
/// together write at most a window a round trip (a token bucket one window deep, filled at
/// the window over the latest RTT read). Any connection's reading is the path's: its RTT
/// feeds the one congestion signal, its congested round halves the one window, and a pause
/// holds every connection.
#[derive(Debug)]
pub struct SharedPacer {
    w: Window,
    /// Bytes the connections may write now.
    tokens: u64,
    filled_at: Option<Instant>,
    /// The last reading's round, for the fill rate.
    round: Duration,
    /// The last reading, to forget a client address that has gone quiet.
    used_at: Option<Instant>,
}

impl SharedPacer {
    /// The window of a client address not seen before.
    pub fn new(config: NiceConfig) -> SharedPacer {
        SharedPacer {
            w: Window::new(config),
            tokens: 0,
            filled_at: None,
            round: MIN_ROUND,
            used_at: None,
        }
    }

    /// The window now, in bytes a round trip.
    pub fn window(&self) -> u64 {
        self.w.window
    }

    /// Takes a reading of one of the address's connections made at `now`, from a writer with
    /// `want` bytes to write, and says how much it may.
    pub fn gate(&mut self, now: Instant, info: &TcpInfo, want: usize) -> (Gate, Events) {
        let first = self.w.window == 0;
        self.used_at = Some(now);
        let (pause, events) = self.w.observe(now, info);
        self.round = info.rtt.max(MIN_ROUND);
        if first {
            // The bucket starts full: the first window goes at once, as a connection's would.
            self.tokens = self.w.window;
        }
        if let Some(until) = pause {
            // Nothing is saved up over a pause: the probe after it is one window at most.
            self.filled_at = Some(until);
            return (Gate::Wait(until), events);
        }
        let since = self
            .filled_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let add = u128::from(self.w.window) * since.as_nanos() / self.round.as_nanos().max(1);
        self.tokens = self
            .tokens
            .saturating_add(u64::try_from(add).unwrap_or(u64::MAX))
            .min(self.w.window);
        self.filled_at = Some(now);
        // Less than a segment (or what is wanted, if less) waits for the bucket to fill to it.
        let need = (want as u64).min(mss(info));
        if self.tokens < need {
            self.w.limited = true;
            let short = u128::from(need - self.tokens);
            let nanos = short * self.round.as_nanos() / u128::from(self.w.window.max(1));
            let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
                .clamp(Duration::from_micros(100), self.round);
            return (Gate::Wait(now + wait), events);
        }
        let n = self.tokens.min(want as u64);
        self.tokens -= n;
        if n < want as u64 {
            self.w.limited = true;
        }
        (
            Gate::Write(usize::try_from(n).unwrap_or(usize::MAX)),
            events,
        )
    }

    /// Gives back `bytes` a [`Gate::Write`] let through that the socket did not take.
    pub fn unspent(&mut self, bytes: usize) {
        self.tokens = self.tokens.saturating_add(bytes as u64).min(self.w.window);
    }
}

/// Addresses given a window of their own at most; when full, those whose connections have all
/// closed go.
const CLIENTS_KEPT: usize = 65_536;

/// The shared windows of a listener's client addresses ([`SharedPacer`]).
#[derive(Debug, Default)]
pub struct ClientWindows {
    windows: parking_lot::Mutex<
        std::collections::HashMap<std::net::IpAddr, Arc<parking_lot::Mutex<SharedPacer>>>,
    >,
}

impl ClientWindows {
    /// The window of `ip`: the one its open connections share, or the one it had within
    /// five minutes (its least RTT still stands), or a new one.
    pub fn of(
        &self,
        ip: std::net::IpAddr,
        config: NiceConfig,
        now: Instant,
    ) -> Arc<parking_lot::Mutex<SharedPacer>> {
        let mut windows = self.windows.lock();
        if windows.len() >= CLIENTS_KEPT && !windows.contains_key(&ip) {
            windows.retain(|_, w| Arc::strong_count(w) > 1);
        }
        let w = windows
            .entry(ip)
            .or_insert_with(|| Arc::new(parking_lot::Mutex::new(SharedPacer::new(config))));
        let stale = Arc::strong_count(w) == 1
            && w.lock()
                .used_at
                .is_some_and(|t| now.saturating_duration_since(t) >= PATH_MEMORY);
        if stale {
            *w = Arc::new(parking_lot::Mutex::new(SharedPacer::new(config)));
        }
        w.clone()
    }

    /// Addresses with a window.
    pub fn len(&self) -> usize {
        self.windows.lock().len()
    }

    /// Whether no address has a window.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A TCP stream whose writes go through a [`Pacer`] of its own or its client address's
/// [`SharedPacer`] when the listener paces (and straight through when it does not).
#[derive(Debug)]
pub struct Nice {
    inner: TcpStream,
    paced: Option<Paced>,
}

#[derive(Debug)]
struct Paced {
    window: PacedWindow,
    stats: Arc<NiceStats>,
    sleep: Pin<Box<Sleep>>,
}

/// A connection's own window, or its client address's.
#[derive(Debug)]
enum PacedWindow {
    Own {
        pacer: Pacer,
        paths: Arc<PathMemory>,
        /// The peer's address, and the least RTT last noted for it.
        peer: Option<(std::net::IpAddr, Option<Duration>)>,
    },
    Shared(Arc<parking_lot::Mutex<SharedPacer>>),
}

impl PacedWindow {
    fn gate(&mut self, now: Instant, info: &TcpInfo, want: usize) -> (Gate, Events) {
        match self {
            PacedWindow::Own { pacer, paths, peer } => {
                let out = pacer.gate(now, info, want);
                if let (Some((ip, noted)), Some(min)) = (peer.as_mut(), pacer.min_rtt()) {
                    if noted.is_none_or(|n| min < n) {
                        paths.note(*ip, min, now);
                        *noted = Some(min);
                    }
                }
                out
            }
            PacedWindow::Shared(w) => w.lock().gate(now, info, want),
        }
    }

    /// Gives back bytes let through but not written.
    fn unspent(&mut self, bytes: usize) {
        if let PacedWindow::Shared(w) = self {
            if bytes > 0 {
                w.lock().unspent(bytes);
            }
        }
    }
}

impl Nice {
    /// Wraps an accepted stream, paced by `pacing` if given and if its `TCP_INFO` can be read.
    pub fn new(inner: TcpStream, pacing: Option<&Pacing>) -> Nice {
        let paced = pacing.and_then(|p| match slipstream_sys::tcp_info(&inner) {
            Ok(_) => {
                p.stats.connections.fetch_add(1, Ordering::Relaxed);
                let ip = inner.peer_addr().ok().map(|a| a.ip());
                let now = Instant::now();
                let window = match ip {
                    Some(ip) if p.config.shared => {
                        PacedWindow::Shared(p.clients.of(ip, p.config, now))
                    }
                    _ => {
                        let known = ip.and_then(|ip| p.paths.least(ip, now));
                        PacedWindow::Own {
                            pacer: Pacer::new(p.config).with_path_min(known),
                            paths: p.paths.clone(),
                            peer: ip.map(|ip| (ip, known)),
                        }
                    }
                };
                Some(Paced {
                    window,
                    stats: p.stats.clone(),
                    sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
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
            let (gate, events) = paced.window.gate(Instant::now(), &info, buf.len());
            if events.backoff {
                paced.stats.backoffs.fetch_add(1, Ordering::Relaxed);
            }
            if events.pause {
                paced.stats.pauses.fetch_add(1, Ordering::Relaxed);
            }
            match gate {
                Gate::Write(n) => {
                    let written = Pin::new(&mut this.inner).poll_write(cx, &buf[..n]);
                    // What the socket did not take (its buffer full) is not spent.
                    let took = match &written {
                        Poll::Ready(Ok(k)) => *k,
                        _ => 0,
                    };
                    paced.window.unspent(n.saturating_sub(took));
                    return written;
                }
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

    fn shared_rounds(p: &mut SharedPacer, t: &mut Instant, rtt_ms: u64, conns: usize) -> u64 {
        // One round: every connection asks for all it can, a tenth of a round apart.
        let mut written = 0;
        for _ in 0..10 {
            for _ in 0..conns {
                if let (Gate::Write(n), _) = p.gate(*t, &info(rtt_ms, 0), usize::MAX) {
                    written += n as u64;
                }
            }
            *t += Duration::from_micros(rtt_ms * 100);
        }
        written
    }

    #[tokio::test(start_paused = true)]
    async fn connections_to_one_address_share_one_window() {
        let mut p = SharedPacer::new(NiceConfig::default());
        let t = Instant::now();
        // The first window (2 segments) goes at once, to whichever connection asks first.
        let (g, _) = p.gate(t, &info(10, 0), 100_000);
        assert_eq!(g, Gate::Write(2_000));
        // A second connection finds nothing left: it waits for a segment's worth, half a
        // round at two segments a round.
        let (g, _) = p.gate(t, &info(10, 0), 100_000);
        assert_eq!(g, Gate::Wait(t + Duration::from_millis(5)));
        // What a socket did not take is given back to the others.
        p.unspent(1_500);
        let (g, _) = p.gate(t, &info(10, 0), 100_000);
        assert_eq!(g, Gate::Write(1_500));
        // Five connections writing all they can for a round write what the bucket held and
        // what a round fills it with: two windows at most, not five.
        let mut t = t + Duration::from_millis(10);
        let five = shared_rounds(&mut p, &mut t, 10, 5);
        assert!(
            five <= 2 * p.window(),
            "{five} in a round at {}",
            p.window()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_one_connection_sees_slows_every_connection_of_the_address() {
        let mut p = SharedPacer::new(NiceConfig::default());
        let mut t = Instant::now();
        for _ in 0..4 {
            shared_rounds(&mut p, &mut t, 10, 2);
        }
        let _ = p.gate(t, &info(10, 0), 100);
        let grown = p.window();
        assert!(grown >= 16_000, "{grown}");
        // One connection reads a queue (10 → 60 ms) in the middle of a round: the window
        // halves for both when it ends.
        t += Duration::from_millis(5);
        let (_, e) = p.gate(t, &info(60, 0), 100);
        assert!(!e.backoff, "the round is not over yet");
        t += Duration::from_millis(5);
        let (_, e) = p.gate(t, &info(10, 0), 100);
        assert!(e.backoff, "the other connection ends the congested round");
        assert_eq!(p.window(), grown / 2);
        // Congested round after round, the address comes down to two segments and pauses:
        // every connection waits.
        let mut paused = None;
        for _ in 0..20 {
            t += Duration::from_millis(60);
            if let (Gate::Wait(until), e) = p.gate(t, &info(60, 0), 100) {
                if e.pause {
                    paused = Some(until);
                    break;
                }
            }
        }
        let until = paused.expect("a pause");
        assert_eq!(p.window(), 2_000);
        let (g, _) = p.gate(t + Duration::from_millis(1), &info(10, 0), 100);
        assert_eq!(g, Gate::Wait(until), "the other connection is held too");
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_keeps_its_window_while_connected_and_forgets_it_when_quiet() {
        let clients = ClientWindows::default();
        let a: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        let b: std::net::IpAddr = "10.0.0.3".parse().unwrap();
        let cfg = NiceConfig::default();
        let t = Instant::now();
        let one = clients.of(a, cfg, t);
        let two = clients.of(a, cfg, t);
        assert!(Arc::ptr_eq(&one, &two), "one address, one window");
        assert!(!Arc::ptr_eq(&one, &clients.of(b, cfg, t)));
        let _ = one.lock().gate(t, &info(10, 0), 100);
        // Connected, the window stands however long; all connections closed, it is
        // forgotten after the path memory's window.
        let later = t + PATH_MEMORY;
        assert!(Arc::ptr_eq(&one, &clients.of(a, cfg, later)));
        drop((one, two));
        let fresh = clients.of(a, cfg, later);
        assert_eq!(fresh.lock().window(), 0, "a new window");
        assert_eq!(clients.len(), 2);
    }
}
