//! LFU with paper 002's admission rule (§4.1.3, §4.2.3.3, §4.2.4.2).

use std::collections::BTreeSet;

use super::{ensure, take_until, Algorithm, Id};

/// Least frequently used. Entries are kept in frequency order (002 §4.2.3.3, the frequency
/// list); among equal frequencies the one touched longest ago goes first.
///
/// Admission (002 §4.2.4.2): a file `p` may remove a cached `q` only if freq(p) > freq(q), and
/// only if the removable entries together free enough room; otherwise nothing is removed and `p`
/// is not cached.
#[derive(Debug, Default)]
pub struct Lfu {
    order: BTreeSet<(u64, u64, Id)>,
    /// Position of each id in `order`: (freq, seq); `None` when not cached.
    pos: Vec<Option<(u64, u64)>>,
    seq: u64,
}

impl Lfu {
    fn place(&mut self, id: Id, freq: u64) {
        ensure(&mut self.pos, id, None);
        self.seq += 1;
        if let Some((f, s)) = self.pos[id as usize].take() {
            self.order.remove(&(f, s, id));
        }
        self.order.insert((freq, self.seq, id));
        self.pos[id as usize] = Some((freq, self.seq));
    }

    /// Entries the newcomer may remove, least frequent first.
    fn removable(&self, freq: u64) -> impl Iterator<Item = Id> + '_ {
        // 002 §4.2.4.2 step 1: q can be removed by p iff freq(p) > freq(q).
        self.order
            .iter()
            .take_while(move |(f, _, _)| *f < freq)
            .map(|(_, _, id)| *id)
    }
}

impl Algorithm for Lfu {
    fn inserted(&mut self, id: Id, freq: u64) {
        self.place(id, freq);
    }

    fn hit(&mut self, id: Id, freq: u64) {
        self.place(id, freq);
    }

    fn removed(&mut self, id: Id) {
        if let Some(Some((f, s))) = self.pos.get_mut(id as usize).map(Option::take) {
            self.order.remove(&(f, s, id));
        }
    }

    fn admits(&self, need: u64, freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool {
        // 002 §4.2.4.2 step 2: the removable entries must free the space p needs. Deviation:
        // the paper compares them with p's whole size; `need` is only the shortfall beyond the
        // cache's free room (the callers subtract it), so a new object that partly fits in free
        // space needs fewer victims than the paper would demand.
        take_until(need, self.removable(freq), size_of, None)
    }

    fn victims(
        &mut self,
        need: u64,
        freq: u64,
        size_of: &dyn Fn(Id) -> u64,
        out: &mut Vec<Id>,
    ) -> bool {
        // Step 3: remove the least frequent of them until p fits.
        take_until(need, self.removable(freq), size_of, Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_strictly_less_frequent_and_least_frequent_first() {
        let mut lfu = Lfu::default();
        lfu.inserted(0, 5);
        lfu.inserted(1, 1);
        lfu.inserted(2, 3);
        let size = |_: Id| 10;
        let mut out = vec![];
        assert!(lfu.victims(15, 4, &size, &mut out));
        assert_eq!(out, vec![1, 2]);
        out.clear();
        // freq 3 may displace only id 1 (freq 1): 10 bytes, not 15.
        assert!(!lfu.admits(15, 3, &size));
        assert!(!lfu.victims(15, 3, &size, &mut out));
        assert!(out.is_empty());
    }
}
