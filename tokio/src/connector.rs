//! Opening connections from tokio code: through the application thread's
//! bridge, from a port whose replies reach one of the network cores that
//! thread serves.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::pipe::ThreadShared;
use crate::stream::TcpStream;

/// Opens connections on one application thread's cores; `Clone` and
/// `Send`, for any task (the streams it gives are cheapest on that
/// thread).
#[derive(Debug, Clone)]
pub struct Connector {
    thread: Arc<ThreadShared>,
}

impl Connector {
    pub(crate) fn new(thread: Arc<ThreadShared>) -> Connector {
        Connector { thread }
    }

    /// Opens a connection to `remote`; done once the handshake completed
    /// (`ConnectionRefused` when the peer refused it with a reset,
    /// `TimedOut` when the SYNs went unanswered, `ConnectionAborted` when
    /// the network core could not start it or gave it up: no local port or
    /// connection slot left, an address it cannot reach, its thread
    /// stopped).
    pub async fn connect(&self, remote: SocketAddr) -> io::Result<TcpStream> {
        let (tx, rx) = oneshot::channel();
        self.thread.connect(remote, tx);
        rx.await
            .map_err(|_| io::Error::other("the application thread stopped"))?
    }
}
