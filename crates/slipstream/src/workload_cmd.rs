//! `slipstream workload`: paper 002's Table 1 file set, traces and URL lists.

use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::Context;
use slipstream_workload::table1::{self, FileSetParams, Mix};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Paper 002's Table 1 workload (3,022 files, 281 MB, the paper's size/frequency mix).
    Table1(Table1),
}

#[derive(Debug, clap::Args)]
pub struct Table1 {
    /// Write the files under this directory.
    #[arg(long)]
    pub files: Option<PathBuf>,
    /// Write a request trace (TSV) here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Write a weighted URL list for `slipstream bench --urls` here.
    #[arg(long)]
    pub urls: Option<PathBuf>,
    /// Requests in the trace (the paper's log has 34,372).
    #[arg(long, default_value_t = 34_372)]
    pub requests: usize,
    /// The "modified" workload: this fraction of requests goes to the three largest files.
    #[arg(long)]
    pub hot_share: Option<f64>,
    /// Multiply every file size (1.0 = the paper's 281 MB).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Seed: the same seed gives the same files and requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Sub::Table1(t) = args.command;
    anyhow::ensure!(
        t.scale > 0.0 && t.scale.is_finite(),
        "--scale must be positive"
    );
    if let Some(h) = t.hot_share {
        anyhow::ensure!(
            (0.0..=1.0).contains(&h),
            "--hot-share must be between 0 and 1"
        );
    }
    let fs = table1::file_set(&FileSetParams {
        seed: t.seed,
        scale: t.scale,
        ..FileSetParams::default()
    });
    let mix = Mix {
        hot_share: t.hot_share,
        ..Mix::default()
    };
    eprintln!(
        "file set: {} files, {}",
        fs.files.len(),
        slipstream_units::human_bytes(fs.total_bytes())
    );
    if let Some(dir) = &t.files {
        fs.materialize(dir)
            .with_context(|| format!("cannot write files under {}", dir.display()))?;
        eprintln!("files written under {}", dir.display());
    }
    if let Some(path) = &t.trace {
        let requests = table1::requests(&fs, &mix, t.requests, 100.0, t.seed);
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        slipstream_workload::trace::write_tsv(BufWriter::new(file), &requests)?;
        eprintln!(
            "trace of {} requests written to {}",
            requests.len(),
            path.display()
        );
    }
    if let Some(path) = &t.urls {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        table1::write_url_list(&fs, &mix, BufWriter::new(file))?;
        eprintln!("URL list written to {}", path.display());
    }
    Ok(())
}
