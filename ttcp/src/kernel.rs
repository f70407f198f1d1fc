//! The kernel backend: Linux TCP sockets through flowlane's kernel-socket
//! backend (`flowlane_kernel`): one mio loop per `-m` thread, pinned as the
//! mapping says, each with `SO_REUSEPORT` listeners on every data port (the
//! kernel spreads connections over them). The measurement's handlers
//! ([`crate::handlers`], the same as on flowlane's TCP) run on the loops, or
//! on application threads in queue-pair mode ([`crate::cores`]).

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use flowlane_dataplane::service_args::ExecMode;
use flowlane_kernel::{KernelConfig, KernelService, Limits};

use crate::backend::{Backend, DataThreads, Shared, Workers};
use crate::cores::{kernel_cores, Placed};
use crate::handlers::{self, HandlerSetup};
use crate::plan::Plan;

/// Kernel sockets, the handlers run to completion on their loops or in
/// queue-pair mode.
#[derive(Debug)]
pub struct Kernel(pub ExecMode);

impl Backend for Kernel {
    fn name(&self) -> &'static str {
        "kernel"
    }

    fn data_threads(&self) -> DataThreads {
        match self.0 {
            ExecMode::Rtc => DataThreads {
                prefixes: &["flowlane-q"],
                label: "socket loops flowlane-q* (kernel TCP work in softirq is not theirs)",
            },
            ExecMode::QueuePair => DataThreads {
                prefixes: &["flowlane-q", "flowlane-app"],
                label: "socket loops flowlane-q* and application threads flowlane-app* (kernel TCP work in softirq is not theirs)",
            },
        }
    }

    fn start_receiver(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        start(
            plan,
            self.0,
            handlers::receiver(plan),
            vec![plan.addr],
            shared,
        )
    }

    fn start_sender(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let cores = plan.threads.len() as u32;
        start(
            plan,
            self.0,
            handlers::sender(plan, cores),
            Vec::new(),
            shared,
        )
    }
}

/// Fails now, before any sync, when this process's sockets may not run
/// `--congestion` (the handlers set it on every data connection: one that
/// refuses fails the run, but an application thread's request is not
/// answered): Linux lets a process without `CAP_NET_ADMIN` choose only
/// those in `net.ipv4.tcp_allowed_congestion_control`, and only those it
/// has loaded.
fn check_congestion(plan: &Plan) -> Result<()> {
    use flowlane_dataplane::service_args::CongestionChoice;
    use nix::errno::Errno;
    use nix::sys::socket::{setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType};
    let flag = format!("--congestion {}", plan.congestion_name());
    // Linux's names, as `flowlane_kernel`'s `Net::set_congestion` sets them.
    let linux = match plan.flowlane.data_path.congestion {
        CongestionChoice::NewReno => "reno",
        CongestionChoice::Cubic => "cubic",
    };
    let family = match plan.addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| anyhow!("{flag}: a socket to try it on: {e}"))?;
    match setsockopt(&fd, sockopt::TcpCongestion, &std::ffi::OsString::from(linux)) {
        Ok(()) => Ok(()),
        Err(Errno::EPERM) => bail!(
            "{flag}: this process may not choose {linux} for its sockets (not in net.ipv4.tcp_allowed_congestion_control, and no CAP_NET_ADMIN): run as root, add {linux} to that sysctl, or choose another --congestion"
        ),
        Err(Errno::ENOENT) => bail!(
            "{flag}: this kernel has no tcp_{linux}: load it (modprobe tcp_{linux}) or choose another --congestion"
        ),
        Err(e) => bail!("{flag}: the kernel refused TCP_CONGESTION {linux}: {e}"),
    }
}

/// The socket loops' buffers for `plan`: of the run's buffer size (`-b`),
/// as a socket loop of its own would use, but no bigger than what a
/// socket holds, so that a byte counts as sent or received about when the
/// kernel's socket took it or gave it: at a window's edge the two ends
/// disagree by what the sockets hold, not by `-b`.
///
/// The send buffer holds what a write's socket did not take, and the
/// handler counts a byte as sent once `send` took it: at most the
/// library's default (256 KiB), whatever `-b`, so that its memory is that
/// much per connection, not `-b`. The handler's writes are of the space
/// it offers (`Tx::pump`), at most that much each: a write of `-b` would
/// be counted when it returns, and the kernel takes more than its socket
/// buffer in one `write(2)` while the peer's acknowledgements come in
/// (measured: sender and receiver 10-15 % apart with `-b 1024m` over a
/// test bed's veth, 2 % apart with the writes so bounded).
///
/// The receive buffer is read into until the socket has no more, and
/// counted then: no bigger than a socket's receive buffer can grow
/// (`net.ipv4.tcp_rmem`'s maximum), so that no read is shorter than
/// `-b` would make it (a read returns what the socket holds at most) and
/// the bytes read and not yet counted are a socket's worth at most.
fn limits(plan: &Plan) -> Limits {
    let size = plan.params.buffer.max(plan.params.msg_size);
    let default = Limits::default();
    Limits {
        rx_buffer: size.min(socket_rx_max()),
        tx_buffer: size.min(default.tx_buffer),
        ..default
    }
}

/// Linux's default `net.ipv4.tcp_rmem` maximum (6 MiB), where the
/// sysctl cannot be read.
const TCP_RMEM_MAX: usize = 6 << 20;

/// The most a TCP socket's receive buffer grows to here (the third field
/// of `net.ipv4.tcp_rmem`, this network namespace's).
fn socket_rx_max() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .ok()
        .and_then(|v| v.split_whitespace().nth(2)?.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(TCP_RMEM_MAX)
}

/// Starts one socket loop per plan thread (listening on `listen_on`, the
/// receiver's address, on every data port), the handlers `setup` registers
/// placed for `mode`. Binding errors come now, before any sync.
fn start(
    plan: &Plan,
    mode: ExecMode,
    setup: impl HandlerSetup,
    listen_on: Vec<IpAddr>,
    shared: Arc<Shared>,
) -> Result<Workers> {
    check_congestion(plan)?;
    let cores = kernel_cores(&plan.threads)?;
    let placed = Placed::new(mode, &cores, setup, shared)?;
    let core_setup = placed.core_setup.clone();
    let service = KernelService::start(
        KernelConfig {
            cores,
            listen_on,
            limits: limits(plan),
        },
        move |core| core_setup(core),
    )
    .map_err(|e| anyhow!("{e:#}"))?;
    Ok(Workers::custom(Box::new(move || {
        let (_, stopped) = service.stop();
        let total = placed.finish();
        if let Err(e) = stopped {
            bail!("{e:#}");
        }
        total
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::test_plan as plan;

    /// A buffer of `-b` 1 GiB is not one of a connection's user-space
    /// buffers: what the sender counts and the socket has not taken, or
    /// the receiver read and has not counted, is a socket's worth at
    /// most (it was a whole write, a whole GiB, per connection).
    #[test]
    fn user_space_buffers_hold_no_more_than_a_socket() {
        let l = limits(&plan("-s -m 1,*,127.0.0.1 -b 1024m"));
        assert_eq!(l.tx_buffer, Limits::default().tx_buffer);
        assert_eq!(l.rx_buffer, socket_rx_max());
        assert!(l.rx_buffer < 1 << 30, "{l:?}");
        // Smaller ones are the run's, both ways.
        let l = limits(&plan("-r -m 1,*,127.0.0.1 -b 64k"));
        assert_eq!((l.rx_buffer, l.tx_buffer), (64 << 10, 64 << 10));
    }
}
