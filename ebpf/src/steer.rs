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

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
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
    let maps = Maps::of(skel.object())?;
    Ok((skel, maps))
}

impl Steering {
    /// Loads the program and attaches it to `ifindex` in native XDP mode.
    ///
    /// Fails with a message naming the cause when the interface has no
    /// native XDP support or an XDP program is already attached.
    pub fn attach(ifindex: u32) -> Result<Steering> {
        // libbpf's lines are kept, not printed: the error says them where
        // it has nothing better.
        let heard = crate::libbpf_said::Listening::start();
        let mut storage = MaybeUninit::uninit();
        let (skel, maps) = load(&mut storage).map_err(|e| e.with_libbpf(heard.last()))?;
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
                    _ => match heard.last() {
                        Some(said) => {
                            format!("attaching XDP in native mode failed (libbpf: {said})")
                        }
                        None => "attaching XDP in native mode failed".into(),
                    },
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

    /// Gives every port claimed, listening and ephemeral, back to the
    /// kernel: frames to them pass from now on. For a service's stop,
    /// before its workers end: a SYN that comes between their last pass
    /// and the program's detaching would otherwise wait on a socket no one
    /// reads (no answer: the client's SYN retransmits a second later), where
    /// the kernel, which has no socket for it, answers with an RST at once.
    pub fn release_ports(&self) -> Result<()> {
        self.maps.release_ports()
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
    /// Handles on the maps of `obj`, a loaded steering program (this
    /// build's, or another revision's in the cost measurement).
    fn of(obj: &libbpf_rs::Object) -> Result<Maps> {
        let handle = |name: &str| {
            let map = obj
                .maps()
                .find(|m| m.name() == name)
                .ok_or_else(|| Error::Invalid(format!("the steering program has no map {name}")))?;
            MapHandle::try_from(&map).map_err(Error::bpf(format!("duplicating map {name}")))
        };
        Ok(Maps {
            xsks: handle("fl_xsks")?,
            cfg: handle("fl_cfg")?,
            ports: handle("fl_ports")?,
            stats: handle("fl_stats")?,
        })
    }

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

    fn release_ports(&self) -> Result<()> {
        let claimed: Vec<Vec<u8>> = self.ports.keys().collect();
        for key in claimed {
            self.ports
                .delete(&key)
                .map_err(Error::bpf("releasing a claimed port".to_string()))?;
        }
        self.set_ephemeral_range(0, 0)
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

#[cfg(test)]
mod cost;
#[cfg(test)]
mod frames;
#[cfg(test)]
mod tests;
