//! ECN (RFC 3168) in the deterministic simulator: the handshake negotiates
//! it only when both ends agree (§6.1.1, SYN cookies included), new data
//! goes out ECT(0) and everything else Not-ECT (§6.1.4 to §6.1.6), a CE mark
//! is echoed with ECE until the sender's CWR (§6.1.3), and the sender
//! reduces its window once per window of data, retransmitting nothing
//! (§6.1.2); a connection without ECN ignores ECE; a snapshot keeps it all.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{Config, ConnHandle, Ecn, EcnMode, Stack, Stats};
use flowlane_wire::tcp::TcpFlags;
use flowlane_wire::TcpRepr;
use sim::{LinkConfig, Side, Sim, A_IP, B_IP};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

/// One emitted segment, as the link saw it.
#[derive(Debug, Clone, Copy)]
struct Seg {
    side: Side,
    /// The codepoint the stack chose ([`flowlane_tcp::Transmit::ecn`]).
    ecn: Ecn,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    len: usize,
}

impl Seg {
    fn has(&self, f: TcpFlags) -> bool {
        self.flags.contains(f)
    }
}

type Log = Rc<RefCell<Vec<Seg>>>;

fn config(secret: u8, ecn: EcnMode) -> Config {
    let mut c = sim::test_config(secret);
    c.ecn = ecn;
    c
}

/// A simulator whose link logs every segment and marks CE on those
/// `mark` picks (if they are ECN-capable, as a router would).
fn sim_with(a: Config, b: Config, mut mark: impl FnMut(&Seg) -> bool + 'static) -> (Sim, Log) {
    // A bottleneck spaces the segments out, so that the receiver sends
    // ACKs between them rather than one per burst.
    let link = LinkConfig {
        bandwidth_bps: 100_000_000,
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(1, link, link, a, b);
    let log: Log = Rc::default();
    let l = log.clone();
    sim.ecn_filter = Some(Box::new(move |side, ecn, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        let seg = Seg {
            side,
            ecn,
            flags: r.flags,
            seq: r.seq,
            ack: r.ack,
            len: payload.len(),
        };
        l.borrow_mut().push(seg);
        if ecn.is_ect() && mark(&seg) {
            Ecn::Ce
        } else {
            ecn
        }
    }));
    (sim, log)
}

/// Sends `bytes` from A to B and reads them at B; returns the handles.
fn transfer(sim: &mut Sim, bytes: usize) -> (ConnHandle, ConnHandle) {
    let (a, b) = sim.establish();
    let data: Vec<u8> = (0..bytes).map(|i| sim::pattern(0, i as u64)).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let limit = sim.now + Duration::from_secs(60);
    let done = sim.run_until(limit, |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        got.extend(sim::read_all(&mut s.b, b));
        got.len() == data.len()
    });
    assert!(
        done && got == data,
        "{} of {bytes} bytes arrived",
        got.len()
    );
    (a, b)
}

fn syn_and_syn_ack(log: &Log) -> (Seg, Seg) {
    let log = log.borrow();
    let syn = *log
        .iter()
        .find(|s| s.has(TcpFlags::SYN) && !s.has(TcpFlags::ACK))
        .unwrap();
    let syn_ack = *log
        .iter()
        .find(|s| s.has(TcpFlags::SYN | TcpFlags::ACK))
        .unwrap();
    (syn, syn_ack)
}

const ECE_CWR: TcpFlags = TcpFlags(TcpFlags::ECE.0 | TcpFlags::CWR.0);

#[test]
fn negotiated_when_asked_and_accepted() {
    let (mut sim, log) = sim_with(config(1, EcnMode::On), config(2, EcnMode::Accept), |_| {
        false
    });
    transfer(&mut sim, 100_000);
    let (syn, syn_ack) = syn_and_syn_ack(&log);
    // RFC 3168 §6.1.1: an ECN-setup SYN, an ECN-setup SYN-ACK (ECE only),
    // both Not-ECT.
    assert!(syn.has(ECE_CWR), "{syn:?}");
    assert!(
        syn_ack.has(TcpFlags::ECE) && !syn_ack.has(TcpFlags::CWR),
        "{syn_ack:?}"
    );
    assert_eq!((syn.ecn, syn_ack.ecn), (Ecn::NotEct, Ecn::NotEct));
    assert_eq!(sim.a.stats().ecn_negotiated, 1);
    assert_eq!(sim.b.stats().ecn_negotiated, 1);
    // Both ends ECN-capable: A's new data goes out ECT(0).
    assert!(log
        .borrow()
        .iter()
        .any(|s| s.side == Side::A && s.len > 0 && s.ecn == Ecn::Ect0));
}

#[test]
fn not_negotiated_unless_both_agree() {
    // (A, B, whether A's SYN asks): the default does not ask; Off refuses.
    for (a, b, asks) in [
        (EcnMode::Accept, EcnMode::Accept, false),
        (EcnMode::Off, EcnMode::On, false),
        (EcnMode::On, EcnMode::Off, true),
    ] {
        let (mut sim, log) = sim_with(config(1, a), config(2, b), |_| false);
        transfer(&mut sim, 50_000);
        let (syn, syn_ack) = syn_and_syn_ack(&log);
        assert_eq!(syn.has(ECE_CWR), asks, "{a:?} {b:?}");
        assert!(!syn_ack.has(TcpFlags::ECE), "{a:?} {b:?}");
        assert_eq!(
            sim.a.stats().ecn_negotiated + sim.b.stats().ecn_negotiated,
            0
        );
        // Nothing ECN-capable on the wire, nothing echoed.
        for s in log.borrow().iter() {
            assert_eq!(s.ecn, Ecn::NotEct, "{a:?} {b:?}: {s:?}");
            assert!(!s.has(TcpFlags::CWR) || s.has(TcpFlags::SYN), "{s:?}");
        }
    }
}

/// Runs A's half of a handshake by hand against a forged SYN-ACK with the
/// given flags; returns whether A then sends data ECT(0).
fn active_open_against(syn_ack_flags: TcpFlags) -> bool {
    let mut a = Stack::new(config(1, EcnMode::On));
    let now = flowlane_tcp::time::Instant::from_millis(1);
    let (local, remote) = (SocketAddr::new(A_IP, 10000), SocketAddr::new(B_IP, 80));
    let h = a.connect(now, local, remote).unwrap();
    let mut buf = [0u8; 2000];
    let t = a.poll_transmit(now, &mut buf).unwrap();
    let (syn, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    let reply = TcpRepr {
        src_port: 80,
        dst_port: 10000,
        seq: 5000,
        ack: syn.seq.wrapping_add(1),
        flags: syn_ack_flags,
        window: 65535,
        urgent: 0,
        options: Default::default(),
    };
    a.handle_tcp(now, B_IP, A_IP, &reply, &[]);
    a.send(h, &[7; 1000]).unwrap();
    let mut ect = false;
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        let (_, payload) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
        ect |= !payload.is_empty() && t.ecn == Ecn::Ect0;
    }
    ect
}

#[test]
fn a_syn_ack_reflecting_ece_and_cwr_does_not_negotiate() {
    let syn_ack = TcpFlags::SYN | TcpFlags::ACK;
    assert!(active_open_against(syn_ack | TcpFlags::ECE));
    // RFC 3168 §6.1.1: ECE and CWR both set is not an ECN-setup SYN-ACK.
    assert!(!active_open_against(syn_ack | ECE_CWR));
    assert!(!active_open_against(syn_ack));
}

#[test]
fn syn_cookies_keep_ecn_when_the_client_uses_timestamps() {
    for timestamps in [true, false] {
        let mut a = config(1, EcnMode::On);
        a.timestamps = timestamps;
        let mut b = config(2, EcnMode::Accept);
        b.listen_backlog = 0; // every SYN answered with a cookie
        let (mut sim, log) = sim_with(a, b, |_| false);
        transfer(&mut sim, 50_000);
        assert_eq!(sim.b.stats().syn_cookies_accepted, 1);
        let (_, syn_ack) = syn_and_syn_ack(&log);
        assert_eq!(syn_ack.has(TcpFlags::ECE), timestamps);
        assert_eq!(sim.a.stats().ecn_negotiated, u64::from(timestamps));
        assert_eq!(sim.b.stats().ecn_negotiated, u64::from(timestamps));
    }
}

#[test]
fn only_new_data_is_ect() {
    // One data segment lost once: its retransmission must be Not-ECT.
    let (mut sim, log) = sim_with(config(1, EcnMode::On), config(2, EcnMode::Accept), |_| {
        false
    });
    let mut dropped = None;
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).unwrap();
        if side == Side::A && payload.len() > 1000 && dropped.is_none() && r.seq % 7 == 3 {
            dropped = Some(r.seq);
            return true;
        }
        false
    }));
    let (_, _) = transfer(&mut sim, 400_000);
    assert!(sim.a.stats().retransmits > 0);
    let mut seen = std::collections::HashSet::new();
    let (mut ect, mut rtx) = (0, 0);
    for s in log.borrow().iter() {
        if s.has(TcpFlags::SYN) || s.len == 0 {
            // SYN, SYN-ACK, pure ACKs (RFC 3168 §6.1.1, §6.1.4).
            assert_eq!(s.ecn, Ecn::NotEct, "{s:?}");
        } else if !seen.insert(s.seq) {
            // RFC 3168 §6.1.5: retransmissions are Not-ECT.
            assert_eq!(s.ecn, Ecn::NotEct, "{s:?}");
            rtx += 1;
        } else {
            assert_eq!(s.ecn, Ecn::Ect0, "{s:?}");
            ect += 1;
        }
    }
    assert!(ect > 100 && rtx > 0, "{ect} {rtx}");
}

#[test]
fn window_probes_are_not_ect() {
    let mut b = config(2, EcnMode::Accept);
    b.recv_buffer = 16 << 10;
    b.recv_buffer_max = 16 << 10;
    let (mut sim, log) = sim_with(config(1, EcnMode::On), b, |_| false);
    let (a, _b) = sim.establish();
    // B never reads: its window closes, A probes it (RFC 9293 §3.8.6.1).
    sim.a.send(a, &vec![1; 60_000]).unwrap();
    sim.run_for(Duration::from_secs(20));
    assert!(sim.a.stats().window_probes > 0);
    let probes: Vec<Seg> = log
        .borrow()
        .iter()
        .filter(|s| s.side == Side::A && s.len == 1)
        .copied()
        .collect();
    assert!(!probes.is_empty());
    // RFC 3168 §6.1.6.
    assert!(probes.iter().all(|s| s.ecn == Ecn::NotEct), "{probes:?}");
}

/// The A data segments at or after `from` whose first byte is at offset
/// `at` (relative to A's ISS) get CE.
fn mark_at(offsets: Vec<u32>) -> impl FnMut(&Seg) -> bool {
    let mut iss = None;
    let mut marked = Vec::new();
    move |s: &Seg| {
        if s.side != Side::A {
            return false;
        }
        let base = *iss.get_or_insert(s.seq.wrapping_sub(1));
        let off = s.seq.wrapping_sub(base).wrapping_sub(1);
        let hit = s.len > 0
            && offsets
                .iter()
                .any(|&o| off <= o && o < off + s.len as u32 && !marked.contains(&o));
        if hit {
            marked.extend(
                offsets
                    .iter()
                    .filter(|&&o| off <= o && o < off + s.len as u32),
            );
        }
        hit
    }
}

/// The A segment that carried `offset`'s byte first.
fn carrying(log: &[Seg], iss: u32, offset: u32) -> Seg {
    *log.iter()
        .find(|s| {
            let off = s.seq.wrapping_sub(iss).wrapping_sub(1);
            s.side == Side::A && s.len > 0 && off <= offset && offset < off + s.len as u32
        })
        .unwrap()
}

fn a_iss(log: &[Seg]) -> u32 {
    log.iter()
        .find(|s| s.side == Side::A && s.has(TcpFlags::SYN))
        .unwrap()
        .seq
}

#[test]
fn a_ce_mark_is_echoed_until_cwr_and_reduces_the_window_once() {
    // Three segments of one window marked.
    let offset = 200_000;
    let (mut sim, log) = sim_with(
        config(1, EcnMode::On),
        config(2, EcnMode::Accept),
        mark_at(vec![offset, offset + 3000, offset + 6000]),
    );
    transfer(&mut sim, 600_000);
    let log = log.borrow();
    let iss = a_iss(&log);
    let ce = carrying(&log, iss, offset);
    let (a, b): (&Stats, &Stats) = (sim.a.stats(), sim.b.stats());
    assert_eq!(b.ce_received, 3);
    // RFC 3168 §6.1.2: one reduction, no retransmission.
    assert_eq!(a.ecn_cwnd_reductions, 1, "{a:?}");
    assert_eq!(a.retransmits, 0);
    // Exactly one CWR, on new data, after the mark.
    let cwrs: Vec<&Seg> = log
        .iter()
        .filter(|s| s.side == Side::A && s.has(TcpFlags::CWR) && !s.has(TcpFlags::SYN))
        .collect();
    assert_eq!(cwrs.len(), 1, "{cwrs:?}");
    let cwr = *cwrs[0];
    assert!(cwr.len > 0 && cwr.ecn == Ecn::Ect0);
    assert!((cwr.seq.wrapping_sub(ce.seq) as i32) > 0);
    // RFC 3168 §6.1.3: B's segments acknowledging the marked segment carry
    // ECE until they acknowledge the CWR segment; none before or after.
    let mut echoed = 0;
    for s in log
        .iter()
        .filter(|s| s.side == Side::B && !s.has(TcpFlags::SYN))
    {
        let past_ce = (s.ack.wrapping_sub(ce.seq) as i32) > 0;
        let past_cwr = (s.ack.wrapping_sub(cwr.seq) as i32) > 0;
        let want = past_ce && !past_cwr;
        assert_eq!(
            s.has(TcpFlags::ECE),
            want,
            "{s:?} (CE at {}, CWR at {})",
            ce.seq,
            cwr.seq
        );
        echoed += usize::from(want);
    }
    // Several ACKs echoed it, one reduction: once per window.
    assert!(echoed > 1, "{echoed}");
}

#[test]
fn marks_in_two_windows_reduce_twice() {
    let (mut sim, log) = sim_with(
        config(1, EcnMode::On),
        config(2, EcnMode::Accept),
        mark_at(vec![100_000, 100_002, 900_000]),
    );
    transfer(&mut sim, 1_200_000);
    let a = sim.a.stats();
    assert_eq!(sim.b.stats().ce_received, 2, "two segments marked");
    assert_eq!(a.ecn_cwnd_reductions, 2, "{a:?}");
    assert_eq!(a.retransmits, 0);
    let cwrs = log
        .borrow()
        .iter()
        .filter(|s| s.side == Side::A && s.has(TcpFlags::CWR) && !s.has(TcpFlags::SYN))
        .count();
    assert_eq!(cwrs, 2);
}

#[test]
fn a_window_reduced_for_a_loss_is_announced_with_cwr() {
    // RFC 3168 §6.1.2: CWR follows a reduction "for any reason": here a
    // fast retransmit, with no CE mark anywhere.
    let (mut sim, log) = sim_with(config(1, EcnMode::On), config(2, EcnMode::Accept), |_| {
        false
    });
    let (mut iss, mut dropped) = (None, None);
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        if side != Side::A {
            return false;
        }
        let base = *iss.get_or_insert(r.seq);
        let off = r.seq.wrapping_sub(base).wrapping_sub(1);
        // The first data segment from byte 300 000 on is lost, once.
        let lose = dropped.is_none() && !payload.is_empty() && off >= 300_000;
        if lose {
            dropped = Some(r.seq);
        }
        lose
    }));
    transfer(&mut sim, 600_000);
    let a = sim.a.stats();
    assert_eq!(a.ecn_cwnd_reductions, 0, "{a:?}");
    assert!(a.fast_retransmits + a.rack_lost >= 1, "{a:?}");
    let log = log.borrow();
    let iss = a_iss(&log);
    let lost = carrying(&log, iss, 300_000);
    let cwrs: Vec<&Seg> = log
        .iter()
        .filter(|s| s.side == Side::A && s.has(TcpFlags::CWR) && !s.has(TcpFlags::SYN))
        .collect();
    // One reduction, one CWR, on new data (ECT(0)) sent after the loss.
    assert_eq!(cwrs.len(), 1, "{cwrs:?}");
    assert!(cwrs[0].len > 0 && cwrs[0].ecn == Ecn::Ect0);
    assert!((cwrs[0].seq.wrapping_sub(lost.seq) as i32) > 0);
}

/// Drives two stacks in lockstep (no delay), letting `edit` change each
/// segment (its bytes and its codepoint) on the way.
fn lockstep(a: &mut Stack, b: &mut Stack, mut edit: impl FnMut(Side, &mut [u8], &mut Ecn)) {
    let now = flowlane_tcp::time::Instant::from_millis(5);
    let mut buf = vec![0u8; 2000];
    loop {
        let mut moved = false;
        for side in [Side::A, Side::B] {
            let (from, to) = if side == Side::A {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while let Some(t) = from.poll_transmit(now, &mut buf) {
                let mut ecn = t.ecn;
                edit(side, &mut buf[..t.len], &mut ecn);
                to.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), ecn, &buf[..t.len]);
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

fn lockstep_pair(a_mode: EcnMode) -> (Stack, Stack, ConnHandle, ConnHandle) {
    let mut a = Stack::new(config(1, a_mode));
    let mut b = Stack::new(config(2, EcnMode::Accept));
    let now = flowlane_tcp::time::Instant::from_millis(5);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let ha = a
        .connect(now, SocketAddr::new(A_IP, 10000), SocketAddr::new(B_IP, 80))
        .unwrap();
    lockstep(&mut a, &mut b, |_, _, _| {});
    let hb = std::iter::from_fn(|| b.poll_event())
        .find_map(|e| match e {
            flowlane_tcp::Event::Accepted { conn, .. } => Some(conn),
            _ => None,
        })
        .unwrap();
    (a, b, ha, hb)
}

#[test]
fn ece_is_ignored_without_ecn() {
    for (mode, want) in [(EcnMode::Accept, false), (EcnMode::On, true)] {
        let (mut a, mut b, ha, hb) = lockstep_pair(mode);
        for _ in 0..20 {
            let _ = a.send(ha, &vec![3; 20_000]);
            // Every segment of B's forged with ECE.
            lockstep(&mut a, &mut b, |side, bytes, _| {
                if side == Side::B {
                    bytes[13] |= TcpFlags::ECE.0;
                }
            });
            sim::read_all(&mut b, hb);
        }
        assert_eq!(a.stats().ecn_cwnd_reductions > 0, want, "{mode:?}");
    }
}

#[test]
fn ecn_state_survives_a_snapshot() {
    let (mut a, mut b, ha, hb) = lockstep_pair(EcnMode::On);
    a.send(ha, &[9; 1000]).unwrap();
    // The data arrives marked CE: B now owes ECE.
    let mut buf = vec![0u8; 2000];
    let now = flowlane_tcp::time::Instant::from_millis(6);
    let t = a.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(t.ecn, Ecn::Ect0);
    b.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), Ecn::Ce, &buf[..t.len]);
    assert_eq!(b.stats().ce_received, 1);
    // B's connection moves to another stack before it answers.
    let snap = b.export(hb).unwrap();
    let mut b2 = Stack::new(config(2, EcnMode::Accept));
    let hb2 = b2.import(now, snap).unwrap();
    let t = b2.poll_transmit(now, &mut buf).expect("the ACK");
    let (ack, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    assert!(ack.flags.contains(TcpFlags::ECE), "{:?}", ack.flags);
    // A answers with CWR on its next new data, after moving too.
    a.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
    assert_eq!(a.stats().ecn_cwnd_reductions, 1);
    let snap = a.export(ha).unwrap();
    let mut a2 = Stack::new(config(1, EcnMode::On));
    let ha2 = a2.import(now, snap).unwrap();
    a2.send(ha2, &[8; 1000]).unwrap();
    let t = a2.poll_transmit(now, &mut buf).unwrap();
    let (data, payload) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    assert!(!payload.is_empty() && data.flags.contains(TcpFlags::CWR));
    assert_eq!(t.ecn, Ecn::Ect0);
    // B's new home stops echoing once the CWR arrives.
    b2.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), t.ecn, &buf[..t.len]);
    let _ = b2.recv(hb2, &mut [0u8; 4096]);
    let mut echoed = false;
    while let Some(t) = b2.poll_transmit(now, &mut buf) {
        let (r, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
        echoed |= r.flags.contains(TcpFlags::ECE);
    }
    assert!(!echoed);
}

#[test]
fn a_loss_in_a_window_an_echo_reduced_does_not_reduce_it_again() {
    // RFC 3168 §6.1.2: drops and CE marks of one window reduce it once.
    // The segment at 300 000 is marked CE; the echo reduces the window
    // and the next new data carries CWR. A first run finds that segment;
    // the second (the simulator is deterministic) also loses the one sent
    // just before it: the last of the reduced window, whose loss shows
    // only after the CWR went out. It is repaired without a second
    // reduction. Every reduction of an ECN connection is announced with
    // CWR (see a_window_reduced_for_a_loss_is_announced_with_cwr), so one
    // CWR means one reduction.
    let (a, cwrs) = run_losing(|_, _| false);
    assert_eq!(
        (a.ecn_cwnd_reductions, a.retransmits, cwrs.len()),
        (1, 0, 1)
    );
    let cwr = cwrs[0].seq;
    let (a, cwrs) = run_losing(move |_, end| end == cwr);
    assert_eq!(a.ecn_cwnd_reductions, 1, "{a:?}");
    assert!(a.fast_retransmits + a.rack_lost >= 1, "{a:?}");
    assert_eq!(cwrs.len(), 1, "{cwrs:?} {a:?}");
}

#[test]
fn a_loss_of_the_data_sent_after_an_echo_reduces_the_window_again() {
    // The segment that carried CWR is the first of the next window: its
    // loss is new congestion and reduces the window again, announced with
    // a second CWR (Linux ends its CWR state once SND.UNA reaches it). Its
    // duplicate ACKs acknowledge exactly the end of the reduced window,
    // which the hold for that window's echoes still covers.
    let (_, cwrs) = run_losing(|_, _| false);
    let cwr = cwrs[0].seq;
    let (a, cwrs) = run_losing(move |seq, _| seq == cwr);
    assert_eq!(a.ecn_cwnd_reductions, 1, "{a:?}");
    assert!(a.fast_retransmits + a.rack_lost >= 1, "{a:?}");
    assert_eq!(cwrs.len(), 2, "{cwrs:?} {a:?}");
}

/// A 3 MB transfer from A to B whose segment at 300 000 is marked CE,
/// where the first of A's data segments for which `lose(seq, end)` holds
/// is lost; A's stats and the data segments it sent with CWR.
fn run_losing(lose: impl Fn(u32, u32) -> bool + 'static) -> (Stats, Vec<Seg>) {
    let (mut sim, log) = sim_with(
        config(1, EcnMode::On),
        config(2, EcnMode::Accept),
        mark_at(vec![300_000]),
    );
    let mut lost = false;
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        let end = r.seq.wrapping_add(payload.len() as u32);
        let drop = side == Side::A && !lost && !payload.is_empty() && lose(r.seq, end);
        lost |= drop;
        drop
    }));
    transfer(&mut sim, 3_000_000);
    let cwrs = log
        .borrow()
        .iter()
        .filter(|s| s.side == Side::A && s.has(TcpFlags::CWR) && !s.has(TcpFlags::SYN))
        .copied()
        .collect();
    (*sim.a.stats(), cwrs)
}

#[test]
fn a_ce_mark_on_data_riding_the_cookie_ack_is_echoed() {
    let mut a = Stack::new(config(1, EcnMode::On));
    let mut b_cfg = config(2, EcnMode::Accept);
    b_cfg.listen_backlog = 0; // every SYN answered with a cookie
    let mut b = Stack::new(b_cfg);
    let now = flowlane_tcp::time::Instant::from_millis(5);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let ha = a
        .connect(now, SocketAddr::new(A_IP, 10000), SocketAddr::new(B_IP, 80))
        .unwrap();
    let mut buf = vec![0u8; 2000];
    let pass = |from: &mut Stack, to: &mut Stack, ecn: Option<Ecn>| {
        let mut buf = [0u8; 2000];
        let t = from.poll_transmit(now, &mut buf).expect("a segment");
        let ecn = ecn.unwrap_or(t.ecn);
        to.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), ecn, &buf[..t.len]);
    };
    pass(&mut a, &mut b, None); // SYN
    pass(&mut b, &mut a, None); // cookie SYN-ACK
    assert!(a.poll_transmit(now, &mut buf).is_some(), "A's ACK, lost");
    a.send(ha, &[5; 1000]).unwrap();
    pass(&mut a, &mut b, Some(Ecn::Ce)); // the data, marked on the way
    let s = b.stats();
    assert_eq!((s.syn_cookies_accepted, s.ce_received), (1, 1), "{s:?}");
    let t = b.poll_transmit(now, &mut buf).expect("B's ACK");
    let (ack, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    assert!(ack.flags.contains(TcpFlags::ECE), "{:?}", ack.flags);
}

/// Where a segment's TSval lies in its bytes (the timestamp option).
fn tsval_at(bytes: &[u8]) -> usize {
    let end = usize::from(bytes[12] >> 4) * 4;
    let mut i = 20;
    while i < end {
        match bytes[i] {
            0 => break,
            1 => i += 1,
            8 => return i + 2,
            _ => i += usize::from(bytes[i + 1]).max(2),
        }
    }
    panic!("no timestamp option");
}

#[test]
fn an_echo_on_a_segment_paws_drops_reduces_nothing() {
    // RFC 7323 §5.3 R1: a segment with a TSval older than TS.Recent is an
    // old duplicate and is dropped; its ECE is not the peer's echo of
    // anything A sent now. B's ACK of A's data arrives twice: first a
    // stale copy carrying ECE (dropped, counted), then the real one.
    let (mut a, mut b, ha, _hb) = lockstep_pair(EcnMode::On);
    let now = flowlane_tcp::time::Instant::from_millis(5);
    let mut buf = vec![0u8; 2000];
    a.send(ha, &[1; 3000]).unwrap();
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        b.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), t.ecn, &buf[..t.len]);
    }
    let t = b.poll_transmit(now, &mut buf).expect("B's ACK");
    let ack = buf[..t.len].to_vec();
    let mut stale = ack.clone();
    stale[13] |= TcpFlags::ECE.0;
    let at = tsval_at(&stale);
    let tsval = u32::from_be_bytes(stale[at..at + 4].try_into().unwrap());
    stale[at..at + 4].copy_from_slice(&tsval.wrapping_sub(1000).to_be_bytes());
    a.handle_segment(now, t.src.ip(), t.dst.ip(), &stale);
    assert_eq!(a.stats().paws_rejected, 1);
    a.handle_segment(now, t.src.ip(), t.dst.ip(), &ack);
    assert_eq!(a.stats().ecn_cwnd_reductions, 0, "{:?}", a.stats());
    // The same ECE on a fresh segment is an echo.
    let (mut a, mut b, ha, _hb) = lockstep_pair(EcnMode::On);
    a.send(ha, &[1; 3000]).unwrap();
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        b.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), t.ecn, &buf[..t.len]);
    }
    let t = b.poll_transmit(now, &mut buf).expect("B's ACK");
    buf[13] |= TcpFlags::ECE.0;
    a.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
    assert_eq!(a.stats().ecn_cwnd_reductions, 1);
}

/// A segment is held back and its retransmission goes out; the original
/// then arrives, marked CE. Its ACK echoes the original's timestamp, which
/// Eifel reads as a spurious retransmission, and carries ECE: the network
/// marked that window, so the reduction the retransmission made stands
/// (RFC 3168 §6.1.2: once per window of data; Linux likewise forbids the
/// undo after an ECE) and is not undone.
#[test]
fn an_echo_on_the_ack_eifel_would_undo_keeps_the_reduction() {
    let (mut sim, log) = sim_with(config(1, EcnMode::On), config(2, EcnMode::Accept), |_| {
        false
    });
    // The 200th data segment of A: held at its first transmission, and
    // released (marked CE) once its retransmission has gone out.
    /// A's data segments so far, the one held (its sequence number and
    /// bytes), and whether its retransmission went out.
    #[derive(Default)]
    struct Held {
        seen: usize,
        segment: Option<(u32, Vec<u8>)>,
        resent: bool,
    }
    let held: Rc<RefCell<Held>> = Rc::default();
    let h = held.clone();
    sim.drop_filter = Some(Box::new(move |side, bytes| {
        let (r, payload) = TcpRepr::parse_segment(bytes).expect("our own segment");
        if side != Side::A || payload.is_empty() {
            return false;
        }
        let mut h = h.borrow_mut();
        h.seen += 1;
        if h.seen == 200 {
            h.segment = Some((r.seq, bytes.to_vec()));
            return true;
        }
        if h.segment.as_ref().is_some_and(|(seq, _)| *seq == r.seq) {
            h.resent = true; // its retransmission: the original may go now
        }
        false
    }));
    let (a, b) = sim.establish();
    let data: Vec<u8> = (0..3_000_000).map(|i| sim::pattern(0, i as u64)).collect();
    let (mut sent, mut got) = (0, Vec::new());
    let mut reduced_to = None;
    let limit = sim.now + Duration::from_secs(60);
    let done = sim.run_until(limit, |s| {
        if sent < data.len() {
            sent += s.a.send(a, &data[sent..]).unwrap_or(0);
        }
        let release = {
            let mut h = held.borrow_mut();
            if h.resent {
                h.resent = false;
                h.segment.take().map(|(_, bytes)| bytes)
            } else {
                None
            }
        };
        if let Some(bytes) = release {
            reduced_to = Some(s.a.info(a).expect("live").ssthresh);
            s.inject_ecn(Side::B, A_IP, B_IP, Ecn::Ce, &bytes);
        }
        got.extend(sim::read_all(&mut s.b, b));
        got.len() == data.len()
    });
    assert!(done && got == data, "{} bytes arrived", got.len());
    let stats = *sim.a.stats();
    assert!(
        reduced_to.is_some(),
        "the segment was retransmitted: {stats:?}"
    );
    let echoed = log
        .borrow()
        .iter()
        .any(|s| s.side == Side::B && s.has(TcpFlags::ECE));
    assert!(echoed, "B echoed the mark");
    assert_eq!(stats.spurious_recoveries, 0, "not undone: {stats:?}");
}

/// RFC 5961 §5: data without a valid ACK changes nothing, its CE mark
/// included. A blind attacker's in-window segment without the ACK bit,
/// marked CE, must not make B echo ECE (which would halve A's window once
/// per window, for as long as the attack lasts); the same segment with
/// its ACK is a mark B echoes.
#[test]
fn a_ce_mark_on_a_segment_dropped_for_its_ack_is_not_echoed() {
    let now = flowlane_tcp::time::Instant::from_millis(5);
    for with_ack in [false, true] {
        let (mut a, mut b, ha, _hb) = lockstep_pair(EcnMode::On);
        let mut buf = vec![0u8; 2000];
        a.send(ha, &[1; 1000]).unwrap();
        let t = a.poll_transmit(now, &mut buf).expect("A's data");
        let mut seg = buf[..t.len].to_vec();
        if !with_ack {
            seg[13] &= !TcpFlags::ACK.0;
        }
        b.handle_segment_ecn(now, t.src.ip(), t.dst.ip(), Ecn::Ce, &seg);
        let mut echoed = false;
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            let (r, _) = TcpRepr::parse_segment(&buf[..t.len]).unwrap();
            echoed |= r.flags.contains(TcpFlags::ECE);
        }
        assert_eq!(b.stats().ce_received, u64::from(with_ack), "ack {with_ack}");
        assert_eq!(b.stats().bad_flags, u64::from(!with_ack), "counted");
        assert_eq!(echoed, with_ack, "ack {with_ack}");
    }
}
