//! Builds flowlane's BPF programs with clang and generates their libbpf-rs
//! skeletons. The programs use only UAPI headers (no vmlinux.h / CO-RE):
//! XDP and tc programs touch nothing but their context and packet bytes.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// Production programs: always built.
const PRODUCTION: &[(&str, &str)] = &[("xdp_steer", "xdp_steer.skel.rs")];

/// The test bed's programs (emulated RSS NIC, impairment, delay line, the
/// benchmark's traffic generator): built only with the `testbed` feature.
const TESTBED: &[(&str, &str)] = &[
    ("rss_emu", "rss_emu.skel.rs"),
    ("trafficgen", "trafficgen.skel.rs"),
    ("impair", "impair.skel.rs"),
    ("delay_line", "delay_line.skel.rs"),
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("target arch is set by cargo");
    // <asm/types.h> and friends live under the multiarch include directory.
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    let testbed = env::var_os("CARGO_FEATURE_TESTBED").is_some();
    let programs = PRODUCTION.iter().chain(TESTBED.iter().filter(|_| testbed));
    for (name, skel) in programs {
        let src = format!("src/bpf/{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([multiarch.as_str(), "-Isrc/bpf", "-O2", "-g", "-Wall"])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| {
                panic!(
                    "building {src} failed: {e:#}\n\
                     flowlane needs clang and the kernel UAPI headers: run `scripts/setup.sh`"
                )
            });
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=src/bpf/flowlane_common.h");
}
