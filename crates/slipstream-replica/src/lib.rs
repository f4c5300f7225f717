//! Web++'s replication directory (paper 001, §3.1 and §5.2): which servers of one administrative
//! domain hold a replica of which logical URL, and where.
//!
//! - `directory`: the data model without I/O — logical URL patterns with wildcard suffixes
//!   (`/img/*`), each node's own entries (`Own`, the node their only writer), the merged view
//!   of all nodes' entries (`Directory`, a CRDT: a per-`(node, pattern)` maximum over versions,
//!   deletes as tombstones) with `Directory::resolve`, and the `replica:<pattern>` gossip keys
//!   and compact values a gossip engine (chitchat) carries, parsed with clear errors.
//! - `store`: the node's own entries and replica bodies in redb, each write one durable
//!   transaction, so a restart loses nothing acknowledged.
//!
//! Carrying the entries between nodes (chitchat) is the layer above; it feeds each update it
//! receives to `Directory::apply_gossip` and publishes `Own::gossip`.

pub mod directory;
pub mod store;

pub use directory::{Directory, Entry, Own, ParseError, Pattern, UrlError};
pub use store::Store;
