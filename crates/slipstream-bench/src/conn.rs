//! One client connection to the origin (HTTP/1.1 or h2c with prior knowledge)
//! and the exchange of a single `GET`: send, read the whole body, classify.

use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use http::uri::Authority;
use http::{header, Method, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::recorder::ErrorKind;

/// Where to connect and what to put in `Host`.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) authority: Authority,
    host: String,
    port: u16,
    http2: bool,
}

impl Origin {
    /// The server `base`, reached through the forward proxy `proxy` when given: connections
    /// go to the proxy, `Host` names `base`.
    pub(crate) fn via(base: &Uri, proxy: Option<&Uri>, http2: bool) -> anyhow::Result<Self> {
        let authority = authority_of(base, "base URI")?;
        let to = match proxy {
            Some(p) => authority_of(p, "proxy")?,
            None => authority.clone(),
        };
        // Brackets of an IPv6 literal are URI syntax, not part of the address.
        let host = to
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = to.port_u16().unwrap_or(80);
        Ok(Origin {
            authority,
            host,
            port,
            http2,
        })
    }
}

/// The authority of the http URI `uri` (`what` names it in errors).
fn authority_of(uri: &Uri, what: &str) -> anyhow::Result<Authority> {
    match uri.scheme_str() {
        Some("http") | None => {}
        Some(other) => bail!("unsupported scheme `{other}` in {what} {uri} (only http)"),
    }
    uri.authority()
        .cloned()
        .with_context(|| format!("{what} {uri} has no host"))
}

/// What a completed exchange produced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exchange {
    pub(crate) status: http::StatusCode,
    pub(crate) body_bytes: u64,
}

/// An open connection. Dropping the last handle aborts its driver task, so a
/// connection abandoned mid-request (e.g. on timeout) does not linger.
#[derive(Debug)]
pub(crate) struct Conn {
    sender: Sender,
    _driver: Arc<AbortOnDrop>,
}

#[derive(Debug)]
enum Sender {
    H1(http1::SendRequest<Empty<Bytes>>),
    H2(http2::SendRequest<Empty<Bytes>>),
}

#[derive(Debug)]
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Conn {
    pub(crate) async fn connect(origin: &Origin) -> Result<Conn, ErrorKind> {
        let stream = TcpStream::connect((origin.host.as_str(), origin.port))
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, origin = %origin.authority, "connect failed");
                ErrorKind::Connect
            })?;
        stream.set_nodelay(true).map_err(|_| ErrorKind::Connect)?;
        let io = TokioIo::new(stream);
        let (sender, driver) = if origin.http2 {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|_| ErrorKind::Connect)?;
            (Sender::H2(sender), tokio::spawn(drive(conn)))
        } else {
            let (sender, conn) = http1::handshake(io).await.map_err(|_| ErrorKind::Connect)?;
            (Sender::H1(sender), tokio::spawn(drive(conn)))
        };
        Ok(Conn {
            sender,
            _driver: Arc::new(AbortOnDrop(driver.abort_handle())),
        })
    }

    /// Another handle on the same connection, if the protocol multiplexes (HTTP/2).
    pub(crate) fn share(&self) -> Option<Conn> {
        match &self.sender {
            Sender::H1(_) => None,
            Sender::H2(s) => Some(Conn {
                sender: Sender::H2(s.clone()),
                _driver: Arc::clone(&self._driver),
            }),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::H1(s) => s.ready().await.is_ok(),
            Sender::H2(s) => s.ready().await.is_ok(),
        }
    }

    async fn get(&mut self, origin: &Origin, uri: &Uri) -> Result<Exchange, ErrorKind> {
        let mut builder = Request::builder().method(Method::GET).uri(uri.clone());
        // HTTP/2 carries the authority in `:authority` (from the absolute URI).
        if matches!(self.sender, Sender::H1(_)) {
            builder = builder.header(header::HOST, origin.authority.as_str());
        }
        let request = builder.body(Empty::new()).map_err(|_| ErrorKind::Io)?;
        let response = match &mut self.sender {
            Sender::H1(s) => s.send_request(request).await,
            Sender::H2(s) => s.send_request(request).await,
        }
        .map_err(|_| ErrorKind::Io)?;
        let status = response.status();
        let mut body = response.into_body();
        let mut body_bytes = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(|_| ErrorKind::Io)?.into_data() {
                body_bytes += data.len() as u64;
            }
        }
        Ok(Exchange { status, body_bytes })
    }
}

async fn drive<F: std::future::Future<Output = hyper::Result<()>>>(conn: F) {
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended with error");
    }
}

/// Sends one `GET uri`, reusing `idle` if it is still usable and connecting
/// otherwise. Returns the outcome and the connection if it may be reused: a
/// connection that failed is dropped, so the caller reconnects next time.
pub(crate) async fn exchange(
    origin: &Origin,
    idle: Option<Conn>,
    uri: &Uri,
) -> (Result<Exchange, ErrorKind>, Option<Conn>) {
    let reused = match idle {
        Some(mut conn) if !conn.is_closed() => conn.ready().await.then_some(conn),
        // The server closed an idle keep-alive connection: not an error of this
        // request, just reconnect.
        _ => None,
    };
    let mut conn = match reused {
        Some(conn) => conn,
        None => match Conn::connect(origin).await {
            Ok(mut conn) => {
                if !conn.ready().await {
                    return (Err(ErrorKind::Connect), None);
                }
                conn
            }
            Err(kind) => return (Err(kind), None),
        },
    };
    match conn.get(origin, uri).await {
        Ok(exchange) => (Ok(exchange), Some(conn)),
        Err(kind) => (Err(kind), None),
    }
}
