//! Partial objects: paper 002's adaptive level in the proxy (§3.2, §4.1.2, §4.2.2).
//!
//! An object larger than the cache keeps whole is stored as its first chunk while it streams to
//! the client ([`tee`]). A later hit sends the chunk at once and fetches the remainder from
//! upstream with `Range: bytes=N-` and `If-Range` ([`from_chunk`]), so the client sees one
//! complete body. If the object changed upstream meanwhile, the transfer fails instead of
//! mixing two versions, and the entry is dropped.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http::header::{
    HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_RANGE, LAST_MODIFIED, RANGE,
};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use slipstream_http::conditional::{self, Validators};
use slipstream_http::{rfc9111, Body};
use slipstream_node::Ctx;

use crate::forward::finish_forwarded;
use crate::headers::{self, Status};
use crate::store::Stored;
use crate::{respond, Inner};

type ByteStream = futures_util::stream::BoxStream<'static, std::io::Result<Bytes>>;

/// Whether a response has a validator a Range request can be conditioned on (If-Range needs a
/// strong ETag or a Last-Modified, RFC 9110 §13.1.5).
pub(crate) fn has_validator(headers: &HeaderMap) -> bool {
    strong_etag(headers).is_some() || headers.contains_key(LAST_MODIFIED)
}

fn strong_etag(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers
        .get(ETAG)
        .filter(|v| !v.as_bytes().starts_with(b"W/"))
}

/// Streams a miss to the client while keeping its first `chunk_bytes` in the store.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tee(
    inner: &Arc<Inner>,
    key: &str,
    res_parts: http::response::Parts,
    body: Body,
    policy: rfc9111::Policy,
    vary_key: String,
    total: u64,
    status: Status,
) -> Response<Body> {
    let chunk = inner.settings.chunk_bytes as usize;
    // The chunk being kept is charged to the in-flight budget until it is stored.
    let mut charge = inner.inflight.charge();
    if !charge.grow(chunk as u64) {
        inner.metrics.skipped(crate::inflight::Skip::Budget);
        return crate::forward::passthrough(inner, res_parts, body, status);
    }
    let mut stored_headers = res_parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored_headers);
    let mut template = Some((stored_headers, policy, vary_key, res_parts.status, charge));
    let mut prefix: Vec<u8> = Vec::with_capacity(chunk);
    let (inner2, key) = (inner.clone(), key.to_owned());
    let stream = body.into_data_stream().map_ok(move |data: Bytes| {
        if let Some((headers, policy, vary_key, status, charge)) = template.take() {
            let take = (chunk - prefix.len()).min(data.len());
            prefix.extend_from_slice(&data[..take]);
            if prefix.len() < chunk {
                template = Some((headers, policy, vary_key, status, charge));
            } else if let Some(store) = &inner2.store {
                let body = Bytes::from(std::mem::take(&mut prefix));
                store.put(
                    &key,
                    Stored {
                        status,
                        headers,
                        body,
                        total_len: total,
                        policy,
                        vary_key,
                    },
                );
            }
        }
        data
    });
    let mut response = Response::from_parts(
        res_parts,
        Body::stream(StreamBody::new(stream.map_ok(Frame::data))),
    );
    finish_forwarded(
        inner,
        &mut response,
        Status {
            stored: true,
            detail: Some("partial"),
            ..status
        },
    );
    response
}

/// The answer from an incomplete entry: HEAD, preconditions and ranges inside the chunk from
/// memory; a plain GET as the chunk followed by the remainder from upstream.
pub(crate) fn from_chunk(
    inner: &Arc<Inner>,
    stored: &Arc<Stored>,
    parts: &http::request::Parts,
    now: SystemTime,
) -> Response<Body> {
    // HEAD and 304/412 need no body, and a range inside the chunk (or an unsatisfiable one)
    // is answered from memory by from_stored. Anything else, including a Range that would be
    // ignored (malformed, or an If-Range that no longer matches), gets the whole
    // representation: the chunk, then the remainder from upstream.
    let validators = Validators::from_headers(&stored.headers);
    let precondition = conditional::evaluate(&parts.method, &parts.headers, &validators).status();
    if parts.method != Method::GET
        || precondition.is_some()
        || answered_from_chunk(parts, stored, &validators)
    {
        return respond::from_stored(stored, &parts.method, &parts.headers, now);
    }
    let chunk = stored.body.clone();
    let rest_len = stored.total_len - chunk.len() as u64;
    inner.metrics.incomplete_hit(chunk.len(), rest_len);
    let (inner2, parts2, stored2) = (inner.clone(), parts.clone(), stored.clone());
    let rest =
        futures_util::stream::once(async move { remainder(&inner2, &parts2, &stored2).await })
            .try_flatten();
    let body = futures_util::stream::iter([Ok(chunk)]).chain(rest);
    let mut response = Response::new(Body::stream(StreamBody::new(body.map_ok(Frame::data))));
    let mut head = stored.policy.response_headers(&stored.headers, now);
    head.insert(CONTENT_LENGTH, HeaderValue::from(stored.total_len));
    *response.headers_mut() = head;
    *response.status_mut() = stored.status;
    response
}

/// Whether a Range request can be answered from the chunk alone: the Range applies (RFC 9110
/// §13.1.5 If-Range) and is either unsatisfiable (416) or lies wholly inside the chunk.
fn answered_from_chunk(
    parts: &http::request::Parts,
    stored: &Stored,
    validators: &Validators,
) -> bool {
    let Some(header) = parts.headers.get(RANGE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    if !conditional::if_range_allows(&parts.headers, validators) {
        return false;
    }
    match slipstream_http::range::parse(header, stored.total_len) {
        slipstream_http::range::Ranges::Satisfiable(rs) => {
            rs.iter().all(|r| r.end <= stored.body.len() as u64)
        }
        slipstream_http::range::Ranges::Unsatisfiable => true,
        slipstream_http::range::Ranges::Ignore => false,
    }
}

/// Fetches the bytes after the stored chunk.
async fn remainder(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    stored: &Stored,
) -> std::io::Result<ByteStream> {
    let from = stored.body.len() as u64;
    let mut up = headers::plain_upstream_parts(&inner.settings.name, parts);
    up.method = Method::GET;
    if let Ok(v) = HeaderValue::from_str(&format!("bytes={from}-")) {
        up.headers.insert(RANGE, v);
    }
    // RFC 9110 §13.1.5: the range only if the representation is still the stored one.
    if let Some(v) = strong_etag(&stored.headers).or_else(|| stored.headers.get(LAST_MODIFIED)) {
        up.headers.insert(IF_RANGE, v.clone());
    }
    // A remainder is part of a response already under way; it has no client context of its
    // own.
    let mut ctx = Ctx::new(
        std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        inner.clock.instant(),
    );
    let response = inner
        .upstreams
        .send(&mut ctx, &inner.phases, up, None)
        .await
        .map_err(std::io::Error::other)?;
    let same = |h: &HeaderMap| match strong_etag(&stored.headers) {
        Some(etag) => h.get(ETAG) == Some(etag),
        None => h.get(LAST_MODIFIED) == stored.headers.get(LAST_MODIFIED),
    };
    let expected_range = format!("bytes {from}-{}/{}", stored.total_len - 1, stored.total_len);
    match response.status() {
        StatusCode::PARTIAL_CONTENT
            if response
                .headers()
                .get(CONTENT_RANGE)
                .is_some_and(|v| v.as_bytes() == expected_range.as_bytes()) =>
        {
            Ok(response.into_body().into_data_stream().boxed())
        }
        // An upstream that ignores Range sends everything: skip what the chunk already sent.
        StatusCode::OK if same(response.headers()) => Ok(skip(response.into_body(), from)),
        _ => {
            let key = crate::route::cache_key(inner, parts);
            if let Some(store) = &inner.store {
                store.remove(&key);
            }
            Err(std::io::Error::other(format!(
                "{key} changed upstream during a partial hit; dropped the stored chunk"
            )))
        }
    }
}

/// The body after its first `n` bytes.
fn skip(body: Body, n: u64) -> ByteStream {
    let mut left = n;
    body.into_data_stream()
        .try_filter_map(move |mut data: Bytes| {
            let out = if left >= data.len() as u64 {
                left -= data.len() as u64;
                None
            } else {
                let rest = data.split_off(left as usize);
                left = 0;
                Some(rest)
            };
            futures_util::future::ready(Ok(out))
        })
        .boxed()
}
