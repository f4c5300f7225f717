//! Stored responses, on the `slipstream-cache` engine (byte-accounted, bounded, policy by name).
//!
//! The primary key is the target URI (RFC 9111 §4: method GET, so HEAD shares it). One key holds
//! up to [`MAX_VARIANTS`] responses that differ by their Vary-selected request headers (§4.1).
//! Surrogate keys (the `Surrogate-Key` response field) index keys for purging by tag.
//!
//! Memory: every byte an entry holds is charged to the capacity ([`Stored::size`] counts the
//! bookkeeping as well as the body), the free list holds at most [`FREE_LIST_SHARE`] of it, and
//! the headers kept for URIs that hold nothing (the engine's frequency counts, paper 002
//! §4.2.3.1) are bounded in count by [`bounded_config`] and in bytes by [`MAX_KEY_BYTES`]: a
//! longer URI is kept as its SHA-256.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use parking_lot::Mutex;
use slipstream_cache::{Access, Cache, Policy};
use slipstream_http::rfc9111;

/// Responses kept per URI for different Vary-selected request headers.
pub const MAX_VARIANTS: usize = 8;

/// Surrogate-key index entries kept at most; beyond, the oldest tags are forgotten (a purge by
/// those tags then misses, which the purge response reports).
pub const MAX_SURROGATE_KEYS: usize = 100_000;

/// Longest URI kept as itself in the engine's index; a longer one is kept as its SHA-256, so an
/// attacker's 16 KB URLs cost the index no more than short ones.
pub const MAX_KEY_BYTES: usize = 128;

/// The free list (evicted entries kept until the next flush, paper 002 §4.2.3.4) holds at most
/// this share of the capacity: 1/8.
pub const FREE_LIST_SHARE: u64 = 8;

/// The headers of URIs that hold nothing may take at most this share of the capacity: 1/16.
pub const TRACKED_SHARE: u64 = 16;

/// What the engine spends on one header (a key of at most [`MAX_KEY_BYTES`], twice: in the
/// index and in the slot; the slot; the index entry; the replacement algorithm's node), rounded
/// up. Checked against the allocator in `tests/memory.rs`.
pub const HEADER_BYTES: u64 = 2 * MAX_KEY_BYTES as u64 + 192;

/// The least any stored entry is charged: its header, the entry's structures and one header
/// field (see [`Stored::size`]).
const MIN_ENTRY_BYTES: u64 = HEADER_BYTES + 512;

/// The engine's settings for a proxy cache of `capacity` bytes: the whole response is stored or
/// nothing (the level rule is applied by the object size bounds), the free list and the headers
/// kept for uncached URIs are bounded as the module documentation says.
pub fn bounded_config(capacity: u64, policy: Policy) -> slipstream_cache::Config {
    let mut c = slipstream_cache::Config::new(capacity, policy);
    c.max_file_size = Some(capacity);
    c.free_list_capacity_bytes = Some(capacity / FREE_LIST_SHARE);
    // Every cached or free entry has a header, charged in its size; on top of those, the
    // uncached ones get their own budget.
    let entries = (capacity + capacity / FREE_LIST_SHARE) / MIN_ENTRY_BYTES;
    let uncached = (capacity / TRACKED_SHARE / HEADER_BYTES).max(1024);
    c.max_tracked = usize::try_from(entries + uncached).unwrap_or(usize::MAX);
    c
}

/// The engine's key for `uri`: itself, or `#` and its SHA-256 in hex when longer than
/// [`MAX_KEY_BYTES`].
pub fn engine_key(uri: &str) -> Cow<'_, str> {
    if uri.len() <= MAX_KEY_BYTES {
        return Cow::Borrowed(uri);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, uri.as_bytes());
    let mut key = String::with_capacity(65);
    key.push('#');
    for b in digest.as_ref() {
        key.push_str(&format!("{b:02x}"));
    }
    Cow::Owned(key)
}

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

/// Heap bytes the allocator adds to each allocation (glibc: 16, rounded up to 16).
const ALLOCATION_OVERHEAD: u64 = 16;

fn allocation(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(16) * 16 + ALLOCATION_OVERHEAD
}

impl Stored {
    /// Whether `body` is the whole body.
    pub fn complete(&self) -> bool {
        self.body.len() as u64 == self.total_len
    }

    /// Bytes charged to the cache: what the entry holds in memory, not only its body. The body
    /// and every field value are separate allocations; the header map's table grows in powers of
    /// two; the policy keeps up to two validators and the Vary names; the engine keeps a header
    /// for the entry. `tests/memory.rs` checks the sum against the allocator.
    pub fn size(&self) -> u64 {
        let fields: u64 = self
            .headers
            .iter()
            // A standard name allocates nothing; counting every name as custom overcharges those
            // by a few bytes, never undercharges.
            .map(|(k, v)| allocation(k.as_str().len()) + allocation(v.len()))
            .sum();
        // A table entry is the name and value plus its hash and links (32 bytes).
        let table = self.headers.capacity() as u64
            * (size_of::<(HeaderName, HeaderValue)>() as u64 + 32)
            + self.headers.capacity().next_power_of_two() as u64 * 4;
        allocation(self.body.len())
            + fields
            + table
            + allocation(size_of::<Stored>() + 16)
            // The policy's two validators, its Vary names and key.
            + 4 * allocation(64)
            + allocation(self.vary_key.len())
            + size_of::<Arc<Stored>>() as u64
            + HEADER_BYTES
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
pub struct Variants {
    /// The URI, when the engine keys it by its hash: a lookup checks it, so that two URIs with
    /// the same hash can never be served for each other.
    uri: Option<Box<str>>,
    /// The responses, oldest first.
    pub list: Vec<Arc<Stored>>,
}

impl Variants {
    fn size(&self) -> u64 {
        let own = allocation(size_of::<Variants>() + 16)
            + allocation(self.list.capacity() * size_of::<Arc<Stored>>())
            + self.uri.as_ref().map_or(0, |u| allocation(u.len()));
        own + self.list.iter().map(|s| s.size()).sum::<u64>()
    }

    fn holds(&self, uri: &str) -> bool {
        self.uri.as_deref().is_none_or(|u| u == uri)
    }
}

/// The proxy's store.
#[derive(Debug)]
pub struct Store {
    cache: Mutex<Cache<String, Arc<Variants>>>,
    surrogates: Mutex<SurrogateIndex>,
}

/// Surrogate key → engine keys tagged with it, bounded in tags and in (tag, key) pairs.
#[derive(Debug, Default)]
struct SurrogateIndex {
    keys: HashMap<String, HashSet<String>>,
    order: std::collections::VecDeque<String>,
    pairs: usize,
}

impl SurrogateIndex {
    fn tag(&mut self, tag: &str, key: &str, max_pairs: usize) {
        if !self.keys.contains_key(tag) {
            self.order.push_back(tag.to_owned());
        }
        if self
            .keys
            .entry(tag.to_owned())
            .or_default()
            .insert(key.to_owned())
        {
            self.pairs += 1;
        }
        while self.order.len() > MAX_SURROGATE_KEYS || self.pairs > max_pairs {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(keys) = self.keys.remove(&old) {
                self.pairs -= keys.len();
            }
        }
    }

    fn take(&mut self, tag: &str) -> HashSet<String> {
        let keys = self.keys.remove(tag).unwrap_or_default();
        // Out of the age order too: a tag tagged again later must not be evicted early by its
        // stale place in the order. Purges are rare; the scan is bounded by MAX_SURROGATE_KEYS.
        if !keys.is_empty() {
            self.order.retain(|t| t != tag);
        }
        self.pairs -= keys.len();
        keys
    }
}

impl Store {
    /// An empty store.
    pub fn new(config: slipstream_cache::Config) -> Store {
        Store {
            cache: Mutex::new(Cache::new(config)),
            surrogates: Mutex::new(SurrogateIndex::default()),
        }
    }

    /// The variant stored for `uri` whose Vary-selected fields match `request_headers`.
    pub fn find(&self, uri: &str, request_headers: &HeaderMap) -> Found {
        let key = engine_key(uri);
        let Access::Hit { value, .. } = self.cache.lock().access(key.as_ref()) else {
            return Found::Nothing;
        };
        if !value.holds(uri) {
            return Found::Nothing;
        }
        value
            .list
            .iter()
            .find(|s| {
                rfc9111::vary_key(&s.headers, request_headers).as_deref()
                    == Some(s.vary_key.as_str())
            })
            .cloned()
            .map_or(Found::VaryMiss, Found::Variant)
    }

    /// Stores `stored` under `uri`, replacing the variant with the same Vary key. Returns whether
    /// the cache admitted it. The header fields are copied out of the buffer they were received
    /// in, which a stored response would otherwise keep alive whole.
    pub fn put(&self, uri: &str, mut stored: Stored, surrogate_keys: &[String]) -> bool {
        stored.headers = detached(&stored.headers);
        let stored = Arc::new(stored);
        let key = engine_key(uri);
        let mut cache = self.cache.lock();
        // The current variants, without counting an access.
        let mut variants = match cache.peek(key.as_ref()) {
            Some(v) if v.holds(uri) => (**v).clone(),
            _ => Variants {
                uri: matches!(key, Cow::Owned(_)).then(|| uri.into()),
                list: Vec::new(),
            },
        };
        variants.list.retain(|v| v.vary_key != stored.vary_key);
        if variants.list.len() >= MAX_VARIANTS {
            variants.list.remove(0);
        }
        variants.list.push(stored);
        variants.list.shrink_to_fit();
        let size = variants.size();
        let max_pairs = cache.config().max_tracked;
        let admitted = cache
            .insert(key.clone().into_owned(), size, Arc::new(variants))
            .is_ok();
        drop(cache);
        if admitted && !surrogate_keys.is_empty() {
            let mut index = self.surrogates.lock();
            for tag in surrogate_keys {
                index.tag(tag, &key, max_pairs);
            }
        }
        admitted
    }

    /// Forgets `key` if nothing is stored for it (see `Cache::forget`).
    pub fn forget(&self, uri: &str) -> bool {
        self.cache.lock().forget(engine_key(uri).as_ref())
    }

    /// Objects the store keeps a header for.
    pub fn tracked(&self) -> usize {
        self.cache.lock().tracked()
    }

    /// Drops everything stored under `key` (RFC 9111 §4.4 invalidation, or a purge).
    pub fn remove(&self, uri: &str) -> bool {
        self.cache.lock().invalidate(engine_key(uri).as_ref())
    }

    /// Drops every key tagged with surrogate key `tag`; returns how many keys were tagged.
    pub fn purge_tag(&self, tag: &str) -> usize {
        let keys = self.surrogates.lock().take(tag);
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

/// A copy of `headers` whose values have their own allocations, in a table sized to them.
fn detached(headers: &HeaderMap) -> HeaderMap {
    let mut copy = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        copy.append(name.clone(), rfc9111::detached(value));
    }
    copy
}
