//! Compact TIME-WAIT (RFC 9293 §3.10.7.4, RFC 6191, RFC 7323 §5).
//!
//! Once the application has closed a connection and the connection reaches
//! TIME-WAIT, nothing is left to send or deliver: what remains is to
//! acknowledge a retransmitted FIN, to refuse old duplicates, and to let a
//! newer SYN open the next incarnation. The stack then replaces the
//! connection (a slab slot of some 660 bytes and a timer-wheel entry) by a
//! [`TimeWait`] record of 112 bytes, kept for 2 MSL in the
//! [`TimeWaitTable`]. Every record lasts the same 2 MSL, so expiry is a
//! FIFO, not a timer per record. The table is capped
//! ([`Config::time_wait_max`], Linux's `tcp_max_tw_buckets`): at the cap the
//! oldest record goes first, counted ([`crate::Stats::time_wait_evicted`]).
//! A server closing 25,000 connections a second holds 1.5 million of them
//! at any time; as full slots that would be a gigabyte.
//!
//! A connection the application has not closed (it shut down its side and
//! may still read) stays whole in TIME-WAIT until it closes.

use crate::buckets::{BucketLists, Link, NIL};
use crate::challenge::{ChallengeBudget, OowAckTime};
use crate::flow_key::FlowKey;
use crate::seq::SeqNumber;
use crate::table::ConnTable;
use crate::time::{Duration, Instant};
use crate::Config;
use flowlane_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use std::collections::VecDeque;

/// RFC 7323 §5.5: TS.Recent is trusted for 24 days after it was set.
pub(crate) const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// What TIME-WAIT still needs to know of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeWait {
    pub(crate) tuple: FlowKey,
    /// SND.NXT: one past our FIN.
    pub(crate) snd_nxt: SeqNumber,
    /// RCV.NXT: one past the peer's FIN.
    pub(crate) rcv_nxt: SeqNumber,
    /// The receive window the ACKs offer, in bytes (the edge offered when
    /// the peer's FIN arrived). Segments are checked against an empty
    /// window at RCV.NXT, as the connection checks them after that FIN:
    /// nothing can follow it (RFC 9293 §3.10.7.4 eighth).
    pub(crate) rcv_wnd: u32,
    /// Shift of the window field we send (RFC 7323 §2.3).
    pub(crate) rcv_wscale: u8,
    /// When the record last answered an out-of-window segment
    /// ([`Config::invalid_ack_interval`]).
    pub(crate) invalid_ack: OowAckTime,
    /// With timestamps: TS.Recent, when it was set, and our TSval offset
    /// (RFC 7323 §5.4).
    pub(crate) ts: Option<Timestamps>,
    /// End of TIME-WAIT (2 MSL after it began or after the peer last
    /// retransmitted its FIN).
    pub(crate) expires: Instant,
}

/// Timestamp state a TIME-WAIT record keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timestamps {
    /// TS.Recent.
    pub(crate) recent: u32,
    /// When TS.Recent was set.
    pub(crate) recent_age: Instant,
    /// Our TSval offset.
    pub(crate) offset: u32,
}

/// What a record needs from its stack to take a segment.
pub(crate) struct RecordCtx<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) now: Instant,
    pub(crate) stats: &'a mut crate::Stats,
    /// The stack's budget of challenge ACKs (RFC 5961 §7).
    pub(crate) challenges: &'a mut ChallengeBudget,
    /// Whether a listener would take a SYN for the record's tuple: RFC
    /// 6191 reuse is for a connection request, and without a listener a
    /// SYN is one like any other (challenged, the record kept).
    pub(crate) listening: bool,
}

/// What a segment for a TIME-WAIT record asks of the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing more (dropped, or an acceptable bare ACK).
    Done,
    /// Acknowledge it (the record's ACK goes out on the next poll).
    Ack,
    /// RFC 6191: a newer SYN; the record is gone and the listener takes
    /// the SYN.
    Reopen,
    /// RFC 6191: a SYN that may be an old duplicate; dropped silently.
    DropSyn,
}

/// RFC 6191 §2: whether a SYN (no ACK) for a connection in TIME-WAIT may
/// open a new incarnation of it: its timestamp is newer than TS.Recent (or
/// equal, with a newer sequence number); or, without timestamps on one
/// side, its sequence number is beyond RCV.NXT (RFC 1122 §4.2.2.13); or the
/// old incarnation had no timestamps and the new one will. Otherwise it may
/// be an old duplicate, to be dropped silently. `ts_recent` is `None` when
/// the old incarnation did not use timestamps.
pub(crate) fn accepts_new_incarnation(
    cfg: &Config,
    ts_recent: Option<u32>,
    rcv_nxt: SeqNumber,
    syn: &TcpRepr,
) -> bool {
    let seq_newer = SeqNumber(syn.seq) > rcv_nxt;
    let ts_new = if cfg.timestamps {
        syn.options.timestamps
    } else {
        None
    };
    match (ts_recent, ts_new) {
        (Some(recent), Some((tsval, _))) => {
            let d = tsval.wrapping_sub(recent) as i32;
            d > 0 || (d == 0 && seq_newer)
        }
        (None, Some(_)) => true,
        (_, None) => seq_newer,
    }
}

/// Whether a SYN-only segment (no ACK, RST or FIN): the segments RFC 6191
/// looks at.
#[inline]
pub(crate) fn is_bare_syn(f: TcpFlags) -> bool {
    f.syn() && !f.ack() && !f.rst() && !f.fin()
}

impl TimeWait {
    /// RFC 9293 §3.10.7.4 for a segment arriving in TIME-WAIT, after the
    /// RFC 6191 SYN check and the RFC 7323 timestamp checks, with RFC 5961
    /// and RFC 1337: RSTs are ignored (the 2 MSL wait runs on; RFC 1337
    /// §3 fix F1, where Linux's default `tcp_rfc1337 = 0` lets an RST end
    /// it), other SYNs get a challenge ACK, and refused segments without
    /// data or FIN are answered once per interval, as a connection's are.
    /// Restarts the 2 MSL wait on a retransmitted FIN.
    fn on_segment(&mut self, ctx: &mut RecordCtx<'_>, seg: &TcpRepr, len: usize) -> Verdict {
        let (cfg, now) = (ctx.cfg, ctx.now);
        let stats = &mut *ctx.stats;
        let f = seg.flags;
        if is_bare_syn(f) && ctx.listening {
            let recent = self.ts.map(|t| t.recent);
            return if accepts_new_incarnation(cfg, recent, self.rcv_nxt, seg) {
                Verdict::Reopen
            } else {
                Verdict::DropSyn
            };
        }
        let seg_len = len + usize::from(f.syn()) + usize::from(f.fin());
        let seq = SeqNumber(seg.seq);
        let in_window = seq.acceptable(seg_len, self.rcv_nxt, 0);
        if f.rst() {
            if in_window {
                stats.rst_in_time_wait += 1;
            } else {
                stats.unacceptable += 1;
                stats.rst_out_of_window += 1;
            }
            return Verdict::Done;
        }
        // RFC 7323 §3.2, §5.3 R1: once negotiated, segments without
        // timestamps are dropped, and stale ones acknowledged and dropped.
        let mut refused = false;
        if let Some(ts) = self.ts {
            match seg.options.timestamps {
                None => {
                    stats.unacceptable += 1;
                    return Verdict::Done;
                }
                Some((tsval, _)) => {
                    let stale = (tsval.wrapping_sub(ts.recent) as i32) < 0;
                    if stale && now.saturating_since(ts.recent_age) < PAWS_IDLE {
                        stats.paws_rejected += 1;
                        refused = true;
                    }
                }
            }
        }
        if !refused && !in_window {
            stats.unacceptable += 1;
            // The only segment expected here is a retransmission of the
            // peer's FIN: acknowledge it and restart the 2 MSL timeout.
            if f.fin() {
                self.expires = now + cfg.msl.saturating_mul(2);
            }
            refused = true;
        }
        if f.syn() {
            // RFC 5961 §4.2: whatever its sequence number.
            stats.syn_challenged += 1;
            return self.challenge(ctx);
        }
        if refused {
            if len > 0 || f.fin() || self.invalid_ack.take(now, cfg.invalid_ack_interval) {
                return Verdict::Ack;
            }
            stats.invalid_acks_limited += 1;
            return Verdict::Done;
        }
        // Anything in the window past the peer's FIN that occupies
        // sequence space is acknowledged. An acceptable bare ACK needs no
        // answer.
        if seg_len > 0 {
            return Verdict::Ack;
        }
        Verdict::Done
    }

    /// A challenge ACK (RFC 5961 §4.2), if the record's interval and the
    /// stack's budget for the second (§7) allow one.
    fn challenge(&mut self, ctx: &mut RecordCtx<'_>) -> Verdict {
        if !self.invalid_ack.take(ctx.now, ctx.cfg.invalid_ack_interval) {
            ctx.stats.invalid_acks_limited += 1;
            Verdict::Done
        } else if !ctx.challenges.take(ctx.now) {
            ctx.stats.challenge_acks_limited += 1;
            Verdict::Done
        } else {
            ctx.stats.challenge_acks += 1;
            Verdict::Ack
        }
    }

    /// Writes the ACK this record owes into `buf`: SND.NXT, RCV.NXT, the
    /// last window and, with timestamps, TSval and TS.Recent.
    fn emit_ack(&self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let mut options = TcpOptions::default();
        if let Some(ts) = self.ts {
            let tsval = (now.as_millis() as u32).wrapping_add(ts.offset);
            options.timestamps = Some((tsval, ts.recent));
        }
        let repr = TcpRepr {
            src_port: self.tuple.local_port(),
            dst_port: self.tuple.remote_port(),
            seq: self.snd_nxt.0,
            ack: self.rcv_nxt.0,
            flags: TcpFlags::ACK,
            // Rounded up, so that the right edge never recedes (RFC 7323
            // §2.4).
            window: self.rcv_wnd.div_ceil(1 << self.rcv_wscale).min(0xffff) as u16,
            urgent: 0,
            options,
        };
        repr.emit(buf).ok()
    }
}

/// One slab entry of the table.
#[derive(Debug)]
struct Slot {
    generation: u32,
    /// In the table's ACK queue.
    ack_queued: bool,
    /// The record's place on its RSS bucket's list.
    link: Link,
    entry: Option<TimeWait>,
}

fn slot_link(s: &mut Slot) -> &mut Link {
    &mut s.link
}

/// The TIME-WAIT records of one stack: a slab, an index keyed like the
/// connection table (so one hash serves both), expiry in arrival order, and
/// the ACKs owed.
#[derive(Debug)]
pub(crate) struct TimeWaitTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: ConnTable,
    /// Every record on its RSS bucket's list.
    buckets: BucketLists,
    /// (slot, generation, deadline), deadlines non-decreasing: every record
    /// has one entry here, at or before its `expires`; entries of removed
    /// records are skipped.
    expiry: VecDeque<(u32, u32, Instant)>,
    /// Records owing an ACK, oldest first.
    acks: VecDeque<(u32, u32)>,
    max: usize,
    live: usize,
}

impl TimeWaitTable {
    /// An empty table holding at most `max` records (at least one: a
    /// record owes the ACK of the peer's FIN, which must go out even when
    /// TIME-WAIT is all but disabled), indexed under the
    /// same key as the connection table built from `secret`, over
    /// `buckets` RSS buckets.
    pub(crate) fn new(secret: &[u8; 16], max: usize, buckets: usize) -> Self {
        TimeWaitTable {
            slots: Vec::new(),
            free: Vec::new(),
            index: ConnTable::new(secret),
            buckets: BucketLists::new(buckets),
            expiry: VecDeque::new(),
            acks: VecDeque::new(),
            max: max.max(1),
            live: 0,
        }
    }

    /// Records held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Starts over with `count` RSS buckets (the table must be empty).
    pub(crate) fn set_buckets(&mut self, count: usize) {
        debug_assert_eq!(self.live, 0);
        self.buckets = BucketLists::new(count);
    }

    /// Records in bucket `b`.
    pub(crate) fn bucket_len(&self, b: u16) -> u32 {
        self.buckets.len(b)
    }

    /// RFC 6191 §2: whether a SYN may open a new incarnation of record
    /// `idx`'s connection ([`accepts_new_incarnation`]).
    pub(crate) fn accepts_new_incarnation(&self, idx: u32, cfg: &Config, syn: &TcpRepr) -> bool {
        let tw = self.slots[idx as usize]
            .entry
            .as_ref()
            .expect("live record");
        accepts_new_incarnation(cfg, tw.ts.map(|t| t.recent), tw.rcv_nxt, syn)
    }

    /// SND.NXT of record `idx` (one past its FIN: the last sequence number
    /// its incarnation used).
    pub(crate) fn snd_nxt(&self, idx: u32) -> SeqNumber {
        self.slots[idx as usize]
            .entry
            .as_ref()
            .expect("live record")
            .snd_nxt
    }

    /// The bucket of record `idx`.
    #[inline]
    pub(crate) fn bucket_of(&self, idx: u32) -> u16 {
        self.slots[idx as usize].link.bucket
    }

    /// Takes every record of bucket `b` out of the table, each with whether
    /// it still owes the ACK of the peer's FIN (queued, not yet sent: the
    /// stack that takes the record sends it).
    pub(crate) fn export_bucket(&mut self, b: u16) -> Vec<(TimeWait, bool)> {
        let mut out = Vec::with_capacity(self.buckets.len(b) as usize);
        loop {
            let idx = self.buckets.first(b);
            if idx == NIL {
                break;
            }
            let owes_ack = self.slots[idx as usize].ack_queued;
            out.push((self.remove(idx), owes_ack));
        }
        out
    }

    fn tuple_at(slots: &[Slot], idx: u32) -> &FlowKey {
        &slots[idx as usize]
            .entry
            .as_ref()
            .expect("the index names live records")
            .tuple
    }

    /// Where a lookup of `hash` starts reading the records' index, for a
    /// caller that prefetches it; `None` while no record is kept (a
    /// lookup then reads nothing).
    pub(crate) fn entry_address(&self, hash: u64) -> Option<*const u8> {
        if self.live == 0 {
            return None;
        }
        self.index.entry_address(hash)
    }

    /// The record with this tuple; `hash` is the connection table's hash
    /// of it.
    #[inline]
    pub(crate) fn find(&self, hash: u64, tuple: &FlowKey) -> Option<u32> {
        if self.live == 0 {
            return None;
        }
        let slots = &self.slots;
        self.index.find(hash, tuple, |i| Self::tuple_at(slots, i))
    }

    /// Adds a record in RSS bucket `bucket`, owing an ACK if `ack_owed` (the
    /// connection had yet to acknowledge the peer's FIN). At the cap the
    /// oldest record is dropped first; returns how many were (0 or 1).
    pub(crate) fn insert(&mut self, hash: u64, tw: TimeWait, bucket: u16, ack_owed: bool) -> usize {
        let mut evicted = 0;
        while self.live >= self.max {
            let Some((idx, generation, _)) = self.expiry.pop_front() else {
                break;
            };
            if self.is_live(idx, generation) {
                self.remove(idx);
                evicted += 1;
            }
        }
        let deadline = tw
            .expires
            .max(self.expiry.back().map_or(tw.expires, |e| e.2));
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    ack_queued: false,
                    link: Link::NONE,
                    entry: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.buckets.push(&mut self.slots, slot_link, idx, bucket);
        let slot = &mut self.slots[idx as usize];
        slot.entry = Some(tw);
        slot.ack_queued = ack_owed;
        let generation = slot.generation;
        if ack_owed {
            self.acks.push_back((idx, generation));
        }
        self.index.insert(hash, idx);
        self.expiry.push_back((idx, generation, deadline));
        self.live += 1;
        self.trim_expiry();
        evicted
    }

    fn is_live(&self, idx: u32, generation: u32) -> bool {
        let s = &self.slots[idx as usize];
        s.generation == generation && s.entry.is_some()
    }

    /// Drops a record.
    pub(crate) fn remove(&mut self, idx: u32) -> TimeWait {
        let slot = &mut self.slots[idx as usize];
        let tw = slot.entry.take().expect("live record");
        slot.generation = slot.generation.wrapping_add(1);
        slot.ack_queued = false;
        self.index.remove(self.index.hash(&tw.tuple), idx);
        self.buckets.unlink(&mut self.slots, slot_link, idx);
        self.free.push(idx);
        self.live -= 1;
        tw
    }

    /// Entries of removed records stay in `expiry` until their deadline;
    /// should they outnumber the live ones, they are swept so that the
    /// queue stays within twice the records held.
    fn trim_expiry(&mut self) {
        if self.expiry.len() > 2 * self.live.max(64) {
            let slots = &self.slots;
            self.expiry.retain(|&(i, g, _)| {
                let s = &slots[i as usize];
                s.generation == g && s.entry.is_some()
            });
        }
    }

    /// Handles a segment for record `idx` (see [`Verdict`]); removes the
    /// record when the verdict ends it, and queues the ACK it owes.
    pub(crate) fn on_segment(
        &mut self,
        idx: u32,
        ctx: &mut RecordCtx<'_>,
        seg: &TcpRepr,
        len: usize,
    ) -> Verdict {
        let slot = &mut self.slots[idx as usize];
        let tw = slot.entry.as_mut().expect("live record");
        let verdict = tw.on_segment(ctx, seg, len);
        match verdict {
            Verdict::Reopen => {
                self.remove(idx);
            }
            Verdict::Ack if !slot.ack_queued => {
                slot.ack_queued = true;
                self.acks.push_back((idx, slot.generation));
            }
            _ => {}
        }
        verdict
    }

    /// Writes the next ACK owed into `buf`; returns its tuple and length.
    pub(crate) fn poll_ack(&mut self, now: Instant, buf: &mut [u8]) -> Option<(FlowKey, usize)> {
        while let Some((idx, generation)) = self.acks.pop_front() {
            if !self.is_live(idx, generation) {
                continue;
            }
            let slot = &mut self.slots[idx as usize];
            slot.ack_queued = false;
            let tw = slot.entry.as_ref().expect("live record");
            if let Some(len) = tw.emit_ack(now, buf) {
                return Some((tw.tuple, len));
            }
        }
        None
    }

    /// When the oldest record is due to expire.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.expiry.front().map(|e| e.2)
    }

    /// Drops every record whose 2 MSL are over by `now`; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(&(idx, generation, deadline)) = self.expiry.front() {
            if deadline > now {
                break;
            }
            self.expiry.pop_front();
            if !self.is_live(idx, generation) {
                continue;
            }
            let expires = self.slots[idx as usize]
                .entry
                .as_ref()
                .expect("live record")
                .expires;
            if expires > now {
                // Restarted by a retransmitted FIN: back in line, never
                // ahead of a later deadline (late is safe; early is not).
                let last = self.expiry.back().map_or(expires, |e| e.2);
                self.expiry.push_back((idx, generation, expires.max(last)));
                continue;
            }
            self.remove(idx);
            n += 1;
        }
        n
    }

    /// Checks the index, the expiry queue and the ACK queue against the
    /// records (tests only).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut links: Vec<(bool, Link)> = self
            .slots
            .iter()
            .map(|s| (s.entry.is_some(), s.link))
            .collect();
        self.buckets.check(&mut links, |s| &mut s.1, |s| s.0)?;
        let live = self.slots.iter().filter(|s| s.entry.is_some()).count();
        if live != self.live || self.index.len() != live {
            return Err(format!(
                "time-wait: {live} records, count {}, index {}",
                self.live,
                self.index.len()
            ));
        }
        for (i, s) in self.slots.iter().enumerate() {
            let Some(tw) = &s.entry else { continue };
            if self.find(self.index.hash(&tw.tuple), &tw.tuple) != Some(i as u32) {
                return Err(format!("time-wait record {i} not indexed"));
            }
            let queued = self
                .expiry
                .iter()
                .filter(|e| e.0 == i as u32 && e.1 == s.generation)
                .count();
            if queued != 1 {
                return Err(format!("time-wait record {i} in expiry {queued} times"));
            }
        }
        if self
            .expiry
            .iter()
            .zip(self.expiry.iter().skip(1))
            .any(|(a, b)| a.2 > b.2)
        {
            return Err("time-wait expiry out of order".into());
        }
        Ok(())
    }
}
