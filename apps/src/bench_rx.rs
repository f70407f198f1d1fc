//! `flowlane bench rx`: receive packets/s of one flowlane worker — the
//! ceiling that TCP figures are compared with.
//!
//! A one-queue test bed; `flowlane udp-echo --sink` (parse, count, drop) with
//! its worker pinned to the first CPU; on the far side an XDP live-frames
//! generator (`BPF_PROG_RUN`, no socket, no qdisc) pinned to the last CPU
//! sends one UDP frame over and over. On veth the receive-side XDP program
//! runs in the NAPI context of the sending CPU, so the worker's core does only
//! ring work and parsing.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flowlane_dataplane::iface::parse_mac;
use flowlane_wire::packet::emit_eth_ipv4_udp;
use flowlane_wire::{EtherType, EthernetAddress, EthernetRepr, IpProtocol, Ipv4Repr, UdpRepr};
use serde::Serialize;

use crate::bench_bed::with_bed;
use crate::echo_process::EchoProcess;
use crate::udp_echo;
use flowlane_testbed::netns;
use flowlane_testbed::proc_stat::process_cpu_ns;
use flowlane_testbed::{self as testbed, BedSpec, BedState};

/// Flags of `flowlane bench rx`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Test bed name (a one-queue bed; created and removed by the run).
    #[arg(long, default_value = "benchrx")]
    pub bed: String,
    /// Ethernet frame lengths to measure, without FCS, 60 to 1514 (60 = a
    /// 64-byte frame on the wire, 1514 = 1518, the most the bed's MTU of
    /// 1500 carries).
    #[arg(long, value_delimiter = ',', default_values_t = [60usize, 1514])]
    pub frame_len: Vec<usize>,
    /// Measured seconds per size, at least 1 (after one second of warm-up).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One size's figures.
#[derive(Debug, Serialize)]
pub struct RxFigure {
    /// Frame length without FCS.
    pub frame_len: usize,
    /// Frames the generator sent in the window.
    pub sent_pps: f64,
    /// Frames the worker received per second.
    pub rx_pps: f64,
    /// Received bits per second (frame bytes × 8).
    pub rx_gbps: f64,
    /// CPU time of the flowlane process per received frame (ns).
    pub cpu_ns_per_packet: f64,
    /// Fill-ring starvation and RX-ring-full drops in the window.
    pub ring_drops: u64,
}

const PORT: u16 = 7777;

/// The shortest frame without FCS (64 bytes on the wire).
const MIN_FRAME_LEN: usize = 60;
/// The longest frame the bed carries: its veths' MTU (1500, the kernel's
/// default, which `testbed up` keeps) and the Ethernet header.
const MAX_FRAME_LEN: usize = 1500 + 14;

/// The flags' values a run cannot work with, refused before any bed is made.
fn check(args: &Args) -> Result<()> {
    if args.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    if args.frame_len.is_empty() {
        bail!("--frame-len needs at least one length ({MIN_FRAME_LEN} to {MAX_FRAME_LEN})");
    }
    if let Some(bad) = args
        .frame_len
        .iter()
        .find(|l| !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(*l))
    {
        bail!(
            "--frame-len {bad}: frames must be {MIN_FRAME_LEN} to {MAX_FRAME_LEN} bytes (without FCS; the bed's MTU is 1500)"
        );
    }
    Ok(())
}

fn frame(bed: &BedState, len: usize) -> Result<Vec<u8>> {
    let mac = |s: &str| {
        parse_mac(s)
            .map(EthernetAddress)
            .with_context(|| format!("bad MAC {s}"))
    };
    // Headers: Ethernet 14, IPv4 20, UDP 8 (`check` keeps `len` above them).
    let payload = len - 42;
    let mut buf = vec![0u8; len];
    let eth = EthernetRepr {
        dst_addr: mac(&bed.local_mac)?,
        src_addr: mac(&bed.peer_mac)?,
        vlan: Default::default(),
        ethertype: EtherType::Ipv4,
    };
    let ip = Ipv4Repr::new(
        bed.peer_v4.parse::<Ipv4Addr>()?,
        bed.local_v4.parse()?,
        IpProtocol::Udp,
        8 + payload,
    );
    let udp = UdpRepr {
        src_port: 1234,
        dst_port: PORT,
    };
    emit_eth_ipv4_udp(&mut buf, &eth, &ip, &udp, payload)?;
    Ok(buf)
}

/// The generator's thread, sending `frame` from the peer's namespace until
/// stopped: by [`Flooding::stop`], or by the drop on any other way out, so
/// that it never floods past the measurement.
struct Flooding {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Flooding {
    /// Starts sending `frame` on the peer's interface of `bed`, from a
    /// thread pinned to `cpu`.
    fn start(bed: &BedState, frame: Vec<u8>, cpu: u32) -> Flooding {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (stop2, sent2, peer_ns) = (stop.clone(), sent.clone(), bed.peer_netns.clone());
        let thread = std::thread::spawn(move || {
            netns::in_netns(&peer_ns, move || {
                flowlane_dataplane::affinity::pin_current_thread(&[cpu])?;
                let ifindex = nix::net::if_::if_nametoindex(testbed::PEER_IF)?;
                let g = flowlane_testbed::trafficgen::Generator::new(ifindex)?;
                const BURST: u32 = 1 << 14;
                while !stop2.load(Ordering::Relaxed) {
                    g.send(&frame, BURST)?;
                    sent2.fetch_add(BURST as u64, Ordering::Relaxed);
                }
                Ok(())
            })
        });
        Flooding {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    /// Frames sent so far.
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the thread; its error, if it failed.
    fn stop(mut self) -> Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the generator thread panicked"),
        }
    }
}

impl Drop for Flooding {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

fn measure(bed: &BedState, len: usize, seconds: u64) -> Result<RxFigure> {
    let frame = frame(bed, len)?;
    let mut echo = EchoProcess::start(bed, PORT, &["--sink", "--queues", "1"])?;
    let pid = echo.child.id();
    let cpus = flowlane_dataplane::affinity::allowed_cpus();
    let gen_cpu = *cpus.last().context("no CPU")?;
    let gen = Flooding::start(bed, frame, gen_cpu);
    std::thread::sleep(Duration::from_secs(1));
    let r0 = echo.snapshot(1)?;
    let (t0, s0, c0) = (Instant::now(), gen.sent(), process_cpu_ns(pid)?);
    std::thread::sleep(Duration::from_secs(seconds));
    let r1 = echo.snapshot(2)?;
    let (dt, s1, c1) = (t0.elapsed().as_secs_f64(), gen.sent(), process_cpu_ns(pid)?);
    gen.stop()?;
    let q = |r: &udp_echo::Report| {
        r.queues
            .first()
            .map(|q| (q.rx_packets, q.fill_ring_empty + q.rx_ring_full))
    };
    let ((rx0, d0), (rx1, d1)) = (q(&r0).context("no queue")?, q(&r1).context("no queue")?);
    let rx = (rx1 - rx0) as f64;
    if rx == 0.0 {
        bail!("the worker received nothing: is XDP steering the benchmark port?");
    }
    Ok(RxFigure {
        frame_len: len,
        sent_pps: (s1 - s0) as f64 / dt,
        rx_pps: rx / dt,
        rx_gbps: rx * len as f64 * 8.0 / dt / 1e9,
        cpu_ns_per_packet: (c1 - c0) as f64 / rx,
        ring_drops: d1 - d0,
    })
}

/// Runs the benchmark.
pub fn run(args: Args) -> Result<()> {
    netns::require_root("flowlane bench rx")?;
    check(&args)?;
    let key = flowlane_numa_sched::toeplitz::RssKey::microsoft_default();
    let spec = BedSpec {
        name: args.bed.clone(),
        queues: 1,
        key: key.as_bytes().to_vec(),
        table: vec![0; 128],
    };
    let figures: Vec<RxFigure> = with_bed("bench rx", &spec, |bed| {
        args.frame_len
            .iter()
            .map(|&len| measure(bed, len, args.seconds))
            .collect()
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!("frame_len  generator_pps   rx_pps(1 worker)  rx_Gbit/s  cpu_ns/pkt  ring_drops");
        for f in &figures {
            outln!(
                "{:>9}  {:>13.0}  {:>17.0}  {:>9.2}  {:>10.1}  {:>10}",
                f.frame_len,
                f.sent_pps,
                f.rx_pps,
                f.rx_gbps,
                f.cpu_ns_per_packet,
                f.ring_drops
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_cannot_measure_is_refused_before_the_bed() {
        let args = |frame_len: Vec<usize>, seconds| Args {
            bed: "b".into(),
            frame_len,
            seconds,
            json: false,
        };
        assert!(check(&args(vec![60, 1514], 1)).is_ok());
        let said = |a| check(&a).unwrap_err().to_string();
        assert_eq!(said(args(vec![60], 0)), "--seconds must be at least 1");
        assert!(said(args(vec![60, 1515], 5))
            .starts_with("--frame-len 1515: frames must be 60 to 1514 bytes"));
        assert!(said(args(vec![59], 5)).starts_with("--frame-len 59: "));
        assert!(said(args(vec![], 5)).starts_with("--frame-len needs at least one length"));
    }
}
