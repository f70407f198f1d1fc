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
//!
//! A handler that reads messages (lines, headers) cannot wait in
//! [`Net::peek`] for a whole one: `peek` shows one contiguous piece (on
//! flowlane's TCP one segment's payload, in queue-pair mode one buffer),
//! and [`ConnHandler::on_data`] comes again only after a read. It keeps a
//! partial message in a buffer of its own and reads on; here, in a slab
//! slot that the connection's user-data word names, freed in `on_closed`
//! (where the word is still readable). A whole line in one piece is parsed
//! in place, copied nowhere:
//!
//! ```
//! use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Net};
//!
//! /// Answers each line with its length in bytes.
//! #[derive(Default)]
//! struct LineLengths {
//!     partial: Vec<Vec<u8>>, // by user-data word - 1
//!     free: Vec<usize>,
//! }
//!
//! impl ConnHandler for LineLengths {
//!     fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         let slot = self.free.pop().unwrap_or_else(|| {
//!             self.partial.push(Vec::new());
//!             self.partial.len() - 1
//!         });
//!         let _ = net.set_user_data(conn, slot as u64 + 1);
//!     }
//!     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         let Ok(word @ 1..) = net.user_data(conn) else { return };
//!         let partial = &mut self.partial[word as usize - 1];
//!         // A reply needs room: with none, read on at `on_writable`.
//!         while net.send_space(conn).unwrap_or(0) >= 24 {
//!             let Ok(piece) = net.peek(conn) else { break };
//!             if piece.is_empty() {
//!                 break;
//!             }
//!             let Some(end) = piece.iter().position(|&b| b == b'\n') else {
//!                 if partial.len() + piece.len() > 4096 {
//!                     let _ = net.abort(conn); // no line is that long
//!                     return;
//!                 }
//!                 partial.extend_from_slice(piece); // the line goes on
//!                 let n = piece.len();
//!                 let _ = net.consume(conn, n);
//!                 continue;
//!             };
//!             let len = partial.len() + end;
//!             partial.clear();
//!             let _ = net.consume(conn, end + 1);
//!             let _ = net.send(conn, format!("{len}\n").as_bytes());
//!         }
//!         if net.send_space(conn).unwrap_or(0) < 24 {
//!             net.want_writable(conn);
//!         } else if net.is_eof(conn) {
//!             let _ = net.close(conn);
//!         }
//!     }
//!     fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         self.on_data(net, conn);
//!     }
//!     fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
//!         self.on_data(net, conn);
//!     }
//!     fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, _: CloseReason) {
//!         if let Ok(word @ 1..) = net.user_data(conn) {
//!             self.partial[word as usize - 1].clear();
//!             self.free.push(word as usize - 1);
//!         }
//!     }
//! }
//! ```
//!
//! The same handler runs on every backend and in either model: a whole
//! program, a line key-value server on kernel sockets or queue-pair mode,
//! is `flowlane-apps`' example `kv` (`cargo run -p flowlane-apps --example
//! kv -- --help`).
#![forbid(unsafe_code)]

mod conn_map;
pub mod conn_state;
mod dispatch;
mod handler;
mod handles;
mod net;
mod setup;
mod start;
mod stop;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use conn_map::ConnMap;
pub use dispatch::{ConnExport, Dispatcher, HandlerId};
pub use flowlane_tcp::{
    CloseReason, CongestionAlgorithm, ConnHandle, ConnInfo, Error, FourTuple, ListenerId, State,
    SynFilter, Unreachable,
};
// The stack's counters, in its own terms (`Stack` methods, `Config`
// fields, which an application does not have): a re-export, not inlined,
// so that those pages are read in `flowlane_tcp`'s docs where their links
// resolve.
#[doc(no_inline)]
pub use flowlane_tcp::Stats;
pub use handler::{AtStop, ConnHandler, ConnState};
pub use handles::{seen_state, Handles};
pub use net::{Net, Placement, Wake};
pub use setup::{IntoSetupResult, Setup, SetupError, SetupExt};
pub use start::{StartError, StartErrorKind};
pub use stop::{StopError, StopErrorKind, Worker};
