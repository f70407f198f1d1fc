//! Readers for the `/proc` and `/sys` counters the NTttcp table needs, relative
//! to a configurable root so that they are unit-tested on fake files.
//!
//! Everything here is parsing only: no clock, no sockets. A [`ProcFs`] with
//! root `/` reads the live system; one with root `/tmp/x` reads `/tmp/x/proc/...`.
//! `/proc/net/*` is per network namespace: read inside a namespace, the
//! interface and TCP counters are that namespace's.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

/// The parsers ttcp shares with the benchmarks: the machine's and a
/// process's CPU time, an interface's counters.
pub use flowlane_testbed::proc_stat::{
    parse_net_dev, parse_pid_stat, parse_stat, CpuTimes, IfCounters, ProcCpu, Stat,
};

/// A `/proc` + `/sys` tree under `root`.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
}

/// TCP counters from the `Tcp:` lines of `/proc/net/snmp` (network namespace wide).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TcpSnmp {
    /// Segments received.
    pub in_segs: u64,
    /// Segments sent (retransmissions excluded).
    pub out_segs: u64,
    /// Segments retransmitted.
    pub retrans_segs: u64,
}

/// CPU time of a group of threads (the data threads of a backend), in USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ThreadsCpu {
    /// Threads that matched.
    pub threads: u64,
    /// Summed `utime`.
    pub utime: u64,
    /// Summed `stime`.
    pub stime: u64,
}

/// The command name of a `/proc/<pid>/task/<tid>/stat` line (between the first
/// `(` and the last `)`).
pub fn stat_comm(text: &str) -> Option<&str> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    (open < close).then(|| &text[open + 1..close])
}

/// The TSC rate and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TscRate {
    /// Ticks per second.
    pub hz: f64,
    /// Which file and field gave it.
    pub source: String,
}

/// Where the interrupt count of an interface comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqSource {
    /// The device's lines in `/proc/interrupts` (a NIC with a PCI/platform device).
    DeviceIrqs,
    /// `NET_RX` softirqs of all CPUs from `/proc/softirqs` (veth, loopback: no hardware IRQ).
    NetRxSoftirqs,
}

impl ProcFs {
    /// The tree under `root` (`/` for the live system).
    pub fn new(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    /// The live system.
    pub fn system() -> ProcFs {
        ProcFs::new("/")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    fn read(&self, rel: &str) -> Result<String> {
        let p = self.path(rel);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    }

    /// `/proc/stat`.
    pub fn stat(&self) -> Result<Stat> {
        parse_stat(&self.read("proc/stat")?)
    }

    /// Sum over all CPUs of the `NET_RX` row of `/proc/softirqs`.
    pub fn net_rx_softirqs(&self) -> Result<u64> {
        parse_softirq_row(&self.read("proc/softirqs")?, "NET_RX")
    }

    /// Sum over all CPUs of the `/proc/interrupts` lines whose description names `dev`
    /// (e.g. `eth0-TxRx-3`, `mlx5_comp2@pci:...` when `dev` is the PCI name).
    pub fn device_interrupts(&self, dev: &str) -> Result<u64> {
        parse_interrupts_for(&self.read("proc/interrupts")?, dev)
    }

    /// `iface`'s counters from `/proc/net/dev`.
    pub fn if_counters(&self, iface: &str) -> Result<IfCounters> {
        parse_net_dev(&self.read("proc/net/dev")?, iface)
    }

    /// `/proc/net/snmp` TCP counters.
    pub fn tcp_snmp(&self) -> Result<TcpSnmp> {
        parse_snmp_tcp(&self.read("proc/net/snmp")?)
    }

    /// `/proc/self/stat` CPU fields.
    pub fn self_cpu(&self) -> Result<ProcCpu> {
        parse_pid_stat(&self.read("proc/self/stat")?)
    }

    /// CPU time of this process's threads whose name (`comm`) starts with
    /// one of `prefixes`, summed from `/proc/self/task/<tid>/stat` (utime,
    /// stime; USER_HZ ticks). `threads` is how many matched.
    pub fn threads_cpu(&self, prefixes: &[&str]) -> Result<ThreadsCpu> {
        let dir = self.path("proc/self/task");
        let mut out = ThreadsCpu::default();
        let rd = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for t in rd.flatten() {
            // A thread may exit between listing and reading: skip it.
            let Ok(text) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            let Some(comm) = stat_comm(&text) else {
                continue;
            };
            if !prefixes.iter().any(|p| comm.starts_with(p)) {
                continue;
            }
            let c = parse_pid_stat(&text)?;
            out.threads += 1;
            out.utime += c.utime;
            out.stime += c.stime;
        }
        Ok(out)
    }

    /// Whether `iface` is backed by a device (`/sys/class/net/<if>/device` exists):
    /// real NICs are, veth and loopback are not.
    pub fn has_device(&self, iface: &str) -> bool {
        self.path(&format!("sys/class/net/{iface}/device")).exists()
    }

    /// The interrupt source to count for `iface`.
    pub fn irq_source(&self, iface: &str) -> IrqSource {
        if self.has_device(iface) {
            IrqSource::DeviceIrqs
        } else {
            IrqSource::NetRxSoftirqs
        }
    }

    /// The interrupt counter for `iface` under `src`.
    pub fn interrupts(&self, iface: &str, src: IrqSource) -> Result<u64> {
        match src {
            IrqSource::NetRxSoftirqs => self.net_rx_softirqs(),
            IrqSource::DeviceIrqs => {
                // Drivers name their vectors after the interface or the PCI device.
                let by_if = self.device_interrupts(iface)?;
                if by_if > 0 {
                    return Ok(by_if);
                }
                let dev = std::fs::read_link(self.path(&format!("sys/class/net/{iface}/device")))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
                match dev {
                    Some(d) => self.device_interrupts(&d),
                    None => Ok(0),
                }
            }
        }
    }

    /// The TSC rate: the kernel's `tsc_khz` where a file exposes it
    /// (`/sys/devices/system/cpu/cpu0/tsc_freq_khz`, present on some kernels),
    /// else `cpu MHz` of `/proc/cpuinfo` when the flags say the TSC is constant
    /// (`constant_tsc`; with `tsc_known_freq` the hypervisor told the kernel the rate).
    pub fn tsc_rate(&self) -> Result<TscRate> {
        let khz_file = "sys/devices/system/cpu/cpu0/tsc_freq_khz";
        if let Ok(s) = self.read(khz_file) {
            if let Ok(khz) = s.trim().parse::<f64>() {
                if khz > 0.0 {
                    return Ok(TscRate {
                        hz: khz * 1e3,
                        source: format!("/{khz_file} (kernel tsc_khz)"),
                    });
                }
            }
        }
        parse_cpuinfo_tsc(&self.read("proc/cpuinfo")?)
    }

    /// The root of this tree.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn num(s: &str, what: &str) -> Result<u64> {
    s.parse::<u64>()
        .map_err(|_| anyhow!("{what}: {s:?} is not a number"))
}

/// Sums one row (e.g. `NET_RX`) of `/proc/softirqs` over all CPUs.
pub fn parse_softirq_row(text: &str, row: &str) -> Result<u64> {
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if it.next().map(|k| k.trim_end_matches(':')) == Some(row) {
            return it.map(|f| num(f, "/proc/softirqs")).sum();
        }
    }
    bail!("/proc/softirqs: no {row} row")
}

/// Sums the per-CPU counts of the `/proc/interrupts` lines whose description
/// (the text after the counts) contains `dev`.
pub fn parse_interrupts_for(text: &str, dev: &str) -> Result<u64> {
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .ok_or_else(|| anyhow!("/proc/interrupts is empty"))?
        .split_whitespace()
        .filter(|w| w.starts_with("CPU"))
        .count();
    let mut sum = 0;
    for line in lines {
        let Some((_, rest)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() <= ncpu {
            continue; // ERR:, MIS: and friends have one count and no description
        }
        let desc = fields[ncpu..].join(" ");
        // The device's own name as a word or a dash-separated part of one
        // (`eth1`, `eth1-TxRx-0`, `i40e-eth1-TxRx-0`), or a PCI address at
        // a word's end (`mlx5_comp0@pci:0000:3b:00.0`); not a longer name
        // that starts like it (`eth10-TxRx-0`).
        let names_dev = |w: &str| {
            w == dev
                || w.split('-').any(|part| part == dev)
                || w.ends_with(&format!(":{dev}"))
                || w.ends_with(&format!("@{dev}"))
        };
        if desc.split(|c: char| c.is_whitespace()).any(names_dev) {
            for f in &fields[..ncpu] {
                sum += num(f, "/proc/interrupts")?;
            }
        }
    }
    Ok(sum)
}

/// The TCP counters of `/proc/net/snmp` (parsed by the test bed's
/// counter reader, the one parser of that format).
pub fn parse_snmp_tcp(text: &str) -> Result<TcpSnmp> {
    let mut all = flowlane_testbed::net_counters::NetCounters::new();
    flowlane_testbed::net_counters::parse_into(text, &mut all).context("/proc/net/snmp")?;
    let get = |name: &str| -> Result<u64> {
        all.get(&format!("Tcp.{name}"))
            .copied()
            .ok_or_else(|| anyhow!("/proc/net/snmp: no Tcp {name}"))
    };
    Ok(TcpSnmp {
        in_segs: get("InSegs")?,
        out_segs: get("OutSegs")?,
        retrans_segs: get("RetransSegs")?,
    })
}

/// The TSC rate from `/proc/cpuinfo`: `cpu MHz` of the first processor, accepted
/// only when its flags include `tsc` and `constant_tsc` and not `aperfmperf`
/// (where the CPU has APERF/MPERF, Linux 4.13 on prints the effective
/// frequency of the moment there, turbo or idle, not the TSC's). There, the
/// nominal frequency of the model name (`… @ 2.10GHz`, Intel's, which its
/// invariant TSC runs at) is taken; without one, the rate is unknown.
pub fn parse_cpuinfo_tsc(text: &str) -> Result<TscRate> {
    let mut mhz = None;
    let mut model = None;
    let mut flags: Option<Vec<&str>> = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "cpu MHz" if mhz.is_none() => mhz = v.trim().parse::<f64>().ok(),
            "model name" if model.is_none() => model = Some(v.trim()),
            "flags" if flags.is_none() => flags = Some(v.split_whitespace().collect()),
            _ => {}
        }
        if mhz.is_some() && flags.is_some() && model.is_some() {
            break;
        }
    }
    let flags = flags.ok_or_else(|| anyhow!("/proc/cpuinfo: no flags line"))?;
    let has = |f: &str| flags.contains(&f);
    if !has("tsc") {
        bail!("/proc/cpuinfo: no tsc flag, cycles/byte unavailable");
    }
    if !has("constant_tsc") {
        bail!("/proc/cpuinfo: TSC not constant (no constant_tsc), cpu MHz is not its rate");
    }
    if has("aperfmperf") {
        let nominal = model.and_then(|m| {
            let ghz = m.rsplit_once('@')?.1.trim().strip_suffix("GHz")?;
            ghz.trim().parse::<f64>().ok().filter(|g| *g > 0.0)
        });
        return match nominal {
            Some(ghz) => Ok(TscRate {
                hz: ghz * 1e9,
                source: "/proc/cpuinfo model name's nominal frequency (aperfmperf: cpu MHz is \
                         the effective one)"
                    .into(),
            }),
            None => bail!(
                "/proc/cpuinfo: cpu MHz is the effective frequency here (aperfmperf) and the \
                 model name gives no nominal one: the TSC rate is unknown, cycles/byte unavailable"
            ),
        };
    }
    let mhz = mhz.ok_or_else(|| anyhow!("/proc/cpuinfo: no cpu MHz"))?;
    let known = if has("tsc_known_freq") {
        ", tsc_known_freq"
    } else {
        ""
    };
    Ok(TscRate {
        hz: mhz * 1e6,
        source: format!("/proc/cpuinfo cpu MHz (constant_tsc{known})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_cpu_sums_matching_threads_only() {
        let root = std::env::temp_dir().join(format!("ttcp-tasks-{}", std::process::id()));
        let line = |comm: &str, ut: u64, st: u64| {
            format!("12 ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {ut} {st} 0 0 20 0 3 0 1 0 0")
        };
        for (tid, comm, ut, st) in [
            (1, "flowlane-ttcp", 50, 5),
            (2, "flowlane-q0", 100, 20),
            (3, "flowlane-q1", 30, 7),
            (4, "x) (flowlane-q", 1, 1),
        ] {
            let d = root.join(format!("proc/self/task/{tid}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("stat"), line(comm, ut, st)).unwrap();
        }
        let c = ProcFs::new(&root).threads_cpu(&["flowlane-q"]).unwrap();
        assert_eq!(
            c,
            ThreadsCpu {
                threads: 2,
                utime: 130,
                stime: 27
            }
        );
        assert_eq!(stat_comm("7 (a b) c) R"), Some("a b) c"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    const STAT: &str = "cpu  100 5 50 800 10 3 20 2 0 0\n\
cpu0 50 2 25 400 5 1 10 1 0 0\n\
cpu1 50 3 25 400 5 2 10 1 0 0\n\
intr 12345 0 0\nctxt 999\nbtime 1\n";

    const SOFTIRQS: &str = "                    CPU0       CPU1       \n\
          HI:          0          0\n\
       TIMER:      72725      52869\n\
      NET_TX:         80         95\n\
      NET_RX:      16197     176918\n\
       BLOCK:       1000       2000\n";

    const INTERRUPTS: &str = "           CPU0       CPU1       \n\
  0:         33          0   IO-APIC   2-edge      timer\n\
 24:       1000        200   PCI-MSI 65536-edge      eth0-TxRx-0\n\
 25:         10       3000   PCI-MSI 65537-edge      eth0-TxRx-1\n\
 26:          5          5   PCI-MSI 65538-edge      eth1-TxRx-0\n\
 27:          7          0   PCI-MSI 65539-edge      mlx5_comp0@pci:0000:3b:00.0\n\
NMI:          0          0   Non-maskable interrupts\n\
ERR:          0\n\
MIS:          0\n";

    const NETDEV: &str = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0\n  \
xsk0: 9000000 6000 0 0 0 0 0 0 120000 2000 0 0 0 0 0 0\n";

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 2 64\n\
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
Tcp: 1 200 120000 -1 77 2 0 62 0 15364 14566 42 0 64 0\n\
Udp: InDatagrams\nUdp: 5\n";

    #[test]
    fn softirq_net_rx() {
        assert_eq!(
            parse_softirq_row(SOFTIRQS, "NET_RX").unwrap(),
            16197 + 176918
        );
        assert!(parse_softirq_row(SOFTIRQS, "NOPE").is_err());
    }

    #[test]
    fn interrupts_by_device_name() {
        assert_eq!(parse_interrupts_for(INTERRUPTS, "eth0").unwrap(), 4210);
        assert_eq!(parse_interrupts_for(INTERRUPTS, "eth1").unwrap(), 10);
        assert_eq!(parse_interrupts_for(INTERRUPTS, "0000:3b:00.0").unwrap(), 7);
        assert_eq!(parse_interrupts_for(INTERRUPTS, "eth9").unwrap(), 0);
        // A longer name that starts like it is another device.
        let more =
            format!("{INTERRUPTS} 28:        500        500   PCI-MSI 1-edge      eth10-TxRx-0\n");
        assert_eq!(parse_interrupts_for(&more, "eth1").unwrap(), 10);
    }

    #[test]
    fn snmp_tcp() {
        let t = parse_snmp_tcp(SNMP).unwrap();
        assert_eq!(t.retrans_segs, 42);
        assert_eq!(t.in_segs, 15364);
        assert_eq!(t.out_segs, 14566);
        assert!(parse_snmp_tcp("Ip: a\nIp: 1\n").is_err());
    }

    #[test]
    fn tsc_from_cpuinfo() {
        let ci = "processor\t: 0\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu tsc constant_tsc tsc_known_freq\n\
processor\t: 1\ncpu MHz\t\t: 1999.000\nflags\t\t: fpu tsc constant_tsc\n";
        let t = parse_cpuinfo_tsc(ci).unwrap();
        assert_eq!(t.hz, 2e9);
        assert!(t.source.contains("tsc_known_freq"), "{}", t.source);
        let e = parse_cpuinfo_tsc("cpu MHz : 1000\nflags : fpu tsc\n").unwrap_err();
        assert!(e.to_string().contains("constant_tsc"));
        assert!(parse_cpuinfo_tsc("cpu MHz : 1000\nflags : fpu\n").is_err());
        // With APERF/MPERF, cpu MHz is the effective frequency (here turbo):
        // the model name's nominal one is the TSC's.
        let turbo =
            "model name\t: Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz\ncpu MHz\t\t: 3400.000\n\
flags\t\t: fpu tsc constant_tsc aperfmperf tsc_known_freq\n";
        assert_eq!(parse_cpuinfo_tsc(turbo).unwrap().hz, 2.1e9);
        let amd = "model name\t: AMD EPYC 7763 64-Core Processor\ncpu MHz\t\t: 3400.000\n\
flags\t\t: fpu tsc constant_tsc aperfmperf\n";
        assert!(parse_cpuinfo_tsc(amd).is_err());
    }

    fn fake_root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ttcp-procfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in [
            "proc/net",
            "proc/self",
            "sys/class/net/eth0",
            "sys/class/net/veth0",
        ] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("proc/stat"), STAT).unwrap();
        std::fs::write(d.join("proc/softirqs"), SOFTIRQS).unwrap();
        std::fs::write(d.join("proc/interrupts"), INTERRUPTS).unwrap();
        std::fs::write(d.join("proc/net/dev"), NETDEV).unwrap();
        std::fs::write(d.join("proc/net/snmp"), SNMP).unwrap();
        std::fs::write(
            d.join("proc/self/stat"),
            "1 (ttcp) S 0 0 0 0 -1 0 0 0 0 0 300 40 0 0 20 0 3 0",
        )
        .unwrap();
        std::fs::write(
            d.join("proc/cpuinfo"),
            "cpu MHz : 2100.5\nflags : tsc constant_tsc\n",
        )
        .unwrap();
        std::fs::create_dir_all(d.join("sys/class/net/eth0/device")).unwrap();
        d
    }

    #[test]
    fn fake_root_end_to_end() {
        let root = fake_root("e2e");
        let p = ProcFs::new(&root);
        assert_eq!(p.stat().unwrap().ncpus, 2);
        assert_eq!(p.net_rx_softirqs().unwrap(), 193115);
        assert_eq!(p.if_counters("xsk0").unwrap().rx_packets, 6000);
        assert_eq!(p.tcp_snmp().unwrap().retrans_segs, 42);
        assert_eq!(p.self_cpu().unwrap().utime, 300);
        assert_eq!(p.irq_source("eth0"), IrqSource::DeviceIrqs);
        assert_eq!(p.irq_source("veth0"), IrqSource::NetRxSoftirqs);
        assert_eq!(p.interrupts("eth0", IrqSource::DeviceIrqs).unwrap(), 4210);
        assert_eq!(
            p.interrupts("veth0", IrqSource::NetRxSoftirqs).unwrap(),
            193115
        );
        let t = p.tsc_rate().unwrap();
        assert_eq!(t.hz, 2100.5e6);
        // The kernel's tsc_khz, where exposed, wins over cpuinfo.
        std::fs::create_dir_all(root.join("sys/devices/system/cpu/cpu0")).unwrap();
        std::fs::write(
            root.join("sys/devices/system/cpu/cpu0/tsc_freq_khz"),
            "2095000\n",
        )
        .unwrap();
        let t = p.tsc_rate().unwrap();
        assert_eq!(t.hz, 2.095e9);
        assert!(t.source.contains("tsc_khz"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn live_system_parses() {
        let p = ProcFs::system();
        assert!(p.stat().unwrap().ncpus >= 1);
        p.net_rx_softirqs().unwrap();
        p.if_counters("lo").unwrap();
        p.tcp_snmp().unwrap();
        p.self_cpu().unwrap();
    }
}
