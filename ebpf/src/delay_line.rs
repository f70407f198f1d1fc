//! The tc programs that route the test bed's traffic through a user-space
//! delay line (WAN delay where the kernel has no delaying qdisc). See
//! `src/bpf/delay_line.bpf.c` for the path a frame takes.
//!
//! [`DelayHooks::install`] attaches the redirects at tc egress and ingress of
//! the peer device (priority 1, ahead of the impairment at 2 and the RSS
//! emulator at 3) and the return program at tc ingress of the line device.
//! The hooks fail open: unless [`DelayHooks::heartbeat`] is called more often
//! than the configured staleness, frames pass undelayed, so a killed delay
//! line never black-holes the bed. [`DelayHooks::remove`] detaches them, and
//! so does dropping them (a panic unwinding past them): drop them in the
//! network namespace they were installed in, where their ifindexes mean
//! those devices.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{
    MapCore, MapFlags, MapHandle, TcAttachPoint, TcHook, TcHookBuilder, TC_EGRESS, TC_INGRESS,
};

use crate::skel::delay_line::DelayLineSkelBuilder;
use crate::{Error, Result};

/// tc handle and priority of the delay hooks on the peer device.
pub const TC_HANDLE: u32 = 3;
/// Priority of the delay hooks: first, before the impairment and the RSS
/// emulator, so that those apply to frames as they leave the delay line.
pub const TC_PRIORITY: u32 = 1;

/// Counters of the redirect programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DelayHookStats {
    /// Frames towards flowlane sent into the line.
    pub to_line_egress: u64,
    /// Frames from flowlane sent into the line.
    pub to_line_ingress: u64,
    /// Frames back from the line, on towards flowlane.
    pub back_egress: u64,
    /// Frames back from the line, up the peer's stack.
    pub back_ingress: u64,
    /// Frames passed undelayed because the heartbeat was stale.
    pub stale: u64,
}

/// The installed hooks: their maps, and the tc hooks to detach.
#[derive(Debug)]
pub struct DelayHooks {
    cfg: MapHandle,
    stats: MapHandle,
    hooks: Vec<TcHook>,
    base: [u8; 24],
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn attach(
    fd: std::os::fd::BorrowedFd<'_>,
    ifindex: u32,
    point: TcAttachPoint,
    what: &str,
    fresh_device: bool,
) -> Result<TcHook> {
    let mut hook = TcHookBuilder::new(fd)
        .ifindex(ifindex as i32)
        .replace(true)
        .handle(TC_HANDLE)
        .priority(TC_PRIORITY)
        .hook(point);
    // The clsact qdisc may already exist (the RSS emulator makes it on the
    // peer device); create it only on a fresh device or when attaching finds
    // none.
    if fresh_device {
        hook.create().map_err(Error::bpf(format!(
            "creating the clsact qdisc on ifindex {ifindex}"
        )))?;
    }
    if hook.attach().is_err() {
        hook.create().map_err(Error::bpf(format!(
            "creating the clsact qdisc on ifindex {ifindex}"
        )))?;
        hook.attach().map_err(Error::bpf(format!(
            "attaching the delay line's {what} hook to ifindex {ifindex}"
        )))?;
    }
    Ok(hook)
}

impl DelayHooks {
    /// Loads the programs and attaches them (calling thread's namespace):
    /// redirects at tc egress and ingress of `peer_ifindex` into
    /// `line_ifindex`, and the return program at tc ingress of
    /// `return_ifindex` (the device the delay line's released frames arrive
    /// on: a fresh one, without a clsact qdisc yet). The redirects stay inactive until the first
    /// [`heartbeat`](Self::heartbeat).
    pub fn install(
        peer_ifindex: u32,
        peer_mac: [u8; 6],
        line_ifindex: u32,
        return_ifindex: u32,
        stale_after: Duration,
    ) -> Result<DelayHooks> {
        let mut storage = MaybeUninit::uninit();
        let open = DelayLineSkelBuilder::default()
            .open(&mut storage)
            .map_err(Error::bpf("opening the delay-line programs"))?;
        let skel = open
            .load()
            .map_err(Error::bpf("loading the delay-line programs"))?;
        let cfg = MapHandle::try_from(&skel.maps.delay_cfg)
            .map_err(Error::bpf("duplicating map delay_cfg"))?;
        let stats = MapHandle::try_from(&skel.maps.delay_stats)
            .map_err(Error::bpf("duplicating map delay_stats"))?;
        // struct delay_cfg: line_ifindex, peer_ifindex, peer_mac[6], pad[2],
        // heartbeat_ns, stale_after_ns.
        let mut base = [0u8; 24];
        base[0..4].copy_from_slice(&line_ifindex.to_ne_bytes());
        base[4..8].copy_from_slice(&peer_ifindex.to_ne_bytes());
        base[8..14].copy_from_slice(&peer_mac);
        let stale = u64::try_from(stale_after.as_nanos()).unwrap_or(u64::MAX);
        let mut hooks = DelayHooks {
            cfg,
            stats,
            hooks: Vec::new(),
            base,
        };
        // Heartbeat 0: a line that never beats never redirects.
        hooks.write_cfg(0, stale)?;
        let progs = [
            (
                skel.progs.flowlane_delay_return.as_fd(),
                return_ifindex,
                TC_INGRESS,
                "return",
                true,
            ),
            (
                skel.progs.flowlane_delay_egress.as_fd(),
                peer_ifindex,
                TC_EGRESS,
                "egress",
                false,
            ),
            (
                skel.progs.flowlane_delay_ingress.as_fd(),
                peer_ifindex,
                TC_INGRESS,
                "ingress",
                false,
            ),
        ];
        for (prog, ifindex, point, what, create) in progs {
            match attach(prog, ifindex, point, what, create) {
                Ok(h) => hooks.hooks.push(h),
                Err(e) => {
                    // None of this line's hooks stays behind.
                    for mut h in hooks.hooks.drain(..) {
                        let _ = h.detach();
                    }
                    return Err(e);
                }
            }
        }
        Ok(hooks)
    }

    fn write_cfg(&self, heartbeat_ns: u64, stale_after_ns: u64) -> Result<()> {
        let mut v = [0u8; 32];
        v[..24].copy_from_slice(&self.base);
        v[16..24].copy_from_slice(&heartbeat_ns.to_ne_bytes());
        v[24..32].copy_from_slice(&stale_after_ns.to_ne_bytes());
        self.cfg
            .update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .map_err(Error::bpf("writing the delay-line configuration"))
    }

    /// Marks the delay line alive now: frames are redirected into it until
    /// `stale_after` passes without another heartbeat.
    pub fn heartbeat(&self, stale_after: Duration) -> Result<()> {
        let stale = u64::try_from(stale_after.as_nanos()).unwrap_or(u64::MAX);
        self.write_cfg(monotonic_ns(), stale)
    }

    /// Stops redirecting at once (heartbeat cleared), before the line stops
    /// reading.
    pub fn pause(&self) -> Result<()> {
        self.write_cfg(0, 0)
    }

    /// The programs' counters.
    pub fn stats(&self) -> Result<DelayHookStats> {
        let get = |i| crate::sum_percpu_u64(&self.stats, i);
        Ok(DelayHookStats {
            to_line_egress: get(0)?,
            to_line_ingress: get(1)?,
            back_egress: get(2)?,
            back_ingress: get(3)?,
            stale: get(4)?,
        })
    }

    /// Detaches every hook (the clsact qdiscs stay for the other filters).
    pub fn remove(mut self) -> Result<()> {
        self.detach()
    }

    /// Pauses the redirects and detaches every hook still attached; once
    /// they are detached, nothing (so [`Drop`] after [`remove`](Self::remove)
    /// does nothing).
    fn detach(&mut self) -> Result<()> {
        if self.hooks.is_empty() {
            return Ok(());
        }
        // Detached whatever the pause said (its error is the one returned).
        let mut first_err = self.pause().err();
        for mut h in self.hooks.drain(..) {
            if let Err(e) = h.detach() {
                first_err.get_or_insert(Error::Bpf {
                    what: "detaching a delay-line hook".into(),
                    source: e,
                });
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for DelayHooks {
    /// Hooks left attached (no [`DelayHooks::remove`]: a panic unwound past
    /// them) stop redirecting and are detached, so that no frame is sent
    /// into a line that is going away.
    fn drop(&mut self) {
        let _ = self.detach();
    }
}
