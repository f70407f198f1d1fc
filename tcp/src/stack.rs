//! The per-core shard: connection table, listeners, timer wheel, event and
//! transmit queues.

use crate::buckets::{BucketLists, Link, NIL};
use crate::challenge::ChallengeBudget;
use crate::chunk_pool::ChunkPool;
use crate::connection::{
    announced_mss, ev, offered_wscale, reopened_iss, Connection, Ctx, Flags, PendingRst,
    RecvMemory, Replies, ResetReason, State, TooBigOutcome, UnreachableOutcome,
};
use crate::ecn::{Ecn, EcnMode};
use crate::flow_key::FlowKey;
use crate::flow_label::FlowLabels;
use crate::isn::IsnGenerator;
use crate::lent_frames::{FrameRef, FrameStore, Lend, LentFrames, NoFrames};
use crate::owed_acks::OwedAcks;
use crate::rack::FlightPool;
use crate::seq::SeqNumber;
use crate::syn_cookie::{self, CookieJar};
use crate::table::ConnTable;
use crate::time::{Deadline, Instant};
use crate::time_wait::{self, RecordCtx, TimeWait, TimeWaitTable, Verdict};
use crate::timer::{TimerWheel, WheelKeys, WheelPos};
use crate::{
    BucketStats, CloseReason, Config, CongestionAlgorithm, ConnHandle, Error, Event, FourTuple,
    ListenerId, LookupHint, Snapshot, StateHint, Stats, SynFilter, Transmit,
};
use flowlane_wire::peek::Endpoints;
use flowlane_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// Most slots [`Stack::new`] reserves (about 700 MB of address space).
const MAX_SLOTS_RESERVED: usize = 1 << 20;

/// How far past [`Config::max_connections`] connections imported from
/// another stack may take this one ([`Stack::import_bucket`],
/// [`Stack::import`]): an eighth of the cap, at least one. A move adds no
/// connection to the system, and one refused at import is lost (its
/// handler is told, its peer reset), so a stack at its cap still takes a
/// moved bucket within this headroom; beyond it the cap is a bound on
/// memory again, and imports are refused. Reserved with the slab, so that
/// the headroom never grows it by copying.
fn import_headroom(max_connections: usize) -> usize {
    max_connections.div_ceil(8).max(1)
}

/// How many connections ahead of the one it imports
/// [`Stack::import_bucket_prefetching`] names the lines of: each slot is
/// eleven lines, which a few connections' worth of prefetches in flight
/// cover.
const IMPORT_AHEAD: usize = 4;

/// Parts' vectors an import keeps for the exports to come
/// ([`Stack::keep_spare_part`]), and the most snapshots each may hold
/// room for: at most 2 × 128 × some 650 bytes a stack.
const SPARE_PARTS: usize = 2;
const SPARE_PART_MAX: usize = 128;

/// The shortest time over which the stack judges, under memory pressure,
/// whether a connection needs more than the floor ([`RecvMemory`]): one
/// that received less than a segment in that time is parked
/// ([`Flags::RCV_PARKED`]). Longer than a working peer's pauses within a
/// transfer (a retransmission timeout is 200 ms to a second), so that
/// only idle and trickling connections are; a look through every slot
/// (a round) takes at least this long, so that each judgement covers it.
pub(crate) const PARK_IDLE: crate::time::Duration = crate::time::Duration::from_secs(1);

/// The most segments a [`PARK_IDLE`]-long period a connection must
/// receive, under memory pressure, to be judged to need more than the
/// floor ([`park_threshold`]): 8 segments a second per connection, about
/// 93 kbit/s (185 Mbit/s for 2,000 connections, against the 23 of one
/// segment a second) is what a peer must send to keep windows committed
/// that it does not use.
const PARK_SEGMENTS_MAX: u64 = 8;

/// How much a connection must receive within a [`PARK_IDLE`]-long period,
/// under memory pressure, to be judged to need more than the floor (not
/// parked by [`Stack::park_idle`], charged again by [`touch_parked`]): what
/// the floor carries ([`floor_carries`]) in a quarter of the period at the
/// connection's round-trip time, between one and [`PARK_SEGMENTS_MAX`]
/// round trips' worth. A connection that receives less is served by the
/// floor without loss: parked, it can still receive four times as much
/// (if its round trip is what the estimate says), and once it does it is
/// charged again when it has received the threshold within one period
/// (`park_epoch`): a quarter of a period later, or after the next period
/// begins if that comes first. The round-trip time is the smaller of the
/// sender's estimate (the handshake's sample at least) and the receiver's
/// (RFC 7323 §4's timestamps, or a window's worth of data): a peer
/// inflates it only by delaying both, and then pays a segment a second
/// per connection, as with no estimate. A receiver's round trip that grew
/// past four times the smaller estimate (a path whose queue filled after
/// the handshake, the only sample of a connection that sends nothing) is
/// not told from a trickle: at the floor such a connection does not
/// receive the threshold within a period, and is charged again only as
/// [`touch_parked`] lengthens the time it has (within 15 periods if it
/// receives a segment a period).
fn park_threshold(conn: &Connection, floor: usize) -> usize {
    let srtt_us = conn.rtt.srtt().map_or(u64::MAX, |d| d.as_nanos() / 1000);
    let rcv_rtt_us = match conn.tune.rcv_rtt_us {
        0 => u64::MAX,
        us => u64::from(us),
    };
    let rtt_us = srtt_us.min(rcv_rtt_us).max(1);
    let trips = (PARK_IDLE.as_nanos() / 1000 / 4 / rtt_us).clamp(1, PARK_SEGMENTS_MAX);
    floor_carries(conn, floor) * trips as usize
}

/// What the floor's window carries in a round trip, at most the floor: as
/// many whole segments of the peer's (their size lately, `mss_seen`) as
/// fit in the floor offered, which is rounded up to the window scale's
/// unit (`RecvMemory::limit`); the floor before any segment. One segment
/// where two do not fit (1,448 bytes with timestamps, 1,428 over IPv6, or
/// a peer's lowered path MTU's): counted in the floor's bytes, the
/// threshold asked for up to twice the round trips it means (9 for 8 at
/// 1,448 bytes, 16 at 769).
fn floor_carries(conn: &Connection, floor: usize) -> usize {
    let unit = 1usize << conn.rcv.wscale;
    let window = floor.div_ceil(unit) * unit;
    match usize::from(conn.rcv.mss_seen) {
        0 => floor,
        seg => ((window / seg).max(1) * seg).min(floor),
    }
}

/// The [`PARK_IDLE`]-long period `now` falls in, wrapping at 64: what a
/// slot's park mark is dated with, in the low six bits of its
/// `park_epoch`; the high two are the parked connection's attempts
/// ([`touch_parked`]).
fn park_epoch(now: Instant) -> u8 {
    (now.as_millis() / PARK_IDLE.as_millis() % 64) as u8
}

/// The most times a parked connection's time to reach its
/// [`park_threshold`] doubles ([`touch_parked`]): from one period to
/// eight, so that one receiving at least a segment a period is charged
/// again within 15 periods, whatever its round-trip estimate says.
const PARK_ATTEMPTS_MAX: u8 = 3;

/// A parked connection touched by a segment or a call
/// ([`Flags::RCV_PARKED`]): one that has received its [`park_threshold`]
/// (a segment's worth at least) since
/// its mark (RCV.NXT when it was parked, looked at by the look for
/// connections to park, or last started here) within the
/// [`PARK_IDLE`]-long period the mark was made in (`epoch`, [`park_epoch`])
/// shows it needs more than the floor, as the look would judge it: its
/// window is charged again, past the budget if it must (the offer
/// stands), and it shares the budget as before. Its threshold collected
/// over longer (across the period's end) is still a trickle: the mark
/// starts again from here, and the time it has to reach the threshold
/// doubles, up to [`PARK_ATTEMPTS_MAX`] times (the attempts, in the high
/// bits of `epoch`; parking starts them again). So a connection that
/// receives at least the threshold over eight periods (a segment a
/// period at most), however its round trip compares with the estimate
/// the threshold took, is charged again within fifteen periods: one
/// whose round trip grew past four times the estimate (a queue that
/// filled after the handshake, the only sample of a connection that
/// sends nothing) would otherwise never reach it within one period and
/// stay parked while the pressure lasts. Two segments a second against a
/// threshold of eight are charged again after 12 to 16 periods, and
/// parked at the next look. A mark 64 periods old or more may be taken as recent (the
/// date wraps): a connection that took that long is charged again, and
/// parked at the next look. Any other stays parked, charged
/// nothing and offered no window past the floor (`RecvMemory::of`): a
/// trickle neither charges it again nor makes it divide the budget.
/// (Charged again for every segment's worth, however slowly collected,
/// such connections were unparked with the windows they had been offered
/// while most others were parked, and parked again with those offers
/// standing: the committed memory climbed to a multiple of the budget.)
#[cold]
#[inline(never)]
fn touch_parked(
    conn: &mut Connection,
    (mark, epoch): (&mut SeqNumber, &mut u8),
    now: Instant,
    cfg: &Config,
    (parked, committed): (&mut usize, &mut usize),
) {
    let floor = usize::from(cfg.mss);
    if conn.rcv.nxt.saturating_sub(*mark) < park_threshold(conn, floor) {
        return;
    }
    let (then, attempts) = (*epoch & 63, *epoch >> 6);
    let today = park_epoch(now);
    let within = today.wrapping_sub(then) & 63 < 1 << attempts;
    *mark = conn.rcv.nxt;
    *epoch = today | (attempts + 1).min(PARK_ATTEMPTS_MAX) << 6;
    if within {
        conn.flags.clear(Flags::RCV_PARKED);
        *parked -= 1;
        *committed += conn.rcv_commitment(floor);
    }
}

/// How often, under memory pressure, the stack looks for connections to
/// park, and how many slots it looks at each time: a stack of 65,536
/// connections is looked through in 1.3 s, a slot at a time (no pause
/// longer than one look at 512 slots); a smaller one waits for the rest
/// of [`PARK_IDLE`] after each round.
const PARK_EVERY: crate::time::Duration = crate::time::Duration::from_millis(10);
const PARK_SLOTS: usize = 512;

/// A slab entry. Connections live inline in one `Vec`, so per-connection
/// state is contiguous and lookups are an index. In a fixed order
/// (`repr(C)`): what every segment reads of the slot first, then the
/// connection, whose own hot fields come first (see [`Connection`]), and
/// the wheel position, read only when the entry moves, last. Aligned to a
/// cache line: a slot's hot part then always spans the fewest lines, and
/// no line is shared with the neighbouring slot, whose segments would
/// write it from the other end (16 bytes of padding a slot; BENCHMARKS.md,
/// session 36: −7.5 % last-level misses at 10 000 connections). The slab
/// is reserved for [`Config::max_connections`] and the imports' headroom
/// past it up front ([`Stack::new`]), since an over-aligned `Vec` grows
/// by copying.
#[derive(Debug)]
#[repr(C, align(64))]
struct Slot {
    generation: u32,
    /// The connection's place on its RSS bucket's list.
    link: Link,
    in_dirty: bool,
    /// In `Stack::mem_waiting`.
    mem_waiting: bool,
    /// The state `Stack::by_state` counts the connection in: brought up
    /// to date after each call that may change it (in the padding after
    /// the flags: the slot does not grow).
    counted: State,
    /// When `park_mark` was made ([`park_epoch`], the low six bits) and,
    /// while parked, how many times the time to reach the mark doubled
    /// (the high two, [`touch_parked`]); the byte of padding left after
    /// `counted`.
    park_epoch: u8,
    /// The listener that accepted the connection (4 bytes, not the 8 of
    /// an `Option<ListenerId>`: the slot's budget).
    listener: SlotListener,
    /// RCV.NXT when the look for connections to park last saw the
    /// connection, or when it parked it ([`Stack::park_idle`]; in the
    /// padding before the deadline: the slot does not grow).
    park_mark: SeqNumber,
    /// Deadline of this slot's wheel entry (at most one). The connection's
    /// own next deadline may be later (the entry then fires early and is
    /// set again), never earlier.
    wheel_deadline: Deadline,
    conn: Option<Connection>,
    /// Where that entry sits in the wheel.
    wheel_pos: WheelPos,
    /// The connection's tuple's hash in [`Stack::table`] (written by
    /// [`Stack::place`]), so that its removal and its TIME-WAIT record do
    /// not hash the tuple again (two hashes of a connection's close; in
    /// the slot's last padding: the slot does not grow).
    hash: u64,
}

impl Slot {
    /// The slot's connection if it is live. A slot held for its `Closed`
    /// ([`Stack::remove`] without reuse) keeps its closed connection, its
    /// buffers given back, for [`Stack::info`] until the application
    /// handled that `Closed`: off its bucket's list (every live
    /// connection is on one) and under the next generation, so that no
    /// handle, lookup or look at the slot by tuple reaches it.
    fn live(&self) -> Option<&Connection> {
        self.conn.as_ref().filter(|_| self.link.pos != NIL)
    }
}

/// Moves a connection counted in `counted` to `state` in the per-state
/// counts (a state change: a few per connection, never per segment).
#[cold]
fn count_state_change(by_state: &mut [u32; State::COUNT], counted: &mut State, state: State) {
    by_state[counted.index()] -= 1;
    by_state[state.index()] += 1;
    *counted = state;
}

/// A delayed ACK's deadline for the connection in slot `idx` while it has
/// `generation` ([`Stack::acks_due`]).
#[derive(Debug, Clone, Copy)]
struct AckDue {
    at: Instant,
    idx: u32,
    generation: u32,
}

/// What a closed connection's queues held as the stack let it go (its
/// buffers given back at once): with the connection itself, kept in its
/// held slot until its `Closed` was handled, its final [`crate::ConnInfo`]
/// ([`Stack::info`]).
#[derive(Debug, Clone, Copy)]
struct ClosedQueues {
    conn: ConnHandle,
    /// In-order bytes received and never read.
    readable: usize,
    /// Bytes queued to send, sent or not, never acknowledged.
    queued: u32,
}

/// A slot's listener, `u32::MAX` for none.
#[derive(Debug, Clone, Copy)]
struct SlotListener(u32);

impl SlotListener {
    const NONE: SlotListener = SlotListener(u32::MAX);

    fn of(l: Option<ListenerId>) -> Self {
        l.map_or(Self::NONE, |l| SlotListener(l.0))
    }

    fn get(self) -> Option<ListenerId> {
        (self.0 != u32::MAX).then_some(ListenerId(self.0))
    }
}

fn slot_link(s: &mut Slot) -> &mut Link {
    &mut s.link
}

impl WheelKeys for Vec<Slot> {
    #[inline]
    fn wheel_pos(&mut self, key: u32) -> &mut WheelPos {
        &mut self[key as usize].wheel_pos
    }
}

/// Segments and payload bytes one RSS bucket received (single writer:
/// the stack's core).
#[derive(Debug, Clone, Copy, Default)]
struct BucketIn {
    segments: u64,
    bytes: u64,
    /// Another stack serves this bucket ([`Stack::set_bucket_away`]).
    away: bool,
}

/// Maps a connection to its RSS bucket ([`Stack::set_buckets`]).
struct BucketFn(Box<dyn Fn(&FourTuple) -> u16 + Send>);

impl std::fmt::Debug for BucketFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BucketFn(..)")
    }
}

/// A bucket's connections and TIME-WAIT records, taken out of one stack by
/// [`Stack::export_bucket`] for [`Stack::import_bucket`] on another (the
/// unit a rebalancer moves between cores). Opaque, like [`Snapshot`].
#[derive(Debug)]
pub struct BucketExport {
    bucket: u16,
    connections: Vec<(ConnHandle, Snapshot)>,
    /// The bucket's TIME-WAIT records, each with whether it owes the ACK
    /// of the peer's FIN.
    time_wait: Vec<(TimeWait, bool)>,
    complete: bool,
    /// The exporting stack's listeners that answer with SYN cookies, and
    /// until when their cookies may come back: a handshake the move
    /// overtook completes on the stack that takes the bucket (the stacks
    /// of one service share the key that checks them).
    cookies_until: Vec<(SocketAddr, Instant)>,
}

impl BucketExport {
    /// The bucket.
    pub fn bucket(&self) -> u16 {
        self.bucket
    }

    /// The bucket's connections, each with the handle it had on the
    /// exporting stack ([`Stack::import_bucket`] returns the new handles in
    /// this order).
    pub fn connections(&self) -> &[(ConnHandle, Snapshot)] {
        &self.connections
    }

    /// The bucket's TIME-WAIT records.
    pub fn time_wait_count(&self) -> usize {
        self.time_wait.len()
    }

    /// Whether this export left the bucket empty on the exporting stack:
    /// a whole bucket, or the last of its parts
    /// ([`Stack::export_bucket_part`]).
    pub fn complete(&self) -> bool {
        self.complete
    }
}

/// What [`Stack::handle_tcp`] did with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// This stack took it: processed, answered, or dropped and counted.
    Taken,
    /// Taken, and its payload kept in the frame lent with it
    /// ([`Stack::handle_tcp_frame`]): the caller leaves the frame alone
    /// until [`Stack::poll_released_frame`] gives it back.
    Kept,
    /// It matches no connection here and its RSS bucket is served by
    /// another stack ([`Stack::set_bucket_away`]): the caller hands it to
    /// that stack. Nothing was sent, and the segment is not counted here.
    Away {
        /// The segment's bucket.
        bucket: u16,
    },
}

/// What a SYN does to a connection in TIME-WAIT ([`Stack::time_wait_syn`]).
enum TimeWaitSyn {
    /// Not a SYN for a connection in TIME-WAIT: process it normally.
    NotOne,
    /// Nothing more to do: dropped as a possible old duplicate, or
    /// refused by the listener's filter (answered with an RST), the
    /// connection left in TIME-WAIT either way; counted.
    Done,
    /// The old incarnation was closed; the SYN goes to this listener.
    Reopen(ListenerId),
}

/// Whether a listener makes a connection of a SYN that would reopen
/// TIME-WAIT ([`Stack::takes_reopening_syn`]).
enum Reopening {
    /// It does: TIME-WAIT may end.
    Take,
    /// It cannot now (a cap, a full backlog without cookies): the SYN is
    /// handled as where nothing listens, TIME-WAIT left as it is.
    Leave,
    /// Its filter refused the connection: answered with an RST, TIME-WAIT
    /// left as it is.
    Refused,
}

struct Listener {
    local: SocketAddr,
    /// Whether `local`'s address is unspecified (it takes every
    /// destination address): read at each SYN, so kept apart.
    any_ip: bool,
    /// Asked at each SYN, if set ([`Stack::set_syn_filter`]).
    filter: Option<SynFilter>,
    half_open: usize,
    /// Its connections in this stack, in any state: those it opened
    /// here (half-open ones included) and those imported before their
    /// handshake completed (the slots that name it).
    live: usize,
    /// Until when an ACK for no connection may return one of this
    /// listener's SYN cookies (two cookie periods after the last sent);
    /// otherwise such ACKs are not checked at all.
    cookies_until: Instant,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local)
            .field("filter", &self.filter.is_some())
            .field("half_open", &self.half_open)
            .field("live", &self.live)
            .finish()
    }
}

/// One core's TCP stack: a shard of connections and listeners, driven
/// entirely by its caller.
///
/// # Call contract
///
/// The stack does no I/O and reads no clock. Whoever owns it (one worker
/// core; the stack is not shared) runs this loop:
///
/// 1. **Input.** For every TCP segment received for this stack, call
///    [`Stack::handle_tcp`] with the header the caller already parsed
///    (`flowlane_wire::TcpRepr`, e.g. from the frame classifier) and the
///    payload, after verifying the checksum; or [`Stack::handle_segment`]
///    with the raw segment, which parses it and does the same.
/// 2. **Timers.** Whenever `now` reaches [`Stack::poll_timeout`], call
///    [`Stack::handle_timeout`]. Calling it early is harmless (nothing
///    fires); calling it late delays retransmissions and ACKs.
/// 3. **Events.** After input, timers or application calls, drain
///    [`Stack::poll_event`] until it returns `None` and act on the events
///    (read after `Readable`, write after `Writable`, …). Application calls
///    ([`Stack::send`], [`Stack::recv`], [`Stack::close`], …) may be made at
///    any time between the other calls; they use the latest `now` seen.
/// 4. **Output.** Then call [`Stack::poll_transmit`] until it returns
///    `None`, sending each segment it writes (after adding IP headers and
///    the checksum). A `None` means nothing more to send *now*: call it
///    again after the next input, timer or application call. If the caller
///    cannot send a segment, it may stop early; the stack holds the rest.
/// 5. **Sleep** until the next segment arrives or [`Stack::poll_timeout`]
///    comes due, whichever is first. The deadline may change after any of
///    the calls above, so read it again each time round.
///
/// The time rule: every `now` is the caller's reading of one monotonic
/// clock ([`time::Instant`](crate::time::Instant) is nanoseconds since an
/// epoch the caller picks). It must not go backwards; an earlier value than
/// one already seen is treated as the latest seen. Stacks that exchange
/// connections through [`Stack::export`] / [`Stack::import`] must share
/// the clock.
#[derive(Debug)]
pub struct Stack {
    cfg: Config,
    isn: IsnGenerator,
    slots: Vec<Slot>,
    free: Vec<u32>,
    table: ConnTable,
    /// Every connection on its RSS bucket's list.
    buckets: BucketLists,
    /// What each bucket received.
    bucket_in: Vec<BucketIn>,
    bucket_of: Option<BucketFn>,
    /// Buckets marked away ([`Stack::set_bucket_away`]): while none is,
    /// an unmatched segment's bucket is not computed.
    away: usize,
    /// Compact records of closed connections in TIME-WAIT.
    time_wait: TimeWaitTable,
    listeners: Vec<Option<Listener>>,
    /// The listeners' ports and ids, sorted by port: a SYN's listener is
    /// found by a binary search (a few compares for the few ports a
    /// service listens on, where a hash map hashed and probed: 73
    /// instructions a SYN in `sim_bulk`). Ports are chosen by us, not by
    /// peers, and listeners are never removed.
    listener_ports: Vec<(u16, u32)>,
    wheel: TimerWheel,
    expired: Vec<u32>,
    /// Delayed ACKs' deadlines, in order (each is `Config::ack_delay` after
    /// its arming, and the stack's clock does not go back): one entry per
    /// connection at most while it is live ([`Flags::ACK_QUEUED`]), and
    /// those of connections closed since, skipped by their generation;
    /// so at most the live connections and those closed within one
    /// `ack_delay`. Not the wheel: arming a connection's delayed ACK
    /// ahead of its wheel entry cost a cancel and a filing (124
    /// instructions of a new connection's first data segment).
    acks_due: VecDeque<AckDue>,
    dirty: VecDeque<(u32, u32)>,
    events: VecDeque<Event>,
    /// An application call ended a connection while events were queued:
    /// until the queue empties, `poll_event` drops those of connections
    /// that are gone (only their `Closed` is told).
    events_stale: bool,
    /// Connections whose send the stack's send memory cut short
    /// ([`Config::send_memory`], `Flags::SEND_MEMORY_WAIT`), oldest first,
    /// each once: [`Stack::poll_event`] wakes them as memory frees.
    send_waiters: VecDeque<ConnHandle>,
    /// RSTs to send, and challenge ACKs left this second (RFC 5961 §7).
    replies: Replies,
    /// SYN cookies: their key, and the cookie SYN-ACKs to send.
    cookies: CookieJar,
    /// IPv6 flow labels ([`Stack::flow_label`]).
    flow_labels: FlowLabels,
    /// The ISS of the passive open a SYN reopening TIME-WAIT makes
    /// ([`crate::connection::reopened_iss`]): set by the reopening path for
    /// the listener's call that follows, taken by it.
    reopen_iss: Option<SeqNumber>,
    cookie_syn_acks: VecDeque<CookieSynAck>,
    pool: ChunkPool,
    /// Received payload kept in the caller's frames (zero-copy receive).
    lent: LentFrames,
    /// RACK flights that are over, kept for the next.
    flights: FlightPool,
    /// Receive memory committed by all connections together (the sum of
    /// [`Connection::rcv_commitment`]), against [`Config::recv_memory`].
    rcv_committed: usize,
    /// Connections whose window was held back for want of receive memory,
    /// oldest first: each gets a window update as memory frees.
    mem_waiting: VecDeque<(u32, u32)>,
    stats: Stats,
    live: usize,
    /// Slots of closed connections held until their `Closed` is taken
    /// (`poll_event`): not free, so counted with `live` against
    /// [`Config::max_connections`] (or a connect or SYN in the callback of
    /// an earlier event grew the slab past its reservation).
    held: usize,
    /// The slot of the last `Closed` taken ([`NO_SLOT`]: none), counted
    /// no more but kept off the free list until the next
    /// [`Stack::poll_event`] call: a connection opened while the
    /// application handles that `Closed` gets another slot.
    closed_slot: u32,
    /// The final queue lengths of each connection whose `Closed` is
    /// queued, in the order of those events (`events` is first in, first
    /// out, and drops no `Closed`): each is taken with its `Closed` by
    /// [`Stack::poll_event`]. Written only as a connection the application
    /// knows closes (`remove` without reuse, its slot held for the
    /// `Closed`), as Linux keeps a closed socket's `TCP_INFO` readable
    /// until the application lets it go. The rest of its figures stay in
    /// the connection itself, kept in its held slot ([`Slot::live`]):
    /// [`Stack::info`] computes them only when asked.
    closed_info: VecDeque<ClosedQueues>,
    /// The final queue lengths of the connection whose `Closed` was taken
    /// last, until the next [`Stack::poll_event`] call (as `closed_slot`,
    /// whose slot still holds the connection): with it, what
    /// [`Stack::info`] answers for it while the application handles its
    /// `Closed`.
    last_closed: Option<ClosedQueues>,
    /// Live connections by state ([`State::index`]), kept where a
    /// connection is placed, freed, or changes state in a call: what
    /// [`Stack::connections_in`] reads without walking the slots.
    by_state: [u32; State::COUNT],
    /// Live connections that divide the receive memory under pressure
    /// (`RecvMemory::share`): all but passive opens still in a listener's
    /// backlog, so that a flood of half-open connections does not shrink
    /// every established connection's share.
    sharing: usize,
    /// Of those, connections whose receive promise is parked
    /// ([`Flags::RCV_PARKED`]): they commit nothing and divide nothing.
    parked: usize,
    /// The slot the next look for connections to park starts at.
    park_cursor: u32,
    /// Parts' vectors that imports emptied ([`Stack::keep_spare_part`]),
    /// for the next exports to write their snapshots over
    /// ([`Stack::export_bucket_part`]).
    spare_parts: Vec<Vec<(ConnHandle, Snapshot)>>,
    /// When the look's current round (through every slot from the first)
    /// began.
    park_round: Instant,
    /// No look for idle connections to park before this.
    next_park: Instant,
    /// Latest time seen from the caller.
    now: Instant,
    /// The slot of the last segment's connection ([`NO_SLOT`] if none):
    /// segments of one flow arrive in runs (a sender's burst, a receive
    /// batch), and a run after its first segment is found by comparing the
    /// tuple with this slot's instead of hashing and probing the table.
    last_flow: u32,
    /// The last two slots [`Stack::expect`] named ([`NO_SLOT`]: none yet),
    /// checked the same way, the older first: a caller names a segment's
    /// connection one segment ahead, before the segment between.
    expected: [u32; 2],
    /// Which of `expected` is the older (the next to be replaced).
    expected_older: usize,
    /// The tuple [`Stack::lookup_hint`] last named and its hash, for
    /// [`Stack::expect_looked_up`].
    looked_up: Option<(FlowKey, u64)>,
}

/// A SYN-ACK carrying a SYN cookie, waiting for [`Stack::poll_transmit`].
#[derive(Debug)]
struct CookieSynAck {
    tuple: FlowKey,
    iss: SeqNumber,
    ack: SeqNumber,
    /// Our window scale, offered if the client offered one and uses
    /// timestamps.
    window_scale: Option<u8>,
    sack: bool,
    /// ECN agreed (RFC 3168 §6.1.1): the SYN-ACK carries ECE.
    ecn: bool,
    /// (TSval with the client's options in its low bits, TSecr).
    ts: Option<(u32, u32)>,
    window: u16,
}

impl CookieSynAck {
    fn emit(&self, mss: u16, buf: &mut [u8]) -> Result<usize, flowlane_wire::WireError> {
        TcpRepr {
            src_port: self.tuple.local_port(),
            dst_port: self.tuple.remote_port(),
            seq: self.iss.0,
            ack: self.ack.0,
            flags: if self.ecn {
                TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE
            } else {
                TcpFlags::SYN | TcpFlags::ACK
            },
            window: self.window,
            urgent: 0,
            options: TcpOptions {
                mss: Some(mss),
                window_scale: self.window_scale,
                sack_permitted: self.sack,
                timestamps: self.ts,
                ..TcpOptions::default()
            },
        }
        .emit(buf)
    }
}

/// No slot ([`Stack::last_flow`] when no segment matched a connection yet).
const NO_SLOT: u32 = u32::MAX;

impl std::fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IsnGenerator { .. }")
    }
}

impl Stack {
    /// A stack with no connections. Its slab of connection slots is
    /// reserved for [`Config::max_connections`] and the imports' headroom
    /// past it (an eighth more; up to a million; address space, which
    /// pages in as connections come), so that it does not grow by copying
    /// while connections arrive; where that much address space is
    /// refused, it grows as needed instead.
    pub fn new(cfg: Config) -> Self {
        let mut slots = Vec::new();
        // Refused only by a strict overcommit policy or a small address
        // space limit: then the slab grows as connections come.
        let reserved = cfg
            .max_connections
            .saturating_add(import_headroom(cfg.max_connections));
        let _ = slots.try_reserve_exact(reserved.min(MAX_SLOTS_RESERVED));
        Stack {
            isn: IsnGenerator::new(cfg.isn_secret),
            table: ConnTable::new(&cfg.isn_secret),
            time_wait: TimeWaitTable::new(&cfg.isn_secret, cfg.time_wait_max, 1),
            buckets: BucketLists::new(1),
            bucket_in: vec![BucketIn::default()],
            bucket_of: None,
            away: 0,
            wheel: TimerWheel::new(cfg.timer_tick),
            pool: ChunkPool::new(cfg.recv_memory),
            lent: LentFrames::default(),
            flights: FlightPool::default(),
            replies: Replies {
                rsts: VecDeque::new(),
                challenges: ChallengeBudget::new(&cfg.isn_secret, cfg.challenge_ack_limit),
                owed_acks: OwedAcks::default(),
            },
            cookies: CookieJar::new(&cfg.isn_secret),
            flow_labels: FlowLabels::new(&cfg.isn_secret),
            reopen_iss: None,
            cookie_syn_acks: VecDeque::new(),
            cfg,
            slots,
            free: Vec::new(),
            listeners: Vec::new(),
            listener_ports: Vec::new(),
            expired: Vec::new(),
            acks_due: VecDeque::new(),
            dirty: VecDeque::new(),
            events: VecDeque::new(),
            events_stale: false,
            send_waiters: VecDeque::new(),
            rcv_committed: 0,
            mem_waiting: VecDeque::new(),
            stats: Stats::default(),
            live: 0,
            held: 0,
            closed_slot: NO_SLOT,
            closed_info: VecDeque::new(),
            last_closed: None,
            by_state: [0; State::COUNT],
            sharing: 0,
            parked: 0,
            park_cursor: 0,
            spare_parts: Vec::new(),
            park_round: Instant::ZERO,
            next_park: Instant::ZERO,
            now: Instant::ZERO,
            last_flow: NO_SLOT,
            expected: [NO_SLOT; 2],
            expected_older: 0,
            looked_up: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Bytes of buffer memory the connections hold (pooled chunks holding
    /// queued, unacknowledged or out-of-order bytes); free chunks the pool
    /// keeps for reuse are not counted.
    pub fn buffer_memory(&self) -> usize {
        self.pool.in_use_bytes()
    }

    /// Bytes of free buffer memory the stack keeps for reuse (chunks its
    /// connections gave back), beside [`Stack::buffer_memory`]: what a
    /// busy spell left, until [`Stack::trim_memory`] gives it back.
    pub fn cached_memory(&self) -> usize {
        self.pool.cached_bytes()
    }

    /// Gives back to the allocator half of the free buffer memory kept for
    /// reuse that no connection took since the previous call (a quarter of
    /// a MiB of each chunk size stays), and adds what went back since the
    /// previous call, these and the chunks freed past the keeping bound,
    /// to [`Stats::buffer_memory_returned`]; the bytes this call trimmed.
    ///
    /// Call it periodically (the data path does, every second): a steady
    /// load keeps the memory it cycles through, and what a burst took is
    /// back with the allocator a few calls after the burst ended. Whether
    /// the allocator hands it on to the system is its own affair (glibc
    /// keeps freed memory in its arenas until `malloc_trim`). Costs time
    /// in proportion to the chunks freed, none per connection.
    pub fn trim_memory(&mut self) -> usize {
        let trimmed = self.pool.trim();
        self.stats.buffer_memory_returned += self.pool.take_returned() as u64;
        trimmed
    }

    /// Receive memory committed now: what all connections hold in their
    /// receive buffers plus the windows they advertised and the peers have
    /// yet to fill, beyond the one segment each may always be offered
    /// (see [`Config::recv_memory`]). Never more than `recv_memory`, but
    /// for window-scale rounding (RFC 7323 §2.4: under 2^shift bytes per
    /// connection, the rounded window's reach past what memory allows)
    /// and for connections imported with more data and window than it had
    /// left ([`Stack::import`] takes them past it, until they drain).
    pub fn recv_memory_committed(&self) -> usize {
        self.rcv_committed
    }

    /// Live connections (any state but CLOSED, TIME-WAIT included, in
    /// either form: see [`Stack::time_wait_count`]).
    pub fn connection_count(&self) -> usize {
        self.live + self.time_wait.len()
    }

    /// Connections with a slot: every live one but the compact TIME-WAIT
    /// records, so the ones whose state a segment reads (a caller that
    /// prefetches it, [`Stack::expect`], does so once they are many).
    pub fn connections_in_slots(&self) -> usize {
        self.live
    }

    /// Live connections in `state` (RFC 9293 §3.3.2), read from counts the
    /// stack keeps as connections change state: no walk. `TimeWait`
    /// counts the compact records ([`Stack::time_wait_count`]) too, so the
    /// counts of all states add up to [`Stack::connection_count`];
    /// `Listen` and `Closed` are always zero (listeners and closed
    /// connections are not connections held).
    pub fn connections_in(&self, state: State) -> usize {
        let held = self.by_state[state.index()] as usize;
        match state {
            State::TimeWait => held + self.time_wait.len(),
            _ => held,
        }
    }

    /// Connections in TIME-WAIT that the application closed: the stack
    /// keeps a compact record of each for 2 MSL (no handle, no buffers, no
    /// timer; [`Config::time_wait_max`] caps them). Part of
    /// [`Stack::connection_count`].
    pub fn time_wait_count(&self) -> usize {
        self.time_wait.len()
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    // ---------------------------------------------------------------
    // RSS buckets
    // ---------------------------------------------------------------

    /// Keeps connections per RSS bucket: `count` buckets (the size of the
    /// NIC's indirection table, 1 to 65,536), and `bucket_of` giving a
    /// connection's bucket from its tuple (the NIC's Toeplitz hash modulo
    /// the table size, as `numa-sched` computes it; taken modulo `count`).
    /// It is called once per connection, when the connection is created
    /// or imported. Every connection and TIME-WAIT record is then on its
    /// bucket's list ([`Stack::bucket_stats`], [`Stack::export_bucket`]).
    /// Without it, all are in bucket 0. Only while the stack holds no
    /// connection: [`Error::InvalidState`] otherwise, or for a bad count.
    pub fn set_buckets(
        &mut self,
        count: usize,
        bucket_of: impl Fn(&FourTuple) -> u16 + Send + 'static,
    ) -> Result<(), Error> {
        if self.connection_count() != 0 || !(1..=1 << 16).contains(&count) {
            return Err(Error::InvalidState);
        }
        self.buckets = BucketLists::new(count);
        self.bucket_in = vec![BucketIn::default(); count];
        self.time_wait.set_buckets(count);
        self.bucket_of = Some(BucketFn(Box::new(bucket_of)));
        self.away = 0;
        Ok(())
    }

    /// Marks `bucket` as served by another stack (`away`) or by this one.
    /// A segment of an away bucket that matches no connection or TIME-WAIT
    /// record here is not answered (no RST, no SYN-ACK): [`Stack::handle_tcp`]
    /// returns [`Delivery::Away`] and the caller forwards it to the stack
    /// that serves the bucket. [`Stack::export_bucket`] marks the bucket
    /// away, [`Stack::import_bucket`] of its last part marks it served
    /// here; every bucket is
    /// served here after [`Stack::set_buckets`]. Out-of-range buckets are
    /// ignored.
    pub fn set_bucket_away(&mut self, bucket: u16, away: bool) {
        if let Some(b) = self.bucket_in.get_mut(usize::from(bucket)) {
            if b.away != away {
                b.away = away;
                if away {
                    self.away += 1;
                } else {
                    self.away -= 1;
                }
            }
        }
    }

    /// Whether `bucket` is served by another stack ([`Stack::set_bucket_away`]).
    pub fn bucket_is_away(&self, bucket: u16) -> bool {
        self.bucket_in
            .get(usize::from(bucket))
            .is_some_and(|b| b.away)
    }

    /// Buckets ([`Stack::set_buckets`]; 1 by default).
    pub fn bucket_count(&self) -> usize {
        self.bucket_in.len()
    }

    /// What bucket `bucket` holds now and has received ([`BucketStats`]);
    /// all zero for a bucket out of range.
    pub fn bucket_stats(&self, bucket: u16) -> BucketStats {
        let input = self
            .bucket_in
            .get(usize::from(bucket))
            .copied()
            .unwrap_or_default();
        BucketStats {
            connections: self.buckets.len(bucket),
            time_wait: self.time_wait.bucket_len(bucket),
            segments_in: input.segments,
            bytes_in: input.bytes,
        }
    }

    /// The bucket of a connection with this tuple.
    fn bucket_for(&self, tuple: &FlowKey) -> u16 {
        match &self.bucket_of {
            None => 0,
            Some(f) => (usize::from((f.0)(&tuple.tuple())) % self.bucket_in.len()) as u16,
        }
    }

    /// Counts a segment (and its payload bytes) for a bucket.
    #[inline]
    fn count_bucket_segment(&mut self, bucket: u16, len: usize) {
        if let Some(n) = self.bucket_in.get_mut(usize::from(bucket)) {
            n.segments += 1;
            n.bytes += len as u64;
        }
    }

    /// The handles of `bucket`'s live connections, in the order
    /// [`Stack::export_bucket`] would take them (for the application to
    /// hand over its own state first).
    pub fn bucket_connections(&self, bucket: u16) -> Vec<ConnHandle> {
        let entries = self.buckets.entries(bucket);
        entries.iter().rev().map(|&idx| self.handle(idx)).collect()
    }

    /// Takes every connection and TIME-WAIT record of `bucket` out of the
    /// stack, complete ([`Snapshot`]s and records), for
    /// [`Stack::import_bucket`] on the stack that takes the bucket over.
    /// As with [`Stack::export`], the handles stop working and events
    /// already queued for them become stale; nothing more is sent for
    /// them here. The bucket's counters stay (they describe this stack's
    /// past load). The bucket is marked away ([`Stack::set_bucket_away`]).
    pub fn export_bucket(&mut self, bucket: u16) -> BucketExport {
        self.export_bucket_in(bucket, &NoFrames)
    }

    /// [`Stack::export_bucket`] for a caller that lends frames: kept
    /// payload is copied into the snapshots out of `frames`, and the frames
    /// released.
    pub fn export_bucket_in(&mut self, bucket: u16, frames: &dyn FrameStore) -> BucketExport {
        self.export_bucket_part(bucket, usize::MAX, frames)
    }

    /// [`Stack::export_bucket_in`] a part at a time: at most `max`
    /// connections of `bucket` (at least one while any is left, so that a
    /// caller looping until [`BucketExport::complete`] ends; the first of
    /// [`Stack::bucket_connections`]'s listing), so that the stack taking the bucket over can import one
    /// part while this one exports the next. The part that empties the
    /// bucket carries its TIME-WAIT records and is
    /// [`BucketExport::complete`]. The bucket is marked away from the first
    /// part on; until the last, its remaining connections are still here
    /// (a caller exports every part before it handles another segment).
    pub fn export_bucket_part(
        &mut self,
        bucket: u16,
        max: usize,
        frames: &dyn FrameStore,
    ) -> BucketExport {
        self.set_bucket_away(bucket, true);
        let max = max.max(1);
        let want = (self.buckets.len(bucket) as usize).min(max);
        // A part's vector an import left here, its snapshots written over
        // in place: a snapshot pushed is built aside and copied in (some
        // 640 bytes, 90 instructions a connection).
        let mut connections = self.spare_parts.pop().unwrap_or_default();
        connections.reserve(want.saturating_sub(connections.len()));
        let mut n = 0;
        while n < max {
            let idx = self.buckets.first(bucket);
            if idx == NIL {
                break;
            }
            let handle = self.handle(idx);
            // Written from inside: returned through `remove`, each snapshot
            // was copied twice more.
            self.remove(idx, true, |c, lent| match connections.get_mut(n) {
                Some((h, snap)) => {
                    *h = handle;
                    c.export_over(lent, frames, snap);
                }
                None => connections.push((handle, c.export(lent, frames))),
            });
            n += 1;
        }
        connections.truncate(n);
        let complete = self.buckets.first(bucket) == NIL;
        let now = self.now;
        let cookies_until = self
            .listeners
            .iter()
            .flatten()
            .filter(|l| now < l.cookies_until)
            .map(|l| (l.local, l.cookies_until))
            .collect();
        BucketExport {
            bucket,
            connections,
            time_wait: if complete {
                self.time_wait.export_bucket(bucket)
            } else {
                Vec::new()
            },
            complete,
            cookies_until,
        }
    }

    /// Adds a bucket exported from another stack ([`Stack::export_bucket`]):
    /// its connections, whose new handles (or why one could not be
    /// imported) are returned in the order of
    /// [`BucketExport::connections`], and its TIME-WAIT records (a record
    /// whose tuple is live here is dropped). The bucket is marked served
    /// here ([`Stack::set_bucket_away`]) by the part that completes it
    /// ([`BucketExport::complete`]); until then a segment that matches
    /// none of its connections here is [`Delivery::Away`], as before the
    /// import. The connections go into the
    /// bucket the export names, unhashed: this stack must map their tuples
    /// to it, as the stacks of one service (one bucket function) do.
    ///
    /// Connections are taken past [`Config::max_connections`] by at most
    /// an eighth of it ([`Stats::imports_past_cap`]): refusing a live
    /// connection loses it, where the overshoot lasts until connections
    /// close (new SYNs are dropped meanwhile, counted in
    /// [`Stats::connection_limit_refused`]). Past that headroom a
    /// connection is refused with [`Error::ConnectionLimit`]
    /// ([`Stats::imports_refused_at_cap`]).
    pub fn import_bucket(
        &mut self,
        now: Instant,
        bucket: BucketExport,
    ) -> Vec<Result<ConnHandle, Error>> {
        self.import_bucket_with(now, bucket, None)
    }

    /// [`Stack::import_bucket`] for a caller that prefetches: before it
    /// imports each connection, `prefetch` is handed what importing the
    /// one four places later will write or read first — the slab slot it
    /// will take, all of it, and the line of the connection table (and of
    /// the TIME-WAIT records' index, when it holds any) at its tuple's
    /// home, each as a one-byte hint naming no slot (`u32::MAX`) — so
    /// that their misses overlap the work on those before it (on the core
    /// taking a bucket over, free slots and the tables' lines are cold).
    pub fn import_bucket_prefetching(
        &mut self,
        now: Instant,
        bucket: BucketExport,
        prefetch: &mut dyn FnMut(StateHint),
    ) -> Vec<Result<ConnHandle, Error>> {
        self.import_bucket_with(now, bucket, Some(prefetch))
    }

    fn import_bucket_with(
        &mut self,
        now: Instant,
        bucket: BucketExport,
        mut prefetch: Option<&mut dyn FnMut(StateHint)>,
    ) -> Vec<Result<ConnHandle, Error>> {
        self.tick(now);
        if bucket.complete {
            // Served here from the part that completes it: until then, a
            // segment of a connection still to come is handed back
            // (`Delivery::Away`) for the caller to forward, not reset.
            self.set_bucket_away(bucket.bucket, false);
        }
        for &(local, until) in &bucket.cookies_until {
            if let Some(l) = self
                .listeners
                .iter_mut()
                .flatten()
                .find(|l| l.local == local)
            {
                l.cookies_until = l.cookies_until.max(until);
            }
        }
        // Each tuple hashed once: ahead of its import when prefetching.
        let hashes: Vec<u64> = match prefetch.as_deref_mut() {
            None => Vec::new(),
            Some(p) => {
                let hashes: Vec<u64> = bucket
                    .connections
                    .iter()
                    .map(|(_, snap)| self.table.hash(snap.key()))
                    .collect();
                for (k, &hash) in hashes.iter().enumerate().take(IMPORT_AHEAD) {
                    self.prefetch_import(k, hash, p);
                }
                hashes
            }
        };
        self.buckets
            .reserve(bucket.bucket, bucket.connections.len());
        let mut handles = Vec::with_capacity(bucket.connections.len());
        for (i, (_, snap)) in bucket.connections.iter().enumerate() {
            if let (Some(p), Some(&ahead)) = (prefetch.as_deref_mut(), hashes.get(i + IMPORT_AHEAD))
            {
                // The one `IMPORT_AHEAD` later is the `IMPORT_AHEAD`th
                // import from now (a refused import takes no slot: then a
                // prefetch is wasted).
                self.prefetch_import(IMPORT_AHEAD, ahead, p);
            }
            let hash = match hashes.get(i) {
                Some(&h) => h,
                None => self.table.hash(snap.key()),
            };
            handles.push(self.import_one(snap, hash, Some(bucket.bucket)));
        }
        self.keep_spare_part(bucket.connections);
        for (record, owes_ack) in bucket.time_wait {
            let hash = self.table.hash(&record.tuple);
            if self.find(hash, &record.tuple).is_some()
                || self.time_wait.find(hash, &record.tuple).is_some()
            {
                continue;
            }
            let b = self.bucket_for(&record.tuple);
            let evicted = self.time_wait.insert(hash, record, b, owes_ack);
            self.stats.time_wait_evicted += evicted as u64;
        }
        handles
    }

    /// Keeps an imported part's vector for this stack's next exports
    /// (while fewer than [`SPARE_PARTS`] are kept, and one of at most
    /// [`SPARE_PART_MAX`] snapshots), its snapshots' bytes given back
    /// ([`Snapshot::release_data`]); else it is dropped.
    fn keep_spare_part(&mut self, mut part: Vec<(ConnHandle, Snapshot)>) {
        if self.spare_parts.len() >= SPARE_PARTS || part.capacity() > SPARE_PART_MAX {
            return;
        }
        for (_, snap) in &mut part {
            snap.release_data();
        }
        self.spare_parts.push(part);
    }

    /// Hands `prefetch` what the `k`th import from now (0: the next) of a
    /// connection whose tuple hashes to `hash` writes or reads first: the
    /// slot [`Stack::alloc_slot`] will give it (the free list's, from its
    /// top, then new ones past the slab's end, within its capacity) and
    /// the tables' lines at the tuple's home.
    fn prefetch_import(&self, k: usize, hash: u64, prefetch: &mut dyn FnMut(StateHint)) {
        let idx = match self.free.len().checked_sub(k + 1) {
            Some(i) => Some(self.free[i] as usize),
            None => {
                Some(self.slots.len() + k - self.free.len()).filter(|&i| i < self.slots.capacity())
            }
        };
        if let Some(idx) = idx {
            // Within the slab's allocation (its length or its capacity):
            // an address, never read here.
            let slot = self.slots.as_ptr().wrapping_add(idx).cast::<u8>();
            prefetch(StateHint::new(
                slot,
                std::mem::size_of::<Slot>(),
                idx as u32,
            ));
        }
        for line in [
            self.table.entry_address(hash),
            self.time_wait.entry_address(hash),
        ]
        .into_iter()
        .flatten()
        {
            prefetch(StateHint::new(line, 1, NO_SLOT));
        }
    }

    // ---------------------------------------------------------------
    // Opening
    // ---------------------------------------------------------------

    /// Listens on `local` (an unspecified IP, `0.0.0.0` or `[::]`, accepts
    /// any destination address of either family: dual-stack). One
    /// listener per port.
    pub fn listen(&mut self, local: SocketAddr) -> Result<ListenerId, Error> {
        if local.port() == 0 {
            return Err(Error::InvalidAddress);
        }
        let Err(at) = self.port_listener(local.port()) else {
            return Err(Error::AddrInUse);
        };
        let id = self.listeners.len() as u32;
        self.listeners.push(Some(Listener {
            local,
            any_ip: local.ip().is_unspecified(),
            filter: None,
            half_open: 0,
            live: 0,
            cookies_until: Instant::ZERO,
        }));
        self.listener_ports.insert(at, (local.port(), id));
        Ok(ListenerId(id))
    }

    /// Sets (or with `None` removes) the filter asked at each SYN to
    /// `listener` whether to take the connection ([`SynFilter`]). RFC 9293
    /// §3.10.7.2 answers a SYN a listener will not take with an RST.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] for a listener that is not open.
    pub fn set_syn_filter(
        &mut self,
        listener: ListenerId,
        filter: Option<SynFilter>,
    ) -> Result<(), Error> {
        let l = self
            .listeners
            .get_mut(listener.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::InvalidHandle)?;
        l.filter = filter;
        Ok(())
    }

    /// Whether `listener`'s filter, if it has one, takes a connection
    /// with `tuple`; a refusal is counted.
    fn syn_admitted(&mut self, listener: ListenerId, tuple: &FlowKey) -> bool {
        let taken = match self.listeners[listener.0 as usize]
            .as_ref()
            .and_then(|l| l.filter.as_ref())
        {
            Some(f) => f(&tuple.tuple()),
            None => true,
        };
        self.stats.syn_refused += u64::from(!taken);
        taken
    }

    /// Active open from `local` (the caller picks the port, e.g. so that RSS
    /// steers replies to this core) to `remote`. The SYN goes out on the
    /// next [`Stack::poll_transmit`].
    pub fn connect(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<ConnHandle, Error> {
        self.tick(now);
        if local.is_ipv4() != remote.is_ipv4()
            || local.port() == 0
            || remote.port() == 0
            || local.ip().is_unspecified()
            || remote.ip().is_unspecified()
        {
            return Err(Error::InvalidAddress);
        }
        let tuple = FlowKey::pair(local, remote);
        let hash = self.table.hash(&tuple);
        if self.tuple_taken(hash, &tuple) {
            return Err(Error::AddrInUse);
        }
        if self.live + self.held >= self.cfg.max_connections {
            return Err(Error::ConnectionLimit);
        }
        let mut conn = Connection::new_active(&self.cfg, &self.isn, tuple, now);
        conn.flags.set(Flags::ANNOUNCED);
        self.stats.active_opens += 1;
        let idx = self.insert(conn, None, hash);
        self.after(idx);
        Ok(self.handle(idx))
    }

    /// Whether [`Stack::connect`] from `local` to `remote` would find its
    /// tuple free: no connection and no TIME-WAIT record holds it (else
    /// it fails with [`Error::AddrInUse`]). What a caller choosing the
    /// local port asks of each candidate (RFC 6056 §3.3.4's
    /// `check_suitable_port`), so that it reports the range exhausted only
    /// when it is.
    pub fn tuple_free(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        let tuple = FlowKey::pair(local, remote);
        !self.tuple_taken(self.table.hash(&tuple), &tuple)
    }

    /// Whether a connection or a TIME-WAIT record holds `tuple` (of table
    /// hash `hash`).
    fn tuple_taken(&self, hash: u64, tuple: &FlowKey) -> bool {
        self.find(hash, tuple).is_some() || self.time_wait.find(hash, tuple).is_some()
    }

    /// The keyed hash of the destination `remote` from our address `local`
    /// that an active open picks its local port by: RFC 6056 §3.3.4's `F`,
    /// under a key of its own derived from [`Config::isn_secret`], so that
    /// the ports are not guessable off path and change with the secret
    /// (every run). The same for every stack of one secret (the queues of
    /// one service).
    pub fn port_hash(&self, local: IpAddr, remote: SocketAddr) -> u64 {
        crate::isn::port_hash(&self.cfg.isn_secret, local, remote)
    }

    fn insert(&mut self, conn: Connection, listener: Option<ListenerId>, hash: u64) -> u32 {
        let idx = self.alloc_slot();
        self.slots[idx as usize].conn = Some(conn);
        self.place(idx, listener, hash, None);
        idx
    }

    /// A free slot's index (the slab grows if none is free: a new slot's
    /// generation starts at the stack's [`Config::handle_tag`]'s
    /// [`Config::first_generation`]); the caller puts a connection in it
    /// and calls [`Stack::place`], or gives it back to `free`.
    fn alloc_slot(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: Config::first_generation(self.cfg.handle_tag),
                    in_dirty: false,
                    mem_waiting: false,
                    counted: State::Closed,
                    wheel_deadline: Deadline::NONE,
                    wheel_pos: WheelPos::NONE,
                    listener: SlotListener::NONE,
                    park_mark: SeqNumber(0),
                    park_epoch: 0,
                    link: Link::NONE,
                    conn: None,
                    hash: 0,
                });
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Does the bookkeeping of the connection just put in slot `idx`
    /// (its tuple hashing to `hash`): its bucket, the table, the counts.
    fn place(&mut self, idx: u32, listener: Option<ListenerId>, hash: u64, bucket: Option<u16>) {
        // Read in place: a copy of the tuple (40 bytes) cost 10
        // instructions a connection (callgrind).
        let tuple = &self.slots[idx as usize]
            .conn
            .as_ref()
            .expect("a connection was put in the slot")
            .tuple;
        debug_assert_eq!(hash, self.table.hash(tuple));
        // A bucket's import names its bucket: the stacks of one service map
        // a tuple to the same bucket, and hashing each tuple again (a
        // Toeplitz hash in the data path) was a tenth of an import.
        let bucket = match bucket {
            Some(b) if usize::from(b) < self.bucket_count() => {
                debug_assert_eq!(b, self.bucket_for(tuple), "the bucket named");
                b
            }
            _ => self.bucket_for(tuple),
        };
        self.buckets.push(&mut self.slots, slot_link, idx, bucket);
        let slot = &mut self.slots[idx as usize];
        slot.listener = SlotListener::of(listener);
        slot.hash = hash;
        debug_assert!(!slot.wheel_pos.is_some());
        slot.wheel_deadline = Deadline::NONE;
        slot.in_dirty = false;
        slot.mem_waiting = false;
        let floor = usize::from(self.cfg.mss);
        let conn = slot.conn.as_ref().expect("just placed");
        // The most any `park_threshold` asks short of RCV.NXT: the first
        // look at it under pressure judges nothing (it has no earlier
        // mark), the next one what it received in between.
        slot.park_mark = conn.rcv.nxt - floor * PARK_SEGMENTS_MAX as usize;
        slot.park_epoch = park_epoch(self.now);
        self.rcv_committed += conn.rcv_commitment(floor);
        self.sharing += usize::from(!conn.in_backlog());
        self.by_state[conn.state.index()] += 1;
        slot.counted = conn.state;
        self.table.insert(hash, idx);
        self.live += 1;
        self.flights.note_live(self.live);
        if let Some(Some(l)) = listener.and_then(|l| self.listeners.get_mut(l.0 as usize)) {
            l.live += 1;
        }
    }

    /// The tuple of the live connection in slot `idx` (every slot the
    /// table names is live).
    #[inline]
    fn tuple_at(slots: &[Slot], idx: u32) -> &FlowKey {
        &slots[idx as usize]
            .conn
            .as_ref()
            .expect("the table names live slots")
            .tuple
    }

    /// The slot of the connection with this tuple (`hash` is the
    /// table's hash of it).
    #[inline]
    fn find(&self, hash: u64, tuple: &FlowKey) -> Option<u32> {
        let slots = &self.slots;
        self.table.find(hash, tuple, |i| Self::tuple_at(slots, i))
    }

    /// The last segment's slot if it still holds the connection of
    /// `tuple`.
    #[inline]
    fn same_flow(&self, tuple: &FlowKey) -> Option<u32> {
        self.flow_at(self.last_flow, tuple)
    }

    /// The slot of one of the two connections [`Stack::expect`] named
    /// last if it holds the connection of `tuple` (the older first: the
    /// newer one's lines may still be on their way).
    #[inline]
    fn expected_flow(&self, tuple: &FlowKey) -> Option<u32> {
        let older = self.expected[self.expected_older];
        let newer = self.expected[self.expected_older ^ 1];
        self.flow_at(older, tuple)
            .or_else(|| self.flow_at(newer, tuple))
    }

    /// Slot `idx` if it holds the connection of `tuple` (whatever happened
    /// to that slot since it was named: a freed slot holds nothing, a
    /// reused one another tuple or the same tuple's new connection, which
    /// is the right one either way).
    #[inline]
    fn flow_at(&self, idx: u32, tuple: &FlowKey) -> Option<u32> {
        match &self.slots.get(idx as usize)?.conn {
            Some(c) if c.tuple == *tuple => Some(idx),
            _ => None,
        }
    }

    fn handle(&self, idx: u32) -> ConnHandle {
        ConnHandle {
            index: idx,
            generation: self.slots[idx as usize].generation,
        }
    }

    /// The live connection behind a handle.
    fn live(&self, h: ConnHandle) -> Result<&Connection, Error> {
        let idx = self.lookup(h)?;
        Ok(self.slots[idx as usize]
            .conn
            .as_ref()
            .expect("lookup returns live slots"))
    }

    fn lookup(&self, h: ConnHandle) -> Result<u32, Error> {
        match self.slots.get(h.index as usize) {
            Some(s) if s.generation == h.generation && s.conn.is_some() => Ok(h.index),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// A live connection and the context its input and output run with (the
    /// stack's fields split so that both can be borrowed at once).
    #[inline]
    fn conn_and_ctx(&mut self, idx: u32) -> (&mut Connection, Ctx<'_>) {
        let Stack {
            slots,
            cfg,
            stats,
            replies,
            pool,
            lent,
            flights,
            now,
            rcv_committed,
            sharing,
            parked,
            ..
        } = self;
        let slot = &mut slots[idx as usize];
        let conn = slot.conn.as_mut().expect("live slot");
        if conn.flags.has(Flags::RCV_PARKED) {
            let mark = (&mut slot.park_mark, &mut slot.park_epoch);
            touch_parked(conn, mark, *now, cfg, (parked, rcv_committed));
        }
        let mem = RecvMemory::of(conn, cfg, *rcv_committed, *sharing - *parked);
        let ctx = Ctx {
            now: *now,
            cfg,
            stats,
            replies,
            pool,
            lent,
            flights,
            mem,
        };
        (conn, ctx)
    }

    /// Moves the committed total by a connection's change (`before` from
    /// its context, `after` read once the call is done); wakes connections
    /// waiting for memory if some freed.
    #[inline]
    fn settle(&mut self, before: usize, after: usize) {
        // Saturating: the total is the sum of the commitments by
        // construction, and a slip must never become a panic.
        self.rcv_committed = self.rcv_committed.saturating_sub(before) + after;
        if after < before && !self.mem_waiting.is_empty() {
            self.wake_memory_waiters();
        }
    }

    /// Owes a window update to connections whose window was held back, in
    /// order, while the memory left could open a window of a segment. Each
    /// one woken is charged what its update will promise (the window is
    /// only committed when the update is sent): without that, every
    /// release of a few bytes woke every waiter, each to offer the same
    /// bytes, and the wake cost grew with the number waiting.
    fn wake_memory_waiters(&mut self) {
        let mss = usize::from(self.cfg.mss);
        let mut promised = self.rcv_committed;
        while promised + mss <= self.cfg.recv_memory {
            let Some((idx, generation)) = self.mem_waiting.pop_front() else {
                break;
            };
            let slot = &mut self.slots[idx as usize];
            if slot.generation != generation {
                continue;
            }
            slot.mem_waiting = false;
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            if conn.flags.has(Flags::RCV_PARKED) {
                // Offered the floor at most until it shows it needs more.
                continue;
            }
            let mem = RecvMemory::of(conn, &self.cfg, promised, self.sharing - self.parked);
            if let Some(opens) = conn.on_memory_freed(mem) {
                promised += opens.max(mss);
                if !slot.in_dirty {
                    slot.in_dirty = true;
                    self.dirty.push_back((idx, generation));
                }
            }
        }
    }

    /// Whether more than half the receive memory is committed (the
    /// pressure under which each connection is held to its share).
    #[inline]
    fn under_pressure(&self) -> bool {
        self.rcv_committed > self.cfg.recv_memory / 2
    }

    /// Under memory pressure, parks the receive promises of connections
    /// that need no more than the floor ([`Flags::RCV_PARKED`]) among the
    /// next [`PARK_SLOTS`] slots, until the pressure is relieved: one
    /// that received less than its [`park_threshold`] since the last
    /// round's look (at least [`PARK_IDLE`] ago) or nothing for
    /// [`PARK_IDLE`], and holds no
    /// data. A window offered to a connection that sends nothing, or a
    /// byte now and then, commits memory nobody uses, and a few thousand
    /// such connections (a flood that completes its handshakes and then
    /// waits or trickles) would otherwise hold every other connection to
    /// the one segment it may always have. One that holds only
    /// out-of-order data behind a hole gives it up first (RFC 2018 §8).
    /// Wakes the connections waiting for memory if some freed.
    #[cold]
    #[inline(never)]
    fn park_idle(&mut self) {
        let slots = self.slots.len();
        let start = self.park_cursor as usize % slots.max(1);
        if start == 0 {
            self.park_round = self.now;
        }
        // To the end of the round at most: a round starts at slot 0.
        let end = slots.min(start + PARK_SLOTS);
        self.park_cursor = (end % slots.max(1)) as u32;
        self.next_park = self.now + PARK_EVERY;
        let floor = usize::from(self.cfg.mss);
        let mut freed = 0;
        for idx in start..end {
            if !self.under_pressure() {
                // As many as the pressure needs, no more.
                self.park_cursor = idx as u32;
                break;
            }
            if idx + 1 == slots {
                // The round is over: the next look at each slot is at
                // least `PARK_IDLE` after this one.
                self.next_park = self.next_park.max(self.park_round + PARK_IDLE);
            }
            let slot = &mut self.slots[idx];
            if slot.live().is_none() {
                continue; // free, or held for its `Closed`
            }
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            if conn.flags.has(Flags::RCV_PARKED) {
                continue;
            }
            let received = conn.rcv.nxt.saturating_sub(slot.park_mark);
            slot.park_mark = conn.rcv.nxt;
            slot.park_epoch = park_epoch(self.now);
            let idle = self.now.saturating_since(conn.timers.last_recv) >= PARK_IDLE;
            if (received >= park_threshold(conn, floor) && !idle) || !conn.parkable() {
                continue;
            }
            if !conn.assembler.is_empty() {
                conn.renege_out_of_order(&mut self.pool, &mut self.stats);
            }
            let commitment = conn.rcv_commitment(floor);
            // A parked connection waits for no memory (a waiter's slot
            // stays queued until the wake passes it over).
            conn.flags.clear(Flags::MEM_LIMITED);
            conn.flags.set(Flags::RCV_PARKED);
            self.parked += 1;
            self.stats.recv_parked += 1;
            self.rcv_committed = self.rcv_committed.saturating_sub(commitment);
            freed += commitment;
        }
        if freed > 0 && !self.mem_waiting.is_empty() {
            self.wake_memory_waiters();
        }
    }

    /// Queues a connection whose last window memory held back.
    #[inline]
    fn note_memory_limited(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        if slot.mem_waiting {
            return;
        }
        if slot
            .conn
            .as_ref()
            .is_some_and(|c| c.flags.has(Flags::MEM_LIMITED))
        {
            slot.mem_waiting = true;
            self.mem_waiting.push_back((idx, slot.generation));
        }
    }

    /// Runs `f` on a connection with a context, then does the bookkeeping.
    /// Always inlined: every segment goes through it, and whether LLVM
    /// inlined it into `handle_tcp_ecn` moved with unrelated changes
    /// elsewhere in the stack (out of line: +28 instructions a frame in
    /// `rx_cost`).
    #[inline(always)]
    fn with_conn<R>(&mut self, idx: u32, f: impl FnOnce(&mut Connection, &mut Ctx<'_>) -> R) -> R {
        let (conn, mut ctx) = self.conn_and_ctx(idx);
        let r = f(conn, &mut ctx);
        let (before, after) = (ctx.mem.mine, conn.rcv_commitment(ctx.mem.charged_from));
        self.settle(before, after);
        self.after(idx);
        r
    }

    /// After a connection changed: deliver its events, free it if it
    /// closed, reschedule its timer and queue it for transmission.
    fn after(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        let bucket = slot.link.bucket;
        let handle = ConnHandle {
            index: idx,
            generation: slot.generation,
        };
        let conn = slot.conn.as_mut().expect("live slot");
        if conn.state != slot.counted {
            count_state_change(&mut self.by_state, &mut slot.counted, conn.state);
        }
        let evs = std::mem::take(&mut conn.events);
        // Both once in a connection's life or in 40 ms (a delayed ACK is
        // queued once per arming): one test on a segment's way.
        if evs & (ev::ACK_DELAYED | ev::ESTABLISHED) != 0 {
            if evs & ev::ACK_DELAYED != 0 {
                // (Unset again since its arming: the entry finds nothing due.)
                let at = conn.timers.delayed_ack.get().unwrap_or(self.now);
                self.acks_due.push_back(AckDue {
                    at,
                    idx,
                    generation: handle.generation,
                });
            }
            if evs & ev::ESTABLISHED != 0 {
                if conn.flags.has(Flags::ECN) {
                    self.stats.ecn_negotiated += 1;
                }
                if conn.in_backlog() {
                    conn.set_in_backlog(false);
                    self.sharing += 1;
                    if let Some(Some(l)) = slot
                        .listener
                        .get()
                        .and_then(|l| self.listeners.get_mut(l.0 as usize))
                    {
                        l.half_open -= 1;
                    }
                }
                if conn.is_passive() {
                    let listener = slot
                        .listener
                        .get()
                        .filter(|l| matches!(self.listeners.get(l.0 as usize), Some(Some(_))));
                    match listener {
                        Some(listener) => {
                            conn.flags.set(Flags::ANNOUNCED);
                            self.events.push_back(Event::Accepted {
                                conn: handle,
                                listener,
                            });
                        }
                        None if conn.flags.has(Flags::ANNOUNCED) => {
                            // Imported before the handshake completed.
                            self.events.push_back(Event::Connected(handle));
                        }
                        None => {
                            // The listener went away: refuse.
                            let Stack {
                                cfg,
                                stats,
                                replies,
                                pool,
                                lent,
                                flights,
                                now,
                                ..
                            } = self;
                            let memory = (pool, lent, flights);
                            conn.abort(&mut Ctx::unlimited(*now, cfg, stats, replies, memory));
                        }
                    }
                } else {
                    self.events.push_back(Event::Connected(handle));
                }
            }
        }
        let announced = conn.flags.has(Flags::ANNOUNCED);
        if announced {
            if evs & ev::READABLE != 0 {
                self.events.push_back(Event::Readable(handle));
            }
            if evs & ev::PEER_CLOSED != 0 {
                self.events.push_back(Event::PeerClosed(handle));
            }
            if evs & ev::WRITABLE != 0 {
                self.events.push_back(Event::Writable(handle));
            }
        }
        if evs & (ev::CLOSED | ev::COMPACT) != 0 {
            let compact = conn.compactable();
            if announced {
                self.events.push_back(Event::Closed {
                    conn: handle,
                    reason: if compact {
                        CloseReason::Normal
                    } else {
                        conn.close_reason
                    },
                });
            }
            // The record made here, not in `remove`'s closure: returned
            // from there, it was copied out whole (some 90 bytes) even when
            // there was none (25 instructions a connection, callgrind).
            let record = compact.then(|| (conn.time_wait_record(), conn.owes_ack()));
            // Its slot goes back to the free list when the application
            // takes the `Closed` (`poll_event`), not now.
            self.remove(idx, !announced, |_, _| ());
            self.stats.closed += 1;
            if let Some((record, owes_ack)) = record {
                // The slot's hash: the record's tuple is the connection's.
                let hash = self.slots[idx as usize].hash;
                self.enter_time_wait(record, owes_ack, bucket, hash);
            }
            return;
        }
        self.schedule(idx);
        let slot = &mut self.slots[idx as usize];
        if !slot.in_dirty {
            slot.in_dirty = true;
            self.dirty.push_back((idx, slot.generation));
        }
    }

    /// Keeps the compact record of a closed connection in TIME-WAIT (its
    /// slot already freed), its tuple hashing to `hash` in the table.
    fn enter_time_wait(&mut self, record: TimeWait, owes_ack: bool, bucket: u16, hash: u64) {
        debug_assert_eq!(hash, self.table.hash(&record.tuple));
        let evicted = self.time_wait.insert(hash, record, bucket, owes_ack);
        self.stats.time_wait_evicted += evicted as u64;
    }

    /// Keeps the slot's one wheel entry at or before the connection's next
    /// deadline. A deadline that moved later (the retransmission timer
    /// restarted by an ACK, the delayed ACK pushed on by the next segment)
    /// keeps the earlier entry, which fires early and is set again then: no
    /// wheel work per segment. One that moved earlier replaces the entry
    /// (O(1)), so no stale entry is left behind. A deadline can only move
    /// before the entry by being armed, so after a segment or a call only
    /// the earliest deadline armed meanwhile is read
    /// ([`Connection::take_armed`]), not each of the connection's timers
    /// (a cache line the receive path does not otherwise touch).
    // Always inlined: once the connection grew (CUBIC), LLVM stopped
    // inlining it into `after` on its own, which cost 9 instructions per
    // segment (callgrind, BENCHMARKS.md "TCP hardening", step 5).
    #[inline(always)]
    fn schedule(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let armed = conn.take_armed();
        let d = match slot.wheel_deadline.get() {
            // Every deadline not armed since the entry was filed is at or
            // after it: only one armed since can come first.
            Some(w) => match armed {
                Some(d) if d < w => d,
                _ => return,
            },
            // The entry fired, or there was none: every deadline is read.
            None => match conn.next_deadline() {
                Some(d) => d,
                None => return,
            },
        };
        slot.wheel_deadline = Deadline::at(d);
        self.wheel.set(&mut self.slots, self.now, idx, d);
    }

    /// Frees slot `idx`: runs `last` on its connection, gives the
    /// connection's buffers back and empties the slot in place (moving a
    /// connection of some 650 bytes out of its slot cost two copies per
    /// closed connection), then undoes the slot's bookkeeping. With
    /// `reuse`, the slot is free at once; without, it is free once the
    /// application took the connection's `Closed` ([`Stack::poll_event`]):
    /// a connection opened before then cannot take its slot, and with the
    /// slot whatever the application keeps by it for the closed one; its
    /// final figures are kept for that `Closed` (`closed_info`).
    // Out of line: once per connection, and the established path that
    // can reach it (`after`) stays short.
    #[inline(never)]
    fn remove<R>(
        &mut self,
        idx: u32,
        reuse: bool,
        last: impl FnOnce(&Connection, &LentFrames) -> R,
    ) -> R {
        let slot = &mut self.slots[idx as usize];
        let conn = slot.conn.as_mut().expect("live slot");
        let in_backlog = conn.in_backlog();
        let parked = conn.flags.has(Flags::RCV_PARKED);
        let hash = slot.hash;
        debug_assert_eq!(hash, self.table.hash(&conn.tuple));
        let commitment = conn.rcv_charged(usize::from(self.cfg.mss));
        self.replies.owed_acks.forget(&conn.tuple);
        self.by_state[slot.counted.index()] -= 1;
        let r = last(conn, &self.lent);
        if reuse {
            conn.release_buffers((&mut self.pool, &mut self.lent, &mut self.flights));
            slot.conn = None;
        } else {
            // Its `Closed` is queued (`after`): the connection stays in its
            // held slot for the figures it is handled with
            // ([`Stack::info`], computed only if asked), but for what its
            // queues held, kept here, as its buffers go back now. The
            // slot is dropped when the `Closed` was handled
            // (`free_closed_slot`).
            self.closed_info.push_back(ClosedQueues {
                conn: ConnHandle {
                    index: idx,
                    generation: slot.generation,
                },
                readable: conn.recv_buf.len(),
                queued: conn.send_buf.len() as u32,
            });
            conn.release_buffers((&mut self.pool, &mut self.lent, &mut self.flights));
            // No look by tuple may find it there (`flow_at`): a segment of
            // its tuple is the table's, or TIME-WAIT's, from now on.
            if self.last_flow == idx {
                self.last_flow = NO_SLOT;
            }
            for e in &mut self.expected {
                if *e == idx {
                    *e = NO_SLOT;
                }
            }
        }
        if let Some(Some(l)) = slot
            .listener
            .get()
            .and_then(|l| self.listeners.get_mut(l.0 as usize))
        {
            l.live -= 1;
            if in_backlog {
                l.half_open -= 1;
            }
        }
        slot.generation = slot.generation.wrapping_add(1);
        if std::mem::replace(&mut slot.wheel_deadline, Deadline::NONE).is_some() {
            self.wheel.cancel(&mut self.slots, idx);
        }
        let slot = &mut self.slots[idx as usize];
        slot.in_dirty = false;
        slot.listener = SlotListener::NONE;
        slot.mem_waiting = false;
        self.table.remove(hash, idx);
        self.buckets.unlink(&mut self.slots, slot_link, idx);
        if reuse {
            self.free.push(idx);
        } else {
            self.held += 1;
        }
        self.live -= 1;
        self.sharing -= usize::from(!in_backlog);
        self.parked -= usize::from(parked);
        self.rcv_committed = self.rcv_committed.saturating_sub(commitment);
        // What a connection gone (reset, aborted, timed out, exported)
        // held feeds the waiters too, as a read's release does (`settle`):
        // they would otherwise wait for their peers' next window probes.
        if commitment > 0 && !self.mem_waiting.is_empty() {
            self.wake_memory_waiters();
        }
        r
    }

    // ---------------------------------------------------------------
    // Input
    // ---------------------------------------------------------------

    /// The IPv6 flow label of the connection between `local` and `remote`
    /// (RFC 6437 §3): a keyed hash of the two, 20 bits, never 0, the same
    /// for every segment, and the same on every stack keyed by the same
    /// [`Config::isn_secret`] (the stacks of one service), so that a
    /// connection keeps its label when its bucket moves.
    pub fn flow_label(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.flow_labels.label(&FlowKey::pair(local, remote))
    }

    /// Connections queued for output since [`Stack::poll_transmit`] last
    /// drained them: each one a segment or a call touched (and that may
    /// owe an ACK, data or a FIN). A caller that feeds a batch of segments
    /// before it polls sizes the batch by it: every such connection sends
    /// at least one segment per poll. An upper bound: a connection closed
    /// meanwhile is still counted.
    pub fn output_pending(&self) -> usize {
        self.dirty.len()
    }

    /// Processes one received TCP segment whose header the caller already
    /// parsed (for instance [`flowlane_wire::Transport::Tcp`] from the frame
    /// classifier) and whose checksum it verified; `payload` is the data
    /// after the header and options. This is the receive entry point: the
    /// header is parsed exactly once, by the caller. Returns
    /// [`Delivery::Away`] for a segment another stack must take (only
    /// when buckets are marked away). The segment counts as Not-ECT: a
    /// caller that reads the IP header's ECN field calls
    /// [`Stack::handle_tcp_ecn`].
    #[inline]
    pub fn handle_tcp(
        &mut self,
        now: Instant,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        repr: &TcpRepr,
        payload: &[u8],
    ) -> Delivery {
        self.handle_tcp_ecn(now, src_ip, dst_ip, Ecn::NotEct, repr, payload)
    }

    /// [`Stack::handle_tcp_ecn`] for a segment received into a frame of the
    /// caller's that the stack may keep (zero-copy receive): `frame` names
    /// it and where `payload` starts in it. Returns [`Delivery::Kept`] when
    /// a receive queue kept the payload in the frame: the caller then
    /// leaves the frame untouched (not reused, not written) until
    /// [`Stack::poll_released_frame`] returns its id, and reads the
    /// connection through the `_in` calls ([`Stack::peek_in`],
    /// [`Stack::recv_in`], [`Stack::export_in`],
    /// [`Stack::export_bucket_in`]) with a [`FrameStore`] that resolves the
    /// frame. Any other result leaves the frame to the caller at once.
    /// Only in-order payload of a connection that holds no out-of-order
    /// bytes, at least [`Config::zero_copy_min`] bytes long, is kept (the
    /// rest is copied, and read in stream order with the kept payloads);
    /// the caller bounds how many frames it lends by lending none when it
    /// has none to spare.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn handle_tcp_frame(
        &mut self,
        now: Instant,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        ecn: Ecn,
        repr: &TcpRepr,
        payload: &[u8],
        frame: FrameRef,
    ) -> Delivery {
        self.lent.pending = Some(Lend {
            frame,
            payload_addr: payload.as_ptr() as usize,
            payload_len: payload.len(),
        });
        let delivery = self.handle_tcp_ecn(now, src_ip, dst_ip, ecn, repr, payload);
        match self.lent.pending.take() {
            None => Delivery::Kept,
            Some(_) => delivery,
        }
    }

    /// The next frame the stack no longer holds (its payload was read, or
    /// its connection went away): the caller may reuse it. Call after
    /// every call that can read or close (each `_in` read, `consume`,
    /// `close`, `abort`, `handle_tcp_frame`, `handle_timeout`, exports) or
    /// once per loop pass; frames wait here until taken.
    #[must_use]
    pub fn poll_released_frame(&mut self) -> Option<u32> {
        self.lent.poll_released()
    }

    /// Frames the stack holds now (lent with [`Stack::handle_tcp_frame`]
    /// and not yet released).
    pub fn lent_frames(&self) -> usize {
        self.lent.held()
    }

    /// [`Stack::handle_tcp`] for a segment that arrived with the IP ECN
    /// codepoint `ecn` (RFC 3168 §5: the IPv4 TOS / IPv6 traffic class
    /// octet's two low bits, [`Ecn::from_bits`]). Only a connection that
    /// negotiated ECN reads it: a CE mark on its data makes it echo ECE
    /// until the peer answers with CWR (RFC 3168 §6.1.3). The data path
    /// calls this one; the cost for connections without ECN is one flag
    /// test.
    #[inline]
    pub fn handle_tcp_ecn(
        &mut self,
        now: Instant,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        ecn: Ecn,
        repr: &TcpRepr,
        payload: &[u8],
    ) -> Delivery {
        self.tick(now);
        self.stats.segments_in += 1;
        let tuple = FlowKey::new(dst_ip, repr.dst_port, src_ip, repr.src_port);
        let idx = match self.same_flow(&tuple) {
            Some(idx) => idx,
            None => {
                // A connection `expect` named, or the table's.
                let idx = match self.expected_flow(&tuple) {
                    Some(idx) => {
                        self.stats.expected += 1;
                        idx
                    }
                    None => {
                        let hash = self.table.hash(&tuple);
                        let Some(idx) = self.find(hash, &tuple) else {
                            return self.on_unmatched(hash, tuple, repr, payload, ecn);
                        };
                        idx
                    }
                };
                self.last_flow = idx;
                idx
            }
        };
        self.count_bucket_segment(self.slots[idx as usize].link.bucket, payload.len());
        match self.time_wait_syn(idx, &tuple, repr, payload.len()) {
            // (Every segment of a live connection passes here; only a bare
            // SYN goes further than a look at its flags.)
            TimeWaitSyn::NotOne => {
                self.with_conn(idx, |c, ctx| c.on_segment(ctx, repr, payload, ecn));
            }
            TimeWaitSyn::Done => {}
            // The old incarnation is gone: the listener takes the SYN.
            TimeWaitSyn::Reopen(l) => {
                self.stats.time_wait_reopened += 1;
                self.for_listener(l, tuple, repr, payload, ecn);
            }
        }
        Delivery::Taken
    }

    /// Tells the stack that the next segment it is handed has the
    /// endpoints `seg` (as [`flowlane_wire::peek::tcp_endpoints`] reads
    /// them off its frame), and returns where that segment's connection
    /// keeps what its processing reads first (its slot's hot part), for a
    /// caller that prefetches it while it processes the segment before:
    /// the data path does, one frame ahead. Hashes the tuple and probes
    /// the table but reads nothing of a slot, so the candidate is
    /// unverified (a tag collision names another connection's slot: a
    /// wasted prefetch). The stack remembers the last two it named: a
    /// segment whose tuple is one of theirs skips the table's lookup.
    /// `None` when the table has no candidate (a SYN to a listener, a
    /// stray segment) or the segment is the last one's flow, whose slot
    /// is already hot.
    #[inline]
    pub fn expect(&mut self, seg: &Endpoints) -> Option<StateHint> {
        self.expect_key(&FlowKey::of_segment(seg), None)
    }

    /// [`Stack::expect`] for the segment last named to
    /// [`Stack::lookup_hint`], whose tuple and hash that call kept: for a
    /// caller that named it there one segment earlier (its headers need no
    /// second read). `None` as `expect`'s, or when no segment was named
    /// since the last call.
    #[inline]
    pub fn expect_looked_up(&mut self) -> Option<StateHint> {
        let (key, hash) = self.looked_up.take()?;
        self.expect_key(&key, Some(hash))
    }

    /// [`Stack::expect`] for `key`, whose hash is `hash` if known.
    #[inline]
    fn expect_key(&mut self, key: &FlowKey, hash: Option<u64>) -> Option<StateHint> {
        if self.same_flow(key).is_some() {
            return None;
        }
        let hash = hash.unwrap_or_else(|| self.table.hash(key));
        let idx = self.table.probable(hash)?;
        let slot = self.slots.get(idx as usize)?;
        self.expected[self.expected_older] = idx;
        self.expected_older ^= 1;
        let hot = std::mem::offset_of!(Slot, conn) + Connection::HOT_LEN;
        Some(StateHint::new((slot as *const Slot).cast(), hot, idx))
    }

    /// Where connection `conn`'s slot lies, all of it ([`StateHint`]):
    /// what exporting it reads ([`Stack::export_bucket_part`] takes every
    /// field). For a caller that moves a bucket and prefetches the
    /// connections ahead of the one it exports (their slots lie scattered
    /// over the slab, each cold on a busy core). Reads only the slot's
    /// first line, for the handle's generation (a listing of the bucket,
    /// [`Stack::bucket_connections`], has just read it); `None` for a
    /// handle of another generation.
    #[inline]
    pub fn slot_hint(&self, conn: ConnHandle) -> Option<StateHint> {
        let slot = self
            .slots
            .get(conn.index as usize)
            .filter(|s| s.generation == conn.generation)?;
        Some(StateHint::new(
            (slot as *const Slot).cast(),
            std::mem::size_of::<Slot>(),
            conn.index,
        ))
    }

    /// Where taking `conn` out of the stack reads beyond its slot (an
    /// export, [`Stack::export_bucket_part`]): the connection table's
    /// entry at its tuple's home position, and its timer-wheel entry with
    /// the one that takes that entry's place. Reads the slot's tuple and
    /// wheel position and hashes the tuple, so a caller that prefetches
    /// these asks once the slot is in its cache ([`Stack::slot_hint`] a
    /// few connections earlier). Nothing for a handle of another
    /// generation.
    pub fn removal_lines(&self, conn: ConnHandle) -> impl Iterator<Item = *const u8> {
        let slot = self
            .slots
            .get(conn.index as usize)
            .filter(|s| s.generation == conn.generation);
        let table = slot
            .and_then(|s| s.conn.as_ref())
            .and_then(|c| self.table.entry_address(self.table.hash(&c.tuple)));
        let [entry, last] = slot.map_or([None, None], |s| self.wheel.entry_addresses(s.wheel_pos));
        [table, entry, last].into_iter().flatten()
    }

    /// Where the lookup of the connection of a segment with the endpoints
    /// `seg` will start reading the connection table ([`LookupHint`]): for a caller
    /// that prefetches it a segment before it calls
    /// [`Stack::expect_looked_up`] for that segment (the data path: two
    /// frames ahead). Hashes the tuple, keeps it and its hash for that
    /// call, and reads nothing else; `None` while the table is empty.
    #[inline]
    pub fn lookup_hint(&mut self, seg: &Endpoints) -> Option<LookupHint> {
        let key = FlowKey::of_segment(seg);
        let hash = self.table.hash(&key);
        self.looked_up = Some((key, hash));
        self.table.entry_address(hash).map(LookupHint::new)
    }

    /// An ICMP "packet too big" (RFC 1191, RFC 8201) about a segment this
    /// stack sent from `local` to `remote` with sequence number `seq`, as
    /// `flowlane_wire::icmp_error` reads it; `mtu` is the path MTU it
    /// reports. Believed only when `seq` is in flight on that connection
    /// (RFC 5927 §4.1); then the connection's MSS falls to what the MTU
    /// carries (never below 552 bytes of IPv4 or 1 280 of IPv6 path) and
    /// what was in flight is sent again. Counted in [`Stats::pmtu_lowered`]
    /// or [`Stats::too_big_ignored`]. [`Delivery::Away`] when the
    /// connection's bucket is marked away.
    pub fn handle_too_big(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        mtu: u32,
    ) -> Delivery {
        let idx = match self.icmp_conn(now, local, remote) {
            Ok(idx) => idx,
            Err(away @ Delivery::Away { .. }) => return away,
            Err(_) => {
                self.stats.too_big_ignored += 1;
                return Delivery::Taken;
            }
        };
        match self.with_conn(idx, |c, ctx| c.on_too_big(ctx, SeqNumber(seq), mtu)) {
            TooBigOutcome::Lowered => self.stats.pmtu_lowered += 1,
            TooBigOutcome::NotInFlight | TooBigOutcome::NotLower => self.stats.too_big_ignored += 1,
        }
        Delivery::Taken
    }

    /// An ICMP destination unreachable of `code` (ICMPv4's, or ICMPv6's
    /// for an IPv6 connection) about a segment this stack sent from
    /// `local` to `remote` with sequence number `seq`, as
    /// `flowlane_wire::icmp_error` reads it (what the code says,
    /// [`crate::Unreachable::of_v4`] or [`crate::Unreachable::of_v6`], is the
    /// [`CloseReason::Unreachable`] told; a code neither assigns is
    /// ignored). A connection attempt whose
    /// SYN (or SYN-ACK) it quotes ends at once, [`CloseReason::Unreachable`]
    /// (a passive one still in its listener's backlog goes silently); a
    /// synchronized connection does not abort on it (RFC 5927 §5.2) but
    /// keeps it as a soft error: if it then times out, it ends
    /// [`CloseReason::Unreachable`] rather than [`CloseReason::Timeout`],
    /// unless an ACK came in between (RFC 1122 §4.2.3.9, RFC 5461). A
    /// network or host unreachable (ICMPv4 code 0 or 1, ICMPv6 code 0)
    /// about its retransmission at SND.UNA undoes one doubling of its RTO
    /// (RFC 6069, [`Stats::rto_reverts`]).
    /// See `Connection::on_unreachable`. Counted in
    /// [`Stats::unreachable_ended`], [`Stats::unreachable_remembered`] or
    /// [`Stats::unreachable_ignored`]. [`Delivery::Away`] when the
    /// connection's bucket is marked away.
    pub fn handle_unreachable(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        code: u8,
    ) -> Delivery {
        let idx = match self.icmp_conn(now, local, remote) {
            Ok(idx) => idx,
            Err(away @ Delivery::Away { .. }) => return away,
            Err(_) => {
                self.stats.unreachable_ignored += 1;
                return Delivery::Taken;
            }
        };
        match self.with_conn(idx, |c, ctx| c.on_unreachable(ctx, SeqNumber(seq), code)) {
            UnreachableOutcome::Ended => self.stats.unreachable_ended += 1,
            UnreachableOutcome::Remembered => self.stats.unreachable_remembered += 1,
            UnreachableOutcome::Ignored => self.stats.unreachable_ignored += 1,
        }
        Delivery::Taken
    }

    /// The connection an ICMP error about a segment from `local` to
    /// `remote` names; else [`Delivery::Away`] when its bucket is marked
    /// away, or [`Delivery::Taken`] (for no connection).
    fn icmp_conn(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<u32, Delivery> {
        self.tick(now);
        let tuple = FlowKey::pair(local, remote);
        let hash = self.table.hash(&tuple);
        if let Some(idx) = self.find(hash, &tuple) {
            return Ok(idx);
        }
        if self.away != 0 {
            let bucket = self.bucket_for(&tuple);
            if self.bucket_is_away(bucket) {
                return Err(Delivery::Away { bucket });
            }
        }
        Err(Delivery::Taken)
    }

    /// A segment for no live connection: another stack's if its bucket is
    /// away, else a TIME-WAIT record's, else a listener's, else answered
    /// with an RST. Out of line, so that the established path stays short.
    #[inline(never)]
    fn on_unmatched(
        &mut self,
        hash: u64,
        tuple: FlowKey,
        repr: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) -> Delivery {
        let len = payload.len();
        if self.away != 0 {
            let bucket = self.bucket_for(&tuple);
            if self.bucket_is_away(bucket) {
                self.stats.segments_in -= 1;
                return Delivery::Away { bucket };
            }
        }
        if let Some(tw) = self.time_wait.find(hash, &tuple) {
            self.count_bucket_segment(self.time_wait.bucket_of(tw), len);
            // Looked up once: the listener a reopening SYN goes to.
            // One that cannot take a SYN now, or whose filter refuses it,
            // leaves the record as it is (`takes_reopening_syn`); asked
            // only of a SYN the record would let reopen it (an old
            // duplicate is dropped, its filter not asked).
            let listener = if time_wait::is_bare_syn(repr.flags) {
                self.listener_for(&tuple)
            } else {
                None
            };
            let listener = match listener {
                Some(l) if self.time_wait.accepts_new_incarnation(tw, &self.cfg, repr) => {
                    match self.takes_reopening_syn(l, &tuple) {
                        Reopening::Take => Some(l),
                        Reopening::Leave => None,
                        Reopening::Refused => {
                            self.reset_for(tuple, repr, len, ResetReason::Refused);
                            return Delivery::Taken;
                        }
                    }
                }
                other => other,
            };
            // What the old incarnation sent, for a reopening SYN's ISS
            // (the record is gone once it reopens).
            let old_snd_nxt = listener.map(|_| self.time_wait.snd_nxt(tw));
            let mut ctx = RecordCtx {
                cfg: &self.cfg,
                now: self.now,
                stats: &mut self.stats,
                challenges: &mut self.replies.challenges,
                listening: listener.is_some(),
            };
            let verdict = self.time_wait.on_segment(tw, &mut ctx, repr, len);
            match (verdict, listener) {
                (Verdict::Reopen, Some(l)) => {
                    self.stats.time_wait_reopened += 1;
                    self.reopen_iss = old_snd_nxt.map(reopened_iss);
                    self.on_listen_segment(l, hash, tuple, repr, payload, ecn);
                    return Delivery::Taken;
                }
                (Verdict::Reopen, None) => self.stats.time_wait_reopened += 1,
                (Verdict::DropSyn, _) => {
                    self.stats.time_wait_syn_dropped += 1;
                    return Delivery::Taken;
                }
                (Verdict::Done | Verdict::Ack, _) => return Delivery::Taken,
            }
        }
        self.for_listener_hashed(hash, tuple, repr, payload, ecn);
        Delivery::Taken
    }

    /// RFC 9293 §3.10.7.1–2: a segment for no connection goes to the
    /// listener on its port and address, or is answered with an RST.
    // Out of line: `handle_tcp` reaches it for a SYN that reopens a
    // TIME-WAIT connection, and it would otherwise grow the established path.
    #[inline(never)]
    fn for_listener(
        &mut self,
        l: ListenerId,
        tuple: FlowKey,
        repr: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) {
        let hash = self.table.hash(&tuple);
        self.on_listen_segment(l, hash, tuple, repr, payload, ecn);
    }

    /// [`Stack::for_listener`] for a tuple whose hash the caller computed
    /// (the connection the listener makes goes into the table under it).
    fn for_listener_hashed(
        &mut self,
        hash: u64,
        tuple: FlowKey,
        repr: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) {
        match self.listener_for(&tuple) {
            Some(l) => self.on_listen_segment(l, hash, tuple, repr, payload, ecn),
            _ => {
                self.stats.no_connection += 1;
                self.reset_for(tuple, repr, payload.len(), ResetReason::NoConnection);
            }
        }
    }

    /// The listener that takes connections to `tuple.local`: the one on
    /// its port, listening on its address or on an unspecified one. An
    /// unspecified address of either family takes both families
    /// (dual-stack, as Linux's `[::]` without `IPV6_V6ONLY`): the data
    /// path listens on `[::]` for IPv4 and IPv6 alike
    /// (`tcp_handler::listen_addr`), and the stack has one listener per
    /// port whatever the family ([`Stack::listen`]).
    fn listener_for(&self, tuple: &FlowKey) -> Option<ListenerId> {
        let at = self.port_listener(tuple.local_port()).ok()?;
        let id = self.listener_ports[at].1;
        let l = self.listeners[id as usize].as_ref()?;
        // The destination address is read only for a listener bound to one.
        (l.any_ip || l.local.ip() == tuple.local_ip()).then_some(ListenerId(id))
    }

    /// Where `port` is in [`Stack::listener_ports`]: `Ok` with its index,
    /// or `Err` with where it would go.
    #[inline]
    fn port_listener(&self, port: u16) -> Result<usize, usize> {
        self.listener_ports.binary_search_by_key(&port, |&(p, _)| p)
    }

    /// RFC 6191: a SYN for a connection in TIME-WAIT either opens a new
    /// incarnation (the old one is closed here, and the caller hands the
    /// SYN to the listener) or is dropped as a possible old duplicate. A
    /// client that reuses its port quickly (every load generator, every
    /// proxy) would otherwise wait out the whole TIME-WAIT. Reuse is for a
    /// connection request: with no listener for the tuple the SYN is the
    /// connection's like any other (challenged). Nor does a SYN end a
    /// connection whose application has bytes still to read: it is
    /// dropped (the peer tries again), and the bytes stay readable.
    #[inline]
    fn time_wait_syn(
        &mut self,
        idx: u32,
        tuple: &FlowKey,
        seg: &TcpRepr,
        len: usize,
    ) -> TimeWaitSyn {
        if !time_wait::is_bare_syn(seg.flags) {
            return TimeWaitSyn::NotOne;
        }
        self.time_wait_bare_syn(idx, tuple, seg, len)
    }

    /// [`Stack::time_wait_syn`] for a bare SYN: out of the established
    /// path's line.
    #[inline(never)]
    fn time_wait_bare_syn(
        &mut self,
        idx: u32,
        tuple: &FlowKey,
        seg: &TcpRepr,
        len: usize,
    ) -> TimeWaitSyn {
        let conn = self.slots[idx as usize].conn.as_ref().expect("live slot");
        if conn.state != State::TimeWait {
            return TimeWaitSyn::NotOne;
        }
        let Some(l) = self.listener_for(tuple) else {
            return TimeWaitSyn::NotOne;
        };
        if !conn.accepts_new_incarnation(&self.cfg, seg) || conn.holds_unread() {
            self.stats.time_wait_syn_dropped += 1;
            return TimeWaitSyn::Done;
        }
        let old_snd_max = conn.snd.max;
        match self.takes_reopening_syn(l, tuple) {
            Reopening::Take => {}
            // Handled by the connection, as where nothing listens.
            Reopening::Leave => return TimeWaitSyn::NotOne,
            Reopening::Refused => {
                self.reset_for(*tuple, seg, len, ResetReason::Refused);
                return TimeWaitSyn::Done;
            }
        }
        self.reopen_iss = Some(reopened_iss(old_snd_max));
        self.with_conn(idx, |c, _| c.close_now(CloseReason::Normal));
        TimeWaitSyn::Reopen(l)
    }

    /// Whether listener `l` makes a connection of a SYN from `tuple` now,
    /// asked as the listener would ask (`on_listen_segment`): its filter
    /// takes it (a refusal counted, [`Stats::syn_refused`], and answered
    /// by the caller with an RST, as at the listener), it is not at a
    /// connection cap (counted, [`Stats::connection_limit_refused`]), nor
    /// is its backlog full with no SYN cookies (counted,
    /// [`Stats::syn_dropped`]). Asked before a SYN reopens TIME-WAIT: one
    /// it would not take leaves TIME-WAIT as it is (a refused one answered
    /// with the refusal's RST, one it would drop handled as where nothing
    /// listens: challenged, RFC 5961 §4.2), so that the old incarnation's
    /// sequence space and its last ACK (RFC 9293 §3.10.7.4: a
    /// retransmitted FIN is acknowledged) are not forgotten for a SYN no
    /// connection comes of; the client's next SYN reopens it, its ISS
    /// past that space ([`reopened_iss`]). (With cookies a full backlog
    /// answers with one, and the cookie is the ISS.)
    fn takes_reopening_syn(&mut self, l: ListenerId, tuple: &FlowKey) -> Reopening {
        if !self.syn_admitted(l, tuple) {
            return Reopening::Refused;
        }
        if self.at_connection_limit(l) {
            return Reopening::Leave;
        }
        let backlog_full = self.listeners[l.0 as usize]
            .as_ref()
            .is_some_and(|x| x.half_open >= self.cfg.listen_backlog);
        if backlog_full && !self.cfg.syn_cookies {
            self.stats.syn_dropped += 1;
            return Reopening::Leave;
        }
        Reopening::Take
    }

    /// Convenience over [`Stack::handle_tcp`] for a segment in bytes (TCP
    /// header, options and payload; the caller verified the checksum): parses
    /// the header, then hands it on. Malformed segments are counted
    /// ([`Stats::malformed`]) and dropped.
    #[inline]
    pub fn handle_segment(
        &mut self,
        now: Instant,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        segment: &[u8],
    ) -> Delivery {
        self.handle_segment_ecn(now, src_ip, dst_ip, Ecn::NotEct, segment)
    }

    /// [`Stack::handle_segment`] for a segment that arrived with the IP ECN
    /// codepoint `ecn` (see [`Stack::handle_tcp_ecn`]).
    pub fn handle_segment_ecn(
        &mut self,
        now: Instant,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        ecn: Ecn,
        segment: &[u8],
    ) -> Delivery {
        // Borrowed in place: moving the parsed header out of the result
        // cost a copy per segment.
        match &TcpRepr::parse_segment(segment) {
            Ok((repr, payload)) => self.handle_tcp_ecn(now, src_ip, dst_ip, ecn, repr, payload),
            Err(_) => {
                self.tick(now);
                self.stats.segments_in += 1;
                self.stats.malformed += 1;
                Delivery::Taken
            }
        }
    }

    /// RFC 9293 §3.10.7.2: a segment for a listener.
    fn on_listen_segment(
        &mut self,
        l: ListenerId,
        hash: u64,
        tuple: FlowKey,
        seg: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) {
        // Only the call right after a reopening SYN's path set it.
        let reopen_iss = self.reopen_iss.take();
        let f = seg.flags;
        if f.rst() {
            // RFC 9293 §3.10.7.2: ignored.
            self.stats.bad_flags += 1;
            return;
        }
        if f.ack() {
            if let Err(why) = self.accept_cookie(l, hash, tuple, seg, payload, ecn) {
                self.reset_for(tuple, seg, payload.len(), why);
            }
            return;
        }
        if !f.syn() || f.fin() {
            self.stats.bad_flags += 1;
            return;
        }
        // A SYN that reopens TIME-WAIT was put to the filter already
        // (`takes_reopening_syn`): asked once, as any other SYN.
        if reopen_iss.is_none() && !self.syn_admitted(l, &tuple) {
            self.reset_for(tuple, seg, payload.len(), ResetReason::Refused);
            return;
        }
        if self.at_connection_limit(l) {
            return;
        }
        // A quarter of a backlog half-open in the whole stack, not in this
        // listener: the receive memory is the stack's, and a flood spread
        // over several listeners would otherwise promise a quarter of it
        // for each (`Connection::new_passive`).
        let crowded = self.half_open() >= self.cfg.listen_backlog / 4;
        let listener = self.listeners[l.0 as usize]
            .as_mut()
            .expect("live listener");
        if listener.half_open >= self.cfg.listen_backlog {
            if self.cfg.syn_cookies {
                listener.cookies_until = self.now + syn_cookie::CHECKED_FOR;
                self.send_cookie(tuple, seg);
            } else {
                self.stats.syn_dropped += 1;
            }
            return;
        }
        listener.half_open += 1;
        let idx = self.alloc_slot();
        let slot = &mut self.slots[idx as usize].conn;
        let conn = Connection::new_passive_in(
            slot, &self.cfg, &self.isn, tuple, self.now, seg, crowded, reopen_iss,
        );
        conn.set_in_backlog(true);
        self.stats.passive_opens += 1;
        self.place(idx, Some(l), hash, None);
        self.after(idx);
    }

    /// The window a cookie SYN-ACK offers (unscaled, RFC 7323 §2.2): what
    /// a crowded listener's half-open connection is offered, one segment
    /// ([`Connection::half_open_buffer`]). Cookies go out only when a
    /// backlog is full, and the connection an ACK rebuilds from one is
    /// bound by the window its SYN-ACK offered: the whole buffer there
    /// would be a promise outside [`Config::recv_memory`] per returned
    /// cookie (256 unread cookie connections held 16 MiB against a 1 MiB
    /// budget). One segment is the floor every connection may have
    /// outside the budget; the window grows from it within the budget
    /// once the handshake is done.
    fn cookie_window(&self) -> u16 {
        Connection::half_open_buffer(&self.cfg, true).min(0xffff) as u16
    }

    /// RFC 4987 §3.6: answers `syn` with a SYN-ACK whose ISS is a cookie,
    /// keeping nothing. Our TSval carries the client's window scale, SACK
    /// permission and whether ECN was agreed (RFC 3168 §6.1.1); a client
    /// without timestamps is offered none of them.
    fn send_cookie(&mut self, tuple: FlowKey, syn: &TcpRepr) {
        if self.cookie_syn_acks.len() >= self.cfg.max_pending_resets {
            self.stats.syn_dropped += 1;
            return;
        }
        let o = &syn.options;
        let client_mss = announced_mss(o, tuple.is_ipv6());
        let iss = self
            .cookies
            .make(&tuple, SeqNumber(syn.seq), client_mss, self.now);
        let ts = o.timestamps.filter(|_| self.cfg.timestamps);
        let window_scale = o.window_scale.filter(|_| self.cfg.window_scaling);
        let sack = o.sack_permitted && self.cfg.sack;
        let ecn = self.cfg.ecn != EcnMode::Off
            && syn.flags.contains(TcpFlags::ECE | TcpFlags::CWR)
            && ts.is_some();
        let ours = ts.map(|(tsval, _)| {
            let now_ts = (self.now.as_millis() as u32).wrapping_add(self.isn.ts_offset(&tuple));
            (
                syn_cookie::encode_options(now_ts, window_scale, sack, ecn),
                tsval,
            )
        });
        self.cookie_syn_acks.push_back(CookieSynAck {
            tuple,
            iss,
            ack: SeqNumber(syn.seq) + 1,
            window_scale: ours.and(window_scale).map(|_| offered_wscale(&self.cfg)),
            sack: ours.is_some() && sack,
            ecn,
            ts: ours,
            window: self.cookie_window(),
        });
        self.stats.syn_cookies_sent += 1;
    }

    /// Half-open passive connections in all listeners' backlogs together:
    /// the live connections that do not share the receive memory
    /// (`sharing` counts the others).
    fn half_open(&self) -> usize {
        self.live - self.sharing
    }

    /// Whether a new connection for listener `l` would pass the stack's
    /// or the listener's cap ([`Config::max_connections`],
    /// [`Config::listener_max_connections`]); counts the refusal if so.
    fn at_connection_limit(&mut self, l: ListenerId) -> bool {
        let listener_live = self.listeners[l.0 as usize].as_ref().map_or(0, |l| l.live);
        let full = self.live + self.held >= self.cfg.max_connections
            || listener_live >= self.cfg.listener_max_connections;
        if full {
            self.stats.connection_limit_refused += 1;
        }
        full
    }

    /// An ACK for no connection on a listener that sent SYN cookies
    /// lately: if it returns a valid cookie, the connection is rebuilt
    /// from it, as if its SYN-ACK had been sent from SYN-RECEIVED, and
    /// the ACK (and any data on it, with its IP codepoint `ecn`: a CE
    /// mark on it is echoed as on any other segment) processed there.
    /// `Err`: the RST the caller answers with, and why.
    fn accept_cookie(
        &mut self,
        l: ListenerId,
        hash: u64,
        tuple: FlowKey,
        seg: &TcpRepr,
        payload: &[u8],
        ecn: Ecn,
    ) -> Result<(), ResetReason> {
        let recent = self.listeners[l.0 as usize]
            .as_ref()
            .is_some_and(|l| self.now < l.cookies_until);
        if !recent || seg.flags.syn() {
            return Err(ResetReason::ListenerAck);
        }
        let (seq, ack) = (SeqNumber(seg.seq), SeqNumber(seg.ack));
        let Some(mss) = self.cookies.check(&tuple, seq, ack, self.now) else {
            self.stats.syn_cookies_failed += 1;
            return Err(ResetReason::ListenerAck);
        };
        // A filter that changed its mind since the SYN (a budget spent)
        // refuses here too: the caller answers with an RST.
        if !self.syn_admitted(l, &tuple) {
            return Err(ResetReason::Refused);
        }
        if self.at_connection_limit(l) {
            // Dropped, not reset: the client's next segment carries the
            // cookie again.
            return Ok(());
        }
        let ts = self.cookie_timestamps(&tuple, seg);
        let o = syn_cookie::decode_options(ts.map(|(_, ecr)| ecr), mss);
        let syn = TcpRepr {
            seq: (seq - 1usize).0,
            ack: 0,
            // An ECN-setup SYN if the cookie says ECN was agreed.
            flags: if o.ecn {
                TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR
            } else {
                TcpFlags::SYN
            },
            options: TcpOptions {
                mss: Some(o.mss),
                window_scale: o.window_scale,
                sack_permitted: o.sack_permitted,
                timestamps: ts.map(|(tsval, _)| (tsval, 0)),
                ..TcpOptions::default()
            },
            ..*seg
        };
        let window = self.cookie_window();
        let conn =
            Connection::from_cookie(&self.cfg, &self.isn, tuple, self.now, &syn, ack - 1, window);
        self.stats.passive_opens += 1;
        self.stats.syn_cookies_accepted += 1;
        let idx = self.insert(conn, Some(l), hash);
        self.with_conn(idx, |c, ctx| c.on_segment(ctx, seg, payload, ecn));
        Ok(())
    }

    /// The timestamp option of a cookie ACK (`seg`), if its TSecr echoes a
    /// TSval of ours: one this stack sent the tuple (its clock plus the
    /// tuple's offset) within a cookie's life ([`syn_cookie::CHECKED_FOR`],
    /// and the 127 ms [`syn_cookie::encode_options`] may put it back).
    /// Only then did our SYN-ACK carry timestamps, and only then do the
    /// TSecr's low bits carry the client's options. Otherwise timestamps
    /// were never negotiated and the option is ignored (RFC 7323 §3.2: "a
    /// TSopt ... received on a connection where TSopt was not negotiated
    /// ... MUST be ignored and the packet processed normally"): the
    /// connection is built without timestamps, window scaling, SACK or
    /// ECN, as its SYN-ACK offered; counted
    /// ([`Stats::syn_cookies_ts_ignored`]).
    fn cookie_timestamps(&mut self, tuple: &FlowKey, seg: &TcpRepr) -> Option<(u32, u32)> {
        let (tsval, tsecr) = seg.options.timestamps?;
        let now_ts = (self.now.as_millis() as u32).wrapping_add(self.isn.ts_offset(tuple));
        let age = u64::from(now_ts.wrapping_sub(tsecr));
        let life = syn_cookie::CHECKED_FOR.as_millis() + 2 * (1 << syn_cookie::TS_OPTION_BITS);
        if self.cfg.timestamps && age <= life {
            Some((tsval, tsecr))
        } else {
            self.stats.syn_cookies_ts_ignored += 1;
            None
        }
    }

    /// A connection whose import is refused is lost: its peer is told at
    /// once ([`Snapshot::refusal_reset`]). Not when its tuple is in use
    /// here: that RST would reach the connection that holds it.
    fn reset_refused_import(&mut self, snap: &Snapshot) {
        if let Some(rst) = snap.refusal_reset() {
            self.queue_reset(rst);
        }
    }

    /// Queues an RST of the stack's own (none of a connection's).
    fn queue_reset(&mut self, rst: PendingRst) {
        let Stack {
            cfg,
            stats,
            replies,
            pool,
            lent,
            flights,
            now,
            ..
        } = self;
        Ctx::unlimited(*now, cfg, stats, replies, (pool, lent, flights)).queue_rst(rst);
    }

    /// RFC 9293 §3.10.7.1: the reply to a segment for no connection.
    fn reset_for(&mut self, tuple: FlowKey, seg: &TcpRepr, len: usize, why: ResetReason) {
        if seg.flags.rst() {
            return;
        }
        let rst = if seg.flags.ack() {
            PendingRst {
                tuple,
                seq: SeqNumber(seg.ack),
                ack: None,
                why,
            }
        } else {
            let seg_len = len + usize::from(seg.flags.syn()) + usize::from(seg.flags.fin());
            PendingRst {
                tuple,
                seq: SeqNumber(0),
                ack: Some(SeqNumber(seg.seq) + seg_len),
                why,
            }
        };
        self.queue_reset(rst);
    }

    // ---------------------------------------------------------------
    // Output and time
    // ---------------------------------------------------------------

    /// Writes the next segment to send into `buf` (header, options and
    /// payload; checksum zero) and says where it goes. `buf` should hold at
    /// least 60 bytes plus the MSS. Call until it returns `None`.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.tick(now);
        while let Some(rst) = self.replies.rsts.pop_front() {
            let repr = TcpRepr {
                src_port: rst.tuple.local_port(),
                dst_port: rst.tuple.remote_port(),
                seq: rst.seq.0,
                ack: rst.ack.unwrap_or_default().0,
                flags: if rst.ack.is_some() {
                    TcpFlags::RST | TcpFlags::ACK
                } else {
                    TcpFlags::RST
                },
                window: 0,
                urgent: 0,
                options: TcpOptions::default(),
            };
            if let Ok(len) = repr.emit(buf) {
                self.stats.count_reset(rst.why);
                self.stats.segments_out += 1;
                return Some(Transmit {
                    src: rst.tuple.local(),
                    dst: rst.tuple.remote(),
                    len,
                    ecn: Ecn::NotEct,
                });
            }
        }
        while let Some(c) = self.cookie_syn_acks.pop_front() {
            if let Ok(len) = c.emit(self.cfg.mss_for(c.tuple.remote_ip()), buf) {
                self.stats.segments_out += 1;
                return Some(Transmit {
                    src: c.tuple.local(),
                    dst: c.tuple.remote(),
                    len,
                    ecn: Ecn::NotEct,
                });
            }
        }
        if let Some((tuple, len)) = self.time_wait.poll_ack(self.now, buf) {
            self.stats.segments_out += 1;
            return Some(Transmit {
                src: tuple.local(),
                dst: tuple.remote(),
                len,
                ecn: Ecn::NotEct,
            });
        }
        while let Some(&(idx, generation)) = self.dirty.front() {
            let slot = &mut self.slots[idx as usize];
            if slot.generation != generation || slot.conn.is_none() {
                self.dirty.pop_front();
                continue;
            }
            // (Sending changes no connection's state: the per-state counts
            // need no update here; `check_layout` would see one.)
            let (conn, mut ctx) = self.conn_and_ctx(idx);
            let sent = conn.poll_transmit(&mut ctx, buf);
            if sent.is_none() {
                conn.on_output_idle(ctx.now);
            }
            let (before, after) = (ctx.mem.mine, conn.rcv_commitment(ctx.mem.charged_from));
            match sent {
                Some(len) => {
                    let t = Transmit {
                        src: conn.tuple.local(),
                        dst: conn.tuple.remote(),
                        len,
                        ecn: conn.sent_ecn(),
                    };
                    self.settle(before, after);
                    self.note_memory_limited(idx);
                    self.stats.segments_out += 1;
                    // Round-robin between connections with data to send.
                    self.dirty.pop_front();
                    self.dirty.push_back((idx, generation));
                    self.schedule(idx);
                    return Some(t);
                }
                None => {
                    self.settle(before, after);
                    self.dirty.pop_front();
                    self.slots[idx as usize].in_dirty = false;
                    self.schedule(idx);
                }
            }
        }
        None
    }

    /// When [`Stack::handle_timeout`] should be called next; `None` while
    /// no timer is armed. It may be early: a far deadline is filed coarsely
    /// and this names the start of its span, when handling the timeout
    /// files it finely (at most one early call per level of the wheel).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        // A look for idle connections to park is due every `PARK_EVERY`
        // under pressure; one due since pressure began (or overdue) is
        // asked for `PARK_EVERY` after the last time seen, never in the
        // past of a timeout just handled.
        let park = self
            .under_pressure()
            .then(|| self.next_park.max(self.now + PARK_EVERY));
        let ack = self.acks_due.front().map(|a| a.at);
        [
            self.wheel.next_expiry(),
            self.time_wait.next_expiry(),
            ack,
            park,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        if self.under_pressure() && self.now >= self.next_park {
            self.park_idle();
        }
        self.time_wait.expire(self.now);
        let mut expired = std::mem::take(&mut self.expired);
        self.wheel.expire(&mut self.slots, now, &mut expired);
        for idx in expired.drain(..) {
            // Freeing a slot cancels its entry, so each names a live
            // connection (the check covers one freed within this batch).
            let slot = &mut self.slots[idx as usize];
            slot.wheel_deadline = Deadline::NONE;
            if slot.conn.is_some() {
                self.with_conn(idx, |c, ctx| c.on_timeout(ctx));
            }
        }
        self.expired = expired;
        self.expire_acks();
    }

    /// Takes the delayed ACKs due ([`Stack::acks_due`]): a connection's
    /// that is due has its timers handled; one armed again since its entry
    /// was queued (a later deadline) goes on the wheel, as any deadline
    /// armed outside the queue. Entries of connections gone are dropped.
    fn expire_acks(&mut self) {
        while let Some(&a) = self.acks_due.front() {
            if a.at > self.now {
                break;
            }
            self.acks_due.pop_front();
            let Some(slot) = self.slots.get_mut(a.idx as usize) else {
                continue;
            };
            if slot.generation != a.generation {
                continue;
            }
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            conn.flags.clear(Flags::ACK_QUEUED);
            match conn.timers.delayed_ack.get() {
                None => {}
                Some(d) if d <= self.now => self.with_conn(a.idx, |c, ctx| c.on_timeout(ctx)),
                Some(d) => {
                    conn.timers.arm(d);
                    self.schedule(a.idx);
                }
            }
        }
    }

    /// The next application event, oldest first; `None` when all were
    /// taken. Call until `None` after each input, timer or application call.
    /// A closed connection's slot (its handle's index) is given to no other
    /// connection before the call to `poll_event` after the one that
    /// returned its `Closed`, so that an application may key its own state
    /// by the index until it has handled the close (a connection it opens
    /// meanwhile, in its `on_closed`, gets another index); and of a
    /// connection gone before its events were taken (the application
    /// aborted it in the callback of an earlier event), only its `Closed`
    /// comes.
    #[must_use]
    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.closed_slot != NO_SLOT {
            self.free_closed_slot();
        }
        let Some(event) = self.events.pop_front() else {
            return if self.send_waiters.is_empty() {
                None
            } else {
                self.poll_send_waiters()
            };
        };
        if let Event::Closed { conn, .. } = event {
            // The closed connection's slot, held until now (`remove`).
            self.release_held(conn);
            return Some(event);
        }
        if self.events_stale {
            return self.poll_event_stale(event);
        }
        Some(event)
    }

    /// Once every event was taken: connections waiting for send memory
    /// ([`Config::send_memory`]) hear [`Event::Writable`], oldest first,
    /// as long as what is free would take a send buffer's worth each (an
    /// eighth of the budget each, if that is less), as the kernel backend
    /// promises a freed buffer to its oldest waiter. One that gets none
    /// of it (others took it first) waits again, at the back. Out of line:
    /// a stack whose send memory never ran out never gets here.
    #[cold]
    #[inline(never)]
    fn poll_send_waiters(&mut self) -> Option<Event> {
        let step = self.cfg.send_buffer.min(self.cfg.send_memory / 8).max(1);
        let mut room = self.cfg.send_memory.saturating_sub(self.pool.send_queued());
        while room >= step {
            let Some(conn) = self.send_waiters.pop_front() else {
                break;
            };
            let Ok(idx) = self.lookup(conn) else {
                continue; // gone since
            };
            self.with_conn(idx, |c, _| {
                if c.flags.has(Flags::SEND_MEMORY_WAIT) {
                    c.flags.clear(Flags::SEND_MEMORY_WAIT);
                    c.events |= ev::WRITABLE;
                }
            });
            room -= step;
        }
        if self.events.is_empty() {
            None
        } else {
            self.poll_event()
        }
    }

    /// The slot of the previous `Closed`, whose application handled it:
    /// free now. Out of line: [`Stack::poll_event`] runs for every event,
    /// this once per closed connection.
    #[cold]
    #[inline(never)]
    fn free_closed_slot(&mut self) {
        let idx = std::mem::replace(&mut self.closed_slot, NO_SLOT);
        // The closed connection it kept for `info` (`remove`).
        self.slots[idx as usize].conn = None;
        self.free.push(idx);
        self.last_closed = None;
    }

    /// A slot held for its `Closed` (`remove` without reuse), whose
    /// `Closed` is taken now: it counts no more against
    /// [`Config::max_connections`], and is free at the next
    /// [`Stack::poll_event`] call (`closed_slot`).
    #[inline]
    fn release_held(&mut self, conn: ConnHandle) {
        debug_assert_eq!(self.closed_slot, NO_SLOT, "freed by this poll_event");
        self.closed_slot = conn.index;
        self.held -= 1;
        self.take_closed_info(conn);
    }

    /// The final queue lengths of `conn`, whose `Closed` is taken now:
    /// with the connection in its slot, what [`Stack::info`] answers until
    /// the next [`Stack::poll_event`] call. Out of line: once per closed
    /// connection.
    #[cold]
    #[inline(never)]
    fn take_closed_info(&mut self, conn: ConnHandle) {
        let taken = self.closed_info.pop_front();
        debug_assert_eq!(
            taken.map(|q| q.conn),
            Some(conn),
            "in the order of the Closed"
        );
        self.last_closed = taken;
    }

    /// [`Stack::poll_event`] while events of connections an application
    /// call ended may be queued (`events_stale`): `event` and those after
    /// it, the stale ones dropped. One look at each event's slot, and
    /// only until the queue empties.
    #[inline(never)]
    fn poll_event_stale(&mut self, mut event: Event) -> Option<Event> {
        loop {
            if self.events.is_empty() {
                self.events_stale = false;
            }
            match event {
                Event::Closed { conn, .. } => {
                    self.release_held(conn);
                    return Some(event);
                }
                _ if self.lookup(event.conn()).is_ok() => return Some(event),
                _ => {}
            }
            event = self.events.pop_front()?;
        }
    }

    // ---------------------------------------------------------------
    // Application calls
    // ---------------------------------------------------------------

    /// Queues data; returns how much fit. `Err(WouldBlock)` if none did (a
    /// `Writable` event follows when space frees up: in the connection's
    /// buffer, or in the stack's send memory, [`Config::send_memory`]).
    pub fn send(&mut self, conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        let idx = self.lookup(conn)?;
        let (sent, waits) = self.with_conn(idx, |c, ctx| {
            let waited = c.flags.has(Flags::SEND_MEMORY_WAIT);
            let sent = c.send(ctx, data);
            (sent, !waited && c.flags.has(Flags::SEND_MEMORY_WAIT))
        });
        if waits {
            self.send_waiters.push_back(conn);
        }
        sent
    }

    /// Asks for an [`Event::Writable`] for `conn` when send buffer space
    /// frees up, without queueing any data (instead of a zero-length or
    /// one-byte [`Stack::send`]). If there is room enough already (see
    /// [`Event::Writable`]), the event is queued at once; otherwise it
    /// follows the ACK that frees enough, and
    /// until then the send buffer may grow (see [`Config::send_buffer_max`])
    /// as it does after a `send` that could not queue everything.
    /// `Err(InvalidState)` once writing was shut down or the connection
    /// cannot carry data; `Err(InvalidHandle)` for a dead handle.
    pub fn want_writable(&mut self, conn: ConnHandle) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, _| c.want_writable())
    }

    /// Reads in-order data. `Ok(0)` means end of stream (the peer closed and
    /// everything was read); `Err(WouldBlock)` means nothing yet, or an
    /// empty `buf` before the end of the stream.
    pub fn recv(&mut self, conn: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        self.recv_in(conn, buf, &NoFrames)
    }

    /// [`Stack::recv`] for a caller that lends frames: kept payload is
    /// copied out of `frames`.
    pub fn recv_in(
        &mut self,
        conn: ConnHandle,
        buf: &mut [u8],
        frames: &dyn FrameStore,
    ) -> Result<usize, Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| c.recv(ctx, frames, buf))
    }

    /// Zero-copy read: the contiguous run of readable bytes (possibly only
    /// part of what is buffered, when the ring wraps). Follow with
    /// [`Stack::consume`]. For a stack that is lent no frames.
    pub fn peek(&self, conn: ConnHandle) -> Result<&[u8], Error> {
        self.peek_in(conn, &NoFrames)
    }

    /// [`Stack::peek`] for a caller that lends frames: the bytes may be a
    /// kept payload, in one of `frames`' frames.
    pub fn peek_in<'a>(
        &'a self,
        conn: ConnHandle,
        frames: &'a dyn FrameStore,
    ) -> Result<&'a [u8], Error> {
        Ok(self.live(conn)?.recv_buf.peek(&self.lent, frames))
    }

    /// Drops `n` bytes read through [`Stack::peek`]; returns how many were
    /// dropped.
    pub fn consume(&mut self, conn: ConnHandle, n: usize) -> Result<usize, Error> {
        let idx = self.lookup(conn)?;
        Ok(self.with_conn(idx, |c, ctx| c.consume(ctx, n)))
    }

    /// Whether the peer closed and every byte was read.
    pub fn is_eof(&self, conn: ConnHandle) -> Result<bool, Error> {
        Ok(self.live(conn)?.at_eof())
    }

    /// Free space in the send buffer.
    pub fn send_space(&self, conn: ConnHandle) -> Result<usize, Error> {
        Ok(self.live(conn)?.send_buf.window())
    }

    /// Current send buffer capacity (grows with the congestion window while
    /// the application keeps the buffer full, up to
    /// [`Config::send_buffer_max`]).
    pub fn send_capacity(&self, conn: ConnHandle) -> Result<usize, Error> {
        Ok(self.live(conn)?.send_buf.capacity())
    }

    /// Current receive buffer capacity, which bounds the window offered
    /// (grows by dynamic right-sizing up to [`Config::recv_buffer_max`]).
    pub fn recv_capacity(&self, conn: ConnHandle) -> Result<usize, Error> {
        Ok(self.live(conn)?.recv_buf.capacity())
    }

    /// The connection's queues and transmission state (`TCP_INFO`'s
    /// counterpart). Also for a connection whose [`Event::Closed`] the
    /// last [`Stack::poll_event`] call returned, while the application
    /// handles it: its figures as they were when the stack let it go
    /// (bytes never read or never acknowledged included), as Linux answers
    /// `TCP_INFO` on a closed socket until the application closes its
    /// descriptor. `Err(InvalidHandle)` for one closed before that.
    pub fn info(&self, conn: ConnHandle) -> Result<crate::ConnInfo, Error> {
        match self.live(conn) {
            Ok(c) => Ok(c.info()),
            Err(e) => self.closed_info_of(conn).ok_or(e),
        }
    }

    /// [`Stack::info`] of the connection whose `Closed` was taken last:
    /// computed now from the connection its slot still holds and the
    /// lengths its queues had (`last_closed`). Out of line: the error
    /// path of `info`.
    #[cold]
    #[inline(never)]
    fn closed_info_of(&self, conn: ConnHandle) -> Option<crate::ConnInfo> {
        let q = self.last_closed.filter(|q| q.conn == conn)?;
        let c = self.slots.get(conn.index as usize)?.conn.as_ref()?;
        Some(c.info_with(q.readable, q.queued as usize))
    }

    /// The connection's state.
    pub fn state(&self, conn: ConnHandle) -> Result<State, Error> {
        Ok(self.live(conn)?.state)
    }

    /// The connection's address pair.
    pub fn four_tuple(&self, conn: ConnHandle) -> Result<FourTuple, Error> {
        Ok(self.live(conn)?.tuple.tuple())
    }

    /// Stores one word of the application's for the connection (an index
    /// into its own table, a pointer-sized token): what it needs to find
    /// its per-connection state from a handle, with no side map. It travels
    /// with the connection through [`Stack::export`] / [`Stack::import`];
    /// zero until set.
    pub fn set_user_data(&mut self, conn: ConnHandle, data: u64) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        if let Some(c) = self.slots[idx as usize].conn.as_mut() {
            c.user_data = data;
        }
        Ok(())
    }

    /// The word stored by [`Stack::set_user_data`] (zero if none was).
    pub fn user_data(&self, conn: ConnHandle) -> Result<u64, Error> {
        Ok(self.live(conn)?.user_data)
    }

    /// Sends FIN after the queued data; reading continues (half close).
    /// Before the handshake completes the FIN waits for it, behind any
    /// queued data; with nothing queued and the SYN unanswered, the
    /// connection ends at once (RFC 9293 §3.10.4), as it does on `close`.
    /// No [`Event::Writable`] comes after it, even one a short
    /// [`Stack::send`] asked for: nothing can be written any more.
    pub fn shutdown_write(&mut self, conn: ConnHandle) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, _| {
            c.shutdown_write();
            c.flags.clear(Flags::WRITABLE_WANTED);
        });
        Ok(())
    }

    /// Sends `conn`'s SYN again at the next [`Stack::poll_transmit`]
    /// (SYN-SENT only, else [`Error::InvalidState`]): for a data path that
    /// could not put the first on the wire because the peer's link-layer
    /// address was not known yet (RFC 1122 §2.3.2.2 lets a host queue such
    /// a packet until the address resolves) and now can, so that the open
    /// does not wait out the retransmission timeout. Counted as a
    /// retransmission; the timer's backoff is unchanged.
    pub fn resend_syn(&mut self, conn: ConnHandle) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        if self.with_conn(idx, |c, _| c.resend_syn()) {
            Ok(())
        } else {
            Err(Error::InvalidState)
        }
    }

    /// Closes both directions: FIN after the queued data, and any data that
    /// arrives later resets the connection. With unread data it aborts. The
    /// handle stays valid until the `Closed` event; no [`Event::Writable`]
    /// comes after it (as after [`Stack::shutdown_write`]).
    pub fn close(&mut self, conn: ConnHandle) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| {
            c.close(ctx);
            c.flags.clear(Flags::WRITABLE_WANTED);
        });
        self.forget_events_if_gone(conn);
        Ok(())
    }

    /// Resets the connection (RST) and frees it; a `Closed { reason:
    /// Aborted }` event follows.
    pub fn abort(&mut self, conn: ConnHandle) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| c.abort(ctx));
        self.forget_events_if_gone(conn);
        Ok(())
    }

    /// After an application call that may have ended `conn` (an abort, a
    /// close with bytes unread or in SYN-SENT): if it did, the events
    /// queued for it before (those of the batch whose callback made the
    /// call) are dropped as they come out (`events_stale`); only its
    /// `Closed` is told. (Not by a scan of the queue here: a sweep that
    /// aborts every idle connection of a full stack would make it
    /// quadratic.)
    fn forget_events_if_gone(&mut self, conn: ConnHandle) {
        if self.events.len() > 1 && self.lookup(conn).is_err() {
            self.events_stale = true;
        }
    }

    /// Turns keepalive on or off for one connection (Linux's
    /// `SO_KEEPALIVE`): on, it probes after the stack's
    /// [`Config::keepalive`] timings, or the default ones
    /// ([`KeepaliveConfig::default`](crate::KeepaliveConfig)) where the
    /// stack has none; off, it never probes, whatever the stack's.
    pub fn set_keepalive(&mut self, conn: ConnHandle, on: bool) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| c.set_keepalive(ctx, on));
        Ok(())
    }

    /// Fixes one connection's send buffer at `bytes` of payload (Linux's
    /// `SO_SNDBUF`): at least one segment, at most
    /// [`Config::send_buffer_max`], and no longer auto-tuned. Bytes queued
    /// past a smaller size stay; writes wait until they drain
    /// ([`Event::Writable`] follows when a larger size makes room).
    pub fn set_send_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| c.set_send_buffer(ctx.cfg, bytes));
        Ok(())
    }

    /// Fixes one connection's receive buffer at `bytes` of payload (Linux's
    /// `SO_RCVBUF`): at least one segment, at most
    /// [`Config::recv_buffer_max`], and no longer auto-tuned. The window it
    /// bounds is offered from then on: a window already advertised is
    /// never taken back (a smaller buffer shows as the application reads),
    /// and a larger buffer sends a window update at once.
    pub fn set_recv_buffer(&mut self, conn: ConnHandle, bytes: usize) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, ctx| c.set_recv_buffer(ctx.cfg, bytes));
        Ok(())
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    pub fn set_nodelay(&mut self, conn: ConnHandle, nodelay: bool) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, _| c.set_nodelay(nodelay));
        Ok(())
    }

    /// Chooses the congestion control algorithm of one connection
    /// (`Config::congestion` chose it when the connection was made). May be
    /// called at any time, as Linux's `TCP_CONGESTION` socket option: the
    /// congestion window and slow-start threshold carry over, and the new
    /// algorithm goes on from them.
    pub fn set_congestion(
        &mut self,
        conn: ConnHandle,
        alg: CongestionAlgorithm,
    ) -> Result<(), Error> {
        let idx = self.lookup(conn)?;
        self.with_conn(idx, |c, _| c.set_congestion(alg));
        Ok(())
    }

    // ---------------------------------------------------------------
    // Migration
    // ---------------------------------------------------------------

    /// Removes a connection from this stack and returns its full state, for
    /// [`Stack::import`] on another core. No segment is sent and no event is
    /// queued; events already queued for the handle become stale.
    pub fn export(&mut self, conn: ConnHandle) -> Result<Snapshot, Error> {
        self.export_in(conn, &NoFrames)
    }

    /// [`Stack::export`] for a caller that lends frames: kept payload is
    /// copied into the snapshot out of `frames`, and the frames released.
    pub fn export_in(
        &mut self,
        conn: ConnHandle,
        frames: &dyn FrameStore,
    ) -> Result<Snapshot, Error> {
        let idx = self.lookup(conn)?;
        Ok(self.export_slot(idx, frames))
    }

    /// Takes the connection in slot `idx` out of the stack, complete.
    fn export_slot(&mut self, idx: u32, frames: &dyn FrameStore) -> Snapshot {
        self.remove(idx, true, |c, lent| c.export(lent, frames))
    }

    /// Adds a connection exported from another stack. A connection from a
    /// passive open that the application had not been told of yet (still
    /// half-open) joins this stack's listener for its address, counts
    /// against its backlog and is reported `Accepted` when it completes;
    /// with no such listener, it is reported `Connected`. Taken past
    /// [`Config::max_connections`] within the headroom
    /// [`Stack::import_bucket`] describes, refused
    /// ([`Error::ConnectionLimit`]) beyond. Its received data and the
    /// window it offered are taken even past [`Config::recv_memory`] (they
    /// can be neither dropped nor taken back); a connection whose window
    /// memory held back is offered one from this stack's memory at once,
    /// if it has the room, and waits for it otherwise.
    pub fn import(&mut self, now: Instant, snap: Snapshot) -> Result<ConnHandle, Error> {
        self.tick(now);
        let hash = self.table.hash(snap.key());
        self.import_one(&snap, hash, None)
    }

    /// `bucket`: the bucket the snapshot came out of, where a bucket or a
    /// part of one is imported (None: computed from its tuple).
    fn import_one(
        &mut self,
        snap: &Snapshot,
        hash: u64,
        bucket: Option<u16>,
    ) -> Result<ConnHandle, Error> {
        let tuple = *snap.key();
        debug_assert_eq!(hash, self.table.hash(&tuple));
        if self.find(hash, &tuple).is_some() {
            return Err(Error::AddrInUse);
        }
        let cap = self.cfg.max_connections;
        let past_cap = self.live + self.held >= cap;
        if past_cap && self.live + self.held >= cap.saturating_add(import_headroom(cap)) {
            self.stats.imports_refused_at_cap += 1;
            self.reset_refused_import(snap);
            return Err(Error::ConnectionLimit);
        }
        // Built in its slot: a connection is some 680 bytes, and moving it
        // there through a `Result` cost two copies per connection.
        let idx = self.alloc_slot();
        let send_max = self.cfg.send_buffer_max.max(self.cfg.send_buffer);
        let built = Connection::import_into(
            snap,
            &mut self.pool,
            send_max,
            &mut self.slots[idx as usize].conn,
        );
        if let Err(e) = built {
            self.free.push(idx);
            self.reset_refused_import(snap);
            return Err(e);
        }
        // A TIME-WAIT record here is an older incarnation: the imported
        // connection supersedes it (only once it is in: a snapshot refused
        // leaves the record).
        if let Some(tw) = self.time_wait.find(hash, &tuple) {
            self.time_wait.remove(tw);
        }
        let conn = self.slots[idx as usize].conn.as_mut().expect("just built");
        let listener = if conn.is_passive() && !conn.flags.has(Flags::ANNOUNCED) {
            // (`listener_for` borrows the stack: the flags are read first.)
            let tuple = conn.tuple;
            self.listener_for(&tuple)
        } else {
            None
        };
        let conn = self.slots[idx as usize].conn.as_mut().expect("just built");
        match listener {
            Some(l) => {
                // Still half-open: it counts against this listener's
                // backlog as it did against the old one's (the snapshot
                // carries no such mark: the old listener let it go).
                conn.set_in_backlog(true);
                if let Some(Some(l)) = self.listeners.get_mut(l.0 as usize) {
                    l.half_open += 1;
                }
            }
            None => {
                conn.set_in_backlog(false);
                conn.flags.set(Flags::ANNOUNCED);
            }
        }
        self.place(idx, listener, hash, bucket);
        self.after(idx);
        // A connection whose window memory held back waits for this
        // stack's memory now: queued with its waiters, and offered a
        // window at once if this stack has the room (the old stack's
        // release would have woken it; nothing here would, and its peer
        // would wait for its own persist probes).
        self.note_memory_limited(idx);
        if self.slots[idx as usize].mem_waiting {
            self.wake_memory_waiters();
        }
        self.stats.imports_past_cap += u64::from(past_cap);
        self.stats.imports_past_recv_memory += u64::from(self.rcv_committed > self.cfg.recv_memory);
        Ok(self.handle(idx))
    }
}

/// Bytes of one slab slot (for the layout's size budget).
#[cfg(test)]
pub(crate) fn slot_size() -> usize {
    std::mem::size_of::<Slot>()
}

/// Where a slot's connection starts (what comes before it: the slot's
/// own fields that every segment reads).
#[cfg(test)]
pub(crate) fn slot_conn_offset() -> usize {
    std::mem::offset_of!(Slot, conn)
}

#[cfg(test)]
impl Stack {
    /// Entries on the timer wheel (at most one per connection).
    pub(crate) fn wheel_len(&self) -> usize {
        self.wheel.len()
    }

    /// The deadline a live connection's wheel entry is filed for.
    pub(crate) fn wheel_deadline(&self, h: ConnHandle) -> Option<Instant> {
        let i = self.lookup(h).expect("live handle");
        self.slots[i as usize].wheel_deadline.get()
    }

    /// A live connection's state, to set up cases that real traffic takes
    /// too long to reach (sequence numbers about to wrap).
    pub(crate) fn connection_mut(&mut self, h: ConnHandle) -> &mut Connection {
        let i = self.lookup(h).expect("live handle");
        self.slots[i as usize].conn.as_mut().expect("live slot")
    }

    /// Checks that the stack's connection layout is whole: the table names
    /// exactly the live slots under their own tuples, the free list the
    /// empty ones; the committed receive memory and the chunks in use are
    /// the sums of what the connections hold; a connection that holds no
    /// data holds no chunk; TIME-WAIT holds no send buffer; every armed
    /// timer has a wheel entry at or before it, and the wheel holds exactly
    /// one entry per slot that has one (no stale entries).
    pub(crate) fn check_layout(&self) -> Result<(), String> {
        let floor = usize::from(self.cfg.mss);
        let (mut live, mut committed, mut chunks, mut sharing) = (0, 0, 0, 0);
        let mut parked = 0;
        let (mut chunk_bytes, mut held_slots) = (0, 0);
        for (i, slot) in self.slots.iter().enumerate() {
            let idx = i as u32;
            let Some(c) = slot.live() else {
                // Free, held for its `Closed` still queued, or for the
                // `Closed` taken last: one of them; a free one holds no
                // connection, a held one the closed one, its buffers
                // given back.
                let free = self.free.iter().filter(|&&f| f == idx).count();
                if let Some(c) = slot.conn.as_ref() {
                    if free != 0 {
                        return Err(format!("free slot {i} holds a connection"));
                    }
                    if c.send_buf.chunks() + c.recv_buf.chunks() != 0
                        || c.recv_buf.len() + c.send_buf.len() != 0
                        || c.rack.flight.is_some()
                    {
                        return Err(format!("slot {i} held for its Closed holds memory"));
                    }
                }
                let held = self
                    .events
                    .iter()
                    .filter(|e| matches!(e, Event::Closed { conn, .. } if conn.index == idx))
                    .count();
                let last_closed = usize::from(self.closed_slot == idx);
                if free + held + last_closed != 1 {
                    return Err(format!(
                        "empty slot {i} {free} times in the free list, held for {held} Closed \
                         events, {last_closed} for the last taken"
                    ));
                }
                held_slots += held;
                continue;
            };
            live += 1;
            if self.free.contains(&idx) || self.closed_slot == idx {
                return Err(format!("live slot {i} in the free list"));
            }
            let hash = self.table.hash(&c.tuple);
            if self.find(hash, &c.tuple) != Some(idx) {
                return Err(format!("slot {i} ({:?}) not found by its tuple", c.tuple));
            }
            if self.slots[idx as usize].hash != hash {
                return Err(format!("slot {i} ({:?}): its kept hash is stale", c.tuple));
            }
            if self.time_wait.find(hash, &c.tuple).is_some() {
                return Err(format!("slot {i} ({:?}) also in TIME-WAIT", c.tuple));
            }
            if c.compactable() {
                return Err(format!("slot {i}: closed in TIME-WAIT, not compacted"));
            }
            if c.state == State::Closed {
                return Err(format!("slot {i} holds a CLOSED connection"));
            }
            committed += c.rcv_charged(floor);
            sharing += usize::from(!c.in_backlog());
            parked += usize::from(c.flags.has(Flags::RCV_PARKED));
            chunks += c.send_buf.chunks() + c.recv_buf.chunks();
            chunk_bytes += c.send_buf.held_bytes() + c.recv_buf.held_bytes();
            if c.send_buf.is_empty() && c.send_buf.chunks() != 0 {
                return Err(format!("slot {i}: empty send buffer holds chunks"));
            }
            if c.recv_buf.is_empty() && c.assembler.is_empty() && c.recv_buf.chunks() != 0 {
                return Err(format!("slot {i}: empty receive buffer holds chunks"));
            }
            if c.state == State::TimeWait && c.send_buf.chunks() != 0 {
                return Err(format!("slot {i}: TIME-WAIT holds send chunks"));
            }
            if !c.flags.has(Flags::SEND_QUEUED) && !c.send_buf.is_empty() {
                return Err(format!("slot {i}: bytes queued to send, SEND_QUEUED clear"));
            }
            if !c.flags.has(Flags::PERSISTING)
                && (c.timers_rare.persist.is_some() || c.timers_rare.persist_backoff != 0)
            {
                return Err(format!("slot {i}: persist timer set, PERSISTING clear"));
            }
            if c.flags.has(Flags::SACKED) == c.scoreboard.is_empty() {
                return Err(format!("slot {i}: SACKED disagrees with the scoreboard"));
            }
            if !c.flags.has(Flags::UNDO) && c.snd_rare.undo.is_some() {
                return Err(format!("slot {i}: undo state set, UNDO clear"));
            }
            if c.flags.has(Flags::HOLES) == c.assembler.is_empty() {
                return Err(format!("slot {i}: HOLES disagrees with the assembler"));
            }
            if let Some(d) = c.next_deadline() {
                if slot.wheel_deadline.get().is_none_or(|w| w > d) {
                    return Err(format!("slot {i}: deadline {d:?} not on the wheel"));
                }
            }
            if c.flags.has(Flags::ACK_QUEUED) {
                let queued = self
                    .acks_due
                    .iter()
                    .filter(|a| a.idx == idx && a.generation == slot.generation)
                    .map(|a| a.at)
                    .min();
                match (queued, c.timers.delayed_ack.get()) {
                    (None, _) => return Err(format!("slot {i}: ACK_QUEUED, no entry queued")),
                    (Some(at), Some(d)) if at > d => {
                        return Err(format!("slot {i}: delayed ACK {d:?} queued for {at:?}"));
                    }
                    _ => {}
                }
            }
        }
        let mut by_state = [0u32; State::COUNT];
        for c in self.slots.iter().filter_map(Slot::live) {
            by_state[c.state.index()] += 1;
        }
        if by_state != self.by_state {
            return Err(format!(
                "connections by state {by_state:?}, counted {:?}",
                self.by_state
            ));
        }
        if held_slots != self.held {
            return Err(format!(
                "{held_slots} slots held for their Closed, count {}",
                self.held
            ));
        }
        let queued: Vec<ConnHandle> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Closed { conn, .. } => Some(*conn),
                _ => None,
            })
            .collect();
        if !self
            .closed_info
            .iter()
            .map(|q| q.conn)
            .eq(queued.iter().copied())
        {
            return Err(format!(
                "final figures kept for {:?}, Closed queued for {queued:?}",
                self.closed_info.iter().map(|q| q.conn).collect::<Vec<_>>()
            ));
        }
        if live != self.live || self.table.len() != live {
            return Err(format!(
                "{live} live slots, live count {}, table {}",
                self.live,
                self.table.len()
            ));
        }
        if parked != self.parked {
            return Err(format!(
                "{parked} parked connections, parked count {}",
                self.parked
            ));
        }
        if sharing != self.sharing {
            return Err(format!(
                "{sharing} live slots out of a backlog, sharing count {}",
                self.sharing
            ));
        }
        self.time_wait.check()?;
        self.lent.check(
            self.slots
                .iter()
                .filter_map(Slot::live)
                .map(|c| c.recv_buf.pieces()),
        )?;
        if self
            .slots
            .iter()
            .any(|s| s.wheel_deadline.is_some() != s.wheel_pos.is_some())
        {
            return Err("a slot's wheel deadline and position disagree".into());
        }
        let with_entry: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].wheel_pos.is_some())
            .collect();
        let mut positions: Vec<WheelPos> = self.slots.iter().map(|s| s.wheel_pos).collect();
        self.wheel.check(&mut positions, with_entry.into_iter())?;
        let mut slots: Vec<(bool, Link)> = self
            .slots
            .iter()
            .map(|s| (s.live().is_some(), s.link))
            .collect();
        self.buckets.check(&mut slots, |s| &mut s.1, |s| s.0)?;
        for s in &self.slots {
            if let Some(c) = s.live() {
                if s.link.bucket != self.bucket_for(&c.tuple) {
                    return Err(format!("{:?} on bucket {}", c.tuple, s.link.bucket));
                }
            }
        }
        if committed != self.rcv_committed {
            return Err(format!(
                "committed {} but connections sum to {committed}",
                self.rcv_committed
            ));
        }
        if (chunks, chunk_bytes) != (self.pool.in_use(), self.pool.in_use_bytes()) {
            return Err(format!(
                "pool says {} chunks ({} bytes) in use, buffers hold {chunks} ({chunk_bytes})",
                self.pool.in_use(),
                self.pool.in_use_bytes()
            ));
        }
        Ok(())
    }
}
