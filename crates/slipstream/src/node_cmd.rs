//! `slipstream node`: a cooperative web cache node (Riptide, paper 004) on libp2p.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use slipstream_coop::node::{self, BrowserProxy, CoopNode, StatusEndpoint};
use slipstream_node::bootstrap::{Asked, Running};
use slipstream_node::config::{self, ConfigFile, Override, Overrides};
use slipstream_node::Node;
use slipstream_proxy::Proxy;

/// Flags override the config file's `[coop]` table; `--set` sets any field of it (or of
/// `[proxy]`, which tunes the node's HTTP side).
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub tool: Option<Tool>,
    /// The browser proxy's address (an HTTP forward proxy) [default: 127.0.0.1:3128].
    #[arg(long, value_parser = slipstream_node::config::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// A peer-to-peer address to listen on, e.g. /ip4/0.0.0.0/tcp/4001 (repeatable)
    /// [default: /ip4/127.0.0.1/tcp/0].
    #[arg(long = "p2p-listen", value_name = "MULTIADDR")]
    pub p2p_listen: Vec<String>,
    /// A peer to join through, ending in /p2p/<peer id> (repeatable).
    #[arg(long, value_name = "MULTIADDR")]
    pub bootstrap: Vec<String>,
    /// Find peers on the LAN by mDNS.
    #[arg(long)]
    pub mdns: bool,
    /// An address peers reach this node at (a NAT's or a TCP proxy's), announced instead of
    /// the listen addresses; repeatable.
    #[arg(long, value_name = "MULTIADDR")]
    pub external: Vec<String>,
    /// No Bloom-filter digests: every lookup past the node's own store walks the DHT.
    #[arg(long)]
    pub no_digests: bool,
    /// Keep the node's key and replicas here (they survive restarts).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The cache provider whose objects this node serves (its peer id).
    #[arg(long)]
    pub provider: Option<String>,
    /// The provider's key file (made by `slipstream node keygen`): a gateway signs with it.
    #[arg(long)]
    pub provider_key: Option<PathBuf>,
    /// A delegation file (made by `slipstream node delegate`): a gateway signs with its own
    /// node key, which the provider vouched for, and never holds the provider's key.
    #[arg(long)]
    pub delegation: Option<PathBuf>,
    /// A role besides the browser proxy: cache, gateway, manager (repeatable)
    /// [default: cache].
    #[arg(long = "role")]
    pub roles: Vec<String>,
    /// A URL a gateway refreshes every monitor period, pushing changes (repeatable).
    #[arg(long)]
    pub monitor: Vec<String>,
    /// The content cache's bound, e.g. 256MiB.
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub cache_size: Option<u64>,
    /// The node's TOML config file; `node` reads its `[coop]` and `[proxy]` tables.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Set any field, e.g. `--set coop.lookup_budget_ms=500ms` (repeatable).
    #[arg(long = "set", value_name = "TABLE.FIELD=VALUE", value_parser = config::parse_override)]
    pub set: Vec<Override>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Tool {
    /// Make a cache provider's key file and print its peer id (what nodes name as provider).
    Keygen {
        /// Where to write the key (refused if it exists).
        out: PathBuf,
    },
    /// Print the peer id of the node whose data directory is DATA_DIR (making its key if it
    /// has none yet): what `delegate` names.
    Id {
        /// The node's data directory.
        data_dir: PathBuf,
    },
    /// Have the provider vouch for a gateway's node key until an expiry: the gateway signs
    /// objects as the provider's without holding the provider's key.
    Delegate {
        /// The provider's key file.
        #[arg(long)]
        provider_key: PathBuf,
        /// The gateway node's peer id (`slipstream node id DATA_DIR`).
        #[arg(long)]
        node: String,
        /// How long it is good for, e.g. 720h (30 days), 90m.
        #[arg(long, value_parser = slipstream_units::duration, default_value = "720h")]
        valid: std::time::Duration,
        /// Where to write it (refused if it exists); the gateway's `--delegation`.
        out: PathBuf,
    },
}

impl Args {
    fn overrides(&self) -> Overrides {
        let list = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let mut o = Overrides::default();
        o.set_opt("coop.listen", self.listen.map(|a| a.to_string()))
            .set_opt("coop.p2p_listen", list(&self.p2p_listen))
            .set_opt("coop.bootstrap", list(&self.bootstrap))
            .set_opt("coop.mdns", self.mdns.then_some(true))
            .set_opt("coop.external", list(&self.external))
            .set_opt("coop.digests", self.no_digests.then_some(false))
            .set_opt("coop.data_dir", path(&self.data_dir))
            .set_opt("coop.provider", self.provider.clone())
            .set_opt("coop.provider_key", path(&self.provider_key))
            .set_opt("coop.delegation", path(&self.delegation))
            .set_opt("coop.roles", list(&self.roles))
            .set_opt("coop.monitor", list(&self.monitor))
            .set_opt(
                "coop.capacity_bytes",
                self.cache_size.and_then(|n| i64::try_from(n).ok()),
            )
            .extend(self.set.iter().cloned());
        o
    }

    fn settings(
        &self,
    ) -> anyhow::Result<(
        slipstream_coop::config::Settings,
        slipstream_proxy::Settings,
    )> {
        let file = ConfigFile::load_opt(self.config.as_deref())?;
        let coop: slipstream_coop::config::Config = file.section("coop", &self.overrides())?;
        let coop = coop.validate()?;
        let http = http_settings(&file, &coop, &self.set)?;
        Ok((coop, http))
    }
}

/// A node's HTTP side: a forward proxy on the coop's address with its own memory cache off
/// (the node's store is its cache, and a hit there must be seen as one), then `file`'s
/// `[proxy]` table and `set` on top.
pub fn http_settings(
    file: &ConfigFile,
    coop: &slipstream_coop::config::Settings,
    set: &[Override],
) -> anyhow::Result<slipstream_proxy::Settings> {
    let mut http = Overrides::default();
    http.set_opt("proxy.listen", Some(coop.listen.to_string()))
        .set_opt("proxy.cache.enabled", Some(false))
        .set_opt("proxy.workers", i64::try_from(coop.workers).ok());
    http.extend(set.iter().cloned());
    let proxy: slipstream_proxy::Config = file.section("proxy", &http)?;
    Ok(proxy.validate()?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match &args.tool {
        Some(Tool::Keygen { out }) => return keygen(out),
        Some(Tool::Id { data_dir }) => {
            let key = node::identity_at(data_dir)?;
            println!("{}", key.public().to_peer_id());
            return Ok(());
        }
        Some(Tool::Delegate {
            provider_key,
            node: id,
            valid,
            out,
        }) => {
            let said = node::delegate(provider_key, id, *valid, out).map_err(anyhow::Error::msg)?;
            println!("{said}");
            return Ok(());
        }
        None => {}
    }
    let (coop, http) = args.settings()?;
    crate::serve::runtime(coop.workers)?.block_on(async move {
        let drain = http.drain;
        let mut signals = crate::serve::signals()?;
        let log = crate::serve::access_log(&http.access_log)?;
        let (running, node) = start(coop, http, log.clone()).await?;
        loop {
            match signals.next().await {
                Asked::Stop => break,
                Asked::Reload => {
                    println!("reload: a node's settings take effect at its next start")
                }
                Asked::Reopen => crate::serve::reopen(log.as_ref()),
            }
        }
        crate::serve::stop(running, drain).await;
        drop(node);
        Ok(())
    })
}

fn keygen(out: &std::path::Path) -> anyhow::Result<()> {
    let id = node::keygen(out)
        .with_context(|| format!("cannot write {} (it must not exist yet)", out.display()))?;
    println!("{id}");
    Ok(())
}

/// Starts the swarm, the roles and the browser proxy, silently; its requests (control ones
/// too) written to `log`.
pub async fn spawn(
    coop: slipstream_coop::config::Settings,
    http: slipstream_proxy::Settings,
    log: Option<slipstream_node::access_log::AccessLog>,
) -> anyhow::Result<(Running, Arc<CoopNode>)> {
    let coop_node = node::start(coop, http.access.clone())
        .await
        .context("starting the node")?;
    // The browser proxy never reaches the node's own peer-to-peer ports either.
    let mut http = http;
    http.access = coop_node.access().clone();
    let mut builder = Proxy::builder(http.clone()).phase(BrowserProxy(coop_node.clone()));
    if let Some(log) = &log {
        builder = builder.phase(log.clone());
    }
    let mut n = Node::new(builder.build());
    if let Some(log) = log {
        n = n.with_control_log(log);
    }
    n.route("coop", StatusEndpoint(coop_node.clone()));
    let running = n.start(&http.listen()).await?;
    // The swarm reports its listen addresses once its sockets are bound (moments).
    for _ in 0..500 {
        if !coop_node.client().addresses().await.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok((running, coop_node))
}

/// Starts the swarm, the roles and the browser proxy; prints the node's addresses.
pub async fn start(
    coop: slipstream_coop::config::Settings,
    http: slipstream_proxy::Settings,
    log: Option<slipstream_node::access_log::AccessLog>,
) -> anyhow::Result<(Running, Arc<CoopNode>)> {
    let (running, coop_node) = spawn(coop, http, log).await?;
    let addr = running.bound.addr;
    let client = coop_node.client();
    let addrs = client.addresses().await;
    let s = coop_node.settings();
    println!(
        "slipstream node {}: browser proxy on http://{addr}/ (provider {})",
        client.peer_id(),
        s.provider.to_peer_id()
    );
    for a in &addrs {
        println!("p2p: {a}");
    }
    println!("status: http://{addr}/_slipstream/status");
    Ok((running, coop_node))
}
