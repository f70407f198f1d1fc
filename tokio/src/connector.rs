//! Opening connections from tokio code: through the application thread's
//! bridge, from a port whose replies reach one of the network cores that
//! thread serves.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::pipe::{thread_gone, ThreadShared};
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

    /// Opens a connection to `remote`; done once the handshake completed.
    /// Errors:
    /// - `ConnectionRefused`: the peer refused it with a reset, or a
    ///   router answered its SYN "port (or protocol) unreachable";
    /// - `HostUnreachable`, `NetworkUnreachable`: a router answered its SYN
    ///   with an ICMP destination unreachable (a filter's "prohibited" is
    ///   `HostUnreachable`, as connect(2)'s `EHOSTUNREACH`), or on kernel
    ///   sockets the kernel found no route or no neighbour;
    /// - `TimedOut`: the SYNs went unanswered;
    /// - `ConnectionAborted`: the network core could not start it or gave
    ///   it up (no local port or connection slot left there), or the thread
    ///   stopped, or the cores found it
    ///   stalled (blocked past the stall limit) and it has not passed
    ///   since;
    /// - refused by the thread at once: `AddrInUse` (no local port),
    ///   `InvalidInput` (an address it cannot open to), `QuotaExceeded`
    ///   (the thread holds the most connections it can), `Unsupported` (the
    ///   thread serves no network core: more threads than cores; or the
    ///   cores open no connections: an AF_XDP service not started
    ///   `TcpServiceConfig::active`).
    ///
    /// Dropped before the thread's next pass, the future opens nothing;
    /// dropped later, the connection is closed once open.
    pub async fn connect(&self, remote: SocketAddr) -> io::Result<TcpStream> {
        let (tx, rx) = oneshot::channel();
        self.thread.connect(remote, tx);
        rx.await
            .map_err(|_| thread_gone("the application thread stopped"))?
    }
}
