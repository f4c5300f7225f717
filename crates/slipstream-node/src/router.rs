//! The router for `/_slipstream/`: one table from endpoint name to handler, filled by the
//! capabilities a node runs. Built-in endpoints ([`Metrics`], [`StatusPage`]) are registered by
//! the services that have metrics.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use slipstream_http::metrics::Registry;
use slipstream_http::Body;

use crate::respond::text;
use crate::CONTROL_PREFIX;

/// One control endpoint, `/_slipstream/NAME` and the paths below it.
#[async_trait]
pub trait Endpoint: Send + Sync + fmt::Debug + 'static {
    /// Answers `req`; `rest` is what follows `/_slipstream/NAME` in the path (`""`, or `/...`).
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body>;
}

/// The endpoints of one node.
#[derive(Default, Clone)]
pub struct Router {
    routes: BTreeMap<String, Arc<dyn Endpoint>>,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.routes.keys()).finish()
    }
}

impl Router {
    /// Registers (or replaces) the endpoint `NAME`.
    pub fn route(&mut self, name: &str, endpoint: impl Endpoint) -> &mut Self {
        self.routes.insert(name.to_owned(), Arc::new(endpoint));
        self
    }

    /// The names registered, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// Answers a request whose path starts with [`CONTROL_PREFIX`].
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path();
        let what = path.strip_prefix(CONTROL_PREFIX).unwrap_or_default();
        let (name, rest) = what.find('/').map_or((what, ""), |i| what.split_at(i));
        let Some(endpoint) = self.routes.get(name).cloned() else {
            let known: Vec<String> = self
                .names()
                .map(|n| format!("{CONTROL_PREFIX}{n}"))
                .collect();
            return text(
                StatusCode::NOT_FOUND,
                &format!(
                    "no such control endpoint; this node has {}",
                    known.join(", ")
                ),
            );
        };
        let rest = rest.to_owned();
        endpoint.call(req, &rest).await
    }
}

/// Answers only GET and HEAD with `body`; anything else gets 405 with `Allow`.
pub fn read_only(method: &Method, content_type: &'static str, body: Bytes) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let mut r = Response::new(if method == Method::HEAD {
        Body::empty()
    } else {
        Body::full(body)
    });
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `/_slipstream/metrics`: a registry in the OpenMetrics text format.
#[derive(Debug, Clone)]
pub struct Metrics(pub Arc<Registry>);

#[async_trait]
impl Endpoint for Metrics {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        read_only(
            req.method(),
            slipstream_http::metrics::CONTENT_TYPE,
            self.0.render().into(),
        )
    }
}

/// `/_slipstream/status`: the live dashboard.
#[derive(Debug, Clone, Copy)]
pub struct StatusPage;

#[async_trait]
impl Endpoint for StatusPage {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() && rest != "/" {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        read_only(
            req.method(),
            "text/html; charset=utf-8",
            Bytes::from_static(slipstream_http::status::PAGE.as_bytes()),
        )
    }
}

/// Registers the endpoints every node with metrics has: `metrics` and `status`.
pub fn register_observability(router: &mut Router, registry: Arc<Registry>) {
    router.route("metrics", Metrics(registry));
    router.route("status", StatusPage);
}
