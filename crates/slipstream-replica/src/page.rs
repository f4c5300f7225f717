//! HTML pre-processing (001 §3.3, §5.1) and the client agent's files: a phase on the node
//! layer that gives every page a node serves the replica lists of the logical URLs it names,
//! and registers the agent.
//!
//! A page streams through the node layer's `lol_html` rewriter: the agent's registration
//! script goes first into `<head>`, every `href`, `src` and `srcset` URL of this origin is
//! looked up in the directory as it passes, and the entries it needs (`crate::block`) go at the
//! end of the body (before `</body>`; at the end of the document when it has none) as one JSON
//! block (`<script type="application/json"
//! id="slipstream-replicas">`), where the agent reads them: `{"v":2,"config":{...},
//! "servers":["http://r1","http://r2"],"urls":{"/*":[0,1],"/a.png":[0,
//! "http://r3/a-copy.png"]}}`. A key ending in `*` is a rule for every URL under its prefix
//! that no more specific key names. A number `i` stands for `servers[i]` followed by the
//! key's logical URL (a server's base URL, or the base of its replica store); a string is any
//! other physical URL (in a rule, a stem whose `*` stands for the rest of the URL). A block
//! whose `urls` would be over [`block::COMPRESS_ABOVE`] bytes carries them zlib-compressed in
//! base64 as `"urls_z"` (`"v":3`).
//! The page's own URLs are untouched, so it works as before with JavaScript off or on a browser
//! without Service Workers.
//!
//! Every response of a cluster node also carries `Access-Control-Allow-Origin: *` and
//! `Timing-Allow-Origin: *`, so the agent on another replica's origin can fetch and time it.

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
use crate::block::{self, Needs};
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
    cache: Arc<PageCache>,
}

impl Pages {
    /// Pre-processes pages with `cluster`'s directory; `agent` overrides the agent's Refresh
    /// defaults (`web/agent/select.mjs`'s `DEFAULTS` field names). Processed pages are kept in
    /// a cache of `cache_bytes` (0: none), each under the file's validator and the directory
    /// version it was made with, so a changed file or directory makes it a miss.
    pub fn new(
        cluster: Arc<Cluster>,
        agent: serde_json::Map<String, serde_json::Value>,
        cache_bytes: usize,
    ) -> Pages {
        Pages {
            cluster,
            agent: Arc::new(agent),
            cache: Arc::new(PageCache::new(cache_bytes)),
        }
    }

    /// Pages served from the cache and pages processed, since the start.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.cache.inner.lock();
        (inner.hits, inner.misses)
    }
}

/// The request path (relative URLs resolve against it) and whether the request was a HEAD
/// (whose page gets the processed page's validator, but has no body to process).
#[derive(Debug, Clone)]
struct PagePath(String, bool);

/// What the cache knows of this response: its key, and the processed page if it holds it.
#[derive(Debug, Clone)]
struct Cached {
    key: PageKey,
    page: Option<Bytes>,
}

/// A processed page's identity: the path, the file's validator, the directory version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PageKey {
    path: String,
    etag: String,
    version: u64,
}

/// Processed pages, bounded in bytes; the oldest entry goes first.
#[derive(Debug)]
struct PageCache {
    capacity: usize,
    inner: Mutex<PageCacheInner>,
}

#[derive(Debug, Default)]
struct PageCacheInner {
    /// Path → its one processed page (a newer one replaces it) and its insertion serial.
    pages: std::collections::HashMap<String, (PageKey, Bytes, u64)>,
    /// Paths by insertion serial, for eviction; a record whose serial is no longer its path's
    /// is stale (the path was inserted again) and skipped.
    order: std::collections::VecDeque<(String, u64)>,
    serial: u64,
    used: usize,
    hits: u64,
    misses: u64,
}

impl PageCache {
    fn new(capacity: usize) -> PageCache {
        PageCache {
            capacity,
            inner: Mutex::new(PageCacheInner::default()),
        }
    }

    fn get(&self, key: &PageKey) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        let found = inner
            .pages
            .get(&key.path)
            .filter(|(k, _, _)| k == key)
            .map(|(_, page, _)| page.clone());
        if found.is_some() {
            inner.hits += 1;
        } else {
            inner.misses += 1;
        }
        found
    }

    /// The length of the processed page under `key`, if held (not counted as a hit or miss).
    fn len_of(&self, key: &PageKey) -> Option<usize> {
        let inner = self.inner.lock();
        inner
            .pages
            .get(&key.path)
            .filter(|(k, _, _)| k == key)
            .map(|(_, page, _)| page.len())
    }

    fn insert(&self, key: PageKey, page: Bytes) {
        if page.len() > self.capacity / 4 {
            return;
        }
        let mut inner = self.inner.lock();
        inner.serial += 1;
        let serial = inner.serial;
        let path = key.path.clone();
        inner.used += page.len();
        if let Some((_, old, _)) = inner.pages.insert(path.clone(), (key, page, serial)) {
            inner.used -= old.len();
        }
        inner.order.push_back((path, serial));
        while inner.used > self.capacity {
            let Some((path, then)) = inner.order.pop_front() else {
                break;
            };
            if inner.pages.get(&path).is_some_and(|(_, _, s)| *s == then) {
                if let Some((_, old, _)) = inner.pages.remove(&path) {
                    inner.used -= old.len();
                }
            }
        }
        // Stale records are dropped as they reach the front; bound them all the same.
        if inner.order.len() > 4 * inner.pages.len() + 64 {
            let live: Vec<(String, u64)> = inner
                .order
                .iter()
                .filter(|(p, s)| inner.pages.get(p).is_some_and(|(_, _, t)| t == s))
                .cloned()
                .collect();
            inner.order = live.into();
        }
    }
}

/// Replaces a page's body with its processed copy from the cache.
struct FromCache(Option<Bytes>);

impl BodyFilter for FromCache {
    fn filter(&mut self, _chunk: Bytes) -> std::io::Result<Bytes> {
        Ok(self.0.take().unwrap_or_default())
    }
    fn finish(&mut self) -> std::io::Result<Bytes> {
        Ok(self.0.take().unwrap_or_default())
    }
    fn known_len(&self) -> Option<u64> {
        self.0.as_ref().map(|b| b.len() as u64)
    }
}

/// Processes a page and keeps the result for the cache.
struct Keeping {
    rewriter: Rewriter,
    out: Vec<u8>,
    /// Whether the page outgrew what the cache would take.
    dropped: bool,
    key: PageKey,
    cache: Arc<PageCache>,
}

impl Keeping {
    fn keep(&mut self, bytes: &Bytes) {
        if self.dropped {
            return;
        }
        if self.out.len() + bytes.len() > self.cache.capacity / 4 {
            self.dropped = true;
            self.out = Vec::new();
        } else {
            self.out.extend_from_slice(bytes);
        }
    }
}

impl BodyFilter for Keeping {
    fn filter(&mut self, chunk: Bytes) -> std::io::Result<Bytes> {
        let out = self.rewriter.filter(chunk)?;
        self.keep(&out);
        Ok(out)
    }
    fn finish(&mut self) -> std::io::Result<Bytes> {
        let out = self.rewriter.finish()?;
        self.keep(&out);
        if !self.dropped {
            let page = Bytes::from(std::mem::take(&mut self.out));
            self.cache.insert(self.key.clone(), page);
        }
        Ok(out)
    }
}

#[async_trait]
impl Phase for Pages {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        if req.method == Method::GET || req.method == Method::HEAD {
            ctx.extensions.insert(PagePath(
                req.uri.path().to_owned(),
                req.method == Method::HEAD,
            ));
        }
        None
    }

    fn response_filter(&self, ctx: &mut Ctx, res: &mut response::Parts) {
        add_cors(&mut res.headers);
        // A pre-processed page is another representation than the file: its validator names
        // the directory version it embeds, so a cached copy is not revalidated by the file's.
        let Some(PagePath(path, head)) = ctx.extensions.get::<PagePath>().cloned() else {
            return;
        };
        if html::is_page(res) {
            let version = self.cluster.version();
            // HEAD has no body to process; its length is the processed page's when the cache
            // holds it, else unknown (the file's would be wrong: RFC 9110 §9.3.2).
            let mut head_len = None;
            if let Some(tag) = res.headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
                let opaque = tag.trim_start_matches("W/").trim_matches('"');
                if self.cache.capacity > 0 {
                    let key = PageKey {
                        path,
                        etag: opaque.to_owned(),
                        version,
                    };
                    if head {
                        head_len = self.cache.len_of(&key);
                    } else {
                        let page = self.cache.get(&key);
                        ctx.extensions.insert(Cached { key, page });
                    }
                }
                let tagged = format!("W/\"{opaque}-d{version}\"");
                match HeaderValue::from_str(&tagged) {
                    Ok(v) => {
                        res.headers.insert(header::ETAG, v);
                    }
                    Err(_) => {
                        res.headers.remove(header::ETAG);
                    }
                }
            }
            if head {
                match head_len {
                    Some(len) => {
                        res.headers
                            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                    }
                    None => {
                        res.headers.remove(header::CONTENT_LENGTH);
                    }
                }
            }
        }
    }

    fn body_filter(&self, ctx: &mut Ctx, res: &response::Parts) -> Option<Box<dyn BodyFilter>> {
        let PagePath(path, head) = ctx.extensions.get::<PagePath>()?.clone();
        if head || !html::is_page(res) {
            return None;
        }
        let cached = ctx.extensions.remove::<Cached>();
        if let Some(Cached {
            page: Some(page), ..
        }) = cached
        {
            return Some(Box::new(FromCache(Some(page))));
        }
        let lists = Arc::new(Lists {
            base: path.clone(),
            cluster: self.cluster.clone(),
            agent: self.agent.clone(),
            needs: Mutex::new(Needs::default()),
        });
        lists.note_all(std::iter::once(path.as_str()));
        let handlers: [Arc<dyn HtmlHandler>; 2] = [Arc::new(Head), Arc::new(Urls(lists))];
        match Rewriter::new(&handlers) {
            Ok(rewriter) => match cached {
                Some(Cached { key, page: None }) => Some(Box::new(Keeping {
                    rewriter,
                    out: Vec::new(),
                    dropped: false,
                    key,
                    cache: self.cache.clone(),
                })),
                _ => Some(Box::new(rewriter)),
            },
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
        let mut raw: Vec<String> = Vec::new();
        for name in ["href", "src"] {
            if let Some(v) = el.get_attribute(name) {
                raw.push(v);
            }
        }
        if let Some(set) = el.get_attribute("srcset") {
            for candidate in set.split(',') {
                if let Some(url) = candidate.split_whitespace().next() {
                    // `<img src=a srcset="a 1x, b 2x">` names `a` twice.
                    if !raw.iter().any(|r| r.trim() == url) {
                        raw.push(url.to_owned());
                    }
                }
            }
        }
        self.0.note_all(raw.iter().map(String::as_str));
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
    needs: Mutex<Needs>,
}

impl Lists {
    /// Notes the URLs of one element (as written in the page), under one look at the view.
    fn note_all<'a>(&self, raw: impl Iterator<Item = &'a str>) {
        let urls: Vec<String> = raw
            .filter_map(|r| same_origin_path(&self.base, r.trim()))
            .collect();
        if urls.is_empty() {
            return;
        }
        let mut needs = self.needs.lock();
        self.cluster.read_view(|view| {
            for url in urls {
                needs.note(&view.directory, url);
            }
        });
    }

    /// The page's block: the entries it needs ([`Needs::entries`]) as [`block::to_json`]
    /// writes them, in a script element they cannot end.
    fn block(&self) -> String {
        let needs = self.needs.lock();
        let entries = self
            .cluster
            .read_view(|view| needs.entries(&view.directory, |node| view.is_live(node)));
        let block = block::to_json(entries, &self.agent);
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
/// this origin: root-relative (`/a`) or relative (`a`, `../a`), resolved as RFC 3986 §5.2 does
/// (merge with the base's directory, §5.2.3; remove dot segments, §5.2.4; a query-only reference
/// keeps the base path). Absolute and scheme-relative URLs, and `data:`/`javascript:` and the
/// like, are left alone. `<base href>` is not followed.
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
    // No segment starts with a dot (the usual case): nothing to remove.
    if !path.contains("/.") {
        return Some(joined);
    }
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

/// How long a browser may reuse an agent file without asking again: a new binary's agent
/// reaches the browsers within this (the worker is registered with `updateViaCache: 'all'`,
/// so its update checks may use it too; Chromium caps that at 24 hours). Without it, every
/// navigation re-sent the worker's script and modules: five requests per page.
const AGENT_MAX_AGE: &str = "max-age=300";

/// A strong entity tag of an agent file: the start of its body's SHA-256.
fn agent_etag(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"a{hex}\"")
}

fn agent_file(method: &Method, headers: &http::HeaderMap, name: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return slipstream_node::respond::method_not_allowed("GET, HEAD");
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
    let etag = agent_etag(bytes);
    let validators = slipstream_http_rules::conditional::Validators {
        etag: Some(etag.clone()),
        last_modified: None,
    };
    let unchanged = slipstream_http_rules::conditional::evaluate(method, headers, &validators)
        == slipstream_http_rules::conditional::Outcome::NotModified;
    let mut r = Response::new(if method == Method::HEAD || unchanged {
        Body::empty()
    } else {
        Body::full(Bytes::from_static(bytes))
    });
    if unchanged {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if !unchanged {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(AGENT_MAX_AGE),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    // Every member serves the same files: an agent whose page's origin is down takes them
    // from another replica's origin, which CORS must allow.
    add_cors(h);
    r
}

#[async_trait]
impl Endpoint for AgentFiles {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        agent_file(req.method(), req.headers(), rest.trim_start_matches('/'))
    }
}

#[async_trait]
impl Endpoint for ServiceWorker {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such file");
        }
        let mut r = agent_file(req.method(), req.headers(), "sw.js");
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
    fn agent_files_are_served_to_any_origin() {
        let none = http::HeaderMap::new();
        let r = agent_file(&Method::GET, &none, "register.js");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let missing = agent_file(&Method::GET, &none, "nope.js");
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn agent_files_can_be_reused_and_revalidated() {
        let none = http::HeaderMap::new();
        let r = agent_file(&Method::GET, &none, "sw.js");
        assert_eq!(r.headers()[header::CACHE_CONTROL], AGENT_MAX_AGE);
        let etag = r.headers()[header::ETAG].clone();
        let mut conditional = http::HeaderMap::new();
        conditional.insert(header::IF_NONE_MATCH, etag.clone());
        let again = agent_file(&Method::GET, &conditional, "sw.js");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], etag);
        assert_eq!(again.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        // Another file's tag does not match.
        let other = agent_file(&Method::GET, &conditional, "register.js");
        assert_eq!(other.status(), StatusCode::OK);
    }

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

    fn key(path: &str, version: u64) -> PageKey {
        PageKey {
            path: path.into(),
            etag: "e".into(),
            version,
        }
    }

    #[test]
    fn the_page_cache_is_bounded_and_keys_on_file_and_directory() {
        let cache = PageCache::new(400);
        cache.insert(key("/a", 1), Bytes::from(vec![b'a'; 100]));
        assert!(cache.get(&key("/a", 1)).is_some());
        // Another directory version or file validator is a miss.
        assert!(cache.get(&key("/a", 2)).is_none());
        assert!(cache
            .get(&PageKey {
                etag: "f".into(),
                ..key("/a", 1)
            })
            .is_none());
        // A newer page of a path replaces the older.
        cache.insert(key("/a", 2), Bytes::from(vec![b'b'; 100]));
        assert!(cache.get(&key("/a", 1)).is_none());
        assert_eq!(cache.get(&key("/a", 2)).unwrap()[0], b'b');
        // Over capacity, the oldest go first; a page over a quarter is not kept.
        for p in ["/b", "/c", "/d"] {
            cache.insert(key(p, 2), Bytes::from(vec![b'x'; 100]));
        }
        assert!(cache.get(&key("/a", 2)).is_some());
        cache.insert(key("/e", 2), Bytes::from(vec![b'x'; 100]));
        assert!(cache.get(&key("/a", 2)).is_none());
        assert!(cache.get(&key("/e", 2)).is_some());
        cache.insert(key("/big", 2), Bytes::from(vec![b'x'; 101]));
        assert!(cache.get(&key("/big", 2)).is_none());
        let inner = cache.inner.lock();
        assert_eq!(inner.used, 400);
        assert_eq!(inner.pages.len(), 4);
    }

    #[test]
    fn the_block_cannot_close_its_script() {
        let safe = script_safe(r#"{"u":"</script><script>alert(1)</script>&"}"#);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["u"], "</script><script>alert(1)</script>&");
    }
}
