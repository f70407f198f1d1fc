//! Hostile and malformed segments thrown at stacks with live connections.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, Stack};
use proptest::prelude::*;
use sim::{Bulk, LinkConfig, Side, Sim, A_IP, B_IP};

#[derive(Debug, Clone)]
enum Op {
    /// Random bytes to one side.
    Garbage { to_b: bool, bytes: Vec<u8> },
    /// A captured segment, mutated.
    Mutate { pick: usize, kind: u8, val: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..80))
            .prop_map(|(to_b, bytes)| Op::Garbage { to_b, bytes }),
        (any::<usize>(), 0u8..12, any::<u32>()).prop_map(|(pick, kind, val)| Op::Mutate {
            pick,
            kind,
            val
        }),
    ]
}

/// Far enough from any window (ours are at most 64 KiB): 2^20..2^30.
fn far(val: u32) -> u32 {
    (1 << 20) + (val % ((1 << 30) - (1 << 20)))
}

fn add_be32(seg: &mut [u8], at: usize, d: u32) {
    let v = u32::from_be_bytes(seg[at..at + 4].try_into().unwrap()).wrapping_add(d);
    seg[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Applies mutation `kind`. `benign` restricts to mutations a correct stack
/// must shrug off without losing liveness (out-of-window, unparsable,
/// replays); otherwise in-window header mutations (spoofed RST, FIN, window,
/// options, flags) are allowed too, which may legitimately reset or stall a
/// connection but must never corrupt delivered bytes. The payload and, for
/// segments with payload, the sequence number and data offset are never
/// changed in place: an in-window data spoof is undetectable without the
/// checksum, which the IP layer owns.
fn mutate(seg: &mut Vec<u8>, kind: u8, val: u32, benign: bool) {
    // The tap also records earlier injections, which may be malformed.
    if seg.len() < 20 || seg[12] >> 4 < 5 {
        return;
    }
    let hl = ((seg[12] >> 4) as usize * 4).min(seg.len());
    let has_payload = seg.len() > hl;
    match kind {
        0 => seg[12] = (seg[12] & 0x0f) | (((val % 5) as u8) << 4), // offset < 5
        1 => {
            // Data offset beyond the segment.
            let words = (seg.len() / 4 + 1 + (val % 4) as usize).min(15) as u8;
            if words as usize * 4 > seg.len() {
                seg[12] = (seg[12] & 0x0f) | (words << 4);
            }
        }
        2 => add_be32(seg, 4, far(val)), // seq far away
        3 => add_be32(seg, 8, far(val)), // ack far away
        4 => {
            seg[13] |= 0x04; // RST far away
            add_be32(seg, 4, far(val));
        }
        5 => {
            seg[13] |= 0x02; // SYN far away
            add_be32(seg, 4, far(val));
        }
        6 => seg.truncate((val as usize) % hl.max(1)), // truncated
        7 => {}                                        // replay
        _ if benign => add_be32(seg, 4, far(val)),
        8 => seg[14..16].fill(0),          // zero window
        9 => seg[13] = (val as u8) & 0x3f, // any flags
        10 => {
            // Garbage options (may parse, may poison PAWS).
            for (i, b) in seg[20..hl].iter_mut().enumerate() {
                *b = (val >> (8 * (i % 4))) as u8 ^ i as u8;
            }
        }
        _ => {
            if !has_payload {
                seg[12] = (seg[12] & 0x0f) | (((val % 16) as u8) << 4);
            } else {
                seg[13] |= 0x04; // in-window RST
            }
        }
    }
}

fn run_hostile(seed: u64, ops: &[Op], benign: bool) -> (Sim, Bulk, bool) {
    let link = LinkConfig {
        loss: 0.01,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(seed, link);
    sim.tap = Some(Vec::new());
    let mut bulk = Bulk::start(&mut sim, 3, 40_000, 15_000);
    for op in ops {
        let until = sim.now + Duration::from_millis(7);
        sim.run_until(until, |s| {
            bulk.on_step(s);
            false
        });
        match op {
            Op::Garbage { to_b, bytes } => {
                let (to, src, dst) = if *to_b {
                    (Side::B, A_IP, B_IP)
                } else {
                    (Side::A, B_IP, A_IP)
                };
                sim.inject(to, src, dst, bytes);
            }
            Op::Mutate { pick, kind, val } => {
                let tap = sim.tap.as_ref().unwrap();
                if tap.is_empty() {
                    continue;
                }
                let (to, mut seg) = tap[pick % tap.len()].clone();
                mutate(&mut seg, *kind, *val, benign);
                let (src, dst) = if to == Side::B {
                    (A_IP, B_IP)
                } else {
                    (B_IP, A_IP)
                };
                sim.inject(to, src, dst, &seg);
            }
        }
    }
    sim.tap = None;
    let limit = sim.now + Duration::from_secs(1800);
    let done = sim.run_until(limit, |s| {
        bulk.on_step(s);
        bulk.finished()
    });
    (sim, bulk, done)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("SIM_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..Default::default()
    })]

    /// Any mix of garbage and mutated segments: no panic, and every byte an
    /// application reads is the right byte at the right offset.
    #[test]
    fn hostile_segments_never_corrupt_data(seed: u64, ops in proptest::collection::vec(op(), 1..60)) {
        let (_sim, bulk, _done) = run_hostile(seed, &ops, false);
        let bad: Vec<_> = bulk
            .errors
            .iter()
            .filter(|e| e.contains("bad byte") || e.contains(" > "))
            .collect();
        prop_assert!(bad.is_empty(), "{:?}", bad);
    }

    /// Out-of-window, unparsable and replayed segments change nothing: the
    /// transfer completes and closes cleanly.
    #[test]
    fn out_of_window_segments_are_harmless(seed: u64, ops in proptest::collection::vec(op(), 1..60)) {
        let (sim, bulk, done) = run_hostile(seed, &ops, true);
        prop_assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
        prop_assert!(done, "stalled: A {:?} B {:?}", sim.a.stats(), sim.b.stats());
    }

    /// Random bytes at a bare stack (with a listener): never a panic, and
    /// whatever comes back out parses.
    #[test]
    fn random_bytes_at_listener(segs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 1..50)) {
        let mut stack = Stack::new(Config::new([3; 16]));
        stack.listen("10.0.0.2:80".parse().unwrap()).unwrap();
        let mut now = Instant::ZERO;
        let mut buf = [0u8; 1500];
        for mut s in segs {
            if s.len() >= 4 {
                s[2..4].copy_from_slice(&80u16.to_be_bytes());
            }
            stack.handle_segment(now, A_IP, B_IP, &s);
            while let Some(t) = stack.poll_transmit(now, &mut buf) {
                prop_assert!(flowlane_wire::TcpRepr::parse_segment(&buf[..t.len]).is_ok());
            }
            now += Duration::from_millis(100);
            stack.handle_timeout(now);
        }
    }
}

/// A bare TCP header (no options) with `payload`: the checksum is left to
/// [`Sim::inject`].
fn raw_segment(src: u16, dst: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8; 20];
    s[0..2].copy_from_slice(&src.to_be_bytes());
    s[2..4].copy_from_slice(&dst.to_be_bytes());
    s[4..8].copy_from_slice(&seq.to_be_bytes());
    s[8..12].copy_from_slice(&ack.to_be_bytes());
    s[12] = 5 << 4;
    s[13] = 0x18; // ACK | PSH
    s[14..16].copy_from_slice(&65_535u16.to_be_bytes());
    s.extend_from_slice(payload);
    s
}

/// The stack finds a run's later segments through the slot of the run's
/// first (without hashing); once that connection is gone and its slot holds
/// the next one, a segment of the old tuple must still find no connection
/// (and be answered with an RST), never the slot's new tenant.
#[test]
fn old_tuple_never_reaches_the_connection_that_took_its_slot() {
    use flowlane_tcp::Event;
    use std::net::SocketAddr;
    let mut sim = Sim::symmetric(7, LinkConfig::default());
    let (a, b) = sim.establish();
    sim.a.send(a, b"first").expect("send");
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim::read_all(&mut sim.b, b), b"first");
    // A's RST (B's last segment) frees B's slot.
    sim.a.abort(a).expect("abort");
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.b.connection_count(), 0);
    // The application takes the `Closed` (until then the slot is held for
    // it); the next connection takes the slot (the free list is LIFO).
    assert!(sim::events(&mut sim.b)
        .iter()
        .any(|e| matches!(e, Event::Closed { conn, .. } if *conn == b)));
    sim.tap = Some(Vec::new());
    let a2 = sim
        .a
        .connect(
            sim.now,
            SocketAddr::new(A_IP, 10001),
            SocketAddr::new(B_IP, 80),
        )
        .expect("connect");
    sim.run_for(Duration::from_millis(100));
    let b2 = sim::events(&mut sim.b)
        .into_iter()
        .find_map(|e| match e {
            Event::Accepted { conn, .. } => Some(conn),
            _ => None,
        })
        .expect("accepted");
    assert_eq!(b2.index(), b.index(), "the new connection reuses the slot");
    // The new connection's next sequence and acknowledgment numbers, from
    // the handshake's last segment (A's bare ACK).
    let tap = sim.tap.take().expect("tap");
    let (_, ack) = tap
        .iter()
        .rev()
        .find(|(side, seg)| *side == Side::B && seg.len() >= 20)
        .expect("A's ACK");
    let be32 = |at: usize| u32::from_be_bytes(ack[at..at + 4].try_into().expect("4 bytes"));
    let (seq, ackn) = (be32(4), be32(8));
    let resets = sim.b.stats().resets_out;
    // A segment of the old tuple, in sequence for the new connection: it
    // would be taken were the tuple not checked.
    let stale = raw_segment(10000, 80, seq, ackn, b"stale");
    sim.inject(Side::B, A_IP, B_IP, &stale);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.b.stats().resets_out, resets + 1, "answered with an RST");
    assert_eq!(
        sim.b.stats().resets_listener_ack,
        1,
        "an ACK the listener took for no connection of its own"
    );
    assert!(sim::read_all(&mut sim.b, b2).is_empty());
    // The new connection carries on.
    sim.a.send(a2, b"second").expect("send");
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim::read_all(&mut sim.b, b2), b"second");
}

/// What a listener drops for its flags is counted (`bad_flags`): an RST
/// (ignored, RFC 9293 §3.10.7.2), a segment with neither SYN nor ACK, a
/// SYN with FIN; nothing is sent back and no connection is made.
#[test]
fn a_listener_counts_what_it_drops_for_its_flags() {
    let mut sim = Sim::symmetric(42, LinkConfig::default());
    sim.establish(); // (B's listener on port 80)
    sim.tap = Some(Vec::new());
    for (i, flags) in [0x04u8, 0x01, 0x03, 0x10 | 0x04].into_iter().enumerate() {
        let mut s = raw_segment(20_000 + i as u16, 80, 1000, 0, b"");
        s[13] = flags; // RST; FIN; SYN|FIN; ACK|RST
        sim.inject(Side::B, A_IP, B_IP, &s);
    }
    sim.run_for(Duration::from_millis(10));
    let st = sim.b.stats();
    assert_eq!(st.bad_flags, 4, "{st:?}");
    assert_eq!(sim.b.connection_count(), 1, "only the one established");
    assert!(sim.tapped_to(Side::A).is_empty(), "nothing answered");
}
