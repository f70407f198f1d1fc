//! tokio on flowlane: the Rust async ecosystem (hyper, tonic, anything on
//! tokio's `AsyncRead`/`AsyncWrite`) over flowlane's TCP, in queue-pair
//! mode.
//!
//! Network cores (AF_XDP workers, or kernel-socket loops) run the TCP
//! stacks; each application thread runs a current-thread tokio runtime
//! and the application's function for that thread, which takes its
//! [`TcpListener`]s from its [`Local`] and serves what they accept:
//!
//! ```no_run
//! # async fn serve(mut local: flowlane_tokio::Local) {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let listener = local.listener(7).expect("configured port");
//! while let Ok((mut stream, _peer)) = listener.accept().await {
//!     tokio::spawn(async move {
//!         let mut buf = vec![0; 4096];
//!         while let Ok(n) = stream.read(&mut buf).await {
//!             if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
//!                 break;
//!             }
//!         }
//!     });
//! }
//! # }
//! ```
//!
//! Between a thread's streams and its network cores sits a bridge, one of
//! the thread's queue-pair handlers: it moves received bytes into the
//! streams (at most 64 KiB each in the stream and 256 KiB, the queue
//! pair's credit, on the thread ahead of the reader; the rest stays in
//! the core's stack, whose window closes: back-pressure), and hands the
//! streams' writes to the cores (256 KiB at most, the queue pair's
//! credit, ahead of the stack, within the core's send memory; in the
//! stream no more than the queue pair takes, 64 KiB at most: past that
//! writes wait, so that a peer that reads nothing leaves no bytes outside
//! the core's budget). A dropped stream's connection closes lingering
//! (RFC 9112 §9.6): FIN after what it wrote, then what the peer still
//! sends is dropped until the peer's FIN, or [`LINGER`] after the peer
//! acknowledged the last of what it wrote (a reset then, counted, only if
//! the peer sent more after the drop), so that a request left unread does
//! not destroy its response with a reset, however slowly the peer reads
//! it.
//! A task that blocks the thread stalls it: after the queue pairs'
//! `stall_after`, the cores reset its connections, counted, and its
//! streams, wherever they are polled, fail at once (`ConnectionAborted`),
//! as do its opens until it passes again. A panic of the application's
//! function ends its thread (reported by the queue pairs); one of a task
//! it spawned ends that task only ([`start`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod bridge;
mod connector;
mod listener;
mod pipe;
mod runtime;
mod stop;
mod stream;

pub use bridge::{Counters, LINGER};
pub use connector::Connector;
pub use listener::TcpListener;
pub use runtime::{start, AsyncConfig, Local, BACKLOG};
pub use stop::StopSignal;
pub use stream::TcpStream;
