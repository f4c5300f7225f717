//! Reading an upstream body for storing, within a size bound and a per-chunk deadline.

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http::HeaderMap;
use http_body::Body as _;
use http_body_util::BodyExt;
use slipstream_http::Body;

use crate::upstream::UpstreamError;

/// A body read for storing.
pub(crate) enum Collected {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// Not to be stored (larger than the limit, or slower than the deadline for storing): what
    /// was read, and the rest still to come.
    Over(Bytes, Body),
}

impl Collected {
    /// The body for a client that gets it without storing: the bytes read, then the rest (which
    /// fails if it stalls for `idle`).
    pub(crate) fn into_body(self, idle: std::time::Duration) -> Body {
        match self {
            Collected::Whole(bytes) => Body::full(bytes),
            Collected::Over(head, rest) => {
                let rest = slipstream_node::body::idle_timeout(rest, idle);
                let stream = futures_util::stream::iter([Ok(head)]).chain(rest.into_data_stream());
                Body::stream(http_body_util::StreamBody::new(
                    stream.map_ok(hyper::body::Frame::data),
                ))
            }
        }
    }
}

/// Reads a body for storing, up to `limit` bytes; a chunk slower than `timeout` fails. A body
/// still coming after `deadline` is not stored: what was read is handed on with the rest, so
/// that a trickling upstream cannot hold its client with nothing sent.
pub(crate) async fn collect(
    mut body: Body,
    limit: u64,
    timeout: std::time::Duration,
    deadline: std::time::Duration,
) -> Result<Collected, UpstreamError> {
    // Sized to the announced length, so that a stored body holds no spare capacity.
    let announced = body
        .size_hint()
        .exact()
        .unwrap_or(0)
        .min(limit.saturating_add(1));
    let mut out = Vec::with_capacity(usize::try_from(announced).unwrap_or(0));
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        let wait = timeout.min(give_up.saturating_duration_since(tokio::time::Instant::now()));
        let frame = match tokio::time::timeout(wait, body.frame()).await {
            Err(_) if tokio::time::Instant::now() >= give_up && wait < timeout => {
                return Ok(Collected::Over(Bytes::from(out), body));
            }
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    upstream: "upstream body".into(),
                    timeout,
                })
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(UpstreamError::Protocol {
                    upstream: "upstream body".into(),
                    source: Box::new(e),
                })
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() as u64 > limit {
                return Ok(Collected::Over(Bytes::from(out), body));
            }
        }
    }
    out.shrink_to_fit();
    Ok(Collected::Whole(Bytes::from(out)))
}

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}
