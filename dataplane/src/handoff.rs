//! Moving an RSS bucket, with its live TCP connections, from one queue's
//! worker to another's (issue 13; IX's flow-group migration, with an
//! explicit drain marker instead of a timeout).
//!
//! ```text
//! controller            worker A (from)                  worker B (to)
//!  Prepare ────────────────────────────────────────────> hold B's own frames of b
//!  Export ───────────> export b (TCP state, app state),
//!                      forward b's frames to B ────────> Import, then forwarded frames
//!  (B prepared:)                                           in A's order
//!  write the NIC entry b → B
//!  Rewritten ────────> (behind the export) takes its
//!                      RX ring's frames off it: ──────> (Draining) the hold's timeout
//!                      forwards b's at once               runs from here
//!                      (the others wait): Drained ─────> held frames, in order; done
//!  (news) ─────────> every other worker: b is on B
//! ```
//!
//! Frames of b that reach A after the export (in A's ring, or from an
//! established flow the NIC still steers there) match nothing in A's
//! stack, which hands them back ([`flowlane_tcp::Delivery::Away`]); A
//! copies them into B's inbox in arrival order. From the rewrite on, A
//! does not wait to hand on everything its ring held then (on a loaded
//! queue, milliseconds of other buckets' frames): it looks at the frames'
//! headers ahead of the pass and forwards b's at once
//! (`Mover::take_ahead`), the others keeping their place. B holds the frames of b
//! that the NIC gives it from the rewrite on until A's `Drained` says
//! nothing older can follow, so B's stack sees b's segments in the order
//! they reached the NIC. A timeout ([`HOLD_TIMEOUT`], from when A took the
//! rewrite and told B so: before, nothing could drain) releases held
//! frames only if the marker never comes.
//!
//! Each worker has an inbox (a bounded lock-free channel, `mesh.rs`) and
//! an eventfd that wakes it from its idle poll, written once per wake-up
//! and read only when written (`wake::FdWake`), so a pass costs no
//! syscall. The controller's messages have places of their own in every
//! inbox, which the workers' frames cannot fill, and the news of a
//! finished move goes beside the channel: no step of a move is dropped for
//! a full inbox. An old worker whose rewrite never comes (the controller
//! gave up on the move) stops waiting for it after `REWRITE_TIMEOUT` (10 s),
//! counted. Nothing here is on the per-frame fast path unless a move is
//! under way: a worker checks each frame's bucket only while it holds one
//! (`Mover::holding`), and forwards only what its stack hands back.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use flowlane_app::ConnExport;
use flowlane_numa_sched::RssState;
use flowlane_tcp::{BucketExport, FourTuple};
use flowlane_wire::peek::tcp_endpoints;
use serde::{Deserialize, Serialize};

use crate::bucket_counters::rss_bucket;
use crate::frame_batch::{FrameBatch, BATCH_FRAMES};

#[path = "mesh.rs"]
mod mesh;
pub(crate) use mesh::Mesh;
#[cfg(test)]
use mesh::{CONTROL_ROOM, INBOX, INBOX_BYTES};

/// Bytes of frame batches a worker keeps for full inboxes before it drops
/// batches (the TCP senders retransmit their frames); other messages are
/// always kept.
const STALLED_BYTES: usize = 6 << 20;
/// Frames a carrier keeps to send for workers without a queue while its
/// TX ring has no room; beyond it they are dropped (their TCP retransmits).
const TO_SEND_MAX: usize = 4_096;

/// How long a worker holds the frames of a bucket it is taking over once
/// the old worker can drain (it learnt of the NIC's rewrite and said so,
/// `Message::Draining`), if the old worker's drain marker does not come:
/// the last resort, never the mechanism. Before that the old worker may
/// still be exporting, or the NIC's write still running (an ethtool write
/// on a real NIC), and nothing could drain yet: the hold's bound is then
/// the controller's step timeout from the announcement or from the last
/// part of the bucket that arrived.
pub const HOLD_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a worker that was told a bucket is coming waits for it (for
/// the next part of it, once parts arrive), before the NIC's rewrite: the
/// controller's own bound on each step ([`STEP_TIMEOUT`]).
const PREPARE_TIMEOUT: Duration = STEP_TIMEOUT;
/// How long a worker that exported a bucket waits for the controller's
/// word of the NIC's rewrite (`Message::Rewritten`) before it stops
/// waiting, counted ([`MoverStats::rewrite_timeouts`]): it keeps
/// forwarding the bucket's frames to the new worker, and hears of the
/// bucket's later moves again. The word follows the export by the new
/// worker's answer to its announcement (at most [`STEP_TIMEOUT`]) and the
/// NIC's write; it does not come when the controller gave up on the move
/// after the export (the new worker did not answer, and the way back
/// failed too), or could not send it (a worker stuck for good).
pub(crate) const REWRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames one takeover holds at most (a peer spraying a held bucket's
/// tuples must not grow it without bound); beyond it they are dropped
/// and counted, and the sender retransmits.
const HELD_MAX: usize = 32_768;
/// Times a frame may be forwarded (a frame forwarded more often than a
/// bucket can move meanwhile is dropped and counted).
const MAX_HOPS: u8 = 4;
/// Inbox messages a worker takes per loop pass, and frames: it stops
/// once the frames it took reach this many.
const MESSAGES_PER_PASS: usize = 4096;
/// How long a worker taking part in a move keeps running its loop instead
/// of sleeping in poll(2) (yielding its CPU each idle pass): the messages
/// of a move then cost no wake-up. Bounded, so that a move the controller
/// abandoned does not keep an idle worker spinning.
const SPIN_FOR: Duration = Duration::from_millis(20);
/// How long the old worker of a bucket that still received frames of it
/// during the move waits, once it has passed (or looked at) what its RX
/// ring held at the rewrite, for a further frame of the bucket before it
/// sends the drain marker; the wait runs from the rewrite or the bucket's
/// last frame, whichever came later (each such frame starts it again).
/// Frames the NIC steered by the old entry can reach the AF_XDP ring after
/// the rewrite: between the NIC (or the test bed's emulated one) and the
/// ring sit the driver's ring and a NAPI poll that publishes at its end,
/// and under load that poll waits for ksoftirqd. The bed measured such
/// frames 3.5 ms after the marker on a loaded two-vCPU VM, before this
/// wait; and when the worker stopped handing on its whole ring before the
/// marker (a look at its headers instead), frames of a bucket whose last
/// one came before the rewrite reached it after the marker, until the
/// wait ran from the rewrite. A bucket that received nothing during the
/// move pays nothing.
pub(crate) const SETTLE: Duration = Duration::from_millis(2);
/// The longest the old worker waits for a quiet bucket after passing the
/// producer index: frames that keep coming (a NIC that did not apply the
/// rewrite) do not hold the move up for longer.
pub(crate) const SETTLE_MAX: Duration = Duration::from_millis(20);
/// Drain markers a worker remembers, to tell a late frame (one of a
/// bucket whose marker went) and how late it came.
const RECENT_MARKERS: usize = 64;
/// How long the controller checks for a worker's answer (yielding its CPU
/// in between) before it sleeps on it.
const REPLY_SPIN: Duration = Duration::from_millis(2);

/// Who decides an export: the old worker takes it when it takes the
/// message off its inbox, or the controller calls it off when it gives up
/// waiting for the answer ([`STEP_TIMEOUT`]), whichever comes first. An
/// export the controller gave up on is then never carried out behind its
/// back (the bucket would end up on the new worker while the NIC's entry
/// and the service's table name the old one, every later move of it
/// refused), and one the worker took is waited for.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExportClaim(Arc<AtomicU8>);

impl ExportClaim {
    const PENDING: u8 = 0;
    const TAKEN: u8 = 1;
    const CALLED_OFF: u8 = 2;

    /// The old worker's side: whether the export is still wanted (it is
    /// taken then, and the controller waits for its answer).
    pub(crate) fn take(&self) -> bool {
        self.0
            .compare_exchange(
                Self::PENDING,
                Self::TAKEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The controller's side: whether the export was called off before
    /// the worker took it (it never will then).
    fn call_off(&self) -> bool {
        self.0
            .compare_exchange(
                Self::PENDING,
                Self::CALLED_OFF,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// What the controller and the workers tell each other.
pub(crate) enum Message {
    /// To the new owner: bucket `bucket` is coming; hold the frames of it
    /// that reach you.
    Prepare { bucket: u16, reply: Sender<Reply> },
    /// To the old owner: hand the bucket to `to`, if the controller still
    /// wants it when the message is taken ([`ExportClaim`]).
    Export {
        bucket: u16,
        to: u32,
        reply: Sender<Reply>,
        claim: ExportClaim,
    },
    /// To the old owner: the NIC's entry now names the new owner
    /// (`written`), or the write failed and it names the old owner still
    /// (the move is undone next): either way the old owner drains, and
    /// with `written` false the frames of the bucket that keep reaching it
    /// are forwarded as a matter of course, not late.
    Rewritten {
        bucket: u16,
        reply: Sender<Reply>,
        written: bool,
    },
    /// To the new owner: the move was called off (before the export, or
    /// after an export to a new owner that did not answer its
    /// announcement): it stops holding the bucket's frames.
    Cancel { bucket: u16 },
    /// From the old owner to the new: it learnt of the rewrite, and the
    /// drain began; the marker follows. The new owner's hold runs on its
    /// last-resort timeout ([`HOLD_TIMEOUT`]) from here.
    Draining { bucket: u16 },
    /// From the old owner: the bucket's connections.
    Import(Box<Arrival>),
    /// From the old owner: frames of buckets that left it (or that a
    /// worker without a queue serves), in arrival order.
    Frames(FrameBatch),
    /// From a worker without a queue (software spill): whole Ethernet
    /// frames for this worker to put on its queue's TX ring, in order.
    Transmits(FrameBatch),
    /// From the old owner: nothing of the bucket older than what the NIC
    /// now gives you will follow.
    Drained {
        bucket: u16,
        forwarded: u64,
        scanned: u64,
        reply: Sender<Reply>,
    },
}

/// A bucket's connections on their way to their new worker.
pub(crate) struct Arrival {
    pub(crate) bucket: u16,
    /// The connections, a part of the bucket's or all of them
    /// ([`BucketExport::complete`] on the last).
    pub(crate) export: BucketExport,
    /// The application side of each connection of `export`, in order.
    pub(crate) apps: Vec<Option<ConnExport>>,
    /// What the old worker knew of the connections' peers' Ethernet
    /// addresses.
    pub(crate) neighbors: Vec<crate::neighbor::Known>,
}

/// A worker's answer to the controller.
#[derive(Debug)]
pub(crate) enum Reply {
    Prepared,
    Exported {
        connections: usize,
        time_wait: usize,
    },
    Done {
        forwarded: u64,
        held: u64,
        scanned: u64,
        timed_out: bool,
        /// Connections of the bucket this worker could not take.
        refused: usize,
    },
    Refused(String),
}

/// What one move did ([`crate::TcpService::move_bucket`]): one JSON line
/// in the services' logs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MoveReport {
    /// The RSS bucket (indirection-table entry).
    pub bucket: u16,
    /// The queue that served it.
    pub from: u32,
    /// The queue that serves it now.
    pub to: u32,
    /// Live connections moved (exported by the old queue; those the new
    /// one could not take are in `connections_refused`).
    pub connections: usize,
    /// Of `connections`, those the new queue could not take: its stack held
    /// its most connections and the eighth past it that imports may use
    /// (`imports_refused_at_cap`), or the tuple was in use there. Each is
    /// gone from both queues; its peer's next segment is answered with a
    /// reset, and its application side was told (`import_failed`).
    #[serde(default)]
    pub connections_refused: usize,
    /// TIME-WAIT records moved.
    pub time_wait: usize,
    /// Frames the old queue forwarded to the new one until its drain marker.
    pub frames_forwarded: u64,
    /// Frames the new queue held until the marker.
    pub frames_held: u64,
    /// Frames the old queue's RX ring held at the rewrite or brought
    /// until the marker, which it looked at ahead of handing them on
    /// (their order kept) to forward the bucket's at once.
    #[serde(default)]
    pub frames_scanned: u64,
    /// Microseconds from the request to the new queue serving the bucket.
    pub duration_us: f64,
    /// Of which: from the request to the old queue's answer that the
    /// bucket is out of its stack (the NIC's write runs meanwhile).
    pub export_us: f64,
    /// Writing the NIC's table entry, while the old queue exports.
    pub nic_write_us: f64,
    /// Of which: from the end of the export (the entry written by then) to
    /// the new queue serving the bucket (the old queue's look at what its
    /// ring held, its drain marker, the new queue's held frames).
    #[serde(default)]
    pub drain_us: f64,
    /// Whether the new queue stopped holding on its timeout instead of the
    /// old queue's marker.
    pub hold_timed_out: bool,
}

impl Message {
    /// The frames a message carries, if it carries frames.
    fn batch(&self) -> Option<&FrameBatch> {
        match self {
            Message::Frames(b) | Message::Transmits(b) => Some(b),
            _ => None,
        }
    }

    /// Whether the message is a step of a move, which its worker should
    /// take soon ([`Mover::urgent`]): not frames.
    fn urgent(&self) -> bool {
        self.batch().is_none()
    }
}

/// A bucket this worker is taking over.
struct Incoming {
    bucket: u16,
    /// This worker's own frames of the bucket, in arrival order.
    held: FrameBatch,
    deadline: Duration,
    /// The worker spins until then ([`SPIN_FOR`]).
    spin_until: Duration,
}

/// A bucket this worker gave away and still forwards for.
struct Outgoing {
    bucket: u16,
    to: u32,
    /// When the export ended ([`REWRITE_TIMEOUT`] runs from here).
    exported_at: Duration,
    forwarded: u64,
    /// When the worker forwarded the bucket's last frame, or learnt of the
    /// rewrite if that came later ([`SETTLE`] runs from here).
    last_forward: Duration,
    /// Set when the NIC entry was rewritten: the marker goes once the
    /// worker has taken this many frames off its RX ring (every frame the
    /// ring held when it learnt of the rewrite) and, if it forwarded any
    /// frame of the bucket, none came for [`SETTLE`].
    rewritten: Option<(u64, Sender<Reply>)>,
    /// Whether the NIC's entry names the new worker now (false: the write
    /// failed, [`Message::Rewritten`]).
    written: bool,
    /// When the worker found it had passed the index of `rewritten`.
    passed: Option<Duration>,
    /// Frames of the RX ring looked at ahead since the rewrite
    /// ([`Mover::take_ahead`]).
    scanned: u64,
    /// The worker spins until then ([`SPIN_FOR`]).
    spin_until: Duration,
}

/// Counts of one worker's part in moves (published with its TCP counters).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MoverStats {
    pub(crate) buckets_out: u64,
    pub(crate) buckets_in: u64,
    pub(crate) frames_forwarded: u64,
    /// Of those, TCP segments of a bucket whose drain marker this worker
    /// had sent (one of its last [`RECENT_MARKERS`]) after a rewrite of
    /// the NIC's entry: the new worker gets them out of order. Not ICMP
    /// errors, not the frames of a bucket whose entry could not be
    /// written (they keep coming here and are forwarded in order), not
    /// frames of buckets this worker never gave away (a takeover's held
    /// frames that its cancel handed back to their owner).
    pub(crate) frames_forwarded_late: u64,
    /// The longest such a frame came after its bucket's marker, in µs (of
    /// the buckets of the last [`RECENT_MARKERS`] markers): how much
    /// longer [`SETTLE`] would have had to be.
    pub(crate) late_max_us: u64,
    pub(crate) frames_forwarded_in: u64,
    /// Bytes of those frames.
    pub(crate) bytes_forwarded_in: u64,
    pub(crate) frames_held: u64,
    /// Takeovers whose hold ended on its timeout, not on the old worker's
    /// marker nor on the controller's cancel.
    pub(crate) hold_timeouts: u64,
    /// Buckets this worker exported whose rewrite did not come within
    /// [`REWRITE_TIMEOUT`]: it stopped waiting for it (the new worker's
    /// hold ended on its own timeout, counted in `hold_timeouts` there).
    pub(crate) rewrite_timeouts: u64,
    pub(crate) forward_dropped: u64,
    pub(crate) import_failed: u64,
    /// Frames carried for a worker without a queue, forwarded to it.
    pub(crate) spill_forwarded: u64,
    /// Frames a worker without a queue handed to its carrier to send.
    pub(crate) spill_tx_out: u64,
    /// Frames a carrier took from workers without a queue to send.
    pub(crate) spill_tx_in: u64,
}

/// One worker's side of the moves: which queue serves each bucket as far
/// as this worker knows, what it holds and forwards.
pub(crate) struct Mover {
    me: u32,
    mesh: Arc<Mesh>,
    rss: RssState,
    incoming: Vec<Incoming>,
    outgoing: Vec<Outgoing>,
    /// Messages for full inboxes, in order, by destination.
    stalled: VecDeque<(u32, Message)>,
    /// Bytes of the frame batches among them ([`STALLED_BYTES`]).
    stalled_bytes: usize,
    /// Frames for each destination not sent yet, in order: those it
    /// serves, those it is to send (a worker without a queue's carrier).
    batches: Vec<(FrameBatch, FrameBatch)>,
    /// Destinations to wake at the end of the pass.
    to_wake: Vec<bool>,
    /// The worker's clock at its last [`Mover::take_work`].
    now: Duration,
    /// [`HOLD_TIMEOUT`] (tests whose clock is not the controller's set more).
    pub(crate) hold_timeout: Duration,
    pub(crate) stats: MoverStats,
    /// For a worker without a queue (software spill): the worker whose
    /// queue sends its frames.
    carrier: Option<u32>,
    /// Frames workers without a queue asked this one to send, in order
    /// ([`Mover::send_transmits`]): the front batch's first `to_send_next`
    /// are sent.
    to_send: VecDeque<FrameBatch>,
    to_send_next: usize,
    /// Frames of `to_send` not sent yet ([`TO_SEND_MAX`]).
    to_send_frames: usize,
    /// Workers from this index on have no queue (software spill).
    nic_queues: u32,
    /// The buckets of the last [`RECENT_MARKERS`] drain markers, with when
    /// each went (a late frame's lateness, [`MoverStats::late_max_us`]).
    markers_sent: VecDeque<(u16, Duration)>,
    /// A rewrite was taken since the last look ahead: the next look must
    /// include the frames an earlier one left waiting, which it showed
    /// for other buckets ([`Mover::take_new_drain`]).
    new_drain: bool,
    /// Buckets this worker gave away whose NIC entry could not be written
    /// (it still names this worker): their frames are forwarded as a
    /// matter of course, not late, until the bucket comes back.
    unwritten: Vec<u16>,
    /// Connections of buckets arriving here that could not be imported,
    /// by bucket, until the move's end is answered (one entry a bucket
    /// taken over, so no more than the table's entries).
    refused: Vec<(u16, usize)>,
    /// Ends of moves to answer at [`Mover::flush`], after the pass's
    /// imports: a bucket's last part and its drain marker can come in one
    /// pass, and the answer says how many of its connections were refused.
    ends: Vec<(u16, Sender<Reply>, Reply)>,
}

impl std::fmt::Debug for Mover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mover")
            .field("me", &self.me)
            .field("incoming", &self.incoming.len())
            .field("outgoing", &self.outgoing.len())
            .finish()
    }
}

/// What the worker must do for one inbox message (the parts that need
/// its stack and application).
pub(crate) enum Work {
    /// Export `bucket` to `to` and answer `reply`.
    Export {
        bucket: u16,
        to: u32,
        reply: Sender<Reply>,
    },
    /// Import these connections.
    Import(Box<Arrival>),
    /// Process these frames, in order (forwarded ones, then released
    /// held ones), with how often each was forwarded.
    Frames(Vec<FrameBatch>),
    /// The NIC's entry for `bucket` was rewritten (or, `written` false,
    /// its write failed): call [`Mover::rewritten`] with the RX ring read
    /// now (after the work before it: an export of the bucket in the same
    /// batch comes first).
    Rewritten {
        bucket: u16,
        reply: Sender<Reply>,
        written: bool,
    },
}

impl Mover {
    /// Worker `me`'s side of `mesh`, starting from the NIC's RSS `rss`.
    pub(crate) fn new(me: u32, mesh: Arc<Mesh>, rss: RssState) -> Mover {
        let queues = mesh.queues() as usize;
        Mover {
            me,
            mesh,
            rss,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            stalled: VecDeque::new(),
            stalled_bytes: 0,
            batches: (0..queues).map(|_| Default::default()).collect(),
            to_wake: vec![false; queues],
            now: Duration::ZERO,
            hold_timeout: HOLD_TIMEOUT,
            stats: MoverStats::default(),
            carrier: None,
            to_send: VecDeque::new(),
            to_send_next: 0,
            to_send_frames: 0,
            markers_sent: VecDeque::new(),
            nic_queues: queues as u32,
            new_drain: false,
            unwritten: Vec::new(),
            refused: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Workers from `nic_queues` on have no queue (software spill).
    pub(crate) fn set_nic_queues(&mut self, nic_queues: u32) {
        self.nic_queues = nic_queues;
    }

    /// Makes this a worker without a queue, whose frames go out through
    /// `carrier`'s queue.
    pub(crate) fn set_carrier(&mut self, carrier: u32) {
        self.carrier = Some(carrier);
    }

    /// Hands a whole frame to the carrier to send (a worker without a
    /// queue); it goes in a batch, at the latest with the pass's
    /// [`flush`](Self::flush).
    pub(crate) fn transmit_via_carrier(&mut self, frame: &[u8]) {
        let Some(to) = self.carrier else {
            self.stats.forward_dropped += 1;
            return;
        };
        self.stats.spill_tx_out += 1;
        self.batch(to, true, 0, frame);
    }

    /// Hands `send` the frames workers without a queue asked this one to
    /// send, in order, until it has no room (`None`: the rest wait for the
    /// next pass, ahead of newer ones). A frame it cannot send
    /// (`Some(false)`: longer than a TX frame) is dropped and counted.
    pub(crate) fn send_transmits(&mut self, mut send: impl FnMut(&[u8]) -> Option<bool>) {
        while let Some(b) = self.to_send.front() {
            while let Some((_, f)) = b.get(self.to_send_next) {
                let Some(sent) = send(f) else { return };
                if !sent {
                    self.stats.forward_dropped += 1;
                }
                self.to_send_next += 1;
                self.to_send_frames -= 1;
            }
            self.to_send.pop_front();
            self.to_send_next = 0;
        }
    }

    /// This worker took `bucket`'s `Prepare` and holds its frames (for a
    /// harness that steps the workers itself).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn expecting(&self, bucket: u16) -> bool {
        self.incoming.iter().any(|i| i.bucket == bucket)
    }

    /// This worker gave `bucket` away and has not sent its drain marker
    /// yet (for a harness that steps the workers itself).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn draining_bucket(&self, bucket: u16) -> bool {
        self.outgoing.iter().any(|o| o.bucket == bucket)
    }

    /// The queue this worker serves (for a harness that steps the workers
    /// itself).
    #[cfg(test)]
    pub(crate) fn me(&self) -> u32 {
        self.me
    }

    /// The queue that serves `bucket`, as this worker knows it.
    pub(crate) fn owner(&self, bucket: u16) -> u32 {
        self.rss
            .table()
            .entries()
            .get(usize::from(bucket))
            .map_or(self.me, |&q| u32::from(q))
    }

    /// The worker's view of the NIC's RSS (its table follows the moves).
    pub(crate) fn rss(&self) -> &RssState {
        &self.rss
    }

    /// Records that `queue` serves `bucket` now.
    fn set_owner(&mut self, bucket: u16, queue: u32) {
        let mut entries = self.rss.table().entries().to_vec();
        if let Some(e) = entries.get_mut(usize::from(bucket)) {
            *e = queue as u16;
        }
        let table = flowlane_numa_sched::IndirectionTable::new(entries)
            .expect("same size as a valid table");
        // Every queue of the mesh is placed in the RSS state.
        let _ = self.rss.set_table(table);
    }

    /// Whether a message of a move waits in this worker's inbox (the
    /// worker should end its receive pass and take it).
    #[inline]
    pub(crate) fn urgent(&self) -> bool {
        self.mesh.inboxes[self.me as usize]
            .urgent
            .load(Ordering::Relaxed)
    }

    /// Whether frames must be checked against buckets being taken over.
    #[inline]
    pub(crate) fn holding(&self) -> bool {
        !self.incoming.is_empty()
    }

    /// The bucket of `tuple` if this worker holds that bucket's frames.
    pub(crate) fn held_bucket(&self, tuple: &FourTuple) -> Option<u16> {
        let b = rss_bucket(&self.rss, tuple);
        self.incoming.iter().any(|i| i.bucket == b).then_some(b)
    }

    /// Keeps a frame of a bucket being taken over until the old worker's
    /// marker.
    pub(crate) fn hold(&mut self, bucket: u16, frame: &[u8]) {
        if let Some(i) = self.incoming.iter_mut().find(|i| i.bucket == bucket) {
            if i.held.len() >= HELD_MAX {
                self.stats.forward_dropped += 1;
                return;
            }
            i.held.push(0, frame);
            self.stats.frames_held += 1;
        }
    }

    /// Sends a TCP segment the stack handed back to the worker that serves
    /// its bucket; `now`: the worker's clock.
    pub(crate) fn forward(&mut self, now: Duration, bucket: u16, hops: u8, frame: &[u8]) {
        self.forward_as(now, bucket, hops, frame, true);
    }

    /// Sends an ICMP error about a connection of `bucket` to the worker
    /// that serves the bucket: in order with its segments, but no segment
    /// of the bucket's (it says nothing of a move's drain).
    pub(crate) fn forward_icmp(&mut self, now: Duration, bucket: u16, hops: u8, frame: &[u8]) {
        self.forward_as(now, bucket, hops, frame, false);
    }

    /// [`Mover::forward`] (`segment`) or [`Mover::forward_icmp`].
    fn forward_as(&mut self, now: Duration, bucket: u16, hops: u8, frame: &[u8], segment: bool) {
        let to = self.owner(bucket);
        if to == self.me || hops >= MAX_HOPS {
            self.stats.forward_dropped += 1;
            return;
        }
        match self.outgoing.iter_mut().find(|o| o.bucket == bucket) {
            Some(o) => {
                if segment {
                    o.forwarded += 1;
                    o.last_forward = now;
                }
                self.stats.frames_forwarded += 1;
            }
            // A bucket of a worker without a queue: carried, for good.
            None if to >= self.nic_queues => self.stats.spill_forwarded += 1,
            None => {
                self.stats.frames_forwarded += 1;
                // Late: a segment of a bucket whose marker went, the NIC's
                // entry rewritten (the new worker may have processed newer
                // ones the NIC gave it directly).
                let marker = self.markers_sent.iter().rev().find(|(b, _)| *b == bucket);
                if let Some(&(_, at)) =
                    marker.filter(|_| segment && !self.unwritten.contains(&bucket))
                {
                    self.stats.frames_forwarded_late += 1;
                    let late = now.saturating_sub(at).as_micros() as u64;
                    self.stats.late_max_us = self.stats.late_max_us.max(late);
                }
            }
        }
        self.batch(to, false, hops + 1, frame);
    }

    /// Adds `frame` to what goes to `to` (a frame it serves, or with
    /// `transmit` one it is to send); a full batch goes at once.
    fn batch(&mut self, to: u32, transmit: bool, hops: u8, frame: &[u8]) {
        let Some((serve, send)) = self.batches.get_mut(to as usize) else {
            self.stats.forward_dropped += 1;
            return;
        };
        let b = if transmit { send } else { serve };
        b.push(hops, frame);
        // A full batch goes at once; the others before any other message
        // to `to` and at the end of the pass.
        if b.len() >= BATCH_FRAMES {
            let b = std::mem::take(b);
            self.enqueue(
                to,
                if transmit {
                    Message::Transmits(b)
                } else {
                    Message::Frames(b)
                },
            );
        }
    }

    /// Sends the frames batched for `to` (those it serves first: a move's
    /// next message to `to` must follow them), each batch shrunk to its
    /// frames: a batch of one frame is charged (and holds) one frame's
    /// bytes, not a full batch's room.
    fn release(&mut self, to: u32) {
        let Some((serve, send)) = self.batches.get_mut(to as usize) else {
            return;
        };
        let (mut serve, mut send) = (std::mem::take(serve), std::mem::take(send));
        serve.shrink();
        send.shrink();
        if !serve.is_empty() {
            self.enqueue(to, Message::Frames(serve));
        }
        if !send.is_empty() {
            self.enqueue(to, Message::Transmits(send));
        }
    }

    /// Sends `m` to `to` in order behind the frames batched for it and
    /// anything stalled for it.
    fn queue_message(&mut self, to: u32, m: Message) {
        self.release(to);
        self.enqueue(to, m);
    }

    /// Sends `m` to `to` in order behind anything stalled for it.
    fn enqueue(&mut self, to: u32, m: Message) {
        if self.stalled.iter().any(|(d, _)| *d == to) {
            self.stall(to, m);
            return;
        }
        match self.mesh.push(to, m) {
            Ok(()) => {
                if let Some(w) = self.to_wake.get_mut(to as usize) {
                    *w = true;
                }
            }
            Err(m) => self.stall(to, m),
        }
    }

    fn stall(&mut self, to: u32, m: Message) {
        if let Some(b) = m.batch() {
            if self.stalled_bytes + b.allocated() > STALLED_BYTES {
                self.stats.forward_dropped += b.len() as u64;
                return;
            }
            self.stalled_bytes += b.allocated();
        }
        self.stalled.push_back((to, m));
    }

    /// End of a pass: sends the frames batched, retries stalled messages
    /// in order and wakes every worker that got something.
    pub(crate) fn flush(&mut self) {
        for (bucket, reply, mut done) in std::mem::take(&mut self.ends) {
            if let Reply::Done { refused, .. } = &mut done {
                if let Some(pos) = self.refused.iter().position(|(b, _)| *b == bucket) {
                    *refused = self.refused.swap_remove(pos).1;
                }
            }
            let _ = reply.send(done);
        }
        for to in 0..self.batches.len() as u32 {
            self.release(to);
        }
        let mut blocked: Vec<u32> = Vec::new();
        let mut keep = VecDeque::new();
        while let Some((to, m)) = self.stalled.pop_front() {
            if blocked.contains(&to) {
                keep.push_back((to, m));
                continue;
            }
            let bytes = m.batch().map_or(0, FrameBatch::allocated);
            match self.mesh.push(to, m) {
                Ok(()) => {
                    self.stalled_bytes -= bytes;
                    if let Some(w) = self.to_wake.get_mut(to as usize) {
                        *w = true;
                    }
                }
                Err(m) => {
                    blocked.push(to);
                    keep.push_back((to, m));
                }
            }
        }
        self.stalled = keep;
        for (q, w) in self.to_wake.iter_mut().enumerate() {
            if std::mem::take(w) {
                self.mesh.wake(q as u32);
            }
        }
    }

    /// The earliest time this worker must run its loop for the moves
    /// (`Some(0)`: at once, i.e. spin). A worker spins while it has
    /// messages to retry, a drain marker to send, or, for [`SPIN_FOR`], a
    /// move's next message to expect.
    pub(crate) fn next_wakeup(&self) -> Option<Duration> {
        let spin = |until: Duration| until > self.now;
        if !self.stalled.is_empty()
            || self
                .outgoing
                .iter()
                .any(|o| o.rewritten.is_some() || spin(o.spin_until))
            || self.incoming.iter().any(|i| spin(i.spin_until))
        {
            return Some(Duration::ZERO);
        }
        self.incoming.iter().map(|i| i.deadline).min()
    }

    /// Markers whose time has come: once the worker has handed on or
    /// looked at ([`Mover::take_ahead`]) every frame its RX ring held when
    /// it learnt that a bucket's NIC entry was rewritten (RSS++'s
    /// completion rule: the ring's producer index at the rewrite passed)
    /// and, for a bucket it forwarded frames of, no further one came for
    /// [`SETTLE`] (or [`SETTLE_MAX`] passed), that bucket's marker goes to
    /// its new worker. `consumed`: frames received so far and handed on or
    /// looked at; `now`: the worker's clock. Call at the start of the
    /// worker's poll, before [`Mover::take_work`], and after a scan.
    pub(crate) fn send_markers(&mut self, now: Duration, consumed: u64) {
        let mut i = 0;
        while i < self.outgoing.len() {
            let o = &mut self.outgoing[i];
            if o.passed.is_none()
                && o.rewritten
                    .as_ref()
                    .is_some_and(|(target, _)| consumed >= *target)
            {
                o.passed = Some(now);
            }
            if o.passed.is_some_and(|at| {
                o.forwarded == 0 || now >= o.last_forward + SETTLE || now >= at + SETTLE_MAX
            }) {
                let o = self.outgoing.swap_remove(i);
                let (_, reply) = o.rewritten.expect("checked");
                if self.markers_sent.len() >= RECENT_MARKERS {
                    self.markers_sent.pop_front();
                }
                self.markers_sent.push_back((o.bucket, now));
                if !o.written && !self.unwritten.contains(&o.bucket) {
                    self.unwritten.push(o.bucket);
                }
                self.queue_message(
                    o.to,
                    Message::Drained {
                        bucket: o.bucket,
                        forwarded: o.forwarded,
                        scanned: o.scanned,
                        reply,
                    },
                );
            } else {
                i += 1;
            }
        }
    }

    /// Whether a bucket this worker gave away waits for its drain marker
    /// since its NIC entry was rewritten: the worker then looks at what
    /// its RX ring holds ahead of handing it on
    /// ([`RxProgress::scan_ahead`](crate::RxProgress::scan_ahead) with
    /// [`Mover::take_ahead`]), then calls [`Mover::send_markers`] with
    /// what the scan covered.
    pub(crate) fn draining(&self) -> bool {
        self.outgoing.iter().any(|o| o.rewritten.is_some())
    }

    /// Whether a bucket started draining since the last call: the look
    /// ahead must then include the frames an earlier look (for another
    /// bucket) left waiting, or the new bucket's among them would be
    /// handed on after its marker.
    pub(crate) fn take_new_drain(&mut self) -> bool {
        std::mem::take(&mut self.new_drain)
    }

    /// A frame still on the RX ring, ahead of the frames before it: if it
    /// is a TCP segment of a bucket that drains (its NIC entry rewritten),
    /// it is forwarded now and true returned. The frames it overtakes are
    /// other buckets': the bucket's own keep their order, so its marker
    /// need not wait for the worker to hand on everything its ring held at
    /// the rewrite (the drain of an idle bucket off a loaded queue then
    /// takes a scan of the ring's headers, not the ring's processing).
    /// What the endpoints cannot be read from is left to the pass (it
    /// matches no drained connection, or is forwarded then, late).
    pub(crate) fn take_ahead(&mut self, now: Duration, frame: &[u8]) -> bool {
        let mut draining = false;
        for o in self.outgoing.iter_mut().filter(|o| o.rewritten.is_some()) {
            o.scanned += 1;
            draining = true;
        }
        if !draining {
            return false;
        }
        let Some(e) = tcp_endpoints(frame) else {
            return false;
        };
        let (remote, local) = e.socket_addrs();
        let bucket = rss_bucket(&self.rss, &FourTuple { local, remote });
        if !self
            .outgoing
            .iter()
            .any(|o| o.bucket == bucket && o.rewritten.is_some())
        {
            return false;
        }
        self.forward(now, bucket, 0, frame);
        true
    }

    /// Reads this worker's inbox: answers what needs no stack, and returns
    /// in order what does. `now` is the worker's clock.
    pub(crate) fn take_work(&mut self, now: Duration) -> Vec<Work> {
        self.now = now;
        let inbox = &self.mesh.inboxes[self.me as usize];
        inbox.wake.clear();
        inbox.urgent.store(false, Ordering::Release);
        let mut work = Vec::new();
        let mut frames: Vec<FrameBatch> = Vec::new();
        let mut owners: Vec<(u16, u32)> = Vec::new();
        // Rewrites taken in this pass: their exports wait no longer.
        let mut rewrites: Vec<u16> = Vec::new();
        // Buckets whose last part this pass took: the import is work, done
        // after the pass's messages, but a message behind the part (a way
        // back's `Export`) must find the bucket here.
        let mut arriving: Vec<u16> = Vec::new();
        let mut taken = 0;
        for _ in 0..MESSAGES_PER_PASS {
            if taken >= MESSAGES_PER_PASS {
                break;
            }
            let Ok(m) = inbox.rx.try_recv() else {
                break;
            };
            if let Some(b) = m.batch() {
                inbox
                    .batch_bytes
                    .fetch_sub(b.allocated(), Ordering::Relaxed);
                taken += b.len();
            }
            // Frames to send keep the forwarded frames' batch together:
            // they are not part of any bucket's order.
            if m.batch().is_none() && !frames.is_empty() {
                work.push(Work::Frames(std::mem::take(&mut frames)));
            }
            match m {
                Message::Frames(b) => {
                    self.stats.frames_forwarded_in += b.len() as u64;
                    self.stats.bytes_forwarded_in += b.bytes_len() as u64;
                    frames.push(b);
                }
                Message::Transmits(b) => {
                    // A carrier whose TX ring is starved drops beyond a
                    // bound; the spill worker's TCP retransmits.
                    if self.to_send_frames + b.len() > TO_SEND_MAX {
                        self.stats.forward_dropped += b.len() as u64;
                    } else {
                        self.stats.spill_tx_in += b.len() as u64;
                        self.to_send_frames += b.len();
                        self.to_send.push_back(b);
                    }
                }
                Message::Prepare { bucket, reply } => {
                    let answer = if self.owner(bucket) == self.me || arriving.contains(&bucket) {
                        Reply::Refused(format!("bucket {bucket} is already on queue {}", self.me))
                    } else if self.incoming.iter().any(|i| i.bucket == bucket) {
                        Reply::Refused(format!("bucket {bucket} is already moving"))
                    } else {
                        // What an undone move's imports refused here is
                        // not this move's.
                        self.refused.retain(|&(b, _)| b != bucket);
                        self.incoming.push(Incoming {
                            bucket,
                            held: FrameBatch::default(),
                            deadline: now + PREPARE_TIMEOUT,
                            spin_until: now + SPIN_FOR,
                        });
                        Reply::Prepared
                    };
                    let _ = reply.send(answer);
                }
                Message::Export {
                    bucket,
                    to,
                    reply,
                    claim,
                } => {
                    if self.owner(bucket) != self.me && !arriving.contains(&bucket) {
                        let _ = reply.send(Reply::Refused(format!(
                            "bucket {bucket} is served by queue {}, not {}",
                            self.owner(bucket),
                            self.me
                        )));
                    } else if !claim.take() {
                        let _ = reply.send(Reply::Refused(format!(
                            "the export of bucket {bucket} was called off before queue {} \
                             took it",
                            self.me
                        )));
                    } else {
                        work.push(Work::Export { bucket, to, reply });
                    }
                }
                Message::Rewritten {
                    bucket,
                    reply,
                    written,
                } => {
                    rewrites.push(bucket);
                    work.push(Work::Rewritten {
                        bucket,
                        reply,
                        written,
                    });
                }
                Message::Cancel { bucket } => {
                    if let Some(pos) = self.incoming.iter().position(|i| i.bucket == bucket) {
                        let i = self.incoming.swap_remove(pos);
                        work.push(Work::Frames(vec![i.held]));
                    }
                }
                Message::Import(a) => {
                    // The export goes on: nothing can drain before the
                    // rewrite, which follows the export and the NIC's write
                    // (`Draining` starts the last-resort timeout).
                    if let Some(i) = self.incoming.iter_mut().find(|i| i.bucket == a.bucket) {
                        i.deadline = i.deadline.max(now + PREPARE_TIMEOUT);
                    }
                    if a.export.complete() {
                        arriving.push(a.bucket);
                    }
                    work.push(Work::Import(a));
                }
                Message::Draining { bucket } => {
                    if let Some(i) = self.incoming.iter_mut().find(|i| i.bucket == bucket) {
                        i.deadline = now + self.hold_timeout;
                    }
                }
                Message::Drained {
                    bucket,
                    forwarded,
                    scanned,
                    reply,
                } => {
                    let (held, timed_out) =
                        match self.incoming.iter().position(|i| i.bucket == bucket) {
                            Some(pos) => {
                                let i = self.incoming.swap_remove(pos);
                                let n = i.held.len() as u64;
                                work.push(Work::Frames(vec![i.held]));
                                (n, false)
                            }
                            None => (0, true),
                        };
                    let done = Reply::Done {
                        forwarded,
                        held,
                        scanned,
                        timed_out,
                        refused: 0,
                    };
                    self.ends.push((bucket, reply, done));
                }
            }
        }
        if !frames.is_empty() {
            work.push(Work::Frames(frames));
        }
        // An export whose rewrite never came: the controller gave up on
        // the move, or could not tell this worker.
        let before = self.outgoing.len();
        self.outgoing.retain(|o| {
            o.rewritten.is_some()
                || rewrites.contains(&o.bucket)
                || now < o.exported_at + REWRITE_TIMEOUT
        });
        self.stats.rewrite_timeouts += (before - self.outgoing.len()) as u64;
        self.mesh.take_owners(self.me, &mut owners);
        for (bucket, queue) in owners {
            // A worker that takes part in a move of the bucket learns where
            // it goes from the move itself.
            let involved = self.incoming.iter().any(|i| i.bucket == bucket)
                || self.outgoing.iter().any(|o| o.bucket == bucket);
            if queue != self.me && !involved && self.owner(bucket) != self.me {
                self.set_owner(bucket, queue);
            }
        }
        // The last resort: a marker that never came.
        let mut k = 0;
        while k < self.incoming.len() {
            if self.incoming[k].deadline <= now {
                let i = self.incoming.swap_remove(k);
                self.stats.hold_timeouts += 1;
                work.push(Work::Frames(vec![i.held]));
            } else {
                k += 1;
            }
        }
        work
    }

    /// The NIC's entry for `bucket` names its new worker now: the drain
    /// begins. `rx_end` is the number of frames received and handed on
    /// once every frame on the RX ring now is ([`RxProgress::end_now`],
    /// read after the message was taken off the inbox: a frame the NIC
    /// steered here by the old entry and published before that read is
    /// counted, where a read taken earlier in the pass would miss what
    /// arrived in between and send the marker ahead of it).
    ///
    /// [`RxProgress::end_now`]: crate::RxProgress::end_now
    /// `written`: whether the write succeeded ([`Message::Rewritten`]).
    pub(crate) fn rewritten(
        &mut self,
        bucket: u16,
        reply: Sender<Reply>,
        written: bool,
        rx_end: u64,
    ) {
        let now = self.now;
        match self.outgoing.iter_mut().find(|o| o.bucket == bucket) {
            Some(o) => {
                o.rewritten = Some((rx_end, reply));
                o.written = written;
                self.new_drain = true;
                // The wait for a quiet bucket runs from here at the
                // earliest ([`SETTLE`]).
                o.last_forward = o.last_forward.max(now);
                // The new worker's hold may time out from here on, no
                // earlier: before, nothing could drain.
                let to = o.to;
                self.queue_message(to, Message::Draining { bucket });
            }
            None => {
                let _ = reply.send(Reply::Refused(format!(
                    "queue {} has no move of bucket {bucket} under way",
                    self.me
                )));
            }
        }
    }

    /// `bucket` is about to leave for `to` (its export begins): this
    /// worker's view of the table ([`Mover::rss`], which the ports of the
    /// connections its handlers open follow) gives it to `to` already, so
    /// that a connection a handler opens during the export lands in a
    /// bucket that stays.
    pub(crate) fn leaving(&mut self, bucket: u16, to: u32) {
        self.set_owner(bucket, to);
    }

    /// The bucket left this worker: frames of it now go to `to`.
    pub(crate) fn exported(&mut self, bucket: u16, to: u32, arrival: Box<Arrival>) {
        self.set_owner(bucket, to);
        self.stats.buckets_out += 1;
        self.outgoing.retain(|o| o.bucket != bucket);
        self.outgoing.push(Outgoing {
            bucket,
            to,
            exported_at: self.now,
            forwarded: 0,
            last_forward: self.now,
            rewritten: None,
            written: false,
            passed: None,
            scanned: 0,
            spin_until: self.now + SPIN_FOR,
        });
        self.queue_message(to, Message::Import(arrival));
    }

    /// A part of a bucket this worker is still exporting: it goes into
    /// `to`'s inbox at once, so that `to` imports it while this worker
    /// exports the next (the last part goes through [`Mover::exported`]).
    /// No wake-up here: `to` spins since the move's `Prepare`
    /// ([`SPIN_FOR`]), and the pass's [`Mover::flush`] wakes it anyway.
    pub(crate) fn export_part(&mut self, to: u32, arrival: Box<Arrival>) {
        self.queue_message(to, Message::Import(arrival));
    }

    /// A part of a bucket arrived here; `complete`: the last one, after
    /// which this worker serves the bucket.
    pub(crate) fn imported(&mut self, bucket: u16, failed: usize, complete: bool) {
        self.stats.import_failed += failed as u64;
        if failed > 0 {
            match self.refused.iter_mut().find(|(b, _)| *b == bucket) {
                Some((_, n)) => *n += failed,
                None => self.refused.push((bucket, failed)),
            }
        }
        if complete {
            self.set_owner(bucket, self.me);
            self.outgoing.retain(|o| o.bucket != bucket);
            self.unwritten.retain(|&b| b != bucket);
            self.stats.buckets_in += 1;
        }
    }

    /// The eventfd that wakes this worker when a message arrives.
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        self.mesh.wake_fd(self.me)
    }
}

/// What a move needs of the NIC: pointing one indirection-table entry at
/// another queue. Every [`RssNic`](flowlane_numa_sched::nic::RssNic) (a
/// real NIC through ethtool, the test bed's emulated NIC) is one.
pub trait RssTableWriter: Send + Sync {
    /// Points `bucket` at `queue`.
    ///
    /// # Errors
    /// What the NIC said, in one line.
    fn set_entry(&self, bucket: u16, queue: u32) -> Result<(), String>;
}

/// A bucket outside the NIC's table, or (through
/// [`ServiceTable`](flowlane_numa_sched::nic::ServiceTable)) a NIC table no
/// longer the size of the service's, is refused with both sizes and
/// nothing written ([`RssNic::set_entries`](flowlane_numa_sched::nic::RssNic::set_entries)):
/// the move is then undone, not reported done with the NIC still sending
/// the bucket's frames to the old queue.
impl<N> RssTableWriter for N
where
    N: flowlane_numa_sched::nic::RssNic + Send + Sync,
    N::Error: std::fmt::Display + From<flowlane_numa_sched::nic::RssSettingsError>,
{
    fn set_entry(&self, bucket: u16, queue: u32) -> Result<(), String> {
        self.set_entries(&[(usize::from(bucket), queue)])
            .map_err(|e| format!("{e:#}"))
    }
}

#[cfg(test)]
mod table_writer_tests {
    //! The writer every `RssNic` is, on a NIC whose table changed size
    //! under the service (`ethtool -L`).
    use super::RssTableWriter;
    use flowlane_numa_sched::nic::{RssCaps, RssNic, RssSettings, RssSettingsError, ServiceTable};
    use std::sync::Mutex;

    /// What the NIC said, as its words.
    #[derive(Debug)]
    struct Said(String);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl From<RssSettingsError> for Said {
        fn from(e: RssSettingsError) -> Said {
            Said(e.to_string())
        }
    }

    /// A NIC's table in memory, and how many times it was written.
    struct Table(Mutex<(Vec<u32>, usize)>);

    impl Table {
        fn new(size: usize) -> Table {
            Table(Mutex::new((vec![0; size], 0)))
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
    }

    impl RssNic for Table {
        type Error = Said;
        fn name(&self) -> &str {
            "tbl0"
        }
        fn caps(&self) -> Result<RssCaps, Said> {
            Ok(RssCaps {
                queues: 4,
                key_len: 40,
                table_size: self.0.lock().unwrap().0.len(),
            })
        }
        fn rss(&self) -> Result<RssSettings, Said> {
            Ok(RssSettings {
                key: vec![0; 40],
                table: self.0.lock().unwrap().0.clone(),
            })
        }
        fn set_rss(&self, _key: Option<&[u8]>, table: Option<&[u32]>) -> Result<(), Said> {
            let mut t = self.0.lock().unwrap();
            t.0 = table.expect("a table").to_vec();
            t.1 += 1;
            Ok(())
        }
    }

    #[test]
    fn a_bucket_past_a_table_that_shrank_is_refused() {
        let nic = Table::new(64);
        let e = nic.set_entry(100, 1).unwrap_err();
        assert!(
            e.starts_with("bucket 100 is outside the NIC's indirection table of 64 entries"),
            "{e}"
        );
        assert_eq!(nic.writes(), 0, "nothing written");
        nic.set_entry(63, 1).unwrap();
        assert_eq!((nic.writes(), nic.rss().unwrap().table[63]), (1, 1));
    }

    #[test]
    fn a_table_that_grew_under_the_service_is_refused() {
        // The service read 128 entries; the NIC has 256 now.
        let nic = ServiceTable::new(Table::new(256), 128);
        let e = nic.set_entry(5, 1).unwrap_err();
        assert!(
            e.starts_with("the NIC's indirection table has 256 entries now, but the service's RSS has 128 buckets"),
            "{e}"
        );
        assert!(
            nic.rss().unwrap().table.iter().all(|&q| q == 0),
            "nothing written"
        );
    }
}

/// The NIC a service writes when it moves buckets.
#[derive(Clone)]
pub struct NicWriter(pub Arc<dyn RssTableWriter>);

impl std::fmt::Debug for NicWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NicWriter(..)")
    }
}

/// Longest the controller waits for one worker's answer.
const STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest it waits on for an export the old worker took before
/// [`STEP_TIMEOUT`] ran out ([`ExportClaim`]): the export is under way.
const TAKEN_EXPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// A worker's answer: checked for, yielding the CPU in between, for
/// [`REPLY_SPIN`] (the workers taking part spin too, so an answer usually
/// comes within microseconds), then slept on.
fn wait(rx: &Receiver<Reply>, who: u32, what: &str) -> Result<Reply, String> {
    let started = std::time::Instant::now();
    while started.elapsed() < REPLY_SPIN {
        match rx.try_recv() {
            Ok(r) => return Ok(r),
            Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
            Err(crossbeam_channel::TryRecvError::Disconnected) => break,
        }
    }
    rx.recv_timeout(STEP_TIMEOUT)
        .map_err(|_| format!("queue {who} did not answer {what} within {STEP_TIMEOUT:?}"))
}

/// Why a move failed, and where the bucket is afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MoveError {
    /// The bucket stayed on (or went back to) its old queue.
    Stayed(String),
    /// The bucket is on the new queue, but the NIC still sends its frames
    /// to the old one, which forwards them.
    Moved(String),
}

/// The NIC's entry already names the queue (an undo writes nothing).
struct Unchanged;

impl RssTableWriter for Unchanged {
    fn set_entry(&self, _bucket: u16, _queue: u32) -> Result<(), String> {
        Ok(())
    }
}

/// Moves `bucket` from queue `from` to queue `to` (the controller's side;
/// one move at a time). On success the new queue serves the bucket. If
/// writing the NIC fails, the move is undone (the same handoff the other
/// way, the NIC's entry untouched): the old queue serves the bucket again
/// and the error says so; only if the undo fails too does the new queue
/// keep it, the old one forwarding its frames ([`MoveError::Moved`]).
///
/// The NIC's entry is written as soon as the new queue holds the bucket's
/// frames, while the old queue exports (a NIC whose table write is slow
/// costs the move the longer of the two, not their sum), and the old queue
/// learns of the rewrite right behind the export, often in the same pass.
/// An export refused after the write points the entry back.
///
/// Once the bucket is on the new queue, every other queue's worker is told
/// ([`Mesh::tell_owner`]): a frame one of them forwards (an ICMP error that
/// the NIC hashed to it) goes there at once, not along the bucket's
/// earlier owners (a chain longer than a frame's hops would drop it).
pub(crate) fn move_bucket(
    mesh: &Mesh,
    nic: &dyn RssTableWriter,
    bucket: u16,
    from: u32,
    to: u32,
) -> Result<MoveReport, MoveError> {
    let result = handoff(mesh, nic, bucket, from, to);
    if matches!(result, Ok(_) | Err(MoveError::Moved(_))) {
        for q in (0..mesh.queues()).filter(|&q| q != from && q != to) {
            mesh.tell_owner(q, bucket, to);
        }
    }
    result
}

/// Moves `bucket` back to `from` after it went to `to` in a move that
/// failed (`why`): the same handoff the other way, the NIC's entry
/// untouched (it still names `from`). The bucket is then back
/// ([`MoveError::Stayed`]), or, if the way back failed before the bucket
/// left `to`, still on `to`, `from` forwarding its frames
/// ([`MoveError::Moved`]). The way back's own errors say where the bucket
/// is from its side: its `Moved` (the bucket reached its destination,
/// `from`, but a later step failed) is this move's `Stayed`, and its
/// `Stayed` (the bucket stayed on `to`) this move's `Moved`.
fn undo(mesh: &Mesh, bucket: u16, from: u32, to: u32, why: &str) -> MoveError {
    match handoff(mesh, &Unchanged, bucket, to, from) {
        Ok(_) => MoveError::Stayed(format!("{why}: bucket {bucket} stays on queue {from}")),
        Err(MoveError::Moved(back)) => MoveError::Stayed(format!(
            "{why}: bucket {bucket} stays on queue {from} (moving it back: {back})"
        )),
        Err(MoveError::Stayed(back)) => MoveError::Moved(format!(
            "{why}, and moving bucket {bucket} back failed ({back}): it stays on queue {to}, \
             queue {from} forwarding its frames"
        )),
    }
}

/// [`move_bucket`] without telling the other workers.
fn handoff(
    mesh: &Mesh,
    nic: &dyn RssTableWriter,
    bucket: u16,
    from: u32,
    to: u32,
) -> Result<MoveReport, MoveError> {
    let started = std::time::Instant::now();
    let (tx, rx) = crossbeam_channel::unbounded();
    let (prepared_tx, prepared_rx) = crossbeam_channel::bounded(1);
    let stayed = MoveError::Stayed;
    // Both at once: the new queue must hold the bucket's frames before the
    // NIC's entry is written, not before the export, and the old queue's
    // `Import` reaches the new queue's inbox behind this `Prepare`.
    mesh.send(
        to,
        Message::Prepare {
            bucket,
            reply: prepared_tx,
        },
    )
    .map_err(stayed)?;
    let export_start = std::time::Instant::now();
    let claim = ExportClaim::default();
    let export_sent = mesh.send(
        from,
        Message::Export {
            bucket,
            to,
            reply: tx.clone(),
            claim: claim.clone(),
        },
    );
    let prepared = wait(&prepared_rx, to, "the announcement of the bucket");
    // The new queue holds the bucket's frames from here on: the entry is
    // written while the old queue exports, and the rewrite queued behind
    // the export.
    let (mut written, mut nic_write_us) = (None, 0.0);
    let mut rewritten_sent = Err(String::new());
    if matches!(prepared, Ok(Reply::Prepared)) && export_sent.is_ok() {
        let nic_start = std::time::Instant::now();
        let write = nic.set_entry(bucket, to);
        nic_write_us = micros(nic_start.elapsed());
        rewritten_sent = mesh.send(
            from,
            Message::Rewritten {
                bucket,
                reply: tx,
                written: write.is_ok(),
            },
        );
        written = Some(write);
    }
    // A new queue that did not answer its announcement may take it yet,
    // and would hold the bucket's frames until its timeout: it is told
    // the move is off (before anything else the controller sends it).
    let not_told = if prepared.is_err() {
        cancel(mesh, to, bucket)
    } else {
        String::new()
    };
    let mut exported = export_sent.and_then(|()| wait(&rx, from, "the export"));
    if exported.is_err() && !claim.call_off() {
        // The old worker took the export before the wait ran out: it is
        // under way, and its answer decides where the bucket is.
        exported = rx.recv_timeout(TAKEN_EXPORT_TIMEOUT).map_err(|_| {
            format!(
                "queue {from} took the export but did not answer within {TAKEN_EXPORT_TIMEOUT:?}"
            )
        });
        if let Err(e) = exported {
            // Still exporting, or wedged: the bucket is on its way to the
            // new worker, which holds its frames; the NIC names it already.
            return Err(MoveError::Moved(format!(
                "{e}: bucket {bucket} is taken to be on queue {to}"
            )));
        }
    }
    let refusal = |r: Result<Reply, String>, step: &str, who: u32| match r {
        Ok(Reply::Refused(e)) | Err(e) => e,
        Ok(other) => format!("queue {who} answered {other:?} to {step}"),
    };
    let (connections, time_wait) = match (prepared, exported) {
        (
            Ok(Reply::Prepared),
            Ok(Reply::Exported {
                connections,
                time_wait,
            }),
        ) => (connections, time_wait),
        // Exported to a queue that does not hold the bucket's frames (the
        // NIC's entry untouched): bring the connections back before
        // anything else reaches them.
        (prepared, Ok(Reply::Exported { .. })) => {
            let why = refusal(prepared, "the announcement", to);
            return Err(undo(
                mesh,
                bucket,
                from,
                to,
                &format!(
                    "{why}{not_told}; queue {from} exported bucket {bucket} to queue {to} all \
                     the same"
                ),
            ));
        }
        (prepared, exported) => {
            if !matches!(prepared, Ok(Reply::Prepared)) {
                let why = refusal(prepared, "the announcement", to);
                return Err(stayed(format!("{why}{not_told}")));
            }
            // The old queue kept the bucket: the entry goes back to it, and
            // the new queue hands on what it held (its stack sends the
            // frames back to the old queue).
            let why = refusal(exported, "the export", from);
            let back = match written {
                Some(Ok(())) => nic.set_entry(bucket, from).err(),
                _ => None,
            };
            let not_told = cancel(mesh, to, bucket);
            return Err(stayed(match back {
                None => format!("{why}{not_told}"),
                Some(e) => format!(
                    "{why}; the NIC's entry for bucket {bucket} could not be pointed back at \
                     queue {from} ({e}): queue {to} forwards its frames there{not_told}"
                ),
            }));
        }
    };
    // From here on the new queue has the connections.
    let export_us = micros(export_start.elapsed());
    let drain_start = std::time::Instant::now();
    let drained = match rewritten_sent {
        Ok(()) => match wait(&rx, to, "the end of the move") {
            Ok(Reply::Done {
                forwarded,
                held,
                scanned,
                timed_out,
                refused,
            }) => Ok((forwarded, held, scanned, timed_out, refused)),
            Ok(Reply::Refused(e)) | Err(e) => Err(e),
            Ok(other) => Err(format!(
                "queue {to} answered {other:?} at the end of the move"
            )),
        },
        // Queue `from` stops waiting for it after `REWRITE_TIMEOUT`, and
        // `to` holds the bucket's frames until its own timeout.
        Err(e) => Err(format!("the NIC's rewrite could not be told: {e}")),
    };
    let drain_us = micros(drain_start.elapsed());
    if let Some(Err(e)) = written {
        // The entry still names the old queue: the bucket goes back there,
        // however its drain went.
        let why = format!("the NIC's entry for bucket {bucket} could not be written ({e})");
        let why = match &drained {
            Ok(_) => why,
            Err(d) => format!("{why}, and {d}"),
        };
        return Err(undo(mesh, bucket, from, to, &why));
    }
    let (frames_forwarded, frames_held, frames_scanned, hold_timed_out, connections_refused) =
        drained.map_err(MoveError::Moved)?;
    Ok(MoveReport {
        bucket,
        from,
        to,
        connections,
        connections_refused,
        time_wait,
        frames_forwarded,
        frames_held,
        frames_scanned,
        duration_us: micros(started.elapsed()),
        export_us,
        nic_write_us,
        drain_us,
        hold_timed_out,
    })
}

/// Tells `to` that the move of `bucket` is off: it stops holding the
/// bucket's frames. Returns what the move's error adds when `to` could
/// not be told (a worker stuck for good: its hold ends on its timeout,
/// counted in its `hold_timeouts`), else nothing.
fn cancel(mesh: &Mesh, to: u32, bucket: u16) -> String {
    match mesh.send(to, Message::Cancel { bucket }) {
        Ok(()) => String::new(),
        Err(e) => format!(
            "; queue {to} was not told that the move is off ({e}): it holds bucket {bucket}'s \
             frames until its timeout"
        ),
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
#[path = "forward_bench.rs"]
mod forward_bench;

#[cfg(test)]
#[path = "mesh_tests.rs"]
pub(crate) mod mesh_tests;
