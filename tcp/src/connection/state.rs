//! Connection state: the RFC 9293 §3.3.2 state, the packed flags, and the send / receive
//! sequence spaces, timestamp, tuning and timer records.

use crate::seq::SeqNumber;
use crate::time::{Deadline, Instant};

/// RFC 9293 §3.3.2 connection states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No connection (terminal).
    Closed,
    /// Waiting for a SYN (listeners only).
    Listen,
    /// SYN sent, waiting for SYN-ACK.
    SynSent,
    /// SYN received and SYN-ACK sent, waiting for its ACK.
    SynReceived,
    /// Data transfer.
    Established,
    /// We sent FIN; waiting for its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// Both sides sent FIN (simultaneous close); waiting for our FIN's ACK.
    Closing,
    /// Waiting 2*MSL so that stray segments die out.
    TimeWait,
    /// The peer sent FIN; we may still send.
    CloseWait,
    /// We sent FIN after the peer's; waiting for its ACK.
    LastAck,
}

impl State {
    /// How many states there are (indexes of [`State::index`]).
    pub(crate) const COUNT: usize = 11;

    /// A dense index of the state, below [`State::COUNT`].
    #[inline]
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Whether the handshake completed (RFC 9293 "synchronized" states).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// Whether we may still send new data or our FIN.
    pub(super) fn can_send(self) -> bool {
        matches!(
            self,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        )
    }

    /// Whether received payload is accepted (RFC 9293 §3.10.7.4 seventh).
    pub(super) fn can_receive(self) -> bool {
        matches!(
            self,
            State::Established | State::FinWait1 | State::FinWait2 | State::SynReceived
        )
    }
}

/// Per-connection boolean state, packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flags(pub(crate) u64);

impl Flags {
    /// Timestamps negotiated.
    pub(crate) const TIMESTAMPS: u64 = 1 << 0;
    /// Nagle disabled.
    pub(crate) const NODELAY: u64 = 1 << 1;
    /// The application shut down writing; a FIN follows the data.
    pub(crate) const FIN_QUEUED: u64 = 1 << 2;
    /// The application closed the connection (no more reads either).
    pub(crate) const APP_CLOSED: u64 = 1 << 3;
    /// An ACK must be sent now.
    pub(crate) const ACK_NOW: u64 = 1 << 4;
    /// Opened passively (through a listener).
    pub(crate) const PASSIVE: u64 = 1 << 5;
    /// Counted in its listener's half-open backlog.
    pub(crate) const IN_BACKLOG: u64 = 1 << 6;
    /// A Readable event was emitted and not yet followed by a read.
    pub(crate) const READABLE_NOTIFIED: u64 = 1 << 7;
    /// A send could not queue everything: emit Writable when space frees.
    pub(crate) const WRITABLE_WANTED: u64 = 1 << 8;
    /// A send was cut short by the stack's send memory
    /// (`Config::send_memory`): the connection is in the stack's list of
    /// those waiting for memory, once (`Stack::wake_send_waiters`).
    pub(crate) const SEND_MEMORY_WAIT: u64 = 1 << 50;
    /// The peer's FIN was received.
    pub(crate) const PEER_FIN: u64 = 1 << 9;
    /// Retransmit one segment at SND.UNA regardless of windows.
    pub(crate) const RETRANSMIT_ONE: u64 = 1 << 10;
    /// Send a window probe (persist timer fired).
    pub(crate) const PROBE_NOW: u64 = 1 << 11;
    /// Send a keepalive probe.
    pub(crate) const KEEPALIVE_NOW: u64 = 1 << 12;
    /// In NewReno fast recovery.
    pub(crate) const IN_RECOVERY: u64 = 1 << 13;
    /// We offered window scaling in our SYN.
    pub(crate) const WS_OFFERED: u64 = 1 << 14;
    /// The peer's SYN carried a window scale option.
    pub(crate) const WS_PEER: u64 = 1 << 15;
    /// The application knows the handle (connect() returned it, or an
    /// Accepted/Connected event was queued).
    pub(crate) const ANNOUNCED: u64 = 1 << 16;
    /// Our FIN was acknowledged.
    pub(crate) const FIN_ACKED: u64 = 1 << 17;
    /// The retransmission timer holds a loss probe timeout (see
    /// `arm_rto_or_probe`), not an RTO.
    pub(crate) const PROBE_ARMED: u64 = 1 << 18;
    /// SACK permitted both ways (RFC 2018 §2): our ACKs carry SACK blocks.
    pub(crate) const SACK: u64 = 1 << 19;
    /// The current fast recovery is conservative SACK-based recovery (RFC
    /// 6675 §5), not NewReno: the pipe estimate and `NextSeg` drive it.
    pub(crate) const SACK_RECOVERY: u64 = 1 << 20;
    /// The stack's receive memory, not the buffer, held the last window
    /// offered back: a window update is owed once memory frees.
    pub(crate) const MEM_LIMITED: u64 = 1 << 21;
    /// `SendRare::recover` marks a loss episode (fast recovery or a
    /// timeout) that the cumulative ACK has not passed yet: until it does,
    /// duplicate ACKs start no new fast retransmit (RFC 6582 §3.2 steps 1
    /// and 2). A bit, not a value of `recover`, so that it cannot go stale
    /// when the sequence space wraps: compared 2^31 bytes later, an old
    /// `recover` reads as ahead of SND.UNA.
    pub(crate) const RECOVER_HELD: u64 = 1 << 22;
    /// Packetization-layer path MTU discovery runs (RFC 4821 §7; see
    /// `plpmtud.rs`): new data may go out as a probe.
    pub(crate) const MTU_SEARCH: u64 = 1 << 23;
    /// A path MTU probe is in flight (`SendRare::mtu_probe`), or, with
    /// `IN_RECOVERY`, the recovery repairs a lost probe (no window
    /// reduction, RFC 4821 §7.6.2).
    pub(crate) const MTU_PROBE_OUT: u64 = 1 << 24;
    /// Keepalive asked for on this connection (`Stack::set_keepalive`),
    /// with the stack's timings or, where it has none, the default ones.
    pub(crate) const KEEPALIVE_ON: u64 = 1 << 32;
    /// Keepalive turned off on this connection, whatever the stack's.
    pub(crate) const KEEPALIVE_OFF: u64 = 1 << 33;
    /// The application fixed the send buffer's size
    /// (`Stack::set_send_buffer`, Linux's `SOCK_SNDBUF_LOCK`): it is not
    /// auto-tuned.
    pub(crate) const SNDBUF_LOCK: u64 = 1 << 34;
    /// The application fixed the receive buffer's size
    /// (`Stack::set_recv_buffer`, Linux's `SOCK_RCVBUF_LOCK`): it is not
    /// auto-tuned.
    pub(crate) const RCVBUF_LOCK: u64 = 1 << 35;
    // ECN (RFC 3168) takes the top bits of the low word, counting down
    // (see `ecn.rs`).
    /// ECN negotiated in the handshake (RFC 3168 §6.1.1).
    pub(crate) const ECN: u64 = 1 << 31;
    /// A CE mark arrived: every segment we send carries ECE until a
    /// segment with CWR arrives (RFC 3168 §6.1.3).
    pub(crate) const ECN_ECHO: u64 = 1 << 30;
    /// The window was reduced for an ECE: the next new data segment
    /// carries CWR (RFC 3168 §6.1.2).
    pub(crate) const ECN_CWR: u64 = 1 << 29;
    /// An ECE was answered for the window that ends at
    /// `SendRare::ecn_high`: later ECEs change nothing until SND.UNA
    /// passes it (RFC 3168 §6.1.2, once per window of data: the peer echoes
    /// until our CWR, on the segment at `ecn_high`, arrives). A bit, not a
    /// value of `ecn_high`, for the reason `RECOVER_HELD` is one.
    pub(crate) const ECN_HELD: u64 = 1 << 28;
    /// The window that ends at `SendRare::ecn_high` was reduced for an
    /// ECE (not for a loss or a timeout, which also set `ECN_HELD`): a
    /// loss of data sent before `ecn_high` is repaired without a second
    /// reduction, one of the segment at `ecn_high` or later is a new
    /// window's and reduces it (RFC 3168 §6.1.2).
    pub(crate) const ECN_REDUCED: u64 = 1 << 25;
    /// The segment written last goes out ECT(0) (`Connection::sent_ecn`).
    pub(crate) const ECT_SENT: u64 = 1 << 27;
    /// A FIN arrived ahead of missing data: `RecvRare::fin_mark` holds
    /// its sequence number.
    pub(crate) const FIN_AHEAD: u64 = 1 << 36;
    /// A D-SACK block is owed: `RecvRare::dsack` holds its range.
    pub(crate) const DSACK: u64 = 1 << 37;
    /// The send buffer may hold bytes: set whenever bytes are queued,
    /// cleared when it is seen empty. Clear means empty, so that a
    /// receiver's segments and ACKs never read the send buffer (a cache
    /// line of its own).
    pub(crate) const SEND_QUEUED: u64 = 1 << 38;
    /// The assembler holds out-of-order ranges (exactly when it does), so
    /// that in-order data kept in its frame never reads the assembler (a
    /// cache line of its own).
    pub(crate) const HOLES: u64 = 1 << 39;
    /// The persist timer may be armed or backed off: clear means
    /// `TimerRare::persist` is unset and its backoff 0, so that a window
    /// update (every segment in order) reads neither (a cache line of
    /// their own).
    pub(crate) const PERSISTING: u64 = 1 << 40;
    /// The scoreboard holds SACKed ranges (exactly when it does), so that
    /// a sender's ACKs without SACK blocks read neither the scoreboard nor
    /// its line.
    pub(crate) const SACKED: u64 = 1 << 41;
    /// `SendRare::undo` may be set (clear means it is not), so that each
    /// advancing ACK need not read it to take it.
    pub(crate) const UNDO: u64 = 1 << 42;
    /// RACK-TLP's probe timeout fired: the next segment out is the probe
    /// (RFC 8985 §7.3).
    pub(crate) const TLP_NOW: u64 = 1 << 43;
    /// The exchange is over (LAST-ACK's FIN acknowledged, or TIME-WAIT ran
    /// out) and the connection stays only for received bytes the
    /// application has not read yet (`Connection::exchange_over`).
    pub(crate) const HELD_FOR_READ: u64 = 1 << 44;
    /// The last ACK offered a right edge left of `ReceiveState::adv`, by
    /// less than one unit of the window scale: a full buffer's window
    /// truncated to the unit (RFC 7323 §2.4, Appendix F).
    pub(crate) const RETRACTED: u64 = 1 << 45;
    /// The SACK state of this connection's owed ACKs could not all be set
    /// aside (`OwedAcks` was full, or the connection was imported with ACKs
    /// owed): until none is owed, they report the state after the batch.
    pub(crate) const ACKS_UNRECORDED: u64 = 1 << 46;
    /// A SACK recovery ended (or was undone) with its retransmissions
    /// reaching past SND.UNA: `SendRare::high_rxt` holds their end until
    /// SND.UNA passes it (`Connection::on_ack_held`). Without the flag the
    /// value is an old episode's, which 4 GiB later would read as lying
    /// ahead of SND.UNA again (as `RECOVER_HELD` guards `recover`).
    pub(crate) const RXT_ABOVE: u64 = 1 << 47;
    /// The connection's receive promise is parked: needing no more than
    /// the floor (less than a segment received over `stack::PARK_IDLE`)
    /// and holding no data while the stack's receive memory was under
    /// pressure, it commits nothing (`Connection::rcv_charged` is 0),
    /// does not divide the memory and is offered no window past the floor
    /// (`RecvMemory::of`; what it was offered before stands), until it
    /// receives a segment's worth within one `PARK_IDLE` period: then its
    /// window is charged again (as Linux charges an idle socket's window
    /// nothing; what it would send is taken past the budget then, as an
    /// import's is). A stack-wide view, cleared when the connection leaves
    /// the stack.
    pub(crate) const RCV_PARKED: u64 = 1 << 48;
    /// SYN-SENT: the SYN went again at once after a reset answered an
    /// unacceptable ACK (`Connection::on_segment_syn_sent`), which it does
    /// once per open.
    pub(crate) const SYN_RESENT: u64 = 1 << 49;
    /// The delayed ACK's deadline is in the stack's queue of delayed ACKs
    /// (`Stack::acks_due`), at or before `TimerState::delayed_ack`: the
    /// wheel need not hold it ([`super::Connection::next_deadline`]). A
    /// stack-wide view, cleared when the connection leaves the stack.
    pub(crate) const ACK_QUEUED: u64 = 1 << 51;

    /// Whether any bit of `f` is set.
    pub(crate) fn has(self, f: u64) -> bool {
        self.0 & f != 0
    }
    /// Sets the bits of `f`.
    pub(crate) fn set(&mut self, f: u64) {
        self.0 |= f;
    }
    /// Clears the bits of `f`.
    pub(crate) fn clear(&mut self, f: u64) {
        self.0 &= !f;
    }
}

/// Send sequence space (RFC 9293 §3.3.1): the part every segment reads.
/// What only loss recovery, the handshake, ECN and the path MTU search
/// read is in [`SendRare`], away from the receive path's cache lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendState {
    /// Oldest unacknowledged sequence number.
    pub(crate) una: SeqNumber,
    /// Next sequence number to send (rewound on timeout).
    pub(crate) nxt: SeqNumber,
    /// Highest sequence number sent plus one.
    pub(crate) max: SeqNumber,
    /// Peer's window in bytes (already scaled).
    pub(crate) wnd: u32,
    /// Largest window the peer ever offered (RFC 9293 §3.8.6.2.1).
    pub(crate) max_wnd: u32,
    /// Segment sequence number used for the last window update.
    pub(crate) wl1: SeqNumber,
    /// Segment acknowledgment number used for the last window update.
    pub(crate) wl2: SeqNumber,
    /// SND.UNA before the last ACK that advanced it (`prev_highest_ack` of
    /// the RFC 6582 §4.2 ACK heuristic).
    pub(crate) prev_una: SeqNumber,
    /// Largest payload per segment (peer MSS, minus our option bytes).
    pub(crate) mss: u16,
    /// Shift applied to the peer's window field.
    pub(crate) wscale: u8,
    /// Consecutive duplicate ACKs.
    pub(crate) dup_acks: u8,
}

impl SendState {
    /// The sequence number of a segment without data (a pure ACK, an
    /// RST): SND.MAX, the peer's RCV.NXT once everything sent arrived
    /// (SND.NXT may have been rewound by a timeout, and a segment below the
    /// peer's RCV.NXT is out of its window; RFC 5961 §3.2 peers want an
    /// RST exact). Past the peer's window by a unit of its window scale or
    /// more (bytes sent into a window that then shut), or past a zero
    /// window (its probe byte), the window's right edge instead: a segment
    /// beyond the window is dropped unseen (RFC 9293 §3.10.7.4), and with a
    /// zero window the edge is SND.UNA, the peer's RCV.NXT, the one
    /// sequence number it takes then. Past it by less than a unit, SND.MAX
    /// still: the peer pulled its edge back by under a unit (RFC 7323
    /// §2.4) and may have taken what was sent up to the old one, so the
    /// edge can lie below its RCV.NXT (Linux's `tcp_acceptable_seq`).
    #[inline]
    pub(crate) fn acceptable_seq(&self) -> SeqNumber {
        let edge = self.una + self.wnd as usize;
        if self.max > edge && (self.wnd == 0 || self.max - edge >= 1 << self.wscale) {
            edge
        } else {
            self.max
        }
    }
}

/// The send side's state that a segment on the fast path does not read:
/// the initial sequence number, loss recovery (RFC 6582, RFC 6675, RFC
/// 3522), ECN's reduced window (RFC 3168) and the path MTU search (RFC
/// 4821). Kept apart from [`SendState`] so that it stays out of the
/// cache lines every segment touches (see `Connection`'s layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendRare {
    /// Initial send sequence number.
    pub(crate) iss: SeqNumber,
    /// NewReno `recover` (RFC 6582 §3.2).
    pub(crate) recover: SeqNumber,
    /// State for undoing a spurious fast retransmit (RFC 3522 / RFC 4015),
    /// set when fast recovery starts with timestamps on.
    pub(crate) undo: Option<UndoState>,
    /// In fast recovery: the duplicate ACK count at which the last
    /// retransmission of SND.UNA is deemed lost as well (see
    /// `arm_lost_retransmit`).
    pub(crate) lost_rtx_dups: u16,
    /// Segments of this connection retransmitted, ever (what
    /// `Stats::retransmits` counts for the stack; [`crate::ConnInfo`]).
    pub(crate) retransmitted: u32,
    /// RFC 6675 §2 `HighRxt`: one past the highest byte retransmitted in
    /// the current SACK recovery.
    pub(crate) high_rxt: SeqNumber,
    /// SND.MAX when the latest retransmission of the current SACK recovery
    /// went out: once more than `(DupThresh - 1) * SMSS` bytes above it are
    /// SACKed, holes below `high_rxt` are lost retransmissions (see
    /// `detect_lost_retransmissions`).
    pub(crate) rtx_mark: SeqNumber,
    /// In SACK recovery: un-SACKed bytes below this are lost whatever
    /// `IsLost()` says; raised to SND.MAX when a loss probe fires during
    /// SACK recovery (see `on_probe_timeout`).
    pub(crate) lost_floor: SeqNumber,
    /// SND.MAX when the window was last reduced for an ECE (RFC 3168
    /// §6.1.2), while `Flags::ECN_HELD` is set.
    pub(crate) ecn_high: SeqNumber,
    /// RFC 4821 §7.2 search_high: the largest path MTU (IP packet bytes)
    /// not yet known to fail. search_low is the MTU of `mss` itself.
    pub(crate) mtu_high: u16,
    /// The MTU the handshake allowed (the peer's MSS and ours): where a
    /// search starts again after `Config::mtu_probe_interval`.
    pub(crate) mtu_max: u16,
    /// The MTU of the probe in flight (`Flags::MTU_PROBE_OUT`); 0 once it
    /// was lost and its recovery runs.
    pub(crate) mtu_probe: u16,
    /// The probe's first sequence number.
    pub(crate) mtu_probe_seq: SeqNumber,
}

/// What the Eifel algorithm needs to recognise a spurious fast retransmit
/// (RFC 3522 §3.2) and to undo its window reduction (RFC 4015 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UndoState {
    /// `RetransmitTS`: our TSval when the fast retransmit was decided (the
    /// retransmission carries this value or a later one).
    pub(crate) retransmit_ts: u32,
    /// `pipe_prev`: max(FlightSize, ssthresh) before the reduction, in
    /// 32 bits (windows stay below 2^30 bytes, RFC 7323 §2.3); an
    /// unbounded ssthresh is `u32::MAX` ([`UndoState::new`]).
    pipe_prev: u32,
}

impl UndoState {
    pub(crate) fn new(retransmit_ts: u32, pipe_prev: usize) -> UndoState {
        UndoState {
            retransmit_ts,
            pipe_prev: u32::try_from(pipe_prev).unwrap_or(u32::MAX),
        }
    }

    /// `pipe_prev` as it was given (an unbounded ssthresh stays unbounded).
    pub(crate) fn pipe_prev(&self) -> usize {
        match self.pipe_prev {
            u32::MAX => usize::MAX,
            p => p as usize,
        }
    }
}

/// Receive sequence space (RFC 9293 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReceiveState {
    /// Next sequence number expected.
    pub(crate) nxt: SeqNumber,
    /// Right edge of the window advertised (never moved left; an ACK may
    /// offer less, by under one unit of the window scale, once the buffer
    /// is full: `advertise_window`), the bound of what is taken.
    pub(crate) adv: SeqNumber,
    /// Shift applied to the window fields we send.
    pub(crate) wscale: u8,
    /// Largest payload seen from the peer (for delayed ACK decisions).
    pub(crate) mss_seen: u16,
    /// In-order bytes received since the last ACK we sent.
    pub(crate) unacked: u32,
    /// Immediate ACKs owed beyond the one `Flags::ACK_NOW` stands for: one
    /// per out-of-order or duplicate segment (see `owe_immediate_ack`).
    pub(crate) acks_owed: u8,
}

/// The receive side's state that a segment in sequence does not read: the
/// IRS, a FIN that arrived ahead of missing data, the start of the latest
/// out-of-order segment, a D-SACK range to report, and the receiver's RTT
/// measurement without timestamps. Kept apart from
/// [`ReceiveState`], out of the cache lines every segment touches (see
/// `Connection`'s layout): whether there is a FIN ahead or a D-SACK block
/// owed is in [`Flags`] (`FIN_AHEAD`, `DSACK`), and `sacked` is read only
/// while the assembler holds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvRare {
    /// Initial receive sequence number.
    pub(crate) irs: SeqNumber,
    /// With `Flags::FIN_AHEAD`: the sequence number of a FIN that arrived
    /// ahead of missing data. With `Flags::PEER_FIN` (the FIN taken in
    /// sequence, and none ahead after it): the right edge advertised when
    /// it arrived. Nothing more can arrive then (RFC 9293 §3.10.7.4
    /// eighth), so `ReceiveState::adv` stands at RCV.NXT from that moment
    /// and the window commits no receive memory, while the ACKs still
    /// offer this edge (an advertised edge never moves left, RFC 9293
    /// §3.8.6). One field for both: the flags say which it holds.
    pub(crate) fin_mark: SeqNumber,
    /// Starts of the latest out-of-order segments of distinct blocks, most
    /// recent first: the SACK block that contains the first goes first in
    /// the options, and those of the others follow (RFC 2018 §4: the most
    /// recently reported blocks repeated). A start that no held block
    /// contains any more (filled, or from before the assembler last
    /// emptied) is skipped.
    pub(crate) sacked: [SeqNumber; 3],
    /// With `Flags::DSACK`: a duplicate segment's range to report once as
    /// a D-SACK block (RFC 2883 §4).
    pub(crate) dsack: (SeqNumber, SeqNumber),
    /// The receiver's RTT measured without timestamps (`TuningState`'s
    /// estimate; with timestamps, which nearly every peer offers, a
    /// segment never reads these): RCV.NXT that ends the current
    /// one-window measurement.
    pub(crate) rcv_rtt_seq: SeqNumber,
    /// Without timestamps: when the current one-window measurement began
    /// (an optional instant in 8 bytes).
    pub(crate) rcv_rtt_time: Deadline,
}

/// RFC 7323 timestamp state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimestampState {
    /// TS.Recent.
    pub(crate) recent: u32,
    /// When TS.Recent was last updated (RFC 7323 §5.5: 24-day validity).
    pub(crate) recent_age: Instant,
    /// Per-connection TSval offset (RFC 7323 §5.4).
    pub(crate) offset: u32,
    /// Last.ACK.sent.
    pub(crate) last_ack_sent: SeqNumber,
    /// Our TSval when the retransmission timer last fired: echoes older
    /// than this are not used for RTT samples (see `take_rtt_sample`).
    /// Moved up once it falls 2^31 ms behind (`rtt_floor_lapsed`).
    pub(crate) rtt_floor: u32,
}

/// Buffer auto-tuning state: the receive side's dynamic right-sizing
/// measurement (Fisk & Feng, "Dynamic right-sizing in TCP", 2001; Linux
/// `tcp_rcv_space_adjust`) and the receiver's RTT estimate it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TuningState {
    /// Bytes the application read during the last measurement period that
    /// raised it (Linux `rcvq_space.space`); starts at ten segments.
    pub(crate) rcv_space: u32,
    /// Sequence number of the next byte the application reads, when the
    /// current measurement period began.
    pub(crate) rcv_space_seq: SeqNumber,
    /// When the current measurement period began.
    pub(crate) rcv_space_time: Instant,
    /// The receiver's RTT estimate in microseconds (0: none yet): from
    /// timestamp echoes (RFC 7323 §4) if negotiated, else the time one
    /// advertised window takes to arrive (the DRS paper's §3.2 bound).
    pub(crate) rcv_rtt_us: u32,
    /// With timestamps: the TSecr of the last sample (later segments echoing
    /// the same TSval were sent later and would read long).
    pub(crate) rcv_rtt_tsecr: u32,
}

/// The timers a segment of a steady transfer reads or writes: the delayed
/// ACK, the liveness keepalive reads, and the earliest deadline armed since
/// the stack last filed the connection on its timer wheel (the count of
/// unanswered keepalive probes, which every segment resets, is
/// `Connection::keepalive_probes`, in a byte of padding). The other
/// deadlines and the counters are in [`TimerRare`], out of the cache lines
/// every segment touches (see `Connection`'s layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerState {
    /// Delayed ACK timer (RFC 5681 §4.2).
    pub(crate) delayed_ack: Deadline,
    /// The earliest deadline armed ([`TimerState::arm`]) since the stack
    /// last filed the connection on its wheel. A wheel entry is kept at or
    /// before the connection's next deadline, and a deadline can only come
    /// before the entry by being armed, so the stack compares this one
    /// value after each segment instead of every deadline
    /// ([`super::Connection::next_deadline`], read only when the entry
    /// fired or there is none).
    ///
    /// An `Option<Instant>`, not a `Deadline`, on purpose: its 8-byte tag
    /// is the largest niche in a connection and the first, so it is where
    /// `Option<Connection>` keeps whether a slot is live, and every check of
    /// a slot reads this line, which a segment reads anyway (the niche was
    /// in `RecvRare`, a cold line, for a while: lackey, session 36).
    pub(crate) armed: Option<Instant>,
    /// Last time a segment arrived.
    pub(crate) last_recv: Instant,
}

impl TimerState {
    /// A deadline at `at`, noted as armed: every deadline a connection
    /// sets goes through here (a missed one leaves the wheel late, which
    /// `Stack::check_layout` reports).
    #[inline]
    pub(crate) fn arm(&mut self, at: Instant) -> Deadline {
        self.armed = Some(self.armed.map_or(at, |a| a.min(at)));
        Deadline::at(at)
    }
}

/// The segment timed for an RTT sample (RFC 6298 §3, one at a time): its
/// end sequence number and send time. 16 bytes where an
/// `Option<(SeqNumber, Instant)>` takes 24: an unset send time is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedSegment {
    end: SeqNumber,
    sent: Deadline,
}

impl TimedSegment {
    /// No segment timed.
    pub(crate) const NONE: TimedSegment = TimedSegment {
        end: SeqNumber(0),
        sent: Deadline::NONE,
    };

    /// The segment ending at `end`, sent at `sent`.
    pub(crate) const fn new(end: SeqNumber, sent: Instant) -> Self {
        TimedSegment {
            end,
            sent: Deadline::at(sent),
        }
    }

    /// Its end and send time, if a segment is timed.
    #[inline]
    pub(crate) fn get(self) -> Option<(SeqNumber, Instant)> {
        Some((self.end, self.sent.get()?))
    }

    /// Whether no segment is timed.
    #[inline]
    pub(crate) fn is_none(self) -> bool {
        self.sent.is_none()
    }
}

/// The timers a steady segment neither reads nor writes: retransmission,
/// persist, keepalive and close deadlines, and the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerRare {
    /// Retransmission timer (RFC 6298 §5), or the loss probe's that
    /// stands in its place (`Flags::PROBE_ARMED`).
    pub(crate) rto: Deadline,
    /// When the retransmission timer expires, kept while a probe stands
    /// in its slot: new data may restart the probe (RFC 8985 §7.2), never
    /// past this (`TLP_calc_PTO`; RFC 6298 §5.1: data sent does not
    /// restart a running retransmission timer). Set wherever the timer is
    /// started or restarted (§5.1, §5.3), meaningless while `rto` is not
    /// armed.
    pub(crate) rto_due: Instant,
    /// Persist (zero window / SWS override) timer, while
    /// `Flags::PERSISTING` is set.
    pub(crate) persist: Deadline,
    /// Keepalive timer.
    pub(crate) keepalive: Deadline,
    /// TIME-WAIT or orphaned FIN-WAIT-2 expiry.
    pub(crate) close: Deadline,
    /// Consecutive retransmission timeouts.
    pub(crate) retransmits: u8,
    /// The soft error a synchronized connection keeps (RFC 1122
    /// §4.2.3.9, RFC 5461 §4.1): the last destination unreachable about
    /// its data in flight, reported as why it ended if it then times out
    /// (Linux's `sk_err_soft`); an acceptable ACK clears it. The struct's
    /// last byte of padding (`Option<Unreachable>` is one byte).
    pub(crate) soft_error: Option<crate::Unreachable>,
    /// Persist backoff exponent (non-zero only while `Flags::PERSISTING`).
    pub(crate) persist_backoff: u8,
    /// Loss probes sent since SND.UNA last advanced.
    pub(crate) loss_probes: u8,
    /// When the connection last answered an out-of-window segment
    /// ([`crate::Config::invalid_ack_interval`]).
    pub(crate) invalid_ack: crate::challenge::OowAckTime,
    /// Last time data was sent.
    pub(crate) last_send: Instant,
    /// When the path MTU search last finished, in seconds (wrapping; see
    /// `Config::mtu_probe_interval`).
    pub(crate) mtu_settled: u16,
}

#[cfg(test)]
mod tests {
    use super::Flags;

    /// Every flag is one bit of its own (two that shared a bit once made
    /// an ECN reduction turn keepalive on).
    #[test]
    fn every_flag_has_a_bit_of_its_own() {
        let all = [
            Flags::TIMESTAMPS,
            Flags::NODELAY,
            Flags::FIN_QUEUED,
            Flags::APP_CLOSED,
            Flags::ACK_NOW,
            Flags::PASSIVE,
            Flags::IN_BACKLOG,
            Flags::READABLE_NOTIFIED,
            Flags::WRITABLE_WANTED,
            Flags::PEER_FIN,
            Flags::RETRANSMIT_ONE,
            Flags::PROBE_NOW,
            Flags::KEEPALIVE_NOW,
            Flags::IN_RECOVERY,
            Flags::WS_OFFERED,
            Flags::WS_PEER,
            Flags::ANNOUNCED,
            Flags::FIN_ACKED,
            Flags::PROBE_ARMED,
            Flags::SACK,
            Flags::SACK_RECOVERY,
            Flags::MEM_LIMITED,
            Flags::RECOVER_HELD,
            Flags::MTU_SEARCH,
            Flags::MTU_PROBE_OUT,
            Flags::KEEPALIVE_ON,
            Flags::KEEPALIVE_OFF,
            Flags::SNDBUF_LOCK,
            Flags::RCVBUF_LOCK,
            Flags::ECN,
            Flags::ECN_ECHO,
            Flags::ECN_CWR,
            Flags::ECN_HELD,
            Flags::ECN_REDUCED,
            Flags::ECT_SENT,
            Flags::FIN_AHEAD,
            Flags::DSACK,
            Flags::SEND_QUEUED,
            Flags::HOLES,
            Flags::PERSISTING,
            Flags::SACKED,
            Flags::HELD_FOR_READ,
            Flags::UNDO,
            Flags::TLP_NOW,
            Flags::RETRACTED,
            Flags::ACKS_UNRECORDED,
            Flags::RXT_ABOVE,
            Flags::RCV_PARKED,
            Flags::SEND_MEMORY_WAIT,
            Flags::ACK_QUEUED,
        ];
        let mut seen = 0u64;
        for (i, f) in all.into_iter().enumerate() {
            assert_eq!(f.count_ones(), 1, "flag {i} is not one bit");
            assert_eq!(seen & f, 0, "flag {i} shares a bit");
            seen |= f;
        }
    }
}
