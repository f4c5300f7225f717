//! The listener every node uses: accepts TCP connections (bounded in number), optionally
//! terminates TLS with ALPN, and serves HTTP/1.1 and HTTP/2 on the same port. Cleartext HTTP/2
//! is detected by its connection preface (h2c with prior knowledge).
//!
//! Connections may be upgraded (HTTP/1.1 CONNECT and Upgrade), which the proxy uses to tunnel.
//!
//! Slow clients are bounded twice: hyper's header read timeout on HTTP/1.1, and an idle timeout
//! on the socket itself that closes a connection whose reads or writes make no progress.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};

use crate::Body;

/// A TLS acceptor (rustls).
pub type TlsAcceptor = tokio_rustls::TlsAcceptor;

/// Bounds on what one client may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line and headers) in bytes; larger gets 431 on HTTP/1.1
    /// and a stream error on HTTP/2. hyper's floor is 8192.
    pub max_header_bytes: usize,
    /// Time a client has to send a complete request head (HTTP/1.1).
    pub header_read_timeout: Duration,
    /// A connection whose pending read or write makes no progress for between one and two of
    /// these is closed: idle keep-alive connections and clients that stop reading a response.
    pub idle_timeout: Duration,
    /// Connections served at once; further clients wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Concurrent streams per HTTP/2 connection.
    pub max_concurrent_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_concurrent_streams: 256,
        }
    }
}

/// Answers requests. One handler serves every connection of a listener.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request from `peer`. Errors are responses: a handler never fails.
    fn call(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send;
}

/// Errors loading a TLS certificate or key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The file holds no usable certificate or key.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the pair.
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Builds a TLS acceptor from PEM files, offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    let invalid = |p: &Path, message: &str| TlsError::Invalid {
        path: p.display().to_string(),
        message: message.to_owned(),
    };
    let cert_pem = read(cert)?;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert, &e.to_string()))?;
    if certs.is_empty() {
        return Err(invalid(cert, "no PEM certificate found"));
    }
    let key_pem = read(key)?;
    let key_der = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| invalid(key, &e.to_string()))?
        .ok_or_else(|| invalid(key, "no PEM private key found"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `handler` on `listener` until `shutdown` completes, then drains: stops accepting
/// (the listener is closed), asks every connection to finish what it has started (HTTP/1.1
/// closes after the response in progress, HTTP/2 sends GOAWAY) and waits for them, for at most
/// `drain`. Returns how many connections were still open at the deadline (they are then dropped
/// with the runtime).
pub async fn serve<H: Handler>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> usize {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32)
        .max_concurrent_streams(limits.max_concurrent_streams);
    let builder = Arc::new(builder);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (builder, handler, tls) = (builder.clone(), handler.clone(), tls.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, std::convert::Infallible>(handler.call(req, peer).await) }
            });
            let result = match tls {
                None => {
                    let io = TokioIo::new(IdleTimeout::new(stream, limits.idle_timeout));
                    watcher
                        .watch(builder.serve_connection_with_upgrades(io, service))
                        .await
                }
                Some(acceptor) => {
                    let accept =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    match accept.await {
                        Ok(Ok(tls)) => {
                            let io = TokioIo::new(IdleTimeout::new(tls, limits.idle_timeout));
                            watcher
                                .watch(builder.serve_connection_with_upgrades(io, service))
                                .await
                        }
                        Ok(Err(e)) => Err(e.into()),
                        Err(_) => Err("TLS handshake timed out".into()),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(connections = open, deadline = ?drain, "draining");
    }
    match tokio::time::timeout(drain, graceful.shutdown()).await {
        Ok(()) => 0,
        Err(_) => {
            tracing::warn!(deadline = ?drain, "drain deadline passed with connections open");
            open.max(1)
        }
    }
}

/// A socket that fails with `TimedOut` when a read or a write stays pending without progress
/// for between one and two timeouts.
///
/// The timer is lazy, because re-arming a timer on every pending read would cost a timer-wheel
/// update per keep-alive request: progress only sets a flag, and when the timer fires it is
/// re-armed if there was progress since it was last armed, or fails the I/O if there was none.
struct IdleTimeout<T> {
    inner: T,
    timeout: Duration,
    read: Idle,
    write: Idle,
}

struct Idle {
    timer: Pin<Box<Sleep>>,
    progress: bool,
}

impl Idle {
    fn new(timeout: Duration) -> Idle {
        Idle {
            timer: Box::pin(tokio::time::sleep(timeout)),
            progress: false,
        }
    }

    /// Polls an I/O operation's result against this direction's idle timer.
    fn guard<R>(
        &mut self,
        poll: Poll<io::Result<R>>,
        timeout: Duration,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.progress = true;
            return poll;
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            if !std::mem::take(&mut self.progress) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle too long",
                )));
            }
            self.timer.as_mut().reset(Instant::now() + timeout);
        }
        Poll::Pending
    }
}

impl<T> IdleTimeout<T> {
    fn new(inner: T, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            read: Idle::new(timeout),
            write: Idle::new(timeout),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.read.guard(poll, this.timeout, cx)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write.guard(poll, this.timeout, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write.guard(poll, this.timeout, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.write.guard(poll, this.timeout, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
