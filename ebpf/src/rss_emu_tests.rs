//! The emulated RSS NIC's program run on crafted frames
//! (`BPF_PROG_TEST_RUN`): its hash against the Microsoft RSS
//! specification's verification vectors, with the frames dressed as they
//! may come (VLAN tags, IPv6 extension headers, fragments), the queue it
//! picks and counts; and the skeletons' map layouts against the constants
//! the loaders use.

use std::mem::MaybeUninit;
use std::net::IpAddr;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapHandle, ProgramInput};

use super::{HashFields, RssEmuConfig, RssEmuMaps, CFG_LEN, CFG_SLOTS};
use crate::limits::{MAX_KEY, MAX_QUEUES, MAX_TABLE};
use crate::skel::rss_emu::{RssEmuSkel, RssEmuSkelBuilder};

/// The Microsoft RSS specification's key ("Verifying the RSS Hash
/// Calculation").
const MS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The same document's vectors: source, source port, destination,
/// destination port, the 2-tuple hash, the 4-tuple hash.
const VECTORS: [(&str, u16, &str, u16, u32, u32); 8] = [
    (
        "66.9.149.187",
        2794,
        "161.142.100.80",
        1766,
        0x323e_8fc2,
        0x51cc_c178,
    ),
    (
        "199.92.111.2",
        14230,
        "65.69.140.83",
        4739,
        0xd718_262a,
        0xc626_b0ea,
    ),
    (
        "24.19.198.95",
        12898,
        "12.22.207.184",
        38024,
        0xd2d0_a5de,
        0x5c2b_394a,
    ),
    (
        "38.27.205.30",
        48228,
        "209.142.163.6",
        2217,
        0x8298_9176,
        0xafc7_327f,
    ),
    (
        "153.39.163.191",
        44251,
        "202.188.127.2",
        1303,
        0x5d18_09c5,
        0x10e8_28a2,
    ),
    (
        "3ffe:2501:200:1fff::7",
        2794,
        "3ffe:2501:200:3::1",
        1766,
        0x2cc1_8cd5,
        0x4020_7d3d,
    ),
    (
        "3ffe:501:8::260:97ff:fe40:efab",
        14230,
        "ff02::1",
        4739,
        0x0f0c_461c,
        0xdde5_1bbf,
    ),
    (
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        44251,
        "fe80::200:f8ff:fe21:67cf",
        38024,
        0x4b61_e985,
        0x02d1_feef,
    ),
];

const TCP: u8 = 6;
const UDP: u8 = 17;

/// One flow of [`VECTORS`] and how its frames are dressed.
#[derive(Clone, Copy)]
struct Flow {
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    proto: u8,
}

fn flows() -> impl Iterator<Item = (Flow, u32, u32)> {
    VECTORS.iter().map(|&(src, sport, dst, dport, two, four)| {
        let f = Flow {
            src: src.parse().unwrap(),
            sport,
            dst: dst.parse().unwrap(),
            dport,
            proto: TCP,
        };
        (f, two, four)
    })
}

/// An IPv6 extension header: its Next Header value and its bytes (the
/// first, its own Next Header field, is set by [`frame`]).
type Ext = (u8, Vec<u8>);

/// An 8-byte options header (Hop-by-Hop 0, Destination Options 60).
fn options(kind: u8) -> Ext {
    (kind, vec![0, 0, 1, 4, 0, 0, 0, 0])
}

/// A 16-byte options header (Hdr Ext Len 1).
fn long_options(kind: u8) -> Ext {
    (kind, vec![0, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
}

/// A Routing header (type 4) with `segments_left`.
fn routing(segments_left: u8) -> Ext {
    (43, vec![0, 0, 4, segments_left, 0, 0, 0, 0])
}

/// A Fragment header whose offset-and-M field is `off_m`.
fn fragment(off_m: u16) -> Ext {
    let o = off_m.to_be_bytes();
    (44, vec![0, 0, o[0], o[1], 0, 0, 0x56, 0x78])
}

/// Ethernet with `tags` (TPIDs), then the flow's IP header (IPv4:
/// `frag_off` as on the wire; IPv6: the extension headers of `chain`),
/// then its ports and a few bytes.
fn frame(f: Flow, tags: &[u16], frag_off: u16, chain: &[Ext]) -> Vec<u8> {
    let mut b = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for &tpid in tags {
        b.extend_from_slice(&tpid.to_be_bytes());
        b.extend_from_slice(&[0x00, 0x07]);
    }
    let mut l4 = Vec::new();
    l4.extend_from_slice(&f.sport.to_be_bytes());
    l4.extend_from_slice(&f.dport.to_be_bytes());
    l4.extend_from_slice(&[0xab; 16]);
    match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b.extend_from_slice(&0x0800u16.to_be_bytes());
            b.extend_from_slice(&[0x45, 0]);
            b.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
            b.extend_from_slice(&[0x12, 0x34]);
            b.extend_from_slice(&frag_off.to_be_bytes());
            b.extend_from_slice(&[64, f.proto, 0, 0]);
            b.extend_from_slice(&s.octets());
            b.extend_from_slice(&d.octets());
            b.extend_from_slice(&l4);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut payload = Vec::new();
            for (i, (_, bytes)) in chain.iter().enumerate() {
                payload.push(chain.get(i + 1).map_or(f.proto, |e| e.0));
                payload.extend_from_slice(&bytes[1..]);
            }
            payload.extend_from_slice(&l4);
            b.extend_from_slice(&0x86ddu16.to_be_bytes());
            b.extend_from_slice(&[0x60, 0, 0, 0]);
            b.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            b.push(chain.first().map_or(f.proto, |e| e.0));
            b.push(64);
            b.extend_from_slice(&s.octets());
            b.extend_from_slice(&d.octets());
            b.extend_from_slice(&payload);
        }
        _ => unreachable!("one family per flow"),
    }
    b
}

struct Loaded {
    skel: RssEmuSkel<'static>,
    maps: RssEmuMaps,
}

/// Both programs loaded, the maps programmed with the Microsoft key, a
/// table of `MAX_TABLE` entries where bucket b goes to queue b % 256
/// (every queue), the 4-tuple for TCP and UDP in both families. None (the
/// test skips) when not root.
fn loaded(test: &str) -> Option<Loaded> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping {test}: loading a BPF program needs root");
        return None;
    }
    // The skeleton borrows its object storage: leaked, once per test.
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let skel = RssEmuSkelBuilder::default()
        .open(storage)
        .expect("opening the RSS emulator")
        .load()
        .expect("loading the RSS emulator");
    let handle = |m| MapHandle::try_from(m).expect("a handle on a map");
    let maps = RssEmuMaps {
        cfg: handle(&skel.maps.rss_cfg),
        active: handle(&skel.maps.rss_active),
        table: handle(&skel.maps.rss_table),
        packets: handle(&skel.maps.rss_queue_packets),
    };
    maps.write(&config(HashFields::ALL_PORTS)).unwrap();
    Some(Loaded { skel, maps })
}

fn config(hash_fields: HashFields) -> RssEmuConfig {
    RssEmuConfig {
        enabled: true,
        key: MS_KEY.to_vec(),
        table: (0..MAX_TABLE).map(|b| b % MAX_QUEUES).collect(),
        hash_fields,
        queues: MAX_QUEUES,
    }
}

impl Loaded {
    /// The hash the emulator computes for `frame` (0: not hashed).
    fn hash(&self, frame: &[u8]) -> u32 {
        let input = ProgramInput {
            data_in: Some(frame),
            ..ProgramInput::default()
        };
        self.skel
            .progs
            .flowlane_rss_hash
            .test_run(input)
            .expect("running the RSS emulator's hash")
            .return_value
    }

    /// Runs the emulator itself on `frame`.
    fn steer(&self, frame: &[u8]) {
        let input = ProgramInput {
            data_in: Some(frame),
            ..ProgramInput::default()
        };
        self.skel
            .progs
            .flowlane_rss
            .test_run(input)
            .expect("running the RSS emulator");
    }

    fn counts(&self) -> Vec<u64> {
        self.maps.queue_packets(MAX_QUEUES).unwrap()
    }
}

#[test]
fn the_hash_is_the_specifications() {
    let Some(p) = loaded("the_hash_is_the_specifications") else {
        return;
    };
    for (f, two, four) in flows() {
        assert_eq!(p.hash(&frame(f, &[], 0, &[])), four, "{} 4-tuple", f.src);
        let udp = Flow { proto: UDP, ..f };
        assert_eq!(p.hash(&frame(udp, &[], 0, &[])), four, "{} UDP", f.src);
        // A protocol without ports: the addresses.
        let icmp = Flow { proto: 1, ..f };
        assert_eq!(p.hash(&frame(icmp, &[], 0, &[])), two, "{} ICMP", f.src);
    }
    // Hash fields without ports: the addresses.
    let addresses = HashFields {
        tcp4_ports: false,
        udp4_ports: false,
        tcp6_ports: false,
        udp6_ports: false,
    };
    p.maps.write(&config(addresses)).unwrap();
    for (f, two, _) in flows() {
        assert_eq!(p.hash(&frame(f, &[], 0, &[])), two, "{} 2-tuple", f.src);
    }
}

#[test]
fn ipv6_extension_headers_are_walked_to_the_ports() {
    let Some(p) = loaded("ipv6_extension_headers_are_walked_to_the_ports") else {
        return;
    };
    // As wire::peek::tcp_endpoints (flowlane's model) and xdp_steer walk
    // them: the ports of the 4-tuple.
    let walked: Vec<Vec<Ext>> = vec![
        vec![options(60)],
        vec![options(0), options(60)],
        vec![options(0), long_options(60)],
        vec![routing(0), options(60)],
        // An atomic fragment is a whole packet (RFC 6946).
        vec![fragment(0)],
        vec![options(0), fragment(0), options(60)],
        vec![options(60); 6],
    ];
    // The addresses alone: a real fragment, first or later, headers
    // out of order or beyond the walk, a later destination, AH.
    let addresses: Vec<Vec<Ext>> = vec![
        vec![fragment(1)],
        vec![fragment(3 << 3)],
        vec![options(0), fragment(3 << 3 | 1)],
        vec![options(60), options(0)],
        vec![routing(1)],
        vec![options(60); 7],
        vec![(51, vec![0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1])],
    ];
    for (f, two, four) in flows().filter(|(f, _, _)| f.src.is_ipv6()) {
        for proto in [TCP, UDP] {
            let f = Flow { proto, ..f };
            for (i, chain) in walked.iter().enumerate() {
                assert_eq!(
                    p.hash(&frame(f, &[], 0, chain)),
                    four,
                    "{} walked {i}",
                    f.src
                );
            }
            for (i, chain) in addresses.iter().enumerate() {
                assert_eq!(
                    p.hash(&frame(f, &[], 0, chain)),
                    two,
                    "{} addresses {i}",
                    f.src
                );
            }
        }
        // Ports past the payload length (in the frame's padding).
        let mut short = frame(f, &[], 0, &[options(60)]);
        short[14 + 4..14 + 6].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(p.hash(&short), two, "{} ports past the payload", f.src);
        // A header running past the frame.
        let mut cut = frame(f, &[], 0, &[options(60)]);
        cut[14 + 40 + 1] = 200;
        assert_eq!(p.hash(&cut), two, "{} header past the frame", f.src);
    }
}

#[test]
fn ipv4_fragments_hash_their_addresses() {
    let Some(p) = loaded("ipv4_fragments_hash_their_addresses") else {
        return;
    };
    for (f, two, four) in flows().filter(|(f, _, _)| f.src.is_ipv4()) {
        // DF alone is no fragment.
        assert_eq!(p.hash(&frame(f, &[], 0x4000, &[])), four, "{} DF", f.src);
        for frag_off in [0x2000, 0x2003, 0x0003] {
            let h = p.hash(&frame(f, &[], frag_off, &[]));
            assert_eq!(h, two, "{} frag_off {frag_off:#x}", f.src);
        }
    }
}

#[test]
fn vlan_tags_are_skipped() {
    let Some(p) = loaded("vlan_tags_are_skipped") else {
        return;
    };
    for (f, _, four) in flows() {
        for tags in [
            &[0x8100][..],
            &[0x88a8],
            &[0x88a8, 0x8100],
            &[0x8100, 0x8100],
        ] {
            let h = p.hash(&frame(
                f,
                tags,
                0,
                &[options(60)][..usize::from(f.src.is_ipv6())],
            ));
            assert_eq!(h, four, "{} behind {tags:x?}", f.src);
        }
        // Three tags, or 802.1ad inside: not IP as far as the NIC sees.
        for tags in [&[0x88a8, 0x8100, 0x8100][..], &[0x8100, 0x88a8]] {
            assert_eq!(
                p.hash(&frame(f, tags, 0, &[])),
                0,
                "{} behind {tags:x?}",
                f.src
            );
        }
    }
}

/// Runs `f` on a thread of its own in a new network namespace: the
/// emulator sends a packet that carries a socket (as a test run's does)
/// as a clone through its device, here the namespace's loopback, down.
fn in_new_netns(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("a network namespace of the test's own");
            f();
        })
        .join()
        .expect("the test's thread");
    });
}

#[test]
fn the_queue_is_the_tables_and_every_frame_is_counted() {
    let Some(p) = loaded("the_queue_is_the_tables_and_every_frame_is_counted") else {
        return;
    };
    in_new_netns(|| {
        let queue = |hash: u32| ((hash & (MAX_TABLE - 1)) % MAX_QUEUES) as usize;
        for (f, two, four) in flows() {
            let ext = &[options(60)][..usize::from(f.src.is_ipv6())];
            for (frame, hash) in [
                (frame(f, &[], 0, ext), four),
                (frame(f, &[0x88a8, 0x8100], 0, ext), four),
                (frame(Flow { proto: 1, ..f }, &[0x8100], 0, &[]), two),
            ] {
                let before = p.counts();
                p.steer(&frame);
                let mut want = before.clone();
                want[queue(hash)] += 1;
                assert_eq!(p.counts(), want, "{} hash {hash:#x}", f.src);
            }
        }
        // Not IP (ARP; three tags): queue 0, counted.
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        let (f, _, _) = flows().next().unwrap();
        for frame in [arp, frame(f, &[0x88a8, 0x8100, 0x8100], 0, &[])] {
            let before = p.counts()[0];
            p.steer(&frame);
            assert_eq!(p.counts()[0], before + 1);
        }
    });
}

#[test]
fn a_new_configuration_is_written_aside_and_switched_to() {
    let Some(p) = loaded("a_new_configuration_is_written_aside_and_switched_to") else {
        return;
    };
    let (f, two, four) = flows().next().unwrap();
    let slot = |m: &RssEmuMaps| super::live_cfg(&m.cfg, &m.active).unwrap().0;
    let first = slot(&p.maps);
    let mut c = config(HashFields::ALL_PORTS);
    c.key = vec![0; 40];
    p.maps.write_config(&c).unwrap();
    assert_ne!(slot(&p.maps), first, "the idle slot was written");
    assert_eq!(p.maps.read().unwrap(), c);
    assert_eq!(p.hash(&frame(f, &[], 0, &[])), 0, "an all-zero key");
    c.key = MS_KEY.to_vec();
    c.table = vec![1; 64];
    p.maps.write(&c).unwrap();
    assert_eq!(slot(&p.maps), first);
    assert_eq!(p.maps.read().unwrap(), c);
    assert_eq!(p.hash(&frame(f, &[], 0, &[])), four);
    assert_ne!(two, four);
}

#[test]
fn a_configuration_is_checked_against_its_queues() {
    let mut c = config(HashFields::ALL_PORTS);
    c.queues = 4;
    c.table = vec![0, 1, 2, 4];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("queue 4") && e.contains("0 to 3"), "{e}");
    c.table = vec![0, 1, 2];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("power of two"), "{e}");
    c.table = vec![3; 4];
    assert!(c.validate().is_ok());
    c.queues = 0;
    assert!(c.validate().is_err());
}

#[test]
fn the_table_map_refuses_entries_beyond_the_live_table_and_queues() {
    let Some(p) = loaded("the_table_map_refuses_entries_beyond_the_live_table_and_queues") else {
        return;
    };
    let mut c = config(HashFields::ALL_PORTS);
    c.queues = 4;
    c.table = vec![0; 128];
    p.maps.write(&c).unwrap();
    // The program that uses the table is flowlane_rss, loaded here as by
    // `install`.
    let t = super::RssTableMap::open_by_id(p.maps.table_map_id().unwrap()).unwrap();
    t.set(127, 3).unwrap();
    assert_eq!(p.maps.read().unwrap().table[127], 3);
    let e = t.set(128, 0).unwrap_err().to_string();
    assert!(e.contains("entry 128") && e.contains("128 entries"), "{e}");
    let e = t.set(0, 4).unwrap_err().to_string();
    assert!(e.contains("queue 4") && e.contains("4 queues"), "{e}");
    assert_eq!(p.maps.read().unwrap().table[0], 0);
}

/// The skeletons' maps are the sizes their loaders assume
/// (`src/bpf/flowlane_common.h`, `crate::limits`, the value layouts the
/// loaders encode): opened, not loaded, so no privileges needed.
#[test]
fn skeleton_maps_match_the_loaders() {
    use crate::skel::{impair, rss_emu, xdp_steer};

    let mut storage = MaybeUninit::uninit();
    let rss = RssEmuSkelBuilder::default().open(&mut storage).unwrap();
    assert_eq!(rss.maps.rss_cfg.max_entries(), CFG_SLOTS);
    assert_eq!(size_of::<rss_emu::types::rss_cfg>(), CFG_LEN);
    assert_eq!(
        size_of_val(&rss_emu::types::rss_cfg::default().key),
        MAX_KEY
    );
    assert_eq!(rss.maps.rss_active.max_entries(), 1);
    assert_eq!(rss.maps.rss_table.max_entries(), MAX_TABLE);
    assert_eq!(rss.maps.rss_queue_packets.max_entries(), MAX_QUEUES);

    let mut storage = MaybeUninit::uninit();
    let steer = xdp_steer::XdpSteerSkelBuilder::default()
        .open(&mut storage)
        .unwrap();
    assert_eq!(steer.maps.fl_xsks.max_entries(), MAX_QUEUES);
    // steer.rs's STAT_KINDS counters per queue.
    assert_eq!(steer.maps.fl_stats.max_entries(), MAX_QUEUES * 4);
    // steer.rs's CFG_LEN.
    assert_eq!(size_of::<xdp_steer::types::fl_cfg>(), 28);

    // impair.rs encodes 28 bytes per direction.
    assert_eq!(size_of::<impair::types::impair_cfg>(), 28);
}
