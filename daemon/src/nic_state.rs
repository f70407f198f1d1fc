//! What the daemon found on each NIC it owns, kept where a daemon started
//! after it finds it. A daemon that is killed (SIGKILL, a crash, the OOM
//! killer) puts nothing back, and the one systemd starts again
//! (`Restart=on-failure`) would otherwise take the NIC as the killed one
//! left it (threaded NAPI on, the IRQs and NAPI threads pinned, the RSS
//! table spread) for what was there before, and never put it back.
//!
//! So before the daemon changes anything on a NIC, it writes the originals
//! it would put back into the NIC's file in the state directory (a
//! temporary file renamed over it: a reader finds the old file or the new
//! one, never part of one); a daemon that starts and finds the file takes
//! the originals from it rather than from the NIC; and the daemon removes
//! the file when it stops cleanly, having put the originals back (or, with
//! `--keep-on-exit`, having left the NIC as the plan configured it: what it
//! hands over is then what the next daemon finds).
//!
//! A file is one interface's only: named after its network namespace (the
//! namespace's inode) and its name, so that an interface of the same name
//! in another namespace (every test bed's `xsk0`) has a file of its own;
//! and holding what tells that interface from any made before or after it
//! ([`NicKey`]: its index, the inode of its sysfs directory and the boot),
//! so that one deleted and made again, or one of a namespace made anew
//! (the kernel gives a new namespace the inode of one deleted, and its
//! interfaces the same indexes), is not given the old one's originals.
//!
//! One daemon owns a NIC at a time: it holds the NIC ([`NicLock`]) for as
//! long as it owns it, and a second one, whatever its `--state-dir`,
//! refuses the NIC in one line rather than take the first one's changes
//! for originals and remove its file.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::Error;

/// Where the daemon keeps its NICs' state files unless told otherwise
/// (`--state-dir`, `state_dir` in the config file): beside its socket,
/// under `/run` (a tmpfs: emptied at boot, when every NIC is as its driver
/// makes it again).
pub const DEFAULT_STATE_DIR: &str = "/run/flowlane-daemon";

/// The largest state file read: a NIC's originals (an affinity per IRQ and
/// NAPI thread, an RSS table) are a few KiB; a file past this is no file
/// the daemon wrote.
pub const MAX_STATE_FILE: u64 = 1 << 20;

/// Which interface a state file is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicKey {
    /// Its name.
    pub iface: String,
    /// Its index (another once it is deleted and made again, mostly: a
    /// fresh namespace numbers its interfaces from 1 again).
    pub ifindex: u32,
    /// Its network namespace: the inode of `/proc/self/ns/net` (that of a
    /// namespace deleted is given to the next one made).
    pub netns: u64,
    /// The inode of its sysfs directory (`<sysfs>/class/net/IF`), which
    /// the running kernel gives no other interface (kernfs numbers its
    /// nodes 64 bits wide and never again, Linux 5.5 and later on 64-bit
    /// machines): what tells it from an interface of the same name and
    /// index made before it, in this namespace or in one deleted whose
    /// inode this one has. 0 in a file written before it was kept: the
    /// interface is then told by its index alone, as it was.
    #[serde(default)]
    pub node: u64,
    /// The boot (`<procfs>/sys/kernel/random/boot_id`): inode numbers
    /// start again at each boot, and a `--state-dir` may outlive one.
    /// Empty where it cannot be read, or in a file written before it was
    /// kept: not compared then.
    #[serde(default)]
    pub boot: String,
}

impl NicKey {
    /// `iface` of index `ifindex`, in this process's network namespace,
    /// its sysfs directory and the boot read under `sysfs_root` and
    /// `procfs_root` (`/sys`, `/proc`).
    ///
    /// # Errors
    /// [`Error::State`] when the namespace or the interface's sysfs
    /// directory cannot be read.
    pub fn here(
        sysfs_root: &Path,
        procfs_root: &Path,
        iface: &str,
        ifindex: u32,
    ) -> Result<NicKey, Error> {
        let inode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.ino())
                .map_err(|e| Error::State(format!("reading {}: {e}", p.display())))
        };
        let boot = std::fs::read_to_string(procfs_root.join("sys/kernel/random/boot_id"))
            .map(|b| b.trim().to_string())
            .unwrap_or_default();
        Ok(NicKey {
            iface: iface.to_string(),
            ifindex,
            netns: inode(Path::new("/proc/self/ns/net"))?,
            node: inode(&sysfs_root.join("class/net").join(iface))?,
            boot,
        })
    }

    /// How the interface `was` is another than this one, in words (`ifindex
    /// 7`), if it is: its index, its sysfs inode or its boot differs (the
    /// last two where both keys know them).
    fn other(&self, was: &NicKey) -> Option<String> {
        if was.ifindex != self.ifindex {
            return Some(format!("ifindex {}", was.ifindex));
        }
        if !was.boot.is_empty() && !self.boot.is_empty() && was.boot != self.boot {
            return Some(format!("of boot {}, before this one", was.boot));
        }
        if was.node != 0 && self.node != 0 && was.node != self.node {
            return Some(format!(
                "sysfs inode {}, this one's {}: made before it",
                was.node, self.node
            ));
        }
        None
    }
}

/// A state file as written: whose it is, and the originals.
#[derive(Debug, Serialize, Deserialize)]
struct OnDisk<T> {
    #[serde(flatten)]
    key: NicKey,
    originals: T,
}

/// What [`StateFile::load`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<T> {
    /// No file: the NIC is as the daemon finds it.
    Nothing,
    /// A daemon before this one changed the NIC and did not put it back:
    /// what was there before it.
    Originals(T),
    /// The file is of an interface of the same name that is gone (how it
    /// is another, in words: `ifindex 7`): not this one's.
    OtherInterface(String),
}

/// One owned NIC's state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    path: PathBuf,
    key: NicKey,
}

impl StateFile {
    /// The state file of `key` in `dir`.
    pub fn new(dir: &Path, key: NicKey) -> StateFile {
        StateFile {
            path: dir.join(format!("nic-{}-{}.toml", key.netns, key.iface)),
            key,
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file holds, if there is one.
    ///
    /// # Errors
    /// [`Error::State`] when a file is there but cannot be read, is too
    /// large or is not a state file: its originals cannot be told, and the
    /// NIC's current state may be a killed daemon's changes, so nothing is
    /// taken for original (said with what to do).
    pub fn load<T: DeserializeOwned>(&self) -> Result<Found<T>, Error> {
        let bad = |why: String| {
            Error::State(format!(
                "{}: {why}: the originals of {} a daemon before this one kept cannot be read; \
                 put {} back by hand if a daemon was killed while it owned it, then remove the \
                 file (or give --state-dir another directory)",
                self.path.display(),
                self.key.iface,
                self.key.iface
            ))
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err(self.not_a_directory())
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        let mut text = String::new();
        file.take(MAX_STATE_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(e.to_string()))?;
        if text.len() as u64 > MAX_STATE_FILE {
            return Err(bad(format!("larger than {MAX_STATE_FILE} bytes")));
        }
        let on_disk: OnDisk<T> = toml::from_str(&text).map_err(|e| bad(e.message().into()))?;
        if on_disk.key.iface != self.key.iface || on_disk.key.netns != self.key.netns {
            return Err(bad(format!(
                "it is of {} in network namespace {}",
                on_disk.key.iface, on_disk.key.netns
            )));
        }
        if let Some(other) = self.key.other(&on_disk.key) {
            return Ok(Found::OtherInterface(other));
        }
        Ok(Found::Originals(on_disk.originals))
    }

    /// The state directory, said to be no directory (a file given to
    /// `--state-dir`, or a path through one).
    fn not_a_directory(&self) -> Error {
        Error::State(format!(
            "--state-dir {} is not a directory: give --state-dir a directory (one that is \
             missing is made)",
            self.dir().display()
        ))
    }

    /// The directory the file is in.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Makes the file's directory, its owner's alone, if need be.
    fn make_dir(&self) -> Result<(), Error> {
        let dir = self.dir();
        if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
            return Err(self.not_a_directory());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotADirectory => self.not_a_directory(),
                _ => Error::State(format!(
                    "making {} for {}'s originals: {e} (give --state-dir a directory the daemon \
                     may write)",
                    dir.display(),
                    self.key.iface
                )),
            })
    }

    /// Writes `originals` as the file, whole or not at all: to a temporary
    /// file of the directory (made, its owner's alone, if need be), synced,
    /// then renamed over the file.
    ///
    /// # Errors
    /// [`Error::State`] saying what failed and what to do.
    pub fn save<T: Serialize>(&self, originals: &T) -> Result<(), Error> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Error::State(format!(
                "keeping {}'s originals in {}: {what}: {e} (give --state-dir a directory the \
                 daemon may write)",
                self.key.iface,
                self.path.display()
            ))
        };
        let text = toml::to_string(&OnDisk {
            key: self.key.clone(),
            originals,
        })
        .map_err(|e| failed("writing them as TOML", &e))?;
        self.make_dir()?;
        let dir = self.dir();
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(failed("writing the file", &e));
        }
        // The rename itself made durable (where /run is no tmpfs).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Removes the file (none there is no error).
    ///
    /// # Errors
    /// [`Error::State`] when it is there and cannot be removed.
    pub fn remove(&self) -> Result<(), Error> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::State(format!(
                "removing {}: {e}",
                self.path.display()
            ))),
            _ => Ok(()),
        }
    }
}

/// A NIC this process owns, until dropped: a Unix socket listening at an
/// abstract address named after the interface and its sysfs inode
/// ([`NicKey::node`]). Abstract addresses are per network namespace, as
/// the interface is; no file is left behind, whatever the state
/// directory; and the kernel lets the address go when the process ends,
/// however it ends (a killed daemon's NIC is the next one's to own).
#[derive(Debug)]
pub struct NicLock {
    _held: std::os::fd::OwnedFd,
}

/// The connections a [`NicLock`] queues (never taken) from daemons asking
/// who holds it: past these, the refusal cannot name the holder's pid.
const HOLDER_ASKS: i32 = 16;

impl NicLock {
    /// Owns the NIC `key` names for this process.
    ///
    /// # Errors
    /// [`Error::State`]: another process owns it (a daemon, named by its
    /// pid where it can be told), or the address cannot be made.
    pub fn take(key: &NicKey) -> Result<NicLock, Error> {
        use nix::sys::socket::{
            bind, connect, getsockopt, listen, socket, sockopt::PeerCredentials, AddressFamily,
            Backlog, SockFlag, SockType, UnixAddr,
        };
        use std::os::fd::AsRawFd;
        let name = format!("flowlane-daemon/nic/{}/{}", key.iface, key.node);
        let failed = |what: &str, e: nix::errno::Errno| {
            Error::State(format!(
                "owning {}: {what} the abstract Unix socket @{name}: {e}",
                key.iface
            ))
        };
        let addr = UnixAddr::new_abstract(name.as_bytes()).map_err(|e| failed("naming", e))?;
        let unix = || {
            socket(
                AddressFamily::Unix,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                None,
            )
            .map_err(|e| failed("making", e))
        };
        let held = unix()?;
        match bind(held.as_raw_fd(), &addr) {
            Ok(()) => {}
            Err(nix::errno::Errno::EADDRINUSE) => {
                // Who holds it: the process listening there, as its
                // credentials on a connection say.
                let asking = unix()?;
                let pid = connect(asking.as_raw_fd(), &addr)
                    .ok()
                    .and_then(|()| getsockopt(&asking, PeerCredentials).ok())
                    .map(|c| c.pid())
                    .filter(|&p| p > 0);
                return Err(Error::State(format!(
                    "another daemon{} owns {}: one daemon owns a NIC at a time; stop that one \
                     first",
                    pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                    key.iface
                )));
            }
            Err(e) => return Err(failed("binding", e)),
        }
        let backlog = Backlog::new(HOLDER_ASKS).map_err(|e| failed("listening on", e))?;
        listen(&held, backlog).map_err(|e| failed("listening on", e))?;
        Ok(NicLock { _held: held })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    struct Originals {
        threaded_on: bool,
        irqs: Vec<(u32, String)>,
        table: Option<Vec<u32>>,
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fl-nic-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key(iface: &str, ifindex: u32, netns: u64) -> NicKey {
        NicKey {
            iface: iface.into(),
            ifindex,
            netns,
            node: 2_208_470,
            boot: "942b8c78-e8a5-4ee2-a784-600a2a581ad6".into(),
        }
    }

    /// Saved, the originals read back the same; another namespace's
    /// interface of the same name has a file of its own; an interface made
    /// again (another index) is told from the one the file is of; removed,
    /// nothing is found.
    #[test]
    fn originals_are_kept_per_interface_and_namespace() {
        let d = dir("keyed");
        let originals = Originals {
            threaded_on: true,
            irqs: vec![(120, "0-3".into()), (121, "0-3".into())],
            table: None,
        };
        let f = StateFile::new(&d, key("xsk0", 7, 4026532001));
        assert_eq!(f.load::<Originals>().unwrap(), Found::Nothing);
        f.save(&originals).unwrap();
        assert_eq!(f.load().unwrap(), Found::Originals(originals.clone()));
        let mode = std::fs::metadata(&d).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "the directory is its owner's alone");
        // Another bed's xsk0: its own file.
        let other_ns = StateFile::new(&d, key("xsk0", 7, 4026532002));
        assert_ne!(other_ns.path(), f.path());
        assert_eq!(other_ns.load::<Originals>().unwrap(), Found::Nothing);
        // xsk0 deleted and made again: another index.
        let again = StateFile::new(&d, key("xsk0", 9, 4026532001));
        assert_eq!(again.path(), f.path());
        assert_eq!(
            again.load::<Originals>().unwrap(),
            Found::OtherInterface("ifindex 7".into())
        );
        // Written over whole: no temporary file is left.
        let table = Originals {
            table: Some(vec![0, 1, 0, 1]),
            ..originals
        };
        again.save(&table).unwrap();
        assert_eq!(again.load().unwrap(), Found::Originals(table));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        again.remove().unwrap();
        again.remove().unwrap();
        assert_eq!(again.load::<Originals>().unwrap(), Found::Nothing);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A file that is not one the daemon wrote (garbage, too large, a
    /// symlink) is refused in one line naming it and what to do, not taken
    /// for "no originals".
    #[test]
    fn a_file_that_cannot_be_read_is_refused_not_ignored() {
        let d = dir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let f = StateFile::new(&d, key("eth1", 3, 1));
        for text in [
            "not toml at all [".to_string(),
            "x".repeat(MAX_STATE_FILE as usize + 1),
        ] {
            std::fs::write(f.path(), text).unwrap();
            let e = f.load::<Originals>().unwrap_err().to_string();
            assert!(
                e.starts_with(&f.path().display().to_string())
                    && e.contains("remove the file")
                    && !e.contains('\n'),
                "{e}"
            );
        }
        std::fs::remove_file(f.path()).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", f.path()).unwrap();
        assert!(f.load::<Originals>().is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A namespace made anew gets the inode of one deleted, and its
    /// interfaces the same indexes: the file a daemon killed in the old one
    /// left is told from this interface's by the inode of its sysfs
    /// directory (or the boot), not taken for its originals. A file written
    /// before those were kept is read as it was, by its index.
    #[test]
    fn an_interface_of_a_namespace_made_anew_is_not_given_the_old_one_s_originals() {
        let d = dir("reused");
        let originals = Originals {
            threaded_on: true,
            irqs: Vec::new(),
            table: None,
        };
        let was = key("xsk0", 2, 4026532178);
        StateFile::new(&d, was.clone()).save(&originals).unwrap();
        let anew = NicKey {
            node: 2_208_959,
            ..was.clone()
        };
        let f = StateFile::new(&d, anew);
        assert_eq!(
            f.load::<Originals>().unwrap(),
            Found::OtherInterface("sysfs inode 2208470, this one's 2208959: made before it".into())
        );
        let rebooted = NicKey {
            boot: "0c1d5a7e-0000-4000-8000-000000000001".into(),
            ..was
        };
        assert_eq!(
            StateFile::new(&d, rebooted).load::<Originals>().unwrap(),
            Found::OtherInterface(
                "of boot 942b8c78-e8a5-4ee2-a784-600a2a581ad6, before this one".into()
            )
        );
        // A file of an earlier daemon, without them: by its index, as then.
        std::fs::write(
            f.path(),
            "iface = \"xsk0\"\nifindex = 2\nnetns = 4026532178\n\n[originals]\n\
             threaded_on = true\nirqs = []\n",
        )
        .unwrap();
        assert_eq!(f.load().unwrap(), Found::Originals(originals));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Read through real roots: the sysfs inode and the boot are this
    /// interface's and this boot's.
    #[test]
    fn the_key_here_names_the_interface_s_sysfs_node_and_the_boot() {
        let k = NicKey::here(Path::new("/sys"), Path::new("/proc"), "lo", 1).unwrap();
        let node = std::fs::metadata("/sys/class/net/lo").unwrap().ino();
        assert_eq!((k.iface.as_str(), k.ifindex, k.node), ("lo", 1, node));
        assert_eq!(k.boot.len(), 36, "{k:?}");
        let e = NicKey::here(Path::new("/sys"), Path::new("/proc"), "flnone9", 9).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("reading /sys/class/net/flnone9: "),
            "{e}"
        );
    }

    /// A second daemon asked to own a NIC another one owns refuses it, in
    /// one line naming the other's pid, whatever its state directory;
    /// another interface (another sysfs inode) is another NIC; once the
    /// first lets go, the NIC is free. No file is left.
    #[test]
    fn one_daemon_owns_a_nic_at_a_time() {
        let d = dir("locked");
        let k = NicKey {
            node: u64::from(std::process::id()) << 20,
            ..key("xsk0", 2, 4026532001)
        };
        let first = NicLock::take(&k).unwrap();
        let e = NicLock::take(&k).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "another daemon (pid {}) owns xsk0: one daemon owns a NIC at a time; stop that \
                 one first",
                std::process::id()
            )
        );
        let other = NicLock::take(&NicKey {
            node: k.node + 1,
            ..k.clone()
        })
        .unwrap();
        drop(first);
        let again = NicLock::take(&k).unwrap();
        drop((again, other));
        assert!(!d.exists(), "no file");
    }

    /// `--state-dir` given a file: said to be no directory, whichever is
    /// asked first.
    #[test]
    fn a_state_dir_that_is_a_file_is_said_to_be_no_directory() {
        let d = dir("file");
        std::fs::write(&d, "not a directory\n").unwrap();
        let f = StateFile::new(&d, key("xsk0", 2, 1));
        let said = format!(
            "--state-dir {} is not a directory: give --state-dir a directory (one that is \
             missing is made)",
            d.display()
        );
        assert_eq!(f.load::<Originals>().unwrap_err().to_string(), said);
        let none = Originals {
            threaded_on: true,
            irqs: Vec::new(),
            table: None,
        };
        assert_eq!(f.save(&none).unwrap_err().to_string(), said);
        std::fs::remove_file(&d).unwrap();
    }
}
