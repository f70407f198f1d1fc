//! The per-queue worker: one thread pinned to one core, polling one AF_XDP
//! socket and running the application to completion on each batch.
//!
//! Loop: RX batch → handler → TX batch → completions → fill-ring refill. No
//! locks, no allocation after start-up. When idle the worker blocks in
//! `poll(2)` on its socket (with need_wakeup) instead of spinning, unless
//! busy polling is asked for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xsk_rs::{FrameDesc, Umem};

use crate::counters::QueueCounters;
use crate::xsk::QueueSocket;

/// Frames moved per ring operation.
pub const BATCH: usize = 64;

/// Where a queue's worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QueueInfo {
    /// Receive queue index.
    pub queue: u32,
    /// CPU the worker is pinned to (None: not pinned).
    pub cpu: Option<u32>,
    /// NUMA node of the queue's packet memory.
    pub node: u32,
    /// Whether the socket is bound in zero-copy mode.
    pub zero_copy: bool,
}

/// What to do with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxAction {
    /// Give the frame back to the fill ring.
    Drop,
    /// Send the frame (modified in place) with this length: no copy.
    Transmit(usize),
}

/// Frames a handler can allocate and send outside the in-place reply path.
pub struct TxBatch<'a> {
    umem: &'a Umem,
    free: &'a mut Vec<FrameDesc>,
    pending: &'a mut Vec<FrameDesc>,
}

impl TxBatch<'_> {
    /// Builds one frame in a free UMEM frame: `build` gets the frame's
    /// buffer and returns the frame length, or `None` to give it back.
    /// Returns false when no frame is free (the caller retries later).
    pub fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let Some(mut desc) = self.free.pop() else {
            return false;
        };
        // SAFETY: `desc` came from this queue's free list: it belongs to
        // `self.umem` and is owned by no ring, so nothing else accesses it.
        let mut data = unsafe { self.umem.data_mut(&mut desc) };
        let mut cursor = data.cursor();
        let cap = cursor.buf_len();
        cursor.set_pos(cap);
        match build(data.contents_mut()) {
            Some(len) if len <= cap => {
                data.cursor().set_pos(len);
                self.pending.push(desc);
                true
            }
            _ => {
                self.free.push(desc);
                false
            }
        }
    }

    /// Frames available to [`send_with`](Self::send_with).
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

/// The application side of a queue, called on the queue's own core.
pub trait QueueHandler: Send {
    /// One received Ethernet frame: `buf` is the whole frame buffer and
    /// `len` the received length. Replies may be written in place.
    fn on_rx(&mut self, queue: &QueueInfo, now: Duration, buf: &mut [u8], len: usize) -> RxAction;

    /// Called once per loop iteration after the RX batch: timers and
    /// transmissions that are not in-place replies.
    fn on_poll(&mut self, _queue: &QueueInfo, _now: Duration, _tx: &mut TxBatch<'_>) {}

    /// The earliest time the handler wants `on_poll` even with no traffic.
    fn next_wakeup(&self) -> Option<Duration> {
        None
    }
}

/// Tuning of the loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopConfig {
    /// Spin instead of blocking in poll(2) when idle.
    pub busy_poll: bool,
    /// Frames kept out of the fill ring for `TxBatch::send_with`.
    pub tx_reserve: usize,
}

pub(crate) fn run<H: QueueHandler>(
    mut sock: QueueSocket,
    info: QueueInfo,
    mut handler: H,
    cfg: LoopConfig,
    stop: Arc<AtomicBool>,
    counters: Arc<QueueCounters>,
    epoch: Instant,
) {
    let mut rx_descs = vec![FrameDesc::default(); BATCH];
    let mut comp_descs = vec![FrameDesc::default(); BATCH];
    let mut pending: Vec<FrameDesc> = Vec::with_capacity(sock.frames.len());
    let mut free = std::mem::take(&mut sock.frames);
    let mut in_flight_tx: usize = 0;
    let mut idle_rounds: u32 = 0;
    let mut iterations: u64 = 0;
    let c = &*counters;
    refill(&mut sock, &mut free, cfg.tx_reserve);

    while !stop.load(Ordering::Relaxed) {
        iterations += 1;
        let now = epoch.elapsed();
        // SAFETY: `rx_descs` are scratch descriptors that `consume` overwrites;
        // the frames they then name belong to this socket's UMEM.
        let n = unsafe { sock.rx.consume(&mut rx_descs) };
        let (mut rx_bytes, mut dropped) = (0u64, 0u64);
        for desc in rx_descs.iter_mut().take(n) {
            let len = desc.lengths().data();
            rx_bytes += len as u64;
            // SAFETY: the kernel handed this frame to us on the RX ring; until
            // we put it on the fill or TX ring nothing else touches it.
            let mut data = unsafe { sock.umem.data_mut(desc) };
            let mut cursor = data.cursor();
            let cap = cursor.buf_len();
            cursor.set_pos(cap);
            match handler.on_rx(&info, now, data.contents_mut(), len) {
                RxAction::Transmit(out) if out > 0 && out <= cap => {
                    data.cursor().set_pos(out);
                    pending.push(*desc);
                }
                _ => {
                    dropped += 1;
                    free.push(*desc);
                }
            }
        }
        QueueCounters::add(&c.rx_packets, n as u64);
        QueueCounters::add(&c.rx_bytes, rx_bytes);
        QueueCounters::add(&c.dropped, dropped);

        let mut batch = TxBatch {
            umem: &sock.umem,
            free: &mut free,
            pending: &mut pending,
        };
        handler.on_poll(&info, now, &mut batch);

        let sent = transmit(&mut sock, &mut pending, c);
        in_flight_tx += sent;
        if in_flight_tx > 0 && sock.tx.needs_wakeup() {
            // Copy mode moves frames only inside this kick (at most 32 per
            // call); EAGAIN/ENOBUFS while frames are pending is normal.
            if let Err(e) = sock.tx.wakeup() {
                tracing::debug!(queue = info.queue, "tx wakeup: {e}");
            }
        }
        // SAFETY: as for RX: scratch descriptors overwritten by `consume`.
        let done = unsafe { sock.comp.consume(&mut comp_descs) };
        free.extend_from_slice(&comp_descs[..done]);
        in_flight_tx -= done.min(in_flight_tx);
        refill(&mut sock, &mut free, cfg.tx_reserve);

        if iterations % 1024 == 0 {
            publish_kernel_stats(&sock, c);
        }
        if n == 0 && done == 0 && pending.is_empty() && sent == 0 {
            idle_rounds += 1;
            QueueCounters::add(&c.idle_polls, 1);
            if !cfg.busy_poll && idle_rounds > 16 {
                let mut timeout = Duration::from_millis(if in_flight_tx > 0 { 1 } else { 10 });
                if let Some(at) = handler.next_wakeup() {
                    timeout = timeout.min(at.saturating_sub(epoch.elapsed()));
                }
                let _ = sock.rx.poll(timeout.as_millis() as i32);
            }
        } else {
            idle_rounds = 0;
        }
    }
    publish_kernel_stats(&sock, c);
}

fn transmit(sock: &mut QueueSocket, pending: &mut Vec<FrameDesc>, c: &QueueCounters) -> usize {
    if pending.is_empty() {
        return 0;
    }
    // SAFETY: every pending frame is owned by this worker (received or taken
    // from the free list) and belongs to this socket's UMEM.
    let sent = unsafe { sock.tx.produce(pending) };
    if sent < pending.len() {
        QueueCounters::add(&c.tx_ring_full, 1);
    }
    let bytes: usize = pending[..sent].iter().map(|d| d.lengths().data()).sum();
    QueueCounters::add(&c.tx_packets, sent as u64);
    QueueCounters::add(&c.tx_bytes, bytes as u64);
    pending.drain(..sent);
    sent
}

/// Puts free frames beyond the TX reserve on the fill ring.
fn refill(sock: &mut QueueSocket, free: &mut Vec<FrameDesc>, reserve: usize) {
    if free.len() <= reserve {
        return;
    }
    let want = free.len() - reserve;
    let room = sock.fill.nb_free(want as u32) as usize;
    let k = want.min(room);
    if k == 0 {
        return;
    }
    let start = free.len() - k;
    // SAFETY: the frames are free (owned by no ring) and belong to this
    // socket's UMEM.
    let produced = unsafe { sock.fill.produce(&free[start..]) };
    free.truncate(free.len() - produced);
    if sock.fill.needs_wakeup() {
        let _ = sock.fill.wakeup(sock.rx.fd_mut(), 0);
    }
}

fn publish_kernel_stats(sock: &QueueSocket, c: &QueueCounters) {
    if let Ok(s) = sock.rx.fd().xdp_statistics() {
        QueueCounters::set(&c.rx_ring_full, s.rx_ring_full());
        QueueCounters::set(&c.fill_ring_empty, s.rx_fill_ring_empty_descs());
        QueueCounters::set(&c.rx_dropped, s.rx_dropped());
        QueueCounters::set(
            &c.invalid_descs,
            s.rx_invalid_descs() + s.tx_invalid_descs(),
        );
    }
}
