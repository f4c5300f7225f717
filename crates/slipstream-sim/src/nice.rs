//! TCP Nice's congestion detector (Venkataramani, Kokku and Dahlin, "TCP Nice: A Mechanism for
//! Background Transfers", OSDI 2002), the low-priority transport paper 000 prefetches over
//! (000 §4). It is a pure state machine that the Reno sender in [`crate::tcp`] consults at four
//! points (a segment sent, a new ACK, a loss, a send decision below one packet), so a Nice
//! sender is Reno's sender with this detector plugged in, not a copy of it.
//!
//! Nice's rules, as its §3 states them:
//! - every ACK gives an RTT sample; the sender tracks the smallest (`minRTT`) and largest
//!   (`maxRTT`) RTT seen on the connection;
//! - a packet is *delayed* when its RTT exceeds `minRTT + t·(maxRTT − minRTT)`: the
//!   bottleneck queue is more than a fraction `t` of the largest queue the connection has
//!   seen (`t` = 0.1 by default here);
//! - once per round-trip, if more than a fraction `f` of the packets acknowledged in it were
//!   delayed (`f` = 0.5 by default here), the window is halved: multiplicative decrease on *early*
//!   congestion, before any loss. Its pseudocode either halves or increases in a round-trip,
//!   never both, so a halving here is of the window the round-trip began with, giving back
//!   Reno's per-ACK increases during it (otherwise +1 per round-trip and ×½ per round-trip
//!   would settle near one packet however long the congestion lasts);
//! - the window may fall below one packet; then the sender sends one packet every `1/cwnd`
//!   round-trips.
//!
//! Everything else is Reno's (slow start, congestion avoidance, fast retransmit and timeouts):
//! OSDI 2002 builds Nice on Vegas, whose increase rule is gentler; this one keeps Reno's, so
//! that the only difference from the foreground flows it yields to is the detector.
//!
//! RTT samples here are exact (nanoseconds of simulated time, from each segment's first
//! transmission to the ACK that covers it), unlike Reno's `tcpTick_`-grained estimator (10 ms
//! ticks): Nice needs to see a few milliseconds of queueing on a 10 ms path.

use std::collections::VecDeque;

use crate::time::Nanos;

/// Nice's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// `t`: a packet is delayed when its RTT is above `minRTT + t·(maxRTT − minRTT)`
    /// (default 0.1). Between 0 and 1.
    pub threshold: f64,
    /// `f`: the window is halved when more than this fraction of a round-trip's packets were
    /// delayed (default 0.5). At least 0, below 1.
    pub fraction: f64,
    /// The smallest window, in packets: Nice lets the window fall below one packet, and this
    /// bounds how far (our bound, not the paper's: at the default 1/64 the sender still sends
    /// a packet every 64 round-trips, so a background flow keeps probing). Above 0, at most 1.
    pub min_cwnd: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threshold: 0.1,
            fraction: 0.5,
            min_cwnd: 1.0 / 64.0,
        }
    }
}

/// A parameter out of range.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `t` outside 0..=1.
    #[error("{0} is not a fraction of the RTT range: give a number from 0 to 1")]
    Threshold(f64),
    /// `f` outside 0..1 (at 1, no round-trip could have more than all its packets delayed).
    #[error("{0} is not a fraction of a round-trip's packets: give a number from 0, below 1")]
    Fraction(f64),
    /// The smallest window outside (0, 1].
    #[error("{0} packets: give a window above 0 and at most 1 packet")]
    MinCwnd(f64),
}

impl Config {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(ConfigError::Threshold(self.threshold));
        }
        if !(0.0..1.0).contains(&self.fraction) {
            return Err(ConfigError::Fraction(self.fraction));
        }
        if !(self.min_cwnd > 0.0 && self.min_cwnd <= 1.0) {
            return Err(ConfigError::MinCwnd(self.min_cwnd));
        }
        Ok(())
    }
}

/// What a sender whose window is below one packet may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Send one packet.
    Send,
    /// Wait until then (one packet every `1/cwnd` round-trips).
    Wait(Nanos),
}

/// The detector's state for one connection.
#[derive(Debug, Clone)]
pub struct Nice {
    cfg: Config,
    /// First-transmission times of the segments from `base` on, `None` once a segment has
    /// been retransmitted (Karn: its ACK could be for either copy). At most the segments in
    /// flight, which the receiver window bounds.
    sent: VecDeque<Option<Nanos>>,
    /// The segment `sent[0]` describes: the first one not yet acknowledged.
    base: i64,
    min_rtt: Nanos,
    max_rtt: Nanos,
    /// Smoothed RTT (gain 1/8), for the spacing of packets below one packet of window.
    srtt: Option<f64>,
    /// The round-trip ends when this segment is acknowledged.
    round_end: i64,
    /// The window when the round-trip began (`None` before the first one).
    round_cwnd: Option<f64>,
    /// RTT samples in this round-trip, and how many of them were delayed.
    samples: u32,
    delayed: u32,
    /// Below one packet of window: the earliest time of the next transmission.
    next_send: Nanos,
    /// Windows halved on early congestion.
    halvings: u64,
}

impl Nice {
    /// A detector with no samples.
    pub fn new(cfg: Config) -> Nice {
        Nice {
            cfg,
            sent: VecDeque::new(),
            base: 0,
            min_rtt: Nanos::MAX,
            max_rtt: 0,
            srtt: None,
            round_end: 0,
            round_cwnd: None,
            samples: 0,
            delayed: 0,
            next_send: 0,
            halvings: 0,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The smallest and largest RTT sampled so far, if any.
    pub fn rtt_range(&self) -> Option<(Nanos, Nanos)> {
        (self.max_rtt > 0).then_some((self.min_rtt, self.max_rtt))
    }

    /// Windows halved on early congestion so far.
    pub fn halvings(&self) -> u64 {
        self.halvings
    }

    /// Segment `seq` leaves at `now` with the window at `cwnd` packets.
    pub fn on_send(&mut self, seq: i64, retransmission: bool, cwnd: f64, now: Nanos) {
        let Ok(i) = usize::try_from(seq - self.base) else {
            return;
        };
        if retransmission {
            if let Some(slot) = self.sent.get_mut(i) {
                *slot = None;
            }
        } else {
            // New segments go out in order; anything skipped (never the case in Reno) has no
            // time to sample.
            while self.sent.len() < i {
                self.sent.push_back(None);
            }
            if self.sent.len() == i {
                self.sent.push_back(Some(now));
            }
        }
        if cwnd < 1.0 {
            // OSDI 2002 §3: below one packet, one packet every 1/cwnd round-trips.
            let rtt = self.srtt.unwrap_or(0.0);
            self.next_send = now + (rtt / cwnd.max(self.cfg.min_cwnd)).round() as Nanos;
        }
    }

    /// Whether a sender whose window is below one packet may send now.
    pub fn pace(&self, now: Nanos) -> Pace {
        if now >= self.next_send {
            Pace::Send
        } else {
            Pace::Wait(self.next_send)
        }
    }

    /// A loss was repaired by retransmission at `now`, Reno's response having set the window
    /// to `cwnd`: the retransmission may leave at once, whatever the window, and a new
    /// round-trip begins.
    pub fn on_loss(&mut self, maxseq: i64, cwnd: f64, now: Nanos) {
        self.next_send = self.next_send.min(now);
        self.samples = 0;
        self.delayed = 0;
        self.round_end = maxseq.max(self.base) + 1;
        self.round_cwnd = Some(cwnd);
    }

    /// An ACK for new data: segments `previous + 1 ..= ack` are acknowledged at `now`, the
    /// highest sent so far being `maxseq` and Reno's window, this ACK's increase included,
    /// `cwnd`. Returns the window to use instead when the round-trip this ACK ends saw early
    /// congestion.
    pub fn on_new_ack(
        &mut self,
        previous: i64,
        ack: i64,
        maxseq: i64,
        cwnd: f64,
        now: Nanos,
    ) -> Option<f64> {
        let covered = usize::try_from(ack - previous).unwrap_or(0);
        let mut clean = covered > 0;
        let mut sent_at = None;
        for _ in 0..covered {
            match self.sent.pop_front() {
                Some(Some(t)) => sent_at = Some(t),
                // Retransmitted (Karn), or sent before the detector knew of it.
                _ => clean = false,
            }
        }
        self.base = ack + 1;
        if let (true, Some(t)) = (clean, sent_at) {
            self.sample(now.saturating_sub(t));
        }
        if ack < self.round_end {
            return None;
        }
        // OSDI 2002 §3: once per RTT, halve when more than f of its packets were delayed.
        let congested = self.samples > 0
            && f64::from(self.delayed) > self.cfg.fraction * f64::from(self.samples);
        self.samples = 0;
        self.delayed = 0;
        // The next round-trip ends with the ACK of the first segment sent from now on, one RTT
        // away (Vegas's `beg_snd_nxt`, which Nice inherits).
        self.round_end = maxseq.max(ack) + 1;
        let halved = congested.then(|| {
            self.halvings += 1;
            (self.round_cwnd.unwrap_or(cwnd).min(cwnd) / 2.0).max(self.cfg.min_cwnd)
        });
        self.round_cwnd = Some(halved.unwrap_or(cwnd));
        halved
    }

    /// One RTT sample: updates minRTT, maxRTT and the smoothed RTT, and counts it as delayed
    /// if it is above the threshold (OSDI 2002 §3).
    fn sample(&mut self, rtt: Nanos) {
        self.min_rtt = self.min_rtt.min(rtt);
        self.max_rtt = self.max_rtt.max(rtt);
        self.srtt = Some(match self.srtt {
            Some(s) => s + (rtt as f64 - s) / 8.0,
            None => rtt as f64,
        });
        let threshold =
            self.min_rtt as f64 + self.cfg.threshold * (self.max_rtt - self.min_rtt) as f64;
        self.samples += 1;
        if rtt as f64 > threshold {
            self.delayed += 1;
        }
    }
}

#[cfg(test)]
mod tests;
