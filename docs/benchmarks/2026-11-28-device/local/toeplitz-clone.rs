use flowlane_numa_sched::{RssKey, Toeplitz};
use std::time::Instant;
fn main() {
    let t = Toeplitz::new(&RssKey::microsoft_default());
    let n = 200_000;
    let mut keep = Vec::with_capacity(16);
    let s = Instant::now();
    for i in 0..n {
        let c = std::hint::black_box(t.clone());
        if i % 16 == 0 { keep.clear(); }
        keep.push(c);
    }
    println!("clone: {:.1} ns", s.elapsed().as_nanos() as f64 / n as f64);
}
