//! Buffer auto-tuning and the advertised window: receive-side dynamic right-sizing
//! (Fisk & Feng, "Dynamic right-sizing in TCP", 2001; Linux `tcp_rcv_space_adjust`), the
//! receiver's RTT estimate it runs on, send buffer growth (Linux `tcp_sndbuf_expand`), and
//! the window we offer (RFC 9293 §3.8.6, RFC 7323 §2).

use super::*;

impl Connection {
    /// Sequence number of the next byte the application reads (Linux
    /// `copied_seq`).
    pub(super) fn copied_seq(&self) -> SeqNumber {
        let fin = usize::from(self.flags.has(Flags::PEER_FIN));
        self.rcv.nxt - (self.recv_buf.len() + fin)
    }

    /// The largest receive buffer worth having: the configured maximum, and
    /// no more than the scaled window field can offer (RFC 7323 §2.3;
    /// 65,535 bytes without window scaling).
    pub(super) fn recv_buffer_limit(&self, cfg: &Config) -> usize {
        cfg.recv_buffer_max.min(0xffff << self.rcv.wscale)
    }

    /// Receive buffer dynamic right-sizing, run when the application reads
    /// (Fisk & Feng, "Dynamic right-sizing in TCP", 2001: the data the
    /// application takes per RTT is the least the sender's window must be,
    /// so offer twice that; Linux `tcp_rcv_space_adjust`). Once per receiver
    /// RTT estimate (a longer period, after a pause, counts pro rata), if
    /// the application read more than in the last period that raised the
    /// estimate, the buffer grows to
    /// `2 * copied + 16 * MSS`, plus twice that scaled by the period's
    /// growth factor (the sender may still be in slow start, doubling every
    /// RTT, and the window we advertise now governs the *next* RTT), capped
    /// at [`Config::recv_buffer_max`]. Growing only adds space at the right,
    /// so the advertised right edge never moves left (RFC 9293 §3.8.6, RFC
    /// 7323 §2.4); the freed space then goes out as a window update
    /// (`after_read`). A connection whose application does not keep up, or
    /// that carries little data, never grows.
    pub(super) fn rcv_space_adjust(&mut self, ctx: &Ctx<'_>) {
        let rtt_us = self.tune.rcv_rtt_us;
        if rtt_us == 0 {
            return;
        }
        let now = ctx.now;
        if now.saturating_since(self.tune.rcv_space_time) < Duration::from_micros(u64::from(rtt_us))
        {
            return;
        }
        let copied_seq = self.copied_seq();
        let mut copied = copied_seq.saturating_sub(self.tune.rcv_space_seq);
        let elapsed_us = now.saturating_since(self.tune.rcv_space_time).as_nanos() / 1000;
        if elapsed_us > 2 * u64::from(rtt_us) {
            // The application paused (or the connection idled): what it
            // read is a backlog, not a rate. Count its share of one RTT, as
            // the DRS paper measures data per RTT; otherwise a connection
            // that reads a full buffer now and then would grow for nothing.
            copied = (copied as u64 * u64::from(rtt_us) / elapsed_us) as usize;
        }
        let space = self.tune.rcv_space as usize;
        // Under memory pressure buffers do not grow (Linux
        // `tcp_rcv_space_adjust` under `tcp_under_memory_pressure`).
        if copied > space {
            let cap = self.recv_buf.capacity();
            let max = self.recv_buffer_limit(ctx.cfg);
            let locked = self.flags.has(Flags::RCVBUF_LOCK);
            if cap < max && !locked && ctx.mem.share().is_none() {
                let (copied, space) = (copied as u64, space.max(1) as u64);
                let mut win = 2 * copied + 16 * u64::from(ctx.cfg.mss);
                let grow = win.saturating_mul(copied - space) / space;
                win = win.saturating_add(grow.saturating_mul(2));
                let target = win.min(max as u64) as usize;
                if target > cap {
                    self.recv_buf.grow(target);
                }
            }
            self.tune.rcv_space = copied.min(u32::MAX as usize) as u32;
        }
        self.tune.rcv_space_seq = copied_seq;
        self.tune.rcv_space_time = now;
    }

    /// The receiver's RTT estimate for [`Self::rcv_space_adjust`], updated
    /// for each data segment (Linux `tcp_rcv_rtt_measure_ts` and
    /// `tcp_rcv_rtt_measure`). With timestamps (RFC 7323 §4, RTTM seen from
    /// the data receiver): a segment's TSecr echoes the TSval of the ACK
    /// that released it, so now - TSecr is a round trip; only the first
    /// full-sized segment per echoed value counts, and samples are smoothed
    /// with gain 1/8. Without: the time from advertising a window until
    /// RCV.NXT passes its right edge (the DRS paper's §3.2 estimate, at
    /// least one RTT), keeping the smallest.
    pub(super) fn rcv_rtt_measure(&mut self, now: Instant, tsecr: Option<u32>, len: usize) {
        if self.flags.has(Flags::TIMESTAMPS) {
            let Some(ecr) = tsecr else {
                return;
            };
            if ecr == 0 || ecr == self.tune.rcv_rtt_tsecr || len < usize::from(self.rcv.mss_seen) {
                return;
            }
            self.tune.rcv_rtt_tsecr = ecr;
            let ms = self.tsval(now).wrapping_sub(ecr);
            if ms < (1 << 22) {
                // Millisecond clock: a sub-millisecond RTT reads as 1 ms.
                self.rcv_rtt_update(ms.max(1) * 1000, false);
            }
            return;
        }
        self.rcv_rtt_measure_window(now);
    }

    /// [`Self::rcv_rtt_measure`] without timestamps. Out of line: its
    /// fields are in `RecvRare`, a line a segment with timestamps does not
    /// otherwise read.
    #[inline(never)]
    fn rcv_rtt_measure_window(&mut self, now: Instant) {
        if let Some(start) = self.rcv_rare.rcv_rtt_time.get() {
            if self.rcv.nxt < self.rcv_rare.rcv_rtt_seq {
                return;
            }
            let us = now.saturating_since(start).as_nanos() / 1000;
            self.rcv_rtt_update(us.clamp(1, u64::from(u32::MAX)) as u32, true);
        }
        // The right edge advertised so far (RFC 9293 §3.8.6: never left).
        self.rcv_rare.rcv_rtt_seq = self.rcv.adv;
        self.rcv_rare.rcv_rtt_time = Deadline::at(now);
    }

    /// Linux `tcp_rcv_rtt_update`: a window-based sample is an upper bound,
    /// so the minimum is kept; a timestamp sample is smoothed (gain 1/8, as
    /// RFC 6298 §2.3 smooths SRTT).
    pub(super) fn rcv_rtt_update(&mut self, sample_us: u32, window_based: bool) {
        let cur = self.tune.rcv_rtt_us;
        self.tune.rcv_rtt_us = if cur == 0 {
            sample_us
        } else if window_based {
            cur.min(sample_us)
        } else {
            (cur - cur / 8 + sample_us / 8).max(1)
        };
    }

    /// Send buffer growth (Linux `tcp_sndbuf_expand`, checked where Linux's
    /// `tcp_new_space` / `tcp_should_expand_sndbuf` check it: an ACK freed
    /// space and the application had found the buffer full). The buffer
    /// holds the flight plus what is queued behind it; if it is smaller than
    /// what the congestion and peer windows allow in flight, it is what
    /// limits the sender, and it grows to twice the congestion window (at
    /// least ten segments): one window in flight awaiting its ACKs plus one
    /// queued to follow them, which also covers fast recovery, where the
    /// unacknowledged flight stays while new data goes out (RFC 5681 §3.2,
    /// RFC 6582 §3.2), and slow start doubling the window in the next RTT.
    /// Never past twice the largest window the peer offered (more could not
    /// be sent) nor [`Config::send_buffer_max`].
    pub(super) fn sndbuf_expand(&mut self, cfg: &Config) {
        let cap = self.send_buf.capacity();
        if cap >= cfg.send_buffer_max || self.flags.has(Flags::SNDBUF_LOCK) {
            return;
        }
        let cwnd = self.cc.window();
        if cap >= cwnd.min(self.snd.wnd as usize) {
            // The congestion or peer window limits, not the buffer.
            return;
        }
        let segs = cwnd.max(INIT_SEGMENTS * self.eff_mss());
        let target = segs
            .min(self.snd.max_wnd as usize)
            .saturating_mul(2)
            .min(cfg.send_buffer_max);
        if target > cap {
            self.send_buf.grow(target);
        }
    }

    /// Makes room in the receive ring for everything up to the advertised
    /// right edge. Window-scale rounding (RFC 7323 §2.4: a window that is
    /// not a multiple of 2^shift is rounded up, so that the edge does not
    /// move left) can leave the edge up to 2^shift - 1 bytes past what the
    /// buffer holds (`advertise_window` rounds up no further). If those
    /// bytes were not accepted, a full buffer would keep offering a small
    /// window that takes nothing: the sender sees no zero window,
    /// retransmits into it and eventually times out instead of probing
    /// (RFC 9293 §3.8.6.1). So the ring gets headroom beyond its capacity
    /// (which alone sizes the advertised window, so the headroom does not
    /// attract more data), in steps of 1/16 of the capacity, at most the
    /// capacity or one unit of the scale, whichever is more (a buffer set
    /// below one unit still takes the one unit it offers); data past that
    /// is trimmed, counted as `recv_buffer_overrun`.
    pub(super) fn cover_advertised_window(&mut self) {
        let cap = self.recv_buf.capacity();
        let need = self.recv_buf.len() + self.rcv_wnd();
        if need <= cap + self.recv_buf.headroom() {
            return;
        }
        let step = (cap / 16).max(1);
        let unit = 1usize << self.rcv.wscale;
        let headroom = (need - cap).next_multiple_of(step).min(cap.max(unit));
        self.recv_buf.resize(cap, headroom);
    }

    /// Free receive space this connection may offer: the buffer's, within
    /// what the stack's receive memory leaves it (see [`RecvMemory`]). A
    /// window already offered is never taken back (it is counted already),
    /// so under pressure a connection keeps what it promised and is offered
    /// no more than its share.
    #[inline]
    pub(super) fn offerable(&self, mem: RecvMemory) -> usize {
        self.offerable_from(self.holdable(mem))
    }

    /// [`Self::offerable`] given [`Self::holdable`]: that, or the window
    /// offered (within the buffer) if more, since it is never taken back
    /// (`RecvMemory::limit` of what is held and promised, unfolded).
    #[inline]
    fn offerable_from(&self, holdable: usize) -> usize {
        holdable.max(self.recv_buf.window().min(self.rcv_wnd()))
    }

    /// What the buffer and the receive memory could hold past the queued
    /// bytes, the window already offered aside (unlike [`Self::offerable`],
    /// which never takes an offer back): the bound on rounding the
    /// window up to the scale's unit.
    #[inline]
    fn holdable(&self, mem: RecvMemory) -> usize {
        let queued = self.recv_buf.len();
        self.recv_buf
            .window()
            .min(mem.limit(0, self.rcv.wscale).saturating_sub(queued))
    }

    /// The window to advertise, keeping the right edge from moving left
    /// (RFC 9293 §3.8.6) but by less than one unit of the window scale
    /// once the buffer or the receive memory is full (RFC 7323 §2.4),
    /// applying receiver SWS avoidance (RFC 9293
    /// §3.8.6.2.2) and staying within the stack's receive memory. Updates
    /// `rcv.adv`; flags the connection when memory, not its buffer, held
    /// the window back (the stack sends it a window update once memory
    /// frees).
    pub(super) fn advertise_window(&mut self, mem: RecvMemory, stats: &mut Stats) -> u16 {
        if self.flags.has(Flags::PEER_FIN) {
            return self.closed_window();
        }
        let (field, held_back) = self.window_field(mem);
        let shift = self.rcv.wscale;
        let edge = self.rcv.nxt + (field << shift);
        // RFC 7323 Appendix F: what any ACK offered stays in the window
        // (`rcv.adv` is the largest edge offered); the flag says the peer
        // was offered less.
        if edge >= self.rcv.adv {
            self.rcv.adv = edge;
            self.flags.clear(Flags::RETRACTED);
        } else {
            self.flags.set(Flags::RETRACTED);
            stats.window_retractions += 1;
        }
        // Only a window under one full segment can stall the peer: a
        // larger one draws data, and the ACKs for it carry the window as
        // memory frees. So only such a connection waits for memory (and
        // gets a window update when it frees); were every held-back one
        // to wait, each connection closing would send dozens of window
        // updates that change nothing (20,000 closing connections made
        // 3.5 million of them in `sim_idle`).
        //
        // The floor as the scaled field carries it (rounded down) counts
        // as the floor: 1,460 bytes at a shift of 7 go out as 1,408, and
        // such a connection, flagged, drew a window update each time
        // memory freed anywhere (an extra segment from every client
        // whose peer's FIN arrived while its own was in flight).
        //
        // A parked connection waits for no memory: its window reopens to
        // the floor as the application reads, and past it once it has
        // shown it needs more (`RecvMemory::of`).
        let floor = (mem.floor >> shift << shift).max(1);
        if held_back && self.offered_wnd() < floor && !self.flags.has(Flags::RCV_PARKED) {
            self.flags.set(Flags::MEM_LIMITED);
        } else {
            self.flags.clear(Flags::MEM_LIMITED);
        }
        field as u16
    }

    /// The window field [`Self::advertise_window`] sends now (the scaled
    /// window, RFC 7323 §2.3), and whether memory, not the buffer, held
    /// the window back. No side effect: window updates ask it too.
    #[inline]
    pub(super) fn window_field(&self, mem: RecvMemory) -> (usize, bool) {
        let cap = self.recv_buf.capacity();
        let holdable = self.holdable(mem);
        let free = self.offerable_from(holdable);
        let current = self.rcv.adv.saturating_sub(self.rcv.nxt);
        let held_back = free + cap.min(self.eff_mss()) <= self.recv_buf.window();
        let threshold = (cap / 2).min(self.eff_mss()).max(1);
        let max_wnd = 0xffffusize << self.rcv.wscale;
        let mut wnd = if free >= current + threshold {
            free
        } else {
            current
        };
        wnd = wnd.min(max_wnd);
        let shift = self.rcv.wscale;
        let mut field = wnd >> shift;
        // Round up if truncation would pull the right edge left (RFC 7323
        // §2.4), but only while the truncated window is less than what
        // the buffer and the receive memory can hold (`holdable`): the
        // rounded edge then passes it by less than one unit of 2^shift
        // bytes (the ring's headroom takes them; the memory counts them).
        // Past that the field is truncated, a retraction of less than one
        // unit that RFC 7323 §2.4 and Appendix F allow; `rcv.adv` keeps the
        // edge offered, so bytes sent up to it are still taken. Rounding
        // up unconditionally kept a full buffer's window open for ever
        // against a peer sending less than 2^shift bytes between ACKs:
        // each ACK moved the edge right by what had arrived, the ring
        // filled its headroom, then bytes inside the offered window were
        // dropped, and the receive memory's budget was passed ninefold.
        //
        // A window under one unit (the one segment every connection may
        // be offered at a shift of 11 or more: 1,460 >> 11 is 0) rounds
        // up as well, or that floor would go out as a zero window and the
        // connection would wait for memory it was promised not to need.
        let truncated = field << shift;
        if (truncated < current || field == 0 && wnd > 0) && truncated < holdable {
            field += 1;
        }
        (field.min(0xffff), held_back)
    }

    /// The window the peer goes by, which window updates are measured
    /// from: the receive window, or after a retraction
    /// (`Flags::RETRACTED`) the receive window truncated to the scale's
    /// unit, which is what the last ACK offered when nothing arrived
    /// since (were something to, an ACK with a new window is owed
    /// anyway). The receive window itself (`rcv_wnd`) still bounds what
    /// is taken.
    pub(super) fn offered_wnd(&self) -> usize {
        let wnd = self.rcv_wnd();
        if self.flags.has(Flags::RETRACTED) {
            wnd >> self.rcv.wscale << self.rcv.wscale
        } else {
            wnd
        }
    }

    /// After the peer's FIN: the window field that keeps offering the
    /// edge advertised when it arrived (`RecvRare::fin_mark`), rounded
    /// up as `advertise_window` rounds. It neither grows (nothing more can
    /// arrive) nor commits memory, so no connection waits for memory then.
    #[cold]
    fn closed_window(&mut self) -> u16 {
        self.flags.clear(Flags::MEM_LIMITED);
        let shift = self.rcv.wscale;
        let wnd = self.rcv_rare.fin_mark.saturating_sub(self.rcv.nxt);
        wnd.div_ceil(1 << shift).min(0xffff) as u16
    }

    /// Current receive window: what we advertised beyond RCV.NXT (nothing
    /// once the peer's FIN arrived: see `RecvRare::fin_mark`).
    pub(super) fn rcv_wnd(&self) -> usize {
        self.rcv.adv.saturating_sub(self.rcv.nxt)
    }
}
