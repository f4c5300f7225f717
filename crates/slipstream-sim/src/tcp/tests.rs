use super::*;

/// Runs a sender against a sink over a lossless path with a fixed one-way delay each way and no
/// bandwidth limit, dropping the segments in `drop` on their first transmission. Returns the
/// time of the last ACK and the sender.
fn run(segments: u32, one_way: Nanos, drop: &[u32]) -> (Nanos, Sender) {
    let cfg = TcpConfig::ns2_235();
    let mut s = Sender::new(cfg, segments);
    let mut sink = Sink::default();
    // (time, kind, value): 0 = segment arrives at sink, 1 = ack arrives at sender, 2 = timer.
    let mut events: std::collections::BTreeMap<(Nanos, u64), (u8, i64)> = Default::default();
    let mut order = 0u64;
    let mut dropped = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut generation = 0;
    s.start(0, &mut out);
    let mut now = 0;
    loop {
        for action in out.drain(..) {
            order += 1;
            match action {
                Action::Send { seq, .. } => {
                    if drop.contains(&seq) && dropped.insert(seq) {
                        continue;
                    }
                    events.insert((now + one_way, order), (0, i64::from(seq)));
                }
                Action::Timer { at, generation: g } => {
                    generation = g;
                    events.insert((at, order), (2, g as i64));
                }
                Action::Done => return (now, s),
                Action::Wake { .. } => unreachable!("a Reno sender never paces"),
            }
        }
        let Some(((t, _), (kind, value))) = events.pop_first() else {
            panic!("stalled")
        };
        now = t;
        match kind {
            0 => {
                let ack = sink.on_segment(value as u32);
                order += 1;
                events.insert((now + one_way, order), (1, ack));
            }
            1 => s.on_ack(value, now, &mut out),
            _ if value as u64 == generation => s.on_timeout(generation, now, &mut out),
            _ => {}
        }
    }
}

#[test]
fn slow_start_takes_the_expected_number_of_round_trips() {
    // windowInit 2; the ACK of segment 0 puts cwnd back to 2 (delay_growth_), then +1 per
    // ACK. Round trips send 2, 3 (segments 2-4), 5 (5-9), 9 (10-18), then up to 20.
    let rtt = 100 * MILLI;
    assert_eq!(run(1, rtt / 2, &[]).0, rtt);
    assert_eq!(run(2, rtt / 2, &[]).0, rtt);
    assert_eq!(run(5, rtt / 2, &[]).0, 2 * rtt);
    assert_eq!(run(6, rtt / 2, &[]).0, 3 * rtt);
    assert_eq!(run(10, rtt / 2, &[]).0, 3 * rtt);
    assert_eq!(run(19, rtt / 2, &[]).0, 4 * rtt);
}

#[test]
fn a_single_loss_is_repaired_by_fast_retransmit() {
    let (_, s) = run(40, 50 * MILLI, &[20]);
    assert!(s.is_done());
    assert_eq!(s.retransmissions(), 1, "one fast retransmit, no timeout");
    assert!(s.cwnd() < 20.0, "the window was halved: {}", s.cwnd());
}

#[test]
fn losing_the_only_segment_waits_for_the_initial_rto() {
    // No RTT sample yet: the 3 s initial RTO (ns-2.35) decides.
    let (t, s) = run(1, 10 * MILLI, &[0]);
    assert_eq!(s.retransmissions(), 1);
    assert_eq!(t, 3 * SECOND + 20 * MILLI);
}

#[test]
fn rto_after_samples_follows_srtt_plus_four_rttvar_in_ticks() {
    let mut s = Sender::new(TcpConfig::ns2_235(), 10);
    // First sample of 100 ms = 10 ticks: srtt = 10, rttvar = 5, RTO = 10 + 4*5 = 30 ticks.
    s.rtt_update(100 * MILLI, 100 * MILLI);
    assert_eq!(s.t_rtxcur, 300 * MILLI);
    assert_eq!(s.rtt_timeout(), 300 * MILLI);
    // Back-off doubles it.
    s.rtt_backoff();
    assert_eq!(s.rtt_timeout(), 600 * MILLI);
}

#[test]
fn sink_acks_cumulatively() {
    let mut k = Sink::default();
    assert_eq!(k.on_segment(1), -1);
    assert_eq!(k.on_segment(0), 1);
    assert_eq!(k.on_segment(3), 1);
    assert_eq!(k.on_segment(2), 3);
    assert_eq!(k.in_order(), 4);
}

proptest::proptest! {
    /// Whatever is lost (once), every transfer completes and delivers every segment.
    #[test]
    fn transfers_complete_despite_losses(segments in 1u32..200, drops in proptest::collection::vec(0u32..200, 0..10)) {
        let (_, s) = run(segments, 20 * MILLI, &drops);
        proptest::prop_assert!(s.is_done());
    }
}
