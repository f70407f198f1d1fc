//! The XDP steering program: flowlane's ports to the AF_XDP socket of the
//! receive queue, everything else to the kernel.
//!
//! The program is attached in native (driver) mode through a BPF link. The
//! link is owned by [`Steering`]: when it is dropped — or when the process
//! dies, even by SIGKILL — the kernel detaches the program, so nothing is left
//! on the interface.

use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle};

use crate::limits::MAX_QUEUES;
use crate::skel::xdp_steer::{XdpSteerSkel, XdpSteerSkelBuilder};
use crate::{Error, Result};

/// Transport protocol of a port that flowlane owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl Proto {
    fn ip_proto(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

/// Per-queue counters kept by the XDP program (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerStats {
    /// Frames handed to the queue's AF_XDP socket.
    pub redirected: u64,
    /// Frames passed to the kernel (not flowlane's).
    pub passed: u64,
    /// flowlane's frames dropped because the queue had no socket.
    pub no_socket: u64,
    /// First fragments of TCP or UDP datagrams to flowlane's ports,
    /// dropped: flowlane does not reassemble, and the kernel would answer
    /// the reassembled datagram with a RST (or ICMP port unreachable). The
    /// later fragments go to the kernel, whose reassembly expires them
    /// silently.
    pub fragment_dropped: u64,
}

const STAT_KINDS: u32 = 4;

/// `struct fl_cfg`'s size: ephemeral range (4), flags (4), IPv4 (4), IPv6
/// (16).
const CFG_LEN: usize = 28;
/// `FL_DST_V4`, `FL_DST_V6`, `FL_NO_V4` and `FL_NO_V6` of `struct
/// fl_cfg`'s flags.
const DST_V4: u32 = 1;
const DST_V6: u32 = 2;
const NO_V4: u32 = 4;
const NO_V6: u32 = 8;

/// Which addresses of one IP family flowlane's ports are claimed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalAddress<A> {
    /// Every address of the family (a program that does not know its own).
    Any,
    /// This one only: frames to the interface's other addresses of the
    /// family (secondary, link-local, another VLAN's the NIC untagged) are
    /// the kernel's.
    Only(A),
    /// None: flowlane has no address of the family, whose frames are all
    /// the kernel's.
    Unclaimed,
}

impl<A> LocalAddress<A> {
    /// `Only(a)` for `Some(a)`, `Unclaimed` for `None`: the claim of a
    /// program that knows its addresses.
    pub fn from_option(a: Option<A>) -> LocalAddress<A> {
        a.map_or(LocalAddress::Unclaimed, LocalAddress::Only)
    }
}

/// The steering program, attached to one interface.
#[derive(Debug)]
pub struct Steering {
    _link: Link,
    maps: Maps,
}

/// Handles on the program's maps, which outlive its skeleton.
#[derive(Debug)]
struct Maps {
    xsks: MapHandle,
    cfg: MapHandle,
    ports: MapHandle,
    stats: MapHandle,
}

/// Opens and loads the program (not attached), with handles on its maps.
fn load(storage: &mut MaybeUninit<libbpf_rs::OpenObject>) -> Result<(XdpSteerSkel<'_>, Maps)> {
    let open = XdpSteerSkelBuilder::default()
        .open(storage)
        .map_err(Error::bpf("opening the XDP steering program"))?;
    let skel = open.load().map_err(Error::bpf(
        "loading the XDP steering program (is this root, on a kernel with BPF?)",
    ))?;
    let handle = |m: &libbpf_rs::MapMut<'_>, name: &str| {
        MapHandle::try_from(m).map_err(Error::bpf(format!("duplicating map {name}")))
    };
    let maps = Maps {
        xsks: handle(&skel.maps.fl_xsks, "fl_xsks")?,
        cfg: handle(&skel.maps.fl_cfg, "fl_cfg")?,
        ports: handle(&skel.maps.fl_ports, "fl_ports")?,
        stats: handle(&skel.maps.fl_stats, "fl_stats")?,
    };
    Ok((skel, maps))
}

impl Steering {
    /// Loads the program and attaches it to `ifindex` in native XDP mode.
    ///
    /// Fails with a message naming the cause when the interface has no
    /// native XDP support or an XDP program is already attached.
    pub fn attach(ifindex: u32) -> Result<Steering> {
        let mut storage = MaybeUninit::uninit();
        let (skel, maps) = load(&mut storage)?;
        let link = skel
            .progs
            .flowlane_steer
            .attach_xdp(ifindex as i32)
            .map_err(|source| {
                // A link over a program attached some other way (netlink: `ip
                // link set dev IF xdp obj ...`, or a pinned link) fails with
                // EBUSY, which libbpf-rs does not name: ask the device.
                let attached = libbpf_rs::Xdp::new(skel.progs.flowlane_steer.as_fd())
                    .query_id(ifindex as i32, libbpf_rs::XdpFlags::NONE)
                    .unwrap_or(0);
                let hint = match source.kind() {
                    _ if attached != 0 => format!(
                    "another XDP program (id {attached}) is attached; remove it (ip link set dev \
                     IF xdp off, or delete its pinned link) and retry"
                ),
                    libbpf_rs::ErrorKind::AlreadyExists => {
                        "another XDP program is attached; remove it \
                     (ip link set dev IF xdp off) and retry"
                            .into()
                    }
                    libbpf_rs::ErrorKind::Unsupported => {
                        "the interface has no native XDP support; use the kernel-socket backend"
                            .into()
                    }
                    _ => "attaching XDP in native mode failed".into(),
                };
                Error::Bpf {
                    what: format!("attaching XDP to ifindex {ifindex}: {hint}"),
                    source,
                }
            })?;
        // A link attached without mode flags falls back to generic (skb)
        // XDP on devices without a driver hook; flowlane wants the driver
        // path, so check what the kernel chose and refuse generic mode.
        const XDP_ATTACHED_DRV: u8 = 1;
        const XDP_ATTACHED_HW: u8 = 3;
        let info = libbpf_rs::Xdp::new(skel.progs.flowlane_steer.as_fd())
            .query(ifindex as i32, libbpf_rs::XdpFlags::NONE)
            .map_err(Error::bpf(format!(
                "querying the XDP mode of ifindex {ifindex}"
            )))?;
        if info.attach_mode != XDP_ATTACHED_DRV && info.attach_mode != XDP_ATTACHED_HW {
            return Err(Error::Invalid(format!(
                "ifindex {ifindex} has no native XDP support (the kernel fell back to generic mode); \
                 use a driver with XDP or the kernel-socket backend"
            )));
        }
        // The skeleton (and its object) drop here: the link and the map
        // handles hold their own references.
        Ok(Steering { _link: link, maps })
    }

    /// Routes `queue`'s frames to the AF_XDP socket `xsk`.
    pub fn set_socket(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<()> {
        self.maps.set_socket(queue, xsk)
    }

    /// Claims `port` for flowlane (a listening port).
    pub fn add_port(&self, proto: Proto, port: u16) -> Result<()> {
        self.maps.add_port(proto, port)
    }

    /// Claims the inclusive range `lo..=hi` (both protocols) as flowlane's
    /// ephemeral ports. `lo == 0` clears it.
    pub fn set_ephemeral_range(&self, lo: u16, hi: u16) -> Result<()> {
        self.maps.set_ephemeral_range(lo, hi)
    }

    /// Claims flowlane's ports on these addresses, per family (see
    /// [`LocalAddress`]). Set them before claiming ports: until then the
    /// ports are claimed on every address.
    pub fn set_local_addresses(
        &self,
        v4: LocalAddress<Ipv4Addr>,
        v6: LocalAddress<Ipv6Addr>,
    ) -> Result<()> {
        self.maps.set_local_addresses(v4, v6)
    }

    /// Counters of `queue`, summed over CPUs.
    pub fn stats(&self, queue: u32) -> Result<SteerStats> {
        self.maps.stats(queue)
    }
}

impl Maps {
    fn set_socket(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<()> {
        check_queue(queue)?;
        let fd = xsk.as_raw_fd() as u32;
        self.xsks
            .update(&queue.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf(format!(
                "inserting the socket of queue {queue} into the XSKMAP"
            )))
    }

    fn add_port(&self, proto: Proto, port: u16) -> Result<()> {
        self.ports
            .update(&port_key(proto, port), &[1u8], MapFlags::ANY)
            .map_err(Error::bpf(format!("claiming {proto:?} port {port}")))
    }

    fn set_ephemeral_range(&self, lo: u16, hi: u16) -> Result<()> {
        if lo != 0 && lo > hi {
            return Err(Error::Invalid(format!(
                "ephemeral range {lo}-{hi} is empty"
            )));
        }
        self.update_cfg("setting the ephemeral port range", |v| {
            v[0..2].copy_from_slice(&lo.to_ne_bytes());
            v[2..4].copy_from_slice(&hi.to_ne_bytes());
        })
    }

    fn set_local_addresses(
        &self,
        v4: LocalAddress<Ipv4Addr>,
        v6: LocalAddress<Ipv6Addr>,
    ) -> Result<()> {
        self.update_cfg("setting flowlane's addresses", |v| {
            let mut flags = 0u32;
            match v4 {
                LocalAddress::Any => {}
                LocalAddress::Only(a) => {
                    flags |= DST_V4;
                    v[8..12].copy_from_slice(&a.octets());
                }
                LocalAddress::Unclaimed => flags |= NO_V4,
            }
            match v6 {
                LocalAddress::Any => {}
                LocalAddress::Only(a) => {
                    flags |= DST_V6;
                    v[12..28].copy_from_slice(&a.octets());
                }
                LocalAddress::Unclaimed => flags |= NO_V6,
            }
            v[4..8].copy_from_slice(&flags.to_ne_bytes());
        })
    }

    /// Reads `fl_cfg`, lets `edit` change it, writes it back (set-up only:
    /// nothing else writes it).
    fn update_cfg(&self, what: &'static str, edit: impl FnOnce(&mut [u8; CFG_LEN])) -> Result<()> {
        let key = 0u32.to_ne_bytes();
        let mut v = [0u8; CFG_LEN];
        if let Some(now) = self
            .cfg
            .lookup(&key, MapFlags::ANY)
            .map_err(Error::bpf(what))?
        {
            let n = now.len().min(CFG_LEN);
            v[..n].copy_from_slice(&now[..n]);
        }
        edit(&mut v);
        self.cfg
            .update(&key, &v, MapFlags::ANY)
            .map_err(Error::bpf(what))
    }

    fn stats(&self, queue: u32) -> Result<SteerStats> {
        check_queue(queue)?;
        let mut out = [0u64; STAT_KINDS as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let idx = queue * STAT_KINDS + i as u32;
            *slot = crate::sum_percpu_u64(&self.stats, idx)?;
        }
        Ok(SteerStats {
            redirected: out[0],
            passed: out[1],
            no_socket: out[2],
            fragment_dropped: out[3],
        })
    }
}

fn check_queue(queue: u32) -> Result<()> {
    if queue >= MAX_QUEUES {
        return Err(Error::Invalid(format!(
            "queue {queue} is beyond flowlane's limit of {MAX_QUEUES}"
        )));
    }
    Ok(())
}

fn port_key(proto: Proto, port: u16) -> [u8; 4] {
    let p = port.to_ne_bytes();
    [proto.ip_proto(), 0, p[0], p[1]]
}

/// The program run on crafted frames (`BPF_PROG_TEST_RUN`) with an empty
/// XSKMAP: a frame the program takes for flowlane's is redirected to queue
/// 0's missing socket and comes back as `XDP_DROP` (counted `no_socket`),
/// a first fragment it drops as `XDP_DROP` (counted `fragment_dropped`),
/// the kernel's as `XDP_PASS`.
#[cfg(test)]
mod tests {
    use super::*;
    use libbpf_rs::ProgramInput;

    const XDP_DROP: u32 = 1;
    const XDP_PASS: u32 = 2;
    /// Claimed for TCP and UDP.
    const PORT: u16 = 7777;
    const UNCLAIMED: u16 = 7778;
    const OURS_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
    const OTHER_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 9);
    const OURS_V6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1);
    const LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    /// IPv4 "more fragments".
    const MF: u16 = 0x2000;

    struct Loaded {
        skel: XdpSteerSkel<'static>,
        maps: Maps,
    }

    /// The program loaded, `PORT` claimed (TCP and UDP) on `v4` and `v6`,
    /// as the data path sets it up; None (the test skips) when not root.
    fn loaded(
        test: &str,
        v4: LocalAddress<Ipv4Addr>,
        v6: LocalAddress<Ipv6Addr>,
    ) -> Option<Loaded> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping {test}: loading a BPF program needs root");
            return None;
        }
        // The skeleton borrows its object storage: leaked, once per test.
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let (skel, maps) = load(storage).expect("loading the steering program");
        maps.set_local_addresses(v4, v6).unwrap();
        maps.add_port(Proto::Tcp, PORT).unwrap();
        maps.add_port(Proto::Udp, PORT).unwrap();
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

    fn ethernet(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// A TCP SYN's header (or a UDP header and payload) to `dport`.
    fn transport(proto: u8, dport: u16) -> Vec<u8> {
        let mut l4 = Vec::new();
        l4.extend_from_slice(&40000u16.to_be_bytes());
        l4.extend_from_slice(&dport.to_be_bytes());
        if proto == TCP {
            l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            l4.extend_from_slice(&[0, 16, 0, 0]);
        }
        l4.extend_from_slice(&[0xab; 8]);
        l4
    }

    /// Ethernet + IPv4 (no options, `frag_off` as on the wire: flags and
    /// offset) + `proto` to `dst`:`dport`.
    fn v4(dst: Ipv4Addr, proto: u8, frag_off: u16, dport: u16) -> Vec<u8> {
        let l4 = transport(proto, dport);
        let mut f = ethernet(0x0800);
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34]);
        f.extend_from_slice(&frag_off.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0, 10, 99, 0, 2]);
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&l4);
        f
    }

    /// Ethernet + IPv6 (+ a Fragment header whose offset-and-M field is
    /// `frag`) + `proto` to `dst`:`dport`.
    fn v6(dst: Ipv6Addr, frag: Option<u16>, proto: u8, dport: u16) -> Vec<u8> {
        let chain: Vec<Ext> = frag.into_iter().map(fragment).collect();
        v6_chain(dst, &chain, proto, dport)
    }

    /// An IPv6 extension header: its Next Header value and its bytes (the
    /// first, its own Next Header field, is set by [`v6_chain`]).
    type Ext = (u8, Vec<u8>);

    /// A Fragment header whose offset-and-M field is `off_m`.
    fn fragment(off_m: u16) -> Ext {
        let o = off_m.to_be_bytes();
        (44, vec![0, 0, o[0], o[1], 0, 0, 0x56, 0x78])
    }

    /// An 8-byte options header (Hop-by-Hop 0, Destination Options 60):
    /// one PadN option of four bytes.
    fn options(kind: u8) -> Ext {
        (kind, vec![0, 0, 1, 4, 0, 0, 0, 0])
    }

    /// A Routing header (type 4) with `segments_left`.
    fn routing(segments_left: u8) -> Ext {
        (43, vec![0, 0, 4, segments_left, 0, 0, 0, 0])
    }

    /// Ethernet + IPv6 + the extension headers of `chain`, in order, +
    /// `proto` to `dst`:`dport`.
    fn v6_chain(dst: Ipv6Addr, chain: &[Ext], proto: u8, dport: u16) -> Vec<u8> {
        let mut payload = Vec::new();
        for (i, (_, bytes)) in chain.iter().enumerate() {
            let next = chain.get(i + 1).map_or(proto, |e| e.0);
            payload.push(next);
            payload.extend_from_slice(&bytes[1..]);
        }
        payload.extend_from_slice(&transport(proto, dport));
        let mut f = ethernet(0x86dd);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        f.push(chain.first().map_or(proto, |e| e.0));
        f.push(64);
        f.extend_from_slice(&Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2).octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&payload);
        f
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
        let (hbh, dst_opts) = (options(0), options(60));
        // flowlane's (the kernel would reset its connection): redirected
        // to queue 0, which has no socket here.
        let ours = [
            v6_chain(OURS_V6, &[dst_opts.clone()], TCP, PORT),
            v6_chain(OURS_V6, &[hbh.clone(), dst_opts.clone()], UDP, PORT),
            v6_chain(OURS_V6, &[routing(0), dst_opts.clone()], TCP, PORT),
            // An atomic fragment is a whole packet (RFC 6946).
            v6_chain(OURS_V6, &[fragment(0)], TCP, PORT),
            v6_chain(OURS_V6, &vec![dst_opts.clone(); 6], TCP, PORT),
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
        let first = v6_chain(OURS_V6, &[hbh.clone(), fragment(1)], TCP, PORT);
        assert_eq!(p.run(&first), XDP_DROP);
        assert_eq!(p.stats().fragment_dropped, 1);
        let mut truncated = v6_chain(OURS_V6, &[dst_opts.clone()], TCP, PORT);
        truncated[14 + 40 + 1] = 200; // a header running past the frame
        let kernels = [
            v6_chain(OURS_V6, &[dst_opts.clone()], TCP, UNCLAIMED),
            // Not the final destination (RFC 8200 §4.4).
            v6_chain(OURS_V6, &[routing(1)], TCP, PORT),
            // Hop-by-Hop not first is malformed (§4.1).
            v6_chain(OURS_V6, &[dst_opts.clone(), hbh.clone()], TCP, PORT),
            // Longer than the walk.
            v6_chain(OURS_V6, &vec![dst_opts.clone(); 7], TCP, PORT),
            // A later fragment behind other headers.
            v6_chain(OURS_V6, &[hbh.clone(), fragment(3 << 3 | 1)], TCP, PORT),
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
}
