//! The sender against a peer played by hand: its segments written one by
//! one, so that windows a simulated stack would never offer (reopened
//! below one segment after a zero window) can be tried.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{ConnHandle, Stack, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::{test_config, A_IP, B_IP};
use std::net::SocketAddr;

/// Our stack (A) and a peer (B) played by hand: no timestamps, no SACK, no
/// window scaling, so that B's segments are simple to write.
struct Peer {
    a: Stack,
    conn: ConnHandle,
    now: Instant,
    /// B's SND.NXT (A's RCV.NXT).
    b_nxt: u32,
    /// What B has received in order (its RCV.NXT).
    b_rcv: u32,
    /// Every segment A sent: (repr, payload length).
    sent: Vec<(TcpRepr, usize)>,
}

impl Peer {
    fn new(b_window: u16) -> Peer {
        let mut a = Stack::new(test_config(1));
        let now = Instant::from_millis(1_000);
        let conn = a
            .connect(
                now,
                SocketAddr::new(A_IP, 10_000),
                SocketAddr::new(B_IP, 80),
            )
            .unwrap();
        let mut p = Peer {
            a,
            conn,
            now,
            b_nxt: 50_000,
            b_rcv: 0,
            sent: Vec::new(),
        };
        let syn = p.poll().pop().expect("SYN").0;
        assert!(syn.flags.syn());
        p.b_rcv = syn.seq.wrapping_add(1);
        let options = TcpOptions {
            mss: Some(1460),
            ..TcpOptions::default()
        };
        p.deliver(TcpFlags::SYN | TcpFlags::ACK, b_window, options);
        p.b_nxt = p.b_nxt.wrapping_add(1);
        assert_eq!(p.a.state(p.conn), Ok(State::Established));
        p.poll();
        p
    }

    /// Feeds A one segment from B at B's SND.NXT, acknowledging `b_rcv`.
    fn deliver(&mut self, flags: TcpFlags, window: u16, options: TcpOptions) {
        let repr = TcpRepr {
            src_port: 80,
            dst_port: 10_000,
            seq: self.b_nxt,
            ack: self.b_rcv,
            flags,
            window,
            urgent: 0,
            options,
        };
        let mut bytes = vec![0u8; 60];
        let n = repr.emit(&mut bytes).unwrap();
        bytes.truncate(n);
        self.a.handle_segment(self.now, B_IP, A_IP, &bytes);
    }

    /// B acknowledges what it holds, offering `window`.
    fn ack(&mut self, window: u16) {
        self.deliver(TcpFlags::ACK, window, TcpOptions::default());
    }

    /// Everything A sends now.
    fn poll(&mut self) -> Vec<(TcpRepr, usize)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        while let Some(t) = self.a.poll_transmit(self.now, &mut buf) {
            let (repr, payload) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
            out.push((repr, payload.len()));
        }
        self.sent.extend(out.iter().cloned());
        out
    }

    /// Runs A's timers up to `until`, collecting what it sends.
    fn run_until(&mut self, until: Instant) -> Vec<(TcpRepr, usize)> {
        let mut out = Vec::new();
        while let Some(t) = self.a.poll_timeout() {
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            self.a.handle_timeout(self.now);
            out.extend(self.poll());
        }
        self.now = self.now.max(until);
        out
    }

    /// A with 100 kB queued; B takes its first flight and shuts its
    /// window.
    fn shut_after_first_flight() -> Peer {
        let mut p = Peer::new(60_000);
        p.a.send(p.conn, &vec![7u8; 100_000]).unwrap();
        let first = p.poll();
        assert!(p.take(&first, usize::MAX) > 0);
        p.ack(0);
        p.poll();
        p
    }

    /// Runs A's timers for `span` with B's window shut: B drops whatever A
    /// sends and answers it with the window still zero. Returns A's
    /// segments, each with the time it went.
    fn probe_shut_window(&mut self, span: Duration) -> Vec<(Instant, TcpRepr, usize)> {
        let limit = self.now + span;
        let mut sent_all = Vec::new();
        while let Some(t) = self.a.poll_timeout() {
            if t > limit {
                break;
            }
            self.now = t;
            self.a.handle_timeout(t);
            let sent = self.poll();
            if !sent.is_empty() {
                self.ack(0);
                self.poll();
            }
            sent_all.extend(sent.into_iter().map(|(r, len)| (t, r, len)));
        }
        sent_all
    }

    /// B takes in order whatever of `segs` starts at its RCV.NXT and fits
    /// `room` bytes; returns how much it took.
    fn take(&mut self, segs: &[(TcpRepr, usize)], mut room: usize) -> usize {
        let mut took = 0;
        for (r, len) in segs {
            if r.seq == self.b_rcv && *len > 0 && *len <= room {
                self.b_rcv = self.b_rcv.wrapping_add(*len as u32);
                room -= len;
                took += len;
            }
        }
        took
    }
}

/// RFC 9293 §3.8.6.1 (zero-window probing) and §3.8.6.2.1 (the sender's
/// SWS override timeout): data that waits on the send window must always
/// have a timer behind it. When the peer reopens a zero window to less
/// than an MSS and less than half its largest window (a receiver without
/// SWS avoidance, or one under memory pressure), `update_send_window`
/// rewinds SND.NXT and clears the retransmission timer, the SWS rule then
/// holds the bytes back, and the persist timer is not armed because
/// SND.MAX is still past SND.UNA (the probe byte): no timer is left, and
/// the connection stalls for good.
#[test]
fn a_window_reopened_below_one_segment_does_not_stall_the_sender() {
    let mut p = Peer::new(60_000);
    let conn = p.conn;
    let queued = p.a.send(conn, &vec![7u8; 100_000]).unwrap();
    assert!(queued > 20_000, "{queued}");
    // B takes the first flight and closes its window.
    let first = p.poll();
    let took = p.take(&first, usize::MAX);
    assert!(took > 0);
    p.ack(0);
    // A probes the zero window; B drops each probe and answers it with the
    // window still zero.
    let probes: Vec<_> = p
        .probe_shut_window(Duration::from_secs(30))
        .into_iter()
        .map(|(_, r, len)| (r, len))
        .collect();
    assert!(!probes.is_empty(), "A probed the zero window");
    eprintln!(
        "B at {}; probes (seq, len): {:?}",
        p.b_rcv,
        probes.iter().map(|(r, l)| (r.seq, *l)).collect::<Vec<_>>()
    );
    // B's application reads a little: B reopens the window to 500 bytes.
    p.ack(500);
    let mut after = p.poll();
    let end = p.now + Duration::from_secs(600);
    after.extend(p.run_until(end));
    let data: usize = after.iter().map(|(_, len)| *len).sum();
    assert!(
        data > 0,
        "ten minutes after the window reopened to 500 bytes A sent no data \
         (segments: {:?}); next timer: {:?}, state {:?}",
        after
            .iter()
            .map(|(r, l)| (r.seq, *l, r.flags))
            .collect::<Vec<_>>(),
        p.a.poll_timeout(),
        p.a.state(conn)
    );
}

/// Zero-window probing is flow control, not loss (RFC 9293 §3.8.6.1, RFC
/// 1122 §4.2.2.17): a peer that keeps its window shut for half a minute,
/// answering every probe, costs the sender neither its congestion window
/// nor its slow-start threshold, and no retransmission timeout runs; the
/// probes come from the persist timer, backed off, each the first byte
/// outside the window again.
#[test]
fn probing_a_zero_window_leaves_the_congestion_window_alone() {
    let mut p = Peer::shut_after_first_flight();
    let conn = p.conn;
    let before = p.a.info(conn).unwrap();
    let rto_before = p.a.stats().rto_timeouts;
    let probes: Vec<_> = p
        .probe_shut_window(Duration::from_secs(30))
        .into_iter()
        .map(|(t, r, len)| (t, r.seq, len))
        .collect();
    assert!(probes.len() >= 3, "{probes:?}");
    assert!(
        probes
            .iter()
            .all(|&(_, seq, len)| seq == p.b_rcv && len == 1),
        "each probe is the first byte outside the window: {probes:?}"
    );
    let gaps: Vec<_> = probes.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "backed off: {gaps:?}"
    );
    let s = p.a.stats();
    assert_eq!(s.rto_timeouts, rto_before, "no retransmission timeout");
    // The window reopens: A sends as much as before the pause.
    p.ack(60_000);
    let info = p.a.info(conn).unwrap();
    assert_eq!(info.ssthresh, before.ssthresh, "{info:?}");
    assert!(info.cwnd >= before.cwnd, "{before:?} -> {info:?}");
    let after = p.poll();
    let data: usize = after.iter().map(|(_, l)| *l).sum();
    assert!(
        data >= before.cwnd.min(60_000) - 1460,
        "{data} after reopening"
    );
}

/// A peer that closed its window and then went silent (crashed, its route
/// gone): the probes go unanswered, and after `Config::max_retransmits`
/// of them the connection ends (reset, `Timeout`), as one whose
/// retransmissions go unanswered does; the application still holds it.
/// A peer that answers its probes is probed for good (the test above).
#[test]
fn a_peer_silent_behind_a_zero_window_is_given_up() {
    let mut p = Peer::shut_after_first_flight();
    let conn = p.conn;
    // B answers nothing from now on.
    let limit = p.now + Duration::from_secs(3600);
    let mut probes = 0;
    while let Some(t) = p.a.poll_timeout() {
        if t > limit || p.a.state(conn).is_err() {
            break;
        }
        p.now = t;
        p.a.handle_timeout(t);
        probes += p
            .poll()
            .iter()
            .filter(|(r, len)| *len > 0 && !r.flags.rst())
            .count();
    }
    assert!(p.a.state(conn).is_err(), "given up after {probes} probes");
    assert_eq!(probes, 15, "Config::max_retransmits probes");
    let closed = std::iter::from_fn(|| p.a.poll_event())
        .any(|e| matches!(e, flowlane_tcp::Event::Closed { conn: c, reason: flowlane_tcp::CloseReason::Timeout } if c == conn));
    assert!(closed, "told as a timeout");
}
