//! `slipstream serve DIR`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use slipstream_node::access_log::{self, AccessLog};
use slipstream_node::bootstrap::{self, Asked, PriorityApplied, Running, Signals};
use slipstream_node::config::{self, ConfigFile, Override, Overrides};
use slipstream_node::Node;
use slipstream_origin::{Config, Origin, Settings};
use slipstream_replica::api::Api;
use slipstream_replica::page::Pages;
use slipstream_replica::placement::{self, Load};
use slipstream_replica::{config as cluster, Cluster};
use std::sync::Arc;

/// Flags override the config file: each named flag sets one field of `[serve]`, and `--set`
/// sets any field.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to serve.
    pub dir: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, value_parser = slipstream_node::config::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// The node's TOML config file; `serve` reads its `[serve]`, `[cluster]` and `[prefetch]`
    /// tables and ignores the others.
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
    /// Join a cluster through this member's gossip address (repeatable; sets `cluster.seeds`
    /// and joins; the rest of `[cluster]` comes from the file or `--set cluster.FIELD=...`).
    #[arg(long = "cluster-seed", value_name = "HOST:PORT")]
    pub cluster_seed: Vec<String>,
    /// Prefetch with NPS (paper 000): the hint server at `/_slipstream/hints` and the monitor
    /// that sets its budget (the rest of `[prefetch]` comes from the file or
    /// `--set prefetch.FIELD=...`).
    #[arg(long)]
    pub prefetch: bool,
    /// Set any field of the config, e.g. `--set serve.cache.policy=lru` or
    /// `--set serve.idle_timeout_ms=30s` (repeatable; applied after the named flags).
    #[arg(long = "set", value_name = "TABLE.FIELD=VALUE", value_parser = config::parse_override)]
    pub set: Vec<Override>,
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

fn int(n: impl TryInto<i64>) -> Option<i64> {
    n.try_into().ok()
}

impl Args {
    /// The flags as overrides of the `[serve]` table.
    fn overrides(&self) -> Overrides {
        let mut o = Overrides::default();
        o.set_opt("serve.root", self.dir.as_deref().map(path))
            .set_opt("serve.listen", self.listen.map(|a| a.to_string()))
            .set_opt("serve.cache.capacity_bytes", self.cache_size.and_then(int))
            .set_opt("serve.cache.policy", self.policy.clone())
            .set_opt(
                "serve.cache.max_file_size_bytes",
                self.max_file_size.and_then(int),
            )
            .set_opt("serve.cache.enabled", self.no_cache.then_some(false))
            .set_opt(
                "serve.revalidate_ms",
                self.revalidate.and_then(|d| int(d.as_millis())),
            )
            .set_opt("serve.tls_cert", self.tls_cert.as_deref().map(path))
            .set_opt("serve.tls_key", self.tls_key.as_deref().map(path))
            .set_opt("serve.workers", self.workers.and_then(int))
            .set_opt("serve.cache_control", self.cache_control.clone())
            .set_opt(
                "cluster.seeds",
                (!self.cluster_seed.is_empty()).then(|| {
                    toml::Value::Array(
                        self.cluster_seed
                            .iter()
                            .map(|s| toml::Value::String(s.clone()))
                            .collect(),
                    )
                }),
            )
            .set_opt("prefetch.enabled", self.prefetch.then_some(true))
            .extend(self.set.iter().cloned());
        o
    }

    /// The `[prefetch]` table with the flags applied, validated, when the node prefetches.
    pub fn prefetch(&self, serve: &Settings) -> anyhow::Result<Option<slipstream_nps::Settings>> {
        let file = ConfigFile::load_opt(self.config.as_deref())?;
        let table: slipstream_nps::Config = file.section("prefetch", &self.overrides())?;
        let asked = file.tables().contains(&"prefetch")
            || self.set.iter().any(|o| o.key.starts_with("prefetch."));
        if !table.runs(asked) {
            return Ok(None);
        }
        let settings = table.validate()?;
        if serve.tls.is_some() && settings.budget == slipstream_nps::Budget::Monitor {
            anyhow::bail!(
                "[prefetch] the monitor probes the node over plain HTTP; with TLS set \
                 `prefetch.experimental.budget = \"unlimited\"` or serve prefetching from a \
                 plain-HTTP node"
            );
        }
        Ok(Some(settings))
    }

    /// The config file (or defaults) with the flags applied.
    pub fn config(&self) -> anyhow::Result<Config> {
        let file = ConfigFile::load_opt(self.config.as_deref())?;
        Ok(file.section("serve", &self.overrides())?)
    }

    /// The `[cluster]` table with the flags applied, validated, when the node joins one (the
    /// file has the table, or a flag asks for it, and `enabled` does not say no).
    pub fn cluster(&self, serve: &Settings) -> anyhow::Result<Option<cluster::Cluster>> {
        let file = ConfigFile::load_opt(self.config.as_deref())?;
        let table: cluster::Config = file.section("cluster", &self.overrides())?;
        let asked = file.tables().contains(&"cluster")
            || !self.cluster_seed.is_empty()
            || self.set.iter().any(|o| o.key.starts_with("cluster."));
        if !table.joins(asked) {
            return Ok(None);
        }
        Ok(Some(table.validate(serve.listen, &serve.name)?))
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.config()?.validate()?;
    let cluster = args.cluster(&settings)?;
    let mut prefetch = args.prefetch(&settings)?;
    if let (Some(p), Some(c)) = (prefetch.as_mut(), cluster.as_ref()) {
        // A cluster member's pages carry the registration already (the Pages phase).
        p.munge &= !c.pre_process;
    }
    let args = &args;
    runtime(settings.workers)?.block_on(async move {
        let root = settings.root.clone();
        let drain = settings.drain;
        let mut signals = signals()?;
        let log = access_log(&settings.access_log)?;
        // Written once SIGHUP is handled, so that `reload` cannot kill a starting node.
        let _pid = PidFile::create(settings.pid_file.clone())?;
        let (server, member) = start_with(settings, log.clone(), cluster, prefetch).await?;
        let (scheme, addr) = (server.bound.scheme(), server.bound.addr);
        println!("slipstream serve: {} on {scheme}://{addr}/", root.display());
        println!("status: {scheme}://{addr}/_slipstream/status");
        if args.prefetch(&args.config()?.validate()?)?.is_some() {
            println!(
                "prefetch: hints at {scheme}://{addr}/_slipstream/hints?url=/, monitor at \
                 {scheme}://{addr}/_slipstream/prefetch"
            );
        }
        if let Some(member) = &member {
            let s = member.settings();
            println!(
                "cluster: node {} (gossip {}, advertised as {}), directory: {scheme}://{addr}/_slipstream/directory",
                s.name,
                s.gossip_listen,
                member.advertise().unwrap_or_default()
            );
        }
        loop {
            match signals.next().await {
                Asked::Stop => break,
                Asked::Reopen => reopen(log.as_ref()),
                Asked::Reload => match args.config().and_then(|c| Ok(c.validate()?)) {
                    // Of `[serve]`, only the certificate changes at run time: say so rather
                    // than pretend.
                    Ok(new) => {
                        if reload_tls(&server, new.tls.as_ref()) {
                            println!(
                                "reload: the config is valid; `serve` applies changes other than \
                                 the TLS certificate at the next start"
                            );
                        }
                    }
                    Err(e) => println!("reload refused, running on unchanged: {e:#}"),
                },
            }
        }
        if let Some(member) = &member {
            member.leave();
        }
        stop(server, drain).await;
        Ok(())
    })
}

/// On a reload, presents the certificate `tls` names from the next TLS handshake on. Returns
/// false, having said why, when it cannot be read (the old one stays).
pub fn reload_tls(
    running: &Running,
    tls: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> bool {
    let Some((cert, key)) = tls else {
        return true;
    };
    match running.reload_tls(cert, key) {
        Ok(()) => {
            if running.bound.tls {
                println!("reloaded: TLS certificate {}", cert.display());
            }
            true
        }
        Err(e) => {
            println!("reload: TLS certificate refused, the current one stays: {e:#}");
            false
        }
    }
}

/// The process id in a file while the node runs (`pid_file`); removed when the node stops.
#[derive(Debug)]
pub struct PidFile(Option<std::path::PathBuf>);

impl PidFile {
    /// Writes this process's id to `path`, if any.
    pub fn create(path: Option<std::path::PathBuf>) -> anyhow::Result<PidFile> {
        if let Some(p) = &path {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .with_context(|| format!("writing the pid file {}", p.display()))?;
        }
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The signals a running node answers.
pub fn signals() -> anyhow::Result<Signals> {
    Signals::new().context("installing the signal handlers")
}

/// A tokio runtime with `workers` threads (0 = one per core).
pub fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    bootstrap::runtime(workers).context("starting the async runtime")
}

/// NPS on a node: the demand phase, the endpoints, and the monitor once the node listens.
struct Prefetch(Arc<slipstream_nps::Nps>);

impl Prefetch {
    fn new(settings: slipstream_nps::Settings) -> anyhow::Result<Prefetch> {
        let nps = Arc::new(slipstream_nps::Nps::new(settings));
        if let Some(log) = nps.settings().train_log.clone() {
            let (learnt, skipped) =
                slipstream_nps::demand::train_from_log(&nps, &log).map_err(anyhow::Error::msg)?;
            eprintln!(
                "prefetch: trained from {} ({learnt} requests, {skipped} malformed line(s) passed over)",
                log.display()
            );
        }
        Ok(Prefetch(nps))
    }

    /// The endpoints; without a cluster, also the agent's files (a cluster member serves them
    /// already).
    fn route<S: slipstream_node::Service>(&self, node: &mut Node<S>, agent_files: bool) {
        node.route(
            "hints",
            slipstream_nps::hints::HintsEndpoint(self.0.clone()),
        )
        .route(
            "prefetch",
            slipstream_nps::hints::StatusEndpoint(self.0.clone()),
        )
        .route(
            "speculationrules",
            slipstream_nps::hints::SpeculationRules(self.0.clone()),
        );
        if agent_files {
            node.route("sw.js", slipstream_replica::page::ServiceWorker)
                .route("agent", slipstream_replica::page::AgentFiles);
        }
    }

    /// Binds the prefetch listener, if configured, serving `node` at low priority beside
    /// `running` (and drained with it).
    fn start_listener<S: slipstream_node::Service>(
        &self,
        node: Arc<Node<S>>,
        listen: &slipstream_node::bootstrap::Listen,
        running: &mut bootstrap::Running,
    ) -> anyhow::Result<()> {
        let s = self.0.settings();
        let Some(addr) = s.listen else {
            return Ok(());
        };
        let (listener, mut applied) =
            slipstream_nps::listener::bind(addr, s.lower_effort, &s.congestion)
                .with_context(|| format!("cannot bind the prefetch listener on {addr}"))?;
        let base = s
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", applied.addr));
        applied.cpu = running
            .serve_beside(
                listener,
                Arc::new(slipstream_nps::listener::PrefetchHandler(node)),
                listen,
                s.listener_priority,
                self.0.pacing(),
            )
            .context("cannot start the prefetch listener's thread")?;
        println!(
            "prefetch listener: {base}/ (DSCP lower-effort: {}, congestion control: {}{}, CPU: {}, RTT back-off: {})",
            applied.lower_effort,
            applied.congestion,
            if applied.low_priority_congestion {
                ""
            } else {
                ", no low-priority one available"
            },
            match applied.cpu {
                PriorityApplied::Shared => "shared with demand",
                PriorityApplied::SchedIdle => "own thread, SCHED_IDLE",
                PriorityApplied::Nice19 => "own thread, nice 19 (SCHED_IDLE refused)",
                PriorityApplied::OwnThread => "own thread, normal priority (could not lower it)",
            },
            match s.pacing {
                Some(p) if p.shared => "on, one window a client address",
                Some(_) => "on, one window a connection",
                None => "off",
            }
        );
        self.0.set_listener(applied, base);
        Ok(())
    }

    fn start_monitor(&self, bound: SocketAddr) {
        if self.0.settings().budget != slipstream_nps::Budget::Monitor {
            return;
        }
        let ip = match bound.ip() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        tokio::spawn(slipstream_nps::monitor::run(
            self.0.clone(),
            SocketAddr::new(ip, bound.port()),
        ));
    }
}

/// Binds and starts serving in the background of the current runtime, with an access log, as a
/// member of a cluster, prefetching.
pub async fn start_with(
    settings: Settings,
    log: Option<AccessLog>,
    cluster: Option<cluster::Cluster>,
    prefetch: Option<slipstream_nps::Settings>,
) -> anyhow::Result<(Running, Option<Arc<Cluster>>)> {
    let listen = settings.listen();
    let cpu_cost = settings.cpu_cost;
    let mut origin = Origin::builder(settings);
    if let Some(log) = &log {
        origin = origin.phase(log.clone());
    }
    let logged = |node: Node<_>| match &log {
        Some(log) => node.with_control_log(log.clone()),
        None => node,
    };
    let prefetch = prefetch.map(Prefetch::new).transpose()?;
    if let Some(p) = &prefetch {
        origin = origin.phase(slipstream_nps::demand::Demand::new(p.0.clone()));
    }
    let Some(cluster) = cluster else {
        let mut node = logged(Node::new(origin.build()).with_cpu_cost(cpu_cost));
        if let Some(p) = &prefetch {
            p.route(&mut node, true);
        }
        let node = Arc::new(node);
        let mut running = bootstrap::start(&listen, node.clone()).await?;
        if let Some(p) = &prefetch {
            p.start_listener(node, &listen, &mut running)?;
            p.start_monitor(running.bound.addr);
        }
        return Ok((running, None));
    };
    let member = Arc::new(
        Cluster::join(cluster.settings.clone())
            .await
            .context("joining the cluster")?,
    );
    if cluster.pre_process {
        origin = origin.phase(Pages::new(
            member.clone(),
            cluster.agent.clone(),
            cluster.page_cache_bytes,
        ));
    }
    let load = cluster.placement.as_ref().map(|_| Load::default());
    if let Some(load) = &load {
        origin = origin.phase(load.clone());
    }
    let mut node = logged(Node::new(origin.build()).with_cpu_cost(cpu_cost));
    let api = Api::new(
        member.clone(),
        cluster.token.clone(),
        cluster.max_replica_bytes,
    );
    api.register(&mut node);
    if let Some(p) = &prefetch {
        p.route(&mut node, false);
    }
    let node = Arc::new(node);
    let mut running = bootstrap::start(&listen, node.clone()).await?;
    if let Some(p) = &prefetch {
        p.start_listener(node, &listen, &mut running)?;
        p.start_monitor(running.bound.addr);
    }
    if cluster.settings.advertise.is_none() {
        let bound = running.bound;
        member
            .advertise_at(&format!("{}://{}", bound.scheme(), bound.addr))
            .await;
    }
    member
        .publish_root(&cluster.publish)
        .await
        .context("announcing the `publish` patterns")?;
    if let (Some(settings), Some(load), Some(token)) = (cluster.placement, load, cluster.token) {
        tokio::spawn(placement::run(
            member.clone(),
            settings,
            load,
            api.counters(),
            token,
        ));
    }
    Ok((running, Some(member)))
}

/// Opens the access log a node's settings name, if any.
pub fn access_log(
    setting: &Option<(std::path::PathBuf, access_log::Format)>,
) -> anyhow::Result<Option<AccessLog>> {
    setting
        .as_ref()
        .map(|(path, format)| {
            AccessLog::open(path, *format, slipstream_node::Clock::System)
                .with_context(|| format!("cannot open the access log {}", path.display()))
        })
        .transpose()
}

/// SIGUSR1: the access log is opened again (after rotation).
pub fn reopen(log: Option<&AccessLog>) {
    if let Some(log) = log {
        log.reopen();
        eprintln!("reopened the access log");
    }
}

/// Stops a node: new connections are refused, requests in progress finish (for at most
/// `drain`).
pub async fn stop(node: Running, drain: std::time::Duration) {
    eprintln!("stopping: finishing requests in progress (at most {drain:?})");
    let cut = node.drain().await;
    if cut > 0 {
        eprintln!("stopped with {cut} connection(s) still open at the deadline");
    }
}
