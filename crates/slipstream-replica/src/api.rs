//! The cluster's control endpoints on the node layer's router (001 §5.2, Fig. 8):
//!
//! - `/_slipstream/replicas/<logical URL>`: the replica API. `GET`/`HEAD` serve a replica this
//!   node stores (to anyone, with CORS and `Timing-Allow-Origin`, so a client agent on another
//!   origin can fetch and time it); `PUT` creates or updates one, `POST` only creates, `DELETE`
//!   retires one — these need `Authorization: Bearer <token>`. A logical URL ending in `*` is a
//!   wildcard: its replica is served from this node's document root (or from a `physical` given
//!   as JSON). `GET /_slipstream/replicas` lists this node's entries.
//! - `/_slipstream/resolve?url=`: the name service for other domains: a URL's live replicas.
//! - `/_slipstream/directory`: this node's view of the whole directory and of its peers.
//!
//! Writes pass through [`Placement`] hooks, where a placement policy may refuse or follow
//! them; reads of replicas are counted per resource ([`Counters`]) for policies that move hot
//! resources.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use parking_lot::Mutex;
use serde_json::json;
use slipstream_http::Body;
use slipstream_node::respond::{json, method_not_allowed, text};
use slipstream_node::{Endpoint, Node, Service};

use crate::cluster::{Cluster, Written};
use crate::directory::Pattern;
use crate::store::Content;

/// The router name of the replica API.
pub const REPLICAS: &str = "replicas";

/// Where a logical URL's replica stored on a node is served: `<base>/_slipstream/replicas<url>`.
pub fn stored_physical(base: &str, url: &str) -> String {
    format!(
        "{}{}{REPLICAS}{url}",
        base.trim_end_matches('/'),
        slipstream_node::CONTROL_PREFIX
    )
}

/// A write the replica API was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create or update `pattern` at `physical` (`bytes` of content for an exact pattern).
    Put {
        /// The logical URL pattern.
        pattern: Pattern,
        /// Where the replica will be served.
        physical: String,
        /// The content's size.
        bytes: usize,
    },
    /// Retire this node's replica of `pattern`.
    Delete {
        /// The logical URL pattern.
        pattern: Pattern,
    },
}

/// Pre- and post-filter hooks around the replica API's writes (001 §5.2): where placement
/// policies plug in.
pub trait Placement: Send + Sync + std::fmt::Debug + 'static {
    /// Before a write: `Err(reason)` refuses it with 403 and the reason.
    fn pre(&self, op: &Op) -> Result<(), String> {
        let _ = op;
        Ok(())
    }

    /// After a write was stored.
    fn post(&self, op: &Op, written: &Written) {
        let _ = (op, written);
    }
}

/// Requests and bytes served per replicated resource, since the node started.
#[derive(Debug, Default)]
pub struct Counters {
    by_url: Mutex<BTreeMap<String, Served>>,
}

/// One resource's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Served {
    /// Requests answered with the resource.
    pub requests: u64,
    /// Body bytes sent.
    pub bytes: u64,
}

impl Counters {
    /// Counts one answer of `bytes` for `url`.
    pub fn count(&self, url: &str, bytes: u64) {
        let mut map = self.by_url.lock();
        let served = map.entry(url.to_owned()).or_default();
        served.requests += 1;
        served.bytes += bytes;
    }

    /// Every resource's counts.
    pub fn snapshot(&self) -> BTreeMap<String, Served> {
        self.by_url.lock().clone()
    }

    /// Forgets a resource (its replica was retired).
    pub fn forget(&self, url: &str) {
        self.by_url.lock().remove(url);
    }
}

/// The cluster's endpoints.
#[derive(Debug, Clone)]
pub struct Api {
    cluster: Arc<Cluster>,
    token: Option<Arc<str>>,
    max_body: usize,
    placement: Vec<Arc<dyn Placement>>,
    counters: Arc<Counters>,
}

impl Api {
    /// The endpoints of `cluster`; writes need `token` (none: the API is read-only), and a
    /// replica's content may be at most `max_body` bytes.
    pub fn new(cluster: Arc<Cluster>, token: Option<String>, max_body: usize) -> Api {
        Api {
            cluster,
            token: token.map(Arc::from),
            max_body,
            placement: Vec::new(),
            counters: Arc::default(),
        }
    }

    /// Adds a placement policy's hooks.
    pub fn placement(mut self, hooks: Arc<dyn Placement>) -> Api {
        self.placement.push(hooks);
        self
    }

    /// The per-resource counters.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Registers `replicas`, `resolve` and `directory`, and the agent's files (`sw.js`,
    /// `agent/`), on `node`.
    pub fn register<S: Service>(&self, node: &mut Node<S>) {
        node.route(REPLICAS, Replicas(self.clone()))
            .route("resolve", Resolve(self.cluster.clone()))
            .route("directory", DirectoryView(self.clone()))
            .route("sw.js", crate::page::ServiceWorker)
            .route("agent", crate::page::AgentFiles);
    }

    fn authorized(&self, headers: &HeaderMap) -> Result<(), Box<Response<Body>>> {
        slipstream_node::respond::bearer(
            headers,
            self.token.as_deref(),
            "the replica API is read-only on this node: set `token` in its [cluster] table",
            "the replica API needs `Authorization: Bearer <token>` with this cluster's token",
        )
    }

    async fn get(&self, method: &Method, headers: &HeaderMap, url: &str) -> Response<Body> {
        if url.is_empty() || url == "/" {
            return self.list(method);
        }
        let entry = match Pattern::parse(url) {
            Ok(Pattern::Exact(_)) => self.cluster.own(&Pattern::Exact(url.to_owned())),
            _ => None,
        };
        let Some(entry) = entry.filter(|e| !e.deleted) else {
            return cors(text(
                StatusCode::NOT_FOUND,
                "this node stores no replica of that URL",
            ));
        };
        let content = match self.cluster.content(url).await {
            Ok(Some(content)) => content,
            Ok(None) => {
                return cors(text(
                    StatusCode::NOT_FOUND,
                    "this node stores no replica of that URL",
                ))
            }
            Err(e) => return internal(&e),
        };
        let etag = format!("\"r{}\"", entry.version);
        let matched = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        let mut r = if matched {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        } else {
            let len = content.bytes.len();
            if method == Method::GET {
                self.counters.count(url, len as u64);
            }
            let mut r = Response::new(if method == Method::HEAD {
                Body::empty()
            } else {
                Body::full(Bytes::from(content.bytes))
            });
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            if let Ok(v) = HeaderValue::from_str(&content.content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r
        };
        let h = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&etag) {
            h.insert(header::ETAG, v);
        }
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        cors(r)
    }

    fn list(&self, method: &Method) -> Response<Body> {
        let view = self.cluster.view();
        let me = &self.cluster.settings().name;
        let counters = self.counters.snapshot();
        let entries: Vec<_> = view
            .directory
            .entries()
            .filter(|(node, _, _)| node == me)
            .map(|(_, pattern, e)| {
                let served = counters.get(&pattern.to_string()).copied();
                json!({
                    "pattern": pattern.to_string(),
                    "version": e.version,
                    "deleted": e.deleted,
                    "physical": e.physical,
                    "served": served,
                })
            })
            .collect();
        head_only(
            method,
            json(StatusCode::OK, &json!({ "node": me, "entries": entries })),
        )
    }

    async fn write(&self, req: Request<Incoming>, url: &str) -> Response<Body> {
        if let Err(r) = self.authorized(req.headers()) {
            return *r;
        }
        let pattern = match Pattern::parse(url) {
            Ok(p) if url.starts_with('/') => p,
            Ok(_) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "a logical URL is a path: /_slipstream/replicas/<path>",
                )
            }
            Err(e) => return text(StatusCode::BAD_REQUEST, &format!("logical URL: {e}")),
        };
        let method = req.method().clone();
        if method == Method::DELETE {
            return self.delete(pattern).await;
        }
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let bytes = match Limited::new(req.into_body(), self.max_body).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "a replica's content may be at most {} bytes (`max_replica_bytes`)",
                        self.max_body
                    ),
                )
            }
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!("reading the request body: {e}"),
                )
            }
        };
        let Some(base) = self.cluster.advertise() else {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the node is starting; retry in a moment",
            );
        };
        let base = base.as_str();
        let (physical, content) = match &pattern {
            Pattern::Exact(url) => (
                stored_physical(base, url),
                Some(Content::new(content_type, bytes.to_vec())),
            ),
            Pattern::Prefix(prefix) => match wildcard_physical(base, prefix, &bytes) {
                Ok(physical) => (physical, None),
                Err(r) => return *r,
            },
        };
        if method == Method::POST && self.cluster.own(&pattern).is_some_and(|e| !e.deleted) {
            return text(
                StatusCode::CONFLICT,
                "this node already holds a replica of that URL; PUT updates it",
            );
        }
        let op = Op::Put {
            pattern: pattern.clone(),
            physical: physical.clone(),
            bytes: bytes.len(),
        };
        if let Some(r) = self.pre(&op) {
            return r;
        }
        match self.cluster.put(pattern.clone(), physical, content).await {
            Ok(written) => {
                self.post(&op, &written);
                let status = if written.created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                let mut r = json(status, &describe(&pattern, &written));
                if let Ok(v) = HeaderValue::from_str(&written.entry.physical) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            Err(e) => store_error(&e),
        }
    }

    async fn delete(&self, pattern: Pattern) -> Response<Body> {
        let op = Op::Delete {
            pattern: pattern.clone(),
        };
        if let Some(r) = self.pre(&op) {
            return r;
        }
        match self.cluster.delete(pattern.clone()).await {
            Ok(Some(entry)) => {
                self.counters.forget(&pattern.to_string());
                self.post(
                    &op,
                    &Written {
                        entry,
                        created: false,
                    },
                );
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                r
            }
            Ok(None) => text(
                StatusCode::NOT_FOUND,
                "this node holds no replica of that URL",
            ),
            Err(e) => store_error(&e),
        }
    }

    fn pre(&self, op: &Op) -> Option<Response<Body>> {
        self.placement.iter().find_map(|p| {
            p.pre(op).err().map(|reason| {
                text(
                    StatusCode::FORBIDDEN,
                    &format!("refused by the placement policy: {reason}"),
                )
            })
        })
    }

    fn post(&self, op: &Op, written: &Written) {
        for p in &self.placement {
            p.post(op, written);
        }
    }
}

/// The physical URL of a wildcard replica: the JSON body's `physical`, or this node's
/// document root under the same prefix.
fn wildcard_physical(base: &str, prefix: &str, body: &[u8]) -> Result<String, Box<Response<Body>>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(format!("{}{prefix}*", base.trim_end_matches('/')));
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Given {
        physical: String,
    }
    serde_json::from_slice::<Given>(body)
        .map(|g| g.physical)
        .map_err(|e| {
            Box::new(text(
                StatusCode::BAD_REQUEST,
                &format!(
                    "a wildcard replica's body is empty or {{\"physical\": \"http://host/prefix/*\"}}: {e}"
                ),
            ))
        })
}

fn describe(pattern: &Pattern, written: &Written) -> serde_json::Value {
    json!({
        "pattern": pattern.to_string(),
        "version": written.entry.version,
        "deleted": written.entry.deleted,
        "physical": written.entry.physical,
    })
}

fn store_error(e: &crate::cluster::Error) -> Response<Body> {
    use crate::cluster::Error;
    use crate::store::Error as StoreError;
    match e {
        Error::Store(StoreError::Invalid(reason)) => {
            text(StatusCode::BAD_REQUEST, &format!("refused: {reason}"))
        }
        Error::Physical(e) => text(StatusCode::BAD_REQUEST, &format!("refused: {e}")),
        Error::Full { .. } => text(StatusCode::INSUFFICIENT_STORAGE, &format!("refused: {e}")),
        _ => internal(e),
    }
}

fn internal(e: &dyn std::error::Error) -> Response<Body> {
    tracing::error!("replica API: {e}");
    text(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the replica store failed; nothing was changed",
    )
}

/// Adds the CORS and Resource Timing headers a client agent on another origin needs.
pub fn cors(mut r: Response<Body>) -> Response<Body> {
    add_cors(r.headers_mut());
    r
}

/// [`cors`] on a header map.
pub fn add_cors(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert("timing-allow-origin", HeaderValue::from_static("*"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("etag, content-length"),
    );
}

fn preflight() -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    add_cors(h);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

fn head_only(method: &Method, mut r: Response<Body>) -> Response<Body> {
    if method == Method::HEAD {
        *r.body_mut() = Body::empty();
    }
    r
}

#[derive(Debug)]
struct Replicas(Api);

#[async_trait]
impl Endpoint for Replicas {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        match *req.method() {
            Method::GET | Method::HEAD => {
                let method = req.method().clone();
                self.0.get(&method, req.headers(), rest).await
            }
            Method::PUT | Method::POST | Method::DELETE => self.0.write(req, rest).await,
            Method::OPTIONS => preflight(),
            _ => method_not_allowed("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
        }
    }
}

#[derive(Debug)]
struct Resolve(Arc<Cluster>);

#[async_trait]
impl Endpoint for Resolve {
    async fn call(&self, req: Request<Incoming>, _rest: &str) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return method_not_allowed("GET, HEAD");
        }
        let asked = req.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "url")
                .map(|(_, v)| v.into_owned())
        });
        let Some(asked) = asked else {
            return cors(text(
                StatusCode::BAD_REQUEST,
                "usage: /_slipstream/resolve?url=<URL or path>",
            ));
        };
        let logical = match logical_of(&asked) {
            Ok(l) => l,
            Err(why) => return cors(text(StatusCode::BAD_REQUEST, &why)),
        };
        if let Some(site) = site_of(&asked) {
            if !self.serves(&req, &site) {
                return cors(text(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "`{site}` is not a site of this cluster (its members are reached as \
                         this request's Host or their advertised addresses): ask that site"
                    ),
                ));
            }
        }
        // Under the view's lock, not a copy of the whole view: this is the name service's path.
        let (replicas, version, rules) = self.0.read_view(|v| {
            let live = |node: &str| v.is_live(node);
            let replicas = v.directory.resolve_among(&logical, live);
            (replicas, v.version, rules_for(&v.directory, &logical, live))
        });
        let mut body = json!({
            "url": asked,
            "logical": logical,
            "replicas": replicas,
            "version": version,
        });
        if let Some(rules) = rules {
            body["rules"] = json!(rules);
        }
        let mut r = head_only(req.method(), json(StatusCode::OK, &body));
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        cors(r)
    }
}

/// Patterns more specific than a wildcard at most, for [`rules_for`] to answer with it.
pub const MAX_RESOLVE_RULES: usize = 64;

/// When a wildcard `P*` decides `logical`, the whole of what decides every URL under `P`, as a
/// replica block's entries (`crate::block`): `P*` with its stems and every more specific
/// pattern with its list, so that a client resolves any URL under `P` by itself (its exact key,
/// else the longest `Q*` it starts with, `*` replaced by the rest of the URL). `None` when an
/// exact entry decides `logical` or more than [`MAX_RESOLVE_RULES`] patterns lie under `P`.
fn rules_for(
    directory: &crate::Directory,
    logical: &str,
    live: impl Fn(&str) -> bool,
) -> Option<BTreeMap<String, Vec<String>>> {
    let crate::directory::Decider::Prefix(prefix) = directory.decider(logical)? else {
        return None;
    };
    let under: Vec<Pattern> = directory
        .under(prefix)
        .take(MAX_RESOLVE_RULES + 1)
        .collect();
    if under.len() > MAX_RESOLVE_RULES {
        return None;
    }
    let mut out = BTreeMap::new();
    out.insert(format!("{prefix}*"), directory.rule_among(prefix, &live));
    for pattern in under {
        let list = match &pattern {
            Pattern::Exact(url) => directory.resolve_among(url, &live),
            Pattern::Prefix(p) => directory.rule_among(p, &live),
        };
        out.entry(pattern.to_string()).or_insert(list);
    }
    Some(out)
}

impl Resolve {
    /// Whether `site` (an absolute URL's `host:port`, normalised) is this cluster's: the Host
    /// this request came in for, or a member's advertised address.
    fn serves(&self, req: &Request<Incoming>, site: &str) -> bool {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| site_of(&format!("http://{h}/")));
        if host.as_deref() == Some(site) {
            return true;
        }
        let mine = self.0.advertise();
        let named = |base: Option<&str>| base.and_then(site_of).as_deref() == Some(site);
        named(mine.as_deref())
            || self
                .0
                .read_view(|v| v.nodes.values().any(|n| named(n.advertise.as_deref())))
    }
}

/// `host:port` of an absolute http(s) URL, lower-case, with the scheme's default port
/// written out; `None` for a path.
fn site_of(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let port = uri.port_u16().or(match uri.scheme_str()? {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(format!("{}:{port}", uri.host()?.to_ascii_lowercase()))
}

/// The logical URL (a path, with its query) of a path or an absolute `http(s)` URL.
pub fn logical_of(asked: &str) -> Result<String, String> {
    let path = if asked.starts_with('/') {
        asked.to_owned()
    } else {
        let uri: http::Uri = asked
            .parse()
            .map_err(|e| format!("`url` is neither a path nor an absolute URL: {e}"))?;
        match (uri.scheme_str(), uri.path_and_query()) {
            (Some("http" | "https"), Some(pq)) => pq.as_str().to_owned(),
            (Some("http" | "https"), None) => "/".to_owned(),
            _ => return Err("`url` is neither a path nor an http(s) URL".to_owned()),
        }
    };
    Pattern::parse(&path)
        .map_err(|e| format!("`url`: {e}"))
        .and_then(|p| match p {
            Pattern::Exact(url) => Ok(url),
            Pattern::Prefix(_) => Err("`url` names a URL, not a wildcard pattern".to_owned()),
        })
}

#[derive(Debug)]
struct DirectoryView(Api);

#[async_trait]
impl Endpoint for DirectoryView {
    async fn call(&self, req: Request<Incoming>, _rest: &str) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return method_not_allowed("GET, HEAD");
        }
        let view = self.0.cluster.view();
        let state_version = self.0.cluster.own_state_version().await;
        let entries: Vec<_> = view
            .directory
            .entries()
            .map(|(node, pattern, e)| {
                json!({
                    "node": node,
                    "pattern": pattern.to_string(),
                    "version": e.version,
                    "deleted": e.deleted,
                    "physical": e.physical,
                })
            })
            .collect();
        let body = json!({
            "node": self.0.cluster.settings().name,
            "version": view.version,
            "rejected": view.rejected,
            "impostors": view.impostors,
            "state_version": state_version,
            "key": self.0.cluster.public_key(),
            "gossip": self.0.cluster.gossip_stats().to_json(),
            "nodes": view.nodes,
            "entries": entries,
        });
        let mut r = head_only(req.method(), json(StatusCode::OK, &body));
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }
}
