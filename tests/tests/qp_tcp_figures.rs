//! The bulk services' per-transfer lines carry the connection's TCP
//! figures at its end in queue-pair mode too, as in run to completion: a
//! network core sends a connection's figures with the peer's FIN once its
//! application asked for them (`Net::info`), and the sink asks as it
//! accepts; the source asks as its last byte goes.

mod tcp_common;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

/// Kernel → `bulk-sink` and `bulk-source` → kernel in queue-pair mode on
/// both backends: each transfer line has `tcp` figures (an MSS, a window
/// of at least one segment, a smoothed round-trip time), where the sink's
/// said `"tcp":null` (its one asking, at the end, was the first).
#[test]
fn queue_pair_transfers_report_their_tcp_figures() {
    if !require_root("queue_pair_transfers_report_their_tcp_figures") {
        return;
    }
    let bed = Bed::up("qpfig", 2);
    let bytes = 16 << 20;
    for model in [MODELS[1], MODELS[3]] {
        let (r, _) = kernel_to_flowlane_over(&bed, Family::V4, bytes, 120, model);
        eprintln!("kernel -> sink ({model:?}): {}", r["tcp"]);
        tcp_figures_told(&r);
        let (r, _) = flowlane_to_kernel_over(&bed, Family::V4, bytes, 120, model);
        eprintln!("source ({model:?}) -> kernel: {}", r["tcp"]);
        tcp_figures_told(&r);
    }
}
