//! The peer layer in-process, on libp2p's memory transport: several nodes in one test, each
//! with its own swarm and event loop. The real processes (`slipstream node`) are tested from
//! the `slipstream` crate.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::eventually;
use libp2p::identity::Keypair;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, Swarm};
use libp2p_swarm_test::SwarmExt as _;
use slipstream_coop::net::{CoopRequest, CoopResponse, FETCH_PROTOCOL};
use slipstream_coop::{
    Client, CoopBehaviour, EventLoop, FetchError, Guid, NetConfig, Object, Put, SignedObject,
    Store, VerifyError,
};

/// A response fresh for an hour from now (a lookup fetches only fresh copies from peers).
fn object(url: &str, body: &str, version: u64) -> Object {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    Object {
        url: url.to_owned(),
        status: 200,
        headers: vec![
            ("content-type".into(), b"text/plain".to_vec()),
            ("cache-control".into(), b"max-age=3600".to_vec()),
        ],
        body: Bytes::copy_from_slice(body.as_bytes()),
        requested_at_ms: now,
        received_at_ms: now,
        version,
    }
}

struct Node {
    client: Client,
    addr: Multiaddr,
}

async fn node_with(provider: &Keypair, store: Store, bootstrap: Vec<Multiaddr>) -> Node {
    let config = NetConfig {
        listen: vec!["/memory/0".parse().unwrap()],
        bootstrap,
        trusted: vec![provider.public()],
        ping_interval: Duration::from_millis(200),
        digest_every: Duration::from_millis(200),
        ..NetConfig::default()
    };
    let behaviour_config = config.clone();
    let swarm = Swarm::new_ephemeral_tokio(move |key| {
        CoopBehaviour::new(&key, &behaviour_config).expect("behaviour")
    });
    let (event_loop, client) = EventLoop::new(swarm, config, Arc::new(store)).expect("event loop");
    tokio::spawn(event_loop.run());
    let addr = eventually("a listen address", || async {
        client.addresses().await.into_iter().next()
    })
    .await;
    Node { client, addr }
}

async fn node(provider: &Keypair, bootstrap: Vec<Multiaddr>) -> Node {
    node_with(provider, memory_store(), bootstrap).await
}

fn memory_store() -> Store {
    Store::open(None, 1 << 20, "lru".parse().unwrap()).unwrap()
}

/// A ring of `n` nodes, each bootstrapped from the first.
async fn ring(provider: &Keypair, n: usize) -> Vec<Node> {
    let first = node(provider, Vec::new()).await;
    let seed = first.addr.clone();
    let mut nodes = vec![first];
    for _ in 1..n {
        nodes.push(node(provider, vec![seed.clone()]).await);
    }
    nodes
}

/// A bare swarm speaking our fetch protocol with request type `Req`, connected to `target`.
async fn rogue<Req, Resp>(
    target: &Multiaddr,
    target_id: PeerId,
) -> Swarm<request_response::cbor::Behaviour<Req, Resp>>
where
    Req: serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + Send + Clone + 'static,
    Resp: serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + Send + Clone + 'static,
{
    let mut swarm = Swarm::new_ephemeral_tokio(|_| {
        request_response::cbor::Behaviour::<Req, Resp>::new(
            [(FETCH_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default(),
        )
    });
    swarm.dial(target.clone()).unwrap();
    loop {
        if let SwarmEvent::ConnectionEstablished { peer_id, .. } = swarm.next_swarm_event().await {
            if peer_id == target_id {
                return swarm;
            }
        }
    }
}

async fn providers_of(client: &Client, guid: Guid, who: PeerId) -> Vec<PeerId> {
    eventually("the provider found", || async {
        let found = client.find_providers(guid, 1, Duration::from_secs(5)).await;
        found.contains(&who).then_some(found)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_held_by_one_node_is_found_and_fetched_by_another() {
    let provider = Keypair::generate_ed25519();
    let nodes = ring(&provider, 4).await;
    let signed = object("http://site.test/a", "hello", 1)
        .sign(&provider)
        .unwrap();
    let guid = signed.guid();
    assert_eq!(nodes[1].client.hold(signed.clone()).await, Ok(Put::Stored));

    let holder = nodes[1].client.peer_id();
    let found = providers_of(&nodes[3].client, guid, holder).await;
    assert!(!found.contains(&nodes[3].client.peer_id()), "never itself");
    let fetched = nodes[3].client.fetch(holder, guid).await.unwrap();
    assert_eq!(fetched, signed);
    assert_eq!(nodes[1].client.stats().served.load(Ordering::Relaxed), 1);

    // A node that does not hold it says so.
    nodes[3].client.dial(nodes[2].addr.clone()).await.unwrap();
    let other = nodes[2].client.peer_id();
    assert_eq!(
        nodes[3].client.fetch(other, guid).await,
        Err(FetchError::Miss)
    );
    // Nobody provides an unknown object; the lookup ends instead of hanging.
    let unknown = Guid::new(&provider.public(), "http://site.test/nothing");
    assert!(nodes[3]
        .client
        .find_providers(unknown, 1, Duration::from_secs(10))
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_unsigned_and_untrusted_objects_are_rejected_every_time() {
    let provider = Keypair::generate_ed25519();
    let nodes = ring(&provider, 2).await;
    let (evil, honest) = (&nodes[0], &nodes[1]);
    let signed = object("http://site.test/a", "hello", 1)
        .sign(&provider)
        .unwrap();
    let guid = signed.guid();

    // The evil node's store is written directly, past `hold`'s verification.
    let mut tampered = signed.clone();
    tampered.object.body = Bytes::from_static(b"HELLO");
    assert_eq!(evil.client.store().put(tampered).unwrap(), Put::Stored);
    let evil_id = evil.client.peer_id();
    for _ in 0..3 {
        assert_eq!(
            honest.client.fetch(evil_id, guid).await,
            Err(FetchError::Rejected(VerifyError::BadSignature))
        );
    }

    let mut unsigned = object("http://site.test/b", "b", 1)
        .sign(&provider)
        .unwrap();
    unsigned.signature = Vec::new();
    let unsigned_guid = unsigned.guid();
    evil.client.store().put(unsigned).unwrap();
    assert_eq!(
        honest.client.fetch(evil_id, unsigned_guid).await,
        Err(FetchError::Rejected(VerifyError::BadSignature))
    );

    // Signed by a key the honest node does not trust; asked for by that key's GUID.
    let stranger = Keypair::generate_ed25519();
    let foreign = object("http://site.test/c", "c", 1)
        .sign(&stranger)
        .unwrap();
    let foreign_guid = foreign.guid();
    evil.client.store().put(foreign.clone()).unwrap();
    assert!(matches!(
        honest.client.fetch(evil_id, foreign_guid).await,
        Err(FetchError::Rejected(VerifyError::Untrusted(_)))
    ));
    // Nor will `hold` take it.
    assert!(honest.client.hold(foreign).await.is_err());
    assert_eq!(honest.client.stats().rejected.load(Ordering::Relaxed), 5);
    assert_eq!(honest.client.store().stats().objects, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_peer_message_changes_nothing_and_stops_nothing() {
    let provider = Keypair::generate_ed25519();
    let target = node(&provider, Vec::new()).await;
    let signed = object("http://site.test/a", "hello", 1)
        .sign(&provider)
        .unwrap();
    target.client.hold(signed.clone()).await.unwrap();

    // A rogue peer speaks our fetch protocol with messages of another shape.
    let target_id = target.client.peer_id();
    let mut liar = rogue::<String, String>(&target.addr, target_id).await;
    liar.behaviour_mut()
        .send_request(&target_id, "not a request".to_owned());
    // The rogue's request fails (the node could not read it and answered nothing).
    loop {
        match liar.next_swarm_event().await {
            SwarmEvent::Behaviour(request_response::Event::OutboundFailure { .. }) => break,
            SwarmEvent::Behaviour(request_response::Event::Message { .. }) => {
                panic!("the node answered a malformed request")
            }
            _ => {}
        }
    }
    // (libp2p drops a stream that does not decode without telling the behaviour, so there is
    // nothing to count; what matters is what follows.)
    // A well-formed request with a GUID of the wrong length is refused with the reason.
    let mut asker = rogue::<CoopRequest, CoopResponse>(&target.addr, target_id).await;
    asker
        .behaviour_mut()
        .send_request(&target_id, CoopRequest::Fetch(vec![1, 2, 3]));
    let answer = loop {
        if let SwarmEvent::Behaviour(request_response::Event::Message {
            message: request_response::Message::Response { response, .. },
            ..
        }) = asker.next_swarm_event().await
        {
            break response;
        }
    };
    assert!(
        matches!(&answer, CoopResponse::Refused(why) if why.contains("32 bytes")),
        "{answer:?}"
    );
    assert_eq!(target.client.stats().malformed.load(Ordering::Relaxed), 1);
    let asker = node(&provider, vec![target.addr.clone()]).await;
    // And the node still serves, with its store intact.
    assert_eq!(
        asker.client.fetch(target_id, signed.guid()).await,
        Ok(signed)
    );
    assert_eq!(target.client.store().stats().objects, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_update_reaches_every_replica_and_a_forged_one_none() {
    let provider = Keypair::generate_ed25519();
    let nodes = ring(&provider, 4).await;
    let url = "http://site.test/news";
    let v1 = object(url, "old", 1).sign(&provider).unwrap();
    let guid = v1.guid();
    for n in &nodes[1..] {
        n.client.hold(v1.clone()).await.unwrap();
    }
    // The gateway (node 0) pushes version 2, again until every replica has it: a replica
    // whose subscription the gateway has not heard of yet misses a push, as it would miss one
    // of a monitor's periodic pushes.
    let v2 = object(url, "new", 2).sign(&provider).unwrap();
    eventually("every replica updated", || async {
        let _ = nodes[0].client.push(&v2).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[1..]
            .iter()
            .all(|n| n.client.store().version(&guid) == Some(2))
            .then_some(())
    })
    .await;
    for n in &nodes[1..] {
        assert_eq!(*n.client.store().get(&guid).unwrap(), v2);
    }

    // A forged version 3 (tampered body) is dropped by every replica.
    let mut forged = object(url, "forged", 3).sign(&provider).unwrap();
    forged.object.body = Bytes::from_static(b"evil");
    eventually("the forged update dropped everywhere", || async {
        let _ = nodes[0].client.push(&forged).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[1..]
            .iter()
            .all(|n| n.client.stats().updates_rejected.load(Ordering::Relaxed) >= 1)
            .then_some(())
    })
    .await;
    for n in &nodes[1..] {
        assert_eq!(n.client.store().version(&guid), Some(2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_announcements_all_arrive_and_a_restarted_node_announces_again() {
    let provider = Keypair::generate_ed25519();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.redb");
    let seed = node(&provider, Vec::new()).await;
    let objects: Vec<SignedObject> = (0..300)
        .map(|i| {
            object(&format!("http://site.test/{i}"), "x", 1)
                .sign(&provider)
                .unwrap()
        })
        .collect();
    {
        let store = Store::open(Some(&path), 1 << 20, "lru".parse().unwrap()).unwrap();
        for o in &objects {
            store.put(o.clone()).unwrap();
        }
    }
    // A node started on that store announces all 300 (the backlog keeps at most 16 in flight).
    let store = Store::open(Some(&path), 1 << 20, "lru".parse().unwrap()).unwrap();
    assert_eq!(store.stats().restored, 300);
    let holder = node_with(&provider, store, vec![seed.addr.clone()]).await;
    let asker = node(&provider, vec![seed.addr.clone()]).await;
    let who = holder.client.peer_id();
    for o in objects.iter().step_by(30) {
        providers_of(&asker.client, o.guid(), who).await;
    }
    let last = objects.last().unwrap();
    providers_of(&asker.client, last.guid(), who).await;
    assert_eq!(
        asker.client.fetch(who, last.guid()).await.as_ref(),
        Ok(last)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbours_digests_say_who_holds_what_and_bad_digests_are_refused() {
    let provider = Keypair::generate_ed25519();
    let nodes = ring(&provider, 3).await;
    let signed = object("http://site.test/near", "x", 1)
        .sign(&provider)
        .unwrap();
    let guid = signed.guid();
    nodes[1].client.hold(signed).await.unwrap();
    let holder = nodes[1].client.peer_id();
    nodes[2].client.dial(nodes[1].addr.clone()).await.unwrap();
    let near = eventually("the holder's digest arrived", || async {
        let n = nodes[2].client.nearby(guid).await;
        n.contains(&(holder, 0)).then_some(n)
    })
    .await;
    assert_eq!(near[0], (holder, 0), "{near:?}");
    // The proxy's lookup takes the fast path: the neighbour, no DHT walk.
    let found = slipstream_coop::roles::lookup(
        &nodes[2].client,
        &[provider.public()],
        "http://site.test/near",
        Duration::from_secs(5),
    )
    .await
    .expect("found");
    assert_eq!(found.via, slipstream_coop::roles::Via::Nearby);
    assert_eq!(found.from, Some(holder));
    // Nobody holds this one: no neighbour claims it (at this filter size, certainly).
    let absent = Guid::new(&provider.public(), "http://site.test/absent");
    assert!(nodes[2].client.nearby(absent).await.is_empty());

    // A digest that does not decode is refused, counted, and changes nothing.
    let target = nodes[1].client.peer_id();
    let mut liar = rogue::<CoopRequest, CoopResponse>(&nodes[1].addr, target).await;
    liar.behaviour_mut()
        .send_request(&target, CoopRequest::Digest(b"SSAB garbage".to_vec()));
    let answer = loop {
        if let SwarmEvent::Behaviour(request_response::Event::Message {
            message: request_response::Message::Response { response, .. },
            ..
        }) = liar.next_swarm_event().await
        {
            break response;
        }
    };
    assert!(matches!(answer, CoopResponse::Refused(_)), "{answer:?}");
    assert!(nodes[1].client.stats().malformed.load(Ordering::Relaxed) >= 1);
    assert!(nodes[2].client.nearby(guid).await.contains(&(holder, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_freshness_record_renews_replicas_without_a_body_and_a_forged_one_nothing() {
    let provider = Keypair::generate_ed25519();
    let nodes = ring(&provider, 3).await;
    let url = "http://site.test/page";
    let body = "the same body, 4 KiB of it. ".repeat(150);
    let held = object(url, &body, 1).sign(&provider).unwrap();
    let guid = held.guid();
    for n in &nodes[1..] {
        n.client.hold(held.clone()).await.unwrap();
    }
    // The gateway revalidated it: the same body, a later exchange. Only the record travels.
    let mut renewed = held.object.clone();
    renewed.requested_at_ms += 5_000;
    renewed.received_at_ms += 5_000;
    let renewed = renewed.sign(&provider).unwrap();
    let record = renewed.freshness();
    assert!(record.encode().len() < 400, "{}", record.encode().len());
    eventually("every replica renewed", || async {
        let _ = nodes[0].client.push_record(&record).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[1..]
            .iter()
            .all(|n| {
                n.client
                    .store()
                    .get(&guid)
                    .is_some_and(|o| o.object.received_at_ms == renewed.object.received_at_ms)
            })
            .then_some(())
    })
    .await;
    for n in &nodes[1..] {
        assert_eq!(*n.client.store().get(&guid).unwrap(), renewed);
        assert!(n.client.stats().records_applied.load(Ordering::Relaxed) >= 1);
    }

    // A forged record (a far later expiry under the same signature) renews nothing.
    let mut forged = renewed.freshness();
    forged.head.received_at_ms += 3_600_000;
    eventually("the forged record dropped everywhere", || async {
        let _ = nodes[0].client.push_record(&forged).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[1..]
            .iter()
            .all(|n| n.client.stats().updates_rejected.load(Ordering::Relaxed) >= 1)
            .then_some(())
    })
    .await;
    for n in &nodes[1..] {
        assert_eq!(*n.client.store().get(&guid).unwrap(), renewed);
    }

    // A record of another provider's (its own key, its own object's GUID): not trusted here,
    // dropped by every replica, which keeps what it holds.
    let stranger = Keypair::generate_ed25519();
    let theirs = object(url, &body, 1).sign(&stranger).unwrap().freshness();
    let before: Vec<u64> = nodes[1..]
        .iter()
        .map(|n| n.client.stats().updates_rejected.load(Ordering::Relaxed))
        .collect();
    eventually("another provider's record dropped everywhere", || async {
        let _ = nodes[0].client.push_record(&theirs).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[1..]
            .iter()
            .zip(&before)
            .all(|(n, b)| n.client.stats().updates_rejected.load(Ordering::Relaxed) > *b)
            .then_some(())
    })
    .await;
    for n in &nodes[1..] {
        assert_eq!(*n.client.store().get(&guid).unwrap(), renewed);
    }
}
