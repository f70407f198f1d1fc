//! ICMP destination unreachable about one of our segments (RFC 1122
//! §4.2.3.9, RFC 5461, RFC 5927, RFC 6069): what ends a connection attempt
//! at once; the soft error a synchronized connection keeps instead, told
//! as why it ended if it then times out; and the backoff step that one
//! about the retransmission at SND.UNA undoes (TCP-LD).

use super::{Connection, Ctx, Flags, State};
use crate::seq::SeqNumber;
use crate::time::{Deadline, Instant};
use crate::CloseReason;
use flowlane_wire::Unreachable;

/// ICMPv4 Destination Unreachable code 0, "net unreachable" (RFC 792);
/// ICMPv6's code 0, "no route to destination" (RFC 4443 §3.1).
const ICMP_NET_UNREACHABLE: u8 = 0;
/// ICMPv4 Destination Unreachable code 1, "host unreachable" (RFC 792);
/// ICMPv6's code 1 is "administratively prohibited".
const ICMP_HOST_UNREACHABLE: u8 = 1;

/// What a destination unreachable did to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnreachableOutcome {
    /// The connection attempt ended ([`CloseReason::Unreachable`]).
    Ended,
    /// A synchronized connection kept it as its soft error (and, about
    /// the retransmission at SND.UNA, may have undone a backoff step).
    Remembered,
    /// Not acted on: the quoted sequence number is not in flight (a blind
    /// or stale message, RFC 5927 §4.1), or no segment of the connection
    /// can be in flight (CLOSED).
    Ignored,
}

impl Connection {
    /// A destination unreachable of `code` (ICMPv4's, or ICMPv6's on an
    /// IPv6 connection) quoting our segment with sequence number `seq`;
    /// what it says ([`Unreachable::of_v4`], [`Unreachable::of_v6`]) is
    /// the reason told, and a code neither assigns is ignored. Believed
    /// only about data in flight
    /// (SND.UNA <= seq < SND.MAX, RFC 5927 §4.1; for a handshake, the SYN
    /// itself). A connection attempt (SYN-SENT, or SYN-RECEIVED, whose
    /// SYN-ACK it quotes) ends at once, whichever the reason: RFC 1122
    /// §4.2.3.9 asks that hard errors (port or protocol unreachable) abort
    /// it, and RFC 5461 §4.1 finds that stacks abort one on soft errors
    /// (network or host unreachable) too, since retrying for a minute
    /// against an answer helps no one (Linux's `tcp_v4_err`: a connect
    /// fails with `ECONNREFUSED`, `EHOSTUNREACH` or `ENETUNREACH`).
    ///
    /// A synchronized connection does not abort on any of them (RFC 5927
    /// §5.2: hard errors are taken as soft ones, so that a forged message
    /// cannot reset a live connection; RFC 1122 §4.2.3.9: soft errors
    /// never abort), and keeps retransmitting; but it remembers the error
    /// (RFC 1122 §4.2.3.9: "TCP SHOULD make the information available to
    /// the application"; RFC 5461 §4.1 and Linux keep the last one as
    /// `sk_err_soft`) and, should it time out, ends with it rather than
    /// [`CloseReason::Timeout`] ([`Connection::timeout_reason`]). An ACK
    /// from the peer forgets it (`input.rs`).
    pub(crate) fn on_unreachable(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: SeqNumber,
        code: u8,
    ) -> UnreachableOutcome {
        let v6 = self.tuple.is_ipv6();
        let what = if v6 {
            Unreachable::of_v6(code)
        } else {
            Unreachable::of_v4(code)
        };
        let Some(what) = what else {
            return UnreachableOutcome::Ignored;
        };
        if seq < self.snd.una || seq >= self.snd.max {
            return UnreachableOutcome::Ignored;
        }
        match self.state {
            State::SynSent | State::SynReceived => {
                self.close_now(CloseReason::Unreachable(what));
                return UnreachableOutcome::Ended;
            }
            State::Closed | State::Listen => return UnreachableOutcome::Ignored,
            _ => {}
        }
        self.timers_rare.soft_error = Some(what);
        // RFC 6069 §3 ("Connectivity Disruption Indication"): ICMPv4's
        // "net unreachable" and "host unreachable" (codes 0 and 1) and
        // their IPv6 counterpart, ICMPv6's "no route to destination" (code
        // 0), tell of a disruption; §4's algorithm reverts on those codes
        // alone. The raw code, not the reason it is told as: the reasons
        // group codes RFC 6069 does not name with these (ICMPv4 5 to 8, 11
        // and 12; ICMPv6 2 and 3, beyond the source's scope and address
        // unreachable, a last hop's failed neighbour discovery, where an
        // unbacked-off RTO only repeats the discovery). Linux's
        // `tcp_v4_err` and `tcp_v6_err` take the same codes. A port
        // unreachable or a filter's refusal is no disruption.
        let disruption = match code {
            ICMP_NET_UNREACHABLE => true,
            ICMP_HOST_UNREACHABLE => !v6,
            _ => false,
        };
        if disruption && seq == self.snd.una {
            self.revert_rto(ctx);
        }
        UnreachableOutcome::Remembered
    }

    /// RFC 6069 §4 (TCP-LD): the retransmission at
    /// SND.UNA met a disruption, not congestion, so the RTO's last
    /// doubling (RFC 6298 §5.5) is undone and the timer restarted from
    /// when that retransmission went (its expiry less the RTO it was
    /// armed with) for the reverted RTO; past already, the retransmission
    /// timer fires now. Bounded as Linux's `tcp_ld_RTO_revert` bounds it:
    /// only during a retransmission timeout's run (a timeout since
    /// SND.UNA last moved, the RTO backed off), never below the
    /// unbacked-off RTO; each revert undoes one step, and the run still
    /// ends no sooner than its doublings would have ended it
    /// ([`Connection::retries_spent`]).
    fn revert_rto(&mut self, ctx: &mut Ctx<'_>) {
        if self.timers_rare.retransmits == 0
            || self.timers_rare.rto.is_none()
            || self.flags.has(Flags::PROBE_ARMED)
        {
            return;
        }
        let before = self.rtt.rto();
        if !self.rtt.revert_backoff() {
            return;
        }
        ctx.stats.rto_reverts += 1;
        let shorter = before - self.rtt.rto();
        let at = Instant(self.timers_rare.rto_due.0.saturating_sub(shorter.0));
        if at > ctx.now {
            self.arm_rto_at(at);
        } else {
            self.timers_rare.rto = Deadline::NONE;
            self.on_retransmit_timeout(ctx);
        }
    }

    /// Why a connection that timed out (retransmissions, window probes or
    /// keepalive probes unanswered, or the orphan's FIN-WAIT-2 timer) ends:
    /// the soft error it kept, if any, else [`CloseReason::Timeout`]
    /// (RFC 1122 §4.2.3.9, RFC 5461 §4.1; Linux's `tcp_write_err` reports
    /// `sk_err_soft` in place of `ETIMEDOUT`). Only data in flight keeps
    /// one: a keepalive probe carries SND.UNA - 1, so a message about it is
    /// out of window and ignored (as Linux ignores it), and an orphan in
    /// FIN-WAIT-2 has nothing in flight.
    pub(super) fn timeout_reason(&self) -> CloseReason {
        match self.timers_rare.soft_error {
            Some(what) => CloseReason::Unreachable(what),
            None => CloseReason::Timeout,
        }
    }

    /// Whether retransmission timeouts that reached their `limit` have
    /// run their course at `now`. At once, unless TCP-LD undid backoff
    /// steps in this run (the RTO then backed off fewer times than it
    /// expired: the two move together otherwise, and are reset together
    /// by an ACK that advances SND.UNA); then once the run has taken as
    /// long as `limit` + 1 expiries of a timer doubled each time would
    /// have. Linux measures its limit (`tcp_retries2`) in time for this
    /// reason (`retransmits_timed_out`, `tcp_model_timeout`): counted, a
    /// disruption that routers answer would end a connection in
    /// `limit` unbacked-off RTOs, seconds instead of many minutes.
    pub(super) fn retries_spent(&self, now: Instant, limit: u8) -> bool {
        !self.ld_reverted() || self.rtt.backed_off_for(now) >= self.rtt.backoff_span(limit)
    }

    /// Whether TCP-LD undid backoff steps in the current run of
    /// retransmission timeouts: the RTO then backed off fewer times than
    /// it expired (the two move together otherwise, and an ACK that
    /// advances SND.UNA resets both). Such a run's timeouts come at a
    /// router's pace, one an unbacked-off RTO after another, each answered
    /// "unreachable": they count against the connection's limit only by
    /// time ([`Connection::retries_spent`]), and tell nothing of the
    /// segments' size (`timers.rs`: no black-hole step).
    pub(super) fn ld_reverted(&self) -> bool {
        self.rtt.backoff() < self.timers_rare.retransmits
    }
}
