//! Link impairment (`flowlane testbed impair`): loss, duplication, corruption, reordering and
//! ECN CE marking on
//! the test bed's link, in both directions, for kernels without `sch_netem`
//! (this project's CI VM has none). The BPF side is `flowlane_ebpf::impair`;
//! this module sets up the slow path that reordering needs (an HTB class of
//! limited rate on the peer device, and on an ifb device for the ingress
//! direction) and writes the rates.

use anyhow::{bail, Context, Result};
use flowlane_ebpf::impair::{self, Direction, ImpairConfig, ImpairMaps, ImpairStats};
use serde::Serialize;

use crate::netns;
use crate::offloads::{self, Frames};
use crate::state::{BedLock, BedState};

/// The ifb device of the ingress slow path (in the peer namespace).
const IFB: &str = "flifb0";
/// HTB class of the fast path (default) and of the slow path.
const FAST_CLASS: &str = "1:1";
const SLOW_CLASS: &str = "1:2";
const SLOW_CLASSID: u32 = 0x0001_0002;
/// Packets the slow path holds.
const SLOW_QUEUE: &str = "16";

/// Impairments of a bed's link, the same both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImpairSpec {
    /// Packet loss, parts per million ([`parse_percent`]).
    pub loss_ppm: u32,
    /// Duplicated packets, parts per million.
    pub duplicate_ppm: u32,
    /// Corrupted packets (one bit flipped after the IP header), parts per
    /// million.
    pub corrupt_ppm: u32,
    /// Reordered packets (sent through the slow path), parts per million.
    pub reorder_ppm: u32,
    /// ECN-capable packets marked CE (RFC 3168 §5), parts per million of
    /// all packets; Not-ECT ones are never marked.
    pub ce_ppm: u32,
    /// Rate of the slow path, bits per second ([`parse_rate`]; at least
    /// 8): it sets the reordering delay.
    pub slow_rate_bit: u64,
}

/// The impairments in force (the same both ways), parts per million.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImpairSettings {
    /// Packet loss.
    pub loss_ppm: u32,
    /// Duplicated packets.
    pub duplicate_ppm: u32,
    /// Corrupted packets.
    pub corrupt_ppm: u32,
    /// Reordered packets.
    pub reorder_ppm: u32,
    /// ECT packets marked CE.
    pub ce_ppm: u32,
}

/// The settings in force and the counters per direction.
#[derive(Debug, Serialize)]
pub struct ImpairStatus {
    /// What `testbed impair` set last (all 0 after `--clear`).
    pub settings: ImpairSettings,
    /// Towards flowlane (peer egress).
    pub to_flowlane: ImpairStats,
    /// From flowlane (peer ingress).
    pub from_flowlane: ImpairStats,
}

/// Parses "5", "5%" or "0.5%" into parts per million.
pub fn parse_percent(s: &str) -> Result<u32> {
    let v: f64 = s.trim().trim_end_matches('%').parse().with_context(|| {
        format!("{s:?} is not a percentage: give a number such as 2, 2% or 0.5%")
    })?;
    if !(0.0..=100.0).contains(&v) {
        bail!("{s:?} is not between 0 and 100 %: give a percentage in that range");
    }
    Ok((v * 10_000.0).round() as u32)
}

/// Parses a rate in tc's syntax (tc(8) "RATES": a number and a unit,
/// `bit`, `kbit`, `mbit`, `gbit`, `tbit`, their IEC forms `kibit` .. `tibit`,
/// or bytes per second `bps`, `kbps` .. `tbps`; e.g. `100mbit`) into bits
/// per second, at least 8 (tc counts whole bytes per second: less is 0,
/// which HTB refuses) and below 2^64; checked here so that a bad one is one
/// line, not tc's usage text.
pub fn parse_rate(s: &str) -> Result<u64> {
    const UNITS: [(&str, f64); 14] = [
        ("kibit", 1024.0),
        ("mibit", 1024.0 * 1024.0),
        ("gibit", 1024.0 * 1024.0 * 1024.0),
        ("tibit", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("kbit", 1e3),
        ("mbit", 1e6),
        ("gbit", 1e9),
        ("tbit", 1e12),
        ("bit", 1.0),
        ("kbps", 8e3),
        ("mbps", 8e6),
        ("gbps", 8e9),
        ("tbps", 8e12),
        ("bps", 8.0),
    ];
    let lower = s.trim().to_ascii_lowercase();
    let parsed = UNITS.iter().find_map(|&(unit, scale)| {
        let v: f64 = lower.strip_suffix(unit)?.parse().ok()?;
        Some(v * scale)
    });
    match parsed {
        Some(bits) if bits.is_finite() && bits >= 8.0 && bits < u64::MAX as f64 => {
            Ok(bits.round() as u64)
        }
        Some(_) => bail!(
            "rate {s:?} is out of range: give one from 8bit (1 byte/s) up, such as 100mbit"
        ),
        None => bail!(
            "{s:?} is not a rate: give a number with a unit (bit, kbit, mbit, gbit, bps, kbps, mbps, ...), such as 100mbit"
        ),
    }
}

fn tc(bed: &BedState, args: &[&str]) -> Result<()> {
    let mut full = vec!["netns", "exec", &bed.peer_netns, "tc"];
    full.extend_from_slice(args);
    netns::run("ip", &full).map(|_| ())
}

fn htb(bed: &BedState, dev: &str, slow_rate_bit: u64) -> Result<()> {
    let slow_rate = format!("{slow_rate_bit}bit");
    // HTB refuses `qdisc replace` of itself ("Change operation not
    // supported"): a second `impair` on a bed removes it first.
    let _ = tc(bed, &["qdisc", "del", "dev", dev, "root"]);
    tc(
        bed,
        &[
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
        ],
    )?;
    tc(
        bed,
        &[
            "class", "replace", "dev", dev, "parent", "1:", "classid", FAST_CLASS, "htb", "rate",
            "100gbit",
        ],
    )?;
    tc(
        bed,
        &[
            "class", "replace", "dev", dev, "parent", "1:", "classid", SLOW_CLASS, "htb", "rate",
            &slow_rate,
        ],
    )?;
    // A short queue bounds the reordering delay (SLOW_QUEUE packets at the
    // slow rate: about 2 ms at the default 100 Mbit/s) instead of letting it
    // grow with the backlog. What overflows on the ifb (from flowlane) is
    // lost, as at a full router queue; on the peer device (towards
    // flowlane) the peer's kernel sees the drop (NET_XMIT_DROP: its TCP
    // enters CWR and sends the segment again), as from any local qdisc.
    tc(
        bed,
        &[
            "qdisc", "replace", "dev", dev, "parent", SLOW_CLASS, "pfifo", "limit", SLOW_QUEUE,
        ],
    )
}

/// Removes every impairment of a bed (and the slow path), restoring its
/// offloads; under the bed's lock (an `up` or `down` under way finishes
/// first).
pub fn clear(bed: &BedState) -> Result<()> {
    let _lock = BedLock::take(&bed.name)?;
    clear_locked(bed)
}

/// [`clear`] under a lock the caller holds.
fn clear_locked(bed: &BedState) -> Result<()> {
    if let Some(maps) = ImpairMaps::open(&bed.pin_dir) {
        maps.set(Direction::Egress, &ImpairConfig::default())?;
        maps.set(Direction::Ingress, &ImpairConfig::default())?;
    }
    let _ = tc(bed, &["qdisc", "del", "dev", &bed.peer_if, "root"]);
    let _ = netns::ip(&["-n", &bed.peer_netns, "link", "del", IFB]);
    offloads::set(bed, Frames::Gso)
}

/// Applies `spec` to a bed's link, both ways; under the bed's lock (an
/// `up` or `down` under way finishes first). If a step fails, what the
/// earlier ones set up is removed (the bed is left unimpaired) and the
/// error says so.
pub fn apply(bed: &BedState, spec: &ImpairSpec) -> Result<()> {
    if spec.slow_rate_bit < 8 {
        bail!(
            "the slow path's rate is {} bit/s: give one from 8bit (1 byte/s) up, such as 100mbit",
            spec.slow_rate_bit
        );
    }
    let _lock = BedLock::take(&bed.name)?;
    apply_locked(bed, spec).map_err(|e| match clear_locked(bed) {
        Ok(()) => e.context(format!("test bed {}: impairment removed", bed.name)),
        Err(c) => e.context(format!(
            "test bed {}: removing the half-made impairment failed too ({c:#}): run `flowlane testbed impair --clear`",
            bed.name
        )),
    })
}

/// [`apply`] under a lock the caller holds.
fn apply_locked(bed: &BedState, spec: &ImpairSpec) -> Result<()> {
    let base = ImpairConfig {
        loss_ppm: spec.loss_ppm,
        duplicate_ppm: spec.duplicate_ppm,
        corrupt_ppm: spec.corrupt_ppm,
        reorder_ppm: spec.reorder_ppm,
        reorder_classid: SLOW_CLASSID,
        reorder_ifindex: 0,
        ce_ppm: spec.ce_ppm,
    };
    // Impair wire-size packets: a GSO skb seen by tc is segmented after it,
    // so one impairment would hit a whole burst (and a compensated bit flip
    // would spoil every segment's checksum); netem segments GSO skbs itself
    // for the same reason. flowlane's side only matters for kernel sockets
    // there.
    offloads::set(bed, Frames::WireSize)?;
    htb(bed, &bed.peer_if, spec.slow_rate_bit)?;
    if netns::ip(&["-n", &bed.peer_netns, "link", "show", IFB]).is_err() {
        netns::ip(&["-n", &bed.peer_netns, "link", "add", IFB, "type", "ifb"])?;
    }
    netns::ip(&["-n", &bed.peer_netns, "link", "set", IFB, "up"])?;
    htb(bed, IFB, spec.slow_rate_bit)?;
    let (peer_if, pin_dir) = (bed.peer_if.clone(), bed.pin_dir.clone());
    let maps = netns::in_netns(&bed.peer_netns, move || {
        let ifb = nix::net::if_::if_nametoindex(IFB).context("finding the ifb device")?;
        let maps = match ImpairMaps::open(&pin_dir) {
            Some(m) => m,
            None => {
                let ifindex = nix::net::if_::if_nametoindex(peer_if.as_str())
                    .context("finding the peer interface")?;
                impair::install(ifindex, &pin_dir)?
            }
        };
        Ok((maps, ifb))
    });
    let (maps, ifb) = maps?;
    maps.set(Direction::Egress, &base)?;
    maps.set(
        Direction::Ingress,
        &ImpairConfig {
            reorder_ifindex: ifb,
            ..base
        },
    )?;
    Ok(())
}

/// The settings and counters of a bed's impairments, if any were ever
/// applied.
pub fn status(bed: &BedState) -> Result<Option<ImpairStatus>> {
    let Some(maps) = ImpairMaps::open(&bed.pin_dir) else {
        return Ok(None);
    };
    let c = maps.config(Direction::Egress)?;
    Ok(Some(ImpairStatus {
        settings: ImpairSettings {
            loss_ppm: c.loss_ppm,
            duplicate_ppm: c.duplicate_ppm,
            corrupt_ppm: c.corrupt_ppm,
            reorder_ppm: c.reorder_ppm,
            ce_ppm: c.ce_ppm,
        },
        to_flowlane: maps.stats(Direction::Egress)?,
        from_flowlane: maps.stats(Direction::Ingress)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::{parse_percent, parse_rate};

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1.5Gbit").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("2kibit").unwrap(), 2048);
        assert_eq!(parse_rate("10kbps").unwrap(), 80_000);
        assert_eq!(parse_rate("800bit").unwrap(), 800);
        for bad in [
            "10xyz", "0", "0mbit", "4bit", "mbit", "", "-5mbit", "100", "nanbit", "1e30tbit",
        ] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(
                e.contains("100mbit") && e.lines().count() == 1,
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("5%").unwrap(), 50_000);
        assert_eq!(parse_percent("0.5").unwrap(), 5_000);
        assert_eq!(parse_percent("100").unwrap(), 1_000_000);
        assert!(parse_percent("101").is_err());
        assert!(parse_percent("-1").is_err());
        assert!(parse_percent("lots").is_err());
        // The flags' values (`--ce 2%` and the like).
        assert_eq!(parse_percent("2%").unwrap(), 20_000);
        assert_eq!(parse_percent(" 0.01% ").unwrap(), 100);
        let e = parse_percent("150%").unwrap_err().to_string();
        assert!(e.contains("150%") && e.contains("between 0 and 100"), "{e}");
    }
}
