//! `slipstream serve DIR`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use slipstream_origin::{Config, Origin, Settings};

/// Flags override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to serve.
    pub dir: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// TOML config file with a `[serve]` table; these flags override a subset of its fields.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Memory cache size, e.g. 64MiB [default: 64MiB].
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub cache_size: Option<u64>,
    /// Cache policy: adaptive, total, small, lru, sieve [default: adaptive].
    #[arg(long)]
    pub policy: Option<String>,
    /// Files larger than this keep only their first chunk of this size (paper 002's
    /// MAX_FILE_SIZE) [default: a quarter of the cache].
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub max_file_size: Option<u64>,
    /// Serve every request from the file system (for comparisons).
    #[arg(long)]
    pub no_cache: bool,
    /// Re-check a cached file for changes after this long, e.g. 1s [default: 1s].
    #[arg(long, value_parser = slipstream_units::duration)]
    pub revalidate: Option<std::time::Duration>,
    /// PEM certificate chain for HTTPS (with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Worker threads [default: one per core].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Cache-Control to send with every file, e.g. "max-age=60".
    #[arg(long)]
    pub cache_control: Option<String>,
}

/// A node's config file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct NodeFile {
    serve: Config,
}

/// Reads a config file; errors name the file, line and field.
fn load(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let file: NodeFile =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(file.serve)
}

impl Args {
    /// The config file (or defaults) with flags applied.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => load(path)?,
            None => Config::default(),
        };
        if let Some(dir) = &self.dir {
            c.root = Some(dir.clone());
        }
        if let Some(listen) = self.listen {
            c.listen = listen;
        }
        if let Some(size) = self.cache_size {
            c.cache.capacity_bytes = size;
        }
        if let Some(p) = &self.policy {
            c.cache.policy = p.clone();
        }
        if self.max_file_size.is_some() {
            c.cache.max_file_size_bytes = self.max_file_size;
        }
        if self.no_cache {
            c.cache.enabled = false;
        }
        if let Some(d) = self.revalidate {
            c.revalidate_ms = d.as_millis() as u64;
        }
        if self.tls_cert.is_some() {
            c.tls_cert = self.tls_cert.clone();
        }
        if self.tls_key.is_some() {
            c.tls_key = self.tls_key.clone();
        }
        if let Some(w) = self.workers {
            c.workers = w;
        }
        if self.cache_control.is_some() {
            c.cache_control = self.cache_control.clone();
        }
        Ok(c)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.config()?.validate()?;
    runtime(settings.workers)?.block_on(async move {
        let server = start(settings).await?;
        let scheme = if server.tls { "https" } else { "http" };
        println!(
            "slipstream serve: {} on {scheme}://{}/",
            server.root.display(),
            server.addr
        );
        println!("status: {scheme}://{}/_slipstream/status", server.addr);
        shutdown_signal().await
    })
}

/// A tokio runtime with `workers` threads (0 = one per core). One worker gets the
/// current-thread scheduler, which skips work-stealing bookkeeping that a single core cannot use.
pub fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if n > 0 {
                b.worker_threads(n);
            }
            b
        }
    };
    b.enable_all().build().context("starting the async runtime")
}

/// A running server.
pub struct Running {
    pub addr: SocketAddr,
    pub root: PathBuf,
    pub tls: bool,
}

/// Binds and starts serving in the background of the current runtime.
pub async fn start(settings: Settings) -> anyhow::Result<Running> {
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let tls = match &settings.tls {
        Some((cert, key)) => Some(slipstream_http::listen::tls_acceptor(cert, key)?),
        None => None,
    };
    let running = Running {
        addr,
        root: settings.root.clone(),
        tls: tls.is_some(),
    };
    let limits = settings.limits;
    let origin = Arc::new(Origin::new(settings));
    tokio::spawn(slipstream_http::listen::serve(
        listener,
        tls,
        limits,
        origin,
        std::future::pending(),
    ));
    Ok(running)
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM, the signal service managers send.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
