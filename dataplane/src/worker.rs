//! The per-queue worker: one thread pinned to one core, polling one AF_XDP
//! socket and running the application to completion on each batch.
//!
//! Loop: RX batches (up to [`QueueHandler::rx_budget`] frames, each
//! batch's frames back on the fill ring at once) → handler poll → TX
//! (kicked until the ring is drained, completions taken back) → fill-ring
//! refill. No locks, no allocation after start-up but the queue of
//! descriptors a move's look ahead on the RX ring leaves waiting
//! ([`RxProgress::scan_ahead`]), which keeps what it grew to. When idle the worker
//! blocks in `poll(2)` on its socket (with need_wakeup) instead of spinning, unless
//! busy polling is asked for.
//!
//! A socket that the kernel unbound (its interface went away: `sendto`
//! answers `ENXIO`, and frames on its TX ring never complete) or whose
//! `poll(2)` fails ends the loop with the errno recorded in
//! `Control::failed`, instead of spinning on it; the main thread learns it
//! from [`Dataplane::check`](crate::Dataplane::check).
//!
//! A panic in the loop (a handler's, the application's code it runs, or
//! the worker's own) does not end the worker: the queue fails closed
//! ([`QueueHandler::fail_closed`]: its connections are reset, and from
//! then on its frames are answered without the application), and the
//! main thread learns it from `Dataplane::check` and
//! [`Dataplane::failed`](crate::Dataplane::failed). A thread that died
//! instead would leave its queue's frames to be dropped for want of a
//! socket, its peers waiting for their timeouts. A handler that cannot
//! fail closed, or a second panic, still ends the worker.
//!
//! A worker told to stop leaves its loop, then lets its handler let go of
//! what it holds ([`QueueHandler::on_stop`]: a TCP handler resets its
//! connections) and transmits what that sends, in a bounded number of
//! passes, before its socket closes: peers are told, not left waiting.
// This module touches the kernel directly: ring descriptors and UMEM frame memory, and the TX kick (sendto).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xsk_rs::{FrameDesc, RxQueue, Umem};

use crate::counters::{self, QueueCounters};
use crate::umem::FRAME_SIZE;
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
    /// Frames the queue receives into (its UMEM frames less those kept
    /// for transmission): what can be in flight towards it at once.
    pub rx_frames: u32,
}

/// What to do with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxAction {
    /// The handler is done with the frame: it took what it needed, or it
    /// dropped the frame and counted the drop itself (under a name of its
    /// own). The frame goes back to the fill ring and is not counted as
    /// dropped.
    Consumed,
    /// The frame is dropped (the handler did not want it and counts it
    /// nowhere): it goes back to the fill ring and counts in the queue's
    /// `dropped` counter.
    Drop,
    /// Send the frame (modified in place) with this length: no copy. A
    /// length of 0 or one past the frame sends nothing (the frame is
    /// dropped, and counted as [`RxAction::Drop`] is). Ignored for a frame
    /// the handler kept ([`RxFrame::keep`]) and still holds when
    /// `on_rx_frame` returns: that frame stays held and is not sent.
    Transmit(usize),
}

/// Frames a handler can allocate and send outside the in-place reply path.
pub struct TxBatch<'a> {
    umem: &'a Umem,
    free: &'a mut Vec<FrameDesc>,
    pending: &'a mut Vec<FrameDesc>,
    rx_consumed: &'a mut u64,
    rx: &'a mut RxQueue,
    backlog: &'a mut VecDeque<FrameDesc>,
    counters: &'a QueueCounters,
    held: &'a mut HeldFrames,
    umem_len: usize,
}

/// How far the worker is through its RX ring, read live, and a look at
/// what the ring holds ahead of it (a bucket move's drain: RSS++'s rule
/// that the old queue's marker goes once it has handed on every frame its
/// ring held when it learnt of the NIC's rewrite, met for the moved
/// bucket by [`scan_ahead`](Self::scan_ahead) without waiting for the
/// frames of the others).
pub struct RxProgress<'a> {
    consumed: &'a mut u64,
    ring: &'a mut RxQueue,
    umem: &'a Umem,
    backlog: &'a mut VecDeque<FrameDesc>,
    free: &'a mut Vec<FrameDesc>,
    counters: &'a QueueCounters,
    /// The UMEM's length in bytes (what a received descriptor must lie in).
    umem_len: usize,
}

impl std::fmt::Debug for RxProgress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxProgress")
            .field("consumed", &self.consumed)
            .finish()
    }
}

impl RxProgress<'_> {
    /// Frames received since the worker started and handed on: to
    /// `on_rx`, or taken by [`scan_ahead`](Self::scan_ahead), or dropped
    /// for a descriptor past its frame.
    pub fn consumed(&self) -> u64 {
        *self.consumed
    }

    /// The number [`consumed`](Self::consumed) reaches once every frame
    /// the ring holds at this call (and every frame a scan left waiting)
    /// has been handed on. The ring's producer is read by this call, not
    /// before: a frame the kernel published before it counts.
    pub fn end_now(&mut self) -> u64 {
        *self.consumed + self.backlog.len() as u64 + u64::from(self.ring.nb_avail_exact())
    }

    /// Takes every frame the RX ring holds at this call off it and shows
    /// each to `take`, in ring order, after the frames an earlier scan
    /// left waiting if `waiting_too` (a scan for something new). A frame
    /// `take` answers true for has been dealt with (copied elsewhere): it
    /// goes back to the fill ring and counts as handed on. The others
    /// wait, in order, and the next passes hand them to `on_rx_frame`
    /// before any frame still on the ring. Returns the number up to which
    /// every frame received has been handed on or shown to a scan:
    /// [`consumed`](Self::consumed) plus the frames waiting.
    ///
    /// The cost is a look at each frame's headers (by `take`), where
    /// handing the ring's frames on may take milliseconds on a loaded
    /// queue; a queue scans only while a bucket it gave away drains.
    pub fn scan_ahead(&mut self, waiting_too: bool, take: &mut dyn FnMut(&[u8]) -> bool) -> u64 {
        let (mut taken, mut bytes, mut bad) = (0u64, 0u64, 0u64);
        let (umem, umem_len, free) = (self.umem, self.umem_len, &mut *self.free);
        let mut look = |d: &FrameDesc, free: &mut Vec<FrameDesc>| {
            let len = d.lengths().data();
            // SAFETY: a frame the kernel handed us on the RX ring and not
            // yet on any other ring (waiting, or just taken off the RX
            // ring): nothing writes it while this borrow lives; its
            // descriptor was checked to lie within its frame
            // (`keep_valid_rx`, below or when the scan that left it
            // waiting took it), so the slice stays inside it.
            let c = unsafe { umem.data(d) }.contents();
            let took = take(&c[..len.min(c.len())]);
            if took {
                taken += 1;
                bytes += len as u64;
                free.push(*d);
            }
            took
        };
        if waiting_too {
            self.backlog.retain(|d| !look(d, free));
        }
        let mut descs = [FrameDesc::default(); BATCH];
        let mut left = self.ring.nb_avail_exact() as usize;
        while left > 0 {
            let want = left.min(BATCH);
            // SAFETY: `descs` are scratch descriptors that `consume`
            // overwrites; the frames they then name belong to this
            // socket's UMEM.
            let n = unsafe { self.ring.consume(&mut descs[..want]) };
            if n == 0 {
                break;
            }
            left -= n;
            // Frames dropped for a bad descriptor are handed on too (the
            // move's drain waits for `consumed` to reach `end_now`).
            let valid = keep_valid_rx(&mut descs[..n], umem_len, free, self.counters);
            bad += (n - valid) as u64;
            for d in &descs[..valid] {
                if !look(d, free) {
                    self.backlog.push_back(*d);
                }
            }
        }
        *self.consumed += taken + bad;
        counters::add(&self.counters.rx_packets, taken + bad);
        counters::add(&self.counters.rx_bytes, bytes);
        *self.consumed + self.backlog.len() as u64
    }
}

/// A worker's RX ring as a move's drain reads it: [`RxProgress`], or
/// [`NoRing`] for a worker without a queue (and tests).
pub(crate) trait RingAhead {
    /// [`RxProgress::consumed`].
    fn consumed(&self) -> u64;
    /// [`RxProgress::end_now`].
    fn end_now(&mut self) -> u64;
    /// [`RxProgress::scan_ahead`].
    fn scan_ahead(&mut self, waiting_too: bool, take: &mut dyn FnMut(&[u8]) -> bool) -> u64;
}

impl RingAhead for RxProgress<'_> {
    fn consumed(&self) -> u64 {
        RxProgress::consumed(self)
    }
    fn end_now(&mut self) -> u64 {
        RxProgress::end_now(self)
    }
    fn scan_ahead(&mut self, waiting_too: bool, take: &mut dyn FnMut(&[u8]) -> bool) -> u64 {
        RxProgress::scan_ahead(self, waiting_too, take)
    }
}

/// No RX ring: nothing received, nothing ahead.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoRing;

impl RingAhead for NoRing {
    fn consumed(&self) -> u64 {
        0
    }
    fn end_now(&mut self) -> u64 {
        0
    }
    fn scan_ahead(&mut self, _waiting_too: bool, _take: &mut dyn FnMut(&[u8]) -> bool) -> u64 {
        0
    }
}

/// Moves up to `descs.len()` frames that a scan left waiting into `descs`,
/// oldest first; returns how many.
fn take_backlog(backlog: &mut VecDeque<FrameDesc>, descs: &mut [FrameDesc]) -> usize {
    let n = backlog.len().min(descs.len());
    for (d, b) in descs.iter_mut().zip(backlog.drain(..n)) {
        *d = b;
    }
    n
}

impl std::fmt::Debug for TxBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxBatch")
            .field("free", &self.free.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl<'a> TxBatch<'a> {
    /// The batch of one of a worker's passes: its socket's UMEM and RX
    /// ring, and the worker's lists of frames.
    #[inline]
    fn of(
        sock: &'a mut QueueSocket,
        free: &'a mut Vec<FrameDesc>,
        pending: &'a mut Vec<FrameDesc>,
        rx_consumed: &'a mut u64,
        backlog: &'a mut VecDeque<FrameDesc>,
        counters: &'a QueueCounters,
        held: &'a mut HeldFrames,
    ) -> TxBatch<'a> {
        TxBatch {
            umem: &sock.umem,
            free,
            pending,
            rx_consumed,
            rx: &mut sock.rx,
            backlog,
            counters,
            held,
            umem_len: sock.umem_len,
        }
    }
}

impl TxBatch<'_> {
    /// Builds one frame in a free UMEM frame: `build` gets the frame's
    /// buffer and returns the frame length, or `None` to give it back (as
    /// is a length of 0 or one beyond the buffer: nothing is sent).
    /// Returns whether a frame was queued: false when no frame is free (the
    /// caller retries later) or `build` gave it back.
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
        match tx_len(build(data.contents_mut()), cap) {
            Some(len) => {
                data.cursor().set_pos(len);
                self.pending.push(desc);
                true
            }
            None => {
                self.free.push(desc);
                false
            }
        }
    }

    /// Frames available to [`send_with`](Self::send_with).
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// The RX ring's progress (read live) beside the queue's held frames.
    pub fn rx_progress(&mut self) -> (RxProgress<'_>, &HeldFrames) {
        (
            RxProgress {
                consumed: &mut *self.rx_consumed,
                ring: &mut *self.rx,
                umem: self.umem,
                backlog: &mut *self.backlog,
                free: &mut *self.free,
                counters: self.counters,
                umem_len: self.umem_len,
            },
            self.held,
        )
    }

    /// The queue's held frames (see [`HeldFrames`]).
    pub fn held(&self) -> &HeldFrames {
        self.held
    }

    /// The queue's held frames, to release some.
    pub fn held_mut(&mut self) -> &mut HeldFrames {
        self.held
    }
}

/// The length a frame built by [`TxBatch::send_with`] goes on the TX ring
/// with: what `build` returned (`built`) if it is not 0 and fits the
/// frame's `cap` bytes, else `None` (the frame goes back to the free list).
/// The kernel takes a zero-length descriptor off the TX ring as invalid and
/// never completes it: its frame would be lost, and the TX side would wait
/// for it for good.
fn tx_len(built: Option<usize>, cap: usize) -> Option<usize> {
    built.filter(|&len| len > 0 && len <= cap)
}

/// The frames a queue's handler keeps past [`QueueHandler::on_rx_frame`]
/// (zero-copy receive: the TCP stack leaves received payload in them until
/// the application has read it), by slot. A frame is kept by
/// [`RxFrame::keep`] and given back by [`HeldFrames::release`]; the worker
/// puts released frames back on the fill ring. At most
/// [`HeldFrames::capacity`] are held: beyond that [`RxFrame::slot`] is
/// `None` and the handler must copy what it keeps.
pub struct HeldFrames {
    umem: Umem,
    slots: SlotTable<FrameDesc>,
}

impl std::fmt::Debug for HeldFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldFrames")
            .field("capacity", &self.capacity())
            .field("held", &self.held())
            .finish()
    }
}

impl HeldFrames {
    fn new(umem: &Umem, capacity: usize) -> HeldFrames {
        HeldFrames {
            umem: umem.clone(),
            slots: SlotTable::new(capacity),
        }
    }

    /// The received bytes of the frame in `slot`, if the slot holds one
    /// (kept, or the one being handed to `on_rx_frame`); empty otherwise.
    pub fn frame(&self, slot: u32) -> &[u8] {
        match self.slots.occupant(slot) {
            Some(desc) => {
                // SAFETY: a non-vacant slot's frame is off every ring: it
                // came off the RX ring and goes back to the fill ring only
                // once released (`take_released`), so the kernel does not
                // write it; and no `&mut` to it exists while `&self` is
                // borrowed (`RxFrame::with_buffer_mut` borrows the `RxFrame`,
                // and with it this table, mutably). Its descriptor was
                // checked to lie within its frame before it was admitted
                // (`keep_valid_rx`), so the slice stays inside the frame.
                unsafe { self.umem.data(desc) }.contents()
            }
            None => &[],
        }
    }

    /// Gives the frame in `slot` back (its last byte was read, or its
    /// connection went): the worker refills the fill ring with it. A slot
    /// that holds no kept frame is ignored: a vacant one, one released
    /// already, and the frame being handed to `on_rx_frame` if it was not
    /// kept (the worker frees that one after the call whatever is said
    /// here).
    pub fn release(&mut self, slot: u32) {
        self.slots.release(slot);
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.slots.held
    }

    /// The most frames held at once.
    pub fn capacity(&self) -> usize {
        self.slots.slots.len()
    }

    /// Registers the frame about to be handed to `on_rx_frame`: its slot,
    /// if one is vacant.
    fn admit(&mut self, desc: FrameDesc) -> Option<u32> {
        self.slots.admit(desc)
    }

    /// After `on_rx_frame`: whether the frame in `slot` stays held (kept
    /// and not already released). A frame not kept leaves its slot.
    fn settle(&mut self, slot: u32) -> bool {
        self.slots.settle(slot)
    }

    /// Moves the released frames to `free`.
    fn take_released(&mut self, free: &mut Vec<FrameDesc>) {
        self.slots.take_released(free);
    }
}

/// The slots of [`HeldFrames`] and their states, over any descriptor: a
/// [`FrameDesc`] in the worker, a plain number in the tests.
struct SlotTable<D> {
    slots: Vec<HeldSlot<D>>,
    vacant: Vec<u32>,
    released: Vec<D>,
    held: usize,
    /// The slot of the frame being handed to `on_rx_frame`.
    current: Option<u32>,
}

#[derive(Clone, Copy)]
struct HeldSlot<D> {
    desc: D,
    state: SlotState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Vacant,
    /// The frame being handed to `on_rx_frame` now.
    Current,
    /// Kept (by `RxFrame::keep`) and not released yet.
    Held,
    /// Kept and released again before `on_rx_frame` returned: the worker
    /// frees it as a frame nobody kept.
    Released,
}

impl<D: Copy + Default> SlotTable<D> {
    fn new(capacity: usize) -> SlotTable<D> {
        SlotTable {
            slots: vec![
                HeldSlot {
                    desc: D::default(),
                    state: SlotState::Vacant,
                };
                capacity
            ],
            vacant: (0..capacity as u32).rev().collect(),
            released: Vec::with_capacity(capacity),
            held: 0,
            current: None,
        }
    }

    /// The descriptor in `slot` if it is kept or being handed to
    /// `on_rx_frame` ([`HeldFrames::frame`]).
    fn occupant(&self, slot: u32) -> Option<&D> {
        match self.slots.get(slot as usize) {
            Some(s) if matches!(s.state, SlotState::Current | SlotState::Held) => Some(&s.desc),
            _ => None,
        }
    }

    /// [`HeldFrames::release`].
    fn release(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.state != SlotState::Held {
            return;
        }
        self.held -= 1;
        if self.current == Some(slot) {
            // Kept and read within the same `on_rx_frame`: the worker
            // settles it (`settle`) as a frame nobody kept.
            s.state = SlotState::Released;
        } else {
            s.state = SlotState::Vacant;
            self.released.push(s.desc);
            self.vacant.push(slot);
        }
    }

    /// [`RxFrame::keep`] of the frame in `slot` (the one being handed to
    /// `on_rx_frame`; a second keep is a no-op).
    fn keep(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.state == SlotState::Current {
            s.state = SlotState::Held;
            self.held += 1;
        }
    }

    /// [`HeldFrames::admit`].
    fn admit(&mut self, desc: D) -> Option<u32> {
        let slot = self.vacant.pop()?;
        self.slots[slot as usize] = HeldSlot {
            desc,
            state: SlotState::Current,
        };
        self.current = Some(slot);
        Some(slot)
    }

    /// [`HeldFrames::settle`].
    fn settle(&mut self, slot: u32) -> bool {
        self.current = None;
        let s = &mut self.slots[slot as usize];
        if s.state == SlotState::Held {
            return true;
        }
        s.state = SlotState::Vacant;
        self.vacant.push(slot);
        false
    }

    /// [`HeldFrames::take_released`].
    fn take_released(&mut self, free: &mut Vec<D>) {
        free.append(&mut self.released);
    }
}

/// One received frame, handed to [`QueueHandler::on_rx_frame`] with the
/// queue's [`HeldFrames`].
pub struct RxFrame<'a> {
    umem: &'a Umem,
    desc: &'a mut FrameDesc,
    len: usize,
    slot: Option<u32>,
    held: &'a mut HeldFrames,
}

impl std::fmt::Debug for RxFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxFrame")
            .field("len", &self.len)
            .field("slot", &self.slot)
            .finish()
    }
}

impl RxFrame<'_> {
    /// The received length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The received bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the kernel handed this frame to us on the RX ring; until
        // it is on the fill or TX ring nothing else writes it, and no `&mut`
        // to it exists while `&self` is borrowed (`with_buffer_mut` takes
        // `&mut self`). The worker checked its descriptor to lie within
        // its frame (`keep_valid_rx`) before handing it on.
        let d = unsafe { self.umem.data(self.desc) };
        let c = d.contents();
        &c[..self.len.min(c.len())]
    }

    /// Runs `f` on the whole frame buffer, for a reply written in place
    /// ([`RxAction::Transmit`]).
    pub fn with_buffer_mut<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        // SAFETY: as in `data`; `&mut self` excludes every other borrow of
        // this frame, including through the held frames (`held`).
        let mut data = unsafe { self.umem.data_mut(self.desc) };
        let mut cursor = data.cursor();
        let cap = cursor.buf_len();
        cursor.set_pos(cap);
        f(data.contents_mut())
    }

    /// The slot this frame can be kept in ([`RxFrame::keep`]), or `None`
    /// when the queue holds as many frames as it may.
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Keeps the frame past this call, in its slot, until
    /// [`HeldFrames::release`] (no-op without a slot). A kept frame is not
    /// sent: if it is still held when `on_rx_frame` returns, the
    /// [`RxAction`] returned is ignored ([`RxAction::Transmit`] included).
    pub fn keep(&mut self) {
        if let Some(slot) = self.slot {
            self.held.slots.keep(slot);
        }
    }

    /// The queue's held frames, this one included while it has a slot.
    pub fn held(&self) -> &HeldFrames {
        self.held
    }

    /// The queue's held frames, to release some.
    pub fn held_mut(&mut self) -> &mut HeldFrames {
        self.held
    }
}

/// The application side of a queue, called on the queue's own core.
pub trait QueueHandler: Send {
    /// One received Ethernet frame: `buf` is the whole frame buffer and
    /// `len` the received length. Replies may be written in place.
    fn on_rx(&mut self, queue: &QueueInfo, now: Duration, buf: &mut [u8], len: usize) -> RxAction;

    /// The frame after the one [`QueueHandler::on_rx_frame`] is about to
    /// take, when the batch has one, and the frame after that, when it has
    /// one too: a chance to prefetch what they will need while the current
    /// one is processed (what `next` reads first, and what must be read to
    /// find that for `after`). The default does nothing.
    fn prefetch(&mut self, _next: &[u8], _after: Option<&[u8]>) {}

    /// One received frame, which the handler may keep past the call
    /// ([`RxFrame::keep`]). The worker calls this one; the default passes
    /// the frame to [`QueueHandler::on_rx`].
    fn on_rx_frame(&mut self, queue: &QueueInfo, now: Duration, mut rx: RxFrame<'_>) -> RxAction {
        let len = rx.len();
        rx.with_buffer_mut(|buf| self.on_rx(queue, now, buf, len))
    }

    /// How many frames the worker takes off the RX ring, asked after each
    /// batch of [`BATCH`], before it calls [`QueueHandler::on_poll`]
    /// (bounded to [`BATCH`]..=[`RX_BUDGET_MAX`]; the pass ends earlier
    /// when the ring runs dry). The default is [`RX_BUDGET`].
    fn rx_budget(&self) -> usize {
        RX_BUDGET
    }

    /// Called once per loop iteration after the RX batch: timers and
    /// transmissions that are not in-place replies.
    fn on_poll(&mut self, _queue: &QueueInfo, _now: Duration, _tx: &mut TxBatch<'_>) {}

    /// The earliest time the handler wants `on_poll` even with no traffic.
    fn next_wakeup(&self) -> Option<Duration> {
        None
    }

    /// A file descriptor that becomes readable when the handler has work
    /// that did not come from the socket (messages from other workers):
    /// the idle worker waits on it beside its socket. The handler reads
    /// it empty in `on_poll`.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// A second such descriptor: the one other threads wake the handler's
    /// application through ([`flowlane_app::Net::waker`]).
    fn app_wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// One pass of a worker without a queue of its own (software spill:
    /// more workers than the NIC has queues). Its frames come from the
    /// workers of the queues the NIC steers them to, and its transmissions
    /// go out through them; what the pass took in and handed out is
    /// returned for the worker's counters. The default does nothing: only
    /// handlers that can run so are started without a queue.
    fn on_spill_poll(&mut self, _queue: &QueueInfo, _now: Duration) -> SpillPass {
        SpillPass::default()
    }

    /// The worker's loop panicked (in this handler, in the application's
    /// code it calls, or in the worker's own): called once, on the
    /// worker, the panic caught. The handler drops the application,
    /// resets what it can of its connections, and answers the queue's
    /// frames without the application from then on (a TCP handler: an
    /// RST to every SYN and to every segment of a connection it no longer
    /// has), so that the queue fails closed instead of black-holing the
    /// flows the NIC steers to it. Bounded work: it must not block the
    /// worker. Returns whether it did: the worker then goes on serving
    /// the queue with it. The default cannot (false): the worker ends,
    /// as does a second panic, and its queue's frames are dropped (no
    /// socket takes them). Either way the queue is reported failed
    /// ([`crate::Dataplane::check`], [`crate::Dataplane::failed`]).
    fn fail_closed(&mut self, _queue: &QueueInfo, _now: Duration) -> bool {
        false
    }

    /// The worker was told to stop (the data path's stop, its socket
    /// alive): its loop has ended, and the handler lets go of what it
    /// holds, telling the peers (a TCP handler resets its connections),
    /// with frames put on `tx`. The worker transmits them and calls again
    /// while this returns true (more to send) and the transmission made
    /// progress, at most [`STOP_PASSES`] times: bounded, and what the TX
    /// ring does not take by then is not sent. Called after the loop, not
    /// in it: nothing of the per-frame path. The default has nothing to
    /// let go of.
    fn on_stop(&mut self, _queue: &QueueInfo, _now: Duration, _tx: &mut TxBatch<'_>) -> bool {
        false
    }

    /// [`QueueHandler::on_stop`] for a worker without a queue (software
    /// spill), called once: its frames go to the workers that carry them,
    /// which are stopping too (those already gone send none of them).
    /// Returns what it handed out, for the worker's counters.
    fn on_spill_stop(&mut self, _queue: &QueueInfo, _now: Duration) -> SpillPass {
        SpillPass::default()
    }
}

/// Most passes of a stopping worker's [`QueueHandler::on_stop`].
pub const STOP_PASSES: usize = 64;

/// What one pass of a worker without a queue moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillPass {
    /// Frames received from other workers.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Frames handed to another worker to transmit.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
}

/// How the main thread and a worker tell each other to stop.
#[derive(Debug, Clone)]
pub(crate) struct Control {
    /// Set by the main thread: leave the loop.
    pub(crate) stop: Arc<AtomicBool>,
    /// Set by the worker when it gives its socket up: the errno (0: none).
    pub(crate) failed: Arc<AtomicI32>,
    /// Set by the worker when its loop panicked: the queue failed closed
    /// ([`QueueHandler::fail_closed`]), or the worker ended.
    pub(crate) panicked: Arc<AtomicBool>,
    /// Set by the worker as each pass of its loop begins: how many began
    /// (a stop waits for a pass begun after it gave the ports back).
    pub(crate) passes: Arc<AtomicU64>,
}

/// Whether a socket error means the socket is dead: the kernel unbound it
/// (`ENXIO`: its interface went away) or the device is gone.
fn socket_dead(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENXIO | libc::ENODEV))
}

/// Tuning of the loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopConfig {
    /// Spin instead of blocking in poll(2) when idle.
    pub busy_poll: bool,
    /// Frames kept out of the fill ring for `TxBatch::send_with`.
    pub tx_reserve: usize,
    /// Most received frames the handler may keep at once
    /// ([`HeldFrames::capacity`]; 0: none, every payload is copied).
    pub held_frames: usize,
}

/// The loop of a queue's worker; `ready` is called once the fill ring
/// has its first frames.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<H: QueueHandler>(
    mut sock: QueueSocket,
    info: QueueInfo,
    mut handler: H,
    cfg: LoopConfig,
    ctl: Control,
    counters: Arc<QueueCounters>,
    epoch: Instant,
    ready: impl FnOnce(),
) {
    let mut rx_descs = vec![FrameDesc::default(); BATCH];
    let mut pending: Vec<FrameDesc> = Vec::with_capacity(sock.frames.len());
    let mut free = std::mem::take(&mut sock.frames);
    let mut tx = TxState {
        comp_descs: vec![FrameDesc::default(); BATCH],
        outstanding: 0,
    };
    let mut idle_rounds: u32 = 0;
    let mut rx_consumed: u64 = 0;
    // Frames a scan took off the RX ring ahead of the pass
    // (`RxProgress::scan_ahead`), handed on before the ring's next ones.
    let mut backlog: VecDeque<FrameDesc> = VecDeque::new();
    let mut iterations: u64 = 0;
    let mut held = HeldFrames::new(&sock.umem, cfg.held_frames);
    let mut kernel = KernelStats::default();
    let c = &*counters;
    // Frames put on the fill ring since the start: those not yet taken
    // off the RX ring are the kernel's (`frames_fill`).
    let mut filled = first_fill(&mut sock, &mut free, cfg.tx_reserve, ready) as u64;

    // The loop, run again after a panic once the queue failed closed.
    let mut serve = |handler: &mut H| {
        while !ctl.stop.load(Ordering::Relaxed) {
            iterations += 1;
            ctl.passes.store(iterations, Ordering::Release);
            let now = epoch.elapsed();
            // RX: up to the handler's budget of frames before its poll, so that
            // a connection's segments of one pass are acknowledged together;
            // each batch's frames go back to the fill ring at once.
            let (mut received, mut rx_bytes, mut dropped) = (0usize, 0u64, 0u64);
            while received < handler.rx_budget().clamp(BATCH, RX_BUDGET_MAX) {
                let from_ring = backlog.is_empty();
                // `got` taken off the ring (or the backlog), of which the first
                // `n` lie within their frames (the backlog's were checked when
                // a scan took them off the ring).
                let (got, n) = if from_ring {
                    // SAFETY: `rx_descs` are scratch descriptors that `consume`
                    // overwrites; the frames they then name belong to this
                    // socket's UMEM.
                    let got = unsafe { sock.rx.consume(&mut rx_descs) };
                    let n = keep_valid_rx(&mut rx_descs[..got], sock.umem_len, &mut free, c);
                    (got, n)
                } else {
                    let got = take_backlog(&mut backlog, &mut rx_descs);
                    (got, got)
                };
                for i in 0..n {
                    // The batch's frame `k` places after this one, if any.
                    let ahead = |k: usize| {
                        rx_descs[..n].get(i + k).map(|d| {
                            // SAFETY: as `RxFrame::data`: a frame the kernel
                            // handed us on the RX ring, not yet on any other
                            // ring, and nothing writes it while this borrow
                            // lives; among the first `n`, checked to lie
                            // within its frame.
                            let c = unsafe { sock.umem.data(d) }.contents();
                            &c[..d.lengths().data().min(c.len())]
                        })
                    };
                    if let Some(next) = ahead(1) {
                        handler.prefetch(next, ahead(2));
                    }
                    let desc = &mut rx_descs[i];
                    let len = desc.lengths().data();
                    rx_bytes += len as u64;
                    let slot = held.admit(*desc);
                    let rx = RxFrame {
                        umem: &sock.umem,
                        desc,
                        len,
                        slot,
                        held: &mut held,
                    };
                    let action = handler.on_rx_frame(&info, now, rx);
                    if slot.is_some_and(|s| held.settle(s)) {
                        // Kept: it goes back once released, and is not sent.
                        debug_assert!(
                            !matches!(action, RxAction::Transmit(n) if n > 0),
                            "on_rx_frame kept its frame and asked to transmit it"
                        );
                        continue;
                    }
                    match rx_verdict(action) {
                        RxVerdict::Send(out) => {
                            // SAFETY: the frame is still ours (not kept, on no
                            // ring); only its length is set.
                            let mut data = unsafe { sock.umem.data_mut(desc) };
                            let mut cursor = data.cursor();
                            if out <= cursor.buf_len() {
                                cursor.set_pos(out);
                                pending.push(*desc);
                            } else {
                                dropped += 1;
                                free.push(*desc);
                            }
                        }
                        RxVerdict::Free => free.push(*desc),
                        RxVerdict::Drop => {
                            dropped += 1;
                            free.push(*desc);
                        }
                    }
                }
                received += got;
                held.take_released(&mut free);
                filled += refill(&mut sock, &mut free, cfg.tx_reserve, false) as u64;
                if from_ring && got < BATCH {
                    break;
                }
            }
            counters::add(&c.rx_packets, received as u64);
            rx_consumed += received as u64;
            counters::add(&c.rx_bytes, rx_bytes);
            counters::add(&c.dropped, dropped);

            let mut batch = TxBatch::of(
                &mut sock,
                &mut free,
                &mut pending,
                &mut rx_consumed,
                &mut backlog,
                c,
                &mut held,
            );
            handler.on_poll(&info, now, &mut batch);
            held.take_released(&mut free);

            let (sent, done) = match tx.transmit(&mut sock, &mut pending, &mut free, c) {
                Ok(progress) => progress,
                Err(e) => {
                    fail(&ctl, &info, "sending", &e);
                    break;
                }
            };
            filled += refill(&mut sock, &mut free, cfg.tx_reserve, true) as u64;
            publish_frames(
                c,
                FrameCount {
                    free: free.len(),
                    fill: filled - rx_consumed - backlog.len() as u64,
                    tx: tx.outstanding + pending.len(),
                    held: held.held() + backlog.len(),
                },
            );

            if iterations % 1024 == 0 {
                kernel.publish(&sock, &info, c);
            }
            // Frames a scan left waiting are on no ring that poll(2) watches.
            if received == 0 && backlog.is_empty() && done == 0 && pending.is_empty() && sent == 0 {
                idle_rounds += 1;
                counters::add(&c.idle_polls, 1);
                if !cfg.busy_poll && idle_rounds > 16 {
                    let longest = Duration::from_millis(if tx.outstanding > 0 { 1 } else { 10 });
                    let (timeout, wakes, n) = idle_wait(&*handler, epoch, longest);
                    let wakes = &wakes[..n];
                    let waited = if timeout.is_zero() {
                        // Due now (a move under way, a timer): another pass,
                        // after letting whatever else wants this CPU run.
                        std::thread::yield_now();
                        Ok(())
                    } else if wakes.is_empty() {
                        sock.rx.poll(poll_ms(timeout)).map(|_| ())
                    } else {
                        poll_fds(sock.rx.fd().as_raw_fd(), wakes, timeout)
                    };
                    if let Err(e) = waited {
                        fail(&ctl, &info, "polling", &e);
                        break;
                    }
                }
            } else {
                idle_rounds = 0;
                let spent = epoch.elapsed().saturating_sub(now);
                counters::add(&c.busy_ns, spent.as_nanos() as u64);
            }
        }
    };
    serve_failing_closed(&mut handler, &info, &ctl, epoch, &mut serve);
    // Told to stop, its socket alive: the handler lets go of what it holds
    // and what it sends for that goes out, what the TX ring takes.
    if ctl.failed.load(Ordering::Relaxed) == 0 {
        for _ in 0..STOP_PASSES {
            let mut batch = TxBatch::of(
                &mut sock,
                &mut free,
                &mut pending,
                &mut rx_consumed,
                &mut backlog,
                c,
                &mut held,
            );
            let more = handler.on_stop(&info, epoch.elapsed(), &mut batch);
            held.take_released(&mut free);
            match tx.transmit(&mut sock, &mut pending, &mut free, c) {
                Ok((sent, done)) if more && (sent > 0 || done > 0) => {}
                _ => break,
            }
        }
    }
    kernel.publish(&sock, &info, c);
}

/// The loop of a worker without a queue (software spill): it takes the
/// frames other workers forward to it, runs its handler and hands its
/// transmissions back to them ([`QueueHandler::on_spill_poll`]); idle, it
/// sleeps on its inbox's and its application's wake-up descriptors.
pub(crate) fn run_spill<H: QueueHandler>(
    info: QueueInfo,
    mut handler: H,
    cfg: LoopConfig,
    ctl: Control,
    counters: Arc<QueueCounters>,
    epoch: Instant,
    ready: impl FnOnce(),
) {
    // No rings to fill: ready at once.
    ready();
    let c = &*counters;
    let mut idle_rounds: u32 = 0;
    let mut passes: u64 = 0;
    let mut serve = |handler: &mut H| {
        while !ctl.stop.load(Ordering::Relaxed) {
            passes += 1;
            ctl.passes.store(passes, Ordering::Release);
            let now = epoch.elapsed();
            let pass = handler.on_spill_poll(&info, now);
            // No socket of its own: the queue counters (rx, tx) count a
            // socket's frames, which its carrier counted already; what it
            // took and handed out is in the handler's spill counters.
            if pass.received > 0 || pass.sent > 0 {
                idle_rounds = 0;
                let spent = epoch.elapsed().saturating_sub(now);
                counters::add(&c.busy_ns, spent.as_nanos() as u64);
                continue;
            }
            idle_rounds += 1;
            counters::add(&c.idle_polls, 1);
            if cfg.busy_poll || idle_rounds <= 16 {
                continue;
            }
            let (timeout, wakes, n) = idle_wait(&*handler, epoch, Duration::from_millis(10));
            if timeout.is_zero() {
                std::thread::yield_now();
            } else if let Err(e) = poll_fds(-1, &wakes[..n], timeout) {
                fail(&ctl, &info, "polling", &e);
                break;
            }
        }
    };
    serve_failing_closed(&mut handler, &info, &ctl, epoch, &mut serve);
    if ctl.failed.load(Ordering::Relaxed) == 0 {
        handler.on_spill_stop(&info, epoch.elapsed());
    }
}

/// Runs a worker's loop (`serve`) until it returns. A panic in it marks
/// the queue failed (`Control::panicked`) and makes it fail closed
/// ([`QueueHandler::fail_closed`], its own panic caught too), after which
/// the loop runs again, serving the queue without the application. A
/// handler that cannot fail closed, or a second panic, ends the worker
/// as the panic would have: it unwinds on (the thread ends panicked, its
/// socket closed, and the XDP program drops the queue's frames).
///
/// What the panic interrupted is lost, bounded: the frames of the batch
/// being handed to the handler (at most [`BATCH`], never put back on the
/// fill ring) and whatever the handler was doing.
fn serve_failing_closed<H: QueueHandler>(
    handler: &mut H,
    info: &QueueInfo,
    ctl: &Control,
    epoch: Instant,
    serve: &mut impl FnMut(&mut H),
) {
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    let mut closed = false;
    loop {
        let Err(panic) = catch_unwind(AssertUnwindSafe(|| serve(handler))) else {
            return;
        };
        ctl.panicked.store(true, Ordering::Relaxed);
        if closed {
            tracing::error!(
                queue = info.queue,
                "the queue's worker panicked again while failed closed; it stops"
            );
            resume_unwind(panic);
        }
        let now = epoch.elapsed();
        closed = catch_unwind(AssertUnwindSafe(|| handler.fail_closed(info, now))).unwrap_or(false);
        if !closed {
            tracing::error!(
                queue = info.queue,
                "the queue's handler panicked ({}) and cannot fail closed; the worker stops",
                panic_message(panic.as_ref())
            );
            resume_unwind(panic);
        }
        tracing::error!(
            queue = info.queue,
            "the queue's handler panicked ({}): its connections were reset and it answers \
             every new one with a reset until the service stops",
            panic_message(panic.as_ref())
        );
    }
}

/// What a panic's `payload` says: `panic!`'s message, or a placeholder.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// How long an idle worker may sleep (at most `longest`, less when the
/// handler has something due) and the descriptors that wake it earlier
/// (the first `n` of the array).
fn idle_wait<H: QueueHandler>(
    handler: &H,
    epoch: Instant,
    longest: Duration,
) -> (Duration, [RawFd; 2], usize) {
    let mut timeout = longest;
    if let Some(at) = handler.next_wakeup() {
        timeout = timeout.min(at.saturating_sub(epoch.elapsed()));
    }
    let (mut wakes, mut n) = ([0 as RawFd; 2], 0);
    for fd in [handler.wake_fd(), handler.app_wake_fd()]
        .into_iter()
        .flatten()
    {
        wakes[n] = fd;
        n += 1;
    }
    (timeout, wakes, n)
}

/// Waits until the socket has frames or one of `wakes` is readable, at
/// most `timeout` (rounded up to a millisecond when not zero). A negative
/// `sock` (a worker without a socket) is ignored by poll(2).
fn poll_fds(sock: RawFd, wakes: &[RawFd], timeout: Duration) -> std::io::Result<()> {
    let entry = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = [entry(sock), entry(-1), entry(-1)];
    let n = 1 + wakes.len().min(2);
    for (slot, &fd) in fds[1..].iter_mut().zip(wakes) {
        *slot = entry(fd);
    }
    // SAFETY: `fds` is a live array of initialised pollfd structs and `n`
    // is at most its length; poll(2) writes only their `revents`.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, poll_ms(timeout)) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// `timeout` as poll(2)'s milliseconds, rounded up: a wait shorter than a
/// millisecond still sleeps (poll(0) would return at once, and the idle
/// worker would spin until its timer is due).
fn poll_ms(timeout: Duration) -> i32 {
    timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
}

/// Records why the worker gives its socket up and says so once.
fn fail(ctl: &Control, info: &QueueInfo, what: &str, e: &std::io::Error) {
    tracing::debug!(
        queue = info.queue,
        "{what} on the AF_XDP socket: {e}; the worker stops"
    );
    ctl.failed
        .store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Relaxed);
}

/// Frames received per loop pass before the handler's `on_poll` (which
/// sends the ACKs), unless the handler asks for more
/// ([`QueueHandler::rx_budget`]). A connection's segments of one pass cost
/// one ACK, so with many connections on a queue a pass this size holds
/// few segments of each (at 256 connections on the test bed, an ACK per 7
/// to 8 segments).
pub const RX_BUDGET: usize = 4 * BATCH;

/// The most frames one pass takes, whatever the handler asks: about a
/// millisecond of work, the order of Linux's own softirq budget
/// (`netdev_budget_usecs`, 2 ms), before timers, the application's tick
/// and the ACKs get their turn. A pass also ends when the ring runs dry (a
/// batch short of [`BATCH`]), so a lightly loaded queue acknowledges at
/// once.
pub const RX_BUDGET_MAX: usize = 32 * BATCH;

/// Most TX wake-ups per loop pass (copy mode moves at most 32 frames per
/// wake-up): enough to drain a full pass of replies, bounded so that RX
/// gets its turn.
const MAX_KICKS: usize = 64;

/// The TX side of the loop: frames on the TX ring not yet completed.
struct TxState {
    comp_descs: Vec<FrameDesc>,
    outstanding: usize,
}

impl TxState {
    /// Moves `pending` frames onto the TX ring (as many as fit), wakes the
    /// kernel and takes completed frames back to `free`. In copy mode the
    /// kernel sends only inside a wake-up, at most 32 frames each (and on
    /// veth the frames complete inside it), so this repeats until the ring
    /// and `pending` are empty or a wake-up makes no progress: frames parked
    /// on the TX ring are frames the fill ring lacks, and ACKs parked there
    /// are late. Returns (frames put on the ring, frames completed), or the
    /// error of a dead socket (see [`socket_dead`]).
    fn transmit(
        &mut self,
        sock: &mut QueueSocket,
        pending: &mut Vec<FrameDesc>,
        free: &mut Vec<FrameDesc>,
        c: &QueueCounters,
    ) -> std::io::Result<(usize, usize)> {
        let (mut sent, mut done) = (0, 0);
        for _ in 0..MAX_KICKS {
            let put = produce_tx(sock, pending, c);
            sent += put;
            self.outstanding += put;
            if self.outstanding > 0 && sock.tx.needs_wakeup() {
                counters::add(&c.tx_kicks, 1);
                // EAGAIN/ENOBUFS while frames are pending is normal.
                if let Err(e) = sock.tx.wakeup() {
                    if socket_dead(&e) {
                        return Err(e);
                    }
                    tracing::debug!(queue = sock.queue, "tx wakeup: {e}");
                }
            }
            let mut n = 0;
            loop {
                // SAFETY: scratch descriptors overwritten by `consume`; the
                // frames they name are ours again.
                let k = unsafe { sock.comp.consume(&mut self.comp_descs) };
                free.extend_from_slice(&self.comp_descs[..k]);
                n += k;
                if k < self.comp_descs.len() {
                    break;
                }
            }
            self.outstanding -= n.min(self.outstanding);
            done += n;
            if sock.zero_copy || (put == 0 && n == 0) {
                // Zero copy: the driver sends without us. Copy mode: no
                // progress (the kernel's queue is busy); retry next pass.
                break;
            }
            if pending.is_empty() && self.outstanding == 0 {
                break;
            }
        }
        if self.outstanding as u64 > c.tx_outstanding_max.load(Ordering::Relaxed) {
            counters::set(&c.tx_outstanding_max, self.outstanding as u64);
        }
        Ok((sent, done))
    }
}

/// Puts as many `pending` frames on the TX ring as it has room for (the
/// ring takes a batch whole or not at all, so the batch is cut to the room).
fn produce_tx(sock: &mut QueueSocket, pending: &mut Vec<FrameDesc>, c: &QueueCounters) -> usize {
    if pending.is_empty() {
        return 0;
    }
    let room = sock.tx.nb_free(pending.len() as u32) as usize;
    let k = room.min(pending.len());
    if k < pending.len() {
        counters::add(&c.tx_ring_full, 1);
    }
    if k == 0 {
        return 0;
    }
    // SAFETY: every pending frame is owned by this worker (received or taken
    // from the free list) and belongs to this socket's UMEM; `k` is within
    // the ring's free room, so the batch is taken whole.
    let sent = unsafe { sock.tx.produce(&pending[..k]) };
    let bytes: usize = pending[..sent].iter().map(|d| d.lengths().data()).sum();
    counters::add(&c.tx_packets, sent as u64);
    counters::add(&c.tx_bytes, bytes as u64);
    pending.drain(..sent);
    sent
}

/// What [`refill`] needs of a fill ring (a queue's socket; a fake in the
/// tests).
trait FillRing {
    /// Free slots on the ring, at least `want` if it has them (the ring's
    /// cached count: `nb_free`).
    fn room(&mut self, want: u32) -> u32;
    /// Puts `descs` on the ring, all of them or none; returns how many.
    ///
    /// # Safety
    ///
    /// Every frame of `descs` is free (owned by no ring, not borrowed) and
    /// belongs to the ring's UMEM.
    unsafe fn produce(&mut self, descs: &[FrameDesc]) -> usize;
    /// Whether the kernel asks to be woken to take frames from the ring
    /// (the ring's need_wakeup flag: a load, no syscall).
    fn needs_wakeup(&self) -> bool;
    /// Wakes the kernel (a syscall).
    fn wakeup(&mut self);
}

impl FillRing for QueueSocket {
    fn room(&mut self, want: u32) -> u32 {
        self.fill.nb_free(want)
    }

    unsafe fn produce(&mut self, descs: &[FrameDesc]) -> usize {
        // SAFETY: the caller guarantees this method's contract, which is
        // `FillQueue::produce`'s: the frames are free and of this UMEM.
        unsafe { self.fill.produce(descs) }
    }

    fn needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    fn wakeup(&mut self) {
        let _ = self.fill.wakeup(self.rx.fd_mut(), 0);
    }
}

/// Puts free frames beyond the TX reserve on the fill ring; `wake`: also
/// wake the kernel if it asks for it (a syscall: once per loop pass). The
/// flag is read whether or not this call put frames on the ring: the
/// pass's RX batches refill without waking, so the pass's last call
/// often has nothing left to put there, and a driver that ran dry and
/// asked to be woken meanwhile would wait for good under busy polling
/// (no poll(2) to wake it). Returns how many frames it put on the ring.
fn refill(
    ring: &mut impl FillRing,
    free: &mut Vec<FrameDesc>,
    reserve: usize,
    wake: bool,
) -> usize {
    let want = free.len().saturating_sub(reserve);
    let mut produced = 0;
    if want > 0 {
        let room = ring.room(want as u32) as usize;
        let k = want.min(room);
        if k > 0 {
            let start = free.len() - k;
            // SAFETY: the frames are free (owned by no ring) and belong to
            // this socket's UMEM.
            produced = unsafe { ring.produce(&free[start..]) };
            free.truncate(free.len() - produced);
        }
    }
    if wake && ring.needs_wakeup() {
        ring.wakeup();
    }
    produced
}

/// Where a queue's frames are at the end of a worker's pass: the
/// `frames_*` gauges of its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FrameCount {
    /// On the worker's free list.
    free: usize,
    /// Put on the fill ring and not yet taken off the RX ring.
    fill: u64,
    /// Queued for the TX ring or on it, not yet completed.
    tx: usize,
    /// Kept by the handler, or left waiting by a scan.
    held: usize,
}

/// Sets the queue's `frames_*` gauges to `n`.
fn publish_frames(c: &QueueCounters, n: FrameCount) {
    counters::set(&c.frames_free, n.free as u64);
    counters::set(&c.frames_fill, n.fill);
    counters::set(&c.frames_tx, n.tx as u64);
    counters::set(&c.frames_held, n.held as u64);
}

/// The loop's first fill-ring refill, then `ready` (the start waits for
/// every worker's): once [`Dataplane::start`](crate::Dataplane::start)
/// returns, every queue's fill ring holds its frames and arriving frames
/// find buffers. Returns how many frames it put on the ring.
fn first_fill(
    ring: &mut impl FillRing,
    free: &mut Vec<FrameDesc>,
    reserve: usize,
    ready: impl FnOnce(),
) -> usize {
    let produced = refill(ring, free, reserve, true);
    ready();
    produced
}

/// The worker's copy of the kernel's socket statistics
/// (`XDP_STATISTICS`), published into the queue's counters.
#[derive(Debug, Default)]
struct KernelStats {
    /// The kernel's invalid descriptors (RX and TX) at the last reading:
    /// `invalid_descs` also counts the worker's own (received descriptors
    /// past their frame, [`keep_valid_rx`]), so the kernel's are added as
    /// they grow instead of set.
    invalid_seen: u64,
    /// Whether a failed reading was said already.
    warned: bool,
}

impl KernelStats {
    /// Reads the socket's statistics into `c`; a reading that fails is
    /// said once (at warn level) and the kernel's counters keep their
    /// last values.
    fn publish(&mut self, sock: &QueueSocket, info: &QueueInfo, c: &QueueCounters) {
        match sock.rx.fd().xdp_statistics() {
            Ok(s) => {
                counters::set(&c.rx_ring_full, s.rx_ring_full());
                counters::set(&c.fill_ring_empty, s.rx_fill_ring_empty_descs());
                counters::set(&c.rx_dropped, s.rx_dropped());
                let invalid = s.rx_invalid_descs() + s.tx_invalid_descs();
                counters::add(&c.invalid_descs, invalid.saturating_sub(self.invalid_seen));
                self.invalid_seen = self.invalid_seen.max(invalid);
            }
            Err(e) => {
                if let Some(line) = self.failed(info.queue, &e) {
                    tracing::warn!(queue = info.queue, "{line}");
                }
            }
        }
    }

    /// The line to say for a failed reading: the first time only.
    fn failed(&mut self, queue: u32, e: &std::io::Error) -> Option<String> {
        if std::mem::replace(&mut self.warned, true) {
            return None;
        }
        Some(format!(
            "reading the kernel's AF_XDP statistics of queue {queue} failed ({e}): its \
             kernel drop counters (rx_ring_full, fill_ring_empty, rx_dropped, invalid_descs) \
             are not updated; kernels before 5.9 give fewer statistics than xsk-rs reads: \
             run on 5.9 or later for them"
        ))
    }
}

/// What the worker does with a received frame the handler did not keep,
/// by the handler's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxVerdict {
    /// Send it with this length (dropped and counted if past the frame).
    Send(usize),
    /// Back to the fill ring, counted nowhere (the handler did its own
    /// counting).
    Free,
    /// Back to the fill ring, counted in the queue's `dropped`.
    Drop,
}

/// [`RxVerdict`] of `action`.
#[inline]
pub(crate) fn rx_verdict(action: RxAction) -> RxVerdict {
    match action {
        RxAction::Transmit(out) if out > 0 => RxVerdict::Send(out),
        RxAction::Consumed => RxVerdict::Free,
        RxAction::Drop | RxAction::Transmit(_) => RxVerdict::Drop,
    }
}

/// Whether a received descriptor lies within its frame: its address
/// inside the UMEM (`umem_len` bytes) and its `len` bytes inside the
/// frame the address falls in. The address is one the fill ring gave the
/// kernel, but the length is the driver's word (zero-copy), and xsk-rs
/// makes the frame's slice from it unchecked: a length past the frame
/// would make a slice into the next frame, or past the UMEM.
#[inline]
fn rx_desc_fits(addr: usize, len: usize, umem_len: usize) -> bool {
    const FRAME: usize = FRAME_SIZE as usize;
    // `&`, not `&&`: no branch.
    (addr < umem_len) & (addr % FRAME + len <= FRAME)
}

/// Keeps, in order at the front of `descs`, the received descriptors that
/// lie within their frames ([`rx_desc_fits`]) and returns how many. The
/// others are dropped: counted in `invalid_descs`, and their frame back to
/// `free` when the address is the UMEM's (one past it names no frame of
/// ours). Per frame a few arithmetic operations, no branch; one branch per
/// batch.
#[inline]
fn keep_valid_rx(
    descs: &mut [FrameDesc],
    umem_len: usize,
    free: &mut Vec<FrameDesc>,
    c: &QueueCounters,
) -> usize {
    let fits = |d: &FrameDesc| rx_desc_fits(d.addr(), d.lengths().data(), umem_len);
    let kept = keep_fitting(descs, fits, |d| {
        if d.addr() < umem_len {
            free.push(d);
        }
    });
    if kept < descs.len() {
        counters::add(&c.invalid_descs, (descs.len() - kept) as u64);
    }
    kept
}

/// [`keep_valid_rx`] over any descriptor: whether every one `fits` in a
/// pass without a branch per descriptor; only if one does not, a second
/// pass moves those that do, in order, to the front and gives the others
/// to `reject`. Returns how many fit.
#[inline]
fn keep_fitting<D: Copy>(
    descs: &mut [D],
    fits: impl Fn(&D) -> bool,
    reject: impl FnMut(D),
) -> usize {
    if descs.iter().fold(true, |all, d| all & fits(d)) {
        return descs.len();
    }
    sift(descs, fits, reject)
}

/// The second pass of [`keep_fitting`].
#[cold]
#[inline(never)]
fn sift<D: Copy>(descs: &mut [D], fits: impl Fn(&D) -> bool, mut reject: impl FnMut(D)) -> usize {
    let mut kept = 0;
    for i in 0..descs.len() {
        let d = descs[i];
        if fits(&d) {
            descs[kept] = d;
            kept += 1;
        } else {
            reject(d);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fill ring that counts: `room` free slots, the need_wakeup flag as
    /// set, and the frames put on it and the wake-ups asked for.
    #[derive(Default)]
    struct FakeFill {
        room: u32,
        need_wakeup: bool,
        produced: usize,
        wakeups: usize,
    }

    impl FillRing for FakeFill {
        fn room(&mut self, _want: u32) -> u32 {
            self.room
        }

        unsafe fn produce(&mut self, descs: &[FrameDesc]) -> usize {
            let n = descs.len();
            if n > self.room as usize {
                return 0;
            }
            self.room -= n as u32;
            self.produced += n;
            n
        }

        fn needs_wakeup(&self) -> bool {
            self.need_wakeup
        }

        fn wakeup(&mut self) {
            self.wakeups += 1;
        }
    }

    fn frames(n: usize) -> Vec<FrameDesc> {
        vec![FrameDesc::default(); n]
    }

    #[test]
    fn refill_puts_frames_beyond_the_reserve_and_wakes_when_asked() {
        let mut ring = FakeFill {
            room: 100,
            need_wakeup: true,
            ..FakeFill::default()
        };
        let mut free = frames(10);
        refill(&mut ring, &mut free, 4, true);
        assert_eq!((ring.produced, free.len(), ring.wakeups), (6, 4, 1));
    }

    #[test]
    fn refill_wakes_a_ring_asking_for_it_with_nothing_to_put() {
        // The pass's RX batches refilled the ring already (without waking):
        // only the reserve is left free.
        let mut ring = FakeFill {
            room: 100,
            need_wakeup: true,
            ..FakeFill::default()
        };
        let mut free = frames(4);
        refill(&mut ring, &mut free, 4, true);
        assert_eq!((ring.produced, free.len(), ring.wakeups), (0, 4, 1));
        // Fewer free frames than the reserve.
        refill(&mut ring, &mut frames(1), 4, true);
        assert_eq!(ring.wakeups, 2);
    }

    #[test]
    fn refill_wakes_a_full_ring_asking_for_it() {
        let mut ring = FakeFill {
            room: 0,
            need_wakeup: true,
            ..FakeFill::default()
        };
        let mut free = frames(8);
        refill(&mut ring, &mut free, 4, true);
        assert_eq!((ring.produced, free.len(), ring.wakeups), (0, 8, 1));
    }

    #[test]
    fn refill_wakes_only_when_told_and_asked() {
        for (wake, need_wakeup) in [(false, true), (true, false), (false, false)] {
            for n in [2, 4, 10] {
                let mut ring = FakeFill {
                    room: 100,
                    need_wakeup,
                    ..FakeFill::default()
                };
                refill(&mut ring, &mut frames(n), 4, wake);
                assert_eq!(
                    ring.wakeups, 0,
                    "wake {wake}, need_wakeup {need_wakeup}, {n} free"
                );
            }
        }
    }

    #[test]
    fn ready_is_said_once_the_fill_ring_has_its_frames() {
        use std::cell::RefCell;
        use std::rc::Rc;
        /// A fill ring that logs what is done to it.
        struct Logged(Rc<RefCell<Vec<String>>>);
        impl FillRing for Logged {
            fn room(&mut self, want: u32) -> u32 {
                want
            }
            unsafe fn produce(&mut self, descs: &[FrameDesc]) -> usize {
                self.0.borrow_mut().push(format!("fill {}", descs.len()));
                descs.len()
            }
            fn needs_wakeup(&self) -> bool {
                true
            }
            fn wakeup(&mut self) {
                self.0.borrow_mut().push("wake".into());
            }
        }
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut free = frames(10);
        let said = log.clone();
        first_fill(&mut Logged(log.clone()), &mut free, 4, move || {
            said.borrow_mut().push("ready".into())
        });
        assert_eq!(*log.borrow(), ["fill 6", "wake", "ready"]);
        assert_eq!(free.len(), 4);
    }

    #[test]
    fn a_received_descriptor_must_lie_within_its_frame() {
        const F: usize = FRAME_SIZE as usize;
        let umem = 4 * F;
        // Where the UMEM puts packets (after the XDP headroom), and where
        // an XDP program may move them.
        for addr in [256, F + 256, 3 * F + 256, 2 * F, 2 * F + 100] {
            let room = F - addr % F;
            assert!(rx_desc_fits(addr, 0, umem), "{addr}");
            assert!(rx_desc_fits(addr, 60, umem), "{addr}");
            assert!(rx_desc_fits(addr, room, umem), "{addr}");
            assert!(!rx_desc_fits(addr, room + 1, umem), "{addr}");
        }
        // A 1514-byte frame after the 256-byte headroom fits; a jumbo
        // length does not, nor anything past the UMEM.
        assert!(rx_desc_fits(256, 1514, umem));
        assert!(!rx_desc_fits(256, 9000, umem));
        assert!(!rx_desc_fits(3 * F + 256, F, umem));
        assert!(!rx_desc_fits(umem, 0, umem));
        assert!(!rx_desc_fits(umem + 256, 60, umem));
        assert!(!rx_desc_fits(usize::MAX, 60, umem));
        assert!(!rx_desc_fits(256, u32::MAX as usize, umem));
    }

    #[test]
    fn descriptors_past_their_frame_are_dropped_and_the_rest_kept_in_order() {
        const F: usize = FRAME_SIZE as usize;
        let umem = 8 * F;
        let fits = |d: &(usize, usize)| rx_desc_fits(d.0, d.1, umem);
        // All good: kept as they are.
        let mut descs = [(256, 60), (F + 256, 1514), (2 * F + 256, 0)];
        let all = descs;
        let mut rejected = Vec::new();
        assert_eq!(keep_fitting(&mut descs, fits, |d| rejected.push(d)), 3);
        assert_eq!((descs, rejected.len()), (all, 0));
        // A length past its frame, and an address past the UMEM.
        let mut descs = [
            (256, 60),
            (F + 256, 4000),
            (2 * F + 256, 100),
            (umem + 256, 60),
            (3 * F + 256, 70),
        ];
        let kept = keep_fitting(&mut descs, fits, |d| rejected.push(d));
        assert_eq!(kept, 3);
        assert_eq!(
            &descs[..kept],
            &[(256, 60), (2 * F + 256, 100), (3 * F + 256, 70)]
        );
        assert_eq!(rejected, [(F + 256, 4000), (umem + 256, 60)]);
        // None good.
        let mut descs = [(umem, 1), (256, F)];
        rejected.clear();
        assert_eq!(keep_fitting(&mut descs, fits, |d| rejected.push(d)), 0);
        assert_eq!(rejected.len(), 2);
        assert_eq!(keep_fitting(&mut [], fits, |d| rejected.push(d)), 0);
    }

    #[test]
    fn only_a_drop_nobody_counted_is_the_worker_s() {
        assert_eq!(rx_verdict(RxAction::Consumed), RxVerdict::Free);
        assert_eq!(rx_verdict(RxAction::Drop), RxVerdict::Drop);
        assert_eq!(rx_verdict(RxAction::Transmit(0)), RxVerdict::Drop);
        assert_eq!(rx_verdict(RxAction::Transmit(60)), RxVerdict::Send(60));
    }

    #[test]
    fn a_failed_statistics_reading_is_said_once() {
        let mut k = KernelStats::default();
        let e = std::io::Error::other("`optlen` returned from `getsockopt` does not match");
        let line = k.failed(3, &e).expect("the first failure is said");
        assert_eq!(line.lines().count(), 1, "{line}");
        for needle in ["queue 3", "optlen", "5.9", "fill_ring_empty"] {
            assert!(line.contains(needle), "{needle:?} in {line}");
        }
        assert_eq!(k.failed(3, &e), None);
        assert_eq!(k.failed(3, &e), None);
    }

    #[test]
    fn tx_len_refuses_empty_and_oversized_frames() {
        assert_eq!(tx_len(Some(60), 2048), Some(60));
        assert_eq!(tx_len(Some(2048), 2048), Some(2048));
        assert_eq!(tx_len(Some(0), 2048), None);
        assert_eq!(tx_len(Some(2049), 2048), None);
        assert_eq!(tx_len(None, 2048), None);
    }

    #[test]
    fn poll_ms_rounds_up() {
        assert_eq!(poll_ms(Duration::ZERO), 0);
        assert_eq!(poll_ms(Duration::from_micros(300)), 1);
        assert_eq!(poll_ms(Duration::from_millis(1)), 1);
        assert_eq!(poll_ms(Duration::from_nanos(1_000_001)), 2);
        assert_eq!(poll_ms(Duration::from_millis(10)), 10);
        assert_eq!(poll_ms(Duration::MAX), i32::MAX);
    }

    fn state(t: &SlotTable<u32>, slot: u32) -> SlotState {
        t.slots[slot as usize].state
    }

    #[test]
    fn slots_keep_then_release_after_the_call() {
        let mut t = SlotTable::<u32>::new(4);
        let slot = t.admit(7).unwrap();
        assert_eq!(
            (state(&t, slot), t.occupant(slot)),
            (SlotState::Current, Some(&7))
        );
        t.keep(slot);
        t.keep(slot); // a second keep counts once
        assert_eq!(t.held, 1);
        assert!(t.settle(slot));
        assert_eq!(
            (state(&t, slot), t.occupant(slot)),
            (SlotState::Held, Some(&7))
        );
        assert_eq!(t.current, None);

        t.release(slot);
        assert_eq!(
            (state(&t, slot), t.occupant(slot), t.held),
            (SlotState::Vacant, None, 0)
        );
        let mut free = Vec::new();
        t.take_released(&mut free);
        assert_eq!(free, [7]);
        assert!(t.released.is_empty());
    }

    #[test]
    fn slots_not_kept_are_vacant_after_the_call() {
        let mut t = SlotTable::<u32>::new(1);
        let slot = t.admit(7).unwrap();
        // Releasing the frame being handed on, not kept: ignored (the worker
        // frees it itself).
        t.release(slot);
        assert_eq!(state(&t, slot), SlotState::Current);
        assert!(!t.settle(slot));
        assert_eq!(
            (state(&t, slot), t.held, t.vacant.len()),
            (SlotState::Vacant, 0, 1)
        );
        assert!(t.released.is_empty());
    }

    #[test]
    fn slots_released_during_the_call_are_freed_by_the_worker() {
        let mut t = SlotTable::<u32>::new(2);
        let slot = t.admit(7).unwrap();
        t.keep(slot);
        t.release(slot);
        assert_eq!((state(&t, slot), t.held), (SlotState::Released, 0));
        assert_eq!(t.occupant(slot), None);
        // Not on the released list: the worker treats it as a frame
        // nobody kept (dropped or transmitted), so it is not freed twice.
        assert!(t.released.is_empty());
        assert!(!t.settle(slot));
        assert_eq!((state(&t, slot), t.vacant.len()), (SlotState::Vacant, 2));
        // A release after the call is ignored.
        t.release(slot);
        assert_eq!(t.held, 0);
        assert!(t.released.is_empty());
    }

    #[test]
    fn slots_released_twice_count_once() {
        let mut t = SlotTable::<u32>::new(2);
        let slot = t.admit(7).unwrap();
        t.keep(slot);
        assert!(t.settle(slot));
        t.release(slot);
        t.release(slot);
        t.release(99); // no such slot
        assert_eq!(
            (t.held, t.released.as_slice(), t.vacant.len()),
            (0, &[7][..], 2)
        );
    }

    #[test]
    fn slots_run_out_and_are_reused() {
        let mut t = SlotTable::<u32>::new(2);
        let mut kept = Vec::new();
        for d in [1, 2] {
            let slot = t.admit(d).unwrap();
            t.keep(slot);
            assert!(t.settle(slot));
            kept.push(slot);
        }
        assert_ne!(kept[0], kept[1]);
        assert_eq!((t.admit(3), t.held), (None, 2));

        t.release(kept[0]);
        let slot = t.admit(4).unwrap();
        assert_eq!((slot, t.occupant(slot)), (kept[0], Some(&4)));
        assert_eq!(t.occupant(kept[1]), Some(&2));
        assert!(!t.settle(slot));
        let mut free = Vec::new();
        t.take_released(&mut free);
        assert_eq!(free, [1]);

        assert_eq!(SlotTable::<u32>::new(0).admit(1), None);
    }

    /// A handler that panics at its `panic_at`-th pass (at every pass from
    /// then on with `again`), fails closed as `can_close` says, and stops
    /// its worker at its `stop_at`-th pass; its passes and fail-closed
    /// calls counted.
    struct Panicky {
        passes: Arc<std::sync::atomic::AtomicU32>,
        closed: Arc<std::sync::atomic::AtomicU32>,
        panic_at: u32,
        again: bool,
        can_close: bool,
        stop_at: u32,
        stop: Arc<AtomicBool>,
    }

    impl QueueHandler for Panicky {
        fn on_rx(&mut self, _q: &QueueInfo, _now: Duration, _b: &mut [u8], _l: usize) -> RxAction {
            RxAction::Drop
        }
        fn on_spill_poll(&mut self, _queue: &QueueInfo, _now: Duration) -> SpillPass {
            let n = self.passes.fetch_add(1, Ordering::Relaxed) + 1;
            if n == self.panic_at || (self.again && n > self.panic_at) {
                panic!("handler asked to panic");
            }
            if n >= self.stop_at {
                self.stop.store(true, Ordering::Relaxed);
            }
            // Busy: the worker does not sleep between passes.
            SpillPass {
                received: 1,
                ..SpillPass::default()
            }
        }
        fn fail_closed(&mut self, _queue: &QueueInfo, _now: Duration) -> bool {
            self.closed.fetch_add(1, Ordering::Relaxed);
            self.can_close
        }
    }

    /// Runs a worker without a queue over a [`Panicky`] handler on a
    /// thread of its own; returns whether the thread ended normally, the
    /// passes, the fail-closed calls and whether the queue was marked as
    /// panicked.
    fn run_panicky(panic_at: u32, again: bool, can_close: bool) -> (bool, u32, u32, bool) {
        let ctl = Control {
            stop: Arc::default(),
            failed: Arc::default(),
            panicked: Arc::default(),
            passes: Arc::default(),
        };
        let (passes, closed) = (Arc::default(), Arc::default());
        let h = Panicky {
            passes: Arc::clone(&passes),
            closed: Arc::clone(&closed),
            panic_at,
            again,
            can_close,
            stop_at: 10,
            stop: ctl.stop.clone(),
        };
        let info = QueueInfo {
            queue: 3,
            cpu: None,
            node: 0,
            zero_copy: false,
            rx_frames: 0,
        };
        let cfg = LoopConfig {
            busy_poll: false,
            tx_reserve: 0,
            held_frames: 0,
        };
        let panicked = ctl.panicked.clone();
        let counters = Arc::new(QueueCounters::default());
        let t = std::thread::spawn(move || {
            run_spill(info, h, cfg, ctl, counters, Instant::now(), || {});
        });
        let ended_normally = t.join().is_ok();
        (
            ended_normally,
            passes.load(Ordering::Relaxed),
            closed.load(Ordering::Relaxed),
            panicked.load(Ordering::Relaxed),
        )
    }

    /// A handler's panic fails its queue closed and the worker serves on
    /// (until told to stop), the queue marked as failed: the thread does
    /// not die with it, leaving the queue's flows to time out.
    #[test]
    fn a_panic_fails_the_queue_closed_and_the_worker_serves_on() {
        assert_eq!(run_panicky(3, false, true), (true, 10, 1, true));
        // No panic: nothing failed.
        assert_eq!(run_panicky(0, false, true), (true, 10, 0, false));
    }

    /// A handler that cannot fail closed, or a second panic, ends the
    /// worker as the panic would have (the thread ends panicked), the
    /// queue marked as failed.
    #[test]
    fn a_handler_that_cannot_fail_closed_or_panics_again_ends_the_worker() {
        assert_eq!(run_panicky(3, false, false), (false, 3, 1, true));
        assert_eq!(run_panicky(3, true, true), (false, 4, 1, true));
    }

    /// A worker without a queue (software spill) has no socket: the frames
    /// it takes from its carrier and hands back to it are the carrier's
    /// socket's, counted there; the worker's own queue series count none
    /// of them (the spill counters do), only its busy time.
    #[test]
    fn a_worker_without_a_queue_counts_no_socket_frames() {
        let ctl = Control {
            stop: Arc::default(),
            failed: Arc::default(),
            panicked: Arc::default(),
            passes: Arc::default(),
        };
        let h = Panicky {
            passes: Arc::default(),
            closed: Arc::default(),
            panic_at: 0,
            again: false,
            can_close: true,
            stop_at: 10,
            stop: ctl.stop.clone(),
        };
        let info = QueueInfo {
            queue: 2,
            cpu: None,
            node: 0,
            zero_copy: false,
            rx_frames: 0,
        };
        let cfg = LoopConfig {
            busy_poll: false,
            tx_reserve: 0,
            held_frames: 0,
        };
        let counters = Arc::new(QueueCounters::default());
        run_spill(info, h, cfg, ctl, counters.clone(), Instant::now(), || {});
        let c = counters.snapshot();
        assert_eq!(
            (c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes),
            (0, 0, 0, 0),
            "{c:?}"
        );
        assert_eq!(c.idle_polls, 0, "every pass found work");
    }
}
