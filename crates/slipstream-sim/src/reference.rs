//! Paper 003's Figure 1 chain and the workload format of the ns-2 reference model
//! (`tests/it/ns2/proxyhier.tcl` in this crate), so that both engines run identical transfers and
//! their outputs can be compared line by line.
//!
//! Workload lines: `id start_s src size_bytes`, with `src` 1 = child proxy, 2 = parent proxy,
//! 3 = origin; `#` starts a comment. Output lines: `id src size npkts start t_rx t_ack lat_rx
//! lat_ack nrexmitpack`, as the reference writes them.

use std::fmt::Write as _;

use crate::net::{LinkSpec, Network, NodeId, Run, Transfer};
use crate::tcp::TcpConfig;
use crate::time::{from_secs_f64, to_secs_f64, Nanos, MILLI, SECOND};

/// The source name of a job's `src`: 1 = `child`, 2 = `parent`, anything else `origin`.
pub fn source_name(src: u8) -> &'static str {
    match src {
        1 => "child",
        2 => "parent",
        _ => "origin",
    }
}

/// The chain client – child – parent – origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// Links L1 (client–child), L2 (child–parent), L3 (parent–origin).
    pub links: [LinkSpec; 3],
}

impl Default for Chain {
    /// The paper's baseline (and the reference's defaults): 10 Mb/s; 1, 5, 30 ms; 100 packets.
    fn default() -> Self {
        let link = |ms: u64| LinkSpec {
            bits_per_second: 10_000_000,
            delay: ms * MILLI,
            queue_limit: 100,
        };
        Chain {
            links: [link(1), link(5), link(30)],
        }
    }
}

/// One line of a workload file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job {
    /// Transfer id.
    pub id: u64,
    /// Start time in seconds.
    pub start_s: f64,
    /// 1 = child, 2 = parent, 3 = origin.
    pub src: u8,
    /// Payload bytes.
    pub size: u64,
}

/// A malformed workload line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct ParseError {
    /// File name for messages.
    pub source_name: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a workload file.
pub fn parse(text: &str, source_name: &str) -> Result<Vec<Job>, ParseError> {
    let mut jobs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| ParseError {
            source_name: source_name.to_owned(),
            line: i + 1,
            message,
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 {
            return Err(err(format!(
                "expected `id start_s src size_bytes`, found {} field(s)",
                fields.len()
            )));
        }
        let id = fields[0]
            .parse()
            .map_err(|_| err(format!("id `{}` is not a whole number", fields[0])))?;
        let start_s: f64 = fields[1]
            .parse()
            .map_err(|_| err(format!("start `{}` is not a number of seconds", fields[1])))?;
        if !start_s.is_finite() || start_s < 0.0 {
            return Err(err(format!(
                "start `{}` must be a non-negative time",
                fields[1]
            )));
        }
        let src = match fields[2] {
            "1" => 1,
            "2" => 2,
            "3" => 3,
            other => {
                return Err(err(format!(
                    "src `{other}` must be 1 (child), 2 (parent) or 3 (origin)"
                )))
            }
        };
        let size = fields[3].parse().map_err(|_| {
            err(format!(
                "size `{}` is not a whole number of bytes",
                fields[3]
            ))
        })?;
        jobs.push(Job {
            id,
            start_s,
            src,
            size,
        });
    }
    Ok(jobs)
}

/// Writes `jobs` in the workload format [`parse`] reads (start times to the nanosecond, as
/// the simulator holds them).
pub fn format_workload(jobs: &[Job]) -> String {
    let mut text = String::from("# id start_s src size_bytes  (src 1=child 2=parent 3=origin)\n");
    for j in jobs {
        let _ = writeln!(text, "{} {:.9} {} {}", j.id, j.start_s, j.src, j.size);
    }
    text
}

/// Runs `jobs` on `chain`, stopping `grace` after the last start.
pub fn run(chain: &Chain, tcp: TcpConfig, jobs: &[Job], grace: Nanos) -> Run {
    run_traced(chain, tcp, jobs, grace, None)
}

/// [`run`], recording packet events into `trace` when given (nodes numbered as the reference
/// model numbers them: 0 client, 1 child, 2 parent, 3 origin).
pub fn run_traced(
    chain: &Chain,
    tcp: TcpConfig,
    jobs: &[Job],
    grace: Nanos,
    trace: Option<&mut Vec<crate::net::TraceEvent>>,
) -> Run {
    let (net, transfers) = network(chain, jobs);
    let last = transfers.iter().map(|t| t.start).max().unwrap_or(0);
    // Every node exists and the chain connects them, so the run cannot fail.
    net.run_traced(&transfers, tcp, last + grace, trace)
        .unwrap_or(Run {
            results: Vec::new(),
            drops: 0,
            events: 0,
        })
}

/// The chain as a network (nodes 0 client, 1 child, 2 parent, 3 origin, as the reference
/// numbers them) and `jobs` as transfers over it.
pub fn network(chain: &Chain, jobs: &[Job]) -> (Network, Vec<Transfer>) {
    let (net, roles) = chain.network();
    (net, transfers(&roles, jobs))
}

impl Chain {
    /// The chain as a network, and its nodes in role order: client, child, parent, origin.
    pub fn network(&self) -> (Network, [NodeId; 4]) {
        let mut net = Network::default();
        let nodes: [NodeId; 4] = [net.node(), net.node(), net.node(), net.node()];
        for (i, spec) in self.links.iter().enumerate() {
            net.duplex(nodes[i], nodes[i + 1], *spec);
        }
        (net, nodes)
    }
}

/// `jobs` as transfers to `roles[0]` (the clients) from `roles[src]` (1 child, 2 parent,
/// 3 origin).
pub fn transfers(roles: &[NodeId; 4], jobs: &[Job]) -> Vec<Transfer> {
    jobs.iter()
        .map(|j| Transfer {
            id: j.id,
            server: roles[usize::from(j.src.clamp(1, 3))],
            client: roles[0],
            bytes: j.size,
            start: from_secs_f64(j.start_s),
        })
        .collect()
}

/// The results in the reference's output format, ordered by transfer id.
pub fn format(run: &Run, jobs: &[Job]) -> String {
    let src_of: std::collections::HashMap<u64, u8> = jobs.iter().map(|j| (j.id, j.src)).collect();
    let mut results = run.results.clone();
    results.sort_by_key(|r| r.transfer.id);
    let mut out = String::from("# id src size npkts start t_rx t_ack lat_rx lat_ack nrexmitpack\n");
    for r in results {
        let start = to_secs_f64(r.transfer.start);
        let (rx, ack) = (to_secs_f64(r.received), to_secs_f64(r.acked));
        let _ = writeln!(
            out,
            "{} {} {} {} {:.6} {:.6} {:.6} {:.6} {:.6} {}",
            r.transfer.id,
            src_of.get(&r.transfer.id).copied().unwrap_or(0),
            r.transfer.bytes,
            r.segments,
            start,
            rx,
            ack,
            rx - start,
            ack - start,
            r.retransmissions
        );
    }
    out
}

/// Default time allowed after the last start (the reference uses 600 s).
pub const GRACE: Nanos = 600 * SECOND;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_bad_lines() {
        let jobs = parse("# comment\n0 0.5 3 1000\n1 1.0 1 10\n", "w").expect("valid");
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[0],
            Job {
                id: 0,
                start_s: 0.5,
                src: 3,
                size: 1000
            }
        );
        assert_eq!(
            parse("0 0.5 4 10\n", "w").unwrap_err().to_string(),
            "w:1: src `4` must be 1 (child), 2 (parent) or 3 (origin)"
        );
        assert_eq!(parse("\n0 x 1 10\n", "w").unwrap_err().line, 2);
        assert!(parse("0 1 1\n", "w").is_err());
    }

    #[test]
    fn workload_files_round_trip() {
        let jobs = parse("0 0.5 3 1000\n1 1.000000001 1 10\n", "w").expect("valid");
        assert_eq!(
            parse(&format_workload(&jobs), "again").expect("valid"),
            jobs
        );
    }

    #[test]
    fn runs_the_chain_in_the_reference_format() {
        let jobs = parse("0 0.0 3 1000\n1 0.1 1 100\n", "w").expect("valid");
        let out = format(
            &run(&Chain::default(), TcpConfig::ns2_235(), &jobs, GRACE),
            &jobs,
        );
        let lines: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("0 3 1000 2 0.000000 "), "{}", lines[0]);
        assert!(lines[1].starts_with("1 1 100 1 0.100000 "), "{}", lines[1]);
    }
}
