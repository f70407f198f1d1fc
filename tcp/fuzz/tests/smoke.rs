//! The CI smoke run of the `tcp_input` fuzz target: its body over the seed corpus (every
//! seed, and every truncation of the short ones) and over a deterministic pseudo-random set
//! of inputs, so that the target, its invariants and the seeds stay valid without a nightly
//! toolchain. The campaign itself is `scripts/fuzz.sh tcp_input`.
//!
//! The seeds are written by this file: `FLOWLANE_WRITE_SEEDS=1 cargo test -p
//! flowlane-tcp-fuzz --test smoke seed_files` rewrites `seeds/tcp_input/`.

use flowlane_tcp_fuzz::input::{encode, AckChoice, AppCall, Op, OptChoice, SeqChoice, Setup};
use flowlane_tcp_fuzz::{tcp_input_run, tcp_input_target};
use std::path::PathBuf;

/// SplitMix64 (as the simulator's), so that the random set is the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn u8(&mut self) -> u8 {
        self.next() as u8
    }
    fn u16(&mut self) -> u16 {
        self.next() as u16
    }
}

fn data(conn: u8, len: u16) -> Op {
    Op::Data {
        conn,
        seq: SeqChoice::Ahead(0),
        len,
        fin: false,
        ack: AckChoice::Received(0),
        window: 0xffff,
        opts: OptChoice { bits: 1, sack: 0 },
    }
}

fn ack(conn: u8) -> Op {
    Op::Ack {
        conn,
        ack: AckChoice::Received(0),
        window: 0xffff,
        opts: OptChoice { bits: 1, sack: 0 },
    }
}

fn fin(conn: u8) -> Op {
    Op::Data {
        conn,
        seq: SeqChoice::Ahead(0),
        len: 0,
        fin: true,
        ack: AckChoice::Received(0),
        window: 0xffff,
        opts: OptChoice { bits: 1, sack: 0 },
    }
}

fn read(conn: u8) -> Op {
    Op::Read {
        conn,
        len: 16384,
        peek: false,
    }
}

fn time(ms: u8) -> Op {
    Op::Time { ms }
}

/// Every option, both connections.
const FULL: Setup = Setup {
    stack: 0b1011_1001 | 0b0011_0000,
    peer: 0b0000_0111,
};

/// The seed corpus: named, hand-made inputs that each reach a different part of the stack.
fn seed_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut options = [0u8; 40];
    options[..12].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0]);
    vec![
        // Data both ways, read, then an orderly close from each side.
        (
            "transfer_close",
            encode(
                FULL,
                &[
                    data(0, 3000),
                    read(0),
                    Op::Write { conn: 1, len: 5000 },
                    ack(1),
                    time(4),
                    ack(1),
                    Op::App {
                        conn: 1,
                        call: AppCall::Close,
                    },
                    ack(1),
                    fin(1),
                    fin(0),
                    read(0),
                    Op::App {
                        conn: 0,
                        call: AppCall::Close,
                    },
                    ack(0),
                    time(12),
                ],
            ),
        ),
        // Out-of-order data with SACK, a hole filled later, duplicate ACKs and a loss.
        (
            "reorder_sack",
            encode(
                FULL,
                &[
                    Op::Data {
                        conn: 0,
                        seq: SeqChoice::Ahead(2000),
                        len: 1000,
                        fin: false,
                        ack: AckChoice::Received(0),
                        window: 0xffff,
                        opts: OptChoice { bits: 1, sack: 0 },
                    },
                    data(0, 2000),
                    read(0),
                    Op::Link {
                        lose: true,
                        limit: 0,
                    },
                    Op::Write {
                        conn: 0,
                        len: 20000,
                    },
                    Op::Ack {
                        conn: 0,
                        ack: AckChoice::Received(0),
                        window: 0xffff,
                        opts: OptChoice {
                            bits: 0x19,
                            sack: 0x0201,
                        },
                    },
                    Op::Ack {
                        conn: 0,
                        ack: AckChoice::Received(0),
                        window: 0xffff,
                        opts: OptChoice {
                            bits: 0x29,
                            sack: 0x1302,
                        },
                    },
                    time(6),
                    ack(0),
                    time(8),
                    ack(0),
                ],
            ),
        ),
        // RFC 5961: an in-window RST, a SYN and a far ACK (challenges), then the exact RST.
        (
            "blind_attacks",
            encode(
                FULL,
                &[
                    Op::Rst {
                        conn: 0,
                        seq: SeqChoice::Ahead(100),
                        with_ack: false,
                    },
                    Op::Syn { conn: 0 },
                    Op::Ack {
                        conn: 1,
                        ack: AckChoice::Far(0x4000),
                        window: 100,
                        opts: OptChoice::default(),
                    },
                    time(8),
                    Op::Rst {
                        conn: 1,
                        seq: SeqChoice::Ahead(0),
                        with_ack: true,
                    },
                ],
            ),
        ),
        // A SYN flood past a backlog of 2 with SYN cookies on, then a cookie completed.
        (
            "syn_cookies",
            encode(
                Setup {
                    stack: 0b0011_1001,
                    peer: 0b0010_0111,
                },
                &[
                    Op::Syn { conn: 9 },
                    Op::Syn { conn: 9 },
                    Op::Syn { conn: 9 },
                    Op::Syn { conn: 9 },
                    ack(3),
                    data(3, 100),
                    read(3),
                    time(14),
                    ack(2),
                ],
            ),
        ),
        // A zero window that the peer opens later, with Nagle off and small buffers.
        (
            "zero_window",
            encode(
                Setup {
                    stack: 0b1011_1011,
                    peer: 0b0101_0011,
                },
                &[
                    Op::Write {
                        conn: 1,
                        len: 30000,
                    },
                    Op::Ack {
                        conn: 1,
                        ack: AckChoice::Received(0),
                        window: 0,
                        opts: OptChoice { bits: 1, sack: 0 },
                    },
                    time(9),
                    time(10),
                    ack(1),
                    data(0, 4000),
                    data(0, 4000),
                    time(5),
                    read(0),
                ],
            ),
        ),
        // Raw segments: options of every kind, a truncated header, strangers, IPv6.
        (
            "raw_ipv6",
            encode(
                Setup {
                    stack: 0b0011_1101,
                    peer: 0b0000_0111,
                },
                &[
                    Op::Raw {
                        target: 0x40,
                        flags: 0x18,
                        seq: 0,
                        ack: 0,
                        window: 1000,
                        options,
                        options_len: 12,
                        payload_len: 10,
                        truncate: 0xff,
                    },
                    Op::Raw {
                        target: 0x81,
                        flags: 0x02,
                        seq: 7,
                        ack: 0,
                        window: 1000,
                        options,
                        options_len: 3,
                        payload_len: 0,
                        truncate: 0xff,
                    },
                    Op::Raw {
                        target: 0xc2,
                        flags: 0x10,
                        seq: 7,
                        ack: 9,
                        window: 1000,
                        options,
                        options_len: 0,
                        payload_len: 0,
                        truncate: 13,
                    },
                    data(0, 500),
                    read(0),
                ],
            ),
        ),
        // The application moves a connection (export/import), aborts the other, and
        // TIME-WAIT is reached and left.
        (
            "move_abort_timewait",
            encode(
                FULL,
                &[
                    data(0, 100),
                    Op::App {
                        conn: 0,
                        call: AppCall::MoveAway,
                    },
                    read(0),
                    Op::App {
                        conn: 1,
                        call: AppCall::Abort,
                    },
                    Op::App {
                        conn: 0,
                        call: AppCall::Close,
                    },
                    ack(0),
                    fin(0),
                    Op::Syn { conn: 0 },
                    time(13),
                    Op::Connect,
                    Op::Syn { conn: 2 },
                    data(2, 10),
                    read(2),
                ],
            ),
        ),
    ]
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/tcp_input")
}

#[test]
fn seed_files_are_current() {
    let dir = seed_dir();
    let write = std::env::var_os("FLOWLANE_WRITE_SEEDS").is_some();
    for (name, bytes) in seed_inputs() {
        let path = dir.join(format!("{name}.bin"));
        if write {
            std::fs::write(&path, &bytes).expect("write seed");
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            on_disk, bytes,
            "{name}: seed file out of date (FLOWLANE_WRITE_SEEDS=1 rewrites it)"
        );
    }
}

#[test]
fn tcp_input_seeds() {
    let mut files: Vec<_> = std::fs::read_dir(seed_dir())
        .expect("seed directory")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 7, "seed corpus missing: {}", files.len());
    for path in files {
        let data = std::fs::read(&path).expect("seed readable");
        tcp_input_target(&data);
        // Every truncation of the short seeds (ops cut anywhere decode as zeros).
        if data.len() <= 64 {
            for n in 0..data.len() {
                tcp_input_target(&data[..n]);
            }
        }
    }
}

/// A random op, weighted towards what reaches deep states.
fn random_op(r: &mut Rng) -> Op {
    let conn = r.below(4) as u8;
    let seq = match r.below(8) {
        0 => SeqChoice::Behind(r.u16() % 3000),
        1 => SeqChoice::Ahead(r.u16() % 6000),
        2 => SeqChoice::WindowEdge(r.u16()),
        3 => SeqChoice::Far(r.u16()),
        _ => SeqChoice::Ahead(0),
    };
    let ack = match r.below(8) {
        0 => AckChoice::Future(r.u16() % 100),
        1 => AckChoice::Far(r.u16()),
        2 => AckChoice::Received(0x8000 | r.u16()),
        _ => AckChoice::Received(0),
    };
    let window = if r.below(8) == 0 {
        r.u16() % 64
    } else {
        0xffff
    };
    let opts = OptChoice {
        bits: if r.below(4) == 0 { r.u8() } else { 1 },
        sack: r.u16(),
    };
    match r.below(20) {
        0..=5 => Op::Data {
            conn,
            seq,
            len: r.u16() % 3000,
            fin: r.below(16) == 0,
            ack,
            window,
            opts,
        },
        6..=8 => Op::Ack {
            conn,
            ack,
            window,
            opts,
        },
        9 => Op::Rst {
            conn,
            seq,
            with_ack: r.below(2) == 0,
        },
        10 => Op::Syn {
            conn: r.below(6) as u8,
        },
        11 => Op::Connect,
        12 => {
            let mut options = [0; 40];
            for b in &mut options {
                *b = r.u8() % 12;
            }
            Op::Raw {
                target: r.u8(),
                flags: r.u8(),
                seq: r.next() as u32,
                ack: r.next() as u32,
                window: r.u16(),
                options,
                options_len: r.u8() % 41,
                payload_len: r.u16() % 1000,
                truncate: r.u8(),
            }
        }
        13 | 14 => Op::Time { ms: r.u8() % 12 },
        15 | 16 => Op::Write {
            conn,
            len: r.u16() % 20000,
        },
        17 => Op::Read {
            conn,
            len: r.u16(),
            peek: r.below(2) == 0,
        },
        18 => Op::App {
            conn,
            call: match r.below(12) {
                0 => AppCall::Close,
                1 => AppCall::ShutdownWrite,
                2 => AppCall::Abort,
                3 | 4 => AppCall::NoDelay,
                5..=8 => AppCall::WantWritable,
                _ => AppCall::MoveAway,
            },
        },
        _ => Op::Link {
            lose: r.below(2) == 0,
            limit: if r.below(2) == 0 { 0 } else { r.u8() % 4 },
        },
    }
}

/// Inputs in the smoke run: bounded so that a debug build takes a few seconds.
const RANDOM_INPUTS: u64 = 3000;

#[test]
fn tcp_input_random() {
    // FLOWLANE_FUZZ_SEED=N runs only input N (with FLOWLANE_FUZZ_TRACE=1: traced).
    let only: Option<u64> = std::env::var("FLOWLANE_FUZZ_SEED")
        .ok()
        .map(|s| s.parse().expect("FLOWLANE_FUZZ_SEED: a number"));
    let mut reached = [
        "passive_opens",
        "active_opens",
        "bytes_in",
        "bytes_out",
        "predicted",
        "out_of_order",
        "retransmits",
        "fast_retransmits",
        "rto_timeouts",
        "loss_probes",
        "dup_acks",
        "unacceptable",
        "paws_rejected",
        "resets_in",
        "rst_challenged",
        "syn_challenged",
        "ack_unacceptable",
        "challenge_acks",
        "syn_cookies_sent",
        "window_probes",
        "malformed",
        "closed",
    ]
    .map(|n| (n, 0u64));
    for seed in 0..RANDOM_INPUTS {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let mut r = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x07c0_ffee);
        let setup = Setup {
            stack: r.u8(),
            peer: r.u8(),
        };
        let mut ops: Vec<Op> = Vec::new();
        for _ in 0..r.below(60) + 10 {
            if r.below(25) == 0 {
                // A loss and its repair: segments lost, then duplicate ACKs.
                let conn = r.below(2) as u8;
                ops.push(Op::Link {
                    lose: true,
                    limit: 1,
                });
                ops.push(Op::Write { conn, len: 20000 });
                ops.push(Op::Link {
                    lose: false,
                    limit: 0,
                });
                ops.push(Op::Time { ms: 0 });
                for _ in 0..4 {
                    ops.push(Op::Ack {
                        conn,
                        ack: AckChoice::Received(0),
                        window: 0xffff,
                        opts: OptChoice {
                            bits: 9,
                            sack: r.u16(),
                        },
                    });
                }
            } else {
                ops.push(random_op(&mut r));
            }
        }
        let bytes = encode(setup, &ops);
        // A failure names its input, to be added to the seeds as a reproducer.
        match std::panic::catch_unwind(|| tcp_input_run(&bytes)) {
            Ok(s) => {
                for (sum, v) in reached.iter_mut().zip(counters(&s)) {
                    sum.1 += v;
                }
            }
            Err(e) => {
                eprintln!("random input {seed} failed: setup {setup:?}, ops {ops:#?}");
                std::panic::resume_unwind(e);
            }
        }
    }
    // The inputs reach deep states: every one of these happened somewhere.
    if only.is_none() {
        for (name, n) in reached {
            eprintln!("{name}: {n}");
        }
        for (name, n) in reached {
            assert!(n > 0, "no random input reached {name}");
        }
    }
}

/// The counters the random set must move.
fn counters(s: &flowlane_tcp::Stats) -> [u64; 22] {
    [
        s.passive_opens,
        s.active_opens,
        s.bytes_in,
        s.bytes_out,
        s.predicted,
        s.out_of_order,
        s.retransmits,
        s.fast_retransmits,
        s.rto_timeouts,
        s.loss_probes,
        s.dup_acks,
        s.unacceptable,
        s.paws_rejected,
        s.resets_in,
        s.rst_challenged,
        s.syn_challenged,
        s.ack_unacceptable,
        s.challenge_acks,
        s.syn_cookies_sent,
        s.window_probes,
        s.malformed,
        s.closed,
    ]
}

/// Replays the inputs named in `FLOWLANE_FUZZ_INPUT` (paths separated by `:`, for example a
/// crash file from a campaign); with `FLOWLANE_FUZZ_TRACE=1` every op and segment is
/// printed. Nothing to do without it.
#[test]
fn replay() {
    let Some(paths) = std::env::var_os("FLOWLANE_FUZZ_INPUT") else {
        return;
    };
    for path in std::env::split_paths(&paths) {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        tcp_input_target(&data);
    }
}
