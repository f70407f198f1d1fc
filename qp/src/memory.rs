//! A network core's memory budget for what its relay holds for the
//! application threads, whatever the number of connections: received
//! bytes handed over in pooled buffers and not read yet, and bytes the
//! threads asked to send that the core's stack has not taken yet. The
//! role of the kernel backend's per-core limits (`flowlane_kernel::Limits`,
//! `rx_memory` and `tx_memory`): past it, a connection's bytes stay in the
//! TCP layer (its window closes; on kernel sockets the socket buffer
//! fills), and the application's sends are short, until memory frees; the
//! connections that waited get it in the order they began to wait, so
//! that none starves the others. Nothing is dropped, nothing reset.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of received data a core's relay may have handed to application
/// threads and not seen read yet (each connection's part of it its
/// credit, at most `message::RX_CREDIT`): 256 connections' full credits.
pub(crate) const RX_MEMORY: usize = 64 << 20;
/// Bytes the application threads may have asked a core to send that its
/// stack has not taken yet (each connection's part at most
/// `message::TX_CREDIT`): 256 connections' full credits.
pub(crate) const TX_MEMORY: usize = 64 << 20;

/// One direction's budget of one core: taken by whoever hands bytes on
/// (the core's relay as it delivers, an application thread as it sends),
/// given back by whoever sees them gone (read by the thread, taken by the
/// stack). Atomic: a thread takes what the core gives back.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    held: AtomicUsize,
    peak: AtomicUsize,
    /// Connections that began to wait for memory.
    waits: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// Bytes that may still be taken.
    pub(crate) fn room(&self) -> usize {
        self.limit.saturating_sub(self.held.load(Ordering::Relaxed))
    }

    /// Takes as much of `want` as the limit leaves; returns how much.
    pub(crate) fn take(&self, want: usize) -> usize {
        let mut taken = 0;
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                taken = want.min(self.limit.saturating_sub(held));
                (taken > 0).then_some(held + taken)
            });
        if taken > 0 {
            self.note_peak();
        }
        taken
    }

    /// Gives back `n` bytes taken before.
    pub(crate) fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(n))
            })
            .unwrap_or_default();
        debug_assert!(before >= n, "gave back {n} of {before} held");
    }

    /// A connection began to wait for memory.
    pub(crate) fn waited(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }

    fn note_peak(&self) {
        self.peak
            .fetch_max(self.held.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn report(&self) -> (u64, u64, u64, u64) {
        (
            self.limit as u64,
            self.held.load(Ordering::Relaxed) as u64,
            self.peak.load(Ordering::Relaxed) as u64,
            self.waits.load(Ordering::Relaxed),
        )
    }
}

/// One network core's budgets, shared by its relay and the application
/// threads (which take from its `tx` as they send to it); and what its
/// relay's buffer pool keeps and gave back.
#[derive(Debug)]
pub(crate) struct CoreMemory {
    /// Received bytes handed to application threads, not read yet.
    pub(crate) rx: Budget,
    /// Bytes the threads asked to send that the stack has not taken.
    pub(crate) tx: Budget,
    /// Bytes of receive buffers the relay keeps for reuse, as of its last
    /// trim (a gauge, written by the relay each `relay::TRIM_EVERY`).
    pool_cached: AtomicUsize,
    /// Bytes of idle buffers the relay's trims gave back to the allocator.
    returned: AtomicU64,
}

impl CoreMemory {
    pub(crate) fn new(rx: usize, tx: usize) -> CoreMemory {
        CoreMemory {
            rx: Budget::new(rx),
            tx: Budget::new(tx),
            pool_cached: AtomicUsize::new(0),
            returned: AtomicU64::new(0),
        }
    }

    /// The relay's pool keeps `bytes` now.
    pub(crate) fn set_pool_cached(&self, bytes: usize) {
        self.pool_cached.store(bytes, Ordering::Relaxed);
    }

    /// The relay gave `bytes` of buffers back to the allocator.
    pub(crate) fn returned(&self, bytes: usize) {
        if bytes > 0 {
            self.returned.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// What it holds now, and held at most.
    pub(crate) fn report(&self) -> RelayMemory {
        let (rx_limit, rx_held, rx_peak, rx_waits) = self.rx.report();
        let (tx_limit, tx_held, tx_peak, tx_waits) = self.tx.report();
        RelayMemory {
            rx_limit,
            rx_held,
            rx_peak,
            rx_waits,
            tx_limit,
            tx_held,
            tx_peak,
            tx_waits,
            pool_cached: self.pool_cached.load(Ordering::Relaxed) as u64,
            returned: self.returned.load(Ordering::Relaxed),
        }
    }
}

/// Which of a core's budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Rx,
    Tx,
}

/// Bytes held against one core's budget, one way: given back as they go
/// ([`Charge::give`]), the rest when dropped, so that no path a
/// connection or a request ends on (a connection closed or reset, a
/// thread that died with requests or events still queued) keeps them.
/// Bytes that come with a connection from another core (it moved with its
/// RSS bucket, or a send reached it there) are held here as far as this
/// core's budget has room, the rest where they were until given back
/// (first): no core holds more than its budget, however connections move.
pub(crate) struct Charge {
    memory: Arc<Vec<CoreMemory>>,
    way: Way,
    /// The core whose budget new bytes are taken from, and the bytes held
    /// there.
    core: u32,
    bytes: usize,
    /// Bytes held on other cores (by core), given back before `bytes`.
    left: Vec<(u32, usize)>,
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Charge({:?} {} on core {}, {:?} elsewhere)",
            self.way, self.bytes, self.core, self.left
        )
    }
}

impl Charge {
    /// Nothing held yet against core `core`'s `way` budget.
    pub(crate) fn none(memory: Arc<Vec<CoreMemory>>, core: u32, way: Way) -> Charge {
        Charge {
            memory,
            way,
            core,
            bytes: 0,
            left: Vec::new(),
        }
    }

    fn budget(&self, core: u32) -> &Budget {
        let m = &self.memory[core as usize];
        match self.way {
            Way::Rx => &m.rx,
            Way::Tx => &m.tx,
        }
    }

    /// Bytes held, on every core.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.left.iter().map(|&(_, n)| n).sum::<usize>()
    }

    /// Bytes its core's budget has room for now.
    pub(crate) fn room(&self) -> usize {
        self.budget(self.core).room()
    }

    /// Takes as much more of `want` as its core's budget leaves; returns
    /// how much.
    pub(crate) fn take(&mut self, want: usize) -> usize {
        let n = self.budget(self.core).take(want);
        self.bytes += n;
        n
    }

    /// Gives back `n` of the bytes held (at most all): those held on other
    /// cores first.
    pub(crate) fn give(&mut self, mut n: usize) {
        while n > 0 {
            let Some((core, held)) = self.left.first_mut() else {
                break;
            };
            let k = n.min(*held);
            let core = *core;
            *held -= k;
            n -= k;
            if *held == 0 {
                self.left.remove(0);
            }
            self.budget(core).give(k);
        }
        let n = n.min(self.bytes);
        self.budget(self.core).give(n);
        self.bytes -= n;
    }

    /// Counts a connection that began to wait for its core's budget.
    pub(crate) fn waited(&self) {
        self.budget(self.core).waited();
    }

    /// Holds what `other` held (the same way): on this charge's core as
    /// far as its budget has room, the rest where it was.
    pub(crate) fn absorb(&mut self, mut other: Charge) {
        debug_assert_eq!(self.way, other.way);
        self.left.append(&mut other.left);
        let (core, n) = (other.core, std::mem::take(&mut other.bytes));
        self.hold(core, n);
    }

    /// Holds its bytes against core `core`'s budget from now on (the
    /// connection moved there), as far as it has room; new bytes are
    /// taken there.
    pub(crate) fn move_to(&mut self, core: u32) {
        if core != self.core {
            let (from, n) = (self.core, std::mem::take(&mut self.bytes));
            self.core = core;
            self.hold(from, n);
        }
    }

    /// Holds `n` bytes now held on core `from` here, as far as this
    /// core's budget has room: the rest stays on `from`.
    fn hold(&mut self, from: u32, n: usize) {
        if from == self.core {
            self.bytes += n;
            return;
        }
        let moved = self.budget(self.core).take(n);
        self.budget(from).give(moved);
        self.bytes += moved;
        if n > moved {
            self.left.push((from, n - moved));
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.give(self.bytes());
    }
}

/// What one network core's relay holds for the application threads,
/// against its budget ([`crate::QueuePairs::memory`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayMemory {
    /// Bytes of received data it may hand over and not see read yet.
    pub rx_limit: u64,
    /// Bytes handed over and not read yet, now.
    pub rx_held: u64,
    /// The most held at once.
    pub rx_peak: u64,
    /// Connections that began to wait for receive memory (their bytes
    /// left in the stack meanwhile).
    pub rx_waits: u64,
    /// Bytes the threads may have asked to send that the stack has not
    /// taken.
    pub tx_limit: u64,
    /// Bytes asked to be sent and not taken by the stack yet, now.
    pub tx_held: u64,
    /// The most held at once.
    pub tx_peak: u64,
    /// Connections whose sends began to wait for send memory (short
    /// sends, `Writable` once it frees).
    pub tx_waits: u64,
    /// Bytes of receive buffers the relay keeps for reuse, as of its last
    /// trim (each second): what a busy spell left, halved each second it
    /// lies idle, down to 256 KiB
    /// ([`flowlane_tcp::kept::TRIM_FLOOR_BYTES`]).
    pub pool_cached: u64,
    /// Bytes of idle buffers the relay's trims gave back to the allocator
    /// so far: what the service's heap trim watches, with the stacks' own.
    /// (Buffers freed past the pool's bound while busy are not counted:
    /// the load reuses that memory at once.)
    pub returned: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes stop at the limit (in part when partly free), and what is
    /// given back is taken again.
    #[test]
    fn a_budget_takes_within_its_limit() {
        let b = Budget::new(100);
        assert_eq!(b.take(60), 60);
        assert_eq!(b.take(60), 40);
        assert_eq!(b.take(1), 0);
        assert_eq!(b.room(), 0);
        b.give(30);
        assert_eq!(b.room(), 30);
        assert_eq!(b.take(100), 30);
        let mut m = CoreMemory::new(1, 1);
        m.rx = b;
        let r = m.report();
        assert_eq!((r.rx_held, r.rx_peak, r.rx_limit), (100, 100, 100));
    }

    /// A charge gives back what it holds as it goes, moves with its
    /// connection to another core's budget as far as that has room (the
    /// rest stays where it was, given back first), takes in another's
    /// likewise, and gives back everything when dropped.
    #[test]
    fn a_charge_gives_back_what_it_holds_and_moves_within_budgets() {
        let memory = Arc::new(vec![CoreMemory::new(10, 10), CoreMemory::new(10, 10)]);
        let held = |core: usize| memory[core].report().tx_held;
        let mut a = Charge::none(memory.clone(), 0, Way::Tx);
        assert_eq!(a.take(7), 7);
        a.give(2);
        assert_eq!(held(0), 5);
        a.move_to(1);
        assert_eq!((held(0), held(1)), (0, 5));
        let mut b = Charge::none(memory.clone(), 0, Way::Tx);
        assert_eq!(b.take(20), 10);
        a.absorb(b);
        // Core 1 had room for 5 of b's 10.
        assert_eq!((held(0), held(1), a.bytes()), (5, 10, 15));
        assert_eq!(a.room(), 0);
        a.give(6);
        assert_eq!((held(0), held(1)), (0, 9));
        drop(a);
        assert_eq!((held(0), held(1)), (0, 0));
    }
}
