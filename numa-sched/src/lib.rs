//! flowlane's placement policy: snapshots in, plans out, no side effects.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod indirection;
pub mod toeplitz;

pub use error::{Error, Result};
