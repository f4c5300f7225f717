//! A scriptable origin, a proxy under test, and a small HTTP/1.1 client.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use slipstream_proxy::Config;
use tokio::sync::Notify;

/// What the origin answers for a path.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Answer `Range: bytes=N-` with a 206 (otherwise ranges are ignored, as many origins do).
    pub ranges: bool,
    /// Hold the answer until the test calls [`Origin::release`].
    pub held: bool,
    /// Close the connection without answering.
    pub disconnect: bool,
    /// Answer after this long (on tokio's clock, so a paused test moves past it at once).
    pub delay: Option<Duration>,
}

impl Reply {
    pub fn ok(body: &str, headers: &[(&str, &str)]) -> Reply {
        Reply {
            status: 200,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: Bytes::from(body.to_owned()),
            ranges: false,
            held: false,
            disconnect: false,
            delay: None,
        }
    }

    /// The origin closes the connection after reading the request, without answering.
    pub fn disconnect() -> Reply {
        Reply {
            disconnect: true,
            ..Reply::ok("", &[])
        }
    }

    pub fn status(mut self, status: u16) -> Reply {
        self.status = status;
        self
    }

    pub fn with_ranges(mut self) -> Reply {
        self.ranges = true;
        self
    }

    /// Answered after `delay` on tokio's clock.
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = Some(delay);
        self
    }

    /// Held until [`Origin::release`].
    pub fn held(mut self) -> Reply {
        self.held = true;
        self
    }
}

/// A request as the origin saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
}

/// An origin whose answers the test sets, and that records what it was asked.
#[derive(Clone)]
pub struct Origin {
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    /// For If-None-Match revalidation: path → ETag that earns a 304.
    etags: Arc<Mutex<HashMap<String, String>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    pub arrived: Arc<Notify>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            routes: Arc::default(),
            etags: Arc::default(),
            seen: Arc::default(),
            arrived: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Origin {
    pub fn set(&self, path: &str, reply: Reply) {
        self.routes.lock().insert(path.to_owned(), reply);
    }

    /// Answer 304 to a request for `path` carrying If-None-Match: `etag`.
    pub fn validates(&self, path: &str, etag: &str) {
        self.etags.lock().insert(path.to_owned(), etag.to_owned());
    }

    /// Lets every held reply go, now and from now on.
    pub fn release(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    pub fn hits(&self, path: &str) -> usize {
        self.seen.lock().iter().filter(|s| s.path == path).count()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    /// The answer, or `Err` to close the connection without one.
    async fn answer(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, &'static str> {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/".to_owned(), |p| p.to_string());
        let seen = Seen {
            method: req.method().to_string(),
            path: path.clone(),
            headers: req.headers().clone(),
        };
        self.seen.lock().push(seen);
        self.arrived.notify_waiters();
        let reply = self.routes.lock().get(&path).cloned();
        let Some(reply) = reply else {
            let mut r = Response::new(Full::new(Bytes::from_static(b"no route\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return Ok(r);
        };
        if reply.disconnect {
            return Err("disconnect");
        }
        if reply.held {
            let _ = self.gate.acquire().await;
        }
        if let Some(delay) = reply.delay {
            tokio::time::sleep(delay).await;
        }
        let etag = self.etags.lock().get(&path).cloned();
        let inm = req
            .headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let not_modified = matches!((etag, inm), (Some(e), Some(i)) if i.contains(&e));
        let mut r = Response::new(Full::new(if not_modified {
            Bytes::new()
        } else {
            reply.body.clone()
        }));
        *r.status_mut() = if not_modified {
            StatusCode::NOT_MODIFIED
        } else {
            StatusCode::from_u16(reply.status).expect("status")
        };
        for (k, v) in &reply.headers {
            r.headers_mut().append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        Ok(r)
    }

    /// Serves on an ephemeral loopback port until the test ends.
    pub async fn start(&self) -> SocketAddr {
        self.start_at("127.0.0.1:0".parse().expect("addr")).await
    }

    /// Serves on `addr` (a port an origin that was down had, say) until the test ends.
    pub async fn start_at(&self, addr: SocketAddr) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let origin = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let origin = origin.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let origin = origin.clone();
                        async move { origin.answer(req).await }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }
}

/// Starts a proxy with `config` (listen address is set to an ephemeral port) on tokio's clock,
/// so a test on a paused clock moves the proxy's time too.
pub async fn proxy(mut config: Config) -> SocketAddr {
    config.listen = "127.0.0.1:0".parse().expect("addr");
    let settings = config.validate().expect("valid config");
    let listen = settings.listen();
    let proxy = slipstream_proxy::Proxy::builder(settings)
        .clock(slipstream_node::Clock::runtime())
        .build();
    slipstream_node::Node::new(proxy)
        .spawn(&listen)
        .await
        .expect("proxy starts")
        .addr
}

/// A reverse proxy named `name` for `origin`.
pub fn reverse(name: &str, origin: SocketAddr) -> Config {
    Config {
        origin: vec![format!("http://{origin}")],
        name: name.into(),
        purge_token: Some("secret".into()),
        ..Config::default()
    }
}

/// The value of the metric line that starts with `name` on the proxy's metrics page.
pub async fn metric(proxy: SocketAddr, name: &str) -> f64 {
    let page = get(proxy, "/_slipstream/metrics", &[]).await;
    String::from_utf8_lossy(&page.body)
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// Polls the metric `name` until `until` holds for its value (for at most 100 polls).
pub async fn wait_for_metric(proxy: SocketAddr, name: &str, until: impl Fn(f64) -> bool) {
    for _ in 0..100 {
        if until(metric(proxy, name).await) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("metric {name} never reached the expected value");
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn cache_status(&self) -> &str {
        self.header("cache-status").unwrap_or("")
    }
}

/// Sends one request on a fresh connection. `target` is a path (origin-form) or an absolute URL.
pub async fn send(proxy: SocketAddr, method: &str, target: &str, headers: &[(&str, &str)]) -> Got {
    let stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect to proxy");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(target)
        .header("host", proxy.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new())).expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(20), sender.send_request(req))
        .await
        .expect("proxy answered in time")
        .expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Got {
        status,
        headers,
        body,
    }
}

/// A GET whose body may fail part-way: `Err` with the bytes received when it does.
pub async fn get_fallible(proxy: SocketAddr, path: &str) -> Result<Got, usize> {
    let stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect to proxy");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::builder()
        .uri(path)
        .header("host", proxy.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response head");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let mut body = resp.into_body();
    let mut received = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => received.extend_from_slice(f.data_ref().map_or(&[][..], |d| &d[..])),
            Err(_) => return Err(received.len()),
        }
    }
    Ok(Got {
        status,
        headers,
        body: Bytes::from(received),
    })
}

pub async fn get(proxy: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    send(proxy, "GET", path, headers).await
}
