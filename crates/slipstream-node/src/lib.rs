//! The node layer: what every slipstream node kind (serve, proxy, and the coming replica,
//! prefetch and coop roles) runs on.
//!
//! - [`bootstrap`]: the runtime, binding the listener (TLS, HTTP/1.1 and HTTP/2), signals.
//! - [`router`]: the one router for [`CONTROL_PREFIX`]; each capability registers its
//!   endpoints on it ([`Node::route`]).
//! - [`config`]: one TOML file per node whose tables belong to capabilities (`[serve]`,
//!   `[proxy]`, later `[cluster]`, `[prefetch]`, `[coop]`), and overrides (`--set
//!   proxy.cache.policy=sieve`, and every named flag) applied through one mechanism.
//! - [`phase`]: the phases of a request (request filter, cache lookup, upstream choice and
//!   fetch, upstream response filter, response and body filters, logging) with a per-request
//!   context, so a capability adds behaviour by registering, not by editing the request path
//!   (pingora's `ProxyHttp` model).
//! - [`body`] and [`html`]: body filters, and a streaming HTML rewriter on `lol_html`.
//! - [`access_log`]: the access log, a phase writing off the request path.
//! - [`clock`]: the time request paths read, injected so tests run on tokio's paused clock.

pub mod access;
pub mod access_log;
pub mod body;
pub mod bootstrap;
pub mod clock;
pub mod config;
pub mod html;
pub mod phase;
pub mod respond;
pub mod router;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use slipstream_http::Body;

pub use clock::Clock;
pub use phase::{Ctx, Phase, Phases};
pub use router::{Endpoint, Router};

/// Whose fault a failed request is (pingora's `ErrorSource`): it decides the status a client
/// gets and whether a retry elsewhere can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An upstream (origin, parent, peer) failed or misbehaved: 502 or 504.
    Upstream,
    /// The client sent something this node cannot serve: a 4xx.
    Downstream,
    /// This node itself failed: 500.
    Internal,
}

/// The control endpoints' prefix, shared by every slipstream node.
pub const CONTROL_PREFIX: &str = "/_slipstream/";

/// Paths under [`CONTROL_PREFIX`] that are the site's content rather than a node's controls:
/// the Web++ client agent (`sw.js` and `agent/`), which a cluster member serves and its pages
/// name. A proxy forwards them to its origins like any other path, so a page served through it
/// still registers the agent.
pub const SITE_PATHS: [&str; 2] = ["/_slipstream/sw.js", "/_slipstream/agent/"];

/// Whether `path` is one of [`SITE_PATHS`] (`sw.js` exactly, anything under `agent/`).
pub fn is_site_path(path: &str) -> bool {
    path == SITE_PATHS[0] || path.starts_with(SITE_PATHS[1])
}

/// A node kind's request path: what answers everything that is not a control endpoint.
pub trait Service: Send + Sync + 'static {
    /// Answers one request from `peer`. Errors are responses: a service never fails.
    fn call(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send;

    /// Whether `req` is for this node's control endpoints. By default: its path starts with
    /// [`CONTROL_PREFIX`]. A forward proxy also needs the request to be for itself rather than
    /// for another server.
    fn is_control(&self, req: &Request<Incoming>) -> bool {
        req.uri().path().starts_with(CONTROL_PREFIX)
    }

    /// Registers the service's own control endpoints (metrics, status, purge, ...).
    fn register(&self, router: &mut Router);
}

/// A node: a service and the router for its control endpoints. Cheap to share.
#[derive(Debug)]
pub struct Node<S> {
    service: S,
    router: Router,
    cpu_cost: std::time::Duration,
    /// The access log the control endpoints' requests are written to as well.
    control_log: Option<access_log::AccessLog>,
}

impl<S: Service> Node<S> {
    /// A node around `service`, with the service's own endpoints registered.
    pub fn new(service: S) -> Node<S> {
        let mut router = Router::default();
        service.register(&mut router);
        Node {
            service,
            router,
            cpu_cost: std::time::Duration::ZERO,
            control_log: None,
        }
    }

    /// Writes the control endpoints' requests to `log` too (the service's phases never see
    /// them): a resolve, a purge or a status poll is then in the log like any other request,
    /// marked as control (the JSON format's `control` field; the path says it in both).
    pub fn with_control_log(mut self, log: access_log::AccessLog) -> Self {
        self.control_log = Some(log);
        self
    }

    /// Makes every request cost `cost` of CPU time on the thread that serves it, before it is
    /// answered (an experiment's slower server: see `serve.cpu_cost_us`). Zero, the default,
    /// costs nothing.
    pub fn with_cpu_cost(mut self, cost: std::time::Duration) -> Self {
        self.cpu_cost = cost;
        self
    }

    /// Registers (or replaces) the endpoint `/_slipstream/NAME` and everything below it.
    pub fn route(&mut self, name: &str, endpoint: impl Endpoint) -> &mut Self {
        self.router.route(name, endpoint);
        self
    }

    /// The service.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// Binds `listen` and serves this node on it in the background until it is drained.
    pub async fn start(
        self,
        listen: &bootstrap::Listen,
    ) -> Result<bootstrap::Running, bootstrap::SpawnError> {
        bootstrap::start(listen, Arc::new(self)).await
    }

    /// Binds `listen` and serves this node on it in the background of the current runtime.
    pub async fn spawn(
        self,
        listen: &bootstrap::Listen,
    ) -> Result<bootstrap::Bound, bootstrap::SpawnError> {
        bootstrap::spawn(listen, Arc::new(self)).await
    }
}

/// Spins until this thread has used `cost` of CPU time. It counts the thread's own CPU clock,
/// not the wall clock, so a thread preempted while it spins still does all of its work later,
/// as a slower processor would.
fn burn(cost: std::time::Duration) {
    let used = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        std::time::Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    };
    let start = used();
    while used().saturating_sub(start) < cost {
        std::hint::spin_loop();
    }
}

/// RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without a Host field, and to
/// any request with more than one.
fn host_problem<B>(req: &Request<B>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("more than one Host field (RFC 9112 §3.2)"),
        (None, _) if req.version() == http::Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host field (RFC 9112 §3.2)")
        }
        _ => None,
    }
}

impl<S: Service> slipstream_http::listen::Handler for Node<S> {
    async fn call(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        if !self.cpu_cost.is_zero() {
            burn(self.cpu_cost);
        }
        if let Some(problem) = host_problem(&req) {
            return respond::text(http::StatusCode::BAD_REQUEST, problem);
        }
        if self.service.is_control(&req) {
            let Some(log) = &self.control_log else {
                return self.router.handle(req).await;
            };
            let mut ctx = Ctx::new(peer, std::time::Instant::now());
            let (mut parts, body) = req.into_parts();
            log.request_filter(&mut ctx, &mut parts).await;
            ctx.extensions.insert(access_log::Control);
            let (head, body) = self
                .router
                .handle(Request::from_parts(parts, body))
                .await
                .into_parts();
            log.logging(&ctx, &head);
            return Response::from_parts(head, body);
        }
        self.service.call(req, peer).await
    }
}
