//! The store: per-object headers with frequency counts, a hash index, byte accounting, the
//! free list, and the glue between a [`Level`] rule and a replacement [`Algorithm`].

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use crate::replacement::{self, Algorithm, Id};
use crate::{Level, Policy, Stored};

/// Cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Bytes the cached entries may occupy in total. Never exceeded.
    pub capacity_bytes: u64,
    /// Level rule and replacement algorithm.
    pub policy: Policy,
    /// The paper's MAX_FILE_SIZE: objects larger than this are stored as their first chunk
    /// (`adaptive`) or not at all (`small`). `None` means a quarter of the capacity, the setting
    /// of 002 §5.2.
    pub max_file_size: Option<u64>,
    /// Flush the free list every this many accesses (002 §4.2.3.4 uses 100). `0` disables the
    /// free list: evicted values are dropped at once.
    pub free_list_flush_every: u64,
    /// Bound on the bytes the free list may hold; an evicted value that would exceed it is
    /// dropped instead. `None` means equal to the capacity.
    pub free_list_capacity_bytes: Option<u64>,
    /// Bound on per-object headers kept (cached or not). When a new object would exceed it, the
    /// headers of all objects that hold no data are forgotten, and with them their frequencies.
    pub max_tracked: usize,
}

impl Config {
    /// A cache of `capacity_bytes` with `policy` and the paper's defaults otherwise.
    pub fn new(capacity_bytes: u64, policy: Policy) -> Config {
        Config {
            capacity_bytes,
            policy,
            max_file_size: None,
            free_list_flush_every: 100,
            free_list_capacity_bytes: None,
            max_tracked: 1 << 20,
        }
    }

    /// The effective MAX_FILE_SIZE.
    pub fn max_file_size(&self) -> u64 {
        self.max_file_size.unwrap_or(self.capacity_bytes / 4)
    }
}

/// Counters since the cache was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls to [`Cache::access`].
    pub accesses: u64,
    /// Accesses answered by a complete entry.
    pub complete_hits: u64,
    /// Accesses answered by an incomplete entry (the first chunk only).
    pub incomplete_hits: u64,
    /// Accesses for objects not cached.
    pub misses: u64,
    /// Hits whose entry came back from the free list without being loaded again (002 §4.1.5).
    pub revived: u64,
    /// Successful [`Cache::insert`]s.
    pub inserts: u64,
    /// Inserts refused by the admission rule.
    pub admission_rejects: u64,
    /// Inserts refused because the level rule never stores such an object.
    pub level_rejects: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Times the free list was flushed.
    pub free_list_flushes: u64,
    /// Times the header table reached `max_tracked` and forgot uncached objects.
    pub header_sweeps: u64,
}

/// The answer to an access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access<V> {
    /// The object is cached; `stored.complete` says whether the value is the whole object.
    Hit {
        /// The cached value.
        value: V,
        /// How much of the object the value holds.
        stored: Stored,
        /// The entry came back from the free list on this access.
        revived: bool,
    },
    /// The object is not cached. Call [`Cache::plan`] and [`Cache::insert`] to cache it.
    Miss,
}

/// What an insert of a missed object would store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit {
    /// Bytes of the object (from its start) the caller should load and pass to `insert`.
    pub stored: Stored,
}

/// A successful insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// What was stored.
    pub stored: Stored,
    /// Entries evicted to make room.
    pub evicted: usize,
    /// The highest frequency among the evicted entries (for checking the admission rule).
    pub max_victim_freq: Option<u64>,
    /// The frequency of the inserted object.
    pub freq: u64,
}

/// Why an insert stored nothing. Nothing was evicted; a value previously stored for the same key
/// was dropped, because it is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The level rule never stores an object of this size.
    #[error("the level rule does not cache an object of this size")]
    Level,
    /// Not enough less-popular entries to displace (002 §4.2.4.2).
    #[error("admission refused: not enough less frequently used entries to displace")]
    Admission,
}

#[derive(Debug)]
enum State<V> {
    Absent,
    Cached { value: V, stored: Stored },
    Free { value: V, stored: Stored },
}

/// 002 §4.2.3.1: the file header, kept for every object seen, cached or not.
#[derive(Debug)]
struct Slot<K, V> {
    key: K,
    freq: u64,
    state: State<V>,
}

/// A byte-accounted cache of values `V` keyed by `K`. See the crate documentation.
#[derive(Debug)]
pub struct Cache<K, V> {
    config: Config,
    max_file_size: u64,
    free_list_capacity: u64,
    index: HashMap<K, Id>,
    slots: Vec<Option<Slot<K, V>>>,
    vacant: Vec<Id>,
    algorithm: Box<dyn Algorithm>,
    used_bytes: u64,
    free_bytes: u64,
    free_list: Vec<Id>,
    accesses_since_flush: u64,
    stats: Stats,
    scratch: Vec<Id>,
    /// Keys of entries evicted since the last [`Cache::take_evicted`], when the caller asked
    /// for them with [`Cache::log_evictions`].
    evicted_log: Option<Vec<K>>,
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// An empty cache.
    pub fn new(config: Config) -> Self {
        Cache {
            max_file_size: config.max_file_size(),
            free_list_capacity: config
                .free_list_capacity_bytes
                .unwrap_or(config.capacity_bytes),
            config,
            index: HashMap::new(),
            slots: Vec::new(),
            vacant: Vec::new(),
            algorithm: replacement::build(config.policy.replacement),
            used_bytes: 0,
            free_bytes: 0,
            free_list: Vec::new(),
            accesses_since_flush: 0,
            stats: Stats::default(),
            scratch: Vec::new(),
            evicted_log: None,
        }
    }

    /// From now on, remembers the key of every entry an insert or an access evicts (moves to
    /// the free list or drops), until [`Cache::take_evicted`]: the hook for a caller that
    /// indexes entries elsewhere (the proxy's surrogate keys). The caller drains the log after
    /// each call, so it holds at most one call's victims.
    pub fn log_evictions(&mut self) {
        self.evicted_log.get_or_insert_with(Vec::new);
    }

    /// Appends the keys evicted since the last call to `out` (nothing unless
    /// [`Cache::log_evictions`] was called).
    pub fn take_evicted(&mut self, out: &mut Vec<K>) {
        if let Some(log) = self.evicted_log.as_mut() {
            out.append(log);
        }
    }

    /// The settings this cache was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Bytes held by cached entries.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Bytes held by the free list.
    pub fn free_list_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Counters since creation.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Objects the cache keeps a header for (cached, in the free list, or only counted).
    pub fn tracked(&self) -> usize {
        self.index.len()
    }

    /// Forgets `key`'s header if it holds no data: for a request that named nothing servable
    /// (a 404, say), so that requests for made-up URLs leave nothing behind. Paper 002 keeps a
    /// header with a frequency count for every object requested (§4.2.3.1); an object that does
    /// not exist has no frequency worth keeping. Returns whether a
    /// header was forgotten.
    pub fn forget<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(id) = self.index.get(key).copied() else {
            return false;
        };
        let absent = matches!(
            self.slots[id as usize],
            Some(Slot {
                state: State::Absent,
                ..
            })
        );
        if absent {
            self.slots[id as usize] = None;
            self.index.remove(key);
            self.vacant.push(id);
        }
        absent
    }

    /// Number of cached entries.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|s| matches!(s.state, State::Cached { .. }))
            .count()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.used_bytes == 0 && self.len() == 0
    }

    /// The access frequency recorded for `key`, if the cache tracks it.
    pub fn frequency<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index
            .get(key)
            .and_then(|id| self.slot(*id))
            .map(|s| s.freq)
    }

    /// The cached value for `key`, without counting an access or changing any state.
    pub fn peek<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self
            .index
            .get(key)
            .and_then(|id| self.slot(*id))
            .map(|s| &s.state)
        {
            Some(State::Cached { value, .. }) => Some(value),
            _ => None,
        }
    }

    /// Records a request for `key` and says whether it is cached. An entry waiting in the free
    /// list is re-linked if the admission rule lets it back in (002 §4.1.5).
    pub fn access<Q>(&mut self, key: &Q) -> Access<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.stats.accesses += 1;
        self.tick_free_list();
        let id = match self.index.get(key) {
            Some(id) => *id,
            None => {
                self.track(key.to_owned());
                self.stats.misses += 1;
                return Access::Miss;
            }
        };
        let Some(slot) = self.slots[id as usize].as_mut() else {
            self.stats.misses += 1;
            return Access::Miss;
        };
        slot.freq += 1;
        let freq = slot.freq;
        match &slot.state {
            State::Cached { value, stored } => {
                let (value, stored) = (value.clone(), *stored);
                self.algorithm.hit(id, freq);
                self.count_hit(stored);
                Access::Hit {
                    value,
                    stored,
                    revived: false,
                }
            }
            State::Free { stored, .. } => {
                let stored = *stored;
                if !self.make_room(stored.bytes, freq) {
                    self.stats.misses += 1;
                    return Access::Miss;
                }
                let Some(slot) = self.slots[id as usize].as_mut() else {
                    return Access::Miss;
                };
                let State::Free { value, stored } =
                    std::mem::replace(&mut slot.state, State::Absent)
                else {
                    return Access::Miss;
                };
                slot.state = State::Cached {
                    value: value.clone(),
                    stored,
                };
                self.free_bytes -= stored.bytes;
                self.free_list.retain(|f| *f != id);
                self.used_bytes += stored.bytes;
                self.algorithm.inserted(id, freq);
                self.stats.revived += 1;
                self.count_hit(stored);
                Access::Hit {
                    value,
                    stored,
                    revived: true,
                }
            }
            State::Absent => {
                self.stats.misses += 1;
                Access::Miss
            }
        }
    }

    /// Whether an object of `object_bytes` would be admitted now, and how much of it to load.
    /// Changes nothing.
    pub fn plan<Q>(&self, key: &Q, object_bytes: u64) -> Option<Admit>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let stored = self.level_rule(object_bytes)?;
        let freq = self.frequency(key).unwrap_or(1);
        let need = stored
            .bytes
            .saturating_sub(self.config.capacity_bytes - self.used_bytes);
        let slots = &self.slots;
        let size_of = |id: Id| stored_bytes(slots, id);
        self.algorithm
            .admits(need, freq, &size_of)
            .then_some(Admit { stored })
    }

    /// Counts a refusal that [`Cache::plan`] decided (it changes nothing itself): a level
    /// reject if the level rule never stores `object_bytes`, an admission reject otherwise.
    pub fn record_refusal(&mut self, object_bytes: u64) {
        if self.level_rule(object_bytes).is_none() {
            self.stats.level_rejects += 1;
        } else {
            self.stats.admission_rejects += 1;
        }
    }

    /// Plans and caches a missed object whose value is known up front (trace replay and
    /// simulators, where the value costs nothing to make): `plan`, then `insert` if admitted,
    /// counting a refusal either way. Returns whether it was stored.
    pub fn admit<Q>(&mut self, key: &Q, object_bytes: u64, value: V) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.plan(key, object_bytes).is_none() {
            self.record_refusal(object_bytes);
            return false;
        }
        // A refusal here is counted by insert.
        self.insert(key.to_owned(), object_bytes, value).is_ok()
    }

    /// Caches `value` for `key`, an object of `object_bytes` whose first
    /// [`Admit::stored`] bytes `value` holds. Re-checks admission, so a plan that went stale is
    /// refused rather than overfilling the cache. A previous value for `key` is replaced.
    pub fn insert(&mut self, key: K, object_bytes: u64, value: V) -> Result<Inserted, Rejected> {
        self.insert_inner(key, object_bytes, value, None)
    }

    /// [`Cache::insert`], also appending the keys of the entries it evicted to `evicted` (for
    /// a caller that mirrors the cache elsewhere, such as on disk).
    pub fn insert_evicting(
        &mut self,
        key: K,
        object_bytes: u64,
        value: V,
        evicted: &mut Vec<K>,
    ) -> Result<Inserted, Rejected> {
        self.insert_inner(key, object_bytes, value, Some(evicted))
    }

    fn insert_inner(
        &mut self,
        key: K,
        object_bytes: u64,
        value: V,
        mut evicted_keys: Option<&mut Vec<K>>,
    ) -> Result<Inserted, Rejected> {
        let Some(stored) = self.level_rule(object_bytes) else {
            self.stats.level_rejects += 1;
            return Err(Rejected::Level);
        };
        let id = match self.index.get(&key) {
            Some(id) => *id,
            None => self.track(key),
        };
        let _ = self.drop_data(id);
        let freq = self.slot(id).map_or(1, |s| s.freq.max(1));
        let need = stored
            .bytes
            .saturating_sub(self.config.capacity_bytes - self.used_bytes);
        let mut victims = std::mem::take(&mut self.scratch);
        victims.clear();
        let slots = &self.slots;
        let size_of = |id: Id| stored_bytes(slots, id);
        if need > 0 && !self.algorithm.victims(need, freq, &size_of, &mut victims) {
            self.scratch = victims;
            self.stats.admission_rejects += 1;
            return Err(Rejected::Admission);
        }
        let mut max_victim_freq = None;
        for victim in &victims {
            max_victim_freq = max_victim_freq.max(self.slot(*victim).map(|s| s.freq));
            if let (Some(out), Some(slot)) = (evicted_keys.as_deref_mut(), self.slot(*victim)) {
                out.push(slot.key.clone());
            }
            self.evict(*victim);
        }
        let evicted = victims.len();
        self.scratch = victims;
        if let Some(slot) = self.slots[id as usize].as_mut() {
            slot.state = State::Cached { value, stored };
            slot.freq = freq;
        }
        self.used_bytes += stored.bytes;
        self.algorithm.inserted(id, freq);
        self.stats.inserts += 1;
        self.stats.evictions += evicted as u64;
        Ok(Inserted {
            stored,
            evicted,
            max_victim_freq,
            freq,
        })
    }

    /// Drops whatever is stored for `key` (cached or in the free list), keeping its frequency:
    /// used when the object changed. Returns whether `key` was cached.
    pub fn invalidate<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(id) = self.index.get(key).copied() else {
            return false;
        };
        self.drop_data(id)
    }

    /// Recomputes the byte accounting from scratch and checks it against the running totals
    /// and the capacity. For tests and debugging; O(n).
    pub fn audit(&self) -> Result<(), String> {
        let (mut used, mut free) = (0, 0);
        for slot in self.slots.iter().flatten() {
            match &slot.state {
                State::Cached { stored, .. } => used += stored.bytes,
                State::Free { stored, .. } => free += stored.bytes,
                State::Absent => {}
            }
        }
        if used != self.used_bytes {
            return Err(format!(
                "used bytes {} but entries sum to {used}",
                self.used_bytes
            ));
        }
        if free != self.free_bytes {
            return Err(format!(
                "free-list bytes {} but entries sum to {free}",
                self.free_bytes
            ));
        }
        if used > self.config.capacity_bytes {
            return Err(format!(
                "used bytes {used} exceed capacity {}",
                self.config.capacity_bytes
            ));
        }
        if free > self.free_list_capacity {
            return Err(format!(
                "free list {free} exceeds its bound {}",
                self.free_list_capacity
            ));
        }
        if self.index.len() > self.config.max_tracked.max(1) {
            return Err(format!(
                "{} headers exceed max_tracked {}",
                self.index.len(),
                self.config.max_tracked
            ));
        }
        Ok(())
    }

    fn level_rule(&self, object_bytes: u64) -> Option<Stored> {
        let level: Level = self.config.policy.level;
        level.stored(object_bytes, self.config.capacity_bytes, self.max_file_size)
    }

    fn slot(&self, id: Id) -> Option<&Slot<K, V>> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    fn count_hit(&mut self, stored: Stored) {
        if stored.complete {
            self.stats.complete_hits += 1;
        } else {
            self.stats.incomplete_hits += 1;
        }
    }

    /// Creates the header of a newly seen object, with frequency 1 (this access).
    fn track(&mut self, key: K) -> Id {
        if self.index.len() >= self.config.max_tracked.max(1) {
            self.sweep_headers();
        }
        let slot = Some(Slot {
            key: key.clone(),
            freq: 1,
            state: State::Absent,
        });
        let id = match self.vacant.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as Id
            }
        };
        self.index.insert(key, id);
        id
    }

    /// Forgets every header that holds no data: the bound on tracked objects.
    fn sweep_headers(&mut self) {
        self.stats.header_sweeps += 1;
        for (id, entry) in self.slots.iter_mut().enumerate() {
            if matches!(
                entry,
                Some(Slot {
                    state: State::Absent,
                    ..
                })
            ) {
                if let Some(slot) = entry.take() {
                    self.index.remove(&slot.key);
                    self.vacant.push(id as Id);
                }
            }
        }
    }

    /// Makes `bytes` available for an entry of frequency `freq`, evicting if the algorithm
    /// agrees. Returns whether the room is there.
    fn make_room(&mut self, bytes: u64, freq: u64) -> bool {
        let need = bytes.saturating_sub(self.config.capacity_bytes - self.used_bytes);
        if need == 0 {
            return true;
        }
        let mut victims = std::mem::take(&mut self.scratch);
        victims.clear();
        let slots = &self.slots;
        let size_of = |id: Id| stored_bytes(slots, id);
        let ok = self.algorithm.victims(need, freq, &size_of, &mut victims);
        if ok {
            for victim in &victims {
                self.evict(*victim);
            }
            self.stats.evictions += victims.len() as u64;
        }
        self.scratch = victims;
        ok
    }

    /// Moves a cached entry to the free list, or drops its value if the free list is off or full.
    fn evict(&mut self, id: Id) {
        self.algorithm.removed(id);
        let keep = self.config.free_list_flush_every > 0;
        let Some(slot) = self.slots[id as usize].as_mut() else {
            return;
        };
        if let State::Cached { value, stored } = std::mem::replace(&mut slot.state, State::Absent) {
            if let Some(log) = self.evicted_log.as_mut() {
                log.push(slot.key.clone());
            }
            self.used_bytes -= stored.bytes;
            if keep && self.free_bytes + stored.bytes <= self.free_list_capacity {
                slot.state = State::Free { value, stored };
                self.free_bytes += stored.bytes;
                self.free_list.push(id);
            }
        }
    }

    /// Drops the data of `id`, cached or free, keeping the header.
    /// Returns whether it was cached (the free list's evicted data does not count).
    fn drop_data(&mut self, id: Id) -> bool {
        let Some(slot) = self.slots[id as usize].as_mut() else {
            return false;
        };
        match std::mem::replace(&mut slot.state, State::Absent) {
            State::Cached { stored, .. } => {
                self.used_bytes -= stored.bytes;
                self.algorithm.removed(id);
                true
            }
            State::Free { stored, .. } => {
                self.free_bytes -= stored.bytes;
                self.free_list.retain(|f| *f != id);
                false
            }
            State::Absent => false,
        }
    }

    /// 002 §4.2.3.4: the whole free list is flushed every N accesses.
    fn tick_free_list(&mut self) {
        let every = self.config.free_list_flush_every;
        if every == 0 {
            return;
        }
        self.accesses_since_flush += 1;
        if self.accesses_since_flush < every {
            return;
        }
        self.accesses_since_flush = 0;
        self.stats.free_list_flushes += 1;
        for id in std::mem::take(&mut self.free_list) {
            if let Some(slot) = self.slots[id as usize].as_mut() {
                if matches!(slot.state, State::Free { .. }) {
                    slot.state = State::Absent;
                }
            }
        }
        self.free_bytes = 0;
    }
}

fn stored_bytes<K, V>(slots: &[Option<Slot<K, V>>], id: Id) -> u64 {
    match slots
        .get(id as usize)
        .and_then(Option::as_ref)
        .map(|s| &s.state)
    {
        Some(State::Cached { stored, .. }) => stored.bytes,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
