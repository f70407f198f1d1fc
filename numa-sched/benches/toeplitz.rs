//! Toeplitz hash throughput: bit-serial reference vs table-driven, on IPv4 (12-byte) and
//! IPv6 (36-byte) 4-tuple inputs with the Microsoft verification key.
//!
//! `cargo bench -p flowlane-numa-sched --bench toeplitz -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_main, Criterion, Throughput};
use flowlane_numa_sched::{hash_reference, FlowTuple, HashInput, Protocol, RssKey, Toeplitz};

/// 256 distinct inputs, so that the benchmark is not a single cached input.
fn inputs(src: &str, dst: &str) -> Vec<HashInput> {
    let (src, dst): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    (0..256u16)
        .map(|i| {
            FlowTuple {
                src,
                dst,
                src_port: 1024 + i * 211,
                dst_port: 80,
                protocol: Protocol::Tcp,
            }
            .hash_input(true)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let key = RssKey::microsoft_default();
    let fast = Toeplitz::new(&key);
    let cases = [
        ("ipv4_4tuple", inputs("66.9.149.187", "161.142.100.80")),
        (
            "ipv6_4tuple",
            inputs("3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1"),
        ),
    ];
    let mut group = c.benchmark_group("toeplitz");
    for (name, inputs) in &cases {
        group.throughput(Throughput::Elements(inputs.len() as u64));
        group.bench_function(format!("reference/{name}"), |b| {
            b.iter(|| {
                inputs.iter().fold(0u32, |acc, i| {
                    acc ^ hash_reference(&key, black_box(i.as_bytes()))
                })
            })
        });
        group.bench_function(format!("fast/{name}"), |b| {
            b.iter(|| {
                inputs
                    .iter()
                    .fold(0u32, |acc, i| acc ^ fast.hash(black_box(i.as_bytes())))
            })
        });
    }
    group.finish();
}

// criterion_group! defines an undocumented `pub fn benches`.
#[allow(missing_docs)]
mod group {
    use super::bench;
    criterion::criterion_group!(benches, bench);
}
use group::benches;
criterion_main!(benches);
