//! NPS (paper 000) on the node layer: what a `slipstream serve` node with a `[prefetch]` table
//! runs beside its origin.
//!
//! - [`Nps`]: the shared state: the predictor (trained from the demand stream), the budget
//!   distributor and the monitor's budget, the samples and byte counts the status shows.
//! - [`hints`]: `GET /_slipstream/hints?url=CUR&prev=PREV&turn=T` (the paper's `pflist`, §6.1),
//!   and `GET /_slipstream/prefetch`, the monitor's state as JSON.
//! - [`demand`]: the phase that sees every request: demand requests train the predictor (off
//!   the request path, through a bounded queue) and both kinds are counted in bytes.
//! - [`monitor`]: the task that finds the threshold at start-up and probes the server once an
//!   epoch (§3.3).
//! - [`config`]: the `[prefetch]` table.
//!
//! The algorithms (AIMD, p = min(1, B·τ/(N·D)), PPM-n/w) are `slipstream-prefetch`'s, without
//! I/O; this crate gives them a clock, sockets and a lock.

pub mod config;
pub mod cpu;
pub mod demand;
pub mod guard;
pub mod hints;
pub mod listener;
pub mod monitor;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;
use slipstream_prefetch::budget::{Distributor, Grant};
use slipstream_prefetch::cost::{CostMeter, Report};
use slipstream_prefetch::hints::Hints;
use slipstream_prefetch::monitor::{Change, Monitor, Next};

pub use config::{Budget, Config, Experimental, Settings};

/// How many monitor samples the status keeps (a minute at 100 ms epochs).
pub const SAMPLES_KEPT: usize = 600;

/// The request header that marks the monitor's probes: they are neither demand nor prefetch.
pub const PROBE_HEADER: &str = "slipstream-probe";

/// The response header by which a page tells its agent to wait this many milliseconds before
/// its first hint request, when the hint server would tell every client to wait now
/// ([`Nps::page_hint_wait`]); the munged script carries it too (`data-hints-wait-ms`).
pub const HINTS_WAIT_HEADER: &str = "slipstream-hints-wait-ms";

/// The response header by which a page says when it was served (milliseconds since the node
/// started), with `cost_target` on: the agent sends it back with the page's response time on
/// its first hint request (`served_ms` and `page_us`), so that the node can tell what
/// prefetching costs demand ([`Nps::report_page`]).
pub const SERVED_HEADER: &str = "slipstream-served-ms";

/// The response header by which a page names its prefetch listener's base URL, where the
/// agent sends its hint requests (the first one too) and its prefetches, so that none of them
/// is served on demand's port.
pub const PREFETCH_BASE_HEADER: &str = "slipstream-prefetch-base";

/// One monitor sample.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    /// Milliseconds since the node started.
    pub at_ms: u64,
    /// The probe's response time in microseconds, or `None` if it failed.
    pub rt_us: Option<u64>,
    /// The node's CPU load over the epoch before it (a fraction of what it may use), if known.
    pub load: Option<f64>,
    /// The run-queue delay of the node's threads not at idle priority over the same epoch, in
    /// seconds per second, if known ([`cpu::CpuMeter::demand_wait`]).
    pub demand_wait: Option<f64>,
    /// The budget after the sample, in files per second.
    pub budget_per_s: f64,
    /// What the sample did: `none`, `increased`, `halved`, `outlier`, `reprobe`, `decayed`,
    /// `cut` (for load), `braked` (for prefetching's cost), `quiet` (a quiet period: the
    /// budget was left alone).
    pub change: &'static str,
}

/// Bytes and requests of one kind.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Responses.
    pub requests: AtomicU64,
    /// Body bytes (as the responses' `Content-Length` says).
    pub bytes: AtomicU64,
}

impl Traffic {
    fn add(&self, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
        })
    }
}

/// NPS's state on one node. Shared by the hint endpoint, the demand phase and the monitor.
#[derive(Debug)]
pub struct Nps {
    settings: Settings,
    started: Instant,
    model: Mutex<Hints>,
    control: Mutex<Control>,
    /// Demand responses.
    pub demand: Traffic,
    /// Prefetch responses (`Sec-Purpose: prefetch`, or through the prefetch listener).
    pub prefetch: Traffic,
    /// Of those, the ones through the prefetch listener.
    pub via_listener: Traffic,
    /// Demand requests not learnt because the training queue was full.
    pub unlearnt: AtomicU64,
    /// Browsers' own prefetches refused, for want of budget or while shedding.
    pub refused: AtomicU64,
    /// The monitor's last sample found the node overloaded, and `shed` is on: prefetches and
    /// hint lists are refused until a sample finds it under again.
    shedding: AtomicBool,
    /// Prefetch requests refused while shedding.
    pub shed_prefetches: AtomicU64,
    /// Hint requests answered with a wait while shedding.
    pub shed_hint_requests: AtomicU64,
    /// Hint requests that came through the prefetch listener (a client's later ones).
    pub hint_requests_via_listener: AtomicU64,
    /// Pages that told their agent to wait instead of asking ([`Nps::page_hint_wait`]).
    pub page_waits: AtomicU64,
    /// Hint requests told to wait for the end of a quiet period ([`Nps::quiet_left`]).
    pub quiet_hint_requests: AtomicU64,
    /// Hint and Speculation Rules requests answered with nothing: the client asked to save
    /// data or is on a slow connection ([`guard::wants_less_data`]).
    pub save_data_requests: AtomicU64,
    /// URLs whose responses were personal, never hinted ([`guard`]).
    pub personal: guard::Personal,
    /// Demand requests not learnt because they or their responses were personal.
    pub personal_not_learnt: AtomicU64,
    /// The monitor's budget after its last sample (an `f64`'s bits), for a look without the
    /// lock on every page served.
    budget_now: AtomicU64,
    /// The prefetch listener, once bound, and the base URL hint lists send clients to.
    listener: parking_lot::RwLock<Option<(listener::Applied, String)>>,
    /// The prefetch listener's back-off and what its connections did (with `rtt_backoff`).
    pacing: Option<slipstream_http::nice::Pacing>,
}

/// The budget's state.
#[derive(Debug)]
struct Control {
    monitor: Monitor,
    distributor: Distributor,
    rng: StdRng,
    samples: VecDeque<Sample>,
    /// The start-up curve (concurrency, median response time in µs), once measured.
    curve: Vec<(f64, u64)>,
    /// The threshold in force (configured, or found at start-up).
    threshold: Duration,
    /// Where it came from: `configured`, `pending` (start-up curve not measured yet), or a
    /// `ThresholdSource` name.
    threshold_source: &'static str,
    /// Files granted per second lately (an EWMA over about a second), for the monitor's
    /// validation, and the files granted, counted at each sample.
    used_per_s: f64,
    used: CountRate,
    /// The requests answered, counted at each load report.
    served: CountRate,
    /// Probes that failed, and the last failure (milliseconds since start, why).
    probe_failures: u64,
    last_probe_failure: Option<(u64, String)>,
    /// What prefetching costs demand, with `cost_target` on.
    cost: Option<CostMeter>,
}

/// The rate of a growing count between two readings.
#[derive(Debug)]
struct CountRate(Option<(Duration, u64)>);

impl CountRate {
    /// Per second since the last reading (at `now`, the count `count`), and the seconds since
    /// it; `None` at the first reading, or when no time has passed (the reading is then not
    /// taken).
    fn per_s(&mut self, now: Duration, count: u64) -> Option<(f64, f64)> {
        let rate = match self.0 {
            Some((then, before)) => {
                let dt = now.saturating_sub(then).as_secs_f64();
                if dt <= 0.0 {
                    return None;
                }
                Some((count.saturating_sub(before) as f64 / dt, dt))
            }
            None => None,
        };
        self.0 = Some((now, count));
        rate
    }
}

/// The answer to a hint request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// URLs (paths) to prefetch, best first.
    pub hints: Vec<String>,
    /// The turn to ask for next, if the chain goes on.
    pub next_turn: Option<usize>,
    /// No list now: ask again after this long.
    pub retry_after: Option<Duration>,
    /// The list's paced slot is this far off: answer then ([`Distributor::hold`]).
    pub hold: Option<Duration>,
}

impl Nps {
    /// NPS with `settings`, untrained.
    pub fn new(settings: Settings) -> Nps {
        let monitor = Monitor::new(settings.monitor.clone());
        let budget_now = AtomicU64::new(monitor.budget_per_s().to_bits());
        let threshold = settings.monitor.threshold;
        let pacing = settings.pacing.map(|config| slipstream_http::nice::Pacing {
            config,
            ..Default::default()
        });
        Nps {
            model: Mutex::new(Hints::new(settings.model.clone())),
            control: Mutex::new(Control {
                monitor,
                distributor: Distributor::new(settings.epoch, settings.doc_files)
                    .paced(settings.pace_lists)
                    .slack(settings.pace_slack)
                    .hold(settings.hold)
                    .invite(settings.page_invite),
                rng: StdRng::from_entropy(),
                samples: VecDeque::with_capacity(SAMPLES_KEPT),
                curve: Vec::new(),
                threshold,
                threshold_source: if settings.threshold.is_some() {
                    "configured"
                } else {
                    "pending"
                },
                used_per_s: 0.0,
                used: CountRate(Some((Duration::ZERO, 0))),
                served: CountRate(None),
                probe_failures: 0,
                last_probe_failure: None,
                cost: settings.cost.clone().and_then(|c| CostMeter::new(c).ok()),
            }),
            settings,
            started: Instant::now(),
            demand: Traffic::default(),
            prefetch: Traffic::default(),
            via_listener: Traffic::default(),
            unlearnt: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            shedding: AtomicBool::new(false),
            shed_prefetches: AtomicU64::new(0),
            shed_hint_requests: AtomicU64::new(0),
            hint_requests_via_listener: AtomicU64::new(0),
            page_waits: AtomicU64::new(0),
            quiet_hint_requests: AtomicU64::new(0),
            save_data_requests: AtomicU64::new(0),
            personal: guard::Personal::default(),
            personal_not_learnt: AtomicU64::new(0),
            budget_now,
            listener: parking_lot::RwLock::new(None),
            pacing,
        }
    }

    /// The prefetch listener's back-off, if on: to serve its connections with.
    pub fn pacing(&self) -> Option<slipstream_http::nice::Pacing> {
        self.pacing.clone()
    }

    /// Records the bound prefetch listener and the base URL clients reach it at.
    pub fn set_listener(&self, applied: listener::Applied, base: String) {
        *self.listener.write() = Some((applied, base));
    }

    /// Whether the prefetch listener serves at idle CPU priority (its own thread at
    /// `SCHED_IDLE` or nice 19), so that the load leaves its work out.
    fn listener_at_idle_priority(&self) -> bool {
        use slipstream_node::bootstrap::PriorityApplied;
        self.listener.read().as_ref().is_some_and(|(a, _)| {
            matches!(a.cpu, PriorityApplied::SchedIdle | PriorityApplied::Nice19)
        })
    }

    /// Where clients send prefetches (`None`: the demand origin itself).
    pub fn prefetch_base(&self) -> Option<String> {
        self.listener.read().as_ref().map(|(_, b)| b.clone())
    }

    /// Whether a browser's own prefetch of one file goes through now (always, with
    /// `budget = "unlimited"` or `admit_browser_prefetch = false`).
    pub fn admit_prefetch(&self) -> bool {
        if self.settings.budget == Budget::Unlimited || !self.settings.admit_browser_prefetch {
            return true;
        }
        let admitted = !self.shedding()
            && self.quiet_left().is_none()
            && self.with_budget(|d, now, budget, rng| d.admit(now, budget, rng));
        if !admitted {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Whether prefetches are refused now: `shed` is on and the monitor's last sample found
    /// the node overloaded ([`Monitor::overloaded`]).
    ///
    /// A quiet period of the cost measurement ([`Nps::quiet_left`]) grants no list and admits
    /// no browser's own prefetch, but lets the prefetches of lists granted before it finish
    /// (its first `settle` is not measured): an agent refused a prefetch drops the rest of
    /// its chain of lists, as the browser agent does, so shedding at every quiet period's
    /// start would end every chain under way.
    pub fn shedding(&self) -> bool {
        self.shedding.load(Ordering::Relaxed)
    }

    /// With `cost_target` on and a quiet period now, the time left of it: no list is granted
    /// and no prefetch served until it ends (`slipstream_prefetch::cost`).
    pub fn quiet_left(&self) -> Option<Duration> {
        if self.settings.budget != Budget::Monitor {
            return None;
        }
        self.settings
            .cost
            .as_ref()?
            .quiet_left(self.started.elapsed())
    }

    /// The wait after a quiet period: what is left of it, and a random part of an epoch so
    /// that the clients it turned away do not all come back at once.
    fn after_quiet(&self, left: Duration) -> Duration {
        use rand::Rng;
        let spread = self.control.lock().rng.gen_range(0.0..1.0);
        left + self.settings.epoch.mul_f64(spread)
    }

    /// With `cost_target` on, when a page served now was served: milliseconds since the node
    /// started, which the page carries ([`SERVED_HEADER`]) for its agent to report back with
    /// its response time ([`Nps::report_page`]).
    pub fn served_at_ms(&self) -> Option<u64> {
        self.settings
            .cost
            .as_ref()
            .map(|_| self.started.elapsed().as_millis() as u64)
    }

    /// A client's report that the page served at `served_ms` ([`Nps::served_at_ms`]) took
    /// `page_us` microseconds to load, as it saw it. `None` when the cost is not measured.
    pub fn report_page(&self, served_ms: u64, page_us: u64) -> Option<Report> {
        let now = self.started.elapsed();
        let mut c = self.control.lock();
        let cost = c.cost.as_mut()?;
        Some(cost.report(
            now,
            Duration::from_millis(served_ms),
            Duration::from_micros(page_us),
        ))
    }

    /// Runs `f` on the distributor with the time since start, the monitor's budget and the RNG,
    /// under the lock that keeps them consistent.
    fn with_budget<T>(
        &self,
        f: impl FnOnce(&mut Distributor, Duration, f64, &mut StdRng) -> T,
    ) -> T {
        let mut c = self.control.lock();
        // Read under the lock, so that callers reach the distributor in the order of their
        // times.
        let now = self.started.elapsed();
        let budget = c.monitor.budget_per_s();
        let Control {
            distributor, rng, ..
        } = &mut *c;
        f(distributor, now, budget, rng)
    }

    /// The wait a page served now tells its agent, or `None` (the agent asks as usual): with
    /// `page_wait` on and the monitor's budget, when every hint request would be told to wait
    /// now (shedding, or too little budget for a list within the longest wait), or, with
    /// `page_invite`, when the page is not among those invited to ask (see
    /// `Distributor::page_wait`). Counted in `page_waits`.
    pub fn page_hint_wait(&self) -> Option<Duration> {
        if !self.settings.page_wait || self.settings.budget != Budget::Monitor {
            return None;
        }
        if let Some(left) = self.quiet_left() {
            self.page_waits.fetch_add(1, Ordering::Relaxed);
            // Counted in the pages' rate, which the invitations after the quiet period use.
            if self.settings.page_invite > 0.0 {
                self.with_budget(|d, now, _, _| d.count_page(now));
            }
            return Some(self.after_quiet(left));
        }
        let shedding = self.shedding();
        // Without invitations, the common case, a list's worth of budget within the longest
        // wait, is answered without the lock. (With them every page counts in the pages'
        // rate.)
        let budget = f64::from_bits(self.budget_now.load(Ordering::Relaxed));
        if !shedding
            && self.settings.page_invite <= 0.0
            && slipstream_prefetch::budget::reaches_a_list_within_the_longest_wait(
                self.settings.epoch,
                self.settings.doc_files,
                budget,
            )
        {
            return None;
        }
        let wait =
            self.with_budget(|d, now, budget, rng| d.page_wait(now, budget, shedding, rng))?;
        self.page_waits.fetch_add(1, Ordering::Relaxed);
        Some(wait)
    }

    /// The predictor's first list for a client at `current` after `previous`, without taking
    /// from the budget (for Speculation Rules, whose prefetches are admitted one by one).
    pub fn predictions(&self, current: &str, previous: Option<&str>) -> Vec<String> {
        let hints = self
            .model
            .lock()
            .hints(current, previous, 0, self.settings.doc_files);
        self.personal.retain_public(hints)
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The model, to train it.
    pub fn model(&self) -> &Mutex<Hints> {
        &self.model
    }

    /// Answers a hint request for a client at `current` after `previous`, turn `turn`.
    pub fn answer(&self, current: &str, previous: Option<&str>, turn: usize) -> Answer {
        if turn >= self.settings.max_turns {
            return Answer {
                hints: Vec::new(),
                next_turn: None,
                retry_after: None,
                hold: None,
            };
        }
        let (len, hold) = match self.settings.budget {
            Budget::Unlimited => (self.settings.doc_files, None),
            Budget::Monitor if self.quiet_left().is_some() => {
                // A quiet period: no list, and back after it.
                self.quiet_hint_requests.fetch_add(1, Ordering::Relaxed);
                let left = self.quiet_left().unwrap_or_default();
                return Answer {
                    hints: Vec::new(),
                    next_turn: Some(turn),
                    retry_after: Some(self.after_quiet(left)),
                    hold: None,
                };
            }
            Budget::Monitor if self.shedding() => {
                // Overloaded now: no list, and a wait as a refused client's at this budget,
                // at least until the next sample has said whether the overload holds.
                self.shed_hint_requests.fetch_add(1, Ordering::Relaxed);
                let after = self.with_budget(|d, now, budget, rng| d.refuse(now, budget, rng));
                return Answer {
                    hints: Vec::new(),
                    next_turn: Some(turn),
                    retry_after: Some(after),
                    hold: None,
                };
            }
            Budget::Monitor => {
                match self.with_budget(|d, now, budget, rng| d.request(now, budget, rng)) {
                    Grant::List(n) => (n, None),
                    Grant::Held(n, after) => (n, Some(after)),
                    Grant::Wait(after) => {
                        return Answer {
                            hints: Vec::new(),
                            next_turn: Some(turn),
                            retry_after: Some(after),
                            hold: None,
                        }
                    }
                }
            }
        };
        let hints = self.model.lock().hints(current, previous, turn, len);
        // The chain goes on when the model had a whole list, personal URLs dropped or not.
        let whole = hints.len() == len;
        let hints = self.personal.retain_public(hints);
        let next_turn = (whole && turn + 1 < self.settings.max_turns).then_some(turn + 1);
        Answer {
            hints,
            next_turn,
            retry_after: None,
            hold,
        }
    }

    /// Takes a probe's response time (`None`: failed), the node's CPU load over the last
    /// epoch and its demand threads' run-queue delay (`None`: not known, or already given with
    /// this epoch's first sample), and says whether to probe again at once.
    pub fn sample(
        &self,
        rt: Option<Duration>,
        load: Option<f64>,
        demand_wait: Option<f64>,
    ) -> Next {
        let now = self.started.elapsed();
        // A quiet period, or prefetching just resumed after one: what the node uses and grants
        // now says nothing of the budget (see below).
        let resting = self.settings.budget == Budget::Monitor
            && self.settings.cost.as_ref().is_some_and(|c| c.resting(now));
        let mut c = self.control.lock();
        // The files granted since the last sample, per second, averaged over about a second.
        let files = c.distributor.totals().files;
        if let Some((rate, dt)) = c.used.per_s(now, files) {
            if !resting {
                let alpha = dt.min(1.0);
                c.used_per_s += alpha * (rate - c.used_per_s);
                let used = c.used_per_s;
                c.monitor.set_usage(used);
            }
        }
        if load.is_some() {
            // The requests answered over the same epoch as the load, for what a request costs.
            // The files answered (demand and prefetch) only: probes, hint requests and
            // responses without a body also use the CPU the load counts, so load / requests
            // overstates a file's cost, and the room a growth step sees errs low.
            // Files the prefetch listener served at idle priority are left out, as its CPU
            // is left out of the load (`cpu`), unless the load counts it.
            let idle = (self.listener_at_idle_priority() && !self.settings.cpu_count_idle)
                .then(|| self.via_listener.requests.load(Ordering::Relaxed));
            let answered = (self.demand.requests.load(Ordering::Relaxed)
                + self.prefetch.requests.load(Ordering::Relaxed))
            .saturating_sub(idle.unwrap_or(0));
            if let Some((rate, _)) = c.served.per_s(now, answered) {
                if !resting {
                    c.monitor.set_served(rate);
                }
            }
        }
        if let Some(estimate) = c.cost.as_mut().and_then(|m| m.close(now)) {
            c.monitor.set_cost(estimate);
        }
        if resting {
            // Nothing is prefetched (or not yet again): the load and the usage say nothing of
            // what the budget costs, a growth step on them would overshoot once prefetching
            // resumes, and validation would decay the budget toward the quiet period's
            // grants. The budget stands as it was; the probes still run, and the sample is
            // kept. (An overload the probes see in it counts from the first sample after it:
            // the quiet period and its settle last 0.6 s by default.)
            return self.keep_sample(&mut c, rt, load, demand_wait, "quiet", Next::NextEpoch);
        }
        c.monitor.set_load(load);
        let (next, change) = c.monitor.sample(rt);
        self.budget_now
            .store(c.monitor.budget_per_s().to_bits(), Ordering::Relaxed);
        self.shedding.store(
            self.settings.shed && self.settings.budget == Budget::Monitor && c.monitor.overloaded(),
            Ordering::Relaxed,
        );
        let change = match (next, change) {
            (Next::ProbeNow, _) => "reprobe",
            (_, Change::Increased) => "increased",
            (_, Change::Halved) => "halved",
            (_, Change::Outlier) => "outlier",
            (_, Change::Decayed) => "decayed",
            (_, Change::Cut) => "cut",
            (_, Change::Braked) => "braked",
            (_, Change::None) => "none",
        };
        self.keep_sample(&mut c, rt, load, demand_wait, change, next)
    }

    /// Keeps a sample for the status; returns `next`.
    fn keep_sample(
        &self,
        c: &mut Control,
        rt: Option<Duration>,
        load: Option<f64>,
        demand_wait: Option<f64>,
        change: &'static str,
        next: Next,
    ) -> Next {
        let sample = Sample {
            at_ms: self.started.elapsed().as_millis() as u64,
            rt_us: rt.map(|d| d.as_micros() as u64),
            load,
            demand_wait,
            budget_per_s: c.monitor.budget_per_s(),
            change,
        };
        if c.samples.len() == SAMPLES_KEPT {
            c.samples.pop_front();
        }
        c.samples.push_back(sample);
        next
    }

    /// Records a failed probe for the status. (The budget hears of a failed probe through the
    /// sample it belonged to, [`Nps::sample`]; the start-up probes are no sample.)
    pub fn probe_failed(&self, failure: &monitor::ProbeFailure) {
        let at_ms = self.started.elapsed().as_millis() as u64;
        let mut c = self.control.lock();
        c.probe_failures += 1;
        c.last_probe_failure = Some((at_ms, failure.to_string()));
    }

    /// Sets the threshold found at start-up, where it came from and the curve it came from.
    pub fn calibrated(&self, threshold: Duration, source: &'static str, curve: Vec<(f64, u64)>) {
        let mut c = self.control.lock();
        c.monitor.set_threshold(threshold);
        c.threshold = threshold;
        c.threshold_source = source;
        c.curve = curve;
    }

    /// The current budget, in files per second.
    pub fn budget_per_s(&self) -> f64 {
        self.control.lock().monitor.budget_per_s()
    }

    /// The monitor's threshold in force.
    pub fn threshold(&self) -> Duration {
        self.control.lock().threshold
    }

    /// The cost measurement's part of the status.
    fn cost_status(&self, m: &CostMeter) -> serde_json::Value {
        let [quiet, busy, settling, late, implausible] = m.counts();
        serde_json::json!({
            "target": self.settings.monitor.cost_target,
            "every_ms": m.config().every.as_millis() as u64,
            "quiet_ms": m.config().quiet.as_millis() as u64,
            "quiet_now": self.quiet_left().is_some(),
            "estimate": m.estimate(),
            "quiet_hint_requests": self.quiet_hint_requests.load(Ordering::Relaxed),
            "reports": {
                "quiet": quiet,
                "busy": busy,
                "settling": settling,
                "late": late,
                "implausible": implausible,
            },
            "cycles": m.results().map(|r| serde_json::json!({
                "cycle": r.cycle,
                "quiet_reports": r.quiet.0,
                "quiet_median_ms": r.quiet.1.map(|s| s * 1e3),
                "busy_reports": r.busy.0,
                "busy_median_ms": r.busy.1.map(|s| s * 1e3),
                "cost": r.cost,
                "mean_cost": r.mean_cost,
            })).collect::<Vec<_>>(),
        })
    }

    /// Everything the status shows, as JSON.
    pub fn status(&self) -> serde_json::Value {
        let model = self.model.lock().stats();
        let c = self.control.lock();
        let totals = c.distributor.totals();
        let rtt_backoff = self.pacing.as_ref().map(|p| {
            let n = p.stats.snapshot();
            serde_json::json!({
                "threshold_pct": p.config.threshold_pct,
                "floor_ms": p.config.floor.as_secs_f64() * 1e3,
                "max_pause_ms": p.config.max_pause.as_secs_f64() * 1e3,
                "shared": p.config.shared,
                "client_windows": p.clients.len(),
                "connections": n.connections,
                "unpaced_connections": n.unpaced,
                "backoffs": n.backoffs,
                "pauses": n.pauses,
                "holds": n.holds,
            })
        });
        // What the guards kept from prefetching (crate::guard).
        let guards = serde_json::json!({
            "save_data_requests": self.save_data_requests.load(Ordering::Relaxed),
            "personal_not_learnt": self.personal_not_learnt.load(Ordering::Relaxed),
            "personal_urls": self.personal.len(),
        });
        serde_json::json!({
            "budget": match self.settings.budget {
                Budget::Monitor => "monitor",
                Budget::Unlimited => "unlimited",
            },
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "epoch_ms": self.settings.epoch.as_millis() as u64,
            "probe_path": self.settings.probe_path,
            "doc_files": self.settings.doc_files,
            "threshold_us": c.threshold.as_micros() as u64,
            "threshold_configured": self.settings.threshold.is_some(),
            "threshold_source": c.threshold_source,
            "startup_curve": c.curve.iter().map(|(x, us)| serde_json::json!([x, us])).collect::<Vec<_>>(),
            "budget_per_s": c.monitor.budget_per_s(),
            "cpu_target": self.settings.monitor.load_target,
            "cpu_count_idle": self.settings.cpu_count_idle,
            "slow_start": c.monitor.slow_starting(),
            "p": c.distributor.p(c.monitor.budget_per_s()),
            "lists": totals.lists,
            "granted_files": totals.files,
            "waits": totals.waits,
            "held": totals.held,
            "demand": self.demand.json(),
            "prefetch": self.prefetch.json(),
            "via_listener": self.via_listener.json(),
            "refused_browser_prefetches": self.refused.load(Ordering::Relaxed),
            "shed": self.settings.shed,
            "shedding": self.shedding(),
            "shed_prefetches": self.shed_prefetches.load(Ordering::Relaxed),
            "shed_hint_requests": self.shed_hint_requests.load(Ordering::Relaxed),
            "hint_requests_via_listener": self.hint_requests_via_listener.load(Ordering::Relaxed),
            "page_wait": self.settings.page_wait,
            "page_waits": self.page_waits.load(Ordering::Relaxed),
            "page_invite": self.settings.page_invite,
            "pages_not_invited": totals.pages_not_invited,
            "pages_per_s": c.distributor.page_rate(self.started.elapsed()),
            "listener": self.listener.read().as_ref().map(|(a, base)| serde_json::json!({
                "addr": a.addr.to_string(),
                "base": base,
                "lower_effort": a.lower_effort,
                "congestion": a.congestion,
                "low_priority_congestion": a.low_priority_congestion,
                "cpu_priority": a.cpu,
                "rtt_backoff": rtt_backoff,
            })),
            "model": {
                "learnt": model.learnt,
                "urls": model.urls,
                "contexts": model.contexts,
                "clients": model.clients,
                "refused": model.refused,
                "unqueued": self.unlearnt.load(Ordering::Relaxed),
            },
            "guards": guards,
            "probe_failures": c.probe_failures,
            "last_probe_failure": c.last_probe_failure.as_ref().map(|(at_ms, why)| serde_json::json!({
                "at_ms": at_ms,
                "reason": why,
            })),
            "cost": c.cost.as_ref().map(|m| self.cost_status(m)),
            "samples": c.samples.iter().collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_rate_starts_at_its_second_reading_and_skips_a_zero_interval() {
        let s = Duration::from_secs;
        let mut r = CountRate(None);
        assert_eq!(r.per_s(s(1), 100), None);
        assert_eq!(r.per_s(s(3), 500), Some((200.0, 2.0)));
        // No time passed: no rate, and the reading is not taken.
        assert_eq!(r.per_s(s(3), 900), None);
        assert_eq!(r.per_s(s(4), 700), Some((200.0, 1.0)));
        // A count that went back reads as nothing answered, not a negative rate.
        assert_eq!(r.per_s(s(5), 600), Some((0.0, 1.0)));
    }

    #[test]
    fn a_quiet_period_grants_nothing_and_leaves_the_budget_alone() {
        // A quiet period of a minute from the start, so that the test runs inside it.
        let settings = config::Config {
            experimental: config::Experimental {
                cost_target: 0.05,
                cost_every_ms: 130_000,
                quiet_ms: 60_000,
                ..Default::default()
            },
            ..config::Config::default()
        }
        .validate()
        .expect("valid");
        let nps = Nps::new(settings);
        let left = nps.quiet_left().expect("quiet from the start");
        assert!(left > Duration::from_secs(50), "{left:?}");
        // No browser's own prefetch is admitted, but granted lists are not shed.
        assert!(!nps.admit_prefetch());
        assert!(!nps.shedding());
        let a = nps.answer("/a.html", None, 0);
        assert!(a.hints.is_empty());
        assert_eq!(a.next_turn, Some(0));
        assert!(a.retry_after.expect("a wait") >= Duration::from_secs(50));
        assert!(nps.page_hint_wait().expect("a page wait") >= Duration::from_secs(50));
        // Samples in it leave the budget where it was, however idle the node looks.
        let budget = nps.budget_per_s();
        for _ in 0..20 {
            nps.sample(Some(Duration::from_micros(100)), Some(0.01), Some(0.0));
        }
        assert_eq!(nps.budget_per_s(), budget);
        assert_eq!(nps.status()["samples"][0]["change"], "quiet");
        // Pages carry when they were served, and reports are sorted or left out.
        assert!(nps.served_at_ms().is_some());
        // (A page served at the start is in the settle; one served after now is implausible.)
        assert_eq!(nps.report_page(0, 3000), Some(Report::Settling));
        assert_eq!(
            nps.report_page(u64::MAX / 4, 3000),
            Some(Report::Implausible)
        );
        let reports = &nps.status()["cost"]["reports"];
        assert_eq!(
            (&reports["settling"], &reports["implausible"]),
            (&1.into(), &1.into())
        );
    }

    #[test]
    fn without_a_cost_target_there_is_no_quiet_period_and_no_report_is_taken() {
        let nps = Nps::new(config::Config::default().validate().expect("valid"));
        assert_eq!(nps.quiet_left(), None);
        assert_eq!(nps.served_at_ms(), None);
        assert_eq!(nps.report_page(0, 3000), None);
        assert!(nps.status()["cost"].is_null());
    }
}
