//! Clients that run the prefetching agent's logic (paper 000 §3.3.1, §7.1: httperf modified to
//! "simulate the execution of JavaScript" and keep a client cache).
//!
//! Demand documents arrive in an open loop at a constant rate. Each arrival is a client: it
//! fetches its document (the demand request, timed from its scheduled arrival), then, as the
//! agent does after a page has loaded, prefetches:
//! - [`Prefetching::Off`]: nothing (the paper's No-Prefetching);
//! - [`Prefetching::Fixed`]: `pfrate` hint lists, whatever the server's load (No-Avoidance;
//!   the hint server should run with `budget = "unlimited"`);
//! - [`Prefetching::Hinted`]: what the hint server grants, following `next_turn` and waiting
//!   out `retry_after_ms` (Monitor), for as long as the client stays (`visit`).
//!
//! Prefetches carry `Purpose: prefetch` (as the browser agent's do), go to the prefetch base (the prefetch listener,
//! or the demand server itself), at most six at once as a browser does per host, and skip what
//! the client's cache already holds. A client's first hint request goes where its page named
//! (`Slipstream-Prefetch-Base`, the prefetch listener), else to the demand server; its later
//! ones to the prefetch listener the answers name, as the browser agent's do.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures_util::StreamExt;
use http::Uri;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;
use tokio::time::Instant;

use crate::recorder::{ErrorKind, Recorder};
use crate::Report;

/// How clients prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetching {
    /// No prefetching.
    Off,
    /// This many hint lists after every document, whatever the server says.
    Fixed(usize),
    /// What the hint server grants.
    Hinted,
}

/// An agent run.
#[derive(Debug, Clone)]
pub struct AgentPlan {
    /// The demand server, `http://host:port`.
    pub base: Uri,
    /// Where prefetches go, `http://host:port`; `None`: where the hint server says
    /// (`prefetch_base`, its prefetch listener), else the demand server.
    pub prefetch_base: Option<Uri>,
    /// Documents' pages and their weights.
    pub documents: Vec<(String, f64)>,
    /// Files in a document: its page and the `doc_files - 1` paths that follow it in
    /// `documents` (wrapping), fetched six at a time as a browser fetches a page's objects.
    /// A demand response time is the whole document's.
    pub doc_files: usize,
    /// Demand documents per second (the mean, with a `rate_profile`).
    pub rate_per_s: f64,
    /// A bursty load: second `i` of the run arrives at `rate_per_s × profile[i] / mean`
    /// (the profile repeats if the run is longer); empty, a constant rate.
    pub rate_profile: Vec<f64>,
    /// Arrivals before the measured run, not recorded: the clients, the server and the
    /// connection pool reach their steady state in the same process as the measured run, at
    /// the mean rate. Zero: measure from the first arrival.
    pub warmup: Duration,
    /// No arrival after this long (after the warm-up).
    pub duration: Duration,
    /// Clients in progress at most; an arrival beyond is counted as `overload`.
    pub max_in_flight: usize,
    /// How clients prefetch.
    pub prefetching: Prefetching,
    /// How long a client stays after its document arrived (its prefetching stops then).
    pub visit: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Seed of the document choice.
    pub seed: u64,
    /// The CPU priority of the clients' prefetching (hint requests and prefetches).
    pub prefetch_priority: PrefetchPriority,
    /// The CPU that [`PrefetchPriority::Idle`]'s thread is pinned to (Linux), instead of the
    /// process's CPUs; `None` leaves it on them. With the demand clients pinned elsewhere, the
    /// prefetching then does not make their core busy, where idle work can delay them (pilot
    /// 56 of `docs/experiments/000-nps.md`) and be counted as the server's interference; on a
    /// two-core machine it takes the server's core instead (pilots 58 and 60).
    pub prefetch_cpu: Option<usize>,
    /// How arrivals are spaced.
    pub arrivals: Arrivals,
}

/// How documents' arrivals are spaced at a given rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Evenly, one every 1/rate seconds, as httperf's `--rate` (paper 000's load).
    #[default]
    Constant,
    /// A Poisson process: independent exponential gaps of mean 1/rate (seeded with the
    /// plan's seed). A population of independent users arrives so; it leaves no fixed gap
    /// after each document for other work to fill.
    Poisson,
}

/// Where the load generator runs its clients' prefetching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefetchPriority {
    /// On a runtime of its own whose thread is at the kernel's idle priority (Linux
    /// `SCHED_IDLE`; nice 19 where that is refused), with connections of its own.
    ///
    /// A browser prefetches after its page has loaded, on its own device: one user's
    /// prefetching never delays another's page. The generator stands for thousands of
    /// clients on one core, where prefetch responses read on the demand clients' threads
    /// would delay their pages' responses and be counted as the server's interference.
    /// At the idle priority the demand clients' threads run first. The prefetching also has
    /// connections of its own, so hint requests no longer ride the demand clients'
    /// kept-alive connections: more connections reach the server (not counted). A client
    /// stays in progress (`max_in_flight`) until its prefetching ends, as with `Normal`, so
    /// a starved prefetching thread can fill it. Not the default: when
    /// the generator's core is saturated (a burst) the prefetching then waits, and takes
    /// load off the server exactly when a real population's would not; in an interleaved
    /// pilot at 400 and 800 documents/s it made no difference the noise did not swamp
    /// (docs/experiments/000-nps.md, pilot 38).
    Idle,
    /// On the demand clients' runtime and connections.
    #[default]
    Normal,
}

/// What an agent run measured.
#[derive(Debug, Clone)]
pub struct AgentReport {
    /// How long documents arrived (the plan's duration): the rates' denominator, since the
    /// run's elapsed time also holds the last clients' prefetching.
    pub window: Duration,
    /// The demand requests: latency from the scheduled arrival, bytes, errors.
    pub demand: Report,
    /// Prefetch responses read in full.
    pub prefetches: u64,
    /// Their body bytes.
    pub prefetch_bytes: u64,
    /// Prefetches that failed (not counting those refused with a 503).
    pub prefetch_errors: u64,
    /// Prefetches the server refused with a 503 (no spare capacity now): the client then
    /// stops prefetching for that document.
    pub prefetch_refused: u64,
    /// Hint requests made.
    pub hint_requests: u64,
    /// Hint requests answered with "wait".
    pub hint_waits: u64,
    /// Pages that told their client to wait before its first hint request
    /// ([`HINTS_WAIT_HEADER`]): a wait without a hint request.
    pub page_waits: u64,
    /// Hinted URLs the client's cache already held.
    pub cache_skips: u64,
    /// The measured documents by when they arrived: one entry per [`TIMELINE_BUCKET`] of the
    /// measured run.
    pub timeline: Vec<Bucket>,
    /// When the measured run began (the run's start plus the warm-up: the first bucket's
    /// start), in milliseconds since the Unix epoch, to line the timeline up with a server's
    /// own records.
    pub measured_start_unix_ms: u64,
}

/// The width of a timeline bucket.
pub const TIMELINE_BUCKET: Duration = Duration::from_millis(100);

/// The documents that arrived in one bucket of the timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bucket {
    /// How many completed.
    pub documents: u64,
    /// How many failed (an error, a timeout, or no room among the clients in progress).
    pub failed: u64,
    /// The completed ones' summed response time, in milliseconds.
    pub sum_ms: f64,
    /// The slowest completed one, in milliseconds.
    pub max_ms: f64,
    /// The summed start lag of the documents that arrived (completed or failed), in
    /// milliseconds: how long after its scheduled arrival a client began its first request.
    /// The load generator's own delay, in every document's response time: a saturated
    /// generator shows here, a slow server does not.
    pub lag_sum_ms: f64,
    /// The largest start lag, in milliseconds.
    pub lag_max_ms: f64,
}

impl AgentReport {
    /// Demand body bytes per second of the arrival window.
    pub fn demand_bytes_per_s(&self) -> f64 {
        self.demand.bytes as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Prefetch body bytes per second of the arrival window (prefetches of the last clients,
    /// which go on for at most `visit` after it, included).
    pub fn prefetch_bytes_per_s(&self) -> f64 {
        self.prefetch_bytes as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Demand documents completed per second of the arrival window.
    pub fn documents_per_s(&self) -> f64 {
        self.demand.completed as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Machine-readable form: the demand report's, with the prefetch figures beside it.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "demand": self.demand.to_json(),
            "window_s": self.window.as_secs_f64(),
            "documents_per_s": self.documents_per_s(),
            "demand_bytes_per_s": self.demand_bytes_per_s(),
            "prefetches": self.prefetches,
            "prefetch_bytes": self.prefetch_bytes,
            "prefetch_bytes_per_s": self.prefetch_bytes_per_s(),
            "prefetch_errors": self.prefetch_errors,
            "prefetch_refused": self.prefetch_refused,
            "hint_requests": self.hint_requests,
            "hint_waits": self.hint_waits,
            "page_waits": self.page_waits,
            "cache_skips": self.cache_skips,
            "timeline": {
                "bucket_ms": TIMELINE_BUCKET.as_millis() as u64,
                "measured_start_unix_ms": self.measured_start_unix_ms,
                "documents": self.timeline.iter().map(|b| b.documents).collect::<Vec<_>>(),
                "failed": self.timeline.iter().map(|b| b.failed).collect::<Vec<_>>(),
                "mean_ms": self.timeline.iter()
                    .map(|b| if b.documents > 0 { b.sum_ms / b.documents as f64 } else { 0.0 })
                    .collect::<Vec<_>>(),
                "max_ms": self.timeline.iter().map(|b| b.max_ms).collect::<Vec<_>>(),
                "lag_mean_ms": self.timeline.iter()
                    .map(|b| {
                        let n = b.documents + b.failed;
                        if n > 0 { b.lag_sum_ms / n as f64 } else { 0.0 }
                    })
                    .collect::<Vec<_>>(),
                "lag_max_ms": self.timeline.iter().map(|b| b.lag_max_ms).collect::<Vec<_>>(),
            },
        })
    }
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

#[derive(Debug, Default)]
struct Counts {
    prefetches: AtomicU64,
    prefetch_bytes: AtomicU64,
    prefetch_errors: AtomicU64,
    prefetch_refused: AtomicU64,
    hint_requests: AtomicU64,
    hint_waits: AtomicU64,
    page_waits: AtomicU64,
    cache_skips: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    plan: AgentPlan,
    client: HttpClient,
    /// The prefetching's connections and runtime (`PrefetchPriority::Idle`): they are
    /// driven by the runtime the requests are made on.
    prefetcher: Option<(HttpClient, tokio::runtime::Handle)>,
    /// What measured clients record.
    measured: Sink,
    /// What warm-up clients record (dropped).
    warming: Sink,
}

/// Where a client records what it did.
#[derive(Debug)]
struct Sink {
    demand: Recorder,
    counts: Counts,
    /// The measured run's timeline (none for the warm-up, which nobody reads).
    timeline: Option<std::sync::Mutex<Vec<Bucket>>>,
}

impl Shared {
    /// Where a client of the measured run, or of the warm-up, records.
    fn sink(&self, measured: bool) -> &Sink {
        if measured {
            &self.measured
        } else {
            &self.warming
        }
    }
}

impl Sink {
    /// Counts a document that arrived in timeline bucket `bucket`: completed in `took`, or
    /// failed (`None`), its first request begun `lag` after its arrival.
    fn on_timeline(&self, bucket: usize, took: Option<Duration>, lag: Duration) {
        let Some(timeline) = &self.timeline else {
            return;
        };
        let mut timeline = timeline.lock().unwrap_or_else(|e| e.into_inner());
        if timeline.len() <= bucket {
            timeline.resize(bucket + 1, Bucket::default());
        }
        let b = &mut timeline[bucket];
        match took {
            Some(took) => {
                let ms = took.as_secs_f64() * 1e3;
                b.documents += 1;
                b.sum_ms += ms;
                b.max_ms = b.max_ms.max(ms);
            }
            None => b.failed += 1,
        }
        let lag = lag.as_secs_f64() * 1e3;
        b.lag_sum_ms += lag;
        b.lag_max_ms = b.lag_max_ms.max(lag);
    }

    /// A sink, keeping a timeline if `timeline`.
    fn new(timeline: bool) -> Sink {
        Sink {
            demand: Recorder::new(),
            counts: Counts::default(),
            timeline: timeline.then(|| std::sync::Mutex::new(Vec::new())),
        }
    }
}

fn base_of(uri: &Uri) -> anyhow::Result<String> {
    match uri.scheme_str() {
        Some("http") | None => {}
        Some(other) => bail!("unsupported scheme `{other}` in {uri} (only http)"),
    }
    let authority = uri
        .authority()
        .with_context(|| format!("{uri} has no host"))?;
    Ok(format!("http://{authority}"))
}

/// Runs `plan`, calling `on_progress` with (elapsed, demand documents done) about twice a
/// second.
pub async fn run_agents(
    plan: AgentPlan,
    mut on_progress: impl FnMut(Duration, u64) + Send + 'static,
) -> anyhow::Result<AgentReport> {
    if !(plan.rate_per_s.is_finite() && plan.rate_per_s > 0.0) {
        bail!("the rate must be a positive number of documents a second");
    }
    if plan.documents.is_empty() {
        bail!("no documents to request");
    }
    let schedule = Schedule::new(plan.rate_per_s, &plan.rate_profile)?.after(plan.warmup);
    let schedule = match plan.arrivals {
        Arrivals::Constant => schedule,
        // Its own stream, not the document choice's.
        Arrivals::Poisson => schedule.poisson(plan.seed.wrapping_add(0x9e37_79b9_7f4a_7c15)),
    };
    let weights =
        WeightedIndex::new(plan.documents.iter().map(|(_, w)| *w)).context("document weights")?;
    base_of(&plan.base)?;
    if let Some(b) = &plan.prefetch_base {
        base_of(b)?;
    }
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(plan.max_in_flight.max(1))
        .build(HttpConnector::new());
    if plan.prefetch_cpu.is_some() && plan.prefetch_priority != PrefetchPriority::Idle {
        bail!("a prefetching CPU needs the idle prefetching priority (its thread of its own)");
    }
    let idle = match (plan.prefetching, plan.prefetch_priority) {
        (Prefetching::Off, _) | (_, PrefetchPriority::Normal) => None,
        (_, PrefetchPriority::Idle) => Some(IdleRuntime::start(plan.prefetch_cpu)?),
    };
    // A pool of its own, so that no connection is driven by both runtimes.
    let prefetcher = idle.as_ref().map(|rt| {
        let c: HttpClient = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(plan.max_in_flight.max(1))
            .build(HttpConnector::new());
        (c, rt.handle())
    });
    let shared = Arc::new(Shared {
        plan,
        client,
        prefetcher,
        measured: Sink::new(true),
        warming: Sink::new(false),
    });
    let std_start = std::time::Instant::now();
    let start = Instant::from_std(std_start);
    let measured_start_unix_ms = (std::time::SystemTime::now() + shared.plan.warmup)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut rng = StdRng::seed_from_u64(shared.plan.seed);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(
        shared.plan.max_in_flight.max(1),
    ));
    let mut tasks = tokio::task::JoinSet::new();
    let mut n: u32 = 0;
    let mut last_progress = start;
    let end = shared.plan.warmup + shared.plan.duration;
    let (mut arrivals, pacer) = pace(schedule, end, std_start)?;
    while let Some(arrival) = arrivals.recv().await {
        let at = start + arrival;
        n += 1;
        if last_progress.elapsed() >= Duration::from_millis(500) {
            last_progress = Instant::now();
            on_progress(
                start.elapsed(),
                shared.measured.demand.progress(start.elapsed()).completed,
            );
        }
        let first = weights.sample(&mut rng);
        let docs = &shared.plan.documents;
        let doc: Vec<String> = (0..shared.plan.doc_files.max(1))
            .map(|i| docs[(first + i) % docs.len()].0.clone())
            .collect();
        let measured = arrival >= shared.plan.warmup;
        let bucket = (arrival.saturating_sub(shared.plan.warmup).as_millis()
            / TIMELINE_BUCKET.as_millis()) as usize;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            let sink = shared.sink(measured);
            sink.demand.error(ErrorKind::Overload, 0);
            sink.on_timeline(bucket, None, at.elapsed());
            continue;
        };
        let shared = shared.clone();
        tasks.spawn(async move {
            if let Some(next) = visit(&shared, shared.sink(measured), &doc, at, n, bucket).await {
                match shared.prefetcher.as_ref().map(|(_, rt)| rt.clone()) {
                    Some(rt) => {
                        let shared = shared.clone();
                        let _ = rt
                            .spawn(async move {
                                let sink = shared.sink(measured);
                                prefetch(&shared, sink, &doc, at, n, next).await
                            })
                            .await;
                    }
                    None => prefetch(&shared, shared.sink(measured), &doc, at, n, next).await,
                }
            }
            drop(permit);
        });
        // Reap finished clients so the set stays as small as the clients in progress.
        while tasks.try_join_next().is_some() {}
    }
    // The channel has closed: the thread has returned or is returning.
    if pacer.join().is_err() {
        bail!("the arrivals thread panicked; the run stopped early");
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    on_progress(elapsed, shared.measured.demand.progress(elapsed).completed);
    let c = &shared.measured.counts;
    let timeline = shared
        .measured
        .timeline
        .as_ref()
        .map(|t| std::mem::take(&mut *t.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default();
    Ok(AgentReport {
        window: shared.plan.duration,
        demand: shared
            .measured
            .demand
            .report(elapsed.saturating_sub(shared.plan.warmup)),
        prefetches: c.prefetches.load(Ordering::Relaxed),
        prefetch_bytes: c.prefetch_bytes.load(Ordering::Relaxed),
        prefetch_errors: c.prefetch_errors.load(Ordering::Relaxed),
        prefetch_refused: c.prefetch_refused.load(Ordering::Relaxed),
        hint_requests: c.hint_requests.load(Ordering::Relaxed),
        hint_waits: c.hint_waits.load(Ordering::Relaxed),
        page_waits: c.page_waits.load(Ordering::Relaxed),
        cache_skips: c.cache_skips.load(Ordering::Relaxed),
        timeline,
        measured_start_unix_ms,
    })
}

/// A one-thread runtime at the kernel's idle CPU priority, for the clients' prefetching.
struct IdleRuntime(Option<tokio::runtime::Runtime>);

impl IdleRuntime {
    /// Its thread pinned to `cpu` when given (an error if the kernel refuses it, e.g. a CPU
    /// this machine does not have).
    fn start(cpu: Option<usize>) -> anyhow::Result<IdleRuntime> {
        let pinned: Arc<std::sync::Mutex<Option<std::io::Error>>> = Arc::default();
        let failed = pinned.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-prefetch")
            .enable_all()
            .on_thread_start(move || {
                lower_this_thread();
                if let Some(cpu) = cpu {
                    if let Err(e) = pin_this_thread(cpu) {
                        *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    }
                }
            })
            .build()
            .context("starting the prefetching's runtime")?;
        let rt = IdleRuntime(Some(rt));
        if let Some(cpu) = cpu {
            // The worker has started once it has run a task; a blocking wait of a few µs,
            // once, before any client starts.
            let (tx, rx) = std::sync::mpsc::channel();
            rt.handle().spawn(async move {
                let _ = tx.send(());
            });
            rx.recv_timeout(Duration::from_secs(10))
                .context("the prefetching's thread did not start")?;
            if let Some(e) = pinned.lock().unwrap_or_else(|e| e.into_inner()).take() {
                bail!("cannot pin the prefetching's thread to CPU {cpu}: {e}");
            }
        }
        Ok(rt)
    }

    fn handle(&self) -> tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("present until dropped")
            .handle()
            .clone()
    }
}

impl Drop for IdleRuntime {
    fn drop(&mut self) {
        // Dropped from within the demand clients' runtime, where a blocking shutdown would
        // panic. Normally every prefetch task has been awaited by then; if the run was
        // cancelled, this cancels the rest.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread to `SCHED_IDLE`, else to nice 19 (Linux; elsewhere nothing).
///
/// The same steps as the prefetch listener's thread takes (`slipstream-node`'s
/// `bootstrap::lower_this_thread`); repeated here rather than have the load generator
/// depend on the node crate.
fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let id = thread_native_id();
        if set_thread_priority_and_policy(id, thread_priority::ThreadPriority::Min, idle).is_err()
            && rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19).is_err()
        {
            tracing::warn!(
                "the prefetching's thread could not be lowered; it runs at normal priority"
            );
        }
    }
}

/// Pins the calling thread to `cpu` (Linux; elsewhere an error).
fn pin_this_thread(cpu: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        if cpu >= rustix::thread::CpuSet::MAX_CPU {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "CPUs are numbered below {}",
                    rustix::thread::CpuSet::MAX_CPU
                ),
            ));
        }
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "pinning a thread is supported on Linux only",
        ))
    }
}

/// Sends each arrival of `schedule` before `end` (its offset from `start`) at its time, from a
/// thread of its own that sleeps on the kernel's high-resolution timer.
///
/// Tokio's timer has a resolution of 1 ms, and it rounds a deadline up: arrivals paced on it
/// began about 1 ms late, which was most of a document's response time on loopback. A
/// thread asleep in `nanosleep` with a timer slack of 1 ns wakes within microseconds of its
/// deadline; the client then starts as soon as a worker takes the arrival from the channel.
/// The thread ends with the schedule, or at its next arrival once the receiver is dropped;
/// join its handle after the receiver has closed to learn whether it ended early (a panic).
fn pace(
    schedule: Schedule,
    end: Duration,
    start: std::time::Instant,
) -> anyhow::Result<(
    tokio::sync::mpsc::UnboundedReceiver<Duration>,
    std::thread::JoinHandle<()>,
)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let thread = std::thread::Builder::new()
        .name("bench-arrivals".into())
        .spawn(move || {
            let mut schedule = schedule;
            // The default slack (50 µs) would let the kernel defer each wake-up by that much.
            #[cfg(target_os = "linux")]
            if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)) {
                tracing::debug!("arrivals keep the default timer slack: {e}");
            }
            let mut offset = Duration::ZERO;
            while let Some((arrival, after)) = schedule.next(offset, end) {
                offset = after;
                let wait = arrival.saturating_sub(start.elapsed());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                if tx.send(arrival).is_err() {
                    return;
                }
            }
        })
        .context("starting the arrivals thread")?;
    Ok((rx, thread))
}

/// When documents arrive: at a constant rate, or at a rate that changes every second.
#[derive(Debug, Clone)]
struct Schedule {
    /// Documents a second in each second of the profile (one entry: constant).
    rates: Vec<f64>,
    /// The mean, the rate before `start`.
    mean: f64,
    /// The profile's first second begins here (after a warm-up).
    start: Duration,
    /// Exponential gaps drawn from this ([`Arrivals::Poisson`]); `None`: even gaps.
    random: Option<StdRng>,
}

impl Schedule {
    fn new(mean: f64, profile: &[f64]) -> anyhow::Result<Schedule> {
        if profile.is_empty() {
            return Ok(Schedule {
                rates: vec![mean],
                mean,
                start: Duration::ZERO,
                random: None,
            });
        }
        if let Some(i) = profile.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
            bail!(
                "rate profile, second {}: `{}` is not a non-negative number",
                i + 1,
                profile[i]
            );
        }
        let sum: f64 = profile.iter().sum();
        if sum <= 0.0 {
            bail!("the rate profile is all zero: no document would ever arrive");
        }
        let scale = mean * profile.len() as f64 / sum;
        Ok(Schedule {
            rates: profile.iter().map(|v| v * scale).collect(),
            mean,
            start: Duration::ZERO,
            random: None,
        })
    }

    /// The same schedule with the mean rate for `warmup` first, the profile after it.
    fn after(self, warmup: Duration) -> Schedule {
        Schedule {
            start: warmup,
            ..self
        }
    }

    /// The same schedule with exponential gaps (a Poisson process at each second's rate),
    /// drawn from `seed`.
    fn poisson(self, seed: u64) -> Schedule {
        Schedule {
            random: Some(StdRng::seed_from_u64(seed)),
            ..self
        }
    }

    fn rate_at(&self, t: Duration) -> f64 {
        match t.checked_sub(self.start) {
            Some(t) => self.rates[(t.as_secs() % self.rates.len() as u64) as usize],
            None => self.mean,
        }
    }

    /// The arrival at or after `offset` (from the run's start) and the offset of the one after
    /// it; `None` once `duration` is reached. A second with rate 0 has no arrivals. With
    /// exponential gaps, a gap is drawn at the rate of the second it starts in.
    fn next(&mut self, mut offset: Duration, duration: Duration) -> Option<(Duration, Duration)> {
        loop {
            if offset >= duration {
                return None;
            }
            let rate = self.rate_at(offset);
            if rate > 0.0 {
                let gap = match &mut self.random {
                    None => 1.0 / rate,
                    // `rate` is positive and finite here, which is all `Exp::new` asks.
                    Some(rng) => rand_distr::Exp::new(rate).map_or(1.0 / rate, |e| e.sample(rng)),
                };
                return Some((offset, offset + Duration::from_secs_f64(gap)));
            }
            // On to the profile's next second.
            let into = offset.saturating_sub(self.start);
            offset = self.start + Duration::from_secs(into.as_secs() + 1);
        }
    }
}

/// A response as the agent reads it.
struct Fetched {
    status: http::StatusCode,
    /// The base URL of the hint server named by [`PREFETCH_BASE_HEADER`], if any.
    prefetch_base: Option<String>,
    /// The wait before the first hint request that [`HINTS_WAIT_HEADER`] asks for, if any.
    hints_wait: Option<Duration>,
    /// When the page was served, as [`SERVED_HEADER`] says, if it does.
    served_ms: Option<u64>,
    body: Bytes,
}

/// The response header by which a page says when it was served, for the agent to report back
/// with the page's response time on its first hint request (`slipstream_nps::SERVED_HEADER`).
pub const SERVED_HEADER: &str = "slipstream-served-ms";

/// The response header by which a page tells its agent to wait this many milliseconds before
/// its first hint request, as `slipstream serve` sends it when its hint server would tell
/// every client to wait (`slipstream_nps::HINTS_WAIT_HEADER`).
pub const HINTS_WAIT_HEADER: &str = "slipstream-hints-wait-ms";

/// After a client's document: where its first hint request goes, and how long it waits first.
struct NextHints {
    /// The base URL of the hint server: the one the page named, else the demand server.
    at: String,
    /// The page's wait ([`HINTS_WAIT_HEADER`]), if it gave one.
    wait: Option<Duration>,
    /// The report the first hint request carries: when the page was served
    /// ([`SERVED_HEADER`]) and how long the document took to load, in microseconds.
    report: Option<(u64, u64)>,
}

/// The response header by which a page names where its hint requests go (the node's prefetch
/// listener), as `slipstream serve` sends it (`slipstream_nps::PREFETCH_BASE_HEADER`; this
/// crate does not depend on that one).
pub const PREFETCH_BASE_HEADER: &str = "slipstream-prefetch-base";

/// GETs `url`, reading the whole body; the response or the error kind.
async fn fetch(
    shared: &Shared,
    http: &HttpClient,
    url: &str,
    client: &str,
    prefetch: bool,
) -> Result<Fetched, ErrorKind> {
    let mut req = http::Request::get(url).header(http::header::USER_AGENT, client);
    if prefetch {
        // As the browser agent marks its prefetches (a worker cannot send `Sec-Purpose`).
        // `Sec-Purpose` is a browser's own prefetch, which no hint list granted: the server
        // would charge it to the budget a second time.
        req = req.header("purpose", "prefetch");
    }
    let req = req.body(Empty::new()).map_err(|_| ErrorKind::Io)?;
    let exchange = async {
        let res = http.request(req).await.map_err(|e| {
            if e.is_connect() {
                ErrorKind::Connect
            } else {
                ErrorKind::Io
            }
        })?;
        let status = res.status();
        let prefetch_base = res
            .headers()
            .get(PREFETCH_BASE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A malformed value is no wait: the client asks, and the hint server answers.
        let hints_wait = res
            .headers()
            .get(HINTS_WAIT_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis);
        let served_ms = res
            .headers()
            .get(SERVED_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|_| ErrorKind::Io)?
            .to_bytes();
        Ok(Fetched {
            status,
            prefetch_base,
            hints_wait,
            served_ms,
            body,
        })
    };
    tokio::time::timeout(shared.plan.timeout, exchange)
        .await
        .map_err(|_| ErrorKind::Timeout)?
}

/// Waits `wait` (at least 1 ms) as a client told to wait does, unless that would end at or
/// after `leave`, when the client leaves at once: `false`. (The wait comes from the server, so
/// any value must be safe, however large.)
async fn wait_within_visit(wait: Duration, leave: Instant) -> bool {
    match Instant::now().checked_add(wait.max(Duration::from_millis(1))) {
        Some(again) if again < leave => {
            tokio::time::sleep_until(again).await;
            true
        }
        _ => false,
    }
}

/// One client (the `n`-th, arrived in timeline bucket `bucket`): its document (`files[0]` is
/// the page). When it goes on to prefetch (the document loaded and the plan prefetches), the
/// base its first hint request goes to (the one the page names, [`PREFETCH_BASE_HEADER`], else
/// the demand server) and the page's wait before it ([`HINTS_WAIT_HEADER`]).
/// Each client has a user agent of its own, so the server tells them apart as it does
/// browsers.
async fn visit(
    shared: &Shared,
    sink: &Sink,
    files: &[String],
    arrived: Instant,
    n: u32,
    bucket: usize,
) -> Option<NextHints> {
    let lag = arrived.elapsed();
    let plan = &shared.plan;
    let client = format!("slipstream-agent/{n}");
    let client = client.as_str();
    let base = base_of(&plan.base).unwrap_or_default();
    // Six at a time, as a browser fetches a page's objects from one host.
    let mut results: Vec<Result<Fetched, ErrorKind>> = Vec::new();
    for chunk in files.chunks(6) {
        let urls: Vec<String> = chunk.iter().map(|f| format!("{base}{f}")).collect();
        results.extend(
            futures_util::future::join_all(
                urls.iter()
                    .map(|u| fetch(shared, &shared.client, u, client, false)),
            )
            .await,
        );
    }
    let bytes: u64 = results
        .iter()
        .map(|r| r.as_ref().map_or(0, |f| f.body.len() as u64))
        .sum();
    let failed = results.iter().find_map(|r| match r {
        Ok(f) if f.status.is_success() || f.status.is_redirection() => None,
        Ok(f) => Some(ErrorKind::Status(f.status.as_u16())),
        Err(kind) => Some(*kind),
    });
    if let Some(kind) = failed {
        sink.demand.error(kind, bytes);
        sink.on_timeline(bucket, None, lag);
        return None;
    }
    let took = arrived.elapsed();
    sink.demand.success(took, bytes);
    sink.on_timeline(bucket, Some(took), lag);
    if plan.prefetching == Prefetching::Off {
        return None;
    }
    let page = results.first().and_then(|r| r.as_ref().ok());
    let named = page
        .and_then(|f| f.prefetch_base.as_ref())
        .and_then(|b| b.parse::<Uri>().ok())
        .and_then(|b| base_of(&b).ok());
    let took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    Some(NextHints {
        at: named.unwrap_or(base),
        wait: page.and_then(|f| f.hints_wait),
        report: page.and_then(|f| f.served_ms).map(|at| (at, took_us)),
    })
}

/// The `n`-th client's prefetching after its document `files` (arrived at `arrived`), as the
/// agent does after a page has loaded, until its visit ends; its first hint request to
/// `next.at`, after the page's wait if it gave one.
async fn prefetch(
    shared: &Shared,
    sink: &Sink,
    files: &[String],
    arrived: Instant,
    n: u32,
    next: NextHints,
) {
    let plan = &shared.plan;
    let client = format!("slipstream-agent/{n}");
    let client = client.as_str();
    let http = shared
        .prefetcher
        .as_ref()
        .map_or(&shared.client, |(c, _)| c);
    let base = base_of(&plan.base).unwrap_or_default();
    let doc = files[0].as_str();
    let turns = match plan.prefetching {
        Prefetching::Off => return,
        Prefetching::Fixed(k) => k,
        Prefetching::Hinted => usize::MAX,
    };
    let leave = arrived + plan.visit;
    let fixed_base = plan.prefetch_base.as_ref().and_then(|b| base_of(b).ok());
    let query: String = form_urlencoded::byte_serialize(doc.as_bytes()).collect();
    let mut cache: HashSet<String> = files.iter().cloned().collect();
    let mut turn = 0usize;
    // The first hint request goes where the page said (its prefetch listener), else to the
    // demand server; the ones after it (a retry, the next turn) go to the prefetch listener
    // the answer names, as the browser agent's do: there they are served at its low priority,
    // not on demand's thread.
    let mut hint_base = next.at;
    // The page's report goes with the first hint request only.
    let mut report = next
        .report
        .map(|(at, us)| format!("&served_ms={at}&page_us={us}"));
    // The page said the hint server would only tell it to wait: it waits as told, without
    // asking (as after a hint answer's `retry_after_ms`).
    if let Some(wait) = next
        .wait
        .filter(|_| plan.prefetching == Prefetching::Hinted)
    {
        sink.counts.page_waits.fetch_add(1, Ordering::Relaxed);
        if !wait_within_visit(wait, leave).await {
            return;
        }
    }
    while turn < turns && Instant::now() < leave {
        sink.counts.hint_requests.fetch_add(1, Ordering::Relaxed);
        let url = format!(
            "{hint_base}/_slipstream/hints?url={query}&turn={turn}{}",
            report.take().unwrap_or_default()
        );
        let Ok(Fetched { status, body, .. }) = fetch(shared, http, &url, client, false).await
        else {
            return;
        };
        if !status.is_success() {
            return;
        }
        let Ok(answer) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return;
        };
        // The prefetch listener the hint server names, as the browser agent follows it: the
        // next hint request goes there, and so do the prefetches unless --prefetch-base fixed
        // theirs (a fixed base need not be a hint server).
        hint_base = answer["prefetch_base"]
            .as_str()
            .and_then(|b| b.parse::<Uri>().ok())
            .and_then(|b| base_of(&b).ok())
            .unwrap_or_else(|| base.clone());
        let prefetch_base = fixed_base.clone().unwrap_or_else(|| hint_base.clone());
        if let Some(ms) = answer["retry_after_ms"].as_u64() {
            sink.counts.hint_waits.fetch_add(1, Ordering::Relaxed);
            if !wait_within_visit(Duration::from_millis(ms), leave).await {
                return;
            }
            continue;
        }
        let hints: Vec<String> = answer["hints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let fresh: Vec<String> = hints
            .into_iter()
            .filter(|h| {
                let new = cache.insert(h.clone());
                if !new {
                    sink.counts.cache_skips.fetch_add(1, Ordering::Relaxed);
                }
                new
            })
            .collect();
        // A 503 says the server has no spare capacity now: the rest of the list and the
        // chain are dropped, as the browser agent does.
        let refused = AtomicBool::new(false);
        futures_util::stream::iter(fresh)
            .for_each_concurrent(6, |h| {
                let url = format!("{}{h}", prefetch_base);
                let refused = &refused;
                async move {
                    if refused.load(Ordering::Relaxed) {
                        return;
                    }
                    match fetch(shared, http, &url, client, true).await {
                        Ok(f) if f.status.is_success() => {
                            sink.counts.prefetches.fetch_add(1, Ordering::Relaxed);
                            sink.counts
                                .prefetch_bytes
                                .fetch_add(f.body.len() as u64, Ordering::Relaxed);
                        }
                        Ok(f) if f.status == http::StatusCode::SERVICE_UNAVAILABLE => {
                            refused.store(true, Ordering::Relaxed);
                            sink.counts.prefetch_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            sink.counts.prefetch_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
            .await;
        if refused.into_inner() {
            return;
        }
        match (plan.prefetching, answer["next_turn"].as_u64()) {
            (Prefetching::Fixed(_), _) => turn += 1,
            (_, Some(next)) => turn = next as usize,
            (_, None) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduling policy (field 41 of `stat`: 0 normal, 5 `SCHED_IDLE`) and nice value
    /// (field 19) of the thread that runs a task on `rt`.
    #[cfg(target_os = "linux")]
    fn policy_and_nice_on(rt: &IdleRuntime) -> (u32, i32) {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.handle().spawn(async move {
            let _ = tx.send(std::fs::read_to_string("/proc/thread-self/stat"));
        });
        let stat = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the task ran")
            .expect("read stat");
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        // `fields[0]` is field 3.
        (
            fields[41 - 3].parse().unwrap(),
            fields[19 - 3].parse().unwrap(),
        )
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_prefetching_runtime_runs_at_idle_priority() {
        let rt = IdleRuntime::start(None).unwrap();
        let (policy, nice) = policy_and_nice_on(&rt);
        assert!(
            policy == 5 || nice == 19,
            "SCHED_IDLE, or nice 19 where that is refused: policy {policy}, nice {nice}"
        );
    }

    /// The CPUs the calling thread may run on.
    #[cfg(target_os = "linux")]
    fn my_cpus() -> Vec<usize> {
        let set = rustix::thread::sched_getaffinity(None).expect("affinity");
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect()
    }

    /// The CPUs the thread that runs a task on `rt` may run on.
    #[cfg(target_os = "linux")]
    fn cpus_of(rt: &IdleRuntime) -> Vec<usize> {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.handle().spawn(async move {
            let _ = tx.send(my_cpus());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the task ran")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_prefetching_thread_is_pinned_where_asked_and_a_missing_cpu_is_refused() {
        // The first CPU this process may use (CPU 0 may be outside a container's set).
        let cpu = my_cpus()[0];
        let rt = IdleRuntime::start(Some(cpu)).unwrap();
        assert_eq!(cpus_of(&rt), vec![cpu]);
        let (policy, nice) = policy_and_nice_on(&rt);
        assert!(policy == 5 || nice == 19, "still at idle priority");
        // Unpinned, it keeps the CPUs of the thread that started it.
        assert_eq!(cpus_of(&IdleRuntime::start(None).unwrap()), my_cpus());
        // No machine this runs on has CPU 1,000 (the kernel refuses a set of offline CPUs).
        let err = IdleRuntime::start(Some(1000)).err().expect("refused");
        assert!(
            err.to_string()
                .contains("cannot pin the prefetching's thread to CPU 1000"),
            "{err}"
        );
        let err = IdleRuntime::start(Some(usize::MAX)).err().expect("refused");
        assert!(err.to_string().contains("CPUs are numbered below"), "{err}");
    }

    fn arrivals(s: &Schedule, duration: Duration) -> Vec<Duration> {
        let mut s = s.clone();
        let mut out = Vec::new();
        let mut offset = Duration::ZERO;
        while let Some((at, next)) = s.next(offset, duration) {
            out.push(at);
            offset = next;
        }
        out
    }

    #[test]
    fn poisson_arrivals_keep_the_rate_with_exponential_gaps() {
        let s = Schedule::new(1000.0, &[]).unwrap().poisson(7);
        let a = arrivals(&s, Duration::from_secs(10));
        // 10,000 expected; a Poisson count's standard deviation is 100.
        assert!((9_600..=10_400).contains(&a.len()), "{} arrivals", a.len());
        let gaps: Vec<f64> = a.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        // An exponential's standard deviation equals its mean (even gaps: 0).
        let cv = var.sqrt() / mean;
        assert!((0.9..1.1).contains(&cv), "coefficient of variation {cv}");
        // The same seed, the same arrivals.
        let first = arrivals(&s, Duration::from_secs(1));
        assert_eq!(first, a[..first.len()]);
    }

    #[test]
    fn a_constant_rate_arrives_evenly() {
        let s = Schedule::new(10.0, &[]).unwrap();
        let a = arrivals(&s, Duration::from_secs(2));
        assert_eq!(a.len(), 20);
        assert_eq!(a[1], Duration::from_millis(100));
    }

    #[test]
    fn a_profile_keeps_the_mean_and_follows_its_seconds() {
        // Seconds at 0, 3 and 1 parts of a mean of 20/s: 0, 45 and 15 arrivals.
        let s = Schedule::new(20.0, &[0.0, 3.0, 1.0]).unwrap();
        let a = arrivals(&s, Duration::from_secs(3));
        let per_second = |k: u64| a.iter().filter(|t| t.as_secs() == k).count();
        assert_eq!(per_second(0), 0);
        assert!((44..=46).contains(&per_second(1)), "{}", per_second(1));
        assert!((14..=16).contains(&per_second(2)), "{}", per_second(2));
        // It repeats: second 3 is second 0 again.
        let a = arrivals(&s, Duration::from_secs(5));
        assert_eq!(a.iter().filter(|t| t.as_secs() == 3).count(), 0);
    }

    #[test]
    fn a_warm_up_runs_at_the_mean_and_the_profile_starts_after_it() {
        // 1.5 s of warm-up at the mean of 20/s, then seconds of 0 and 2 parts (0 and 40/s).
        let s = Schedule::new(20.0, &[0.0, 2.0])
            .unwrap()
            .after(Duration::from_millis(1500));
        let a = arrivals(&s, Duration::from_millis(3500));
        let within = |from: u64, to: u64| {
            a.iter()
                .filter(|t| **t >= Duration::from_millis(from) && **t < Duration::from_millis(to))
                .count()
        };
        assert_eq!(within(0, 1500), 30);
        assert_eq!(within(1500, 2500), 0);
        assert!(
            (39..=41).contains(&within(2500, 3500)),
            "{}",
            within(2500, 3500)
        );
    }

    #[test]
    fn bad_profiles_are_refused_with_their_second() {
        let e = Schedule::new(5.0, &[1.0, -2.0]).unwrap_err().to_string();
        assert!(e.contains("second 2"), "{e}");
        assert!(Schedule::new(5.0, &[1.0, f64::NAN]).is_err());
        assert!(Schedule::new(5.0, &[0.0, 0.0]).is_err());
    }
}
