//! A background thread with a stop flag: it looks at something now and
//! then (counters, signal flags, the data path's health) and sleeps
//! between looks on [`StopFlag::sleep`]; stopping it sets the flag, wakes
//! it (unpark) and joins it, at once whatever its period. Dropped, it
//! stops the same way, so a watcher lives exactly as long as its owner.
//!
//! The one place the pattern is written: the TCP service's checksum watch
//! and `flowlane-ttcp`'s signal and data-path watches use it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The thread's side of the stop: whether it was asked to stop, and a
/// sleep that a stop ends at once.
#[derive(Debug, Clone)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Whether the owner asked the thread to stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sleeps for `period` at most, less when the stop comes (or on a
    /// spurious wake-up); returns whether the thread should go on (the stop
    /// was not asked for).
    pub fn sleep(&self, period: Duration) -> bool {
        if self.is_set() {
            return false;
        }
        std::thread::park_timeout(period);
        !self.is_set()
    }
}

/// A named background thread running a body that watches a [`StopFlag`];
/// [`StoppableThread::stop`] (or dropping it) sets the flag, unparks the
/// thread and joins it.
#[derive(Debug)]
pub struct StoppableThread<T = ()> {
    stop: StopFlag,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> StoppableThread<T> {
    /// Starts thread `name` running `body`, which should return soon after
    /// its flag is set (loop on [`StopFlag::sleep`]); the error is the
    /// spawn's.
    pub fn spawn(
        name: &str,
        body: impl FnOnce(StopFlag) -> T + Send + 'static,
    ) -> std::io::Result<StoppableThread<T>> {
        let stop = StopFlag(Arc::new(AtomicBool::new(false)));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(flag))?;
        Ok(StoppableThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl<T> StoppableThread<T> {
    /// Stops the thread and returns what its body returned; None if the
    /// body panicked.
    pub fn stop(mut self) -> Option<T> {
        self.halt()
    }

    fn halt(&mut self) -> Option<T> {
        self.stop.0.store(true, Ordering::Relaxed);
        let thread = self.thread.take()?;
        thread.thread().unpark();
        thread.join().ok()
    }
}

impl<T> Drop for StoppableThread<T> {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    /// A long period does not delay the stop: the sleep is woken.
    const LONG: Duration = Duration::from_secs(3600);

    /// Runs `f` on a thread of its own: what it returned, if within 5 s.
    fn within_5s<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn dropping_wakes_and_joins_a_sleeping_thread() {
        let (looked, looks) = mpsc::channel();
        let t = StoppableThread::spawn("fl-test-drop", move |stop| {
            while stop.sleep(LONG) {
                let _ = looked.send(());
            }
        })
        .unwrap();
        assert!(
            within_5s(move || drop(t)).is_some(),
            "drop waited for the period"
        );
        // Joined: the body ended without a look after the wake-up.
        assert!(looks.try_recv().is_err());
    }

    #[test]
    fn stop_returns_what_the_body_returned() {
        let t = StoppableThread::spawn("fl-test-stop", |stop| {
            while stop.sleep(LONG) {}
            "stopped"
        })
        .unwrap();
        assert_eq!(within_5s(move || t.stop()), Some(Some("stopped")));
    }

    #[test]
    fn a_body_that_ended_or_panicked_is_joined() {
        let t = StoppableThread::spawn("fl-test-end", |_| 7).unwrap();
        assert_eq!(t.stop(), Some(7));
        let t =
            StoppableThread::spawn("fl-test-panic", |_| -> u8 { panic!("on purpose") }).unwrap();
        assert_eq!(t.stop(), None);
    }

    #[test]
    fn a_set_flag_sleeps_no_more() {
        let t = StoppableThread::spawn("fl-test-flag", |stop| {
            while stop.sleep(Duration::from_millis(1)) {}
            // After the stop a sleep returns at once.
            let start = Instant::now();
            (stop.sleep(LONG), start.elapsed())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let (go_on, slept) = t.stop().unwrap();
        assert!(!go_on);
        assert!(slept < Duration::from_secs(1));
    }
}
