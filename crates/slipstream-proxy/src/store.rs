//! Stored responses, on the `slipstream-cache` engine (byte-accounted, bounded, policy by name).
//!
//! The primary key is the target URI (RFC 9111 §4: method GET, so HEAD shares it). One key holds
//! up to [`MAX_VARIANTS`] responses that differ by their Vary-selected request headers (§4.1).
//! Surrogate keys (the `Surrogate-Key` response field) index keys for purging by tag: only
//! keys of stored entries (an evicted or invalidated entry leaves the index), at most
//! [`MAX_SURROGATE_KEYS`] per response from a field of at most [`MAX_SURROGATE_FIELD_BYTES`],
//! and what the index holds for an entry is charged to that entry.
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

/// Surrogate keys taken from one response at most; further keys are ignored.
pub const MAX_SURROGATE_KEYS: usize = 64;

/// Longest `Surrogate-Key` field (all its lines together) whose keys are indexed; a longer one
/// is ignored whole, so that no response can make the index hold more than this of its keys.
pub const MAX_SURROGATE_FIELD_BYTES: usize = 8 * 1024;

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

/// Surrogate key → engine keys of stored entries tagged with it, and the reverse. An entry's
/// pairs are charged to it in the cache ([`index_cost`]), and leave with it.
#[derive(Debug, Default)]
struct SurrogateIndex {
    by_tag: HashMap<Box<str>, HashSet<Box<str>>>,
    by_key: HashMap<Box<str>, Vec<Box<str>>>,
    /// What [`index_cost`] charged for the keys held now.
    charged: u64,
}

impl SurrogateIndex {
    /// Makes `tags` the tags of `key`, replacing its previous ones.
    fn set(&mut self, key: &str, tags: Vec<Box<str>>) {
        self.remove(key);
        if tags.is_empty() {
            return;
        }
        for tag in &tags {
            self.by_tag
                .entry(tag.clone())
                .or_default()
                .insert(key.into());
        }
        self.charged += index_cost(key, &tags);
        self.by_key.insert(key.into(), tags);
    }

    /// Drops `key` from every tag.
    fn remove(&mut self, key: &str) {
        let Some(tags) = self.by_key.remove(key) else {
            return;
        };
        self.charged -= index_cost(key, &tags);
        for tag in &tags {
            if let Some(keys) = self.by_tag.get_mut(tag) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_tag.remove(tag);
                }
            }
        }
    }

    /// The keys tagged with `tag`, each dropped from the index.
    fn take(&mut self, tag: &str) -> Vec<Box<str>> {
        let keys: Vec<Box<str>> = self
            .by_tag
            .get(tag)
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        for key in &keys {
            self.remove(key);
        }
        keys
    }
}

/// What the surrogate-key index holds for `key` tagged with `tags`: per tag, the tag in both
/// maps, the key in the tag's set, and the tables' slots; the key and its list once. An
/// overestimate, like [`Stored::size`].
fn index_cost(key: &str, tags: &[Box<str>]) -> u64 {
    if tags.is_empty() {
        return 0;
    }
    let per_tag: u64 = tags
        .iter()
        .map(|t| 2 * allocation(t.len()) + allocation(key.len()) + 3 * 48)
        .sum();
    per_tag + allocation(key.len()) + allocation(std::mem::size_of_val(tags)) + 64
}

/// The surrogate keys of a response: the whitespace-separated tokens of its `Surrogate-Key`
/// lines, the first [`MAX_SURROGATE_KEYS`] distinct ones; none at all when the field is longer
/// than [`MAX_SURROGATE_FIELD_BYTES`].
pub fn surrogate_keys(headers: &HeaderMap) -> Vec<Box<str>> {
    let lines = headers.get_all("surrogate-key");
    if lines.iter().map(|v| v.len()).sum::<usize>() > MAX_SURROGATE_FIELD_BYTES {
        return Vec::new();
    }
    let mut keys: Vec<Box<str>> = Vec::new();
    for token in lines
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(str::split_whitespace)
    {
        if keys.len() == MAX_SURROGATE_KEYS {
            break;
        }
        if !keys.iter().any(|k| &**k == token) {
            keys.push(token.into());
        }
    }
    keys
}

impl Store {
    /// An empty store.
    pub fn new(config: slipstream_cache::Config) -> Store {
        let mut cache = Cache::new(config);
        cache.log_evictions();
        Store {
            cache: Mutex::new(cache),
            surrogates: Mutex::new(SurrogateIndex::default()),
        }
    }

    /// The variant stored for `uri` whose Vary-selected fields match `request_headers`.
    pub fn find(&self, uri: &str, request_headers: &HeaderMap) -> Found {
        let key = engine_key(uri);
        let mut cache = self.cache.lock();
        let Access::Hit { value, revived, .. } = cache.access(key.as_ref()) else {
            return Found::Nothing;
        };
        if revived {
            // Back from the free list, making room by evicting others: it is indexed again
            // (its charge already counts that), and its victims leave the index.
            let mut index = self.surrogates.lock();
            unindex_evicted(&mut cache, &mut index);
            index.set(&key, tags_of(&value));
        }
        drop(cache);
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

    /// Stores `stored` under `uri`, replacing the variant with the same Vary key, and indexes
    /// the URI under the surrogate keys of its variants (see [`surrogate_keys`]). Returns
    /// whether the cache admitted it. The header fields are copied out of the buffer they were
    /// received in, which a stored response would otherwise keep alive whole.
    pub fn put(&self, uri: &str, mut stored: Stored) -> bool {
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
        let tags = tags_of(&variants);
        let size = variants.size() + index_cost(&key, &tags);
        let admitted = cache
            .insert(key.clone().into_owned(), size, Arc::new(variants))
            .is_ok();
        let mut index = self.surrogates.lock();
        unindex_evicted(&mut cache, &mut index);
        if admitted {
            index.set(&key, tags);
        } else {
            // A refused insert drops what the key held before.
            index.remove(&key);
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
        let key = engine_key(uri);
        let mut cache = self.cache.lock();
        let removed = cache.invalidate(key.as_ref());
        self.surrogates.lock().remove(&key);
        removed
    }

    /// Drops every key tagged with surrogate key `tag`; returns how many keys were tagged.
    pub fn purge_tag(&self, tag: &str) -> usize {
        let mut cache = self.cache.lock();
        let keys = self.surrogates.lock().take(tag);
        for key in &keys {
            cache.invalidate(&**key);
        }
        keys.len()
    }

    /// Bytes held and capacity.
    pub fn usage(&self) -> (u64, u64) {
        let cache = self.cache.lock();
        (cache.used_bytes(), cache.config().capacity_bytes)
    }

    /// The surrogate-key index: bytes charged for it (part of [`Store::usage`]'s bytes held),
    /// distinct keys, and (key, URI) pairs.
    pub fn surrogate_index(&self) -> (u64, usize, usize) {
        let index = self.surrogates.lock();
        let pairs = index.by_key.values().map(Vec::len).sum();
        (index.charged, index.by_tag.len(), pairs)
    }
}

/// The surrogate keys of every variant of a URI, each once.
fn tags_of(variants: &Variants) -> Vec<Box<str>> {
    let mut tags: Vec<Box<str>> = Vec::new();
    for v in &variants.list {
        for tag in surrogate_keys(&v.headers) {
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
    }
    tags
}

/// Drops the entries the cache evicted since the last call from the surrogate-key index.
fn unindex_evicted(cache: &mut Cache<String, Arc<Variants>>, index: &mut SurrogateIndex) {
    let mut evicted = Vec::new();
    cache.take_evicted(&mut evicted);
    for key in evicted {
        index.remove(&key);
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

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use http::{Request, Response};

    use super::*;

    fn stored(surrogate_key: &str, body: usize) -> Stored {
        let req = Request::get("/").body(()).expect("request").into_parts().0;
        let mut res = Response::new(());
        let h = res.headers_mut();
        h.insert("cache-control", HeaderValue::from_static("max-age=3600"));
        h.insert(
            "surrogate-key",
            HeaderValue::from_str(surrogate_key).expect("value"),
        );
        let res = res.into_parts().0;
        let policy =
            rfc9111::Policy::new(&req, &res, SystemTime::now(), &rfc9111::Options::default())
                .expect("storable");
        Stored {
            status: res.status,
            headers: res.headers,
            body: Bytes::from(vec![b'x'; body]),
            total_len: body as u64,
            policy,
            vary_key: String::new(),
        }
    }

    #[test]
    fn the_surrogate_key_index_holds_only_stored_entries_and_is_charged_to_them() {
        let capacity = 1 << 20;
        let store = Store::new(bounded_config(capacity, "lru".parse().expect("policy")));
        // 2,000 responses with 64 unique 100-byte keys each: far more than the cache keeps.
        for i in 0..2_000 {
            let keys: Vec<String> = (0..64)
                .map(|j| format!("{i:06}-{j:02}-{}", "k".repeat(90)))
                .collect();
            store.put(&format!("/o/{i}"), stored(&keys.join(" "), 1024));
            let (charged, _, pairs) = store.surrogate_index();
            let (used, _) = store.usage();
            assert!(
                charged <= used,
                "the index's {charged} bytes are part of {used}"
            );
            assert_eq!(pairs % 64, 0);
        }
        let (charged, tags, pairs) = store.surrogate_index();
        let cached = store.cache.lock().len();
        assert_eq!(pairs, cached * 64, "only the cached entries are indexed");
        assert_eq!(tags, pairs);
        assert!(cached < 200, "{cached} entries of ~35 KB fit in 1 MiB");
        assert!(charged > 0);
        // Evicting everything by a large entry with no keys empties the index.
        assert!(store.put("/big", stored("", 1000 << 10)));
        assert_eq!(store.surrogate_index(), (0, 0, 0));
    }

    #[test]
    fn keys_past_the_caps_are_ignored_and_invalidation_unindexes() {
        let store = Store::new(bounded_config(1 << 20, "lru".parse().expect("policy")));
        let many: Vec<String> = (0..100).map(|j| format!("k{j}")).collect();
        store.put("/many", stored(&many.join(" "), 10));
        assert_eq!(store.surrogate_index().2, MAX_SURROGATE_KEYS);
        store.put("/huge", stored(&"h".repeat(200 * 1024), 10));
        assert_eq!(
            store.surrogate_index().2,
            MAX_SURROGATE_KEYS,
            "a 200 KB field is ignored"
        );
        store.put("/shared", stored("k0 other", 10));
        assert_eq!(store.purge_tag("k0"), 2);
        assert_eq!(store.surrogate_index(), (0, 0, 0));
        store.put("/shared", stored("other", 10));
        assert!(store.remove("/shared"));
        assert_eq!(store.surrogate_index(), (0, 0, 0));
        assert_eq!(store.purge_tag("other"), 0);
    }
}
