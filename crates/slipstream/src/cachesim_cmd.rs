//! `slipstream cachesim TRACE`: replays a trace through cache policies and sizes.

use std::path::PathBuf;

use anyhow::Context;
use slipstream_cache::{sim, Config, Policy};
use slipstream_lab::chart;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace file: Common Log Format or TSV (time_s, key, size_bytes).
    pub trace: PathBuf,
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

pub fn run(args: Args) -> anyhow::Result<()> {
    let policies: Vec<Policy> = args
        .policy
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let trace = slipstream_workload::trace::read_path_lenient(&args.trace)?;
    if trace.malformed > 0 {
        eprintln!(
            "warning: passed over {} malformed line(s) of {}; the first: {}",
            trace.malformed,
            args.trace.display(),
            trace.malformed_examples.join("; ")
        );
    }
    anyhow::ensure!(
        !trace.requests.is_empty(),
        "{}: no cacheable requests in the trace",
        args.trace.display()
    );
    eprintln!(
        "{}: {} requests ({} records skipped as not cacheable)",
        args.trace.display(),
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
            title: format!("Byte hit ratio vs cache size: {}", args.trace.display()),
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
