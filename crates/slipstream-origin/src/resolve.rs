//! From a request path to a file under the root, and nowhere else.
//!
//! The path is percent-decoded once, split into segments, and any `..` segment is refused
//! outright (whether it came literally or encoded). The file found is then canonicalised and
//! must still lie under the canonical root, which refuses symbolic links that point outside.

use std::borrow::Cow;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

/// Why a path cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed: bad percent-encoding, not UTF-8, a NUL byte, not starting with `/` (400).
    BadRequest,
    /// An attempt to leave the root (403).
    Forbidden,
    /// Nothing there (404).
    NotFound,
}

/// A request path, decoded and normalised: the cache key. A path that is already normal
/// (the common case) is returned as it is, without allocating.
pub fn normalise(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    if !raw.starts_with('/') {
        return Err(Refusal::BadRequest);
    }
    if is_normal(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| Refusal::BadRequest)?;
    if decoded.contains('\0') {
        return Err(Refusal::BadRequest);
    }
    let mut key = String::with_capacity(decoded.len());
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(Refusal::Forbidden),
            s => {
                key.push('/');
                key.push_str(s);
            }
        }
    }
    if key.is_empty() || decoded.ends_with('/') {
        key.push('/');
    }
    Ok(Cow::Owned(key))
}

/// Whether a normalised key names a hidden file or directory (a segment starting with `.`,
/// such as `/.env` or `/.git/config`), other than `/.well-known/` (RFC 8615).
pub fn hidden(key: &str) -> bool {
    key.contains("/.")
        && key
            .split('/')
            .any(|seg| seg.starts_with('.') && seg != ".well-known")
}

/// Whether `raw` needs no decoding or normalising: no escapes, no NUL, no empty, `.` or `..`
/// segments (a trailing `/` is kept either way).
fn is_normal(raw: &str) -> bool {
    !raw.contains(['%', '\0'])
        && !raw.contains("//")
        && raw.split('/').all(|seg| seg != "." && seg != "..")
}

/// What a normalised key names on disk.
#[derive(Debug)]
pub enum Found {
    /// A regular file.
    File {
        /// Its canonical path.
        path: PathBuf,
        /// Its metadata.
        meta: Metadata,
    },
    /// A directory asked for without the trailing slash: redirect to `key + "/"`.
    Directory,
}

/// Finds the file for `key` under the canonical `root`; a directory serves its `index.html`.
pub fn find(root: &Path, key: &str) -> Result<Found, Refusal> {
    let relative = key.trim_start_matches('/');
    let mut path = root.join(relative);
    let canonical = path.canonicalize().map_err(|_| Refusal::NotFound)?;
    if !canonical.starts_with(root) {
        return Err(Refusal::Forbidden);
    }
    let mut meta = std::fs::metadata(&canonical).map_err(|_| Refusal::NotFound)?;
    path = canonical;
    if meta.is_dir() {
        if !key.ends_with('/') {
            return Ok(Found::Directory);
        }
        let index = path
            .join("index.html")
            .canonicalize()
            .map_err(|_| Refusal::NotFound)?;
        if !index.starts_with(root) {
            return Err(Refusal::Forbidden);
        }
        meta = std::fs::metadata(&index).map_err(|_| Refusal::NotFound)?;
        path = index;
    } else if key.ends_with('/') {
        // `/file.txt/` names no directory.
        return Err(Refusal::NotFound);
    }
    if !meta.is_file() {
        return Err(Refusal::NotFound);
    }
    Ok(Found::File { path, meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_are_those_with_a_dot_segment_but_well_known() {
        assert!(hidden("/.env"));
        assert!(hidden("/.git/config"));
        assert!(hidden("/a/.htpasswd"));
        assert!(!hidden("/.well-known/security.txt"));
        assert!(!hidden("/a.b/c.html"));
        assert!(!hidden("/"));
    }

    #[test]
    fn normalisation() {
        assert_eq!(normalise("/"), Ok("/".into()));
        assert!(matches!(
            normalise("/a/b.txt"),
            Ok(Cow::Borrowed("/a/b.txt"))
        ));
        assert!(matches!(normalise("/a/"), Ok(Cow::Borrowed("/a/"))));
        assert_eq!(normalise("/a/."), Ok("/a".into()));
        assert_eq!(normalise("/a/.hidden"), Ok("/a/.hidden".into()));
        assert_eq!(normalise("/a//b/./c"), Ok("/a/b/c".into()));
        assert_eq!(normalise("/dir/"), Ok("/dir/".into()));
        assert_eq!(
            normalise("/hello%20world.txt"),
            Ok("/hello world.txt".into())
        );
        assert_eq!(normalise("/../etc/passwd"), Err(Refusal::Forbidden));
        assert_eq!(normalise("/%2e%2e/etc/passwd"), Err(Refusal::Forbidden));
        assert_eq!(normalise("/a/..%2f..%2fetc"), Err(Refusal::Forbidden));
        assert_eq!(normalise("/%00"), Err(Refusal::BadRequest));
        assert_eq!(normalise("/%ff%fe"), Err(Refusal::BadRequest));
        assert_eq!(normalise("relative"), Err(Refusal::BadRequest));
    }
}
