//! Runs the target's body over its seed corpus (and truncations of each seed), so that
//! the target and the seeds stay valid without a nightly toolchain.

use std::path::Path;

#[test]
fn rx_frames_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/rx_frames");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 6, "seed corpus missing: {}", seeds.len());
    for p in &seeds {
        let data = std::fs::read(p).expect("seed readable");
        // Truncations: a seed's steps, fewer at a time (at most 64 of them
        // a seed, so that a long seed does not take the smoke run long).
        let stride = data.len().div_ceil(64).max(1);
        for n in (0..data.len()).step_by(stride).chain([data.len()]) {
            flowlane_dataplane_fuzz::rx_frames_target(&data[..n]);
        }
    }
}

/// Replays one input (a finding of a campaign): `FLOWLANE_FUZZ_INPUT=FILE cargo test -p
/// flowlane-dataplane-fuzz --test seeds replay` (FILE absolute or from the workspace's
/// root; `FLOWLANE_FUZZ_TRACE=1` prints every step); nothing without the variable.
#[test]
fn replay() {
    if let Some(path) = std::env::var_os("FLOWLANE_FUZZ_INPUT") {
        // A relative path from the workspace's root, where scripts/fuzz.sh runs.
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path);
        let data = std::fs::read(&path).expect("input readable");
        flowlane_dataplane_fuzz::rx_frames_target(&data);
    }
}
