//! The cost of classifying a received frame, for callgrind: an Ethernet +
//! IPv4 + TCP data frame as the data path receives most (timestamps, 1 448
//! payload bytes) parsed the way it parses it
//! ([`flowlane_wire::packet::parse_frame_with`], every checksum verified),
//! and its TCP header alone ([`flowlane_wire::TcpRepr::parse_segment`], as
//! `flowlane-tcp`'s simulator does):
//!
//! ```text
//! cargo build --release -p flowlane-wire --example parse_cost
//! valgrind --tool=callgrind --toggle-collect='*measured_frame*' target/release/examples/parse_cost 100000
//! valgrind --tool=callgrind --toggle-collect='*measured_header*' target/release/examples/parse_cost 100000
//! ```
//!
//! Divide the instructions collected by the count given (default 100 000).

use flowlane_wire::packet::{emit_eth_ipv4_tcp_headers, parse_frame_with, ETH_IPV4_TCP_OFFSET};
use flowlane_wire::{
    ChecksumPolicy, EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, TcpFlags,
    TcpOptions, TcpRepr, VlanTags,
};
use std::hint::black_box;
use std::net::Ipv4Addr;

/// The frame: 10.0.0.1:40000 → 10.0.0.2:5001, ACK|PSH, timestamps, 1 448
/// bytes of payload.
fn frame() -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: 40_000,
        dst_port: 5_001,
        seq: 0x1234_5678,
        ack: 0x9abc_def0,
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 512,
        urgent: 0,
        options: TcpOptions {
            timestamps: Some((1_000, 2_000)),
            ..TcpOptions::default()
        },
    };
    let mut buf = vec![0u8; 2048];
    let hl = tcp
        .emit(&mut buf[ETH_IPV4_TCP_OFFSET..])
        .expect("room for the header");
    let seg_len = hl + 1448;
    for (i, b) in buf[ETH_IPV4_TCP_OFFSET + hl..ETH_IPV4_TCP_OFFSET + seg_len]
        .iter_mut()
        .enumerate()
    {
        *b = i as u8;
    }
    let eth = EthernetRepr {
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        vlan: VlanTags::NONE,
        ethertype: EtherType::Ipv4,
    };
    let ip = Ipv4Repr::new(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        IpProtocol::Tcp,
        0,
    );
    let n = emit_eth_ipv4_tcp_headers(&mut buf, &eth, &ip, seg_len).expect("a frame");
    buf.truncate(n);
    buf
}

#[inline(never)]
fn measured_frame(f: &[u8]) -> usize {
    let p = parse_frame_with(black_box(f), ChecksumPolicy::VERIFY_ALL).expect("a valid frame");
    black_box(&p);
    p.payload.len()
}

#[inline(never)]
fn measured_header(seg: &[u8]) -> usize {
    let (r, payload) = TcpRepr::parse_segment(black_box(seg)).expect("a valid segment");
    black_box(&r);
    payload.len()
}

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let f = frame();
    let mut total = 0;
    for _ in 0..count {
        total += measured_frame(&f);
    }
    for _ in 0..count {
        total += measured_header(&f[ETH_IPV4_TCP_OFFSET..]);
    }
    assert_eq!(total, 2 * count * 1448);
    println!("parsed {count} frames and {count} headers");
}
