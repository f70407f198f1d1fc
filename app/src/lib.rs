//! flowlane's application API, the seam every backend implements.
//!
//! An application is a set of [`ConnHandler`]s: one per listener, or one
//! that opens connections from [`ConnHandler::on_start`]. Each callback runs
//! on the core that owns the connection and receives a [`Net`], the
//! per-callback context through which it reads, writes, opens and closes
//! connections of that core. A backend implements [`Net`] over its own
//! stack and feeds that stack's events to a [`Dispatcher`], which maps every
//! connection to the handler that owns it. Three do: the AF_XDP data path
//! (`flowlane-dataplane`'s `TcpService`: flowlane's TCP stack on each
//! receive queue), the kernel-socket backend (`flowlane-kernel`'s
//! `KernelService`: Linux TCP sockets, one loop per core), and queue-pair
//! mode (`flowlane-qp`'s `QueuePairs`: the handlers on application threads
//! of their own, the connections on the cores of either other backend).
//!
//! This crate does no I/O and reads no clock: time comes from the backend
//! through [`Net::now`].
//!
//! ```
//! use flowlane_app::{ConnHandle, ConnHandler, Net};
//!
//! /// Echoes every byte back, closing once the peer has closed.
//! struct Echo {
//!     scratch: Vec<u8>,
//! }
//!
//! impl ConnHandler for Echo {
//!     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         net.echo(conn, &mut self.scratch);
//!     }
//!     fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         net.echo(conn, &mut self.scratch);
//!     }
//! }
//! ```
#![forbid(unsafe_code)]

mod conn_map;
pub mod conn_state;
mod dispatch;
mod handler;
mod handles;
mod net;
mod setup;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use conn_map::ConnMap;
pub use dispatch::{ConnExport, Dispatcher, HandlerId};
pub use flowlane_tcp::{
    CloseReason, CongestionAlgorithm, ConnHandle, ConnInfo, Error, FourTuple, ListenerId, State,
    Stats, SynFilter, Unreachable,
};
pub use handler::{AtStop, ConnHandler, ConnState};
pub use handles::{seen_state, Handles};
pub use net::{Net, Placement, Wake};
pub use setup::{Setup, SetupExt};
