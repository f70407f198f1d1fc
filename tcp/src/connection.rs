//! The per-connection state machine (RFC 9293 §3.10), with RFC 7323 window
//! scaling, timestamps and PAWS, RFC 6298 retransmission timing, RFC 5681 /
//! RFC 6582 congestion control, RFC 6675 SACK-based loss recovery, delayed ACKs, Nagle, persist and keepalive,
//! and send/receive buffer auto-tuning (receive: dynamic right-sizing after
//! Fisk & Feng, as Linux `tcp_rcv_space_adjust`; send: Linux
//! `tcp_sndbuf_expand`).
//!
//! A connection never touches the network: the owning [`crate::Stack`] feeds
//! it segments and timer expiries and asks it for segments to send.

use crate::assembler::Assembler;
use crate::buffer::RingBuffer;
use crate::cc::{CongestionControl, Controller};
use crate::isn::IsnGenerator;
use crate::rto::RttEstimator;
use crate::sack::{Scoreboard, DUP_THRESH};
use crate::seq::SeqNumber;
use crate::time::{Duration, Instant};
use crate::{CloseReason, Config, FourTuple, Stats};
use flowlane_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use std::collections::VecDeque;

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
    /// Whether the handshake completed (RFC 9293 "synchronized" states).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// Whether we may still send new data or our FIN.
    fn can_send(self) -> bool {
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
    fn can_receive(self) -> bool {
        matches!(
            self,
            State::Established | State::FinWait1 | State::FinWait2 | State::SynReceived
        )
    }
}

/// Per-connection boolean state, packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u32);

impl Flags {
    /// Timestamps negotiated.
    pub const TIMESTAMPS: u32 = 1 << 0;
    /// Nagle disabled.
    pub const NODELAY: u32 = 1 << 1;
    /// The application shut down writing; a FIN follows the data.
    pub const FIN_QUEUED: u32 = 1 << 2;
    /// The application closed the connection (no more reads either).
    pub const APP_CLOSED: u32 = 1 << 3;
    /// An ACK must be sent now.
    pub const ACK_NOW: u32 = 1 << 4;
    /// Opened passively (through a listener).
    pub const PASSIVE: u32 = 1 << 5;
    /// Counted in its listener's half-open backlog.
    pub const IN_BACKLOG: u32 = 1 << 6;
    /// A Readable event was emitted and not yet followed by a read.
    pub const READABLE_NOTIFIED: u32 = 1 << 7;
    /// A send could not queue everything: emit Writable when space frees.
    pub const WRITABLE_WANTED: u32 = 1 << 8;
    /// The peer's FIN was received.
    pub const PEER_FIN: u32 = 1 << 9;
    /// Retransmit one segment at SND.UNA regardless of windows.
    pub const RETRANSMIT_ONE: u32 = 1 << 10;
    /// Send a window probe (persist timer fired).
    pub const PROBE_NOW: u32 = 1 << 11;
    /// Send a keepalive probe.
    pub const KEEPALIVE_NOW: u32 = 1 << 12;
    /// In NewReno fast recovery.
    pub const IN_RECOVERY: u32 = 1 << 13;
    /// We offered window scaling in our SYN.
    pub const WS_OFFERED: u32 = 1 << 14;
    /// The peer's SYN carried a window scale option.
    pub const WS_PEER: u32 = 1 << 15;
    /// The application knows the handle (connect() returned it, or an
    /// Accepted/Connected event was queued).
    pub const ANNOUNCED: u32 = 1 << 16;
    /// Our FIN was acknowledged.
    pub const FIN_ACKED: u32 = 1 << 17;
    /// The retransmission timer holds a loss probe timeout (see
    /// `arm_rto_or_probe`), not an RTO.
    pub const PROBE_ARMED: u32 = 1 << 18;
    /// SACK permitted both ways (RFC 2018 §2): our ACKs carry SACK blocks.
    pub const SACK: u32 = 1 << 19;
    /// The current fast recovery is conservative SACK-based recovery (RFC
    /// 6675 §5), not NewReno: the pipe estimate and `NextSeg` drive it.
    pub const SACK_RECOVERY: u32 = 1 << 20;

    /// Whether any bit of `f` is set.
    pub fn has(self, f: u32) -> bool {
        self.0 & f != 0
    }
    /// Sets the bits of `f`.
    pub fn set(&mut self, f: u32) {
        self.0 |= f;
    }
    /// Clears the bits of `f`.
    pub fn clear(&mut self, f: u32) {
        self.0 &= !f;
    }
}

/// Send sequence space (RFC 9293 §3.3.1) and loss-recovery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendState {
    /// Initial send sequence number.
    pub iss: SeqNumber,
    /// Oldest unacknowledged sequence number.
    pub una: SeqNumber,
    /// Next sequence number to send (rewound on timeout).
    pub nxt: SeqNumber,
    /// Highest sequence number sent plus one.
    pub max: SeqNumber,
    /// Peer's window in bytes (already scaled).
    pub wnd: u32,
    /// Largest window the peer ever offered (RFC 9293 §3.8.6.2.1).
    pub max_wnd: u32,
    /// Segment sequence number used for the last window update.
    pub wl1: SeqNumber,
    /// Segment acknowledgment number used for the last window update.
    pub wl2: SeqNumber,
    /// Largest payload per segment (peer MSS, minus our option bytes).
    pub mss: u16,
    /// Shift applied to the peer's window field.
    pub wscale: u8,
    /// Consecutive duplicate ACKs.
    pub dup_acks: u8,
    /// NewReno `recover` (RFC 6582 §3.2).
    pub recover: SeqNumber,
    /// SND.UNA before the last ACK that advanced it (`prev_highest_ack` of
    /// the RFC 6582 §4.2 ACK heuristic).
    pub prev_una: SeqNumber,
    /// State for undoing a spurious fast retransmit (RFC 3522 / RFC 4015),
    /// set when fast recovery starts with timestamps on.
    pub undo: Option<UndoState>,
    /// In fast recovery: the duplicate ACK count at which the last
    /// retransmission of SND.UNA is deemed lost as well (see
    /// `arm_lost_retransmit`).
    pub lost_rtx_dups: u16,
    /// RFC 6675 §2 `HighRxt`: one past the highest byte retransmitted in
    /// the current SACK recovery.
    pub high_rxt: SeqNumber,
    /// SND.MAX when the latest retransmission of the current SACK recovery
    /// went out: once more than `(DupThresh - 1) * SMSS` bytes above it are
    /// SACKed, holes below `high_rxt` are lost retransmissions (see
    /// `detect_lost_retransmissions`).
    pub rtx_mark: SeqNumber,
    /// In SACK recovery: un-SACKed bytes below this are lost whatever
    /// `IsLost()` says; raised to SND.MAX when a loss probe fires during
    /// SACK recovery (see `on_probe_timeout`).
    pub lost_floor: SeqNumber,
}

/// What the Eifel algorithm needs to recognise a spurious fast retransmit
/// (RFC 3522 §3.2) and to undo its window reduction (RFC 4015 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoState {
    /// `RetransmitTS`: our TSval when the fast retransmit was decided (the
    /// retransmission carries this value or a later one).
    pub retransmit_ts: u32,
    /// `pipe_prev`: max(FlightSize, ssthresh) before the reduction.
    pub pipe_prev: usize,
}

/// Receive sequence space (RFC 9293 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveState {
    /// Initial receive sequence number.
    pub irs: SeqNumber,
    /// Next sequence number expected.
    pub nxt: SeqNumber,
    /// Right edge of the window last advertised (never moved left).
    pub adv: SeqNumber,
    /// Shift applied to the window fields we send.
    pub wscale: u8,
    /// Largest payload seen from the peer (for delayed ACK decisions).
    pub mss_seen: u16,
    /// In-order bytes received since the last ACK we sent.
    pub unacked: u32,
    /// Sequence number of a FIN that arrived ahead of missing data.
    pub fin_seq: Option<SeqNumber>,
    /// Immediate ACKs owed beyond the one `Flags::ACK_NOW` stands for: one
    /// per out-of-order or duplicate segment (see `owe_immediate_ack`).
    pub acks_owed: u8,
    /// Start of the most recent out-of-order segment: the SACK block that
    /// contains it goes first (RFC 2018 §4).
    pub last_ooo: Option<SeqNumber>,
    /// A duplicate segment's range to report once as a D-SACK block (RFC
    /// 2883 §4).
    pub dsack: Option<(SeqNumber, SeqNumber)>,
}

/// RFC 7323 timestamp state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampState {
    /// TS.Recent.
    pub recent: u32,
    /// When TS.Recent was last updated (RFC 7323 §5.5: 24-day validity).
    pub recent_age: Instant,
    /// Per-connection TSval offset (RFC 7323 §5.4).
    pub offset: u32,
    /// Last.ACK.sent.
    pub last_ack_sent: SeqNumber,
    /// Our TSval when the retransmission timer last fired: echoes older
    /// than this are not used for RTT samples (see `take_rtt_sample`).
    pub rtt_floor: u32,
}

/// Buffer auto-tuning state: the receive side's dynamic right-sizing
/// measurement (Fisk & Feng, "Dynamic right-sizing in TCP", 2001; Linux
/// `tcp_rcv_space_adjust`) and the receiver's RTT estimate it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TuningState {
    /// Bytes the application read during the last measurement period that
    /// raised it (Linux `rcvq_space.space`); starts at ten segments.
    pub rcv_space: u32,
    /// Sequence number of the next byte the application reads, when the
    /// current measurement period began.
    pub rcv_space_seq: SeqNumber,
    /// When the current measurement period began.
    pub rcv_space_time: Instant,
    /// The receiver's RTT estimate in microseconds (0: none yet): from
    /// timestamp echoes (RFC 7323 §4) if negotiated, else the time one
    /// advertised window takes to arrive (the DRS paper's §3.2 bound).
    pub rcv_rtt_us: u32,
    /// Without timestamps: RCV.NXT that ends the current one-window
    /// measurement.
    pub rcv_rtt_seq: SeqNumber,
    /// Without timestamps: when the current one-window measurement began.
    pub rcv_rtt_time: Option<Instant>,
    /// With timestamps: the TSecr of the last sample (later segments echoing
    /// the same TSval were sent later and would read long).
    pub rcv_rtt_tsecr: u32,
}

/// Timer deadlines and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerState {
    /// Retransmission timer (RFC 6298 §5).
    pub rto: Option<Instant>,
    /// Delayed ACK timer.
    pub delayed_ack: Option<Instant>,
    /// Persist (zero window / SWS override) timer.
    pub persist: Option<Instant>,
    /// Keepalive timer.
    pub keepalive: Option<Instant>,
    /// TIME-WAIT or orphaned FIN-WAIT-2 expiry.
    pub close: Option<Instant>,
    /// Consecutive retransmission timeouts.
    pub retransmits: u8,
    /// Persist backoff exponent.
    pub persist_backoff: u8,
    /// Unanswered keepalive probes.
    pub keepalive_probes: u8,
    /// Loss probes sent since SND.UNA last advanced.
    pub loss_probes: u8,
    /// Segment timed for an RTT sample when timestamps are off: (end
    /// sequence number, send time). Cleared on retransmission (Karn).
    pub rtt_seq: Option<(SeqNumber, Instant)>,
    /// Last time a segment arrived.
    pub last_recv: Instant,
    /// Last time data was sent.
    pub last_send: Instant,
}

/// A connection's complete state as plain data, for moving it to another
/// core ([`crate::Stack::export`] / [`crate::Stack::import`]). Instants are
/// absolute, so both stacks must share a clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSnapshot {
    /// Address pair.
    pub tuple: FourTuple,
    /// State.
    pub state: State,
    /// Flags (see [`Flags`]).
    pub flags: Flags,
    /// Send sequence space.
    pub snd: SendState,
    /// Receive sequence space.
    pub rcv: ReceiveState,
    /// Timestamps.
    pub ts: TimestampState,
    /// Timers.
    pub timers: TimerState,
    /// RTT estimator.
    pub rtt: RttEstimator,
    /// Congestion controller.
    pub cc: Controller,
    /// Buffer auto-tuning.
    pub tuning: TuningState,
    /// Send buffer capacity (as grown so far).
    pub send_capacity: usize,
    /// Unacknowledged and unsent data, starting at `snd.una` (or ISS + 1).
    pub send_data: Vec<u8>,
    /// Receive buffer capacity (as grown so far).
    pub recv_capacity: usize,
    /// Receive buffer headroom past the capacity, for data up to a right
    /// edge that window-scale rounding put past the capacity.
    pub recv_headroom: usize,
    /// In-order data not yet read by the application.
    pub recv_data: Vec<u8>,
    /// Out-of-order data: (offset from `rcv.nxt`, bytes).
    pub out_of_order: Vec<(u32, Vec<u8>)>,
    /// The SACK scoreboard: ranges above `snd.una` the peer reported
    /// holding (RFC 6675 §3).
    pub sacked: Vec<(SeqNumber, SeqNumber)>,
}

/// Event bits a connection raises for the stack to turn into events.
pub(crate) mod ev {
    pub const ESTABLISHED: u8 = 1 << 0;
    pub const READABLE: u8 = 1 << 1;
    pub const WRITABLE: u8 = 1 << 2;
    pub const PEER_CLOSED: u8 = 1 << 3;
    pub const CLOSED: u8 = 1 << 4;
}

/// An RST to send on behalf of no (or a dying) connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingRst {
    pub tuple: FourTuple,
    pub seq: SeqNumber,
    /// `Some` to set ACK with this acknowledgment number.
    pub ack: Option<SeqNumber>,
}

/// What a connection needs from its stack while processing.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub cfg: &'a Config,
    pub stats: &'a mut Stats,
    pub rsts: &'a mut VecDeque<PendingRst>,
}

impl Ctx<'_> {
    pub fn queue_rst(&mut self, rst: PendingRst) {
        if self.rsts.len() < self.cfg.max_pending_resets {
            self.rsts.push_back(rst);
        } else {
            self.stats.resets_dropped += 1;
        }
    }
}

/// RFC 9293 §3.7.1: default send MSS when the peer sends no MSS option.
const DEFAULT_MSS: u16 = 536;
/// RFC 7323 §2.3: the largest window shift.
const MAX_WSCALE: u8 = 14;
/// Option bytes a timestamp option adds to every segment (NOP NOP + 10).
const TS_OPTION_LEN: u16 = 12;
/// Floor of the loss probe timeout (RFC 8985 §7.2 sets none; this keeps a
/// probe from racing the ACK of a segment on a sub-millisecond path).
const MIN_PTO: Duration = Duration::from_millis(1);
/// Most immediate ACKs a connection owes at once (the burst one batch of
/// out-of-order segments can produce).
const MAX_ACKS_OWED: u8 = 64;
/// Loss probes per value of SND.UNA before the RTO takes over.
const MAX_LOSS_PROBES: u8 = 3;
/// RFC 7323 §5.5: TS.Recent older than 24 days is invalid.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);
/// Segments in the initial receive-space estimate and the floor of the send
/// buffer target (Linux `TCP_INIT_CWND`, RFC 6928's IW10).
const INIT_SEGMENTS: usize = 10;

/// One TCP connection.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    pub tuple: FourTuple,
    pub state: State,
    pub flags: Flags,
    /// Pending `ev::*` bits.
    pub events: u8,
    pub close_reason: CloseReason,
    pub snd: SendState,
    pub rcv: ReceiveState,
    pub ts: TimestampState,
    pub timers: TimerState,
    pub rtt: RttEstimator,
    pub cc: Controller,
    pub tune: TuningState,
    pub assembler: Assembler,
    /// RFC 6675 scoreboard (allocated only while SACK blocks are held).
    pub scoreboard: Scoreboard,
    pub send_buf: RingBuffer,
    pub recv_buf: RingBuffer,
}

fn wscale_for(capacity: usize) -> u8 {
    let mut s = 0u8;
    while s < MAX_WSCALE && (capacity >> s) > 0xffff {
        s += 1;
    }
    s
}

/// The window scale we offer: for the largest receive buffer auto-tuning may
/// reach, not the initial one, since the shift is fixed at the handshake
/// (RFC 7323 §2.2) and the window can only grow up to 2^16 - 1 units of it.
fn offered_wscale(cfg: &Config) -> u8 {
    wscale_for(cfg.recv_buffer.max(cfg.recv_buffer_max))
}

impl Connection {
    fn blank(cfg: &Config, isn: &IsnGenerator, tuple: FourTuple, now: Instant) -> Self {
        let iss = isn.isn(&tuple, now);
        let mut flags = Flags::default();
        if !cfg.nagle {
            flags.set(Flags::NODELAY);
        }
        let mut c = Connection {
            tuple,
            state: State::Closed,
            flags,
            events: 0,
            close_reason: CloseReason::Normal,
            snd: SendState {
                iss,
                una: iss,
                nxt: iss,
                max: iss,
                wnd: 0,
                max_wnd: 0,
                wl1: SeqNumber(0),
                wl2: iss,
                mss: DEFAULT_MSS,
                wscale: 0,
                dup_acks: 0,
                recover: iss,
                prev_una: iss,
                undo: None,
                lost_rtx_dups: 0,
                high_rxt: iss,
                rtx_mark: iss,
                lost_floor: iss,
            },
            rcv: ReceiveState {
                irs: SeqNumber(0),
                nxt: SeqNumber(0),
                adv: SeqNumber(0),
                wscale: 0,
                mss_seen: 0,
                unacked: 0,
                fin_seq: None,
                acks_owed: 0,
                last_ooo: None,
                dsack: None,
            },
            ts: TimestampState {
                recent: 0,
                recent_age: now,
                offset: isn.ts_offset(&tuple),
                last_ack_sent: SeqNumber(0),
                rtt_floor: 0,
            },
            timers: TimerState {
                rto: None,
                delayed_ack: None,
                persist: None,
                keepalive: None,
                close: None,
                retransmits: 0,
                persist_backoff: 0,
                keepalive_probes: 0,
                loss_probes: 0,
                rtt_seq: None,
                last_recv: now,
                last_send: now,
            },
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
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
                rcv_rtt_seq: SeqNumber(0),
                rcv_rtt_time: None,
                rcv_rtt_tsecr: 0,
            },
            assembler: Assembler::new(),
            scoreboard: Scoreboard::new(),
            send_buf: RingBuffer::new(cfg.send_buffer),
            recv_buf: RingBuffer::new(cfg.recv_buffer),
        };
        c.ts.rtt_floor = c.tsval(now);
        c
    }

    /// Active open (RFC 9293 §3.10.1): SYN-SENT; the SYN goes out on the
    /// next `poll_transmit`.
    pub fn new_active(cfg: &Config, isn: &IsnGenerator, tuple: FourTuple, now: Instant) -> Self {
        let mut c = Self::blank(cfg, isn, tuple, now);
        c.state = State::SynSent;
        if cfg.window_scaling {
            c.flags.set(Flags::WS_OFFERED);
        }
        c
    }

    /// Passive open from a SYN received in LISTEN (RFC 9293 §3.10.7.2).
    pub fn new_passive(
        cfg: &Config,
        isn: &IsnGenerator,
        tuple: FourTuple,
        now: Instant,
        syn: &TcpRepr,
    ) -> Self {
        let mut c = Self::blank(cfg, isn, tuple, now);
        c.state = State::SynReceived;
        c.flags.set(Flags::PASSIVE);
        c.rcv.irs = SeqNumber(syn.seq);
        c.rcv.nxt = SeqNumber(syn.seq) + 1;
        c.rcv.adv = c.rcv.nxt;
        c.tune.rcv_space_seq = c.rcv.nxt;
        c.tune.rcv_space_time = now;
        if cfg.window_scaling && syn.options.window_scale.is_some() {
            c.flags.set(Flags::WS_OFFERED);
        }
        c.negotiate_options(cfg, syn, now);
        // RFC 9293 §3.10.7.2: the SYN's window is never scaled.
        c.snd.wnd = u32::from(syn.window);
        c.snd.max_wnd = c.snd.wnd;
        c.snd.wl1 = SeqNumber(syn.seq);
        c.snd.wl2 = c.snd.iss;
        c
    }

    /// Applies the options of the peer's SYN (or SYN-ACK): MSS (RFC 9293
    /// §3.7.1), window scale (RFC 7323 §2.2) and timestamps (RFC 7323 §3.2).
    fn negotiate_options(&mut self, cfg: &Config, syn: &TcpRepr, now: Instant) {
        let o = &syn.options;
        if cfg.sack && o.sack_permitted {
            self.flags.set(Flags::SACK);
        }
        if let Some(ws) = o.window_scale {
            self.flags.set(Flags::WS_PEER);
            if self.flags.has(Flags::WS_OFFERED) {
                // RFC 7323 §2.3: use 14 for larger values.
                self.snd.wscale = ws.min(MAX_WSCALE);
                self.rcv.wscale = offered_wscale(cfg);
            }
        }
        if !self.flags.has(Flags::WS_PEER) || !self.flags.has(Flags::WS_OFFERED) {
            self.snd.wscale = 0;
            self.rcv.wscale = 0;
        }
        if let (true, Some((tsval, _))) = (cfg.timestamps, o.timestamps) {
            self.flags.set(Flags::TIMESTAMPS);
            self.ts.recent = tsval;
            self.ts.recent_age = now;
        }
        // RFC 9293 §3.7.1: send MSS = min(peer's MSS, our own limit); the
        // payload shrinks by the options we put in every segment.
        let peer_mss = o.mss.unwrap_or(DEFAULT_MSS).max(64);
        let mut mss = peer_mss.min(cfg.mss);
        if self.flags.has(Flags::TIMESTAMPS) {
            mss -= TS_OPTION_LEN;
        }
        self.snd.mss = mss;
        self.cc.set_mss(mss as usize);
    }

    fn eff_mss(&self) -> usize {
        self.snd.mss as usize
    }

    fn tsval(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts.offset)
    }

    /// Sequence number of the first byte in the send buffer.
    fn data_start(&self) -> SeqNumber {
        // Until our SYN is acknowledged, SND.UNA is the SYN itself.
        if self.snd.una == self.snd.iss {
            self.snd.iss + 1
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

    fn close_now(&mut self, reason: CloseReason) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.close_reason = reason;
            self.events |= ev::CLOSED;
        }
    }

    /// Sends an RST for this connection (RFC 9293 §3.10.7.4 / §3.10.4 ABORT).
    fn send_rst(&self, ctx: &mut Ctx) {
        ctx.queue_rst(PendingRst {
            tuple: self.tuple,
            seq: self.snd.nxt,
            ack: Some(self.rcv.nxt),
        });
    }

    /// The application aborted: RST if synchronized (RFC 9293 §3.10.5).
    pub fn abort(&mut self, ctx: &mut Ctx) {
        if self.state.is_synchronized() || self.state == State::SynReceived {
            self.send_rst(ctx);
        }
        self.close_now(CloseReason::Aborted);
    }

    /// RFC 9293 §3.10.4 CLOSE, write side only: queue a FIN after the data.
    pub fn shutdown_write(&mut self) {
        if self.flags.has(Flags::FIN_QUEUED) {
            return;
        }
        match self.state {
            // RFC 9293 §3.10.4: SYN-SENT: delete the TCB.
            State::SynSent => self.close_now(CloseReason::Normal),
            // RFC 9293 §3.10.4: SYN-RECEIVED: the FIN follows once
            // ESTABLISHED would have been reached.
            State::SynReceived => self.flags.set(Flags::FIN_QUEUED),
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
    pub fn close(&mut self, ctx: &mut Ctx) {
        if !self.recv_buf.is_empty() {
            self.abort(ctx);
            return;
        }
        self.flags.set(Flags::APP_CLOSED);
        self.shutdown_write();
        if self.state == State::FinWait2 {
            self.timers.close = Some(ctx.now + ctx.cfg.msl.saturating_mul(2));
        }
    }

    pub fn set_nodelay(&mut self, on: bool) {
        if on {
            self.flags.set(Flags::NODELAY);
        } else {
            self.flags.clear(Flags::NODELAY);
        }
    }

    /// Queues application data.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, crate::Error> {
        if self.flags.has(Flags::FIN_QUEUED)
            || !matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return Err(crate::Error::InvalidState);
        }
        let n = self.send_buf.enqueue_slice(data);
        if n < data.len() {
            self.flags.set(Flags::WRITABLE_WANTED);
        }
        if n == 0 && !data.is_empty() {
            return Err(crate::Error::WouldBlock);
        }
        Ok(n)
    }

    /// Reads in-order data.
    pub fn recv(&mut self, ctx: &mut Ctx, out: &mut [u8]) -> Result<usize, crate::Error> {
        self.flags.clear(Flags::READABLE_NOTIFIED);
        let n = self.recv_buf.dequeue_slice(out);
        if n == 0 && !out.is_empty() {
            return if self.flags.has(Flags::PEER_FIN) {
                Ok(0)
            } else {
                Err(crate::Error::WouldBlock)
            };
        }
        self.after_read(ctx);
        Ok(n)
    }

    /// Zero-copy read: the contiguous readable bytes.
    pub fn peek(&self) -> &[u8] {
        self.recv_buf.peek()
    }

    /// Zero-copy read: drop `n` bytes that were read through `peek`.
    pub fn consume(&mut self, ctx: &mut Ctx, n: usize) -> usize {
        self.flags.clear(Flags::READABLE_NOTIFIED);
        let n = self.recv_buf.dequeue_allocated(n);
        if n > 0 {
            self.after_read(ctx);
        }
        n
    }

    /// Whether the peer closed and everything was read.
    pub fn at_eof(&self) -> bool {
        self.flags.has(Flags::PEER_FIN) && self.recv_buf.is_empty()
    }

    /// Window update after the application freed receive space: send one if
    /// the right edge can move by a useful amount (RFC 9293 §3.8.6.2.2,
    /// receiver-side SWS avoidance) and the peer may be running short.
    fn after_read(&mut self, ctx: &mut Ctx) {
        if !self.state.can_receive() {
            return;
        }
        self.rcv_space_adjust(ctx);
        let cap = self.recv_buf.capacity();
        let advertised = self.rcv.adv.saturating_sub(self.rcv.nxt);
        let free = self.recv_buf.window();
        let threshold = (cap / 2).min(self.eff_mss()).max(1);
        if free >= advertised + threshold && advertised <= cap / 2 {
            self.flags.set(Flags::ACK_NOW);
        }
    }

    /// Sequence number of the next byte the application reads (Linux
    /// `copied_seq`).
    fn copied_seq(&self) -> SeqNumber {
        let fin = usize::from(self.flags.has(Flags::PEER_FIN));
        self.rcv.nxt - (self.recv_buf.len() + fin)
    }

    /// The largest receive buffer worth having: the configured maximum, and
    /// no more than the scaled window field can offer (RFC 7323 §2.3;
    /// 65,535 bytes without window scaling).
    fn recv_buffer_limit(&self, cfg: &Config) -> usize {
        cfg.recv_buffer_max.min(0xffff << self.rcv.wscale)
    }

    /// Receive buffer dynamic right-sizing, run when the application reads
    /// (Fisk & Feng, "Dynamic right-sizing in TCP", 2001: the data the
    /// application takes per RTT is the least the sender's window must be,
    /// so offer twice that; Linux `tcp_rcv_space_adjust`). Once per receiver
    /// RTT estimate (a longer period, after a pause, counts pro rata), if
    /// the application read more than in the last period that raised the
    /// estimate, the buffer grows to
    /// `2 * copied + 16 * MSS`, plus twice that scaled by the period's
    /// growth factor (the sender may still be in slow start, doubling every
    /// RTT, and the window we advertise now governs the *next* RTT), capped
    /// at [`Config::recv_buffer_max`]. Growing only adds space at the right,
    /// so the advertised right edge never moves left (RFC 9293 §3.8.6, RFC
    /// 7323 §2.4); the freed space then goes out as a window update
    /// (`after_read`). A connection whose application does not keep up, or
    /// that carries little data, never grows.
    fn rcv_space_adjust(&mut self, ctx: &Ctx) {
        let rtt_us = self.tune.rcv_rtt_us;
        if rtt_us == 0 {
            return;
        }
        let now = ctx.now;
        if now.saturating_since(self.tune.rcv_space_time) < Duration::from_micros(u64::from(rtt_us))
        {
            return;
        }
        let copied_seq = self.copied_seq();
        let mut copied = copied_seq.saturating_sub(self.tune.rcv_space_seq);
        let elapsed_us = now.saturating_since(self.tune.rcv_space_time).as_nanos() / 1000;
        if elapsed_us > 2 * u64::from(rtt_us) {
            // The application paused (or the connection idled): what it
            // read is a backlog, not a rate. Count its share of one RTT, as
            // the DRS paper measures data per RTT; otherwise a connection
            // that reads a full buffer now and then would grow for nothing.
            copied = (copied as u64 * u64::from(rtt_us) / elapsed_us) as usize;
        }
        let space = self.tune.rcv_space as usize;
        if copied > space {
            let cap = self.recv_buf.capacity();
            let max = self.recv_buffer_limit(ctx.cfg);
            if cap < max {
                let (copied, space) = (copied as u64, space.max(1) as u64);
                let mut win = 2 * copied + 16 * u64::from(ctx.cfg.mss);
                let grow = win.saturating_mul(copied - space) / space;
                win = win.saturating_add(grow.saturating_mul(2));
                let target = win.min(max as u64) as usize;
                if target > cap {
                    self.recv_buf.grow(target);
                }
            }
            self.tune.rcv_space = copied.min(u32::MAX as usize) as u32;
        }
        self.tune.rcv_space_seq = copied_seq;
        self.tune.rcv_space_time = now;
    }

    /// The receiver's RTT estimate for [`Self::rcv_space_adjust`], updated
    /// for each data segment (Linux `tcp_rcv_rtt_measure_ts` and
    /// `tcp_rcv_rtt_measure`). With timestamps (RFC 7323 §4, RTTM seen from
    /// the data receiver): a segment's TSecr echoes the TSval of the ACK
    /// that released it, so now - TSecr is a round trip; only the first
    /// full-sized segment per echoed value counts, and samples are smoothed
    /// with gain 1/8. Without: the time from advertising a window until
    /// RCV.NXT passes its right edge (the DRS paper's §3.2 estimate, at
    /// least one RTT), keeping the smallest.
    fn rcv_rtt_measure(&mut self, now: Instant, tsecr: Option<u32>, len: usize) {
        if self.flags.has(Flags::TIMESTAMPS) {
            let Some(ecr) = tsecr else {
                return;
            };
            if ecr == 0 || ecr == self.tune.rcv_rtt_tsecr || len < usize::from(self.rcv.mss_seen) {
                return;
            }
            self.tune.rcv_rtt_tsecr = ecr;
            let ms = self.tsval(now).wrapping_sub(ecr);
            if ms < (1 << 22) {
                // Millisecond clock: a sub-millisecond RTT reads as 1 ms.
                self.rcv_rtt_update(ms.max(1) * 1000, false);
            }
            return;
        }
        if let Some(start) = self.tune.rcv_rtt_time {
            if self.rcv.nxt < self.tune.rcv_rtt_seq {
                return;
            }
            let us = now.saturating_since(start).as_nanos() / 1000;
            self.rcv_rtt_update(us.clamp(1, u64::from(u32::MAX)) as u32, true);
        }
        // The right edge advertised so far (RFC 9293 §3.8.6: never left).
        self.tune.rcv_rtt_seq = self.rcv.adv;
        self.tune.rcv_rtt_time = Some(now);
    }

    /// Linux `tcp_rcv_rtt_update`: a window-based sample is an upper bound,
    /// so the minimum is kept; a timestamp sample is smoothed (gain 1/8, as
    /// RFC 6298 §2.3 smooths SRTT).
    fn rcv_rtt_update(&mut self, sample_us: u32, window_based: bool) {
        let cur = self.tune.rcv_rtt_us;
        self.tune.rcv_rtt_us = if cur == 0 {
            sample_us
        } else if window_based {
            cur.min(sample_us)
        } else {
            (cur - cur / 8 + sample_us / 8).max(1)
        };
    }

    /// Send buffer growth (Linux `tcp_sndbuf_expand`, checked where Linux's
    /// `tcp_new_space` / `tcp_should_expand_sndbuf` check it: an ACK freed
    /// space and the application had found the buffer full). The buffer
    /// holds the flight plus what is queued behind it; if it is smaller than
    /// what the congestion and peer windows allow in flight, it is what
    /// limits the sender, and it grows to twice the congestion window (at
    /// least ten segments): one window in flight awaiting its ACKs plus one
    /// queued to follow them, which also covers fast recovery, where the
    /// unacknowledged flight stays while new data goes out (RFC 5681 §3.2,
    /// RFC 6582 §3.2), and slow start doubling the window in the next RTT.
    /// Never past twice the largest window the peer offered (more could not
    /// be sent) nor [`Config::send_buffer_max`].
    fn sndbuf_expand(&mut self, cfg: &Config) {
        let cap = self.send_buf.capacity();
        if cap >= cfg.send_buffer_max {
            return;
        }
        let cwnd = self.cc.window();
        if cap >= cwnd.min(self.snd.wnd as usize) {
            // The congestion or peer window limits, not the buffer.
            return;
        }
        let segs = cwnd.max(INIT_SEGMENTS * self.eff_mss());
        let target = segs
            .min(self.snd.max_wnd as usize)
            .saturating_mul(2)
            .min(cfg.send_buffer_max);
        if target > cap {
            self.send_buf.grow(target);
        }
    }

    /// Makes room in the receive ring for everything up to the advertised
    /// right edge. Window-scale rounding (RFC 7323 §2.4: the edge must not
    /// move left, so a window that is not a multiple of 2^shift is rounded
    /// up) can leave the edge up to 2^shift - 1 bytes past the buffer per
    /// advertisement while the window is closing, and more over several. If
    /// those bytes were not accepted, a full buffer would keep offering a
    /// small window that takes nothing: the sender sees no zero window,
    /// retransmits into it and eventually times out instead of probing
    /// (RFC 9293 §3.8.6.1). So the ring gets headroom beyond its capacity
    /// (which alone sizes the advertised window, so the headroom does not
    /// attract more data), in steps of 1/16 of the capacity, at most the
    /// capacity itself (a peer trickling tiny segments into a closing window
    /// could otherwise make the edge creep without bound); data past that
    /// is trimmed as before.
    fn cover_advertised_window(&mut self) {
        let cap = self.recv_buf.capacity();
        let need = self.recv_buf.len() + self.rcv_wnd();
        if need <= cap + self.recv_buf.headroom() {
            return;
        }
        let step = (cap / 16).max(1);
        let headroom = (need - cap).next_multiple_of(step).min(cap);
        self.recv_buf.resize(cap, headroom);
    }

    /// The window to advertise, keeping the right edge from moving left
    /// (RFC 9293 §3.8.6) and applying receiver SWS avoidance (RFC 9293
    /// §3.8.6.2.2). Updates `rcv.adv`.
    fn advertise_window(&mut self) -> u16 {
        let cap = self.recv_buf.capacity();
        let free = self.recv_buf.window();
        let current = self.rcv.adv.saturating_sub(self.rcv.nxt);
        let threshold = (cap / 2).min(self.eff_mss()).max(1);
        let max_wnd = 0xffffusize << self.rcv.wscale;
        let mut wnd = if free >= current + threshold {
            free
        } else {
            current
        };
        wnd = wnd.min(max_wnd);
        let shift = self.rcv.wscale;
        let mut field = wnd >> shift;
        // Round up if truncation would pull the right edge left (RFC 7323
        // §2.4); at most 2^shift - 1 bytes past the buffer, which are
        // trimmed on arrival.
        if (field << shift) < current {
            field += 1;
        }
        let field = field.min(0xffff);
        let edge = self.rcv.nxt + (field << shift);
        self.rcv.adv = self.rcv.adv.max(edge);
        field as u16
    }

    /// Current receive window: what we advertised beyond RCV.NXT.
    fn rcv_wnd(&self) -> usize {
        self.rcv.adv.saturating_sub(self.rcv.nxt)
    }

    // ---------------------------------------------------------------
    // Input
    // ---------------------------------------------------------------

    /// Processes one segment for this connection (RFC 9293 §3.10.7.3 and
    /// §3.10.7.4).
    pub fn on_segment(&mut self, ctx: &mut Ctx, seg: &TcpRepr, payload: &[u8]) {
        if !payload.is_empty() {
            ctx.stats.data_segments_in += 1;
        }
        match self.state {
            State::Closed | State::Listen => {}
            State::SynSent => self.on_segment_syn_sent(ctx, seg, payload),
            _ => self.on_segment_other(ctx, seg, payload),
        }
    }

    /// RFC 9293 §3.10.7.3 SYN-SENT.
    fn on_segment_syn_sent(&mut self, ctx: &mut Ctx, seg: &TcpRepr, _payload: &[u8]) {
        let f = seg.flags;
        // First: check the ACK bit.
        if f.ack() && (SeqNumber(seg.ack) <= self.snd.iss || SeqNumber(seg.ack) > self.snd.max) {
            if !f.rst() {
                ctx.queue_rst(PendingRst {
                    tuple: self.tuple,
                    seq: SeqNumber(seg.ack),
                    ack: None,
                });
            }
            return;
        }
        // Second: the RST bit.
        if f.rst() {
            if f.ack() {
                ctx.stats.resets_in += 1;
                self.close_now(CloseReason::Reset);
            }
            return;
        }
        // Fourth: the SYN bit. (Data on the SYN is not queued: it is not
        // acknowledged, so the peer sends it again.)
        if !f.syn() {
            return;
        }
        self.rcv.irs = SeqNumber(seg.seq);
        self.rcv.nxt = SeqNumber(seg.seq) + 1;
        self.rcv.adv = self.rcv.nxt;
        self.tune.rcv_space_seq = self.rcv.nxt;
        self.tune.rcv_space_time = ctx.now;
        self.negotiate_options(ctx.cfg, seg, ctx.now);
        self.snd.wnd = u32::from(seg.window);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = SeqNumber(seg.seq);
        self.snd.wl2 = SeqNumber(seg.ack);
        self.timers.last_recv = ctx.now;
        if f.ack() {
            self.snd.una = SeqNumber(seg.ack);
            self.take_rtt_sample(ctx.now, seg);
            self.timers.rto = None;
            self.timers.retransmits = 0;
            self.state = State::Established;
            self.events |= ev::ESTABLISHED;
            self.flags.set(Flags::ACK_NOW);
            self.arm_keepalive(ctx);
        } else {
            // Simultaneous open: SYN-RECEIVED, send SYN-ACK.
            self.state = State::SynReceived;
            self.snd.nxt = self.snd.iss;
            self.flags.set(Flags::ACK_NOW);
        }
    }

    /// RFC 9293 §3.10.7.4: every state from SYN-RECEIVED on.
    fn on_segment_other(&mut self, ctx: &mut Ctx, seg: &TcpRepr, payload: &[u8]) {
        let now = ctx.now;
        let mut f = seg.flags;
        let mut seq = SeqNumber(seg.seq);

        // A retransmission of the peer's SYN (or SYN-ACK, simultaneous open):
        // drop the SYN bit and treat the rest normally; it needs an ACK.
        if f.syn() && seq == self.rcv.irs {
            f = TcpFlags(f.0 & !TcpFlags::SYN.0);
            seq += 1;
            self.flags.set(Flags::ACK_NOW);
        }

        // RFC 7323 §3.2: once timestamps are negotiated, drop non-RST
        // segments without them.
        let ts_on = self.flags.has(Flags::TIMESTAMPS);
        if ts_on && seg.options.timestamps.is_none() && !f.rst() {
            ctx.stats.unacceptable += 1;
            return;
        }
        // RFC 7323 §5.3 R1: PAWS.
        if let (true, Some((tsval, _))) = (ts_on, seg.options.timestamps) {
            let stale = (tsval.wrapping_sub(self.ts.recent) as i32) < 0;
            let recent_valid = now.saturating_since(self.ts.recent_age) < PAWS_IDLE;
            if stale && recent_valid && !f.rst() {
                ctx.stats.paws_rejected += 1;
                self.flags.set(Flags::ACK_NOW);
                return;
            }
        }

        // First: sequence number acceptability.
        let mut data = payload;
        let seg_len = data.len() + usize::from(f.syn()) + usize::from(f.fin());
        let wnd = self.rcv_wnd();
        let nxt = self.rcv.nxt;
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == nxt,
            (0, _) => seq.in_range(nxt, nxt + wnd),
            (_, 0) => false,
            (_, _) => {
                seq.in_range(nxt, nxt + wnd) || (seq + (seg_len - 1)).in_range(nxt, nxt + wnd)
            }
        };
        // RFC 9293 §3.10.7.4: with a zero window, still process the ACK and
        // RST of a segment at RCV.NXT (a window probe).
        let zero_window_probe = !acceptable && wnd == 0 && seq == nxt;
        if !acceptable && !zero_window_probe {
            ctx.stats.unacceptable += 1;
            if !f.rst() && !payload.is_empty() {
                // A duplicate (e.g. duplicated in the network): RFC 5681
                // §4.2 immediate duplicate ACK, with a D-SACK block for
                // what arrived twice (RFC 2883 §4) so that the sender can
                // tell a needless retransmission from a loss.
                self.owe_immediate_ack();
                if self.flags.has(Flags::SACK) && seq < nxt {
                    let end = (seq + payload.len()).min(nxt);
                    self.rcv.dsack = Some((seq, end));
                }
            }
            if !f.rst() {
                self.flags.set(Flags::ACK_NOW);
                // RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN restarts
                // the 2 MSL timeout.
                if self.state == State::TimeWait && f.fin() {
                    self.timers.close = Some(now + ctx.cfg.msl.saturating_mul(2));
                }
            }
            return;
        }
        if zero_window_probe {
            data = &[];
            f = TcpFlags(f.0 & !TcpFlags::FIN.0);
            self.flags.set(Flags::ACK_NOW);
        }
        // Trim the front (already received) and the tail (beyond window).
        if seq < nxt {
            let dup = nxt - seq;
            if dup > data.len() {
                // Only a FIN remains, and it is in sequence at RCV.NXT.
                data = &[];
            } else {
                data = &data[dup..];
            }
            seq = nxt;
            self.flags.set(Flags::ACK_NOW);
        }
        if data.len() > wnd {
            data = &data[..wnd];
            f = TcpFlags(f.0 & !TcpFlags::FIN.0);
            self.flags.set(Flags::ACK_NOW);
        }

        // RFC 7323 §4.3: update TS.Recent.
        if let (true, Some((tsval, _))) = (ts_on, seg.options.timestamps) {
            if (tsval.wrapping_sub(self.ts.recent) as i32) >= 0 && seq <= self.ts.last_ack_sent {
                self.ts.recent = tsval;
                self.ts.recent_age = now;
            }
        }

        // Second: the RST bit.
        if f.rst() {
            ctx.stats.resets_in += 1;
            match self.state {
                // RFC 9293 §3.10.7.4: SYN-RECEIVED from a passive open
                // returns to LISTEN (the listener is still there; we just
                // drop this half-open connection).
                State::TimeWait => self.close_now(CloseReason::Normal),
                _ => self.close_now(CloseReason::Reset),
            }
            return;
        }

        // Fourth: a SYN in a synchronized state. RFC 9293 §3.10.7.4 (after
        // RFC 5961 §4): send a challenge ACK and drop.
        if f.syn() {
            self.flags.set(Flags::ACK_NOW);
            return;
        }

        self.timers.last_recv = now;
        self.timers.keepalive_probes = 0;
        self.arm_keepalive(ctx);

        // Fifth: the ACK field.
        if !f.ack() {
            return;
        }
        if self.state == State::SynReceived {
            if SeqNumber(seg.ack) > self.snd.una && SeqNumber(seg.ack) <= self.snd.max {
                self.state = if self.flags.has(Flags::FIN_QUEUED) {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.events |= ev::ESTABLISHED;
                // The SYN-ACK's window was unscaled; from now on it is.
                self.snd.wnd = u32::from(seg.window) << self.snd.wscale;
                self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
                self.snd.wl1 = seq;
                self.snd.wl2 = SeqNumber(seg.ack);
                self.snd.una = self.snd.iss + 1;
                self.timers.rto = None;
                self.timers.retransmits = 0;
                self.take_rtt_sample(now, seg);
            } else {
                // RFC 9293 §3.10.7.4: <SEQ=SEG.ACK><CTL=RST>.
                ctx.queue_rst(PendingRst {
                    tuple: self.tuple,
                    seq: SeqNumber(seg.ack),
                    ack: None,
                });
                return;
            }
        }
        if !self.process_ack(ctx, seg, seq, data.len(), f) {
            return;
        }

        // Sixth: URG is ignored (RFC 6093: urgent data is delivered inline).

        // Seventh: segment text.
        if !data.is_empty() {
            if !self.state.can_receive() {
                // CLOSE-WAIT, CLOSING, LAST-ACK, TIME-WAIT: the peer sent FIN
                // already; ignore the text.
            } else if self.flags.has(Flags::APP_CLOSED) {
                // Nobody will read this: reset (RFC 2525 §2.17).
                self.send_rst(ctx);
                self.close_now(CloseReason::Reset);
                return;
            } else {
                let tsecr = seg.options.timestamps.map(|(_, ecr)| ecr);
                self.receive_data(ctx, seq, data, tsecr);
            }
        }

        // Eighth: the FIN bit.
        if f.fin() && self.state != State::SynReceived {
            let fin_at = seq + data.len();
            if fin_at == self.rcv.nxt {
                self.on_fin(ctx);
            } else if fin_at > self.rcv.nxt && self.rcv.fin_seq.is_none() {
                self.rcv.fin_seq = Some(fin_at);
                self.flags.set(Flags::ACK_NOW);
            }
        }
    }

    /// RFC 9293 §3.10.7.4 fifth step for synchronized states. Returns false
    /// if the segment must be dropped.
    fn process_ack(
        &mut self,
        ctx: &mut Ctx,
        seg: &TcpRepr,
        seq: SeqNumber,
        data_len: usize,
        f: TcpFlags,
    ) -> bool {
        let now = ctx.now;
        let ack = SeqNumber(seg.ack);
        if ack > self.snd.max {
            // Acknowledges something not yet sent.
            self.flags.set(Flags::ACK_NOW);
            return false;
        }
        let sack_news = self.flags.has(Flags::SACK) && self.update_scoreboard(seg);
        let new_wnd = u32::from(seg.window) << self.snd.wscale;
        let window_update = self.snd.wl1 < seq || (self.snd.wl1 == seq && self.snd.wl2 <= ack);
        if ack > self.snd.una {
            let acked = ack - self.snd.una;
            let fin_acked_now = self
                .fin_seq()
                .is_some_and(|fs| ack > fs && self.snd.una <= fs);
            let data_acked = acked - usize::from(fin_acked_now);
            let flight_before = self.snd.max - self.snd.una;
            self.send_buf.dequeue_allocated(data_acked);
            if fin_acked_now {
                self.flags.set(Flags::FIN_ACKED);
            }
            self.snd.prev_una = self.snd.una;
            self.snd.una = ack;
            if self.snd.nxt < ack {
                self.snd.nxt = ack;
            }
            self.take_rtt_sample(now, seg);
            self.timers.retransmits = 0;
            let undone = self
                .snd
                .undo
                .take()
                .is_some_and(|undo| self.eifel_undo(undo, seg, data_acked));
            if undone {
                // The window was set by the RFC 4015 response.
            } else if self.flags.has(Flags::IN_RECOVERY) {
                if ack >= self.snd.recover {
                    // RFC 6582 §3.2 step 3, full acknowledgment (RFC 6675
                    // §5 step (C): recovery ends when HighACK reaches
                    // RecoveryPoint).
                    self.flags.clear(Flags::IN_RECOVERY | Flags::SACK_RECOVERY);
                    self.cc.on_recovery_exit(self.snd.max - ack);
                } else if self.flags.has(Flags::SACK_RECOVERY) {
                    // RFC 6675 §5: cwnd is not deflated on a partial ACK;
                    // NextSeg() picks what to retransmit.
                } else {
                    // RFC 6582 §3.2 step 3, partial acknowledgment:
                    // retransmit the next unacknowledged segment.
                    self.cc.on_partial_ack(data_acked);
                    self.flags.set(Flags::RETRANSMIT_ONE);
                    self.arm_lost_retransmit();
                }
            } else {
                // RFC 5681 §4.1: restart after idle.
                self.cc.on_ack(now, data_acked.min(flight_before));
            }
            self.snd.dup_acks = 0;
            // RFC 6298 §5.2 / §5.3 (RFC 6582 §3.2 step 3: a partial ACK
            // restarts the timer too), with a loss probe first.
            self.timers.loss_probes = 0;
            self.arm_rto_or_probe(now);
            if self.flags.has(Flags::WRITABLE_WANTED) {
                self.sndbuf_expand(ctx.cfg);
            }
            if self.flags.has(Flags::WRITABLE_WANTED) && self.send_buf.window() > 0 {
                self.flags.clear(Flags::WRITABLE_WANTED);
                self.events |= ev::WRITABLE;
            }
        } else if ack == self.snd.una
            && self.snd.una != self.snd.max
            && data_len == 0
            && !f.fin()
            && new_wnd == self.snd.wnd
            && self.snd.wnd != 0
            && self.state.is_synchronized()
        {
            // RFC 5681 §2: a duplicate acknowledgment.
            ctx.stats.dup_acks += 1;
            self.snd.dup_acks = self.snd.dup_acks.saturating_add(1);
            if self.flags.has(Flags::SACK_RECOVERY) {
                // RFC 6675 §5: no window inflation; the pipe estimate
                // already counts what the duplicate ACK SACKed.
            } else if self.flags.has(Flags::IN_RECOVERY) {
                self.cc.on_recovery_dup_ack();
                if u16::from(self.snd.dup_acks) >= self.snd.lost_rtx_dups {
                    // The retransmission of SND.UNA was lost too: segments
                    // sent after it keep arriving. Resend it now rather than
                    // after a retransmission timeout (three orders of
                    // magnitude longer than the RTT on a LAN). Same loss
                    // episode, so no further window reduction.
                    self.flags.set(Flags::RETRANSMIT_ONE);
                    self.arm_lost_retransmit();
                }
            } else if self.snd.dup_acks == 3 {
                // RFC 6582 §3.2 step 2: only for a new loss episode, or
                // when the ACK heuristic of RFC 6582 §4.2 says the duplicate
                // ACKs signal a new loss rather than the go-back-N
                // retransmissions after a timeout (which would advance the
                // cumulative ACK by more than 4*SMSS at a time): without it,
                // every further loss among the segments sent before a
                // timeout costs another, backed-off, timeout.
                // `recover` is one past the highest sequence number sent, so
                // an ACK "covers more than recover" once it reaches it.
                let new_episode = ack >= self.snd.recover || self.snd.recover == self.snd.iss;
                let heuristic = self.cc.window() > self.eff_mss()
                    && ack - self.snd.prev_una <= 4 * self.eff_mss();
                if new_episode || heuristic {
                    self.enter_recovery(now);
                    ctx.stats.fast_retransmits += 1;
                }
            }
        } else if ack == self.snd.una && self.snd.wnd == 0 {
            // The peer answers our probes: it is alive (RFC 1122 §4.2.2.17).
            self.timers.retransmits = 0;
        }
        if sack_news || (self.flags.has(Flags::SACK) && ack > self.snd.prev_una) {
            self.sack_loss_detection(ctx);
        }
        if window_update && ack >= self.snd.una {
            if self.snd.wnd == 0 && new_wnd > 0 && ack == self.snd.una && self.snd.nxt > ack {
                // The window reopened: whatever went out as a probe into the
                // zero window was not accepted, so send it again right away
                // instead of waiting for a backed-off RTO.
                self.snd.nxt = ack;
                self.timers.rto = None;
            }
            self.snd.wnd = new_wnd;
            self.snd.max_wnd = self.snd.max_wnd.max(new_wnd);
            self.snd.wl1 = seq;
            self.snd.wl2 = ack;
            if new_wnd > 0 {
                self.timers.persist = None;
                self.timers.persist_backoff = 0;
            }
        }
        // State transitions on our FIN being acknowledged.
        if self.fin_acked() {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.flags.has(Flags::APP_CLOSED) {
                        // Orphaned: do not wait for the peer's FIN forever.
                        self.timers.close = Some(now + ctx.cfg.msl.saturating_mul(2));
                    }
                }
                State::Closing => self.enter_time_wait(ctx),
                State::LastAck => {
                    self.close_now(CloseReason::Normal);
                    return false;
                }
                _ => {}
            }
        }
        true
    }

    /// RFC 6675 §4 `Update()`: records the SACK blocks of an arriving ACK
    /// (RFC 2018 §3) in the scoreboard and drops what the cumulative ACK
    /// covers. A first block below the cumulative ACK or inside the second
    /// block is a D-SACK (RFC 2883 §4) and reports nothing held. Blocks
    /// beyond SND.MAX are ignored. Returns whether anything new was SACKed.
    fn update_scoreboard(&mut self, seg: &TcpRepr) -> bool {
        let o = &seg.options;
        let n = usize::from(o.sack_block_count).min(o.sack_blocks.len());
        let ack = SeqNumber(seg.ack).max(self.snd.una);
        let mut news = false;
        let block = |i: usize| (SeqNumber(o.sack_blocks[i].0), SeqNumber(o.sack_blocks[i].1));
        for i in 0..n {
            let (l, r) = block(i);
            let dsack = i == 0
                && (r <= SeqNumber(seg.ack) || (n > 1 && l >= block(1).0 && r <= block(1).1));
            if dsack || r <= ack || r > self.snd.max || l >= r {
                continue;
            }
            news |= self.scoreboard.add(l.max(ack), r);
        }
        self.scoreboard.prune(ack);
        news
    }

    /// SACK-based loss detection, after the scoreboard changed. Outside
    /// recovery: RFC 6675 §5 step (2), `IsLost(HighACK + 1)` starts loss
    /// recovery even before `DupThresh` duplicate ACKs (a batch of SACKed
    /// segments in one stretch ACK), under the same new-episode rule as
    /// the duplicate-ACK trigger (RFC 6582 §3.2 step 2, §4.2). In SACK
    /// recovery: lost-retransmission detection (the SACK counterpart of
    /// `arm_lost_retransmit`, after RFC 8985 §6.2): once more than
    /// `(DupThresh - 1) * SMSS` bytes sent after the latest retransmission
    /// are SACKed, every retransmission should have arrived, so holes that
    /// remain below `HighRxt` were lost again; `HighRxt` falls back to
    /// SND.UNA and `NextSeg()` resends them (same episode, no further
    /// window reduction).
    fn sack_loss_detection(&mut self, ctx: &mut Ctx) {
        if self.scoreboard.is_empty() || !self.state.is_synchronized() {
            return;
        }
        let mss = self.eff_mss();
        let una = self.snd.una;
        if !self.flags.has(Flags::IN_RECOVERY) {
            if self.scoreboard.lost_boundary(una, mss) > una {
                let new_episode = una >= self.snd.recover || self.snd.recover == self.snd.iss;
                let heuristic = self.cc.window() > mss && una - self.snd.prev_una <= 4 * mss;
                if new_episode || heuristic {
                    self.enter_recovery(ctx.now);
                    ctx.stats.fast_retransmits += 1;
                }
            }
        } else if self.flags.has(Flags::SACK_RECOVERY)
            && self.snd.high_rxt > una
            && self.scoreboard.sacked_in(self.snd.rtx_mark, self.snd.max) > (DUP_THRESH - 1) * mss
        {
            self.snd.high_rxt = una;
            self.snd.rtx_mark = self.snd.max;
        }
    }

    /// Un-SACKed bytes below the returned sequence number are lost: the
    /// `IsLost()` boundary, or the floor a loss probe set.
    fn lost_boundary(&self) -> SeqNumber {
        let b = self.scoreboard.lost_boundary(self.snd.una, self.eff_mss());
        b.max(self.snd.lost_floor.min(self.snd.max))
    }

    /// RFC 6675 §4 `SetPipe()`: the bytes deemed in the network. Un-SACKed
    /// bytes that `IsLost()` does not declare lost count once; bytes up to
    /// `HighRxt` that are not SACKed count once more (retransmitted).
    fn pipe(&self) -> usize {
        let (una, max) = (self.snd.una, self.snd.max);
        let lost = self.lost_boundary().min(max);
        let flight = (max - lost) - self.scoreboard.sacked_in(lost, max);
        let hr = self.snd.high_rxt.max(una).min(max);
        flight + (hr - una) - self.scoreboard.sacked_in(una, hr)
    }

    /// RFC 6675 §4 `NextSeg()` rule (1): the first un-SACKed segment above
    /// `HighRxt` that is lost; at most one SMSS and never into SACKed data.
    fn next_seg_lost(&self) -> Option<(SeqNumber, usize)> {
        let (una, max) = (self.snd.una, self.snd.max);
        let (s, lim) = self.scoreboard.next_unsacked(self.snd.high_rxt.max(una));
        if s >= self.lost_boundary() || s >= max {
            return None;
        }
        let end = lim.unwrap_or(max).min(max);
        Some((s, self.eff_mss().min(end - s)))
    }

    /// Retransmits up to `len` bytes at `seq` (with the FIN if it ends
    /// there) and, in SACK recovery, advances `HighRxt` over it.
    fn retransmit_at(
        &mut self,
        ctx: &mut Ctx,
        buf: &mut [u8],
        seq: SeqNumber,
        len: usize,
    ) -> Option<usize> {
        let off = seq.saturating_sub(self.data_start());
        let len = len.min(self.send_buf.len().saturating_sub(off));
        let fin = self.fin_seq().is_some_and(|fs| seq + len == fs);
        if len == 0 && !fin {
            return None;
        }
        let r = self.emit_segment(ctx, buf, seq, len, fin);
        if r.is_some() && self.flags.has(Flags::SACK_RECOVERY) {
            self.snd.high_rxt = self.snd.high_rxt.max(seq + len + usize::from(fin));
            self.snd.rtx_mark = self.snd.max;
        }
        r
    }

    /// The Eifel detection algorithm (RFC 3522 §3.2) on the first ACK that
    /// advances SND.UNA after a fast retransmit: if it echoes a TSval older
    /// than the retransmission's, the original arrived (late, reordered) and
    /// the retransmission was spurious. Heavy reordering makes that common,
    /// and every false alarm would otherwise halve the window. The response
    /// is RFC 4015 §3.2: leave fast recovery, cwnd = FlightSize +
    /// min(bytes_acked, IW), ssthresh = pipe_prev. Equal TSvals (reordering
    /// within one clock tick) are not told apart: the reduction then stays.
    /// Returns whether the reduction was undone.
    fn eifel_undo(&mut self, undo: UndoState, seg: &TcpRepr, bytes_acked: usize) -> bool {
        let Some((_, tsecr)) = seg.options.timestamps else {
            return false;
        };
        if (tsecr.wrapping_sub(undo.retransmit_ts) as i32) >= 0 {
            return false;
        }
        self.flags
            .clear(Flags::IN_RECOVERY | Flags::SACK_RECOVERY | Flags::RETRANSMIT_ONE);
        // No loss happened in that window, so the RFC 6582 guard against a
        // second fast retransmit for it must not hold back the next one.
        self.snd.recover = self.snd.una;
        let flight = self.snd.max - self.snd.una;
        self.cc
            .on_spurious_recovery(flight, bytes_acked, undo.pipe_prev);
        true
    }

    /// RTT measurement: RFC 7323 §4 with timestamps; also (and without
    /// timestamps) one timed segment at a time under Karn's rule (RFC 6298
    /// §3), which is what ends a backoff when every echo predates it.
    fn take_rtt_sample(&mut self, now: Instant, seg: &TcpRepr) {
        let timed = match self.timers.rtt_seq {
            Some((end, sent)) if SeqNumber(seg.ack) >= end => {
                self.timers.rtt_seq = None;
                Some(now.saturating_since(sent))
            }
            _ => None,
        };
        let mut sampled = false;
        if self.flags.has(Flags::TIMESTAMPS) {
            if let Some((_, tsecr)) = seg.options.timestamps {
                // Karn's rule, timestamp flavour: after a timeout, an ACK for
                // a retransmission that arrived as a duplicate echoes the
                // TSval of an *earlier* copy (RFC 7323 §4.3 does not update
                // TS.Recent for duplicates), which would inflate the RTT by
                // the whole backoff; ignore echoes from before the timeout.
                let ms = self.tsval(now).wrapping_sub(tsecr);
                let before_timeout = (tsecr.wrapping_sub(self.ts.rtt_floor) as i32) < 0;
                if ms < (1 << 30) && !before_timeout {
                    self.rtt.on_sample(Duration::from_millis(u64::from(ms)));
                    sampled = true;
                }
            }
        }
        if let (false, Some(r)) = (sampled, timed) {
            self.rtt.on_sample(r);
        }
    }

    /// RFC 9293 §3.10.7.4 seventh: place text in the receive buffer.
    fn receive_data(&mut self, ctx: &mut Ctx, seq: SeqNumber, data: &[u8], tsecr: Option<u32>) {
        let offset = seq - self.rcv.nxt;
        let had_holes = !self.assembler.is_empty();
        let ring = self.recv_buf.capacity() + self.recv_buf.headroom();
        if self.recv_buf.len() + offset + data.len() > ring {
            self.cover_advertised_window();
        }
        let written = self.recv_buf.write_unallocated(offset, data);
        self.rcv.mss_seen = self.rcv.mss_seen.max(data.len().min(0xffff) as u16);
        if written < data.len() {
            // Past the buffer (window rounding): the peer resends the rest.
            self.flags.set(Flags::ACK_NOW);
        }
        match self.assembler.add(offset as u32, written as u32) {
            Ok(front) => {
                if front > 0 {
                    // Duplicate ACKs still owed for the old RCV.NXT would now
                    // carry the new one and signal a loss that is not there.
                    self.rcv.acks_owed = 0;
                    self.recv_buf.enqueue_unallocated(front as usize);
                    self.rcv.nxt += front as usize;
                    self.rcv.unacked += front;
                    ctx.stats.bytes_in += u64::from(front);
                    if !self.flags.has(Flags::READABLE_NOTIFIED) {
                        self.flags.set(Flags::READABLE_NOTIFIED);
                        self.events |= ev::READABLE;
                    }
                }
            }
            Err(_) => ctx.stats.ooo_dropped += 1,
        }
        self.rcv_rtt_measure(ctx.now, tsecr, data.len());
        if offset > 0 {
            // RFC 5681 §4.2: out-of-order data is acknowledged immediately.
            ctx.stats.out_of_order += 1;
            self.rcv.last_ooo = Some(seq);
            self.owe_immediate_ack();
        } else if had_holes {
            // RFC 5681 §4.2: so is data that fills a hole.
            self.flags.set(Flags::ACK_NOW);
        } else if self.rcv.unacked as usize >= 2 * usize::from(self.rcv.mss_seen.max(1)) {
            // RFC 5681 §4.2: ACK at least every second full-sized segment.
            self.flags.set(Flags::ACK_NOW);
        } else if self.timers.delayed_ack.is_none() {
            self.timers.delayed_ack = Some(ctx.now + ctx.cfg.ack_delay);
        }
        // A FIN that arrived ahead of this data.
        if self.rcv.fin_seq == Some(self.rcv.nxt) {
            self.on_fin(ctx);
        }
    }

    /// Fills in SACK blocks (RFC 2018 §4): a pending D-SACK block first
    /// (RFC 2883 §4), then the block holding the most recent out-of-order
    /// segment, then the others, highest first; as many as fit next to the
    /// timestamp option (3 with it, 4 without).
    fn sack_blocks(&mut self, o: &mut TcpOptions) {
        let max = if o.timestamps.is_some() { 3 } else { 4 };
        let mut n = 0;
        if let Some((l, r)) = self.rcv.dsack.take() {
            o.sack_blocks[n] = (l.0, r.0);
            n += 1;
        }
        let nxt = self.rcv.nxt;
        let abs = |(s, e): (u32, u32)| (nxt + s as usize, nxt + e as usize);
        let first = self.rcv.last_ooo.and_then(|l| {
            self.assembler
                .ranges()
                .map(abs)
                .find(|&(s, e)| s <= l && l < e)
        });
        if let Some(b) = first {
            if n < max {
                o.sack_blocks[n] = (b.0 .0, b.1 .0);
                n += 1;
            }
        }
        for b in self.assembler.ranges().rev().map(abs) {
            if n >= max {
                break;
            }
            if Some(b) != first {
                o.sack_blocks[n] = (b.0 .0, b.1 .0);
                n += 1;
            }
        }
        o.sack_block_count = n as u8;
    }

    /// RFC 5681 §4.2: every out-of-order segment (and, RFC 5681 §3.2 /
    /// RFC 9293 §3.10.7.4, every unacceptable duplicate) gets an immediate
    /// ACK of its own. A sans-IO stack fed a batch of segments before it is
    /// polled would otherwise send one ACK for the whole batch: the sender,
    /// without SACK, then sees one duplicate ACK where there were twenty,
    /// never reaches its duplicate-ACK threshold and waits for its RTO.
    fn owe_immediate_ack(&mut self) {
        if self.flags.has(Flags::ACK_NOW) {
            self.rcv.acks_owed = self.rcv.acks_owed.saturating_add(1).min(MAX_ACKS_OWED);
        }
        self.flags.set(Flags::ACK_NOW);
    }

    /// RFC 9293 §3.10.7.4 eighth: the FIN bit, in sequence.
    fn on_fin(&mut self, ctx: &mut Ctx) {
        if self.flags.has(Flags::PEER_FIN) {
            return;
        }
        self.rcv.fin_seq = None;
        self.rcv.nxt += 1;
        self.flags.set(Flags::PEER_FIN | Flags::ACK_NOW);
        self.events |= ev::PEER_CLOSED;
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_acked() {
                    self.enter_time_wait(ctx);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(ctx),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, ctx: &mut Ctx) {
        self.state = State::TimeWait;
        self.timers.rto = None;
        self.timers.persist = None;
        self.timers.keepalive = None;
        self.timers.delayed_ack = None;
        self.timers.close = Some(ctx.now + ctx.cfg.msl.saturating_mul(2));
        self.assembler.clear();
    }

    fn arm_keepalive(&mut self, ctx: &mut Ctx) {
        if let Some(ka) = ctx.cfg.keepalive {
            if self.state.is_synchronized() && self.state != State::TimeWait {
                self.timers.keepalive = Some(ctx.now + ka.idle);
            }
        }
    }

    // ---------------------------------------------------------------
    // Timers
    // ---------------------------------------------------------------

    /// The earliest pending deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        let t = &self.timers;
        [t.rto, t.delayed_ack, t.persist, t.keepalive, t.close]
            .into_iter()
            .flatten()
            .min()
    }

    /// Handles every timer due at `ctx.now`.
    pub fn on_timeout(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        let due = |d: Option<Instant>| d.is_some_and(|d| d <= now);
        if due(self.timers.close) {
            self.timers.close = None;
            let reason = if self.state == State::TimeWait {
                CloseReason::Normal
            } else {
                CloseReason::Timeout
            };
            self.close_now(reason);
            return;
        }
        if due(self.timers.rto) && self.flags.has(Flags::PROBE_ARMED) {
            self.on_probe_timeout(ctx);
        } else if due(self.timers.rto) {
            self.timers.rto = None;
            self.on_retransmit_timeout(ctx);
            if self.state == State::Closed {
                return;
            }
        }
        if due(self.timers.persist) {
            self.timers.persist = None;
            self.timers.persist_backoff = self.timers.persist_backoff.saturating_add(1);
            self.flags.set(Flags::PROBE_NOW);
        }
        if due(self.timers.delayed_ack) {
            self.timers.delayed_ack = None;
            self.flags.set(Flags::ACK_NOW);
        }
        if due(self.timers.keepalive) {
            self.timers.keepalive = None;
            if let Some(ka) = ctx.cfg.keepalive {
                if self.timers.keepalive_probes >= ka.probes {
                    self.close_now(CloseReason::Timeout);
                    return;
                }
                self.timers.keepalive_probes += 1;
                self.flags.set(Flags::KEEPALIVE_NOW);
                self.timers.keepalive = Some(now + ka.interval);
            }
        }
    }

    /// RFC 6298 §5.4-5.6 and RFC 5681 §3.1 on timeout.
    fn on_retransmit_timeout(&mut self, ctx: &mut Ctx) {
        ctx.stats.rto_timeouts += 1;
        let limit = if self.state.is_synchronized() {
            ctx.cfg.max_retransmits
        } else {
            ctx.cfg.max_syn_retransmits
        };
        if self.timers.retransmits >= limit {
            if self.state.is_synchronized() {
                self.send_rst(ctx);
            }
            self.close_now(CloseReason::Timeout);
            return;
        }
        self.timers.retransmits += 1;
        self.rtt.on_timeout();
        self.timers.rtt_seq = None;
        self.ts.rtt_floor = self.tsval(ctx.now);
        match self.state {
            State::SynSent | State::SynReceived => self.snd.nxt = self.snd.iss,
            _ => {
                let flight = self.snd.max - self.snd.una;
                if self.timers.retransmits == 1 {
                    self.cc.on_retransmit_timeout(flight);
                }
                // RFC 6582 §3.2 step 1 (after a timeout); RFC 6675 §5.1:
                // RecoveryPoint = HighData and SACK recovery ends. RFC 2018
                // §8: the receiver may have reneged, so prior SACK
                // information is discarded; blocks arriving from now on
                // still spare the go-back-N retransmission what they cover.
                self.snd.recover = self.snd.max;
                self.flags.clear(Flags::IN_RECOVERY | Flags::SACK_RECOVERY);
                self.scoreboard.clear();
                self.snd.dup_acks = 0;
                // Go back N: resend from the first unacknowledged byte; the
                // first segment goes out even into a zero window.
                self.snd.nxt = self.snd.una;
                self.flags.set(Flags::RETRANSMIT_ONE);
            }
        }
    }

    /// Called when `poll_transmit` produced nothing: if data waits with
    /// nothing in flight, the window (or SWS avoidance) holds it back, so
    /// run the persist timer (RFC 9293 §3.8.6.1).
    pub fn on_output_idle(&mut self, now: Instant) {
        if !self.state.can_send() || self.timers.persist.is_some() {
            return;
        }
        let unsent = self.unsent_bytes();
        if unsent > 0 && self.snd.nxt == self.snd.una && self.snd.una == self.snd.max {
            let base = self.rtt.rto();
            let d = base.saturating_mul(1u64 << self.timers.persist_backoff.min(16));
            let max = Duration::from_secs(60).max(base);
            self.timers.persist = Some(now + d.min(max));
        }
    }

    fn unsent_bytes(&self) -> usize {
        let sent = self.snd.nxt.saturating_sub(self.data_start());
        self.send_buf.len().saturating_sub(sent)
    }

    // ---------------------------------------------------------------
    // Output
    // ---------------------------------------------------------------

    /// Writes at most one segment into `buf`; returns its length.
    pub fn poll_transmit(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        match self.state {
            State::Closed | State::Listen => None,
            State::SynSent => {
                if self.snd.nxt == self.snd.iss {
                    self.emit_syn(ctx, buf, false)
                } else {
                    None
                }
            }
            State::SynReceived => {
                if self.snd.nxt == self.snd.iss || self.flags.has(Flags::ACK_NOW) {
                    self.emit_syn(ctx, buf, true)
                } else {
                    None
                }
            }
            _ => self.poll_transmit_synchronized(ctx, buf),
        }
    }

    fn emit_syn(&mut self, ctx: &mut Ctx, buf: &mut [u8], ack: bool) -> Option<usize> {
        let cfg = ctx.cfg;
        let now = ctx.now;
        let mut options = TcpOptions {
            mss: Some(cfg.mss),
            ..TcpOptions::default()
        };
        let offer_ts = if ack {
            self.flags.has(Flags::TIMESTAMPS)
        } else {
            cfg.timestamps
        };
        if offer_ts {
            options.timestamps = Some((self.tsval(now), if ack { self.ts.recent } else { 0 }));
        }
        if self.flags.has(Flags::WS_OFFERED) {
            options.window_scale = Some(offered_wscale(cfg));
        }
        // RFC 2018 §2: in a SYN-ACK only if the SYN carried it.
        options.sack_permitted = if ack {
            self.flags.has(Flags::SACK)
        } else {
            cfg.sack
        };
        let flags = if ack {
            TcpFlags::SYN | TcpFlags::ACK
        } else {
            TcpFlags::SYN
        };
        let repr = TcpRepr {
            src_port: self.tuple.local.port(),
            dst_port: self.tuple.remote.port(),
            seq: self.snd.iss.0,
            ack: if ack { self.rcv.nxt.0 } else { 0 },
            flags,
            // RFC 7323 §2.2: the window in a SYN is not scaled.
            window: self.recv_buf.window().min(0xffff) as u16,
            urgent: 0,
            options,
        };
        let len = repr.emit(buf).ok()?;
        if ack {
            self.rcv.adv = self.rcv.nxt + usize::from(repr.window);
            self.ts.last_ack_sent = self.rcv.nxt;
            self.flags.clear(Flags::ACK_NOW);
        }
        if self.snd.max > self.snd.iss {
            ctx.stats.retransmits += 1;
        } else if !self.flags.has(Flags::TIMESTAMPS) && !offer_ts {
            self.timers.rtt_seq = Some((self.snd.iss + 1, now));
        }
        self.snd.nxt = self.snd.iss + 1;
        self.snd.max = self.snd.max.max(self.snd.nxt);
        if self.timers.rto.is_none() {
            self.flags.clear(Flags::PROBE_ARMED);
            self.timers.rto = Some(now + self.rtt.rto());
        }
        Some(len)
    }

    fn poll_transmit_synchronized(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        if self.state.can_send() {
            let start = self.data_start();
            let buffered = self.send_buf.len();
            let fin_seq = self.fin_seq();

            // Fast retransmit / partial ACK / timeout: one segment at SND.UNA.
            if self.flags.has(Flags::RETRANSMIT_ONE) {
                self.flags.clear(Flags::RETRANSMIT_ONE);
                let mut len = buffered.min(self.eff_mss());
                if let (_, Some(sacked)) = self.scoreboard.next_unsacked(self.snd.una) {
                    // Not into data the peer already holds.
                    len = len.min(sacked - self.snd.una);
                }
                if let Some(n) = self.retransmit_at(ctx, buf, self.snd.una, len) {
                    return Some(n);
                }
            }

            // Window probe (persist timer): one byte into a zero window, or
            // whatever the window allows if SWS avoidance held data back.
            if self.flags.has(Flags::PROBE_NOW) {
                self.flags.clear(Flags::PROBE_NOW);
                let off = self.snd.nxt.saturating_sub(start);
                if off < buffered {
                    let len = if self.snd.wnd == 0 {
                        1
                    } else {
                        (self.snd.wnd as usize).min(self.eff_mss())
                    }
                    .min(buffered - off);
                    ctx.stats.window_probes += 1;
                    return self.emit_segment(ctx, buf, self.snd.nxt, len, false);
                }
            }

            // RFC 6675 §5 step (C): in SACK recovery, send while cwnd -
            // pipe >= 1 SMSS, choosing by NextSeg(): (1) a lost segment
            // above HighRxt, else (2) new data. Rule (3), any un-SACKed
            // segment above HighRxt, is not used: when the receive window
            // or the send buffer limits the flight, it resends segments
            // that are merely in flight (in the simulator, ten times the
            // retransmissions at 0.1 % loss with 64 KiB buffers, for no
            // goodput). Rule (4), the rescue retransmission, is left to
            // the loss probe.
            let mss = self.eff_mss();
            let sack_recovery = self.flags.has(Flags::SACK_RECOVERY);
            let sack_room = if sack_recovery {
                let room = self.cc.window().saturating_sub(self.pipe());
                if room < mss {
                    0
                } else if let Some((seq, len)) = self.next_seg_lost() {
                    if let Some(n) = self.retransmit_at(ctx, buf, seq, len) {
                        return Some(n);
                    }
                    room
                } else {
                    room
                }
            } else {
                0
            };

            // New (or go-back-N) data. After a timeout, go-back-N skips
            // what SACK blocks arriving since reported held (RFC 6675
            // §5.1).
            let mut sacked_limit = None;
            if self.snd.nxt < self.snd.max && !sack_recovery && !self.scoreboard.is_empty() {
                let (s, lim) = self.scoreboard.next_unsacked(self.snd.nxt);
                self.snd.nxt = s.min(self.snd.max);
                sacked_limit = lim.filter(|&l| l < self.snd.max);
            }
            let off = self.snd.nxt.saturating_sub(start);
            let unsent = buffered.saturating_sub(off);
            let in_flight = self.snd.nxt - self.snd.una;
            let usable = if sack_recovery {
                sack_room.min((self.snd.wnd as usize).saturating_sub(in_flight))
            } else {
                let wnd = (self.snd.wnd as usize).min(self.cc.window() + self.limited_transmit());
                wnd.saturating_sub(in_flight)
            };
            let mut len = unsent.min(usable).min(mss);
            if let Some(l) = sacked_limit {
                len = len.min(l - self.snd.nxt);
            }
            if len > 0 {
                let idle = self.snd.nxt == self.snd.una;
                let nodelay = self.flags.has(Flags::NODELAY);
                let closing = fin_seq.is_some();
                // RFC 9293 §3.7.4 (Nagle) and §3.8.6.2.1 (sender SWS).
                let send = len == mss
                    || (len == unsent && (idle || nodelay || closing))
                    || ((idle || nodelay) && len >= (self.snd.max_wnd as usize / 2).max(1));
                if send {
                    let fin = fin_seq.is_some_and(|fs| self.snd.nxt + len == fs);
                    return self.emit_segment(ctx, buf, self.snd.nxt, len, fin);
                }
            }
            // A bare FIN once all data is out.
            if let Some(fs) = fin_seq {
                if self.snd.nxt == fs {
                    return self.emit_segment(ctx, buf, fs, 0, true);
                }
            }
        }
        if self.flags.has(Flags::KEEPALIVE_NOW) {
            self.flags.clear(Flags::KEEPALIVE_NOW);
            // RFC 1122 §4.2.3.6: SEG.SEQ = SND.NXT - 1, no data.
            ctx.stats.keepalive_probes += 1;
            let seq = self.snd.una - 1;
            return self.emit_raw(ctx, buf, seq, TcpFlags::ACK, 0);
        }
        if self.flags.has(Flags::ACK_NOW) {
            // SND.MAX rather than SND.NXT: after a timeout rewound SND.NXT,
            // the peer may already have everything up to SND.MAX, and a pure
            // ACK below its RCV.NXT would be unacceptable (and dropped).
            return self.emit_raw(ctx, buf, self.snd.max, TcpFlags::ACK, 0);
        }
        None
    }

    /// Arms the retransmission timer after an ACK advanced SND.UNA (RFC
    /// 6298 §5.2 / §5.3). If data remains outstanding and more than one
    /// segment is in flight, a loss probe timeout comes first (RFC 8985
    /// §7.2: PTO = 2*SRTT, at most the RTO; a single segment in flight may
    /// wait for a delayed ACK, so it gets the RTO). Without SACK, the probe
    /// is the segment at SND.UNA (see `on_probe_timeout`).
    fn arm_rto_or_probe(&mut self, now: Instant) {
        self.flags.clear(Flags::PROBE_ARMED);
        if self.snd.una == self.snd.max {
            self.timers.rto = None;
            return;
        }
        let rto = self.rtt.rto();
        let flight = self.snd.max - self.snd.una;
        if let Some(pto) = self.pto() {
            if self.probe_worthwhile(flight)
                && pto < rto
                && self.timers.loss_probes < MAX_LOSS_PROBES
            {
                self.flags.set(Flags::PROBE_ARMED);
                self.timers.rto = Some(now + pto);
                return;
            }
        }
        self.timers.rto = Some(now + rto);
    }

    /// RFC 8985 §7.2: (re)start the loss probe timer after sending new
    /// data, if that makes it fire before the RTO would. Without this, an
    /// RTO armed while one segment was in flight would guard the segments
    /// sent after it too, and a loss among them too small for three
    /// duplicate ACKs would wait the full RTO.
    fn rearm_probe(&mut self, now: Instant) {
        let flight = self.snd.max - self.snd.una;
        if self.timers.loss_probes >= MAX_LOSS_PROBES || !self.probe_worthwhile(flight) {
            return;
        }
        let Some(pto) = self.pto() else {
            return;
        };
        let at = now + pto;
        if let Some(d) = self.timers.rto {
            if !self.flags.has(Flags::PROBE_ARMED) && d <= at {
                return;
            }
        }
        self.flags.set(Flags::PROBE_ARMED);
        self.timers.rto = Some(at);
    }

    /// RFC 8985 §7.2 gives a lone segment in flight the worst-case delayed
    /// ACK time on top of the PTO, which leaves only the RTO; in fast
    /// recovery, though, that segment is a retransmission filling a hole,
    /// which the receiver acknowledges at once (RFC 5681 §4.2), so it gets
    /// a probe as well (a needless one costs a segment, no window).
    fn probe_worthwhile(&self, flight: usize) -> bool {
        flight > self.eff_mss() || (flight > 0 && self.flags.has(Flags::IN_RECOVERY))
    }

    /// The loss probe timeout (RFC 8985 §7.2: 2*SRTT), backed off per probe
    /// already sent for this SND.UNA; `None` before any RTT sample.
    fn pto(&self) -> Option<Duration> {
        let srtt = self.rtt.srtt()?;
        Some(
            srtt.saturating_mul(2)
                .max(MIN_PTO)
                .saturating_mul(1 << self.timers.loss_probes.min(8)),
        )
    }

    /// The loss probe timeout fired: nothing advanced SND.UNA for two RTTs
    /// with several segments in flight. This is the tail loss probe of RFC
    /// 8985 §7 adapted to a sender without SACK: RFC 8985 §7.3 probes with
    /// new data or the last segment so that SACK can reveal the losses,
    /// but a cumulative ACK only ever points at SND.UNA, so the probe is
    /// the segment there. Typical case: a full ACK ended fast recovery
    /// (RFC 6582 §3.2 step 3) while the segment at the new SND.UNA was lost
    /// too, and every later segment has already produced its duplicate ACK;
    /// or too few segments were in flight for three duplicate ACKs. Either
    /// way the alternative is an RTO of at least 200 ms on a path whose RTT
    /// may be well under a millisecond. Outside fast recovery this is a
    /// loss signal like a fast retransmit (RFC 5681 §3.2 steps 2-3, with
    /// Eifel undo if it proves spurious); the RTO is re-armed (RFC 8985
    /// §7.3) once `MAX_LOSS_PROBES` probes (each after twice the previous
    /// wait, like RTO backoff) went unanswered for one value of SND.UNA: a
    /// lost probe should not cost a full RTO on a 5 % loss path either.
    fn on_probe_timeout(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        self.flags.set(Flags::RETRANSMIT_ONE);
        ctx.stats.loss_probes += 1;
        if !self.flags.has(Flags::IN_RECOVERY) {
            self.enter_recovery(now);
        } else if self.flags.has(Flags::SACK_RECOVERY) {
            // Two RTTs without progress in SACK recovery: what was sent
            // before is not coming (IsLost() cannot say so for a tail the
            // receiver never SACKed above, e.g. segments it had no room
            // to hold out of order). Everything un-SACKed counts as lost
            // and is retransmitted, retransmissions included, as after an
            // RTO (RFC 6675 §5.1) but without collapsing the window.
            self.snd.lost_floor = self.snd.max;
            self.snd.high_rxt = self.snd.una;
            self.snd.rtx_mark = self.snd.max;
        } else {
            self.arm_lost_retransmit();
        }
        self.timers.rtt_seq = None;
        self.timers.loss_probes += 1;
        self.arm_rto_or_probe(now);
    }

    /// RFC 6582 §3.2 step 2 / RFC 5681 §3.2 steps 2-3: enter fast recovery
    /// and retransmit SND.UNA.
    fn enter_recovery(&mut self, now: Instant) {
        let flight = self.snd.max - self.snd.una;
        if self.flags.has(Flags::TIMESTAMPS) {
            // RFC 3522 §3.2 step (1) / RFC 4015 §3.2 step (1).
            self.snd.undo = Some(UndoState {
                retransmit_ts: self.tsval(now),
                pipe_prev: flight.max(self.cc.ssthresh()),
            });
        }
        self.flags.set(Flags::IN_RECOVERY | Flags::RETRANSMIT_ONE);
        self.snd.recover = self.snd.max;
        self.arm_lost_retransmit();
        if self.flags.has(Flags::SACK) {
            // RFC 6675 §5 step (4): RecoveryPoint = HighData, cwnd =
            // ssthresh = FlightSize / 2, retransmit HighACK + 1 (the
            // RETRANSMIT_ONE segment; HighRxt follows it).
            self.flags.set(Flags::SACK_RECOVERY);
            // After a timeout's go-back-N (entered through the RFC 6582
            // §4.2 heuristic), what lies between SND.NXT and SND.MAX is
            // covered by the scoreboard like any other flight.
            self.snd.nxt = self.snd.max;
            self.snd.high_rxt = self.snd.una;
            self.snd.rtx_mark = self.snd.max;
            self.snd.lost_floor = self.snd.una;
            self.cc.on_sack_recovery(flight);
        } else {
            self.cc.on_fast_retransmit(flight);
        }
        self.timers.rtt_seq = None;
    }

    /// Sets the duplicate ACK count at which the retransmission of SND.UNA
    /// about to go out counts as lost: every segment in flight ahead of it
    /// may still produce one duplicate ACK, and three more (the RFC 5681
    /// §3.2 threshold, which absorbs duplicated segments and ACKs) can only
    /// come from segments sent after the retransmission, so it should have
    /// arrived first. This is RFC 5681's duplicate-ACK rule applied to the
    /// retransmission, the non-SACK counterpart of the lost-retransmission
    /// detection of RFC 8985 §6.2 (RACK).
    fn arm_lost_retransmit(&mut self) {
        let mss = self.eff_mss().max(1);
        let ahead = (self.snd.max - self.snd.una).div_ceil(mss);
        let at = usize::from(self.snd.dup_acks) + ahead + 3;
        self.snd.lost_rtx_dups = at.min(usize::from(u16::MAX)) as u16;
    }

    /// RFC 3042 §2 limited transmit: on the first and second duplicate ACK,
    /// new data may go out up to two segments beyond the congestion window
    /// (cwnd itself is unchanged), so that a loss in a small window still
    /// yields the three duplicate ACKs fast retransmit needs instead of a
    /// retransmission timeout.
    fn limited_transmit(&self) -> usize {
        if self.flags.has(Flags::IN_RECOVERY) || self.snd.nxt != self.snd.max {
            return 0;
        }
        usize::from(self.snd.dup_acks.min(2)) * self.eff_mss()
    }

    /// Emits a data and/or FIN segment at `seq` and advances SND.NXT.
    fn emit_segment(
        &mut self,
        ctx: &mut Ctx,
        buf: &mut [u8],
        seq: SeqNumber,
        len: usize,
        fin: bool,
    ) -> Option<usize> {
        let now = ctx.now;
        let mut flags = TcpFlags::ACK;
        if len > 0 {
            flags = flags | TcpFlags::PSH;
        }
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        let (written, payload) = self.emit_raw_payload(ctx, buf, seq, flags, len)?;
        let fin = fin && payload == len;
        let end = seq + payload + usize::from(fin);
        let is_retransmit = seq < self.snd.max;
        if is_retransmit {
            ctx.stats.retransmits += 1;
            // Karn (RFC 6298 §3): no sample from retransmitted data.
            if self.timers.rtt_seq.is_some_and(|(e, _)| e > seq) {
                self.timers.rtt_seq = None;
            }
        } else if self.timers.rtt_seq.is_none() && end > seq {
            self.timers.rtt_seq = Some((end, now));
        }
        if payload > 0 {
            ctx.stats.data_segments_out += 1;
            ctx.stats.bytes_out += payload as u64;
            // RFC 5681 §4.1: restart from IW after an idle period.
            if self.snd.una == self.snd.max
                && now.saturating_since(self.timers.last_send) > self.rtt.rto()
            {
                self.cc.on_idle_restart();
            }
            self.timers.last_send = now;
        }
        if end > self.snd.nxt {
            self.snd.nxt = end;
        }
        self.snd.max = self.snd.max.max(self.snd.nxt);
        // RFC 6298 §5.1.
        if self.timers.rto.is_none() && self.snd.una != self.snd.max {
            self.flags.clear(Flags::PROBE_ARMED);
            self.timers.rto = Some(now + self.rtt.rto());
        }
        if !is_retransmit && payload > 0 {
            self.rearm_probe(now);
        }
        Some(written)
    }

    fn emit_raw(
        &mut self,
        ctx: &mut Ctx,
        buf: &mut [u8],
        seq: SeqNumber,
        flags: TcpFlags,
        len: usize,
    ) -> Option<usize> {
        self.emit_raw_payload(ctx, buf, seq, flags, len)
            .map(|(n, _)| n)
    }

    /// Builds and writes a segment with up to `len` bytes from the send
    /// buffer at `seq`. Every segment carries an ACK of RCV.NXT, so the
    /// delayed-ACK state is cleared. Returns (bytes written, payload bytes).
    fn emit_raw_payload(
        &mut self,
        ctx: &mut Ctx,
        buf: &mut [u8],
        seq: SeqNumber,
        flags: TcpFlags,
        len: usize,
    ) -> Option<(usize, usize)> {
        let mut options = TcpOptions::default();
        if self.flags.has(Flags::TIMESTAMPS) {
            options.timestamps = Some((self.tsval(ctx.now), self.ts.recent));
        }
        if len == 0 && self.flags.has(Flags::SACK) {
            // Pure ACKs only: on a data segment the blocks would push it
            // past the MSS, which only accounts for timestamps.
            self.sack_blocks(&mut options);
        }
        let window = self.advertise_window();
        let repr = TcpRepr {
            src_port: self.tuple.local.port(),
            dst_port: self.tuple.remote.port(),
            seq: seq.0,
            ack: self.rcv.nxt.0,
            flags,
            window,
            urgent: 0,
            options,
        };
        let hl = repr.emit(buf).ok()?;
        let room = buf.len() - hl;
        let mut payload = len.min(room);
        if payload > 0 {
            let off = seq - self.data_start();
            payload = self
                .send_buf
                .read_allocated(off, &mut buf[hl..hl + payload]);
        }
        if payload < len && flags.fin() {
            // Truncated by a small buffer: the FIN goes out later.
            buf[13] &= !TcpFlags::FIN.0;
        }
        self.ts.last_ack_sent = self.rcv.nxt;
        self.rcv.unacked = 0;
        self.timers.delayed_ack = None;
        if self.rcv.acks_owed > 0 {
            // One more (duplicate) ACK follows: see `owe_immediate_ack`.
            self.rcv.acks_owed -= 1;
            self.flags.set(Flags::ACK_NOW);
        } else {
            self.flags.clear(Flags::ACK_NOW);
        }
        Some((hl + payload, payload))
    }

    // ---------------------------------------------------------------
    // Migration
    // ---------------------------------------------------------------

    /// Captures the complete state.
    pub fn export(&self) -> ConnectionSnapshot {
        let mut out_of_order = Vec::new();
        for (s, e) in self.assembler.ranges() {
            let mut v = vec![0; (e - s) as usize];
            self.recv_buf.read_unallocated(s as usize, &mut v);
            out_of_order.push((s, v));
        }
        let mut flags = self.flags;
        flags.clear(Flags::IN_BACKLOG);
        ConnectionSnapshot {
            tuple: self.tuple,
            state: self.state,
            flags,
            snd: self.snd,
            rcv: self.rcv,
            ts: self.ts,
            timers: self.timers,
            rtt: self.rtt,
            cc: self.cc,
            tuning: self.tune,
            send_capacity: self.send_buf.capacity(),
            send_data: self.send_buf.to_vec(),
            recv_capacity: self.recv_buf.capacity(),
            recv_headroom: self.recv_buf.headroom(),
            recv_data: self.recv_buf.to_vec(),
            out_of_order,
            sacked: self.scoreboard.ranges().to_vec(),
        }
    }

    /// Rebuilds a connection from a snapshot.
    pub fn import(s: &ConnectionSnapshot) -> Result<Self, crate::Error> {
        if s.send_data.len() > s.send_capacity
            || s.recv_data.len() > s.recv_capacity.saturating_add(s.recv_headroom)
            || matches!(s.state, State::Closed | State::Listen)
        {
            return Err(crate::Error::InvalidSnapshot);
        }
        let mut send_buf = RingBuffer::new(s.send_capacity);
        send_buf.enqueue_slice(&s.send_data);
        let mut recv_buf = RingBuffer::new(s.recv_capacity);
        recv_buf.resize(s.recv_capacity, s.recv_headroom);
        if recv_buf.write_unallocated(0, &s.recv_data) != s.recv_data.len() {
            return Err(crate::Error::InvalidSnapshot);
        }
        recv_buf.enqueue_unallocated(s.recv_data.len());
        let mut assembler = Assembler::new();
        for (off, bytes) in &s.out_of_order {
            let n = recv_buf.write_unallocated(*off as usize, bytes);
            if n != bytes.len() || *off == 0 || assembler.add(*off, n as u32) != Ok(0) {
                return Err(crate::Error::InvalidSnapshot);
            }
        }
        let mut scoreboard = Scoreboard::new();
        for &(l, r) in &s.sacked {
            if l < s.snd.una || r > s.snd.max || r <= l {
                return Err(crate::Error::InvalidSnapshot);
            }
            scoreboard.add(l, r);
        }
        Ok(Connection {
            tuple: s.tuple,
            state: s.state,
            flags: s.flags,
            events: 0,
            close_reason: CloseReason::Normal,
            snd: s.snd,
            rcv: s.rcv,
            ts: s.ts,
            timers: s.timers,
            rtt: s.rtt,
            cc: s.cc,
            tune: s.tuning,
            assembler,
            scoreboard,
            send_buf,
            recv_buf,
        })
    }

    pub fn is_passive(&self) -> bool {
        self.flags.has(Flags::PASSIVE)
    }

    pub fn in_backlog(&self) -> bool {
        self.flags.has(Flags::IN_BACKLOG)
    }

    pub fn set_in_backlog(&mut self, on: bool) {
        if on {
            self.flags.set(Flags::IN_BACKLOG);
        } else {
            self.flags.clear(Flags::IN_BACKLOG);
        }
    }
}
