//! The mesh between workers: frames go in batches, in order, ahead of the
//! next message to their destination; full inboxes and a carrier's full
//! TX ring keep them in order within their bounds and drop (counted)
//! beyond. An inbox the workers' frames filled still takes the
//! controller's messages of a move, and the news of a finished one; an
//! old worker whose rewrite never comes stops waiting for it. A worker's
//! pass as its loop makes it (`pass`) and the NIC that records a move's
//! writes are shared with `tcp_handler`'s handoff tests.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Mesh, Message, Mover, Work, CONTROL_ROOM, INBOX_BYTES, MESSAGES_PER_PASS, REWRITE_TIMEOUT,
    STALLED_BYTES, TO_SEND_MAX,
};
use crate::ephemeral::rss_state;
use crate::frame_batch::BATCH_FRAMES;

/// Worker 0 and worker 1 of a two-queue mesh whose every bucket is on
/// queue 1; worker 0 sends through worker 1 (its carrier).
pub(super) fn pair() -> (Mover, Mover) {
    let mesh = Arc::new(Mesh::new(2).expect("eventfds"));
    let rss = rss_state(&[0x6d; 40], &[1; 128], 2).expect("valid RSS");
    let mut a = Mover::new(0, mesh.clone(), rss.clone());
    a.set_carrier(1);
    (a, Mover::new(1, mesh, rss))
}

/// A full-sized frame whose first four bytes number it.
fn numbered(k: u32) -> Vec<u8> {
    let mut f = vec![0u8; 1514];
    f[..4].copy_from_slice(&k.to_be_bytes());
    f
}

fn number(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[..4].try_into().expect("numbered"))
}

/// The numbers of the frames `b` takes from its inbox until it is empty.
fn forwarded_in(b: &mut Mover) -> Vec<u32> {
    let mut got = Vec::new();
    while !b.mesh.inboxes[b.me as usize].rx.is_empty() {
        for w in b.take_work(Duration::ZERO) {
            let Work::Frames(batches) = w else {
                panic!("only frames were sent")
            };
            got.extend(
                batches
                    .iter()
                    .flat_map(|b| b.iter())
                    .map(|(_, f)| number(f)),
            );
        }
    }
    got
}

#[test]
fn forwarded_frames_go_in_batches_ahead_of_the_next_message() {
    let (mut a, b) = pair();
    for k in 0..100 {
        a.forward(Duration::ZERO, 0, 0, &numbered(k));
    }
    // Full batches went at once; the rest goes before the next message.
    a.queue_message(1, Message::Cancel { bucket: 3 });
    let inbox = &b.mesh.inboxes[1];
    let mut seen = Vec::new();
    let mut next = 0;
    while let Ok(m) = inbox.rx.try_recv() {
        match m {
            Message::Frames(batch) => {
                for (hops, f) in batch.iter() {
                    assert_eq!((hops, number(f)), (1, next), "in order, forwarded once");
                    next += 1;
                }
                seen.push(batch.len());
            }
            Message::Cancel { bucket: 3 } => seen.push(0),
            _ => panic!("unexpected message"),
        }
    }
    assert_eq!(seen, [BATCH_FRAMES, BATCH_FRAMES, BATCH_FRAMES, 4, 0]);
    assert_eq!(a.stats.frames_forwarded, 100);
}

#[test]
fn a_full_inbox_keeps_batches_in_order_and_drops_past_its_bound() {
    let (mut a, mut b) = pair();
    // Enough frames to fill the inbox and the sender's stalled messages.
    let per_batch = {
        let mut one = crate::frame_batch::FrameBatch::default();
        one.push(0, &numbered(0));
        one.allocated()
    };
    let fit = (INBOX_BYTES + STALLED_BYTES) / per_batch * BATCH_FRAMES;
    let sent = (fit + 10 * BATCH_FRAMES) as u32;
    for k in 0..sent {
        a.forward(Duration::ZERO, 0, 0, &numbered(k));
    }
    a.flush();
    let dropped = a.stats.forward_dropped;
    assert!(dropped > 0, "past both bounds frames are dropped");
    assert_eq!(dropped % BATCH_FRAMES as u64, 0, "whole batches");
    assert!(a.stalled_bytes <= STALLED_BYTES);
    // The receiver takes its inbox a pass at a time; the sender retries.
    let mut got = Vec::new();
    for _ in 0..1_000 {
        let before = got.len();
        let work = b.take_work(Duration::ZERO);
        for w in work {
            if let Work::Frames(batches) = w {
                let n: usize = batches.iter().map(|b| b.len()).sum();
                assert!(n <= MESSAGES_PER_PASS + BATCH_FRAMES, "a pass's frames");
                got.extend(
                    batches
                        .iter()
                        .flat_map(|b| b.iter())
                        .map(|(_, f)| number(f)),
                );
            }
        }
        a.flush();
        if got.len() == before && a.stalled.is_empty() {
            break;
        }
    }
    assert_eq!(a.stalled_bytes, 0);
    assert_eq!(got.len() as u64 + dropped, u64::from(sent));
    let expected: Vec<u32> = (0..got.len() as u32).collect();
    assert_eq!(
        got, expected,
        "what arrives is in order, the dropped ones the last"
    );
    assert_eq!(
        b.mesh.inboxes[1]
            .batch_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn a_batch_that_goes_before_it_is_full_is_charged_its_frames() {
    let (mut a, mut b) = pair();
    // A pass that forwards one frame, many times over, the receiver away:
    // each batch is charged (and holds) its one frame, not a full batch's
    // room, so 16 000 of them fit as 16 000 single messages did.
    for k in 0..16_000 {
        a.forward(Duration::ZERO, 0, 0, &numbered(k));
        a.flush();
    }
    assert_eq!(a.stats.forward_dropped, 0);
    assert!(a.stalled.is_empty());
    let charged = b.mesh.inboxes[1]
        .batch_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(charged <= 16_000 * (1514 + 64), "{charged} bytes charged");
    assert_eq!(forwarded_in(&mut b), (0..16_000).collect::<Vec<_>>());
}

#[test]
fn frames_to_send_wait_in_order_for_room_on_the_tx_ring() {
    let (mut a, mut b) = pair();
    for k in 0..50 {
        a.transmit_via_carrier(&numbered(k));
    }
    a.flush();
    assert!(
        forwarded_in(&mut b).is_empty(),
        "frames to send are no work"
    );
    let mut sent = Vec::new();
    let mut room = 20;
    b.send_transmits(|f| {
        if room == 0 {
            return None;
        }
        room -= 1;
        sent.push(number(f));
        Some(true)
    });
    assert_eq!(sent, (0..20).collect::<Vec<_>>());
    // One too long for a TX frame: dropped, counted, the rest sent.
    b.send_transmits(|f| {
        sent.push(number(f));
        Some(number(f) != 30)
    });
    assert_eq!(sent, (0..50).collect::<Vec<_>>());
    assert_eq!(b.stats.forward_dropped, 1);
    assert_eq!((a.stats.spill_tx_out, b.stats.spill_tx_in), (50, 50));
}

#[test]
fn a_carrier_keeps_at_most_its_bound_of_frames_to_send() {
    let (mut a, mut b) = pair();
    let extra = 3 * BATCH_FRAMES as u32;
    for k in 0..TO_SEND_MAX as u32 + extra {
        a.transmit_via_carrier(&numbered(k));
    }
    a.flush();
    assert!(forwarded_in(&mut b).is_empty());
    assert_eq!(b.stats.forward_dropped, u64::from(extra));
    let mut sent = Vec::new();
    b.send_transmits(|f| {
        sent.push(number(f));
        Some(true)
    });
    assert_eq!(sent, (0..TO_SEND_MAX as u32).collect::<Vec<_>>());
}

/// What one worker saw arrive, in order: frames (sender, number) and
/// markers (sender, number: an import part, the message a move's order
/// hangs on).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    Frame(u32, u32),
    Marker(u32, u32),
}

/// A frame numbered `n` from worker `from`.
fn tagged(from: u32, n: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(8)];
    f[..4].copy_from_slice(&from.to_be_bytes());
    f[4..8].copy_from_slice(&n.to_be_bytes());
    f
}

fn tag(f: &[u8]) -> (u32, u32) {
    (
        u32::from_be_bytes(f[..4].try_into().expect("tagged")),
        u32::from_be_bytes(f[4..8].try_into().expect("tagged")),
    )
}

#[derive(Debug, Clone)]
enum Op {
    /// `n` frames from `from` of a bucket `to` serves.
    Forward {
        from: u32,
        to: u32,
        n: usize,
        len: usize,
    },
    /// `n` frames `from` gives its carrier to send.
    Transmit { from: u32, n: usize },
    /// A move's message from `from` to `to`.
    Marker { from: u32, to: u32 },
    /// `who` ends its pass.
    Flush { who: u32 },
    /// `who` takes its inbox and sends up to `room` of its frames to send.
    Take { who: u32, room: usize },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..3u32, 1..3u32, 1..80usize, 60..1600usize).prop_map(|(from, d, n, len)| {
            Op::Forward {
                from,
                to: (from + d) % 3,
                n,
                len,
            }
        }),
        (0..3u32, 1..80usize).prop_map(|(from, n)| Op::Transmit { from, n }),
        (0..3u32, 1..3u32).prop_map(|(from, d)| Op::Marker {
            from,
            to: (from + d) % 3
        }),
        (0..3u32).prop_map(|who| Op::Flush { who }),
        (0..3u32, 0..200usize).prop_map(|(who, room)| Op::Take { who, room }),
    ]
}

/// Three workers; bucket `q` is served by queue `q`; each sends through
/// the next (a carrier).
fn three() -> Vec<Mover> {
    let mesh = Arc::new(Mesh::new(3).expect("eventfds"));
    let rss = rss_state(&[0x6d; 40], &[0, 1, 2, 0, 1, 2, 0, 1], 3).expect("valid RSS");
    (0..3)
        .map(|me| {
            let mut m = Mover::new(me, mesh.clone(), rss.clone());
            m.set_carrier((me + 1) % 3);
            m
        })
        .collect()
}

/// Takes `w`'s inbox into `seen` and sends up to `room` of its frames to
/// send into `sent`.
fn take(w: &mut Mover, room: usize, seen: &mut Vec<Seen>, sent: &mut Vec<(u32, u32)>) {
    for work in w.take_work(Duration::ZERO) {
        match work {
            Work::Frames(batches) => seen.extend(
                batches
                    .iter()
                    .flat_map(|b| b.iter())
                    .map(|(_, f)| tag(f))
                    .map(|(from, n)| Seen::Frame(from, n)),
            ),
            Work::Import(a) => seen.push(Seen::Marker(
                u32::from(a.bucket) >> 12,
                u32::from(a.bucket) & 0xfff,
            )),
            _ => panic!("only frames and imports were sent"),
        }
    }
    let mut left = room;
    w.send_transmits(|f| {
        if left == 0 {
            return None;
        }
        left -= 1;
        sent.push(tag(f));
        Some(true)
    });
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Whatever the interleaving of sends, passes and takes, each worker
    /// gets every other worker's frames and messages in the order they
    /// were sent, and frames to send go out in order; nothing is lost
    /// (these volumes stay within every bound), and the inboxes' byte
    /// counts come back to zero.
    #[test]
    fn frames_and_messages_between_workers_keep_their_order(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let mut w = three();
        let mut next = 0u32;
        let mut markers = 0u32;
        // Sent, by destination: what it serves and its markers, in order;
        // what it is to send.
        let mut to_serve: Vec<Vec<Seen>> = vec![Vec::new(); 3];
        let mut to_send: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 3];
        let mut seen: Vec<Vec<Seen>> = vec![Vec::new(); 3];
        let mut sent: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 3];
        for op in ops {
            match op {
                Op::Forward { from, to, n, len } => {
                    for _ in 0..n {
                        next += 1;
                        // Bucket `to` is served by queue `to`.
                        w[from as usize].forward(Duration::ZERO, to as u16, 0, &tagged(from, next, len));
                        to_serve[to as usize].push(Seen::Frame(from, next));
                    }
                }
                Op::Transmit { from, n } => {
                    for _ in 0..n {
                        next += 1;
                        w[from as usize].transmit_via_carrier(&tagged(from, next, 100));
                        to_send[((from + 1) % 3) as usize].push((from, next));
                    }
                }
                Op::Marker { from, to } => {
                    markers += 1;
                    let bucket = ((from << 12) | markers) as u16;
                    let export = flowlane_tcp::Stack::new(flowlane_tcp::Config::new([1; 16]))
                        .export_bucket(bucket);
                    w[from as usize].export_part(to, Box::new(super::Arrival {
                        bucket,
                        export,
                        apps: Vec::new(),
                        neighbors: Vec::new(),
                    }));
                    to_serve[to as usize].push(Seen::Marker(from, markers));
                }
                Op::Flush { who } => w[who as usize].flush(),
                Op::Take { who, room } => {
                    let who = who as usize;
                    take(&mut w[who], room, &mut seen[who], &mut sent[who]);
                }
            }
        }
        for _ in 0..4 {
            for m in w.iter_mut() {
                m.flush();
            }
            for who in 0..3 {
                take(&mut w[who], usize::MAX, &mut seen[who], &mut sent[who]);
            }
        }
        for who in 0..3 {
            // Per sender, in the order sent (other senders' interleave).
            for from in 0..3u32 {
                let of = |s: &&Seen| matches!(s, Seen::Frame(f, _) | Seen::Marker(f, _) if *f == from);
                let want: Vec<Seen> = to_serve[who].iter().filter(of).copied().collect();
                let got: Vec<Seen> = seen[who].iter().filter(of).copied().collect();
                proptest::prop_assert_eq!(got, want, "worker {} from {}", who, from);
                let want: Vec<_> = to_send[who].iter().filter(|t| t.0 == from).collect();
                let got: Vec<_> = sent[who].iter().filter(|t| t.0 == from).collect();
                proptest::prop_assert_eq!(got, want, "sent by {} for {}", who, from);
            }
            proptest::prop_assert_eq!(w[who].stats.forward_dropped, 0);
            proptest::prop_assert_eq!(w[who].stalled_bytes, 0);
            proptest::prop_assert_eq!(
                w[who].mesh.inboxes[who].batch_bytes.load(std::sync::atomic::Ordering::Relaxed),
                0
            );
        }
    }
}

/// The new worker holds its own frames of a bucket it takes over with the
/// step's long bound while the old one exports and the NIC's entry is
/// written (an ethtool write on a real NIC takes its time), and on its
/// last-resort timeout only from when the old worker can drain: it took
/// the rewrite and said so. Before, the first part of the bucket started
/// the timeout, and a slow write made the new worker process its own
/// frames ahead of the old worker's older ones.
#[test]
fn a_takeover_s_hold_times_out_only_once_the_old_worker_can_drain() {
    let mesh = Arc::new(Mesh::new(2).expect("eventfds"));
    let rss = rss_state(&[0x6d; 40], &[0, 1, 0, 1], 2).expect("valid RSS");
    let (mut a, mut b) = (
        Mover::new(0, mesh.clone(), rss.clone()),
        Mover::new(1, mesh.clone(), rss),
    );
    let ms = Duration::from_millis;
    let (reply, _answers) = crossbeam_channel::unbounded();
    mesh.send(
        1,
        Message::Prepare {
            bucket: 0,
            reply: reply.clone(),
        },
    )
    .unwrap();
    assert!(b.take_work(ms(0)).is_empty());
    let part = || {
        Box::new(super::Arrival {
            bucket: 0,
            export: flowlane_tcp::Stack::new(flowlane_tcp::Config::new([1; 16])).export_bucket(0),
            apps: Vec::new(),
            neighbors: Vec::new(),
        })
    };
    a.export_part(1, part());
    a.flush();
    assert_eq!(b.take_work(ms(1)).len(), 1, "the part");
    // No rewrite yet, long past the hold's timeout.
    assert!(b.take_work(ms(250)).is_empty());
    assert_eq!(b.stats.hold_timeouts, 0);
    assert!(b.holding());
    // The last part, then the rewrite: the old worker drains.
    a.exported(0, 1, part());
    mesh.send(
        0,
        Message::Rewritten {
            bucket: 0,
            reply,
            written: true,
        },
    )
    .unwrap();
    for w in a.take_work(ms(300)) {
        if let Work::Rewritten {
            bucket,
            reply,
            written,
        } = w
        {
            a.rewritten(bucket, reply, written, 1);
        }
    }
    a.flush();
    b.take_work(ms(300));
    let timeout = b.hold_timeout;
    b.take_work(ms(300) + timeout - Duration::from_micros(1));
    assert_eq!(b.stats.hold_timeouts, 0);
    b.take_work(ms(300) + timeout);
    assert_eq!(b.stats.hold_timeouts, 1, "the marker never came");
    assert!(!b.holding());
}

/// The NIC's entry writes of a move, in order.
#[derive(Default)]
pub(crate) struct RecordingNic(pub(crate) std::sync::Mutex<Vec<(u16, u32)>>);

impl super::RssTableWriter for RecordingNic {
    fn set_entry(&self, bucket: u16, queue: u32) -> Result<(), String> {
        self.0.lock().unwrap().push((bucket, queue));
        Ok(())
    }
}

/// Three workers over a four-entry table: buckets 0 and 2 on queue 0,
/// bucket 1 on queue 1, bucket 3 on queue 2; `view_of_0`: the table as
/// queue 0 sees it.
fn three_queues(view_of_0: &[u32]) -> (Arc<Mesh>, Vec<Mover>) {
    let mesh = Arc::new(Mesh::new(3).expect("eventfds"));
    let table = [0, 1, 0, 2];
    let movers = (0..3)
        .map(|q| {
            let t: &[u32] = if q == 0 { view_of_0 } else { &table };
            Mover::new(q, mesh.clone(), rss_state(&[0x6d; 40], t, 3).unwrap())
        })
        .collect();
    (mesh, movers)
}

/// `from` forwards frames of `bucket` (another queue's), one message
/// each, until that queue's inbox takes no more of them; returns how many
/// went in.
fn fill_inbox(from: &mut Mover, bucket: u16) -> usize {
    let mut n = 0;
    while from.stalled.is_empty() {
        from.forward(Duration::ZERO, bucket, 0, &[0u8; 60]);
        from.flush();
        n += 1;
        assert!(n <= 2 * super::INBOX, "the inbox never filled");
    }
    n - 1
}

/// One pass of worker `m` at `now` as its loop makes it, the buckets it
/// exports empty (no connection) and its RX ring always passed: markers
/// due, its inbox (an export carried out and answered, parts imported,
/// rewrites taken, forwarded frames handed to `frames` with how often each
/// was forwarded), markers again and its sends. Returns how many exports
/// it carried out.
pub(crate) fn pass(
    m: &mut Mover,
    now: Duration,
    frames: &mut dyn FnMut(&mut Mover, u8, &[u8]),
) -> usize {
    let mut exports = 0;
    m.send_markers(now, 0);
    for w in m.take_work(now) {
        match w {
            Work::Export { bucket, to, reply } => {
                m.leaving(bucket, to);
                let export = flowlane_tcp::Stack::new(flowlane_tcp::Config::new([1; 16]))
                    .export_bucket(bucket);
                m.exported(
                    bucket,
                    to,
                    Box::new(super::Arrival {
                        bucket,
                        export,
                        apps: Vec::new(),
                        neighbors: Vec::new(),
                    }),
                );
                let _ = reply.send(super::Reply::Exported {
                    connections: 0,
                    time_wait: 0,
                });
                exports += 1;
            }
            Work::Import(a) => m.imported(a.bucket, 0, a.export.complete()),
            Work::Rewritten {
                bucket,
                reply,
                written,
            } => m.rewritten(bucket, reply, written, 0),
            Work::Frames(batches) => {
                for (hops, f) in batches.iter().flat_map(|b| b.iter()) {
                    frames(m, hops, f);
                }
            }
        }
    }
    m.send_markers(now, 0);
    m.flush();
    exports
}

/// Frames a pass hands on: dropped (the tests look at the moves).
fn dropped(_: &mut Mover, _: u8, _: &[u8]) {}

/// Waits (10 s at most) until `done`.
fn spin_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::yield_now();
    }
}

/// Moves bucket 0 from queue 0 to queue 1 on its own thread, as the
/// service's controller does.
fn move_bucket_0(
    mesh: &Arc<Mesh>,
    nic: &Arc<RecordingNic>,
) -> std::thread::JoinHandle<Result<super::MoveReport, super::MoveError>> {
    let (mesh, nic) = (mesh.clone(), nic.clone());
    std::thread::spawn(move || super::move_bucket(&mesh, nic.as_ref(), 0, 0, 1))
}

/// Every worker of `w` makes passes, `now` 10 µs on each round, until the
/// controller is done; its result.
fn step_all(
    w: &mut [Mover],
    now: &mut Duration,
    controller: std::thread::JoinHandle<Result<super::MoveReport, super::MoveError>>,
) -> Result<super::MoveReport, super::MoveError> {
    let start = std::time::Instant::now();
    while !controller.is_finished() {
        assert!(start.elapsed() < Duration::from_secs(10), "the move hung");
        *now += Duration::from_micros(10);
        for m in w.iter_mut() {
            pass(m, *now, &mut dropped);
        }
        std::thread::yield_now();
    }
    controller.join().unwrap()
}

/// The old queue's inbox fills with forwarded frames while the controller
/// waits for the new queue's answer: the rewrite the controller sends on
/// that answer still reaches it (before, it was dropped: the old queue
/// never drained, its move stayed open for good, and the new queue held
/// the bucket's frames until its timeout).
#[test]
fn a_move_s_rewrite_reaches_an_old_queue_whose_inbox_frames_filled() {
    let (mesh, mut w) = three_queues(&[0, 1, 0, 2]);
    let nic = Arc::new(RecordingNic::default());
    let controller = move_bucket_0(&mesh, &nic);
    spin_until("the announcement and the export", || {
        mesh.pending(0) == 1 && mesh.pending(1) == 1
    });
    assert!(fill_inbox(&mut w[2], 2) > 1_000);
    // Queue 1 answers; the controller writes the entry and sends the
    // rewrite to queue 0, whose inbox is full.
    let before = mesh.pending(0);
    let mut now = Duration::from_millis(1);
    pass(&mut w[1], now, &mut dropped);
    spin_until("the NIC's write", || nic.0.lock().unwrap().len() == 1);
    let written = std::time::Instant::now();
    while mesh.pending(0) == before && written.elapsed() < Duration::from_millis(100) {
        std::thread::yield_now();
    }
    let result = step_all(&mut w, &mut now, controller);
    assert!(result.is_ok(), "{result:?}");
    for _ in 0..8 {
        now += Duration::from_micros(10);
        for m in w.iter_mut() {
            pass(m, now, &mut dropped);
        }
    }
    assert!(!w[0].draining_bucket(0), "the old queue drained");
    assert!(!w[1].holding(), "the new queue holds nothing");
    assert_eq!(w[1].stats.hold_timeouts, 0);
    assert_eq!([w[0].owner(0), w[1].owner(0), w[2].owner(0)], [1, 1, 1]);
}

/// The new queue's inbox fills with forwarded frames after it took the
/// move's announcement, and the old queue refuses the export: the
/// controller's cancel still reaches the new queue, which stops holding
/// the bucket's frames at once (before, the cancel was dropped and it held
/// them until its timeout, counted as a drain marker that never came).
#[test]
fn a_move_s_cancel_reaches_a_new_queue_whose_inbox_frames_filled() {
    // Queue 0 believes bucket 0 is queue 2's: it refuses the export.
    let (mesh, mut w) = three_queues(&[2, 1, 0, 2]);
    let controller = move_bucket_0(&mesh, &Arc::new(RecordingNic::default()));
    spin_until("the announcement and the export", || {
        mesh.pending(0) == 1 && mesh.pending(1) == 1
    });
    let mut now = Duration::from_millis(1);
    pass(&mut w[1], now, &mut dropped);
    assert!(w[1].expecting(0), "the announcement taken");
    assert!(fill_inbox(&mut w[2], 1) > 1_000);
    let start = std::time::Instant::now();
    while !controller.is_finished() {
        assert!(start.elapsed() < Duration::from_secs(10), "the move hung");
        now += Duration::from_micros(10);
        pass(&mut w[0], now, &mut dropped);
        std::thread::yield_now();
    }
    let result = controller.join().unwrap();
    assert!(
        matches!(&result, Err(super::MoveError::Stayed(e)) if e.contains("served by queue 2")),
        "{result:?}"
    );
    // Queue 1 takes its inbox, well within its hold's timeout.
    while mesh.pending(1) > 0 {
        now += Duration::from_micros(10);
        pass(&mut w[1], now, &mut dropped);
        pass(&mut w[2], now, &mut dropped);
    }
    assert!(!w[1].expecting(0), "the cancel reached queue 1");
    assert_eq!(w[1].stats.hold_timeouts, 0);
}

/// A queue that took no part in a move learns where the bucket went even
/// when forwarded frames filled its inbox (before, the news was dropped
/// and the frames it forwarded of the bucket went along the old owners).
#[test]
fn the_news_of_a_move_reaches_a_queue_whose_inbox_frames_filled() {
    let (mesh, mut w) = three_queues(&[0, 1, 0, 2]);
    assert!(fill_inbox(&mut w[1], 3) > 1_000);
    let mut now = Duration::from_millis(1);
    let controller = move_bucket_0(&mesh, &Arc::new(RecordingNic::default()));
    let result = step_all(&mut w[..2], &mut now, controller);
    assert!(result.is_ok(), "{result:?}");
    while mesh.pending(2) > 0 {
        now += Duration::from_micros(10);
        for m in w.iter_mut() {
            pass(m, now, &mut dropped);
        }
    }
    assert_eq!(w[2].owner(0), 1, "queue 2 heard bucket 0 is on queue 1");
}

/// An old queue whose rewrite never comes (the controller gave up, or
/// could not tell it) stops waiting for it after its bound, counted: its
/// move no longer stays open for good, and it hears of the bucket's later
/// moves again (before, it skipped them as a queue taking part).
#[test]
fn an_old_queue_whose_rewrite_never_comes_stops_waiting_for_it() {
    let (mesh, mut w) = three_queues(&[0, 1, 0, 2]);
    let a = &mut w[0];
    let t = Duration::from_millis(1);
    a.take_work(t);
    let export = flowlane_tcp::Stack::new(flowlane_tcp::Config::new([1; 16])).export_bucket(0);
    a.exported(
        0,
        1,
        Box::new(super::Arrival {
            bucket: 0,
            export,
            apps: Vec::new(),
            neighbors: Vec::new(),
        }),
    );
    a.take_work(t + REWRITE_TIMEOUT - Duration::from_micros(1));
    assert!(a.draining_bucket(0), "within its bound, it waits");
    assert_eq!(a.stats.rewrite_timeouts, 0);
    // Later, the bucket moves on from queue 1 to queue 2.
    mesh.tell_owner(0, 0, 2);
    a.take_work(t + REWRITE_TIMEOUT);
    assert!(!a.draining_bucket(0), "it stopped waiting");
    assert_eq!(a.stats.rewrite_timeouts, 1, "counted");
    assert_eq!(a.owner(0), 2, "and heard of the later move");
}

/// Forwarded frames fill an inbox to the workers' share and no further:
/// the controller's messages still find their places behind them, in
/// order; only past its own room (a worker that stopped taking its
/// inbox) is one refused, in one line.
#[test]
fn the_controller_s_messages_have_room_the_workers_frames_cannot_fill() {
    let (mesh, mut w) = three_queues(&[0, 1, 0, 2]);
    assert_eq!(fill_inbox(&mut w[2], 2), super::INBOX);
    // Its room, and the places the other workers may each pass their
    // share by.
    let room = CONTROL_ROOM + 3;
    for k in 0..room {
        mesh.send(0, Message::Cancel { bucket: k as u16 }).unwrap();
    }
    let e = mesh.send(0, Message::Cancel { bucket: 0 }).unwrap_err();
    assert_eq!(
        e,
        "queue 0's inbox is full to the controller's own 256 places: its worker has stopped \
         taking its messages"
    );
    let e = mesh.send(3, Message::Cancel { bucket: 0 }).unwrap_err();
    assert_eq!(e, "queue 3 is not one of the service's 3 queues");
    // The worker takes the frames, then the controller's messages.
    let mut frames = 0;
    while mesh.pending(0) > room {
        pass(&mut w[0], Duration::ZERO, &mut |_, _, _| frames += 1);
    }
    assert_eq!(frames, super::INBOX);
    assert_eq!(mesh.pending(0), room);
}
