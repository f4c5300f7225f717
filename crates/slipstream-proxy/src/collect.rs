//! Reading an upstream body for storing, within a size bound, the in-flight budget and a
//! per-chunk deadline: whole before answering ([`collect`]), or teed to the store while it
//! streams to the client ([`tee`]).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http::HeaderMap;
use http_body_util::BodyExt;
use slipstream_http::Body;

use crate::inflight::{Buffer, Charge, Held, Skip};
use crate::upstream::UpstreamError;
use crate::Inner;

/// A body read for storing.
pub(crate) enum Collected {
    /// The whole body, within the limit, and its charge.
    Whole(Bytes, Charge),
    /// Not to be stored (see [`Skip`]): what was read, still charged, and the rest to come.
    Over(Bytes, Charge, Body, Skip),
}

impl Collected {
    /// The body for a client that gets it without storing: the bytes read, charged until the
    /// client has them, then the rest (which fails if it stalls for `idle`).
    pub(crate) fn into_body(self, idle: std::time::Duration) -> Body {
        match self {
            Collected::Whole(bytes, charge) => Body::stream(Held::new(Body::full(bytes), charge)),
            Collected::Over(head, charge, rest, _) => {
                let rest = slipstream_node::body::idle_timeout(rest, idle);
                let stream = futures_util::stream::iter([Ok(head)]).chain(rest.into_data_stream());
                let body = Body::stream(http_body_util::StreamBody::new(
                    stream.map_ok(hyper::body::Frame::data),
                ));
                Body::stream(Held::new(body, charge))
            }
        }
    }
}

/// Reads a body into `buffer` for storing; a chunk slower than `timeout` fails. A body larger
/// than the buffer's limit, refused by the budget, or still coming after `deadline` is not
/// stored: what was read is handed on with the rest, so that a trickling upstream cannot hold
/// its client with nothing sent.
pub(crate) async fn collect(
    mut body: Body,
    mut buffer: Buffer,
    timeout: std::time::Duration,
    deadline: std::time::Duration,
) -> Result<Collected, UpstreamError> {
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        let wait = timeout.min(give_up.saturating_duration_since(tokio::time::Instant::now()));
        let frame = match tokio::time::timeout(wait, body.frame()).await {
            Err(_) if tokio::time::Instant::now() >= give_up && wait < timeout => {
                let (head, charge) = buffer.finish();
                return Ok(Collected::Over(head, charge, body, Skip::Slow));
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
            if let Err(why) = buffer.extend(&data) {
                let (head, charge) = buffer.finish();
                let rest = futures_util::stream::iter([Ok(data)]).chain(body.into_data_stream());
                let rest = Body::stream(http_body_util::StreamBody::new(
                    rest.map_ok(hyper::body::Frame::data),
                ));
                return Ok(Collected::Over(head, charge, rest, why));
            }
        }
    }
    let (bytes, charge) = buffer.finish();
    Ok(Collected::Whole(bytes, charge))
}

/// Streams `body` to the client while copying it into `buffer`; `stored` gets the whole body
/// once it has all been read (its announced `length`, when there is one). The upstream is read
/// only as fast as the client takes it. A body that outgrows the buffer's limit or the
/// budget, or fails, is not stored: the copy is dropped at once (and `stored` with it) and
/// the body keeps streaming.
pub(crate) fn tee<F>(
    inner: &Arc<Inner>,
    body: Body,
    buffer: Buffer,
    length: Option<u64>,
    stored: F,
) -> Body
where
    F: FnOnce(Bytes) + Send + 'static,
{
    struct Tee<F> {
        inner: Arc<Inner>,
        body: Body,
        copy: Option<(Buffer, F)>,
        length: Option<u64>,
    }
    impl<F: FnOnce(Bytes)> Tee<F> {
        fn complete(&mut self) {
            if let Some((buffer, stored)) = self.copy.take() {
                if self.length.is_none_or(|n| n == buffer.len() as u64) {
                    // The charge ends here: the bytes are the cache's now, or dropped.
                    let (bytes, _charge) = buffer.finish();
                    stored(bytes);
                }
            }
        }
    }
    let state = Tee {
        inner: inner.clone(),
        body,
        copy: Some((buffer, stored)),
        length,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            match st.body.frame().await {
                None => {
                    st.complete();
                    return None;
                }
                Some(Err(e)) => {
                    st.copy = None;
                    return Some((Err(e), st));
                }
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if let Some((buffer, _)) = st.copy.as_mut() {
                        match buffer.extend(&data) {
                            Err(why) => {
                                st.copy = None;
                                st.inner.metrics.skipped(why);
                            }
                            // Complete as soon as the announced length is in: a client may
                            // not ask for the end of a body it has whole.
                            Ok(()) if st.length == Some(buffer.len() as u64) => st.complete(),
                            Ok(()) => {}
                        }
                    }
                    return Some((Ok(data), st));
                }
            }
        }
    });
    Body::stream(http_body_util::StreamBody::new(
        stream.map_ok(hyper::body::Frame::data),
    ))
}

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}
