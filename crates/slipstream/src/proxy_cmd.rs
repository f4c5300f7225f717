//! `slipstream proxy`.

use std::net::SocketAddr;
use std::path::PathBuf;

use slipstream_node::access_log::AccessLog;
use slipstream_node::bootstrap::{Asked, Running};
use slipstream_node::config::{self, ConfigFile, Override, Overrides};
use slipstream_node::Node;
use slipstream_proxy::{Config, Proxy};

/// Flags override the config file: each named flag sets one field of `[proxy]`, and `--set`
/// sets any field.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:3128].
    #[arg(long, value_parser = slipstream_node::config::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// Reverse proxy for this origin, e.g. http://127.0.0.1:8080; repeat for several servers
    /// of one site (the first that is up answers). Without it: a forward proxy.
    #[arg(long = "origin")]
    pub origins: Vec<String>,
    /// Also accept forward-proxy (absolute-form) requests when --origin is set.
    #[arg(long)]
    pub forward: bool,
    /// A parent proxy; repeat for fail-over order.
    #[arg(long = "parent")]
    pub parents: Vec<String>,
    /// This node's name in Via and Cache-Status.
    #[arg(long)]
    pub name: Option<String>,
    /// The node's TOML config file; `proxy` reads its `[proxy]` table and ignores the others.
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
    /// Set any field of the config, e.g. `--set proxy.cache.policy=sieve` or
    /// `--set proxy.upstream_timeout_ms=5s` (repeatable; applied after the named flags).
    #[arg(long = "set", value_name = "TABLE.FIELD=VALUE", value_parser = config::parse_override)]
    pub set: Vec<Override>,
}

fn list(v: &[String]) -> Option<Vec<String>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn int(n: impl TryInto<i64>) -> Option<i64> {
    n.try_into().ok()
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

impl Args {
    /// The flags as overrides of the `[proxy]` table.
    fn overrides(&self) -> Overrides {
        let mut o = Overrides::default();
        o.set_opt("proxy.listen", self.listen.map(|a| a.to_string()))
            .set_opt("proxy.origin", list(&self.origins))
            .set_opt("proxy.forward", self.forward.then_some(true))
            .set_opt("proxy.parents", list(&self.parents))
            .set_opt("proxy.name", self.name.clone())
            .set_opt("proxy.cache.capacity_bytes", self.cache_size.and_then(int))
            .set_opt(
                "proxy.cache.max_object_bytes",
                self.max_object_size.and_then(int),
            )
            .set_opt(
                "proxy.cache.min_object_bytes",
                self.min_object_size.and_then(int),
            )
            .set_opt("proxy.cache.enabled", self.no_cache.then_some(false))
            .set_opt("proxy.purge_token", self.purge_token.clone())
            .set_opt("proxy.workers", self.workers.and_then(int))
            .set_opt("proxy.tls_cert", self.tls_cert.as_deref().map(path))
            .set_opt("proxy.tls_key", self.tls_key.as_deref().map(path))
            .extend(self.set.iter().cloned());
        o
    }

    fn config(&self) -> anyhow::Result<Config> {
        let file = ConfigFile::load_opt(self.config.as_deref())?;
        Ok(file.section("proxy", &self.overrides())?)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.config()?.validate()?;
    crate::serve::runtime(settings.workers)?.block_on(async move {
        let drain = settings.drain;
        let mut signals = crate::serve::signals()?;
        let log = crate::serve::access_log(&settings.access_log)?;
        // Written once SIGHUP is handled, so that `reload` cannot kill a starting node.
        let _pid = crate::serve::PidFile::create(settings.pid_file.clone())?;
        let directory = settings.origin_directory.clone();
        let (running, proxy) = start_with(settings, log.clone()).await?;
        if let Some((base, every)) = directory {
            println!("origins: following the directory of {base}");
            tokio::spawn(follow_directory(proxy.clone(), base, every));
        }
        loop {
            match signals.next().await {
                Asked::Stop => break,
                Asked::Reload => reload(&args, &proxy, &running),
                Asked::Reopen => crate::serve::reopen(log.as_ref()),
            }
        }
        crate::serve::stop(running, drain).await;
        Ok(())
    })
}

/// SIGHUP: reads the config again (file and flags). Parents and origins change at once, with
/// the connections and what selection learnt about endpoints that stay; the cache is kept; the
/// TLS certificate is read again for new connections. A
/// config that does not validate is refused and the proxy runs on unchanged.
fn reload(args: &Args, proxy: &Proxy, running: &Running) {
    let new = match args.config().and_then(|c| Ok(c.validate()?)) {
        Ok(new) => new,
        Err(e) => {
            println!("reload refused, running on unchanged: {e:#}");
            return;
        }
    };
    if !crate::serve::reload_tls(running, new.tls.as_ref()) {
        println!("reload refused, running on unchanged");
        return;
    }
    proxy.set_parents(&new.parents, &new.https_parents);
    proxy.set_origins(&new.origins);
    let old = proxy.settings();
    let mut rest = new.clone();
    rest.parents = old.parents.clone();
    rest.origins = old.origins.clone();
    rest.origin = old.origin.clone();
    rest.tls = old.tls.clone();
    let list = |v: &[http::uri::Authority]| {
        v.iter()
            .map(|a| format!("http://{a}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "reloaded: parents [{}], origins [{}]",
        list(&new.parents),
        list(&new.origins)
    );
    if format!("{rest:?}") != format!("{old:?}") {
        println!("reload: changes other than parents and origins take effect at the next start");
    }
}

/// Binds and starts the proxy in the background of the current runtime, with an access log if
/// one is given; prints its address.
async fn start_with(
    settings: slipstream_proxy::Settings,
    log: Option<AccessLog>,
) -> anyhow::Result<(Running, Proxy)> {
    let (name, origins, parents) = (
        settings.name.clone(),
        settings.origins.clone(),
        settings.parents.clone(),
    );
    let listen = settings.listen();
    let mut builder = Proxy::builder(settings);
    if let Some(log) = &log {
        builder = builder.phase(log.clone());
    }
    let proxy = builder.build();
    let mut node = Node::new(proxy.clone());
    if let Some(log) = log {
        node = node.with_control_log(log);
    }
    let running = node.start(&listen).await?;
    let addr = running.bound.addr;
    let mode = if origins.is_empty() {
        "forward proxy".to_owned()
    } else {
        let origins: Vec<String> = origins.iter().map(|o| format!("http://{o}")).collect();
        format!("reverse proxy for {}", origins.join(", "))
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
    println!("status: http://{addr}/_slipstream/status");
    Ok((running, proxy))
}

/// Binds and starts the proxy in the background of the current runtime, silently.
pub async fn spawn(settings: slipstream_proxy::Settings) -> anyhow::Result<SocketAddr> {
    let listen = settings.listen();
    let bound = Node::new(Proxy::new(settings))
        .spawn(&listen)
        .await
        .map_err(anyhow::Error::from)?;
    Ok(bound.addr)
}

/// Keeps the proxy's origins those the directory of a Web++ cluster member names for `/` (the
/// servers publishing the whole site, `publish = ["/*"]`), asking every `every`. An error or an
/// empty answer leaves the origins as they are.
async fn follow_directory(proxy: Proxy, base: http::Uri, every: std::time::Duration) {
    let client = crate::get_cmd::client();
    let base = base.to_string().trim_end_matches('/').to_owned();
    let scheme = proxy.settings().origin_scheme.clone();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut current: Vec<http::uri::Authority> = proxy.settings().origins.clone();
    loop {
        ticker.tick().await;
        match crate::get_cmd::resolve(&client, &base, "/").await {
            Err(e) => tracing::warn!("origin directory: {e:#}; the origins stay as they are"),
            Ok(list) => {
                let found = origins_of(&list, &scheme);
                if found.is_empty() {
                    tracing::warn!(
                        "origin directory {base}: no live server publishes `/`; the origins stay as they are"
                    );
                } else if found != current {
                    let shown: Vec<String> =
                        found.iter().map(|a| format!("{scheme}://{a}")).collect();
                    println!("origins from the directory: {}", shown.join(", "));
                    proxy.set_origins(&found);
                    current = found;
                }
            }
        }
    }
}

/// The servers among a resolution of `/`: physical URLs of this scheme whose path is `/` (a
/// server's document root; a stored replica of `/` alone is not a whole site), sorted.
fn origins_of(list: &[String], scheme: &http::uri::Scheme) -> Vec<http::uri::Authority> {
    let mut found: Vec<http::uri::Authority> = list
        .iter()
        .filter_map(|v| v.parse::<http::Uri>().ok())
        .filter(|u| u.scheme() == Some(scheme) && u.path() == "/")
        .filter_map(|u| u.authority().cloned())
        .collect();
    found.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    found.dedup();
    found
}
