//! The program run on crafted frames (`BPF_PROG_TEST_RUN`) with an empty
//! XSKMAP: a frame the program takes for flowlane's is redirected to queue
//! 0's missing socket and comes back as `XDP_DROP` (counted `no_socket`), a
//! first fragment it drops as `XDP_DROP` (counted `fragment_dropped`), the
//! kernel's as `XDP_PASS`.

use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};

use libbpf_rs::ProgramInput;

use super::frames::*;
use super::{load, LocalAddress, Maps, SteerStats};
use crate::skel::xdp_steer::XdpSteerSkel;

struct Loaded {
    skel: XdpSteerSkel<'static>,
    maps: Maps,
}

/// The program loaded, `PORT` claimed (TCP and UDP) on `v4` and `v6`,
/// as the data path sets it up; None (the test skips) when not root.
fn loaded(test: &str, v4: LocalAddress<Ipv4Addr>, v6: LocalAddress<Ipv6Addr>) -> Option<Loaded> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping {test}: loading a BPF program needs root");
        return None;
    }
    // The skeleton borrows its object storage: leaked, once per test.
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let (skel, maps) = load(storage).expect("loading the steering program");
    claim_port(&maps, v4, v6);
    Some(Loaded { skel, maps })
}

impl Loaded {
    /// The program's verdict on `frame` (it arrives on queue 0).
    fn run(&self, frame: &[u8]) -> u32 {
        let input = ProgramInput {
            data_in: Some(frame),
            ..ProgramInput::default()
        };
        self.skel
            .progs
            .flowlane_steer
            .test_run(input)
            .expect("running the steering program")
            .return_value
    }

    fn stats(&self) -> SteerStats {
        self.maps.stats(0).unwrap()
    }
}

#[test]
fn first_fragments_to_flowlanes_ports_are_dropped_and_counted() {
    let test = "first_fragments_to_flowlanes_ports_are_dropped_and_counted";
    let Some(p) = loaded(
        test,
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    // A fragmented SYN, in either family, and a fragmented datagram:
    // the kernel would reassemble them and answer for flowlane.
    assert_eq!(p.run(&v4(OURS_V4, TCP, MF, PORT)), XDP_DROP);
    assert_eq!(p.run(&v6(OURS_V6, Some(1), TCP, PORT)), XDP_DROP);
    assert_eq!(p.run(&v4(OURS_V4, UDP, MF, PORT)), XDP_DROP);
    assert_eq!(p.run(&v6(OURS_V6, Some(1), UDP, PORT)), XDP_DROP);
    let s = p.stats();
    assert_eq!(s.fragment_dropped, 4, "{s:?}");
    assert_eq!((s.no_socket, s.redirected, s.passed), (0, 0, 0), "{s:?}");
}

#[test]
fn other_fragments_are_the_kernels() {
    let test = "other_fragments_are_the_kernels";
    let Some(p) = loaded(
        test,
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    let kernels = [
        // First fragments to a port flowlane does not own.
        v4(OURS_V4, TCP, MF, UNCLAIMED),
        v6(OURS_V6, Some(1), TCP, UNCLAIMED),
        v4(OURS_V4, UDP, MF, UNCLAIMED),
        // ... or to another of the interface's addresses.
        v4(OTHER_V4, TCP, MF, PORT),
        v6(LINK_LOCAL, Some(1), TCP, PORT),
        // Later fragments (what looks like ports is payload): to the
        // kernel's reassembly, which expires them without their first.
        v4(OURS_V4, TCP, MF | 3, PORT),
        v4(OURS_V4, TCP, 3, PORT),
        v6(OURS_V6, Some(3 << 3 | 1), TCP, PORT),
        v6(OURS_V6, Some(3 << 3), TCP, PORT),
    ];
    for (i, f) in kernels.iter().enumerate() {
        assert_eq!(p.run(f), XDP_PASS, "frame {i}");
    }
    let s = p.stats();
    assert_eq!(s.fragment_dropped, 0, "{s:?}");
    assert_eq!(s.passed, kernels.len() as u64, "{s:?}");
}

#[test]
fn ipv6_extension_headers_are_walked_to_the_port() {
    let test = "ipv6_extension_headers_are_walked_to_the_port";
    let Some(p) = loaded(
        test,
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    // flowlane's (the kernel would reset its connection): redirected
    // to queue 0, which has no socket here.
    let ours = [
        v6_chain(OURS_V6, &[options(60)], TCP, PORT),
        v6_chain(OURS_V6, &[options(0), options(60)], UDP, PORT),
        v6_chain(OURS_V6, &[routing(0), options(60)], TCP, PORT),
        // An atomic fragment is a whole packet (RFC 6946).
        v6_chain(OURS_V6, &[fragment(0)], TCP, PORT),
        v6_chain(OURS_V6, &vec![options(60); 6], TCP, PORT),
    ];
    for (i, f) in ours.iter().enumerate() {
        assert_eq!(p.run(f), XDP_DROP, "frame {i}");
    }
    let s = p.stats();
    assert_eq!(
        (s.no_socket, s.fragment_dropped, s.passed),
        (5, 0, 0),
        "{s:?}"
    );
    // A first fragment behind other headers: dropped as such.
    let first = v6_chain(OURS_V6, &[options(0), fragment(1)], TCP, PORT);
    assert_eq!(p.run(&first), XDP_DROP);
    assert_eq!(p.stats().fragment_dropped, 1);
    let mut truncated = v6_chain(OURS_V6, &[options(60)], TCP, PORT);
    truncated[14 + 40 + 1] = 200; // a header running past the frame
    let kernels = [
        v6_chain(OURS_V6, &[options(60)], TCP, UNCLAIMED),
        // Not the final destination (RFC 8200 §4.4).
        v6_chain(OURS_V6, &[routing(1)], TCP, PORT),
        // Hop-by-Hop not first is malformed (§4.1).
        v6_chain(OURS_V6, &[options(60), options(0)], TCP, PORT),
        // Longer than the walk.
        v6_chain(OURS_V6, &vec![options(60); 7], TCP, PORT),
        // A later fragment behind other headers.
        v6_chain(OURS_V6, &[options(0), fragment(3 << 3 | 1)], TCP, PORT),
        // AH: flowlane has no IPsec.
        v6_chain(
            OURS_V6,
            &[(51, vec![0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1])],
            TCP,
            PORT,
        ),
        truncated,
    ];
    for (i, f) in kernels.iter().enumerate() {
        assert_eq!(p.run(f), XDP_PASS, "frame {i}");
    }
    let s = p.stats();
    assert_eq!(s.passed, kernels.len() as u64, "{s:?}");
    assert_eq!((s.no_socket, s.fragment_dropped), (5, 1), "{s:?}");
}

#[test]
fn whole_frames_go_by_port_and_address() {
    let Some(p) = loaded(
        "whole_frames_go_by_port_and_address",
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    // flowlane's: redirected to queue 0, which has no socket here.
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, PORT)), XDP_DROP);
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0x4000, PORT)), XDP_DROP, "DF");
    assert_eq!(p.run(&v6(OURS_V6, None, UDP, PORT)), XDP_DROP);
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, UNCLAIMED)), XDP_PASS);
    assert_eq!(p.run(&v4(OTHER_V4, TCP, 0, PORT)), XDP_PASS);
    assert_eq!(p.run(&v6(LINK_LOCAL, None, TCP, PORT)), XDP_PASS);
    let s = p.stats();
    assert_eq!((s.no_socket, s.passed, s.fragment_dropped), (3, 3, 0));
}

/// The ICMP errors flowlane acts on about a segment from one of its ports
/// are its own: every destination unreachable of an assigned code
/// (fragmentation needed among them) and an ICMPv6 packet too big. Others
/// (a time exceeded, an unassigned code, one quoting a port not claimed)
/// are the kernel's.
#[test]
fn icmp_errors_about_flowlanes_segments_are_its_own() {
    let Some(p) = loaded(
        "icmp_errors_about_flowlanes_segments_are_its_own",
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    for code in 0..=15 {
        assert_eq!(p.run(&icmp_v4(3, code, PORT)), XDP_DROP, "v4 code {code}");
    }
    for code in 0..=6 {
        assert_eq!(p.run(&icmp_v6(1, code, PORT)), XDP_DROP, "v6 code {code}");
    }
    assert_eq!(p.run(&icmp_v6(2, 0, PORT)), XDP_DROP, "packet too big");
    let ours = 16 + 7 + 1;
    assert_eq!(p.run(&icmp_v4(3, 16, PORT)), XDP_PASS);
    assert_eq!(p.run(&icmp_v4(11, 0, PORT)), XDP_PASS, "time exceeded");
    assert_eq!(p.run(&icmp_v4(3, 3, UNCLAIMED)), XDP_PASS);
    assert_eq!(p.run(&icmp_v6(1, 7, PORT)), XDP_PASS);
    assert_eq!(p.run(&icmp_v6(3, 0, PORT)), XDP_PASS, "time exceeded");
    assert_eq!(p.run(&icmp_v6(1, 4, UNCLAIMED)), XDP_PASS);
    let s = p.stats();
    assert_eq!((s.no_socket, s.passed), (ours, 6), "{s:?}");
}

/// Ports released (a service's stop) are the kernel's again: a SYN to one
/// passes, as one to a port never claimed does, and so does a frame to
/// the ephemeral range.
#[test]
fn released_ports_are_the_kernels() {
    let Some(p) = loaded(
        "released_ports_are_the_kernels",
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    p.maps.set_ephemeral_range(40000, 40999).unwrap();
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, PORT)), XDP_DROP, "claimed");
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, 40500)), XDP_DROP, "ephemeral");
    p.maps.release_ports().unwrap();
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, PORT)), XDP_PASS);
    assert_eq!(p.run(&v6(OURS_V6, None, UDP, PORT)), XDP_PASS);
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, 40500)), XDP_PASS);
}

#[test]
fn a_family_without_an_address_is_the_kernels() {
    // Only an IPv4 address: IPv6 to a claimed port, link-local or
    // not, is the kernel's.
    let test = "a_family_without_an_address_is_the_kernels";
    let Some(p) = loaded(test, LocalAddress::Only(OURS_V4), LocalAddress::Unclaimed) else {
        return;
    };
    assert_eq!(p.run(&v6(LINK_LOCAL, None, TCP, PORT)), XDP_PASS);
    assert_eq!(p.run(&v6(OURS_V6, None, TCP, PORT)), XDP_PASS);
    assert_eq!(p.run(&v6(LINK_LOCAL, Some(1), TCP, PORT)), XDP_PASS);
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, PORT)), XDP_DROP, "flowlane's");
    // Only an IPv6 address: the same for IPv4.
    let Some(p) = loaded(test, LocalAddress::Unclaimed, LocalAddress::Only(OURS_V6)) else {
        return;
    };
    assert_eq!(p.run(&v4(OURS_V4, TCP, 0, PORT)), XDP_PASS);
    assert_eq!(p.run(&v4(OURS_V4, UDP, MF, PORT)), XDP_PASS);
    assert_eq!(p.run(&v6(OURS_V6, None, TCP, PORT)), XDP_DROP, "flowlane's");
    // A program that does not know its addresses claims them all.
    let Some(p) = loaded(test, LocalAddress::Any, LocalAddress::Any) else {
        return;
    };
    assert_eq!(p.run(&v6(LINK_LOCAL, None, TCP, PORT)), XDP_DROP);
    assert_eq!(p.run(&v4(OTHER_V4, TCP, 0, PORT)), XDP_DROP);
}

/// An IPv4 source route not finished (RFC 791 §3.1: its pointer not past
/// its end) names a later destination, not this host, as an IPv6 Routing
/// header with segments left does; a finished one asks for replies along
/// the route reversed (RFC 1122 §4.2.3.8), which flowlane does not do:
/// both are the kernel's (which drops them unless accept_source_route, or
/// forwards the first). Other options are walked over to the port;
/// options that do not parse are the kernel's to answer.
#[test]
fn ipv4_source_routes_are_the_kernels() {
    let test = "ipv4_source_routes_are_the_kernels";
    let Some(p) = loaded(
        test,
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    ) else {
        return;
    };
    const LSRR: u8 = 131;
    const SSRR: u8 = 137;
    const NOP: u8 = 1;
    // Record route (7), 3 slots, none used.
    let record_route = [7u8, 15, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let kernels = [
        v4_options(OURS_V4, &source_route(LSRR, 1, 4), TCP, PORT),
        v4_options(OURS_V4, &source_route(SSRR, 2, 8), TCP, PORT),
        v4_options(OURS_V4, &source_route(LSRR, 2, 4), UDP, PORT),
        // Behind other options, and after a first hop.
        v4_options(
            OURS_V4,
            &[&[NOP, NOP][..], &source_route(SSRR, 3, 12)].concat(),
            TCP,
            PORT,
        ),
        v4_options(
            OURS_V4,
            &[&record_route[..], &source_route(LSRR, 1, 4)].concat(),
            TCP,
            PORT,
        ),
        // As the first fragment of a datagram to the port: not dropped,
        // not this host's to reassemble.
        {
            let mut f = v4_options(OURS_V4, &source_route(LSRR, 1, 4), UDP, PORT);
            f[14 + 6] = 0x20; // MF
            f
        },
        // Options that do not parse: a length below 2, one past the
        // header, a source route too short for its pointer.
        v4_options(OURS_V4, &[7, 0, 4, 0], TCP, PORT),
        v4_options(OURS_V4, &[7, 9, 4, 0], TCP, PORT),
        v4_options(OURS_V4, &[LSRR, 2, 0, 0], TCP, PORT),
        // Finished routes: this host is the last destination, the reply's
        // route the reversed one.
        v4_options(OURS_V4, &source_route(LSRR, 1, 8), TCP, PORT),
        v4_options(OURS_V4, &source_route(SSRR, 2, 12), UDP, PORT),
    ];
    for (i, f) in kernels.iter().enumerate() {
        assert_eq!(p.run(f), XDP_PASS, "frame {i}");
    }
    let s = p.stats();
    assert_eq!(s.passed, kernels.len() as u64, "{s:?}");
    assert_eq!((s.no_socket, s.fragment_dropped), (0, 0), "{s:?}");
    // flowlane's: redirected to queue 0, which has no socket here.
    let ours = [
        v4_options(OURS_V4, &[NOP, NOP, NOP, 0], TCP, PORT),
        v4_options(OURS_V4, &record_route, TCP, PORT),
        // The longest header: 40 bytes of options, as many as there can
        // be, and a long one at its end.
        v4_options(OURS_V4, &[NOP; 40], TCP, PORT),
        v4_options(
            OURS_V4,
            &[&[NOP; 25][..], &record_route[..]].concat(),
            TCP,
            PORT,
        ),
    ];
    for (i, f) in ours.iter().enumerate() {
        assert_eq!(p.run(f), XDP_DROP, "frame {i}");
    }
    let s = p.stats();
    assert_eq!(s.no_socket, ours.len() as u64, "{s:?}");
    // Not flowlane's port: the kernel's, source route or not.
    assert_eq!(
        p.run(&v4_options(
            OURS_V4,
            &source_route(LSRR, 1, 8),
            TCP,
            UNCLAIMED
        )),
        XDP_PASS
    );
}
