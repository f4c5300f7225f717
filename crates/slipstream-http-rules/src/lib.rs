//! The HTTP rules every slipstream node shares, with no I/O and no clock: what a cache may store
//! and serve (RFC 9111, [`rfc9111`]), how conditional requests are evaluated (RFC 9110 §13,
//! [`conditional`]) and how byte ranges are parsed (RFC 9110 §14, [`range`]). Time comes in as
//! an argument. This crate never depends on tokio, hyper or rustls; `slipstream-http` re-exports
//! its modules for the servers.

pub mod conditional;
pub mod range;
pub mod rfc9111;
