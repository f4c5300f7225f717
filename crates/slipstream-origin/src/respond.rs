//! Responses built from an [`Entry`]: conditional requests, single and multiple byte ranges,
//! and bodies stitched from the bytes in memory and the rest of the file.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{
    HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    LAST_MODIFIED, RANGE,
};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::StreamBody;
use slipstream_http::range::{self, Ranges};
use slipstream_http::{conditional, Body};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::entry::Entry;

/// A response and where its body bytes come from.
#[derive(Debug)]
pub struct Built {
    /// The response.
    pub response: Response<Body>,
    /// Body bytes sent from memory.
    pub memory_bytes: u64,
    /// Body bytes read from the file.
    pub disk_bytes: u64,
}

/// Fields of the 200 that a 304 (RFC 9110 §15.4.5) and a multipart 206 (§15.3.7) carry too:
/// of those the sections list, the ones a file's response has besides Date.
const CARRIED: [HeaderName; 3] = [CACHE_CONTROL, ETAG, LAST_MODIFIED];

/// Answers a GET or HEAD for `entry`.
pub fn respond(entry: &Arc<Entry>, method: &Method, headers: &HeaderMap) -> Built {
    if let Some(status) = conditional::evaluate(method, headers, &entry.validators).status() {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        if status == StatusCode::NOT_MODIFIED {
            for name in CARRIED {
                if let Some(v) = entry.head.get(&name) {
                    response.headers_mut().insert(name, v.clone());
                }
            }
        }
        return Built {
            response,
            memory_bytes: 0,
            disk_bytes: 0,
        };
    }
    let head_only = method == Method::HEAD;
    let ranges = match headers.get(RANGE).and_then(|v| v.to_str().ok()) {
        Some(value) if conditional::if_range_allows(headers, &entry.validators) => {
            range::parse(value, entry.len)
        }
        _ => Ranges::Ignore,
    };
    match ranges {
        Ranges::Ignore => whole(entry, head_only),
        Ranges::Unsatisfiable => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            insert(
                response.headers_mut(),
                CONTENT_RANGE,
                format!("bytes */{}", entry.len),
            );
            Built {
                response,
                memory_bytes: 0,
                disk_bytes: 0,
            }
        }
        Ranges::Satisfiable(rs) if rs.len() == 1 => single(entry, rs[0].clone(), head_only),
        Ranges::Satisfiable(rs) => multiple(entry, &rs, head_only),
    }
}

fn insert(headers: &mut HeaderMap, name: http::header::HeaderName, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(name, v);
    }
}

/// 200 with the cached head: no header is computed here.
fn whole(entry: &Arc<Entry>, head_only: bool) -> Built {
    let mut response = Response::new(Body::empty());
    *response.headers_mut() = entry.head.clone();
    if head_only {
        return Built {
            response,
            memory_bytes: 0,
            disk_bytes: 0,
        };
    }
    let (body, memory_bytes, disk_bytes) = segments_body(entry, Segment::of(entry, 0..entry.len));
    *response.body_mut() = body;
    Built {
        response,
        memory_bytes,
        disk_bytes,
    }
}

fn single(entry: &Arc<Entry>, r: Range<u64>, head_only: bool) -> Built {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    let headers = response.headers_mut();
    for (name, value) in &entry.head {
        headers.insert(name.clone(), value.clone());
    }
    headers.insert(CONTENT_LENGTH, HeaderValue::from(r.end - r.start));
    insert(headers, CONTENT_RANGE, range::content_range(&r, entry.len));
    if head_only {
        return Built {
            response,
            memory_bytes: 0,
            disk_bytes: 0,
        };
    }
    let (body, memory_bytes, disk_bytes) = segments_body(entry, Segment::of(entry, r));
    *response.body_mut() = body;
    Built {
        response,
        memory_bytes,
        disk_bytes,
    }
}

/// RFC 9110 §14.6: multipart/byteranges.
fn multiple(entry: &Arc<Entry>, ranges: &[Range<u64>], head_only: bool) -> Built {
    let boundary = format!(
        "slipstream-{}",
        entry
            .validators
            .etag
            .as_deref()
            .unwrap_or_default()
            .trim_matches('"')
    );
    let mut segments = Vec::new();
    for r in ranges {
        let content_type = entry
            .content_type
            .to_str()
            .unwrap_or("application/octet-stream");
        let part_head = range::part_header(&boundary, content_type, r, entry.len);
        segments.push(Segment::Memory(Bytes::from(part_head), false));
        segments.extend(Segment::of(entry, r.clone()));
    }
    segments.push(Segment::Memory(
        Bytes::from(range::closing(&boundary)),
        false,
    ));
    let total: u64 = segments.iter().map(Segment::len).sum();
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    let headers = response.headers_mut();
    for name in CARRIED {
        if let Some(v) = entry.head.get(&name) {
            headers.insert(name, v.clone());
        }
    }
    insert(
        headers,
        CONTENT_TYPE,
        format!("multipart/byteranges; boundary={boundary}"),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(total));
    if head_only {
        return Built {
            response,
            memory_bytes: 0,
            disk_bytes: 0,
        };
    }
    let (body, memory_bytes, disk_bytes) = segments_body(entry, segments);
    *response.body_mut() = body;
    Built {
        response,
        memory_bytes,
        disk_bytes,
    }
}

/// A piece of a response body.
#[derive(Debug, Clone)]
enum Segment {
    /// Bytes in memory; the flag says whether they are file data (for the memory-bytes count).
    Memory(Bytes, bool),
    /// `len` bytes of the file from `offset`.
    File { offset: u64, len: u64 },
}

impl Segment {
    /// The bytes of `r` of the entry's file: from memory where the cached prefix covers them,
    /// from the file for the rest (002 §4.2.2: send the cached chunk, read the rest from disk).
    fn of(entry: &Entry, r: Range<u64>) -> Vec<Segment> {
        let cached = entry.data.len() as u64;
        let mut out = Vec::with_capacity(2);
        if r.start < cached {
            let end = r.end.min(cached);
            out.push(Segment::Memory(
                entry.data.slice(r.start as usize..end as usize),
                true,
            ));
        }
        let from = r.start.max(cached);
        if from < r.end {
            out.push(Segment::File {
                offset: from,
                len: r.end - from,
            });
        }
        out
    }

    fn len(&self) -> u64 {
        match self {
            Segment::Memory(b, _) => b.len() as u64,
            Segment::File { len, .. } => *len,
        }
    }
}

/// Chunk size for reading the uncached part of a file.
const READ_CHUNK: usize = 64 * 1024;

fn segments_body(entry: &Arc<Entry>, segments: Vec<Segment>) -> (Body, u64, u64) {
    let memory: u64 = segments
        .iter()
        .filter(|s| matches!(s, Segment::Memory(_, true)))
        .map(Segment::len)
        .sum();
    let disk: u64 = segments
        .iter()
        .filter(|s| matches!(s, Segment::File { .. }))
        .map(Segment::len)
        .sum();
    if let [Segment::Memory(bytes, _)] = segments.as_slice() {
        return (Body::full(bytes.clone()), memory, disk);
    }
    if segments.is_empty() {
        return (Body::empty(), 0, 0);
    }
    let path = entry.path.clone();
    let stream = futures_util::stream::iter(segments)
        .flat_map(move |segment| segment_stream(path.clone(), segment));
    let body = StreamBody::new(stream.map(|chunk| chunk.map(hyper::body::Frame::data)));
    (Body::stream(body), memory, disk)
}

enum Reader {
    Start(PathBuf, u64, u64),
    Reading(tokio::fs::File, u64),
    Done,
}

fn segment_stream(
    path: PathBuf,
    segment: Segment,
) -> futures_util::stream::BoxStream<'static, std::io::Result<Bytes>> {
    match segment {
        Segment::Memory(bytes, _) => futures_util::stream::once(async move { Ok(bytes) }).boxed(),
        Segment::File { offset, len } => {
            futures_util::stream::unfold(Reader::Start(path, offset, len), |state| async move {
                let (mut file, remaining) = match state {
                    Reader::Done => return None,
                    Reader::Reading(file, remaining) => (file, remaining),
                    Reader::Start(path, offset, len) => {
                        let opened = async {
                            let mut f = tokio::fs::File::open(&path).await?;
                            f.seek(std::io::SeekFrom::Start(offset)).await?;
                            Ok::<_, std::io::Error>(f)
                        };
                        match opened.await {
                            Ok(f) => (f, len),
                            Err(e) => return Some((Err(e), Reader::Done)),
                        }
                    }
                };
                if remaining == 0 {
                    return None;
                }
                let want = remaining.min(READ_CHUNK as u64) as usize;
                let mut buf = vec![0; want];
                match file.read(&mut buf).await {
                    Ok(0) => Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "file shrank while being sent",
                        )),
                        Reader::Done,
                    )),
                    Ok(n) => {
                        buf.truncate(n);
                        Some((
                            Ok(Bytes::from(buf)),
                            Reader::Reading(file, remaining - n as u64),
                        ))
                    }
                    Err(e) => Some((Err(e), Reader::Done)),
                }
            })
            .boxed()
        }
    }
}
