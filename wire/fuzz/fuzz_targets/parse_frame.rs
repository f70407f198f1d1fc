//! libFuzzer entry for [`flowlane_wire_fuzz::parse_frame_target`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| flowlane_wire_fuzz::parse_frame_target(data));
