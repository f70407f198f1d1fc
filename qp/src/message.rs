//! What a network core and an application thread tell each other.

use std::net::SocketAddr;

use flowlane_tcp::{CloseReason, CongestionAlgorithm, ConnHandle, ConnInfo, Error, FourTuple};

use crate::memory::Charge;

/// Bytes of received data a connection may have on its way to, or
/// unread on, its application thread, with the cost of its small messages
/// not taken yet ([`message_cost`]); past it the core leaves data in the
/// stack, whose window then closes (back-pressure, not drops).
pub(crate) const RX_CREDIT: usize = 256 << 10;
/// Bytes an application thread may have asked a connection to send that
/// the stack has not taken yet (within its core's send memory,
/// `memory::TX_MEMORY`, too).
pub(crate) const TX_CREDIT: usize = 256 << 10;
/// Bytes of one receive buffer handed to the application.
pub(crate) const BUF: usize = 64 << 10;
/// Data messages with fewer bytes than this travel in a buffer of their own
/// size, and the thread appends them to the last buffer it holds of their
/// connection: a peer's one-byte segments then cost memory for their bytes,
/// not a 64 KiB buffer each.
pub(crate) const SMALL_DATA: usize = BUF / 16;
/// What a data message of under [`SMALL_DATA`] bytes costs its
/// connection's credit beyond its bytes: its place in the thread's queue
/// and its own allocation, rounded up. A peer's one-byte segments, each
/// its own message, then queue a few hundred messages while the thread
/// takes none, not one a byte of the credit.
pub(crate) const SMALL_MESSAGE_COST: usize = 256;

/// The credit a data message of `len` bytes takes beyond its bytes,
/// given back by the thread as it takes the message (not as it reads it:
/// the queue's place is free then). A large one's place is within its
/// bytes: the bulk path pays nothing.
pub(crate) fn message_cost(len: usize) -> usize {
    if len < SMALL_DATA {
        SMALL_MESSAGE_COST
    } else {
        0
    }
}

/// A core's answer to a thread's [`ToCore::Connect`], at once and apart
/// from the events (the thread waits for it in `QpNet::connect`): the
/// core, the connect's token, and the error its stack refused the open
/// with at once, as `Net::connect` returns it in run to completion (`Ok`:
/// the open is under way, its outcome an event to come).
pub(crate) type ConnectAnswer = (u32, u64, Result<(), Error>);

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
    /// An active open that did not complete, and why (`Timeout` for SYNs
    /// unanswered, `Reset` for a refusal, `Aborted` when the core gave it
    /// up: its thread died, or the connect itself failed, which the core
    /// also answered at once, [`ConnectAnswer`]).
    ConnectFailed { token: u64, reason: CloseReason },
    /// Received bytes, in a buffer the application gives back.
    Data { conn: ConnHandle, bytes: Vec<u8> },
    /// The stack has taken `total` bytes of the connection so far (a
    /// cumulative completion, not one per send).
    Sent { conn: ConnHandle, total: u64 },
    /// Every byte before the peer's FIN went; with the connection's
    /// figures as of then if the thread asked for them before
    /// ([`ToCore::Info`]): an application that reports them at end of
    /// stream has them without another round trip.
    PeerClosed {
        conn: ConnHandle,
        info: Option<ConnInfo>,
    },
    /// The answer to [`ToCore::Info`]: the figures, or None where the
    /// core's backend could not tell them (a kernel socket's `sock_diag`
    /// that failed). Every request is answered, so that the thread knows
    /// which answer is its latest request's.
    Info {
        conn: ConnHandle,
        info: Option<ConnInfo>,
    },
    Closed {
        conn: ConnHandle,
        reason: CloseReason,
    },
    /// The connection `old` of core `from` moved here with its RSS bucket
    /// and is `conn` now; the thread settles its requests with `from`
    /// ([`ToCore::Settle`]) before it sends this core any.
    Moved {
        from: u32,
        old: ConnHandle,
        conn: ConnHandle,
    },
    /// A request for a connection that moved away from this core, given
    /// back unapplied: the thread sends it again where the connection is.
    Bounced { conn: ConnHandle, request: ToCore },
    /// The answer to [`ToCore::Settle`]: every request for `conn` sent
    /// before it was bounced.
    Settled { conn: ConnHandle },
    /// The connection `old` of core `from` was to move here with its RSS
    /// bucket, and this core's stack could not take it: it is gone. The
    /// thread ends it and settles with `from`.
    MoveFailed { from: u32, old: ConnHandle },
    /// The service is stopping (the core's listeners closed): the thread
    /// asks its handlers about each connection
    /// ([`flowlane_app::ConnHandler::on_stop`]), once, and aborts those
    /// left to the reset; the core waits for the others' closes, for its
    /// drain at most. Told once by each core.
    Stopping,
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
        /// The bytes, held against the send memory of the core the thread
        /// sent them to (the relay that takes them holds them against its
        /// own).
        charge: Charge,
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
    /// After [`ToApp::Moved`], to the connection's old core: answered
    /// with [`ToApp::Settled`] once every earlier request was bounced.
    Settle {
        thread: u32,
        conn: ConnHandle,
    },
}

impl ToCore {
    /// The core's connection the request is for, if it is for one
    /// (retargeted through it when the connection moved).
    pub(crate) fn conn_mut(&mut self) -> Option<&mut ConnHandle> {
        match self {
            ToCore::Send { conn, .. }
            | ToCore::Consumed { conn, .. }
            | ToCore::ShutdownWrite { conn }
            | ToCore::Close { conn }
            | ToCore::Abort { conn }
            | ToCore::SetNodelay { conn, .. }
            | ToCore::SetCongestion { conn, .. }
            | ToCore::SetKeepalive { conn, .. }
            | ToCore::SetBuffer { conn, .. }
            | ToCore::Info { conn }
            | ToCore::Settle { conn, .. } => Some(conn),
            ToCore::Connect { .. } | ToCore::Recycle(_) => None,
        }
    }
}
