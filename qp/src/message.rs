//! What a network core and an application thread tell each other.

use std::net::SocketAddr;

use flowlane_tcp::{CloseReason, CongestionAlgorithm, ConnHandle, ConnInfo, FourTuple};

/// Bytes of received data a connection may have on its way to, or
/// unread on, its application thread; past it the core leaves data in the
/// stack, whose window then closes (back-pressure, not drops).
pub(crate) const RX_CREDIT: usize = 256 << 10;
/// Bytes an application thread may have asked a connection to send that
/// the stack has not taken yet.
pub(crate) const TX_CREDIT: usize = 256 << 10;
/// Bytes of one receive buffer handed to the application.
pub(crate) const BUF: usize = 64 << 10;

/// From a network core to an application thread; connections are named
/// by the core's handles.
#[derive(Debug)]
pub(crate) enum ToApp {
    Accepted {
        conn: ConnHandle,
        /// Index of the listening port in the service's list.
        port: u32,
        tuple: FourTuple,
    },
    Connected {
        token: u64,
        conn: ConnHandle,
        tuple: FourTuple,
    },
    ConnectFailed {
        token: u64,
    },
    /// Received bytes, in a buffer the application gives back.
    Data {
        conn: ConnHandle,
        bytes: Vec<u8>,
    },
    /// The stack has taken `total` bytes of the connection so far (a
    /// cumulative completion, not one per send).
    Sent {
        conn: ConnHandle,
        total: u64,
    },
    PeerClosed {
        conn: ConnHandle,
    },
    /// The answer to [`ToCore::Info`].
    Info {
        conn: ConnHandle,
        info: ConnInfo,
    },
    Closed {
        conn: ConnHandle,
        reason: CloseReason,
    },
}

/// From an application thread to a network core.
#[derive(Debug)]
pub(crate) enum ToCore {
    Connect {
        thread: u32,
        token: u64,
        remote: SocketAddr,
    },
    Send {
        conn: ConnHandle,
        bytes: Vec<u8>,
    },
    /// The application read `bytes` of the connection: as much more may
    /// come.
    Consumed {
        conn: ConnHandle,
        bytes: usize,
    },
    ShutdownWrite {
        conn: ConnHandle,
    },
    Close {
        conn: ConnHandle,
    },
    Abort {
        conn: ConnHandle,
    },
    SetNodelay {
        conn: ConnHandle,
        on: bool,
    },
    SetCongestion {
        conn: ConnHandle,
        alg: CongestionAlgorithm,
    },
    SetKeepalive {
        conn: ConnHandle,
        on: bool,
    },
    /// Fixes the send (`send`) or receive buffer's size.
    SetBuffer {
        conn: ConnHandle,
        send: bool,
        bytes: usize,
    },
    /// Asks for the connection's [`ConnInfo`] ([`ToApp::Info`]).
    Info {
        conn: ConnHandle,
    },
    /// A receive buffer back to the core's pool.
    Recycle(Vec<u8>),
}
