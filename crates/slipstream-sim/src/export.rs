//! `slipstream sim --export-ns2`: a network, TCP settings and transfers written as an ns-2 Tcl
//! script that runs the same transfers in ns-2 and writes the same `transfers.csv` columns as
//! `slipstream sim`, so both engines can be compared row by row.
//!
//! The script is self-contained (the transfers are in it) and headless. It follows the choices
//! that make the two engines comparable, each one checked against ns-2 by the cross-validation
//! tests:
//! - every directed link is a `simplex-link` with a DropTail `queue-limit`, so any topology
//!   exports, not only paper 003's chain; ns-2's static routing picks the shortest paths;
//! - one `Agent/TCP/Reno` → `Agent/TCPSink` pair per transfer, taken from a per-(server,
//!   client) pool and `reset` after use (creating agents is ns-2's slowest operation);
//! - a transfer has finished for the user when its sink has delivered every byte in order
//!   (`end_s`, as in `transfers.csv`); the sender's last ACK only frees the agent pair.
//!
//! Times and link properties are written in ns-2's own units (`10Mb`, `30ms`) and start times
//! with nine decimals, so ns-2 computes with exactly the doubles its own scripts would.

use std::fmt::Write as _;

use crate::net::{LinkSpec, Network, Transfer};
use crate::tcp::{Era, TcpConfig};
use crate::time::{to_secs_f64, Nanos, MILLI};

/// What to export.
#[derive(Debug)]
pub struct Export<'a> {
    /// Shown in the script's header.
    pub name: &'a str,
    /// The topology.
    pub network: &'a Network,
    /// TCP settings.
    pub tcp: &'a TcpConfig,
    /// The era whose defaults `tcp` started from.
    pub era: Era,
    /// The transfers, each with the source label written to the `source` column.
    pub transfers: &'a [(Transfer, &'a str)],
    /// Time allowed after the last start before the script stops.
    pub grace: Nanos,
}

/// A bandwidth as ns-2 parses it.
fn ns2_bandwidth(bps: u64) -> String {
    if bps.is_multiple_of(1_000_000) {
        format!("{}Mb", bps / 1_000_000)
    } else if bps.is_multiple_of(1_000) {
        format!("{}kb", bps / 1_000)
    } else {
        bps.to_string()
    }
}

/// A delay as ns-2 parses it.
fn ns2_delay(d: Nanos) -> String {
    if d.is_multiple_of(MILLI) {
        format!("{}ms", d / MILLI)
    } else if d.is_multiple_of(1_000) {
        format!("{}us", d / 1_000)
    } else {
        format!("{:.9}", to_secs_f64(d))
    }
}

fn secs(d: Nanos) -> String {
    let s = format!("{:.9}", to_secs_f64(d));
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}

/// The Tcl script.
pub fn ns2_script(e: &Export<'_>) -> String {
    let tcp = e.tcp;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# {} -- written by `slipstream sim --export-ns2`; runs the same transfers in ns-2.\n\
         # Usage: ns SCRIPT.tcl [out=transfers-ns2.csv] [trace=FILE (every packet event)]\n\
         # Writes one CSV row per finished transfer, in slipstream's transfers.csv columns,\n\
         # and per-source mean latencies on standard output.",
        e.name
    );
    s.push_str(
        r#"set out transfers-ns2.csv
set trace ""
foreach arg $argv {
    if {[regexp {^out=(.+)$} $arg -> value]} {
        set out $value
    } elseif {[regexp {^trace=(.+)$} $arg -> value]} {
        set trace $value
    } else {
        puts stderr "unknown argument $arg (usage: ns SCRIPT.tcl \[out=FILE\] \[trace=FILE\])"
        exit 2
    }
}

"#,
    );
    let _ = writeln!(
        s,
        "# TCP: ns-{} defaults, then this scenario's settings.",
        e.era
    );
    if e.era == Era::Ns226 {
        s.push_str("Agent/TCP set updated_rttvar_ false\n");
    }
    let tcl_bool = |b: bool| if b { "true" } else { "false" };
    for (name, value) in [
        ("packetSize_", tcp.payload_bytes.to_string()),
        ("window_", tcp.window.to_string()),
        ("windowInit_", tcp.window_init.to_string()),
        ("numdupacks_", tcp.dupack_threshold.to_string()),
        ("tcpTick_", secs(tcp.tick)),
        ("minrto_", secs(tcp.min_rto)),
        ("maxrto_", secs(tcp.max_rto)),
        ("rtxcur_init_", secs(tcp.initial_rto)),
        ("precisionReduce_", tcl_bool(tcp.precision_reduce).into()),
        ("singledup_", u8::from(tcp.limited_transmit).to_string()),
        ("delay_growth_", tcl_bool(tcp.delay_growth).into()),
    ] {
        let _ = writeln!(s, "Agent/TCP set {name} {value}");
    }
    s.push_str(
        "\nset ns [new Simulator]\nif {$trace ne \"\"} { set trace_file [open $trace w]; $ns trace-all $trace_file }\n",
    );
    let _ = writeln!(
        s,
        "for {{set i 0}} {{$i < {}}} {{incr i}} {{ set node($i) [$ns node] }}",
        e.network.node_count()
    );
    for (
        from,
        to,
        LinkSpec {
            bits_per_second,
            delay,
            queue_limit,
        },
    ) in e.network.links()
    {
        let _ = writeln!(
            s,
            "$ns simplex-link $node({f}) $node({t}) {} {} DropTail; $ns queue-limit $node({f}) $node({t}) {queue_limit}",
            ns2_bandwidth(bits_per_second),
            ns2_delay(delay),
            f = from.0,
            t = to.0,
        );
    }
    s.push_str("\n# Transfers: id start_s server client bytes wire_bytes_to_deliver source\nset transfers {\n");
    let last = e.transfers.iter().map(|(t, _)| t.start).max().unwrap_or(0);
    // With a request, the handshake goes with it and the response has none (as in `net`).
    let with_request = tcp.request_bytes > 0;
    let response = TcpConfig {
        syn: tcp.syn && !with_request,
        ..*tcp
    };
    // In-order bytes a sink hands up for `bytes` of payload: headers included, except on a
    // header-less segment 0 (see `TcpConfig::segment_bytes`).
    let wire = |cfg: &TcpConfig, bytes: u64| -> u64 {
        let first = u32::from(cfg.syn);
        (first..first + cfg.segments(bytes))
            .map(|seq| u64::from(cfg.segment_bytes(seq)))
            .sum()
    };
    for (t, source) in e.transfers {
        let wire = wire(&response, t.bytes);
        let _ = writeln!(
            s,
            "    {{{} {:.9} {} {} {} {wire} {source}}}",
            t.id,
            to_secs_f64(t.start),
            t.server.0,
            t.client.0,
            t.bytes
        );
    }
    s.push_str("}\n");
    let _ = writeln!(s, "set packet {}", tcp.payload_bytes);
    // The request: its payload, the bytes its sink hands up, and which agents do the handshake.
    let _ = writeln!(
        s,
        "set request_bytes {}\nset request_wire {}\nset request_syn {}\nset response_syn {}",
        tcp.request_bytes,
        if with_request {
            wire(tcp, u64::from(tcp.request_bytes))
        } else {
            0
        },
        tcl_bool(tcp.syn),
        tcl_bool(response.syn)
    );
    let _ = writeln!(s, "set window_init {}", tcp.window_init);
    let _ = writeln!(s, "set stop_at {:.9}", to_secs_f64(last + e.grace));
    s.push_str(RUNNER);
    s
}

/// The part of the script that does not depend on the scenario.
const RUNNER: &str = r#"
# The sink's application counts in-order bytes; the transfer has finished for the user when
# all of them are there.
Class Application/SlipstreamRx -superclass Application
Application/SlipstreamRx instproc recv {bytes} {
    $self instvar have want transfer role
    incr have $bytes
    if {$transfer >= 0 && $have >= $want} {
        set i $transfer
        set transfer -1
        delivered $i $role
    }
}

set finished 0
proc agents {server client syn} {
    global ns node pool owner
    set key $server,$client,$syn
    if {[info exists pool($key)] && [llength $pool($key)] > 0} {
        set pair [lindex $pool($key) end]
        set pool($key) [lrange $pool($key) 0 end-1]
        return $pair
    }
    # syn_ as the class default before `new`: a new agent sets its first window from it.
    Agent/TCP set syn_ $syn
    set tcp [new Agent/TCP/Reno]
    set sink [new Agent/TCPSink]
    $ns attach-agent $node($server) $tcp
    $ns attach-agent $node($client) $sink
    $ns connect $tcp $sink
    set rx [new Application/SlipstreamRx]
    $rx set have 0
    $rx set want 0
    $rx set transfer -1
    $rx set role response
    $rx attach-agent $sink
    $rx start
    $tcp proc done {} "acked $tcp"
    set owner($tcp) [list $key $sink $rx]
    return [list $tcp $sink $rx]
}

# One leg of a transfer on a pooled agent pair: `role` is request (client to server) or
# response (server to client).
proc send {i role from to syn bytes wire} {
    global transfers packet current
    set id [lindex $transfers $i 0]
    lassign [agents $from $to $syn] tcp sink rx
    $rx set have 0
    $rx set want $wire
    $rx set transfer $i
    $rx set role $role
    set current($tcp) [list $i $role]
    $tcp set fid_ $id
    $tcp advanceby [expr {($bytes + $packet - 1) / $packet}]
}

proc start {i} {
    global transfers request_bytes request_wire request_syn response_syn
    lassign [lindex $transfers $i] id start_s server client bytes wire source
    if {$request_bytes > 0} {
        send $i request $client $server $request_syn $request_bytes $request_wire
    } else {
        send $i response $server $client $response_syn $bytes $wire
    }
}

proc delivered {i role} {
    global ns end_at transfers response_syn
    if {$role eq "request"} {
        # The server has the request: the response starts now.
        lassign [lindex $transfers $i] id start_s server client bytes wire source
        send $i response $server $client $response_syn $bytes $wire
    } else {
        set end_at($i) [$ns now]
    }
}

proc acked {tcp} {
    global ns current rexmit finished
    lassign $current($tcp) i role
    if {$role eq "response"} {
        set rexmit($i) [$tcp set nrexmitpack_]
        incr finished
    }
    # Back to the pool in an event of its own: this runs inside the agent's recv.
    $ns at [$ns now] "release $tcp"
}

proc release {tcp} {
    global pool owner finished transfers
    lassign $owner($tcp) key sink rx
    # `reset` does not restore windowInit_, which ns-2 lowers to 1 for good when a
    # connection's first packet is lost (bugfix_ss_); a reused agent must start as a new one.
    $tcp set windowInit_ $::window_init
    $tcp reset
    $sink reset
    $rx set transfer -1
    lappend pool($key) [list $tcp $sink $rx]
    if {$finished == [llength $transfers]} { finish }
}

proc finish {} {
    global transfers end_at rexmit out packet
    set f [open $out w]
    puts $f "id,source,size_bytes,start_s,end_s,latency_s,segments,retransmissions"
    array set sum {}
    array set count {}
    set i 0
    foreach t $transfers {
        lassign $t id start_s server client bytes wire source
        if {[info exists end_at($i)] && [info exists rexmit($i)]} {
            set latency [expr {$end_at($i) - $start_s}]
            puts $f [format "%s,%s,%s,%.9f,%.9f,%.9f,%d,%d" $id $source $bytes $start_s \
                $end_at($i) $latency [expr {($bytes + $packet - 1) / $packet}] $rexmit($i)]
            foreach key [list $source all] {
                if {![info exists sum($key)]} { set sum($key) 0.0; set count($key) 0 }
                set sum($key) [expr {$sum($key) + $latency}]
                incr count($key)
            }
        }
        incr i
    }
    close $f
    global ns trace trace_file
    if {$trace ne ""} { $ns flush-trace; close $trace_file }
    foreach key [lsort [array names sum]] {
        puts [format "%-8s n=%6d  mean latency %.6f s" $key $count($key) [expr {$sum($key) / $count($key)}]]
    }
    puts "finished [array size end_at] of [llength $transfers] transfers; wrote $out"
    exit 0
}

set i 0
foreach t $transfers {
    $ns at [lindex $t 1] "start $i"
    incr i
}
if {[llength $transfers] == 0} { finish }
$ns at $stop_at "finish"
$ns run
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::NodeId;
    use crate::time::SECOND;

    #[test]
    fn writes_links_in_ns2_units_and_every_transfer() {
        let mut net = Network::default();
        let (a, b) = (net.node(), net.node());
        net.duplex(
            a,
            b,
            LinkSpec {
                bits_per_second: 1_500_000,
                delay: 250_000,
                queue_limit: 7,
            },
        );
        let t = Transfer {
            id: 42,
            server: NodeId(1),
            client: NodeId(0),
            bytes: 1025,
            start: SECOND / 2,
        };
        let script = ns2_script(&Export {
            name: "t",
            network: &net,
            tcp: &TcpConfig::ns2_235(),
            era: Era::Ns235,
            transfers: &[(t, "child")],
            grace: 600 * SECOND,
        });
        assert!(script.contains("$ns simplex-link $node(0) $node(1) 1500kb 250us DropTail; $ns queue-limit $node(0) $node(1) 7"));
        assert!(script.contains("$ns simplex-link $node(1) $node(0) 1500kb 250us DropTail"));
        // Three segments: 512 (segment 0 goes without its header, as in ns-2) + 2 × 552.
        assert!(
            script.contains("{42 0.500000000 1 0 1025 1616 child}"),
            "{script}"
        );
        assert!(script.contains("Agent/TCP set minrto_ 0.2\n"));
        assert!(!script.contains("updated_rttvar_"));
        assert!(script.contains("set stop_at 600.500000000"));
    }

    #[test]
    fn units_round_trip() {
        assert_eq!(ns2_bandwidth(10_000_000), "10Mb");
        assert_eq!(ns2_bandwidth(1_000_000_000), "1000Mb");
        assert_eq!(ns2_bandwidth(56_000), "56kb");
        assert_eq!(ns2_bandwidth(1_234_567), "1234567");
        assert_eq!(ns2_delay(30 * MILLI), "30ms");
        assert_eq!(ns2_delay(1_500), "0.000001500");
        assert_eq!(secs(6 * SECOND), "6");
        assert_eq!(secs(10 * MILLI), "0.01");
    }
}
