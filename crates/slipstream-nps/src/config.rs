//! The `[prefetch]` table of a node's config file: NPS on a `slipstream serve` node.
//!
//! ```toml
//! [prefetch]
//! budget = "monitor"          # "monitor": the AIMD budget (000 §3.3); "unlimited": every hint
//!                             # request gets a list (the paper's No-Avoidance)
//! epoch_ms = 100              # τ: the monitor takes one sample an epoch
//! probes_per_epoch = 5        # the sample is the mean of this many probes spread over the epoch
//! doc_files = 10              # D: files in one hint list (one document's worth)
//! pace_lists = true           # one list every D/B seconds, not the epoch's all at once
//! pace_slack_ms = 2           # a paced slot taken up to this late keeps the schedule
//! hold_ms = 10                # a hint request whose paced slot is this near is held for it,
//!                             # not refused (0: refuse, the paper's rule)
//! cpu_target = 0.7            # keep the node's CPU use under this fraction of what it may
//!                             # use (its cgroup quota, its cores); 0: probes alone
//! cost_target = 0             # keep what prefetching costs demand, as clients report it
//!                             # (pages served while prefetching against pages served in
//!                             # quiet periods), under this fraction; 0: off. On, prefetching
//!                             # stops for quiet_ms at the start of every cost_every_ms
//! cost_every_ms = 4000
//! quiet_ms = 500
//! cpu_count_idle = true       # count threads at idle priority (an idle listener's) in it:
//!                             # idle priority yields the CPU, not everything a core shares
//! shed = true                 # while the monitor's last sample found the node overloaded,
//!                             # refuse prefetches (503) and hint lists at once
//! page_wait = true            # when the hint server would tell every client to wait (no
//!                             # budget, or shedding), pages say so and agents do not ask
//! page_invite = 2.0           # with page_wait, pages invite agents to ask about twice as
//!                             # often as the budget has lists; the rest are told to wait
//! probe_path = "/"            # the representative object the monitor probes
//! threshold_ms = "3ms"        # a probe slower than this means the server is loaded;
//!                             # 0 (default): found at start-up, at the knee of the
//!                             # response-time curve
//! # train_log = "access.log"  # a Common Log Format log to train the predictor from at start
//! # listen = "0.0.0.0:8081"   # the prefetch listener (two connections, 000 §2.3.2)
//! listener_priority = "normal" # its CPU priority: "normal" (demand's thread) or "idle" (a
//!                             # thread of its own in SCHED_IDLE)
//! rtt_backoff = false         # its connections give way when their round-trip time rises
//!                             # above its least (TCP Nice's signal, read from TCP_INFO)
//! backoff_threshold_pct = 20  # ... by this share of the spread between least and greatest
//! backoff_floor_ms = 1        # ... and by more than this
//! backoff_max_pause_ms = 500  # the longest pause between probes at the smallest window
//! backoff_shared = true       # one window for all the connections to a client address
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use slipstream_prefetch::hints::HintsConfig;
use slipstream_prefetch::monitor::MonitorConfig;

/// The `[prefetch]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Run NPS. By default a node prefetches when its file has a `[prefetch]` table or a
    /// prefetch flag is given; `false` turns it off regardless.
    pub enabled: Option<bool>,
    /// `"monitor"` (the budget follows the server's spare capacity) or `"unlimited"` (every
    /// hint request gets a list: the paper's No-Avoidance, for comparisons).
    pub budget: String,
    /// The epoch τ, in milliseconds: the monitor probes once an epoch and the hint server
    /// counts requests per epoch.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub epoch_ms: u64,
    /// D: the files in one hint list.
    pub doc_files: usize,
    /// The path (with its query) of the representative object the monitor probes.
    pub probe_path: String,
    /// A probe slower than this means the server is loaded (0: found at start-up from the
    /// knee of the response-time curve).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub threshold_ms: u64,
    /// The start-up threshold is never below this, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub min_threshold_ms: u64,
    /// A probe that takes this long has failed (counts as over the threshold).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub probe_timeout_ms: u64,
    /// Probes an epoch, spread evenly over it; the epoch's sample is their mean (1: the
    /// paper's single probe). One probe sees a scheduling pause of the server as load and
    /// misses a burst between probes.
    pub probes_per_epoch: u32,
    /// Samples under the threshold before the budget grows (000 §3.3: five).
    pub samples_to_increase: u32,
    /// Additive increase of the budget, in files per second (000 §3.3: one).
    pub increase_per_s: f64,
    /// Double the budget until the first overload (the paper's rule when false).
    pub slow_start: bool,
    /// Go back to doubling after this many additive increases without an overload (0: never).
    pub restart_after: u32,
    /// The budget never grows above this many files per second.
    pub max_budget_per_s: f64,
    /// The budget grows only while under this many times the files clients were granted per
    /// second lately, plus one list an epoch, and decays toward that above it (RFC 7661's
    /// validation; 0: off, the paper's rule).
    pub validate_usage: f64,
    /// Pace hint lists, one every D/B seconds (false: the paper's rule, each request granted
    /// with probability p, so an epoch's lists go to its first requests at once).
    pub pace_lists: bool,
    /// Paced: a slot taken up to this late keeps the schedule, in milliseconds (0: one
    /// interval).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub pace_slack_ms: u64,
    /// Paced: a hint request whose list's slot is due within this long is held until then and
    /// answered with the list, instead of refused and asked again, in milliseconds (0: refuse).
    /// A held request keeps its connection: at 100 ms the experiment's clients held up to a
    /// few hundred at once, and 6 runs of 8 had server stalls (demand p99 of 14–150 ms); at
    /// 10 ms, none of 4 (pilots 19–21, docs/experiments/000-nps.md).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub hold_ms: u64,
    /// Keep the node's CPU use under this fraction of the CPU it may use (its cgroup's quota,
    /// the cores it may run on): above it the budget is cut in proportion. 0: the probes alone
    /// (the paper's monitor).
    pub cpu_target: f64,
    /// Keep what prefetching costs demand under this fraction (0.05: pages 5 % slower while
    /// prefetching than in quiet periods, as clients report them; `slipstream_prefetch::cost`).
    /// 0: off. On, prefetching stops for `quiet_ms` at the start of every `cost_every_ms`, and
    /// pages carry the time they were served for agents to report with their response time.
    pub cost_target: f64,
    /// A cycle of the cost measurement, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub cost_every_ms: u64,
    /// The quiet period that opens each cycle, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub quiet_ms: u64,
    /// Count threads at idle priority (the prefetch listener's with `listener_priority =
    /// "idle"`) in the load `cpu_target` bounds. Idle priority yields the CPU, but on our test
    /// machine idle-priority work still slowed demand (docs/experiments/000-nps.md, pilots 48,
    /// 49 and 56; why is not measured). Left out (`false`), nothing but the probes bounds the
    /// idle listener's budget, and on that machine they did not: in the 2544a51 run it grew to
    /// 30,000–40,000 files a second, at +8 % to +70 % on demand.
    pub cpu_count_idle: bool,
    /// PPM order n (000 §6.3: 2).
    pub order: usize,
    /// PPM window w, in pages (000 §6.3: 10).
    pub window: usize,
    /// Distinct URLs the model learns at most.
    pub max_urls: usize,
    /// URLs (path and query) longer than this are not learnt (a query string of kilobytes).
    pub max_url_len: usize,
    /// Bytes of URL text the model holds at most.
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_url_bytes: usize,
    /// Clients whose recent pages the model keeps at most (oldest forgotten first).
    pub max_clients: usize,
    /// Fill hint lists with the most popular URLs when the predictor knows too little.
    pub fill_popular: bool,
    /// Hint turns a client may chain after one document (000 §6.1's TURN), at most.
    pub max_turns: usize,
    /// A Common Log Format log to train the predictor from at start (offline training).
    pub train_log: Option<PathBuf>,
    /// The prefetch listener (the two-connection architecture, 000 §2.3.2): a second address
    /// serving the same content for prefetches only, at low priority. None: one connection.
    #[serde(default, deserialize_with = "opt_listen")]
    pub listen: Option<std::net::SocketAddr>,
    /// The base URL browsers reach the prefetch listener at (default: its bound address).
    pub public_url: Option<String>,
    /// Mark the prefetch listener's packets DSCP Lower-Effort (RFC 8622).
    pub lower_effort: bool,
    /// The prefetch listener's CPU priority: `"normal"` (the default: on the node's own
    /// runtime, beside demand) or `"idle"` (a thread of its own in the kernel's idle
    /// scheduling class, so demand's thread always runs first). On a CPU-capped node "idle"
    /// measured no better for demand and cost more CPU per prefetched file, so the monitor
    /// granted less (docs/experiments/000-nps.md, pilot 32).
    pub listener_priority: slipstream_node::bootstrap::Priority,
    /// Less-than-best-effort congestion controls to ask the kernel for, in order; none
    /// available keeps the kernel's default.
    pub congestion: Vec<String>,
    /// Pace the prefetch listener's connections: each writes only what a window of its own
    /// allows, halved when the connection's round-trip time rises above its least (TCP
    /// Nice's signal, at the application level: `slipstream_http::nice`). For a network that
    /// ignores the DSCP mark, on a kernel without a less-than-best-effort congestion control.
    pub rtt_backoff: bool,
    /// The back-off's threshold: a round trip more than this per cent of the way from the
    /// least seen to the greatest is congested (Nice's t).
    pub backoff_threshold_pct: u8,
    /// ... and more than this above the least, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub backoff_floor_ms: u64,
    /// The longest pause between probes at the smallest window, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub backoff_max_pause_ms: u64,
    /// One window for all the listener's connections to a client address, which then backs
    /// off as one flow however many connections its prefetching opens; `false`: a window for
    /// each connection. On a slow link with room to spare the shared window also holds back
    /// prefetching that would not have hurt (docs/experiments/000-network-loopback.md).
    pub backoff_shared: bool,
    /// Answer browsers' own prefetches (`Sec-Purpose: prefetch`) only within the monitor's
    /// budget; beyond it, 503 at once.
    pub admit_browser_prefetch: bool,
    /// While the monitor's last sample found the node overloaded (a probe over the threshold,
    /// or the CPU nearly all in use), refuse every prefetch with a 503 and every hint request
    /// with a wait (at least to the next epoch), without waiting for the budget to come down:
    /// lists granted before a burst would otherwise keep arriving through it. `false`: the
    /// budget alone.
    pub shed: bool,
    /// When the hint server would answer (almost) every hint request with a wait (no budget for
    /// a list within the longest wait, or shedding), pages carry that wait (the
    /// `slipstream-hints-wait-ms` header; with `munge`, `data-hints-wait-ms` and the time it was
    /// given, `data-hints-wait-at`, on the munged script), so that agents wait without asking:
    /// a node with nothing to give then gets no hint request. The page's caching headers stay
    /// as they are: a cached copy carries an old wait, which the browser agent ignores once it
    /// is 10 s old. `false`: agents always ask.
    pub page_wait: bool,
    /// With `page_wait`, pages invite their agents to ask for hints about this many times as
    /// often as the budget has lists (B/D a second, against the pages served a second); the
    /// other pages carry the wait a refused hint request would get, so that a loaded node is
    /// not sent hint requests it can only refuse (at 250 documents/s on the slow test server,
    /// 88 % of them were, at an estimated CPU about that of the prefetches granted:
    /// docs/experiments/000-nps.md). Only an agent's first hint request after its page is
    /// affected. Every page served counts, so where many clients run no agent fewer lists are
    /// asked for than the budget allows; the budget itself bounds the lists either way.
    /// 0: every agent asks.
    pub page_invite: f64,
    /// Send the `Speculation-Rules` header with pages, naming a rule set of the budgeted hints
    /// (`/_slipstream/speculationrules`), so browsers prefetch natively.
    pub speculation_rules: bool,
    /// The munger (000 §5/§6.1): add the agent's registration script to pages that lack it.
    pub munge: bool,
}

fn opt_listen<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    slipstream_node::config::listen(d).map(Some)
}

impl Default for Config {
    fn default() -> Self {
        let h = HintsConfig::default();
        Config {
            enabled: None,
            budget: "monitor".into(),
            epoch_ms: 100,
            doc_files: 10,
            probe_path: "/".into(),
            threshold_ms: 0,
            min_threshold_ms: 1,
            probe_timeout_ms: 1000,
            probes_per_epoch: 5,
            samples_to_increase: 5,
            increase_per_s: 1.0,
            slow_start: true,
            restart_after: 10,
            max_budget_per_s: 100_000.0,
            validate_usage: 2.0,
            pace_lists: true,
            pace_slack_ms: 2,
            hold_ms: 10,
            cpu_target: 0.7,
            cost_target: 0.0,
            cost_every_ms: 4000,
            quiet_ms: 500,
            cpu_count_idle: true,
            order: h.order,
            window: h.window,
            max_urls: h.max_urls,
            max_url_len: h.max_url_len,
            max_url_bytes: h.max_url_bytes,
            max_clients: h.max_clients,
            fill_popular: h.fill_popular,
            max_turns: 10,
            train_log: None,
            listen: None,
            public_url: None,
            lower_effort: true,
            listener_priority: slipstream_node::bootstrap::Priority::Normal,
            congestion: vec!["lp".into(), "ledbat".into()],
            rtt_backoff: false,
            backoff_threshold_pct: 20,
            backoff_floor_ms: 1,
            backoff_max_pause_ms: 500,
            backoff_shared: true,
            admit_browser_prefetch: true,
            shed: true,
            page_wait: true,
            page_invite: 2.0,
            speculation_rules: false,
            munge: true,
        }
    }
}

/// How hint requests are granted lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The monitor's budget, distributed per epoch (000 §3.3).
    Monitor,
    /// Every request gets a list (No-Avoidance).
    Unlimited,
}

/// A `[prefetch]` table checked once.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How lists are granted.
    pub budget: Budget,
    /// τ.
    pub epoch: Duration,
    /// D.
    pub doc_files: usize,
    /// The monitor's probe target.
    pub probe_path: String,
    /// The configured threshold, or `None` to find it at start-up.
    pub threshold: Option<Duration>,
    /// The floor of a start-up threshold.
    pub min_threshold: Duration,
    /// The probes' timeout.
    pub probe_timeout: Duration,
    /// Probes an epoch; the sample is their mean.
    pub probes_per_epoch: u32,
    /// Pace lists one every D/B seconds.
    pub pace_lists: bool,
    /// How late a paced slot may be taken and keep the schedule.
    pub pace_slack: Duration,
    /// How near a paced slot must be for a hint request to be held for it.
    pub hold: Duration,
    /// The AIMD rule (its threshold is replaced at start-up when not configured).
    pub monitor: MonitorConfig,
    /// The load counts threads at idle priority.
    pub cpu_count_idle: bool,
    /// The cost measurement's schedule, when `cost_target` is on.
    pub cost: Option<slipstream_prefetch::cost::CostConfig>,
    /// The predictor.
    pub model: HintsConfig,
    /// Turns a client may chain.
    pub max_turns: usize,
    /// The log to train from.
    pub train_log: Option<PathBuf>,
    /// The prefetch listener's address, if any.
    pub listen: Option<std::net::SocketAddr>,
    /// Its public base URL, if configured.
    pub public_url: Option<String>,
    /// DSCP LE on it.
    pub lower_effort: bool,
    /// Its CPU priority.
    pub listener_priority: slipstream_node::bootstrap::Priority,
    /// Congestion controls to try on it.
    pub congestion: Vec<String>,
    /// Its connections' back-off, if on.
    pub pacing: Option<slipstream_http::nice::NiceConfig>,
    /// Gate `Sec-Purpose: prefetch` requests by the budget.
    pub admit_browser_prefetch: bool,
    /// Refuse prefetches while the monitor finds the node overloaded.
    pub shed: bool,
    /// Pages carry the hint server's wait when it would refuse every client.
    pub page_wait: bool,
    /// Pages invite this many times the lists the budget allows (0: all).
    pub page_invite: f64,
    /// Send `Speculation-Rules` with pages.
    pub speculation_rules: bool,
    /// Add the agent's registration to pages.
    pub munge: bool,
}

/// Why a `[prefetch]` table is refused.
#[derive(Debug, thiserror::Error)]
#[error("[prefetch] {field}: {message}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        message: message.into(),
    }
}

impl Config {
    /// Whether the node prefetches: the table is there (`asked`) and `enabled` does not say no,
    /// or `enabled` says yes.
    pub fn runs(&self, asked: bool) -> bool {
        self.enabled.unwrap_or(asked)
    }

    /// Checks every field.
    pub fn validate(self) -> Result<Settings, ConfigError> {
        let budget = match self.budget.as_str() {
            "monitor" => Budget::Monitor,
            "unlimited" => Budget::Unlimited,
            other => {
                return Err(refuse(
                    "budget",
                    format!("`{other}`: expected \"monitor\" or \"unlimited\""),
                ))
            }
        };
        if !(1..=60_000).contains(&self.epoch_ms) {
            return Err(refuse("epoch_ms", "must be between 1 ms and 60 s"));
        }
        if !(1..=1000).contains(&self.doc_files) {
            return Err(refuse("doc_files", "must be between 1 and 1000"));
        }
        if !self.probe_path.starts_with('/') || self.probe_path.starts_with("/_slipstream/") {
            return Err(refuse(
                "probe_path",
                format!(
                    "`{}`: must be a path of the site (starting with /, not a control endpoint)",
                    self.probe_path
                ),
            ));
        }
        if self.probe_path.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(refuse("probe_path", "is not a valid URL path"));
        }
        if self.probe_timeout_ms == 0 {
            return Err(refuse("probe_timeout_ms", "must be positive"));
        }
        if !(self.validate_usage == 0.0 || self.validate_usage >= 1.0) {
            return Err(refuse("validate_usage", "must be 0 (off) or at least 1"));
        }
        if !(self.cpu_target.is_finite() && (0.0..=1.0).contains(&self.cpu_target)) {
            return Err(refuse(
                "cpu_target",
                "must be between 0 (off) and 1 (all the CPU the node may use)",
            ));
        }
        if !(self.cost_target.is_finite() && (0.0..=1.0).contains(&self.cost_target)) {
            return Err(refuse(
                "cost_target",
                "must be between 0 (off) and 1 (demand twice as slow)",
            ));
        }
        if !(self.page_invite.is_finite() && (0.0..=100.0).contains(&self.page_invite)) {
            return Err(refuse(
                "page_invite",
                "must be between 0 (every agent asks) and 100 (times the lists the budget allows)",
            ));
        }
        if self.cost_target > 0.0 && self.cost_every_ms > 600_000 {
            return Err(refuse(
                "cost_every_ms",
                "must be at most 10 minutes (a cycle's reports wait in memory until it ends)",
            ));
        }
        let cost = (self.cost_target > 0.0)
            .then(|| {
                let c = slipstream_prefetch::cost::CostConfig {
                    every: Duration::from_millis(self.cost_every_ms),
                    quiet: Duration::from_millis(self.quiet_ms),
                    ..Default::default()
                };
                c.check().map(|()| c)
            })
            .transpose()
            .map_err(|why| refuse("quiet_ms", why))?;
        if !(1..=100).contains(&self.backoff_threshold_pct) {
            return Err(refuse(
                "backoff_threshold_pct",
                "must be between 1 and 100 (per cent of the spread of round-trip times)",
            ));
        }
        if self.backoff_floor_ms > 1000 {
            return Err(refuse("backoff_floor_ms", "must be at most 1 s"));
        }
        if !(1..=10_000).contains(&self.backoff_max_pause_ms) {
            return Err(refuse(
                "backoff_max_pause_ms",
                "must be between 1 ms and 10 s (a longer pause reads as an idle connection)",
            ));
        }
        if self.pace_slack_ms > 1000 {
            return Err(refuse("pace_slack_ms", "must be at most 1 s"));
        }
        if self.hold_ms > 10_000 {
            return Err(refuse(
                "hold_ms",
                "must be at most 10 s (a held request keeps its connection)",
            ));
        }
        if !(1..=100).contains(&self.probes_per_epoch) {
            return Err(refuse("probes_per_epoch", "must be between 1 and 100"));
        }
        if !(self.increase_per_s.is_finite() && self.increase_per_s > 0.0) {
            return Err(refuse("increase_per_s", "must be a positive number"));
        }
        if !(self.max_budget_per_s.is_finite() && self.max_budget_per_s >= 1.0) {
            return Err(refuse("max_budget_per_s", "must be at least 1"));
        }
        if !(1..=slipstream_prefetch::History::KEEP).contains(&self.order) {
            return Err(refuse(
                "order",
                format!(
                    "must be between 1 and {}",
                    slipstream_prefetch::History::KEEP
                ),
            ));
        }
        if self.window == 0 {
            return Err(refuse("window", "must be at least 1"));
        }
        if self.max_urls == 0
            || self.max_clients == 0
            || self.max_url_len == 0
            || self.max_url_bytes == 0
        {
            return Err(refuse(
                "max_urls",
                "max_urls, max_url_len, max_url_bytes and max_clients must be positive",
            ));
        }
        if let Some(u) = &self.public_url {
            match u.parse::<http::Uri>() {
                Ok(uri)
                    if matches!(uri.scheme_str(), Some("http" | "https"))
                        && uri.authority().is_some() => {}
                _ => {
                    return Err(refuse(
                        "public_url",
                        format!("`{u}` is not an http(s) base URL"),
                    ))
                }
            }
        }
        let threshold = (self.threshold_ms > 0).then(|| Duration::from_millis(self.threshold_ms));
        let defaults = HintsConfig::default();
        Ok(Settings {
            budget,
            epoch: Duration::from_millis(self.epoch_ms),
            doc_files: self.doc_files,
            probe_path: self.probe_path,
            threshold,
            min_threshold: Duration::from_millis(self.min_threshold_ms),
            probe_timeout: Duration::from_millis(self.probe_timeout_ms),
            probes_per_epoch: self.probes_per_epoch,
            pace_lists: self.pace_lists,
            pace_slack: Duration::from_millis(self.pace_slack_ms),
            hold: Duration::from_millis(self.hold_ms),
            monitor: MonitorConfig {
                threshold: threshold.unwrap_or(Duration::from_millis(self.min_threshold_ms.max(1))),
                samples_to_increase: self.samples_to_increase.max(1),
                increase_per_s: self.increase_per_s,
                min_per_s: 0.0,
                max_per_s: self.max_budget_per_s,
                slow_start: self.slow_start,
                restart_after: self.restart_after,
                validate: self.validate_usage,
                validate_floor_per_s: self.doc_files.max(1) as f64
                    / (self.epoch_ms.max(1) as f64 / 1000.0),
                load_target: self.cpu_target,
                cost_target: self.cost_target,
            },
            cpu_count_idle: self.cpu_count_idle,
            cost,
            model: HintsConfig {
                order: self.order,
                window: self.window,
                max_urls: self.max_urls,
                max_url_len: self.max_url_len,
                max_url_bytes: self.max_url_bytes,
                max_clients: self.max_clients,
                fill_popular: self.fill_popular,
                ..defaults
            },
            max_turns: self.max_turns.max(1),
            train_log: self.train_log,
            listen: self.listen,
            public_url: self.public_url.map(|u| u.trim_end_matches('/').to_owned()),
            lower_effort: self.lower_effort,
            listener_priority: self.listener_priority,
            congestion: self.congestion,
            pacing: self.rtt_backoff.then(|| slipstream_http::nice::NiceConfig {
                threshold_pct: self.backoff_threshold_pct,
                floor: Duration::from_millis(self.backoff_floor_ms),
                max_pause: Duration::from_millis(self.backoff_max_pause_ms),
                shared: self.backoff_shared,
            }),
            admit_browser_prefetch: self.admit_browser_prefetch,
            shed: self.shed,
            page_wait: self.page_wait,
            page_invite: if self.page_wait {
                self.page_invite
            } else {
                0.0
            },
            speculation_rules: self.speculation_rules,
            munge: self.munge,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_fields_are_named() {
        let s = Config::default().validate().unwrap();
        assert_eq!(s.budget, Budget::Monitor);
        assert_eq!(s.threshold, None);
        let bad = |c: Config| c.validate().unwrap_err().field;
        assert_eq!(
            bad(Config {
                budget: "lots".into(),
                ..Config::default()
            }),
            "budget"
        );
        assert_eq!(
            bad(Config {
                probe_path: "/_slipstream/status".into(),
                ..Config::default()
            }),
            "probe_path"
        );
        assert!(s.pacing.is_none(), "the back-off is off by default");
        for (c, field) in [
            (
                Config {
                    backoff_threshold_pct: 0,
                    ..Config::default()
                },
                "backoff_threshold_pct",
            ),
            (
                Config {
                    backoff_floor_ms: 5_000,
                    ..Config::default()
                },
                "backoff_floor_ms",
            ),
            (
                Config {
                    backoff_max_pause_ms: 0,
                    ..Config::default()
                },
                "backoff_max_pause_ms",
            ),
        ] {
            assert_eq!(bad(c), field);
        }
        let on = Config {
            rtt_backoff: true,
            backoff_threshold_pct: 30,
            ..Config::default()
        }
        .validate()
        .unwrap();
        assert_eq!(
            on.pacing,
            Some(slipstream_http::nice::NiceConfig {
                threshold_pct: 30,
                floor: Duration::from_millis(1),
                max_pause: Duration::from_millis(500),
                shared: true,
            })
        );
        assert_eq!(
            bad(Config {
                doc_files: 0,
                ..Config::default()
            }),
            "doc_files"
        );
        assert_eq!(
            bad(Config {
                cpu_target: 1.5,
                ..Config::default()
            }),
            "cpu_target"
        );
        assert_eq!(
            bad(Config {
                cost_target: -0.1,
                ..Config::default()
            }),
            "cost_target"
        );
        for invite in [-1.0, f64::NAN, 1e3] {
            assert_eq!(
                bad(Config {
                    page_invite: invite,
                    ..Config::default()
                }),
                "page_invite"
            );
        }
        // A quiet period that leaves nothing to measure between its settles.
        assert_eq!(
            bad(Config {
                cost_target: 0.05,
                quiet_ms: 150,
                ..Config::default()
            }),
            "quiet_ms"
        );
        assert_eq!(
            bad(Config {
                cost_target: 0.05,
                cost_every_ms: 3_600_000,
                ..Config::default()
            }),
            "cost_every_ms"
        );
        let on = Config {
            cost_target: 0.05,
            ..Config::default()
        }
        .validate()
        .unwrap();
        assert_eq!(on.monitor.cost_target, 0.05);
        assert_eq!(on.cost.unwrap().every, Duration::from_secs(4));
        assert!(Config::default().validate().unwrap().cost.is_none());
    }
}
