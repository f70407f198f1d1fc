//! CPU time and interface counters from `/proc`: the machine's (the `cpu`
//! lines of `/proc/stat`, sampled at each tick), a process's
//! (`/proc/<pid>/stat`), a task's exact time on the CPU (`schedstat`) and a
//! network namespace's interfaces (`/proc/net/dev`): the one parser of each
//! that flowlane-ttcp and the benchmarks share. Parsing is pure; the
//! readers below it read the live system.

use anyhow::{anyhow, bail, Context, Result};
use flowlane_dataplane::cpu_time::schedstat_ns;
use serde::Serialize;

/// Aggregate CPU time from the `cpu` line of `/proc/stat`, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuTimes {
    /// Normal user time.
    pub user: u64,
    /// Niced user time.
    pub nice: u64,
    /// Kernel time (not interrupts).
    pub system: u64,
    /// Idle time.
    pub idle: u64,
    /// Idle waiting for I/O.
    pub iowait: u64,
    /// Hard interrupt time.
    pub irq: u64,
    /// Softirq time (network receive processing on this machine).
    pub softirq: u64,
    /// Time stolen by the hypervisor.
    pub steal: u64,
}

impl CpuTimes {
    /// Busy ticks: everything but idle and iowait.
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }

    /// Ticks the machine's CPUs ran this system's work: busy, less the
    /// time the hypervisor stole (a vCPU that wanted to run while the host
    /// ran something else ran no instruction of ours). What cost figures
    /// divide by: with steal in, a cell's cycles a byte grew with the
    /// host's contention, cell by cell, at random.
    pub fn work(&self) -> u64 {
        self.busy() - self.steal
    }

    /// All ticks.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait
    }

    /// Field-wise `self - earlier` (saturating: counters never go back).
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            nice: self.nice.saturating_sub(earlier.nice),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            iowait: self.iowait.saturating_sub(earlier.iowait),
            irq: self.irq.saturating_sub(earlier.irq),
            softirq: self.softirq.saturating_sub(earlier.softirq),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// `/proc/stat`: the aggregate line and each online CPU's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stat {
    /// The `cpu` line.
    pub all: CpuTimes,
    /// Number of `cpuN` lines (online CPUs).
    pub ncpus: u32,
    /// Each `cpuN` line: N and its times.
    pub cpus: Vec<(u32, CpuTimes)>,
}

impl Stat {
    /// CPU `n`'s times, if it is online.
    pub fn cpu(&self, n: u32) -> Option<CpuTimes> {
        self.cpus.iter().find(|(i, _)| *i == n).map(|(_, t)| *t)
    }
}

/// CPU time of a process from `/proc/<pid>/stat`, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcCpu {
    /// `utime` (field 14).
    pub utime: u64,
    /// `stime` (field 15).
    pub stime: u64,
    /// `num_threads` (field 20).
    pub threads: u64,
}

/// One interface's counters from `/proc/net/dev`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IfCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
}

fn num(s: &str, what: &str) -> Result<u64> {
    s.parse::<u64>()
        .map_err(|_| anyhow!("{what}: {s:?} is not a number"))
}

/// The times of one `cpu` or `cpuN` line (the fields after the name).
fn cpu_times<'a>(fields: impl Iterator<Item = &'a str>) -> Result<CpuTimes> {
    let v: Vec<u64> = fields
        .map(|f| num(f, "/proc/stat cpu"))
        .collect::<Result<_>>()?;
    if v.len() < 4 {
        bail!(
            "/proc/stat: cpu line has {} fields, need at least 4",
            v.len()
        );
    }
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    Ok(CpuTimes {
        user: g(0),
        nice: g(1),
        system: g(2),
        idle: g(3),
        iowait: g(4),
        irq: g(5),
        softirq: g(6),
        steal: g(7),
    })
}

/// Parses `/proc/stat`.
pub fn parse_stat(text: &str) -> Result<Stat> {
    let mut all = None;
    let mut cpus = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(key) = it.next() else { continue };
        if key == "cpu" {
            all = Some(cpu_times(it)?);
        } else if let Some(Ok(n)) = key.strip_prefix("cpu").map(str::parse::<u32>) {
            cpus.push((n, cpu_times(it)?));
        }
    }
    Ok(Stat {
        all: all.ok_or_else(|| anyhow!("/proc/stat: no aggregate cpu line"))?,
        ncpus: cpus.len() as u32,
        cpus,
    })
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parentheses:
/// fields are counted after the last `)`).
pub fn parse_pid_stat(text: &str) -> Result<ProcCpu> {
    let close = text
        .rfind(')')
        .ok_or_else(|| anyhow!("/proc/self/stat: no ')' after the command name"))?;
    // After ")": field 3 (state) is index 0, so field n is index n - 3.
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let get = |n: usize| -> Result<u64> {
        num(
            f.get(n - 3)
                .ok_or_else(|| anyhow!("/proc/self/stat: no field {n}"))?,
            "/proc/self/stat",
        )
    };
    Ok(ProcCpu {
        utime: get(14)?,
        stime: get(15)?,
        threads: get(20)?,
    })
}

/// Parses one interface's line of `/proc/net/dev`.
pub fn parse_net_dev(text: &str, iface: &str) -> Result<IfCounters> {
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != iface {
            continue;
        }
        let v: Vec<u64> = rest
            .split_whitespace()
            .map(|f| num(f, "/proc/net/dev"))
            .collect::<Result<_>>()?;
        if v.len() < 16 {
            bail!("/proc/net/dev: {iface} has {} fields, need 16", v.len());
        }
        return Ok(IfCounters {
            rx_bytes: v[0],
            rx_packets: v[1],
            tx_bytes: v[8],
            tx_packets: v[9],
        });
    }
    bail!("/proc/net/dev: no interface {iface} in this network namespace")
}

/// Nanoseconds per USER_HZ tick (the unit of `/proc/stat` and
/// `/proc/<pid>/stat`).
pub fn ns_per_tick() -> u64 {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)
        .unwrap_or(100) as u64;
    1_000_000_000 / hz
}

/// The start time of a live (non-zombie) process, in USER_HZ ticks since
/// boot, from `/proc/PID/stat`: with the pid, it names one process (a pid
/// given again has a later one).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_ticks(&stat)
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line; None for a zombie
/// (state `Z`) or a malformed line.
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields
    // are counted from the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    // `rest` starts at field 3 (state); starttime is field 22.
    fields.nth(18)?.parse().ok()
}

/// When a live (non-zombie) process started, on the wall clock: its
/// [`start_ticks`] (counted on the boot-time clock) from the moment of
/// boot as the wall clock has it now. As exact as a tick, give or take
/// the wall clock's steps since the process started.
pub fn started_at(pid: u32) -> Option<std::time::SystemTime> {
    let ticks = start_ticks(pid)?;
    let up = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let up = std::time::Duration::new(up.tv_sec() as u64, up.tv_nsec() as u32);
    let booted = std::time::SystemTime::now().checked_sub(up)?;
    booted.checked_add(std::time::Duration::from_nanos(
        ticks.saturating_mul(ns_per_tick()),
    ))
}

/// The machine's `/proc/stat` now.
pub fn read_stat() -> Result<Stat> {
    parse_stat(&std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?)
}

/// Process `pid`'s CPU time (all its threads), in USER_HZ ticks.
pub fn process_cpu(pid: u32) -> Result<ProcCpu> {
    let path = format!("/proc/{pid}/stat");
    parse_pid_stat(&std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?)
}

/// utime + stime of process `pid` (all its threads), in nanoseconds.
pub fn process_cpu_ns(pid: u32) -> Result<u64> {
    let c = process_cpu(pid)?;
    Ok((c.utime + c.stime) * ns_per_tick())
}

/// CPU time (ns, `schedstat`) of every thread of process `pid`, summed
/// (threads that exited are not counted).
pub fn process_runtime_ns(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))?;
    Ok(tasks
        .flatten()
        .filter_map(|t| schedstat_ns(&t.path().join("schedstat")))
        .sum())
}

/// CPU time (ns, `schedstat`) of thread `tid` of process `pid`.
pub fn thread_runtime_ns(pid: u32, tid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    schedstat_ns(std::path::Path::new(&path)).with_context(|| format!("reading {path}"))
}

/// The processes whose command name starts with one of `prefixes` (kernel
/// threads such as `ksoftirqd/0` or `napi/xsk0-0`).
pub fn processes_named(prefixes: &[&str]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            prefixes.iter().any(|p| comm.starts_with(p)).then_some(pid)
        })
        .collect()
}

/// `iface`'s counters in the network namespace `ns` (a bed's namespace
/// name), read from a thread inside it: `/proc/thread-self/net` names the
/// calling thread's namespace.
pub fn if_counters_in(ns: &str, iface: &str) -> Result<IfCounters> {
    let iface = iface.to_string();
    crate::netns::in_netns(ns, move || {
        let text = std::fs::read_to_string("/proc/thread-self/net/dev")
            .context("reading /proc/thread-self/net/dev")?;
        parse_net_dev(&text, &iface)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 10 3 20 2 0 0\n\
cpu0 50 2 25 400 5 1 10 1 0 0\n\
cpu1 50 3 25 400 5 2 10 1 0 0\n\
intr 12345 0 0\nctxt 999\nbtime 1\n";

    const NETDEV: &str = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0\n  \
xsk0: 9000000 6000 0 0 0 0 0 0 120000 2000 0 0 0 0 0 0\n";

    #[test]
    fn start_ticks_are_field_22_and_zombies_have_none() {
        let line = "1234 (flow lane)) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 3 0 98765 1000 200";
        assert_eq!(parse_start_ticks(line), Some(98765));
        let zombie =
            "1234 (flowlane) Z 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 3 0 98765 0 0";
        assert_eq!(parse_start_ticks(zombie), None);
        assert_eq!(parse_start_ticks("garbage"), None);
        // This process is alive and started before now; a child it starts
        // started no earlier.
        assert!(start_ticks(std::process::id()).is_some());
        let me = started_at(std::process::id()).unwrap();
        assert!(me <= std::time::SystemTime::now());
        let mut child = std::process::Command::new("sleep")
            .arg("1")
            .spawn()
            .unwrap();
        let it = started_at(child.id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(it >= me, "{it:?} {me:?}");
    }

    #[test]
    fn stat_aggregate_and_cpus() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.ncpus, 2);
        assert_eq!(s.all.user, 100);
        assert_eq!(s.all.softirq, 20);
        assert_eq!(s.all.steal, 2);
        assert_eq!(s.all.busy(), 100 + 5 + 50 + 3 + 20 + 2);
        assert_eq!(s.all.work(), 100 + 5 + 50 + 3 + 20);
        assert_eq!(s.all.total(), s.all.busy() + 800 + 10);
        assert_eq!(s.cpu(1).map(|c| c.irq), Some(2));
        assert_eq!(s.cpu(2), None);
        let later = CpuTimes { user: 150, ..s.all };
        assert_eq!(later.since(&s.all).user, 50);
        assert_eq!(later.since(&s.all).idle, 0);
    }

    #[test]
    fn stat_rejects_garbage() {
        assert!(parse_stat("intr 1\n").is_err());
        assert!(parse_stat("cpu 1 x 3 4\n").is_err());
        // Old kernels: only 4 fields.
        assert_eq!(parse_stat("cpu 1 2 3 4\n").unwrap().all.idle, 4);
    }

    #[test]
    fn net_dev_line() {
        let c = parse_net_dev(NETDEV, "xsk0").unwrap();
        assert_eq!(
            c,
            IfCounters {
                rx_bytes: 9_000_000,
                rx_packets: 6000,
                tx_bytes: 120_000,
                tx_packets: 2000
            }
        );
        assert_eq!(parse_net_dev(NETDEV, "lo").unwrap().tx_packets, 29);
        let e = parse_net_dev(NETDEV, "eth0").unwrap_err().to_string();
        assert!(e.contains("no interface eth0"), "{e}");
    }

    #[test]
    fn pid_stat_with_odd_command_name() {
        let s = "3449 (my (odd) cmd) R 3433 3433 30520 0 -1 4194304 103 0 0 0 77 12 0 0 20 0 5 0 278538 3133440 383";
        let c = parse_pid_stat(s).unwrap();
        assert_eq!((c.utime, c.stime, c.threads), (77, 12, 5));
    }

    #[test]
    fn live_system_reads() {
        assert!(read_stat().unwrap().ncpus >= 1);
        process_cpu_ns(std::process::id()).unwrap();
        let me = std::process::id();
        assert!(process_runtime_ns(me).unwrap() > 0);
        assert!(thread_runtime_ns(me, me).unwrap() > 0);
        assert!(!processes_named(&["ksoftirqd/"]).is_empty());
        assert!(ns_per_tick() >= 1_000_000);
    }
}
