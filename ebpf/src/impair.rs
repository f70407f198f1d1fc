//! Link impairment for the test bed (loss, duplication, corruption,
//! reordering, ECN CE marking) in BPF, for kernels without `sch_netem`. See
//! `src/bpf/impair.bpf.c` for what each impairment does.
//!
//! [`install`] attaches the programs at tc egress and ingress of the peer
//! device (priority 2: after the delay line's redirects, ahead of the RSS
//! emulator) and pins their maps beside
//! the emulated NIC's; [`ImpairMaps::open`] reconfigures a running bed.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, TcHookBuilder, TC_EGRESS, TC_INGRESS};

use crate::skel::impair::ImpairSkelBuilder;
use crate::{Error, Result};

/// One direction's impairments, in parts per million.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairConfig {
    /// Packets dropped.
    pub loss_ppm: u32,
    /// Packets sent twice.
    pub duplicate_ppm: u32,
    /// Packets with one bit flipped after the IP header.
    pub corrupt_ppm: u32,
    /// Packets sent through the slow path (an HTB class of limited rate).
    pub reorder_ppm: u32,
    /// HTB class id (`major << 16 | minor`) of the slow path.
    pub reorder_classid: u32,
    /// Ingress only: the ifb device whose HTB holds the slow path.
    pub reorder_ifindex: u32,
    /// Packets marked CE (RFC 3168 §5) if ECN-capable (ECT(0) or ECT(1));
    /// Not-ECT packets are left alone.
    pub ce_ppm: u32,
}

/// Which hook a configuration applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// tc egress of the peer: traffic towards flowlane.
    Egress = 0,
    /// tc ingress of the peer: traffic from flowlane.
    Ingress = 1,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImpairStats {
    /// IP packets seen.
    pub seen: u64,
    /// Dropped.
    pub lost: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Sent through the slow path.
    pub reordered: u64,
    /// ECT packets marked CE.
    pub ce_marked: u64,
}

const PIN_CFG: &str = "impair_cfg";
const PIN_STATS: &str = "impair_stats";
const STATS: u32 = 6;

/// The BPF side's `struct impair_cfg`: seven `__u32`s.
fn encode(c: &ImpairConfig) -> [u8; 28] {
    let mut v = [0u8; 28];
    for (i, x) in [
        c.loss_ppm,
        c.duplicate_ppm,
        c.corrupt_ppm,
        c.reorder_ppm,
        c.reorder_classid,
        c.reorder_ifindex,
        c.ce_ppm,
    ]
    .iter()
    .enumerate()
    {
        v[i * 4..i * 4 + 4].copy_from_slice(&x.to_ne_bytes());
    }
    v
}

/// [`encode`]'s inverse.
fn decode(v: &[u8]) -> Result<ImpairConfig> {
    let word = |i: usize| -> Result<u32> {
        v.get(i * 4..i * 4 + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "the impairment configuration is {} bytes, not 28",
                    v.len()
                ))
            })
    };
    Ok(ImpairConfig {
        loss_ppm: word(0)?,
        duplicate_ppm: word(1)?,
        corrupt_ppm: word(2)?,
        reorder_ppm: word(3)?,
        reorder_classid: word(4)?,
        reorder_ifindex: word(5)?,
        ce_ppm: word(6)?,
    })
}

/// Handles on an installed impairment's pinned maps.
#[derive(Debug)]
pub struct ImpairMaps {
    cfg: MapHandle,
    stats: MapHandle,
}

impl ImpairMaps {
    /// Opens the maps pinned under `pin_dir`, or `None` if not installed.
    pub fn open(pin_dir: &Path) -> Option<ImpairMaps> {
        let cfg = MapHandle::from_pinned_path(pin_dir.join(PIN_CFG)).ok()?;
        let stats = MapHandle::from_pinned_path(pin_dir.join(PIN_STATS)).ok()?;
        Some(ImpairMaps { cfg, stats })
    }

    /// Sets one direction's impairments.
    pub fn set(&self, dir: Direction, c: &ImpairConfig) -> Result<()> {
        for (what, ppm) in [
            ("loss", c.loss_ppm),
            ("duplicate", c.duplicate_ppm),
            ("corrupt", c.corrupt_ppm),
            ("reorder", c.reorder_ppm),
            ("CE marking", c.ce_ppm),
        ] {
            if ppm > 1_000_000 {
                return Err(Error::Invalid(format!(
                    "{what} rate {ppm} ppm is above 100 %"
                )));
            }
        }
        self.cfg
            .update(&(dir as u32).to_ne_bytes(), &encode(c), MapFlags::ANY)
            .map_err(Error::bpf("writing the impairment configuration"))
    }

    /// One direction's impairments, as last set.
    pub fn config(&self, dir: Direction) -> Result<ImpairConfig> {
        let v = self
            .cfg
            .lookup(&(dir as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("reading the impairment configuration"))?;
        v.map_or(Ok(ImpairConfig::default()), |v| decode(&v))
    }

    /// One direction's counters.
    pub fn stats(&self, dir: Direction) -> Result<ImpairStats> {
        let get = |i: u32| crate::sum_percpu_u64(&self.stats, dir as u32 * STATS + i);
        Ok(ImpairStats {
            seen: get(0)?,
            lost: get(1)?,
            duplicated: get(2)?,
            corrupted: get(3)?,
            reordered: get(4)?,
            ce_marked: get(5)?,
        })
    }
}

/// Loads the impairment programs, pins their maps under `pin_dir` and
/// attaches them at tc egress and ingress of `ifindex` (calling thread's
/// namespace), replacing earlier ones. Both directions start unimpaired.
pub fn install(ifindex: u32, pin_dir: &Path) -> Result<ImpairMaps> {
    std::fs::create_dir_all(pin_dir)
        .map_err(|e| Error::Invalid(format!("creating {}: {e}", pin_dir.display())))?;
    for name in [PIN_CFG, PIN_STATS] {
        let _ = std::fs::remove_file(pin_dir.join(name));
    }
    let mut storage = MaybeUninit::uninit();
    let mut open = ImpairSkelBuilder::default()
        .open(&mut storage)
        .map_err(Error::bpf("opening the impairment programs"))?;
    open.maps
        .impair_cfg
        .set_pin_path(pin_dir.join(PIN_CFG))
        .map_err(Error::bpf("pinning impair_cfg"))?;
    open.maps
        .impair_stats
        .set_pin_path(pin_dir.join(PIN_STATS))
        .map_err(Error::bpf("pinning impair_stats"))?;
    let skel = open
        .load()
        .map_err(Error::bpf("loading the impairment programs"))?;
    let mut attached: Vec<libbpf_rs::TcHook> = Vec::new();
    for (prog, point, what) in [
        (&skel.progs.flowlane_impair_egress, TC_EGRESS, "egress"),
        (&skel.progs.flowlane_impair_ingress, TC_INGRESS, "ingress"),
    ] {
        let mut hook = TcHookBuilder::new(prog.as_fd())
            .ifindex(ifindex as i32)
            .replace(true)
            .handle(2)
            .priority(2)
            .hook(point);
        // The RSS emulator made the clsact qdisc already; create it only when
        // attaching finds none. The last of libbpf's errors is the one told.
        let done = hook.attach().map(drop).or_else(|_| {
            hook.create()
                .map(drop)
                .or_else(|e| match e.kind() {
                    libbpf_rs::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                })
                .and_then(|()| hook.attach().map(drop))
        });
        if let Err(source) = done {
            // Nothing half-installed stays: pins that a later `install`
            // would take for a working impairment, or the other hook.
            for mut h in attached {
                let _ = h.detach();
            }
            for name in [PIN_CFG, PIN_STATS] {
                let _ = std::fs::remove_file(pin_dir.join(name));
            }
            return Err(Error::Bpf {
                what: format!(
                    "attaching the impairment at tc {what} of ifindex {ifindex} (is the \
                     interface there, with a clsact qdisc or room for one?)"
                ),
                source,
            });
        }
        attached.push(hook);
    }
    ImpairMaps::open(pin_dir)
        .ok_or_else(|| Error::Invalid("the impairment maps were not pinned".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_reads_back_as_written() {
        let c = ImpairConfig {
            loss_ppm: 1,
            duplicate_ppm: 2,
            corrupt_ppm: 3,
            reorder_ppm: 4,
            reorder_classid: 0x0001_0002,
            reorder_ifindex: 6,
            ce_ppm: 7,
        };
        assert_eq!(decode(&encode(&c)).unwrap(), c);
        assert!(decode(&encode(&c)[..27]).is_err());
    }

    /// An interface that is not there: the error says what failed and
    /// keeps libbpf's (the kernel's) reason as its source.
    #[test]
    fn a_failed_attach_keeps_libbpfs_error() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping a_failed_attach_keeps_libbpfs_error: loading BPF needs root");
            return;
        }
        let pins =
            Path::new("/sys/fs/bpf").join(format!("flowlane-impair-test-{}", std::process::id()));
        let e = install(0x7fff_fff0, &pins).unwrap_err();
        let left: Vec<_> = std::fs::read_dir(&pins).map_or(Vec::new(), |d| d.flatten().collect());
        let _ = std::fs::remove_dir_all(&pins);
        assert!(left.is_empty(), "pins left behind: {left:?}");
        let text = e.to_string();
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert!(
            matches!(e, Error::Bpf { .. }) && source.is_some(),
            "{text}: no source"
        );
        assert!(text.contains("ifindex 2147483632"), "{text}");
        assert!(text.ends_with(&source.unwrap()), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
