//! Header prediction (Jacobson, "4BSD header prediction", 1990; the fast
//! path of BSD `tcp_input` and Linux `tcp_rcv_established`): the segment a
//! receiving connection sees most is the next in-order data segment that
//! acknowledges nothing new and leaves the window alone. Recognised by a
//! handful of comparisons, it skips the general RFC 9293 §3.10.7.4 checks,
//! which for such a segment all come out the same way. Anything else (a
//! flag beyond ACK/PSH, a gap, new or duplicate acknowledgments, SACK
//! blocks, a window change, recovery, a stale or missing timestamp, data
//! beyond the window) takes the general path, which stays the reference.

use super::*;

impl Connection {
    /// Processes `seg` if it is the predicted in-order data segment and
    /// returns true; returns false, having changed nothing, otherwise.
    #[inline]
    pub(super) fn on_segment_predicted(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &TcpRepr,
        payload: &[u8],
    ) -> bool {
        const NOT_PREDICTED: u64 = Flags::APP_CLOSED | Flags::IN_RECOVERY | Flags::PEER_FIN;
        let ts_on = self.flags.has(Flags::TIMESTAMPS);
        let only_ack = seg.flags.0 & !TcpFlags::PSH.0 == TcpFlags::ACK.0;
        let predicted = ctx.cfg.header_prediction
            && self.state == State::Established
            && only_ack
            && SeqNumber(seg.seq) == self.rcv.nxt
            && SeqNumber(seg.ack) == self.snd.una
            // Nothing in flight: no acknowledgment can be new, so neither
            // congestion control nor loss recovery has anything to do.
            && self.snd.una == self.snd.max
            && self.snd.wnd != 0
            && u32::from(seg.window) << self.snd.wscale == self.snd.wnd
            && !self.flags.has(NOT_PREDICTED)
            && seg.options.sack_block_count == 0
            && !self.flags.has(Flags::HOLES)
            && !payload.is_empty()
            && payload.len() <= self.rcv_wnd()
            // RFC 7323 §5.3 R1: a timestamp that is not older than
            // TS.Recent (older ones go to PAWS on the general path).
            && match (ts_on, seg.options.timestamps) {
                (false, _) => true,
                (true, Some((tsval, _))) => (tsval.wrapping_sub(self.ts.recent) as i32) >= 0,
                (true, None) => false,
            };
        if !predicted {
            return false;
        }
        let seq = SeqNumber(seg.seq);
        // What the general path would do with this segment, in its order:
        // TS.Recent (RFC 7323 §4.3), liveness, the window's WL1/WL2 (RFC
        // 9293 §3.10.7.4 fifth; SND.WND itself is unchanged), the text.
        self.update_ts_recent(ctx.now, seg, seq);
        self.timers.last_recv = ctx.now;
        self.keepalive_probes = 0;
        if self.snd.wl1 < seq || (self.snd.wl1 == seq && self.snd.wl2 <= self.snd.una) {
            self.update_send_window(seq, self.snd.una, self.snd.wnd);
        }
        let tsecr = seg.options.timestamps.map(|(_, ecr)| ecr);
        self.receive_data(ctx, seq, payload, tsecr);
        ctx.stats.predicted += 1;
        true
    }
}
