//! Run outputs: `transfers.csv` (one row per transfer) and `summary.json` (per-source latency
//! statistics, drops, events and wall time).

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use slipstream_sim::hits::Achieved;
use slipstream_sim::net::Run;
use slipstream_sim::reference::{source_name, Job};
use slipstream_sim::time::to_secs_f64;

/// Latency statistics of one group of transfers, in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Transfers completed.
    pub n: usize,
    /// Mean latency.
    pub mean_s: f64,
    /// Median latency.
    pub median_s: f64,
    /// 90th percentile.
    pub p90_s: f64,
    /// Largest latency.
    pub max_s: f64,
    /// Standard deviation.
    pub sd_s: f64,
    /// Segments retransmitted.
    pub retransmissions: u64,
}

/// What `summary.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Scenario name.
    pub name: String,
    /// Transfers in the workload.
    pub transfers: usize,
    /// Transfers completed.
    pub completed: usize,
    /// Packets dropped.
    pub drops: u64,
    /// Events processed.
    pub events: u64,
    /// Wall time of the simulation, seconds.
    pub wall_s: f64,
    /// Statistics per serving level.
    pub child: Stats,
    /// See `child`.
    pub parent: Stats,
    /// See `child`.
    pub origin: Stats,
    /// All transfers.
    pub all: Stats,
    /// With real caches: the hit ratios they achieved over these transfers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_stage: Option<Achieved>,
}

fn stats(mut latencies: Vec<f64>, retransmissions: u64) -> Stats {
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len();
    if n == 0 {
        return Stats {
            n: 0,
            mean_s: 0.0,
            median_s: 0.0,
            p90_s: 0.0,
            max_s: 0.0,
            sd_s: 0.0,
            retransmissions,
        };
    }
    let mean = latencies.iter().sum::<f64>() / n as f64;
    let var = latencies.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    let pick = |q: f64| latencies[((q * n as f64) as usize).min(n - 1)];
    Stats {
        n,
        mean_s: mean,
        median_s: pick(0.5),
        p90_s: pick(0.9),
        max_s: latencies[n - 1],
        sd_s: var.sqrt(),
        retransmissions,
    }
}

/// Per-transfer rows and the summary of a run.
pub fn summarise(
    name: &str,
    jobs: &[Job],
    run: &Run,
    wall_s: f64,
    hit_stage: Option<Achieved>,
) -> (String, Summary) {
    let src_of: std::collections::HashMap<u64, u8> = jobs.iter().map(|j| (j.id, j.src)).collect();
    let mut results = run.results.clone();
    results.sort_by_key(|r| r.transfer.id);
    let mut csv =
        String::from("id,source,size_bytes,start_s,end_s,latency_s,segments,retransmissions\n");
    let mut groups: [(Vec<f64>, u64); 4] = Default::default();
    for r in &results {
        let src = src_of.get(&r.transfer.id).copied().unwrap_or(3);
        let (start, end) = (to_secs_f64(r.transfer.start), to_secs_f64(r.received));
        let latency = end - start;
        let _ = writeln!(
            csv,
            "{},{},{},{:.9},{:.9},{:.9},{},{}",
            r.transfer.id,
            source_name(src),
            r.transfer.bytes,
            start,
            end,
            latency,
            r.segments,
            r.retransmissions
        );
        for g in [usize::from(src.clamp(1, 3)) - 1, 3] {
            groups[g].0.push(latency);
            groups[g].1 += u64::from(r.retransmissions);
        }
    }
    let [child, parent, origin, all] = groups.map(|(l, r)| stats(l, r));
    let summary = Summary {
        name: name.to_owned(),
        transfers: jobs.len(),
        completed: results.len(),
        drops: run.drops,
        events: run.events,
        wall_s,
        child,
        parent,
        origin,
        all,
        hit_stage,
    };
    (csv, summary)
}

/// Writes `transfers.csv` and `summary.json` under `dir`.
pub fn write(dir: &Path, csv: &str, summary: &Summary) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("transfers.csv"), csv)?;
    let json = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_sim::compare;
    use slipstream_sim::scenario::Scenario;

    #[test]
    fn transfers_csv_reads_back_and_the_summary_counts_every_transfer() {
        let text = "[workload]\ntransfers = 50\n";
        let scenario: Scenario = toml::from_str(text).expect("scenario");
        let plan = scenario
            .plan(Path::new("s.toml"), text)
            .expect("valid scenario");
        let run = plan.run(None);
        let (csv, summary) = summarise("t", &plan.jobs, &run, 0.0, None);
        let rows = compare::parse(&csv, "transfers.csv").expect("valid csv");
        assert_eq!((rows.len(), summary.completed, summary.all.n), (50, 50, 50));
        assert_eq!(
            summary.child.n + summary.parent.n + summary.origin.n,
            summary.all.n
        );
        let json = serde_json::to_string(&summary).expect("serialise");
        let back: Summary = serde_json::from_str(&json).expect("read back");
        assert_eq!(back.all, summary.all);
    }
}
