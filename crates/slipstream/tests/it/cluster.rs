//! Clusters of `slipstream serve` processes sharing a replication directory by gossip
//! (chitchat over UDP on loopback): convergence after concurrent writes and a crash, and what a
//! hostile peer or API client cannot do.

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, get, send, Node};

pub(crate) const TOKEN: &str = "test-token-0123456789";

/// How often test nodes gossip.
pub(crate) const GOSSIP_MS: u64 = 100;

/// The convergence bound these tests hold a cluster of five to: with one gossip round every
/// 100 ms, scuttlebutt needs a few rounds (log2 5 < 3) for a write to reach every node; 10 s
/// is that with a wide margin for a loaded two-core CI machine. The measured times are
/// printed.
pub(crate) const CONVERGENCE_BOUND: Duration = Duration::from_secs(10);

/// A directory entry as a comparable tuple: (node, pattern, version, deleted, physical).
pub(crate) type Row = (String, String, u64, bool, String);

/// An API case: method, path, headers, body, expected status, words the answer must contain.
type Case<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    Option<&'a [u8]>,
    u16,
    &'a str,
);

pub(crate) fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// One cluster member: a `slipstream serve` process and what it takes to restart it.
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) gossip: u16,
    data: PathBuf,
    pub(crate) node: Option<Node>,
    pub(crate) addr: SocketAddr,
}

impl Member {
    pub(crate) fn start(
        site: &Path,
        data_root: &Path,
        name: &str,
        seed: Option<u16>,
        listen: Option<SocketAddr>,
        gossip: u16,
        extra: &[&str],
    ) -> Member {
        let data = data_root.join(name);
        let listen = listen.map_or("127.0.0.1:0".to_owned(), |a| a.to_string());
        let sets = [
            format!("cluster.name={name}"),
            format!("cluster.gossip_listen=127.0.0.1:{gossip}"),
            format!("cluster.data_dir={}", data.display()),
            format!("cluster.token={TOKEN}"),
            format!("cluster.gossip_interval_ms={GOSSIP_MS}"),
        ];
        let mut args = vec![
            "serve".to_owned(),
            site.display().to_string(),
            "--listen".to_owned(),
            listen,
        ];
        for s in sets {
            args.push("--set".to_owned());
            args.push(s);
        }
        if let Some(seed) = seed {
            args.push("--cluster-seed".to_owned());
            args.push(format!("127.0.0.1:{seed}"));
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let node = support::start(&args, "slipstream serve:");
        Member {
            name: name.to_owned(),
            gossip,
            data,
            addr: node.addr,
            node: Some(node),
        }
    }

    /// Kills the process (SIGKILL: no drain, no goodbye) and waits for it.
    pub(crate) fn crash(&mut self) {
        if let Some(mut node) = self.node.take() {
            node.child.kill().expect("kill");
            node.child.wait().expect("wait");
        }
    }

    pub(crate) fn client(&self) -> Client {
        Client {
            name: self.name.clone(),
            addr: self.addr,
        }
    }

    pub(crate) fn put(&self, url: &str, body: &[u8]) -> support::Reply {
        self.client().put(url, body)
    }

    fn delete(&self, url: &str) -> support::Reply {
        self.client().delete(url)
    }

    pub(crate) fn directory(&self) -> Value {
        self.client().directory()
    }
}

/// Speaks to a member's HTTP API (from any thread).
#[derive(Clone)]
pub(crate) struct Client {
    name: String,
    addr: SocketAddr,
}

impl Client {
    fn put(&self, url: &str, body: &[u8]) -> support::Reply {
        send(
            self.addr,
            "PUT",
            &format!("/_slipstream/replicas{url}"),
            &[
                ("Authorization", &format!("Bearer {TOKEN}")),
                ("Content-Type", "text/plain"),
            ],
            Some(body),
        )
    }

    fn delete(&self, url: &str) -> support::Reply {
        send(
            self.addr,
            "DELETE",
            &format!("/_slipstream/replicas{url}"),
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            None,
        )
    }

    fn directory(&self) -> Value {
        let r = get(self.addr, "/_slipstream/directory");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("directory JSON")
    }
}

/// A directory's entries as comparable tuples: (node, pattern, version, deleted, physical).
pub(crate) fn entries(directory: &Value) -> BTreeSet<Row> {
    directory["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["node"].as_str().expect("node").to_owned(),
                e["pattern"].as_str().expect("pattern").to_owned(),
                e["version"].as_u64().expect("version"),
                e["deleted"].as_bool().expect("deleted"),
                e["physical"].as_str().expect("physical").to_owned(),
            )
        })
        .collect()
}

/// Waits until every running member's directory has the same entries, which include
/// `expected`; returns the entries and how long it took. Fails past `CONVERGENCE_BOUND`.
pub(crate) fn converge(members: &[Member], expected: &BTreeSet<Row>) -> (BTreeSet<Row>, Duration) {
    let start = Instant::now();
    loop {
        let views: Vec<_> = members
            .iter()
            .filter(|m| m.node.is_some())
            .map(|m| entries(&m.directory()))
            .collect();
        let same = views.windows(2).all(|w| w[0] == w[1]);
        if same && views[0].is_superset(expected) {
            return (views[0].clone(), start.elapsed());
        }
        assert!(
            start.elapsed() < CONVERGENCE_BOUND,
            "no convergence within {CONVERGENCE_BOUND:?}: {views:#?}\nexpected at least {expected:#?}"
        );
        std::thread::yield_now();
    }
}

/// What an acknowledged write leaves in the directory.
pub(crate) fn acked(member: &Client, pattern: &str, reply: &support::Reply) -> Row {
    assert!(
        matches!(reply.status, 200 | 201),
        "{} {pattern}: {} {}",
        member.name,
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
    let e: Value = serde_json::from_slice(&reply.body).expect("entry JSON");
    (
        member.name.clone(),
        pattern.to_owned(),
        e["version"].as_u64().expect("version"),
        false,
        e["physical"].as_str().expect("physical").to_owned(),
    )
}

#[test]
fn five_nodes_converge_after_concurrent_writes_and_a_crash() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..5).map(|_| free_udp_port()).collect();
    let mut members: Vec<Member> = (0..5)
        .map(|i| {
            let seed = (i > 0).then_some(ports[0]);
            Member::start(
                site.path(),
                data.path(),
                &format!("n{i}"),
                seed,
                None,
                ports[i],
                &[],
            )
        })
        .collect();

    // Every node at once: all create the same logical URL, each its own, each creates and
    // deletes another; the even ones delete their copy of the shared URL again.
    let results: Vec<Vec<Row>> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let m = m.client();
                s.spawn(move || {
                    let m = &m;
                    let mut done = Vec::new();
                    let r = m.put("/shared.txt", format!("shared from n{i}").as_bytes());
                    let shared = acked(m, "/shared.txt", &r);
                    let own = format!("/only-{i}.txt");
                    let r = m.put(&own, format!("only n{i}").as_bytes());
                    done.push(acked(m, &own, &r));
                    let temp = format!("/temp-{i}.txt");
                    let r = m.put(&temp, b"temporary");
                    let created = acked(m, &temp, &r);
                    let r = m.delete(&temp);
                    assert_eq!(r.status, 204, "delete {temp} on n{i}");
                    done.push((m.name.clone(), temp, created.2 + 1, true, String::new()));
                    if i % 2 == 0 {
                        assert_eq!(m.delete("/shared.txt").status, 204);
                        done.push((
                            m.name.clone(),
                            "/shared.txt".to_owned(),
                            created.2 + 2,
                            true,
                            String::new(),
                        ));
                    } else {
                        done.push(shared);
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer"))
            .collect()
    });
    let mut expected: BTreeSet<_> = results.into_iter().flatten().collect();
    let (all, took) = converge(&members, &expected);
    eprintln!("five nodes converged {took:?} after the concurrent writes");
    // Exactly what was acknowledged: nothing more, nothing older.
    assert_eq!(all, expected);
    for m in &members {
        let r = get(m.addr, "/_slipstream/resolve?url=/shared.txt");
        let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
        let replicas: Vec<&str> = v["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .map(|u| u.as_str().expect("URL"))
            .collect();
        let want: Vec<String> = [1, 3]
            .iter()
            .map(|&i| format!("http://{}/_slipstream/replicas/shared.txt", members[i].addr))
            .collect();
        let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(replicas, want, "resolve on {}", m.name);
    }

    // n3 crashes. While it is down, others keep writing; the survivors see it dead.
    members[3].crash();
    let r = members[1].put("/while-down.txt", b"written while n3 was down");
    expected.insert(acked(&members[1].client(), "/while-down.txt", &r));
    assert_eq!(members[2].delete("/only-2.txt").status, 204);
    expected.retain(|e| !(e.0 == "n2" && e.1 == "/only-2.txt"));
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    while !members
        .iter()
        .filter(|m| m.node.is_some())
        .all(|m| m.directory()["nodes"]["n3"]["live"] == Value::Bool(false))
    {
        assert!(Instant::now() < deadline, "n3 was never found dead");
        std::thread::yield_now();
    }
    // A dead node's replicas are not offered.
    let r = get(members[0].addr, "/_slipstream/resolve?url=/only-3.txt");
    let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
    assert_eq!(v["replicas"], serde_json::json!([]));

    // n3 comes back on the same addresses and data: its acknowledged writes are all there,
    // and it learns what happened while it was down.
    let (name, gossip, addr) = (members[3].name.clone(), members[3].gossip, members[3].addr);
    let data_root = members[3].data.parent().expect("data root").to_owned();
    members[3] = Member::start(
        site.path(),
        &data_root,
        &name,
        Some(ports[0]),
        Some(addr),
        gossip,
        &[],
    );
    let only3 = get(addr, "/_slipstream/replicas/only-3.txt");
    assert_eq!(only3.status, 200);
    assert_eq!(only3.body, b"only n3");
    let deleted2 = (
        "n2".to_owned(),
        "/only-2.txt".to_owned(),
        0,
        true,
        String::new(),
    );
    let start = Instant::now();
    let all = loop {
        let (all, _) = converge(&members, &expected);
        // The tombstone's version is n2's to choose; that it arrived is what matters.
        if all
            .iter()
            .any(|e| e.0 == deleted2.0 && e.1 == deleted2.1 && e.3)
        {
            break all;
        }
        assert!(
            start.elapsed() < CONVERGENCE_BOUND,
            "n2's delete never spread"
        );
    };
    eprintln!(
        "after n3's restart the cluster converged in {:?}",
        start.elapsed()
    );
    assert!(all.is_superset(&expected));
    // The entries converge from what every node kept of n3; its liveness comes back once its
    // new incarnation's heartbeats have been heard.
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    while members[0].directory()["nodes"]["n3"]["live"] != Value::Bool(true) {
        assert!(Instant::now() < deadline, "n0 never saw n3 alive again");
        std::thread::yield_now();
    }
    let r = get(members[0].addr, "/_slipstream/resolve?url=/only-3.txt");
    let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
    assert_eq!(
        v["replicas"],
        serde_json::json!([format!("http://{addr}/_slipstream/replicas/only-3.txt")])
    );
}

#[test]
fn hostile_gossip_and_api_bodies_change_nothing() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let gossip = free_udp_port();
    let m = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        None,
        gossip,
        &["--set", "cluster.max_replica_bytes=1KiB"],
    );
    let r = m.put("/a.txt", b"a");
    let good = acked(&m.client(), "/a.txt", &r);
    let before = entries(&m.directory());
    assert_eq!(before, BTreeSet::from([good]));

    // The API: every malformed or unauthorised write is refused with a clear 4xx.
    let auth = format!("Bearer {TOKEN}");
    let cases: Vec<Case> = vec![
        (
            "PUT",
            "/_slipstream/replicas/b.txt",
            vec![],
            Some(b"b"),
            401,
            "Bearer",
        ),
        (
            "PUT",
            "/_slipstream/replicas/b.txt",
            vec![("Authorization", "Bearer wrong-token-000000000")],
            Some(b"b"),
            401,
            "token",
        ),
        (
            "PUT",
            "/_slipstream/replicas/a*b",
            vec![("Authorization", &auth)],
            Some(b"x"),
            400,
            "'*'",
        ),
        (
            "PUT",
            "/_slipstream/replicas/img/*",
            vec![("Authorization", &auth)],
            Some(b"{\"physical\": 5}"),
            400,
            "physical",
        ),
        (
            "PUT",
            "/_slipstream/replicas/img/*",
            vec![("Authorization", &auth)],
            Some(b"{\"physical\": \"http://x/no-star\"}"),
            400,
            "'*'",
        ),
        (
            "PUT",
            "/_slipstream/replicas/img/*",
            vec![("Authorization", &auth)],
            Some(b"{\"physical\": \"javascript:alert(1)//*\"}"),
            400,
            "http:// or https://",
        ),
        (
            "PUT",
            "/_slipstream/replicas/img/*",
            vec![("Authorization", &auth)],
            Some(b"{\"physical\": \"data:text/html,x/*\"}"),
            400,
            "http:// or https://",
        ),
        (
            "PUT",
            "/_slipstream/replicas/img/*",
            vec![("Authorization", &auth)],
            Some(b"{\"physical\": \"http://evil.example/img/*\"}"),
            400,
            "replica_hosts",
        ),
        (
            "PUT",
            "/_slipstream/replicas/big.bin",
            vec![("Authorization", &auth)],
            Some(&[0u8; 2048]),
            413,
            "at most 1024 bytes",
        ),
        (
            "POST",
            "/_slipstream/replicas/a.txt",
            vec![("Authorization", &auth)],
            Some(b"again"),
            409,
            "already",
        ),
        (
            "DELETE",
            "/_slipstream/replicas/never.txt",
            vec![("Authorization", &auth)],
            None,
            404,
            "no replica",
        ),
        (
            "PATCH",
            "/_slipstream/replicas/a.txt",
            vec![],
            None,
            405,
            "not allowed",
        ),
        ("GET", "/_slipstream/resolve", vec![], None, 400, "usage"),
        (
            "GET",
            "/_slipstream/resolve?url=ftp://x/a",
            vec![],
            None,
            400,
            "http",
        ),
    ];
    for (method, path, headers, body, status, says) in cases {
        let r = send(m.addr, method, path, &headers, body);
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, status, "{method} {path}: {text}");
        assert!(text.contains(says), "{method} {path}: {text}");
    }

    // Gossip: datagrams that are not chitchat messages, then a real chitchat peer of the same
    // cluster whose replica keys are malformed.
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let target = format!("127.0.0.1:{gossip}");
    for junk in [
        &b""[..],
        b"\x00",
        b"\xff\xff\xff\xff",
        &[7u8; 1400],
        b"syn slipstream",
    ] {
        udp.send_to(junk, &target).expect("send");
    }
    // A member of the cluster (it has the secret and signs with its own key) whose replica
    // values are malformed.
    let bad = [
        ("replica:/a.txt", "99+"),
        ("replica:/a*b", "1-"),
        ("replica:/img/*", "3+http://evil/no-star"),
        ("replica:/b.txt", "007+http://evil/b"),
    ];
    let evil = crate::cluster_auth::Peer::start(
        "evil",
        gossip,
        Some(TOKEN.as_bytes()),
        &slipstream_replica::identity::Identity::ephemeral(),
        &bad,
    );
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    let v = loop {
        let v = m.directory();
        if v["rejected"].as_u64() == Some(4) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "the hostile peer's updates were not all refused: {v:#}"
        );
        std::thread::yield_now();
    };
    assert_eq!(v["nodes"]["evil"]["live"], Value::Bool(true));
    assert_eq!(
        entries(&v),
        before,
        "a refused update changed the directory"
    );
    let r = get(m.addr, "/_slipstream/resolve?url=/a.txt");
    let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
    assert_eq!(
        v["replicas"],
        serde_json::json!([format!("http://{}/_slipstream/replicas/a.txt", m.addr)])
    );
    drop(evil);
}

#[test]
fn get_binds_to_a_live_replica_and_fails_over_past_a_dead_one() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let (g0, g1) = (free_udp_port(), free_udp_port());
    let n0 = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        None,
        g0,
        &[
            "--set",
            "cluster.publish=[\"/*\"]",
            "--set",
            "cluster.replica_hosts=[\"127.0.0.1\"]",
        ],
    );
    // n1 may point at other servers of this machine (the cluster's `replica_hosts`).
    let n1 = Member::start(
        site.path(),
        data.path(),
        "n1",
        Some(g0),
        None,
        g1,
        &["--set", "cluster.replica_hosts=[\"127.0.0.1\"]"],
    );
    // n1 claims a replica of everything at an address where nothing listens: a server that
    // died without its entry being retired.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let r = send(
        n1.addr,
        "PUT",
        "/_slipstream/replicas/*",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        Some(format!("{{\"physical\": \"http://{dead}/*\"}}").as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    loop {
        let r = get(n0.addr, "/_slipstream/resolve?url=/hello.txt");
        let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
        if v["replicas"].as_array().map(Vec::len) == Some(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n0 never heard of n1's replicas: {v}"
        );
        std::thread::yield_now();
    }

    let out = support::bin()
        .args([
            "get",
            &format!("http://{}/hello.txt", n0.addr),
            "--repeat",
            "6",
            "--no-state",
        ])
        .output()
        .expect("run slipstream get");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 replica(s) resolved"), "{stderr}");
    let url = format!("http://{}/hello.txt", n0.addr);
    let rounds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{url}:")))
        .collect();
    assert_eq!(rounds.len(), 6, "{stderr}");
    assert!(rounds.iter().all(|l| l.contains("200 OK")), "{stderr}");
    assert!(
        !rounds
            .iter()
            .any(|l| l.contains(&format!("from http://{dead}"))),
        "the dead replica answered?\n{stderr}"
    );
    // Once failed, the dead replica is not tried again (it waits for its back-off).
    let failovers = rounds.iter().filter(|l| l.contains("failed")).count();
    assert!(failovers <= 1, "{stderr}");
    assert_eq!(out.stdout, b"hello, world\n");
}

#[test]
fn pages_carry_replica_lists_and_follow_the_file_and_the_directory() {
    let site = support::site();
    std::fs::write(
        site.path().join("index.html"),
        "<html><head><title>t</title></head><body><a href=\"hello.txt\">hi</a>\
         <img srcset=\"/large.bin 2x, docs/ 1x\"><a href=\"https://elsewhere.test/x\">x</a></body></html>",
    )
    .expect("write");
    let data = tempfile::tempdir().expect("tempdir");
    let n0 = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        None,
        free_udp_port(),
        &[
            "--set",
            "cluster.publish=[\"/*\"]",
            "--set",
            "serve.revalidate_ms=0",
            "--set",
            "cluster.agent.probe_interval_ms=500",
        ],
    );
    let home = get(n0.addr, "/");
    assert_eq!(home.status, 200);
    let page = String::from_utf8(home.body).expect("utf-8");
    assert!(
        page.starts_with(
            "<html><head><script src=\"/_slipstream/agent/register.js\" defer></script><title>"
        ),
        "{page}"
    );
    // The page's own markup is untouched (JavaScript off still works).
    assert!(page.contains("<a href=\"hello.txt\">hi</a>"));
    // The block is inside the body, not after the document.
    assert!(page.ends_with("</script></body></html>"), "{page}");
    let (b, _) = support::replica_block(&page);
    let base = format!("http://{}", n0.addr);
    // Compact: the node is named once, and its wildcard `/*` by one rule with its index.
    assert_eq!(b["servers"], serde_json::json!([base]), "{page}");
    assert_eq!(b["urls"], serde_json::json!({"/*": [0]}), "{page}");
    assert_eq!(b["v"], 2);
    assert_eq!(b["config"]["probe_interval_ms"], 500.0);
    for url in ["/hello.txt", "/large.bin", "/docs/"] {
        assert_eq!(
            support::block_lookup(&page, url),
            Some(vec![format!("{base}{url}")])
        );
    }
    let etag = home
        .headers
        .iter()
        .find(|(k, _)| k == "etag")
        .map(|(_, v)| v.clone())
        .expect("an ETag");
    assert!(etag.starts_with("W/\"") && etag.contains("-d"), "{etag}");
    assert_eq!(
        home.headers
            .iter()
            .find(|(k, _)| k == "access-control-allow-origin")
            .map(|(_, v)| v.as_str()),
        Some("*")
    );
    // Served again (from the processed-page cache): the same bytes, with their length.
    let again = get(n0.addr, "/");
    assert_eq!(
        again.header("content-length"),
        Some(again.body.len().to_string().as_str())
    );
    assert_eq!(String::from_utf8(again.body).expect("utf-8"), page);
    // HEAD names the same representation.
    let head = support::request(n0.addr, "HEAD", "/", &[]);
    assert_eq!(head.header("etag"), Some(etag.as_str()));
    assert_eq!(
        head.header("content-length"),
        Some(page.len().to_string().as_str()),
        "HEAD names the processed page's length, not the file's"
    );
    assert!(head.body.is_empty());

    // The directory changes: the next page lists the new replica (the node's exact entry
    // speaks for it over its own wildcard).
    let r = n0.put("/hello.txt", b"stored copy");
    assert_eq!(r.status, 201);
    let page = String::from_utf8(get(n0.addr, "/").body).expect("utf-8");
    assert_eq!(
        support::block_lookup(&page, "/hello.txt"),
        Some(vec![format!("{base}/_slipstream/replicas/hello.txt")])
    );
    // The file changes: the next page is made from the new file.
    std::fs::write(
        site.path().join("index.html"),
        "<html><head></head><body><a href=\"/space%20name.txt\">s</a>and more</body></html>",
    )
    .expect("rewrite");
    let page = String::from_utf8(get(n0.addr, "/").body).expect("utf-8");
    assert!(page.contains("and more"), "{page}");
    // The wildcard's rule travels with every pattern more specific than it, named on the
    // page or not, so the agent cannot apply the rule to `/hello.txt`.
    assert_eq!(
        support::block_lookup(&page, "/space%20name.txt"),
        Some(vec![format!("{base}/space%20name.txt")])
    );
    assert_eq!(
        support::block_lookup(&page, "/hello.txt"),
        Some(vec![format!("{base}/_slipstream/replicas/hello.txt")])
    );
    // Not a page: untouched, no block.
    let txt = get(n0.addr, "/hello.txt");
    assert_eq!(txt.body, b"hello, world\n");
}

#[test]
fn placement_copies_a_hot_resource_to_the_least_loaded_peer_and_retires_it_when_cold() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let policy = [
        "--set",
        "cluster.placement.enabled=true",
        "--set",
        "cluster.placement.interval_ms=300",
        "--set",
        "cluster.placement.hot_requests_per_s=20",
        "--set",
        "cluster.placement.cold_requests_per_s=1",
        "--set",
        "cluster.placement.cold_intervals=2",
        "--set",
        "cluster.placement.max_replicas=2",
    ];
    let g0 = free_udp_port();
    let mut with_publish = policy.to_vec();
    with_publish.extend(["--set", "cluster.publish=[\"/*\"]"]);
    let n0 = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        None,
        g0,
        &with_publish,
    );
    let n1 = Member::start(
        site.path(),
        data.path(),
        "n1",
        Some(g0),
        None,
        free_udp_port(),
        &policy,
    );
    let n2 = Member::start(
        site.path(),
        data.path(),
        "n2",
        Some(g0),
        None,
        free_udp_port(),
        &policy,
    );
    let stored_on = |m: &Member| format!("http://{}/_slipstream/replicas/hello.txt", m.addr);
    let replicas = || -> Vec<String> {
        let r = get(n0.addr, "/_slipstream/resolve?url=/hello.txt");
        let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
        v["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .map(|u| u.as_str().expect("URL").to_owned())
            .collect()
    };
    // n1 is busy with something else; n2 is idle. Once n0 has heard both loads, n0 serves
    // /hello.txt hotly.
    let stop = AtomicBool::new(false);
    let copied = std::thread::scope(|s| {
        let hammer = |addr: SocketAddr, path: &'static str| {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(get(addr, path).status, 200);
                }
            });
        };
        hammer(n1.addr, "/docs/");
        let deadline = Instant::now() + CONVERGENCE_BOUND;
        loop {
            let nodes = &n0.directory()["nodes"];
            let (l1, l2) = (nodes["n1"]["load"].as_f64(), nodes["n2"]["load"].as_f64());
            if matches!((l1, l2), (Some(busy), Some(idle)) if busy > idle) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "n0 never heard the loads: {nodes}"
            );
            std::thread::yield_now();
        }
        hammer(n0.addr, "/hello.txt");
        let deadline = Instant::now() + CONVERGENCE_BOUND;
        let found = loop {
            let now = replicas();
            if now.len() > 1 || Instant::now() > deadline {
                break now;
            }
            std::thread::yield_now();
        };
        // The copy is read while the traffic that keeps it goes on: n2 itself sees none of
        // it, so once the directory lists the copy it may be retired within two intervals
        // (and placed again while n0 stays hot); a read after the traffic stops can miss it.
        let deadline = Instant::now() + CONVERGENCE_BOUND;
        let copy = loop {
            let r = get(n2.addr, "/_slipstream/replicas/hello.txt");
            if r.status == 200 || Instant::now() > deadline {
                break r;
            }
            std::thread::yield_now();
        };
        stop.store(true, Ordering::Relaxed);
        (found, copy)
    });
    let (copied, r) = copied;
    let mut want = vec![stored_on(&n2), format!("http://{}/hello.txt", n0.addr)];
    want.sort();
    assert_eq!(
        copied, want,
        "the hot resource goes to the least-loaded peer, n2"
    );
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    // Traffic stops: the copy goes cold and is retired; n0's own replica stays.
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    while replicas() != [format!("http://{}/hello.txt", n0.addr)] {
        assert!(
            Instant::now() < deadline,
            "the cold copy was never retired: {:?}",
            replicas()
        );
        std::thread::yield_now();
    }
    assert!(!replicas().contains(&stored_on(&n1)));
}

#[test]
fn a_proxy_follows_the_directory_for_its_origins_and_fails_over_to_them() {
    let site_a = support::site();
    let site_b = support::site();
    std::fs::write(site_b.path().join("only-b.txt"), b"from b\n").expect("write");
    let data = tempfile::tempdir().expect("tempdir");
    let g0 = free_udp_port();
    let publish = ["--set", "cluster.publish=[\"/*\"]"];
    let mut n0 = Member::start(site_a.path(), data.path(), "n0", None, None, g0, &publish);
    let n1 = Member::start(
        site_b.path(),
        data.path(),
        "n1",
        Some(g0),
        None,
        free_udp_port(),
        &publish,
    );
    // The proxy is told of n0 only; the directory names n1 too.
    let proxy = support::start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--origin",
            &format!("http://{}", n0.addr),
            "--set",
            &format!("proxy.origin_directory=http://{}", n0.addr),
            "--set",
            "proxy.origin_directory_interval_ms=100",
        ],
        "slipstream proxy",
    );
    let both = loop {
        let line = proxy.wait_for_line("origins from the directory:");
        if line.contains(&n1.addr.to_string()) {
            break line;
        }
    };
    assert!(both.contains(&n0.addr.to_string()), "{both}");
    // The agent's files are the site's: the proxy forwards them (a page served through it
    // registers the agent), while its own control endpoints stay its own.
    let sw = get(proxy.addr, "/_slipstream/sw.js");
    assert_eq!(sw.status, 200, "{}", String::from_utf8_lossy(&sw.body));
    assert_eq!(sw.header("service-worker-allowed"), Some("/"));
    let register = get(proxy.addr, "/_slipstream/agent/register.js");
    assert_eq!(register.status, 200);
    assert!(String::from_utf8_lossy(&register.body).contains("serviceWorker"));
    let own = get(proxy.addr, "/_slipstream/nothing-here");
    let own = String::from_utf8_lossy(&own.body);
    assert!(
        own.contains("/_slipstream/purge") && !own.contains("/_slipstream/replicas"),
        "the proxy answers its own control paths: {own}"
    );
    // n0 dies: the proxy goes to n1, which it knows only from the directory.
    n0.crash();
    let r = get(proxy.addr, "/only-b.txt");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.body, b"from b\n");
}

#[test]
fn a_second_member_on_the_same_data_dir_says_so_in_one_line() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let _first = Member::start(
        site.path(),
        data.path(),
        "n0",
        None,
        None,
        free_udp_port(),
        &[],
    );
    let out = support::bin()
        .args([
            "serve",
            site.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args([
            "--set",
            &format!("cluster.data_dir={}", data.path().join("n0").display()),
        ])
        .args(["--set", &format!("cluster.token={TOKEN}")])
        .args([
            "--set",
            &format!("cluster.gossip_listen=127.0.0.1:{}", free_udp_port()),
        ])
        .output()
        .expect("run slipstream serve");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is in use by another process"), "{err}");
    assert!(err.contains("cluster.data_dir"), "{err}");
    assert_eq!(err.matches("in use").count(), 1, "said once: {err}");
}
