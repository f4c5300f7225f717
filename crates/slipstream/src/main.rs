//! The `slipstream` binary: parses the command line, loads config, wires the library crates
//! together and maps errors to exit codes. The logic lives in the library crates.

mod bench_cmd;
mod cachesim_cmd;
mod check_cmd;
mod demo;
mod experiment_cmd;
mod get_cmd;
mod node_cmd;
mod predict_cmd;
mod proxy_cmd;
mod reload_cmd;
mod riptide_sim;
mod serve;
mod sim_cmd;
mod workload_cmd;

use clap::{Parser, Subcommand};

/// slipstream makes websites fast and reliable.
#[derive(Debug, Parser)]
#[command(name = "slipstream", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole system on loopback with a bundled sample site and print its URLs.
    Demo(demo::Args),
    /// Serve a directory with the adaptive-level memory cache (paper 002).
    Serve(serve::Args),
    /// A caching proxy: reverse (--origin) or forward, with parents for hierarchies.
    Proxy(proxy_cmd::Args),
    /// Load-test an HTTP server: closed loop with N clients, or open loop at a rate.
    Bench(bench_cmd::Args),
    /// The packet-level simulator of web transfers (paper 003).
    Sim(sim_cmd::Args),
    /// Replay a trace through cache policies without a network; print hit ratios.
    Cachesim(cachesim_cmd::Args),
    /// Generate workloads: paper 002's Table 1 file set, request traces, URL lists.
    Workload(workload_cmd::Args),
    /// Reproduce a paper's figures (JSON, SVG charts, markdown tables).
    Experiment(experiment_cmd::Args),
    /// A cooperative web cache node (Riptide, paper 004): browser proxy, cache, gateway,
    /// cache manager on libp2p.
    Node(node_cmd::Args),
    /// Check a node's config file without starting anything: file, line and field of each error.
    CheckConfig(check_cmd::Args),
    /// Check a node's config file, then ask the running node to reload it (SIGHUP).
    Reload(reload_cmd::Args),
    /// Fetch a URL from its fastest live replica, failing over (Web++'s client, paper 001).
    Get(get_cmd::Args),
    /// Score NPS's prefetch predictors (PPM, Markov, popularity) on a trace (paper 000).
    Predict(predict_cmd::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLIPSTREAM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never into a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Proxy(args) => proxy_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Cachesim(args) => cachesim_cmd::run(args),
        Command::Sim(args) => sim_cmd::run(args),
        Command::Workload(args) => workload_cmd::run(args),
        Command::Experiment(args) => experiment_cmd::run(args),
        Command::Node(args) => node_cmd::run(args),
        Command::CheckConfig(args) => check_cmd::run(args),
        Command::Reload(args) => reload_cmd::run(args),
        Command::Get(args) => get_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
