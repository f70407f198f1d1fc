//! What the steering program costs a frame, by kind of frame: each frame
//! run a million times through `BPF_PROG_TEST_RUN` (the kernel times the
//! program alone, JIT-compiled, with no driver), best of five rounds. An
//! ignored test that prints its figures and asserts none:
//! `scripts/xdp-cost.sh` runs it on this build's program and on programs
//! built from other revisions (`FL_STEER_OBJ`: an object file, whose maps
//! must be laid out as this build's), for figures before and after a change.

use std::mem::MaybeUninit;
use std::time::Duration;

use libbpf_rs::{Object, ObjectBuilder, ProgramInput};

use super::frames::*;
use super::{load, LocalAddress, Maps};
use crate::skel::xdp_steer::XdpSteerSkel;
use libbpf_rs::skel::Skel;

/// Runs of each frame in one round.
const REPEAT: u32 = 1_000_000;
/// Rounds of each frame; the fastest one counts.
const ROUNDS: usize = 5;

/// The program measured: this build's, or one loaded from a file.
enum Measured {
    Built(Box<XdpSteerSkel<'static>>),
    File(Object),
}

impl Measured {
    fn object(&self) -> &Object {
        match self {
            Measured::Built(skel) => skel.object(),
            Measured::File(obj) => obj,
        }
    }

    fn object_mut(&mut self) -> &mut Object {
        match self {
            Measured::Built(skel) => skel.object_mut(),
            Measured::File(obj) => obj,
        }
    }

    /// The verdict on `frame` and the kernel's mean time a run over
    /// `repeat` runs.
    fn run(&mut self, frame: &[u8], repeat: u32) -> (u32, Duration) {
        let prog = self
            .object_mut()
            .progs_mut()
            .find(|p| p.name() == "flowlane_steer")
            .expect("the object has the program flowlane_steer");
        let input = ProgramInput {
            data_in: Some(frame),
            repeat,
            ..ProgramInput::default()
        };
        let out = prog.test_run(input).expect("running the steering program");
        (out.return_value, out.duration)
    }
}

#[test]
#[ignore = "a measurement: scripts/xdp-cost.sh runs it"]
fn steering_cost_per_frame() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping steering_cost_per_frame: loading a BPF program needs root");
        return;
    }
    let mut measured = match std::env::var_os("FL_STEER_OBJ").filter(|p| !p.is_empty()) {
        Some(path) => {
            let open = ObjectBuilder::default()
                .open_file(&path)
                .unwrap_or_else(|e| panic!("opening {}: {e}", path.to_string_lossy()));
            Measured::File(open.load().expect("loading the program"))
        }
        None => {
            let storage = Box::leak(Box::new(MaybeUninit::uninit()));
            Measured::Built(Box::new(
                load(storage).expect("loading the steering program").0,
            ))
        }
    };
    let maps = Maps::of(measured.object()).expect("the program's maps");
    claim_port(
        &maps,
        LocalAddress::Only(OURS_V4),
        LocalAddress::Only(OURS_V6),
    );
    let frames: [(&str, Vec<u8>); 7] = [
        ("ipv4_tcp_ours", v4(OURS_V4, TCP, 0, PORT)),
        ("ipv4_tcp_other_port", v4(OURS_V4, TCP, 0, UNCLAIMED)),
        ("ipv4_first_fragment_ours", v4(OURS_V4, TCP, MF, PORT)),
        ("ipv6_tcp_ours", v6(OURS_V6, None, TCP, PORT)),
        ("ipv6_tcp_other_port", v6(OURS_V6, None, TCP, UNCLAIMED)),
        (
            "ipv6_dst_opts_tcp_ours",
            v6_chain(OURS_V6, &[options(60)], TCP, PORT),
        ),
        ("arp", {
            let mut f = ethernet(0x0806);
            f.extend_from_slice(&[0; 28]);
            f
        }),
    ];
    for (name, frame) in &frames {
        let (verdict, _) = measured.run(frame, 1);
        let best = (0..ROUNDS)
            .map(|_| measured.run(frame, REPEAT).1)
            .min()
            .unwrap_or_default();
        let verdict = match verdict {
            XDP_PASS => "pass",
            XDP_DROP => "drop",
            _ => "other",
        };
        println!("cost {name:<26} {verdict:<5} {:>4} ns", best.as_nanos());
    }
}
