//! The router for `/_slipstream/`: one table from endpoint name to handler, filled by the
//! capabilities a node runs. Built-in endpoints ([`Metrics`], [`StatusPage`]) are registered by
//! the services that have metrics.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
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
        return crate::respond::method_not_allowed("GET, HEAD");
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

/// Samples kept by [`History`]: two minutes at one a second, what the status page's charts show.
pub const HISTORY_SAMPLES: usize = 120;

/// `/_slipstream/history`: the node's name and its metrics sampled every second for the last
/// [`HISTORY_SAMPLES`] seconds, so that the status page opens on charts already drawn. JSON:
/// `{"node": NAME, "interval_ms": 1000, "samples": [{"t": UNIX_MS, "metrics": TEXT}, ...]}`,
/// oldest first. At most [`HISTORY_SAMPLES`] renderings of the metrics page are held.
#[derive(Debug, Clone)]
pub struct History {
    node: Arc<str>,
    samples: Arc<parking_lot::Mutex<std::collections::VecDeque<(u64, String)>>>,
}

impl History {
    /// A history of `registry` for the node `name`, sampled by a task on the current tokio
    /// runtime (none outside one: the history then stays empty). The task ends when the
    /// history and the registry are both dropped.
    pub fn start(name: &str, registry: &Arc<Registry>) -> History {
        let history = History {
            node: name.into(),
            samples: Arc::default(),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (samples, registry) = (Arc::downgrade(&history.samples), Arc::downgrade(registry));
            runtime.spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    every.tick().await;
                    let (Some(samples), Some(registry)) = (samples.upgrade(), registry.upgrade())
                    else {
                        return;
                    };
                    let text = registry.render();
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    let mut samples = samples.lock();
                    if samples.len() == HISTORY_SAMPLES {
                        samples.pop_front();
                    }
                    samples.push_back((t, text));
                }
            });
        }
        history
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.lock().len()
    }

    /// Whether no sample is held yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn json(&self) -> String {
        let samples: Vec<serde_json::Value> = self
            .samples
            .lock()
            .iter()
            .map(|(t, text)| serde_json::json!({ "t": t, "metrics": text }))
            .collect();
        serde_json::json!({
            "node": &*self.node,
            "interval_ms": 1000,
            "samples": samples,
        })
        .to_string()
    }
}

#[async_trait]
impl Endpoint for History {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        read_only(req.method(), "application/json", self.json().into())
    }
}

/// Registers the endpoints every node with metrics has: `metrics`, `history` and `status`, for
/// the node called `name`.
pub fn register_observability(router: &mut Router, registry: Arc<Registry>, name: &str) {
    router.route("history", History::start(name, &registry));
    router.route("metrics", Metrics(registry));
    router.route("status", StatusPage);
}
