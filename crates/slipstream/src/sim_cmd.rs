//! `slipstream sim`: the packet-level simulator (paper 003), and paper 000's prefetching
//! clients over it (`--prefetch-files`, Fig. 13(c)'s loaded network).

use std::path::PathBuf;

use anyhow::Context;
use slipstream_sim::reference::{self, Chain};
use slipstream_sim::TcpConfig;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Scenario file (TOML; an empty file is paper 003's baseline).
    pub scenario: Option<PathBuf>,
    /// Directory for transfers.csv and summary.json (and latency.svg with --plot).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also draw transfer latency against size in packets, by source (paper 003 Fig. 2).
    #[arg(long, requires = "out")]
    pub plot: bool,
    /// Write the scenario's transfers in the ns-2 reference model's workload format
    /// (`id start_s src size`), so that ns-2 can run exactly the same transfers.
    #[arg(long)]
    pub dump_workload: Option<PathBuf>,
    /// Write the scenario as an ns-2 Tcl script that runs the same transfers and writes
    /// transfers.csv's columns (`ns FILE [out=transfers-ns2.csv]`); without --out, nothing
    /// is simulated here.
    #[arg(long, value_name = "FILE")]
    pub export_ns2: Option<PathBuf>,
    /// Write a packet trace of the run (`+`/`-`/`d` TIME FROM TO tcp|ack SIZE FLOW SEQ, ns-2's
    /// fields), to diff against the exported script's `trace=` output.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub prefetch: Prefetch,
    #[command(subcommand)]
    pub command: Option<Sub>,
}

/// Paper 000's prefetching clients (§7.1, Fig. 13(c)). The scenario's transfers are the
/// demand, dealt in turn to the clients and grouped into documents; after each document (at
/// the request of its last file) its client prefetches files from the scenario's parent, the
/// prefetch server of NPS's two-connection architecture, in hint lists: one connection per
/// list, a client's lists one after another (its next list waits for the last). File sizes
/// come from the scenario's size model. The parent sends with Reno, or with TCP Nice when
/// `[tcp.nice]` names it. In transfers.csv the prefetches are the `parent` rows.
#[derive(Debug, clap::Args)]
pub struct Prefetch {
    /// Files prefetched after each document (paper 000's No-Avoidance: pfrate 70).
    #[arg(long, value_name = "FILES", conflicts_with_all = ["export_ns2", "dump_workload"])]
    pub prefetch_files: Option<u32>,
    /// Files per hint list, each fetched over its own connection (NPS: 10).
    #[arg(long, default_value_t = 10, requires = "prefetch_files")]
    pub hint_files: u32,
    /// Demand files per document (NPS: a page and its embedded objects, 10).
    #[arg(long, default_value_t = 10, requires = "prefetch_files")]
    pub doc_files: u32,
    /// Clients the demand is dealt to (Fig. 13(c): 2).
    #[arg(long, default_value_t = 2, requires = "prefetch_files")]
    pub clients: u32,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Replay a workload in the ns-2 reference model's format (`id start_s src size_bytes`) on
    /// paper 003's chain, printing per-transfer results in the reference's columns.
    Replay(Replay),
    /// Run a full-factorial design (e.g. experiments/003/table1.toml) on every core; finished
    /// runs are kept, so an interrupted design resumes.
    Design(Design),
    /// Compare two runs of the same transfers (transfers.csv from `slipstream sim`, or the CSV an
    /// --export-ns2 script writes): transfers finishing at the same time, and per source the
    /// mean latencies and the Kolmogorov-Smirnov distance against its 5 % critical value.
    Compare(Compare),
    /// Riptide (paper 004) on a simulated 1,100-node transit-stub network: the interdomain
    /// crossings of an update against the number of replicas (Fig. 22) and a flash crowd
    /// spread over replicas, with the node's own decisions.
    Riptide(crate::riptide_sim::Riptide),
}

#[derive(Debug, clap::Args)]
pub struct Compare {
    /// First run (A).
    pub a: PathBuf,
    /// Second run (B).
    pub b: PathBuf,
    /// Latencies within this many microseconds count as the same.
    #[arg(long, default_value_t = 2.0)]
    pub tolerance_us: f64,
}

#[derive(Debug, clap::Args)]
pub struct Design {
    /// Design file: `base = "scenario.toml"` and a `[factors]` table.
    pub design: PathBuf,
    /// Output directory: runs/NAME/{scenario.toml,transfers.csv,summary.json} and results.csv.
    #[arg(long)]
    pub out: PathBuf,
    /// Parallel runs [default: one per core].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also draw each run's latency against size by source (runs/NAME/latency.svg).
    #[arg(long)]
    pub plot: bool,
}

#[derive(Debug, clap::Args)]
pub struct Replay {
    /// Workload file.
    pub workload: PathBuf,
    /// TCP defaults of this ns-2 era: 2.35 (minrto 0.2 s, initial RTO 3 s) or 2.26 (1 s, 6 s).
    #[arg(long, default_value = "2.35")]
    pub era: String,
    /// DropTail limit on every link, in packets.
    #[arg(long, default_value_t = 100)]
    pub qlim: usize,
    /// Model the handshake (ns-2 `syn_`): one extra round trip, cwnd starting at 1.
    #[arg(long)]
    pub syn: bool,
    /// Link capacities L1 (client-child), L2 (child-parent), L3 (parent-origin), as ns-2 writes
    /// them: 10Mb, 1.5Mb, 100kb.
    #[arg(long, value_parser = slipstream_sim::scenario::bandwidth, default_value = "10Mb")]
    pub c1: u64,
    #[arg(long, value_parser = slipstream_sim::scenario::bandwidth, default_value = "10Mb")]
    pub c2: u64,
    #[arg(long, value_parser = slipstream_sim::scenario::bandwidth, default_value = "10Mb")]
    pub c3: u64,
    /// Link delays L1, L2, L3, e.g. 1ms.
    #[arg(long, value_parser = slipstream_sim::scenario::delay, default_value = "1ms")]
    pub d1: slipstream_sim::time::Nanos,
    #[arg(long, value_parser = slipstream_sim::scenario::delay, default_value = "5ms")]
    pub d2: slipstream_sim::time::Nanos,
    #[arg(long, value_parser = slipstream_sim::scenario::delay, default_value = "30ms")]
    pub d3: slipstream_sim::time::Nanos,
    /// Write the results here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a packet trace here (`+`/`-`/`d` TIME FROM TO tcp|ack SIZE FLOW SEQ, ns-2's fields
    /// and node numbers), for comparing with ns-2's `trace=` output.
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    match (args.command.take(), args.scenario.clone()) {
        (Some(Sub::Replay(r)), _) => replay(r),
        (Some(Sub::Design(d)), _) => design(d),
        (Some(Sub::Compare(c)), _) => compare(c),
        (Some(Sub::Riptide(r)), _) => crate::riptide_sim::run(r),
        (None, Some(scenario)) => run_scenario(&scenario, &args),
        (None, None) => anyhow::bail!("give a scenario file (slipstream sim SCENARIO.toml --out DIR) or a subcommand (see --help)"),
    }
}

fn run_scenario(path: &std::path::Path, args: &Args) -> anyhow::Result<()> {
    let (out, plot) = (args.out.as_deref(), args.plot);
    let mut plan = slipstream_sim::scenario::Scenario::load(path)?;
    if let Some(script) = &args.export_ns2 {
        anyhow::ensure!(
            !plan.uses_nice(),
            "{}: ns-2 has no TCP Nice agent, so a scenario with [tcp.nice] cannot be exported",
            path.display()
        );
        let network = &plan.network;
        let labelled: Vec<_> = plan
            .transfers()
            .into_iter()
            .zip(&plan.jobs)
            .map(|(t, j)| (t, reference::source_name(j.src)))
            .collect();
        let text = slipstream_sim::export::ns2_script(&slipstream_sim::export::Export {
            name: &plan.name,
            network,
            tcp: &plan.tcp,
            era: plan.era,
            transfers: &labelled,
            grace: reference::GRACE,
        });
        std::fs::write(script, text)
            .with_context(|| format!("cannot write {}", script.display()))?;
        eprintln!(
            "wrote {} ({} transfers); run it with: ns {} out=transfers-ns2.csv",
            script.display(),
            plan.jobs.len(),
            script.display()
        );
        if out.is_none() && args.dump_workload.is_none() {
            return Ok(());
        }
    }
    if let Some(dump) = args.dump_workload.as_deref() {
        std::fs::write(dump, reference::format_workload(&plan.jobs))
            .with_context(|| format!("cannot write {}", dump.display()))?;
    }
    let options = match args.prefetch.prefetch_files {
        Some(files) => {
            let demand = plan.jobs.len();
            let options = add_prefetch(&mut plan, path, &args.prefetch, files)?;
            eprintln!(
                "{demand} demand transfers; {} prefetch connections of up to {} files each",
                plan.jobs.len() - demand,
                args.prefetch.hint_files
            );
            options
        }
        None => plan
            .jobs
            .iter()
            .map(|j| slipstream_sim::net::Options {
                congestion: plan.congestion_of(j.src),
                after: None,
            })
            .collect(),
    };
    let started = std::time::Instant::now();
    let mut trace = Vec::new();
    let run = plan.run_with(&options, args.trace.as_ref().map(|_| &mut trace));
    let wall = started.elapsed().as_secs_f64();
    if let Some(path) = &args.trace {
        let text: String = trace.iter().map(|e| format!("{e}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let (csv, summary) =
        slipstream_lab::output::summarise(&plan.name, &plan.jobs, &run, wall, plan.achieved);
    println!(
        "{:<8} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "source", "n", "mean s", "median s", "p90 s", "max s"
    );
    for (name, s) in [
        ("child", &summary.child),
        ("parent", &summary.parent),
        ("origin", &summary.origin),
        ("all", &summary.all),
    ] {
        println!(
            "{name:<8} {:>6} {:>10.4} {:>10.4} {:>10.4} {:>10.4}",
            s.n, s.mean_s, s.median_s, s.p90_s, s.max_s
        );
    }
    if let Some(a) = &summary.hit_stage {
        println!(
            "caches: child served {:.1} % of requests ({:.1} % of bytes), parent {:.1} % ({:.1} %)",
            100.0 * a.child_hit_ratio,
            100.0 * a.child_byte_hit_ratio,
            100.0 * a.parent_hit_ratio,
            100.0 * a.parent_byte_hit_ratio
        );
    }
    eprintln!(
        "{} of {} transfers, {} drops, {} events in {wall:.3} s",
        summary.completed, summary.transfers, summary.drops, summary.events
    );
    if let Some(dir) = out {
        slipstream_lab::output::write(dir, &csv, &summary)
            .with_context(|| format!("cannot write results under {}", dir.display()))?;
        eprintln!("wrote {}/transfers.csv and summary.json", dir.display());
        if plot {
            latency_plot(&dir.join("latency.svg"), &plan, &run)?;
            eprintln!("wrote {}/latency.svg", dir.display());
        }
    }
    Ok(())
}

/// Adds paper 000's prefetching (see [`Prefetch`]) to `plan`'s demand transfers; returns each
/// job's run options, the prefetch lists chained per client.
fn add_prefetch(
    plan: &mut slipstream_sim::scenario::Plan,
    path: &std::path::Path,
    p: &Prefetch,
    files: u32,
) -> anyhow::Result<Vec<slipstream_sim::net::Options>> {
    use rand::SeedableRng;
    use slipstream_sim::net::Options;
    use slipstream_sim::reference::Job;
    anyhow::ensure!(
        p.hint_files > 0 && p.doc_files > 0 && p.clients > 0,
        "--hint-files, --doc-files and --clients must be at least 1"
    );
    anyhow::ensure!(
        plan.jobs.iter().all(|j| j.src == 3),
        "{}: with --prefetch-files the scenario's transfers are the demand, served by the origin: set [hits] child = 0 and parent = 0",
        path.display()
    );
    // The scenario's own size model (planning has already validated it).
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let scenario: slipstream_sim::scenario::Scenario = toml::from_str(&text)?;
    let sizes = scenario.workload.size_model().sampler()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(scenario.seed ^ 0x000f_e7c4);
    let mut options: Vec<Options> = plan
        .jobs
        .iter()
        .map(|j| Options {
            congestion: plan.congestion_of(j.src),
            after: None,
        })
        .collect();
    let prefetch = plan.congestion_of(2);
    let demand = plan.jobs.len();
    let mut next_id = plan.jobs.iter().map(|j| j.id + 1).max().unwrap_or(0);
    let clients = p.clients as usize;
    let mut last_list: Vec<Option<usize>> = vec![None; clients];
    let mut in_document = vec![0u32; clients];
    for i in 0..demand {
        let client = i % clients;
        in_document[client] += 1;
        if in_document[client] < p.doc_files {
            continue;
        }
        in_document[client] = 0;
        // The document is complete: prefetch after its last file's request.
        let start_s = plan.jobs[i].start_s;
        let mut left = files;
        while left > 0 {
            let n = left.min(p.hint_files);
            left -= n;
            let size = (0..n).map(|_| sizes.sample(&mut rng)).sum();
            options.push(Options {
                congestion: prefetch,
                after: last_list[client],
            });
            last_list[client] = Some(plan.jobs.len());
            plan.jobs.push(Job {
                id: next_id,
                start_s,
                src: 2,
                size,
            });
            next_id += 1;
        }
    }
    Ok(options)
}

/// Paper 003 Figure 2: latency against transfer size in packets, one series per source.
fn latency_plot(
    path: &std::path::Path,
    plan: &slipstream_sim::scenario::Plan,
    run: &slipstream_sim::net::Run,
) -> anyhow::Result<()> {
    use slipstream_lab::chart::{self, Axes, Series};
    let src_of: std::collections::HashMap<u64, u8> =
        plan.jobs.iter().map(|j| (j.id, j.src)).collect();
    let mut series: Vec<Series> = ["Child Proxy", "Parent Proxy", "Web Server"]
        .iter()
        .map(|n| Series {
            name: (*n).into(),
            points: Vec::new(),
        })
        .collect();
    for r in &run.results {
        let src = usize::from(src_of.get(&r.transfer.id).copied().unwrap_or(3).clamp(1, 3)) - 1;
        let latency = slipstream_sim::time::to_secs_f64(r.received - r.transfer.start);
        series[src]
            .points
            .push((f64::from(r.segments), latency.max(1e-6)));
    }
    series.retain(|s| !s.points.is_empty());
    let axes = Axes {
        title: format!("Transfer latency vs size: {}", plan.name),
        x_label: "transfer size (packets)".into(),
        y_label: "transfer latency (s)".into(),
        log_x: true,
    };
    Ok(chart::scatter_loglog(path, &axes, &series)?)
}

fn design(d: Design) -> anyhow::Result<()> {
    use slipstream_lab::design;
    let runs = design::expand(&d.design)?;
    let threads = d
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = indicatif::ProgressBar::new(runs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} runs ({eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    let dir = d.design.parent().unwrap_or(std::path::Path::new("."));
    let results = design::run_all(&runs, dir, &d.out, threads, &|done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    let csv = design::results_csv(&results);
    std::fs::write(d.out.join("results.csv"), &csv)
        .with_context(|| format!("cannot write {}", d.out.join("results.csv").display()))?;
    let transfers: usize = results.iter().map(|(_, s)| s.completed).sum();
    let sim_wall: f64 = results.iter().map(|(_, s)| s.wall_s).sum();
    let events: u64 = results.iter().map(|(_, s)| s.events).sum();
    eprintln!(
        "{} runs ({} transfers, {} events) in {:.1} s wall on {threads} threads; simulation time summed over runs {:.1} s ({:.1} M events/s per thread)",
        results.len(),
        transfers,
        events,
        started.elapsed().as_secs_f64(),
        sim_wall,
        events as f64 / sim_wall.max(1e-9) / 1e6
    );
    eprintln!("results: {}", d.out.join("results.csv").display());
    if d.plot {
        for (run, _) in &results {
            let dir = d.out.join("runs").join(&run.name);
            let csv = std::fs::read_to_string(dir.join("transfers.csv"))
                .with_context(|| format!("cannot read {}", dir.display()))?;
            plot_csv(&dir.join("latency.svg"), &run.name, &csv)?;
        }
        let charts = main_effects(&d.out, &results)?;
        eprintln!(
            "plots: {}/runs/*/latency.svg and {charts} main-effect chart(s) {}/main-effect-*.svg",
            d.out.display(),
            d.out.display()
        );
    }
    Ok(())
}

/// One bar chart per factor with more than one level: the mean transfer latency at each level,
/// averaged over every run at that level (the design's main effects).
fn main_effects(
    out: &std::path::Path,
    results: &[(
        slipstream_lab::design::RunSpec,
        slipstream_lab::output::Summary,
    )],
) -> anyhow::Result<usize> {
    let Some((first, _)) = results.first() else {
        return Ok(0);
    };
    let mut charts = 0;
    for (i, (factor, _)) in first.levels.iter().enumerate() {
        let mut levels: Vec<(String, f64, usize)> = Vec::new();
        for (run, summary) in results {
            let Some((_, level)) = run.levels.get(i) else {
                continue;
            };
            match levels.iter_mut().find(|(l, _, _)| l == level) {
                Some(entry) => {
                    entry.1 += summary.all.mean_s;
                    entry.2 += 1;
                }
                None => levels.push((level.clone(), summary.all.mean_s, 1)),
            }
        }
        if levels.len() < 2 {
            continue;
        }
        let bars: Vec<(String, f64)> = levels
            .into_iter()
            .map(|(l, sum, n)| (l, sum / n as f64))
            .collect();
        let file: String = factor
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        slipstream_lab::chart::bar_chart(
            &out.join(format!("main-effect-{file}.svg")),
            &format!("Mean transfer latency by {factor} (averaged over the other factors)"),
            "mean latency (s)",
            &bars,
        )?;
        charts += 1;
    }
    Ok(charts)
}

/// Latency against size in packets by source, from a run's transfers.csv.
fn plot_csv(path: &std::path::Path, name: &str, csv: &str) -> anyhow::Result<()> {
    let mut points: std::collections::BTreeMap<&str, Vec<(f64, f64)>> =
        std::collections::BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if let (Some(source), Some(latency), Some(segments)) = (f.get(1), f.get(5), f.get(6)) {
            if let (Ok(latency), Ok(segments)) = (latency.parse::<f64>(), segments.parse::<f64>()) {
                points
                    .entry(source)
                    .or_default()
                    .push((segments, latency.max(1e-6)));
            }
        }
    }
    // Fixed order, so every chart colours the sources alike.
    let ordered = ["child", "parent", "origin"]
        .iter()
        .map(|s| ((*s).to_owned(), points.remove(s).unwrap_or_default()))
        .collect();
    draw_latency(path, name, ordered)
}

fn draw_latency(
    path: &std::path::Path,
    name: &str,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> anyhow::Result<()> {
    use slipstream_lab::chart::{self, Axes, Series};
    let label = |s: &str| match s {
        "child" => "Child Proxy".to_owned(),
        "parent" => "Parent Proxy".to_owned(),
        "origin" => "Web Server".to_owned(),
        other => other.to_owned(),
    };
    let series: Vec<Series> = series
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(s, points)| Series {
            name: label(&s),
            points,
        })
        .collect();
    let axes = Axes {
        title: format!("Transfer latency vs size: {name}"),
        x_label: "transfer size (packets)".into(),
        y_label: "transfer latency (s)".into(),
        log_x: true,
    };
    Ok(chart::scatter_loglog(path, &axes, &series)?)
}

fn replay(r: Replay) -> anyhow::Result<()> {
    let era = slipstream_sim::Era::parse(&r.era)
        .with_context(|| format!("--era must be 2.35 or 2.26, not `{}`", r.era))?;
    let tcp = TcpConfig {
        syn: r.syn,
        ..era.config()
    };
    let text = std::fs::read_to_string(&r.workload)
        .with_context(|| format!("cannot read {}", r.workload.display()))?;
    let jobs = reference::parse(&text, &r.workload.display().to_string())?;
    let mut chain = Chain::default();
    for (link, (bps, delay)) in
        chain
            .links
            .iter_mut()
            .zip([(r.c1, r.d1), (r.c2, r.d2), (r.c3, r.d3)])
    {
        link.queue_limit = r.qlim;
        link.bits_per_second = bps;
        link.delay = delay;
    }
    let started = std::time::Instant::now();
    let mut trace = Vec::new();
    let run = reference::run_traced(
        &chain,
        tcp,
        &jobs,
        reference::GRACE,
        r.trace.as_ref().map(|_| &mut trace),
    );
    let elapsed = started.elapsed();
    if let Some(path) = &r.trace {
        let text: String = trace.iter().map(|e| format!("{e}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let out = reference::format(&run, &jobs);
    match &r.out {
        Some(path) => {
            std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?
        }
        None => print!("{out}"),
    }
    eprintln!(
        "{} of {} transfers completed, {} drops, {} events in {:.3} s ({:.1} M events/s)",
        run.results.len(),
        jobs.len(),
        run.drops,
        run.events,
        elapsed.as_secs_f64(),
        run.events as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
    );
    Ok(())
}

fn compare(c: Compare) -> anyhow::Result<()> {
    use slipstream_sim::compare;
    let read = |p: &std::path::Path| -> anyhow::Result<Vec<compare::Row>> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        Ok(compare::parse(&text, &p.display().to_string())?)
    };
    let (a, b) = (read(&c.a)?, read(&c.b)?);
    anyhow::ensure!(
        c.tolerance_us.is_finite() && c.tolerance_us >= 0.0,
        "--tolerance-us must be a non-negative number"
    );
    let text = format!(
        "A = {}\nB = {}\n{}",
        c.a.display(),
        c.b.display(),
        compare::compare(&a, &b, c.tolerance_us * 1e-6)
    );
    write_stdout(&text)
}

/// Writes to standard output; a reader that went away (`| head`) is not an error.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
