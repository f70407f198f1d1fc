//! The per-connection state machine (RFC 9293 §3.10), with RFC 7323 window
//! scaling, timestamps and PAWS, RFC 6298 retransmission timing, RFC 5681 /
//! RFC 6582 congestion control, RFC 6675 SACK-based loss recovery, delayed ACKs, Nagle, persist and keepalive,
//! and send/receive buffer auto-tuning (receive: dynamic right-sizing after
//! Fisk & Feng, as Linux `tcp_rcv_space_adjust`; send: Linux
//! `tcp_sndbuf_expand`).
//!
//! A connection never touches the network: the owning [`crate::Stack`] feeds
//! it segments and timer expiries and asks it for segments to send.

mod app;
mod ecn;
mod input;
mod output;
mod plpmtud;
mod pmtu;
mod predict;
mod rack;
mod recovery;
mod snapshot;
mod state;
mod timers;
mod tuning;
mod unreachable;

pub(crate) use pmtu::TooBigOutcome;
pub use snapshot::Snapshot;
pub use state::State;
pub(crate) use state::{
    Flags, ReceiveState, RecvRare, SendRare, SendState, TimedSegment, TimerRare, TimerState,
    TimestampState, TuningState, UndoState,
};
pub(crate) use unreachable::UnreachableOutcome;

use crate::assembler::Assembler;
use crate::buffer::ChunkBuffer;
use crate::cc::{Ack, CongestionControl, Controller};
use crate::challenge::ChallengeBudget;
use crate::chunk_pool::ChunkPool;
use crate::flow_key::FlowKey;
use crate::isn::IsnGenerator;
use crate::lent_frames::{FrameStore, LentFrames};
use crate::owed_acks::{AckSack, OwedAcks};
use crate::rack::FlightPool;
use crate::recv_buffer::RecvBuffer;
use crate::rto::RttEstimator;
use crate::sack::{Scoreboard, DUP_THRESH};
use crate::seq::SeqNumber;
use crate::time::{Deadline, Duration, Instant};
use crate::time_wait::{self, TimeWait, Timestamps, PAWS_IDLE};
use crate::{CloseReason, Config, Stats};
use flowlane_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use std::collections::VecDeque;

/// Event bits a connection raises for the stack to turn into events.
pub(crate) mod ev {
    pub(crate) const ESTABLISHED: u8 = 1 << 0;
    pub(crate) const READABLE: u8 = 1 << 1;
    pub(crate) const WRITABLE: u8 = 1 << 2;
    pub(crate) const PEER_CLOSED: u8 = 1 << 3;
    pub(crate) const CLOSED: u8 = 1 << 4;
    /// In TIME-WAIT and closed by the application: the stack replaces the
    /// connection by a compact record ([`super::Connection::compactable`]).
    pub(crate) const COMPACT: u8 = 1 << 5;
    /// A delayed ACK was armed and not queued yet: the stack puts its
    /// deadline in its queue of delayed ACKs (`Stack::acks_due`).
    pub(crate) const ACK_DELAYED: u8 = 1 << 6;
}

/// An RST to send on behalf of no (or a dying) connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingRst {
    pub tuple: FlowKey,
    pub seq: SeqNumber,
    /// `Some` to set ACK with this acknowledgment number.
    pub ack: Option<SeqNumber>,
    /// Why it is sent: counted under that name once it goes out.
    pub why: ResetReason,
}

/// Why the stack sends an RST, each counted in [`crate::Stats`] when the
/// RST goes out (their sum is [`crate::Stats::resets_out`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetReason {
    /// A segment for no connection and no listener (RFC 9293 §3.10.7.1).
    NoConnection,
    /// An ACK to a listener that opened nothing: no cookie of ours, or one
    /// that did not check (RFC 9293 §3.10.7.2).
    ListenerAck,
    /// An ACK that did not acknowledge our SYN, in SYN-SENT or
    /// SYN-RECEIVED (RFC 9293 §3.10.7.3, §3.10.7.4).
    HandshakeAck,
    /// A SYN (or returned cookie) the listener's SYN filter refused.
    Refused,
    /// Data for a connection the application had closed (RFC 2525 §2.17).
    DataAfterClose,
    /// The application aborted the connection, or closed it with data
    /// unread (RFC 9293 §3.10.5, RFC 2525 §2.17); or its listener went
    /// away before the handshake completed; or no stack took it when it
    /// moved (its import refused).
    Aborted,
    /// Retransmissions ran out (RFC 1122 §4.2.3.5).
    TimedOut,
}

impl Stats {
    /// Counts an RST sent, under its reason.
    #[inline(never)]
    pub(crate) fn count_reset(&mut self, why: ResetReason) {
        self.resets_out += 1;
        *match why {
            ResetReason::NoConnection => &mut self.resets_no_connection,
            ResetReason::ListenerAck => &mut self.resets_listener_ack,
            ResetReason::HandshakeAck => &mut self.resets_handshake_ack,
            ResetReason::Refused => &mut self.resets_refused,
            ResetReason::DataAfterClose => &mut self.resets_data_after_close,
            ResetReason::Aborted => &mut self.resets_aborted,
            ResetReason::TimedOut => &mut self.resets_timed_out,
        } += 1;
    }
}

/// What the stack owes segments it refuses: the RSTs to send, and the
/// budget of challenge ACKs (RFC 5961 §7). Both are off the fast path, so
/// one pointer in [`Ctx`] carries them (a context is built per segment).
#[derive(Debug)]
pub(crate) struct Replies {
    pub rsts: VecDeque<PendingRst>,
    /// The stack's budget of challenge ACKs (RFC 5961 §7).
    pub challenges: ChallengeBudget,
    /// The SACK state of immediate ACKs owed while later segments of a
    /// batch changed it (RFC 2018 §4, RFC 2883 §4).
    pub owed_acks: OwedAcks,
}

/// What a connection needs from its stack while processing.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub cfg: &'a Config,
    pub stats: &'a mut Stats,
    /// RSTs to send and the challenge-ACK budget.
    pub replies: &'a mut Replies,
    /// The chunks behind every buffer of the stack.
    pub pool: &'a mut ChunkPool,
    /// The frames the stack keeps received payload in (zero-copy receive).
    pub lent: &'a mut LentFrames,
    /// RACK flights that are over, for the next one.
    pub flights: &'a mut FlightPool,
    /// What this connection may promise under the stack's receive memory.
    pub mem: RecvMemory,
}

/// What a connection may promise of the stack's receive memory
/// ([`Config::recv_memory`]). Every connection may always be offered one
/// segment (the floor: each can make progress, and an idle one can always
/// take a request without waiting for memory); what it holds and promises
/// beyond the floor ([`Connection::rcv_commitment`]) comes from the budget:
/// within `room`, and under pressure within `share` too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvMemory {
    /// The connection's commitment when the context was made (the stack
    /// settles its total against it afterwards).
    pub mine: usize,
    /// Every connection's commitment together, this one's included.
    pub total: usize,
    /// [`Config::recv_memory`].
    pub budget: usize,
    /// Live connections that share the budget (all but half-open passive
    /// ones, which a flood could otherwise multiply).
    pub live: usize,
    /// Bytes every connection may hold or promise outside the budget (one
    /// segment of our MSS).
    pub floor: usize,
    /// What the connection's commitment is counted past
    /// ([`Connection::rcv_commitment`]): the floor, or everything for a
    /// parked connection, which commits nothing (so that the segment path
    /// settles the total without asking again whether it is parked).
    pub charged_from: usize,
}

impl RecvMemory {
    /// No limit (a connection being built, or tests).
    pub(crate) const UNLIMITED: RecvMemory = RecvMemory {
        mine: 0,
        total: 0,
        budget: usize::MAX / 4,
        live: 1,
        floor: 0,
        charged_from: 0,
    };

    /// The view of `conn` when all `live` connections together commit
    /// `total` of `cfg.recv_memory`. A parked connection
    /// ([`Flags::RCV_PARKED`]) commits nothing, and may be offered the
    /// floor and no more (what it was offered before stands): its budget
    /// is none.
    #[inline]
    pub(crate) fn of(conn: &Connection, cfg: &Config, total: usize, live: usize) -> Self {
        let floor = usize::from(cfg.mss);
        let parked = conn.flags.has(Flags::RCV_PARKED);
        let charged_from = if parked { usize::MAX } else { floor };
        RecvMemory {
            mine: conn.rcv_commitment(charged_from),
            total,
            budget: if parked { 0 } else { cfg.recv_memory },
            live,
            floor,
            charged_from,
        }
    }

    /// The budget less every other connection's commitment.
    #[inline]
    pub(crate) fn room(&self) -> usize {
        self.budget
            .saturating_sub(self.total.saturating_sub(self.mine))
    }

    /// Under pressure (more than half the budget committed): the budget
    /// divided among the live connections; `None` otherwise.
    #[inline]
    pub(crate) fn share(&self) -> Option<usize> {
        (self.total > self.budget / 2).then(|| self.budget / self.live.max(1))
    }

    /// The most the connection may hold and promise in all (queued bytes
    /// plus window), given that it holds and promises `current` now (never
    /// taken back), its window offered in units of `1 << shift` bytes
    /// (the window scale's, RFC 7323 §2.3). The floor is a whole number of
    /// units: rounded down (1,460 bytes at a shift of 7 went out as 1,408)
    /// it was less than the sender's segment, which a sender that avoids
    /// the silly window syndrome (RFC 9293 §3.8.6.2.1, as Linux does) does
    /// not send into, and the receiver's own avoidance then kept the
    /// window from reopening: a connection held to the floor got a
    /// segment per persist timeout, about 200 ms. (What it holds past the
    /// segment, less than a unit, is counted against the budget.)
    #[inline]
    pub(crate) fn limit(&self, current: usize, shift: u8) -> usize {
        let mut limit = self.room();
        if let Some(share) = self.share() {
            limit = limit.min(share);
        }
        // Rounded up with shifts: no division on the path of every ACK.
        let floor = ((self.floor + (1 << shift) - 1) >> shift) << shift;
        (limit + floor).max(current)
    }
}

/// The stack's memory a context borrows: chunks, lent frames (and the
/// frame lent with the segment), RACK flights.
pub(crate) type Memory<'a> = (&'a mut ChunkPool, &'a mut LentFrames, &'a mut FlightPool);

impl<'a> Ctx<'a> {
    /// A context with no receive-memory limit, for a connection that is
    /// being refused or aborted outside of segment processing.
    pub(crate) fn unlimited(
        now: Instant,
        cfg: &'a Config,
        stats: &'a mut Stats,
        replies: &'a mut Replies,
        memory: Memory<'a>,
    ) -> Ctx<'a> {
        let (pool, lent, flights) = memory;
        Ctx {
            now,
            cfg,
            stats,
            replies,
            pool,
            lent,
            flights,
            mem: RecvMemory::UNLIMITED,
        }
    }

    /// Queues an RST, or counts it dropped when the queue is full.
    pub(crate) fn queue_rst(&mut self, rst: PendingRst) {
        if self.replies.rsts.len() < self.cfg.max_pending_resets {
            self.replies.rsts.push_back(rst);
        } else {
            self.stats.resets_dropped += 1;
        }
    }
}

/// RFC 9293 §3.7.1: default send MSS when the peer sends no MSS option
/// (IPv4: 576 - 40).
const DEFAULT_MSS: u16 = 536;
/// RFC 9293 §3.7.1: the same over IPv6 (1280 - 60, RFC 8200 §5's minimum
/// link MTU less the headers).
const DEFAULT_MSS_V6: u16 = 1220;

/// The MSS a peer's SYN (or SYN-ACK) announces: its MSS option, or RFC
/// 9293 §3.7.1's default (MUST-15: 536 over IPv4, 1220 over IPv6) where it
/// sends none. An option of 0 is taken as none, as Linux does
/// (`tcp_parse_options` skips it): no peer can mean that no byte fits, and
/// taken as a size it was raised to the 64-byte floor, a segment of 52
/// bytes with timestamps where Linux sends 524.
pub(crate) fn announced_mss(options: &TcpOptions, ipv6: bool) -> u16 {
    match options.mss {
        Some(mss) if mss > 0 => mss,
        _ if ipv6 => DEFAULT_MSS_V6,
        _ => DEFAULT_MSS,
    }
}
/// RFC 7323 §2.3: the largest window shift.
const MAX_WSCALE: u8 = 14;
/// A received segment at least this long is the peer's full size now
/// (`ReceiveState::mss_seen`), even if smaller than the largest seen: the
/// default MSS less the timestamp option, rounded down.
const MSS_LOWERS: u16 = 512;
/// Option bytes a timestamp option adds to every segment (NOP NOP + 10).
const TS_OPTION_LEN: u16 = 12;
/// Added to twice the SRTT in the loss probe timeout (RFC 8985 §7.2 adds
/// nothing; Linux adds `TCP_TIMEOUT_MIN`, 2 ms): on a sub-millisecond path
/// 2·SRTT is shorter than the scheduling delay of the receiver's ACK, and
/// a probe that races it is a spurious retransmission.
const PTO_MARGIN: Duration = Duration::from_millis(2);
/// Most immediate ACKs a connection owes at once (the burst one batch of
/// out-of-order segments can produce).
const MAX_ACKS_OWED: u8 = 64;
/// Loss probes per value of SND.UNA before the RTO takes over.
const MAX_LOSS_PROBES: u8 = 3;
/// Segments in the initial receive-space estimate and the floor of the send
/// buffer target (Linux `TCP_INIT_CWND`, RFC 6928's IW10).
const INIT_SEGMENTS: usize = 10;

/// One TCP connection.
///
/// The fields are in a fixed order (`repr(C)`), not Rust's order by size:
/// a segment of a steady transfer reads the fields from `tuple` to
/// `send_buf` and nothing after them, so that at 10 000 connections, when
/// each segment finds its connection out of the cache, it pulls in as few
/// lines as possible (issue 12's hot part; `layout.rs` keeps the order and
/// BENCHMARKS.md, session 31, has the lines each segment touches). A
/// receiver's segment reads no further than `recv_buf`'s counts (the
/// first four lines of a slot, session 36); a sender's ACK reads on to
/// `send_buf`, and of what follows, `cc`, `rtt`, `rtt_seq` and
/// `timers_rare`. What only the handshake, loss recovery and the
/// application's rarer calls read comes after those.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Connection {
    /// Compared with every segment's tuple after the table lookup, and
    /// read for the ports of every segment sent.
    pub tuple: FlowKey,
    pub flags: Flags,
    pub snd: SendState,
    pub state: State,
    /// Pending `ev::*` bits.
    pub events: u8,
    pub close_reason: CloseReason,
    /// Unanswered keepalive probes (RFC 1122 §4.2.3.6), reset by every
    /// segment: here, in what would be padding before `rcv`, rather than
    /// in the timers' cold part.
    pub keepalive_probes: u8,
    pub rcv: ReceiveState,
    pub ts: TimestampState,
    pub tune: TuningState,
    pub timers: TimerState,
    /// Last of what a receiver's segment reads: the piece list and the
    /// chunks' counts (a queue of lent frames reads no further).
    pub recv_buf: RecvBuffer,
    /// RACK-TLP state (RFC 8985; the segments in flight allocated only
    /// while there are some): its reordering deadline is one of the timers.
    pub rack: crate::rack::Rack,
    pub assembler: Assembler,
    pub send_buf: ChunkBuffer,
    // What a steady segment does not read.
    pub cc: Controller,
    pub rtt: RttEstimator,
    /// The segment timed for an RTT sample (RFC 6298 §3, one at a time,
    /// with or without timestamps): its end sequence number and send time.
    /// Cleared on retransmission (Karn). Beside `rtt`, which a sender's
    /// ACK reads too; a receiver's segment reads neither.
    pub rtt_seq: TimedSegment,
    /// The deadlines and counters a steady segment does not touch; a
    /// sender's ACK restarts `rto` here, beside `rtt`.
    pub timers_rare: TimerRare,
    /// RFC 6675 scoreboard (allocated only while SACK blocks are held).
    pub scoreboard: Scoreboard,
    pub snd_rare: SendRare,
    pub rcv_rare: RecvRare,
    /// The application's word for this connection ([`crate::Stack::set_user_data`]).
    pub user_data: u64,
}

/// The smallest shift that brings `capacity` within 16 bits (at most
/// [`MAX_WSCALE`]): its bit length less 16, with no loop (the SYN path
/// computes it for every passive open).
fn wscale_for(capacity: usize) -> u8 {
    let bits = usize::BITS - capacity.leading_zeros();
    bits.saturating_sub(16).min(u32::from(MAX_WSCALE)) as u8
}

/// The window scale we offer: for the largest receive buffer auto-tuning may
/// reach, not the initial one, since the shift is fixed at the handshake
/// (RFC 7323 §2.2) and the window can only grow up to 2^16 - 1 units of it.
/// The ISS of a connection a SYN reopens from TIME-WAIT whose old
/// incarnation sent up to `old_snd_max`: past every sequence number the old
/// one used, and its largest unscaled window besides (RFC 9293 §3.6.1
/// MAY-2, RFC 1122 §4.2.2.13; Linux's `tw_snd_nxt + 65535 + 2`), so that
/// none of its delayed segments falls in the new one's window, which PAWS
/// cannot tell without timestamps.
pub(crate) fn reopened_iss(old_snd_max: SeqNumber) -> SeqNumber {
    old_snd_max + 65_537
}

pub(crate) fn offered_wscale(cfg: &Config) -> u8 {
    wscale_for(cfg.recv_buffer.max(cfg.recv_buffer_max))
}

impl Connection {
    /// Bytes of the hot part: every field before `cc`, the first that a
    /// steady segment does not read (`layout.rs` holds its budget).
    pub(crate) const HOT_LEN: usize = std::mem::offset_of!(Connection, cc);

    fn blank(cfg: &Config, isn: &IsnGenerator, tuple: FlowKey, now: Instant) -> Self {
        let mut out = None;
        Self::blank_in(&mut out, cfg, isn, tuple, now, None, cfg.recv_buffer);
        out.expect("just built")
    }

    /// [`Connection::blank`] written into `out` (see
    /// [`Connection::new_passive_in`]), its ISS `iss` where given (a
    /// reopened TIME-WAIT), else the generator's, and its receive buffer
    /// `recv_buffer` bytes (a half-open one's is built at its size once).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn blank_in<'a>(
        out: &'a mut Option<Connection>,
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FlowKey,
        now: Instant,
        iss: Option<SeqNumber>,
        recv_buffer: usize,
    ) -> &'a mut Connection {
        let (generated, ts_offset) = isn.isn_and_ts_offset(&tuple, now);
        let iss = iss.unwrap_or(generated);
        let mut flags = Flags::default();
        if !cfg.nagle {
            flags.set(Flags::NODELAY);
        }
        let c = out.insert(Connection {
            tuple,
            state: State::Closed,
            flags,
            events: 0,
            close_reason: CloseReason::Normal,
            keepalive_probes: 0,
            user_data: 0,
            snd: SendState {
                una: iss,
                nxt: iss,
                max: iss,
                wnd: 0,
                max_wnd: 0,
                wl1: SeqNumber(0),
                wl2: iss,
                prev_una: iss,
                mss: DEFAULT_MSS,
                wscale: 0,
                dup_acks: 0,
            },
            snd_rare: SendRare {
                iss,
                recover: iss,
                undo: None,
                lost_rtx_dups: 0,
                retransmitted: 0,
                high_rxt: iss,
                rtx_mark: iss,
                lost_floor: iss,
                ecn_high: iss,
                mtu_high: 0,
                mtu_max: 0,
                mtu_probe: 0,
                mtu_probe_seq: iss,
            },
            rcv: ReceiveState {
                nxt: SeqNumber(0),
                adv: SeqNumber(0),
                wscale: 0,
                mss_seen: 0,
                unacked: 0,
                acks_owed: 0,
            },
            rcv_rare: RecvRare {
                irs: SeqNumber(0),
                fin_mark: SeqNumber(0),
                sacked: [SeqNumber(0); 3],
                dsack: (SeqNumber(0), SeqNumber(0)),
                rcv_rtt_seq: SeqNumber(0),
                rcv_rtt_time: Deadline::NONE,
            },
            ts: TimestampState {
                recent: 0,
                recent_age: now,
                offset: ts_offset,
                last_ack_sent: SeqNumber(0),
                rtt_floor: 0,
            },
            timers: TimerState {
                delayed_ack: Deadline::NONE,
                armed: None,
                last_recv: now,
            },
            timers_rare: TimerRare {
                rto: Deadline::NONE,
                rto_due: now,
                persist: Deadline::NONE,
                keepalive: Deadline::NONE,
                close: Deadline::NONE,
                retransmits: 0,
                soft_error: None,
                persist_backoff: 0,
                loss_probes: 0,
                invalid_ack: Default::default(),
                last_send: now,
                mtu_settled: 0,
            },
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            rtt_seq: TimedSegment::NONE,
            cc: Controller::new(cfg.congestion, DEFAULT_MSS as usize),
            tune: TuningState {
                // Linux tcp_init_buffer_space: min(window, TCP_INIT_CWND *
                // advmss).
                rcv_space: cfg
                    .recv_buffer
                    .min(INIT_SEGMENTS * usize::from(cfg.mss))
                    .min(u32::MAX as usize) as u32,
                rcv_space_seq: SeqNumber(0),
                rcv_space_time: now,
                rcv_rtt_us: 0,
                rcv_rtt_tsecr: 0,
            },
            assembler: Assembler::new(),
            scoreboard: Scoreboard::new(),
            rack: crate::rack::Rack::default(),
            send_buf: ChunkBuffer::new(cfg.send_buffer),
            recv_buf: RecvBuffer::new(recv_buffer),
        });
        c.ts.rtt_floor = c.tsval(now);
        c
    }

    /// Active open (RFC 9293 §3.10.1): SYN-SENT; the SYN goes out on the
    /// next `poll_transmit`.
    pub(crate) fn new_active(
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FlowKey,
        now: Instant,
    ) -> Self {
        let mut c = Self::blank(cfg, isn, tuple, now);
        c.state = State::SynSent;
        if cfg.window_scaling {
            c.flags.set(Flags::WS_OFFERED);
        }
        c
    }

    /// Passive open from a SYN received in LISTEN (RFC 9293 §3.10.7.2).
    /// Until the handshake completes, the receive buffer (and so the
    /// SYN-ACK's window) is [`Connection::half_open_buffer`]: at most
    /// `recv_memory / listen_backlog` (the whole 64 KiB buffer with the
    /// defaults), and one segment, which every connection may have outside
    /// the receive memory, once the stack already holds a quarter of a
    /// backlog half-open, its listeners together (`crowded`). A spoofed
    /// flood, whose half-open connections never complete, so promises at
    /// most a quarter of the receive memory instead of all of it, however
    /// many listeners it is spread over; a legitimate crowd's later
    /// handshakes see their full window one round trip later, in the
    /// first ACK.
    pub(crate) fn new_passive(
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FlowKey,
        now: Instant,
        syn: &TcpRepr,
        crowded: bool,
    ) -> Self {
        let mut out = None;
        Self::new_passive_in(&mut out, cfg, isn, tuple, now, syn, crowded, None);
        out.expect("just built")
    }

    /// [`Connection::new_passive`] built in `out` (a free slot): a
    /// connection is some 680 bytes, and built on the stack and moved into
    /// its slot it was copied twice more per passive open. `iss`: the ISS
    /// of a SYN that reopens TIME-WAIT ([`reopened_iss`]), else the
    /// generator's.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_passive_in<'a>(
        out: &'a mut Option<Connection>,
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FlowKey,
        now: Instant,
        syn: &TcpRepr,
        crowded: bool,
        iss: Option<SeqNumber>,
    ) -> &'a mut Connection {
        // At most the configured buffer.
        let buffer = Self::half_open_buffer(cfg, crowded);
        let c = Self::blank_in(out, cfg, isn, tuple, now, iss, buffer);
        c.state = State::SynReceived;
        c.flags.set(Flags::PASSIVE);
        c.rcv_rare.irs = SeqNumber(syn.seq);
        c.rcv.nxt = SeqNumber(syn.seq) + 1;
        c.rcv.adv = c.rcv.nxt;
        c.tune.rcv_space_seq = c.rcv.nxt;
        c.tune.rcv_space_time = now;
        if cfg.window_scaling && syn.options.window_scale.is_some() {
            c.flags.set(Flags::WS_OFFERED);
        }
        c.negotiate_options(cfg, syn, now);
        c.ecn_negotiate_passive(cfg, syn);
        // RFC 9293 §3.10.7.2: the SYN's window is never scaled.
        c.snd.wnd = u32::from(syn.window);
        c.snd.max_wnd = c.snd.wnd;
        c.snd.wl1 = SeqNumber(syn.seq);
        c.snd.wl2 = c.snd_rare.iss;
        c
    }

    /// The receive buffer of a half-open passive connection, and so the
    /// most its SYN-ACK offers: the receive memory divided over the
    /// backlog, within the configured buffer, and one segment (the floor
    /// every connection may have outside [`Config::recv_memory`]) when
    /// `crowded`. A SYN cookie's SYN-ACK offers the crowded one (cookies
    /// go out only once a backlog is full).
    pub(crate) fn half_open_buffer(cfg: &Config, crowded: bool) -> usize {
        let share = if crowded {
            0
        } else {
            cfg.recv_memory / cfg.listen_backlog.max(1)
        };
        share.max(usize::from(cfg.mss)).min(cfg.recv_buffer)
    }

    /// A passive open whose SYN-ACK carried a SYN cookie (`iss`), rebuilt
    /// from the ACK that returned it (`syn` reconstructed from the cookie
    /// and that ACK): as if the SYN-ACK offering `window` had been sent
    /// from a crowded listener's half-open connection (`window` is the
    /// crowded [`Connection::half_open_buffer`], one segment, which
    /// commits nothing of the receive memory). The ACK itself is then
    /// processed as in SYN-RECEIVED; the handshake's end gives the buffer
    /// its configured size, and the window grows from there within the
    /// receive memory, as every other connection's.
    pub(crate) fn from_cookie(
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FlowKey,
        now: Instant,
        syn: &TcpRepr,
        iss: SeqNumber,
        window: u16,
    ) -> Self {
        let mut c = Self::new_passive(cfg, isn, tuple, now, syn, true);
        debug_assert!(usize::from(window) <= Self::half_open_buffer(cfg, true));
        let s = &mut c.snd;
        (s.una, s.wl2, s.prev_una) = (iss, iss, iss);
        (s.nxt, s.max) = (iss + 1, iss + 1);
        let r = &mut c.snd_rare;
        (r.iss, r.recover) = (iss, iss);
        (r.high_rxt, r.rtx_mark, r.lost_floor) = (iss, iss, iss);
        c.rcv.adv = c.rcv.nxt + usize::from(window);
        c.ts.last_ack_sent = c.rcv.nxt;
        c
    }

    fn eff_mss(&self) -> usize {
        self.snd.mss as usize
    }

    fn tsval(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts.offset)
    }

    /// Sequence number of the first byte in the send buffer.
    fn data_start(&self) -> SeqNumber {
        // Until our SYN is acknowledged (RFC 9293 §3.10.7.3: leaving
        // SYN-SENT or SYN-RECEIVED takes the ACK of our SYN), SND.UNA is
        // the SYN itself and the data starts after it. Told by the state,
        // not by `SND.UNA == ISS`: after 2^32 bytes SND.UNA comes back to
        // the ISS, and the buffer would be read one byte off.
        if matches!(self.state, State::SynSent | State::SynReceived) {
            self.snd_rare.iss + 1
        } else {
            self.snd.una
        }
    }

    /// Sequence number our FIN occupies, once queued.
    fn fin_seq(&self) -> Option<SeqNumber> {
        if !self.flags.has(Flags::FIN_QUEUED) {
            None
        } else if self.flags.has(Flags::FIN_ACKED) {
            Some(self.snd.una - 1)
        } else {
            Some(self.data_start() + self.send_buf.len())
        }
    }

    fn fin_acked(&self) -> bool {
        self.flags.has(Flags::FIN_ACKED)
    }

    /// RFC 6191 §2: whether a SYN (no ACK) for this connection, in
    /// TIME-WAIT, may open a new incarnation of it (see
    /// [`time_wait::accepts_new_incarnation`]).
    pub(crate) fn accepts_new_incarnation(&self, cfg: &Config, syn: &TcpRepr) -> bool {
        let recent = self.flags.has(Flags::TIMESTAMPS).then_some(self.ts.recent);
        time_wait::accepts_new_incarnation(cfg, recent, self.rcv.nxt, syn)
    }

    /// Whether the application may still read bytes from it (it has not
    /// closed it, and some wait).
    #[inline]
    pub(crate) fn holds_unread(&self) -> bool {
        !self.flags.has(Flags::APP_CLOSED) && !self.recv_buf.is_empty()
    }

    /// Whether the stack may replace this connection by a compact
    /// TIME-WAIT record: it is in TIME-WAIT and the application closed it.
    #[inline]
    pub(crate) fn compactable(&self) -> bool {
        self.state == State::TimeWait && self.flags.has(Flags::APP_CLOSED)
    }

    /// The sequence number of a FIN that arrived ahead of missing data.
    #[inline]
    pub(crate) fn peer_fin_ahead(&self) -> Option<SeqNumber> {
        self.flags
            .has(Flags::FIN_AHEAD)
            .then_some(self.rcv_rare.fin_mark)
    }

    /// Records (or forgets) a FIN that arrived ahead of missing data.
    pub(crate) fn set_peer_fin_ahead(&mut self, fin: Option<SeqNumber>) {
        match fin {
            Some(seq) => {
                self.rcv_rare.fin_mark = seq;
                self.flags.set(Flags::FIN_AHEAD);
            }
            None => self.flags.clear(Flags::FIN_AHEAD),
        }
    }

    /// Whether an ACK is due (at once or delayed).
    pub(crate) fn owes_ack(&self) -> bool {
        self.flags.has(Flags::ACK_NOW) || self.timers.delayed_ack.is_some()
    }

    /// The right edge the ACKs offer: the last advertised, or after the
    /// peer's FIN the one advertised when it arrived
    /// (`RecvRare::fin_mark`).
    fn offered_edge(&self) -> SeqNumber {
        if self.flags.has(Flags::PEER_FIN) {
            self.rcv_rare.fin_mark
        } else {
            self.rcv.adv
        }
    }

    /// The compact record of this connection in TIME-WAIT.
    pub(crate) fn time_wait_record(&self) -> TimeWait {
        TimeWait {
            tuple: self.tuple,
            snd_nxt: self.snd.nxt,
            rcv_nxt: self.rcv.nxt,
            // The window the ACKs offered: TIME-WAIT's answers keep the
            // edge where it was (it follows the peer's FIN).
            rcv_wnd: self.offered_edge().saturating_sub(self.rcv.nxt) as u32,
            rcv_wscale: self.rcv.wscale,
            invalid_ack: self.timers_rare.invalid_ack,
            ts: self.flags.has(Flags::TIMESTAMPS).then_some(Timestamps {
                recent: self.ts.recent,
                recent_age: self.ts.recent_age,
                offset: self.ts.offset,
            }),
            expires: self
                .timers_rare
                .close
                .get()
                .unwrap_or(self.timers.last_recv),
        }
    }

    /// The exchange is over: our FIN was acknowledged in LAST-ACK, or
    /// TIME-WAIT's 2 MSL ran out. RFC 9293 §3.10.7.4 deletes the TCB then,
    /// and so does this, unless the receive buffer holds bytes the
    /// application has not read and it has not closed: those stay
    /// readable, as a kernel socket's queue does once its close completed
    /// (the socket in CLOSE, `recv` still reading), and the connection goes
    /// once they are read ([`Connection::after_read`]) or the application
    /// closes or aborts it (no RST then: the peer is done). Until then no
    /// timer runs, nothing is held but those bytes, and only the ACKs that
    /// stray segments ask for are sent.
    #[inline]
    pub(crate) fn exchange_over(&mut self, ctx: &mut Ctx<'_>) {
        // The flag first: a server's connections are closed by then, and
        // the receive buffer's line is not read.
        if self.flags.has(Flags::APP_CLOSED) || self.recv_buf.is_empty() {
            self.close_now(CloseReason::Normal);
        } else {
            self.hold_for_read(ctx);
        }
    }

    /// [`Connection::exchange_over`] with bytes unread: out of line.
    #[inline(never)]
    fn hold_for_read(&mut self, ctx: &mut Ctx<'_>) {
        self.flags.set(Flags::HELD_FOR_READ | Flags::FIN_ACKED);
        self.snd.una = self.snd.max;
        self.snd.nxt = self.snd.max;
        self.timers_rare.rto = Deadline::NONE;
        self.timers_rare.persist = Deadline::NONE;
        self.timers_rare.persist_backoff = 0;
        self.timers_rare.keepalive = Deadline::NONE;
        self.timers_rare.close = Deadline::NONE;
        self.timers.delayed_ack = Deadline::NONE;
        self.flags.clear(
            Flags::PERSISTING
                | Flags::PROBE_ARMED
                | Flags::HOLES
                | Flags::SACKED
                | Flags::RETRANSMIT_ONE
                | Flags::TLP_NOW,
        );
        self.assembler.clear();
        self.scoreboard.clear();
        ctx.pool.dropped_from_send(self.send_buf.len());
        self.send_buf.release(ctx.pool);
        self.flags.clear(Flags::SEND_QUEUED);
        self.recv_buf.forget_unqueued(ctx.pool);
        if let Some(f) = self.rack.flight.take() {
            ctx.flights.give(f);
        }
    }

    /// Ends the connection at once (no segment is sent); the stack frees it.
    pub(crate) fn close_now(&mut self, reason: CloseReason) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.close_reason = reason;
            self.events |= ev::CLOSED;
        }
    }

    /// The sequence number of a segment without data (a pure ACK, an
    /// RST): [`SendState::acceptable_seq`].
    #[inline]
    pub(super) fn acceptable_seq(&self) -> SeqNumber {
        self.snd.acceptable_seq()
    }

    /// Sends an RST for this connection (RFC 9293 §3.10.7.4 / §3.10.4
    /// ABORT), at [`Connection::acceptable_seq`].
    fn send_rst(&self, ctx: &mut Ctx<'_>, why: ResetReason) {
        ctx.queue_rst(PendingRst {
            tuple: self.tuple,
            seq: self.acceptable_seq(),
            ack: Some(self.rcv.nxt),
            why,
        });
    }

    /// Receive memory this connection holds or has promised beyond
    /// `floor` (see [`RecvMemory`]): its queued bytes plus the window the
    /// peer may still fill (out-of-order bytes lie inside that window).
    /// After the peer's FIN that window is empty (`RecvRare::fin_mark`).
    /// A parked connection ([`Flags::RCV_PARKED`]) commits nothing: what
    /// the stack counts is [`Connection::rcv_charged`] (or this past
    /// `RecvMemory::charged_from`).
    #[inline]
    pub(crate) fn rcv_commitment(&self, floor: usize) -> usize {
        (self.recv_buf.len() + self.rcv_wnd()).saturating_sub(floor)
    }

    /// What the connection counts in the stack's committed total: its
    /// [`Connection::rcv_commitment`], or nothing while parked.
    pub(crate) fn rcv_charged(&self, floor: usize) -> usize {
        if self.flags.has(Flags::RCV_PARKED) {
            0
        } else {
            self.rcv_commitment(floor)
        }
    }

    /// Whether the stack may park this connection's receive promise
    /// ([`Flags::RCV_PARKED`]) once it has judged that the connection
    /// needs no more than the floor: one that can still receive data (its
    /// peer's FIN not in), no data waiting to be read, no FIN held ahead
    /// of a hole. One waiting for memory may be (parked, it is offered the
    /// floor it was waiting for). Out-of-order data it may still hold is
    /// given up first ([`Connection::renege_out_of_order`]).
    pub(crate) fn parkable(&self) -> bool {
        matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) && !self
            .flags
            .has(Flags::RCV_PARKED | Flags::PEER_FIN | Flags::FIN_AHEAD)
            && self.recv_buf.is_empty()
    }

    /// Gives up the out-of-order data held (none is readable): RFC 2018
    /// §8 lets a receiver discard data it has reported in SACK blocks but
    /// not acknowledged, when it runs out of buffer space; the sender
    /// keeps every byte until it is acknowledged, and sends it again.
    /// Counted (`Stats::ooo_reneged`).
    pub(crate) fn renege_out_of_order(&mut self, pool: &mut ChunkPool, stats: &mut Stats) {
        stats.ooo_reneged += 1;
        self.forget_out_of_order(pool);
    }

    /// Drops the out-of-order data held, its chunks and what reports it
    /// in SACK blocks.
    pub(crate) fn forget_out_of_order(&mut self, pool: &mut ChunkPool) {
        self.assembler.clear();
        self.recv_buf.forget_unqueued(pool);
        self.flags.clear(Flags::HOLES);
    }

    /// Gives both buffers' memory back, the frames the receive queue kept
    /// and the RACK flight (the connection is going away).
    pub(crate) fn release_buffers(&mut self, memory: Memory<'_>) {
        let (pool, lent, flights) = memory;
        pool.dropped_from_send(self.send_buf.len());
        self.send_buf.release(pool);
        self.flags.clear(Flags::SEND_QUEUED);
        self.recv_buf.release(pool, lent);
        if let Some(f) = self.rack.flight.take() {
            flights.give(f);
        }
    }

    pub(crate) fn is_passive(&self) -> bool {
        self.flags.has(Flags::PASSIVE)
    }

    pub(crate) fn in_backlog(&self) -> bool {
        self.flags.has(Flags::IN_BACKLOG)
    }

    pub(crate) fn set_in_backlog(&mut self, on: bool) {
        if on {
            self.flags.set(Flags::IN_BACKLOG);
        } else {
            self.flags.clear(Flags::IN_BACKLOG);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7323 §2.3's shift by its definition: the smallest that brings
    /// the capacity within 16 bits, at most 14.
    fn wscale_by_loop(capacity: usize) -> u8 {
        let mut s = 0u8;
        while s < MAX_WSCALE && (capacity >> s) > 0xffff {
            s += 1;
        }
        s
    }

    #[test]
    fn window_scale_is_the_smallest_shift_within_16_bits() {
        assert_eq!(wscale_for(0), 0);
        assert_eq!(wscale_for(0xffff), 0);
        assert_eq!(wscale_for(0x1_0000), 1);
        assert_eq!(wscale_for(4 << 20), 7);
        assert_eq!(wscale_for(1 << 30), 14);
        assert_eq!(wscale_for(usize::MAX), 14);
        // Every power of two and its neighbours.
        for bit in 0..usize::BITS {
            let p = 1usize << bit;
            for c in [p - 1, p, p.saturating_add(1)] {
                assert_eq!(wscale_for(c), wscale_by_loop(c), "capacity {c}");
            }
        }
    }
}
