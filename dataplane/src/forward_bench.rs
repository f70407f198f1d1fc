//! What the mesh costs per frame one worker hands another: a frame of a
//! bucket that moved away (forwarded, [`Mover::forward`]) and a frame a
//! worker without a queue gives its carrier to send (software spill,
//! [`Mover::transmit_via_carrier`]), from the sender's bytes to the
//! receiver reading them, passes of [`PASS`] frames each. A measurement,
//! not a check (and timed), so ignored:
//!
//! ```text
//! cargo test --release -p flowlane-dataplane --lib -- --ignored --exact \
//!     handoff::forward_bench::forward_time --nocapture
//! ```
//!
//! Two threads by default (the sender and the receiver on their own, as
//! two workers); `FLOWLANE_BENCH_THREADS=1` runs both in one thread, pass
//! by pass, for instructions under callgrind (collect `*mesh_measured*`,
//! divide by the frames it prints); `FLOWLANE_BENCH_KIND=forward` or
//! `transmit` runs one of the two.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::mesh_tests::pair;
use super::{Mover, Work};

/// Frames per pass (a worker's receive batch).
const PASS: usize = 64;
/// A full-sized Ethernet frame.
const FRAME: usize = 1514;
/// Frames in flight at most (the sender waits for the receiver beyond it,
/// so that no inbox overflows and nothing is dropped).
const IN_FLIGHT: u64 = 4 * 1024;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Forward,
    Transmit,
}

/// One pass of the sender: `PASS` frames, then the pass's flush.
#[inline(never)]
fn send_pass_mesh_measured(a: &mut Mover, kind: Kind, frame: &[u8]) {
    for _ in 0..PASS {
        match kind {
            Kind::Forward => a.forward(Duration::ZERO, 0, 0, frame),
            Kind::Transmit => a.transmit_via_carrier(frame),
        }
    }
    a.flush();
}

/// One pass of the receiver: everything in its inbox, each frame's bytes
/// read (summed); returns the frames and the sum.
#[inline(never)]
fn receive_pass_mesh_measured(b: &mut Mover, out: &mut [u8]) -> (u64, u64) {
    let (mut frames, mut sum) = (0u64, 0u64);
    for w in b.take_work(Duration::ZERO) {
        if let Work::Frames(batches) = w {
            for (_, f) in batches.iter().flat_map(|b| b.iter()) {
                frames += 1;
                sum += read(f, out);
            }
        }
    }
    b.send_transmits(|f| {
        frames += 1;
        sum += read(f, out);
        Some(true)
    });
    (frames, sum)
}

/// Reads a frame as a TX ring's copy would: all of it, copied out (to
/// the receiver's `out`).
fn read(f: &[u8], out: &mut [u8]) -> u64 {
    out[..f.len()].copy_from_slice(f);
    u64::from(std::hint::black_box(&*out)[f.len() - 1])
}

/// Nanoseconds per frame of `passes` passes, the two workers on two
/// threads.
fn threaded(kind: Kind, passes: usize) -> f64 {
    let (mut a, mut b) = pair();
    let total = (passes * PASS) as u64;
    let taken = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let receiver = {
        let taken = taken.clone();
        std::thread::spawn(move || {
            let (mut n, mut out) = (0, vec![0u8; 2048]);
            while n < total {
                let (k, _) = receive_pass_mesh_measured(&mut b, &mut out);
                n += k;
                taken.store(n, Ordering::Release);
                if k == 0 {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let frame = vec![0x5a_u8; FRAME];
    let mut sent = 0u64;
    for _ in 0..passes {
        while sent - taken.load(Ordering::Acquire) > IN_FLIGHT {
            std::hint::spin_loop();
        }
        send_pass_mesh_measured(&mut a, kind, &frame);
        sent += PASS as u64;
    }
    receiver.join().expect("receiver");
    assert_eq!(a.stats.forward_dropped, 0, "nothing dropped");
    start.elapsed().as_nanos() as f64 / total as f64
}

/// The same, pass by pass in one thread; returns the frames.
fn one_thread(kind: Kind, passes: usize) -> u64 {
    let (mut a, mut b) = pair();
    let frame = vec![0x5a_u8; FRAME];
    let (mut n, mut out) = (0, vec![0u8; 2048]);
    for _ in 0..passes {
        send_pass_mesh_measured(&mut a, kind, &frame);
        n += receive_pass_mesh_measured(&mut b, &mut out).0;
    }
    assert_eq!(n, (passes * PASS) as u64);
    n
}

#[test]
#[ignore]
fn forward_time() {
    let threads = std::env::var("FLOWLANE_BENCH_THREADS").unwrap_or_default();
    let only = std::env::var("FLOWLANE_BENCH_KIND").unwrap_or_default();
    for (name, kind) in [("forward", Kind::Forward), ("transmit", Kind::Transmit)] {
        if !only.is_empty() && only != name {
            continue;
        }
        if threads == "1" {
            println!("{name}: {} frames", one_thread(kind, 2_000));
            continue;
        }
        let mut runs: Vec<f64> = (0..7).map(|_| threaded(kind, 20_000)).collect();
        runs.sort_by(f64::total_cmp);
        println!(
            "{name}: {:.0} ns a frame (median of 7; {:.0} to {:.0})",
            runs[3], runs[0], runs[6]
        );
    }
}
