use super::*;
use crate::tcp::{Action, Congestion, Sender, Sink, TcpConfig};
use crate::time::{MILLI, SECOND};

/// Feeds a detector one segment per round-trip (sent at `t`, ACKed `rtt` later) and returns
/// whether the round-trip it ends asked for a halving.
fn one_packet_round(n: &mut Nice, seq: i64, t: Nanos, rtt: Nanos) -> bool {
    n.on_send(seq, false, 2.0, t);
    n.on_new_ack(seq - 1, seq, seq, 2.0, t + rtt).is_some()
}

#[test]
fn a_constant_rtt_never_counts_as_congestion() {
    let mut n = Nice::new(Config::default());
    for seq in 0..100 {
        assert!(!one_packet_round(
            &mut n,
            seq,
            seq as Nanos * SECOND,
            10 * MILLI
        ));
    }
    assert_eq!(n.rtt_range(), Some((10 * MILLI, 10 * MILLI)));
    assert_eq!(n.halvings(), 0);
}

#[test]
fn a_packet_is_delayed_above_min_plus_t_times_the_range() {
    // minRTT 10 ms and maxRTT 110 ms: with t = 0.1 the threshold is 20 ms.
    let mut n = Nice::new(Config::default());
    assert!(!one_packet_round(&mut n, 0, 0, 10 * MILLI));
    // The 110 ms sample is itself delayed: a round of one delayed packet out of one.
    assert!(one_packet_round(&mut n, 1, SECOND, 110 * MILLI));
    assert!(
        !one_packet_round(&mut n, 2, 2 * SECOND, 20 * MILLI),
        "at the threshold"
    );
    assert!(
        one_packet_round(&mut n, 3, 3 * SECOND, 20 * MILLI + 1),
        "just above it"
    );
    assert_eq!(n.halvings(), 2);
}

/// One window: segments `0..n` leave together at time 0, segment `n` (the last of `rtts`)
/// when the ACK of segment 0 arrives, as the ACK clock would send it; segment `i` is ACKed
/// `rtts[i]` after it left. Returns the halving decisions, one per ACK.
fn one_window(n: &mut Nice, rtts: &[Nanos]) -> Vec<bool> {
    let last = rtts.len() as i64 - 1;
    for seq in 0..last {
        n.on_send(seq, false, last as f64, 0);
    }
    let cwnd = last as f64;
    let mut decisions = vec![n.on_new_ack(-1, 0, last - 1, cwnd, rtts[0]).is_some()];
    n.on_send(last, false, last as f64, rtts[0]);
    for i in 1..=last {
        let sent = if i == last { rtts[0] } else { 0 };
        let halved = n.on_new_ack(i - 1, i, last, cwnd, sent + rtts[i as usize]);
        decisions.push(halved.is_some());
    }
    decisions
}

#[test]
fn the_window_halves_only_when_more_than_f_of_a_round_was_delayed() {
    // Round 0 is the first ACK alone; round 1 the segments in flight after it and the first
    // one sent after it (1..=5), decided at the ACK of 5.
    let ms = |v: &[u64]| v.iter().map(|m| m * MILLI).collect::<Vec<_>>();
    // minRTT 10, maxRTT 50: threshold 14 ms. Two of five delayed is not more than half.
    let mut n = Nice::new(Config::default());
    assert_eq!(
        one_window(&mut n, &ms(&[10, 50, 10, 12, 30, 10])),
        [false; 6]
    );
    // Three of five are.
    let mut n = Nice::new(Config::default());
    assert_eq!(
        one_window(&mut n, &ms(&[10, 50, 15, 12, 30, 10])),
        [false, false, false, false, false, true]
    );
    // With f = 0.8, three of five are not enough.
    let mut n = Nice::new(Config {
        fraction: 0.8,
        ..Config::default()
    });
    assert_eq!(
        one_window(&mut n, &ms(&[10, 50, 15, 12, 30, 10])),
        [false; 6]
    );
}

#[test]
fn retransmitted_segments_give_no_sample() {
    let mut n = Nice::new(Config::default());
    assert!(!one_packet_round(&mut n, 0, 0, 10 * MILLI));
    n.on_send(1, false, 2.0, SECOND);
    n.on_send(1, true, 2.0, 4 * SECOND);
    // Karn: the ACK could be for either copy, so the 3 s "RTT" is not a sample.
    assert_eq!(n.on_new_ack(0, 1, 1, 2.0, 4 * SECOND + 10 * MILLI), None);
    assert_eq!(n.rtt_range(), Some((10 * MILLI, 10 * MILLI)));
}

#[test]
fn below_one_packet_the_sender_waits_one_over_cwnd_round_trips() {
    let mut n = Nice::new(Config::default());
    assert!(!one_packet_round(&mut n, 0, 0, 40 * MILLI));
    // srtt 40 ms and a window of a quarter packet: the next packet 160 ms after this one.
    n.on_send(1, false, 0.25, SECOND);
    assert_eq!(
        n.pace(SECOND + 100 * MILLI),
        Pace::Wait(SECOND + 160 * MILLI)
    );
    assert_eq!(n.pace(SECOND + 160 * MILLI), Pace::Send);
    // A loss lets the retransmission go at once.
    n.on_send(2, false, 0.25, 2 * SECOND);
    n.on_loss(2, 0.25, 2 * SECOND + MILLI);
    assert_eq!(n.pace(2 * SECOND + MILLI), Pace::Send);
}

#[test]
fn parameters_out_of_range_are_refused() {
    assert!(Config::default().validate().is_ok());
    for bad in [
        Config {
            threshold: 1.5,
            ..Config::default()
        },
        Config {
            fraction: 1.0,
            ..Config::default()
        },
        Config {
            min_cwnd: 0.0,
            ..Config::default()
        },
        Config {
            min_cwnd: f64::NAN,
            ..Config::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

/// One sender and its sink over a path of `one_way` propagation each way through a bottleneck
/// that takes `tx` per segment (ACKs are not queued), plus `cross(t)` of queueing delay that
/// other traffic adds to a segment sent at `t` (first in, first out: a segment never
/// overtakes the one before it). Returns the sender and the send time of every segment.
struct Path {
    one_way: Nanos,
    tx: Nanos,
    cross: fn(Nanos) -> Nanos,
}

fn drive(path: &Path, congestion: Congestion, segments: u32, until: Nanos) -> (Sender, Vec<Nanos>) {
    let cfg = TcpConfig::ns2_235();
    let mut s = Sender::with_congestion(cfg, segments, congestion);
    let mut sink = Sink::default();
    // (time, order) -> (kind, value): 0 segment at sink, 1 ACK at sender, 2 timer, 3 wake.
    let mut events: std::collections::BTreeMap<(Nanos, u64), (u8, i64)> = Default::default();
    let (mut order, mut now, mut link_free, mut generation) = (0u64, 0, 0, 0);
    let mut last_arrival = 0;
    let mut sends = Vec::new();
    let mut out = Vec::new();
    s.start(0, &mut out);
    loop {
        for action in out.drain(..) {
            order += 1;
            match action {
                Action::Send { seq, .. } => {
                    sends.push(now);
                    let leave = now.max(link_free) + path.tx;
                    link_free = leave;
                    let at = (leave + path.one_way + (path.cross)(now)).max(last_arrival);
                    last_arrival = at;
                    events.insert((at, order), (0, i64::from(seq)));
                }
                Action::Timer { at, generation: g } => {
                    generation = g;
                    events.insert((at, order), (2, g as i64));
                }
                Action::Wake { at } => {
                    events.insert((at, order), (3, 0));
                }
                Action::Done => return (s, sends),
            }
        }
        let Some(((t, _), (kind, value))) = events.pop_first() else {
            panic!("stalled")
        };
        if t > until {
            return (s, sends);
        }
        now = t;
        match kind {
            0 => {
                let ack = sink.on_segment(value as u32);
                order += 1;
                events.insert((now + path.one_way, order), (1, ack));
            }
            1 => s.on_ack(value, now, &mut out),
            2 if value as u64 == generation => s.on_timeout(generation, now, &mut out),
            3 => s.on_wake(now, &mut out),
            _ => {}
        }
    }
}

const NICE: Congestion = Congestion::Nice(Config {
    threshold: 0.1,
    fraction: 0.5,
    min_cwnd: 1.0 / 64.0,
});

/// 1 Mb/s with 552-byte segments, 10 ms of propagation round-trip.
fn cable(cross: fn(Nanos) -> Nanos) -> Path {
    Path {
        one_way: 5 * MILLI,
        tx: crate::time::transmission(552, 1_000_000),
        cross,
    }
}

#[test]
fn alone_nice_keeps_the_bottleneck_busy_without_a_standing_queue() {
    // 2,000 segments at 1 Mb/s take 8.8 s at full rate.
    let path = cable(|_| 0);
    let (reno, _) = drive(&path, Congestion::Reno, 2000, 100 * SECOND);
    let (nice, sends) = drive(&path, NICE, 2000, 100 * SECOND);
    assert!(reno.is_done() && nice.is_done());
    let last = *sends.last().expect("sent");
    let full_rate = 2000 * path.tx;
    // Its own queue is the only congestion Nice sees, and it halves as soon as that queue
    // is more than a tenth of the largest it has seen: the window stays a few packets
    // (Reno's, with nothing to lose here, reaches the receiver window of 20).
    assert!(nice.cwnd() < 8.0, "cwnd {}", nice.cwnd());
    assert!(reno.cwnd() >= 20.0, "cwnd {}", reno.cwnd());
    assert!(nice.nice().expect("nice").halvings() > 0);
    // The path holds 2.3 segments (10 ms at 1 Mb/s), so a window of two or more keeps it
    // mostly busy: at least 80 % of the full rate.
    assert!(
        (last as f64) < full_rate as f64 / 0.8,
        "last segment sent at {last} ns, full rate {full_rate} ns"
    );
}

#[test]
fn under_a_standing_foreground_queue_nice_falls_below_one_packet_and_paces() {
    // From 1 s on, other traffic keeps 100 to 300 ms of queue (a Reno flow's sawtooth in a
    // deep buffer): nearly every Nice packet is delayed.
    let path = cable(|t| {
        if t < SECOND {
            0
        } else {
            100 * MILLI + (t / MILLI % 200) * MILLI
        }
    });
    let (nice, sends) = drive(&path, NICE, 100_000, 60 * SECOND);
    assert!(!nice.is_done());
    assert!(nice.cwnd() < 1.0, "cwnd {}", nice.cwnd());
    // Once below one packet, sends are at least an RTT (above 100 ms) apart, one at a time.
    let late: Vec<Nanos> = sends.iter().copied().filter(|t| *t > 30 * SECOND).collect();
    assert!(
        late.windows(2).all(|w| w[1] - w[0] > 100 * MILLI),
        "{late:?}"
    );
    // Reno on the same path sends a full window per round-trip.
    let (_, reno_sends) = drive(&path, Congestion::Reno, 100_000, 60 * SECOND);
    let reno_late = reno_sends.iter().filter(|t| **t > 30 * SECOND).count();
    assert!(
        reno_late > 20 * late.len().max(1),
        "{reno_late} vs {}",
        late.len()
    );
}
