//! flowlane's queue-pair mode (TOAD's): network cores run the TCP stacks
//! (AF_XDP workers or kernel-socket loops), application threads run the
//! handlers, and per-core queue pairs carry requests in and events out.
//!
//! The application is the same [`flowlane_app::ConnHandler`]s as in run to
//! completion: on its thread it sees a [`flowlane_app::Net`] whose received
//! bytes are buffers the core filled (and gets back once read), whose sends
//! are requests bounded by a per-connection credit that the core's
//! cumulative completions renew (a count per connection, not an event per
//! send), and whose connections are the core's under handles of its own.
//! A thread that reads slowly leaves data in the stack, whose window then
//! closes: back-pressure, not drops. Whatever the number of connections,
//! what a core's relay holds for the threads (received bytes not read,
//! bytes to send its stack has not taken) stays within the core's memory
//! budget (`memory.rs`): past it connections wait their turn, counted
//! ([`QueuePairs::memory`]).
//!
//! Each network core is served by one application thread, one on the
//! core's NUMA node where there is one; a thread may serve several cores.
//! Cores wake their threads through the event queue; threads wake cores
//! through the waker the core's backend gives
//! ([`flowlane_app::Net::waker`]).
#![forbid(unsafe_code)]

mod app_net;
mod app_thread;
mod heartbeat;
mod memory;
mod message;
mod relay;
mod service;

pub use app_thread::AppPort;
pub use memory::RelayMemory;
pub use service::{
    app_thread_name, pin_to, CoreSetupError, QueuePairConfig, QueuePairs, MAX_APP_THREADS,
    STALL_AFTER,
};
