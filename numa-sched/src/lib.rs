//! flowlane's placement policy: snapshots in, plans out, no side effects.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
#[cfg(feature = "hwloc")]
mod hwloc;
pub mod indirection;
pub mod irq;
pub mod placement;
pub mod topology;
pub mod toeplitz;

pub use error::{Error, Result};
