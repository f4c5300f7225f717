//! `slipstream proxy`: a caching proxy, reverse (`--origin`) or forward (absolute-form requests),
//! that stacks into hierarchies (`--parent`, papers 003 and 004).
//!
//! A GET or HEAD is looked up in the store by target URI and Vary; the RFC 9111 rules in
//! `slipstream_http::rfc9111` decide whether the stored response is fresh, may be served stale
//! while it is revalidated (RFC 5861), must be validated with a conditional request, or may
//! stand in for a failing upstream. Misses on one key are collapsed into one upstream request.
//! Other methods are forwarded and invalidate what they change (RFC 9111 §4.4). Every response
//! says which cache answered in Cache-Status (RFC 9211).
//!
//! The request path is open by phases ([`slipstream_node::Phase`], registered with
//! [`Builder::phase`]) and its upstreams are chosen by [`slipstream_select::Select`] policies
//! ([`Builder::parent_policy`], [`Builder::origin_policy`]).
//!
//! Modules by concern: `route` (the entry), `cached` (GET/HEAD through the cache), `forward`
//! (everything else, and upstream errors), `partial` (first-chunk entries), `collect` (reading
//! bodies to store), `inflight` (the budget of bytes buffered for responses under way),
//! `upstream` (selection and exchanges), `probe` (the policies' probes),
//! `control` (purge), `deception` (keeping web cache deception out of the store), `tunnel` (CONNECT), `access` (who may use the forward proxy, and where
//! it may go).

/// Who may use a forward proxy and where it may connect (shared with the coop node's gateway).
pub use slipstream_node::access;
mod cached;
pub mod collapse;
mod collect;
pub mod config;
mod control;
mod deception;
mod forward;
pub mod headers;
pub mod inflight;
mod metrics;
mod partial;
mod probe;
pub mod respond;
mod route;
pub mod store;
mod tunnel;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use slipstream_http::{rfc9111, Body};
use slipstream_node::bootstrap::{Bound, SpawnError};
use slipstream_node::{Clock, Node, Phase, Phases, Router, CONTROL_PREFIX};
use slipstream_select::Select;

pub use config::{Config, ConfigError, SelectPolicy, Settings};

/// A proxy: one per listener. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    upstreams: Arc<upstream::Upstreams>,
    store: Option<store::Store>,
    collapser: collapse::Collapser,
    inflight: std::sync::Arc<inflight::Budget>,
    metrics: metrics::Metrics,
    rules: rfc9111::Options,
    phases: Phases,
    clock: Clock,
}

/// Builds a [`Proxy`] with phases, policies and a clock.
#[derive(Debug)]
pub struct Builder {
    settings: Settings,
    phases: Phases,
    clock: Clock,
    parents: Option<Box<dyn Select>>,
    origins: Option<Box<dyn Select>>,
}

impl Builder {
    /// Registers a phase, after those already registered.
    pub fn phase(mut self, phase: impl Phase) -> Builder {
        self.phases.push(Arc::new(phase));
        self
    }

    /// The clock request paths read (the system's by default).
    pub fn clock(mut self, clock: Clock) -> Builder {
        self.clock = clock;
        self
    }

    /// The policy choosing among parents (by default the one `parent_policy` names).
    pub fn parent_policy(mut self, policy: Box<dyn Select>) -> Builder {
        self.parents = Some(policy);
        self
    }

    /// The policy choosing among origin servers (by default the one `origin_policy` names).
    pub fn origin_policy(mut self, policy: Box<dyn Select>) -> Builder {
        self.origins = Some(policy);
        self
    }

    /// The proxy.
    pub fn build(self) -> Proxy {
        let settings = self.settings;
        let metrics = metrics::Metrics::default();
        let now = self.clock.instant();
        let retry = settings.parent_retry;
        // Fail-over asks for no probes: without another policy there is no probe task (and no
        // timer for it on the runtime).
        let probes = self.parents.is_some()
            || self.origins.is_some()
            || settings.parent_policy != SelectPolicy::FailOver
            || settings.origin_policy != SelectPolicy::FailOver;
        let upstreams = upstream::Upstreams::new(
            &settings.parents,
            &settings.https_parents,
            &settings.origins,
            &settings.ca_certs,
            upstream::Policies {
                parents: self
                    .parents
                    .unwrap_or_else(|| settings.parent_policy.select(retry, now)),
                origins: self
                    .origins
                    .unwrap_or_else(|| settings.origin_policy.select(retry, now)),
            },
            settings.connect_timeout,
            settings.upstream_timeout,
            self.clock,
            metrics.registry.clone(),
            settings.access.clone(),
        )
        .with_body_pace(settings.body_pace)
        .with_origin_scheme(settings.origin_scheme.clone());
        let upstreams = Arc::new(upstreams);
        if probes {
            probe::spawn(&upstreams);
        }
        let store = settings.cache.map(store::Store::new);
        let collapser = collapse::Collapser::new(settings.max_collapsed_waiters);
        let inflight = inflight::Budget::new(settings.inflight_bytes);
        let inner = Arc::new(Inner {
            metrics,
            rules: rfc9111::Options {
                surrogate_name: Some(settings.name.clone()),
                ..rfc9111::Options::default()
            },
            settings,
            upstreams,
            store,
            collapser,
            inflight,
            phases: self.phases,
            clock: self.clock,
        });
        inner.metrics.register(&inner);
        Proxy { inner }
    }
}

impl Proxy {
    /// A proxy for validated settings, with nothing registered.
    pub fn new(settings: Settings) -> Proxy {
        Proxy::builder(settings).build()
    }

    /// A builder for a proxy with phases, policies or a clock of its own.
    pub fn builder(settings: Settings) -> Builder {
        Builder {
            settings,
            phases: Phases::default(),
            clock: Clock::System,
            parents: None,
            origins: None,
        }
    }

    /// The settings this proxy runs with.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Replaces the parent proxies at run time (`https_parents`: those spoken to over TLS).
    pub fn set_parents(
        &self,
        parents: &[http::uri::Authority],
        https_parents: &[http::uri::Authority],
    ) {
        self.inner.upstreams.set_parents(parents, https_parents);
    }

    /// Replaces the origin servers at run time (a reverse proxy's cache keys keep naming the
    /// first configured origin).
    pub fn set_origins(&self, origins: &[http::uri::Authority]) {
        self.inner.upstreams.set_origins(origins);
    }
}

impl slipstream_node::Service for Proxy {
    async fn call(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let start = self.inner.clock.instant();
        let response = route::handle(&self.inner, req, peer, start).await;
        self.inner.metrics.response(
            response.status(),
            self.inner.clock.instant().saturating_duration_since(start),
        );
        response
    }

    /// Control endpoints are this node's only when the request is not for another server,
    /// and not for the site's own files under the prefix (the agent's), which go upstream.
    /// A request that already passed through this node (its Via names it: the proxy was made
    /// to fetch from itself) or with an invalid Host is not one either; the request path
    /// refuses it.
    fn is_control(&self, req: &Request<Incoming>) -> bool {
        let path = req.uri().path();
        !route::absolute_form(&self.inner, req)
            && !headers::looped(req.headers(), &self.inner.settings.name)
            && headers::host_ok(req.headers())
            && path.starts_with(CONTROL_PREFIX)
            && !slipstream_node::is_site_path(path)
    }

    fn register(&self, router: &mut Router) {
        slipstream_node::router::register_observability(
            router,
            self.inner.metrics.registry.clone(),
            &self.inner.settings.name,
        );
        router.route("purge", control::Purge(self.inner.clone()));
    }
}

/// Binds `settings.listen` and serves a proxy with nothing registered on it in the background
/// of the current tokio runtime. Returns the bound address.
pub async fn spawn(settings: Settings) -> Result<SocketAddr, SpawnError> {
    let listen = settings.listen();
    let bound: Bound = Node::new(Proxy::new(settings)).spawn(&listen).await?;
    Ok(bound.addr)
}
