//! A node's content cache (004 §4.2.1): signed objects by GUID in a byte-bounded
//! `slipstream-cache` (LRU, as OceanStore's nodes, unless configured otherwise), mirrored in a
//! redb database so that a restarted node still holds its replicas.
//!
//! The database is the truth on disk and the cache the truth in memory: an object is written
//! to disk before the cache admits it, and what the cache evicts is deleted from disk. At
//! start-up every stored object is read back, decoded and re-admitted; one that does not
//! decode, or no longer fits, is deleted and counted, and nothing else is lost.
//!
//! Integrity at rest: nothing read back from disk is trusted. At start-up each object's
//! signature is checked under its own provider's key (once: the network checked that key
//! against the trusted ones when the object arrived), and the store keeps beside every object
//! the SHA-256 digest of the verified copy ([`SignedObject::digest`]). Every read that serves
//! an object ([`Store::get`], [`Store::at`]) hashes it again first. An object that fails
//! either check is quarantined: deleted from memory and disk and queued for withdrawal
//! ([`Store::take_departed`]), so that the read is a miss and the object comes again from a
//! peer or the origin. A file the database library cannot open or read (an error, or a panic
//! inside it, which is caught) is moved aside as `store.redb.corrupt-<unix time>`, and the
//! store starts afresh with the objects it did read and verify ([`Store::recovery`] says so).
//!
//! Past versions (time travel, the paper's future work, §8): when a newer version replaces an
//! object, the one it replaces is kept, up to [`KEEP_VERSIONS`] per object, in memory and in a
//! second table. They go with the object when it is evicted or removed. They are not counted
//! against the capacity, which bounds the current versions; at most `KEEP_VERSIONS` times as
//! much is held in all.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
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

/// Why the store failed. Each message carries its cause and is one line; the cause is not
/// also a `source()`, or an error chain would print it twice (callers log these with `%e`).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("object store {path}: {cause}")]
    Db {
        /// The database file.
        path: String,
        /// What redb said.
        cause: Box<redb::Error>,
    },
    /// The database library panicked (on a damaged file); the panic was caught.
    #[error("object store {path}: the database library failed ({detail}); the file is damaged")]
    Damaged {
        /// The database file.
        path: String,
        /// The panic's message and place.
        detail: String,
    },
    /// An unreadable database file could not be moved aside.
    #[error(
        "object store {path} is unreadable ({why}) and could not be moved aside ({cause}): \
         move or delete it, then start again"
    )]
    SetAside {
        /// The database file.
        path: String,
        /// Why it is unreadable.
        why: String,
        /// Why the rename failed.
        cause: std::io::Error,
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
    /// Stored entries deleted at start-up because they did not decode or fit, or failed their
    /// signature check.
    pub dropped_at_start: u64,
    /// Objects whose signature (at start-up) or digest (when served) did not match: altered
    /// at rest, deleted, and fetched again on the next request.
    pub quarantined: u64,
    /// Objects evicted since start-up.
    pub evicted: u64,
    /// Past versions held.
    pub past_versions: usize,
}

/// How the store came back from a database file it could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// What the database library said.
    pub why: String,
    /// Where the unreadable file now is.
    pub moved_to: PathBuf,
    /// The objects read and verified before the damage, kept in the new file.
    pub kept: usize,
}

/// A node's objects. Cheap to share (`Arc`); every method takes `&self`.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    db: Option<Db>,
    recovery: Option<Recovery>,
}

#[derive(Debug)]
struct Db {
    db: Database,
    path: String,
}

/// An object and the digest of its verified copy.
#[derive(Debug, Clone)]
struct Sealed {
    object: Arc<SignedObject>,
    digest: [u8; 32],
}

impl Sealed {
    /// Seals `object`, which the caller has verified.
    fn new(object: SignedObject) -> Sealed {
        Sealed {
            digest: object.digest(),
            object: Arc::new(object),
        }
    }

    /// Whether the object is still the copy that was verified.
    fn intact(&self) -> bool {
        self.object.digest() == self.digest
    }

    fn version(&self) -> u64 {
        self.object.object.version
    }
}

#[derive(Debug)]
struct Inner {
    cache: Cache<Guid, Sealed>,
    /// The GUIDs the cache holds (it has no iterator).
    held: HashSet<Guid>,
    /// Past versions of held objects, oldest first, each with the time it was captured.
    past: HashMap<Guid, VecDeque<(u64, Sealed)>>,
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
    fn new(capacity_bytes: u64, policy: Policy) -> Inner {
        let mut config = Config::new(capacity_bytes, policy);
        // Every object fits (a replica is whole or absent), and evicted data goes at once: the
        // disk mirror must not hold what the cache dropped.
        config.max_file_size = Some(capacity_bytes);
        config.free_list_flush_every = 0;
        Inner {
            cache: Cache::new(config),
            held: HashSet::new(),
            past: HashMap::new(),
            captured: HashMap::new(),
            departed: Vec::new(),
            stats: StoreStats {
                capacity_bytes,
                ..StoreStats::default()
            },
        }
    }

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
                keys.extend(old.iter().map(|(_, o)| version_key(g, o.version())));
            }
        }
        keys
    }

    /// Reads every object and past version back from `db` into memory, checking each, and
    /// deletes from `db` what cannot be held. An error leaves in memory what was read before it.
    fn restore(&mut self, db: &Database) -> Result<(), redb::Error> {
        let mut doomed: Vec<Vec<u8>> = Vec::new();
        {
            let w = db.begin_write()?;
            w.open_table(OBJECTS)?;
            w.open_table(VERSIONS)?;
            w.commit()?;
        }
        {
            let r = db.begin_read()?;
            let t = r.open_table(OBJECTS)?;
            for item in t.iter()? {
                let (k, v) = item?;
                let key = k.value().to_vec();
                let object = match SignedObject::decode(v.value()) {
                    Ok(o) if o.guid().0.as_slice() == key.as_slice() => o,
                    _ => {
                        doomed.push(key);
                        continue;
                    }
                };
                // Altered at rest: the signature no longer verifies under the object's own
                // provider key.
                if object
                    .verify(std::slice::from_ref(&object.provider), None)
                    .is_err()
                {
                    self.stats.quarantined += 1;
                    doomed.push(key);
                    continue;
                }
                let guid = object.guid();
                let size = object.object.size();
                let mut evicted = Vec::new();
                self.cache.access(&guid);
                match self
                    .cache
                    .insert_evicting(guid, size, Sealed::new(object), &mut evicted)
                {
                    Ok(_) => {
                        self.stats.restored += 1;
                        self.held.insert(guid);
                    }
                    Err(_) => doomed.push(key),
                }
                for g in evicted {
                    self.stats.restored -= 1;
                    self.held.remove(&g);
                    doomed.push(g.0.to_vec());
                }
            }
        }
        self.stats.dropped_at_start = doomed.len() as u64;
        // Past versions of the objects held come back; any other entry is deleted (its object
        // is gone, or it does not decode or verify, or it is newer than the current version).
        let mut doomed_versions: Vec<Vec<u8>> = Vec::new();
        {
            let r = db.begin_read()?;
            let t = r.open_table(VERSIONS)?;
            for item in t.iter()? {
                let (k, v) = item?;
                let key = k.value().to_vec();
                let keep = SignedObject::decode(v.value()).ok().filter(|o| {
                    let guid = o.guid();
                    key == version_key(&guid, o.object.version)
                        && self.held.contains(&guid)
                        && self
                            .cache
                            .peek(&guid)
                            .is_some_and(|cur| cur.version() > o.object.version)
                        && o.verify(std::slice::from_ref(&o.provider), None).is_ok()
                });
                match keep {
                    // Keys iterate in version order: each list is oldest first.
                    Some(o) => self
                        .past
                        .entry(o.guid())
                        .or_default()
                        .push_back((o.object.received_at_ms, Sealed::new(o))),
                    None => doomed_versions.push(key),
                }
            }
        }
        for (guid, list) in &mut self.past {
            while list.len() > KEEP_VERSIONS {
                if let Some((_, o)) = list.pop_front() {
                    doomed_versions.push(version_key(guid, o.version()));
                }
            }
        }
        if !doomed.is_empty() || !doomed_versions.is_empty() {
            let w = db.begin_write()?;
            {
                let mut t = w.open_table(OBJECTS)?;
                for k in &doomed {
                    t.remove(k.as_slice())?;
                }
                let mut t = w.open_table(VERSIONS)?;
                for k in &doomed_versions {
                    t.remove(k.as_slice())?;
                }
            }
            w.commit()?;
        }
        Ok(())
    }
}

impl Store {
    /// A store of `capacity_bytes` with `policy`, persisted in the redb file `path` (created if
    /// missing), or in memory only when `path` is `None`.
    ///
    /// A file that cannot be opened or read whole is moved aside and replaced by a new one
    /// holding what was read ([`Store::recovery`]); an error means that even that failed.
    pub fn open(
        path: Option<&Path>,
        capacity_bytes: u64,
        policy: Policy,
    ) -> Result<Store, StoreError> {
        let mut inner = Inner::new(capacity_bytes, policy);
        let Some(path) = path else {
            return Ok(Store {
                inner: Mutex::new(inner),
                db: None,
                recovery: None,
            });
        };
        let name = path.display().to_string();
        // A panic inside redb leaves `inner` as it was after the last object admitted: the
        // calls that can panic come between admissions, never during one.
        let restored = guarded(|| {
            let db = Database::create(path)?;
            inner.restore(&db)?;
            Ok::<_, redb::Error>(db)
        });
        let why = match restored {
            Ok(Ok(db)) => {
                return Ok(Store {
                    inner: Mutex::new(inner),
                    db: Some(Db { db, path: name }),
                    recovery: None,
                })
            }
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("the database library failed: {panic}"),
        };
        let moved_to = set_aside(path).map_err(|cause| StoreError::SetAside {
            path: name.clone(),
            why: why.clone(),
            cause,
        })?;
        let db = match guarded(|| Database::create(path)) {
            Ok(Ok(db)) => Db { db, path: name },
            Ok(Err(e)) => {
                return Err(StoreError::Db {
                    path: name,
                    cause: Box::new(e.into()),
                })
            }
            Err(detail) => return Err(StoreError::Damaged { path: name, detail }),
        };
        // What was read and verified before the damage goes into the new file.
        let kept: Vec<(Guid, Sealed)> = inner
            .held
            .iter()
            .filter_map(|g| Some((*g, inner.cache.peek(g)?.clone())))
            .collect();
        db.write(|objects, versions| {
            for (guid, sealed) in &kept {
                objects.insert(guid.0.as_slice(), sealed.object.encode().as_slice())?;
                for (_, past) in inner.past.get(guid).into_iter().flatten() {
                    let key = version_key(guid, past.version());
                    versions.insert(key.as_slice(), past.object.encode().as_slice())?;
                }
            }
            Ok(())
        })?;
        Ok(Store {
            inner: Mutex::new(inner),
            db: Some(db),
            recovery: Some(Recovery {
                why,
                moved_to,
                kept: kept.len(),
            }),
        })
    }

    /// Whether [`Store::open`] found its file unreadable, and what it did.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// `sealed`, the object `guid` as read from the store, if it is still the copy that was
    /// verified; if not, it is quarantined and this is a miss.
    fn checked(&self, guid: &Guid, sealed: Sealed) -> Option<Arc<SignedObject>> {
        if sealed.intact() {
            return Some(sealed.object);
        }
        self.quarantine(guid, &sealed.object);
        None
    }

    /// Drops `guid`, whose copy `bad` failed its check, unless another copy replaced it since.
    fn quarantine(&self, guid: &Guid, bad: &Arc<SignedObject>) {
        {
            let inner = self.inner.lock();
            let held_bad = inner
                .cache
                .peek(guid)
                .is_some_and(|s| Arc::ptr_eq(&s.object, bad));
            let past_bad = inner
                .past
                .get(guid)
                .is_some_and(|l| l.iter().any(|(_, s)| Arc::ptr_eq(&s.object, bad)));
            if !held_bad && !past_bad {
                return;
            }
        }
        tracing::warn!(%guid, "a stored object failed its integrity check; dropped, to be fetched again");
        self.inner.lock().stats.quarantined += 1;
        if let Err(e) = self.remove(guid) {
            // Gone from memory all the same; the next start checks the disk copy again.
            tracing::warn!(%guid, error = %e, "could not delete a quarantined object from disk");
        }
    }

    /// The object `guid`, if held (a request: it counts for the replacement policy), checked
    /// against its digest first.
    pub fn get(&self, guid: &Guid) -> Option<Arc<SignedObject>> {
        let sealed = match self.inner.lock().cache.access(guid) {
            Access::Hit { value, .. } => value,
            Access::Miss => return None,
        };
        self.checked(guid, sealed)
    }

    /// The object `guid`, if held, without counting a request (for status pages: looking must
    /// not change what the policy keeps).
    pub fn peek(&self, guid: &Guid) -> Option<Arc<SignedObject>> {
        self.inner.lock().cache.peek(guid).map(|s| s.object.clone())
    }

    /// Whether `guid` is held, without counting a request.
    pub fn contains(&self, guid: &Guid) -> bool {
        self.inner.lock().cache.peek(guid).is_some()
    }

    /// The version held of `guid`.
    pub fn version(&self, guid: &Guid) -> Option<u64> {
        self.inner.lock().cache.peek(guid).map(Sealed::version)
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
            Some(held) if held.version() > object.object.version => return Ok(Put::NotNewer),
            // The same version fetched again (a monitor's heartbeat, 004 §5.4): with later
            // exchange times and the same content it replaces the held one in place, fresh
            // again, and leaves no past version.
            Some(held) if held.version() == object.object.version => {
                let held = &held.object.object;
                if object.object.received_at_ms <= held.received_at_ms
                    || !held.same_content(&object.object)
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
            let captured = inner.captured_at(&guid, &prev.object);
            let list = inner.past.entry(guid).or_default();
            list.push_back((captured, prev.clone()));
            while list.len() > KEEP_VERSIONS {
                if let Some((_, o)) = list.pop_front() {
                    trimmed.push(version_key(&guid, o.version()));
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
                    let key = version_key(&guid, prev.version());
                    versions.insert(key.as_slice(), prev.object.encode().as_slice())?;
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
            .insert_evicting(guid, size, Sealed::new(object), &mut evicted)
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
        let (found, captured) = {
            let mut inner = self.inner.lock();
            let current = match inner.cache.access(guid) {
                Access::Hit { value, .. } => value,
                Access::Miss => return None,
            };
            let captured = inner.captured_at(guid, &current.object);
            if captured <= at_ms {
                (current, captured)
            } else {
                inner
                    .past
                    .get(guid)?
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= at_ms)
                    .map(|(t, o)| (o.clone(), *t))?
            }
        };
        Some((self.checked(guid, found)?, captured))
    }

    /// The versions held of `guid`, oldest first: (version, when it was captured).
    pub fn versions(&self, guid: &Guid) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        let Some(current) = inner.cache.peek(guid) else {
            return Vec::new();
        };
        let captured = inner.captured_at(guid, &current.object);
        inner
            .past
            .get(guid)
            .into_iter()
            .flatten()
            .map(|(t, o)| (o.version(), *t))
            .chain(std::iter::once((current.version(), captured)))
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
            cause: Box::new(e),
        };
        let written = guarded(|| {
            let w = self.db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut objects = w.open_table(OBJECTS).map_err(|e| err(e.into()))?;
                let mut versions = w.open_table(VERSIONS).map_err(|e| err(e.into()))?;
                f(&mut objects, &mut versions).map_err(|e| err(e.into()))?;
            }
            w.commit().map_err(|e| err(e.into()))
        });
        written.unwrap_or_else(|detail| {
            Err(StoreError::Damaged {
                path: self.path.clone(),
                detail,
            })
        })
    }
}

/// Renames the unreadable file `path` to `<path>.corrupt-<unix time>` (a free name), where it
/// stays for whoever wants to look at it.
fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".corrupt-{secs}"));
    let mut aside = PathBuf::from(&name);
    let mut n = 1;
    while aside.exists() {
        n += 1;
        let mut other = name.clone();
        other.push(format!("-{n}"));
        aside = PathBuf::from(other);
    }
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

thread_local! {
    /// Whether this thread is inside [`guarded`]: its panics are caught and reported, not
    /// printed.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    /// The message and place of the last panic caught on this thread.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic into its message and place. redb panics on some damaged files
/// (a truncated one, for instance) rather than returning an error; a node must say which file
/// is damaged and carry on, not print a backtrace. The default panic hook is wrapped once, to
/// stay quiet on threads inside `guarded` and behave as before everywhere else.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.get() {
                return previous(info);
            }
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            let place = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let line = format!("{message}{place}").replace('\n', " ");
            CAUGHT.set(Some(line));
        }));
    });
    let outer = GUARDED.replace(true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.set(outer);
    result.map_err(|_| CAUGHT.take().unwrap_or_else(|| "a panic".to_owned()))
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

    #[test]
    fn an_object_altered_on_disk_is_quarantined_at_start_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let good = signed(&key, "http://o/good", 100, 1);
        let bad = signed(&key, "http://o/bad", 100, 1);
        {
            let s = Store::open(Some(&path), 10_000, lru()).unwrap();
            s.put(good.clone()).unwrap();
            s.put(bad.clone()).unwrap();
            // Eight bytes of the body flipped: it still decodes, under the same GUID.
            let mut altered = bad.clone();
            let mut body = altered.object.body.to_vec();
            for b in &mut body[10..18] {
                *b ^= 0xff;
            }
            altered.object.body = Bytes::from(body);
            s.db.as_ref()
                .unwrap()
                .write(|t, _| {
                    t.insert(bad.guid().0.as_slice(), altered.encode().as_slice())
                        .map(|_| ())
                })
                .unwrap();
        }
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().quarantined, 1);
        assert_eq!(s.stats().restored, 1);
        assert!(s.get(&bad.guid()).is_none(), "a miss: fetched again");
        assert_eq!(*s.get(&good.guid()).unwrap(), good);
        assert!(!s.guids().contains(&bad.guid()), "not announced again");
        // It can be stored again, and survives the next start.
        assert_eq!(s.put(bad.clone()).unwrap(), Put::Stored);
        drop(s);
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().quarantined, 0);
        assert_eq!(*s.get(&bad.guid()).unwrap(), bad);
    }

    #[test]
    fn a_copy_altered_after_its_check_is_quarantined_when_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.redb");
        let key = Keypair::generate_ed25519();
        let a = signed(&key, "http://o/a", 100, 1);
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        s.put(a.clone()).unwrap();
        assert!(s.take_departed().is_empty());
        {
            // The held copy changes under its digest (a flipped bit in memory).
            let mut inner = s.inner.lock();
            let mut altered = a.clone();
            altered.object.body = Bytes::from(vec![b'y'; 100]);
            let sealed = Sealed {
                object: Arc::new(altered),
                digest: a.digest(),
            };
            inner
                .cache
                .insert_evicting(a.guid(), a.object.size(), sealed, &mut Vec::new())
                .unwrap();
        }
        assert!(
            s.at(&a.guid(), u64::MAX).is_none(),
            "a miss, not the altered body"
        );
        assert!(s.get(&a.guid()).is_none());
        assert_eq!(s.stats().quarantined, 1);
        assert_eq!(
            s.take_departed(),
            [a.guid()],
            "its announcement is withdrawn"
        );
        drop(s);
        let s = Store::open(Some(&path), 10_000, lru()).unwrap();
        assert_eq!(s.stats().objects, 0, "gone from disk too");
    }

    #[test]
    fn a_file_the_database_cannot_read_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let key = Keypair::generate_ed25519();
        let a = signed(&key, "http://o/a", 100, 1);
        let full = dir.path().join("full.redb");
        {
            let s = Store::open(Some(&full), 10_000, lru()).unwrap();
            for i in 0..50 {
                s.put(signed(&key, &format!("http://o/{i}"), 1_000, 1))
                    .unwrap();
            }
        }
        let len = std::fs::metadata(&full).unwrap().len() as usize;
        let whole = std::fs::read(&full).unwrap();
        let cases: [(&str, Vec<u8>); 3] = [
            ("garbage", vec![0x5a; 4096]),
            ("truncated", whole[..len / 2].to_vec()),
            ("header-only", whole[..64].to_vec()),
        ];
        for (what, bytes) in cases {
            let path = dir.path().join(format!("{what}.redb"));
            std::fs::write(&path, &bytes).unwrap();
            let s =
                Store::open(Some(&path), 100_000, lru()).unwrap_or_else(|e| panic!("{what}: {e}"));
            let recovery = s
                .recovery()
                .unwrap_or_else(|| panic!("{what}: opened as is"));
            assert!(!recovery.why.contains('\n'), "{what}: {}", recovery.why);
            assert_eq!(std::fs::read(&recovery.moved_to).unwrap(), bytes, "{what}");
            // The new file works, and holds what it is given.
            s.put(a.clone()).unwrap();
            drop(s);
            let s = Store::open(Some(&path), 100_000, lru()).unwrap();
            assert!(s.recovery().is_none(), "{what}");
            assert_eq!(*s.get(&a.guid()).unwrap(), a, "{what}");
        }
    }

    /// The cost of the check on the hit path, per object size. Not a pass/fail test (speed is
    /// written down, not asserted): run in release with
    /// `cargo test --release -p slipstream-coop --lib digest_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn digest_cost() {
        let key = Keypair::generate_ed25519();
        for size in [1_024, 16 * 1_024, 256 * 1_024, 1 << 20] {
            let o = signed(&key, "http://o/a", size, 1);
            let s = Store::open(None, 1 << 30, lru()).unwrap();
            s.put(o.clone()).unwrap();
            let g = o.guid();
            let n = (200_000_000 / size).max(100) as u32;
            let t = std::time::Instant::now();
            for _ in 0..n {
                assert!(s.get(&g).is_some());
            }
            let checked = t.elapsed() / n;
            let t = std::time::Instant::now();
            for _ in 0..n {
                assert!(s.peek(&g).is_some());
            }
            let unchecked = t.elapsed() / n;
            let t = std::time::Instant::now();
            let m = n.min(2_000);
            for _ in 0..m {
                assert!(o.verify(std::slice::from_ref(&o.provider), None).is_ok());
            }
            let verify = t.elapsed() / m;
            println!(
                "body {size} B: get (checked) {} ns, peek (unchecked) {} ns, signature check {} ns",
                checked.as_nanos(),
                unchecked.as_nanos(),
                verify.as_nanos()
            );
        }
    }
}
