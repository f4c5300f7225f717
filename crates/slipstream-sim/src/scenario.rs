//! Scenario files (`experiments/003/*.toml`): the topology of paper 003's Figure 1, TCP
//! settings (with the sources that send at low priority over TCP Nice), a workload (synthetic, with the paper's Table 2 statistics, or a workload file),
//! and the hit stage that decides which level serves each transfer (probabilistic hit ratios,
//! as in the paper). Every field has a default: an empty file is the paper's baseline.
//!
//! Errors name the file, the line and the field.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use serde::Deserialize;
use toml::Spanned;

use crate::net::{LinkSpec, Network, NodeId};
use crate::reference::{Chain, Job};
use crate::tcp::{Congestion, Era, TcpConfig};
use crate::time::Nanos;

/// A scenario as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// Name used in outputs.
    pub name: Option<String>,
    /// Seed of the workload and hit-stage RNG: the same seed gives the same run (default 1,
    /// as `experiments/003/baseline.toml` shows).
    pub seed: u64,
    /// Links of the chain.
    pub topology: Topology,
    /// TCP settings.
    pub tcp: Tcp,
    /// Transfers to run.
    pub workload: Workload,
    /// Which level serves each transfer: probabilities (`[hits]`), or real caches.
    pub hits: Hits,
    /// Real caches at the child and the parent: when present, they decide which level serves
    /// each request (and `hits.child` / `hits.parent` must not be given).
    pub caches: Option<Caches>,
}

/// The two proxies' caches (`slipstream-cache` engines).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caches {
    /// The child proxy's cache.
    pub child: CacheSpec,
    /// The parent proxy's cache.
    pub parent: CacheSpec,
}

/// One cache.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// Capacity: `64MB`, `512KB`, `1GB`.
    pub size: Spanned<String>,
    /// Policy as `slipstream cachesim` names them: `lru` (paper 003), `sieve`, `adaptive`,
    /// `total`, `small`, or `LEVEL+ALGORITHM`.
    #[serde(default = "lru")]
    pub policy: Spanned<String>,
}

fn lru() -> Spanned<String> {
    spanned("lru".into())
}

/// The network: by default the chain client – child – parent – origin (paper 003 Figure 1),
/// described by `capacity` and `delay`; or any graph, described by `links`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Topology {
    /// Capacities of L1, L2, L3, as ns-2 writes them ("10Mb").
    pub capacity: Spanned<Vec<String>>,
    /// Propagation delays of L1, L2, L3 ("1ms").
    pub delay: Spanned<Vec<String>>,
    /// DropTail limit on every link, packets (paper 003: 100); a link may set its own.
    pub queue: Spanned<i64>,
    /// A graph instead of the chain: node names, in order (their numbers in traces and in
    /// the ns-2 export).
    pub nodes: Option<Spanned<Vec<String>>>,
    /// The graph's duplex links.
    pub links: Option<Vec<LinkDef>>,
    /// Which graph nodes are the clients, the child, the parent and the origin (default: the
    /// nodes with those names).
    pub roles: Option<Roles>,
}

/// One duplex link of a graph.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDef {
    /// The two nodes it joins.
    pub between: Spanned<Vec<String>>,
    /// Capacity ("10Mb").
    pub capacity: Spanned<String>,
    /// Propagation delay ("5ms").
    pub delay: Spanned<String>,
    /// DropTail limit, packets (default: `topology.queue`).
    pub queue: Option<Spanned<i64>>,
}

/// The parts graph nodes play.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Roles {
    /// Where every transfer goes (default "client").
    pub client: Option<Spanned<String>>,
    /// Serves child hits (default "child").
    pub child: Option<Spanned<String>>,
    /// Serves parent hits (default "parent").
    pub parent: Option<Spanned<String>>,
    /// Serves misses (default "origin").
    pub origin: Option<Spanned<String>>,
}

/// TCP settings (ns-2 `Agent/TCP` names in the docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tcp {
    /// Defaults of ns-2 era "2.35" or "2.26".
    pub era: Spanned<String>,
    /// `packetSize_` (paper 003: 512).
    pub segment_bytes: Spanned<i64>,
    /// `window_`.
    pub window: Spanned<i64>,
    /// `windowInit_`.
    pub window_init: Spanned<i64>,
    /// `syn_`: model the handshake (one extra round trip).
    pub syn: bool,
    /// Model the HTTP request too: the client sends this many bytes before the response
    /// starts (0: not modelled, as in paper 003). With `syn`, the handshake goes with it.
    pub request_bytes: Spanned<i64>,
    /// Sources whose responses go at low priority over TCP Nice (paper 000 §4); the others
    /// use Reno.
    pub nice: Option<NiceTable>,
}

/// `[tcp.nice]`: which sources send with TCP Nice, and Nice's parameters (OSDI 2002 §3).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NiceTable {
    /// Sources whose senders run Nice: any of "child", "parent", "origin".
    pub sources: Spanned<Vec<String>>,
    /// `t`: a packet is delayed when its RTT is above `minRTT + t·(maxRTT − minRTT)`
    /// (default 0.1).
    #[serde(default = "nice_threshold")]
    pub threshold: Spanned<f64>,
    /// `f`: the window halves when more than this fraction of a round-trip's packets were
    /// delayed (default 0.5).
    #[serde(default = "nice_fraction")]
    pub fraction: Spanned<f64>,
    /// The smallest window, in packets (default 1/64: a packet every 64 round-trips).
    #[serde(default = "nice_min_cwnd")]
    pub min_cwnd: Spanned<f64>,
}

fn nice_threshold() -> Spanned<f64> {
    spanned(crate::nice::Config::default().threshold)
}

fn nice_fraction() -> Spanned<f64> {
    spanned(crate::nice::Config::default().fraction)
}

fn nice_min_cwnd() -> Spanned<f64> {
    spanned(crate::nice::Config::default().min_cwnd)
}

/// The transfers.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// Number of transfers (paper 003: 5,000).
    pub transfers: Spanned<i64>,
    /// Poisson arrival rate per second (paper 003 Table 1: 10, 20, 40, 80).
    pub rate: Spanned<f64>,
    /// A workload file in the ns-2 reference format (`id start_s src size`); replaces the
    /// synthetic workload and the hit stage (the file names the source of each transfer).
    pub file: Option<Spanned<PathBuf>>,
    /// Size model: lognormal body mean and standard deviation (bytes), Pareto tail above
    /// `tail_k` with shape `tail_alpha`, capped at `max_size` (ProWGen-like; the defaults give
    /// a median near Table 2's 3,958 B and a mean of 10–12 KB depending on the seed, Table 2
    /// having 9,624 B; the ns-2 reference model's defaults).
    pub body_mean: Spanned<f64>,
    /// See `body_mean`.
    pub body_sd: Spanned<f64>,
    /// See `body_mean`.
    pub tail_k: Spanned<f64>,
    /// See `body_mean`.
    pub tail_alpha: Spanned<f64>,
    /// See `body_mean`.
    pub max_size: Spanned<f64>,
    /// With `[caches]`: distinct objects in the synthetic trace.
    pub objects: Spanned<i64>,
    /// With `[caches]`: Zipf exponent of object popularity.
    pub zipf_alpha: Spanned<f64>,
    /// With `[caches]`: requests run through the caches before the measured transfers, so
    /// that the transfers see steady-state caches (paper 003 took its 5,000 transfers from a
    /// longer trace).
    pub warmup: Spanned<i64>,
}

/// The hit stage: the probability that the child or the parent serves a transfer (paper 003:
/// HR1, HR2 as shares of all client requests).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Hits {
    /// HR1 (paper 003 Table 1: 0.2, 0.3, 0.4).
    pub child: Spanned<f64>,
    /// HR2 (0.07, 0.10, 0.15).
    pub parent: Spanned<f64>,
    /// Size-based placement (paper 003's last experiment, 8 KB): only transfers of at most
    /// this many bytes can be child hits, only larger ones parent hits; the overall shares
    /// HR1 and HR2 are kept as far as the workload's size mix allows.
    pub size_threshold: Option<Spanned<String>>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: None,
            seed: 1,
            topology: Topology::default(),
            tcp: Tcp::default(),
            workload: Workload::default(),
            hits: Hits::default(),
            caches: None,
        }
    }
}

fn spanned<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            capacity: spanned(vec!["10Mb".into(), "10Mb".into(), "10Mb".into()]),
            delay: spanned(vec!["1ms".into(), "5ms".into(), "30ms".into()]),
            queue: spanned(100),
            nodes: None,
            links: None,
            roles: None,
        }
    }
}

impl Default for Tcp {
    fn default() -> Self {
        Tcp {
            era: spanned("2.35".into()),
            segment_bytes: spanned(512),
            window: spanned(20),
            window_init: spanned(2),
            syn: false,
            request_bytes: spanned(0),
            nice: None,
        }
    }
}

impl Workload {
    /// The size model these fields describe.
    pub fn size_model(&self) -> slipstream_workload::web::SizeModel {
        slipstream_workload::web::SizeModel {
            body_mean: *self.body_mean.get_ref(),
            body_sd: *self.body_sd.get_ref(),
            tail_k: *self.tail_k.get_ref(),
            tail_alpha: *self.tail_alpha.get_ref(),
            max_bytes: *self.max_size.get_ref(),
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        let sizes = slipstream_workload::web::SizeModel::paper003();
        Workload {
            transfers: spanned(5000),
            rate: spanned(10.0),
            file: None,
            body_mean: spanned(sizes.body_mean),
            body_sd: spanned(sizes.body_sd),
            tail_k: spanned(sizes.tail_k),
            tail_alpha: spanned(sizes.tail_alpha),
            max_size: spanned(sizes.max_bytes),
            objects: spanned(20_000),
            zipf_alpha: spanned(0.8),
            warmup: spanned(50_000),
        }
    }
}

impl Default for Hits {
    fn default() -> Self {
        Hits {
            child: spanned(0.40),
            parent: spanned(0.15),
            size_threshold: None,
        }
    }
}

/// The most requests (transfers, plus warm-up requests with `[caches]`) one scenario may plan;
/// planning holds them all in memory (about 100 bytes each with their sources).
pub const MAX_REQUESTS: u64 = 50_000_000;

/// A scenario file that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// TOML syntax or a field of the wrong type or name.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value out of range.
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line (0 when the value is a default).
        line: usize,
        /// Dotted field name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The workload file is malformed.
    #[error(transparent)]
    Workload(#[from] crate::reference::ParseError),
}

/// A validated scenario, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Name for outputs.
    pub name: String,
    /// The network.
    pub network: Network,
    /// Its nodes in role order: client, child, parent, origin.
    pub roles: [NodeId; 4],
    /// TCP parameters.
    pub tcp: TcpConfig,
    /// The ns-2 release whose defaults `tcp` started from (for `--export-ns2`).
    pub era: Era,
    /// How the child, the parent and the origin (in that order) send: Reno, or Nice for
    /// the sources `[tcp.nice]` names.
    pub congestion: [Congestion; 3],
    /// The transfers, with their sources.
    pub jobs: Vec<Job>,
    /// With real caches: the hit ratios they achieved over the transfers.
    pub achieved: Option<crate::hits::Achieved>,
}

impl Plan {
    /// The jobs as transfers over [`Plan::network`].
    pub fn transfers(&self) -> Vec<crate::net::Transfer> {
        crate::reference::transfers(&self.roles, &self.jobs)
    }

    /// How the sender of a job from `src` (1 child, 2 parent, else origin) responds to
    /// congestion.
    pub fn congestion_of(&self, src: u8) -> Congestion {
        self.congestion[usize::from(src.clamp(1, 3)) - 1]
    }

    /// Whether any source sends with TCP Nice.
    pub fn uses_nice(&self) -> bool {
        self.congestion
            .iter()
            .any(|c| matches!(c, Congestion::Nice(_)))
    }

    /// Runs the plan, allowing [`crate::reference::GRACE`] after the last start, and records a
    /// packet trace into `trace` when given.
    pub fn run(&self, trace: Option<&mut Vec<crate::net::TraceEvent>>) -> crate::net::Run {
        let options: Vec<crate::net::Options> = self
            .jobs
            .iter()
            .map(|j| crate::net::Options {
                congestion: self.congestion_of(j.src),
                after: None,
            })
            .collect();
        self.run_with(&options, trace)
    }

    /// [`Plan::run`] with [`crate::net::Options`] for each job, in job order.
    pub fn run_with(
        &self,
        options: &[crate::net::Options],
        trace: Option<&mut Vec<crate::net::TraceEvent>>,
    ) -> crate::net::Run {
        let transfers = self.transfers();
        let last = transfers.iter().map(|t| t.start).max().unwrap_or(0);
        // The plan checked that every serving node reaches the clients; a bad `after` is
        // the caller's.
        self.network
            .run_with(
                &transfers,
                options,
                self.tcp,
                last + crate::reference::GRACE,
                trace,
            )
            .unwrap_or(crate::net::Run {
                results: Vec::new(),
                drops: 0,
                events: 0,
            })
    }
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Plan, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let scenario: Scenario = toml::from_str(&text).map_err(|e| ScenarioError::Syntax {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        scenario.plan(path, &text)
    }

    /// Validates a parsed scenario; `text` is the file's contents, for line numbers.
    pub fn plan(&self, path: &Path, text: &str) -> Result<Plan, ScenarioError> {
        let line_of = |span: std::ops::Range<usize>| {
            if span.is_empty() && span.start == 0 {
                0
            } else {
                text[..span.start.min(text.len())].matches('\n').count() + 1
            }
        };
        let invalid = |field: &'static str, span: std::ops::Range<usize>, message: String| {
            ScenarioError::Invalid {
                path: path.display().to_string(),
                line: line_of(span),
                field,
                message,
            }
        };
        let t = &self.topology;
        if *t.queue.get_ref() < 2 {
            return Err(invalid(
                "topology.queue",
                t.queue.span(),
                "must be at least 2 packets".into(),
            ));
        }
        let (network, roles) = match &t.links {
            Some(links) => graph(t, links, &invalid)?,
            None => chain(t, &invalid)?,
        };
        let era = Era::parse(t_str(&self.tcp.era)).ok_or_else(|| {
            invalid(
                "tcp.era",
                self.tcp.era.span(),
                format!("`{}`: must be \"2.35\" or \"2.26\"", t_str(&self.tcp.era)),
            )
        })?;
        let mut tcp = era.config();
        let positive = |v: &Spanned<i64>, field: &'static str| -> Result<u32, ScenarioError> {
            u32::try_from(*v.get_ref())
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid(field, v.span(), "must be a positive whole number".into()))
        };
        tcp.payload_bytes = positive(&self.tcp.segment_bytes, "tcp.segment_bytes")?;
        tcp.window = positive(&self.tcp.window, "tcp.window")?;
        tcp.window_init = positive(&self.tcp.window_init, "tcp.window_init")?;
        tcp.syn = self.tcp.syn;
        tcp.request_bytes = u32::try_from(*self.tcp.request_bytes.get_ref()).map_err(|_| {
            invalid(
                "tcp.request_bytes",
                self.tcp.request_bytes.span(),
                "must be a whole number of bytes, 0 (not modelled) or more".into(),
            )
        })?;
        let congestion = self.congestion(&invalid)?;
        let mut achieved = None;
        let w = &self.workload;
        for (field, v) in [
            ("workload.body_mean", &w.body_mean),
            ("workload.body_sd", &w.body_sd),
            ("workload.tail_k", &w.tail_k),
            ("workload.tail_alpha", &w.tail_alpha),
            ("workload.max_size", &w.max_size),
        ] {
            if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) {
                return Err(invalid(field, v.span(), "must be a positive number".into()));
            }
        }
        // Each field can be positive and the model still unusable (a spread so wide that the
        // log-normal's parameters overflow): refuse it here rather than fail while sampling.
        if let Err(e) = w.size_model().sampler() {
            return Err(invalid(
                "workload.body_sd",
                w.body_sd.span(),
                format!("{e}: the body sizes cannot be sampled (body_sd far above body_mean?)"),
            ));
        }
        let jobs = match (&w.file, &self.caches) {
            (Some(file), Some(_)) => {
                return Err(invalid(
                    "workload.file",
                    file.span(),
                    "a workload file names each transfer's source, so it cannot go with [caches]"
                        .into(),
                ))
            }
            (Some(file), None) => {
                let resolved = path.parent().unwrap_or(Path::new(".")).join(file.get_ref());
                let text = std::fs::read_to_string(&resolved).map_err(|e| {
                    invalid(
                        "workload.file",
                        file.span(),
                        format!("cannot read {}: {e}", resolved.display()),
                    )
                })?;
                crate::reference::parse(&text, &resolved.display().to_string())?
            }
            (None, caches) => {
                let n = positive(&w.transfers, "workload.transfers")?;
                if u64::from(n) > MAX_REQUESTS {
                    return Err(invalid(
                        "workload.transfers",
                        w.transfers.span(),
                        format!("at most {MAX_REQUESTS} transfers per scenario"),
                    ));
                }
                let rate = *w.rate.get_ref();
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(invalid(
                        "workload.rate",
                        w.rate.span(),
                        "must be a positive number of requests per second".into(),
                    ));
                }
                let threshold = match &self.hits.size_threshold {
                    Some(t) => Some(
                        size(t.get_ref())
                            .map_err(|m| invalid("hits.size_threshold", t.span(), m))?,
                    ),
                    None => None,
                };
                match caches {
                    None => {
                        let (hr1, hr2) = (*self.hits.child.get_ref(), *self.hits.parent.get_ref());
                        if !(0.0..=1.0).contains(&hr1) {
                            return Err(invalid(
                                "hits.child",
                                self.hits.child.span(),
                                "must be between 0 and 1".into(),
                            ));
                        }
                        if !(0.0..=1.0).contains(&hr2) || hr1 + hr2 > 1.0 {
                            return Err(invalid(
                                "hits.parent",
                                self.hits.parent.span(),
                                "must be between 0 and 1, and child + parent at most 1".into(),
                            ));
                        }
                        synthetic(w, n, rate, hr1, hr2, threshold, self.seed)
                    }
                    Some(c) => {
                        for (field, v) in [
                            ("hits.child", &self.hits.child),
                            ("hits.parent", &self.hits.parent),
                        ] {
                            if !v.span().is_empty() {
                                return Err(invalid(
                                    field,
                                    v.span(),
                                    "[caches] decides which level serves each request; remove this hit ratio".into(),
                                ));
                            }
                        }
                        let objects = positive(&w.objects, "workload.objects")?;
                        let alpha = *w.zipf_alpha.get_ref();
                        if !(alpha.is_finite() && alpha > 0.0) {
                            return Err(invalid(
                                "workload.zipf_alpha",
                                w.zipf_alpha.span(),
                                "must be a positive number (web proxies see about 0.6 to 0.9)"
                                    .into(),
                            ));
                        }
                        // Planning holds every request in memory: bound them, so a typo is an
                        // error rather than an allocation that aborts the process.
                        let warmup = u64::try_from(*w.warmup.get_ref())
                            .ok()
                            .filter(|w| w + u64::from(n) <= MAX_REQUESTS)
                            .map(|w| w as usize)
                            .ok_or_else(|| {
                                invalid(
                                    "workload.warmup",
                                    w.warmup.span(),
                                    format!("must be a whole number of requests, 0 or more, with warmup + transfers at most {MAX_REQUESTS}"),
                                )
                            })?;
                        let level = |spec: &CacheSpec,
                                     size_field: &'static str,
                                     policy_field: &'static str|
                         -> Result<crate::hits::Level, ScenarioError> {
                            let capacity_bytes = size(spec.size.get_ref())
                                .map_err(|m| invalid(size_field, spec.size.span(), m))?;
                            let policy = spec.policy.get_ref().parse().map_err(
                                |e: slipstream_cache::ParsePolicyError| {
                                    invalid(policy_field, spec.policy.span(), e.to_string())
                                },
                            )?;
                            Ok(crate::hits::Level {
                                capacity_bytes,
                                policy,
                            })
                        };
                        let child = level(&c.child, "caches.child.size", "caches.child.policy")?;
                        let parent =
                            level(&c.parent, "caches.parent.size", "caches.parent.policy")?;
                        let requests = slipstream_workload::web::generate(
                            &slipstream_workload::web::WebConfig {
                                objects: u64::from(objects),
                                zipf_alpha: alpha,
                                requests: warmup + n as usize,
                                rate,
                                sizes: w.size_model(),
                                seed: self.seed,
                            },
                        )
                        .map_err(|e| invalid("workload", 0..0, e.to_string()))?;
                        let (sources, got) =
                            crate::hits::assign(&requests, child, parent, threshold, warmup);
                        achieved = Some(got);
                        let t0 = warmup.checked_sub(1).map_or(0.0, |i| requests[i].time_s);
                        requests[warmup..]
                            .iter()
                            .zip(&sources[warmup..])
                            .enumerate()
                            .map(|(i, (r, src))| Job {
                                id: i as u64,
                                start_s: r.time_s - t0,
                                src: *src,
                                size: r.size_bytes,
                            })
                            .collect()
                    }
                }
            }
        };
        Ok(Plan {
            name: self.name.clone().unwrap_or_else(|| "scenario".into()),
            network,
            roles,
            tcp,
            era,
            congestion,
            achieved,
            jobs,
        })
    }

    /// `[tcp.nice]` as each source's congestion control.
    fn congestion(&self, invalid: Invalid<'_>) -> Result<[Congestion; 3], ScenarioError> {
        let mut out = [Congestion::Reno; 3];
        let Some(n) = &self.tcp.nice else {
            return Ok(out);
        };
        let cfg = crate::nice::Config {
            threshold: *n.threshold.get_ref(),
            fraction: *n.fraction.get_ref(),
            min_cwnd: *n.min_cwnd.get_ref(),
        };
        if let Err(e) = cfg.validate() {
            let (field, span) = match e {
                crate::nice::ConfigError::Threshold(_) => {
                    ("tcp.nice.threshold", n.threshold.span())
                }
                crate::nice::ConfigError::Fraction(_) => ("tcp.nice.fraction", n.fraction.span()),
                crate::nice::ConfigError::MinCwnd(_) => ("tcp.nice.min_cwnd", n.min_cwnd.span()),
            };
            return Err(invalid(field, span, e.to_string()));
        }
        if n.sources.get_ref().is_empty() {
            return Err(invalid(
                "tcp.nice.sources",
                n.sources.span(),
                "name at least one source: \"child\", \"parent\" or \"origin\"".into(),
            ));
        }
        for source in n.sources.get_ref() {
            let i = match source.as_str() {
                "child" => 0,
                "parent" => 1,
                "origin" => 2,
                other => {
                    return Err(invalid(
                        "tcp.nice.sources",
                        n.sources.span(),
                        format!("`{other}` is not a source: \"child\", \"parent\" or \"origin\""),
                    ))
                }
            };
            out[i] = Congestion::Nice(cfg);
        }
        Ok(out)
    }
}

/// The error constructor `Scenario::plan` uses: field, span, message.
type Invalid<'a> = &'a dyn Fn(&'static str, std::ops::Range<usize>, String) -> ScenarioError;

/// Paper 003's chain from `capacity`, `delay` and `queue`.
fn chain(t: &Topology, invalid: Invalid<'_>) -> Result<(Network, [NodeId; 4]), ScenarioError> {
    if t.capacity.get_ref().len() != 3 {
        return Err(invalid(
            "topology.capacity",
            t.capacity.span(),
            "give three capacities: L1, L2, L3".into(),
        ));
    }
    if t.delay.get_ref().len() != 3 {
        return Err(invalid(
            "topology.delay",
            t.delay.span(),
            "give three delays: L1, L2, L3".into(),
        ));
    }
    let mut links = [LinkSpec {
        bits_per_second: 0,
        delay: 0,
        queue_limit: *t.queue.get_ref() as usize,
    }; 3];
    for (i, link) in links.iter_mut().enumerate() {
        link.bits_per_second = bandwidth(&t.capacity.get_ref()[i])
            .map_err(|m| invalid("topology.capacity", t.capacity.span(), m))?;
        link.delay = delay(&t.delay.get_ref()[i])
            .map_err(|m| invalid("topology.delay", t.delay.span(), m))?;
    }
    Ok(Chain { links }.network())
}

/// A graph from `nodes`, `links` and `roles`.
fn graph(
    t: &Topology,
    links: &[LinkDef],
    invalid: Invalid<'_>,
) -> Result<(Network, [NodeId; 4]), ScenarioError> {
    for (field, given) in [
        ("topology.capacity", &t.capacity),
        ("topology.delay", &t.delay),
    ] {
        if !given.span().is_empty() {
            return Err(invalid(
                field,
                given.span(),
                "give either the chain (capacity, delay) or a graph (links), not both".into(),
            ));
        }
    }
    let Some(nodes) = &t.nodes else {
        return Err(invalid(
            "topology.nodes",
            0..0,
            "a graph (topology.links) needs topology.nodes: the node names".into(),
        ));
    };
    let names = nodes.get_ref();
    let mut net = Network::default();
    let mut ids = std::collections::HashMap::new();
    for name in names {
        if ids.insert(name.as_str(), net.node()).is_some() {
            return Err(invalid(
                "topology.nodes",
                nodes.span(),
                format!("`{name}` is named twice"),
            ));
        }
    }
    if links.is_empty() {
        return Err(invalid(
            "topology.links",
            nodes.span(),
            "a graph needs at least one link".into(),
        ));
    }
    for (i, l) in links.iter().enumerate() {
        let ends = l.between.get_ref();
        let node = |name: &String| {
            ids.get(name.as_str()).copied().ok_or_else(|| {
                invalid(
                    "topology.links",
                    l.between.span(),
                    format!("link {}: no node named `{name}` in topology.nodes", i + 1),
                )
            })
        };
        let [a, b] = ends.as_slice() else {
            return Err(invalid(
                "topology.links",
                l.between.span(),
                format!("link {}: `between` names two nodes", i + 1),
            ));
        };
        let (a, b) = (node(a)?, node(b)?);
        if a == b {
            return Err(invalid(
                "topology.links",
                l.between.span(),
                format!("link {}: joins a node to itself", i + 1),
            ));
        }
        let queue = l.queue.as_ref().unwrap_or(&t.queue);
        if *queue.get_ref() < 2 {
            return Err(invalid(
                "topology.links",
                queue.span(),
                format!("link {}: queue must be at least 2 packets", i + 1),
            ));
        }
        let spec = LinkSpec {
            bits_per_second: bandwidth(l.capacity.get_ref()).map_err(|m| {
                invalid(
                    "topology.links",
                    l.capacity.span(),
                    format!("link {}: {m}", i + 1),
                )
            })?,
            delay: delay(l.delay.get_ref()).map_err(|m| {
                invalid(
                    "topology.links",
                    l.delay.span(),
                    format!("link {}: {m}", i + 1),
                )
            })?,
            queue_limit: *queue.get_ref() as usize,
        };
        net.duplex(a, b, spec);
    }
    let given = t.roles.clone().unwrap_or_default();
    let mut roles = [NodeId(0); 4];
    for (i, (role, name)) in [
        ("client", &given.client),
        ("child", &given.child),
        ("parent", &given.parent),
        ("origin", &given.origin),
    ]
    .into_iter()
    .enumerate()
    {
        let (wanted, span) = match name {
            Some(n) => (n.get_ref().as_str(), n.span()),
            None => (role, nodes.span()),
        };
        roles[i] = *ids.get(wanted).ok_or_else(|| {
            invalid(
                "topology.roles",
                span,
                format!("the {role} is `{wanted}`, but no node has that name"),
            )
        })?;
    }
    for (i, role) in ["child", "parent", "origin"].iter().enumerate() {
        if !net.reachable(roles[i + 1], roles[0]) {
            return Err(invalid(
                "topology.links",
                nodes.span(),
                format!("no path from the {role} to the client"),
            ));
        }
    }
    Ok((net, roles))
}

fn t_str(s: &Spanned<String>) -> &str {
    s.get_ref().as_str()
}

/// Poisson arrivals, ProWGen-like sizes, and a probabilistic source per transfer. With a size
/// threshold, a small transfer is a child hit with probability HR1 / P(small) and a large one a
/// parent hit with probability HR2 / P(large) (each capped at 1), so the shares stay HR1, HR2.
fn synthetic(
    w: &Workload,
    n: u32,
    rate: f64,
    hr1: f64,
    hr2: f64,
    threshold: Option<u64>,
    seed: u64,
) -> Vec<Job> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let gaps = Exp::new(rate).unwrap_or_else(|_| Exp::new(1.0).expect("1 is a valid rate"));
    // plan() has checked that the size model can be sampled.
    let sizes = w
        .size_model()
        .sampler()
        .expect("size model validated by plan");
    let mut t = 0.0;
    let mut jobs: Vec<(Job, f64)> = (0..n)
        .map(|i| {
            t += gaps.sample(&mut rng);
            let u: f64 = rng.gen();
            let size = sizes.sample(&mut rng);
            (
                Job {
                    id: u64::from(i),
                    start_s: t,
                    src: 3,
                    size,
                },
                u,
            )
        })
        .collect();
    let small_share = threshold
        .map(|th| jobs.iter().filter(|(j, _)| j.size <= th).count() as f64 / f64::from(n.max(1)));
    for (job, u) in &mut jobs {
        job.src = match (threshold, small_share) {
            (Some(th), Some(p)) if job.size <= th && *u < (hr1 / p.max(1e-9)).min(1.0) => 1,
            (Some(th), Some(_)) if job.size <= th => 3,
            (Some(_), Some(p)) if *u < (hr2 / (1.0 - p).max(1e-9)).min(1.0) => 2,
            (Some(_), Some(_)) => 3,
            _ if *u < hr1 => 1,
            _ if *u < hr1 + hr2 => 2,
            _ => 3,
        };
    }
    jobs.into_iter().map(|(j, _)| j).collect()
}

/// A byte size, as slipstream reads sizes everywhere (`8KiB` = 8,192 bytes, `8KB` = 8,000).
fn size(s: &str) -> Result<u64, String> {
    slipstream_units::bytes(s)
}

/// Whether `s` is a number with no unit, which a scenario never takes: `"30"` could be
/// seconds or milliseconds, `"10"` bits or megabits.
fn unitless(s: &str) -> bool {
    let t = s.trim();
    !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// A link capacity as ns-2 writes it: `10Mb`, `1.5Mb`, `100kb`, `1Gb`.
pub fn bandwidth(s: &str) -> Result<u64, String> {
    if unitless(s) {
        return Err(format!("`{s}` has no unit: write {s}Mb, {s}kb or {s}b"));
    }
    slipstream_units::bits_per_second(s)
}

/// A propagation delay: `1ms`, `30ms`, `0.5s`, `200us`, in whole nanoseconds.
pub fn delay(s: &str) -> Result<Nanos, String> {
    if unitless(s) {
        return Err(format!("`{s}` has no unit: write {s}ms or {s}s"));
    }
    let d = slipstream_units::duration(s).map_err(|e| e.replace("a duration", "a delay"))?;
    Nanos::try_from(d.as_nanos()).map_err(|_| format!("`{s}` is too long a delay"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_counts_beyond_the_bound_are_errors_not_aborts() {
        // Found by tests/fuzz.rs: 2^32 warm-up requests asked for 171 GB and aborted.
        let text = "[workload]\ntransfers = 20\nwarmup = 4294967296\n[caches.child]\nsize = \"1MiB\"\n[caches.parent]\nsize = \"1MiB\"\n[hits]\n";
        let s: Scenario = toml::from_str(text).expect("valid toml");
        let e = s.plan(Path::new("s.toml"), text).unwrap_err().to_string();
        assert!(e.starts_with("s.toml:3: workload.warmup:"), "{e}");
        let text = "[workload]\ntransfers = 4294967295\n";
        let s: Scenario = toml::from_str(text).expect("valid toml");
        let e = s.plan(Path::new("s.toml"), text).unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2: workload.transfers:"), "{e}");
    }

    #[test]
    fn a_size_model_too_wide_to_sample_is_an_error_not_a_panic() {
        // Found by tests/fuzz.rs: every field positive, yet the log-normal cannot be built.
        let text = "[workload]\nbody_sd = 1e300\ntransfers = 20\n";
        let s: Scenario = toml::from_str(text).expect("valid toml");
        let e = s.plan(Path::new("s.toml"), text).unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2: workload.body_sd:"), "{e}");
    }

    #[test]
    fn delays_and_capacities_need_a_unit() {
        assert!(delay("30").unwrap_err().contains("no unit"));
        assert!(bandwidth("10").unwrap_err().contains("no unit"));
        assert_eq!(delay("30ms"), Ok(30_000_000));
        assert_eq!(bandwidth("10Mb"), Ok(10_000_000));
    }

    fn plan(text: &str) -> Result<Plan, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Syntax {
            path: "s.toml".into(),
            message: e.to_string(),
        })?;
        s.plan(Path::new("s.toml"), text)
    }

    #[test]
    fn an_empty_file_is_the_papers_baseline() {
        let p = plan("").expect("valid");
        let shown = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../experiments/003/baseline.toml"),
        )
        .expect("baseline.toml");
        assert_eq!(
            p.jobs,
            plan(&shown).expect("valid").jobs,
            "baseline.toml shows the defaults"
        );
        assert_eq!(p.jobs.len(), 5000);
        let (chain, _) = Chain::default().network();
        assert_eq!(
            p.network.links().collect::<Vec<_>>(),
            chain.links().collect::<Vec<_>>()
        );
        let child = p.jobs.iter().filter(|j| j.src == 1).count() as f64 / 5000.0;
        assert!((child - 0.40).abs() < 0.03, "HR1 {child}");
        let mut sizes: Vec<u64> = p.jobs.iter().map(|j| j.size).collect();
        sizes.sort_unstable();
        let median = sizes[2500];
        assert!(
            (3000..5000).contains(&median),
            "median {median} (Table 2: 3,958)"
        );
        let rate = 5000.0 / p.jobs.last().expect("jobs").start_s;
        assert!((rate - 10.0).abs() < 0.6, "rate {rate}");
    }

    #[test]
    fn size_threshold_puts_small_transfers_at_the_child_and_large_at_the_parent() {
        let p = plan("[hits]\nsize_threshold = \"8KiB\"\n").expect("valid");
        assert!(p.jobs.iter().filter(|j| j.src == 1).all(|j| j.size <= 8192));
        assert!(p.jobs.iter().filter(|j| j.src == 2).all(|j| j.size > 8192));
        let share = |src| p.jobs.iter().filter(|j| j.src == src).count() as f64 / 5000.0;
        assert!((share(1) - 0.40).abs() < 0.03, "child share {}", share(1));
        assert!((share(2) - 0.15).abs() < 0.03, "parent share {}", share(2));
        // The same requests as without the threshold: only the sources change.
        let default = plan("").expect("valid");
        assert!(p
            .jobs
            .iter()
            .zip(&default.jobs)
            .all(|(a, b)| a.size == b.size && a.start_s == b.start_s));
    }

    #[test]
    fn same_seed_same_workload() {
        assert_eq!(
            plan("seed = 4").expect("valid").jobs,
            plan("seed = 4").expect("valid").jobs
        );
        assert_ne!(
            plan("seed = 4").expect("valid").jobs,
            plan("seed = 5").expect("valid").jobs
        );
    }

    #[test]
    fn real_caches_decide_the_sources_and_report_what_they_achieved() {
        let text = "[workload]\ntransfers = 2000\nobjects = 5000\nwarmup = 10000\n\
                    [caches]\nchild = { size = \"4MB\" }\nparent = { size = \"32MB\", policy = \"sieve\" }\n";
        let p = plan(text).expect("valid");
        assert_eq!(p.jobs.len(), 2000);
        let achieved = p.achieved.expect("caches report hit ratios");
        let share = |src| p.jobs.iter().filter(|j| j.src == src).count() as f64 / 2000.0;
        assert_eq!(achieved.child_hit_ratio, share(1));
        assert_eq!(achieved.parent_hit_ratio, share(2));
        assert!(share(1) > 0.2 && share(2) > 0.05, "{achieved:?}");
        // The same object always has the same size; the measured transfers start near 0.
        assert!(p.jobs[0].start_s < 1.0);
        // A bigger child cache serves more.
        let bigger = plan(&text.replace("4MB", "16MB")).expect("valid");
        assert!(bigger.achieved.expect("ratios").child_hit_ratio > achieved.child_hit_ratio);
    }

    #[test]
    fn a_graph_replaces_the_chain() {
        let text = "[topology]\nnodes = [\"c\", \"p1\", \"p2\", \"r\", \"o\"]\nlinks = [\n\
            { between = [\"c\", \"p1\"], capacity = \"10Mb\", delay = \"1ms\" },\n\
            { between = [\"p1\", \"r\"], capacity = \"45Mb\", delay = \"2ms\", queue = 20 },\n\
            { between = [\"r\", \"p2\"], capacity = \"45Mb\", delay = \"3ms\" },\n\
            { between = [\"r\", \"o\"], capacity = \"1.5Mb\", delay = \"40ms\" },\n]\n\
            [topology.roles]\nclient = \"c\"\nchild = \"p1\"\nparent = \"p2\"\norigin = \"o\"\n\
            [workload]\ntransfers = 200\n";
        let p = plan(text).expect("valid");
        assert_eq!(p.network.node_count(), 5);
        assert_eq!(p.network.links().count(), 8, "duplex links");
        assert_eq!(p.roles, [NodeId(0), NodeId(1), NodeId(2), NodeId(4)]);
        let run = p.run(None);
        assert_eq!(run.results.len(), 200);
        // Origin transfers cross the 1.5 Mb/s link: slower than the parent's.
        let mean = |src: u8| {
            let ids: std::collections::HashSet<u64> = p
                .jobs
                .iter()
                .filter(|j| j.src == src)
                .map(|j| j.id)
                .collect();
            let l: Vec<u64> = run
                .results
                .iter()
                .filter(|r| ids.contains(&r.transfer.id))
                .map(|r| r.received - r.transfer.start)
                .collect();
            l.iter().sum::<u64>() / l.len().max(1) as u64
        };
        assert!(mean(3) > 2 * mean(2));
    }

    #[test]
    fn graph_errors_name_the_line_and_field() {
        let links = "links = [{ between = [\"client\", \"child\"], capacity = \"10Mb\", delay = \"1ms\" }]\n";
        let e = plan(&format!("[topology]\n{links}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("topology.nodes"), "{e}");
        let e = plan(&format!(
            "[topology]\nnodes = [\"client\", \"child\"]\n{links}"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.toml:2: topology.roles: the parent is `parent`"),
            "{e}"
        );
        let e = plan(
            "[topology]\nnodes = [\"client\", \"child\", \"parent\", \"origin\"]\nlinks = [\n\
            { between = [\"client\", \"child\"], capacity = \"10Mb\", delay = \"1ms\" },\n\
            { between = [\"child\", \"parnet\"], capacity = \"10Mb\", delay = \"1ms\" },\n]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.toml:5: topology.links: link 2: no node named `parnet`"),
            "{e}"
        );
        let e = plan(
            "[topology]\nnodes = [\"client\", \"child\", \"parent\", \"origin\"]\nlinks = [\n\
            { between = [\"client\", \"child\"], capacity = \"10Mb\", delay = \"1ms\" },\n\
            { between = [\"parent\", \"origin\"], capacity = \"fast\", delay = \"1ms\" },\n]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.toml:5: topology.links: link 2: `fast`"),
            "{e}"
        );
        let e = plan(
            "[topology]\nnodes = [\"client\", \"child\", \"parent\", \"origin\"]\nlinks = [\n\
            { between = [\"client\", \"child\"], capacity = \"10Mb\", delay = \"1ms\" },\n\
            { between = [\"parent\", \"origin\"], capacity = \"10Mb\", delay = \"1ms\" },\n]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no path from the parent to the client"), "{e}");
        let e = plan(&format!(
            "[topology]\ncapacity = [\"1Mb\", \"1Mb\", \"1Mb\"]\nnodes = [\"client\"]\n{links}"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.toml:2: topology.capacity: give either"),
            "{e}"
        );
    }

    #[test]
    fn cache_errors_name_the_field() {
        let e = plan("[hits]\nchild = 0.3\n[caches]\nchild = { size = \"1MB\" }\nparent = { size = \"1MB\" }\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml:2: hits.child: [caches] decides"),
            "{e}"
        );
        let e = plan("[caches]\nchild = { size = \"big\" }\nparent = { size = \"1MB\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:2: caches.child.size"), "{e}");
        let e = plan("[caches]\nchild = { size = \"1MB\" }\nparent = { size = \"1MB\", policy = \"fifo\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:3: caches.parent.policy"), "{e}");
        let e = plan("[workload]\nzipf_alpha = 0\n[caches]\nchild = { size = \"1MB\" }\nparent = { size = \"1MB\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:2: workload.zipf_alpha"), "{e}");
    }

    #[test]
    fn tcp_nice_names_the_sources_that_send_at_low_priority() {
        let p = plan("[tcp.nice]\nsources = [\"parent\"]\nthreshold = 0.2\n").expect("valid");
        assert_eq!(p.congestion_of(1), Congestion::Reno);
        assert_eq!(p.congestion_of(3), Congestion::Reno);
        assert_eq!(
            p.congestion_of(2),
            Congestion::Nice(crate::nice::Config {
                threshold: 0.2,
                ..crate::nice::Config::default()
            })
        );
        assert!(p.uses_nice());
        assert!(!plan("").expect("valid").uses_nice());
    }

    #[test]
    fn tcp_nice_errors_name_the_line_and_field() {
        let e = plan("[tcp.nice]\nsources = [\"parnet\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml:2: tcp.nice.sources: `parnet` is not a source"),
            "{e}"
        );
        let e = plan("[tcp.nice]\nsources = []\n").unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2: tcp.nice.sources:"), "{e}");
        let e = plan("[tcp.nice]\nsources = [\"origin\"]\nfraction = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:3: tcp.nice.fraction: 1.5"), "{e}");
        let e = plan("[tcp.nice]\nsources = [\"origin\"]\n\nmin_cwnd = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:4: tcp.nice.min_cwnd:"), "{e}");
        let e = plan("[tcp.nice]\nsources = [\"origin\"]\nthreshold = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:3: tcp.nice.threshold:"), "{e}");
        let e = plan("[tcp.nice]\nthreshold = 0.1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `sources`"), "{e}");
        let e = plan("[tcp.nice]\nsources = [\"origin\"]\nt = 0.1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `t`"), "{e}");
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = plan("[workload]\ntransfers = 10\nrate = -3\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "s.toml:3: workload.rate: must be a positive number of requests per second"
        );
        let e = plan("[topology]\ncapacity = [\"10Mb\", \"fast\", \"10Mb\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml:2: topology.capacity: `fast` is not a bandwidth"),
            "{e}"
        );
        let e = plan("[hits]\nchild = 0.9\nparent = 0.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:3: hits.parent"), "{e}");
        let e = plan("[workload]\nbody_sd = -5\n").unwrap_err().to_string();
        assert_eq!(e, "s.toml:2: workload.body_sd: must be a positive number");
        let e = plan("[tcp]\nrequest_bytes = -1\n").unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2: tcp.request_bytes"), "{e}");
        let e = plan("[tcp]\nera = \"1999\"\n").unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2: tcp.era"), "{e}");
        let e = plan("[workload]\nrat = 3\n").unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown field `rat`"),
            "{e}"
        );
    }
}
