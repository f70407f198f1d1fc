//! The bodies of flowlane-tcp's fuzz targets, as plain functions: the libFuzzer binaries in
//! `fuzz_targets/` (feature `libfuzzer`) call them, and `tests/smoke.rs` runs them over the
//! seed corpus and a seeded pseudo-random set of inputs on stable.
//!
//! `tcp_input`: the input decodes ([`input`]) into a configuration of the stack and its
//! peers, then a sequence of operations: peer segments chosen relative to the live
//! connection's state (in order, retransmitted, out of order, at the window's edge, far
//! away; sane, duplicate, future or far ACKs; timestamps, SACK blocks, PAWS-old TSvals),
//! RSTs, SYNs, new peers and active opens, raw segments with arbitrary flags, options and
//! truncation to any tuple, time passing, and the application's writes, reads, closes,
//! aborts and moves (export/import). The stack starts with a listener and one or two
//! connections established by real handshakes, so that most inputs reach deep states.
//! After every step the harness checks: no panic; every emitted segment, framed as the
//! data path frames it, parses with flowlane-wire and checks; its flags, options, MSS,
//! data (the application's bytes at their offset), ACK (never past what the peer sent,
//! never back) and right window edge (never back) are sane; the stack's counts stay under
//! their caps; every handle works exactly until `Closed`; buffers stay within capacity;
//! and the application reads exactly the peer's stream, in order, ending at its FIN.
//! The peers' data segments are delivered in frames lent to the stack (zero-copy
//! receive, every in-order payload kept when it can be), which the stack must hand back
//! exactly once, and read through them.
#![forbid(unsafe_code)]

mod frames;
mod harness;
pub mod input;
mod peer;

/// Fuzzes a stack with open connections with a sequence of segments, timer runs and
/// application calls decoded from `data` (see the crate documentation); panics on a
/// broken invariant.
pub fn tcp_input_target(data: &[u8]) {
    tcp_input_run(data);
}

/// [`tcp_input_target`], returning the stack's counters at the end (so that the smoke test
/// can show which parts of the stack its inputs reach).
pub fn tcp_input_run(data: &[u8]) -> flowlane_tcp::Stats {
    let mut c = input::Cursor::new(data);
    let mut h = harness::Harness::new(input::Setup::decode(&mut c));
    while let Some(op) = input::Op::decode(&mut c) {
        h.step(op);
    }
    h.finish();
    h.stats()
}
