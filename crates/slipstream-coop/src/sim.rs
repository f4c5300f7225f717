//! Riptide on a simulated transit-stub network (004 §6.1, §6.7): what real processes on one
//! machine cannot reach.
//!
//! [`dissemination`] is Fig. 22: an update of one object reaches its replicas, scattered over
//! a 1,100-node GT-ITM-like topology ([`slipstream_sim::transit`]), and we count the
//! interdomain links its copies cross, six ways:
//!
//! - **direct**: the gateway sends each replica its own copy (or each replica polls the
//!   origin): no tree at all;
//! - **gossipsub**: what `slipstream node` did before its push tree, and does with
//!   `PushMode::Mesh`. Replicas of a site share a gossipsub topic; each keeps a mesh of about
//!   six random topic peers (libp2p's `mesh_n` 6, `mesh_n_high` 12) with no regard for where
//!   they are, and a node forwards a new message once to every mesh peer but the one it came
//!   from. Every copy is counted, duplicates too: they cross
//!   links as much as first deliveries do (`gossipsub first` counts first deliveries only:
//!   the tree the flood happens to draw);
//! - **tree**: a locality-aware dissemination tree, what OceanStore's tree aims at: replicas
//!   join one by one, each under the tree member nearest to it by RTT ([`nearest_first`], the
//!   proxies' own choice of provider);
//! - **optimal**: the distinct interdomain links on the routes from the gateway to the
//!   replicas, each crossed once (a multicast over the routing tree): no tree does better;
//! - **product tree** ([`product_tree`]): what `slipstream node` now does ([`crate::tree`]),
//!   with only what a node knows. Each replica is connected to the gateway, to the member it
//!   copied the object from and to about [`PRODUCT_PEERS`] random other members; it joins
//!   under the attached connected member nearest by RTT that has room
//!   ([`crate::tree::candidates`], [`crate::tree::MAX_CHILDREN`]), and later moves under a
//!   connected member less than half its parent's RTT away ([`crate::tree::nearer`]) until no
//!   move is left. It draws from its own generator, so the other series are unchanged.
//!   **product tree, LAN peers** is the same with each replica also connected to the members
//!   of its own stub (what mDNS gives on a LAN): the rule is the same, the knowledge is not.
//!
//! [`flash_crowd`] is Figs. 18–19 at a scale real processes cannot reach: clients in the
//! organisation's stub hammer one object; the manager counts their hints with the node's own
//! [`HotCounter`] and spreads the object to the nodes nearest to it, and every client reads
//! from the replica nearest to it. It reports each node's share of the requests.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use slipstream_sim::transit::{Node, Paths, Topology};
use std::collections::{BTreeSet, BinaryHeap};
use std::time::Duration;

use crate::decide::{nearest_first, spread_candidates, HotCounter};

/// Shortest paths from every node, computed once.
#[derive(Debug)]
pub struct AllPaths {
    paths: Vec<Paths>,
}

impl AllPaths {
    /// Shortest paths from every node of `topology`.
    pub fn new(topology: &Topology) -> AllPaths {
        AllPaths {
            paths: (0..topology.nodes())
                .map(|n| topology.paths_from(n))
                .collect(),
        }
    }

    /// From `a`.
    pub fn from(&self, a: Node) -> &Paths {
        &self.paths[a as usize]
    }

    /// The round-trip time between `a` and `b`.
    pub fn rtt(&self, a: Node, b: Node) -> Duration {
        Duration::from_nanos(2 * self.paths[a as usize].latency_ns(b))
    }
}

/// Interdomain link crossings of one update, by way of dissemination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crossings {
    /// Stub domains holding a replica (but the gateway's).
    pub stubs: u32,
    /// The gateway sends each replica a copy.
    pub direct: u32,
    /// A gossipsub mesh flood, every copy.
    pub gossipsub: u32,
    /// The same flood's first deliveries only.
    pub gossipsub_first: u32,
    /// Copies gossipsub sent in all (every mesh edge a message took).
    pub gossipsub_messages: u32,
    /// A locality-aware tree.
    pub tree: u32,
    /// The routes' distinct interdomain links.
    pub optimal: u32,
    /// The product's push tree with what each node knows ([`product_tree`]).
    pub product_tree: u32,
    /// The same with each replica also connected to the members of its own stub (mDNS on a
    /// LAN, or neighbours found by digests).
    pub product_tree_lan: u32,
}

/// libp2p gossipsub's defaults: the mesh degree a node grafts up to, and the most it accepts.
pub const MESH_N: usize = 6;
/// See [`MESH_N`].
pub const MESH_N_HIGH: usize = 12;

/// Fig. 22 for one placement: an update from `gateway` to `replicas` (distinct, without the
/// gateway), the mesh and the tree's join order drawn from `rng`.
pub fn dissemination(
    topology: &Topology,
    all: &AllPaths,
    gateway: Node,
    replicas: &[Node],
    rng: &mut StdRng,
) -> Crossings {
    let from_gw = all.from(gateway);
    let gw_stub = topology.stub_of(gateway);
    let stubs: BTreeSet<usize> = replicas
        .iter()
        .filter_map(|&r| topology.stub_of(r))
        .filter(|&s| Some(s) != gw_stub)
        .collect();
    let direct = replicas.iter().map(|&r| from_gw.crossings(r)).sum();

    let mut links = BTreeSet::new();
    for &r in replicas {
        for e in topology.route(from_gw, r) {
            if topology.edges()[e as usize].kind.interdomain() {
                links.insert(e);
            }
        }
    }
    let optimal = links.len() as u32;

    // The tree: members join in a random order under the nearest member so far.
    let mut order = replicas.to_vec();
    order.shuffle(rng);
    let mut members = vec![gateway];
    let mut tree = 0;
    for r in order {
        let mut candidates = members.clone();
        nearest_first(&mut candidates, |&m| Some(all.rtt(r, m)));
        tree += all.from(candidates[0]).crossings(r);
        members.push(r);
    }

    let (gossipsub, gossipsub_first, gossipsub_messages) = flood(all, gateway, replicas, rng);
    // Its own generator: the other series draw what they drew before it existed.
    let mut own = StdRng::seed_from_u64(
        u64::from(gateway) << 32
            ^ replicas
                .iter()
                .fold(0u64, |h, &r| h.rotate_left(5) ^ u64::from(r)),
    );
    let product_tree_lan = product_tree(all, gateway, replicas, Some(topology), &mut own.clone());
    let product_tree = product_tree(all, gateway, replicas, None, &mut own);
    Crossings {
        stubs: stubs.len() as u32,
        direct,
        gossipsub,
        gossipsub_first,
        gossipsub_messages,
        tree,
        optimal,
        product_tree,
        product_tree_lan,
    }
}

/// Members a replica is connected to besides the gateway and the member it copied from, about
/// (each dials half as many, and is dialled).
pub const PRODUCT_PEERS: usize = 20;

/// The product's push tree ([`crate::tree`]) among the gateway and `replicas`, with what each
/// node knows: its connected members only. Members arrive in a random order; each joins under
/// the nearest attached connected member with room (one that finds none tries again after the
/// others); then, round by round, each moves under a connected member (not its descendant)
/// less than half its parent's RTT away, until none
/// moves (at most 20 rounds). The interdomain crossings of one update down the tree.
/// With `lan`, each replica is also connected to the members in its own stub.
pub fn product_tree(
    all: &AllPaths,
    gateway: Node,
    replicas: &[Node],
    lan: Option<&Topology>,
    rng: &mut StdRng,
) -> u32 {
    use crate::tree::{candidates, nearer, Tree, MAX_CHILDREN};
    let mut nodes = vec![gateway];
    nodes.extend_from_slice(replicas);
    let n = nodes.len();
    let mut order: Vec<usize> = (1..n).collect();
    order.shuffle(rng);
    // Connections: the gateway, the holder a replica copied from (a member already there),
    // and random members, both ways.
    let mut peers: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let link = |a: usize, b: usize, peers: &mut Vec<BTreeSet<usize>>| {
        if a != b {
            peers[a].insert(b);
            peers[b].insert(a);
        }
    };
    for (i, &v) in order.iter().enumerate() {
        link(v, 0, &mut peers);
        let from = if i == 0 {
            0
        } else {
            order[rng.gen_range(0..i)]
        };
        link(v, from, &mut peers);
        for _ in 0..PRODUCT_PEERS / 2 {
            link(v, rng.gen_range(0..n), &mut peers);
        }
    }
    if let Some(t) = lan {
        for a in 0..n {
            for b in a + 1..n {
                let (sa, sb) = (t.stub_of(nodes[a]), t.stub_of(nodes[b]));
                if sa.is_some() && sa == sb {
                    link(a, b, &mut peers);
                }
            }
        }
    }
    let rtt = |a: usize, b: usize| Some(all.rtt(nodes[a], nodes[b]));
    let mut parent: Vec<Option<usize>> = vec![None; n];
    let mut children = vec![0usize; n];
    let path = |v: usize, parent: &[Option<usize>]| {
        let mut p = Vec::new();
        let mut at = parent[v];
        while let Some(u) = at {
            p.push(u);
            at = parent[u];
        }
        p.reverse();
        p
    };
    let view = |v: usize, parent: &[Option<usize>]| Tree {
        publisher: v == 0,
        parent: parent[v],
        path: path(v, parent),
        children: (0..n)
            .filter(|&c| parent[c] == Some(v))
            .map(|c| (c, 0))
            .collect(),
    };
    let mut attached = vec![false; n];
    attached[0] = true;
    // Members arrive; one that finds every attached peer full tries again a period later
    // (another pass), as the node does.
    let mut waiting = order.clone();
    while !waiting.is_empty() {
        let before = waiting.len();
        waiting.retain(|&v| {
            let tree = view(v, &parent);
            let asks = candidates(&tree, v, peers[v].iter().copied(), |&p| rtt(v, p));
            match asks
                .iter()
                .find(|&&p| attached[p] && children[p] < MAX_CHILDREN)
            {
                Some(&p) => {
                    parent[v] = Some(p);
                    children[p] += 1;
                    attached[v] = true;
                    false
                }
                None => true,
            }
        });
        if waiting.len() == before {
            break;
        }
    }
    for _ in 0..20 {
        let mut moved = false;
        for &v in &order {
            let tree = view(v, &parent);
            let asks: Vec<usize> = candidates(&tree, v, peers[v].iter().copied(), |&p| rtt(v, p))
                .into_iter()
                .filter(|&p| {
                    attached[p] && children[p] < MAX_CHILDREN && !path(p, &parent).contains(&v)
                })
                .collect();
            if let (Some(p), Some(old)) = (nearer(&tree, &asks, |&p| rtt(v, p)), parent[v]) {
                children[old] -= 1;
                children[p] += 1;
                parent[v] = Some(p);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    // A member that never found room (not seen at these sizes) is counted as a direct copy.
    (1..n)
        .map(|v| {
            let from = parent[v].unwrap_or(0);
            all.from(nodes[from]).crossings(nodes[v])
        })
        .sum()
}

/// A gossipsub mesh among the gateway and `replicas` and one message flooded over it from the
/// gateway: (crossings of every copy, of first deliveries, copies sent).
fn flood(all: &AllPaths, gateway: Node, replicas: &[Node], rng: &mut StdRng) -> (u32, u32, u32) {
    let mut nodes = vec![gateway];
    nodes.extend_from_slice(replicas);
    let n = nodes.len();
    let mut mesh: Vec<Vec<usize>> = vec![Vec::new(); n];
    // Each node in turn grafts random topic peers until it has MESH_N, among those that have
    // room (a peer at MESH_N_HIGH prunes the graft).
    let mut turn: Vec<usize> = (0..n).collect();
    turn.shuffle(rng);
    for &a in &turn {
        let mut others: Vec<usize> = (0..n).filter(|&b| b != a).collect();
        others.shuffle(rng);
        for b in others {
            if mesh[a].len() >= MESH_N.min(n - 1) {
                break;
            }
            if !mesh[a].contains(&b) && mesh[b].len() < MESH_N_HIGH {
                mesh[a].push(b);
                mesh[b].push(a);
            }
        }
    }
    // Flood in time order: a node forwards once, on first receipt, to every mesh peer but the
    // one it came from (and never back to the publisher).
    let mut heap = BinaryHeap::new();
    heap.push(std::cmp::Reverse((0u64, 0usize, usize::MAX)));
    let (mut all_x, mut first_x, mut copies) = (0, 0, 0);
    let mut done = vec![false; n];
    while let Some(std::cmp::Reverse((t, v, from))) = heap.pop() {
        if done[v] {
            continue;
        }
        done[v] = true;
        if from != usize::MAX {
            first_x += all.from(nodes[from]).crossings(nodes[v]);
        }
        for &w in &mesh[v] {
            if w == from || w == 0 {
                continue;
            }
            copies += 1;
            all_x += all.from(nodes[v]).crossings(nodes[w]);
            let at = t + all.from(nodes[v]).latency_ns(nodes[w]);
            heap.push(std::cmp::Reverse((at, w, v)));
        }
    }
    (all_x, first_x, copies)
}

/// One row of Fig. 22: a number of replicas, the mean crossings over `trials` placements.
#[derive(Debug, Clone, PartialEq)]
pub struct Fig22Row {
    /// Replicas.
    pub replicas: usize,
    /// Placements averaged.
    pub trials: u32,
    /// The means, by way.
    pub mean: MeanCrossings,
}

/// [`Crossings`] averaged.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[allow(missing_docs)]
pub struct MeanCrossings {
    pub stubs: f64,
    pub direct: f64,
    pub gossipsub: f64,
    pub gossipsub_first: f64,
    pub gossipsub_messages: f64,
    pub tree: f64,
    pub optimal: f64,
    pub product_tree: f64,
    pub product_tree_lan: f64,
}

/// Fig. 22: for each count in `counts`, `trials` placements of that many replicas on random
/// stub nodes (never the gateway), the gateway a random stub node too; seeded.
pub fn fig22(topology: &Topology, counts: &[usize], trials: u32, seed: u64) -> Vec<Fig22Row> {
    let all = AllPaths::new(topology);
    let stub_nodes: Vec<Node> = topology.stubs().iter().flatten().copied().collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rows = Vec::new();
    for &count in counts {
        let mut sum = MeanCrossings::default();
        for _ in 0..trials {
            let gateway = stub_nodes[rng.gen_range(0..stub_nodes.len())];
            let pool: Vec<Node> = stub_nodes
                .iter()
                .copied()
                .filter(|&n| n != gateway)
                .collect();
            let replicas: Vec<Node> = pool
                .choose_multiple(&mut rng, count.min(pool.len()))
                .copied()
                .collect();
            let c = dissemination(topology, &all, gateway, &replicas, &mut rng);
            sum.stubs += f64::from(c.stubs);
            sum.direct += f64::from(c.direct);
            sum.gossipsub += f64::from(c.gossipsub);
            sum.gossipsub_first += f64::from(c.gossipsub_first);
            sum.gossipsub_messages += f64::from(c.gossipsub_messages);
            sum.tree += f64::from(c.tree);
            sum.optimal += f64::from(c.optimal);
            sum.product_tree += f64::from(c.product_tree);
            sum.product_tree_lan += f64::from(c.product_tree_lan);
        }
        let t = f64::from(trials.max(1));
        rows.push(Fig22Row {
            replicas: count,
            trials,
            mean: MeanCrossings {
                stubs: sum.stubs / t,
                direct: sum.direct / t,
                gossipsub: sum.gossipsub / t,
                gossipsub_first: sum.gossipsub_first / t,
                gossipsub_messages: sum.gossipsub_messages / t,
                tree: sum.tree / t,
                optimal: sum.optimal / t,
                product_tree: sum.product_tree / t,
                product_tree_lan: sum.product_tree_lan / t,
            },
        });
    }
    rows
}

/// A flash crowd in the organisation's stub (Figs. 18–19 at scale).
#[derive(Debug, Clone, PartialEq)]
pub struct FlashCrowd {
    /// Requests each node served, by node, most first (the origin's share is `origin`).
    pub served: Vec<(Node, u64)>,
    /// Requests the origin served (misses before the first replica).
    pub origin: u64,
    /// Requests in all.
    pub requests: u64,
    /// Replicas made.
    pub replicas: usize,
    /// The request at which the object became hot and was spread (`None`: never).
    pub spread_at: Option<u64>,
}

/// `requests` requests for one object from `clients` client nodes of the organisation's stub
/// (the first stub), in turn. The manager, at a random node of that stub, makes the first
/// replica on its own node at the first miss hint. As in the node, a request whose replica was
/// neither on its client's node nor on a neighbour's (whose digests it holds) had to walk the
/// DHT, and hints the manager; at the object's `hot_after`th hint the manager spreads it over
/// the `copies` nodes of the stub nearest to it. Each request is served by the replica
/// nearest to its client.
pub fn flash_crowd(
    topology: &Topology,
    all: &AllPaths,
    clients: usize,
    requests: u64,
    copies: usize,
    hot_after: u32,
    seed: u64,
) -> FlashCrowd {
    let mut rng = StdRng::seed_from_u64(seed);
    let stub = &topology.stubs()[0];
    let manager = stub[rng.gen_range(0..stub.len())];
    let client_nodes: Vec<Node> = stub
        .choose_multiple(&mut rng, clients.min(stub.len()))
        .copied()
        .collect();
    let mut holders: Vec<Node> = Vec::new();
    let mut hot = HotCounter::new(hot_after);
    let mut served = std::collections::BTreeMap::<Node, u64>::new();
    let (mut origin, mut spread_at) = (0, None);
    for i in 0..requests {
        let client = client_nodes[(i % client_nodes.len() as u64) as usize];
        let mut near = holders.clone();
        nearest_first(&mut near, |&h| Some(all.rtt(client, h)));
        let hinted = match near.first() {
            None => {
                origin += 1;
                holders.push(manager);
                true
            }
            Some(&h) => {
                *served.entry(h).or_default() += 1;
                h != client && !topology.neighbours(client).any(|n| n == h)
            }
        };
        if hinted && hot.hint(0u8) {
            spread_at = Some(i);
            let targets = spread_candidates(stub.clone(), &holders, |&n| Some(all.rtt(manager, n)));
            holders.extend(targets.into_iter().take(copies));
        }
    }
    let mut served: Vec<(Node, u64)> = served.into_iter().collect();
    served.sort_by_key(|&(n, c)| (std::cmp::Reverse(c), n));
    FlashCrowd {
        served,
        origin,
        requests,
        replicas: holders.len(),
        spread_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_sim::transit::Params;

    fn small() -> Topology {
        let p = Params {
            transit_domains: 2,
            transit_nodes: 3,
            stubs: 6,
            nodes: 126,
            ..Params::riptide()
        };
        Topology::generate(&p, 4).unwrap()
    }

    #[test]
    fn no_way_crosses_fewer_links_than_the_routes_share_and_a_tree_beats_direct() {
        let t = small();
        let all = AllPaths::new(&t);
        let mut rng = StdRng::seed_from_u64(1);
        let nodes: Vec<Node> = t.stubs().iter().flatten().copied().collect();
        for _ in 0..30 {
            let gw = nodes[rng.gen_range(0..nodes.len())];
            let pool: Vec<Node> = nodes.iter().copied().filter(|&n| n != gw).collect();
            let replicas: Vec<Node> = pool.choose_multiple(&mut rng, 40).copied().collect();
            let c = dissemination(&t, &all, gw, &replicas, &mut rng);
            assert!(c.optimal <= c.tree, "{c:?}");
            assert!(c.optimal <= c.gossipsub_first, "{c:?}");
            assert!(c.gossipsub_first <= c.gossipsub, "{c:?}");
            assert!(c.tree <= c.direct, "{c:?}");
            assert!(c.optimal <= c.product_tree, "{c:?}");
            assert!(c.optimal <= c.product_tree_lan, "{c:?}");
            // Every stub with a replica is entered at least once.
            assert!(c.optimal >= c.stubs, "{c:?}");
        }
    }

    #[test]
    fn replicas_in_the_gateways_stub_cost_no_crossing() {
        let t = small();
        let all = AllPaths::new(&t);
        let stub = &t.stubs()[2];
        let mut rng = StdRng::seed_from_u64(2);
        let c = dissemination(&t, &all, stub[0], &stub[1..10], &mut rng);
        assert_eq!(
            (c.direct, c.tree, c.optimal, c.gossipsub, c.product_tree),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(c.stubs, 0);
        // Every replica got the message: a flood over a connected mesh sends at least one
        // copy to each.
        assert!(c.gossipsub_messages >= 9);
    }

    /// Fig. 22 with the product tree, on `slipstream sim riptide`'s topology and placements
    /// (seed 1, 20 placements): `cargo test -p slipstream-coop --release --lib
    /// fig22_with_the_product_tree -- --ignored --nocapture`.
    #[test]
    #[ignore = "the full 1,100-node figure: run by hand"]
    fn fig22_with_the_product_tree() {
        let t = Topology::generate(&Params::riptide(), 1).unwrap();
        let rows = fig22(&t, &[1, 2, 5, 10, 20, 50, 100, 200, 400], 20, 1);
        println!(
            "replicas,stubs,direct,gossipsub,gossipsub_first,tree,product_tree,\
             product_tree_lan,optimal"
        );
        for r in rows {
            let m = r.mean;
            println!(
                "{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1}",
                r.replicas,
                m.stubs,
                m.direct,
                m.gossipsub,
                m.gossipsub_first,
                m.tree,
                m.product_tree,
                m.product_tree_lan,
                m.optimal
            );
        }
    }

    #[test]
    fn the_product_tree_reaches_every_replica_and_keeps_a_stub_together() {
        let t = small();
        let all = AllPaths::new(&t);
        let mut rng = StdRng::seed_from_u64(5);
        // A gateway in one stub, replicas in another: the product tree enters that stub a
        // few times, direct copies once a replica.
        let (a, b) = (&t.stubs()[0], &t.stubs()[3]);
        let replicas: Vec<Node> = b[..15].to_vec();
        let c = dissemination(&t, &all, a[0], &replicas, &mut rng);
        assert!(c.product_tree < c.direct / 4, "{c:?}");
        assert!(c.product_tree >= c.optimal, "{c:?}");
    }

    #[test]
    fn a_flash_crowd_is_spread_once_hot_and_no_request_fails() {
        let t = small();
        let all = AllPaths::new(&t);
        let f = flash_crowd(&t, &all, 10, 1000, 4, 20, 3);
        assert_eq!(f.origin, 1);
        assert_eq!(f.replicas, 5);
        assert!(f.spread_at.is_some());
        let served: u64 = f.served.iter().map(|s| s.1).sum();
        assert_eq!(served + f.origin, f.requests);
        // More than one replica serves.
        assert!(f.served.len() > 1, "{:?}", f.served);
        // Never hot: one replica serves everything after the first miss.
        let f = flash_crowd(&t, &all, 10, 1000, 4, 1_000_000, 3);
        assert_eq!((f.replicas, f.served.len()), (1, 1));
    }
}
