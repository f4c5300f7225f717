//! The monitor task (000 §3.3): probes the server's representative object over each epoch and
//! feeds the epoch's sample (the mean of `probes_per_epoch` probes) to the AIMD budget; an
//! over-threshold sample is re-probed at once. A probe is given up where it alone would put
//! the mean over the threshold (`cutoff`).
//!
//! Without a configured threshold it first measures the server's response-time curve: rounds of
//! concurrent probes at concurrency 1, 2, 4, ... 64, the median of each, and takes the
//! threshold at the curve's knee (`slipstream_prefetch::monitor::threshold_from_curve`). This
//! happens as soon as the node listens (about a second), so the curve is the idle server's
//! when the node starts before its traffic arrives; a node that starts under load should be
//! given `threshold_ms`. Until the curve is measured, the budget stays at its start.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use slipstream_prefetch::monitor::{startup_threshold, Next};
use tokio::time::MissedTickBehavior;

use crate::{Nps, PROBE_HEADER};

/// Concurrency levels of the start-up curve.
const LEVELS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Rounds of probes at each level.
const ROUNDS: usize = 8;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// Probes `addr` (the node's own listener) for `nps` until the runtime stops.
pub async fn run(nps: Arc<Nps>, addr: SocketAddr) {
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(LEVELS[LEVELS.len() - 1])
        .build_http();
    let uri: http::Uri = match format!("http://{addr}{}", nps.settings().probe_path).parse() {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(error = %e, "the monitor's probe URL is invalid; no monitor runs");
            return;
        }
    };
    // The first request opens the pooled connection; timing it would count the handshake as
    // server load (seen: a first probe of 0.66 ms where the rest took 0.1 ms, which ended the
    // budget's slow start on the first sample).
    // When a failure that is not load was last logged.
    let mut warned: Option<Instant> = None;
    // A first probe answered with an error status means the probe path is wrong, which no
    // amount of waiting mends: said at once, not only in the status.
    if let Err(failure @ ProbeFailure::Status(_)) =
        probe(&client, &uri, nps.settings().probe_timeout).await
    {
        tracing::error!(
            probe = %uri,
            %failure,
            "prefetch monitor: the probe fails, so the budget stays at zero until it answers \
             2xx; set prefetch.probe_path to a file this node serves"
        );
        nps.probe_failed(&failure);
        warned = Some(Instant::now());
    }
    if nps.settings().threshold.is_none() {
        calibrate(&nps, &client, &uri).await;
    }
    let epoch = nps.settings().epoch;
    let k = nps.settings().probes_per_epoch.max(1);
    let spacing = epoch / k;
    let mut tick = tokio::time::interval(epoch);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The node's CPU load over each epoch, beside the probes (`cpu_target`).
    let mut meter = crate::cpu::CpuMeter::new(nps.settings().cpu_count_idle);
    if meter.is_none() && nps.settings().monitor.load_target > 0.0 {
        tracing::warn!("prefetch monitor: the process's CPU time cannot be read here; cpu_target is ignored, the probes alone set the budget");
    }
    loop {
        let start = tick.tick().await;
        // The threshold can change (the start-up curve sets it), so the cut-off is read each
        // epoch.
        let timeout = cutoff(nps.threshold(), k, nps.settings().probe_timeout);
        // The epoch's sample: the mean of k probes spread over it. One probe sees the server
        // at one instant: a scheduling pause it happens to meet looks like load, and a burst
        // between two probes is never seen. The mean weighs each by how much of the epoch it
        // lasted, as demand requests feel it. Any failed probe fails the sample.
        let mut times = Vec::with_capacity(k as usize);
        let mut failed = false;
        for i in 0..k {
            tokio::time::sleep_until(start + spacing * i).await;
            match probe(&client, &uri, timeout).await {
                Ok(rt) => times.push(rt),
                Err(failure) => {
                    report(&nps, &uri, &failure, &mut warned);
                    failed = true;
                    break;
                }
            }
        }
        let sample = if failed { None } else { mean(&times) };
        let load = meter.as_mut().and_then(|m| m.sample());
        let demand_wait = meter.as_ref().and_then(|m| m.demand_wait());
        // At most one re-probe per epoch (000 §3.3: "another probe immediately"), as strong a
        // sample as the one it checks: k probes at once, their mean. (One probe after a mean
        // of k over the threshold usually lands after the burst and calls it an outlier.) A
        // confirmed over-threshold sample ends the epoch.
        if nps.sample(sample, load, demand_wait) == Next::ProbeNow {
            let mut again = Vec::with_capacity(k as usize);
            for _ in 0..k {
                match probe(&client, &uri, timeout).await {
                    Ok(rt) => again.push(rt),
                    Err(failure) => {
                        report(&nps, &uri, &failure, &mut warned);
                        again.clear();
                        break;
                    }
                }
            }
            // The epoch's load was reported with its sample; reported again it would count
            // twice in the mean a growth step uses.
            let next = nps.sample(mean(&again), None, None);
            debug_assert_eq!(next, Next::NextEpoch);
        }
    }
}

/// How long a probe of the epoch's sample may take before it counts as failed: `k` times the
/// threshold, or the configured probe timeout if that is shorter.
///
/// The sample is the mean of `k` probes, so one probe slower than `k` × threshold already puts
/// the mean over the threshold whatever the others take: waiting for its answer changes
/// nothing but when the monitor learns it. Under a burst the probes wait behind it (34–81 ms
/// each in docs/experiments/000-nps.md's Fig. 6 runs), and an epoch waiting for its five
/// stretched to 400 ms while a budget of thousands of files a second stayed in force.
/// Stopped at the cut-off, the over-threshold sample comes within `k` × threshold.
fn cutoff(threshold: Duration, k: u32, probe_timeout: Duration) -> Duration {
    threshold.saturating_mul(k.max(1)).min(probe_timeout)
}

/// A configuration failure is logged at most this often (the status counts every one).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Why a probe failed. Every failure counts as an overloaded server (000 §3.3: the monitor
/// cannot tell a server too busy to answer from one that does not answer); the kind says
/// whether that is likely, for the status and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeFailure {
    /// The node answered with a status other than 2xx: the probe path names nothing it
    /// serves, a configuration error rather than load.
    Status(http::StatusCode),
    /// The connection or the exchange failed.
    Exchange(String),
    /// No whole answer within the cut-off: load, or a stalled node.
    TimedOut(Duration),
}

impl std::fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeFailure::Status(s) => write!(f, "answered {s}"),
            ProbeFailure::Exchange(e) => write!(f, "failed: {e}"),
            ProbeFailure::TimedOut(t) => write!(f, "no answer within {t:?}"),
        }
    }
}

/// Records a failed probe on the status and logs a failure that is not load (at most once a
/// [`WARN_EVERY`]): a probe path that answers 404 leaves the budget at zero for good, and the
/// operator should hear why.
fn report(nps: &Nps, uri: &http::Uri, failure: &ProbeFailure, warned: &mut Option<Instant>) {
    nps.probe_failed(failure);
    if matches!(failure, ProbeFailure::TimedOut(_)) {
        return;
    }
    if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
        *warned = Some(Instant::now());
        tracing::warn!(
            probe = %uri,
            %failure,
            "prefetch monitor: a probe failed, which counts as an overloaded node (the budget halves)"
        );
    }
}

/// One probe: the time to the whole response, or why it failed (an error, a non-2xx status or
/// the timeout).
async fn probe(
    client: &HttpClient,
    uri: &http::Uri,
    timeout: Duration,
) -> Result<Duration, ProbeFailure> {
    let req = http::Request::get(uri.clone())
        .header(PROBE_HEADER, "1")
        .body(Empty::new())
        .map_err(|e| ProbeFailure::Exchange(e.to_string()))?;
    let start = Instant::now();
    let exchange = async {
        let res = client
            .request(req)
            .await
            .map_err(|e| ProbeFailure::Exchange(slipstream_http::error_chain(&e)))?;
        if !res.status().is_success() {
            return Err(ProbeFailure::Status(res.status()));
        }
        res.into_body()
            .collect()
            .await
            .map_err(|e| ProbeFailure::Exchange(slipstream_http::error_chain(&e)))?;
        Ok(start.elapsed())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(ProbeFailure::TimedOut(timeout)))
}

fn mean(v: &[Duration]) -> Option<Duration> {
    let n = u32::try_from(v.len()).ok().filter(|n| *n > 0)?;
    Some(v.iter().sum::<Duration>() / n)
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

/// Measures the start-up curve and sets the threshold at its knee.
async fn calibrate(nps: &Nps, client: &HttpClient, uri: &http::Uri) {
    let timeout = nps.settings().probe_timeout;
    let traffic = || {
        nps.demand
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
            + nps
                .prefetch
                .requests
                .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = traffic();
    let mut curve = Vec::new();
    for level in LEVELS {
        let mut times = Vec::with_capacity(level * ROUNDS);
        for _ in 0..ROUNDS {
            let round = (0..level).map(|_| probe(client, uri, timeout));
            for rt in futures_util::future::join_all(round).await {
                // A failed probe at start-up counts as the timeout.
                times.push(rt.unwrap_or(timeout));
            }
        }
        if let Some(m) = median(times) {
            curve.push((level as f64, m));
        }
    }
    let loaded = traffic() != before;
    let (threshold, source) = startup_threshold(&curve, nps.settings().min_threshold, loaded);
    tracing::info!(
        ?threshold,
        source = source.name(),
        "prefetch monitor: threshold from the start-up curve"
    );
    nps.calibrated(
        threshold,
        source.name(),
        curve
            .iter()
            .map(|(x, d)| (*x, d.as_micros() as u64))
            .collect(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_cut_off_where_it_alone_would_put_the_mean_over_the_threshold() {
        let ms = Duration::from_millis;
        assert_eq!(cutoff(ms(3), 5, ms(1000)), ms(15));
        // The configured timeout still bounds it.
        assert_eq!(cutoff(ms(300), 5, ms(1000)), ms(1000));
        // One probe an epoch: the threshold itself.
        assert_eq!(cutoff(ms(3), 1, ms(1000)), ms(3));
        assert_eq!(cutoff(ms(3), 0, ms(1000)), ms(3));
        // A probe that took the cut-off alone puts a mean of k over the threshold.
        let k = 5;
        let slowest = cutoff(ms(3), k, ms(1000));
        assert!(slowest / k >= ms(3));
    }
}
