//! Shared HTTP plumbing for every slipstream node, on hyper 1.x: the listener (HTTP/1.1 with
//! keep-alive, HTTP/2 over cleartext and over TLS with ALPN, header-size and slow-client limits),
//! the response body type, conditional and range request rules (RFC 9110 §13, §14), and the
//! control endpoints every node shares: Prometheus metrics and the live status page.

pub mod body;
pub mod conditional;
pub mod listen;
pub mod metrics;
pub mod range;
pub mod rfc9111;
pub mod status;

pub use body::Body;
