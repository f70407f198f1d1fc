//! Packetization-layer path MTU discovery (RFC 4821; RFC 8899 §5 in
//! spirit; Linux `tcp_mtu_probing`): black-hole detection lowers the MSS
//! when full-sized segments keep timing out (RFC 4821 §7.3), and a search
//! probes upward with one larger segment at a time (§7.4-§7.7). The
//! search's state: search_low is the MTU of `SendState::mss` itself (what
//! is known to pass), search_high is `SendRare::mtu_high`; a probe in
//! flight is `Flags::MTU_PROBE_OUT` with `SendRare::mtu_probe` and
//! `mtu_probe_seq`. Everything here runs on timeouts, on the ACK of a
//! probe, on loss and from one flag test on the send path; a connection
//! that does not search pays nothing per segment.

use super::*;
use crate::mtu_probing::MtuProbing;
use core::ops::ControlFlow::{self, Break, Continue};

/// The smallest path MTU an IPv4 connection is lowered to: Linux's
/// `min_pmtu` (RFC 1191 §3 allows 68, which no real path has and an
/// attacker would love).
pub(super) const MIN_PMTU_V4: u16 = 552;
/// IPv6's minimum link MTU: no connection goes below it (RFC 8201 §4,
/// RFC 8200 §5).
pub(super) const MIN_PMTU_V6: u16 = 1280;
/// Consecutive retransmission timeouts after which the segments are taken
/// to be too big for the path: beyond Linux's `tcp_retries1` (3), when
/// three retransmissions went unanswered.
const BLACK_HOLE_TIMEOUTS: u8 = 3;
/// The congestion window, in segments, below which no probe is sent
/// (Linux `tcp_mtu_probe`: 11): a lost probe must not cost a small window
/// its only segments.
const PROBE_MIN_CWND_SEGMENTS: usize = 11;
/// Segments of data that must follow a probe (Linux: reordering + 1), so
/// that its loss shows as duplicate ACKs or SACK blocks rather than a
/// timeout.
const PROBE_TRAILING_SEGMENTS: usize = 4;

/// `now` in seconds, in the 16 bits `TimerState::mtu_settled` keeps.
fn secs16(now: Instant) -> u16 {
    (now.as_millis() / 1000) as u16
}

impl Connection {
    /// IP and TCP header bytes beside each data segment's payload: the
    /// family's fixed IP header, the fixed TCP header and the timestamp
    /// option when negotiated (what `SendState::mss` already leaves out).
    pub(super) fn mtu_overhead(&self) -> u16 {
        let ip = if self.tuple.is_ipv6() { 40 } else { 20 };
        let ts = if self.flags.has(Flags::TIMESTAMPS) {
            TS_OPTION_LEN
        } else {
            0
        };
        ip + 20 + ts
    }

    /// The smallest path MTU this connection assumes (552 for IPv4, 1 280
    /// for IPv6).
    pub(super) fn mtu_floor(&self) -> u16 {
        if self.tuple.is_ipv6() {
            MIN_PMTU_V6
        } else {
            MIN_PMTU_V4
        }
    }

    /// The path MTU the current MSS fills: RFC 4821 §7.2's search_low.
    pub(super) fn current_mtu(&self) -> u16 {
        self.snd.mss + self.mtu_overhead()
    }

    /// Sets the send MSS (payload bytes per segment), congestion control's
    /// SMSS with it.
    pub(super) fn set_mss(&mut self, mss: u16) {
        self.snd.mss = mss;
        self.cc.set_mss(usize::from(mss));
    }

    /// RFC 4821 §7.2: the MTU of `Config::mtu_probe_base_mss`, where a
    /// black hole first puts the connection and an `Always` search starts.
    fn base_mtu(&self, cfg: &Config) -> u16 {
        let ip: u16 = if self.tuple.is_ipv6() { 40 } else { 20 };
        cfg.mtu_probe_base_mss
            .saturating_add(ip + 20)
            .max(self.mtu_floor())
    }

    /// At the handshake, once the MSS is known: the search range's top is
    /// what the peer's MSS and ours allow (probes never exceed it), and an
    /// `Always` connection starts at the base MSS and searches upward.
    pub(super) fn mtu_search_init(&mut self, cfg: &Config) {
        let max = self.current_mtu();
        self.snd_rare.mtu_max = max;
        self.snd_rare.mtu_high = max;
        if cfg.mtu_probing == MtuProbing::Always {
            self.flags.set(Flags::MTU_SEARCH);
            let base = self.base_mtu(cfg);
            if base < max {
                self.set_mss(base - self.mtu_overhead());
            }
        }
    }

    /// Whether the search range is narrower than the threshold (RFC 4821
    /// §7.2).
    fn mtu_search_done(&self, cfg: &Config) -> bool {
        self.snd_rare.mtu_high < self.current_mtu().saturating_add(cfg.mtu_probe_threshold)
    }

    /// Notes when the search finished, for the re-search interval.
    fn mtu_settle_if_done(&mut self, cfg: &Config, now: Instant) {
        if self.mtu_search_done(cfg) {
            self.timers_rare.mtu_settled = secs16(now);
        }
    }

    /// A path MTU of `mtu` or more does not pass (a lost probe, or a
    /// believed ICMP message): RFC 4821 §7.6.2 search_high.
    pub(super) fn lower_mtu_high(&mut self, cfg: &Config, now: Instant, mtu: u16) {
        if mtu < self.snd_rare.mtu_high {
            self.snd_rare.mtu_high = mtu;
            self.mtu_settle_if_done(cfg, now);
        }
    }

    /// RFC 4821 §7.3 black-hole detection, on a retransmission timeout:
    /// after `BLACK_HOLE_TIMEOUTS` in a row, the segments are taken to be
    /// too big for the path. The first time the MSS falls to the base MSS
    /// and probing starts (Linux `tcp_mtu_probing()`); each later timeout
    /// halves it, never below the family's minimum path. Also judges a
    /// probe in flight: lost if SND.UNA is at it.
    pub(super) fn mtu_on_retransmit_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.flags.has(Flags::MTU_PROBE_OUT) {
            if self.snd_rare.mtu_probe != 0 && self.snd.una >= self.snd_rare.mtu_probe_seq {
                self.mtu_probe_failed(ctx);
            }
            self.flags.clear(Flags::MTU_PROBE_OUT);
            self.snd_rare.mtu_probe = 0;
        }
        if ctx.cfg.mtu_probing == MtuProbing::Off
            || self.timers_rare.retransmits <= BLACK_HOLE_TIMEOUTS
        {
            return;
        }
        let over = self.mtu_overhead();
        let base = self.base_mtu(ctx.cfg);
        let target = if self.flags.has(Flags::MTU_SEARCH) {
            base.min(over + self.snd.mss / 2)
        } else {
            self.flags.set(Flags::MTU_SEARCH);
            base
        }
        .max(self.mtu_floor());
        if target < self.current_mtu() {
            self.set_mss(target - over);
            ctx.stats.mtu_black_holes += 1;
        }
    }

    /// Fast retransmit or RACK found SND.UNA lost: if that is the probe
    /// in flight (RFC 4821 §7.6.2), the search's top falls below it and
    /// the loss is repaired without a congestion response (as Linux's
    /// `tcp_mtup_probe_failed` and `tcp_simple_retransmit`); returns true,
    /// leaving `MTU_PROBE_OUT` set for the recovery (see `enter_recovery`).
    /// A loss below the probe abandons it (no verdict) and returns false.
    pub(super) fn mtu_probe_at_loss(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let lost = self.snd_rare.mtu_probe != 0 && self.snd.una >= self.snd_rare.mtu_probe_seq;
        if lost {
            self.mtu_probe_failed(ctx);
        } else {
            self.flags.clear(Flags::MTU_PROBE_OUT);
        }
        self.snd_rare.mtu_probe = 0;
        lost
    }

    fn mtu_probe_failed(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.mtu_probe_failed += 1;
        self.lower_mtu_high(ctx.cfg, ctx.now, self.snd_rare.mtu_probe - 1);
    }

    /// An ACK advanced SND.UNA to `ack` while `RECOVER_HELD` or
    /// `MTU_PROBE_OUT` was set (one test on the ACK path for both): ends
    /// the RFC 6582 guard once `ack` passes `recover`, and takes the
    /// probe's ACK (RFC 4821 §7.6.1: the MSS rises to the probe's size).
    #[cold]
    #[inline(never)]
    pub(super) fn on_ack_held(&mut self, ctx: &mut Ctx<'_>, ack: SeqNumber) {
        if self.flags.has(Flags::RECOVER_HELD) && ack >= self.snd_rare.recover {
            // RFC 6582 §3.2: the episode's guard ends with it.
            self.flags.clear(Flags::RECOVER_HELD);
        }
        if self.flags.has(Flags::RXT_ABOVE) && ack >= self.snd_rare.high_rxt {
            // An ended recovery's retransmissions all acknowledged.
            self.flags.clear(Flags::RXT_ABOVE);
        }
        let probe = self.snd_rare.mtu_probe;
        if !self.flags.has(Flags::MTU_PROBE_OUT) || self.flags.has(Flags::IN_RECOVERY) || probe == 0
        {
            return;
        }
        let over = self.mtu_overhead();
        if ack < self.snd_rare.mtu_probe_seq + usize::from(probe - over) {
            return;
        }
        self.flags.clear(Flags::MTU_PROBE_OUT);
        self.snd_rare.mtu_probe = 0;
        ctx.stats.mtu_probe_succeeded += 1;
        if probe > self.current_mtu() {
            self.set_mss(probe - over);
        }
        self.snd_rare.mtu_high = self.snd_rare.mtu_high.max(probe);
        self.mtu_settle_if_done(ctx.cfg, ctx.now);
    }

    /// RFC 4821 §7.4-§7.7: sends a probe when the search runs, nothing is
    /// in recovery, no probe is in flight, the congestion window holds at
    /// least `PROBE_MIN_CWND_SEGMENTS` segments and room for the probe,
    /// and the send buffer and the peer's window hold the probe and
    /// `PROBE_TRAILING_SEGMENTS` segments after it. The probe is new data
    /// at SND.NXT, as large as the middle of the search range. A finished
    /// search starts again from the handshake's MSS after
    /// `Config::mtu_probe_interval` (§7.7: the path may have grown).
    #[cold]
    #[inline(never)]
    pub(super) fn poll_mtu_probe(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> ControlFlow<Option<usize>> {
        let busy = Flags::MTU_PROBE_OUT | Flags::IN_RECOVERY | Flags::RECOVER_HELD;
        if self.flags.has(busy) || self.snd.nxt != self.snd.max {
            return Continue(());
        }
        let cfg = ctx.cfg;
        let low = self.current_mtu();
        if self.mtu_search_done(cfg) {
            let rested = secs16(ctx.now).wrapping_sub(self.timers_rare.mtu_settled);
            let interval = (cfg.mtu_probe_interval.as_millis() / 1000).min(u64::from(u16::MAX));
            if u64::from(rested) < interval {
                return Continue(());
            }
            self.snd_rare.mtu_high = self.snd_rare.mtu_max;
            self.timers_rare.mtu_settled = secs16(ctx.now);
            if self.mtu_search_done(cfg) {
                return Continue(());
            }
        }
        let over = self.mtu_overhead();
        let probe = ((u32::from(low) + u32::from(self.snd_rare.mtu_high)) / 2) as u16;
        let len = usize::from(probe - over);
        let mss = self.eff_mss();
        // The caller's buffer bounds every segment: a larger MTU cannot be
        // used whatever the path carries.
        let header = usize::from(over) - if self.tuple.is_ipv6() { 40 } else { 20 };
        if buf.len() < header + len {
            let fits = (buf.len().saturating_sub(header) + usize::from(over)) as u16;
            self.lower_mtu_high(cfg, ctx.now, fits.max(low));
            return Continue(());
        }
        let in_flight = self.snd.nxt - self.snd.una;
        let cwnd = self.cc.window();
        let needed = len + PROBE_TRAILING_SEGMENTS * mss;
        if len <= mss
            || cwnd < PROBE_MIN_CWND_SEGMENTS * mss
            || cwnd.saturating_sub(in_flight) < len
            || (self.snd.wnd as usize).saturating_sub(in_flight) < needed
            || self.unsent_bytes() < needed
        {
            return Continue(());
        }
        let seq = self.snd.nxt;
        let r = self.emit_segment(ctx, buf, seq, len, false);
        if r.is_some() {
            self.flags.set(Flags::MTU_PROBE_OUT);
            self.snd_rare.mtu_probe = probe;
            self.snd_rare.mtu_probe_seq = seq;
            ctx.stats.mtu_probes += 1;
            return Break(r);
        }
        Continue(())
    }
}
