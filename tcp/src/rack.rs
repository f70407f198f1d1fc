//! RACK-TLP (RFC 8985) state: the per-segment send times of §6.1 and the
//! RACK variables of §6.2, with the pure parts of the algorithms (which
//! segments a (S)ACK newly delivered, which are lost, when the reordering
//! timer is due). The connection drives them (`connection/rack.rs`).
//!
//! Memory follows the data in flight: [`Rack`] sits inline in the
//! connection (16 bytes: what must outlive a flight, the minimum RTT and
//! the reordering window's adaptation), and the records of the segments in
//! flight live in a [`Flight`] allocated with the first segment sent and
//! freed when everything sent is acknowledged (and no tail loss probe is
//! pending), so an idle connection holds none.
//!
//! The records are kept in sequence order, one per transmission unit,
//! contiguous from SND.UNA to SND.MAX; a retransmission updates the
//! records it covers. Original transmissions go out in sequence order, so
//! their send times grow with the sequence number: the segments RACK deems
//! lost form a prefix of the undelivered ones, and the scan for them
//! resumes where it stopped (`Flight::lost_end`) instead of walking the
//! whole window on every ACK (Linux keeps a time-ordered list for the
//! same purpose). The number of records is bounded
//! ([`MAX_RECORDS`]): past it a new segment extends the last record,
//! which only delays that record's loss detection.

use crate::seq::SeqNumber;
use crate::time::{Deadline, Instant};
use std::collections::VecDeque;

/// Most records a flight keeps (16 bytes each with the deque's slack: 64
/// KiB, a send window of 4096 segments).
pub(crate) const MAX_RECORDS: usize = 4096;

/// RFC 8985 §6.2 step 4: recoveries a grown reordering window persists
/// without DSACK before it returns to min_RTT / 4.
pub(crate) const REO_WND_PERSIST: u8 = 16;

/// A send time: microseconds of the caller's clock, wrapping (compared by
/// wrapping difference, valid for 35 minutes).
#[inline]
pub(crate) fn stamp(now: Instant) -> u32 {
    (now.as_nanos() / 1000) as u32
}

/// RFC 8985 §6.2 `RACK_sent_after(t1, seq1, t2, seq2)`: whether the
/// transmission (t1, seq1) happened after (t2, seq2); equal times (one
/// burst) are ordered by sequence.
#[inline]
pub(crate) fn sent_after(t1: u32, seq1: SeqNumber, t2: u32, seq2: SeqNumber) -> bool {
    let d = t1.wrapping_sub(t2) as i32;
    d > 0 || (d == 0 && seq1 > seq2)
}

/// One segment in flight (RFC 8985 §6.1): where it ends, when it was last
/// sent, and whether it was retransmitted or SACKed. It starts where the
/// previous record ends (the first at [`Flight::head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// `Segment.end_seq`.
    pub(crate) end: SeqNumber,
    /// `Segment.xmit_ts` ([`stamp`]).
    pub(crate) xmit: u32,
    /// [`Record::RETRANSMITTED`], [`Record::SACKED`].
    pub(crate) flags: u8,
}

impl Record {
    /// `Segment.retransmitted`.
    pub(crate) const RETRANSMITTED: u8 = 1;
    /// Entirely inside a SACK block (delivered).
    pub(crate) const SACKED: u8 = 2;

    fn has(self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// The RACK state of a connection that lives as long as it (RFC 8985 §6.2
/// `RACK.min_RTT`, `RACK.reo_wnd_mult`, `RACK.reo_wnd_persist`,
/// `RACK.reordering_seen`), and the flight's records, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rack {
    /// The records and per-flight variables; `None` while nothing is in
    /// flight.
    pub(crate) flight: Option<Box<Flight>>,
    /// `RACK.min_RTT` in microseconds (`u32::MAX`: none yet).
    pub(crate) min_rtt_us: u32,
    /// `RACK.reo_wnd_mult`.
    pub(crate) reo_wnd_mult: u8,
    /// `RACK.reo_wnd_persist`.
    pub(crate) reo_wnd_persist: u8,
    /// [`Rack::REORDERING_SEEN`], [`Rack::RECOVERING`].
    pub(crate) bits: u8,
    /// Retransmissions not yet reported by a D-SACK (at most 255): a
    /// D-SACK beyond them reports no retransmission of ours and grows no
    /// reordering window (`Stats::dsack_unexpected`).
    pub(crate) dsack_credit: u8,
}

impl Default for Rack {
    fn default() -> Self {
        Rack {
            flight: None,
            min_rtt_us: u32::MAX,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            bits: 0,
            dsack_credit: 0,
        }
    }
}

impl Rack {
    /// `RACK.reordering_seen`.
    pub(crate) const REORDERING_SEEN: u8 = 1;
    /// The connection was in fast or RTO recovery at the last ACK (to see
    /// it end, RFC 8985 §6.2 step 4).
    pub(crate) const RECOVERING: u8 = 2;

    /// Whether a bit of `b` is set.
    #[inline]
    pub(crate) fn has(&self, b: u8) -> bool {
        self.bits & b != 0
    }
}

/// The segments in flight and the RACK variables of the current flight
/// (RFC 8985 §6.2: `RACK.xmit_ts`, `RACK.end_seq`, `RACK.rtt`, `RACK.fack`,
/// `RACK.dsack_round`; §7: `TLP.end_seq`, `TLP.is_retrans`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flight {
    records: VecDeque<Record>,
    /// Where the first record starts (SND.UNA once ACKs are processed).
    pub(crate) head: SeqNumber,
    /// Whether a segment was delivered since the flight began
    /// (`RACK.xmit_ts`, `RACK.end_seq` and `RACK.rtt` are set).
    pub(crate) has_rack: bool,
    /// `RACK.xmit_ts`.
    pub(crate) xmit_ts: u32,
    /// `RACK.end_seq`.
    pub(crate) end_seq: SeqNumber,
    /// `RACK.rtt` in microseconds.
    pub(crate) rtt_us: u32,
    /// `RACK.fack`: the highest end of a segment delivered by an earlier
    /// ACK.
    pub(crate) fack: SeqNumber,
    /// The highest end of a segment delivered so far, this ACK's included
    /// (`fack` once the ACK is processed: segments one ACK delivers
    /// together are not reordered among themselves).
    pub(crate) fack_next: SeqNumber,
    /// `RACK.dsack_round`.
    pub(crate) dsack_round: Option<SeqNumber>,
    /// Un-SACKed bytes below this are deemed lost by RACK; the loss scan
    /// resumes here.
    pub(crate) lost_end: SeqNumber,
    /// The RACK reordering timer (RFC 8985 §6.3).
    pub(crate) reo_timer: Deadline,
    /// `TLP.end_seq`: SND.MAX after the outstanding probe (§7.3).
    pub(crate) tlp_end: Option<SeqNumber>,
    /// `TLP.is_retrans`: the probe was a retransmission.
    pub(crate) tlp_retrans: bool,
    /// The latest sent of the segments the ACK being processed newly
    /// delivered (its end and send time, whether it was retransmitted,
    /// whether by SACK).
    pub(crate) newest: Option<Record>,
    /// The ACK being processed carried a D-SACK block (RFC 2883): its
    /// range.
    pub(crate) dsack: Option<(SeqNumber, SeqNumber)>,
    /// The ACK being processed delivered an original segment below
    /// `RACK.fack` (§6.2 step 3).
    pub(crate) reordered: bool,
}

/// Flights a stack keeps for reuse whatever its number of connections.
const POOLED_FLIGHTS: usize = 256;
/// Flights whose record deque grew past this many are not kept (a bulk
/// transfer's), so that the pool stays small.
const POOLED_RECORDS: usize = 64;
/// Past [`POOLED_FLIGHTS`], only flights of a few records are kept (a
/// FIN's, a short response's): some 220 bytes each with their deque.
const POOLED_SHORT_RECORDS: usize = 8;

/// The flights of connections whose data was all acknowledged, kept for
/// the next flight of any connection of the stack: a short connection
/// starts and ends a flight per burst, and each cost two allocations and
/// two frees (the box and its deque).
///
/// The pool keeps up to [`POOLED_FLIGHTS`] flights, or one short flight
/// per connection of the most the stack has held at once (its `bound`):
/// a burst of thousands of short connections (each a flight for its
/// response and one for its FIN) then allocates none after the first
/// burst, and the pool holds at most what that many connections held at
/// once. It does not shrink when the connections go away: bound by the
/// stack's peak, as the allocator's free lists would be (memory given back
/// to `free` stays in the process's heap), and the next burst finds its
/// flights.
#[derive(Debug, Default)]
pub(crate) struct FlightPool {
    // Boxes, as connections hold them: unboxing a flight into the pool and
    // boxing it again would allocate once more.
    #[allow(clippy::vec_box)]
    free: Vec<Box<Flight>>,
    /// The most connections the stack has held at once.
    bound: usize,
}

impl FlightPool {
    /// A flight starting at `head`: a kept one, reset, or a new one.
    #[inline]
    pub(crate) fn take(&mut self, head: SeqNumber) -> Box<Flight> {
        match self.free.pop() {
            Some(mut f) => {
                let mut records = std::mem::take(&mut f.records);
                records.clear();
                *f = Flight::new(head);
                f.records = records;
                f
            }
            None => Box::new(Flight::new(head)),
        }
    }

    /// Takes back a flight that is over (kept if the pool has room and its
    /// deque is small).
    #[inline]
    pub(crate) fn give(&mut self, f: Box<Flight>) {
        let room = f.records.capacity();
        let kept = self.free.len();
        if (kept < POOLED_FLIGHTS && room <= POOLED_RECORDS)
            || (kept < self.bound && room <= POOLED_SHORT_RECORDS)
        {
            self.free.push(f);
        }
    }

    /// Notes the number of live connections: the most of them bounds the
    /// pool past [`POOLED_FLIGHTS`].
    #[inline]
    pub(crate) fn note_live(&mut self, live: usize) {
        self.bound = self.bound.max(live);
    }
}

/// What a loss scan found (RFC 8985 §6.2 step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Scan {
    /// Records newly deemed lost.
    pub(crate) lost: u32,
    /// Start of the first of them.
    pub(crate) first_lost: Option<SeqNumber>,
    /// Start of the first of them that was a retransmission.
    pub(crate) lost_retransmission: Option<SeqNumber>,
    /// Microseconds until the oldest segment not yet deemed lost would be
    /// (the reordering timer, §6.3).
    pub(crate) wait_us: Option<u32>,
}

impl Flight {
    /// An empty flight starting at `head`.
    pub(crate) fn new(head: SeqNumber) -> Self {
        Flight {
            records: VecDeque::new(),
            head,
            has_rack: false,
            xmit_ts: 0,
            end_seq: head,
            rtt_us: 0,
            fack: head,
            fack_next: head,
            dsack_round: None,
            lost_end: head,
            reo_timer: Deadline::NONE,
            tlp_end: None,
            tlp_retrans: false,
            newest: None,
            dsack: None,
            reordered: false,
        }
    }

    /// The records, lowest first.
    #[cfg(test)]
    pub(crate) fn records(&self) -> &VecDeque<Record> {
        &self.records
    }

    /// Where record `i` starts.
    #[inline]
    fn start(&self, i: usize) -> SeqNumber {
        if i == 0 {
            self.head
        } else {
            self.records[i - 1].end
        }
    }

    /// Index of the record holding `seq` (the first ending after it).
    #[inline]
    fn find(&self, seq: SeqNumber) -> usize {
        if seq <= self.head {
            0
        } else {
            self.records.partition_point(|r| r.end <= seq)
        }
    }

    /// Where the last record starts (the last segment sent, §7.3).
    pub(crate) fn last_start(&self) -> Option<SeqNumber> {
        let n = self.records.len();
        (n > 0).then(|| self.start(n - 1))
    }

    /// Records `[seq, end)` sent at `xmit` when SND.MAX was `max`: what lies
    /// below `max` is a retransmission and updates its records (§6.1),
    /// what lies above is new.
    pub(crate) fn on_send(&mut self, seq: SeqNumber, end: SeqNumber, xmit: u32, max: SeqNumber) {
        if end <= seq {
            return;
        }
        if self.records.is_empty() {
            self.head = seq.min(max);
            self.lost_end = self.lost_end.max(self.head);
        }
        if seq < max {
            let stop = end.min(max);
            let mut i = self.find(seq);
            while i < self.records.len() && self.start(i) < stop {
                let r = &mut self.records[i];
                r.xmit = xmit;
                r.flags = Record::RETRANSMITTED;
                i += 1;
            }
        }
        if end > max {
            let rec = Record {
                end,
                xmit,
                flags: 0,
            };
            let full = self.records.len() >= MAX_RECORDS;
            match self.records.back_mut() {
                Some(last) if full => *last = rec,
                _ => self.records.push_back(rec),
            }
        }
    }

    /// Notes `r` as newly delivered (§6.2 steps 2-3): the newest of them is
    /// kept, and an original one below `RACK.fack` shows reordering.
    #[inline]
    fn deliver(&mut self, r: Record) {
        self.fack_next = self.fack_next.max(r.end);
        if r.end < self.fack && !r.has(Record::RETRANSMITTED) {
            self.reordered = true;
        }
        let newer = match self.newest {
            Some(n) => sent_after(r.xmit, r.end, n.xmit, n.end),
            None => true,
        };
        if newer {
            self.newest = Some(r);
        }
    }

    /// The ACK is processed: what it delivered moves `RACK.fack`.
    pub(crate) fn ack_done(&mut self) {
        self.fack = self.fack_next;
    }

    /// `[s, e)` was newly SACKed, inside the block `[bl, br)`: its records
    /// are delivered; those inside the block are SACKed.
    pub(crate) fn on_sacked(&mut self, s: SeqNumber, e: SeqNumber, bl: SeqNumber, br: SeqNumber) {
        let mut i = self.find(s);
        while i < self.records.len() && self.start(i) < e {
            let start = self.start(i);
            let r = self.records[i];
            if !r.has(Record::SACKED) {
                self.deliver(Record {
                    flags: r.flags | Record::SACKED,
                    ..r
                });
                if start >= bl && r.end <= br {
                    self.records[i].flags |= Record::SACKED;
                }
            }
            i += 1;
        }
    }

    /// Drops the records the cumulative ACK `una` covers, delivering those
    /// not SACKed before.
    pub(crate) fn on_cumulative_ack(&mut self, una: SeqNumber) {
        while let Some(&r) = self.records.front() {
            if r.end > una {
                break;
            }
            self.records.pop_front();
            self.head = r.end;
            if !r.has(Record::SACKED) {
                self.deliver(r);
            }
        }
        if una > self.head {
            self.head = una;
        }
        self.lost_end = self.lost_end.max(self.head);
    }

    /// Whether no record is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// RFC 2018 §8 after a retransmission timeout: SACK information is
    /// dropped, nothing counts as delivered or lost any more.
    pub(crate) fn forget_sacks(&mut self, una: SeqNumber) {
        for r in &mut self.records {
            r.flags &= !Record::SACKED;
        }
        self.lost_end = una.max(self.head);
        self.reo_timer = Deadline::NONE;
    }

    /// RFC 8985 §6.2 step 5 `RACK_detect_loss()`: from where the last scan
    /// stopped, un-SACKed segments sent before `RACK.segment` whose send
    /// time lies `rtt + reo_wnd` (`thresh_us`) before `now` are lost. The
    /// scan stops at the first that is not: later originals were sent
    /// later still. Where the RFC arms the timer for the latest such
    /// segment, this arms it for the earliest, and the scan it triggers
    /// re-arms it for the next (one timer event per segment, no rescan).
    pub(crate) fn detect_loss(&mut self, una: SeqNumber, now: u32, thresh_us: u32) -> Scan {
        let mut scan = Scan::default();
        if !self.has_rack {
            return scan;
        }
        let mut i = self.find(self.lost_end.max(una));
        while i < self.records.len() {
            let r = self.records[i];
            if !r.has(Record::SACKED) {
                if !sent_after(self.xmit_ts, self.end_seq, r.xmit, r.end) {
                    break;
                }
                // Send times are µs modulo 2^32: an age is exact up to 71
                // minutes, so it is compared unsigned. (A signed difference
                // misread a segment unacknowledged for over 35 minutes,
                // which later segments keep while timeouts resend only
                // SND.UNA, as not yet due, and the wait then underflowed.)
                let elapsed = now.wrapping_sub(r.xmit);
                if elapsed < thresh_us {
                    scan.wait_us = Some(thresh_us - elapsed);
                    break;
                }
                scan.lost += 1;
                if scan.first_lost.is_none() {
                    scan.first_lost = Some(self.start(i));
                }
                if r.has(Record::RETRANSMITTED) && scan.lost_retransmission.is_none() {
                    scan.lost_retransmission = Some(self.start(i));
                }
            }
            self.lost_end = r.end;
            i += 1;
        }
        scan
    }

    /// Whether the records are consistent with SND.UNA = `una` and SND.MAX
    /// = `max` (an imported snapshot).
    pub(crate) fn valid(&self, una: SeqNumber, max: SeqNumber) -> bool {
        let mut prev = self.head;
        for r in &self.records {
            if r.end <= prev || r.end > max {
                return false;
            }
            prev = r.end;
        }
        self.records.len() <= MAX_RECORDS
            && (self.records.is_empty() || (self.head <= una && self.records[0].end > una))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u32) -> SeqNumber {
        SeqNumber(n.wrapping_add(0xffff_ff00))
    }

    /// Ten segments of 100 bytes sent at 0, 10, ..., 90 µs.
    fn flight() -> Flight {
        let mut f = Flight::new(s(0));
        for i in 0..10u32 {
            f.on_send(s(i * 100), s(i * 100 + 100), i * 10, s(i * 100));
        }
        f
    }

    #[test]
    fn a_pooled_flight_starts_as_a_new_one_and_keeps_its_room() {
        let mut pool = FlightPool::default();
        let mut f = pool.take(s(0));
        for i in 0..10 {
            f.on_send(s(i * 100), s(i * 100 + 100), 1000 + i, s(i * 100));
        }
        f.on_sacked(s(500), s(600), s(500), s(600));
        f.tlp_end = Some(s(1000));
        let room = f.records.capacity();
        pool.give(f);
        let g = pool.take(s(7000));
        assert_eq!(*g, Flight::new(s(7000)).with_room(room));
        assert_eq!(g.records.capacity(), room);
        // A large deque is not kept.
        let mut big = Box::new(Flight::new(s(0)));
        big.records.reserve(POOLED_RECORDS * 4);
        pool.give(g);
        pool.give(big);
        assert_eq!(pool.free.len(), 1);
    }

    #[test]
    fn the_pool_keeps_a_short_flight_per_connection_of_the_peak_past_its_floor() {
        let short = |n| {
            let mut f = Box::new(Flight::new(s(0)));
            f.records.reserve_exact(n);
            f
        };
        let mut pool = FlightPool::default();
        pool.note_live(POOLED_FLIGHTS + 100);
        for _ in 0..POOLED_FLIGHTS + 200 {
            pool.give(short(4));
        }
        assert_eq!(
            pool.free.len(),
            POOLED_FLIGHTS + 100,
            "one per connection of the peak"
        );
        // Past the floor, a flight with many records is not kept.
        pool.note_live(POOLED_FLIGHTS + 200);
        pool.give(short(POOLED_SHORT_RECORDS * 2));
        assert_eq!(pool.free.len(), POOLED_FLIGHTS + 100);
        pool.give(short(2));
        assert_eq!(pool.free.len(), POOLED_FLIGHTS + 101);
        // Connections going away keep the pool (the next burst takes its
        // flights from it) and its bound.
        pool.note_live(10);
        assert_eq!(pool.free.len(), POOLED_FLIGHTS + 101);
        for _ in 0..200 {
            pool.give(short(2));
        }
        assert_eq!(pool.free.len(), POOLED_FLIGHTS + 200, "the peak's bound");
        let taken: Vec<_> = (0..POOLED_FLIGHTS + 200).map(|_| pool.take(s(0))).collect();
        assert!(pool.free.is_empty());
        assert!(taken.iter().all(|f| f.records.capacity() >= 2));
    }

    impl Flight {
        /// `self` with an empty deque of `room` records' capacity (to
        /// compare with a pooled one).
        fn with_room(mut self, room: usize) -> Self {
            self.records = VecDeque::with_capacity(room);
            self
        }
    }

    #[test]
    fn sack_above_a_hole_detects_it_after_the_window() {
        let mut f = flight();
        // Segment 3 SACKed at 1000 µs: RACK.segment = 3 (sent at 30).
        f.on_sacked(s(300), s(400), s(300), s(400));
        let n = f.newest.take().expect("delivered");
        assert_eq!((n.end, n.xmit), (s(400), 30));
        f.has_rack = true;
        (f.xmit_ts, f.end_seq, f.rtt_us) = (n.xmit, n.end, 1000 - n.xmit);
        assert!(!f.reordered);
        // rtt 970 + reo_wnd 100: segments 0-2 (sent at 0-20) are not lost
        // before 1070-1090; at 1075 segment 0 is, and the timer waits 5 µs
        // for segment 1.
        let scan = f.detect_loss(s(0), 1000, 1070);
        assert_eq!((scan.lost, scan.wait_us), (0, Some(70)));
        let scan = f.detect_loss(s(0), 1075, 1070);
        assert_eq!((scan.lost, scan.wait_us), (1, Some(5)));
        assert_eq!(f.lost_end, s(100));
        let scan = f.detect_loss(s(0), 2000, 1070);
        // Segments 1 and 2; the scan stops at 4, sent after RACK.segment.
        assert_eq!((scan.lost, scan.wait_us), (2, None));
        assert_eq!(f.lost_end, s(400));
    }

    /// A fuzz finding: segments still unacknowledged 2^31 µs (35 minutes)
    /// after they were sent are lost, not "due in 71 minutes" (the wait
    /// underflowed).
    #[test]
    fn segments_older_than_35_minutes_are_lost() {
        let mut f = flight();
        f.on_sacked(s(300), s(400), s(300), s(400));
        let n = f.newest.take().expect("delivered");
        f.has_rack = true;
        (f.xmit_ts, f.end_seq, f.rtt_us) = (n.xmit, n.end, 1000);
        let now = (1u32 << 31) + 5_000;
        let scan = f.detect_loss(s(0), now, 1100);
        assert_eq!((scan.lost, scan.wait_us), (3, None));
    }

    #[test]
    fn reordering_and_cumulative_ack() {
        let mut f = flight();
        f.on_sacked(s(500), s(600), s(500), s(600));
        f.on_cumulative_ack(s(0));
        f.ack_done();
        assert!(!f.reordered, "one ACK's segments are not reordered");
        f.newest = None;
        // Segment 2 arrives late: delivered below RACK.fack, original.
        f.on_cumulative_ack(s(300));
        assert!(f.reordered);
        assert_eq!(f.head, s(300));
        assert_eq!(f.records().len(), 7);
        // A partial ACK inside a record keeps it.
        f.on_cumulative_ack(s(350));
        assert_eq!((f.head, f.records().len()), (s(350), 7));
        assert!(f.valid(s(350), s(1000)));
    }

    #[test]
    fn retransmission_updates_records_and_bound_holds() {
        let mut f = flight();
        f.on_send(s(100), s(300), 500, s(1000));
        let r = f.records();
        assert_eq!((r[1].xmit, r[2].xmit, r[3].xmit), (500, 500, 30));
        assert_eq!(r[1].flags, Record::RETRANSMITTED);
        let mut g = Flight::new(s(0));
        for i in 0..(MAX_RECORDS as u32 + 10) {
            g.on_send(s(i), s(i + 1), i, s(i));
        }
        assert_eq!(g.records().len(), MAX_RECORDS);
        assert_eq!(
            g.records().back().map(|r| r.end),
            Some(s(MAX_RECORDS as u32 + 10))
        );
        assert!(g.valid(s(0), s(MAX_RECORDS as u32 + 10)));
    }

    #[test]
    fn sent_after_orders_bursts_by_sequence() {
        assert!(sent_after(5, s(0), 4, s(100)));
        assert!(sent_after(5, s(200), 5, s(100)));
        assert!(!sent_after(5, s(100), 5, s(100)));
        assert!(sent_after(3, s(0), u32::MAX - 2, s(0)));
    }
}
