//! The phase that watches the demand stream: every successful GET that is not a prefetch
//! trains the predictor, and demand and prefetch responses are counted in bytes.
//!
//! Training happens off the request path: the phase queues (client, URL) on a bounded channel
//! and a task learns them in batches under the model's lock; when the queue is full a request
//! is not learnt (counted as `unqueued` on the status), never waited for.
//!
//! A request is a prefetch when it says so (`Sec-Purpose: prefetch`, what browsers send for
//! Speculation Rules and `<link rel=prefetch>`; the older `Purpose: prefetch`) or arrived
//! through the prefetch listener ([`ViaPrefetchListener`]). Clients are told apart by address
//! and user agent, which is all a server sees without cookies.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::{request, response, Method, Response};
use slipstream_http::Body;
use slipstream_node::{Ctx, Phase};
use slipstream_prefetch::sessions::is_embedded;
use tokio::sync::mpsc;

use crate::{Nps, PROBE_HEADER};

/// Requests queued for training at most.
pub const QUEUE: usize = 4096;

/// A request extension set by a listener that serves prefetches only.
#[derive(Debug, Clone, Copy)]
pub struct ViaPrefetchListener;

/// The demand phase. Register it on the origin; [`Demand::new`] also starts the learner task.
#[derive(Debug, Clone)]
pub struct Demand {
    nps: Arc<Nps>,
    queue: mpsc::Sender<(String, String)>,
}

/// What the request filter notes for logging.
#[derive(Debug, Clone)]
struct Seen {
    /// Training key and URL, for a demand GET.
    learn: Option<(String, String)>,
    prefetch: bool,
    probe: bool,
}

/// Whether a request says it is a prefetch.
pub fn is_prefetch(req: &request::Parts) -> bool {
    let says = |name: &str| {
        req.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(';')
                    .any(|t| t.trim().eq_ignore_ascii_case("prefetch"))
            })
    };
    req.extensions.get::<ViaPrefetchListener>().is_some() || says("sec-purpose") || says("purpose")
}

impl Demand {
    /// The phase, and the task that trains `nps`'s model from it (on the current runtime).
    pub fn new(nps: Arc<Nps>) -> Demand {
        let (queue, mut rx) = mpsc::channel::<(String, String)>(QUEUE);
        let model = nps.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(256);
            while rx.recv_many(&mut batch, 256).await > 0 {
                let mut m = model.model().lock();
                for (client, url) in batch.drain(..) {
                    let page = !is_embedded(&url);
                    m.learn(&client, &url, page);
                }
            }
        });
        Demand { nps, queue }
    }
}

#[async_trait]
impl Phase for Demand {
    async fn request_filter(
        &self,
        ctx: &mut Ctx,
        req: &mut request::Parts,
    ) -> Option<Response<Body>> {
        let probe = req.headers.contains_key(PROBE_HEADER);
        let prefetch = is_prefetch(req);
        let learn = (req.method == Method::GET && !prefetch && !probe).then(|| {
            let ua = req
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let url = req
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
            (format!("{} {ua}", ctx.peer.ip()), url)
        });
        ctx.extensions.insert(Seen {
            learn,
            prefetch,
            probe,
        });
        None
    }

    fn logging(&self, ctx: &Ctx, res: &response::Parts) {
        let Some(seen) = ctx.extensions.get::<Seen>() else {
            return;
        };
        if seen.probe || !res.status.is_success() {
            return;
        }
        let bytes = res
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if seen.prefetch {
            self.nps.prefetch.add(bytes);
            return;
        }
        self.nps.demand.add(bytes);
        if let Some(learn) = &seen.learn {
            if self.queue.try_send(learn.clone()).is_err() {
                self.nps.unlearnt.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Trains `nps`'s model from a Common Log Format log (the paper's prototype trained offline
/// from a day's log, §7): its successful GETs in order, clients by address. Malformed lines
/// are passed over and counted; returns (requests learnt, lines passed over).
pub fn train_from_log(nps: &Nps, path: &std::path::Path) -> Result<(usize, u64), String> {
    let trace = slipstream_workload::trace::read_path_lenient(path)
        .map_err(|e| format!("cannot train from {}: {e}", path.display()))?;
    if trace.clients.len() != trace.requests.len() {
        return Err(format!(
            "cannot train from {}: it names no clients (a Common Log Format log is needed)",
            path.display()
        ));
    }
    let mut m = nps.model().lock();
    for (req, client) in trace.requests.iter().zip(&trace.clients) {
        m.learn(client, &req.key, !is_embedded(&req.key));
    }
    Ok((trace.requests.len(), trace.malformed))
}
