//! The roles in-process: an origin on loopback (hyper), and gateway, cache manager and plain
//! (browser proxy) nodes on libp2p's memory transport.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::eventually;
use http_body_util::Full;
use libp2p::identity::Keypair;
use libp2p::{Multiaddr, Swarm};
use libp2p_swarm_test::SwarmExt as _;
use slipstream_coop::gateway::{service_guid, Gateway};
use slipstream_coop::roles::{self, Manager};
use slipstream_coop::{Client, CoopBehaviour, EventLoop, FetchError, NetConfig, Store};
use slipstream_node::access::Access;

/// An origin: `/page` cacheable for a minute (its body from `body`), `/private` private.
async fn origin(body: Arc<parking_lot::Mutex<&'static str>>) -> std::net::SocketAddr {
    origin_counting(body, Arc::default()).await
}

/// [`origin`], counting the requests it answers in `hits`.
async fn origin_counting(
    body: Arc<parking_lot::Mutex<&'static str>>,
    hits: Arc<std::sync::atomic::AtomicUsize>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (body, hits) = (body.clone(), hits.clone());
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        async move {
                            let res = match req.uri().path() {
                                "/page" => http::Response::builder()
                                    .header("cache-control", "max-age=60")
                                    .header("content-type", "text/html")
                                    .body(Full::new(Bytes::from(*body.lock()))),
                                "/private" => http::Response::builder()
                                    .header("cache-control", "private")
                                    .body(Full::new(Bytes::from_static(b"mine"))),
                                _ => http::Response::builder()
                                    .status(404)
                                    .body(Full::new(Bytes::new())),
                            };
                            Ok::<_, Infallible>(res.unwrap())
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Node {
    client: Client,
    addr: Multiaddr,
}

/// Destination rules that let a gateway reach the test origins on loopback.
fn loopback_origins() -> Arc<Access> {
    let mut a = closed();
    a.destinations = vec!["127.0.0.0/8".parse().unwrap()];
    Arc::new(a)
}

/// The default destination rules: nothing internal.
fn closed() -> Access {
    Access {
        clients: Vec::new(),
        destinations: Vec::new(),
        listener: "127.0.0.1:0".parse().unwrap(),
        own: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_refuses_to_fetch_an_internal_or_its_own_address_and_connects_nothing() {
    let provider = Keypair::generate_ed25519();
    let gateway = node(&provider, Vec::new(), Role::Plain).await;
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let origin = origin_counting(Arc::new(parking_lot::Mutex::new("x")), hits.clone()).await;
    let url = format!("http://{origin}/page");
    // By default a loopback origin is refused.
    let g = Gateway::new(gateway.client.clone(), provider.clone(), Arc::new(closed()));
    let e = g.insert(&url).await.expect_err("refused");
    assert!(e.contains("allow_destinations"), "{e}");
    // Allowed, but the origin's port is one of the node's own listeners: refused as well.
    let mut own = closed();
    own.destinations = vec!["127.0.0.0/8".parse().unwrap()];
    own.own = vec![std::net::SocketAddr::new(
        [0, 0, 0, 0].into(),
        origin.port(),
    )];
    let g = Gateway::new(gateway.client.clone(), provider.clone(), Arc::new(own));
    let e = g.insert(&url).await.expect_err("refused");
    assert!(e.contains("own listener"), "{e}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 0);
    // Allowed: fetched.
    let g = Gateway::new(gateway.client.clone(), provider.clone(), loopback_origins());
    g.insert(&url).await.expect("fetched");
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// No role task: refuses role requests.
    Plain,
    /// A role task with no role: makes replicas when asked.
    Cache,
    Gateway,
    Manager,
}

async fn node(provider: &Keypair, bootstrap: Vec<Multiaddr>, role: Role) -> Node {
    let config = NetConfig {
        listen: vec!["/memory/0".parse().unwrap()],
        bootstrap,
        trusted: vec![provider.public()],
        ..NetConfig::default()
    };
    let c = config.clone();
    let swarm = Swarm::new_ephemeral_tokio(move |key| CoopBehaviour::new(&key, &c).unwrap());
    let store = Store::open(None, 1 << 20, "lru".parse().unwrap()).unwrap();
    let (mut event_loop, client) = EventLoop::new(swarm, config, Arc::new(store)).unwrap();
    // The queue a `slipstream node` has (node.rs): a flood of 20 hints arriving in one burst
    // must not find it full before the role task has started taking from it.
    let queue = (role != Role::Plain).then(|| event_loop.accept_role_requests(64));
    tokio::spawn(event_loop.run());
    if let Some(queue) = queue {
        let (mut gateway, mut manager) = (None, None);
        if role == Role::Gateway {
            let g = Gateway::new(client.clone(), provider.clone(), loopback_origins());
            g.announce().await;
            gateway = Some(g);
        } else if role == Role::Manager {
            let m = Manager::new(client.clone(), provider.public(), Duration::from_secs(5));
            m.announce().await;
            manager = Some(m);
        }
        tokio::spawn(roles::serve(client.clone(), gateway, manager, queue));
    }
    let addr = eventually("a listen address", || async {
        client.addresses().await.into_iter().next()
    })
    .await;
    Node { client, addr }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_hint_becomes_a_signed_replica_anyone_can_fetch() {
    let provider = Keypair::generate_ed25519();
    let body = Arc::new(parking_lot::Mutex::new("version one"));
    let origin = origin(body.clone()).await;
    let gateway = node(&provider, Vec::new(), Role::Gateway).await;
    let plain = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;
    let asker = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;

    // The asker finds a gateway by the service GUID, with no configuration naming it.
    let service = service_guid(&provider.public());
    let found = eventually("a gateway found", || async {
        let g = asker
            .client
            .find_providers(service, 1, Duration::from_secs(5))
            .await;
        g.first().copied()
    })
    .await;
    assert_eq!(found, gateway.client.peer_id());

    let url = format!("http://{origin}/page");
    let guid = asker.client.insert_via(found, &url).await.unwrap();
    let providers = eventually("the replica announced", || async {
        let p = asker
            .client
            .find_providers(guid, 1, Duration::from_secs(5))
            .await;
        (!p.is_empty()).then_some(p)
    })
    .await;
    let object = asker.client.fetch(providers[0], guid).await.unwrap();
    assert_eq!(object.object.body, Bytes::from_static(b"version one"));
    assert_eq!(object.object.header("cache-control"), Some("max-age=60"));
    assert_eq!(object.object.version, 1);

    // Inserting it again unchanged makes no new version; a changed origin makes version 2.
    asker.client.insert_via(found, &url).await.unwrap();
    assert_eq!(gateway.client.store().version(&guid), Some(1));
    *body.lock() = "version two";
    asker.client.insert_via(found, &url).await.unwrap();
    assert_eq!(gateway.client.store().version(&guid), Some(2));

    // What may not be shared, cannot be fetched, or is not a URL is refused with the reason.
    let private = asker
        .client
        .insert_via(found, &format!("http://{origin}/private"))
        .await;
    assert!(
        matches!(&private, Err(FetchError::Refused(why)) if why.contains("RFC 9111")),
        "{private:?}"
    );
    let down = asker
        .client
        .insert_via(found, "http://127.0.0.1:9/page")
        .await;
    assert!(
        matches!(&down, Err(FetchError::Refused(why)) if why.contains("cannot fetch")),
        "{down:?}"
    );
    let bad = asker.client.insert_via(found, "ftp://x/y").await;
    assert!(matches!(bad, Err(FetchError::Refused(_))), "{bad:?}");
    assert_eq!(gateway.client.store().stats().objects, 1);

    // A node without roles says so.
    asker.client.dial(plain.addr.clone()).await.unwrap();
    let refused = asker.client.insert_via(plain.client.peer_id(), &url).await;
    assert_eq!(
        refused,
        Err(FetchError::Refused("this node has no roles".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_hint_to_a_discovered_manager_makes_a_replica_the_proxy_then_finds() {
    let provider = Keypair::generate_ed25519();
    let origin = origin(Arc::new(parking_lot::Mutex::new("hello"))).await;
    let gateway = node(&provider, Vec::new(), Role::Gateway).await;
    let proxy = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;
    let url = format!("http://{origin}/page");
    let trusted = [provider.public()];
    let budget = Duration::from_secs(3);

    // Nothing in the cache yet: a miss, and no manager to tell.
    assert!(roles::lookup(&proxy.client, &trusted, &url, budget)
        .await
        .is_none());
    assert!(
        roles::hint_miss(&proxy.client, &provider.public(), &url, budget)
            .await
            .is_err()
    );

    // A manager joins; the proxy's configuration does not change.
    let manager = node(&provider, vec![gateway.addr.clone()], Role::Manager).await;
    let (used, guid) = eventually("the new manager used", || async {
        roles::hint_miss(&proxy.client, &provider.public(), &url, budget)
            .await
            .ok()
    })
    .await;
    assert_eq!(used, manager.client.peer_id());
    // The manager holds a replica (inserted by the gateway, copied from it).
    assert!(manager.client.store().contains(&guid));
    assert!(gateway.client.store().contains(&guid));

    let found = eventually("the replica found", || async {
        roles::lookup(&proxy.client, &trusted, &url, budget).await
    })
    .await;
    assert_eq!(found.object.object.body, Bytes::from_static(b"hello"));
    let from = found.from.expect("from a peer");
    assert!(from == manager.client.peer_id() || from == gateway.client.peer_id());

    // A gateway asked for a miss hint, or a manager for an insert, refuses.
    let wrong = proxy.client.hint_miss(gateway.client.peer_id(), &url).await;
    assert_eq!(
        wrong,
        Err(FetchError::Refused("not a cache manager".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_pushes_an_origin_update_to_every_replica_within_about_a_period() {
    let provider = Keypair::generate_ed25519();
    let body = Arc::new(parking_lot::Mutex::new("before"));
    let origin = origin(body.clone()).await;
    let gateway = node(&provider, Vec::new(), Role::Gateway).await;
    let replicas = [
        node(&provider, vec![gateway.addr.clone()], Role::Manager).await,
        node(&provider, vec![gateway.addr.clone()], Role::Manager).await,
    ];
    let url = format!("http://{origin}/page");
    // A proxy's miss hints make a replica on each manager (version 1).
    let proxy = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;
    let mut guid = None;
    for r in &replicas {
        proxy.client.dial(r.addr.clone()).await.unwrap();
        let m = r.client.peer_id();
        guid = Some(
            eventually("a replica made", || async {
                proxy.client.hint_miss(m, &url).await.ok()
            })
            .await,
        );
    }
    let guid = guid.unwrap();
    for r in &replicas {
        assert_eq!(r.client.store().version(&guid), Some(1));
    }

    let period = Duration::from_secs(2);
    let monitor = Gateway::new(gateway.client.clone(), provider.clone(), loopback_origins());
    let task = tokio::spawn(monitor.monitor(url.clone(), period));
    *body.lock() = "after";
    let changed = Instant::now();
    eventually("every replica updated", || async {
        replicas
            .iter()
            .all(|r| r.client.store().version(&guid) == Some(2))
            .then_some(())
    })
    .await;
    let took = changed.elapsed();
    // One period to notice, plus delivery; a slow machine gets a second period of slack.
    assert!(took < period * 2, "the update took {took:?}");
    for r in &replicas {
        assert_eq!(
            r.client.store().get(&guid).unwrap().object.body,
            Bytes::from_static(b"after")
        );
    }
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_spreads_a_hot_object_over_the_nearest_caches() {
    let provider = Keypair::generate_ed25519();
    let origin = origin(Arc::new(parking_lot::Mutex::new("hot"))).await;
    let gateway = node(&provider, Vec::new(), Role::Gateway).await;
    let manager_node = node(&provider, vec![gateway.addr.clone()], Role::Manager).await;
    let caches = [
        node(&provider, vec![gateway.addr.clone()], Role::Cache).await,
        node(&provider, vec![gateway.addr.clone()], Role::Cache).await,
    ];
    let plain = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;
    for n in caches.iter().chain([&plain]) {
        manager_node.client.dial(n.addr.clone()).await.unwrap();
    }
    let manager = Manager::new(
        manager_node.client.clone(),
        provider.public(),
        Duration::from_secs(5),
    );
    let url = format!("http://{origin}/page");
    let guid = manager.on_miss(&url).await.unwrap();
    assert!(manager_node.client.store().contains(&guid));

    let made = manager.spread(guid, 2).await;
    let cache_ids: Vec<_> = caches.iter().map(|c| c.client.peer_id()).collect();
    assert_eq!(made.len(), 2, "{made:?}");
    assert!(
        made.iter().all(|p| cache_ids.contains(p)),
        "{made:?} {cache_ids:?}"
    );
    for c in &caches {
        assert!(c.client.store().contains(&guid));
    }
    // The plain node refused (it has no role task) and holds nothing.
    assert!(!plain.client.store().contains(&guid));
    // Every replica is announced: a lookup finds several providers.
    let providers = eventually("the replicas announced", || async {
        let p = plain
            .client
            .find_providers(guid, 4, Duration::from_secs(5))
            .await;
        (p.len() >= 4).then_some(p)
    })
    .await;
    for c in &cache_ids {
        assert!(providers.contains(c), "{providers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_miss_hints_for_one_object_makes_one_replica() {
    let provider = Keypair::generate_ed25519();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let origin = origin_counting(Arc::new(parking_lot::Mutex::new("hot")), hits.clone()).await;
    let gateway = node(&provider, Vec::new(), Role::Gateway).await;
    let manager = node(&provider, vec![gateway.addr.clone()], Role::Manager).await;
    let proxy = node(&provider, vec![gateway.addr.clone()], Role::Plain).await;
    proxy.client.dial(manager.addr.clone()).await.unwrap();
    let url = format!("http://{origin}/page");

    // Twenty proxies' worth of misses at once: the manager makes one replica, and the origin
    // is asked once.
    let m = manager.client.peer_id();
    let hints = (0..20).map(|_| proxy.client.hint_miss(m, &url));
    for r in libp2p::futures::future::join_all(hints).await {
        r.unwrap();
    }
    let guid = slipstream_coop::Guid::new(&provider.public(), &url);
    eventually("the replica", || async {
        manager.client.store().contains(&guid).then_some(())
    })
    .await;
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}
