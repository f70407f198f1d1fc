//! Bucket moves between two queues' TCP endpoints, frames passed by hand:
//! a peer stack plays the remote host, a shared table plays the NIC, and
//! the controller runs on its own thread as in a service.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowlane_app::conn_state::export_entry;
use flowlane_app::{ConnHandle, ConnHandler, ConnMap, ConnState, Net, SetupExt};
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_numa_sched::RssState;
use flowlane_tcp::{Config, FourTuple, NoFrames, Stack};
use flowlane_wire::packet::parse_frame;

use super::frame_harness::FakeRing;
use super::{instant, TcpConfig, TcpHandler, EXPORT_PART};
use crate::bucket_counters::rss_bucket;
use crate::ephemeral::rss_state;
use crate::handoff::mesh_tests::{pass, RecordingNic};
use crate::handoff::{
    self, Arrival, ExportClaim, Mesh, Message, MoveError, Mover, Reply, RssTableWriter, Work,
    SETTLE, SETTLE_MAX,
};
use crate::worker::{NoRing, QueueHandler, QueueInfo, RingAhead};

const OURS: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);

fn info(queue: u32) -> QueueInfo {
    QueueInfo {
        queue,
        cpu: None,
        node: 0,
        zero_copy: false,
        rx_frames: 32768,
    }
}

/// Echoes, counting each connection's bytes in its own map: state that
/// must travel with the connection.
#[derive(Default)]
struct Counting {
    seen: HashMap<ConnHandle, u64>,
    totals: Arc<Mutex<Vec<u64>>>,
    imports: Arc<Mutex<u32>>,
}

impl ConnHandler for Counting {
    fn on_accept(&mut self, _net: &mut dyn Net, conn: ConnHandle) {
        self.seen.insert(conn, 0);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let (echoed, _) = super::frame_harness::echo(net, conn);
        *self.seen.get_mut(&conn).expect("known connection") += echoed;
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.on_data(net, conn);
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: flowlane_app::CloseReason) {
        if let Some(n) = self.seen.remove(&conn) {
            self.totals.lock().unwrap().push(n);
        }
    }
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        self.seen.remove(&conn).map(|n| Box::new(n) as ConnState)
    }
    fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        let n = state
            .and_then(|s| s.downcast::<u64>().ok())
            .map_or(0, |b| *b);
        self.seen.insert(conn, n);
        *self.imports.lock().unwrap() += 1;
    }
}

/// The test's NIC: its table is what the harness routes frames by. The
/// write waits for the harness twice (`phase`), so that frames reach the
/// old queue after the export (forwarded) and the new queue before the
/// old one's marker (held) in every run.
struct FakeNic {
    table: Arc<Mutex<Vec<u32>>>,
    phase: Arc<AtomicU32>,
    /// Refuse every write (a NIC whose table cannot be written).
    fails: bool,
}

impl FakeNic {
    fn wait_for(&self, phase: u32) {
        let start = std::time::Instant::now();
        while self.phase.load(Ordering::Acquire) < phase {
            assert!(start.elapsed() < Duration::from_secs(20), "harness stuck");
            std::thread::yield_now();
        }
    }
}

impl RssTableWriter for FakeNic {
    fn set_entry(&self, bucket: u16, queue: u32) -> Result<(), String> {
        if self.fails {
            return Err("the NIC refused".into());
        }
        self.phase.store(1, Ordering::Release);
        self.wait_for(2);
        self.table.lock().unwrap()[usize::from(bucket)] = queue;
        self.phase.store(3, Ordering::Release);
        self.wait_for(4);
        Ok(())
    }
}

fn frame(seg: &[u8]) -> Vec<u8> {
    super::tests::frame(seg, PEER, OURS)
}

/// `n` peer ports whose flows to our port 7 fall in one bucket (that of
/// port 40 000), and the bucket.
fn ports_in_one_bucket(rss: &RssState, n: usize) -> (u16, Vec<u16>) {
    let bucket_of = |port: u16| {
        rss_bucket(
            rss,
            &FourTuple {
                local: SocketAddr::new(IpAddr::V4(OURS), 7),
                remote: SocketAddr::new(IpAddr::V4(PEER), port),
            },
        )
    };
    let b = bucket_of(40_000);
    let ports = (40_000..50_000)
        .filter(|&p| bucket_of(p) == b)
        .take(n)
        .collect();
    (b, ports)
}

/// What goes wrong in a move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Nothing.
    Clean,
    /// After the move, one peer frame still reaches queue 0 (as from a NIC
    /// that applies a rewrite late).
    Stray,
    /// The NIC's entry cannot be written: the move is undone.
    NicFails,
    /// The old queue is loaded: it takes few frames off its ring per
    /// pass, among frames of other buckets, so that its ring holds a
    /// backlog when the rewrite comes (the drain looks ahead on it).
    Backlogged,
}

/// A frame of no connection of ours, in some other bucket than `b` (for
/// a backlog of other buckets' frames): the handler drops it.
fn other_bucket_frame(rss: &RssState, b: u16, n: u32) -> Vec<u8> {
    let ip = Ipv4Addr::from(u32::from(OURS) + 1 + n % 200);
    let port = (1024u16..)
        .find(|&p| {
            let local = SocketAddr::new(IpAddr::V4(ip), 7);
            let remote = SocketAddr::new(IpAddr::V4(PEER), p);
            rss_bucket(rss, &FourTuple { local, remote }) != b
        })
        .unwrap();
    super::tests::frame(&bare_ack(port, 7), PEER, ip)
}

/// A bare ACK's TCP header from port `from` to port `to` (checksum left
/// out: what reads it here reads its ports).
fn bare_ack(from: u16, to: u16) -> [u8; 20] {
    let mut seg = [0u8; 20];
    seg[..2].copy_from_slice(&from.to_be_bytes());
    seg[2..4].copy_from_slice(&to.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = 0x10;
    seg
}

/// `a` (queue 0) gave `bucket`, with no connection in it, to queue 1.
fn exported_empty(a: &mut Mover, bucket: u16) {
    let export = Stack::new(Config::new([1; 16])).export_bucket(bucket);
    a.exported(
        bucket,
        1,
        Box::new(Arrival {
            bucket,
            export,
            apps: Vec::new(),
            neighbors: Vec::new(),
        }),
    );
}

/// Two queues, a peer with `conns` connections in one bucket of queue 0,
/// and a move of that bucket to queue 1 in the middle of an echo
/// transfer.
fn move_under_load(conns: usize, case: Case) {
    let stray = case == Case::Stray;
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let nic_table = Arc::new(Mutex::new(table.clone()));
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let mut cfg = TcpConfig::new(OURS, [2, 0, 0, 0, 0, 1], [1; 16]);
    cfg.rss = Some(rss.clone());
    let totals = Arc::new(Mutex::new(Vec::new()));
    let imports = Arc::new(Mutex::new(0));
    let mut hs: Vec<TcpHandler> = (0..2)
        .map(|q| {
            let mut h = TcpHandler::with_mover(&info(q), cfg.clone(), mesh.clone());
            // The harness's clock runs ahead of the controller thread's.
            h.mover.as_mut().unwrap().hold_timeout = Duration::from_secs(3600);
            h.listen(
                7,
                Counting {
                    totals: totals.clone(),
                    imports: imports.clone(),
                    ..Counting::default()
                },
            )
            .unwrap();
            h
        })
        .collect();
    let (b, ports) = ports_in_one_bucket(&rss, conns);
    assert_eq!(table[usize::from(b)], 0);
    let mut peer = Stack::new(Config::new([9; 16]));
    let t0 = Duration::from_millis(1);
    let handles: Vec<_> = ports
        .iter()
        .map(|&p| {
            peer.connect(
                instant(t0),
                SocketAddr::new(IpAddr::V4(PEER), p),
                SocketAddr::new(IpAddr::V4(OURS), 7),
            )
            .unwrap()
        })
        .collect();
    let chunk = vec![0x5au8; 3000];
    let mut sent = vec![0u64; conns];
    let mut echoed = vec![0u64; conns];
    let mut controller: Option<std::thread::JoinHandle<_>> = None;
    let mut report = None;
    let mut now = t0;
    let mut seg = [0u8; 2048];
    let mut strayed = false;
    let phase = Arc::new(AtomicU32::new(0));
    let mut rings = [FakeRing::default(), FakeRing::default()];
    // Frames each queue takes off its ring per pass.
    let budget = |q: usize| match case {
        Case::Backlogged if q == 0 => 6,
        _ => usize::MAX,
    };
    for round in 0..20_000u32 {
        now += Duration::from_micros(200);
        // The peer's frames go where the NIC's table says.
        while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
            let f = frame(&seg[..t.len]);
            let mut q = nic_table.lock().unwrap()[usize::from(b)] as usize;
            if stray && !strayed && report.is_some() {
                strayed = true;
                q = 0;
            }
            rings[q].ring.push_back(f);
        }
        if case == Case::Backlogged {
            for n in 0..3 {
                rings[0]
                    .ring
                    .push_back(other_bucket_frame(&rss, b, round * 3 + n));
            }
        }
        for (q, (h, ring)) in hs.iter_mut().zip(&mut rings).enumerate() {
            for _ in 0..budget(q) {
                let Some(mut f) = ring.next() else { break };
                let len = f.len();
                h.on_rx(&info(q as u32), now, &mut f, len);
            }
            let now_i = instant(now);
            if h.stack.poll_timeout().is_some_and(|t| t <= now_i) {
                h.stack.handle_timeout(now_i);
                h.dispatch(now_i, &NoFrames);
            }
            h.serve_moves(now_i, now, ring, &NoFrames);
            h.dispatch(now_i, &NoFrames);
            let mut buf = vec![0u8; 2048];
            while let (true, out) = h.build_frame(now_i, &mut buf) {
                if let Some(n) = out {
                    let parsed = parse_frame(&buf[..n]).unwrap();
                    peer.handle_segment(now_i, IpAddr::V4(OURS), IpAddr::V4(PEER), parsed.l4());
                }
            }
        }
        while peer.poll_event().is_some() {}
        // Until the move (and the stray frame) happened, the peer keeps
        // sending.
        let moved = report.is_some() && (!stray || strayed);
        for (i, &c) in handles.iter().enumerate() {
            if sent[i] < 200_000 || !moved {
                if let Ok(n) = peer.send(c, &chunk) {
                    sent[i] += n as u64;
                }
            }
            let mut buf = [0u8; 8192];
            while let Ok(n) = peer.recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().all(|&x| x == 0x5a), "echo corrupted");
                echoed[i] += n as u64;
            }
        }
        // Start the move once every connection has echoed something.
        let held = hs[1].mover.as_ref().unwrap().stats.frames_held;
        let forwarded = hs[0].mover.as_ref().unwrap().stats.frames_forwarded;
        match phase.load(Ordering::Acquire) {
            1 if forwarded > 0 => phase.store(2, Ordering::Release),
            3 if held > 0 => phase.store(4, Ordering::Release),
            _ => {}
        }
        if controller.is_none() && report.is_none() && echoed.iter().all(|&e| e > 10_000) {
            let (mesh, nic) = (
                mesh.clone(),
                FakeNic {
                    table: nic_table.clone(),
                    phase: phase.clone(),
                    fails: case == Case::NicFails,
                },
            );
            controller = Some(std::thread::spawn(move || {
                handoff::move_bucket(&mesh, &nic, b, 0, 1)
            }));
        }
        if report.is_none() && controller.as_ref().is_some_and(|c| c.is_finished()) {
            report = Some(controller.take().unwrap().join().unwrap());
        }
        let all_echoed = (0..conns).all(|i| sent[i] >= 200_000 && echoed[i] == sent[i]);
        if all_echoed && moved {
            break;
        }
        if round % 100 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let report = report.expect("the move finished");
    if case == Case::NicFails {
        // Undone: the connections went to queue 1 and came back to queue
        // 0, where the NIC kept sending them, nothing lost on the way.
        let e = report.as_ref().expect_err("the NIC refused");
        assert!(
            matches!(e, MoveError::Stayed(m) if m.contains("stays on queue 0")),
            "{e:?}"
        );
        assert_eq!(nic_table.lock().unwrap()[usize::from(b)], 0);
        assert_eq!(hs[0].stack.connection_count(), conns, "back on queue 0");
        assert_eq!(hs[1].stack.connection_count(), 0);
        assert!(!hs[0].stack.bucket_is_away(b) && hs[1].stack.bucket_is_away(b));
        assert_eq!(hs[0].mover.as_ref().unwrap().owner(b), 0);
        assert_eq!(hs[1].mover.as_ref().unwrap().owner(b), 0);
        assert_eq!(*imports.lock().unwrap(), 2 * conns as u32);
    }
    let report = match report {
        Ok(r) => r,
        Err(_) if case == Case::NicFails => {
            for h in &hs {
                assert_eq!(h.counters().snapshot().resets_out, 0);
                assert_eq!(h.stack.stats().out_of_order, 0);
            }
            for i in 0..conns {
                assert_eq!(echoed[i], sent[i], "connection {i}: every byte echoed");
            }
            return;
        }
        Err(e) => panic!("the move failed: {e:?}"),
    };
    assert_eq!(report.connections, conns);
    assert_eq!((report.from, report.to, report.bucket), (0, 1, b));
    assert!(!report.hold_timed_out, "{report:?}");
    assert_eq!(*imports.lock().unwrap(), conns as u32);
    assert_eq!(hs[0].stack.connection_count(), 0, "nothing left behind");
    assert_eq!(hs[1].stack.connection_count(), conns);
    for i in 0..conns {
        assert_eq!(echoed[i], sent[i], "connection {i}: every byte echoed");
    }
    let c0 = hs[0].counters().snapshot();
    assert_eq!(c0.resets_out, 0, "no reset from the old queue");
    assert_eq!(hs[1].counters().snapshot().resets_out, 0);
    assert!(
        report.frames_forwarded > 0 && report.frames_held > 0,
        "{report:?}"
    );
    if !stray {
        // Forwarded, then held, then new: the new queue saw the bucket's
        // segments in the order the peer sent them. (A frame that reaches
        // the old queue after its marker is forwarded, but late.)
        assert_eq!(hs[1].stack.stats().out_of_order, 0, "{report:?}");
        assert_eq!(
            hs[1].counters().snapshot().no_neighbor,
            0,
            "the peer came with its connections"
        );
    }
    if stray {
        assert!(strayed);
        assert!(hs[0].mover.as_ref().unwrap().stats.frames_forwarded >= 1);
    }
    if case == Case::Backlogged {
        // The old queue looked ahead on its ring, and sent nothing late.
        assert!(report.frames_scanned > 0, "{report:?}");
        assert_eq!(hs[0].mover.as_ref().unwrap().stats.frames_forwarded_late, 0);
    }
    // The per-connection state moved: closing reports every byte.
    for &c in &handles {
        peer.close(c).unwrap();
    }
    for _ in 0..400 {
        now += Duration::from_millis(5);
        while let Some(t) = peer.poll_transmit(instant(now), &mut seg) {
            let f = frame(&seg[..t.len]);
            let q = nic_table.lock().unwrap()[usize::from(b)] as usize;
            rings[q].ring.push_back(f);
        }
        for (q, (h, ring)) in hs.iter_mut().zip(&mut rings).enumerate() {
            while let Some(mut f) = ring.next() {
                let len = f.len();
                h.on_rx(&info(q as u32), now, &mut f, len);
            }
            let now_i = instant(now);
            h.stack.handle_timeout(now_i);
            h.dispatch(now_i, &NoFrames);
            h.serve_moves(now_i, now, ring, &NoFrames);
            let mut buf = vec![0u8; 2048];
            while let (true, out) = h.build_frame(now_i, &mut buf) {
                if let Some(n) = out {
                    let parsed = parse_frame(&buf[..n]).unwrap();
                    peer.handle_segment(now_i, IpAddr::V4(OURS), IpAddr::V4(PEER), parsed.l4());
                }
            }
        }
    }
    let mut t = totals.lock().unwrap().clone();
    t.sort_unstable();
    let mut want = sent.clone();
    want.sort_unstable();
    assert_eq!(t, want, "bytes seen per connection, across the move");
}

#[test]
fn a_bucket_moves_with_its_connections_and_their_state() {
    move_under_load(5, Case::Clean);
}

#[test]
fn a_frame_that_reaches_the_old_queue_after_the_move_is_forwarded() {
    move_under_load(3, Case::Stray);
}

#[test]
fn a_move_whose_nic_write_fails_is_undone() {
    move_under_load(4, Case::NicFails);
}

#[test]
fn a_bucket_moves_off_a_queue_with_a_backlog_in_order() {
    move_under_load(3, Case::Backlogged);
}

/// A frame of the bucket that an earlier look ahead (for another bucket)
/// left waiting on the old queue is forwarded by the drain's first look,
/// ahead of the marker: the bed's rebalancing storms saw reordering when
/// the drain looked at the ring's new frames only.
#[test]
fn a_drain_forwards_the_bucket_s_frames_an_earlier_look_left_waiting() {
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let mut cfg = TcpConfig::new(OURS, [2, 0, 0, 0, 0, 1], [1; 16]);
    cfg.rss = Some(rss.clone());
    let mut hs: Vec<TcpHandler> = (0..2)
        .map(|q| TcpHandler::with_mover(&info(q), cfg.clone(), mesh.clone()))
        .collect();
    let (b, ports) = ports_in_one_bucket(&rss, 1);
    let mine = frame(&bare_ack(ports[0], 7));
    let now = Duration::from_millis(1);
    let step = |hs: &mut [TcpHandler], q: usize, now: Duration, ring: &mut dyn RingAhead| {
        hs[q].serve_moves(instant(now), now, ring, &NoFrames);
    };
    let (tx, replies) = crossbeam_channel::unbounded();
    mesh.send(
        1,
        Message::Prepare {
            bucket: b,
            reply: tx.clone(),
        },
    )
    .unwrap();
    mesh.send(
        0,
        Message::Export {
            bucket: b,
            to: 1,
            reply: tx.clone(),
            claim: ExportClaim::default(),
        },
    )
    .unwrap();
    let mut ring = FakeRing::default();
    step(&mut hs, 1, now, &mut NoRing);
    step(&mut hs, 0, now, &mut ring);
    // An earlier look (for another bucket) left this frame of b waiting,
    // behind another bucket's.
    ring.waiting.push_back(other_bucket_frame(&rss, b, 0));
    ring.waiting.push_back(mine);
    mesh.send(
        0,
        Message::Rewritten {
            bucket: b,
            reply: tx,
            written: true,
        },
    )
    .unwrap();
    step(&mut hs, 0, now, &mut ring);
    assert_eq!(ring.waiting.len(), 1, "b's frame taken, the other left");
    assert_eq!(ring.consumed, 1);
    let stats = |h: &TcpHandler| h.mover.as_ref().unwrap().stats;
    assert_eq!(stats(&hs[0]).frames_forwarded, 1);
    // The marker after the quiet wait; queue 1 takes the frame first.
    step(&mut hs, 0, now + SETTLE, &mut ring);
    step(&mut hs, 1, now + SETTLE, &mut NoRing);
    assert_eq!(stats(&hs[1]).frames_forwarded_in, 1);
    let answers: Vec<Reply> = replies.try_iter().collect();
    assert!(
        answers.iter().any(|r| matches!(
            r,
            Reply::Done {
                forwarded: 1,
                scanned: 2,
                timed_out: false,
                ..
            }
        )),
        "{answers:?}"
    );
}

/// Queue 0 gave `bucket` to queue 1, has forwarded one frame of it at
/// `t` and has been told of the rewrite (`written`: the NIC's write
/// succeeded), when its RX ring would be passed at 10 frames. Returns both
/// movers and where queue 1 answers the end of the move.
fn rewritten_after_a_forward(
    bucket: u16,
    t: Duration,
    written: bool,
) -> (Mover, Mover, crossbeam_channel::Receiver<Reply>) {
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let (mut a, b) = (
        Mover::new(0, mesh.clone(), rss.clone()),
        Mover::new(1, mesh.clone(), rss),
    );
    exported_empty(&mut a, bucket);
    a.forward(t, bucket, 0, &[0u8; 60]);
    let (reply, done) = crossbeam_channel::unbounded();
    mesh.send(
        0,
        Message::Rewritten {
            bucket,
            reply,
            written,
        },
    )
    .unwrap();
    take_rewrite(&mut a, t, 10);
    (a, b, done)
}

/// Queue `a` takes its inbox, which holds a rewrite: its ring would be
/// passed at `rx_end` frames.
fn take_rewrite(a: &mut Mover, t: Duration, rx_end: u64) {
    let mut rewrites = 0;
    for w in a.take_work(t) {
        if let Work::Rewritten {
            bucket,
            reply,
            written,
        } = w
        {
            rewrites += 1;
            a.rewritten(bucket, reply, written, rx_end);
        }
    }
    assert_eq!(
        rewrites, 1,
        "the rewrite is work: the ring is read after the work before it"
    );
}

/// Queue 0's pass at `now` with `consumed` frames taken off its ring, then
/// queue 1's: whether the move ended.
fn marker_sent(
    (a, b, done): &mut (Mover, Mover, crossbeam_channel::Receiver<Reply>),
    now: Duration,
    consumed: u64,
) -> bool {
    a.send_markers(now, consumed);
    a.flush();
    b.take_work(now);
    b.flush();
    match done.try_recv() {
        Ok(Reply::Done { .. }) => true,
        Ok(other) => panic!("{other:?}"),
        Err(_) => false,
    }
}

/// The old queue's drain marker waits until it has taken off its RX ring
/// every frame the ring held when the rewrite was taken off its inbox (the
/// ring is read then, not earlier in the pass) and, for a bucket it
/// forwarded frames of, until none came for [`SETTLE`].
#[test]
fn the_drain_marker_waits_for_the_ring_read_at_the_rewrite_and_a_quiet_bucket() {
    let t = Duration::from_millis(5);
    let mut m = rewritten_after_a_forward(0, t, true);
    // Ring not passed; then passed, but a frame was forwarded too recently.
    assert!(!marker_sent(&mut m, t + SETTLE, 9));
    assert!(!marker_sent(&mut m, t + SETTLE / 2, 10));
    assert!(marker_sent(&mut m, t + SETTLE, 10));
    // A frame after the marker is late, by how long after it came.
    m.0.forward(t + SETTLE + Duration::from_micros(1_500), 0, 0, &[0u8; 60]);
    assert_eq!(m.0.stats.frames_forwarded_late, 1);
    assert_eq!(m.0.stats.late_max_us, 1_500);
}

/// Frames of the bucket that keep reaching the old queue (a NIC that did
/// not apply the rewrite) hold the marker back for [`SETTLE_MAX`] at most.
#[test]
fn a_bucket_that_never_goes_quiet_is_drained_after_the_longest_wait() {
    let t = Duration::from_millis(5);
    let mut m = rewritten_after_a_forward(0, t, true);
    assert!(!marker_sent(&mut m, t, 10));
    let mut now = t;
    while now < t + SETTLE_MAX {
        m.0.forward(now, 0, 0, &[0u8; 60]);
        assert!(!marker_sent(&mut m, now, 10));
        now += SETTLE / 4;
    }
    m.0.forward(now, 0, 0, &[0u8; 60]);
    assert!(marker_sent(&mut m, now, 10));
}

/// From the rewrite on, the old queue looks at the frames its RX ring
/// holds ahead of handing them on: the drained bucket's are forwarded at
/// once, in ring order and ahead of the marker; the others (and what has
/// no TCP endpoints) are left to the pass. A bucket that had no frame on
/// the ring drains as soon as the scan covered it. (On the bed, the
/// rebalancing storms of `tests/tests/rebalance.rs` run it against real
/// rings: without the first look at the frames left waiting, their
/// senders saw reordering.)
#[test]
fn the_old_queue_forwards_the_bucket_s_frames_off_its_ring_ahead_of_the_pass() {
    let t = Duration::from_millis(5);
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let of = |port: u16| {
        let remote = SocketAddr::new(PEER.into(), port);
        let local = SocketAddr::new(OURS.into(), 80);
        rss_bucket(&rss, &FourTuple { local, remote })
    };
    let segment_from = |port: u16| frame(&bare_ack(port, 80));
    for forwards in [false, true] {
        let mesh = Arc::new(Mesh::new(2).unwrap());
        let (mut a, mut b) = (
            Mover::new(0, mesh.clone(), rss.clone()),
            Mover::new(1, mesh.clone(), rss.clone()),
        );
        let bucket = 0u16;
        let mine = segment_from((1024..).find(|&p| of(p) == bucket).unwrap());
        let other = segment_from((1024..).find(|&p| of(p) != bucket).unwrap());
        exported_empty(&mut a, bucket);
        assert!(!a.draining());
        assert!(
            !a.take_ahead(t, &mine),
            "before the rewrite, the pass forwards"
        );
        let (reply, done) = crossbeam_channel::unbounded();
        mesh.send(
            0,
            Message::Rewritten {
                bucket,
                reply,
                written: true,
            },
        )
        .unwrap();
        take_rewrite(&mut a, t, 3);
        assert!(a.draining());
        // A new drain: the first look includes what earlier looks (for
        // other buckets) left waiting.
        assert!(a.take_new_drain());
        assert!(!a.take_new_drain());
        // The ring: another bucket's frame, a runt, and the bucket's own
        // frame if it has one.
        assert!(!a.take_ahead(t, &other));
        assert!(!a.take_ahead(t, &mine[..30]));
        if forwards {
            assert!(a.take_ahead(t, &mine));
        }
        a.send_markers(t, 3);
        a.flush();
        let drained = |b: &mut Mover, now| {
            let work = b.take_work(now);
            b.flush();
            (work, done.try_recv().ok())
        };
        let (work, end) = drained(&mut b, t);
        if forwards {
            // Forwarded at once; the marker waits for the bucket to be quiet.
            assert!(end.is_none());
            assert!(
                matches!(&work[..], [Work::Import(_), Work::Frames(f)]
                    if f.len() == 1 && f[0].len() == 1 && f[0].get(0) == Some((1, &mine[..]))),
                "the connections, then the bucket's frame forwarded off the ring"
            );
            a.send_markers(t + SETTLE, 3);
            a.flush();
        }
        let (_, end) = if forwards {
            drained(&mut b, t + SETTLE)
        } else {
            (work, end)
        };
        match end {
            Some(Reply::Done {
                forwarded, scanned, ..
            }) => {
                assert_eq!(forwarded, u64::from(forwards));
                assert_eq!(scanned, 2 + u64::from(forwards));
            }
            other => panic!("no end of the move: {other:?}"),
        }
        assert!(!a.draining());
    }
}

/// The NIC's entry is written as soon as the new queue holds the
/// bucket's frames, while the old queue exports: an export refused after
/// that (here the old queue's view of the table says the bucket is another
/// queue's) points the entry back, and the new queue stops holding.
#[test]
fn an_export_refused_after_the_nic_write_points_the_entry_back() {
    /// A NIC that records its writes.
    #[derive(Default)]
    struct Recording(Mutex<Vec<(u16, u32)>>);
    impl RssTableWriter for Recording {
        fn set_entry(&self, bucket: u16, queue: u32) -> Result<(), String> {
            self.0.lock().unwrap().push((bucket, queue));
            Ok(())
        }
    }
    let table = vec![0u32, 1, 2, 0];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 3).unwrap();
    let mesh = Arc::new(Mesh::new(3).unwrap());
    let (mut a, mut c) = (
        Mover::new(0, mesh.clone(), rss.clone()),
        Mover::new(2, mesh.clone(), rss),
    );
    let nic = Arc::new(Recording::default());
    // The controller believes bucket 1 is queue 0's.
    let controller = {
        let nic = nic.clone();
        std::thread::spawn(move || handoff::move_bucket(&mesh, nic.as_ref(), 1, 0, 2))
    };
    let mut now = Duration::from_millis(1);
    while !controller.is_finished() {
        now += Duration::from_micros(10);
        for m in [&mut a, &mut c] {
            for w in m.take_work(now) {
                if let Work::Rewritten {
                    bucket,
                    reply,
                    written,
                } = w
                {
                    m.rewritten(bucket, reply, written, 0);
                }
            }
            m.flush();
        }
        std::thread::yield_now();
    }
    let result = controller.join().unwrap();
    assert!(
        matches!(&result, Err(MoveError::Stayed(e)) if e.contains("served by queue 1")),
        "{result:?}"
    );
    assert_eq!(
        *nic.0.lock().unwrap(),
        vec![(1, 2), (1, 0)],
        "written, then back"
    );
    // The cancel reached the new queue, which no longer holds the bucket.
    c.take_work(now);
    assert!(!c.holding());
}

/// Tags each connection's state with its peer port; in an export, aborts
/// the connection the test names (a handler that still uses its
/// connections in `on_export`, which the API allows) and opens the
/// connections it asks for; on import, records which port's state each
/// connection arrived with, and the tags of those that could not be
/// imported; records the tags of the connections it heard close.
#[derive(Default, Clone)]
struct Tagging {
    tags: ConnMap<u16>,
    /// The connection to abort, in the `on_export` after this many others.
    victim: Arc<Mutex<Option<(usize, ConnHandle)>>>,
    arrived: Arc<Mutex<Vec<(u16, u16)>>>,
    refused: Arc<Mutex<Vec<u16>>>,
    closed: Arc<Mutex<Vec<u16>>>,
    /// Connections to open to the peer in the first `on_export`, and those
    /// opened.
    to_open: Arc<Mutex<usize>>,
    opened: Arc<Mutex<Vec<ConnHandle>>>,
}

impl ConnHandler for Tagging {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let port = net.four_tuple(conn).unwrap().remote.port();
        self.tags.insert(conn, port);
    }
    fn on_data(&mut self, _net: &mut dyn Net, _conn: ConnHandle) {}
    fn on_export(&mut self, net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        let victim = {
            let mut v = self.victim.lock().unwrap();
            match v.as_mut() {
                Some((0, c)) => {
                    let c = *c;
                    *v = None;
                    Some(c)
                }
                Some((n, _)) => {
                    *n -= 1;
                    None
                }
                None => None,
            }
        };
        if let Some(c) = victim {
            let _ = net.abort(c);
        }
        let n = std::mem::take(&mut *self.to_open.lock().unwrap());
        for _ in 0..n {
            let c = net.connect(SocketAddr::new(IpAddr::V4(PEER), 9)).unwrap();
            self.opened.lock().unwrap().push(c);
        }
        export_entry(&mut self.tags, conn)
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: flowlane_app::CloseReason) {
        if let Some(tag) = self.tags.remove(conn) {
            self.closed.lock().unwrap().push(tag);
        }
    }
    fn on_import(&mut self, net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        let port = net.four_tuple(conn).unwrap().remote.port();
        let tag = state
            .and_then(|s| s.downcast::<u16>().ok())
            .map_or(0, |t| *t);
        self.arrived.lock().unwrap().push((port, tag));
    }
    fn on_import_failed(&mut self, _net: &mut dyn Net, state: Option<ConnState>) {
        let tag = state
            .and_then(|s| s.downcast::<u16>().ok())
            .map_or(0, |t| *t);
        self.refused.lock().unwrap().push(tag);
    }
}

/// Handlers for queues 0 and 1 (each with a clone of `tagging`), and
/// `conns` connections from the peer accepted in one bucket of queue 0;
/// returns the handlers, the bucket, the peer ports and the queues' mesh.
fn tagged_bucket(conns: usize, tagging: &Tagging) -> (Vec<TcpHandler>, u16, Vec<u16>, Arc<Mesh>) {
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let mut cfg = TcpConfig::new(OURS, [2, 0, 0, 0, 0, 1], [1; 16]);
    cfg.rss = Some(rss.clone());
    let mut hs: Vec<TcpHandler> = (0..2)
        .map(|q| {
            let mut h = TcpHandler::with_mover(&info(q), cfg.clone(), mesh.clone());
            h.listen(7, tagging.clone()).unwrap();
            h
        })
        .collect();
    let (b, ports) = ports_in_one_bucket(&rss, conns);
    let mut peer = Stack::new(Config::new([9; 16]));
    let t0 = Duration::from_millis(1);
    for &p in &ports {
        peer.connect(
            instant(t0),
            SocketAddr::new(IpAddr::V4(PEER), p),
            SocketAddr::new(IpAddr::V4(OURS), 7),
        )
        .unwrap();
    }
    // The handshakes, all on queue 0.
    let mut seg = [0u8; 2048];
    for round in 0..20u64 {
        let now = t0 + Duration::from_micros(200 * round);
        let now_i = instant(now);
        while let Some(t) = peer.poll_transmit(now_i, &mut seg) {
            let mut f = frame(&seg[..t.len]);
            let len = f.len();
            hs[0].on_rx(&info(0), now, &mut f, len);
        }
        hs[0].dispatch(now_i, &NoFrames);
        let mut buf = vec![0u8; 2048];
        while let (true, out) = hs[0].build_frame(now_i, &mut buf) {
            if let Some(n) = out {
                let parsed = parse_frame(&buf[..n]).unwrap();
                peer.handle_segment(now_i, IpAddr::V4(OURS), IpAddr::V4(PEER), parsed.l4());
            }
        }
    }
    assert_eq!(hs[0].stack.bucket_connections(b).len(), conns);
    (hs, b, ports, mesh)
}

/// Exports bucket `b` of `from` (all its parts); imports them into `to`;
/// returns the parts' sizes and how many connections `to` refused.
fn carry(from: &mut TcpHandler, to: &mut TcpHandler, b: u16) -> (Vec<usize>, usize) {
    let now_i = instant(Duration::from_millis(11));
    let mut parts = Vec::new();
    let (last, _) = from.export_bucket(now_i, b, &NoFrames, &mut |p| parts.push(p));
    assert!(last.export.complete());
    parts.push(last);
    let sizes = parts.iter().map(|p| p.export.connections().len()).collect();
    let refused = parts
        .into_iter()
        .map(|p| to.import_bucket(now_i, *p, &NoFrames))
        .sum();
    (sizes, refused)
}

/// `conns` connections in one bucket of queue 0, exported (the handler
/// closing the `victim`-th listed one during the export, if any) and
/// imported on queue 1 part by part, in order. Returns the parts' sizes
/// and, per connection imported, (its peer port, the tag its state had).
fn move_tagged(conns: usize, victim: Option<usize>) -> (Vec<usize>, Vec<(u16, u16)>) {
    let tagging = Tagging::default();
    let (mut hs, b, _, _) = tagged_bucket(conns, &tagging);
    let listed = hs[0].stack.bucket_connections(b);
    *tagging.victim.lock().unwrap() = victim.map(|v| (0, listed[v]));
    let (from, to) = hs.split_at_mut(1);
    let (sizes, refused) = carry(&mut from[0], &mut to[0], b);
    assert_eq!(refused, 0);
    let got = tagging.arrived.lock().unwrap().clone();
    (sizes, got)
}

/// Connections the new queue's stack cannot take (it holds connections
/// of the same addresses: here the same peer's, moved there before from
/// another service's queue 0) are gone, and their application state goes
/// to the handler's `on_import_failed` rather than nowhere.
#[test]
fn connections_the_new_queue_refuses_are_told_to_their_handler() {
    let tagging = Tagging::default();
    let (mut hs, b, ports, _) = tagged_bucket(3, &tagging);
    let (from, to) = hs.split_at_mut(1);
    assert_eq!(carry(&mut from[0], &mut to[0], b).1, 0);
    let again = Tagging::default();
    let (mut other, b2, _, _) = tagged_bucket(3, &again);
    assert_eq!(b2, b);
    assert_eq!(carry(&mut other[0], &mut hs[1], b).1, 3);
    // Told on the new queue, to its handler in the owner's place.
    let mut refused = tagging.refused.lock().unwrap().clone();
    refused.sort_unstable();
    let mut want = ports;
    want.sort_unstable();
    assert_eq!(refused, want, "each refused connection's own state");
    assert!(again.refused.lock().unwrap().is_empty());
}

/// A move whose new queue cannot take the bucket's connections says so in
/// its report: `connections_refused` (before, the report counted the
/// connections exported alone, and such a move read as whole). The last
/// part and the drain marker reach the new queue in one pass here, the
/// answer waiting for the pass's imports.
#[test]
fn a_move_reports_the_connections_the_new_queue_refused() {
    let tagging = Tagging::default();
    let (mut hs, b, _, mesh) = tagged_bucket(3, &tagging);
    // Queue 1 holds the same tuples already (another service's queue 0
    // moved them there).
    let again = Tagging::default();
    let (mut other, b2, _, _) = tagged_bucket(3, &again);
    assert_eq!(b2, b);
    assert_eq!(carry(&mut other[0], &mut hs[1], b).1, 0);
    let nic = Arc::new(RecordingNic::default());
    let controller = std::thread::spawn(move || handoff::move_bucket(&mesh, nic.as_ref(), b, 0, 1));
    let mut now = Duration::from_millis(20);
    fn mover(h: &TcpHandler) -> &Mover {
        h.mover.as_ref().unwrap()
    }
    // Queue 1 takes the announcement first; then it looks at its inbox
    // only when queue 0 is not between its export and its marker: the
    // last part and the marker in one pass.
    while !controller.is_finished() {
        if mover(&hs[1]).expecting(b) {
            hs[0].serve_moves(instant(now), now, &mut NoRing, &NoFrames);
        }
        let exported = mover(&hs[0]).stats.buckets_out == 1;
        if !exported || !mover(&hs[0]).draining_bucket(b) {
            hs[1].serve_moves(instant(now), now, &mut NoRing, &NoFrames);
        }
        now += Duration::from_micros(100);
        std::thread::sleep(Duration::from_micros(100));
    }
    let report = controller.join().unwrap().expect("moved");
    assert_eq!(
        (report.connections, report.connections_refused),
        (3, 3),
        "{report:?}"
    );
    assert_eq!(hs[1].mover.as_ref().unwrap().stats.import_failed, 3);
    assert_eq!(hs[1].stack.connection_count(), 3, "the tuples it held");
}

#[test]
fn application_state_stays_with_its_connection_when_a_handler_closes_one_during_the_export() {
    // The export's first application call closes the second connection
    // listed: the stack then exports the first and the third.
    let (sizes, mut got) = move_tagged(3, Some(1));
    assert_eq!(sizes, [2]);
    got.sort_unstable();
    assert_eq!(got.len(), 2, "{got:?}");
    for (port, tag) in got {
        assert_eq!(port, tag, "each connection arrived with its own state");
    }
}

/// A bucket larger than a part leaves in parts, each imported with its
/// connections' application state.
#[test]
fn a_large_bucket_moves_in_parts_with_each_connections_state() {
    let n = 2 * EXPORT_PART + 6;
    let (sizes, got) = move_tagged(n, None);
    assert_eq!(sizes, [EXPORT_PART, EXPORT_PART, 6]);
    assert_eq!(got.len(), n);
    for (port, tag) in got {
        assert_eq!(port, tag, "each connection arrived with its own state");
    }
}

/// Two queues' movers over a 4-entry table, and a controller thread
/// moving bucket 0 from queue 0 to queue 1 through a NIC that records its
/// writes.
fn moving_bucket_0() -> (
    Mover,
    Mover,
    Arc<RecordingNic>,
    std::thread::JoinHandle<Result<handoff::MoveReport, MoveError>>,
) {
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let (a, b) = (
        Mover::new(0, mesh.clone(), rss.clone()),
        Mover::new(1, mesh.clone(), rss),
    );
    let nic = Arc::new(RecordingNic::default());
    let controller = {
        let nic = nic.clone();
        std::thread::spawn(move || handoff::move_bucket(&mesh, nic.as_ref(), 0, 0, 1))
    };
    (a, b, nic, controller)
}

/// The old queue takes its inbox only after the controller gave up
/// waiting for the export (a worker stalled for the step's timeout): the
/// controller points the NIC's entry back and reports the bucket stayed,
/// and the `Export` still in the old queue's inbox is refused, not carried
/// out behind its back (the bucket would end up served by the new queue
/// while the NIC's entry and the service's table name the old one).
#[test]
fn an_export_the_controller_gave_up_on_is_not_carried_out() {
    let (mut a, mut b, nic, controller) = moving_bucket_0();
    // Queue 1 answers; queue 0 is stalled until the controller gives up.
    let mut now = Duration::from_millis(1);
    while !controller.is_finished() {
        now += Duration::from_micros(10);
        let _ = b.take_work(now);
        b.flush();
        std::thread::yield_now();
    }
    let result = controller.join().unwrap();
    assert!(matches!(&result, Err(MoveError::Stayed(_))), "{result:?}");
    assert_eq!(
        *nic.0.lock().unwrap(),
        vec![(0, 1), (0, 0)],
        "written, then back"
    );
    // Queue 0 comes back and takes its inbox: the export, then the rewrite.
    now += Duration::from_millis(5);
    for w in a.take_work(now) {
        match w {
            Work::Export { .. } => panic!("an export called off was carried out"),
            Work::Rewritten {
                bucket,
                reply,
                written,
            } => a.rewritten(bucket, reply, written, 0),
            _ => {}
        }
    }
    a.flush();
    for _ in 0..3 {
        now += Duration::from_millis(5);
        let _ = b.take_work(now);
        b.flush();
    }
    assert_eq!(
        (a.owner(0), b.owner(0)),
        (0, 0),
        "bucket 0 stayed on queue 0"
    );
}

/// The old queue took the export before the controller's wait ran out but
/// answers after it: the export is under way, so the controller waits on
/// for its answer and the move completes.
#[test]
fn an_export_taken_before_the_wait_ran_out_is_waited_for() {
    let (mut a, mut b, nic, controller) = moving_bucket_0();
    let mut now = Duration::from_millis(1);
    let mut export = None;
    let mut rewritten = None;
    // Queue 0 takes the export at once, then stalls past the step's
    // timeout before it exports.
    while export.is_none() {
        now += Duration::from_micros(10);
        let _ = b.take_work(now);
        b.flush();
        for w in a.take_work(now) {
            match w {
                Work::Export { bucket, to, reply } => export = Some((bucket, to, reply)),
                Work::Rewritten {
                    bucket,
                    reply,
                    written,
                } => rewritten = Some((bucket, reply, written)),
                _ => {}
            }
        }
        std::thread::yield_now();
    }
    let stalled = std::time::Instant::now();
    while stalled.elapsed() < Duration::from_millis(2_500) {
        now += Duration::from_micros(10);
        let _ = b.take_work(now);
        b.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    let (bucket, to, reply) = export.unwrap();
    let _ = reply.send(Reply::Exported {
        connections: 0,
        time_wait: 0,
    });
    let part = Stack::new(Config::new([1; 16])).export_bucket(bucket);
    a.exported(
        bucket,
        to,
        Box::new(Arrival {
            bucket,
            export: part,
            apps: Vec::new(),
            neighbors: Vec::new(),
        }),
    );
    // Then the rest of the move, both queues stepping.
    while !controller.is_finished() {
        now += Duration::from_millis(1);
        for w in a.take_work(now) {
            if let Work::Rewritten {
                bucket,
                reply,
                written,
            } = w
            {
                rewritten = Some((bucket, reply, written));
            }
        }
        if let Some((bucket, reply, written)) = rewritten.take() {
            a.rewritten(bucket, reply, written, 0);
        }
        a.send_markers(now, 0);
        a.flush();
        for w in b.take_work(now) {
            if let Work::Import(arrival) = w {
                b.imported(arrival.bucket, 0, arrival.export.complete());
            }
        }
        b.flush();
        std::thread::sleep(Duration::from_micros(200));
    }
    let result = controller.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(*nic.0.lock().unwrap(), vec![(0, 1)], "written once");
    assert_eq!((a.owner(0), b.owner(0)), (1, 1), "bucket 0 on queue 1");
}

/// Frames a pass hands on: none are expected.
fn no_frames(_: &mut Mover, _: u8, _: &[u8]) {
    panic!("no frame was sent");
}

/// A NIC whose table cannot be written.
struct RefusingNic;

impl RssTableWriter for RefusingNic {
    fn set_entry(&self, _bucket: u16, _queue: u32) -> Result<(), String> {
        Err("the NIC refused".into())
    }
}

/// The NIC's write fails, so the move is undone; the way back takes the
/// bucket to the old queue but its last answer never comes (the old queue
/// stalls once the new one's export of the way back was answered): the
/// way back's "moved" is the move's "stayed", and the service, which
/// follows the error, keeps naming the old queue, which serves the bucket.
#[test]
fn a_way_back_whose_last_answer_is_missing_leaves_the_bucket_on_the_old_queue() {
    let table = vec![0u32, 1, 0, 1];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 2).unwrap();
    let mesh = Arc::new(Mesh::new(2).unwrap());
    let (mut a, mut b) = (
        Mover::new(0, mesh.clone(), rss.clone()),
        Mover::new(1, mesh.clone(), rss),
    );
    let controller = std::thread::spawn(move || handoff::move_bucket(&mesh, &RefusingNic, 0, 0, 1));
    let mut now = Duration::from_millis(1);
    let (mut stalled, mut back) = (false, 0);
    while !controller.is_finished() {
        now += Duration::from_micros(10);
        if !stalled {
            pass(&mut a, now, &mut no_frames);
        }
        back += pass(&mut b, now, &mut no_frames);
        // Queue 1 exported the bucket back and queue 0 took the way back's
        // announcement: queue 0 stalls.
        stalled |= back > 0 && a.expecting(0);
        std::thread::sleep(Duration::from_micros(50));
    }
    let result = controller.join().unwrap();
    assert!(
        matches!(&result, Err(MoveError::Stayed(e)) if e.contains("stays on queue 0")),
        "{result:?}"
    );
    for _ in 0..3 {
        now += Duration::from_millis(1);
        pass(&mut a, now, &mut no_frames);
        pass(&mut b, now, &mut no_frames);
    }
    assert_eq!((a.owner(0), b.owner(0)), (0, 0), "bucket 0 on queue 0");
    assert_eq!(a.stats.buckets_in, 1);
}

/// The new queue answers its announcement only after the controller gave
/// up waiting for it, while the old queue exported: the controller takes
/// the bucket back and tells the new queue that the move is off, so that
/// its hold ends on that cancel rather than on its timeout (which would
/// count it among the holds whose marker never came).
#[test]
fn a_hold_announced_too_late_ends_on_a_cancel() {
    let (mut a, mut b, nic, controller) = moving_bucket_0();
    let started = std::time::Instant::now();
    let mut now = Duration::from_millis(1);
    while !controller.is_finished() {
        now += Duration::from_micros(10);
        pass(&mut a, now, &mut no_frames);
        if started.elapsed() > Duration::from_millis(2_200) {
            pass(&mut b, now, &mut no_frames);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let result = controller.join().unwrap();
    assert!(matches!(&result, Err(MoveError::Stayed(_))), "{result:?}");
    assert!(nic.0.lock().unwrap().is_empty(), "the entry never written");
    for _ in 0..3 {
        now += Duration::from_secs(5);
        pass(&mut a, now, &mut no_frames);
        pass(&mut b, now, &mut no_frames);
    }
    assert!(!b.holding());
    assert_eq!((a.stats.hold_timeouts, b.stats.hold_timeouts), (0, 0));
    assert_eq!((a.owner(0), b.owner(0)), (0, 0), "bucket 0 on queue 0");
}

/// After a move, the workers that took no part in it learn where the
/// bucket went: a frame one of them forwards (an ICMP error the NIC hashed
/// to it) goes there at once, however many moves the bucket made (along
/// its earlier owners, four forwards at most, it was dropped).
#[test]
fn a_frame_reaches_a_bucket_that_moved_more_often_than_a_frame_may_be_forwarded() {
    let table = vec![1u32, 0, 2, 3, 4, 5, 0, 0];
    let rss = rss_state(RssKey::microsoft_default().as_bytes(), &table, 6).unwrap();
    let mesh = Arc::new(Mesh::new(6).unwrap());
    let mut movers: Vec<Mover> = (0..6)
        .map(|q| Mover::new(q, mesh.clone(), rss.clone()))
        .collect();
    let nic = Arc::new(RecordingNic::default());
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let mut now = Duration::from_millis(1);
    let mut frames = |m: &mut Mover, hops: u8, f: &[u8]| {
        if m.owner(0) == m.me() {
            delivered.lock().unwrap().push((m.me(), f.to_vec()));
        } else {
            m.forward_icmp(Duration::ZERO, 0, hops, f);
        }
    };
    for (from, to) in [(1, 2), (2, 3), (3, 4), (4, 5)] {
        let controller = {
            let (mesh, nic) = (mesh.clone(), nic.clone());
            std::thread::spawn(move || handoff::move_bucket(&mesh, nic.as_ref(), 0, from, to))
        };
        while !controller.is_finished() {
            now += Duration::from_micros(10);
            for m in movers.iter_mut() {
                pass(m, now, &mut frames);
            }
            std::thread::yield_now();
        }
        assert!(controller.join().unwrap().is_ok());
        for m in movers.iter_mut() {
            pass(m, now, &mut frames);
        }
    }
    movers[0].forward_icmp(now, 0, 0, b"too big");
    movers[0].flush();
    for _ in 0..6 {
        for m in movers.iter_mut() {
            pass(m, now, &mut frames);
        }
    }
    assert_eq!(*delivered.lock().unwrap(), vec![(5, b"too big".to_vec())]);
    assert!(movers.iter().all(|m| m.stats.forward_dropped == 0));
}

/// A frame counts as forwarded late only as a TCP segment of a bucket
/// whose drain marker this worker sent after the NIC's entry was
/// rewritten: not an ICMP error, not the segments of a bucket whose entry
/// could not be written (the NIC keeps sending them here, in order), not
/// frames of a bucket this worker never gave away (what a cancelled
/// takeover held, handed back to the bucket's owner).
#[test]
fn only_a_move_s_segments_after_its_marker_are_late() {
    let t = Duration::from_millis(5);
    let after = t + SETTLE + Duration::from_micros(700);
    let mut m = rewritten_after_a_forward(0, t, true);
    assert!(marker_sent(&mut m, t + SETTLE, 10));
    m.0.forward_icmp(after, 0, 0, &[0u8; 60]);
    assert_eq!(m.0.stats.frames_forwarded_late, 0, "an ICMP error");
    m.0.forward(after, 0, 0, &[0u8; 60]);
    assert_eq!(m.0.stats.frames_forwarded_late, 1, "a segment");
    assert_eq!(m.0.stats.late_max_us, 700);
    // The entry could not be written.
    let mut m = rewritten_after_a_forward(0, t, false);
    assert!(marker_sent(&mut m, t + SETTLE, 10));
    m.0.forward(after, 0, 0, &[0u8; 60]);
    assert_eq!(m.0.stats.frames_forwarded_late, 0, "the entry not written");
    assert_eq!(m.0.stats.frames_forwarded, 2);
    // Queue 1 hands a frame of bucket 0 (queue 0's) back to it.
    m.1.forward(after, 0, 0, &[0u8; 60]);
    assert_eq!(m.1.stats.frames_forwarded_late, 0, "never given away");
}

/// A handler's `on_export` may close a connection of the bucket. One whose
/// application side is out already (listed before, or the one exported)
/// leaves the stack without being exported: its handler gets its state
/// back through `on_import_failed` (before, it heard of it nowhere: its
/// owner entry gone, its `Closed` reached nobody). One whose turn has not
/// come stays with its handler, which hears it close.
#[test]
fn a_connection_a_handler_closes_during_the_export_is_told_to_it() {
    // (on_export calls before the abort, the victim's place in the listing)
    for (at, victim) in [(1, 0), (0, 0), (0, 1)] {
        let tagging = Tagging::default();
        let (mut hs, b, _, _) = tagged_bucket(3, &tagging);
        let listed = hs[0].stack.bucket_connections(b);
        let port = hs[0]
            .stack
            .four_tuple(listed[victim])
            .unwrap()
            .remote
            .port();
        *tagging.victim.lock().unwrap() = Some((at, listed[victim]));
        let (from, to) = hs.split_at_mut(1);
        assert_eq!(carry(&mut from[0], &mut to[0], b), (vec![2], 0));
        from[0].dispatch(instant(Duration::from_millis(12)), &NoFrames);
        let told = (
            tagging.refused.lock().unwrap().clone(),
            tagging.closed.lock().unwrap().clone(),
        );
        if victim <= at {
            assert_eq!(told, (vec![port], vec![]), "({at}, {victim})");
        } else {
            assert_eq!(told, (vec![], vec![port]), "({at}, {victim})");
        }
        let arrived = tagging.arrived.lock().unwrap().clone();
        assert_eq!(arrived.len(), 2);
        assert!(arrived.iter().all(|(p, tag)| p == tag && *p != port));
    }
}

/// A connection a handler opens in `on_export` takes a port of a bucket
/// that stays: before, it could land in the bucket leaving, and go with it
/// without its owner (its owner entry left behind).
#[test]
fn a_connection_a_handler_opens_during_the_export_stays() {
    let tagging = Tagging::default();
    let (mut hs, b, _, mesh) = tagged_bucket(1, &tagging);
    *tagging.to_open.lock().unwrap() = 8;
    let (reply, answer) = crossbeam_channel::unbounded();
    mesh.send(
        0,
        Message::Export {
            bucket: b,
            to: 1,
            reply,
            claim: ExportClaim::default(),
        },
    )
    .unwrap();
    let now = Duration::from_millis(11);
    hs[0].serve_moves(instant(now), now, &mut NoRing, &NoFrames);
    let r = answer.try_recv();
    assert!(
        matches!(r, Ok(Reply::Exported { connections: 1, .. })),
        "{r:?}"
    );
    let rss = hs[0].mover.as_ref().unwrap().rss().clone();
    let opened = tagging.opened.lock().unwrap().clone();
    assert_eq!(opened.len(), 8);
    for c in opened {
        let t = hs[0].stack.four_tuple(c).expect("still on queue 0");
        assert_ne!(rss_bucket(&rss, &t), b);
    }
}

/// The old queue puts the bucket's last part in the new queue's inbox
/// before it tells the controller the export is done: what the controller
/// sends the new queue next (an undo's `Export`, when the new queue did
/// not answer its announcement) comes behind the part. (The answer goes
/// through a rendezvous channel: the test's thread reads the new queue's
/// inbox the moment it takes the answer.)
#[test]
fn the_last_part_is_on_its_way_before_the_export_is_answered() {
    let (mut hs, b, _, mesh) = tagged_bucket(2, &Tagging::default());
    let (reply, answer) = crossbeam_channel::bounded(0);
    mesh.send(
        0,
        Message::Export {
            bucket: b,
            to: 1,
            reply,
            claim: ExportClaim::default(),
        },
    )
    .unwrap();
    // The handler keeps the mesh through its mover.
    let watcher = std::thread::spawn(move || loop {
        match answer.try_recv() {
            Ok(r) => return (r, mesh.pending(1)),
            Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    });
    let now = Duration::from_millis(11);
    hs[0].serve_moves(instant(now), now, &mut NoRing, &NoFrames);
    let (r, pending) = watcher.join().unwrap();
    assert!(matches!(r, Reply::Exported { connections: 2, .. }), "{r:?}");
    assert_eq!(pending, 1, "the part was in queue 1's inbox");
}
