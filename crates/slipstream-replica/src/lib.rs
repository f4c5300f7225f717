//! Web++'s replication (paper 001, §3.1, §3.3 and §5): which servers of one administrative
//! domain hold a replica of which logical URL, carried between them by gossip, and what a node
//! serves of it.
//!
//! - `directory`: the data model without I/O — logical URL patterns with wildcard suffixes
//!   (`/img/*`), each node's own entries (`Own`, the node their only writer), the merged view
//!   of all nodes' entries (`Directory`, a CRDT: a per-`(node, pattern)` maximum over versions,
//!   deletes as tombstones) with `Directory::resolve`, and the `replica:<pattern>` gossip keys
//!   and compact values, parsed with clear errors.
//! - `store`: the node's own entries and replica bodies in redb, each write one durable
//!   transaction, so a restart loses nothing acknowledged.
//! - `cluster`: the node's membership: chitchat carries every node's entries, each node merges
//!   what it hears into its `View` (directory + live nodes); writes go to the store, then to
//!   gossip. Only signed values from a node whose name is bound to its key are taken, within a
//!   per-node cap, and entries point only at the node's own origin or an allowed host.
//! - `seal`: the gossip transport: each chitchat datagram sealed (ChaCha20-Poly1305, keyed
//!   from the cluster secret), checked for age, replay and size before chitchat parses it.
//! - `identity`: the node's Ed25519 key (`node.key` in its data directory), which signs
//!   every value it gossips.
//! - `api`: the control endpoints — the replica API (`/_slipstream/replicas/`, bearer token,
//!   placement hooks, per-resource counters), `resolve` and `directory`.
//! - `placement`: the built-in placement policy (hot resources copied to the least-loaded
//!   peer, cold replicas retired) on the API's hooks and counters.
//! - `block`: which directory entries a page's replica block carries (rules for wildcards,
//!   with every more specific pattern beside them) and how the agent resolves with them.
//! - `page`: the HTML pre-processing phase (replica lists for the client agent, CORS) and the
//!   agent's files (`/_slipstream/sw.js`, `/_slipstream/agent/`).

pub mod api;
pub mod block;
pub mod cluster;
pub mod config;
pub mod directory;
pub mod identity;
pub mod page;
pub mod placement;
pub mod seal;
pub mod store;

pub use cluster::{Cluster, Settings, View};
pub use directory::{Directory, Entry, Own, ParseError, Pattern, UrlError};
pub use store::{Content, Store};
