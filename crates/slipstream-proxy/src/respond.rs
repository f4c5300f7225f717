//! Answering a request from a stored response: client preconditions (RFC 9110 §13), HEAD from a
//! stored GET (RFC 9111 §4), and byte ranges cut from the stored full body (RFC 9110 §14).
//!
//! For an incomplete entry (the first chunk of a large object) this module answers only what
//! needs no body beyond the chunk: HEAD, 304/412, and ranges inside the chunk; the request path
//! streams the rest from upstream.

use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use http::{HeaderMap, Method, Response, StatusCode};
use slipstream_http::conditional::{self, Validators};
use slipstream_http::range::{self, Ranges};
use slipstream_http::Body;

use crate::store::Stored;

/// Fields a 304 carries from the stored response (RFC 9110 §15.4.5).
const NOT_MODIFIED_FIELDS: [&str; 8] = [
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "vary",
    "last-modified",
    "age",
];

/// The response to `method`/`headers` from `stored` at `now`.
pub fn from_stored(
    stored: &Stored,
    method: &Method,
    headers: &HeaderMap,
    now: SystemTime,
) -> Response<Body> {
    let mut out_headers = stored.policy.response_headers(&stored.headers, now);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = stored.status;
    if stored.status == StatusCode::OK {
        let validators = Validators::from_headers(&stored.headers);
        if let Some(status) = conditional::evaluate(method, headers, &validators).status() {
            *response.status_mut() = status;
            if status == StatusCode::NOT_MODIFIED {
                out_headers.retain_names(&NOT_MODIFIED_FIELDS);
                *response.headers_mut() = out_headers;
            }
            return response;
        }
        let ranges = match headers.get(RANGE).and_then(|v| v.to_str().ok()) {
            Some(v)
                if method == Method::GET && conditional::if_range_allows(headers, &validators) =>
            {
                range::parse(v, stored.total_len)
            }
            _ => Ranges::Ignore,
        };
        match ranges {
            Ranges::Ignore => {}
            Ranges::Unsatisfiable => {
                *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                insert(
                    response.headers_mut(),
                    CONTENT_RANGE,
                    // RFC 9110 §14.4: the representation's length, not the stored chunk's.
                    &format!("bytes */{}", stored.total_len),
                );
                return response;
            }
            Ranges::Satisfiable(rs) => return partial(stored, out_headers, &rs),
        }
    }
    out_headers.insert(CONTENT_LENGTH, HeaderValue::from(stored.total_len));
    *response.headers_mut() = out_headers;
    if method != Method::HEAD {
        *response.body_mut() = Body::full(stored.body.clone());
    }
    response
}

fn partial(stored: &Stored, mut headers: HeaderMap, rs: &[std::ops::Range<u64>]) -> Response<Body> {
    // Content-Range names the whole representation (RFC 9110 §14.4), also for a stored chunk.
    let total = stored.total_len;
    let slice = |r: &std::ops::Range<u64>| stored.body.slice(r.start as usize..r.end as usize);
    let body = if let [r] = rs {
        insert(&mut headers, CONTENT_RANGE, &range::content_range(r, total));
        slice(r)
    } else {
        let content_type = stored
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let boundary = format!(
            "slipstream-{:x}",
            total ^ (stored.vary_key.len() as u64) << 32
        );
        let mut out = Vec::new();
        for r in rs {
            out.extend_from_slice(
                range::part_header(&boundary, &content_type, r, total).as_bytes(),
            );
            out.extend_from_slice(&slice(r));
        }
        out.extend_from_slice(range::closing(&boundary).as_bytes());
        insert(
            &mut headers,
            CONTENT_TYPE,
            &format!("multipart/byteranges; boundary={boundary}"),
        );
        Bytes::from(out)
    };
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut response = Response::new(Body::full(body));
    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    *response.headers_mut() = headers;
    response
}

fn insert(headers: &mut HeaderMap, name: http::header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// Keeps only the named fields.
trait RetainNames {
    fn retain_names(&mut self, names: &[&str]);
}

impl RetainNames for HeaderMap {
    fn retain_names(&mut self, names: &[&str]) {
        let drop: Vec<http::header::HeaderName> = self
            .keys()
            .filter(|k| !names.contains(&k.as_str()))
            .cloned()
            .collect();
        for name in drop {
            self.remove(name);
        }
    }
}
