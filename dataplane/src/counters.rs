//! Per-queue counters, one mechanism for all of them: written by the queue's
//! worker alone (relaxed atomics, a load and a store, no read-modify-write;
//! each set on its own cache lines so workers never share one), read by
//! anyone as a plain snapshot, and walked by name with a visitor so that an
//! exporter (JSON reports, metrics) needs no list of fields of its own.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Adds `n` to a counter. Single writer: a load and a store, no RMW.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

/// Adds one to a counter (single writer).
#[inline]
pub fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

/// Sets a counter that mirrors a value kept elsewhere (a kernel statistic,
/// the TCP stack's own counters).
#[inline]
pub(crate) fn set(c: &AtomicU64, v: u64) {
    c.store(v, Relaxed);
}

/// Declares a set of single-writer counters: the atomic set (`$name`,
/// cache-line aligned), its plain snapshot (`$snap`, serializable), and
/// `snapshot`, `add` (field-wise sum, for totals) and `visit` (each counter's
/// name and value, in declaration order).
macro_rules! counters {
    ($(#[$m:meta])* $name:ident / $snap:ident { $($(#[$fm:meta])* $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct $name {
            $($(#[$fm])* pub $f: std::sync::atomic::AtomicU64,)*
        }

        #[doc = concat!("A plain copy of [`", stringify!($name), "`].")]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct $snap {
            $($(#[$fm])* pub $f: u64,)*
        }

        impl $name {
            /// Reads every counter (relaxed).
            pub fn snapshot(&self) -> $snap {
                $snap { $($f: self.$f.load(std::sync::atomic::Ordering::Relaxed),)* }
            }
        }

        impl $snap {
            /// Field-wise sum (for totals over queues).
            pub fn add(&self, o: &$snap) -> $snap {
                $snap { $($f: self.$f + o.$f,)* }
            }

            /// Calls `f` with each counter's name and value, in declaration
            /// order.
            pub fn visit(&self, mut f: impl FnMut(&'static str, u64)) {
                $(f(stringify!($f), self.$f);)*
            }
        }
    };
}
pub(crate) use counters;

counters! {
    /// Counters of one receive queue and its worker.
    QueueCounters / QueueCountersSnapshot {
        /// Frames received from the AF_XDP socket.
        rx_packets,
        /// Bytes received (Ethernet frame lengths).
        rx_bytes,
        /// Frames handed to the TX ring.
        tx_packets,
        /// Bytes handed to the TX ring.
        tx_bytes,
        /// Frames the handler dropped without counting them under a name of
        /// its own (`RxAction::Drop`: not for it, say), and frames whose
        /// answer would not fit the frame. TCP services count their drops by
        /// reason (the TCP counters), UDP echo its refusals: those are not here.
        dropped,
        /// Times a transmit found the TX ring full.
        tx_ring_full,
        /// Kernel: frames dropped because the RX ring was full.
        rx_ring_full,
        /// Kernel: times the fill ring was empty when a frame arrived
        /// (fill-ring starvation).
        fill_ring_empty,
        /// Kernel: frames dropped for other reasons (no buffer).
        rx_dropped,
        /// Kernel: invalid descriptors on RX or TX.
        invalid_descs,
        /// Poll-loop iterations that found nothing to do.
        idle_polls,
        /// Nanoseconds the worker spent in loop iterations that found work
        /// (frames received, sent or completed): its busy time, against
        /// the wall clock for its load (the rebalancer's core load).
        busy_ns,
        /// High-water mark of frames on the TX ring not yet completed.
        tx_outstanding_max,
        /// TX wake-ups (`sendto` kicks).
        tx_kicks,
        /// Gauge, set at every pass: the queue's frames on the worker's
        /// free list. The four `frames_*` gauges account for every frame
        /// the queue owns: their sum is its `--frames-per-queue` (a frame
        /// missing from it was lost).
        frames_free,
        /// Gauge: frames the kernel holds to receive into, put on the fill
        /// ring and not yet taken off the RX ring.
        frames_fill,
        /// Gauge: frames being sent, queued for the TX ring or on it and
        /// not yet completed.
        frames_tx,
        /// Gauge: received frames the worker holds, kept by its handler
        /// (zero-copy receive: payload the application has not read) or
        /// waiting for a pass after a bucket move's scan.
        frames_held,
    }
}
