//! A bed's recorded state: the one schema of its JSON state file, the one
//! state directory, the one name check, and the bed's fixed addresses.
//!
//! A bed records its state in `$FLOWLANE_RUN_DIR/testbed/<name>.json`
//! (default `/run/flowlane`) and pins its emulated NIC's maps in bpffs; both
//! are visible only from the root namespace.
//!
//! A bed's namespaces and pins are the host's, whatever run directory
//! records it, so its locks are too ([`LOCK_DIR`]): the bed lock makes the
//! commands that change a bed (`up`, `down`, `impair`, `set-rss`) one at a
//! time, and the delay line's lock ([`delay_lock_path`]) keeps one line per
//! bed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::netns::{self, NsId};

/// flowlane side's interface name (inside its namespace).
pub const LOCAL_IF: &str = "xsk0";
/// Far side's interface name (inside its namespace).
pub const PEER_IF: &str = "peer0";
/// flowlane side's IPv4 address.
pub const LOCAL_V4: &str = "10.99.0.1";
/// Far side's IPv4 address.
pub const PEER_V4: &str = "10.99.0.2";
/// flowlane side's IPv6 address.
pub const LOCAL_V6: &str = "fd99::1";
/// Far side's IPv6 address.
pub const PEER_V6: &str = "fd99::2";
/// Ports the kernel is told to leave to flowlane on its side
/// (`net.ipv4.ip_local_reserved_ports`).
pub use flowlane_dataplane::ephemeral::EPHEMERAL as FLOWLANE_EPHEMERAL;

/// What `up` made, recorded so that `down`, `status` and programs run on
/// the bed know.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BedState {
    /// Bed name.
    pub name: String,
    /// flowlane's namespace.
    pub netns: String,
    /// The far side's namespace.
    pub peer_netns: String,
    /// flowlane side's interface.
    pub local_if: String,
    /// Far side's interface.
    pub peer_if: String,
    /// Queue count.
    pub queues: u32,
    /// flowlane side's IPv4 address.
    pub local_v4: String,
    /// Far side's IPv4 address.
    pub peer_v4: String,
    /// flowlane side's IPv6 address ([`LOCAL_V6`] in a state file written
    /// before flowlane recorded it: every bed has had it).
    #[serde(default = "local_v6")]
    pub local_v6: String,
    /// Far side's IPv6 address (likewise [`PEER_V6`]).
    #[serde(default = "peer_v6")]
    pub peer_v6: String,
    /// flowlane side's MAC.
    pub local_mac: String,
    /// Far side's MAC.
    pub peer_mac: String,
    /// bpffs directory of the emulated NIC's maps.
    pub pin_dir: PathBuf,
    /// The identity of `netns` as `up` made it: a state file records the
    /// namespaces that are there only while they are the ones it made.
    /// `None` in a state file written before flowlane recorded it: that file
    /// records no namespace that is there (the safe reading: it cannot tell
    /// its bed from one made since under the name, and taking it for the
    /// latter would let `up` rewrite and `down` remove another run
    /// directory's bed; `testbed down --force` removes such a bed).
    #[serde(default)]
    pub netns_id: Option<NsId>,
    /// The identity of `peer_netns` as `up` made it (as `netns_id`).
    #[serde(default)]
    pub peer_netns_id: Option<NsId>,
}

fn local_v6() -> String {
    LOCAL_V6.into()
}

fn peer_v6() -> String {
    PEER_V6.into()
}

/// Checks a bed name: 1-24 letters, digits, '-' or '_', not ending in
/// `-peer` (bed `x`'s far side is namespace `flowlane-x-peer`, which bed
/// `x-peer`'s own side would be: one bed could remove another's).
pub fn validate_name(name: &str) -> Result<()> {
    // Namespace names become paths and interface-independent; keep them short
    // and plain.
    if name.is_empty()
        || name.len() > 24
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("test bed name {name:?} must be 1-24 characters of letters, digits, '-' or '_'");
    }
    if let Some(other) = name.strip_suffix("-peer") {
        bail!(
            "test bed name {name:?} must not end in \"-peer\": bed {other:?}'s far side has that \
             namespace; choose another name"
        );
    }
    Ok(())
}

/// Directory of the beds' state files (`$FLOWLANE_RUN_DIR/testbed`,
/// default `/run/flowlane/testbed`).
pub fn state_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("FLOWLANE_RUN_DIR").unwrap_or_else(|| "/run/flowlane".into()))
        .join("testbed")
}

pub(crate) fn state_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.json"))
}

/// The marker `up` leaves in the state directory while it makes a bed,
/// until the state file records it: a bed a crash left half-made is this
/// run directory's to remove.
pub(crate) fn making_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.making"))
}

/// What a marker of `up`'s making ([`making_path`]) says: the identities of
/// the namespaces made so far, flowlane's side first, then the far side's.
/// A marker of an older flowlane (an empty file) reads as none made.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Making {
    made: Vec<NsId>,
}

/// Notes that this run directory is making bed `name` ([`making_path`])
/// and has made the namespaces `made` (flowlane's side first): written
/// before each namespace is made and once both are.
pub(crate) fn mark_making(name: &str, made: &[NsId]) -> Result<()> {
    let m = Making {
        made: made.to_vec(),
    };
    write_whole(&making_path(name), serde_json::to_string(&m)?.as_bytes())
}

/// The identities of bed `name`'s namespaces there now (flowlane's side,
/// the far side's).
fn live_ids(name: &str) -> [Option<NsId>; 2] {
    let (ns, peer_ns) = namespaces(name);
    [netns::id(&ns), netns::id(&peer_ns)]
}

/// Whether a record of a bed's namespaces (`made`: their identities in the
/// order `up` makes them, flowlane's side first) covers those there now
/// (`live`): each one there is the one recorded in its place or, for the
/// record of an `up` under way or cut short (`making`), the one it was
/// making when it wrote the record (the next, with none after it there: a
/// crash between making a namespace and noting it leaves that one). That
/// one cannot be told from a namespace made in its place since, by hand or
/// by another run directory's `up` cut short the same way: a half-made
/// leftover either way, which this run directory's next `up` removes; a
/// whole bed made since is never covered (its second namespace is not the
/// one noted, or not the next).
fn covers(made: &[Option<NsId>], live: &[Option<NsId>; 2], making: bool) -> bool {
    live.iter().enumerate().all(|(i, now)| match now {
        None => true,
        Some(id) => {
            made.get(i) == Some(&Some(*id))
                || (making && i == made.len() && live[i + 1..].iter().all(Option::is_none))
        }
    })
}

/// Whether this run directory records bed `name` as it is now: its state
/// file, or the marker of an `up` under way or cut short, names the
/// namespaces of the name that are there ([`covers`]). A record of
/// namespaces removed since (by `down --force` from another run
/// directory, which may have made its own under the name) records nothing
/// that is there.
pub(crate) fn recorded(name: &str) -> bool {
    if load(name).is_ok() {
        return true;
    }
    let Ok(text) = std::fs::read_to_string(making_path(name)) else {
        return false;
    };
    let m: Making = serde_json::from_str(&text).unwrap_or_default();
    let made: Vec<Option<NsId>> = m.made.into_iter().map(Some).collect();
    covers(&made, &live_ids(name), true)
}

/// Directory of the beds' locks: the host's, not a run directory's (two
/// run directories name the same namespaces and pins).
pub const LOCK_DIR: &str = "/run/flowlane/lock";

fn bed_lock_path(name: &str) -> PathBuf {
    PathBuf::from(LOCK_DIR).join(format!("{name}.lock"))
}

/// The lock file that keeps one delay line per bed (see [`LOCK_DIR`]).
pub fn delay_lock_path(name: &str) -> PathBuf {
    PathBuf::from(LOCK_DIR).join(format!("{name}.delay.lock"))
}

/// An exclusive `flock` on a lock file, released when dropped (and when the
/// process exits, however it exits).
#[derive(Debug)]
pub(crate) struct FileLock {
    file: nix::fcntl::Flock<std::fs::File>,
    path: PathBuf,
}

impl FileLock {
    /// Takes the lock on `path` (made if missing), waiting for it unless
    /// `wait` is false: then `None` when another holds it. A lock file
    /// removed while it was being waited for ([`FileLock::remove`]) is made
    /// anew and locked, so that no two holders ever lock two files of one
    /// path.
    pub(crate) fn take(path: PathBuf, wait: bool) -> Result<Option<FileLock>> {
        use std::os::unix::fs::MetadataExt;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let how = if wait {
            nix::fcntl::FlockArg::LockExclusive
        } else {
            nix::fcntl::FlockArg::LockExclusiveNonblock
        };
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            let file = match nix::fcntl::Flock::lock(file, how) {
                Ok(f) => f,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) if !wait => return Ok(None),
                Err((_, nix::errno::Errno::EINTR)) => continue,
                Err((_, e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()))
                }
            };
            let held = file.metadata().ok().map(|m| (m.dev(), m.ino()));
            let named = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
            if held.is_some() && held == named {
                return Ok(Some(FileLock { file, path }));
            }
        }
    }

    /// Removes the lock file, then releases the lock (for a bed that is
    /// gone: its lock files need not outlive it).
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Bed `name`'s lock, held by each command that changes the bed, so that
/// two of them (two processes bringing one bed up, or one taking it down)
/// never work on it at once: it waits for the one under way.
#[derive(Debug)]
pub(crate) struct BedLock(FileLock);

impl BedLock {
    /// Takes bed `name`'s lock, waiting for its holder.
    pub(crate) fn take(name: &str) -> Result<BedLock> {
        validate_name(name)?;
        let lock =
            FileLock::take(bed_lock_path(name), true)?.context("a waiting lock is always taken")?;
        Ok(BedLock(lock))
    }

    /// Releases the lock of a bed that is gone, removing its lock file.
    pub(crate) fn remove(self) {
        self.0.remove();
    }
}

/// The namespaces of bed `name`: flowlane's and the far side's.
pub(crate) fn namespaces(name: &str) -> (String, String) {
    (format!("flowlane-{name}"), format!("flowlane-{name}-peer"))
}

/// Reads a bed's recorded state (from the root namespace).
pub fn load(name: &str) -> Result<BedState> {
    load_hinted(name, "")
}

/// [`load`], with `hint` appended to the "not up" message. A state file
/// whose namespaces are not those there now (see [`recorded`]) is refused:
/// the bed under the name is not the one it describes.
pub(crate) fn load_hinted(name: &str, hint: &str) -> Result<BedState> {
    validate_name(name)?;
    let p = state_path(name);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "no test bed named {name} is up; start it with `flowlane testbed up --bed {name}`{hint}"
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    let s: BedState = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is corrupt; run `flowlane testbed down --force --bed {name}`",
            p.display()
        )
    })?;
    if !covers(&[s.netns_id, s.peer_netns_id], &live_ids(name), false) {
        bail!(
            "{} does not record the namespaces of test bed {name} that are there (they were \
             made since, by another FLOWLANE_RUN_DIR or by hand, or the file predates flowlane \
             recording them): set FLOWLANE_RUN_DIR to the bed's run directory, or remove the bed \
             with `flowlane testbed down --force --bed {name}`",
            p.display()
        );
    }
    Ok(s)
}

/// Writes `bytes` to `path` in the state directory atomically (through
/// `<path>.tmp`): a reader never sees half a file.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(state_dir()).context("creating the state directory")?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", path.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Records `state` (atomically: a reader never sees half a file); the
/// marker of its making ([`making_path`]) goes.
pub(crate) fn save(state: &BedState) -> Result<()> {
    write_whole(
        &state_path(&state.name),
        serde_json::to_string_pretty(state)?.as_bytes(),
    )?;
    let _ = std::fs::remove_file(making_path(&state.name));
    Ok(())
}

/// Removes a bed's state file and the marker of its making; whether there
/// was either.
pub(crate) fn remove(name: &str) -> Result<bool> {
    let mut removed = false;
    for p in [state_path(name), making_path(name)] {
        if p.exists() {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            removed = true;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_plain() {
        assert!(validate_name("fl0").is_ok());
        assert!(validate_name("a-b_c").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("a/b").is_err());
        assert!(validate_name(&"x".repeat(25)).is_err());
        assert!(validate_name("fl0-peer").is_err());
        assert!(validate_name("fl0-peers").is_ok());
    }

    /// Every valid name's namespaces are its own: no other valid name's
    /// (a bed `x-peer` took bed `x`'s far side).
    #[test]
    fn valid_names_never_share_a_namespace() {
        let names = [
            "x",
            "x-peer",
            "x-peer-peer",
            "peer",
            "x-",
            "x_peer",
            "a-b",
            "a",
        ];
        let valid: Vec<&str> = names
            .into_iter()
            .filter(|n| validate_name(n).is_ok())
            .collect();
        let mut seen = std::collections::BTreeMap::new();
        for n in valid {
            let (a, b) = namespaces(n);
            for ns in [a, b] {
                if let Some(other) = seen.insert(ns.clone(), n) {
                    panic!("{ns} is both {other}'s and {n}'s");
                }
            }
        }
    }

    /// A record covers the namespaces there only when they are the ones it
    /// made (a number given again to a namespace made since, with another
    /// change time, is not); the marker of an `up` cut short covers the
    /// next one it was making too, and no other.
    #[test]
    fn a_record_covers_only_the_namespaces_it_made() {
        let id = |ino, ctime_ns| NsId {
            dev: 4,
            ino,
            ctime_s: 100,
            ctime_ns,
        };
        let (a, b) = (id(1, 0), id(2, 0));
        let state = [Some(a), Some(b)];
        assert!(covers(&state, &[Some(a), Some(b)], false));
        assert!(covers(&state, &[None, Some(b)], false), "a broken bed");
        assert!(covers(&state, &[None, None], false));
        // Made anew: the same numbers, later.
        assert!(!covers(&state, &[Some(id(1, 5)), Some(b)], false));
        assert!(!covers(&state, &[Some(a), Some(id(2, 5))], false));
        // A state file of an older flowlane records no namespace.
        assert!(!covers(&[None, None], &[Some(a), None], false));
        assert!(covers(&[None, None], &[None, None], false));
        // The marker: what it noted, and the one being made next.
        assert!(covers(&[], &[Some(a), None], true));
        assert!(!covers(&[], &[Some(a), Some(b)], true));
        assert!(!covers(&[], &[None, Some(b)], true));
        assert!(covers(&[Some(a)], &[Some(a), Some(b)], true));
        assert!(!covers(&[Some(a)], &[Some(id(1, 5)), Some(b)], true));
        assert!(!covers(&[Some(a)], &[Some(a), Some(b)], false));
    }

    /// A lock file removed by its holder while another waits for it: the
    /// waiter locks the file made anew, not the removed one, so that a third
    /// taker cannot hold the path's lock at the same time.
    #[test]
    fn a_lock_removed_under_a_waiter_is_taken_anew() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("fl-lock-{}", std::process::id()));
        let path = dir.join("b.lock");
        let first = FileLock::take(path.clone(), true).unwrap().unwrap();
        assert!(
            FileLock::take(path.clone(), false).unwrap().is_none(),
            "a held lock is refused without waiting"
        );
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || FileLock::take(path, true).unwrap().unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        first.remove();
        let second = waiter.join().unwrap();
        let held = second.file.metadata().unwrap().ino();
        let named = std::fs::metadata(&path).map(|m| m.ino()).ok();
        assert_eq!(Some(held), named, "the waiter holds a removed file");
        assert!(FileLock::take(path, false).unwrap().is_none());
        second.remove();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_a_state_file_and_reports_a_missing_bed() {
        let dir = std::env::temp_dir().join(format!("fl-bed-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("testbed")).unwrap();
        std::fs::write(
            dir.join("testbed/b1.json"),
            r#"{"name":"b1","netns":"flowlane-b1","peer_netns":"flowlane-b1-peer","local_if":"xsk0",
               "peer_if":"peer0","queues":2,"local_v4":"10.99.0.1","peer_v4":"10.99.0.2",
               "local_mac":"02:00:00:00:00:01","peer_mac":"02:00:00:00:00:02","pin_dir":"/nonexistent"}"#,
        )
        .unwrap();
        std::fs::write(dir.join("testbed/bad.json"), "{").unwrap();
        // Only this test reads FLOWLANE_RUN_DIR in this crate's unit tests.
        std::env::set_var("FLOWLANE_RUN_DIR", &dir);
        let b = load("b1").unwrap();
        assert_eq!(b.netns, "flowlane-b1");
        assert_eq!(b.queues, 2);
        // A state file of a flowlane that did not record the IPv6
        // addresses: the ones every bed has had.
        assert_eq!(
            (b.local_v6.as_str(), b.peer_v6.as_str()),
            (LOCAL_V6, PEER_V6)
        );
        assert_eq!(namespaces("b1"), (b.netns, b.peer_netns));
        let e = format!("{:#}", load("nope").unwrap_err());
        assert!(e.contains("no test bed named nope is up"), "{e}");
        assert!(
            e.contains("testbed up --bed nope") && !e.contains("os error"),
            "{e}"
        );
        let e = load_hinted("nope", " (hint)").unwrap_err().to_string();
        assert!(e.ends_with(" (hint)"), "{e}");
        let e = load("bad").unwrap_err().to_string();
        assert!(e.contains("corrupt"), "{e}");
        std::env::remove_var("FLOWLANE_RUN_DIR");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
