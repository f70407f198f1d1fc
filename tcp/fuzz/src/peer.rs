//! The peer model: what one remote endpoint has sent and received, learned only from the
//! segments it sent and those the stack emitted. Every byte either side sends is a pattern
//! of its stream offset ([`pattern`]), so a retransmission, an overlap or a raw segment at
//! any sequence number carries the same bytes as the original, and what the application
//! reads (or the stack sends) can be checked byte for byte.

use flowlane_tcp::ConnHandle;
use flowlane_wire::TcpRepr;

/// The byte at stream offset `off` of the stream salted `salt`.
fn pattern(salt: u8, off: u32) -> u8 {
    ((off.wrapping_mul(0x9e37_79b1) >> 24) as u8) ^ salt
}

/// Fills `out` with the stream salted `salt` from offset `off`.
pub(crate) fn fill_pattern(salt: u8, off: u32, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = pattern(salt, off.wrapping_add(i as u32));
    }
}

/// The first byte of `got` that is not the stream salted `salt` from offset `off`. Built as
/// a slice comparison, so that it stays cheap under the fuzzer's comparison tracing.
pub(crate) fn pattern_mismatch(salt: u8, off: u32, got: &[u8]) -> Option<usize> {
    let mut want = [0u8; 512];
    for (c, chunk) in got.chunks(want.len()).enumerate() {
        let start = c * want.len();
        let want = &mut want[..chunk.len()];
        fill_pattern(salt, off.wrapping_add(start as u32), want);
        if chunk != &*want {
            let k = chunk.iter().zip(want.iter()).position(|(a, b)| a != b);
            return Some(start + k.unwrap_or(0));
        }
    }
    None
}

/// `a` after `b` in sequence space (RFC 9293 §3.4).
pub(crate) fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The peer connected to the stack's listener.
    Passive,
    /// The stack connected to the peer (`Stack::connect`).
    Active,
}

/// One remote endpoint.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) role: Role,
    /// Our (the stack's) port.
    pub(crate) local_port: u16,
    /// The peer's port.
    pub(crate) remote_port: u16,
    /// The peer's initial sequence number (for an active open, learned from the SYN-ACK the
    /// peer sent).
    pub(crate) irs: u32,
    /// The salt of the peer's stream ([`pattern`]) and of the application's stream to it.
    pub(crate) peer_salt: u8,
    pub(crate) app_salt: u8,
    /// The peer sent its SYN (or SYN-ACK).
    pub(crate) syn_sent: bool,
    /// Offset (from IRS + 1) of the peer's next new byte, and of the furthest end (FIN
    /// included) any segment on this tuple reached.
    pub(crate) snd_nxt: u32,
    pub(crate) snd_max: u32,
    /// Offset of the first FIN any segment on the tuple carried (the model's or a raw one),
    /// and whether a later one carried another.
    pub(crate) fin_at: Option<u32>,
    pub(crate) fin_mixed: bool,
    /// The stack's ISS, from its SYN or SYN-ACK.
    pub(crate) iss: Option<u32>,
    /// The stack's options on that SYN: window scale, timestamps, SACK.
    pub(crate) stack_wscale: Option<u8>,
    pub(crate) stack_ts: bool,
    pub(crate) stack_sack: bool,
    /// Next stack byte the peer expects (sequence number), once the SYN was seen.
    pub(crate) rcv_nxt: Option<u32>,
    /// Highest sequence number the stack sent (end of data or FIN).
    pub(crate) stack_max: Option<u32>,
    /// Latest TSval the stack sent.
    pub(crate) ts_recent: u32,
    /// The application's handle, once the stack reported the connection (and until it
    /// reported it closed).
    pub(crate) handle: Option<ConnHandle>,
    /// The connection was reported and then closed: the model checks nothing more of the
    /// stack's side of this tuple.
    pub(crate) dead: bool,
    /// Bytes the application queued ([`pattern`] of `app_salt`) and read.
    pub(crate) written: u64,
    pub(crate) read: u64,
    /// The application shut down writing (close or shutdown_write).
    pub(crate) app_shut: bool,
    /// Latest ACK and right window edge the stack sent (RCV.NXT, RCV.NXT + RCV.WND).
    pub(crate) last_ack: Option<u32>,
    pub(crate) right_edge: Option<u32>,
    /// The window scale in use is not known to the model: the peer completed the
    /// handshake without the timestamps it negotiated, and a SYN cookie keeps the window
    /// scale only in them (RFC 4987 §3.6; Linux then turns the options off as well).
    pub(crate) wscale_unknown: bool,
    /// The stack answered the peer's SYN with a SYN cookie (`Stats::syn_cookies_sent` rose).
    pub(crate) cookie: bool,
}

impl Peer {
    pub(crate) fn new(role: Role, local_port: u16, remote_port: u16, irs: u32, salt: u8) -> Peer {
        Peer {
            role,
            local_port,
            remote_port,
            irs,
            peer_salt: salt,
            app_salt: salt ^ 0x5a,
            syn_sent: false,
            snd_nxt: 0,
            snd_max: 0,
            fin_at: None,
            fin_mixed: false,
            iss: None,
            stack_wscale: None,
            stack_ts: false,
            stack_sack: false,
            rcv_nxt: None,
            stack_max: None,
            ts_recent: 0,
            handle: None,
            dead: false,
            written: 0,
            read: 0,
            app_shut: false,
            last_ack: None,
            right_edge: None,
            wscale_unknown: false,
            cookie: false,
        }
    }

    /// The connection is established in the application's view.
    pub(crate) fn live(&self) -> bool {
        self.handle.is_some() && !self.dead
    }

    /// Both SYNs were exchanged in the model (a raw segment to the tuple then cannot
    /// choose another initial sequence number for the stack).
    pub(crate) fn synchronized(&self) -> bool {
        self.live() && self.syn_sent && (self.role == Role::Passive || self.iss.is_some())
    }

    /// Sequence number of the peer's stream offset `off`.
    pub(crate) fn seq_of(&self, off: u32) -> u32 {
        self.irs.wrapping_add(1).wrapping_add(off)
    }

    /// Stream offset of the peer's sequence number `seq`.
    pub(crate) fn off_of(&self, seq: u32) -> u32 {
        seq.wrapping_sub(self.irs.wrapping_add(1))
    }

    /// Notes that a segment on this tuple covered sequence numbers `start..end` (FIN
    /// included): the stack may acknowledge up to there if it could take it (it starts
    /// at most 16 MiB past what was sent before, more than any window).
    pub(crate) fn note_sent(&mut self, start: u32, end: u32) {
        let (s, e) = (self.off_of(start), self.off_of(end));
        if (s.wrapping_sub(self.snd_max) as i32) <= 1 << 24 && seq_gt(e, self.snd_max) {
            self.snd_max = e;
        }
    }

    /// Notes a FIN sent at stream offset `off`.
    pub(crate) fn note_fin(&mut self, off: u32) {
        match self.fin_at {
            None => self.fin_at = Some(off),
            Some(f) if f != off => self.fin_mixed = true,
            Some(_) => {}
        }
    }

    /// What the peer learns from a segment the stack sent it (`lost`: it never arrived, but
    /// the stack sent it, so it counts for what the stack may later retransmit).
    pub(crate) fn on_stack_segment(&mut self, r: &TcpRepr, payload_len: usize, lost: bool) {
        let f = r.flags;
        if f.syn() {
            if self.iss != Some(r.seq) {
                self.iss = Some(r.seq);
                self.rcv_nxt = None;
            }
            self.stack_wscale = r.options.window_scale;
            self.stack_ts = r.options.timestamps.is_some();
            self.stack_sack = r.options.sack_permitted;
        }
        let end = r
            .seq
            .wrapping_add(payload_len as u32)
            .wrapping_add(u32::from(f.syn()) + u32::from(f.fin()));
        if !f.rst() && self.stack_max.is_none_or(|m| seq_gt(end, m)) {
            self.stack_max = Some(end);
        }
        if lost {
            return;
        }
        if let Some((tsval, _)) = r.options.timestamps {
            self.ts_recent = tsval;
        }
        if f.syn() && self.rcv_nxt.is_none() {
            self.rcv_nxt = Some(r.seq.wrapping_add(1));
            return;
        }
        if let Some(nxt) = self.rcv_nxt {
            let start = r.seq;
            if !seq_gt(start, nxt) && seq_gt(end, nxt) {
                self.rcv_nxt = Some(end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_mismatch_finds_the_first_wrong_byte() {
        let mut v = vec![0; 2000];
        fill_pattern(7, u32::MAX - 1000, &mut v);
        assert_eq!(pattern_mismatch(7, u32::MAX - 1000, &v), None);
        assert_eq!(pattern_mismatch(7, u32::MAX - 1000, &v[..0]), None);
        // One byte off, past the first chunk.
        assert_eq!(pattern_mismatch(7, u32::MAX - 999, &v[1..]), None);
        v[1500] ^= 1;
        assert_eq!(pattern_mismatch(7, u32::MAX - 1000, &v), Some(1500));
        // The same bytes at another offset or salt are wrong at once.
        assert_eq!(pattern_mismatch(7, u32::MAX - 1001, &v), Some(0));
        assert_eq!(pattern_mismatch(8, u32::MAX - 1000, &v), Some(0));
    }

    #[test]
    fn sent_ends_move_forward_only_within_reach() {
        let mut p = Peer::new(Role::Passive, 80, 1000, u32::MAX - 10, 0);
        p.note_sent(p.seq_of(0), p.seq_of(100));
        assert_eq!(p.snd_max, 100);
        // An old segment, and one far beyond any window, change nothing.
        p.note_sent(p.seq_of(0), p.seq_of(50));
        p.note_sent(p.seq_of(1 << 30), p.seq_of((1 << 30) + 10));
        assert_eq!(p.snd_max, 100);
        p.note_sent(p.seq_of(5000), p.seq_of(6000));
        assert_eq!(p.snd_max, 6000);
    }
}
