//! Pilot 61's diagnostic (not in the product): lock waits counted by the waiter's priority.
//! Added as `crates/slipstream-node/src/contention.rs` (`pub mod contention;` in its lib.rs),
//! with `pilot61.sh`'s edits routing the origin cache's and the NPS model's and control's
//! locks through `lock`, and the prefetch status showing `json()` as `lock_waits`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

thread_local! {
    static LOW: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a low-priority one (called by the idle listener's threads).
pub fn mark_low() {
    LOW.with(|l| l.set(true));
}

/// One lock's acquisitions, contended acquisitions and time waited, by the waiter's priority.
#[derive(Debug, Default)]
pub struct Site {
    acquired: [AtomicU64; 2],
    waits: [AtomicU64; 2],
    wait_ns: [AtomicU64; 2],
}

impl Site {
    pub const fn new() -> Site {
        Site {
            acquired: [AtomicU64::new(0), AtomicU64::new(0)],
            waits: [AtomicU64::new(0), AtomicU64::new(0)],
            wait_ns: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let g = |a: &[AtomicU64; 2], i: usize| a[i].load(Ordering::Relaxed);
        serde_json::json!({
            "normal": {"acquired": g(&self.acquired, 0), "waits": g(&self.waits, 0), "wait_us": g(&self.wait_ns, 0) / 1000},
            "low": {"acquired": g(&self.acquired, 1), "waits": g(&self.waits, 1), "wait_us": g(&self.wait_ns, 1) / 1000},
        })
    }
}

pub static ORIGIN_CACHE: Site = Site::new();
pub static NPS_MODEL: Site = Site::new();
pub static NPS_CONTROL: Site = Site::new();

/// Locks `m`, counting a wait at `site` when `try_lock` fails.
pub fn lock<'a, T>(m: &'a Mutex<T>, site: &Site) -> MutexGuard<'a, T> {
    let i = usize::from(LOW.with(|l| l.get()));
    site.acquired[i].fetch_add(1, Ordering::Relaxed);
    if let Some(g) = m.try_lock() {
        return g;
    }
    let t = Instant::now();
    let g = m.lock();
    site.waits[i].fetch_add(1, Ordering::Relaxed);
    site.wait_ns[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    g
}

pub fn json() -> serde_json::Value {
    serde_json::json!({
        "origin_cache": ORIGIN_CACHE.json(),
        "nps_model": NPS_MODEL.json(),
        "nps_control": NPS_CONTROL.json(),
    })
}
