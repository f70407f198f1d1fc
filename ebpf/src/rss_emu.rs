//! The emulated RSS NIC of the veth test bed: a tc egress program on the far
//! side of the veth pair that chooses each packet's receive queue as an RSS
//! NIC would (Toeplitz hash, indirection table).
//!
//! A table rewrite applies to the next packet, as on hardware: a packet that
//! carries its sending socket (whose cached transmit queue the kernel would
//! otherwise reuse) leaves as a socket-less clone of itself (see
//! `src/bpf/rss_emu.bpf.c`, "Next-packet semantics").
//!
//! [`install`] loads the program, pins its maps under a bpffs directory and
//! attaches it; the pinned maps outlive the process so that later commands
//! ([`RssEmuMaps::open`]) read and program the emulated NIC.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, TcHookBuilder, TC_EGRESS};

use crate::limits::{MAX_KEY, MAX_QUEUES, MAX_TABLE};
use crate::skel::rss_emu::RssEmuSkelBuilder;
use crate::{Error, Result};

/// Which protocols include their ports in the hash input (ethtool's
/// `rx-flow-hash ... sdfn` versus `sd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashFields {
    /// TCP over IPv4 hashes the 4-tuple.
    pub tcp4_ports: bool,
    /// UDP over IPv4 hashes the 4-tuple.
    pub udp4_ports: bool,
    /// TCP over IPv6 hashes the 4-tuple.
    pub tcp6_ports: bool,
    /// UDP over IPv6 hashes the 4-tuple.
    pub udp6_ports: bool,
}

impl HashFields {
    /// All protocols hash addresses and ports.
    pub const ALL_PORTS: HashFields = HashFields {
        tcp4_ports: true,
        udp4_ports: true,
        tcp6_ports: true,
        udp6_ports: true,
    };

    fn bits(self) -> u32 {
        (self.tcp4_ports as u32)
            | (self.udp4_ports as u32) << 1
            | (self.tcp6_ports as u32) << 2
            | (self.udp6_ports as u32) << 3
    }

    fn from_bits(b: u32) -> HashFields {
        HashFields {
            tcp4_ports: b & 1 != 0,
            udp4_ports: b & 2 != 0,
            tcp6_ports: b & 4 != 0,
            udp6_ports: b & 8 != 0,
        }
    }
}

/// The emulated NIC's RSS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssEmuConfig {
    /// Whether the program steers at all.
    pub enabled: bool,
    /// Toeplitz key (4..=52 bytes; 40 covers IPv6 4-tuples).
    pub key: Vec<u8>,
    /// Indirection table: queue per bucket; its length is a power of two.
    pub table: Vec<u32>,
    /// Hash inputs per protocol.
    pub hash_fields: HashFields,
}

impl RssEmuConfig {
    fn validate(&self) -> Result<()> {
        if self.key.len() < 4 || self.key.len() > MAX_KEY {
            return Err(Error::Invalid(format!(
                "RSS key is {} bytes; the emulated NIC takes 4 to {MAX_KEY}",
                self.key.len()
            )));
        }
        let n = self.table.len();
        if n == 0 || !n.is_power_of_two() || n > MAX_TABLE as usize {
            return Err(Error::Invalid(format!(
                "indirection table has {n} entries; it must be a power of two up to {MAX_TABLE}"
            )));
        }
        if let Some(q) = self.table.iter().find(|&&q| q >= MAX_QUEUES) {
            return Err(Error::Invalid(format!(
                "indirection table names queue {q}, beyond {MAX_QUEUES}"
            )));
        }
        Ok(())
    }
}

const CFG_LEN: usize = 16 + MAX_KEY;

fn encode_cfg(c: &RssEmuConfig) -> [u8; CFG_LEN] {
    let mut v = [0u8; CFG_LEN];
    v[0..4].copy_from_slice(&(c.enabled as u32).to_ne_bytes());
    v[4..8].copy_from_slice(&(c.key.len() as u32).to_ne_bytes());
    v[8..12].copy_from_slice(&(c.table.len() as u32).to_ne_bytes());
    v[12..16].copy_from_slice(&c.hash_fields.bits().to_ne_bytes());
    v[16..16 + c.key.len()].copy_from_slice(&c.key);
    v
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Handles on the pinned maps of an installed emulated NIC.
#[derive(Debug)]
pub struct RssEmuMaps {
    cfg: MapHandle,
    table: MapHandle,
    packets: MapHandle,
}

const PIN_CFG: &str = "rss_cfg";
const PIN_TABLE: &str = "rss_table";
const PIN_PACKETS: &str = "rss_queue_packets";

impl RssEmuMaps {
    /// Opens the maps pinned under `pin_dir` by [`install`].
    pub fn open(pin_dir: &Path) -> Result<RssEmuMaps> {
        let open = |name: &str| {
            let p = pin_dir.join(name);
            MapHandle::from_pinned_path(&p).map_err(Error::bpf(format!(
                "opening {} (is the test bed up? try `flowlane testbed up`)",
                p.display()
            )))
        };
        Ok(RssEmuMaps {
            cfg: open(PIN_CFG)?,
            table: open(PIN_TABLE)?,
            packets: open(PIN_PACKETS)?,
        })
    }

    /// Programs key, table and hash fields. The table is written before the
    /// configuration that makes it live, so no packet sees a half-written
    /// table of a new size.
    pub fn write(&self, c: &RssEmuConfig) -> Result<()> {
        c.validate()?;
        for (i, q) in c.table.iter().enumerate() {
            self.table
                .update(&(i as u32).to_ne_bytes(), &q.to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("writing the indirection table"))?;
        }
        self.cfg
            .update(&0u32.to_ne_bytes(), &encode_cfg(c), MapFlags::ANY)
            .map_err(Error::bpf("writing the RSS configuration"))
    }

    /// Programs key and hash fields only (the table's size in `c` must be
    /// the live one): the table's entries are left as they are, as a NIC
    /// leaves them when only its key changes, and a bucket a service moves
    /// meanwhile stays moved.
    pub fn write_config(&self, c: &RssEmuConfig) -> Result<()> {
        c.validate()?;
        self.cfg
            .update(&0u32.to_ne_bytes(), &encode_cfg(c), MapFlags::ANY)
            .map_err(Error::bpf("writing the RSS configuration"))
    }

    /// Reads the configuration back.
    pub fn read(&self) -> Result<RssEmuConfig> {
        let raw = self
            .cfg
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("reading the RSS configuration"))?
            .ok_or_else(|| Error::Invalid("RSS configuration entry missing".into()))?;
        if raw.len() < CFG_LEN {
            return Err(Error::Invalid(format!(
                "RSS configuration entry is {} bytes",
                raw.len()
            )));
        }
        let key_len = (u32_at(&raw, 4) as usize).min(MAX_KEY);
        let size = (u32_at(&raw, 8)).min(MAX_TABLE);
        let mut table = Vec::with_capacity(size as usize);
        for i in 0..size {
            let v = self
                .table
                .lookup(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("reading the indirection table"))?
                .ok_or_else(|| Error::Invalid(format!("indirection entry {i} missing")))?;
            table.push(u32_at(&v, 0));
        }
        Ok(RssEmuConfig {
            enabled: u32_at(&raw, 0) != 0,
            key: raw[16..16 + key_len].to_vec(),
            table,
            hash_fields: HashFields::from_bits(u32_at(&raw, 12)),
        })
    }

    /// The kernel's id of the indirection-table map: a process inside the
    /// bed's namespace, where the pins are not visible, opens it by id
    /// ([`RssTableMap::open_by_id`]).
    pub fn table_map_id(&self) -> Result<u32> {
        self.table
            .info()
            .map(|i| i.info.id)
            .map_err(Error::bpf("reading the indirection table map's id"))
    }

    /// Packets steered to each of the first `queues` queues so far.
    pub fn queue_packets(&self, queues: u32) -> Result<Vec<u64>> {
        (0..queues.min(MAX_QUEUES))
            .map(|q| crate::sum_percpu_u64(&self.packets, q))
            .collect()
    }
}

/// The emulated NIC's indirection table opened by map id (from inside the
/// bed's namespace): what a service moving RSS buckets writes.
#[derive(Debug)]
pub struct RssTableMap(MapHandle);

impl RssTableMap {
    /// Opens the table map whose id [`RssEmuMaps::table_map_id`] gave.
    pub fn open_by_id(id: u32) -> Result<RssTableMap> {
        let map = MapHandle::from_map_id(id).map_err(Error::bpf(format!(
            "opening the emulated NIC's table (map id {id}; is the test bed still up?)"
        )))?;
        Ok(RssTableMap(map))
    }

    /// Points entry `bucket` at `queue`: the next packet of the bucket goes
    /// there.
    pub fn set(&self, bucket: u32, queue: u32) -> Result<()> {
        if bucket >= MAX_TABLE || queue >= MAX_QUEUES {
            return Err(Error::Invalid(format!(
                "entry {bucket} -> queue {queue} is out of the emulator's range"
            )));
        }
        self.0
            .update(&bucket.to_ne_bytes(), &queue.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("writing an indirection table entry"))
    }
}

/// Loads the emulator, pins its maps under `pin_dir` (created if missing; a
/// bpffs mount) and attaches it at tc egress of `ifindex` in the calling
/// thread's network namespace, replacing an earlier instance. Returns the
/// handles with `config` already written.
pub fn install(ifindex: u32, pin_dir: &Path, config: &RssEmuConfig) -> Result<RssEmuMaps> {
    config.validate()?;
    std::fs::create_dir_all(pin_dir).map_err(|e| {
        Error::Invalid(format!(
            "creating {}: {e} (is /sys/fs/bpf a bpffs mount?)",
            pin_dir.display()
        ))
    })?;
    for name in [PIN_CFG, PIN_TABLE, PIN_PACKETS] {
        let _ = std::fs::remove_file(pin_dir.join(name));
    }
    let mut storage = MaybeUninit::uninit();
    let mut open = RssEmuSkelBuilder::default()
        .open(&mut storage)
        .map_err(Error::bpf("opening the RSS emulator"))?;
    for (map, name) in [
        (&mut open.maps.rss_cfg, PIN_CFG),
        (&mut open.maps.rss_table, PIN_TABLE),
        (&mut open.maps.rss_queue_packets, PIN_PACKETS),
    ] {
        map.set_pin_path(pin_dir.join(name))
            .map_err(Error::bpf(format!("pinning {name}")))?;
    }
    let skel = open
        .load()
        .map_err(Error::bpf("loading the RSS emulator"))?;
    let maps = RssEmuMaps::open(pin_dir)?;
    maps.write(config)?;
    let mut hook = TcHookBuilder::new(skel.progs.flowlane_rss.as_fd())
        .ifindex(ifindex as i32)
        .replace(true)
        .handle(1)
        // Priority 3: the delay line's redirects (1) and the link
        // impairment (2) run first.
        .priority(3)
        .hook(TC_EGRESS);
    // The clsact qdisc may exist from an earlier install: EEXIST is fine.
    if let Err(e) = hook.create() {
        if e.kind() != libbpf_rs::ErrorKind::AlreadyExists {
            return Err(Error::bpf(format!(
                "creating the clsact qdisc on ifindex {ifindex}"
            ))(e));
        }
    }
    hook.attach().map_err(Error::bpf(format!(
        "attaching the RSS emulator at tc egress of ifindex {ifindex}"
    )))?;
    Ok(maps)
}

/// Removes a test bed's pin directory with every map pinned in it (the
/// emulator's and the impairment's). The tc filters go away with their
/// interface (the test bed deletes the namespace).
pub fn remove_pins(pin_dir: &Path) {
    let _ = std::fs::remove_dir_all(pin_dir);
}

/// The default bpffs directory for a named test bed's pins.
pub fn pin_dir_for(bed: &str) -> PathBuf {
    PathBuf::from("/sys/fs/bpf/flowlane").join(bed)
}
