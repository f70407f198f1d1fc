//! Per-queue counters: written by the queue's worker alone (relaxed atomics,
//! one cache line per queue so workers never share a line), read by anyone.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one receive queue and its worker.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct QueueCounters {
    /// Frames received from the AF_XDP socket.
    pub rx_packets: AtomicU64,
    /// Bytes received (Ethernet frame lengths).
    pub rx_bytes: AtomicU64,
    /// Frames handed to the TX ring.
    pub tx_packets: AtomicU64,
    /// Bytes handed to the TX ring.
    pub tx_bytes: AtomicU64,
    /// Frames the handler dropped (malformed, not for us, no room).
    pub dropped: AtomicU64,
    /// Times a transmit found the TX ring full.
    pub tx_ring_full: AtomicU64,
    /// Kernel: frames dropped because the RX ring was full.
    pub rx_ring_full: AtomicU64,
    /// Kernel: times the fill ring was empty when a frame arrived
    /// (fill-ring starvation).
    pub fill_ring_empty: AtomicU64,
    /// Kernel: frames dropped for other reasons (no buffer).
    pub rx_dropped: AtomicU64,
    /// Kernel: invalid descriptors on RX or TX.
    pub invalid_descs: AtomicU64,
    /// Poll-loop iterations that found nothing to do.
    pub idle_polls: AtomicU64,
    /// High-water mark of frames on the TX ring not yet completed.
    pub tx_outstanding_max: AtomicU64,
    /// TX wake-ups (`sendto` kicks).
    pub tx_kicks: AtomicU64,
}

/// A plain copy of [`QueueCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueCountersSnapshot {
    /// See [`QueueCounters::rx_packets`].
    pub rx_packets: u64,
    /// See [`QueueCounters::rx_bytes`].
    pub rx_bytes: u64,
    /// See [`QueueCounters::tx_packets`].
    pub tx_packets: u64,
    /// See [`QueueCounters::tx_bytes`].
    pub tx_bytes: u64,
    /// See [`QueueCounters::dropped`].
    pub dropped: u64,
    /// See [`QueueCounters::tx_ring_full`].
    pub tx_ring_full: u64,
    /// See [`QueueCounters::rx_ring_full`].
    pub rx_ring_full: u64,
    /// See [`QueueCounters::fill_ring_empty`].
    pub fill_ring_empty: u64,
    /// See [`QueueCounters::rx_dropped`].
    pub rx_dropped: u64,
    /// See [`QueueCounters::invalid_descs`].
    pub invalid_descs: u64,
    /// See [`QueueCounters::idle_polls`].
    pub idle_polls: u64,
    /// See [`QueueCounters::tx_outstanding_max`].
    pub tx_outstanding_max: u64,
    /// See [`QueueCounters::tx_kicks`].
    pub tx_kicks: u64,
}

impl QueueCounters {
    /// Adds `n` to a counter. Single writer: a load and a store, no RMW.
    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        if n != 0 {
            c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
        }
    }

    /// Sets a counter that mirrors a kernel statistic.
    #[inline]
    pub(crate) fn set(c: &AtomicU64, v: u64) {
        c.store(v, Relaxed);
    }

    /// Reads all counters.
    pub fn snapshot(&self) -> QueueCountersSnapshot {
        QueueCountersSnapshot {
            rx_packets: self.rx_packets.load(Relaxed),
            rx_bytes: self.rx_bytes.load(Relaxed),
            tx_packets: self.tx_packets.load(Relaxed),
            tx_bytes: self.tx_bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            tx_ring_full: self.tx_ring_full.load(Relaxed),
            rx_ring_full: self.rx_ring_full.load(Relaxed),
            fill_ring_empty: self.fill_ring_empty.load(Relaxed),
            rx_dropped: self.rx_dropped.load(Relaxed),
            invalid_descs: self.invalid_descs.load(Relaxed),
            idle_polls: self.idle_polls.load(Relaxed),
            tx_outstanding_max: self.tx_outstanding_max.load(Relaxed),
            tx_kicks: self.tx_kicks.load(Relaxed),
        }
    }
}
