//! The cache manager and browser proxy roles (004 §4.2.2, §4.2.4, §4.4, §5.5), and the task that
//! answers a node's role requests.
//!
//! - The **browser proxy** looks a URL up ([`lookup`]): its own store, then the providers the
//!   DHT names within a time budget, nearest (by ping RTT) first, each object verified. On a
//!   miss it fetches from the origin (the caller's job) and sends a miss hint to a cache
//!   manager found by the well-known service GUID ([`hint_miss`]).
//! - The **cache manager** ([`Manager`]), on a miss hint, makes a replica on its own node, as
//!   the paper's implementation does (§5.5): from a node that already holds the object, or,
//!   when none does, through a gateway's insert. For a hot object it spreads replicas over
//!   the nearest nodes ([`Manager::spread`]); every node with a role task makes a replica when
//!   asked (each node is a content cache, §4.2.1).
//! - [`serve`] answers the requests the event loop queues for the node's roles, each in a task
//!   of its own (a manager may ask a gateway on the same node), at most [`MAX_CONCURRENT`] at
//!   once.

use std::sync::Arc;
use std::time::Duration;

use libp2p::identity::PublicKey;
use libp2p::PeerId;
use tokio::sync::{mpsc, Semaphore};

use crate::decide::{self, HotCounter};
use crate::gateway::{service_guid, Gateway, Revalidation};
use crate::net::{Client, CoopResponse, FetchError, Inbound, RoleRequest};
use crate::object::{Guid, SignedObject};

/// Cache managers a hint's lookup collects before it takes the nearest.
pub const MANAGERS_COMPARED: usize = 4;

/// Gateways a cache manager's lookup collects, so that another answers when the nearest is
/// down (its provider record outlives it).
pub const GATEWAYS_COMPARED: usize = 3;

/// Role requests handled at once at most.
pub const MAX_CONCURRENT: usize = 16;

/// The GUID every cache manager of the provider `provider` announces.
pub fn manager_guid(provider: &PublicKey) -> Guid {
    Guid::new(provider, "slipstream:service:cache-manager")
}

/// How a lookup found its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// This node's own store.
    Store,
    /// A neighbour whose digest says it holds the object: no DHT walk (§3.2.2).
    Nearby,
    /// A provider the DHT named.
    Dht,
}

/// Where a lookup found its object.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The node that sent it (`None`: this node's own store).
    pub from: Option<PeerId>,
    /// How it was found.
    pub via: Via,
    /// The object, verified.
    pub object: Arc<SignedObject>,
    /// For a version asked for by time: when that version was captured (Unix ms).
    pub captured_ms: Option<u64>,
}

/// Providers of `guid` ordered nearest first: measured RTTs ascending, unmeasured last.
pub(crate) async fn nearest_first(client: &Client, mut providers: Vec<PeerId>) -> Vec<PeerId> {
    let peers = client.peers().await;
    decide::nearest_first(&mut providers, |p| {
        peers.iter().find(|i| i.peer == *p).and_then(|i| i.rtt)
    });
    providers
}

/// What a lookup of the peers came to.
#[derive(Debug, Default)]
struct Asked {
    /// Some peer holds it, but stale by its clock: revalidating through a gateway beats a
    /// full fetch from the origin.
    stale_seen: bool,
    /// Take a stale copy too (it will be used: stale-if-error).
    stale_wanted: bool,
}

/// The first of `peers`, nearest first, that sends `guid` verified: its current version if
/// fresh at the peer (a stale copy stays where it is, `asked` notes it), or with `at_ms` the
/// version captured by then (time travel).
async fn fetch_nearest(
    client: &Client,
    peers: Vec<PeerId>,
    guid: Guid,
    at_ms: Option<u64>,
    via: Via,
    asked: &mut Asked,
) -> Option<Found> {
    for peer in nearest_first(client, peers).await {
        let fetched = match at_ms {
            None if asked.stale_wanted => client.fetch(peer, guid).await.map(|o| (o, None)),
            None => client.fetch_fresh(peer, guid).await.map(|o| (o, None)),
            Some(ms) => client
                .fetch_at(peer, guid, ms)
                .await
                .map(|(o, t)| (o, Some(t))),
        };
        match fetched {
            Ok((object, captured_ms)) => {
                return Some(Found {
                    from: Some(peer),
                    via,
                    object: Arc::new(object),
                    captured_ms,
                })
            }
            Err(FetchError::Stale) => asked.stale_seen = true,
            Err(e) => tracing::debug!(%peer, error = %e, "a holder failed; the next"),
        }
    }
    None
}

/// Copies `guid` from the nearest of `holders` that sends it verified and fresh, and holds it
/// here.
async fn copy_from(client: &Client, holders: Vec<PeerId>, guid: Guid) -> Result<Guid, String> {
    let found = fetch_nearest(client, holders, guid, None, Via::Dht, &mut Asked::default())
        .await
        .ok_or("no holder sent it fresh")?;
    client.hold((*found.object).clone()).await?;
    Ok(guid)
}

/// What [`lookup_fresh`] found.
#[derive(Debug)]
pub enum Lookup {
    /// This node's own copy (fresh or not: the caller judges it against the request), or a
    /// peer's fresh one.
    Found(Found),
    /// Only stale copies, at peers: none crossed the network.
    StaleElsewhere,
    /// Nowhere.
    Miss,
}

/// The browser proxy's lookup of `url` among the objects of the providers it trusts: its own
/// store, then neighbours whose digests hold it, then the DHT within `budget`. `None` is a
/// miss (go to the origin).
pub async fn lookup(
    client: &Client,
    providers: &[PublicKey],
    url: &str,
    budget: Duration,
) -> Option<Found> {
    match lookup_fresh(client, providers, url, budget).await {
        Lookup::Found(found) => Some(found),
        Lookup::StaleElsewhere | Lookup::Miss => None,
    }
}

/// [`lookup`], telling a miss from copies found stale at peers.
pub async fn lookup_fresh(
    client: &Client,
    providers: &[PublicKey],
    url: &str,
    budget: Duration,
) -> Lookup {
    let mut asked = Asked::default();
    for provider in providers {
        let guid = Guid::new(provider, url);
        if let Some(object) = client.store().get(&guid) {
            return Lookup::Found(Found {
                from: None,
                via: Via::Store,
                object,
                captured_ms: None,
            });
        }
        if let Some(found) = from_peers(client, guid, budget, &mut asked).await {
            return Lookup::Found(found);
        }
    }
    if asked.stale_seen {
        Lookup::StaleElsewhere
    } else {
        Lookup::Miss
    }
}

/// A copy of `url` whatever its freshness, from the nearest peer that holds one (a neighbour
/// first, then the DHT within `budget`), verified: for a request that a stale copy may answer
/// because its revalidation failed (stale-if-error).
pub async fn lookup_stale(
    client: &Client,
    provider: &PublicKey,
    url: &str,
    budget: Duration,
) -> Option<Found> {
    let mut asked = Asked {
        stale_wanted: true,
        ..Asked::default()
    };
    from_peers(client, Guid::new(provider, url), budget, &mut asked).await
}

/// `guid` from the nearest peer that sends it as `asked` wants: the neighbours whose digests
/// say they hold it (level 0; a false positive costs one request), then the holders the DHT
/// names within `budget`.
async fn from_peers(
    client: &Client,
    guid: Guid,
    budget: Duration,
    asked: &mut Asked,
) -> Option<Found> {
    let near: Vec<PeerId> = client
        .nearby(guid)
        .await
        .into_iter()
        .filter(|(_, level)| *level == 0)
        .map(|(p, _)| p)
        .collect();
    if let Some(found) = fetch_nearest(client, near, guid, None, Via::Nearby, asked).await {
        return Some(found);
    }
    let holders = client.find_providers(guid, 3, budget).await;
    fetch_nearest(client, holders, guid, None, Via::Dht, asked).await
}

/// Time travel (§8): the version of `url` that had arrived at its gateway by `at_ms` (Unix
/// milliseconds), from this node's store or the nearest provider that keeps it, verified.
/// `None`: no node found keeps a version that old.
pub async fn lookup_at(
    client: &Client,
    providers: &[PublicKey],
    url: &str,
    at_ms: u64,
    budget: Duration,
) -> Option<Found> {
    for provider in providers {
        let guid = Guid::new(provider, url);
        if let Some((object, captured)) = client.store().at_captured(&guid, at_ms) {
            return Some(Found {
                from: None,
                via: Via::Store,
                object,
                captured_ms: Some(captured),
            });
        }
        let holders = client.find_providers(guid, 8, budget).await;
        let asked = &mut Asked::default();
        if let Some(found) =
            fetch_nearest(client, holders, guid, Some(at_ms), Via::Dht, asked).await
        {
            return Some(found);
        }
    }
    None
}

/// Sends a miss hint for `url` to a cache manager of `provider` found within `budget`; the
/// manager's peer id and the replica's GUID, or why not.
pub async fn hint_miss(
    client: &Client,
    provider: &PublicKey,
    url: &str,
    budget: Duration,
) -> Result<(PeerId, Guid), FetchError> {
    // Several, so that the nearest by measured RTT is chosen, not the first found (004 §6.5,
    // Fig. 17: a manager that starts nearer should take the hints). Off the request path: the
    // walk costs a hint permit, no client time.
    let managers = client
        .find_providers(manager_guid(provider), MANAGERS_COMPARED, budget)
        .await;
    let mut last = FetchError::Refused("no cache manager found".into());
    // The nearest that answers: with one manager down, the next takes the hint.
    for manager in nearest_first(client, managers).await.into_iter().take(2) {
        match client.hint_miss(manager, url).await {
            Ok(guid) => return Ok((manager, guid)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A cache manager for one provider.
#[derive(Debug, Clone)]
pub struct Manager {
    client: Client,
    provider: PublicKey,
    budget: Duration,
    /// Spread an object over this many more nodes once it has had this many hints.
    spread: Option<(usize, u32)>,
    /// Hints per object so far.
    hints: Arc<parking_lot::Mutex<HotCounter<Guid>>>,
    /// The gateway on the manager's own node, if it has one (the DHT never names a node to
    /// itself).
    gateway: Option<Gateway>,
    /// Hints taken since the start (for the status page).
    taken: Arc<std::sync::atomic::AtomicU64>,
    /// Objects whose replica is being made: further hints for them are absorbed.
    making: Arc<parking_lot::Mutex<std::collections::HashSet<Guid>>>,
}

impl Manager {
    /// A manager making replicas of `provider`'s objects on its node, giving each DHT lookup
    /// `budget`.
    pub fn new(client: Client, provider: PublicKey, budget: Duration) -> Manager {
        Manager {
            client,
            provider,
            budget,
            spread: None,
            hints: Arc::new(parking_lot::Mutex::new(HotCounter::new(1))),
            gateway: None,
            taken: Arc::default(),
            making: Arc::default(),
        }
    }

    /// A manager on a node that is also a gateway inserts through it.
    pub fn with_gateway(mut self, gateway: Gateway) -> Manager {
        self.gateway = Some(gateway);
        self
    }

    /// Makes a hot object's replicas spread: once an object has had `after` hints (misses, or
    /// hits that had to walk the DHT), [`Manager::spread`] it over `copies` more nodes (§4.4,
    /// §5.1: a flash crowd is served by several replicas).
    pub fn spreading(mut self, copies: usize, after: u32) -> Manager {
        self.spread = (copies > 0).then_some((copies, after.max(1)));
        self.hints = Arc::new(parking_lot::Mutex::new(HotCounter::new(after)));
        self
    }

    /// Counts a hint about `guid`; whether it has just become hot.
    fn hot(&self, guid: Guid) -> bool {
        self.spread.is_some() && self.hints.lock().hint(guid)
    }

    /// Announces the cache manager service.
    pub async fn announce(&self) {
        self.client.provide(manager_guid(&self.provider)).await;
    }

    /// Spreads `guid` over up to `copies` more nodes, the connected peers nearest by RTT that
    /// do not hold it yet (§4.4: a flash crowd is served by several replicas). Returns the
    /// nodes that made one.
    pub async fn spread(&self, guid: Guid, copies: usize) -> Vec<PeerId> {
        spread(&self.client, guid, copies, self.budget).await
    }

    /// Hints this manager has taken since it started.
    pub fn hints_taken(&self) -> u64 {
        self.taken.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A miss hint for `url`: a replica here, copied from a holder or inserted by a gateway.
    pub async fn on_miss(&self, url: &str) -> Result<Guid, String> {
        self.taken
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let guid = Guid::new(&self.provider, url);
        if self.hot(guid) {
            if let Some((copies, _)) = self.spread {
                let manager = self.clone();
                // By its `after`th hint the object has replicas to copy from (the first miss
                // made one).
                tokio::spawn(async move {
                    let made = manager.spread(guid, copies).await;
                    tracing::info!(%guid, replicas = made.len(), "hot object spread");
                });
            }
        }
        if self.client.store().contains(&guid) {
            return Ok(guid);
        }
        // A flood of misses for one object makes one replica, not one per hint.
        if !self.making.lock().insert(guid) {
            return Ok(guid);
        }
        let _making = Making(&self.making, guid);
        self.make(guid, url).await
    }

    /// A replica of `guid` (for `url`) here: inserted by this node's gateway, copied from a
    /// holder, or inserted by a gateway the DHT names.
    async fn make(&self, guid: Guid, url: &str) -> Result<Guid, String> {
        if let Some(gateway) = &self.gateway {
            return gateway.insert(url).await;
        }
        let holders = self.client.find_providers(guid, 3, self.budget).await;
        if !holders.is_empty() && copy_from(&self.client, holders, guid).await.is_ok() {
            return Ok(guid);
        }
        // Held nowhere, or only stale: a gateway inserts it (revalidating what it holds), the
        // nearest that answers: with one gateway down, another does it.
        let gateways = self
            .client
            .find_providers(service_guid(&self.provider), GATEWAYS_COMPARED, self.budget)
            .await;
        let mut last = "no gateway found".to_owned();
        for gateway in nearest_first(&self.client, gateways).await {
            match self.client.insert_via(gateway, url).await {
                Ok(_) => return copy_from(&self.client, vec![gateway], guid).await,
                Err(e) => last = format!("gateway {gateway}: {e}"),
            }
        }
        Err(last)
    }
}

/// Spreads `guid` over up to `copies` more nodes, the connected peers nearest by RTT that do
/// not hold it yet (§4.4: a flash crowd is served by several replicas): what a manager does
/// with a hot object, and a holder with an object whose copy serves many peers. Returns the
/// nodes that made one.
pub async fn spread(client: &Client, guid: Guid, copies: usize, budget: Duration) -> Vec<PeerId> {
    let holders = client.find_providers(guid, 64, budget).await;
    let peers = client.peers().await;
    let candidates =
        decide::spread_candidates(peers.iter().map(|p| p.peer).collect(), &holders, |p| {
            peers.iter().find(|i| i.peer == *p).and_then(|i| i.rtt)
        });
    let mut made = Vec::new();
    for peer in candidates {
        if made.len() >= copies {
            break;
        }
        match client.replicate_on(peer, guid).await {
            Ok(_) => made.push(peer),
            Err(e) => tracing::debug!(%peer, error = %e, "no replica there"),
        }
    }
    made
}

/// Re-creates replicas of `guid`, held here, up to `min_replicas` live ones (this node's and
/// those of connected peers the DHT names as holders; a dead node's provider record outlives
/// it): after a holder departed. Returns the nodes that made one.
pub async fn repair(
    client: &Client,
    guid: Guid,
    min_replicas: usize,
    budget: Duration,
) -> Vec<PeerId> {
    let holders = client.find_providers(guid, 16, budget).await;
    let peers = client.peers().await;
    let me = client.peer_id();
    let live = 1 + holders
        .iter()
        .filter(|h| **h != me && peers.iter().any(|p| p.peer == **h))
        .count();
    if live >= min_replicas {
        return Vec::new();
    }
    spread(client, guid, min_replicas - live, budget).await
}

/// Takes an object out of a manager's in-flight set when its replica is made, failed, or the
/// task making it was dropped.
struct Making<'a>(
    &'a parking_lot::Mutex<std::collections::HashSet<Guid>>,
    Guid,
);

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

/// Makes a replica of `guid` on this node, from the nearest provider that answers.
async fn replicate_here(client: &Client, guid: Guid) -> Result<Guid, String> {
    if client.store().contains(&guid) {
        return Ok(guid);
    }
    let holders = client.find_providers(guid, 3, Duration::from_secs(5)).await;
    copy_from(client, holders, guid).await
}

/// Answers the role requests in `queue` with the roles this node has, until it closes.
pub async fn serve(
    client: Client,
    gateway: Option<Gateway>,
    manager: Option<Manager>,
    mut queue: mpsc::Receiver<Inbound>,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONCURRENT));
    while let Some(Inbound { request, channel }) = queue.recv().await {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (client, gateway, manager) = (client.clone(), gateway.clone(), manager.clone());
        tokio::spawn(async move {
            let inserted =
                |r: Result<Guid, String>| r.map(|g| CoopResponse::Inserted(g.0.to_vec()));
            let result = match (&request, &gateway, &manager) {
                (RoleRequest::Replicate(guid), _, _) => {
                    inserted(replicate_here(&client, *guid).await)
                }
                (RoleRequest::Insert(url), Some(g), _) => inserted(g.insert(url).await),
                (RoleRequest::MissHint(url), _, Some(m)) => inserted(m.on_miss(url).await),
                (RoleRequest::Revalidate(url, held), Some(g), _) => {
                    g.revalidate(url, *held).await.map(|r| match r {
                        Revalidation::Record(record) => CoopResponse::Fresh(record.encode()),
                        Revalidation::Object(object) => CoopResponse::Object(object.encode()),
                    })
                }
                (RoleRequest::Insert(_) | RoleRequest::Revalidate(..), None, _) => {
                    Err("not a gateway".to_owned())
                }
                (RoleRequest::MissHint(_), _, None) => Err("not a cache manager".to_owned()),
            };
            let response = match result {
                Ok(response) => response,
                Err(why) => {
                    tracing::info!(?request, %why, "role request refused");
                    CoopResponse::Refused(why)
                }
            };
            client.respond(channel, response).await;
            drop(permit);
        });
    }
}
