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
    /// a wake came, so that a pass without one costs no syscall).
    pub(crate) fn clear(&self) {
        if self.armed.swap(false, Ordering::AcqRel) {
            let _ = self.fd.read();
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
        // Still armed: a wake before the worker's pass writes nothing.
        w.wake();
        assert!(w.fd.read().is_err(), "nothing written");
        // The worker's pass: disarmed (its read finds nothing left).
        w.clear();
        assert!(!w.armed.load(Ordering::Relaxed));
        w.wake();
        assert_eq!(w.fd.read().unwrap(), 1);
    }
}
