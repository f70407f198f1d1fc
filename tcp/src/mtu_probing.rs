//! Packetization-layer path MTU discovery (RFC 4821; RFC 8899 §5 in
//! spirit; Linux `tcp_mtu_probing`): whether a stack searches for the path
//! MTU with its own segments, so that a path whose "packet too big"
//! messages never arrive (an ICMP black hole) still carries data. The
//! search itself is per connection, in `connection/plpmtud.rs`.

/// When a connection searches for its path MTU with probe segments (RFC
/// 4821 §7), as Linux's `net.ipv4.tcp_mtu_probing` sysctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MtuProbing {
    /// Never: only ICMP "packet too big" messages change the MSS (Linux
    /// `tcp_mtu_probing = 0`). A black hole stalls the connection until
    /// its retransmissions give up.
    Off,
    /// Once full-sized segments keep timing out (RFC 4821 §7.3's black
    /// hole detection: [`crate::Config`]'s `mtu_probe_base_mss` first,
    /// then half the MSS per further timeout), then probe upward from
    /// there (Linux `tcp_mtu_probing = 1`, its default): the default.
    #[default]
    OnBlackHole,
    /// From the handshake on: every connection probes upward from its
    /// MSS, and black holes are handled as with `OnBlackHole` (Linux
    /// `tcp_mtu_probing = 2`).
    Always,
}
