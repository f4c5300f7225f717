//! `slipstream cachesim TRACE`: replays a trace through cache policies and sizes.
//! `slipstream cachesim clients [TRACE]`: per-client caches polluted by prefetching services
//! (paper 000 §5, Fig. 7).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use slipstream_cache::clients::{self, ClientCaches, Setup};
use slipstream_cache::{sim, Config, Policy};
use slipstream_lab::chart;
use slipstream_workload::clients::{ClientMix, ClientTrace, ServiceBy};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub study: Option<Study>,
    /// Trace file: Common Log Format or TSV (time_s, key, size_bytes).
    #[arg(required = true)]
    pub trace: Option<PathBuf>,
    /// Policies, comma-separated: adaptive, total, small, lru, sieve, LEVEL+ALGORITHM.
    #[arg(long, value_delimiter = ',', default_value = "total,small,adaptive")]
    pub policy: Vec<String>,
    /// Cache sizes, comma-separated, e.g. 8MiB,16MiB,64MiB.
    #[arg(long, value_delimiter = ',', value_parser = slipstream_units::bytes, default_value = "64MiB")]
    pub size: Vec<u64>,
    /// MAX_FILE_SIZE for every run [default: a quarter of each cache size, as in paper 002].
    #[arg(long, value_parser = slipstream_units::bytes)]
    pub max_file_size: Option<u64>,
    /// Free-list flush period in accesses (0 = no free list).
    #[arg(long, default_value_t = 100)]
    pub flush_every: u64,
    /// Write a chart of byte hit ratio against cache size (SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Studies beyond a plain replay.
#[derive(Debug, clap::Subcommand)]
pub enum Study {
    /// Paper 000 Fig. 7: every client has its own cache; a fraction of the services prefetch K
    /// bytes of dummy data per demand byte after each demand request; prints the demand hit
    /// ratio of the services that do not prefetch, per cache size and K.
    Clients(ClientsArgs),
}

#[derive(Debug, clap::Args)]
pub struct ClientsArgs {
    /// Trace, plain or gzip (`.gz`): Common/Combined Log Format (client = the host field;
    /// service = the host of an absolute target or a vhost_combined virtual host), or TSV of
    /// client, service, url, size_bytes. Without one, a synthetic trace is generated.
    pub trace: Option<PathBuf>,
    /// Per-client cache sizes, comma-separated.
    #[arg(long, alias = "size", value_delimiter = ',', value_parser = slipstream_units::bytes, default_value = "1MiB,10MiB,30MiB")]
    pub sizes: Vec<u64>,
    /// Prefetch bytes per demand byte (the paper's x axis), comma-separated.
    #[arg(long = "k", allow_negative_numbers = true, value_delimiter = ',', value_parser = prefetch_ratio, default_value = "0,1,2,5,10,20")]
    pub k: Vec<f64>,
    /// Fraction of the services that prefetch (chosen by a seeded hash of their names).
    #[arg(long, value_parser = fraction, default_value_t = 0.2)]
    pub prefetching: f64,
    /// Seed of the choice of prefetching services.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replacement policy of every client cache (a browser's is LRU).
    #[arg(long, default_value = "lru")]
    pub policy: String,
    /// For a log whose targets are bare paths: one service (`host`) or one per first path
    /// segment (`path`).
    #[arg(long, value_enum, default_value_t = ServiceFrom::Host)]
    pub service_by: ServiceFrom,
    /// Synthetic trace: clients.
    #[arg(long, default_value_t = ClientMix::standard().clients)]
    pub clients: u32,
    /// Synthetic trace: services.
    #[arg(long, default_value_t = ClientMix::standard().services)]
    pub services: u32,
    /// Synthetic trace: requests.
    #[arg(long, default_value_t = ClientMix::standard().requests)]
    pub requests: usize,
    /// Synthetic trace: seed.
    #[arg(long, default_value_t = ClientMix::standard().seed)]
    pub trace_seed: u64,
    /// Write the trace used as TSV (client, service, url, size_bytes).
    #[arg(long)]
    pub write_trace: Option<PathBuf>,
    /// Simulations run at once [default: the available cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write a chart of the non-prefetching services' hit ratio against K (SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceFrom {
    /// The target's host or the virtual host; else the log is one service.
    Host,
    /// The first path segment of a bare path stands in for the service.
    Path,
}

fn prefetch_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(k) if k.is_finite() && k >= 0.0 => Ok(k),
        _ => Err(format!(
            "`{s}` is not a number of prefetch bytes per demand byte (≥ 0)"
        )),
    }
}

fn fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}` is not a fraction between 0 and 1")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Study::Clients(c)) = args.study {
        return run_clients(c);
    }
    let Some(trace_path) = args.trace else {
        anyhow::bail!("give a trace file, or a study such as `cachesim clients`");
    };
    let policies: Vec<Policy> = args
        .policy
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let trace = slipstream_workload::trace::read_path_lenient(&trace_path)?;
    if trace.malformed > 0 {
        eprintln!(
            "warning: passed over {} malformed line(s) of {}; the first: {}",
            trace.malformed,
            trace_path.display(),
            trace.malformed_examples.join("; ")
        );
    }
    anyhow::ensure!(
        !trace.requests.is_empty(),
        "{}: no cacheable requests in the trace",
        trace_path.display()
    );
    eprintln!(
        "{}: {} requests ({} records skipped as not cacheable)",
        trace_path.display(),
        trace.requests.len(),
        trace.skipped
    );
    let start = std::time::Instant::now();
    let mut outcomes = Vec::new();
    for &size in &args.size {
        for &policy in &policies {
            let mut config = Config::new(size, policy);
            config.max_file_size = args.max_file_size;
            config.free_list_flush_every = args.flush_every;
            let out = sim::replay(
                config,
                trace
                    .requests
                    .iter()
                    .map(|r| (r.key.as_str(), r.size_bytes)),
            );
            outcomes.push(out);
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{:<16} {:>12} {:>10} {:>12} {:>10} {:>10}",
        "policy", "cache", "hit ratio", "incomplete", "byte hit", "evictions"
    );
    for o in &outcomes {
        println!(
            "{:<16} {:>12} {:>9.1}% {:>11.1}% {:>9.1}% {:>10}",
            o.config.policy.to_string(),
            slipstream_units::human_bytes(o.config.capacity_bytes),
            100.0 * o.hit_ratio(),
            100.0 * (o.hit_ratio() - o.complete_hit_ratio()),
            100.0 * o.byte_hit_ratio(),
            o.stats.evictions
        );
    }
    let replayed = trace.requests.len() as f64 * outcomes.len() as f64;
    eprintln!(
        "replayed {replayed:.0} requests in {:.2} s ({:.2} M requests/s)",
        elapsed.as_secs_f64(),
        replayed / elapsed.as_secs_f64() / 1e6
    );
    if let Some(path) = &args.chart {
        let series: Vec<chart::Series> = policies
            .iter()
            .map(|p| chart::Series {
                name: p.to_string(),
                points: outcomes
                    .iter()
                    .filter(|o| o.config.policy == *p)
                    .map(|o| {
                        (
                            o.config.capacity_bytes as f64 / (1 << 20) as f64,
                            100.0 * o.byte_hit_ratio(),
                        )
                    })
                    .collect(),
            })
            .collect();
        let axes = chart::Axes {
            title: format!("Byte hit ratio vs cache size: {}", trace_path.display()),
            x_label: "cache size (MiB)".into(),
            y_label: "byte hit ratio (%)".into(),
            log_x: args.size.len() > 2,
        };
        chart::line_chart(path, &axes, &series)?;
        eprintln!("chart: {}", path.display());
    }
    if let Some(path) = &args.json {
        let rows: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|o| {
                serde_json::json!({
                    "policy": o.config.policy.to_string(),
                    "capacity_bytes": o.config.capacity_bytes,
                    "max_file_size": o.config.max_file_size(),
                    "requests": o.requests,
                    "bytes_requested": o.bytes_requested,
                    "hit_ratio": o.hit_ratio(),
                    "complete_hit_ratio": o.complete_hit_ratio(),
                    "byte_hit_ratio": o.byte_hit_ratio(),
                    "evictions": o.stats.evictions,
                    "admission_rejects": o.stats.admission_rejects,
                })
            })
            .collect();
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `slipstream cachesim clients`: loads or generates the trace, runs every (size, K) setup and
/// reports.
fn run_clients(args: ClientsArgs) -> anyhow::Result<()> {
    let policy: Policy = args.policy.parse()?;
    anyhow::ensure!(!args.sizes.is_empty(), "--sizes: give at least one size");
    anyhow::ensure!(!args.k.is_empty(), "--k: give at least one value");
    let (trace, source) = match &args.trace {
        Some(path) => (
            read_client_trace(path, args.service_by)?,
            path.display().to_string(),
        ),
        None => {
            let mix = ClientMix {
                clients: args.clients,
                services: args.services,
                requests: args.requests,
                seed: args.trace_seed,
                ..ClientMix::standard()
            };
            let trace = slipstream_workload::clients::generate(&mix)
                .context("cannot generate the synthetic trace")?;
            let source = format!(
                "synthetic: {} clients, {} services, {} requests, seed {}",
                mix.clients, mix.services, mix.requests, mix.seed
            );
            (trace, source)
        }
    };
    anyhow::ensure!(
        !trace.requests.is_empty(),
        "{source}: no cacheable requests in the trace"
    );
    if let Some(path) = &args.write_trace {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        slipstream_workload::clients::write_tsv(&mut w, &trace)
            .and_then(|()| std::io::Write::flush(&mut w))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let prefetching = clients::choose_prefetching(&trace.services, args.prefetching, args.seed);
    let requests: Vec<clients::Request> = trace
        .requests
        .iter()
        .map(|r| clients::Request {
            client: r.client,
            service: r.service,
            object: r.object,
            size_bytes: r.size_bytes,
        })
        .collect();
    let share = PrefetchShare::of(&trace, &prefetching);
    eprintln!(
        "{source}: {} requests, {} clients, {} services, {} objects, {} ({} per request)",
        trace.requests.len(),
        trace.clients.len(),
        trace.services.len(),
        trace.urls.len(),
        slipstream_units::human_bytes(trace.bytes()),
        slipstream_units::human_bytes(trace.bytes() / trace.requests.len() as u64),
    );
    eprintln!(
        "prefetching: {} of {} services ({:.1}% of requests, {:.1}% of bytes)",
        share.services,
        trace.services.len(),
        100.0 * share.requests,
        100.0 * share.bytes
    );
    if share.services == 0 && args.prefetching > 0.0 {
        eprintln!(
            "warning: no service prefetches ({} of {} services rounds to none), so K changes \
             nothing; a log of one site can split by path with --service-by path",
            args.prefetching,
            trace.services.len()
        );
    }
    let setups: Vec<Setup> = args
        .sizes
        .iter()
        .flat_map(|&size| {
            args.k.iter().map(move |&k| Setup {
                policy,
                ..Setup::lru(size, k)
            })
        })
        .collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, setups.len());
    let started = std::time::Instant::now();
    let outcomes = run_setups(&setups, &prefetching, &requests, threads)?;
    eprintln!(
        "{} runs of {} requests in {:.1} s on {threads} thread(s)",
        setups.len(),
        requests.len(),
        started.elapsed().as_secs_f64()
    );
    print_clients_table(&outcomes);
    if let Some(path) = &args.chart {
        let series: Vec<chart::Series> = args
            .sizes
            .iter()
            .map(|&size| chart::Series {
                name: format!("{} per client", slipstream_units::human_bytes(size)),
                points: outcomes
                    .iter()
                    .filter(|o| o.setup.capacity_bytes == size)
                    .map(|o| {
                        (
                            o.setup.prefetch_per_demand,
                            100.0 * o.non_prefetching.hit_ratio(),
                        )
                    })
                    .collect(),
            })
            .collect();
        let axes = chart::Axes {
            title: format!(
                "Demand hit ratio of non-prefetching services ({:.0}% of services prefetch)",
                100.0 * args.prefetching
            ),
            x_label: "prefetch bytes per demand byte (K)".into(),
            y_label: "demand hit ratio (%)".into(),
            log_x: false,
        };
        chart::line_chart(path, &axes, &series)?;
        eprintln!("chart: {}", path.display());
    }
    if let Some(path) = &args.json {
        let rows: Vec<serde_json::Value> = outcomes.iter().map(outcome_json).collect();
        let doc = serde_json::json!({
            "trace": {
                "source": source,
                "requests": trace.requests.len(),
                "clients": trace.clients.len(),
                "services": trace.services.len(),
                "objects": trace.urls.len(),
                "bytes": trace.bytes(),
                "skipped": trace.skipped,
                "malformed": trace.malformed,
            },
            "policy": policy.to_string(),
            "prefetching": {
                "fraction": args.prefetching,
                "seed": args.seed,
                "services": share.services,
                "request_share": share.requests,
                "byte_share": share.bytes,
            },
            "results": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("results: {}", path.display());
    }
    Ok(())
}

/// Reads a client trace (gunzipped if the name ends in `.gz`), warning about malformed lines.
fn read_client_trace(path: &Path, service_by: ServiceFrom) -> anyhow::Result<ClientTrace> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    let service_by = match service_by {
        ServiceFrom::Host => ServiceBy::Host,
        ServiceFrom::Path => ServiceBy::PathSegment,
    };
    let trace =
        slipstream_workload::clients::read(reader, &path.display().to_string(), service_by)?;
    if trace.malformed > 0 {
        eprintln!(
            "warning: passed over {} malformed line(s) of {}; the first: {}",
            trace.malformed,
            path.display(),
            trace.malformed_examples.join("; ")
        );
    }
    Ok(trace)
}

/// What part of the trace goes to prefetching services.
struct PrefetchShare {
    services: usize,
    requests: f64,
    bytes: f64,
}

impl PrefetchShare {
    fn of(trace: &ClientTrace, prefetching: &[bool]) -> PrefetchShare {
        let to = |r: &&slipstream_workload::clients::ClientRequest| prefetching[r.service as usize];
        let (n, bytes) = trace
            .requests
            .iter()
            .filter(to)
            .fold((0u64, 0u64), |(n, b), r| (n + 1, b + r.size_bytes));
        PrefetchShare {
            services: prefetching.iter().filter(|p| **p).count(),
            requests: n as f64 / trace.requests.len().max(1) as f64,
            bytes: bytes as f64 / trace.bytes().max(1) as f64,
        }
    }
}

/// Runs every setup over the trace on `threads` threads, with a progress bar on a terminal.
fn run_setups(
    setups: &[Setup],
    prefetching: &[bool],
    requests: &[clients::Request],
    threads: usize,
) -> anyhow::Result<Vec<clients::Outcome>> {
    const STEP: usize = 1 << 14;
    let bar = indicatif::ProgressBar::new((setups.len() * requests.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {percent}% of {len} simulated requests ({eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<clients::Outcome>>> = Mutex::new(vec![None; setups.len()]);
    let worker = || -> anyhow::Result<()> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(setup) = setups.get(i) else {
                return Ok(());
            };
            let mut caches = ClientCaches::new(*setup, prefetching.to_vec())?;
            for chunk in requests.chunks(STEP) {
                for req in chunk {
                    caches.demand(req)?;
                }
                bar.inc(chunk.len() as u64);
            }
            let outcome = caches.outcome();
            results
                .lock()
                .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?[i] = Some(outcome);
        }
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<()>>>()
    })?;
    bar.finish_and_clear();
    let results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    results
        .into_iter()
        .map(|o| o.ok_or_else(|| anyhow::anyhow!("a simulation did not finish")))
        .collect()
}

fn print_clients_table(outcomes: &[clients::Outcome]) {
    println!(
        "{:>10} {:>6} {:>13} {:>10} {:>10} {:>13} {:>10} {:>16}",
        "cache",
        "K",
        "non-pf hit",
        "change",
        "non-pf BHR",
        "prefetch hit",
        "all hit",
        "prefetch stored"
    );
    for o in outcomes {
        let base = outcomes.iter().find(|b| {
            b.setup.capacity_bytes == o.setup.capacity_bytes && b.setup.prefetch_per_demand == 0.0
        });
        let change = base.map_or_else(
            || "-".to_owned(),
            |b| {
                format!(
                    "{:+.2}",
                    100.0 * (o.non_prefetching.hit_ratio() - b.non_prefetching.hit_ratio())
                )
            },
        );
        println!(
            "{:>10} {:>6} {:>12.2}% {:>10} {:>9.2}% {:>12.2}% {:>9.2}% {:>16}",
            slipstream_units::human_bytes(o.setup.capacity_bytes),
            o.setup.prefetch_per_demand,
            100.0 * o.non_prefetching.hit_ratio(),
            change,
            100.0 * o.non_prefetching.byte_hit_ratio(),
            100.0 * o.prefetching.hit_ratio(),
            100.0 * o.all().hit_ratio(),
            slipstream_units::human_bytes(o.prefetch_bytes_stored),
        );
    }
}

fn outcome_json(o: &clients::Outcome) -> serde_json::Value {
    let tally = |t: &clients::Tally| {
        serde_json::json!({
            "requests": t.requests,
            "hits": t.hits,
            "bytes_requested": t.bytes_requested,
            "bytes_hit": t.bytes_hit,
            "hit_ratio": t.hit_ratio(),
            "byte_hit_ratio": t.byte_hit_ratio(),
        })
    };
    serde_json::json!({
        "capacity_bytes": o.setup.capacity_bytes,
        "k": o.setup.prefetch_per_demand,
        "non_prefetching": tally(&o.non_prefetching),
        "prefetching": tally(&o.prefetching),
        "all": tally(&o.all()),
        "prefetch_bytes": o.prefetch_bytes,
        "prefetch_objects": o.prefetch_objects,
        "prefetch_bytes_stored": o.prefetch_bytes_stored,
        "clients": o.clients,
        "evictions": o.evictions,
    })
}
