//! Segment arrival (RFC 9293 §3.10.7): option negotiation on the handshake, the SYN-SENT
//! and synchronized-state processing, ACK processing, RTT samples, in-order and out-of-order
//! data, FIN.

use super::*;

/// The oldest echo an RTT sample is taken from, in milliseconds of our
/// TSval clock (2^30, 12.4 days): an older TSecr is no round trip, and
/// within 2^31 of now (RFC 7323 §5.2) it still compares correctly with the
/// floor of `Connection::take_rtt_sample`.
const RTT_ECHO_MAX_MS: u32 = 1 << 30;

/// The shortest echo an RTT sample is taken from, in milliseconds of our
/// TSval clock: an echo of 0 or 1 ms says only that the round trip is
/// under 2 ms (a LAN, a veth: tens of microseconds), and fed to RFC 6298's
/// estimator it would read such a path as 0 or as up to 40 times its
/// round trip. There the timed segment, measured to the microsecond,
/// gives the samples, as Linux takes a timestamp echo only when no
/// segment's own send time measures the ACK (`tcp_ack_update_rtt`).
///
/// Limitation: on a path of 1 to 2 ms, where an echo reads 1 or 2 ms by
/// where the round trip falls between our clock's ticks, the echoes of 1
/// ms are dropped and those of 2 ms kept, so the echo samples (every ACK
/// but the timed segment's one a round trip) lean toward 2 ms, up to
/// twice a 1 ms round trip; the exact timed samples pull the estimate
/// back only in their share of the ACKs. Below 1 ms (echoes of 0 or 1)
/// and from 2 ms on (where the millisecond is at most half the round
/// trip) there is no such lean.
const RTT_ECHO_MIN_MS: u32 = 2;

/// Why the timestamp checks drop a segment (RFC 7323 §3.2, §5.3 R1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimestampDrop {
    /// Timestamps were negotiated and the segment (not an RST) has none.
    Missing,
    /// PAWS: its TSval is older than TS.Recent, which is still valid.
    Stale,
}

impl Connection {
    /// Applies the options of the peer's SYN (or SYN-ACK): MSS (RFC 9293
    /// §3.7.1), window scale (RFC 7323 §2.2) and timestamps (RFC 7323 §3.2).
    pub(super) fn negotiate_options(&mut self, cfg: &Config, syn: &TcpRepr, now: Instant) {
        let o = &syn.options;
        if cfg.sack && o.sack_permitted {
            self.flags.set(Flags::SACK);
        }
        if let Some(ws) = o.window_scale {
            self.flags.set(Flags::WS_PEER);
            if self.flags.has(Flags::WS_OFFERED) {
                // RFC 7323 §2.3: use 14 for larger values.
                self.snd.wscale = ws.min(MAX_WSCALE);
                self.rcv.wscale = offered_wscale(cfg);
            }
        }
        if !self.flags.has(Flags::WS_PEER) || !self.flags.has(Flags::WS_OFFERED) {
            self.snd.wscale = 0;
            self.rcv.wscale = 0;
        }
        if let (true, Some((tsval, _))) = (cfg.timestamps, o.timestamps) {
            self.flags.set(Flags::TIMESTAMPS);
            self.ts.recent = tsval;
            self.ts.recent_age = now;
        }
        // RFC 9293 §3.7.1: send MSS = min(peer's MSS, our own limit); the
        // payload shrinks by the options we put in every segment.
        let remote = self.tuple.remote_ip();
        let peer_mss = announced_mss(o, remote.is_ipv6()).max(64);
        let mut mss = peer_mss.min(cfg.mss_for(remote));
        if self.flags.has(Flags::TIMESTAMPS) {
            mss -= TS_OPTION_LEN;
        }
        self.set_mss(mss);
        self.mtu_search_init(cfg);
    }

    /// Processes one segment for this connection (RFC 9293 §3.10.7.3 and
    /// §3.10.7.4) that arrived with the IP ECN codepoint `ecn` (read only
    /// by a connection that negotiated ECN, RFC 3168 §6.1).
    #[inline]
    pub(crate) fn on_segment(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        payload: &[u8],
        ecn: crate::ecn::Ecn,
    ) {
        if self.flags.has(Flags::ECN) {
            self.on_segment_ecn(ctx, seg, payload, ecn);
        } else {
            self.on_segment_plain(ctx, seg, payload);
        }
    }

    /// [`Connection::on_segment`] without ECN.
    pub(super) fn on_segment_plain(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, payload: &[u8]) {
        if !payload.is_empty() {
            ctx.stats.data_segments_in += 1;
        }
        if self.on_segment_predicted(ctx, seg, payload) {
            return;
        }
        match self.state {
            State::Closed | State::Listen => {}
            State::SynSent => self.on_segment_syn_sent(ctx, seg, payload),
            _ => self.on_segment_other(ctx, seg, payload),
        }
    }

    /// RFC 9293 §3.10.7.3 SYN-SENT.
    pub(super) fn on_segment_syn_sent(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, payload: &[u8]) {
        let f = seg.flags;
        // First: check the ACK bit.
        if f.ack() && (SeqNumber(seg.ack) <= self.snd_rare.iss || SeqNumber(seg.ack) > self.snd.max)
        {
            if !f.rst() {
                ctx.queue_rst(PendingRst {
                    tuple: self.tuple,
                    seq: SeqNumber(seg.ack),
                    ack: None,
                    why: ResetReason::HandshakeAck,
                });
                // The answer of a peer that holds an old connection on
                // this 4-tuple (its SYN-ACK or RFC 5961 §4 challenge ACK):
                // the RST (sent first: `Stack::poll_transmit` empties the
                // resets before any connection's output) ends it there,
                // so the SYN goes again at once rather than an RTO later,
                // once per open and before any timeout, as Linux's
                // `tcp_rcv_synsent_state_process` ("Previous FIN/ACK or
                // RST/ACK might be ignored"), so that forged SYN-ACKs draw
                // no more than one SYN.
                if self.timers_rare.retransmits == 0 && !self.flags.has(Flags::SYN_RESENT) {
                    self.flags.set(Flags::SYN_RESENT);
                    self.resend_syn();
                }
            }
            return;
        }
        // Second: the RST bit.
        if f.rst() {
            if f.ack() {
                ctx.stats.resets_in += 1;
                self.close_now(CloseReason::Reset);
            } else {
                ctx.stats.bad_flags += 1;
            }
            return;
        }
        // Fourth: the SYN bit. (Text on a SYN-ACK is taken once the
        // connection is established, below; on a bare SYN, a simultaneous
        // open's, it is not queued, as Linux does not: it is not
        // acknowledged, so the peer sends it again.)
        if !f.syn() {
            ctx.stats.bad_flags += 1;
            return;
        }
        self.rcv_rare.irs = SeqNumber(seg.seq);
        self.rcv.nxt = SeqNumber(seg.seq) + 1;
        self.rcv.adv = self.rcv.nxt;
        self.tune.rcv_space_seq = self.rcv.nxt;
        self.tune.rcv_space_time = ctx.now;
        self.negotiate_options(ctx.cfg, seg, ctx.now);
        self.snd.wnd = u32::from(seg.window);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = SeqNumber(seg.seq);
        self.snd.wl2 = SeqNumber(seg.ack);
        self.timers.last_recv = ctx.now;
        if f.ack() {
            self.snd.una = SeqNumber(seg.ack);
            // As in SYN-RECEIVED: a timeout may have rewound SND.NXT.
            self.snd.nxt = self.snd.nxt.max(self.snd.una);
            self.ecn_negotiate_active(ctx.cfg, seg);
            self.handshake_acked(ctx, seg);
            // A shutdown while the SYN was out queued the FIN behind the
            // data (`Connection::shutdown_write`).
            self.state = if self.flags.has(Flags::FIN_QUEUED) {
                State::FinWait1
            } else {
                State::Established
            };
            self.events |= ev::ESTABLISHED;
            self.flags.set(Flags::ACK_NOW);
            self.arm_keepalive(ctx);
            if !payload.is_empty() || f.fin() {
                self.syn_ack_text(ctx, seg, payload);
            }
        } else {
            // Simultaneous open: SYN-RECEIVED, send SYN-ACK.
            self.state = State::SynReceived;
            self.snd.nxt = self.snd_rare.iss;
            self.flags.set(Flags::ACK_NOW);
        }
    }

    /// RFC 9293 §3.10.7.3 SYN-SENT, a SYN-ACK that established the
    /// connection and carries text (`payload`) or a FIN: "If there are
    /// other controls or text in the segment, then continue processing at
    /// the sixth step under Section 3.10.7.4". The text (a TCP Fast Open
    /// server's answer, RFC 7413 §4.2.2, or any peer's) is taken within
    /// the window our SYN offered, the rest trimmed (a FIN beyond it with
    /// it), and the ACK that completes the handshake acknowledges it;
    /// dropped, the peer would send it again an RTO later. (Linux takes it
    /// only when its SYN asked for Fast Open, `tcp_rcv_fastopen_synack`,
    /// and drops it otherwise, `tcp_rcv_state_process`: the RFC's text is
    /// followed here.) Once per connection at most: out of line.
    #[cold]
    #[inline(never)]
    fn syn_ack_text(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, payload: &[u8]) {
        // RCV.WND: the SYN's window (never scaled, RFC 7323 §2.2), as its
        // emission computes it; a window is never taken back, so the ACK
        // offers no less.
        self.rcv.adv = self.rcv.nxt + self.offerable(ctx.mem).min(0xffff);
        let f = TcpFlags(seg.flags.0 & !TcpFlags::SYN.0);
        let Some((seq, data, f)) = self.check_sequence(ctx, self.rcv.nxt, payload, f) else {
            return;
        };
        self.text_and_fin(ctx, seg, seq, data, f);
    }

    /// RFC 9293 §3.10.7.4: every state from SYN-RECEIVED on. Out of line,
    /// so that the header-predicted path of [`Connection::on_segment_plain`]
    /// is compiled on its own: inlined, a change here moved that path's
    /// register allocation (11 instructions more per predicted segment in
    /// callgrind's `rx_cost` for the FIN-WAIT shortcut below).
    #[inline(never)]
    pub(super) fn on_segment_other(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, payload: &[u8]) {
        let now = ctx.now;
        let mut f = seg.flags;
        let mut seq = SeqNumber(seg.seq);

        // In SYN-RECEIVED, a retransmission of the peer's SYN (or SYN-ACK,
        // simultaneous open): drop the SYN bit and treat the rest normally;
        // it needs our SYN-ACK again. Any other SYN is RFC 5961 §4.2's.
        if f.syn() && seq == self.rcv_rare.irs && self.state == State::SynReceived {
            if !f.ack() {
                self.syn_again(ctx);
                return;
            }
            f = TcpFlags(f.0 & !TcpFlags::SYN.0);
            seq += 1;
            self.flags.set(Flags::ACK_NOW);
        }
        let seg_seq = seq;
        if !self.timestamps_acceptable(ctx, seg, f, payload.len()) {
            return;
        }
        // First: sequence number acceptability.
        let Some((seq, data, f)) = self.check_sequence(ctx, seq, payload, f) else {
            return;
        };

        // Second: the RST bit.
        if f.rst() {
            self.on_rst(ctx, seg_seq);
            return;
        }

        // Fourth: a SYN in a synchronized state, whatever its sequence
        // number (RFC 5961 §4.2; RFC 9293 §3.10.7.4 adopts it): a
        // challenge ACK, and the segment is dropped. A peer that lost the
        // connection answers with an RST at the ACK's sequence number,
        // which ends this one (§3.2), and then connects again.
        if f.syn() {
            ctx.stats.syn_challenged += 1;
            self.challenge_ack(ctx);
            return;
        }

        // Liveness for keepalive, which reads it when its timer fires
        // (nothing is re-armed per segment).
        self.timers.last_recv = now;
        self.keepalive_probes = 0;

        // Fifth: the ACK field.
        if !f.ack() {
            ctx.stats.bad_flags += 1;
            return;
        }
        if self.state == State::SynReceived {
            if !self.complete_passive_open(ctx, seg, seq) {
                return;
            }
        } else if !self.ack_acceptable(ctx, SeqNumber(seg.ack)) {
            return;
        }
        // RFC 7323 §4.3: TS.Recent, from a segment known to be acceptable
        // whole: past the window, RST, SYN and ACK checks. Taken at the
        // window check alone (RFC 7323 §5.3's order, which predates RFC
        // 5961), a blind segment that is then dropped (no ACK bit, an ACK
        // out of range, a SYN) would set it from a forged TSval far ahead,
        // and PAWS would drop every genuine segment after it: the
        // connection would be dead to an attacker who guessed the
        // sequence number only to within a payload (Linux moved the
        // update into `tcp_ack` for this, "tcp: tcp_replace_ts_recent()
        // should not be called from tcp_validate_incoming()", 2013).
        self.update_ts_recent(now, seg, seq);
        if matches!(
            self.state,
            State::LastAck | State::FinWait1 | State::FinWait2
        ) && self.acks_everything_with_our_fin(seg)
        {
            // The ACK of everything we sent, our FIN last (SND.MAX, so it
            // passes RFC 5961 §5.2's test), where nothing but ACKs will
            // ever be sent again: nothing else such a segment carries (an
            // RTT sample, congestion control's growth, loss detection, the
            // send window) has a use, and the connection's last segments
            // skip them all.
            if self.state == State::LastAck {
                // LAST-ACK: "The only thing that can arrive in this state
                // is an acknowledgment of our FIN. If our FIN is now
                // acknowledged, delete the TCB, enter the CLOSED state,
                // and return." (Bytes not read yet keep it: `exchange_over`.)
                self.exchange_over(ctx);
                return;
            }
            if f.fin()
                && data.is_empty()
                && seq == self.rcv.nxt
                && self.flags.has(Flags::APP_CLOSED)
            {
                self.peer_fin_after_our_close(ctx, SeqNumber(seg.ack));
                return;
            }
        }
        // The length as received: a zero-window probe trimmed to nothing
        // still carried data, and is no duplicate ACK (RFC 5681 §2 (b)).
        if !self.process_ack(ctx, seg, seq, payload.len(), f) {
            return;
        }

        self.text_and_fin(ctx, seg, seq, data, f);
    }

    /// RFC 9293 §3.10.7.4 sixth to eighth steps: the URG bit, the segment
    /// text `data` (at `seq`, trimmed to the window) and the FIN bit of
    /// `seg` (flags `f`, its SYN bit dropped), for a segment whose ACK was
    /// processed.
    #[inline(always)]
    fn text_and_fin(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        seq: SeqNumber,
        data: &[u8],
        f: TcpFlags,
    ) {
        // Sixth: URG is ignored (RFC 6093: urgent data is delivered inline).

        // Seventh: segment text.
        if !data.is_empty() && !self.accept_text(ctx, seg, seq, data) {
            return;
        }

        // Eighth: the FIN bit.
        if f.fin() && self.state != State::SynReceived {
            let fin_at = seq + data.len();
            if fin_at == self.rcv.nxt {
                self.on_fin(ctx);
            } else if fin_at > self.rcv.nxt && !self.flags.has(Flags::PEER_FIN) {
                // Out of order: taken when the hole fills. The latest FIN
                // wins over one recorded before (data alone may also end
                // a record, in `fin_ahead`). None is ahead of the FIN
                // taken in sequence (its window is closed, and `fin_mark`
                // holds the edge then).
                self.set_peer_fin_ahead(Some(fin_at));
                self.flags.set(Flags::ACK_NOW);
            }
        }
    }

    /// RFC 7323 §3.2 and §5.3 R1 (PAWS): whether a segment passes the
    /// timestamp checks. Once timestamps are negotiated, non-RST segments
    /// without them are dropped, and so are stale ones (with an ACK).
    #[inline]
    fn timestamps_acceptable(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        f: TcpFlags,
        data_len: usize,
    ) -> bool {
        match self.timestamp_drop(ctx.now, seg, f) {
            None => true,
            // RFC 7323 §3.2 drops a segment without the option silently,
            // but a SYN still gets RFC 5961 §4's challenge ACK ("MUST ...
            // irrespective of the sequence number"): a peer that lost the
            // connection and opens it again without timestamps (another
            // host behind the same NAT port, one with them switched off)
            // answers it with the RST that ends this one. Dropped silently,
            // its SYNs went unanswered for as long as the stale connection
            // lived, where Linux challenges them.
            Some(TimestampDrop::Missing) if f.syn() => {
                ctx.stats.unacceptable += 1;
                ctx.stats.syn_challenged += 1;
                self.challenge_ack(ctx);
                false
            }
            Some(TimestampDrop::Missing) => {
                ctx.stats.unacceptable += 1;
                false
            }
            Some(TimestampDrop::Stale) => {
                ctx.stats.paws_rejected += 1;
                if f.syn() {
                    ctx.stats.syn_challenged += 1;
                    self.challenge_ack(ctx);
                } else {
                    self.ack_invalid(ctx, data_len > 0 || f.fin());
                }
                false
            }
        }
    }

    /// Why [`Connection::timestamps_acceptable`] drops `seg` (with flags
    /// `f`), if it does; no effect.
    #[inline]
    pub(super) fn timestamp_drop(
        &self,
        now: Instant,
        seg: &TcpRepr,
        f: TcpFlags,
    ) -> Option<TimestampDrop> {
        if !self.flags.has(Flags::TIMESTAMPS) || f.rst() {
            return None;
        }
        let Some((tsval, _)) = seg.options.timestamps else {
            return Some(TimestampDrop::Missing);
        };
        let stale = (tsval.wrapping_sub(self.ts.recent) as i32) < 0;
        (stale && self.ts_recent_valid(now)).then_some(TimestampDrop::Stale)
    }

    /// RFC 7323 §5.5: whether TS.Recent is still trusted at `now` (last
    /// updated less than 24 days ago, [`PAWS_IDLE`]). PAWS applies only
    /// then; past it, the peer's TSval may have wrapped half its space and
    /// look older than TS.Recent without being so.
    #[inline]
    fn ts_recent_valid(&self, now: Instant) -> bool {
        now.saturating_since(self.ts.recent_age) < PAWS_IDLE
    }

    /// RFC 9293 §3.10.7.4 first check: sequence number acceptability. Drops
    /// (with the ACK, D-SACK and TIME-WAIT restart the RFCs ask for) what is
    /// outside the window, and trims what remains to it. Returns the
    /// sequence number, text and flags left to process, `None` to drop.
    /// Always inlined: with a second caller (the cold `syn_ack_text`) LLVM
    /// kept it out of line, +11 instructions on every segment that takes
    /// [`Connection::on_segment_other`] (callgrind's `tx_cost`, `cold`).
    #[inline(always)]
    fn check_sequence<'p>(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut seq: SeqNumber,
        payload: &'p [u8],
        mut f: TcpFlags,
    ) -> Option<(SeqNumber, &'p [u8], TcpFlags)> {
        let mut data = payload;
        let seg_len = data.len() + usize::from(f.syn()) + usize::from(f.fin());
        let wnd = self.rcv_wnd();
        let nxt = self.rcv.nxt;
        let acceptable = seq.acceptable(seg_len, nxt, wnd);
        // RFC 9293 §3.10.7.4: with a zero window, still process the ACK and
        // RST of a segment at RCV.NXT (a window probe).
        let zero_window_probe = !acceptable && wnd == 0 && seq == nxt;
        if !acceptable && !zero_window_probe {
            ctx.stats.unacceptable += 1;
            if f.rst() {
                if self.rst_at_peer_fin(seq) {
                    // `on_rst` takes it (Linux `tcp_reset_check`).
                    return Some((seq, &[], f));
                }
                // RFC 5961 §3.2: an RST outside the window is dropped
                // silently.
                ctx.stats.rst_out_of_window += 1;
                return None;
            }
            if f.syn() {
                // RFC 5961 §4.2: challenged whatever its sequence number.
                ctx.stats.syn_challenged += 1;
                self.challenge_ack(ctx);
                return None;
            }
            if !payload.is_empty() {
                // A duplicate (e.g. duplicated in the network): RFC 5681
                // §4.2 immediate duplicate ACK, with a D-SACK block for
                // what arrived twice (RFC 2883 §4) so that the sender can
                // tell a needless retransmission from a loss.
                self.owe_immediate_ack(ctx);
                if self.flags.has(Flags::SACK) && seq < nxt {
                    let end = (seq + payload.len()).min(nxt);
                    self.set_dsack(seq, end);
                }
            }
            // RFC 9293 §3.10.7.4: <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>; data
            // and FINs (retransmitted after a lost ACK) always get it,
            // anything else once per interval.
            self.ack_invalid(ctx, !payload.is_empty() || f.fin());
            // RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN restarts
            // the 2 MSL timeout.
            if self.state == State::TimeWait && f.fin() {
                self.timers_rare.close = self.timers.arm(ctx.now + ctx.cfg.msl.saturating_mul(2));
            }
            return None;
        }
        if zero_window_probe {
            data = &[];
            f = TcpFlags(f.0 & !TcpFlags::FIN.0);
            self.flags.set(Flags::ACK_NOW);
        }
        // Trim the front (already received) and the tail (beyond window).
        if seq < nxt {
            let dup = nxt - seq;
            if dup > data.len() {
                // Only a FIN remains, and it is in sequence at RCV.NXT.
                data = &[];
            } else {
                data = &data[dup..];
            }
            seq = nxt;
            self.flags.set(Flags::ACK_NOW);
        }
        // What lies past the window's right edge goes, FIN included: the
        // edge is RCV.NXT + RCV.WND, wherever in the window the segment
        // begins (an out-of-order one too). (A bare ACK or FIN passed the
        // acceptability test: it lies within the window.)
        if !data.is_empty() {
            let room = wnd.saturating_sub(seq - nxt);
            if data.len() > room {
                data = &data[..room];
                f = TcpFlags(f.0 & !TcpFlags::FIN.0);
                if seq == nxt {
                    // Out-of-order data owes its ACK when it is placed
                    // (`receive_data`): one, not two.
                    self.flags.set(Flags::ACK_NOW);
                }
            }
        }
        Some((seq, data, f))
    }

    /// An RST at the sequence number of the peer's FIN, once the FIN is in
    /// (CLOSE-WAIT, LAST-ACK, CLOSING): RCV.NXT - 1, which the window check
    /// (zero-length segments need RCV.NXT <= SEG.SEQ) would drop, sent by
    /// a peer that resets from its FIN's sequence number. Taken as exact,
    /// as Linux's `tcp_reset_check` does, so that such a peer ends the
    /// connection instead of leaving it to its timers.
    #[inline]
    fn rst_at_peer_fin(&self, seq: SeqNumber) -> bool {
        matches!(
            self.state,
            State::CloseWait | State::LastAck | State::Closing
        ) && seq + 1 == self.rcv.nxt
    }

    /// RFC 9293 §3.10.7.4 second check, with RFC 5961 §3.2 and RFC 1337:
    /// an RST that passed the window test resets the connection only if
    /// its sequence number is exactly RCV.NXT (or RCV.NXT − 1 once the
    /// peer's FIN is in, for stacks that reset from their FIN's sequence
    /// number, as Linux `tcp_reset_check` allows); any other in-window RST
    /// gets a challenge ACK, which a genuine peer answers with an exact
    /// RST. In TIME-WAIT, RSTs are ignored: the 2 MSL wait protects the
    /// next incarnation from old duplicates (RFC 1337 §3, fix F1).
    fn on_rst(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber) {
        if self.state == State::TimeWait {
            ctx.stats.rst_in_time_wait += 1;
            return;
        }
        if seq == self.rcv.nxt || self.rst_at_peer_fin(seq) {
            ctx.stats.resets_in += 1;
            // RFC 9293 §3.10.7.4: SYN-RECEIVED from a passive open returns
            // to LISTEN (the listener is still there; this half-open
            // connection is dropped).
            self.close_now(CloseReason::Reset);
        } else {
            ctx.stats.rst_challenged += 1;
            self.challenge_ack(ctx);
        }
    }

    /// A challenge ACK (RFC 5961 §3.2, §4.2, §5.2:
    /// <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>), if the connection's interval
    /// ([`Config::invalid_ack_interval`]) and the stack's budget for the
    /// second (RFC 5961 §7) allow one.
    fn challenge_ack(&mut self, ctx: &mut Ctx<'_>) {
        let interval = ctx.cfg.invalid_ack_interval;
        if !self.timers_rare.invalid_ack.take(ctx.now, interval) {
            ctx.stats.invalid_acks_limited += 1;
        } else if !ctx.replies.challenges.take(ctx.now) {
            ctx.stats.challenge_acks_limited += 1;
        } else {
            ctx.stats.challenge_acks += 1;
            self.flags.set(Flags::ACK_NOW);
        }
    }

    /// The peer's SYN again, in SYN-RECEIVED (RFC 9293 §3.10.7.4: it is
    /// our SYN-ACK the peer misses): the SYN-ACK goes again, at most once
    /// per [`Config::invalid_ack_interval`] (Linux `tcp_check_req`, through
    /// `tcp_oow_rate_limited`: `TCPACKSkippedSynRecv`), so that copies of
    /// one SYN, a spoofed source's included, draw one SYN-ACK, not one
    /// each (a reflection). The first copy answers at once (the stamp is
    /// not taken by the first SYN-ACK); a client's own retransmission
    /// comes a second after its SYN (RFC 6298 §2.1), past the interval.
    /// Nothing else in the segment is used: the SYN's data is not queued
    /// (as on the first SYN), and without an ACK bit it would be dropped
    /// at the ACK check, which is no fault of its flags.
    #[cold]
    fn syn_again(&mut self, ctx: &mut Ctx<'_>) {
        if self
            .timers_rare
            .invalid_ack
            .take(ctx.now, ctx.cfg.invalid_ack_interval)
        {
            self.flags.set(Flags::ACK_NOW);
        } else {
            ctx.stats.syn_acks_limited += 1;
        }
    }

    /// Acknowledges a segment refused by the window or PAWS checks:
    /// always if it carries data or a FIN (`always`), otherwise at most
    /// once per [`Config::invalid_ack_interval`] (Linux
    /// `tcp_oow_rate_limited`), counted when skipped.
    fn ack_invalid(&mut self, ctx: &mut Ctx<'_>, always: bool) {
        if always
            || self
                .timers_rare
                .invalid_ack
                .take(ctx.now, ctx.cfg.invalid_ack_interval)
        {
            self.flags.set(Flags::ACK_NOW);
        } else {
            ctx.stats.invalid_acks_limited += 1;
        }
    }

    /// RFC 7323 §4.3: updates TS.Recent from an acceptable segment: one
    /// whose TSval is not older than TS.Recent, or any once TS.Recent has
    /// lapsed ([`Connection::ts_recent_lapsed`]). Always inlined: every
    /// segment goes through it, the predicted one included, whose own test
    /// of the TSval then decides this one's (out of line: +10 instructions
    /// a predicted segment in `sim_bulk`).
    #[inline(always)]
    pub(super) fn update_ts_recent(&mut self, now: Instant, seg: &TcpRepr, seq: SeqNumber) {
        if let (true, Some((tsval, _))) =
            (self.flags.has(Flags::TIMESTAMPS), seg.options.timestamps)
        {
            let newer = (tsval.wrapping_sub(self.ts.recent) as i32) >= 0;
            if (newer || self.ts_recent_lapsed(now)) && seq <= self.ts.last_ack_sent {
                self.ts.recent = tsval;
                self.ts.recent_age = now;
            }
        }
    }

    /// RFC 7323 §5.5: an acceptable segment whose TSval looks older than
    /// TS.Recent got past PAWS only because TS.Recent is more than 24 days
    /// old; it then replaces TS.Recent (and its age), as Linux's
    /// `tcp_paws_check` lets it with `TCP_PAWS_24DAYS`. Kept instead, a
    /// TS.Recent left behind by an idle longer than 2^31 ms (24.9 days)
    /// would make every TSval of the peer look older for up to 24.9 days
    /// more: PAWS off, and every echo stale. Out of line and cold: the
    /// ordinary segment's TSval is not older, and never calls it.
    #[cold]
    #[inline(never)]
    fn ts_recent_lapsed(&self, now: Instant) -> bool {
        !self.ts_recent_valid(now)
    }

    /// RFC 9293 §3.10.7.4 fifth check in SYN-RECEIVED: an ACK of our SYN
    /// completes the handshake; any other ACK is answered with a reset.
    /// Returns whether to go on processing the segment. Once per
    /// connection: out of line, so that `on_segment_other`'s every-segment
    /// path keeps `process_ack` inlined.
    #[inline(never)]
    fn complete_passive_open(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, seq: SeqNumber) -> bool {
        if SeqNumber(seg.ack) > self.snd.una && SeqNumber(seg.ack) <= self.snd.max {
            self.state = if self.flags.has(Flags::FIN_QUEUED) {
                State::FinWait1
            } else {
                State::Established
            };
            self.events |= ev::ESTABLISHED;
            self.arm_keepalive(ctx);
            // A half-open connection's buffer was bounded (by the receive
            // memory over the backlog, one segment on a crowded listener:
            // see `Connection::new_passive`); now it is the configured one.
            if !self.flags.has(Flags::RCVBUF_LOCK) {
                self.recv_buf.grow(ctx.cfg.recv_buffer);
            }
            // The ACK's window is scaled, unless the segment is the peer's
            // SYN-ACK of a simultaneous open (its SYN bit dropped above):
            // RFC 7323 §2.2, a SYN's window never is.
            let wscale = if seg.flags.syn() { 0 } else { self.snd.wscale };
            self.snd.wnd = u32::from(seg.window) << wscale;
            self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
            self.snd.wl1 = seq;
            self.snd.wl2 = SeqNumber(seg.ack);
            self.snd.una = self.snd_rare.iss + 1;
            // A retransmission timeout may have rewound SND.NXT to the ISS
            // for a SYN-ACK not yet sent again: the handshake is done, so
            // nothing below SND.UNA is to be sent.
            self.snd.nxt = self.snd.nxt.max(self.snd.una);
            self.handshake_acked(ctx, seg);
            true
        } else {
            // RFC 9293 §3.10.7.4: <SEQ=SEG.ACK><CTL=RST>.
            ctx.queue_rst(PendingRst {
                tuple: self.tuple,
                seq: SeqNumber(seg.ack),
                ack: None,
                why: ResetReason::HandshakeAck,
            });
            false
        }
    }

    /// Our SYN (or SYN-ACK) was acknowledged by `seg`: the timer stops,
    /// the handshake gives its RTT sample, and the congestion window
    /// starts at the initial window (RFC 6928 §2 or RFC 5681 §3.1,
    /// [`Config::initial_window`]). If our timer had to send it again, the
    /// RTO for data starts from RFC 6298 §5.7's 3 s and the window from
    /// one SMSS (RFC 5681 §3.1, RFC 6928 §2: "if the SYN or SYN/ACK is
    /// lost"; Linux cuts only after two). A SYN-ACK repeated because the
    /// client's SYN came again, before our timer, counts for neither.
    fn handshake_acked(&mut self, ctx: &Ctx<'_>, seg: &TcpRepr) {
        let retransmitted = self.timers_rare.retransmits > 0;
        self.timers_rare.rto = Deadline::NONE;
        self.timers_rare.retransmits = 0;
        self.take_rtt_sample(ctx.now, seg);
        if retransmitted {
            self.rtt.on_handshake_retransmitted();
            self.cc.set_initial_window(self.eff_mss());
        } else {
            self.cc.set_initial_window(self.initial_window(ctx.cfg));
        }
    }

    /// The initial window of this connection ([`Config::initial_window`]
    /// for its sender MSS); also its restart window's bound (RFC 5681
    /// §4.1).
    pub(super) fn initial_window(&self, cfg: &Config) -> usize {
        cfg.initial_window.bytes(self.eff_mss())
    }

    /// RFC 9293 §3.10.7.4 seventh step: segment text. Returns whether to go
    /// on processing the segment (false once it reset the connection).
    #[inline]
    fn accept_text(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        seq: SeqNumber,
        data: &[u8],
    ) -> bool {
        if !self.state.can_receive() {
            // CLOSE-WAIT, CLOSING, LAST-ACK, TIME-WAIT: the peer sent FIN
            // already; ignore the text.
        } else if self.flags.has(Flags::APP_CLOSED) {
            // Nobody will read this: reset (RFC 2525 §2.17).
            self.send_rst(ctx, ResetReason::DataAfterClose);
            self.close_now(CloseReason::Reset);
            return false;
        } else {
            if seq != SeqNumber(seg.seq) {
                self.dsack_front(seg, seq);
            }
            let tsecr = seg.options.timestamps.map(|(_, ecr)| ecr);
            self.receive_data(ctx, seq, data, tsecr);
        }
        true
    }

    /// RFC 2883 §4: a segment whose front was trimmed as already received
    /// (from SEG.SEQ up to `seq`, RCV.NXT then), its text accepted: that
    /// part is reported as a D-SACK block, as a wholly duplicate segment's
    /// is. Here, after the segment passed every check (a segment dropped
    /// for its ACK, or a SYN challenged, reports nothing).
    #[cold]
    #[inline(never)]
    fn dsack_front(&mut self, seg: &TcpRepr, seq: SeqNumber) {
        if self.flags.has(Flags::SACK) && !seg.flags.syn() {
            self.set_dsack(SeqNumber(seg.seq), seq);
        }
    }

    /// RFC 5961 §5.2: an ACK is acceptable in a synchronized state if
    /// (SND.UNA - MAX.SND.WND) <= SEG.ACK <= SND.NXT (here SND.MAX, the
    /// highest sent); anything else, one acknowledging data not yet sent
    /// (RFC 9293 §3.10.7.4) or a blind injection guessing at an old one,
    /// is dropped with a challenge ACK. Returns whether it is acceptable.
    #[inline]
    fn ack_acceptable(&mut self, ctx: &mut Ctx<'_>, ack: SeqNumber) -> bool {
        if !self.ack_in_range(ack) {
            ctx.stats.ack_unacceptable += 1;
            self.challenge_ack(ctx);
            return false;
        }
        true
    }

    /// RFC 5961 §5.2: whether `ack` lies in the range an ACK may
    /// acknowledge: no more than was sent, no less than SND.UNA minus the
    /// largest window the peer offered.
    #[inline]
    pub(super) fn ack_in_range(&self, ack: SeqNumber) -> bool {
        ack <= self.snd.max && ack >= self.snd.una - self.snd.max_wnd as usize
    }

    /// RFC 9293 §3.10.7.4 fifth step for synchronized states, for an ACK
    /// already found acceptable ([`Self::ack_acceptable`], or the
    /// handshake's in SYN-RECEIVED). Returns false once the connection
    /// closed (our FIN acknowledged where that ends it, or leaves it held
    /// only for bytes not read yet): the segment's text and FIN are then
    /// not looked at.
    #[inline(always)]
    pub(super) fn process_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        seq: SeqNumber,
        data_len: usize,
        f: TcpFlags,
    ) -> bool {
        let ack = SeqNumber(seg.ack);
        // Without blocks, only a scoreboard that holds ranges has anything
        // to prune.
        let sack_news = self.flags.has(Flags::SACK)
            && (seg.options.sack_block_count > 0 || self.flags.has(Flags::SACKED))
            && self.update_scoreboard(ctx, seg);
        // RFC 7323 §2.2: a SYN's window is never scaled (the peer's
        // SYN-ACK of a simultaneous open arrives here, its SYN bit only
        // dropped from `f`).
        let wscale = if seg.flags.syn() { 0 } else { self.snd.wscale };
        let new_wnd = u32::from(seg.window) << wscale;
        let window_update = self.snd.wl1 < seq || (self.snd.wl1 == seq && self.snd.wl2 <= ack);
        let advanced = ack > self.snd.una;
        if advanced {
            self.on_new_ack(ctx, seg, ack);
        } else if ack == self.snd.una {
            if self.snd.una != self.snd.max {
                // The peer heard us: an ACK at SND.UNA (a duplicate, a
                // window update, its own data) forgets the soft error a
                // destination unreachable left (`unreachable.rs`), as
                // Linux's `tcp_ack` clears `sk_err_soft` on every ACK
                // neither older than SND.UNA nor beyond SND.NXT: a timeout
                // now would not be the unreachable peer's (RFC 1122
                // §4.2.3.9 and RFC 5461 §4.1 keep the error only to tell
                // it then). Only with data in flight: one is kept only
                // then, and an ACK past SND.UNA forgets it
                // (`on_new_ack`), so with none in flight there is none.
                self.timers_rare.soft_error = None;
            }
            if self.snd.una != self.snd.max
                && data_len == 0
                && !f.fin()
                && new_wnd == self.snd.wnd
                && self.snd.wnd != 0
                && self.state.is_synchronized()
            {
                // RFC 5681 §2: a duplicate acknowledgment.
                self.on_dup_ack(ctx, ack);
            } else if self.snd.wnd == 0 && !self.flags.has(Flags::APP_CLOSED) {
                // The peer answers our probes: it is alive (RFC 1122
                // §4.2.2.17). Not for an orphan, whose probes are numbered
                // (`Config::orphan_retries`).
                self.timers_rare.retransmits = 0;
            }
        }
        if self.rack_active() {
            self.rack_on_ack(ctx, seg, advanced);
        }
        if sack_news || (self.flags.has(Flags::SACK) && ack > self.snd.prev_una) {
            self.sack_loss_detection(ctx);
        }
        if window_update && ack >= self.snd.una {
            self.update_send_window(seq, ack, new_wnd);
        }
        self.on_fin_acked(ctx)
    }

    /// FIN-WAIT-1 or FIN-WAIT-2, closed by the application: the peer's FIN,
    /// in order and with the ACK of everything we sent, our FIN last (the
    /// peer answered a server's close). RFC 9293 §3.10.7.4, FIN-WAIT-1:
    /// "if the FIN segment is now acknowledged, then enter FIN-WAIT-2";
    /// the eighth step, FIN-WAIT-2: "Enter the TIME-WAIT state" (which
    /// turns the timers off; the stack then replaces the connection by its
    /// compact record and frees its buffers and flight). Out of line: kept
    /// out of the data path's code.
    #[inline(never)]
    fn peer_fin_after_our_close(&mut self, ctx: &mut Ctx<'_>, ack: SeqNumber) {
        self.snd.una = ack;
        self.snd.nxt = self.snd.nxt.max(ack);
        self.flags.set(Flags::FIN_ACKED);
        self.state = State::FinWait2;
        self.on_fin(ctx);
    }

    /// Whether `seg` acknowledges all we sent, our FIN last.
    #[inline]
    fn acks_everything_with_our_fin(&self, seg: &TcpRepr) -> bool {
        let ack = SeqNumber(seg.ack);
        ack == self.snd.max && self.fin_seq().is_some_and(|fin| ack > fin)
    }

    /// An ACK that advances SND.UNA: frees acknowledged data, takes an RTT
    /// sample, undoes a spurious recovery or moves congestion control on
    /// (RFC 5681 §3.1, RFC 6582 §3.2 step 3, RFC 6675 §5), restarts the
    /// retransmission timer (RFC 6298 §5.2 / §5.3) and grows the send
    /// buffer for a waiting writer.
    #[inline]
    fn on_new_ack(&mut self, ctx: &mut Ctx<'_>, seg: &TcpRepr, ack: SeqNumber) {
        let now = ctx.now;
        let acked = ack - self.snd.una;
        let fin_acked_now = self
            .fin_seq()
            .is_some_and(|fs| ack > fs && self.snd.una <= fs);
        let data_acked = acked - usize::from(fin_acked_now);
        let flight_before = self.snd.max - self.snd.una;
        let freed = self.send_buf.dequeue_allocated(ctx.pool, data_acked);
        ctx.pool.dropped_from_send(freed);
        if self.send_buf.is_empty() {
            self.flags.clear(Flags::SEND_QUEUED);
        }
        if fin_acked_now {
            self.flags.set(Flags::FIN_ACKED);
        }
        self.snd.prev_una = self.snd.una;
        self.snd.una = ack;
        if self
            .flags
            .has(Flags::RECOVER_HELD | Flags::MTU_PROBE_OUT | Flags::RXT_ABOVE)
        {
            // The RFC 6582 guard's end, a path MTU probe's ACK, an ended
            // recovery's retransmissions acknowledged.
            self.on_ack_held(ctx, ack);
        }
        if self.snd.nxt < ack {
            self.snd.nxt = ack;
        }
        let rtt = self.take_rtt_sample(now, seg);
        self.timers_rare.retransmits = 0;
        self.timers_rare.soft_error = None;
        let undone = self.flags.has(Flags::UNDO) && self.try_undo(ctx, seg, data_acked);
        if undone {
            // The window was set by the RFC 4015 response.
        } else if self.flags.has(Flags::IN_RECOVERY) {
            if ack >= self.snd_rare.recover {
                // RFC 6582 §3.2 step 3, full acknowledgment (RFC 6675
                // §5 step (C): recovery ends when HighACK reaches
                // RecoveryPoint).
                self.note_retransmissions_above();
                self.flags.clear(Flags::IN_RECOVERY | Flags::SACK_RECOVERY);
                if self.flags.has(Flags::MTU_PROBE_OUT) {
                    // A lost path MTU probe was repaired: the window
                    // was never reduced (RFC 4821 §7.6.2).
                    self.flags.clear(Flags::MTU_PROBE_OUT);
                } else {
                    self.cc.on_recovery_exit(self.snd.max - ack);
                }
            } else if self.flags.has(Flags::SACK_RECOVERY) {
                // RFC 6675 §5: cwnd is not deflated on a partial ACK;
                // NextSeg() picks what to retransmit.
            } else {
                // RFC 6582 §3.2 step 3, partial acknowledgment:
                // retransmit the next unacknowledged segment.
                if !self.flags.has(Flags::MTU_PROBE_OUT) {
                    self.cc.on_partial_ack(data_acked);
                }
                self.flags.set(Flags::RETRANSMIT_ONE);
                // Its duplicate ACKs count from here (those of the
                // episode's earlier repairs are not its).
                self.snd.dup_acks = 0;
                self.arm_lost_retransmit();
            }
        } else if !self.ecn_holds_cwnd(seg) {
            self.cc.on_ack(&Ack {
                now,
                bytes_acked: data_acked.min(flight_before),
                flight: flight_before,
                ack,
                snd_max: self.snd.max,
                rtt,
                srtt: self.rtt.srtt(),
                min_rtt: self.rack_min_rtt(),
            });
        }
        self.snd.dup_acks = 0;
        // RFC 6298 §5.2 / §5.3 (RFC 6582 §3.2 step 3: a partial ACK
        // restarts the timer too), with a loss probe first.
        self.timers_rare.loss_probes = 0;
        self.arm_rto_or_probe(now);
        if self.flags.has(Flags::WRITABLE_WANTED) {
            self.sndbuf_expand(ctx.cfg);
        }
        if self.flags.has(Flags::WRITABLE_WANTED) && self.room_to_wake_writer() {
            self.flags.clear(Flags::WRITABLE_WANTED);
            self.events |= ev::WRITABLE;
        }
    }

    /// RFC 9293 §3.10.7.4: SND.WND update from an acceptable segment
    /// (SND.WL1 / SND.WL2 guard against old segments).
    #[inline]
    pub(super) fn update_send_window(&mut self, seq: SeqNumber, ack: SeqNumber, new_wnd: u32) {
        if self.snd.wnd == 0
            && new_wnd > 0
            && ack == self.snd.una
            && self.snd.nxt > ack
            && self.flags.has(Flags::PERSISTING)
        {
            // The window reopened: whatever went out as a probe into the
            // zero window was not accepted, so send it again right away
            // instead of waiting for a backed-off RTO; the probes are no
            // retransmissions to time the connection out by. Only probes
            // of the persist timer: data in flight when the peer shut its
            // window is left to the retransmission timer (and congestion
            // control), or a peer alternating a zero and an open window
            // in pure ACKs would draw the whole flight again with each
            // pair, the timer and its count cleared every time.
            self.snd.nxt = ack;
            self.timers_rare.rto = Deadline::NONE;
            self.timers_rare.retransmits = 0;
        }
        self.snd.wnd = new_wnd;
        self.snd.max_wnd = self.snd.max_wnd.max(new_wnd);
        self.snd.wl1 = seq;
        self.snd.wl2 = ack;
        if new_wnd > 0 && self.flags.has(Flags::PERSISTING) {
            self.flags.clear(Flags::PERSISTING);
            self.timers_rare.persist = Deadline::NONE;
            self.timers_rare.persist_backoff = 0;
        }
    }

    /// State transitions on our FIN being acknowledged (RFC 9293
    /// §3.10.7.4 fifth step, FIN-WAIT-1, CLOSING, LAST-ACK). Returns false
    /// once the connection closed, or is held only for unread bytes.
    #[inline]
    fn on_fin_acked(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.fin_acked() {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.flags.has(Flags::APP_CLOSED) {
                        // Orphaned: do not wait for the peer's FIN forever.
                        self.timers_rare.close =
                            self.timers.arm(ctx.now + ctx.cfg.msl.saturating_mul(2));
                    }
                }
                State::Closing => self.enter_time_wait(ctx),
                State::LastAck => {
                    self.exchange_over(ctx);
                    return !self.flags.has(Flags::HELD_FOR_READ);
                }
                _ => {}
            }
        }
        true
    }

    /// RTT measurement: one timed segment at a time under Karn's rule (RFC
    /// 6298 §3), exact to our clock, which is also what ends a backoff
    /// when every echo predates it; with timestamps, on every other ACK the
    /// echo (RFC 7323 §4) where its millisecond resolves the round trip
    /// ([`RTT_ECHO_MIN_MS`]). Returns the sample taken, if any (congestion
    /// control's, RFC 9406).
    pub(super) fn take_rtt_sample(&mut self, now: Instant, seg: &TcpRepr) -> Option<Duration> {
        if let Some((end, sent)) = self.rtt_seq.get() {
            if SeqNumber(seg.ack) >= end {
                self.rtt_seq = TimedSegment::NONE;
                let r = now.saturating_since(sent);
                self.rtt.on_sample(r);
                return Some(r);
            }
        }
        if self.flags.has(Flags::TIMESTAMPS) {
            if let Some((_, tsecr)) = seg.options.timestamps {
                // Karn's rule, timestamp flavour: after a timeout, an ACK for
                // a retransmission that arrived as a duplicate echoes the
                // TSval of an *earlier* copy (RFC 7323 §4.3 does not update
                // TS.Recent for duplicates), which would inflate the RTT by
                // the whole backoff; ignore echoes from before the timeout.
                let ms = self.tsval(now).wrapping_sub(tsecr);
                let before_timeout = (tsecr.wrapping_sub(self.ts.rtt_floor) as i32) < 0;
                if (RTT_ECHO_MIN_MS..RTT_ECHO_MAX_MS).contains(&ms)
                    && (!before_timeout || self.rtt_floor_lapsed(now))
                {
                    let r = Duration::from_millis(u64::from(ms));
                    self.rtt.on_sample(r);
                    return Some(r);
                }
            }
        }
        None
    }

    /// Whether the floor on echoes ([`TimestampState::rtt_floor`], our
    /// TSval at the last timeout, or at the connection's creation) lies
    /// 2^31 ms (24.9 days) or more in the past, where 32-bit timestamp
    /// comparison (RFC 7323 §5.2: modular, valid within 2^31) reads it as
    /// after every echo: a healthy connection that long without a timeout
    /// would take no sample from echoes for 24.9 days. If so, no timeout
    /// happened since (each sets the floor), and the floor moves up to the
    /// oldest echo a sample is taken from ([`RTT_ECHO_MAX_MS`] before
    /// now), which keeps out nothing it should not; the echo is taken. (A
    /// floor left 2^32 ms or more behind by a long idle reads as recent
    /// again, and keeps out at most the echoes of one round trip.) Called
    /// only for an echo that looks older than the floor (otherwise only
    /// after a timeout, a duplicate's echo of an earlier copy): out of
    /// line and cold.
    #[cold]
    #[inline(never)]
    fn rtt_floor_lapsed(&mut self, now: Instant) -> bool {
        let tsval = self.tsval(now);
        if (tsval.wrapping_sub(self.ts.rtt_floor) as i32) >= 0 {
            // A timeout less than 2^31 ms ago: the echo predates it.
            return false;
        }
        self.ts.rtt_floor = tsval.wrapping_sub(RTT_ECHO_MAX_MS);
        true
    }

    /// RFC 9293 §3.10.7.4 seventh: place text in the receive buffer.
    pub(super) fn receive_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: SeqNumber,
        data: &[u8],
        tsecr: Option<u32>,
    ) {
        let offset = seq - self.rcv.nxt;
        let had_holes = self.flags.has(Flags::HOLES);
        if offset > 0 {
            // RFC 5681 §4.2: out-of-order data is acknowledged at once, by
            // an ACK of its own; owed before the segment changes the SACK
            // state an ACK owed earlier reports (`owe_immediate_ack`).
            self.owe_immediate_ack(ctx);
        }
        let ring = self.recv_buf.capacity() + self.recv_buf.headroom();
        if self.recv_buf.len() + offset + data.len() > ring {
            self.cover_advertised_window();
        }
        // The peer's full-sized segment, for the delayed ACK (RFC 5681
        // §4.2: "at least every second full-sized segment") and the receive
        // RTT's samples: the largest seen, or any of at least 512 bytes (a
        // peer's MSS falls after a "packet too big" or a probe, rarely
        // below 536 less options: RFC 9293 §3.7.1). Growing only, a peer
        // whose segments shrank was acknowledged every third segment or
        // later, and its RTT no longer sampled. (Linux's
        // `tcp_measure_rcv_mss` lowers its estimate at the second such
        // segment in a row, or at smaller ones without PSH; one test here,
        // no branch.)
        let len = data.len().min(0xffff) as u16;
        if len >= MSS_LOWERS || len > self.rcv.mss_seen {
            self.rcv.mss_seen = len;
        }
        // Zero-copy receive: the next in-order bytes stay in the frame they
        // came in, when the caller lent it and the queue can take them so.
        let kept = ctx.lent.pending.is_some()
            && offset == 0
            && !had_holes
            && data.len() >= ctx.cfg.zero_copy_min
            && ctx
                .lent
                .pending
                .and_then(|l| l.locate(data))
                .is_some_and(|at| self.recv_buf.keep_frame(ctx.lent, at, data.len()));
        let front = if kept {
            ctx.lent.pending = None;
            ctx.stats.frames_kept += 1;
            Ok(data.len() as u32)
        } else {
            self.receive_copied(ctx, offset, data)
        };
        match front {
            Ok(front) => {
                if front > 0 {
                    // Duplicate ACKs still owed for the old RCV.NXT would now
                    // carry the new one and signal a loss that is not there.
                    if self.rcv.acks_owed > 0 {
                        self.drop_owed_acks(ctx);
                    }
                    if !kept {
                        self.recv_buf.enqueue_unallocated(ctx.lent, front as usize);
                    }
                    self.rcv.nxt += front as usize;
                    self.rcv.unacked += front;
                    ctx.stats.bytes_in += u64::from(front);
                    if !self.flags.has(Flags::READABLE_NOTIFIED) {
                        self.flags.set(Flags::READABLE_NOTIFIED);
                        self.events |= ev::READABLE;
                    }
                }
            }
            Err(_) => ctx.stats.ooo_dropped += 1,
        }
        self.rcv_rtt_measure(ctx.now, tsecr, data.len());
        if offset > 0 {
            self.received_out_of_order(ctx, seq, had_holes);
        } else if had_holes {
            // RFC 5681 §4.2: so is data that fills a hole.
            self.flags.set(Flags::ACK_NOW);
        } else if self.rcv.unacked as usize >= 2 * usize::from(self.rcv.mss_seen.max(1)) {
            // RFC 5681 §4.2: ACK at least every second full-sized segment.
            self.flags.set(Flags::ACK_NOW);
        } else if self.timers.delayed_ack.is_none() {
            self.arm_delayed_ack(ctx.now + ctx.cfg.ack_delay);
        }
        if self.flags.has(Flags::FIN_AHEAD) {
            self.fin_ahead(ctx, seq + data.len());
        }
    }

    /// [`Connection::receive_data`] for bytes copied into the receive
    /// buffer's chunks at `offset` from RCV.NXT (not kept in their frame):
    /// returns how many bytes are now in order at the front. Out of line,
    /// so that the kept frames' path keeps its registers.
    #[inline(never)]
    fn receive_copied(
        &mut self,
        ctx: &mut Ctx<'_>,
        offset: usize,
        data: &[u8],
    ) -> Result<u32, crate::assembler::TooManyRanges> {
        if self.flags.has(Flags::HOLES) && self.flags.has(Flags::SACK) {
            self.dsack_held(offset, data.len());
        }
        let written = self.recv_buf.write_unallocated(ctx.pool, offset, data);
        if written < data.len() {
            // Past the ring (window rounding beyond its headroom): the
            // peer resends the rest.
            ctx.stats.recv_buffer_overrun += 1;
            self.flags.set(Flags::ACK_NOW);
        }
        let capacity = self.recv_buf.capacity();
        let front = self.assembler.add(offset as u32, written as u32, capacity);
        if front.is_err() {
            self.forget_refused(ctx);
        }
        if self.assembler.is_empty() {
            self.flags.clear(Flags::HOLES);
        } else {
            self.flags.set(Flags::HOLES);
        }
        front
    }

    /// An out-of-order segment's bytes were written before the assembler
    /// refused them (too many ranges): the buffer forgets what lies past
    /// the held ranges and gives back the chunks only they took, or an
    /// idle connection would keep them (and refuse zero-copy receive) for
    /// bytes that are never delivered.
    #[cold]
    #[inline(never)]
    fn forget_refused(&mut self, ctx: &mut Ctx<'_>) {
        let keep = self.assembler.held_end() as usize;
        self.recv_buf.forget_unqueued_past(ctx.pool, keep);
    }

    /// RFC 2883 §4: a segment that brings again bytes the assembler holds
    /// (out of order, or one filling a hole and reaching into held data) is
    /// reported by a D-SACK block of those bytes (the block that holds
    /// them follows it: `sack_blocks`).
    #[cold]
    #[inline(never)]
    fn dsack_held(&mut self, offset: usize, len: usize) {
        if let Some((s, e)) = self.assembler.held_part(offset as u32, len as u32) {
            let nxt = self.rcv.nxt;
            self.set_dsack(nxt + s as usize, nxt + e as usize);
        }
    }

    /// RFC 5681 §4.2: out-of-order data (starting at `seq`) is acknowledged
    /// immediately (owed in `receive_data`), its block first in the SACK
    /// option. Out of line: the in-order path inlines `receive_data`.
    #[cold]
    #[inline(never)]
    fn received_out_of_order(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber, had_holes: bool) {
        ctx.stats.out_of_order += 1;
        self.note_sacked(seq, !had_holes);
    }

    /// A duplicate's range `[l, r)` to report as a D-SACK block (RFC 2883
    /// §4). One still pending goes in the same ACK (no ACK was owed in
    /// between: `owe_immediate_ack` sets a pending one aside with its
    /// ACK): one range if they touch (as Linux's `tcp_dsack_extend`), else
    /// the latest.
    fn set_dsack(&mut self, l: SeqNumber, r: SeqNumber) {
        let (pl, pr) = self.rcv_rare.dsack;
        self.rcv_rare.dsack = if self.flags.has(Flags::DSACK) && l <= pr && pl <= r {
            (l.min(pl), r.max(pr))
        } else {
            (l, r)
        };
        self.flags.set(Flags::DSACK);
    }

    /// An out-of-order segment starting at `seq` was placed: its block is
    /// the first of the next SACK option, and the blocks of the earlier
    /// ones follow, most recent first (RFC 2018 §4). An earlier start in
    /// the same block (the segments of one run) gives its place up, so that
    /// the list names three distinct blocks.
    fn note_sacked(&mut self, seq: SeqNumber, first: bool) {
        let nxt = self.rcv.nxt;
        let list = &mut self.rcv_rare.sacked;
        if first {
            // The assembler held nothing before: older starts are stale.
            *list = [seq; 3];
            return;
        }
        let block = self.assembler.range_with((seq - nxt) as u32);
        if block.is_none() {
            // Not placed (no room, or past the buffer): nothing to report.
            return;
        }
        let same = |s: SeqNumber| {
            s >= nxt
                && block.is_some_and(|(b, e)| {
                    let off = s - nxt;
                    (b as usize) <= off && off < e as usize
                })
        };
        // The entry to drop: the first in the same block, or the oldest.
        let drop = list.iter().position(|&s| same(s)).unwrap_or(list.len() - 1);
        list.copy_within(..drop, 1);
        list[0] = seq;
    }

    /// A FIN that arrived ahead of a hole, after data at `data_end` was
    /// placed: in sequence now, or contradicted. The FIN is the last octet
    /// of the peer's sequence space (RFC 9293 §3.1, §3.10.7.4 eighth), so
    /// data beyond a recorded FIN, or RCV.NXT moved past it, shows that it
    /// was forged or broken: it is forgotten, and the real FIN, wherever
    /// it comes, is taken (a stale record would otherwise shadow it).
    #[cold]
    fn fin_ahead(&mut self, ctx: &mut Ctx<'_>, data_end: SeqNumber) {
        let Some(fin) = self.peer_fin_ahead() else {
            return;
        };
        if data_end > fin || self.rcv.nxt > fin {
            self.set_peer_fin_ahead(None);
            ctx.stats.fin_overrun += 1;
        } else if fin == self.rcv.nxt {
            self.on_fin(ctx);
        }
    }

    /// RFC 5681 §4.2: every out-of-order segment (and, RFC 5681 §3.2 /
    /// RFC 9293 §3.10.7.4, every unacceptable duplicate) gets an immediate
    /// ACK of its own. A sans-IO stack fed a batch of segments before it is
    /// polled would otherwise send one ACK for the whole batch: the sender,
    /// without SACK, then sees one duplicate ACK where there were twenty,
    /// never reaches its duplicate-ACK threshold and waits for its RTO.
    ///
    /// Called before the segment changes the SACK state: an ACK owed
    /// already reports the state as it stands, which is set aside for it
    /// (`OwedAcks`) when it has any.
    pub(super) fn owe_immediate_ack(&mut self, ctx: &mut Ctx<'_>) {
        if self.flags.has(Flags::ACK_NOW) && self.rcv.acks_owed < MAX_ACKS_OWED {
            if self.flags.has(Flags::SACK) {
                self.set_aside_owed_ack(ctx);
            }
            self.rcv.acks_owed += 1;
        }
        self.flags.set(Flags::ACK_NOW);
    }

    /// Sets aside the SACK state the latest owed ACK reports (RFC 2018 §4:
    /// its first block holds the segment that owed it; RFC 2883 §4: its
    /// D-SACK block is its duplicate's); the ACKs that go out while more
    /// are owed take theirs back in order (`emit_raw_payload`). When the
    /// stack can set aside no more, this connection's are forgotten and
    /// its owed ACKs report the state after the batch, as they line up no
    /// more.
    #[cold]
    #[inline(never)]
    fn set_aside_owed_ack(&mut self, ctx: &mut Ctx<'_>) {
        if self.flags.has(Flags::ACKS_UNRECORDED) {
            return;
        }
        let sack = AckSack {
            sacked: self.flags.has(Flags::HOLES).then_some(self.rcv_rare.sacked),
            dsack: self.flags.has(Flags::DSACK).then_some(self.rcv_rare.dsack),
        };
        if ctx.replies.owed_acks.push(self.tuple, sack) {
            self.flags.clear(Flags::DSACK);
        } else {
            ctx.replies.owed_acks.forget(&self.tuple);
            self.flags.set(Flags::ACKS_UNRECORDED);
        }
    }

    /// In-order data moved RCV.NXT: the duplicate ACKs still owed would
    /// carry the new one and signal a loss that is not there, so they are
    /// not sent, nor is the SACK state set aside for them.
    #[cold]
    #[inline(never)]
    pub(super) fn drop_owed_acks(&mut self, ctx: &mut Ctx<'_>) {
        self.rcv.acks_owed = 0;
        self.flags.clear(Flags::ACKS_UNRECORDED);
        ctx.replies.owed_acks.forget(&self.tuple);
    }

    /// RFC 9293 §3.10.7.4 eighth: the FIN bit, in sequence.
    pub(super) fn on_fin(&mut self, ctx: &mut Ctx<'_>) {
        if self.flags.has(Flags::PEER_FIN) {
            return;
        }
        self.set_peer_fin_ahead(None);
        if self.flags.has(Flags::HOLES) {
            self.drop_past_fin(ctx);
        }
        self.rcv.nxt += 1;
        // The window offered stays offered in the ACKs, but commits no
        // memory now (`RecvRare::fin_mark`).
        self.rcv_rare.fin_mark = self.rcv.adv.max(self.rcv.nxt);
        self.rcv.adv = self.rcv.nxt;
        self.flags.set(Flags::PEER_FIN | Flags::ACK_NOW);
        self.events |= ev::PEER_CLOSED;
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_acked() {
                    self.enter_time_wait(ctx);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(ctx),
            _ => {}
        }
    }

    /// A FIN in sequence while out-of-order data beyond it is held: the
    /// stream ends before those bytes, which can never be delivered (as
    /// Linux's `tcp_fin` purges its out-of-order queue). They and their
    /// chunks are dropped, and no SACK block reports them; counted as a
    /// FIN overrun, as data past a FIN is ([`Connection::fin_ahead`]).
    #[cold]
    #[inline(never)]
    fn drop_past_fin(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.fin_overrun += 1;
        self.forget_out_of_order(ctx.pool);
    }

    pub(super) fn enter_time_wait(&mut self, ctx: &mut Ctx<'_>) {
        self.state = State::TimeWait;
        self.timers_rare.rto = Deadline::NONE;
        self.timers_rare.persist = Deadline::NONE;
        self.timers_rare.keepalive = Deadline::NONE;
        self.timers.delayed_ack = Deadline::NONE;
        self.timers_rare.close = self.timers.arm(ctx.now + ctx.cfg.msl.saturating_mul(2));
        if self.compactable() {
            // The stack replaces the connection by its compact record as
            // soon as this segment is processed, and frees all its buffers
            // then (`Stack::remove`): freeing them here too was twice the
            // work.
            self.events |= ev::COMPACT;
            return;
        }
        self.assembler.clear();
        // Nothing more is sent or received: TIME-WAIT holds no buffer
        // memory beyond what the application has yet to read.
        ctx.pool.dropped_from_send(self.send_buf.len());
        self.send_buf.release(ctx.pool);
        self.flags.clear(Flags::HOLES | Flags::SEND_QUEUED);
        self.recv_buf.forget_unqueued(ctx.pool);
    }

    /// Starts the keepalive timer when the connection is established
    /// (RFC 1122 §4.2.3.6). It is not pushed on by each segment: when it
    /// fires, [`Connection::on_timeout`] measures the idle time from the
    /// last segment received and re-arms for the rest of it, as Linux's
    /// `tcp_keepalive_timer` does.
    pub(super) fn arm_keepalive(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(ka) = self.keepalive(ctx.cfg) {
            if self.state.is_synchronized() && self.state != State::TimeWait {
                self.timers_rare.keepalive = self.timers.arm(ctx.now + ka.idle);
            }
        }
    }
}
