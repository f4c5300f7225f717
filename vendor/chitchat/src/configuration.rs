#![allow(clippy::derive_partial_eq_without_eq)]

use std::net::SocketAddr;
use std::time::Duration;

use crate::{ChitchatId, FailureDetectorConfig, NodeState, ProtocolVersion};

/// An optional user-defined callback executed when the self node is lagging behind.
pub type CatchupCallback = Box<dyn Fn() + Send>;

/// An optional user-defined predicate liveness predication applied on top of the output of the
/// failure detector.
pub type ExtraLivenessPredicate = Box<dyn Fn(&NodeState) -> bool + Send>;

/// A struct for configuring a Chitchat instance.
pub struct ChitchatConfig {
    pub chitchat_id: ChitchatId,
    pub cluster_id: String,
    pub gossip_interval: Duration,
    pub listen_addr: SocketAddr,
    pub seed_nodes: Vec<String>,
    pub failure_detector_config: FailureDetectorConfig,
    /// How long tombstoned key-value pairs are retained before garbage collection.
    ///
    /// Garbage collection runs during gossip rounds. Chitchat records the version of the latest
    /// garbage-collected tombstone so that peers which may have missed a deletion are reset and
    /// repopulated from the remaining state.
    pub marked_for_deletion_grace_period: Duration,
    /// An optional callback executed when the self node is lagging behind. It
    /// is meant to wire up an external mechanism capable of catching up the
    /// Chitchat state faster than the Chitchat protocol. That external
    /// mechanism will call [`crate::Chitchat::reset_node_state`] to communicate
    /// the results back to Chitchat. For instance, in Quickwit, we use a GRPC
    /// API to fetch the states from other nodes in the cluster.
    pub catchup_callback: Option<CatchupCallback>,
    // Extra lifeness predicate that can be used to define what a node being "live" means.
    // It can be used for instance, to only surface the nodes that are both alive according
    // to the failure detector, but also have a given set of required keys.
    pub extra_liveness_predicate: Option<ExtraLivenessPredicate>,
    /// Protocol version used to exchange messages between peers. The latest version is V1, which
    /// compresses the digest. This MUST stay `V0` until every node in the cluster runs a version
    /// able to decode the newer format.
    pub protocol_version: ProtocolVersion,
    /// (slipstream patch.) The most bytes of keys and values taken into another node's state
    /// from gossip; a new or larger value past it is dropped (its version still counts, so it
    /// is not asked for again). `usize::MAX`: no limit.
    pub max_node_state_bytes: usize,
}

impl ChitchatConfig {
    #[cfg(test)]
    pub fn for_test(port: u16) -> Self {
        let chitchat_id = ChitchatId::for_local_test(port);
        let listen_addr = chitchat_id.gossip_advertise_addr;
        Self {
            chitchat_id,
            cluster_id: "default-cluster".to_string(),
            gossip_interval: Duration::from_millis(50),
            listen_addr,
            seed_nodes: Vec::new(),
            failure_detector_config: Default::default(),
            marked_for_deletion_grace_period: Duration::from_secs(10_000),
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: ProtocolVersion::V0,
            max_node_state_bytes: usize::MAX,
        }
    }
}

#[cfg(test)]
impl Default for ChitchatConfig {
    fn default() -> Self {
        let chitchat_id = ChitchatId::for_local_test(10_000);
        let listen_addr = chitchat_id.gossip_advertise_addr;
        Self {
            chitchat_id,
            cluster_id: "default-cluster".to_string(),
            gossip_interval: Duration::from_millis(1_000),
            listen_addr,
            seed_nodes: Vec::new(),
            failure_detector_config: Default::default(),
            marked_for_deletion_grace_period: Duration::from_secs(60 * 15), // 15mn
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: ProtocolVersion::V0,
            max_node_state_bytes: usize::MAX,
        }
    }
}
