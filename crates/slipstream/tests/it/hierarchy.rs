//! A hierarchy of real processes: client → child proxy → two parent proxies → origin server,
//! with one parent stopped mid-run.

use crate::support::{get, site, start};

/// Parents are forward proxies, which reach an origin on loopback only when told to.
const LOOPBACK_ORIGINS: &str = "proxy.allow_destinations=[\"127.0.0.0/8\"]";

fn cache_status(r: &crate::support::Reply) -> String {
    r.header("cache-status").unwrap_or("").to_owned()
}

#[test]
fn child_fails_over_to_the_second_parent_when_the_first_stops() {
    let dir = site();
    let origin = start(
        &[
            "serve",
            dir.path().to_str().expect("utf-8"),
            "--listen",
            "127.0.0.1:0",
            "--cache-control",
            "max-age=60",
        ],
        "slipstream serve:",
    );
    let mut parent_a = start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "parent-a",
            "--set",
            LOOPBACK_ORIGINS,
        ],
        "slipstream proxy parent-a",
    );
    let parent_b = start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "parent-b",
            "--set",
            LOOPBACK_ORIGINS,
        ],
        "slipstream proxy parent-b",
    );
    let (a, b) = (
        format!("http://{}", parent_a.addr),
        format!("http://{}", parent_b.addr),
    );
    let child = start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "child",
            "--origin",
            &format!("http://{}", origin.addr),
            "--parent",
            &a,
            "--parent",
            &b,
            "--no-cache",
        ],
        "slipstream proxy child",
    );
    for _ in 0..5 {
        let r = get(child.addr, "/hello.txt");
        assert_eq!(r.body, b"hello, world\n");
        assert!(
            cache_status(&r).starts_with("parent-a;"),
            "{}",
            cache_status(&r)
        );
    }
    let warm = get(child.addr, "/hello.txt");
    assert!(
        cache_status(&warm).contains("parent-a; hit"),
        "the parent caches: {}",
        cache_status(&warm)
    );

    // Stop the first parent mid-run: requests keep succeeding through the second.
    let _ = parent_a.child.kill();
    let _ = parent_a.child.wait();
    for _ in 0..5 {
        let r = get(child.addr, "/hello.txt");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(
            cache_status(&r).starts_with("parent-b;"),
            "{}",
            cache_status(&r)
        );
    }
    let metrics = String::from_utf8(get(child.addr, "/_slipstream/metrics").body).expect("utf-8");
    assert!(
        metrics.contains(&format!(
            "slipstream_parent_up{{parent=\"{}\"}} 0",
            parent_a.addr
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "slipstream_parent_up{{parent=\"{}\"}} 1",
            parent_b.addr
        )),
        "{metrics}"
    );
    // Every request went to parent A first and failed over: each failure is counted.
    let failures = |parent: std::net::SocketAddr| -> u64 {
        let label = format!("slipstream_parent_failures_total{{parent=\"{parent}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(label.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label} in {metrics}"))
    };
    assert!(failures(parent_a.addr) >= 1, "{metrics}");
    assert_eq!(failures(parent_b.addr), 0, "{metrics}");
}
