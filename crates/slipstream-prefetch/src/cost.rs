//! What prefetching costs demand, measured by switching it off now and then: a switchback
//! experiment run by the node on itself.
//!
//! The paper's monitor (000 §3.3) and our CPU target see the server; what prefetching costs
//! demand can lie elsewhere too: in the kernel's network work, on the clients' side, or on a
//! link the two share. On our test machine, busy work at idle priority on the load
//! generator's core alone slowed demand by a fifth to a third, and the node's demand threads
//! waited no longer for a CPU while the node prefetched (docs/experiments/000-nps.md, pilots
//! 56 and 69). The clients see every part of it: each document they load takes longer. So
//! the node asks them.
//!
//! Time is cut into cycles of `every`. Each cycle starts with a **quiet** period of `quiet`
//! in which the node prefetches nothing (no list is granted, prefetches are refused, pages
//! tell their agents to ask after it). Each page the node serves carries the time it was
//! served; the agent sends that back with the page's response time, as the client saw it, on
//! its first hint request ([`CostMeter::report`]). When a cycle is over and its reports are
//! in, its cost is the median response time of the pages served while prefetching, over that
//! of the pages served in its quiet period, minus one. Reports near either edge of the quiet
//! period (`settle`) are left out: lists granted before it are still being fetched at its
//! start, and prefetching has not resumed at its end; the first cycle, the node's start, has
//! no cost. Both halves of a cycle are seconds
//! apart, so a machine that is slower in one minute than in another (this VM: 3–6 % between
//! runs) changes both alike.
//!
//! The estimate ([`CostMeter::estimate`]) is the mean over the last few cycles; the monitor
//! keeps it under a target ([`crate::monitor::MonitorConfig::cost_target`]). The price is the
//! spare capacity of the quiet periods: `quiet` / `every` of it.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A response time longer than this is no page's: the report is implausible.
pub const MAX_REPORTED: Duration = Duration::from_secs(60);

/// The schedule and how reports are read.
#[derive(Debug, Clone, PartialEq)]
pub struct CostConfig {
    /// A cycle's length.
    pub every: Duration,
    /// The quiet period at the start of each cycle.
    pub quiet: Duration,
    /// Left out at both edges of the quiet period.
    pub settle: Duration,
    /// Reports of a cycle are taken until this long after it ends (a client reports when it
    /// asks for hints: after its page has loaded, and after any wait the page told it).
    pub grace: Duration,
    /// Reports needed in each half of a cycle for it to have a cost.
    pub min_reports: u32,
    /// The estimate is the mean of the costs of this many cycles, the last ones that had one.
    pub cycles: usize,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            every: Duration::from_secs(4),
            quiet: Duration::from_millis(500),
            settle: Duration::from_millis(100),
            grace: Duration::from_millis(1500),
            min_reports: 10,
            cycles: 3,
        }
    }
}

impl CostConfig {
    /// Checks the schedule: a quiet period longer than two settles, within a cycle that leaves
    /// time to prefetch.
    pub fn check(&self) -> Result<(), String> {
        if self.quiet <= self.settle * 2 {
            return Err(format!(
                "the quiet period ({:?}) must be longer than twice the settle ({:?})",
                self.quiet, self.settle
            ));
        }
        if self.every < (self.quiet + self.settle) * 2 {
            return Err(format!(
                "a cycle ({:?}) must be at least twice the quiet period and its settle ({:?})",
                self.every,
                self.quiet + self.settle
            ));
        }
        if self.cycles == 0 || self.min_reports == 0 {
            return Err("cycles and min_reports must be at least 1".into());
        }
        Ok(())
    }

    /// Whether `t` falls in a quiet period or the settle after it, when what a node grants
    /// and uses is not what its budget would have it grant.
    pub fn resting(&self, t: Duration) -> bool {
        offset(t, self.every) < self.quiet + self.settle
    }

    /// When `t` (since the node started) falls in a quiet period, the time left of it.
    pub fn quiet_left(&self, t: Duration) -> Option<Duration> {
        let off = offset(t, self.every);
        (off < self.quiet).then(|| self.quiet - off)
    }
}

/// `t` modulo `every`.
fn offset(t: Duration, every: Duration) -> Duration {
    let every = every.as_nanos().max(1);
    Duration::from_nanos((t.as_nanos() % every) as u64)
}

/// What a report was taken as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// A page served in a quiet period.
    Quiet,
    /// A page served while prefetching.
    Busy,
    /// Served near an edge of the quiet period: left out.
    Settling,
    /// Its cycle was already closed: left out.
    Late,
    /// Served after now, or a response time over [`MAX_REPORTED`]: left out.
    Implausible,
}

/// The response times reported for one half of a cycle, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
struct Times(Vec<f64>);

/// Reports kept for one half of a cycle at most (a cycle of 4 s at 1,000 pages a second);
/// more are counted and left out.
const TIMES_KEPT: usize = 4096;

impl Times {
    fn push(&mut self, d: Duration) {
        if self.0.len() < TIMES_KEPT {
            self.0.push(d.as_secs_f64());
        }
    }

    fn n(&self) -> u32 {
        self.0.len() as u32
    }

    fn mean(&self) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.0.iter().sum::<f64>() / self.0.len() as f64)
    }

    /// The median: a page's response time has a long tail (on our test machine the slowest
    /// document of a pilot's cell took two to four times the mean at 250 µs a request, six to
    /// seventy times at 25 µs: pilots 73-76's table.txt), so a few
    /// pages caught in one stall of the machine move a half's mean far more than its median;
    /// what prefetching costs moves the whole distribution, the median with it. (The means
    /// are kept beside, for comparison: pilot 72 in docs/experiments/000-nps.md.)
    fn median(&mut self) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.sort_by(f64::total_cmp);
        let n = self.0.len();
        Some(if n % 2 == 1 {
            self.0[n / 2]
        } else {
            (self.0[n / 2 - 1] + self.0[n / 2]) / 2.0
        })
    }
}

/// The reports of one cycle.
#[derive(Debug, Clone, Default, PartialEq)]
struct Halves {
    quiet: Times,
    busy: Times,
}

/// A closed cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleResult {
    /// The cycle's number (0 from the node's start).
    pub cycle: u64,
    /// Reports of its quiet period, and their median response time in seconds.
    pub quiet: (u32, Option<f64>),
    /// Reports while prefetching, and their median.
    pub busy: (u32, Option<f64>),
    /// The busy median over the quiet one, minus one; `None` with too few reports in either.
    pub cost: Option<f64>,
    /// The same from the means, for comparison (the estimate does not use it).
    pub mean_cost: Option<f64>,
}

/// The cost estimator. Time is the caller's: a duration since the node started.
#[derive(Debug, Clone)]
pub struct CostMeter {
    config: CostConfig,
    /// Cycles with reports, not closed yet.
    open: BTreeMap<u64, Halves>,
    /// Every cycle below this one is closed.
    closed_below: u64,
    /// The last closed cycles, newest last.
    results: VecDeque<CycleResult>,
    /// Reports by what they were taken as: quiet, busy, settling, late, implausible.
    counts: [u64; 5],
}

/// Closed cycles kept for the status.
const RESULTS_KEPT: usize = 16;

impl CostMeter {
    /// A meter on `config`'s schedule, or why the schedule will not do.
    pub fn new(config: CostConfig) -> Result<CostMeter, String> {
        config.check()?;
        Ok(CostMeter {
            config,
            open: BTreeMap::new(),
            closed_below: 0,
            results: VecDeque::with_capacity(RESULTS_KEPT),
            counts: [0; 5],
        })
    }

    /// The schedule.
    pub fn config(&self) -> &CostConfig {
        &self.config
    }

    /// Takes a client's report, at `now`, that the page served at `served_at` took `rt`.
    pub fn report(&mut self, now: Duration, served_at: Duration, rt: Duration) -> Report {
        let kind = self.classify(now, served_at, rt);
        let cycle = cycle_of(served_at, self.config.every);
        match kind {
            Report::Quiet => self.open.entry(cycle).or_default().quiet.push(rt),
            Report::Busy => self.open.entry(cycle).or_default().busy.push(rt),
            _ => {}
        }
        self.counts[kind as usize] += 1;
        kind
    }

    fn classify(&self, now: Duration, served_at: Duration, rt: Duration) -> Report {
        if served_at > now || rt > MAX_REPORTED {
            return Report::Implausible;
        }
        if cycle_of(served_at, self.config.every) < self.closed_below {
            return Report::Late;
        }
        let c = &self.config;
        let off = offset(served_at, c.every);
        if off < c.settle {
            Report::Settling
        } else if off < c.quiet - c.settle {
            Report::Quiet
        } else if off < c.quiet + c.settle {
            Report::Settling
        } else {
            Report::Busy
        }
    }

    /// Closes the cycles whose reports are all in at `now` (their end plus the grace). When
    /// one of them had a cost, the new [`CostMeter::estimate`]; else `None` (nothing new to
    /// act on).
    pub fn close(&mut self, now: Duration) -> Option<f64> {
        let every = self.config.every;
        let mut costed = false;
        loop {
            let end =
                every.saturating_mul(u32::try_from(self.closed_below + 1).unwrap_or(u32::MAX));
            if end.saturating_add(self.config.grace) > now {
                return if costed { self.estimate() } else { None };
            }
            let cycle = self.closed_below;
            let mut h = self.open.remove(&cycle).unwrap_or_default();
            let enough = |t: &Times| t.n() >= self.config.min_reports;
            let counted = (enough(&h.quiet), enough(&h.busy));
            let (quiet, busy) = (h.quiet.median(), h.busy.median());
            // The first cycle is the node's start: its quiet period has the first connections
            // opened and caches cold (in 49 of the 51 braked runs of pilots 70-76 its quiet
            // half was the slower, by 3.8 times at the median: their node.txt in
            // docs/experiments/000/nps/pilots/).
            let costs = cycle > 0 && counted == (true, true);
            let ratio = |q: Option<f64>, b: Option<f64>| match (q, b) {
                (Some(q), Some(b)) if costs && q > 0.0 => Some(b / q - 1.0),
                _ => None,
            };
            let cost = ratio(quiet, busy);
            let mean_cost = ratio(h.quiet.mean(), h.busy.mean());
            if self.results.len() == RESULTS_KEPT {
                self.results.pop_front();
            }
            self.results.push_back(CycleResult {
                cycle,
                quiet: (h.quiet.n(), quiet),
                busy: (h.busy.n(), busy),
                cost,
                mean_cost,
            });
            self.closed_below += 1;
            costed |= cost.is_some();
        }
    }

    /// The mean cost of the last `cycles` closed cycles that had one; `None` before any.
    pub fn estimate(&self) -> Option<f64> {
        let costs: Vec<f64> = self
            .results
            .iter()
            .rev()
            .filter_map(|r| r.cost)
            .take(self.config.cycles)
            .collect();
        (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64)
    }

    /// The last closed cycles, oldest first.
    pub fn results(&self) -> impl Iterator<Item = &CycleResult> {
        self.results.iter()
    }

    /// Reports taken as each [`Report`] kind: quiet, busy, settling, late, implausible.
    pub fn counts(&self) -> [u64; 5] {
        self.counts
    }
}

fn cycle_of(t: Duration, every: Duration) -> u64 {
    (t.as_nanos() / every.as_nanos().max(1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn meter() -> CostMeter {
        CostMeter::new(CostConfig::default()).unwrap()
    }

    #[test]
    fn schedules_that_leave_nothing_to_measure_are_refused() {
        let c = CostConfig::default();
        assert!(CostConfig {
            quiet: 200 * MS,
            ..c.clone()
        }
        .check()
        .is_err());
        assert!(CostConfig {
            every: 1000 * MS,
            ..c.clone()
        }
        .check()
        .is_err());
        assert!(CostConfig {
            cycles: 0,
            ..c.clone()
        }
        .check()
        .is_err());
        assert!(c.check().is_ok());
    }

    #[test]
    fn the_quiet_period_opens_each_cycle() {
        let c = CostConfig::default();
        assert_eq!(c.quiet_left(Duration::ZERO), Some(500 * MS));
        assert_eq!(c.quiet_left(400 * MS), Some(100 * MS));
        assert_eq!(c.quiet_left(500 * MS), None);
        assert_eq!(c.quiet_left(3999 * MS), None);
        assert_eq!(c.quiet_left(4100 * MS), Some(400 * MS));
        assert!(c.resting(4599 * MS) && !c.resting(4600 * MS));
    }

    #[test]
    fn reports_are_sorted_by_when_their_page_was_served() {
        let mut m = meter();
        let now = 3900 * MS;
        assert_eq!(m.report(now, 99 * MS, 3 * MS), Report::Settling);
        assert_eq!(m.report(now, 100 * MS, 3 * MS), Report::Quiet);
        assert_eq!(m.report(now, 399 * MS, 3 * MS), Report::Quiet);
        assert_eq!(m.report(now, 400 * MS, 3 * MS), Report::Settling);
        assert_eq!(m.report(now, 599 * MS, 3 * MS), Report::Settling);
        assert_eq!(m.report(now, 600 * MS, 3 * MS), Report::Busy);
        assert_eq!(m.report(now, 3999 * MS, 3 * MS), Report::Implausible);
        assert_eq!(
            m.report(now, 1000 * MS, Duration::from_secs(61)),
            Report::Implausible
        );
        assert_eq!(m.counts(), [2, 1, 3, 0, 2]);
    }

    /// Ten quiet reports of 3 ms and ten busy ones of `busy_us` in cycle `k`, reported at the
    /// cycle's end.
    fn cycle(m: &mut CostMeter, k: u32, busy_us: u64) {
        let start = 4000 * MS * k;
        let now = start + 3900 * MS;
        for i in 0..10 {
            assert_eq!(m.report(now, start + (200 + i) * MS, 3 * MS), Report::Quiet);
            assert_eq!(
                m.report(now, start + (1000 + i) * MS, Duration::from_micros(busy_us)),
                Report::Busy
            );
        }
    }

    #[test]
    fn a_closed_cycle_costs_the_busy_median_over_the_quiet_one() {
        let mut m = meter();
        // The first cycle, the node's start, closes with no cost.
        cycle(&mut m, 0, 9000);
        cycle(&mut m, 1, 3300);
        assert_eq!(m.close(5500 * MS), None);
        assert_eq!(m.results().last().unwrap().cost, None);
        // Not closed until its end (8 s) and the grace (1.5 s).
        assert_eq!(m.close(9499 * MS), None);
        assert_eq!(m.estimate(), None);
        assert!((m.close(9500 * MS).unwrap() - 0.1).abs() < 1e-9);
        let r = *m.results().last().unwrap();
        assert_eq!(r.cycle, 1);
        assert_eq!((r.quiet.0, r.busy.0), (10, 10));
        assert!((r.cost.unwrap() - 0.1).abs() < 1e-9, "{r:?}");
        assert!((m.estimate().unwrap() - 0.1).abs() < 1e-9);
        // A report for the closed cycle comes too late.
        assert_eq!(m.report(9600 * MS, 5000 * MS, 3 * MS), Report::Late);
    }

    #[test]
    fn too_few_reports_give_no_cost_and_the_estimate_averages_the_last_cycles() {
        let mut m = meter();
        let s = Duration::from_secs;
        // Cycle 1: nine quiet reports, one short.
        for i in 0..9 {
            m.report(s(7), s(4) + (200 + i) * MS, 3 * MS);
        }
        for i in 0..10 {
            m.report(s(7), s(4) + (1000 + i) * MS, 6 * MS);
        }
        // Cycles 2..=5: costs 0.0, 0.2, 0.1, 0.3.
        for (k, busy_us) in [(2, 3000), (3, 3600), (4, 3300), (5, 3900)] {
            cycle(&mut m, k, busy_us);
        }
        // Cycles 0 to 5 close at 5.5 s, 9.5 s, ... 25.5 s; closing skips none, even at once.
        assert!(m.close(s(26)).is_some());
        let costs: Vec<Option<f64>> = m.results().map(|r| r.cost).collect();
        assert_eq!(costs.len(), 6);
        assert_eq!(costs[..2], [None, None]);
        // The last three with a cost: 0.2, 0.1, 0.3.
        assert!((m.estimate().unwrap() - 0.2).abs() < 1e-9);
        // A cycle with no reports at all closes too, with no cost: nothing new to act on, and
        // the estimate stays.
        assert_eq!(m.close(s(30)), None);
        assert_eq!(m.results().last().unwrap().cycle, 6);
        assert_eq!(m.results().last().unwrap().cost, None);
        assert!((m.estimate().unwrap() - 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_few_pages_caught_in_a_stall_do_not_make_a_cost() {
        let mut m = meter();
        let start = 4000 * MS;
        for i in 0..11 {
            // Two of the quiet period's pages waited 40 ms behind a stall of the machine: the
            // means would make that a cost of -57 %.
            let rt = if i < 2 { 40 * MS } else { 3 * MS };
            m.report(start + s3(), start + (200 + i) * MS, rt);
            m.report(start + s3(), start + (1000 + i) * MS, 3 * MS);
        }
        m.close(9500 * MS);
        let r = *m.results().last().unwrap();
        assert_eq!(r.cost, Some(0.0));
        assert!(r.mean_cost.unwrap() < -0.5, "{r:?}");
    }

    fn s3() -> Duration {
        Duration::from_secs(3)
    }
}
