//! Body filters: transformers of a response body as it streams to the client (an HTML
//! rewriter, a compressor). A filtered body has a length nobody knows in advance, so whoever
//! applies filters drops `Content-Length`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

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
    /// The exact length of the whole output, when the filter knows it before it starts (it
    /// replaces the body with bytes it holds): the response keeps a `Content-Length`.
    fn known_len(&self) -> Option<u64> {
        None
    }
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
pub fn idle_timeout(body: Body, idle: Duration) -> Body {
    paced(
        body,
        Pace {
            idle: Some(idle),
            ..Pace::default()
        },
    )
}

/// How fast a body must arrive. Each limit is off when `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pace {
    /// Longest wait for the next frame.
    pub idle: Option<Duration>,
    /// Least rate, checked over consecutive windows.
    pub min_rate: Option<MinRate>,
    /// Longest the whole body may take.
    pub total: Option<Duration>,
}

impl Pace {
    /// Whether every limit is off.
    pub fn is_off(&self) -> bool {
        *self == Pace::default()
    }
}

/// At least `bytes_per_second` on average over each `window` (the first window starts with the
/// body), so that a trickle of a few bytes now and then cannot hold a connection for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    /// Bytes per second.
    pub bytes_per_second: u64,
    /// The window the rate is averaged over.
    pub window: Duration,
}

impl MinRate {
    fn least(&self) -> u64 {
        (self.bytes_per_second as f64 * self.window.as_secs_f64()) as u64
    }
}

/// `body` under `pace`: a body that breaks a limit fails with `TimedOut`, naming the limit.
/// Every limit is measured on tokio's clock.
pub fn paced(body: Body, pace: Pace) -> Body {
    if pace.is_off() {
        return body;
    }
    let timer = |d: Option<Duration>| d.map(|d| Box::pin(tokio::time::sleep(d)));
    Body::stream(Paced {
        inner: body,
        pace,
        idle: timer(pace.idle),
        window: timer(pace.min_rate.map(|r| r.window)),
        total: timer(pace.total),
        in_window: 0,
    })
}

struct Paced {
    inner: Body,
    pace: Pace,
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    window: Option<Pin<Box<tokio::time::Sleep>>>,
    total: Option<Pin<Box<tokio::time::Sleep>>>,
    in_window: u64,
}

fn timed_out(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what)
}

impl Paced {
    /// The limit broken by now, if any; otherwise every timer is armed to wake `cx`.
    fn broken(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        if let Some(total) = &mut self.total {
            if total.as_mut().poll(cx).is_ready() {
                return Some(timed_out(format!(
                    "the body took longer than {:?}",
                    self.pace.total.unwrap_or_default()
                )));
            }
        }
        if let (Some(window), Some(rate)) = (&mut self.window, self.pace.min_rate) {
            while window.as_mut().poll(cx).is_ready() {
                if self.in_window < rate.least() {
                    return Some(timed_out(format!(
                        "the body arrived at {} bytes in {:?}, under the least rate of {} bytes/s",
                        self.in_window, rate.window, rate.bytes_per_second
                    )));
                }
                self.in_window = 0;
                let next = window.deadline() + rate.window;
                window.as_mut().reset(next);
            }
        }
        if let Some(idle) = &mut self.idle {
            if idle.as_mut().poll(cx).is_ready() {
                return Some(timed_out(format!(
                    "the body stalled for {:?}",
                    self.pace.idle.unwrap_or_default()
                )));
            }
        }
        None
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.in_window += data.len() as u64;
                }
                if let (Some(timer), Some(idle)) = (&mut this.idle, this.pace.idle) {
                    timer.as_mut().reset(tokio::time::Instant::now() + idle);
                }
                // A body that keeps sending tiny frames is checked too.
                match this.broken(cx) {
                    Some(e) => Poll::Ready(Some(Err(e))),
                    None => Poll::Ready(Some(Ok(frame))),
                }
            }
            Poll::Ready(end) => Poll::Ready(end),
            Poll::Pending => match this.broken(cx) {
                Some(e) => Poll::Ready(Some(Err(e))),
                None => Poll::Pending,
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

    /// A body of `n` one-byte frames, one every `gap`.
    fn trickle(n: usize, gap: Duration) -> Body {
        use futures_util::StreamExt as _;
        let frames = futures_util::stream::iter(0..n).then(move |_| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"x")))
        });
        Body::stream(http_body_util::StreamBody::new(frames))
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_under_the_least_rate_fails_at_the_end_of_its_first_window() {
        let rate = MinRate {
            bytes_per_second: 10,
            window: Duration::from_secs(10),
        };
        // One byte every 5 s never stalls for the 30 s idle limit, but is far under 10 bytes/s.
        let pace = Pace {
            idle: Some(Duration::from_secs(30)),
            min_rate: Some(rate),
            total: None,
        };
        let t0 = tokio::time::Instant::now();
        let e = paced(trickle(1_000, Duration::from_secs(5)), pace)
            .collect()
            .await
            .expect_err("too slow");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("least rate"), "{e}");
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        // 200 bytes/s over several windows passes.
        let fast = paced(trickle(100, Duration::from_millis(5)), pace)
            .collect()
            .await
            .expect("fast enough")
            .to_bytes();
        assert_eq!(fast.len(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_arriving_after_its_total_deadline_fails() {
        let pace = Pace {
            total: Some(Duration::from_secs(60)),
            ..Pace::default()
        };
        let t0 = tokio::time::Instant::now();
        let e = paced(trickle(1_000, Duration::from_secs(1)), pace)
            .collect()
            .await
            .expect_err("too long");
        assert!(e.to_string().contains("longer than"), "{e}");
        assert_eq!(t0.elapsed(), Duration::from_secs(60));
        assert!(Pace::default().is_off());
    }

    #[tokio::test]
    async fn filters_run_in_order_and_later_filters_see_earlier_tails() {
        let body = filtered(Body::full("abc"), vec![Box::new(Upper), Box::new(Upper)]);
        let out = body.collect().await.expect("body").to_bytes();
        assert_eq!(out, "ABC!END!end");
    }
}
