//! A node's identity in its cluster: an Ed25519 key pair kept in the node's data directory,
//! with which it signs every value it gossips.
//!
//! The cluster secret (see `seal`) keeps strangers out of gossip; the node key keeps members
//! apart. Scuttlebutt relays every node's state through every other, so without signatures any
//! member could write values under another's name. A signed value is `<signature> <payload>`,
//! the signature (base64, no padding) over the cluster id, the node's name, the key and the
//! payload, so it cannot be replayed under another name, key or cluster. Each node publishes
//! its public key under [`KEY_KEY`]; peers bind a name to the first key they hear for it (see
//! `cluster`) and refuse values signed by any other.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine;
use ring::signature::{self, Ed25519KeyPair, KeyPair};

/// The gossip key holding a node's public key.
pub const KEY_KEY: &str = "node:key";

/// The file in the data directory holding the node's key pair (PKCS#8).
pub const KEY_FILE: &str = "node.key";

/// Why the node's key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the key file failed.
    #[error("node key {}: {source}", path.display())]
    Io {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key file holds something else than a key.
    #[error(
        "node key {}: not an Ed25519 key ({reason}); restore the node's key, or move the file \
         away and start the node under a new name (peers keep the old name bound to the old key)",
        path.display()
    )]
    Invalid {
        /// The key file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
}

/// A node's key pair.
pub struct Identity {
    pair: Ed25519KeyPair,
    public: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Loads the node's key from `dir`, or makes one and stores it (mode 0600) when there is
    /// none.
    pub fn load_or_create(dir: &Path) -> Result<Identity, Error> {
        let path = dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Identity::from_pkcs8(&bytes).map_err(|reason| Error::Invalid {
                path: path.clone(),
                reason,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rng = ring::rand::SystemRandom::new();
                let doc = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| Error::Invalid {
                    path: path.clone(),
                    reason: "no randomness to make a key".into(),
                })?;
                write_private(&path, doc.as_ref()).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                Identity::from_pkcs8(doc.as_ref()).map_err(|reason| Error::Invalid { path, reason })
            }
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// A key pair from its PKCS#8 document.
    pub fn from_pkcs8(bytes: &[u8]) -> Result<Identity, String> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(bytes).map_err(|e| e.to_string())?;
        let public = B64.encode(pair.public_key().as_ref());
        Ok(Identity { pair, public })
    }

    /// A fresh key pair that is not stored (tests, tools).
    pub fn ephemeral() -> Identity {
        let rng = ring::rand::SystemRandom::new();
        let doc = Ed25519KeyPair::generate_pkcs8(&rng).expect("the system has randomness");
        Identity::from_pkcs8(doc.as_ref()).expect("a key ring just made")
    }

    /// The public key, as gossiped under [`KEY_KEY`].
    pub fn public(&self) -> &str {
        &self.public
    }

    /// `payload` signed as the value of `key` of node `name` in cluster `cluster`.
    pub fn sign(&self, cluster: &str, name: &str, key: &str, payload: &str) -> String {
        let sig = self.pair.sign(&message(cluster, name, key, payload));
        format!("{} {payload}", B64.encode(sig.as_ref()))
    }
}

/// Checks a signed value against the public key `public` (base64); returns its payload.
pub fn verify<'v>(
    public: &str,
    cluster: &str,
    name: &str,
    key: &str,
    value: &'v str,
) -> Option<&'v str> {
    let (sig, payload) = value.split_once(' ')?;
    let sig = B64.decode(sig).ok()?;
    let public = B64.decode(public).ok()?;
    signature::UnparsedPublicKey::new(&signature::ED25519, public)
        .verify(&message(cluster, name, key, payload), &sig)
        .ok()?;
    Some(payload)
}

/// Whether `public` is a well-formed public key (base64 of 32 bytes).
pub fn is_public_key(public: &str) -> bool {
    B64.decode(public).is_ok_and(|k| k.len() == 32)
}

/// What a signature covers.
fn message(cluster: &str, name: &str, key: &str, payload: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(24 + cluster.len() + name.len() + key.len() + payload.len());
    for part in ["slipstream-gossip-v1", cluster, name, key, payload] {
        m.extend_from_slice(part.as_bytes());
        m.push(0);
    }
    m
}

/// Writes a new file readable by its owner only, atomically (a temporary file renamed).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("key.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_binds_cluster_name_key_and_payload() {
        let id = Identity::ephemeral();
        let v = id.sign("c", "a", "replica:/x", "3+http://a/x");
        assert_eq!(
            verify(id.public(), "c", "a", "replica:/x", &v),
            Some("3+http://a/x")
        );
        assert_eq!(verify(id.public(), "c", "b", "replica:/x", &v), None);
        assert_eq!(verify(id.public(), "d", "a", "replica:/x", &v), None);
        assert_eq!(verify(id.public(), "c", "a", "replica:/y", &v), None);
        let forged = v.replace("http://a/x", "http://evil/x");
        assert_eq!(verify(id.public(), "c", "a", "replica:/x", &forged), None);
        let other = Identity::ephemeral();
        assert_eq!(verify(other.public(), "c", "a", "replica:/x", &v), None);
        for junk in ["", " ", "x y", "3+http://a/x"] {
            assert_eq!(verify(id.public(), "c", "a", "replica:/x", junk), None);
        }
        assert!(is_public_key(id.public()));
        assert!(!is_public_key("abc"));
    }

    #[test]
    fn the_key_survives_a_restart_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = Identity::load_or_create(dir.path()).unwrap();
        let b = Identity::load_or_create(dir.path()).unwrap();
        assert_eq!(a.public(), b.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join(KEY_FILE), b"not a key").unwrap();
        let e = Identity::load_or_create(dir.path()).unwrap_err();
        assert!(e.to_string().contains("node.key"), "{e}");
    }
}
