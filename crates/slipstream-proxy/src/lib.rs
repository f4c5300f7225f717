//! `slipstream proxy`: a caching proxy, reverse (`--origin`) or forward (absolute-form requests),
//! that stacks into hierarchies (`--parent`, papers 003 and 004).
//!
//! A GET or HEAD is looked up in the store by target URI and Vary; the RFC 9111 rules in
//! `slipstream_http::rfc9111` decide whether the stored response is fresh, may be served stale
//! while it is revalidated (RFC 5861), must be validated with a conditional request, or may
//! stand in for a failing upstream. Misses on one key are collapsed into one upstream request.
//! Other methods are forwarded and invalidate what they change (RFC 9111 §4.4). Every response
//! says which cache answered in Cache-Status (RFC 9211).

pub mod collapse;
pub mod config;
mod control;
mod fetch;
pub mod headers;
mod metrics;
mod partial;
pub mod respond;
pub mod store;
mod tunnel;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use slipstream_http::{rfc9111, Body};

pub use config::{Config, ConfigError, Settings};

/// The control endpoints' prefix, shared by every slipstream node.
pub const CONTROL_PREFIX: &str = "/_slipstream/";

/// A proxy: one per listener. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    upstreams: upstream::Upstreams,
    store: Option<store::Store>,
    collapser: collapse::Collapser,
    metrics: metrics::Metrics,
    rules: rfc9111::Options,
}

impl Proxy {
    /// A proxy for validated settings.
    pub fn new(settings: Settings) -> Proxy {
        let metrics = metrics::Metrics::default();
        let upstreams = upstream::Upstreams::new(
            &settings.parents,
            settings.connect_timeout,
            settings.upstream_timeout,
            settings.parent_retry,
            |parent| metrics.parent_failures(parent),
        );
        let store = settings.cache.map(store::Store::new);
        let collapser = collapse::Collapser::new(settings.max_collapsed_waiters);
        let inner = Arc::new(Inner {
            metrics,
            rules: rfc9111::Options::default(),
            settings,
            upstreams,
            store,
            collapser,
        });
        inner.metrics.register(&inner);
        Proxy { inner }
    }

    /// The settings this proxy runs with.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }
}

impl slipstream_http::listen::Handler for Proxy {
    async fn call(&self, req: Request<Incoming>, _peer: SocketAddr) -> Response<Body> {
        let start = std::time::Instant::now();
        let response = fetch::handle(&self.inner, req).await;
        self.inner
            .metrics
            .response(response.status(), start.elapsed());
        response
    }
}

/// Binds `settings.listen` and serves the proxy on it in the background of the current tokio
/// runtime, with TLS when the settings have a certificate. Returns the bound address.
pub async fn spawn(settings: Settings) -> Result<SocketAddr, SpawnError> {
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|source| SpawnError::Bind {
            addr: settings.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SpawnError::Bind {
        addr: settings.listen,
        source,
    })?;
    let tls = match &settings.tls {
        Some((cert, key)) => Some(slipstream_http::listen::tls_acceptor(cert, key)?),
        None => None,
    };
    let limits = settings.limits;
    let proxy = Arc::new(Proxy::new(settings));
    tokio::spawn(slipstream_http::listen::serve(
        listener,
        tls,
        limits,
        proxy,
        std::future::pending(),
    ));
    Ok(addr)
}

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] slipstream_http::listen::TlsError),
}

/// A short plain-text response, for errors the proxy itself produces.
fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut r = Response::new(Body::full(Bytes::from(format!("{message}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
