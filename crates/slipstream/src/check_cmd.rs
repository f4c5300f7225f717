//! `slipstream check-config FILE`: reads a node's file as the commands would (every table,
//! every field, and the checks run at start-up, such as the served directory existing) and
//! says what is wrong and where, without starting anything (nginx's `-t`).

use std::path::PathBuf;

use anyhow::Context;
use slipstream_node::config::{ConfigFile, Overrides};

/// The file to check.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's TOML config file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let file = ConfigFile::load(&args.file)?;
    let none = Overrides::default();
    let tables = file.tables();
    for table in &tables {
        let what = || format!("{}: [{table}]", args.file.display());
        match *table {
            "serve" => {
                let c: slipstream_origin::Config = file.section(table, &none)?;
                // A file for `serve DIR` may leave the root to the command line.
                if c.root.is_some() {
                    c.validate().with_context(what)?;
                }
            }
            "proxy" => {
                let c: slipstream_proxy::Config = file.section(table, &none)?;
                c.validate().with_context(what)?;
            }
            "prefetch" => {
                let c: slipstream_nps::Config = file.section(table, &none)?;
                c.validate().with_context(what)?;
            }
            // Tables of capabilities still to come are accepted by name only.
            _ => {}
        }
    }
    println!(
        "{}: ok ({})",
        args.file.display(),
        if tables.is_empty() {
            "no tables: every command runs on its defaults".to_owned()
        } else {
            tables
                .iter()
                .map(|t| format!("[{t}]"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    Ok(())
}
