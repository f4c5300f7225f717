//! HTML pre-processing (001 §3.3, §5.1) and the client agent's files: a phase on the node
//! layer that gives every page a node serves the replica lists of the logical URLs it names,
//! and registers the agent.
//!
//! A page streams through the node layer's `lol_html` rewriter: the agent's registration
//! script goes first into `<head>`, every `href`, `src` and `srcset` URL of this origin is
//! looked up in the directory as it passes, and the lists found go at the end of the document
//! as one JSON block (`<script type="application/json" id="slipstream-replicas">`), where the
//! agent reads them: `{"v":1,"config":{...},"urls":{"/img/a.png":["http://r1/img/a.png",...]}}`.
//! The page's own URLs are untouched, so it works as before with JavaScript off or on a browser
//! without Service Workers.
//!
//! Every response of a cluster node also carries `Access-Control-Allow-Origin: *` and
//! `Timing-Allow-Origin: *`, so the agent on another replica's origin can fetch and time it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{request, response, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use parking_lot::Mutex;
use slipstream_http::Body;
use slipstream_node::body::BodyFilter;
use slipstream_node::html::{self, ContentType, Element, HandlerResult, HtmlHandler, Rewriter};
use slipstream_node::respond::text;
use slipstream_node::{Ctx, Endpoint, Phase};

use crate::api::add_cors;
use crate::cluster::Cluster;

/// The script tag registering the agent.
pub const REGISTER: &str = r#"<script src="/_slipstream/agent/register.js" defer></script>"#;

/// The id of the JSON block carrying the replica lists.
pub const BLOCK_ID: &str = "slipstream-replicas";

/// The pre-processing phase.
#[derive(Debug, Clone)]
pub struct Pages {
    cluster: Arc<Cluster>,
    /// The agent's selector configuration, passed to it in every block.
    agent: Arc<serde_json::Map<String, serde_json::Value>>,
}

impl Pages {
    /// Pre-processes pages with `cluster`'s directory; `agent` overrides the agent's Refresh
    /// defaults (`web/agent/select.mjs`'s `DEFAULTS` field names).
    pub fn new(cluster: Arc<Cluster>, agent: serde_json::Map<String, serde_json::Value>) -> Pages {
        Pages {
            cluster,
            agent: Arc::new(agent),
        }
    }
}

/// The request path, kept for the body filter (relative URLs resolve against it).
#[derive(Debug, Clone)]
struct PagePath(String);

#[async_trait]
impl Phase for Pages {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        if req.method == Method::GET {
            ctx.extensions.insert(PagePath(req.uri.path().to_owned()));
        }
        None
    }

    fn response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {
        add_cors(&mut res.headers);
        // A pre-processed page is another representation than the file: its validator names
        // the directory version it embeds, so a cached copy is not revalidated by the file's.
        if ctx.extensions.get::<PagePath>().is_some() && html::is_page(res) {
            if let Some(tag) = res.headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
                let opaque = tag.trim_start_matches("W/").trim_matches('"');
                let tagged = format!("W/\"{opaque}-d{}\"", self.cluster.version());
                match HeaderValue::from_str(&tagged) {
                    Ok(v) => {
                        res.headers.insert(header::ETAG, v);
                    }
                    Err(_) => {
                        res.headers.remove(header::ETAG);
                    }
                }
            }
        }
    }

    fn body_filter(&self, ctx: &mut Ctx, res: &response::Parts) -> Option<Box<dyn BodyFilter>> {
        let PagePath(path) = ctx.extensions.get::<PagePath>()?.clone();
        if !html::is_page(res) {
            return None;
        }
        let lists = Arc::new(Lists {
            base: path.clone(),
            cluster: self.cluster.clone(),
            agent: self.agent.clone(),
            found: Mutex::new(BTreeMap::new()),
        });
        lists.note(&path);
        let handlers: [Arc<dyn HtmlHandler>; 2] = [Arc::new(Head), Arc::new(Urls(lists))];
        match Rewriter::new(&handlers) {
            Ok(r) => Some(Box::new(r)),
            Err(e) => {
                tracing::error!("page pre-processing: {e}");
                None
            }
        }
    }
}

/// Prepends the registration script to `<head>`.
#[derive(Debug)]
struct Head;

impl HtmlHandler for Head {
    fn selector(&self) -> &str {
        "head"
    }
    fn element(&self, el: &mut Element<'_, '_>) -> HandlerResult {
        el.prepend(REGISTER, ContentType::Html);
        Ok(())
    }
}

/// Looks up every URL attribute of the page's elements, and writes the block at its end.
#[derive(Debug)]
struct Urls(Arc<Lists>);

impl HtmlHandler for Urls {
    fn selector(&self) -> &str {
        "[href], [src], [srcset]"
    }
    fn element(&self, el: &mut Element<'_, '_>) -> HandlerResult {
        for name in ["href", "src"] {
            if let Some(v) = el.get_attribute(name) {
                self.0.note(&v);
            }
        }
        if let Some(set) = el.get_attribute("srcset") {
            for candidate in set.split(',') {
                if let Some(url) = candidate.split_whitespace().next() {
                    self.0.note(url);
                }
            }
        }
        Ok(())
    }
    fn end(&self) -> Option<String> {
        Some(self.0.block())
    }
}

/// The replica lists of one page, collected as it streams, written at its end.
#[derive(Debug)]
struct Lists {
    base: String,
    cluster: Arc<Cluster>,
    agent: Arc<serde_json::Map<String, serde_json::Value>>,
    found: Mutex<BTreeMap<String, Vec<String>>>,
}

/// The most URLs one page's block lists (a bound on its size and on the lookups).
const MAX_URLS: usize = 4096;

impl Lists {
    fn note(&self, raw: &str) {
        let Some(url) = same_origin_path(&self.base, raw.trim()) else {
            return;
        };
        let mut found = self.found.lock();
        if found.len() >= MAX_URLS || found.contains_key(&url) {
            return;
        }
        let replicas = self.cluster.resolve(&url);
        if !replicas.is_empty() {
            found.insert(url, replicas);
        }
    }
}

impl Lists {
    /// The JSON block of the lists found.
    fn block(&self) -> String {
        let block = serde_json::json!({
            "v": 1,
            "config": *self.agent,
            "urls": *self.found.lock(),
        });
        format!(
            r#"<script type="application/json" id="{BLOCK_ID}">{}</script>"#,
            script_safe(&block.to_string())
        )
    }
}

/// JSON that cannot end the `<script>` element it sits in.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The path (with query, without fragment) of a URL written in a page at `base`, when it names
/// this origin: root-relative (`/a`) or relative (`a`, `../a`). Absolute and
/// scheme-relative URLs, and `data:`/`javascript:` and the like, are left alone.
pub fn same_origin_path(base: &str, raw: &str) -> Option<String> {
    let raw = raw.split('#').next().unwrap_or_default();
    if raw.is_empty() || raw.starts_with("//") {
        return None;
    }
    let scheme_end = raw.find(':');
    let first_delim = raw.find(['/', '?']);
    if let Some(colon) = scheme_end {
        if first_delim.is_none_or(|d| colon < d) {
            return None;
        }
    }
    let joined = if raw.starts_with('/') {
        raw.to_owned()
    } else if raw.starts_with('?') {
        format!("{}{raw}", base.split('?').next().unwrap_or_default())
    } else {
        let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{raw}")
    };
    let (path, query) = match joined.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (joined.as_str(), None),
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut url = format!("/{}", out.join("/"));
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    Some(url)
}

/// The client agent's files (`web/agent/`), built into the binary.
mod files {
    include!(concat!(env!("OUT_DIR"), "/agent_files.rs"));
}

/// `/_slipstream/agent/<file>`: the agent's modules and pages.
#[derive(Debug, Clone, Copy)]
pub struct AgentFiles;

/// `/_slipstream/sw.js`: the Service Worker, allowed to control the whole origin.
#[derive(Debug, Clone, Copy)]
pub struct ServiceWorker;

fn agent_file(method: &Method, name: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Some((_, bytes)) = files::FILES.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = files::FILES.iter().map(|(n, _)| *n).collect();
        return text(
            StatusCode::NOT_FOUND,
            &format!("no such agent file; this binary has {}", names.join(", ")),
        );
    };
    let content_type = match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("html") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("css") => "text/css; charset=utf-8",
        _ => "application/octet-stream",
    };
    let mut r = Response::new(if method == Method::HEAD {
        Body::empty()
    } else {
        Body::full(Bytes::from_static(bytes))
    });
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    // The agent changes with the binary: browsers check it on every load.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[async_trait]
impl Endpoint for AgentFiles {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        agent_file(req.method(), rest.trim_start_matches('/'))
    }
}

#[async_trait]
impl Endpoint for ServiceWorker {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such file");
        }
        let mut r = agent_file(req.method(), "sw.js");
        if r.status() == StatusCode::OK {
            r.headers_mut()
                .insert("service-worker-allowed", HeaderValue::from_static("/"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_paths_resolve_like_a_browser() {
        let base = "/dir/page.html";
        for (raw, want) in [
            ("/img/a.png", Some("/img/a.png")),
            ("img/a.png", Some("/dir/img/a.png")),
            ("./img/a.png", Some("/dir/img/a.png")),
            ("../a.css?v=2#top", Some("/a.css?v=2")),
            ("../../../a", Some("/a")),
            ("..", Some("/")),
            ("?q=1", Some("/dir/page.html?q=1")),
            ("a:b/c", None),
            ("x/a:b", Some("/dir/x/a:b")),
            ("http://other/a", None),
            ("//other/a", None),
            ("data:image/png;base64,AAA", None),
            ("javascript:void(0)", None),
            ("mailto:a@b", None),
            ("#top", None),
            ("", None),
        ] {
            assert_eq!(same_origin_path(base, raw).as_deref(), want, "{raw}");
        }
    }

    #[test]
    fn the_block_cannot_close_its_script() {
        let safe = script_safe(r#"{"u":"</script><script>alert(1)</script>&"}"#);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["u"], "</script><script>alert(1)</script>&");
    }
}
