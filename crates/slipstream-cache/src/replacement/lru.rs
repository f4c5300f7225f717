//! Least recently used.

use std::collections::BTreeMap;

use super::{ensure, Algorithm, Id};

/// Evicts the entry touched longest ago; admits every newcomer that fits the cache.
#[derive(Debug, Default)]
pub struct Lru {
    order: BTreeMap<u64, Id>,
    pos: Vec<Option<u64>>,
    seq: u64,
}

impl Lru {
    fn touch(&mut self, id: Id) {
        ensure(&mut self.pos, id, None);
        if let Some(s) = self.pos[id as usize].take() {
            self.order.remove(&s);
        }
        self.seq += 1;
        self.order.insert(self.seq, id);
        self.pos[id as usize] = Some(self.seq);
    }
}

impl Algorithm for Lru {
    fn inserted(&mut self, id: Id, _freq: u64) {
        self.touch(id);
    }

    fn hit(&mut self, id: Id, _freq: u64) {
        self.touch(id);
    }

    fn removed(&mut self, id: Id) {
        if let Some(Some(s)) = self.pos.get_mut(id as usize).map(Option::take) {
            self.order.remove(&s);
        }
    }

    fn admits(&self, need: u64, _freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool {
        need == 0 || self.order.values().map(|id| size_of(*id)).sum::<u64>() >= need
    }

    fn victims(
        &mut self,
        need: u64,
        _freq: u64,
        size_of: &dyn Fn(Id) -> u64,
        out: &mut Vec<Id>,
    ) -> bool {
        let start = out.len();
        let mut freed = 0;
        for id in self.order.values() {
            if freed >= need {
                return true;
            }
            freed += size_of(*id);
            out.push(*id);
        }
        if freed < need {
            out.truncate(start);
            return false;
        }
        true
    }
}
