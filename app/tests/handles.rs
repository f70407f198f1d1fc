//! Connection handles across the application API's tables: a stack's
//! handles are its own (another core's stack refuses them, though the
//! first connection of every core takes the same slot), and no `Writable`
//! comes for a connection after its application closed it or shut its
//! writing down.

use flowlane_app::Error;
use flowlane_tcp::time::Instant;
use flowlane_tcp::{Config, ConnHandle, Event, Stack};

/// Moves every segment between `a` and `b` until both are quiet (`rounds`
/// exchanges), the peer `b` reading everything it receives; returns `a`'s
/// events.
fn pump(a: &mut Stack, b: &mut Stack, rounds: usize) -> Vec<Event> {
    let mut buf = [0u8; 1600];
    let mut sink = vec![0u8; 1 << 16];
    let mut events = Vec::new();
    for _ in 0..rounds {
        while let Some(t) = a.poll_transmit(Instant::ZERO, &mut buf) {
            b.handle_segment(Instant::ZERO, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(Instant::ZERO, &mut buf) {
            a.handle_segment(Instant::ZERO, t.src.ip(), t.dst.ip(), &buf[..t.len]);
        }
        while let Some(e) = b.poll_event() {
            if let Event::Accepted { conn, .. } | Event::Readable(conn) = e {
                while b.recv(conn, &mut sink).is_ok_and(|n| n > 0) {}
            }
        }
        events.extend(std::iter::from_fn(|| a.poll_event()));
    }
    events
}

/// A stack tagged `tag` (as the data path tags each queue's) with one
/// connection to a peer of its own, established.
fn core_with_a_connection(tag: u32) -> (Stack, Stack, ConnHandle) {
    let mut cfg = Config::new([1; 16]);
    cfg.handle_tag = tag;
    let mut core = Stack::new(cfg);
    let mut peer = Stack::new(Config::new([2; 16]));
    peer.listen("10.0.0.9:80".parse().unwrap()).unwrap();
    let h = core
        .connect(
            Instant::ZERO,
            "10.0.0.1:1000".parse().unwrap(),
            "10.0.0.9:80".parse().unwrap(),
        )
        .unwrap();
    let events = pump(&mut core, &mut peer, 4);
    assert!(events.contains(&Event::Connected(h)), "{events:?}");
    (core, peer, h)
}

/// The first connection of each of two cores takes the same slot; the
/// cores' tags keep their handles apart: neither core acts on the other's
/// handle (it would have sent to, or reset, its own unrelated peer).
#[test]
fn a_core_refuses_another_core_s_handle() {
    let (mut core0, _peer0, h0) = core_with_a_connection(0);
    let (mut core1, _peer1, h1) = core_with_a_connection(1);
    assert_eq!(h0.index(), h1.index(), "the same slot on both cores");
    assert_ne!(h0, h1);
    assert_eq!(
        core1.send(h0, b"for core 0's peer"),
        Err(Error::InvalidHandle)
    );
    assert_eq!(core1.four_tuple(h0), Err(Error::InvalidHandle));
    assert_eq!(core1.abort(h0), Err(Error::InvalidHandle));
    assert_eq!(core0.abort(h1), Err(Error::InvalidHandle));
    assert_eq!(core0.send(h0, b"ok"), Ok(2));
    assert_eq!(core1.send(h1, b"ok"), Ok(2));
}

/// Fills `conn`'s send buffer (the last send short: a `Writable` is
/// asked for), then `end`s writing; the peer then reads everything, so
/// that the space frees up: no `Writable` comes, and none can be asked for.
fn no_writable_after(end: fn(&mut Stack, ConnHandle) -> Result<(), Error>) {
    let (mut a, mut b, c) = core_with_a_connection(0);
    let chunk = vec![1u8; 1 << 20];
    while a.send(c, &chunk).is_ok_and(|n| n == chunk.len()) {}
    end(&mut a, c).unwrap();
    assert_eq!(a.want_writable(c), Err(Error::InvalidState));
    let events = pump(&mut a, &mut b, 400);
    let writable: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Writable(_)))
        .collect();
    assert_eq!(writable, [] as [&Event; 0], "{events:?}");
}

#[test]
fn no_writable_comes_after_a_close() {
    no_writable_after(Stack::close);
}

#[test]
fn no_writable_comes_after_a_shutdown() {
    no_writable_after(Stack::shutdown_write);
}
