//! The TSV trace format: `time_s<TAB>key<TAB>size_bytes`, one request per row.
//!
//! Times are written with Rust's shortest round-trip float formatting, so a trace
//! written and read back is bit-for-bit the same. Keys are kept verbatim (no
//! trimming); a key that contains a tab, CR or LF cannot be written.

use std::io::{self, Write};

use crate::Request;

/// The optional header line.
pub(super) const HEADER: &str = "time_s\tkey\tsize_bytes";

/// Parses one data row; the error message names the bad field.
pub(super) fn parse_row(line: &str) -> Result<Request, String> {
    let cols: Vec<&str> = line.split('\t').collect();
    let [time, key, size] = cols[..] else {
        return Err(format!(
            "expected 3 tab-separated columns (time_s, key, size_bytes), found {}",
            cols.len()
        ));
    };
    let time_s: f64 = time
        .trim()
        .parse()
        .map_err(|_| format!("time_s {time:?} is not a number"))?;
    if !time_s.is_finite() {
        return Err(format!("time_s {time:?} is not finite"));
    }
    let size_bytes: u64 = size
        .trim()
        .parse()
        .map_err(|_| format!("size_bytes {size:?} is not a non-negative integer"))?;
    Ok(Request {
        time_s,
        key: key.to_owned(),
        size_bytes,
    })
}

/// Writes `requests` as TSV with a header line.
///
/// Fails with [`io::ErrorKind::InvalidInput`] if a key contains a tab, CR or LF, or a
/// time is not finite, since such a row could not be read back.
pub fn write_tsv<W: Write>(mut w: W, requests: &[Request]) -> io::Result<()> {
    writeln!(w, "{HEADER}")?;
    for r in requests {
        if r.key.contains(['\t', '\n', '\r']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("key {:?} contains a tab or line break", r.key),
            ));
        }
        if !r.time_s.is_finite() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("time_s {} of key {:?} is not finite", r.time_s, r.key),
            ));
        }
        writeln!(w, "{}\t{}\t{}", r.time_s, r.key, r.size_bytes)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_row() {
        let r = parse_row("1.25\t/a b?x=1\t42").expect("valid row");
        assert_eq!(
            r,
            Request {
                time_s: 1.25,
                key: "/a b?x=1".into(),
                size_bytes: 42
            }
        );
    }

    #[test]
    fn rejects_bad_rows() {
        assert!(parse_row("1\t/a").unwrap_err().contains("3 tab-separated"));
        assert!(parse_row("x\t/a\t1").unwrap_err().contains("time_s"));
        assert!(parse_row("NaN\t/a\t1").unwrap_err().contains("finite"));
        assert!(parse_row("1\t/a\t-1").unwrap_err().contains("size_bytes"));
        assert!(parse_row("1\t/a\t1.5").unwrap_err().contains("size_bytes"));
    }

    #[test]
    fn refuses_unwritable_keys() {
        let bad = Request {
            time_s: 0.0,
            key: "a\tb".into(),
            size_bytes: 1,
        };
        let err = write_tsv(Vec::new(), &[bad]).expect_err("tab in key");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
