//! Runs every fuzz target body over its seed corpus (and every truncation of each seed), so
//! that the targets and the seeds stay valid without a nightly toolchain.

use std::path::Path;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("dir entry").path();
            let name = p
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&p).expect("seed readable"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn parse_frame_seeds() {
    let seeds = seeds("parse_frame");
    assert!(seeds.len() >= 17, "seed corpus missing: {}", seeds.len());
    let mut parsed = 0;
    for (name, data) in &seeds {
        if flowlane_wire::parse_frame(data).is_ok() {
            parsed += 1;
        } else {
            eprintln!("seed {name} does not parse (allowed, but unexpected)");
        }
        for n in 0..=data.len() {
            flowlane_wire_fuzz::parse_frame_target(&data[..n]);
        }
    }
    assert!(
        parsed * 2 >= seeds.len(),
        "most seeds should be valid frames"
    );
}
