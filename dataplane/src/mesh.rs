//! The workers' inboxes: one bounded lock-free channel per queue, with an
//! eventfd that wakes its idle worker, and the news of where buckets went.
//!
//! The workers fill an inbox with forwarded frames, frames to send and
//! the messages of their own part in moves ([`INBOX`] messages,
//! [`INBOX_BYTES`] of frames); a worker keeps what finds it full and
//! tries again at the end of its pass (`Mover::flush`). The controller
//! (the service's main thread) cannot wait like that in the middle of a
//! move, and a move's control messages must not be dropped like frames:
//! each inbox has [`CONTROL_ROOM`] places past the workers' share that
//! only the controller's messages take, in order with the rest. The
//! news of a finished move (which queue serves a bucket now) goes beside
//! the channel, one entry per bucket, the latest winning: it cannot fill
//! an inbox however long a worker does not look.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use flowlane_app::Wake;

use super::Message;
use crate::frame_batch::FrameBatch;
use crate::wake::FdWake;

/// Messages the workers put in one inbox at most (each sender may pass
/// it by one).
pub(super) const INBOX: usize = 16_384;
/// Bytes of frame batches one inbox holds (their allocations: about
/// 16 000 full-sized frames; each sender may pass it by one batch); a
/// batch beyond it waits with its sender (`STALLED_BYTES`).
pub(super) const INBOX_BYTES: usize = 24 << 20;
/// Places of each inbox, past the workers' [`INBOX`] (and the one each
/// worker may pass it by), that only the controller's messages take: a
/// move's `Prepare`, `Export`, `Rewritten` and `Cancel` reach a worker
/// however full the other workers' frames made its inbox. The controller
/// moves one bucket at a time and waits for each answer, so a worker
/// that takes its inbox at all never has more than a few of them
/// waiting; only one that took none through this many of the
/// controller's messages (a worker stuck for good) refuses one, and the
/// move then fails with a line that says so.
pub(super) const CONTROL_ROOM: usize = 256;

/// A worker's inbox.
pub(super) struct Inbox {
    tx: Sender<Message>,
    pub(super) rx: Receiver<Message>,
    pub(super) wake: Arc<FdWake>,
    /// Set with each message of a move's sequence (everything but
    /// forwarded frames and frames to send), cleared when the worker takes
    /// its messages: a loaded worker then ends its receive pass after the
    /// batch at hand (`Mover::urgent`) instead of up to `RX_BUDGET_MAX`
    /// frames later, so a move off a busy core does not wait for a whole
    /// pass at each of its steps.
    pub(super) urgent: AtomicBool,
    /// Bytes of the frame batches in the inbox ([`INBOX_BYTES`]).
    pub(super) batch_bytes: AtomicUsize,
    /// Which queue serves each bucket whose move this worker took no part
    /// in, since it last looked (one entry per bucket, the latest move's).
    owners: Mutex<Vec<(u16, u32)>>,
    /// `owners` holds news.
    owners_news: AtomicBool,
}

/// Every queue's inbox, by queue number.
pub(crate) struct Mesh {
    pub(super) inboxes: Vec<Inbox>,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("queues", &self.inboxes.len())
            .finish()
    }
}

impl Mesh {
    /// Inboxes for queues `0..queues`.
    pub(crate) fn new(queues: u32) -> std::io::Result<Mesh> {
        // Room for what the workers may put in (each of the others may
        // pass its share by one) and for the controller's own.
        let capacity = INBOX + queues as usize + CONTROL_ROOM;
        let inboxes = (0..queues)
            .map(|_| {
                let (tx, rx) = crossbeam_channel::bounded(capacity);
                Ok(Inbox {
                    tx,
                    rx,
                    wake: FdWake::new()?,
                    urgent: AtomicBool::new(false),
                    batch_bytes: AtomicUsize::new(0),
                    owners: Mutex::new(Vec::new()),
                    owners_news: AtomicBool::new(false),
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Mesh { inboxes })
    }

    /// Queues in the mesh.
    pub(crate) fn queues(&self) -> u32 {
        self.inboxes.len() as u32
    }

    /// Puts a worker's `m` in `to`'s inbox without waking it, within the
    /// workers' share ([`INBOX`], [`INBOX_BYTES`]); gives it back if the
    /// inbox has no room for it (or `to` is no queue of the mesh).
    pub(super) fn push(&self, to: u32, m: Message) -> Result<(), Message> {
        self.put(to, m, true)
    }

    /// Puts `m` in `to`'s inbox; `worker`: within the workers' share,
    /// else (the controller's) in the whole inbox.
    fn put(&self, to: u32, m: Message, worker: bool) -> Result<(), Message> {
        let Some(i) = self.inboxes.get(to as usize) else {
            return Err(m);
        };
        if worker && i.tx.len() >= INBOX {
            return Err(m);
        }
        let urgent = m.urgent();
        let bytes = m.batch().map_or(0, FrameBatch::allocated);
        // Counted before it can be taken (and its bytes given back);
        // several senders may each pass the bound by a batch.
        if bytes > 0 && i.batch_bytes.fetch_add(bytes, Ordering::Relaxed) >= INBOX_BYTES {
            i.batch_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return Err(m);
        }
        i.tx.try_send(m).map_err(|e| {
            i.batch_bytes.fetch_sub(bytes, Ordering::Relaxed);
            match e {
                TrySendError::Full(m) | TrySendError::Disconnected(m) => m,
            }
        })?;
        if urgent {
            i.urgent.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Wakes `to` from its idle poll.
    pub(super) fn wake(&self, to: u32) {
        if let Some(i) = self.inboxes.get(to as usize) {
            i.wake.wake();
        }
    }

    /// Puts the controller's `m` in `to`'s inbox (its own room included:
    /// [`CONTROL_ROOM`]) and wakes it.
    ///
    /// # Errors
    /// `to` is no queue of the mesh, or its worker took none of the
    /// controller's last [`CONTROL_ROOM`] messages, in one line.
    pub(crate) fn send(&self, to: u32, m: Message) -> Result<(), String> {
        if to >= self.queues() {
            return Err(format!(
                "queue {to} is not one of the service's {} queues",
                self.queues()
            ));
        }
        self.put(to, m, false).map_err(|_| {
            format!(
                "queue {to}'s inbox is full to the controller's own {CONTROL_ROOM} places: \
                 its worker has stopped taking its messages"
            )
        })?;
        self.wake(to);
        Ok(())
    }

    /// Tells `to` (which took no part in the move) that `queue` serves
    /// `bucket` now, and wakes it; news of an earlier move of the bucket
    /// that `to` has not read yet is replaced. Never refused.
    pub(crate) fn tell_owner(&self, to: u32, bucket: u16, queue: u32) {
        let Some(i) = self.inboxes.get(to as usize) else {
            return;
        };
        let mut owners = i.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.iter_mut().find(|(b, _)| *b == bucket) {
            Some(o) => o.1 = queue,
            None => owners.push((bucket, queue)),
        }
        i.owners_news.store(true, Ordering::Release);
        drop(owners);
        self.wake(to);
    }

    /// The news [`Mesh::tell_owner`] left for `queue` since it last
    /// looked, into `into` (one flag read when there is none).
    pub(super) fn take_owners(&self, queue: u32, into: &mut Vec<(u16, u32)>) {
        let Some(i) = self.inboxes.get(queue as usize) else {
            return;
        };
        if i.owners_news.swap(false, Ordering::AcqRel) {
            let mut owners = i.owners.lock().unwrap_or_else(|e| e.into_inner());
            into.append(&mut owners);
        }
    }

    /// The eventfd that wakes `queue`'s worker.
    pub(crate) fn wake_fd(&self, queue: u32) -> Option<RawFd> {
        self.inboxes.get(queue as usize).map(|i| i.wake.raw_fd())
    }

    /// Messages waiting in `queue`'s inbox (for a harness that steps the
    /// workers itself and must know when the controller has sent).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn pending(&self, queue: u32) -> usize {
        self.inboxes.get(queue as usize).map_or(0, |i| i.rx.len())
    }
}
