//! Fuzzes the frame classifier and the in-place turn-around helpers: no input may panic, and a
//! frame whose checksums verify must still verify after being turned around.
#![no_main]

use flowlane_wire_fuzz::wire::{self, ChecksumPolicy, EthernetAddress};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

fuzz_target!(|data: &[u8]| {
    let verified = wire::parse_frame(data).is_ok();
    if let Ok(f) = wire::parse_frame_with(data, ChecksumPolicy::IP_ONLY) {
        assert!(f.l3_end <= data.len());
        assert!(f.payload.start <= f.payload.end && f.payload.end <= f.l3_end);
        let _ = (f.l3(), f.l4(), f.payload());
        let _ = wire::packet::ndp_advert_for(&f, EthernetAddress([2, 0, 0, 0, 0, 1]), |_| true);
    }
    let mut b = data.to_vec();
    if wire::packet::turn_around_udp(&mut b).is_ok() && verified {
        assert!(wire::parse_frame(&b).is_ok());
    }
    let mut b = data.to_vec();
    if wire::packet::answer_icmp_echo(&mut b).is_ok() && verified {
        assert!(wire::parse_frame(&b).is_ok());
    }
    let mut b = data.to_vec();
    let _ = wire::packet::answer_arp(
        &mut b,
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        Ipv4Addr::new(10, 0, 0, 2),
    );
});
