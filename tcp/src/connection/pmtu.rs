//! Path MTU discovery driven by ICMP (RFC 1191 for IPv4, RFC 8201 for
//! IPv6): a "packet too big" about one of our segments lowers the
//! connection's MSS, once the message is believed (RFC 5927 §4.1).

use super::{Connection, Flags, TS_OPTION_LEN};
use crate::cc::CongestionControl;
use crate::seq::SeqNumber;

/// The smallest path MTU an IPv4 message can make us use: Linux's
/// `min_pmtu` (RFC 1191 §3 allows 68, which no real path has and an
/// attacker would love).
const MIN_PMTU_V4: u32 = 552;
/// IPv6's minimum link MTU: a smaller report does not lower it (RFC 8201
/// §4, RFC 8200 §5).
const MIN_PMTU_V6: u32 = 1280;

/// What a "packet too big" did to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TooBigOutcome {
    /// The MSS fell; what was in flight is sent again at the new size.
    Lowered,
    /// The quoted sequence number is not in flight: a blind or stale
    /// message (RFC 5927 §4.1), ignored.
    NotInFlight,
    /// The reported MTU is no smaller than the one in use (or than the
    /// family's floor), ignored.
    NotLower,
}

impl Connection {
    /// A "packet too big" quoting our segment with sequence number `seq`,
    /// reporting path MTU `mtu` (0: an old router that reports none; the
    /// floor is then used).
    pub(crate) fn on_too_big(&mut self, seq: SeqNumber, mtu: u32) -> TooBigOutcome {
        // RFC 5927 §4.1: only a message about data in flight
        // (SND.UNA <= seq < SND.MAX) is believed; anyone can forge the
        // rest. RFC 9293 §3.9.2.2 leaves MSS changes to this layer.
        if !self.state.is_synchronized() || seq < self.snd.una || seq >= self.snd.max {
            return TooBigOutcome::NotInFlight;
        }
        let (floor, headers) = if self.tuple.remote.is_ipv6() {
            (MIN_PMTU_V6, 60)
        } else {
            (MIN_PMTU_V4, 40)
        };
        let mut mss = mtu.max(floor) - headers;
        if self.flags.has(Flags::TIMESTAMPS) {
            mss -= u32::from(TS_OPTION_LEN);
        }
        let mss = u16::try_from(mss).unwrap_or(u16::MAX);
        if mss >= self.snd.mss {
            return TooBigOutcome::NotLower;
        }
        self.snd.mss = mss;
        self.cc.set_mss(usize::from(mss));
        // RFC 1191 §6.5 / RFC 8201 §5.2: the segments in flight were too
        // big and are lost; they go again at the new size. A smaller path
        // is no sign of congestion, so the window stays (as Linux's
        // tcp_simple_retransmit does).
        self.go_back_n();
        TooBigOutcome::Lowered
    }
}
