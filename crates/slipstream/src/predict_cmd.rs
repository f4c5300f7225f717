//! `slipstream predict TRACE`: how well NPS's predictors (paper 000 §6.3) would have prefetched
//! a trace: PPM-n/w, first-order Markov and popularity, trained on the first sessions and scored
//! on the rest, offline (frozen) and online (learning as the test runs).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use slipstream_lab::chart;
use slipstream_prefetch::eval::{self, Plan, Score};
use slipstream_prefetch::sessions::{self, Sessions};
use slipstream_prefetch::{Popularity, Ppm, Predictor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// MSNBC if the first line starts with `%` or holds only numbers, else Common Log Format.
    Auto,
    /// UCI's MSNBC sequences (msnbc990928.seq): a session of page categories a line.
    Msnbc,
    /// Common (or Combined) Log Format, sessions by client and 30 idle minutes.
    Clf,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The trace: MSNBC sequences or a Common Log Format log, plain or gzip (`.gz`).
    pub trace: PathBuf,
    /// The trace's format.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// PPM's order n: how many recent pages make the context.
    #[arg(long, default_value_t = 2)]
    pub order: usize,
    /// PPM's window w, in pages; also the window within which a prefetch counts as useful.
    #[arg(long, default_value_t = 10)]
    pub window: usize,
    /// List lengths scored, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10")]
    pub lists: Vec<usize>,
    /// The share of sessions, the first ones, to train on.
    #[arg(long, default_value_t = 0.5)]
    pub train: f64,
    /// Write a chart of precision against recall, a point per list length (SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=slipstream_prefetch::History::KEEP).contains(&args.order),
        "--order {}: must be 1 to {}",
        args.order,
        slipstream_prefetch::History::KEEP
    );
    anyhow::ensure!(args.window >= 1, "--window must be at least 1");
    anyhow::ensure!(
        !args.lists.is_empty() && args.lists.iter().all(|&l| l >= 1),
        "--lists: list lengths of at least 1"
    );
    anyhow::ensure!(
        args.train > 0.0 && args.train < 1.0,
        "--train {}: a share between 0 and 1",
        args.train
    );
    let (trace, format) = read(&args.trace, args.format)?;
    eprintln!(
        "{}: {} sessions, {} requests, {} distinct {} ({}); training on the first {:.0} %",
        args.trace.display(),
        trace.sessions.len(),
        trace.requests(),
        trace.symbols.len(),
        if trace.sized { "URLs" } else { "categories" },
        if format == Format::Msnbc {
            "MSNBC"
        } else {
            "Common Log Format"
        },
        100.0 * args.train
    );
    // Categories stand for many pages: a category seen this session is wanted again.
    let repeat = !trace.sized;
    let mut rows: Vec<(String, bool, Vec<Score>)> = Vec::new();
    for online in [false, true] {
        let predictors: Vec<Box<dyn Predictor>> = vec![
            Box::new(Ppm::new(args.order, args.window)),
            Box::new(Ppm::markov()),
            Box::new(Popularity::new()),
        ];
        for mut p in predictors {
            let start = std::time::Instant::now();
            let plan = Plan {
                lists: args.lists.clone(),
                window: args.window,
                train_fraction: args.train,
                online,
                repeat,
            };
            let scores = eval::evaluate(p.as_mut(), &trace, &plan);
            eprintln!(
                "  {} {}: {:.1} s",
                p.name(),
                if online { "online" } else { "offline" },
                start.elapsed().as_secs_f64()
            );
            rows.push((p.name(), online, scores));
        }
    }
    let waste_unit = if trace.sized {
        "wasted B / useful B"
    } else {
        "wasted / useful"
    };
    println!(
        "{:<10} {:<8} {:>5} {:>10} {:>8} {:>20}",
        "predictor", "training", "list", "precision", "recall", waste_unit
    );
    for (name, online, scores) in &rows {
        for s in scores {
            println!(
                "{:<10} {:<8} {:>5} {:>9.1}% {:>7.1}% {:>20.2}",
                name,
                if *online { "online" } else { "offline" },
                s.list,
                100.0 * s.precision(),
                100.0 * s.recall(),
                s.waste()
            );
        }
    }
    if let Some(path) = &args.chart {
        let series: Vec<chart::Series> = rows
            .iter()
            .map(|(name, online, scores)| chart::Series {
                name: format!("{name} {}", if *online { "online" } else { "offline" }),
                points: scores
                    .iter()
                    .map(|s| (100.0 * s.recall(), 100.0 * s.precision()))
                    .collect(),
            })
            .collect();
        let axes = chart::Axes {
            title: format!(
                "Precision vs recall, list lengths {}: {}",
                args.lists
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                args.trace
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            x_label: "recall (%)".into(),
            y_label: "precision (%)".into(),
            log_x: false,
        };
        chart::line_chart(path, &axes, &series)?;
        eprintln!("chart: {}", path.display());
    }
    if let Some(path) = &args.json {
        let results: Vec<serde_json::Value> = rows
            .iter()
            .flat_map(|(name, online, scores)| {
                scores.iter().map(move |s| {
                    serde_json::json!({
                        "predictor": name,
                        "training": if *online { "online" } else { "offline" },
                        "list": s.list,
                        "lists_made": s.lists_made,
                        "listed": s.listed,
                        "useful": s.useful,
                        "wanted": s.wanted,
                        "useful_bytes": s.useful_bytes,
                        "wasted_bytes": s.wasted_bytes,
                        "precision": s.precision(),
                        "recall": s.recall(),
                        "waste": if s.waste().is_finite() { serde_json::json!(s.waste()) } else { serde_json::Value::Null },
                    })
                })
            })
            .collect();
        let doc = serde_json::json!({
            "trace": args.trace.display().to_string(),
            "format": if format == Format::Msnbc { "msnbc" } else { "clf" },
            "sessions": trace.sessions.len(),
            "requests": trace.requests(),
            "distinct": trace.symbols.len(),
            "sized": trace.sized,
            "order": args.order,
            "window": args.window,
            "train_fraction": args.train,
            "results": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("results: {}", path.display());
    }
    Ok(())
}

/// Reads `path` (gunzipped if it ends in `.gz`) as sessions of `format`.
fn read(path: &Path, format: Format) -> anyhow::Result<(Sessions, Format)> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    let name = path.display().to_string();
    let mut text = Vec::new();
    reader
        .read_to_end(&mut text)
        .with_context(|| format!("cannot read {name}"))?;
    let text = String::from_utf8_lossy(&text);
    let format = match format {
        Format::Auto => {
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            match first {
                Some(l)
                    if l.starts_with('%')
                        || l.split_whitespace().all(|w| w.parse::<u32>().is_ok()) =>
                {
                    Format::Msnbc
                }
                _ => Format::Clf,
            }
        }
        f => f,
    };
    let sessions = if format == Format::Msnbc {
        sessions::msnbc(&text, &name)?
    } else {
        let trace = slipstream_workload::trace::read_lenient(text.as_bytes(), &name)?;
        if trace.malformed > 0 {
            eprintln!(
                "warning: passed over {} malformed line(s) of {name}; the first: {}",
                trace.malformed,
                trace.malformed_examples.join("; ")
            );
        }
        sessions::from_trace(&trace, &name)?
    };
    Ok((sessions, format))
}
