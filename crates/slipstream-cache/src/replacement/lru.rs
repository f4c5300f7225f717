//! Least recently used.

use super::list::List;
use super::{take_until, Algorithm, Id};

/// Evicts the entry touched longest ago; admits every newcomer that fits the cache.
#[derive(Debug, Default)]
pub struct Lru {
    order: List,
}

impl Algorithm for Lru {
    fn inserted(&mut self, id: Id, _freq: u64) {
        self.order.push_newest(id);
    }

    fn hit(&mut self, id: Id, _freq: u64) {
        self.order.push_newest(id);
    }

    fn removed(&mut self, id: Id) {
        self.order.unlink(id);
    }

    fn admits(&self, need: u64, _freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool {
        take_until(need, self.order.iter(), size_of, None)
    }

    fn victims(
        &mut self,
        need: u64,
        _freq: u64,
        size_of: &dyn Fn(Id) -> u64,
        out: &mut Vec<Id>,
    ) -> bool {
        take_until(need, self.order.iter(), size_of, Some(out))
    }
}
