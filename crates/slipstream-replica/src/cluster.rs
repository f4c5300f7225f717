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

use chitchat::transport::UdpTransport;
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::directory::{Directory, Entry, NodeId, ParseError, Pattern, KEY_PREFIX};
use crate::store::{self, Content, Store};

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
}

/// One node's view of the cluster: the merged directory and the nodes.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Every node's entries, merged.
    pub directory: Directory,
    /// Every node heard of, by name.
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// Distinct malformed updates refused from peers' states.
    pub rejected: u64,
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

        let mut initial: Vec<(String, String)> = store.own().gossip().collect();
        if let Some(base) = &settings.advertise {
            initial.push((HTTP_KEY.to_owned(), base.clone()));
        }
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
            protocol_version: chitchat::ProtocolVersion::V0,
        };
        let handle = spawn_chitchat(config, initial, &UdpTransport)
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
            settings.name.clone(),
            view.clone(),
            changes_tx,
        ));
        Ok(Cluster {
            advertise: RwLock::new(settings.advertise.clone()),
            settings,
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

    /// The base URL peers and browsers reach this node at, once known.
    pub fn advertise(&self) -> Option<String> {
        self.advertise.read().clone()
    }

    /// Sets the base URL (when the settings had none: the server's bound address).
    pub async fn advertise_at(&self, base: &str) {
        let base = base.trim_end_matches('/').to_owned();
        *self.advertise.write() = Some(base.clone());
        self.handle
            .with_chitchat(|c| c.self_node_state().set(HTTP_KEY, &base))
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
        self.handle
            .with_chitchat(|c| c.self_node_state().set(key, value))
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
        let _order = self.writer.lock().await;
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
        self.handle
            .with_chitchat(|c| c.self_node_state().set(pattern.key(), entry.encode()))
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

/// Merges every change of the live nodes' states into `view`.
async fn listen(
    mut watcher: watch::Receiver<BTreeMap<ChitchatId, NodeState>>,
    me: String,
    view: Arc<RwLock<View>>,
    changes: watch::Sender<u64>,
) {
    let mut merge = Merge::new(me);
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

/// The merge of chitchat's live node states into a view, remembering what it has merged.
#[derive(Debug)]
struct Merge {
    me: String,
    /// The `max_version` of each node state last merged: an unchanged state is skipped.
    merged: HashMap<ChitchatId, u64>,
    /// The malformed updates already refused (each is counted and logged once).
    refused: HashSet<(String, String, String)>,
}

impl Merge {
    fn new(me: String) -> Merge {
        Merge {
            me,
            merged: HashMap::new(),
            refused: HashSet::new(),
        }
    }

    /// Merges `live` into `view`; returns whether the view changed.
    fn apply(&mut self, view: &mut View, live: &[Heard]) -> bool {
        let mut changed = false;
        for heard in live {
            let name = heard.id.node_id.to_string();
            if name == self.me || self.merged.get(&heard.id) == Some(&heard.version) {
                continue;
            }
            self.merged.insert(heard.id.clone(), heard.version);
            for (key, value) in &heard.keys {
                let (key, value) = (key.as_str(), value.as_str());
                if key == HTTP_KEY {
                    let info = view.nodes.entry(name.clone()).or_insert(NodeInfo {
                        advertise: None,
                        live: true,
                        load: None,
                    });
                    if info.advertise.as_deref() != Some(value) {
                        info.advertise = Some(value.to_owned());
                        changed = true;
                    }
                } else if key == crate::placement::LOAD_KEY {
                    let load = value
                        .parse::<f64>()
                        .ok()
                        .filter(|l| l.is_finite() && *l >= 0.0);
                    let info = view.nodes.entry(name.clone()).or_insert(NodeInfo {
                        advertise: None,
                        live: true,
                        load: None,
                    });
                    if info.load != load {
                        info.load = load;
                        changed = true;
                    }
                } else if key.starts_with(KEY_PREFIX) {
                    match view.directory.apply_gossip(&name, key, value.as_bytes()) {
                        Ok(c) => changed |= c,
                        Err(e) => self.refuse(view, &name, key, value, &e),
                    }
                }
            }
        }
        let ids: HashSet<&ChitchatId> = live.iter().map(|h| &h.id).collect();
        self.merged.retain(|id, _| ids.contains(id));
        let names: BTreeSet<String> = live.iter().map(|h| h.id.node_id.to_string()).collect();
        for (name, info) in view.nodes.iter_mut() {
            let live = *name == self.me || names.contains(name);
            if info.live != live {
                info.live = live;
                changed = true;
            }
        }
        for name in names {
            if let std::collections::btree_map::Entry::Vacant(slot) = view.nodes.entry(name) {
                slot.insert(NodeInfo {
                    advertise: None,
                    live: true,
                    load: None,
                });
                changed = true;
            }
        }
        if changed {
            view.version += 1;
        }
        changed
    }

    fn refuse(&mut self, view: &mut View, node: &str, key: &str, value: &str, error: &ParseError) {
        if self.refused.len() >= MAX_REFUSED {
            self.refused.clear();
        }
        let what = (node.to_owned(), key.to_owned(), value.to_owned());
        if self.refused.insert(what) {
            view.rejected += 1;
            tracing::warn!(node, key, "refused a malformed directory update: {error}");
        }
    }
}

#[cfg(test)]
mod tests;
