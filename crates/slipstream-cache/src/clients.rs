//! Per-client caches polluted by prefetching services: the simulation behind paper 000 §5,
//! Fig. 7 (`slipstream cachesim clients`).
//!
//! Every client has its own cache (a browser cache, [`Policy`] LRU by default). Demand requests
//! name a client, a service (a web site) and an object. Some services prefetch: after each
//! demand request to one of them, the client stores `k` bytes of dummy prefetch data per demand
//! byte, as objects that are never requested again. The question is how much that pollution
//! costs the demand hit ratio of the services that do *not* prefetch.
//!
//! No I/O, no clock, no randomness: the caller hands in requests with interned ids and says which
//! services prefetch ([`choose_prefetching`] picks a deterministic fraction by name).

use crate::{Access, Cache, Config, Level, Policy, Replacement};

/// One demand request, with ids interned by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The client, a dense index (`0..clients`).
    pub client: u32,
    /// The service, a dense index into the prefetching table (`0..services`).
    pub service: u32,
    /// The object, unique across services (the same URL on two services is two objects).
    pub object: u64,
    /// The response size in bytes.
    pub size_bytes: u64,
}

/// One run's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    /// Bytes each client's cache may hold.
    pub capacity_bytes: u64,
    /// The replacement policy of every client cache; the paper's browsers used LRU.
    pub policy: Policy,
    /// The paper's x axis: bytes of dummy prefetch data stored per demand byte, after each demand
    /// request to a prefetching service. Finite and at least 0.
    pub prefetch_per_demand: f64,
    /// Bound on the object headers one client cache keeps (cached or recently evicted); see
    /// [`Config::max_tracked`]. LRU ignores frequencies, so the bound changes no result.
    pub max_tracked_per_client: usize,
}

impl Setup {
    /// An LRU cache of `capacity_bytes` per client and `k` prefetch bytes per demand byte.
    pub fn lru(capacity_bytes: u64, k: f64) -> Setup {
        Setup {
            capacity_bytes,
            policy: Policy {
                level: Level::Total,
                replacement: Replacement::Lru,
            },
            prefetch_per_demand: k,
            max_tracked_per_client: 1 << 16,
        }
    }

    /// The cache configuration of every client: no free list, since a browser has none and an
    /// evicted object revived from it would be a hit the paper's caches could not have.
    pub fn config(&self) -> Config {
        let mut config = Config::new(self.capacity_bytes, self.policy);
        config.free_list_flush_every = 0;
        config.max_tracked = self.max_tracked_per_client.max(1);
        config
    }
}

/// Why a [`Setup`] cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetupError {
    /// `k` is negative, infinite or NaN.
    #[error("prefetch bytes per demand byte must be a finite number ≥ 0, not {0}")]
    PrefetchRatio(f64),
    /// A request names a service beyond the prefetching table.
    #[error("request names service {service}, but only {services} services are known")]
    UnknownService {
        /// The service id in the request.
        service: u32,
        /// The length of the prefetching table.
        services: usize,
    },
}

/// Demand counts of one group of requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Demand requests.
    pub requests: u64,
    /// Requests answered from the client's cache.
    pub hits: u64,
    /// Bytes requested.
    pub bytes_requested: u64,
    /// Bytes answered from the client's cache.
    pub bytes_hit: u64,
}

impl Tally {
    /// Fraction of requests that hit.
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.requests)
    }

    /// Fraction of bytes that hit.
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.bytes_hit, self.bytes_requested)
    }

    /// The sum of two tallies.
    pub fn plus(&self, other: &Tally) -> Tally {
        Tally {
            requests: self.requests + other.requests,
            hits: self.hits + other.hits,
            bytes_requested: self.bytes_requested + other.bytes_requested,
            bytes_hit: self.bytes_hit + other.bytes_hit,
        }
    }

    fn count(&mut self, size_bytes: u64, hit: bool) {
        self.requests += 1;
        self.bytes_requested += size_bytes;
        if hit {
            self.hits += 1;
            self.bytes_hit += size_bytes;
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The result of one [`Setup`] over a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The settings.
    pub setup: Setup,
    /// Demand requests to services that do not prefetch: what Fig. 7 plots.
    pub non_prefetching: Tally,
    /// Demand requests to services that prefetch.
    pub prefetching: Tally,
    /// Dummy prefetch bytes offered to the client caches.
    pub prefetch_bytes: u64,
    /// Dummy prefetch objects offered.
    pub prefetch_objects: u64,
    /// Dummy prefetch bytes the caches stored (an object larger than a cache is not stored).
    pub prefetch_bytes_stored: u64,
    /// Clients that made at least one request.
    pub clients: u64,
    /// Entries evicted, over all client caches.
    pub evictions: u64,
}

impl Outcome {
    /// Every demand request.
    pub fn all(&self) -> Tally {
        self.non_prefetching.plus(&self.prefetching)
    }
}

/// A cache key: a demand object, or a dummy prefetch object no request ever names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Demand(u64),
    Dummy(u64),
}

/// The caches of every client under one [`Setup`], fed one demand request at a time.
///
/// State is bounded by the clients seen (one cache each, at most `capacity_bytes` and
/// `max_tracked_per_client` headers) and the prefetching table.
#[derive(Debug)]
pub struct ClientCaches {
    setup: Setup,
    config: Config,
    prefetching: Vec<bool>,
    /// Indexed by client id; `None` until the client's first request.
    caches: Vec<Option<Cache<Key, u64>>>,
    next_dummy: u64,
    out: Outcome,
}

impl ClientCaches {
    /// Empty caches. `prefetching[s]` says whether service `s` prefetches.
    pub fn new(setup: Setup, prefetching: Vec<bool>) -> Result<ClientCaches, SetupError> {
        let k = setup.prefetch_per_demand;
        if !(k.is_finite() && k >= 0.0) {
            return Err(SetupError::PrefetchRatio(k));
        }
        Ok(ClientCaches {
            setup,
            config: setup.config(),
            prefetching,
            caches: Vec::new(),
            next_dummy: 0,
            out: Outcome {
                setup,
                non_prefetching: Tally::default(),
                prefetching: Tally::default(),
                prefetch_bytes: 0,
                prefetch_objects: 0,
                prefetch_bytes_stored: 0,
                clients: 0,
                evictions: 0,
            },
        })
    }

    /// Serves one demand request from its client's cache (caching it on a miss), then, if its
    /// service prefetches, stores the dummy prefetch data. Returns whether the request hit.
    pub fn demand(&mut self, req: &Request) -> Result<bool, SetupError> {
        let Some(&prefetches) = self.prefetching.get(req.service as usize) else {
            return Err(SetupError::UnknownService {
                service: req.service,
                services: self.prefetching.len(),
            });
        };
        let slot = req.client as usize;
        if self.caches.len() <= slot {
            self.caches.resize_with(slot + 1, || None);
        }
        let cache = self.caches[slot].get_or_insert_with(|| {
            self.out.clients += 1;
            Cache::new(self.config)
        });
        let key = Key::Demand(req.object);
        let hit = match cache.access(&key) {
            Access::Hit { value, .. } if value == req.size_bytes => true,
            Access::Hit { .. } => {
                // A changed object: what is cached is stale, as in `sim::replay`.
                cache.invalidate(&key);
                cache.admit(&key, req.size_bytes, req.size_bytes);
                false
            }
            Access::Miss => {
                cache.admit(&key, req.size_bytes, req.size_bytes);
                false
            }
        };
        if prefetches {
            self.out.prefetching.count(req.size_bytes, hit);
            // 000 §5: "the number of bytes of dummy prefetch data per byte of demand data that
            // are fetched after each demand request". The data comes as objects the size of the
            // demand object (the last one smaller), as a service prefetches objects like those
            // it serves.
            let mut left = (self.setup.prefetch_per_demand * req.size_bytes as f64).round() as u64;
            let chunk = req.size_bytes.max(1);
            while left > 0 {
                let bytes = left.min(chunk);
                left -= bytes;
                let dummy = Key::Dummy(self.next_dummy);
                self.next_dummy += 1;
                self.out.prefetch_bytes += bytes;
                self.out.prefetch_objects += 1;
                if cache.admit(&dummy, bytes, bytes) {
                    self.out.prefetch_bytes_stored += bytes;
                }
            }
        } else {
            self.out.non_prefetching.count(req.size_bytes, hit);
        }
        Ok(hit)
    }

    /// The counts so far.
    pub fn outcome(&self) -> Outcome {
        let mut out = self.out;
        out.evictions = self
            .caches
            .iter()
            .flatten()
            .map(|c| c.stats().evictions)
            .sum();
        out
    }

    /// Checks every client cache's byte accounting and capacity ([`Cache::audit`]). O(entries).
    pub fn audit(&self) -> Result<(), String> {
        for (client, cache) in self.caches.iter().enumerate() {
            if let Some(cache) = cache {
                cache.audit().map_err(|e| format!("client {client}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Bytes cached by `client`, if it has made a request.
    pub fn used_bytes(&self, client: u32) -> Option<u64> {
        self.caches
            .get(client as usize)
            .and_then(Option::as_ref)
            .map(Cache::used_bytes)
    }
}

/// Replays `requests` under `setup`.
pub fn replay<'a, I>(setup: Setup, prefetching: &[bool], requests: I) -> Result<Outcome, SetupError>
where
    I: IntoIterator<Item = &'a Request>,
{
    let mut caches = ClientCaches::new(setup, prefetching.to_vec())?;
    for req in requests {
        caches.demand(req)?;
    }
    Ok(caches.outcome())
}

/// Picks which services prefetch: exactly `round(fraction × n)` of the `n` names, those whose
/// seeded hash of the name is smallest. The choice depends only on the names, the fraction and
/// the seed, not on the order of the names or on the platform. `fraction` is clamped to 0..=1.
pub fn choose_prefetching<S: AsRef<str>>(names: &[S], fraction: f64, seed: u64) -> Vec<bool> {
    let fraction = if fraction.is_nan() {
        0.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    let take = (fraction * names.len() as f64).round() as usize;
    let mut ranked: Vec<(u64, &str, usize)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (name_hash(n.as_ref(), seed), n.as_ref(), i))
        .collect();
    // Ties (equal hashes) are broken by name, so duplicates are the only order dependence.
    ranked.sort_unstable();
    let mut chosen = vec![false; names.len()];
    for &(_, _, i) in ranked.iter().take(take) {
        chosen[i] = true;
    }
    chosen
}

/// FNV-1a over the name, finished with SplitMix64 keyed by the seed: stable across platforms
/// and Rust versions, unlike `std`'s hasher.
fn name_hash(name: &str, seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = h ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sim;

    fn req(client: u32, service: u32, object: u64, size_bytes: u64) -> Request {
        Request {
            client,
            service,
            object,
            size_bytes,
        }
    }

    #[test]
    fn prefetch_data_pushes_other_services_out_of_the_cache() {
        // One client, a 1000-byte cache: service 0 does not prefetch, service 1 does.
        let trace = [req(0, 0, 1, 400), req(0, 1, 2, 100), req(0, 0, 1, 400)];
        let prefetching = [false, true];
        let base = replay(Setup::lru(1000, 0.0), &prefetching, &trace).expect("valid");
        assert_eq!(base.non_prefetching.hits, 1);
        assert_eq!(base.prefetch_bytes, 0);
        // k = 5: 500 dummy bytes after the 100-byte request still leave room for object 1.
        let mild = replay(Setup::lru(1000, 5.0), &prefetching, &trace).expect("valid");
        assert_eq!(mild.non_prefetching.hits, 1);
        assert_eq!((mild.prefetch_bytes, mild.prefetch_objects), (500, 5));
        // k = 6: 600 dummy bytes (as six 100-byte objects) evict it.
        let heavy = replay(Setup::lru(1000, 6.0), &prefetching, &trace).expect("valid");
        assert_eq!(heavy.non_prefetching.hits, 0);
        assert_eq!(heavy.prefetch_bytes_stored, 600);
        assert_eq!(heavy.all().requests, 3);
    }

    #[test]
    fn fractional_ratios_round_to_whole_bytes() {
        let out = replay(Setup::lru(10_000, 2.5), &[true], &[req(0, 0, 1, 3)]).expect("valid");
        // 7.5 bytes round to 8: two objects of 3 bytes and one of 2.
        assert_eq!((out.prefetch_bytes, out.prefetch_objects), (8, 3));
    }

    #[test]
    fn a_changed_size_is_a_miss() {
        let trace = [
            req(0, 0, 1, 10),
            req(0, 0, 1, 10),
            req(0, 0, 1, 12),
            req(0, 0, 1, 12),
        ];
        let out = replay(Setup::lru(100, 0.0), &[false], &trace).expect("valid");
        assert_eq!(out.non_prefetching.hits, 2);
        assert_eq!(out.non_prefetching.bytes_hit, 22);
    }

    #[test]
    fn bad_setups_and_requests_are_errors() {
        for k in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                ClientCaches::new(Setup::lru(100, k), vec![false]),
                Err(SetupError::PrefetchRatio(_))
            ));
        }
        let err =
            replay(Setup::lru(100, 0.0), &[false], &[req(0, 3, 1, 1)]).expect_err("service 3");
        assert_eq!(
            err,
            SetupError::UnknownService {
                service: 3,
                services: 1
            }
        );
    }

    #[test]
    fn the_prefetching_choice_is_exact_and_independent_of_order() {
        let names: Vec<String> = (0..400).map(|i| format!("s{i}.example")).collect();
        let chosen = choose_prefetching(&names, 0.2, 7);
        assert_eq!(chosen.iter().filter(|c| **c).count(), 80);
        let mut reversed = names.clone();
        reversed.reverse();
        let mut again = choose_prefetching(&reversed, 0.2, 7);
        again.reverse();
        assert_eq!(chosen, again);
        assert_ne!(
            chosen,
            choose_prefetching(&names, 0.2, 8),
            "the seed matters"
        );
        assert!(choose_prefetching(&names, 0.0, 7).iter().all(|c| !c));
        assert!(choose_prefetching(&names, 1.5, 7).iter().all(|c| *c));
        assert!(choose_prefetching(&names, f64::NAN, 7).iter().all(|c| !c));
        // The same names choose the same services on every platform and release.
        let few = choose_prefetching(&["a", "b", "c", "d", "e"], 0.4, 0);
        assert_eq!(few, [true, true, false, false, false]);
    }

    fn trace_strategy() -> impl Strategy<Value = Vec<Request>> {
        prop::collection::vec(
            (0u32..4, 0u32..5, 0u64..12, 1u64..400).prop_map(|(c, s, o, size)| {
                // An object belongs to one service and keeps one size, as in a real trace.
                let object = u64::from(s) * 100 + o;
                req(c, s, object, size + object % 7)
            }),
            0..300,
        )
    }

    proptest! {
        #[test]
        fn accounting_is_exact_and_capacity_is_never_exceeded(
            trace in trace_strategy(),
            prefetching in prop::collection::vec(any::<bool>(), 5),
            capacity in 1u64..3000,
            k in 0.0f64..8.0,
        ) {
            let mut caches = ClientCaches::new(Setup::lru(capacity, k), prefetching.clone())
                .expect("valid");
            let mut hits = 0;
            for r in &trace {
                hits += u64::from(caches.demand(r).expect("known service"));
                prop_assert!(caches.used_bytes(r.client).expect("seen") <= capacity);
            }
            caches.audit().map_err(TestCaseError::fail)?;
            let out = caches.outcome();
            let all = out.all();
            prop_assert_eq!(all.requests, trace.len() as u64);
            prop_assert_eq!(all.hits, hits);
            prop_assert_eq!(all.bytes_requested, trace.iter().map(|r| r.size_bytes).sum::<u64>());
            let to_prefetching = trace.iter().filter(|r| prefetching[r.service as usize]);
            prop_assert_eq!(out.prefetching.requests, to_prefetching.clone().count() as u64);
            let demand: u64 = to_prefetching.map(|r| r.size_bytes).sum();
            // Each request's share is rounded on its own, so the total is within half a byte
            // per request.
            let offered = out.prefetch_bytes as f64;
            prop_assert!((offered - k * demand as f64).abs() <= 0.5 * trace.len() as f64 + 1e-6);
            prop_assert!(out.prefetch_bytes_stored <= out.prefetch_bytes);
            prop_assert!(all.hits <= all.requests && all.bytes_hit <= all.bytes_requested);
        }

        #[test]
        fn without_prefetching_each_client_is_a_plain_lru_replay(
            trace in trace_strategy(),
            prefetching in prop::collection::vec(any::<bool>(), 5),
            capacity in 1u64..3000,
            k in 0.0f64..8.0,
        ) {
            // k = 0 gives exactly the no-prefetch hit ratio, and so does any k when no service
            // prefetches: each client's cache replays its own requests through `sim::replay`.
            let setup = Setup::lru(capacity, 0.0);
            let zero = replay(setup, &prefetching, &trace).expect("valid");
            let none = replay(Setup::lru(capacity, k), &[false; 5], &trace).expect("valid");
            prop_assert_eq!(zero.all(), none.all());
            let mut expected = (0u64, 0u64);
            for client in 0..4 {
                let keys: Vec<(String, u64)> = trace
                    .iter()
                    .filter(|r| r.client == client)
                    .map(|r| (r.object.to_string(), r.size_bytes))
                    .collect();
                let o = sim::replay(setup.config(), keys.iter().map(|(k, s)| (k.as_str(), *s)));
                expected.0 += o.complete_hits;
                expected.1 += o.bytes_hit;
            }
            prop_assert_eq!((zero.all().hits, zero.all().bytes_hit), expected);
        }

        #[test]
        fn a_client_that_never_meets_a_prefetching_service_is_unaffected(
            trace in trace_strategy(),
            capacity in 1u64..3000,
            k in 0.0f64..8.0,
        ) {
            // Service 0 prefetches; client 0's requests to it are dropped. Caches are per client,
            // so client 0 must see the same hits whatever the others' prefetching.
            let mut prefetching = vec![false; 5];
            prefetching[0] = true;
            let trace: Vec<Request> = trace
                .into_iter()
                .filter(|r| !(r.client == 0 && r.service == 0))
                .collect();
            let client0 = |k: f64| {
                let mut caches = ClientCaches::new(Setup::lru(capacity, k), prefetching.clone())
                    .expect("valid");
                trace
                    .iter()
                    .map(|r| caches.demand(r).expect("known") && r.client == 0)
                    .filter(|hit| *hit)
                    .count()
            };
            prop_assert_eq!(client0(0.0), client0(k));
        }

        #[test]
        fn a_cache_that_holds_everything_is_unaffected(
            trace in trace_strategy(),
            prefetching in prop::collection::vec(any::<bool>(), 5),
            k in 0.0f64..8.0,
        ) {
            let total: u64 = trace.iter().map(|r| r.size_bytes).sum();
            let capacity = total + (k * total as f64).ceil() as u64 + trace.len() as u64 + 1;
            let base = replay(Setup::lru(capacity, 0.0), &prefetching, &trace).expect("valid");
            let pf = replay(Setup::lru(capacity, k), &prefetching, &trace).expect("valid");
            prop_assert_eq!(base.non_prefetching, pf.non_prefetching);
            prop_assert_eq!(pf.evictions, 0);
        }
    }
}
