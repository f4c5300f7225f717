//! The monitor's budget estimation (000 §3.2–§3.3), without I/O: the caller probes the server
//! with a representative request about once an epoch (~100 ms), hands each response time to
//! [`Monitor::sample`], and probes again at once when it is told to ([`Next::ProbeNow`]).
//!
//! The rule is the paper's AIMD: "If in five consecutive epochs, the five response time samples
//! lie below a threshold, the monitor increases the budget by 1. While taking the five samples,
//! if any sample exceeds the threshold, the monitor sends another probe immediately to check if
//! the sample was an outlier. If even the new sample exceeds the threshold, indicating a loaded
//! server, the monitor decreases the budget by half and restarts collecting the next five
//! samples" (§3.3).
//!
//! Two additions, each a configuration:
//! - **Slow start.** A budget that grows by one prefetch a second per five samples takes
//!   minutes to reach the spare capacity of a server that answers thousands of requests a
//!   second. Until the first confirmed overload the budget doubles instead of growing by one
//!   (TCP's slow start applied to the budget); after it, increase is additive as in the paper.
//!   After a halving (or the end of slow start below), ten increases in a row without an overload (five seconds at the paper's
//!   epoch) start slow start again, growing by a quarter a step rather than doubling (TCP's
//!   limited slow start, RFC 3742): the load that caused the halving may have gone (often a
//!   start-up transient), and spare capacity should not take minutes to be used again, but an
//!   overshoot should cost a quarter of the budget, not all of it. (In pilot runs of Fig. 4,
//!   not kept: doubling again, as an earlier version did, overloaded the server every few
//!   seconds; doubling only up to half the overloaded budget left a budget set by a start-up
//!   transient at a few files a second for the whole run.) Slow start also stops,
//!   without a halving, at the first sample above half the threshold (HyStart's rule for TCP,
//!   Ha and Rhee 2011: the delay has started to rise, so the budget is near the spare capacity
//!   and should grow additively from there rather than overshoot it by up to twice). `slow_start = false`
//!   is the paper's rule exactly.
//! - **Budget validation** (RFC 7661's rule for TCP's window, applied to the budget): the
//!   budget grows only while it is less than `validate` times the files clients were actually
//!   granted per second plus one list an epoch, and decays toward that
//!   bound when it is above it. Without it a budget nobody uses grows without limit while the
//!   probes see an idle server (seen: 40,000 files/s on a server that answers 30,000 in all),
//!   and the next burst of hint requests is granted all of it at once. The caller reports the
//!   use with [`Monitor::set_usage`]; `validate = 0` turns the rule off.
//! - **The node's own load** (`load_target`): probes see a server's load only once it is
//!   nearly saturated, too late near capacity (on our test server the probes stayed at
//!   50–130 µs up to a collapse: docs/experiments/000-nps.md). The caller also reports the
//!   node's CPU load each epoch, as a fraction of the CPU it may use ([`Monitor::set_load`]).
//!   Over the target, the budget is cut (from what clients were granted lately when that is
//!   less than the budget, by at most half): with the requests answered reported
//!   ([`Monitor::set_served`]), by the requests the load is over the aim by at what a request
//!   costs now; without them, to the target over the load. At most once every
//!   [`LOAD_CUT_EVERY`] samples so that a cut is measured before the next, and it does not
//!   grow. Under it, a growth step (after the paper's five good samples) aims at [`LOAD_AIM`]
//!   of the target: with the requests the node answered per second reported as well
//!   ([`Monitor::set_served`]), it adds half the requests the aim leaves room for at what a
//!   request costs now (load over requests), at most the requests answered now; without
//!   them, it multiplies the budget by the aim over the mean load since the last change, at
//!   most doubling it. Either way steps are large far from the aim, small near it, none past
//!   it, and between the aim and the target the budget holds. This replaces slow start and
//!   the additive increase while the load is known. The probes keep their rule: a confirmed
//!   sample over the threshold still halves the budget. `0` turns it off (the paper's rule).
//! - **What prefetching costs demand** (`cost_target`): neither the probes nor the load see
//!   what prefetching costs demand outside the node's own threads (the kernel's network work,
//!   the clients' side, a shared link). The caller reports an estimate from time to time
//!   ([`Monitor::set_cost`], measured by [`crate::cost`]: how much slower clients found the
//!   pages served while prefetching than those served in quiet periods). Over the target, the
//!   budget is cut to the target over the cost, by at most half; growth waits for an
//!   estimate under [`COST_AIM`] of the target. It only ever holds the budget back: the
//!   probes and the load keep their rules. `0` turns it off.
//! - **Overloaded now** ([`Monitor::overloaded`]): after each sample, whether its probes were
//!   over the threshold (before a re-probe confirms them) or the load at [`SHED_LOAD`] or
//!   over. The budget changes once an epoch and lists granted before a burst still arrive in
//!   it; a caller sheds prefetches outright while this holds (`prefetch.experimental.shed` on
//!   a node).
//! - **The threshold from the knee** ([`knee`]): the paper supplies thresholds by hand and names
//!   picking them automatically as future work, noting that response time is "nearly constant
//!   ... for low load followed by a sharp rise beyond the knee". [`knee`] finds that point on a
//!   curve measured at start-up; a configured threshold overrides it.

use std::time::Duration;

/// The growth a step of a slow start restarted after an overload.
const PROBE_GROWTH: f64 = 1.25;

/// Samples between two cuts for load: the load of the epoch after a cut still holds part of
/// the time before it.
pub const LOAD_CUT_EVERY: u32 = 2;

/// Growth for load aims at this fraction of the target, and the budget holds between the aim
/// and the target: a dead band, as a thermostat has. Aimed at the target itself, the budget
/// grew until an epoch's load crossed it, and an epoch's load varies by about 0.1 around its
/// mean on our test server: the load sat at the target, crossing it every few epochs, and each
/// crossing was a cut followed by a second of lists already granted and queued carrying the
/// load to 0.8–0.9 (seen at 1,200 documents/s: the samples in
/// docs/experiments/000/nps/pilots/pilot24-status-monitor-knee-1200-2.json).
pub const LOAD_AIM: f64 = 0.9;

/// The budget grows again only once prefetching's cost is under this fraction of the cost
/// target; between the two it holds (the load target's dead band, for the same reason: the
/// estimate varies around its mean, by 2-6 points on our test machine:
/// docs/experiments/000-nps.md, pilots 70-76).
pub const COST_AIM: f64 = 0.5;

/// A load at or over this (or over the target, if that is higher) makes the node overloaded
/// ([`Monitor::overloaded`]) whatever the probes say: the CPU is nearly all in use, so no
/// prefetch fits. (At the target itself, an epoch's load crosses it every few epochs from
/// noise alone, about 0.1 around its mean: the budget's cut handles that.)
pub const SHED_LOAD: f64 = 0.9;

/// The monitor's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// A probe slower than this means the server is loaded.
    pub threshold: Duration,
    /// Consecutive samples under the threshold before the budget grows (the paper's five).
    pub samples_to_increase: u32,
    /// Additive increase, in prefetched files per second (the paper's 1).
    pub increase_per_s: f64,
    /// The budget never falls below this (files per second); 0 lets prefetching stop entirely.
    pub min_per_s: f64,
    /// The budget never grows above this (files per second): a bound, not a tuning knob.
    pub max_per_s: f64,
    /// Double the budget instead of adding to it until the first confirmed overload.
    pub slow_start: bool,
    /// With `slow_start`, go back to doubling after this many additive increases in a row
    /// (0: never).
    pub restart_after: u32,
    /// Grow only while the budget is under this many times the files granted per second, plus
    /// `validate_floor_per_s`; decay toward that bound above it. 0: no validation.
    pub validate: f64,
    /// Added to the bound, in files per second (one list an epoch: D/τ).
    pub validate_floor_per_s: f64,
    /// Keep the node's load (the fraction of its CPU it uses, [`Monitor::set_load`]) under
    /// this; 0: off.
    pub load_target: f64,
    /// Keep what prefetching costs demand (the fraction by which pages served while
    /// prefetching are slower than pages served in quiet periods, as clients report them:
    /// [`crate::cost`], [`Monitor::set_cost`]) under this; 0: off.
    pub cost_target: f64,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            threshold: Duration::from_millis(10),
            samples_to_increase: 5,
            increase_per_s: 1.0,
            min_per_s: 0.0,
            max_per_s: 100_000.0,
            slow_start: true,
            restart_after: 10,
            validate: 2.0,
            validate_floor_per_s: 100.0,
            load_target: 0.0,
            cost_target: 0.0,
        }
    }
}

/// What the caller does after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Probe again at the next epoch.
    NextEpoch,
    /// Probe again at once: the sample was over the threshold and may be an outlier.
    ProbeNow,
}

/// What a sample did to the budget (for the status page and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing yet.
    None,
    /// The budget grew (additively, or doubled in slow start).
    Increased,
    /// An over-threshold sample was confirmed: the budget was halved.
    Halved,
    /// An over-threshold sample was followed by one under it: an outlier, ignored.
    Outlier,
    /// The budget was far above what clients used: decayed toward it (validation).
    Decayed,
    /// The node's load was over its target: the budget was cut in proportion.
    Cut,
    /// Prefetching cost demand more than the cost target: the budget was cut in proportion.
    Braked,
}

/// A running mean.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    sum: f64,
    n: u32,
}

impl Mean {
    fn push(&mut self, x: f64) {
        self.sum += x;
        self.n += 1;
    }

    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// What the caller reported since the budget last changed, for a growth step's means.
#[derive(Debug, Clone, Copy, Default)]
struct Since {
    load: Mean,
    served: Mean,
}

/// The AIMD budget estimator. The budget is in prefetched files per second.
#[derive(Debug, Clone)]
pub struct Monitor {
    config: MonitorConfig,
    budget: f64,
    /// Consecutive samples under the threshold since the last change.
    good: u32,
    /// The last sample was over the threshold and a re-probe is out.
    confirming: bool,
    /// Doubling: no overload confirmed yet, or none for `restart_after` increases.
    starting: bool,
    /// Additive increases since the last halving.
    increases: u32,
    /// The first slow start has ended (an overload, or a probe over half the threshold):
    /// slow start grows by [`PROBE_GROWTH`] from now on, not by doubling.
    restarted: bool,
    /// Files granted per second lately, as the caller last reported.
    used_per_s: f64,
    /// The node's load over the last epoch, as the caller last reported.
    load: Option<f64>,
    /// The loads, and the request rates, reported since the budget last changed.
    since: Since,
    /// The last request rate reported.
    last_served: Option<f64>,
    /// Samples since the last cut for load.
    since_cut: u32,
    /// The last sample said the node is overloaded ([`Monitor::overloaded`]).
    overloaded: bool,
    /// What prefetching costs demand, as last reported ([`Monitor::set_cost`]).
    cost: Option<f64>,
    /// A cost over the target was reported and the budget not cut for it yet.
    brake: Option<f64>,
}

impl Monitor {
    /// A monitor starting from a budget of `config.min_per_s`, or 1 if that is 0.
    pub fn new(config: MonitorConfig) -> Monitor {
        let budget = config.min_per_s.max(1.0).min(config.max_per_s);
        Monitor {
            starting: config.slow_start,
            config,
            budget,
            good: 0,
            confirming: false,
            increases: 0,
            restarted: false,
            used_per_s: 0.0,
            load: None,
            since: Since::default(),
            last_served: None,
            since_cut: LOAD_CUT_EVERY,
            overloaded: false,
            cost: None,
            brake: None,
        }
    }

    /// Reports a new estimate of what prefetching costs demand ([`crate::cost`]): the fraction
    /// by which demand is slower while prefetching. Over the cost target, the next sample cuts
    /// the budget to the target over the cost (by at most half), as if the cost grew in
    /// proportion to the budget. Growth waits until an estimate is under [`COST_AIM`] of the
    /// target: between the two the budget holds. Report each estimate once: each one over the
    /// target is a cut. (With `cost_target` 0 the estimate is only kept.)
    pub fn set_cost(&mut self, cost: f64) {
        if !cost.is_finite() {
            return;
        }
        self.cost = Some(cost);
        let target = self.config.cost_target;
        self.brake = (target > 0.0 && cost > target).then_some(cost);
    }

    /// Whether the last cost estimate holds growth back.
    fn cost_holds(&self) -> bool {
        let target = self.config.cost_target;
        target > 0.0 && self.cost.is_some_and(|c| c > target * COST_AIM)
    }

    /// Reports the node's load over the last epoch: the CPU it used as a fraction of what it
    /// may use, once per epoch (each report counts in the mean a growth step uses). `None`:
    /// not known, or no new epoch (a re-probe); the next sample then runs on its probe alone.
    pub fn set_load(&mut self, load: Option<f64>) {
        self.load = load.filter(|l| l.is_finite() && *l >= 0.0);
        if let Some(l) = self.load {
            self.since.load.push(l);
        }
    }

    /// Reports the requests the node answered per second over the epoch whose load
    /// [`Monitor::set_load`] reports (demand and prefetch alike), once per epoch. With it a
    /// growth step knows what the load buys: the load over the requests is what one request
    /// costs, so the room left under the aim is a number of requests (see [`Monitor::sample`]).
    pub fn set_served(&mut self, per_s: f64) {
        if per_s.is_finite() && per_s >= 0.0 {
            self.since.served.push(per_s);
            self.last_served = Some(per_s);
        }
    }

    /// The load and the target when a target is set and the load is known.
    fn load_and_target(&self) -> Option<(f64, f64)> {
        let target = self.config.load_target;
        (target > 0.0).then_some(())?;
        Some((self.load?, target))
    }

    /// Ends slow start (after an overload, or near one).
    fn end_slow_start(&mut self) {
        self.starting = false;
        self.restarted = true;
        self.increases = 0;
    }

    /// Reports how many files per second clients were granted lately (for validation).
    pub fn set_usage(&mut self, used_per_s: f64) {
        if used_per_s.is_finite() && used_per_s >= 0.0 {
            self.used_per_s = used_per_s;
        }
    }

    /// The most the budget may grow to now: `validate` times the use, plus the floor. (The
    /// floor is added, not a minimum: grants come in whole lists, so a budget under two lists
    /// an epoch is used one list an epoch, and a bound of twice that use alone would hold it
    /// there.)
    fn validated_bound(&self) -> f64 {
        if self.config.validate > 0.0 {
            self.used_per_s * self.config.validate + self.config.validate_floor_per_s
        } else {
            f64::INFINITY
        }
    }

    /// The current budget, in prefetched files per second.
    pub fn budget_per_s(&self) -> f64 {
        self.budget
    }

    /// The settings.
    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// Replaces the threshold (a re-calibration); the sample count starts again.
    pub fn set_threshold(&mut self, threshold: Duration) {
        self.config.threshold = threshold;
        self.good = 0;
        self.confirming = false;
    }

    /// Whether the last sample found the node overloaded: its probe over the threshold (or
    /// failed), even before a re-probe confirms it, or its load at [`SHED_LOAD`] or over
    /// (or over the target, if that is higher). The budget reacts once a sample an epoch, and
    /// lists granted before a burst keep arriving after it; a caller can refuse prefetches
    /// outright while this holds, until a sample finds the node under both again.
    pub fn overloaded(&self) -> bool {
        self.overloaded
    }

    /// Whether the monitor is still in slow start.
    pub fn slow_starting(&self) -> bool {
        self.starting
    }

    /// Takes one probe's response time; `None` is a probe that failed or timed out, which
    /// counts as over the threshold.
    pub fn sample(&mut self, rt: Option<Duration>) -> (Next, Change) {
        self.since_cut = self.since_cut.saturating_add(1);
        let shed_load = SHED_LOAD.max(self.config.load_target);
        self.overloaded = rt.is_none_or(|rt| rt > self.config.threshold)
            || self.load.is_some_and(|l| l >= shed_load);
        if let Some(cost) = self.brake.take() {
            // What demand pays is measured over seconds (a cycle of the cost meter), so the
            // cut is made once for each estimate, whatever the probes and the load say now.
            self.good = 0;
            self.confirming = false;
            self.end_slow_start();
            self.since = Since::default();
            let factor = (self.config.cost_target / cost).clamp(0.5, 1.0);
            self.budget = (self.budget * factor).max(self.config.min_per_s);
            return (Next::NextEpoch, Change::Braked);
        }
        if let Some((load, target)) = self.load_and_target().filter(|(l, t)| l > t) {
            // Over the load target: no growth, and a cut unless one was just made. A probe
            // over the threshold as well is an overload both signals see: the probes' halving,
            // even right after a cut (seen: a 76 ms probe at a load of 0.96 cut by only a
            // quarter, as the load alone asked).
            let probe_over = rt.is_none_or(|rt| rt > self.config.threshold);
            self.good = 0;
            self.confirming = false;
            self.end_slow_start();
            self.since = Since::default();
            if self.since_cut < LOAD_CUT_EVERY && !probe_over {
                return (Next::NextEpoch, Change::None);
            }
            self.since_cut = 0;
            let from = if self.config.validate > 0.0 {
                self.budget
                    .min(self.used_per_s.max(self.config.validate_floor_per_s))
            } else {
                self.budget
            };
            let cut = if probe_over {
                from * 0.5
            } else if let Some(served) = self.last_served.filter(|r| *r > 0.0) {
                // The growth step's mirror: take away the requests the load is over the aim
                // by, at what a request costs now. (B·T/L shrinks only the prefetching's share
                // of the load, so it left the load at T + D(1 − T/L) for demand's share D:
                // still over the target, and the budget never back in the dead band.) At
                // most half.
                (from - (load - target * LOAD_AIM) / load * served).max(from * 0.5)
            } else {
                from * (target / load).max(0.5)
            };
            self.budget = cut.max(self.config.min_per_s);
            return (Next::NextEpoch, Change::Cut);
        }
        let over = rt.is_none_or(|rt| rt > self.config.threshold);
        if self.starting && rt.is_none_or(|rt| rt > self.config.threshold / 2) {
            self.end_slow_start();
        }
        if over {
            if !self.confirming {
                self.confirming = true;
                return (Next::ProbeNow, Change::None);
            }
            // 000 §3.3: a confirmed over-threshold sample halves the budget and restarts the
            // count of five.
            self.confirming = false;
            self.good = 0;
            self.end_slow_start();
            self.since = Since::default();
            self.budget = (self.budget / 2.0).max(self.config.min_per_s);
            return (Next::NextEpoch, Change::Halved);
        }
        let change = if self.confirming {
            self.confirming = false;
            Change::Outlier
        } else {
            Change::None
        };

        self.good += 1;
        if self.good < self.config.samples_to_increase.max(1) {
            return (Next::NextEpoch, change);
        }
        self.good = 0;
        if self.cost_holds() {
            return (Next::NextEpoch, change);
        }
        let since = std::mem::take(&mut self.since);
        let mean_load = since.load.mean().filter(|_| self.config.load_target > 0.0);
        let mean_served = since.served.mean();
        let bound = self.validated_bound();
        if self.budget >= bound {
            // Unused budget: not grown, and decayed toward what is used (never below the
            // floors), so that a burst of hint requests cannot be granted all of it at once.
            let decayed = (self.budget / 2.0).max(bound).max(self.config.min_per_s);
            if decayed < self.budget {
                self.budget = decayed;
                return (Next::NextEpoch, Change::Decayed);
            }
            return (Next::NextEpoch, change);
        }
        let grown = if let Some(load) = mean_load {
            // The node's load says how far the spare capacity reaches. It also replaces slow
            // start: steps are large while the load is far under the aim and shrink toward one
            // file a second near it.
            let aim = self.config.load_target * LOAD_AIM;
            if load >= aim {
                return (Next::NextEpoch, change);
            }
            let load = load.max(1e-3);
            let step = match mean_served.filter(|r| *r > 0.0) {
                // The requests answered say what the load buys: a request costs load / served,
                // so the aim leaves room for (aim - load) / load × served more a second. Half of
                // it a step: a prefetch may cost more than the average request, and the next
                // step measures the first half. (B·aim/L alone assumes all the load is
                // prefetching: with demand at 0.45 of the CPU, as at 1,200 documents/s on our
                // test server, it grew a budget of a hundred files a second by a quarter a
                // step, and took most of a run to reach the room there was.)
                // At most the requests answered now: a load near zero would otherwise make
                // the room look unbounded (validation bounds it too, when it is on).
                Some(served) => ((aim - load) / load * served / 2.0).min(served),
                // B·aim/L would bring the load to the aim if all of it came from prefetching,
                // and less when part of it is demand, so a step never overshoots it (up to the
                // load's noise).
                None => self.budget * ((aim / load).clamp(1.0, 2.0) - 1.0),
            };
            self.budget + step.max(self.config.increase_per_s)
        } else if self.starting {
            // After an overload, how far the spare capacity now reaches is unknown: probe
            // upwards by a quarter a step, not by doubling (TCP's limited slow start, RFC
            // 3742, for the same reason), so that an overshoot costs a quarter of the budget
            // at most.
            let factor = if self.restarted { PROBE_GROWTH } else { 2.0 };
            (self.budget * factor).max(self.budget + self.config.increase_per_s)
        } else {
            self.increases += 1;
            if self.config.slow_start
                && self.config.restart_after > 0
                && self.increases >= self.config.restart_after
            {
                self.starting = true;
            }
            self.budget + self.config.increase_per_s
        };
        let grown = grown.min(self.config.max_per_s).min(bound.max(self.budget));
        if grown > self.budget {
            self.budget = grown;
            (Next::NextEpoch, Change::Increased)
        } else {
            (Next::NextEpoch, change)
        }
    }
}

/// How far a response time must rise above the curve's first (least loaded) point before the
/// curve counts as risen: by half. The first concurrency at which probes queue at least doubles
/// the median (a probe that waits behind another takes about twice as long), so a rise of less
/// than half is noise, not queueing.
pub const KNEE_RISE: f64 = 1.5;

/// The knee of a response-time curve: the index of the first point whose response time is more
/// than [`KNEE_RISE`] times the first point's, where the "nearly constant value of response
/// time for low load" ends and the "sharp rise" begins (000 §3.3). `points` are (load,
/// response time) in order of load. `None` when there are fewer than three points or the curve
/// never rises that far (no knee: the server was never loaded).
///
/// A server that queues from the second concurrent request (one worker) has no flat part: its
/// curve rises from the first point on, and the knee is the second point. Up to 2f572f8 this
/// was the Kneedle rule (Satopää et al., 2011: the point farthest below the chord from the
/// first point to the last, both axes scaled to [0, 1]). On the monitor's doubling
/// concurrencies (1, 2, 4, ... 64) a single worker's curve is a straight line, which Kneedle
/// sees as having no knee anywhere, and the point it picked came from the line's small bends
/// (about 7 ms on the test server, where the knee is at two probes:
/// `docs/experiments/000/nps/pilots/pilot77/`).
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    if points.len() < 3 {
        return None;
    }
    let first = points[0].1;
    points.iter().position(|&(_, y)| y > first * KNEE_RISE)
}

/// The threshold for a measured curve: halfway between the response time at its [`knee`] and
/// at the point before it (the last of the flat part), so that the monitor backs off as the
/// curve starts to rise rather than once it is steep; never below `floor` (a server that
/// answers in microseconds still needs a threshold above its scheduling noise). `None` when
/// the curve has no knee.
pub fn threshold_from_curve(points: &[(f64, Duration)], floor: Duration) -> Option<Duration> {
    let xy: Vec<(f64, f64)> = points.iter().map(|(x, y)| (*x, y.as_secs_f64())).collect();
    let i = knee(&xy)?;
    let before = points[i.saturating_sub(1)].1;
    Some(((before + points[i].1) / 2).max(floor))
}

/// Where a start-up threshold came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdSource {
    /// The knee of the curve ([`threshold_from_curve`]).
    Knee,
    /// The curve never rose: twice its highest point.
    NoKnee,
    /// Demand arrived while the curve was measured, so it describes the load as much as the
    /// server: the floor.
    Loaded,
}

impl ThresholdSource {
    /// A short name for the status.
    pub fn name(self) -> &'static str {
        match self {
            ThresholdSource::Knee => "knee",
            ThresholdSource::NoKnee => "no knee",
            ThresholdSource::Loaded => "floor: load during calibration",
        }
    }
}

/// The threshold to start with from a start-up curve: at its knee; twice its highest point if
/// it has none; the floor if other traffic arrived while it was measured (`loaded`). A curve
/// measured under load can put the knee far above the idle server's (seen: 124 ms where the
/// idle knee is about 1 ms), and a threshold too high never sees the server loaded; the floor
/// errs, as the paper's monitor does, on the side of not interfering (000 §3.3).
pub fn startup_threshold(
    curve: &[(f64, Duration)],
    floor: Duration,
    loaded: bool,
) -> (Duration, ThresholdSource) {
    if loaded {
        return (floor, ThresholdSource::Loaded);
    }
    match threshold_from_curve(curve, floor) {
        Some(t) => (t, ThresholdSource::Knee),
        None => {
            let top = curve.iter().map(|(_, d)| *d).max().unwrap_or(floor);
            ((top * 2).max(floor), ThresholdSource::NoKnee)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    fn paper() -> Monitor {
        Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            slow_start: false,
            ..MonitorConfig::default()
        })
    }

    #[test]
    fn five_good_samples_add_one() {
        let mut m = paper();
        assert_eq!(m.budget_per_s(), 1.0);
        for _ in 0..4 {
            assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::None));
        }
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Increased));
        assert_eq!(m.budget_per_s(), 2.0);
        for _ in 0..10 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 4.0);
    }

    #[test]
    fn an_over_sample_is_reprobed_and_halves_only_if_confirmed() {
        let mut m = paper();
        for _ in 0..15 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 4.0);
        // An outlier: re-probed at once, then ignored; the count of good samples goes on.
        assert_eq!(m.sample(Some(50 * MS)), (Next::ProbeNow, Change::None));
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Outlier));
        assert_eq!(m.budget_per_s(), 4.0);
        // Confirmed: halved, and the count of five starts again.
        m.sample(Some(2 * MS));
        assert_eq!(m.sample(Some(50 * MS)), (Next::ProbeNow, Change::None));
        assert_eq!(m.sample(None), (Next::NextEpoch, Change::Halved));
        assert_eq!(m.budget_per_s(), 2.0);
        for _ in 0..4 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 2.0);
        m.sample(Some(MS));
        assert_eq!(m.budget_per_s(), 3.0);
    }

    #[test]
    fn slow_start_doubles_until_the_first_overload() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            restart_after: 3,
            ..MonitorConfig::default()
        });
        for _ in 0..25 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 32.0);
        m.sample(Some(20 * MS));
        m.sample(Some(20 * MS));
        assert_eq!(m.budget_per_s(), 16.0);
        assert!(!m.slow_starting());
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 17.0);
        // Three additive increases in a row without an overload: slow start again. The
        // budget is past 16, half the 32 that overloaded the server, so it probes upwards by
        // a quarter a step rather than doubling.
        for _ in 0..10 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 19.0);
        assert!(m.slow_starting());
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 23.75);
        // A second overload halves again.
        for _ in 0..50 {
            m.sample(Some(MS));
        }
        assert!(m.budget_per_s() > 20.0);
        let before = m.budget_per_s();
        m.sample(Some(20 * MS));
        m.sample(Some(20 * MS));
        assert_eq!(m.budget_per_s(), before / 2.0);
    }

    #[test]
    fn a_restart_past_a_stale_ceiling_probes_by_quarters() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            restart_after: 3,
            ..MonitorConfig::default()
        });
        // A start-up transient: overloaded at once, so the ceiling is tiny.
        m.sample(Some(20 * MS));
        m.sample(Some(20 * MS));
        let ceiling = m.budget_per_s();
        assert!(ceiling < 1.0);
        for _ in 0..15 {
            m.sample(Some(MS));
        }
        // Three additive increases, past the ceiling: restarted.
        assert!(m.slow_starting());
        let from = m.budget_per_s();
        for _ in 0..50 {
            m.sample(Some(MS));
        }
        // Ten steps: faster than additive (+10), far slower than doubling (x1024).
        let b = m.budget_per_s();
        assert!(b > from + 15.0 && b < from * 20.0, "{from} -> {b}");
    }

    #[test]
    fn slow_start_ends_when_probes_pass_half_the_threshold() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            restart_after: 10,
            ..MonitorConfig::default()
        });
        for _ in 0..15 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 8.0);
        // 6 ms: under the threshold, over half of it. No halving, but no more doubling.
        assert_eq!(m.sample(Some(6 * MS)), (Next::NextEpoch, Change::None));
        assert!(!m.slow_starting());
        for _ in 0..4 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 9.0);
        // Ten calm increases in all (at 18), slow start resumes, by quarters now: 22.5.
        for _ in 0..50 {
            m.sample(Some(MS));
        }
        assert!(m.slow_starting());
        assert_eq!(m.budget_per_s(), 22.5);
    }

    #[test]
    fn an_unused_budget_stops_growing_and_decays() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            validate: 2.0,
            validate_floor_per_s: 100.0,
            ..MonitorConfig::default()
        });
        // Nobody takes lists: the budget grows to the floor (one list an epoch), no further.
        for _ in 0..200 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 100.0);
        // Clients take 3,000 files/s: it may grow to twice that and one list an epoch more.
        m.set_usage(3_000.0);
        for _ in 0..400 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 6_100.0);
        // They stop: the budget decays back toward the floor, halving every five samples.
        m.set_usage(0.0);
        let (_, change) = (0..5).map(|_| m.sample(Some(MS))).last().unwrap();
        assert_eq!(change, Change::Decayed);
        assert_eq!(m.budget_per_s(), 3_050.0);
        for _ in 0..100 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 100.0);
        // Off (validate = 0), the paper's rule: growth whatever the use.
        let mut paper = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            validate: 0.0,
            ..MonitorConfig::default()
        });
        for _ in 0..200 {
            paper.sample(Some(MS));
        }
        assert!(paper.budget_per_s() > 1_000.0);
    }

    #[test]
    fn the_knee_is_where_the_flat_part_ends() {
        // Flat at about 1 ms up to a load of 8, steep from 16.
        let curve = [
            (1.0, 1.0),
            (2.0, 1.0),
            (4.0, 1.1),
            (8.0, 1.3),
            (16.0, 9.0),
            (32.0, 40.0),
        ];
        assert_eq!(knee(&curve), Some(4));
        assert_eq!(knee(&curve[..2]), None);
        // A curve that never rises, or rises by less than half, has no knee.
        assert_eq!(knee(&[(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)]), None);
        assert_eq!(knee(&[(1.0, 2.0), (2.0, 2.4), (4.0, 2.9)]), None);
        // Two workers: flat for two probes, then a line.
        assert_eq!(
            knee(&[(1.0, 1.0), (2.0, 1.1), (4.0, 2.0), (8.0, 4.0), (16.0, 8.0)]),
            Some(2)
        );
        let with_time: Vec<(f64, Duration)> = curve
            .iter()
            .map(|(x, y)| (*x, Duration::from_secs_f64(y / 1000.0)))
            .collect();
        // Halfway between 1.3 ms and 9 ms, unless the floor is higher.
        assert_eq!(
            threshold_from_curve(&with_time, MS),
            Some(Duration::from_micros(5150))
        );
        assert_eq!(
            threshold_from_curve(&with_time, 8 * MS),
            Some(Duration::from_millis(8))
        );
    }

    #[test]
    fn a_single_workers_straight_line_has_its_knee_at_two_probes() {
        // Pilot 77: the idle single-worker test server at 250 µs a request, in µs. Every probe
        // after the first queues behind another, so there is no flat part.
        let curve: Vec<(f64, Duration)> = [
            (1.0, 286u64),
            (2.0, 560),
            (4.0, 1112),
            (8.0, 2291),
            (16.0, 4616),
            (32.0, 9339),
            (64.0, 19809),
        ]
        .iter()
        .map(|(x, us)| (*x, Duration::from_micros(*us)))
        .collect();
        let xy: Vec<(f64, f64)> = curve.iter().map(|(x, d)| (*x, d.as_secs_f64())).collect();
        assert_eq!(knee(&xy), Some(1));
        // Halfway between one probe and two, 423 µs; raised to the floor.
        assert_eq!(
            threshold_from_curve(&curve, Duration::ZERO),
            Some(Duration::from_micros(423))
        );
        assert_eq!(
            startup_threshold(&curve, MS, false),
            (MS, ThresholdSource::Knee)
        );
    }

    #[test]
    fn a_curve_measured_under_load_gives_the_floor() {
        let curve: Vec<(f64, Duration)> = [(1.0, 1u64), (2.0, 1), (4.0, 2), (8.0, 40), (16.0, 120)]
            .iter()
            .map(|(x, ms)| (*x, *ms as u32 * MS))
            .collect();
        let (t, source) = startup_threshold(&curve, MS, false);
        assert_eq!(source, ThresholdSource::Knee);
        assert!(t > MS && t < 40 * MS, "{t:?}");
        assert_eq!(
            startup_threshold(&curve, MS, true),
            (MS, ThresholdSource::Loaded)
        );
        let flat = [(1.0, 3 * MS), (2.0, 3 * MS), (4.0, 3 * MS)];
        assert_eq!(
            startup_threshold(&flat, MS, false),
            (6 * MS, ThresholdSource::NoKnee)
        );
    }

    #[test]
    fn the_load_target_cuts_and_grows_the_budget_in_proportion() {
        let mut m = load_monitor();
        m.set_load(Some(0.2));
        for _ in 0..25 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 32.0);
        assert!(m.slow_starting());
        // Probes still fast, but the node is at 1.0 of its CPU: cut to 0.8 of the budget, and
        // no second cut until the first has been measured.
        m.set_load(Some(1.0));
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Cut));
        assert!((m.budget_per_s() - 25.6).abs() < 1e-9);
        assert!(!m.slow_starting());
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::None));
        // Far over: cut by half at most.
        m.set_load(Some(4.0));
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Cut));
        assert!((m.budget_per_s() - 12.8).abs() < 1e-9);
        // Over the target with a slow probe, even right after a cut: halved.
        m.set_load(Some(0.9));
        assert_eq!(m.sample(Some(20 * MS)), (Next::NextEpoch, Change::Cut));
        assert!((m.budget_per_s() - 6.4).abs() < 1e-9);
        m.set_load(Some(0.9));
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::None));
        // Between the aim (0.72) and the target (0.8) the budget holds.
        m.set_load(Some(0.75));
        for _ in 0..5 {
            assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::None));
        }
        assert!((m.budget_per_s() - 6.4).abs() < 1e-9);
        // Near the aim, a step grows the budget by aim over load (0.72 / 0.675 = 16/15), and
        // by at least one file a second (6.4 × 16/15 is less than 6.4 + 1).
        m.set_load(Some(0.675));
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert!(
            (m.budget_per_s() - 7.4).abs() < 1e-9,
            "{}",
            m.budget_per_s()
        );
        // The mean load since the last change counts, not the last epoch's.
        for load in [0.1, 0.1, 0.1, 0.1, 0.4] {
            m.set_load(Some(load));
            m.sample(Some(MS));
        }
        assert!(
            (m.budget_per_s() - 14.8).abs() < 1e-9,
            "{}",
            m.budget_per_s()
        );
        // The probes keep their rule: a confirmed slow sample halves.
        m.sample(Some(20 * MS));
        assert_eq!(m.sample(Some(20 * MS)), (Next::NextEpoch, Change::Halved));
        assert!(!m.slow_starting());
        // An unknown load leaves the probes in charge.
        m.set_load(None);
        for _ in 0..50 {
            m.sample(Some(MS));
        }
        assert!(m.slow_starting());
    }

    /// A monitor with a load target of 0.8 and no validation, for the load rule's tests.
    fn load_monitor() -> Monitor {
        Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            load_target: 0.8,
            validate: 0.0,
            ..MonitorConfig::default()
        })
    }

    fn assert_budget(m: &Monitor, expected: f64) {
        let b = m.budget_per_s();
        assert!(
            (b - expected).abs() < 1e-6,
            "budget {b}, expected {expected}"
        );
    }

    /// `n` epochs at `load`, answering `served` requests a second, with fast probes.
    fn epochs(m: &mut Monitor, n: usize, load: f64, served: f64) {
        for _ in 0..n {
            m.set_load(Some(load));
            m.set_served(served);
            m.sample(Some(MS));
        }
    }

    #[test]
    fn with_the_requests_served_a_step_fills_half_the_room_under_the_aim() {
        let mut m = load_monitor();
        // Demand alone holds the node at 0.36 answering 9,000 requests a second: 0.04 ms of
        // CPU a request, and the aim (0.72) leaves room for 9,000 more a second. A step takes
        // half of it, where B·aim/L would only have doubled a budget of one file a second.
        epochs(&mut m, 5, 0.36, 9000.0);
        assert_budget(&m, 4501.0);
        // The means since the last change count: 0.6 at 12,000 a second leaves 2,400.
        epochs(&mut m, 1, 0.5, 11_000.0);
        epochs(&mut m, 1, 0.7, 13_000.0);
        epochs(&mut m, 3, 0.6, 12_000.0);
        assert_budget(&m, 5701.0);
        // At the aim it holds.
        epochs(&mut m, 5, 0.75, 20_000.0);
        assert_budget(&m, 5701.0);
        // Over the target, a cut takes away the requests the load is over the aim by: at 0.8
        // answering 10,000 a second, 0.08 of 0.8 is 1,000 requests a second.
        epochs(&mut m, 1, 0.8 + 1e-9, 10_000.0);
        assert!(
            (m.budget_per_s() - 4701.0).abs() < 1e-3,
            "{}",
            m.budget_per_s()
        );
        // Near no load at all, a step adds at most the requests answered now.
        let mut m = load_monitor();
        epochs(&mut m, 5, 0.001, 100.0);
        assert_budget(&m, 101.0);
    }

    #[test]
    fn overloaded_holds_from_the_first_slow_probe_or_a_saturated_load_until_a_good_sample() {
        let mut m = load_monitor();
        assert!(!m.overloaded());
        epochs(&mut m, 3, 0.5, 1000.0);
        assert!(!m.overloaded());
        // A slow probe: overloaded at once, before the re-probe confirms it.
        m.set_load(Some(0.5));
        assert_eq!(m.sample(Some(20 * MS)).0, Next::ProbeNow);
        assert!(m.overloaded());
        // The re-probe finds an outlier: no longer.
        m.set_load(None);
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Outlier));
        assert!(!m.overloaded());
        // A failed probe counts as slow.
        m.set_load(Some(0.5));
        m.sample(None);
        assert!(m.overloaded());
        m.set_load(None);
        m.sample(None);
        assert!(m.overloaded());
        // Over the target (0.8) but under SHED_LOAD: the cut's business, not overloaded.
        epochs(&mut m, 1, 0.85, 1000.0);
        assert!(!m.overloaded());
        // At SHED_LOAD, with fast probes: overloaded.
        epochs(&mut m, 1, SHED_LOAD, 1000.0);
        assert!(m.overloaded());
        epochs(&mut m, 1, 0.5, 1000.0);
        assert!(!m.overloaded());
        // A target over SHED_LOAD moves the line up to it.
        let mut m = Monitor::new(MonitorConfig {
            load_target: 0.95,
            ..MonitorConfig::default()
        });
        epochs(&mut m, 1, 0.93, 1000.0);
        assert!(!m.overloaded());
        epochs(&mut m, 1, 0.96, 1000.0);
        assert!(m.overloaded());
    }

    #[test]
    fn a_cut_for_load_starts_from_what_clients_were_granted() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            load_target: 0.5,
            ..MonitorConfig::default()
        });
        m.set_usage(1000.0);
        for _ in 0..55 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 2048.0);
        // Clients take 300 files/s of it: the cut is from that, else it would not lower the
        // load at all.
        m.set_usage(300.0);
        m.set_load(Some(1.0));
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Cut));
        assert!((m.budget_per_s() - 150.0).abs() < 1e-9);
    }

    proptest! {
        /// The budget stays within its bounds whatever the samples, and a confirmed overload
        /// never raises it.
        #[test]
        fn the_budget_stays_in_bounds(
            samples in proptest::collection::vec(proptest::option::of(0u32..30), 0..300),
            min in 0.0f64..5.0,
            max in 5.0f64..500.0,
            slow_start: bool,
            loads in proptest::collection::vec(proptest::option::of(0.0f64..3.0), 300),
            served in proptest::collection::vec(proptest::option::of(0.0f64..50_000.0), 300),
        ) {
            let mut m = Monitor::new(MonitorConfig {
                threshold: 10 * MS,
                min_per_s: min,
                max_per_s: max,
                slow_start,
                load_target: 0.8,
                ..MonitorConfig::default()
            });
            for ((s, load), served) in samples.into_iter().zip(loads).zip(served) {
                m.set_load(load);
                if let Some(r) = served {
                    m.set_served(r);
                }
                let before = m.budget_per_s();
                let (_, change) = m.sample(s.map(|ms| ms * MS));
                let after = m.budget_per_s();
                prop_assert!(after >= min && after <= max, "{after} outside [{min}, {max}]");
                match change {
                    Change::Halved | Change::Decayed | Change::Cut => prop_assert!(after <= before),
                    Change::Increased => prop_assert!(after > before),
                    _ => prop_assert_eq!(after, before),
                }
            }
        }
    }

    #[test]
    fn a_cost_over_the_target_cuts_once_and_holds_growth_until_it_falls() {
        let mut m = Monitor::new(MonitorConfig {
            threshold: 10 * MS,
            slow_start: false,
            validate: 0.0,
            cost_target: 0.05,
            ..MonitorConfig::default()
        });
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 2.0);
        m.budget = 1000.0;
        // 8 % against a target of 5 %: cut to 5/8 of the budget, once.
        m.set_cost(0.08);
        assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::Braked));
        assert_eq!(m.budget_per_s(), 625.0);
        // Still over half the target: five good samples do not grow it.
        for _ in 0..10 {
            assert_eq!(m.sample(Some(MS)), (Next::NextEpoch, Change::None));
        }
        assert_eq!(m.budget_per_s(), 625.0);
        // 4 %: under the target, no cut, but still no growth (the dead band).
        m.set_cost(0.04);
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 625.0);
        // 1 %: growth again.
        m.set_cost(0.01);
        for _ in 0..5 {
            m.sample(Some(MS));
        }
        assert_eq!(m.budget_per_s(), 626.0);
        // A cost many times the target halves the budget at most.
        m.set_cost(0.5);
        assert_eq!(m.sample(Some(MS)).1, Change::Braked);
        assert_eq!(m.budget_per_s(), 313.0);
    }

    #[test]
    fn without_a_cost_target_the_cost_is_only_kept() {
        let mut m = paper();
        m.set_cost(0.5);
        m.set_cost(f64::NAN);
        for _ in 0..5 {
            assert_ne!(m.sample(Some(MS)).1, Change::Braked);
        }
        assert_eq!(m.budget_per_s(), 2.0);
        assert_eq!(m.cost, Some(0.5));
    }
}
