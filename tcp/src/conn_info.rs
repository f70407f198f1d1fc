//! What an application may read of one connection: its queues, and the
//! sender's view of the path (as Linux's `TCP_INFO` gives it).

use crate::cc::CongestionControl;
use crate::connection::Connection;
use crate::time::Duration;

/// One connection's queues and transmission state, read with the stack's
/// `info` (an application's `Net::info`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// In-order bytes received and not yet read.
    pub readable: usize,
    /// Bytes queued to send and not yet sent.
    pub unsent: usize,
    /// Bytes sent and not yet acknowledged.
    pub unacked: usize,
    /// Smoothed round-trip time (RFC 6298 §2); none before the first
    /// sample.
    pub srtt: Option<Duration>,
    /// Congestion window, in bytes.
    pub cwnd: usize,
    /// Slow-start threshold, in bytes (`usize::MAX` until the first loss).
    pub ssthresh: usize,
    /// Sender maximum segment size.
    pub mss: u16,
    /// Segments retransmitted, ever (timeouts, fast retransmits, probes).
    pub retransmits: u32,
    /// Send buffer capacity now (it grows with the congestion window).
    pub send_capacity: usize,
    /// Receive buffer capacity now (it bounds the window offered).
    pub recv_capacity: usize,
}

impl Connection {
    /// [`ConnInfo`] of this connection.
    pub(crate) fn info(&self) -> ConnInfo {
        self.info_with(self.recv_buf.len(), self.send_buf.len())
    }

    /// [`ConnInfo`] of this connection had its receive queue held
    /// `readable` bytes and its send queue `queued`: a closed
    /// connection's, whose buffers were given back (their capacities
    /// stay).
    pub(crate) fn info_with(&self, readable: usize, queued: usize) -> ConnInfo {
        // The send buffer holds everything from SND.UNA on; SYN and FIN
        // take sequence numbers but no buffer bytes.
        let in_flight = (self.snd.max - self.snd.una).min(queued);
        ConnInfo {
            readable,
            unsent: queued - in_flight,
            unacked: in_flight,
            srtt: self.rtt.srtt(),
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            mss: self.snd.mss,
            retransmits: self.snd_rare.retransmitted,
            send_capacity: self.send_buf.capacity(),
            recv_capacity: self.recv_buf.capacity(),
        }
    }
}
