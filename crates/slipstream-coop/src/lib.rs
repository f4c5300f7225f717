//! Riptide (paper 004): a cooperative web cache with no hierarchy and no central directory,
//! on rust-libp2p in place of OceanStore and Tapestry.
//!
//! - [`object`]: objects named by GUID = hash(cache provider's key ‖ URL), holding the HTTP
//!   response head, body and exchange times, signed by the provider (§3.1, §4.1);
//! - [`store`]: each node's bounded content cache (LRU by default), persisted in redb (§4.2.1);
//! - [`rules`]: the roles' HTTP decisions on the shared RFC 9111 rules: the browser proxy's
//!   pre-check, the gateway's capture of a response as an object, reuse of a stored object;
//! - [`decide`]: the roles' decisions without I/O (nearest first, hot objects), shared with
//!   the simulator;
//! - [`sim`]: Riptide on a simulated 1,100-node transit-stub network (§6.1, Fig. 22);
//! - [`tree`]: the push tree's decisions without I/O (a parent near by RTT, no cycles), shared
//!   with the simulator;
//! - [`bloom`]: attenuated Bloom filters, the local-area fast path (§3.2.2), without I/O;
//! - [`gateway`]: the gateway role: fetch, store by RFC 9111, sign, hold; the service GUID;
//! - [`roles`]: the browser proxy's lookup and miss hints, the cache manager, and the task
//!   that answers a node's role requests;
//! - [`net`]: the swarm: Kademlia provider records to find replicas, request-response to fetch
//!   them, gossipsub to push updates to them, identify and ping for peers and their RTTs.
//!
//! - [`membership`]: the peers a node knew, kept in its data directory and dialled at start;
//! - [`config`]: the `[coop]` table of a node's config file;
//! - [`node`]: a node on the node layer: the browser proxy as a phase of the caching proxy,
//!   `/_slipstream/coop`, and the start-up of the swarm and roles (`slipstream node`).

pub mod bloom;
pub mod config;
pub mod decide;
pub mod gateway;
pub mod membership;
pub mod net;
pub mod node;
pub mod object;
pub mod providers;
pub mod roles;
pub mod rules;
pub mod sim;
pub mod store;
pub mod tree;

pub use net::{
    Client, CoopBehaviour, EventLoop, FetchError, NetConfig, PeerInfo, PushMode, TreeView,
};
pub use object::{Guid, Object, SignedObject, VerifyError};
pub use store::{Put, Store, StoreStats};
