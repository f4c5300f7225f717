//! Body filters: transformers of a response body as it streams to the client (an HTML
//! rewriter, a compressor). A filtered body has a length nobody knows in advance, so whoever
//! applies filters drops `Content-Length`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use slipstream_http::Body;

/// Transforms a body chunk by chunk. Output may lag input (a rewriter holds back an
/// unfinished tag); [`finish`](BodyFilter::finish) flushes the rest.
pub trait BodyFilter: Send + 'static {
    /// The output for the next input chunk (may be empty).
    fn filter(&mut self, chunk: Bytes) -> std::io::Result<Bytes>;
    /// The output after the last chunk.
    fn finish(&mut self) -> std::io::Result<Bytes>;
}

/// `body` passed through `filters` in order.
pub fn filtered(body: Body, filters: Vec<Box<dyn BodyFilter>>) -> Body {
    if filters.is_empty() {
        return body;
    }
    Body::stream(Filtered {
        inner: body,
        filters,
        done: false,
    })
}

struct Filtered {
    inner: Body,
    filters: Vec<Box<dyn BodyFilter>>,
    done: bool,
}

impl Filtered {
    /// Runs `chunk` through the filters from `from` on.
    fn run(&mut self, mut chunk: Bytes, from: usize) -> std::io::Result<Bytes> {
        for f in &mut self.filters[from..] {
            if chunk.is_empty() {
                break;
            }
            chunk = f.filter(chunk)?;
        }
        Ok(chunk)
    }

    /// Flushes every filter, each one's tail going through the filters after it.
    fn finish(&mut self) -> std::io::Result<Bytes> {
        let mut out = Vec::new();
        for i in 0..self.filters.len() {
            let tail = self.filters[i].finish()?;
            let tail = self.run(tail, i + 1)?;
            out.extend_from_slice(&tail);
            // The tails of later filters come after whatever earlier tails produced.
        }
        Ok(Bytes::from(out))
    }
}

impl http_body::Body for Filtered {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.run(data, 0)?;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    // Trailers pass through unchanged.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.done = true;
                    let out = this.finish()?;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// `body`, failing with `TimedOut` when no frame arrives for `idle`: an upstream that stalls
/// mid-body ends the client's response instead of holding it open forever.
pub fn idle_timeout(body: Body, idle: std::time::Duration) -> Body {
    Body::stream(Idle {
        inner: body,
        idle,
        timer: Box::pin(tokio::time::sleep(idle)),
    })
}

struct Idle {
    inner: Body,
    idle: std::time::Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Idle {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.idle;
                this.timer.as_mut().reset(deadline);
                Poll::Ready(frame)
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the body stalled for {:?}", this.idle),
                )))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// Upper-cases, and appends a marker at the end.
    struct Upper;

    impl BodyFilter for Upper {
        fn filter(&mut self, chunk: Bytes) -> std::io::Result<Bytes> {
            Ok(Bytes::from(chunk.to_ascii_uppercase()))
        }
        fn finish(&mut self) -> std::io::Result<Bytes> {
            Ok(Bytes::from_static(b"!end"))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_after_its_idle_timeout() {
        let stalled = Body::stream(http_body_util::StreamBody::new(
            futures_util::stream::pending::<Result<Frame<Bytes>, std::io::Error>>(),
        ));
        let t0 = tokio::time::Instant::now();
        let e = idle_timeout(stalled, std::time::Duration::from_secs(30))
            .collect()
            .await
            .expect_err("stalled");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), std::time::Duration::from_secs(30));
        let ok = idle_timeout(Body::full("x"), std::time::Duration::from_secs(1))
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(ok, "x");
    }

    #[tokio::test]
    async fn filters_run_in_order_and_later_filters_see_earlier_tails() {
        let body = filtered(Body::full("abc"), vec![Box::new(Upper), Box::new(Upper)]);
        let out = body.collect().await.expect("body").to_bytes();
        assert_eq!(out, "ABC!END!end");
    }
}
