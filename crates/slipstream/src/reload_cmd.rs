//! `slipstream reload`: checks a node's config file as `check-config` does, then asks the nodes
//! it describes to reload (SIGHUP, to the process named in each table's `pid_file`, or to
//! `--pid`). A file that does not check out is not sent: the nodes run on unchanged.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use slipstream_node::config::{ConfigFile, Overrides};

/// Which node to reload.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's TOML config file: checked first; its tables' `pid_file` name the processes.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The process to signal, instead of the config's `pid_file`.
    #[arg(long)]
    pub pid: Option<i32>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut pid_files = Vec::new();
    if let Some(path) = &args.config {
        crate::check_cmd::run(crate::check_cmd::Args { file: path.clone() })?;
        let file = ConfigFile::load(path)?;
        let none = Overrides::default();
        for table in file.tables() {
            let pid_file = match table {
                "serve" => {
                    file.section::<slipstream_origin::Config>(table, &none)?
                        .pid_file
                }
                "proxy" => {
                    file.section::<slipstream_proxy::Config>(table, &none)?
                        .pid_file
                }
                _ => None,
            };
            pid_files.extend(pid_file.map(|p| (table, p)));
        }
    }
    let targets: Vec<(String, i32)> = match args.pid {
        Some(pid) => vec![(format!("process {pid}"), pid)],
        None if pid_files.is_empty() => bail!(
            "nothing to reload: give --pid, or --config with a file whose [serve] or [proxy] \
             table sets pid_file"
        ),
        None => pid_files
            .iter()
            .map(|(table, p)| {
                Ok((
                    format!("[{table}] (pid file {})", p.display()),
                    read_pid(p)?,
                ))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    for (what, pid) in targets {
        let target = rustix::process::Pid::from_raw(pid)
            .with_context(|| format!("{what}: {pid} is not a process id"))?;
        rustix::process::kill_process(target, rustix::process::Signal::HUP)
            .with_context(|| format!("{what}: signalling process {pid}"))?;
        println!("{what}: asked process {pid} to reload; it says how it went on its own output");
    }
    Ok(())
}

fn read_pid(path: &Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading the pid file {} (is the node running?)",
            path.display()
        )
    })?;
    text.trim()
        .parse()
        .with_context(|| format!("{}: not a process id: {:?}", path.display(), text.trim()))
}
