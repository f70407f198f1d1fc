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
//!
//! The configuration (key, table size, hash fields, queue count) has two
//! slots and a 32-bit index naming the one in force: a write fills the idle
//! slot and then flips the index, so that the program never reads a key
//! half-written.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
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
    /// The NIC's queue count (the veth pair's): the table names queues
    /// below it.
    pub queues: u32,
}

impl RssEmuConfig {
    /// Checks the configuration against the emulator's limits and its own
    /// queue count: the key's length, the table's size (a power of two up
    /// to [`MAX_TABLE`]) and the queues its entries name.
    pub fn validate(&self) -> Result<()> {
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
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(Error::Invalid(format!(
                "the emulated NIC has {} queues; it takes 1 to {MAX_QUEUES}",
                self.queues
            )));
        }
        if let Some(q) = self.table.iter().find(|&&q| q >= self.queues) {
            return Err(Error::Invalid(format!(
                "indirection table names queue {q}, but the NIC has queues 0 to {}: name one \
                 of those",
                self.queues - 1
            )));
        }
        Ok(())
    }
}

/// Bytes of `struct rss_cfg` (`src/bpf/rss_emu.bpf.c`): five `u32`s, then
/// the key.
pub(crate) const CFG_LEN: usize = 20 + MAX_KEY;
/// Configuration slots (`FL_CFG_SLOTS`).
pub(crate) const CFG_SLOTS: u32 = 2;

fn encode_cfg(c: &RssEmuConfig) -> [u8; CFG_LEN] {
    let mut v = [0u8; CFG_LEN];
    v[0..4].copy_from_slice(&(c.enabled as u32).to_ne_bytes());
    v[4..8].copy_from_slice(&(c.key.len() as u32).to_ne_bytes());
    v[8..12].copy_from_slice(&(c.table.len() as u32).to_ne_bytes());
    v[12..16].copy_from_slice(&c.hash_fields.bits().to_ne_bytes());
    v[16..20].copy_from_slice(&c.queues.to_ne_bytes());
    v[20..20 + c.key.len()].copy_from_slice(&c.key);
    v
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The configuration slot in force and its raw bytes.
fn live_cfg(cfg: &MapHandle, active: &MapHandle) -> Result<(u32, Vec<u8>)> {
    let slot = active
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(Error::bpf("reading the RSS configuration's slot in force"))?
        .filter(|v| v.len() >= 4)
        .map_or(0, |v| u32_at(&v, 0))
        % CFG_SLOTS;
    let raw = cfg
        .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
        .map_err(Error::bpf("reading the RSS configuration"))?
        .ok_or_else(|| Error::Invalid("RSS configuration entry missing".into()))?;
    if raw.len() < CFG_LEN {
        return Err(Error::Invalid(format!(
            "RSS configuration entry is {} bytes, not {CFG_LEN}: the emulated NIC is of \
             another flowlane; take the bed down and up again",
            raw.len()
        )));
    }
    Ok((slot, raw))
}

/// Handles on the pinned maps of an installed emulated NIC.
#[derive(Debug)]
pub struct RssEmuMaps {
    cfg: MapHandle,
    active: MapHandle,
    table: MapHandle,
    packets: MapHandle,
}

const PIN_CFG: &str = "rss_cfg";
const PIN_ACTIVE: &str = "rss_active";
const PIN_TABLE: &str = "rss_table";
const PIN_PACKETS: &str = "rss_queue_packets";

impl RssEmuMaps {
    /// Opens the maps pinned under `pin_dir` by [`install`].
    pub fn open(pin_dir: &Path) -> Result<RssEmuMaps> {
        let open = |name: &str| {
            let p = pin_dir.join(name);
            MapHandle::from_pinned_path(&p).map_err(Error::bpf(format!(
                "opening {} (is the test bed up? `flowlane testbed up`, from the host's network namespace: not under `ip netns exec`, which hides the pins)",
                p.display()
            )))
        };
        Ok(RssEmuMaps {
            cfg: open(PIN_CFG)?,
            active: open(PIN_ACTIVE)?,
            table: open(PIN_TABLE)?,
            packets: open(PIN_PACKETS)?,
        })
    }

    /// Programs key, table, hash fields and queue count. The table is
    /// written before the configuration that makes it live, so no packet
    /// sees a half-written table of a new size.
    pub fn write(&self, c: &RssEmuConfig) -> Result<()> {
        c.validate()?;
        for (i, q) in c.table.iter().enumerate() {
            self.table
                .update(&(i as u32).to_ne_bytes(), &q.to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("writing the indirection table"))?;
        }
        self.publish(c)
    }

    /// Programs key, hash fields and queue count only (the table's size in
    /// `c` must be the live one): the table's entries are left as they are,
    /// as a NIC leaves them when only its key changes, and a bucket a
    /// service moves meanwhile stays moved.
    pub fn write_config(&self, c: &RssEmuConfig) -> Result<()> {
        c.validate()?;
        self.publish(c)
    }

    /// Writes `c` into the idle configuration slot, then makes that slot
    /// the one in force (one 32-bit store the program reads whole).
    fn publish(&self, c: &RssEmuConfig) -> Result<()> {
        let (live, _) = live_cfg(&self.cfg, &self.active)?;
        let idle = (live + 1) % CFG_SLOTS;
        self.cfg
            .update(&idle.to_ne_bytes(), &encode_cfg(c), MapFlags::ANY)
            .map_err(Error::bpf("writing the RSS configuration"))?;
        self.active
            .update(&0u32.to_ne_bytes(), &idle.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("switching to the new RSS configuration"))
    }

    /// Reads the configuration in force back.
    pub fn read(&self) -> Result<RssEmuConfig> {
        let (_, raw) = live_cfg(&self.cfg, &self.active)?;
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
            key: raw[20..20 + key_len].to_vec(),
            table,
            hash_fields: HashFields::from_bits(u32_at(&raw, 12)),
            queues: u32_at(&raw, 16),
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
pub struct RssTableMap {
    table: MapHandle,
    /// The configuration's slots and the index of the one in force, found
    /// through the program that uses the table (the pins are not visible
    /// inside the bed).
    cfg: MapHandle,
    active: MapHandle,
}

/// The emulator's program name (`flowlane_rss`, as the kernel keeps it).
const PROG_NAME: &str = "flowlane_rss";

impl RssTableMap {
    /// Opens the table map whose id [`RssEmuMaps::table_map_id`] gave, with
    /// the configuration maps of the emulator that uses it.
    pub fn open_by_id(id: u32) -> Result<RssTableMap> {
        let table = MapHandle::from_map_id(id).map_err(Error::bpf(format!(
            "opening the emulated NIC's table (map id {id}; is the test bed still up?)"
        )))?;
        let progs =
            ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_map_ids(true));
        let maps = progs
            .filter(|p| p.name.to_bytes() == PROG_NAME.as_bytes() && p.map_ids.contains(&id))
            .find_map(|p| {
                let (mut cfg, mut active) = (None, None);
                for m in p
                    .map_ids
                    .iter()
                    .filter_map(|&m| MapHandle::from_map_id(m).ok())
                {
                    match m.name().to_str() {
                        Some(PIN_CFG) => cfg = Some(m),
                        Some(PIN_ACTIVE) => active = Some(m),
                        _ => {}
                    }
                }
                Some((cfg?, active?))
            });
        let Some((cfg, active)) = maps else {
            return Err(Error::Invalid(format!(
                "map id {id} is no emulated NIC's table (no {PROG_NAME} program uses it with its \
                 configuration); is the test bed still up?"
            )));
        };
        Ok(RssTableMap { table, cfg, active })
    }

    /// Points entry `bucket` at `queue`: the next packet of the bucket goes
    /// there. Refuses an entry beyond the table in force or a queue the NIC
    /// does not have.
    pub fn set(&self, bucket: u32, queue: u32) -> Result<()> {
        let (_, raw) = live_cfg(&self.cfg, &self.active)?;
        let (size, queues) = (
            u32_at(&raw, 8).min(MAX_TABLE),
            u32_at(&raw, 16).min(MAX_QUEUES),
        );
        if bucket >= size {
            return Err(Error::Invalid(format!(
                "indirection table entry {bucket} is beyond the emulated NIC's table of {size} \
                 entries: name one below {size}"
            )));
        }
        if queue >= queues {
            return Err(Error::Invalid(format!(
                "queue {queue} is beyond the emulated NIC's {queues} queues: name one below \
                 {queues}"
            )));
        }
        self.table
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
    for name in [PIN_CFG, PIN_ACTIVE, PIN_TABLE, PIN_PACKETS] {
        let _ = std::fs::remove_file(pin_dir.join(name));
    }
    let mut storage = MaybeUninit::uninit();
    let mut open = RssEmuSkelBuilder::default()
        .open(&mut storage)
        .map_err(Error::bpf("opening the RSS emulator"))?;
    // The hash alone, for the tests' BPF_PROG_TEST_RUN: never attached.
    open.progs.flowlane_rss_hash.set_autoload(false);
    for (map, name) in [
        (&mut open.maps.rss_cfg, PIN_CFG),
        (&mut open.maps.rss_active, PIN_ACTIVE),
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

#[cfg(test)]
#[path = "rss_emu_tests.rs"]
mod tests;
