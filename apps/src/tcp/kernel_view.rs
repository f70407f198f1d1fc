//! A kernel-socket service as its control socket reports it: each core
//! in place of a queue (its thread's CPU time as the busy time, the TCP
//! counters a socket backend knows), hints for the connections it holds,
//! and no buckets to move.

use std::net::SocketAddr;
use std::time::Duration;

use flowlane_dataplane::control_socket::QueueCounterSet;
use flowlane_dataplane::service_control::ServiceView;
use flowlane_dataplane::{worker_cpu_ns, QueueCountersSnapshot, ServiceHint, TcpCountersSnapshot};
use flowlane_kernel::{CoreCounters, KernelService};
use flowlane_numa_sched::{FlowTuple, Protocol};

/// How long a hint waits for the cores' answers (each answers within its
/// loop's 10 ms tick).
const LOCATE_TIMEOUT: Duration = Duration::from_millis(200);

/// A running [`KernelService`], seen by its control socket.
pub(super) struct KernelView<'a>(pub(super) &'a KernelService);

/// A core's counters in the AF_XDP queue's shape: what kernel sockets
/// let a service count, the rest zero.
fn tcp_counters(c: &CoreCounters) -> TcpCountersSnapshot {
    let s = &c.stats;
    TcpCountersSnapshot {
        connections: c.connections as u64,
        passive_opens: s.passive_opens,
        active_opens: s.active_opens,
        closed: s.closed,
        bytes_in: s.bytes_in,
        bytes_out: s.bytes_out,
        resets_in: s.resets_in,
        resets_out: s.resets_out,
        resets_aborted: s.resets_aborted,
        resets_data_after_close: s.resets_data_after_close,
        resets_timed_out: s.resets_timed_out,
        resets_refused: s.resets_refused,
        connection_limit_refused: s.connection_limit_refused,
        application_refused: c.application_refused,
        finishing: c.finishing as u64,
        syn_refused: s.syn_refused,
        buffer_memory: c.buffer_memory as u64,
        buffer_memory_returned: c.buffer_memory_returned,
        rx_memory_peak: c.rx_memory_peak as u64,
        rx_memory_waits: c.rx_memory_waits,
        tx_memory_peak: c.tx_memory_peak as u64,
        tx_memory_waits: c.tx_memory_waits,
        ..Default::default()
    }
}

impl ServiceView for KernelView<'_> {
    fn backend(&self) -> &'static str {
        "kernel"
    }

    fn iface(&self) -> String {
        "*".into()
    }

    fn queue_counters(&self) -> Vec<QueueCounterSet> {
        let counters = self.0.counters();
        self.0
            .cores()
            .iter()
            .map(|p| QueueCounterSet {
                queue: p.queue,
                cpu: p.cpu,
                node: p.node,
                io: QueueCountersSnapshot {
                    busy_ns: worker_cpu_ns(p.queue).unwrap_or(0),
                    ..Default::default()
                },
                tcp: counters
                    .iter()
                    .find(|(q, _)| *q == p.queue)
                    .map(|(_, c)| tcp_counters(c))
                    .unwrap_or_default(),
            })
            .collect()
    }

    fn hint(&self, flow: &FlowTuple) -> Result<ServiceHint, String> {
        if flow.protocol != Protocol::Tcp {
            return Err("serves TCP only (kernel sockets)".into());
        }
        let local = SocketAddr::new(flow.dst, flow.dst_port);
        let remote = SocketAddr::new(flow.src, flow.src_port);
        let p = self.0.locate(local, remote, LOCATE_TIMEOUT).ok_or_else(|| {
            format!(
                "holds no connection from {remote} to {local} (on kernel sockets the kernel picks the core at the SYN: a hint is known once connected)"
            )
        })?;
        Ok(ServiceHint {
            hash: None,
            bucket: None,
            queue: p.queue,
            cpu: p.cpu,
            node: p.node,
        })
    }
}
