//! `slipstream experiment webpp`: paper 001's live experiment (§6, Figs. 11–14) on loopback.
//! Three replica servers (real hyper HTTP servers) and three client sites, each pair joined by a
//! user-space relay that emulates the WAN path; each replica's service delay follows a seeded
//! schedule over a compressed day. Every (site, size) lane runs the same request sequence under
//! five policies, the policies of one request slot side by side, so all see the same load:
//! `single` (always us-east), `refresh` (Web++), `p2c-peak-ewma`, `hedged` (Refresh plus a
//! second request at its 95th percentile) and `optimal` (all replicas, first answer wins).
//!
//! - [`world`]: sites, replicas, links and the load schedule.
//! - [`net`]: the servers, the relays and one HTTP exchange.
//! - [`fetch`]: one logical request driven by the `Select` trait.
//! - [`report`]: statistics, JSON, CSV, markdown and charts.

mod fetch;
mod net;
mod report;
mod world;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use slipstream_select::{config, FailOver, Hedged, PeakEwma, Refresh, Select};

use fetch::{ProbeCount, Selector, Target};
use world::{World, FILES_PER_SIZE, REPLICAS, SINGLE, SITES, SIZES};

/// The policies, in the order of every table.
pub const POLICIES: [&str; 5] = ["single", "refresh", "p2c-peak-ewma", "hedged", "optimal"];

#[derive(Debug, clap::Args)]
pub struct Webpp {
    /// Output directory for results.json, results.md, requests.csv and the SVG charts.
    #[arg(long, default_value = "docs/experiments/001")]
    pub out: PathBuf,
    /// Seed of the load schedule, the link jitter, the server noise and the request sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Wall-clock seconds of the compressed day.
    #[arg(long, default_value_t = 360.0, conflicts_with = "quick")]
    pub day_secs: f64,
    /// Multiplies every latency (RTTs, jitter, service delays, time-outs) and divides every
    /// bandwidth.
    #[arg(long, default_value_t = 1.0, conflicts_with = "quick")]
    pub scale: f64,
    /// A run of seconds for tests: a 4-second day at a tenth of the latencies.
    #[arg(long)]
    pub quick: bool,
    /// Refresh's TTL in minutes of the compressed day (default: the library's, 001 Fig. 10,
    /// §6.1: 41).
    #[arg(long)]
    pub ttl_minutes: Option<f64>,
    /// Refresh's first probe interval F of a failed replica, in hours of the compressed day
    /// (default: the library's, 001 Fig. 10, §6.1: 28.8, a mean time to repair of Internet
    /// servers).
    #[arg(long)]
    pub f_hours: Option<f64>,
    /// The hedged policy's percentile of its endpoint's recent latencies.
    #[arg(long, default_value_t = 95.0)]
    pub hedge_percentile: f64,
    /// A label for the results (run.sh passes the commit).
    #[arg(long, default_value = "")]
    pub label: String,
}

/// One logical request, as `requests.csv` records it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Record {
    pub policy: &'static str,
    pub site: &'static str,
    pub size: u64,
    pub slot: u32,
    /// Day hour (EST) at the start of the slot.
    pub hour: f64,
    /// Response time in ms; empty if the request failed.
    pub response_ms: Option<f64>,
    pub served_by: Option<&'static str>,
    pub exchanges: u32,
    pub failovers: u32,
    pub hedges: u32,
    pub timeouts: u32,
}

/// A lane's policy: its selector, whether it fans out, and its probe count.
struct Lane {
    policy: &'static str,
    selector: Selector,
    fan_out: bool,
    probes: Arc<ProbeCount>,
}

/// The run's parameters after `--quick`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Params {
    pub seed: u64,
    pub day_secs: f64,
    pub scale: f64,
    pub hedge_percentile: f64,
    /// Refresh's TTL (compressed-day minutes) and F (compressed-day hours).
    pub ttl_minutes: f64,
    pub f_hours: f64,
    /// Refresh's TTL and F after compression, in wall-clock seconds.
    pub refresh_ttl_s: f64,
    pub refresh_f_s: f64,
    pub caller_timeout_s: f64,
    pub label: String,
}

pub fn run(args: Webpp) -> anyhow::Result<()> {
    let (day_secs, scale) = if args.quick {
        (4.0, 0.1)
    } else {
        (args.day_secs, args.scale)
    };
    anyhow::ensure!(
        day_secs > 0.0 && day_secs.is_finite() && scale > 0.0 && scale.is_finite(),
        "--day-secs and --scale must be positive"
    );
    let defaults = config::Refresh::default();
    let ttl_minutes = args
        .ttl_minutes
        .unwrap_or(defaults.ttl.as_secs_f64() / 60.0);
    let f_hours = args
        .f_hours
        .unwrap_or(defaults.probe_interval.as_secs_f64() / 3600.0);
    anyhow::ensure!(
        ttl_minutes > 0.0 && ttl_minutes.is_finite() && f_hours > 0.0 && f_hours.is_finite(),
        "--ttl-minutes and --f-hours must be positive"
    );
    let (refresh, caller_timeout) = refresh_config(day_secs, scale, ttl_minutes, f_hours);
    // Every configuration is checked before anything is created or started.
    refresh
        .check()
        .context("the compressed Refresh configuration")?;
    lanes(0, &refresh, args.hedge_percentile, caller_timeout)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let params = Params {
        seed: args.seed,
        day_secs,
        scale,
        hedge_percentile: args.hedge_percentile,
        ttl_minutes,
        f_hours,
        refresh_ttl_s: refresh.ttl.as_secs_f64(),
        refresh_f_s: refresh.probe_interval.as_secs_f64(),
        caller_timeout_s: caller_timeout.as_secs_f64(),
        label: args.label.clone(),
    };
    let (world, records, probes, served) = runtime
        .block_on(async { experiment(day_secs, scale, &args, &refresh, caller_timeout).await })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    report::write(&args.out, &world, &params, &records, &probes, &served)
}

/// Refresh's configuration for a day of `day_secs` at `scale`, and the caller's time-out: the
/// library's defaults (001 Fig. 10), with the TTL (`ttl_minutes`) and F (`f_hours`, its bound
/// scaled with it) compressed as parts of the day, and the time-outs, which are latencies,
/// multiplied by `scale`.
fn refresh_config(
    day_secs: f64,
    scale: f64,
    ttl_minutes: f64,
    f_hours: f64,
) -> (config::Refresh, Duration) {
    let d = config::Refresh::default();
    let compress = day_secs / (24.0 * 3600.0);
    let f = Duration::from_secs_f64(f_hours * 3600.0);
    let f_ratio = f.as_secs_f64() / d.probe_interval.as_secs_f64();
    let refresh = config::Refresh {
        ttl: Duration::from_secs_f64(ttl_minutes * 60.0 * compress),
        probe_interval: f.mul_f64(compress),
        max_probe_interval: d.max_probe_interval.mul_f64(f_ratio * compress),
        default_timeout: d.default_timeout.mul_f64(scale),
        min_timeout: d.min_timeout.mul_f64(scale),
        max_timeout: d.max_timeout.mul_f64(scale),
        ..d
    };
    // The caller's own time-out, for the policies that have none: Refresh's first one.
    let caller_timeout = refresh.default_timeout;
    (refresh, caller_timeout)
}

/// Probe counts per (policy, size), each by day hour: `(policy, size, refresh, recover)`.
pub type Probes = Vec<(&'static str, u64, [u64; 24], [u64; 24])>;

async fn experiment(
    day_secs: f64,
    scale: f64,
    args: &Webpp,
    refresh: &config::Refresh,
    caller_timeout: Duration,
) -> anyhow::Result<(Arc<World>, Vec<Record>, Probes, Vec<(u64, u64)>)> {
    let (seed, hedge_percentile) = (args.seed, args.hedge_percentile);
    // The servers and relays start before the clock does.
    let placeholder = World::new(
        seed,
        Duration::from_secs_f64(day_secs),
        scale,
        Instant::now(),
    );
    let setup = Instant::now() + Duration::from_millis(200);
    let world = Arc::new(World {
        start: setup,
        ..placeholder
    });
    let served: Vec<Arc<net::Served>> = (0..REPLICAS.len()).map(|_| Arc::default()).collect();
    let mut servers = Vec::new();
    for (r, s) in served.iter().enumerate() {
        servers.push(net::server(r, world.clone(), s.clone()).await?);
    }
    let mut links = Vec::new();
    for site in 0..SITES.len() {
        let mut row = Vec::new();
        for (r, &upstream) in servers.iter().enumerate() {
            row.push(net::relay(site, r, upstream, world.clone()).await?);
        }
        links.push(row);
    }
    tokio::time::sleep_until(world.start.into()).await;

    let mut tasks = Vec::new();
    for site in 0..SITES.len() {
        for (k, &size) in SIZES.iter().enumerate() {
            let lane_seed = seed
                .wrapping_mul(1_000)
                .wrapping_add((site * SIZES.len() + k) as u64);
            let lanes = lanes(lane_seed, refresh, hedge_percentile, caller_timeout)?;
            let world = world.clone();
            let links = links[site].clone();
            tasks.push(tokio::spawn(async move {
                lane(world, site, size, links, lanes, lane_seed, caller_timeout).await
            }));
        }
    }
    let mut records = Vec::new();
    let mut probes: Probes = Vec::new();
    for t in tasks {
        let (r, p) = t.await.context("a client lane panicked")??;
        records.extend(r);
        probes.extend(p);
    }
    let served = served
        .iter()
        .map(|s| {
            (
                s.get.load(std::sync::atomic::Ordering::Relaxed),
                s.head.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
        .collect();
    Ok((world, records, probes, served))
}

/// The five policies of one lane, freshly built.
fn lanes(
    seed: u64,
    refresh: &config::Refresh,
    hedge_percentile: f64,
    caller_timeout: Duration,
) -> anyhow::Result<Vec<Lane>> {
    let now = Instant::now();
    let all: Vec<String> = REPLICAS.iter().map(|s| s.to_string()).collect();
    let boxed = |s: Box<dyn Select>| Arc::new(Mutex::new(s));
    let hedged = Hedged::new(
        Refresh::new(&all, refresh.clone(), now)?,
        config::Hedged {
            percentile: hedge_percentile,
            ..config::Hedged::default()
        },
        now,
    )?;
    let selectors: [(Box<dyn Select>, bool); 5] = [
        (
            Box::new(FailOver::new(
                &[REPLICAS[SINGLE].to_string()],
                caller_timeout,
            )),
            false,
        ),
        (Box::new(Refresh::new(&all, refresh.clone(), now)?), false),
        (
            Box::new(PeakEwma::new(&all, config::PeakEwma::default(), seed, now)?),
            false,
        ),
        (Box::new(hedged), false),
        (Box::new(FailOver::new(&all, caller_timeout)), true),
    ];
    Ok(selectors
        .into_iter()
        .zip(POLICIES)
        .map(|((s, fan_out), policy)| Lane {
            policy,
            selector: boxed(s),
            fan_out,
            probes: Arc::default(),
        })
        .collect())
}

/// One client site fetching one size: slot after slot until the day ends, the five policies
/// of a slot at once, each on the slot's file. A closed loop, as 001 §6.1: "Each client
/// generated a new request only after receiving a response to a previously sent request".
async fn lane(
    world: Arc<World>,
    site: usize,
    size: u64,
    links: Vec<std::net::SocketAddr>,
    lanes: Vec<Lane>,
    seed: u64,
    caller_timeout: Duration,
) -> anyhow::Result<(Vec<Record>, Probes)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records = Vec::new();
    let mut slot = 0u32;
    loop {
        let hour = world.hour(Instant::now());
        if hour >= 24.0 {
            break;
        }
        let target = Target {
            links: links.clone(),
            path: format!("/{size}/{}", rng.gen_range(0..FILES_PER_SIZE)),
            bytes: size,
            caller_timeout,
            cap: caller_timeout * 3,
        };
        let runs: Vec<_> = lanes
            .iter()
            .map(|l| {
                let (selector, probes, target, world) = (
                    l.selector.clone(),
                    l.probes.clone(),
                    target.clone(),
                    world.clone(),
                );
                let fan_out = l.fan_out;
                tokio::spawn(async move {
                    let fetched = fetch::fetch(&selector, &target, fan_out).await;
                    let hour = world.hour(Instant::now());
                    fetch::send_probes(&selector, &target, &probes, hour);
                    fetched
                })
            })
            .collect();
        for (l, run) in lanes.iter().zip(runs) {
            let f = run.await.context("a fetch panicked")?;
            records.push(Record {
                policy: l.policy,
                site: SITES[site],
                size,
                slot,
                hour,
                response_ms: f.response.map(|d| d.as_secs_f64() * 1e3),
                served_by: f.served_by.map(|r| REPLICAS[r]),
                exchanges: f.exchanges,
                failovers: f.failovers,
                hedges: f.hedges,
                timeouts: f.timeouts,
            });
        }
        slot += 1;
    }
    let probes = lanes
        .iter()
        .map(|l| {
            let p = &l.probes;
            (
                l.policy,
                size,
                p.refresh
                    .each_ref()
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed)),
                p.recover
                    .each_ref()
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed)),
            )
        })
        .collect();
    Ok((records, probes))
}
