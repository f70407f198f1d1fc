//! ECN on a connection (RFC 3168 §6.1): negotiation in the handshake, the
//! codepoint and the ECE / CWR bits of the segments we send, the CE marks
//! and CWR bits of the segments we receive, and the window reduction an
//! ECE asks for. Every per-segment hook sits behind `Flags::ECN`, so a
//! connection without ECN pays one flag test per segment each way.

use super::*;
use crate::ecn::{Ecn, EcnMode};

/// RFC 3168 §6.1.1: an ECN-setup SYN has both ECE and CWR set.
fn is_ecn_setup_syn(f: TcpFlags) -> bool {
    f.contains(TcpFlags::ECE | TcpFlags::CWR)
}

impl Connection {
    /// RFC 3168 §6.1.1, passive open: ECN is used if this stack accepts
    /// it and `syn` is an ECN-setup SYN; the SYN-ACK then says so (ECE).
    pub(super) fn ecn_negotiate_passive(&mut self, cfg: &Config, syn: &TcpRepr) {
        if cfg.ecn != EcnMode::Off && is_ecn_setup_syn(syn.flags) {
            self.flags.set(Flags::ECN);
        }
    }

    /// RFC 3168 §6.1.1, active open: ECN is used if we asked for it and
    /// `syn_ack` is an ECN-setup SYN-ACK (ECE set, CWR clear: a SYN-ACK
    /// with both is a peer or middlebox reflecting our flags, not an
    /// answer).
    pub(super) fn ecn_negotiate_active(&mut self, cfg: &Config, syn_ack: &TcpRepr) {
        let f = syn_ack.flags;
        if cfg.ecn == EcnMode::On && f.contains(TcpFlags::ECE) && !f.contains(TcpFlags::CWR) {
            self.flags.set(Flags::ECN);
        }
    }

    /// The ECN bits of our SYN (`ack` false) or SYN-ACK (RFC 3168
    /// §6.1.1): ECE and CWR on the first SYN of an active open that asks
    /// for ECN (not on a retransmission: a middlebox may drop ECN-setup
    /// SYNs, RFC 3168 §6.1.1.1, so the retry goes without, as Linux's
    /// `tcp_ecn_fallback`); ECE alone on the SYN-ACK of a connection that
    /// negotiated it. SYNs and SYN-ACKs are always Not-ECT.
    pub(super) fn ecn_syn_flags(&self, cfg: &Config, ack: bool) -> TcpFlags {
        if ack {
            if self.flags.has(Flags::ECN) {
                return TcpFlags::ECE;
            }
        } else if cfg.ecn == EcnMode::On && self.snd.max == self.snd_rare.iss {
            return TcpFlags::ECE | TcpFlags::CWR;
        }
        TcpFlags::empty()
    }

    /// The ECN side of a segment of an ECN connection about to go out at
    /// `seq` with `len` bytes of data and `flags`; returns the flags to
    /// send. New data inside the peer's window goes out ECT(0); pure ACKs
    /// (RFC 3168 §6.1.4), retransmissions (§6.1.5) and probes into a zero
    /// window (§6.1.6) go Not-ECT. The first new data segment after a
    /// window reduction carries CWR (§6.1.2); every segment carries ECE
    /// while a CE mark waits for the peer's CWR (§6.1.3).
    #[inline]
    pub(super) fn ecn_segment_flags(
        &mut self,
        mut flags: TcpFlags,
        seq: SeqNumber,
        len: usize,
    ) -> TcpFlags {
        let new_data =
            len > 0 && seq >= self.snd.max && seq + len <= self.snd.una + self.snd.wnd as usize;
        if new_data {
            self.flags.set(Flags::ECT_SENT);
            if self.flags.has(Flags::ECN_CWR) {
                self.flags.clear(Flags::ECN_CWR);
                flags = flags | TcpFlags::CWR;
            }
        } else {
            self.flags.clear(Flags::ECT_SENT);
        }
        if self.flags.has(Flags::ECN_ECHO) {
            flags = flags | TcpFlags::ECE;
        }
        flags
    }

    /// The IP ECN codepoint of the segment written last.
    #[inline]
    pub(crate) fn sent_ecn(&self) -> Ecn {
        if self.flags.has(Flags::ECT_SENT) {
            Ecn::Ect0
        } else {
            Ecn::NotEct
        }
    }

    /// A segment for a connection that negotiated ECN, which arrived with
    /// the IP codepoint `ecn`: processed as any other, then its ECN
    /// signals taken, but only from a segment inside the receive window
    /// (a blind injection can neither start an echo nor stop one, nor
    /// shrink our window):
    ///
    /// - CWR ends the echo of earlier CE marks (RFC 3168 §6.1.3);
    /// - CE on a data segment starts (or continues) it: every segment we
    ///   send carries ECE until a CWR arrives (§6.1.3), the first at once
    ///   (the sender's window may be small, as Linux's quick ACK);
    /// - ECE on an acceptable ACK is the peer's echo: see
    ///   [`Connection::on_ecn_echo`].
    #[inline(never)]
    pub(super) fn on_segment_ecn(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) {
        let f = seg.flags;
        let seg_len = payload.len() + usize::from(f.fin());
        // As the segment's processing will find it (before it moves
        // RCV.NXT or TS.Recent): a segment PAWS drops carries no mark or
        // echo of this connection's (an old duplicate's ECE reduced the
        // window).
        // Nor one whose text is dropped for its ACK (none, or out of range:
        // RFC 5961 §5, a blind injection's mark must not reduce the peer's
        // window through our echo).
        let in_window = !f.syn()
            && !f.rst()
            && f.ack()
            && self.ack_in_range(SeqNumber(seg.ack))
            && SeqNumber(seg.seq).acceptable(seg_len, self.rcv.nxt, self.rcv_wnd())
            && self.timestamp_drop(ctx.now, seg, f).is_none();
        let una = self.snd.una;
        let flight = self.snd.max - una;
        self.on_segment_plain(ctx, seg, payload);
        // Held until the segment that carried CWR (the first new data
        // after the reduction, at `ecn_high`) is acknowledged: ECEs until
        // then echo marks of the window already answered.
        if self.flags.has(Flags::ECN_HELD) && self.snd.una > self.snd_rare.ecn_high {
            self.flags.clear(Flags::ECN_HELD | Flags::ECN_REDUCED);
        }
        if !in_window || !self.state.is_synchronized() {
            return;
        }
        if f.contains(TcpFlags::CWR) {
            self.flags.clear(Flags::ECN_ECHO);
        }
        if ecn == Ecn::Ce && !payload.is_empty() {
            ctx.stats.ce_received += 1;
            if !self.flags.has(Flags::ECN_ECHO) {
                self.flags.set(Flags::ECN_ECHO | Flags::ACK_NOW);
            }
        }
        let ack = SeqNumber(seg.ack);
        if f.contains(TcpFlags::ECE) && f.ack() && ack >= una && ack <= self.snd.max {
            self.on_ecn_echo(ctx, flight);
        }
    }

    /// RFC 3168 §6.1.2: "When an ECN-Capable TCP sender reduces its
    /// congestion window for any reason (because of a retransmit timeout,
    /// a Fast Retransmit, or in response to an ECN Notification), the TCP
    /// sender sets the CWR flag" on the first new data segment after the
    /// reduction. For the reductions a loss makes: on an ECN connection,
    /// the next new data segment carries CWR (so that a peer echoing marks
    /// of the same window stops), and ECEs for this window reduce it no
    /// further (once per window of data).
    pub(super) fn ecn_on_loss_reduction(&mut self) {
        if self.flags.has(Flags::ECN) {
            self.flags.set(Flags::ECN_CWR | Flags::ECN_HELD);
            self.snd_rare.ecn_high = self.snd.max;
        }
    }

    /// Whether the ACK `seg` may not grow the congestion window: RFC 3168
    /// §6.1.2 treats an ECN-Echo ACK as a congestion loss, and an ACK that
    /// signals congestion grows no window. (Only the echo itself: the
    /// peer echoes until our CWR arrives, so that covers the window the
    /// echo reduced. `Flags::ECN_HELD` is no guide, as a retransmission
    /// timeout sets it too, and slow start must grow after one.)
    #[inline]
    pub(super) fn ecn_holds_cwnd(&self, seg: &TcpRepr) -> bool {
        self.flags.has(Flags::ECN) && seg.flags.contains(TcpFlags::ECE)
    }

    /// RFC 3168 §6.1.2: an ACK echoed a CE mark, with `flight` bytes
    /// outstanding before it. The window is reduced as for a loss, through
    /// the congestion controller, with nothing retransmitted; at most once
    /// per window of data (later echoes are ignored until the ACKs cover
    /// more than what was sent when it was reduced, that is, the segment
    /// that carried CWR); and not at all if a loss
    /// already reduced it for this window (`Flags::RECOVER_HELD`: drops
    /// and CE marks of one window count once). Either way the next new
    /// data segment carries CWR, so that the peer stops echoing.
    fn on_ecn_echo(&mut self, ctx: &mut Ctx<'_>, flight: usize) {
        if self.flags.has(Flags::ECN_HELD) {
            // A loss's reduction already covers this window, and the echo
            // says the network marked it too: that reduction stands,
            // whatever Eifel later finds of the retransmission (Linux
            // likewise forbids the undo after an ECE).
            self.flags.clear(Flags::UNDO);
            self.snd_rare.undo = None;
            return;
        }
        self.flags.set(Flags::ECN_HELD | Flags::ECN_CWR);
        self.snd_rare.ecn_high = self.snd.max;
        if !self.flags.has(Flags::RECOVER_HELD) {
            self.cc.on_ecn_echo(flight);
            self.flags.set(Flags::ECN_REDUCED);
            ctx.stats.ecn_cwnd_reductions += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cc::CongestionControl;
    use crate::time::Instant;
    use crate::{Config, CongestionAlgorithm, EcnMode, Event, Stack};
    use flowlane_wire::tcp::TcpFlags;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    /// RFC 3168 §6.1.2: no ACK that echoes a mark grows the window. A
    /// sends in rounds (B acknowledging each); once A's window has grown,
    /// every ACK of B's is forged with ECE for ten rounds. A's window,
    /// read around each of those ACKs, never grows, while it is reduced
    /// once per window (NewReno, whose growth in congestion avoidance
    /// follows the bytes acknowledged alone: the clock stands still here).
    #[test]
    fn ece_acks_never_grow_the_window() {
        let mut ca = Config::new([1; 16]);
        ca.ecn = EcnMode::On;
        ca.congestion = CongestionAlgorithm::NewReno;
        let mut cb = Config::new([2; 16]);
        cb.ecn = EcnMode::Accept;
        let (mut a, mut b) = (Stack::new(ca), Stack::new(cb));
        let ip_a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let ip_b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let now = Instant::from_millis(5);
        b.listen(SocketAddr::new(ip_b, 80)).unwrap();
        let ha = a
            .connect(
                now,
                SocketAddr::new(ip_a, 10_000),
                SocketAddr::new(ip_b, 80),
            )
            .unwrap();
        let mut buf = [0u8; 2048];
        let data = vec![1u8; 200_000];
        let mut hb = None;
        let (mut acks, mut grown) = (0, 0);
        for round in 0..30 {
            if let Some(hb) = hb {
                let _ = a.send(ha, &data);
                while let Ok(1..) = b.recv(hb, &mut buf) {}
            }
            let forged = (20..30).contains(&round);
            // A's flight, one segment at a time, each answered at once.
            let mut flight = Vec::new();
            while let Some(t) = a.poll_transmit(now, &mut buf) {
                flight.push((t, buf[..t.len].to_vec()));
            }
            for (t, seg) in flight {
                b.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), t.ecn, &seg);
                while let Some(e) = b.poll_event() {
                    if let Event::Accepted { conn, .. } = e {
                        hb = Some(conn);
                    }
                }
                while let Some(t) = b.poll_transmit(now, &mut buf) {
                    if forged {
                        buf[13] |= TcpFlags::ECE.0;
                    }
                    let before = a.connection_mut(ha).cc.window();
                    a.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
                    if forged {
                        acks += 1;
                        grown += usize::from(a.connection_mut(ha).cc.window() > before);
                    }
                }
            }
        }
        assert!(acks > 20, "{acks} ACKs");
        assert!(a.stats().ecn_cwnd_reductions >= 2, "{:?}", a.stats());
        assert_eq!(grown, 0, "of {acks} ECE ACKs, {grown} grew the window");
    }
}
