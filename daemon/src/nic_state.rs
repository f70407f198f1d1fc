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
//! namespace's inode) and its name, and holding its interface index, so
//! that an interface of the same name in another namespace (every test
//! bed's `xsk0`) has a file of its own, and one deleted and made again
//! (another index) is not given the old one's originals.

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
    /// Its index (another once it is deleted and made again).
    pub ifindex: u32,
    /// Its network namespace: the inode of `/proc/self/ns/net`.
    pub netns: u64,
}

impl NicKey {
    /// `iface` of index `ifindex`, in this process's network namespace.
    ///
    /// # Errors
    /// [`Error::State`] when the namespace cannot be read.
    pub fn here(iface: &str, ifindex: u32) -> Result<NicKey, Error> {
        let netns = std::fs::metadata("/proc/self/ns/net")
            .map_err(|e| Error::State(format!("reading /proc/self/ns/net: {e}")))?
            .ino();
        Ok(NicKey {
            iface: iface.to_string(),
            ifindex,
            netns,
        })
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
    /// The file is of an interface of the same name that is gone (this
    /// index): not this one's.
    OtherInterface(u32),
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
        if on_disk.key.ifindex != self.key.ifindex {
            return Ok(Found::OtherInterface(on_disk.key.ifindex));
        }
        Ok(Found::Originals(on_disk.originals))
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
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| failed("making its directory", &e))?;
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
        assert_eq!(again.load::<Originals>().unwrap(), Found::OtherInterface(7));
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
}
