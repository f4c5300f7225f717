//! Riptide on a simulated transit-stub network (004 §6.1, §6.7): what real processes on one
//! machine cannot reach.
//!
//! [`dissemination`] is Fig. 22: an update of one object reaches its replicas, scattered over
//! a 1,100-node GT-ITM-like topology ([`slipstream_sim::transit`]), and we count the
//! interdomain links its copies cross, four ways:
//!
//! - **direct**: the gateway sends each replica its own copy (or each replica polls the
//!   origin): no tree at all;
//! - **gossipsub**: what `slipstream node` does. Replicas of a site share a gossipsub topic;
//!   each keeps a mesh of about six random topic peers (libp2p's `mesh_n` 6, `mesh_n_high`
//!   12) with no regard for where they are, and a node forwards a new message once to every
//!   mesh peer but the one it came from. Every copy is counted, duplicates too: they cross
//!   links as much as first deliveries do (`gossipsub first` counts first deliveries only:
//!   the tree the flood happens to draw);
//! - **tree**: a locality-aware dissemination tree, what OceanStore's tree aims at: replicas
//!   join one by one, each under the tree member nearest to it by RTT ([`nearest_first`], the
//!   proxies' own choice of provider);
//! - **optimal**: the distinct interdomain links on the routes from the gateway to the
//!   replicas, each crossed once (a multicast over the routing tree): no tree does better.
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
    Crossings {
        stubs: stubs.len() as u32,
        direct,
        gossipsub,
        gossipsub_first,
        gossipsub_messages,
        tree,
        optimal,
    }
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
        assert_eq!((c.direct, c.tree, c.optimal, c.gossipsub), (0, 0, 0, 0));
        assert_eq!(c.stubs, 0);
        // Every replica got the message: a flood over a connected mesh sends at least one
        // copy to each.
        assert!(c.gossipsub_messages >= 9);
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
