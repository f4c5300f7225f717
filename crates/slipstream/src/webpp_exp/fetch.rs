//! One logical request under one policy, driven by the [`Select`] trait as a caller should: the
//! policy's `order` (the first is the choice, the rest fail-over candidates), `started` and
//! `record` around every exchange (each exchange recorded exactly once: its answer at the
//! response head, or its failure, time-out or cancellation), `timeout` per endpoint (the
//! caller's own when the policy has none), `hedge_after` for a second request, and `probes`
//! sent off the request path after the request.
//!
//! `optimal` is the same loop with every endpoint started at once, as 001 §6.1's optimal system
//! "sends three requests in parallel and waits for the first response". That the first *whole*
//! response wins (not the first response head) and the others are cancelled is this harness's
//! choice; the paper does not say.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use slipstream_select::{Outcome, ProbeKind, Select};
use tokio::sync::mpsc;

use super::net::{exchange, Event};
use super::world::REPLICAS;

/// A policy's selector, shared with its probes.
pub type Selector = Arc<Mutex<Box<dyn Select>>>;

/// Locks a selector; a poisoned lock (a panic elsewhere) still holds a usable table.
fn lock(s: &Selector) -> std::sync::MutexGuard<'_, Box<dyn Select>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// How one logical request went.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// From the first exchange's start to the whole winning response; `None` if every
    /// candidate failed.
    pub response: Option<Duration>,
    /// The replica whose response won.
    pub served_by: Option<usize>,
    /// Exchanges started (1 for a request answered at the first try).
    pub exchanges: u32,
    /// Exchanges started because an earlier one failed or timed out.
    pub failovers: u32,
    /// Second requests started by `hedge_after`.
    pub hedges: u32,
    /// Exchanges that timed out.
    pub timeouts: u32,
}

/// Probes a lane's policy sent, by kind and by the day hour (EST) they were sent in.
#[derive(Debug, Default)]
pub struct ProbeCount {
    pub refresh: [AtomicU64; 24],
    pub recover: [AtomicU64; 24],
}

/// What one request needs to know.
#[derive(Debug, Clone)]
pub struct Target {
    /// The relay address of each replica, for this client's site.
    pub links: Vec<SocketAddr>,
    pub path: String,
    pub bytes: u64,
    /// The caller's own time-out on a response head, for policies without one.
    pub caller_timeout: Duration,
    /// The whole request is abandoned after this long.
    pub cap: Duration,
}

struct Active {
    id: usize,
    replica: usize,
    deadline: Instant,
    head: bool,
    task: tokio::task::JoinHandle<()>,
}

fn index(name: &str) -> usize {
    REPLICAS
        .iter()
        .position(|r| *r == name)
        .expect("the selectors hold only the experiment's replicas")
}

/// Fetches `target` as `selector` directs; `fan_out` starts every endpoint at once.
pub async fn fetch(selector: &Selector, target: &Target, fan_out: bool) -> Fetched {
    let t0 = Instant::now();
    let order: Vec<usize> = lock(selector).order(t0).iter().map(|n| index(n)).collect();
    let (tx, mut rx) = mpsc::channel::<Event>(4 * REPLICAS.len() + 4);
    let mut out = Fetched::default();
    let mut active: Vec<Active> = Vec::new();
    let mut next = 0;
    let start = |replica: usize, active: &mut Vec<Active>, out: &mut Fetched| {
        let now = Instant::now();
        let mut s = lock(selector);
        s.started(REPLICAS[replica], now);
        let timeout = s
            .timeout(REPLICAS[replica], now)
            .unwrap_or(target.caller_timeout);
        let id = out.exchanges as usize;
        out.exchanges += 1;
        active.push(Active {
            id,
            replica,
            deadline: now + timeout,
            head: false,
            task: exchange(
                id,
                target.links[replica],
                Method::GET,
                target.path.clone(),
                target.bytes,
                tx.clone(),
            ),
        });
    };
    let launch = if fan_out { order.len() } else { 1 };
    for &r in order.iter().take(launch) {
        start(r, &mut active, &mut out);
    }
    next += launch;
    let mut hedge_at = match (fan_out, order.first()) {
        (false, Some(&r)) => lock(selector).hedge_after(REPLICAS[r], t0).map(|d| t0 + d),
        _ => None,
    };
    let cap_at = t0 + target.cap;
    let far = t0 + Duration::from_secs(86_400);

    while !active.is_empty() {
        let deadline = active
            .iter()
            .filter(|a| !a.head)
            .map(|a| a.deadline)
            .min()
            .unwrap_or(far)
            .min(cap_at);
        tokio::select! {
            Some(event) = rx.recv() => match event {
                Event::Head { id, latency } => {
                    if let Some(a) = active.iter_mut().find(|a| a.id == id) {
                        a.head = true;
                        let now = Instant::now();
                        lock(selector).record(REPLICAS[a.replica], Outcome::Answered { latency }, now);
                    }
                }
                Event::Done { id } => {
                    let Some(k) = active.iter().position(|a| a.id == id) else { continue };
                    let winner = active.swap_remove(k);
                    out.response = Some(t0.elapsed());
                    out.served_by = Some(winner.replica);
                    break;
                }
                Event::Failed { id, outcome } => {
                    let Some(k) = active.iter().position(|a| a.id == id) else { continue };
                    let failed = active.swap_remove(k);
                    if !failed.head {
                        lock(selector).record(REPLICAS[failed.replica], outcome, Instant::now());
                    }
                    if active.is_empty() && next < order.len() {
                        start(order[next], &mut active, &mut out);
                        next += 1;
                        out.failovers += 1;
                        hedge_at = None;
                    }
                }
            },
            _ = tokio::time::sleep_until(deadline.into()) => {
                let now = Instant::now();
                if now >= cap_at {
                    break;
                }
                // The earliest time-out among the exchanges still waiting for a head.
                let Some(k) = active
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| !a.head && a.deadline <= now)
                    .min_by_key(|(_, a)| a.deadline)
                    .map(|(k, _)| k)
                else { continue };
                let late = active.swap_remove(k);
                late.task.abort();
                lock(selector).record(REPLICAS[late.replica], Outcome::TimedOut, now);
                out.timeouts += 1;
                if active.is_empty() && next < order.len() {
                    start(order[next], &mut active, &mut out);
                    next += 1;
                    out.failovers += 1;
                    hedge_at = None;
                }
            },
            _ = tokio::time::sleep_until(hedge_at.unwrap_or(far).into()), if hedge_at.is_some() => {
                hedge_at = None;
                let waiting = active.len() == 1 && !active[0].head;
                if waiting && next < order.len() {
                    start(order[next], &mut active, &mut out);
                    next += 1;
                    out.hedges += 1;
                }
            },
        }
    }
    // Whatever is still running lost (or the request was abandoned): cancel it, and end what
    // `started` began for each exchange the policy has not heard the end of.
    let now = Instant::now();
    for a in active {
        a.task.abort();
        if !a.head {
            let outcome = if out.response.is_some() {
                Outcome::Cancelled
            } else {
                Outcome::TimedOut
            };
            lock(selector).record(REPLICAS[a.replica], outcome, now);
        }
    }
    out
}

/// Sends the probes `selector` wants now, each a HEAD off the request path whose outcome goes
/// back to the selector; counts them in `count` under day hour `hour`.
pub fn send_probes(selector: &Selector, target: &Target, count: &Arc<ProbeCount>, hour: f64) {
    let bucket = (hour.max(0.0) as usize).min(23);
    let now = Instant::now();
    let probes = lock(selector).probes(now);
    for probe in probes {
        let replica = index(&probe.endpoint);
        match probe.kind {
            ProbeKind::Refresh => count.refresh[bucket].fetch_add(1, Ordering::Relaxed),
            ProbeKind::Recover => count.recover[bucket].fetch_add(1, Ordering::Relaxed),
        };
        let selector = selector.clone();
        let addr = target.links[replica];
        let path = target.path.clone();
        let fallback = target.caller_timeout;
        tokio::spawn(async move {
            let t0 = Instant::now();
            let timeout = {
                let mut s = lock(&selector);
                s.started(REPLICAS[replica], t0);
                s.timeout(REPLICAS[replica], t0).unwrap_or(fallback)
            };
            let (tx, mut rx) = mpsc::channel(4);
            let task = exchange(0, addr, Method::HEAD, path, 0, tx);
            let outcome = loop {
                match tokio::time::timeout_at((t0 + timeout).into(), rx.recv()).await {
                    Ok(Some(Event::Head { latency, .. })) => break Outcome::Answered { latency },
                    Ok(Some(Event::Failed { outcome, .. })) => break outcome,
                    Ok(Some(Event::Done { .. })) => continue,
                    Ok(None) => break Outcome::Broken,
                    Err(_) => break Outcome::TimedOut,
                }
            };
            task.abort();
            lock(&selector).record(REPLICAS[replica], outcome, Instant::now());
        });
    }
}
