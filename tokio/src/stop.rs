//! The service's stop, as an application thread's tasks hear of it.

use tokio::sync::watch;

/// Resolves once the service began to stop ([`Local::stop_signal`](crate::Local::stop_signal)):
/// the network cores closed their listeners and wait, for their drain
/// (2 s), for the connections to close. A task that serves a connection
/// ends it gracefully then (hyper's `graceful_shutdown`: an idle
/// keep-alive connection closed at once, a response under way finished
/// first, then closed) and drops its stream; what is still open when the
/// drain ends is reset. While some task of the thread holds one, the
/// thread's connections are awaited; a thread whose application holds
/// none has its connections reset at once, as before stop signals were.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    /// One on `stop`'s channel.
    pub(crate) fn new(stop: &watch::Sender<bool>) -> StopSignal {
        StopSignal(stop.subscribe())
    }

    /// Waits until the service began to stop (at once if it has; also
    /// once the thread's loop ended).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|&stopping| stopping).await;
    }

    /// Whether the service began to stop.
    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }
}
