//! A GT-ITM-like transit-stub topology (Zegura, Calvert and Bhattacharjee's model, the one
//! paper 004 §6.1 simulates on) and shortest-path routing over it.
//!
//! Transit domains of a few well-connected transit nodes are joined to one another; each
//! transit node has stub domains hanging off it, each a connected random graph of nodes joined
//! to its transit node by one stub-transit edge. Paper 004's numbers are the defaults
//! ([`Params::riptide`]): 1,100 nodes, stubs of about 100 nodes, stub-stub edges of 100 Mb/s
//! with 1–7 ms latency, stub-transit edges of 1.5 Mb/s and transit-transit edges of 45 Mb/s,
//! both with 10–30 ms latency.
//!
//! Routes are shortest paths by latency (GT-ITM's edge weights), ties broken by node number,
//! so the same seed gives the same topology and the same routes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A node's number.
pub type Node = u32;

/// What kind of link an edge is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// Inside a stub domain.
    StubStub,
    /// Between a stub domain and its transit node: an interdomain link.
    StubTransit,
    /// Between transit nodes (of one transit domain or two): an interdomain link.
    TransitTransit,
}

impl EdgeKind {
    /// Whether crossing this edge leaves a domain (paper 004 §4.5: the links that are
    /// "congested, costly, or of limited bandwidth").
    pub fn interdomain(self) -> bool {
        !matches!(self, EdgeKind::StubStub)
    }
}

/// One undirected edge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge {
    /// One end.
    pub a: Node,
    /// The other end.
    pub b: Node,
    /// What kind of link.
    pub kind: EdgeKind,
    /// One-way latency, nanoseconds.
    pub latency_ns: u64,
    /// Bandwidth, bits a second.
    pub bandwidth_bps: u64,
}

/// The generator's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Transit domains.
    pub transit_domains: u32,
    /// Transit nodes per transit domain.
    pub transit_nodes: u32,
    /// Stub domains in all (dealt to the transit nodes in turn).
    pub stubs: u32,
    /// Nodes in all (the stubs share what the transit nodes leave, as evenly as possible).
    pub nodes: u32,
    /// Probability of an extra edge between two nodes of one stub (beyond a random spanning
    /// tree that keeps the stub connected).
    pub stub_edge_p: f64,
    /// Probability of an edge between two transit nodes of one domain (beyond a ring).
    pub transit_edge_p: f64,
    /// Intra-stub latency range, milliseconds.
    pub stub_latency_ms: (f64, f64),
    /// Interdomain latency range, milliseconds.
    pub interdomain_latency_ms: (f64, f64),
    /// Bandwidths, bits a second: stub-stub, stub-transit, transit-transit.
    pub bandwidth_bps: (u64, u64, u64),
}

impl Params {
    /// Paper 004 §6.1: 1,100 nodes, stub domains of about 100 nodes, 100 Mb/s / 1.5 Mb/s /
    /// 45 Mb/s links, 1–7 ms inside stubs and 10–30 ms between domains. Two transit domains
    /// of five transit nodes and eleven stubs give 1,090 stub nodes (99 or 100 each).
    pub fn riptide() -> Params {
        Params {
            transit_domains: 2,
            transit_nodes: 5,
            stubs: 11,
            nodes: 1100,
            // About three edges a node inside a stub of 100.
            stub_edge_p: 0.02,
            transit_edge_p: 0.6,
            stub_latency_ms: (1.0, 7.0),
            interdomain_latency_ms: (10.0, 30.0),
            bandwidth_bps: (100_000_000, 1_500_000, 45_000_000),
        }
    }
}

/// Why parameters make no topology.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopologyError {
    /// Nothing to build.
    #[error("a transit-stub topology needs at least one transit domain, transit node and stub")]
    Empty,
    /// Fewer nodes than transit nodes plus one per stub.
    #[error("{nodes} nodes cannot make {transit} transit nodes and {stubs} non-empty stubs")]
    TooFewNodes {
        /// Nodes asked for.
        nodes: u32,
        /// Transit nodes.
        transit: u32,
        /// Stubs.
        stubs: u32,
    },
    /// A probability outside 0..=1 or a latency range upside down.
    #[error("{0}")]
    Invalid(&'static str),
}

/// A generated topology.
#[derive(Debug, Clone)]
pub struct Topology {
    edges: Vec<Edge>,
    /// For each node, (neighbour, edge index).
    adjacency: Vec<Vec<(Node, u32)>>,
    /// For each node, its domain: transit domain `d` is `d`, stub `s` is `transit_domains + s`.
    domain: Vec<u32>,
    transit_domains: u32,
    /// The stubs' nodes, by stub.
    stubs: Vec<Vec<Node>>,
}

impl Topology {
    /// Generates a topology from `params` and `seed`.
    pub fn generate(params: &Params, seed: u64) -> Result<Topology, TopologyError> {
        let p = params;
        if p.transit_domains == 0 || p.transit_nodes == 0 || p.stubs == 0 {
            return Err(TopologyError::Empty);
        }
        let transit = p.transit_domains * p.transit_nodes;
        if p.nodes < transit + p.stubs {
            return Err(TopologyError::TooFewNodes {
                nodes: p.nodes,
                transit,
                stubs: p.stubs,
            });
        }
        if !(0.0..=1.0).contains(&p.stub_edge_p) || !(0.0..=1.0).contains(&p.transit_edge_p) {
            return Err(TopologyError::Invalid(
                "edge probabilities must be within 0..=1",
            ));
        }
        let ok = |(lo, hi): (f64, f64)| lo > 0.0 && lo <= hi;
        if !ok(p.stub_latency_ms) || !ok(p.interdomain_latency_ms) {
            return Err(TopologyError::Invalid(
                "latency ranges must be positive, low to high",
            ));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut t = Topology {
            edges: Vec::new(),
            adjacency: vec![Vec::new(); p.nodes as usize],
            domain: vec![0; p.nodes as usize],
            transit_domains: p.transit_domains,
            stubs: Vec::new(),
        };
        let ms = |rng: &mut StdRng, (lo, hi): (f64, f64)| -> u64 {
            (rng.gen_range(lo..=hi) * 1e6).round() as u64
        };
        let (bw_stub, bw_st, bw_tt) = p.bandwidth_bps;
        // Transit domains: a ring of their transit nodes plus random chords.
        for d in 0..p.transit_domains {
            let first = d * p.transit_nodes;
            for i in 0..p.transit_nodes {
                t.domain[(first + i) as usize] = d;
            }
            for i in 0..p.transit_nodes {
                for j in i + 1..p.transit_nodes {
                    let ring = j == i + 1 || (i == 0 && j == p.transit_nodes - 1);
                    if ring || rng.gen_bool(p.transit_edge_p) {
                        let lat = ms(&mut rng, p.interdomain_latency_ms);
                        t.add(first + i, first + j, EdgeKind::TransitTransit, lat, bw_tt);
                    }
                }
            }
        }
        // Transit domains joined in a chain (and the last to the first), each link between
        // random transit nodes of the two.
        for d in 0..p.transit_domains {
            let e = (d + 1) % p.transit_domains;
            if e == d || (p.transit_domains == 2 && d == 1) {
                continue;
            }
            let a = d * p.transit_nodes + rng.gen_range(0..p.transit_nodes);
            let b = e * p.transit_nodes + rng.gen_range(0..p.transit_nodes);
            let lat = ms(&mut rng, p.interdomain_latency_ms);
            t.add(a, b, EdgeKind::TransitTransit, lat, bw_tt);
        }
        // Stubs: sizes as even as the node count allows, each a random spanning tree plus
        // extra edges, hung off the transit nodes in turn.
        let stub_nodes = p.nodes - transit;
        let mut next = transit;
        for s in 0..p.stubs {
            let size = stub_nodes / p.stubs + u32::from(s < stub_nodes % p.stubs);
            let members: Vec<Node> = (next..next + size).collect();
            next += size;
            for &n in &members {
                t.domain[n as usize] = p.transit_domains + s;
            }
            for i in 1..members.len() {
                let parent = members[rng.gen_range(0..i)];
                let lat = ms(&mut rng, p.stub_latency_ms);
                t.add(members[i], parent, EdgeKind::StubStub, lat, bw_stub);
            }
            for i in 0..members.len() {
                for j in i + 1..members.len() {
                    if rng.gen_bool(p.stub_edge_p) {
                        let lat = ms(&mut rng, p.stub_latency_ms);
                        t.add(members[i], members[j], EdgeKind::StubStub, lat, bw_stub);
                    }
                }
            }
            let gateway = members[rng.gen_range(0..members.len())];
            let lat = ms(&mut rng, p.interdomain_latency_ms);
            t.add(gateway, s % transit, EdgeKind::StubTransit, lat, bw_st);
            t.stubs.push(members);
        }
        Ok(t)
    }

    fn add(&mut self, a: Node, b: Node, kind: EdgeKind, latency_ns: u64, bandwidth_bps: u64) {
        let i = self.edges.len() as u32;
        self.edges.push(Edge {
            a,
            b,
            kind,
            latency_ns,
            bandwidth_bps,
        });
        self.adjacency[a as usize].push((b, i));
        self.adjacency[b as usize].push((a, i));
    }

    /// The number of nodes.
    pub fn nodes(&self) -> u32 {
        self.adjacency.len() as u32
    }

    /// The edges.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The stub domains' nodes.
    pub fn stubs(&self) -> &[Vec<Node>] {
        &self.stubs
    }

    /// The nodes one edge away from `n`.
    pub fn neighbours(&self, n: Node) -> impl Iterator<Item = Node> + '_ {
        self.adjacency[n as usize].iter().map(|&(v, _)| v)
    }

    /// The stub a node is in (`None`: a transit node).
    pub fn stub_of(&self, n: Node) -> Option<usize> {
        let d = self.domain[n as usize];
        (d >= self.transit_domains).then(|| (d - self.transit_domains) as usize)
    }

    /// Shortest paths by latency from `source` to every node.
    pub fn paths_from(&self, source: Node) -> Paths {
        let n = self.adjacency.len();
        let mut dist = vec![u64::MAX; n];
        let mut via = vec![u32::MAX; n];
        let mut heap = BinaryHeap::new();
        dist[source as usize] = 0;
        heap.push(Reverse((0u64, source)));
        while let Some(Reverse((d, u))) = heap.pop() {
            if d > dist[u as usize] {
                continue;
            }
            for &(v, e) in &self.adjacency[u as usize] {
                let nd = d + self.edges[e as usize].latency_ns;
                let better = nd < dist[v as usize]
                    || (nd == dist[v as usize]
                        && via[v as usize] != u32::MAX
                        && u < self.other(via[v as usize], v));
                if better {
                    dist[v as usize] = nd;
                    via[v as usize] = e;
                    heap.push(Reverse((nd, v)));
                }
            }
        }
        // Interdomain edges on each path, in order of distance (a node's predecessor is
        // nearer, so it is done first).
        let mut order: Vec<Node> = (0..n as Node)
            .filter(|&v| dist[v as usize] != u64::MAX)
            .collect();
        order.sort_by_key(|&v| (dist[v as usize], v));
        let mut crossings = vec![0u32; n];
        for v in order {
            let e = via[v as usize];
            if e != u32::MAX {
                let prev = self.other(e, v);
                crossings[v as usize] =
                    crossings[prev as usize] + u32::from(self.edges[e as usize].kind.interdomain());
            }
        }
        Paths {
            source,
            dist_ns: dist,
            via,
            crossings,
        }
    }

    fn other(&self, e: u32, v: Node) -> Node {
        let edge = &self.edges[e as usize];
        if edge.a == v {
            edge.b
        } else {
            edge.a
        }
    }

    /// The edges of the path `paths` holds to `to`, from the source out.
    pub fn route(&self, paths: &Paths, to: Node) -> Vec<u32> {
        let mut out = Vec::new();
        let mut v = to;
        while v != paths.source {
            let e = paths.via[v as usize];
            if e == u32::MAX {
                return Vec::new();
            }
            out.push(e);
            v = self.other(e, v);
        }
        out.reverse();
        out
    }
}

/// Shortest paths from one source.
#[derive(Debug, Clone)]
pub struct Paths {
    source: Node,
    dist_ns: Vec<u64>,
    via: Vec<u32>,
    crossings: Vec<u32>,
}

impl Paths {
    /// The source.
    pub fn source(&self) -> Node {
        self.source
    }

    /// One-way latency to `to`, nanoseconds (`u64::MAX`: unreachable).
    pub fn latency_ns(&self, to: Node) -> u64 {
        self.dist_ns[to as usize]
    }

    /// Interdomain links on the path to `to`.
    pub fn crossings(&self, to: Node) -> u32 {
        self.crossings[to as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_topology_has_its_sizes_and_link_kinds() {
        let t = Topology::generate(&Params::riptide(), 1).unwrap();
        assert_eq!(t.nodes(), 1100);
        assert_eq!(t.stubs().len(), 11);
        for s in t.stubs() {
            assert!((99..=100).contains(&s.len()), "{}", s.len());
        }
        for e in t.edges() {
            let (lo, hi, bw) = match e.kind {
                EdgeKind::StubStub => (1e6, 7e6, 100_000_000),
                EdgeKind::StubTransit => (10e6, 30e6, 1_500_000),
                EdgeKind::TransitTransit => (10e6, 30e6, 45_000_000),
            };
            assert!((lo..=hi).contains(&(e.latency_ns as f64)), "{e:?}");
            assert_eq!(e.bandwidth_bps, bw);
            let same_stub = t.stub_of(e.a).is_some() && t.stub_of(e.a) == t.stub_of(e.b);
            assert_eq!(same_stub, e.kind == EdgeKind::StubStub, "{e:?}");
        }
        // Exactly one way out of each stub.
        let out = t
            .edges()
            .iter()
            .filter(|e| e.kind == EdgeKind::StubTransit)
            .count();
        assert_eq!(out, 11);
    }

    #[test]
    fn every_node_is_reachable_and_paths_between_stubs_cross_domains() {
        let t = Topology::generate(&Params::riptide(), 2).unwrap();
        let p = t.paths_from(t.stubs()[0][0]);
        for v in 0..t.nodes() {
            assert_ne!(p.latency_ns(v), u64::MAX, "node {v} unreachable");
        }
        // Inside the stub: no crossing; to another stub: out of one stub, into the other.
        assert!(t.stubs()[0].iter().all(|&v| p.crossings(v) == 0));
        for s in &t.stubs()[1..] {
            assert!(s.iter().all(|&v| p.crossings(v) >= 2));
        }
        // The route's edges add up to its latency and its crossings.
        let far = t.stubs()[5][7];
        let route = t.route(&p, far);
        let lat: u64 = route
            .iter()
            .map(|&e| t.edges()[e as usize].latency_ns)
            .sum();
        let cross = route
            .iter()
            .filter(|&&e| t.edges()[e as usize].kind.interdomain())
            .count();
        assert_eq!(lat, p.latency_ns(far));
        assert_eq!(cross as u32, p.crossings(far));
    }

    #[test]
    fn the_same_seed_gives_the_same_topology() {
        let a = Topology::generate(&Params::riptide(), 9).unwrap();
        let b = Topology::generate(&Params::riptide(), 9).unwrap();
        assert_eq!(a.edges(), b.edges());
        let c = Topology::generate(&Params::riptide(), 10).unwrap();
        assert_ne!(a.edges(), c.edges());
    }

    #[test]
    fn impossible_parameters_are_named() {
        let mut p = Params::riptide();
        p.nodes = 15;
        assert!(matches!(
            Topology::generate(&p, 1),
            Err(TopologyError::TooFewNodes { .. })
        ));
        let mut p = Params::riptide();
        p.stub_edge_p = 2.0;
        assert!(matches!(
            Topology::generate(&p, 1),
            Err(TopologyError::Invalid(_))
        ));
        let mut p = Params::riptide();
        p.stubs = 0;
        assert_eq!(Topology::generate(&p, 1).unwrap_err(), TopologyError::Empty);
    }
}
