//! `flowlane rss hash`: the Toeplitz hash of a flow, its indirection bucket
//! and queue, computed by both the bit-serial reference and the table-driven
//! hash (which must agree).

use std::net::IpAddr;

use anyhow::{bail, Result};
use flowlane_dataplane::privileges::require_root;
use flowlane_dataplane::service_args::{queue_count, rss_key, table_size};
use flowlane_numa_sched::{
    hash_reference, FlowTuple, IndirectionTable, Protocol, RssKey, Toeplitz,
};
use serde::Serialize;

use flowlane_numa_sched::nic::RssNic;

/// `--proto` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoArg {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl From<ProtoArg> for Protocol {
    fn from(p: ProtoArg) -> Protocol {
        match p {
            ProtoArg::Tcp => Protocol::Tcp,
            ProtoArg::Udp => Protocol::Udp,
        }
    }
}

/// Flags of `flowlane rss hash`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HashArgs {
    /// Toeplitz key, hex (aa:bb:.. or plain); default: the Microsoft
    /// verification key (or the test bed's with --bed).
    #[arg(long, conflicts_with = "bed", value_parser = rss_key)]
    pub key: Option<RssKey>,
    /// Source address (as the packet arrives at the NIC).
    #[arg(long)]
    pub src: IpAddr,
    /// Destination address.
    #[arg(long)]
    pub dst: IpAddr,
    /// Source port (with --dport: a 4-tuple hash; without ports: 2-tuple);
    /// 0-65535, 0 too (hashed as given, not "any").
    #[arg(long, requires = "dport")]
    pub sport: Option<u16>,
    /// Destination port; 0-65535, 0 too (hashed as given, not "any").
    #[arg(long, requires = "sport")]
    pub dport: Option<u16>,
    /// Transport protocol.
    #[arg(long, value_enum, default_value = "tcp")]
    pub proto: ProtoArg,
    /// Indirection table entries (a power of two).
    #[arg(long, default_value_t = 128, conflicts_with = "bed", value_parser = table_size)]
    pub table_size: usize,
    /// Spread the table evenly over this many queues.
    #[arg(long, default_value_t = 1, conflicts_with = "bed", value_parser = queue_count::<u16>)]
    pub queues: u16,
    /// Take key and table from this test bed's emulated NIC.
    // `--testbed`: the old spelling, hidden, kept for scripts.
    #[arg(long, alias = "testbed", value_name = "NAME")]
    pub bed: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `rss hash` prints.
#[derive(Debug, Serialize)]
pub(crate) struct HashResult {
    /// The key used.
    pub key: RssKey,
    /// The hash input bytes (hex).
    pub input: String,
    /// 4-tuple (ports hashed) or 2-tuple.
    pub with_ports: bool,
    /// The hash (table-driven).
    pub hash: u32,
    /// The bit-serial reference's hash: always equal to `hash`.
    pub reference: u32,
    /// Indirection table size.
    pub table_size: usize,
    /// Bucket: the hash's low bits.
    pub bucket: usize,
    /// The queue the table names for the bucket.
    pub queue: u16,
}

/// `table_size` buckets spread evenly over `queues` queues (`--table-size`,
/// `--queues`).
///
/// # Errors
/// More queues than buckets (the queues past the table's size would get
/// no bucket, and so no flow), or a size the table refuses.
pub(crate) fn even_spread(table_size: usize, queues: u16) -> Result<IndirectionTable> {
    if usize::from(queues) > table_size {
        bail!(
            "{queues} queues and a {table_size}-entry table: queues {table_size}..={} would get \
             no bucket; use --table-size {} or at most {table_size} queues",
            queues - 1,
            usize::from(queues).next_power_of_two()
        );
    }
    Ok(IndirectionTable::even(
        table_size,
        &(0..queues).collect::<Vec<_>>(),
    )?)
}

/// Runs `flowlane rss hash`.
pub(crate) fn hash(mut args: HashArgs) -> Result<()> {
    // An IPv4-mapped address is the IPv4 packet's: the NIC hashes its 12
    // bytes, not 36.
    (args.src, args.dst) = (args.src.to_canonical(), args.dst.to_canonical());
    if args.src.is_ipv4() != args.dst.is_ipv4() {
        bail!("--src and --dst must both be IPv4 or both IPv6");
    }
    let (key, table) = match &args.bed {
        Some(name) => {
            require_root("flowlane rss hash --bed")?;
            let rss = flowlane_testbed::load(name)?.nic().rss()?;
            let table = rss.table.iter().map(|&q| q as u16).collect();
            (RssKey::new(rss.key)?, IndirectionTable::new(table)?)
        }
        None => {
            let key = args.key.clone().unwrap_or_else(RssKey::microsoft_default);
            (key, even_spread(args.table_size, args.queues)?)
        }
    };
    let flow = FlowTuple {
        src: args.src,
        dst: args.dst,
        src_port: args.sport.unwrap_or(0),
        dst_port: args.dport.unwrap_or(0),
        protocol: args.proto.into(),
    };
    let with_ports = args.sport.is_some();
    let input = flow.hash_input(with_ports);
    let t = Toeplitz::new(&key);
    let hash = t.hash(input.as_bytes());
    let reference = hash_reference(&key, input.as_bytes());
    if hash != reference {
        bail!("internal error: table-driven hash {hash:#010x} != reference {reference:#010x}");
    }
    let bucket = table.bucket_for_hash(hash);
    let r = HashResult {
        input: input
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        with_ports,
        hash,
        reference,
        table_size: table.size(),
        bucket,
        queue: table.entries()[bucket],
        key,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        outln!("key       {}", r.key);
        outln!(
            "input     {} ({}-tuple, {} bytes)",
            r.input,
            if with_ports { 4 } else { 2 },
            r.input.len() / 2
        );
        outln!(
            "hash      {:#010x} (reference {:#010x}: equal)",
            r.hash,
            r.reference
        );
        outln!("bucket    {} of {}", r.bucket, r.table_size);
        outln!("queue     {}", r.queue);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_queues_than_buckets_are_refused() {
        let e = even_spread(128, 200).unwrap_err().to_string();
        assert_eq!(
            e,
            "200 queues and a 128-entry table: queues 128..=199 would get no bucket; use \
             --table-size 256 or at most 128 queues"
        );
        let t = even_spread(4, 4).unwrap();
        assert_eq!(t.entries(), [0, 1, 2, 3]);
    }
}
