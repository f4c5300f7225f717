//! The network: nodes, directed links with a capacity, a propagation delay and a DropTail
//! queue, static shortest-path routing, and the event loop that runs TCP transfers over them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::tcp::{Action, Congestion, Sender, Sink, TcpConfig};
use crate::time::{to_secs_f64, transmission, Nanos};

/// A node of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Capacity in bits per second.
    pub bits_per_second: u64,
    /// Propagation delay.
    pub delay: Nanos,
    /// DropTail limit as ns-2's `queue-limit`: at most `queue_limit - 1` packets wait behind the
    /// one being transmitted.
    pub queue_limit: usize,
}

/// A web transfer: `bytes` from `server` to `client` over one fresh TCP connection, starting at
/// `start` (paper 003: only the data transfer is modelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Caller's identifier, echoed in the result.
    pub id: u64,
    /// Sending node.
    pub server: NodeId,
    /// Receiving node.
    pub client: NodeId,
    /// Payload bytes.
    pub bytes: u64,
    /// Start time.
    pub start: Nanos,
}

/// How one transfer runs, beyond its [`Transfer`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Options {
    /// How its sender responds to congestion: Reno, or low-priority Nice.
    pub congestion: Congestion,
    /// Start only once the transfer at this index (in the same run) has completed, and not
    /// before its own start time: a connection fetching a queue of objects one after another
    /// (a prefetcher working through its hint lists). A transfer that never completes holds
    /// back those waiting for it.
    pub after: Option<usize>,
}

/// When a transfer finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferResult {
    /// The transfer.
    pub transfer: Transfer,
    /// Segments sent (first transmissions).
    pub segments: u32,
    /// When the client had every byte in order (ns-2 reference: `t_rx`).
    pub received: Nanos,
    /// When the server got the last ACK (`t_ack`).
    pub acked: Nanos,
    /// Segments retransmitted.
    pub retransmissions: u32,
}

#[derive(Debug, Clone, Copy)]
struct Packet {
    flow: u32,
    /// Data segment number, or ACK value.
    value: i64,
    is_ack: bool,
    bytes: u32,
    dst: NodeId,
}

#[derive(Debug)]
struct Link {
    to: NodeId,
    spec: LinkSpec,
    queue: VecDeque<Packet>,
    busy: bool,
    drops: u64,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Start(u32),
    TxDone(u32),
    Arrive(NodeId, Packet),
    Timeout(u32, u64),
    /// A paced (Nice) sender may send again.
    Wake(u32),
}

struct Flow {
    transfer: Transfer,
    /// This flow's TCP settings (a response after a request skips the handshake).
    cfg: TcpConfig,
    sender: Sender,
    sink: Sink,
    segments: u32,
    received: Option<Nanos>,
    acked: Option<Nanos>,
    /// For a request: the response flow to start once the server has the whole request.
    then: Option<u32>,
}

impl Flow {
    fn new(transfer: Transfer, cfg: TcpConfig, congestion: Congestion, then: Option<u32>) -> Flow {
        let segments = cfg.segments(transfer.bytes);
        Flow {
            transfer,
            cfg,
            sender: Sender::with_congestion(cfg, segments, congestion),
            sink: Sink::default(),
            segments,
            received: None,
            acked: None,
            then,
        }
    }
}

/// A topology. Build it, then [`Network::run`] transfers over it.
#[derive(Debug, Default, Clone)]
pub struct Network {
    nodes: u32,
    links: Vec<(NodeId, NodeId, LinkSpec)>,
}

/// A scenario that cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetError {
    /// No route between two nodes.
    #[error("no route from node {from} to node {to}")]
    NoRoute {
        /// Source.
        from: u32,
        /// Destination.
        to: u32,
    },
    /// A node that does not exist.
    #[error("node {0} does not exist")]
    NoNode(u32),
    /// A transfer waits for itself or for one that is not in the run.
    #[error("transfer {index} waits for transfer {after}, which is itself or not in the run")]
    After {
        /// The waiting transfer's index.
        index: usize,
        /// What it waits for.
        after: usize,
    },
}

impl Network {
    /// Adds a node.
    pub fn node(&mut self) -> NodeId {
        self.nodes += 1;
        NodeId(self.nodes - 1)
    }

    /// Adds a link in each direction with the same properties (ns-2's `duplex-link`).
    pub fn duplex(&mut self, a: NodeId, b: NodeId, spec: LinkSpec) {
        self.links.push((a, b, spec));
        self.links.push((b, a, spec));
    }

    /// Nodes in the network.
    pub fn node_count(&self) -> u32 {
        self.nodes
    }

    /// Every one-way link as (from, to, properties), in the order they were added.
    pub fn links(&self) -> impl Iterator<Item = (NodeId, NodeId, LinkSpec)> + '_ {
        self.links.iter().copied()
    }

    /// One-way links leaving each node, as (neighbour, link index), in the order added.
    fn adjacency(&self) -> Vec<Vec<(usize, u32)>> {
        let mut out = vec![Vec::new(); self.nodes as usize];
        for (i, (from, to, _)) in self.links.iter().enumerate() {
            out[from.0 as usize].push((to.0 as usize, i as u32));
        }
        out
    }

    /// Next-hop link index for every (node, destination): fewest hops, with ties broken as
    /// ns-2's static routing breaks them (`RouteLogic::compute_routes`, route.cc: from each
    /// source, nodes are settled in order of distance and then of node number, and a node keeps
    /// the route through the first settled neighbour, i.e. the lowest-numbered one one hop
    /// nearer). Between two nodes joined twice, the link added first is used.
    fn routes(&self) -> Vec<Vec<Option<u32>>> {
        let adjacency = self.adjacency();
        (0..self.nodes as usize)
            .map(|src| Self::routes_from(&adjacency, src))
            .collect()
    }

    /// [`Network::routes`] from one source: the first-hop link towards every node.
    fn routes_from(adjacency: &[Vec<(usize, u32)>], src: usize) -> Vec<Option<u32>> {
        let n = adjacency.len();
        let mut row = vec![None; n];
        let mut settled = vec![false; n];
        settled[src] = true;
        let mut layer = vec![src];
        while !layer.is_empty() {
            // Settle the layer in node order: the first to reach a node is its predecessor.
            layer.sort_unstable();
            let mut following = Vec::new();
            for &v in &layer {
                for &(w, link) in &adjacency[v] {
                    if settled[w] {
                        continue;
                    }
                    settled[w] = true;
                    // The first hop: this link if v is the source, else v's own first hop.
                    row[w] = if v == src { Some(link) } else { row[v] };
                    following.push(w);
                }
            }
            layer = following;
        }
        row
    }

    /// Whether packets can get from `from` to `to`.
    pub fn reachable(&self, from: NodeId, to: NodeId) -> bool {
        let n = self.nodes as usize;
        (from.0 as usize) < n
            && (to.0 as usize) < n
            && (from == to
                || Self::routes_from(&self.adjacency(), from.0 as usize)[to.0 as usize].is_some())
    }

    /// Runs `transfers` with TCP parameters `tcp` until all complete or `until` passes. Returns
    /// one result per completed transfer, in completion order, and the packets dropped.
    pub fn run(
        &self,
        transfers: &[Transfer],
        tcp: TcpConfig,
        until: Nanos,
    ) -> Result<Run, NetError> {
        self.run_traced(transfers, tcp, until, None)
    }

    /// [`Network::run`], recording every packet event into `trace` when given.
    pub fn run_traced(
        &self,
        transfers: &[Transfer],
        tcp: TcpConfig,
        until: Nanos,
        trace: Option<&mut Vec<TraceEvent>>,
    ) -> Result<Run, NetError> {
        self.run_with(transfers, &[], tcp, until, trace)
    }

    /// [`Network::run_traced`] with [`Options`] for each transfer: `options[i]` for
    /// `transfers[i]`, the default (Reno, no predecessor) past the end of the slice, so `&[]`
    /// is a plain run. The congestion control is the response's (server to client); a
    /// modelled request is always Reno.
    pub fn run_with(
        &self,
        transfers: &[Transfer],
        options: &[Options],
        tcp: TcpConfig,
        until: Nanos,
        trace: Option<&mut Vec<TraceEvent>>,
    ) -> Result<Run, NetError> {
        let option = |i: usize| options.get(i).copied().unwrap_or_default();
        let mut successors = vec![Vec::new(); transfers.len()];
        for i in 0..transfers.len() {
            if let Some(after) = option(i).after {
                if after == i || after >= transfers.len() {
                    return Err(NetError::After { index: i, after });
                }
                successors[after].push(i as u32);
            }
        }
        let routes = self.routes();
        for t in transfers {
            for node in [t.server, t.client] {
                if node.0 >= self.nodes {
                    return Err(NetError::NoNode(node.0));
                }
            }
            if t.server != t.client && routes[t.server.0 as usize][t.client.0 as usize].is_none() {
                return Err(NetError::NoRoute {
                    from: t.server.0,
                    to: t.client.0,
                });
            }
        }
        let mut sim = Sim {
            now: 0,
            now_f: 0.0,
            seq: 0,
            heap: BinaryHeap::new(),
            events: Vec::new(),
            free: Vec::new(),
            links: self
                .links
                .iter()
                .map(|(_, to, spec)| Link {
                    to: *to,
                    spec: *spec,
                    queue: VecDeque::new(),
                    busy: false,
                    drops: 0,
                })
                .collect(),
            links_from: self.links.iter().map(|(from, _, _)| from.0).collect(),
            routes,
            flows: Vec::with_capacity(transfers.len()),
            tcp,
            results: Vec::new(),
            events_processed: 0,
            trace: trace.is_some().then(Vec::new),
            first_flow: Vec::with_capacity(transfers.len()),
            successors,
        };
        // Flows 0..n are the transfers (the responses); requests, if modelled, follow.
        let with_request = tcp.request_bytes > 0;
        let response_cfg = TcpConfig {
            syn: tcp.syn && !with_request,
            ..tcp
        };
        sim.flows.extend(
            transfers
                .iter()
                .enumerate()
                .map(|(i, t)| Flow::new(*t, response_cfg, option(i).congestion, None)),
        );
        for (i, t) in transfers.iter().enumerate() {
            let first = if with_request {
                let request = Transfer {
                    server: t.client,
                    client: t.server,
                    bytes: u64::from(tcp.request_bytes),
                    ..*t
                };
                sim.flows
                    .push(Flow::new(request, tcp, Congestion::Reno, Some(i as u32)));
                sim.flows.len() - 1
            } else {
                i
            };
            sim.first_flow.push(first as u32);
            if option(i).after.is_none() {
                sim.schedule(t.start, to_secs_f64(t.start), Event::Start(first as u32));
            }
        }
        sim.run(until);
        if let (Some(out), Some(recorded)) = (trace, sim.trace.take()) {
            *out = recorded;
        }
        Ok(Run {
            drops: sim.links.iter().map(|l| l.drops).sum(),
            events: sim.events_processed,
            results: sim.results,
        })
    }
}

/// One line of a packet trace, in ns-2's vocabulary: `+` enqueue, `-` start of transmission,
/// `r` arrival at the far end, `d` drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// `+`, `-`, `r` or `d`.
    pub kind: char,
    /// When.
    pub time: Nanos,
    /// Link from node.
    pub from: u32,
    /// Link to node.
    pub to: u32,
    /// An ACK (else data).
    pub is_ack: bool,
    /// Bytes on the wire.
    pub bytes: u32,
    /// Transfer id.
    pub flow: u64,
    /// Segment number, or the ACK's value.
    pub seq: i64,
}

impl std::fmt::Display for TraceEvent {
    /// `KIND TIME FROM TO tcp|ack SIZE FLOW SEQ`, the fields of ns-2's trace lines that matter.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_ack { "ack" } else { "tcp" };
        write!(
            f,
            "{} {:.6} {} {} {kind} {} {} {}",
            self.kind,
            crate::time::to_secs_f64(self.time),
            self.from,
            self.to,
            self.bytes,
            self.flow,
            self.seq
        )
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Completed transfers, in completion order.
    pub results: Vec<TransferResult>,
    /// Packets dropped at full queues.
    pub drops: u64,
    /// Events processed (for speed measurements).
    pub events: u64,
}

struct Sim {
    now: Nanos,
    /// `now` as ns-2's double-precision clock would hold it (see [`Sim::schedule`]).
    now_f: f64,
    seq: u64,
    /// (time, ns-2 clock bits, insertion order, event slot).
    heap: BinaryHeap<Reverse<(Nanos, u64, u64, u32)>>,
    events: Vec<Option<Event>>,
    free: Vec<u32>,
    links: Vec<Link>,
    links_from: Vec<u32>,
    routes: Vec<Vec<Option<u32>>>,
    flows: Vec<Flow>,
    tcp: TcpConfig,
    results: Vec<TransferResult>,
    events_processed: u64,
    trace: Option<Vec<TraceEvent>>,
    /// Per transfer: the flow that starts it (its request, if modelled, else its response).
    first_flow: Vec<u32>,
    /// Per transfer: the transfers waiting for it to complete ([`Options::after`]).
    successors: Vec<Vec<u32>>,
}

impl Sim {
    fn record(&mut self, kind: char, link: u32, packet: &Packet) {
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        let from = self.links_from[link as usize];
        let l = &self.links[link as usize];
        trace.push(TraceEvent {
            kind,
            time: self.now,
            from,
            to: l.to.0,
            is_ack: packet.is_ack,
            bytes: packet.bytes,
            flow: self.flows[packet.flow as usize].transfer.id,
            seq: packet.value,
        });
    }

    /// Schedules `event` at `at`. Time is integer nanoseconds, exact; `at_f` is the same
    /// instant as ns-2's double-precision clock computes it (the same operands, added in the
    /// same order). It only orders events at exactly the same `at`: ns-2 orders those by the
    /// rounding of its clock, so breaking such ties by `at_f`, then by insertion, runs them in
    /// ns-2's order.
    fn schedule(&mut self, at: Nanos, at_f: f64, event: Event) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.events[i as usize] = Some(event);
                i
            }
            None => {
                self.events.push(Some(event));
                (self.events.len() - 1) as u32
            }
        };
        self.seq += 1;
        // Non-negative doubles order as their bit patterns.
        self.heap
            .push(Reverse((at, at_f.max(0.0).to_bits(), self.seq, slot)));
    }

    fn run(&mut self, until: Nanos) {
        let mut actions = Vec::new();
        while let Some(Reverse((at, at_f, _, slot))) = self.heap.pop() {
            if at > until {
                break;
            }
            self.now = at;
            self.now_f = f64::from_bits(at_f);
            self.events_processed += 1;
            let Some(event) = self.events[slot as usize].take() else {
                continue;
            };
            self.free.push(slot);
            match event {
                Event::Start(f) => {
                    self.flows[f as usize].sender.start(self.now, &mut actions);
                    self.apply(f, &mut actions);
                }
                Event::Timeout(f, generation) => {
                    self.flows[f as usize]
                        .sender
                        .on_timeout(generation, self.now, &mut actions);
                    self.apply(f, &mut actions);
                }
                Event::Wake(f) => {
                    self.flows[f as usize]
                        .sender
                        .on_wake(self.now, &mut actions);
                    self.apply(f, &mut actions);
                }
                Event::TxDone(link) => self.tx_done(link),
                Event::Arrive(node, packet) => self.arrive(node, packet, &mut actions),
            }
        }
    }

    /// Carries out a sender's actions.
    fn apply(&mut self, f: u32, actions: &mut Vec<Action>) {
        for action in actions.drain(..) {
            let flow = &self.flows[f as usize];
            let (server, client) = (flow.transfer.server, flow.transfer.client);
            match action {
                Action::Send { seq, .. } => {
                    let packet = Packet {
                        flow: f,
                        value: i64::from(seq),
                        is_ack: false,
                        bytes: flow.cfg.segment_bytes(seq),
                        dst: client,
                    };
                    self.forward(server, packet);
                }
                Action::Timer { at, generation } => {
                    let at_f = self.now_f + to_secs_f64(at.saturating_sub(self.now));
                    self.schedule(at, at_f, Event::Timeout(f, generation))
                }
                Action::Wake { at } => {
                    let at_f = self.now_f + to_secs_f64(at.saturating_sub(self.now));
                    self.schedule(at, at_f, Event::Wake(f))
                }
                Action::Done => {
                    let flow = &mut self.flows[f as usize];
                    flow.acked = Some(self.now);
                    if flow.then.is_some() {
                        // A request: its response reports the transfer.
                        continue;
                    }
                    self.results.push(TransferResult {
                        transfer: flow.transfer,
                        segments: flow.segments,
                        received: flow.received.unwrap_or(self.now),
                        acked: self.now,
                        retransmissions: flow.sender.retransmissions(),
                    });
                    // Response flows are numbered as their transfers.
                    let waiting = std::mem::take(&mut self.successors[f as usize]);
                    for next in waiting {
                        let start = self.flows[next as usize].transfer.start;
                        let (at, at_f) = if start > self.now {
                            (start, to_secs_f64(start))
                        } else {
                            (self.now, self.now_f)
                        };
                        let first = self.first_flow[next as usize];
                        self.schedule(at, at_f, Event::Start(first));
                    }
                }
            }
        }
    }

    /// Puts a packet at `node` on its way to `packet.dst`.
    fn forward(&mut self, node: NodeId, packet: Packet) {
        if node == packet.dst {
            self.schedule(self.now, self.now_f, Event::Arrive(node, packet));
            return;
        }
        let Some(link) = self.routes[node.0 as usize][packet.dst.0 as usize] else {
            return;
        };
        self.record('+', link, &packet);
        let l = &mut self.links[link as usize];
        if l.busy {
            // ns-2's DropTail drops when `length + 1 >= limit` (drop-tail.cc), where the length
            // counts waiting packets; the head of our queue is the packet on the wire.
            let waiting = l.queue.len() - 1;
            if waiting + 1 >= l.spec.queue_limit {
                l.drops += 1;
                self.record('d', link, &packet);
                return;
            }
            l.queue.push_back(packet);
        } else {
            l.busy = true;
            l.queue.push_front(packet);
            self.start_transmission(link, packet);
        }
    }

    /// A link finished transmitting its head packet (already on its way): the next one starts.
    fn tx_done(&mut self, link: u32) {
        let l = &mut self.links[link as usize];
        l.queue.pop_front();
        match l.queue.front().copied() {
            Some(next) => self.start_transmission(link, next),
            None => l.busy = false,
        }
    }

    /// Puts `packet` on the wire of `link` now. As ns-2's `LinkDelay::recv` does, the arrival at
    /// the far end is scheduled first (at transmission + propagation) and the link's resume at
    /// the end of transmission second, so that events at equal times run in ns-2's order.
    fn start_transmission(&mut self, link: u32, packet: Packet) {
        self.record('-', link, &packet);
        let l = &self.links[link as usize];
        let tx = transmission(packet.bytes, l.spec.bits_per_second);
        let (to, delay) = (l.to, l.spec.delay);
        // ns-2: txtime = 8. * size / bandwidth_; arrival at clock_ + (txtime + delay_).
        let tx_f = 8.0 * f64::from(packet.bytes) / l.spec.bits_per_second as f64;
        let arrive_f = self.now_f + (tx_f + to_secs_f64(delay));
        let done_f = self.now_f + tx_f;
        self.schedule(self.now + tx + delay, arrive_f, Event::Arrive(to, packet));
        self.schedule(self.now + tx, done_f, Event::TxDone(link));
    }

    fn arrive(&mut self, node: NodeId, packet: Packet, actions: &mut Vec<Action>) {
        if node != packet.dst {
            self.forward(node, packet);
            return;
        }
        let f = packet.flow;
        let flow = &mut self.flows[f as usize];
        if packet.is_ack {
            flow.sender.on_ack(packet.value, self.now, actions);
            self.apply(f, actions);
        } else {
            let ack = flow.sink.on_segment(packet.value as u32);
            let mut then = None;
            if flow.received.is_none()
                && flow.sink.in_order() >= flow.cfg.wire_segments(flow.segments)
            {
                flow.received = Some(self.now);
                then = flow.then;
            }
            let flow = &self.flows[f as usize];
            let reply = Packet {
                flow: f,
                value: ack,
                is_ack: true,
                bytes: self.tcp.header_bytes,
                dst: flow.transfer.server,
            };
            let client = flow.transfer.client;
            if let Some(response) = then {
                // As ns-2's TCPSink: the data goes up to the application (which starts the
                // response) before the ACK goes out.
                self.flows[response as usize]
                    .sender
                    .start(self.now, actions);
                self.apply(response, actions);
            }
            self.forward(client, reply);
        }
    }
}

#[cfg(test)]
mod tests;
