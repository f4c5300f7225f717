//! The phases of a request, and the per-request context they share (pingora's `ProxyHttp`
//! model). A capability implements [`Phase`] for the steps it cares about and registers it; the
//! request path calls every registered phase at each step, in registration order. With nothing
//! registered the path does no extra work.
//!
//! | phase | when | may |
//! |---|---|---|
//! | [`request_filter`](Phase::request_filter) | first | answer the request itself, or change it |
//! | [`cache_lookup`](Phase::cache_lookup) | after the cache was asked (proxy) | observe hit, stale, miss |
//! | [`upstream_peer`](Phase::upstream_peer) | before going upstream (proxy) | name the upstream to try first |
//! | [`upstream_fetch`](Phase::upstream_fetch) | before going upstream (proxy) | supply the upstream's response itself (a peer, a store) |
//! | [`upstream_response_filter`](Phase::upstream_response_filter) | an upstream response head arrived (proxy) | change it before it is stored |
//! | [`response_filter`](Phase::response_filter) | the response head for the client | change it |
//! | [`body_filter`](Phase::body_filter) | the response body for the client | transform it as it streams |
//! | [`logging`](Phase::logging) | the response is on its way | record it |

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use http::{request, response, Response};
use slipstream_http::Body;

use crate::body::BodyFilter;

/// What the cache made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A fresh stored response answers it.
    Hit,
    /// A stored response exists but is stale: it is revalidated, or served while it is.
    Stale,
    /// Nothing usable is stored.
    Miss,
}

/// One request's state across the phases.
#[derive(Debug)]
pub struct Ctx {
    /// The client.
    pub peer: SocketAddr,
    /// When the request arrived.
    pub arrived: std::time::Instant,
    /// What the cache made of it, once asked.
    pub cache: Option<CacheOutcome>,
    /// The upstream that answered, if one did.
    pub upstream: Option<String>,
    /// Per-capability state, one slot per type (a capability keeps its own struct here).
    pub extensions: http::Extensions,
}

impl Ctx {
    /// The context of a request that arrived from `peer` at `arrived`.
    pub fn new(peer: SocketAddr, arrived: std::time::Instant) -> Ctx {
        Ctx {
            peer,
            arrived,
            cache: None,
            upstream: None,
            extensions: http::Extensions::new(),
        }
    }
}

/// Behaviour a capability adds to the request path. Every method has a default that does
/// nothing, so a phase implements only the steps it needs.
#[async_trait]
#[allow(unused_variables)]
pub trait Phase: Send + Sync + std::fmt::Debug + 'static {
    /// Before anything else: return a response to answer the request without going further.
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        None
    }

    /// After the cache lookup for `key`.
    fn cache_lookup(&self, ctx: &mut Ctx, key: &str, outcome: CacheOutcome) {}

    /// Before an upstream exchange: an upstream (`host:port`) to try before the ones
    /// selection would choose. The first phase that names one wins.
    fn upstream_peer(&self, ctx: &mut Ctx, req: &request::Parts) -> Option<http::uri::Authority> {
        None
    }

    /// Before an upstream exchange: a response that stands in for the upstream's (from a peer
    /// or a store). It is then treated exactly as an upstream response: filtered, stored by
    /// RFC 9111's rules, forwarded. The first phase that returns one wins.
    async fn upstream_fetch(&self, ctx: &mut Ctx, req: &request::Parts) -> Option<Response<Body>> {
        None
    }

    /// An upstream response head, before it is stored or forwarded.
    fn upstream_response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {}

    /// The response head going to the client.
    fn response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {}

    /// A transformer for the response body going to the client.
    fn body_filter(&self, ctx: &mut Ctx, res: &response::Parts) -> Option<Box<dyn BodyFilter>> {
        None
    }

    /// The response head is on its way to the client.
    fn logging(&self, ctx: &Ctx, res: &response::Parts) {}
}

/// The phases registered on one request path, in order.
#[derive(Debug, Clone, Default)]
pub struct Phases(Vec<Arc<dyn Phase>>);

impl Phases {
    /// Adds a phase after those already registered.
    pub fn push(&mut self, phase: Arc<dyn Phase>) {
        self.0.push(phase);
    }

    /// Whether nothing is registered (the request path then skips every phase).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs the request filters; the first response wins.
    pub async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        for p in &self.0 {
            if let Some(r) = p.request_filter(ctx, req).await {
                return Some(r);
            }
        }
        None
    }

    /// Reports a cache lookup to every phase.
    pub fn cache_lookup(&self, ctx: &mut Ctx, key: &str, outcome: CacheOutcome) {
        ctx.cache = Some(outcome);
        for p in &self.0 {
            p.cache_lookup(ctx, key, outcome);
        }
    }

    /// The first upstream a phase names.
    pub fn upstream_peer(
        &self,
        ctx: &mut Ctx,
        req: &request::Parts,
    ) -> Option<http::uri::Authority> {
        self.0.iter().find_map(|p| p.upstream_peer(ctx, req))
    }

    /// The first stand-in response a phase supplies.
    pub async fn upstream_fetch(
        &self,
        ctx: &mut Ctx,
        req: &request::Parts,
    ) -> Option<Response<Body>> {
        for p in &self.0 {
            if let Some(r) = p.upstream_fetch(ctx, req).await {
                return Some(r);
            }
        }
        None
    }

    /// Runs the upstream response filters.
    pub fn upstream_response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {
        for p in &self.0 {
            p.upstream_response_filter(ctx, res);
        }
    }

    /// Runs the response filters, then the body filters, then logging, on the response for the
    /// client. A response whose body is filtered loses `Content-Length`, unless the last filter
    /// knows the length of what it puts out ([`BodyFilter::known_len`]).
    pub fn respond(&self, ctx: &mut Ctx, response: Response<Body>) -> Response<Body> {
        if self.is_empty() {
            return response;
        }
        let (mut parts, body) = response.into_parts();
        for p in &self.0 {
            p.response_filter(ctx, &mut parts);
        }
        let filters: Vec<Box<dyn BodyFilter>> = self
            .0
            .iter()
            .filter_map(|p| p.body_filter(ctx, &parts))
            .collect();
        let body = if filters.is_empty() {
            body
        } else {
            match filters.iter().map(|f| f.known_len()).next_back().flatten() {
                // The last filter replaces the body with bytes of a known length.
                Some(len) => {
                    parts
                        .headers
                        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
                }
                None => {
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                }
            }
            crate::body::filtered(body, filters)
        };
        for p in &self.0 {
            p.logging(ctx, &parts);
        }
        Response::from_parts(parts, body)
    }
}
