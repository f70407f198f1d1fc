//! Loss detection and recovery: the RFC 6675 SACK scoreboard and pipe, NewReno fast
//! recovery (RFC 6582), Eifel undo (RFC 3522 / RFC 4015), limited transmit (RFC 3042) and
//! loss probes (after RFC 8985 §7).

use super::*;

impl Connection {
    /// RFC 6675 §4 `Update()`: records the SACK blocks of an arriving ACK
    /// (RFC 2018 §3) in the scoreboard and drops what the cumulative ACK
    /// covers. A first block below the cumulative ACK or inside the second
    /// block is a D-SACK (RFC 2883 §4) and reports nothing held. Blocks
    /// beyond SND.MAX are ignored. Returns whether anything new was SACKed.
    pub(super) fn update_scoreboard(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr) -> bool {
        let o = &seg.options;
        let n = usize::from(o.sack_block_count).min(o.sack_blocks.len());
        let ack = SeqNumber(seg.ack).max(self.snd.una);
        let mut news = false;
        let block = |i: usize| (SeqNumber(o.sack_blocks[i].0), SeqNumber(o.sack_blocks[i].1));
        for i in 0..n {
            let (l, r) = block(i);
            let dsack = i == 0
                && (r <= SeqNumber(seg.ack) || (n > 1 && l >= block(1).0 && r <= block(1).1));
            if dsack {
                self.rack_on_dsack(ctx, l, r);
            }
            if dsack
                || r <= ack
                || r > self.snd.max
                || l >= r
                || !self.scoreboard.takes(l.max(ack), r)
            {
                continue;
            }
            self.rack_on_sack_block(l.max(ack), r);
            news |= self.scoreboard.add(l.max(ack), r);
        }
        self.scoreboard.prune(ack);
        if self.scoreboard.is_empty() {
            self.flags.clear(Flags::SACKED);
        } else {
            self.flags.set(Flags::SACKED);
        }
        news
    }

    /// SACK-based loss detection, after the scoreboard changed. Outside
    /// recovery: RFC 6675 §5 step (2), `IsLost(HighACK + 1)` starts loss
    /// recovery even before `DupThresh` duplicate ACKs (a batch of SACKed
    /// segments in one stretch ACK), under the same new-episode rule as
    /// the duplicate-ACK trigger (RFC 6582 §3.2 step 2, §4.2). In SACK
    /// recovery: lost-retransmission detection (the SACK counterpart of
    /// `arm_lost_retransmit`, after RFC 8985 §6.2): once more than
    /// `(DupThresh - 1) * SMSS` bytes sent after the latest retransmission
    /// are SACKed, every retransmission should have arrived, so holes that
    /// remain below `HighRxt` were lost again; `HighRxt` falls back to
    /// SND.UNA and `NextSeg()` resends them (same episode, no further
    /// window reduction).
    pub(super) fn sack_loss_detection(&mut self, ctx: &mut Ctx<'_>) {
        if !self.flags.has(Flags::SACKED) || !self.state.is_synchronized() {
            return;
        }
        let mss = self.eff_mss();
        let una = self.snd.una;
        if !self.flags.has(Flags::IN_RECOVERY) {
            // With RACK-TLP, RACK alone starts recovery (RFC 8985 §6.2).
            if !self.rack_active() && self.scoreboard.lost_boundary(una, mss) > una {
                let new_episode = self.new_loss_episode(una);
                let heuristic = self.cc.window() > mss && una - self.snd.prev_una <= 4 * mss;
                if new_episode || heuristic {
                    self.enter_recovery(ctx);
                    ctx.stats.fast_retransmits += 1;
                }
            }
        } else if self.flags.has(Flags::SACK_RECOVERY)
            && self.snd_rare.high_rxt > una
            && self
                .scoreboard
                .sacked_in(self.snd_rare.rtx_mark, self.snd.max)
                > (DUP_THRESH - 1) * mss
        {
            self.snd_rare.high_rxt = una;
            self.snd_rare.rtx_mark = self.snd.max;
        }
    }

    /// Un-SACKed bytes below the returned sequence number are lost: the
    /// `IsLost()` boundary (RACK's verdict with RACK-TLP, RFC 8985 §6.2),
    /// or the floor a loss probe set.
    pub(super) fn lost_boundary(&self) -> SeqNumber {
        let b = if self.rack_active() {
            self.rack_lost_end()
        } else {
            self.scoreboard.lost_boundary(self.snd.una, self.eff_mss())
        };
        b.max(self.snd_rare.lost_floor.min(self.snd.max))
    }

    /// RFC 6675 §4 `SetPipe()`: the bytes deemed in the network. Un-SACKed
    /// bytes that `IsLost()` does not declare lost count once; bytes up to
    /// `HighRxt` that are not SACKed count once more (retransmitted).
    pub(super) fn pipe(&self) -> usize {
        let (una, max) = (self.snd.una, self.snd.max);
        let lost = self.lost_boundary().min(max);
        let flight = (max - lost) - self.scoreboard.sacked_in(lost, max);
        let hr = self.snd_rare.high_rxt.max(una).min(max);
        flight + (hr - una) - self.scoreboard.sacked_in(una, hr)
    }

    /// RFC 6675 §4 `NextSeg()` rule (1): the first un-SACKed segment above
    /// `HighRxt` that is lost; at most one SMSS and never into SACKed data.
    pub(super) fn next_seg_lost(&self) -> Option<(SeqNumber, usize)> {
        let (una, max) = (self.snd.una, self.snd.max);
        let (s, lim) = self
            .scoreboard
            .next_unsacked(self.snd_rare.high_rxt.max(una));
        if s >= self.lost_boundary() || s >= max {
            return None;
        }
        let end = lim.unwrap_or(max).min(max);
        Some((s, self.eff_mss().min(end - s)))
    }

    /// Retransmits up to `len` bytes at `seq` (with the FIN if it ends
    /// there) and, in SACK recovery, advances `HighRxt` over it.
    pub(super) fn retransmit_at(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        seq: SeqNumber,
        len: usize,
    ) -> Option<usize> {
        let off = seq.saturating_sub(self.data_start());
        let len = len.min(self.send_buf.len().saturating_sub(off));
        let fin = self.fin_seq().is_some_and(|fs| seq + len == fs);
        if len == 0 && !fin {
            return None;
        }
        let r = self.emit_segment(ctx, buf, seq, len, fin);
        if r.is_some() && self.flags.has(Flags::SACK_RECOVERY) {
            self.snd_rare.high_rxt = self.snd_rare.high_rxt.max(seq + len + usize::from(fin));
            self.snd_rare.rtx_mark = self.snd.max;
        }
        r
    }

    /// The first ACK that advances SND.UNA after a fast retransmit with
    /// Eifel state: the state is used up, and the reduction undone if
    /// [`Connection::eifel_undo`] finds the retransmission spurious. Not on
    /// an ACK that echoes a CE mark: the network congested this window
    /// whatever became of the retransmission, so the reduction stands (RFC
    /// 3168 §6.1.2; `on_ecn_echo` for earlier echoes).
    #[inline(never)]
    pub(super) fn try_undo(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        bytes_acked: usize,
    ) -> bool {
        self.flags.clear(Flags::UNDO);
        let undo = self.snd_rare.undo.take();
        !self.ecn_holds_cwnd(seg)
            && undo.is_some_and(|undo| self.eifel_undo(ctx.stats, undo, seg, bytes_acked))
    }

    /// The Eifel detection algorithm (RFC 3522 §3.2) on the first ACK that
    /// advances SND.UNA after a fast retransmit: if it echoes a TSval older
    /// than the retransmission's, the original arrived (late, reordered) and
    /// the retransmission was spurious. Heavy reordering makes that common,
    /// and every false alarm would otherwise halve the window. The response
    /// is RFC 4015 §3.2: leave fast recovery, cwnd = FlightSize +
    /// min(bytes_acked, IW), ssthresh = pipe_prev. Equal TSvals (reordering
    /// within one clock tick) are not told apart: the reduction then stays.
    /// Returns whether the reduction was undone.
    pub(super) fn eifel_undo(
        &mut self,
        stats: &mut Stats,
        undo: UndoState,
        seg: &TcpRepr,
        bytes_acked: usize,
    ) -> bool {
        let Some((_, tsecr)) = seg.options.timestamps else {
            return false;
        };
        if (tsecr.wrapping_sub(undo.retransmit_ts) as i32) >= 0 {
            return false;
        }
        self.note_retransmissions_above();
        self.flags
            .clear(Flags::IN_RECOVERY | Flags::SACK_RECOVERY | Flags::RETRANSMIT_ONE);
        // No loss happened in that window, so the RFC 6582 guard against a
        // second fast retransmit for it must not hold back the next one.
        self.flags.clear(Flags::RECOVER_HELD);
        let flight = self.snd.max - self.snd.una;
        self.cc
            .on_spurious_recovery(flight, bytes_acked, undo.pipe_prev());
        stats.spurious_recoveries += 1;
        true
    }

    /// A SACK recovery ends (a full ACK, or undone): whether its
    /// retransmissions reach past SND.UNA, which a recovery entered before
    /// SND.UNA passes them must not send again (`enter_recovery`).
    pub(super) fn note_retransmissions_above(&mut self) {
        if self.flags.has(Flags::SACK_RECOVERY) && self.snd_rare.high_rxt > self.snd.una {
            self.flags.set(Flags::RXT_ABOVE);
        }
    }

    /// RFC 6582 §3.2 step 2: whether duplicate ACKs at `ack` may start
    /// fast retransmit: no earlier episode is held, or `ack` covers its
    /// `recover` (one past the highest sequence number sent then, so an
    /// ACK "covers more than recover" once it reaches it).
    pub(super) fn new_loss_episode(&self, ack: SeqNumber) -> bool {
        !self.flags.has(Flags::RECOVER_HELD) || ack >= self.snd_rare.recover
    }

    /// RFC 5681 §3.1 equation (4)'s FlightSize, which a loss reduces the
    /// window from (fast recovery here, a timeout in
    /// `on_retransmit_timeout`): sent and not acknowledged. After a
    /// timeout's go-back-N, what lies past SND.NXT was given up as lost at
    /// that timeout and is not in flight: a new loss there, or a second
    /// timeout after partial progress (which reset the timer's count),
    /// reduces from what was resent since, not from the flight before the
    /// first timeout.
    #[inline]
    pub(super) fn loss_flight_size(&self) -> usize {
        self.snd.nxt - self.snd.una
    }

    /// RFC 6582 §3.2 step 2 / RFC 5681 §3.2 steps 2-3: enter fast recovery
    /// and retransmit SND.UNA. When SND.UNA is a path MTU probe, its loss
    /// is no sign of congestion (RFC 4821 §7.6.2): the recovery repairs it
    /// without reducing the window (`Flags::MTU_PROBE_OUT` stays set until
    /// it ends) and without Eifel state.
    ///
    /// Nor is the window reduced again when an ECN echo already reduced it
    /// for this window of data (`Flags::ECN_REDUCED`, and SND.UNA was sent
    /// before that reduction): RFC 3168 §6.1.2 has drops and CE marks of
    /// one window of data reduce the window once (Linux likewise enters
    /// recovery from its CWR state without a second reduction, and ends
    /// that state once SND.UNA reaches the data sent after it). That
    /// reduction answered real congestion, so no Eifel state may undo it
    /// either.
    pub(super) fn enter_recovery(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let flight = self.loss_flight_size();
        let probe_lost = self.flags.has(Flags::MTU_PROBE_OUT) && self.mtu_probe_at_loss(ctx);
        let echo_reduced =
            self.flags.has(Flags::ECN_REDUCED) && self.snd.una < self.snd_rare.ecn_high;
        let reduced = probe_lost || echo_reduced;
        // SACK recovery with RACK, where an earlier episode's
        // retransmissions above SND.UNA are not yet acknowledged (one that
        // ended, or was undone, before the segments it resent were): those
        // copies may be queued at the bottleneck, sent after everything
        // SACKed so far (RACK, RFC 8985 §6.2, orders by send time and does
        // not deem them lost). So neither SND.UNA nor anything up to the
        // old HighRxt is sent again now, and with no retransmission of
        // SND.UNA there is nothing for Eifel to test. Any of them lost
        // again is resent by the lost-retransmission rule of
        // `sack_loss_detection` (HighRxt falls back to SND.UNA once data
        // sent after this recovery began is SACKed beyond DupThresh). (Resending them made an overshoot of a 10 ms
        // drop-tail queue cost 2 614 retransmissions for 2 317 losses, 11
        // recoveries entered on a new loss far above SND.UNA and undone when
        // the old copy of SND.UNA arrived.)
        // (`RXT_ABOVE` implies SACK: only a SACK recovery sets it.)
        let resent_above = self.flags.has(Flags::RXT_ABOVE)
            && self.rack_active()
            && self.snd_rare.high_rxt > self.snd.una
            && self.snd_rare.high_rxt <= self.snd.max;
        // From here `high_rxt` is this episode's.
        self.flags.clear(Flags::RXT_ABOVE);
        if self.flags.has(Flags::TIMESTAMPS) && !reduced && !resent_above {
            // RFC 3522 §3.2 step (1) / RFC 4015 §3.2 step (1).
            self.snd_rare.undo = Some(UndoState::new(
                self.tsval(now),
                flight.max(self.cc.ssthresh()),
            ));
            self.flags.set(Flags::UNDO);
        }
        self.flags.set(Flags::IN_RECOVERY | Flags::RECOVER_HELD);
        if !resent_above {
            self.flags.set(Flags::RETRANSMIT_ONE);
        }
        self.snd_rare.recover = self.snd.max;
        self.arm_lost_retransmit();
        if self.flags.has(Flags::SACK) {
            // RFC 6675 §5 step (4): RecoveryPoint = HighData, cwnd =
            // ssthresh = FlightSize / 2, retransmit HighACK + 1 (the
            // RETRANSMIT_ONE segment; HighRxt follows it).
            self.flags.set(Flags::SACK_RECOVERY);
            // After a timeout's go-back-N (entered through the RFC 6582
            // §4.2 heuristic), what lies between SND.NXT and SND.MAX is
            // covered by the scoreboard like any other flight.
            self.snd.nxt = self.snd.max;
            if !resent_above {
                self.snd_rare.high_rxt = self.snd.una;
            }
            self.snd_rare.rtx_mark = self.snd.max;
            self.snd_rare.lost_floor = self.snd.una;
            if !reduced {
                self.cc.on_sack_recovery(flight);
            }
        } else if !reduced {
            self.cc.on_fast_retransmit(flight);
        }
        if !reduced {
            self.ecn_on_loss_reduction();
        }
        self.rtt_seq = TimedSegment::NONE;
        // The retransmission that starts the recovery restarts the timer
        // (RFC 6298 §5.1 as Linux applies it to a resent SND.UNA): a probe
        // armed for the flight would fire within a round trip of the
        // repairs and take them as lost too (`on_probe_timeout`). Nothing
        // is resent when an earlier episode's copies are still out.
        if !resent_above {
            self.arm_rto_or_probe(now);
        }
    }

    /// Sets the duplicate ACK count at which the retransmission of SND.UNA
    /// about to go out counts as lost: every segment in flight ahead of it
    /// may still produce one duplicate ACK, and three more (the RFC 5681
    /// §3.2 threshold, which absorbs duplicated segments and ACKs) can only
    /// come from segments sent after the retransmission, so it should have
    /// arrived first. This is RFC 5681's duplicate-ACK rule applied to the
    /// retransmission, the non-SACK counterpart of the lost-retransmission
    /// detection of RFC 8985 §6.2 (RACK).
    pub(super) fn arm_lost_retransmit(&mut self) {
        let mss = self.eff_mss().max(1);
        let ahead = (self.snd.max - self.snd.una).div_ceil(mss);
        // At most what the count reaches (it stops at 255): with more
        // than 252 segments ahead, the repair may go again early (one
        // segment, no reduction) rather than wait for a timer, and the
        // count starts again from it (`on_dup_ack`), so at most one
        // segment goes for every 255 duplicate ACKs.
        let at = usize::from(self.snd.dup_acks) + ahead + 3;
        self.snd_rare.lost_rtx_dups = at.min(usize::from(u8::MAX)) as u16;
    }

    /// RFC 3042 §2 limited transmit: on the first and second duplicate ACK,
    /// new data may go out up to two segments beyond the congestion window
    /// (cwnd itself is unchanged), so that a loss in a small window still
    /// yields the three duplicate ACKs fast retransmit needs instead of a
    /// retransmission timeout.
    pub(super) fn limited_transmit(&self) -> usize {
        if self.flags.has(Flags::IN_RECOVERY) || self.snd.nxt != self.snd.max {
            return 0;
        }
        usize::from(self.snd.dup_acks.min(2)) * self.eff_mss()
    }

    /// Arms the retransmission timer after an ACK advanced SND.UNA (RFC
    /// 6298 §5.2 / §5.3). If data remains outstanding and more than one
    /// segment is in flight, a loss probe timeout comes first (RFC 8985
    /// §7.2: PTO = 2*SRTT, at most the RTO; a single segment in flight may
    /// wait for a delayed ACK, so it gets the RTO). Without SACK, the probe
    /// is the segment at SND.UNA (see `on_probe_timeout`).
    pub(super) fn arm_rto_or_probe(&mut self, now: Instant) {
        self.flags.clear(Flags::PROBE_ARMED);
        if self.snd.una == self.snd.max {
            self.timers_rare.rto = Deadline::NONE;
            return;
        }
        if self.tlp_armable() {
            self.arm_tlp_or_rto(now);
            return;
        }
        let rto = self.rtt.rto();
        let flight = self.snd.max - self.snd.una;
        if let Some(pto) = self.pto() {
            if self.probe_worthwhile(flight)
                && pto < rto
                && self.timers_rare.loss_probes < MAX_LOSS_PROBES
            {
                self.flags.set(Flags::PROBE_ARMED);
                self.timers_rare.rto_due = now + rto;
                self.timers_rare.rto = self.timers.arm(now + pto);
                return;
            }
        }
        self.arm_rto_at(now + rto);
    }

    /// Starts (or restarts) the retransmission timer to expire at `at`
    /// (RFC 6298 §5.1, §5.3), in the slot a probe held.
    pub(super) fn arm_rto_at(&mut self, at: Instant) {
        self.flags.clear(Flags::PROBE_ARMED);
        self.timers_rare.rto_due = at;
        self.timers_rare.rto = self.timers.arm(at);
    }

    /// RFC 8985 §7.2: (re)start the loss probe timer after sending new
    /// data, if that makes it fire before the RTO would. Without this, an
    /// RTO armed while one segment was in flight would guard the segments
    /// sent after it too, and a loss among them too small for three
    /// duplicate ACKs would wait the full RTO.
    pub(super) fn rearm_probe(&mut self, now: Instant) {
        if self.tlp_armable() {
            self.rearm_tlp(now);
            return;
        }
        let flight = self.snd.max - self.snd.una;
        if self.timers_rare.loss_probes >= MAX_LOSS_PROBES || !self.probe_worthwhile(flight) {
            return;
        }
        let Some(pto) = self.pto() else {
            return;
        };
        self.arm_probe_at(now + pto);
    }

    /// Arms the probe timer (the loss probe, or RACK's TLP) for `at`,
    /// unless a retransmission timeout is due no later; never past the
    /// retransmission timer's expiry (RFC 8985 §7.2 `TLP_calc_PTO`): new
    /// data sent every PTO would otherwise put both off for as long as
    /// the windows take it, on a path gone dark.
    pub(super) fn arm_probe_at(&mut self, at: Instant) {
        let mut at = at;
        if let Some(d) = self.timers_rare.rto.get() {
            if !self.flags.has(Flags::PROBE_ARMED) && d <= at {
                return;
            }
            at = at.min(self.timers_rare.rto_due);
        }
        self.flags.set(Flags::PROBE_ARMED);
        self.timers_rare.rto = self.timers.arm(at);
    }

    /// RFC 8985 §7.2 gives a lone segment in flight the worst-case delayed
    /// ACK time on top of the PTO, which leaves only the RTO; in fast
    /// recovery, though, that segment is a retransmission filling a hole,
    /// which the receiver acknowledges at once (RFC 5681 §4.2), so it gets
    /// a probe as well (a needless one costs a segment, no window).
    pub(super) fn probe_worthwhile(&self, flight: usize) -> bool {
        flight > self.eff_mss() || (flight > 0 && self.flags.has(Flags::IN_RECOVERY))
    }

    /// RFC 8985 §7.2's probe timeout, 2*SRTT, plus [`PTO_MARGIN`] (saturating); `None`
    /// before any RTT sample.
    pub(super) fn base_pto(&self) -> Option<Duration> {
        let srtt = self.rtt.srtt()?;
        Some(srtt.saturating_mul(2) + PTO_MARGIN)
    }

    /// The loss probe timeout ([`Connection::base_pto`]), backed off per
    /// probe already sent for this SND.UNA; `None` before any RTT sample.
    pub(super) fn pto(&self) -> Option<Duration> {
        Some(
            self.base_pto()?
                .saturating_mul(1 << self.timers_rare.loss_probes.min(8)),
        )
    }

    /// The loss probe timeout fired: nothing advanced SND.UNA for two RTTs
    /// with several segments in flight. This is the tail loss probe of RFC
    /// 8985 §7 adapted to a sender without SACK: RFC 8985 §7.3 probes with
    /// new data or the last segment so that SACK can reveal the losses,
    /// but a cumulative ACK only ever points at SND.UNA, so the probe is
    /// the segment there. Typical case: a full ACK ended fast recovery
    /// (RFC 6582 §3.2 step 3) while the segment at the new SND.UNA was lost
    /// too, and every later segment has already produced its duplicate ACK;
    /// or too few segments were in flight for three duplicate ACKs. Either
    /// way the alternative is an RTO of at least 200 ms on a path whose RTT
    /// may be well under a millisecond. Outside fast recovery this is a
    /// loss signal like a fast retransmit (RFC 5681 §3.2 steps 2-3, with
    /// Eifel undo if it proves spurious); the RTO is re-armed (RFC 8985
    /// §7.3) once `MAX_LOSS_PROBES` probes (each after twice the previous
    /// wait, like RTO backoff) went unanswered for one value of SND.UNA: a
    /// lost probe should not cost a full RTO on a 5 % loss path either.
    pub(super) fn on_probe_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.tlp_armable() {
            self.on_tlp_timeout(ctx);
            return;
        }
        let now = ctx.now;
        self.flags.set(Flags::RETRANSMIT_ONE);
        ctx.stats.loss_probes += 1;
        if !self.flags.has(Flags::IN_RECOVERY) {
            self.enter_recovery(ctx);
        } else if self.flags.has(Flags::SACK_RECOVERY) {
            // Two RTTs without progress in SACK recovery: what was sent
            // before is not coming (IsLost() cannot say so for a tail the
            // receiver never SACKed above, e.g. segments it had no room
            // to hold out of order). Everything un-SACKed counts as lost
            // and is retransmitted, retransmissions included, as after an
            // RTO (RFC 6675 §5.1) but without collapsing the window.
            self.snd_rare.lost_floor = self.snd.max;
            self.snd_rare.high_rxt = self.snd.una;
            self.snd_rare.rtx_mark = self.snd.max;
        } else {
            self.arm_lost_retransmit();
        }
        self.rtt_seq = TimedSegment::NONE;
        self.timers_rare.loss_probes += 1;
        self.arm_rto_or_probe(now);
    }

    /// RFC 5681 §3.2 (its note on duplicate-ACK spoofing, Savage et al.
    /// 1999: "limit the number of inflations to the number of outstanding
    /// segments"): each duplicate ACK stands for a segment that left the
    /// network, and no more can leave than were outstanding when recovery
    /// began, so the window inflated from ssthresh + 3*SMSS (RFC 5681 §3.2
    /// step 3) grows by no more than what is still outstanding of them
    /// (`recover` - SND.UNA: partial ACKs deflate the window by what they
    /// acknowledge, RFC 6582 §3.2 step 5). A peer that forges duplicate
    /// ACKs cannot make the sender send past that.
    fn inflation_allowed(&self) -> bool {
        let mss = self.eff_mss();
        let (recover, una) = (self.snd_rare.recover, self.snd.una);
        let outstanding = if recover > una { recover - una } else { 0 };
        self.cc.window() < self.cc.ssthresh() + 3 * mss + outstanding
    }

    /// RFC 5681 §2 duplicate ACK: counts it and, outside recovery, starts
    /// fast retransmit / recovery on the third (RFC 5681 §3.2, RFC 6582
    /// §3.2 step 2 with the §4.2 ACK heuristic); in NewReno recovery it
    /// inflates the window and detects a lost retransmission.
    #[inline]
    pub(super) fn on_dup_ack(&mut self, ctx: &mut Ctx<'_>, ack: SeqNumber) {
        ctx.stats.dup_acks += 1;
        self.snd.dup_acks = self.snd.dup_acks.saturating_add(1);
        if self.flags.has(Flags::SACK_RECOVERY) {
            // RFC 6675 §5: no window inflation; the pipe estimate
            // already counts what the duplicate ACK SACKed.
        } else if self.flags.has(Flags::IN_RECOVERY) {
            if !self.flags.has(Flags::MTU_PROBE_OUT) && self.inflation_allowed() {
                // (Not while repairing a lost path MTU probe: that
                // recovery leaves the window as it was.)
                self.cc.on_recovery_dup_ack();
            }
            if u16::from(self.snd.dup_acks) >= self.snd_rare.lost_rtx_dups {
                // The retransmission of SND.UNA was lost too: segments
                // sent after it keep arriving. Resend it now rather than
                // after a retransmission timeout (three orders of
                // magnitude longer than the RTT on a LAN). Same loss
                // episode, so no further window reduction. The new
                // repair's duplicate ACKs count from here.
                self.flags.set(Flags::RETRANSMIT_ONE);
                self.snd.dup_acks = 0;
                self.arm_lost_retransmit();
            }
        } else if self.snd.dup_acks == 3 && !self.rack_active() {
            // RFC 6582 §3.2 step 2: only for a new loss episode, or
            // when the ACK heuristic of RFC 6582 §4.2 says the duplicate
            // ACKs signal a new loss rather than the go-back-N
            // retransmissions after a timeout (which would advance the
            // cumulative ACK by more than 4*SMSS at a time): without it,
            // every further loss among the segments sent before a
            // timeout costs another, backed-off, timeout.
            let new_episode = self.new_loss_episode(ack);
            let heuristic =
                self.cc.window() > self.eff_mss() && ack - self.snd.prev_una <= 4 * self.eff_mss();
            if new_episode || heuristic {
                self.enter_recovery(ctx);
                ctx.stats.fast_retransmits += 1;
            }
        }
    }
}
