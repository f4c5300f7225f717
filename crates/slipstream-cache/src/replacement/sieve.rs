//! SIEVE (Zhang, Yang, Yue, Vigfusson, Rashmi: "SIEVE is Simpler than LRU", NSDI 2024).

use super::list::{List, NIL};
use super::{ensure, take_until, Algorithm, Id};

/// A FIFO queue with one "visited" bit per entry. A hit only sets the bit; the eviction hand
/// walks from the oldest entry toward the newest, clearing set bits and evicting the first entry
/// whose bit is clear, and stays where it stopped. Admits every newcomer that fits.
#[derive(Debug)]
pub struct Sieve {
    queue: List,
    visited: Vec<bool>,
    hand: Id,
}

impl Default for Sieve {
    fn default() -> Self {
        Sieve {
            queue: List::default(),
            visited: Vec::new(),
            hand: NIL,
        }
    }
}

impl Sieve {
    fn unlink(&mut self, id: Id) {
        if self.hand == id {
            self.hand = self.queue.newer(id);
        }
        self.queue.unlink(id);
    }

    /// Moves the hand to the next entry to evict and unlinks it.
    fn evict_one(&mut self) -> Option<Id> {
        let mut cur = if self.hand == NIL {
            self.queue.oldest()
        } else {
            self.hand
        };
        // One lap clears every bit, so the walk ends within two laps.
        for _ in 0..=2 * self.queue.len() {
            if cur == NIL {
                cur = self.queue.oldest();
                if cur == NIL {
                    return None;
                }
            }
            if std::mem::take(&mut self.visited[cur as usize]) {
                cur = self.queue.newer(cur);
            } else {
                // The hand stays where it stopped: unlinking moves it on to the next newer entry.
                self.hand = cur;
                self.unlink(cur);
                return Some(cur);
            }
        }
        None
    }
}

impl Algorithm for Sieve {
    fn inserted(&mut self, id: Id, _freq: u64) {
        ensure(&mut self.visited, id, false);
        self.unlink(id);
        self.visited[id as usize] = false;
        self.queue.push_newest(id);
    }

    fn hit(&mut self, id: Id, _freq: u64) {
        if self.queue.contains(id) {
            self.visited[id as usize] = true;
        }
    }

    fn removed(&mut self, id: Id) {
        self.unlink(id);
    }

    fn admits(&self, need: u64, _freq: u64, size_of: &dyn Fn(Id) -> u64) -> bool {
        take_until(need, self.queue.iter(), size_of, None)
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
