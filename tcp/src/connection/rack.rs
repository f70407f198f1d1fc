//! RACK-TLP (RFC 8985) on a connection with SACK: send times recorded as
//! segments go out (§6.1), RACK's update, reordering detection, reordering
//! window and loss detection on every ACK (§6.2), the reordering timer
//! (§6.3), and the tail loss probe (§7). Lost segments go out through the
//! RFC 6675 recovery of `recovery.rs` (entered once per window of loss,
//! RFC 6582 §3.2); the window arithmetic stays with `cc`.

use super::*;
use crate::rack::{self, Flight, Rack};
use core::ops::ControlFlow::{self, Break, Continue};

/// RFC 8985 §7.2 `WCDelAckT`: the worst-case delayed ACK time added to the
/// probe timeout when one segment is in flight.
const WC_DEL_ACK_T: Duration = Duration::from_millis(200);

impl Connection {
    /// Whether RACK-TLP runs: SACK was negotiated, [`Config::rack`] is on
    /// and the send times of the segments in flight are known. Otherwise
    /// loss detection is RFC 6675's `DupThresh` (and RFC 5681's without
    /// SACK).
    #[inline]
    pub(super) fn rack_active(&self) -> bool {
        self.rack.flight.is_some()
    }

    /// RFC 8985 §6.1: records the transmission of `[seq, end)` (called
    /// before SND.MAX moves over it).
    #[inline]
    pub(super) fn rack_on_transmit(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber, end: SeqNumber) {
        if !ctx.cfg.rack || !self.flags.has(Flags::SACK) {
            return;
        }
        let max = self.snd.max;
        let flight = self
            .rack
            .flight
            .get_or_insert_with(|| ctx.flights.take(self.snd.una));
        flight.on_send(seq, end, rack::stamp(ctx.now), max);
    }

    /// A SACK block `[l, r)` of the arriving ACK, before the scoreboard
    /// takes it: what it newly covers is delivered (§6.2 steps 2-3).
    pub(super) fn rack_on_sack_block(&mut self, l: SeqNumber, r: SeqNumber) {
        let Some(f) = self.rack.flight.as_deref_mut() else {
            return;
        };
        let mut p = l;
        while p < r {
            let (s, next) = self.scoreboard.next_unsacked(p);
            if s >= r {
                break;
            }
            let e = next.unwrap_or(r).min(r);
            f.on_sacked(s, e, l, r);
            p = e;
        }
    }

    /// A D-SACK block (RFC 2883) on the arriving ACK. Once nothing is in
    /// flight any more, `RACK.dsack_round` has ended (SND.UNA reached it),
    /// so the reordering window grows at once (§6.2 step 4). Only as many
    /// D-SACKs as there were retransmissions count (`Rack::dsack_credit`):
    /// a receiver repeating one D-SACK on every ACK otherwise grew the
    /// window with each while nothing was in flight.
    pub(super) fn rack_on_dsack(&mut self, ctx: &mut Ctx<'_>, l: SeqNumber, r: SeqNumber) {
        if self.rack.dsack_credit == 0 {
            ctx.stats.dsack_unexpected += 1;
            return;
        }
        self.rack.dsack_credit -= 1;
        if let Some(f) = self.rack.flight.as_deref_mut() {
            f.dsack = Some((l, r));
        } else {
            self.rack_grow_reo_wnd();
        }
    }

    /// RFC 8985 §6.2 step 4: a D-SACK in a new round grows the reordering
    /// window for the next 16 recoveries. A D-SACK reports a needless
    /// retransmission: the original was only late, i.e. reordered.
    fn rack_grow_reo_wnd(&mut self) {
        self.rack.reo_wnd_mult = self.rack.reo_wnd_mult.saturating_add(1);
        self.rack.reo_wnd_persist = rack::REO_WND_PERSIST;
        self.rack.bits |= Rack::REORDERING_SEEN;
    }

    /// RFC 8985 §6.2 for an arriving ACK (after SND.UNA moved and the
    /// scoreboard took its blocks), and the TLP episode's end (§7.4).
    /// `advanced`: the ACK moved SND.UNA.
    pub(super) fn rack_on_ack(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, advanced: bool) {
        let una = self.snd.una;
        let now = rack::stamp(ctx.now);
        let recovering = self.flags.has(Flags::IN_RECOVERY | Flags::RECOVER_HELD);
        let ts_age_ms = seg
            .options
            .timestamps
            .filter(|_| self.flags.has(Flags::TIMESTAMPS))
            .map(|(_, ecr)| self.tsval(ctx.now).wrapping_sub(ecr));
        let Some(f) = self.rack.flight.as_deref_mut() else {
            return;
        };
        f.on_cumulative_ack(una);
        // Step 2, RACK_update(): from the newest segment delivered.
        let mut updated = false;
        if let Some(n) = f.newest.take() {
            let rtt = now.wrapping_sub(n.xmit);
            let retransmitted = n.flags & rack::Record::RETRANSMITTED != 0;
            let sacked = n.flags & rack::Record::SACKED != 0;
            // A retransmitted segment's sample is ambiguous (Karn): taken
            // only if the RTT is no less than the minimum and, for a
            // cumulative ACK, the ACK echoes a timestamp no older than the
            // retransmission. (A SACKed segment arrived out of order and
            // does not update the peer's TS.Recent, RFC 7323 §4.3: its
            // ACK echoes an older segment's TSval whichever copy came.)
            let stale_echo =
                !sacked && ts_age_ms.is_some_and(|ms| u64::from(ms) * 1000 > u64::from(rtt) + 1000);
            let ambiguous = retransmitted && (stale_echo || rtt < self.rack.min_rtt_us);
            if !ambiguous {
                f.rtt_us = rtt;
                if !retransmitted {
                    // Step 1: RACK.min_RTT, from unambiguous samples.
                    self.rack.min_rtt_us = self.rack.min_rtt_us.min(rtt);
                }
                if !f.has_rack || rack::sent_after(n.xmit, n.end, f.xmit_ts, f.end_seq) {
                    f.xmit_ts = n.xmit;
                    f.end_seq = n.end;
                }
                f.has_rack = true;
                updated = true;
            }
        }
        // Step 3: RACK_detect_reordering().
        f.ack_done();
        if core::mem::take(&mut f.reordered) {
            self.rack.bits |= Rack::REORDERING_SEEN;
        }
        // Step 4, the DSACK-driven half of RACK_update_reo_wnd().
        let dsack = f.dsack.take();
        if f.dsack_round.is_some_and(|r| una >= r) {
            f.dsack_round = None;
        }
        if dsack.is_some() && f.dsack_round.is_none() {
            f.dsack_round = Some(self.snd.max);
            self.rack_grow_reo_wnd();
        } else if self.rack.has(Rack::RECOVERING) && !recovering {
            self.rack.reo_wnd_persist = self.rack.reo_wnd_persist.saturating_sub(1);
            if self.rack.reo_wnd_persist == 0 {
                self.rack.reo_wnd_mult = 1;
            }
        }
        if recovering {
            self.rack.bits |= Rack::RECOVERING;
        } else {
            self.rack.bits &= !Rack::RECOVERING;
        }
        self.tlp_on_ack(ctx, seg, advanced, dsack);
        if updated {
            // Step 5 scans the segments in flight: with none left (the ACK
            // took all: a response's, a handshake's), nothing is deemed
            // lost and no reordering timer is armed (§6.3), which is all
            // the scan would find.
            let drained = self.rack.flight.as_deref().is_some_and(|f| f.is_empty());
            if !drained {
                self.rack_detect_loss(ctx);
            } else if let Some(f) = self.rack.flight.as_deref_mut() {
                f.reo_timer = Deadline::NONE;
            }
        }
        self.rack_release(ctx);
    }

    /// Frees the flight once everything sent is acknowledged and no TLP
    /// episode waits for its verdict.
    fn rack_release(&mut self, ctx: &mut Ctx<'_>) {
        if self.snd.una == self.snd.max {
            if let Some(f) = self.rack.flight.as_deref() {
                if f.is_empty() && f.tlp_end.is_none() {
                    if let Some(f) = self.rack.flight.take() {
                        ctx.flights.give(f);
                    }
                }
            }
        }
    }

    /// RFC 8985 §6.2 step 4 `RACK_update_reo_wnd()`, in microseconds: zero
    /// while no reordering was seen and the sender is in recovery or
    /// `DupThresh` segments are SACKed; otherwise min(reo_wnd_mult *
    /// min_RTT / 4, SRTT).
    fn rack_reo_wnd(&self) -> u32 {
        if !self.rack.has(Rack::REORDERING_SEEN) {
            let dup_thresh = crate::sack::DUP_THRESH * self.eff_mss();
            if self.flags.has(Flags::IN_RECOVERY | Flags::RECOVER_HELD)
                || self.scoreboard.sacked_in(self.snd.una, self.snd.max) >= dup_thresh
            {
                return 0;
            }
        }
        let min_rtt = u64::from(self.rack.min_rtt_us.min(u32::MAX / 64));
        let srtt = self.rtt.srtt().map_or(u64::MAX, |d| d.as_nanos() / 1000);
        (u64::from(self.rack.reo_wnd_mult) * min_rtt / 4).min(srtt) as u32
    }

    /// RFC 8985 §6.2 step 5 and §6.3: marks lost what RACK deems lost,
    /// starts recovery for it (once per window of loss, RFC 6582 §3.2) and
    /// arms the reordering timer for the next candidate.
    fn rack_detect_loss(&mut self, ctx: &mut Ctx<'_>) {
        let reo_wnd = self.rack_reo_wnd();
        let una = self.snd.una;
        let Some(f) = self.rack.flight.as_deref_mut() else {
            return;
        };
        let thresh = f.rtt_us.saturating_add(reo_wnd);
        let scan = f.detect_loss(una, rack::stamp(ctx.now), thresh);
        f.reo_timer = match scan.wait_us {
            Some(us) => self
                .timers
                .arm(ctx.now + Duration::from_micros(u64::from(us).max(1))),
            None => Deadline::NONE,
        };
        if scan.lost == 0 {
            return;
        }
        ctx.stats.rack_lost += u64::from(scan.lost);
        if !self.flags.has(Flags::IN_RECOVERY) {
            // In a timeout's go-back-N (SND.NXT rewound below SND.MAX), the
            // segments from SND.NXT on that RACK finds lost were sent before
            // the timeout: its loss episode, answered by its window of one
            // segment (RFC 5681 §3.1) and resent in order as that window
            // grows. Only a segment resent since, lost again, is a new loss
            // (what the RFC 6582 §4.2 heuristic tells from duplicate ACKs).
            let resent_lost = scan.first_lost.is_some_and(|s| s < self.snd.nxt);
            let heuristic = resent_lost
                && self.cc.window() > self.eff_mss()
                && una - self.snd.prev_una <= 4 * self.eff_mss();
            if self.new_loss_episode(una) || heuristic {
                self.enter_recovery(ctx);
                ctx.stats.fast_retransmits += 1;
                // The recovery's reduction covers a loss the probe revealed.
                if let Some(f) = self.rack.flight.as_deref_mut() {
                    f.tlp_end = None;
                }
            }
        } else if let Some(s) = scan.lost_retransmission {
            // A retransmission was lost (§6.2): NextSeg() resends from it.
            if self.flags.has(Flags::SACK_RECOVERY) {
                self.snd_rare.high_rxt = self.snd_rare.high_rxt.min(s).max(una);
            } else {
                self.flags.set(Flags::RETRANSMIT_ONE);
            }
        }
    }

    /// RACK.min_RTT (RFC 8985 §6.2 step 1), if a sample gave one.
    pub(super) fn rack_min_rtt(&self) -> Option<Duration> {
        (self.rack.min_rtt_us != u32::MAX)
            .then(|| Duration::from_micros(u64::from(self.rack.min_rtt_us)))
    }

    /// Un-SACKed bytes below this are lost by RACK's verdict.
    #[inline]
    pub(super) fn rack_lost_end(&self) -> SeqNumber {
        self.rack
            .flight
            .as_deref()
            .map_or(self.snd.una, |f| f.lost_end)
    }

    /// The RACK reordering timer (RFC 8985 §6.3).
    #[inline]
    pub(super) fn rack_reo_deadline(&self) -> Deadline {
        self.rack
            .flight
            .as_deref()
            .map_or(Deadline::NONE, |f| f.reo_timer)
    }

    /// RFC 8985 §6.3: the reordering timer fired; the segments it waited
    /// for are now lost unless delivered.
    pub(super) fn on_reorder_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(f) = self.rack.flight.as_deref_mut() {
            f.reo_timer = Deadline::NONE;
        }
        ctx.stats.rack_reo_timeouts += 1;
        self.rack_detect_loss(ctx);
    }

    /// A retransmission timeout: SACK information is dropped (RFC 2018
    /// §8) and so is RACK's verdict; a pending probe's episode ends.
    pub(super) fn rack_on_rto(&mut self) {
        let una = self.snd.una;
        if let Some(f) = self.rack.flight.as_deref_mut() {
            f.forget_sacks(una);
            f.tlp_end = None;
        }
        self.flags.clear(Flags::TLP_NOW);
    }

    /// Whether the probe timer is RFC 8985 §7's: RACK-TLP runs, outside
    /// fast recovery, with no probe outstanding. Otherwise it is the loss
    /// probe of `recovery.rs` (at SND.UNA, backed off, a loss signal),
    /// which so follows an unanswered TLP before the RTO does: on a path
    /// whose RTT is far below the minimum RTO, a lost probe would
    /// otherwise cost 200 ms.
    #[inline]
    pub(super) fn tlp_armable(&self) -> bool {
        !self.flags.has(Flags::IN_RECOVERY)
            && self
                .rack
                .flight
                .as_deref()
                .is_some_and(|f| f.tlp_end.is_none())
    }

    /// RFC 8985 §7.2: whether a probe timeout may be armed: outside fast
    /// and RTO recovery, with no probe outstanding.
    fn tlp_allowed(&self) -> bool {
        !self.flags.has(Flags::IN_RECOVERY | Flags::RECOVER_HELD)
            && self.state.is_synchronized()
            && self
                .rack
                .flight
                .as_deref()
                .is_some_and(|f| f.tlp_end.is_none())
    }

    /// RFC 8985 §7.2: PTO = 2 * SRTT (and a margin, see
    /// [`Connection::base_pto`]), plus `WCDelAckT` when a single segment is
    /// in flight; `None` before any RTT sample.
    fn tlp_pto(&self) -> Option<Duration> {
        let mut pto = self.base_pto()?;
        if self.snd.max - self.snd.una <= self.eff_mss() {
            pto = Duration::from_nanos(pto.as_nanos().saturating_add(WC_DEL_ACK_T.as_nanos()));
        }
        Some(pto)
    }

    /// After an ACK (RFC 8985 §7.2; RFC 6298 §5.3): the probe timeout if
    /// allowed and earlier than the RTO, else the RTO.
    pub(super) fn arm_tlp_or_rto(&mut self, now: Instant) {
        let rto = self.rtt.rto();
        if let Some(pto) = self.tlp_pto().filter(|&p| p < rto && self.tlp_allowed()) {
            self.flags.set(Flags::PROBE_ARMED);
            self.timers_rare.rto_due = now + rto;
            self.timers_rare.rto = self.timers.arm(now + pto);
        } else {
            self.arm_rto_at(now + rto);
        }
    }

    /// After sending new data (RFC 8985 §7.2): the probe timeout restarts,
    /// unless an RTO is pending earlier.
    pub(super) fn rearm_tlp(&mut self, now: Instant) {
        if !self.tlp_allowed() {
            return;
        }
        let Some(pto) = self.tlp_pto() else {
            return;
        };
        self.arm_probe_at(now + pto);
    }

    /// RFC 8985 §7.3: the probe timeout fired; the next segment out is the
    /// probe, and the RTO (not another probe) guards it.
    pub(super) fn on_tlp_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.arm_rto_at(ctx.now + self.rtt.rto());
        if self.tlp_allowed() {
            self.flags.set(Flags::TLP_NOW);
        }
    }

    /// RFC 8985 §7.3 `TLP_send_probe()`: one new segment if there is one
    /// and the peer's window allows it (the congestion window does not
    /// apply), else the last segment sent again (the highest sequence, not
    /// SND.UNA: its ACK, with SACK, reveals which earlier segments were
    /// lost). `TLP.end_seq` = SND.MAX afterwards.
    #[inline]
    pub(super) fn poll_tlp(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> ControlFlow<Option<usize>> {
        // In the flags, which every poll reads anyway: `rack` is a line a
        // receiver's ACKs do not otherwise touch.
        if !self.flags.has(Flags::TLP_NOW) {
            return Continue(());
        }
        self.flags.clear(Flags::TLP_NOW);
        if !self.tlp_allowed() {
            // An ACK since the timer fired started recovery: its repairs
            // go, not a probe (§7.3 probes a flight without one).
            return Continue(());
        }
        let Some(last) = self.rack.flight.as_deref().and_then(Flight::last_start) else {
            return Continue(());
        };
        let mss = self.eff_mss();
        let unsent = self.unsent_bytes();
        let in_flight = self.snd.nxt - self.snd.una;
        let room = (self.snd.wnd as usize).saturating_sub(in_flight);
        let new_len = unsent.min(mss);
        // Outstanding from here on: the probe's own transmission must not
        // re-arm a probe timeout.
        if let Some(f) = self.rack.flight.as_deref_mut() {
            f.tlp_end = Some(self.snd.max);
        }
        let (sent, retrans) = if self.snd.nxt == self.snd.max && new_len > 0 && room >= new_len {
            let seq = self.snd.nxt;
            let fin = self.fin_seq().is_some_and(|fs| seq + new_len == fs);
            (self.emit_segment(ctx, buf, seq, new_len, fin), false)
        } else {
            let seq = last.max(self.snd.max - mss).max(self.snd.una);
            let data_end = match self.fin_seq() {
                Some(fs) if fs < self.snd.max => fs,
                _ => self.snd.max,
            };
            let len = data_end.saturating_sub(seq);
            (self.retransmit_at(ctx, buf, seq, len), true)
        };
        let max = self.snd.max;
        if let Some(f) = self.rack.flight.as_deref_mut() {
            if sent.is_some() {
                f.tlp_end = Some(max);
                f.tlp_retrans = retrans;
            } else {
                f.tlp_end = None;
            }
        }
        if sent.is_some() {
            ctx.stats.tlp_probes += 1;
            // §7.3: the RTO guards the probe (with the loss probe of
            // `recovery.rs` ahead of it, see `tlp_armable`).
            self.arm_rto_or_probe(ctx.now);
            return Break(sent);
        }
        Continue(())
    }

    /// RFC 8985 §7.4 (as Linux `tcp_process_tlp_ack`): once an ACK reaches
    /// `TLP.end_seq`, the episode ends; a probe of new data proves
    /// nothing, a D-SACK of the probe or a pure duplicate ACK shows that
    /// the original arrived too (no loss), and an ACK beyond it without
    /// either shows that the probe repaired a loss: congestion control
    /// reacts as to a fast recovery that ended at once.
    fn tlp_on_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        advanced: bool,
        dsack: Option<(SeqNumber, SeqNumber)>,
    ) {
        let Some(f) = self.rack.flight.as_deref_mut() else {
            return;
        };
        let Some(end) = f.tlp_end else {
            return;
        };
        let ack = SeqNumber(seg.ack);
        if ack < end {
            return;
        }
        let dsack_of_probe = dsack.is_some_and(|(l, r)| l < end && end <= r + 1);
        let pure_dup = !advanced && seg.options.sack_block_count == 0;
        if !f.tlp_retrans || dsack_of_probe || pure_dup {
            f.tlp_end = None;
        } else if ack > end {
            f.tlp_end = None;
            ctx.stats.tlp_recoveries += 1;
            let w = self.cc.window();
            self.cc.on_sack_recovery(w);
            self.cc.on_recovery_exit(w);
            self.ecn_on_loss_reduction();
        }
    }
}
