//! `slipstream get URL...`: the native Web++ client (001 §3) as a real client.
//!
//! - **Resolve once, from anyone.** A URL's replica list (`/_slipstream/resolve`) is kept with a
//!   time to live; it is asked of `--resolver`, then of the replicas already known for the URL's
//!   site (fastest first), then of the URL's own server, the next when one is down.
//! - **Pick by speed, learn across runs.** The replica is chosen by a selection policy
//!   (`slipstream-select`; `decay` by default, the paper's `refresh` by name). With `decay` the
//!   latency table, the lists and the sites' replicas are kept between runs in the user's cache
//!   directory (`$XDG_CACHE_HOME/slipstream/get.json`), so a second run goes straight to the
//!   fastest replica. Replicas never measured are raced (the first answer wins); exploration
//!   probes and hedges stay within the policy's budget.
//! - **Never stuck.** A replica that does not answer within its timeout, refuses the connection
//!   or answers 5xx is skipped for the next; the URL itself comes last.
//! - **Many URLs.** `get URL...` and `-i FILE` fetch in one process, `--parallel` at once; each
//!   fetch reports its whole time, failed attempts included; a summary counts the extra
//!   requests (resolves, races, probes, hedges) against the useful ones.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use slipstream_select::{config, Decay, Outcome, Refresh, Saved, Select};
use tokio::task::JoinSet;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URLs to fetch (http://).
    pub urls: Vec<String>,
    /// More URLs, one a line (`-` for standard input; blank lines and `#` comments skipped).
    #[arg(short = 'i', long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// One URL: write its body here instead of standard output. Several: a directory, each
    /// body under its URL's host and path.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Fetches at once.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Fetch each URL this many times.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// A cluster member to ask for replica lists first [default: the replicas known for the
    /// URL's site, then the URL's own server].
    #[arg(long, value_name = "BASE_URL")]
    pub resolver: Option<String>,
    /// The selection policy: `decay` (time-decayed estimates, budgeted exploration and
    /// hedging, capped back-off) or `refresh` (the paper's, kept for comparison; nothing is
    /// kept between runs).
    #[arg(long, default_value = "decay", value_parser = ["decay", "refresh"])]
    pub policy: String,
    /// Where the latency table and the learned replica lists live between runs [default:
    /// $XDG_CACHE_HOME/slipstream/get.json, else ~/.cache/slipstream/get.json].
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Keep nothing between runs.
    #[arg(long, conflicts_with = "state")]
    pub no_state: bool,
    /// How long a learned replica list is used before it is asked for again, e.g. 60s.
    #[arg(long, value_parser = slipstream_units::duration, default_value = "60s")]
    pub list_ttl: Duration,
    /// Print the summary line (fetched, failed, extra requests: resolves, races, probes,
    /// hedges, failed attempts) for a single fetch too; several fetches always print it.
    #[arg(long)]
    pub summary: bool,
}

/// A plain-HTTP client for small bodiless requests (resolutions, fetches).
pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// A pooled [`HttpClient`].
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let urls = urls(&args)?;
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(fetch_all(args, urls))
}

/// The URLs of the command line and of `--input`, each an absolute http:// URL.
fn urls(args: &Args) -> anyhow::Result<Vec<String>> {
    let mut all = args.urls.clone();
    if let Some(path) = &args.input {
        let text = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading URLs from standard input")?
        } else {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        };
        all.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
    }
    if all.is_empty() {
        bail!("no URL to fetch: give some, or -i FILE");
    }
    for (n, u) in all.iter().enumerate() {
        let uri: Uri = u
            .parse()
            .with_context(|| format!("URL {}: `{u}` is not a URL", n + 1))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            bail!("`{u}`: `slipstream get` fetches absolute http:// URLs (https is not supported yet)");
        }
    }
    Ok(all)
}

/// The state file's format tag.
const STATE_FORMAT: &str = "slipstream-get/1";
/// Replica lists kept at most (the oldest go first).
const MAX_LISTS: usize = 10_000;
/// Replicas kept per site at most.
const MAX_SITE_REPLICAS: usize = 64;
/// How long the process waits at its end for probes and races still out, at most: their
/// answers are what the next run learns from.
const FINISH_WAIT: Duration = Duration::from_millis(1500);

/// What a run keeps for the next one.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct State {
    format: String,
    /// The decay policy's table and tokens.
    table: Vec<Saved>,
    tokens: f64,
    /// URL → its replicas and when the list expires (Unix ms).
    lists: BTreeMap<String, (Vec<String>, u64)>,
    /// Site (authority) → the replica endpoints seen serving it: the resolvers to ask.
    sites: BTreeMap<String, Vec<String>>,
    /// Site → a resolver's rules (a wildcard and every pattern under it, as a replica block's
    /// entries) and when they expire: any URL they cover is resolved without asking.
    #[serde(default)]
    rules: BTreeMap<String, (BTreeMap<String, Vec<String>>, u64)>,
    /// When the table was saved (Unix ms; 0 in files written before it was kept): the table's
    /// ages and back-offs count from then, so the time between two runs is added on loading.
    #[serde(default)]
    saved_at_ms: u64,
}

/// `table` as saved `gap_ms` ago: its samples that much older, its back-offs that much
/// nearer their end. Without this, every run restarted the clock where the last one stopped:
/// one-shot runs a few hundred ms apart pushed a failed replica's 1 s back-off out by the gap
/// each time, and kept it out about 7 s.
fn aged(table: &[Saved], gap_ms: u64) -> Vec<Saved> {
    table
        .iter()
        .map(|s| Saved {
            age_ms: s.age_ms.saturating_add(gap_ms),
            retry_in_ms: s.retry_in_ms.saturating_sub(gap_ms),
            ..s.clone()
        })
        .collect()
}

/// `logical`'s replicas by `rules` (a replica block's entries): its exact key, else the
/// longest wildcard `P*` it starts with, each stem's `*` replaced by the rest of it. `None`
/// when no key covers it.
fn by_rules(rules: &BTreeMap<String, Vec<String>>, logical: &str) -> Option<Vec<String>> {
    if let Some(list) = rules.get(logical) {
        return Some(list.clone());
    }
    let (key, stems) = rules
        .iter()
        .filter_map(|(k, v)| Some((k.strip_suffix('*')?, v)))
        .filter(|(prefix, _)| logical.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())?;
    let rest = &logical[key.len()..];
    Some(
        stems
            .iter()
            .filter_map(|stem| stem.strip_suffix('*').map(|s| format!("{s}{rest}")))
            .collect(),
    )
}

/// The path and query of `url`, as a directory names it.
fn logical_of(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| u.path_and_query().map(|p| p.as_str().to_owned()))
        .unwrap_or_else(|| "/".to_owned())
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The default state file: `$XDG_CACHE_HOME/slipstream/get.json`, else under `~/.cache`.
fn default_state() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(base.join("slipstream").join("get.json"))
}

impl State {
    /// The state at `path`; an empty one when there is none, or when it cannot be read (said
    /// in one line: a damaged file costs what it had learned, never the fetch).
    fn load(path: &Path) -> State {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return State::default(),
            Err(e) => {
                eprintln!(
                    "warning: cannot read {}: {e}; starting afresh",
                    path.display()
                );
                return State::default();
            }
        };
        match serde_json::from_slice::<State>(&bytes) {
            Ok(s) if s.format == STATE_FORMAT => s,
            Ok(s) => {
                eprintln!(
                    "warning: {} has format `{}`, not {STATE_FORMAT}; starting afresh",
                    path.display(),
                    s.format
                );
                State::default()
            }
            Err(e) => {
                eprintln!(
                    "warning: {} is not a slipstream get state ({e}); starting afresh",
                    path.display()
                );
                State::default()
            }
        }
    }

    /// Writes the state to `path` whole or not at all (a temporary file renamed over it).
    fn save(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let bytes = serde_json::to_vec(self).context("encoding the state")?;
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
    }
}

/// The selection policy and what it knows.
#[derive(Debug)]
enum Policy {
    Decay(Decay),
    Refresh(Refresh),
}

impl Policy {
    fn select(&mut self) -> &mut dyn Select {
        match self {
            Policy::Decay(d) => d,
            Policy::Refresh(r) => r,
        }
    }

    /// Whether `endpoint` has a latency sample.
    fn measured(&self, endpoint: &str) -> bool {
        match self {
            Policy::Decay(d) => d.estimate(endpoint).is_some(),
            Policy::Refresh(r) => r.estimate(endpoint).is_some(),
        }
    }
}

/// Everything the fetches share.
#[derive(Debug)]
struct Shared {
    policy: Policy,
    /// Every endpoint the policy knows, in the order first learned.
    endpoints: Vec<String>,
    state: State,
    /// Requests sent: useful (one per fetch that got an answer) and extra (resolves, raced
    /// and hedged duplicates, probes, failed attempts).
    useful: u64,
    extra: u64,
}

impl Shared {
    /// Makes `endpoint` known to the policy (its estimate, if saved, comes with it).
    fn learn(&mut self, endpoints: &[String], now: Instant) {
        let mut changed = false;
        for e in endpoints {
            if !self.endpoints.contains(e) {
                self.endpoints.push(e.clone());
                changed = true;
            }
        }
        if changed {
            let all = self.endpoints.clone();
            self.policy.select().update(&all, now);
        }
    }
}

type Handle = Arc<Mutex<Shared>>;

fn lock(h: &Handle) -> std::sync::MutexGuard<'_, Shared> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

async fn fetch_all(args: Args, urls: Vec<String>) -> anyhow::Result<()> {
    let state_path = if args.no_state || args.policy != "decay" {
        None
    } else {
        args.state.clone().or_else(default_state)
    };
    let state = state_path.as_deref().map(State::load).unwrap_or_default();
    let now = Instant::now();
    let mut endpoints: Vec<String> = state.table.iter().map(|s| s.endpoint.clone()).collect();
    endpoints.dedup();
    let policy = match args.policy.as_str() {
        "refresh" => Policy::Refresh(
            Refresh::new(&endpoints, config::Refresh::default(), now)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        _ => {
            let mut d = Decay::new(&endpoints, config::Decay::default(), now)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            // The time since the table was saved (none if unknown or if the clock went back).
            let gap_ms = match state.saved_at_ms {
                0 => 0,
                at => unix_ms(SystemTime::now()).saturating_sub(at),
            };
            d.import(&aged(&state.table, gap_ms), state.tokens, now);
            Policy::Decay(d)
        }
    };
    let shared: Handle = Arc::new(Mutex::new(Shared {
        policy,
        endpoints,
        state,
        useful: 0,
        extra: 0,
    }));
    let client = client();
    let background: Arc<Mutex<JoinSet<()>>> = Arc::default();
    let many = urls.len() > 1;
    let limit = Arc::new(tokio::sync::Semaphore::new(args.parallel));
    let mut failed = 0;
    let mut results: Vec<(usize, String, Result<Fetched, String>)> = Vec::new();
    // Each round fetches every URL (`--parallel` at once); the next round starts after it.
    for _ in 0..args.repeat {
        let mut fetches = JoinSet::new();
        for (n, url) in urls.iter().cloned().enumerate() {
            let (client, shared, limit, background) = (
                client.clone(),
                shared.clone(),
                limit.clone(),
                background.clone(),
            );
            let resolver = args.resolver.clone();
            let ttl = args.list_ttl;
            fetches.spawn(async move {
                let _permit = limit.acquire_owned().await;
                let r = fetch(
                    &client,
                    &shared,
                    &background,
                    resolver.as_deref(),
                    &url,
                    ttl,
                )
                .await;
                (n, url, r)
            });
        }
        let mut round = Vec::new();
        while let Some(done) = fetches.join_next().await {
            let (n, url, r) = done.context("a fetch panicked")?;
            match &r {
                Ok(f) => eprintln!("{}", f.line(&url)),
                Err(why) => {
                    failed += 1;
                    eprintln!("{url}: failed: {why}");
                }
            }
            round.push((n, url, r));
        }
        results.extend(round);
    }
    // Probes and races still out: their answers are what the next run learns from.
    let mut rest = std::mem::take(&mut *background.lock().unwrap_or_else(|e| e.into_inner()));
    let _ = tokio::time::timeout(FINISH_WAIT, async {
        while rest.join_next().await.is_some() {}
    })
    .await;
    rest.abort_all();
    write_bodies(&args, many, &mut results)?;
    let s = lock(&shared);
    if results.len() > 1 || args.summary {
        let share = if s.useful > 0 {
            100.0 * s.extra as f64 / s.useful as f64
        } else {
            0.0
        };
        eprintln!(
            "{} fetched, {failed} failed; {} extra requests ({share:.1} % of {} useful)",
            results.len() - failed,
            s.extra,
            s.useful
        );
    }
    if let (Some(path), Policy::Decay(d)) = (&state_path, &s.policy) {
        let (table, tokens) = d.export(Instant::now());
        let mut out = State {
            format: STATE_FORMAT.into(),
            table,
            tokens,
            lists: s.state.lists.clone(),
            sites: s.state.sites.clone(),
            rules: s.state.rules.clone(),
            saved_at_ms: unix_ms(SystemTime::now()),
        };
        let now_ms = unix_ms(SystemTime::now());
        out.lists.retain(|_, (_, expires)| *expires > now_ms);
        out.rules.retain(|_, (_, expires)| *expires > now_ms);
        while out.lists.len() > MAX_LISTS {
            let oldest = out
                .lists
                .iter()
                .min_by_key(|(_, (_, e))| *e)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => out.lists.remove(&k),
                None => break,
            };
        }
        if let Err(e) = out.save(path) {
            eprintln!("warning: the latency table was not kept: {e:#}");
        }
    }
    if failed > 0 {
        bail!("{failed} of {} fetches failed", results.len());
    }
    Ok(())
}

/// Writes the bodies: one URL's to `-o` or standard output; several URLs' under `-o DIR`.
fn write_bodies(
    args: &Args,
    many: bool,
    results: &mut [(usize, String, Result<Fetched, String>)],
) -> anyhow::Result<()> {
    // Stable: each URL's last round comes last among its fetches.
    results.sort_by_key(|(n, _, _)| *n);
    if !many {
        let Some((_, _, Ok(f))) = results.last() else {
            return Ok(());
        };
        return match &args.output {
            Some(path) => {
                std::fs::write(path, &f.body).with_context(|| format!("writing {}", path.display()))
            }
            None => std::io::stdout()
                .write_all(&f.body)
                .context("writing to standard output"),
        };
    }
    let Some(dir) = &args.output else {
        return Ok(());
    };
    for (_, url, r) in results.iter() {
        let Ok(f) = r else { continue };
        let uri: Uri = url.parse().context("checked")?;
        let mut path = dir.join(
            uri.authority()
                .map_or("host", |a| a.as_str())
                .replace(':', "_"),
        );
        let p = uri.path().trim_start_matches('/');
        for part in p
            .split('/')
            .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        {
            path.push(part);
        }
        if p.is_empty() || p.ends_with('/') {
            path.push("index");
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &f.body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// One fetch's result.
#[derive(Debug)]
struct Fetched {
    status: StatusCode,
    from: String,
    /// The answering request's time to its head.
    latency: Duration,
    /// The whole fetch: resolve, failed attempts, body.
    whole: Duration,
    attempts: usize,
    raced: usize,
    hedged: bool,
    replicas: usize,
    resolved: bool,
    body: Bytes,
}

impl Fetched {
    fn line(&self, url: &str) -> String {
        let mut notes = Vec::new();
        if self.attempts > 1 {
            notes.push(format!("after {} failed", self.attempts - 1));
        }
        if self.raced > 1 {
            notes.push(format!("raced {}", self.raced));
        }
        if self.hedged {
            notes.push("hedged".to_owned());
        }
        if self.resolved {
            notes.push(format!("{} replica(s) resolved", self.replicas));
        }
        format!(
            "{url}: {} from {} in {:.1} ms (whole {:.1} ms{}{})",
            self.status,
            self.from,
            self.latency.as_secs_f64() * 1e3,
            self.whole.as_secs_f64() * 1e3,
            if notes.is_empty() { "" } else { "; " },
            notes.join(", ")
        )
    }
}

/// `scheme://authority` of a physical URL: the endpoint the selector measures.
fn endpoint_of(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
        .unwrap_or_else(|| url.to_owned())
}

/// Fetches `url` by its replicas; see the module documentation.
async fn fetch(
    client: &HttpClient,
    shared: &Handle,
    background: &Arc<Mutex<JoinSet<()>>>,
    resolver: Option<&str>,
    url: &str,
    ttl: Duration,
) -> Result<Fetched, String> {
    let start = Instant::now();
    let (replicas, resolved) = replicas_of(client, shared, resolver, url, ttl).await?;
    let endpoints: Vec<String> = replicas.iter().map(|r| endpoint_of(r)).collect();
    // The order among this URL's replicas, and whether to race or hedge.
    let (order, race, hedge) = {
        let mut s = lock(shared);
        s.learn(&endpoints, start);
        let policy = &mut s.policy;
        policy.select().requested(start);
        let order: Vec<String> = policy
            .select()
            .order(start)
            .into_iter()
            .filter(|e| endpoints.contains(e))
            .collect();
        let health = policy.select().health(start);
        let live = |e: &String| health.iter().any(|(n, up)| n == e && *up);
        // Nothing measured among the live replicas: race them, the first answer wins.
        let unmeasured: Vec<String> = order.iter().filter(|e| live(e)).cloned().collect();
        let race = if !unmeasured.is_empty() && unmeasured.iter().all(|e| !policy.measured(e)) {
            unmeasured.len()
        } else {
            1
        };
        let hedge = order
            .first()
            .and_then(|first| policy.select().hedge_after(first, start));
        (order, race, hedge)
    };
    // Probes due now run beside this fetch.
    send_probes(shared, background, client);
    let mut attempts = 0;
    let mut tried = Vec::new();
    let mut rest: &[String] = &order;
    if race > 1 {
        let raced: Vec<String> = order[..race].to_vec();
        rest = &order[race..];
        attempts += 1;
        match race_all(client, shared, background, &replicas, &raced).await {
            Ok((from, got)) => {
                return Ok(done(
                    shared, got, from, start, attempts, race, false, &replicas, resolved,
                ))
            }
            Err(why) => tried.push(why),
        }
    }
    for (i, endpoint) in rest.iter().enumerate() {
        let Some(replica) = replicas.iter().find(|r| endpoint_of(r) == *endpoint) else {
            continue;
        };
        attempts += 1;
        if i > 0 || race > 1 {
            lock(shared).extra += 1;
        }
        let hedge_to = if i == 0 && race == 1 {
            hedge.zip(rest.get(1)).and_then(|(after, next)| {
                let other = replicas.iter().find(|r| endpoint_of(r) == *next)?;
                Some((after, next.clone(), other.clone()))
            })
        } else {
            None
        };
        let tried_now = attempt_hedged(client, shared, endpoint, replica, hedge_to).await;
        // What this attempt taught may make probes due (a replica's back-off, an exploration).
        send_probes(shared, background, client);
        match tried_now {
            Ok((from, got, hedged)) => {
                return Ok(done(
                    shared, got, from, start, attempts, 1, hedged, &replicas, resolved,
                ))
            }
            Err(why) => tried.push(format!("{replica}: {why}")),
        }
    }
    // Last, the URL itself (no replica, or every one failed).
    attempts += 1;
    if !replicas.is_empty() {
        lock(shared).extra += 1;
    }
    let (_, got) = attempt(client, url, Duration::from_secs(30), Method::GET).await;
    match got {
        Ok(got) => Ok(done(
            shared,
            got,
            url.to_owned(),
            start,
            attempts,
            1,
            false,
            &replicas,
            resolved,
        )),
        Err(why) => {
            tried.push(format!("{url}: {why}"));
            Err(format!("every replica failed: {}", tried.join("; ")))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn done(
    shared: &Handle,
    got: Got,
    from: String,
    start: Instant,
    attempts: usize,
    raced: usize,
    hedged: bool,
    replicas: &[String],
    resolved: bool,
) -> Fetched {
    lock(shared).useful += 1;
    Fetched {
        status: got.status,
        from,
        latency: got.latency,
        whole: start.elapsed(),
        attempts,
        raced,
        hedged,
        replicas: replicas.len(),
        resolved,
        body: got.body,
    }
}

/// `url`'s replicas: a list learned within `ttl`, or asked of the resolvers in turn (the
/// `--resolver`, the replicas known for the site fastest first, the URL's own server). Whether
/// it was asked comes back too.
async fn replicas_of(
    client: &HttpClient,
    shared: &Handle,
    resolver: Option<&str>,
    url: &str,
    ttl: Duration,
) -> Result<(Vec<String>, bool), String> {
    let now_ms = unix_ms(SystemTime::now());
    let site = url
        .parse::<Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let resolvers = {
        let mut s = lock(shared);
        if let Some((list, expires)) = s.state.lists.get(url) {
            if *expires > now_ms {
                return Ok((list.clone(), false));
            }
        }
        if let Some((rules, expires)) = s.state.rules.get(&site) {
            if *expires > now_ms {
                if let Some(list) = by_rules(rules, &logical_of(url)) {
                    return Ok((list, false));
                }
            }
        }
        let known = s.state.sites.get(&site).cloned().unwrap_or_default();
        let order = s.policy.select().order(Instant::now());
        let mut resolvers: Vec<String> = resolver
            .map(|r| r.trim_end_matches('/').to_owned())
            .into_iter()
            .collect();
        resolvers.extend(order.into_iter().filter(|e| known.contains(e)));
        resolvers.push(format!("http://{site}"));
        let mut seen = Vec::new();
        resolvers.retain(|r| {
            let new = !seen.contains(r);
            seen.push(r.clone());
            new
        });
        resolvers
    };
    let mut why = Vec::new();
    for base in &resolvers {
        lock(shared).extra += 1;
        let started = Instant::now();
        match resolve_with_rules(client, base, url).await {
            Ok((list, rules)) => {
                let mut s = lock(shared);
                if s.endpoints.contains(base) {
                    let latency = started.elapsed();
                    s.policy
                        .select()
                        .record(base, Outcome::Answered { latency }, Instant::now());
                }
                let expires = now_ms.saturating_add(ttl.as_millis() as u64);
                s.state
                    .lists
                    .insert(url.to_owned(), (list.clone(), expires));
                if let Some(rules) = rules {
                    s.state.rules.insert(site.clone(), (rules, expires));
                }
                let seen = s.state.sites.entry(site.clone()).or_default();
                for e in list.iter().map(|r| endpoint_of(r)) {
                    if !seen.contains(&e) && seen.len() < MAX_SITE_REPLICAS {
                        seen.push(e);
                    }
                }
                return Ok((list, true));
            }
            Err(e) => {
                let mut s = lock(shared);
                if s.endpoints.contains(base) {
                    s.policy
                        .select()
                        .record(base, Outcome::ConnectFailed, Instant::now());
                }
                why.push(format!("{base}: {e:#}"));
            }
        }
    }
    // No resolver answered: the URL itself is tried (its server may still serve it).
    eprintln!(
        "{url}: no resolver answered ({}); fetching the URL itself",
        why.join("; ")
    );
    Ok((Vec::new(), true))
}

/// The replicas a cluster member at `base` names for `url` (its `/_slipstream/resolve`); none
/// when `base` is not a cluster member (404).
pub async fn resolve(client: &HttpClient, base: &str, url: &str) -> anyhow::Result<Vec<String>> {
    Ok(resolve_with_rules(client, base, url).await?.0)
}

/// Entries of a resolver's rules at most (a resolver sends far fewer).
const MAX_RULES: usize = 1024;

/// [`resolve`], with the rules the member sends beside the list when a wildcard decides the
/// URL (every URL they cover resolves without asking).
async fn resolve_with_rules(
    client: &HttpClient,
    base: &str,
    url: &str,
) -> anyhow::Result<(Vec<String>, Option<BTreeMap<String, Vec<String>>>)> {
    let query: String = form_urlencoded::byte_serialize(url.as_bytes()).collect();
    let uri: Uri = format!("{base}/_slipstream/resolve?url={query}")
        .parse()
        .context("the resolver's URL")?;
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(uri.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("asking {uri}: no answer in 5 s"))?
        .with_context(|| format!("asking {uri}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading {uri}"))?
        .to_bytes();
    if status == StatusCode::NOT_FOUND {
        // Not a cluster member: the URL is its own only replica.
        return Ok((Vec::new(), None));
    }
    if !status.is_success() {
        bail!(
            "{uri}: {status}: {}",
            String::from_utf8_lossy(&bytes).trim()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{uri}: not JSON"))?;
    let list = v["replicas"]
        .as_array()
        .with_context(|| format!("{uri}: no `replicas` list"))?;
    let list = list
        .iter()
        .map(|r| {
            r.as_str()
                .filter(|s| s.starts_with("http://"))
                .map(str::to_owned)
                .with_context(|| format!("{uri}: `{r}` is not an http:// URL"))
        })
        .collect::<anyhow::Result<Vec<String>>>()?;
    // Rules that do not read as such are ignored: the list alone still answers.
    let rules = v
        .get("rules")
        .and_then(|r| serde_json::from_value::<BTreeMap<String, Vec<String>>>(r.clone()).ok())
        .filter(|r| {
            r.len() <= MAX_RULES
                && r.values()
                    .flatten()
                    .all(|u| u.starts_with("http://") && u.len() <= 8192)
        });
    Ok((list, rules))
}

struct Got {
    status: StatusCode,
    latency: Duration,
    body: Bytes,
}

/// The policy's timeout for `endpoint`.
fn timeout_of(shared: &Handle, endpoint: &str) -> Duration {
    lock(shared)
        .policy
        .select()
        .timeout(endpoint, Instant::now())
        .unwrap_or(Duration::from_secs(10))
}

/// Records `outcome` of an exchange with `endpoint` and sends the probes then due, off the
/// request path.
fn record(
    shared: &Handle,
    background: &Arc<Mutex<JoinSet<()>>>,
    client: &HttpClient,
    endpoint: &str,
    outcome: Outcome,
) {
    lock(shared)
        .policy
        .select()
        .record(endpoint, outcome, Instant::now());
    send_probes(shared, background, client);
}

/// Sends the probes the policy has due (recovery of replicas whose back-off ended,
/// exploration within the budget) in the background; their outcomes are recorded as they come,
/// and the process waits a little for them at its end (what the next run learns from).
fn send_probes(shared: &Handle, background: &Arc<Mutex<JoinSet<()>>>, client: &HttpClient) {
    let probes = {
        let mut s = lock(shared);
        let probes = s.policy.select().probes(Instant::now());
        s.extra += probes.len() as u64;
        probes
    };
    for p in probes {
        let (client, shared) = (client.clone(), shared.clone());
        let target = format!("{}/", p.endpoint);
        background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(async move {
                let timeout = timeout_of(&shared, &p.endpoint);
                let (outcome, _) = attempt(&client, &target, timeout, Method::HEAD).await;
                tracing::debug!(endpoint = %p.endpoint, kind = ?p.kind, ?outcome, "probe");
                lock(&shared)
                    .policy
                    .select()
                    .record(&p.endpoint, outcome, Instant::now());
            });
    }
}

/// Sends the request to every replica of `raced` at once; the first answer wins, the others
/// are recorded as they come (in the background).
async fn race_all(
    client: &HttpClient,
    shared: &Handle,
    background: &Arc<Mutex<JoinSet<()>>>,
    replicas: &[String],
    raced: &[String],
) -> Result<(String, Got), String> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(raced.len());
    lock(shared).extra += raced.len().saturating_sub(1) as u64;
    for endpoint in raced {
        let Some(replica) = replicas.iter().find(|r| endpoint_of(r) == *endpoint) else {
            continue;
        };
        let (client, shared, tx, bg) = (
            client.clone(),
            shared.clone(),
            tx.clone(),
            background.clone(),
        );
        let (endpoint, replica) = (endpoint.clone(), replica.clone());
        background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(async move {
                let timeout = timeout_of(&shared, &endpoint);
                lock(&shared)
                    .policy
                    .select()
                    .started(&endpoint, Instant::now());
                let (outcome, got) = attempt(&client, &replica, timeout, Method::GET).await;
                record(&shared, &bg, &client, &endpoint, outcome);
                let _ = tx.send((replica, got)).await;
            });
    }
    drop(tx);
    let mut why = Vec::new();
    while let Some((replica, got)) = rx.recv().await {
        match got {
            Ok(got) => return Ok((replica, got)),
            Err(e) => why.push(format!("{replica}: {e}")),
        }
    }
    Err(why.join("; "))
}

/// One request to `replica` (of `endpoint`); with `hedge`, the same request to a second
/// replica once the first has not answered within its delay, the first answer winning.
async fn attempt_hedged(
    client: &HttpClient,
    shared: &Handle,
    endpoint: &str,
    replica: &str,
    hedge: Option<(Duration, String, String)>,
) -> Result<(String, Got, bool), String> {
    let timeout = timeout_of(shared, endpoint);
    lock(shared)
        .policy
        .select()
        .started(endpoint, Instant::now());
    let first = attempt(client, replica, timeout, Method::GET);
    let Some((after, other_endpoint, other)) = hedge else {
        let (outcome, got) = first.await;
        lock(shared)
            .policy
            .select()
            .record(endpoint, outcome, Instant::now());
        return got.map(|g| (replica.to_owned(), g, false));
    };
    tokio::pin!(first);
    tokio::select! {
        (outcome, got) = &mut first => {
            lock(shared).policy.select().record(endpoint, outcome, Instant::now());
            return got.map(|g| (replica.to_owned(), g, false));
        }
        () = tokio::time::sleep(after) => {}
    }
    // The first is late: the second is sent too, and paid for.
    {
        let mut s = lock(shared);
        s.policy.select().hedged(&other_endpoint, Instant::now());
        s.policy.select().started(&other_endpoint, Instant::now());
        s.extra += 1;
    }
    let timeout2 = timeout_of(shared, &other_endpoint);
    let second = attempt(client, &other, timeout2, Method::GET);
    tokio::pin!(second);
    tokio::select! {
        (outcome, got) = &mut first => {
            {
                let mut s = lock(shared);
                s.policy.select().record(endpoint, outcome, Instant::now());
                if got.is_ok() {
                    s.policy.select().record(&other_endpoint, Outcome::Cancelled, Instant::now());
                }
            }
            match got {
                Ok(g) => Ok((replica.to_owned(), g, true)),
                Err(e) => {
                    let (outcome, got) = second.await;
                    lock(shared).policy.select().record(&other_endpoint, outcome, Instant::now());
                    got.map(|g| (other.clone(), g, true)).map_err(|e2| format!("{e}; {other}: {e2}"))
                }
            }
        }
        (outcome, got) = &mut second => {
            lock(shared).policy.select().record(&other_endpoint, outcome, Instant::now());
            match got {
                Ok(g) => {
                    lock(shared).policy.select().record(endpoint, Outcome::Cancelled, Instant::now());
                    Ok((other.clone(), g, true))
                }
                // The hedge failed first: the first request may still answer.
                Err(e2) => {
                    let (outcome, got) = first.await;
                    lock(shared).policy.select().record(endpoint, outcome, Instant::now());
                    got.map(|g| (replica.to_owned(), g, true))
                        .map_err(|e| format!("{e}; {other}: {e2}"))
                }
            }
        }
    }
}

/// One request, timed out after `timeout` without a response head; a 5xx counts as broken.
async fn attempt(
    client: &HttpClient,
    url: &str,
    timeout: Duration,
    method: Method,
) -> (Outcome, Result<Got, String>) {
    let uri: Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => return (Outcome::Broken, Err(format!("not a URL: {e}"))),
    };
    let request = match Request::builder()
        .method(method)
        .uri(uri)
        .body(Empty::new())
    {
        Ok(r) => r,
        Err(e) => return (Outcome::Broken, Err(e.to_string())),
    };
    let start = Instant::now();
    let response = match tokio::time::timeout(timeout, client.request(request)).await {
        Err(_) => return (Outcome::TimedOut, Err(format!("no answer in {timeout:?}"))),
        Ok(Err(e)) if e.is_connect() => {
            return (Outcome::ConnectFailed, Err(format!("cannot connect: {e}")))
        }
        Ok(Err(e)) => return (Outcome::Broken, Err(e.to_string())),
        Ok(Ok(r)) => r,
    };
    let latency = start.elapsed();
    let status = response.status();
    if status.is_server_error() {
        return (Outcome::Broken, Err(format!("answered {status}")));
    }
    match response.into_body().collect().await {
        Ok(body) => (
            Outcome::Answered { latency },
            Ok(Got {
                status,
                latency,
                body: body.to_bytes(),
            }),
        ),
        Err(e) => (Outcome::Broken, Err(format!("body broke: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_table_ages_by_the_time_between_runs() {
        let now = Instant::now();
        let mut d = Decay::new(&["a".into(), "b".into()], config::Decay::default(), now).unwrap();
        d.record("a", Outcome::ConnectFailed, now);
        d.record(
            "b",
            Outcome::Answered {
                latency: Duration::from_millis(20),
            },
            now,
        );
        let (saved, tokens) = d.export(now);
        // 1.5 s later, the next run: a's 1 s back-off is over, its recovery probe due.
        let later = Instant::now();
        let mut next =
            Decay::new(&["a".into(), "b".into()], config::Decay::default(), later).unwrap();
        next.import(&aged(&saved, 1500), tokens, later);
        let probes = next.probes(later);
        assert!(probes.iter().any(|p| p.endpoint == "a"), "{probes:?}");
        let b = aged(&saved, 1500)
            .into_iter()
            .find(|s| s.endpoint == "b")
            .unwrap();
        assert!(b.age_ms >= 1500, "{b:?}");
        // Without the gap, the back-off would start again from the save.
        let mut stale =
            Decay::new(&["a".into(), "b".into()], config::Decay::default(), later).unwrap();
        stale.import(&saved, tokens, later);
        assert!(stale.probes(later).iter().all(|p| p.endpoint != "a"));
    }

    #[test]
    fn rules_resolve_exact_keys_then_the_longest_wildcard() {
        let rules: BTreeMap<String, Vec<String>> = [
            ("/*", vec!["http://a/*", "http://b/site/*"]),
            ("/img/*", vec!["http://c/i/*"]),
            ("/img/logo.png", vec![]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
        .collect();
        assert_eq!(
            by_rules(&rules, "/x/y?q=1"),
            Some(vec![
                "http://a/x/y?q=1".to_owned(),
                "http://b/site/x/y?q=1".to_owned()
            ])
        );
        assert_eq!(
            by_rules(&rules, "/img/a.png"),
            Some(vec!["http://c/i/a.png".to_owned()])
        );
        // An exact key with no replica: fetched as it is, not by the wider rule.
        assert_eq!(by_rules(&rules, "/img/logo.png"), Some(vec![]));
        let narrow: BTreeMap<String, Vec<String>> =
            [("/img/*".to_owned(), vec!["http://c/*".to_owned()])].into();
        assert_eq!(by_rules(&narrow, "/other"), None);
        assert_eq!(logical_of("http://h:1/a/b?c"), "/a/b?c");
    }
}
