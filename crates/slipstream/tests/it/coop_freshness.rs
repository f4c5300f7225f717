//! Freshness across the cooperative cache (paper 004 with RFC 9111 and RFC 5861): once an
//! object's `max-age` has passed, the nodes keep answering it; the origin sees conditional
//! requests (304s), not the bodies again; a stale copy stands in when the origin is down and
//! `stale-if-error` allows it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::coop::{fetch, holds, keygen, node, status, CoopNode};
use crate::support::{serve, wait_for_json, Node};

const FILES: [(&str, &str); 5] = [
    ("a.txt", "alpha\n"),
    ("b.txt", "bravo bravo\n"),
    ("c.txt", "charlie charlie charlie\n"),
    ("d.txt", "delta\n"),
    ("e.txt", "echo echo\n"),
];

/// An origin serving [`FILES`] with `cache_control`, logging to `log`.
fn origin(site: &Path, log: &Path, cache_control: &str) -> Node {
    for (name, body) in FILES {
        std::fs::write(site.join(name), body).unwrap();
    }
    serve(
        site,
        &[
            "--cache-control",
            cache_control,
            "--set",
            &format!("serve.access_log=\"{}\"", log.display()),
        ],
    )
}

/// A gateway and cache manager signing with `key`, and a cache node that joins it.
fn two_nodes(key: &str, provider: &str) -> (CoopNode, CoopNode) {
    let gateway = node(&[
        "--provider-key",
        key,
        "--role",
        "gateway",
        "--role",
        "manager",
    ]);
    let cache = node(&["--provider", provider, "--bootstrap", &gateway.p2p]);
    wait_for_json(
        cache.node.addr,
        "/_slipstream/coop",
        "the cache node sees the gateway",
        |s| s["peers"].as_array().is_some_and(|p| !p.is_empty()),
    );
    (gateway, cache)
}

/// The origin's access log as (path, status) pairs, once it has at least `at_least` lines
/// (the log is written off the request path).
fn log_lines(log: &Path, at_least: usize) -> Vec<(String, u16)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<(String, u16)> = text
            .lines()
            .map(|l| {
                // 127.0.0.1 - - [date] "GET /a.txt HTTP/1.1" 200 13 "-" "agent"
                let request = l.split('"').nth(1).unwrap_or_default();
                let path = request.split(' ').nth(1).unwrap_or_default().to_owned();
                let status = l
                    .split('"')
                    .nth(2)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                (path, status)
            })
            .collect();
        if lines.len() >= at_least {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the origin logged {} requests, not {at_least}: {text}",
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lets `max_age` seconds and a little more pass: what is under test is what the nodes do
/// once the clock has moved past an object's freshness lifetime.
fn let_expire(max_age: u64) {
    std::thread::sleep(Duration::from_millis(max_age * 1000 + 300));
}

#[test]
fn after_max_age_the_nodes_revalidate_and_the_origin_sends_each_body_once() {
    let (site, logs, keys) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let log = logs.path().join("origin.log");
    let origin = origin(site.path(), &log, "max-age=2");
    let (key, provider) = keygen(keys.path());
    let (gateway, cache) = two_nodes(&key, &provider);
    let (g, c) = (gateway.node.addr, cache.node.addr);
    let url = |name: &str| format!("http://{}/{name}", origin.addr);

    // Warm: each file once through the cache node (a miss: the origin answers, and the miss
    // hint has the gateway insert it), until the gateway holds them all.
    for (name, body) in FILES {
        let (st, got, cs) = fetch(c, &url(name));
        assert_eq!((st, got.as_slice()), (200, body.as_bytes()), "{cs}");
    }
    for (name, _) in FILES {
        wait_for_json(g, "/_slipstream/coop", "the gateway holds it", |s| {
            holds(s, &url(name))
        });
    }
    // The cache node's five misses and the gateway's five inserts; nothing else.
    let warm = log_lines(&log, 2 * FILES.len());
    assert_eq!(warm.len(), 2 * FILES.len(), "{warm:?}");

    // Three expiry periods; in each, every file through both nodes.
    let rounds = 3;
    let mut statuses: Vec<String> = Vec::new();
    for _ in 0..rounds {
        let_expire(2);
        for (name, body) in FILES {
            for proxy in [c, g] {
                let (st, got, cs) = fetch(proxy, &url(name));
                assert_eq!((st, got.as_slice()), (200, body.as_bytes()), "{name}: {cs}");
                statuses.push(cs);
            }
        }
    }
    // Each expiry sent one conditional request per object at most, cluster-wide, and no
    // body came again: the origin answered 304s.
    let lines = log_lines(&log, warm.len() + FILES.len());
    let after = &lines[warm.len()..];
    let mut by_path: HashMap<&str, (usize, usize)> = HashMap::new();
    for (path, status) in after {
        let e = by_path.entry(path.as_str()).or_default();
        match status {
            200 => e.0 += 1,
            304 => e.1 += 1,
            other => panic!("the origin answered {other} to {path}: {after:?}"),
        }
    }
    for (name, _) in FILES {
        let (full, not_modified) = by_path
            .get(format!("/{name}").as_str())
            .copied()
            .unwrap_or_default();
        assert_eq!(full, 0, "{name}: a body sent again: {after:?}");
        assert!(
            (1..=rounds).contains(&not_modified),
            "{name}: {not_modified} revalidations in {rounds} expiry periods: {after:?}"
        );
    }
    // The answers say what happened: copies renewed by a gateway's revalidation.
    assert!(
        statuses
            .iter()
            .any(|s| s.contains("fwd-status=304; detail=\"revalidated by gateway")),
        "{statuses:?}"
    );
    let s = status(c);
    let revalidated = |s: &serde_json::Value| {
        s["lookups"]["revalidated"].as_u64().unwrap_or(0)
            + s["lookups"]["refetched"].as_u64().unwrap_or(0)
    };
    assert!(revalidated(&s) + revalidated(&status(g)) > 0, "{s}");
}

#[test]
fn a_stale_copy_answers_while_the_origin_is_down_if_stale_if_error_allows() {
    let (site, logs, keys) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let log = logs.path().join("origin.log");
    let origin = origin(site.path(), &log, "max-age=1, stale-if-error=600");
    let (key, provider) = keygen(keys.path());
    let (gateway, cache) = two_nodes(&key, &provider);
    let (g, c) = (gateway.node.addr, cache.node.addr);
    let url = format!("http://{}/a.txt", origin.addr);
    let (st, _, _) = fetch(c, &url);
    assert_eq!(st, 200);
    wait_for_json(g, "/_slipstream/coop", "the gateway holds it", |s| {
        holds(s, &url)
    });

    // The origin goes away; the copies go stale.
    drop(origin);
    let_expire(1);
    for proxy in [g, c] {
        let (st, body, cs) = fetch(proxy, &url);
        assert_eq!((st, body.as_slice()), (200, &b"alpha\n"[..]), "{cs}");
        assert!(cs.contains("stale-if-error"), "{cs}");
    }
    let s = status(g);
    assert!(
        s["lookups"]["revalidation_failed"].as_u64() >= Some(1),
        "{s}"
    );
}
