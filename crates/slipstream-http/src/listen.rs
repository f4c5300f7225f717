//! The listener every node uses: accepts TCP connections (bounded in number), optionally
//! terminates TLS with ALPN, and serves HTTP/1.1 and HTTP/2 on the same port. Cleartext HTTP/2
//! is detected by its connection preface (h2c with prior knowledge).
//!
//! Connections may be upgraded (HTTP/1.1 CONNECT and Upgrade), which the proxy uses to tunnel.
//!
//! Slow clients are bounded twice: hyper's header read timeout on HTTP/1.1, and an idle timeout
//! on the socket itself that closes a connection whose reads or writes make no progress.
//!
//! When every connection slot is taken, every open connection is asked to close gracefully:
//! the idle keep-alive ones close at once (as nginx frees its reusable connections), the busy
//! ones after their response in progress. Otherwise clients that keep connections open in a
//! pool hold every slot while new connections wait in the kernel's accept queue until the idle
//! timeout, and the server sits idle with its clients failing (seen by hand in the NPS
//! experiment, docs/experiments/000-nps.md: 10,000 connections held, the accept queue full,
//! the server's CPU at a few per cent).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::nice::{Nice, Pacing};
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
    /// Connections from one IP address at once; more are closed as they arrive, so one client
    /// cannot take every connection slot.
    pub max_connections_per_ip: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_concurrent_streams: 256,
            max_connections_per_ip: 1_000,
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
    Ok(reloadable_tls(cert, key)?.0)
}

/// A TLS acceptor from PEM files, and the handle that replaces its certificate for new
/// handshakes ([`Certificates::reload`]); connections already open keep theirs.
pub fn reloadable_tls(
    cert: &Path,
    key: &Path,
) -> Result<(tokio_rustls::TlsAcceptor, Arc<Certificates>), TlsError> {
    let certificates = Arc::new(Certificates {
        current: parking_lot::RwLock::new(certified_key(cert, key)?),
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificates.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        certificates,
    ))
}

/// The certificate a TLS listener presents, replaceable while it runs.
#[derive(Debug)]
pub struct Certificates {
    current: parking_lot::RwLock<Arc<rustls::sign::CertifiedKey>>,
}

impl Certificates {
    /// Reads `cert` and `key` again and presents them from the next handshake on. On an error
    /// the current certificate stays.
    pub fn reload(&self, cert: &Path, key: &Path) -> Result<(), TlsError> {
        let fresh = certified_key(cert, key)?;
        *self.current.write() = fresh;
        Ok(())
    }
}

impl rustls::server::ResolvesServerCert for Certificates {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

fn certified_key(cert: &Path, key: &Path) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
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
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| invalid(key, &e.to_string()))?;
    let certified = rustls::sign::CertifiedKey::new(certs, signing);
    // The key must belong to the certificate; rustls checks it when the provider can.
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => {
            return Err(invalid(
                key,
                &format!("does not match {}: {e}", cert.display()),
            ))
        }
    }
    Ok(Arc::new(certified))
}

/// Asks every open connection to finish what it has started and close, at shutdown and when
/// every slot is taken (an idle one closes at once). (hyper-util's `GracefulShutdown` covers only the
/// first: a watched connection cannot be asked again, and its `GracefulConnection` trait is
/// sealed, so the pressure signal needs this count and drain of our own.)
#[derive(Default)]
struct Closing {
    /// Set at shutdown: a connection that starts to wait after the wake-up still closes.
    shutdown: AtomicBool,
    /// Wakes every waiting connection to close once idle.
    wake: Notify,
    /// Connections open.
    count: AtomicUsize,
    /// Woken as each connection ends.
    ended: Notify,
}

impl Closing {
    /// Counts a connection open until the returned guard drops.
    fn open(self: &Arc<Self>) -> Open {
        self.count.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }

    /// Completes when no connection is open.
    async fn drained(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// One open connection in [`Closing`].
struct Open(Arc<Closing>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}

/// Drives the hyper connection `$conn` to its end; when `$open`'s [`Closing`] wakes it (or has
/// shut down), asks it to close gracefully: at once if idle, else after its response in
/// progress (HTTP/2: GOAWAY). A macro because the connection's type differs with TLS.
macro_rules! serve_closing {
    ($conn:expr, $open:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let closing = &$open.0;
        let mut asked = false;
        loop {
            let wake = closing.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            if !asked && closing.shutdown.load(Ordering::Acquire) {
                conn.as_mut().graceful_shutdown();
                asked = true;
            }
            tokio::select! {
                result = conn.as_mut() => break result,
                () = wake, if !asked => {
                    conn.as_mut().graceful_shutdown();
                    asked = true;
                }
            }
        }
    }};
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
    serve_paced(listener, tls, limits, handler, shutdown, drain, None).await
}

/// [`serve`], with every cleartext connection's writes paced by `pacing` if given: the
/// application-level back-off of [`crate::nice`], for the prefetch listener. (A TLS connection
/// is not paced.)
pub async fn serve_paced<H: Handler>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    pacing: Option<Pacing>,
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
    let per_ip = PerIp::new(limits.max_connections_per_ip);
    let closing = Arc::new(Closing::default());
    tokio::pin!(shutdown);
    loop {
        if permits.available_permits() == 0 {
            // Full: idle keep-alive connections close now, busy ones after their response.
            tracing::debug!("every connection slot taken: asking idle connections to close");
            closing.wake.notify_waiters();
        }
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
        let Some(ip_slot) = per_ip.take(peer.ip()) else {
            tracing::debug!(%peer, "connection refused: too many from this address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (builder, handler, tls, pacing) = (
            builder.clone(),
            handler.clone(),
            tls.clone(),
            pacing.clone(),
        );
        let open = closing.open();
        tokio::spawn(async move {
            let _ip_slot = ip_slot;
            // A connection that sends nothing is closed after the header deadline: hyper's own
            // deadline starts only at the first byte.
            if tls.is_none() {
                let mut first = [0u8; 1];
                match tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first))
                    .await
                {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => {
                        tracing::debug!(%peer, "closed: nothing sent before the header deadline");
                        return;
                    }
                }
            }
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, std::convert::Infallible>(handler.call(req, peer).await) }
            });
            let result = match tls {
                None => {
                    let stream = Nice::new(stream, pacing.as_ref());
                    let io = TokioIo::new(IdleTimeout::new(stream, limits.idle_timeout));
                    serve_closing!(builder.serve_connection_with_upgrades(io, service), open)
                }
                Some(acceptor) => {
                    let accept =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    match accept.await {
                        Ok(Ok(tls)) => {
                            let io = TokioIo::new(IdleTimeout::new(tls, limits.idle_timeout));
                            serve_closing!(
                                builder.serve_connection_with_upgrades(io, service),
                                open
                            )
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
    let open = closing.count.load(Ordering::Acquire);
    if open > 0 {
        tracing::info!(connections = open, deadline = ?drain, "draining");
    }
    closing.shutdown.store(true, Ordering::Release);
    closing.wake.notify_waiters();
    match tokio::time::timeout(drain, closing.drained()).await {
        Ok(()) => 0,
        Err(_) => {
            tracing::warn!(deadline = ?drain, "drain deadline passed with connections open");
            closing.count.load(Ordering::Acquire).max(1)
        }
    }
}

/// Connections per client address, bounded.
#[derive(Clone)]
struct PerIp {
    max: usize,
    open: Arc<parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

/// One connection's place in [`PerIp`]; released on drop.
struct IpSlot {
    ip: std::net::IpAddr,
    open: Arc<parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl PerIp {
    fn new(max: usize) -> PerIp {
        PerIp {
            max: max.max(1),
            open: Arc::default(),
        }
    }

    /// A slot for a connection from `ip`, or `None` when it has `max` open already.
    fn take(&self, ip: std::net::IpAddr) -> Option<IpSlot> {
        let mut open = self.open.lock();
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            ip,
            open: self.open.clone(),
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[derive(Debug)]
    struct Ok200;

    impl Handler for Ok200 {
        async fn call(&self, _req: Request<Incoming>, _peer: SocketAddr) -> Response<Body> {
            Response::new(Body::full("ok"))
        }
    }

    async fn start(limits: Limits) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(
            listener,
            None,
            limits,
            Arc::new(Ok200),
            std::future::pending(),
            Duration::from_secs(1),
        ));
        addr
    }

    /// Reads until the server closes; the bytes read.
    async fn until_closed(s: &mut tokio::net::TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    }

    async fn get_from(local: &str, addr: SocketAddr) -> Vec<u8> {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(format!("{local}:0").parse().expect("local"))
            .expect("bind");
        let mut s = socket.connect(addr).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        until_closed(&mut s).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_closed_at_the_header_deadline() {
        let limits = Limits::default();
        let addr = start(limits).await;
        let t0 = tokio::time::Instant::now();
        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        assert!(until_closed(&mut silent).await.is_empty());
        let held = t0.elapsed();
        assert!(
            held >= limits.header_read_timeout && held < limits.idle_timeout,
            "held {held:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_address_cannot_take_every_connection() {
        let addr = start(Limits {
            max_connections_per_ip: 2,
            ..Limits::default()
        })
        .await;
        let _a = tokio::net::TcpStream::connect(addr).await.expect("a");
        let _b = tokio::net::TcpStream::connect(addr).await.expect("b");
        let t0 = tokio::time::Instant::now();
        let mut third = tokio::net::TcpStream::connect(addr).await.expect("c");
        assert!(until_closed(&mut third).await.is_empty());
        assert!(t0.elapsed() < Duration::from_secs(1), "closed at once");
        // Another address is served.
        let answer = get_from("127.0.0.2", addr).await;
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_slot_is_taken_idle_keep_alive_connections_make_room() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let addr = start(limits).await;
        // Two clients take both slots, each with one answered request, then keep the
        // connection open and idle, as a client's pool does.
        let mut idle = Vec::new();
        for _ in 0..2 {
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("write");
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).await.expect("read");
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            idle.push(s);
        }
        // A third client is served long before the idle timeout would free a slot, and an
        // idle connection was closed to make the room.
        let t0 = tokio::time::Instant::now();
        let answer = get_from("127.0.0.1", addr).await;
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        assert!(
            t0.elapsed() < limits.header_read_timeout,
            "{:?}",
            t0.elapsed()
        );
        let mut closed = 0;
        for s in &mut idle {
            if until_closed(s).await.is_empty() {
                closed += 1;
            }
        }
        assert_eq!(closed, 2, "the idle connections were asked to close");
    }
}
