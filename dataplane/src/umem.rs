//! Packet memory: one UMEM per NUMA node, shared by that node's queues.
//!
//! xsk-rs maps the UMEM with `MAP_POPULATE`, so its pages are faulted in by
//! the creating thread. flowlane creates each node's UMEM on a short-lived
//! thread that is pinned to that node's CPUs and whose memory policy binds
//! allocations to the node, so the frames live where the node's workers run.

use std::num::NonZeroU32;

use xsk_rs::config::{FrameSize, QueueSize, UmemConfig};
use xsk_rs::{FrameDesc, Umem};

use crate::{affinity, Error, Result};

/// Size of one UMEM frame. 2048 bytes hold a 1514-byte frame after the
/// kernel's 256-byte XDP headroom.
pub const FRAME_SIZE: u32 = 2048;

/// One node's UMEM and its frames, split into per-queue pools.
#[derive(Debug)]
pub struct NodeUmem {
    /// The NUMA node the memory is bound to.
    pub node: u32,
    /// The UMEM (shared by the node's sockets).
    pub umem: Umem,
    /// Its length in bytes (frames × [`FRAME_SIZE`]).
    pub len: usize,
    /// One disjoint frame pool per queue of the node, in the order asked.
    pub pools: Vec<Vec<FrameDesc>>,
}

/// Ring sizes of one queue (all powers of two).
///
/// The frames a queue owns are all the buffering between the NIC (or the
/// veth peer) and the worker: while the worker is busy or descheduled,
/// arriving frames take free frames from the fill ring, and once it is empty
/// the kernel drops (`fill_ring_empty`). TCP senders may have the sum of the
/// queue's connections' receive windows in flight at once, so the default
/// is sized for that at about a thousand connections of 64 KiB windows on
/// two queues (32768 frames, 64 MiB per queue): with 4096 frames, 256 and
/// more connections lost tens of thousands of segments per second to
/// fill-ring starvation on the 2-vCPU test bed.
#[derive(Debug, Clone, Copy)]
pub struct RingSizes {
    /// Frames owned by each queue.
    pub frames_per_queue: u32,
    /// Fill ring: twice the frames, so every free frame always fits.
    pub fill: u32,
    /// Completion ring.
    pub comp: u32,
    /// RX ring: at least the frames, so that it never overflows
    /// (`rx_ring_full`) before the fill ring runs dry.
    pub rx: u32,
    /// TX ring.
    pub tx: u32,
}

impl RingSizes {
    /// The fewest frames a queue may own.
    pub const MIN_FRAMES: u32 = 4096;
    /// The most frames a queue may own (2 GiB of UMEM).
    pub const MAX_FRAMES: u32 = 1 << 20;
    /// The default frames per queue (64 MiB of UMEM).
    pub const DEFAULT_FRAMES: u32 = 32768;

    /// Rings for a queue owning `frames` frames (a power of two from
    /// [`RingSizes::MIN_FRAMES`] to [`RingSizes::MAX_FRAMES`]): the fill
    /// ring twice that, the RX ring as large; completion and TX rings are
    /// fixed (transmit frames come back within a worker pass). The queue's
    /// TCP receive memory grows with its frames (half of them, see
    /// `tcp_handler`), so more frames mean larger windows when many
    /// connections share a queue.
    pub fn with_frames(frames: u32) -> Result<RingSizes> {
        if !frames.is_power_of_two() || !(Self::MIN_FRAMES..=Self::MAX_FRAMES).contains(&frames) {
            return Err(Error::Setup(format!(
                "{frames} frames per queue: must be a power of two from {} to {}",
                Self::MIN_FRAMES,
                Self::MAX_FRAMES
            )));
        }
        Ok(RingSizes {
            frames_per_queue: frames,
            fill: 2 * frames,
            comp: 4096,
            rx: frames,
            tx: 4096,
        })
    }
}

impl Default for RingSizes {
    fn default() -> Self {
        RingSizes::with_frames(Self::DEFAULT_FRAMES).expect("the default is valid")
    }
}

/// Creates the UMEM of `node` for `queues` queues, with its memory bound to
/// the node, from a thread pinned to `cpus` (the node's CPUs).
pub fn create_on_node(
    node: u32,
    cpus: &[u32],
    queues: usize,
    rings: RingSizes,
) -> Result<NodeUmem> {
    let cpus = cpus.to_vec();
    std::thread::Builder::new()
        .name(format!("flowlane-umem{node}"))
        .spawn(move || {
            if let Err(e) = affinity::pin_current_thread(&cpus) {
                tracing::warn!(
                    node,
                    "could not pin the UMEM allocation to the node's CPUs: {e}"
                );
            }
            if let Err(e) = crate::sys::bind_memory_to_node(node) {
                tracing::warn!(
                    node,
                    "could not bind UMEM memory to the node ({e}); relying on first touch"
                );
            }
            create(node, queues, rings)
        })
        .map_err(|e| Error::Io {
            what: "spawning the UMEM allocation thread".into(),
            source: e,
        })?
        .join()
        .map_err(|_| Error::Setup("the UMEM allocation thread panicked".into()))?
}

fn create(node: u32, queues: usize, rings: RingSizes) -> Result<NodeUmem> {
    let size = |n: u32, what: &str| {
        QueueSize::new(n).map_err(|e| Error::Setup(format!("{what} ring size {n}: {e}")))
    };
    let config = UmemConfig::builder()
        .frame_size(
            FrameSize::new(FRAME_SIZE).map_err(|e| Error::Setup(format!("frame size: {e}")))?,
        )
        .fill_queue_size(size(rings.fill, "fill")?)
        .comp_queue_size(size(rings.comp, "completion")?)
        .build()
        .map_err(|e| Error::Setup(format!("UMEM configuration: {e}")))?;
    let total = rings.frames_per_queue as usize * queues;
    let count = NonZeroU32::new(total as u32)
        .ok_or_else(|| Error::Setup("a UMEM needs at least one queue".into()))?;
    let len = total * FRAME_SIZE as usize;
    let (umem, mut frames) =
        Umem::new(config, count, false).map_err(|e| Error::Setup(umem_error(len, node, &e)))?;
    let mut pools = Vec::with_capacity(queues);
    for _ in 0..queues {
        let rest = frames.split_off(rings.frames_per_queue as usize);
        pools.push(std::mem::replace(&mut frames, rest));
    }
    Ok(NodeUmem {
        node,
        umem,
        len,
        pools,
    })
}

/// The one line for a UMEM of `len` bytes on `node` that could not be
/// made: xsk-rs's reason, the system call's error (`e`'s source) and what
/// that errno most likely means ([`crate::sys::xsk_setup_hint`]).
fn umem_error(len: usize, node: u32, e: &(dyn std::error::Error + 'static)) -> String {
    let (errno, cause) = crate::sys::setup_errno(e);
    let cause = cause.map(|c| format!(" ({c})")).unwrap_or_default();
    format!(
        "creating a {} MiB UMEM on node {node} failed: {e}{cause}: {}",
        len >> 20,
        crate::sys::xsk_setup_hint(errno)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(e: std::io::Error) -> crate::sys::XskRsError {
        crate::sys::XskRsError("failed to create mmap'd UMEM region", e)
    }

    #[test]
    fn a_umem_error_names_the_errno_and_its_cause() {
        let e = fixed(std::io::Error::from_raw_os_error(libc::ENOMEM));
        let line = umem_error(64 << 20, 1, &e);
        assert_eq!(line.lines().count(), 1, "{line}");
        for needle in [
            "64 MiB UMEM on node 1",
            "mmap'd UMEM region",
            "os error 12",
            "locked-memory limit",
        ] {
            assert!(line.contains(needle), "{needle:?} in {line}");
        }
        let e = fixed(std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(umem_error(64 << 20, 0, &e).contains("privileged"));
    }
}
