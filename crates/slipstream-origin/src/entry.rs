//! A file as the server knows it: its validators, the response head computed once (paper 002
//! §4.1.1, MIME-header caching), and the bytes held in memory — all of them (complete) or the
//! first chunk (incomplete, 002 §4.1.2).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_TYPE, ETAG, LAST_MODIFIED};
use http::HeaderMap;
use slipstream_http::conditional::{self, Validators};

/// One servable file.
#[derive(Debug)]
pub struct Entry {
    /// Canonical path on disk.
    pub path: PathBuf,
    /// File length in bytes.
    pub len: u64,
    /// Modification time as read from the file system (full precision, for change detection).
    pub modified: SystemTime,
    /// ETag and Last-Modified.
    pub validators: Validators,
    /// Content-Type.
    pub content_type: HeaderValue,
    /// The head of a 200 response, computed once.
    pub head: HeaderMap,
    /// File bytes held in memory, from offset 0: the whole file or its first chunk.
    pub data: Bytes,
    /// When the file was last checked for changes, in milliseconds since the server started.
    checked_ms: AtomicU64,
}

impl Entry {
    /// Describes a file with `len` bytes modified at `modified`, holding `data` (a prefix).
    /// `cache_control`, when given, is sent with the file.
    pub fn new(
        path: PathBuf,
        len: u64,
        modified: SystemTime,
        data: Bytes,
        now_ms: u64,
        cache_control: Option<&HeaderValue>,
    ) -> Entry {
        let etag = conditional::etag(len, modified);
        let validators = Validators {
            etag: Some(etag.clone()),
            last_modified: Some(modified),
        };
        let content_type = content_type(&path);
        let mut head = HeaderMap::with_capacity(6);
        head.insert(CONTENT_TYPE, content_type.clone());
        head.insert(CONTENT_LENGTH, HeaderValue::from(len));
        head.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Some(cc) = cache_control {
            head.insert(http::header::CACHE_CONTROL, cc.clone());
        }
        if let Ok(v) = HeaderValue::from_str(&etag) {
            head.insert(ETAG, v);
        }
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
            head.insert(LAST_MODIFIED, v);
        }
        Entry {
            path,
            len,
            modified,
            validators,
            content_type,
            head,
            data,
            checked_ms: AtomicU64::new(now_ms),
        }
    }

    /// Whether `data` is the whole file.
    pub fn complete(&self) -> bool {
        self.data.len() as u64 == self.len
    }

    /// Bytes the response head takes, charged to the cache with the data as the paper does
    /// (002 §4.2.3.1: total_length = file size + MIME header length).
    pub fn head_bytes(&self) -> u64 {
        head_bytes(&self.head)
    }

    /// Milliseconds since the server started at the last check against the file system.
    pub fn checked_ms(&self) -> u64 {
        self.checked_ms.load(Ordering::Relaxed)
    }

    /// Records a check that found the file unchanged.
    pub fn mark_checked(&self, now_ms: u64) {
        self.checked_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Whether the file on disk still matches this entry.
    pub fn matches(&self, meta: &std::fs::Metadata) -> bool {
        meta.len() == self.len && meta.modified().ok() == Some(self.modified)
    }
}

/// Bytes a head occupies on the wire ("name: value\r\n" per field).
pub fn head_bytes(head: &HeaderMap) -> u64 {
    head.iter()
        .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
        .sum::<u64>()
        + 19
}

fn content_type(path: &std::path::Path) -> HeaderValue {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let text = mime.type_() == mime_guess::mime::TEXT
        || matches!(
            mime.subtype().as_str(),
            "javascript" | "json" | "xml" | "svg"
        )
        || mime.suffix().is_some_and(|s| s == "xml" || s == "json");
    let value = if text && mime.get_param("charset").is_none() {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(content_type("a.html".as_ref()), "text/html; charset=utf-8");
        assert_eq!(content_type("a.css".as_ref()), "text/css; charset=utf-8");
        assert_eq!(
            content_type("a.js".as_ref()),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("a.png".as_ref()), "image/png");
        assert_eq!(content_type("a".as_ref()), "application/octet-stream");
    }
}
