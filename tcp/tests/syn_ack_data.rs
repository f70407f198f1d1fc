//! Text and a FIN on the SYN-ACK that completes an active open (RFC 9293
//! §3.10.7.3 SYN-SENT: "If there are other controls or text in the
//! segment, then continue processing at the sixth step under Section
//! 3.10.7.4"): a TCP Fast Open server's answer (RFC 7413 §4.2.2), or any
//! peer's. Taken once, in order, within the window the SYN offered, and
//! acknowledged by the ACK that completes the handshake.

mod sim;

use flowlane_tcp::{Delivery, Ecn, Event, FrameRef, FrameStore, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::peer::Peer;
use sim::{events, read_all, test_config, A_IP, B_IP};

/// B's SYN-ACK options: an MSS only.
fn mss() -> TcpOptions {
    TcpOptions {
        mss: Some(1460),
        ..TcpOptions::default()
    }
}

/// A in SYN-SENT, configured as `test_config(1)` (with `recv_buffer`
/// bytes of receive buffer, fixed, if given).
fn syn_sent(recv_buffer: Option<usize>) -> Peer {
    let mut cfg = test_config(1);
    if let Some(n) = recv_buffer {
        (cfg.recv_buffer, cfg.recv_buffer_max) = (n, n);
    }
    Peer::syn_sent(cfg, 65_535)
}

/// B's SYN-ACK to `p`, carrying `payload` and, if `fin`, a FIN; B's
/// SND.NXT then past all it sent.
fn answer(p: &mut Peer, payload: &[u8], fin: bool) {
    let fin_flag = if fin {
        TcpFlags::FIN
    } else {
        TcpFlags::empty()
    };
    p.segment(
        0,
        TcpFlags::SYN | TcpFlags::ACK | fin_flag,
        65_535,
        mss(),
        payload,
    );
    p.b_nxt = p
        .b_nxt
        .wrapping_add(1 + payload.len() as u32 + u32::from(fin));
}

/// The acknowledgment numbers of A's segments in `segs`.
fn acks(segs: &[(flowlane_wire::TcpRepr, usize)]) -> Vec<u32> {
    segs.iter().map(|(r, _)| r.ack).collect()
}

/// Five bytes on the SYN-ACK: the connection is established, the bytes
/// are readable at once and acknowledged by the handshake's ACK (before:
/// dropped, that ACK at the SYN-ACK's sequence number + 1, for the peer
/// to send them again an RTO later). The SYN-ACK again (its ACK lost)
/// delivers nothing twice, and B's next bytes follow in order.
#[test]
fn text_on_a_syn_ack_is_taken_once_and_acknowledged() {
    let mut p = syn_sent(None);
    answer(&mut p, b"hello", false);
    let conn = p.conn;
    assert_eq!(p.a.state(conn), Ok(State::Established));
    let evs = events(&mut p.a);
    assert_eq!(evs.first(), Some(&Event::Connected(conn)), "{evs:?}");
    let first = p.poll();
    assert_eq!(
        acks(&first),
        [p.b_nxt],
        "the handshake's ACK covers the text"
    );
    assert_eq!(read_all(&mut p.a, conn), b"hello");
    // The SYN-ACK again: a challenge ACK, nothing taken.
    let isn = p.b_nxt.wrapping_sub(6);
    let (nxt, b_nxt) = (p.b_nxt, p.b_nxt);
    p.b_nxt = isn;
    p.segment(0, TcpFlags::SYN | TcpFlags::ACK, 65_535, mss(), b"hello");
    p.b_nxt = b_nxt;
    assert!(read_all(&mut p.a, conn).is_empty());
    assert!(acks(&p.poll()).iter().all(|&a| a == nxt));
    p.data(0, TcpFlags::PSH, b" world");
    assert_eq!(read_all(&mut p.a, conn), b" world");
    assert_eq!(p.a.stats().data_segments_in, 3);
}

/// Text and a FIN on the SYN-ACK: both taken, the connection in
/// CLOSE-WAIT at once, the ACK covering the FIN, and the read after the
/// bytes the end of the stream.
#[test]
fn text_and_a_fin_on_a_syn_ack_close_the_peers_side() {
    let mut p = syn_sent(None);
    answer(&mut p, b"bye", true);
    let conn = p.conn;
    assert_eq!(p.a.state(conn), Ok(State::CloseWait));
    assert_eq!(acks(&p.poll()), [p.b_nxt]);
    assert_eq!(read_all(&mut p.a, conn), b"bye");
    let mut buf = [0u8; 16];
    assert_eq!(p.a.recv(conn, &mut buf), Ok(0), "end of stream");
}

/// Text past the window A's SYN offered (unscaled: RFC 7323 §2.2) is
/// trimmed at its right edge, the FIN beyond it with it: A takes what the
/// window held, acknowledges that, and stays ESTABLISHED; the rest, sent
/// again, follows in order.
#[test]
fn text_past_the_syns_window_is_trimmed() {
    let mut p = syn_sent(Some(4096));
    let wnd = usize::from(p.sent[0].0.window);
    assert!(wnd > 0 && wnd < 6000, "the SYN's window: {wnd}");
    let text: Vec<u8> = (0..6000u32).map(|i| i as u8).collect();
    answer(&mut p, &text, true);
    let conn = p.conn;
    assert_eq!(p.a.state(conn), Ok(State::Established), "the FIN went");
    // B's SND.NXT back to the window's right edge: what A took.
    let edge = p.b_nxt.wrapping_sub(1 + (text.len() - wnd) as u32);
    assert_eq!(acks(&p.poll()), [edge]);
    assert!(
        read_all(&mut p.a, conn) == text[..wnd],
        "the window's bytes"
    );
    // Read, the window opens again (A's window update).
    let update = p.poll();
    assert!(update
        .iter()
        .any(|(r, _)| usize::from(r.window) >= text.len() - wnd));
    p.b_nxt = edge;
    p.data(0, TcpFlags::FIN, &text[wnd..]);
    assert!(
        read_all(&mut p.a, conn) == text[wnd..],
        "the rest, sent again"
    );
    assert_eq!(p.a.state(conn), Ok(State::CloseWait));
}

/// The frame B's SYN-ACK arrived in, lent: its text (past
/// `Config::zero_copy_min`) stays in the frame, as an established
/// connection's in-order data does (zero-copy receive takes this path
/// too), is read out of it, and the frame comes back once read.
#[test]
fn text_on_a_syn_ack_stays_in_its_lent_frame() {
    struct OneFrame(Vec<u8>);
    impl FrameStore for OneFrame {
        fn frame(&self, id: u32) -> &[u8] {
            assert_eq!(id, FRAME, "only the SYN-ACK's frame is lent");
            &self.0
        }
    }
    const FRAME: u32 = 7;
    let mut p = syn_sent(None);
    let text: Vec<u8> = (0..1200u32).map(|i| (i * 7) as u8).collect();
    let syn_ack = TcpRepr {
        src_port: 80,
        dst_port: 10_000,
        seq: p.b_nxt,
        ack: p.b_rcv,
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 65_535,
        urgent: 0,
        options: mss(),
    };
    let mut bytes = vec![0u8; 60];
    let hl = syn_ack.emit(&mut bytes).unwrap();
    bytes.truncate(hl);
    bytes.extend_from_slice(&text);
    let frames = OneFrame(bytes);
    let (repr, payload) = TcpRepr::parse_segment(&frames.0).unwrap();
    let frame = FrameRef {
        id: FRAME,
        payload_offset: hl as u32,
    };
    let d =
        p.a.handle_tcp_frame(p.now, B_IP, A_IP, Ecn::NotEct, &repr, payload, frame);
    assert_eq!(d, Delivery::Kept, "the text kept in its frame");
    p.b_nxt = p.b_nxt.wrapping_add(1 + text.len() as u32);
    let conn = p.conn;
    assert_eq!(p.a.state(conn), Ok(State::Established));
    assert_eq!(p.a.stats().frames_kept, 1);
    assert_eq!(p.a.lent_frames(), 1);
    assert_eq!(acks(&p.poll()), [p.b_nxt]);
    let mut buf = vec![0u8; 4096];
    let n = p.a.recv_in(conn, &mut buf, &frames).unwrap();
    assert!(buf[..n] == text[..], "the text, read out of the frame");
    assert_eq!(p.a.poll_released_frame(), Some(FRAME));
    assert_eq!(p.a.lent_frames(), 0);
}
