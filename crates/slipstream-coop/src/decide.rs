//! The roles' decisions without I/O: the same code runs in a node ([`crate::roles`]) and in
//! the simulator's 1,100-node transit-stub runs ([`crate::sim`]).
//!
//! - [`nearest_first`]: which provider a browser proxy asks first, which in-tree node a new
//!   replica joins, which peers a manager spreads a hot object to — measured RTT ascending,
//!   unmeasured last (004 §3.2: the nearest replica).
//! - [`spread_candidates`]: where a cache manager offers a hot object's new replicas.
//! - [`HotCounter`]: the cache manager's count of hints per object and the moment an object
//!   becomes hot (004 §4.4, §5.1: a flash crowd is spread over several replicas).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Orders `peers` nearest first by `rtt` (`None`: not measured, after every measured peer);
/// equal RTTs keep their order.
pub fn nearest_first<P>(peers: &mut [P], rtt: impl Fn(&P) -> Option<Duration>) {
    peers.sort_by_key(|p| rtt(p).unwrap_or(Duration::MAX));
}

/// Where a cache manager offers a hot object's new replicas, in order (004 §4.4, §5.1: a
/// flash crowd is served by several replicas near the manager): the `peers` that do not hold
/// it yet, nearest first by `rtt`. The manager goes down the list until it has made its copies
/// (a peer may refuse).
pub fn spread_candidates<P: PartialEq>(
    peers: Vec<P>,
    holders: &[P],
    rtt: impl Fn(&P) -> Option<Duration>,
) -> Vec<P> {
    let mut candidates: Vec<P> = peers.into_iter().filter(|p| !holders.contains(p)).collect();
    nearest_first(&mut candidates, rtt);
    candidates
}

/// Objects a [`HotCounter`] tracks at most; past it, the counts start again (a manager sees
/// hints for an unbounded set of URLs).
pub const HOT_TRACKED: usize = 1 << 16;

/// Counts hints per object and says when one becomes hot: at exactly its `after`th hint,
/// once.
#[derive(Debug, Clone)]
pub struct HotCounter<K> {
    after: u32,
    hints: HashMap<K, u32>,
}

impl<K: Hash + Eq> HotCounter<K> {
    /// A counter calling an object hot at its `after`th hint (at least the first).
    pub fn new(after: u32) -> HotCounter<K> {
        HotCounter {
            after: after.max(1),
            hints: HashMap::new(),
        }
    }

    /// Counts one hint about `key`; whether `key` has just become hot.
    pub fn hint(&mut self, key: K) -> bool {
        if self.hints.len() >= HOT_TRACKED && !self.hints.contains_key(&key) {
            self.hints.clear();
        }
        let n = self.hints.entry(key).or_default();
        *n = n.saturating_add(1);
        *n == self.after
    }

    /// Hints counted for `key`.
    pub fn count(&self, key: &K) -> u32 {
        self.hints.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nearest_first_puts_unmeasured_peers_last_and_keeps_ties_in_order() {
        let rtts = [Some(5 * MS), None, Some(MS), Some(5 * MS), None];
        let mut peers: Vec<usize> = (0..rtts.len()).collect();
        nearest_first(&mut peers, |&p| rtts[p]);
        assert_eq!(peers, [2, 0, 3, 1, 4]);
    }

    #[test]
    fn spread_candidates_leave_out_holders_and_go_nearest_first() {
        let rtts = [Some(9 * MS), Some(MS), None, Some(3 * MS)];
        let c = spread_candidates(vec![0usize, 1, 2, 3], &[1], |&p| rtts[p]);
        assert_eq!(c, [3, 0, 2]);
    }

    #[test]
    fn an_object_becomes_hot_once_at_its_nth_hint() {
        let mut c = HotCounter::new(3);
        let hot: Vec<bool> = (0..6).map(|_| c.hint("a")).collect();
        assert_eq!(hot, [false, false, true, false, false, false]);
        assert!(!c.hint("b"));
        assert_eq!(c.count(&"a"), 6);
        // `after` 0 means the first hint.
        assert!(HotCounter::new(0).hint(1u8));
    }

    #[test]
    fn the_counter_forgets_rather_than_grows_without_bound() {
        let mut c = HotCounter::new(2);
        for k in 0..HOT_TRACKED as u32 {
            c.hint(k);
        }
        assert_eq!(c.count(&0), 1);
        c.hint(u32::MAX);
        assert_eq!(c.count(&0), 0, "counts start again past HOT_TRACKED");
        assert_eq!(c.count(&u32::MAX), 1);
    }
}
