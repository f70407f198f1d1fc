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
