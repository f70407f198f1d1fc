//! The delay line (`flowlane testbed delay`): emulated WAN delay on the test bed's link, for
//! kernels without a delaying qdisc (no `sch_netem`, `sch_fq`, `sch_etf` or
//! BPF qdisc on this project's CI VM).
//!
//! A veth pair `fll0`/`fll1` is made in the peer namespace. tc programs on
//! the peer device (`flowlane_ebpf::delay_line`) redirect every unicast frame
//! of both directions (from flowlane's side, those for the peer's MAC) into
//! `fll0`; this process reads them from `fll1` with
//! an `AF_PACKET` socket (virtio-net headers, so GSO super-frames pass whole),
//! holds each for the delay in a [`DelayQueue`], and writes it back into
//! `fll1`; a tc program at `fll0`'s ingress sends it on, towards flowlane or
//! up the peer's stack. Each direction is delayed by `--ms`, so the round
//! trip grows by twice that (as with the RDMA paper's delay router, or netem
//! on both veth ends).
//!
//! With `--rate-mbit` the line is also a bottleneck: each direction is sent
//! at that rate through a drop-tail queue of `--queue-kb` (see
//! [`DelayQueue`]), as a router's output port would. A rate belongs to the
//! whole direction, so a line with a rate has one lane: lanes in a fanout
//! group would each send at the full rate. One thread carries 100 Mbit/s of
//! 1.5 KB frames with room to spare.
//!
//! The line runs until its caller asks it to stop (`flowlane testbed delay`:
//! SIGTERM/SIGINT) or one of its lanes fails, then stops redirecting, releases
//! what it holds at its due time, and removes the hooks and the veth pair
//! (and returns the lane's error, if one failed).
//! If it is killed instead, the hooks fail open within a second (stale
//! heartbeat) and the bed works undelayed; `testbed down` removes the rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use flowlane_ebpf::delay_line::{DelayHookStats, DelayHooks};
use serde::Serialize;

use crate::delay_queue::{Bottleneck, ByteBudget, DelayQueue, DelayQueueStats, Direction};
use crate::netns::{self, ip};
use crate::packet_socket::{
    self, vnet_hdr_linear, vnet_wire_len, PacketSocket, PacketSocketOptions, RecvMeta, MAX_FRAME,
    VNET_HDR_LEN,
};
use crate::state::{delay_lock_path, BedState, FileLock};

/// The veth pair of the line, in the peer namespace.
const LINE_IN: &str = "fll0";
const LINE_OUT: &str = "fll1";
/// The hooks fail open after this much silence from the line.
const STALE_AFTER: Duration = Duration::from_secs(1);
/// How often the line proves it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(20);
/// Frames read or written per system call.
const BATCH: usize = 64;
/// Most lanes per CPU: each is a thread and a socket, and lanes beyond the
/// CPUs only take turns.
const LANES_PER_CPU: usize = 4;

/// Settings of a delay line (the flags of `flowlane testbed delay`).
#[derive(Debug, Clone, PartialEq)]
pub struct DelayConfig {
    /// One-way delay in milliseconds, added in each direction (the round
    /// trip grows by twice this); fractions are allowed.
    pub ms: f64,
    /// Most bytes held in the line at once (both directions and all lanes
    /// together, MiB); frames beyond are dropped, like a full link buffer
    /// (netem's `limit`).
    pub limit_mb: usize,
    /// Receive buffer of each lane's socket (MiB): frames waiting for the
    /// line beyond it are dropped, as by a router whose queue is full.
    pub socket_buffer_mb: usize,
    /// Threads (lanes) of the line, each with its own socket in a hash
    /// fanout group, so that every flow stays in one lane (`None`: one per
    /// CPU; one with a rate).
    pub lanes: Option<usize>,
    /// Rate of each direction (Mbit/s): the line becomes a bottleneck
    /// (`None`: no rate, only the delay).
    pub rate_mbit: Option<f64>,
    /// Drop-tail queue of each direction's bottleneck (KiB; `None`: one
    /// bandwidth-delay product, see [`bottleneck`]).
    pub queue_kb: Option<usize>,
}

/// What the line did, printed when it stops.
#[derive(Debug, Default, Serialize)]
pub struct DelayReport {
    /// Bed name.
    pub bed: String,
    /// One-way delay per direction (ms).
    pub delay_ms: f64,
    /// Seconds the line ran.
    pub seconds: f64,
    /// Lanes (threads) of the line.
    pub lanes: usize,
    /// Rate of each direction (Mbit/s), if the line is a bottleneck.
    pub rate_mbit: Option<f64>,
    /// Each direction's drop-tail queue (bytes), with a rate.
    pub queue_bytes: Option<usize>,
    /// The queue's counters (the bottleneck's drops apart from the line's).
    pub queue: DelayQueueStats,
    /// Frames the kernel dropped before the line read them (socket buffer
    /// full).
    pub socket_drops: u64,
    /// Frames too large for a receive buffer (dropped).
    pub truncated: u64,
    /// Frames the kernel dropped as the line read them, having no
    /// virtio-net header for their GSO type (SCTP; UDP before Linux 6.2).
    pub unsupported_gso: u64,
    /// Frames the line never accounted for: those the hooks sent into it
    /// less those it took ([`DelayQueueStats::frames_in`]), dropped (line
    /// full, bottleneck) or saw dropped (`socket_drops`, `truncated`,
    /// `unsupported_gso`); 0 unless frames were lost between the hooks and
    /// the line's socket (negative: the line read frames the hooks did not
    /// send).
    pub unaccounted: i64,
    /// Frames the kernel refused to send back (dropped).
    pub refused: u64,
    /// Mean time frames left after they were due (µs): the line's error.
    pub mean_late_us: f64,
    /// Worst such time (µs).
    pub max_late_us: f64,
    /// Frames that were late by more than 10 % of the delay (or 100 µs).
    pub late_frames: u64,
    /// The tc programs' counters.
    pub hooks: DelayHookStats,
}

/// Parses and checks `--ms`.
pub fn delay_from_ms(ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms <= 0.0 || ms > 10_000.0 {
        bail!("--ms {ms}: the delay must be more than 0 and at most 10000 ms");
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// The smallest default queue: room for the largest GSO super-frame's wire
/// bytes (64 KiB of TCP payload cut at a 1448-byte MSS is 45 segments, each
/// with its own 66 bytes of headers: 68,130 bytes), with some to spare.
/// (Any frame enters an empty queue; this keeps a burst of super-frames from
/// being cut to one.)
const MIN_DEFAULT_QUEUE: usize = 96 << 10;

/// The bottleneck `--rate-mbit` and `--queue-kb` ask for, with a one-way
/// `delay`. The queue defaults to one bandwidth-delay product (the rate
/// times the round trip the line makes, 2 × delay), at least 96 KiB.
pub fn bottleneck(
    rate_mbit: Option<f64>,
    queue_kb: Option<usize>,
    delay: Duration,
) -> Result<Option<Bottleneck>> {
    let Some(mbit) = rate_mbit else {
        if queue_kb.is_some() {
            bail!("--queue-kb needs --rate-mbit: without a rate nothing queues");
        }
        return Ok(None);
    };
    if !mbit.is_finite() || mbit <= 0.0 || mbit > 1_000_000.0 {
        bail!("--rate-mbit {mbit}: the rate must be more than 0 and at most 1000000 Mbit/s");
    }
    let bits_per_sec = (mbit * 1e6).round().max(1.0) as u64;
    let queue_bytes = match queue_kb {
        Some(0) => bail!("--queue-kb 0: the queue must hold at least 1 KiB"),
        Some(kb) => kb.checked_mul(1 << 10).context("--queue-kb is too large")?,
        None => {
            let bdp = bits_per_sec as f64 / 8.0 * 2.0 * delay.as_secs_f64();
            (bdp as usize).max(MIN_DEFAULT_QUEUE)
        }
    };
    Ok(Some(Bottleneck {
        bits_per_sec,
        queue_bytes,
    }))
}

/// Removes the line's veth pair on every exit path (the hooks are removed
/// inside the namespace, where their ifindexes mean something).
struct LineDevices {
    peer_ns: String,
}

impl Drop for LineDevices {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both, and the return hook
        // with it.
        let _ = ip(&["-n", &self.peer_ns, "link", "del", LINE_IN]);
    }
}

fn ifindex(dev: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(dev).with_context(|| format!("no device {dev}"))
}

/// Makes the line's veth pair in the peer namespace, replacing a stale one;
/// the guard returned removes it. If a step after the pair exists fails, the
/// pair is removed before the error returns.
fn make_devices(bed: &BedState) -> Result<LineDevices> {
    let ns = bed.peer_netns.as_str();
    let _ = ip(&["-n", ns, "link", "del", LINE_IN]);
    ip(&[
        "-n", ns, "link", "add", LINE_IN, "type", "veth", "peer", "name", LINE_OUT,
    ])?;
    let devices = LineDevices {
        peer_ns: bed.peer_netns.clone(),
    };
    let mtu = netns::run(
        "ip",
        &["-n", ns, "-o", "link", "show", bed.peer_if.as_str()],
    )?
    .split_whitespace()
    .skip_while(|w| *w != "mtu")
    .nth(1)
    .map(str::to_string)
    .context("reading the peer device's MTU")?;
    for dev in [LINE_IN, LINE_OUT] {
        // No addresses, no IPv6 link-local: the kernel sends nothing here.
        ip(&["-n", ns, "link", "set", "dev", dev, "addrgenmode", "none"])?;
        ip(&["-n", ns, "link", "set", "dev", dev, "mtu", &mtu])?;
        // veth marks frames CHECKSUM_UNNECESSARY unless RX checksumming is
        // off, which would hide corrupt checksums from the receiver.
        netns::run(
            "ip",
            &["netns", "exec", ns, "ethtool", "-K", dev, "rx", "off"],
        )?;
        ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
    }
    Ok(devices)
}

/// Takes the bed's delay-line lock: one line per bed (a second would
/// delete the first one's devices), whatever run directory each uses (the
/// devices are in the bed's namespace). Released when the process exits,
/// however it exits.
fn lock(bed: &BedState) -> Result<FileLock> {
    FileLock::take(delay_lock_path(&bed.name), false)?.with_context(|| {
        format!(
            "a delay line already runs on test bed {}: stop it (SIGTERM) first",
            bed.name
        )
    })
}

/// What one lane did.
#[derive(Debug, Default)]
struct LaneReport {
    queue: DelayQueueStats,
    socket_drops: u64,
    truncated: u64,
    unsupported_gso: u64,
    refused: u64,
    late_sum: Duration,
    late_max: Duration,
    late_frames: u64,
}

impl DelayReport {
    /// [`DelayReport::unaccounted`] from the other counters.
    fn unaccounted(&self) -> i64 {
        let sent = self.hooks.to_line_egress + self.hooks.to_line_ingress;
        let q = &self.queue;
        let seen = q.frames_in
            + q.dropped_full
            + q.bottleneck_to_peer.dropped
            + q.bottleneck_from_peer.dropped
            + self.socket_drops
            + self.truncated
            + self.unsupported_gso;
        i64::try_from(sent).unwrap_or(i64::MAX) - i64::try_from(seen).unwrap_or(i64::MAX)
    }

    fn add_lane(&mut self, l: &LaneReport) {
        // Lanes peak at different moments: the sum bounds the line's peak.
        self.queue.add(&l.queue);
        self.socket_drops += l.socket_drops;
        self.truncated += l.truncated;
        self.unsupported_gso += l.unsupported_gso;
        self.refused += l.refused;
        self.late_frames += l.late_frames;
        self.max_late_us = self.max_late_us.max(l.late_max.as_secs_f64() * 1e6);
    }
}

/// Runs the delay line on `bed` until `stop_requested` returns true (it is
/// polled from every lane). `ready` is called once frames are being delayed.
pub fn run(
    bed: &BedState,
    config: &DelayConfig,
    stop_requested: impl Fn() -> bool + Send + Sync + 'static,
    ready: impl FnOnce() + Send + 'static,
) -> Result<DelayReport> {
    let delay = delay_from_ms(config.ms)?;
    let bottleneck = bottleneck(config.rate_mbit, config.queue_kb, delay)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lanes = match config.lanes {
        Some(0) => bail!("--lanes 0: at least one lane is needed"),
        Some(n) if n > 1 && bottleneck.is_some() => bail!(
            "--lanes {n} with --rate-mbit: a rate is one queue per direction, so the line \
             runs one lane; leave --lanes out"
        ),
        Some(n) if n > LANES_PER_CPU * cpus => bail!(
            "--lanes {n}: at most {} lanes ({LANES_PER_CPU} per CPU, {cpus} CPUs here); give \
             fewer, or leave --lanes out for one per CPU",
            LANES_PER_CPU * cpus
        ),
        Some(n) => n,
        None if bottleneck.is_some() => 1,
        None => cpus,
    };
    let limit = config
        .limit_mb
        .checked_mul(1 << 20)
        .filter(|&l| l > 0)
        .context("--limit-mb must be at least 1")?;
    let sockbuf = config
        .socket_buffer_mb
        .checked_mul(1 << 20)
        .filter(|&l| l > 0)
        .context("--socket-buffer-mb must be at least 1")?;
    let peer_mac = flowlane_dataplane::iface::parse_mac(&bed.peer_mac)
        .with_context(|| format!("bad peer MAC {:?} in the bed's state", bed.peer_mac))?;
    let _lock = lock(bed)?;
    let _devices = make_devices(bed)?;
    let peer_if = bed.peer_if.clone();
    let mut report = DelayReport {
        bed: bed.name.clone(),
        delay_ms: config.ms,
        lanes,
        rate_mbit: config.rate_mbit,
        queue_bytes: bottleneck.map(|b| b.queue_bytes),
        ..DelayReport::default()
    };
    netns::in_netns(&bed.peer_netns, move || {
        let peer = ifindex(&peer_if)?;
        let line_in = ifindex(LINE_IN)?;
        let line_out = ifindex(LINE_OUT)?;
        // One socket per lane; with several, a hash fanout group gives each
        // flow to one lane, so that no flow is reordered.
        let group = (std::process::id() & 0xffff) as u16;
        let socks = (0..lanes)
            .map(|_| {
                PacketSocket::open(
                    line_out,
                    PacketSocketOptions {
                        vnet_hdr: true,
                        rcvbuf: sockbuf,
                        sndbuf: 16 << 20,
                        ignore_outgoing: true,
                        rx_timestamps: true,
                        fanout: (lanes > 1).then_some(group),
                    },
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let hooks = DelayHooks::install(peer, peer_mac, line_in, line_in, STALE_AFTER)?;
        let started = Instant::now();
        let mut queues = lane_queues(delay, limit, lanes, bottleneck).into_iter();
        let lead_queue = queues.next().expect("at least one lane");
        let others: Vec<_> = socks[1..].iter().zip(queues).collect();
        let results = run_lanes(
            &stop_requested,
            |stop| {
                forward(
                    &socks[0],
                    Some((&hooks, Box::new(ready))),
                    lead_queue,
                    peer_mac,
                    delay,
                    stop,
                )
            },
            others,
            |(sock, queue), stop| forward(sock, None, queue, peer_mac, delay, stop),
        );
        // Stop redirecting before the line stops reading, whatever happened,
        // and detach here: tc hooks are addressed by ifindex in this
        // namespace.
        let _ = hooks.pause();
        let stats = hooks.stats();
        let removed = hooks.remove();
        report.seconds = started.elapsed().as_secs_f64();
        let mut late_sum = Duration::ZERO;
        for r in results {
            let lane = r?;
            late_sum += lane.late_sum;
            report.add_lane(&lane);
        }
        let out = report.queue.frames_out.max(1) as f64;
        report.mean_late_us = late_sum.as_secs_f64() * 1e6 / out;
        report.hooks = stats?;
        report.unaccounted = report.unaccounted();
        removed?;
        Ok(report)
    })
}

/// Each lane's queue, all sharing one budget of `limit` bytes: fanout keeps
/// a flow in one lane, and that flow may fill the whole line.
fn lane_queues(
    delay: Duration,
    limit: usize,
    lanes: usize,
    bottleneck: Option<Bottleneck>,
) -> Vec<DelayQueue> {
    let budget = ByteBudget::new(limit.max(MAX_FRAME));
    (0..lanes)
        .map(|_| {
            let q = DelayQueue::sharing(delay, budget.clone());
            match bottleneck {
                Some(b) => q.with_bottleneck(b),
                None => q,
            }
        })
        .collect()
}

/// A lane's stop check.
type Stop<'a> = &'a (dyn Fn() -> bool + Sync);

/// Sets a shared failure flag when the lane it watches panics.
struct PanicWatch<'a>(&'a AtomicBool);

impl Drop for PanicWatch<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `lane`, setting `failed` if it fails or panics.
fn watched<R>(failed: &AtomicBool, lane: impl FnOnce() -> Result<R>) -> Result<R> {
    let _watch = PanicWatch(failed);
    let result = lane();
    if result.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
    result
}

/// Runs the line's lanes: `leader` on the calling thread, `lane` on a
/// thread of its own for each of `others`. Each lane's stop check is true
/// once `stop_requested` is or once any lane has failed (an error or a
/// panic), so that the line ends with the failure instead of running on
/// without a lane (whose flows would be redirected into a socket nobody
/// reads). Returns their results, the leader's first; a panic of the leader
/// goes on to the caller once the others have stopped.
fn run_lanes<T: Send, R: Send>(
    stop_requested: Stop<'_>,
    leader: impl FnOnce(Stop<'_>) -> Result<R>,
    others: Vec<T>,
    lane: impl Fn(T, Stop<'_>) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    // A flag polled in a loop, guarding no other memory: relaxed is enough.
    let failed = AtomicBool::new(false);
    let stop = || failed.load(Ordering::Relaxed) || stop_requested();
    std::thread::scope(|scope| {
        let (lane, stop, failed) = (&lane, &stop, &failed);
        // A lane that cannot start fails the line like one that fails
        // running: the lanes started stop, the leader returns at once.
        let handles: Vec<_> = others
            .into_iter()
            .map(|item| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || watched(failed, || lane(item, stop)))
                    .map_err(|e| {
                        failed.store(true, Ordering::Relaxed);
                        anyhow::Error::new(e).context("starting a delay-line lane")
                    })
            })
            .collect();
        let lead = watched(failed, || leader(stop));
        std::iter::once(lead)
            .chain(handles.into_iter().map(|h| {
                h.and_then(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a delay-line lane panicked")))
                })
            }))
            .collect()
    })
}

/// The lane that keeps the hooks alive and says when the line is ready.
type Leader<'a> = (&'a DelayHooks, Box<dyn FnOnce() + Send + 'a>);

/// Which way a frame read from the line goes: frames for the peer's MAC
/// came from flowlane's side (the return program makes the same choice).
fn direction(frame: &[u8], peer_mac: &[u8; 6]) -> Direction {
    if frame.get(VNET_HDR_LEN..VNET_HDR_LEN + 6) == Some(&peer_mac[..]) {
        Direction::ToPeer
    } else {
        Direction::FromPeer
    }
}

/// One lane of the line: read, hold in `queue`, release, until asked to
/// stop; then drain. The leader lane also beats the hooks' heartbeat and
/// pauses them.
fn forward(
    sock: &PacketSocket,
    mut leader: Option<Leader<'_>>,
    mut queue: DelayQueue,
    peer_mac: [u8; 6],
    delay: Duration,
    stop_requested: &(dyn Fn() -> bool + Sync),
) -> Result<LaneReport> {
    let mut report = LaneReport::default();
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; MAX_FRAME]).collect();
    let mut meta = vec![RecvMeta::default(); BATCH];
    let mut due: Vec<(Box<[u8]>, Duration)> = Vec::with_capacity(BATCH);
    let late_bound = (delay / 10).max(Duration::from_micros(100));
    if let Some((hooks, ready)) = leader.as_mut().map(|(h, r)| (*h, r)) {
        hooks.heartbeat(STALE_AFTER)?;
        let ready = std::mem::replace(ready, Box::new(|| {}));
        ready();
    }
    let hooks = leader.map(|(h, _)| h);
    let mut last_beat = Instant::now();
    // After a stop request: no new frames come in (the hooks are paused);
    // what is held leaves at its due time, and stragglers still in the
    // socket are read for one more delay.
    let mut draining_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if draining_until.is_none() && stop_requested() {
            if let Some(h) = hooks {
                h.pause()?;
            }
            draining_until = Some(now + delay + Duration::from_millis(50));
        }
        if let Some(end) = draining_until {
            if now >= end && queue.is_empty() {
                break;
            }
        } else if now.duration_since(last_beat) >= HEARTBEAT_EVERY {
            if let Some(h) = hooks {
                h.heartbeat(STALE_AFTER)?;
            }
            last_beat = now;
        }
        let wait = queue
            .next_due()
            .map_or(HEARTBEAT_EVERY, |d| d.saturating_duration_since(now))
            .min(HEARTBEAT_EVERY);
        if !wait.is_zero() {
            sock.wait_readable(wait)?;
        }
        // Read what is waiting (bounded, so that releases are not starved).
        for _ in 0..16 {
            let n = match sock.recv_batch(&mut bufs, &mut meta) {
                // The kernel dropped one frame it could not describe; the
                // ones behind it are still there.
                Err(packet_socket::Error::UnsupportedGso) => {
                    report.unsupported_gso += 1;
                    continue;
                }
                r => r?,
            };
            if n == 0 {
                break;
            }
            let (now_mono, now_real) = (Instant::now(), SystemTime::now());
            for (buf, m) in bufs.iter_mut().zip(&meta).take(n) {
                if m.len <= VNET_HDR_LEN {
                    report.truncated += u64::from(m.len == 0);
                    continue;
                }
                // Stamp with the kernel's receive time: time spent waiting
                // in the socket buffer counts towards the delay (and beyond
                // it, as lateness).
                let age = m
                    .kernel_time
                    .and_then(|t| now_real.duration_since(t).ok())
                    .unwrap_or_default();
                let frame = &mut buf[..m.len];
                vnet_hdr_linear(frame);
                let arrived = now_mono.checked_sub(age).unwrap_or(now_mono);
                let dir = direction(frame, &peer_mac);
                queue.push_sized(arrived, dir, frame, vnet_wire_len(frame));
            }
            if n < BATCH {
                break;
            }
        }
        // Release what is due.
        loop {
            due.clear();
            queue.pop_due(Instant::now(), BATCH, &mut due);
            if due.is_empty() {
                break;
            }
            let frames: Vec<&[u8]> = due.iter().map(|(f, _)| &f[..]).collect();
            let (_, refused) = sock.send_batch(&frames)?;
            report.refused += refused as u64;
            for (_, late) in &due {
                report.late_sum += *late;
                report.late_max = report.late_max.max(*late);
                report.late_frames += u64::from(*late > late_bound);
            }
        }
    }
    report.queue = queue.stats();
    report.socket_drops = sock.stats()?.drops;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_bounds() {
        assert!(delay_from_ms(0.0).is_err());
        assert!(delay_from_ms(-1.0).is_err());
        assert!(delay_from_ms(f64::NAN).is_err());
        assert!(delay_from_ms(10_001.0).is_err());
        assert_eq!(delay_from_ms(0.5).unwrap(), Duration::from_micros(500));
        assert_eq!(delay_from_ms(50.0).unwrap(), Duration::from_millis(50));
    }

    #[test]
    fn bottleneck_flags() {
        let d = Duration::from_millis(10);
        assert_eq!(bottleneck(None, None, d).unwrap(), None);
        assert!(
            bottleneck(None, Some(100), d).is_err(),
            "a queue needs a rate"
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(bottleneck(Some(bad), None, d).is_err(), "{bad}");
        }
        assert!(bottleneck(Some(10.0), Some(0), d).is_err());
        // 100 Mbit/s × 20 ms round trip = 250,000 bytes.
        let b = bottleneck(Some(100.0), None, d).unwrap().unwrap();
        assert_eq!(b.bits_per_sec, 100_000_000);
        assert_eq!(b.queue_bytes, 250_000);
        // A small product gets the floor; a given queue is taken as it is.
        let b = bottleneck(Some(1.0), None, d).unwrap().unwrap();
        assert_eq!(b.queue_bytes, 96 << 10);
        let b = bottleneck(Some(1.0), Some(8), d).unwrap().unwrap();
        assert_eq!(b.queue_bytes, 8 << 10);
    }

    #[test]
    fn directions_by_destination_mac() {
        let peer = [2, 0, 0, 0, 0, 2];
        let mut f = vec![0u8; VNET_HDR_LEN + 60];
        f[VNET_HDR_LEN..VNET_HDR_LEN + 6].copy_from_slice(&peer);
        assert_eq!(direction(&f, &peer), Direction::ToPeer);
        f[VNET_HDR_LEN] = 4;
        assert_eq!(direction(&f, &peer), Direction::FromPeer);
        assert_eq!(direction(&f[..4], &peer), Direction::FromPeer);
    }

    /// A full-size TSO super-frame read with its virtio-net header: 64 KiB
    /// of payload cut at a 1448-byte MSS (45 segments) behind 66 bytes of
    /// Ethernet, IPv4 and TCP (with timestamps) headers.
    fn largest_gso_frame() -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR_LEN + 66 + 45 * 1448];
        f[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        f[2..4].copy_from_slice(&66u16.to_le_bytes());
        f[4..6].copy_from_slice(&1448u16.to_le_bytes());
        f
    }

    #[test]
    fn the_default_queue_holds_the_largest_gso_frame() {
        let f = largest_gso_frame();
        assert_eq!(vnet_wire_len(&f), 65_226 + 44 * 66);
        let b = bottleneck(Some(1.0), None, Duration::from_millis(1))
            .unwrap()
            .unwrap();
        assert!(b.queue_bytes >= vnet_wire_len(&f), "{}", b.queue_bytes);
        // Into an empty queue, whatever its size, a super-frame passes.
        let mut q = DelayQueue::new(Duration::from_millis(1), 1 << 20).with_bottleneck(b);
        let t0 = Instant::now();
        assert!(q.push_sized(t0, Direction::ToPeer, &f, vnet_wire_len(&f)));
        let tiny = bottleneck(Some(1.0), Some(8), Duration::from_millis(1))
            .unwrap()
            .unwrap();
        let mut q = DelayQueue::new(Duration::from_millis(1), 1 << 20).with_bottleneck(tiny);
        assert!(q.push_sized(t0, Direction::ToPeer, &f, vnet_wire_len(&f)));
        assert!(
            !q.push_sized(t0, Direction::ToPeer, &f, vnet_wire_len(&f)),
            "behind it, the queue is full"
        );
    }

    #[test]
    fn one_lane_may_hold_more_than_its_share_of_the_limit() {
        // fanout pins a flow to one lane: that flow gets the whole limit.
        let limit = 4 << 20;
        let mut queues = lane_queues(Duration::from_millis(1), limit, 4, None);
        let t0 = Instant::now();
        let frame = vec![0u8; 60_000];
        let mut held = 0;
        while queues[0].push(t0, Direction::ToPeer, &frame) {
            held += frame.len();
        }
        assert!(held > limit / 2, "one lane held {held} of {limit} bytes");
        assert!(held <= limit);
        // The others share what is left.
        assert!(!queues[1].push(t0, Direction::FromPeer, &frame));
        let mut out = Vec::new();
        queues[0].pop_due(t0 + Duration::from_millis(1), 1, &mut out);
        assert!(queues[1].push(t0, Direction::FromPeer, &frame));
        // A lane that goes away gives its bytes back.
        drop(queues.remove(0));
        assert!(queues[2].push(t0, Direction::FromPeer, &frame));
    }

    /// Waits for `stop` (bounded, so that a stop that never comes fails a
    /// test instead of hanging it); returns whether it came.
    fn wait_for_stop(stop: Stop<'_>) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop()
    }

    #[test]
    fn a_failed_lane_stops_the_line() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let never = || false;
        for panics in [false, true] {
            // Lane 1 fails at once; the others wait to be stopped.
            let results = run_lanes(
                &never,
                |stop| Ok(wait_for_stop(stop)),
                vec![1, 2],
                |i, stop| {
                    if i == 1 {
                        if panics {
                            panic!("lane 1 panics (expected by this test)");
                        }
                        bail!("lane 1 failed");
                    }
                    Ok(wait_for_stop(stop))
                },
            );
            assert_eq!(results.len(), 3);
            assert!(results[0].as_ref().is_ok_and(|s| *s), "the leader stopped");
            assert!(results[1].is_err());
            assert!(results[2].as_ref().is_ok_and(|s| *s), "lane 2 stopped");
        }
        // A leader that panics stops the other lanes too (and the panic
        // goes on to the caller).
        let stopped = AtomicBool::new(false);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_lanes(
                &never,
                |_| -> Result<()> { panic!("the leader panics (expected by this test)") },
                vec![()],
                |(), stop| {
                    stopped.store(wait_for_stop(stop), Ordering::Relaxed);
                    Ok(())
                },
            )
        }));
        assert!(caught.is_err());
        assert!(stopped.load(Ordering::Relaxed), "the other lane stopped");
        // Without a failure, only the caller stops the line.
        let asked = AtomicBool::new(false);
        let stop = || asked.load(Ordering::Relaxed);
        let results = run_lanes(
            &stop,
            |stop| {
                assert!(!stop());
                asked.store(true, Ordering::Relaxed);
                Ok(())
            },
            vec![()],
            |(), stop| {
                assert!(wait_for_stop(stop));
                Ok(())
            },
        );
        assert!(results.iter().all(Result::is_ok));
    }

    /// A frame the kernel drops as the line reads it (a GSO type without a
    /// virtio-net header) is counted, and the line reads on: it neither
    /// stops nor loses the frames behind it.
    #[test]
    fn a_frame_without_a_virtio_net_header_is_counted_and_the_lane_reads_on() {
        use crate::netns::scratch::{root_or_skip, ScratchNs};
        use crate::packet_socket::testing::{tap_with_vnet_hdr, test_frame, ufo_frame};
        use std::io::Write;
        if !root_or_skip("a_frame_without_a_virtio_net_header_is_counted_and_the_lane_reads_on") {
            return;
        }
        let ns = ScratchNs::new("dg");
        let report = netns::in_netns(&ns.name, || {
            let mut tap = tap_with_vnet_hdr("fltap0")?;
            ip(&["link", "set", "dev", "fltap0", "addrgenmode", "none"])?;
            ip(&["link", "set", "dev", "fltap0", "up"])?;
            let opts = PacketSocketOptions {
                vnet_hdr: true,
                ..PacketSocketOptions::default()
            };
            let sock = PacketSocket::open(ifindex("fltap0")?, opts)?;
            let peer = [2, 0, 0, 0, 0, 2];
            tap.write_all(&ufo_frame(peer))?;
            let mut plain = vec![0u8; VNET_HDR_LEN];
            plain.extend_from_slice(&test_frame(peer, 7));
            tap.write_all(&plain)?;
            let delay = Duration::from_millis(1);
            let started = Instant::now();
            let stop = move || started.elapsed() > Duration::from_millis(300);
            forward(
                &sock,
                None,
                DelayQueue::new(delay, 1 << 20),
                peer,
                delay,
                &stop,
            )
        })
        .unwrap();
        assert_eq!(report.unsupported_gso, 1);
        assert_eq!(report.queue.frames_in, 1, "the frame behind it was read");
        assert_eq!(report.queue.frames_out, 1);
    }

    /// A bed `name` whose both sides are namespace `ns`, with no devices
    /// of its own (`nosuch0`, `nosuch1`).
    fn bed_in(name: &str, ns: &str) -> BedState {
        BedState {
            name: name.into(),
            netns: ns.into(),
            peer_netns: ns.into(),
            local_if: "nosuch0".into(),
            peer_if: "nosuch1".into(),
            queues: 1,
            local_v4: String::new(),
            peer_v4: String::new(),
            local_v6: String::new(),
            peer_v6: String::new(),
            local_mac: "02:00:00:00:00:01".into(),
            peer_mac: "02:00:00:00:00:02".into(),
            pin_dir: std::path::PathBuf::new(),
            netns_id: None,
            peer_netns_id: None,
        }
    }

    #[test]
    fn lanes_beyond_the_cap_are_refused_before_anything_is_made() {
        let bed = bed_in("flt-lanes", "flt-nosuch-ns");
        let config = DelayConfig {
            ms: 1.0,
            limit_mb: 1,
            socket_buffer_mb: 1,
            lanes: Some(1_000_000),
            rate_mbit: None,
            queue_kb: None,
        };
        let e = format!("{:#}", run(&bed, &config, || true, || {}).unwrap_err());
        assert!(e.starts_with("--lanes 1000000: at most"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            !delay_lock_path(&bed.name).exists(),
            "the refused line took its lock"
        );
        // The cap itself is allowed.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let config = DelayConfig {
            lanes: Some(LANES_PER_CPU * cpus),
            ..config
        };
        let e = format!("{:#}", run(&bed, &config, || true, || {}).unwrap_err());
        assert!(!e.contains("--lanes"), "{e}");
        let _ = std::fs::remove_file(delay_lock_path(&bed.name));
    }

    #[test]
    fn the_report_counts_frames_sent_into_the_line_that_it_never_saw() {
        let mut r = DelayReport::default();
        r.hooks.to_line_egress = 70;
        r.hooks.to_line_ingress = 40;
        r.queue.frames_in = 90;
        r.queue.dropped_full = 3;
        r.queue.bottleneck_to_peer.dropped = 2;
        r.queue.bottleneck_from_peer.dropped = 1;
        r.socket_drops = 4;
        r.truncated = 1;
        r.unsupported_gso = 2;
        assert_eq!(r.unaccounted(), 7);
        r.queue.frames_in = 99;
        assert_eq!(r.unaccounted(), -2, "read more than the hooks sent");
    }

    /// Hooks dropped without [`DelayHooks::remove`] (a lane's panic
    /// unwinding past them) detach themselves: no redirect into a line
    /// whose devices go next is left behind.
    #[test]
    fn dropped_hooks_detach_themselves() {
        use crate::netns::scratch::{root_or_skip, ScratchNs};
        if !root_or_skip("dropped_hooks_detach_themselves") {
            return;
        }
        let ns = ScratchNs::new("dd");
        ns.veth("local0", "peer0");
        ns.veth(LINE_IN, LINE_OUT);
        let peer_mac = ns.mac("peer0");
        netns::in_netns(&ns.name, move || {
            let hour = Duration::from_secs(3600);
            let line = ifindex(LINE_IN)?;
            let hooks = DelayHooks::install(ifindex("peer0")?, peer_mac, line, line, hour)?;
            hooks.heartbeat(hour)?;
            drop(hooks);
            Ok(())
        })
        .unwrap();
        for (dev, dir) in [
            ("peer0", "egress"),
            ("peer0", "ingress"),
            (LINE_IN, "ingress"),
        ] {
            let f = netns::run(
                "ip",
                &[
                    "netns", "exec", &ns.name, "tc", "filter", "show", "dev", dev, dir,
                ],
            )
            .unwrap();
            assert!(!f.contains("flowlane_delay"), "{dev} {dir}: {f}");
        }
    }

    #[test]
    fn failing_to_make_the_devices_leaves_none() {
        use crate::netns::scratch::{root_or_skip, ScratchNs};
        if !root_or_skip("failing_to_make_the_devices_leaves_none") {
            return;
        }
        let ns = ScratchNs::new("dl");
        // No such peer device: reading its MTU fails after the pair exists.
        let bed = bed_in("flt-devices", &ns.name);
        let made = make_devices(&bed);
        assert!(made.is_err());
        drop(made);
        let links = ns.ip(&["-o", "link", "show"]);
        assert!(!links.contains(LINE_IN), "{links}");
    }

    #[test]
    fn only_frames_for_the_peer_enter_the_line_from_flowlane() {
        use crate::netns::scratch::{pin_to_one_cpu, root_or_skip, ScratchNs};
        use crate::packet_socket::testing::{recv_frames, test_frame};
        if !root_or_skip("only_frames_for_the_peer_enter_the_line_from_flowlane") {
            return;
        }
        let ns = ScratchNs::new("dh");
        // local0 plays flowlane's side, peer0 the peer device.
        ns.veth("local0", "peer0");
        ns.veth(LINE_IN, LINE_OUT);
        let peer_mac = ns.mac("peer0");
        let stranger = [2, 0, 0, 0, 0x5e, 0x99];
        let seen = netns::in_netns(&ns.name, move || {
            // One CPU: frames are handled in the order they are sent.
            pin_to_one_cpu()?;
            let opts = PacketSocketOptions::default();
            let tx = PacketSocket::open(ifindex("local0")?, opts)?;
            let line = PacketSocket::open(ifindex(LINE_OUT)?, opts)?;
            let hooks = DelayHooks::install(
                ifindex("peer0")?,
                peer_mac,
                ifindex(LINE_IN)?,
                ifindex(LINE_IN)?,
                Duration::from_secs(3600),
            )?;
            hooks.heartbeat(Duration::from_secs(3600))?;
            // To a MAC that is not the peer's, then to the peer's.
            let (wrong, right) = (test_frame(stranger, 1), test_frame(peer_mac, 2));
            tx.send_batch(&[&wrong[..], &right[..]])?;
            // The frame for the peer marks the end: anything redirected
            // before it has reached the line by then.
            let seen = recv_frames(&line, |f| f[..6] == peer_mac)?;
            let stats = hooks.stats()?;
            hooks.remove()?;
            Ok((seen, stats))
        })
        .unwrap();
        let (frames, stats) = seen;
        let dests: Vec<&[u8]> = frames.iter().map(|f| &f[..6]).collect();
        assert_eq!(
            dests,
            [&peer_mac[..]],
            "only the peer's frame enters the line"
        );
        assert_eq!(stats.to_line_ingress, 1);
    }
}
