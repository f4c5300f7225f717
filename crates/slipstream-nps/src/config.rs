//! The `[prefetch]` table of a node's config file: NPS on a `slipstream serve` node.
//!
//! `[prefetch]` holds what an operator decides:
//!
//! ```toml
//! [prefetch]
//! # enabled = true            # default: on when the file has this table or --prefetch is given
//! max_budget_per_s = 100000   # the budget never grows above this many files a second
//! probe_path = "/"            # the representative object the monitor probes
//! # train_log = "access.log"  # a Common Log Format log to train the predictor from at start
//! # listen = "0.0.0.0:8081"   # the prefetch listener (two connections, 000 §2.3.2)
//! # public_url = "https://prefetch.example.org"  # how browsers reach it
//! lower_effort = true         # DSCP Lower-Effort on the listener's packets (RFC 8622)
//! admit_browser_prefetch = true # browsers' own prefetches only within the budget
//! speculation_rules = false   # a Speculation-Rules header naming the budgeted hints
//! munge = true                # add the agent's registration script to pages
//! max_urls = 100000           # the model's bounds: URLs learnt, the length of one, the bytes
//! max_url_len = 512           # of URL text, and the clients whose recent pages it keeps
//! max_url_bytes = "16MiB"
//! max_clients = 50000
//! ```
//!
//! `[prefetch.experimental]` holds the research knobs: the budget's rule, the predictor's
//! parameters and the guards measured in paper 000's experiments. The defaults are the ones
//! the experiments settled on; a key of this table written at the top of `[prefetch]` is
//! refused with a message saying where it moved.
//!
//! ```toml
//! [prefetch.experimental]
//! budget = "monitor"          # "monitor": the AIMD budget (000 §3.3); "unlimited": every hint
//!                             # request gets a list (the paper's No-Avoidance)
//! epoch_ms = 100              # τ: the monitor takes one sample an epoch
//! probes_per_epoch = 5        # the sample is the mean of this many probes spread over the epoch
//! doc_files = 10              # D: files in one hint list (one document's worth)
//! threshold_ms = "3ms"        # a probe slower than this means the server is loaded;
//!                             # 0 (default): found at start-up, at the knee of the
//!                             # response-time curve
//! min_threshold_ms = 1        # ... never below this
//! probe_timeout_ms = 1000     # a probe this slow has failed
//! samples_to_increase = 5     # AIMD: samples under the threshold before the budget grows,
//! increase_per_s = 1.0        # ... by this many files a second
//! slow_start = true           # double instead, until the first overload
//! restart_after = 10          # and again after this many calm increases (0: never)
//! validate_usage = 2.0        # grow only while under this many times the files granted
//!                             # a second lately (0: off)
//! pace_lists = true           # one list every D/B seconds, not the epoch's all at once
//! pace_slack_ms = 2           # a paced slot taken up to this late keeps the schedule
//! hold_ms = 10                # a hint request whose paced slot is this near is held for it,
//!                             # not refused (0: refuse, the paper's rule)
//! cpu_target = 0.7            # keep the node's CPU use under this fraction of what it may
//!                             # use (its cgroup quota, its cores); 0: probes alone
//! cpu_count_idle = true       # count threads at idle priority (an idle listener's) in it:
//!                             # idle priority yields the CPU, not everything a core shares
//! cost_target = 0             # keep what prefetching costs demand, as clients report it
//!                             # (pages served while prefetching against pages served in
//!                             # quiet periods), under this fraction; 0: off. On, prefetching
//!                             # stops for quiet_ms at the start of every cost_every_ms
//! cost_every_ms = 4000
//! quiet_ms = 500
//! shed = true                 # while the monitor's last sample found the node overloaded,
//!                             # refuse prefetches (503) and hint lists at once
//! page_wait = true            # when the hint server would tell every client to wait (no
//!                             # budget, or shedding), pages say so and agents do not ask
//! page_invite = 2.0           # with page_wait, pages invite agents to ask about twice as
//!                             # often as the budget has lists; the rest are told to wait
//! order = 2                   # PPM-2/10 (000 §6.3)
//! window = 10
//! fill_popular = true         # fill short lists with the most popular URLs
//! max_turns = 10              # hint turns a client may chain after one document
//! listener_priority = "normal" # the listener's CPU priority: "normal" (demand's thread) or
//!                             # "idle" (a thread of its own in SCHED_IDLE)
//! congestion = ["lp", "ledbat"] # less-than-best-effort congestion controls to ask for
//! rtt_backoff = false         # the listener's connections give way when their round-trip
//!                             # time rises above its least (TCP Nice's signal, from TCP_INFO)
//! backoff_threshold_pct = 20  # ... by this share of the spread between least and greatest
//! backoff_floor_ms = 1        # ... and by more than this
//! backoff_max_pause_ms = 500  # the longest pause between probes at the smallest window
//! backoff_shared = true       # one window for all the connections to a client address
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use slipstream_prefetch::hints::HintsConfig;
use slipstream_prefetch::monitor::MonitorConfig;

/// The `[prefetch]` table: what an operator decides. The research knobs are in
/// [`Experimental`].
///
/// Read it through serde's `Deserialize`, which refuses a key of `[prefetch.experimental]`
/// written at the top level with a message saying where it moved. The derive (serde's
/// `remote = "Self"`) only reads the fields: its inherent `Config::deserialize` skips that check.
#[derive(Debug, Clone, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
pub struct Config {
    /// Run NPS. By default a node prefetches when its file has a `[prefetch]` table or a
    /// prefetch flag is given; `false` turns it off regardless.
    pub enabled: Option<bool>,
    /// The path (with its query) of the representative object the monitor probes.
    pub probe_path: String,
    /// The budget never grows above this many files per second.
    pub max_budget_per_s: f64,
    /// Distinct URLs the model learns at most.
    pub max_urls: usize,
    /// URLs (path and query) longer than this are not learnt (a query string of kilobytes).
    pub max_url_len: usize,
    /// Bytes of URL text the model holds at most.
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_url_bytes: usize,
    /// Clients whose recent pages the model keeps at most (oldest forgotten first).
    pub max_clients: usize,
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
    /// Answer browsers' own prefetches (`Sec-Purpose: prefetch`) only within the monitor's
    /// budget; beyond it, 503 at once.
    pub admit_browser_prefetch: bool,
    /// Send the `Speculation-Rules` header with pages, naming a rule set of the budgeted hints
    /// (`/_slipstream/speculationrules`), so browsers prefetch natively.
    pub speculation_rules: bool,
    /// The munger (000 §5/§6.1): add the agent's registration script to pages that lack it.
    pub munge: bool,
    /// The research knobs: `[prefetch.experimental]`.
    pub experimental: Experimental,
}

/// The `[prefetch.experimental]` table: the budget's rule, the predictor's parameters and the
/// guards measured in paper 000's experiments. Their defaults are the ones the experiments
/// settled on; a key of this table written at the top of `[prefetch]` is refused with a
/// message saying where it moved.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Experimental {
    /// `"monitor"` (the budget follows the server's spare capacity) or `"unlimited"` (every
    /// hint request gets a list: the paper's No-Avoidance, for comparisons).
    pub budget: String,
    /// The epoch τ, in milliseconds: the monitor probes once an epoch and the hint server
    /// counts requests per epoch.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub epoch_ms: u64,
    /// D: the files in one hint list.
    pub doc_files: usize,
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
    /// Fill hint lists with the most popular URLs when the predictor knows too little.
    pub fill_popular: bool,
    /// Hint turns a client may chain after one document (000 §6.1's TURN), at most.
    pub max_turns: usize,
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
}

/// The keys of [`Experimental`], which older configs wrote at the top of `[prefetch]`.
const MOVED: &[&str] = &[
    "budget",
    "epoch_ms",
    "doc_files",
    "threshold_ms",
    "min_threshold_ms",
    "probe_timeout_ms",
    "probes_per_epoch",
    "samples_to_increase",
    "increase_per_s",
    "slow_start",
    "restart_after",
    "validate_usage",
    "pace_lists",
    "pace_slack_ms",
    "hold_ms",
    "cpu_target",
    "cost_target",
    "cost_every_ms",
    "quiet_ms",
    "cpu_count_idle",
    "order",
    "window",
    "fill_popular",
    "max_turns",
    "listener_priority",
    "congestion",
    "rtt_backoff",
    "backoff_threshold_pct",
    "backoff_floor_ms",
    "backoff_max_pause_ms",
    "backoff_shared",
    "shed",
    "page_wait",
    "page_invite",
];

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
        d.deserialize_map(MovedKeys)
    }
}

/// Reads the `[prefetch]` table with the derive, after looking at each key: one that moved to
/// `[prefetch.experimental]` gets a message saying so rather than serde's "unknown field". The
/// key is read inside the format's own key reader, so a file's error still names its line.
struct MovedKeys;

impl<'de> Visitor<'de> for MovedKeys {
    type Value = Config;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the [prefetch] table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Config, A::Error> {
        Config::deserialize(MapAccessDeserializer::new(CheckKeys(map)))
    }
}

/// A map whose keys are checked by [`CheckKey`].
struct CheckKeys<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for CheckKeys<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(CheckKey(seed))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A key of `[prefetch]`: refused with where it moved, or handed to the derive's key reader.
struct CheckKey<K>(K);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for CheckKey<K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        let key = String::deserialize(d)?;
        if MOVED.contains(&key.as_str()) {
            return Err(serde::de::Error::custom(format!(
                "prefetch.{key} is an experiment setting: set it as \
                 prefetch.experimental.{key} ([prefetch.experimental])"
            )));
        }
        self.0.deserialize(key.into_deserializer())
    }
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
            probe_path: "/".into(),
            max_budget_per_s: 100_000.0,
            max_urls: h.max_urls,
            max_url_len: h.max_url_len,
            max_url_bytes: h.max_url_bytes,
            max_clients: h.max_clients,
            train_log: None,
            listen: None,
            public_url: None,
            lower_effort: true,
            admit_browser_prefetch: true,
            speculation_rules: false,
            munge: true,
            experimental: Experimental::default(),
        }
    }
}

impl Default for Experimental {
    fn default() -> Self {
        let h = HintsConfig::default();
        Experimental {
            budget: "monitor".into(),
            epoch_ms: 100,
            doc_files: 10,
            threshold_ms: 0,
            min_threshold_ms: 1,
            probe_timeout_ms: 1000,
            probes_per_epoch: 5,
            samples_to_increase: 5,
            increase_per_s: 1.0,
            slow_start: true,
            restart_after: 10,
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
            fill_popular: h.fill_popular,
            max_turns: 10,
            listener_priority: slipstream_node::bootstrap::Priority::Normal,
            congestion: vec!["lp".into(), "ledbat".into()],
            rtt_backoff: false,
            backoff_threshold_pct: 20,
            backoff_floor_ms: 1,
            backoff_max_pause_ms: 500,
            backoff_shared: true,
            shed: true,
            page_wait: true,
            page_invite: 2.0,
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
        let e = self.experimental;
        let budget = match e.budget.as_str() {
            "monitor" => Budget::Monitor,
            "unlimited" => Budget::Unlimited,
            other => {
                return Err(refuse(
                    "experimental.budget",
                    format!("`{other}`: expected \"monitor\" or \"unlimited\""),
                ))
            }
        };
        if !(1..=60_000).contains(&e.epoch_ms) {
            return Err(refuse(
                "experimental.epoch_ms",
                "must be between 1 ms and 60 s",
            ));
        }
        if !(1..=1000).contains(&e.doc_files) {
            return Err(refuse(
                "experimental.doc_files",
                "must be between 1 and 1000",
            ));
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
        if e.probe_timeout_ms == 0 {
            return Err(refuse("experimental.probe_timeout_ms", "must be positive"));
        }
        if !(e.validate_usage == 0.0 || e.validate_usage >= 1.0) {
            return Err(refuse(
                "experimental.validate_usage",
                "must be 0 (off) or at least 1",
            ));
        }
        if !(e.cpu_target.is_finite() && (0.0..=1.0).contains(&e.cpu_target)) {
            return Err(refuse(
                "experimental.cpu_target",
                "must be between 0 (off) and 1 (all the CPU the node may use)",
            ));
        }
        if !(e.cost_target.is_finite() && (0.0..=1.0).contains(&e.cost_target)) {
            return Err(refuse(
                "experimental.cost_target",
                "must be between 0 (off) and 1 (demand twice as slow)",
            ));
        }
        if !(e.page_invite.is_finite() && (0.0..=100.0).contains(&e.page_invite)) {
            return Err(refuse(
                "experimental.page_invite",
                "must be between 0 (every agent asks) and 100 (times the lists the budget allows)",
            ));
        }
        if e.cost_target > 0.0 && e.cost_every_ms > 600_000 {
            return Err(refuse(
                "experimental.cost_every_ms",
                "must be at most 10 minutes (a cycle's reports wait in memory until it ends)",
            ));
        }
        let cost = (e.cost_target > 0.0)
            .then(|| {
                let c = slipstream_prefetch::cost::CostConfig {
                    every: Duration::from_millis(e.cost_every_ms),
                    quiet: Duration::from_millis(e.quiet_ms),
                    ..Default::default()
                };
                c.check().map(|()| c)
            })
            .transpose()
            .map_err(|why| refuse("experimental.quiet_ms", why))?;
        if !(1..=100).contains(&e.backoff_threshold_pct) {
            return Err(refuse(
                "experimental.backoff_threshold_pct",
                "must be between 1 and 100 (per cent of the spread of round-trip times)",
            ));
        }
        if e.backoff_floor_ms > 1000 {
            return Err(refuse(
                "experimental.backoff_floor_ms",
                "must be at most 1 s",
            ));
        }
        if !(1..=10_000).contains(&e.backoff_max_pause_ms) {
            return Err(refuse(
                "experimental.backoff_max_pause_ms",
                "must be between 1 ms and 10 s (a longer pause reads as an idle connection)",
            ));
        }
        if e.pace_slack_ms > 1000 {
            return Err(refuse("experimental.pace_slack_ms", "must be at most 1 s"));
        }
        if e.hold_ms > 10_000 {
            return Err(refuse(
                "experimental.hold_ms",
                "must be at most 10 s (a held request keeps its connection)",
            ));
        }
        if !(1..=100).contains(&e.probes_per_epoch) {
            return Err(refuse(
                "experimental.probes_per_epoch",
                "must be between 1 and 100",
            ));
        }
        if !(e.increase_per_s.is_finite() && e.increase_per_s > 0.0) {
            return Err(refuse(
                "experimental.increase_per_s",
                "must be a positive number",
            ));
        }
        if !(self.max_budget_per_s.is_finite() && self.max_budget_per_s >= 1.0) {
            return Err(refuse("max_budget_per_s", "must be at least 1"));
        }
        if !(1..=slipstream_prefetch::History::KEEP).contains(&e.order) {
            return Err(refuse(
                "experimental.order",
                format!(
                    "must be between 1 and {}",
                    slipstream_prefetch::History::KEEP
                ),
            ));
        }
        if e.window == 0 {
            return Err(refuse("experimental.window", "must be at least 1"));
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
        let threshold = (e.threshold_ms > 0).then(|| Duration::from_millis(e.threshold_ms));
        let defaults = HintsConfig::default();
        Ok(Settings {
            budget,
            epoch: Duration::from_millis(e.epoch_ms),
            doc_files: e.doc_files,
            probe_path: self.probe_path,
            threshold,
            min_threshold: Duration::from_millis(e.min_threshold_ms),
            probe_timeout: Duration::from_millis(e.probe_timeout_ms),
            probes_per_epoch: e.probes_per_epoch,
            pace_lists: e.pace_lists,
            pace_slack: Duration::from_millis(e.pace_slack_ms),
            hold: Duration::from_millis(e.hold_ms),
            monitor: MonitorConfig {
                threshold: threshold.unwrap_or(Duration::from_millis(e.min_threshold_ms.max(1))),
                samples_to_increase: e.samples_to_increase.max(1),
                increase_per_s: e.increase_per_s,
                min_per_s: 0.0,
                max_per_s: self.max_budget_per_s,
                slow_start: e.slow_start,
                restart_after: e.restart_after,
                validate: e.validate_usage,
                validate_floor_per_s: e.doc_files.max(1) as f64
                    / (e.epoch_ms.max(1) as f64 / 1000.0),
                load_target: e.cpu_target,
                cost_target: e.cost_target,
            },
            cpu_count_idle: e.cpu_count_idle,
            cost,
            model: HintsConfig {
                order: e.order,
                window: e.window,
                max_urls: self.max_urls,
                max_url_len: self.max_url_len,
                max_url_bytes: self.max_url_bytes,
                max_clients: self.max_clients,
                fill_popular: e.fill_popular,
                ..defaults
            },
            max_turns: e.max_turns.max(1),
            train_log: self.train_log,
            listen: self.listen,
            public_url: self.public_url.map(|u| u.trim_end_matches('/').to_owned()),
            lower_effort: self.lower_effort,
            listener_priority: e.listener_priority,
            congestion: e.congestion,
            pacing: e.rtt_backoff.then(|| slipstream_http::nice::NiceConfig {
                threshold_pct: e.backoff_threshold_pct,
                floor: Duration::from_millis(e.backoff_floor_ms),
                max_pause: Duration::from_millis(e.backoff_max_pause_ms),
                shared: e.backoff_shared,
            }),
            admit_browser_prefetch: self.admit_browser_prefetch,
            shed: e.shed,
            page_wait: e.page_wait,
            page_invite: if e.page_wait { e.page_invite } else { 0.0 },
            speculation_rules: self.speculation_rules,
            munge: self.munge,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_node::config::{ConfigFile, Overrides};

    /// The default config with `e` for its experimental table.
    fn x(e: Experimental) -> Config {
        Config {
            experimental: e,
            ..Config::default()
        }
    }

    /// The `[prefetch]` table of `text` with `sets` applied, as `slipstream serve` reads it.
    fn read(text: &str, sets: &[(&str, f64)]) -> Result<Config, String> {
        let file = ConfigFile::parse(None, text.to_owned()).map_err(|e| e.to_string())?;
        let mut overrides = Overrides::default();
        for (key, value) in sets {
            overrides.set(key, *value);
        }
        file.section("prefetch", &overrides)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_moved_key_at_the_top_level_says_where_it_moved() {
        let moved = "prefetch.cpu_target is an experiment setting: set it as \
                     prefetch.experimental.cpu_target ([prefetch.experimental])";
        let err = read("[prefetch]\nmax_urls = 10\ncpu_target = 0.9\n", &[]).unwrap_err();
        assert!(err.contains(moved), "{err}");
        assert!(
            err.contains("line 3"),
            "the file's error names the line: {err}"
        );
        let err = read("", &[("prefetch.cpu_target", 0.9)]).unwrap_err();
        assert_eq!(err, format!("prefetch.cpu_target: {moved}"));
    }

    #[test]
    fn the_experimental_table_parses_from_the_file_and_from_overrides() {
        let c = read(
            "[prefetch]\nmax_budget_per_s = 50\n\n[prefetch.experimental]\n\
             cpu_target = 0.9\nbudget = \"unlimited\"\nthreshold_ms = \"3ms\"\n",
            &[("prefetch.experimental.cost_target", 0.05)],
        )
        .unwrap();
        assert_eq!(c.max_budget_per_s, 50.0);
        assert_eq!(c.experimental.cpu_target, 0.9);
        assert_eq!(c.experimental.cost_target, 0.05);
        let s = c.validate().unwrap();
        assert_eq!(s.budget, Budget::Unlimited);
        assert_eq!(s.threshold, Some(Duration::from_millis(3)));
        assert_eq!(s.monitor.load_target, 0.9);
        assert_eq!(s.monitor.max_per_s, 50.0);
        let c = read("", &[("prefetch.experimental.cpu_target", 0.5)]).unwrap();
        assert_eq!(c.experimental.cpu_target, 0.5);
        assert_eq!(c.experimental.doc_files, 10, "the rest keeps its defaults");
    }

    #[test]
    fn unknown_keys_are_refused_in_either_table() {
        for text in [
            "[prefetch]\nnope = 1\n",
            "[prefetch.experimental]\nnope = 1\n",
            // An operator setting is not an experiment setting either.
            "[prefetch.experimental]\nmax_urls = 1\n",
        ] {
            let err = read(text, &[]).unwrap_err();
            assert!(err.contains("unknown field"), "{text}: {err}");
        }
        assert!(read("", &[("prefetch.experimental.nope", 1.0)])
            .unwrap_err()
            .contains("unknown field `nope`"));
    }

    #[test]
    fn the_moved_keys_are_exactly_the_experimental_table() {
        // serde's refusal of an unknown field lists the fields the table has.
        let err = read("[prefetch.experimental]\nnope = 1\n", &[]).unwrap_err();
        let listed = err.split("expected one of").nth(1).expect(&err);
        let mut fields: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
        let mut moved = MOVED.to_vec();
        fields.sort_unstable();
        moved.sort_unstable();
        assert_eq!(fields, moved);
    }

    #[test]
    fn defaults_validate_and_bad_fields_are_named() {
        let s = Config::default().validate().unwrap();
        assert_eq!(s.budget, Budget::Monitor);
        assert_eq!(s.threshold, None);
        let bad = |c: Config| c.validate().unwrap_err().field;
        assert_eq!(
            bad(x(Experimental {
                budget: "lots".into(),
                ..Experimental::default()
            })),
            "experimental.budget"
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
                x(Experimental {
                    backoff_threshold_pct: 0,
                    ..Experimental::default()
                }),
                "experimental.backoff_threshold_pct",
            ),
            (
                x(Experimental {
                    backoff_floor_ms: 5_000,
                    ..Experimental::default()
                }),
                "experimental.backoff_floor_ms",
            ),
            (
                x(Experimental {
                    backoff_max_pause_ms: 0,
                    ..Experimental::default()
                }),
                "experimental.backoff_max_pause_ms",
            ),
        ] {
            assert_eq!(bad(c), field);
        }
        let on = x(Experimental {
            rtt_backoff: true,
            backoff_threshold_pct: 30,
            ..Experimental::default()
        })
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
            bad(x(Experimental {
                doc_files: 0,
                ..Experimental::default()
            })),
            "experimental.doc_files"
        );
        assert_eq!(
            bad(x(Experimental {
                cpu_target: 1.5,
                ..Experimental::default()
            })),
            "experimental.cpu_target"
        );
        assert_eq!(
            bad(x(Experimental {
                cost_target: -0.1,
                ..Experimental::default()
            })),
            "experimental.cost_target"
        );
        for invite in [-1.0, f64::NAN, 1e3] {
            assert_eq!(
                bad(x(Experimental {
                    page_invite: invite,
                    ..Experimental::default()
                })),
                "experimental.page_invite"
            );
        }
        // A quiet period that leaves nothing to measure between its settles.
        assert_eq!(
            bad(x(Experimental {
                cost_target: 0.05,
                quiet_ms: 150,
                ..Experimental::default()
            })),
            "experimental.quiet_ms"
        );
        assert_eq!(
            bad(x(Experimental {
                cost_target: 0.05,
                cost_every_ms: 3_600_000,
                ..Experimental::default()
            })),
            "experimental.cost_every_ms"
        );
        let on = x(Experimental {
            cost_target: 0.05,
            ..Experimental::default()
        })
        .validate()
        .unwrap();
        assert_eq!(on.monitor.cost_target, 0.05);
        assert_eq!(on.cost.unwrap().every, Duration::from_secs(4));
        assert!(Config::default().validate().unwrap().cost.is_none());
    }
}
