use super::*;
use crate::time::{MILLI, SECOND};

/// Paper 003's Figure 1: client - child - parent - origin, 10 Mb/s links of 1, 5 and 30 ms.
fn chain(queue_limit: usize) -> (Network, [NodeId; 4]) {
    let mut n = Network::default();
    let nodes = [n.node(), n.node(), n.node(), n.node()];
    let spec = |ms: u64| LinkSpec {
        bits_per_second: 10_000_000,
        delay: ms * MILLI,
        queue_limit,
    };
    n.duplex(nodes[0], nodes[1], spec(1));
    n.duplex(nodes[1], nodes[2], spec(5));
    n.duplex(nodes[2], nodes[3], spec(30));
    (n, nodes)
}

#[test]
fn one_segment_from_the_origin_takes_propagation_plus_transmission() {
    let (net, [client, _, _, origin]) = chain(100);
    let t = Transfer {
        id: 7,
        server: origin,
        client,
        bytes: 500,
        start: SECOND,
    };
    let run = net
        .run(&[t], TcpConfig::ns2_235(), 100 * SECOND)
        .expect("runs");
    let r = run.results[0];
    // Segment 0 is 512 bytes on the wire (ns-2's first segment carries no header).
    let data_tx = transmission(512, 10_000_000);
    let ack_tx = transmission(40, 10_000_000);
    assert_eq!(r.received - SECOND, 36 * MILLI + 3 * data_tx);
    assert_eq!(r.acked - SECOND, 72 * MILLI + 3 * data_tx + 3 * ack_tx);
    assert_eq!((r.segments, r.retransmissions, r.transfer.id), (1, 0, 7));
}

#[test]
fn back_to_back_segments_are_spaced_by_the_bottleneck() {
    // Two segments leave together; the second reaches the client one transmission time later.
    let (net, [client, child, _, _]) = chain(100);
    let t = Transfer {
        id: 0,
        server: child,
        client,
        bytes: 1024,
        start: 0,
    };
    let r = net
        .run(&[t], TcpConfig::ns2_235(), 100 * SECOND)
        .expect("runs")
        .results[0];
    assert_eq!(
        r.received,
        MILLI + transmission(512, 10_000_000) + transmission(552, 10_000_000)
    );
}

#[test]
fn a_full_queue_drops_and_tcp_recovers() {
    // A 2-packet queue on every link and 10 concurrent 100-segment transfers.
    let (net, [client, _, _, origin]) = chain(2);
    let transfers: Vec<Transfer> = (0..10)
        .map(|i| Transfer {
            id: i,
            server: origin,
            client,
            bytes: 51_200,
            start: 0,
        })
        .collect();
    let run = net
        .run(&transfers, TcpConfig::ns2_235(), 600 * SECOND)
        .expect("runs");
    assert!(run.drops > 0, "the queues overflowed");
    assert_eq!(run.results.len(), 10, "every transfer completed");
    assert!(run.results.iter().map(|r| r.retransmissions).sum::<u32>() > 0);
    for r in &run.results {
        assert!(r.received <= r.acked);
    }
}

#[test]
fn the_same_inputs_give_the_same_outputs() {
    let (net, [client, child, parent, origin]) = chain(5);
    let transfers: Vec<Transfer> = (0..50)
        .map(|i| Transfer {
            id: i,
            server: [child, parent, origin][(i % 3) as usize],
            client,
            bytes: 1 + (i * 7919) % 60_000,
            start: i * 20 * MILLI,
        })
        .collect();
    let a = net
        .run(&transfers, TcpConfig::ns2_235(), 600 * SECOND)
        .expect("runs");
    let b = net
        .run(&transfers, TcpConfig::ns2_235(), 600 * SECOND)
        .expect("runs");
    assert_eq!(a, b);
    assert_eq!(a.results.len(), 50);
}

#[test]
fn unknown_nodes_and_missing_routes_are_errors() {
    let mut net = Network::default();
    let a = net.node();
    let b = net.node();
    let t = Transfer {
        id: 0,
        server: a,
        client: b,
        bytes: 10,
        start: 0,
    };
    assert_eq!(
        net.run(&[t], TcpConfig::ns2_235(), SECOND),
        Err(NetError::NoRoute { from: 0, to: 1 })
    );
    let t = Transfer {
        client: NodeId(9),
        ..t
    };
    assert_eq!(
        net.run(&[t], TcpConfig::ns2_235(), SECOND),
        Err(NetError::NoNode(9))
    );
}

#[test]
fn a_transfer_after_another_starts_when_it_completes() {
    let (net, [client, child, _, _]) = chain(100);
    let first = Transfer {
        id: 0,
        server: child,
        client,
        bytes: 10_000,
        start: 0,
    };
    let second = Transfer {
        id: 1,
        start: MILLI,
        ..first
    };
    let chained = [
        Options::default(),
        Options {
            after: Some(0),
            ..Options::default()
        },
    ];
    let tcp = TcpConfig::ns2_235();
    let run = net
        .run_with(&[first, second], &chained, tcp, 100 * SECOND, None)
        .expect("runs");
    let alone = net.run(&[first], tcp, 100 * SECOND).expect("runs").results[0];
    let [a, b] = [run.results[0], run.results[1]];
    assert_eq!((a.transfer.id, b.transfer.id), (0, 1));
    assert_eq!(a, alone, "the first ran alone");
    // The second began when the first's last ACK arrived, on an idle path.
    assert_eq!(b.received - a.acked, alone.received);
    // Waiting for itself, or for a transfer not in the run, is an error.
    let selfish = [Options {
        after: Some(0),
        ..Options::default()
    }];
    assert_eq!(
        net.run_with(&[first], &selfish, tcp, SECOND, None),
        Err(NetError::After { index: 0, after: 0 })
    );
}
