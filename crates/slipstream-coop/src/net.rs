//! The peer-to-peer layer (004 §3.2 with libp2p in Tapestry's place): Kademlia provider
//! records say which nodes hold an object, request-response carries objects between nodes,
//! gossipsub pushes updates to replicas, identify and ping tell us about peers.
//!
//! Pushes follow a locality-aware tree per site ([`PushMode::Tree`], the default; `[coop] push =
//! "mesh"` for gossipsub's mesh; the decisions
//! are in [`crate::tree`]): gossipsub runs with no mesh, no gossip and no flood publishing, so
//! it sends a message only to its *explicit peers*, which are the tree's edges. A node that
//! publishes on a site's topic (a gateway; [`Client::lead`] makes one without a push) is a root;
//! every other follower of the site asks its connected followers, nearest first by the least
//! ping RTT seen (a large push queued ahead of a ping must not move the tree), for a place ([`CoopRequest::TreeJoin`]) and takes the first attached one's
//! ([`CoopResponse::Joined`], its path to the root; a path through the joiner is refused). A
//! child renews its place every digest period; a parent forgets a child silent for three; a
//! child whose parent refuses or disconnects joins again, keeping its own subtree; a child
//! moves under a follower at less than half its parent's RTT ([`CoopRequest::TreeLeave`] to
//! the old one). A push under way during a move or a rejoin may miss a replica (nothing
//! repairs it: the next push carries the newer version). Explicit peers are one set for all
//! topics, so an edge of one site's tree also carries the other sites both ends follow
//! (gossipsub drops the duplicates by message id). [`PushMode::Mesh`] keeps gossipsub's
//! default random mesh (the simulator's Fig. 22 measures both).
//!
//! One task owns the swarm ([`EventLoop`]); everything else talks to it through a [`Client`]
//! (the pattern of rust-libp2p's file-sharing example). Known libp2p pitfalls, each handled
//! here and tested in `tests/net.rs`:
//! - a node with no external address stays a Kademlia *client*: it serves nothing and its
//!   provider records carry no address, so peers drop them. Listen addresses are registered as
//!   external ones (`announce_listen_addrs`, right on a LAN or loopback) and the node runs as a
//!   Kademlia server from the start;
//! - Kademlia ignores identify, so a peer's listen addresses are added to the routing table by
//!   hand when identify reports that it speaks our Kademlia protocol;
//! - `FoundProviders` fires once per peer that answered, often empty: a lookup collects them
//!   and ends at the query's last step, its deadline, or when it has enough;
//! - Kademlia handles at most 32 inbound streams per connection and drops the rest, so
//!   provider announcements go out at most [`MAX_PROVIDING`] at a time from a backlog;
//! - the memory store's 1,024-key limits count other peers' keys too; they are raised
//!   ([`NetConfig::max_provider_keys`]), and provider lists are kept compactly
//!   (`providers::CompactStore`: libp2p's keeps 20 records inline per key, 3 KB a key);
//! - an object the store evicts or drops is no longer announced (its provider record goes);
//! - connections close 10 s after their last stream by default; ours stay up for minutes.
//!
//! A malformed message from a peer (a request that does not decode, a GUID of the wrong length,
//! an object whose signature fails) is refused or dropped and counted; it changes no state.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use libp2p::futures::StreamExt;
use libp2p::identity::{Keypair, PublicKey};
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport, ResponseChannel};
use libp2p::swarm::{behaviour::toggle::Toggle, NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, identify, kad, mdns, noise, ping, tcp, yamux};
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::object::{DecodeError, Freshness, Guid, SignedObject, VerifyError};
use crate::store::{Put, Store};

/// Our Kademlia protocol: a private DHT, not the IPFS one.
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/slipstream/coop/kad/1.0.0");
/// Object transfer between nodes.
pub const FETCH_PROTOCOL: StreamProtocol = StreamProtocol::new("/slipstream/coop/fetch/1.0.0");
/// What identify announces.
pub const IDENTIFY_VERSION: &str = "/slipstream/coop/1.0.0";
/// Provider announcements in flight at most (Kademlia's 32 streams a connection).
pub const MAX_PROVIDING: usize = 16;
/// Addresses kept for each connected peer (those its identify message lists first).
pub const MAX_ADDRS_PER_PEER: usize = 4;
/// The largest request: a digest of `digest_depth × digest_bits / 8` bytes must fit (the
/// default is 24 KiB).
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;
/// The largest object response (the object format's own bounds are lower).
const MAX_RESPONSE_BYTES: u64 = 80 * 1024 * 1024;

/// A request from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoopRequest {
    /// Send the object with this GUID (32 bytes) if you hold it.
    Fetch(#[serde(with = "serde_bytes")] Vec<u8>),
    /// (To a gateway.) Fetch this URL from its origin and insert it into the cache (004 §4.4:
    /// a miss hint becomes an insert).
    Insert(String),
    /// (To a cache manager, from a browser proxy.) This URL was not found nearby (§4.4).
    MissHint(String),
    /// The sender's attenuated Bloom filter of what lies near it (§3.2.2), encoded.
    Digest(#[serde(with = "serde_bytes")] Vec<u8>),
    /// (From a cache manager.) Make a replica of this GUID here, from its providers (§4.4).
    Replicate(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Send the version of this GUID that had arrived at its gateway by this time (Unix
    /// milliseconds), current or past, if you hold it (time travel, §8).
    FetchAt(#[serde(with = "serde_bytes")] Vec<u8>, u64),
    /// Send the object with this GUID if you hold it and it is fresh by your clock (RFC 9111
    /// §4.2); [`CoopResponse::Stale`] if it is not, so that no stale body crosses the network
    /// only to be thrown away.
    FetchFresh(#[serde(with = "serde_bytes")] Vec<u8>),
    /// (To a gateway.) Make sure this URL's object is fresh, revalidating it with its origin
    /// if it is not (one conditional request however many ask at once), and answer with its
    /// freshness record when the sender holds the body whose SHA-256 follows (empty: none
    /// held), or with the whole object.
    Revalidate(String, #[serde(with = "serde_bytes")] Vec<u8>),
    /// Give me a place under you in this site topic's push tree (or renew mine); the root of
    /// the tree I am in follows (a peer id's bytes; empty: I am in none).
    TreeJoin(String, #[serde(with = "serde_bytes")] Vec<u8>),
    /// I have moved under another parent in this site topic's push tree: forget me as a child.
    TreeLeave(String),
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoopResponse {
    /// The object, in [`SignedObject::encode`]'s form.
    Object(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Not held here.
    Miss,
    /// The request was malformed, or this node cannot do it; why.
    Refused(String),
    /// (From a gateway.) Inserted: the object's GUID.
    Inserted(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A digest was taken.
    Ack,
    /// A version asked for by time ([`CoopRequest::FetchAt`]): the object and when that
    /// version was captured (Unix ms; a heartbeat renews the object's own times, not this).
    ObjectAt(#[serde(with = "serde_bytes")] Vec<u8>, u64),
    /// ([`CoopRequest::FetchFresh`].) Held, but stale here.
    Stale,
    /// ([`CoopRequest::Revalidate`].) The object's freshness record, in
    /// [`Freshness::encode`]'s form: the body the sender holds is current.
    Fresh(#[serde(with = "serde_bytes")] Vec<u8>),
    /// ([`CoopRequest::TreeJoin`].) Accepted: the push tree's path from its root down to this
    /// node, each a peer id's bytes.
    Joined(Vec<serde_bytes::ByteBuf>),
}

/// What a peer asks of a node's roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleRequest {
    /// Insert this URL (a gateway's job).
    Insert(String),
    /// This URL was missed nearby (a cache manager's job).
    MissHint(String),
    /// Hold a replica of this object (every node's job: each is a content cache, §4.2.1).
    Replicate(Guid),
    /// Revalidate this URL; the sender holds the body with this SHA-256, if any (a gateway's
    /// job).
    Revalidate(String, Option<[u8; 32]>),
}

/// A role request the node's role task must answer (through [`Client::respond`]).
#[derive(Debug)]
pub struct Inbound {
    /// What is asked.
    pub request: RoleRequest,
    /// Where the answer goes.
    pub channel: ResponseChannel<CoopResponse>,
}

/// The node's libp2p behaviours.
#[derive(NetworkBehaviour)]
pub struct CoopBehaviour {
    kad: kad::Behaviour<crate::providers::CompactStore>,
    identify: identify::Behaviour,
    mdns: Toggle<mdns::tokio::Behaviour>,
    fetch: request_response::cbor::Behaviour<CoopRequest, CoopResponse>,
    gossipsub: gossipsub::Behaviour,
    ping: ping::Behaviour,
}

impl std::fmt::Debug for CoopBehaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoopBehaviour").finish_non_exhaustive()
    }
}

/// How a node joins the network.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Addresses to listen on, e.g. `/ip4/127.0.0.1/tcp/0`.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start, each ending in `/p2p/<peer id>`.
    pub bootstrap: Vec<Multiaddr>,
    /// Find peers on the LAN by mDNS (it never sees loopback).
    pub mdns: bool,
    /// Announce the listen addresses as reachable (on a LAN or loopback they are).
    pub announce_listen_addrs: bool,
    /// Addresses peers reach this node at instead of its listen addresses (a NAT's, or a TCP
    /// proxy's in front of it): announced alone, the listen addresses hidden from identify.
    pub external: Vec<Multiaddr>,
    /// Exchange attenuated Bloom-filter digests with neighbours (004 §3.2.2's fast path);
    /// off, every lookup past the node's own store walks the DHT.
    pub digests: bool,
    /// Cache providers whose objects this node accepts.
    pub trusted: Vec<PublicKey>,
    /// Distinct keys the Kademlia store holds provider records for (its own and others').
    pub max_provider_keys: usize,
    /// How long a request to a peer may take.
    pub request_timeout: Duration,
    /// How often each peer's RTT is measured.
    pub ping_interval: Duration,
    /// How often the node sends its neighbours its digest (attenuated Bloom filters).
    pub digest_every: Duration,
    /// The digest's levels (hops it describes).
    pub digest_depth: usize,
    /// Bits per level (`digest_depth × digest_bits / 8` at most [`MAX_REQUEST_BYTES`]).
    pub digest_bits: usize,
    /// How pushed updates reach a site's replicas.
    pub push: PushMode,
}

/// How pushed updates reach a site's replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PushMode {
    /// Along a tree of near peers ([`crate::tree`]): gossipsub sends only to explicit peers.
    #[default]
    Tree,
    /// Gossipsub's default mesh: about six random topic peers each, flood publishing.
    Mesh,
}

/// Site topics a node keeps a push tree for at most (past it, a topic is followed without one,
/// and gets no pushes in [`PushMode::Tree`]).
pub const MAX_TREE_TOPICS: usize = 4096;

/// A node's place in one site's push tree ([`Client::push_tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeView {
    /// It publishes on the site's topic and has no parent.
    pub root: bool,
    /// Its parent.
    pub parent: Option<PeerId>,
    /// Its distance from the root (0: a root or unattached).
    pub depth: usize,
    /// Its children.
    pub children: Vec<PeerId>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("a valid address")],
            bootstrap: Vec::new(),
            mdns: false,
            announce_listen_addrs: true,
            external: Vec::new(),
            digests: true,
            trusted: Vec::new(),
            max_provider_keys: 1 << 17,
            request_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(5),
            digest_every: Duration::from_secs(2),
            digest_depth: 3,
            digest_bits: 1 << 16,
            push: PushMode::Tree,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl CoopBehaviour {
    /// The behaviours for the node whose key is `key`.
    pub fn new(key: &Keypair, config: &NetConfig) -> Result<CoopBehaviour, BoxError> {
        let digest_bytes = config.digest_depth.saturating_mul(config.digest_bits) / 8;
        if digest_bytes as u64 > MAX_REQUEST_BYTES {
            return Err(format!(
                "a digest of {} levels of {} bits ({digest_bytes} bytes) exceeds the {MAX_REQUEST_BYTES}-byte request limit",
                config.digest_depth, config.digest_bits
            )
            .into());
        }
        let peer = key.public().to_peer_id();
        let mut kcfg = kad::Config::new(KAD_PROTOCOL);
        kcfg.set_query_timeout(Duration::from_secs(20));
        let store = crate::providers::CompactStore::new(
            peer,
            crate::providers::Limits {
                max_provided_keys: config.max_provider_keys,
                ..Default::default()
            },
        );
        let mut kad = kad::Behaviour::with_config(peer, store, kcfg);
        kad.set_mode(Some(kad::Mode::Server));
        let identify = identify::Behaviour::new(
            identify::Config::new(IDENTIFY_VERSION.to_owned(), key.public())
                .with_hide_listen_addrs(!config.external.is_empty()),
        );
        let mdns = Toggle::from(if config.mdns {
            Some(mdns::tokio::Behaviour::new(mdns::Config::default(), peer)?)
        } else {
            None
        });
        let fetch = request_response::Behaviour::with_codec(
            request_response::cbor::codec::Codec::<CoopRequest, CoopResponse>::default()
                .set_request_size_maximum(MAX_REQUEST_BYTES)
                .set_response_size_maximum(MAX_RESPONSE_BYTES),
            [(FETCH_PROTOCOL, ProtocolSupport::Full)],
            request_response::Config::default().with_request_timeout(config.request_timeout),
        );
        let mut gcfg = gossipsub::ConfigBuilder::default();
        if config.push == PushMode::Tree {
            // No mesh, no gossip, no flood: a message goes to the explicit peers only (the
            // tree's edges, kept by the event loop).
            gcfg.mesh_n(0)
                .mesh_n_low(0)
                .mesh_n_high(0)
                .mesh_outbound_min(0)
                .gossip_lazy(0)
                .gossip_factor(0.0)
                .flood_publish(false);
        }
        let gcfg = gcfg
            .validation_mode(gossipsub::ValidationMode::Strict)
            .max_transmit_size(MAX_RESPONSE_BYTES as usize)
            .message_id_fn(|m: &gossipsub::Message| {
                let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
                if let Some(s) = &m.source {
                    ctx.update(&s.to_bytes());
                }
                if let Some(n) = m.sequence_number {
                    ctx.update(&n.to_be_bytes());
                }
                ctx.update(&m.data);
                gossipsub::MessageId::from(ctx.finish().as_ref()[..20].to_vec())
            })
            .build()
            .map_err(|e| e.to_string())?;
        let gossipsub =
            gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key.clone()), gcfg)?;
        let ping = ping::Behaviour::new(ping::Config::new().with_interval(config.ping_interval));
        Ok(CoopBehaviour {
            kad,
            identify,
            mdns,
            fetch,
            gossipsub,
            ping,
        })
    }
}

/// A swarm over TCP + noise + yamux for `key`.
pub fn tcp_swarm(key: Keypair, config: &NetConfig) -> Result<Swarm<CoopBehaviour>, BoxError> {
    Ok(libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )?
        .with_behaviour(|key| CoopBehaviour::new(key, config))?
        .with_swarm_config(|c| {
            // Every request opens a stream; with multistream-select's V1 the dialer waits a
            // round trip for the protocol to be accepted before it sends the request. Each of
            // our streams proposes exactly one protocol, so V1Lazy sends the request with the
            // proposal: one round trip a fetch instead of two (measured: a hit through a
            // neighbour 3 ms away took 14.2 ms at the median against the central proxy's
            // 7.1 ms, docs/experiments/004-riptide.md).
            c.with_idle_connection_timeout(Duration::from_secs(300))
                .with_substream_upgrade_protocol_override(libp2p::core::upgrade::Version::V1Lazy)
        })
        .build())
}

/// Why a fetch from a peer gave no object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The peer does not hold it.
    #[error("the peer does not hold it")]
    Miss,
    /// The peer refused the request.
    #[error("the peer refused: {0}")]
    Refused(String),
    /// The peer's answer did not decode.
    #[error("the peer sent a malformed object: {0}")]
    Malformed(DecodeError),
    /// The object failed verification.
    #[error("the peer's object was rejected: {0}")]
    Rejected(VerifyError),
    /// The request failed (dial, timeout, closed connection).
    #[error("the request failed: {0}")]
    Network(String),
    /// The peer holds it, but not fresh ([`CoopRequest::FetchFresh`]).
    #[error("the peer's copy is stale")]
    Stale,
}

/// Counters, for the status page and the tests.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Fetch requests answered with an object.
    pub served: AtomicU64,
    /// Fetch requests answered "miss".
    pub missed: AtomicU64,
    /// Requests refused as malformed, and inbound requests that failed after they were read.
    /// (A stream that does not decode at all is dropped by libp2p without telling us.)
    pub malformed: AtomicU64,
    /// Objects from peers rejected by verification.
    pub rejected: AtomicU64,
    /// Pushed updates applied to a replica.
    pub updates_applied: AtomicU64,
    /// Pushed updates that did not decode or verify (tampered, unsigned, untrusted).
    pub updates_rejected: AtomicU64,
    /// Pushed updates for objects not held here, or not newer than the version held.
    pub updates_ignored: AtomicU64,
    /// Pushed freshness records applied to a replica (its head renewed, no body moved).
    pub records_applied: AtomicU64,
    /// Fetches answered "stale" rather than with a body.
    pub stale_refused: AtomicU64,
}

/// A peer and what we know of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its identity.
    pub peer: PeerId,
    /// The latest ping RTT.
    pub rtt: Option<Duration>,
}

enum Command {
    Dial(Multiaddr, oneshot::Sender<Result<(), String>>),
    Provide(Guid),
    FindProviders {
        guid: Guid,
        want: usize,
        done: oneshot::Sender<Vec<PeerId>>,
    },
    Fetch {
        peer: PeerId,
        guid: Guid,
        at_ms: Option<u64>,
        done: oneshot::Sender<Result<CoopResponse, String>>,
    },
    Subscribe(String),
    Publish {
        topic: String,
        data: Vec<u8>,
        done: oneshot::Sender<Result<(), String>>,
    },
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    Addresses(oneshot::Sender<Vec<Multiaddr>>),
    Listeners(oneshot::Sender<Vec<Multiaddr>>),
    Known(oneshot::Sender<Vec<Multiaddr>>),
    Respond(ResponseChannel<CoopResponse>, CoopResponse),
    Nearby(Guid, oneshot::Sender<Vec<(PeerId, usize)>>),
    Ask {
        peer: PeerId,
        request: CoopRequest,
        done: oneshot::Sender<Result<CoopResponse, String>>,
    },
    Lead(String),
    Tree(String, oneshot::Sender<Option<TreeView>>),
}

/// The handle the rest of the node uses; cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    tx: mpsc::Sender<Command>,
    peer: PeerId,
    trusted: Arc<Vec<PublicKey>>,
    store: Arc<Store>,
    stats: Arc<NetStats>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Command")
    }
}

const GONE: &str = "the node's network task has stopped";

impl Client {
    /// This node's identity.
    pub fn peer_id(&self) -> PeerId {
        self.peer
    }

    /// The node's counters.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// The node's objects.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Dials `addr` (ending in `/p2p/<peer id>`); done when the connection is up.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), String> {
        self.ask(|tx| Command::Dial(addr, tx))
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
    }

    /// The addresses the node listens on, with its peer id.
    pub async fn addresses(&self) -> Vec<Multiaddr> {
        self.ask(Command::Addresses).await.unwrap_or_default()
    }

    /// The addresses of the connected DHT peers, each ending in `/p2p/<peer id>`: what a node
    /// keeps to find its way back after a restart.
    pub async fn known(&self) -> Vec<Multiaddr> {
        self.ask(Command::Known).await.unwrap_or_default()
    }

    /// The sockets the swarm listens on (not the external addresses it announces).
    pub async fn listeners(&self) -> Vec<Multiaddr> {
        self.ask(Command::Listeners).await.unwrap_or_default()
    }

    /// Connected peers.
    pub async fn peers(&self) -> Vec<PeerInfo> {
        self.ask(Command::Peers).await.unwrap_or_default()
    }

    /// Announces that this node holds `guid` (queued; at most [`MAX_PROVIDING`] in flight).
    pub async fn provide(&self, guid: Guid) {
        let _ = self.tx.send(Command::Provide(guid)).await;
    }

    /// Up to `want` peers (not this node) that announced `guid`, within `deadline`.
    pub async fn find_providers(&self, guid: Guid, want: usize, deadline: Duration) -> Vec<PeerId> {
        let found = self.ask(|done| Command::FindProviders { guid, want, done });
        tokio::time::timeout(deadline, found)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Asks `peer` for `guid` and verifies what comes back against the trusted providers.
    pub async fn fetch(&self, peer: PeerId, guid: Guid) -> Result<SignedObject, FetchError> {
        self.fetch_version(peer, guid, None).await.map(|(o, _)| o)
    }

    /// Asks `peer` for the version of `guid` that had arrived at its gateway by `at_ms` (Unix
    /// milliseconds), verified; a later version than asked for is refused.
    pub async fn fetch_at(
        &self,
        peer: PeerId,
        guid: Guid,
        at_ms: u64,
    ) -> Result<(SignedObject, u64), FetchError> {
        let (object, captured) = self.fetch_version(peer, guid, Some(at_ms)).await?;
        if captured > at_ms {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(FetchError::Refused(format!(
                "version {} is later than asked for",
                object.object.version
            )));
        }
        Ok((object, captured))
    }

    /// The object and when its version was captured (its own exchange time when the peer
    /// does not say).
    async fn fetch_version(
        &self,
        peer: PeerId,
        guid: Guid,
        at_ms: Option<u64>,
    ) -> Result<(SignedObject, u64), FetchError> {
        let answer = self
            .ask(|done| Command::Fetch {
                peer,
                guid,
                at_ms,
                done,
            })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
            .map_err(FetchError::Network)?;
        let (bytes, captured) = match answer {
            CoopResponse::Object(bytes) => (bytes, None),
            CoopResponse::ObjectAt(bytes, t) => (bytes, Some(t)),
            CoopResponse::Miss => return Err(FetchError::Miss),
            CoopResponse::Refused(why) => return Err(FetchError::Refused(why)),
            CoopResponse::Inserted(_)
            | CoopResponse::Ack
            | CoopResponse::Stale
            | CoopResponse::Fresh(_)
            | CoopResponse::Joined(_) => {
                return Err(FetchError::Refused("an answer of another request".into()))
            }
        };
        let object = self.verified(&bytes, &guid)?;
        // A version is never captured after its object's exchange.
        let received = object.object.received_at_ms;
        Ok((object, captured.map_or(received, |t| t.min(received))))
    }

    /// Asks `peer` for `guid` only if its copy is fresh by its clock; verified.
    pub async fn fetch_fresh(&self, peer: PeerId, guid: Guid) -> Result<SignedObject, FetchError> {
        let answer = self
            .ask(|done| Command::Ask {
                peer,
                request: CoopRequest::FetchFresh(guid.0.to_vec()),
                done,
            })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
            .map_err(FetchError::Network)?;
        match answer {
            CoopResponse::Object(bytes) => self.verified(&bytes, &guid),
            CoopResponse::Stale => Err(FetchError::Stale),
            CoopResponse::Miss => Err(FetchError::Miss),
            CoopResponse::Refused(why) => Err(FetchError::Refused(why)),
            other => Err(FetchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Asks the gateway `peer` to revalidate `url` (RFC 9111 §4.3 through the gateway): the
    /// object renewed, verified, from the freshness record it sends when `held` (this node's
    /// stale copy) has the current body, or whole when the object changed or none is held.
    /// Whether a record did it comes back too.
    pub async fn revalidate_via(
        &self,
        peer: PeerId,
        url: &str,
        held: Option<&SignedObject>,
    ) -> Result<(SignedObject, bool), FetchError> {
        let hash = held.map_or_else(Vec::new, |h| h.object.body_hash().to_vec());
        let answer = self
            .ask(|done| Command::Ask {
                peer,
                request: CoopRequest::Revalidate(url.to_owned(), hash),
                done,
            })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
            .map_err(FetchError::Network)?;
        let guid = match (held, self.trusted.first()) {
            (Some(h), _) => h.guid(),
            (None, Some(provider)) => Guid::new(provider, url),
            (None, None) => return Err(FetchError::Refused("no provider is trusted".into())),
        };
        match (answer, held) {
            (CoopResponse::Object(bytes), _) => Ok((self.verified(&bytes, &guid)?, false)),
            (CoopResponse::Fresh(bytes), Some(held)) => {
                let record = Freshness::decode(&bytes).map_err(|e| {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    FetchError::Malformed(e)
                })?;
                let renewed = record.apply(held, &self.trusted).map_err(|e| {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    FetchError::Rejected(e)
                })?;
                Ok((renewed, true))
            }
            (CoopResponse::Refused(why), _) => Err(FetchError::Refused(why)),
            (other, _) => Err(FetchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// `bytes` decoded as an object and verified as `guid` under the trusted providers.
    fn verified(&self, bytes: &[u8], guid: &Guid) -> Result<SignedObject, FetchError> {
        let object = SignedObject::decode(bytes).map_err(|e| {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            FetchError::Malformed(e)
        })?;
        object.verify(&self.trusted, Some(guid)).map_err(|e| {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            FetchError::Rejected(e)
        })?;
        Ok(object)
    }

    /// Pushes `record` (a gateway's revalidation, §5.4's heartbeat) to the site's replicas,
    /// which renew the body they hold without moving it.
    pub async fn push_record(&self, record: &Freshness) -> Result<(), String> {
        let topic = site_topic(&record.head.url)
            .ok_or_else(|| format!("{}: not an absolute http(s) URL", record.head.url))?;
        let data = record.encode();
        self.ask(|done| Command::Publish { topic, data, done })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
    }

    /// Neighbours whose digest may hold `guid`, with the level that matched (0: the
    /// neighbour itself holds it), shallowest first: the local-area fast path.
    pub async fn nearby(&self, guid: Guid) -> Vec<(PeerId, usize)> {
        self.ask(|done| Command::Nearby(guid, done))
            .await
            .unwrap_or_default()
    }

    /// Answers an inbound insert (a gateway's task).
    pub async fn respond(&self, channel: ResponseChannel<CoopResponse>, response: CoopResponse) {
        let _ = self.tx.send(Command::Respond(channel, response)).await;
    }

    /// Asks the gateway `peer` to insert `url`; its GUID once inserted.
    pub async fn insert_via(&self, peer: PeerId, url: &str) -> Result<Guid, FetchError> {
        self.ask_role(peer, CoopRequest::Insert(url.to_owned()))
            .await
    }

    /// Tells the cache manager `peer` that `url` was missed nearby; the GUID of the replica it
    /// made.
    pub async fn hint_miss(&self, peer: PeerId, url: &str) -> Result<Guid, FetchError> {
        self.ask_role(peer, CoopRequest::MissHint(url.to_owned()))
            .await
    }

    /// Asks `peer` to hold a replica of `guid`.
    pub async fn replicate_on(&self, peer: PeerId, guid: Guid) -> Result<Guid, FetchError> {
        self.ask_role(peer, CoopRequest::Replicate(guid.0.to_vec()))
            .await
    }

    async fn ask_role(&self, peer: PeerId, request: CoopRequest) -> Result<Guid, FetchError> {
        let answer = self
            .ask(|done| Command::Ask {
                peer,
                request,
                done,
            })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
            .map_err(FetchError::Network)?;
        match answer {
            CoopResponse::Inserted(guid) => {
                Guid::from_slice(&guid).map_err(|e| FetchError::Refused(e.to_string()))
            }
            CoopResponse::Refused(why) => Err(FetchError::Refused(why)),
            other => Err(FetchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Stores a verified object, announces it, and follows its site's pushed updates.
    pub async fn hold(&self, object: SignedObject) -> Result<Put, String> {
        object
            .verify(&self.trusted, None)
            .map_err(|e| e.to_string())?;
        let guid = object.guid();
        let topic = site_topic(&object.object.url);
        // The store writes its disk mirror (a durable redb transaction): off the runtime.
        let store = self.store.clone();
        let put = tokio::task::spawn_blocking(move || store.put(object))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        if put == Put::Stored {
            self.provide(guid).await;
            if let Some(topic) = topic {
                let _ = self.tx.send(Command::Subscribe(topic)).await;
            }
        }
        Ok(put)
    }

    /// Makes this node a root of the push tree of `url`'s site, following the site: what its
    /// first push does too (a gateway pushes every monitor period).
    pub async fn lead(&self, url: &str) -> Result<(), String> {
        let topic = site_topic(url).ok_or_else(|| format!("{url}: not an absolute http(s) URL"))?;
        self.tx
            .send(Command::Lead(topic))
            .await
            .map_err(|_| GONE.to_owned())
    }

    /// This node's place in the push tree of `url`'s site (`None`: it keeps none).
    pub async fn push_tree(&self, url: &str) -> Option<TreeView> {
        let topic = site_topic(url)?;
        self.ask(|done| Command::Tree(topic, done)).await.flatten()
    }

    /// Pushes a new version of an object to its site's replicas (a gateway's monitor, §4.5).
    /// Fails when no replica follows the site yet.
    pub async fn push(&self, object: &SignedObject) -> Result<(), String> {
        let topic = site_topic(&object.object.url)
            .ok_or_else(|| format!("{}: not an absolute http(s) URL", object.object.url))?;
        let data = object.encode();
        self.ask(|done| Command::Publish { topic, data, done })
            .await
            .unwrap_or_else(|| Err(GONE.to_owned()))
    }
}

/// The gossipsub topic of the site `url` belongs to: one per site, not per object (per-object
/// topics multiply subscription traffic by the objects held).
pub fn site_topic(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return None;
    }
    let authority = uri.authority()?.as_str();
    // A URL naming credentials is nobody's site to share.
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(format!(
        "slipstream/coop/site/{}",
        authority.to_ascii_lowercase()
    ))
}

struct Lookup {
    want: usize,
    found: HashSet<PeerId>,
    done: Option<oneshot::Sender<Vec<PeerId>>>,
}

/// The task that owns the swarm.
pub struct EventLoop {
    swarm: Swarm<CoopBehaviour>,
    commands: mpsc::Receiver<Command>,
    config: NetConfig,
    store: Arc<Store>,
    trusted: Arc<Vec<PublicKey>>,
    stats: Arc<NetStats>,
    provide_backlog: VecDeque<Guid>,
    providing: HashSet<kad::QueryId>,
    lookups: HashMap<kad::QueryId, Lookup>,
    fetches: HashMap<OutboundRequestId, oneshot::Sender<Result<CoopResponse, String>>>,
    dials: HashMap<PeerId, Vec<oneshot::Sender<Result<(), String>>>>,
    rtt: HashMap<PeerId, Duration>,
    /// The least RTT each connected peer has shown: what the push tree goes by (the latest
    /// ping rises while a large push queues ahead of it, and a tree must not move for that).
    rtt_min: HashMap<PeerId, Duration>,
    /// The addresses each connected DHT peer says it listens on (at most
    /// [`MAX_ADDRS_PER_PEER`]), forgotten when its last connection closes.
    addrs: HashMap<PeerId, Vec<Multiaddr>>,
    roles: Option<mpsc::Sender<Inbound>>,
    /// Fetches this node served per object, and where an object that became hot by them is
    /// sent ([`EventLoop::report_hot`]).
    served_hot: Option<(crate::decide::HotCounter<Guid>, mpsc::Sender<Guid>)>,
    /// Where the objects a departed neighbour held along with this node are sent
    /// ([`EventLoop::report_lost`]).
    lost: Option<mpsc::Sender<Vec<Guid>>>,
    /// Each neighbour's last digest.
    digests: HashMap<PeerId, crate::bloom::Attenuated>,
    /// The push tree of each site topic followed ([`PushMode::Tree`]).
    trees: HashMap<String, crate::tree::Tree<PeerId>>,
    /// Tree joins and renewals in flight: their topic and peer, and whether a move.
    tree_asks: HashMap<OutboundRequestId, (String, PeerId, bool)>,
    /// Topics with a move ([`crate::tree::nearer`]) in flight.
    tree_moving: HashSet<String>,
    /// Topics with a join or renewal in flight.
    tree_in_flight: HashSet<String>,
    /// The peers a parentless topic has still to ask this round.
    joining: HashMap<String, VecDeque<PeerId>>,
    /// Tree edges per peer, over all topics: a peer is an explicit gossipsub peer while it has
    /// one.
    edges: HashMap<PeerId, u32>,
    /// Tree ticks so far (one a digest period).
    tick: u64,
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop")
            .field("peer", self.swarm.local_peer_id())
            .finish_non_exhaustive()
    }
}

impl EventLoop {
    /// Wraps `swarm` (from [`tcp_swarm`], or a test's memory transport), starts listening and
    /// dials the bootstrap peers. Run the loop with [`EventLoop::run`].
    pub fn new(
        mut swarm: Swarm<CoopBehaviour>,
        config: NetConfig,
        store: Arc<Store>,
    ) -> Result<(EventLoop, Client), BoxError> {
        for addr in &config.listen {
            swarm.listen_on(addr.clone())?;
        }
        let (tx, commands) = mpsc::channel(1024);
        let trusted = Arc::new(config.trusted.clone());
        let stats = Arc::new(NetStats::default());
        let client = Client {
            tx,
            peer: *swarm.local_peer_id(),
            trusted: trusted.clone(),
            store: store.clone(),
            stats: stats.clone(),
        };
        let mut event_loop = EventLoop {
            swarm,
            commands,
            config,
            store,
            trusted,
            stats,
            provide_backlog: VecDeque::new(),
            providing: HashSet::new(),
            lookups: HashMap::new(),
            fetches: HashMap::new(),
            dials: HashMap::new(),
            rtt: HashMap::new(),
            rtt_min: HashMap::new(),
            addrs: HashMap::new(),
            roles: None,
            served_hot: None,
            lost: None,
            digests: HashMap::new(),
            trees: HashMap::new(),
            tree_asks: HashMap::new(),
            tree_moving: HashSet::new(),
            tree_in_flight: HashSet::new(),
            joining: HashMap::new(),
            edges: HashMap::new(),
            tick: 0,
        };
        for addr in event_loop.config.bootstrap.clone() {
            event_loop.dial(addr, None);
        }
        // What a restarted node still holds is announced again.
        for guid in event_loop.store.guids() {
            event_loop.provide_backlog.push_back(guid);
        }
        Ok((event_loop, client))
    }

    /// Gives this node roles: role requests (inserts, miss hints) go to the returned queue,
    /// whose task answers each with [`Client::respond`] (see [`crate::roles`]). Without it the
    /// node refuses them.
    pub fn accept_role_requests(&mut self, queue: usize) -> mpsc::Receiver<Inbound> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        self.roles = Some(tx);
        rx
    }

    /// Reports each object whose copy here has served `after` fetches to peers: the load on
    /// a holder, not only misses, says that an object needs more replicas (004 §4.4, §5.1).
    pub fn report_hot(&mut self, after: u32, queue: usize) -> mpsc::Receiver<Guid> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        self.served_hot = Some((crate::decide::HotCounter::new(after), tx));
        rx
    }

    /// Reports, when a neighbour's last connection closes, the objects this node holds that
    /// its last digest says it held too (level 0): replicas that may now be too few.
    pub fn report_lost(&mut self, queue: usize) -> mpsc::Receiver<Vec<Guid>> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        self.lost = Some(tx);
        rx
    }

    /// Counts a fetch served from `guid`'s copy here.
    fn served(&mut self, guid: Guid) {
        self.stats.served.fetch_add(1, Ordering::Relaxed);
        if let Some((counter, tx)) = &mut self.served_hot {
            if counter.hint(guid) {
                // Full: the spreading task is behind; this object waits for the next round.
                let _ = tx.try_send(guid);
            }
        }
    }

    /// Runs until every [`Client`] is dropped.
    pub async fn run(mut self) {
        let mut digest = tokio::time::interval(self.config.digest_every);
        digest.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let digests = self.config.digests;
        let mut tree_tick = tokio::time::interval(self.config.digest_every);
        tree_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let trees = self.config.push == PushMode::Tree;
        for a in self.config.external.clone() {
            self.swarm.add_external_address(a);
        }
        loop {
            tokio::select! {
                _ = digest.tick(), if digests => self.send_digests(),
                _ = tree_tick.tick(), if trees => self.tree_tick(),
                event = self.swarm.select_next_some() => self.on_event(event),
                command = self.commands.recv() => match command {
                    Some(c) => self.on_command(c),
                    None => return,
                },
            }
        }
    }

    fn dial(&mut self, addr: Multiaddr, done: Option<oneshot::Sender<Result<(), String>>>) {
        let peer = match addr.iter().last() {
            Some(Protocol::P2p(peer)) => peer,
            _ => {
                if let Some(done) = done {
                    let _ = done.send(Err(format!("{addr}: needs a /p2p/<peer id> suffix")));
                }
                return;
            }
        };
        self.swarm
            .behaviour_mut()
            .kad
            .add_address(&peer, addr.clone());
        if self.swarm.is_connected(&peer) {
            if let Some(done) = done {
                let _ = done.send(Ok(()));
            }
            return;
        }
        match self.swarm.dial(addr.clone()) {
            Ok(()) => {
                if let Some(done) = done {
                    self.dials.entry(peer).or_default().push(done);
                }
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot dial");
                if let Some(done) = done {
                    let _ = done.send(Err(format!("cannot dial {addr}: {e}")));
                }
            }
        }
    }

    fn drain_provides(&mut self) {
        // Objects the store no longer holds are no longer announced: their provider records
        // go from this node's Kademlia store (and expire elsewhere).
        for guid in self.store.take_departed() {
            self.swarm
                .behaviour_mut()
                .kad
                .stop_providing(&kad::RecordKey::new(&guid.0));
        }
        while self.providing.len() < MAX_PROVIDING {
            let Some(guid) = self.provide_backlog.pop_front() else {
                break;
            };
            match self
                .swarm
                .behaviour_mut()
                .kad
                .start_providing(kad::RecordKey::new(&guid.0))
            {
                Ok(id) => {
                    self.providing.insert(id);
                }
                Err(e) => tracing::warn!(%guid, error = %e, "cannot announce"),
            }
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Dial(addr, done) => self.dial(addr, Some(done)),
            Command::Provide(guid) => {
                self.provide_backlog.push_back(guid);
                self.drain_provides();
            }
            Command::FindProviders { guid, want, done } => {
                let id = self
                    .swarm
                    .behaviour_mut()
                    .kad
                    .get_providers(kad::RecordKey::new(&guid.0));
                self.lookups.insert(
                    id,
                    Lookup {
                        want: want.max(1),
                        found: HashSet::new(),
                        done: Some(done),
                    },
                );
            }
            Command::Fetch {
                peer,
                guid,
                at_ms,
                done,
            } => {
                let request = match at_ms {
                    None => CoopRequest::Fetch(guid.0.to_vec()),
                    Some(ms) => CoopRequest::FetchAt(guid.0.to_vec(), ms),
                };
                let id = self
                    .swarm
                    .behaviour_mut()
                    .fetch
                    .send_request(&peer, request);
                self.fetches.insert(id, done);
            }
            Command::Subscribe(topic) => self.subscribe(topic),
            Command::Lead(topic) => {
                self.subscribe(topic.clone());
                if let Some(tree) = self.trees.get_mut(&topic) {
                    tree.publisher = true;
                }
            }
            Command::Tree(topic, done) => {
                let view = self.trees.get(&topic).map(|t| TreeView {
                    root: t.publisher && t.parent.is_none(),
                    parent: t.parent,
                    depth: t.path.len(),
                    children: t.children.keys().copied().collect(),
                });
                let _ = done.send(view);
            }
            Command::Publish { topic, data, done } => {
                // A publisher follows the site and is a root of its tree.
                if self.config.push == PushMode::Tree && !self.trees.contains_key(&topic) {
                    self.subscribe(topic.clone());
                }
                // A root with no child yet (its first push, before anyone could join) sends
                // this one directly to every follower it knows.
                let alone = self.trees.get_mut(&topic).is_some_and(|tree| {
                    tree.publisher = true;
                    tree.parent.is_none() && tree.children.is_empty()
                });
                let mut direct = if alone {
                    self.following(&topic)
                } else {
                    Vec::new()
                };
                direct.retain(|p| !self.edges.contains_key(p));
                let g = &mut self.swarm.behaviour_mut().gossipsub;
                for p in &direct {
                    g.add_explicit_peer(p);
                }
                let r = match g.publish(gossipsub::IdentTopic::new(topic), data) {
                    Ok(_) | Err(gossipsub::PublishError::Duplicate) => Ok(()),
                    Err(e) => Err(e.to_string()),
                };
                for p in &direct {
                    g.remove_explicit_peer(p);
                }
                let _ = done.send(r);
            }
            Command::Peers(done) => {
                let peers = self
                    .swarm
                    .connected_peers()
                    .map(|p| PeerInfo {
                        peer: *p,
                        rtt: self.rtt.get(p).copied(),
                    })
                    .collect();
                let _ = done.send(peers);
            }
            Command::Respond(channel, response) => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .fetch
                    .send_response(channel, response);
            }
            Command::Ask {
                peer,
                request,
                done,
            } => {
                let id = self
                    .swarm
                    .behaviour_mut()
                    .fetch
                    .send_request(&peer, request);
                self.fetches.insert(id, done);
            }
            Command::Nearby(guid, done) => {
                let mut near: Vec<(PeerId, usize)> = self
                    .digests
                    .iter()
                    .filter(|(p, _)| self.swarm.is_connected(p))
                    .filter_map(|(p, d)| d.shallowest(&guid).map(|l| (*p, l)))
                    .collect();
                near.sort_by_key(|(_, l)| *l);
                let _ = done.send(near);
            }
            Command::Known(done) => {
                let _ = done.send(self.addrs.values().flatten().cloned().collect());
            }
            Command::Listeners(done) => {
                let _ = done.send(self.swarm.listeners().cloned().collect());
            }
            Command::Addresses(done) => {
                let me = *self.swarm.local_peer_id();
                let addrs = if self.config.external.is_empty() {
                    self.swarm.listeners().cloned().collect::<Vec<_>>()
                } else {
                    self.config.external.clone()
                };
                let addrs = addrs
                    .into_iter()
                    .map(|a| a.with(Protocol::P2p(me)))
                    .collect();
                let _ = done.send(addrs);
            }
        }
    }

    fn on_event(&mut self, event: SwarmEvent<CoopBehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::debug!(%address, "listening");
                if self.config.announce_listen_addrs && self.config.external.is_empty() {
                    self.swarm.add_external_address(address);
                }
            }
            SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                for done in self.dials.remove(&peer_id).into_iter().flatten() {
                    let _ = done.send(Ok(()));
                }
                self.drain_provides();
            }
            SwarmEvent::OutgoingConnectionError {
                peer_id: Some(peer),
                error,
                ..
            } => {
                for done in self.dials.remove(&peer).into_iter().flatten() {
                    let _ = done.send(Err(error.to_string()));
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, .. } if !self.swarm.is_connected(&peer_id) => {
                self.rtt.remove(&peer_id);
                self.rtt_min.remove(&peer_id);
                self.tree_gone(peer_id);
                let digest = self.digests.remove(&peer_id);
                self.addrs.remove(&peer_id);
                if let (Some(d), Some(tx)) = (digest, &self.lost) {
                    let shared: Vec<Guid> = self
                        .store
                        .guids()
                        .into_iter()
                        .filter(|g| d.shallowest(g) == Some(0))
                        .collect();
                    if !shared.is_empty() {
                        // Full: the repair task is behind; these wait for the next loss.
                        let _ = tx.try_send(shared);
                    }
                }
            }
            SwarmEvent::Behaviour(event) => self.on_behaviour(event),
            _ => {}
        }
    }

    fn on_behaviour(&mut self, event: CoopBehaviourEvent) {
        match event {
            // Only peers that serve our DHT enter the routing table.
            CoopBehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. })
                if info.protocols.contains(&KAD_PROTOCOL) =>
            {
                let keep = info
                    .listen_addrs
                    .iter()
                    .take(MAX_ADDRS_PER_PEER)
                    .map(|a| a.clone().with(Protocol::P2p(peer_id)))
                    .collect();
                if self.swarm.is_connected(&peer_id) {
                    self.addrs.insert(peer_id, keep);
                }
                for addr in info.listen_addrs {
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                }
                self.drain_provides();
            }
            CoopBehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    self.swarm
                        .behaviour_mut()
                        .kad
                        .add_address(&peer, addr.clone());
                    let _ = self.swarm.dial(addr);
                }
            }
            CoopBehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
                id,
                result,
                step,
                ..
            }) => self.on_query(id, result, step),
            CoopBehaviourEvent::Fetch(event) => self.on_fetch(event),
            CoopBehaviourEvent::Gossipsub(gossipsub::Event::Message { message, .. }) => {
                self.on_push(&message.data)
            }
            // A follower appeared: a parentless node that is no root asks at once.
            CoopBehaviourEvent::Gossipsub(gossipsub::Event::Subscribed { topic, .. }) => {
                let topic = topic.into_string();
                if self
                    .trees
                    .get(&topic)
                    .is_some_and(|t| !t.attached() && !self.tree_in_flight.contains(&topic))
                {
                    self.tree_join(&topic);
                }
            }
            CoopBehaviourEvent::Ping(ping::Event {
                peer,
                result: Ok(rtt),
                ..
            }) => {
                self.rtt.insert(peer, rtt);
                let least = self.rtt_min.entry(peer).or_insert(rtt);
                *least = (*least).min(rtt);
            }
            _ => {}
        }
    }

    fn on_query(&mut self, id: kad::QueryId, result: kad::QueryResult, step: kad::ProgressStep) {
        match result {
            kad::QueryResult::StartProviding(r) => {
                if let Err(e) = r {
                    tracing::debug!(error = ?e, "announcement incomplete");
                }
                self.providing.remove(&id);
                self.drain_provides();
            }
            kad::QueryResult::GetProviders(Ok(kad::GetProvidersOk::FoundProviders {
                providers,
                ..
            })) => {
                let me = *self.swarm.local_peer_id();
                let mut enough = false;
                if let Some(l) = self.lookups.get_mut(&id) {
                    l.found.extend(providers.into_iter().filter(|p| *p != me));
                    if l.found.len() >= l.want {
                        enough = true;
                        if let Some(done) = l.done.take() {
                            let _ = done.send(l.found.iter().copied().collect());
                        }
                    }
                }
                if enough {
                    if let Some(mut q) = self.swarm.behaviour_mut().kad.query_mut(&id) {
                        q.finish();
                    }
                }
            }
            _ => {}
        }
        if step.last {
            if let Some(mut l) = self.lookups.remove(&id) {
                if let Some(done) = l.done.take() {
                    let _ = done.send(l.found.into_iter().collect());
                }
            }
        }
    }

    fn on_fetch(&mut self, event: request_response::Event<CoopRequest, CoopResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => self.answer(peer, request, channel),
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some((topic, peer, moving)) = self.tree_asks.remove(&request_id) {
                        return self.on_tree_answer(topic, peer, moving, Some(response));
                    }
                    if let Some(done) = self.fetches.remove(&request_id) {
                        let _ = done.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some((topic, peer, moving)) = self.tree_asks.remove(&request_id) {
                    return self.on_tree_answer(topic, peer, moving, None);
                }
                if let Some(done) = self.fetches.remove(&request_id) {
                    let _ = done.send(Err(error.to_string()));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "inbound request failed");
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn answer(
        &mut self,
        peer: PeerId,
        request: CoopRequest,
        channel: ResponseChannel<CoopResponse>,
    ) {
        let response = match request {
            CoopRequest::Fetch(guid) => match Guid::from_slice(&guid) {
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused(e.to_string())
                }
                Ok(guid) => match self.store.get(&guid) {
                    Some(object) => {
                        self.served(guid);
                        CoopResponse::Object(object.encode())
                    }
                    None => {
                        self.stats.missed.fetch_add(1, Ordering::Relaxed);
                        CoopResponse::Miss
                    }
                },
            },
            CoopRequest::FetchAt(guid, at_ms) => match Guid::from_slice(&guid) {
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused(e.to_string())
                }
                Ok(guid) => match self.store.at_captured(&guid, at_ms) {
                    Some((object, captured)) => {
                        self.stats.served.fetch_add(1, Ordering::Relaxed);
                        CoopResponse::ObjectAt(object.encode(), captured)
                    }
                    None => {
                        self.stats.missed.fetch_add(1, Ordering::Relaxed);
                        CoopResponse::Miss
                    }
                },
            },
            CoopRequest::FetchFresh(guid) => match Guid::from_slice(&guid) {
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused(e.to_string())
                }
                Ok(guid) => match self.store.get(&guid) {
                    Some(object) if crate::rules::fresh(&object.object, SystemTime::now()) => {
                        self.served(guid);
                        CoopResponse::Object(object.encode())
                    }
                    Some(_) => {
                        self.stats.stale_refused.fetch_add(1, Ordering::Relaxed);
                        CoopResponse::Stale
                    }
                    None => {
                        self.stats.missed.fetch_add(1, Ordering::Relaxed);
                        CoopResponse::Miss
                    }
                },
            },
            CoopRequest::Revalidate(url, hash) => {
                let hash = match hash.len() {
                    0 => None,
                    32 => {
                        let mut h = [0u8; 32];
                        h.copy_from_slice(&hash);
                        Some(h)
                    }
                    _ => {
                        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                        return self.respond(
                            channel,
                            CoopResponse::Refused("a body hash is 32 bytes".into()),
                        );
                    }
                };
                return self.pass_to_roles(RoleRequest::Revalidate(url, hash), channel);
            }
            CoopRequest::Insert(url) => {
                return self.pass_to_roles(RoleRequest::Insert(url), channel)
            }
            CoopRequest::MissHint(url) => {
                return self.pass_to_roles(RoleRequest::MissHint(url), channel)
            }
            CoopRequest::Replicate(guid) => match Guid::from_slice(&guid) {
                Ok(guid) => return self.pass_to_roles(RoleRequest::Replicate(guid), channel),
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused(e.to_string())
                }
            },
            CoopRequest::TreeJoin(topic, root) => self.tree_answer(peer, &topic, &root),
            CoopRequest::TreeLeave(topic) => {
                if self
                    .trees
                    .get_mut(&topic)
                    .is_some_and(|t| t.children.remove(&peer).is_some())
                {
                    self.edge_down(peer);
                }
                CoopResponse::Ack
            }
            CoopRequest::Digest(bytes) => match crate::bloom::Attenuated::decode(&bytes) {
                Ok(d) if d.depth() == self.config.digest_depth => {
                    self.digests.insert(peer, d);
                    CoopResponse::Ack
                }
                Ok(_) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused("a digest of another depth".into())
                }
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    CoopResponse::Refused(e.to_string())
                }
            },
        };
        self.respond(channel, response);
    }

    /// Sends every connected peer this node's digest: its own objects at level 0, and what its
    /// neighbours' digests say, one level further down.
    fn send_digests(&mut self) {
        let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        if peers.is_empty() {
            return;
        }
        let (depth, bits) = (self.config.digest_depth, self.config.digest_bits);
        let mut mine = crate::bloom::Attenuated::new(depth, bits, 4);
        for guid in self.store.guids() {
            mine.insert_local(&guid);
        }
        for d in self.digests.values() {
            mine.absorb(d);
        }
        let bytes = mine.encode();
        for peer in peers {
            // Answers (Ack or Refused) are matched to no caller and dropped.
            self.swarm
                .behaviour_mut()
                .fetch
                .send_request(&peer, CoopRequest::Digest(bytes.clone()));
        }
    }

    fn pass_to_roles(&mut self, request: RoleRequest, channel: ResponseChannel<CoopResponse>) {
        let Some(queue) = &self.roles else {
            return self.respond(
                channel,
                CoopResponse::Refused("this node has no roles".into()),
            );
        };
        if let Err(
            mpsc::error::TrySendError::Full(Inbound { channel, .. })
            | mpsc::error::TrySendError::Closed(Inbound { channel, .. }),
        ) = queue.try_send(Inbound { request, channel })
        {
            self.respond(channel, CoopResponse::Refused("the node is busy".into()));
        }
    }

    fn respond(&mut self, channel: ResponseChannel<CoopResponse>, response: CoopResponse) {
        let _ = self
            .swarm
            .behaviour_mut()
            .fetch
            .send_response(channel, response);
    }

    /// A pushed object: applied if it verifies, this node holds an older version, and it is
    /// newer; otherwise counted and dropped.
    fn on_push(&mut self, data: &[u8]) {
        if Freshness::is_record(data) {
            return self.on_record(data);
        }
        let verified = SignedObject::decode(data)
            .ok()
            .filter(|o| o.verify(&self.trusted, None).is_ok());
        let Some(object) = verified else {
            self.stats.updates_rejected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let newer = self
            .store
            .version(&object.guid())
            .is_some_and(|held| held < object.object.version);
        if !newer {
            self.stats.updates_ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // The write to the disk mirror must not hold up the swarm's task.
        let (store, stats) = (self.store.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            let counter = if matches!(store.put(object), Ok(Put::Stored)) {
                &stats.updates_applied
            } else {
                &stats.updates_ignored
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
    }
}

impl EventLoop {
    /// A pushed freshness record: applied to the replica held here if it verifies, goes with
    /// the body held and is later than the held head; otherwise counted and dropped.
    fn on_record(&mut self, data: &[u8]) {
        let Some(record) = Freshness::decode(data)
            .ok()
            .filter(|r| r.verify(&self.trusted, None).is_ok())
        else {
            self.stats.updates_rejected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let renewed = self.store.peek(&record.guid()).and_then(|held| {
            let later = (record.head.version, record.head.received_at_ms)
                > (held.object.version, held.object.received_at_ms);
            later
                .then(|| record.apply(&held, &self.trusted).ok())
                .flatten()
        });
        let Some(renewed) = renewed else {
            self.stats.updates_ignored.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let (store, stats) = (self.store.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            let counter = if matches!(store.put(renewed), Ok(Put::Stored)) {
                &stats.records_applied
            } else {
                &stats.updates_ignored
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
    }
}

/// The push tree's wiring ([`crate::tree`] decides).
impl EventLoop {
    fn subscribe(&mut self, topic: String) {
        let t = gossipsub::IdentTopic::new(topic.clone());
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&t) {
            tracing::warn!(%t, error = %e, "cannot subscribe");
        }
        if self.config.push == PushMode::Tree
            && !self.trees.contains_key(&topic)
            && self.trees.len() < MAX_TREE_TOPICS
        {
            self.trees
                .insert(topic.clone(), crate::tree::Tree::default());
            self.tree_join(&topic);
        }
    }

    /// The connected peers that follow `topic`.
    fn following(&self, topic: &str) -> Vec<PeerId> {
        let hash = gossipsub::IdentTopic::new(topic).hash();
        self.swarm
            .behaviour()
            .gossipsub
            .all_peers()
            .filter(|(_, topics)| topics.contains(&&hash))
            .map(|(p, _)| *p)
            .collect()
    }

    fn edge_up(&mut self, peer: PeerId) {
        let n = self.edges.entry(peer).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.swarm
                .behaviour_mut()
                .gossipsub
                .add_explicit_peer(&peer);
        }
    }

    fn edge_down(&mut self, peer: PeerId) {
        if let Some(n) = self.edges.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.edges.remove(&peer);
                self.swarm
                    .behaviour_mut()
                    .gossipsub
                    .remove_explicit_peer(&peer);
            }
        }
    }

    /// Each period: forgets silent children, renews the place under the parent, or (no
    /// parent) looks for one.
    fn tree_tick(&mut self) {
        self.tick += 1;
        let topics: Vec<String> = self.trees.keys().cloned().collect();
        for topic in topics {
            let tick = self.tick;
            let (gone, parent) = match self.trees.get_mut(&topic) {
                Some(t) => (t.expire(tick), t.parent),
                None => continue,
            };
            for p in gone {
                self.edge_down(p);
            }
            if parent.is_some() && !self.tree_moving.contains(&topic) {
                self.tree_move(&topic);
            }
            if self.tree_in_flight.contains(&topic) {
                continue;
            }
            match parent {
                Some(parent) => self.tree_ask(&topic, parent, false),
                None => self.tree_join(&topic),
            }
        }
    }

    /// A round of asks for a place, nearest follower first; a root asks only
    /// [`crate::tree::PROBES`] of them a period, in turn, whether their tree has a lower root.
    fn tree_join(&mut self, topic: &str) {
        if self.tree_in_flight.contains(topic) {
            return;
        }
        let me = *self.swarm.local_peer_id();
        let Some(tree) = self.trees.get(topic) else {
            return;
        };
        if tree.parent.is_some() {
            return;
        }
        let mut asks = crate::tree::candidates(tree, me, self.following(topic), |p| {
            self.rtt_min.get(p).copied()
        });
        if tree.publisher {
            if !asks.is_empty() {
                let k = (self.tick % asks.len() as u64) as usize;
                asks.rotate_left(k);
            }
            asks.truncate(crate::tree::PROBES);
        }
        self.joining.insert(topic.to_owned(), asks.into());
        self.tree_next(topic);
    }

    /// Asks a follower much nearer than the parent for a place, if there is one.
    fn tree_move(&mut self, topic: &str) {
        let me = *self.swarm.local_peer_id();
        let Some(tree) = self.trees.get(topic) else {
            return;
        };
        let rtt = |p: &PeerId| self.rtt_min.get(p).copied();
        let asks = crate::tree::candidates(tree, me, self.following(topic), rtt);
        if let Some(peer) = crate::tree::nearer(tree, &asks, rtt) {
            self.tree_ask(topic, peer, true);
        }
    }

    fn tree_next(&mut self, topic: &str) {
        match self.joining.get_mut(topic).and_then(|q| q.pop_front()) {
            Some(peer) => self.tree_ask(topic, peer, false),
            None => {
                self.joining.remove(topic);
            }
        }
    }

    fn tree_ask(&mut self, topic: &str, peer: PeerId, moving: bool) {
        let me = *self.swarm.local_peer_id();
        let root = self
            .trees
            .get(topic)
            .and_then(|t| t.root(me))
            .map(|r| r.to_bytes())
            .unwrap_or_default();
        let id = self
            .swarm
            .behaviour_mut()
            .fetch
            .send_request(&peer, CoopRequest::TreeJoin(topic.to_owned(), root));
        self.tree_asks.insert(id, (topic.to_owned(), peer, moving));
        if moving {
            self.tree_moving.insert(topic.to_owned());
        } else {
            self.tree_in_flight.insert(topic.to_owned());
        }
    }

    /// A peer asks for a place in `topic`'s tree, or renews its own.
    fn tree_answer(&mut self, peer: PeerId, topic: &str, root: &[u8]) -> CoopResponse {
        let root = match root {
            [] => None,
            bytes => match PeerId::from_bytes(bytes) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    return CoopResponse::Refused(format!("a root that is no peer id: {e}"));
                }
            },
        };
        let (me, tick) = (*self.swarm.local_peer_id(), self.tick);
        let Some(tree) = self.trees.get_mut(topic) else {
            return CoopResponse::Refused("this node does not follow that site".into());
        };
        let known = tree.children.contains_key(&peer);
        match tree.accept(me, peer, root, tick) {
            Ok(path) => {
                if !known {
                    self.edge_up(peer);
                }
                CoopResponse::Joined(
                    path.iter()
                        .map(|p| serde_bytes::ByteBuf::from(p.to_bytes()))
                        .collect(),
                )
            }
            Err(why) => {
                // A child this node can no longer carry goes.
                if tree.children.remove(&peer).is_some() {
                    self.edge_down(peer);
                }
                CoopResponse::Refused(why.to_string())
            }
        }
    }

    /// The answer to a join or renewal (`None`: the request failed).
    fn on_tree_answer(
        &mut self,
        topic: String,
        peer: PeerId,
        moving: bool,
        answer: Option<CoopResponse>,
    ) {
        if moving {
            self.tree_moving.remove(&topic);
        } else {
            self.tree_in_flight.remove(&topic);
        }
        let path = match &answer {
            Some(CoopResponse::Joined(path)) => {
                let path: Result<Vec<PeerId>, _> =
                    path.iter().map(|b| PeerId::from_bytes(b)).collect();
                if path.is_err() {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
                path.ok()
            }
            _ => None,
        };
        let me = *self.swarm.local_peer_id();
        let Some(tree) = self.trees.get_mut(&topic) else {
            return;
        };
        if moving {
            // A move: the new place is taken, the old parent forgets this child in time.
            let Some(old) = tree.parent.filter(|&old| old != peer) else {
                return;
            };
            let was_child = tree.children.contains_key(&peer);
            if path.is_some_and(|p| tree.joined(me, peer, p).is_ok()) {
                // The old parent stops sending at once (else it would for three periods).
                self.swarm
                    .behaviour_mut()
                    .fetch
                    .send_request(&old, CoopRequest::TreeLeave(topic));
                self.edge_down(old);
                if was_child {
                    self.edge_down(peer);
                }
                self.edge_up(peer);
            }
            return;
        }
        let was_parent = tree.parent == Some(peer);
        if !was_parent && tree.parent.is_some() {
            // Attached meanwhile: this answer is stale.
            return;
        }
        let was_child = tree.children.contains_key(&peer);
        let taken = path.is_some_and(|p| tree.joined(me, peer, p).is_ok());
        if taken {
            if !was_parent {
                self.joining.remove(&topic);
                if was_child {
                    self.edge_down(peer);
                }
                self.edge_up(peer);
            }
            return;
        }
        if was_parent {
            tree.detach();
            self.edge_down(peer);
            self.tree_join(&topic);
        } else {
            self.tree_next(&topic);
        }
    }

    /// `peer`'s last connection closed: it is no parent or child any more.
    fn tree_gone(&mut self, peer: PeerId) {
        let mut orphaned = Vec::new();
        for (topic, tree) in &mut self.trees {
            if tree.parent == Some(peer) {
                tree.detach();
                orphaned.push(topic.clone());
            }
            tree.children.remove(&peer);
        }
        if self.edges.remove(&peer).is_some() {
            self.swarm
                .behaviour_mut()
                .gossipsub
                .remove_explicit_peer(&peer);
        }
        for topic in orphaned {
            self.tree_join(&topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_per_site() {
        assert_eq!(
            site_topic("http://Example.com:8080/a/b?c").as_deref(),
            Some("slipstream/coop/site/example.com:8080")
        );
        assert_eq!(
            site_topic("https://example.com").as_deref(),
            Some("slipstream/coop/site/example.com")
        );
        assert_eq!(site_topic("/relative"), None);
        assert_eq!(site_topic("http:///nohost"), None);
        assert_eq!(site_topic("http://user@host/"), None);
    }
}
