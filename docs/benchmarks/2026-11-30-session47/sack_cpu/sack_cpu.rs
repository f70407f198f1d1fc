#[path = "common.rs"]
mod common;
use common::*;
use std::time::Instant as WallClock;

/// Grows the flight to `segs` segments of MSS `mss` by acknowledging
/// everything each round (slow start).
fn grown(mss: u16, segs: usize, rack: bool) -> (Peer, u32, u32) {
    let mut c = cfg();
    c.rack = rack;
    c.timestamps = false;
    c.send_buffer = 8 << 20;
    c.send_buffer_max = 8 << 20;
    let mut p = Peer::new(c, SynAck { mss, wscale: Some(10), sack: true, window: 65535 });
    p.a.send(p.conn, &vec![7u8; 8 << 20]).unwrap();
    let mut una = p.una();
    p.ack_with(una, 65535, &[]);
    loop {
        let out = p.poll();
        let data: Vec<_> = out.into_iter().filter(|(_, n)| *n > 0).collect();
        let info = p.a.info(p.conn).unwrap();
        let end = max_end(&data);
        if info.cwnd >= segs * mss as usize {
            return (p, una, end);
        }
        una = end;
        p.ack_with(una, 65535, &[]);
    }
}

fn run(rack: bool, fill: bool) {
    let mss = 64u16;
    let (mut p, una, max) = grown(mss, 4200, rack);
    let flight = (max.wrapping_sub(una)) as usize / mss as usize;
    eprintln!("flight {flight} segments of {mss}");
    let m = mss as u32;
    let seg = |i: u32| una.wrapping_add(i * m);
    // Baseline: ACKs repeating one SACK block of one segment.
    p.ack_with(una, 65535, &[(seg(flight as u32 - 2), seg(flight as u32 - 1))]);
    p.poll();
    let n = 20_000;
    let t = WallClock::now();
    for _ in 0..n {
        p.ack_with(una, 65535, &[(seg(flight as u32 - 2), seg(flight as u32 - 1))]);
    }
    let base = t.elapsed().as_nanos() as f64 / n as f64;
    // Fill the scoreboard: every other segment of the upper half SACKed.
    let top = flight as u32;
    let mut j = 0u32;
    let mut blocks = Vec::new();
    while top - 1 - 2 * j > top / 2 {
        let i = top - 1 - 2 * j;
        blocks.push((seg(i), seg(i) + 1));
        j += 1;
    }
    if !fill { blocks.clear(); }
    for chunk in blocks.chunks(4) {
        p.ack_with(una, 65535, chunk);
        p.poll();
    }
    eprintln!("{} one-byte blocks SACKed", blocks.len());
    // Hostile ACKs: blocks inside the big hole below, which a full
    // scoreboard refuses and RACK walks again on every ACK.
    let low = top / 2 - 4;
    let hb = [
        (seg(1), seg(low)),
        (seg(2), seg(low + 1)),
        (seg(3), seg(low + 2)),
        (seg(1), seg(low + 2)),
    ];
    p.ack_with(una, 65535, &hb);
    p.poll();
    let t = WallClock::now();
    for _ in 0..n {
        p.ack_with(una, 65535, &hb);
    }
    let hostile = t.elapsed().as_nanos() as f64 / n as f64;
    eprintln!("rack {rack} fill {fill}: per ACK: baseline {base:.0} ns, hostile {hostile:.0} ns ({:.0}x)", hostile / base);
    let t = WallClock::now();
    let mut sent = 0;
    for _ in 0..200 { p.ack_with(una, 65535, &hb); sent += p.poll().len(); }
    eprintln!("poll after hostile ACKs: {:.0} ns per ACK+poll, {sent} segments", t.elapsed().as_nanos() as f64 / 200.0);
}

#[test] fn rack_fill() { run(true, true) }
#[test] fn rack_nofill() { run(true, false) }
#[test] fn norack_fill() { run(false, true) }
