//! An XDP packet generator for benchmarks (`BPF_PROG_RUN` with live frames):
//! the kernel sends a frame `repeat` times out of an interface, with no
//! socket and no qdisc on the way. Either the same frame every time
//! ([`Generator::new`], `flowlane bench rx`), or, for a TCP SYN (IPv4 or
//! IPv6), a new source address, source port and ISN each time
//! ([`Generator::syn_flood`], `flowlane bench synflood`).

use std::mem::MaybeUninit;
use std::net::IpAddr;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramInput};

use crate::skel::trafficgen::{TrafficgenSkel, TrafficgenSkelBuilder};
use crate::{Error, Result};

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (include/uapi/linux/bpf.h).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// `XDP_REDIRECT` (include/uapi/linux/bpf.h): what both programs return
/// for a frame they send.
const XDP_REDIRECT: u32 = 4;

/// What the SYN-flood program varies (`flowlane_gen_syn` in
/// `trafficgen.bpf.c`): the frame's source address runs through `sources`
/// addresses from `first_source` (IPv6: in its last 32 bits, the first 96
/// are the frame's), its TCP source port through
/// `ports` ports from `first_port`, and its ISN changes with every frame.
/// Frame n takes address n % `sources` and port (n / `sources`) % `ports`:
/// the 4-tuple repeats only after `sources` × `ports` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynFlood {
    /// The first source address, of the frames' family.
    pub first_source: IpAddr,
    /// How many consecutive source addresses (at least 1).
    pub sources: u32,
    /// The first source port.
    pub first_port: u16,
    /// How many consecutive source ports (at least 1, at most up to 65535).
    pub ports: u32,
}

impl SynFlood {
    /// Distinct 4-tuples before they repeat.
    pub fn tuples(&self) -> u64 {
        u64::from(self.sources) * u64::from(self.ports)
    }

    fn check(&self) -> Result<()> {
        let last_port = u32::from(self.first_port) + self.ports.saturating_sub(1);
        if self.sources == 0 || self.ports == 0 || last_port > u32::from(u16::MAX) {
            return Err(Error::Invalid(format!(
                "a SYN flood needs at least one source and one port, ports within 1..=65535: {self:?}"
            )));
        }
        if self.low_source().checked_add(self.sources - 1).is_none() {
            return Err(Error::Invalid(format!(
                "the source addresses run past the end of their range (IPv4: 255.255.255.255; \
                 IPv6: the last 32 bits, ::ffff:ffff): {self:?}"
            )));
        }
        Ok(())
    }

    /// What the program counts from: the first IPv4 source, or the last
    /// 32 bits of the first IPv6 source (the program writes only those).
    fn low_source(&self) -> u32 {
        match self.first_source {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(a) => u128::from(a) as u32,
        }
    }
}

/// The SYN program's count of frames it has rewritten and sent (its
/// `.bss` counter), readable from any thread while the generator runs,
/// exact even in the middle of a [`Generator::send`].
#[derive(Debug)]
pub struct FrameCounter {
    bss: MapHandle,
}

impl FrameCounter {
    /// Frames so far.
    pub fn frames(&self) -> Result<u64> {
        let v = self
            .bss
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("reading the traffic generator's counter"))?
            .unwrap_or_default();
        let b: [u8; 8] = v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::Invalid("the traffic generator's .bss is too short".into()))?;
        Ok(u64::from_ne_bytes(b))
    }
}

/// Which program a generator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `flowlane_gen`: the frame as it is.
    Same,
    /// `flowlane_gen_syn`: a new SYN each time.
    Syn,
}

/// A loaded generator sending out of one interface.
pub struct Generator {
    // The skeleton borrows its object storage, which is leaked once per
    // generator: a benchmark makes one or two.
    skel: TrafficgenSkel<'static>,
    ifindex: u32,
    mode: Mode,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("ifindex", &self.ifindex)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Generator {
    /// Loads the generator to send a frame unchanged out of `ifindex` (in
    /// the calling thread's network namespace).
    pub fn new(ifindex: u32) -> Result<Generator> {
        Generator::load(ifindex, None)
    }

    /// Loads the generator to send TCP SYNs out of `ifindex`, each from the
    /// next source address and port of `flood` with a new ISN. The frames
    /// given to [`Generator::send`] must be Ethernet (untagged), IPv4
    /// without options and TCP, or Ethernet, IPv6 without extension headers
    /// and TCP from `flood.first_source` (the program keeps the first 96
    /// bits of an IPv6 source), checksums right; the program updates the
    /// TCP (and IPv4 header) checksum as it rewrites (RFC 1624).
    pub fn syn_flood(ifindex: u32, flood: &SynFlood) -> Result<Generator> {
        flood.check()?;
        Generator::load(ifindex, Some(flood))
    }

    fn load(ifindex: u32, flood: Option<&SynFlood>) -> Result<Generator> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = TrafficgenSkelBuilder::default()
            .open(storage)
            .map_err(Error::bpf("opening the traffic generator"))?;
        let rodata = open.maps.rodata_data.as_deref_mut().ok_or_else(|| {
            Error::Invalid("the traffic generator has no read-only data section".into())
        })?;
        rodata.target_ifindex = ifindex;
        if let Some(f) = flood {
            rodata.syn_src_first = f.low_source();
            rodata.syn_src_count = f.sources;
            rodata.syn_port_first = u32::from(f.first_port);
            rodata.syn_port_count = f.ports;
        }
        let skel = open
            .load()
            .map_err(Error::bpf("loading the traffic generator"))?;
        let mode = if flood.is_some() {
            Mode::Syn
        } else {
            Mode::Same
        };
        Ok(Generator {
            skel,
            ifindex,
            mode,
        })
    }

    fn program(&self) -> &libbpf_rs::ProgramMut<'static> {
        match self.mode {
            Mode::Same => &self.skel.progs.flowlane_gen,
            Mode::Syn => &self.skel.progs.flowlane_gen_syn,
        }
    }

    /// The SYN program's frame counter (a second handle on its map).
    pub fn frame_counter(&self) -> Result<FrameCounter> {
        Ok(FrameCounter {
            bss: MapHandle::try_from(&self.skel.maps.bss)
                .map_err(Error::bpf("opening the traffic generator's counter"))?,
        })
    }

    /// Sends `frame` `repeat` times (a SYN generator: `repeat` different
    /// SYNs); returns when the kernel is done. (Measured on Linux 6.18 in a
    /// 2-vCPU VM: a call of 64 frames or more takes 15-40 ms beyond its
    /// frames' own time, whatever the count, a call of one frame 13 µs; a
    /// fast generator makes large calls.)
    pub fn send(&self, frame: &[u8], repeat: u32) -> Result<()> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex (u32 each).
        // The kernel requires data = 0 and data_end = the frame length.
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&self.ifindex.to_ne_bytes());
        let input = ProgramInput {
            context_in: Some(&mut ctx),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat,
            ..ProgramInput::default()
        };
        self.program()
            .test_run(input)
            .map_err(Error::bpf("running the traffic generator"))?;
        Ok(())
    }

    /// Runs the program once on `frame` without sending anything
    /// (`BPF_PROG_RUN` without live frames) and returns the frame as the
    /// program left it: what [`Generator::send`] would have sent next. It
    /// takes the next place in a SYN generator's sequence.
    pub fn rewrite(&self, frame: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; frame.len()];
        let input = ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..ProgramInput::default()
        };
        let o = self
            .program()
            .test_run(input)
            .map_err(Error::bpf("running the traffic generator once"))?;
        if o.return_value != XDP_REDIRECT {
            return Err(Error::Invalid(format!(
                "the traffic generator refused the frame (XDP action {})",
                o.return_value
            )));
        }
        let len = o.data.map_or(0, |d| d.len());
        out.truncate(len);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn floods_are_checked() {
        let ok = SynFlood {
            first_source: Ipv4Addr::new(10, 99, 0, 100).into(),
            sources: 151,
            first_port: 1024,
            ports: 64512,
        };
        assert!(ok.check().is_ok());
        assert_eq!(ok.tuples(), 151 * 64512);
        for bad in [
            SynFlood { sources: 0, ..ok },
            SynFlood { ports: 0, ..ok },
            SynFlood { ports: 64513, ..ok },
            SynFlood {
                first_source: Ipv4Addr::new(255, 255, 255, 200).into(),
                sources: 57,
                ..ok
            },
            // IPv6: the program counts in the last 32 bits only.
            SynFlood {
                first_source: "fd99::ffff:ff00".parse().unwrap(),
                sources: 257,
                ..ok
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        let v6 = SynFlood {
            first_source: "fd99::ffff:ff00".parse().unwrap(),
            sources: 256,
            ..ok
        };
        assert!(v6.check().is_ok());
        assert_eq!(v6.low_source(), 0xffff_ff00);
    }
}
