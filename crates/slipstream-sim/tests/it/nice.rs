//! TCP Nice against its published behaviour (OSDI 2002 §5; paper 000 §7.1, Fig. 13(c)), on
//! the cable link of paper 000's loaded-network experiment: 1 Mb/s, 10 ms round-trip, with the
//! simulator's ns-2 defaults (512-byte segments, a receiver window of 20, DropTail queue of
//! 100 packets).

use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use slipstream_sim::net::{Options, Run};
use slipstream_sim::nice;
use slipstream_sim::time::{Nanos, MILLI, SECOND};
use slipstream_sim::{Congestion, LinkSpec, Network, NodeId, TcpConfig, Transfer};

const NICE: Congestion = Congestion::Nice(nice::Config {
    threshold: 0.1,
    fraction: 0.5,
    min_cwnd: 1.0 / 64.0,
});

/// The bottleneck, bits per second.
const CABLE: u64 = 1_000_000;

/// Demand server and prefetch server (100 Mb/s, 1 ms) behind a router, and the cable
/// (1 Mb/s, 4 ms) to the clients' side: 10 ms of propagation round-trip.
struct Cable {
    net: Network,
    client: NodeId,
    demand: NodeId,
    prefetch: NodeId,
}

fn cable() -> Cable {
    let mut net = Network::default();
    let client = net.node();
    let router = net.node();
    let demand = net.node();
    let prefetch = net.node();
    let lan = LinkSpec {
        bits_per_second: 100_000_000,
        delay: MILLI,
        queue_limit: 100,
    };
    net.duplex(
        client,
        router,
        LinkSpec {
            bits_per_second: CABLE,
            delay: 4 * MILLI,
            queue_limit: 100,
        },
    );
    net.duplex(router, demand, lan);
    net.duplex(router, prefetch, lan);
    Cable {
        net,
        client,
        demand,
        prefetch,
    }
}

fn run(c: &Cable, transfers: &[Transfer], options: &[Options], until: Nanos) -> Run {
    c.net
        .run_with(transfers, options, TcpConfig::ns2_235(), until, None)
        .expect("valid run")
}

fn finished(run: &Run, id: u64) -> Nanos {
    run.results
        .iter()
        .find(|r| r.transfer.id == id)
        .map(|r| r.received)
        .unwrap_or_else(|| panic!("transfer {id} did not finish"))
}

/// Wire bits of a transfer of `bytes` (segment 0 carries no header in ns-2).
fn wire_bits(bytes: u64) -> f64 {
    let cfg = TcpConfig::ns2_235();
    let segments = cfg.segments(bytes);
    (0..segments)
        .map(|s| f64::from(cfg.segment_bytes(s)) * 8.0)
        .sum()
}

#[test]
fn nice_yields_to_a_long_reno_flow_and_takes_the_link_alone() {
    let c = cable();
    // 1 MB each: about 9 s of the cable at full rate.
    let bytes = 1_000_000;
    let reno = Transfer {
        id: 1,
        server: c.demand,
        client: c.client,
        bytes,
        start: 0,
    };
    let background = Transfer {
        id: 2,
        server: c.prefetch,
        ..reno
    };
    let nice = Options {
        congestion: NICE,
        after: None,
    };
    let until = 600 * SECOND;
    let reno_alone = finished(&run(&c, &[reno], &[], until), 1);
    let nice_alone = finished(&run(&c, &[background], &[nice], until), 2);
    let both = run(&c, &[reno, background], &[Options::default(), nice], until);
    let reno_shared = finished(&both, 1);
    let nice_shared = finished(&both, 2);
    // The same two flows, both Reno, for scale.
    let fair = run(&c, &[reno, background], &[], until);
    let full_rate = wire_bits(bytes) / CABLE as f64;
    let secs = |t: Nanos| t as f64 / SECOND as f64;
    eprintln!(
        "full rate {full_rate:.2} s; reno alone {:.2} s, nice alone {:.2} s; shared: reno {:.2} s, nice {:.2} s; both reno: {:.2} s, {:.2} s",
        secs(reno_alone),
        secs(nice_alone),
        secs(reno_shared),
        secs(nice_shared),
        secs(finished(&fair, 1)),
        secs(finished(&fair, 2)),
    );
    // OSDI 2002 §5: Nice interferes little with foreground flows. Reno's window (20 packets
    // against a path of 2.3) keeps a standing queue of ~18 packets, far above a tenth of the
    // range Nice has seen, so nearly every Nice packet is delayed and Nice sits at its
    // smallest window: Reno keeps at least 90 % of the throughput it has alone.
    assert!(
        secs(reno_alone) / secs(reno_shared) >= 0.9,
        "Reno alone {reno_alone} ns, beside Nice {reno_shared} ns"
    );
    // Against another Reno flow it would get about half.
    assert!(secs(reno_alone) / secs(finished(&fair, 1)) < 0.75);
    // Alone, Nice's own queue is its only congestion signal; it keeps a window of two to
    // four packets on a path of 2.3, so at least 80 % of the link.
    assert!(
        full_rate / secs(nice_alone) >= 0.8,
        "Nice alone: {:.2} s for {full_rate:.2} s at full rate",
        secs(nice_alone)
    );
    // And once Reno is gone, Nice takes the link: what it still had to send went at 80 %
    // of the link or better (it sent at most 10 % of its bytes while Reno ran).
    let after_reno = secs(nice_shared) - secs(reno_shared);
    assert!(
        after_reno <= full_rate / 0.8,
        "Nice took {after_reno:.2} s after Reno finished"
    );
}

/// One case of paper 000's loaded network, in miniature.
struct Loaded {
    /// Mean latency of the demand transfers, seconds.
    demand_mean_s: f64,
    /// Demand and prefetch goodput over the demand period, wire bits per second.
    demand_bps: f64,
    prefetch_bps: f64,
}

/// Two clients' demand (web-sized transfers, about 92 kb/s each) for two minutes and, per
/// client, a prefetcher working through hint lists of ten 8 KB files, one list per
/// connection and one list after another, with `prefetch`'s congestion control (none: no
/// prefetching).
fn loaded(prefetch: Option<Congestion>) -> Loaded {
    let c = cable();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // 2.9 transfers a second of 7.8 KB on average: 181 kb/s of payload.
    let gaps = Exp::new(2.9).expect("rate");
    let sizes = [1_000u64, 3_000, 5_000, 10_000, 20_000];
    let (from, to) = (5 * SECOND, 125 * SECOND);
    let mut transfers = Vec::new();
    let mut t = from as f64 / SECOND as f64;
    while t < to as f64 / SECOND as f64 {
        transfers.push(Transfer {
            id: transfers.len() as u64,
            server: c.demand,
            client: c.client,
            bytes: sizes[transfers.len() % sizes.len()],
            start: (t * SECOND as f64) as Nanos,
        });
        t += gaps.sample(&mut rng);
    }
    let demand = transfers.len();
    let mut options = vec![Options::default(); demand];
    if let Some(congestion) = prefetch {
        for client in 0..2 {
            // More lists than the cable can carry in the run: always something to prefetch.
            for k in 0..200 {
                options.push(Options {
                    congestion,
                    after: (k > 0).then(|| transfers.len() - 1),
                });
                transfers.push(Transfer {
                    id: 1_000_000 + client * 1000 + k,
                    server: c.prefetch,
                    client: c.client,
                    bytes: 80_000,
                    start: 0,
                });
            }
        }
    }
    let r = run(&c, &transfers, &options, 400 * SECOND);
    let demand_results: Vec<_> = r
        .results
        .iter()
        .filter(|r| r.transfer.id < demand as u64)
        .collect();
    assert_eq!(
        demand_results.len(),
        demand,
        "every demand transfer completes"
    );
    let window_s = (to - from) as f64 / SECOND as f64;
    let bps = |demand: bool| {
        r.results
            .iter()
            .filter(|r| (r.transfer.id < 1_000_000) == demand && r.received <= to)
            .map(|r| wire_bits(r.transfer.bytes))
            .sum::<f64>()
            / window_s
    };
    Loaded {
        demand_mean_s: demand_results
            .iter()
            .map(|r| (r.received - r.transfer.start) as f64 / SECOND as f64)
            .sum::<f64>()
            / demand as f64,
        demand_bps: bps(true),
        prefetch_bps: bps(false),
    }
}

#[test]
fn fig_13c_reno_prefetch_slows_demand_and_nice_prefetch_much_less() {
    let none = loaded(None);
    let reno = loaded(Some(Congestion::Reno));
    let nice = loaded(Some(NICE));
    let (reno_x, nice_x) = (
        reno.demand_mean_s / none.demand_mean_s,
        nice.demand_mean_s / none.demand_mean_s,
    );
    eprintln!(
        "demand mean: none {:.4} s ({:.0} kb/s), Reno prefetch {:.4} s ({reno_x:.2}x, prefetch {:.0} kb/s), Nice prefetch {:.4} s ({nice_x:.2}x, prefetch {:.0} kb/s)",
        none.demand_mean_s,
        none.demand_bps / 1e3,
        reno.demand_mean_s,
        reno.prefetch_bps / 1e3,
        nice.demand_mean_s,
        nice.prefetch_bps / 1e3
    );
    // Unloaded, a demand transfer takes about 90 ms: a few 10 ms round-trips and its bytes
    // at 1 Mb/s. Two Reno prefetchers with windows of 20 keep up to 38 packets (167 ms)
    // queued at the cable, and a transfer waits behind that queue on each of its round-trips
    // (paper 000: a factor of 7). Even half that queue (84 ms) on two round-trips would add
    // twice the unloaded time: at least three times slower.
    assert!(reno_x >= 3.0, "Reno prefetch: demand {reno_x:.2}x slower");
    // Nice halves within a round-trip or two once the queue passes a tenth of the range it
    // has seen, so it keeps a packet or two queued (5-9 ms a round-trip): a fraction of the
    // unloaded time, not a multiple (paper 000: under 30 % worse).
    assert!(nice_x <= 1.6, "Nice prefetch: demand {nice_x:.2}x slower");
    assert!(
        nice_x - 1.0 <= (reno_x - 1.0) / 5.0,
        "{nice_x:.2}x vs {reno_x:.2}x"
    );
    // Yet Nice still prefetches: most of the spare capacity (1 Mb/s less the demand), where
    // alone it takes at least 80 % of the link.
    let spare = CABLE as f64 - none.demand_bps;
    assert!(
        nice.prefetch_bps >= 0.6 * spare,
        "Nice prefetched {:.0} kb/s of {:.0} kb/s spare",
        nice.prefetch_bps / 1e3,
        spare / 1e3
    );
    assert!(reno.prefetch_bps > nice.prefetch_bps);
}
