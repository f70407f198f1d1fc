//! Our stack (A) and a peer (B) played by hand: B's segments written one by
//! one, so that what a simulated stack would never send (a window reopened
//! below one segment, slivers of out-of-order data, probes into a shut
//! window) can be tried. A opens the connection; B answers with the
//! options it is given (none by default: no timestamps, no SACK, no window
//! scaling, so that its segments are simple to write).

use super::{test_config, A_IP, B_IP};
use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, ConnHandle, Stack, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use std::net::SocketAddr;

/// The round trip of [`Peer::with_config`]'s handshake, A's SYN to B's
/// SYN-ACK: where A times its SYN (RFC 6298 §3), this is its SRTT until a
/// test's own samples move it.
pub const HANDSHAKE_RTT: Duration = Duration::from_millis(10);

/// A and the state of the peer B played against it.
pub struct Peer {
    pub a: Stack,
    pub conn: ConnHandle,
    pub now: Instant,
    /// B's SND.NXT (A's RCV.NXT once A took everything in order).
    pub b_nxt: u32,
    /// What B has received in order (its RCV.NXT).
    pub b_rcv: u32,
    /// The window B offers on its data segments.
    pub b_window: u16,
    /// Every segment A sent, with its payload's length.
    pub sent: Vec<(TcpRepr, usize)>,
}

impl Peer {
    /// A connected to B, which offers `b_window` and only an MSS option.
    pub fn new(b_window: u16) -> Peer {
        let options = TcpOptions {
            mss: Some(1460),
            ..TcpOptions::default()
        };
        Peer::with_options(b_window, options)
    }

    /// A connected to B, whose SYN-ACK offers `b_window` and carries
    /// `options` (SACK permitted, say).
    pub fn with_options(b_window: u16, options: TcpOptions) -> Peer {
        Peer::with_config(test_config(1), b_window, options)
    }

    /// [`Peer::with_options`] for an A configured by `cfg`. B's SYN-ACK
    /// comes [`HANDSHAKE_RTT`] after A's SYN: A's first RTT sample, as a
    /// real path's (a SYN-ACK in the same nanosecond would give A an SRTT
    /// of 0, a probe timeout of 0 and the minimum RTO).
    pub fn with_config(cfg: Config, b_window: u16, options: TcpOptions) -> Peer {
        let mut p = Peer::syn_sent(cfg, b_window);
        p.now += HANDSHAKE_RTT;
        p.deliver(TcpFlags::SYN | TcpFlags::ACK, b_window, options);
        p.b_nxt = p.b_nxt.wrapping_add(1);
        assert_eq!(p.a.state(p.conn), Ok(State::Established));
        p.poll();
        p
    }

    /// A configured by `cfg`, its SYN sent (the first of [`Peer::sent`]),
    /// in SYN-SENT: B's SYN-ACK is the test's to write, at B's SND.NXT
    /// (its ISS), and B's data segments are to offer `b_window`.
    pub fn syn_sent(cfg: Config, b_window: u16) -> Peer {
        let mut a = Stack::new(cfg);
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
            b_window,
            sent: Vec::new(),
        };
        let syn = p.poll().pop().expect("SYN").0;
        assert!(syn.flags.syn());
        p.b_rcv = syn.seq.wrapping_add(1);
        p
    }

    /// Feeds A one segment from B at B's SND.NXT, acknowledging `b_rcv`.
    pub fn deliver(&mut self, flags: TcpFlags, window: u16, options: TcpOptions) {
        self.segment(0, flags, window, options, &[]);
    }

    /// Feeds A one segment from B, `ahead` bytes past B's SND.NXT, with
    /// `payload` (B's SND.NXT does not move: see [`Peer::data`]).
    pub fn segment(
        &mut self,
        ahead: u32,
        flags: TcpFlags,
        window: u16,
        options: TcpOptions,
        payload: &[u8],
    ) {
        let repr = TcpRepr {
            src_port: 80,
            dst_port: 10_000,
            seq: self.b_nxt.wrapping_add(ahead),
            ack: self.b_rcv,
            flags,
            window,
            urgent: 0,
            options,
        };
        let mut bytes = vec![0u8; 60 + payload.len()];
        let n = repr.emit(&mut bytes).unwrap();
        bytes[n..n + payload.len()].copy_from_slice(payload);
        bytes.truncate(n + payload.len());
        self.a.handle_segment(self.now, B_IP, A_IP, &bytes);
    }

    /// B sends `payload` `ahead` bytes past its SND.NXT, with the ACK flag
    /// and `flags` besides; B's SND.NXT moves past it only when it was in
    /// order (`ahead` 0).
    pub fn data(&mut self, ahead: u32, flags: TcpFlags, payload: &[u8]) {
        let window = self.b_window;
        self.segment(
            ahead,
            flags | TcpFlags::ACK,
            window,
            TcpOptions::default(),
            payload,
        );
        if ahead == 0 {
            self.b_nxt = self.b_nxt.wrapping_add(payload.len() as u32);
        }
    }

    /// B acknowledges what it holds, offering `window`.
    pub fn ack(&mut self, window: u16) {
        self.deliver(TcpFlags::ACK, window, TcpOptions::default());
    }

    /// Everything A sends now.
    pub fn poll(&mut self) -> Vec<(TcpRepr, usize)> {
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
    pub fn run_until(&mut self, until: Instant) -> Vec<(TcpRepr, usize)> {
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
    pub fn shut_after_first_flight() -> Peer {
        Peer::shut_after_first_flight_with(test_config(1))
    }

    /// [`Peer::shut_after_first_flight`] for an A configured by `cfg`
    /// (B offers only an MSS option, as in [`Peer::new`]).
    pub fn shut_after_first_flight_with(cfg: Config) -> Peer {
        let options = TcpOptions {
            mss: Some(1460),
            ..TcpOptions::default()
        };
        let mut p = Peer::with_config(cfg, 60_000, options);
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
    pub fn probe_shut_window(&mut self, span: Duration) -> Vec<(Instant, TcpRepr, usize)> {
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
    pub fn take(&mut self, segs: &[(TcpRepr, usize)], mut room: usize) -> usize {
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

    /// The window A offered on its last segment (no window scaling is
    /// agreed unless B's options offered it).
    pub fn a_window(&self) -> u16 {
        self.sent.last().map_or(0, |(r, _)| r.window)
    }
}
