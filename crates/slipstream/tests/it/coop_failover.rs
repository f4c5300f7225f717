//! No single point of failure in the cooperative cache (paper 004 §4.2, issue "Riptide in
//! use" item 3): two gateways and cache managers of one provider, each signing with its own
//! key under the provider's delegation (neither holds the provider's key), a `slipstream
//! bench` load through a cache node's browser proxy, and one gateway SIGKILLed in the middle
//! of it.

use std::time::{Duration, Instant};

use std::path::Path;

use crate::coop::{fetch, holds, node, setup, status, CoopNode};
use crate::support::{bin, wait_for_json};

/// Hits the node's lookups counted: its own store, a neighbour, the DHT.
fn hits(s: &serde_json::Value) -> u64 {
    ["store", "nearby", "dht"]
        .iter()
        .map(|k| s["lookups"][k].as_u64().unwrap_or(0))
        .sum()
}

/// `slipstream node ARGS…`'s stdout, which must succeed.
fn tool(args: &[&str]) -> String {
    let out = bin()
        .arg("node")
        .args(args)
        .output()
        .expect("slipstream node");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The provider (key file `key`) vouches for the node whose data directory is `data_dir`,
/// for `valid`; the delegation file.
fn delegate(key: &str, data_dir: &Path, valid: &str) -> String {
    let id = tool(&["id", data_dir.to_str().unwrap()]);
    assert!(id.starts_with("12D3KooW"), "{id}");
    let out = data_dir.with_extension(format!("{valid}.delegation"));
    let said = tool(&[
        "delegate",
        "--provider-key",
        key,
        "--node",
        &id,
        "--valid",
        valid,
        out.to_str().unwrap(),
    ]);
    assert!(said.contains(&id), "{said}");
    out.to_str().unwrap().to_owned()
}

/// A gateway and cache manager signing under a delegation, with its key in `data_dir`.
fn delegated_gateway(key: &str, provider: &str, data_dir: &Path, more: &[&str]) -> CoopNode {
    let delegation = delegate(key, data_dir, "1h");
    let mut args = vec![
        "--provider",
        provider,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--delegation",
        &delegation,
        "--role",
        "gateway",
        "--role",
        "manager",
    ];
    args.extend_from_slice(more);
    node(&args)
}

#[test]
fn a_gateway_starts_only_under_a_delegation_for_its_own_key_that_has_not_expired() {
    let s = setup(&[("a.txt", "a\n")], &[]);
    let dirs = tempfile::tempdir().unwrap();
    let (mine, other) = (dirs.path().join("mine"), dirs.path().join("other"));
    let expired = delegate(&s.key, &mine, "1ms");
    let for_other = delegate(&s.key, &other, "1h");
    std::thread::sleep(Duration::from_millis(5)); // past the 1 ms delegation's expiry
    let cases = [
        (&expired, "expired"),
        (&for_other, "the delegation is for the node"),
    ];
    for (delegation, message) in cases {
        let out = bin()
            .args([
                "node",
                "--listen",
                "127.0.0.1:0",
                "--provider",
                &s.provider,
                "--data-dir",
                mine.to_str().unwrap(),
                "--delegation",
                delegation,
                "--role",
                "gateway",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{delegation}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{delegation}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // Refused too: a delegation from another provider, and the provider's key with one.
    let other_key = dirs.path().join("other-provider.key");
    let other_provider = tool(&["keygen", other_key.to_str().unwrap()]);
    let theirs = delegate(other_key.to_str().unwrap(), &mine, "1h");
    for (args, message) in [
        (
            vec![
                "--provider",
                s.provider.as_str(),
                "--delegation",
                theirs.as_str(),
            ],
            "not from `provider`",
        ),
        (
            vec![
                "--provider-key",
                s.key.as_str(),
                "--delegation",
                theirs.as_str(),
            ],
            "not both",
        ),
    ] {
        let out = bin()
            .args([
                "node",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                mine.to_str().unwrap(),
                "--role",
                "gateway",
            ])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
    }
    assert!(other_provider.starts_with("12D3KooW"));
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

    // Neither gateway holds the provider's key: each signs under a delegation.
    let dirs = tempfile::tempdir().unwrap();
    let first = delegated_gateway(&s.key, &s.provider, &dirs.path().join("first"), &[]);
    let second = delegated_gateway(
        &s.key,
        &s.provider,
        &dirs.path().join("second"),
        &["--bootstrap", &first.p2p],
    );
    let cache = node(&[
        "--provider",
        &s.provider,
        "--bootstrap",
        &first.p2p,
        "--bootstrap",
        &second.p2p,
    ]);
    let c = cache.node.addr;
    // A delegated gateway says until when it may sign (an hour from now here).
    let until = status(second.node.addr)["delegation_expires_ms"]
        .as_u64()
        .expect("a delegated gateway's expiry");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!((now..now + 3_600_000).contains(&until), "{until} vs {now}");
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

/// The object of `url` in `s`'s store listing.
fn object<'a>(s: &'a serde_json::Value, url: &str) -> Option<&'a serde_json::Value> {
    s["objects"].as_array()?.iter().find(|o| o["url"] == url)
}

#[test]
fn replicas_lost_with_a_dead_node_are_made_again_up_to_min_replicas() {
    let s = setup(&[("x.txt", "the object\n")], &[]);
    let url = format!("http://{}/x.txt", s.origin.addr);
    // Hot at the first hint and spread over one more node; three live replicas wanted.
    let tuning = [
        "--set",
        "coop.hot_after=1",
        "--set",
        "coop.spread_copies=1",
        "--set",
        "coop.min_replicas=3",
    ];
    let mut args = vec![
        "--provider-key",
        s.key.as_str(),
        "--role",
        "gateway",
        "--role",
        "manager",
    ];
    args.extend_from_slice(&tuning);
    let gateway = node(&args);
    let mut caches: Vec<CoopNode> = (0..3)
        .map(|_| {
            let mut args = vec![
                "--provider",
                s.provider.as_str(),
                "--bootstrap",
                gateway.p2p.as_str(),
            ];
            args.extend_from_slice(&tuning);
            node(&args)
        })
        .collect();
    let g = gateway.node.addr;
    wait_for_json(g, "/_slipstream/coop", "every cache node is a peer", |s| {
        s["peers"].as_array().is_some_and(|p| p.len() >= 3)
    });
    let (st, _, _) = fetch(caches[0].node.addr, &url);
    assert_eq!(st, 200);
    // The gateway holds it, and its digests say a cache node does too.
    let seen = wait_for_json(g, "/_slipstream/coop", "a neighbour holds a replica", |s| {
        object(s, &url).is_some_and(|o| o["held_nearby"].as_u64() >= Some(1))
    });
    let holder = caches
        .iter()
        .position(|c| holds(&status(c.node.addr), &url))
        .unwrap_or_else(|| panic!("no cache node holds it: {seen}"));
    // That holder dies; the replicas are made again on the others.
    let mut dead = caches.remove(holder);
    dead.node.child.kill().expect("kill");
    dead.node.child.wait().expect("wait");
    for c in &caches {
        wait_for_json(
            c.node.addr,
            "/_slipstream/coop",
            "a replica made again",
            |s| holds(s, &url),
        );
    }
    assert!(holds(&status(g), &url));
    // Each answers it from its own store.
    for c in &caches {
        let (st, body, cs) = fetch(c.node.addr, &url);
        assert_eq!((st, body.as_slice()), (200, &b"the object\n"[..]));
        assert!(cs.contains("hit; detail=store"), "{cs}");
    }
}
