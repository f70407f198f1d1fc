//! The data path's fuzz target, `rx_frames`: its body is
//! [`flowlane_dataplane::tcp_handler::fuzz_rx::rx_frames_target`] (what a queue's TCP
//! endpoint makes of the frames a hostile network hands it; see that module), which the
//! libFuzzer binary in `fuzz_targets/` (feature `libfuzzer`) calls and `tests/seeds.rs` runs
//! over the seed corpus on stable.
#![forbid(unsafe_code)]

pub use flowlane_dataplane::tcp_handler::fuzz_rx::rx_frames_target;
