//! The hit stage with real caches (paper 003's first stage done as WebTraff does it): each
//! request goes to the child proxy's cache, then the parent's, then the origin, and the level
//! that has the object serves the transfer. Both caches are `slipstream-cache` engines, the
//! same code the proxy runs, with their own sizes and policies.
//!
//! A miss is stored on the way back at every level that admits it (with a size threshold,
//! paper 003's last experiment: the child keeps only objects up to the threshold and the
//! parent only larger ones). Only a complete hit serves a transfer: a level holding just an
//! object's first chunk (002's adaptive level) passes the request up, as paper 003 has no
//! partial transfers.

use serde::{Deserialize, Serialize};
use slipstream_cache::{Access, Cache, Config, Policy};
use slipstream_workload::Request;

/// One level's cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Replacement and level rule.
    pub policy: Policy,
}

/// Hit ratios achieved over the measured requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Achieved {
    /// Share of requests served by the child (HR1).
    pub child_hit_ratio: f64,
    /// Share served by the parent (HR2, as a share of all requests, as paper 003 counts it).
    pub parent_hit_ratio: f64,
    /// Share of requested bytes served by the child.
    pub child_byte_hit_ratio: f64,
    /// Share of requested bytes served by the parent.
    pub parent_byte_hit_ratio: f64,
}

/// Whether `key` is wholly cached (and records the access).
fn complete_hit(cache: &mut Cache<String, u64>, key: &str) -> (bool, bool) {
    match cache.access(key) {
        Access::Hit { stored, .. } => (stored.complete, true),
        Access::Miss => (false, false),
    }
}

/// The serving level of every request (1 child, 2 parent, 3 origin), and the hit ratios over
/// the requests from `measured_from` on (the earlier ones warm the caches).
pub fn assign(
    requests: &[Request],
    child: Level,
    parent: Level,
    threshold: Option<u64>,
    measured_from: usize,
) -> (Vec<u8>, Achieved) {
    let mut caches =
        [child, parent].map(|l| Cache::<String, u64>::new(Config::new(l.capacity_bytes, l.policy)));
    let keeps = |level: usize, size: u64| match threshold {
        None => true,
        Some(t) if level == 0 => size <= t,
        Some(t) => size > t,
    };
    let mut sources = Vec::with_capacity(requests.len());
    let (mut hits, mut bytes) = ([0u64; 2], [0u64; 2]);
    let (mut n, mut total_bytes) = (0u64, 0u64);
    for (i, r) in requests.iter().enumerate() {
        let mut src = 3u8;
        for (level, cache) in caches.iter_mut().enumerate() {
            let (hit, present) = complete_hit(cache, &r.key);
            if hit {
                src = level as u8 + 1;
                break;
            }
            if !present && keeps(level, r.size_bytes) {
                cache.admit(&r.key, r.size_bytes, r.size_bytes);
            }
        }
        if i >= measured_from {
            n += 1;
            total_bytes += r.size_bytes;
            if src < 3 {
                hits[usize::from(src) - 1] += 1;
                bytes[usize::from(src) - 1] += r.size_bytes;
            }
        }
        sources.push(src);
    }
    let share = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    (
        sources,
        Achieved {
            child_hit_ratio: share(hits[0], n),
            parent_hit_ratio: share(hits[1], n),
            child_byte_hit_ratio: share(bytes[0], total_bytes),
            parent_byte_hit_ratio: share(bytes[1], total_bytes),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, size: u64) -> Request {
        Request {
            time_s: 0.0,
            key: key.into(),
            size_bytes: size,
        }
    }

    fn lru(bytes: u64) -> Level {
        Level {
            capacity_bytes: bytes,
            policy: "lru".parse().expect("policy"),
        }
    }

    #[test]
    fn misses_fill_both_levels_and_repeats_hit_the_child() {
        let reqs = [req("/a", 1000), req("/a", 1000), req("/b", 1000)];
        let (src, _) = assign(&reqs, lru(10_000), lru(100_000), None, 0);
        assert_eq!(src, vec![3, 1, 3]);
    }

    #[test]
    fn what_the_child_cannot_hold_the_parent_serves() {
        // The child is too small for /a; the parent keeps it.
        let reqs = [req("/a", 1000), req("/b", 100), req("/a", 1000)];
        let (src, achieved) = assign(&reqs, lru(500), lru(100_000), None, 2);
        assert_eq!(src, vec![3, 3, 2]);
        assert_eq!(achieved.parent_hit_ratio, 1.0);
        assert_eq!(achieved.child_hit_ratio, 0.0);
    }

    #[test]
    fn size_threshold_places_small_objects_at_the_child_and_large_at_the_parent() {
        let reqs = [
            req("/small", 4000),
            req("/large", 20_000),
            req("/small", 4000),
            req("/large", 20_000),
        ];
        let (src, achieved) = assign(&reqs, lru(1 << 20), lru(1 << 20), Some(8192), 2);
        assert_eq!(src, vec![3, 3, 1, 2]);
        assert_eq!(achieved.child_hit_ratio, 0.5);
        assert!((achieved.parent_byte_hit_ratio - 20_000.0 / 24_000.0).abs() < 1e-12);
    }
}
