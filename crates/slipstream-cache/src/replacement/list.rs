//! An intrusive doubly linked list of entry ids, oldest to newest, shared by the algorithms
//! that keep entries in an order (LRU, SIEVE). O(1) push, unlink and neighbour lookups.

use super::{ensure, Id};

/// The id that means "none".
pub(super) const NIL: Id = Id::MAX;

#[derive(Debug, Clone, Copy)]
struct Links {
    newer: Id,
    older: Id,
    linked: bool,
}

const UNLINKED: Links = Links {
    newer: NIL,
    older: NIL,
    linked: false,
};

/// Ids from oldest to newest.
#[derive(Debug)]
pub(super) struct List {
    links: Vec<Links>,
    newest: Id,
    oldest: Id,
    len: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            links: Vec::new(),
            newest: NIL,
            oldest: NIL,
            len: 0,
        }
    }
}

impl List {
    /// Number of linked ids.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The oldest id, or `NIL`.
    pub(super) fn oldest(&self) -> Id {
        self.oldest
    }

    /// The next newer id after `id`, or `NIL`.
    pub(super) fn newer(&self, id: Id) -> Id {
        self.links.get(id as usize).map_or(NIL, |l| l.newer)
    }

    /// Whether `id` is in the list.
    pub(super) fn contains(&self, id: Id) -> bool {
        self.links.get(id as usize).is_some_and(|l| l.linked)
    }

    /// Links `id` as the newest entry (moving it there if it is already linked).
    pub(super) fn push_newest(&mut self, id: Id) {
        ensure(&mut self.links, id, UNLINKED);
        self.unlink(id);
        self.links[id as usize] = Links {
            newer: NIL,
            older: self.newest,
            linked: true,
        };
        match self.newest {
            NIL => self.oldest = id,
            n => self.links[n as usize].newer = id,
        }
        self.newest = id;
        self.len += 1;
    }

    /// Unlinks `id`; a no-op if it is not linked.
    pub(super) fn unlink(&mut self, id: Id) {
        let Some(l) = self.links.get(id as usize).copied().filter(|l| l.linked) else {
            return;
        };
        match l.newer {
            NIL => self.newest = l.older,
            n => self.links[n as usize].older = l.older,
        }
        match l.older {
            NIL => self.oldest = l.newer,
            o => self.links[o as usize].newer = l.newer,
        }
        self.links[id as usize] = UNLINKED;
        self.len -= 1;
    }

    /// Ids from oldest to newest.
    pub(super) fn iter(&self) -> impl Iterator<Item = Id> + '_ {
        std::iter::successors(Some(self.oldest).filter(|id| *id != NIL), |id| {
            Some(self.newer(*id)).filter(|n| *n != NIL)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_unlink() {
        let mut l = List::default();
        for id in [3, 1, 2] {
            l.push_newest(id);
        }
        l.push_newest(3);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![1, 2, 3]);
        l.unlink(2);
        l.unlink(2);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(l.len(), 2);
        assert!(!l.contains(2) && l.contains(1));
    }
}
