//! Running a [`Plan`]: the closed-loop clients, the open-loop arrival pacer, the
//! request budget that bounds both, and the progress ticker.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use http::Uri;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::conn::{self, Conn, Origin};
use crate::recorder::{ErrorKind, Recorder};
use crate::targets::TargetSet;
use crate::{Mode, Plan, Progress, Report};

/// How often the progress callback runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Pause of a closed-loop client after a failed connect, so a dead server is
/// not hammered in a tight loop.
const CONNECT_BACKOFF: Duration = Duration::from_millis(20);

/// Runs `plan` to completion and reports the results. `on_progress` is called
/// about every 500 ms and once more at the end.
///
/// New requests stop at whichever of [`crate::Limits`] is reached first (or at
/// the end of a [`crate::Targets::Sequence`]); requests in flight then finish,
/// each bounded by [`Plan::timeout`]. Errors are returned only for an invalid
/// plan; request failures are counted in the report.
pub async fn run(
    plan: Plan,
    on_progress: impl FnMut(&Progress) + Send + 'static,
) -> anyhow::Result<Report> {
    let start = Instant::now();
    let shared = Arc::new(Shared::new(&plan, start)?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let ticker = tokio::spawn(progress_ticker(
        Arc::clone(&shared),
        start,
        stop_rx,
        on_progress,
    ));

    let outcome = match plan.mode {
        Mode::Closed {
            clients,
            think_time,
        } => closed_loop(&shared, clients, think_time, plan.seed).await,
        Mode::Open {
            rate_per_s,
            max_in_flight,
        } => open_loop(&shared, rate_per_s, max_in_flight, plan.seed).await,
    };
    let elapsed = start.elapsed();
    // The ticker may already be gone if the callback panicked; that surfaces below.
    let _ = stop_tx.send(elapsed);
    outcome?;
    ticker.await.context("progress callback panicked")?;
    Ok(shared.recorder.report(elapsed))
}

/// State shared by every task of a run.
#[derive(Debug)]
struct Shared {
    origin: Origin,
    targets: TargetSet,
    timeout: Duration,
    recorder: Recorder,
    /// Requests issued so far (tickets handed out, possibly beyond `max_tickets`).
    issued: AtomicU64,
    max_tickets: u64,
    /// No request is issued at or after this instant; `None` if too far to represent.
    deadline: Option<Instant>,
}

impl Shared {
    fn new(plan: &Plan, start: Instant) -> anyhow::Result<Self> {
        let origin = Origin::via(&plan.base, plan.proxy.as_ref(), plan.http2)?;
        let absolute = plan.http2 || plan.proxy.is_some();
        let targets = TargetSet::new(&plan.targets, &origin.authority, absolute)?;
        if plan.timeout.is_zero() {
            bail!("request timeout must be positive");
        }
        match plan.mode {
            Mode::Closed { clients: 0, .. } => bail!("closed loop needs at least one client"),
            Mode::Open { rate_per_s, .. } if !(rate_per_s.is_finite() && rate_per_s > 0.0) => {
                bail!("open-loop rate must be a positive number, got {rate_per_s}")
            }
            Mode::Open {
                max_in_flight: 0, ..
            } => bail!("open loop needs max_in_flight of at least 1"),
            _ => {}
        }
        Ok(Shared {
            max_tickets: plan.limits.max_requests.min(targets.capacity()),
            origin,
            targets,
            timeout: plan.timeout,
            recorder: Recorder::new(),
            issued: AtomicU64::new(0),
            deadline: start.checked_add(plan.limits.duration),
        })
    }

    /// Claims the next request number if the run is still open at `at`.
    fn claim(&self, at: Instant) -> Option<u64> {
        if self.deadline.is_some_and(|d| at >= d) {
            return None;
        }
        let ticket = self.issued.fetch_add(1, Ordering::Relaxed);
        (ticket < self.max_tickets).then_some(ticket)
    }

    /// One request with the plan's timeout around connect, send and body read.
    /// `slot` holds the connection to reuse and receives it back if it survived.
    async fn request(
        &self,
        slot: &mut Option<Conn>,
        uri: &Uri,
    ) -> Result<conn::Exchange, ErrorKind> {
        match tokio::time::timeout(self.timeout, conn::exchange(&self.origin, slot.take(), uri))
            .await
        {
            Ok((result, conn)) => {
                *slot = conn;
                result
            }
            // The abandoned connection was dropped with the future.
            Err(_) => Err(ErrorKind::Timeout),
        }
    }

    fn record(&self, result: Result<conn::Exchange, ErrorKind>, latency: Duration) {
        match result {
            Ok(x) if x.status.is_success() || x.status.is_redirection() => {
                self.recorder.success(latency, x.body_bytes)
            }
            Ok(x) => self
                .recorder
                .error(ErrorKind::Status(x.status.as_u16()), x.body_bytes),
            Err(kind) => self.recorder.error(kind, 0),
        }
    }

    /// Sleeps for `pause`, but not past the deadline.
    async fn pause(&self, pause: Duration) {
        let mut until = Instant::now() + pause;
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        tokio::time::sleep_until(until).await;
    }
}

async fn closed_loop(
    shared: &Arc<Shared>,
    clients: usize,
    think_time: Duration,
    seed: u64,
) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    for id in 0..clients {
        let shared = Arc::clone(shared);
        let rng = StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        tasks.spawn(closed_client(shared, rng, think_time));
    }
    join_all(tasks).await
}

/// One closed-loop client: a single keep-alive connection, replaced after any
/// connection error or timeout (the next request connects afresh).
async fn closed_client(shared: Arc<Shared>, mut rng: StdRng, think_time: Duration) {
    let mut conn = None;
    while let Some(ticket) = shared.claim(Instant::now()) {
        let uri = shared.targets.pick(ticket, &mut rng);
        let sent = Instant::now();
        let result = shared.request(&mut conn, uri).await;
        let latency = sent.elapsed();
        let connect_failed = matches!(result, Err(ErrorKind::Connect));
        shared.record(result, latency);
        if connect_failed {
            shared.pause(CONNECT_BACKOFF.max(think_time)).await;
        } else if !think_time.is_zero() {
            shared.pause(think_time).await;
        }
    }
}

async fn open_loop(
    shared: &Arc<Shared>,
    rate_per_s: f64,
    max_in_flight: usize,
    seed: u64,
) -> anyhow::Result<()> {
    let period = Duration::from_secs_f64(1.0 / rate_per_s).max(Duration::from_nanos(1));
    let mut pacer = tokio::time::interval(period);
    // A late pacer catches up with a burst so the offered load stays as planned.
    pacer.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut rng = StdRng::seed_from_u64(seed);
    let pool = Arc::new(Pool::new(max_in_flight));
    let in_flight = Arc::new(AtomicUsize::new(0));
    // Holds at most `max_in_flight` running tasks plus those finished since the
    // last reap, which happens every arrival.
    let mut tasks = JoinSet::new();
    loop {
        let scheduled = pacer.tick().await;
        let Some(ticket) = shared.claim(scheduled) else {
            break;
        };
        while let Some(done) = tasks.try_join_next() {
            done.context("request task panicked")?;
        }
        if in_flight.load(Ordering::Acquire) >= max_in_flight {
            shared.recorder.error(ErrorKind::Overload, 0);
            continue;
        }
        in_flight.fetch_add(1, Ordering::AcqRel);
        let uri = shared.targets.pick(ticket, &mut rng).clone();
        let (shared, pool, in_flight) = (
            Arc::clone(shared),
            Arc::clone(&pool),
            Arc::clone(&in_flight),
        );
        tasks.spawn(async move {
            let mut slot = pool.take();
            let result = shared.request(&mut slot, &uri).await;
            // Measured from the scheduled send time: time spent waiting behind a
            // slow pacer counts, as it would for a real user.
            let latency = scheduled.elapsed();
            pool.put(slot);
            shared.record(result, latency);
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
    join_all(tasks).await
}

async fn join_all(mut tasks: JoinSet<()>) -> anyhow::Result<()> {
    while let Some(done) = tasks.join_next().await {
        done.context("load-generator task panicked")?;
    }
    Ok(())
}

/// Idle connections of the open loop. HTTP/1.1 connections are taken exclusively
/// (at most `capacity` kept, one per possible in-flight request); an HTTP/2
/// connection is shared by all requests while it stays open.
#[derive(Debug)]
struct Pool {
    idle: Mutex<Vec<Conn>>,
    capacity: usize,
}

impl Pool {
    fn new(capacity: usize) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            capacity,
        }
    }

    fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|c| !c.is_closed());
        match idle.last().and_then(Conn::share) {
            Some(shared) => Some(shared),
            None => idle.pop(),
        }
    }

    fn put(&self, conn: Option<Conn>) {
        let Some(conn) = conn else { return };
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let multiplexed = conn.share().is_some();
        if multiplexed {
            // Keep one live shared connection; extra ones opened concurrently close.
            idle.retain(|c| !c.is_closed());
            if idle.is_empty() {
                idle.push(conn);
            }
        } else if idle.len() < self.capacity {
            idle.push(conn);
        }
    }
}

async fn progress_ticker(
    shared: Arc<Shared>,
    start: Instant,
    mut stop: tokio::sync::oneshot::Receiver<Duration>,
    mut on_progress: impl FnMut(&Progress) + Send + 'static,
) {
    let mut ticks = tokio::time::interval_at(start + PROGRESS_EVERY, PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let elapsed = loop {
        tokio::select! {
            _ = ticks.tick() => on_progress(&shared.recorder.progress(start.elapsed())),
            stopped = &mut stop => break stopped.unwrap_or_else(|_| start.elapsed()),
        }
    };
    on_progress(&shared.recorder.progress(elapsed));
}
