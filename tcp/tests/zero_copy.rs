//! Zero-copy receive (issue 12): a caller lends the stack the frame each
//! segment arrived in (`Stack::handle_tcp_frame`); in-order payload stays
//! there, is read through the caller's `FrameStore`, and each frame is
//! handed back (`Stack::poll_released_frame`) once its last byte is read or
//! its connection goes. The simulator's B is lent every segment's buffer.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{ConnHandle, Error, Event, Stack};
use sim::{pattern, Bulk, LinkConfig, Sim};

/// Every byte of a lossy, reordering, duplicating and corrupting transfer
/// is read exactly, out of lent frames and chunks mixed (out-of-order data
/// goes to chunks, and in-order data after it too until they drain), and
/// every frame comes back.
#[test]
fn a_hostile_transfer_reads_byte_for_byte_out_of_lent_frames() {
    let mut sim = Sim::symmetric(7, LinkConfig::hostile(0.02));
    sim.lend_to_b();
    let mut bulk = Bulk::start(&mut sim, 4, 600_000, 60_000);
    let limit = sim.now + Duration::from_secs(600);
    let done = sim.run_until(limit, |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    assert!(done, "the transfer did not finish");
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
    let s = *sim.b.stats();
    // Out-of-order data and whatever follows it until the hole fills and
    // the application drains the chunks are copied: on this link a hole is
    // open much of the time.
    assert!(
        s.frames_kept > 0,
        "B kept {} payloads in their frames",
        s.frames_kept
    );
    assert!(s.out_of_order > 0, "the link reordered nothing: {s:?}");
    eprintln!(
        "kept {} of {} data segments",
        s.frames_kept, s.data_segments_in
    );
    sim.step();
    assert_eq!(sim.b.lent_frames(), 0, "B still holds frames");
    assert_eq!(sim.frames_b.as_ref().map(|f| f.held()), Some(0));
}

/// One connection from A to B whose application does not read yet, after
/// A has written `bytes` of stream 0's pattern (as its send buffer takes
/// them) and 50 ms more have passed.
fn unread(bytes: usize) -> (Sim, ConnHandle, ConnHandle) {
    let link = LinkConfig {
        delay: Duration::from_millis(1),
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(3, link);
    sim.lend_to_b();
    let (a, b) = sim.establish();
    let data: Vec<u8> = (0..bytes as u64).map(|i| pattern(0, i)).collect();
    let mut sent = 0;
    for _ in 0..200 {
        sent += sim.a.send(a, &data[sent..]).unwrap_or(0);
        sim.run_for(Duration::from_millis(10));
    }
    assert!(sent > 0);
    (sim, a, b)
}

/// The payload of a full segment from A (its MSS less the timestamp
/// option).
fn segment(sim: &Sim) -> usize {
    usize::from(sim.a.config().mss) - 12
}

/// Received segments stay in their frames while the application leaves
/// them unread, across any number of passes; `peek` shows one frame's
/// payload, a partial `consume` keeps the frame, and the frame goes back
/// when its last byte is consumed.
#[test]
fn frames_stay_lent_until_their_last_byte_is_consumed() {
    let (mut sim, _a, b) = unread(10 * 1_448);
    let mss = segment(&sim);
    assert_eq!(mss, 1_448);
    let segments = 10;
    assert_eq!(sim.b.lent_frames(), segments, "one frame per segment");
    assert_eq!(sim.b.stats().frames_kept, segments as u64);
    // More passes change nothing: nothing is read.
    sim.run_for(Duration::from_millis(500));
    assert_eq!(sim.b.lent_frames(), segments);
    let first = sim.b.peek_in(b, sim.b_frames()).expect("live").to_vec();
    assert_eq!(first.len(), mss, "peek shows the first frame's payload");
    assert!(first
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, i as u64)));
    assert_eq!(sim.b.consume(b, 100), Ok(100));
    assert_eq!(sim.b.poll_released_frame(), None, "the frame is still read");
    let rest = sim.b.peek_in(b, sim.b_frames()).expect("live");
    assert_eq!(rest.len(), mss - 100);
    assert_eq!(rest[0], pattern(0, 100));
    assert_eq!(sim.b.consume(b, mss - 100 + 10), Ok(mss + 10 - 100));
    assert!(
        sim.b.poll_released_frame().is_some(),
        "the first frame goes back"
    );
    assert_eq!(sim.b.poll_released_frame(), None);
    assert_eq!(sim.b.lent_frames(), segments - 1);
    // `recv` copies across frames.
    let mut buf = vec![0; 3 * mss];
    let frames = sim.frames_b.as_ref().expect("lent");
    assert_eq!(sim.b.recv_in(b, &mut buf, frames), Ok(3 * mss));
    let base = (mss + 10) as u64;
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, base + i as u64)));
    let mut back = 0;
    while sim.b.poll_released_frame().is_some() {
        back += 1;
    }
    assert_eq!(back, 3, "three more frames read to their end");
}

/// Kept payload counts against the receive window like buffered bytes:
/// with the application not reading, A can send no more than B's buffer,
/// all of it held in frames.
#[test]
fn unread_frames_fill_the_window() {
    let (sim, a, _b) = unread(1 << 20);
    let held: usize = sim.b.lent_frames();
    let buffer = sim.b.config().recv_buffer;
    let queued = sim.b.stats().bytes_in as usize;
    assert!(
        queued <= buffer + segment(&sim),
        "{queued} bytes queued, buffer {buffer}"
    );
    assert!(queued >= buffer / 2, "only {queued} bytes arrived");
    // Everything is in frames, but for a short segment that filled the
    // window's last bytes (below `Config::zero_copy_min`, so copied).
    assert!(
        held * segment(&sim) + segment(&sim) >= queued && held * segment(&sim) <= queued,
        "{held} frames for {queued} bytes"
    );
    assert_eq!(
        sim.a.send_space(a),
        Ok(0),
        "A's buffer is full: B's window is shut"
    );
}

/// A connection exported with payload still in lent frames carries that
/// payload in its snapshot; the frames go back to the caller, and the
/// stack that imports it reads the same bytes.
#[test]
fn an_export_copies_kept_payload_and_gives_the_frames_back() {
    let (mut sim, _a, b) = unread(8_000);
    let held = sim.b.lent_frames();
    assert!(held > 0);
    let snap = {
        let Sim {
            b: stack, frames_b, ..
        } = &mut sim;
        stack
            .export_in(b, frames_b.as_ref().expect("lent"))
            .expect("live")
    };
    let mut back = 0;
    while sim.b.poll_released_frame().is_some() {
        back += 1;
    }
    assert_eq!(back, held, "every frame goes back on export");
    assert_eq!(sim.b.lent_frames(), 0);
    let mut other = Stack::new(sim.b.config().clone());
    let h = other.import(sim.now, snap).expect("import");
    let mut buf = vec![0; 10_000];
    assert_eq!(other.recv(h, &mut buf), Ok(8_000));
    assert!(buf[..8_000]
        .iter()
        .enumerate()
        .all(|(i, &x)| x == pattern(0, i as u64)));
    assert_eq!(other.recv(h, &mut buf), Err(Error::WouldBlock));
}

/// A connection that goes away (reset by the peer here) gives back the
/// frames it held, unread.
#[test]
fn a_reset_connection_gives_its_frames_back() {
    let (mut sim, a, b) = unread(8_000);
    assert!(sim.b.lent_frames() > 0);
    sim.a.abort(a).expect("live");
    sim.run_for(Duration::from_millis(50));
    let closed = std::iter::from_fn(|| sim.b.poll_event())
        .any(|e| matches!(e, Event::Closed { conn, .. } if conn == b));
    assert!(closed, "B's connection was reset");
    assert_eq!(sim.b.lent_frames(), 0);
    sim.step();
    assert_eq!(sim.frames_b.as_ref().map(|f| f.held()), Some(0));
}
