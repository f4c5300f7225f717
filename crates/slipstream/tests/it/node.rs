//! The node layer through the real binary: one config file for every command, overrides of
//! any field, and selection among several origins while one is killed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use crate::support::{bin, get, site, start, Node};

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("node.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn serve_with(config: &std::path::Path, extra: &[&str]) -> Node {
    let mut args = vec!["serve", "--config", config.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    start(&args, "slipstream serve:")
}

#[test]
fn one_config_file_runs_serve_and_proxy_and_a_flag_overrides_any_field() {
    let www = site();
    let conf = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        conf.path(),
        &format!(
            r#"
[serve]
root = "{}"
listen = "127.0.0.1:0"
cache_control = "max-age=60"
revalidate_ms = "2s"
idle_timeout_ms = "1m"

[serve.cache]
capacity_bytes = "8MiB"

[proxy]
listen = "127.0.0.1:0"
name = "from-file"
upstream_timeout_ms = "5s"

[proxy.cache]
capacity_bytes = "16MiB"
policy = "lru"
"#,
            www.path().display()
        ),
    );
    let origin = serve_with(&config, &[]);
    let page = get(origin.addr, "/hello.txt");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("cache-control"), Some("max-age=60"));

    // The same file runs the proxy; `--set` reaches fields no named flag has.
    let origin_url = format!("http://{}", origin.addr);
    let proxy = start(
        &[
            "proxy",
            "--config",
            config.to_str().expect("utf-8"),
            "--origin",
            &origin_url,
            "--set",
            "proxy.name=from-flag",
            "--set",
            "proxy.cache.policy=sieve",
            "--set",
            "proxy.store_set_cookie=true",
            "--set",
            "proxy.origin_policy=refresh",
        ],
        "slipstream proxy",
    );
    get(proxy.addr, "/hello.txt");
    let hit = get(proxy.addr, "/hello.txt");
    assert_eq!(hit.status, 200);
    assert_eq!(hit.body, b"hello, world\n");
    let status = hit.header("cache-status").unwrap_or_default();
    assert!(status.starts_with("from-flag; hit"), "{status}");

    // A flag overrides a field the file sets.
    let overridden = serve_with(&config, &["--set", "serve.cache_control=no-store"]);
    assert_eq!(
        get(overridden.addr, "/hello.txt").header("cache-control"),
        Some("no-store")
    );
}

#[test]
fn bad_config_files_and_overrides_are_refused_with_what_and_where() {
    let conf = tempfile::tempdir().expect("tempdir");
    let run = |config: &std::path::Path, extra: &[&str]| {
        let out = bin()
            .args(["proxy", "--config", config.to_str().expect("utf-8")])
            .args(extra)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let typo = write_config(conf.path(), "[prxy]\nname = \"x\"\n");
    let e = run(&typo, &[]);
    assert!(e.contains("unknown table `prxy`"), "{e}");
    let field = write_config(
        conf.path(),
        "[proxy]\nname = \"x\"\n\n[proxy.cache]\ncapacity_bytes = \"lots\"\n",
    );
    let e = run(&field, &[]);
    assert!(e.contains("line 5") && e.contains("not a size"), "{e}");
    let policy = write_config(conf.path(), "[proxy]\n\n[proxy.cache]\npolicy = \"lfu2\"\n");
    let e = run(&policy, &[]);
    assert!(e.contains("line 4") && e.contains("lfu2"), "{e}");
    // If an override were accepted the proxy would run: every case must fail fast instead.
    let ok = write_config(
        conf.path(),
        "[proxy]\nname = \"x\"\nlisten = \"127.0.0.1:0\"\n",
    );
    let e = run(&ok, &["--set", "proxy.upstream_timeout_ms=\"30\""]);
    assert!(
        e.contains("proxy.upstream_timeout_ms") && e.contains("no unit"),
        "{e}"
    );
    let e = run(&ok, &["--set", "proxy.cache.capacity_bytes=lots"]);
    assert!(
        e.contains("proxy.cache.capacity_bytes") && e.contains("not a size"),
        "{e}"
    );
    let e = run(&ok, &["--set", "proxy.store_set_cookie=maybe"]);
    assert!(e.contains("proxy.store_set_cookie"), "{e}");
    let e = run(&ok, &["--set", "proxy.origin_policy=fastest"]);
    assert!(
        e.contains("proxy.origin_policy") && e.contains("unknown selection policy `fastest`"),
        "{e}"
    );
}

/// The value of the first metric line starting with `prefix`.
fn metric(addr: std::net::SocketAddr, prefix: &str) -> f64 {
    let page = String::from_utf8(get(addr, "/_slipstream/metrics").body).expect("utf-8");
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {page}"))
}

#[test]
fn selection_among_three_origins_with_one_killed_mid_load_fails_no_idempotent_request() {
    let www = site();
    let mut origins: Vec<Node> = (0..3)
        .map(|_| crate::support::serve(www.path(), &[]))
        .collect();
    let urls: Vec<String> = origins
        .iter()
        .map(|o| format!("http://{}", o.addr))
        .collect();
    let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--no-cache"];
    for u in &urls {
        args.extend(["--origin", u.as_str()]);
    }
    // The killed origin stays out of rotation for the rest of the run.
    args.extend(["--set", "proxy.parent_retry_ms=10m"]);
    let proxy = start(&args, "slipstream proxy");
    let proxy_addr = proxy.addr;

    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 60;
    const KILL_AFTER: usize = 150;
    let done = Arc::new(AtomicUsize::new(0));
    let (kill_now, kill_signal) = mpsc::channel();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (done, kill_now) = (done.clone(), kill_now.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..PER_CLIENT {
                    let path = if (c + i) % 2 == 0 {
                        "/hello.txt"
                    } else {
                        "/index.html"
                    };
                    let r = get(proxy_addr, path);
                    let want: &[u8] = if path == "/hello.txt" {
                        b"hello, world\n"
                    } else {
                        b"<h1>home</h1>\n"
                    };
                    if r.status != 200 || r.body != want {
                        failures.push(format!(
                            "{path}: {} {}",
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ));
                    }
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                        let _ = kill_now.send(());
                    }
                }
                failures
            })
        })
        .collect();
    drop(kill_now);
    kill_signal.recv().expect("load reached the kill point");
    // The origin in use (fail-over prefers the first) is killed while requests are in flight.
    let served_before = metric(origins[0].addr, "slipstream_requests_total{status=\"2xx\"}");
    let _ = origins[0].child.kill();
    let _ = origins[0].child.wait();
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client thread"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} failed: {failures:?}",
        failures.len()
    );
    assert_eq!(done.load(Ordering::SeqCst), CLIENTS * PER_CLIENT);
    assert!(served_before > 0.0, "the killed origin was serving");
    let up = |o: &Node| {
        metric(
            proxy.addr,
            &format!("slipstream_origin_up{{origin=\"{}\"}}", o.addr),
        )
    };
    assert_eq!(up(&origins[0]), 0.0);
    assert_eq!(up(&origins[1]), 1.0);
    let after = metric(origins[1].addr, "slipstream_requests_total{status=\"2xx\"}");
    assert!(after > 0.0, "the next origin took over");
    origins.truncate(3);
}

#[test]
fn the_readme_config_example_is_a_valid_node_file_for_both_commands() {
    use slipstream_node::config::{ConfigFile, Overrides};
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README");
    let block = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the README");
    let file = ConfigFile::parse(Some("README.md".into()), block.to_owned()).expect("valid file");
    let proxy: slipstream_proxy::Config = file
        .section("proxy", &Overrides::default())
        .expect("[proxy]");
    let proxy = proxy.validate().expect("valid proxy settings");
    assert_eq!(proxy.origins.len(), 2);
    assert_eq!(proxy.upstream_timeout, std::time::Duration::from_secs(30));
    assert_eq!(
        proxy.origin_policy,
        slipstream_proxy::SelectPolicy::FailOver
    );
    let www = site();
    let mut root = Overrides::default();
    root.set("serve.root", www.path().display().to_string());
    let serve: slipstream_origin::Config = file.section("serve", &root).expect("[serve]");
    let serve = serve.validate().expect("valid serve settings");
    assert_eq!(serve.revalidate, std::time::Duration::from_secs(1));
    assert_eq!(serve.cache.map(|c| c.capacity_bytes), Some(64 << 20));
}

#[test]
fn sigterm_during_a_100_mb_download_completes_it_and_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("big.bin"), vec![7u8; BIG]).expect("write");
    let mut node = crate::support::serve(dir.path(), &["--no-cache"]);
    let addr = node.addr;
    download_through_sigterm(&mut node, addr);
}

#[test]
fn sigterm_during_a_download_from_the_prefetch_listener_completes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("big.bin"), vec![7u8; BIG]).expect("write");
    let mut node = crate::support::serve(
        dir.path(),
        &[
            "--no-cache",
            "--prefetch",
            "--set",
            "prefetch.experimental.budget=unlimited",
            "--set",
            "prefetch.listen=127.0.0.1:0",
        ],
    );
    // Printed while the node starts, before its address.
    let line = node
        .stdout
        .iter()
        .find(|l| l.contains("prefetch listener:"))
        .cloned()
        .unwrap_or_else(|| panic!("no prefetch listener line in {:?}", node.stdout));
    let addr: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    download_through_sigterm(&mut node, addr);
}

const BIG: usize = 100 << 20;

/// Downloads `/big.bin` (BIG bytes) from `addr`, sending `node` SIGTERM once the body is under
/// way: the whole file must arrive, then the node exits 0.
fn download_through_sigterm(node: &mut Node, addr: std::net::SocketAddr) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET /big.bin HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    // Read the head and the first megabyte: the download is under way, and the rest cannot fit
    // in the socket buffers, so the server is still sending when the signal arrives.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let head_end = loop {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed before the body");
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() > i + 4 + (1 << 20) {
                break i + 4;
            }
        }
    };
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut body = got.len() - head_end;
    loop {
        let n = s
            .read(&mut buf)
            .expect("the download goes on after SIGTERM");
        if n == 0 {
            break;
        }
        body += n;
    }
    assert_eq!(body, BIG, "the whole file arrived");
    let exit = node.child.wait().expect("wait");
    assert_eq!(exit.code(), Some(0), "{exit:?}");
}

/// Two origins whose `/who.txt` says `one` or `two`, and a caching-off proxy whose config file
/// names the first; [`Reloadable::switch`] rewrites the file for the second and sends SIGHUP.
struct Reloadable {
    _sites: (tempfile::TempDir, tempfile::TempDir),
    conf: tempfile::TempDir,
    config: std::path::PathBuf,
    _one: Node,
    two: Node,
    proxy: Node,
}

fn proxy_config(origin: std::net::SocketAddr, pid_file: &std::path::Path) -> String {
    format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\norigin = \"http://{origin}\"\npid_file = {:?}\n\n\
         [proxy.cache]\nenabled = false\n",
        pid_file.display().to_string()
    )
}

/// How a test asks the proxy to reload.
#[derive(Clone, Copy)]
enum Ask {
    /// `kill -HUP PID`.
    Signal,
    /// `slipstream reload --config FILE`, which finds the process through `pid_file`.
    Command,
}

impl Reloadable {
    fn start() -> Reloadable {
        let sites = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        std::fs::write(sites.0.path().join("who.txt"), "one").expect("write");
        std::fs::write(sites.1.path().join("who.txt"), "two").expect("write");
        let one = crate::support::serve(sites.0.path(), &[]);
        let two = crate::support::serve(sites.1.path(), &[]);
        let conf = tempfile::tempdir().expect("tempdir");
        let config = write_config(
            conf.path(),
            &proxy_config(one.addr, &conf.path().join("proxy.pid")),
        );
        let proxy = start(
            &["proxy", "--config", config.to_str().expect("utf-8")],
            "slipstream proxy",
        );
        Reloadable {
            _sites: sites,
            conf,
            config,
            _one: one,
            two,
            proxy,
        }
    }

    /// Points the proxy's file at the second origin and asks the proxy to reload.
    fn switch(&self, ask: Ask) {
        let pid_file = self.conf.path().join("proxy.pid");
        std::fs::write(&self.config, proxy_config(self.two.addr, &pid_file))
            .expect("rewrite config");
        let pid = self.proxy.child.id().to_string();
        assert_eq!(
            std::fs::read_to_string(&pid_file).expect("pid file").trim(),
            pid
        );
        let status = match ask {
            Ask::Signal => std::process::Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .expect("kill"),
            Ask::Command => bin()
                .args(["reload", "--config", self.config.to_str().expect("utf-8")])
                .status()
                .expect("slipstream reload"),
        };
        assert!(status.success());
    }
}

#[test]
fn sighup_reloads_the_origins_under_load_without_a_failed_request() {
    let mut setup = Reloadable::start();
    let addr = setup.proxy.addr;

    const CLIENTS: usize = 4;
    const MAX_PER_CLIENT: usize = 3_000;
    let done = Arc::new(AtomicUsize::new(0));
    let from_two = Arc::new(AtomicUsize::new(0));
    let (reload_now, reload_signal) = mpsc::channel();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (done, from_two, reload_now) = (done.clone(), from_two.clone(), reload_now.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..MAX_PER_CLIENT {
                    let r = get(addr, "/who.txt");
                    match (r.status, r.body.as_slice()) {
                        (200, b"one") => {}
                        (200, b"two") => {
                            from_two.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => failures.push(format!("{} {:?}", r.status, r.body)),
                    }
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == 100 {
                        let _ = reload_now.send(());
                    }
                    // Enough requests after the reload took effect.
                    if i >= 100 && from_two.load(Ordering::SeqCst) >= 50 {
                        break;
                    }
                }
                failures
            })
        })
        .collect();
    drop(reload_now);
    reload_signal.recv().expect("load under way");
    setup.switch(Ask::Signal);
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client"))
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(
        from_two.load(Ordering::SeqCst) >= 50,
        "the reloaded origin answers"
    );
    assert!(
        setup.proxy.child.try_wait().expect("wait").is_none(),
        "still running"
    );
}

#[test]
fn check_config_names_the_file_line_and_field_of_a_typo() {
    let www = site();
    let conf = tempfile::tempdir().expect("tempdir");
    let check = |text: &str| {
        let path = write_config(conf.path(), text);
        let out = bin()
            .args(["check-config", path.to_str().expect("utf-8")])
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let good = format!(
        "[serve]\nroot = \"{}\"\n\n[proxy]\norigin = \"http://127.0.0.1:8080\"\n",
        www.path().display()
    );
    let (code, out, _) = check(&good);
    assert_eq!(code, Some(0));
    assert!(out.contains("ok ([serve], [proxy])"), "{out}");
    let (code, _, err) = check("[proxy]\nname = \"edge\"\n\n[proxy.cache]\ncapacty_bytes = 5\n");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("node.toml") && err.contains("line 5") && err.contains("capacty_bytes"),
        "{err}"
    );
    // Checks that need more than the syntax: the served directory must exist.
    let (code, _, err) = check("[serve]\nroot = \"/no/such/dir\"\n");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("[serve]") && err.contains("/no/such/dir"),
        "{err}"
    );
    // A research knob written where older files had it says where it moved.
    let (code, _, err) = check("[prefetch]\nmax_urls = 10\ncpu_target = 0.9\n");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("line 3")
            && err.contains("set it as prefetch.experimental.cpu_target ([prefetch.experimental])"),
        "{err}"
    );
    let (code, out, _) =
        check("[prefetch]\nmax_urls = 10\n\n[prefetch.experimental]\ncpu_target = 0.9\n");
    assert_eq!(code, Some(0));
    assert!(out.contains("ok ([prefetch])"), "{out}");
}

/// Stops a node with SIGTERM and waits for its exit status.
fn terminate(node: &mut Node) -> Option<i32> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    node.child.wait().expect("wait").code()
}

#[test]
fn access_logs_have_a_line_per_request_in_both_formats() {
    let www = site();
    let logs = tempfile::tempdir().expect("tempdir");
    let (combined, json) = (
        logs.path().join("origin.log"),
        logs.path().join("proxy.log"),
    );
    let mut origin = crate::support::serve(
        www.path(),
        &[
            "--cache-control",
            "max-age=60",
            "--set",
            &format!("serve.access_log=\"{}\"", combined.display()),
        ],
    );
    let origin_url = format!("http://{}", origin.addr);
    let mut proxy = start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--origin",
            &origin_url,
            "--set",
            &format!("proxy.access_log=\"{}\"", json.display()),
            "--set",
            "proxy.access_log_format=json",
        ],
        "slipstream proxy",
    );
    for _ in 0..2 {
        assert_eq!(get(proxy.addr, "/hello.txt").status, 200);
    }
    assert_eq!(get(proxy.addr, "/missing").status, 404);
    // Control requests are logged too, marked as such.
    assert_eq!(get(proxy.addr, "/_slipstream/status").status, 200);
    assert_eq!(get(origin.addr, "/_slipstream/status").status, 200);
    // Stopping flushes the logs.
    assert_eq!(terminate(&mut proxy), Some(0));
    assert_eq!(terminate(&mut origin), Some(0));

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .expect("proxy log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0]["method"], "GET");
    assert_eq!(lines[0]["target"], "/hello.txt");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["bytes"], 13);
    assert_eq!(lines[0]["upstream"], origin.addr.to_string());
    assert!(
        lines[0]["cache"]
            .as_str()
            .is_some_and(|c| c.contains("miss")),
        "{lines:?}"
    );
    assert!(
        lines[1]["cache"]
            .as_str()
            .is_some_and(|c| c.contains("hit")),
        "{lines:?}"
    );
    assert_eq!(lines[2]["status"], 404);
    assert_eq!(lines[3]["target"], "/_slipstream/status");
    assert_eq!(lines[3]["status"], 200);
    assert_eq!(lines[3]["control"], true, "{lines:?}");
    assert!(
        lines[..3].iter().all(|l| l["control"] == false),
        "{lines:?}"
    );

    // The origin saw the proxy's two misses (the hit never reached it), and its own status
    // request.
    let text = std::fs::read_to_string(&combined).expect("origin log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{text}");
    assert!(
        lines[0].contains("\"GET /hello.txt HTTP/1.1\" 200 13 \"-\" \""),
        "{text}"
    );
    assert!(
        lines[1].contains("\"GET /missing HTTP/1.1\" 404 "),
        "{text}"
    );
    assert!(
        lines[2].contains("\"GET /_slipstream/status HTTP/1.1\" 200 "),
        "{text}"
    );
}

#[test]
fn a_reload_during_a_slipstream_bench_load_fails_no_request() {
    use std::io::Read;
    let setup = Reloadable::start();
    let report = setup.conf.path().join("bench.json");
    let mut bench = bin()
        .args(["bench", &format!("http://{}/who.txt", setup.proxy.addr)])
        .args(["--clients", "4", "--requests", "10000", "--duration", "60s"])
        .arg("--json")
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bench");
    // Wait for the bench's progress line to show answered requests.
    let mut progress = bench.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        assert_eq!(
            progress.read(&mut byte).expect("progress"),
            1,
            "bench ended early"
        );
        seen.push(byte[0]);
        let text = String::from_utf8_lossy(&seen);
        let answered = text
            .rsplit('\r')
            .nth(1)
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
        if answered {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut progress, &mut std::io::sink()));
    setup.switch(Ask::Command);
    assert!(bench.wait().expect("bench").success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    assert_eq!(report["error_count"], 0, "{report}");
    assert_eq!(report["completed"], 10_000, "{report}");
    assert!(
        metric(setup.two.addr, "slipstream_requests_total{status=\"2xx\"}") > 0.0,
        "the reloaded origin took over"
    );
}
