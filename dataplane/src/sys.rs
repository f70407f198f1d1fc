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

/// Asks the C allocator to hand the free memory of its heaps back to the
/// system (glibc's `malloc_trim(0)`: the whole free pages of every arena,
/// not only the top of the main heap, `madvise(MADV_DONTNEED)`); whether it
/// gave any back. Without glibc, nothing to ask: false.
pub(crate) fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointer and touches only the
        // allocator's own free lists, each arena under its lock; any thread
        // may call it at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

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

/// The errno behind an AF_XDP set-up error (xsk-rs's `SocketCreateError`
/// and `UmemCreateError` print only a fixed reason; the system call's
/// error is their `source`), and its text.
pub(crate) fn setup_errno(e: &(dyn std::error::Error + 'static)) -> (Option<i32>, Option<String>) {
    match e.source() {
        Some(s) => (
            s.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error),
            Some(s.to_string()),
        ),
        None => (None, None),
    }
}

/// What an errno of the AF_XDP set-up (a UMEM's registration, a socket's
/// creation and bind) most likely means, and what to do about it.
pub(crate) fn xsk_setup_hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EOPNOTSUPP) => {
            "the driver has no AF_XDP zero-copy support: bind in copy mode (--bind-mode copy, \
             or auto)"
        }
        Some(libc::EBUSY) => {
            "another AF_XDP socket or XDP program holds that queue: stop it (flowlane status; \
             bpftool net) or serve another queue"
        }
        Some(libc::EINVAL) => {
            "the device has no such queue (ethtool -l shows its channels) or refused the ring \
             sizes: serve fewer queues or other ring sizes (--frames-per-queue)"
        }
        Some(libc::ENOMEM | libc::ENOBUFS) => {
            "not enough lockable memory for the frames: raise the locked-memory limit (ulimit -l; \
             LimitMEMLOCK= under systemd) or use fewer frames per queue (--frames-per-queue)"
        }
        Some(libc::EPERM | libc::EACCES) => {
            "not privileged enough: run as root, or with CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF \
             and CAP_IPC_LOCK"
        }
        Some(libc::ENODEV | libc::ENXIO) => "the interface is gone: check its name (ip link)",
        Some(libc::EAFNOSUPPORT) => {
            "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): run on a kernel with them"
        }
        _ => {
            "check the interface and its queues (ethtool -l) and the privileges (root, or \
             CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK)"
        }
    }
}

/// `SIOCETHTOOL`: include/uapi/linux/sockios.h.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETH_RXFH_INDIR_NO_CHANGE`: include/uapi/linux/ethtool.h.
const ETH_RXFH_INDIR_NO_CHANGE: u32 = 0xffff_ffff;

/// The ethtool commands that [`ethtool_ioctl`] passes to the kernel (RSS,
/// the hashed fields, the driver's name); the values are include/uapi/linux/ethtool.h's `ETHTOOL_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EthtoolCmd {
    /// `ETHTOOL_GDRVINFO` (0x03, `struct ethtool_drvinfo`, 196 bytes): the
    /// driver's name and bus.
    GetDrvInfo = 0x03,
    /// `ETHTOOL_GRXFH` (0x29, `struct ethtool_rxnfc`): the fields RSS hashes
    /// for one flow type.
    GetRxFlowHash = 0x29,
    /// `ETHTOOL_GRXRINGS` (0x2d, `struct ethtool_rxnfc`): the receive rings.
    GetRxRings = 0x2d,
    /// `ETHTOOL_GRXFHINDIR` (0x38, `struct ethtool_rxfh_indir`).
    GetRxfhIndir = 0x38,
    /// `ETHTOOL_SRXFHINDIR` (0x39, `struct ethtool_rxfh_indir`).
    SetRxfhIndir = 0x39,
    /// `ETHTOOL_GRSSH` (0x46, `struct ethtool_rxfh`): key and table.
    GetRssh = 0x46,
    /// `ETHTOOL_SRSSH` (0x47, `struct ethtool_rxfh`): key and/or table.
    SetRssh = 0x47,
}

impl EthtoolCmd {
    /// The command whose number is `cmd`, if it is one of these.
    pub fn from_u32(cmd: u32) -> Option<EthtoolCmd> {
        [
            EthtoolCmd::GetDrvInfo,
            EthtoolCmd::GetRxFlowHash,
            EthtoolCmd::GetRxRings,
            EthtoolCmd::GetRxfhIndir,
            EthtoolCmd::SetRxfhIndir,
            EthtoolCmd::GetRssh,
            EthtoolCmd::SetRssh,
        ]
        .into_iter()
        .find(|&c| c as u32 == cmd)
    }

    /// How many bytes of `data` the kernel may read or write for this
    /// command, from the sizes `data` itself declares (include/uapi/linux/
    /// ethtool.h; net/ethtool/ioctl.c): `struct ethtool_rxnfc` is 192 bytes;
    /// `ethtool_rxfh_indir` is 8 + 4 per entry; `ethtool_rxfh` is 24, then
    /// the table, then the key. `None` when `data` is too short to say, or
    /// for an `ETHTOOL_SRSSH` that resets the table (size 0) and sends a
    /// key: kernels before 6.11 read that key after a table-sized gap. With
    /// `ETH_RXFH_INDIR_NO_CHANGE` every kernel reads the key right after
    /// the header.
    fn extent(self, data: &[u8]) -> Option<usize> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        match self {
            EthtoolCmd::GetDrvInfo => Some(196),
            EthtoolCmd::GetRxRings | EthtoolCmd::GetRxFlowHash => Some(192),
            EthtoolCmd::GetRxfhIndir | EthtoolCmd::SetRxfhIndir => {
                (word(4)? as usize).checked_mul(4)?.checked_add(8)
            }
            EthtoolCmd::GetRssh | EthtoolCmd::SetRssh => {
                let (indir, key) = (word(8)?, word(12)? as usize);
                let indir = match indir {
                    ETH_RXFH_INDIR_NO_CHANGE if self == EthtoolCmd::SetRssh => 0,
                    0 if self == EthtoolCmd::SetRssh => {
                        if key != 0 {
                            return None;
                        }
                        0
                    }
                    n => n as usize,
                };
                indir.checked_mul(4)?.checked_add(24)?.checked_add(key)
            }
        }
    }
}

/// One `SIOCETHTOOL` request on interface `ifname` (an `AF_INET` datagram
/// socket carries it, as for the ethtool command): `data` is the command's
/// struct as include/uapi/linux/ethtool.h lays it out, its first `u32` one
/// of [`EthtoolCmd`]; the kernel reads it and writes its answer into it.
///
/// # Errors
/// `EINVAL` (before any system call) when `ifname` is empty, has a NUL or
/// does not fit `IFNAMSIZ`, the command is not an [`EthtoolCmd`], or `data`
/// is shorter than the sizes it declares; otherwise the kernel's error
/// (`EOPNOTSUPP`: the driver lacks the operation; `EPERM`: setting needs
/// CAP_NET_ADMIN; `ENODEV`: no such interface).
pub fn ethtool_ioctl(ifname: &str, data: &mut [u8]) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(invalid("interface name does not fit IFNAMSIZ"));
    }
    let cmd = data
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .and_then(EthtoolCmd::from_u32)
        .ok_or_else(|| invalid("not an ethtool command flowlane sends"))?;
    match cmd.extent(data) {
        Some(n) if n <= data.len() => {}
        _ => return Err(invalid("ethtool buffer shorter than the sizes it declares")),
    }
    // SAFETY: socket(2) takes no pointers; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor socket(2) just returned, owned by no one
    // else; OwnedFd closes it once.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain old data (integers, arrays, a union of
    // those and pointers); all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data.as_mut_ptr().cast();
    // SAFETY: `ifr` is a live ifreq whose NUL-terminated name fits
    // IFNAMSIZ and whose data pointer is `data`, alive and exclusively
    // borrowed for the call; the kernel touches at most `extent(data)`
    // bytes of it (checked above against `data.len()`) for these commands.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod ethtool_tests {
    use super::*;

    fn refused(ifname: &str, data: &mut [u8]) -> bool {
        matches!(ethtool_ioctl(ifname, data), Err(e) if e.kind() == std::io::ErrorKind::InvalidInput)
    }

    #[test]
    fn buffers_shorter_than_they_declare_never_reach_the_kernel() {
        let cmd = |c: EthtoolCmd| (c as u32).to_ne_bytes();
        // ethtool_rxnfc is 192 bytes.
        let mut b = vec![0u8; 191];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::GetRxRings));
        assert!(refused("lo", &mut b));
        // ethtool_rxfh_indir declaring 4 entries in room for 3.
        let mut b = vec![0u8; 8 + 12];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::GetRxfhIndir));
        b[4..8].copy_from_slice(&4u32.to_ne_bytes());
        assert!(refused("lo", &mut b));
        // ethtool_rxfh: 2 entries and a 4-byte key need 36 bytes.
        let mut b = vec![0u8; 35];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::GetRssh));
        b[8..12].copy_from_slice(&2u32.to_ne_bytes());
        b[12..16].copy_from_slice(&4u32.to_ne_bytes());
        assert!(refused("lo", &mut b));
        // A key with a table reset (size 0): read at different offsets by
        // old and new kernels.
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::SetRssh));
        b[12..16].copy_from_slice(&4u32.to_ne_bytes());
        assert!(refused("lo", &mut b));
        // A key with the table unchanged: right after the header.
        let mut b = vec![0u8; 28];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::SetRssh));
        b[8..12].copy_from_slice(&ETH_RXFH_INDIR_NO_CHANGE.to_ne_bytes());
        b[12..16].copy_from_slice(&4u32.to_ne_bytes());
        assert_eq!(EthtoolCmd::SetRssh.extent(&b), Some(28));
        // Sizes that overflow, unknown commands, bad names.
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::GetRssh));
        b[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(refused("lo", &mut b));
        let mut b = vec![0u8; 256];
        b[..4].copy_from_slice(&1u32.to_ne_bytes()); // ETHTOOL_GSET
        assert!(refused("lo", &mut b));
        let mut b = vec![0u8; 192];
        b[..4].copy_from_slice(&cmd(EthtoolCmd::GetRxRings));
        assert!(refused("", &mut b));
        assert!(refused("a-name-longer-than-ifnamsiz", &mut b));
        assert!(refused("l\0o", &mut b));
        assert!(refused("lo", &mut []));
    }

    #[test]
    fn a_fitting_request_reaches_the_kernel() {
        // Loopback has no RSS: the kernel's answer, not the guard's.
        let mut b = vec![0u8; 192];
        b[..4].copy_from_slice(&(EthtoolCmd::GetRxRings as u32).to_ne_bytes());
        let e = ethtool_ioctl("lo", &mut b).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        assert_eq!(EthtoolCmd::from_u32(0x47), Some(EthtoolCmd::SetRssh));
        assert_eq!(EthtoolCmd::from_u32(0x48), None);
    }
}

/// An error as xsk-rs makes them, for tests: a fixed reason, the system
/// call's error as its source.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct XskRsError(pub &'static str, pub std::io::Error);

#[cfg(test)]
impl std::fmt::Display for XskRsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
impl std::error::Error for XskRsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.1)
    }
}

#[cfg(test)]
mod hint_tests {
    use super::*;

    #[test]
    fn each_errno_gets_its_own_hint() {
        let hint = |e: i32| xsk_setup_hint(Some(e));
        // The review's case: zero-copy on veth is EOPNOTSUPP, not a queue
        // or a socket in the way.
        assert!(hint(libc::EOPNOTSUPP).contains("no AF_XDP zero-copy support"));
        assert!(hint(libc::EOPNOTSUPP).contains("--bind-mode copy"));
        assert!(!hint(libc::EOPNOTSUPP).contains("queue"));
        assert!(hint(libc::EBUSY).contains("holds that queue"));
        assert!(hint(libc::EINVAL).contains("no such queue"));
        assert!(hint(libc::EINVAL).contains("ring sizes"));
        for e in [libc::ENOMEM, libc::ENOBUFS] {
            assert!(hint(e).contains("locked-memory limit"), "{e}");
        }
        for e in [libc::EPERM, libc::EACCES] {
            assert!(hint(e).contains("privileged"), "{e}");
        }
        assert!(hint(libc::ENODEV).contains("interface is gone"));
        assert!(hint(libc::EAFNOSUPPORT).contains("CONFIG_XDP_SOCKETS"));
        // No errno, or one not listed: what to check.
        assert!(xsk_setup_hint(None).starts_with("check"));
        assert!(hint(libc::EIO).starts_with("check"));
        let all = [
            libc::EOPNOTSUPP,
            libc::EBUSY,
            libc::EINVAL,
            libc::ENOMEM,
            libc::EPERM,
            libc::ENODEV,
            libc::EAFNOSUPPORT,
            libc::EIO,
        ];
        for e in all {
            assert_eq!(hint(e).lines().count(), 1, "{e}");
        }
        let distinct: std::collections::BTreeSet<_> = all.iter().map(|&e| hint(e)).collect();
        assert_eq!(distinct.len(), all.len());
    }

    #[derive(Debug)]
    struct Wrapped(Option<std::io::Error>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a fixed reason")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.0.as_ref().map(|e| e as _)
        }
    }

    #[test]
    fn the_errno_comes_from_the_source() {
        let e = Wrapped(Some(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
        let (errno, text) = setup_errno(&e);
        assert_eq!(errno, Some(libc::EOPNOTSUPP));
        assert!(text.unwrap().contains("os error 95"));
        assert_eq!(setup_errno(&Wrapped(None)), (None, None));
    }
}
