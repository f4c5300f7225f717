//! The probes selection policies ask for ([`slipstream_select::Select::probes`]): a task on the
//! proxy's runtime asks both policies every [`TICK`] and sends each due probe, a HEAD, off the
//! request path ([`Upstreams::probe`]), so a failed upstream comes back into rotation once it
//! answers again.
//!
//! Bounds: at most one probe per endpoint is in flight (a probe due while the last one to the
//! same endpoint has not ended is dropped; the policy has counted it as sent and asks again
//! later), each ends within the upstream timeout, and the task holds the upstreams only
//! through a [`Weak`], so it ends at its next tick after the proxy is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::upstream::Upstreams;

/// How often the policies are asked for due probes: the resolution of their probe times.
pub const TICK: Duration = Duration::from_secs(1);

/// Starts the probe task on the current tokio runtime; without one (a proxy built outside a
/// runtime), no probes are sent.
pub fn spawn(upstreams: &Arc<Upstreams>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::debug!("no tokio runtime: selection policies' probes are not sent");
        return;
    };
    let weak = Arc::downgrade(upstreams);
    runtime.spawn(run(weak));
}

async fn run(weak: Weak<Upstreams>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(upstreams) = weak.upgrade() else {
            return;
        };
        for (kind, endpoint) in upstreams.due_probes() {
            if !upstreams.claim_probe(kind, &endpoint) {
                tracing::debug!(upstream = %endpoint, "probe skipped: one is in flight");
                continue;
            }
            let upstreams = upstreams.clone();
            tokio::spawn(async move { upstreams.probe(kind, &endpoint).await });
        }
    }
}
