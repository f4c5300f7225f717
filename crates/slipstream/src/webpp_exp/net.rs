//! The network of the experiment, all real sockets on loopback: one hyper HTTP/1.1 server per
//! replica serving in-memory files of the four sizes, one user-space relay per (site, replica)
//! link that adds the link's delay and bandwidth limit, and one HTTP exchange (a connection, a
//! request, a response) as a task that reports its progress as events.
//!
//! **The relay.** On accept it draws the connection's extra delay, waits one RTT (the TCP
//! handshake the loopback connect skipped), connects to the server and forwards both ways.
//! Each direction delivers what it reads half an RTT later; server to client, the bytes also
//! leave one after another at the link's bandwidth (a serialisation queue), so size matters.
//! The bandwidth is per connection, as one flow's share of a path: parallel requests of the
//! `optimal` policy do not slow each other down. No loss and no slow start are emulated. While
//! the replica is out, the relay accepts and never answers, so clients time out.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use slipstream_select::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::world::{World, SIZES};

/// Bytes read at a time by the relay: one delivery unit of the bandwidth limit.
const CHUNK: usize = 8 * 1024;
/// Chunks queued per direction of a relayed connection (the reader waits when it is full).
const QUEUE: usize = 128;
/// A relayed or blackholed connection is dropped after this long, whatever happens.
const CONNECTION_CAP: Duration = Duration::from_secs(300);

/// Requests a replica server answered, by method.
#[derive(Debug, Default)]
pub struct Served {
    pub get: AtomicU64,
    pub head: AtomicU64,
}

/// Starts a replica server on loopback and returns its address.
pub async fn server(
    replica: usize,
    world: Arc<World>,
    served: Arc<Served>,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        SIZES
            .iter()
            .map(|&n| Bytes::from(vec![b'x'; n as usize]))
            .collect(),
    );
    let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(
        world.seed ^ (0x5e7e << 8) ^ replica as u64,
    )));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (world, served, bodies, rng) =
                (world.clone(), served.clone(), bodies.clone(), rng.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (world, served, bodies, rng) =
                        (world.clone(), served.clone(), bodies.clone(), rng.clone());
                    async move {
                        // The per-request noise: the schedule's mean delay times U(0.75, 1.25).
                        let noise = rng
                            .lock()
                            .map(|mut r| r.gen_range(0.75..1.25))
                            .unwrap_or(1.0);
                        let delay = world.service(replica, Instant::now()).mul_f64(noise);
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(respond(&req, &bodies, &served))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// `/SIZE/INDEX`: the file of that size; anything else is a 404.
fn respond(req: &Request<Incoming>, bodies: &[Bytes], served: &Served) -> Response<Full<Bytes>> {
    let size = req
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .and_then(|s| SIZES.iter().position(|&n| n == s));
    let mut response = match size {
        Some(i) if req.method() == Method::HEAD => {
            served.head.fetch_add(1, Ordering::Relaxed);
            let mut r = Response::new(Full::new(Bytes::new()));
            r.headers_mut()
                .insert(hyper::header::CONTENT_LENGTH, bodies[i].len().into());
            r
        }
        Some(i) => {
            served.get.fetch_add(1, Ordering::Relaxed);
            Response::new(Full::new(bodies[i].clone()))
        }
        None => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    };
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/octet-stream"),
    );
    response
}

/// Starts the relay of link `[site][replica]` in front of the server at `upstream`; returns the
/// address clients connect to.
pub async fn relay(
    site: usize,
    replica: usize,
    upstream: SocketAddr,
    world: Arc<World>,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let link = world.links[site][replica];
    let mut rng = StdRng::seed_from_u64(world.seed ^ (0x11e << 16) ^ (site * 8 + replica) as u64);
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let extra_ms = rng.gen_range(0.0..=link.jitter_ms);
            let rtt = Duration::from_secs_f64((link.rtt_ms + extra_ms) / 1e3);
            let down = world.down(replica, Instant::now());
            let bandwidth = link.bandwidth_bytes_per_s;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    CONNECTION_CAP,
                    forward(client, upstream, rtt, bandwidth, down),
                )
                .await;
            });
        }
    });
    Ok(addr)
}

async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    rtt: Duration,
    bandwidth: f64,
    down: bool,
) -> std::io::Result<()> {
    if down {
        // Blackholed: read and drop until the client gives up.
        let mut client = client;
        let mut buf = vec![0; CHUNK];
        while client.read(&mut buf).await? > 0 {}
        return Ok(());
    }
    tokio::time::sleep(rtt).await;
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let owd = rtt / 2;
    let up = pump(cr, sw, owd, f64::INFINITY);
    let down = pump(sr, cw, owd, bandwidth);
    let _ = tokio::join!(up, down);
    Ok(())
}

/// Forwards `from` to `to`: each chunk leaves after the previous one at `bandwidth` bytes per
/// second and arrives `owd` after it left. End of input shuts `to`'s write side.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    owd: Duration,
    bandwidth: f64,
) {
    let (tx, mut rx) = mpsc::channel::<(tokio::time::Instant, Bytes)>(QUEUE);
    let reader = async move {
        let mut free_at = tokio::time::Instant::now();
        let mut buf = vec![0; CHUNK];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = tokio::time::Instant::now();
            let serialise = if bandwidth.is_finite() {
                Duration::from_secs_f64(n as f64 / bandwidth)
            } else {
                Duration::ZERO
            };
            free_at = free_at.max(now) + serialise;
            if tx
                .send((free_at + owd, Bytes::copy_from_slice(&buf[..n])))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// What an exchange reports, in order: at most one `Head`, then `Done` or `Failed`.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// The response head arrived, `latency` after the exchange began.
    Head { id: usize, latency: Duration },
    /// The whole response arrived.
    Done { id: usize },
    /// The exchange ended without a whole response.
    Failed { id: usize, outcome: Outcome },
}

/// Aborts a task when dropped, so a cancelled exchange closes its connection.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts one exchange with the relay at `addr`: a new connection, `method path`, the whole
/// response read and its length checked against `expect_bytes` (for a GET). Aborting the
/// returned handle cancels it.
pub fn exchange(
    id: usize,
    addr: SocketAddr,
    method: Method,
    path: String,
    expect_bytes: u64,
    events: mpsc::Sender<Event>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let fail = |outcome| Event::Failed { id, outcome };
        let Ok(stream) = TcpStream::connect(addr).await else {
            let _ = events.send(fail(Outcome::ConnectFailed)).await;
            return;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut sender, conn)) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await
        else {
            let _ = events.send(fail(Outcome::Broken)).await;
            return;
        };
        let _conn = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let head = method == Method::HEAD;
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "replica")
            .body(Empty::new());
        let Ok(request) = request else {
            let _ = events.send(fail(Outcome::Broken)).await;
            return;
        };
        let response = match sender.send_request(request).await {
            Ok(r) if r.status().is_success() => r,
            _ => {
                let _ = events.send(fail(Outcome::Broken)).await;
                return;
            }
        };
        let latency = t0.elapsed();
        if events.send(Event::Head { id, latency }).await.is_err() {
            return;
        }
        let mut body = response.into_body();
        let mut bytes = 0u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => bytes += f.data_ref().map_or(0, |d| d.len() as u64),
                Err(_) => {
                    let _ = events.send(fail(Outcome::Broken)).await;
                    return;
                }
            }
        }
        let event = if head || bytes == expect_bytes {
            Event::Done { id }
        } else {
            fail(Outcome::Broken)
        };
        let _ = events.send(event).await;
    })
}
