//! Who uses a bed: the flowlane services (and the bed's own tools) with a
//! thread in one of its two network namespaces, and stopping them.
//!
//! The kernel is the registry: a service on a bed runs inside the bed's
//! namespace (`--bed` re-executes it there; `ip netns exec flowlane-NAME
//! flowlane udp-echo` puts it there directly), and the bed's own tools (the
//! delay line, the rx benchmark's generator) run threads in the far side's
//! namespace. So a bed's users are found by comparing each thread's
//! `/proc/PID/task/TID/ns/net` with the bed's `/run/netns` entries, keeping
//! processes that run one of flowlane's programs (`flowlane`, `flowlane-*`),
//! hold an AF_XDP socket (a data path built on flowlane's libraries, its
//! program named as its author chose: what it holds, the bed's queues,
//! tells it, not its name) or run flowlane's data-path threads
//! (`flowlane-q<N>`, `flowlane_dataplane::cpu_time::worker_thread_name`: a
//! kernel-socket service built on the libraries holds no AF_XDP socket,
//! but its cores are named so): no entry to create on start or forget on
//! exit, nothing stale after a SIGKILL, and no dependency of the data path
//! on the bed. Shells and kernel tools (iperf3, nc, a client's script) in
//! the namespaces are not users: they hold nothing of the bed's but
//! addresses, and go on (or fail) without it; the calling process never is
//! one.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use flowlane_dataplane::iface::Process;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::proc_stat::start_ticks;
use crate::state::{namespaces, validate_name};

/// How long [`stop_users`] waits after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A process using a bed: one of flowlane's programs, or one that holds an
/// AF_XDP socket there or runs flowlane's data-path threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BedUser {
    /// The process (pid and short command line).
    pub process: Process,
    /// Its start time (clock ticks since boot), so that a reused pid is not
    /// taken for it.
    start: u64,
}

impl std::fmt::Display for BedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.process.fmt(f)
    }
}

/// `users` as one phrase: `pid 1 (flowlane ...), pid 2 (...)`.
pub fn list(users: &[BedUser]) -> String {
    users
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The processes (other than this one) with a thread in bed `name`'s
/// namespaces that run one of flowlane's programs, hold an AF_XDP socket or
/// run flowlane's data-path threads; none when the bed is not up.
pub fn users(name: &str) -> Result<Vec<BedUser>> {
    validate_name(name)?;
    let (ns, peer_ns) = namespaces(name);
    let bed: Vec<(u64, u64)> = [ns, peer_ns]
        .iter()
        .filter_map(|n| std::fs::metadata(std::path::Path::new("/run/netns").join(n)).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    if bed.is_empty() {
        return Ok(Vec::new());
    }
    let own = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Ok(Vec::new());
    };
    let mut found: Vec<BedUser> = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            pid != own
                && in_namespaces(pid, &bed)
                && (is_flowlane(pid) || holds_xdp_socket(pid) || runs_workers_in(pid, &bed))
        })
        .filter_map(|pid| {
            Some(BedUser {
                start: start_ticks(pid)?,
                process: Process::read(pid)?,
            })
        })
        .collect();
    found.sort_by_key(|u| u.process.pid);
    Ok(found)
}

/// Stops bed `name`'s users cleanly: SIGTERM to each, then up to `grace`
/// for them to release what they hold and exit, then SIGKILL to those left.
/// Returns the users it found.
pub fn stop_users(name: &str, grace: Duration) -> Result<Vec<BedUser>> {
    let found = users(name)?;
    for u in &found {
        signal(u, Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while found.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for u in found.iter().filter(|u| alive(u)) {
        signal(u, Signal::SIGKILL);
    }
    // SIGKILL takes effect at once, but the namespace is released when the
    // process is gone: wait for that too (briefly).
    let deadline = Instant::now() + Duration::from_secs(2);
    while found.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(found)
}

fn signal(u: &BedUser, sig: Signal) {
    if alive(u) {
        let _ = kill(Pid::from_raw(u.process.pid as i32), sig);
    }
}

/// Whether the user still runs (not exited, not a zombie, pid not reused).
fn alive(u: &BedUser) -> bool {
    start_ticks(u.process.pid) == Some(u.start)
}

/// Whether `pid` runs one of flowlane's programs (`flowlane`,
/// `flowlane-ttcp`, ...), by the file name of its executable.
fn is_flowlane(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        // A rebuilt binary reads "flowlane (deleted)".
        let name = name.as_deref().unwrap_or("");
        let name = name.strip_suffix(" (deleted)").unwrap_or(name);
        name == "flowlane" || name.starts_with("flowlane-")
    })
}

/// Whether `pid` runs flowlane's data-path threads (an AF_XDP worker or a
/// kernel-socket core, `flowlane-q<N>`) in one of the namespaces `ns`: a
/// service built on flowlane's libraries, whatever its program is called
/// and whichever its backend (not a process whose cores serve elsewhere
/// while another of its threads visits the bed, as a test's client does).
fn runs_workers_in(pid: u32, ns: &[(u64, u64)]) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).any(|t| {
        std::fs::read_to_string(t.path().join("comm"))
            .is_ok_and(|c| flowlane_dataplane::cpu_time::is_worker_thread_name(&c))
            && std::fs::metadata(t.path().join("ns/net"))
                .is_ok_and(|m| ns.contains(&(m.dev(), m.ino())))
    })
}

/// Whether `pid` holds an AF_XDP socket: the data path's, on a bed's
/// interface, whatever the program is called.
fn holds_xdp_socket(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|fd| fd.ok()).any(|fd| {
        let path = fd.path();
        std::fs::read_link(&path).is_ok_and(|to| to.as_os_str().as_bytes().starts_with(b"socket:"))
            && socket_protocol(&path).as_deref() == Some("XDP")
    })
}

/// The protocol of the socket that `fd` (a `/proc/PID/fd/N` link) opens, as
/// the kernel names it: the `system.sockprotoname` attribute sockfs gives
/// every socket (`XDP` for AF_XDP, `TCP`, `UDP`, `UNIX`, ...). None for what
/// is not a socket, or is gone.
fn socket_protocol(fd: &Path) -> Option<String> {
    let mut name = [0u8; 64];
    let n = rustix::fs::getxattr(fd, "system.sockprotoname", &mut name[..]).ok()?;
    let name = name.get(..n)?;
    let name = name.strip_suffix(&[0]).unwrap_or(name);
    Some(String::from_utf8_lossy(name).into_owned())
}

/// Whether any thread of `pid` is in one of the namespaces `ns` (dev, ino).
fn in_namespaces(pid: u32, ns: &[(u64, u64)]) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).any(|t| {
        std::fs::metadata(t.path().join("ns/net")).is_ok_and(|m| ns.contains(&(m.dev(), m.ino())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bed_that_is_not_up_has_no_users() {
        assert!(users("tnosuchbed16").unwrap().is_empty());
        assert!(users("a/b").is_err());
        assert!(stop_users("tnosuchbed16", STOP_GRACE).unwrap().is_empty());
    }

    /// A socket's protocol is read as the kernel names it (what tells an
    /// AF_XDP socket, `XDP`, from the others); a file has none.
    #[test]
    fn a_socket_s_protocol_is_read_by_its_descriptor() {
        use std::os::fd::AsRawFd;
        let fd = |raw: i32| std::path::PathBuf::from(format!("/proc/self/fd/{raw}"));
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(
            socket_protocol(&fd(tcp.as_raw_fd())).as_deref(),
            Some("TCP")
        );
        assert_eq!(
            socket_protocol(&fd(udp.as_raw_fd())).as_deref(),
            Some("UDP")
        );
        assert_eq!(socket_protocol(&fd(file.as_raw_fd())), None);
        assert!(!holds_xdp_socket(std::process::id()));
    }

    #[test]
    fn users_are_listed_in_one_phrase() {
        let u = |pid, cmd: &str| BedUser {
            process: Process {
                pid,
                command: cmd.into(),
            },
            start: 1,
        };
        assert_eq!(
            list(&[u(7, "flowlane udp-echo"), u(9, "flowlane testbed delay")]),
            "pid 7 (flowlane udp-echo), pid 9 (flowlane testbed delay)"
        );
    }
}
