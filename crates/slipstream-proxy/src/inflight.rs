//! The in-flight budget: bytes the proxy buffers for responses under way (a body being read to
//! store, a copy teed to the store while the body streams, a first chunk being kept) are
//! charged to one bound, `inflight_bytes`. A response that cannot get budget is streamed to its
//! client without being stored; nothing is buffered past the bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// The bound and what is charged against it now.
#[derive(Debug)]
pub struct Budget {
    used: AtomicU64,
    limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            used: AtomicU64::new(0),
            limit,
        })
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The bound.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// An empty charge, to grow as bytes are buffered.
    pub fn charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= self.limit)
            })
            .is_ok()
    }
}

/// Bytes charged to a [`Budget`] until dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Charge {
    /// Charges `n` more bytes; false (and nothing charged) if the budget has no room.
    pub fn grow(&mut self, n: u64) -> bool {
        let ok = self.budget.take(n);
        if ok {
            self.bytes += n;
        }
        ok
    }

    /// Bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Why a cacheable response was not stored, for the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Larger than `max_object_bytes` (a body of unknown length that grew past it).
    Large,
    /// Still arriving at the store deadline.
    Slow,
    /// The in-flight budget had no room.
    Budget,
}

/// A body being buffered for storing: bytes copied out of the upstream's read buffers (so that
/// a stored body pins no buffer of hyper's), in an allocation whose every byte is charged.
#[derive(Debug)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    charge: Charge,
    /// Most bytes this buffer may hold.
    limit: u64,
}

impl Buffer {
    /// An empty buffer of at most `limit` bytes; `announced`, the body's length if known, is
    /// allocated (and charged) at once, so that the stored body has no spare capacity.
    pub(crate) fn new(
        budget: &Arc<Budget>,
        limit: u64,
        announced: Option<u64>,
    ) -> Result<Buffer, Skip> {
        let mut buffer = Buffer {
            data: Vec::new(),
            charge: budget.charge(),
            limit,
        };
        if let Some(n) = announced.filter(|&n| n <= limit) {
            buffer.reserve(n)?;
        }
        Ok(buffer)
    }

    fn reserve(&mut self, total: u64) -> Result<(), Skip> {
        let extra = total.saturating_sub(self.data.capacity() as u64);
        if extra == 0 {
            return Ok(());
        }
        if !self.charge.grow(extra) {
            return Err(Skip::Budget);
        }
        let total = usize::try_from(total).map_err(|_| Skip::Large)?;
        self.data.reserve_exact(total - self.data.len());
        Ok(())
    }

    /// Appends `data`, growing the allocation (doubling, from 16 KiB, up to the limit) with its
    /// charge.
    pub(crate) fn extend(&mut self, data: &[u8]) -> Result<(), Skip> {
        let need = (self.data.len() + data.len()) as u64;
        if need > self.limit {
            return Err(Skip::Large);
        }
        if need > self.data.capacity() as u64 {
            let doubled = (2 * self.data.capacity() as u64).max(16 * 1024);
            self.reserve(need.max(doubled.min(self.limit)))?;
        }
        self.data.extend_from_slice(data);
        Ok(())
    }

    /// Bytes buffered.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// The bytes, in an allocation of their exact size, and the charge that still covers it.
    pub(crate) fn finish(mut self) -> (Bytes, Charge) {
        self.data.shrink_to_fit();
        (Bytes::from(self.data), self.charge)
    }
}

/// A body that keeps `charge` until it is dropped: the buffered bytes it sends stay charged
/// while a slow client reads them.
pub(crate) struct Held<B> {
    body: B,
    _charge: Charge,
}

impl<B> Held<B> {
    pub(crate) fn new(body: B, charge: Charge) -> Held<B> {
        Held {
            body,
            _charge: charge,
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_charged_for_their_allocation_and_released_when_dropped() {
        let budget = Budget::new(100_000);
        let mut a = Buffer::new(&budget, 1 << 20, Some(60_000)).expect("room");
        assert_eq!(budget.used(), 60_000);
        assert!(matches!(
            Buffer::new(&budget, 1 << 20, Some(60_000)),
            Err(Skip::Budget)
        ));
        assert_eq!(budget.used(), 60_000, "a refusal charges nothing");
        a.extend(&[0; 60_000]).expect("within its allocation");
        let mut b = Buffer::new(&budget, 40_000, None).expect("nothing yet");
        b.extend(&[0; 20_000]).expect("room");
        assert_eq!(budget.used(), 80_000, "what it needs, at least 16 KiB");
        assert!(matches!(b.extend(&[0; 20_001]), Err(Skip::Large)));
        let (bytes, charge) = a.finish();
        assert_eq!((bytes.len(), charge.bytes()), (60_000, 60_000));
        drop((b, charge));
        assert_eq!(budget.used(), 0);
    }
}
