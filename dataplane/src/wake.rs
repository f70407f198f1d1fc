//! Waking a queue's worker from another thread: an eventfd the idle worker
//! polls beside its socket, armed once per wake-up. Both of a worker's
//! wake-ups are one: its application's (queue-pair mode, [`Wake`]) and its
//! bucket-move inbox's (`handoff::Mesh`).

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flowlane_app::Wake;
use nix::sys::eventfd::{EfdFlags, EventFd};

/// The [`Wake`] a queue's handlers hand to other threads
/// ([`flowlane_app::Net::waker`]).
#[derive(Debug)]
pub(crate) struct FdWake {
    fd: EventFd,
    /// Set by a wake not yet seen by the worker: further wakes write
    /// nothing, and the worker reads the eventfd only when it is set.
    armed: AtomicBool,
}

impl FdWake {
    pub(crate) fn new() -> std::io::Result<Arc<FdWake>> {
        Ok(Arc::new(FdWake {
            fd: EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?,
            armed: AtomicBool::new(false),
        }))
    }

    /// What the idle worker polls.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    /// The worker's pass saw the wake: the eventfd is read empty (only if
    /// a wake came, so that a pass without one costs no syscall). A read
    /// that finds nothing met a waker between its flag and its write: the
    /// flag is set again, so that the pass after that write lands reads
    /// it. Cleared anyway, the write would land on a disarmed eventfd that
    /// no pass reads again: readable for good, every idle `poll` of the
    /// worker would return at once, a core spinning until the next wake.
    pub(crate) fn clear(&self) {
        if self.armed.swap(false, Ordering::AcqRel) && self.fd.read().is_err() {
            self.armed.store(true, Ordering::Release);
        }
    }
}

impl Wake for FdWake {
    fn wake(&self) {
        if !self.armed.swap(true, Ordering::AcqRel) {
            let _ = self.fd.write(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_collapse_until_the_worker_clears_them() {
        let w = FdWake::new().unwrap();
        // Two wakes, one write.
        w.wake();
        w.wake();
        assert_eq!(w.fd.read().unwrap(), 1);
        w.fd.write(1).unwrap();
        // Still armed: a wake before the worker's pass writes nothing.
        w.wake();
        // The worker's pass: the one write read, disarmed.
        w.clear();
        assert!(!w.armed.load(Ordering::Relaxed));
        assert!(w.fd.read().is_err(), "nothing left to read");
        w.wake();
        assert_eq!(w.fd.read().unwrap(), 1);
    }

    /// A waker that set the flag but has not written yet when the worker
    /// clears: the clear's read finds nothing, then the write lands. The
    /// next pass must read it, or the eventfd stays readable and the idle
    /// worker's `poll` never sleeps again.
    #[test]
    fn a_wake_racing_a_clear_is_read_by_the_next_pass() {
        let w = FdWake::new().unwrap();
        // The waker's first half: the flag.
        assert!(!w.armed.swap(true, Ordering::AcqRel));
        // The worker's pass: its read finds the counter at 0.
        w.clear();
        // The waker's second half: the write.
        w.fd.write(1).unwrap();
        // The worker's next pass (its poll found the eventfd readable).
        w.clear();
        assert!(w.fd.read().is_err(), "the eventfd was read empty");
        assert!(!w.armed.load(Ordering::Relaxed));
    }
}
