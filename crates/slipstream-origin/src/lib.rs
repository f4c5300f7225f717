//! `slipstream serve`: a static origin server with paper 002's adaptive-level memory cache.
//!
//! A request is looked up in the cache by its normalised path before anything touches the file
//! system. A complete hit is answered from memory with the response head computed when the file
//! was cached (002 §4.1.1); an incomplete hit sends the cached first chunk and streams the rest
//! from the file (002 §4.2.2); a miss resolves the file, offers it to the cache (the admission
//! rule may refuse), and serves it. A cached file is re-checked against the file system once its
//! entry is older than the revalidation interval, so a change is never served stale for longer.
//!
//! The server runs on the node layer (`slipstream_node`): its control endpoints are registered
//! on the node's router, and phases registered with [`Builder::phase`] see every request
//! (request filter, response and body filters, logging); a page whose body a phase filters is
//! sent without its precomputed `Content-Length`.

pub mod config;
pub mod entry;
mod metrics;
pub mod resolve;
pub mod respond;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, LOCATION};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use parking_lot::Mutex;
use slipstream_cache::{Access, Cache};
use slipstream_http::Body;
use slipstream_node::respond::text;
use slipstream_node::{Clock, Ctx, Phase, Phases, Router};

pub use config::{Config, ConfigError, Settings};
use entry::Entry;
use resolve::Refusal;

/// The file cache, shared by every connection.
pub(crate) type SharedCache = Arc<Mutex<Cache<String, Arc<Entry>>>>;

/// The origin server: one per listener.
#[derive(Debug)]
pub struct Origin {
    settings: Settings,
    cache: Option<SharedCache>,
    started: Instant,
    metrics: metrics::Metrics,
    phases: Phases,
    clock: Clock,
}

/// Builds an [`Origin`] with phases and a clock.
#[derive(Debug)]
pub struct Builder {
    settings: Settings,
    phases: Phases,
    clock: Clock,
}

impl Builder {
    /// Registers a phase, after those already registered.
    pub fn phase(mut self, phase: impl Phase) -> Builder {
        self.phases.push(Arc::new(phase));
        self
    }

    /// The clock request paths read (the system's by default).
    pub fn clock(mut self, clock: Clock) -> Builder {
        self.clock = clock;
        self
    }

    /// The server.
    pub fn build(self) -> Origin {
        let settings = self.settings;
        let cache = settings.cache.map(|c| Arc::new(Mutex::new(Cache::new(c))));
        let metrics = metrics::Metrics::new(cache.clone());
        Origin {
            settings,
            cache,
            started: self.clock.instant(),
            metrics,
            phases: self.phases,
            clock: self.clock,
        }
    }
}

impl Origin {
    /// A server for validated settings, with nothing registered.
    pub fn new(settings: Settings) -> Origin {
        Origin::builder(settings).build()
    }

    /// A builder for a server with phases or a clock of its own.
    pub fn builder(settings: Settings) -> Builder {
        Builder {
            settings,
            phases: Phases::default(),
            clock: Clock::System,
        }
    }

    /// The settings this server runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn now_ms(&self) -> u64 {
        self.clock
            .instant()
            .saturating_duration_since(self.started)
            .as_millis() as u64
    }

    async fn handle(&self, req: &Request<Incoming>) -> Response<Body> {
        let path = req.uri().path();
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: this server answers GET and HEAD",
            );
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let key = match resolve::normalise(path) {
            Ok(key) => key,
            Err(refusal) => return refused(refusal),
        };
        if !self.settings.serve_hidden && resolve::hidden(&key) {
            // Dotfiles (`.env`, `.git/`) are often secrets left in a site's directory.
            return refused(Refusal::NotFound);
        }
        let (entry, hit) = match self.lookup(&key).await {
            Ok(found) => found,
            Err(Lookup::Refused(refusal)) => {
                self.forget(&key);
                return refused(refusal);
            }
            Err(Lookup::Redirect) => {
                self.forget(&key);
                let mut location = format!("{path}/");
                if let Some(q) = req.uri().query() {
                    location.push('?');
                    location.push_str(q);
                }
                let mut r = text(
                    StatusCode::MOVED_PERMANENTLY,
                    "moved: the directory's address ends in /",
                );
                if let Ok(v) = HeaderValue::from_str(&location) {
                    r.headers_mut().insert(LOCATION, v);
                }
                return r;
            }
            Err(Lookup::Io(e)) => {
                tracing::warn!(%key, error = %e, "reading file failed");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error reading the file",
                );
            }
        };
        let built = respond::respond(&entry, req.method(), req.headers());
        if hit {
            self.metrics.bytes(built.memory_bytes, built.disk_bytes);
        } else {
            // A miss read every byte from the file, even those it then cached.
            self.metrics.bytes(0, built.memory_bytes + built.disk_bytes);
        }
        built.response
    }

    /// The entry for `key` and whether it was a cache hit: from the cache when it holds a fresh
    /// one, else from the disk.
    async fn lookup(&self, key: &str) -> Result<(Arc<Entry>, bool), Lookup> {
        let miss = |entry| (entry, false);
        let Some(cache) = &self.cache else {
            return self.load(key, false).await.map(miss);
        };
        let hit = cache.lock().access(key);
        match hit {
            Access::Hit { value, stored, .. } => {
                if self.fresh(&value).await {
                    self.metrics.hit(stored.complete);
                    return Ok((value, true));
                }
                cache.lock().invalidate(key);
                self.metrics.miss();
                self.load(key, true).await.map(miss)
            }
            Access::Miss => {
                self.metrics.miss();
                self.load(key, true).await.map(miss)
            }
        }
    }

    /// Forgets what the cache counted for a key that names no file, so that requests for
    /// made-up paths leave nothing behind.
    fn forget(&self, key: &str) {
        if let Some(cache) = &self.cache {
            cache.lock().forget(key);
        }
    }

    /// Whether a cached entry still describes the file. Within the revalidation interval this
    /// makes no file-system call.
    async fn fresh(&self, entry: &Arc<Entry>) -> bool {
        let now = self.now_ms();
        if now.saturating_sub(entry.checked_ms()) < self.settings.revalidate.as_millis() as u64 {
            return true;
        }
        let path = entry.path.clone();
        let meta = tokio::task::spawn_blocking(move || std::fs::metadata(path)).await;
        match meta {
            Ok(Ok(meta)) if entry.matches(&meta) => {
                entry.mark_checked(now);
                true
            }
            _ => false,
        }
    }

    /// Resolves and reads a file, offering it to the cache when `cache_it`.
    async fn load(&self, key: &str, cache_it: bool) -> Result<Arc<Entry>, Lookup> {
        let root = self.settings.root.clone();
        let owned_key = key.to_owned();
        let found = tokio::task::spawn_blocking(move || resolve::find(&root, &owned_key))
            .await
            .map_err(|e| Lookup::Io(std::io::Error::other(e)))?;
        let (path, meta) = match found {
            Ok(resolve::Found::File { path, meta }) => (path, meta),
            Ok(resolve::Found::Directory) => return Err(Lookup::Redirect),
            Err(refusal) => return Err(Lookup::Refused(refusal)),
        };
        let modified = meta.modified().map_err(Lookup::Io)?;
        let len = meta.len();
        let now = self.now_ms();
        let cache_control = self.settings.cache_control.as_ref();
        let describe = |data: Bytes| {
            Arc::new(Entry::new(
                path.clone(),
                len,
                modified,
                data,
                now,
                cache_control,
            ))
        };
        let uncached = describe(Bytes::new());
        let Some(cache) = self.cache.as_ref().filter(|_| cache_it) else {
            return Ok(uncached);
        };
        let object_bytes = len + uncached.head_bytes();
        let admit = {
            let mut cache = cache.lock();
            let plan = cache.plan(key, object_bytes);
            if plan.is_none() {
                cache.record_refusal(object_bytes);
            }
            plan
        };
        let Some(admit) = admit else {
            return Ok(uncached);
        };
        // 002 §4.1.2: the stored bytes include the head; the data is what remains of them.
        let data_len = if admit.stored.complete {
            len
        } else {
            admit
                .stored
                .bytes
                .saturating_sub(uncached.head_bytes())
                .min(len)
        };
        let read_path = path.clone();
        let data = tokio::task::spawn_blocking(move || read_prefix(&read_path, data_len))
            .await
            .map_err(|e| Lookup::Io(std::io::Error::other(e)))?
            .map_err(Lookup::Io)?;
        if data.len() as u64 != data_len {
            // The file changed under us; serve it uncached rather than cache a torn copy.
            return Ok(uncached);
        }
        let entry = describe(data);
        // A refusal here means the cache changed since the plan; the file is still served.
        let _ = cache
            .lock()
            .insert(key.to_owned(), object_bytes, entry.clone());
        Ok(entry)
    }
}

impl slipstream_node::Service for Origin {
    async fn call(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let start = self.clock.instant();
        let response = if self.phases.is_empty() {
            self.handle(&req).await
        } else {
            let mut ctx = Ctx::new(peer, start);
            let (mut parts, body) = req.into_parts();
            match self.phases.request_filter(&mut ctx, &mut parts).await {
                Some(response) => self.phases.respond(&mut ctx, response),
                None => {
                    let req = Request::from_parts(parts, body);
                    let response = self.handle(&req).await;
                    self.phases.respond(&mut ctx, response)
                }
            }
        };
        self.metrics.response(
            response.status(),
            self.clock.instant().saturating_duration_since(start),
        );
        response
    }

    fn register(&self, router: &mut Router) {
        slipstream_node::router::register_observability(
            router,
            self.metrics.registry.clone(),
            &self.settings.name,
        );
    }
}

enum Lookup {
    Refused(Refusal),
    Redirect,
    Io(std::io::Error),
}

fn read_prefix(path: &std::path::Path, len: u64) -> std::io::Result<Bytes> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut buf)?;
    Ok(Bytes::from(buf))
}

fn refused(refusal: Refusal) -> Response<Body> {
    match refusal {
        Refusal::BadRequest => text(StatusCode::BAD_REQUEST, "bad request: malformed path"),
        Refusal::Forbidden => text(
            StatusCode::FORBIDDEN,
            "forbidden: the path leaves the served directory",
        ),
        Refusal::NotFound => text(StatusCode::NOT_FOUND, "not found"),
    }
}
