//! Timer expiry: retransmission (RFC 6298), delayed ACK (RFC 5681 §4.2), persist, keepalive
//! (RFC 1122 §4.2.3.6), TIME-WAIT and orphaned FIN-WAIT-2. A connection that
//! times out ends with the soft error it kept, if any (`unreachable.rs`).

use super::*;

impl Connection {
    /// The earliest pending deadline: every deadline read, for a
    /// connection whose wheel entry fired or that has none (after a
    /// segment or a call, the stack reads [`Connection::take_armed`]).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let t = &self.timers_rare;
        // A delayed ACK in the stack's queue is not the wheel's.
        let ack = if self.flags.has(Flags::ACK_QUEUED) {
            Deadline::NONE
        } else {
            self.timers.delayed_ack
        };
        // Branch-free: an unset timer reads as the end of time.
        t.rto
            .min(ack)
            .min(t.persist)
            .min(t.keepalive)
            .min(t.close)
            .min(self.rack_reo_deadline())
            .get()
    }

    /// The earliest deadline armed since the last call (or since the
    /// connection was made), which the stack files on its wheel when it
    /// comes before the connection's entry; `None` if none was armed.
    /// Deadlines cleared or moved later leave the entry early, to be filed
    /// again when it fires.
    #[inline]
    pub(crate) fn take_armed(&mut self) -> Option<Instant> {
        self.timers.armed.take()
    }

    /// Arms the delayed ACK (RFC 5681 §4.2) at `at`, `ack_delay` from now.
    /// Its deadline goes to the stack's queue of delayed ACKs, not to the
    /// wheel: every connection's is the same delay from its arming, so
    /// the queue is in deadline order by construction, and arming costs a
    /// push, where filing it on the wheel ahead of the connection's entry
    /// (a new connection's first data segment, whose entry is its
    /// SYN-ACK's retransmission timeout) cost a cancel and a filing. A
    /// connection with an entry already queued (armed, acknowledged and
    /// armed again within the delay) adds none: the stack looks at its
    /// deadline again when that entry comes up (`Stack::handle_timeout`).
    #[inline]
    pub(crate) fn arm_delayed_ack(&mut self, at: Instant) {
        self.timers.delayed_ack = Deadline::at(at);
        if !self.flags.has(Flags::ACK_QUEUED) {
            self.flags.set(Flags::ACK_QUEUED);
            self.events |= ev::ACK_DELAYED;
        }
    }

    /// Handles every timer due at `ctx.now`.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let due = |d: Deadline| d.due(now);
        if due(self.timers_rare.close) {
            self.timers_rare.close = Deadline::NONE;
            if self.state == State::TimeWait {
                self.exchange_over(ctx);
            } else {
                self.close_now(self.timeout_reason());
            }
            return;
        }
        if due(self.rack_reo_deadline()) {
            self.on_reorder_timeout(ctx);
        }
        if due(self.timers_rare.rto) && self.flags.has(Flags::PROBE_ARMED) {
            self.on_probe_timeout(ctx);
        } else if due(self.timers_rare.rto) {
            self.timers_rare.rto = Deadline::NONE;
            self.on_retransmit_timeout(ctx);
            if self.state == State::Closed {
                return;
            }
        }
        if due(self.timers_rare.persist) {
            // PERSISTING stays set: the backoff grows until the window
            // opens (`update_send_window`).
            self.timers_rare.persist = Deadline::NONE;
            if self.flags.has(Flags::APP_CLOSED)
                && self.timers_rare.persist_backoff >= ctx.cfg.orphan_retries
            {
                // An orphan whose peer keeps its window shut
                // (`Config::orphan_retries`).
                self.send_rst(ctx, ResetReason::TimedOut);
                self.close_now(self.timeout_reason());
                return;
            }
            if self.timers_rare.retransmits >= ctx.cfg.max_retransmits {
                // A peer that answered none of the last probes is gone (its
                // window shut, then crashed or its route lost), as one that
                // answers no retransmission is: reset and given up (Linux
                // counts unanswered probes against `tcp_retries2`). A probe
                // answered resets the count (`input.rs`).
                self.send_rst(ctx, ResetReason::TimedOut);
                self.close_now(self.timeout_reason());
                return;
            }
            self.timers_rare.persist_backoff = self.timers_rare.persist_backoff.saturating_add(1);
            self.flags.set(Flags::PROBE_NOW);
        }
        if due(self.timers.delayed_ack) {
            self.timers.delayed_ack = Deadline::NONE;
            self.flags.set(Flags::ACK_NOW);
        }
        if due(self.timers_rare.keepalive) {
            self.timers_rare.keepalive = Deadline::NONE;
            if let Some(ka) = self.keepalive(ctx.cfg) {
                // Lazy: segments since the timer was armed (any segment,
                // including the answer to a probe) restart the idle time.
                let idle_end = self.timers.last_recv + ka.idle;
                if self.keepalive_probes == 0 && now < idle_end {
                    self.timers_rare.keepalive = self.timers.arm(idle_end);
                } else if self.keepalive_probes >= ka.probes {
                    self.close_now(self.timeout_reason());
                } else {
                    self.keepalive_probes += 1;
                    self.flags.set(Flags::KEEPALIVE_NOW);
                    self.timers_rare.keepalive = self.timers.arm(now + ka.interval);
                }
            }
        }
    }

    /// In SYN-SENT, puts the SYN back to go out at the next transmission
    /// (it is counted as a retransmission then; the timer's backoff is
    /// unchanged). False in any other state.
    pub(crate) fn resend_syn(&mut self) -> bool {
        if self.state != State::SynSent {
            return false;
        }
        self.snd.nxt = self.snd_rare.iss;
        true
    }

    /// RFC 6298 §5.4-5.6 and RFC 5681 §3.1 on timeout.
    pub(super) fn on_retransmit_timeout(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.rto_timeouts += 1;
        let limit = match self.state {
            State::SynSent => ctx.cfg.max_syn_retransmits,
            State::SynReceived => ctx.cfg.max_synack_retransmits,
            _ if self.flags.has(Flags::APP_CLOSED) => {
                ctx.cfg.max_retransmits.min(ctx.cfg.orphan_retries)
            }
            _ => ctx.cfg.max_retransmits,
        };
        if self.timers_rare.retransmits >= limit && self.retries_spent(ctx.now, limit) {
            if self.state.is_synchronized() {
                self.send_rst(ctx, ResetReason::TimedOut);
            }
            self.close_now(self.timeout_reason());
            return;
        }
        if self.timers_rare.retransmits == 0 {
            self.rtt.backoff_start(ctx.now);
        }
        // Saturating: with TCP-LD's reverts (`unreachable.rs`) a run may
        // count past the limit before its time is up.
        self.timers_rare.retransmits = self.timers_rare.retransmits.saturating_add(1);
        self.rtt.on_timeout();
        self.rtt_seq = TimedSegment::NONE;
        self.ts.rtt_floor = self.tsval(ctx.now);
        match self.state {
            State::SynSent | State::SynReceived => self.snd.nxt = self.snd_rare.iss,
            _ => {
                if self.timers_rare.retransmits == 1 {
                    // RFC 5681 §3.1 equation (4) (RFC 9438 §4.8: CUBIC's
                    // β_cubic of it): FlightSize, which after an earlier
                    // timeout's go-back-N is what was resent since, not
                    // SND.MAX − SND.UNA.
                    self.cc.on_retransmit_timeout(self.loss_flight_size());
                    self.ecn_on_loss_reduction();
                }
                // RFC 4821 §7.3's black-hole heuristic reads timeouts as
                // silent losses of segments too big for the path. Not in a
                // run TCP-LD paced (`unreachable.rs`): a router answered
                // the retransmission at SND.UNA "network or host
                // unreachable", so the path, not the size, is at fault, and
                // its timeouts, one an unbacked-off RTO after another,
                // would take the MSS to its floor within seconds. A probe
                // in flight is still judged.
                if self.flags.has(Flags::MTU_PROBE_OUT) || !self.ld_reverted() {
                    self.mtu_on_retransmit_timeout(ctx);
                }
                self.go_back_n();
                // The first segment goes out even into a zero window.
                self.flags.set(Flags::RETRANSMIT_ONE);
            }
        }
    }

    /// Go back N: everything in flight is resent from the first
    /// unacknowledged byte (after a timeout, or when the path MTU fell and
    /// every segment in flight was too big). RFC 6582 §3.2 step 1; RFC
    /// 6675 §5.1: RecoveryPoint = HighData and SACK recovery ends. RFC 2018
    /// §8: the receiver may have reneged, so prior SACK information is
    /// discarded; blocks arriving from now on still spare the
    /// retransmission what they cover.
    pub(super) fn go_back_n(&mut self) {
        self.snd_rare.recover = self.snd.max;
        self.flags.set(Flags::RECOVER_HELD);
        // A path MTU probe in flight is resent at the MSS with the rest:
        // its ACK no longer tells anything.
        self.flags.clear(
            Flags::IN_RECOVERY | Flags::SACK_RECOVERY | Flags::MTU_PROBE_OUT | Flags::RXT_ABOVE,
        );
        self.scoreboard.clear();
        self.flags.clear(Flags::SACKED);
        // A fast retransmit's undo (RFC 3522 / RFC 4015) is for its own
        // episode, which this one replaces: undone now, it would set the
        // window from the flight given up here, SND.NXT rewound.
        self.flags.clear(Flags::UNDO);
        self.snd_rare.undo = None;
        self.rack_on_rto();
        self.snd.dup_acks = 0;
        self.snd.nxt = self.snd.una;
    }

    /// Called when `poll_transmit` produced nothing: if data waits with
    /// nothing being sent from SND.NXT on and no retransmission timer to
    /// send it, the window (or SWS avoidance) holds it back, so run the
    /// persist timer (RFC 9293 §3.8.6.1; its probe sends what the window
    /// takes, the override timeout of §3.8.6.2.1). Not only when nothing
    /// was ever sent past SND.UNA: a zero window that reopens below one
    /// segment rewinds SND.NXT over the probe (SND.MAX stays past it) and
    /// stops the retransmission timer, and SWS avoidance then holds the
    /// bytes; with no timer left the connection would wait for good.
    pub(crate) fn on_output_idle(&mut self, now: Instant) {
        // The buffer's flag first: a receiver's ACKs read no send timer.
        if !self.flags.has(Flags::SEND_QUEUED)
            || !self.state.can_send()
            || self.timers_rare.persist.is_some()
        {
            return;
        }
        let unsent = self.unsent_bytes();
        if unsent > 0 && self.snd.nxt == self.snd.una && self.timers_rare.rto.is_none() {
            self.arm_persist(now);
        }
    }

    /// Arms the persist timer for the next window probe: the RTO, doubled
    /// for every probe so far, at most 60 s.
    pub(super) fn arm_persist(&mut self, now: Instant) {
        let base = self.rtt.rto();
        let d = base.saturating_mul(1u64 << self.timers_rare.persist_backoff.min(16));
        let max = Duration::from_secs(60).max(base);
        self.flags.set(Flags::PERSISTING);
        self.timers_rare.persist = self.timers.arm(now + d.min(max));
    }

    pub(super) fn unsent_bytes(&self) -> usize {
        let sent = self.snd.nxt.saturating_sub(self.data_start());
        self.queued_bytes().saturating_sub(sent)
    }

    /// The send buffer's bytes, read only when [`Flags::SEND_QUEUED`] says
    /// there may be some: a receiver's segments leave its line alone.
    #[inline]
    pub(super) fn queued_bytes(&self) -> usize {
        if self.flags.has(Flags::SEND_QUEUED) {
            self.send_buf.len()
        } else {
            0
        }
    }
}
