//! Why a service did not start, the same on every backend.

use std::error::Error as StdError;
use std::fmt;

use crate::setup::SetupError;

/// What kind of failure kept a service from starting: what a caller
/// matches on ([`StartError::kind`]). More kinds may come.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartErrorKind {
    /// The service's set-up (the closure `start` runs on each core or
    /// application thread) returned an error:
    /// [`StartError::setup_error`] is that error.
    Setup,
    /// A configuration that cannot work (no cores, no application
    /// threads, no address to listen on, a bad combination of fields):
    /// the message names what to change.
    Config,
    /// The operating system refused a resource (a socket, a bind or
    /// listen, a thread, a pin to a CPU): [`StartError::io_error`] is its
    /// error where it gave one (`AddrInUse`, `PermissionDenied`, ...).
    Os,
    /// A worker (a core's thread, an application thread) panicked or
    /// ended during the start.
    Worker,
}

/// Why a service did not start: what every backend's start function
/// returns (`KernelService::start`, `QueuePairs::start`,
/// `flowlane_tokio::start`, `TcpService::start`), so that an application
/// that changes backend keeps its error handling.
///
/// Its [`kind`](StartError::kind) is what to match on; its `Display` is
/// one line saying what is wrong and what to do, without its cause's
/// words, which are its [`source`](std::error::Error::source) (the
/// set-up's error, the OS error): print it with `{:#}` (of the error, or
/// of an `anyhow::Error` holding it) for the line and its causes. It is `Send + Sync + 'static`, so `?`
/// takes it into `anyhow::Error` and `Box<dyn Error>`:
///
/// ```
/// use flowlane_app::{StartError, StartErrorKind};
///
/// fn start() -> Result<(), StartError> {
///     Err(StartError::config("no cores: give at least one"))
/// }
/// fn with_anyhow() -> anyhow::Result<()> {
///     start()?;
///     Ok(())
/// }
/// fn boxed() -> Result<(), Box<dyn std::error::Error>> {
///     start()?;
///     Ok(())
/// }
/// fn boxed_shared() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     start()?;
///     Ok(())
/// }
/// let e = with_anyhow().unwrap_err();
/// assert_eq!(
///     e.downcast_ref::<StartError>().map(StartError::kind),
///     Some(StartErrorKind::Config)
/// );
/// assert!(boxed().is_err() && boxed_shared().is_err());
///
/// // A port in use: the OS's error, matched by its kind.
/// let taken = std::io::Error::from(std::io::ErrorKind::AddrInUse);
/// let e = StartError::os("cannot listen on 0.0.0.0:80: stop what holds it", taken);
/// assert_eq!(e.kind(), StartErrorKind::Os);
/// assert_eq!(e.io_error().map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));
/// assert_eq!(
///     format!("{:#}", anyhow::Error::from(e)),
///     "cannot listen on 0.0.0.0:80: stop what holds it: address in use"
/// );
/// ```
#[derive(Debug)]
pub struct StartError {
    kind: StartErrorKind,
    message: String,
    source: Option<SetupError>,
}

impl StartError {
    /// An error of `kind` saying `message` (one line: what is wrong and
    /// what to do), with no cause.
    pub fn new(kind: StartErrorKind, message: impl Into<String>) -> StartError {
        StartError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// This error, caused by `source`.
    pub fn with_source(mut self, source: impl Into<SetupError>) -> StartError {
        self.source = Some(source.into());
        self
    }

    /// A set-up that failed with `error`, `message` saying where (the
    /// core or thread). A set-up's error that is itself a `StartError`
    /// (a backend's own set-up, say) is returned as it is, its kind kept.
    pub fn setup(message: impl Into<String>, error: SetupError) -> StartError {
        match error.downcast::<StartError>() {
            Ok(own) => *own,
            Err(error) => StartError::new(StartErrorKind::Setup, message).with_source(error),
        }
    }

    /// A configuration that cannot work: `message` names what to change.
    pub fn config(message: impl Into<String>) -> StartError {
        StartError::new(StartErrorKind::Config, message)
    }

    /// The OS refused a resource with `error`; `message` says which and
    /// what to do.
    pub fn os(message: impl Into<String>, error: std::io::Error) -> StartError {
        StartError::new(StartErrorKind::Os, message).with_source(error)
    }

    /// A worker that panicked or ended during the start.
    pub fn worker(message: impl Into<String>) -> StartError {
        StartError::new(StartErrorKind::Worker, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StartErrorKind {
        self.kind
    }

    /// The one line of [`Display`](fmt::Display): what is wrong and what
    /// to do, without the cause's words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The OS error behind this one, the first found down its chain of
    /// causes (a set-up's own error included): for a port in use,
    /// `io_error().map(|e| e.kind())` is `Some(ErrorKind::AddrInUse)`.
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

    /// The error the set-up returned, for [`StartErrorKind::Setup`].
    pub fn setup_error(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        match self.kind {
            StartErrorKind::Setup => self.source.as_deref(),
            _ => None,
        }
    }
}

/// The message; with `{:#}`, followed by each cause down the chain
/// (`message: cause: its cause`), as `anyhow` prints its chains.
impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

impl StdError for StartError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cause is chained, not repeated, and found by `io_error`
    /// through a set-up's own error.
    #[test]
    fn the_cause_is_the_source_and_the_message_says_the_rest() {
        let e = StartError::setup(
            "queue 1: the set-up failed",
            Box::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
        );
        assert_eq!(e.kind(), StartErrorKind::Setup);
        assert_eq!(e.to_string(), "queue 1: the set-up failed");
        assert_eq!(
            format!("{e:#}"),
            "queue 1: the set-up failed: permission denied"
        );
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("permission denied")
        );
        assert_eq!(
            e.io_error().map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        assert!(e.setup_error().is_some());
        let said: SetupError = "core 3: no".into();
        let e = StartError::setup("queue 3: the set-up failed", said);
        assert_eq!(e.setup_error().unwrap().to_string(), "core 3: no");
        assert!(e.io_error().is_none());
    }

    /// A set-up that failed with a `StartError` of its own keeps it.
    #[test]
    fn a_set_up_s_own_start_error_is_kept() {
        let own = StartError::os("cannot build a runtime", std::io::Error::other("no"));
        let e = StartError::setup("thread 0: the set-up failed", Box::new(own));
        assert_eq!(e.kind(), StartErrorKind::Os);
        assert_eq!(e.to_string(), "cannot build a runtime");
        assert!(e.setup_error().is_none());
    }

    /// `?` into the boxed errors (anyhow's in the doc test).
    #[test]
    fn it_is_send_sync_and_static() {
        fn check<T: StdError + Send + Sync + 'static>() {}
        check::<StartError>();
        let boxed: Box<dyn StdError + Send + Sync> = StartError::worker("gone").into();
        assert_eq!(boxed.to_string(), "gone");
    }
}
