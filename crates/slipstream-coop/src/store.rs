//! A node's content cache (004 §4.2.1): signed objects by GUID in a byte-bounded
//! `slipstream-cache` (LRU, as OceanStore's nodes, unless configured otherwise), mirrored in a
//! redb database so that a restarted node still holds its replicas.
//!
//! The database is the truth on disk and the cache the truth in memory: an object is written
//! to disk before the cache admits it, and what the cache evicts is deleted from disk. At
//! start-up every stored object is read back, decoded and re-admitted; one that does not
//! decode, or no longer fits, is deleted and counted, and nothing else is lost.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use slipstream_cache::{Access, Cache, Config, Policy};

use crate::object::{Guid, SignedObject};

const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("object store {path}: {source}")]
    Db {
        /// The database file.
        path: String,
        /// What redb said.
        source: Box<redb::Error>,
    },
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Stored (new, or a newer version than the one held).
    Stored,
    /// The store holds this version or a newer one already.
    NotNewer,
    /// The cache's policy refused it (too large, or not popular enough to displace others).
    Refused,
}

/// What the store holds, for the status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Objects held.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Objects read back from disk at start-up.
    pub restored: u64,
    /// Stored entries deleted at start-up because they did not decode or fit.
    pub dropped_at_start: u64,
    /// Objects evicted since start-up.
    pub evicted: u64,
}

/// A node's objects. Cheap to share (`Arc`); every method takes `&self`.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    db: Option<Db>,
}

#[derive(Debug)]
struct Db {
    db: Database,
    path: String,
}

#[derive(Debug)]
struct Inner {
    cache: Cache<Guid, Arc<SignedObject>>,
    /// The GUIDs the cache holds (it has no iterator).
    held: HashSet<Guid>,
    stats: StoreStats,
}

impl Store {
    /// A store of `capacity_bytes` with `policy`, persisted in the redb file `path` (created if
    /// missing), or in memory only when `path` is `None`.
    pub fn open(
        path: Option<&Path>,
        capacity_bytes: u64,
        policy: Policy,
    ) -> Result<Store, StoreError> {
        let mut config = Config::new(capacity_bytes, policy);
        // Every object fits (a replica is whole or absent), and evicted data goes at once: the
        // disk mirror must not hold what the cache dropped.
        config.max_file_size = Some(capacity_bytes);
        config.free_list_flush_every = 0;
        let mut inner = Inner {
            cache: Cache::new(config),
            held: HashSet::new(),
            stats: StoreStats {
                capacity_bytes,
                ..StoreStats::default()
            },
        };
        let Some(path) = path else {
            return Ok(Store {
                inner: Mutex::new(inner),
                db: None,
            });
        };
        let name = path.display().to_string();
        let err = |e: redb::Error| StoreError::Db {
            path: name.clone(),
            source: Box::new(e),
        };
        let db = Database::create(path).map_err(|e| err(e.into()))?;
        // Read everything back, then delete what cannot be held.
        let mut doomed: Vec<Vec<u8>> = Vec::new();
        {
            let w = db.begin_write().map_err(|e| err(e.into()))?;
            w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
            w.commit().map_err(|e| err(e.into()))?;
        }
        {
            let r = db.begin_read().map_err(|e| err(e.into()))?;
            let t = r.open_table(OBJECTS).map_err(|e| err(e.into()))?;
            for item in t.iter().map_err(|e| err(e.into()))? {
                let (k, v) = item.map_err(|e| err(e.into()))?;
                let key = k.value().to_vec();
                let decoded = SignedObject::decode(v.value())
                    .ok()
                    .filter(|o| o.guid().0.as_slice() == key.as_slice());
                let Some(object) = decoded else {
                    doomed.push(key);
                    continue;
                };
                let guid = object.guid();
                let size = object.object.size();
                let mut evicted = Vec::new();
                inner.cache.access(&guid);
                match inner
                    .cache
                    .insert_evicting(guid, size, Arc::new(object), &mut evicted)
                {
                    Ok(_) => {
                        inner.stats.restored += 1;
                        inner.held.insert(guid);
                    }
                    Err(_) => doomed.push(key),
                }
                for g in evicted {
                    inner.stats.restored -= 1;
                    inner.held.remove(&g);
                    doomed.push(g.0.to_vec());
                }
            }
        }
        inner.stats.dropped_at_start = doomed.len() as u64;
        if !doomed.is_empty() {
            let w = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
                for k in &doomed {
                    t.remove(k.as_slice()).map_err(|e| err(e.into()))?;
                }
            }
            w.commit().map_err(|e| err(e.into()))?;
        }
        Ok(Store {
            inner: Mutex::new(inner),
            db: Some(Db { db, path: name }),
        })
    }

    /// The object `guid`, if held (a request: it counts for the replacement policy).
    pub fn get(&self, guid: &Guid) -> Option<Arc<SignedObject>> {
        match self.inner.lock().cache.access(guid) {
            Access::Hit { value, .. } => Some(value),
            Access::Miss => None,
        }
    }

    /// Whether `guid` is held, without counting a request.
    pub fn contains(&self, guid: &Guid) -> bool {
        self.inner.lock().cache.peek(guid).is_some()
    }

    /// The version held of `guid`.
    pub fn version(&self, guid: &Guid) -> Option<u64> {
        self.inner.lock().cache.peek(guid).map(|o| o.object.version)
    }

    /// Stores `object` (already verified by the caller) unless a version at least as new is
    /// held. Written to disk first; then the cache admits it and what it evicts leaves the
    /// disk too.
    pub fn put(&self, object: SignedObject) -> Result<Put, StoreError> {
        let guid = object.guid();
        let size = object.object.size();
        let mut inner = self.inner.lock();
        if inner
            .cache
            .peek(&guid)
            .is_some_and(|held| held.object.version >= object.object.version)
        {
            return Ok(Put::NotNewer);
        }
        if inner.cache.plan(&guid, size).is_none() {
            inner.cache.record_refusal(size);
            return Ok(Put::Refused);
        }
        if let Some(db) = &self.db {
            db.write(|t| {
                t.insert(guid.0.as_slice(), object.encode().as_slice())
                    .map(|_| ())
            })?;
        }
        let mut evicted = Vec::new();
        let stored = inner
            .cache
            .insert_evicting(guid, size, Arc::new(object), &mut evicted)
            .is_ok();
        inner.stats.evicted += evicted.len() as u64;
        for g in &evicted {
            inner.held.remove(g);
        }
        if stored {
            inner.held.insert(guid);
        } else {
            inner.held.remove(&guid);
            evicted.push(guid);
        }
        if let Some(db) = &self.db {
            if !evicted.is_empty() {
                db.write(|t| {
                    for g in &evicted {
                        t.remove(g.0.as_slice())?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(if stored { Put::Stored } else { Put::Refused })
    }

    /// Drops `guid`; returns whether it was held.
    pub fn remove(&self, guid: &Guid) -> Result<bool, StoreError> {
        let held = {
            let mut inner = self.inner.lock();
            inner.held.remove(guid);
            inner.cache.invalidate(guid)
        };
        if let Some(db) = &self.db {
            db.write(|t| t.remove(guid.0.as_slice()).map(|_| ()))?;
        }
        Ok(held)
    }

    /// The GUIDs held (to announce them again after a restart).
    pub fn guids(&self) -> Vec<Guid> {
        self.inner.lock().held.iter().copied().collect()
    }

    /// What the store holds.
    pub fn stats(&self) -> StoreStats {
        let inner = self.inner.lock();
        StoreStats {
            objects: inner.cache.len(),
            bytes: inner.cache.used_bytes(),
            ..inner.stats
        }
    }
}

impl Db {
    fn write(
        &self,
        f: impl FnOnce(
            &mut redb::Table<'_, &'static [u8], &'static [u8]>,
        ) -> Result<(), redb::StorageError>,
    ) -> Result<(), StoreError> {
        let err = |e: redb::Error| StoreError::Db {
            path: self.path.clone(),
            source: Box::new(e),
        };
        let w = self.db.begin_write().map_err(|e| err(e.into()))?;
        {
            let mut t = w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
            f(&mut t).map_err(|e| err(e.into()))?;
        }
        w.commit().map_err(|e| err(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use bytes::Bytes;
    use libp2p::identity::Keypair;

    fn signed(key: &Keypair, url: &str, body_len: usize, version: u64) -> SignedObject {
        Object {
            url: url.to_owned(),
            status: 200,
            headers: vec![("cache-control".into(), b"max-age=60".to_vec())],
            body: Bytes::from(vec![b'x'; body_len]),
            requested_at_ms: 1,
            received_at_ms: 2,
            version,
        }
        .sign(key)
        .unwrap()
    }

    fn lru() -> Policy {
        "lru".parse().unwrap()
    }

    #[test]
    fn a_reopened_store_holds_its_objects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let a = signed(&key, "http://o/a", 100, 1);
        let b = signed(&key, "http://o/b", 100, 1);
        {
            let s = Store::open(Some(&path), 10_000, lru()).unwrap();
            assert_eq!(s.put(a.clone()).unwrap(), Put::Stored);
            assert_eq!(s.put(b.clone()).unwrap(), Put::Stored);
            assert_eq!(s.put(a.clone()).unwrap(), Put::NotNewer);
        }
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().restored, 2);
        assert_eq!(*s.get(&a.guid()).unwrap(), a);
        assert_eq!(*s.get(&b.guid()).unwrap(), b);
        let mut guids = s.guids();
        guids.sort();
        let mut want = vec![a.guid(), b.guid()];
        want.sort();
        assert_eq!(guids, want);
    }

    #[test]
    fn evicted_objects_leave_the_disk_and_newer_versions_replace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let objects: Vec<_> = (0..5)
            .map(|i| signed(&key, &format!("http://o/{i}"), 300, 1))
            .collect();
        {
            let s = Store::open(Some(&path), 1_000, lru()).unwrap();
            for o in &objects {
                s.put(o.clone()).unwrap();
            }
            assert!(s.stats().bytes <= 1_000);
            assert!(s.stats().evicted >= 2);
            let newer = signed(&key, "http://o/4", 10, 2);
            assert_eq!(s.put(newer).unwrap(), Put::Stored);
            assert_eq!(s.version(&objects[4].guid()), Some(2));
        }
        let s = Store::open(Some(&path), 1_000, lru()).unwrap();
        assert_eq!(s.stats().dropped_at_start, 0, "{:?}", s.stats());
        // The first ones were evicted, on disk too.
        assert!(!s.contains(&objects[0].guid()));
        assert_eq!(s.version(&objects[4].guid()), Some(2));
        assert_eq!(s.guids().len(), s.stats().objects);
    }

    #[test]
    fn a_corrupt_entry_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let good = signed(&key, "http://o/good", 10, 1);
        {
            let s = Store::open(Some(&path), 10_000, lru()).unwrap();
            s.put(good.clone()).unwrap();
            let db = s.db.as_ref().unwrap();
            db.write(|t| {
                t.insert([7u8; 32].as_slice(), b"garbage".as_slice())
                    .map(|_| ())
            })
            .unwrap();
        }
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().dropped_at_start, 1);
        assert_eq!(s.stats().restored, 1);
        assert!(s.contains(&good.guid()));
        // And the garbage is gone for good.
        drop(s);
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().dropped_at_start, 0);
    }

    #[test]
    fn an_object_larger_than_the_store_is_refused() {
        let key = Keypair::generate_ed25519();
        let s = Store::open(None, 1_000, lru()).unwrap();
        assert_eq!(
            s.put(signed(&key, "http://o/big", 5_000, 1)).unwrap(),
            Put::Refused
        );
        assert_eq!(s.stats().objects, 0);
    }
}
