//! `slipstream experiment`: reproduces a paper's figures from its workload, writing JSON,
//! SVG charts and a markdown table. `paper002` covers paper 002's cache figures (Figs. 7, 9, 10
//! and 11); the throughput experiment and the nginx comparison need two servers and core
//! pinning, and live in `experiments/002/*.sh`.

// The harness of `experiment webpp` lives in its own directory, declared here so that the
// binary's module list stays as it is.
#[path = "webpp_exp/mod.rs"]
mod webpp_exp;

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use slipstream_cache::{sim, Config, Policy};
use slipstream_lab::chart::{self, Axes, Series};
use slipstream_workload::table1::{self, FileSet, FileSetParams, Mix};
use slipstream_workload::Request;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Paper 002's byte-hit-ratio figures (7, 9, 10, 11) by trace replay.
    Paper002(Paper002),
    /// Draw a bar chart from NAME=VALUE pairs (used by the experiment scripts).
    Bars(Bars),
    /// Draw a line chart from a CSV file: one line per value of a series column (used by the
    /// experiment scripts).
    Lines(Lines),
    /// Paper 001's live experiment (Figs. 11–14): Web++ Refresh against single, p2c +
    /// Peak-EWMA, hedged and optimal over emulated WAN links on loopback.
    Webpp(webpp_exp::Webpp),
}

#[derive(Debug, clap::Args)]
pub struct Paper002 {
    /// Output directory for results.json, results.md and the SVG charts.
    #[arg(long, default_value = "docs/experiments/002")]
    pub out: PathBuf,
    /// Requests per trace (the paper's log has 34,372).
    #[arg(long, default_value_t = 34_372)]
    pub requests: usize,
    /// Seeds: each figure point is the mean over one file set and trace per seed.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
}

#[derive(Debug, clap::Args)]
pub struct Bars {
    /// Output SVG.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub title: String,
    #[arg(long)]
    pub y_label: String,
    /// Bars as NAME=VALUE.
    #[arg(required = true)]
    pub bars: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct Lines {
    /// CSV with a header line; numbers in the x and y columns.
    #[arg(long)]
    pub csv: PathBuf,
    /// Output SVG.
    #[arg(long)]
    pub out: PathBuf,
    /// The x column.
    #[arg(long)]
    pub x: String,
    /// The y column.
    #[arg(long)]
    pub y: String,
    /// The column whose values name the lines.
    #[arg(long)]
    pub series: String,
    /// Divide y by this (units).
    #[arg(long, default_value_t = 1.0)]
    pub y_scale: f64,
    #[arg(long)]
    pub title: String,
    #[arg(long)]
    pub x_label: String,
    #[arg(long)]
    pub y_label: String,
}

/// `experiment lines`: the mean y of each (series, x) in the CSV, one line per series in the
/// order they first appear.
fn lines(l: Lines) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&l.csv)
        .with_context(|| format!("cannot read {}", l.csv.display()))?;
    let mut rows = text.lines();
    let header: Vec<&str> = rows.next().context("an empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .with_context(|| format!("{}: no column `{name}`", l.csv.display()))
    };
    let (xi, yi, si) = (col(&l.x)?, col(&l.y)?, col(&l.series)?);
    // Per series: x (as bits) -> (x, sum of y, count).
    type Sums = std::collections::BTreeMap<u64, (f64, f64, u32)>;
    let mut series: Vec<(String, Sums)> = Vec::new();
    for (n, row) in rows.enumerate() {
        let f: Vec<&str> = row.split(',').collect();
        let cell = |i: usize| {
            f.get(i)
                .map(|c| c.trim())
                .with_context(|| format!("{} line {}: too few fields", l.csv.display(), n + 2))
        };
        let num = |i: usize| -> anyhow::Result<f64> {
            let c = cell(i)?;
            c.parse::<f64>().with_context(|| {
                format!("{} line {}: `{c}` is not a number", l.csv.display(), n + 2)
            })
        };
        let (x, y, name) = (num(xi)?, num(yi)? / l.y_scale, cell(si)?.to_owned());
        let idx = match series.iter().position(|(s, _)| *s == name) {
            Some(i) => i,
            None => {
                series.push((name, Default::default()));
                series.len() - 1
            }
        };
        let e = series[idx].1.entry(x.to_bits()).or_insert((x, 0.0, 0));
        e.1 += y;
        e.2 += 1;
    }
    let mut out: Vec<Series> = series
        .into_iter()
        .map(|(name, points)| {
            let mut points: Vec<(f64, f64)> = points
                .values()
                .map(|(x, sum, n)| (*x, sum / f64::from(*n)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect();
    out.retain(|s| !s.points.is_empty());
    chart::line_chart(
        &l.out,
        &Axes {
            title: l.title,
            x_label: l.x_label,
            y_label: l.y_label,
            log_x: false,
        },
        &out,
    )?;
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Sub::Lines(l) => lines(l),
        Sub::Paper002(p) => paper002(p),
        Sub::Webpp(w) => webpp_exp::run(w),
        Sub::Bars(b) => {
            let bars = b
                .bars
                .iter()
                .map(|pair| {
                    let (name, value) = pair
                        .rsplit_once('=')
                        .with_context(|| format!("`{pair}` is not NAME=VALUE"))?;
                    Ok((
                        name.to_owned(),
                        value
                            .parse::<f64>()
                            .with_context(|| format!("`{value}` is not a number"))?,
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(chart::bar_chart(&b.out, &b.title, &b.y_label, &bars)?)
        }
    }
}

const MIB: u64 = 1 << 20;
/// Cache sizes for Figs. 7 and 9 (the paper's Fig. 7 reaches 64 MB).
const SIZES_MIB: [u64; 7] = [4, 8, 16, 32, 48, 64, 96];
/// Share of requests to the three largest files for Figs. 10 and 11.
const HOT_SHARES: [f64; 10] = [0.0, 0.01, 0.02, 0.04, 0.06, 0.08, 0.10, 0.12, 0.15, 0.20];
const PAPER_POLICIES: [&str; 3] = ["total", "small", "adaptive"];
const ALL_POLICIES: [&str; 6] = [
    "total",
    "small",
    "adaptive",
    "lru",
    "sieve",
    "adaptive+sieve",
];

struct Workloads {
    seed: u64,
    files: FileSet,
}

impl Workloads {
    fn trace(&self, hot_share: Option<f64>, n: usize) -> Vec<Request> {
        table1::requests(
            &self.files,
            &Mix {
                hot_share,
                ..Mix::default()
            },
            n,
            100.0,
            self.seed,
        )
    }
}

/// Mean byte hit ratio (and min, max) over the seeds' traces for one configuration.
fn bhr(traces: &[Vec<Request>], config: Config) -> (f64, f64, f64) {
    let values: Vec<f64> = traces
        .iter()
        .map(|t| {
            sim::replay(config, t.iter().map(|r| (r.key.as_str(), r.size_bytes))).byte_hit_ratio()
        })
        .collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

fn config(size: u64, policy: &str) -> anyhow::Result<Config> {
    Ok(Config::new(size, policy.parse::<Policy>()?))
}

#[derive(serde::Serialize)]
struct Point {
    figure: &'static str,
    policy: String,
    cache_mib: u64,
    hot_share: f64,
    byte_hit_ratio: f64,
    min: f64,
    max: f64,
}

fn paper002(args: Paper002) -> anyhow::Result<()> {
    anyhow::ensure!(!args.seeds.is_empty(), "at least one seed");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let started = std::time::Instant::now();
    let workloads: Vec<Workloads> = args
        .seeds
        .iter()
        .map(|&seed| Workloads {
            seed,
            files: table1::file_set(&FileSetParams {
                seed,
                ..FileSetParams::default()
            }),
        })
        .collect();
    let first = &workloads[0].files;
    eprintln!(
        "file set: {} files, {:.0} MB; three largest: {}",
        first.files.len(),
        first.total_bytes() as f64 / 1e6,
        first
            .largest(3)
            .iter()
            .map(|f| format!("{:.1} MB", f.size_bytes as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let current: Vec<Vec<Request>> = workloads
        .iter()
        .map(|w| w.trace(None, args.requests))
        .collect();
    let mut points = Vec::new();
    let total_steps =
        SIZES_MIB.len() * ALL_POLICIES.len() + 2 * HOT_SHARES.len() * ALL_POLICIES.len();
    let mut step = 0;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |what: &str| {
        step += 1;
        if tty {
            eprint!("\r[{step:>3}/{total_steps}] {what:<40}");
        }
    };

    // Figs. 7 and 9: byte hit ratio against cache size on the current workload.
    for &mib in &SIZES_MIB {
        for policy in ALL_POLICIES {
            progress(&format!("current, {policy}, {mib} MiB"));
            let (mean, min, max) = bhr(&current, config(mib * MIB, policy)?);
            points.push(Point {
                figure: "9",
                policy: policy.into(),
                cache_mib: mib,
                hot_share: 0.0,
                byte_hit_ratio: mean,
                min,
                max,
            });
        }
    }
    // Figs. 10 and 11: the modified workload, a 64 MB cache and a 32 MB one (smaller than each of
    // the three largest files).
    for (figure, mib) in [("10", 64u64), ("11", 32)] {
        for &share in &HOT_SHARES {
            let traces: Vec<Vec<Request>> = workloads
                .iter()
                .map(|w| w.trace(Some(share), args.requests))
                .collect();
            for policy in ALL_POLICIES {
                progress(&format!(
                    "modified {:.0}%, {policy}, {mib} MiB",
                    share * 100.0
                ));
                let (mean, min, max) = bhr(&traces, config(mib * MIB, policy)?);
                points.push(Point {
                    figure,
                    policy: policy.into(),
                    cache_mib: mib,
                    hot_share: share,
                    byte_hit_ratio: mean,
                    min,
                    max,
                });
            }
        }
    }
    eprintln!(
        "\rdone in {:.1} s{:<40}",
        started.elapsed().as_secs_f64(),
        ""
    );

    let series = |figure: &str, policies: &[&str], x: fn(&Point) -> f64| -> Vec<Series> {
        policies
            .iter()
            .map(|p| Series {
                name: (*p).to_owned(),
                points: points
                    .iter()
                    .filter(|q| q.figure == figure && q.policy == *p)
                    .map(|q| (x(q), 100.0 * q.byte_hit_ratio))
                    .collect(),
            })
            .collect()
    };
    let by_size = |q: &Point| q.cache_mib as f64;
    let by_share = |q: &Point| 100.0 * q.hot_share;
    let out = |name: &str| args.out.join(name);
    let axes = |title: &str, x: &str| Axes {
        title: title.into(),
        x_label: x.into(),
        y_label: "byte hit ratio (%)".into(),
        log_x: false,
    };
    chart::line_chart(
        &out("fig7-bhr-vs-cache-size.svg"),
        &axes(
            "Fig. 7: adaptive-level cache, current workload",
            "cache size (MiB)",
        ),
        &series("9", &["adaptive"], by_size),
    )?;
    chart::line_chart(
        &out("fig9-policies-current.svg"),
        &axes(
            "Fig. 9: policies on the current workload",
            "cache size (MiB)",
        ),
        &series("9", &PAPER_POLICIES, by_size),
    )?;
    chart::line_chart(
        &out("fig10-policies-modified-64mib.svg"),
        &axes(
            "Fig. 10: modified workload, 64 MiB cache",
            "requests to the three largest files (%)",
        ),
        &series("10", &PAPER_POLICIES, by_share),
    )?;
    chart::line_chart(
        &out("fig11-policies-modified-32mib.svg"),
        &axes(
            "Fig. 11: modified workload, 32 MiB cache (< each large file)",
            "requests to the three largest files (%)",
        ),
        &series("11", &PAPER_POLICIES, by_share),
    )?;
    chart::line_chart(
        &out("modern-policies-modified-64mib.svg"),
        &axes(
            "Paper policies vs LRU and SIEVE: modified workload, 64 MiB",
            "requests to the three largest files (%)",
        ),
        &series("10", &ALL_POLICIES, by_share),
    )?;
    std::fs::write(out("results.json"), serde_json::to_string_pretty(&points)?)?;
    std::fs::write(out("results.md"), table(&points, &args))?;
    println!("wrote {}", args.out.display());
    Ok(())
}

fn table(points: &[Point], args: &Paper002) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- generated by `slipstream experiment paper002 --out {} --requests {} --seeds {}` -->\n",
        args.out.display(),
        args.requests,
        args.seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
    let cell = |q: &Point| {
        format!(
            "{:.1} ({:.1}–{:.1})",
            100.0 * q.byte_hit_ratio,
            100.0 * q.min,
            100.0 * q.max
        )
    };
    let _ = writeln!(
        md,
        "### Byte hit ratio (%) vs cache size, current workload (Figs. 7, 9)\n"
    );
    let _ = writeln!(md, "| cache | {} |", ALL_POLICIES.join(" | "));
    let _ = writeln!(md, "|---|{}", "---|".repeat(ALL_POLICIES.len()));
    for mib in SIZES_MIB {
        let row: Vec<String> = ALL_POLICIES
            .iter()
            .map(|p| {
                points
                    .iter()
                    .find(|q| q.figure == "9" && q.cache_mib == mib && q.policy == *p)
                    .map_or("–".into(), cell)
            })
            .collect();
        let _ = writeln!(md, "| {mib} MiB | {} |", row.join(" | "));
    }
    for (figure, mib) in [("10", 64), ("11", 32)] {
        let _ = writeln!(
            md,
            "\n### Byte hit ratio (%), modified workload, {mib} MiB cache (Fig. {figure})\n"
        );
        let _ = writeln!(md, "| to 3 largest | {} |", ALL_POLICIES.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(ALL_POLICIES.len()));
        for share in HOT_SHARES {
            let row: Vec<String> = ALL_POLICIES
                .iter()
                .map(|p| {
                    points
                        .iter()
                        .find(|q| {
                            q.figure == figure
                                && (q.hot_share - share).abs() < 1e-9
                                && q.policy == *p
                        })
                        .map_or("–".into(), cell)
                })
                .collect();
            let _ = writeln!(md, "| {:.0}% | {} |", share * 100.0, row.join(" | "));
        }
    }
    let _ = writeln!(
        md,
        "\nCells: mean over seeds (min–max). MAX_FILE_SIZE = cache/4 throughout (paper 002 §5.2)."
    );
    md
}
