//! `slipstream bench`: the load generator (paper 002's WebStone role).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use slipstream_bench::agent::{AgentPlan, Arrivals, PrefetchPriority, Prefetching};
use slipstream_bench::{Limits, Mode, Plan, Targets};

fn parse_prefetching(s: &str) -> Result<Prefetching, String> {
    match s {
        "off" => Ok(Prefetching::Off),
        "hinted" => Ok(Prefetching::Hinted),
        k => k
            .parse::<usize>()
            .ok()
            .filter(|k| *k >= 1)
            .map(Prefetching::Fixed)
            .ok_or_else(|| format!("`{s}`: expected off, hinted or a number of lists (1 or more)")),
    }
}

fn parse_arrivals(s: &str) -> Result<Arrivals, String> {
    match s {
        "constant" => Ok(Arrivals::Constant),
        "poisson" => Ok(Arrivals::Poisson),
        _ => Err(format!("`{s}`: expected constant or poisson")),
    }
}

fn parse_priority(s: &str) -> Result<PrefetchPriority, String> {
    match s {
        "idle" => Ok(PrefetchPriority::Idle),
        "normal" => Ok(PrefetchPriority::Normal),
        _ => Err(format!("`{s}`: expected idle or normal")),
    }
}

/// A `--rate-profile` file: one number a line (blank lines and `#` comments passed over).
fn read_profile(path: &std::path::Path) -> anyhow::Result<Vec<f64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the rate profile {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let v: f64 = line.parse().map_err(|_| {
            anyhow::anyhow!(
                "{}:{}: `{line}` is not a number (a rate profile has one relative rate a line)",
                path.display(),
                i + 1
            )
        })?;
        out.push(v);
    }
    if out.is_empty() {
        anyhow::bail!("the rate profile {} has no rates", path.display());
    }
    Ok(out)
}

/// `--agents`: clients that prefetch, at `rate` documents a second.
fn run_agents(
    args: &Args,
    base: http::Uri,
    targets: Targets,
    mode: Prefetching,
    rate: f64,
) -> anyhow::Result<()> {
    let Targets::Weighted(documents) = targets else {
        anyhow::bail!("--agents draws documents from --urls (or the URL's path), not a --trace");
    };
    let prefetch_base = match &args.prefetch_base {
        Some(u) => Some(u.parse().with_context(|| format!("`{u}` is not a URL"))?),
        None => None,
    };
    let rate_profile = match &args.rate_profile {
        Some(path) => read_profile(path)?,
        None => Vec::new(),
    };
    let plan = AgentPlan {
        base,
        prefetch_base,
        documents,
        doc_files: args.doc_files,
        rate_per_s: rate,
        rate_profile,
        warmup: args.warmup,
        duration: args.duration,
        max_in_flight: args.max_in_flight,
        prefetching: mode,
        visit: args.visit,
        timeout: args.timeout,
        seed: args.seed,
        prefetch_priority: args.prefetch_priority,
        prefetch_cpu: args.prefetch_cpu,
        arrivals: args.arrivals,
    };
    let quiet = args.quiet;
    let report = crate::serve::runtime(0)?.block_on(slipstream_bench::agent::run_agents(
        plan,
        move |elapsed, done| {
            if !quiet {
                eprint!("\r{:>6.1}s  {:>10} documents ", elapsed.as_secs_f64(), done);
                let _ = std::io::stderr().flush();
            }
        },
    ))?;
    if !quiet {
        eprintln!();
    }
    println!("demand:\n{}", report.demand);
    println!(
        "prefetch: {} responses, {:.1} kB/s ({:.1} kB/s demand), {} errors, {} refused (503); {} hint requests, {} told to wait, {} pages said wait first, {} hints already cached",
        report.prefetches,
        report.prefetch_bytes_per_s() / 1e3,
        report.demand_bytes_per_s() / 1e3,
        report.prefetch_errors,
        report.prefetch_refused,
        report.hint_requests,
        report.hint_waits,
        report.page_waits,
        report.cache_skips
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.to_json())?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server to load, e.g. http://127.0.0.1:8080 (a path here is the single target when no
    /// --urls or --trace is given).
    pub url: String,
    /// URL list: lines of `WEIGHT PATH` (or just `PATH`); paths are drawn by weight.
    #[arg(long, conflicts_with = "trace")]
    pub urls: Option<PathBuf>,
    /// Trace (Common Log Format or TSV) replayed in order.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Closed loop: this many clients, each with one keep-alive connection.
    #[arg(long, default_value_t = 16, conflicts_with = "rate")]
    pub clients: usize,
    /// Closed loop: pause between a response and the client's next request, e.g. 10ms.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "0s")]
    pub think: Duration,
    /// Open loop: requests per second, sent whether or not earlier ones finished.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: requests in flight at most; arrivals beyond are counted as "overload".
    #[arg(long, default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Stop after this many requests.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// Stop after this long, e.g. 30s.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "10s")]
    pub duration: Duration,
    /// Per-request timeout.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "10s")]
    pub timeout: Duration,
    /// Use HTTP/2 over cleartext (prior knowledge).
    #[arg(long)]
    pub h2: bool,
    /// Send the requests through this forward proxy (e.g. a `slipstream node`'s browser
    /// proxy, `http://127.0.0.1:3128`), in absolute form, for the server in URL
    #[arg(long, value_name = "URL")]
    pub proxy: Option<http::Uri>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seed for the weighted choice of paths.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run clients that prefetch as the browser agent does (paper 000), one per document
    /// arriving at --rate: `off` (fetch the document only), `hinted` (prefetch what
    /// /_slipstream/hints grants, following its turns and waits) or a number K (K hint lists
    /// after every document, whatever the load: No-Avoidance with pfrate K).
    #[arg(long, value_name = "off|hinted|K", value_parser = parse_prefetching, requires = "rate")]
    pub agents: Option<Prefetching>,
    /// Files in an agent's document: the page drawn from --urls and the ones after it in the
    /// list (its embedded objects); the demand response time is the whole document's.
    #[arg(long, default_value_t = 1, requires = "agents")]
    pub doc_files: usize,
    /// Where the agents' prefetches go [default: where the hint server says, its prefetch
    /// listener, else the server under test].
    #[arg(long, requires = "agents")]
    pub prefetch_base: Option<String>,
    /// A bursty load for the agents: a file of one number a line, the relative arrival rate
    /// of each second (repeated if the run is longer), scaled so that the mean is --rate.
    #[arg(long, requires = "agents")]
    pub rate_profile: Option<PathBuf>,
    /// Agents arrive at the mean rate for this long before --duration, unrecorded: the server
    /// and the connection pool reach their steady state in the same process as the measured
    /// run.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "0s", requires = "agents")]
    pub warmup: Duration,
    /// The CPU priority of the agents' prefetching in this process: `normal` (on the demand
    /// clients' threads and connections) or `idle` (a thread of its own at SCHED_IDLE, with
    /// connections of its own, so that one simulated client's prefetching does not delay
    /// another's document, as on separate devices; but a saturated generator then holds
    /// back the prefetching during a burst, as separate devices would not).
    #[arg(long, value_name = "idle|normal", value_parser = parse_priority, default_value = "normal", requires = "agents")]
    pub prefetch_priority: PrefetchPriority,
    /// Pin the idle prefetching's thread to this CPU (Linux), e.g. off the core the demand
    /// clients run on, where its work would delay them on some machines and be counted as
    /// the server's interference.
    #[arg(long, value_name = "CPU", requires = "agents")]
    pub prefetch_cpu: Option<usize>,
    /// How the agents' arrivals are spaced: `constant` (one every 1/--rate seconds, as
    /// httperf) or `poisson` (independent exponential gaps of that mean, seeded by --seed).
    #[arg(long, value_name = "constant|poisson", value_parser = parse_arrivals, default_value = "constant", requires = "agents")]
    pub arrivals: Arrivals,
    /// How long an agent client stays prefetching after its document arrived.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "2s")]
    pub visit: Duration,
    /// Print no progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let uri: http::Uri = args
        .url
        .parse()
        .with_context(|| format!("`{}` is not a URL", args.url))?;
    let base: http::Uri = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority()
            .context("the URL needs a host, e.g. http://127.0.0.1:8080")?
    )
    .parse()?;
    let targets = if let Some(path) = &args.urls {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Targets::Weighted(slipstream_bench::parse_url_list(
            &text,
            &path.display().to_string(),
        )?)
    } else if let Some(path) = &args.trace {
        let trace = slipstream_workload::trace::read_path(path)?;
        Targets::Sequence(trace.requests.into_iter().map(|r| r.key).collect())
    } else {
        let path = uri
            .path_and_query()
            .map_or("/".to_owned(), |p| p.to_string());
        Targets::Weighted(vec![(path, 1.0)])
    };
    if let (Some(mode), Some(rate)) = (args.agents, args.rate) {
        return run_agents(&args, base, targets, mode, rate);
    }
    let mode = match args.rate {
        Some(rate_per_s) => Mode::Open {
            rate_per_s,
            max_in_flight: args.max_in_flight,
        },
        None => Mode::Closed {
            clients: args.clients,
            think_time: args.think,
        },
    };
    let plan = Plan {
        base,
        targets,
        mode,
        limits: Limits {
            max_requests: args.requests,
            duration: args.duration,
        },
        timeout: args.timeout,
        http2: args.h2,
        proxy: args.proxy.clone(),
        seed: args.seed,
    };
    let quiet = args.quiet;
    let report = crate::serve::runtime(0)?.block_on(slipstream_bench::run(plan, move |p| {
        if !quiet {
            let rate = p.completed as f64 / p.elapsed.as_secs_f64().max(1e-9);
            eprint!(
                "\r{:>6.1}s  {:>10} ok  {:>6} errors  {:>10.0} req/s ",
                p.elapsed.as_secs_f64(),
                p.completed,
                p.errors,
                rate
            );
            let _ = std::io::stderr().flush();
        }
    }))?;
    if !quiet {
        eprintln!();
    }
    println!("{report}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.to_json())?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    anyhow::ensure!(
        report.completed > 0 || report.error_count() == 0,
        "every request failed ({} errors)",
        report.error_count()
    );
    Ok(())
}
