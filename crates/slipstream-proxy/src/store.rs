//! Stored responses, on the `slipstream-cache` engine (byte-accounted, bounded, policy by name).
//!
//! The primary key is the target URI (RFC 9111 §4: method GET, so HEAD shares it). One key holds
//! up to [`MAX_VARIANTS`] responses that differ by their Vary-selected request headers (§4.1).
//! Surrogate keys (the `Surrogate-Key` response field) index keys for purging by tag.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use parking_lot::Mutex;
use slipstream_cache::{Access, Cache};
use slipstream_http::rfc9111;

/// Responses kept per URI for different Vary-selected request headers.
pub const MAX_VARIANTS: usize = 8;

/// Surrogate-key index entries kept at most; beyond, the oldest tags are forgotten (a purge by
/// those tags then misses, which the purge response reports).
pub const MAX_SURROGATE_KEYS: usize = 100_000;

/// One stored response. Cloning shares the body (reference-counted).
#[derive(Debug, Clone)]
pub struct Stored {
    /// Status of the stored response.
    pub status: StatusCode,
    /// Its header fields as received (minus hop-by-hop fields).
    pub headers: HeaderMap,
    /// The body, or its first chunk when the object is larger than the cache keeps whole
    /// (paper 002's adaptive level, §4.1.2).
    pub body: Bytes,
    /// Length of the whole body.
    pub total_len: u64,
    /// Freshness and reuse rules.
    pub policy: rfc9111::Policy,
    /// The secondary key: request values of the fields named in Vary.
    pub vary_key: String,
}

impl Stored {
    /// Whether `body` is the whole body.
    pub fn complete(&self) -> bool {
        self.body.len() as u64 == self.total_len
    }

    /// Bytes charged to the cache.
    pub fn size(&self) -> u64 {
        let head: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum();
        (self.body.len() + head + 64) as u64
    }
}

/// What the store holds for a request.
#[derive(Debug)]
pub enum Found {
    /// A variant matching the request's Vary-selected fields.
    Variant(Arc<Stored>),
    /// Responses for the URI, none for these field values (Cache-Status `fwd=vary-miss`).
    VaryMiss,
    /// Nothing for the URI (`fwd=uri-miss`).
    Nothing,
}

/// The variants stored under one URI.
#[derive(Debug, Default, Clone)]
pub struct Variants(pub Vec<Arc<Stored>>);

impl Variants {
    fn size(&self) -> u64 {
        self.0.iter().map(|s| s.size()).sum()
    }
}

/// The proxy's store.
#[derive(Debug)]
pub struct Store {
    cache: Mutex<Cache<String, Arc<Variants>>>,
    surrogates: Mutex<SurrogateIndex>,
}

#[derive(Debug, Default)]
struct SurrogateIndex {
    keys: HashMap<String, HashSet<String>>,
    order: std::collections::VecDeque<String>,
}

impl Store {
    /// An empty store.
    pub fn new(config: slipstream_cache::Config) -> Store {
        Store {
            cache: Mutex::new(Cache::new(config)),
            surrogates: Mutex::new(SurrogateIndex::default()),
        }
    }

    /// The variant stored for `key` whose Vary-selected fields match `request_headers`.
    pub fn find(&self, key: &str, request_headers: &HeaderMap) -> Found {
        let Access::Hit { value, .. } = self.cache.lock().access(key) else {
            return Found::Nothing;
        };
        value
            .0
            .iter()
            .find(|s| {
                rfc9111::vary_key(&s.headers, request_headers).as_deref()
                    == Some(s.vary_key.as_str())
            })
            .cloned()
            .map_or(Found::VaryMiss, Found::Variant)
    }

    /// Stores `stored` under `key`, replacing the variant with the same Vary key. Returns whether
    /// the cache admitted it.
    pub fn put(&self, key: &str, stored: Stored, surrogate_keys: &[String]) -> bool {
        let stored = Arc::new(stored);
        let mut cache = self.cache.lock();
        // The current variants, without counting an access.
        let mut variants = cache.peek(key).map(|v| (**v).clone()).unwrap_or_default();
        variants.0.retain(|v| v.vary_key != stored.vary_key);
        if variants.0.len() >= MAX_VARIANTS {
            variants.0.remove(0);
        }
        variants.0.push(stored);
        let size = variants.size();
        let admitted = cache
            .insert(key.to_owned(), size, Arc::new(variants))
            .is_ok();
        drop(cache);
        if admitted && !surrogate_keys.is_empty() {
            let mut index = self.surrogates.lock();
            for tag in surrogate_keys {
                if !index.keys.contains_key(tag) {
                    index.order.push_back(tag.clone());
                }
                index
                    .keys
                    .entry(tag.clone())
                    .or_default()
                    .insert(key.to_owned());
            }
            while index.order.len() > MAX_SURROGATE_KEYS {
                if let Some(old) = index.order.pop_front() {
                    index.keys.remove(&old);
                }
            }
        }
        admitted
    }

    /// Forgets `key` if nothing is stored for it (see `Cache::forget`).
    pub fn forget(&self, key: &str) -> bool {
        self.cache.lock().forget(key)
    }

    /// Objects the store keeps a header for.
    pub fn tracked(&self) -> usize {
        self.cache.lock().tracked()
    }

    /// Drops everything stored under `key` (RFC 9111 §4.4 invalidation, or a purge).
    pub fn remove(&self, key: &str) -> bool {
        self.cache.lock().invalidate(key)
    }

    /// Drops every key tagged with surrogate key `tag`; returns how many keys were tagged.
    pub fn purge_tag(&self, tag: &str) -> usize {
        let keys = self.surrogates.lock().keys.remove(tag).unwrap_or_default();
        let mut cache = self.cache.lock();
        for key in &keys {
            cache.invalidate(key.as_str());
        }
        keys.len()
    }

    /// Bytes held and capacity.
    pub fn usage(&self) -> (u64, u64) {
        let cache = self.cache.lock();
        (cache.used_bytes(), cache.config().capacity_bytes)
    }
}
