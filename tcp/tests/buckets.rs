//! Connections kept per RSS bucket: counted per bucket, and moved between
//! stacks a bucket at a time, live, with their TIME-WAIT records.

mod sim;

use flowlane_tcp::time::Duration;
use flowlane_tcp::{ConnHandle, Error, FourTuple, NoFrames, Stack};
use sim::{events, test_config, Bulk, LinkConfig, Sim, A_IP, B_IP};
use std::net::SocketAddr;

const BUCKETS: usize = 4;

/// The test's "RSS": the client port modulo the bucket count.
fn by_port(t: &FourTuple) -> u16 {
    t.remote.port() % BUCKETS as u16
}

fn server() -> Stack {
    let mut b = Stack::new(test_config(2));
    b.set_buckets(BUCKETS, by_port).unwrap();
    b
}

#[test]
fn buckets_are_set_before_connections_only() {
    let mut sim = Sim::symmetric(30, LinkConfig::default());
    assert_eq!(sim.b.bucket_count(), 1);
    assert_eq!(sim.b.set_buckets(0, by_port), Err(Error::InvalidState));
    assert_eq!(
        sim.b.set_buckets((1 << 16) + 1, by_port),
        Err(Error::InvalidState)
    );
    sim.establish();
    assert_eq!(sim.b.set_buckets(4, by_port), Err(Error::InvalidState));
    assert_eq!(sim.b.bucket_stats(0).connections, 1);
}

#[test]
fn connections_and_their_segments_are_counted_per_bucket() {
    let mut sim = Sim::symmetric(31, LinkConfig::default());
    sim.b = server();
    sim.b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let clients: Vec<ConnHandle> = (0..12)
        .map(|i| {
            let local = SocketAddr::new(A_IP, 10_000 + i);
            sim.a
                .connect(sim.now, local, SocketAddr::new(B_IP, 80))
                .unwrap()
        })
        .collect();
    sim.run_for(Duration::from_millis(100));
    events(&mut sim.b);
    for b in 0..BUCKETS as u16 {
        assert_eq!(sim.b.bucket_stats(b).connections, 3, "bucket {b}");
    }
    let quiet = sim.b.bucket_stats(2).segments_in;
    // Only the clients in bucket 1 (ports 10001, 10005, 10009) send.
    for (i, &h) in clients.iter().enumerate() {
        if (10_000 + i) % BUCKETS == 1 {
            sim.a.send(h, &vec![7; 20_000]).unwrap();
        }
    }
    sim.run_for(Duration::from_millis(200));
    let busy = sim.b.bucket_stats(1).segments_in;
    assert!(busy >= quiet + 3 * 14, "bucket 1: {busy} segments");
    // Every payload byte, retransmissions aside (none on this link).
    assert_eq!(sim.b.bucket_stats(1).bytes_in, 3 * 20_000);
    assert_eq!(sim.b.bucket_stats(2).segments_in, quiet, "bucket 2 idle");
    assert_eq!(sim.b.bucket_stats(2).bytes_in, 0);
    // Out of range: all zero.
    assert_eq!(sim.b.bucket_stats(9), Default::default());
}

#[test]
fn buckets_move_to_another_stack_mid_transfer() {
    move_every_bucket_mid_transfer(32, usize::MAX);
}

/// As above, each bucket exported three connections at a time, each part
/// imported before the next is exported (how the data path overlaps the
/// two stacks' work).
#[test]
fn buckets_move_in_parts_mid_transfer() {
    move_every_bucket_mid_transfer(34, 3);
}

/// 16 connections mid-transfer over a lossy link; every bucket moves to a
/// new stack, exported `part` connections at a time.
fn move_every_bucket_mid_transfer(seed: u64, part: usize) {
    let mut sim = Sim::symmetric(seed, LinkConfig::hostile(0.02));
    sim.b = server();
    // Long enough that no connection finishes before the move.
    let mut bulk = Bulk::start(&mut sim, 16, 400_000, 40_000);
    let mut moved = false;
    let limit = sim.now + Duration::from_secs(600);
    let done = sim.run_until(limit, |s| {
        bulk.on_step(s);
        if !moved && bulk.min_received_b() > 10_000 {
            moved = true;
            // Another core's stack takes over every bucket, one at a time.
            let mut b2 = server();
            b2.listen(SocketAddr::new(B_IP, 80)).unwrap();
            let mut pairs = Vec::new();
            for bucket in 0..BUCKETS as u16 {
                let held = s.b.bucket_stats(bucket).connections;
                let listed = s.b.bucket_connections(bucket);
                let mut exported = Vec::new();
                loop {
                    let export = s.b.export_bucket_part(bucket, part, &NoFrames);
                    assert_eq!(export.bucket(), bucket);
                    assert!(export.connections().len() <= part);
                    let complete = export.complete();
                    let old: Vec<ConnHandle> = export.connections().iter().map(|c| c.0).collect();
                    exported.extend_from_slice(&old);
                    let new = b2.import_bucket(s.now, export);
                    for (o, n) in old.into_iter().zip(new) {
                        pairs.push((o, n.expect("imported")));
                    }
                    if complete {
                        break;
                    }
                    assert!(
                        s.b.bucket_stats(bucket).connections > 0,
                        "a part short of the end"
                    );
                }
                assert_eq!(listed, exported, "listed in export order");
                assert_eq!(exported.len() as u32, held);
                assert_eq!(s.b.bucket_stats(bucket).connections, 0);
                assert_eq!(b2.bucket_stats(bucket).connections, held);
            }
            assert_eq!(s.b.connection_count(), 0, "nothing left behind");
            assert_eq!(pairs.len(), 16);
            s.b = b2;
            bulk.rehome_b(s, &pairs);
        }
        bulk.finished()
    });
    assert!(moved, "the move happened");
    assert!(done, "finished: {} of 16 closed", bulk.closed_b);
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
}

/// A server (`server()`) with one TIME-WAIT record in bucket 0: the
/// connection from port 10000 that it closed first.
fn server_with_time_wait(seed: u64) -> Sim {
    let mut sim = Sim::symmetric(seed, LinkConfig::default());
    sim.b = server();
    let (a, b) = sim.establish();
    // B closes first: its TIME-WAIT record is in bucket 10000 % 4 = 0.
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    sim.a.close(a).unwrap();
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.b.bucket_stats(0).time_wait, 1);
    sim
}

#[test]
fn time_wait_records_move_with_their_bucket() {
    let mut sim = server_with_time_wait(33);
    let export = sim.b.export_bucket(0);
    assert!(export.complete());
    assert_eq!(export.time_wait_count(), 1);
    assert_eq!(sim.b.connection_count(), 0);
    let mut b2 = server();
    assert!(b2.import_bucket(sim.now, export).is_empty());
    assert_eq!(b2.bucket_stats(0).time_wait, 1);
    assert_eq!(b2.time_wait_count(), 1);
    // The record still holds the tuple there, and expires on time.
    assert_eq!(
        b2.connect(
            sim.now,
            SocketAddr::new(B_IP, 80),
            SocketAddr::new(A_IP, 10_000)
        ),
        Err(Error::AddrInUse)
    );
    b2.handle_timeout(sim.now + Duration::from_secs(61));
    assert_eq!(b2.time_wait_count(), 0);
}

/// A record that owes the ACK of the peer's FIN when its bucket moves (the
/// FIN came in the batch before the export, before any output) owes it on
/// the stack that takes it: the ACK goes out from there, and the peer
/// does not wait in LAST-ACK for a retransmission of its FIN.
#[test]
fn a_time_wait_record_owing_its_ack_moves_owing_it() {
    let mut sim = Sim::symmetric(34, LinkConfig::default());
    sim.b = server();
    let (a, b) = sim.establish();
    sim.b.close(b).unwrap();
    sim.run_for(Duration::from_millis(50));
    sim.a.close(a).unwrap();
    let mut buf = vec![0u8; 2048];
    let fin = sim.a.poll_transmit(sim.now, &mut buf).expect("A's FIN");
    let (seg, _) = flowlane_wire::TcpRepr::parse_segment(&buf[..fin.len]).unwrap();
    assert!(seg.flags.fin());
    sim.b.handle_segment(sim.now, A_IP, B_IP, &buf[..fin.len]);
    assert_eq!(sim.b.bucket_stats(0).time_wait, 1);
    let export = sim.b.export_bucket(0);
    let mut b2 = server();
    assert!(b2.import_bucket(sim.now, export).is_empty());
    let ack = b2.poll_transmit(sim.now, &mut buf).expect("the ACK owed");
    let (r, _) = flowlane_wire::TcpRepr::parse_segment(&buf[..ack.len]).unwrap();
    assert!(r.flags.ack() && !r.flags.fin(), "{r:?}");
    assert_eq!(r.ack, seg.seq + 1, "the FIN acknowledged");
    assert!(b2.poll_transmit(sim.now, &mut buf).is_none(), "once");
}

/// A bucket exported in parts: its TIME-WAIT records go with the part that
/// empties it, and only that part is complete.
#[test]
fn time_wait_records_go_with_the_last_part() {
    let mut sim = server_with_time_wait(35);
    // Two live connections in the same bucket (ports 10004 and 10008).
    for port in [10_004, 10_008] {
        sim.a
            .connect(
                sim.now,
                SocketAddr::new(A_IP, port),
                SocketAddr::new(B_IP, 80),
            )
            .unwrap();
    }
    sim.run_for(Duration::from_millis(50));
    events(&mut sim.b);
    assert_eq!(sim.b.bucket_stats(0).connections, 2);
    assert_eq!(sim.b.bucket_stats(0).time_wait, 1);
    // A part of at most 0 connections still takes one: a loop until
    // `complete` always ends.
    let first = sim.b.export_bucket_part(0, 0, &NoFrames);
    assert_eq!((first.connections().len(), first.time_wait_count()), (1, 0));
    assert!(!first.complete());
    let last = sim.b.export_bucket_part(0, 1, &NoFrames);
    assert_eq!((last.connections().len(), last.time_wait_count()), (1, 1));
    assert!(last.complete());
    let mut b2 = server();
    assert!(b2.import_bucket(sim.now, first).iter().all(|h| h.is_ok()));
    assert!(b2.import_bucket(sim.now, last).iter().all(|h| h.is_ok()));
    assert_eq!(b2.bucket_stats(0).connections, 2);
    assert_eq!(b2.bucket_stats(0).time_wait, 1);
}

/// Moves every segment `from` has to send into `to`; returns how many, and
/// what `to` did with each.
fn pass(
    from: &mut Stack,
    to: &mut Stack,
    now: flowlane_tcp::time::Instant,
    from_ip: std::net::IpAddr,
    to_ip: std::net::IpAddr,
) -> Vec<flowlane_tcp::Delivery> {
    let mut buf = [0u8; 2048];
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        out.push(to.handle_segment(now, from_ip, to_ip, &buf[..t.len]));
    }
    out
}

#[test]
fn segments_of_an_away_bucket_are_handed_back_unanswered() {
    use flowlane_tcp::time::Instant;
    use flowlane_tcp::Delivery;
    let mut now = Instant::ZERO;
    let mut client = Stack::new(test_config(5));
    let mut s1 = server();
    s1.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let c = client
        .connect(
            now,
            SocketAddr::new(A_IP, 10_001),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    for _ in 0..3 {
        pass(&mut client, &mut s1, now, A_IP, B_IP);
        pass(&mut s1, &mut client, now, B_IP, A_IP);
        now += Duration::from_millis(1);
    }
    events(&mut s1);
    assert_eq!(s1.bucket_stats(1).connections, 1);
    let export = s1.export_bucket(1);
    assert!(s1.bucket_is_away(1) && !s1.bucket_is_away(0));
    // Data of the moved connection reaches the old stack: handed back, not
    // answered (an RST here would kill the connection where it now lives).
    client.send(c, b"after the move").unwrap();
    let resets = s1.stats().resets_out;
    let mut seg = [0u8; 2048];
    let t = client.poll_transmit(now, &mut seg).expect("data segment");
    let seg = seg[..t.len].to_vec();
    assert_eq!(
        s1.handle_segment(now, A_IP, B_IP, &seg),
        Delivery::Away { bucket: 1 }
    );
    assert_eq!(s1.poll_transmit(now, &mut [0u8; 2048]), None);
    assert_eq!(s1.stats().resets_out, resets);
    // So is a new connection's SYN in that bucket (port 10 005 % 4 = 1)…
    let mut other = Stack::new(test_config(6));
    other
        .connect(
            now,
            SocketAddr::new(A_IP, 10_005),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    assert_eq!(
        pass(&mut other, &mut s1, now, A_IP, B_IP),
        [Delivery::Away { bucket: 1 }]
    );
    assert_eq!(s1.poll_transmit(now, &mut [0u8; 2048]), None);
    // …while another bucket's stray segment is still answered here.
    let mut stray = Stack::new(test_config(7));
    let s = stray
        .connect(
            now,
            SocketAddr::new(A_IP, 10_002),
            SocketAddr::new(B_IP, 81),
        )
        .unwrap();
    assert_eq!(
        pass(&mut stray, &mut s1, now, A_IP, B_IP),
        [Delivery::Taken]
    );
    assert!(s1.poll_transmit(now, &mut [0u8; 2048]).is_some(), "RST");
    let _ = s;
    // The stack that imported the bucket takes the segment and the data.
    let mut s2 = server();
    s2.listen(SocketAddr::new(B_IP, 80)).unwrap();
    s2.set_bucket_away(1, true);
    let handles = s2.import_bucket(now, export);
    assert!(!s2.bucket_is_away(1));
    let h = handles[0].unwrap();
    // The handed-back segment, forwarded as a data path would.
    assert_eq!(s2.handle_segment(now, A_IP, B_IP, &seg), Delivery::Taken);
    let mut buf = [0u8; 64];
    let n = s2.recv(h, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"after the move");
}

#[test]
fn a_half_open_connection_counts_against_the_backlog_where_it_moved() {
    use flowlane_tcp::time::Instant;
    let now = Instant::ZERO;
    // One half-open connection fills the new stack's backlog (no cookies:
    // a SYN past the backlog is dropped and counted).
    let listener = |secret| {
        let mut cfg = test_config(secret);
        cfg.listen_backlog = 1;
        cfg.syn_cookies = false;
        let mut s = Stack::new(cfg);
        s.set_buckets(BUCKETS, by_port).unwrap();
        s.listen(SocketAddr::new(B_IP, 80)).unwrap();
        s
    };
    let mut s1 = listener(2);
    let mut client = Stack::new(test_config(5));
    let c = client
        .connect(
            now,
            SocketAddr::new(A_IP, 10_001),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    // The SYN reaches s1, whose SYN-ACK is lost: half-open there.
    pass(&mut client, &mut s1, now, A_IP, B_IP);
    while s1.poll_transmit(now, &mut [0u8; 2048]).is_some() {}
    assert_eq!(s1.bucket_stats(1).connections, 1);
    let mut s2 = listener(3);
    let moved = s2.import_bucket(now, s1.export_bucket(1));
    assert!(moved[0].is_ok());
    // Another client's SYN finds the backlog full.
    let mut late = Stack::new(test_config(6));
    late.connect(
        now,
        SocketAddr::new(A_IP, 10_002),
        SocketAddr::new(B_IP, 80),
    )
    .unwrap();
    pass(&mut late, &mut s2, now, A_IP, B_IP);
    assert_eq!(s2.stats().syn_dropped, 1, "{:?}", s2.stats());
    // The moved connection completes its handshake (the client retransmits
    // its SYN; s2 answers from SYN-RECEIVED) and is accepted there…
    let later = now + Duration::from_secs(3);
    client.handle_timeout(later);
    for _ in 0..3 {
        pass(&mut client, &mut s2, later, A_IP, B_IP);
        pass(&mut s2, &mut client, later, B_IP, A_IP);
    }
    assert_eq!(client.state(c).unwrap(), flowlane_tcp::State::Established);
    assert!(events(&mut s2)
        .iter()
        .any(|e| matches!(e, flowlane_tcp::Event::Accepted { .. })));
    // …which frees its place in the backlog: the next SYN is taken.
    late.handle_timeout(later);
    pass(&mut late, &mut s2, later, A_IP, B_IP);
    assert_eq!(s2.stats().syn_dropped, 1, "{:?}", s2.stats());
    assert_eq!(s2.connection_count(), 2);
}

/// A handshake answered with a SYN cookie whose bucket moves before the
/// client's ACK comes: the stack that took the bucket over checks the
/// cookie (the stacks of one service share their key, and the export
/// carries the listener's cookie period) and accepts the connection; no
/// reset for a handshake the move overtook.
#[test]
fn a_syn_cookie_handshake_completes_on_the_stack_that_took_its_bucket() {
    use flowlane_tcp::time::Instant;
    use flowlane_tcp::Event;
    let cookie_server = || {
        let mut cfg = test_config(2);
        cfg.listen_backlog = 0; // every SYN answered with a cookie
        let mut b = Stack::new(cfg);
        b.set_buckets(BUCKETS, by_port).unwrap();
        b.listen(SocketAddr::new(B_IP, 80)).unwrap();
        b
    };
    let (mut b1, mut b2) = (cookie_server(), cookie_server());
    let mut a = Stack::new(test_config(1));
    let now = Instant::from_millis(10);
    let mut buf = vec![0u8; 2000];
    let client = SocketAddr::new(A_IP, 10_000);
    let conn = a.connect(now, client, SocketAddr::new(B_IP, 80)).unwrap();
    let t = a.poll_transmit(now, &mut buf).expect("SYN");
    b1.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
    let t = b1.poll_transmit(now, &mut buf).expect("SYN-ACK");
    a.handle_segment(now, t.src.ip(), t.dst.ip(), &buf[..t.len]);
    assert_eq!(b1.stats().syn_cookies_sent, 1);
    assert!(events(&mut a).contains(&Event::Connected(conn)));
    let t = a.poll_transmit(now, &mut buf).expect("ACK");
    let ack = buf[..t.len].to_vec();
    // The bucket moves to b2 before the ACK arrives.
    let bucket = by_port(&FourTuple {
        local: SocketAddr::new(B_IP, 80),
        remote: client,
    });
    let export = b1.export_bucket(bucket);
    b2.import_bucket(now, export);
    b2.handle_segment(now, t.src.ip(), t.dst.ip(), &ack);
    assert!(
        events(&mut b2)
            .iter()
            .any(|e| matches!(e, Event::Accepted { .. })),
        "accepted on b2: {:?}",
        b2.stats()
    );
    assert_eq!(b2.stats().syn_cookies_accepted, 1);
    assert_eq!(b2.stats().resets_out, 0);
}

/// A bucket imported in parts is served by the importing stack only from
/// the part that completes it: until then, a segment of a connection still
/// to come is handed back (`Delivery::Away`, for the caller to forward),
/// not reset as a segment of no connection; the connections of the parts
/// already in are served.
#[test]
fn a_bucket_is_served_from_its_last_part_only() {
    use flowlane_tcp::Delivery;
    let mut sim = server_with_time_wait(36);
    let mut conns = Vec::new();
    for port in [10_004, 10_008] {
        let c = sim
            .a
            .connect(
                sim.now,
                SocketAddr::new(A_IP, port),
                SocketAddr::new(B_IP, 80),
            )
            .unwrap();
        conns.push(c);
    }
    sim.run_for(Duration::from_millis(50));
    events(&mut sim.b);
    let first = sim.b.export_bucket_part(0, 1, &NoFrames);
    let last = sim.b.export_bucket_part(0, 1, &NoFrames);
    assert!(!first.complete() && last.complete());
    let mut b2 = server();
    b2.set_bucket_away(0, true);
    assert!(b2.import_bucket(sim.now, first).iter().all(|h| h.is_ok()));
    assert!(b2.bucket_is_away(0), "served before its last part");
    // Both of A's connections send; B2 holds only the first part's.
    for &c in &conns {
        sim.a.send(c, b"x").unwrap();
    }
    let now = sim.now;
    let mut buf = [0u8; 2048];
    let mut got = Vec::new();
    while let Some(t) = sim.a.poll_transmit(now, &mut buf) {
        got.push(b2.handle_segment(now, A_IP, B_IP, &buf[..t.len]));
    }
    assert_eq!(got.len(), 2);
    assert!(got.contains(&Delivery::Taken), "{got:?}");
    assert!(got.contains(&Delivery::Away { bucket: 0 }), "{got:?}");
    assert_eq!(b2.stats().resets_out, 0, "{:?}", b2.stats());
    assert!(b2.import_bucket(sim.now, last).iter().all(|h| h.is_ok()));
    assert!(!b2.bucket_is_away(0));
    assert_eq!(b2.bucket_stats(0).connections, 2);
}

/// A stack at its connection cap takes a moved bucket's connections past
/// it by at most an eighth of the cap (a move adds no connection to the
/// system, and a connection refused at import is lost), counted; beyond
/// that headroom it refuses them (`Error::ConnectionLimit`), counted. Over
/// its cap it drops new SYNs, counted as `connection_limit_refused` (what
/// it says of why it does not accept), and takes them again once closes
/// bring it below the cap.
#[test]
fn an_import_passes_the_connection_cap_by_a_bounded_headroom_counted() {
    use flowlane_tcp::time::Instant;
    let now = Instant::ZERO;
    let mut s1 = server();
    s1.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut client = Stack::new(test_config(5));
    // Twelve connections in bucket 1 (ports 10001, 10005, …), established.
    for k in 0..12 {
        client
            .connect(
                now,
                SocketAddr::new(A_IP, 10_001 + 4 * k),
                SocketAddr::new(B_IP, 80),
            )
            .unwrap();
    }
    for _ in 0..3 {
        pass(&mut client, &mut s1, now, A_IP, B_IP);
        pass(&mut s1, &mut client, now, B_IP, A_IP);
    }
    events(&mut s1);
    assert_eq!(s1.bucket_stats(1).connections, 12);
    // The stack taking the bucket over holds at most 8 (a headroom of 1).
    let mut cfg = test_config(2);
    cfg.max_connections = 8;
    let mut s2 = Stack::new(cfg);
    s2.set_buckets(BUCKETS, by_port).unwrap();
    s2.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let imported = s2.import_bucket(now, s1.export_bucket(1));
    let taken: Vec<ConnHandle> = imported.iter().filter_map(|r| r.ok()).collect();
    assert_eq!(taken.len(), 9, "the cap and its headroom");
    assert!(imported[9..]
        .iter()
        .all(|r| *r == Err(Error::ConnectionLimit)));
    assert_eq!(s2.connection_count(), 9);
    assert_eq!(
        (
            s2.stats().imports_past_cap,
            s2.stats().imports_refused_at_cap
        ),
        (1, 3)
    );
    // Over its cap, it drops a new SYN, and says so.
    let mut late = Stack::new(test_config(6));
    late.connect(
        now,
        SocketAddr::new(A_IP, 20_000),
        SocketAddr::new(B_IP, 80),
    )
    .unwrap();
    pass(&mut late, &mut s2, now, A_IP, B_IP);
    assert_eq!(s2.stats().connection_limit_refused, 1);
    assert_eq!(s2.connection_count(), 9);
    // Two connections end: below its cap, it takes the SYN again.
    for &c in &taken[..2] {
        s2.abort(c).unwrap();
    }
    events(&mut s2);
    let later = now + Duration::from_secs(3);
    late.handle_timeout(later);
    pass(&mut late, &mut s2, later, A_IP, B_IP);
    assert_eq!(s2.connection_count(), 8, "{:?}", s2.stats());
    assert_eq!(s2.stats().connection_limit_refused, 1);
}

/// Passes segments between `a` (at A_IP) and `b` (at B_IP) for `rounds`
/// rounds, the clock stepping 1 ms a round (timers fire on the way).
fn exchange(a: &mut Stack, b: &mut Stack, now: &mut flowlane_tcp::time::Instant, rounds: usize) {
    for _ in 0..rounds {
        *now += Duration::from_millis(1);
        a.handle_timeout(*now);
        b.handle_timeout(*now);
        pass(a, b, *now, A_IP, B_IP);
        pass(b, a, *now, B_IP, A_IP);
    }
}

/// A connection whose application shrank its send buffer below what it
/// had queued (`set_send_buffer`, `SO_SNDBUF`: "bytes queued past a
/// smaller size stay queued") moves whole: the import takes every queued
/// byte, the application's size stays, and the peer gets every byte.
/// (Before the fix, the import refused the snapshot as invalid, and the
/// connection was lost from both stacks.)
#[test]
fn a_send_buffer_shrunk_below_its_queue_moves_whole() {
    use flowlane_tcp::time::Instant;
    let mut now = Instant::ZERO;
    let mut s1 = server();
    s1.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut client = Stack::new(test_config(5));
    let c = client
        .connect(
            now,
            SocketAddr::new(A_IP, 10_001),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    exchange(&mut client, &mut s1, &mut now, 5);
    let conn = s1.bucket_connections(1)[0];
    events(&mut s1);
    let data: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(s1.send(conn, &data).unwrap(), data.len());
    s1.set_send_buffer(conn, 1).unwrap();
    let size = s1.send_capacity(conn).unwrap();
    assert!(size < data.len(), "shrunk below its queue: {size}");
    let mut s2 = server();
    s2.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let moved = s2
        .import(now, s1.export(conn).unwrap())
        .expect("imported whole");
    assert_eq!(s2.send_capacity(moved).unwrap(), size, "the app's size");
    assert_eq!(s2.info(moved).unwrap().send_capacity, size);
    assert_eq!(s2.info(moved).unwrap().unsent, data.len(), "every byte");
    assert_eq!(s2.send_space(moved).unwrap(), 0, "writes wait");
    let mut got = Vec::new();
    for _ in 0..200 {
        exchange(&mut client, &mut s2, &mut now, 1);
        got.extend(sim::read_all(&mut client, c));
        if got.len() >= data.len() {
            break;
        }
    }
    assert_eq!(got.len(), data.len(), "{:?}", s2.stats());
    assert!(got == data, "in order, unchanged");
    assert_eq!(s2.stats().resets_out, 0);
}

/// A connection whose window memory held back (the stack's receive memory
/// committed to another connection) keeps waiting for memory where it
/// moves: the stack that takes it offers it a window from its own memory
/// at once, as the old stack would have on a release, instead of leaving
/// the peer to find the window by its persist probes (backing off to
/// seconds). (Before the fix, the import cleared the wait and nothing
/// re-evaluated the window.) One that brings more than the stack's
/// budget has left is taken whole, and counted.
#[test]
fn a_connection_waiting_for_memory_is_offered_a_window_where_it_moves() {
    use flowlane_tcp::time::Instant;
    let mut now = Instant::ZERO;
    let memory_server = |secret, budget| {
        let mut cfg = test_config(secret);
        cfg.recv_memory = budget;
        let mut s = Stack::new(cfg);
        s.set_buckets(BUCKETS, by_port).unwrap();
        s.listen(SocketAddr::new(B_IP, 80)).unwrap();
        s
    };
    let mut s1 = memory_server(2, 32 * 1024);
    let mut client = Stack::new(test_config(5));
    let (hog, waiter) = (10_001, 10_002);
    let conns: Vec<ConnHandle> = [hog, waiter]
        .iter()
        .map(|&port| {
            client
                .connect(now, SocketAddr::new(A_IP, port), SocketAddr::new(B_IP, 80))
                .unwrap()
        })
        .collect();
    exchange(&mut client, &mut s1, &mut now, 5);
    events(&mut s1);
    // The first connection fills the budget, unread; then the second
    // gets what is left (a segment) and a window of zero.
    client.send(conns[0], &vec![1; 64 * 1024]).unwrap();
    exchange(&mut client, &mut s1, &mut now, 50);
    client.send(conns[1], &vec![2; 16 * 1024]).unwrap();
    exchange(&mut client, &mut s1, &mut now, 50);
    let moving = s1.bucket_connections(2)[0];
    let held = s1.info(moving).unwrap().readable;
    assert!(held > 0 && held < 4096, "a segment's worth: {held}");
    // It moves to a stack with memory to spare.
    let mut s2 = memory_server(3, 32 * 1024);
    let snap = s1.export(moving).unwrap();
    s2.import(now, snap).unwrap();
    let mut buf = [0u8; 2048];
    let t = s2
        .poll_transmit(now, &mut buf)
        .expect("a window update from the new stack at once");
    let (seg, payload) = flowlane_wire::TcpRepr::parse_segment(&buf[..t.len]).unwrap();
    assert!(payload.is_empty() && seg.flags.ack(), "{seg:?}");
    assert_eq!(seg.dst_port, waiter);
    assert!(seg.window > 0, "the window opens: {seg:?}");
    assert_eq!(s2.stats().imports_past_recv_memory, 0);
    // The first connection, which holds the old stack's budget, moves to
    // a stack whose budget is half that: taken whole, past it, counted.
    let mut s3 = memory_server(4, 16 * 1024);
    let hogging = s1.bucket_connections(1)[0];
    s3.import(now, s1.export(hogging).unwrap()).unwrap();
    assert!(s3.recv_memory_committed() > 16 * 1024);
    assert_eq!(s3.stats().imports_past_recv_memory, 1);
}

/// A connection refused at import (the stack taking its bucket over is
/// past its cap and headroom) is lost; its peer is told at once, by an
/// RST as the connection itself would have sent (counted as an abort).
/// Before, nothing was sent: the peer learned at its next segment, and an
/// idle one without keepalive never did.
#[test]
fn a_connection_refused_at_import_resets_its_peer() {
    use flowlane_tcp::time::Instant;
    let now = Instant::ZERO;
    let mut s1 = server();
    s1.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut client = Stack::new(test_config(5));
    let conns: Vec<ConnHandle> = (0..12)
        .map(|k| {
            client
                .connect(
                    now,
                    SocketAddr::new(A_IP, 10_001 + 4 * k),
                    SocketAddr::new(B_IP, 80),
                )
                .unwrap()
        })
        .collect();
    for _ in 0..3 {
        pass(&mut client, &mut s1, now, A_IP, B_IP);
        pass(&mut s1, &mut client, now, B_IP, A_IP);
    }
    events(&mut s1);
    events(&mut client);
    let mut cfg = test_config(2);
    cfg.max_connections = 8;
    let mut s2 = Stack::new(cfg);
    s2.set_buckets(BUCKETS, by_port).unwrap();
    s2.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let imported = s2.import_bucket(now, s1.export_bucket(1));
    let refused = imported.iter().filter(|r| r.is_err()).count();
    assert_eq!(refused, 3);
    pass(&mut s2, &mut client, now, B_IP, A_IP);
    assert_eq!(s2.stats().resets_aborted, 3, "{:?}", s2.stats());
    let reset = conns
        .iter()
        .filter(|&&c| {
            client.state(c).is_err() || client.state(c) == Ok(flowlane_tcp::State::Closed)
        })
        .count();
    assert_eq!(reset, 3, "the client's connections the move lost are reset");
}
