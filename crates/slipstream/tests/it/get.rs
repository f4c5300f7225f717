//! `slipstream get` as users run it: one process per URL, the latency table kept between
//! runs, many URLs in one process, and the URL's own server down (Web++, paper 001 §3).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::cluster::{free_udp_port, Member, TOKEN};
use crate::support::{self, send};

/// A replica that answers every GET with `body` after `delay` (a far one).
fn slow_replica(body: &'static str, delay: Duration) -> SocketAddr {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line.trim().is_empty() {
                            break;
                        }
                        head.push_str(&line);
                    }
                    // The distance it stands for: every answer takes this long.
                    std::thread::sleep(delay);
                    let head_only = head.starts_with("HEAD");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{}",
                        body.len(),
                        if head_only { "" } else { body }
                    );
                    if conn.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Two members publishing the whole site, and a far replica of it that a third registers.
struct Cluster {
    _site: tempfile::TempDir,
    _data: tempfile::TempDir,
    n0: Member,
    n1: Member,
    _n2: Member,
    slow: SocketAddr,
}

fn cluster() -> Cluster {
    let site = support::site();
    let data = tempfile::tempdir().unwrap();
    let (g0, g1) = (free_udp_port(), free_udp_port());
    let flags = [
        "--set",
        "cluster.publish=[\"/*\"]",
        "--set",
        "cluster.replica_hosts=[\"127.0.0.1\"]",
    ];
    let n0 = Member::start(site.path(), data.path(), "n0", None, None, g0, &flags);
    let n1 = Member::start(site.path(), data.path(), "n1", Some(g0), None, g1, &flags);
    let n2 = Member::start(
        site.path(),
        data.path(),
        "n2",
        Some(g0),
        None,
        free_udp_port(),
        &flags[2..],
    );
    let slow = slow_replica("hello, world\n", Duration::from_millis(300));
    let r = send(
        n2.addr,
        "PUT",
        "/_slipstream/replicas/*",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        Some(format!("{{\"physical\": \"http://{slow}/*\"}}").as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // Every member names all three replicas.
    for m in [&n0, &n1] {
        support::wait_for_json(
            m.addr,
            "/_slipstream/resolve?url=/hello.txt",
            "three replicas",
            |v| v["replicas"].as_array().map(Vec::len) == Some(3),
        );
    }
    Cluster {
        _site: site,
        _data: data,
        n0,
        n1,
        _n2: n2,
        slow,
    }
}

/// `slipstream get ARGS…` with its state in `state`: (success, stdout, stderr).
fn get(state: &Path, args: &[&str]) -> (bool, Vec<u8>, String) {
    let out = support::bin()
        .arg("get")
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .expect("slipstream get");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), out.stdout, err)
}

#[test]
fn a_second_get_goes_straight_to_the_fastest_replica_without_resolving() {
    let c = cluster();
    let state = tempfile::tempdir().unwrap();
    let state = state.path().join("get.json");
    let url = format!("http://{}/hello.txt", c.n0.addr);
    // The first run knows nothing: it resolves, races the three, and a near one wins.
    let (ok, body, err) = get(&state, &[&url]);
    assert!(ok, "{err}");
    assert_eq!(body, b"hello, world\n");
    assert!(err.contains("3 replica(s) resolved"), "{err}");
    assert!(err.contains("raced 3"), "{err}");
    assert!(!err.contains(&format!("from http://{}", c.slow)), "{err}");
    // The far replica's answer, which came after the race was won, was measured too.
    let saved: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let far = saved["table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == format!("http://{}", c.slow))
        .unwrap_or_else(|| panic!("{saved}"))
        .clone();
    assert!(far["avg_ms"].as_f64() >= Some(250.0), "{saved}");

    // The second run: no resolve round trip, no race, a near replica at once.
    let (ok, body, err) = get(&state, &[&url]);
    assert!(ok, "{err}");
    assert_eq!(body, b"hello, world\n");
    let line = err
        .lines()
        .find(|l| l.starts_with(&url))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        !line.contains("resolved") && !line.contains("raced"),
        "{line}"
    );
    let near = [c.n0.addr, c.n1.addr]
        .iter()
        .any(|a| line.contains(&format!("from http://{a}/hello.txt")));
    assert!(near, "{line}");

    // Another URL of the site: the resolver's rules (its `/*` and everything under it) came
    // with the first answer, so this one is resolved without asking either.
    let other = format!("http://{}/index.html", c.n0.addr);
    let (ok, body, err) = get(&state, &[&other]);
    assert!(ok, "{err}");
    assert!(
        body.starts_with(b"<h1>home</h1>"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let line = err
        .lines()
        .find(|l| l.starts_with(&other))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(!line.contains("resolved"), "{line}");

    // A damaged state file costs what it had learned, not the fetch.
    std::fs::write(&state, b"{ not json").unwrap();
    let (ok, body, err) = get(&state, &[&url]);
    assert!(ok, "{err}");
    assert_eq!(body, b"hello, world\n");
    assert!(err.contains("is not a slipstream get state"), "{err}");
}

#[test]
fn get_fetches_many_urls_from_a_file_into_a_directory() {
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("urls.txt");
    let names = [
        "hello.txt",
        "index.html",
        "docs/index.html",
        "large.bin",
        "space%20name.txt",
    ];
    let mut text = String::from("# the site's files\n\n");
    for n in names {
        text.push_str(&format!("http://{}/{n}\n", c.n1.addr));
    }
    std::fs::write(&list, text).unwrap();
    let out = dir.path().join("out");
    let (ok, _, err) = get(
        &dir.path().join("state.json"),
        &[
            "-i",
            list.to_str().unwrap(),
            "--parallel",
            "3",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    assert!(err.contains("5 fetched, 0 failed"), "{err}");
    let host = c.n1.addr.to_string().replace(':', "_");
    assert_eq!(
        std::fs::read(out.join(&host).join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    assert_eq!(
        std::fs::read(out.join(&host).join("large.bin")).unwrap(),
        support::large()
    );
    // A member's pages carry its replica block after the markup.
    let page = std::fs::read(out.join(&host).join("docs/index.html")).unwrap();
    assert!(
        page.starts_with(b"<h1>docs</h1>\n"),
        "{}",
        String::from_utf8_lossy(&page)
    );
}

#[test]
fn with_the_urls_own_server_down_get_resolves_and_fetches_from_another_replica() {
    let mut c = cluster();
    let state = tempfile::tempdir().unwrap();
    let state = state.path().join("get.json");
    let url = format!("http://{}/hello.txt", c.n0.addr);
    // Lists kept for no time: every run resolves.
    let (ok, _, err) = get(&state, &[&url, "--list-ttl", "0s"]);
    assert!(ok, "{err}");
    // The URL's own server dies; the next run must resolve again: from a replica it learned,
    // not from the dead host.
    c.n0.crash();
    let (ok, body, err) = get(&state, &[&url, "--list-ttl", "0s"]);
    assert!(ok, "{err}");
    assert_eq!(body, b"hello, world\n");
    let line = err
        .lines()
        .find(|l| l.starts_with(&url))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        !line.contains(&format!("from http://{}", c.n0.addr)),
        "{line}"
    );
    assert!(line.contains("resolved"), "{line}");
}

#[test]
fn resolve_answers_only_for_the_clusters_own_sites() {
    let c = cluster();
    let resolve = |at: SocketAddr, url: &str| {
        let q: String = form_urlencoded_encode(url);
        support::get(at, &format!("/_slipstream/resolve?url={q}"))
    };
    // Its own Host, another member's advertised address, or a path: answered.
    for url in [
        format!("http://{}/hello.txt", c.n0.addr),
        format!("http://{}/hello.txt", c.n1.addr),
        "/hello.txt".to_owned(),
    ] {
        let r = resolve(c.n0.addr, &url);
        assert_eq!(r.status, 200, "{url}: {}", String::from_utf8_lossy(&r.body));
    }
    // Somebody else's site: not this cluster's to answer for.
    let r = resolve(c.n0.addr, "http://example.org/hello.txt");
    assert_eq!(r.status, 404);
    assert!(
        String::from_utf8_lossy(&r.body).contains("not a site of this cluster"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

fn form_urlencoded_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_replica_that_failed_is_probed_after_its_back_off_and_used_again() {
    let site = support::site();
    let data = tempfile::tempdir().unwrap();
    let (g0, g1) = (free_udp_port(), free_udp_port());
    let flags = ["--set", "cluster.publish=[\"/*\"]"];
    let mut n0 = Member::start(site.path(), data.path(), "n0", None, None, g0, &flags);
    let n1 = Member::start(site.path(), data.path(), "n1", Some(g0), None, g1, &flags);
    support::wait_for_json(
        n1.addr,
        "/_slipstream/resolve?url=/hello.txt",
        "two replicas",
        |v| v["replicas"].as_array().map(Vec::len) == Some(2),
    );
    let state = tempfile::tempdir().unwrap();
    let state = state.path().join("get.json");
    let url = format!("http://{}/hello.txt", n1.addr);
    let n0_endpoint = format!("http://{}", n0.addr);
    let failures = |state: &Path| -> u64 {
        let v: Value = serde_json::from_slice(&std::fs::read(state).unwrap()).unwrap();
        v["table"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["endpoint"] == n0_endpoint.as_str())
            .map_or(0, |e| e["failures"].as_u64().unwrap())
    };
    let (ok, _, err) = get(&state, &[&url]);
    assert!(ok, "{err}");
    // n0 dies: fetches fail over to n1 until one has found n0 down.
    n0.crash();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while failures(&state) == 0 {
        assert!(std::time::Instant::now() < deadline, "n0 never found down");
        let (ok, body, err) = get(&state, &[&url]);
        assert!(ok, "{err}");
        assert_eq!(body, b"hello, world\n");
    }
    // n0 comes back at its address. Once its back-off (1 s) is over, the next run probes it
    // beside its own fetch, and the probe's answer puts it back.
    let n0 = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        Some(n0.addr),
        g0,
        &flags,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while failures(&state) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "n0 never probed back: {}",
            std::fs::read_to_string(&state).unwrap()
        );
        let (ok, _, err) = get(&state, &[&url]);
        assert!(ok, "{err}");
    }
    drop(n0);
}
