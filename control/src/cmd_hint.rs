//! `flowlane hint`: for a flow (or a file of flows), the queue, CPU and NUMA
//! node that process it now — the NIC's Toeplitz hash and indirection table
//! (a test bed's emulated NIC, or a key and table given explicitly) combined
//! with the placement `udp-echo` pins its workers by.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use flowlane_numa_sched::FlowTuple;
use serde::Serialize;

use crate::cmd_rss::ProtoArg;
use flowlane_apps::flow_rss::rss_state;
use flowlane_dataplane::privileges::require_root;
use flowlane_dataplane::service_args::{queue_count, queue_number, rss_key, table_size};
use flowlane_numa_sched::toeplitz::RssKey;

/// Flags of `flowlane hint`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Ask the running daemon (`flowlane daemon`) instead: the service that
    /// serves the flow answers from its NIC's key and its table now (after
    /// any rebalancing), with its workers' CPUs and nodes.
    #[arg(long, conflicts_with_all = ["bed", "key", "table", "flows_file", "nic_node"], requires_all = ["dst"])]
    pub daemon: bool,
    /// The daemon's socket (with --daemon).
    #[arg(long, value_name = "PATH", default_value = flowlane_daemon::DEFAULT_SOCKET, requires = "daemon")]
    pub daemon_socket: PathBuf,
    /// Take key, table and queue count from this test bed's emulated NIC.
    // `--testbed`: the old spelling, hidden, kept for scripts.
    #[arg(long, alias = "testbed", value_name = "NAME", conflicts_with_all = ["key", "table"])]
    pub bed: Option<String>,
    /// Toeplitz key, hex; default: the Microsoft verification key.
    #[arg(long, value_parser = rss_key)]
    pub key: Option<RssKey>,
    /// Explicit indirection table: one queue per bucket, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = queue_number::<u16>,
        conflicts_with_all = ["table_size", "queues"]
    )]
    pub table: Option<Vec<u16>>,
    /// Size of an even table (without --table or --bed).
    #[arg(long, default_value_t = 128, value_parser = table_size)]
    pub table_size: usize,
    /// Queues of an even table (without --table or --bed).
    #[arg(long, default_value_t = 1, value_parser = queue_count::<u16>)]
    pub queues: u16,
    /// The NIC's NUMA node for the placement (default: unknown, as for veth).
    #[arg(long)]
    pub nic_node: Option<u32>,
    /// Source (remote) address of the flow as it arrives.
    #[arg(long, required_unless_present = "flows_file")]
    pub src: Option<IpAddr>,
    /// Source port; 0-65535, 0 too (hashed as given, not "any").
    #[arg(long, required_unless_present = "flows_file")]
    pub sport: Option<u16>,
    /// Destination (local) address; default: the test bed's flowlane side.
    #[arg(long)]
    pub dst: Option<IpAddr>,
    /// Destination port; 0-65535, 0 too (hashed as given, not "any").
    #[arg(long, required_unless_present = "flows_file")]
    pub dport: Option<u16>,
    /// Transport protocol.
    #[arg(long, value_enum, default_value = "udp")]
    pub proto: ProtoArg,
    /// Many flows: one per line, `SRC SPORT DST DPORT [udp|tcp]` ('#' comments).
    #[arg(long, conflicts_with_all = ["src", "sport", "dst", "dport"])]
    pub flows_file: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One flow's hint.
#[derive(Debug, Serialize)]
pub(crate) struct Hint {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Protocol.
    pub proto: &'static str,
    /// Toeplitz hash (None from a kernel-socket service: no buckets).
    pub hash: Option<u32>,
    /// Indirection bucket (likewise).
    pub bucket: Option<usize>,
    /// Receive queue.
    pub queue: u16,
    /// CPU of the queue's worker.
    pub cpu: u32,
    /// NUMA node of that CPU and of the queue's packet memory.
    pub node: u32,
}

fn parse_flows(text: &str, default_proto: ProtoArg) -> Result<Vec<FlowTuple>> {
    let mut flows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || format!("line {}: expected `SRC SPORT DST DPORT [udp|tcp]`", i + 1);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f.len() > 5 {
            bail!("{}", bad());
        }
        let proto = match f.get(4) {
            None => default_proto,
            Some(&"udp") => ProtoArg::Udp,
            Some(&"tcp") => ProtoArg::Tcp,
            Some(_) => bail!("{}", bad()),
        };
        flows.push(FlowTuple {
            src: f[0].parse::<IpAddr>().with_context(bad)?.to_canonical(),
            src_port: f[1].parse().with_context(bad)?,
            dst: f[2].parse::<IpAddr>().with_context(bad)?.to_canonical(),
            dst_port: f[3].parse().with_context(bad)?,
            protocol: proto.into(),
        });
    }
    Ok(flows)
}

/// `flowlane hint --daemon`: one flow, asked of the daemon.
fn ask_daemon(args: &Args) -> Result<()> {
    use flowlane_dataplane::control_socket::{
        connect_within, daemon_refused_line, request_on, FlowQuery, Request, Response,
    };
    let flow = FlowQuery {
        src: args.src.context("--src is needed")?.to_canonical(),
        sport: args.sport.context("--sport is needed")?,
        dst: args
            .dst
            .context("--dst is needed with --daemon")?
            .to_canonical(),
        dport: args.dport.context("--dport is needed")?,
        proto: match args.proto {
            ProtoArg::Tcp => "tcp",
            ProtoArg::Udp => "udp",
        }
        .into(),
    };
    let (path, within) = (&args.daemon_socket, std::time::Duration::from_secs(5));
    let stream = connect_within(path, within).map_err(|e| match e.kind() {
        // Running, but not this user's to ask.
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(daemon_refused_line(path)),
        _ => anyhow::anyhow!(
            "no answer from the daemon on {}: {e} (is `flowlane daemon` running? \
             --daemon-socket says where)",
            path.display()
        ),
    })?;
    let answer = request_on(stream, path, &Request::Hint { flow: flow.clone() }, within)?;
    let a = match answer {
        Response::Hint(a) => a,
        Response::Error { message } => bail!("{message}"),
        other => bail!("the daemon gave an unexpected answer: {other:?}"),
    };
    if args.json {
        let mut v = serde_json::to_value(&flow)?;
        let extra = serde_json::to_value(&a)?;
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let hint = Hint {
        src: flow.src,
        sport: flow.sport,
        dst: flow.dst,
        dport: flow.dport,
        proto: if flow.proto == "tcp" { "tcp" } else { "udp" },
        hash: a.hint.hash,
        bucket: a.hint.bucket,
        queue: u16::try_from(a.hint.queue).unwrap_or(u16::MAX),
        cpu: a.hint.cpu.unwrap_or(u32::MAX),
        node: a.hint.node,
    };
    print_table(
        &[hint],
        Some(&format!(
            "{} ({}) on {}, {}",
            a.service, a.pid, a.iface, a.backend
        )),
    );
    Ok(())
}

/// Prints hints as a table; `by`: the service that answered (a column
/// after the others).
fn print_table(hints: &[Hint], by: Option<&str>) {
    let service = if by.is_some() { "  service" } else { "" };
    outln!(
        "{:>40} {:>40} {:>5} {:>10} {:>6} {:>5} {:>4} {:>4}{service}",
        "src",
        "dst",
        "proto",
        "hash",
        "bucket",
        "queue",
        "cpu",
        "node"
    );
    for h in hints {
        outln!(
            "{:>40} {:>40} {:>5} {:>10} {:>6} {:>5} {:>4} {:>4}{}",
            SocketAddr::new(h.src, h.sport).to_string(),
            SocketAddr::new(h.dst, h.dport).to_string(),
            h.proto,
            h.hash.map_or_else(|| "-".into(), |x| format!("{x:#x}")),
            h.bucket.map_or_else(|| "-".into(), |b| b.to_string()),
            h.queue,
            h.cpu,
            h.node,
            by.map(|b| format!("  {b}")).unwrap_or_default()
        );
    }
}

/// `--src` and `--dst` of two families: bad usage, refused before anything
/// is asked (exit 2, as clap's own refusals).
fn one_family(args: &Args) -> Result<()> {
    match (args.src, args.dst) {
        (Some(src), Some(dst)) if src.to_canonical().is_ipv4() != dst.to_canonical().is_ipv4() => {
            Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--src {src} and --dst {dst} are not of one family: give two IPv4 or two \
                     IPv6 addresses\n"
                ),
            )
            .into())
        }
        _ => Ok(()),
    }
}

/// The bed's address of `src`'s family (`--dst`'s default): a flow from
/// an IPv6 peer goes to the bed's IPv6 address.
fn local_of_family(local: &[IpAddr], src: IpAddr) -> Option<IpAddr> {
    local.iter().copied().find(|a| a.is_ipv4() == src.is_ipv4())
}

/// Runs `flowlane hint`.
pub(crate) fn run(args: Args) -> Result<()> {
    one_family(&args)?;
    if args.daemon {
        return ask_daemon(&args);
    }
    if args.bed.is_some() {
        require_root("flowlane hint --bed")?;
    }
    let (state, local) = rss_state(
        args.bed.as_deref(),
        args.key.clone(),
        args.table.clone(),
        args.table_size,
        args.queues,
        args.nic_node,
    )?;
    let flows = match &args.flows_file {
        Some(p) => parse_flows(
            &std::fs::read_to_string(p).map_err(|e| {
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => "there is no such file".to_string(),
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                    _ => e.to_string(),
                };
                anyhow::anyhow!("--flows-file {}: {why}", p.display())
            })?,
            args.proto,
        )?,
        None => {
            let src = args.src.context("--src is needed")?.to_canonical();
            let dst = match args.dst {
                Some(dst) => dst.to_canonical(),
                None => local_of_family(&local, src).context("--dst is needed without --bed")?,
            };
            vec![FlowTuple {
                src,
                src_port: args.sport.context("--sport is needed")?,
                dst,
                dst_port: args.dport.context("--dport is needed")?,
                protocol: args.proto.into(),
            }]
        }
    };
    let mut hints = Vec::new();
    for f in &flows {
        if f.src.is_ipv4() != f.dst.is_ipv4() {
            bail!("{} and {} are not both IPv4 or both IPv6", f.src, f.dst);
        }
        let h = state.hint(f);
        hints.push(Hint {
            src: f.src,
            sport: f.src_port,
            dst: f.dst,
            dport: f.dst_port,
            proto: match f.protocol {
                flowlane_numa_sched::Protocol::Tcp => "tcp",
                _ => "udp",
            },
            hash: Some(h.hash),
            bucket: Some(h.bucket),
            queue: h.queue,
            cpu: h.cpu,
            node: h.node,
        });
    }
    if args.json {
        if args.flows_file.is_some() {
            outln!("{}", serde_json::to_string_pretty(&hints)?);
        } else {
            outln!("{}", serde_json::to_string_pretty(&hints[0])?);
        }
        return Ok(());
    }
    print_table(&hints, None);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_file_lines() {
        let f = parse_flows(
            "# comment\n10.0.0.2 1234 10.0.0.1 7777\n\nfd99::2 5 fd99::1 6 tcp # x\n",
            ProtoArg::Udp,
        )
        .unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].src_port, 1234);
        assert_eq!(f[1].protocol, flowlane_numa_sched::Protocol::Tcp);
        let e = parse_flows("10.0.0.2 x 10.0.0.1 1\n", ProtoArg::Udp).unwrap_err();
        assert!(format!("{e:#}").contains("line 1"));
        // An IPv4-mapped address is the IPv4 flow it names (hashed on 12
        // bytes, as the NIC hashes the IPv4 packet).
        let f = parse_flows("::ffff:10.0.0.2 1 ::ffff:10.0.0.1 2\n", ProtoArg::Udp).unwrap();
        assert_eq!(f[0].src, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(f[0].dst, "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_default_destination_is_of_the_source_s_family() {
        let local: Vec<IpAddr> = vec!["10.99.0.1".parse().unwrap(), "fd99::1".parse().unwrap()];
        let of = |src: &str| local_of_family(&local, src.parse().unwrap()).map(|a| a.to_string());
        assert_eq!(of("10.99.0.2").as_deref(), Some("10.99.0.1"));
        assert_eq!(of("fd99::2").as_deref(), Some("fd99::1"));
        assert_eq!(local_of_family(&[], "fd99::2".parse().unwrap()), None);
    }
}
