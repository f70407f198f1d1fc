//! A raw `AF_PACKET` socket bound to one interface, moving whole frames in
//! batches (`recvmmsg`/`sendmmsg`), optionally with a virtio-net header in
//! front of each frame so that GSO/TSO super-frames and partial checksums
//! pass through unchanged (`PACKET_VNET_HDR`, see packet(7) and
//! `include/uapi/linux/virtio_net.h`).
//!
//! The test bed's delay line (`delay_line`) reads and writes frames
//! with it. This module holds the test bed's `unsafe` code (raw socket
//! calls, each block with its `SAFETY:` comment), but for
//! `child::terminate_with_parent`'s `pre_exec`.
// Raw AF_PACKET system calls through libc have no safe wrapper.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A failed system call on a packet socket: what was being done, and the OS
/// error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What the socket was doing.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The kernel dropped a frame as it was read, having no virtio-net
    /// header for its GSO type (`packet_rcv_vnet`: `EINVAL` from
    /// `virtio_net_hdr_from_skb`; SCTP, and UDP before Linux 6.2). The frames
    /// behind it are still there: read on.
    #[error("the kernel dropped a frame it has no virtio-net header for (its GSO type)")]
    UnsupportedGso,
}

/// Result type of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Length of the virtio-net header in front of each frame with
/// [`PacketSocketOptions::vnet_hdr`] (`struct virtio_net_hdr`).
pub const VNET_HDR_LEN: usize = 10;

/// Largest frame (virtio-net header included) a receive buffer must hold:
/// a 64 KiB GSO super-frame plus link header and virtio-net header.
pub const MAX_FRAME: usize = 65_536 + 256;

/// For a frame read with [`PacketSocketOptions::vnet_hdr`] (`frame` starts
/// with the virtio-net header) that is not a GSO super-frame: sets the
/// header's `hdr_len` to the whole frame, so that sending it back builds a
/// linear skb. Without this, `packet_snd` puts all but the link header in a
/// page fragment, and the skb's true size (a 4 KiB page for a 1.5 KB frame)
/// makes the receiving TCP refuse to grow its window (`tcp_grow_window`).
/// Returns whether the header was changed.
pub fn vnet_hdr_linear(frame: &mut [u8]) -> bool {
    const GSO_NONE: u8 = 0;
    if frame.len() <= VNET_HDR_LEN || frame[1] != GSO_NONE {
        return false;
    }
    let Ok(len) = u16::try_from(frame.len() - VNET_HDR_LEN) else {
        return false;
    };
    // virtio_net_hdr { flags: u8, gso_type: u8, hdr_len: le16, .. }; packet
    // sockets use little-endian headers on every host that runs flowlane.
    frame[2..4].copy_from_slice(&len.to_le_bytes());
    true
}

/// For a frame read with [`PacketSocketOptions::vnet_hdr`]: the bytes it
/// takes on the wire (link header onwards). A GSO super-frame is as many
/// frames as it has segments, each with its own copy of the headers
/// (`hdr_len` and `gso_size` as the kernel wrote them in the virtio-net
/// header).
pub fn vnet_wire_len(frame: &[u8]) -> usize {
    const GSO_NONE: u8 = 0;
    let len = frame.len().saturating_sub(VNET_HDR_LEN);
    if frame.len() < VNET_HDR_LEN || frame[1] == GSO_NONE {
        return len;
    }
    let hdr = usize::from(u16::from_le_bytes([frame[2], frame[3]]));
    let seg = usize::from(u16::from_le_bytes([frame[4], frame[5]]));
    if seg == 0 || hdr >= len {
        return len;
    }
    let segments = (len - hdr).div_ceil(seg);
    len + (segments - 1) * hdr
}

/// Options of [`PacketSocket::open`].
#[derive(Debug, Clone, Copy)]
pub struct PacketSocketOptions {
    /// Prefix every frame with a virtio-net header (GSO and checksum state).
    pub vnet_hdr: bool,
    /// Receive buffer in bytes (`SO_RCVBUFFORCE`; needs CAP_NET_ADMIN).
    pub rcvbuf: usize,
    /// Send buffer in bytes (`SO_SNDBUFFORCE`).
    pub sndbuf: usize,
    /// Do not receive the frames this host sends on the interface (in a
    /// fanout group: from Linux 6.2, see `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`;
    /// before, the group still sees what other sockets send).
    pub ignore_outgoing: bool,
    /// Report when the kernel received each frame (`SO_TIMESTAMPNS`), so
    /// that time a frame waited in the receive buffer is not lost.
    pub rx_timestamps: bool,
    /// Join this fanout group in hash mode (`PACKET_FANOUT_HASH`): the
    /// sockets of a group share the interface's frames, each flow going to
    /// one socket, so that several threads can serve one interface without
    /// reordering a flow.
    pub fanout: Option<u16>,
}

impl Default for PacketSocketOptions {
    fn default() -> Self {
        PacketSocketOptions {
            vnet_hdr: false,
            rcvbuf: 4 << 20,
            sndbuf: 4 << 20,
            ignore_outgoing: true,
            rx_timestamps: false,
            fanout: None,
        }
    }
}

/// Kernel counters of the socket since the previous call (they reset on
/// read, see packet(7) `PACKET_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketSocketStats {
    /// Frames received (including dropped ones).
    pub packets: u64,
    /// Frames dropped because the receive buffer was full.
    pub drops: u64,
}

/// What [`PacketSocket::recv_batch`] says about one received frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes received; 0 for a frame cut short because it did not fit.
    pub len: usize,
    /// When the kernel received it (`CLOCK_REALTIME`), with
    /// [`PacketSocketOptions::rx_timestamps`].
    pub kernel_time: Option<std::time::SystemTime>,
}

/// `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` (`include/uapi/linux/if_packet.h`).
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: i32 = 0x4000;

/// Room for one `SCM_TIMESTAMPNS` control message (cmsghdr + timespec,
/// aligned), in u64 words so that the buffer is aligned for cmsghdr.
const CMSG_WORDS: usize = 8;

/// A raw packet socket bound to one interface (all protocols).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn setsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and its size is passed; the kernel only
    // reads it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    })
    .map(drop)
}

impl PacketSocket {
    /// Opens a socket receiving every protocol on `ifindex` (calling thread's
    /// network namespace) and sending there.
    pub fn open(ifindex: u32, opts: PacketSocketOptions) -> Result<PacketSocket> {
        Self::unbound(opts)?.bind(ifindex, opts)
    }

    /// The socket with its options set, not yet bound to a device. It is
    /// opened for no protocol, so that it receives nothing until
    /// [`UnboundSocket::bind`] names the protocols and the device (as libpcap
    /// does): opened for every protocol, it would queue every device's
    /// frames until then, and read them later as if they came from its own.
    fn unbound(opts: PacketSocketOptions) -> Result<UnboundSocket> {
        // SAFETY: plain system call with constant arguments; the result is
        // checked before use.
        let raw =
            check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
                .map_err(open_failure)?;
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let b = fd.as_fd();
        if opts.vnet_hdr {
            setsockopt_int(b, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
                .map_err(io_err("setting PACKET_VNET_HDR"))?;
        }
        if opts.ignore_outgoing {
            setsockopt_int(b, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
                .map_err(io_err("setting PACKET_IGNORE_OUTGOING"))?;
        }
        let clamp = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        setsockopt_int(
            b,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            clamp(opts.rcvbuf),
        )
        .map_err(io_err("setting SO_RCVBUFFORCE (needs CAP_NET_ADMIN)"))?;
        setsockopt_int(
            b,
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            clamp(opts.sndbuf),
        )
        .map_err(io_err("setting SO_SNDBUFFORCE (needs CAP_NET_ADMIN)"))?;
        if opts.rx_timestamps {
            setsockopt_int(b, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
                .map_err(io_err("setting SO_TIMESTAMPNS"))?;
        }
        Ok(UnboundSocket { fd })
    }

    /// Waits up to `timeout` (nanosecond resolution, `ppoll`) for a frame to
    /// read. Returns whether one is there; an interrupted wait returns false.
    pub fn wait_readable(&self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `pfd` and `ts` are live locals; one pollfd is passed; a
        // null signal mask leaves the mask unchanged.
        let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(Error::Io {
                what: "waiting on the packet socket".into(),
                source: e,
            });
        }
        Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
    }

    /// Receives up to `bufs.len()` frames without blocking, frame `i` into
    /// `bufs[i]`, described by `meta[i]` (a frame cut short because it did
    /// not fit has length 0: drop it). Returns how many slots were filled;
    /// 0 when nothing is waiting.
    pub fn recv_batch(&self, bufs: &mut [Vec<u8>], meta: &mut [RecvMeta]) -> Result<usize> {
        let n = bufs.len().min(meta.len()).min(1024);
        if n == 0 {
            return Ok(0);
        }
        let mut iovs: Vec<libc::iovec> = bufs[..n]
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut cmsgs = vec![[0u64; CMSG_WORDS]; n];
        // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for ((m, iov), c) in msgs.iter_mut().zip(iovs.iter_mut()).zip(cmsgs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = std::mem::size_of_val(c);
        }
        // SAFETY: every msghdr points at one iovec over a live, exclusively
        // borrowed buffer of the stated length and at a live control buffer
        // of the stated length; `msgs`, `iovs` and `cmsgs` outlive the call;
        // the kernel writes at most the stated lengths.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return recv_failure(io::Error::last_os_error());
        }
        let got = rc as usize;
        for (out, m) in meta.iter_mut().zip(&msgs).take(got) {
            out.len = if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                0
            } else {
                m.msg_len as usize
            };
            out.kernel_time = kernel_time(&m.msg_hdr);
        }
        Ok(got)
    }

    /// Sends the frames in order, blocking while the send buffer is full.
    /// Returns how many the kernel took; a frame it refuses as invalid
    /// (`EINVAL`, `EMSGSIZE`) is skipped and counted in the second value.
    pub fn send_batch(&self, frames: &[&[u8]]) -> Result<(usize, usize)> {
        let (mut sent, mut refused) = (0, 0);
        while sent + refused < frames.len() {
            let rest = &frames[sent + refused..];
            let n = rest.len().min(1024);
            let mut iovs: Vec<libc::iovec> = rest[..n]
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> =
                // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
                (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: every msghdr points at one iovec over a live frame of
            // the stated length, which the kernel only reads; `msgs` and
            // `iovs` outlive the call. The socket is bound, so no address.
            let rc = unsafe {
                libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, 0)
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) | Some(libc::ENOBUFS) | Some(libc::EAGAIN) => continue,
                    // The first frame is the one refused: skip it.
                    Some(libc::EINVAL) | Some(libc::EMSGSIZE) => refused += 1,
                    _ => {
                        return Err(Error::Io {
                            what: "sending on the packet socket".into(),
                            source: e,
                        })
                    }
                }
            } else {
                sent += rc as usize;
            }
        }
        Ok((sent, refused))
    }

    /// The kernel's receive counters since the previous call.
    pub fn stats(&self) -> Result<PacketSocketStats> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live locals of the sizes passed; the
        // kernel writes at most `len` bytes into `st`.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        })
        .map_err(io_err("reading PACKET_STATISTICS"))?;
        Ok(PacketSocketStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }
}

/// What a failed `recvmmsg` on a packet socket means: nothing waiting (0
/// frames), one frame the kernel dropped ([`Error::UnsupportedGso`]: it is
/// the only `EINVAL` of a packet socket read with valid arguments, whether
/// on that call or kept from the call before, which returned the frames
/// ahead of it), or a failure.
fn recv_failure(e: io::Error) -> Result<usize> {
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR) => Ok(0),
        Some(libc::EINVAL) => Err(Error::UnsupportedGso),
        _ => Err(Error::Io {
            what: "receiving from the packet socket".into(),
            source: e,
        }),
    }
}

/// What a failed `socket(AF_PACKET)` was short of.
fn open_failure(e: io::Error) -> Error {
    let what = match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => {
            "opening an AF_PACKET socket (out of file descriptors: raise the open-file limit, \
             `ulimit -n`, or use fewer lanes)"
        }
        _ => "opening an AF_PACKET socket (needs root or CAP_NET_RAW)",
    };
    Error::Io {
        what: what.into(),
        source: e,
    }
}

/// A packet socket before [`UnboundSocket::bind`]: options set, bound to
/// nothing.
#[derive(Debug)]
struct UnboundSocket {
    fd: OwnedFd,
}

impl UnboundSocket {
    /// Binds the socket to `ifindex` for every protocol, then joins the
    /// fanout group of `opts`, if any. A group with
    /// [`PacketSocketOptions::ignore_outgoing`] ignores outgoing frames too
    /// (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, Linux 6.2; the group's own
    /// hook would otherwise see what other sockets send on the device); an
    /// older kernel refuses the flag and the group is joined without it.
    fn bind(self, ifindex: u32, opts: PacketSocketOptions) -> Result<PacketSocket> {
        let fd = self.fd;
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a live sockaddr_ll and its size is passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(io_err(format!(
            "binding the packet socket to ifindex {ifindex}"
        )))?;
        if let Some(group) = opts.fanout {
            let arg = i32::from(group) | ((libc::PACKET_FANOUT_HASH as i32) << 16);
            let join = |flags: i32| {
                setsockopt_int(
                    fd.as_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_FANOUT,
                    arg | (flags << 16),
                )
            };
            let joined = if opts.ignore_outgoing {
                match join(PACKET_FANOUT_FLAG_IGNORE_OUTGOING) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => join(0),
                    other => other,
                }
            } else {
                join(0)
            };
            joined.map_err(io_err(format!("joining packet fanout group {group}")))?;
        }
        Ok(PacketSocket { fd })
    }
}

/// The `SCM_TIMESTAMPNS` control message of a received message, if any.
fn kernel_time(hdr: &libc::msghdr) -> Option<std::time::SystemTime> {
    if hdr.msg_controllen == 0 || hdr.msg_flags & libc::MSG_CTRUNC != 0 {
        return None;
    }
    // SAFETY: `hdr` is a msghdr the kernel filled by recvmmsg: msg_control
    // points at our live control buffer and msg_controllen is what the
    // kernel wrote, so the CMSG_* walk stays inside it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(hdr) };
    while !c.is_null() {
        // SAFETY: `c` is non-null and inside the control buffer (CMSG_*).
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: `c` is a live cmsghdr inside the control buffer
            // (above); CMSG_DATA only offsets it.
            let data = unsafe { libc::CMSG_DATA(c) };
            // SAFETY: a SCM_TIMESTAMPNS message carries one timespec at
            // `data`; it may be unaligned, hence read_unaligned.
            let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.cast()) };
            let d = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            return std::time::UNIX_EPOCH.checked_add(d);
        }
        // SAFETY: as above; CMSG_NXTHDR returns null past the end.
        c = unsafe { libc::CMSG_NXTHDR(hdr, c) };
    }
    None
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Frames for this crate's root tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A minimum-size frame to `dst` of a local experimental EtherType
    /// (0x88b5), nothing any stack answers; `tag` is its first payload byte.
    pub(crate) fn test_frame(dst: [u8; 6], tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x5e, 0x01]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14] = tag;
        f
    }

    /// Reads frames (without virtio-net headers) until one for which `last`
    /// holds; returns them all. Gives up after a generous bound, so that a
    /// frame that never comes fails the test instead of hanging it.
    pub(crate) fn recv_frames(
        sock: &PacketSocket,
        last: impl Fn(&[u8]) -> bool,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut bufs = vec![vec![0u8; 2048]; 16];
        let mut meta = vec![RecvMeta::default(); 16];
        let mut seen = Vec::new();
        while std::time::Instant::now() < deadline {
            sock.wait_readable(Duration::from_millis(100))?;
            let n = sock.recv_batch(&mut bufs, &mut meta)?;
            for (b, m) in bufs.iter().zip(&meta).take(n) {
                seen.push(b[..m.len].to_vec());
                if last(&b[..m.len]) {
                    return Ok(seen);
                }
            }
        }
        anyhow::bail!("the awaited frame never came (got {} others)", seen.len())
    }

    /// A tap device `name` with virtio-net headers (`IFF_VNET_HDR`), made in
    /// the calling thread's namespace and gone when the returned file is
    /// closed: what is written to the file arrives on the device as if from
    /// a wire, GSO frames too.
    pub(crate) fn tap_with_vnet_hdr(name: &str) -> io::Result<std::fs::File> {
        let tun = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, b) in req
            .ifr_name
            .iter_mut()
            .zip(name.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = b as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as i16;
        // SAFETY: TUNSETIFF reads and writes one ifreq, `req`, a live local.
        check(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
        Ok(tun)
    }

    /// A 3,000-byte UDP datagram over IPv4 to `dst`, behind a virtio-net
    /// header asking for the legacy UDP fragmentation offload
    /// (`VIRTIO_NET_HDR_GSO_UDP`, 1,400-byte pieces): the kernel takes it
    /// from a tap as an `SKB_GSO_UDP` frame, a GSO type that no virtio-net
    /// header describes on the way out.
    pub(crate) fn ufo_frame(dst: [u8; 6]) -> Vec<u8> {
        let payload = 3000;
        let mut f = vec![0u8; VNET_HDR_LEN];
        f[0] = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
        f[1] = 3; // VIRTIO_NET_HDR_GSO_UDP
        f[2..4].copy_from_slice(&42u16.to_le_bytes()); // hdr_len
        f[4..6].copy_from_slice(&1400u16.to_le_bytes()); // gso_size
        f[6..8].copy_from_slice(&34u16.to_le_bytes()); // csum_start: UDP
        f[8..10].copy_from_slice(&6u16.to_le_bytes()); // csum_offset
        f.extend_from_slice(&dst);
        f.extend_from_slice(&[2, 0, 0, 0, 0x5e, 0x01, 0x08, 0x00]);
        let ip_len = (20 + 8 + payload) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0]);
        f[VNET_HDR_LEN + 16..VNET_HDR_LEN + 18].copy_from_slice(&ip_len.to_be_bytes());
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let udp_len = (8 + payload) as u16;
        f.extend_from_slice(&[0x30, 0x39, 0x30, 0x3a]);
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.resize(f.len() + payload, 0xab);
        f
    }

    /// Frames waiting on `sock` now.
    pub(crate) fn waiting(sock: &PacketSocket) -> Result<usize> {
        let mut bufs = vec![vec![0u8; 2048]; 16];
        let mut meta = vec![RecvMeta::default(); 16];
        let mut total = 0;
        loop {
            let n = sock.recv_batch(&mut bufs, &mut meta)?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_without_a_virtio_net_header_is_one_drop_not_a_failure() {
        let os = io::Error::from_raw_os_error;
        assert!(matches!(recv_failure(os(libc::EAGAIN)), Ok(0)));
        assert!(matches!(recv_failure(os(libc::EINTR)), Ok(0)));
        assert!(matches!(
            recv_failure(os(libc::EINVAL)),
            Err(Error::UnsupportedGso)
        ));
        assert!(matches!(
            recv_failure(os(libc::ENETDOWN)),
            Err(Error::Io { .. })
        ));
    }

    /// The kernel's side of the classification: a GSO frame no virtio-net
    /// header describes is one `EINVAL` read, and the frame behind it is
    /// read next.
    #[test]
    fn a_frame_without_a_virtio_net_header_is_reported_and_reading_goes_on() {
        use crate::netns::scratch::{root_or_skip, ScratchNs};
        use std::io::Write;
        use testing::{tap_with_vnet_hdr, test_frame, ufo_frame};
        if !root_or_skip("a_frame_without_a_virtio_net_header_is_reported_and_reading_goes_on") {
            return;
        }
        let ns = ScratchNs::new("pg");
        let got = crate::netns::in_netns(&ns.name, || {
            let mut tap = tap_with_vnet_hdr("fltap0")?;
            for args in [
                &["link", "set", "dev", "fltap0", "addrgenmode", "none"][..],
                &["link", "set", "dev", "fltap0", "up"][..],
            ] {
                crate::netns::ip(args)?;
            }
            let idx = nix::net::if_::if_nametoindex("fltap0")?;
            let opts = PacketSocketOptions {
                vnet_hdr: true,
                ..PacketSocketOptions::default()
            };
            let sock = PacketSocket::open(idx, opts)?;
            let dst = [2, 0, 0, 0, 0, 2];
            tap.write_all(&ufo_frame(dst))?;
            let mut plain = vec![0u8; VNET_HDR_LEN];
            plain.extend_from_slice(&test_frame(dst, 7));
            tap.write_all(&plain)?;
            let mut bufs = vec![vec![0u8; MAX_FRAME]; 4];
            let mut meta = vec![RecvMeta::default(); 4];
            let mut seen = Vec::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while seen.len() < 2 && std::time::Instant::now() < deadline {
                sock.wait_readable(Duration::from_millis(100))?;
                match sock.recv_batch(&mut bufs, &mut meta) {
                    Err(Error::UnsupportedGso) => seen.push(None),
                    r => {
                        let n = r?;
                        seen.extend(meta[..n].iter().map(|m| Some(m.len)));
                    }
                }
            }
            Ok(seen)
        })
        .unwrap();
        assert_eq!(got, [None, Some(VNET_HDR_LEN + 60)]);
    }

    #[test]
    fn out_of_descriptors_is_not_called_a_privilege_problem() {
        for errno in [libc::EMFILE, libc::ENFILE] {
            let e = open_failure(io::Error::from_raw_os_error(errno)).to_string();
            assert!(e.contains("open-file limit") && !e.contains("root"), "{e}");
        }
        let e = open_failure(io::Error::from_raw_os_error(libc::EPERM)).to_string();
        assert!(e.contains("CAP_NET_RAW"), "{e}");
    }

    #[test]
    fn small_frames_are_made_linear_and_gso_frames_kept() {
        let mut f = vec![0u8; VNET_HDR_LEN + 60];
        assert!(vnet_hdr_linear(&mut f));
        assert_eq!(u16::from_le_bytes([f[2], f[3]]), 60);
        let mut g = vec![0u8; VNET_HDR_LEN + 9000];
        g[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        g[2..4].copy_from_slice(&66u16.to_le_bytes());
        assert!(!vnet_hdr_linear(&mut g));
        assert_eq!(u16::from_le_bytes([g[2], g[3]]), 66);
        assert!(!vnet_hdr_linear(&mut [0u8; 4]));
    }

    #[test]
    fn wire_length_counts_every_segment_of_a_gso_frame() {
        let f = vec![0u8; VNET_HDR_LEN + 1514];
        assert_eq!(vnet_wire_len(&f), 1514);
        // 66 header bytes and 4,000 payload bytes cut in 1,448: 3 segments.
        let mut g = vec![0u8; VNET_HDR_LEN + 66 + 4000];
        g[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        g[2..4].copy_from_slice(&66u16.to_le_bytes());
        g[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(vnet_wire_len(&g), 3 * 66 + 4000);
        assert_eq!(vnet_wire_len(&[0u8; 4]), 0);
    }

    #[test]
    fn frames_before_bind_are_not_queued() {
        use crate::netns::scratch::{pin_to_one_cpu, root_or_skip, ScratchNs};
        use testing::{recv_frames, test_frame, waiting};
        if !root_or_skip("frames_before_bind_are_not_queued") {
            return;
        }
        let ns = ScratchNs::new("ps");
        ns.veth("busy0", "busy1");
        ns.veth("quiet0", "quiet1");
        let queued = crate::netns::in_netns(&ns.name, || {
            pin_to_one_cpu()?;
            let idx = |d: &str| nix::net::if_::if_nametoindex(d).map_err(anyhow::Error::from);
            let opts = PacketSocketOptions::default();
            let tx = PacketSocket::open(idx("busy0")?, opts)?;
            let witness = PacketSocket::open(idx("busy1")?, opts)?;
            let target = PacketSocket::unbound(opts)?;
            let frames: Vec<Vec<u8>> = (0..8).map(|i| test_frame([2, 0, 0, 0, 0, 9], i)).collect();
            let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            tx.send_batch(&refs)?;
            // Every listener on busy1 has them once the witness has the last.
            recv_frames(&witness, |f| f[14] == 7)?;
            let target = target.bind(idx("quiet0")?, opts)?;
            Ok(waiting(&target)?)
        })
        .unwrap();
        assert_eq!(queued, 0, "frames of another device waited on the socket");
    }

    #[test]
    fn a_fanout_group_ignores_outgoing_frames() {
        use crate::netns::scratch::{pin_to_one_cpu, root_or_skip, ScratchNs};
        use testing::{recv_frames, test_frame, waiting};
        if !root_or_skip("a_fanout_group_ignores_outgoing_frames") {
            return;
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(['.', '-'])
            .map(|n| n.parse::<u32>().unwrap_or(0));
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (6, 2) {
            eprintln!(
                "skipping a_fanout_group_ignores_outgoing_frames: kernel {} has no \
                 PACKET_FANOUT_FLAG_IGNORE_OUTGOING (6.2)",
                release.trim()
            );
            return;
        }
        let ns = ScratchNs::new("pf");
        ns.veth("line0", "line1");
        let queued = crate::netns::in_netns(&ns.name, || {
            pin_to_one_cpu()?;
            let idx = |d: &str| nix::net::if_::if_nametoindex(d).map_err(anyhow::Error::from);
            let group = PacketSocketOptions {
                fanout: Some((std::process::id() & 0xffff) as u16),
                ..PacketSocketOptions::default()
            };
            let lanes = [
                PacketSocket::open(idx("line1")?, group)?,
                PacketSocket::open(idx("line1")?, group)?,
            ];
            // Another socket sends on the group's device.
            let tx = PacketSocket::open(idx("line1")?, PacketSocketOptions::default())?;
            let witness = PacketSocket::open(idx("line0")?, PacketSocketOptions::default())?;
            let frames: Vec<Vec<u8>> = (0..8).map(|i| test_frame([2, 0, 0, 0, 0, 9], i)).collect();
            let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            tx.send_batch(&refs)?;
            recv_frames(&witness, |f| f[14] == 7)?;
            Ok(waiting(&lanes[0])? + waiting(&lanes[1])?)
        })
        .unwrap();
        assert_eq!(queued, 0, "the group read frames sent on its device");
    }
}
