//! Shared HTTP plumbing for every slipstream node, on hyper 1.x: the listener (HTTP/1.1 with
//! keep-alive, HTTP/2 over cleartext and over TLS with ALPN, header-size and slow-client limits),
//! the response body type, and the control endpoints every node shares: Prometheus metrics and
//! the live status page. The rules without I/O (RFC 9111 caching, conditional and range requests)
//! live in `slipstream-http-rules` and are re-exported here, so `slipstream_http::rfc9111` keeps
//! working.

pub mod body;
pub mod listen;
pub mod metrics;
pub mod nice;
pub mod status;

pub use body::Body;
pub use slipstream_http_rules::{conditional, range, rfc9111};

/// An error and its sources, `: `-separated, for logs and status pages (hyper's own message
/// alone is often just "error trying to connect").
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
