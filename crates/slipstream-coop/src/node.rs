//! A cooperative-cache node on the node layer: what `slipstream node` runs.
//!
//! - [`start`]: the node's identity (kept in its data directory), its store, the swarm and its
//!   event loop, the role task, the gateway's monitors.
//! - [`BrowserProxy`]: the browser proxy role (004 §4.2.2) as a phase of the caching proxy:
//!   before the proxy goes upstream, the request is looked up in the cooperative cache (the
//!   node's own store, neighbours' digests, then the DHT within a time budget); a verified
//!   object that RFC 9111 lets answer the request stands in for the origin's response. A miss
//!   goes to the origin and sends a miss hint to a cache manager; a hit that had to walk the
//!   DHT sends a slow-hit hint, so that the manager brings a replica nearer.
//! - [`StatusEndpoint`]: `GET /_slipstream/coop`, the node's peers, objects and lookups by
//!   outcome as JSON (the status page draws them).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use http::header::{HeaderName, HeaderValue, AGE};
use http::{request, response, Request, Response, StatusCode};
use hyper::body::Incoming;
use libp2p::identity::Keypair;
use slipstream_http::Body;
use slipstream_http_rules::rfc9111::Reuse;
use slipstream_node::access::Access;
use slipstream_node::respond::text;
use slipstream_node::router::read_only;
use slipstream_node::{Ctx, Endpoint, Phase};

use crate::config::{Role, Settings};
use crate::gateway::{service_guid, Gateway, Revalidation, Signer};
use crate::net::{tcp_swarm, Client, EventLoop, NetConfig};
use crate::object::{Guid, SignedObject};
use crate::roles::{self, Lookup, Manager, Via};
use crate::rules;
use crate::store::Store;

/// The node's key file in its data directory.
pub const KEY_FILE: &str = "node.key";
/// The node's replicas in its data directory.
pub const STORE_FILE: &str = "store.redb";

/// What the browser proxy's lookups came to.
#[derive(Debug, Default)]
pub struct Lookups {
    /// Answered from the node's own store.
    pub store: AtomicU64,
    /// Answered by a neighbour its digest named (no DHT walk).
    pub nearby: AtomicU64,
    /// Answered by a provider the DHT named.
    pub dht: AtomicU64,
    /// Found nowhere: the origin answered.
    pub miss: AtomicU64,
    /// Found, but RFC 9111 would not let it answer the request (stale, or the request asks
    /// for more): the origin answered.
    pub stale: AtomicU64,
    /// Not looked up (not a GET, credentials, no-store, not an http URL).
    pub bypass: AtomicU64,
    /// `Accept-Datetime` requests answered with a past or current version (a memento).
    pub memento: AtomicU64,
    /// `Accept-Datetime` requests for a time before every version found: answered as any
    /// other request, with no `Memento-Datetime`.
    pub no_memento: AtomicU64,
    /// Miss and slow-hit hints a cache manager took.
    pub hints_sent: AtomicU64,
    /// Hints that found no manager, or that it refused.
    pub hints_failed: AtomicU64,
    /// Hints not sent because [`MAX_HINTS_IN_FLIGHT`] were already out.
    pub hints_dropped: AtomicU64,
    /// Stale copies renewed by a gateway's freshness record (no body moved), then answered.
    pub revalidated: AtomicU64,
    /// Objects a gateway sent whole after a revalidation (changed, or held only stale at
    /// peers), then answered.
    pub refetched: AtomicU64,
    /// Stale copies answered while a revalidation runs in the background (RFC 5861 §3).
    pub stale_while_revalidate: AtomicU64,
    /// Stale copies answered because their revalidation failed (RFC 5861 §4).
    pub stale_if_error: AtomicU64,
    /// Revalidations that failed (no gateway, or the origin did not answer).
    pub revalidation_failed: AtomicU64,
}

/// Objects a node checks (and re-replicates) after one neighbour departed, at most.
pub const MAX_REPAIRS: usize = 1024;

/// Hints a node has out at once at most; beyond, a hint is dropped (a hint is advice: a flood
/// of misses must not become a flood of tasks and DHT walks).
pub const MAX_HINTS_IN_FLIGHT: usize = 64;

impl Lookups {
    fn json(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "store": g(&self.store),
            "nearby": g(&self.nearby),
            "dht": g(&self.dht),
            "miss": g(&self.miss),
            "stale": g(&self.stale),
            "bypass": g(&self.bypass),
            "memento": g(&self.memento),
            "no_memento": g(&self.no_memento),
            "hints_sent": g(&self.hints_sent),
            "hints_failed": g(&self.hints_failed),
            "hints_dropped": g(&self.hints_dropped),
            "revalidated": g(&self.revalidated),
            "refetched": g(&self.refetched),
            "stale_while_revalidate": g(&self.stale_while_revalidate),
            "stale_if_error": g(&self.stale_if_error),
            "revalidation_failed": g(&self.revalidation_failed),
        })
    }
}

/// A running node's shared state.
#[derive(Debug)]
pub struct CoopNode {
    client: Client,
    settings: Settings,
    lookups: Lookups,
    started: Instant,
    /// This node's own cache manager, which takes its proxy's hints directly.
    manager: Option<Manager>,
    /// Permits for hints in flight.
    hints: Arc<tokio::sync::Semaphore>,
    /// Where the browser proxy and the gateway may go: the `[proxy]` rules with the node's
    /// peer-to-peer listeners added to its own.
    access: Arc<Access>,
    /// This node's own gateway, which revalidates its stale copies directly.
    gateway: Option<Gateway>,
    /// The provider's gateways the DHT named last, and when.
    gateways: parking_lot::Mutex<Option<(Instant, Vec<libp2p::PeerId>)>>,
    /// Objects being revalidated in the background (stale-while-revalidate).
    revalidating: parking_lot::Mutex<std::collections::HashSet<Guid>>,
}

/// How long a node keeps the list of gateways the DHT named before it looks again (sooner
/// when none answered).
const GATEWAYS_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Gateways a revalidation tries, nearest first, before it gives up.
const GATEWAYS_TRIED: usize = 2;

impl CoopNode {
    /// The handle on the swarm.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The validated `[coop]` table.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The destination rules of the node's browser proxy and gateway: those it was started
    /// with, its peer-to-peer listeners added to the addresses never reached.
    pub fn access(&self) -> &Arc<Access> {
        &self.access
    }

    /// The lookups so far.
    pub fn lookups(&self) -> &Lookups {
        &self.lookups
    }

    /// Everything `/_slipstream/coop` shows.
    pub async fn status(&self) -> serde_json::Value {
        let peers = self.client.peers().await;
        let addrs = self.client.addresses().await;
        let store = self.client.store();
        let s = store.stats();
        let held: Vec<_> = store
            .guids()
            .into_iter()
            .filter_map(|g| store.peek(&g).map(|o| (g, o)))
            .take(200)
            .collect();
        let mut nearby = Vec::with_capacity(held.len());
        for (g, _) in &held {
            let n = self.client.nearby(*g).await;
            nearby.push(n.iter().filter(|(_, level)| *level == 0).count());
        }
        let mut objects: Vec<serde_json::Value> = held
            .into_iter()
            .zip(nearby)
            .map(|((g, o), held_nearby)| {
                let versions = store.versions(&g);
                serde_json::json!({
                    // Neighbours whose last digest says they hold it too.
                    "held_nearby": held_nearby,
                    "guid": g.to_hex(),
                    "url": o.object.url,
                    "version": o.object.version,
                    "versions_held": versions.len(),
                    // (version, captured at, Unix ms), oldest first.
                    "versions": versions,
                    "bytes": o.object.size(),
                })
            })
            .collect();
        objects.sort_by(|a, b| a["url"].as_str().cmp(&b["url"].as_str()));
        let net = self.client.stats();
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let roles: Vec<&str> = self
            .settings
            .roles
            .iter()
            .map(|r| match r {
                Role::Cache => "cache",
                Role::Gateway => "gateway",
                Role::Manager => "manager",
            })
            .collect();
        serde_json::json!({
            "peer_id": self.client.peer_id().to_string(),
            "provider": self.settings.provider.to_peer_id().to_string(),
            // A delegated gateway's delegation: until when it may sign (Unix ms).
            "delegation_expires_ms": self.settings.delegation.as_ref().map(|d| d.expires_ms),
            "roles": roles,
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "addresses": addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "peers": peers.iter().map(|p| serde_json::json!({
                "peer_id": p.peer.to_string(),
                "rtt_us": p.rtt.map(|d| d.as_micros() as u64),
            })).collect::<Vec<_>>(),
            "store": {
                "objects": s.objects,
                "bytes": s.bytes,
                "capacity_bytes": s.capacity_bytes,
                "restored": s.restored,
                "quarantined": s.quarantined,
                "evicted": s.evicted,
                "past_versions": s.past_versions,
            },
            "objects": objects,
            "lookups": self.lookups.json(),
            "manager": self.manager.as_ref().map(|m| serde_json::json!({
                "hints": m.hints_taken(),
            })),
            "net": {
                "served": g(&net.served),
                "missed": g(&net.missed),
                "malformed": g(&net.malformed),
                "rejected": g(&net.rejected),
                "updates_applied": g(&net.updates_applied),
                "updates_rejected": g(&net.updates_rejected),
                "updates_ignored": g(&net.updates_ignored),
                "records_applied": g(&net.records_applied),
                "stale_refused": g(&net.stale_refused),
            },
        })
    }

    /// Whether the proxy's destination rules let `req`'s target be reached. A target they
    /// refuse is not looked up either: its answer is the proxy's 403, never a copy that a
    /// gateway with other rules fetched.
    async fn reachable(&self, req: &request::Parts) -> bool {
        let Some(host) = req.uri.host() else {
            return false;
        };
        let port = req.uri.port_u16().unwrap_or(80);
        self.access.resolve(host, port).await.is_ok()
    }

    /// Has a gateway revalidate `url` (RFC 9111 §4.3 across the cooperative cache): this
    /// node's own, or the nearest the DHT names (the next when one fails). `held` is this
    /// node's stale copy, renewed by the gateway's freshness record when its body is current;
    /// otherwise the gateway sends the object whole. The renewed object is held here (off the
    /// request path) and returned, with whether a record did it and which gateway answered.
    async fn revalidate(
        self: &Arc<Self>,
        url: &str,
        held: Option<&SignedObject>,
    ) -> Result<(Arc<SignedObject>, bool, Option<libp2p::PeerId>), String> {
        if let Some(g) = &self.gateway {
            let trusted = [self.settings.provider.clone()];
            let hash = held.map(|h| h.object.body_hash());
            return match (g.revalidate(url, hash).await?, held) {
                (Revalidation::Record(r), Some(h)) => r
                    .apply(h, &trusted)
                    .map(|o| (Arc::new(o), true, None))
                    .map_err(|e| e.to_string()),
                (Revalidation::Object(o), _) => Ok((o, false, None)),
                (Revalidation::Record(_), None) => Err("a record for no copy".into()),
            };
        }
        let mut last = String::from("no gateway found");
        for peer in self.gateways().await.into_iter().take(GATEWAYS_TRIED) {
            match self.client.revalidate_via(peer, url, held).await {
                Ok((object, record)) => {
                    let client = self.client.clone();
                    let keep = object.clone();
                    // The store's disk write stays off the request path.
                    tokio::spawn(async move {
                        if let Err(e) = client.hold(keep).await {
                            tracing::debug!(error = %e, "a revalidated object not held");
                        }
                    });
                    return Ok((Arc::new(object), record, Some(peer)));
                }
                Err(e) => {
                    // The list is looked up again next time.
                    *self.gateways.lock() = None;
                    last = format!("gateway {}: {e}", short_id(&peer));
                }
            }
        }
        Err(last)
    }

    /// The provider's gateways, nearest first: the list the DHT named within the last
    /// [`GATEWAYS_TTL`], or a new one.
    async fn gateways(&self) -> Vec<libp2p::PeerId> {
        if let Some((at, list)) = &*self.gateways.lock() {
            if at.elapsed() < GATEWAYS_TTL && !list.is_empty() {
                return list.clone();
            }
        }
        let found = self
            .client
            .find_providers(
                service_guid(&self.settings.provider),
                3,
                self.settings.lookup_budget,
            )
            .await;
        let list = roles::nearest_first(&self.client, found).await;
        *self.gateways.lock() = Some((Instant::now(), list.clone()));
        list
    }

    /// Revalidates `held` in the background, once at a time per object (stale-while-revalidate).
    fn revalidate_later(self: &Arc<Self>, url: String, held: Arc<SignedObject>) {
        let guid = held.guid();
        if !self.revalidating.lock().insert(guid) {
            return;
        }
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(e) = node.revalidate(&url, Some(&held)).await {
                node.lookups
                    .revalidation_failed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%url, error = %e, "background revalidation failed");
            }
            node.revalidating.lock().remove(&guid);
        });
    }

    /// Sends a hint about `url` to a cache manager, off the request path.
    fn hint(self: &Arc<Self>, url: String) {
        let Ok(permit) = self.hints.clone().try_acquire_owned() else {
            self.lookups.hints_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let node = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let provider = node.settings.provider.clone();
            let taken = match &node.manager {
                Some(m) => m.on_miss(&url).await.map(|_| ()),
                None => {
                    roles::hint_miss(&node.client, &provider, &url, node.settings.lookup_budget)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            };
            match taken {
                Ok(()) => node.lookups.hints_sent.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::debug!(%url, error = %e, "hint not taken");
                    node.lookups.hints_failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        });
    }
}

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory or the key in it.
    #[error("{0}")]
    Identity(String),
    /// The store.
    #[error("cannot open the store")]
    Store(#[from] crate::store::StoreError),
    /// The swarm.
    #[error("cannot start the peer-to-peer layer: {0}")]
    Net(String),
}

/// The node's key: read from its data directory, or made and written there (mode 0600) at the
/// first start; a new one each start without a data directory.
pub fn identity(settings: &Settings) -> Result<Keypair, StartError> {
    match &settings.data_dir {
        Some(dir) => identity_at(dir),
        None => Ok(Keypair::generate_ed25519()),
    }
}

/// The node key kept in the data directory `dir`: read, or made and written there (0600).
pub fn identity_at(dir: &std::path::Path) -> Result<Keypair, StartError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| StartError::Identity(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(KEY_FILE);
    if path.exists() {
        return crate::config::read_keypair(&path).map_err(StartError::Identity);
    }
    let key = Keypair::generate_ed25519();
    let bytes = key
        .to_protobuf_encoding()
        .map_err(|e| StartError::Identity(e.to_string()))?;
    write_private(&path, &bytes)
        .map_err(|e| StartError::Identity(format!("cannot write {}: {e}", path.display())))?;
    Ok(key)
}

/// What the node's gateway signs with: the provider's key, or the node's own `key` under the
/// provider's delegation, which must be for that key.
fn signer(settings: &Settings, key: &Keypair) -> Result<Option<Signer>, StartError> {
    if let Some(k) = &settings.provider_key {
        return Ok(Some(Signer::Provider(k.clone())));
    }
    let Some(d) = &settings.delegation else {
        return Ok(None);
    };
    if d.key != key.public() {
        return Err(StartError::Identity(format!(
            "the delegation is for the node {}, and this node is {} (its key is {} in its data \
             directory): issue one for it with `slipstream node delegate`",
            d.key.to_peer_id(),
            key.public().to_peer_id(),
            KEY_FILE
        )));
    }
    let left_ms = d
        .expires_ms
        .saturating_sub(rules::unix_ms(SystemTime::now()));
    if left_ms < DELEGATION_WARN_MS {
        tracing::warn!(
            "the gateway's delegation expires in {} h (at {}): what it signs is refused \
             everywhere after that; issue a new one with `slipstream node delegate` and restart",
            left_ms / 3_600_000,
            httpdate::fmt_http_date(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(d.expires_ms)
            )
        );
    }
    Ok(Some(Signer::Delegated {
        key: key.clone(),
        delegation: Box::new(d.clone()),
    }))
}

/// A gateway whose delegation expires sooner than this says so at start (7 days).
pub const DELEGATION_WARN_MS: u64 = 7 * 24 * 3_600_000;

/// A delegation from the provider whose key is in `provider_key` to the node `node` (its peer
/// id, printed by `slipstream node id`), valid for `valid`, written to the new file `out`
/// (0600). Returns a line saying what was written and until when.
pub fn delegate(
    provider_key: &std::path::Path,
    node: &str,
    valid: std::time::Duration,
    out: &std::path::Path,
) -> Result<String, String> {
    let provider = crate::config::read_keypair(provider_key)?;
    let peer: libp2p::PeerId = node
        .parse()
        .map_err(|e| format!("`{node}` is not a peer id: {e}"))?;
    let key = crate::object::key_of_peer_id(&peer)
        .ok_or_else(|| format!("`{node}` does not embed its key (an ed25519 peer id is needed)"))?;
    if key == provider.public() {
        return Err("that is the provider itself: delegate to a gateway's node id".into());
    }
    let expires = rules::unix_ms(SystemTime::now()).saturating_add(valid.as_millis() as u64);
    let d = crate::object::Delegation::issue(&provider, key, expires).map_err(|e| e.to_string())?;
    write_private(out, &d.encode()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    let until = std::time::UNIX_EPOCH + std::time::Duration::from_millis(expires);
    Ok(format!(
        "{}: node {peer} signs for the provider {} until {}",
        out.display(),
        provider.public().to_peer_id(),
        httpdate::fmt_http_date(until)
    ))
}

/// Makes a cache provider's key, writes it to the new file `path` (mode 0600) and returns its
/// peer id, which nodes name as their provider.
pub fn keygen(path: &std::path::Path) -> std::io::Result<libp2p::PeerId> {
    let key = Keypair::generate_ed25519();
    let bytes = key.to_protobuf_encoding().map_err(std::io::Error::other)?;
    write_private(path, &bytes)?;
    Ok(key.public().to_peer_id())
}

/// Writes `bytes` to a new file only its owner may read.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Starts the node's peer-to-peer side in the current runtime: its store (restored from disk),
/// the swarm, the roles, the gateway's monitors. `access` is the browser proxy's destination
/// rules; the gateway fetches by them too, and the swarm's listeners join the node's own
/// addresses that neither ever reaches ([`CoopNode::access`]).
pub async fn start(settings: Settings, access: Arc<Access>) -> Result<Arc<CoopNode>, StartError> {
    let key = identity(&settings)?;
    let signer = signer(&settings, &key)?;
    let path = settings.data_dir.as_ref().map(|d| d.join(STORE_FILE));
    let name = path.as_ref().map(|p| p.display().to_string());
    let store = {
        let (capacity, policy) = (settings.capacity_bytes, settings.policy);
        tokio::task::spawn_blocking(move || Store::open(path.as_deref(), capacity, policy))
            .await
            .map_err(|e| crate::store::StoreError::Damaged {
                path: name.unwrap_or_default(),
                detail: e.to_string(),
            })??
    };
    if let Some(r) = store.recovery() {
        tracing::warn!(
            "the object store could not be read ({}): moved it to {} and started with the {} \
             objects read before the damage; the rest will be fetched again (delete the moved \
             file when it is no longer wanted)",
            r.why,
            r.moved_to.display(),
            r.kept
        );
    }
    let s = store.stats();
    let unreadable = s.dropped_at_start.saturating_sub(s.quarantined);
    if unreadable > 0 {
        tracing::warn!(
            dropped = unreadable,
            restored = s.restored,
            "stored objects not restored (stored by a slipstream before object format 2, which \
             signs the head and the body's hash; damaged; or beyond the store's capacity): \
             dropped, to be fetched again"
        );
    }
    if s.quarantined > 0 {
        tracing::warn!(
            quarantined = s.quarantined,
            restored = s.restored,
            "stored objects failed their signature check at start-up (altered on disk, or \
             signed under a delegation that has expired): dropped, to be fetched again"
        );
    }
    // The peers known before a restart are dialled too: a node finds its way back without a
    // bootstrap peer (membership.rs).
    let saved = settings
        .data_dir
        .as_deref()
        .map(|d| crate::membership::load(d, &key.public().to_peer_id()))
        .unwrap_or_default();
    let mut bootstrap = settings.bootstrap.clone();
    bootstrap.extend(
        saved
            .iter()
            .filter(|a| !bootstrap.contains(a))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let config = NetConfig {
        listen: settings.p2p_listen.clone(),
        bootstrap,
        mdns: settings.mdns,
        external: settings.external.clone(),
        digests: settings.digests,
        trusted: vec![settings.provider.clone()],
        push: settings.push,
        ..NetConfig::default()
    };
    let swarm = tcp_swarm(key, &config).map_err(|e| StartError::Net(e.to_string()))?;
    let (mut event_loop, client) = EventLoop::new(swarm, config, Arc::new(store))
        .map_err(|e| StartError::Net(e.to_string()))?;
    let queue = (!settings.roles.is_empty()).then(|| event_loop.accept_role_requests(64));
    let hot = (settings.spread_copies > 0).then(|| event_loop.report_hot(settings.hot_after, 64));
    let lost = (settings.min_replicas > 1).then(|| event_loop.report_lost(16));
    tokio::spawn(event_loop.run());
    if let Some(mut lost) = lost {
        // Replicas lost with a departed node are made again, up to `min_replicas`, by the
        // nodes that held them too.
        let (client, min, budget) = (
            client.clone(),
            settings.min_replicas,
            settings.lookup_budget,
        );
        tokio::spawn(async move {
            while let Some(guids) = lost.recv().await {
                let mut made = 0;
                for guid in guids.into_iter().take(MAX_REPAIRS) {
                    made += roles::repair(&client, guid, min, budget).await.len();
                }
                tracing::info!(replicas = made, "replicas re-made after a holder departed");
            }
        });
    }
    if let Some(mut hot) = hot {
        // A copy that serves many peers is spread, whoever holds it (the gateway first of
        // all): the load a holder serves counts, not only misses.
        let (client, copies, budget) = (
            client.clone(),
            settings.spread_copies,
            settings.lookup_budget,
        );
        tokio::spawn(async move {
            while let Some(guid) = hot.recv().await {
                let made = roles::spread(&client, guid, copies, budget).await;
                tracing::info!(%guid, replicas = made.len(), "an object this node serves to many peers spread");
            }
        });
    }
    if let Some(dir) = &settings.data_dir {
        tokio::spawn(crate::membership::keep(client.clone(), dir.clone(), saved));
    }
    let access = with_listeners(&client, &settings, &access).await;
    let mut own_manager = None;
    let mut own_gateway = None;
    if let Some(queue) = queue {
        let gateway = match (signer, settings.roles.contains(&Role::Gateway)) {
            (Some(signer), true) => {
                let g = Gateway::signing(client.clone(), signer, access.clone());
                g.announce().await;
                for url in &settings.monitor {
                    tokio::spawn(g.clone().monitor(url.clone(), settings.monitor_period));
                }
                Some(g)
            }
            _ => None,
        };
        let manager = if settings.roles.contains(&Role::Manager) {
            let m = Manager::new(
                client.clone(),
                settings.provider.clone(),
                settings.lookup_budget,
            )
            .spreading(settings.spread_copies, settings.hot_after);
            let m = match &gateway {
                Some(g) => m.with_gateway(g.clone()),
                None => m,
            };
            m.announce().await;
            own_manager = Some(m.clone());
            Some(m)
        } else {
            None
        };
        own_gateway = gateway.clone();
        tokio::spawn(roles::serve(client.clone(), gateway, manager, queue));
    }
    Ok(Arc::new(CoopNode {
        client,
        settings,
        lookups: Lookups::default(),
        started: Instant::now(),
        manager: own_manager,
        hints: Arc::new(tokio::sync::Semaphore::new(MAX_HINTS_IN_FLIGHT)),
        access,
        gateway: own_gateway,
        gateways: parking_lot::Mutex::new(None),
        revalidating: parking_lot::Mutex::default(),
    }))
}

/// `access` with the swarm's listening sockets among the node's own addresses, once the swarm
/// has bound them (moments; without one within five seconds, those it has). A wildcard listen
/// address stands for its port on every address of this host.
async fn with_listeners(client: &Client, settings: &Settings, access: &Access) -> Arc<Access> {
    let mut listeners = client.listeners().await;
    for _ in 0..500 {
        if !listeners.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        listeners = client.listeners().await;
    }
    let wildcard = settings
        .p2p_listen
        .iter()
        .filter_map(socket_of)
        .any(|a| a.ip().is_unspecified());
    let mut access = access.clone();
    for a in listeners.iter().filter_map(socket_of) {
        access.own.push(a);
        if wildcard {
            access.own.push(std::net::SocketAddr::new(
                Ipv4Addr::UNSPECIFIED.into(),
                a.port(),
            ));
            access.own.push(std::net::SocketAddr::new(
                Ipv6Addr::UNSPECIFIED.into(),
                a.port(),
            ));
        }
    }
    Arc::new(access)
}

/// The IP address and TCP port of a multiaddr like `/ip4/…/tcp/…`.
fn socket_of(addr: &libp2p::Multiaddr) -> Option<std::net::SocketAddr> {
    use libp2p::multiaddr::Protocol;
    let mut parts = addr.iter();
    let ip: IpAddr = match parts.next()? {
        Protocol::Ip4(ip) => ip.into(),
        Protocol::Ip6(ip) => ip.into(),
        _ => return None,
    };
    match parts.next()? {
        Protocol::Tcp(port) => Some(std::net::SocketAddr::new(ip, port)),
        _ => None,
    }
}

/// The request field that asks for a past version (RFC 7089 §2.1.1).
pub const ACCEPT_DATETIME: &str = "accept-datetime";

/// The instant `Accept-Datetime` asks for, in Unix milliseconds: `Ok(None)` without the field,
/// `Err` when it is not one HTTP-date.
pub fn accept_datetime(req: &request::Parts) -> Result<Option<u64>, String> {
    let mut values = req.headers.get_all(ACCEPT_DATETIME).iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("Accept-Datetime appears more than once".into());
    }
    let text = v
        .to_str()
        .map_err(|_| "Accept-Datetime is not text".to_owned())?;
    let t = httpdate::parse_http_date(text).map_err(|_| {
        format!(
            "Accept-Datetime `{text}` is not an HTTP-date (RFC 7089 §2.1.1), e.g. `Thu, 31 May 2007 20:35:00 GMT`"
        )
    })?;
    Ok(Some(rules::unix_ms(t)))
}

/// What the browser proxy made of one request (kept in the request's context), which its
/// `Cache-Status` member says.
#[derive(Debug, Clone)]
enum Outcome {
    /// Found nowhere: the request goes to the origin, and a miss hint follows if the origin
    /// answers (a failed fetch sends none: a manager would only fail again).
    Miss {
        /// The request's URL.
        url: String,
    },
    /// Found, but not fresh enough for the request: the origin answered.
    Stale,
    /// A past version answered.
    Memento,
    /// This node's own store answered.
    Store,
    /// A peer sent it, found through its digest (`nearby`) or the DHT (`dht`).
    Peer {
        /// Who sent it.
        from: Option<libp2p::PeerId>,
        /// How it was found.
        via: &'static str,
    },
    /// A gateway revalidated it: this node's stale copy renewed by a record (`record`), or
    /// the object sent whole (changed, or held here not at all).
    Revalidated {
        /// Whether this node held a copy (stale).
        had_copy: bool,
        /// Whether a freshness record renewed it (no body moved).
        record: bool,
        /// The gateway (`None`: this node's own).
        gateway: Option<libp2p::PeerId>,
    },
    /// A stale copy answered: while it is revalidated (`stale-while-revalidate`), or because
    /// its revalidation failed (`stale-if-error`).
    StaleServed(&'static str),
}

impl Outcome {
    /// The coop's Cache-Status member (RFC 9211 §2) for a response with status `status`.
    fn member(&self, status: u16) -> String {
        match self {
            Outcome::Miss { .. } => format!("slipstream-coop; fwd=miss; fwd-status={status}"),
            Outcome::Stale => format!("slipstream-coop; fwd=stale; fwd-status={status}"),
            Outcome::Memento => "slipstream-coop; hit; detail=memento".to_owned(),
            Outcome::Store => "slipstream-coop; hit; detail=store".to_owned(),
            Outcome::Peer { from, via } => {
                let peer = from.map(|p| short_id(&p)).unwrap_or_else(|| "?".into());
                format!("slipstream-coop; hit; detail=\"peer {peer} via {via}\"")
            }
            // RFC 9211 §2.2: `fwd` says why the cache went forward, `fwd-status` what its next
            // hop (the gateway) answered: 304 when its record renewed the copy held.
            Outcome::Revalidated {
                had_copy,
                record,
                gateway,
            } => {
                let fwd = if *had_copy { "stale" } else { "miss" };
                let fwd_status = if *record { 304 } else { 200 };
                let gateway = gateway.map_or_else(|| "own".to_owned(), |p| short_id(&p));
                format!(
                    "slipstream-coop; fwd={fwd}; fwd-status={fwd_status}; detail=\"revalidated by gateway {gateway}\""
                )
            }
            Outcome::StaleServed(why) => format!("slipstream-coop; hit; detail={why}"),
        }
    }
}

/// A peer id's short form in logs and headers: its last eight characters (every Ed25519 id
/// begins `12D3KooW`).
pub fn short_id(peer: &libp2p::PeerId) -> String {
    let s = peer.to_base58();
    s[s.len().saturating_sub(8)..].to_owned()
}

/// The browser proxy role, a phase of the caching proxy.
#[derive(Debug, Clone)]
pub struct BrowserProxy(pub Arc<CoopNode>);

impl BrowserProxy {
    /// `object`'s response with its `Age`.
    fn answer(object: &crate::object::Object, now: SystemTime) -> Response<Body> {
        let mut res = response_of(object);
        if let Some(age) = rules::age(object, now) {
            res.headers_mut()
                .insert(AGE, HeaderValue::from(age.as_secs()));
        }
        res
    }

    /// The answer to `req` after a gateway revalidated `url` (`held`: this node's stale copy,
    /// if any), if the renewed object may answer it; a stale copy if the revalidation failed
    /// and `stale-if-error` allows it. `None`: the origin answers.
    async fn after_revalidation(
        &self,
        ctx: &mut Ctx,
        req: &request::Parts,
        url: &str,
        held: Option<&Arc<SignedObject>>,
    ) -> Option<Response<Body>> {
        let node = &self.0;
        match node.revalidate(url, held.map(|h| &**h)).await {
            Ok((object, record, gateway)) => {
                let now = SystemTime::now();
                if rules::reuse(&object.object, req, now) != Some(Reuse::Fresh) {
                    node.lookups.stale.fetch_add(1, Ordering::Relaxed);
                    ctx.extensions.insert(Outcome::Stale);
                    return None;
                }
                let counter = if record {
                    &node.lookups.revalidated
                } else {
                    &node.lookups.refetched
                };
                counter.fetch_add(1, Ordering::Relaxed);
                ctx.extensions.insert(Outcome::Revalidated {
                    had_copy: held.is_some(),
                    record,
                    gateway,
                });
                Some(Self::answer(&object.object, now))
            }
            Err(why) => {
                node.lookups
                    .revalidation_failed
                    .fetch_add(1, Ordering::Relaxed);
                // Held only at peers: a stale copy is worth moving now, if it may answer.
                let elsewhere = match held {
                    Some(_) => None,
                    None => roles::lookup_stale(
                        &node.client,
                        &node.settings.provider,
                        url,
                        node.settings.lookup_budget,
                    )
                    .await
                    .map(|f| f.object),
                };
                let now = SystemTime::now();
                match held.or(elsewhere.as_ref()) {
                    Some(h) if rules::stale_if_error(&h.object, req, now) => {
                        tracing::info!(%url, %why, "revalidation failed: a stale copy answers (stale-if-error)");
                        node.lookups.stale_if_error.fetch_add(1, Ordering::Relaxed);
                        ctx.extensions
                            .insert(Outcome::StaleServed("stale-if-error"));
                        Some(Self::answer(&h.object, now))
                    }
                    _ => {
                        tracing::debug!(%url, %why, "revalidation failed: the origin answers");
                        node.lookups.stale.fetch_add(1, Ordering::Relaxed);
                        ctx.extensions.insert(Outcome::Stale);
                        None
                    }
                }
            }
        }
    }

    /// A past version as a memento (RFC 7089 §2.1): its stored response, whatever its
    /// freshness now, with the time it was captured and a link to the original resource.
    fn memento(found: &roles::Found, url: &str) -> Response<Body> {
        let object = &found.object.object;
        let mut res = response_of(object);
        let captured = std::time::UNIX_EPOCH
            + std::time::Duration::from_millis(found.captured_ms.unwrap_or(object.received_at_ms));
        let h = res.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(captured)) {
            h.insert(HeaderName::from_static("memento-datetime"), v);
        }
        if let Ok(v) = HeaderValue::from_str(&format!("<{url}>; rel=\"original\"")) {
            h.append(http::header::LINK, v);
        }
        h.append(
            http::header::VARY,
            HeaderValue::from_static("accept-datetime"),
        );
        res
    }
}

/// The stored response of `object`: its status, head and body.
fn response_of(object: &crate::object::Object) -> Response<Body> {
    let head = rules::head_of(object);
    let mut res = Response::new(Body::full(object.body.clone()));
    *res.status_mut() = head.status;
    *res.headers_mut() = head.headers;
    res
}

/// The instant a request's `Accept-Datetime` asked for, parsed once in `request_filter`.
#[derive(Debug, Clone, Copy)]
struct AskedFor(u64);

#[async_trait]
impl Phase for BrowserProxy {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        match accept_datetime(req) {
            Ok(Some(at_ms)) => {
                ctx.extensions.insert(AskedFor(at_ms));
                None
            }
            Ok(None) => None,
            Err(why) => Some(text(StatusCode::BAD_REQUEST, &why)),
        }
    }

    async fn upstream_fetch(&self, ctx: &mut Ctx, req: &request::Parts) -> Option<Response<Body>> {
        let node = &self.0;
        if rules::precheck(req).is_err() || !node.reachable(req).await {
            node.lookups.bypass.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let url = req.uri.to_string();
        let providers = [node.settings.provider.clone()];
        if let Some(AskedFor(at_ms)) = ctx.extensions.get::<AskedFor>().copied() {
            let budget = node.settings.lookup_budget;
            if let Some(found) =
                roles::lookup_at(&node.client, &providers, &url, at_ms, budget).await
            {
                node.lookups.memento.fetch_add(1, Ordering::Relaxed);
                ctx.extensions.insert(Outcome::Memento);
                return Some(Self::memento(&found, &url));
            }
            // Nothing that old: the resource as it is (no Memento-Datetime says so).
            node.lookups.no_memento.fetch_add(1, Ordering::Relaxed);
        }
        let looked =
            roles::lookup_fresh(&node.client, &providers, &url, node.settings.lookup_budget).await;
        let found = match looked {
            Lookup::Found(found) => found,
            // Peers hold it, stale: a gateway revalidates it and sends it whole, rather than
            // the origin sending it again.
            Lookup::StaleElsewhere => return self.after_revalidation(ctx, req, &url, None).await,
            Lookup::Miss => {
                node.lookups.miss.fetch_add(1, Ordering::Relaxed);
                ctx.extensions.insert(Outcome::Miss { url });
                return None;
            }
        };
        let now = SystemTime::now();
        match rules::reuse(&found.object.object, req, now) {
            Some(Reuse::Fresh) => {}
            Some(Reuse::StaleWhileRevalidate) => {
                node.lookups
                    .stale_while_revalidate
                    .fetch_add(1, Ordering::Relaxed);
                node.revalidate_later(url, found.object.clone());
                ctx.extensions
                    .insert(Outcome::StaleServed("stale-while-revalidate"));
                return Some(Self::answer(&found.object.object, now));
            }
            // Stale: a gateway revalidates it (a request that asks for more than a fresh copy,
            // no-cache say, goes to the origin as it would without the cooperative cache).
            Some(Reuse::Validate(_)) if !rules::fresh(&found.object.object, now) => {
                return self
                    .after_revalidation(ctx, req, &url, Some(&found.object))
                    .await;
            }
            _ => {
                node.lookups.stale.fetch_add(1, Ordering::Relaxed);
                ctx.extensions.insert(Outcome::Stale);
                return None;
            }
        }
        let res = Self::answer(&found.object.object, now);
        let from = found.from;
        let (counter, outcome) = match found.via {
            Via::Store => (&node.lookups.store, Outcome::Store),
            Via::Nearby => (
                &node.lookups.nearby,
                Outcome::Peer {
                    from,
                    via: "nearby",
                },
            ),
            Via::Dht => (&node.lookups.dht, Outcome::Peer { from, via: "dht" }),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        ctx.extensions.insert(outcome);
        if found.via == Via::Dht {
            // A slow hit (§4.4): the manager brings a replica nearer.
            node.hint(url);
        }
        Some(res)
    }

    fn response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {
        let Some(outcome) = ctx.extensions.get::<Outcome>() else {
            return;
        };
        let member = outcome.member(res.status.as_u16());
        if let Outcome::Miss { url } = outcome {
            // Only a response from the origin: not the proxy's own answer (a refused
            // destination, a failed connection) nor a server error.
            let answered = ctx.upstream.is_some() && !res.status.is_server_error();
            if answered {
                self.0.hint(url.clone());
            }
        }
        // RFC 9211: members run from the origin's side to the client's. The cooperative cache
        // stands between the origin and this node's proxy, whose member is already there on a
        // miss; on a hit the proxy adds none (the phase that answered speaks for the response).
        let name = HeaderName::from_static("cache-status");
        let value = match res.headers.get(&name).and_then(|v| v.to_str().ok()) {
            Some(rest) if !rest.is_empty() => format!("{member}, {rest}"),
            _ => member,
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers.insert(name, v);
        }
    }
}

/// `GET /_slipstream/coop`: the node's state as JSON.
#[derive(Debug, Clone)]
pub struct StatusEndpoint(pub Arc<CoopNode>);

#[async_trait]
impl Endpoint for StatusEndpoint {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        let body = serde_json::to_vec(&self.0.status().await).unwrap_or_default();
        read_only(req.method(), "application/json", body.into())
    }
}
