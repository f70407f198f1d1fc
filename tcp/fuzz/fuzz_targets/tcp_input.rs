//! libFuzzer entry for [`flowlane_tcp_fuzz::tcp_input_target`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| flowlane_tcp_fuzz::tcp_input_target(data));
