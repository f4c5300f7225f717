//! The response body of every slipstream node: bytes already in memory (a cache hit, with no
//! boxing), or a stream (file data, a cached prefix followed by file data, multipart ranges).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;

/// A response body.
#[derive(Debug)]
pub enum Body {
    /// Bytes in memory, sent in one frame.
    Full(Option<Bytes>),
    /// Anything else, of a known or unknown length.
    Stream(UnsyncBoxBody<Bytes, std::io::Error>),
}

impl Body {
    /// No body.
    pub fn empty() -> Body {
        Body::Full(None)
    }

    /// A body of bytes in memory.
    pub fn full(bytes: impl Into<Bytes>) -> Body {
        let bytes = bytes.into();
        Body::Full((!bytes.is_empty()).then_some(bytes))
    }

    /// A streamed body.
    pub fn stream<B>(body: B) -> Body
    where
        B: http_body::Body<Data = Bytes, Error = std::io::Error> + Send + 'static,
    {
        Body::Stream(body.boxed_unsync())
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut *self {
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(inner) => Pin::new(inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(bytes) => bytes.is_none(),
            Body::Stream(inner) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Stream(inner) => inner.size_hint(),
        }
    }
}
