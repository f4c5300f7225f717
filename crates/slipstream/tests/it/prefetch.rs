//! NPS on a `serve` node (paper 000): the hint server learns from the demand stream, the
//! monitor sets the budget from its probes, bad hint requests are refused and change nothing.

use std::net::SocketAddr;

use crate::support::{get, request, serve};

fn status(addr: SocketAddr) -> serde_json::Value {
    crate::support::json(addr, "/_slipstream/prefetch")
}

/// Polls the status until `done` holds: training and probing run on their own tasks, so the
/// test waits for what they report, not for a fixed time.
fn wait_until(
    addr: SocketAddr,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    crate::support::wait_for_json(addr, "/_slipstream/prefetch", what, done)
}

fn hints(addr: SocketAddr, query: &str) -> serde_json::Value {
    let r = get(addr, &format!("/_slipstream/hints?{query}"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    serde_json::from_slice(&r.body).expect("hints JSON")
}

fn pages() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for p in ["a", "b", "c", "d", "e"] {
        std::fs::write(
            dir.path().join(format!("{p}.html")),
            format!("<h1>{p}</h1>\n"),
        )
        .expect("write");
    }
    dir
}

/// [`pages`] and `/p.html`, a page with a head (which the munger adds its script to).
fn pages_with_a_page() -> tempfile::TempDir {
    let site = pages();
    std::fs::write(
        site.path().join("p.html"),
        "<html><head><title>p</title></head><body>p</body></html>",
    )
    .expect("write");
    site
}

#[test]
fn hints_come_from_the_demand_stream_and_bad_requests_change_nothing() {
    let site = pages();
    let node = serve(
        site.path(),
        &[
            "--prefetch",
            "--set",
            "prefetch.experimental.budget=unlimited",
            "--set",
            "prefetch.experimental.doc_files=2",
        ],
    );
    let addr = node.addr;
    // Six clients (told apart by user agent) walk a → b → c → d.
    for c in 0..6 {
        let ua = format!("client-{c}");
        for p in ["a", "b", "c", "d"] {
            let r = request(addr, "GET", &format!("/{p}.html"), &[("User-Agent", &ua)]);
            assert_eq!(r.status, 200);
        }
    }
    wait_until(addr, "24 demand requests learnt", |s| {
        s["model"]["learnt"] == 24
    });
    let first = hints(addr, "url=/b.html&prev=/a.html");
    assert_eq!(first["hints"], serde_json::json!(["/c.html", "/d.html"]));
    assert_eq!(first["next_turn"], 1);
    assert_eq!(first["retry_after_ms"], serde_json::Value::Null);
    // The next turn goes on down the ranking (popularity fills in: a, b are the client's own).
    let second = hints(addr, "url=/b.html&prev=/a.html&turn=1");
    assert!(
        second["hints"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h != "/c.html" && h != "/d.html" && h != "/a.html" && h != "/b.html"),
        "{second}"
    );

    // A prefetch is counted as one and not learnt.
    let r = request(addr, "GET", "/e.html", &[("Sec-Purpose", "prefetch")]);
    assert_eq!(r.status, 200);
    let s = wait_until(addr, "the prefetch counted", |s| {
        s["prefetch"]["requests"] == 1
    });
    assert_eq!(s["demand"]["requests"], 24);

    // Malformed hint requests: 400 with a reason, and nothing learnt or granted.
    let before = status(addr);
    for bad in [
        "/_slipstream/hints",
        "/_slipstream/hints?prev=/a.html",
        "/_slipstream/hints?url=a.html",
        "/_slipstream/hints?url=/a.html&turn=-3",
        "/_slipstream/hints?url=/a.html&turn=99999999999",
        "/_slipstream/hints?url=javascript:alert(1)",
    ] {
        let r = get(addr, bad);
        assert_eq!(r.status, 400, "{bad}");
        assert!(!r.body.is_empty(), "{bad}: a reason");
    }
    let r = request(addr, "POST", "/_slipstream/hints?url=/a.html", &[]);
    assert_eq!(r.status, 405);
    let after = status(addr);
    assert_eq!(after["model"], before["model"]);
    assert_eq!(after["lists"], before["lists"]);
    // The server still serves, and still hints.
    assert_eq!(get(addr, "/a.html").status, 200);
    assert_eq!(
        hints(addr, "url=/b.html&prev=/a.html")["hints"],
        first["hints"]
    );
}

#[test]
fn save_data_gets_no_hints_and_personal_pages_are_neither_learnt_nor_hinted() {
    let site = pages();
    let sets = [
        "--prefetch",
        "--set",
        "prefetch.experimental.budget=unlimited",
        "--set",
        "prefetch.experimental.doc_files=2",
    ];
    let node = serve(site.path(), &sets);
    let addr = node.addr;
    for c in 0..6 {
        let ua = format!("client-{c}");
        for p in ["a", "b", "c", "d"] {
            // The same walk with a cookie, by other clients: not learnt.
            let cookie_ua = format!("cookie-client-{c}");
            let r = request(
                addr,
                "GET",
                &format!("/{p}.html"),
                &[("User-Agent", &cookie_ua), ("Cookie", "session=1")],
            );
            assert_eq!(r.status, 200);
            let r = request(addr, "GET", &format!("/{p}.html"), &[("User-Agent", &ua)]);
            assert_eq!(r.status, 200);
        }
    }
    let s = wait_until(addr, "24 demand requests learnt", |s| {
        s["model"]["learnt"] == 24
    });
    assert_eq!(s["guards"]["personal_not_learnt"], 24, "{s}");
    assert_eq!(
        hints(addr, "url=/b.html&prev=/a.html")["hints"],
        serde_json::json!(["/c.html", "/d.html"])
    );
    // Save-Data, or a 2G connection: nothing, and no chain to come back for.
    for header in [("Save-Data", "on"), ("ECT", "2g")] {
        let r = request(
            addr,
            "GET",
            "/_slipstream/hints?url=/b.html&prev=/a.html",
            &[header],
        );
        assert_eq!(r.status, 200);
        let a: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(a["hints"], serde_json::json!([]), "{header:?}: {a}");
        assert_eq!(a["next_turn"], serde_json::Value::Null);
        assert_eq!(a["save_data"], true);
    }
    let r = request(
        addr,
        "GET",
        "/_slipstream/speculationrules?url=/b.html&prev=/a.html",
        &[("Save-Data", "on")],
    );
    let rules: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        rules["prefetch"][0]["urls"],
        serde_json::json!([]),
        "{rules}"
    );
    let s = status(addr);
    assert_eq!(s["guards"]["save_data_requests"], 3, "{s}");

    // Pages a cache may not share: neither learnt nor hinted.
    let private = serve(
        site.path(),
        &[
            &sets[..],
            &["--set", "serve.cache_control=private, max-age=60"],
        ]
        .concat(),
    );
    for c in 0..6 {
        let ua = format!("client-{c}");
        for p in ["a", "b", "c", "d"] {
            let r = request(
                private.addr,
                "GET",
                &format!("/{p}.html"),
                &[("User-Agent", &ua)],
            );
            assert_eq!(r.status, 200);
            assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
        }
    }
    let s =
        crate::support::wait_for_json(private.addr, "/_slipstream/prefetch", "24 personal", |s| {
            s["guards"]["personal_not_learnt"] == 24
        });
    assert_eq!(s["model"]["learnt"], 0, "{s}");
    assert_eq!(s["guards"]["personal_urls"], 4, "{s}");
    assert_eq!(
        hints(private.addr, "url=/b.html&prev=/a.html")["hints"],
        serde_json::json!([])
    );
}

/// A monitored node on `site` (probing `/a.html`, a 2 s threshold no idle probe crosses, and
/// no validation: on an idle server nobody uses the budget, which would hold it at one list an
/// epoch), once its budget has grown to 100 files/s; its status then.
fn grown_budget(
    site: &std::path::Path,
    extra: &[&str],
) -> (crate::support::Node, serde_json::Value) {
    let mut args = vec![
        "--prefetch",
        "--set",
        "prefetch.probe_path=/a.html",
        "--set",
        "prefetch.experimental.threshold_ms=2s",
        "--set",
        "prefetch.experimental.validate_usage=0",
    ];
    args.extend_from_slice(extra);
    let node = serve(site, &args);
    let s = wait_until(node.addr, "the budget grown", |s| {
        s["budget_per_s"].as_f64().unwrap() >= 100.0
    });
    (node, s)
}

#[test]
fn the_monitor_grows_the_budget_on_an_idle_server() {
    let site = pages();
    let (node, s) = grown_budget(site.path(), &[]);
    let samples = s["samples"].as_array().unwrap();
    assert!(samples.iter().any(|x| x["change"] == "increased"), "{s}");
    assert!(
        samples.iter().all(|x| x["rt_us"].is_u64()),
        "an idle server's probes all answer: {s}"
    );
    assert_eq!(s["threshold_us"], 2_000_000);
    // With a budget of at least 10 lists a second, a client that comes back when told gets a
    // list within a few slots (the paced budget's first slot is one interval after the first
    // request).
    let granted =
        (0..20).any(
            |_| match hints(node.addr, "url=/a.html")["retry_after_ms"].as_u64() {
                None => true,
                Some(ms) => {
                    std::thread::sleep(std::time::Duration::from_millis(ms.min(2_000)));
                    false
                }
            },
        );
    assert!(
        granted,
        "no hint request was granted a list with budget {}",
        s["budget_per_s"]
    );
}

#[test]
fn a_failing_probe_leaves_no_budget_and_every_client_is_told_to_wait() {
    // The probe target does not exist: every probe fails, which the monitor must read as an
    // overloaded server. Shedding off: the waits here are the budget's own (shedding gives
    // its own waits, tested below).
    let site = pages();
    let node = overloaded_node(site.path(), &["--set", "prefetch.experimental.shed=false"]);
    let s = wait_until(node.addr, "the budget halved to nothing", |s| {
        s["budget_per_s"].as_f64().unwrap() < 0.01
    });
    assert!(s["samples"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["change"] == "halved"));
    // The status says why: the probe path names no file.
    assert!(s["probe_failures"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(
        s["last_probe_failure"]["reason"], "answered 404 Not Found",
        "{s}"
    );
    assert_eq!(s["probe_path"], "/missing.html");
    for _ in 0..50 {
        let h = hints(node.addr, "url=/a.html");
        assert_eq!(h["hints"], serde_json::json!([]));
        let wait = h["retry_after_ms"].as_u64().expect("a retry-after");
        // With no budget, about as long as the longest wait (50 epochs), never longer.
        assert!((2_000..=5_000).contains(&wait), "{h}");
        assert_eq!(h["next_turn"], 0);
    }
}

#[test]
fn a_node_with_nothing_to_give_tells_its_pages_to_wait_and_no_agent_asks() {
    // Every probe fails, so the budget halves to nothing: every hint request would be told to
    // wait. The pages say so, and the agents wait without asking.
    let site = pages_with_a_page();
    let node = overloaded_node(site.path(), &["--set", "prefetch.experimental.shed=false"]);
    wait_until(node.addr, "the budget halved to nothing", |s| {
        s["budget_per_s"].as_f64().unwrap() < 0.01
    });
    let (page, wait) = page_with_millis(node.addr, "/p.html", "slipstream-hints-wait-ms");
    // As a hint request refused for want of budget is told: the longest wait's second half.
    assert!((2_500..=5_000).contains(&wait), "{wait}");
    let html = String::from_utf8_lossy(&page.body);
    // The munged script carries the same wait, and when it was given (so that an agent can
    // tell a stale cached copy).
    assert!(
        html.contains(&format!(
            r#"data-hints-wait-ms="{wait}" data-hints-wait-at=""#
        )),
        "{html}"
    );
    // Not on what is not a page.
    std::fs::write(site.path().join("t.txt"), "t").expect("write");
    assert_eq!(
        get(node.addr, "/t.txt").header("slipstream-hints-wait-ms"),
        None
    );
    let before = status(node.addr);
    let run = hinted_run(node.addr, site.path(), "/p.html\n", &["--duration", "1s"]);
    let after = status(node.addr);
    let documents = run["demand"]["completed"].as_u64().expect("completed");
    assert!(documents >= 10, "{run}");
    // Every client's page said wait, longer than its 1 s visit: none asked.
    assert_eq!(run["page_waits"].as_u64(), Some(documents), "{run}");
    assert_eq!(run["hint_requests"], 0, "{run}");
    assert_eq!(
        after["waits"], before["waits"],
        "hint requests reached the node"
    );
    assert_eq!(after["lists"], before["lists"]);
    assert!(
        after["page_waits"].as_u64().unwrap() >= before["page_waits"].as_u64().unwrap() + documents,
        "{after}"
    );
}

#[test]
fn pages_invite_about_twice_the_agents_the_budget_has_lists_for_and_the_rest_do_not_ask() {
    // A budget of at most 4 files a second (0.4 lists, D = 10) against 20 pages a second:
    // about one agent in 25 is invited to ask; the others' pages carry the wait a refused
    // hint request would get. With invitations off (`page_invite = 0`), every agent asks.
    let site = pages_with_a_page();
    let run = |invite: &str| {
        let node = serve(
            site.path(),
            &[
                "--prefetch",
                "--set",
                "prefetch.probe_path=/a.html",
                "--set",
                "prefetch.experimental.threshold_ms=1000",
                "--set",
                "prefetch.max_budget_per_s=4",
                "--set",
                &format!("prefetch.experimental.page_invite={invite}"),
            ],
        );
        wait_until(node.addr, "the budget grown to its bound", |s| {
            s["budget_per_s"].as_f64().unwrap() >= 4.0
        });
        let before = status(node.addr);
        let run = hinted_run(node.addr, site.path(), "/p.html\n", &["--duration", "2s"]);
        let after = status(node.addr);
        let documents = run["demand"]["completed"].as_u64().expect("completed");
        assert!(documents >= 20, "{run}");
        let not_invited = after["pages_not_invited"].as_u64().unwrap()
            - before["pages_not_invited"].as_u64().unwrap();
        (documents, run, not_invited, after)
    };
    let (documents, all, not_invited, after) = run("0");
    assert_eq!(not_invited, 0, "{after}");
    assert!(
        all["hint_requests"].as_u64().unwrap() >= documents,
        "invitations off: {all}"
    );
    let (documents, invited, not_invited, after) = run("2");
    assert_eq!(after["page_invite"], 2.0);
    // About 24 pages in 25 not invited once the pages' rate has risen from nothing (the
    // first pages of a fresh node are invited: 5 or 6 of 40 expected in all); at least half,
    // whatever the draws.
    assert!(
        not_invited * 2 >= documents,
        "{not_invited} of {documents}: {after}"
    );
    assert!(
        invited["page_waits"].as_u64().unwrap() >= not_invited,
        "the agents waited as their pages said: {invited}"
    );
    assert!(
        invited["hint_requests"].as_u64().unwrap() * 2 <= documents,
        "invitations on: {invited}"
    );
    assert!(after["pages_per_s"].as_f64().unwrap() > 5.0, "{after}");
}

/// A node whose every probe fails (an overloaded server, as the monitor reads it), with
/// `extra` settings, once its monitor has taken a sample.
fn overloaded_node(site: &std::path::Path, extra: &[&str]) -> crate::support::Node {
    let mut args = vec![
        "--prefetch",
        "--set",
        "prefetch.probe_path=/missing.html",
        "--set",
        "prefetch.experimental.threshold_ms=2s",
    ];
    args.extend_from_slice(extra);
    let node = serve(site, &args);
    wait_until(node.addr, "a sample", |s| {
        !s["samples"].as_array().unwrap().is_empty()
    });
    node
}

#[test]
fn an_overloaded_node_sheds_prefetches_at_once_and_still_serves_demand() {
    let site = pages();
    let node = overloaded_node(site.path(), &[]);
    let s = status(node.addr);
    assert_eq!(s["shed"], true, "on by default");
    assert_eq!(s["shedding"], true, "{s}");
    // The agent's prefetch and a browser's own are refused with a 503 that says when to come
    // back and is never cached; the same file as demand is served.
    for header in ["Purpose", "Sec-Purpose"] {
        let r = request(node.addr, "GET", "/b.html", &[(header, "prefetch")]);
        assert_eq!(r.status, 503, "{header}");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    let r = get(node.addr, "/b.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<h1>b</h1>\n");
    // A hint request gets no list and a wait of at least an epoch.
    let h = hints(node.addr, "url=/a.html");
    assert_eq!(h["hints"], serde_json::json!([]));
    assert!(h["retry_after_ms"].as_u64().expect("a wait") >= 1, "{h}");
    let s = status(node.addr);
    assert!(s["shed_prefetches"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["shed_hint_requests"].as_u64().unwrap() >= 1, "{s}");
    // The browser's own prefetch is counted as refused too.
    assert!(
        s["refused_browser_prefetches"].as_u64().unwrap() >= 1,
        "{s}"
    );
    assert_eq!(s["prefetch"]["requests"], 0, "{s}");

    // With shedding off, the agent's prefetch (whose list the budget granted) is served.
    let node = overloaded_node(site.path(), &["--set", "prefetch.experimental.shed=false"]);
    let s = status(node.addr);
    assert_eq!(
        (s["shed"].clone(), s["shedding"].clone()),
        (false.into(), false.into())
    );
    let r = request(node.addr, "GET", "/b.html", &[("Purpose", "prefetch")]);
    assert_eq!(r.status, 200);
    assert_eq!(status(node.addr)["shed_prefetches"], 0);
}

#[test]
fn the_threshold_is_found_at_the_knee_when_not_configured() {
    let site = pages();
    let node = serve(
        site.path(),
        &["--prefetch", "--set", "prefetch.probe_path=/a.html"],
    );
    let s = wait_until(node.addr, "the start-up curve measured", |s| {
        s["startup_curve"].as_array().is_some_and(|c| c.len() == 7)
    });
    assert_eq!(s["threshold_configured"], false);
    // Nothing but the monitor's own probes reached the idle node while it measured.
    assert!(
        s["threshold_source"] == "knee" || s["threshold_source"] == "no knee",
        "{s}"
    );
    let threshold = s["threshold_us"].as_u64().unwrap();
    assert!(
        threshold >= 1000,
        "never below min_threshold_ms: {threshold}"
    );
}

#[test]
fn a_bad_prefetch_table_is_refused_with_its_field() {
    let site = pages();
    for (setting, named) in [
        (
            "prefetch.experimental.budget=lots",
            "[prefetch] experimental.budget",
        ),
        (
            "prefetch.experimental.listener_priority=lowest",
            "listener_priority",
        ),
    ] {
        let out = crate::support::bin()
            .args([
                "serve",
                site.path().to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--set",
                setting,
            ])
            .output()
            .expect("run");
        assert!(!out.status.success(), "{setting}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{setting}: {err}");
    }
}

#[test]
fn the_demo_prefetches() {
    let files = tempfile::tempdir().expect("tempdir");
    let node = crate::support::demo(files.path());
    let line = node.wait_for_line("NPS:");
    let origin: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no origin address in {line:?}"));
    let s = status(origin);
    assert_eq!(s["budget"], "monitor");
    assert!(
        s["listener"]["base"].is_string(),
        "a prefetch listener: {s}"
    );
    assert!(s["model"]["learnt"].as_u64().unwrap() > 0, "{s}");
    // The warm-up's agents asked for hints; the monitor had been probing since the start.
    assert!(
        s["samples"].as_array().is_some_and(|a| !a.is_empty()),
        "{s}"
    );
    let warm = node.wait_for_line("warm-up:");
    assert!(warm.contains("hint requests"), "{warm}");
}

/// `slipstream bench` against `addr`: agents arriving at 20 documents/s from `urls`, each
/// staying 1 s, with `extra` arguments; the run must succeed.
fn run_agents(addr: SocketAddr, urls: &std::path::Path, extra: &[&str]) {
    let out = crate::support::bin()
        .args(["bench", &format!("http://{addr}"), "--urls"])
        .arg(urls)
        .args(["--rate", "20", "--visit", "1s", "-q"])
        .args(extra)
        .output()
        .expect("run bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`run_agents`] with hinted agents on `urls` (written to `site`) and `extra` arguments;
/// the run's JSON report.
fn hinted_run(
    addr: SocketAddr,
    site: &std::path::Path,
    urls: &str,
    extra: &[&str],
) -> serde_json::Value {
    let list = site.join("urls.txt");
    std::fs::write(&list, urls).expect("write");
    let json = site.join("run.json");
    let mut args = vec!["--agents", "hinted"];
    args.extend_from_slice(extra);
    args.extend(["--json", json.to_str().expect("a UTF-8 path")]);
    run_agents(addr, &list, &args);
    serde_json::from_slice(&std::fs::read(&json).expect("read run.json")).expect("json")
}

#[test]
fn pages_name_the_prefetch_listener_and_the_agents_ask_it_for_every_hint_list() {
    let site = pages_with_a_page();
    let node = crate::support::serve(
        site.path(),
        &[
            "--prefetch",
            "--set",
            "prefetch.experimental.budget=unlimited",
            "--set",
            "prefetch.listen=127.0.0.1:0",
        ],
    );
    let s = status(node.addr);
    let base = s["listener"]["base"]
        .as_str()
        .expect("a listener")
        .to_owned();
    // A page names the listener: in a header (for agents that read no HTML) and in the
    // munged registration script (for the Service Worker).
    let page = get(node.addr, "/p.html");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("slipstream-prefetch-base"), Some(base.as_str()));
    // With a budget (here unlimited) a page never tells its agent to wait.
    assert_eq!(page.header("slipstream-hints-wait-ms"), None);
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains(&format!(r#"data-prefetch-base="{base}""#)),
        "{html}"
    );
    let urls = site.path().join("urls.txt");
    std::fs::write(&urls, "/a.html\n/b.html\n/c.html\n").expect("write");
    // Two hint lists after every document, whatever the answers (No-Avoidance): the first
    // request goes where the page said, the second where the first answer said.
    let json = site.path().join("run.json");
    run_agents(
        node.addr,
        &urls,
        &[
            "--agents",
            "2",
            "--doc-files",
            "1",
            "--duration",
            "1s",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let s = status(node.addr);
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read run.json")).expect("json");
    let via = s["hint_requests_via_listener"].as_u64().unwrap();
    // 20 documents, two hint requests each (a client whose visit ended early asks fewer),
    // every one through the listener: the run waits for every client before it reports, so
    // each request it counted had its answer, and the listener counts before answering.
    let asked = run["hint_requests"].as_u64().expect("hint_requests");
    assert!(asked >= 20, "{run}");
    assert_eq!(via, asked, "a hint request on the demand port: {s} {run}");
}

#[test]
fn the_bench_agents_prefetch_what_their_lists_granted_and_are_charged_once() {
    let site = pages();
    let (node, _) = grown_budget(site.path(), &["--set", "prefetch.experimental.doc_files=2"]);
    let urls = site.path().join("urls.txt");
    std::fs::write(&urls, "/a.html\n/b.html\n/c.html\n/d.html\n/e.html\n").expect("write");
    let json = site.path().join("run.json");
    // The agents' prefetching on a thread of its own at idle priority (on the process's
    // CPUs, then pinned to CPU 0), then on the demand clients' threads (the default): all
    // prefetch.
    let mut prefetched = 0;
    let cpu = first_allowed_cpu();
    for (priority, pinned) in [
        ("idle", None),
        ("idle", Some(cpu.as_str())),
        ("normal", None),
    ] {
        let mut args = vec![
            "--agents",
            "hinted",
            "--doc-files",
            "2",
            "--duration",
            "2s",
            "--json",
            json.to_str().unwrap(),
            "--prefetch-priority",
            priority,
        ];
        if let Some(cpu) = pinned {
            args.extend(["--prefetch-cpu", cpu]);
        }
        run_agents(node.addr, &urls, &args);
        let s = status(node.addr);
        let now = s["prefetch"]["requests"].as_u64().unwrap();
        assert!(now > prefetched, "{priority}: {s}");
        prefetched = now;
        // Every granted file was a list's: the agents' prefetches are the agent's (`Purpose`),
        // not browser prefetches admitted against the budget a second time.
        assert_eq!(s["granted_files"], s["lists"].as_u64().unwrap() * 2, "{s}");
        assert_eq!(s["refused_browser_prefetches"], 0, "{s}");
        // The timeline holds every completed measured document once, by the 100 ms in which it
        // arrived: twenty buckets for two seconds at 20 a second.
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).expect("read run.json")).expect("json");
        let t = &run["timeline"];
        let docs: Vec<u64> = t["documents"]
            .as_array()
            .expect("timeline")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(t["bucket_ms"], 100, "{t}");
        assert_eq!(
            docs.iter().sum::<u64>(),
            run["demand"]["completed"].as_u64().unwrap(),
            "{run}"
        );
        assert_eq!(docs.len(), 20, "{t}");
        assert_eq!(t["failed"].as_array().expect("failed").len(), 20, "{t}");
        // Each bucket's start lag: how late its clients began; a mean never over the largest.
        let lags = |k: &str| -> Vec<f64> {
            t[k].as_array()
                .unwrap_or_else(|| panic!("{k}: {t}"))
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let (mean, max) = (lags("lag_mean_ms"), lags("lag_max_ms"));
        assert_eq!((mean.len(), max.len()), (20, 20), "{t}");
        assert!(
            mean.iter().zip(&max).all(|(m, x)| 0.0 <= *m && m <= x),
            "{t}"
        );
        assert!(
            max.iter().any(|x| *x > 0.0),
            "a timer never fires early: {t}"
        );
        assert!(
            t["measured_start_unix_ms"].as_u64().unwrap() > 1_700_000_000_000,
            "{t}"
        );
    }
    // A CPU for the prefetching needs its thread of its own; asked for without it, or for a
    // CPU the machine does not have, the run is refused with the reason and nothing is sent.
    let requests = |s: &serde_json::Value| {
        (
            s["demand"]["requests"].as_u64().unwrap(),
            s["prefetch"]["requests"].as_u64().unwrap(),
        )
    };
    let before = requests(&status(node.addr));
    for (priority, cpu, why) in [
        ("normal", "0", "needs the idle prefetching priority"),
        (
            "idle",
            "1000",
            "cannot pin the prefetching's thread to CPU 1000",
        ),
    ] {
        let out = crate::support::bin()
            .args(["bench", &format!("http://{}", node.addr), "--urls"])
            .arg(&urls)
            .args([
                "--rate",
                "20",
                "--duration",
                "1s",
                "--agents",
                "hinted",
                "-q",
            ])
            .args(["--prefetch-priority", priority, "--prefetch-cpu", cpu])
            .output()
            .expect("run bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{priority} {cpu}: {err}"
        );
    }
    assert_eq!(requests(&status(node.addr)), before);
}

/// The first CPU this process may run on (`Cpus_allowed_list` of `/proc/self/status`, e.g.
/// `0-1` or `2,4-5`): CPU 0 may be outside a container's set.
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let first = list.trim().split([',', '-']).next().expect("a CPU");
    first.parse::<usize>().expect("a CPU number").to_string()
}

/// The scheduling policy (`/proc/.../stat` field 41: 0 normal, 5 `SCHED_IDLE`) of each of
/// `pid`'s threads named `name`.
fn policies_of_threads(pid: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir") {
        let t = t.expect("task").path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.join("stat")).expect("stat");
        // The fields after the command name (field 2, in parentheses) start at field 3.
        let after = &stat[stat.rfind(')').expect("comm") + 2..];
        let policy = after.split(' ').nth(41 - 3).expect("policy field");
        found.push(policy.parse().expect("policy number"));
    }
    found
}

/// A node prefetching without a budget, with a prefetch listener and the setting `set`; the
/// node and its listener's address.
fn with_listener(site: &std::path::Path, sets: &[&str]) -> (crate::support::Node, SocketAddr) {
    let mut args = vec![
        "--prefetch",
        "--set",
        "prefetch.experimental.budget=unlimited",
        "--set",
        "prefetch.listen=127.0.0.1:0",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let node = serve(site, &args);
    let s = status(node.addr);
    let listener = s["listener"]["addr"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no listener address in {s}"));
    (node, listener)
}

/// `listener_priority = "idle"` serves the prefetch listener by threads of its own in the
/// kernel's idle class, and the status says so; `"normal"` (the default) keeps it on demand's
/// runtime.
#[test]
fn the_prefetch_listener_serves_from_an_idle_priority_thread() {
    let site = pages();
    for (priority, cpu, policies) in [
        ("idle", "sched_idle", vec![5]),
        ("normal", "shared", vec![]),
    ] {
        let (node, listener) = with_listener(
            site.path(),
            &[&format!(
                "prefetch.experimental.listener_priority={priority}"
            )],
        );
        let s = status(node.addr);
        assert_eq!(s["listener"]["cpu_priority"], cpu, "{priority}: {s}");
        let reply = get(listener, "/b.html");
        assert_eq!(reply.status, 200, "{priority}");
        assert_eq!(reply.body, b"<h1>b</h1>\n");
        // Its worker, and any blocking-pool thread its file reads started, are all idle-class.
        let mut found = policies_of_threads(node.child.id(), "slipstream-low");
        found.dedup();
        assert_eq!(found, policies, "{priority}");
        // Served through the listener, the request counts as a prefetch.
        wait_until(node.addr, "the listener's response counted", |s| {
            s["via_listener"]["requests"].as_u64() >= Some(1)
        });
    }
}

/// `rtt_backoff` paces the prefetch listener's connections, with a window shared by a client
/// address's connections (the default) or one each: a large file comes through whole, the
/// status counts the paced connection, and without the setting there is no back-off. (That
/// it gives way on a filling bottleneck is measured behind a real one, which needs root:
/// `experiments/000/network-loopback.sh`, case `nps-no-le-nice`.)
#[test]
fn the_prefetch_listener_paces_its_connections_when_asked() {
    let site = pages();
    // 4 MB in which every 4 KB block differs, so that a lost or repeated write shows.
    let big: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i / 4096 + i % 251) as u8)
        .collect();
    std::fs::write(site.path().join("big.bin"), &big).expect("write");
    for (backoff, shared) in [(true, true), (true, false), (false, true)] {
        let (node, listener) = with_listener(
            site.path(),
            &[
                &format!("prefetch.experimental.rtt_backoff={backoff}"),
                &format!("prefetch.experimental.backoff_shared={shared}"),
            ],
        );
        let reply = get(listener, "/big.bin");
        let case = format!("backoff {backoff}, shared {shared}");
        assert_eq!(reply.status, 200, "{case}");
        assert!(
            reply.body == big,
            "{case}: the file changed on the way ({} bytes)",
            reply.body.len()
        );
        let s = status(node.addr);
        let b = &s["listener"]["rtt_backoff"];
        if backoff {
            assert_eq!(b["connections"], 1, "{case}: {s}");
            assert_eq!(b["unpaced_connections"], 0, "{case}: {s}");
            assert_eq!(b["threshold_pct"], 20, "{case}: {s}");
            assert_eq!(b["shared"], shared, "{case}: {s}");
            assert_eq!(b["client_windows"], u64::from(shared), "{case}: {s}");
        } else {
            assert!(b.is_null(), "{case}: {s}");
        }
    }
}

/// GETs the page at `path`, which must answer 200 with `header`, a number of milliseconds;
/// the response and the number.
fn page_with_millis(addr: SocketAddr, path: &str, header: &str) -> (crate::support::Reply, u64) {
    let page = get(addr, path);
    assert_eq!(page.status, 200);
    let ms = page
        .header(header)
        .unwrap_or_else(|| panic!("{path} has no {header}"))
        .parse()
        .expect("milliseconds");
    (page, ms)
}

/// The reports a node's cost measurement took, of every kind.
fn reports(s: &serde_json::Value) -> u64 {
    let r = &s["cost"]["reports"];
    ["quiet", "busy", "settling", "late", "implausible"]
        .iter()
        .map(|k| r[k].as_u64().expect("a count"))
        .sum()
}

#[test]
fn pages_say_when_they_were_served_and_the_agents_report_how_long_they_took() {
    let site = pages();
    let (node, s) = grown_budget(
        site.path(),
        &[
            "--set",
            "prefetch.experimental.cost_target=0.05",
            "--set",
            "prefetch.experimental.cost_every_ms=2000",
            "--set",
            "prefetch.experimental.quiet_ms=500",
        ],
    );
    assert_eq!(s["cost"]["target"], 0.05);
    assert_eq!(reports(&s), 0);
    let (_, served) = page_with_millis(node.addr, "/a.html", "slipstream-served-ms");
    assert!(served <= status(node.addr)["uptime_ms"].as_u64().unwrap());
    // Malformed reports are refused with a reason and taken as nothing.
    for bad in [
        "url=/a.html&served_ms=12",
        "url=/a.html&page_us=12",
        "url=/a.html&served_ms=x&page_us=12",
        "url=/a.html&served_ms=12&page_us=-1",
    ] {
        let r = get(node.addr, &format!("/_slipstream/hints?{bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert!(!r.body.is_empty(), "{bad}: a reason");
    }
    assert_eq!(reports(&status(node.addr)), 0);
    // A report of that page is taken; one of a page served in the future is left out as
    // implausible, and neither stops the answer.
    hints(
        node.addr,
        &format!("url=/a.html&served_ms={served}&page_us=3000"),
    );
    hints(node.addr, "url=/a.html&served_ms=999999999999&page_us=3000");
    let s = status(node.addr);
    assert_eq!(reports(&s), 2, "{}", s["cost"]);
    assert_eq!(s["cost"]["reports"]["implausible"], 1);

    // The bench's agents report their documents on their first hint requests.
    let run = hinted_run(
        node.addr,
        site.path(),
        "/a.html\n/b.html\n/c.html\n",
        &["--doc-files", "1", "--duration", "2s"],
    );
    let documents = run["demand"]["completed"].as_u64().expect("documents");
    let s = status(node.addr);
    let taken = reports(&s) - 2;
    // Every document carried the header; an agent that left before asking (told to wait past
    // its visit) reports nothing, so at least half, and never more than one each.
    assert!(
        taken * 2 >= documents && taken <= documents,
        "{taken} reports of {documents} documents: {}",
        s["cost"]
    );
    assert_eq!(s["cost"]["reports"]["implausible"], 1, "{}", s["cost"]);
}
