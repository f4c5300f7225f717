//! Web++'s extended Refresh algorithm (paper 001 §4.1, Fig. 4) as a policy without I/O.
//!
//! Each endpoint has an entry in the latency table: exponentially weighted estimates of the
//! mean and variance of its latency (001 (2), (3)), the number of samples, when it was last
//! updated, and whether it is counted as failed. A request goes to the live endpoint with the
//! least S-percentile of latency (001 (1)); the others follow in the same order as fail-over
//! candidates, failed endpoints last. A request that takes longer than the endpoint's
//! T-percentile times out and marks it failed. The asynchronous work comes out as data from
//! [`Select::probes`]: a HEAD to each failed endpoint every F, F doubling after each probe and
//! reset by an answer, and a HEAD to the live entry updated longest ago once it is older than
//! the TTL.
//!
//! **Which sample r weights.** 001 (2) reads `avg_new = (1 - r) avg_old + r sample`: r is the
//! weight of the *newest* sample. §4.2 says the same in words ("a factor r that determines the
//! weight given to the most recent sample"; the smaller the weight of older samples, the better
//! the prediction), and §6 picks r = 0.95 because values close to 1 predict best. So with the
//! defaults the estimate follows the last sample closely; we keep the paper's reading.
//!
//! **n in (1).** (1) divides the spread by `sqrt(n)`; §4.1 notes that a growing n would make
//! the variance matter less and less, and that only the m most recent samples carry a share p of
//! the weight (001 (5): `m >= ln(1 - p) / ln(1 - r) - 1`). We use `n = min(samples, m)` with m
//! the least integer satisfying (5) (at least 1) for the configured p ([`Config::weight_share`]).
//! With r = 0.95 and p = 0.99, m = 1.
//!
//! **Why the timeout has floors.** With r = 0.95, (3) gives at most `r (1 - r)^2`, about
//! 0.24 %, of a squared deviation to the variance (the deviation is taken from `avg_new`, which
//! has already moved 95 % of the way to the sample), so the T-percentile sits barely above the
//! last sample. Taken alone it would time out on ordinary jitter, and a timeout takes an
//! endpoint out for F (28.8 hours by default). The timeout is therefore the largest of the
//! T-percentile, [`Config::min_timeout_factor`] times the mean, and [`Config::min_timeout`];
//! at most [`Config::max_timeout`]; [`Config::default_timeout`] before the first sample.
//!
//! **Endpoints without samples are tried first.** An endpoint new to the set has no percentile.
//! It goes ahead of the measured live ones (in set order), so the next request measures it; a
//! caller that never runs probes (the proxy today) still learns every endpoint, at the cost of
//! at most one request per new endpoint to a replica that may be slow, bounded by the default
//! timeout. Fig. 4 picks at random when every entry has expired; we do not draw: an unmeasured
//! endpoint is tried in set order, and stale measured ones keep their order until their refresh
//! probe answers, so the Rust and JavaScript selectors make identical choices (the shared test
//! vectors, `web/test-vectors/select/`).
//!
//! **What counts as a failure.** [`Outcome::TimedOut`], [`Outcome::ConnectFailed`] and
//! [`Outcome::Broken`] mark the endpoint failed; [`Outcome::Cancelled`] changes nothing.
//! Failed endpoints are still listed, last, so a request is never refused while every endpoint
//! is down.

use std::time::{Duration, Instant};

use crate::{normal, ConfigError, Outcome, Probe, ProbeKind, Select};

/// Configuration of [`Refresh`]; the defaults are 001 §6 (Fig. 10) where the paper gives one.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// r in 001 (2) and (3): the weight of the newest sample, in (0, 1]. §6: 0.95.
    pub r: f64,
    /// S: the percentile (in (0, 100)) whose least value chooses the endpoint. §6: 55, so the
    /// variance only breaks ties between similar means.
    pub choice_percentile: f64,
    /// T: the percentile (in (0, 100)) of latency at which a request times out. §6: 99.9.
    pub timeout_percentile: f64,
    /// p in 001 (5), in (0, 1): the share of the weight whose samples n counts in (1). 0.99.
    pub weight_share: f64,
    /// TTL: an entry last updated longer ago is refreshed by a HEAD. §6: 41 minutes.
    pub ttl: Duration,
    /// F: the first interval between probes of a failed endpoint, doubled after each probe and
    /// reset by an answer. §6: 28.8 hours (a mean time to repair of Internet servers).
    pub probe_interval: Duration,
    /// The bound on F's doubling. 16 × 28.8 hours (19.2 days).
    pub max_probe_interval: Duration,
    /// The timeout before an endpoint's first sample. 10 seconds.
    pub default_timeout: Duration,
    /// The least timeout. 1 second.
    pub min_timeout: Duration,
    /// The timeout is at least this multiple of the mean latency. 4.
    pub min_timeout_factor: f64,
    /// The greatest timeout. 60 seconds.
    pub max_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        let f = Duration::from_secs(28 * 3600 + 48 * 60);
        Config {
            r: 0.95,
            choice_percentile: 55.0,
            timeout_percentile: 99.9,
            weight_share: 0.99,
            ttl: Duration::from_secs(41 * 60),
            probe_interval: f,
            max_probe_interval: f * 16,
            default_timeout: Duration::from_secs(10),
            min_timeout: Duration::from_secs(1),
            min_timeout_factor: 4.0,
            max_timeout: Duration::from_secs(60),
        }
    }
}

impl Config {
    /// The names [`Config::set`] takes: those of the shared test vectors and of the browser
    /// agent (`web/agent/select.mjs`), durations in milliseconds.
    pub const FIELDS: &'static [&'static str] = &[
        "r",
        "choice_percentile",
        "timeout_percentile",
        "weight_share",
        "ttl_ms",
        "probe_interval_ms",
        "max_probe_interval_ms",
        "default_timeout_ms",
        "min_timeout_ms",
        "min_timeout_factor",
        "max_timeout_ms",
    ];

    /// Sets one field by its vector and agent name ([`Config::FIELDS`]); a duration in
    /// milliseconds is kept in whole nanoseconds, as the agent rounds it. Returns false for an
    /// unknown name. [`Config::check`] says whether the result works.
    pub fn set(&mut self, field: &str, value: f64) -> bool {
        let ms = || Duration::from_nanos((value * 1e6).round() as u64);
        match field {
            "r" => self.r = value,
            "choice_percentile" => self.choice_percentile = value,
            "timeout_percentile" => self.timeout_percentile = value,
            "weight_share" => self.weight_share = value,
            "ttl_ms" => self.ttl = ms(),
            "probe_interval_ms" => self.probe_interval = ms(),
            "max_probe_interval_ms" => self.max_probe_interval = ms(),
            "default_timeout_ms" => self.default_timeout = ms(),
            "min_timeout_ms" => self.min_timeout = ms(),
            "min_timeout_factor" => self.min_timeout_factor = value,
            "max_timeout_ms" => self.max_timeout = ms(),
            _ => return false,
        }
        true
    }

    /// Whether the configuration can work ([`Refresh::new`] refuses one that cannot).
    pub fn check(&self) -> Result<(), ConfigError> {
        let unit = |v: f64| v > 0.0 && v < 1.0;
        if !(self.r > 0.0 && self.r <= 1.0) {
            return Err(ConfigError::new("r", "must be in (0, 1]"));
        }
        if !unit(self.choice_percentile / 100.0) {
            return Err(ConfigError::new("choice_percentile", "must be in (0, 100)"));
        }
        if !unit(self.timeout_percentile / 100.0) {
            return Err(ConfigError::new(
                "timeout_percentile",
                "must be in (0, 100)",
            ));
        }
        if !unit(self.weight_share) {
            return Err(ConfigError::new("weight_share", "must be in (0, 1)"));
        }
        if self.probe_interval.is_zero() || self.max_probe_interval < self.probe_interval {
            return Err(ConfigError::new(
                "probe_interval",
                "must be positive and at most max_probe_interval",
            ));
        }
        if !(self.min_timeout_factor >= 0.0 && self.min_timeout_factor.is_finite()) {
            return Err(ConfigError::new(
                "min_timeout_factor",
                "must be finite and >= 0",
            ));
        }
        if self.min_timeout > self.max_timeout {
            return Err(ConfigError::new(
                "min_timeout",
                "must be at most max_timeout",
            ));
        }
        Ok(())
    }
}

/// One endpoint's latency estimates, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The mean, 001 (2).
    pub avg_ms: f64,
    /// The variance, 001 (3), in ms².
    pub var_ms2: f64,
    /// The samples taken so far.
    pub samples: u64,
}

impl Estimate {
    /// The first sample sets the mean (`sample_0` of 001 (4)) and a variance of 0; later ones
    /// follow 001 (2) and (3), the variance about the *new* mean as (3) writes it.
    fn add(estimate: Option<Estimate>, sample_ms: f64, r: f64) -> Estimate {
        match estimate {
            None => Estimate {
                avg_ms: sample_ms,
                var_ms2: 0.0,
                samples: 1,
            },
            Some(e) => {
                let avg_ms = (1.0 - r) * e.avg_ms + r * sample_ms;
                let d = sample_ms - avg_ms;
                Estimate {
                    avg_ms,
                    var_ms2: (1.0 - r) * e.var_ms2 + r * d * d,
                    samples: e.samples.saturating_add(1),
                }
            }
        }
    }

    /// 001 (1): `avg + c sqrt(var) / sqrt(n)`, n at most `n_cap`.
    fn percentile(&self, c: f64, n_cap: u64) -> f64 {
        let n = self.samples.min(n_cap).max(1) as f64;
        self.avg_ms + c * self.var_ms2.sqrt() / n.sqrt()
    }
}

/// Web++'s extended Refresh selector; see the module documentation.
#[derive(Debug, Clone)]
pub struct Refresh {
    config: Config,
    /// `c_S` and `c_T` of 001 (1).
    c_choice: f64,
    c_timeout: f64,
    /// m of 001 (5).
    n_cap: u64,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    estimate: Option<Estimate>,
    /// The last sample, or when the endpoint joined the set.
    updated: Instant,
    failed: Option<Failed>,
    /// When the last refresh probe was handed out and not yet answered.
    refresh_sent: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Failed {
    /// F: the wait before the next probe after this one.
    interval: Duration,
    next_probe: Instant,
}

impl Refresh {
    /// A selector over `endpoints` (their order breaks ties), all unmeasured and live.
    pub fn new(endpoints: &[String], config: Config, now: Instant) -> Result<Refresh, ConfigError> {
        config.check()?;
        // 001 (5): the least m with m >= ln(1 - p) / ln(1 - r) - 1 (r = 1: every weight is on
        // the newest sample, so m = 1).
        let bound = (1.0 - config.weight_share).ln() / (1.0 - config.r).ln() - 1.0;
        let n_cap = if bound.is_finite() && bound > 1.0 {
            bound.ceil() as u64
        } else {
            1
        };
        let mut refresh = Refresh {
            c_choice: normal::quantile(config.choice_percentile / 100.0),
            c_timeout: normal::quantile(config.timeout_percentile / 100.0),
            n_cap,
            config,
            entries: Vec::new(),
        };
        refresh.update(endpoints, now);
        Ok(refresh)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `endpoint`'s estimates, `None` before its first sample or outside the set.
    pub fn estimate(&self, endpoint: &str) -> Option<Estimate> {
        self.entry(endpoint)?.estimate
    }

    /// `endpoint`'s S-percentile of latency in ms (001 (1)), the key it is chosen by.
    pub fn score_ms(&self, endpoint: &str) -> Option<f64> {
        self.estimate(endpoint)
            .map(|e| e.percentile(self.c_choice, self.n_cap))
    }

    /// The n cap of (1), m of 001 (5).
    pub fn samples_counted(&self) -> u64 {
        self.n_cap
    }

    fn entry(&self, endpoint: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == endpoint)
    }

    fn timeout_ms(&self, estimate: Option<Estimate>) -> f64 {
        let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
        match estimate {
            None => ms(self.config.default_timeout),
            Some(e) => e
                .percentile(self.c_timeout, self.n_cap)
                .max(self.config.min_timeout_factor * e.avg_ms)
                .max(ms(self.config.min_timeout))
                .min(ms(self.config.max_timeout)),
        }
    }
}

/// Sorting key of an entry: unmeasured live, measured live by score, measured failed by score,
/// unmeasured failed; the set order breaks ties (the sort is stable).
fn rank(entry: &Entry, c: f64, n_cap: u64) -> (u8, f64) {
    match (entry.failed.is_some(), entry.estimate) {
        (false, None) => (0, 0.0),
        (false, Some(e)) => (1, e.percentile(c, n_cap)),
        (true, Some(e)) => (2, e.percentile(c, n_cap)),
        (true, None) => (3, 0.0),
    }
}

impl Select for Refresh {
    fn update(&mut self, endpoints: &[String], now: Instant) {
        let mut old = std::mem::take(&mut self.entries);
        self.entries = endpoints
            .iter()
            .map(|name| match old.iter().position(|e| &e.name == name) {
                Some(i) => old.swap_remove(i),
                None => Entry {
                    name: name.clone(),
                    estimate: None,
                    updated: now,
                    failed: None,
                    refresh_sent: None,
                },
            })
            .collect();
    }

    fn order(&mut self, _now: Instant) -> Vec<String> {
        let mut ranked: Vec<((u8, f64), &Entry)> = self
            .entries
            .iter()
            .map(|e| (rank(e, self.c_choice, self.n_cap), e))
            .collect();
        ranked.sort_by(|(a, _), (b, _)| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        ranked.into_iter().map(|(_, e)| e.name.clone()).collect()
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        let r = self.config.r;
        let first_interval = self.config.probe_interval;
        let Some(entry) = self.entries.iter_mut().find(|e| e.name == endpoint) else {
            return;
        };
        match outcome {
            Outcome::Answered { latency } => {
                let sample_ms = latency.as_nanos() as f64 / 1e6;
                entry.estimate = Some(Estimate::add(entry.estimate, sample_ms, r));
                entry.updated = now;
                entry.failed = None;
                entry.refresh_sent = None;
            }
            Outcome::TimedOut | Outcome::ConnectFailed | Outcome::Broken => {
                entry.refresh_sent = None;
                // A probe of an endpoint already failed keeps its schedule: F doubled when the
                // probe was handed out.
                if entry.failed.is_none() {
                    entry.failed = Some(Failed {
                        interval: first_interval,
                        next_probe: now + first_interval,
                    });
                }
            }
            Outcome::Cancelled => {}
        }
    }

    fn health(&self, _now: Instant) -> Vec<(String, bool)> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), e.failed.is_none()))
            .collect()
    }

    fn timeout(&self, endpoint: &str, _now: Instant) -> Option<Duration> {
        let ms = self.timeout_ms(self.entry(endpoint)?.estimate);
        Some(Duration::from_nanos((ms * 1e6).round() as u64))
    }

    fn probes(&mut self, now: Instant) -> Vec<Probe> {
        let max = self.config.max_probe_interval;
        let ttl = self.config.ttl;
        let mut probes = Vec::new();
        // 001 §4.1: a failed endpoint is polled every F, F doubling each time a probe is sent.
        for e in &mut self.entries {
            if let Some(f) = &mut e.failed {
                if f.next_probe <= now {
                    f.interval = (f.interval * 2).min(max);
                    f.next_probe = now + f.interval;
                    probes.push(Probe {
                        endpoint: e.name.clone(),
                        kind: ProbeKind::Recover,
                    });
                }
            }
        }
        // Fig. 4: the live entry updated longest ago, once older than TTL, gets one refresh;
        // a refresh not answered within another TTL is handed out again.
        let stale = self
            .entries
            .iter_mut()
            .filter(|e| e.failed.is_none() && e.estimate.is_some())
            .filter(|e| now.saturating_duration_since(e.updated) >= ttl)
            .filter(|e| {
                e.refresh_sent
                    .is_none_or(|t| now.saturating_duration_since(t) >= ttl)
            })
            .min_by_key(|e| e.updated);
        if let Some(e) = stale {
            e.refresh_sent = Some(now);
            probes.push(Probe {
                endpoint: e.name.clone(),
                kind: ProbeKind::Refresh,
            });
        }
        probes
    }
}

#[cfg(test)]
mod tests;
