//! TCP Reno as ns-2 (2.35) models it: a one-way `Agent/TCP/Reno` sender and an
//! `Agent/TCPSink` receiver that ACKs every segment. Both are pure state machines: they are told
//! what arrived and when, and answer with what to send and when to wake them. Sequence numbers
//! count segments from 0, as in ns-2; an ACK carries the highest in-order segment received.
//!
//! The rules follow ns-2's `tcp.cc` and `renotcp.cc` (the function names in comments are
//! theirs): the window is `min(cwnd + dupwnd, window_)` truncated to whole packets,
//! `send_much` fills it, three duplicate ACKs trigger `dupack_action` (fast retransmit, halve,
//! inflate by `dupwnd_`), a new ACK deflates and opens the window (`opencwnd`), and the
//! retransmission timer follows `rtt_update` / `rtt_timeout` with `tcpTick_` granularity,
//! exponential back-off and Karn's rule.
//!
//! A sender can also be a low-priority TCP Nice sender ([`Congestion::Nice`]): the same Reno
//! machine with [`crate::nice`]'s early-congestion detector plugged in. A Reno sender never
//! consults it, so Reno's behaviour (and its agreement with ns-2) is unchanged.

use crate::nice::{self, Nice, Pace};
use crate::time::{Nanos, MILLI, SECOND};

/// How a sender responds to congestion.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Congestion {
    /// TCP Reno as ns-2 models it: loss is the only congestion signal.
    #[default]
    Reno,
    /// TCP Nice (OSDI 2002): Reno that also halves its window on early congestion (rising
    /// RTTs) and may go below one packet, so that it uses only spare bandwidth.
    Nice(nice::Config),
}

/// TCP parameters, with ns-2's names in the docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpConfig {
    /// `packetSize_`: payload bytes per segment.
    pub payload_bytes: u32,
    /// TCP/IP header bytes added to every segment and ACK (`tcpip_base_hdr_size_`).
    pub header_bytes: u32,
    /// `window_`: the receiver window, in packets; caps the sender.
    pub window: u32,
    /// `windowInit_`: the initial congestion window, in packets.
    pub window_init: u32,
    /// `numdupacks_`: duplicate ACKs that trigger fast retransmit.
    pub dupack_threshold: u32,
    /// `tcpTick_`: granularity of RTT measurement.
    pub tick: Nanos,
    /// `minrto_`.
    pub min_rto: Nanos,
    /// `rtxcur_init_`: the retransmission timeout before any RTT sample.
    pub initial_rto: Nanos,
    /// `maxrto_`.
    pub max_rto: Nanos,
    /// `precisionReduce_` (true in 2.35): window halving in floating point rather than whole
    /// packets.
    pub precision_reduce: bool,
    /// `singledup_` (limited transmit): one new segment on each of the first duplicate ACKs.
    pub limited_transmit: bool,
    /// `boot_time_`: the phase of the TCP clock, which shifts how RTTs round to ticks.
    pub boot_time: Nanos,
    /// `delay_growth_`: the ACK of segment 0 stands for the handshake, so the window stays at
    /// `windowInit_` until then (ns-2 sets it back on that ACK).
    pub delay_growth: bool,
    /// ns-2 sends segment 0 as `packetSize_` bytes on the wire, without the header its other
    /// segments carry (seen in its packet traces); modelled so both engines time it alike.
    pub first_segment_without_header: bool,
    /// `syn_`: model the connection handshake. Segment 0 is a header-only SYN sent with a
    /// window of one, its ACK stands for the SYN-ACK, and the data follows as segments 1..n
    /// (one extra round trip, as in ns-2).
    pub syn: bool,
    /// Bytes of an HTTP request the client sends before the response (0: not modelled, as in
    /// paper 003). The request travels on its own segments from the client; the response
    /// starts when the server has all of it. With `syn`, the handshake happens on the
    /// request's side (client SYN, server ACK, request), and the response follows without a
    /// second one, as on a real connection.
    pub request_bytes: u32,
}

/// The ns-2 release whose TCP timer defaults a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// Debian's ns-2.35: minimum RTO 0.2 s, initial RTO 3 s, maximum 60 s.
    Ns235,
    /// The paper's time (ns-2.1b9 to 2.28): minimum RTO 1 s, initial 6 s, `precisionReduce_`
    /// and `updated_rttvar_` off.
    Ns226,
}

impl Era {
    /// Parses "2.35" or "2.26".
    pub fn parse(s: &str) -> Option<Era> {
        match s {
            "2.35" => Some(Era::Ns235),
            "2.26" => Some(Era::Ns226),
            _ => None,
        }
    }

    /// The era's defaults.
    pub fn config(self) -> TcpConfig {
        match self {
            Era::Ns235 => TcpConfig::ns2_235(),
            Era::Ns226 => TcpConfig::ns2_226(),
        }
    }
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Era::Ns235 => "2.35",
            Era::Ns226 => "2.26",
        })
    }
}

impl TcpConfig {
    /// ns-2.35's defaults with the reference model's settings (Debian's ns2).
    pub fn ns2_235() -> TcpConfig {
        TcpConfig {
            payload_bytes: 512,
            header_bytes: 40,
            window: 20,
            window_init: 2,
            dupack_threshold: 3,
            tick: 10 * MILLI,
            min_rto: 200 * MILLI,
            initial_rto: 3 * SECOND,
            max_rto: 60 * SECOND,
            precision_reduce: true,
            limited_transmit: true,
            boot_time: 0,
            delay_growth: true,
            first_segment_without_header: true,
            syn: false,
            request_bytes: 0,
        }
    }

    /// The defaults of the paper's time (ns-2.1b9 to 2.28): 1 s minimum RTO, 6 s initial RTO.
    pub fn ns2_226() -> TcpConfig {
        TcpConfig {
            min_rto: SECOND,
            initial_rto: 6 * SECOND,
            max_rto: 100_000 * SECOND,
            precision_reduce: false,
            ..TcpConfig::ns2_235()
        }
    }

    /// Bytes on the wire of segment `seq`.
    pub fn segment_bytes(&self, seq: u32) -> u32 {
        match (seq, self.syn) {
            (0, true) => self.header_bytes,
            (0, false) if self.first_segment_without_header => self.payload_bytes,
            _ => self.payload_bytes + self.header_bytes,
        }
    }

    /// Segments on the wire for `data_segments` of data: one more with the SYN.
    pub fn wire_segments(&self, data_segments: u32) -> u32 {
        data_segments + u32::from(self.syn)
    }

    /// Segments needed for `bytes` of payload (at least one).
    pub fn segments(&self, bytes: u64) -> u32 {
        bytes.div_ceil(u64::from(self.payload_bytes)).max(1) as u32
    }
}

/// What the sender wants done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Transmit segment `seq`.
    Send {
        /// Segment number.
        seq: u32,
        /// Whether it was sent before.
        retransmission: bool,
    },
    /// Call [`Sender::on_timeout`] at this time with this generation (earlier timers are void).
    Timer {
        /// When.
        at: Nanos,
        /// Generation: a timeout whose generation is not the latest is ignored.
        generation: u64,
    },
    /// The last segment was acknowledged.
    Done,
    /// Call [`Sender::on_wake`] at this time: a Nice sender whose window is below one packet
    /// waits before its next packet.
    Wake {
        /// When.
        at: Nanos,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CwndAction {
    None,
    Dupack,
    Timeout,
    Exited,
}

// ns-2's fixed-point RTT estimator: srtt scaled by 2^3, rttvar by 2^2, both in ticks.
const T_SRTT_BITS: u32 = 3;
const T_RTTVAR_BITS: u32 = 2;
const RTTVAR_EXP: u32 = 2;

/// The sending side of one transfer.
#[derive(Debug, Clone)]
pub struct Sender {
    cfg: TcpConfig,
    /// `curseq_`: segments to send.
    total: i64,
    cwnd: f64,
    ssthresh: f64,
    dupwnd: f64,
    window_init: u32,
    t_seqno: i64,
    highest_ack: i64,
    last_ack: i64,
    maxseq: i64,
    recover: i64,
    dupacks: u32,
    last_cwnd_action: CwndAction,
    rtt_active: bool,
    rtt_seq: i64,
    rtt_ts: Nanos,
    t_srtt: i64,
    t_rttvar: i64,
    t_rtxcur: Nanos,
    t_backoff: u64,
    timer_generation: u64,
    timer_pending: bool,
    retransmissions: u32,
    done: bool,
    /// TCP Nice's detector, for a low-priority sender (boxed: most senders are Reno).
    nice: Option<Box<Nice>>,
    /// A [`Action::Wake`] is pending at this time.
    wake_at: Option<Nanos>,
}

impl Sender {
    /// A Reno sender of `segments` data segments (plus the SYN when `cfg.syn`).
    pub fn new(cfg: TcpConfig, segments: u32) -> Sender {
        Sender::with_congestion(cfg, segments, Congestion::Reno)
    }

    /// A sender of `segments` data segments that responds to congestion as `congestion` says.
    pub fn with_congestion(cfg: TcpConfig, segments: u32, congestion: Congestion) -> Sender {
        Sender {
            cfg,
            total: i64::from(cfg.wire_segments(segments.max(1))),
            cwnd: if cfg.syn {
                1.0
            } else {
                f64::from(cfg.window_init)
            },
            // ns-2 tcp.cc TcpAgent::reset: ssthresh_ = int(wnd_), the receiver window.
            ssthresh: f64::from(cfg.window),
            dupwnd: 0.0,
            window_init: cfg.window_init,
            t_seqno: 0,
            highest_ack: -1,
            last_ack: -1,
            maxseq: -1,
            recover: 0,
            dupacks: 0,
            last_cwnd_action: CwndAction::None,
            rtt_active: false,
            rtt_seq: -1,
            rtt_ts: 0,
            t_srtt: 0,
            t_rttvar: 0,
            t_rtxcur: cfg.initial_rto,
            t_backoff: 1,
            timer_generation: 0,
            timer_pending: false,
            retransmissions: 0,
            done: false,
            nice: match congestion {
                Congestion::Reno => None,
                Congestion::Nice(c) => Some(Box::new(Nice::new(c))),
            },
            wake_at: None,
        }
    }

    /// The Nice detector of a low-priority sender.
    pub fn nice(&self) -> Option<&Nice> {
        self.nice.as_deref()
    }

    /// Segments retransmitted so far (`nrexmitpack_`).
    pub fn retransmissions(&self) -> u32 {
        self.retransmissions
    }

    /// Whether every segment was acknowledged.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The congestion window, in packets.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// Starts the transfer: sends the initial window.
    pub fn start(&mut self, now: Nanos, out: &mut Vec<Action>) {
        self.send_much(now, out);
    }

    /// Reno's `window()`: cwnd plus the fast-recovery inflation, capped by the receiver window,
    /// in whole packets.
    fn window(&self) -> i64 {
        let w = self.cwnd + self.dupwnd;
        if w < f64::from(self.cfg.window) {
            w as i64
        } else {
            i64::from(self.cfg.window)
        }
    }

    /// `windowd()`: the same without the inflation or truncation.
    fn windowd(&self) -> f64 {
        self.cwnd.min(f64::from(self.cfg.window))
    }

    fn send_much(&mut self, now: Nanos, out: &mut Vec<Action>) {
        let mut win = self.window();
        if let (Some(n), 0) = (&self.nice, win) {
            // OSDI 2002 §3: below one packet of window, one packet every 1/cwnd round-trips.
            match n.pace(now) {
                Pace::Send => {
                    win = 1;
                    if self.t_seqno == self.highest_ack + 1 && self.t_seqno == self.maxseq + 1 {
                        // Nothing in flight: the timer still running from the last ACK times
                        // nothing, and would fire early on the packet now leaving.
                        self.cancel_rtx_timer();
                    }
                }
                Pace::Wait(at) => {
                    let waiting = self.t_seqno <= self.highest_ack + 1 && self.t_seqno < self.total;
                    if waiting && self.wake_at.is_none_or(|w| w > at) {
                        self.wake_at = Some(at);
                        out.push(Action::Wake { at });
                    }
                }
            }
        }
        while self.t_seqno <= self.highest_ack + win && self.t_seqno < self.total {
            self.output(self.t_seqno, now, out);
            self.t_seqno += 1;
        }
    }

    fn output(&mut self, seq: i64, now: Nanos, out: &mut Vec<Action>) {
        let retransmission = seq <= self.maxseq;
        if retransmission {
            self.retransmissions += 1;
        } else {
            self.maxseq = seq;
            if !self.rtt_active {
                self.rtt_active = true;
                if seq > self.rtt_seq {
                    self.rtt_seq = seq;
                    self.rtt_ts = now;
                }
            }
        }
        if let Some(n) = &mut self.nice {
            n.on_send(seq, retransmission, self.cwnd, now);
        }
        out.push(Action::Send {
            seq: seq as u32,
            retransmission,
        });
        if !self.timer_pending {
            self.set_rtx_timer(now, out);
        }
    }

    fn rtt_timeout(&self) -> Nanos {
        // RFC 2988 (rfc2988_ true): clamp to minrto before the back-off multiplies.
        let base = if self.t_rtxcur < self.cfg.min_rto {
            self.cfg.min_rto
        } else {
            self.t_rtxcur
        };
        let timeout = base.saturating_mul(self.t_backoff).min(self.cfg.max_rto);
        timeout.max(2 * self.cfg.tick)
    }

    fn set_rtx_timer(&mut self, now: Nanos, out: &mut Vec<Action>) {
        self.timer_generation += 1;
        self.timer_pending = true;
        out.push(Action::Timer {
            at: now + self.rtt_timeout(),
            generation: self.timer_generation,
        });
    }

    fn cancel_rtx_timer(&mut self) {
        self.timer_generation += 1;
        self.timer_pending = false;
    }

    /// `rtt_update`: one RTT sample of `tao`, measured in ticks.
    fn rtt_update(&mut self, tao: Nanos, now: Nanos) {
        let tick = self.cfg.tick.max(1);
        let sendtime = (now - tao) + self.cfg.boot_time;
        let tickoff = sendtime % tick;
        let t_rtt = (((tao + tickoff) / tick) as i64).max(1);
        if self.t_srtt != 0 {
            let mut delta = t_rtt - (self.t_srtt >> T_SRTT_BITS);
            self.t_srtt += delta;
            if self.t_srtt <= 0 {
                self.t_srtt = 1;
            }
            delta = delta.abs() - (self.t_rttvar >> T_RTTVAR_BITS);
            self.t_rttvar += delta;
            if self.t_rttvar <= 0 {
                self.t_rttvar = 1;
            }
        } else {
            self.t_srtt = t_rtt << T_SRTT_BITS;
            self.t_rttvar = t_rtt << (T_RTTVAR_BITS - 1);
        }
        let ticks = ((self.t_rttvar << (RTTVAR_EXP + T_SRTT_BITS - T_RTTVAR_BITS)) + self.t_srtt)
            >> T_SRTT_BITS;
        self.t_rtxcur = ticks as Nanos * tick;
    }

    fn rtt_backoff(&mut self) {
        self.t_backoff <<= 1;
        if self.t_backoff > 8 {
            self.t_rttvar += self.t_srtt >> T_SRTT_BITS;
            self.t_srtt = 0;
        }
    }

    fn reset_rtx_timer(&mut self, mild: bool, backoff: bool, now: Nanos, out: &mut Vec<Action>) {
        if backoff {
            self.rtt_backoff();
        }
        self.set_rtx_timer(now, out);
        if !mild {
            self.t_seqno = self.highest_ack + 1;
        }
        self.rtt_active = false;
    }

    /// `slowdown(CLOSE_SSTHRESH_HALF | how)`. With `decrease_num_` 0.5 every decrease halves,
    /// so ns-2's distinction between the first and later decreases does not arise.
    fn slowdown(&mut self, cwnd_rule: CwndRule) {
        let halfwin = if self.cfg.precision_reduce {
            self.windowd() / 2.0
        } else {
            (self.window() / 2) as f64
        };
        let before = self.cwnd;
        self.ssthresh = halfwin.trunc();
        self.cwnd = match cwnd_rule {
            CwndRule::Half => halfwin,
            CwndRule::Restart => 1.0,
        };
        match &self.nice {
            None => {
                if self.ssthresh < 2.0 {
                    self.ssthresh = 2.0;
                }
                if self.cwnd < 1.0 {
                    self.cwnd = 1.0;
                }
            }
            Some(n) => {
                // Nice keeps Reno's response but not its floors: the window may stay below one
                // packet (OSDI 2002 §3), and a loss never makes the sender more aggressive.
                let floor = n.config().min_cwnd;
                self.cwnd = self.cwnd.min(before).max(floor);
                self.ssthresh = self.ssthresh.max(floor);
            }
        }
    }

    /// `opencwnd` with `wnd_option_` 1: +1 per ACK in slow start, +1/cwnd after.
    fn opencwnd(&mut self) {
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
        } else if self.cwnd < 1.0 {
            // Only a Nice window is below one packet. One ACK then ends a round of 1/cwnd
            // round-trips, and +1/cwnd would add several packets at once: add one per round.
            self.cwnd += 1.0;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
    }

    /// `newack`: the state change of an ACK for new data.
    fn newack(&mut self, ack: i64, now: Nanos, out: &mut Vec<Action>) {
        self.dupacks = 0;
        self.last_ack = ack;
        self.highest_ack = ack;
        if self.t_seqno < ack + 1 {
            self.t_seqno = ack + 1;
        }
        // Karn: only a sample for a segment timed since its first transmission.
        if self.rtt_active && ack >= self.rtt_seq {
            self.t_backoff = 1;
            self.rtt_active = false;
            self.rtt_update(now - self.rtt_ts, now);
        }
        // `newtimer` (timerfix_): re-arm while data is outstanding.
        if self.t_seqno > ack || ack < self.maxseq {
            self.set_rtx_timer(now, out);
        } else {
            self.cancel_rtx_timer();
        }
    }

    /// An ACK carrying `ack`, the receiver's highest in-order segment (-1 before segment 0).
    pub fn on_ack(&mut self, ack: i64, now: Nanos, out: &mut Vec<Action>) {
        if self.done {
            return;
        }
        if ack > self.last_ack {
            if self.last_cwnd_action == CwndAction::Dupack {
                self.last_cwnd_action = CwndAction::Exited;
            }
            self.dupwnd = 0.0;
            let previous = self.last_ack;
            // recv_newack_helper
            self.newack(ack, now, out);
            self.opencwnd();
            if self.last_ack == 0 && self.cfg.delay_growth {
                self.cwnd = f64::from(self.window_init);
            }
            if let Some(n) = &mut self.nice {
                if let Some(cwnd) = n.on_new_ack(previous, ack, self.maxseq, self.cwnd, now) {
                    // Nice's multiplicative decrease on early congestion (OSDI 2002 §3),
                    // possibly below one packet; it also ends slow start.
                    self.cwnd = cwnd;
                    self.ssthresh = cwnd;
                }
            }
            if self.highest_ack >= self.total - 1 {
                self.done = true;
                self.cancel_rtx_timer();
                out.push(Action::Done);
                return;
            }
        } else if ack == self.last_ack {
            self.dupacks += 1;
            if self.dupacks == self.cfg.dupack_threshold {
                self.dupack_action(now, out);
            } else if self.dupacks > self.cfg.dupack_threshold {
                self.dupwnd += 1.0;
            } else if self.cfg.limited_transmit {
                self.send_one(now, out);
            }
        }
        if ack >= self.last_ack
            && (self.dupacks == 0 || self.dupacks + 1 > self.cfg.dupack_threshold)
        {
            self.send_much(now, out);
        }
    }

    /// `send_one` (limited transmit): one new segment if the windows allow it.
    fn send_one(&mut self, now: Nanos, out: &mut Vec<Action>) {
        let wnd = i64::from(self.cfg.window);
        if self.t_seqno <= self.highest_ack + wnd
            && self.t_seqno < self.total
            && (self.t_seqno as f64)
                <= self.highest_ack as f64 + self.cwnd + f64::from(self.dupacks)
        {
            self.output(self.t_seqno, now, out);
            self.t_seqno += 1;
        }
    }

    /// Reno's `dupack_action` with `bug_fix_`: fast retransmit unless this window already had one.
    fn dupack_action(&mut self, now: Nanos, out: &mut Vec<Action>) {
        let recovered = self.highest_ack > self.recover;
        if !recovered && self.highest_ack != 0 {
            // A loss in the window that already triggered recovery: wait for the timer.
            return;
        }
        self.recover = self.maxseq;
        self.last_cwnd_action = CwndAction::Dupack;
        self.slowdown(CwndRule::Half);
        if let Some(n) = &mut self.nice {
            n.on_loss(self.maxseq, self.cwnd, now);
        }
        self.reset_rtx_timer(true, false, now, out);
        self.output(self.last_ack + 1, now, out);
        self.dupwnd = f64::from(self.cfg.dupack_threshold);
    }

    /// The retransmission timer of `generation` fired.
    pub fn on_timeout(&mut self, generation: u64, now: Nanos, out: &mut Vec<Action>) {
        if self.done || generation != self.timer_generation || !self.timer_pending {
            return;
        }
        self.timer_pending = false;
        if self.highest_ack != self.maxseq {
            self.recover = self.maxseq;
            if self.highest_ack == -1 && self.window_init > 1 {
                // The first packet was lost: no larger initial window from here on (ns-2
                // tcp.cc TcpAgent::timeout, `bugfix_ss_`; `reset` does not undo it).
                self.window_init = 1;
            }
            self.last_cwnd_action = CwndAction::Timeout;
            self.slowdown(CwndRule::Restart);
            if let Some(n) = &mut self.nice {
                n.on_loss(self.maxseq, self.cwnd, now);
            }
            self.reset_rtx_timer(false, true, now, out);
        } else {
            self.reset_rtx_timer(false, false, now, out);
        }
        self.last_cwnd_action = CwndAction::Timeout;
        self.dupwnd = 0.0;
        self.send_much(now, out);
    }

    /// The [`Action::Wake`] asked for came due: a Nice sender below one packet of window may
    /// send again.
    pub fn on_wake(&mut self, now: Nanos, out: &mut Vec<Action>) {
        if self.wake_at.is_some_and(|at| at <= now) {
            self.wake_at = None;
        }
        if !self.done {
            self.send_much(now, out);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum CwndRule {
    Half,
    Restart,
}

/// `Agent/TCPSink`: ACKs every arriving segment with the highest in-order segment so far.
#[derive(Debug, Clone, Default)]
pub struct Sink {
    /// `next_`: the first segment not yet received in order.
    next: u32,
    /// Segments received above `next`, as offsets from it.
    above: std::collections::BTreeSet<u32>,
}

impl Sink {
    /// A segment arrived; returns the cumulative ACK to send: the highest in-order segment, or
    /// -1 while segment 0 is missing (as ns-2's sink does; the sender counts it as a duplicate).
    pub fn on_segment(&mut self, seq: u32) -> i64 {
        if seq == self.next {
            self.next += 1;
            while self.above.remove(&self.next) {
                self.next += 1;
            }
        } else if seq > self.next {
            self.above.insert(seq);
        }
        i64::from(self.next) - 1
    }

    /// Segments received in order.
    pub fn in_order(&self) -> u32 {
        self.next
    }
}

#[cfg(test)]
mod tests;
