//! Replacement algorithms: which cached entries leave to make room for a newcomer.
//!
//! An algorithm sees only entry ids, their access frequency and their size; the
//! [`Cache`](crate::Cache) owns keys, values and byte accounting. One algorithm per file.

mod lfu;
mod list;
mod lru;
mod sieve;

pub use lfu::Lfu;
pub use lru::Lru;
pub use sieve::Sieve;

/// Index of an entry in the cache's slot arena.
pub type Id = u32;

/// The interface between the cache and a replacement algorithm.
pub trait Algorithm: std::fmt::Debug + Send {
    /// `id` entered the cache with access frequency `freq`.
    fn inserted(&mut self, id: Id, freq: u64);
    /// `id`, already cached, was accessed; its frequency is now `freq`.
    fn hit(&mut self, id: Id, freq: u64);
    /// `id` left the cache (evicted or invalidated). Must tolerate ids already handed out by
    /// [`Algorithm::victims`].
    fn removed(&mut self, id: Id);
    /// Whether a newcomer of frequency `freq` needing `need` more bytes would be admitted,
    /// without changing any state.
    fn admits(&self, need: u64, freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool;
    /// Appends to `out`, in eviction order, entries whose sizes add up to at least `need` bytes,
    /// for a newcomer of frequency `freq`. Returns `false` and leaves `out` unchanged when the
    /// newcomer must not be admitted.
    fn victims(
        &mut self,
        need: u64,
        freq: u64,
        size_of: &dyn Fn(Id) -> u64,
        out: &mut Vec<Id>,
    ) -> bool;
}

/// Builds the algorithm a [`Replacement`](crate::Replacement) names.
pub fn build(r: crate::Replacement) -> Box<dyn Algorithm> {
    match r {
        crate::Replacement::Lfu => Box::<Lfu>::default(),
        crate::Replacement::Lru => Box::<Lru>::default(),
        crate::Replacement::Sieve => Box::<Sieve>::default(),
    }
}

/// Grows a per-id side table so that `id` is a valid index.
fn ensure<T: Clone>(table: &mut Vec<T>, id: Id, fill: T) {
    let needed = id as usize + 1;
    if table.len() < needed {
        table.resize(needed, fill);
    }
}

/// Walks `candidates` in eviction order until their sizes add up to `need`. With `out`, appends
/// them to it. Returns whether enough was found; on `false`, `out` is left as it was.
fn take_until(
    need: u64,
    candidates: impl Iterator<Item = Id>,
    size_of: &dyn Fn(Id) -> u64,
    mut out: Option<&mut Vec<Id>>,
) -> bool {
    let start = out.as_ref().map_or(0, |o| o.len());
    let mut freed = 0;
    for id in candidates {
        if freed >= need {
            break;
        }
        freed += size_of(id);
        if let Some(out) = out.as_mut() {
            out.push(id);
        }
    }
    if freed < need {
        if let Some(out) = out {
            out.truncate(start);
        }
        return false;
    }
    true
}
