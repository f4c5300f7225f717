//! The built-in placement policy (001 §5.2's example of what the replica API's hooks are for,
//! and §1's "cost-conscious scalability"): a node that serves a resource hotly copies it to the
//! least-loaded live peer that has no replica of it, and a node retires the stored replicas
//! that have gone cold, never the last live one.
//!
//! - [`Load`], a phase, counts the requests the node answers, per path.
//! - Every `interval` the node publishes its load (`node:load`, requests per second) by gossip,
//!   then [`decide`] — no I/O — chooses the copies and retirements from the rates of the last
//!   interval, the directory and the peers' loads; the task carries them out through the peers'
//!   replica API with the cluster's token.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{request, response, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use slipstream_node::{Ctx, Phase};

use crate::api::{stored_physical, Counters};
use crate::cluster::{Cluster, View};
use crate::directory::Pattern;

/// The chitchat key holding a node's load, in requests per second.
pub const LOAD_KEY: &str = "node:load";

/// The most distinct paths counted per interval (past it, new paths are not counted).
const MAX_PATHS: usize = 10_000;

/// The policy's settings (`[cluster.placement]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How often rates are measured and decisions made.
    pub interval: Duration,
    /// A resource requested at least this often (per second, on this node) is hot.
    pub hot_per_s: f64,
    /// A stored replica requested less often than this (per second) is cold.
    pub cold_per_s: f64,
    /// Intervals in a row a replica must be cold before it is retired.
    pub cold_intervals: u32,
    /// A hot resource is copied until it has this many live replicas.
    pub max_replicas: usize,
}

/// Counts the requests the node answers with 200, per path, between two ticks. Clones share
/// the counts (one is the phase, one the policy's task).
#[derive(Debug, Default, Clone)]
pub struct Load {
    counts: Arc<Mutex<HashMap<String, u64>>>,
}

#[derive(Debug, Clone)]
struct Path(String);

impl Load {
    /// Takes the counts since the last call.
    pub fn take(&self) -> HashMap<String, u64> {
        std::mem::take(&mut *self.counts.lock())
    }
}

#[async_trait]
impl Phase for Load {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<http::Response<slipstream_http::Body>> {
        if req.method == Method::GET || req.method == Method::HEAD {
            ctx.extensions.insert(Path(req.uri.path().to_owned()));
        }
        None
    }

    fn logging(&self, ctx: &Ctx, res: &response::Parts) {
        if res.status != StatusCode::OK {
            return;
        }
        if let Some(Path(path)) = ctx.extensions.get::<Path>() {
            let mut counts = self.counts.lock();
            if counts.len() < MAX_PATHS || counts.contains_key(path) {
                *counts.entry(path.clone()).or_default() += 1;
            }
        }
    }
}

/// What one node decides in one interval.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// (logical URL, peer name): copy the resource to the peer.
    pub copy: Vec<(String, String)>,
    /// Logical URLs of this node's stored replicas to retire.
    pub retire: Vec<String>,
}

/// The per-URL cold streaks a node keeps between intervals.
pub type Streaks = BTreeMap<String, u32>;

/// Decides one interval's copies and retirements for node `me`, without I/O.
///
/// `served` is this node's requests per URL in the interval (from [`Load`] and the replica
/// API's counters), `stored` the URLs of its replicas stored through the API, `streaks` the
/// cold streaks of those (updated here).
pub fn decide(
    me: &str,
    settings: &Settings,
    view: &View,
    served: &HashMap<String, u64>,
    stored: &[String],
    streaks: &mut Streaks,
) -> Decision {
    let secs = settings.interval.as_secs_f64().max(1e-3);
    let mut decision = Decision::default();
    // Peers that are alive and say how loaded they are, least loaded first.
    let mut peers: Vec<(&str, f64)> = view
        .nodes
        .iter()
        .filter(|(name, info)| name.as_str() != me && info.live && info.advertise.is_some())
        .filter_map(|(name, info)| info.load.map(|l| (name.as_str(), l)))
        .collect();
    peers.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
    let live = |node: &str| view.nodes.get(node).is_some_and(|n| n.live);
    let mut hot: Vec<(&String, f64)> = served
        .iter()
        .map(|(url, n)| (url, *n as f64 / secs))
        .filter(|(url, rate)| {
            *rate >= settings.hot_per_s && !url.starts_with(slipstream_node::CONTROL_PREFIX)
        })
        .collect();
    hot.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    for (url, _) in hot {
        let holders = view.directory.holders(url, live);
        if !holders.iter().any(|h| h == me) || holders.len() >= settings.max_replicas {
            continue;
        }
        if let Some((peer, _)) = peers.iter().find(|(p, _)| !holders.iter().any(|h| h == p)) {
            decision.copy.push((url.clone(), (*peer).to_owned()));
        }
    }
    streaks.retain(|url, _| stored.contains(url));
    for url in stored {
        let rate = served.get(url).copied().unwrap_or(0) as f64 / secs;
        let streak = streaks.entry(url.clone()).or_default();
        if rate >= settings.cold_per_s {
            *streak = 0;
            continue;
        }
        *streak += 1;
        if *streak >= settings.cold_intervals && view.directory.holders(url, live).len() > 1 {
            decision.retire.push(url.clone());
        }
    }
    decision
}

/// Runs the policy for `cluster` until the task is dropped.
pub async fn run(
    cluster: Arc<Cluster>,
    settings: Settings,
    load: Load,
    counters: Arc<Counters>,
    token: String,
) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut streaks = Streaks::new();
    let mut last_stored: BTreeMap<String, crate::api::Served> = BTreeMap::new();
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let mut served = load.take();
        // Stored replicas are served by the replica API: count their requests too, under
        // their logical URL.
        let now_stored = counters.snapshot();
        for (url, s) in &now_stored {
            let before = last_stored.get(url).map_or(0, |b| b.requests);
            *served.entry(url.clone()).or_default() += s.requests.saturating_sub(before);
        }
        last_stored = now_stored;
        let total: u64 = served.values().sum();
        cluster
            .set_own_key(
                LOAD_KEY,
                &format!("{:.3}", total as f64 / settings.interval.as_secs_f64()),
            )
            .await;
        let me = cluster.settings().name.clone();
        let stored = cluster.stored_urls();
        let view = cluster.view();
        let decision = decide(&me, &settings, &view, &served, &stored, &mut streaks);
        for (url, peer) in decision.copy {
            if let Err(e) = copy(&client, &cluster, &view, &url, &peer, &token).await {
                tracing::warn!(url, peer, "placement: copying a hot resource failed: {e}");
            } else {
                tracing::info!(url, peer, "placement: copied a hot resource");
            }
        }
        for url in decision.retire {
            match cluster.delete(Pattern::Exact(url.clone())).await {
                Ok(_) => {
                    counters.forget(&url);
                    streaks.remove(&url);
                    tracing::info!(url, "placement: retired a cold replica");
                }
                Err(e) => tracing::warn!(url, "placement: retiring a cold replica failed: {e}"),
            }
        }
    }
}

/// Copies `url`'s content (this node's stored copy, or its document root's file) to `peer`.
async fn copy(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    cluster: &Cluster,
    view: &View,
    url: &str,
    peer: &str,
    token: &str,
) -> Result<(), String> {
    let (content_type, bytes) = match cluster.content(url).await.map_err(|e| e.to_string())? {
        Some(c) => (c.content_type, Bytes::from(c.bytes)),
        None => {
            let base = cluster.advertise().ok_or("this node is starting")?;
            let uri = format!("{base}{url}");
            let res = client
                .get(uri.parse().map_err(|e| format!("{uri}: {e}"))?)
                .await
                .map_err(|e| format!("{uri}: {e}"))?;
            if res.status() != StatusCode::OK {
                return Err(format!("{uri}: {}", res.status()));
            }
            let ct = res
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/octet-stream")
                .to_owned();
            let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
            (ct, body.to_bytes())
        }
    };
    let base = view
        .nodes
        .get(peer)
        .and_then(|n| n.advertise.clone())
        .ok_or("the peer's address is unknown")?;
    let target = stored_physical(&base, url);
    let req = Request::builder()
        .method(Method::POST)
        .uri(&target)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(bytes))
        .map_err(|e| e.to_string())?;
    let res = client
        .request(req)
        .await
        .map_err(|e| format!("{target}: {e}"))?;
    match res.status() {
        // Created, or the peer already holds one (another node copied it first).
        StatusCode::CREATED | StatusCode::CONFLICT => Ok(()),
        s => Err(format!("{target}: {s}")),
    }
}

#[cfg(test)]
mod tests;
