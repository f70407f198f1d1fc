//! The packet codec of `flowlane-dataplane`, compiled on its own for fuzzing.
#![forbid(unsafe_code)]

#[path = "../../src/wire/mod.rs"]
pub mod wire;
