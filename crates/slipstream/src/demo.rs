//! `slipstream demo`: the system on loopback with a bundled sample site.
//!
//! Today that is a caching hierarchy (paper 003's Figure 1): a child proxy, the entry point, in
//! front of two parent proxies (fail-over order) in front of the origin server with its memory
//! cache (paper 002). The child keeps objects up to 1 MiB, the parents the rest. The origin is one
//! of three servers of the site that form a Web++ cluster (paper 001): each serves the site as
//! a replica of the whole, their pages carry the replica lists, and the browser agent binds each
//! resource to the fastest. Prefetching comes later.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use slipstream_bench::{Limits, Mode, Plan, Targets};

/// The sample site, compiled into the binary.
const SITE: &[(&str, &[u8])] = &[
    ("index.html", include_bytes!("../site/index.html")),
    ("about.html", include_bytes!("../site/about.html")),
    (
        "assets/style.css",
        include_bytes!("../site/assets/style.css"),
    ),
    ("assets/logo.svg", include_bytes!("../site/assets/logo.svg")),
];

/// Size of the generated large file: above the demo's 1 MiB chunk threshold.
const LARGE_FILE_BYTES: usize = 2 << 20;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the entry point (the child proxy); the parents and the origin take free
    /// loopback ports.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = slipstream_node::config::parse_listen)]
    pub listen: SocketAddr,
    /// Where to write the sample site [default: a fresh directory under the system temp dir].
    #[arg(long)]
    pub site_dir: Option<PathBuf>,
}

fn write_site(dir: &Path) -> anyhow::Result<()> {
    for (name, bytes) in SITE {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Deterministic, not all zeros, so a client can tell bytes apart.
    let large: Vec<u8> = (0..LARGE_FILE_BYTES).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("assets/large.bin"), large)?;
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = match &args.site_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("slipstream-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_site(&dir)?;
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut config = slipstream_origin::Config {
        root: Some(dir.clone()),
        listen: loopback,
        ..Default::default()
    };
    config.cache.capacity_bytes = 4 << 20;
    config.cache_control = Some("max-age=60".into());
    let settings = config.validate()?;
    let shown = dir.clone();
    let data = std::env::temp_dir().join(format!("slipstream-demo-{}-data", std::process::id()));
    let data_dir = data.clone();
    let result = crate::serve::runtime(0)?.block_on(async move {
        // Three servers of the site in one cluster; the first is the hierarchy's origin. Kept
        // until the demo ends: dropping them would stop them.
        let mut replicas = Vec::new();
        let mut seed = None;
        // The demo's own cluster secret: nothing else on this machine can join its gossip.
        let secret = format!("{:032x}", rand::random::<u128>());
        for name in ["origin", "replica-b", "replica-c"] {
            let gossip = free_udp_port()?;
            let table = slipstream_replica::config::Config {
                name: Some(name.into()),
                gossip_listen: ([127, 0, 0, 1], gossip).into(),
                seeds: seed
                    .iter()
                    .map(|p: &u16| format!("127.0.0.1:{p}"))
                    .collect(),
                data_dir: data_dir.join(name),
                gossip_interval_ms: 200,
                publish: vec!["/*".into()],
                secret: Some(secret.clone()),
                agent: toml::toml! { probe_interval_ms = 5000 },
                ..Default::default()
            };
            let cluster = table.validate(settings.listen, name)?;
            let mut node = settings.clone();
            node.name = name.into();
            // The origin prefetches (NPS, paper 000): hints, the monitor and its budget, and a
            // low-priority prefetch listener. Its pages carry the agent's registration already
            // (the cluster's pre-processing), so the munger stays off.
            let prefetch = (name == "origin")
                .then(|| {
                    slipstream_nps::Config {
                        probe_path: "/index.html".into(),
                        listen: Some(loopback),
                        munge: false,
                        ..Default::default()
                    }
                    .validate()
                })
                .transpose()?;
            let (running, member) =
                crate::serve::start_with(node, None, Some(cluster), prefetch).await?;
            seed.get_or_insert(gossip);
            replicas.push((name, running, member));
        }
        let origin = replicas[0].1.bound;
        let mut parents = Vec::new();
        for name in ["parent-a", "parent-b"] {
            // Forward proxies whose origin is on loopback, which they reach only when told to.
            let config = slipstream_proxy::Config {
                listen: loopback,
                name: name.into(),
                allow_destinations: vec![loopback.ip().to_string()],
                ..Default::default()
            };
            parents.push(crate::proxy_cmd::spawn(config.validate()?).await?);
        }
        let mut child = slipstream_proxy::Config {
            listen: args.listen,
            name: "child".into(),
            origin: vec![format!("http://{}", origin.addr)],
            parents: parents.iter().map(|p| format!("http://{p}")).collect(),
            ..Default::default()
        };
        child.cache.max_object_bytes = 1 << 20;
        let entry = crate::proxy_cmd::spawn(child.validate()?)
            .await
            .with_context(|| {
                format!(
                    "is another server on {}? pick another address with --listen",
                    args.listen
                )
            })?;
        let base = format!("http://{entry}");
        // Warm the cache and the status charts with a short, bounded burst of requests.
        let plan = Plan {
            base: base.parse()?,
            targets: Targets::Weighted(vec![
                ("/".into(), 10.0),
                ("/about.html".into(), 4.0),
                ("/assets/style.css".into(), 8.0),
                ("/assets/logo.svg".into(), 8.0),
                ("/assets/large.bin".into(), 1.0),
            ]),
            mode: Mode::Closed {
                clients: 4,
                think_time: Duration::ZERO,
            },
            limits: Limits {
                max_requests: 500,
                duration: Duration::from_secs(5),
            },
            timeout: Duration::from_secs(5),
            http2: false,
            proxy: None,
            seed: 1,
        };
        let warm = slipstream_bench::run(plan, |_| {}).await?;
        anyhow::ensure!(
            warm.error_count() == 0,
            "the demo server answered with errors: {:?}",
            warm.errors
        );
        // Clients that prefetch as the browser agent does, against the origin: the model learns
        // the site's paths and the status page shows the budget and prefetch bytes at once.
        let agents = slipstream_bench::agent::AgentPlan {
            base: format!("http://{}", origin.addr).parse()?,
            prefetch_base: None,
            documents: vec![("/".into(), 2.0), ("/about.html".into(), 1.0)],
            doc_files: 1,
            rate_per_s: 20.0,
            rate_profile: Vec::new(),
            warmup: Duration::ZERO,
            duration: Duration::from_secs(3),
            max_in_flight: 64,
            prefetching: slipstream_bench::agent::Prefetching::Hinted,
            visit: Duration::from_secs(1),
            prefetch_priority: Default::default(),
            prefetch_cpu: None,
            arrivals: Default::default(),
            timeout: Duration::from_secs(5),
            seed: 1,
        };
        let prefetched = slipstream_bench::agent::run_agents(agents, |_, _| {}).await?;
        // A cooperative cache (Riptide, paper 004) beside the hierarchy: a gateway that is
        // also the cache manager, and two cache nodes, each a browser proxy for the site.
        let ring = coop_ring(&data_dir).await?;
        let coop_hits = warm_ring(&ring, origin.addr).await?;
        // Caught before the lines below say the demo is up: a SIGTERM sent on reading them
        // must stop it cleanly (its files removed), not kill it.
        let mut signals = crate::serve::signals()?;
        println!("slipstream demo is running (Ctrl-C to stop)");
        println!("  site:    {base}/   (child proxy -> parent proxies -> origin)");
        println!("  status:  {base}/_slipstream/status");
        println!("  metrics: {base}/_slipstream/metrics");
        for (name, p) in ["parent-a", "parent-b"].iter().zip(&parents) {
            println!("  {name}: http://{p}/_slipstream/status");
        }
        for (name, running, _) in &replicas {
            println!(
                "  {name:<9} http://{}/_slipstream/status",
                running.bound.addr
            );
        }
        println!(
            "  Web++:   http://{0}/ (three replicas of the site; the agent's latency table: \
             http://{0}/_slipstream/agent/table.html)",
            origin.addr
        );
        println!(
            "  NPS:     http://{0}/_slipstream/hints?url=/ (prefetch hints; the monitor and its \
             budget on http://{0}/_slipstream/status and /_slipstream/prefetch)",
            origin.addr
        );
        println!(
            "  Riptide: a cooperative cache of {} nodes on libp2p; browser proxies {} \
             (try: curl -x http://{} http://{}/about.html -I)",
            ring.len(),
            ring.iter()
                .map(|(_, r)| format!("http://{}/", r.bound.addr))
                .collect::<Vec<_>>()
                .join(" "),
            ring[1].1.bound.addr,
            origin.addr
        );
        for (node, running) in &ring {
            println!(
                "  coop {:<4} http://{}/_slipstream/status ({})",
                node.settings()
                    .roles
                    .iter()
                    .map(|r| format!("{r:?}").to_lowercase())
                    .collect::<Vec<_>>()
                    .join("+"),
                running.bound.addr,
                node.client().peer_id()
            );
        }
        println!("  files:   {}", shown.display());
        println!("  try:     curl -sI {base}/assets/large.bin | grep -i cache-status");
        println!(
            "warm-up: {} requests answered, {:.0} req/s; {} prefetching clients fetched {} \
             prefetches ({} hint requests, {} told to wait, {} pages said wait first)",
            warm.completed,
            warm.throughput_rps(),
            prefetched.demand.completed,
            prefetched.prefetches,
            prefetched.hint_requests,
            prefetched.hint_waits,
            prefetched.page_waits
        );
        println!("coop warm-up: {coop_hits} of its requests answered by the cooperative cache");
        while signals.next().await != slipstream_node::bootstrap::Asked::Stop {}
        Ok(())
    });
    if args.site_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&data);
    result
}

type Ring = Vec<(
    std::sync::Arc<slipstream_coop::node::CoopNode>,
    slipstream_node::bootstrap::Running,
)>;

/// Starts three coop nodes on loopback: a gateway and cache manager (the provider's key is made
/// in `data`), then two cache nodes bootstrapped from it.
async fn coop_ring(data: &Path) -> anyhow::Result<Ring> {
    let dir = data.join("coop");
    std::fs::create_dir_all(&dir)?;
    let key = dir.join("provider.key");
    let _ = std::fs::remove_file(&key);
    slipstream_coop::node::keygen(&key).context("making the demo's provider key")?;
    let mut ring: Ring = Vec::new();
    let mut boot: Vec<String> = Vec::new();
    for i in 0..3 {
        let first = i == 0;
        let table = slipstream_coop::config::Config {
            listen: ([127, 0, 0, 1], 0).into(),
            provider_key: Some(key.clone()),
            roles: if first {
                vec!["gateway".into(), "manager".into()]
            } else {
                vec!["cache".into()]
            },
            bootstrap: boot.clone(),
            capacity_bytes: 16 << 20,
            ..Default::default()
        };
        let coop = table.validate()?;
        let name = slipstream_node::config::parse_override(&format!("proxy.name=coop-{i}"))
            .map_err(anyhow::Error::msg)?;
        // A browser (forward) proxy reaches the demo's loopback origin only when told to.
        let origin =
            slipstream_node::config::parse_override("proxy.allow_destinations=[\"127.0.0.1\"]")
                .map_err(anyhow::Error::msg)?;
        let http = crate::node_cmd::http_settings(
            &slipstream_node::config::ConfigFile::default(),
            &coop,
            &[name, origin],
        )?;
        let (running, node) = crate::node_cmd::spawn(coop, http, None).await?;
        if first {
            boot = node
                .client()
                .addresses()
                .await
                .iter()
                .map(|a| a.to_string())
                .collect();
        }
        ring.push((node, running));
    }
    Ok(ring)
}

/// Sends each of the site's pages through every cache node of `ring` a few times, as a browser
/// behind it would; the number answered by the cooperative cache.
async fn warm_ring(ring: &Ring, origin: SocketAddr) -> anyhow::Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for round in 0..3 {
        for (_, running) in ring.iter().skip(1) {
            for path in ["/", "/about.html", "/assets/style.css", "/assets/logo.svg"] {
                let mut s = tokio::net::TcpStream::connect(running.bound.addr).await?;
                let req = format!(
                    "GET http://{origin}{path} HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
                );
                s.write_all(req.as_bytes()).await?;
                let mut out = Vec::new();
                s.read_to_end(&mut out).await?;
                anyhow::ensure!(
                    out.starts_with(b"HTTP/1.1 200"),
                    "the coop node answered {path} with {:?}",
                    String::from_utf8_lossy(&out[..out.len().min(60)])
                );
            }
        }
        if round == 0 {
            // The first round's misses have become replicas at the manager (its hints run
            // beside the requests): wait for them, at most a few seconds.
            let manager = ring[0].0.client().store().clone();
            for _ in 0..100 {
                if manager.stats().objects >= 4 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    }
    Ok(ring
        .iter()
        .map(|(n, _)| {
            let l = n.lookups();
            let g = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            g(&l.store) + g(&l.nearby) + g(&l.dht)
        })
        .sum())
}

/// A UDP port free on loopback now (for a gossip listener).
fn free_udp_port() -> anyhow::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .context("finding a free UDP port for gossip")?
        .port())
}
