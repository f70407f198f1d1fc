//! flowlane's veth test bed as a library: two network namespaces joined by a
//! multi-queue veth pair, the Linux kernel stack on the far side, and an
//! emulated RSS NIC; link impairment and a delay line for kernels without
//! `sch_netem`; and re-execution of a data-path program inside a bed.
//!
//! Used by the `flowlane testbed` commands, the integration tests and the
//! measurement tools; never by the data path itself.
//!
//! | module | concern |
//! | --- | --- |
//! | [`netns`] | network namespaces and iproute2, a namespace's identity |
//! | [`state`] | the bed's state file (one schema), state directory, name check, fixed addresses, the bed's locks |
//! | [`emulated_nic`] | the emulated RSS NIC behind [`flowlane_numa_sched::nic::RssNic`] |
//! | [`table_writer`] | its table as the data path's bucket-move writer, by map id inside the bed |
//! | [`bed`] | `up`, `down`, `status` |
//! | [`offloads`] | GSO super-frames or wire-size frames from the bed's kernels |
//! | [`impair`] | loss, duplication, corruption, reordering, ECN CE marking |
//! | [`delay_queue`] | the delay line's queue (pure) |
//! | [`packet_socket`] | the delay line's raw `AF_PACKET` socket (with [`child::terminate_with_parent`], this crate's only `unsafe`) |
//! | [`delay_line`] | the delay line |
//! | [`reexec`] | running a program inside a bed (`--bed NAME`) |
//! | [`users`](mod@users) | who uses a bed (flowlane's programs and AF_XDP socket holders in its namespaces), stopping them |
//! | [`child`] | child processes with a deadline (wait, SIGTERM then SIGKILL), and SIGTERM when their parent dies |
//! | [`net_counters`] | a namespace's protocol counters (`/proc/net/snmp`, `/proc/net/netstat`) |
//! | [`proc_stat`] | CPU time (`/proc/stat`, `/proc/<pid>/stat`), a process's start, and interface counters (`/proc/net/dev`) |
//!
//! Modules depend on each other in that order (no cycles): `netns` and
//! `child` on nothing, `state` on `netns`, `net_counters`, `proc_stat` and `offloads` on `netns`, `impair` on `offloads` and `state`, `users` on `state` and `proc_stat`, `bed` on `impair`,
//! `emulated_nic` and `users`, `table_writer` on `emulated_nic`, `delay_line` on `delay_queue` and
//! `packet_socket`.

pub mod bed;
pub mod bpffs;
pub mod child;
pub mod delay_line;
pub mod delay_queue;
pub mod emulated_nic;
pub mod impair;
pub mod net_counters;
pub mod netns;
pub mod offloads;
pub mod packet_socket;
pub mod proc_stat;
pub mod reexec;
pub mod state;
pub mod table_writer;
pub mod users;

/// The XDP live-frames traffic generator (`flowlane bench rx` and `flowlane
/// bench synflood` send with it from the bed's far side); a test-bed
/// program of `flowlane-ebpf`.
pub use flowlane_ebpf::trafficgen;

pub use bed::{down, status, up, BedSpec, BedStatus};
pub use emulated_nic::EmulatedNic;
pub use reexec::reexec_in_bed;
pub use state::{
    load, BedState, FLOWLANE_EPHEMERAL, LOCAL_IF, LOCAL_V4, LOCAL_V6, PEER_IF, PEER_V4, PEER_V6,
};
pub use users::{stop_users, users, BedUser};
