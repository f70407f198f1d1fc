//! Explicit Congestion Notification (RFC 3168): the IP header's ECN
//! codepoint as the stack sees it, and whether a stack negotiates ECN.
//!
//! The stack reads no IP header: the caller passes each received segment's
//! codepoint ([`crate::Stack::handle_tcp_ecn`]) and writes the one each
//! sent segment names ([`crate::Transmit::ecn`]) into the IP header it
//! builds (IPv4 TOS / IPv6 traffic class, the two low bits).

/// The ECN field of an IP header (RFC 3168 §5: the two least significant
/// bits of the IPv4 TOS octet or the IPv6 traffic class octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// `00`: the transport is not ECN-capable.
    #[default]
    NotEct = 0b00,
    /// `01`: ECN-capable transport, ECT(1) (RFC 3168 §5; L4S uses it).
    Ect1 = 0b01,
    /// `10`: ECN-capable transport, ECT(0): what an ECN TCP sends.
    Ect0 = 0b10,
    /// `11`: congestion experienced, set by a router instead of dropping.
    Ce = 0b11,
}

impl Ecn {
    /// The codepoint in the two low bits of `bits` (higher bits, the DSCP
    /// of a whole TOS octet, are ignored).
    #[inline]
    pub const fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The codepoint as the two low bits of the TOS / traffic class octet.
    #[inline]
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// ECT(0) or ECT(1): the sender is ECN-capable (RFC 3168 §5).
    #[inline]
    pub const fn is_ect(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }
}

/// Whether a stack uses ECN (RFC 3168 §6.1.1), as Linux's `tcp_ecn`
/// sysctl: ECN is used on a connection only when both ends agree in the
/// handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EcnMode {
    /// Never: SYNs do not ask for ECN, and a SYN that does is answered
    /// without it (Linux `tcp_ecn = 0`).
    Off,
    /// Accept ECN when the peer's SYN asks for it, but do not ask in our
    /// own SYNs (Linux's default, `tcp_ecn = 2`): the default, so that an
    /// active open never meets a middlebox that drops ECN-setup SYNs.
    #[default]
    Accept,
    /// Ask for ECN in our SYNs and accept it when asked (Linux `tcp_ecn =
    /// 1`). A SYN sent again after a timeout no longer asks (as Linux's
    /// `tcp_ecn_fallback`: some middleboxes drop ECN-setup SYNs, RFC 3168
    /// §6.1.1.1).
    On,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codepoints_round_trip_through_the_two_low_bits() {
        for (bits, ecn) in [
            (0b00, Ecn::NotEct),
            (0b01, Ecn::Ect1),
            (0b10, Ecn::Ect0),
            (0b11, Ecn::Ce),
        ] {
            assert_eq!(Ecn::from_bits(bits), ecn);
            assert_eq!(ecn.bits(), bits);
            // A whole TOS octet: the DSCP above is ignored.
            assert_eq!(Ecn::from_bits(0xb8 | bits), ecn);
        }
        assert!(Ecn::Ect0.is_ect() && Ecn::Ect1.is_ect());
        assert!(!Ecn::NotEct.is_ect() && !Ecn::Ce.is_ect());
        assert_eq!(Ecn::default(), Ecn::NotEct);
        assert_eq!(EcnMode::default(), EcnMode::Accept);
    }
}
