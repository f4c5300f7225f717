//! No single point of failure in the cooperative cache (paper 004 §4.2, issue "Riptide in
//! use" item 3): two gateways and cache managers of one provider, a `slipstream bench` load
//! through a cache node's browser proxy, and one gateway SIGKILLed in the middle of it.

use std::time::{Duration, Instant};

use crate::coop::{fetch, holds, node, setup, status};
use crate::support::{bin, wait_for_json};

/// Hits the node's lookups counted: its own store, a neighbour, the DHT.
fn hits(s: &serde_json::Value) -> u64 {
    ["store", "nearby", "dht"]
        .iter()
        .map(|k| s["lookups"][k].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn a_gateway_killed_under_load_fails_no_request_and_new_objects_are_still_cached() {
    let names: Vec<String> = (0..12).map(|i| format!("f{i}.txt")).collect();
    let bodies: Vec<String> = (0..12).map(|i| format!("file {i}\n").repeat(50)).collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .zip(&bodies)
        .map(|(n, b)| (n.as_str(), b.as_str()))
        .collect();
    let s = setup(&files, &[]);
    let origin = s.origin.addr;
    let url = |name: &str| format!("http://{origin}/{name}");

    let first = node(&[
        "--provider-key",
        &s.key,
        "--role",
        "gateway",
        "--role",
        "manager",
    ]);
    let second = node(&[
        "--provider-key",
        &s.key,
        "--role",
        "gateway",
        "--role",
        "manager",
        "--bootstrap",
        &first.p2p,
    ]);
    let cache = node(&[
        "--provider",
        &s.provider,
        "--bootstrap",
        &first.p2p,
        "--bootstrap",
        &second.p2p,
    ]);
    let c = cache.node.addr;
    wait_for_json(c, "/_slipstream/coop", "both gateways are peers", |s| {
        s["peers"].as_array().is_some_and(|p| p.len() >= 2)
    });

    // The first eight files are the load's; each is missed once and made a replica of by the
    // nearest manager.
    let load: Vec<&str> = names[..8].iter().map(String::as_str).collect();
    for name in &load {
        let (st, _, _) = fetch(c, &url(name));
        assert_eq!(st, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !load.iter().all(|n| {
        holds(&status(first.node.addr), &url(n)) || holds(&status(second.node.addr), &url(n))
    }) {
        assert!(Instant::now() < deadline, "replicas never made");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The load: four clients for eight seconds through the cache node's proxy.
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("urls.txt");
    let report = dir.path().join("bench.json");
    std::fs::write(
        &list,
        load.iter().map(|n| format!("1 /{n}\n")).collect::<String>(),
    )
    .unwrap();
    let mut bench = bin()
        .args([
            "bench",
            &format!("http://{origin}"),
            "--proxy",
            &format!("http://{c}"),
            "--urls",
            list.to_str().unwrap(),
            "--clients",
            "4",
            "--duration",
            "8s",
            "--json",
            report.to_str().unwrap(),
            "-q",
        ])
        .spawn()
        .expect("bench");
    // Once the load is being served by the cooperative cache, the first gateway dies.
    let before = hits(&status(c));
    wait_for_json(c, "/_slipstream/coop", "hits under load", |s| {
        hits(s) >= before + 200
    });
    let mut first = first;
    first.node.child.kill().expect("kill");
    first.node.child.wait().expect("wait");
    let at_kill = hits(&status(c));
    assert!(bench.wait().expect("bench").success());

    // No request failed, and the cooperative cache kept answering.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["error_count"], 0, "{r}");
    assert!(r["completed"].as_u64() > Some(400), "{r}");
    let after = status(c);
    assert!(
        hits(&after) > at_kill + 100,
        "hits after the kill: {} then {}: {after}",
        at_kill,
        hits(&after)
    );

    // The copies that served the load were spread: the load a holder serves counts, so the
    // cache node whose clients ask for them holds replicas of its own.
    assert!(after["store"]["objects"].as_u64() >= Some(1), "{after}");

    // Objects never seen before are still cached: their miss hints reach the surviving
    // manager, whose gateway inserts them.
    for name in &names[8..] {
        let (st, body, _) = fetch(c, &url(name));
        assert_eq!(st, 200);
        assert_eq!(
            body,
            bodies[names.iter().position(|n| n == name).unwrap()].as_bytes()
        );
    }
    for name in &names[8..] {
        wait_for_json(
            second.node.addr,
            "/_slipstream/coop",
            "the new object cached",
            |s| holds(s, &url(name)),
        );
    }
    // And a second request for one is a cooperative hit.
    let (st, _, cs) = fetch(c, &url(&names[8]));
    assert_eq!(st, 200);
    assert!(cs.contains("slipstream-coop; hit"), "{cs}");
}
