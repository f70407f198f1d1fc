//! A segment whose option area is mangled (an illegal option length, a
//! timestamps option of the wrong length) on a connection that negotiated
//! timestamps. The codec now takes such a segment with the options before
//! the bad length (RFC 9293 §3.2 MUST-7, as Linux's `tcp_parse_options`)
//! instead of refusing it: the connection must then see a segment without
//! timestamps and drop it (RFC 7323 §3.2), so that mangling the option is
//! no way around PAWS (RFC 7323 §5.3 R1) for an attacker whose TSval is
//! stale, or for an old duplicate.

mod sim;

use flowlane_tcp::State;
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::peer::Peer;
use sim::{read_all, A_IP, B_IP};

/// What is done to a segment's option area, and how it is named.
type Mangling = (&'static str, fn(&mut [u8]));

/// B's first TSval (its SYN-ACK's).
const B_TSVAL: u32 = 1_000_000;

/// A connected to B with timestamps (B's SYN-ACK: MSS and timestamps).
fn timestamped() -> Peer {
    let options = TcpOptions {
        mss: Some(1460),
        ..TcpOptions::default()
    };
    let mut p = Peer::syn_sent(sim::test_config(1), 65_535);
    let a_tsval = p.sent[0]
        .0
        .options
        .timestamps
        .expect("A offers timestamps")
        .0;
    p.deliver(
        TcpFlags::SYN | TcpFlags::ACK,
        65_535,
        TcpOptions {
            timestamps: Some((B_TSVAL, a_tsval)),
            ..options
        },
    );
    p.b_nxt = p.b_nxt.wrapping_add(1);
    assert_eq!(p.a.state(p.conn), Ok(State::Established));
    p.poll();
    p
}

/// B's data segment `payload` at its SND.NXT with timestamps (`tsval`,
/// echoing A's last TSval), its 12-byte option area (NOP, NOP, kind 8,
/// length 10, TSval, TSecr) passed through `mangle` first.
fn send_mangled(p: &mut Peer, tsval: u32, payload: &[u8], mangle: impl Fn(&mut [u8])) {
    let tsecr = p
        .sent
        .last()
        .and_then(|(r, _)| r.options.timestamps)
        .map_or(0, |(v, _)| v);
    let repr = TcpRepr {
        src_port: 80,
        dst_port: 10_000,
        seq: p.b_nxt,
        ack: p.b_rcv,
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: p.b_window,
        urgent: 0,
        options: TcpOptions {
            timestamps: Some((tsval, tsecr)),
            ..TcpOptions::default()
        },
    };
    let mut bytes = vec![0u8; 60 + payload.len()];
    let n = repr.emit(&mut bytes).unwrap();
    assert_eq!(n, 32, "the aligned timestamps layout");
    mangle(&mut bytes[20..32]);
    bytes[n..n + payload.len()].copy_from_slice(payload);
    bytes.truncate(n + payload.len());
    p.a.handle_segment(p.now, B_IP, A_IP, &bytes);
}

/// Each mangling of the timestamps option leaves a data segment without
/// timestamps, dropped whatever its TSval (a fresh one, or one older than
/// TS.Recent, which PAWS would drop): nothing readable, counted
/// `unacceptable`, no `malformed`. The same bytes with the option whole
/// are taken, and after them a stale TSval (mangled or not) still is not.
#[test]
fn a_mangled_timestamps_option_is_no_way_around_paws() {
    // (what is done to the option area: NOP, NOP, 8, 10, TSval, TSecr)
    let manglings: [Mangling; 5] = [
        ("length 8", |o| o[3] = 8),
        ("length past the header", |o| o[3] = 11),
        ("length 0", |o| o[3] = 0),
        ("an option of length 1 before it", |o| {
            o[..2].copy_from_slice(&[99, 1])
        }),
        ("an option of length 0 before it", |o| {
            o[..2].copy_from_slice(&[99, 0])
        }),
    ];
    let mut p = timestamped();
    let conn = p.conn;
    let fresh = B_TSVAL + 10;
    let stale = B_TSVAL - 10;
    for (what, mangle) in manglings {
        for tsval in [fresh, stale] {
            let before = *p.a.stats();
            send_mangled(&mut p, tsval, b"forged", mangle);
            let after = *p.a.stats();
            assert!(
                read_all(&mut p.a, conn).is_empty(),
                "{what}, TSval {tsval}: taken"
            );
            assert_eq!(
                after.unacceptable,
                before.unacceptable + 1,
                "{what}, TSval {tsval}: not dropped as without timestamps"
            );
            assert_eq!(after.malformed, before.malformed, "{what}");
            assert!(p.poll().iter().all(|(_, len)| *len == 0));
        }
    }
    assert_eq!(p.a.state(conn), Ok(State::Established));
    // The option whole, a fresh TSval: taken.
    send_mangled(&mut p, fresh, b"genuine", |_| {});
    assert_eq!(read_all(&mut p.a, conn), b"genuine");
    p.b_nxt = p.b_nxt.wrapping_add(7);
    p.poll();
    // A stale TSval after it: PAWS, mangled or whole.
    let paws = p.a.stats().paws_rejected;
    send_mangled(&mut p, stale, b"old", |o| o[3] = 8);
    send_mangled(&mut p, stale, b"old", |_| {});
    assert!(read_all(&mut p.a, conn).is_empty());
    assert_eq!(p.a.stats().paws_rejected, paws + 1, "the whole one");
}
