//! The node's own directory entries and replica bodies, persisted in redb.
//!
//! Every write is one redb transaction committed with redb's default (immediate) durability:
//! when a method returns `Ok`, the write survives a crash or restart, and when it returns an
//! error, nothing of it was applied. The store is the authority for this node's entries; it
//! keeps an `Own` in memory, loaded at open, that assigns the versions.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::directory::{Entry, Own, ParseError, Pattern};

/// Own entries: pattern text → encoded `Entry` (the gossip value).
const ENTRIES: TableDefinition<&str, &str> = TableDefinition::new("entries");
/// Replica bodies: logical URL → (content type, bytes).
const BODIES: TableDefinition<&str, (&str, &[u8])> = TableDefinition::new("bodies");

/// A replica's content: its media type and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// The `Content-Type` it is served with.
    pub content_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Content {
    /// Content of type `content_type`.
    pub fn new(content_type: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Content {
        Content {
            content_type: content_type.into(),
            bytes: bytes.into(),
        }
    }
}

/// Why a store operation failed. Nothing of a failed write was applied; retrying is safe.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store's directory could not be created (internal).
    #[error("replica store: cannot create {}: {source}", .path.display())]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database file is held by another process: two nodes given one data directory.
    #[error(
        "replica store: {} is in use by another process (each cluster member needs a data \
         directory of its own: set cluster.data_dir)",
        .path.display()
    )]
    InUse {
        /// The database file.
        path: std::path::PathBuf,
    },
    /// The database could not be opened, read or written (internal: disk, permissions).
    /// Displayed with its cause, which is not repeated as a source.
    #[error("replica store: {0}")]
    Db(redb::Error),
    /// A caller-supplied pattern or physical URL is malformed (downstream's fault).
    #[error("replica store: {0}")]
    Invalid(#[source] ParseError),
    /// An entry read back from the database does not parse: the file is corrupt (internal).
    #[error("replica store: corrupt entry for {pattern:?}: {source}")]
    Corrupt {
        /// The stored pattern text.
        pattern: String,
        /// What is wrong with it.
        #[source]
        source: ParseError,
    },
}

fn db_err(error: impl Into<redb::Error>) -> Error {
    Error::Db(error.into())
}

/// The persistent store of one node.
#[derive(Debug)]
pub struct Store {
    db: Database,
    own: Own,
}

impl Store {
    /// Opens the database at `path`, creating it if absent, and loads the node's entries.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, Error> {
        let path = path.as_ref();
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::InUse {
                path: path.to_owned(),
            },
            other => db_err(other),
        })?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(ENTRIES).map_err(db_err)?;
        txn.open_table(BODIES).map_err(db_err)?;
        txn.commit().map_err(db_err)?;

        let mut entries = Vec::new();
        {
            let txn = db.begin_read().map_err(db_err)?;
            let table = txn.open_table(ENTRIES).map_err(db_err)?;
            for row in table.iter().map_err(db_err)? {
                let (key, value) = row.map_err(db_err)?;
                let text = key.value();
                let corrupt = |source| Error::Corrupt {
                    pattern: text.to_owned(),
                    source,
                };
                let pattern = Pattern::parse(text).map_err(|e| corrupt(ParseError::Logical(e)))?;
                let entry = Entry::decode(&pattern, value.value().as_bytes()).map_err(corrupt)?;
                entries.push((pattern, entry));
            }
        }
        Ok(Store {
            db,
            own: Own::from_entries(entries),
        })
    }

    /// This node's entries, tombstones included, as last acknowledged.
    pub fn own(&self) -> &Own {
        &self.own
    }

    /// Creates or updates this node's replica of `pattern` at `physical`, storing `body` (if
    /// given) under the logical URL of an exact pattern, in one transaction. Returns the entry
    /// written.
    pub fn put(
        &mut self,
        pattern: &Pattern,
        physical: &str,
        body: Option<&Content>,
    ) -> Result<Entry, Error> {
        let entry = self
            .own
            .next_put(pattern, physical)
            .map_err(Error::Invalid)?;
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(db_err)?;
            entries
                .insert(pattern.to_string().as_str(), entry.encode().as_str())
                .map_err(db_err)?;
            if let (Some(body), Pattern::Exact(url)) = (body, pattern) {
                let mut bodies = txn.open_table(BODIES).map_err(db_err)?;
                bodies
                    .insert(
                        url.as_str(),
                        (body.content_type.as_str(), body.bytes.as_slice()),
                    )
                    .map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)?;
        self.own.record(pattern.clone(), entry.clone());
        Ok(entry)
    }

    /// Deletes this node's replica of `pattern`: writes a tombstone and drops the bodies it
    /// covers, in one transaction. Returns the tombstone, or `None` if there was no live entry.
    pub fn delete(&mut self, pattern: &Pattern) -> Result<Option<Entry>, Error> {
        let Some(entry) = self.own.next_delete(pattern) else {
            return Ok(None);
        };
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(db_err)?;
            entries
                .insert(pattern.to_string().as_str(), entry.encode().as_str())
                .map_err(db_err)?;
            let mut bodies = txn.open_table(BODIES).map_err(db_err)?;
            match pattern {
                Pattern::Exact(url) => {
                    bodies.remove(url.as_str()).map_err(db_err)?;
                }
                Pattern::Prefix(prefix) => {
                    let covered: Vec<String> = bodies
                        .range(prefix.as_str()..)
                        .map_err(db_err)?
                        .map(|row| row.map(|(k, _)| k.value().to_owned()))
                        .take_while(|k| k.as_ref().map_or(true, |k| k.starts_with(prefix.as_str())))
                        .collect::<Result<_, _>>()
                        .map_err(db_err)?;
                    // A live exact entry of this node keeps its body: it overrides the
                    // wildcard (see `Directory::resolve`) and is not deleted with it.
                    for url in covered {
                        let exact = Pattern::Exact(url.clone());
                        if self.own.entries().any(|(p, e)| *p == exact && !e.deleted) {
                            continue;
                        }
                        bodies.remove(url.as_str()).map_err(db_err)?;
                    }
                }
            }
        }
        txn.commit().map_err(db_err)?;
        self.own.record(pattern.clone(), entry.clone());
        Ok(Some(entry))
    }

    /// Stores a replica body under a logical URL (one covered by a wildcard entry, or an
    /// update of an exact entry's content), in one transaction.
    pub fn put_body(&self, url: &str, body: &Content) -> Result<(), Error> {
        let txn = self.db.begin_write().map_err(db_err)?;
        txn.open_table(BODIES)
            .map_err(db_err)?
            .insert(url, (body.content_type.as_str(), body.bytes.as_slice()))
            .map_err(db_err)?;
        txn.commit().map_err(db_err)
    }

    /// The body stored under a logical URL.
    pub fn body(&self, url: &str) -> Result<Option<Content>, Error> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(BODIES).map_err(db_err)?;
        Ok(table.get(url).map_err(db_err)?.map(|v| {
            let (content_type, bytes) = v.value();
            Content::new(content_type, bytes)
        }))
    }
}

#[cfg(test)]
mod tests;
