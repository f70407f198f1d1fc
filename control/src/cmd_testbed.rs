//! `flowlane testbed ...`: the veth test bed's commands over
//! `flowlane-testbed` (up, down, status, impair, delay, set-rss).

use anyhow::{bail, Result};
use clap::Subcommand;
use flowlane_numa_sched::nic::RssNic;
use flowlane_testbed::delay_line::{self, DelayConfig};
use flowlane_testbed::impair::{self, parse_percent, parse_rate, ImpairSpec, ImpairStatus};
use flowlane_testbed::{self as testbed, netns};

use flowlane_apps::service::ServiceSignals;
use flowlane_dataplane::service_args::{
    queue_count, queue_number, rss_key, rss_key_value, table_size,
};
use flowlane_numa_sched::toeplitz::RssKey;
use flowlane_numa_sched::IndirectionTable;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BedName {
    /// Test bed name (namespaces flowlane-NAME and flowlane-NAME-peer).
    // `--name`: the old spelling, hidden, kept for scripts.
    #[arg(
        long = "bed",
        alias = "name",
        value_name = "NAME",
        default_value = "fl0"
    )]
    name: String,
}

/// `flowlane testbed ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum TestbedCmd {
    /// Create the test bed (idempotent). Refuses a bed that flowlane
    /// services use (naming them), and one this run directory
    /// (FLOWLANE_RUN_DIR) has no record of, unless --force.
    Up {
        #[command(flatten)]
        bed: BedName,
        /// Queues of the veth pair.
        #[arg(long, default_value_t = 4, value_parser = queue_count::<u32>)]
        queues: u32,
        /// Toeplitz key, hex (ethtool style aa:bb:.. or plain); default: the
        /// Microsoft verification key.
        #[arg(long, value_parser = rss_key)]
        key: Option<RssKey>,
        /// Indirection table entries (power of two).
        #[arg(long, default_value_t = 128, value_parser = table_size)]
        table_size: usize,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Rebuild a bed in use: stop its services first (SIGTERM, then
        /// SIGKILL after 5 s); remove a bed of this name that this run
        /// directory has no record of first (another FLOWLANE_RUN_DIR's, or
        /// one made by hand).
        #[arg(long)]
        force: bool,
    },
    /// Remove the test bed and everything `up` made; services using it are
    /// named and stopped first (SIGTERM, then SIGKILL after 5 s). Refuses a
    /// bed whose namespaces exist but that this run directory
    /// (FLOWLANE_RUN_DIR) has no record of (no state file, or one of
    /// namespaces removed since), unless --force.
    Down {
        #[command(flatten)]
        bed: BedName,
        /// Remove the bed's namespaces and pins even when this run
        /// directory has no record of it (another FLOWLANE_RUN_DIR's bed,
        /// or one made by hand).
        #[arg(long)]
        force: bool,
    },
    /// Show the test bed and its emulated NIC.
    Status {
        #[command(flatten)]
        bed: BedName,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Impair the link (loss, duplication, corruption, reordering, ECN CE
    /// marking) both ways, in BPF: this kernel has no sch_netem.
    Impair(ImpairArgs),
    /// Delay the link both ways (a user-space delay line: this kernel has no
    /// sch_netem). Runs until SIGTERM/SIGINT, then removes itself.
    Delay(DelayArgs),
    /// Program the emulated NIC's RSS, through the same interface as a
    /// real NIC's. Refuses a bed that flowlane services use (naming them)
    /// unless --force.
    SetRss {
        #[command(flatten)]
        bed: BedName,
        /// New Toeplitz key (hex).
        #[arg(long, value_parser = rss_key_value)]
        key: Option<RssKey>,
        /// Spread the table evenly over these queues (comma-separated).
        #[arg(
            long,
            value_delimiter = ',',
            value_name = "Q,Q,...",
            value_parser = queue_number::<u16>
        )]
        spread: Option<Vec<u16>>,
        /// Explicit table: one queue per bucket, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            value_parser = queue_number::<u32>,
            conflicts_with = "spread"
        )]
        table: Option<Vec<u32>>,
        /// The old spelling of `--spread` (a list), refused with a hint:
        /// `--queues` is a count everywhere else.
        #[arg(long, hide = true, value_parser = queues_became_spread)]
        queues: Option<String>,
        /// Reprogram a bed that flowlane services use: their model of the
        /// NIC (key, table) no longer matches it.
        #[arg(long)]
        force: bool,
    },
}

/// Flags of `flowlane testbed impair`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ImpairArgs {
    #[command(flatten)]
    bed: BedName,
    /// Packet loss, percent.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    loss: Option<u32>,
    /// Duplicated packets, percent.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    duplicate: Option<u32>,
    /// Corrupted packets (one bit flipped after the IP header), percent.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    corrupt: Option<u32>,
    /// Reordered packets (sent through the slow path), percent.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    reorder: Option<u32>,
    /// Packets marked CE (ECN congestion experienced, RFC 3168), percent;
    /// only ECN-capable (ECT) packets are marked, Not-ECT ones pass as
    /// they are.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    ce: Option<u32>,
    /// Rate of the slow path (tc rate syntax: a number and a unit, such as
    /// 100mbit or 10kbps; at least 8bit; default 100mbit): it sets the
    /// reordering delay.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    slow_rate: Option<u64>,
    /// Remove every impairment (and the slow path); takes no impairment
    /// flags.
    #[arg(long)]
    clear: bool,
}

/// An indirection table compactly: runs of one queue as `Q×N`, and a table
/// that repeats a pattern as the pattern once and `×count` (the even
/// spread over queues 0 and 1 of 128 entries is `[0 1] ×64`).
fn table_runs(table: &[u32]) -> String {
    let runs = |t: &[u32]| {
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < t.len() {
            let n = t[i..].iter().take_while(|&&q| q == t[i]).count();
            out.push(if n == 1 {
                t[i].to_string()
            } else {
                format!("{}×{n}", t[i])
            });
            i += n;
        }
        out.join(" ")
    };
    let period = (1..table.len())
        .filter(|p| table.len() % p == 0)
        .find(|&p| table.iter().enumerate().all(|(i, q)| *q == table[i % p]));
    match period {
        Some(p) => format!("[{}] ×{}", runs(&table[..p]), table.len() / p),
        None => runs(table),
    }
}

/// A percentage from parts per million, as the flags take it.
fn percent(ppm: u32) -> String {
    format!("{}%", f64::from(ppm) / 10_000.0)
}

/// `testbed status`'s impairment lines: the settings in force, then each
/// direction's counters.
fn impairment_lines(imp: &ImpairStatus) -> Vec<String> {
    let c = &imp.settings;
    let mut out = vec![format!(
        "impairment (both ways): loss {}, duplicate {}, corrupt {}, reorder {}, ce {}",
        percent(c.loss_ppm),
        percent(c.duplicate_ppm),
        percent(c.corrupt_ppm),
        percent(c.reorder_ppm),
        percent(c.ce_ppm)
    )];
    for (dir, st) in [
        ("to flowlane", &imp.to_flowlane),
        ("from flowlane", &imp.from_flowlane),
    ] {
        out.push(format!(
            "  {dir}: {} packets seen, {} lost, {} duplicated, {} corrupted, {} reordered, {} CE-marked",
            st.seen, st.lost, st.duplicated, st.corrupted, st.reordered, st.ce_marked
        ));
    }
    out
}

/// `--slow-rate`'s default, 100mbit.
const DEFAULT_SLOW_RATE_BIT: u64 = 100_000_000;

/// Usage a command refuses itself: one line and exit 2, as clap's own
/// refusals (`message` without its newline).
fn usage(kind: clap::error::ErrorKind, message: &str) -> anyhow::Error {
    clap::Error::raw(kind, format!("{message}\n")).into()
}

impl ImpairArgs {
    /// The impairment flags given (all refused with `--clear`).
    fn impairment_flags(&self) -> Vec<&'static str> {
        [
            (self.loss.is_some(), "--loss"),
            (self.duplicate.is_some(), "--duplicate"),
            (self.corrupt.is_some(), "--corrupt"),
            (self.reorder.is_some(), "--reorder"),
            (self.ce.is_some(), "--ce"),
            (self.slow_rate.is_some(), "--slow-rate"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }

    /// The impairments the flags ask for (their values are parts per
    /// million already: clap checked them; a flag not given is 0).
    fn spec(&self) -> ImpairSpec {
        ImpairSpec {
            loss_ppm: self.loss.unwrap_or(0),
            duplicate_ppm: self.duplicate.unwrap_or(0),
            corrupt_ppm: self.corrupt.unwrap_or(0),
            reorder_ppm: self.reorder.unwrap_or(0),
            ce_ppm: self.ce.unwrap_or(0),
            slow_rate_bit: self.slow_rate.unwrap_or(DEFAULT_SLOW_RATE_BIT),
        }
    }
}

/// Flags of `flowlane testbed delay`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DelayArgs {
    #[command(flatten)]
    bed: BedName,
    /// One-way delay in milliseconds, added in each direction (the round
    /// trip grows by twice this). Fractions are allowed (0.5).
    #[arg(long, allow_negative_numbers = true)]
    ms: f64,
    /// Most bytes held in the line at once (both directions and all lanes
    /// together); frames beyond are dropped, like a full link buffer
    /// (netem's `limit`).
    #[arg(long, default_value_t = 256)]
    limit_mb: usize,
    /// Receive buffer of each lane's socket (MiB): frames waiting for the
    /// line beyond it are dropped, as by a router whose queue is full. A
    /// larger buffer trades loss for queueing delay when the line (this
    /// host's CPU) cannot keep up. 1 to 1023: the kernel holds a socket's
    /// receive buffer under 1 GiB.
    #[arg(long, default_value_t = 8, value_parser = socket_buffer_mb)]
    socket_buffer_mb: usize,
    /// Threads (lanes) of the line, each with its own socket in a hash
    /// fanout group, so that every flow stays in one lane (default: one per
    /// CPU).
    #[arg(long)]
    lanes: Option<usize>,
    /// Make the line a bottleneck: each direction is sent at this rate
    /// (Mbit/s) through a drop-tail queue (`--queue-kb`). The line then runs
    /// one lane, since a rate belongs to the whole direction.
    #[arg(long)]
    rate_mbit: Option<f64>,
    /// Drop-tail queue of each direction's bottleneck (KiB); default: one
    /// bandwidth-delay product (rate × 2·ms), at least 96 KiB (a full GSO
    /// frame).
    #[arg(long, requires = "rate_mbit")]
    queue_kb: Option<usize>,
    /// Print JSON lines on stdout: `{"event":"ready",...}` once frames are
    /// being delayed (the banner goes to stderr), then the final report as
    /// one line.
    #[arg(long)]
    json: bool,
}

impl DelayArgs {
    fn config(&self) -> DelayConfig {
        DelayConfig {
            ms: self.ms,
            limit_mb: self.limit_mb,
            socket_buffer_mb: self.socket_buffer_mb,
            lanes: self.lanes,
            rate_mbit: self.rate_mbit,
            queue_kb: self.queue_kb,
        }
    }
}

/// The largest `--socket-buffer-mb` the kernel honours: it takes at most
/// `INT_MAX / 2` bytes for `SO_RCVBUFFORCE` (net/core/sock.c,
/// `__sock_set_rcvbuf`), 1 GiB less a byte, so 1023 whole MiB.
const MAX_SOCKET_BUFFER_MB: usize = (i32::MAX as usize / 2) >> 20;

/// `testbed delay --socket-buffer-mb`: 1 to [`MAX_SOCKET_BUFFER_MB`]; a
/// larger buffer would be cut by the kernel without a word.
fn socket_buffer_mb(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(mb) if (1..=MAX_SOCKET_BUFFER_MB).contains(&mb) => Ok(mb),
        _ => Err(format!(
            "give 1 to {MAX_SOCKET_BUFFER_MB} (MiB; the kernel caps a socket's receive buffer there)"
        )),
    }
}

/// Stops the services that use bed `name`, saying which (on stderr when
/// stdout carries JSON; `what`: the command, for the root check).
fn report_stopped(name: &str, what: &str, json: bool) -> Result<()> {
    testbed::state::validate_name(name)?;
    netns::require_bed_privileges(what)?;
    let stopped = testbed::stop_users(name, testbed::users::STOP_GRACE)?;
    if !stopped.is_empty() {
        let line = format!(
            "test bed {name}: stopped {}",
            testbed::users::list(&stopped)
        );
        if json {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
    }
    Ok(())
}

/// `testbed set-rss --queues` took a list of queues; it is `--spread` now,
/// and `--queues` is a count everywhere else.
fn queues_became_spread(_: &str) -> std::result::Result<String, String> {
    Err(
        "testbed set-rss takes the queues to spread the table over as --spread Q,Q,... \
         (--queues is a number of queues everywhere else)"
            .into(),
    )
}

/// Runs one `flowlane testbed` command.
pub(crate) fn run(cmd: TestbedCmd) -> Result<()> {
    // Every bed command reads or writes namespaces or pinned BPF maps: say
    // so before anything else can fail for want of privileges.
    netns::require_bed_privileges("flowlane testbed")?;
    netns::require_host_namespace("flowlane testbed")?;
    match cmd {
        TestbedCmd::Up {
            bed,
            queues,
            key,
            table_size,
            json,
            force,
        } => {
            let key = key.unwrap_or_else(RssKey::microsoft_default);
            let all: Vec<u16> = (0..queues.min(u16::MAX as u32) as u16).collect();
            let spec = testbed::BedSpec {
                name: bed.name,
                queues,
                key: key.as_bytes().to_vec(),
                table: IndirectionTable::even(table_size, &all)?.to_queue_list(),
            };
            // The flags are checked before anything is stopped or removed
            // (`up` checks them again, under the bed's lock).
            spec.validate()?;
            if force {
                report_stopped(&spec.name, "flowlane testbed up", json)?;
                // `up` leaves a bed it has no record of alone.
                if testbed::bed::unrecorded(&spec.name)? {
                    testbed::down(&spec.name)?;
                }
            }
            let s = testbed::up(&spec)?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                outln!(
                    "test bed {} up: {} ({} {} {}) <-> {} ({} {} {}), {} queues",
                    s.name,
                    s.netns,
                    s.local_if,
                    s.local_v4,
                    s.local_v6,
                    s.peer_netns,
                    s.peer_if,
                    s.peer_v4,
                    s.peer_v6,
                    s.queues
                );
            }
        }
        TestbedCmd::Down { bed, force } => {
            // Before anything is stopped.
            if !force && testbed::bed::unrecorded(&bed.name)? {
                bail!(
                    "test bed {0} has namespaces but no record in {1}: it may be another \
                     FLOWLANE_RUN_DIR's bed or one made by hand; set FLOWLANE_RUN_DIR to its run \
                     directory, or pass --force to `flowlane testbed down` to remove it anyway",
                    bed.name,
                    testbed::state::state_dir().display()
                );
            }
            report_stopped(&bed.name, "flowlane testbed down", false)?;
            if testbed::down(&bed.name)? {
                outln!("test bed {} removed", bed.name);
            } else {
                outln!("test bed {} was not up", bed.name);
            }
        }
        TestbedCmd::Status { bed, json } => {
            let st = testbed::status(&bed.name)?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                let s = &st.state;
                outln!(
                    "test bed {}: {}",
                    s.name,
                    if st.intact {
                        "up"
                    } else {
                        "BROKEN (run `flowlane testbed down`)"
                    }
                );
                outln!(
                    "  {} {} {} {} {}",
                    s.netns,
                    s.local_if,
                    s.local_v4,
                    s.local_v6,
                    s.local_mac
                );
                outln!(
                    "  {} {} {} {} {}",
                    s.peer_netns,
                    s.peer_if,
                    s.peer_v4,
                    s.peer_v6,
                    s.peer_mac
                );
                outln!(
                    "  xdp on {}: {}",
                    s.local_if,
                    st.xdp.as_deref().unwrap_or("none")
                );
                outln!("  RSS key {}", st.key);
                outln!(
                    "  indirection table: {} entries: {}",
                    st.table_size,
                    table_runs(&st.table)
                );
                for (q, n) in st.queue_packets.iter().enumerate() {
                    outln!("  queue {q}: {n} packets steered");
                }
                match &st.impairment {
                    Some(imp) => {
                        for l in impairment_lines(imp) {
                            outln!("  {l}");
                        }
                    }
                    None => outln!("  impairment: none"),
                }
                if st.users.is_empty() {
                    outln!("  used by: no flowlane service");
                }
                for u in &st.users {
                    outln!("  used by: {u}");
                }
            }
        }
        TestbedCmd::Impair(args) => {
            let given = args.impairment_flags();
            if args.clear && !given.is_empty() {
                return Err(usage(
                    clap::error::ErrorKind::ArgumentConflict,
                    &format!(
                        "testbed impair --clear removes every impairment and takes no {}: give \
                         --clear alone, or the impairments without it",
                        given.join(" or ")
                    ),
                ));
            }
            let s = testbed::load(&args.bed.name)?;
            let spec = args.spec();
            if args.clear {
                impair::clear(&s)?;
            } else {
                impair::apply(&s, &spec)?;
            }
            match impair::status(&s)? {
                Some(st) => outln!(
                    "test bed {} impairment: {}",
                    s.name,
                    serde_json::to_string(&st)?
                ),
                None => outln!("test bed {} unimpaired", s.name),
            }
        }
        TestbedCmd::Delay(args) => {
            let s = testbed::load(&args.bed.name)?;
            let signals = ServiceSignals::install()?;
            let (name, ms) = (s.name.clone(), args.ms);
            let config = args.config();
            let bottleneck = delay_line::bottleneck(
                config.rate_mbit,
                config.queue_kb,
                delay_line::delay_from_ms(ms)?,
            )?;
            let rate = bottleneck.as_ref().map_or(String::new(), |b| {
                format!(
                    ", each direction at {} Mbit/s through a {} KiB drop-tail queue",
                    b.bits_per_sec as f64 / 1e6,
                    b.queue_bytes / 1024
                )
            });
            let banner = format!(
                "test bed {name}: delaying both directions by {ms} ms (round trip +{} ms){rate}; SIGTERM stops it",
                2.0 * ms
            );
            // With --json, stdout is JSON lines: this ready line, then the
            // report; the banner goes to stderr.
            let ready = serde_json::json!({
                "event": "ready",
                "bed": name,
                "one_way_ms": ms,
                "round_trip_ms": 2.0 * ms,
                "bottleneck": bottleneck.as_ref().map(|b| serde_json::json!({
                    "bits_per_sec": b.bits_per_sec,
                    "queue_bytes": b.queue_bytes,
                })),
            });
            let json = args.json;
            let stop = move || signals.stop_requested();
            let report = delay_line::run(&s, &config, stop, move || {
                if json {
                    eprintln!("{banner}");
                    outln!("{ready}");
                } else {
                    outln!("{banner}");
                }
            })?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                let q = &report.queue;
                outln!(
                    "delay line stopped after {:.1} s: {} frames ({} bytes) delayed, {} dropped (line full), {} dropped by the socket, {} too large, {} refused; late by {:.0} µs on average, {:.0} µs at worst ({} frames over 10 %)",
                    report.seconds, q.frames_out, q.bytes_in, q.dropped_full, report.socket_drops,
                    report.truncated, report.refused, report.mean_late_us, report.max_late_us, report.late_frames
                );
                if report.unsupported_gso != 0 || report.unaccounted != 0 {
                    outln!(
                        "{} frames dropped by the kernel as the line read them (a GSO type without a virtio-net header), {} sent into the line and never seen by it",
                        report.unsupported_gso, report.unaccounted
                    );
                }
                if report.rate_mbit.is_some() {
                    outln!(
                        "bottleneck: {} frames dropped towards the peer (queue peaked at {} bytes), {} towards flowlane's side (peak {} bytes)",
                        q.bottleneck_to_peer.dropped, q.bottleneck_to_peer.peak_queue_bytes,
                        q.bottleneck_from_peer.dropped, q.bottleneck_from_peer.peak_queue_bytes
                    );
                }
            }
        }
        TestbedCmd::SetRss {
            bed,
            key,
            spread,
            table,
            queues: _,
            force,
        } => {
            if key.is_none() && spread.is_none() && table.is_none() {
                return Err(usage(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "testbed set-rss changes nothing without --key, --spread or --table: give \
                     at least one",
                ));
            }
            let s = testbed::load(&bed.name)?;
            let using = testbed::users(&s.name)?;
            if !force && !using.is_empty() {
                bail!(
                    "test bed {} is in use by {}: reprogramming its RSS would leave {} with a \
                     model of the NIC that no longer matches; stop {} first, or pass --force to \
                     `flowlane testbed set-rss` to reprogram it anyway",
                    s.name,
                    testbed::users::list(&using),
                    if using.len() == 1 { "it" } else { "them" },
                    if using.len() == 1 { "it" } else { "them" },
                );
            }
            let nic = s.nic();
            let caps = nic.caps()?;
            let table = match (spread, table) {
                (Some(q), _) => Some(IndirectionTable::even(caps.table_size, &q)?.to_queue_list()),
                (None, t) => t,
            };
            nic.set_rss(key.as_ref().map(|k| k.as_bytes()), table.as_deref())?;
            outln!("RSS of test bed {} updated", s.name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::ImpairArgs;

    #[derive(Parser, Debug)]
    struct Impair {
        #[command(flatten)]
        args: ImpairArgs,
    }

    fn parse(flags: &[&str]) -> Result<ImpairArgs, clap::Error> {
        Impair::try_parse_from([&["impair"][..], flags].concat()).map(|i| i.args)
    }

    #[test]
    fn a_table_shows_as_runs_and_repeats() {
        use super::table_runs;
        assert_eq!(
            table_runs(&flowlane_numa_sched::nic::even_table(128, 2)),
            "[0 1] ×64"
        );
        assert_eq!(table_runs(&[3, 3, 3, 3]), "[3] ×4");
        assert_eq!(table_runs(&[0, 0, 1, 2, 2, 2]), "0×2 1 2×3");
        assert_eq!(table_runs(&[0, 0, 1, 1, 0, 0, 1, 1]), "[0×2 1×2] ×2");
        assert_eq!(table_runs(&[5]), "5");
    }

    #[test]
    fn clear_takes_no_impairment_flags() {
        assert!(parse(&["--clear"]).unwrap().impairment_flags().is_empty());
        let a = parse(&["--clear", "--loss", "5", "--slow-rate", "1mbit"]).unwrap();
        assert_eq!(a.impairment_flags(), ["--loss", "--slow-rate"]);
    }

    #[test]
    fn a_bad_slow_rate_is_refused_at_parsing() {
        for bad in ["10xyz", "0"] {
            let e = parse(&["--slow-rate", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            let text = e.render().to_string();
            let line = text.lines().next().unwrap();
            assert!(line.contains("--slow-rate") && line.contains(bad), "{line}");
        }
        assert_eq!(parse(&[]).unwrap().spec().slow_rate_bit, 100_000_000);
        assert_eq!(
            parse(&["--slow-rate", "10kbit"])
                .unwrap()
                .spec()
                .slow_rate_bit,
            10_000
        );
    }

    #[test]
    fn ce_marking_is_a_percentage_like_the_other_impairments() {
        let spec = parse(&["--ce", "2%"]).unwrap().spec();
        assert_eq!(spec.ce_ppm, 20_000);
        assert_eq!((spec.loss_ppm, spec.reorder_ppm), (0, 0));
        let spec = parse(&["--ce", "0.5", "--loss", "1"]).unwrap().spec();
        assert_eq!((spec.ce_ppm, spec.loss_ppm), (5_000, 10_000));
        assert_eq!(parse(&[]).unwrap().spec().ce_ppm, 0);
    }

    #[test]
    fn a_bad_ce_value_is_one_line_naming_the_flag_and_the_value() {
        for (bad, why) in [("150%", "between 0 and 100"), ("lots", "not a percentage")] {
            let e = parse(&["--ce", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            let text = e.render().to_string();
            let line = text.lines().next().unwrap();
            assert!(
                line.contains("--ce") && line.contains(bad) && line.contains(why),
                "{line}"
            );
        }
    }
}
