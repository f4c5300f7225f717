//! Upstream connections: a pooled keep-alive client to the origin (or to the targets of
//! forward-proxy requests), and one per parent proxy, with fail-over between parents.
//!
//! Requests to a parent use the absolute form (`GET http://origin/path`), which is how a child
//! asks a parent for another server's resource (RFC 9112 §3.2.2); the parent's connector marks
//! its connections as proxied so hyper writes that form.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use slipstream_http::metrics::Counter;

/// A request body going upstream: the client's own, or bytes we made (usually empty).
pub type UpBody = Either<Incoming, Full<Bytes>>;

/// Why an upstream exchange failed. Says whose fault it is and whether another try is safe.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made (refused, unreachable, connect timeout). Safe to retry
    /// elsewhere: nothing was sent.
    #[error("cannot connect to {upstream}: {message}")]
    Connect {
        /// The upstream.
        upstream: String,
        /// What failed.
        message: String,
    },
    /// The upstream did not answer in time (504).
    #[error("{upstream} did not answer within {timeout:?}")]
    Timeout {
        /// The upstream.
        upstream: String,
        /// The limit.
        timeout: Duration,
    },
    /// The upstream answered with something that is not valid HTTP, or reset the connection
    /// (502). Not safe to retry a non-idempotent request.
    #[error("{upstream} sent an invalid response or closed the connection: {message}")]
    Protocol {
        /// The upstream.
        upstream: String,
        /// What failed.
        message: String,
    },
}

impl UpstreamError {
    /// Whether another upstream may be tried with the same request.
    pub fn retry_safe(&self) -> bool {
        matches!(self, UpstreamError::Connect { .. })
    }
}

struct Parent {
    authority: http::uri::Authority,
    client: Client<ParentConnector, UpBody>,
    /// Skip this parent until then, after a failure.
    down_until: Mutex<Option<Instant>>,
    /// Failed exchanges with this parent, including those another parent then answered.
    failures: Arc<Counter>,
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parent")
            .field("authority", &self.authority)
            .finish()
    }
}

/// All upstreams of one proxy.
pub struct Upstreams {
    direct: Client<HttpConnector, UpBody>,
    parents: Vec<Parent>,
    timeout: Duration,
    retry_after: Duration,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("parents", &self.parents)
            .finish()
    }
}

fn connector(connect_timeout: Duration) -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_connect_timeout(Some(connect_timeout));
    c.set_nodelay(true);
    c.enforce_http(true);
    c
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

impl Upstreams {
    /// Clients for `parents` (in order of preference) and for direct requests; each parent's
    /// failed exchanges are counted in `failures(parent)`.
    pub fn new(
        parents: &[http::uri::Authority],
        connect_timeout: Duration,
        timeout: Duration,
        retry_after: Duration,
        failures: impl Fn(&http::uri::Authority) -> Arc<Counter>,
    ) -> Upstreams {
        Upstreams {
            direct: client(connector(connect_timeout)),
            parents: parents
                .iter()
                .map(|authority| Parent {
                    failures: failures(authority),
                    authority: authority.clone(),
                    client: client(ParentConnector {
                        parent: authority.clone(),
                        inner: connector(connect_timeout),
                    }),
                    down_until: Mutex::new(None),
                })
                .collect(),
            timeout,
            retry_after,
        }
    }

    /// Names of the parents and whether each is up now (for metrics).
    pub fn parent_states(&self) -> Vec<(String, bool)> {
        let now = Instant::now();
        self.parents
            .iter()
            .map(|p| {
                (
                    p.authority.to_string(),
                    p.down_until.lock().is_none_or(|t| t <= now),
                )
            })
            .collect()
    }

    /// Sends `parts` with `body` (an absolute URI in `parts.uri`) through the first parent that
    /// is up, failing over on connect errors when the request can be repeated; without parents,
    /// straight to the target.
    pub async fn send(
        &self,
        parts: http::request::Parts,
        body: Option<Incoming>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        if self.parents.is_empty() {
            let req = Request::from_parts(parts, up_body(body));
            let target = req
                .uri()
                .authority()
                .map_or_else(String::new, |a| a.to_string());
            return self.exchange(&self.direct, req, &target).await;
        }
        let now = Instant::now();
        // Parents that are up first, in order; then the ones marked down, in case all are.
        let (mut order, down): (Vec<usize>, Vec<usize>) = (0..self.parents.len())
            .partition(|i| self.parents[*i].down_until.lock().is_none_or(|t| t <= now));
        order.extend(down);
        let repeatable = body.is_none();
        let mut body = body;
        let mut last = None;
        for i in order {
            let parent = &self.parents[i];
            let req = Request::from_parts(parts.clone(), up_body(body.take()));
            match self
                .exchange(&parent.client, req, parent.authority.as_ref())
                .await
            {
                Ok(response) => {
                    *parent.down_until.lock() = None;
                    return Ok(response);
                }
                Err(e) => {
                    parent.failures.inc();
                    tracing::warn!(parent = %parent.authority, error = %e, "parent failed");
                    if matches!(
                        e,
                        UpstreamError::Connect { .. } | UpstreamError::Timeout { .. }
                    ) {
                        *parent.down_until.lock() = Some(Instant::now() + self.retry_after);
                    }
                    let go_on = repeatable && e.retry_safe();
                    last = Some(e);
                    if !go_on {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| UpstreamError::Connect {
            upstream: "parents".into(),
            message: "no parent configured".into(),
        }))
    }

    async fn exchange<C>(
        &self,
        client: &Client<C, UpBody>,
        req: Request<UpBody>,
        upstream: &str,
    ) -> Result<Response<Incoming>, UpstreamError>
    where
        C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
    {
        match tokio::time::timeout(self.timeout, client.request(req)).await {
            Err(_) => Err(UpstreamError::Timeout {
                upstream: upstream.to_owned(),
                timeout: self.timeout,
            }),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) if e.is_connect() => Err(UpstreamError::Connect {
                upstream: upstream.to_owned(),
                message: error_chain(&e),
            }),
            Ok(Err(e)) => Err(UpstreamError::Protocol {
                upstream: upstream.to_owned(),
                message: error_chain(&e),
            }),
        }
    }

    /// The response timeout, also used between body chunks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

fn up_body(body: Option<Incoming>) -> UpBody {
    match body {
        Some(b) => Either::Left(b),
        None => Either::Right(Full::new(Bytes::new())),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Connects every request to one parent proxy, and says the connection is proxied.
#[derive(Clone)]
struct ParentConnector {
    parent: http::uri::Authority,
    inner: HttpConnector,
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
        Box::pin(async move {
            let stream = inner.call(uri?).await?;
            Ok(Proxied(stream))
        })
    }
}

/// A connection to a parent proxy.
struct Proxied(TokioIo<tokio::net::TcpStream>);

impl Connection for Proxied {
    fn connected(&self) -> Connected {
        self.0.connected().proxy(true)
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

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
