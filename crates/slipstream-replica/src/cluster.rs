//! The directory carried between the servers of one domain by chitchat (scuttlebutt
//! anti-entropy over UDP, as Quickwit runs it).
//!
//! Each node is the only writer of its own keys: `replica:<pattern>` → `<version>+<physical>`
//! or `<version>-` (see `directory`), and `node:http` → the base URL its peers and browsers
//! reach it at. A write is acknowledged once it is durable in the node's store (redb); it is
//! then set in the node's chitchat state, which spreads it. Every node merges what it hears
//! into its own [`View`] — a [`Directory`] plus which nodes are alive — so concurrent writes on
//! different nodes never conflict and a healed partition converges by anti-entropy.
//!
//! Gossip is sealed with the cluster secret (`seal`): a node without it is not heard, cannot
//! publish and is not listed. Every value a node gossips is signed with its node key
//! (`identity`), and each node binds a name to the first key it hears for it: a member reusing
//! another's name, or relaying forged values under it, is refused. A node's entries may point
//! only at its own advertised origin or at a host the cluster allows (`replica_hosts`), over
//! `http` or `https`, and count against a per-node cap on entries and bytes.
//!
//! A restarted node publishes its stored entries again under a new chitchat generation with
//! the same versions, so peers' views do not move backwards. A malformed key or value in a
//! peer's state (a corrupt or hostile peer) is counted, logged once and skipped: it changes
//! nothing in the view. The resolution of a URL counts only live nodes; a dead node's entries
//! stay in the directory (flagged) until chitchat forgets the node.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::directory::{Directory, Entry, NodeId, ParseError, Pattern, KEY_PREFIX};
use crate::identity::{self, Identity, KEY_KEY};
use crate::seal::{SealedTransport, Sealer, Stats};
use crate::store::{self, Content, Store};

/// What a signature adds to a gossiped value (86 characters of base64 and a space).
const SIGNATURE_BYTES: usize = 87;

/// The chitchat key holding a node's base URL.
pub const HTTP_KEY: &str = "node:http";

/// How a node joins its domain's cluster.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The node's name, unique in the cluster (its chitchat node id).
    pub name: String,
    /// The cluster's name: nodes of different clusters ignore each other's messages.
    pub cluster_id: String,
    /// The UDP address gossip is received on.
    pub gossip_listen: SocketAddr,
    /// The UDP address peers send gossip to (`gossip_listen` unless behind a NAT).
    pub gossip_advertise: SocketAddr,
    /// Gossip addresses (`host:port`) of nodes to join through.
    pub seeds: Vec<String>,
    /// The base URL (`http://host:port`) peers and browsers reach this node's HTTP server at;
    /// `None` until the server is bound, when [`Cluster::advertise_at`] must be called.
    pub advertise: Option<String>,
    /// The directory holding the node's store (`replica.redb`).
    pub data_dir: PathBuf,
    /// How often the node gossips with a peer.
    pub gossip_interval: Duration,
    /// How long a dead node is remembered (its entries flagged dead) before it is forgotten.
    pub dead_node_grace: Duration,
    /// The secret every member shares; gossip without it is dropped (see `seal`).
    pub secret: Vec<u8>,
    /// Hosts (`host` or `host:port`) a node's entries may point at besides its own origin.
    pub replica_hosts: Vec<String>,
    /// The most directory entries taken from one node.
    pub max_node_entries: usize,
    /// The most bytes of directory keys and values taken from one node.
    pub max_node_bytes: usize,
    /// The most nodes a gossip digest may list (see `seal`).
    pub max_digest_nodes: u16,
    /// When not empty, the only members admitted, each name with its public key.
    pub members: BTreeMap<String, String>,
}

/// Why a physical URL may not be announced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PhysicalError {
    /// Not an absolute `http` or `https` URL with a host.
    #[error("a replica's physical URL is an http:// or https:// URL with a host")]
    Scheme,
    /// On a host that is neither the node's own nor allowed.
    #[error("`{host}` is neither this node's origin nor one of the cluster's `replica_hosts`")]
    Host {
        /// The URL's authority.
        host: String,
    },
}

/// Checks that `physical` may be announced by a node advertised at `base`: `http` or
/// `https`, on the node's own origin (scheme, host and port) or on a host of `allowed`
/// (`host`, any port, or `host:port`).
pub fn check_physical(
    physical: &str,
    base: Option<&str>,
    allowed: &[String],
) -> Result<(), PhysicalError> {
    let origin = |url: &str| -> Option<(String, String, String)> {
        let uri = url.parse::<http::Uri>().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let authority = uri.authority()?;
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return None;
        }
        let host = authority.host().to_ascii_lowercase();
        let port = authority
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Some((scheme, host, port.to_string()))
    };
    let (scheme, host, port) = origin(physical).ok_or(PhysicalError::Scheme)?;
    if base.and_then(origin) == Some((scheme, host.clone(), port.clone())) {
        return Ok(());
    }
    let with_port = format!("{host}:{port}");
    if allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(&host) || a.eq_ignore_ascii_case(&with_port))
    {
        return Ok(());
    }
    Err(PhysicalError::Host { host: with_port })
}

/// Whether `base` is a node's base URL (`http://host[:port]`, `https://...`, no path).
fn is_base_url(base: &str) -> bool {
    base.parse::<http::Uri>().is_ok_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https"))
            && u.authority().is_some_and(|a| !a.as_str().contains('@'))
            && matches!(u.path(), "" | "/")
            && u.query().is_none()
    })
}

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused or failed the write (see [`store::Error`] for whose fault).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The store's worker thread failed.
    #[error("replica store worker: {0}")]
    Worker(#[from] tokio::task::JoinError),
    /// The node's base URL is not known yet (the server is starting).
    #[error("cluster: the node is starting (its address is not known yet)")]
    Starting,
    /// The node's key could not be loaded or made.
    #[error(transparent)]
    Identity(#[from] identity::Error),
    /// The physical URL may not be announced.
    #[error(transparent)]
    Physical(#[from] PhysicalError),
    /// The node holds as many entries (or bytes of them) as its peers take from one node.
    #[error(
        "this node holds {entries} directory entries ({bytes} bytes); peers take at most \
         max_node_entries = {max_entries} and max_node_bytes = {max_bytes} from one node"
    )]
    Full {
        /// Entries held, tombstones included.
        entries: usize,
        /// Their bytes.
        bytes: usize,
        /// The cap on entries.
        max_entries: usize,
        /// The cap on bytes.
        max_bytes: usize,
    },
    /// Gossip could not start (the UDP address is taken, a seed does not resolve, ...).
    #[error("cluster: cannot start gossip on {addr}: {source:#}")]
    Gossip {
        /// The gossip address.
        addr: SocketAddr,
        /// Why.
        source: anyhow::Error,
    },
}

/// What a node knows of another.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeInfo {
    /// Its base URL, once heard.
    pub advertise: Option<String>,
    /// Whether the failure detector holds it alive.
    pub live: bool,
    /// The requests per second it last reported (placement policy), if it does.
    pub load: Option<f64>,
    /// The version of its gossip state merged last (values dropped past the per-node cap
    /// count): equal to the node's own once this node has heard all it published.
    pub state_version: u64,
}

/// One node's view of the cluster: the merged directory and the nodes.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Every node's entries, merged.
    pub directory: Directory,
    /// Every node heard of, by name.
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// Distinct malformed, unsigned, over-cap or disallowed updates refused from peers' states.
    pub rejected: u64,
    /// Distinct node instances refused for presenting another key than the one their name is
    /// bound to (or none).
    pub impostors: u64,
    /// Raised on every change of the directory or of a node's liveness.
    pub version: u64,
}

impl View {
    /// The physical URLs of `url`'s replicas on live nodes.
    pub fn resolve(&self, url: &str) -> Vec<String> {
        self.directory.resolve_among(url, |node| self.is_live(node))
    }

    /// Whether the failure detector holds `node` alive.
    pub fn is_live(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| n.live)
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The entry written.
    pub entry: Entry,
    /// Whether the pattern had no live entry of this node before.
    pub created: bool,
}

/// A node's membership in its cluster: its store, its gossip, its view.
pub struct Cluster {
    settings: Settings,
    identity: Identity,
    stats: Arc<Stats>,
    /// The base URL, once known.
    advertise: RwLock<Option<String>>,
    handle: ChitchatHandle,
    store: Arc<Mutex<Store>>,
    /// Serialises writes, so that entries reach chitchat in the order they were stored.
    writer: tokio::sync::Mutex<()>,
    view: Arc<RwLock<View>>,
    changes: watch::Receiver<u64>,
    listener: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.settings.name)
            .field("gossip", &self.settings.gossip_listen)
            .finish_non_exhaustive()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.listener.abort();
        let _ = self.handle.initiate_shutdown();
    }
}

impl Cluster {
    /// Opens the node's store and starts gossiping (on the current tokio runtime).
    pub async fn join(settings: Settings) -> Result<Cluster, Error> {
        std::fs::create_dir_all(&settings.data_dir).map_err(|source| store::Error::Io {
            path: settings.data_dir.clone(),
            source,
        })?;
        let path = settings.data_dir.join("replica.redb");
        let store = tokio::task::spawn_blocking(move || Store::open(path)).await??;
        let identity = Identity::load_or_create(&settings.data_dir)?;
        let sign = |key: &str, value: &str| {
            identity.sign(&settings.cluster_id, &settings.name, key, value)
        };

        let mut initial: Vec<(String, String)> = store
            .own()
            .gossip()
            .map(|(k, v)| {
                let v = sign(&k, &v);
                (k, v)
            })
            .collect();
        if let Some(base) = &settings.advertise {
            initial.push((HTTP_KEY.to_owned(), sign(HTTP_KEY, base)));
        }
        initial.push((KEY_KEY.to_owned(), identity.public().to_owned()));
        let mut view = View::default();
        for (pattern, entry) in store.own().entries() {
            view.directory.apply(&settings.name, pattern, entry.clone());
        }
        view.nodes.insert(
            settings.name.clone(),
            NodeInfo {
                advertise: settings.advertise.clone(),
                live: true,
                load: None,
                state_version: 0,
            },
        );

        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let config = ChitchatConfig {
            chitchat_id: ChitchatId::new(
                settings.name.clone(),
                generation,
                settings.gossip_advertise,
            ),
            cluster_id: settings.cluster_id.clone(),
            gossip_interval: settings.gossip_interval,
            listen_addr: settings.gossip_listen,
            seed_nodes: settings.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                initial_interval: settings.gossip_interval,
                dead_node_grace_period: settings.dead_node_grace,
                ..FailureDetectorConfig::default()
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: crate::seal::PROTOCOL,
            // The view takes `max_node_bytes` of entries from a node; chitchat keeps what it
            // holds of a node within that plus each entry's signature and the node's own keys.
            max_node_state_bytes: settings
                .max_node_bytes
                .saturating_add(settings.max_node_entries.saturating_mul(SIGNATURE_BYTES))
                .saturating_add(64 << 10),
        };
        let stats = Arc::new(Stats::default());
        let transport = SealedTransport::new(
            Sealer::new(
                &settings.secret,
                &settings.cluster_id,
                settings.max_digest_nodes,
            ),
            stats.clone(),
        );
        let handle = spawn_chitchat(config, initial, &transport)
            .await
            .map_err(|source| Error::Gossip {
                addr: settings.gossip_listen,
                source,
            })?;

        let view = Arc::new(RwLock::new(view));
        let (changes_tx, changes) = watch::channel(0);
        let watcher = handle.chitchat().lock().await.live_nodes_watcher();
        let listener = tokio::spawn(listen(
            watcher,
            Merge::new(Policy::of(&settings, &identity)),
            view.clone(),
            changes_tx,
        ));
        Ok(Cluster {
            advertise: RwLock::new(settings.advertise.clone()),
            settings,
            identity,
            stats,
            handle,
            store: Arc::new(Mutex::new(store)),
            writer: tokio::sync::Mutex::new(()),
            view,
            changes,
            listener,
        })
    }

    /// The node's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The node's public key, as its peers bind its name to.
    pub fn public_key(&self) -> &str {
        self.identity.public()
    }

    /// The version of this node's own gossip state.
    pub async fn own_state_version(&self) -> u64 {
        self.handle
            .with_chitchat(|c| c.self_node_state().max_version())
            .await
    }

    /// What the gossip transport took and dropped.
    pub fn gossip_stats(&self) -> &Stats {
        &self.stats
    }

    /// `value` signed as this node's value of `key`.
    fn sign(&self, key: &str, value: &str) -> String {
        self.identity
            .sign(&self.settings.cluster_id, &self.settings.name, key, value)
    }

    /// Checks that this node may announce `physical` (see [`check_physical`]).
    pub fn check_physical(&self, physical: &str) -> Result<(), PhysicalError> {
        check_physical(
            physical,
            self.advertise().as_deref(),
            &self.settings.replica_hosts,
        )
    }

    /// The base URL peers and browsers reach this node at, once known.
    pub fn advertise(&self) -> Option<String> {
        self.advertise.read().clone()
    }

    /// Sets the base URL (when the settings had none: the server's bound address).
    pub async fn advertise_at(&self, base: &str) {
        let base = base.trim_end_matches('/').to_owned();
        *self.advertise.write() = Some(base.clone());
        let signed = self.sign(HTTP_KEY, &base);
        self.handle
            .with_chitchat(|c| c.self_node_state().set(HTTP_KEY, &signed))
            .await;
        let mut view = self.view.write();
        if let Some(me) = view.nodes.get_mut(&self.settings.name) {
            me.advertise = Some(base);
        }
        view.version += 1;
    }

    /// Sets one of this node's own gossip keys outside the directory (its load, ...), and
    /// mirrors what the view keeps of it.
    pub async fn set_own_key(&self, key: &str, value: &str) {
        let signed = self.sign(key, value);
        self.handle
            .with_chitchat(|c| c.self_node_state().set(key, &signed))
            .await;
        if key == crate::placement::LOAD_KEY {
            if let Some(me) = self.view.write().nodes.get_mut(&self.settings.name) {
                me.load = value.parse().ok();
            }
        }
    }

    /// The logical URLs of this node's live replicas stored through the replica API.
    pub fn stored_urls(&self) -> Vec<String> {
        let Some(base) = self.advertise() else {
            return Vec::new();
        };
        let prefix = crate::api::stored_physical(&base, "");
        self.store
            .lock()
            .own()
            .entries()
            .filter_map(|(p, e)| match p {
                Pattern::Exact(url) if !e.deleted && e.physical.starts_with(&prefix) => {
                    Some(url.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// A copy of the node's current view.
    pub fn view(&self) -> View {
        self.view.read().clone()
    }

    /// The physical URLs of `url`'s replicas on live nodes.
    pub fn resolve(&self, url: &str) -> Vec<String> {
        self.view.read().resolve(url)
    }

    /// [`Cluster::resolve`], with the version of the view it was made from.
    pub fn resolve_versioned(&self, url: &str) -> (Vec<String>, u64) {
        let view = self.view.read();
        (view.resolve(url), view.version)
    }

    /// Runs `f` on this node's view, held for reading (keep `f` short: gossip waits).
    pub fn read_view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        f(&self.view.read())
    }

    /// The view's version; it changes whenever a resolution may have.
    pub fn version(&self) -> u64 {
        self.view.read().version
    }

    /// Notified on every change of the view.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// This node's entry for `pattern`, a tombstone included.
    pub fn own(&self, pattern: &Pattern) -> Option<Entry> {
        self.store.lock().own().get(pattern).cloned()
    }

    /// Creates or updates this node's replica of `pattern` at `physical`, with its content
    /// for an exact pattern. Returns once it is durable; peers hear of it by gossip.
    pub async fn put(
        &self,
        pattern: Pattern,
        physical: String,
        content: Option<Content>,
    ) -> Result<Written, Error> {
        // Its form first (the store's error), then where it points.
        Entry::decode(
            &pattern,
            Entry::live(1, physical.as_str()).encode().as_bytes(),
        )
        .map_err(store::Error::Invalid)?;
        self.check_physical(&physical)?;
        let _order = self.writer.lock().await;
        self.check_room(&pattern, &physical)?;
        let store = self.store.clone();
        let p = pattern.clone();
        let (entry, created) = tokio::task::spawn_blocking(move || {
            let mut store = store.lock();
            let created = store.own().get(&p).is_none_or(|e| e.deleted);
            store
                .put(&p, &physical, content.as_ref())
                .map(|e| (e, created))
        })
        .await??;
        self.publish(&pattern, &entry).await;
        Ok(Written { entry, created })
    }

    /// Refuses a write that would take this node past the per-node caps its peers apply.
    fn check_room(&self, pattern: &Pattern, physical: &str) -> Result<(), Error> {
        let store = self.store.lock();
        let own = store.own();
        let (mut entries, mut bytes) = (0, 0);
        for (p, e) in own.entries() {
            if p != pattern {
                entries += 1;
                bytes += gossip_bytes(&p.key(), &e.encode());
            }
        }
        entries += 1;
        bytes += gossip_bytes(&pattern.key(), &Entry::live(u64::MAX, physical).encode());
        let (max_entries, max_bytes) =
            (self.settings.max_node_entries, self.settings.max_node_bytes);
        if entries > max_entries || bytes > max_bytes {
            return Err(Error::Full {
                entries: entries - 1,
                bytes,
                max_entries,
                max_bytes,
            });
        }
        Ok(())
    }

    /// Deletes this node's replica of `pattern` (a tombstone). `None` when it had none.
    pub async fn delete(&self, pattern: Pattern) -> Result<Option<Entry>, Error> {
        let _order = self.writer.lock().await;
        let store = self.store.clone();
        let p = pattern.clone();
        let entry = tokio::task::spawn_blocking(move || store.lock().delete(&p)).await??;
        if let Some(entry) = &entry {
            self.publish(&pattern, entry).await;
        }
        Ok(entry)
    }

    /// The content this node stores for a logical URL.
    pub async fn content(&self, url: &str) -> Result<Option<Content>, Error> {
        let store = self.store.clone();
        let url = url.to_owned();
        Ok(tokio::task::spawn_blocking(move || store.lock().body(&url)).await??)
    }

    /// Sets a written entry in chitchat and in the view.
    async fn publish(&self, pattern: &Pattern, entry: &Entry) {
        let key = pattern.key();
        let signed = self.sign(&key, &entry.encode());
        self.handle
            .with_chitchat(|c| c.self_node_state().set(&key, &signed))
            .await;
        let mut view = self.view.write();
        if view
            .directory
            .apply(&self.settings.name, pattern, entry.clone())
        {
            view.version += 1;
        }
    }

    /// Leaves the cluster: gossip stops (peers then find the node dead).
    pub fn leave(&self) {
        self.listener.abort();
        let _ = self.handle.initiate_shutdown();
    }

    /// Announces that this node serves `patterns` from its document root, under its base URL
    /// (the `publish` setting), where it does not already. A pattern dropped from the setting
    /// stays announced until deleted through the API (the store does not tell a published
    /// wildcard from one created through the API). Returns how many entries it wrote.
    pub async fn publish_root(&self, patterns: &[Pattern]) -> Result<usize, Error> {
        let Some(base) = self.advertise() else {
            return Err(Error::Starting);
        };
        let mut written = 0;
        for pattern in patterns {
            let physical = match pattern {
                Pattern::Exact(url) => format!("{base}{url}"),
                Pattern::Prefix(prefix) => format!("{base}{prefix}*"),
            };
            let held = self.own(pattern);
            if held.is_some_and(|e| !e.deleted && e.physical == physical) {
                continue;
            }
            self.put(pattern.clone(), physical, None).await?;
            written += 1;
        }
        Ok(written)
    }
}

/// What a directory entry costs against a node's byte cap: its key and unsigned value.
fn gossip_bytes(key: &str, payload: &str) -> usize {
    key.len() + payload.len()
}

/// Merges every change of the live nodes' states into `view`.
async fn listen(
    mut watcher: watch::Receiver<BTreeMap<ChitchatId, NodeState>>,
    mut merge: Merge,
    view: Arc<RwLock<View>>,
    changes: watch::Sender<u64>,
) {
    loop {
        let live: Vec<Heard> = watcher
            .borrow_and_update()
            .iter()
            .map(|(id, state)| Heard {
                id: id.clone(),
                version: state.max_version(),
                keys: state
                    .key_values()
                    .filter(|(k, _)| {
                        *k == HTTP_KEY
                            || *k == KEY_KEY
                            || *k == crate::placement::LOAD_KEY
                            || k.starts_with(KEY_PREFIX)
                    })
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            })
            .collect();
        let changed = merge.apply(&mut view.write(), &live);
        if changed {
            changes.send_replace(view.read().version);
        }
        if watcher.changed().await.is_err() {
            return;
        }
    }
}

/// What chitchat holds of one live node: its id, its state's version, its keys of ours.
#[derive(Debug, Clone)]
struct Heard {
    id: ChitchatId,
    version: u64,
    keys: Vec<(String, String)>,
}

/// The most malformed updates remembered (so that each is counted and logged once); past it
/// the memory is cleared, so a hostile peer costs log lines, not memory.
const MAX_REFUSED: usize = 4096;

/// What a node takes from its peers' states.
#[derive(Debug, Clone)]
struct Policy {
    me: String,
    /// This node's public key: another instance under its name with another key is an
    /// impostor.
    my_key: String,
    cluster_id: String,
    replica_hosts: Vec<String>,
    max_entries: usize,
    max_bytes: usize,
    /// When not empty, the only names admitted, each bound to its key from the start.
    members: BTreeMap<String, String>,
}

impl Policy {
    fn of(settings: &Settings, identity: &Identity) -> Policy {
        Policy {
            me: settings.name.clone(),
            my_key: identity.public().to_owned(),
            cluster_id: settings.cluster_id.clone(),
            replica_hosts: settings.replica_hosts.clone(),
            max_entries: settings.max_node_entries,
            max_bytes: settings.max_node_bytes,
            members: settings.members.clone(),
        }
    }
}

/// Why an update from a peer was refused.
#[derive(Debug)]
enum Refused {
    Parse(ParseError),
    Unsigned,
    Advertise,
    Physical(PhysicalError),
    OverCap,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Parse(e) => write!(f, "{e}"),
            Refused::Unsigned => f.write_str("not signed by the node's key"),
            Refused::Advertise => f.write_str("not a base URL like http://host:port"),
            Refused::Physical(e) => write!(f, "{e}"),
            Refused::OverCap => {
                f.write_str("past the node's cap (max_node_entries, max_node_bytes)")
            }
        }
    }
}

/// The merge of chitchat's live node states into a view, remembering what it has merged.
#[derive(Debug)]
struct Merge {
    policy: Policy,
    /// The `max_version` of each node state last merged: an unchanged state is skipped.
    merged: HashMap<ChitchatId, u64>,
    /// The malformed updates already refused (each is counted and logged once).
    refused: HashSet<(String, String, String)>,
    /// Each name's key, bound at first sight for as long as this node runs.
    pins: HashMap<String, String>,
    /// Node instances refused for their key (each counted and logged once).
    impostors: HashSet<ChitchatId>,
}

impl Merge {
    fn new(policy: Policy) -> Merge {
        let mut pins: HashMap<String, String> = policy.members.clone().into_iter().collect();
        pins.insert(policy.me.clone(), policy.my_key.clone());
        Merge {
            pins,
            policy,
            merged: HashMap::new(),
            refused: HashSet::new(),
            impostors: HashSet::new(),
        }
    }

    /// Merges `live` into `view`; returns whether the view changed.
    fn apply(&mut self, view: &mut View, live: &[Heard]) -> bool {
        let mut changed = false;
        let mut admitted: BTreeSet<String> = BTreeSet::new();
        for heard in live {
            let name = heard.id.node_id.to_string();
            let Some(public) = self.admit(view, heard, &name) else {
                continue;
            };
            if name == self.policy.me {
                // This node, or an earlier instance of it: its own entries come from its store.
                continue;
            }
            admitted.insert(name.clone());
            if self.merged.get(&heard.id) == Some(&heard.version) {
                continue;
            }
            self.merged.insert(heard.id.clone(), heard.version);
            changed |= self.merge_node(view, heard, &name, &public);
            let info = node_info(view, &name);
            if info.state_version != heard.version {
                info.state_version = heard.version;
                changed = true;
            }
        }
        let ids: HashSet<&ChitchatId> = live.iter().map(|h| &h.id).collect();
        self.merged.retain(|id, _| ids.contains(id));
        for (name, info) in view.nodes.iter_mut() {
            let live = *name == self.policy.me || admitted.contains(name);
            if info.live != live {
                info.live = live;
                changed = true;
            }
        }
        for name in admitted {
            if let std::collections::btree_map::Entry::Vacant(slot) = view.nodes.entry(name) {
                slot.insert(NodeInfo {
                    advertise: None,
                    live: true,
                    load: None,
                    state_version: 0,
                });
                changed = true;
            }
        }
        if changed {
            view.version += 1;
        }
        changed
    }

    /// The key of a node instance whose name is bound to it (binding a new name); `None`, and
    /// the instance counted once, when it has no key or another than its name's.
    fn admit(&mut self, view: &mut View, heard: &Heard, name: &str) -> Option<String> {
        let public = heard
            .keys
            .iter()
            .find(|(k, _)| k == KEY_KEY)
            .map(|(_, v)| v.as_str())
            .filter(|k| identity::is_public_key(k));
        let refuse = |merge: &mut Merge, view: &mut View, why: &str| {
            if merge.impostors.len() >= MAX_REFUSED {
                merge.impostors.clear();
            }
            if merge.impostors.insert(heard.id.clone()) {
                view.impostors += 1;
                tracing::warn!(node = name, gossip = %heard.id.gossip_advertise_addr, "refused a node instance: {why}");
            }
        };
        let Some(public) = public else {
            // Its key may still be on its way (chitchat sends a state in parts): refused until
            // it arrives, and not counted.
            return None;
        };
        match self.pins.get(name) {
            Some(pinned) if pinned != public => {
                refuse(
                    self,
                    view,
                    "its name is bound to another key (a node reusing a member's name; a \
                     reinstalled node needs its old node.key or a new name)",
                );
                None
            }
            Some(_) => Some(public.to_owned()),
            None if !self.policy.members.is_empty() => {
                refuse(self, view, "its name is not among the cluster's `members`");
                None
            }
            None => {
                self.pins.insert(name.to_owned(), public.to_owned());
                Some(public.to_owned())
            }
        }
    }

    /// Merges one admitted node instance's keys; returns whether the view changed.
    fn merge_node(&mut self, view: &mut View, heard: &Heard, name: &str, public: &str) -> bool {
        let mut changed = false;
        let verify = |key: &str, value: &'_ str| -> Option<String> {
            identity::verify(public, &self.policy.cluster_id, name, key, value).map(str::to_owned)
        };
        // The node's own origin first: its entries are checked against it.
        let advertise = heard
            .keys
            .iter()
            .find(|(k, _)| k == HTTP_KEY)
            .and_then(|(k, v)| verify(k, v).filter(|b| is_base_url(b)));
        let (mut entries, mut bytes) = (0usize, 0usize);
        let mut refusals = Vec::new();
        for (key, value) in &heard.keys {
            let (key, value) = (key.as_str(), value.as_str());
            if key == KEY_KEY {
                continue;
            }
            let Some(payload) = verify(key, value) else {
                refusals.push((key, value, Refused::Unsigned));
                continue;
            };
            if key == HTTP_KEY {
                if !is_base_url(&payload) {
                    refusals.push((key, value, Refused::Advertise));
                    continue;
                }
                let info = node_info(view, name);
                if info.advertise.as_deref() != Some(payload.as_str()) {
                    info.advertise = Some(payload);
                    changed = true;
                }
            } else if key == crate::placement::LOAD_KEY {
                let load = payload
                    .parse::<f64>()
                    .ok()
                    .filter(|l| l.is_finite() && *l >= 0.0);
                let info = node_info(view, name);
                if info.load != load {
                    info.load = load;
                    changed = true;
                }
            } else if key.starts_with(KEY_PREFIX) {
                entries += 1;
                bytes += gossip_bytes(key, &payload);
                if entries > self.policy.max_entries || bytes > self.policy.max_bytes {
                    refusals.push((key, value, Refused::OverCap));
                    continue;
                }
                let (pattern, entry) = match crate::directory::parse_update(key, payload.as_bytes())
                {
                    Ok(update) => update,
                    Err(e) => {
                        refusals.push((key, value, Refused::Parse(e)));
                        continue;
                    }
                };
                if !entry.deleted {
                    if let Err(e) = check_physical(
                        &entry.physical,
                        advertise.as_deref(),
                        &self.policy.replica_hosts,
                    ) {
                        refusals.push((key, value, Refused::Physical(e)));
                        continue;
                    }
                }
                changed |= view.directory.apply(name, &pattern, entry);
            }
        }
        for (key, value, why) in refusals {
            self.refuse(view, name, key, value, &why);
        }
        changed
    }

    fn refuse(&mut self, view: &mut View, node: &str, key: &str, value: &str, why: &Refused) {
        if self.refused.len() >= MAX_REFUSED {
            self.refused.clear();
        }
        let what = (node.to_owned(), key.to_owned(), value.to_owned());
        if self.refused.insert(what) {
            view.rejected += 1;
            tracing::warn!(node, key, "refused a directory update: {why}");
        }
    }
}

/// The view's record of `name`, made when first heard.
fn node_info<'v>(view: &'v mut View, name: &str) -> &'v mut NodeInfo {
    view.nodes.entry(name.to_owned()).or_insert(NodeInfo {
        advertise: None,
        live: true,
        load: None,
        state_version: 0,
    })
}

#[cfg(test)]
mod tests;
