//! Path MTU discovery driven by ICMP (RFC 1191 for IPv4, RFC 8201 for
//! IPv6): a "packet too big" about one of our segments lowers the
//! connection's MSS, once the message is believed (RFC 5927 §4.1).

use super::{Connection, Ctx, Flags};
use crate::cc::CongestionControl;
use crate::seq::SeqNumber;

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
    /// floor is then used). A believed message also lowers the top of the
    /// path MTU search (RFC 4821 §7.6.2 with ICMP, `plpmtud.rs`), even when
    /// it is about a probe larger than the MSS in use.
    pub(crate) fn on_too_big(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: SeqNumber,
        mtu: u32,
    ) -> TooBigOutcome {
        // RFC 5927 §4.1: only a message about data in flight
        // (SND.UNA <= seq < SND.MAX) is believed; anyone can forge the
        // rest. RFC 9293 §3.9.2.2 leaves MSS changes to this layer.
        if !self.state.is_synchronized() || seq < self.snd.una || seq >= self.snd.max {
            return TooBigOutcome::NotInFlight;
        }
        let mtu = u16::try_from(mtu).unwrap_or(u16::MAX).max(self.mtu_floor());
        self.lower_mtu_high(ctx.cfg, ctx.now, mtu);
        let mss = mtu - self.mtu_overhead();
        if mss >= self.snd.mss {
            return TooBigOutcome::NotLower;
        }
        self.set_mss(mss);
        // RFC 1191 §6.5 / RFC 8201 §5.2: the segments in flight were too
        // big and are lost; they go again at the new size. A smaller path
        // is no sign of congestion, so the window stays (as Linux's
        // tcp_simple_retransmit does); but a NewReno recovery this ends
        // ends as recoveries do, its window deflated to the slow-start
        // threshold (RFC 6582 §3.2 step 4), not left inflated by its
        // duplicate ACKs.
        if self.flags.has(Flags::IN_RECOVERY)
            && !self.flags.has(Flags::SACK_RECOVERY | Flags::MTU_PROBE_OUT)
        {
            self.cc.on_recovery_exit(self.snd.max - self.snd.una);
        }
        self.go_back_n();
        TooBigOutcome::Lowered
    }
}
