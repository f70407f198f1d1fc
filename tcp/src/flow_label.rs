//! IPv6 flow labels (RFC 6437 §3): one per connection, the same for every
//! segment, 20 bits, never 0 (which says "no label"), and not guessable
//! from outside: a keyed hash of the connection's addresses and ports.
//!
//! Keyed by the stack's secret, which the stacks of one service share, so
//! that a connection whose RSS bucket moves to another core keeps its label
//! (ECMP and LAG hashing on the label, RFC 6438, would otherwise reroute
//! the flow at every move). Its hash is its own, apart from the ISN's and
//! the timestamp offset's (RFC 6528): the hashed message begins with a
//! domain word, so the lengths of the two messages differ and SipHash's
//! outputs for them are independent.

use crate::flow_key::FlowKey;
use crate::siphash::SipHasher24;

/// The domain word ahead of the tuple ("flowlabl").
const DOMAIN: u64 = u64::from_le_bytes(*b"flowlabl");

/// Flow labels keyed by a secret.
#[derive(Clone)]
pub(crate) struct FlowLabels {
    /// SipHash-2-4 keyed by the secret, the domain word written.
    keyed: SipHasher24,
}

/// The key stays out of debug output.
impl std::fmt::Debug for FlowLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowLabels").finish_non_exhaustive()
    }
}

impl FlowLabels {
    /// Labels keyed by `secret`.
    pub(crate) fn new(secret: &[u8; 16]) -> Self {
        let mut keyed = SipHasher24::new(secret);
        keyed.write_word(DOMAIN);
        FlowLabels { keyed }
    }

    /// The label of the connection of tuple `t`: 20 bits, not 0.
    pub(crate) fn label(&self, t: &FlowKey) -> u32 {
        let mut h = self.keyed.clone();
        t.prf_into(&mut h);
        (h.finish() as u32 & 0x000f_ffff).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FourTuple;

    fn key(t: &str, u: &str) -> FlowKey {
        FlowKey::of(&FourTuple {
            local: t.parse().unwrap(),
            remote: u.parse().unwrap(),
        })
    }

    #[test]
    fn one_label_per_connection_from_the_secret() {
        let a = key("[2001:db8::1]:443", "[2001:db8::2]:50000");
        let b = key("[2001:db8::1]:443", "[2001:db8::2]:50001");
        let one = FlowLabels::new(&[7; 16]);
        let again = FlowLabels::new(&[7; 16]);
        let other = FlowLabels::new(&[8; 16]);
        assert_eq!(one.label(&a), again.label(&a), "same secret, same label");
        assert_ne!(one.label(&a), one.label(&b));
        assert_ne!(one.label(&a), other.label(&a));
        for l in [one.label(&a), one.label(&b), other.label(&a)] {
            assert!(l != 0 && l <= 0x000f_ffff, "{l:#x}");
        }
    }
}
