//! The command line: config errors, demo, workload generation and cachesim.

use crate::support::{bin, get, site, start};

fn fails_with(args: &[&str], needle: &str) {
    let out = bin().args(args).output().expect("run");
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(needle),
        "stderr of {args:?} lacks `{needle}`:\n{err}"
    );
}

#[test]
fn bad_configs_get_clear_errors() {
    let dir = site();
    let d = dir.path().to_str().expect("utf-8");
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[serve]\nrevalidate_ms = \"soon\"\n").expect("write");
    fails_with(
        &["serve", d, "--config", cfg.to_str().expect("utf-8")],
        "line 2",
    );
    std::fs::write(&cfg, "[serve]\ncache_size = 5\n").expect("write");
    fails_with(
        &["serve", d, "--config", cfg.to_str().expect("utf-8")],
        "unknown field `cache_size`",
    );
    fails_with(&["serve", "/definitely/not/here"], "/definitely/not/here");
    fails_with(
        &["serve", d, "--policy", "mru"],
        "unknown cache policy `mru`",
    );
    fails_with(&["serve", d, "--cache-size", "lots"], "not a size");
    fails_with(&["serve"], "no directory to serve");
    fails_with(
        &["serve", d, "--set", "serve.cpu_cost_us=200000"],
        "cpu_cost_us",
    );
    fails_with(
        &["proxy", "--origin", "ftp://example"],
        "give an http:// or https:// URL",
    );
    fails_with(
        &[
            "proxy",
            "--origin",
            "http://127.0.0.1:1",
            "--parent",
            "not a url",
        ],
        "parents",
    );
    fails_with(&["proxy", "--name", "has space"], "name");
    std::fs::write(&cfg, "[proxy]\norigin = 5\n").expect("write");
    fails_with(
        &["proxy", "--config", cfg.to_str().expect("utf-8")],
        "line 2",
    );
}

#[test]
fn demo_starts_and_answers() {
    // Its files in a directory the test removes (a killed demo cannot clean up).
    let files = tempfile::tempdir().expect("tempdir");
    let node = crate::support::demo(files.path());
    let home = get(node.addr, "/");
    assert_eq!(home.status, 200);
    assert!(String::from_utf8_lossy(&home.body).contains("slipstream demo site"));
    // The entry point is the child proxy; the warm-up already cached the home page there.
    assert!(
        home.header("cache-status")
            .is_some_and(|s| s.contains("child; hit")),
        "{:?}",
        home.header("cache-status")
    );
    assert_eq!(get(node.addr, "/_slipstream/status").status, 200);
    let large = get(node.addr, "/assets/large.bin");
    assert_eq!(large.body.len(), 2 << 20);

    // The origin is one of three replicas of the site in a Web++ cluster: once they have
    // gossiped, its pages list all three for every resource.
    let line = node.wait_for_line("Web++:");
    let origin: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no origin address in {line:?}"));
    // Beside the hierarchy, a cooperative cache of three nodes: the warm-up's later rounds
    // were answered from replicas, and a browser proxy answers from one now.
    let line = node.wait_for_line("Riptide:");
    let proxy: std::net::SocketAddr = line
        .split("curl -x http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no browser proxy in {line:?}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let page = loop {
        let page = String::from_utf8_lossy(&get(origin, "/").body).into_owned();
        let list = crate::support::block_lookup(&page, "/assets/style.css");
        if list.as_ref().map(Vec::len) == Some(3) {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the three replicas never all appeared: {list:?} in {page}"
        );
        std::thread::yield_now();
    };
    assert!(page.contains("/_slipstream/agent/register.js"));
    let r = crate::support::request(proxy, "GET", &format!("http://{origin}/about.html"), &[]);
    assert_eq!(r.status, 200);
    assert!(
        r.header("cache-status")
            .is_some_and(|s| s.contains("slipstream-coop; hit")),
        "{:?}",
        r.header("cache-status")
    );
    let warm = node.wait_for_line("coop warm-up:");
    assert!(!warm.contains("warm-up: 0 of"), "{warm}");
    assert_eq!(get(origin, "/_slipstream/agent/table.html").status, 200);
}

#[test]
fn workload_and_cachesim_reproduce_the_adaptive_advantage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("modified.tsv");
    let json = dir.path().join("out.json");
    let chart = dir.path().join("chart.svg");
    let out = bin()
        .args([
            "workload",
            "table1",
            "--trace",
            trace.to_str().expect("utf-8"),
            "--requests",
            "20000",
            "--hot-share",
            "0.1",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bin()
        .args([
            "cachesim",
            trace.to_str().expect("utf-8"),
            "--policy",
            "total,small,adaptive",
            "--size",
            "32MiB",
            "--json",
            json.to_str().expect("utf-8"),
            "--chart",
            chart.to_str().expect("utf-8"),
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for p in ["total", "small", "adaptive"] {
        assert!(table.contains(p), "{table}");
    }
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid json");
    let bhr = |p: &str| {
        rows.as_array()
            .expect("array")
            .iter()
            .find(|r| r["policy"] == p)
            .expect("row")["byte_hit_ratio"]
            .as_f64()
            .expect("number")
    };
    // 002 Fig. 11: with a 32 MB cache smaller than each of the three hot files, only the adaptive
    // policy gets bytes from them.
    assert!(
        bhr("adaptive") > bhr("total") + 0.1,
        "adaptive {} total {}",
        bhr("adaptive"),
        bhr("total")
    );
    assert!(
        bhr("adaptive") > bhr("small") + 0.1,
        "adaptive {} small {}",
        bhr("adaptive"),
        bhr("small")
    );
    assert!(std::fs::read_to_string(&chart)
        .expect("svg")
        .contains("<svg"));
}

#[test]
fn cachesim_passes_over_malformed_lines_and_names_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("bad.tsv");
    std::fs::write(&trace, "time_s\tkey\tsize_bytes\n0\t/a\t10\n1\t/b\tmany\n").expect("write");
    let out = bin()
        .args(["cachesim", trace.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 malformed line") && err.contains("bad.tsv:3"),
        "{err}"
    );
    // A file with nothing readable is still an error, by line.
    let junk = dir.path().join("junk.log");
    std::fs::write(&junk, "this is not a log line\n").expect("write");
    fails_with(&["cachesim", junk.to_str().expect("utf-8")], "junk.log:1");
}

#[test]
fn sim_runs_a_scenario_and_writes_its_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("small.toml");
    std::fs::write(
        &scenario,
        "name = \"small\"\n[workload]\ntransfers = 200\nrate = 20\n",
    )
    .expect("write");
    let out = dir.path().join("out");
    let run = bin()
        .args([
            "sim",
            scenario.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ])
        .output()
        .expect("run");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let csv = std::fs::read_to_string(out.join("transfers.csv")).expect("csv");
    assert!(csv.starts_with("id,source,size_bytes,start_s,end_s,latency_s"));
    assert_eq!(csv.lines().count(), 201);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("json"))
            .expect("valid json");
    assert_eq!(summary["completed"], 200);
    let child = summary["child"]["mean_s"].as_f64().expect("mean");
    let origin = summary["origin"]["mean_s"].as_f64().expect("mean");
    assert!(
        child < origin,
        "a child hit is faster than an origin transfer ({child} vs {origin})"
    );
}

#[test]
fn sim_reports_malformed_scenarios_by_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("bad.toml");
    std::fs::write(
        &scenario,
        "[topology]\nqueue = 100\ndelay = [\"1ms\", \"soon\", \"30ms\"]\n",
    )
    .expect("write");
    fails_with(
        &["sim", scenario.to_str().expect("utf-8")],
        "bad.toml:3: topology.delay: `soon` is not a delay",
    );
}

#[test]
fn a_taken_port_is_reported_once_with_its_cause() {
    let www = crate::support::site();
    let first = crate::support::serve(www.path(), &[]);
    let out = crate::support::bin()
        .args(["serve", www.path().to_str().expect("utf-8"), "--listen"])
        .arg(first.addr.to_string())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {}", first.addr)),
        "{err}"
    );
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}

#[test]
fn listen_takes_a_host_name_and_a_bare_port() {
    let www = crate::support::site();
    let dir = www.path().to_str().expect("utf-8");
    let named = start(
        &["serve", dir, "--listen", "localhost:0"],
        "slipstream serve:",
    );
    assert!(named.addr.ip().is_loopback());
    assert_eq!(get(named.addr, "/hello.txt").status, 200);
    let any = start(&["serve", dir, "--listen", ":0"], "slipstream serve:");
    assert!(any.addr.ip().is_unspecified());
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut child = crate::support::bin()
        .args(["proxy", "--listen", "127.0.0.1:0", "--origin"])
        .arg(format!("http://{dead}"))
        .env("SLIPSTREAM_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(log.reopen().expect("reopen"))
        .spawn()
        .expect("start");
    let stdout = child.stdout.take().expect("stdout");
    let line = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .next()
        .expect("a line")
        .expect("utf-8");
    let addr: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .expect("address");
    assert_eq!(get(addr, "/x").status, 502);
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(log.path()).expect("read log");
    assert!(text.contains("upstream failed"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

#[test]
fn bench_exits_1_when_every_request_failed() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let out = crate::support::bin()
        .args([
            "bench",
            &format!("http://{dead}/"),
            "--requests",
            "3",
            "--quiet",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("every request failed"));
}

#[test]
fn the_demo_removes_its_files_when_stopped() {
    let mut node = start(&["demo", "--listen", "127.0.0.1:0"], "site:");
    let files = std::env::temp_dir().join(format!("slipstream-demo-{}", node.child.id()));
    assert!(files.join("index.html").exists());
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert_eq!(node.child.wait().expect("wait").code(), Some(0));
    assert!(!files.exists(), "{} left behind", files.display());
}

#[test]
fn predict_scores_the_three_predictors_and_names_bad_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Every client walks / → /a → /b (with its logo), so after / the next pages are known.
    let mut log = String::new();
    for c in 0..20 {
        for (i, path) in ["/", "/a", "/logo.png", "/b"].iter().enumerate() {
            log.push_str(&format!(
                "10.0.0.{c} - - [10/Oct/2000:13:{c:02}:{i:02} +0000] \"GET {path} HTTP/1.0\" 200 100\n"
            ));
        }
    }
    log.push_str("a line that is no log record\n");
    let trace = dir.path().join("site.log");
    std::fs::write(&trace, log).expect("write");
    let chart = dir.path().join("out.svg");
    let doc = run_on_a_log_with_one_bad_line(
        &["predict", trace.to_str().expect("utf-8"), "--lists", "1,3"],
        &chart,
        "site.log:81",
    );
    assert_eq!(doc["sessions"], 20);
    let row = |p: &str, training: &str, list: u64| {
        doc["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["predictor"] == p && r["training"] == training && r["list"] == list)
            .cloned()
            .unwrap_or_else(|| panic!("no {p} {training} {list}"))
    };
    // Trained on ten clients, PPM lists exactly what the other ten fetch next.
    let ppm = row("ppm-2/10", "offline", 3);
    assert_eq!(ppm["precision"], 1.0, "{ppm}");
    assert_eq!(ppm["recall"], 1.0, "{ppm}");
    assert!(row("markov", "online", 1)["useful"].as_u64() > Some(0));
    assert!(row("top", "offline", 1)["listed"].as_u64() > Some(0));
    assert!(std::fs::read_to_string(&chart)
        .expect("chart")
        .contains("<svg"));

    let seq = dir.path().join("bad.seq");
    std::fs::write(&seq, "% Sequences:\n1 2\n1 two 3\n").expect("write");
    fails_with(
        &["predict", seq.to_str().expect("utf-8")],
        "bad.seq:3: \"two\" is not a category number",
    );
    fails_with(
        &["predict", trace.to_str().expect("utf-8"), "--order", "0"],
        "--order 0",
    );
}

#[test]
fn cachesim_clients_shows_prefetching_pushing_other_services_out() {
    // One client alternates between two sites; one of the two prefetches. Without prefetching a
    // 30 KiB cache keeps both 10,000-byte pages; with five dummy bytes per demand byte, the
    // dummies flush the other site's page before every visit (000 §5, Fig. 7).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = String::new();
    for i in 0..20 {
        for site in ["a", "b"] {
            log.push_str(&format!(
                "10.0.0.1 - - [10/Oct/2000:13:{i:02}:00 +0000] \"GET http://{site}.example/page HTTP/1.0\" 200 10000\n"
            ));
        }
    }
    log.push_str("a line that is no log record\n");
    let trace = dir.path().join("two-sites.log");
    std::fs::write(&trace, log).expect("write");
    let chart = dir.path().join("fig7.svg");
    let doc = run_on_a_log_with_one_bad_line(
        &[
            "cachesim",
            "clients",
            trace.to_str().expect("utf-8"),
            "--sizes",
            "30KiB",
            "--k",
            "0,5",
            "--prefetching",
            "0.5",
        ],
        &chart,
        "two-sites.log:41",
    );
    assert_eq!(doc["trace"]["clients"], 1);
    assert_eq!(doc["trace"]["services"], 2);
    assert_eq!(doc["prefetching"]["services"], 1);
    let row = |k: f64| {
        doc["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["k"] == k)
            .cloned()
            .unwrap_or_else(|| panic!("no row for k = {k}"))
    };
    let (base, polluted) = (row(0.0), row(5.0));
    assert_eq!(base["non_prefetching"]["requests"], 20, "{base}");
    assert_eq!(base["non_prefetching"]["hits"], 19, "{base}");
    assert_eq!(polluted["non_prefetching"]["hits"], 0, "{polluted}");
    assert_eq!(polluted["prefetch_bytes"], 20 * 5 * 10_000, "{polluted}");
    assert!(std::fs::read_to_string(&chart)
        .expect("chart")
        .contains("<svg"));

    fails_with(
        &["cachesim", "clients", "--k", "-1"],
        "not a number of prefetch bytes per demand byte",
    );
    fails_with(
        &["cachesim", "clients", "--prefetching", "1.5"],
        "not a fraction between 0 and 1",
    );
    let bad = dir.path().join("bad.tsv");
    std::fs::write(&bad, "client\tservice\turl\tsize_bytes\nc\ts\t/a\tlots\n").expect("write");
    fails_with(
        &["cachesim", "clients", bad.to_str().expect("utf-8")],
        "bad.tsv:2: size_bytes \"lots\"",
    );
}

/// Runs `args` with `--json` (beside `chart`) and `--chart chart`: it must succeed and warn of
/// exactly one malformed line, at `bad_line` (`file:line`). Returns the JSON it wrote.
fn run_on_a_log_with_one_bad_line(
    args: &[&str],
    chart: &std::path::Path,
    bad_line: &str,
) -> serde_json::Value {
    let json = chart.with_extension("json");
    let out = bin()
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(chart)
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 malformed line") && err.contains(bad_line),
        "{err}"
    );
    serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON")
}

#[test]
fn serve_help_names_every_table_it_reads() {
    let out = crate::support::bin()
        .args(["serve", "--help"])
        .output()
        .expect("slipstream serve --help");
    let help = String::from_utf8_lossy(&out.stdout);
    for table in ["[serve]", "[cluster]", "[prefetch]"] {
        assert!(help.contains(table), "{table}: {help}");
    }
}
