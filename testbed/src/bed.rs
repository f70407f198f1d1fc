//! The veth test bed: two network namespaces joined by a multi-queue veth
//! pair, the Linux kernel stack on the far side, and an emulated RSS NIC.
//!
//! ```text
//!  netns flowlane-<bed>             netns flowlane-<bed>-peer
//!  ┌──────────────────────┐        ┌─────────────────────────────┐
//!  │ xsk0 10.99.0.1/24    │◄──veth─┤ peer0 10.99.0.2/24          │
//!  │ fd99::1/64           │ N queues│ tc egress: RSS emulator     │
//!  │ flowlane (AF_XDP)    │        │ kernel TCP/UDP (iperf3, nc) │
//!  └──────────────────────┘        └─────────────────────────────┘
//! ```
//!
//! The emulator steers every packet by the table in force when the packet
//! leaves the peer's stack (tc egress of `peer0`, before its qdisc): a
//! rewrite moves an established flow at its next packet, as on hardware
//! (`flowlane_ebpf::rss_emu`). Frames already waiting in `peer0`'s qdisc
//! (only `testbed impair`'s slow path holds any) keep the queue they were
//! steered to.
//!
//! `up` is idempotent, `down` removes exactly what `up` made (the two
//! namespaces, which take the veth pair and the tc program with them, the
//! pinned maps, the state file and the bed's lock files; the shared
//! directories that hold those, `/sys/fs/bpf/flowlane`, the state directory
//! and the lock directory, stay, empty or not), and a half-made bed left by
//! a crash of this run directory's `up` is removed before a new one is made.
//! A bed's namespaces and pins are the host's while its state file is a run
//! directory's (`FLOWLANE_RUN_DIR`): `up` and `down` leave a bed that this
//! run directory does not record alone (`down --force` removes it; a state
//! file records the namespaces' identities, so a bed made anew under the
//! name since is not the one it records), and a
//! bed's lock (a file in [`crate::state::LOCK_DIR`]) makes the
//! commands that change it, whichever run directory they use, one at a
//! time.
//!
//! A bed in use (see [`users`](mod@crate::users)) is neither rebuilt nor
//! re-programmed under its services: `up` refuses it (the caller may stop
//! them first with [`crate::users::stop_users`]: `testbed up
//! --force`), `testbed set-rss` refuses it unless `--force` (the check is
//! the command's: [`crate::EmulatedNic`]'s `set_rss` does not make it, as
//! the demo rotates the table under its own echo service on purpose), and
//! `down` stops them cleanly before it removes anything.

use anyhow::{bail, Context, Result};
use flowlane_ebpf::rss_emu::{self, HashFields, RssEmuConfig, RssEmuMaps};
use flowlane_numa_sched::nic::RssNic;
use serde::Serialize;

use crate::bpffs;
use crate::impair::{self, ImpairStatus};
use crate::netns::{self, ip};
use crate::state::{
    self, delay_lock_path, load, namespaces, validate_name, BedLock, BedState, FLOWLANE_EPHEMERAL,
    LOCAL_IF, LOCAL_V4, LOCAL_V6, PEER_IF, PEER_V4, PEER_V6,
};
use crate::users::{self, stop_users, STOP_GRACE};

/// The emulated NIC's Toeplitz key length, as a real NIC's (the Microsoft
/// key's 40 bytes: a hash over an IPv6 4-tuple reads 36 + 4 of them), and
/// the only one `testbed set-rss --key` then takes.
pub const KEY_LEN: usize = 40;

/// Parameters of `testbed up`.
#[derive(Debug, Clone)]
pub struct BedSpec {
    /// Bed name: namespaces are `flowlane-<name>` and `flowlane-<name>-peer`.
    pub name: String,
    /// Queue count of the veth pair.
    pub queues: u32,
    /// Toeplitz key of the emulated NIC: [`KEY_LEN`] bytes.
    pub key: Vec<u8>,
    /// Indirection table of the emulated NIC.
    pub table: Vec<u32>,
}

impl BedSpec {
    /// Checks the spec as `up` would before it touches anything: the name,
    /// the queue count and the emulated NIC's key and table (their limits
    /// are the NIC's, not the command line's). A caller that changes
    /// things before `up` (`testbed up --force` stops a bed's users and
    /// removes a bed it has no record of) checks first.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        if self.queues == 0 || self.queues > flowlane_ebpf::limits::MAX_QUEUES {
            bail!("--queues must be 1..={}", flowlane_ebpf::limits::MAX_QUEUES);
        }
        if self.key.len() != KEY_LEN {
            bail!(
                "test bed {}: the RSS key is {} bytes; the emulated NIC takes {KEY_LEN}, as \
                 `testbed set-rss --key` does: give {KEY_LEN} bytes, or omit --key for the \
                 Microsoft default key",
                self.name,
                self.key.len()
            );
        }
        if let Err(e) = emu_config(self).validate() {
            bail!("test bed {}: {e}", self.name);
        }
        Ok(())
    }
}

/// Whether everything the state names is still there.
fn intact(s: &BedState) -> bool {
    netns::exists(&s.netns) && netns::exists(&s.peer_netns) && RssEmuMaps::open(&s.pin_dir).is_ok()
}

/// Brings a bed up (or confirms it is up, re-applying the RSS settings).
/// Refuses a bed that flowlane services use, naming them, and a bed this
/// run directory does not record ([`unrecorded`]: another run directory's,
/// which `testbed down --force` removes). Holds the bed's lock
/// (in [`crate::state::LOCK_DIR`]) throughout: a second `up` or a `down`
/// of the bed waits.
pub fn up(spec: &BedSpec) -> Result<BedState> {
    // Before anything is made or stopped.
    spec.validate()?;
    netns::require_bed_privileges("flowlane testbed up")?;
    let _lock = BedLock::take(&spec.name)?;
    let using = users::users(&spec.name)?;
    if !using.is_empty() {
        bail!(
            "test bed {} is in use by {}: stop {} first, or pass --force to `flowlane testbed up` to stop {} and rebuild the bed",
            spec.name,
            users::list(&using),
            if using.len() == 1 { "it" } else { "them" },
            if using.len() == 1 { "it" } else { "them" },
        );
    }
    if let Ok(s) = load(&spec.name) {
        if intact(&s) && s.queues == spec.queues {
            let emu = RssEmuMaps::open(&s.pin_dir)?;
            emu.write(&emu_config(spec))?;
            return Ok(s);
        }
    }
    if unrecorded(&spec.name)? {
        bail!(
            "test bed {0} exists but {1} has no record of it (none, or one of namespaces \
             removed since): it may be another FLOWLANE_RUN_DIR's bed; set FLOWLANE_RUN_DIR to \
             its run directory, or remove it first with `flowlane testbed down --force --bed {0}`",
            spec.name,
            state::state_dir().display()
        );
    }
    // Whatever is left of this run directory's earlier bed of this name
    // goes first; then nothing of the name is left but what this call makes.
    remove(&spec.name)?;
    match make(spec) {
        Ok(s) => Ok(s),
        Err(e) => {
            let _ = remove(&spec.name);
            Err(e)
        }
    }
}

fn emu_config(spec: &BedSpec) -> RssEmuConfig {
    RssEmuConfig {
        enabled: true,
        key: spec.key.clone(),
        table: spec.table.clone(),
        hash_fields: HashFields::ALL_PORTS,
        queues: spec.queues,
    }
}

fn make(spec: &BedSpec) -> Result<BedState> {
    let (ns, peer_ns) = namespaces(&spec.name);
    let q = spec.queues.to_string();
    // Each namespace is noted before it is made and once it is: what a
    // crash leaves is this run directory's, and nothing made since by
    // another is (see `state::recorded`).
    let mut made = Vec::new();
    state::mark_making(&spec.name, &made)?;
    for n in [&ns, &peer_ns] {
        ip(&["netns", "add", n])?;
        made.push(netns::id(n).with_context(|| format!("namespace {n} vanished as it was made"))?);
        state::mark_making(&spec.name, &made)?;
    }
    ip(&[
        "link",
        "add",
        LOCAL_IF,
        "netns",
        &ns,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        PEER_IF,
        "netns",
        &peer_ns,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ])?;
    for (n, dev, v4, v6) in [
        (&ns, LOCAL_IF, LOCAL_V4, LOCAL_V6),
        (&peer_ns, PEER_IF, PEER_V4, PEER_V6),
    ] {
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&["-n", n, "addr", "add", &format!("{v4}/24"), "dev", dev])?;
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            dev,
            "nodad",
        ])?;
        ip(&["-n", n, "link", "set", dev, "up"])?;
    }
    // A wire carries finished checksums: without this, veth hands
    // CHECKSUM_PARTIAL skbs (pseudo-header sum only) to XDP, which no real NIC
    // would deliver.
    netns::run(
        "ip",
        &[
            "netns", "exec", &peer_ns, "ethtool", "-K", PEER_IF, "tx", "off",
        ],
    )?;
    // And a receiver that verifies them: veth marks checksum-less skbs
    // CHECKSUM_UNNECESSARY while RX checksumming is on, so the kernel stacks
    // would accept frames that `testbed impair` corrupted.
    for (n, dev) in [(&peer_ns, PEER_IF), (&ns, LOCAL_IF)] {
        netns::run(
            "ip",
            &["netns", "exec", n, "ethtool", "-K", dev, "rx", "off"],
        )?;
    }
    // The kernel on flowlane's side must not hand out flowlane's ephemeral
    // ports to its own sockets.
    let range = format!("{}-{}", FLOWLANE_EPHEMERAL.0, FLOWLANE_EPHEMERAL.1);
    netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            "sysctl",
            "-qw",
            &format!("net.ipv4.ip_local_reserved_ports={range}"),
        ],
    )?;

    let pin_dir = rss_emu::pin_dir_for(&spec.name);
    ensure_bpffs()?;
    let config = emu_config(spec);
    let pins = pin_dir.clone();
    netns::in_netns(&peer_ns, move || {
        let ifindex =
            nix::net::if_::if_nametoindex(PEER_IF).context("finding the peer interface")?;
        rss_emu::install(ifindex, &pins, &config).context("installing the emulated RSS NIC")?;
        Ok(())
    })?;
    let state = BedState {
        name: spec.name.clone(),
        netns: ns.clone(),
        peer_netns: peer_ns.clone(),
        local_if: LOCAL_IF.into(),
        peer_if: PEER_IF.into(),
        queues: spec.queues,
        local_v4: LOCAL_V4.into(),
        peer_v4: PEER_V4.into(),
        local_v6: LOCAL_V6.into(),
        peer_v6: PEER_V6.into(),
        local_mac: link_mac(&ns, LOCAL_IF)?,
        peer_mac: link_mac(&peer_ns, PEER_IF)?,
        pin_dir,
        netns_id: Some(made[0]),
        peer_netns_id: Some(made[1]),
    };
    state::save(&state)?;
    Ok(state)
}

fn link_mac(ns: &str, dev: &str) -> Result<String> {
    let out = ip(&["-n", ns, "-o", "link", "show", dev])?;
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_string)
        .with_context(|| format!("no MAC address on {dev}"))
}

/// The directory whose lock makes [`ensure_bpffs`]'s look and mount one
/// step: the bpffs mount is the host's, whatever `FLOWLANE_RUN_DIR` a bed
/// uses, and this directory (the mount point's parent) stays the same
/// inode when bpffs is mounted below it.
const BPFFS_LOCK_DIR: &str = "/sys/fs";

fn ensure_bpffs() -> Result<()> {
    // Two beds coming up at once would otherwise both see no bpffs and
    // both mount one, the second hiding the first's pins.
    let dir = std::fs::File::open(BPFFS_LOCK_DIR)
        .with_context(|| format!("opening {BPFFS_LOCK_DIR} to lock the bpffs mount"))?;
    let _lock = nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("locking {BPFFS_LOCK_DIR} around the bpffs mount"))?;
    if bpffs::mounted() {
        return Ok(());
    }
    std::fs::create_dir_all(bpffs::MOUNT_POINT).ok();
    netns::run("mount", &["-t", "bpf", "bpf", "/sys/fs/bpf"])
        .map(|_| ())
        .context("mounting bpffs on /sys/fs/bpf")
}

/// Whether bed `name`'s namespaces exist while this run directory
/// (`FLOWLANE_RUN_DIR`) has no record of them (neither its state file nor
/// the marker of an `up` of its own cut short names them: see
/// [`BedState::netns_id`]): a bed that another run directory recorded, one
/// made by hand, or one made anew since this run directory's was removed.
/// `testbed up` refuses such a bed, and `testbed down` unless forced.
pub fn unrecorded(name: &str) -> Result<bool> {
    validate_name(name)?;
    let (ns, peer_ns) = namespaces(name);
    Ok(!state::recorded(name) && (netns::exists(&ns) || netns::exists(&peer_ns)))
}

/// Removes a bed: stops the flowlane services that use it (SIGTERM, then
/// SIGKILL after [`STOP_GRACE`]; call [`stop_users`] first to learn which),
/// then removes its namespaces (with the veth pair and tc program in them),
/// pinned maps, state file and lock files. The shared directories that hold
/// those (`/sys/fs/bpf/flowlane`, the state directory, the lock directory)
/// stay. Removing nothing is not an error. Waits for a command at work on
/// the bed (its lock in [`crate::state::LOCK_DIR`]).
pub fn down(name: &str) -> Result<bool> {
    validate_name(name)?;
    netns::require_bed_privileges("flowlane testbed down")?;
    // Before the lock: a user asked to stop may release the bed itself (a
    // tool's own `down`, a demo putting the RSS table back), which takes it.
    stop_users(name, STOP_GRACE)?;
    let lock = BedLock::take(name)?;
    let removed = remove(name)?;
    lock.remove();
    Ok(removed)
}

/// [`down`]'s work, under the bed's lock (a user that came since is
/// stopped too).
fn remove(name: &str) -> Result<bool> {
    stop_users(name, STOP_GRACE)?;
    let (ns, peer_ns) = namespaces(name);
    let mut removed = false;
    for n in [&ns, &peer_ns] {
        if netns::exists(n) {
            ip(&["netns", "del", n])?;
            removed = true;
        }
    }
    let pins = rss_emu::pin_dir_for(name);
    if pins.exists() {
        rss_emu::remove_pins(&pins);
        removed = true;
    }
    if state::remove(name)? {
        removed = true;
    }
    // The delay line's lock file (`testbed delay`; the line itself was
    // stopped above, as a user of the bed).
    let _ = std::fs::remove_file(delay_lock_path(name));
    // The shared directories (the pins' and the state files') stay, empty:
    // removing one when it looked empty raced with another bed's `up`
    // between its `create_dir_all` and its first file (tests bring beds up
    // in parallel), which then failed.
    Ok(removed)
}

/// Live status of a bed.
#[derive(Debug, Serialize)]
pub struct BedStatus {
    /// Recorded state.
    #[serde(flatten)]
    pub state: BedState,
    /// Whether all parts are present.
    pub intact: bool,
    /// Key in force (hex).
    pub key: String,
    /// Table size in force.
    pub table_size: usize,
    /// The indirection table in force: the queue of each bucket.
    pub table: Vec<u32>,
    /// Packets the emulated NIC steered to each queue.
    pub queue_packets: Vec<u64>,
    /// XDP attached on flowlane's interface (mode), if any.
    pub xdp: Option<String>,
    /// Link impairment settings and counters, if `testbed impair` was used.
    pub impairment: Option<ImpairStatus>,
    /// The flowlane processes using the bed (pid and command).
    pub users: Vec<String>,
}

/// Reads a bed's live status.
pub fn status(name: &str) -> Result<BedStatus> {
    let state = load(name)?;
    let intact = intact(&state);
    let nic = state.nic();
    let cfg = nic.rss()?;
    let queue_packets = nic.queue_packets()?;
    let link = ip(&["-n", &state.netns, "-o", "link", "show", &state.local_if]).unwrap_or_default();
    let xdp = ["xdpgeneric", "xdpoffload", "xdpdrv", "xdp"]
        .iter()
        .find(|m| link.split_whitespace().any(|w| w == **m))
        .map(|m| m.to_string());
    Ok(BedStatus {
        intact,
        key: cfg
            .key
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        table_size: cfg.table.len(),
        table: cfg.table,
        queue_packets,
        xdp,
        impairment: impair::status(&state)?,
        users: crate::users::users(&state.name)?
            .iter()
            .map(ToString::to_string)
            .collect(),
        state,
    })
}
