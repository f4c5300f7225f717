//! `slipstream sim`'s engine: a deterministic discrete-event simulator of web transfers over a
//! network of links and DropTail queues, with TCP Reno as ns2 models it (paper 003).
//!
//! No tokio, no clock, no randomness of its own: time is integer nanoseconds, and the same
//! inputs give the same outputs. Events at exactly the same nanosecond run in the order ns-2
//! would run them (a shadow of ns-2's double-precision clock, then insertion order), so that
//! busy but loss-free runs match ns-2 transfer by transfer. The TCP code
//! ([`tcp`]) is a pair of pure state machines that the network engine ([`net`]) drives; a
//! transfer can instead be sent at low priority with TCP Nice ([`nice`], paper 000 §4): Reno's
//! sender with Nice's early-congestion detector plugged in.

pub mod compare;
pub mod export;
pub mod hits;
pub mod net;
pub mod nice;
pub mod reference;
pub mod scenario;
pub mod tcp;
pub mod time;
pub mod transit;

pub use net::{LinkSpec, Network, NodeId, Transfer, TransferResult};
pub use tcp::{Congestion, Era, TcpConfig};
