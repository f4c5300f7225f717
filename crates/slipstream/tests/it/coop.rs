//! `slipstream node` (paper 004) as real processes on loopback: a gateway, cache nodes and a
//! cache manager that joins later, each a browser proxy; an origin served by `slipstream serve`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{bin, request, serve, start, Node};

pub(crate) fn status(addr: SocketAddr) -> serde_json::Value {
    crate::support::json(addr, "/_slipstream/coop")
}

/// Polls `addr`'s coop status until `done` holds: announcements, replicas and hints travel on
/// the nodes' own tasks, so the test waits for what they report.
fn wait_until(
    addr: SocketAddr,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    crate::support::wait_for_json(addr, "/_slipstream/coop", what, done)
}

/// An origin serving `files` (cacheable for five minutes, with `extra` flags), and a new cache
/// provider's key.
pub(crate) struct Setup {
    pub site: tempfile::TempDir,
    pub origin: Node,
    _keys: tempfile::TempDir,
    /// The key file's path.
    pub key: String,
    /// Its peer id.
    pub provider: String,
}

pub(crate) fn setup(files: &[(&str, &str)], extra: &[&str]) -> Setup {
    let site = tempfile::tempdir().unwrap();
    for (name, body) in files {
        std::fs::write(site.path().join(name), body).unwrap();
    }
    let mut args = vec!["--cache-control", "max-age=300"];
    args.extend_from_slice(extra);
    let origin = serve(site.path(), &args);
    let keys = tempfile::tempdir().unwrap();
    let (key, provider) = keygen(keys.path());
    Setup {
        site,
        origin,
        _keys: keys,
        key,
        provider,
    }
}

pub(crate) fn holds(s: &serde_json::Value, url: &str) -> bool {
    s["objects"]
        .as_array()
        .is_some_and(|o| o.iter().any(|o| o["url"] == url))
}

/// A provider's key in `dir`; its peer id.
pub(crate) fn keygen(dir: &Path) -> (String, String) {
    let path = dir.join("provider.key");
    let out = bin()
        .args(["node", "keygen", path.to_str().unwrap()])
        .output()
        .expect("keygen");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(id.starts_with("12D3KooW"), "{id}");
    // A second keygen never overwrites a key.
    let again = bin()
        .args(["node", "keygen", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    (path.to_str().unwrap().to_owned(), id)
}

pub(crate) struct CoopNode {
    pub node: Node,
    pub p2p: String,
}

pub(crate) fn node(args: &[&str]) -> CoopNode {
    // The origins are on loopback, which a browser (forward) proxy reaches only when told to.
    let mut all = vec![
        "node",
        "--listen",
        "127.0.0.1:0",
        "--set",
        "proxy.allow_destinations=[\"127.0.0.0/8\"]",
    ];
    all.extend_from_slice(args);
    let node = start(&all, "browser proxy on");
    let p2p = node
        .wait_for_line("p2p: ")
        .trim_start_matches("p2p: ")
        .to_owned();
    CoopNode { node, p2p }
}

/// A GET of `url` through the browser proxy at `proxy`: (status, body, Cache-Status).
pub(crate) fn fetch(proxy: SocketAddr, url: &str) -> (u16, Vec<u8>, String) {
    let r = request(proxy, "GET", url, &[]);
    let cs = r.header("cache-status").unwrap_or_default().to_owned();
    (r.status, r.body, cs)
}

#[test]
fn a_ring_finds_a_manager_that_joins_later_and_survives_a_killed_replica() {
    let s = setup(&[("a.txt", "aaa\n"), ("b.txt", "bbb\n")], &[]);
    let (origin, key, provider) = (&s.origin, s.key.clone(), s.provider.clone());

    let gateway = node(&["--provider-key", &key, "--role", "gateway"]);
    let boot = gateway.p2p.clone();
    let caches: Vec<CoopNode> = (0..3)
        .map(|_| node(&["--provider", &provider, "--bootstrap", &boot]))
        .collect();
    let (a, b) = (caches[0].node.addr, caches[1].node.addr);
    let url_a = format!("http://{}/a.txt", origin.addr);
    let url_b = format!("http://{}/b.txt", origin.addr);

    // No cache manager yet: a miss is served by the origin, and its hint finds no manager.
    let (st, body, cs) = fetch(a, &url_a);
    assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
    assert!(cs.contains("slipstream-coop; fwd=miss"), "{cs}");
    wait_until(a, "the hint failed", |s| s["lookups"]["hints_failed"] == 1);

    // A manager joins through the gateway; no other node's configuration changes.
    let manager = node(&[
        "--provider",
        &provider,
        "--bootstrap",
        &boot,
        "--role",
        "manager",
    ]);
    let m = manager.node.addr;
    // The next miss at the same proxy reaches it, and it makes a replica (inserted by the
    // gateway, found through its service GUID).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (st, body, _) = fetch(a, &url_b);
        assert_eq!((st, body.as_slice()), (200, &b"bbb\n"[..]));
        if holds(&status(m), &url_b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the manager never made a replica"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The manager answers the hint after it holds the replica: the proxy counts it then.
    wait_until(a, "the hint counted as taken", |s| {
        s["lookups"]["hints_sent"].as_u64() >= Some(1)
    });
    let g = wait_until(gateway.node.addr, "the gateway holds it", |s| {
        holds(s, &url_b)
    });
    assert_eq!(g["roles"], serde_json::json!(["gateway"]));

    // Another proxy finds a replica through the DHT: the origin sees nothing more.
    let (st, body, cs) = fetch(b, &url_b);
    assert_eq!((st, body.as_slice()), (200, &b"bbb\n"[..]));
    assert!(cs.contains("slipstream-coop; hit"), "{cs}");
    let bs = status(b);
    assert_eq!(
        bs["lookups"]["dht"].as_u64().unwrap() + bs["lookups"]["nearby"].as_u64().unwrap(),
        1,
        "{bs}"
    );

    // The manager dies; every request still succeeds (another replica, or the origin).
    drop(manager);
    for i in 0..20 {
        let proxy = caches[i % 3].node.addr;
        let (st, body, _) = fetch(proxy, &url_b);
        assert_eq!((st, body.as_slice()), (200, &b"bbb\n"[..]), "request {i}");
    }

    // Uncacheable requests are not looked up, and bad ones get a clear answer.
    let r = request(a, "POST", &url_a, &[]);
    assert_eq!(r.status, 405, "the origin's answer");
    assert!(status(a)["lookups"]["bypass"].as_u64() >= Some(1));
}

#[test]
fn a_node_with_a_bad_configuration_says_what_is_wrong_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["node"], "[coop] provider"),
        (&["node", "--provider", "nope"], "not a peer id"),
        (
            &[
                "node",
                "--provider",
                "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
                "--role",
                "gateway",
            ],
            "provider_key",
        ),
        (
            &[
                "node",
                "--provider",
                "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
                "--bootstrap",
                "/ip4/127.0.0.1/tcp/1",
            ],
            "must end in /p2p/",
        ),
    ];
    for (args, message) in cases {
        let out = bin().args(args).current_dir(dir.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

#[test]
fn a_restarted_node_keeps_its_identity_and_its_replicas() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let (origin, key) = (&s.origin, s.key.clone());
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let url = format!("http://{}/a.txt", origin.addr);
    let args = [
        "--provider-key",
        key.as_str(),
        "--role",
        "gateway",
        "--role",
        "manager",
        "--data-dir",
        data_dir,
    ];
    let first = node(&args);
    let id = status(first.node.addr)["peer_id"].clone();
    // Its own miss hint reaches itself as manager; the replica is in its store.
    let (st, _, _) = fetch(first.node.addr, &url);
    assert_eq!(st, 200);
    wait_until(first.node.addr, "a replica", |s| holds(s, &url));
    drop(first);

    let second = node(&args);
    let s = status(second.node.addr);
    assert_eq!(s["peer_id"], id);
    assert!(holds(&s, &url), "{s}");
    assert_eq!(s["store"]["restored"], 1);
    let (st, body, cs) = fetch(second.node.addr, &url);
    assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
    assert!(cs.contains("hit; detail=store"), "{cs}");
}

/// A TCP forwarder to `upstream` on a port of its own, counting the connections it forwards
/// (a NAT or a TCP proxy in front of a node, as Toxiproxy is in the experiments).
fn forwarder(upstream: SocketAddr) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(upstream) else {
                continue;
            };
            seen.fetch_add(1, Ordering::SeqCst);
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut c, mut s) = (client, server);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c, &mut s);
                let _ = s.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (addr, count)
}

#[test]
fn a_node_behind_a_forwarder_is_reached_only_through_its_external_address() {
    use std::sync::atomic::Ordering;
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let url = format!("http://{}/a.txt", s.origin.addr);
    // The gateway listens on a port of its own and announces only the forwarder's.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (front, forwarded) = forwarder(([127, 0, 0, 1], port).into());
    let listen = format!("/ip4/127.0.0.1/tcp/{port}");
    let external = format!("/ip4/127.0.0.1/tcp/{}", front.port());
    let gateway = node(&[
        "--provider-key",
        &s.key,
        "--role",
        "gateway",
        "--role",
        "manager",
        "--p2p-listen",
        &listen,
        "--external",
        &external,
        "--set",
        "coop.spread_copies=0",
    ]);
    assert!(gateway.p2p.starts_with(&external), "{}", gateway.p2p);
    let st = status(gateway.node.addr);
    assert!(
        st["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a.as_str().unwrap().starts_with(&external)),
        "{st}"
    );
    // B joins through the announced address; its miss makes the gateway's replica.
    let b = node(&["--provider", &s.provider, "--bootstrap", &gateway.p2p]);
    assert_eq!(fetch(b.node.addr, &url).0, 200);
    wait_until(gateway.node.addr, "a replica", |s| holds(s, &url));
    let through_b = forwarded.load(Ordering::SeqCst);
    assert!(through_b >= 1);
    // C knows only B; the provider record it finds names the gateway by its external
    // address, so its fetch is a second connection through the forwarder.
    let c = node(&["--provider", &s.provider, "--bootstrap", &b.p2p]);
    // Until C's routing table reaches the record (a miss goes to the origin meanwhile).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (st, body, cs) = fetch(c.node.addr, &url);
        assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
        if cs.contains("slipstream-coop; hit") {
            break;
        }
        assert!(Instant::now() < deadline, "C never found the replica: {cs}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        forwarded.load(Ordering::SeqCst) > through_b,
        "C reached the gateway without the forwarder"
    );
}

fn served(addr: SocketAddr) -> u64 {
    status(addr)["net"]["served"].as_u64().unwrap()
}

#[test]
fn a_flash_crowd_spreads_replicas_and_an_update_reaches_every_one_within_a_period() {
    let s = setup(
        &[("hot.html", "version one\n")],
        &["--set", "serve.revalidate_ms=0"],
    );
    let (site, origin, key, provider) = (&s.site, &s.origin, s.key.clone(), s.provider.clone());
    let url = format!("http://{}/hot.html", origin.addr);
    let period = Duration::from_secs(2);
    let gateway = node(&[
        "--provider-key",
        &key,
        "--role",
        "gateway",
        "--monitor",
        &url,
        "--set",
        "coop.monitor_period_ms=2s",
    ]);
    let boot = gateway.p2p.clone();
    let manager = node(&[
        "--provider",
        &provider,
        "--bootstrap",
        &boot,
        "--role",
        "manager",
        "--set",
        "coop.hot_after=3",
        "--set",
        "coop.spread_copies=2",
    ]);
    let caches: Vec<CoopNode> = (0..3)
        .map(|_| node(&["--provider", &provider, "--bootstrap", &boot]))
        .collect();
    let everyone: Vec<SocketAddr> = [&gateway, &manager]
        .into_iter()
        .chain(&caches)
        .map(|n| n.node.addr)
        .collect();

    // The crowd: every request through one of the caches. The first misses; its hint makes a
    // replica at the manager; hits that walk the DHT are slow-hit hints, and by the third
    // hint the manager spreads the object over two more nodes.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    let holders = loop {
        let (st, body, _) = fetch(caches[i % 3].node.addr, &url);
        assert_eq!(
            (st, body.as_slice()),
            (200, &b"version one\n"[..]),
            "request {i}"
        );
        i += 1;
        let holders: Vec<SocketAddr> = everyone
            .iter()
            .copied()
            .filter(|a| holds(&status(*a), &url))
            .collect();
        if holders.len() >= 4 {
            break holders;
        }
        assert!(Instant::now() < deadline, "no spread after {i} requests");
    };
    // More of the crowd; the replicas share it.
    for j in 0..30 {
        let (st, _, _) = fetch(caches[j % 3].node.addr, &url);
        assert_eq!(st, 200);
    }
    let counts: Vec<(SocketAddr, u64, u64)> = everyone
        .iter()
        .map(|a| {
            let s = status(*a);
            (
                *a,
                s["net"]["served"].as_u64().unwrap(),
                s["lookups"]["store"].as_u64().unwrap(),
            )
        })
        .collect();
    eprintln!(
        "replicas at {holders:?}; (node, fetches served to peers, own-store hits): {counts:?}"
    );
    let answering = counts
        .iter()
        .filter(|(_, peers, own)| peers + own > 0)
        .count();
    assert!(
        answering >= 3,
        "the crowd was served by {answering} node(s): {counts:?}"
    );
    assert!(
        served(gateway.node.addr) < i as u64 + 30,
        "the gateway served the whole crowd"
    );

    // The crowd may have made more replicas (a copy that serves many peers is spread): every
    // node holding it now must get the update.
    let holders: Vec<SocketAddr> = everyone
        .iter()
        .copied()
        .filter(|a| holds(&status(*a), &url))
        .collect();
    // The origin changes; the monitor's next refresh pushes version 2 to every replica.
    std::fs::write(site.path().join("hot.html"), "version two\n").unwrap();
    let changed = Instant::now();
    for a in &holders {
        wait_until(*a, "the update", |s| {
            s["objects"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["url"] == url.as_str() && o["version"] == 2)
        });
    }
    let took = changed.elapsed();
    eprintln!("version 2 at all {} replicas after {took:?}", holders.len());
    // One period, and a margin for the push to cross the tree on a loaded machine; a replica
    // made just before the change may join its site's push tree after the first push and get
    // the next one (a second period).
    assert!(took < 2 * period + Duration::from_secs(1), "{took:?}");
    for c in &caches {
        let (st, body, _) = fetch(c.node.addr, &url);
        assert_eq!((st, body.as_slice()), (200, &b"version two\n"[..]));
    }
}

#[test]
fn a_coop_nodes_status_page_shows_its_peers_objects_and_lookups() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let (origin, key, provider) = (&s.origin, s.key.clone(), s.provider.clone());
    let gateway = node(&[
        "--provider-key",
        &key,
        "--role",
        "gateway",
        "--role",
        "manager",
    ]);
    let cache = node(&["--provider", &provider, "--bootstrap", &gateway.p2p]);
    let url = format!("http://{}/a.txt", origin.addr);
    assert_eq!(fetch(cache.node.addr, &url).0, 200);
    wait_until(gateway.node.addr, "a replica", |s| holds(s, &url));
    let (_, _, cs) = fetch(cache.node.addr, &url);
    assert!(cs.contains("slipstream-coop; hit"), "{cs}");

    let dom = crate::status_page::status_dom(cache.node.addr);
    assert!(
        dom.contains("data-coop-drawn=\"1\""),
        "the lookups chart:\n{dom}"
    );
    assert!(dom.contains("data-coop-peers=\"1\""), "{dom}");
    assert!(dom.contains("1 DHT, 1 miss"), "the lookups summary:\n{dom}");
    let dom = crate::status_page::status_dom(gateway.node.addr);
    assert!(
        dom.contains(&format!("<td>{url}</td>")),
        "the objects it provides:\n{dom}"
    );
    assert!(dom.contains("gateway, manager"), "{dom}");
}

#[test]
fn accept_datetime_travels_to_a_past_version() {
    let s = setup(
        &[("news.html", "monday\n")],
        &["--set", "serve.revalidate_ms=0"],
    );
    let (site, origin, key, provider) = (&s.site, &s.origin, s.key.clone(), s.provider.clone());
    let url = format!("http://{}/news.html", origin.addr);
    let gateway = node(&[
        "--provider-key",
        &key,
        "--role",
        "gateway",
        "--role",
        "manager",
        "--monitor",
        &url,
        "--set",
        "coop.monitor_period_ms=500ms",
    ]);
    let cache = node(&["--provider", &provider, "--bootstrap", &gateway.p2p]);
    let g = gateway.node.addr;
    assert_eq!(fetch(cache.node.addr, &url).0, 200);
    wait_until(g, "version 1", |s| holds(s, &url));
    // HTTP-dates count whole seconds: version 2 comes more than a second after version 1.
    let t1 = std::time::SystemTime::now();
    while t1.elapsed().unwrap() < Duration::from_millis(1_100) {
        std::thread::yield_now();
    }
    std::fs::write(site.path().join("news.html"), "tuesday\n").unwrap();
    let s = wait_until(g, "version 2", |s| {
        s["objects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["url"] == url.as_str() && o["version"] == 2)
    });
    assert_eq!(s["store"]["past_versions"], 1, "{s}");

    let ask =
        |proxy: SocketAddr, when: &str| request(proxy, "GET", &url, &[("Accept-Datetime", when)]);
    // Version 1 was captured by t1, version 2 more than a second later: the whole second after
    // t1 (an HTTP-date drops the fraction) names version 1, from the gateway's own past and
    // through another node (which asks the DHT).
    let when = httpdate::fmt_http_date(t1 + Duration::from_secs(1));
    for proxy in [g, cache.node.addr] {
        let r = ask(proxy, &when);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"monday\n"[..]),
            "via {proxy}"
        );
        let captured = r.header("memento-datetime").expect("Memento-Datetime");
        let parse = |d: &str| httpdate::parse_http_date(d).unwrap();
        assert!(parse(captured) <= parse(&when), "{captured} after {when}");
        assert_eq!(
            r.header("link"),
            Some(format!("<{url}>; rel=\"original\"").as_str())
        );
        assert!(r
            .header("vary")
            .unwrap_or_default()
            .contains("accept-datetime"));
        assert!(r
            .header("cache-status")
            .unwrap_or_default()
            .contains("detail=memento"));
    }
    // Now: version 2. Before every version: the resource as it is, and no Memento-Datetime.
    let r = ask(
        g,
        &httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(5)),
    );
    assert_eq!(r.body, b"tuesday\n");
    let r = ask(cache.node.addr, "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"tuesday\n"[..]));
    assert_eq!(r.header("memento-datetime"), None);
    assert_eq!(status(cache.node.addr)["lookups"]["no_memento"], 1);
    // A malformed Accept-Datetime is refused with the reason.
    let r = ask(cache.node.addr, "last tuesday");
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("not an HTTP-date"));
}

/// The last eight characters of the peer id in a `/p2p/` address (the node's short form).
fn short_of(p2p: &str) -> String {
    let id = p2p.rsplit('/').next().unwrap();
    id[id.len() - 8..].to_owned()
}

#[test]
fn cache_status_says_whether_the_store_a_peer_or_the_origin_answered() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let url = format!("http://{}/a.txt", s.origin.addr);
    let gateway = node(&[
        "--provider-key",
        &s.key,
        "--role",
        "gateway",
        "--role",
        "manager",
    ]);
    let g = gateway.node.addr;
    let cache = node(&["--provider", &s.provider, "--bootstrap", &gateway.p2p]);
    let a = cache.node.addr;

    // A miss: the origin answered, and no member says hit.
    let (st, _, cs) = fetch(a, &url);
    assert_eq!(st, 200);
    assert!(
        cs.starts_with("slipstream-coop; fwd=miss; fwd-status=200"),
        "{cs}"
    );
    assert!(!cs.contains("hit"), "{cs}");

    // The miss hint makes the manager (the gateway's node) keep a replica.
    wait_until(g, "the gateway holds it", |s| holds(s, &url));

    // A peer's hit names the peer; this node's proxy adds no `fwd=` of its own.
    let (st, body, cs) = fetch(a, &url);
    assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
    let peer = short_of(&gateway.p2p);
    assert!(
        cs.starts_with(&format!("slipstream-coop; hit; detail=\"peer {peer} via ")),
        "{cs}"
    );
    assert!(!cs.contains("fwd="), "{cs}");

    // The node's own store's hit.
    let (st, body, cs) = fetch(g, &url);
    assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
    assert_eq!(cs, "slipstream-coop; hit; detail=store");
}

#[test]
fn a_nodes_browser_proxy_is_closed_to_strangers_and_to_its_own_ports() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    // The origin behind a forwarder that counts the connections made to it.
    let (front, connections) = forwarder(s.origin.addr);
    let url = format!("http://{front}/a.txt");
    let count = || connections.load(std::sync::atomic::Ordering::SeqCst);

    // A client outside allow_clients: 403, and nothing connected.
    let strangers = start(
        &[
            "node",
            "--listen",
            "127.0.0.1:0",
            "--provider",
            &s.provider,
            "--set",
            "proxy.allow_clients=[\"10.0.0.0/8\"]",
            "--set",
            "proxy.allow_destinations=[\"127.0.0.0/8\"]",
        ],
        "browser proxy on",
    );
    let (st, _, _) = fetch(strangers.addr, &url);
    assert_eq!(st, 403);
    assert_eq!(count(), 0);

    // A destination outside allow_destinations (loopback, by default): 403, nothing connected,
    // nothing looked up, no hint.
    let closed = start(
        &["node", "--listen", "127.0.0.1:0", "--provider", &s.provider],
        "browser proxy on",
    );
    let (st, _, _) = fetch(closed.addr, &url);
    assert_eq!(st, 403);
    assert_eq!(count(), 0);
    let c = status(closed.addr);
    assert_eq!(c["lookups"]["bypass"], 1, "{c}");
    assert_eq!(c["lookups"]["miss"], 0, "{c}");

    // Loopback allowed, the node listening for peers on every interface: its p2p port is
    // refused on any local address.
    let open = node(&[
        "--provider",
        &s.provider,
        "--p2p-listen",
        "/ip4/0.0.0.0/tcp/0",
    ]);
    let port: u16 = open
        .p2p
        .split('/')
        .nth(4)
        .and_then(|p| p.parse().ok())
        .expect("a tcp port");
    for host in ["127.0.0.1", "127.0.0.2"] {
        let (st, _, _) = fetch(open.node.addr, &format!("http://{host}:{port}/"));
        assert_eq!(st, 403, "{host}:{port}");
    }

    // A fetch that fails (nothing listens there) sends no miss hint; a miss the origin
    // answers sends one (it finds no manager: `hints_failed`).
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/", gone.local_addr().unwrap());
    drop(gone);
    let (st, _, _) = fetch(open.node.addr, &dead);
    assert_eq!(st, 502);
    let (st, body, _) = fetch(open.node.addr, &url);
    assert_eq!((st, body.as_slice()), (200, &b"aaa\n"[..]));
    assert_eq!(count(), 1);
    let o = wait_until(open.node.addr, "the origin's miss hinted", |s| {
        s["lookups"]["hints_failed"] == 1
    });
    assert_eq!(o["lookups"]["hints_sent"], 0, "{o}");
    assert_eq!(o["lookups"]["hints_dropped"], 0, "{o}");
    assert_eq!(o["lookups"]["miss"], 2, "{o}");
}

#[test]
fn a_restarted_first_gateway_rejoins_through_the_peers_it_knew() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let args = [
        "--provider-key",
        s.key.as_str(),
        "--role",
        "gateway",
        "--data-dir",
        data_dir,
    ];
    let first = node(&args);
    let cache = node(&["--provider", &s.provider, "--bootstrap", &first.p2p]);
    let cache_id = status(cache.node.addr)["peer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The gateway keeps the cache node's address in its data directory.
    let peers = data.path().join("peers");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&peers).is_ok_and(|t| t.contains(&cache_id)) {
        assert!(
            Instant::now() < deadline,
            "the peers file never named the cache node"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(first);
    wait_until(cache.node.addr, "the gateway gone", |s| {
        s["peers"].as_array().is_some_and(|p| p.is_empty())
    });

    // Started again with no bootstrap peer: it dials the one it knew.
    let second = node(&args);
    let g = wait_until(second.node.addr, "the gateway rejoined", |s| {
        s["peers"].as_array().is_some_and(|p| !p.is_empty())
    });
    assert_eq!(g["peers"][0]["peer_id"], cache_id.as_str(), "{g}");
    // The cache node, whose only peer it was, sees it again.
    wait_until(cache.node.addr, "the cache node sees the gateway", |s| {
        s["peers"].as_array().is_some_and(|p| !p.is_empty())
    });
}

/// An origin answering every GET with `body` under the ETag `"v1"` (fresh for two seconds),
/// and a 304 to a request that names that ETag; the counts of its 200s and 304s. One request a
/// connection (`Connection: close`), so that each is counted once it is read.
fn validating_origin(
    body: &'static str,
) -> (
    SocketAddr,
    std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>,
) {
    use std::io::{BufRead, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let seen = counts.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut validated = false;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                validated |= lower.starts_with("if-none-match:") && lower.contains("\"v1\"");
            }
            let date = httpdate::fmt_http_date(std::time::SystemTime::now());
            let common = format!(
                "ETag: \"v1\"\r\nCache-Control: max-age=2\r\nDate: {date}\r\nConnection: close\r\n"
            );
            let answer = if validated {
                seen[1].fetch_add(1, Ordering::SeqCst);
                format!("HTTP/1.1 304 Not Modified\r\n{common}\r\n")
            } else {
                seen[0].fetch_add(1, Ordering::SeqCst);
                format!(
                    "HTTP/1.1 200 OK\r\n{common}Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            };
            let mut conn = conn;
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    (addr, counts)
}

#[test]
fn a_gateway_revalidates_what_it_holds_and_a_304_refreshes_it_in_place() {
    use std::sync::atomic::Ordering;
    let (origin, counts) = validating_origin("the same body\n");
    let url = format!("http://{origin}/page.txt");
    let keys = tempfile::tempdir().unwrap();
    let (key, _) = keygen(keys.path());
    let gateway = node(&[
        "--provider-key",
        &key,
        "--role",
        "gateway",
        "--monitor",
        &url,
        "--set",
        "coop.monitor_period_ms=300ms",
    ]);
    let g = gateway.node.addr;
    wait_until(g, "the object", |s| holds(s, &url));
    // The monitor's refreshes are conditional: the origin sends the body once, then 304s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts[1].load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "no 304s: {counts:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(counts[0].load(Ordering::SeqCst), 1, "one 200 only");
    // Each 304 renewed the held object in place: still version 1, kept fresh past its max-age,
    // the body the one 200 carried.
    let s = status(g);
    let object = s["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["url"] == url.as_str())
        .unwrap_or_else(|| panic!("{s}"))
        .clone();
    assert_eq!(object["version"], 1, "{s}");
    let (code, body, cs) = fetch(g, &url);
    assert_eq!((code, body.as_slice()), (200, &b"the same body\n"[..]));
    assert!(cs.contains("hit; detail=store"), "{cs}");
    assert_eq!(counts[0].load(Ordering::SeqCst), 1, "{counts:?}");
}
