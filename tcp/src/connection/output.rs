//! Segment emission: the SYN / SYN-ACK, data, retransmissions, probes and pure ACKs, with
//! their options (timestamps, SACK blocks: RFC 7323, RFC 2018 §4).

use super::*;
use core::ops::ControlFlow::{self, Break, Continue};
use flowlane_wire::tcp::MAX_HEADER_LEN;

impl Connection {
    /// Writes at most one segment into `buf`; returns its length.
    pub(crate) fn poll_transmit(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        match self.state {
            State::Closed | State::Listen => None,
            State::SynSent => {
                if self.snd.nxt == self.snd_rare.iss {
                    self.emit_syn(ctx, buf, false)
                } else {
                    None
                }
            }
            State::SynReceived => {
                if self.snd.nxt == self.snd_rare.iss || self.flags.has(Flags::ACK_NOW) {
                    self.emit_syn(ctx, buf, true)
                } else {
                    None
                }
            }
            _ => self.poll_transmit_synchronized(ctx, buf),
        }
    }

    pub(super) fn emit_syn(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        ack: bool,
    ) -> Option<usize> {
        let cfg = ctx.cfg;
        let now = ctx.now;
        let mut options = TcpOptions {
            mss: Some(cfg.mss_for(self.tuple.remote_ip())),
            ..TcpOptions::default()
        };
        let offer_ts = if ack {
            self.flags.has(Flags::TIMESTAMPS)
        } else {
            cfg.timestamps
        };
        if offer_ts {
            options.timestamps = Some((self.tsval(now), if ack { self.ts.recent } else { 0 }));
        }
        if self.flags.has(Flags::WS_OFFERED) {
            options.window_scale = Some(offered_wscale(cfg));
        }
        // RFC 2018 §2: in a SYN-ACK only if the SYN carried it.
        options.sack_permitted = if ack {
            self.flags.has(Flags::SACK)
        } else {
            cfg.sack
        };
        let flags = if ack {
            TcpFlags::SYN | TcpFlags::ACK
        } else {
            TcpFlags::SYN
        } | self.ecn_syn_flags(cfg, ack);
        let repr = TcpRepr {
            src_port: self.tuple.local_port(),
            dst_port: self.tuple.remote_port(),
            seq: self.snd_rare.iss.0,
            ack: if ack { self.rcv.nxt.0 } else { 0 },
            flags,
            // RFC 7323 §2.2: the window in a SYN is not scaled.
            window: self.offerable(ctx.mem).min(0xffff) as u16,
            urgent: 0,
            options,
        };
        let len = repr.emit(buf).ok()?;
        if ack {
            self.rcv.adv = self.rcv.nxt + usize::from(repr.window);
            self.ts.last_ack_sent = self.rcv.nxt;
            self.flags.clear(Flags::ACK_NOW);
            if self.rcv.acks_owed > 0 {
                // Out-of-window segments in SYN-RECEIVED owed ACKs: this
                // SYN-ACK answers them all.
                self.drop_owed_acks(ctx);
            }
        }
        if self.snd.max > self.snd_rare.iss {
            ctx.stats.retransmits += 1;
            self.snd_rare.retransmitted = self.snd_rare.retransmitted.saturating_add(1);
            // Karn (RFC 6298 §3): a SYN-ACK sent again (a retransmitted
            // SYN asked for it before our timer fired) leaves no sample;
            // its ACK timed from the first copy gave an SRTT of the whole
            // wait.
            self.rtt_seq = TimedSegment::NONE;
        } else {
            // RFC 6298 §3: the SYN (SYN-ACK) is timed like any segment,
            // with or without timestamps, as Linux times both
            // (`tcp_synack_rtt_meas`; the SYN's send time in
            // `tcp_ack_update_rtt`): a pure receiver's only sample, and
            // exact to the clock where an echo's millisecond is not.
            self.rtt_seq = TimedSegment::new(self.snd_rare.iss + 1, now);
        }
        self.snd.nxt = self.snd_rare.iss + 1;
        self.snd.max = self.snd.max.max(self.snd.nxt);
        if self.timers_rare.rto.is_none() {
            self.arm_rto_at(now + self.rtt.rto());
        }
        Some(len)
    }

    pub(super) fn poll_transmit_synchronized(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<usize> {
        if self.state.can_send() {
            let start = self.data_start();
            let buffered = self.queued_bytes();
            if let Break(r) = self.poll_tlp(ctx, buf) {
                return r;
            }
            if let Break(r) = self.poll_retransmit_one(ctx, buf, buffered) {
                return r;
            }
            if let Break(r) = self.poll_window_probe(ctx, buf, start, buffered) {
                return r;
            }
            if self.flags.has(Flags::ACK_NOW)
                && (self.flags.has(Flags::HOLES | Flags::DSACK) || self.rcv.acks_owed > 0)
                && self.flags.has(Flags::SACK)
            {
                // An ACK owed for out-of-order or duplicate data goes out
                // pure, with its SACK blocks (RFC 2018 §4: in every ACK
                // that does not acknowledge the highest sequence number;
                // RFC 2883), ahead of any data segment, which has no room
                // for them and is no duplicate ACK (RFC 5681 §2).
                return self.emit_raw(ctx, buf, self.acceptable_seq(), TcpFlags::ACK, 0);
            }
            if let Break(r) = self.poll_data(ctx, buf, start, buffered) {
                return r;
            }
        }
        if self.flags.has(Flags::KEEPALIVE_NOW) {
            self.flags.clear(Flags::KEEPALIVE_NOW);
            // RFC 1122 §4.2.3.6: SEG.SEQ = SND.NXT - 1, no data.
            ctx.stats.keepalive_probes += 1;
            let seq = self.snd.una - 1;
            return self.emit_raw(ctx, buf, seq, TcpFlags::ACK, 0);
        }
        if self.flags.has(Flags::ACK_NOW) {
            // SND.MAX rather than SND.NXT (after a timeout rewound SND.NXT,
            // the peer may already have everything up to SND.MAX, and a
            // pure ACK below its RCV.NXT would be dropped), within the
            // peer's window (`acceptable_seq`).
            return self.emit_raw(ctx, buf, self.acceptable_seq(), TcpFlags::ACK, 0);
        }
        None
    }

    /// Fast retransmit / partial ACK / timeout: one segment at SND.UNA.
    /// `Break` with what to return when a segment was written.
    #[inline]
    fn poll_retransmit_one(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        buffered: usize,
    ) -> ControlFlow<Option<usize>> {
        if self.flags.has(Flags::RETRANSMIT_ONE | Flags::MTU_SEARCH) {
            if !self.flags.has(Flags::RETRANSMIT_ONE) {
                // One flag test on the send path for both (RFC 4821 §7).
                return self.poll_mtu_probe(ctx, buf);
            }
            self.flags.clear(Flags::RETRANSMIT_ONE);
            if self.snd.una == self.snd.max {
                // An ACK since acknowledged everything: nothing to resend,
                // and new data goes within the windows.
                return Continue(());
            }
            let mut len = buffered.min(self.eff_mss());
            if let (_, Some(sacked)) = self.scoreboard.next_unsacked(self.snd.una) {
                // Not into data the peer already holds.
                len = len.min(sacked - self.snd.una);
            }
            if let Some(n) = self.retransmit_at(ctx, buf, self.snd.una, len) {
                return Break(Some(n));
            }
        }
        Continue(())
    }

    /// Window probe (persist timer): one byte into a zero window, or
    /// whatever the window allows if SWS avoidance held data back.
    #[inline]
    fn poll_window_probe(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        start: SeqNumber,
        buffered: usize,
    ) -> ControlFlow<Option<usize>> {
        if self.flags.has(Flags::PROBE_NOW) {
            self.flags.clear(Flags::PROBE_NOW);
            if let Some(sent) = self.send_window_probe(ctx, buf, start, buffered) {
                return Break(sent);
            }
        }
        Continue(())
    }

    /// The probe itself, out of the poll's line (a timer's work, rare):
    /// `None` if there is nothing to probe with.
    #[inline(never)]
    fn send_window_probe(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        start: SeqNumber,
        buffered: usize,
    ) -> Option<Option<usize>> {
        let zero = self.snd.wnd == 0;
        if zero && self.timers_rare.rto.is_none() {
            // Each probe of a zero window is its first byte outside
            // it again (a byte probed before was not taken).
            self.snd.nxt = self.snd.una;
        }
        let off = self.snd.nxt.saturating_sub(start);
        if off >= buffered {
            return None;
        }
        let len = if zero {
            1
        } else {
            (self.snd.wnd as usize).min(self.eff_mss())
        }
        .min(buffered - off);
        ctx.stats.window_probes += 1;
        let rto_armed = self.timers_rare.rto.is_some();
        let sent = self.emit_segment(ctx, buf, self.snd.nxt, len, false);
        if zero && !rto_armed {
            // Probing a zero window is flow control, not loss (RFC 9293
            // §3.8.6.1, RFC 1122 §4.2.2.17): the persist timer, backed
            // off, sends the next probe whether this one is answered or
            // not, and no retransmission timer runs for the byte, whose
            // timeout would read as congestion (RFC 5681 §3.1) and take
            // the window down to one segment.
            self.timers_rare.rto = Deadline::NONE;
            self.flags.clear(Flags::PROBE_ARMED);
            self.arm_persist(ctx.now);
            // Unanswered so far: the peer's answer resets the count.
            self.timers_rare.retransmits = self.timers_rare.retransmits.saturating_add(1);
        }
        Some(sent)
    }

    /// RFC 6675 §5 step (C): in SACK recovery, send while cwnd - pipe >= 1
    /// SMSS, choosing by NextSeg(): (1) a lost segment above HighRxt, else
    /// (2) new data. Rule (3), any un-SACKed segment above HighRxt, is not
    /// used: when the receive window or the send buffer limits the flight,
    /// it resends segments that are merely in flight (in the simulator, ten
    /// times the retransmissions at 0.1 % loss with 64 KiB buffers, for no
    /// goodput). Rule (4), the rescue retransmission, is left to the loss
    /// probe. `Break` when a lost segment was retransmitted, else the room
    /// left for new data.
    #[inline]
    fn poll_sack_recovery(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        mss: usize,
    ) -> ControlFlow<Option<usize>, usize> {
        let room = self.cc.window().saturating_sub(self.pipe());
        if room < mss {
            Continue(0)
        } else if let Some((seq, len)) = self.next_seg_lost() {
            if let Some(n) = self.retransmit_at(ctx, buf, seq, len) {
                return Break(Some(n));
            }
            Continue(room)
        } else {
            Continue(room)
        }
    }

    /// New (or go-back-N) data within the windows, with Nagle and sender
    /// SWS avoidance, then a bare FIN once all data is out.
    #[inline]
    fn poll_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        start: SeqNumber,
        buffered: usize,
    ) -> ControlFlow<Option<usize>> {
        let fin_seq = self.fin_seq();
        let mss = self.eff_mss();
        let sack_recovery = self.flags.has(Flags::SACK_RECOVERY);
        let sack_room = if sack_recovery {
            self.poll_sack_recovery(ctx, buf, mss)?
        } else {
            0
        };

        // After a timeout, go-back-N skips what SACK blocks arriving since
        // reported held (RFC 6675 §5.1).
        let mut sacked_limit = None;
        if self.snd.nxt < self.snd.max && !sack_recovery && !self.scoreboard.is_empty() {
            let (s, lim) = self.scoreboard.next_unsacked(self.snd.nxt);
            self.snd.nxt = s.min(self.snd.max);
            sacked_limit = lim.filter(|&l| l < self.snd.max);
        }
        let off = self.snd.nxt.saturating_sub(start);
        let unsent = buffered.saturating_sub(off);
        // The windows only when there is something to send: a receiver's
        // ACKs then leave the congestion controller's lines alone.
        let mut len = 0;
        if unsent > 0 {
            let in_flight = self.snd.nxt - self.snd.una;
            let usable = if sack_recovery {
                sack_room.min((self.snd.wnd as usize).saturating_sub(in_flight))
            } else {
                let wnd = (self.snd.wnd as usize).min(self.cc.window() + self.limited_transmit());
                wnd.saturating_sub(in_flight)
            };
            len = unsent.min(usable).min(mss);
            if let Some(l) = sacked_limit {
                len = len.min(l - self.snd.nxt);
            }
        }
        if len > 0 {
            let idle = self.snd.nxt == self.snd.una;
            let nodelay = self.flags.has(Flags::NODELAY);
            let closing = fin_seq.is_some();
            // RFC 9293 §3.7.4 (Nagle) and §3.8.6.2.1 (sender SWS), for new
            // data: a hole go-back-N fills up to SACKed data goes as it is
            // (it was sent before, and waiting cannot make it longer).
            let send = len == mss
                || (len == unsent && (idle || nodelay || closing))
                || ((idle || nodelay) && len >= (self.snd.max_wnd as usize / 2).max(1))
                || sacked_limit.is_some_and(|l| self.snd.nxt + len == l);
            if send {
                let fin = fin_seq.is_some_and(|fs| self.snd.nxt + len == fs);
                return Break(self.emit_segment(ctx, buf, self.snd.nxt, len, fin));
            }
        }
        // A bare FIN once all data is out.
        if let Some(fs) = fin_seq {
            if self.snd.nxt == fs {
                return Break(self.emit_segment(ctx, buf, fs, 0, true));
            }
        }
        Continue(())
    }

    /// Emits a data and/or FIN segment at `seq` and advances SND.NXT.
    pub(super) fn emit_segment(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        seq: SeqNumber,
        len: usize,
        fin: bool,
    ) -> Option<usize> {
        let now = ctx.now;
        let mut flags = TcpFlags::ACK;
        // PSH on the segment that empties the send buffer (RFC 9293
        // §3.9.1: the data of a push is sent promptly; BSD and Linux set it
        // on the last segment queued), not on every one: a Linux receiver
        // (6.x, `tcp_measure_rcv_mss`) ACKs a full-sized PSH segment as
        // soon as its application has read it, so PSH everywhere doubled
        // the ACKs (one per segment instead of one per two), and with them
        // the work of both ends, and made every send a single segment
        // where a kernel sender beside it sends pairs (tests/tcp_cubic.rs:
        // at a drop-tail queue the pairs lost 5 to 9 times as many frames).
        if len > 0 && seq + len >= self.data_start() + self.send_buf.len() {
            flags = flags | TcpFlags::PSH;
        }
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        let (written, payload) = self.emit_raw_payload(ctx, buf, seq, flags, len)?;
        let fin = fin && payload == len;
        let end = seq + payload + usize::from(fin);
        let is_retransmit = seq < self.snd.max;
        if is_retransmit {
            // A zero window's probe, sent again, is counted as a probe
            // (`window_probes`), not as a retransmission.
            if !(self.snd.wnd == 0 && self.flags.has(Flags::PERSISTING)) {
                ctx.stats.retransmits += 1;
                self.snd_rare.retransmitted = self.snd_rare.retransmitted.saturating_add(1);
                self.rack.dsack_credit = self.rack.dsack_credit.saturating_add(1);
            }
            // Karn (RFC 6298 §3): no sample from retransmitted data.
            if self.rtt_seq.get().is_some_and(|(e, _)| e > seq) {
                self.rtt_seq = TimedSegment::NONE;
            }
        } else if end > seq && self.rtt_seq.is_none() {
            self.rtt_seq = TimedSegment::new(end, now);
        }
        if payload > 0 {
            ctx.stats.data_segments_out += 1;
            ctx.stats.bytes_out += payload as u64;
            // RFC 5681 §4.1: restart from IW after an idle period. Not at
            // a zero window's probe: flow control held the data back,
            // the probe's byte lies outside the window and no congestion
            // window governs it (RFC 9293 §3.8.6.1), as Linux's probe
            // (`tcp_xmit_probe_skb`, no data) starts no transmission and
            // leaves its window alone; data the reopened window takes is
            // judged here again.
            let idle = now.saturating_since(self.timers_rare.last_send);
            if self.snd.una == self.snd.max
                && idle > self.rtt.rto()
                && !(self.snd.wnd == 0 && self.flags.has(Flags::PERSISTING))
            {
                self.cc.on_idle_restart(idle, self.initial_window(ctx.cfg));
            }
            self.timers_rare.last_send = now;
        }
        if end > seq {
            self.rack_on_transmit(ctx, seq, end);
        }
        if end > self.snd.nxt {
            self.snd.nxt = end;
        }
        self.snd.max = self.snd.max.max(self.snd.nxt);
        // RFC 6298 §5.1 (SND.MAX first: a receiver's ACKs read no
        // retransmission timer).
        if self.snd.una != self.snd.max && self.timers_rare.rto.is_none() {
            self.arm_rto_at(now + self.rtt.rto());
        }
        if !is_retransmit && payload > 0 {
            self.rearm_probe(now);
        }
        Some(written)
    }

    pub(super) fn emit_raw(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        seq: SeqNumber,
        flags: TcpFlags,
        len: usize,
    ) -> Option<usize> {
        self.emit_raw_payload(ctx, buf, seq, flags, len)
            .map(|(n, _)| n)
    }

    /// Builds and writes a segment with up to `len` bytes from the send
    /// buffer at `seq`. Every segment carries an ACK of RCV.NXT, so the
    /// delayed-ACK state is cleared. Returns (bytes written, payload bytes).
    pub(super) fn emit_raw_payload(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        seq: SeqNumber,
        flags: TcpFlags,
        len: usize,
    ) -> Option<(usize, usize)> {
        if buf.len() < MAX_HEADER_LEN {
            // Against `Stack::poll_transmit`'s contract: nothing is taken
            // (an owed ACK's SACK state, a D-SACK block) for a segment that
            // cannot be written.
            return None;
        }
        let mut options = TcpOptions::default();
        if self.flags.has(Flags::TIMESTAMPS) {
            options.timestamps = Some((self.tsval(ctx.now), self.ts.recent));
        }
        if len == 0 && self.flags.has(Flags::SACK) {
            // Pure ACKs only: on a data segment the blocks would push it
            // past the MSS, which only accounts for timestamps. One that
            // goes out while more are owed is an earlier one: it reports
            // the SACK state set aside for it (`owe_immediate_ack`).
            let set_aside = if self.rcv.acks_owed > 0 {
                ctx.replies.owed_acks.pop(&self.tuple)
            } else {
                None
            };
            self.sack_blocks(&mut options, set_aside);
        }
        let flags = if self.flags.has(Flags::ECN) {
            self.ecn_segment_flags(flags, seq, len)
        } else {
            flags
        };
        let window = self.advertise_window(ctx.mem, ctx.stats);
        let repr = TcpRepr {
            src_port: self.tuple.local_port(),
            dst_port: self.tuple.remote_port(),
            seq: seq.0,
            ack: self.rcv.nxt.0,
            flags,
            window,
            urgent: 0,
            options,
        };
        let hl = repr.emit(buf).ok()?;
        let room = buf.len() - hl;
        let mut payload = len.min(room);
        if payload > 0 {
            let off = seq - self.data_start();
            payload = self
                .send_buf
                .read_allocated(off, &mut buf[hl..hl + payload]);
        }
        if payload < len && flags.fin() {
            // Truncated by a small buffer: the FIN goes out later.
            buf[13] &= !TcpFlags::FIN.0;
        }
        self.ts.last_ack_sent = self.rcv.nxt;
        self.rcv.unacked = 0;
        self.timers.delayed_ack = Deadline::NONE;
        if self.rcv.acks_owed > 0 {
            // One more (duplicate) ACK follows: see `owe_immediate_ack`.
            // A segment with data is none (RFC 5681 §2: a duplicate ACK
            // carries no data): the ones owed all follow it.
            if len == 0 {
                self.rcv.acks_owed -= 1;
            }
            self.flags.set(Flags::ACK_NOW);
        } else {
            self.flags.clear(Flags::ACK_NOW | Flags::ACKS_UNRECORDED);
        }
        Some((hl + payload, payload))
    }

    /// Fills in SACK blocks (RFC 2018 §4): a pending D-SACK block first
    /// (RFC 2883 §4), then the block holding the most recent out-of-order
    /// segment, then those of the segments before it that went first in
    /// earlier options (most recent first: `RecvRare::sacked`), then the
    /// others, highest first; as many as fit next to the timestamp option
    /// (3 with it, 4 without).
    ///
    /// An earlier owed ACK reports the state `set_aside` for it instead of
    /// the pending D-SACK block and `RecvRare::sacked`, with the blocks
    /// held now.
    pub(super) fn sack_blocks(&mut self, o: &mut TcpOptions, set_aside: Option<AckSack>) {
        let max = if o.timestamps.is_some() { 3 } else { 4 };
        let mut n = 0;
        let mut dsack_above = None;
        let (dsack, sacked) = match set_aside {
            Some(s) => (s.dsack, s.sacked),
            None => {
                let pending = self.flags.has(Flags::DSACK).then_some(self.rcv_rare.dsack);
                self.flags.clear(Flags::DSACK);
                (pending, Some(self.rcv_rare.sacked))
            }
        };
        if let Some((l, r)) = dsack {
            o.sack_blocks[n] = (l.0, r.0);
            n += 1;
            dsack_above = Some(l);
        }
        if !self.flags.has(Flags::HOLES) {
            // No other block (and no reason to read the assembler's line,
            // or `sacked`'s).
            o.sack_block_count = n as u8;
            return;
        }
        let nxt = self.rcv.nxt;
        let abs = |(s, e): (u32, u32)| ((nxt + s as usize).0, (nxt + e as usize).0);
        let first = n;
        // A D-SACK block of held data is followed by the block holding it
        // (RFC 2883 §4), whatever arrived after it in the same batch; one
        // below RCV.NXT by none in particular.
        let holding = dsack_above.filter(|&l| l > nxt);
        let recent = holding
            .into_iter()
            .chain(sacked.into_iter().flatten())
            .filter(|&s| s > nxt)
            .filter_map(|s| self.assembler.range_with((s - nxt) as u32));
        for b in recent.chain(self.assembler.ranges().rev()).map(abs) {
            if n >= max {
                break;
            }
            if !o.sack_blocks[first..n].contains(&b) {
                o.sack_blocks[n] = b;
                n += 1;
            }
        }
        o.sack_block_count = n as u8;
    }
}
