//! The status page, loaded in real headless Chromium: the charts must be drawn.

use std::process::Command;

use crate::support::{get, serve, site};

/// Debian's Chromium (installed by `.ci/run`).
fn chromium() -> &'static str {
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if std::path::Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("Chromium is not installed: run `apt-get install chromium` (.ci/run does)");
}

#[test]
fn status_page_draws_its_charts_in_chromium() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    for _ in 0..20 {
        get(node.addr, "/hello.txt");
        get(node.addr, "/large.bin");
    }
    check_charts(node.addr);
}

#[test]
fn proxy_status_page_draws_its_charts_in_chromium() {
    let dir = site();
    let origin = serve(dir.path(), &["--cache-control", "max-age=60"]);
    let proxy = crate::support::start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--origin",
            &format!("http://{}", origin.addr),
            "--name",
            "edge-7",
        ],
        "slipstream proxy",
    );
    for _ in 0..20 {
        get(proxy.addr, "/hello.txt");
    }
    // The node keeps its own history: the first sample is taken at start.
    let history: serde_json::Value =
        serde_json::from_slice(&get(proxy.addr, "/_slipstream/history").body).expect("json");
    assert_eq!(history["node"], "edge-7");
    let samples = history["samples"].as_array().expect("samples");
    assert!(!samples.is_empty());
    assert!(samples[0]["metrics"]
        .as_str()
        .expect("metrics text")
        .contains("slipstream_requests_total"));
    let dom = check_charts(proxy.addr);
    assert!(
        dom.contains("edge-7 \u{b7} "),
        "the header names the node:\n{dom}"
    );
}

/// A node's status page in headless Chromium, its DOM after five seconds of virtual time.
pub(crate) fn status_dom(node_addr: std::net::SocketAddr) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
            // Virtual time: the page's one-second polls run without the test waiting in real time.
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{node_addr}/_slipstream/status"))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dom.into_owned()
}

/// Loads a node's status page in headless Chromium and checks that every chart plotted data.
fn check_charts(node_addr: std::net::SocketAddr) -> String {
    let dom = status_dom(node_addr);
    assert!(
        dom.contains("data-charts-drawn=\"4\""),
        "not every chart was drawn:\n{dom}"
    );
    let canvases: Vec<&str> = dom.split("<canvas").skip(1).collect();
    assert_eq!(canvases.len(), 4);
    for c in canvases {
        let attr = |name: &str| -> u64 {
            c.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        assert!(attr("data-ink") > 1000, "a chart has almost no ink: {c}");
        assert!(attr("data-points") >= 1, "a chart plotted no data: {c}");
    }
    assert!(
        dom.contains("<div id=\"error\"></div>"),
        "the page reported a metrics error:\n{dom}"
    );
    assert!(
        dom.contains("data-history-samples=\""),
        "the page did not load the node's history:\n{dom}"
    );
    dom
}

#[test]
fn a_cluster_members_status_page_shows_its_view_of_the_directory() {
    let dir = site();
    let data = tempfile::tempdir().expect("data dir");
    let gossip = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port();
    let node = serve(
        dir.path(),
        &[
            "--set",
            "cluster.name=status-node",
            "--set",
            &format!("cluster.gossip_listen=127.0.0.1:{gossip}"),
            "--set",
            &format!("cluster.data_dir={}", data.path().display()),
            "--set",
            "cluster.publish=[\"/docs/*\"]",
            "--set",
            "cluster.secret=status-page-test-secret",
        ],
    );
    for _ in 0..5 {
        get(node.addr, "/hello.txt");
    }
    let dom = check_charts(node.addr);
    assert!(
        dom.contains("data-directory-entries=\"1\""),
        "the directory card lists the node's one entry:\n{dom}"
    );
    assert!(dom.contains("<td>/docs/*</td>"), "{dom}");
    assert!(
        dom.contains(&format!("<td>http://{}/docs/*</td>", node.addr)),
        "{dom}"
    );
    assert!(dom.contains("<td class=\"live\">live</td>"), "{dom}");
}

#[test]
fn a_prefetching_nodes_status_page_shows_its_monitor() {
    let dir = site();
    let node = serve(
        dir.path(),
        &[
            "--prefetch",
            "--set",
            "prefetch.probe_path=/hello.txt",
            "--set",
            "prefetch.experimental.threshold_ms=2s",
            "--set",
            "prefetch.listen=127.0.0.1:0",
            "--set",
            "prefetch.experimental.listener_priority=idle",
            "--set",
            "prefetch.experimental.cpu_count_idle=false",
        ],
    );
    for _ in 0..5 {
        get(node.addr, "/hello.txt");
    }
    // The monitor's first samples, then the page.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !String::from_utf8_lossy(&get(node.addr, "/_slipstream/prefetch").body)
        .contains("\"rt_us\"")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the monitor took no sample"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let dom = status_dom(node.addr);
    assert!(
        dom.contains("data-prefetch-drawn=\"4\""),
        "the prefetch charts (budget, probes, load, bytes) were not all drawn:\n{dom}"
    );
    assert!(dom.contains("id=\"c-budget\""), "{dom}");
    assert!(dom.contains("id=\"c-load\""), "{dom}");
    assert!(dom.contains("lists,"), "the budget's summary line:\n{dom}");
    // Pages that told their agent to wait instead of asking (`page_wait`, on by default).
    assert!(
        dom.contains("pages said wait"),
        "the budget's summary line counts the pages' waits:\n{dom}"
    );
    // The listener's CPU priority as applied (SCHED_IDLE, or nice 19 where refused), and the
    // load chart says the listener's idle-priority work is not in it.
    assert!(
        ["CPU sched idle)", "CPU nice19)", "CPU own thread)"]
            .iter()
            .any(|p| dom.contains(p)),
        "the listener's CPU priority:\n{dom}"
    );
    assert!(
        dom.contains("CPU load (idle-priority threads left out)"),
        "the load chart's legend:\n{dom}"
    );
    // The probes answer, so no failure is shown.
    assert!(
        dom.contains("id=\"pf-probe-failure\" hidden=\"\""),
        "a probe failure is shown for a probe that answers:\n{dom}"
    );
    assert!(
        dom.contains("<div id=\"error\"></div>"),
        "the page reported an error:\n{dom}"
    );
}

#[test]
fn a_probe_path_that_answers_404_is_named_on_the_status_page() {
    // Every probe fails, so the budget halves to nothing: the page must say why.
    let dir = site();
    let node = serve(
        dir.path(),
        &[
            "--prefetch",
            "--set",
            "prefetch.probe_path=/missing.txt",
            "--set",
            "prefetch.experimental.threshold_ms=2s",
        ],
    );
    crate::support::wait_for_json(
        node.addr,
        "/_slipstream/prefetch",
        "a probe failure recorded",
        |s| s["last_probe_failure"].is_object(),
    );
    let dom = status_dom(node.addr);
    assert!(
        dom.contains("/missing.txt answered 404 Not Found"),
        "the failing probe's path and status:\n{dom}"
    );
    assert!(
        !dom.contains("id=\"pf-probe-failure\" hidden=\"\""),
        "the failure line is hidden:\n{dom}"
    );
}
