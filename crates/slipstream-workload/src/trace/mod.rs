//! Access-log traces: reading Common/Combined Log Format and TSV, writing TSV.
//!
//! A trace is a list of cacheable [`Request`]s. Records that are well-formed but not
//! cacheable (a method other than GET/HEAD, a non-2xx status, or a size of `-`) are
//! counted in [`Trace::skipped`] rather than rejected; malformed records stop the read
//! with a [`TraceError::Parse`] naming the source, the 1-based line and the bad field.
//!
//! Lines are decoded as UTF-8 lossily, since real logs carry stray Latin-1 bytes in
//! paths and user agents. Empty lines and lines starting with `#` are ignored in both
//! formats.

mod clf;
mod tsv;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::Request;

pub use tsv::write_tsv;

/// A parsed trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The cacheable requests, in file order.
    pub requests: Vec<Request>,
    /// For a CLF trace, the client (the log's host field) of each request, index for index;
    /// empty for TSV, which names no client.
    pub clients: Vec<String>,
    /// Records that are valid syntax but not cacheable: non-GET/HEAD method,
    /// non-2xx status, or size `-`.
    pub skipped: u64,
    /// Malformed lines passed over (only when read with [`read_path_lenient`]).
    pub malformed: u64,
    /// The first few of them, as `file:line: what is wrong`.
    pub malformed_examples: Vec<String>,
}

/// How many malformed lines a lenient read describes.
pub const MALFORMED_EXAMPLES: usize = 5;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file (or source name) being read.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A line is malformed; the message names the bad field.
    #[error("{source_name}:{line}: {message}")]
    Parse {
        /// The file (or source name) being read.
        source_name: String,
        /// The 1-based line number of the bad line.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
}

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Common Log Format, optionally with Combined Log Format's referer and user agent.
    Clf,
    /// Tab-separated `time_s`, `key`, `size_bytes`, with an optional header line.
    Tsv,
}

impl Format {
    /// Guesses the format from the first meaningful line: the TSV header, or a line of
    /// exactly three tab-separated columns, means TSV; anything else is taken as CLF.
    fn detect(line: &str) -> Format {
        if line == tsv::HEADER || line.split('\t').count() == 3 {
            Format::Tsv
        } else {
            Format::Clf
        }
    }
}

/// Reads a file, detecting the format from the first non-empty, non-`#` line. The first
/// malformed line is an error.
pub fn read_path(path: &Path) -> Result<Trace, TraceError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    read(BufReader::new(file), &name, None)
}

/// Like [`read_path`], but a malformed line is counted and passed over (real logs have a few),
/// unless no line at all could be read, which is the first malformed line's error.
pub fn read_path_lenient(path: &Path) -> Result<Trace, TraceError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    read_with(BufReader::new(file), &name, None, true)
}

/// Like [`read`], detecting the format, but a malformed line is counted and passed over, as
/// [`read_path_lenient`] does.
pub fn read_lenient<R: BufRead>(reader: R, source_name: &str) -> Result<Trace, TraceError> {
    read_with(reader, source_name, None, true)
}

/// Reads a trace from `reader`; `source_name` appears in error messages. With
/// `format: None` the format is detected from the first non-empty, non-`#` line.
///
/// CLF request times are made relative to the earliest cacheable request, so a trace
/// starts at 0 and no time is negative even if the log is slightly out of order.
/// TSV times are kept as written.
pub fn read<R: BufRead>(
    reader: R,
    source_name: &str,
    format: Option<Format>,
) -> Result<Trace, TraceError> {
    read_with(reader, source_name, format, false)
}

fn read_with<R: BufRead>(
    mut reader: R,
    source_name: &str,
    format: Option<Format>,
    lenient: bool,
) -> Result<Trace, TraceError> {
    let mut format = format;
    let mut first_error = None;
    let mut trace = Trace::default();
    // CLF times are absolute Unix seconds until the end of the read.
    let mut clf_times: Vec<i64> = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|source| TraceError::Io {
                path: source_name.to_owned(),
                source,
            })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fmt = *format.get_or_insert_with(|| Format::detect(line));
        let parse_err = |message: String| TraceError::Parse {
            source_name: source_name.to_owned(),
            line: line_no,
            message,
        };
        let parsed = match fmt {
            Format::Tsv => {
                if line == tsv::HEADER {
                    continue;
                }
                tsv::parse_row(line).map(|r| trace.requests.push(r))
            }
            Format::Clf => clf::parse_line(line).map(|record| match record {
                clf::Record::Cacheable {
                    host,
                    unix_s,
                    key,
                    size,
                } => {
                    clf_times.push(unix_s);
                    trace.clients.push(host);
                    trace.requests.push(Request {
                        time_s: 0.0,
                        key,
                        size_bytes: size,
                    });
                }
                clf::Record::Skipped => trace.skipped += 1,
            }),
        };
        if let Err(message) = parsed {
            let e = parse_err(message);
            if !lenient {
                return Err(e);
            }
            trace.malformed += 1;
            if trace.malformed_examples.len() < MALFORMED_EXAMPLES {
                trace.malformed_examples.push(e.to_string());
            }
            first_error.get_or_insert(e);
        }
    }
    if trace.requests.is_empty() && trace.skipped == 0 {
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    if let Some(&start) = clf_times.iter().min() {
        for (req, t) in trace.requests.iter_mut().zip(&clf_times) {
            req.time_s = (t - start) as f64;
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats() {
        assert_eq!(Format::detect("time_s\tkey\tsize_bytes"), Format::Tsv);
        assert_eq!(Format::detect("0.5\t/a\t10"), Format::Tsv);
        assert_eq!(
            Format::detect(r#"h - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#),
            Format::Clf
        );
    }

    #[test]
    fn empty_input_is_empty_trace() {
        let t = read(&b"\n# nothing\n\n"[..], "empty", None).expect("empty trace");
        assert_eq!(t, Trace::default());
    }

    #[test]
    fn a_lenient_read_passes_over_malformed_lines_but_not_a_wholly_bad_file() {
        let text = "0.0\t/a\t10\nnot a line\n1.0\t/b\t20\n";
        assert!(read(text.as_bytes(), "t", None).is_err());
        let t = read_with(text.as_bytes(), "t", None, true).expect("lenient");
        assert_eq!((t.requests.len(), t.malformed), (2, 1));
        assert!(
            t.malformed_examples[0].starts_with("t:2:"),
            "{:?}",
            t.malformed_examples
        );
        assert!(read_with("junk\n".as_bytes(), "t", Some(Format::Clf), true).is_err());
    }

    #[test]
    fn io_error_names_path() {
        let err = read_path(Path::new("/nonexistent/trace.log")).expect_err("missing file");
        assert!(matches!(err, TraceError::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/trace.log"));
    }
}
