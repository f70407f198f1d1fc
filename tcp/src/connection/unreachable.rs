//! ICMP destination unreachable about one of our segments (RFC 1122
//! §4.2.3.9, RFC 5461, RFC 5927): what ends a connection attempt at once,
//! and what a synchronized connection does not act on.

use super::{Connection, State};
use crate::seq::SeqNumber;
use crate::CloseReason;
use flowlane_wire::Unreachable;

/// What a destination unreachable did to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnreachableOutcome {
    /// The connection attempt ended ([`CloseReason::Unreachable`]).
    Ended,
    /// Not acted on: the quoted sequence number is not in flight (a blind
    /// or stale message, RFC 5927 §4.1), or the connection is synchronized
    /// and does not abort on it (below).
    Ignored,
}

impl Connection {
    /// A destination unreachable (`what`) quoting our segment with
    /// sequence number `seq`. Believed only about data in flight
    /// (SND.UNA <= seq < SND.MAX, RFC 5927 §4.1; for a handshake, the SYN
    /// itself). A connection attempt (SYN-SENT, or SYN-RECEIVED, whose
    /// SYN-ACK it quotes) ends at once, whichever the reason: RFC 1122
    /// §4.2.3.9 asks that hard errors (port or protocol unreachable) abort
    /// it, and RFC 5461 §4.1 finds that stacks abort one on soft errors
    /// (network or host unreachable) too, since retrying for a minute
    /// against an answer helps no one (Linux's `tcp_v4_err`: a connect
    /// fails with `ECONNREFUSED`, `EHOSTUNREACH` or `ENETUNREACH`). A
    /// synchronized connection does not abort on any of them (RFC 5927
    /// §5.2: hard errors are taken as soft ones, so that a forged message
    /// cannot reset a live connection; RFC 1122 §4.2.3.9: soft errors
    /// never abort), and keeps retransmitting.
    pub(crate) fn on_unreachable(
        &mut self,
        seq: SeqNumber,
        what: Unreachable,
    ) -> UnreachableOutcome {
        let attempt = matches!(self.state, State::SynSent | State::SynReceived);
        if !attempt || seq < self.snd.una || seq >= self.snd.max {
            return UnreachableOutcome::Ignored;
        }
        self.close_now(CloseReason::Unreachable(what));
        UnreachableOutcome::Ended
    }
}
