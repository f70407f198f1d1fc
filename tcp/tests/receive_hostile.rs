//! The receiver against a peer played by hand (`sim::peer`): slivers of
//! out-of-order data past the assembler's ranges, a FIN with data held
//! beyond it, the window after the peer's FIN, probes into a shut window.
//! What each test checks is memory the peer could otherwise pin, or a
//! signal it could forge.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::State;
use flowlane_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use sim::peer::Peer;

/// A segment the assembler refuses (every range it may hold is taken) was
/// copied into the receive buffer first: its bytes, past every held range,
/// are forgotten with the chunks only they took. Before, once the peer
/// filled the holes and the application read everything, the idle
/// connection still held chunks for bytes never delivered (and refused
/// zero-copy receive until in-order data passed them).
#[test]
fn a_refused_out_of_order_segment_leaves_no_memory_behind() {
    let mut p = Peer::new(60_000);
    let wnd = u32::from(p.a_window());
    assert!(wnd >= 60_000, "A offers {wnd}");
    // Slivers one byte apart until the assembler refuses one.
    let mut slivers = 0u32;
    while p.a.stats().ooo_dropped == 0 {
        slivers += 1;
        assert!(2 * slivers < 50_000, "the assembler took {slivers} ranges");
        p.data(2 * slivers, TcpFlags::empty(), b"x");
    }
    let held = p.a.stats().ooo_dropped;
    // One more segment, far past every held range: refused too.
    p.data(wnd - 1_000, TcpFlags::empty(), &[7u8; 1_000]);
    assert_eq!(p.a.stats().ooo_dropped, held + 1);
    // The holes are filled up to the last sliver taken, and everything
    // in order is read.
    let taken = slivers - 1;
    p.data(0, TcpFlags::empty(), &vec![b'y'; (2 * taken + 1) as usize]);
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0;
    while let Ok(n) = p.a.recv(p.conn, &mut buf) {
        if n == 0 {
            break;
        }
        read += n;
    }
    assert_eq!(read, (2 * taken + 1) as usize);
    p.poll();
    assert_eq!(
        p.a.buffer_memory(),
        0,
        "an idle connection holds no buffer memory"
    );
}

/// The right edge an ACK of A's offers.
fn offered_edge(r: &TcpRepr) -> u32 {
    r.ack.wrapping_add(u32::from(r.window))
}

/// A's connection after B sent 30,000 bytes that A's application read,
/// and the edge A's window update offered then.
fn read_30k() -> (Peer, u32) {
    let mut p = Peer::new(60_000);
    p.data(0, TcpFlags::empty(), &vec![3u8; 30_000]);
    let mut buf = vec![0u8; 1 << 16];
    assert_eq!(p.a.recv(p.conn, &mut buf), Ok(30_000));
    p.poll();
    let later = p.now + Duration::from_millis(500);
    p.run_until(later);
    let edge = offered_edge(&p.sent.last().expect("an ACK of the data").0);
    assert!(p.a.recv_memory_committed() > 0);
    (p, edge)
}

/// No answer offers an edge left of `before` (RFC 9293 §3.8.6).
fn assert_edge_kept(before: u32, answers: &[(TcpRepr, usize)]) {
    assert!(!answers.is_empty());
    for (r, _) in answers {
        assert!(
            offered_edge(r).wrapping_sub(before) as i32 >= 0,
            "the edge moved left: {before} before the FIN, {} after",
            offered_edge(r)
        );
    }
}

/// After the peer's FIN nothing more can arrive (RFC 9293 §3.10.7.4
/// eighth): the window A offered no longer counts against the stack's
/// receive memory, nor does a reply sent from CLOSE-WAIT charge it again.
/// Before, a half-closed connection answering its peer kept its whole
/// window (up to the auto-tuned buffer) charged. The ACKs still offer the
/// edge advertised before the FIN (it never moves left), in CLOSE-WAIT
/// and LAST-ACK.
#[test]
fn close_wait_commits_no_receive_window() {
    let (mut p, before) = read_30k();
    p.data(0, TcpFlags::FIN, &[]);
    assert_eq!(p.a.state(p.conn), Ok(State::CloseWait));
    let mut answers = p.poll();
    p.a.send(p.conn, &[5u8; 100]).unwrap();
    answers.extend(p.poll());
    assert_eq!(p.a.recv_memory_committed(), 0);
    p.a.close(p.conn).unwrap();
    answers.extend(p.poll());
    assert_eq!(p.a.state(p.conn), Ok(State::LastAck));
    assert_edge_kept(before, &answers);
    assert_eq!(p.a.recv_memory_committed(), 0);
}

/// TIME-WAIT's record answers a retransmitted FIN with the edge offered
/// before the FIN, too (its window is the one the connection offered).
#[test]
fn time_wait_answers_keep_the_offered_edge() {
    let (mut p, before) = read_30k();
    p.a.close(p.conn).unwrap();
    let fin = p.poll().pop().expect("A's FIN").0;
    assert!(fin.flags.fin());
    p.b_rcv = fin.seq.wrapping_add(1);
    p.data(0, TcpFlags::FIN, &[]);
    let mut answers = p.poll();
    assert_eq!(p.a.recv_memory_committed(), 0);
    // B's FIN again: the TIME-WAIT record acknowledges it.
    p.data(0, TcpFlags::FIN, &[]);
    answers.extend(p.poll());
    assert!(answers.len() >= 2, "{answers:?}");
    assert_edge_kept(before, &answers);
}

/// A FIN in sequence while out-of-order data beyond it is held: the
/// stream ends before those bytes, so they and their chunks are dropped
/// (as Linux's `tcp_fin` purges its out-of-order queue), counted as a FIN
/// overrun, and no SACK block names them. Before, they were kept until
/// the close, and A's ACKs carried a SACK block for them moved one byte
/// (their offsets were relative to RCV.NXT, which the FIN advanced).
#[test]
fn a_fin_before_held_data_drops_it() {
    let options = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..TcpOptions::default()
    };
    let mut p = Peer::with_options(60_000, options);
    p.data(0, TcpFlags::empty(), b"abc");
    p.data(97, TcpFlags::empty(), &[9u8; 50]);
    assert!(p.a.buffer_memory() > 0);
    let overruns = p.a.stats().fin_overrun;
    p.data(0, TcpFlags::FIN, &[]);
    assert_eq!(p.a.state(p.conn), Ok(State::CloseWait));
    let acks = p.poll();
    assert!(!acks.is_empty());
    for (r, _) in &acks {
        assert_eq!(
            r.options.sack_block_count, 0,
            "no SACK block past the FIN: {:?}",
            r.options.sack_blocks
        );
    }
    assert_eq!(p.a.stats().fin_overrun, overruns + 1);
    let mut buf = [0u8; 16];
    assert_eq!(p.a.recv(p.conn, &mut buf), Ok(3));
    assert_eq!(p.a.buffer_memory(), 0, "the held bytes' chunks are back");
}

/// RFC 5681 §2 (b): a duplicate acknowledgment carries no data. A peer's
/// one-byte probes of A's shut window, trimmed to nothing, were counted as
/// duplicate ACKs: three of them, while A had data in flight, made a fast
/// retransmit and halved A's congestion window.
#[test]
fn zero_window_probes_are_no_duplicate_acks() {
    let mut p = Peer::new(60_000);
    // B fills A's window; A's application reads nothing. (B's SND.NXT then
    // follows A's acknowledgments: what A trimmed past its window is not
    // taken.)
    for _ in 0..100 {
        p.data(0, TcpFlags::empty(), &[1u8; 1_400]);
        p.poll();
    }
    let later = p.now + Duration::from_secs(1);
    p.run_until(later);
    let (last, _) = *p.sent.last().expect("A acknowledged");
    p.b_nxt = last.ack;
    assert_eq!(last.window, 0, "A's window is shut");
    // A has data in flight that B does not acknowledge.
    p.a.send(p.conn, &[2u8; 4_000]).unwrap();
    assert!(p.poll().iter().any(|(_, len)| *len > 0));
    let before = *p.a.stats();
    for _ in 0..3 {
        p.data(0, TcpFlags::empty(), b"p");
        // Nothing of the probe was taken: B's SND.NXT stays.
        p.b_nxt = p.b_nxt.wrapping_sub(1);
        p.poll();
    }
    let s = p.a.stats();
    assert_eq!(
        (s.dup_acks, s.fast_retransmits),
        (before.dup_acks, before.fast_retransmits)
    );
}

/// What B, sending only inside the window A offers, gets A to take when
/// it sends `seg` bytes a segment, `burst` between A's ACKs, and A's
/// application reads nothing: A's connection with the bytes it took (A's
/// window scale is `shift`). Every byte B sends must be taken (A offered
/// it), so each ACK acknowledges all of B's data.
fn trickle_into_unread(
    cfg: flowlane_tcp::Config,
    shift: u8,
    seg: usize,
    burst: usize,
) -> (Peer, usize) {
    let options = TcpOptions {
        mss: Some(1460),
        window_scale: Some(0),
        ..TcpOptions::default()
    };
    let mut p = Peer::with_config(cfg, 60_000, options);
    let start = p.b_nxt;
    let last = p.sent.last().expect("A's ACK").0;
    let mut edge = last.ack.wrapping_add(u32::from(last.window) << shift);
    let payload = vec![4u8; seg];
    for _ in 0..20 * 65_536 / seg {
        let mut sent = 0;
        while sent < burst && (edge.wrapping_sub(p.b_nxt) as usize) >= seg {
            p.data(0, TcpFlags::empty(), &payload);
            sent += 1;
        }
        if sent == 0 {
            break;
        }
        let later = p.now + Duration::from_millis(300);
        p.run_until(later);
        p.poll();
        let (r, _) = *p.sent.last().expect("A acknowledged");
        assert_eq!(
            r.ack,
            p.b_nxt,
            "A dropped bytes inside the window it offered ({} taken)",
            r.ack.wrapping_sub(start)
        );
        edge = r.ack.wrapping_add(u32::from(r.window) << shift);
    }
    assert_eq!(p.a.stats().recv_buffer_overrun, 0);
    let taken = p.b_nxt.wrapping_sub(start) as usize;
    (p, taken)
}

/// A window scale of 7 (test_config's largest buffer, 6 MiB, asks for
/// it) and a peer trickling 60-byte segments into a buffer the
/// application never reads: truncating the window to the scale's units
/// would move the right edge left, and rounding it up each time (RFC 7323
/// §2.4) moved it right by up to 127 bytes an ACK, for ever. Before, the
/// window never closed: the ring filled its capacity, then its headroom
/// (as much again), then A dropped bytes inside the window it offered
/// (131,072 bytes taken of a 64 KiB buffer, then drops). Now the edge is
/// rounded up only while it stays within one unit of what the buffer
/// holds; past that the window is truncated (a retraction under one unit,
/// RFC 7323 §2.4 and Appendix F), so it closes.
#[test]
fn small_segments_close_a_full_window() {
    let cfg = sim::test_config(1);
    let cap = cfg.recv_buffer;
    let (p, taken) = trickle_into_unread(cfg, 7, 60, 2);
    assert_eq!(p.a_window(), 0, "A's window closed");
    assert!(p.a.stats().window_retractions > 0);
    assert!(
        (cap - 1_460..cap + 128).contains(&taken),
        "{taken} bytes taken by a {cap}-byte buffer"
    );
}

/// The same trickle against a stack whose receive memory is 16 KiB: what
/// A takes stays within the budget, the one segment every connection may
/// be offered beyond it (a whole number of the window scale's units:
/// 1,536 bytes at a shift of 7), and one unit of window scale. Before,
/// the edge's creep committed 147 KB of a 16 KiB budget.
#[test]
fn small_segments_stay_within_receive_memory() {
    let mut cfg = sim::test_config(1);
    cfg.recv_memory = 16 * 1024;
    let bound = cfg.recv_memory + usize::from(cfg.mss).next_multiple_of(128) + 127;
    let (p, taken) = trickle_into_unread(cfg, 7, 60, 2);
    assert_eq!(p.a_window(), 0, "A's window closed");
    assert!(taken <= bound, "{taken} bytes taken on a 16 KiB budget");
}

/// A 4 KiB buffer under a window scale of 14 (a 1 GiB largest buffer):
/// the window is one unit, 16 KiB, 12 KiB past the buffer; B fills it at
/// once and everything is taken (the ring's headroom reaches one unit),
/// then the window closes. Before, the headroom stopped at the buffer's
/// size: 8 KiB were taken and the rest of the window dropped.
#[test]
fn a_buffer_under_one_unit_of_window_scale_takes_the_unit() {
    let mut cfg = sim::test_config(1);
    cfg.recv_buffer = 4 * 1024;
    cfg.recv_buffer_max = 1 << 30;
    let (p, taken) = trickle_into_unread(cfg, 14, 1_000, 100);
    assert_eq!(p.a_window(), 0, "A's window closed");
    assert!(
        (15 * 1024..16 * 1024).contains(&taken),
        "{taken} bytes taken"
    );
}

/// With no receive memory to share, every connection may still be offered
/// one segment (the floor: `Config::recv_memory`). At a window scale of
/// 11 that segment is less than one unit (1,460 >> 11 is 0): once the
/// application read everything, the window update offered a zero window,
/// and the connection waited for memory it was promised not to need. Now
/// the floor rounds up to one unit.
#[test]
fn the_one_segment_floor_survives_a_large_window_scale() {
    let mut cfg = sim::test_config(1);
    cfg.recv_memory = 0;
    cfg.recv_buffer_max = 64 << 20;
    let (mut p, taken) = trickle_into_unread(cfg, 11, 60, 2);
    assert_eq!(p.a_window(), 0, "A's window closed");
    let mut buf = vec![0u8; 1 << 17];
    assert_eq!(p.a.recv(p.conn, &mut buf), Ok(taken));
    let update = p.poll();
    let window = update.last().map(|(r, _)| r.window);
    // B probes too: its answer offers the segment all the same.
    p.data(0, TcpFlags::empty(), b"p");
    let later = p.now + Duration::from_millis(300);
    let answer = p.run_until(later).last().map(|(r, _)| r.window);
    assert_eq!((window, answer), (Some(1), Some(1)), "{update:?}");
}

/// An out-of-order segment that reaches past the window's right edge is
/// trimmed to it and owes one immediate ACK, not two (the trim asked for
/// one and placing the data owed another, the first reporting the state
/// from before the segment came).
#[test]
fn an_out_of_order_segment_past_the_edge_owes_one_ack() {
    let mut p = Peer::new(60_000);
    let wnd = u32::from(p.a_window());
    p.data(1_000, TcpFlags::empty(), &vec![3u8; wnd as usize]);
    let acks = p.poll();
    assert_eq!(acks.len(), 1, "{acks:?}");
}

/// RFC 5681 §2: a duplicate ACK carries no data. Three out-of-order
/// segments in one batch owe three, and A has data to send: its data
/// segments (which carry the same acknowledgment) no longer stand in for
/// them, so the peer still counts three duplicates and can retransmit
/// fast. Before, each data segment used up one, and none was sent.
#[test]
fn data_segments_do_not_use_up_the_duplicate_acks_owed() {
    let mut p = Peer::new(60_000);
    p.a.send(p.conn, &[1u8; 3_000]).unwrap();
    for k in 1..=3 {
        p.data(1_000 * k, TcpFlags::empty(), &[2u8; 100]);
    }
    let out = p.poll();
    let dup_acks = out
        .iter()
        .filter(|(r, len)| *len == 0 && r.ack == p.b_nxt)
        .count();
    assert!(out.iter().any(|(_, len)| *len > 0), "{out:?}");
    assert_eq!(dup_acks, 3, "{out:?}");
}

/// Receiver-side silly window avoidance (RFC 9293 §3.8.6.2.2) after a
/// retraction: the application reads a closed window open 100 bytes at a
/// time; no update opens less than a segment. Before, the update was
/// measured against what memory allowed, not what the field it goes out
/// in carries: one went out offering 128 bytes (one unit of the scale),
/// inviting the peer to send silly segments.
#[test]
fn a_window_reopened_after_a_retraction_opens_a_segment() {
    let cfg = sim::test_config(1);
    let mss = u32::from(cfg.mss);
    let (mut p, _) = trickle_into_unread(cfg, 7, 60, 2);
    assert_eq!(p.a_window(), 0, "A's window closed");
    let mut buf = [0u8; 100];
    let mut windows = Vec::new();
    for _ in 0..40 {
        assert_eq!(p.a.recv(p.conn, &mut buf), Ok(buf.len()));
        windows.extend(p.poll().iter().map(|(r, _)| u32::from(r.window) << 7));
    }
    assert!(!windows.is_empty(), "no window update");
    assert!(
        windows.iter().all(|&w| w >= mss),
        "updates offered {windows:?} bytes"
    );
}
