//! Trace replay through the cache engine without a network: the fast path for policy studies
//! (`slipstream cachesim`, paper 002 Figs. 7, 9–11).

use crate::{Access, Cache, Config};

/// Outcome of replaying one trace through one cache configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The configuration replayed.
    pub config: Config,
    /// Requests replayed.
    pub requests: u64,
    /// Bytes requested in total.
    pub bytes_requested: u64,
    /// Requests answered wholly from the cache.
    pub complete_hits: u64,
    /// Requests answered in part (first chunk) from the cache.
    pub incomplete_hits: u64,
    /// Bytes answered from the cache: whole objects for complete hits, the chunk for
    /// incomplete hits (002 §5.2: "number of bytes cached / number of bytes requested").
    pub bytes_hit: u64,
    /// The cache's own counters at the end.
    pub stats: crate::Stats,
}

impl Outcome {
    /// Fraction of requests answered at least in part from the cache.
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.complete_hits + self.incomplete_hits, self.requests)
    }

    /// Fraction of requests answered wholly from the cache.
    pub fn complete_hit_ratio(&self) -> f64 {
        ratio(self.complete_hits, self.requests)
    }

    /// Paper 002's byte hit ratio (BHR), as a fraction.
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.bytes_hit, self.bytes_requested)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Replays `(key, size_bytes)` requests through a fresh cache built from `config`.
///
/// A request whose size differs from the cached object's is treated as a changed object: the
/// entry is invalidated and the request counts as a miss, as the origin server does.
pub fn replay<'a, I>(config: Config, requests: I) -> Outcome
where
    I: IntoIterator<Item = (&'a str, u64)>,
{
    // The value is the object's size: enough to detect a changed object.
    let mut cache: Cache<String, u64> = Cache::new(config);
    let mut out = Outcome {
        config,
        requests: 0,
        bytes_requested: 0,
        complete_hits: 0,
        incomplete_hits: 0,
        bytes_hit: 0,
        stats: Default::default(),
    };
    for (key, size) in requests {
        out.requests += 1;
        out.bytes_requested += size;
        match cache.access(key) {
            Access::Hit { value, stored, .. } if value == size => {
                if stored.complete {
                    out.complete_hits += 1;
                    out.bytes_hit += size;
                } else {
                    out.incomplete_hits += 1;
                    out.bytes_hit += stored.bytes.min(size);
                }
            }
            Access::Hit { .. } => {
                cache.invalidate(key);
                cache.admit(key, size, size);
            }
            Access::Miss => {
                cache.admit(key, size, size);
            }
        }
    }
    out.stats = cache.stats();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    #[test]
    fn adaptive_gets_bytes_from_a_file_larger_than_the_cache() {
        // 002 Fig. 11: a popular file larger than the whole cache. `total` and `small` never
        // cache it; `adaptive` keeps its first chunk.
        let trace: Vec<(&str, u64)> = (0..100).map(|_| ("/big", 10_000)).collect();
        let bhr = |p: &str| {
            replay(
                Config::new(1000, p.parse().expect("policy")),
                trace.iter().copied(),
            )
            .byte_hit_ratio()
        };
        assert_eq!(bhr("total"), 0.0);
        assert_eq!(bhr("small"), 0.0);
        // 99 hits of a 250-byte chunk out of 100 × 10,000 bytes.
        assert!((bhr("adaptive") - 99.0 * 250.0 / 1_000_000.0).abs() < 1e-12);
        let _ = Policy::ADAPTIVE;
    }

    #[test]
    fn changed_size_is_a_miss() {
        let trace = [("/a", 100), ("/a", 100), ("/a", 120), ("/a", 120)];
        let out = replay(Config::new(1000, Policy::ADAPTIVE), trace);
        assert_eq!(out.complete_hits, 2);
        assert_eq!(out.bytes_hit, 220);
    }
}
