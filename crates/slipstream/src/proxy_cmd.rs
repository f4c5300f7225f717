//! `slipstream proxy`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use slipstream_proxy::Config;

/// Flags override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:3128].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Reverse proxy for this origin, e.g. http://127.0.0.1:8080. Without it: a forward proxy.
    #[arg(long)]
    pub origin: Option<String>,
    /// Also accept forward-proxy (absolute-form) requests when --origin is set.
    #[arg(long)]
    pub forward: bool,
    /// A parent proxy; repeat for fail-over order.
    #[arg(long = "parent")]
    pub parents: Vec<String>,
    /// This node's name in Via and Cache-Status.
    #[arg(long)]
    pub name: Option<String>,
    /// TOML config file with a `[proxy]` table; these flags override a subset of its fields.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Cache size, e.g. 256MiB.
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub cache_size: Option<u64>,
    /// Store only responses up to this size (a child's size rule).
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub max_object_size: Option<u64>,
    /// Store only responses of at least this size (a parent's size rule).
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub min_object_size: Option<u64>,
    /// Do not cache (a plain proxy).
    #[arg(long)]
    pub no_cache: bool,
    /// Bearer token that authorises purges.
    #[arg(long)]
    pub purge_token: Option<String>,
    /// Worker threads [default: one per core].
    #[arg(long)]
    pub workers: Option<usize>,
    /// PEM certificate chain: serve clients over HTTPS (with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct NodeFile {
    proxy: Config,
}

fn load(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let file: NodeFile =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(file.proxy)
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => load(path)?,
            None => Config::default(),
        };
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if self.origin.is_some() {
            c.origin = self.origin.clone();
        }
        c.forward |= self.forward;
        if !self.parents.is_empty() {
            c.parents = self.parents.clone();
        }
        if let Some(v) = &self.name {
            c.name = v.clone();
        }
        if let Some(v) = self.cache_size {
            c.cache.capacity_bytes = v;
        }
        if let Some(v) = self.max_object_size {
            c.cache.max_object_bytes = v;
        }
        if let Some(v) = self.min_object_size {
            c.cache.min_object_bytes = v;
        }
        if self.no_cache {
            c.cache.enabled = false;
        }
        if self.purge_token.is_some() {
            c.purge_token = self.purge_token.clone();
        }
        if let Some(v) = self.workers {
            c.workers = v;
        }
        if self.tls_cert.is_some() {
            c.tls_cert = self.tls_cert.clone();
        }
        if self.tls_key.is_some() {
            c.tls_key = self.tls_key.clone();
        }
        Ok(c)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.config()?.validate()?;
    crate::serve::runtime(settings.workers)?.block_on(async move {
        let addr = start(settings).await?;
        crate::serve::shutdown_signal().await?;
        let _ = addr;
        Ok(())
    })
}

/// Binds and starts the proxy in the background of the current runtime; prints its address.
pub async fn start(settings: slipstream_proxy::Settings) -> anyhow::Result<SocketAddr> {
    let (name, origin, parents) = (
        settings.name.clone(),
        settings.origin.clone(),
        settings.parents.clone(),
    );
    let addr = spawn(settings).await?;
    let mode = match &origin {
        Some(origin) => format!("reverse proxy for http://{origin}"),
        None => "forward proxy".to_owned(),
    };
    let parents: Vec<String> = parents.iter().map(|p| format!("http://{p}")).collect();
    println!(
        "slipstream proxy {name} on http://{addr}/: {mode}{}",
        if parents.is_empty() {
            String::new()
        } else {
            format!(" via {}", parents.join(", "))
        }
    );
    Ok(addr)
}

/// Binds and starts the proxy in the background of the current runtime, silently.
pub async fn spawn(settings: slipstream_proxy::Settings) -> anyhow::Result<SocketAddr> {
    Ok(slipstream_proxy::spawn(settings).await?)
}
