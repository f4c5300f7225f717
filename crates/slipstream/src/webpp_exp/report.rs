//! What a run wrote: per (policy, size) the mean, p50 and p99 response time, the improvement
//! over `single`, the gap to `optimal` and the extra requests, over the whole day and in the
//! paper's two windows (noon and evening EST). The headline is per size pooled over the three
//! sites, as 001 §6.1 reports "the mean of response time measured across all requests sent by
//! all clients", summarised over the sizes (mean, least, greatest); per (site, size) the same
//! changes as extra detail; `results.json`, `results.md`, `requests.csv` (every logical
//! request) and SVG charts.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use slipstream_lab::chart::{self, Axes, Series};

use super::world::{World, REPLICAS, SINGLE, SITES, SIZES};
use super::{Params, Probes, Record, POLICIES};

/// The paper's windows, in day hours (EST): 001 §6.1 ran the workload "during peak office hours
/// (noon EST) and during evening hours (6pm EST)"; the two-hour widths are this harness's.
const WINDOWS: [(&str, f64, f64); 3] = [
    ("day", 0.0, 24.0),
    ("noon", 11.0, 13.0),
    ("evening", 17.0, 19.0),
];

fn size_label(size: u64) -> String {
    if size < 1_000 {
        format!("{}KB", size as f64 / 1e3)
    } else {
        format!("{}KB", size / 1_000)
    }
}

/// One (window, policy, size) cell.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cell {
    pub window: &'static str,
    pub policy: &'static str,
    pub size: u64,
    /// Logical requests, answered ones and failed ones.
    pub requests: u64,
    pub answered: u64,
    pub failed: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// (single's mean − this mean) / single's mean, in %.
    pub improvement_vs_single_pct: f64,
    /// (this mean − optimal's mean) / optimal's mean, in %.
    pub gap_to_optimal_pct: f64,
    /// Exchanges started for the logical requests, including the first of each.
    pub exchanges: u64,
    pub failovers: u64,
    pub hedges: u64,
    pub timeouts: u64,
    /// HEAD probes sent in the window.
    pub refresh_probes: u64,
    pub recover_probes: u64,
    /// Requests beyond one per logical request: exchanges − requests + probes.
    pub extra_requests: u64,
    pub extra_pct: f64,
    /// Winning responses per replica, in [`REPLICAS`] order.
    pub served_by: [u64; 3],
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn cells(records: &[Record], probes: &Probes) -> Vec<Cell> {
    let mut out = Vec::new();
    for &(window, from, to) in &WINDOWS {
        for &size in &SIZES {
            let mut row: Vec<Cell> = POLICIES
                .iter()
                .map(|&policy| {
                    let rs: Vec<&Record> = records
                        .iter()
                        .filter(|r| r.policy == policy && r.size == size)
                        .filter(|r| from <= r.hour && r.hour < to)
                        .collect();
                    let mut times: Vec<f64> = rs.iter().filter_map(|r| r.response_ms).collect();
                    times.sort_by(f64::total_cmp);
                    let sum = |f: fn(&Record) -> u32| rs.iter().map(|r| u64::from(f(r))).sum();
                    let hours = from as usize..to as usize;
                    let (refresh_probes, recover_probes) = probes
                        .iter()
                        .filter(|p| p.0 == policy && p.1 == size)
                        .fold((0, 0), |(a, b), p| {
                            (
                                a + p.2[hours.clone()].iter().sum::<u64>(),
                                b + p.3[hours.clone()].iter().sum::<u64>(),
                            )
                        });
                    let requests = rs.len() as u64;
                    let exchanges: u64 = sum(|r| r.exchanges);
                    let extra = exchanges - requests + refresh_probes + recover_probes;
                    let mut served_by = [0; 3];
                    for r in &rs {
                        if let Some(k) = REPLICAS.iter().position(|n| Some(*n) == r.served_by) {
                            served_by[k] += 1;
                        }
                    }
                    Cell {
                        window,
                        policy,
                        size,
                        requests,
                        answered: times.len() as u64,
                        failed: requests - times.len() as u64,
                        mean_ms: mean(&times),
                        p50_ms: percentile(&times, 50.0),
                        p99_ms: percentile(&times, 99.0),
                        improvement_vs_single_pct: f64::NAN,
                        gap_to_optimal_pct: f64::NAN,
                        exchanges,
                        failovers: sum(|r| r.failovers),
                        hedges: sum(|r| r.hedges),
                        timeouts: sum(|r| r.timeouts),
                        refresh_probes,
                        recover_probes,
                        extra_requests: extra,
                        extra_pct: extra as f64 / requests as f64 * 100.0,
                        served_by,
                    }
                })
                .collect();
            let single = row[0].mean_ms;
            let optimal = row[POLICIES.len() - 1].mean_ms;
            for c in &mut row {
                c.improvement_vs_single_pct = (single - c.mean_ms) / single * 100.0;
                c.gap_to_optimal_pct = (c.mean_ms - optimal) / optimal * 100.0;
            }
            out.extend(row);
        }
    }
    out
}

/// One (site, size) in a window: each policy's mean (detail below the pooled summary).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Experiment {
    pub window: &'static str,
    pub site: &'static str,
    pub size: u64,
    /// Mean response time per policy, in [`POLICIES`] order.
    pub mean_ms: Vec<f64>,
}

fn experiments(records: &[Record]) -> Vec<Experiment> {
    let mut out = Vec::new();
    for &(window, from, to) in &WINDOWS {
        for site in SITES {
            for size in SIZES {
                let mean_ms = POLICIES
                    .iter()
                    .map(|&p| {
                        let t: Vec<f64> = records
                            .iter()
                            .filter(|r| r.policy == p && r.site == site && r.size == size)
                            .filter(|r| from <= r.hour && r.hour < to)
                            .filter_map(|r| r.response_ms)
                            .collect();
                        mean(&t)
                    })
                    .collect();
                out.push(Experiment {
                    window,
                    site,
                    size,
                    mean_ms,
                });
            }
        }
    }
    out
}

/// Mean, least and greatest of `f` over the experiments of `window` with finite values.
fn spread(exps: &[Experiment], window: &str, f: impl Fn(&Experiment) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = exps
        .iter()
        .filter(|e| e.window == window)
        .map(f)
        .filter(|x| x.is_finite())
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean(&v), lo, hi)
}

pub fn write(
    dir: &Path,
    world: &World,
    params: &Params,
    records: &[Record],
    probes: &Probes,
    served: &[(u64, u64)],
) -> anyhow::Result<()> {
    let cells = cells(records, probes);
    let exps = experiments(records);
    let json = serde_json::json!({
        "params": params,
        "replicas": REPLICAS,
        "single": REPLICAS[SINGLE],
        "sites": SITES,
        "sizes": SIZES,
        "policies": POLICIES,
        "links": world.links,
        "loads": world.loads,
        "served": served.iter().zip(REPLICAS).map(|(&(get, head), r)| {
            serde_json::json!({"replica": r, "get": get, "head": head})
        }).collect::<Vec<_>>(),
        "cells": cells,
        "experiments": exps,
    });
    let file = |name: &str| dir.join(name);
    std::fs::write(
        file("results.json"),
        serde_json::to_string_pretty(&json)? + "\n",
    )
    .context("writing results.json")?;

    let mut csv = String::from(
        "policy,site,size,slot,hour,response_ms,served_by,exchanges,failovers,hedges,timeouts\n",
    );
    for r in records {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.4},{},{},{},{},{},{}",
            r.policy,
            r.site,
            r.size,
            r.slot,
            r.hour,
            r.response_ms.map(|v| format!("{v:.2}")).unwrap_or_default(),
            r.served_by.unwrap_or(""),
            r.exchanges,
            r.failovers,
            r.hedges,
            r.timeouts
        );
    }
    std::fs::write(file("requests.csv"), csv).context("writing requests.csv")?;
    std::fs::write(
        file("results.md"),
        markdown(world, params, &cells, &exps, served),
    )
    .context("writing results.md")?;
    charts(dir, world, records, &cells)
}

fn markdown(
    world: &World,
    params: &Params,
    cells: &[Cell],
    exps: &[Experiment],
    served: &[(u64, u64)],
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- written by `slipstream experiment webpp` (seed {}, day {} s, scale {}, TTL {} min, F {} h, hedge at p{}{}) -->\n",
        params.seed,
        params.day_secs,
        params.scale,
        params.ttl_minutes,
        params.f_hours,
        params.hedge_percentile,
        if params.label.is_empty() {
            String::new()
        } else {
            format!(", {}", params.label)
        }
    );
    for &(window, from, to) in &WINDOWS {
        let _ = writeln!(
            md,
            "### Window `{window}` (day hours {from}–{to} EST)\n\n\
             | size | policy | requests | failed | mean ms | p50 ms | p99 ms | vs single | vs optimal | extra requests |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in cells.iter().filter(|c| c.window == window) {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:+.1} % | {:+.1} % | {} ({:.1} %) |",
                size_label(c.size),
                c.policy,
                c.requests,
                c.failed,
                c.mean_ms,
                c.p50_ms,
                c.p99_ms,
                -c.improvement_vs_single_pct,
                c.gap_to_optimal_pct,
                c.extra_requests,
                c.extra_pct
            );
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\"vs single\" and \"vs optimal\" are the change of the mean response time (negative: \
         faster). Extra requests: exchanges beyond one per logical request plus the HEAD probes \
         sent in the window (by the day hour they were sent in).\n"
    );
    let _ = writeln!(
        md,
        "### Extra requests over the whole day, by cause\n\n\
         | policy | size | requests | fail-overs | hedges | time-outs | refresh HEADs | recovery HEADs | extra | served by us-west / us-east / eu |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for c in cells.iter().filter(|c| c.window == "day") {
        let parallel = if c.policy == "optimal" {
            format!(" (parallel: {})", c.exchanges - c.requests)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {}{} ({:.2} %) | {} / {} / {} |",
            c.policy,
            size_label(c.size),
            c.requests,
            c.failovers,
            c.hedges,
            c.timeouts,
            c.refresh_probes,
            c.recover_probes,
            c.extra_requests,
            parallel,
            c.extra_pct,
            c.served_by[0],
            c.served_by[1],
            c.served_by[2]
        );
    }
    let _ = writeln!(
        md,
        "\n### Summary per size, pooled over the sites (001 §6.1's statistic)\n\n\
         One experiment is one size, its mean over every request of every site, as 001 §6.1 \
         reports \"the mean of response time measured across all requests sent by all \
         clients\". Change of that mean over the {} sizes: mean [least, greatest].\n\n\
         | window | policy | vs single | vs optimal |\n|---|---|---|---|",
        SIZES.len()
    );
    for &(window, _, _) in &WINDOWS {
        for policy in POLICIES.iter().skip(1) {
            let pooled = |f: fn(&Cell) -> f64| {
                let v: Vec<f64> = cells
                    .iter()
                    .filter(|c| c.window == window && c.policy == *policy)
                    .map(f)
                    .filter(|x| x.is_finite())
                    .collect();
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (mean(&v), lo, hi)
            };
            // Negative: faster, as in the per-(site, size) table.
            let (m, lo, hi) = pooled(|c| -c.improvement_vs_single_pct);
            let (gm, glo, ghi) = pooled(|c| c.gap_to_optimal_pct);
            let _ = writeln!(
                md,
                "| {window} | {policy} | {m:+.1} % [{lo:+.1}, {hi:+.1}] | {gm:+.1} % [{glo:+.1}, {ghi:+.1}] |"
            );
        }
    }
    let _ = writeln!(
        md,
        "\n### Per (site, size), extra detail\n\n\
         Change of the mean response time over the 12 (site, size) pairs: mean [least, \
         greatest].\n\n\
         | window | policy | vs single | vs optimal |\n|---|---|---|---|"
    );
    for &(window, _, _) in &WINDOWS {
        for (k, policy) in POLICIES.iter().enumerate().skip(1) {
            let (m, lo, hi) = spread(exps, window, |e| {
                (e.mean_ms[k] - e.mean_ms[0]) / e.mean_ms[0] * 100.0
            });
            let last = POLICIES.len() - 1;
            let (gm, glo, ghi) = spread(exps, window, |e| {
                (e.mean_ms[k] - e.mean_ms[last]) / e.mean_ms[last] * 100.0
            });
            let _ = writeln!(
                md,
                "| {window} | {policy} | {m:+.1} % [{lo:+.1}, {hi:+.1}] | {gm:+.1} % [{glo:+.1}, {ghi:+.1}] |"
            );
        }
    }
    let _ = writeln!(
        md,
        "\n### Requests each server answered (all policies, GET / HEAD)\n\n| replica | GET | HEAD |\n|---|---:|---:|"
    );
    for (r, &(get, head)) in served.iter().enumerate() {
        let _ = writeln!(md, "| {} | {get} | {head} |", REPLICAS[r]);
    }
    let _ = writeln!(
        md,
        "\n### The load schedule (seed {})\n\n| replica | base ms | office-hours peak ms | peak at (EST) | width h | spikes (EST hours, +ms) | outage (EST hours) |\n|---|---:|---:|---:|---:|---|---|",
        params.seed
    );
    for l in &world.loads {
        let spikes: Vec<String> = l
            .spikes
            .iter()
            .map(|s| format!("{:.1}–{:.1} +{:.0}", s.from_h, s.to_h, s.extra_ms))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.0} | {:.0}:00 | {:.1} | {} | {} |",
            l.replica,
            l.base_ms,
            l.peak_ms,
            l.peak_h,
            l.width_h,
            spikes.join("; "),
            l.outage
                .map(|o| format!("{:.2}–{:.2}", o.from_h, o.to_h))
                .unwrap_or_else(|| "none".into())
        );
    }
    md
}

fn charts(dir: &Path, world: &World, records: &[Record], cells: &[Cell]) -> anyhow::Result<()> {
    let load: Vec<Series> = world
        .loads
        .iter()
        .map(|l| Series {
            name: l.replica.to_string(),
            points: (0..=240)
                .map(|i| {
                    let h = f64::from(i) / 10.0;
                    (h, l.service_ms(h))
                })
                .collect(),
        })
        .collect();
    chart::line_chart(
        &dir.join("load.svg"),
        &Axes {
            title: "Mean service delay per replica over the compressed day".into(),
            x_label: "day hour (EST)".into(),
            y_label: "service delay (ms)".into(),
            log_x: false,
        },
        &load,
    )?;
    let day = |policy: &str, size: u64| {
        cells
            .iter()
            .find(|c| c.window == "day" && c.policy == policy && c.size == size)
            .expect("every policy and size has a cell")
    };
    for (file, title, y_label, value) in [
        (
            "absolute.svg",
            "Median response time by size, whole day (cf. 001 Fig. 11, noon medians)",
            "median response time (ms)",
            (|c: &Cell, _: &Cell| c.p50_ms) as fn(&Cell, &Cell) -> f64,
        ),
        (
            "relative.svg",
            "Median response time relative to optimal's, whole day (cf. 001 Fig. 12)",
            "median / optimal's median",
            |c: &Cell, o: &Cell| c.p50_ms / o.p50_ms,
        ),
    ] {
        let series: Vec<Series> = POLICIES
            .iter()
            .map(|&p| Series {
                name: p.to_string(),
                points: SIZES
                    .iter()
                    .map(|&s| (s as f64 / 1e3, value(day(p, s), day("optimal", s))))
                    .filter(|(_, y)| y.is_finite())
                    .collect(),
            })
            .collect();
        chart::line_chart(
            &dir.join(file),
            &Axes {
                title: title.into(),
                x_label: "resource size (KB)".into(),
                y_label: y_label.into(),
                log_x: true,
            },
            &series,
        )?;
    }
    for &size in &SIZES {
        let label = size_label(size);
        let series: Vec<Series> = POLICIES
            .iter()
            .map(|&p| Series {
                name: p.to_string(),
                points: (0..24)
                    .filter_map(|h| {
                        let t: Vec<f64> = records
                            .iter()
                            .filter(|r| r.policy == p && r.size == size)
                            .filter(|r| r.hour >= f64::from(h) && r.hour < f64::from(h + 1))
                            .filter_map(|r| r.response_ms)
                            .collect();
                        (!t.is_empty()).then(|| (f64::from(h) + 0.5, mean(&t)))
                    })
                    .collect(),
            })
            .collect();
        chart::line_chart(
            &dir.join(format!("timeline-{label}.svg")),
            &Axes {
                title: format!("{label}: mean response time per day hour, all sites"),
                x_label: "day hour (EST)".into(),
                y_label: "mean response time (ms)".into(),
                log_x: false,
            },
            &series,
        )?;
        let bars: Vec<(String, f64)> = POLICIES
            .iter()
            .map(|&p| (p.to_string(), day(p, size).mean_ms))
            .filter(|(_, v)| v.is_finite())
            .collect();
        chart::bar_chart(
            &dir.join(format!("bars-{label}.svg")),
            &format!("{label}: mean response time over the day"),
            "mean response time (ms)",
            &bars,
        )?;
    }
    let extra: Vec<(String, f64)> = POLICIES
        .iter()
        .map(|&p| {
            let (n, e) = SIZES.iter().fold((0, 0), |(n, e), &s| {
                let c = day(p, s);
                (n + c.requests, e + c.extra_requests)
            });
            (p.to_string(), e as f64 / n.max(1) as f64 * 100.0)
        })
        .collect();
    chart::bar_chart(
        &dir.join("extra.svg"),
        "Extra requests per logical request, all sizes",
        "extra requests (%)",
        &extra,
    )?;
    Ok(())
}
