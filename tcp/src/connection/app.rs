//! The application's calls on a connection: send, receive, shut down, close, abort.

use super::*;
use crate::KeepaliveConfig;

impl Connection {
    /// The application aborted: RST if synchronized (RFC 9293 §3.10.5).
    /// A connection held only for its unread bytes sends none: the peer
    /// is done with it.
    pub(crate) fn abort(&mut self, ctx: &mut Ctx<'_>) {
        if (self.state.is_synchronized() || self.state == State::SynReceived)
            && !self.flags.has(Flags::HELD_FOR_READ)
        {
            self.send_rst(ctx, ResetReason::Aborted);
        }
        self.close_now(CloseReason::Aborted);
    }

    /// RFC 9293 §3.10.4 CLOSE, write side only: queue a FIN after the data.
    pub(crate) fn shutdown_write(&mut self) {
        if self.flags.has(Flags::FIN_QUEUED) {
            return;
        }
        match self.state {
            // RFC 9293 §3.10.4: SYN-SENT: delete the TCB, when nothing is
            // queued to send. With data queued the RFC would fail those
            // sends; the application asked for its data and then a FIN, so
            // both follow the handshake, as in SYN-RECEIVED (a client that
            // writes its request and shuts down before the SYN-ACK).
            State::SynSent if self.send_buf.is_empty() => self.close_now(CloseReason::Normal),
            // RFC 9293 §3.10.4: SYN-RECEIVED: the FIN follows once
            // ESTABLISHED would have been reached.
            State::SynSent | State::SynReceived => self.flags.set(Flags::FIN_QUEUED),
            State::Established => {
                self.flags.set(Flags::FIN_QUEUED);
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.flags.set(Flags::FIN_QUEUED);
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Full close: no more reads either. Unread data makes it an abort
    /// (RFC 1122 §4.2.2.13 / RFC 2525 §2.17).
    pub(crate) fn close(&mut self, ctx: &mut Ctx<'_>) {
        if !self.recv_buf.is_empty() {
            self.abort(ctx);
            return;
        }
        self.flags.set(Flags::APP_CLOSED);
        if self.compactable() {
            self.events |= ev::COMPACT;
        }
        self.shutdown_write();
        // Orphaned in FIN-WAIT-2: wait 2 MSL for the peer's FIN, counted
        // from the first close (calling it again must not push it back).
        if self.state == State::FinWait2 && self.timers_rare.close.is_none() {
            self.timers_rare.close = self.timers.arm(ctx.now + ctx.cfg.msl.saturating_mul(2));
        }
    }

    /// The keepalive this connection runs: the stack's, unless the
    /// application turned it on (the stack's timings, else the default
    /// ones) or off for this connection.
    pub(crate) fn keepalive(&self, cfg: &Config) -> Option<KeepaliveConfig> {
        if self.flags.has(Flags::KEEPALIVE_OFF) {
            None
        } else if self.flags.has(Flags::KEEPALIVE_ON) {
            Some(cfg.keepalive.unwrap_or_default())
        } else {
            cfg.keepalive
        }
    }

    /// Turns keepalive on or off for this connection (as `SO_KEEPALIVE`),
    /// arming or disarming its timer.
    pub(crate) fn set_keepalive(&mut self, ctx: &mut Ctx<'_>, on: bool) {
        if on {
            self.flags.clear(Flags::KEEPALIVE_OFF);
            self.flags.set(Flags::KEEPALIVE_ON);
            if self.timers_rare.keepalive == Deadline::NONE {
                self.arm_keepalive(ctx);
            }
        } else {
            self.flags.clear(Flags::KEEPALIVE_ON);
            self.flags.set(Flags::KEEPALIVE_OFF);
            self.timers_rare.keepalive = Deadline::NONE;
            self.keepalive_probes = 0;
        }
    }

    /// The application fixes the send buffer at `bytes` (Linux's
    /// `SO_SNDBUF`, without its doubling for overhead: these are payload
    /// bytes): at least one segment, at most the stack's largest
    /// ([`Config::send_buffer_max`]), no longer auto-tuned. Bytes queued
    /// past a smaller size stay queued; writes wait until they drain.
    pub(crate) fn set_send_buffer(&mut self, cfg: &Config, bytes: usize) {
        let max = cfg.send_buffer_max.max(cfg.send_buffer);
        let bytes = bytes.clamp(self.eff_mss().max(1), max.max(1));
        self.flags.set(Flags::SNDBUF_LOCK);
        self.send_buf.set_capacity(bytes);
        if self.room_to_wake_writer() && self.flags.has(Flags::WRITABLE_WANTED) {
            self.flags.clear(Flags::WRITABLE_WANTED);
            self.events |= ev::WRITABLE;
        }
    }

    /// The application fixes the receive buffer at `bytes` (Linux's
    /// `SO_RCVBUF`, in payload bytes): at least one segment, at most the
    /// stack's largest ([`Config::recv_buffer_max`]), no longer
    /// auto-tuned. The window already offered is never taken back (RFC
    /// 9293 §3.8.6): a smaller buffer keeps room for it as headroom and
    /// offers less as the application reads; a larger one opens the
    /// window at once (a window update goes out).
    pub(crate) fn set_recv_buffer(&mut self, cfg: &Config, bytes: usize) {
        let max = cfg.recv_buffer_max.max(cfg.recv_buffer);
        let bytes = bytes.clamp(usize::from(cfg.mss).max(1), max.max(1));
        self.flags.set(Flags::RCVBUF_LOCK);
        let old = self.recv_buf.capacity();
        let promised = self.recv_buf.len() + self.rcv_wnd();
        self.recv_buf.set_capacity(bytes);
        self.recv_buf.resize(bytes, promised.saturating_sub(bytes));
        if bytes > old && self.state.is_synchronized() {
            self.flags.set(Flags::ACK_NOW);
        }
    }

    pub(crate) fn set_nodelay(&mut self, on: bool) {
        if on {
            self.flags.set(Flags::NODELAY);
        } else {
            self.flags.clear(Flags::NODELAY);
        }
    }

    /// Switches the connection's congestion control algorithm (the window
    /// carries over).
    pub(crate) fn set_congestion(&mut self, alg: crate::CongestionAlgorithm) {
        self.cc.set_algorithm(alg);
    }

    /// Queues application data.
    pub(crate) fn send(&mut self, ctx: &mut Ctx<'_>, data: &[u8]) -> Result<usize, crate::Error> {
        self.check_writable()?;
        // The stack's send memory (`Config::send_memory`), shared by every
        // connection: when it, not this buffer, cuts the write short, the
        // connection waits for memory (`Stack::send` lists it).
        let left = ctx.cfg.send_memory.saturating_sub(ctx.pool.send_queued());
        let memory_short = left < data.len() && left < self.send_buf.window();
        let n = self
            .send_buf
            .enqueue_slice(ctx.pool, &data[..data.len().min(left)]);
        ctx.pool.queued_to_send(n);
        if n > 0 {
            self.flags.set(Flags::SEND_QUEUED);
        }
        if n < data.len() {
            self.flags.set(Flags::WRITABLE_WANTED);
        }
        if memory_short {
            ctx.stats.send_memory_waits += 1;
            self.flags.set(Flags::SEND_MEMORY_WAIT);
        }
        if n == 0 && !data.is_empty() {
            return Err(crate::Error::WouldBlock);
        }
        Ok(n)
    }

    /// Whether the application may still queue data (RFC 9293 §3.10.2:
    /// SEND is valid until the application closed its side).
    #[inline]
    fn check_writable(&self) -> Result<(), crate::Error> {
        if self.flags.has(Flags::FIN_QUEUED)
            || !matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return Err(crate::Error::InvalidState);
        }
        Ok(())
    }

    /// Whether the send buffer has room enough to wake a writer that
    /// waits for it: free space at least half of what is still queued (a
    /// third of the buffer when it was full; Linux's
    /// `sk_stream_is_writeable`, what `poll` reports as `POLLOUT`). Woken
    /// as soon as a byte is free, a bulk writer would queue a segment or
    /// two per ACK and pay a call's fixed cost for each.
    #[inline]
    pub(super) fn room_to_wake_writer(&self) -> bool {
        let free = self.send_buf.window();
        free > 0 && free >= self.send_buf.len() / 2
    }

    /// The application wants a `Writable` event once send space frees,
    /// without queueing bytes: the wish a [`Self::send`] that could not
    /// queue everything records (with it, the send buffer grows with the
    /// window while the application keeps it full). With room enough now
    /// ([`Self::room_to_wake_writer`]), the event is raised at once.
    pub(crate) fn want_writable(&mut self) -> Result<(), crate::Error> {
        self.check_writable()?;
        if self.room_to_wake_writer() {
            self.events |= ev::WRITABLE;
        } else {
            self.flags.set(Flags::WRITABLE_WANTED);
        }
        Ok(())
    }

    /// Reads in-order data. `Ok(0)` only at the end of the stream: an
    /// empty `out` with bytes waiting (or none yet) is `WouldBlock`
    /// (`Net::recv`'s contract, the same on every backend).
    pub(crate) fn recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        frames: &dyn FrameStore,
        out: &mut [u8],
    ) -> Result<usize, crate::Error> {
        self.flags.clear(Flags::READABLE_NOTIFIED);
        let n = self.recv_buf.dequeue_slice(ctx.pool, ctx.lent, frames, out);
        if n == 0 {
            return if self.at_eof() {
                Ok(0)
            } else {
                Err(crate::Error::WouldBlock)
            };
        }
        self.after_read(ctx);
        Ok(n)
    }

    /// Zero-copy read: drop `n` bytes that were read through `peek`.
    pub(crate) fn consume(&mut self, ctx: &mut Ctx<'_>, n: usize) -> usize {
        self.flags.clear(Flags::READABLE_NOTIFIED);
        let n = self.recv_buf.dequeue(ctx.pool, ctx.lent, n);
        if n > 0 {
            self.after_read(ctx);
        }
        n
    }

    /// Whether the peer closed and everything was read.
    pub(crate) fn at_eof(&self) -> bool {
        self.flags.has(Flags::PEER_FIN) && self.recv_buf.is_empty()
    }

    /// Window update after the application freed receive space: send one if
    /// the right edge can move by a useful amount (RFC 9293 §3.8.6.2.2,
    /// receiver-side SWS avoidance) and the peer may be running short.
    /// A connection held only for its unread bytes (in a state that
    /// receives nothing) goes once they are read.
    pub(super) fn after_read(&mut self, ctx: &mut Ctx<'_>) {
        if !self.state.can_receive() {
            if self.flags.has(Flags::HELD_FOR_READ) && self.recv_buf.is_empty() {
                self.close_now(CloseReason::Normal);
            }
            return;
        }
        self.rcv_space_adjust(ctx);
        if self.window_update_due(ctx.mem).is_some() {
            self.flags.set(Flags::ACK_NOW);
        }
    }

    /// How far the right edge can move, if by a useful amount (RFC 9293
    /// §3.8.6.2.2: a segment or half the buffer) while the peer may be
    /// running short (half the buffer or less left to it).
    #[inline]
    fn window_update_due(&self, mem: RecvMemory) -> Option<usize> {
        let cap = self.recv_buf.capacity();
        let advertised = self.offered_wnd();
        let mut free = self.offerable(mem);
        if self.flags.has(Flags::RETRACTED) {
            free = free.min(self.retracted_offer(mem));
        }
        let threshold = (cap / 2).min(self.eff_mss()).max(1);
        (free >= advertised + threshold && advertised <= cap / 2).then(|| free - advertised)
    }

    /// After a retraction the peer goes by less than was promised: an
    /// update opens only what the field it would carry offers (the
    /// promise's rest may be under one unit of the window scale). Out of
    /// line: a read's test stays small.
    #[cold]
    #[inline(never)]
    fn retracted_offer(&self, mem: RecvMemory) -> usize {
        self.window_field(mem).0 << self.rcv.wscale
    }

    /// The stack's receive memory freed up after a window was held back
    /// for want of it: owe the peer a window update if one is due now.
    /// Returns the bytes by which that update will open the window (the
    /// memory it is about to promise).
    pub(crate) fn on_memory_freed(&mut self, mem: RecvMemory) -> Option<usize> {
        if !self.flags.has(Flags::MEM_LIMITED) || !self.state.can_receive() {
            return None;
        }
        let opens = self.window_update_due(mem)?;
        self.flags.set(Flags::ACK_NOW);
        Some(opens)
    }
}
