//! What went wrong while a service ran, as its stop finds it, the same on
//! every backend.

use std::error::Error as StdError;
use std::fmt;

use crate::setup::SetupError;

/// Which of a service's threads a [`StopError`] is about.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// A network core, by its queue index: an AF_XDP queue's worker, a
    /// kernel-socket core.
    Core(u32),
    /// An application thread of queue-pair mode (and of the tokio
    /// adapter, which runs on it), by its index.
    AppThread(u32),
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Worker::Core(q) => write!(f, "queue {q}"),
            Worker::AppThread(t) => write!(f, "application thread {t}"),
        }
    }
}

/// What kind of failure a stop found: what a caller matches on
/// ([`StopError::kind`]). More kinds may come.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopErrorKind {
    /// A worker panicked while the service ran: [`StopError::worker`]
    /// says which, [`StopError::panic_message`] the panic's words. Its
    /// connections were reset; the others served on.
    Panicked,
    /// A worker ended with an error (its socket or its poll failed):
    /// [`StopError::worker`] says which, its
    /// [`source`](std::error::Error::source) is that error (an
    /// `io::Error` for the OS's: [`StopError::io_error`]).
    Failed,
    /// Application threads did not end within the stop's wait (a handler
    /// blocked) and were left running: [`StopError::left_running_threads`] lists
    /// them.
    LeftRunning,
}

/// What went wrong while a service ran, as its stop found it: what every
/// backend's stop returns in its `Err` (`KernelService::stop`,
/// `TcpService::stop`, `QueuePairs::stop`, and with it the tokio
/// adapter's), so that an application that changes backend keeps its
/// error handling. A stop that returns counters returns them beside
/// this, failure or not (`let (counters, stopped) = service.stop();`):
/// a worker that failed published its counters up to its end.
///
/// One stop may find several failures: the error is the first, its
/// [`kind`](StopError::kind) and [`worker`](StopError::worker) what to
/// match on; [`StopError::failures`] walks them all. Its `Display` is one
/// line naming each (what failed, where), without the causes' words (the
/// panic's, the OS error's), which are the first failure's
/// [`source`](std::error::Error::source): print it with `{:#}` for every
/// failure with its causes. It is `Send + Sync + 'static`, so `?` takes
/// it into `anyhow::Error` and `Box<dyn Error>`:
///
/// ```
/// use flowlane_app::{StopError, StopErrorKind, Worker};
///
/// fn stop() -> Result<(), StopError> {
///     Err(StopError::panicked(Worker::Core(2), "index out of bounds"))
/// }
/// fn with_anyhow() -> anyhow::Result<()> {
///     stop()?;
///     Ok(())
/// }
/// let e = stop().unwrap_err();
/// assert_eq!(e.kind(), StopErrorKind::Panicked);
/// assert_eq!(e.worker(), Some(Worker::Core(2)));
/// assert_eq!(e.panic_message(), Some("index out of bounds"));
/// assert_eq!(e.to_string(), "queue 2 panicked");
/// assert_eq!(format!("{e:#}"), "queue 2 panicked: index out of bounds");
/// let e = with_anyhow().unwrap_err();
/// assert_eq!(format!("{e:#}"), "queue 2 panicked: index out of bounds");
/// ```
#[derive(Debug)]
pub struct StopError {
    kind: StopErrorKind,
    worker: Option<Worker>,
    message: String,
    source: Option<SetupError>,
    left_running: Vec<u32>,
    /// The stop's other failures, in the order found (none of their own).
    others: Vec<StopError>,
}

/// A panic's words, as a failure's cause.
#[derive(Debug)]
struct PanicWords(String);

impl fmt::Display for PanicWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for PanicWords {}

impl StopError {
    /// `worker` panicked, saying `words` (its payload's message:
    /// [`StopError::panic_words`] reads one).
    pub fn panicked(worker: Worker, words: impl Into<String>) -> StopError {
        StopError::new(
            StopErrorKind::Panicked,
            Some(worker),
            format!("{worker} panicked"),
        )
        .with_source(PanicWords(words.into()))
    }

    /// `worker` ended with `error`; `message` says what failed (one line,
    /// without the error's words).
    pub fn failed(
        worker: Worker,
        message: impl Into<String>,
        error: impl Into<SetupError>,
    ) -> StopError {
        StopError::new(StopErrorKind::Failed, Some(worker), message).with_source(error)
    }

    /// The application threads `threads` were left running: they had not
    /// ended within `waited`.
    pub fn left_running(threads: Vec<u32>, waited: std::time::Duration) -> StopError {
        let message = format!(
            "application threads {threads:?} did not stop within {waited:?} (a handler \
             blocked): left running"
        );
        let mut e = StopError::new(StopErrorKind::LeftRunning, None, message);
        e.left_running = threads;
        e
    }

    /// The failures a stop found, in order, as its result: `Ok` when
    /// there were none, else the first, holding the others.
    pub fn collect(failures: impl IntoIterator<Item = StopError>) -> Result<(), StopError> {
        let mut failures = failures.into_iter();
        match failures.next() {
            None => Ok(()),
            Some(first) => Err(failures.fold(first, StopError::and)),
        }
    }

    /// This error and `other`'s failures after its own: for a service
    /// stopped in two parts (the network backend, then queue-pair mode's
    /// threads).
    pub fn and(mut self, mut other: StopError) -> StopError {
        let later = std::mem::take(&mut other.others);
        self.others.push(other);
        self.others.extend(later);
        self
    }

    /// What a panic's `payload` says (`panic!`'s message, or
    /// `"(no message)"`), for [`StopError::panicked`].
    pub fn panic_words(payload: &(dyn std::any::Any + Send)) -> &str {
        payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)")
    }

    fn new(kind: StopErrorKind, worker: Option<Worker>, message: impl Into<String>) -> StopError {
        StopError {
            kind,
            worker,
            message: message.into(),
            source: None,
            left_running: Vec::new(),
            others: Vec::new(),
        }
    }

    fn with_source(mut self, source: impl Into<SetupError>) -> StopError {
        self.source = Some(source.into());
        self
    }

    /// What kind of failure the first one is.
    pub fn kind(&self) -> StopErrorKind {
        self.kind
    }

    /// The worker the first failure is about (None for
    /// [`StopErrorKind::LeftRunning`], which is about several:
    /// [`StopError::left_running_threads`]).
    pub fn worker(&self) -> Option<Worker> {
        self.worker
    }

    /// The first failure's line, without its causes' words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What the worker's panic said, for [`StopErrorKind::Panicked`]. On
    /// AF_XDP a handler's panic that failed its queue closed (its worker
    /// served on) was logged as it was caught, its words not kept: they
    /// read here as a phrase saying so.
    pub fn panic_message(&self) -> Option<&str> {
        match self.kind {
            StopErrorKind::Panicked => self
                .source
                .as_deref()
                .and_then(|s| s.downcast_ref::<PanicWords>())
                .map(|w| w.0.as_str()),
            _ => None,
        }
    }

    /// The application threads left running, for
    /// [`StopErrorKind::LeftRunning`] (empty otherwise).
    pub fn left_running_threads(&self) -> &[u32] {
        &self.left_running
    }

    /// The OS error behind the first failure, the first found down its
    /// chain of causes.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        let mut cause = self.source();
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                return Some(io);
            }
            cause = e.source();
        }
        None
    }

    /// Every failure the stop found, this one first.
    pub fn failures(&self) -> impl Iterator<Item = &StopError> {
        std::iter::once(self).chain(self.others.iter())
    }

    /// Writes one failure: its line, with `{:#}` its causes.
    fn write_one(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if f.alternate() {
            let mut cause = self.source();
            while let Some(e) = cause {
                write!(f, ": {e}")?;
                cause = e.source();
            }
        }
        Ok(())
    }
}

/// Each failure's line, `; ` between them; with `{:#}`, each followed by
/// its causes (`line: cause: its cause`), as `anyhow` prints its chains.
impl fmt::Display for StopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.failures().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            e.write_one(f)?;
        }
        Ok(())
    }
}

impl StdError for StopError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A core's error keeps its source; `{:#}` prints it.
    #[test]
    fn a_failed_core_keeps_its_error() {
        let os = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = StopError::failed(Worker::Core(1), "queue 1: polling failed", os);
        assert_eq!(e.kind(), StopErrorKind::Failed);
        assert_eq!(e.worker(), Some(Worker::Core(1)));
        assert_eq!(e.to_string(), "queue 1: polling failed");
        assert_eq!(
            format!("{e:#}"),
            "queue 1: polling failed: permission denied"
        );
        assert_eq!(
            e.io_error().map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        assert_eq!(e.panic_message(), None);
    }

    /// Several failures: the first is what `kind` says, all are printed.
    #[test]
    fn several_failures_are_one_error() {
        assert!(StopError::collect([]).is_ok());
        let e = StopError::collect([
            StopError::panicked(Worker::AppThread(0), "boom"),
            StopError::left_running(vec![1, 2], Duration::from_secs(1)),
        ])
        .unwrap_err();
        assert_eq!(e.kind(), StopErrorKind::Panicked);
        assert_eq!(e.worker(), Some(Worker::AppThread(0)));
        let kinds: Vec<_> = e.failures().map(StopError::kind).collect();
        assert_eq!(kinds, [StopErrorKind::Panicked, StopErrorKind::LeftRunning]);
        let left = e.failures().nth(1).unwrap();
        assert_eq!(left.left_running_threads(), [1, 2]);
        assert_eq!(left.worker(), None);
        assert_eq!(
            e.to_string(),
            "application thread 0 panicked; application threads [1, 2] did not stop within 1s \
             (a handler blocked): left running"
        );
        assert_eq!(
            format!("{e:#}"),
            "application thread 0 panicked: boom; application threads [1, 2] did not stop \
             within 1s (a handler blocked): left running"
        );
        // Joined with another stop's: after its own.
        let more = StopError::collect([
            StopError::panicked(Worker::Core(3), "x"),
            StopError::panicked(Worker::Core(4), "y"),
        ])
        .unwrap_err();
        let workers: Vec<_> = more.and(e).failures().map(StopError::worker).collect();
        assert_eq!(
            workers,
            [
                Some(Worker::Core(3)),
                Some(Worker::Core(4)),
                Some(Worker::AppThread(0)),
                None
            ]
        );
    }

    /// A payload's words: `panic!`'s literal or formatted message.
    #[test]
    fn a_payload_s_words() {
        let p = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(StopError::panic_words(p.as_ref()), "plain");
        let n = 7;
        let p = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
        assert_eq!(StopError::panic_words(p.as_ref()), "formatted 7");
        let p = std::panic::catch_unwind(|| std::panic::panic_any(3u8)).unwrap_err();
        assert_eq!(StopError::panic_words(p.as_ref()), "(no message)");
    }

    /// `?` into the boxed errors (anyhow's in the doc test).
    #[test]
    fn it_is_send_sync_and_static() {
        fn check<T: StdError + Send + Sync + 'static>() {}
        check::<StopError>();
        let boxed: Box<dyn StdError + Send + Sync> =
            StopError::panicked(Worker::Core(0), "gone").into();
        assert_eq!(boxed.to_string(), "queue 0 panicked");
    }
}
