//! `slipstream sim riptide`: Riptide (paper 004) on a simulated 1,100-node transit-stub network,
//! with the node's own decisions ([`slipstream_coop::decide`]): Fig. 22 (interdomain crossings
//! of an update against the number of replicas) and a flash crowd spread over replicas
//! (Figs. 18–19 at scale).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use slipstream_coop::sim::{self, AllPaths};
use slipstream_lab::chart::{self, Axes, Series};
use slipstream_sim::transit::{EdgeKind, Params, Topology};

#[derive(Debug, clap::Args)]
pub struct Riptide {
    /// Directory for fig22.csv, flash-crowd.csv, topology.json and their charts.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the topology and of every placement.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Placements averaged for each number of replicas.
    #[arg(long, default_value_t = 20)]
    pub trials: u32,
    /// Numbers of replicas (Fig. 22's x axis), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,5,10,20,50,100,200,400"
    )]
    pub replicas: Vec<usize>,
    /// Flash crowd: client nodes in the organisation's stub.
    #[arg(long, default_value_t = 20)]
    pub clients: usize,
    /// Flash crowd: requests for the hot object.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Flash crowd: the manager spreads a hot object over this many more nodes.
    #[arg(long, default_value_t = 4)]
    pub spread_copies: usize,
    /// Flash crowd: an object is hot at this many hints.
    #[arg(long, default_value_t = 50)]
    pub hot_after: u32,
}

pub fn run(r: Riptide) -> anyhow::Result<()> {
    anyhow::ensure!(r.trials > 0, "--trials must be at least 1");
    anyhow::ensure!(
        !r.replicas.is_empty() && r.replicas.iter().all(|&n| n > 0),
        "--replicas needs positive counts"
    );
    anyhow::ensure!(
        r.clients > 0 && r.requests > 0,
        "--clients and --requests must be positive"
    );
    std::fs::create_dir_all(&r.out)
        .with_context(|| format!("cannot create {}", r.out.display()))?;
    let started = std::time::Instant::now();
    let params = Params::riptide();
    let topology = Topology::generate(&params, r.seed)?;
    let count = |k: EdgeKind| topology.edges().iter().filter(|e| e.kind == k).count();
    let summary = serde_json::json!({
        "seed": r.seed,
        "nodes": topology.nodes(),
        "stubs": topology.stubs().len(),
        "stub_sizes": topology.stubs().iter().map(Vec::len).collect::<Vec<_>>(),
        "edges": {
            "stub_stub": count(EdgeKind::StubStub),
            "stub_transit": count(EdgeKind::StubTransit),
            "transit_transit": count(EdgeKind::TransitTransit),
        },
        "bandwidth_bps": [params.bandwidth_bps.0, params.bandwidth_bps.1, params.bandwidth_bps.2],
        "stub_latency_ms": [params.stub_latency_ms.0, params.stub_latency_ms.1],
        "interdomain_latency_ms": [params.interdomain_latency_ms.0, params.interdomain_latency_ms.1],
    });
    write(
        &r.out,
        "topology.json",
        &serde_json::to_string_pretty(&summary)?,
    )?;
    eprintln!(
        "topology: {} nodes in {} stubs, seed {}; Fig. 22: {} counts × {} placements",
        topology.nodes(),
        topology.stubs().len(),
        r.seed,
        r.replicas.len(),
        r.trials
    );

    let rows = sim::fig22(&topology, &r.replicas, r.trials, r.seed);
    let mut csv = String::from(
        "replicas,trials,stubs,direct,gossipsub,gossipsub_first,gossipsub_messages,tree,product_tree,product_tree_lan,optimal\n",
    );
    for row in &rows {
        let m = &row.mean;
        writeln!(
            csv,
            "{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2}",
            row.replicas,
            row.trials,
            m.stubs,
            m.direct,
            m.gossipsub,
            m.gossipsub_first,
            m.gossipsub_messages,
            m.tree,
            m.product_tree,
            m.product_tree_lan,
            m.optimal
        )?;
    }
    write(&r.out, "fig22.csv", &csv)?;
    let line = |name: &str, f: fn(&sim::MeanCrossings) -> f64| Series {
        name: name.to_owned(),
        points: rows
            .iter()
            .map(|row| (row.replicas as f64, f(&row.mean)))
            .collect(),
    };
    chart::line_chart(
        &r.out.join("fig22.svg"),
        &Axes {
            title: "Interdomain crossings of one update (004 Fig. 22)".into(),
            x_label: "replicas".into(),
            y_label: "interdomain link crossings".into(),
            log_x: true,
        },
        &[
            line("direct (a copy per replica)", |m| m.direct),
            line("gossipsub mesh (slipstream node)", |m| m.gossipsub),
            line("gossipsub, first deliveries", |m| m.gossipsub_first),
            line("locality-aware tree (omniscient)", |m| m.tree),
            line("slipstream node's push tree (its own peers)", |m| {
                m.product_tree
            }),
            line("push tree, LAN peers known", |m| m.product_tree_lan),
            line("optimal (shared routes)", |m| m.optimal),
        ],
    )?;
    println!(
        "Fig. 22: mean interdomain crossings of one update, {} placements each",
        r.trials
    );
    println!(
        "{:>8} {:>7} {:>8} {:>10} {:>8} {:>7} {:>8} {:>8} {:>8}",
        "replicas",
        "stubs",
        "direct",
        "gossipsub",
        "g.first",
        "tree",
        "product",
        "p.lan",
        "optimal"
    );
    for row in &rows {
        let m = &row.mean;
        println!(
            "{:>8} {:>7.1} {:>8.1} {:>10.1} {:>8.1} {:>7.1} {:>8.1} {:>8.1} {:>8.1}",
            row.replicas,
            m.stubs,
            m.direct,
            m.gossipsub,
            m.gossipsub_first,
            m.tree,
            m.product_tree,
            m.product_tree_lan,
            m.optimal
        );
    }

    let all = AllPaths::new(&topology);
    let f = sim::flash_crowd(
        &topology,
        &all,
        r.clients,
        r.requests,
        r.spread_copies,
        r.hot_after,
        r.seed,
    );
    let mut csv = String::from("rank,node,served\n");
    for (i, (node, n)) in f.served.iter().enumerate() {
        writeln!(csv, "{},{node},{n}", i + 1)?;
    }
    writeln!(csv, "origin,origin,{}", f.origin)?;
    write(&r.out, "flash-crowd.csv", &csv)?;
    let bars: Vec<(String, f64)> = f
        .served
        .iter()
        .map(|(node, n)| (format!("node {node}"), *n as f64))
        .collect();
    chart::bar_chart(
        &r.out.join("flash-crowd.svg"),
        "Requests served per replica in a flash crowd (004 Figs. 18–19, simulated)",
        "requests served",
        &bars,
    )?;
    println!(
        "flash crowd: {} requests from {} clients; hot at request {}; {} replicas; origin {}; per replica: {}",
        f.requests,
        r.clients,
        f.spread_at.map_or("never".into(), |i| i.to_string()),
        f.replicas,
        f.origin,
        f.served
            .iter()
            .map(|(_, n)| n.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!(
        "done in {:.1} s; results in {}",
        started.elapsed().as_secs_f64(),
        r.out.display()
    );
    Ok(())
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}
