//! libFuzzer entry for [`flowlane_dataplane_fuzz::rx_frames_target`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| flowlane_dataplane_fuzz::rx_frames_target(data));
