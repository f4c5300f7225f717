//! A capability from outside the proxy and origin crates: it registers a phase and a control
//! endpoint on the node layer and sees them run, on a proxy and on an origin server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use parking_lot::Mutex;
use slipstream_http::Body;
use slipstream_node::body::BodyFilter;
use slipstream_node::html::{self, Element, HandlerResult, HtmlHandler};
use slipstream_node::phase::CacheOutcome;
use slipstream_node::{Ctx, Endpoint, Node, Phase};

use crate::support::get;

/// Adds `data-seen` to every link.
#[derive(Debug)]
struct MarkLinks;

impl HtmlHandler for MarkLinks {
    fn selector(&self) -> &str {
        "a[href]"
    }
    fn element(&self, el: &mut Element<'_, '_>) -> HandlerResult {
        el.set_attribute("data-seen", "yes")?;
        Ok(())
    }
}

/// What the capability saw.
#[derive(Debug, Default)]
struct Seen {
    requests: AtomicUsize,
    lookups: Mutex<Vec<CacheOutcome>>,
}

#[derive(Debug)]
struct Capability(Arc<Seen>);

#[async_trait]
impl Phase for Capability {
    async fn request_filter(
        &self,
        _ctx: &mut Ctx,
        req: &mut http::request::Parts,
    ) -> Option<Response<Body>> {
        (req.uri.path() == "/blocked")
            .then(|| slipstream_node::respond::text(StatusCode::FORBIDDEN, "blocked by a phase"))
    }

    fn cache_lookup(&self, _ctx: &mut Ctx, _key: &str, outcome: CacheOutcome) {
        self.0.lookups.lock().push(outcome);
    }

    fn response_filter(&self, _ctx: &mut Ctx, res: &mut http::response::Parts) {
        res.headers
            .insert("x-capability", http::HeaderValue::from_static("on"));
    }

    fn body_filter(
        &self,
        _ctx: &mut Ctx,
        res: &http::response::Parts,
    ) -> Option<Box<dyn BodyFilter>> {
        if !html::is_page(res) {
            return None;
        }
        let rewriter = html::Rewriter::new(&[Arc::new(MarkLinks)]).expect("selector");
        Some(Box::new(rewriter))
    }

    fn logging(&self, _ctx: &Ctx, _res: &http::response::Parts) {
        self.0.requests.fetch_add(1, Ordering::SeqCst);
    }
}

/// `/_slipstream/seen`: how many requests the phase logged.
#[derive(Debug)]
struct SeenEndpoint(Arc<Seen>);

#[async_trait]
impl Endpoint for SeenEndpoint {
    async fn call(&self, _req: Request<Incoming>, _rest: &str) -> Response<Body> {
        slipstream_node::respond::json(
            StatusCode::OK,
            &serde_json::json!({ "requests": self.0.requests.load(Ordering::SeqCst) }),
        )
    }
}

const PAGE: &str =
    "<html><body><a href=\"/about.html\">about</a> <a href=\"/x\">x</a></body></html>\n";

fn page_site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("index.html"), PAGE).expect("write");
    std::fs::write(dir.path().join("plain.txt"), "<a href=\"/x\">not html</a>").expect("write");
    dir
}

fn loopback() -> SocketAddr {
    ([127, 0, 0, 1], 0).into()
}

async fn origin_settings(dir: &std::path::Path) -> slipstream_origin::Settings {
    slipstream_origin::Config {
        root: Some(dir.to_owned()),
        listen: loopback(),
        cache_control: Some("max-age=60".into()),
        ..Default::default()
    }
    .validate()
    .expect("valid")
}

/// Runs a blocking client call off the runtime.
async fn fetch(addr: SocketAddr, path: &'static str) -> crate::support::Reply {
    tokio::task::spawn_blocking(move || get(addr, path))
        .await
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_registers_a_phase_and_an_endpoint_on_a_proxy() {
    let dir = page_site();
    let settings = origin_settings(dir.path()).await;
    let listen = settings.listen();
    let origin = Node::new(slipstream_origin::Origin::new(settings))
        .spawn(&listen)
        .await
        .expect("origin");

    let seen = Arc::new(Seen::default());
    let settings = slipstream_proxy::Config {
        listen: loopback(),
        origin: vec![format!("http://{}", origin.addr)],
        name: "edge".into(),
        ..Default::default()
    }
    .validate()
    .expect("valid");
    let listen = settings.listen();
    let proxy = slipstream_proxy::Proxy::builder(settings)
        .phase(Capability(seen.clone()))
        .build();
    let mut node = Node::new(proxy);
    node.route("seen", SeenEndpoint(seen.clone()));
    let addr = node.spawn(&listen).await.expect("proxy").addr;

    let first = fetch(addr, "/index.html").await;
    let second = fetch(addr, "/index.html").await;
    for page in [&first, &second] {
        assert_eq!(page.status, 200);
        assert_eq!(page.header("x-capability"), Some("on"));
        let body = String::from_utf8(page.body.clone()).expect("utf-8");
        assert_eq!(body.matches("data-seen=\"yes\"").count(), 2, "{body}");
        assert!(
            page.header("content-length")
                .is_none_or(|n| n == body.len().to_string()),
            "a rewritten page must not keep the original length"
        );
    }
    assert!(second
        .header("cache-status")
        .unwrap_or_default()
        .contains("hit"));
    // Not HTML: untouched, length kept.
    let plain = fetch(addr, "/plain.txt").await;
    assert_eq!(plain.body, b"<a href=\"/x\">not html</a>");
    assert_eq!(plain.header("x-capability"), Some("on"));
    // The request filter answers by itself.
    assert_eq!(fetch(addr, "/blocked").await.status, 403);
    assert_eq!(
        *seen.lookups.lock(),
        [CacheOutcome::Miss, CacheOutcome::Hit, CacheOutcome::Miss]
    );
    // The endpoint the capability registered, beside the proxy's own.
    let counted = fetch(addr, "/_slipstream/seen").await;
    let json: serde_json::Value = serde_json::from_slice(&counted.body).expect("json");
    assert_eq!(json["requests"], 4);
    assert_eq!(fetch(addr, "/_slipstream/metrics").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_server_runs_the_same_phases() {
    let dir = page_site();
    let seen = Arc::new(Seen::default());
    let settings = origin_settings(dir.path()).await;
    let listen = settings.listen();
    let origin = slipstream_origin::Origin::builder(settings)
        .phase(Capability(seen.clone()))
        .build();
    let mut node = Node::new(origin);
    node.route("seen", SeenEndpoint(seen.clone()));
    let addr = node.spawn(&listen).await.expect("origin").addr;
    for _ in 0..2 {
        let page = fetch(addr, "/index.html").await;
        assert_eq!(page.status, 200);
        let body = String::from_utf8(page.body.clone()).expect("utf-8");
        assert_eq!(body.matches("data-seen=\"yes\"").count(), 2, "{body}");
        assert!(page
            .header("content-length")
            .is_none_or(|n| n == body.len().to_string()));
    }
    assert_eq!(fetch(addr, "/blocked").await.status, 403);
    let json: serde_json::Value =
        serde_json::from_slice(&fetch(addr, "/_slipstream/seen").await.body).expect("json");
    assert_eq!(json["requests"], 3);
}
