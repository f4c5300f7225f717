//! SIEVE (Zhang, Yang, Yue, Vigfusson, Rashmi: "SIEVE is Simpler than LRU", NSDI 2024).

use super::{ensure, Algorithm, Id};

const NIL: Id = Id::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    /// Toward the newest entry.
    newer: Id,
    /// Toward the oldest entry.
    older: Id,
    visited: bool,
    linked: bool,
}

const UNLINKED: Node = Node {
    newer: NIL,
    older: NIL,
    visited: false,
    linked: false,
};

/// A FIFO queue with one "visited" bit per entry. A hit only sets the bit; the eviction hand
/// walks from the oldest entry toward the newest, clearing set bits and evicting the first entry
/// whose bit is clear, and stays where it stopped. Admits every newcomer that fits.
#[derive(Debug)]
pub struct Sieve {
    nodes: Vec<Node>,
    newest: Id,
    oldest: Id,
    hand: Id,
    total_linked: usize,
}

impl Default for Sieve {
    fn default() -> Self {
        Sieve {
            nodes: Vec::new(),
            newest: NIL,
            oldest: NIL,
            hand: NIL,
            total_linked: 0,
        }
    }
}

impl Sieve {
    fn unlink(&mut self, id: Id) {
        let Some(node) = self.nodes.get(id as usize).copied().filter(|n| n.linked) else {
            return;
        };
        if self.hand == id {
            self.hand = node.newer;
        }
        match node.newer {
            NIL => self.newest = node.older,
            n => self.nodes[n as usize].older = node.older,
        }
        match node.older {
            NIL => self.oldest = node.newer,
            o => self.nodes[o as usize].newer = node.newer,
        }
        self.nodes[id as usize] = UNLINKED;
        self.total_linked -= 1;
    }

    /// Moves the hand to the next entry to evict and unlinks it.
    fn evict_one(&mut self) -> Option<Id> {
        let mut cur = if self.hand == NIL {
            self.oldest
        } else {
            self.hand
        };
        // At most one full lap clears every bit, so the walk ends within 2n steps.
        for _ in 0..=2 * self.total_linked {
            if cur == NIL {
                cur = self.oldest;
                if cur == NIL {
                    return None;
                }
            }
            let node = &mut self.nodes[cur as usize];
            if node.visited {
                node.visited = false;
                cur = node.newer;
            } else {
                let victim = cur;
                // The hand stays where it stopped: unlinking moves it on to the next newer entry.
                self.hand = victim;
                self.unlink(victim);
                return Some(victim);
            }
        }
        None
    }
}

impl Algorithm for Sieve {
    fn inserted(&mut self, id: Id, _freq: u64) {
        ensure(&mut self.nodes, id, UNLINKED);
        self.unlink(id);
        self.nodes[id as usize] = Node {
            newer: NIL,
            older: self.newest,
            visited: false,
            linked: true,
        };
        match self.newest {
            NIL => self.oldest = id,
            n => self.nodes[n as usize].newer = id,
        }
        self.newest = id;
        self.total_linked += 1;
    }

    fn hit(&mut self, id: Id, _freq: u64) {
        if let Some(node) = self.nodes.get_mut(id as usize) {
            node.visited = true;
        }
    }

    fn removed(&mut self, id: Id) {
        self.unlink(id);
    }

    fn admits(&self, need: u64, _freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool {
        let mut total = 0;
        let mut cur = self.oldest;
        while cur != NIL && total < need {
            total += size_of(cur);
            cur = self.nodes[cur as usize].newer;
        }
        total >= need
    }

    fn victims(
        &mut self,
        need: u64,
        freq: u64,
        size_of: &dyn Fn(Id) -> u64,
        out: &mut Vec<Id>,
    ) -> bool {
        if !self.admits(need, freq, size_of) {
            return false;
        }
        let mut freed = 0;
        while freed < need {
            match self.evict_one() {
                Some(id) => {
                    freed += size_of(id);
                    out.push(id);
                }
                None => break,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visited_entries_survive_one_pass() {
        let mut s = Sieve::default();
        for id in 0..4 {
            s.inserted(id, 1);
        }
        s.hit(0, 2);
        s.hit(2, 2);
        let mut out = vec![];
        assert!(s.victims(2, 1, &|_| 1, &mut out));
        // Oldest is 0 (visited, spared), then 1 evicted, then 2 (visited, spared), then 3.
        assert_eq!(out, vec![1, 3]);
    }
}
