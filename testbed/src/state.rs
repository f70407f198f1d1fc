//! A bed's recorded state: the one schema of its JSON state file, the one
//! state directory, the one name check, and the bed's fixed addresses.
//!
//! A bed records its state in `$FLOWLANE_RUN_DIR/testbed/<name>.json`
//! (default `/run/flowlane`) and pins its emulated NIC's maps in bpffs; both
//! are visible only from the root namespace.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

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
    /// flowlane side's MAC.
    pub local_mac: String,
    /// Far side's MAC.
    pub peer_mac: String,
    /// bpffs directory of the emulated NIC's maps.
    pub pin_dir: PathBuf,
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

/// The lock file that keeps one delay line per bed.
pub fn delay_lock_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.delay.lock"))
}

/// The namespaces of bed `name`: flowlane's and the far side's.
pub(crate) fn namespaces(name: &str) -> (String, String) {
    (format!("flowlane-{name}"), format!("flowlane-{name}-peer"))
}

/// Reads a bed's recorded state (from the root namespace).
pub fn load(name: &str) -> Result<BedState> {
    load_hinted(name, "")
}

/// [`load`], with `hint` appended to the "not up" message.
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
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is corrupt; run `flowlane testbed down --bed {name}`",
            p.display()
        )
    })
}

/// Records `state` (atomically: a reader never sees half a file).
pub(crate) fn save(state: &BedState) -> Result<()> {
    std::fs::create_dir_all(state_dir()).context("creating the state directory")?;
    let tmp = state_path(&state.name).with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)?;
    std::fs::rename(&tmp, state_path(&state.name))?;
    Ok(())
}

/// Removes a bed's state file; whether there was one.
pub(crate) fn remove(name: &str) -> Result<bool> {
    let st = state_path(name);
    if !st.exists() {
        return Ok(false);
    }
    std::fs::remove_file(&st).with_context(|| format!("removing {}", st.display()))?;
    Ok(true)
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
