//! The Kademlia record store a node runs: libp2p's `MemoryStore` rules (the same limits and
//! answers), with provider records kept compactly.
//!
//! `MemoryStore` keeps each key's providers in a `SmallVec` of 20 records inline, so every key
//! costs about 3 KB whether one node provides it or twenty, and its table never shrinks: a
//! gateway and manager that saw 60,000 URLs held 150 MB of provider table for a 16 MiB store.
//! Here a key's providers are a `Vec` sized to them (one record, about 200 bytes, for an
//! object only this node holds), and the tables give memory back when they empty to a quarter.

use std::borrow::Cow;
use std::collections::{hash_map, HashMap, HashSet};

use libp2p::kad::store::{Error, RecordStore, Result};
use libp2p::kad::{ProviderRecord, Record, RecordKey, K_VALUE};
use libp2p::PeerId;

/// The store's limits (those of libp2p's `MemoryStoreConfig`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Records held at most.
    pub max_records: usize,
    /// A record's value in bytes, below this.
    pub max_value_bytes: usize,
    /// Distinct keys with provider records, at most (this node's own and others').
    pub max_provided_keys: usize,
    /// Providers remembered per key.
    pub max_providers_per_key: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_records: 1024,
            max_value_bytes: 65 * 1024,
            max_provided_keys: 1 << 17,
            max_providers_per_key: K_VALUE.get(),
        }
    }
}

/// A Kademlia record store in memory with compact provider lists.
#[derive(Debug)]
pub struct CompactStore {
    local: PeerId,
    limits: Limits,
    records: HashMap<RecordKey, Record>,
    providers: HashMap<RecordKey, Vec<ProviderRecord>>,
    /// The keys this node provides (their records are in `providers`).
    provided: HashSet<RecordKey>,
}

impl CompactStore {
    /// An empty store for the node `local`.
    pub fn new(local: PeerId, limits: Limits) -> CompactStore {
        CompactStore {
            local,
            limits,
            records: HashMap::new(),
            providers: HashMap::new(),
            provided: HashSet::new(),
        }
    }

    /// Keys with provider records.
    pub fn provider_keys(&self) -> usize {
        self.providers.len()
    }

    /// Gives memory back once the tables are mostly empty.
    fn shrink(&mut self) {
        if self.providers.capacity() > 64 && self.providers.len() < self.providers.capacity() / 4 {
            self.providers.shrink_to(self.providers.len() * 2);
        }
        if self.provided.capacity() > 64 && self.provided.len() < self.provided.capacity() / 4 {
            self.provided.shrink_to(self.provided.len() * 2);
        }
    }
}

type ProvidedIter<'a> = std::iter::FilterMap<
    std::collections::hash_set::Iter<'a, RecordKey>,
    Box<dyn FnMut(&'a RecordKey) -> Option<Cow<'a, ProviderRecord>> + 'a>,
>;

impl RecordStore for CompactStore {
    type RecordsIter<'a> =
        std::iter::Map<hash_map::Values<'a, RecordKey, Record>, fn(&'a Record) -> Cow<'a, Record>>;
    type ProvidedIter<'a> = ProvidedIter<'a>;

    fn get(&self, k: &RecordKey) -> Option<Cow<'_, Record>> {
        self.records.get(k).map(Cow::Borrowed)
    }

    fn put(&mut self, r: Record) -> Result<()> {
        if r.value.len() >= self.limits.max_value_bytes {
            return Err(Error::ValueTooLarge);
        }
        let full = self.records.len() >= self.limits.max_records;
        match self.records.entry(r.key.clone()) {
            hash_map::Entry::Occupied(mut e) => {
                e.insert(r);
            }
            hash_map::Entry::Vacant(_) if full => return Err(Error::MaxRecords),
            hash_map::Entry::Vacant(e) => {
                e.insert(r);
            }
        }
        Ok(())
    }

    fn remove(&mut self, k: &RecordKey) {
        self.records.remove(k);
    }

    fn records(&self) -> Self::RecordsIter<'_> {
        self.records.values().map(Cow::Borrowed)
    }

    fn add_provider(&mut self, record: ProviderRecord) -> Result<()> {
        let full = self.providers.len() >= self.limits.max_provided_keys;
        let list = match self.providers.entry(record.key.clone()) {
            hash_map::Entry::Occupied(e) => e.into_mut(),
            hash_map::Entry::Vacant(_) if full => return Err(Error::MaxProvidedKeys),
            hash_map::Entry::Vacant(e) => e.insert(Vec::with_capacity(1)),
        };
        if record.provider == self.local {
            self.provided.insert(record.key.clone());
        }
        if let Some(held) = list.iter_mut().find(|p| p.provider == record.provider) {
            *held = record;
            return Ok(());
        }
        if list.len() < self.limits.max_providers_per_key {
            list.push(record);
        }
        Ok(())
    }

    fn providers(&self, key: &RecordKey) -> Vec<ProviderRecord> {
        self.providers.get(key).cloned().unwrap_or_default()
    }

    fn provided(&self) -> Self::ProvidedIter<'_> {
        let local = self.local;
        let providers = &self.providers;
        self.provided
            .iter()
            .filter_map(Box::new(move |key: &RecordKey| {
                providers
                    .get(key)?
                    .iter()
                    .find(|p| p.provider == local)
                    .map(Cow::Borrowed)
            }))
    }

    fn remove_provider(&mut self, key: &RecordKey, provider: &PeerId) {
        if let hash_map::Entry::Occupied(mut e) = self.providers.entry(key.clone()) {
            e.get_mut().retain(|p| &p.provider != provider);
            if e.get().is_empty() {
                e.remove();
            }
        }
        if provider == &self.local {
            self.provided.remove(key);
        }
        self.shrink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: u32, provider: PeerId) -> ProviderRecord {
        ProviderRecord::new(RecordKey::new(&key.to_be_bytes()), provider, Vec::new())
    }

    #[test]
    fn providers_are_added_replaced_listed_and_removed() {
        let me = PeerId::random();
        let other = PeerId::random();
        let mut s = CompactStore::new(me, Limits::default());
        s.add_provider(record(1, me)).unwrap();
        s.add_provider(record(1, other)).unwrap();
        s.add_provider(record(1, other)).unwrap();
        s.add_provider(record(2, other)).unwrap();
        assert_eq!(s.providers(&RecordKey::new(&1u32.to_be_bytes())).len(), 2);
        assert_eq!(s.provided().count(), 1);
        s.remove_provider(&RecordKey::new(&1u32.to_be_bytes()), &me);
        assert_eq!(s.provided().count(), 0);
        assert_eq!(s.providers(&RecordKey::new(&1u32.to_be_bytes())).len(), 1);
        s.remove_provider(&RecordKey::new(&2u32.to_be_bytes()), &other);
        assert_eq!(s.provider_keys(), 1);
    }

    #[test]
    fn keys_and_providers_per_key_are_capped_and_the_table_shrinks() {
        let me = PeerId::random();
        let limits = Limits {
            max_provided_keys: 1000,
            max_providers_per_key: 2,
            ..Limits::default()
        };
        let mut s = CompactStore::new(me, limits);
        for k in 0..1000 {
            s.add_provider(record(k, me)).unwrap();
        }
        assert!(matches!(
            s.add_provider(record(5000, me)),
            Err(Error::MaxProvidedKeys)
        ));
        for _ in 0..3 {
            s.add_provider(record(0, PeerId::random())).unwrap();
        }
        assert_eq!(s.providers(&RecordKey::new(&0u32.to_be_bytes())).len(), 2);
        let full = s.providers.capacity();
        for k in 0..1000u32 {
            s.remove_provider(&RecordKey::new(&k.to_be_bytes()), &me);
        }
        assert!(
            s.providers.capacity() < full / 4,
            "{}",
            s.providers.capacity()
        );
        assert_eq!(s.provided().count(), 0);
    }
}
