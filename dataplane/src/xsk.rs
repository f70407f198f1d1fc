//! One AF_XDP socket per receive queue, on its node's shared UMEM.
// xsk-rs socket creation and the socket's descriptor for the XSKMAP.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};

use xsk_rs::config::{BindFlags, Interface, LibxdpFlags, QueueSize, SocketConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::umem::RingSizes;
use crate::{Error, Result};

/// How to bind the socket to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum BindMode {
    /// Zero-copy where the driver offers it, else copy mode (logged).
    #[default]
    Auto,
    /// Copy mode only.
    Copy,
    /// Zero-copy only (fails on drivers without it, such as veth).
    ZeroCopy,
}

/// The rings of one queue's socket and the frames it owns.
#[derive(Debug)]
pub struct QueueSocket {
    /// The receive queue the socket is bound to.
    pub queue: u32,
    /// Whether the bind is zero-copy.
    pub zero_copy: bool,
    pub(crate) umem: Umem,
    pub(crate) tx: TxQueue,
    pub(crate) rx: RxQueue,
    pub(crate) fill: FillQueue,
    pub(crate) comp: CompQueue,
    pub(crate) frames: Vec<FrameDesc>,
    /// The UMEM's length in bytes: a received descriptor must lie in it.
    pub(crate) umem_len: usize,
}

impl QueueSocket {
    /// Creates and binds the socket of `queue` on `ifname`, on `umem`
    /// (`umem_len` bytes, [`NodeUmem::len`](crate::umem::NodeUmem::len)).
    /// The XDP program is flowlane's own (see `flowlane_ebpf::steer`), so
    /// libxdp is told not to load one.
    pub fn bind(
        ifname: &str,
        queue: u32,
        umem: &Umem,
        umem_len: usize,
        frames: Vec<FrameDesc>,
        rings: RingSizes,
        mode: BindMode,
    ) -> Result<QueueSocket> {
        let iface = Interface::new(
            std::ffi::CString::new(ifname)
                .map_err(|_| Error::Setup(format!("bad interface name {ifname:?}")))?,
        );
        let attempt = |zero_copy: bool| {
            let copy_flag = if zero_copy {
                BindFlags::XDP_ZEROCOPY
            } else {
                BindFlags::XDP_COPY
            };
            let config = SocketConfig::builder()
                .rx_queue_size(QueueSize::new(rings.rx).expect("power of two"))
                .tx_queue_size(QueueSize::new(rings.tx).expect("power of two"))
                .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
                .bind_flags(copy_flag | BindFlags::XDP_USE_NEED_WAKEUP)
                .build();
            // SAFETY: XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD is set, as the
            // contract of `Socket::new` requires for a shared UMEM.
            unsafe { Socket::new(config, umem, &iface, queue) }
        };
        let made = match mode {
            BindMode::Copy => attempt(false),
            BindMode::ZeroCopy => attempt(true),
            BindMode::Auto => attempt(true).or_else(|e| {
                let (_, cause) = crate::sys::setup_errno(&e);
                tracing::info!(
                    ifname,
                    queue,
                    "zero-copy bind not available ({}); using copy mode",
                    cause.unwrap_or_else(|| e.to_string())
                );
                attempt(false)
            }),
        };
        let (tx, rx, rings_pair) =
            made.map_err(|e| Error::Setup(bind_error(ifname, queue, mode, &e)))?;
        let (fill, comp) = rings_pair.ok_or_else(|| {
            Error::Setup(format!(
                "{ifname} queue {queue} is already bound by this process"
            ))
        })?;
        // A socket sharing a UMEM inherits the first socket's mode whatever
        // it asked for, so ask the kernel what the bind really is.
        let zero_copy =
            crate::sys::bound_zero_copy(rx.fd().as_raw_fd()).map_err(|e| Error::Io {
                what: format!("reading the XDP options of {ifname} queue {queue}"),
                source: e,
            })?;
        if mode == BindMode::ZeroCopy && !zero_copy {
            return Err(Error::Setup(format!(
                "{ifname} queue {queue}: zero-copy was asked for but the bind is copy mode"
            )));
        }
        Ok(QueueSocket {
            queue,
            zero_copy,
            umem: umem.clone(),
            tx,
            rx,
            fill,
            comp,
            frames,
            umem_len,
        })
    }

    /// The socket's file descriptor, for the XSKMAP.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to `self.rx`'s socket, which lives as
        // long as `self`, and the returned borrow cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.rx.fd().as_raw_fd()) }
    }
}

/// The one line for a socket of `ifname` `queue` that could not be bound
/// in `mode`: xsk-rs's reason, the system call's error (`e`'s source) and
/// what that errno most likely means ([`crate::sys::xsk_setup_hint`]).
fn bind_error(
    ifname: &str,
    queue: u32,
    mode: BindMode,
    e: &(dyn std::error::Error + 'static),
) -> String {
    let (errno, cause) = crate::sys::setup_errno(e);
    let how = match mode {
        BindMode::Auto => "",
        BindMode::Copy => " in copy mode",
        BindMode::ZeroCopy => " in zero-copy mode",
    };
    let cause = cause.map(|c| format!(" ({c})")).unwrap_or_default();
    format!(
        "binding an AF_XDP socket to {ifname} queue {queue}{how} failed: {e}{cause}: {}",
        crate::sys::xsk_setup_hint(errno)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(e: std::io::Error) -> crate::sys::XskRsError {
        crate::sys::XskRsError(
            "non-zero error code returned when creating AF_XDP socket",
            e,
        )
    }

    #[test]
    fn a_bind_error_names_the_errno_and_its_cause() {
        let e = fixed(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        let line = bind_error("xsk0", 0, BindMode::ZeroCopy, &e);
        assert_eq!(line.lines().count(), 1, "{line}");
        for needle in [
            "xsk0 queue 0 in zero-copy mode",
            "os error 95",
            "no AF_XDP zero-copy support",
            "--bind-mode copy",
        ] {
            assert!(line.contains(needle), "{needle:?} in {line}");
        }
        assert!(!line.contains("another socket"), "{line}");
        let e = fixed(std::io::Error::from_raw_os_error(libc::EBUSY));
        let line = bind_error("xsk0", 1, BindMode::Copy, &e);
        assert!(line.contains("in copy mode"), "{line}");
        assert!(line.contains("holds that queue"), "{line}");
    }
}
