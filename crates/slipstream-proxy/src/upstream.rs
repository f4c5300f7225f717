//! Upstream exchanges: a pooled keep-alive client for direct requests (to the origins, or to
//! the targets of forward-proxy requests) and one per parent proxy, with the upstream chosen by
//! [`Select`] policies over sets of endpoints that may change at run time.
//!
//! The order of candidates for one request: an upstream a phase names
//! ([`Phase::upstream_peer`](slipstream_node::Phase::upstream_peer)), then the parents in the
//! parent policy's order, then the origin: with every parent down, a proxy that knows the
//! origin goes direct (Squid's default). Each exchange's outcome and latency is fed back to the
//! policy it came from.
//!
//! Around every exchange the policy is told it [`Select::started`], gives the deadline for the
//! response head ([`Select::timeout`], capped by the configured upstream timeout), and learns
//! the outcome ([`Select::record`]); an exchange abandoned half-way (the client went away) is
//! recorded as [`Outcome::Cancelled`]. The probes a policy asks for ([`Select::probes`]) are
//! sent by the task of `probe.rs` through `Upstreams::probe` (crate-private).
//!
//! A forward proxy's own targets (the hosts of absolute-form requests) are connected through
//! [`Guarded`], which resolves the name once, drops the addresses [`Access`] refuses and
//! connects only to those that remain; the configured origins, parents and a phase's peers are
//! the operator's and are connected as they are.
//!
//! Requests to a parent use the absolute form (`GET http://origin/path`), which is how a child
//! asks a parent for another server's resource (RFC 9112 §3.2.2); the parent's connector marks
//! its connections as proxied so hyper writes that form.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, HOST};
use http::uri::Authority;
use http::{Request, Response};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::{Mutex, RwLock};
use slipstream_http::metrics::{Counter, Registry};
use slipstream_http::Body;
use slipstream_node::{Clock, Ctx, Fault, Phases};
use slipstream_select::{Outcome, Select};

use crate::access::{Access, ResolveError};

/// `Ctx::upstream` when a phase supplied the response ([`Phases::upstream_fetch`]).
pub const PHASE: &str = "phase";

/// A request body going upstream: the client's own, or bytes we made (usually empty).
pub type UpBody = Either<Incoming, Full<Bytes>>;

/// The cause of an upstream failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an upstream exchange failed. The fault is always the upstream's ([`UpstreamError::fault`]);
/// [`UpstreamError::retry_safe`] says whether another upstream may be tried.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made (refused, unreachable, connect timeout): nothing was sent.
    #[error("cannot connect to {upstream}")]
    Connect {
        /// The upstream.
        upstream: String,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// The upstream did not answer in time (504).
    #[error("{upstream} did not answer within {timeout:?}")]
    Timeout {
        /// The upstream.
        upstream: String,
        /// The limit.
        timeout: Duration,
    },
    /// The upstream answered with something that is not valid HTTP, or closed the connection
    /// (502).
    #[error("{upstream} sent an invalid response or closed the connection")]
    Protocol {
        /// The upstream.
        upstream: String,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// There was no upstream to try (a forward request without a host, no origin).
    #[error("no upstream to send the request to")]
    NoUpstream,
    /// A forward proxy's target the access rules refuse (an internal address, the proxy
    /// itself): nothing was connected to (403).
    #[error("refused to connect")]
    Refused {
        /// Which address, and why.
        #[source]
        source: crate::access::Refused,
    },
}

impl UpstreamError {
    /// Whose fault it is.
    pub fn fault(&self) -> Fault {
        match self {
            UpstreamError::NoUpstream => Fault::Internal,
            UpstreamError::Refused { .. } => Fault::Downstream,
            _ => Fault::Upstream,
        }
    }

    /// Whether the same request may be sent to another upstream: always when nothing reached
    /// this one; otherwise only if the method is idempotent (RFC 9110 §9.2.2), since the
    /// upstream may have acted on it.
    pub fn retry_safe(&self, idempotent: bool) -> bool {
        match self {
            UpstreamError::Connect { .. } => true,
            UpstreamError::Timeout { .. } | UpstreamError::Protocol { .. } => idempotent,
            UpstreamError::NoUpstream | UpstreamError::Refused { .. } => false,
        }
    }

    /// The outcome a selection policy learns from this error.
    fn outcome(&self) -> Outcome {
        match self {
            UpstreamError::Connect { .. } => Outcome::ConnectFailed,
            UpstreamError::Timeout { .. } => Outcome::TimedOut,
            _ => Outcome::Broken,
        }
    }

    /// The whole cause chain, for logs.
    pub fn chain(&self) -> String {
        slipstream_http::error_chain(self)
    }
}

/// Which policy an endpoint belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A parent proxy.
    Parent,
    /// One of the configured origin servers.
    Origin,
}

/// The longest path remembered as an endpoint's probe target. With one target per endpoint,
/// the memory they take is bounded by the set of endpoints times this.
const MAX_PROBE_TARGET_BYTES: usize = 1024;

/// One candidate for an exchange.
enum Hop {
    Parent(String),
    /// Straight to this server; `origin` when it is one of the configured origins.
    Direct {
        authority: Authority,
        origin: bool,
    },
    /// Straight to a forward-proxy request's own target, through the access rules.
    Target(Authority),
}

/// The selection policies, one per kind of upstream.
#[derive(Debug)]
pub struct Policies {
    /// Over the parent proxies.
    pub parents: Box<dyn Select>,
    /// Over the origin servers of a reverse proxy.
    pub origins: Box<dyn Select>,
}

impl Policies {
    fn of(&mut self, kind: Kind) -> &mut Box<dyn Select> {
        match kind {
            Kind::Parent => &mut self.parents,
            Kind::Origin => &mut self.origins,
        }
    }
}

/// All upstreams of one proxy.
pub struct Upstreams {
    direct: Client<HttpsConnector<HttpConnector>, UpBody>,
    /// For the targets of forward-proxy requests: only addresses the access rules allow.
    guarded: Client<Guarded, UpBody>,
    parent_tls: tokio_rustls::TlsConnector,
    connect_timeout: Duration,
    parents: RwLock<HashMap<String, Client<ParentConnector, UpBody>>>,
    policies: Mutex<Policies>,
    /// Per endpoint, the target of the last simple request sent to it (a GET or HEAD without a
    /// query, at most [`MAX_PROBE_TARGET_BYTES`]), which its probes ask for; one entry per
    /// endpoint, removed with it.
    probe_targets: Mutex<HashMap<(Kind, String), http::Uri>>,
    /// The endpoints with a probe in flight (at most one each).
    probing: Mutex<HashSet<(Kind, String)>>,
    /// The scheme of the origins, for a probe to an origin nothing was sent to yet.
    origin_scheme: http::uri::Scheme,
    timeout: Duration,
    pace: slipstream_node::body::Pace,
    clock: Clock,
    registry: Arc<Registry>,
    failures: Mutex<HashMap<String, Arc<Counter>>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("policies", &*self.policies.lock())
            .finish_non_exhaustive()
    }
}

fn connector(connect_timeout: Duration) -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_connect_timeout(Some(connect_timeout));
    c.set_nodelay(true);
    c.enforce_http(true);
    c
}

/// The TLS client for HTTPS upstreams: verification against the platform's roots and
/// `ca_certs`, always on.
fn tls_client(ca_certs: &[rustls::pki_types::CertificateDer<'static>]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a platform root certificate could not be loaded");
    }
    let (_, unusable) = roots.add_parsable_certificates(native.certs);
    if unusable > 0 {
        tracing::debug!(unusable, "platform root certificates skipped");
    }
    for cert in ca_certs {
        if let Err(e) = roots.add(cert.clone()) {
            tracing::warn!(error = %e, "a ca_file certificate is not usable");
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|e| {
            // The ring provider supports the default versions; this cannot fail.
            panic!("rustls rejected its own defaults: {e}")
        });
    config
}

/// Direct requests: `http://` as is, `https://` over rustls (see [`tls_client`]) with SNI, and
/// HTTP/2 when the server offers it by ALPN.
fn direct_connector(
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
) -> HttpsConnector<HttpConnector> {
    let mut http = connector(connect_timeout);
    http.enforce_http(false);
    HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http)
}

fn client<C>(c: C) -> Client<C, UpBody>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .build(c)
}

fn names(authorities: &[Authority]) -> Vec<String> {
    authorities.iter().map(|a| a.to_string()).collect()
}

impl Upstreams {
    /// Upstreams for `parents` and `origins` chosen by `policies`; every failed exchange with a
    /// parent is counted in `registry`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        parents: &[Authority],
        https_parents: &[Authority],
        origins: &[Authority],
        ca_certs: &[rustls::pki_types::CertificateDer<'static>],
        mut policies: Policies,
        connect_timeout: Duration,
        timeout: Duration,
        clock: Clock,
        registry: Arc<Registry>,
        access: Arc<Access>,
    ) -> Upstreams {
        let now = clock.instant();
        let tls = tls_client(ca_certs);
        policies.parents.update(&names(parents), now);
        policies.origins.update(&names(origins), now);
        let upstreams = Upstreams {
            direct: client(direct_connector(tls.clone(), connect_timeout)),
            guarded: client(Guarded {
                inner: connector(connect_timeout),
                access,
            }),
            parent_tls: {
                // A parent is spoken to in HTTP/1.1 (absolute-form requests).
                let mut t = tls;
                t.alpn_protocols = vec![b"http/1.1".to_vec()];
                tokio_rustls::TlsConnector::from(Arc::new(t))
            },
            connect_timeout,
            parents: RwLock::new(HashMap::new()),
            policies: Mutex::new(policies),
            probe_targets: Mutex::new(HashMap::new()),
            probing: Mutex::new(HashSet::new()),
            origin_scheme: http::uri::Scheme::HTTP,
            timeout,
            pace: slipstream_node::body::Pace::default(),
            clock,
            registry,
            failures: Mutex::new(HashMap::new()),
        };
        upstreams.add_parent_clients(parents, https_parents);
        upstreams
    }

    fn add_parent_clients(&self, parents: &[Authority], https_parents: &[Authority]) {
        let mut clients = self.parents.write();
        clients.retain(|name, _| parents.iter().any(|p| p.as_str() == name));
        for p in parents {
            // Every parent has its failure counter from the start, so a scrape shows 0.
            self.failures(p.as_str());
            let tls = https_parents.contains(p).then(|| {
                rustls::pki_types::ServerName::try_from(p.host().to_owned())
                    .map(|name| (self.parent_tls.clone(), name))
            });
            let tls = match tls {
                None => None,
                Some(Ok(t)) => Some(t),
                Some(Err(e)) => {
                    tracing::warn!(parent = %p, error = %e, "not a TLS server name; parent skipped");
                    continue;
                }
            };
            clients.entry(p.to_string()).or_insert_with(|| {
                client(ParentConnector {
                    parent: p.clone(),
                    inner: connector(self.connect_timeout),
                    tls,
                })
            });
        }
    }

    /// Replaces the set of parents at run time (`https_parents`: those spoken to over TLS);
    /// parents that stay keep their connections and what their policy learnt.
    pub fn set_parents(&self, parents: &[Authority], https_parents: &[Authority]) {
        self.add_parent_clients(parents, https_parents);
        self.forget_targets(Kind::Parent, parents);
        self.policies
            .lock()
            .parents
            .update(&names(parents), self.clock.instant());
    }

    /// Replaces the set of origin servers at run time.
    pub fn set_origins(&self, origins: &[Authority]) {
        self.forget_targets(Kind::Origin, origins);
        self.policies
            .lock()
            .origins
            .update(&names(origins), self.clock.instant());
    }

    fn forget_targets(&self, kind: Kind, kept: &[Authority]) {
        self.probe_targets
            .lock()
            .retain(|(k, name), _| *k != kind || kept.iter().any(|a| a.as_str() == name));
    }

    /// Remembers the target of `parts` as `endpoint`'s probe target if the request is simple.
    fn remember_target(&self, kind: Kind, endpoint: &str, parts: &http::request::Parts) {
        let simple = matches!(parts.method, http::Method::GET | http::Method::HEAD)
            && parts.uri.query().is_none()
            && parts.uri.path().len() <= MAX_PROBE_TARGET_BYTES;
        if simple {
            self.probe_targets
                .lock()
                .insert((kind, endpoint.to_owned()), parts.uri.clone());
        }
    }

    /// Tells `kind`'s policy that an exchange with `endpoint` starts; the guard records how it
    /// ends. Returns it with the deadline for the response head.
    fn begin<'a>(&'a self, kind: Kind, endpoint: &'a str) -> (InFlight<'a>, Duration) {
        let now = self.clock.instant();
        let mut policies = self.policies.lock();
        let policy = policies.of(kind);
        policy.started(endpoint, now);
        // The configured timeout stays the operator's upper bound.
        let timeout = policy
            .timeout(endpoint, now)
            .map_or(self.timeout, |t| t.min(self.timeout));
        let guard = InFlight {
            upstreams: self,
            kind,
            endpoint,
            started: self.clock.instant(),
            done: false,
        };
        (guard, timeout)
    }

    fn record(&self, kind: Kind, endpoint: &str, outcome: Outcome) {
        let now = self.clock.instant();
        self.policies.lock().of(kind).record(endpoint, outcome, now);
    }

    /// The probes now due, from both policies.
    pub(crate) fn due_probes(&self) -> Vec<(Kind, String)> {
        let now = self.clock.instant();
        let mut policies = self.policies.lock();
        let parents = policies.parents.probes(now).into_iter();
        let parents = parents.map(|p| (Kind::Parent, p.endpoint));
        let origins = policies.origins.probes(now).into_iter();
        parents
            .chain(origins.map(|p| (Kind::Origin, p.endpoint)))
            .collect()
    }

    /// Claims the one probe slot of `endpoint`; `false` if a probe to it is in flight.
    pub(crate) fn claim_probe(&self, kind: Kind, endpoint: &str) -> bool {
        self.probing.lock().insert((kind, endpoint.to_owned()))
    }

    /// Sends a HEAD to `endpoint` for its probe target (`/` if none: the origin's, or for a
    /// parent its own) and records
    /// the outcome, then frees the endpoint's probe slot.
    pub(crate) async fn probe(&self, kind: Kind, endpoint: &str) {
        let target = self
            .probe_targets
            .lock()
            .get(&(kind, endpoint.to_owned()))
            .cloned();
        let result = self.send_probe(kind, endpoint, target).await;
        if let Err(e) = &result {
            tracing::debug!(upstream = %endpoint, error = %e.chain(), "probe failed");
        }
        self.probing.lock().remove(&(kind, endpoint.to_owned()));
    }

    async fn send_probe(
        &self,
        kind: Kind,
        endpoint: &str,
        target: Option<http::Uri>,
    ) -> Result<(), UpstreamError> {
        let Ok(authority) = endpoint.parse::<Authority>() else {
            return Ok(());
        };
        let uri = match (kind, target) {
            // A parent is asked for what it was last asked for: another server's resource.
            (Kind::Parent, Some(uri)) => uri,
            (Kind::Parent, None) => http::Uri::builder()
                .scheme("http")
                .authority(authority)
                .path_and_query("/")
                .build()
                .unwrap_or_default(),
            (Kind::Origin, target) => {
                let path = target
                    .as_ref()
                    .and_then(|t| t.path_and_query().cloned())
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
                let scheme = target
                    .as_ref()
                    .and_then(|t| t.scheme().cloned())
                    .unwrap_or_else(|| self.origin_scheme.clone());
                http::Uri::builder()
                    .scheme(scheme)
                    .authority(authority)
                    .path_and_query(path)
                    .build()
                    .unwrap_or_default()
            }
        };
        let mut req = Request::new(up_body(None));
        *req.method_mut() = http::Method::HEAD;
        if let Some(host) = uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            req.headers_mut().insert(HOST, host);
        }
        *req.uri_mut() = uri;
        let parent = match kind {
            Kind::Parent => match self.parents.read().get(endpoint).cloned() {
                Some(client) => Some(client),
                None => return Ok(()),
            },
            Kind::Origin => None,
        };
        let (guard, timeout) = self.begin(kind, endpoint);
        let result = match &parent {
            Some(client) => self.exchange(client, req, endpoint, timeout).await,
            None => self.exchange(&self.direct, req, endpoint, timeout).await,
        };
        guard.finish(&result);
        result.map(drop)
    }

    /// Each parent and whether its policy counts it as up (for metrics).
    pub fn parent_health(&self) -> Vec<(String, bool)> {
        self.policies.lock().parents.health(self.clock.instant())
    }

    /// Each origin and whether its policy counts it as up (for metrics).
    pub fn origin_health(&self) -> Vec<(String, bool)> {
        self.policies.lock().origins.health(self.clock.instant())
    }

    fn failures(&self, parent: &str) -> Arc<Counter> {
        self.failures
            .lock()
            .entry(parent.to_owned())
            .or_insert_with(|| {
                self.registry.counter(
                    "slipstream_parent_failures_total",
                    "Failed exchanges with a parent proxy, including those another upstream then answered.",
                    &[("parent", parent)],
                )
            })
            .clone()
    }

    /// The candidates for one request, in the order to try them.
    fn plan(&self, ctx: &mut Ctx, phases: &Phases, parts: &http::request::Parts) -> Vec<Hop> {
        let mut hops = Vec::new();
        if !phases.is_empty() {
            if let Some(authority) = phases.upstream_peer(ctx, parts) {
                hops.push(Hop::Direct {
                    authority,
                    origin: false,
                });
            }
        }
        let now = self.clock.instant();
        let (parents, origins) = {
            let mut p = self.policies.lock();
            (p.parents.order(now), p.origins.order(now))
        };
        hops.extend(parents.into_iter().map(Hop::Parent));
        if origins.is_empty() {
            if let Some(authority) = parts.uri.authority() {
                hops.push(Hop::Target(authority.clone()));
            }
        } else {
            hops.extend(origins.iter().filter_map(|o| {
                Some(Hop::Direct {
                    authority: o.parse().ok()?,
                    origin: true,
                })
            }));
        }
        hops
    }

    /// Sends `parts` with `body` (an absolute URI in `parts.uri`) to the first candidate that
    /// answers, failing over while the request can be repeated ([`UpstreamError::retry_safe`]).
    /// A phase may supply the response instead ([`Phases::upstream_fetch`]).
    pub async fn send(
        &self,
        ctx: &mut Ctx,
        phases: &Phases,
        parts: http::request::Parts,
        body: Option<Incoming>,
    ) -> Result<Response<Body>, UpstreamError> {
        if !phases.is_empty() {
            if let Some(response) = phases.upstream_fetch(ctx, &parts).await {
                ctx.upstream = Some(PHASE.into());
                return Ok(response);
            }
        }
        let idempotent = parts.method.is_idempotent();
        let repeatable = body.is_none();
        let mut body = body;
        let mut last = None;
        for hop in self.plan(ctx, phases, &parts) {
            let (name, result) = match &hop {
                Hop::Parent(name) => {
                    let Some(client) = self.parents.read().get(name).cloned() else {
                        continue;
                    };
                    self.remember_target(Kind::Parent, name, &parts);
                    let (guard, timeout) = self.begin(Kind::Parent, name);
                    let req = Request::from_parts(parts.clone(), up_body(body.take()));
                    let result = self.exchange(&client, req, name, timeout).await;
                    guard.finish(&result);
                    (name.clone(), result)
                }
                Hop::Direct { authority, origin } => {
                    let mut p = parts.clone();
                    if p.uri.authority() != Some(authority) {
                        let mut uri = p.uri.into_parts();
                        uri.authority = Some(authority.clone());
                        p.uri = http::Uri::from_parts(uri).unwrap_or_default();
                        if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
                            p.headers.insert(HOST, v);
                        }
                    }
                    let name = authority.to_string();
                    let result = if *origin {
                        self.remember_target(Kind::Origin, &name, &p);
                        let (guard, timeout) = self.begin(Kind::Origin, &name);
                        let req = Request::from_parts(p, up_body(body.take()));
                        let result = self.exchange(&self.direct, req, &name, timeout).await;
                        guard.finish(&result);
                        result
                    } else {
                        let req = Request::from_parts(p, up_body(body.take()));
                        self.exchange(&self.direct, req, &name, self.timeout).await
                    };
                    (name, result)
                }
                Hop::Target(authority) => {
                    let name = authority.to_string();
                    let req = Request::from_parts(parts.clone(), up_body(body.take()));
                    let result = self.exchange(&self.guarded, req, &name, self.timeout).await;
                    (name, result)
                }
            };
            match result {
                Ok(response) => {
                    ctx.upstream = Some(name);
                    let pace = self.pace;
                    return Ok(response.map(|b| {
                        slipstream_node::body::paced(
                            Body::stream(b.map_err(std::io::Error::other)),
                            pace,
                        )
                    }));
                }
                Err(e) => {
                    if matches!(hop, Hop::Parent(_)) {
                        self.failures(&name).inc();
                    }
                    // A refusal is the client's doing, logged once where it is answered.
                    if !matches!(e, UpstreamError::Refused { .. }) {
                        tracing::warn!(upstream = %name, error = %e.chain(), "upstream failed");
                    }
                    let go_on = repeatable && e.retry_safe(idempotent);
                    last = Some(e);
                    if !go_on {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or(UpstreamError::NoUpstream))
    }

    async fn exchange<C>(
        &self,
        client: &Client<C, UpBody>,
        req: Request<UpBody>,
        upstream: &str,
        timeout: Duration,
    ) -> Result<Response<Incoming>, UpstreamError>
    where
        C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
    {
        match tokio::time::timeout(timeout, client.request(req)).await {
            Err(_) => Err(UpstreamError::Timeout {
                upstream: upstream.to_owned(),
                timeout,
            }),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) if e.is_connect() => Err(match refusal(&e) {
                Some(source) => UpstreamError::Refused { source },
                None => UpstreamError::Connect {
                    upstream: upstream.to_owned(),
                    source: Box::new(e),
                },
            }),
            Ok(Err(e)) => Err(UpstreamError::Protocol {
                upstream: upstream.to_owned(),
                source: Box::new(e),
            }),
        }
    }

    /// The scheme of the origin servers (`http` by default), for probes to an origin no
    /// request has gone to yet.
    pub fn with_origin_scheme(mut self, scheme: http::uri::Scheme) -> Upstreams {
        self.origin_scheme = scheme;
        self
    }

    /// Bodies received from now on must keep `pace` (a least rate, a total deadline).
    pub fn with_body_pace(mut self, pace: slipstream_node::body::Pace) -> Upstreams {
        self.pace = pace;
        self
    }

    /// The response timeout, also used between body chunks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// One exchange a policy was told of ([`Select::started`]): [`InFlight::finish`] records its
/// outcome; dropped unfinished (the request was abandoned), it records
/// [`Outcome::Cancelled`], so a policy counting requests in flight never leaks one.
struct InFlight<'a> {
    upstreams: &'a Upstreams,
    kind: Kind,
    endpoint: &'a str,
    started: std::time::Instant,
    done: bool,
}

impl InFlight<'_> {
    fn finish<T>(mut self, result: &Result<T, UpstreamError>) {
        let outcome = match result {
            Ok(_) => Outcome::Answered {
                latency: self
                    .upstreams
                    .clock
                    .instant()
                    .saturating_duration_since(self.started),
            },
            Err(e) => e.outcome(),
        };
        self.done = true;
        self.upstreams.record(self.kind, self.endpoint, outcome);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.upstreams
                .record(self.kind, self.endpoint, Outcome::Cancelled);
        }
    }
}

fn up_body(body: Option<Incoming>) -> UpBody {
    match body {
        Some(b) => Either::Left(b),
        None => Either::Right(Full::new(Bytes::new())),
    }
}

/// The access rules' refusal behind a failed connection, if that is why it failed.
fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<crate::access::Refused> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(ResolveError::Refused(r)) = c.downcast_ref::<ResolveError>() {
            return Some(r.clone());
        }
        cause = c.source();
    }
    None
}

/// Connects a forward-proxy request to its target: the name is resolved once, the addresses
/// the access rules refuse are dropped, and the first remaining one that accepts is the
/// connection. The inner connector is handed an IP literal, so it resolves nothing itself.
#[derive(Clone)]
struct Guarded {
    inner: HttpConnector,
    access: Arc<Access>,
}

impl tower_service::Service<http::Uri> for Guarded {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, target: http::Uri) -> Self::Future {
        let mut inner = self.inner.clone();
        let access = self.access.clone();
        Box::pin(async move {
            let host = target.host().ok_or("a target without a host")?;
            let port = target.port_u16().unwrap_or(80);
            let addrs = access.resolve(host, port).await?;
            let mut last: Option<BoxError> = None;
            for addr in addrs {
                let uri = http::Uri::builder()
                    .scheme("http")
                    .authority(addr.to_string())
                    .path_and_query("/")
                    .build()?;
                match inner.call(uri).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = Some(e.into()),
                }
            }
            Err(last.unwrap_or_else(|| "no address to connect to".into()))
        })
    }
}

/// Connects every request to one parent proxy (over TLS for an `https://` parent), and says
/// the connection is proxied.
#[derive(Clone)]
struct ParentConnector {
    parent: http::uri::Authority,
    inner: HttpConnector,
    /// For an `https://` parent: the TLS client and the name its certificate must have.
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl tower_service::Service<http::Uri> for ParentConnector {
    type Response = Proxied;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Proxied, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, _target: http::Uri) -> Self::Future {
        let uri = http::Uri::builder()
            .scheme("http")
            .authority(self.parent.clone())
            .path_and_query("/")
            .build();
        let mut inner = self.inner.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = inner.call(uri?).await?.into_inner();
            let stream = match tls {
                None => Stream::Plain(tcp),
                Some((connector, name)) => {
                    Stream::Tls(Box::new(connector.connect(name, tcp).await?))
                }
            };
            Ok(Proxied(TokioIo::new(stream)))
        })
    }
}

/// A connection to a parent proxy.
struct Proxied(TokioIo<Stream>);

enum Stream {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Connection for Proxied {
    fn connected(&self) -> Connected {
        Connected::new().proxy(true)
    }
}

impl hyper::rt::Read for Proxied {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Proxied {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
