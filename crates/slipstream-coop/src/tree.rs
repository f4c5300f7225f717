//! The push tree's decisions without I/O (issue 41 item 7, 004 §4.5's dissemination tree):
//! [`crate::net`] sends the requests and keeps gossipsub's explicit peers in step; the same
//! rule runs in the simulator ([`crate::sim`], "product tree").
//!
//! One [`Tree`] per site topic. A node that publishes on a topic (a gateway) is a *root* there.
//! Every other node that follows the site joins the tree under the *attached* peer nearest to
//! it by measured RTT ([`candidates`], [`crate::decide::nearest_first`]) among its connected
//! peers that follow the site; a peer is attached when it is a root or has a parent. The
//! parent answers with its path to the root ([`Tree::accept`]); the joiner refuses a path that
//! holds itself, so the tree has no cycle ([`Tree::joined`]). Each tick a child renews its place
//! with its parent; a parent forgets a child not renewed within [`EXPIRE_TICKS`] ticks, and a
//! child whose parent refuses or goes away joins again, keeping its own children meanwhile.
//! A tree built greedily keeps edges taken while nearer members were not attached yet, so each
//! period a child asks a follower at less than half its parent's RTT ([`nearer`]) and moves
//! under it if accepted (no cycle: a node's descendants all carry it in their paths).
//!
//! Gossipsub, with no mesh and no gossip, sends a message only to its explicit peers: the tree's
//! edges. An edge carries messages both ways, so a push from any member (not only the root)
//! reaches every member exactly once.
//!
//! Several roots for one site (two gateways): each is a root of its own tree until it probes
//! ([`PROBES`] peers a tick) a member of a tree whose root has a lower peer id, which accepts
//! it: the trees merge under the lowest root, the spanning-tree protocol's tie-break. Roots
//! only go down, so the merging ends.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Children a node keeps at most for one topic.
pub const MAX_CHILDREN: usize = 16;
/// Ticks after which a parent forgets a child that did not renew its place.
pub const EXPIRE_TICKS: u64 = 3;
/// The longest path to a root a node accepts (deeper: refused, the tree is broken).
pub const MAX_DEPTH: usize = 64;
/// Peers a root asks each tick whether their tree has a lower root.
pub const PROBES: usize = 2;

/// Why a join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This node has no place in the tree to give.
    NotAttached,
    /// The joiner is this node or one of its ancestors.
    Cycle,
    /// This node has [`MAX_CHILDREN`] children.
    Full,
    /// The joiner is in a tree whose root's id is below this tree's root.
    NotLower,
    /// The path is longer than [`MAX_DEPTH`].
    TooDeep,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NotAttached => "not attached to the site's tree",
            Refusal::Cycle => "that would make a cycle",
            Refusal::Full => "no room for another child",
            Refusal::NotLower => "this tree's root is not lower",
            Refusal::TooDeep => "the tree is too deep",
        })
    }
}

/// One topic's tree, as one node sees it.
#[derive(Debug, Clone)]
pub struct Tree<P> {
    /// This node publishes on the topic: it is a root whenever it has no parent.
    pub publisher: bool,
    /// The peer this node receives from.
    pub parent: Option<P>,
    /// The root first, down to the parent.
    pub path: Vec<P>,
    /// The children and the tick of their last renewal.
    pub children: HashMap<P, u64>,
}

impl<P> Default for Tree<P> {
    fn default() -> Self {
        Tree {
            publisher: false,
            parent: None,
            path: Vec::new(),
            children: HashMap::new(),
        }
    }
}

impl<P: Copy + Eq + Hash + Ord> Tree<P> {
    /// A root or a child.
    pub fn attached(&self) -> bool {
        self.publisher || self.parent.is_some()
    }

    /// The root of this node's tree (`me` when it is one), if attached.
    pub fn root(&self, me: P) -> Option<P> {
        match self.parent {
            Some(_) => self.path.first().copied(),
            None if self.publisher => Some(me),
            None => None,
        }
    }

    /// The answer to `joiner`, whose own tree's root is `joiner_root` (`None`: unattached), at
    /// `tick`: the path a child gets (this node's path and itself) or why not. An existing
    /// child renews its place whatever root it names (after a merge it names the old one).
    pub fn accept(
        &mut self,
        me: P,
        joiner: P,
        joiner_root: Option<P>,
        tick: u64,
    ) -> Result<Vec<P>, Refusal> {
        let known = self.children.contains_key(&joiner);
        let my_root = self.root(me);
        // A node that lost its parent keeps its subtree while it joins again: its children
        // renew (their paths start at it until then); no one new joins.
        if my_root.is_none() && !known {
            return Err(Refusal::NotAttached);
        }
        if joiner == me || self.path.contains(&joiner) {
            return Err(Refusal::Cycle);
        }
        if self.path.len() >= MAX_DEPTH {
            return Err(Refusal::TooDeep);
        }
        if let (false, Some(my_root)) = (known, my_root) {
            if self.children.len() >= MAX_CHILDREN {
                return Err(Refusal::Full);
            }
            if joiner_root.is_some_and(|r| my_root > r) {
                return Err(Refusal::NotLower);
            }
        }
        self.children.insert(joiner, tick);
        let mut path = self.path.clone();
        path.push(me);
        Ok(path)
    }

    /// `parent` accepted this node with `path` (its path and itself): taken, unless the path
    /// holds this node (a cycle) or is too deep. A child that was a root is one no longer.
    pub fn joined(&mut self, me: P, parent: P, path: Vec<P>) -> Result<(), Refusal> {
        if parent == me || path.contains(&me) || path.last() != Some(&parent) {
            return Err(Refusal::Cycle);
        }
        if path.len() > MAX_DEPTH {
            return Err(Refusal::TooDeep);
        }
        self.children.remove(&parent);
        self.parent = Some(parent);
        self.path = path;
        Ok(())
    }

    /// Leaves the parent (gone, or it refused a renewal); the old one.
    pub fn detach(&mut self) -> Option<P> {
        self.path.clear();
        self.parent.take()
    }

    /// Forgets the children not renewed within [`EXPIRE_TICKS`] of `tick`; those forgotten.
    pub fn expire(&mut self, tick: u64) -> Vec<P> {
        let gone: Vec<P> = self
            .children
            .iter()
            .filter(|(_, &at)| tick.saturating_sub(at) > EXPIRE_TICKS)
            .map(|(&p, _)| p)
            .collect();
        for p in &gone {
            self.children.remove(p);
        }
        gone
    }
}

/// A peer worth moving under: among `candidates` (nearest first, as [`candidates`] gives
/// them), the first that is not the parent and is less than half the parent's RTT away (an
/// ancestor will do; a descendant refuses, its path holds this node). A tree
/// built greedily as members arrive keeps the edges it had to take while nearer members were
/// not attached yet; this undoes them, one a period.
pub fn nearer<P: Copy + Eq + Hash + Ord>(
    tree: &Tree<P>,
    candidates: &[P],
    rtt: impl Fn(&P) -> Option<Duration>,
) -> Option<P> {
    let parent = tree.parent?;
    let limit = rtt(&parent)? / 2;
    candidates
        .iter()
        .copied()
        .filter(|c| *c != parent)
        .find(|c| rtt(c).is_some_and(|r| r < limit))
}

/// The peers a node without a parent asks, in order: those that follow the topic, not this
/// node nor its children, nearest first by `rtt` (unmeasured last).
pub fn candidates<P: Copy + Eq + Hash + Ord>(
    tree: &Tree<P>,
    me: P,
    following: impl IntoIterator<Item = P>,
    rtt: impl Fn(&P) -> Option<Duration>,
) -> Vec<P> {
    let mut c: Vec<P> = following
        .into_iter()
        .filter(|p| *p != me && !tree.children.contains_key(p))
        .collect();
    c.sort();
    c.dedup();
    crate::decide::nearest_first(&mut c, rtt);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn only_an_attached_node_takes_children_and_its_path_goes_down() {
        let mut root = Tree::<u32> {
            publisher: true,
            ..Tree::default()
        };
        let mut loose = Tree::<u32>::default();
        assert_eq!(loose.accept(2, 3, None, 0), Err(Refusal::NotAttached));
        let path = root.accept(1, 2, None, 0).unwrap();
        assert_eq!(path, vec![1]);
        loose.joined(2, 1, path).unwrap();
        assert_eq!(loose.root(2), Some(1));
        assert_eq!(loose.accept(2, 3, None, 0).unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_node_that_lost_its_parent_keeps_its_children_but_takes_no_new_one() {
        let mut t = Tree::<u32> {
            parent: Some(1),
            path: vec![1],
            ..Tree::default()
        };
        t.accept(2, 3, None, 0).unwrap();
        assert_eq!(t.detach(), Some(1));
        assert_eq!(t.accept(2, 3, Some(1), 1), Ok(vec![2]));
        assert_eq!(t.accept(2, 4, None, 1), Err(Refusal::NotAttached));
    }

    #[test]
    fn no_cycle_is_ever_made() {
        // 1 ← 2 ← 3: 1 may not join 3, nor 2 join 3, nor 3 take 2 as a child.
        let mut three = Tree::<u32> {
            parent: Some(2),
            path: vec![1, 2],
            ..Tree::default()
        };
        assert_eq!(three.accept(3, 2, None, 0), Err(Refusal::Cycle));
        assert_eq!(three.accept(3, 1, None, 0), Err(Refusal::Cycle));
        assert_eq!(three.accept(3, 3, None, 0), Err(Refusal::Cycle));
        // A path naming the joiner, or not ending at the parent, is refused.
        let mut one = Tree::<u32> {
            publisher: true,
            ..Tree::default()
        };
        assert_eq!(one.joined(1, 3, vec![1, 2, 3]), Err(Refusal::Cycle));
        assert_eq!(one.joined(1, 3, vec![7, 2]), Err(Refusal::Cycle));
        assert_eq!(one.joined(1, 1, vec![1]), Err(Refusal::Cycle));
        assert_eq!(one.parent, None);
        let deep: Vec<u32> = (10..10 + MAX_DEPTH as u32 + 1).collect();
        let last = *deep.last().unwrap();
        assert_eq!(one.joined(1, last, deep), Err(Refusal::TooDeep));
    }

    #[test]
    fn children_are_bounded_renewed_and_expired() {
        let mut t = Tree::<u32> {
            publisher: true,
            ..Tree::default()
        };
        for c in 0..MAX_CHILDREN as u32 {
            t.accept(100, c, None, 0).unwrap();
        }
        assert_eq!(t.accept(100, 99, None, 0), Err(Refusal::Full));
        // A child renews its place even when full.
        assert!(t.accept(100, 0, None, 2).is_ok());
        let gone = t.expire(EXPIRE_TICKS + 1);
        assert_eq!(gone.len(), MAX_CHILDREN - 1);
        assert_eq!(t.children.keys().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn roots_merge_under_the_lowest() {
        let mut low = Tree::<u32> {
            publisher: true,
            ..Tree::default()
        };
        let mut high = Tree::<u32> {
            publisher: true,
            ..Tree::default()
        };
        // 9's tree does not take root 1; 1's takes root 9, which stops being a root.
        assert_eq!(high.accept(9, 1, Some(1), 0), Err(Refusal::NotLower));
        let path = low.accept(1, 9, Some(9), 0).unwrap();
        high.joined(9, 1, path).unwrap();
        assert_eq!(high.root(9), Some(1));
        // Its parent gone, a publisher is a root again.
        assert_eq!(high.detach(), Some(1));
        assert_eq!(high.root(9), Some(9));
    }

    #[test]
    fn a_child_moves_only_under_a_much_nearer_peer() {
        let t = Tree::<u32> {
            parent: Some(2),
            path: vec![1, 2],
            ..Tree::default()
        };
        let rtt = |p: &u32| match p {
            1 => ms(1),
            2 => ms(40),
            3 => ms(25),
            4 => ms(2),
            _ => None,
        };
        // 3 is not twice nearer than the parent; 4 is, and the root 1 too.
        assert_eq!(nearer(&t, &[3, 2], rtt), None);
        assert_eq!(nearer(&t, &[4, 3, 2], rtt), Some(4));
        assert_eq!(nearer(&t, &[1, 4, 3, 2], rtt), Some(1));
        // A tree member joins another in its own tree (same root).
        let mut four = Tree::<u32> {
            parent: Some(1),
            path: vec![1],
            ..Tree::default()
        };
        assert!(four.accept(4, 3, Some(1), 0).is_ok());
        // Nothing to compare with: no move.
        let no_rtt = |_: &u32| None;
        assert_eq!(nearer(&t, &[4], no_rtt), None);
    }

    #[test]
    fn candidates_are_nearest_first_without_me_or_my_children() {
        let mut t = Tree::<u32>::default();
        t.children.insert(4, 0);
        let rtt = |p: &u32| match p {
            2 => ms(20),
            3 => ms(1),
            4 => ms(0),
            _ => None,
        };
        assert_eq!(candidates(&t, 1, [5, 2, 3, 4, 1, 3], rtt), vec![3, 2, 5]);
    }
}
