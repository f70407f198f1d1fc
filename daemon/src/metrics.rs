//! The metrics page: what one scrape found (the counters of every service
//! that answered) as Prometheus metric families, encoded by
//! `prometheus-client` in the classic text format (what `promtool check
//! metrics` reads) or in OpenMetrics when the scraper asks for it.
//!
//! Names follow Prometheus' conventions: the `flowlane_` prefix, base units
//! in the name (`_bytes`, `_seconds`), `_total` on counters (the encoder
//! adds it), `_info` for constant labels. The series are bounded: one per
//! service, queue and fixed reason, never one per connection or peer
//! (node_exporter's ethtool collector exploded its series count with one
//! name per driver statistic; these names are fixed).

use std::fmt;

use flowlane_dataplane::control_socket::{
    MoveCause, MoveCostStatus, MoveHistory, NicQueueStats, NicReport, QueueCounterSet,
    QueuePairCounters, QueueSteering, RelayMemoryCounters, ServiceCounters,
};
use flowlane_dataplane::InterfaceStats;
use flowlane_numa_sched::nic_caps::{XdpFeature, XskMode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// What one scrape found.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// The counters of each service that answered.
    pub services: Vec<ServiceCounters>,
    /// Services whose control socket did not answer this scrape.
    pub unanswered: u64,
    /// Of all scrapes so far, the services that did not answer.
    pub unanswered_total: u64,
    /// The time of the scrape, in seconds since the Unix epoch.
    pub now_unix_s: f64,
    /// The NICs the daemon owns.
    pub nics: Vec<NicReport>,
    /// Their per-queue counters, for those that keep any.
    pub nic_queues: Vec<(String, Vec<NicQueueStats>)>,
}

/// Label pairs of one series.
type Labels = Vec<(&'static str, String)>;

/// One metric family: its name (without `_total`), help, type and series.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    series: Vec<(Labels, Sample)>,
}

/// One series' value.
#[derive(Debug, Clone, PartialEq)]
enum Sample {
    /// A count.
    Int(u64),
    /// A measure (seconds).
    Real(f64),
    /// Constant labels only (an `_info` metric).
    Info(Labels),
    /// Cumulative bucket counts by upper bound, the sum and the count.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// A series of each `T` (a queue's counters, an interface's): family
/// name, help, type, the labels it adds to the item's and the value it
/// reads. Rows of one family are consecutive.
struct Row<T> {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    extra: &'static [(&'static str, &'static str)],
    value: fn(&T) -> Sample,
}

type QueueRow = Row<QueueCounterSet>;

const C: MetricType = MetricType::Counter;
const G: MetricType = MetricType::Gauge;

macro_rules! row {
    ($name:literal, $help:literal, $kind:expr, [$($k:literal = $v:literal),*], |$q:ident: $t:ty| $e:expr) => {
        Row {
            name: $name,
            help: $help,
            kind: $kind,
            extra: &[$(($k, $v)),*],
            value: |$q: &$t| Sample::Int($e),
        }
    };
    ($name:literal, $help:literal, $kind:expr, [$($k:literal = $v:literal),*], |$q:ident| $e:expr) => {
        row!($name, $help, $kind, [$($k = $v),*], |$q: QueueCounterSet| $e)
    };
}

/// Every per-queue series, in page order.
const QUEUE_ROWS: &[QueueRow] = &[
    row!("flowlane_queue_rx_packets", "Frames received from the queue's own AF_XDP socket (a worker without a queue, in software spill, has none: the frames forwarded to it are counted by its carrier queue, and in flowlane_spill_frames_total).", C, [], |q| q.io.rx_packets),
    row!("flowlane_queue_rx_bytes", "Bytes received from the queue's own socket (Ethernet frame lengths).", C, [], |q| q.io.rx_bytes),
    row!("flowlane_queue_tx_packets", "Frames handed to the queue's own TX ring (a worker without a queue, in software spill, has none: what it sends is counted by its carrier queue, and in flowlane_spill_frames_total).", C, [], |q| q.io.tx_packets),
    row!("flowlane_queue_tx_bytes", "Bytes handed to the queue's own TX ring.", C, [], |q| q.io.tx_bytes),
    row!("flowlane_queue_dropped_frames", "Frames dropped, by reason: the worker's (frames the service's handler counts under no name of its own, and answers too large for their frame; TCP services count theirs by reason in the TCP counters), or the kernel's (RX ring full, no fill buffer, invalid descriptor).", C, ["reason" = "worker"], |q| q.io.dropped),
    row!("flowlane_queue_dropped_frames", "", C, ["reason" = "rx_ring_full"], |q| q.io.rx_ring_full),
    row!("flowlane_queue_dropped_frames", "", C, ["reason" = "no_buffer"], |q| q.io.rx_dropped),
    row!("flowlane_queue_dropped_frames", "", C, ["reason" = "invalid_descriptor"], |q| q.io.invalid_descs),
    row!("flowlane_queue_fill_ring_empty", "Times a frame arrived to an empty fill ring (fill-ring starvation).", C, [], |q| q.io.fill_ring_empty),
    row!("flowlane_queue_tx_ring_full", "Times a transmit found the TX ring full.", C, [], |q| q.io.tx_ring_full),
    row!("flowlane_queue_tx_kicks", "TX wake-ups (sendto kicks).", C, [], |q| q.io.tx_kicks),
    row!("flowlane_queue_frames", "The queue's UMEM frames by where they are at the end of its worker's last pass: on its free list, with the kernel to receive into (put on the fill ring, not yet taken off the RX ring), being sent (queued for the TX ring or on it), held (zero-copy receive payload not read yet, frames a move's scan left waiting). Their sum is the frames the queue owns (--frames-per-queue); idle, every frame is free or with the kernel.", G, ["where" = "free"], |q| q.io.frames_free),
    row!("flowlane_queue_frames", "", G, ["where" = "fill"], |q| q.io.frames_fill),
    row!("flowlane_queue_frames", "", G, ["where" = "tx"], |q| q.io.frames_tx),
    row!("flowlane_queue_frames", "", G, ["where" = "held"], |q| q.io.frames_held),
    QueueRow {
        name: "flowlane_queue_busy_seconds",
        help: "Time the queue's worker spent in loop passes that found work (a kernel-socket service: its core thread's CPU time).",
        kind: C,
        extra: &[],
        value: |q| Sample::Real(q.io.busy_ns as f64 / 1e9),
    },
    row!("flowlane_queue_idle_polls", "Loop passes of the worker that found nothing to do.", C, [], |q| q.io.idle_polls),
    row!("flowlane_tcp_connections", "Connections the queue holds, by TCP state (RFC 9293; time_wait counts compact records too); a kernel-socket service's core: those it holds open, as state open (the kernel keeps their states).", G, ["state" = "syn_sent"], |q| q.tcp.in_syn_sent),
    row!("flowlane_tcp_connections", "", G, ["state" = "syn_received"], |q| q.tcp.in_syn_received),
    row!("flowlane_tcp_connections", "", G, ["state" = "established"], |q| q.tcp.in_established),
    row!("flowlane_tcp_connections", "", G, ["state" = "fin_wait_1"], |q| q.tcp.in_fin_wait1),
    row!("flowlane_tcp_connections", "", G, ["state" = "fin_wait_2"], |q| q.tcp.in_fin_wait2),
    row!("flowlane_tcp_connections", "", G, ["state" = "closing"], |q| q.tcp.in_closing),
    row!("flowlane_tcp_connections", "", G, ["state" = "time_wait"], |q| q.tcp.in_time_wait),
    row!("flowlane_tcp_connections", "", G, ["state" = "close_wait"], |q| q.tcp.in_close_wait),
    row!("flowlane_tcp_connections", "", G, ["state" = "last_ack"], |q| q.tcp.in_last_ack),
    row!("flowlane_tcp_connections", "", G, ["state" = "open"], |q| q.tcp.connections),
    row!("flowlane_tcp_stop_finishing", "Connections whose handler, at the service's stop, said it would close them itself (ConnHandler::on_stop, AtStop::Finish) and has not yet: what the stop's drain (2 s at most) waits for before it resets what is left.", G, [], |q| q.tcp.finishing),
    row!("flowlane_tcp_opens", "Connections opened, passively (accepted) or actively.", C, ["side" = "passive"], |q| q.tcp.passive_opens),
    row!("flowlane_tcp_opens", "", C, ["side" = "active"], |q| q.tcp.active_opens),
    row!("flowlane_tcp_closed", "Connections that reached CLOSED.", C, [], |q| q.tcp.closed),
    row!("flowlane_tcp_segments_received", "TCP segments for this host that reached the stack.", C, [], |q| q.tcp.segments_in),
    row!("flowlane_tcp_segments_sent", "TCP segments sent.", C, [], |q| q.tcp.segments_out),
    row!("flowlane_tcp_received_bytes", "Payload bytes delivered in order.", C, [], |q| q.tcp.bytes_in),
    row!("flowlane_tcp_sent_bytes", "Payload bytes sent, retransmissions included.", C, [], |q| q.tcp.bytes_out),
    row!("flowlane_tcp_retransmitted_segments", "Segments retransmitted (any cause).", C, [], |q| q.tcp.retransmits),
    row!("flowlane_tcp_fast_retransmits", "Fast retransmits.", C, [], |q| q.tcp.fast_retransmits),
    row!("flowlane_tcp_rto_timeouts", "Retransmission timeouts.", C, [], |q| q.tcp.rto_timeouts),
    row!("flowlane_tcp_rto_reverts", "Retransmission timeout doublings undone by an ICMP network or host unreachable about the retransmission at SND.UNA (TCP-LD, RFC 6069): a connectivity disruption, not congestion.", C, [], |q| q.tcp.rto_reverts),
    row!("flowlane_tcp_loss_probes", "Tail loss probes sent (RFC 8985).", C, [], |q| q.tcp.tlp_probes),
    row!("flowlane_tcp_una_probes", "Loss probes at SND.UNA: the first unacknowledged segment sent again after two round trips without progress, without RACK-TLP or in fast recovery (also counted as retransmissions).", C, [], |q| q.tcp.loss_probes),
    row!("flowlane_tcp_out_of_order_segments", "Segments received out of order.", C, [], |q| q.tcp.out_of_order),
    row!("flowlane_tcp_refused", "Connections refused, by reason: SYNs dropped (backlog full), the connection bound, SYN cookies that did not check out, SYNs to a TIME-WAIT connection taken for old duplicates, the application's admit, the application's SYN filter (kernel sockets: at accept).", C, ["reason" = "syn_dropped"], |q| q.tcp.syn_dropped),
    row!("flowlane_tcp_refused", "", C, ["reason" = "connection_limit"], |q| q.tcp.connection_limit_refused),
    row!("flowlane_tcp_refused", "", C, ["reason" = "syn_cookie_failed"], |q| q.tcp.syn_cookies_failed),
    row!("flowlane_tcp_refused", "", C, ["reason" = "time_wait_syn"], |q| q.tcp.time_wait_syn_dropped),
    row!("flowlane_tcp_refused", "", C, ["reason" = "application"], |q| q.tcp.application_refused),
    row!("flowlane_tcp_refused", "", C, ["reason" = "syn_filter"], |q| q.tcp.syn_refused),
    row!("flowlane_tcp_dropped_segments", "Segments dropped before or by the stack, by reason.", C, ["reason" = "bad_ip_checksum"], |q| q.tcp.bad_ip_checksum),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "bad_tcp_checksum"], |q| q.tcp.bad_tcp_checksum),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "malformed"], |q| q.tcp.malformed + q.tcp.tcp_malformed),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "not_ours"], |q| q.tcp.not_ours),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "martian_source"], |q| q.tcp.martian_source),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "unacceptable"], |q| q.tcp.unacceptable),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "bad_flags"], |q| q.tcp.bad_flags),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "paws"], |q| q.tcp.paws_rejected),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "out_of_order_no_room"], |q| q.tcp.ooo_dropped),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "receive_buffer_full"], |q| q.tcp.recv_buffer_overrun),
    row!("flowlane_tcp_dropped_segments", "", C, ["reason" = "no_connection"], |q| q.tcp.no_connection),
    row!("flowlane_tcp_unsent_no_neighbor", "Segments not sent because no MAC address was known for the peer.", C, [], |q| q.tcp.no_neighbor),
    row!("flowlane_tcp_opens_neighbor_unresolved", "Active opens ended as timed out because the peer's MAC address did not resolve within 3 s (as connect(2) fails with EHOSTUNREACH).", C, [], |q| q.tcp.neighbor_unresolved),
    row!("flowlane_tcp_challenge_acks", "Challenge ACKs sent (RFC 5961), and those the rate limit held back.", C, ["limited" = "false"], |q| q.tcp.challenge_acks),
    row!("flowlane_tcp_challenge_acks", "", C, ["limited" = "true"], |q| q.tcp.challenge_acks_limited),
    row!("flowlane_tcp_syn_cookies_sent", "SYN-ACKs that carried a SYN cookie (listener under a SYN flood).", C, [], |q| q.tcp.syn_cookies_sent),
    row!("flowlane_tcp_syn_cookies_accepted", "Connections opened from a returned SYN cookie.", C, [], |q| q.tcp.syn_cookies_accepted),
    row!("flowlane_tcp_syn_cookies_timestamps_ignored", "Returned SYN cookies whose timestamp option echoed none of ours (never negotiated, RFC 7323 section 3.2): their connections were built without timestamps or the options riding in them.", C, [], |q| q.tcp.syn_cookies_ts_ignored),
    row!("flowlane_tcp_syn_acks_limited", "SYN-ACKs not sent again for a copy of a half-open connection's SYN: one went within the interval (a burst of copies is not reflected one for one).", C, [], |q| q.tcp.syn_acks_limited),
    row!("flowlane_tcp_recv_parked", "Connections whose receive window stopped counting against the queue's receive memory while it was under pressure (less than a segment received over a second, nothing held: idle or trickling), offered no more than a segment until they received a segment's worth: a flood of idle or trickling connections does not starve busy ones.", C, [], |q| q.tcp.recv_parked),
    row!("flowlane_tcp_icmp_errors", "ICMP errors quoting the queue's TCP segments, by message and outcome: a packet too big that lowered a connection's MSS (RFC 1191, RFC 8201) or a destination unreachable that ended a connection attempt (RFC 1122 section 4.2.3.9, RFC 5461), acted; a destination unreachable about a synchronized connection's data in flight, remembered as its soft error (it does not abort on one, RFC 5927 section 5.2; if it then times out with no ACK in between, it ends with that reason rather than timed out); or ignored: not about data in flight (RFC 5927 section 4.1: blind or stale), no connection, or no lower MTU.", C, ["message" = "too_big", "outcome" = "acted"], |q| q.tcp.pmtu_lowered),
    row!("flowlane_tcp_icmp_errors", "", C, ["message" = "too_big", "outcome" = "ignored"], |q| q.tcp.too_big_ignored),
    row!("flowlane_tcp_icmp_errors", "", C, ["message" = "unreachable", "outcome" = "acted"], |q| q.tcp.unreachable_ended),
    row!("flowlane_tcp_icmp_errors", "", C, ["message" = "unreachable", "outcome" = "remembered"], |q| q.tcp.unreachable_remembered),
    row!("flowlane_tcp_icmp_errors", "", C, ["message" = "unreachable", "outcome" = "ignored"], |q| q.tcp.unreachable_ignored),
    row!("flowlane_tcp_ooo_reneged", "Connections whose out-of-order data was given up (RFC 2018 section 8): idle a second with a hole while the receive memory was under pressure; the sender sends it again.", C, [], |q| q.tcp.ooo_reneged),
    row!("flowlane_tcp_window_retractions", "Segments whose window offered a right edge left of an earlier one by less than one unit of the window scale: a full receive buffer's window truncated so that it closes against small segments (RFC 7323 section 2.4, Appendix F).", C, [], |q| q.tcp.window_retractions),
    row!("flowlane_tcp_dsack_unexpected", "D-SACK blocks beyond what the connection retransmitted (the network's duplicates, or forged): ignored by loss detection.", C, [], |q| q.tcp.dsack_unexpected),
    row!("flowlane_tcp_resets_received", "Resets received.", C, [], |q| q.tcp.resets_in),
    row!("flowlane_tcp_resets_sent", "Resets sent, by reason: a segment for no connection and no listener, an ACK a listener took for no connection of its own (a peer still sending on one this queue does not have), an ACK that did not acknowledge our SYN, a SYN the SYN filter refused, data after the application closed, the application's abort (or its close with data unread), retransmissions run out.", C, ["reason" = "no_connection"], |q| q.tcp.resets_no_connection),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "listener_ack"], |q| q.tcp.resets_listener_ack),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "handshake_ack"], |q| q.tcp.resets_handshake_ack),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "refused"], |q| q.tcp.resets_refused),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "data_after_close"], |q| q.tcp.resets_data_after_close),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "aborted"], |q| q.tcp.resets_aborted),
    row!("flowlane_tcp_resets_sent", "", C, ["reason" = "timed_out"], |q| q.tcp.resets_timed_out),
    row!("flowlane_tcp_ecn_ce_received", "Segments received with an ECN Congestion Experienced mark.", C, [], |q| q.tcp.ce_received),
    row!("flowlane_tcp_buffer_memory_bytes", "Buffer memory the queue's connections hold now.", G, [], |q| q.tcp.buffer_memory),
    row!("flowlane_tcp_buffer_memory_cached_bytes", "Free buffer memory the queue's stack keeps for reuse: what a busy spell left, half of what lay idle given back to the allocator each second.", G, [], |q| q.tcp.buffer_memory_cached),
    row!("flowlane_tcp_buffer_memory_returned_bytes", "Buffer memory the queue's stack gave back to the allocator: free chunks past what it keeps, and those its trims found idle.", C, [], |q| q.tcp.buffer_memory_returned),
    row!("flowlane_tcp_receive_memory_committed_bytes", "Receive memory committed now, of the stack's budget.", G, [], |q| q.tcp.recv_memory_committed),
    row!("flowlane_tcp_memory_peak_bytes", "Kernel sockets: the most bytes of receive or send buffers the core's connections held at once (bounded by its memory limits).", G, ["direction" = "receive"], |q| q.tcp.rx_memory_peak),
    row!("flowlane_tcp_memory_peak_bytes", "", G, ["direction" = "send"], |q| q.tcp.tx_memory_peak),
    row!("flowlane_tcp_memory_waits", "Reads that waited for receive memory (kernel sockets), and writes taken in part for want of send memory (a kernel-socket core's, or an AF_XDP queue's stack's: its connections together hold at most that much in their send buffers).", C, ["direction" = "receive"], |q| q.tcp.rx_memory_waits),
    row!("flowlane_tcp_memory_waits", "", C, ["direction" = "send"], |q| q.tcp.tx_memory_waits),
    row!("flowlane_rebalance_buckets_moved", "RSS buckets moved off (out) or onto (in) the queue, with their connections.", C, ["direction" = "out"], |q| q.tcp.buckets_out),
    row!("flowlane_rebalance_buckets_moved", "", C, ["direction" = "in"], |q| q.tcp.buckets_in),
    row!("flowlane_rebalance_frames_forwarded", "Frames of a moving bucket the queue forwarded to the bucket's new queue.", C, [], |q| q.tcp.frames_forwarded),
    row!("flowlane_rebalance_frames_forwarded_late", "Of the frames forwarded, the TCP segments that reached the old queue after it had sent the bucket's drain marker, its NIC entry rewritten (the new queue got them out of order).", C, [], |q| q.tcp.frames_forwarded_late),
    QueueRow {
        name: "flowlane_rebalance_late_frame_max_seconds",
        help: "The longest a frame forwarded late came after its bucket's drain marker, since the service started: how much longer the old queue's quiet wait would have had to be.",
        kind: G,
        extra: &[],
        value: |q| Sample::Real(q.tcp.frames_late_max_us as f64 / 1e6),
    },
    row!("flowlane_rebalance_frames_held", "Frames of an arriving bucket the queue held until the old queue drained.", C, [], |q| q.tcp.frames_held),
    row!("flowlane_rebalance_hold_timeouts", "Holds that ended on their timeout rather than the old queue's drain marker.", C, [], |q| q.tcp.hold_timeouts),
    row!("flowlane_rebalance_rewrite_timeouts", "Exports whose NIC entry's rewrite never reached the old queue, which stopped waiting for it after its bound.", C, [], |q| q.tcp.rewrite_timeouts),
    row!("flowlane_rebalance_imports_at_cap", "Connections of buckets moved to the queue while its stack held its most connections: taken within an eighth past the cap (taken), or refused beyond it (refused).", C, ["result" = "taken"], |q| q.tcp.imports_past_cap),
    row!("flowlane_rebalance_imports_at_cap", "", C, ["result" = "refused"], |q| q.tcp.imports_refused_at_cap),
    row!("flowlane_rebalance_imports_past_recv_memory", "Connections of buckets moved to the queue that left its receive memory committed past its budget: their data and offered windows are taken whole, and no other window grows until they drain.", C, [], |q| q.tcp.imports_past_recv_memory),
    row!("flowlane_rebalance_imports_failed", "Connections of buckets moved to the queue that it could not take (refused at its cap, or their addresses in use there): gone from both queues, their peers answered with resets.", C, [], |q| q.tcp.import_failed),
    row!("flowlane_spill_frames", "Software spill (more workers than queues): frames a queue's worker forwarded to a worker without a queue (forwarded), a worker without a queue handed to its carrier (handed), and a carrier sent for it (transmitted).", C, ["direction" = "forwarded"], |q| q.tcp.spill_forwarded),
    row!("flowlane_spill_frames", "", C, ["direction" = "handed"], |q| q.tcp.spill_handed),
    row!("flowlane_spill_frames", "", C, ["direction" = "transmitted"], |q| q.tcp.spill_transmitted),
];

/// The XDP steering program's counters, per service and receive queue of
/// its interface (served or not: the program runs on every queue).
const STEERING_ROWS: &[Row<QueueSteering>] = &[
    row!(
        "flowlane_steering_frames",
        "Frames the service's XDP steering program took on each receive queue of its interface: redirected to the queue's AF_XDP socket (flowlane's), or passed to the kernel (not flowlane's: other ports and addresses, ARP, most ICMP, later fragments, packets not for this host).",
        C,
        ["verdict" = "redirected"],
        |q: QueueSteering| q.redirected
    ),
    row!(
        "flowlane_steering_frames",
        "",
        C,
        ["verdict" = "passed"],
        |q: QueueSteering| q.passed
    ),
    row!(
        "flowlane_steering_dropped_frames",
        "flowlane's frames the XDP steering program dropped, by reason: on a queue without a socket of the service (the NIC's table sends flowlane's flows to a queue it does not serve), or the first fragment of a datagram to flowlane's port (flowlane does not reassemble, and the kernel would answer the whole datagram for it).",
        C,
        ["reason" = "no_socket"],
        |q: QueueSteering| q.no_socket
    ),
    row!(
        "flowlane_steering_dropped_frames",
        "",
        C,
        ["reason" = "first_fragment"],
        |q: QueueSteering| q.fragment_dropped
    ),
];

/// Queue-pair mode's counters, per service in that mode (its handlers on
/// application threads, fed by the network cores' relays).
const QUEUE_PAIR_ROWS: &[Row<QueuePairCounters>] = &[
    row!(
        "flowlane_qp_app_threads",
        "Queue-pair mode: the service's application threads, on which its handlers run.",
        G,
        [],
        |q: QueuePairCounters| u64::from(q.app_threads)
    ),
    row!(
        "flowlane_qp_dead_threads",
        "Queue-pair mode: application threads that died (a handler panicked): the network cores reset their connections and serve the other threads'.",
        G,
        [],
        |q: QueuePairCounters| q.dead_threads.len() as u64
    ),
    row!(
        "flowlane_qp_connections_orphaned",
        "Queue-pair mode: connections the network cores reset because their application thread had died or stalled (a handler blocked past the stall limit).",
        C,
        [],
        |q: QueuePairCounters| q.connections_orphaned
    ),
    row!(
        "flowlane_qp_connections_moved",
        "Queue-pair mode: connections that reached another network core with their moved RSS bucket, their relay state with them.",
        C,
        [],
        |q: QueuePairCounters| q.connections_moved
    ),
    row!(
        "flowlane_qp_requests_bounced",
        "Queue-pair mode: requests an application thread sent to a connection's old core after the connection moved, given back and sent again to its new core.",
        C,
        [],
        |q: QueuePairCounters| q.requests_bounced
    ),
    row!(
        "flowlane_qp_application_refused",
        "Queue-pair mode: connections the handlers' admit refused on the application threads (reset before being accepted).",
        C,
        [],
        |q: QueuePairCounters| q.application_refused
    ),
];

/// What each network core's relay holds for a queue-pair service's
/// application threads, each way: received data not read yet (receive),
/// data to send the stack has not taken yet (send).
const RELAY_ROWS: &[Row<RelayMemoryCounters>] = &[
    row!(
        "flowlane_qp_memory_bytes",
        "Queue-pair mode: bytes the core's relay holds for the application threads now: received and not read yet (receive), asked to be sent and not taken by the stack yet (send).",
        G,
        ["direction" = "receive"],
        |m: RelayMemoryCounters| m.rx_held
    ),
    row!(
        "flowlane_qp_memory_bytes",
        "",
        G,
        ["direction" = "send"],
        |m: RelayMemoryCounters| m.tx_held
    ),
    row!(
        "flowlane_qp_memory_limit_bytes",
        "Queue-pair mode: the most bytes the core's relay may hold for the application threads, each way (its memory budget).",
        G,
        ["direction" = "receive"],
        |m: RelayMemoryCounters| m.rx_limit
    ),
    row!(
        "flowlane_qp_memory_limit_bytes",
        "",
        G,
        ["direction" = "send"],
        |m: RelayMemoryCounters| m.tx_limit
    ),
    row!(
        "flowlane_qp_memory_peak_bytes",
        "Queue-pair mode: the most bytes the core's relay held at once for the application threads, each way.",
        G,
        ["direction" = "receive"],
        |m: RelayMemoryCounters| m.rx_peak
    ),
    row!(
        "flowlane_qp_memory_peak_bytes",
        "",
        G,
        ["direction" = "send"],
        |m: RelayMemoryCounters| m.tx_peak
    ),
    row!(
        "flowlane_qp_memory_waits",
        "Queue-pair mode: connections that began to wait for the core's relay memory: their received data left in the stack (receive), their sends taken in part (send).",
        C,
        ["direction" = "receive"],
        |m: RelayMemoryCounters| m.rx_waits
    ),
    row!(
        "flowlane_qp_memory_waits",
        "",
        C,
        ["direction" = "send"],
        |m: RelayMemoryCounters| m.tx_waits
    ),
    row!(
        "flowlane_qp_buffer_memory_cached_bytes",
        "Queue-pair mode: free receive buffers the core's relay keeps for reuse: what a busy spell left, half of what lay idle given back to the allocator each second.",
        G,
        [],
        |m: RelayMemoryCounters| m.pool_cached
    ),
    row!(
        "flowlane_qp_buffer_memory_returned_bytes",
        "Queue-pair mode: buffer memory the core's relay gave back to the allocator: the free receive buffers its trims found idle.",
        C,
        [],
        |m: RelayMemoryCounters| m.returned
    ),
];

/// The interface's own counters, per service (what the device saw,
/// flowlane's traffic and the kernel's alike).
const NIC_ROWS: &[Row<InterfaceStats>] = &[
    row!(
        "flowlane_nic_rx_packets",
        "Packets the service's interface received (all of its traffic).",
        C,
        [],
        |n: InterfaceStats| n.rx_packets
    ),
    row!(
        "flowlane_nic_rx_bytes",
        "Bytes the service's interface received.",
        C,
        [],
        |n: InterfaceStats| n.rx_bytes
    ),
    row!(
        "flowlane_nic_tx_packets",
        "Packets the service's interface sent.",
        C,
        [],
        |n: InterfaceStats| n.tx_packets
    ),
    row!(
        "flowlane_nic_tx_bytes",
        "Bytes the service's interface sent.",
        C,
        [],
        |n: InterfaceStats| n.tx_bytes
    ),
    row!(
        "flowlane_nic_dropped_packets",
        "Packets the interface dropped, received or to send.",
        C,
        ["direction" = "rx"],
        |n: InterfaceStats| n.rx_dropped
    ),
    row!(
        "flowlane_nic_dropped_packets",
        "",
        C,
        ["direction" = "tx"],
        |n: InterfaceStats| n.tx_dropped
    ),
    row!(
        "flowlane_nic_errors",
        "The interface's receive and transmit errors.",
        C,
        ["direction" = "rx"],
        |n: InterfaceStats| n.rx_errors
    ),
    row!(
        "flowlane_nic_errors",
        "",
        C,
        ["direction" = "tx"],
        |n: InterfaceStats| n.tx_errors
    ),
];

/// Whether a kernel-socket service's cores know `row`'s value: their
/// threads' CPU time, connections, opens, closes, bytes, resets, the
/// buffer memory they hold, its peaks and waits, the refusals a socket
/// backend makes, and what a stop's drain waits for. The rest (AF_XDP rings, segments,
/// loss recovery, buckets, spill) belong to flowlane's data path and TCP,
/// and are left out for such a service rather than shown as zero.
fn kernel_knows(row: &QueueRow) -> bool {
    match row.name {
        "flowlane_queue_busy_seconds"
        | "flowlane_tcp_opens"
        | "flowlane_tcp_closed"
        | "flowlane_tcp_received_bytes"
        | "flowlane_tcp_sent_bytes"
        | "flowlane_tcp_resets_received"
        | "flowlane_tcp_buffer_memory_bytes"
        | "flowlane_tcp_stop_finishing" => true,
        "flowlane_tcp_resets_sent" => matches!(
            row.extra,
            [(
                "reason",
                "data_after_close" | "aborted" | "refused" | "timed_out"
            )]
        ),
        "flowlane_tcp_connections" | "flowlane_tcp_memory_peak_bytes" => kernel_only(row),
        "flowlane_tcp_memory_waits" => true,
        "flowlane_tcp_refused" => {
            matches!(
                row.extra,
                [("reason", "connection_limit" | "application" | "syn_filter")]
            )
        }
        _ => false,
    }
}

/// Whether `row` is shown for kernel-socket services alone: the
/// connections a core holds open, which an AF_XDP service shows by state,
/// and the cores' buffer memory peaks and receive waits (an AF_XDP stack's
/// receive memory is its committed window, a row of its own; its send
/// memory's waits are the `send` series both show).
fn kernel_only(row: &QueueRow) -> bool {
    (row.name == "flowlane_tcp_connections" && row.extra == [("state", "open")])
        || row.name == "flowlane_tcp_memory_peak_bytes"
        || (row.name == "flowlane_tcp_memory_waits" && row.extra == [("direction", "receive")])
}

/// Appends `rows` as families (a new one whenever the name changes), each
/// with a series per item that `keep` keeps (by the item's index).
fn push_rows<'a, T: 'a>(
    out: &mut Vec<Family>,
    rows: &[Row<T>],
    items: &[(Labels, &'a T)],
    keep: impl Fn(&Row<T>, usize) -> bool,
) {
    for row in rows {
        if out.last().is_none_or(|f| f.name != row.name) {
            out.push(Family {
                name: row.name,
                help: row.help,
                kind: row.kind,
                series: Vec::new(),
            });
        }
        let family = out.last_mut().expect("pushed");
        for (i, (labels, item)) in items.iter().enumerate() {
            if !keep(row, i) {
                continue;
            }
            let mut labels = labels.clone();
            labels.extend(row.extra.iter().map(|&(k, v)| (k, v.to_string())));
            family.series.push((labels, (row.value)(item)));
        }
    }
}

/// The series labels of one service: its name and pid, and where it was
/// found if the daemon cannot tell its process (the pid is then the
/// service's own word, which replicas in containers share).
fn service_labels(s: &ServiceCounters) -> Labels {
    let mut l = vec![("service", s.service.clone()), ("pid", s.pid.to_string())];
    if let Some(socket) = &s.socket {
        l.push(("socket", socket.display().to_string()));
    }
    l
}

/// The series labels of one queue of a service.
fn queue_labels(s: &ServiceCounters, q: &QueueCounterSet) -> Labels {
    let mut l = service_labels(s);
    l.push(("queue", q.queue.to_string()));
    l.push((
        "cpu",
        q.cpu.map_or_else(|| "none".into(), |c| c.to_string()),
    ));
    l.push(("node", q.node.to_string()));
    l
}

/// A queue-pair service's relays, each with the labels of its core's
/// queue (those of the per-queue series, so that they match one to one;
/// the queue's number alone where the service did not report the queue),
/// each core once (the first, should a service name one twice: a series
/// repeated would spoil the whole scrape).
fn relay_labels(s: &ServiceCounters) -> Vec<(Labels, &RelayMemoryCounters)> {
    let mut seen = std::collections::HashSet::new();
    s.queue_pair
        .iter()
        .flat_map(|q| &q.relay_memory)
        .filter(|m| seen.insert(m.core))
        .map(|m| {
            let labels = match s.queues.iter().find(|q| q.queue == m.core) {
                Some(q) => queue_labels(s, q),
                None => {
                    let mut l = service_labels(s);
                    l.push(("queue", m.core.to_string()));
                    l
                }
            };
            (labels, m)
        })
        .collect()
}

/// The metric families of one scrape, in page order.
fn families(scrape: &Scrape) -> Vec<Family> {
    let scrape = &Scrape {
        services: one_per_labels(&scrape.services),
        ..scrape.clone()
    };
    let mut out = vec![
        Family {
            name: "flowlane_build",
            help: "The daemon's version.",
            kind: MetricType::Info,
            series: vec![(
                Vec::new(),
                Sample::Info(vec![("version", env!("CARGO_PKG_VERSION").into())]),
            )],
        },
        Family {
            name: "flowlane_daemon_services",
            help: "flowlane services whose control socket answered this scrape.",
            kind: G,
            series: vec![(Vec::new(), Sample::Int(scrape.services.len() as u64))],
        },
        Family {
            name: "flowlane_daemon_services_unanswered",
            help: "Control sockets that did not answer a scrape (a service busy or stuck), over all scrapes.",
            kind: C,
            series: vec![(Vec::new(), Sample::Int(scrape.unanswered_total))],
        },
    ];
    let per_service = |name, help, kind, f: &dyn Fn(&ServiceCounters) -> Sample| Family {
        name,
        help,
        kind,
        series: scrape
            .services
            .iter()
            .map(|s| (service_labels(s), f(s)))
            .collect(),
    };
    out.push(per_service(
        "flowlane_service",
        "A running flowlane service: its backend (xdp, kernel), interface (*: every one) and rebalancing mode.",
        MetricType::Info,
        &|s| {
            Sample::Info(vec![
                ("backend", s.backend.clone()),
                ("iface", s.iface.clone()),
                ("rebalance", s.rebalance.clone()),
            ])
        },
    ));
    out.push(per_service(
        "flowlane_service_start_time_seconds",
        "When the service started, in seconds since the Unix epoch.",
        G,
        // As the service says (the same at every scrape: `changes()` of it
        // is a restart alert); reckoned from its uptime for one too old
        // to say, which moves by how long each answer took.
        &|s| {
            Sample::Real(match s.started_unix_ns {
                Some(ns) => ns as f64 / 1e9,
                None => (scrape.now_unix_s - s.uptime_ns as f64 / 1e9).max(0.0),
            })
        },
    ));
    out.push(per_service(
        "flowlane_service_stopping",
        "1 while the service stops: its listeners closed, its connections finishing in the stop's drain (2 s at most; flowlane_tcp_stop_finishing, what it waits for) before it exits and leaves the page; 0 while it serves.",
        G,
        &|s| Sample::Int(u64::from(s.stopping)),
    ));
    let mut moves = Family {
        name: "flowlane_rebalance_moves",
        help: "RSS bucket moves the service made, by reason (its rebalancing loop to a core of the bucket's node or of another node, by hand, the test storm) and result (done; failed, the bucket where it was; landed_with_error, the bucket moved but the move reported an error).",
        kind: C,
        series: Vec::new(),
    };
    for s in &scrape.services {
        for cause in MoveCause::ALL {
            let count = s.moves.by_cause.iter().find(|c| c.cause == cause);
            for (result, n) in [
                ("done", count.map_or(0, |c| c.done)),
                ("failed", count.map_or(0, |c| c.failed)),
                (
                    "landed_with_error",
                    count.map_or(0, |c| c.landed_with_error),
                ),
            ] {
                let mut labels = service_labels(s);
                labels.push(("reason", cause.name().into()));
                labels.push(("result", result.into()));
                moves.series.push((labels, Sample::Int(n)));
            }
        }
    }
    out.push(moves);
    out.push(per_service(
        "flowlane_rebalance_imbalance_ratio",
        "The busiest worker's busy time over the mean of the service's workers', over the service's last full second (1: balanced, or idle). An AF_XDP worker is busy only in loop passes that found work (idle: 1); a kernel-socket service's core is busy for its thread's CPU time, some of which an idle one spends on timers and wake-ups; either way a window whose busiest worker was busy less than 5 % of it (the rebalancing loop's idle mark) reads 1.",
        G,
        &|s| Sample::Real(s.imbalance),
    ));
    let with_loop = |name, help, kind, f: &dyn Fn(&MoveCostStatus) -> u64| Family {
        name,
        help,
        kind,
        series: scrape
            .services
            .iter()
            .filter_map(|s| Some((service_labels(s), Sample::Int(f(s.move_cost.as_ref()?)))))
            .collect(),
    };
    out.push(with_loop(
        "flowlane_rebalance_move_cost_fixed_ns",
        "What the service's rebalancing loop prices a bucket move at now, besides its connections, in nanoseconds: learned from the latest moves' durations (failed ones included), weighed with the configured 20 µs as they age (a minute's memory). A move is made only if the load it takes off a core is worth more over the policy's 500 ms horizon.",
        G,
        &|c| c.fixed_ns,
    ));
    out.push(with_loop(
        "flowlane_rebalance_move_cost_per_connection_ns",
        "What the service's rebalancing loop prices each connection a bucket move carries at now, in nanoseconds (learned as flowlane_rebalance_move_cost_fixed_ns; the configured prior 2 µs).",
        G,
        &|c| c.per_connection_ns,
    ));
    out.push(with_loop(
        "flowlane_rebalance_move_cost_observed",
        "The moves the rebalancing loop's move price is fitted on: the latest ones, at most 64 (0: the configured prior).",
        G,
        &|c| c.fit_moves,
    ));
    out.push(with_loop(
        "flowlane_rebalance_moves_refused_for_cost",
        "Moves the service's rebalancing loop refused for their price since it started: in a round, a core left above the target load because no move of its buckets gained more than it cost, where at no cost one would have helped (counted once a core and round: an upper bound on distinct moves). Stays 0 at --move-cost fixed's small configured price.",
        C,
        &|c| c.refused_for_cost,
    ));
    out.push(per_service(
        "flowlane_control_clients_dropped",
        "Clients the service's control socket dropped: too slow to send a whole request or to take their answer, or making room for others (many connections that send or read nothing).",
        C,
        &|s| Sample::Int(s.control_clients_dropped),
    ));
    out.push(per_service(
        "flowlane_heap_trims",
        "Times the service asked the C allocator (glibc's malloc_trim) to hand the memory its queues gave back to the system: once they returned 16 MiB since the last, at most every 5 s.",
        C,
        &|s| Sample::Int(s.heap_trims),
    ));
    out.push(per_service(
        "flowlane_heap_trim_seconds",
        "Time those heap trims took, on the service's control thread (not a worker's).",
        C,
        &|s| Sample::Real(s.heap_trim_ns as f64 / 1e9),
    ));
    out.push(per_service(
        "flowlane_rebalance_move_duration_seconds",
        "Time from a move's request to the new queue serving the bucket.",
        MetricType::Histogram,
        &|s| move_histogram(&s.moves),
    ));
    let queues: Vec<(Labels, &QueueCounterSet)> = scrape
        .services
        .iter()
        .flat_map(|s| s.queues.iter().map(move |q| (queue_labels(s, q), q)))
        .collect();
    let on_kernel: Vec<bool> = scrape
        .services
        .iter()
        .flat_map(|s| s.queues.iter().map(|_| s.backend == "kernel"))
        .collect();
    push_rows(&mut out, QUEUE_ROWS, &queues, |row, i| {
        if on_kernel[i] {
            kernel_knows(row)
        } else {
            !kernel_only(row)
        }
    });
    let steering: Vec<(Labels, &QueueSteering)> = scrape
        .services
        .iter()
        .flat_map(|s| {
            s.steering.iter().map(move |q| {
                let mut l = service_labels(s);
                l.push(("queue", q.queue.to_string()));
                (l, q)
            })
        })
        .collect();
    push_rows(&mut out, STEERING_ROWS, &steering, |_, _| true);
    let queue_pairs: Vec<(Labels, &QueuePairCounters)> = scrape
        .services
        .iter()
        .filter_map(|s| Some((service_labels(s), s.queue_pair.as_ref()?)))
        .collect();
    push_rows(&mut out, QUEUE_PAIR_ROWS, &queue_pairs, |_, _| true);
    let relays: Vec<(Labels, &RelayMemoryCounters)> =
        scrape.services.iter().flat_map(relay_labels).collect();
    push_rows(&mut out, RELAY_ROWS, &relays, |_, _| true);
    let nics: Vec<(Labels, &InterfaceStats)> = scrape
        .services
        .iter()
        .filter_map(|s| {
            let mut l = service_labels(s);
            l.push(("iface", s.iface.clone()));
            Some((l, s.nic.as_ref()?))
        })
        .collect();
    push_rows(&mut out, NIC_ROWS, &nics, |_, _| true);
    out.extend(owned_nics(&scrape.nics));
    out.extend(nic_queues(&scrape.nic_queues));
    out
}

/// The owned NICs' own per-queue counters (netdev `qstats-get`): a series
/// for each counter the driver keeps.
fn nic_queues(nics: &[(String, Vec<NicQueueStats>)]) -> Vec<Family> {
    let family = |name, help, f: &dyn Fn(&NicQueueStats) -> Option<u64>| Family {
        name,
        help,
        kind: C,
        series: nics
            .iter()
            .flat_map(|(iface, queues)| {
                queues.iter().filter_map(move |q| {
                    let labels: Labels = vec![
                        ("iface", iface.clone()),
                        ("queue", q.queue.to_string()),
                        ("direction", if q.rx { "rx" } else { "tx" }.to_string()),
                    ];
                    Some((labels, Sample::Int(f(q)?)))
                })
            })
            .collect(),
    };
    vec![
        family(
            "flowlane_nic_queue_packets",
            "Packets through each queue of a NIC the daemon owns, as its driver counts them.",
            &|q| q.packets,
        ),
        family(
            "flowlane_nic_queue_bytes",
            "Bytes through each queue of a NIC the daemon owns, as its driver counts them.",
            &|q| q.bytes,
        ),
        family(
            "flowlane_nic_queue_alloc_failures",
            "Receive buffers a NIC's driver could not allocate, per queue.",
            &|q| q.alloc_fail,
        ),
        family(
            "flowlane_nic_queue_dropped_packets",
            "Packets a NIC dropped, per queue, as its driver counts them.",
            &|q| q.hw_drops,
        ),
    ]
    .into_iter()
    .filter(|f| !f.series.is_empty())
    .collect()
}

/// The NICs the daemon owns: what each can do and who does each part of
/// the plan (a bounded set: nine parts per NIC).
fn owned_nics(nics: &[NicReport]) -> Vec<Family> {
    let iface = |n: &NicReport| -> Labels { vec![("iface", n.caps.iface.clone())] };
    let per_nic = |name, help, kind, f: &dyn Fn(&NicReport) -> Sample| Family {
        name,
        help,
        kind,
        series: nics.iter().map(|n| (iface(n), f(n))).collect(),
    };
    let word = |known: Option<bool>, yes: &str, no: &str| {
        known
            .map_or("unknown", |k| if k { yes } else { no })
            .to_string()
    };
    vec![
        per_nic(
            "flowlane_nic",
            "A NIC the daemon owns: its driver, NUMA node, AF_XDP and XDP modes, and whether RSS is in the NIC.",
            MetricType::Info,
            &|n| {
                let c = &n.caps;
                Sample::Info(vec![
                    ("driver", c.driver.clone().unwrap_or_default()),
                    ("node", c.numa_node.map_or_else(|| "none".into(), |x| x.to_string())),
                    (
                        "af_xdp",
                        word(c.xsk_mode().map(|m| m == XskMode::ZeroCopy), "zero-copy", "copy"),
                    ),
                    ("xdp", word(c.has_xdp(XdpFeature::Basic), "native", "generic")),
                    ("rss", word(Some(c.rss.is_some()), "hardware", "none")),
                ])
            },
        ),
        per_nic(
            "flowlane_nic_rx_queues",
            "Receive queues the NIC has now.",
            G,
            &|n| Sample::Int(u64::from(n.caps.rx_queues)),
        ),
        per_nic(
            "flowlane_nic_rx_queues_max",
            "Receive queues the NIC can have (its channel maximum).",
            G,
            &|n| Sample::Int(u64::from(n.caps.max_rx_queues())),
        ),
        per_nic(
            "flowlane_nic_rss_table_entries",
            "Entries of the NIC's RSS indirection table (0: none in the NIC).",
            G,
            &|n| Sample::Int(n.caps.rss.as_ref().map_or(0, |r| u64::from(r.table_size))),
        ),
        per_nic(
            "flowlane_nic_plan_changes",
            "Changes the daemon made to the NIC (IRQ and NAPI affinities, threaded NAPI, the RSS table), when it started and when it planned again (the last 64: see flowlane_nic_changes_total for all); 0 with --dry-run.",
            G,
            &|n| Sample::Int(if n.dry_run { 0 } else { n.changes.len() as u64 }),
        ),
        per_nic(
            "flowlane_nic_changes",
            "Changes the daemon made to the NIC since it started (IRQ and NAPI affinities, threaded NAPI, the RSS table), when it started and each time it planned again; 0 with --dry-run.",
            C,
            &|n| Sample::Int(if n.dry_run { 0 } else { n.changes_total }),
        ),
        Family {
            name: "flowlane_nic_plan_part",
            help: "Who carries out each part of the plan on the NIC: hardware, kernel, flowlane, refused or unknown.",
            kind: MetricType::Info,
            series: nics
                .iter()
                .flat_map(|n| {
                    n.plan.iter().map(move |p| {
                        (
                            iface(n),
                            Sample::Info(vec![
                                ("part", p.part.clone()),
                                ("done_by", p.done_by.to_string()),
                            ]),
                        )
                    })
                })
                .collect(),
        },
    ]
}

/// A service's move durations as a histogram in seconds (the encoder
/// wants each bucket's own count and sums them up itself). What a service
/// of another version sends is taken as sound as it can be: bounds it
/// lacks count nothing more (their moves in `+Inf`), a cumulative count
/// never decreases, and the count is at least the buckets'.
fn move_histogram(m: &MoveHistory) -> Sample {
    let mut below = 0;
    let mut buckets: Vec<(f64, u64)> = MoveHistory::DURATION_BOUNDS_US
        .iter()
        .enumerate()
        .map(|(i, us)| {
            let le = m.duration_le.get(i).copied().unwrap_or(below).max(below);
            let own = le - below;
            below = le;
            (us / 1e6, own)
        })
        .collect();
    let count = m.done.max(below);
    buckets.push((f64::INFINITY, count - below));
    Sample::Histogram {
        buckets,
        sum: m.duration_sum_us / 1e6,
        count,
    }
}

/// The services of a scrape, each label set once: the first of those
/// that would make the same series (one socket found twice, or two
/// services the daemon cannot tell apart) is kept.
fn one_per_labels(services: &[ServiceCounters]) -> Vec<ServiceCounters> {
    let mut seen = std::collections::HashSet::new();
    services
        .iter()
        .filter(|s| seen.insert(service_labels(s)))
        .cloned()
        .collect()
}

/// The families of one scrape, for the encoder.
#[derive(Debug)]
struct Page(Vec<Family>);

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        for f in &self.0 {
            let mut m = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for (labels, sample) in &f.series {
                let mut series = m.encode_family(labels)?;
                match sample {
                    Sample::Int(v) if f.kind == MetricType::Counter => {
                        series.encode_counter::<NoLabelSet, _, u64>(v, None)?
                    }
                    Sample::Real(v) if f.kind == MetricType::Counter => {
                        series.encode_counter::<NoLabelSet, _, u64>(v, None)?
                    }
                    Sample::Int(v) => series.encode_gauge(&(*v as i64))?,
                    Sample::Real(v) => series.encode_gauge(v)?,
                    Sample::Info(info) => series.encode_info(info)?,
                    Sample::Histogram {
                        buckets,
                        sum,
                        count,
                    } => series.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?,
                }
            }
        }
        Ok(())
    }
}

/// The page's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The classic text format, version 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format a scraper asks for in its `Accept` header (RFC 9110
    /// section 12.5.1): OpenMetrics if it names it with a weight (`q`,
    /// 1 unless given) above 0 and not below the classic text format's
    /// (`text/plain`, `text/*` or `*/*`), else the classic text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let (mut openmetrics, mut text) = (0.0f64, 0.0f64);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, v)| v.trim().parse::<f64>().unwrap_or(1.0));
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The page's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The metrics page of one scrape.
pub fn render(scrape: &Scrape, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Page(families(scrape))));
    let mut page = String::new();
    let encoded = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut page, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut page, &registry),
    };
    // Writing into a String cannot fail; an encoder error would be a bug
    // in a name or label above, which the tests cover.
    encoded.expect("metrics page encodes");
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlane_dataplane::{QueueCountersSnapshot, TcpCountersSnapshot};

    /// Each metric's rows are together in `QUEUE_ROWS`: a family is
    /// written whenever the name changes, and a name that came back would
    /// be a second `TYPE` line, which Prometheus's parser refuses (a row
    /// once put between `flowlane_tcp_connections`' states).
    #[test]
    fn each_metric_s_rows_are_together() {
        let mut seen: Vec<&str> = Vec::new();
        for row in QUEUE_ROWS {
            if seen.last() != Some(&row.name) {
                assert!(!seen.contains(&row.name), "{} comes back", row.name);
                seen.push(row.name);
            }
        }
    }

    fn service(name: &str, pid: u32) -> ServiceCounters {
        let queue = |n: u32| QueueCounterSet {
            queue: n,
            cpu: Some(n),
            node: 0,
            io: QueueCountersSnapshot {
                rx_packets: 100 + u64::from(n),
                busy_ns: 1_500_000_000,
                rx_ring_full: 7,
                ..Default::default()
            },
            tcp: TcpCountersSnapshot {
                connections: 12,
                time_wait: 2,
                in_established: 9,
                in_close_wait: 1,
                in_time_wait: 2,
                bytes_in: 4096,
                syn_dropped: 3,
                syn_acks_limited: 4,
                syn_cookies_ts_ignored: 6,
                dsack_unexpected: 8,
                window_retractions: 9,
                recv_buffer_overrun: 10,
                recv_parked: 11,
                ooo_reneged: 12,
                loss_probes: 13,
                pmtu_lowered: 14,
                too_big_ignored: 15,
                unreachable_ended: 16,
                unreachable_ignored: 17,
                unreachable_remembered: 19,
                rto_reverts: 20,
                finishing: 18,
                rx_memory_peak: 65_536,
                tx_memory_waits: 5,
                ..Default::default()
            },
        };
        let mut moves = MoveHistory::default();
        for (cause, us) in [
            (MoveCause::Manual, 80.0),
            (MoveCause::BalanceSameNode, 400.0),
            (MoveCause::BalanceSameNode, 30_000.0),
        ] {
            moves.record(
                cause,
                &Ok(flowlane_dataplane::handoff::MoveReport {
                    duration_us: us,
                    ..Default::default()
                }),
                true,
            );
        }
        moves.record(
            MoveCause::Storm,
            &Err(flowlane_dataplane::Error::Move("refused".into())),
            false,
        );
        moves.record(
            MoveCause::Manual,
            &Err(flowlane_dataplane::Error::Move("drain timed out".into())),
            true,
        );
        ServiceCounters {
            service: name.into(),
            pid,
            uptime_ns: 10_000_000_000,
            started_unix_ns: None,
            backend: "xdp".into(),
            iface: "fl0".into(),
            rebalance: "auto".into(),
            queues: vec![queue(0), queue(1)],
            steering: (0..4)
                .map(|q| QueueSteering {
                    queue: q,
                    redirected: 1000 + u64::from(q),
                    passed: 20,
                    no_socket: if q >= 2 { 3 } else { 0 },
                    fragment_dropped: 1,
                })
                .collect(),
            moves,
            imbalance: 1.25,
            control_clients_dropped: 0,
            heap_trims: 0,
            heap_trim_ns: 0,
            socket: None,
            queue_pair: None,
            stopping: false,
            move_cost: Some(MoveCostStatus {
                fixed_ns: 7_070_000,
                per_connection_ns: 2_500,
                fit_moves: 5,
                refused_for_cost: 3,
                ..MoveCostStatus::default()
            }),
            nic: Some(InterfaceStats {
                rx_packets: 5000,
                tx_dropped: 2,
                ..Default::default()
            }),
        }
    }

    fn scrape() -> Scrape {
        Scrape {
            services: vec![service("bulk-sink", 41), service("http-server", 42)],
            unanswered: 0,
            unanswered_total: 1,
            now_unix_s: 1_000.0,
            nics: vec![nic()],
            nic_queues: vec![(
                "eth1".into(),
                vec![
                    NicQueueStats {
                        queue: 0,
                        rx: true,
                        packets: Some(10),
                        bytes: Some(1500),
                        alloc_fail: Some(0),
                        hw_drops: None,
                    },
                    NicQueueStats {
                        queue: 0,
                        rx: false,
                        packets: Some(7),
                        bytes: Some(700),
                        alloc_fail: None,
                        hw_drops: None,
                    },
                ],
            )],
        }
    }

    /// A 4-queue zero-copy NIC with RSS the daemon owns.
    fn nic() -> NicReport {
        use flowlane_numa_sched::nic_caps::{xdp_features, NicCaps, RssFacts, XdpFacts};
        let caps = NicCaps {
            iface: "eth1".into(),
            driver: Some("ice".into()),
            numa_node: Some(1),
            rx_queues: 4,
            tx_queues: 4,
            rss: Some(RssFacts {
                key_len: 52,
                table_size: 2048,
                ..RssFacts::default()
            }),
            xdp: Some(XdpFacts {
                features: xdp_features(0x0b),
                ..XdpFacts::default()
            }),
            ..NicCaps::default()
        };
        let plan = flowlane_numa_sched::explain(
            &caps,
            flowlane_numa_sched::Wanted {
                workers: 4,
                table_size: 2048,
            },
        );
        NicReport {
            caps,
            workers: 4,
            plan,
            dry_run: false,
            changes: vec!["pinned IRQ 96 (queue 0) to CPU 8 (was 0-15)".into()],
            changes_total: 70,
            notes: vec!["planned again (eth1 changed: its queues' IRQs)".into()],
            restore_on_exit: true,
        }
    }

    #[test]
    fn a_nic_s_own_queue_counters_only_where_the_driver_keeps_them() {
        let page = render(&scrape(), Format::Text);
        assert_eq!(
            line(
                &page,
                r#"flowlane_nic_queue_packets_total{iface="eth1",queue="0",direction="tx"}"#
            ),
            r#"flowlane_nic_queue_packets_total{iface="eth1",queue="0",direction="tx"} 7"#
        );
        assert_eq!(
            line(&page, r#"flowlane_nic_queue_alloc_failures_total{"#),
            r#"flowlane_nic_queue_alloc_failures_total{iface="eth1",queue="0",direction="rx"} 0"#
        );
        assert!(
            !page.contains("flowlane_nic_queue_dropped_packets"),
            "no driver kept drops: no family"
        );
    }

    #[test]
    fn the_imbalance_is_a_gauge_per_service() {
        let page = render(&scrape(), Format::Text);
        assert_eq!(
            line(
                &page,
                r#"flowlane_rebalance_imbalance_ratio{service="bulk-sink""#
            ),
            r#"flowlane_rebalance_imbalance_ratio{service="bulk-sink",pid="41"} 1.25"#
        );
        // What idle reads on each backend, said where it is read.
        let help = line(&page, "# HELP flowlane_rebalance_imbalance_ratio ");
        assert!(
            help.contains("(1: balanced, or idle)")
                && help.contains(
                    "busy less than 5 % of it (the rebalancing loop's idle mark) reads 1"
                ),
            "{help}"
        );
    }

    /// The learned move cost: three gauges per service whose loop runs,
    /// and the counter of moves refused for it (none for a service
    /// without one).
    #[test]
    fn the_learned_move_cost_is_three_gauges_per_service_with_a_loop() {
        let mut s = scrape();
        s.services[1].move_cost = None;
        let page = render(&s, Format::Text);
        assert!(page.contains("# TYPE flowlane_rebalance_moves_refused_for_cost_total counter\n"));
        assert_eq!(
            line(
                &page,
                r#"flowlane_rebalance_moves_refused_for_cost_total{service="bulk-sink""#
            ),
            r#"flowlane_rebalance_moves_refused_for_cost_total{service="bulk-sink",pid="41"} 3"#
        );
        assert!(!page
            .contains(r#"flowlane_rebalance_moves_refused_for_cost_total{service="http-server""#));
        for (name, value) in [
            ("flowlane_rebalance_move_cost_fixed_ns", "7070000"),
            ("flowlane_rebalance_move_cost_per_connection_ns", "2500"),
            ("flowlane_rebalance_move_cost_observed", "5"),
        ] {
            assert_eq!(
                line(&page, &format!(r#"{name}{{service="bulk-sink""#)),
                format!(r#"{name}{{service="bulk-sink",pid="41"}} {value}"#)
            );
            assert!(page.contains(&format!("# TYPE {name} gauge\n")), "{name}");
            assert!(
                !page.contains(&format!(r#"{name}{{service="http-server""#)),
                "{name}: no loop, no series"
            );
        }
    }

    #[test]
    fn an_owned_nic_is_described_by_a_bounded_set_of_series() {
        let page = render(&scrape(), Format::Text);
        assert_eq!(
            line(&page, "flowlane_nic_info{"),
            r#"flowlane_nic_info{iface="eth1",driver="ice",node="1",af_xdp="zero-copy",xdp="native",rss="hardware"} 1"#
        );
        assert_eq!(
            line(&page, "flowlane_nic_rss_table_entries{"),
            r#"flowlane_nic_rss_table_entries{iface="eth1"} 2048"#
        );
        assert_eq!(
            line(&page, "flowlane_nic_plan_changes{"),
            r#"flowlane_nic_plan_changes{iface="eth1"} 1"#
        );
        let parts = page
            .lines()
            .filter(|l| l.starts_with("flowlane_nic_plan_part_info{"))
            .count();
        assert_eq!(parts, 9);
        assert!(
            page.contains(r#"part="af-xdp",done_by="hardware""#),
            "{page}"
        );
        let mut dry = scrape();
        dry.nics[0].dry_run = true;
        let page = render(&dry, Format::Text);
        assert_eq!(
            line(&page, "flowlane_nic_plan_changes{"),
            r#"flowlane_nic_plan_changes{iface="eth1"} 0"#,
            "a dry run changed nothing"
        );
        assert_eq!(
            line(&page, "flowlane_nic_changes_total{"),
            r#"flowlane_nic_changes_total{iface="eth1"} 0"#,
            "a dry run changed nothing"
        );
    }

    /// Every change the daemon made is counted, not only the last lines
    /// the report keeps: a conventional counter beside the bounded gauge,
    /// in both formats.
    #[test]
    fn a_nic_s_changes_are_counted_past_the_lines_kept() {
        let page = render(&scrape(), Format::Text);
        assert!(
            page.contains("# TYPE flowlane_nic_changes_total counter\n"),
            "{page}"
        );
        assert_eq!(
            line(&page, "flowlane_nic_changes_total{"),
            r#"flowlane_nic_changes_total{iface="eth1"} 70"#
        );
        let page = render(&scrape(), Format::OpenMetrics);
        assert!(
            page.contains("# TYPE flowlane_nic_changes counter\n"),
            "{page}"
        );
        assert_eq!(
            line(&page, "flowlane_nic_changes_total{"),
            r#"flowlane_nic_changes_total{iface="eth1"} 70"#
        );
    }

    /// The clients a service's control socket dropped are a counter per
    /// service.
    #[test]
    fn the_control_socket_s_dropped_clients_are_counted_per_service() {
        let mut s = scrape();
        s.services[0].control_clients_dropped = 3;
        let page = render(&s, Format::Text);
        assert_eq!(
            line(
                &page,
                r#"flowlane_control_clients_dropped_total{service="bulk-sink""#
            ),
            r#"flowlane_control_clients_dropped_total{service="bulk-sink",pid="41"} 3"#
        );
    }

    /// The heap trims are counters per service, their time in seconds.
    #[test]
    fn the_heap_trims_are_counted_per_service() {
        let mut s = scrape();
        s.services[0].heap_trims = 2;
        s.services[0].heap_trim_ns = 1_500_000;
        let page = render(&s, Format::Text);
        assert_eq!(
            line(&page, r#"flowlane_heap_trims_total{service="bulk-sink""#),
            r#"flowlane_heap_trims_total{service="bulk-sink",pid="41"} 2"#
        );
        assert_eq!(
            line(
                &page,
                r#"flowlane_heap_trim_seconds_total{service="bulk-sink""#
            ),
            r#"flowlane_heap_trim_seconds_total{service="bulk-sink",pid="41"} 0.0015"#
        );
    }

    /// A service in queue-pair mode shows its application threads, the
    /// connections its cores reset for them or moved, and each core's
    /// relay memory each way, under the labels of the core's queue; a
    /// service in rtc mode has no such series.
    #[test]
    fn queue_pair_mode_s_counters_are_on_the_page_per_service_and_core() {
        use flowlane_dataplane::control_socket::RelayMemoryCounters;
        let mut s = scrape();
        s.services[0].queue_pair = Some(QueuePairCounters {
            app_threads: 2,
            dead_threads: vec![1],
            connections_orphaned: 4,
            connections_moved: 5,
            requests_bounced: 6,
            application_refused: 7,
            relay_memory: vec![
                RelayMemoryCounters {
                    core: 0,
                    rx_limit: 4 << 20,
                    rx_held: 100,
                    rx_peak: 9000,
                    rx_waits: 2,
                    tx_limit: 8 << 20,
                    tx_held: 300,
                    tx_peak: 7000,
                    tx_waits: 3,
                    pool_cached: 256 << 10,
                    returned: 12 << 20,
                },
                RelayMemoryCounters {
                    core: 1,
                    rx_peak: 11,
                    ..Default::default()
                },
                // Named twice (another version, or hostile): once on the
                // page, the first.
                RelayMemoryCounters {
                    core: 1,
                    rx_peak: 99,
                    ..Default::default()
                },
                // A core of no queue the service reported.
                RelayMemoryCounters {
                    core: 5,
                    tx_held: 1,
                    ..Default::default()
                },
            ],
        });
        let page = render(&s, Format::Text);
        let service = r#"service="bulk-sink",pid="41""#;
        for (series, value) in [
            (format!("flowlane_qp_app_threads{{{service}}}"), "2"),
            (format!("flowlane_qp_dead_threads{{{service}}}"), "1"),
            (
                format!("flowlane_qp_connections_orphaned_total{{{service}}}"),
                "4",
            ),
            (
                format!("flowlane_qp_connections_moved_total{{{service}}}"),
                "5",
            ),
            (
                format!("flowlane_qp_requests_bounced_total{{{service}}}"),
                "6",
            ),
            (
                format!("flowlane_qp_application_refused_total{{{service}}}"),
                "7",
            ),
        ] {
            assert_eq!(line(&page, &series), format!("{series} {value}"));
        }
        let core0 = format!(r#"{service},queue="0",cpu="0",node="0""#);
        for (name, direction, value) in [
            ("flowlane_qp_memory_bytes", "receive", "100"),
            ("flowlane_qp_memory_bytes", "send", "300"),
            ("flowlane_qp_memory_limit_bytes", "receive", "4194304"),
            ("flowlane_qp_memory_limit_bytes", "send", "8388608"),
            ("flowlane_qp_memory_peak_bytes", "receive", "9000"),
            ("flowlane_qp_memory_peak_bytes", "send", "7000"),
            ("flowlane_qp_memory_waits_total", "receive", "2"),
            ("flowlane_qp_memory_waits_total", "send", "3"),
        ] {
            let series = format!(r#"{name}{{{core0},direction="{direction}"}}"#);
            assert_eq!(line(&page, &series), format!("{series} {value}"));
        }
        assert!(line(
            &page,
            &format!(
                r#"flowlane_qp_memory_peak_bytes{{{service},queue="1",cpu="1",node="0",direction="receive"}}"#
            )
        )
        .ends_with(" 11"));
        assert!(line(
            &page,
            &format!(r#"flowlane_qp_memory_bytes{{{service},queue="5",direction="send"}}"#)
        )
        .ends_with(" 1"));
        // What its relay's pool keeps and gave back.
        for (name, value) in [
            ("flowlane_qp_buffer_memory_cached_bytes", "262144"),
            ("flowlane_qp_buffer_memory_returned_bytes_total", "12582912"),
        ] {
            let series = format!(r#"{name}{{{core0}}}"#);
            assert_eq!(line(&page, &series), format!("{series} {value}"));
        }
        assert!(page.contains("# TYPE flowlane_qp_memory_waits_total counter\n"));
        assert!(page.contains("# TYPE flowlane_qp_buffer_memory_returned_bytes_total counter\n"));
        assert!(page.contains("# TYPE flowlane_qp_dead_threads gauge\n"));
        // Three cores, two directions, four families; two of the pool's.
        let of = |pid: &str| {
            page.lines()
                .filter(|l| l.starts_with("flowlane_qp_") && l.contains(&format!(r#"pid="{pid}""#)))
                .count()
        };
        assert_eq!(of("41"), 6 + 3 * 2 * 4 + 3 * 2);
        assert_eq!(of("42"), 0, "rtc mode: none");
    }

    /// The line of `page` that starts with `prefix` (one exactly).
    fn line<'a>(page: &'a str, prefix: &str) -> &'a str {
        let found: Vec<&str> = page.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(found.len(), 1, "{prefix}: {found:?}\n{page}");
        found[0]
    }

    #[test]
    fn the_text_page_carries_each_queue_s_counters_under_fixed_names() {
        let page = render(&scrape(), Format::Text);
        assert!(page.contains("# TYPE flowlane_queue_rx_packets_total counter\n"));
        assert_eq!(
            line(
                &page,
                r#"flowlane_queue_rx_packets_total{service="bulk-sink",pid="41",queue="1",cpu="1",node="0"}"#
            ),
            r#"flowlane_queue_rx_packets_total{service="bulk-sink",pid="41",queue="1",cpu="1",node="0"} 101"#
        );
        assert!(line(
            &page,
            r#"flowlane_queue_busy_seconds_total{service="http-server",pid="42",queue="0""#
        )
        .ends_with(" 1.5"));
        assert!(line(&page, r#"flowlane_queue_dropped_frames_total{service="bulk-sink",pid="41",queue="0",cpu="0",node="0",reason="rx_ring_full"}"#).ends_with(" 7"));
        for (state, n) in [
            ("established", 9),
            ("close_wait", 1),
            ("time_wait", 2),
            ("syn_received", 0),
        ] {
            let series = format!(
                r#"flowlane_tcp_connections{{service="bulk-sink",pid="41",queue="0",cpu="0",node="0",state="{state}"}}"#
            );
            assert!(line(&page, &series).ends_with(&format!(" {n}")), "{state}");
        }
        assert!(
            !page
                .lines()
                .any(|l| !l.starts_with('#') && l.contains(r#"state="open""#)),
            "by state on AF_XDP"
        );
        assert!(line(&page, r#"flowlane_tcp_refused_total{service="bulk-sink",pid="41",queue="0",cpu="0",node="0",reason="syn_dropped"}"#).ends_with(" 3"));
        assert!(line(&page, r#"flowlane_tcp_dropped_segments_total{service="bulk-sink",pid="41",queue="0",cpu="0",node="0",reason="receive_buffer_full"}"#).ends_with(" 10"));
        assert!(line(
            &page,
            r#"flowlane_tcp_stop_finishing{service="bulk-sink",pid="41",queue="0",cpu="0",node="0"}"#
        )
        .ends_with(" 18"));
        for (message, outcome, n) in [
            ("too_big", "acted", 14),
            ("too_big", "ignored", 15),
            ("unreachable", "acted", 16),
            ("unreachable", "ignored", 17),
            ("unreachable", "remembered", 19),
        ] {
            let series = format!(
                r#"flowlane_tcp_icmp_errors_total{{service="bulk-sink",pid="41",queue="0",cpu="0",node="0",message="{message}",outcome="{outcome}"}}"#
            );
            assert!(line(&page, &series).ends_with(&format!(" {n}")), "{series}");
        }
        for (name, n) in [
            ("flowlane_tcp_syn_acks_limited_total", 4),
            ("flowlane_tcp_syn_cookies_timestamps_ignored_total", 6),
            ("flowlane_tcp_dsack_unexpected_total", 8),
            ("flowlane_tcp_window_retractions_total", 9),
            ("flowlane_tcp_recv_parked_total", 11),
            ("flowlane_tcp_ooo_reneged_total", 12),
            ("flowlane_tcp_una_probes_total", 13),
            ("flowlane_tcp_rto_reverts_total", 20),
        ] {
            let series =
                format!(r#"{name}{{service="bulk-sink",pid="41",queue="0",cpu="0",node="0"}}"#);
            assert!(line(&page, &series).ends_with(&format!(" {n}")), "{name}");
        }
        assert!(page.contains("# TYPE flowlane_service_info gauge\n"));
        assert!(line(
            &page,
            r#"flowlane_service_info{service="bulk-sink",pid="41""#
        )
        .contains(r#"iface="fl0""#));
        assert!(line(
            &page,
            r#"flowlane_service_start_time_seconds{service="bulk-sink""#
        )
        .ends_with(" 990.0"));
        assert!(line(&page, "flowlane_daemon_services ").ends_with(" 2"));
        assert!(line(&page, "flowlane_daemon_services_unanswered_total ").ends_with(" 1"));
        assert!(page.contains("flowlane_build_info{version="));
        assert!(line(
            &page,
            r#"flowlane_nic_rx_packets_total{service="bulk-sink",pid="41",iface="fl0"}"#
        )
        .ends_with(" 5000"));
        assert!(line(&page, r#"flowlane_nic_dropped_packets_total{service="bulk-sink",pid="41",iface="fl0",direction="tx"}"#).ends_with(" 2"));
    }

    /// A service's start time is the one it says, the same at every
    /// scrape however long its answer took (reckoned from its uptime, it
    /// moved at each, and `changes()` of it, the restart alert, always
    /// fired); one too old to say is reckoned from its uptime.
    #[test]
    fn a_service_s_start_time_is_the_same_at_every_scrape() {
        let start = |now: f64, uptime_s: u64, says: Option<u64>| {
            let mut s = service("bulk-sink", 41);
            s.uptime_ns = uptime_s * 1_000_000_000;
            s.started_unix_ns = says;
            let page = render(
                &Scrape {
                    now_unix_s: now,
                    services: vec![s],
                    ..scrape()
                },
                Format::Text,
            );
            let l = line(
                &page,
                r#"flowlane_service_start_time_seconds{service="bulk-sink""#,
            );
            l.rsplit(' ').next().unwrap().to_string()
        };
        let says = Some(990_000_000_000);
        // Asked at 1 000 s, up 10 s; then at 1 015.3 s, up 25 s (its answer
        // took 0.3 s longer).
        assert_eq!(start(1_000.0, 10, says), "990.0");
        assert_eq!(start(1_015.3, 25, says), "990.0");
        assert_eq!(start(1_000.0, 10, None), "990.0");
    }

    /// The steering program's counters are on the page for every
    /// receive queue of the service's interface, served or not (the
    /// drops of flowlane's frames on a queue it does not serve are there);
    /// a kernel-socket service has none.
    #[test]
    fn the_steering_program_s_counters_are_on_the_page_per_queue() {
        let mut s = scrape();
        s.services[1].backend = "kernel".into();
        s.services[1].steering.clear();
        let page = render(&s, Format::Text);
        assert!(
            page.contains("# TYPE flowlane_steering_dropped_frames_total counter\n"),
            "{page}"
        );
        assert_eq!(
            line(
                &page,
                r#"flowlane_steering_dropped_frames_total{service="bulk-sink",pid="41",queue="3",reason="no_socket"}"#
            ),
            r#"flowlane_steering_dropped_frames_total{service="bulk-sink",pid="41",queue="3",reason="no_socket"} 3"#
        );
        assert_eq!(
            line(
                &page,
                r#"flowlane_steering_dropped_frames_total{service="bulk-sink",pid="41",queue="0",reason="first_fragment"}"#
            ),
            r#"flowlane_steering_dropped_frames_total{service="bulk-sink",pid="41",queue="0",reason="first_fragment"} 1"#
        );
        assert_eq!(
            line(
                &page,
                r#"flowlane_steering_frames_total{service="bulk-sink",pid="41",queue="2",verdict="redirected"}"#
            ),
            r#"flowlane_steering_frames_total{service="bulk-sink",pid="41",queue="2",verdict="redirected"} 1002"#
        );
        let series = |name: &str, pid: &str| {
            page.lines()
                .filter(|l| l.starts_with(name) && l.contains(&format!(r#"pid="{pid}""#)))
                .count()
        };
        assert_eq!(series("flowlane_steering_frames_total{", "41"), 8);
        assert_eq!(series("flowlane_steering_dropped_frames_total{", "41"), 8);
        assert_eq!(series("flowlane_steering_", "42"), 0, "kernel sockets");
    }

    #[test]
    fn a_kernel_socket_service_shows_only_what_its_cores_know() {
        let mut s = scrape();
        s.services[1].backend = "kernel".into();
        s.services[1].iface = "*".into();
        let page = render(&s, Format::Text);
        let of = |name: &str, pid: &str| {
            page.lines()
                .filter(|l| l.starts_with(name) && l.contains(&format!(r#"pid="{pid}""#)))
                .count()
        };
        assert!(line(
            &page,
            r#"flowlane_service_info{service="http-server",pid="42""#
        )
        .contains(r#"backend="kernel""#));
        assert!(line(
            &page,
            r#"flowlane_service_info{service="bulk-sink",pid="41""#
        )
        .contains(r#"backend="xdp""#));
        // What kernel sockets let a service count: one series per core.
        for name in [
            "flowlane_queue_busy_seconds_total{",
            "flowlane_tcp_received_bytes_total{",
            "flowlane_tcp_closed_total{",
            "flowlane_tcp_buffer_memory_bytes{",
            "flowlane_tcp_stop_finishing{",
        ] {
            assert_eq!(of(name, "42"), 2, "{name}");
        }
        assert_eq!(of("flowlane_tcp_connections{", "42"), 2, "open only");
        // The cores' buffer memory peaks and waits, each way; an AF_XDP
        // service has no peaks (its receive budget is the committed
        // window) and only its send memory's waits.
        for name in [
            "flowlane_tcp_memory_peak_bytes{",
            "flowlane_tcp_memory_waits_total{",
        ] {
            assert_eq!(of(name, "42"), 4, "{name}: two directions a core");
        }
        assert_eq!(of("flowlane_tcp_memory_peak_bytes{", "41"), 0);
        assert_eq!(
            of("flowlane_tcp_memory_waits_total{", "41"),
            2,
            "send, a queue"
        );
        assert!(!page.contains(r#"pid="41",queue="0",cpu="0",node="0",direction="receive"} "#));
        assert_eq!(
            line(
                &page,
                r#"flowlane_tcp_memory_peak_bytes{service="http-server",pid="42",queue="1",cpu="1",node="0",direction="receive"}"#
            )
            .rsplit(' ')
            .next(),
            Some("65536")
        );
        assert_eq!(
            line(
                &page,
                r#"flowlane_tcp_memory_waits_total{service="http-server",pid="42",queue="0",cpu="0",node="0",direction="send"}"#
            )
            .rsplit(' ')
            .next(),
            Some("5")
        );
        assert!(line(
            &page,
            r#"flowlane_tcp_connections{service="http-server",pid="42",queue="0""#
        )
        .ends_with(r#"state="open"} 12"#));
        assert_eq!(
            of("flowlane_tcp_refused_total{", "42"),
            6,
            "three reasons a core"
        );
        // What only flowlane's data path and TCP know: absent, not zero;
        // the AF_XDP service beside it keeps every series.
        for name in [
            "flowlane_queue_rx_packets_total{",
            "flowlane_tcp_segments_received_total{",
            "flowlane_tcp_retransmitted_segments_total{",
            "flowlane_rebalance_frames_held_total{",
        ] {
            assert_eq!(of(name, "42"), 0, "{name}");
            assert_eq!(of(name, "41"), 2, "{name}");
        }
        assert_eq!(of("flowlane_tcp_refused_total{", "41"), 12);
    }

    #[test]
    fn moves_are_a_histogram_of_seconds() {
        let page = render(&scrape(), Format::Text);
        let le = |bound: &str| {
            line(
                &page,
                &format!(
                    r#"flowlane_rebalance_move_duration_seconds_bucket{{service="bulk-sink",pid="41",le="{bound}"}}"#
                ),
            )
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
        };
        assert_eq!(le("0.0001"), "1");
        assert_eq!(le("0.0005"), "2");
        assert_eq!(le("0.025"), "2");
        assert_eq!(le("0.1"), "3");
        assert_eq!(le("+Inf"), "3");
        assert!(line(
            &page,
            r#"flowlane_rebalance_move_duration_seconds_count{service="bulk-sink""#
        )
        .ends_with(" 3"));
        for (reason, result, n) in [
            ("balance_same_node", "done", 2),
            ("balance_other_node", "done", 0),
            ("manual", "done", 1),
            ("storm", "done", 0),
            ("storm", "failed", 1),
            ("manual", "failed", 0),
            ("manual", "landed_with_error", 1),
            ("storm", "landed_with_error", 0),
        ] {
            let series = format!(
                r#"flowlane_rebalance_moves_total{{service="bulk-sink",pid="41",reason="{reason}",result="{result}"}}"#
            );
            assert!(line(&page, &series).ends_with(&format!(" {n}")), "{series}");
        }
    }

    /// What a service of another version may send: fewer bounds, counts
    /// that go down, a count below the buckets'. The page is made all
    /// the same, its buckets never decreasing.
    #[test]
    fn a_histogram_from_another_version_is_made_sound() {
        for (le, done) in [
            (vec![2u64], 4u64),
            (vec![3, 1, 2], 5),
            (vec![1, 2, 9], 3),
            (Vec::new(), 2),
        ] {
            let mut s = scrape();
            s.services[0].moves.duration_le = le.clone();
            s.services[0].moves.done = done;
            let page = render(&s, Format::Text);
            let buckets: Vec<u64> = page
                .lines()
                .filter(|l| {
                    l.starts_with(
                        r#"flowlane_rebalance_move_duration_seconds_bucket{service="bulk-sink""#,
                    )
                })
                .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(buckets.len(), MoveHistory::DURATION_BOUNDS_US.len() + 1);
            assert!(
                buckets.windows(2).all(|w| w[0] <= w[1]),
                "{le:?}: {buckets:?}"
            );
            let count = line(
                &page,
                r#"flowlane_rebalance_move_duration_seconds_count{service="bulk-sink""#,
            );
            assert!(
                count.ends_with(&format!(" {}", buckets.last().unwrap())),
                "{le:?}: {count} {buckets:?}"
            );
        }
    }

    /// Two services with the same labels (one socket asked twice): the
    /// first is shown, once.
    #[test]
    fn services_with_the_same_labels_are_shown_once() {
        let mut s = scrape();
        let mut twin = s.services[0].clone();
        twin.imbalance = 9.0;
        s.services.push(twin);
        let page = render(&s, Format::Text);
        assert!(line(&page, "flowlane_daemon_services ").ends_with(" 2"));
        assert!(line(
            &page,
            r#"flowlane_rebalance_imbalance_ratio{service="bulk-sink""#
        )
        .ends_with(" 1.25"));
    }

    /// Two replicas in containers whose processes the daemon cannot tell
    /// (both call themselves pid 1), found at two sockets: both shown,
    /// told apart by where they were found.
    #[test]
    fn replicas_the_daemon_cannot_tell_apart_by_pid_are_both_shown() {
        let mut s = scrape();
        s.services.truncate(1);
        s.services[0].pid = 1;
        s.services[0].socket = Some("/run/a/bulk-sink.1.sock".into());
        let mut other = s.services[0].clone();
        other.socket = Some("/run/b/bulk-sink.1.sock".into());
        other.imbalance = 3.0;
        s.services.push(other);
        let page = render(&s, Format::Text);
        assert!(line(&page, "flowlane_daemon_services ").ends_with(" 2"));
        for (dir, imbalance) in [("a", " 1.25"), ("b", " 3.0")] {
            assert!(line(
                &page,
                &format!(
                    r#"flowlane_rebalance_imbalance_ratio{{service="bulk-sink",pid="1",socket="/run/{dir}/bulk-sink.1.sock"}}"#
                )
            )
            .ends_with(imbalance));
        }
    }

    #[test]
    fn every_family_has_help_and_one_type_and_series_are_unique() {
        let page = render(&scrape(), Format::Text);
        let mut seen = std::collections::HashSet::new();
        for l in page.lines().filter(|l| !l.starts_with('#')) {
            let series = l.rsplit_once(' ').unwrap().0;
            assert!(seen.insert(series.to_string()), "duplicate {series}");
        }
        let types = page.lines().filter(|l| l.starts_with("# TYPE")).count();
        let helps = page.lines().filter(|l| l.starts_with("# HELP")).count();
        assert_eq!(types, helps);
        assert!(types > 40, "{types} families");
    }

    #[test]
    fn openmetrics_is_served_to_scrapers_that_ask_for_it() {
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        // What Prometheus sends.
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                 application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;\
                 escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            )),
            Format::OpenMetrics
        );
        let page = render(&scrape(), Format::OpenMetrics);
        assert!(page.ends_with("# EOF\n"));
        assert!(page.contains("# TYPE flowlane_queue_rx_packets counter\n"));
        assert!(page.contains("# TYPE flowlane_service info\n"));
    }

    #[test]
    fn no_service_is_a_page_with_the_daemon_s_own_metrics() {
        let page = render(&Scrape::default(), Format::Text);
        assert!(line(&page, "flowlane_daemon_services ").ends_with(" 0"));
        assert!(!page.contains("flowlane_queue_rx_packets_total{"));
    }

    /// A scraper that names OpenMetrics only to refuse it (`q=0`), or
    /// prefers the classic text format, gets that.
    #[test]
    fn openmetrics_refused_or_less_wanted_is_not_served() {
        for accept in [
            "application/openmetrics-text;q=0, text/plain;q=1",
            "application/openmetrics-text; q=0.0",
            "application/openmetrics-text;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.9",
            "APPLICATION/OpenMetrics-Text;Q=0.1, */*",
            "text/plain",
        ] {
            assert_eq!(Format::from_accept(Some(accept)), Format::Text, "{accept}");
        }
        assert_eq!(
            Format::from_accept(Some("text/plain;q=0.5, Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
    }
}
