//! Changes to a served interface that the data path serves on through
//! (nothing to restart) but that would otherwise go unsaid: the interface
//! down (nothing arrives until it is up again), and flowlane's IPv4 or
//! IPv6 address removed from it (flowlane still answers on the address,
//! whose frames its program takes, though the host no longer has it). Each is
//! said once as it happens, and once as it is over; looked at by
//! [`crate::runtime::Dataplane::check`].

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::iface;

/// What was last said of the interface (so that each change is said
/// once).
#[derive(Debug, Default)]
pub(crate) struct Noticed {
    down: AtomicBool,
    /// Per family (IPv4, IPv6): flowlane's address was gone at the last
    /// look.
    unaddressed: [AtomicBool; 2],
}

impl Noticed {
    /// Looks at interface `name` (its `<sysfs>/class/net` entry, its
    /// addresses) and says what changed since the last look: it went down
    /// or came up, one of `local` (flowlane's IPv4 and IPv6 addresses,
    /// where it claims one) went or came back.
    pub(crate) fn look(&self, sysfs: &Path, name: &str, local: [Option<IpAddr>; 2]) {
        if let Some(state) = iface::operstate(sysfs, name) {
            let down = is_down(&state);
            if self.down.swap(down, Ordering::Relaxed) != down {
                if down {
                    tracing::warn!(
                        "{name} is {state}: nothing reaches the service until it is up again \
                         (ip link set dev {name} up; on a veth, its peer too)"
                    );
                } else {
                    tracing::warn!("{name} is up again");
                }
            }
        }
        for ip in local.into_iter().flatten() {
            let Some(has) = iface::has_address(name, ip) else {
                continue;
            };
            let unaddressed = &self.unaddressed[usize::from(ip.is_ipv6())];
            if unaddressed.swap(!has, Ordering::Relaxed) == has {
                if has {
                    tracing::warn!("{ip} is an address of {name} again");
                } else {
                    tracing::warn!(
                        "{ip} is no longer an address of {name}: the service still answers on \
                         it (its frames are steered to flowlane); put it back (ip addr add \
                         {ip}/N dev {name}), or stop the service and start it on the new one"
                    );
                }
            }
        }
    }
}

/// Whether an `operstate` (sysfs, RFC 2863's ifOperStatus) says nothing
/// can arrive: `down` (set down, or a veth whose peer is), or a lower layer
/// down. `unknown` (drivers that do not say, `lo`) is not down.
fn is_down(state: &str) -> bool {
    matches!(state, "down" | "lowerlayerdown" | "notpresent")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_is_what_says_nothing_arrives() {
        for s in ["down", "lowerlayerdown", "notpresent"] {
            assert!(is_down(s), "{s}");
        }
        for s in ["up", "unknown", "dormant", "testing"] {
            assert!(!is_down(s), "{s}");
        }
    }
}
