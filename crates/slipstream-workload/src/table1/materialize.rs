//! Writing a [`FileSet`] to disk so an origin server can serve it.
//!
//! Content is a deterministic pseudo-random byte stream seeded by the file's key, so
//! it is not constant (compression and dedup cannot cheat a benchmark) and a client
//! can regenerate it to check a response.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Component, Path, PathBuf};

use super::FileSet;

impl FileSet {
    /// Writes every file under `dir` (creating subdirectories) with deterministic
    /// non-constant content; see [`content`]. A key that would escape `dir` (an
    /// absolute part after the leading `/`, or `..`) fails with
    /// [`io::ErrorKind::InvalidInput`].
    pub fn materialize(&self, dir: &Path) -> io::Result<()> {
        for f in &self.files {
            let path = path_under(dir, &f.key)?;
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            let mut w = BufWriter::with_capacity(64 * 1024, File::create(&path)?);
            let mut gen = ContentGen::new(&f.key);
            let mut chunk = [0u8; 8192];
            let mut left = f.size_bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                gen.fill(&mut chunk[..n]);
                w.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            w.flush()?;
        }
        Ok(())
    }
}

/// The first `len` bytes of the content [`FileSet::materialize`] writes for `key`.
pub fn content(key: &str, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    ContentGen::new(key).fill(&mut out);
    out
}

/// `dir` joined with `key` minus its leading `/`, refusing keys that leave `dir`.
fn path_under(dir: &Path, key: &str) -> io::Result<PathBuf> {
    let rel = Path::new(key.trim_start_matches('/'));
    let ok =
        rel.components().count() > 0 && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("key {key:?} does not name a file under the output directory"),
        ));
    }
    Ok(dir.join(rel))
}

/// xorshift64* seeded with FNV-1a of the key: cheap, deterministic, non-constant.
struct ContentGen {
    state: u64,
}

impl ContentGen {
    fn new(key: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // xorshift must not start at 0.
        ContentGen { state: h | 1 }
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            let v = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic_and_varied() {
        let a = content("/t1/b0/0000.bin", 4096);
        assert_eq!(a, content("/t1/b0/0000.bin", 4096));
        assert_ne!(a, content("/t1/b0/0001.bin", 4096));
        assert!(a.iter().any(|&b| b != a[0]));
        // A prefix is the same whatever the length, so clients can verify partials.
        assert_eq!(&a[..100], &content("/t1/b0/0000.bin", 100)[..]);
    }

    #[test]
    fn refuses_escaping_keys() {
        let dir = Path::new("/tmp/x");
        assert!(path_under(dir, "/a/../../etc/passwd").is_err());
        assert!(path_under(dir, "/").is_err());
        assert_eq!(
            path_under(dir, "/t1/b0/0000.bin").expect("plain key"),
            dir.join("t1/b0/0000.bin")
        );
    }
}
