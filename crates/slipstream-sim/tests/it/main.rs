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

fn both_with(args: &[&str], chain: Chain, tcp: TcpConfig) -> (Results, Results) {
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
    let ours = reference::format(&reference::run(&chain, tcp, &jobs, reference::GRACE), &jobs);
    (
        parse_results(&std::fs::read_to_string(&ns_out).expect("ns output")),
        parse_results(&ours),
    )
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
