//! Moving a connection between stacks: its complete state as an opaque [`Snapshot`].

use super::*;
use crate::FourTuple;

/// A connection's complete state, for moving it to another core: produced by
/// [`crate::Stack::export`], consumed by [`crate::Stack::import`]. Opaque: the
/// stack's internals are not part of the API, so only a stack of the same
/// build can read it. Instants in it are absolute, so both stacks must be fed
/// the same clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Address pair.
    tuple: FlowKey,
    /// State.
    state: State,
    /// Flags (see [`Flags`]).
    flags: Flags,
    /// Send sequence space.
    snd: SendState,
    /// The send side's handshake, recovery, ECN and MTU search state.
    snd_rare: SendRare,
    /// Receive sequence space.
    rcv: ReceiveState,
    /// The receive side's IRS, FIN ahead, SACK and D-SACK state.
    rcv_rare: RecvRare,
    /// Timestamps.
    ts: TimestampState,
    /// The delayed ACK and liveness.
    timers: TimerState,
    /// The other timers and their counters.
    timers_rare: TimerRare,
    /// Unanswered keepalive probes.
    keepalive_probes: u8,
    /// RTT estimator.
    rtt: RttEstimator,
    /// The segment timed for an RTT sample.
    rtt_seq: TimedSegment,
    /// Congestion controller.
    cc: Controller,
    /// Buffer auto-tuning.
    tuning: TuningState,
    /// Send buffer capacity (as grown so far).
    send_capacity: usize,
    /// Unacknowledged and unsent data, starting at `snd.una` (or ISS + 1).
    send_data: Vec<u8>,
    /// Receive buffer capacity (as grown so far).
    recv_capacity: usize,
    /// Receive buffer headroom past the capacity, for data up to a right
    /// edge that window-scale rounding put past the capacity.
    recv_headroom: usize,
    /// In-order data not yet read by the application.
    recv_data: Vec<u8>,
    /// Out-of-order data: (offset from `rcv.nxt`, bytes).
    out_of_order: Vec<(u32, Vec<u8>)>,
    /// The SACK scoreboard: ranges above `snd.una` the peer reported
    /// holding (RFC 6675 §3).
    sacked: Vec<(SeqNumber, SeqNumber)>,
    /// RACK-TLP (RFC 8985): the send time of every segment in flight and
    /// the RACK and TLP variables, so that loss detection carries on
    /// across the move (without them it would fall back to `DupThresh`).
    rack: crate::rack::Rack,
    /// The application's word for the connection.
    user_data: u64,
}

impl Snapshot {
    /// The connection's address pair.
    pub fn four_tuple(&self) -> FourTuple {
        self.tuple.tuple()
    }

    /// The connection's address pair as the stack keeps it.
    pub(crate) fn key(&self) -> &FlowKey {
        &self.tuple
    }

    /// Gives back what the snapshot holds on the heap (its buffers'
    /// bytes, its scoreboard, RACK's records): a part's vector is kept for
    /// the next export ([`Connection::export_over`] writes every field
    /// again), not the bytes of the connections it carried.
    pub(crate) fn release_data(&mut self) {
        self.send_data = Vec::new();
        self.recv_data = Vec::new();
        self.out_of_order = Vec::new();
        self.sacked = Vec::new();
        self.rack.flight = None;
    }

    /// The connection's state when it was exported.
    pub fn state(&self) -> State {
        self.state
    }

    /// The RST that tells the peer of a connection no stack took (its
    /// import refused): as the connection itself would have sent it
    /// (RFC 9293 §3.10.4 ABORT, at [`SendState::acceptable_seq`]), so
    /// that the peer learns now rather than at its next segment (an idle
    /// one without keepalive never would). None where the peer has
    /// nothing to reset: before its SYN was seen, and in TIME-WAIT.
    pub(crate) fn refusal_reset(&self) -> Option<PendingRst> {
        let synced = self.state.is_synchronized() || self.state == State::SynReceived;
        (synced && self.state != State::TimeWait).then(|| PendingRst {
            tuple: self.tuple,
            seq: self.snd.acceptable_seq(),
            ack: Some(self.rcv.nxt),
            why: ResetReason::Aborted,
        })
    }
}

impl Connection {
    /// Captures the complete state; kept payload is copied out of
    /// `frames`.
    pub(crate) fn export(&self, lent: &LentFrames, frames: &dyn FrameStore) -> Snapshot {
        Snapshot {
            tuple: self.tuple,
            state: self.state,
            flags: self.exported_flags(),
            snd: self.snd,
            snd_rare: self.snd_rare,
            rcv_rare: self.rcv_rare,
            rcv: self.rcv,
            ts: self.ts,
            timers: self.timers,
            timers_rare: self.timers_rare,
            keepalive_probes: self.keepalive_probes,
            rtt: self.rtt,
            rtt_seq: self.rtt_seq,
            cc: self.cc,
            tuning: self.tune,
            send_capacity: self.send_buf.capacity(),
            send_data: self.send_data(),
            recv_capacity: self.recv_buf.capacity(),
            recv_headroom: self.recv_buf.headroom(),
            recv_data: self.recv_buf.to_vec(lent, frames),
            out_of_order: self.out_of_order_data(),
            sacked: self.scoreboard.ranges().to_vec(),
            rack: self.rack.clone(),
            user_data: self.user_data,
        }
    }

    /// [`Connection::export`] written over `out`, a snapshot of another
    /// connection that an import left in a part's vector kept for reuse
    /// ([`Snapshot::release_data`]): each field assigned where it lies,
    /// not built aside and copied into the part (a snapshot is some 640
    /// bytes: a copy of about 90 instructions a connection). Every field
    /// is written (each is bound below, and a binding left unused is a
    /// warning): nothing of the connection `out` held stays.
    pub(crate) fn export_over(
        &self,
        lent: &LentFrames,
        frames: &dyn FrameStore,
        out: &mut Snapshot,
    ) {
        let Snapshot {
            tuple,
            state,
            flags,
            snd,
            snd_rare,
            rcv,
            rcv_rare,
            ts,
            timers,
            timers_rare,
            keepalive_probes,
            rtt,
            rtt_seq,
            cc,
            tuning,
            send_capacity,
            send_data,
            recv_capacity,
            recv_headroom,
            recv_data,
            out_of_order,
            sacked,
            rack,
            user_data,
        } = out;
        *tuple = self.tuple;
        *state = self.state;
        *flags = self.exported_flags();
        *snd = self.snd;
        *snd_rare = self.snd_rare;
        *rcv = self.rcv;
        *rcv_rare = self.rcv_rare;
        *ts = self.ts;
        *timers = self.timers;
        *timers_rare = self.timers_rare;
        *keepalive_probes = self.keepalive_probes;
        *rtt = self.rtt;
        *rtt_seq = self.rtt_seq;
        *cc = self.cc;
        *tuning = self.tune;
        *send_capacity = self.send_buf.capacity();
        *send_data = self.send_data();
        *recv_capacity = self.recv_buf.capacity();
        *recv_headroom = self.recv_buf.headroom();
        *recv_data = self.recv_buf.to_vec(lent, frames);
        *out_of_order = self.out_of_order_data();
        *sacked = self.scoreboard.ranges().to_vec();
        rack.clone_from(&self.rack);
        *user_data = self.user_data;
    }

    /// The flags a snapshot carries.
    #[inline]
    fn exported_flags(&self) -> Flags {
        let mut flags = self.flags;
        // Both are this stack's view; the importing stack counts the
        // connection in full.
        flags.clear(Flags::IN_BACKLOG | Flags::RCV_PARKED | Flags::ACK_QUEUED);
        if self.rcv.acks_owed > 0 {
            // What was set aside for its owed ACKs stays with this stack.
            flags.set(Flags::ACKS_UNRECORDED);
        }
        flags
    }

    /// The unacknowledged and unsent bytes (an idle connection's empty
    /// buffer costs no call).
    #[inline]
    fn send_data(&self) -> Vec<u8> {
        if self.send_buf.is_empty() {
            Vec::new()
        } else {
            self.send_buf.to_vec()
        }
    }

    /// The out-of-order bytes held: (offset from `rcv.nxt`, bytes). None
    /// without a call (out of line, the copy cost an export 23
    /// instructions a connection with none).
    #[inline]
    fn out_of_order_data(&self) -> Vec<(u32, Vec<u8>)> {
        if self.assembler.is_empty() {
            return Vec::new();
        }
        self.out_of_order_held()
    }

    /// [`Connection::out_of_order_data`] when some are held.
    fn out_of_order_held(&self) -> Vec<(u32, Vec<u8>)> {
        let mut out_of_order = Vec::new();
        for (s, e) in self.assembler.ranges() {
            let mut v = vec![0; (e - s) as usize];
            self.recv_buf.read_unallocated(s as usize, &mut v);
            out_of_order.push((s, v));
        }
        out_of_order
    }

    /// Rebuilds a connection from a snapshot into `out` (a free slot), its
    /// buffers in `pool`'s chunks; `out` is left as it was if the
    /// snapshot is not valid. `send_max` is the largest send buffer the
    /// importing stack allows ([`Config::send_buffer_max`]): the most a
    /// connection can have queued, past a capacity its application later
    /// lowered ([`Connection::set_send_buffer`]) included.
    pub(crate) fn import_into(
        s: &Snapshot,
        pool: &mut ChunkPool,
        send_max: usize,
        out: &mut Option<Connection>,
    ) -> Result<(), crate::Error> {
        if s.send_data.len() > s.send_capacity.max(send_max)
            || s.recv_data.len() > s.recv_capacity.saturating_add(s.recv_headroom)
            || matches!(s.state, State::Closed | State::Listen)
        {
            return Err(crate::Error::InvalidSnapshot);
        }
        let mut scoreboard = Scoreboard::new();
        for &(l, r) in &s.sacked {
            if l < s.snd.una || r > s.snd.max || r <= l {
                return Err(crate::Error::InvalidSnapshot);
            }
            scoreboard.add(l, r);
        }
        if s.rack
            .flight
            .as_deref()
            .is_some_and(|f| !f.valid(s.snd.una, s.snd.max))
        {
            return Err(crate::Error::InvalidSnapshot);
        }
        // Bytes queued past a capacity the application lowered stay
        // queued, as they did before the move: every byte goes in, then
        // the buffer gets the application's size back.
        let mut send_buf = ChunkBuffer::new(s.send_data.len().max(s.send_capacity));
        // Taken whole, past the stack's send memory if need be (as the
        // receive side's bytes are): the bytes are the application's. An
        // idle connection's buffers are empty: nothing to write into
        // them, nor to count (the writes' and the counts' cost was about
        // a tenth of an idle connection's import).
        let queued = if s.send_data.is_empty() {
            0
        } else {
            let queued = send_buf.enqueue_slice(pool, &s.send_data);
            pool.queued_to_send(queued);
            queued
        };
        send_buf.set_capacity(s.send_capacity);
        let mut recv_buf = RecvBuffer::new(s.recv_capacity);
        recv_buf.resize(s.recv_capacity, s.recv_headroom);
        let mut assembler = Assembler::new();
        let mut valid = s.recv_data.is_empty()
            || recv_buf.write_unallocated(pool, 0, &s.recv_data) == s.recv_data.len();
        if valid && !s.recv_data.is_empty() {
            recv_buf.enqueue_unallocated(&mut LentFrames::default(), s.recv_data.len());
        }
        if valid {
            for (off, bytes) in &s.out_of_order {
                let n = recv_buf.write_unallocated(pool, *off as usize, bytes);
                if n != bytes.len()
                    || *off == 0
                    || assembler.add(*off, n as u32, usize::MAX) != Ok(0)
                {
                    valid = false;
                    break;
                }
            }
        }
        if !valid {
            pool.dropped_from_send(queued);
            send_buf.release(pool);
            recv_buf.release(pool, &mut LentFrames::default());
            return Err(crate::Error::InvalidSnapshot);
        }
        let compactable = s.state == State::TimeWait && s.flags.has(Flags::APP_CLOSED);
        // What the buffers hold, not what the exporter's bits said.
        let mut flags = s.flags;
        // SEND_MEMORY_WAIT: the exporter's list of waiters stays behind, so
        // a connection that waited for send memory there hears `Writable`
        // here at once (this stack's memory is another's).
        let derived = Flags::SEND_QUEUED
            | Flags::HOLES
            | Flags::SACKED
            | Flags::UNDO
            | Flags::PERSISTING
            | Flags::SEND_MEMORY_WAIT;
        // This stack has no queued entry for it: the wheel takes its
        // delayed ACK (`Connection::next_deadline`).
        flags.clear(derived | Flags::ACK_QUEUED);
        for (bit, holds) in [
            (Flags::SEND_QUEUED, !send_buf.is_empty()),
            (Flags::HOLES, !assembler.is_empty()),
            (Flags::SACKED, !scoreboard.is_empty()),
            (Flags::UNDO, s.snd_rare.undo.is_some()),
            (
                Flags::PERSISTING,
                s.timers_rare.persist.is_some() || s.timers_rare.persist_backoff != 0,
            ),
        ] {
            if holds {
                flags.set(bit);
            }
        }
        *out = Some(Connection {
            tuple: s.tuple,
            state: s.state,
            flags,
            // A closed connection in TIME-WAIT becomes a compact record.
            events: if compactable {
                ev::COMPACT
            } else if s.flags.has(Flags::SEND_MEMORY_WAIT) {
                ev::WRITABLE
            } else {
                0
            },
            close_reason: CloseReason::Normal,
            snd: s.snd,
            snd_rare: s.snd_rare,
            rcv_rare: s.rcv_rare,
            rcv: s.rcv,
            ts: s.ts,
            timers: s.timers,
            timers_rare: s.timers_rare,
            keepalive_probes: s.keepalive_probes,
            rtt: s.rtt,
            rtt_seq: s.rtt_seq,
            cc: s.cc,
            tune: s.tuning,
            assembler,
            scoreboard,
            rack: s.rack.clone(),
            send_buf,
            recv_buf,
            user_data: s.user_data,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::connection::State;
    use crate::time::{Duration, Instant};
    use crate::{Config, Error, Snapshot, Stack};
    use std::net::SocketAddr;

    /// Moves every segment `from` has to send into `to`.
    fn pass(from: &mut Stack, to: &mut Stack, now: Instant) {
        let mut buf = [0u8; 2048];
        while let Some(t) = from.poll_transmit(now, &mut buf) {
            let (src, dst) = (t.src, t.dst);
            to.handle_segment(now, src.ip(), dst.ip(), &buf[..t.len]);
        }
    }

    /// A snapshot may carry queued bytes past its send capacity (an
    /// application that lowered it keeps what it had queued), but never
    /// more than the importing stack lets a send buffer grow to: a spoiled
    /// one is refused before anything is taken from the pool.
    #[test]
    fn a_snapshot_queueing_past_the_largest_send_buffer_is_refused() {
        let (client, server): (SocketAddr, SocketAddr) = (
            "10.0.0.1:40000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        );
        let now = Instant::ZERO;
        let mut there = Stack::new(Config::new([4; 16]));
        there.listen(server).unwrap();
        let mut peer = Stack::new(Config::new([5; 16]));
        peer.connect(now, client, server).unwrap();
        for _ in 0..3 {
            pass(&mut peer, &mut there, now);
            pass(&mut there, &mut peer, now);
        }
        let conn = there.bucket_connections(0)[0];
        let snap = there.export(conn).unwrap();
        let mut cfg = Config::new([2; 16]);
        cfg.send_buffer_max = 128 * 1024;
        let max = cfg.send_buffer_max.max(cfg.send_buffer);
        assert!(snap.send_capacity < max);
        let mut spoiled = snap.clone();
        spoiled.send_data = vec![7; max + 1];
        let mut here = Stack::new(cfg);
        assert_eq!(here.import(now, spoiled), Err(Error::InvalidSnapshot));
        assert_eq!((here.connection_count(), here.buffer_memory()), (0, 0));
        // Up to the bound, past its capacity, it is taken whole.
        let mut full = snap;
        full.send_data = vec![7; max];
        let h = here.import(now, full).expect("within the bound");
        assert_eq!(here.info(h).unwrap().unsent, max);
        assert!(here.send_capacity(h).unwrap() < max, "its own capacity");
    }

    /// An import keeps its part's vector, and the next export writes its
    /// snapshots over those (`Connection::export_over`): each connection
    /// leaves with its own complete state, the same as a snapshot built
    /// afresh, nothing of the connection a reused snapshot held before.
    #[test]
    fn a_part_written_over_carries_each_connections_own_state() {
        let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let now = Instant::ZERO;
        let mut a = Stack::new(Config::new([4; 16]));
        a.listen(server).unwrap();
        let mut peer = Stack::new(Config::new([5; 16]));
        let mut peers = Vec::new();
        for port in 40000..40004 {
            let client = SocketAddr::new("10.0.0.1".parse().unwrap(), port);
            peers.push(peer.connect(now, client, server).unwrap());
        }
        for _ in 0..3 {
            pass(&mut peer, &mut a, now);
            pass(&mut a, &mut peer, now);
        }
        // States apart: bytes unsent on one, unread on another.
        let conns = a.bucket_connections(0);
        assert_eq!(conns.len(), 4);
        assert_eq!(a.send(conns[1], &[7; 300]), Ok(300));
        assert_eq!(peer.send(peers[2], &[9; 200]), Ok(200));
        pass(&mut peer, &mut a, now);
        let mut b = Stack::new(Config::new([6; 16]));
        b.listen(server).unwrap();
        let mut moves = Vec::new();
        for _ in 0..4 {
            let export = a.export_bucket(0);
            let mut snaps: Vec<Snapshot> =
                export.connections().iter().map(|c| c.1.clone()).collect();
            snaps.sort_by_key(|s| s.four_tuple().remote.port());
            moves.push((
                snaps,
                export
                    .connections()
                    .iter()
                    .map(|c| c.1.four_tuple())
                    .collect::<Vec<_>>(),
            ));
            assert!(b.import_bucket(now, export).iter().all(Result::is_ok));
            std::mem::swap(&mut a, &mut b);
        }
        // The later exports wrote over kept parts, whose snapshots were
        // other connections' (the order changes from move to move).
        assert!(moves.windows(2).any(|w| w[0].1 != w[1].1), "{moves:?}");
        for (snaps, _) in &moves[1..] {
            assert_eq!(snaps, &moves[0].0);
        }
        assert!(moves[0].0.iter().any(|s| !s.send_data.is_empty()));
        assert!(moves[0].0.iter().any(|s| !s.recv_data.is_empty()));
    }

    #[test]
    fn a_refused_snapshot_leaves_the_time_wait_record_it_would_have_replaced() {
        let (client, server): (SocketAddr, SocketAddr) = (
            "10.0.0.1:40000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        );
        let mut now = Instant::ZERO;
        // `here` holds the tuple in TIME-WAIT: it closed first.
        let mut here = Stack::new(Config::new([2; 16]));
        here.listen(server).unwrap();
        let mut peer = Stack::new(Config::new([3; 16]));
        let c = peer.connect(now, client, server).unwrap();
        for _ in 0..3 {
            pass(&mut peer, &mut here, now);
            pass(&mut here, &mut peer, now);
        }
        let mut accepted = None;
        while let Some(e) = here.poll_event() {
            if let crate::Event::Accepted { conn, .. } = e {
                accepted = Some(conn);
            }
        }
        here.close(accepted.expect("accepted")).unwrap();
        for _ in 0..3 {
            now += Duration::from_millis(1);
            pass(&mut here, &mut peer, now);
            pass(&mut peer, &mut here, now);
        }
        peer.close(c).unwrap();
        for _ in 0..3 {
            now += Duration::from_millis(1);
            pass(&mut peer, &mut here, now);
            pass(&mut here, &mut peer, now);
        }
        assert_eq!(here.time_wait_count(), 1);
        // Another stack's live connection on the same tuple, exported and
        // spoiled: the import refuses it and keeps the record.
        let mut there = Stack::new(Config::new([4; 16]));
        there.listen(server).unwrap();
        let mut again = Stack::new(Config::new([5; 16]));
        again.connect(now, client, server).unwrap();
        for _ in 0..3 {
            pass(&mut again, &mut there, now);
            pass(&mut there, &mut again, now);
        }
        let conn = there.bucket_connections(0)[0];
        let mut snap = there.export(conn).unwrap();
        snap.state = State::Listen;
        assert_eq!(here.import(now, snap), Err(Error::InvalidSnapshot));
        assert_eq!(here.time_wait_count(), 1, "the record stays");
        assert_eq!(
            here.connection_count(),
            1,
            "the record alone: nothing imported"
        );
    }
}
