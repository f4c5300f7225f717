//! The cache engine every slipstream component reuses: a byte-accounted store keyed by name,
//! with paper 002's adaptive-level LFU policy and a few others for comparison.
//!
//! This crate does no I/O and reads no clock. Callers tell it what was requested and how large
//! an object is; it answers whether the object is cached (completely or as its first chunk),
//! whether a miss should be admitted, and which entries make room for it. The origin server, the
//! proxy, `slipstream cachesim` and the simulator drive the same code.
//!
//! A policy is a *level rule* (how much of an object may be stored: [`Level`]) combined with a
//! *replacement* algorithm ([`Replacement`]). Paper 002's Table 3 policies are all LFU:
//! `total`, `small` and `adaptive`; `lru` and `sieve` are there for comparison.

mod cache;
pub mod clients;
mod level;
mod policy;
pub mod replacement;
pub mod sim;

pub use cache::{Access, Admit, Cache, Config, Inserted, Rejected, Stats};
pub use level::{Level, Stored};
pub use policy::{ParsePolicyError, Policy, Replacement};
