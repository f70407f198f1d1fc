//! flowlane's kernel-socket backend: the application API
//! ([`flowlane_app`]) over Linux TCP sockets, for hosts where AF_XDP is not
//! available and as the baseline every comparison uses.
//!
//! One thread per core, pinned, runs a mio loop ([`KernelCore`]) over its
//! own `SO_REUSEPORT` listener of each port (the kernel spreads incoming
//! connections over the cores by their hash) and the connections it
//! accepted or opened. A handler written against [`flowlane_app::Net`] runs
//! unchanged here and on the AF_XDP data path: each connection has a
//! receive buffer that `peek` shows and a bounded send buffer that makes
//! `send` push back, and readiness becomes the same events
//! (`on_accept`, `on_data`, `on_writable`, `on_peer_closed`, `on_closed`).
//!
//! What a socket backend cannot do: move connections between cores
//! (`on_export` is never called), keep payload in received frames, or
//! report the TCP stack's internal counters (only opens, closes, bytes,
//! resets and refusals are counted).
#![forbid(unsafe_code)]

mod buffer;
mod conn;
mod core;
mod listener;
mod service;
mod tcp_info;

pub use crate::core::{KernelCore, KernelNet, Limits, STOP_LINGER};
pub use listener::{listen_failure, pin_to, reuseport_listener, unprivileged_port_start};
pub use service::{CoreCounters, KernelConfig, KernelService};
