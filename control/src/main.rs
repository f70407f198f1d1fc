//! `flowlane`: the control CLI and daemon.
fn main() {}
