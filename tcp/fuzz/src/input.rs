//! The fuzz input format: a [`Setup`] (2 bytes), then [`Op`]s, each a kind byte and a fixed
//! number of argument bytes. Any byte string decodes (a short tail reads as zeros, and the
//! ops stop when the input does), and [`encode`] writes the inverse, so that seeds and the
//! smoke test's generator are written as op lists.

/// Reads bytes off the front of the input; past its end, zeros.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Cursor { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes (fewer at the end of the input).
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// How the stack and its peers are configured: the first two bytes of an input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Setup {
    /// Bit 0 SYN cookies, 1 small buffers and receive memory, 2 IPv6, 3 the stack offers
    /// timestamps, 4 SACK, 5 window scaling, 6 keepalive, 7 a second (active) connection.
    pub stack: u8,
    /// Bit 0 the peers offer timestamps, 1 SACK, 2 window scaling, 3 header prediction off,
    /// 4 Nagle off, 5 small tables (backlog, TIME-WAIT, RST queue, challenge-ACK budget),
    /// bits 6–7 the peers' MSS (1460, 536, 88, 9000).
    pub peer: u8,
}

/// How a peer segment's sequence number is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqChoice {
    /// The peer's next new byte plus `delta` (0: in order; more: out of order).
    Ahead(u16),
    /// The peer's next new byte minus `delta` (a retransmission or an old duplicate).
    Behind(u16),
    /// Around the right edge of the window the stack last advertised (`delta` − 32768).
    WindowEdge(u16),
    /// Anywhere: `delta` × 65,537 from the peer's initial sequence number.
    Far(u16),
}

/// How a peer segment's acknowledgment number is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckChoice {
    /// Everything the peer received in order from the stack; `delta` ≥ 0x8000 takes some
    /// back (bits 0–7, or 0–13 from 0xc000: a duplicate or an old ACK).
    Received(u16),
    /// Beyond what the stack sent (`delta` past SND.MAX as the peer knows it).
    Future(u16),
    /// Anywhere: `delta` × 65,537 from the stack's initial sequence number.
    Far(u16),
}

/// Which segment options a peer segment carries (bit 0 timestamps when negotiated, 1
/// timestamps even when not, 2 an old TSval (PAWS), 3 SACK blocks; bits 4–5 how many,
/// from `sack` as pairs of MSS multiples above what was received).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptChoice {
    /// The bits above.
    pub bits: u8,
    /// SACK block edges: four 4-bit MSS multiples.
    pub sack: u16,
}

/// What the application does to a connection ([`Op::App`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppCall {
    /// `Stack::close`.
    Close,
    /// `Stack::shutdown_write`.
    ShutdownWrite,
    /// `Stack::abort`.
    Abort,
    /// `Stack::set_nodelay(true)`.
    NoDelay,
    /// `Stack::want_writable`.
    WantWritable,
    /// `Stack::export` then `Stack::import` on the same stack.
    MoveAway,
}

/// One step of a fuzz input. `conn` names a peer (modulo the peers there are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The peer sends data (`len` bytes of its stream at `seq`), with `fin` a FIN.
    Data {
        /// The peer.
        conn: u8,
        /// Its sequence number.
        seq: SeqChoice,
        /// Payload bytes (taken modulo 4097).
        len: u16,
        /// Set FIN too.
        fin: bool,
        /// Its acknowledgment number.
        ack: AckChoice,
        /// Its window field (0: a zero window).
        window: u16,
        /// Its options.
        opts: OptChoice,
    },
    /// The peer sends a bare ACK (a duplicate, a window update, SACK blocks).
    Ack {
        /// The peer.
        conn: u8,
        /// Its acknowledgment number.
        ack: AckChoice,
        /// Its window field.
        window: u16,
        /// Its options.
        opts: OptChoice,
    },
    /// The peer sends an RST at `seq` (with ACK if `with_ack`).
    Rst {
        /// The peer.
        conn: u8,
        /// Its sequence number.
        seq: SeqChoice,
        /// Set ACK too (acknowledging what the peer received).
        with_ack: bool,
    },
    /// The peer's handshake step: its SYN (passive side of the stack; again, once
    /// synchronized: RFC 5961 §4), or its SYN-ACK to the stack's SYN (active side). Past the
    /// last peer, a new peer connects to the listener.
    Syn {
        /// The peer.
        conn: u8,
    },
    /// The stack opens a connection to a new peer (`Stack::connect`).
    Connect,
    /// A raw segment from the input's bytes, for a peer's tuple or another.
    Raw {
        /// Bit 7 clear: a live peer's tuple (bits 0–5 pick it); set: another remote port
        /// (bits 0–5), to the listener's port or (bit 6) another. Bit 6 on a peer's tuple:
        /// `seq`/`ack` are offsets from the peer's next byte and what it received.
        target: u8,
        /// Control bits, as on the wire.
        flags: u8,
        /// Sequence number.
        seq: u32,
        /// Acknowledgment number.
        ack: u32,
        /// Window field.
        window: u16,
        /// Option bytes as given (their count: the length of this, at most 40).
        options: [u8; 40],
        /// How many of `options` are used.
        options_len: u8,
        /// Payload bytes (the pattern of the tuple's stream at `seq`).
        payload_len: u16,
        /// Cut the segment to this many bytes if less than its length (malformed input).
        truncate: u8,
    },
    /// Time passes (`TIMES[ms & 15]` milliseconds) and the timers due run.
    Time {
        /// Index into the table of steps.
        ms: u8,
    },
    /// The application writes `len` bytes (of its pattern) to a peer's connection.
    Write {
        /// The peer.
        conn: u8,
        /// Bytes (taken modulo 65,537).
        len: u16,
    },
    /// The application reads up to `len` bytes (through `peek`/`consume` if `peek`).
    Read {
        /// The peer.
        conn: u8,
        /// Bytes (taken modulo 16,385, at least 1).
        len: u16,
        /// Read zero-copy.
        peek: bool,
    },
    /// The application closes, aborts, or otherwise acts on a connection.
    App {
        /// The peer.
        conn: u8,
        /// What.
        call: AppCall,
    },
    /// How the stack's next segments reach the peers: lost (`lose`), and at most `limit`
    /// segments taken per drain (0: all) until the next `Link` op.
    Link {
        /// The peers miss the segments the next drain takes.
        lose: bool,
        /// Segments taken per drain (0: all).
        limit: u8,
    },
}

/// Milliseconds of an [`Op::Time`].
pub(crate) const TIMES: [u64; 16] = [
    1, 2, 5, 10, 40, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 600_000,
];

const OP_KINDS: u8 = 12;

impl Setup {
    pub(crate) fn decode(c: &mut Cursor<'_>) -> Setup {
        Setup {
            stack: c.u8(),
            peer: c.u8(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.stack, self.peer]);
    }
}

impl SeqChoice {
    fn decode(c: &mut Cursor<'_>) -> SeqChoice {
        let (k, d) = (c.u8(), c.u16());
        match k & 3 {
            0 => SeqChoice::Ahead(d),
            1 => SeqChoice::Behind(d),
            2 => SeqChoice::WindowEdge(d),
            _ => SeqChoice::Far(d),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let (k, d) = match *self {
            SeqChoice::Ahead(d) => (0, d),
            SeqChoice::Behind(d) => (1, d),
            SeqChoice::WindowEdge(d) => (2, d),
            SeqChoice::Far(d) => (3, d),
        };
        out.push(k);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

impl AckChoice {
    fn decode(c: &mut Cursor<'_>) -> AckChoice {
        let (k, d) = (c.u8(), c.u16());
        match k % 4 {
            // Twice as likely: most ACKs are sane.
            0 | 3 => AckChoice::Received(d),
            1 => AckChoice::Future(d),
            _ => AckChoice::Far(d),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let (k, d) = match *self {
            AckChoice::Received(d) => (0, d),
            AckChoice::Future(d) => (1, d),
            AckChoice::Far(d) => (2, d),
        };
        out.push(k);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

impl OptChoice {
    fn decode(c: &mut Cursor<'_>) -> OptChoice {
        OptChoice {
            bits: c.u8(),
            sack: c.u16(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.bits);
        out.extend_from_slice(&self.sack.to_be_bytes());
    }
}

impl AppCall {
    fn from_byte(b: u8) -> AppCall {
        match b % 6 {
            0 => AppCall::Close,
            1 => AppCall::ShutdownWrite,
            2 => AppCall::Abort,
            3 => AppCall::NoDelay,
            4 => AppCall::WantWritable,
            _ => AppCall::MoveAway,
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            AppCall::Close => 0,
            AppCall::ShutdownWrite => 1,
            AppCall::Abort => 2,
            AppCall::NoDelay => 3,
            AppCall::WantWritable => 4,
            AppCall::MoveAway => 5,
        }
    }
}

impl Op {
    /// The next op, `None` at the end of the input.
    pub(crate) fn decode(c: &mut Cursor<'_>) -> Option<Op> {
        if c.is_empty() {
            return None;
        }
        let kind = c.u8() % OP_KINDS;
        Some(match kind {
            0 => Op::Data {
                conn: c.u8(),
                seq: SeqChoice::decode(c),
                len: c.u16(),
                fin: c.u8() & 1 != 0,
                ack: AckChoice::decode(c),
                window: c.u16(),
                opts: OptChoice::decode(c),
            },
            1 => Op::Ack {
                conn: c.u8(),
                ack: AckChoice::decode(c),
                window: c.u16(),
                opts: OptChoice::decode(c),
            },
            2 => Op::Rst {
                conn: c.u8(),
                seq: SeqChoice::decode(c),
                with_ack: c.u8() & 1 != 0,
            },
            3 => Op::Syn { conn: c.u8() },
            4 => Op::Connect,
            5 => {
                let (target, flags, seq, ack, window) = (c.u8(), c.u8(), c.u32(), c.u32(), c.u16());
                let options_len = c.u8() % 41;
                let mut options = [0; 40];
                let got = c.bytes(usize::from(options_len));
                options[..got.len()].copy_from_slice(got);
                Op::Raw {
                    target,
                    flags,
                    seq,
                    ack,
                    window,
                    options,
                    options_len,
                    payload_len: c.u16(),
                    truncate: c.u8(),
                }
            }
            6 => Op::Time { ms: c.u8() },
            7 => Op::Write {
                conn: c.u8(),
                len: c.u16(),
            },
            8 => Op::Read {
                conn: c.u8(),
                len: c.u16(),
                peek: c.u8() & 1 != 0,
            },
            9 => Op::App {
                conn: c.u8(),
                call: AppCall::from_byte(c.u8()),
            },
            10 => Op::Link {
                lose: c.u8() & 1 != 0,
                limit: c.u8(),
            },
            // Also 11: data with sane defaults is the most useful op, so it gets two kinds.
            _ => Op::Data {
                conn: c.u8(),
                seq: SeqChoice::Ahead(0),
                len: c.u16(),
                fin: false,
                ack: AckChoice::Received(0),
                window: 0xffff,
                opts: OptChoice { bits: 1, sack: 0 },
            },
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Op::Data {
                conn,
                seq,
                len,
                fin,
                ack,
                window,
                opts,
            } => {
                out.extend_from_slice(&[0, conn]);
                seq.encode(out);
                out.extend_from_slice(&len.to_be_bytes());
                out.push(u8::from(fin));
                ack.encode(out);
                out.extend_from_slice(&window.to_be_bytes());
                opts.encode(out);
            }
            Op::Ack {
                conn,
                ack,
                window,
                opts,
            } => {
                out.extend_from_slice(&[1, conn]);
                ack.encode(out);
                out.extend_from_slice(&window.to_be_bytes());
                opts.encode(out);
            }
            Op::Rst {
                conn,
                seq,
                with_ack,
            } => {
                out.extend_from_slice(&[2, conn]);
                seq.encode(out);
                out.push(u8::from(with_ack));
            }
            Op::Syn { conn } => out.extend_from_slice(&[3, conn]),
            Op::Connect => out.push(4),
            Op::Raw {
                target,
                flags,
                seq,
                ack,
                window,
                options,
                options_len,
                payload_len,
                truncate,
            } => {
                out.extend_from_slice(&[5, target, flags]);
                out.extend_from_slice(&seq.to_be_bytes());
                out.extend_from_slice(&ack.to_be_bytes());
                out.extend_from_slice(&window.to_be_bytes());
                let n = usize::from(options_len % 41);
                out.push(n as u8);
                out.extend_from_slice(&options[..n]);
                out.extend_from_slice(&payload_len.to_be_bytes());
                out.push(truncate);
            }
            Op::Time { ms } => out.extend_from_slice(&[6, ms]),
            Op::Write { conn, len } => {
                out.extend_from_slice(&[7, conn]);
                out.extend_from_slice(&len.to_be_bytes());
            }
            Op::Read { conn, len, peek } => {
                out.extend_from_slice(&[8, conn]);
                out.extend_from_slice(&len.to_be_bytes());
                out.push(u8::from(peek));
            }
            Op::App { conn, call } => out.extend_from_slice(&[9, conn, call.to_byte()]),
            Op::Link { lose, limit } => out.extend_from_slice(&[10, u8::from(lose), limit]),
        }
    }
}

/// The input bytes that decode to `setup` and `ops` (for seeds and generated inputs).
pub fn encode(setup: Setup, ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    setup.encode(&mut out);
    for op in ops {
        op.encode(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decodes_back() {
        let setup = Setup {
            stack: 0xa5,
            peer: 0x3c,
        };
        let mut options = [0; 40];
        options[..4].copy_from_slice(&[2, 4, 5, 0xb4]);
        let ops = [
            Op::Data {
                conn: 1,
                seq: SeqChoice::Behind(7),
                len: 300,
                fin: true,
                ack: AckChoice::Future(9),
                window: 0,
                opts: OptChoice {
                    bits: 9,
                    sack: 0x1234,
                },
            },
            Op::Ack {
                conn: 0,
                ack: AckChoice::Far(3),
                window: 5,
                opts: OptChoice::default(),
            },
            Op::Rst {
                conn: 2,
                seq: SeqChoice::WindowEdge(1),
                with_ack: true,
            },
            Op::Syn { conn: 4 },
            Op::Connect,
            Op::Raw {
                target: 0x81,
                flags: 0x12,
                seq: 1,
                ack: 2,
                window: 3,
                options,
                options_len: 4,
                payload_len: 10,
                truncate: 255,
            },
            Op::Time { ms: 3 },
            Op::Write { conn: 0, len: 999 },
            Op::Read {
                conn: 1,
                len: 5,
                peek: true,
            },
            Op::App {
                conn: 0,
                call: AppCall::MoveAway,
            },
            Op::Link {
                lose: true,
                limit: 2,
            },
        ];
        let bytes = encode(setup, &ops);
        let mut c = Cursor::new(&bytes);
        assert_eq!(Setup::decode(&mut c), setup);
        for op in &ops {
            assert_eq!(Op::decode(&mut c).as_ref(), Some(op));
        }
        assert_eq!(Op::decode(&mut c), None);
    }
}
