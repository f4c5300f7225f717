//! Cross-validation against Debian's ns2 running the reference model of paper 003's hierarchy
//! (`../shared/reference/ns2/proxyhier.tcl`): both engines run the same workload file.
//!
//! Uncongested scenarios must agree transfer by transfer to within the 1 µs the reference
//! prints (plus rounding): the same TCP rules over the same links give the same times.

use std::path::PathBuf;
use std::process::Command;

use slipstream_sim::reference::{self, Chain};
use slipstream_sim::TcpConfig;

fn reference_model() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/ns2/proxyhier.tcl");
    assert!(
        path.exists(),
        "the ns2 reference model is missing at {}",
        path.display()
    );
    path
}

fn ns() -> &'static str {
    for candidate in ["/usr/bin/ns", "/usr/local/bin/ns"] {
        if std::path::Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("Debian's ns2 is not installed: apt-get install ns2 (.ci/run does)");
}

/// Per-transfer (lat_rx, lat_ack, retransmissions) by id.
type Results = std::collections::BTreeMap<u64, (f64, f64, u32)>;

/// Results from reference-format output.
fn parse_results(text: &str) -> Results {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| f[i].parse::<f64>().expect("number");
            (
                f[0].parse().expect("id"),
                (num(7), num(8), f[9].parse().expect("count")),
            )
        })
        .collect()
}

/// Runs ns2 on a generated workload with `args`, then our engine on the same workload.
fn both(args: &[&str], chain: Chain) -> (Results, Results) {
    both_with(args, chain, TcpConfig::ns2_235())
}

/// Runs ns2 on the reference model with `args`; returns the workload it generated and its
/// per-transfer results.
fn ns_run(args: &[&str]) -> (Vec<reference::Job>, Results) {
    let dir = tempfile::tempdir().expect("tempdir");
    let workload = dir.path().join("workload.txt");
    let ns_out = dir.path().join("ns.out");
    let status = Command::new(ns())
        .arg(reference_model())
        .args(args)
        .arg(format!("dump={}", workload.display()))
        .arg(format!("out={}", ns_out.display()))
        .current_dir(dir.path())
        .output()
        .expect("run ns");
    assert!(
        status.status.success(),
        "ns failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let text = std::fs::read_to_string(&workload).expect("workload");
    let jobs = reference::parse(&text, "workload.txt").expect("valid workload");
    (
        jobs,
        parse_results(&std::fs::read_to_string(&ns_out).expect("ns output")),
    )
}

fn both_with(args: &[&str], chain: Chain, tcp: TcpConfig) -> (Results, Results) {
    let (jobs, ns) = ns_run(args);
    let ours = reference::format(&reference::run(&chain, tcp, &jobs, reference::GRACE), &jobs);
    (ns, parse_results(&ours))
}

fn assert_identical(ns: &Results, ours: &Results) {
    assert_eq!(ns.len(), ours.len(), "both engines complete every transfer");
    for (id, (rx, ack, rexmit)) in ns {
        let (our_rx, our_ack, our_rexmit) = ours[id];
        assert!(
            (rx - our_rx).abs() < 2e-6,
            "transfer {id}: ns2 lat_rx {rx}, ours {our_rx}"
        );
        assert!(
            (ack - our_ack).abs() < 2e-6,
            "transfer {id}: ns2 lat_ack {ack}, ours {our_ack}"
        );
        assert_eq!(*rexmit, our_rexmit, "transfer {id}: retransmissions");
    }
}

#[test]
fn uncongested_baseline_matches_ns2_transfer_by_transfer() {
    let (ns, ours) = both(&["n=300", "rate=10", "seed=3"], Chain::default());
    assert_identical(&ns, &ours);
}

#[test]
fn uncongested_other_links_match_ns2_transfer_by_transfer() {
    let mut chain = Chain::default();
    chain.links[2].bits_per_second = 5_000_000;
    chain.links[2].delay = 20_000_000;
    chain.links[0].delay = 2_000_000;
    let (ns, ours) = both(
        &["n=200", "rate=5", "seed=11", "c3=5Mb", "d3=20ms", "d1=2ms"],
        chain,
    );
    assert_identical(&ns, &ours);
}

#[test]
fn handshake_and_the_papers_era_match_ns2_transfer_by_transfer() {
    // The reference's calibration setting for the paper: ns-2.26 timers and a SYN exchange.
    let tcp = TcpConfig {
        syn: true,
        ..TcpConfig::ns2_226()
    };
    let (ns, ours) = both_with(
        &["n=300", "rate=10", "seed=7", "syn=1", "era=2.26"],
        Chain::default(),
        tcp,
    );
    assert_identical(&ns, &ours);
}

/// Two-sample Kolmogorov–Smirnov distance between two samples.
fn ks_distance(a: &[f64], b: &[f64]) -> f64 {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let cdf = |s: &[f64], v: f64| s.partition_point(|x| *x <= v) as f64 / s.len() as f64;
    a.iter()
        .chain(&b)
        .map(|&v| (cdf(&a, v) - cdf(&b, v)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn congested_latency_distributions_agree_with_ns2_by_source() {
    // Paper 003's heavy load (80 requests/s on the 10 Mb/s client link): queues overflow and
    // TCP times out. Per transfer the engines part ways (ns-2 gives each agent a random clock
    // phase, boot_time_, that shifts RTO rounding), so the check is on distributions: for each
    // source, the two-sample Kolmogorov-Smirnov distance must be below the 5 % critical value
    // 1.358 * sqrt((n + m) / (n m)), i.e. the samples are statistically indistinguishable.
    let (jobs, ns) = ns_run(&["n=5000", "rate=80", "seed=1"]);
    let run = reference::run(
        &Chain::default(),
        TcpConfig::ns2_235(),
        &jobs,
        reference::GRACE,
    );
    assert!(run.drops > 0, "the scenario is congested");
    let ours = parse_results(&reference::format(&run, &jobs));
    assert_eq!(ns.len(), ours.len());
    for src in 1..=3u8 {
        let ids: Vec<u64> = jobs.iter().filter(|j| j.src == src).map(|j| j.id).collect();
        let a: Vec<f64> = ids.iter().map(|id| ns[id].0).collect();
        let b: Vec<f64> = ids.iter().map(|id| ours[id].0).collect();
        let (n, m) = (a.len() as f64, b.len() as f64);
        let critical = 1.358 * ((n + m) / (n * m)).sqrt();
        let d = ks_distance(&a, &b);
        assert!(
            d < critical,
            "source {src}: KS distance {d:.3} exceeds the 5 % critical value {critical:.3}"
        );
    }
}
