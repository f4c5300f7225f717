//! Who may take part in a cluster's gossip: a node without the cluster secret is not heard,
//! a member reusing another's name cannot change that member's entries, and thousands of
//! forged, altered, replayed or oversized datagrams leave every node gossiping with its
//! directory unchanged.

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use chitchat::{ChitchatEnvelope, ChitchatId, ChitchatMessage};
use serde_json::Value;
use slipstream_replica::identity::{Identity, KEY_KEY};
use slipstream_replica::seal::{Sealer, PROTOCOL};

use crate::cluster::{
    converge, entries, free_udp_port, Member, Row, CONVERGENCE_BOUND, GOSSIP_MS, TOKEN,
};
use crate::support::{self, get};

/// A chitchat peer in this process with chosen values, gossiping sealed with a secret (or
/// not at all sealed): a stranger or a member that misbehaves. Stops when dropped.
pub(crate) struct Peer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Peer {
    /// Starts peer `name` joining through the node gossiping on `seed`, with `values` signed
    /// by `key` under its name (and its key published), sealed with `secret` if given.
    pub(crate) fn start(
        name: &str,
        seed: u16,
        secret: Option<&[u8]>,
        key: &Identity,
        values: &[(&str, &str)],
    ) -> Peer {
        let port = free_udp_port();
        let addr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut state: Vec<(String, String)> = values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), key.sign("slipstream", name, k, v)))
            .collect();
        state.push((KEY_KEY.to_owned(), key.public().to_owned()));
        let config = chitchat::ChitchatConfig {
            chitchat_id: ChitchatId::new(name, 1, addr),
            cluster_id: "slipstream".to_owned(),
            gossip_interval: Duration::from_millis(GOSSIP_MS),
            listen_addr: addr,
            seed_nodes: vec![format!("127.0.0.1:{seed}")],
            failure_detector_config: chitchat::FailureDetectorConfig::default(),
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: PROTOCOL,
            max_node_state_bytes: usize::MAX,
        };
        let secret = secret.map(<[u8]>::to_vec);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let _handle = match secret {
                    Some(secret) => {
                        let transport = slipstream_replica::seal::SealedTransport::new(
                            Sealer::new(&secret, "slipstream", 512),
                            Default::default(),
                        );
                        chitchat::spawn_chitchat(config, state, &transport).await
                    }
                    None => {
                        chitchat::spawn_chitchat(config, state, &chitchat::transport::UdpTransport)
                            .await
                    }
                }
                .expect("the peer starts");
                let _ = stopped.await;
            });
        });
        Peer {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The member's count of gossip datagrams dropped, all reasons together.
fn refused(directory: &Value) -> u64 {
    directory["gossip"]["refused"]
        .as_object()
        .expect("gossip counters")
        .values()
        .map(|v| v.as_u64().expect("count"))
        .sum()
}

/// The names a member's directory lists, with whether each is live.
fn nodes(directory: &Value) -> Vec<(String, bool)> {
    directory["nodes"]
        .as_object()
        .expect("nodes")
        .iter()
        .map(|(name, n)| (name.clone(), n["live"] == Value::Bool(true)))
        .collect()
}

/// Waits until `ready` holds for `member`'s directory; fails past the convergence bound.
fn wait_for(member: &Member, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    loop {
        let v = member.directory();
        if ready(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v:#}");
        std::thread::yield_now();
    }
}

fn resolve(member: &Member, url: &str) -> Vec<String> {
    let r = get(member.addr, &format!("/_slipstream/resolve?url={url}"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: Value = serde_json::from_slice(&r.body).expect("resolve JSON");
    serde_json::from_value(v["replicas"].clone()).expect("replica list")
}

#[test]
fn a_node_without_the_cluster_secret_cannot_join_publish_or_be_listed() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let publish = ["--set", "cluster.publish=[\"/*\"]"];
    let (g0, g1, gs) = (free_udp_port(), free_udp_port(), free_udp_port());
    let n0 = Member::start(site.path(), data.path(), "n0", None, None, g0, &publish);
    // A real node with its own token (so its own secret) and the default cluster id, joining
    // through n0 and publishing the whole site at its own address; and a chitchat peer that
    // does not seal at all, publishing the site at an attacker's host.
    let stranger = Member::start(
        site.path(),
        data.path(),
        "stranger",
        Some(g0),
        None,
        gs,
        &[
            "--set",
            "cluster.publish=[\"/*\"]",
            "--set",
            "cluster.token=another-token-0123456789",
        ],
    );
    let _plain = Peer::start(
        "plain",
        g0,
        None,
        &Identity::ephemeral(),
        &[
            ("node:http", "http://evil.example"),
            ("replica:/*", "1+http://evil.example/*"),
        ],
    );
    // Both have tried many times (each gossips every 100 ms) once n0 dropped 20 datagrams.
    wait_for(&n0, "the strangers' gossip was not dropped", |v| {
        v["gossip"]["refused"]["forged"].as_u64() >= Some(20)
    });
    // A member with the secret joins through n0 all the same, and the two converge.
    let n1 = Member::start(site.path(), data.path(), "n1", Some(g0), None, g1, &publish);
    let members = [n0, n1];
    let (rows, _) = converge(&members, &BTreeSet::new());
    let owners: BTreeSet<&str> = rows.iter().map(|r: &Row| r.0.as_str()).collect();
    assert_eq!(owners, BTreeSet::from(["n0", "n1"]));
    for m in &members {
        let v = wait_for(m, "the member does not see its peer", |v| {
            nodes(v).iter().filter(|(_, live)| *live).count() == 2
        });
        let names: Vec<String> = nodes(&v).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["n0", "n1"], "{}", m.name);
        let mut replicas = resolve(m, "/index.html");
        replicas.sort();
        let mut expected: Vec<String> = members
            .iter()
            .map(|m| format!("http://{}/index.html", m.addr))
            .collect();
        expected.sort();
        assert_eq!(replicas, expected, "{}", m.name);
    }
    // Nor does the stranger hear the cluster.
    let v = stranger.directory();
    let names: Vec<String> = nodes(&v).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["stranger"]);
}

#[test]
fn a_member_reusing_a_name_cannot_change_that_members_entries() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let publish = ["--set", "cluster.publish=[\"/*\"]"];
    let (g0, g1, g2) = (free_udp_port(), free_udp_port(), free_udp_port());
    let n0 = Member::start(site.path(), data.path(), "n0", None, None, g0, &publish);
    let n1 = Member::start(site.path(), data.path(), "n1", Some(g0), None, g1, &publish);
    let r = n0.put("/a.txt", b"a");
    assert_eq!(r.status, 201);
    let members = [n0, n1];
    let (before, _) = converge(&members, &BTreeSet::new());
    assert_eq!(before.len(), 3, "{before:#?}");
    let resolved = resolve(&members[1], "/a.txt");
    assert!(
        resolved.contains(&format!(
            "http://{}/_slipstream/replicas/a.txt",
            members[0].addr
        )),
        "{resolved:?}"
    );
    // A process with the cluster secret (the same token) names itself n0, from its own data
    // directory (so its own key), and publishes the site and a.txt at its own address.
    let impostor_data = tempfile::tempdir().expect("tempdir");
    let impostor = Member::start(
        site.path(),
        impostor_data.path(),
        "n0",
        Some(g1),
        None,
        g2,
        &publish,
    );
    let r = impostor.put("/a.txt", b"forged");
    assert_eq!(r.status, 201);
    for m in &members {
        let v = wait_for(m, "the impostor was not refused", |v| {
            v["impostors"].as_u64() >= Some(1)
        });
        assert_eq!(entries(&v), before, "{}: n0's entries changed", m.name);
        for url in ["/a.txt", "/index.html"] {
            let replicas = resolve(m, url);
            assert!(
                replicas
                    .iter()
                    .all(|r| !r.contains(&impostor.addr.to_string())),
                "{}: {url} resolves to the impostor: {replicas:?}",
                m.name
            );
        }
    }
    // The impostor leaves: n0's entries are still there and still resolve.
    drop(impostor);
    let v = members[1].directory();
    assert_eq!(entries(&v), before);
    assert_eq!(resolve(&members[1], "/a.txt"), resolved);
}

/// A sealed chitchat SYN with an empty digest, as a member would send.
fn sealed_syn(sealer: &Sealer, nonce: u8) -> Vec<u8> {
    let mut plain = Vec::new();
    ChitchatEnvelope {
        version: PROTOCOL,
        message: ChitchatMessage::Syn {
            cluster_id: "slipstream".to_owned(),
            digest: Default::default(),
        },
    }
    .serialize(&mut plain);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let mut out = Vec::new();
    sealer.seal(&plain, now, [nonce; 12], &mut out);
    out
}

/// A SYN whose V0 digest lists `nodes` made-up nodes (about 60 bytes each).
fn huge_syn(nodes: u16) -> Vec<u8> {
    let mut m = vec![0x53, 0xb0, PROTOCOL as u8, 0];
    m.extend_from_slice(&nodes.to_le_bytes());
    for i in 0..nodes {
        let name = format!("fake-{i:05}");
        m.extend_from_slice(&(name.len() as u16).to_le_bytes());
        m.extend_from_slice(name.as_bytes());
        m.extend_from_slice(&1u64.to_le_bytes()); // generation
        m.push(4); // IPv4
        m.extend_from_slice(&[127, 0, 0, 1]);
        m.extend_from_slice(&7946u16.to_le_bytes());
        m.extend_from_slice(&[0; 24]); // heartbeat, last gc version, max version
    }
    m
}

#[test]
fn ten_thousand_forged_mutated_or_replayed_datagrams_leave_gossip_and_the_directory_unchanged() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let publish = ["--set", "cluster.publish=[\"/*\"]"];
    let (g0, g1) = (free_udp_port(), free_udp_port());
    let n0 = Member::start(site.path(), data.path(), "n0", None, None, g0, &publish);
    let n1 = Member::start(site.path(), data.path(), "n1", Some(g0), None, g1, &publish);
    let mut members = vec![n0, n1];
    let (before, _) = converge(&members, &BTreeSet::new());

    // Members derive the secret from the token (no `secret` set).
    let sealer = Sealer::new(TOKEN.as_bytes(), "slipstream", 512);
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let target = format!("127.0.0.1:{g0}");
    let valid = sealed_syn(&sealer, 1);
    udp.send_to(&valid, &target).expect("send");
    let huge = huge_syn(1_070);
    assert!(huge.len() > 50_000);
    let mut sealed_huge = Vec::new();
    sealer.seal(&huge, now_ms(), [2; 12], &mut sealed_huge);

    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let start = refused(&members[0].directory());
    let total = 10_000u64;
    let mut sent = 0u64;
    let mut batch = 0u64;
    while sent < total {
        let packet: Vec<u8> = match sent % 6 {
            // Random bytes.
            0 => (0..next() % 1400).map(|_| next() as u8).collect(),
            // A member's datagram with one bit flipped.
            1 => {
                let mut p = valid.clone();
                let bit = next() as usize % (p.len() * 8);
                p[bit / 8] ^= 1 << (bit % 8);
                p
            }
            // The same datagram again.
            2 => valid.clone(),
            // An unsealed chitchat SYN (a stranger), now and then the 65 KB one.
            3 if sent % 1000 == 3 => huge.clone(),
            3 => {
                let mut p = Vec::new();
                ChitchatEnvelope {
                    version: PROTOCOL,
                    message: ChitchatMessage::Syn {
                        cluster_id: "slipstream".to_owned(),
                        digest: Default::default(),
                    },
                }
                .serialize(&mut p);
                p
            }
            // Sealed with the secret but not a message to give chitchat (a member gone bad):
            // a digest of 1,070 nodes, or junk.
            4 if sent % 1000 == 4 => sealed_huge.clone(),
            4 => {
                let junk: Vec<u8> = (0..next() % 200).map(|_| next() as u8).collect();
                let mut p = Vec::new();
                sealer.seal(
                    &junk,
                    now_ms(),
                    (next() as u128).to_be_bytes()[..12].try_into().expect("12"),
                    &mut p,
                );
                p
            }
            // A member's datagram cut short.
            _ => valid[..(next() as usize % valid.len())].to_vec(),
        };
        udp.send_to(&packet, &target).expect("send");
        sent += 1;
        batch += packet.len() as u64;
        // Wait for the node to have read what was sent before its receive buffer could
        // overflow (the kernel would drop the rest unseen; it charges each datagram well
        // above its length).
        if batch > 16 * 1024 || sent.is_multiple_of(32) || sent == total {
            wait_for(&members[0], "the node stopped reading gossip", |v| {
                refused(v) >= start + sent
            });
            batch = 0;
        }
    }
    let v = members[0].directory();
    assert_eq!(refused(&v), start + total, "{:#}", v["gossip"]);
    assert_eq!(entries(&v), before);
    assert_eq!(v["impostors"], 0);
    assert_eq!(v["rejected"], 0);
    // Still gossiping both ways: a write on each member reaches the other.
    let mut expected = before.clone();
    for (i, m) in members.iter().enumerate() {
        let r = m.put(&format!("/after-{i}.txt"), b"x");
        expected.insert(crate::cluster::acked(
            &m.client(),
            &format!("/after-{i}.txt"),
            &r,
        ));
    }
    converge(&members, &expected);
    for m in &mut members {
        let names: Vec<(String, bool)> = nodes(&m.directory());
        assert_eq!(names, [("n0".to_owned(), true), ("n1".to_owned(), true)]);
        m.crash();
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

#[test]
fn a_member_writing_without_end_is_held_to_the_per_node_cap() {
    let site = support::site();
    let data = tempfile::tempdir().expect("tempdir");
    let (g0, g1) = (free_udp_port(), free_udp_port());
    // The honest member takes at most 128 KiB of entries from any node.
    let honest = Member::start(
        site.path(),
        data.path(),
        "honest",
        None,
        None,
        g0,
        &["--set", "cluster.max_node_bytes=128KiB"],
    );
    // A member with the secret that lifted its own cap writes 400 entries of about 3.9 KB
    // (a 1.9 KB URL in its key and in its physical URL): 1.5 MB in all.
    let greedy = Member::start(
        site.path(),
        data.path(),
        "greedy",
        Some(g0),
        None,
        g1,
        &["--set", "cluster.max_node_bytes=64MiB"],
    );
    let pad = "p".repeat(1_900);
    for i in 0..400 {
        let r = greedy.put(&format!("/{i:04}-{pad}"), b"x");
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    let written = entries(&greedy.directory()).len();
    assert_eq!(written, 400);
    // The honest member hears of the greedy one and of some of its entries, then no more: it
    // converges on a part that fits its cap, and still answers.
    let v = wait_for(&honest, "the greedy member's entries never arrived", |v| {
        !entries(v).is_empty()
    });
    assert!(nodes(&v).contains(&("greedy".to_owned(), true)));
    // Once the honest member has merged all the greedy one published (its state version),
    // it holds only what fits its cap, and the greedy member is still live.
    let published = greedy.directory()["state_version"]
        .as_u64()
        .expect("state version");
    let v = wait_for(
        &honest,
        "the greedy member's state was not heard to its end",
        |v| v["nodes"]["greedy"]["state_version"].as_u64() >= Some(published),
    );
    let held = entries(&v).len();
    let bytes: usize = entries(&honest.directory())
        .iter()
        .map(|r| r.1.len() + r.4.len() + 30)
        .sum();
    assert!(held < written, "{held} of {written} entries taken");
    assert!(bytes <= 128 << 10, "{bytes} bytes taken");
    assert!(nodes(&honest.directory()).contains(&("greedy".to_owned(), true)));
}
