//! The data path's own system calls, in one place: the few the AF_XDP and
//! NUMA crates do not wrap. Each uapi constant cites the kernel header that
//! defines it. (The rings and UMEM themselves are xsk-rs's; the unsafe ring
//! accesses stay in `worker` and `xsk`.)
// Raw system calls through libc.
#![allow(unsafe_code)]

/// `MPOL_BIND`: include/uapi/linux/mempolicy.h (`enum { MPOL_DEFAULT,
/// MPOL_PREFERRED, MPOL_BIND, ... }`).
const MPOL_BIND: libc::c_int = 2;
/// `SOL_XDP`: include/linux/socket.h.
const SOL_XDP: libc::c_int = 283;
/// `XDP_OPTIONS` (getsockopt): include/uapi/linux/if_xdp.h.
const XDP_OPTIONS: libc::c_int = 8;
/// `XDP_OPTIONS_ZEROCOPY` (flag in `struct xdp_options`): include/uapi/linux/if_xdp.h.
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// `set_mempolicy(MPOL_BIND, {node})` for the calling thread.
pub(crate) fn bind_memory_to_node(node: u32) -> std::io::Result<()> {
    const BITS: usize = 1024;
    if node as usize >= BITS {
        return Err(std::io::Error::other(format!("node {node} beyond {BITS}")));
    }
    let mut mask = [0u64; BITS / 64];
    mask[node as usize / 64] |= 1 << (node % 64);
    // SAFETY: set_mempolicy reads `maxnode` bits from `mask`, which is a live
    // array of exactly BITS bits; it changes only this thread's policy.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_BIND,
            mask.as_ptr(),
            BITS as libc::c_ulong,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `getsockopt(SOL_XDP, XDP_OPTIONS)` & `XDP_OPTIONS_ZEROCOPY`.
pub(crate) fn bound_zero_copy(fd: std::os::fd::RawFd) -> std::io::Result<bool> {
    let mut opts: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: `opts` and `len` are live locals of the sizes passed; the kernel
    // writes at most `len` bytes into `opts`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            SOL_XDP,
            XDP_OPTIONS,
            (&mut opts as *mut u32).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(opts & XDP_OPTIONS_ZEROCOPY != 0)
}
