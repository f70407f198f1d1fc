//! The command-line flags every flowlane data-path program shares (the
//! example services and flowlane-ttcp's flowlane backend), declared once,
//! and the parsers of the values that recur across `flowlane`'s commands
//! (`--port`, `--queues`, `--key`): each user error is worded here, once, in
//! the flag's terms. Behind the `cli` feature, so that the data path itself
//! does not depend on clap.
//!
//! The data path's own errors name the configuration's fields
//! (`TcpServiceConfig::listen`) for the library's users; [`cli_terms`] is
//! the one place that says them in these flags' terms (`--port`), for the
//! programs that print them.

use std::fmt::Display;
use std::str::FromStr;

use flowlane_numa_sched::nic::RssSettings;
use flowlane_numa_sched::toeplitz::RssKey;

use crate::ephemeral::EPHEMERAL;
use crate::{Error, Result};

/// Flags of a program on the data path.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataPathArgs {
    /// Run on this test bed: reads its emulated NIC's RSS key/table and the
    /// peer's MAC, then re-executes itself inside the bed's namespace
    /// (flowlane-NAME) with them as `--rss-key/--rss-table/--neighbor`. Run
    /// it from the root namespace.
    #[arg(long, value_name = "NAME")]
    pub bed: Option<String>,
    /// Number of queues to serve, from queue 0, one worker each (default:
    /// all of the interface's).
    #[arg(long, value_parser = queue_count::<u32>)]
    pub queues: Option<u32>,
    /// The NIC's Toeplitz key (hex), for RSS-steered ports of active opens
    /// (`--bed` sets it).
    #[arg(long, value_parser = rss_key_value)]
    pub rss_key: Option<RssKey>,
    /// The NIC's indirection table, one queue per bucket, comma-separated
    /// (`--bed` sets it).
    #[arg(long, value_delimiter = ',', value_parser = queue_number::<u32>)]
    pub rss_table: Option<Vec<u32>>,
    /// The test bed's emulated-NIC table map id (`--bed` sets it): what
    /// `--rebalance` writes to move a bucket.
    #[arg(long, value_name = "ID", hide = true)]
    pub rss_table_map: Option<u32>,
    /// Static neighbour `IP=MAC` (repeatable; `--bed` sets the peer's); the
    /// kernel's table and received frames add more.
    #[arg(long)]
    pub neighbor: Vec<String>,
    /// Workers spin when idle instead of sleeping in poll(2).
    #[arg(long)]
    pub busy_poll: bool,
    /// UMEM frames (2 KiB each) every queue owns: all the buffering between
    /// the NIC and its worker, and (half of them) the TCP receive memory the
    /// queue's connections share. A power of two from 4096 to 1048576;
    /// default 32768 (64 MiB per queue). With a thousand connections and
    /// more per queue, 131072 gives each a larger window (BENCHMARKS.md).
    #[arg(long, value_name = "N", value_parser = frames_per_queue)]
    pub frames_per_queue: Option<u32>,
    /// Send memory of every queue (flowlane's TCP) or core (kernel
    /// sockets), in MiB from 1 to 65536: the bytes written and not yet
    /// acknowledged (not yet taken by the socket) its connections hold
    /// together. Past it a write is cut short and the connection hears
    /// `Writable` when memory is given back (`tx_memory_waits` counts
    /// them). Default 256 MiB. Held as bytes.
    #[arg(long, value_name = "MIB", value_parser = send_memory)]
    pub send_memory: Option<usize>,
    /// Copy every received TCP payload into the connection's buffer and
    /// give its frame back at once, instead of leaving full-sized in-order
    /// payload in its frame until the application reads it (zero-copy
    /// receive, the default; a queue holds at most a quarter of its frames
    /// so).
    #[arg(long)]
    pub copy_receive: bool,
    /// Congestion control of the TCP connections: `cubic` (RFC 9438, with
    /// HyStart++ of RFC 9406; the default) or `newreno` (RFC 5681 and RFC
    /// 6582).
    #[arg(long, value_enum, default_value_t)]
    pub congestion: CongestionChoice,
    /// ECN (RFC 3168) of the TCP connections, as Linux's `tcp_ecn`:
    /// `accept` it when a peer's SYN asks (the default), `on` to ask in our
    /// own SYNs too, `off`.
    #[arg(long, value_enum, default_value_t)]
    pub ecn: EcnChoice,
}

/// `--ecn`: whether TCP connections negotiate ECN.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EcnChoice {
    /// Never.
    Off,
    /// When the peer asks (the stack's default).
    #[default]
    Accept,
    /// Ask in our SYNs too.
    On,
}

impl EcnChoice {
    /// The stack's mode for this choice (for `flowlane_tcp::Config::ecn`).
    pub fn mode(self) -> flowlane_tcp::EcnMode {
        match self {
            EcnChoice::Off => flowlane_tcp::EcnMode::Off,
            EcnChoice::Accept => flowlane_tcp::EcnMode::Accept,
            EcnChoice::On => flowlane_tcp::EcnMode::On,
        }
    }
}

/// `--congestion`: the TCP congestion control algorithm.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CongestionChoice {
    /// NewReno.
    #[value(name = "newreno")]
    NewReno,
    /// CUBIC with HyStart++ (the stack's default).
    #[default]
    Cubic,
}

impl CongestionChoice {
    /// The stack's algorithm for this choice (for `flowlane_tcp::Config::congestion`).
    pub fn algorithm(self) -> flowlane_tcp::CongestionAlgorithm {
        match self {
            CongestionChoice::NewReno => flowlane_tcp::CongestionAlgorithm::NewReno,
            CongestionChoice::Cubic => flowlane_tcp::CongestionAlgorithm::Cubic,
        }
    }
}

/// Which TCP a service runs on.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Backend {
    /// flowlane's TCP on the AF_XDP data path, one stack per queue.
    #[default]
    Xdp,
    /// Linux TCP sockets, one pinned event loop per core with
    /// `SO_REUSEPORT` listeners (where AF_XDP is not available, and the
    /// baseline): the same handlers, no RSS buckets, no moves.
    Kernel,
}

/// Where a TCP service's handlers run.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// On the network cores, inline with packet processing.
    #[default]
    Rtc,
    /// On application threads that talk to the network cores through
    /// per-core request and event queues (queue-pair mode).
    #[value(name = "queue-pair")]
    QueuePair,
}

/// Whether a TCP service moves RSS buckets between its queues.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RebalanceMode {
    /// Never: the table stays as it was when the service started.
    #[default]
    Off,
    /// When the queues' load is skewed (numa-sched's policy).
    Auto,
}

pub use crate::auto_rebalance::MovePrice;

/// The rebalancing flags of a TCP service, and its control socket.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RebalanceArgs {
    /// Move RSS buckets, with their live connections, from busy queues to
    /// idle ones (`auto`) or never (`off`). Default: `auto` where buckets
    /// can move (several queues, a worker per queue, a NIC whose table
    /// flowlane can write: `--bed`, or a NIC with RSS), `off` elsewhere.
    #[arg(long, value_enum)]
    pub rebalance: Option<RebalanceMode>,
    /// What `--rebalance auto` prices a bucket move at, against the load it
    /// takes off the busier core: `learned` from the moves made (their
    /// measured durations; the configured 20 µs + 2 µs a connection until
    /// moves are made, and again once they are old), or always that
    /// configured price (`fixed`).
    #[arg(long, value_enum, default_value_t = MovePrice::Learned)]
    pub move_cost: MovePrice,
    /// For tests: move a random bucket that has connections to another
    /// queue every MS milliseconds, whatever the load (a rebalancing storm).
    #[arg(long, value_name = "MS", hide = true)]
    pub rebalance_storm_ms: Option<u64>,
    /// The Unix socket `flowlane rebalance status|move` talks to (default:
    /// /run/flowlane/SERVICE.PID.sock; `none`: no socket).
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<std::path::PathBuf>,
    /// The daemon's socket, where the service announces its control socket
    /// if a daemon runs (default: /run/flowlane-daemon/daemon.sock; `none`:
    /// do not register).
    #[arg(long, value_name = "PATH")]
    pub daemon_socket: Option<std::path::PathBuf>,
}

impl RebalanceArgs {
    /// The loop these flags ask for explicitly (`--rebalance auto`, the
    /// storm), if any: a service that cannot run it refuses to start.
    pub fn requested(&self) -> Option<crate::auto_rebalance::Mode> {
        use crate::auto_rebalance::Mode;
        match (self.rebalance_storm_ms, self.rebalance) {
            (Some(ms), _) => Some(Mode::Storm {
                interval: std::time::Duration::from_millis(ms.max(1)),
            }),
            (None, Some(RebalanceMode::Auto)) => Some(Mode::Auto(self.move_cost)),
            (None, Some(RebalanceMode::Off) | None) => None,
        }
    }

    /// Refuses a move price with no loop to price: `--move-cost fixed`
    /// beside an explicit `--rebalance off` (and no storm, which moves
    /// whatever the price). One line that says what to do.
    pub fn refuse_unpriced(&self) -> std::result::Result<(), String> {
        let off = self.rebalance == Some(RebalanceMode::Off) && self.requested().is_none();
        if off && self.move_cost != MovePrice::Learned {
            return Err(
                "--move-cost fixed prices the moves of --rebalance auto, and --rebalance \
                 off makes none: drop --move-cost, or use --rebalance auto"
                    .into(),
            );
        }
        Ok(())
    }

    /// What the flags say about the loop: the default, off, or a loop
    /// asked for ([`crate::auto_rebalance::Wish::choose`] decides).
    pub fn wish(&self) -> crate::auto_rebalance::Wish {
        use crate::auto_rebalance::Wish;
        match (self.requested(), self.rebalance) {
            (Some(mode), _) => Wish::Run(mode),
            (None, Some(_)) => Wish::Off,
            (None, None) => Wish::Default(self.move_cost),
        }
    }

    /// The daemon to register with, as these flags say (None: none).
    pub fn daemon(&self) -> Option<std::path::PathBuf> {
        match &self.daemon_socket {
            None => Some(crate::control_socket::DAEMON_SOCKET.into()),
            Some(p) if p.as_os_str() == "none" => None,
            Some(p) => Some(p.clone()),
        }
    }

    /// Where the control socket goes, as these flags say.
    pub fn socket(&self) -> crate::service_control::SocketChoice {
        use crate::service_control::SocketChoice;
        match &self.control_socket {
            None => SocketChoice::Default,
            Some(p) if p.as_os_str() == "none" => SocketChoice::Off,
            Some(p) => SocketChoice::At(p.clone()),
        }
    }
}

impl DataPathArgs {
    /// The NIC's RSS as given by `--rss-key/--rss-table`: None when neither
    /// is given; an error when only one is, or the key is not hex.
    pub fn rss_settings(&self) -> Result<Option<RssSettings>> {
        match (&self.rss_key, &self.rss_table) {
            (Some(k), Some(t)) => Ok(Some(RssSettings {
                key: k.as_bytes().to_vec(),
                table: t.clone(),
            })),
            (None, None) => Ok(None),
            _ => Err(Error::Setup(
                "--rss-key and --rss-table go together (or use --bed NAME)".into(),
            )),
        }
    }
}

/// A flag's bad value as one line, `error: invalid value 'V' for 'FLAG':
/// why` (clap's rendering less its "try --help" footer), for a program to
/// print after its name like every other user error (`flowlane`,
/// `flowlane-ttcp`).
pub fn value_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    text.lines().next().unwrap_or_default().to_string()
}

/// `--port`: a port to listen on, 1-65535 (0 would let the kernel choose,
/// which a data-path service cannot).
pub fn listen_port(text: &str) -> std::result::Result<u16, String> {
    match text.trim().parse::<u16>() {
        Ok(0) | Err(_) => Err("a port must be 1-65535".into()),
        Ok(p) => Ok(p),
    }
}

/// The integer types a count of queues is read into ([`queue_count`]).
pub trait Count: FromStr<Err = std::num::ParseIntError> + PartialEq + Default + Display {
    /// The largest count the type holds.
    const MAX: Self;
}

impl Count for u16 {
    const MAX: u16 = u16::MAX;
}

impl Count for u32 {
    const MAX: u32 = u32::MAX;
}

/// `--queues N`: a number of queues, at least 1 (everywhere `--queues` is a
/// count; a list of queues has its own flag), at most what `T` holds (said
/// so: a count past it is no less a number).
pub fn queue_count<T: Count>(text: &str) -> std::result::Result<T, String> {
    match text.trim().parse::<T>() {
        Ok(n) if n != T::default() => Ok(n),
        Ok(_) => Err("must be at least 1 (a number of queues)".into()),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(format!("at most {} (a number of queues)", T::MAX))
        }
        Err(_) => Err("expected a number of queues (at least 1)".into()),
    }
}

/// One entry of a comma-separated list of queues (`--rss-table`, and the
/// tables and spreads of `hint`, `nic set-rss`, `testbed set-rss`,
/// `udp-ping`): a queue number, said so when it is not one (it was Rust's
/// "invalid digit found in string").
pub fn queue_number<T: Count>(text: &str) -> std::result::Result<T, String> {
    text.trim().parse::<T>().map_err(|e| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            format!(
                "{text:?} is past the last queue number this takes ({})",
                T::MAX
            )
        } else {
            format!(
                "{text:?} is not a queue number: give queue numbers separated by commas, \
                 e.g. 0,1,2,3"
            )
        }
    })
}

/// `--frames-per-queue N`: UMEM frames per queue (see
/// [`crate::umem::RingSizes::with_frames`]).
pub fn frames_per_queue(text: &str) -> std::result::Result<u32, String> {
    use crate::umem::RingSizes;
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|&n| RingSizes::with_frames(n).is_ok())
        .ok_or_else(|| {
            format!(
                "must be a power of two from {} to {} (frames of 2 KiB per queue; default {})",
                RingSizes::MIN_FRAMES,
                RingSizes::MAX_FRAMES,
                RingSizes::DEFAULT_FRAMES
            )
        })
}

/// The largest `--send-memory`, in MiB (64 GiB).
pub const SEND_MEMORY_MAX_MIB: usize = 65536;

/// `--send-memory MIB`: a queue's send memory, in MiB from 1 to
/// [`SEND_MEMORY_MAX_MIB`]; the bytes.
pub fn send_memory(text: &str) -> std::result::Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=SEND_MEMORY_MAX_MIB).contains(n))
        .map(|n| n << 20)
        .ok_or_else(|| {
            format!(
                "must be a number of MiB from 1 to {SEND_MEMORY_MAX_MIB} \
                 (send memory per queue; default 256)"
            )
        })
}

/// `--table-size N`: entries of an indirection table, a power of two from 1
/// to 65536.
pub fn table_size(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n.is_power_of_two() && n <= 65536 => Ok(n),
        _ => Err("must be a power of two from 1 to 65536 \
                  (64, 128, 512 and 2048 are common; `ethtool -x` shows a NIC's)"
            .into()),
    }
}

/// One line on stderr's worth: why listening on `port` is a bad idea, if it
/// is inside the range flowlane reserves for the source ports of outgoing
/// connections ([`EPHEMERAL`]).
pub fn ephemeral_port_warning(port: u16) -> Option<String> {
    let (first, last) = EPHEMERAL;
    (first..=last).contains(&port).then(|| {
        format!(
            "warning: --port {port} is inside {first}-{last}, the range flowlane reserves for the \
             source ports of outgoing connections (steered by RSS and kept from the kernel): \
             a connection opened from that port would collide with the listener; pick a port \
             outside it"
        )
    })
}

/// The words of the data path's errors that name a configuration field
/// (what a library user sets), each with what `flowlane`'s services say
/// instead (the flag that sets it): [`cli_terms`].
const FLAG_TERMS: [(&str, &str); 7] = [
    ("another port (TcpServiceConfig::listen)", "another --port"),
    // The kernel-socket backend's (`flowlane_kernel`), whose port is the
    // handler's listen.
    ("another port (SetupExt::listen)", "another --port"),
    (
        crate::iface::NOT_HERE,
        "see `ip link`: use --iface NAME; on a test bed, --bed NAME",
    ),
    (
        "nor given in TcpServiceConfig::rss)",
        "nor given by --rss-table)",
    ),
    ("set TcpServiceConfig::queues to", "use --queues"),
    (
        crate::tcp_service::GIVE_RSS,
        "run on a test bed (--bed), a NIC whose RSS flowlane reads",
    ),
    (
        "opening connections (TcpServiceConfig::active)",
        "opening connections",
    ),
];

/// A data-path error's `message` in the terms of `flowlane`'s flags: each
/// configuration field it names, as the flag that sets it (`choose another
/// port (TcpServiceConfig::listen)` → `choose another --port`), and each
/// `ss` it tells the operator to run as the operator's shell runs it: in
/// this process's named network namespace, where it lives in one (a
/// service started with `--bed` re-executes itself in its bed's: `ip
/// netns exec NAME ss ...`, [`crate::iface::in_netns`]; the libraries,
/// the data path's and the kernel-socket backend's, say a plain `ss`).
/// What a program prints when `TcpService::start`, `Dataplane::start` or
/// a kernel-socket service fails; a program with flags of other names
/// (flowlane-ttcp's `-p`) rewrites this further.
pub fn cli_terms(message: &str) -> String {
    in_terms(message, crate::iface::netns_name().as_deref())
}

/// [`cli_terms`] for a process in the named network namespace `netns`
/// (None: an unnamed one).
fn in_terms(message: &str, netns: Option<&str>) -> String {
    let flags = FLAG_TERMS
        .iter()
        .fold(message.to_string(), |m, (library, flags)| {
            m.replace(library, flags)
        });
    // A command already said for the namespace starts `ip netns exec`.
    flags.replace(
        "`ss ",
        &format!("`{}", crate::iface::in_netns(netns, "ss ")),
    )
}

/// What a key looks like, for the messages of [`rss_key`] and
/// [`rss_key_value`].
const KEY_SHAPE: &str = "an RSS key is 40 bytes (52 on some NICs) written as hex: 80 digits \
     plain (6d5a56da...) or colon-separated bytes (6d:5a:56:da:..., as `ethtool -x` prints it)";

/// The CLI wording of a key that does not parse (clap shows the flag and
/// the value before it): what is wrong with it, from the typed library
/// error, and what a key looks like.
fn key_message(e: &flowlane_numa_sched::Error) -> String {
    use flowlane_numa_sched::Error as E;
    let problem = match e {
        E::KeyTooShort { len } => format!("{len} bytes is too short"),
        E::KeyBadChar { offset, found } => {
            format!("{found:?} at position {} is not a hex digit", offset + 1)
        }
        E::KeyBadGroup { offset, digits } => format!(
            "the byte at position {} has {digits} digit{} instead of two",
            offset + 1,
            if *digits == 1 { "" } else { "s" }
        ),
        E::KeyOddDigits { digits } => format!("{digits} digits is an odd number"),
        other => other.to_string(),
    };
    format!("{problem}; {KEY_SHAPE}")
}

/// `--key HEX` where leaving the flag out means the Microsoft verification
/// key (the default of most NICs).
pub fn rss_key(text: &str) -> std::result::Result<RssKey, String> {
    RssKey::parse_hex(text).map_err(|e| {
        format!(
            "{}; omit --key to use the Microsoft default key",
            key_message(&e)
        )
    })
}

/// A key flag with no default (`testbed set-rss --key`, `--rss-key`).
pub fn rss_key_value(text: &str) -> std::result::Result<RssKey, String> {
    RssKey::parse_hex(text).map_err(|e| key_message(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        data_path: DataPathArgs,
    }

    #[test]
    fn rebalance_flags_say_default_off_or_a_loop() {
        use crate::auto_rebalance::{Mode, Wish};
        #[derive(Parser)]
        struct Rebalanced {
            #[command(flatten)]
            rebalance: RebalanceArgs,
        }
        let wish = |args: &[&str]| {
            Rebalanced::try_parse_from(std::iter::once("svc").chain(args.iter().copied()))
                .expect("flags parse")
                .rebalance
                .wish()
        };
        assert_eq!(wish(&[]), Wish::Default(MovePrice::Learned));
        assert_eq!(wish(&["--rebalance", "off"]), Wish::Off);
        assert_eq!(
            wish(&["--rebalance", "auto"]),
            Wish::Run(Mode::Auto(MovePrice::Learned))
        );
        assert_eq!(
            wish(&["--rebalance", "auto", "--move-cost", "fixed"]),
            Wish::Run(Mode::Auto(MovePrice::Fixed))
        );
        assert_eq!(
            wish(&["--move-cost", "fixed"]),
            Wish::Default(MovePrice::Fixed)
        );
        let refused = |args: &[&str]| {
            Rebalanced::try_parse_from(std::iter::once("svc").chain(args.iter().copied()))
                .expect("flags parse")
                .rebalance
                .refuse_unpriced()
        };
        // Nothing to price with the loop off: refused, in one line.
        let e = refused(&["--rebalance", "off", "--move-cost", "fixed"]).unwrap_err();
        assert!(e.contains("--rebalance auto") && !e.contains('\n'), "{e}");
        for ok in [
            &["--rebalance", "off"][..],
            &["--rebalance", "off", "--move-cost", "learned"],
            &["--rebalance", "auto", "--move-cost", "fixed"],
            &["--move-cost", "fixed"],
            &[
                "--rebalance",
                "off",
                "--rebalance-storm-ms",
                "10",
                "--move-cost",
                "fixed",
            ],
        ] {
            assert_eq!(refused(ok), Ok(()), "{ok:?}");
        }
        let storm = Wish::Run(Mode::Storm {
            interval: std::time::Duration::from_millis(10),
        });
        assert_eq!(wish(&["--rebalance-storm-ms", "10"]), storm);
        assert_eq!(
            wish(&["--rebalance", "off", "--rebalance-storm-ms", "10"]),
            storm
        );
    }

    #[test]
    fn congestion_flag() {
        use flowlane_tcp::CongestionAlgorithm;
        let parse = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("svc").chain(args.iter().copied()))
                .map(|c| c.data_path.congestion.algorithm())
        };
        // CUBIC by default, as the stack itself (and Linux).
        assert_eq!(parse(&[]).unwrap(), CongestionAlgorithm::Cubic);
        assert_eq!(parse(&[]).unwrap(), CongestionAlgorithm::default());
        assert_eq!(
            parse(&["--congestion", "cubic"]).unwrap(),
            CongestionAlgorithm::Cubic
        );
        assert_eq!(
            parse(&["--congestion", "newreno"]).unwrap(),
            CongestionAlgorithm::NewReno
        );
        let e = parse(&["--congestion", "bbr"]).unwrap_err().to_string();
        assert!(e.contains("newreno") && e.contains("cubic"), "{e}");
    }

    #[test]
    fn ecn_flag() {
        use flowlane_tcp::EcnMode;
        let parse = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("svc").chain(args.iter().copied()))
                .map(|c| c.data_path.ecn.mode())
        };
        assert_eq!(parse(&[]).unwrap(), EcnMode::Accept);
        assert_eq!(parse(&["--ecn", "on"]).unwrap(), EcnMode::On);
        assert_eq!(parse(&["--ecn", "off"]).unwrap(), EcnMode::Off);
        let e = parse(&["--ecn", "yes"]).unwrap_err().to_string();
        assert!(e.contains("accept") && e.contains("on"), "{e}");
    }

    #[test]
    fn send_memory_flag() {
        let parse = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("svc").chain(args.iter().copied()))
                .map(|c| c.data_path.send_memory)
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(parse(&["--send-memory", "8"]).unwrap(), Some(8 << 20));
        let e = parse(&["--send-memory", "0"]).unwrap_err().to_string();
        assert!(e.contains("MiB from 1 to"), "{e}");
    }

    #[test]
    fn rss_flags_go_together() {
        let mut a = DataPathArgs::default();
        assert!(a.rss_settings().unwrap().is_none());
        a.rss_key = Some(rss_key_value("6d:5a:56:da").unwrap());
        assert!(a.rss_settings().is_err());
        a.rss_table = Some(vec![0, 1]);
        let s = a.rss_settings().unwrap().unwrap();
        assert_eq!(s.key, vec![0x6d, 0x5a, 0x56, 0xda]);
    }

    #[test]
    fn send_memory_is_mib_from_1_to_the_maximum() {
        assert_eq!(send_memory("1"), Ok(1 << 20));
        assert_eq!(send_memory(" 64 "), Ok(64 << 20));
        assert_eq!(
            send_memory(&SEND_MEMORY_MAX_MIB.to_string()),
            Ok(SEND_MEMORY_MAX_MIB << 20)
        );
        for bad in ["0", "65537", "-1", "1.5", "64M", ""] {
            let why = send_memory(bad).unwrap_err();
            assert!(why.contains("MiB from 1 to 65536"), "{bad:?}: {why}");
            assert!(!why.contains('\n'), "{bad:?}: one line");
        }
    }

    #[test]
    fn frames_per_queue_sizes_every_ring_from_one_number() {
        use crate::umem::RingSizes;
        for n in [4096, 131072, 1 << 20] {
            assert_eq!(frames_per_queue(&n.to_string()), Ok(n));
            let r = RingSizes::with_frames(n).unwrap();
            // Every free frame fits in the fill ring, every filled one in RX.
            assert_eq!((r.frames_per_queue, r.fill, r.rx), (n, 2 * n, n));
        }
        for bad in ["0", "4095", "6000", "2097152", "-1", "many"] {
            assert!(frames_per_queue(bad).unwrap_err().contains("power of two"));
        }
        assert_eq!(
            RingSizes::default().frames_per_queue,
            RingSizes::DEFAULT_FRAMES
        );
    }

    #[test]
    fn ports_are_1_to_65535() {
        assert_eq!(listen_port("80"), Ok(80));
        assert_eq!(listen_port("65535"), Ok(65535));
        for bad in ["0", "65536", "-1", "http"] {
            assert_eq!(listen_port(bad).unwrap_err(), "a port must be 1-65535");
        }
    }

    #[test]
    fn queue_counts_are_at_least_one() {
        assert_eq!(queue_count::<u32>("4"), Ok(4));
        assert_eq!(queue_count::<u16>("1"), Ok(1));
        assert!(queue_count::<u32>("0").unwrap_err().contains("at least 1"));
        let list = queue_count::<u16>("0,2").unwrap_err();
        assert!(list.contains("number of queues"), "{list}");
        assert_eq!(
            queue_count::<u16>("65536").unwrap_err(),
            "at most 65535 (a number of queues)"
        );
    }

    #[test]
    fn queue_numbers_say_what_a_list_is() {
        assert_eq!(queue_number::<u16>(" 3"), Ok(3));
        for bad in ["x", "", "-1", "1.5"] {
            let e = queue_number::<u32>(bad).unwrap_err();
            assert!(
                e.contains("not a queue number") && e.contains("0,1,2,3"),
                "{e}"
            );
        }
        let past = queue_number::<u16>("65536").unwrap_err();
        assert!(past.contains("65535"), "{past}");
    }

    #[test]
    fn table_sizes_are_powers_of_two() {
        assert_eq!(table_size("128"), Ok(128));
        assert_eq!(table_size("1"), Ok(1));
        for bad in ["0", "100", "131072", "x"] {
            assert!(
                table_size(bad).unwrap_err().contains("power of two"),
                "{bad}"
            );
        }
    }

    #[test]
    fn ports_of_the_outgoing_range_are_warned_about() {
        assert_eq!(ephemeral_port_warning(39999), None);
        assert_eq!(ephemeral_port_warning(45000), None);
        let w = ephemeral_port_warning(40000).unwrap();
        assert!(w.contains("40000-44999") && w.contains("outgoing"), "{w}");
        assert!(ephemeral_port_warning(44999).is_some());
        assert!(!w.contains('\n'));
    }

    /// The data path's errors, which name configuration fields, read as
    /// `flowlane`'s services said them before (`tests/tests/cli_errors.rs`
    /// and the kernel port-hold tests check those words): the same line,
    /// flags instead of fields, and no field left unnamed.
    #[test]
    fn data_path_errors_name_the_flags_in_cli_terms() {
        use crate::runtime::PortHolds;
        use crate::tcp_service::GIVE_RSS;
        use crate::Proto;
        use flowlane_ebpf::steer::LocalAddress;
        let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = PortHolds::default()
            .hold(
                Proto::Tcp,
                port,
                LocalAddress::Only([127, 0, 0, 1].into()),
                LocalAddress::Unclaimed,
                0,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("TcpServiceConfig::listen"), "{e}");
        assert_eq!(
            in_terms(&e, None),
            format!(
                "port {port}/tcp is in use by a kernel socket (another server, or connections of \
                 one, maybe ended, in TIME-WAIT: `ss -tan 'sport = :{port}'` lists them): choose \
                 another --port or stop it: Address already in use (os error 98)"
            )
        );
        let e = crate::runtime::check_unserved_queues("xsk0", 2, &[0].into(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("TcpServiceConfig::rss"), "{e}");
        assert_eq!(
            cli_terms(&e),
            "serving 1 of xsk0's 2 receive queues, but its RSS indirection table is unknown (not \
             read from the NIC, nor given by --rss-table): flowlane's frames on the others would \
             be lost; use --queues 2, reduce its channels to 1 (ethtool -L xsk0 combined 1), or \
             point its table at queues 0 only (flowlane nic set-rss --iface xsk0 --equal 1; on a \
             test bed: flowlane testbed set-rss --bed NAME --spread 0)"
        );
        let spill = format!(
            "4 workers on 2 queues (software spill) needs the NIC's RSS key and table: {GIVE_RSS}, \
             or one queue"
        );
        assert_eq!(
            cli_terms(&spill),
            "4 workers on 2 queues (software spill) needs the NIC's RSS key and table: run on a \
             test bed (--bed), a NIC whose RSS flowlane reads, or one queue"
        );
        let e = crate::tcp_service::check_active_opens("xsk0", true, false, 2)
            .unwrap_err()
            .to_string();
        let cli = cli_terms(&e);
        assert!(
            cli.starts_with("opening connections on 2 queues of xsk0 needs the NIC's RSS")
                && cli.contains("run on a test bed (--bed)"),
            "{cli}"
        );
        for m in [cli_terms(&spill), cli] {
            assert!(!m.contains("Config::") && !m.contains('\n'), "{m}");
        }
    }

    /// The interface errors name the configuration's fields, and read as
    /// the services said them before: `--iface` and `--bed` for a missing
    /// interface, `--queues` for too many queues.
    #[test]
    fn interface_errors_name_the_fields_and_the_flags_in_cli_terms() {
        let root = std::env::temp_dir().join(format!("flowlane-terms-{}", std::process::id()));
        let d = root.join("class/net/xsk0");
        for q in 0..2 {
            std::fs::create_dir_all(d.join(format!("queues/rx-{q}"))).unwrap();
        }
        std::fs::write(d.join("ifindex"), "7\n").unwrap();
        std::fs::write(d.join("mtu"), "1500\n").unwrap();
        std::fs::write(d.join("address"), "02:00:00:aa:bb:cc\n").unwrap();
        let missing = crate::InterfaceInfo::read(&root, "nosuch0")
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("TcpServiceConfig::iface") && !missing.contains("--"),
            "{missing}"
        );
        assert_eq!(
            in_terms(&missing, None),
            "no interface nosuch0 in this network namespace (see `ip link`: use --iface NAME; \
             on a test bed, --bed NAME)"
        );
        let info = crate::InterfaceInfo::read(&root, "xsk0").unwrap();
        let many = info.check_queues(3).unwrap_err().to_string();
        assert!(
            many.contains("TcpServiceConfig::queues") && !many.contains("--"),
            "{many}"
        );
        assert_eq!(
            in_terms(&many, None),
            "xsk0 has 2 receive queues; asked for 3 (use --queues 1..=2)"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The kernel-socket backend's port in use names the handler's
    /// listen, and reads as the services said it; an `ss` to run is said
    /// for the operator's shell: inside the service's named namespace
    /// (`--bed`), the data path's and the kernel backend's alike, once.
    #[test]
    fn a_port_in_use_reads_as_before_and_its_ss_runs_in_the_named_namespace() {
        let kernel = "port 7/tcp is in use on 0.0.0.0 by a kernel socket (another server, or \
                      connections of one, maybe ended, in TIME-WAIT: `ss -tan 'sport = :7'` \
                      lists them): choose another port (SetupExt::listen) or stop it";
        let plain = "port 7/tcp is in use on 0.0.0.0 by a kernel socket (another server, or \
                     connections of one, maybe ended, in TIME-WAIT: `ss -tan 'sport = :7'` \
                     lists them): choose another --port or stop it";
        assert_eq!(in_terms(kernel, None), plain);
        assert_eq!(
            in_terms(kernel, Some("flowlane-b1")),
            plain.replace("`ss -tan", "`ip netns exec flowlane-b1 ss -tan")
        );
        // Said for the namespace already: not twice.
        let said = in_terms(kernel, Some("flowlane-b1"));
        assert_eq!(in_terms(&said, Some("flowlane-b1")), said);
    }

    #[test]
    fn bad_keys_say_what_a_key_looks_like_in_cli_terms() {
        let short = rss_key("1234").unwrap_err();
        assert!(short.contains("2 bytes is too short"), "{short}");
        assert!(short.contains("80 digits"), "{short}");
        assert!(short.contains("omit --key"), "{short}");
        assert!(!short.contains("RssKey"), "{short}");
        let bad = rss_key_value("zz:11").unwrap_err();
        assert!(bad.contains("'z' at position 1"), "{bad}");
        assert!(!bad.contains("omit --key"), "{bad}");
        assert!(rss_key_value("6d5").unwrap_err().contains("odd"));
        assert!(rss_key_value("6d:5:56:da")
            .unwrap_err()
            .contains("1 digit instead"));
        assert_eq!(
            rss_key("6d:5a:56:da").unwrap().as_bytes(),
            &[0x6d, 0x5a, 0x56, 0xda]
        );
    }
}
