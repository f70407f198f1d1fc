#![allow(dead_code)]
use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, ConnHandle, Stack, State};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub const A_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const B_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

pub fn cfg() -> Config {
    let mut c = Config::new([1; 16]);
    c.msl = Duration::from_secs(30);
    c
}

/// Our stack A (active opener) and a hostile peer B played by hand.
pub struct Peer {
    pub a: Stack,
    pub conn: ConnHandle,
    pub now: Instant,
    pub b_nxt: u32,
    pub b_rcv: u32,
    pub wscale: u8,
    pub sack: bool,
    pub iss_a: u32,
    pub buf: Vec<u8>,
}

pub struct SynAck {
    pub mss: u16,
    pub wscale: Option<u8>,
    pub sack: bool,
    pub window: u16,
}

impl Peer {
    pub fn new(c: Config, s: SynAck) -> Peer {
        let mut a = Stack::new(c);
        let now = Instant::from_millis(1_000);
        let conn = a
            .connect(now, SocketAddr::new(A_IP, 10_000), SocketAddr::new(B_IP, 80))
            .unwrap();
        let mut p = Peer { a, conn, now, b_nxt: 50_000, b_rcv: 0, wscale: s.wscale.unwrap_or(0), sack: s.sack, iss_a: 0, buf: vec![0u8; 2048] };
        let syn = p.poll().pop().expect("SYN").0;
        assert!(syn.flags.syn());
        p.iss_a = syn.seq;
        p.b_rcv = syn.seq.wrapping_add(1);
        let options = TcpOptions { mss: Some(s.mss), window_scale: s.wscale, sack_permitted: s.sack, ..TcpOptions::default() };
        p.deliver_raw(p.b_nxt, p.b_rcv, TcpFlags::SYN | TcpFlags::ACK, s.window, options, &[]);
        p.b_nxt = p.b_nxt.wrapping_add(1);
        assert_eq!(p.a.state(p.conn), Ok(State::Established));
        p.poll();
        p
    }

    pub fn deliver_raw(&mut self, seq: u32, ack: u32, flags: TcpFlags, window: u16, options: TcpOptions, payload: &[u8]) {
        let repr = TcpRepr { src_port: 80, dst_port: 10_000, seq, ack, flags, window, urgent: 0, options };
        let mut bytes = vec![0u8; 80 + payload.len()];
        let n = repr.emit(&mut bytes).unwrap();
        bytes.truncate(n);
        bytes.extend_from_slice(payload);
        self.a.handle_segment(self.now, B_IP, A_IP, &bytes);
    }

    /// A pure ACK of `ack` with raw window field `window` and SACK blocks.
    pub fn ack_with(&mut self, ack: u32, window: u16, blocks: &[(u32, u32)]) {
        let mut o = TcpOptions::default();
        for (i, b) in blocks.iter().enumerate() {
            o.sack_blocks[i] = *b;
        }
        o.sack_block_count = blocks.len() as u8;
        self.deliver_raw(self.b_nxt, ack, TcpFlags::ACK, window, o, &[]);
    }

    pub fn poll(&mut self) -> Vec<(TcpRepr, usize)> {
        let mut out = Vec::new();
        while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
            let (repr, payload) = TcpRepr::parse_segment(&self.buf[..t.len]).unwrap();
            out.push((repr, payload.len()));
        }
        out
    }

    /// Count of segments and payload bytes A sends now.
    pub fn poll_count(&mut self) -> (usize, usize) {
        let mut n = 0;
        let mut bytes = 0;
        while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
            let (_, payload) = TcpRepr::parse_segment(&self.buf[..t.len]).unwrap();
            if !payload.is_empty() {
                n += 1;
                bytes += payload.len();
            }
        }
        (n, bytes)
    }

    pub fn una(&self) -> u32 { self.iss_a.wrapping_add(1) }
}

pub fn max_end(segs: &[(TcpRepr, usize)]) -> u32 {
    segs.iter().map(|(r, n)| r.seq.wrapping_add(*n as u32)).max().unwrap()
}
