//! The prefetch listener (000 §2.3.2, the two-connection architecture; DESIGN: TCP-Nice becomes
//! a separate low-priority listener): a second port serving the same node, whose connections
//! carry prefetches only.
//!
//! - Its packets are marked DSCP Lower-Effort (RFC 8622, code point 1: the TOS byte 0x04), so
//!   networks that honour it drop or delay them before anyone else's.
//! - Its sockets ask the kernel for a less-than-best-effort congestion control (TCP-LP as
//!   `lp`, LEDBAT as `ledbat`, in the configured order) and keep the kernel's default when none
//!   is available (this project's test kernel has only reno, cubic and bbr); which one applied
//!   is on the status.
//! - Every request through it is a prefetch ([`crate::demand::ViaPrefetchListener`]), counted
//!   as such and never learnt as demand; its responses allow any origin to read them (CORS),
//!   since the agent fetches them from the demand origin's pages.
//!
//! - With `listener_priority = "idle"` its requests are served on a thread of their own in
//!   the kernel's idle scheduling class (see [`slipstream_node::bootstrap::Priority`]), so the
//!   CPU goes to demand first. The default keeps them on the node's runtime: on a CPU-capped
//!   node the thread measured no better for demand and cost more CPU per file.
//!
//! Accepted sockets inherit the listener's TOS and congestion control (Linux copies both from
//! the listening socket), so the options are set once, on the listener.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::HeaderValue;
use http::{Request, Response};
use hyper::body::Incoming;
use slipstream_http::listen::Handler;
use slipstream_http::Body;

use crate::demand::ViaPrefetchListener;

/// DSCP Lower-Effort (RFC 8622) in the IPv4 TOS / IPv6 traffic-class byte.
pub const TOS_LOWER_EFFORT: u32 = 0x04;

/// What the listener's socket got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Whether the DSCP mark was set.
    pub lower_effort: bool,
    /// The congestion control its connections use (a configured one, or the kernel default).
    pub congestion: String,
    /// Whether `congestion` is one of the configured low-priority ones.
    pub low_priority_congestion: bool,
    /// The CPU priority its requests are served at (set once it is serving).
    pub cpu: slipstream_node::bootstrap::PriorityApplied,
}

/// Binds `addr` with the low-priority options: DSCP LE if `lower_effort`, the first of
/// `congestion` the kernel has.
pub fn bind(
    addr: SocketAddr,
    lower_effort: bool,
    congestion: &[String],
) -> std::io::Result<(tokio::net::TcpListener, Applied)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    let mut marked = false;
    if lower_effort {
        let set = if addr.is_ipv4() {
            socket.set_tos_v4(TOS_LOWER_EFFORT)
        } else {
            socket.set_tclass_v6(TOS_LOWER_EFFORT)
        };
        match set {
            Ok(()) => marked = true,
            Err(e) => tracing::warn!(error = %e, "prefetch listener: cannot set DSCP Lower-Effort"),
        }
    }
    let mut low = false;
    for name in congestion {
        match socket.set_tcp_congestion(name.as_bytes()) {
            Ok(()) => {
                low = true;
                break;
            }
            Err(e) => {
                tracing::info!(congestion = %name, error = %e, "prefetch listener: congestion control not available")
            }
        }
    }
    let applied_cc = socket
        .tcp_congestion()
        .map(|v| {
            String::from_utf8_lossy(&v)
                .trim_end_matches('\0')
                .to_owned()
        })
        .unwrap_or_default();
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    let listener = tokio::net::TcpListener::from_std(socket.into())?;
    let bound = listener.local_addr()?;
    Ok((
        listener,
        Applied {
            addr: bound,
            lower_effort: marked,
            congestion: applied_cc,
            low_priority_congestion: low,
            cpu: slipstream_node::bootstrap::PriorityApplied::Shared,
        },
    ))
}

/// The listener's handler: the node's, with every request marked a prefetch and every response
/// readable cross-origin.
#[derive(Debug)]
pub struct PrefetchHandler<H>(pub Arc<H>);

impl<H: Handler> Handler for PrefetchHandler<H> {
    async fn call(&self, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        req.extensions_mut().insert(ViaPrefetchListener);
        let mut res = self.0.call(req, peer).await;
        let h = res.headers_mut();
        h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
        h.insert("timing-allow-origin", HeaderValue::from_static("*"));
        res
    }
}
