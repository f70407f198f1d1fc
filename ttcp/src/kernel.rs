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
    let cores = kernel_cores(&plan.threads)?;
    let placed = Placed::new(mode, &cores, setup, shared, flowlane_kernel::pin_to)?;
    let core_setup = placed.core_setup.clone();
    // Reads and writes of the run's buffer size, as a socket loop of its
    // own would make them.
    let limits = Limits {
        rx_buffer: plan.params.buffer.max(plan.params.msg_size),
        tx_buffer: plan.params.buffer.max(plan.params.msg_size),
        ..Limits::default()
    };
    let service = KernelService::start(
        KernelConfig {
            cores,
            listen_on,
            limits,
        },
        move |core| core_setup(core),
    )
    .map_err(|e| anyhow!("{e}"))?;
    Ok(Workers::custom(Box::new(move || {
        let (_, failed) = service.stop();
        let total = placed.finish();
        if let Some(e) = failed {
            bail!("{e}");
        }
        total
    })))
}
