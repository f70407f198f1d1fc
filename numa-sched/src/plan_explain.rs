//! `flowlane plan --explain`: for each part of a plan, whether the NIC does
//! it in hardware, the kernel in its software path, or flowlane itself, and
//! why (Dragonet's "what runs in hardware, what is spilled to software").
//! Pure: a [`NicCaps`] snapshot and what the plan wants in (with [`explain_on`], the
//! machine's [`Topology`] too, for where the workers run), the parts out.

use serde::{Deserialize, Serialize};

use crate::indirection::IndirectionTable;
use crate::nic_caps::{hash_fixes, HashMismatch, NicCaps, XdpFeature, XskFeature, XskMode};
use crate::placement::plan_placement;
use crate::toeplitz::Protocol;
use crate::topology::Topology;

/// Who carries out a part of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DoneBy {
    /// The NIC.
    Hardware,
    /// The kernel's software path (copy-mode AF_XDP, generic XDP, NAPI
    /// threads).
    Kernel,
    /// flowlane, in software.
    Flowlane,
    /// Nobody: this plan cannot be carried out on this NIC as asked.
    Refused,
    /// The kernel could not be asked (an older kernel, a missing operation).
    Unknown,
}

impl std::fmt::Display for DoneBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DoneBy::Hardware => "hardware",
            DoneBy::Kernel => "kernel",
            DoneBy::Flowlane => "flowlane",
            DoneBy::Refused => "refused",
            DoneBy::Unknown => "unknown",
        })
    }
}

/// One part of the plan, explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanPart {
    /// Which part (`rss-hash`, `indirection-table`, `queues`, ...).
    pub part: String,
    /// Who does it.
    pub done_by: DoneBy,
    /// What is done, in a line.
    pub what: String,
    /// Why it is done there.
    pub why: String,
    /// A command that would move it to the hardware or fix it, if any.
    pub action: Option<String>,
}

/// What the plan asks of the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// Workers (one per receive queue where the NIC has enough).
    pub workers: u32,
    /// Indirection-table entries flowlane plans with where the NIC has no
    /// table of its own.
    pub table_size: u32,
}

/// Explains, part by part, how `wanted` would run on the NIC `caps`.
///
/// Without the machine's topology the `numa` part cannot say which node the workers get
/// (the NIC's own, or the nearest with CPUs where it has too few or none): prefer
/// [`explain_on`].
#[must_use]
pub fn explain(caps: &NicCaps, wanted: Wanted) -> Vec<PlanPart> {
    parts(caps, wanted, numa(caps))
}

/// Explains, part by part, how `wanted` would run on the NIC `caps` in the machine `topo`:
/// as [`explain`], the `numa` part saying where the workers, their UMEM and their IRQs go
/// as [`plan_placement`] places them (no CPU budget, nothing reserved): the NIC's node
/// while it has CPUs, then the nearest nodes with CPUs (a memory-only node has none), the
/// nodes in index order when the NIC names no node or one the topology does not list.
#[must_use]
pub fn explain_on(caps: &NicCaps, wanted: Wanted, topo: &Topology) -> Vec<PlanPart> {
    parts(caps, wanted, numa_on(caps, wanted, topo))
}

fn parts(caps: &NicCaps, wanted: Wanted, numa: PlanPart) -> Vec<PlanPart> {
    vec![
        rss_hash(caps),
        indirection(caps, wanted),
        queues(caps, wanted),
        af_xdp(caps),
        xdp_attach(caps),
        tx_checksum(caps),
        interrupts(caps, wanted),
        ntuple(caps),
        numa,
    ]
}

fn part(
    part: &'static str,
    done_by: DoneBy,
    what: impl Into<String>,
    why: impl Into<String>,
    action: Option<String>,
) -> PlanPart {
    PlanPart {
        part: part.to_string(),
        done_by,
        what: what.into(),
        why: why.into(),
        action,
    }
}

fn is_veth(caps: &NicCaps) -> bool {
    caps.driver.as_deref() == Some("veth")
}

fn rss_hash(caps: &NicCaps) -> PlanPart {
    let iface = &caps.iface;
    let Some(rss) = &caps.rss else {
        let why = if is_veth(caps) {
            "veth has no RSS: a frame arrives on the queue it was sent on; the test bed's \
             tc program on the peer computes the same Toeplitz hash and table \
             (`flowlane testbed up`), and flowlane computes it for hints"
        } else {
            "the driver reports no RSS: frames land on whatever queue the device picks; \
             flowlane computes the Toeplitz hash itself for hints"
        };
        return part(
            "rss-hash",
            DoneBy::Flowlane,
            "Toeplitz hash of each flow's addresses and ports, computed in software",
            why,
            None,
        );
    };
    let tcp = rss.mismatches(Protocol::Tcp);
    let udp = rss.mismatches(Protocol::Udp);
    let all: Vec<HashMismatch> = tcp
        .iter()
        .cloned()
        .chain(udp.iter().filter(|m| !tcp.contains(m)).cloned())
        .collect();
    let said = |m: &[HashMismatch]| {
        m.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let func = rss.hash_function.as_deref().unwrap_or("Toeplitz");
    if !tcp.is_empty() {
        return part(
            "rss-hash",
            DoneBy::Hardware,
            format!(
                "{} hash in the NIC, {}-byte key: {}",
                if func == "toeplitz" { "Toeplitz" } else { func },
                rss.key_len,
                said(&tcp)
            ),
            "flowlane's model (Toeplitz over addresses and ports as they are) cannot predict \
             this NIC's queues: no hints, no choice of source ports, and a TCP service reading \
             this NIC's RSS does not model it (a passive one serves without buckets or moves, \
             an active one refuses to start)",
            hash_fixes(iface, &all),
        );
    }
    let mut unreported = rss.unreported(Protocol::Tcp);
    for u in rss.unreported(Protocol::Udp) {
        if !unreported.contains(&u) {
            unreported.push(u);
        }
    }
    let udp_why = if udp.is_empty() {
        String::new()
    } else {
        format!(
            ", not a UDP flow's: {}; UDP hints name the wrong queue",
            said(&udp)
        )
    };
    part(
        "rss-hash",
        DoneBy::Hardware,
        format!(
            "Toeplitz over addresses and ports, {}-byte key{}",
            rss.key_len,
            if unreported.is_empty() {
                String::new()
            } else {
                format!(
                    "; not reported, assumed as flowlane hashes: {}",
                    unreported.join(", ")
                )
            }
        ),
        format!(
            "the NIC hashes every frame; flowlane computes the same hash bit for bit to predict \
             each TCP{} flow's queue (hints, source ports of outgoing connections){udp_why}",
            if udp.is_empty() { " and UDP" } else { "" }
        ),
        hash_fixes(iface, &udp),
    )
}

fn indirection(caps: &NicCaps, wanted: Wanted) -> PlanPart {
    let max = caps.max_rx_queues();
    let queues = wanted.workers.min(max).max(1);
    // Buckets do not move while some workers have no queue of their own
    // (`TcpService::move_bucket`).
    let spill = (wanted.workers > max).then(|| {
        format!(
            "buckets do not move while {} workers share {max} queue(s) (software spill)",
            wanted.workers
        )
    });
    match &caps.rss {
        Some(r) if r.table_size > 0 => {
            let iface = &caps.iface;
            let size = r.table_size as usize;
            let what = format!(
                "{size} entries over {queues} queue(s), {} bucket(s) each",
                r.table_size / queues
            );
            // The model's own check (what a TCP service refuses at start),
            // on a table no larger than the model takes.
            if size > IndirectionTable::MAX_SIZE || IndirectionTable::new(vec![0; size]).is_err() {
                return part(
                    "indirection-table",
                    DoneBy::Refused,
                    format!("{what}: {size} is not a power of two"),
                    format!(
                        "flowlane's model of RSS cannot say which entry a flow hashes to in a \
                         table of this size: TCP services on {iface} neither keep connections \
                         per bucket nor move buckets"
                    ),
                    Some(format!(
                        "give {iface} a power-of-two table: change its channels (`ethtool -L \
                         {iface} combined N`, on drivers that size the table by them) and check \
                         with `ethtool -x {iface}`"
                    )),
                );
            }
            let why = if let Some(spill) = spill {
                format!("the NIC steers each bucket to its queue; {spill}")
            } else if !caps.predictable(Protocol::Tcp) {
                "the NIC steers each bucket to its queue; flowlane cannot predict which bucket a \
                 flow hashes to (see rss-hash), so TCP services do not move buckets"
                    .to_string()
            } else {
                "rebalancing moves a bucket by rewriting its entry (ethtool RSS_SET or \
                 SIOCETHTOOL), the NIC steers its next frame to the new queue"
                    .to_string()
            };
            part("indirection-table", DoneBy::Hardware, what, why, None)
        }
        _ => part(
            "indirection-table",
            DoneBy::Flowlane,
            format!(
                "{} buckets kept in software{}",
                wanted.table_size,
                if is_veth(caps) {
                    " (the test bed's BPF map)"
                } else {
                    ""
                }
            ),
            match (is_veth(caps), spill) {
                (true, None) => "veth has no table; the bed's emulated NIC holds one and takes \
                                 the same rewrites as a real NIC's"
                    .to_string(),
                (true, Some(spill)) => {
                    format!("veth has no table; the bed's emulated NIC holds one, but {spill}")
                }
                (false, _) => "the NIC has no programmable table: flowlane cannot steer \
                               buckets in the NIC, so moves between queues are not possible"
                    .to_string(),
            },
            None,
        ),
    }
}

fn queues(caps: &NicCaps, wanted: Wanted) -> PlanPart {
    let iface = &caps.iface;
    let max = caps.max_rx_queues();
    let now = caps.rx_queues;
    if wanted.workers > max {
        let extra = wanted.workers - max;
        // The bucket of each frame is what sends it to its worker: flowlane
        // needs the RSS key and table (the NIC's, or the test bed's).
        if caps.rss.as_ref().is_some_and(|r| r.table_size > 0) || is_veth(caps) {
            return part(
                "queues",
                DoneBy::Flowlane,
                format!(
                    "{} workers on {max} receive queue(s): {extra} without a queue (software spill)",
                    wanted.workers
                ),
                "each extra worker takes an even share of the RSS buckets from the queues \
                 with the most; their workers forward it those frames through an \
                 inter-worker ring and one of them sends its segments (a copy and a \
                 cross-core hand-off per frame each way); buckets do not move between \
                 workers then",
                None,
            );
        }
        if max == 1 {
            // Every frame reaches the one queue: the bucket is flowlane's
            // to choose, with a hash and a key of its own.
            return part(
                "queues",
                DoneBy::Flowlane,
                format!(
                    "{} workers on one receive queue: {extra} without a queue (software steering)",
                    wanted.workers
                ),
                "the NIC has no RSS flowlane can read, and one queue: queue 0's worker hashes \
                 each frame (Toeplitz, with a secret key of flowlane's own, so that peers \
                 cannot choose their worker) into a table of its own spreading the buckets \
                 evenly, and forwards the others' frames through an inter-worker ring; they \
                 send through it (a copy and a cross-core hand-off per frame each way); \
                 buckets do not move between workers then",
                None,
            );
        }
        return part(
            "queues",
            DoneBy::Refused,
            format!(
                "{} workers, but {iface} can have {max} receive queue(s)",
                wanted.workers
            ),
            "spreading several queues' frames over more workers needs the RSS key and \
             table to know each frame's bucket (a flow's frames may reach any of the \
             queues), and this NIC reports no RSS",
            Some(format!("run {max} worker(s) (--queues {max})")),
        );
    }
    let action = (wanted.workers > now).then(|| match caps.channels {
        Some(c) if c.combined_max > 0 => format!("ethtool -L {iface} combined {}", wanted.workers),
        Some(_) => format!("ethtool -L {iface} rx {}", wanted.workers),
        None => format!("give {iface} {} receive queues", wanted.workers),
    });
    part(
        "queues",
        DoneBy::Hardware,
        format!(
            "{} receive queue(s), one per worker ({now} now, {max} at most)",
            wanted.workers
        ),
        "the NIC delivers each bucket's frames to its worker's queue: no frame crosses \
         cores in software",
        action,
    )
}

fn af_xdp(caps: &NicCaps) -> PlanPart {
    let zc_segs = caps.xdp.as_ref().map_or(0, |x| x.zc_max_segs);
    match caps.xsk_mode() {
        Some(XskMode::ZeroCopy) => part(
            "af-xdp",
            DoneBy::Hardware,
            format!("zero-copy AF_XDP (up to {zc_segs} fragment(s) per frame)"),
            "the NIC reads and writes frames in flowlane's UMEM directly",
            None,
        ),
        Some(XskMode::Copy) => part(
            "af-xdp",
            DoneBy::Kernel,
            "copy-mode AF_XDP",
            "the driver has no zero-copy: the kernel copies each received frame into the \
             UMEM and builds an skb for each transmitted one (most of flowlane's cost per \
             byte on such a device)",
            None,
        ),
        None => part(
            "af-xdp",
            DoneBy::Unknown,
            "AF_XDP mode not known",
            "the kernel has no netdev `dev-get` (before 6.3); flowlane tries zero-copy and \
             falls back to copy mode",
            None,
        ),
    }
}

fn xdp_attach(caps: &NicCaps) -> PlanPart {
    match caps.has_xdp(XdpFeature::Basic) {
        Some(true) => part(
            "xdp-program",
            DoneBy::Hardware,
            "native XDP in the driver",
            "flowlane's steering program runs before the kernel allocates an skb",
            None,
        ),
        Some(false) => part(
            "xdp-program",
            DoneBy::Kernel,
            "generic (skb) XDP",
            "the driver has no native XDP: the program runs after the kernel built an skb, \
             at a kernel-like cost per frame",
            None,
        ),
        None => part(
            "xdp-program",
            DoneBy::Unknown,
            "XDP mode not known",
            "the kernel has no netdev `dev-get` (before 6.3)",
            None,
        ),
    }
}

fn tx_checksum(caps: &NicCaps) -> PlanPart {
    let offered = caps
        .xdp
        .as_ref()
        .is_some_and(|x| x.xsk.contains(&XskFeature::TxChecksum));
    part(
        "tx-checksum",
        DoneBy::Flowlane,
        "TCP and IP checksums of transmitted segments computed in software",
        if offered {
            "the NIC offers AF_XDP checksum offload (XDP_TXMD_FLAGS_CHECKSUM); flowlane \
             does not use transmit metadata yet"
        } else {
            "the device offers no AF_XDP checksum offload"
        },
        None,
    )
}

fn interrupts(caps: &NicCaps, wanted: Wanted) -> PlanPart {
    let iface = &caps.iface;
    let n = wanted.workers.min(caps.rx_queues);
    let irqs: Vec<_> = caps.rx_irqs().into_iter().filter(|&(q, _)| q < n).collect();
    let threads = caps.napis.iter().filter(|x| x.pid.is_some()).count();
    if !irqs.is_empty() {
        let list = irqs
            .iter()
            .take(8)
            .map(|(q, i)| format!("{q}:{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        return part(
            "interrupts",
            DoneBy::Hardware,
            format!(
                "one IRQ per receive queue (queue:irq {list}{})",
                if irqs.len() > 8 { " ..." } else { "" }
            ),
            "each queue's IRQ is pinned to its worker's CPU, so NAPI runs where the \
             worker reads the ring",
            Some(format!("flowlane irq apply --iface {iface}")),
        );
    }
    if threads > 0 || caps.threaded_napi == Some(true) {
        return part(
            "interrupts",
            DoneBy::Kernel,
            format!("threaded NAPI: {threads} napi/{iface}-N kernel thread(s)"),
            "no per-queue IRQs (a virtual device): each queue's NAPI thread is pinned \
             like an IRQ would be",
            Some(format!("flowlane irq apply --iface {iface}")),
        );
    }
    if caps.queues.is_empty() && caps.napis.is_empty() {
        return part(
            "interrupts",
            DoneBy::Unknown,
            "queue interrupts not known",
            "the kernel has no netdev `queue-get`/`napi-get` (before 6.8) and no IRQ is \
             named after a queue",
            Some(format!("flowlane irq show --iface {iface}")),
        );
    }
    part(
        "interrupts",
        DoneBy::Kernel,
        "NAPI in softirq context, no per-queue IRQ",
        "the device has neither per-queue IRQs nor threaded NAPI: its receive processing \
         runs wherever the softirq does (on veth, NAPI runs only while an XDP program is \
         attached)",
        Some(format!("echo 1 > /sys/class/net/{iface}/threaded")),
    )
}

fn ntuple(caps: &NicCaps) -> PlanPart {
    let iface = &caps.iface;
    match caps.ntuple {
        Some(t) if t.available => part(
            "flow-steering",
            DoneBy::Hardware,
            format!(
                "ntuple filters available ({})",
                if t.on { "on" } else { "off" }
            ),
            "flowlane steers by RSS buckets and needs no filter; the filters stay the \
             operator's (a filter that catches flowlane's traffic takes it off its bucket)",
            (!t.on).then(|| format!("ethtool -K {iface} ntuple on")),
        ),
        Some(_) => part(
            "flow-steering",
            DoneBy::Flowlane,
            "no ntuple filters",
            "flows are placed through the indirection table only; flowlane's XDP program \
             passes traffic that is not flowlane's to the kernel",
            None,
        ),
        None => part(
            "flow-steering",
            DoneBy::Unknown,
            "ntuple filters not known",
            "the kernel did not answer ethtool FEATURES_GET",
            None,
        ),
    }
}

/// The `numa` part without the topology: what placement does, not which node it gets.
fn numa(caps: &NicCaps) -> PlanPart {
    match caps.numa_node {
        Some(n) => part(
            "numa",
            DoneBy::Hardware,
            format!(
                "the NIC is on node {n}: its workers, UMEM and IRQs go to node {n}'s CPUs, \
                 to the nearest nodes with CPUs where it has too few or none"
            ),
            "frames are DMA'd into the memory of the worker's node and read by its cores; \
             which nodes have CPUs is the machine's topology, not given here",
            None,
        ),
        None => numa_unknown(),
    }
}

fn numa_unknown() -> PlanPart {
    part(
        "numa",
        DoneBy::Flowlane,
        "the NIC names no NUMA node: workers fill the nodes in index order, the lowest \
         node's CPUs first",
        "a virtual device or a one-node machine (device/numa_node is -1 or absent)",
        None,
    )
}

/// The `numa` part from the placement `topo` gives the workers.
fn numa_on(caps: &NicCaps, wanted: Wanted, topo: &Topology) -> PlanPart {
    let Some(n) = caps.numa_node else {
        return numa_unknown();
    };
    let Some(local) = topo.node(n).map(|node| node.cpus.len()) else {
        return part(
            "numa",
            DoneBy::Flowlane,
            format!(
                "the NIC is on node {n}, which is not in the topology: workers fill the nodes \
                 in index order, the lowest node's CPUs first"
            ),
            "hwloc leaves out the nodes outside the process's cpuset.mems while sysfs names \
             the device's: locality is a matter of luck",
            None,
        );
    };
    let workers = usize::try_from(wanted.workers.max(1)).unwrap_or(usize::MAX);
    let placed = workers.min(topo.cores.len());
    // Nodes in placement order, with how many workers each takes.
    let mut nodes: Vec<(u32, usize)> = Vec::new();
    if let Ok(plan) = plan_placement(topo, Some(n), placed, None, &[]) {
        for q in &plan.queues {
            match nodes.last_mut() {
                Some((node, count)) if *node == q.node => *count += 1,
                _ => nodes.push((q.node, 1)),
            }
        }
    }
    let list = |nodes: &[(u32, usize)]| {
        let names: Vec<String> = nodes
            .iter()
            .map(|&(node, count)| match topo.distance(n, node) {
                Some(d) => format!("node {node} ({count} worker(s), distance {d})"),
                None => format!("node {node} ({count} worker(s); no distances known: by index)"),
            })
            .collect();
        names.join(", ")
    };
    match nodes.split_first() {
        None => part(
            "numa",
            DoneBy::Refused,
            format!("the NIC is on node {n}, and the topology has no CPU for its workers"),
            "workers need CPUs",
            None,
        ),
        Some((&(first, count), [])) if first == n => part(
            "numa",
            DoneBy::Hardware,
            format!("the NIC is on node {n}: its {count} worker(s), their UMEM and IRQs go there"),
            "frames are DMA'd into node-local memory and read by node-local cores",
            None,
        ),
        Some((&(first, count), rest)) if first == n => part(
            "numa",
            DoneBy::Hardware,
            format!(
                "the NIC is on node {n}: {count} of its {placed} workers, their UMEM and IRQs \
                 go there; the others to the nearest nodes with CPUs: {}",
                list(rest)
            ),
            format!(
                "node {n} has {local} CPU(s): the workers beyond them read frames the NIC \
                 DMA'd across the interconnect"
            ),
            Some(format!("run {local} worker(s) (--queues {local})")),
        ),
        Some(_) => part(
            "numa",
            DoneBy::Flowlane,
            format!(
                "the NIC is on node {n}, which has no CPUs (memory only): its workers, their \
                 UMEM and IRQs go to the nearest nodes with CPUs: {}",
                list(&nodes)
            ),
            format!(
                "no worker can run on node {n}: the NIC DMAs every frame across the \
                 interconnect into the memory of the workers' node"
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic_caps::{xdp_features, Channels, FlowHash, RssFacts, Toggle, XdpFacts};

    fn find<'a>(parts: &'a [PlanPart], name: &str) -> &'a PlanPart {
        parts.iter().find(|p| p.part == name).unwrap()
    }

    #[test]
    fn a_nic_without_anything_known() {
        let caps = NicCaps {
            iface: "x".into(),
            rx_queues: 1,
            tx_queues: 1,
            ..NicCaps::default()
        };
        let p = explain(
            &caps,
            Wanted {
                workers: 1,
                table_size: 128,
            },
        );
        assert_eq!(p.len(), 9);
        assert_eq!(find(&p, "af-xdp").done_by, DoneBy::Unknown);
        assert_eq!(find(&p, "interrupts").done_by, DoneBy::Unknown);
        assert_eq!(find(&p, "rss-hash").done_by, DoneBy::Flowlane);
        assert_eq!(find(&p, "queues").done_by, DoneBy::Hardware);
        assert_eq!(find(&p, "numa").done_by, DoneBy::Flowlane);
    }

    #[test]
    fn more_workers_than_queues_spill_where_rss_says_the_bucket() {
        let caps = NicCaps {
            iface: "eth1".into(),
            rx_queues: 2,
            tx_queues: 2,
            channels: Some(Channels {
                combined_max: 4,
                combined: 2,
                ..Channels::default()
            }),
            ..NicCaps::default()
        };
        let w = |workers| Wanted {
            workers,
            table_size: 128,
        };
        let q = find(&explain(&caps, w(3)), "queues").clone();
        assert_eq!(q.done_by, DoneBy::Hardware);
        assert_eq!(q.action.as_deref(), Some("ethtool -L eth1 combined 3"));
        let q = find(&explain(&caps, w(5)), "queues").clone();
        assert_eq!(q.done_by, DoneBy::Refused, "no RSS: no bucket to spill by");
        assert_eq!(q.action.as_deref(), Some("run 4 worker(s) (--queues 4)"));
        // One queue and no RSS: every frame is queue 0's, its bucket
        // flowlane's to choose.
        let one = NicCaps {
            iface: "eth0".into(),
            rx_queues: 1,
            tx_queues: 1,
            ..NicCaps::default()
        };
        let q = find(&explain(&one, w(2)), "queues").clone();
        assert_eq!(q.done_by, DoneBy::Flowlane, "{q:?}");
        assert!(
            q.what.contains("1 without a queue (software steering)"),
            "{q:?}"
        );
        let mut with_rss = caps;
        with_rss.rss = Some(crate::nic_caps::RssFacts {
            key_len: 40,
            table_size: 128,
            ..crate::nic_caps::RssFacts::default()
        });
        let q = find(&explain(&with_rss, w(5)), "queues").clone();
        assert_eq!(q.done_by, DoneBy::Flowlane);
        assert!(
            q.what.contains("1 without a queue (software spill)"),
            "{q:?}"
        );
    }

    #[test]
    fn no_explanation_has_a_run_of_spaces() {
        // Every branch's text, over NICs that reach them: a `\` line continuation lost in
        // a string leaves the next line's indentation in the output.
        let plain = NicCaps {
            iface: "eth0".into(),
            rx_queues: 1,
            tx_queues: 1,
            ..NicCaps::default()
        };
        let veth = NicCaps {
            driver: Some("veth".into()),
            threaded_napi: Some(true),
            ..plain.clone()
        };
        let rss = |tcp4: &str, func: &str| NicCaps {
            rx_queues: 4,
            numa_node: Some(1),
            rss: Some(RssFacts {
                key_len: 40,
                table_size: 128,
                hash_function: Some(func.into()),
                flow_hash: FlowHash {
                    tcp4: Some(tcp4.into()),
                    ..FlowHash::default()
                },
            }),
            ntuple: Some(Toggle {
                available: true,
                on: true,
            }),
            xdp: Some(XdpFacts {
                features: xdp_features(0x07),
                ..XdpFacts::default()
            }),
            ..plain.clone()
        };
        let no_ntuple = NicCaps {
            ntuple: Some(Toggle::default()),
            xdp: Some(XdpFacts::default()),
            ..plain.clone()
        };
        let four = NicCaps {
            rx_queues: 4,
            queue_irqs: vec![crate::nic_caps::QueueIrq { queue: 0, irq: 40 }],
            ..plain.clone()
        };
        let softirq = NicCaps {
            queues: vec![crate::nic_caps::QueueFacts {
                id: 0,
                kind: crate::nic_caps::QueueKind::Rx,
                napi: None,
            }],
            ..plain.clone()
        };
        let symmetric = {
            let mut n = rss("sdfn", "toeplitz");
            let r = n.rss.as_mut().unwrap();
            r.flow_hash.input_xfrm = Some("symmetric-xor".into());
            r.flow_hash.udp4 = Some("sd".into());
            r.table_size = 192;
            n
        };
        let udp_sd = {
            let mut n = rss("sdfn", "toeplitz");
            n.rss.as_mut().unwrap().flow_hash.udp6 = Some("sd".into());
            n
        };
        let nics = [
            plain.clone(),
            veth,
            symmetric,
            udp_sd,
            rss("sdfn", "toeplitz"),
            rss("sd", "toeplitz"),
            rss("sdt", "toeplitz"),
            rss("sdfn", "xor"),
            no_ntuple,
            four,
            softirq,
        ];
        for caps in &nics {
            for workers in [1, 2, 4, 9] {
                let wanted = Wanted {
                    workers,
                    table_size: 128,
                };
                let topo = with_a_memory_only_node();
                let on = [None, Some(0), Some(1), Some(2), Some(7)].map(|node| {
                    explain_on(
                        &NicCaps {
                            numa_node: node,
                            ..caps.clone()
                        },
                        wanted,
                        &topo,
                    )
                });
                for p in explain(caps, wanted)
                    .into_iter()
                    .chain(on.into_iter().flatten())
                {
                    for text in [&p.what, &p.why].into_iter().chain(p.action.as_ref()) {
                        assert!(!text.contains("  "), "{}: {text:?}", p.part);
                    }
                }
            }
        }
    }

    #[test]
    fn a_nic_without_a_node_says_how_nodes_are_filled() {
        let caps = NicCaps {
            iface: "x".into(),
            rx_queues: 1,
            tx_queues: 1,
            ..NicCaps::default()
        };
        let p = find(
            &explain(
                &caps,
                Wanted {
                    workers: 1,
                    table_size: 128,
                },
            ),
            "numa",
        )
        .clone();
        assert!(!p.what.contains("spread"), "{p:?}");
        assert!(p.what.contains("in index order"), "{p:?}");
    }

    /// Node 0: CPUs 0-3; node 1: memory only (CXL, HBM), nearest to node 2; node 2: CPUs
    /// 4-5.
    fn with_a_memory_only_node() -> Topology {
        use crate::topology::{Core, NodeDistances, NumaNode};
        let cores = (0..6)
            .map(|cpu| Core {
                os_index: cpu,
                core_id: cpu,
                package: u32::from(cpu >= 4),
                numa_node: if cpu < 4 { 0 } else { 2 },
                smt_sibling_rank: 0,
            })
            .collect();
        let memory_only = NumaNode {
            os_index: 1,
            cpus: Vec::new(),
            memory_bytes: Some(1 << 30),
        };
        #[rustfmt::skip]
        let d = NodeDistances::new(vec![0, 1, 2], vec![
            10, 30, 21,
            30, 10, 14,
            21, 14, 10,
        ]).unwrap();
        Topology::new(cores, vec![memory_only], Vec::new(), Some(d)).unwrap()
    }

    fn numa_part(node: Option<u32>, workers: u32, topo: Option<&Topology>) -> PlanPart {
        let caps = NicCaps {
            iface: "eth0".into(),
            rx_queues: workers,
            tx_queues: workers,
            numa_node: node,
            ..NicCaps::default()
        };
        let wanted = Wanted {
            workers,
            table_size: 128,
        };
        let parts = match topo {
            Some(t) => explain_on(&caps, wanted, t),
            None => explain(&caps, wanted),
        };
        assert_eq!(parts.len(), 9);
        find(&parts, "numa").clone()
    }

    #[test]
    fn a_nic_on_a_node_without_cpus_names_where_its_workers_go() {
        let t = with_a_memory_only_node();
        let p = numa_part(Some(1), 2, Some(&t));
        assert_eq!(p.done_by, DoneBy::Flowlane, "{p:?}");
        assert!(p.what.contains("node 1, which has no CPUs"), "{p:?}");
        assert!(
            p.what.contains("node 2 (2 worker(s), distance 14)"),
            "{p:?}"
        );
        assert!(!p.what.contains("go there"), "{p:?}");
        // More workers than the nearest node has CPUs: the next nearest too, as placed.
        let p = numa_part(Some(1), 4, Some(&t));
        assert!(
            p.what
                .contains("node 2 (2 worker(s), distance 14), node 0 (2 worker(s), distance 30)"),
            "{p:?}"
        );
        // Without the topology nothing is promised that placement may not keep.
        let p = numa_part(Some(1), 2, None);
        assert!(!p.what.contains("go there"), "{p:?}");
        assert!(p.what.contains("nearest nodes with CPUs"), "{p:?}");
    }

    #[test]
    fn a_nic_on_a_node_with_cpus_keeps_its_workers_while_they_last() {
        let t = with_a_memory_only_node();
        let p = numa_part(Some(0), 4, Some(&t));
        assert_eq!(p.done_by, DoneBy::Hardware);
        assert_eq!(
            p.what,
            "the NIC is on node 0: its 4 worker(s), their UMEM and IRQs go there"
        );
        let p = numa_part(Some(2), 3, Some(&t));
        assert_eq!(p.done_by, DoneBy::Hardware);
        assert!(p.what.contains("2 of its 3 workers"), "{p:?}");
        assert!(
            p.what.contains("node 0 (1 worker(s), distance 21)"),
            "{p:?}"
        );
        assert_eq!(p.action.as_deref(), Some("run 2 worker(s) (--queues 2)"));
        // A node the topology does not list, or none: index order, as placement does.
        let p = numa_part(Some(7), 1, Some(&t));
        assert_eq!(p.done_by, DoneBy::Flowlane);
        assert!(
            p.what.contains("node 7, which is not in the topology"),
            "{p:?}"
        );
        assert_eq!(numa_part(None, 1, Some(&t)), numa_part(None, 1, None));
    }

    #[test]
    fn a_hash_flowlane_cannot_predict_is_named() {
        let mut caps = NicCaps {
            iface: "eth2".into(),
            rx_queues: 4,
            tx_queues: 4,
            rss: Some(RssFacts {
                key_len: 40,
                table_size: 128,
                hash_function: Some("toeplitz".into()),
                flow_hash: FlowHash {
                    tcp4: Some("sd".into()),
                    ..FlowHash::default()
                },
            }),
            ntuple: Some(Toggle {
                available: true,
                on: false,
            }),
            xdp: Some(XdpFacts {
                features: xdp_features(0x03),
                ..XdpFacts::default()
            }),
            ..NicCaps::default()
        };
        let w = Wanted {
            workers: 4,
            table_size: 128,
        };
        let p = explain(&caps, w);
        let h = find(&p, "rss-hash");
        assert!(h.what.contains("addresses only"), "{h:?}");
        assert_eq!(
            h.action.as_deref(),
            Some("ethtool -N eth2 rx-flow-hash tcp4 sdfn")
        );
        assert_eq!(
            find(&p, "indirection-table").what,
            "128 entries over 4 queue(s), 32 bucket(s) each"
        );
        assert_eq!(find(&p, "af-xdp").done_by, DoneBy::Kernel);
        assert_eq!(find(&p, "xdp-program").done_by, DoneBy::Hardware);
        assert_eq!(
            find(&p, "flow-steering").action.as_deref(),
            Some("ethtool -K eth2 ntuple on")
        );
        caps.rss.as_mut().unwrap().hash_function = Some("xor".into());
        let h = find(&explain(&caps, w), "rss-hash").clone();
        assert_eq!(
            h.action.as_deref(),
            Some("ethtool -X eth2 hfunc toeplitz; ethtool -N eth2 rx-flow-hash tcp4 sdfn"),
            "everything that differs, in one line"
        );
    }

    fn toeplitz_nic(xfrm: Option<&str>, tcp6: &str, udp4: &str) -> NicCaps {
        NicCaps {
            iface: "eth0".into(),
            rx_queues: 4,
            tx_queues: 4,
            rss: Some(RssFacts {
                key_len: 40,
                table_size: 128,
                hash_function: Some("toeplitz".into()),
                flow_hash: FlowHash {
                    input_xfrm: xfrm.map(str::to_string),
                    tcp4: Some("sdfn".into()),
                    tcp6: Some(tcp6.into()),
                    udp4: Some(udp4.into()),
                    udp6: Some("sdfn".into()),
                },
            }),
            ..NicCaps::default()
        }
    }

    /// A NIC that transforms the fields before hashing, or hashes TCP/IPv6
    /// on addresses only, is not one whose hash flowlane computes "bit for
    /// bit": the part says what differs and what to change.
    #[test]
    fn a_hash_the_model_does_not_compute_is_not_called_predictable() {
        let w = Wanted {
            workers: 4,
            table_size: 128,
        };
        let h = find(
            &explain(&toeplitz_nic(Some("symmetric-xor"), "sdfn", "sdfn"), w),
            "rss-hash",
        )
        .clone();
        assert!(!h.why.contains("bit for bit"), "{h:?}");
        assert!(h.what.contains("symmetric-xor"), "{h:?}");
        assert_eq!(h.action.as_deref(), Some("ethtool -X eth0 xfrm none"));
        let h = find(
            &explain(&toeplitz_nic(Some("none"), "sd", "sdfn"), w),
            "rss-hash",
        )
        .clone();
        assert!(!h.why.contains("bit for bit"), "{h:?}");
        assert!(
            h.what.contains("TCP/IPv6 is hashed on addresses only"),
            "{h:?}"
        );
        assert_eq!(
            h.action.as_deref(),
            Some("ethtool -N eth0 rx-flow-hash tcp6 sdfn")
        );
        // TCP as modelled, UDP/IPv4 not: TCP predicted, UDP hints said wrong.
        let h = find(
            &explain(&toeplitz_nic(Some("none"), "sdfn", "sd"), w),
            "rss-hash",
        )
        .clone();
        assert!(
            h.why.contains(
                "each TCP flow's queue (hints, source ports of outgoing connections), not a UDP \
                 flow's: UDP/IPv4 is hashed on addresses only"
            ),
            "{h:?}"
        );
        assert_eq!(
            h.action.as_deref(),
            Some("ethtool -N eth0 rx-flow-hash udp4 sdfn")
        );
        // All as modelled; a kernel before 6.8 does not say the transformation.
        let h = find(&explain(&toeplitz_nic(None, "sdfn", "sdfn"), w), "rss-hash").clone();
        assert!(h.why.contains("each TCP and UDP flow's queue"), "{h:?}");
        assert!(
            h.what.ends_with(
                "; not reported, assumed as flowlane hashes: input transformation (none before \
                 Linux 6.8)"
            ),
            "{h:?}"
        );
        assert_eq!(h.action, None);
    }

    /// The table part promises moves only where a service makes them: not
    /// while workers outnumber the queues (software spill), not for a table
    /// the model cannot take (refused at start), not for a hash it cannot
    /// predict.
    #[test]
    fn the_table_promises_no_moves_that_are_refused() {
        let w = |workers| Wanted {
            workers,
            table_size: 128,
        };
        let nic = toeplitz_nic(Some("none"), "sdfn", "sdfn");
        let t = find(&explain(&nic, w(4)), "indirection-table").clone();
        assert!(t.why.contains("rewriting its entry"), "{t:?}");
        let t = find(&explain(&nic, w(6)), "indirection-table").clone();
        assert_eq!(t.done_by, DoneBy::Hardware);
        assert!(!t.why.contains("rewriting"), "{t:?}");
        assert!(
            t.why
                .contains("buckets do not move while 6 workers share 4 queue(s)"),
            "{t:?}"
        );
        let mut odd = nic;
        odd.rss.as_mut().unwrap().table_size = 192;
        let t = find(&explain(&odd, w(4)), "indirection-table").clone();
        assert_eq!(t.done_by, DoneBy::Refused, "{t:?}");
        assert!(t.what.contains("192 is not a power of two"), "{t:?}");
        odd.rss.as_mut().unwrap().table_size = u32::MAX;
        let t = find(&explain(&odd, w(4)), "indirection-table").clone();
        assert_eq!(t.done_by, DoneBy::Refused, "too large for the model");
        let t = find(
            &explain(&toeplitz_nic(Some("symmetric-xor"), "sdfn", "sdfn"), w(4)),
            "indirection-table",
        )
        .clone();
        assert!(!t.why.contains("rewriting"), "{t:?}");
        let bed = NicCaps {
            iface: "xsk0".into(),
            driver: Some("veth".into()),
            rx_queues: 2,
            tx_queues: 2,
            ..NicCaps::default()
        };
        let t = find(&explain(&bed, w(3)), "indirection-table").clone();
        assert!(!t.why.contains("takes the same rewrites"), "{t:?}");
        assert!(t.why.contains("software spill"), "{t:?}");
    }
}
