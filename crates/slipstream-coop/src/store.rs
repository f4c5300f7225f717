//! A node's content cache (004 §4.2.1): signed objects by GUID in a byte-bounded
//! `slipstream-cache` (LRU, as OceanStore's nodes, unless configured otherwise), mirrored in a
//! redb database so that a restarted node still holds its replicas.
//!
//! The database is the truth on disk and the cache the truth in memory: an object is written
//! to disk before the cache admits it, and what the cache evicts is deleted from disk. At
//! start-up every stored object is read back, decoded and re-admitted; one that does not
//! decode, or no longer fits, is deleted and counted, and nothing else is lost.
//!
//! Past versions (time travel, the paper's future work, §8): when a newer version replaces an
//! object, the one it replaces is kept, up to [`KEEP_VERSIONS`] per object, in memory and in a
//! second table. They go with the object when it is evicted or removed. They are not counted
//! against the capacity, which bounds the current versions; at most `KEEP_VERSIONS` times as
//! much is held in all.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use slipstream_cache::{Access, Cache, Config, Policy};

use crate::object::{Guid, SignedObject};

const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
/// Past versions, keyed by GUID ‖ version (big-endian).
const VERSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("versions");

/// Past versions kept per object at most.
pub const KEEP_VERSIONS: usize = 8;

fn version_key(guid: &Guid, version: u64) -> Vec<u8> {
    let mut k = guid.0.to_vec();
    k.extend_from_slice(&version.to_be_bytes());
    k
}

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
    /// Past versions held.
    pub past_versions: usize,
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
    /// Past versions of held objects, oldest first, each with the time it was captured.
    past: HashMap<Guid, VecDeque<(u64, Arc<SignedObject>)>>,
    /// When the current version of an object was captured: the exchange time of the first copy
    /// of that version this store took. A heartbeat renews an object's exchange times (its
    /// freshness) but not this, so time travel still finds a version by when it appeared.
    /// After a restart it is the stored copy's exchange time (the last heartbeat before it).
    captured: HashMap<Guid, u64>,
    /// Objects evicted or removed since the network last asked ([`Store::take_departed`]),
    /// whose announcements it withdraws.
    departed: Vec<Guid>,
    stats: StoreStats,
}

impl Inner {
    /// When `held`, the current object of `guid`, was captured.
    fn captured_at(&self, guid: &Guid, held: &SignedObject) -> u64 {
        self.captured
            .get(guid)
            .copied()
            .unwrap_or(held.object.received_at_ms)
    }

    /// Forgets the past versions of `guids`; the keys to delete from disk.
    fn forget(&mut self, guids: &[Guid]) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for g in guids {
            self.captured.remove(g);
            if let Some(old) = self.past.remove(g) {
                keys.extend(old.iter().map(|(_, o)| version_key(g, o.object.version)));
            }
        }
        keys
    }
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
            past: HashMap::new(),
            captured: HashMap::new(),
            departed: Vec::new(),
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
            w.open_table(VERSIONS).map_err(|e| err(e.into()))?;
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
        // Past versions of the objects held come back; any other entry is deleted (its object
        // is gone, or it does not decode, or it is newer than the current version).
        let mut doomed_versions: Vec<Vec<u8>> = Vec::new();
        {
            let r = db.begin_read().map_err(|e| err(e.into()))?;
            let t = r.open_table(VERSIONS).map_err(|e| err(e.into()))?;
            for item in t.iter().map_err(|e| err(e.into()))? {
                let (k, v) = item.map_err(|e| err(e.into()))?;
                let key = k.value().to_vec();
                let keep = SignedObject::decode(v.value()).ok().filter(|o| {
                    let guid = o.guid();
                    key == version_key(&guid, o.object.version)
                        && inner.held.contains(&guid)
                        && inner
                            .cache
                            .peek(&guid)
                            .is_some_and(|cur| cur.object.version > o.object.version)
                });
                match keep {
                    // Keys iterate in version order: each list is oldest first.
                    Some(o) => inner
                        .past
                        .entry(o.guid())
                        .or_default()
                        .push_back((o.object.received_at_ms, Arc::new(o))),
                    None => doomed_versions.push(key),
                }
            }
        }
        for (guid, list) in &mut inner.past {
            while list.len() > KEEP_VERSIONS {
                if let Some((_, o)) = list.pop_front() {
                    doomed_versions.push(version_key(guid, o.object.version));
                }
            }
        }
        if !doomed.is_empty() || !doomed_versions.is_empty() {
            let w = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut t = w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
                for k in &doomed {
                    t.remove(k.as_slice()).map_err(|e| err(e.into()))?;
                }
                let mut t = w.open_table(VERSIONS).map_err(|e| err(e.into()))?;
                for k in &doomed_versions {
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

    /// The object `guid`, if held, without counting a request (for status pages: looking must
    /// not change what the policy keeps).
    pub fn peek(&self, guid: &Guid) -> Option<Arc<SignedObject>> {
        self.inner.lock().cache.peek(guid).cloned()
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
        let previous = inner.cache.peek(&guid).cloned();
        let revalidated = match &previous {
            Some(held) if held.object.version > object.object.version => return Ok(Put::NotNewer),
            // The same version fetched again (a monitor's heartbeat, 004 §5.4): with later
            // exchange times and the same content it replaces the held one in place, fresh
            // again, and leaves no past version.
            Some(held) if held.object.version == object.object.version => {
                if object.object.received_at_ms <= held.object.received_at_ms
                    || !held.object.same_content(&object.object)
                {
                    return Ok(Put::NotNewer);
                }
                true
            }
            _ => false,
        };
        let previous = if revalidated { None } else { previous };
        if inner.cache.plan(&guid, size).is_none() {
            inner.cache.record_refusal(size);
            return Ok(Put::Refused);
        }
        // The version replaced becomes a past one; the oldest past ones beyond the bound go.
        let mut trimmed = Vec::new();
        if let Some(prev) = &previous {
            let captured = inner.captured_at(&guid, prev);
            let list = inner.past.entry(guid).or_default();
            list.push_back((captured, prev.clone()));
            while list.len() > KEEP_VERSIONS {
                if let Some((_, o)) = list.pop_front() {
                    trimmed.push(version_key(&guid, o.object.version));
                }
            }
        }
        if !revalidated {
            inner.captured.insert(guid, object.object.received_at_ms);
        }
        if let Some(db) = &self.db {
            db.write(|objects, versions| {
                objects.insert(guid.0.as_slice(), object.encode().as_slice())?;
                if let Some(prev) = &previous {
                    let key = version_key(&guid, prev.object.version);
                    versions.insert(key.as_slice(), prev.encode().as_slice())?;
                }
                for k in &trimmed {
                    versions.remove(k.as_slice())?;
                }
                Ok(())
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
        let gone_versions = inner.forget(&evicted);
        inner.departed.extend_from_slice(&evicted);
        if let Some(db) = &self.db {
            if !evicted.is_empty() {
                db.write(|objects, versions| {
                    for g in &evicted {
                        objects.remove(g.0.as_slice())?;
                    }
                    for k in &gone_versions {
                        versions.remove(k.as_slice())?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(if stored { Put::Stored } else { Put::Refused })
    }

    /// The newest version of `guid` that had arrived at its gateway by `at_ms` (Unix
    /// milliseconds): the current one or a past one (time travel). A request: it counts for
    /// the replacement policy.
    pub fn at(&self, guid: &Guid, at_ms: u64) -> Option<Arc<SignedObject>> {
        self.at_captured(guid, at_ms).map(|(o, _)| o)
    }

    /// [`Store::at`], with the time the version was captured (Unix milliseconds), which a
    /// heartbeat does not move (the object's own exchange times are its last heartbeat's).
    pub fn at_captured(&self, guid: &Guid, at_ms: u64) -> Option<(Arc<SignedObject>, u64)> {
        let mut inner = self.inner.lock();
        let current = match inner.cache.access(guid) {
            Access::Hit { value, .. } => value,
            Access::Miss => return None,
        };
        let captured = inner.captured_at(guid, &current);
        if captured <= at_ms {
            return Some((current, captured));
        }
        inner
            .past
            .get(guid)?
            .iter()
            .rev()
            .find(|(t, _)| *t <= at_ms)
            .map(|(t, o)| (o.clone(), *t))
    }

    /// The versions held of `guid`, oldest first: (version, when it was captured).
    pub fn versions(&self, guid: &Guid) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        let Some(current) = inner.cache.peek(guid) else {
            return Vec::new();
        };
        let captured = inner.captured_at(guid, current);
        inner
            .past
            .get(guid)
            .into_iter()
            .flatten()
            .map(|(t, o)| (o.object.version, *t))
            .chain(std::iter::once((current.object.version, captured)))
            .collect()
    }

    /// Drops `guid`; returns whether it was held.
    pub fn remove(&self, guid: &Guid) -> Result<bool, StoreError> {
        let (held, gone_versions) = {
            let mut inner = self.inner.lock();
            inner.held.remove(guid);
            inner.departed.push(*guid);
            let gone = inner.forget(std::slice::from_ref(guid));
            (inner.cache.invalidate(guid), gone)
        };
        if let Some(db) = &self.db {
            db.write(|objects, versions| {
                objects.remove(guid.0.as_slice())?;
                for k in &gone_versions {
                    versions.remove(k.as_slice())?;
                }
                Ok(())
            })?;
        }
        Ok(held)
    }

    /// The objects evicted or removed since the last call that are not held again: their
    /// announcements are to be withdrawn (a node providing every object it ever held would
    /// keep a record per URL ever seen).
    pub fn take_departed(&self) -> Vec<Guid> {
        let mut inner = self.inner.lock();
        let mut departed = std::mem::take(&mut inner.departed);
        departed.retain(|g| !inner.held.contains(g));
        departed.sort_unstable_by_key(|g| g.0);
        departed.dedup();
        departed
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
            past_versions: inner.past.values().map(VecDeque::len).sum(),
            ..inner.stats
        }
    }
}

type Table<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

impl Db {
    /// One durable transaction over the current objects and the past versions.
    fn write(
        &self,
        f: impl FnOnce(&mut Table<'_>, &mut Table<'_>) -> Result<(), redb::StorageError>,
    ) -> Result<(), StoreError> {
        let err = |e: redb::Error| StoreError::Db {
            path: self.path.clone(),
            source: Box::new(e),
        };
        let w = self.db.begin_write().map_err(|e| err(e.into()))?;
        {
            let mut objects = w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
            let mut versions = w.open_table(VERSIONS).map_err(|e| err(e.into()))?;
            f(&mut objects, &mut versions).map_err(|e| err(e.into()))?;
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
    fn the_same_version_fetched_later_refreshes_in_place_and_leaves_no_past_version() {
        let key = Keypair::generate_ed25519();
        let s = Store::open(None, 10_000, lru()).unwrap();
        let a = signed(&key, "http://o/a", 100, 3);
        assert_eq!(s.put(a.clone()).unwrap(), Put::Stored);
        let mut later = a.object.clone();
        later.requested_at_ms += 5_000;
        later.received_at_ms += 5_000;
        let later = later.sign(&key).unwrap();
        assert_eq!(s.put(later.clone()).unwrap(), Put::Stored);
        assert_eq!(*s.get(&a.guid()).unwrap(), later);
        assert_eq!(
            s.versions(&a.guid()),
            [(3, a.object.received_at_ms)],
            "a heartbeat is not a past version, and the version's capture time stays"
        );
        assert_eq!(*s.at(&a.guid(), a.object.received_at_ms).unwrap(), later);
        // Not later, or other content under the same version: refused.
        assert_eq!(s.put(a.clone()).unwrap(), Put::NotNewer);
        let mut other = later.object.clone();
        other.received_at_ms += 1;
        other.body = bytes::Bytes::from_static(b"something else");
        assert_eq!(s.put(other.sign(&key).unwrap()).unwrap(), Put::NotNewer);
    }

    #[test]
    fn time_travel_finds_a_version_by_its_capture_not_its_last_heartbeat() {
        let key = Keypair::generate_ed25519();
        let s = Store::open(None, 10_000, lru()).unwrap();
        let at = |o: &Object, t: u64| {
            let mut o = o.clone();
            o.requested_at_ms = t;
            o.received_at_ms = t;
            o.sign(&key).unwrap()
        };
        let v1 = signed(&key, "http://o/a", 100, 1).object;
        assert_eq!(s.put(at(&v1, 1_000)).unwrap(), Put::Stored);
        assert_eq!(s.put(at(&v1, 2_000)).unwrap(), Put::Stored);
        assert_eq!(s.put(at(&v1, 3_000)).unwrap(), Put::Stored);
        let mut v2 = v1.clone();
        v2.version = 2;
        v2.body = Bytes::from_static(b"tuesday");
        assert_eq!(s.put(at(&v2, 5_000)).unwrap(), Put::Stored);
        let guid = at(&v1, 0).guid();
        assert_eq!(s.versions(&guid), [(1, 1_000), (2, 5_000)]);
        assert_eq!(s.at(&guid, 1_500).unwrap().object.version, 1);
        assert_eq!(s.at(&guid, 4_000).unwrap().object.version, 1);
        assert_eq!(s.at(&guid, 5_000).unwrap().object.version, 2);
        assert!(s.at(&guid, 999).is_none());
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
    fn evicted_and_removed_objects_are_reported_once_for_withdrawal() {
        let key = Keypair::generate_ed25519();
        let s = Store::open(None, 1_000, lru()).unwrap();
        let objects: Vec<_> = (0..5)
            .map(|i| signed(&key, &format!("http://o/{i}"), 300, 1))
            .collect();
        for o in &objects {
            s.put(o.clone()).unwrap();
        }
        let mut departed = s.take_departed();
        assert_eq!(departed.len() as u64, s.stats().evicted);
        assert!(departed.iter().all(|g| !s.contains(g)));
        assert!(s.take_departed().is_empty(), "reported once");
        // One evicted object comes back: it is not withdrawn; a removed one is.
        let back = departed.pop().unwrap();
        let again = objects.iter().find(|o| o.guid() == back).unwrap();
        s.put(again.clone()).unwrap();
        let held = s.guids()[0];
        s.remove(&held).unwrap();
        let later = s.take_departed();
        assert!(later.contains(&held));
        assert!(!later.contains(&back) || !s.contains(&back));
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
            db.write(|t, _| {
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

    fn at(key: &Keypair, url: &str, version: u64, received_at_ms: u64) -> SignedObject {
        Object {
            url: url.to_owned(),
            status: 200,
            headers: Vec::new(),
            body: Bytes::from(format!("v{version}")),
            requested_at_ms: received_at_ms - 1,
            received_at_ms,
            version,
        }
        .sign(key)
        .unwrap()
    }

    #[test]
    fn past_versions_answer_for_their_time_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let g = at(&key, "http://o/a", 1, 1_000).guid();
        {
            let s = Store::open(Some(&path), 100_000, lru()).unwrap();
            for v in 1..=3 {
                s.put(at(&key, "http://o/a", v, v * 1_000)).unwrap();
            }
            assert_eq!(s.stats().past_versions, 2);
        }
        let s = Store::open(Some(&path), 100_000, lru()).unwrap();
        assert_eq!(s.versions(&g), [(1, 1_000), (2, 2_000), (3, 3_000)]);
        let body = |ms| s.at(&g, ms).map(|o| o.object.body.clone());
        assert_eq!(body(999), None, "nothing that old");
        assert_eq!(body(1_000), Some(Bytes::from("v1")));
        assert_eq!(body(2_500), Some(Bytes::from("v2")));
        assert_eq!(body(u64::MAX), Some(Bytes::from("v3")));
        // Bounded: the oldest past versions go.
        for v in 4..=(KEEP_VERSIONS as u64 + 5) {
            s.put(at(&key, "http://o/a", v, v * 1_000)).unwrap();
        }
        assert_eq!(s.stats().past_versions, KEEP_VERSIONS);
        assert_eq!(body(1_500), None);
        // Removing the object removes its past, on disk too.
        assert!(s.remove(&g).unwrap());
        assert_eq!(s.stats().past_versions, 0);
        drop(s);
        let s = Store::open(Some(&path), 100_000, lru()).unwrap();
        assert!(s.versions(&g).is_empty());
        assert_eq!(s.stats().past_versions, 0);
    }

    #[test]
    fn an_evicted_object_takes_its_past_with_it() {
        let key = Keypair::generate_ed25519();
        let s = Store::open(None, 600, lru()).unwrap();
        let a = at(&key, "http://o/a", 1, 1_000).guid();
        s.put(at(&key, "http://o/a", 1, 1_000)).unwrap();
        s.put(at(&key, "http://o/a", 2, 2_000)).unwrap();
        assert_eq!(s.stats().past_versions, 1);
        for i in 0..20 {
            s.put(signed(&key, &format!("http://o/filler{i}"), 100, 1))
                .unwrap();
        }
        assert!(!s.contains(&a));
        assert_eq!(s.stats().past_versions, 0);
        assert!(s.at(&a, u64::MAX).is_none());
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
