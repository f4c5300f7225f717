//! Hostile peers against `slipstream node` processes: a peer that announces tampered and
//! unsigned objects under real GUIDs, and one that sends bytes no node would send. The
//! adversaries are libp2p nodes in the test process (slipstream-coop's own peer layer, and a
//! raw request-response codec on the nodes' fetch protocol); the nodes are real processes.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libp2p::futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, StreamProtocol};
use slipstream_coop::net::{tcp_swarm, FETCH_PROTOCOL};
use slipstream_coop::object::Object;
use slipstream_coop::{EventLoop, Guid, NetConfig, SignedObject, Store};

use crate::coop::{setup, status};
use crate::support::{request, Node};

fn node(args: &[&str]) -> (Node, Multiaddr) {
    let n = crate::coop::node(args);
    let p2p = n.p2p.parse().unwrap();
    (n.node, p2p)
}

/// Fresh for five minutes from now: the adversary's copies are sent to a lookup, which asks
/// peers for fresh copies only.
fn object(url: &str, body: &'static [u8]) -> Object {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    Object {
        url: url.to_owned(),
        status: 200,
        headers: vec![("cache-control".into(), b"max-age=300".to_vec())],
        body: Bytes::from_static(body),
        requested_at_ms: now,
        received_at_ms: now,
        version: 7,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_and_unsigned_objects_are_rejected_every_time() {
    let s = setup(&[("t.txt", "true\n"), ("u.txt", "true\n")], &[]);
    let (origin, provider_id) = (&s.origin, s.provider.clone());
    let key_file = std::path::PathBuf::from(&s.key);
    let provider = slipstream_coop::config::read_keypair(&key_file).unwrap();
    // No cache manager: nothing but the adversary ever holds these URLs.
    let (gateway, boot) = node(&[
        "--provider-key",
        key_file.to_str().unwrap(),
        "--role",
        "gateway",
    ]);
    let (proxy, _) = node(&["--provider", &provider_id, "--bootstrap", &boot.to_string()]);
    let url_t = format!("http://{}/t.txt", origin.addr);
    let url_u = format!("http://{}/u.txt", origin.addr);

    // The adversary: a real peer that holds a correctly signed object whose body it then
    // changed, and one whose signature is missing, each under the GUID a proxy looks up.
    let tampered = {
        let mut o = object(&url_t, b"true\n").sign(&provider).unwrap();
        o.object.body = Bytes::from_static(b"evil\n");
        o
    };
    let unsigned = SignedObject {
        object: object(&url_u, b"evil\n"),
        provider: provider.public(),
        signature: Vec::new(),
        delegation: None,
    };
    let config = NetConfig {
        bootstrap: vec![boot.clone()],
        ..NetConfig::default()
    };
    let swarm = tcp_swarm(libp2p::identity::Keypair::generate_ed25519(), &config).unwrap();
    let store = Arc::new(Store::open(None, 1 << 20, "lru".parse().unwrap()).unwrap());
    let (event_loop, evil) = EventLoop::new(swarm, config, store.clone()).unwrap();
    tokio::spawn(event_loop.run());
    for o in [tampered, unsigned] {
        let guid = o.guid();
        assert_eq!(guid, Guid::new(&provider.public(), &o.object.url));
        store.put(o).unwrap();
        evil.provide(guid).await;
    }

    // Every request is answered with the origin's bytes; every one that met the adversary's
    // copy counted a rejection.
    let p = proxy.addr;
    let get = move |url: String| {
        tokio::task::spawn_blocking(move || {
            let r = request(p, "GET", &url, &[]);
            (r.status, r.body)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (st, body) = get(url_t.clone()).await.unwrap();
        assert_eq!((st, body.as_slice()), (200, &b"true\n"[..]));
        if status(p)["net"]["rejected"].as_u64() >= Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never met the adversary"
        );
    }
    let s0 = status(p);
    let before = s0["net"]["rejected"].as_u64().unwrap();
    let misses = s0["lookups"]["miss"].as_u64().unwrap();
    for i in 0..10 {
        for url in [&url_t, &url_u] {
            let (st, body) = get(url.clone()).await.unwrap();
            assert_eq!(
                (st, body.as_slice()),
                (200, &b"true\n"[..]),
                "request {i} of {url}"
            );
        }
    }
    let s = status(p);
    // At least one rejection a request: the forged copy is met through the DHT, and may be
    // met first through the adversary's Bloom digest.
    assert!(
        s["net"]["rejected"].as_u64().unwrap() - before >= 20,
        "every request met a forged copy and rejected it: {s}"
    );
    assert_eq!(s["lookups"]["miss"].as_u64().unwrap() - misses, 20, "{s}");
    assert_eq!(s["store"]["objects"], 0, "nothing forged was kept");
    drop(gateway);
}

/// request-response over raw bytes: whatever the test writes goes on the wire.
#[derive(Debug, Clone, Default)]
struct Raw;

impl request_response::Codec for Raw {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: libp2p::futures::AsyncRead + Unpin + Send,
    {
        let mut v = Vec::new();
        io.take(1 << 20).read_to_end(&mut v).await?;
        Ok(v)
    }

    fn read_response<T>(
        &mut self,
        p: &StreamProtocol,
        io: &mut T,
    ) -> impl std::future::Future<Output = io::Result<Vec<u8>>> + Send
    where
        T: libp2p::futures::AsyncRead + Unpin + Send,
    {
        self.read_request(p, io)
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()>
    where
        T: libp2p::futures::AsyncWrite + Unpin + Send,
    {
        io.write_all(&req).await?;
        io.close().await
    }

    fn write_response<T>(
        &mut self,
        p: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> impl std::future::Future<Output = io::Result<()>> + Send
    where
        T: libp2p::futures::AsyncWrite + Unpin + Send,
    {
        self.write_request(p, io, res)
    }
}

/// CBOR (RFC 8949) of a one-entry map `{variant: byte string}`, the form serde gives an enum
/// variant holding bytes.
fn cbor_variant(variant: &str, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![0xa1, 0x60 + variant.len() as u8];
    v.extend_from_slice(variant.as_bytes());
    if bytes.len() < 24 {
        v.push(0x40 + bytes.len() as u8);
    } else {
        v.push(0x59);
        v.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    }
    v.extend_from_slice(bytes);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_peer_messages_change_nothing_and_stop_nothing() {
    let s = setup(&[("a.txt", "aaa\n")], &[]);
    let origin = &s.origin;
    let key_file = std::path::PathBuf::from(&s.key);
    let (target, addr) = node(&[
        "--provider-key",
        key_file.to_str().unwrap(),
        "--role",
        "gateway",
        "--role",
        "manager",
    ]);
    let url = format!("http://{}/a.txt", origin.addr);
    let t = target.addr;
    let fetch = {
        let url = url.clone();
        move || {
            let url = url.clone();
            tokio::task::spawn_blocking(move || request(t, "GET", &url, &[]))
        }
    };
    assert_eq!(fetch().await.unwrap().status, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(t)["store"]["objects"] != 1 {
        assert!(Instant::now() < deadline, "no replica");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = status(t);

    // A peer speaking the nodes' fetch protocol with bytes of its own.
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default(),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                Raw,
                [(FETCH_PROTOCOL, ProtocolSupport::Outbound)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(5)),
            )
        })
        .unwrap()
        .build();
    let libp2p::multiaddr::Protocol::P2p(peer) = addr.iter().last().unwrap() else {
        panic!("{addr} has no peer id");
    };
    swarm.dial(addr.clone()).unwrap();
    let garbage: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\xff\xff\xff\xff not CBOR at all".to_vec(),
        vec![0xbf; 4096], // unterminated maps, nested
        vec![0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // a 2^64-byte string
        cbor_variant("Launch", b"missiles"), // no such request
        cbor_variant("Fetch", b"short"), // a GUID of 5 bytes
        cbor_variant("Replicate", &[0u8; 31]), // and of 31
        cbor_variant("Digest", &[0xab; 300]), // not a digest
        cbor_variant("Digest", &[]),
    ];
    let sent = garbage.len();
    for g in garbage {
        swarm.behaviour_mut().send_request(&peer, g);
    }
    // Every request ends: answered (refused) or dropped by the node.
    let mut ended = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while ended < sent {
        let event = tokio::time::timeout_at(deadline, swarm.select_next_some())
            .await
            .expect("the node neither answered nor dropped every request");
        match event {
            SwarmEvent::Behaviour(request_response::Event::Message {
                message: request_response::Message::Response { .. },
                ..
            })
            | SwarmEvent::Behaviour(request_response::Event::OutboundFailure { .. }) => ended += 1,
            _ => {}
        }
    }

    // The node still answers, from the replica it held, and holds nothing else.
    let r = fetch().await.unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"aaa\n"[..]));
    assert!(r.header("cache-status").unwrap_or_default().contains("hit"));
    let after = status(t);
    assert_eq!(after["objects"], before["objects"]);
    assert_eq!(after["peer_id"], before["peer_id"]);
    assert!(
        after["net"]["malformed"].as_u64() > before["net"]["malformed"].as_u64(),
        "the decodable but invalid ones are counted: {after}"
    );
    assert!(target_alive(&target));
}

fn target_alive(n: &Node) -> bool {
    request(n.addr, "GET", "/_slipstream/coop", &[]).status == 200
}
