//! What an AF_XDP bind that fails says: the system call's error and the
//! cause that errno names, not a guess. Zero-copy on veth (which has no
//! zero-copy support) is "operation not supported", and the line says to
//! bind in copy mode, not that another socket holds the queue.

mod veth;

use flowlane_dataplane::umem::RingSizes;
use flowlane_dataplane::worker::QueueInfo;
use flowlane_dataplane::{BindMode, Dataplane, DataplaneConfig};

use veth::{in_veth, Nop, IFACE};

#[test]
fn zero_copy_on_veth_says_the_driver_lacks_it() {
    in_veth("zero_copy_on_veth_says_the_driver_lacks_it", || {
        let mut cfg = DataplaneConfig::new(IFACE, &[0, 1]);
        cfg.rings = RingSizes::with_frames(RingSizes::MIN_FRAMES).unwrap();
        cfg.bind_mode = BindMode::ZeroCopy;
        let e = Dataplane::start(cfg.clone(), |_: &QueueInfo| Ok::<_, std::io::Error>(Nop))
            .expect_err("zero-copy bound on veth")
            .to_string();
        eprintln!("{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        for needle in [
            "v0 queue 0 in zero-copy mode",
            &format!("os error {}", libc_eopnotsupp()),
            "no AF_XDP zero-copy support",
            "--bind-mode copy",
        ] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        assert!(!e.contains("another socket"), "{e}");
        // Copy mode, as the line says, binds.
        cfg.bind_mode = BindMode::Copy;
        let dp = Dataplane::start(cfg, |_: &QueueInfo| Ok::<_, std::io::Error>(Nop))
            .expect("copy mode on veth");
        dp.stop().expect("no queue failed");
    });
}

/// EOPNOTSUPP on Linux (include/uapi/asm-generic/errno.h: 95).
fn libc_eopnotsupp() -> i32 {
    95
}
