//! The SACK state each immediate ACK owed for a batch of segments reports.
//!
//! A sans-IO stack is fed a batch of segments before it is polled, and
//! every out-of-order or duplicate segment in it is owed an ACK of its own
//! (RFC 5681 §4.2; `Connection::owe_immediate_ack`). Those ACKs go out
//! together at the next poll, but each must report what its own segment
//! brought: the first SACK block names the block holding the segment that
//! triggered it, the next ones the blocks reported most recently before
//! (RFC 2018 §4), and a duplicate is reported by a D-SACK block in the
//! ACK it triggered (RFC 2883 §4). Built from the state after the batch,
//! they all said the same thing: eight segments, every other one lost, got
//! eight ACKs naming the same three blocks of eight, and of two duplicates
//! only the second was reported.
//!
//! So when a segment owes an ACK while an earlier one is still owed, the
//! earlier ACK's SACK state is set aside here ([`AckSack`]), and the ACKs
//! that go out while more are owed take theirs back in order. Kept by the
//! stack for all its connections (empty once their owed ACKs went out: a
//! SYN-ACK, in-order data moving RCV.NXT, or the connection's end drops
//! them; a connection holds nothing for it), bounded: past [`MAX_RECORDS`] a
//! connection's ACKs report the state after the batch, as before.

use crate::flow_key::FlowKey;
use crate::seq::SeqNumber;
use std::collections::VecDeque;

/// Most ACKs set aside at once, over all connections. The data path polls
/// after each batch it receives (at most 64 frames), so it never comes
/// near; a caller feeding more between polls gets the batch's final state
/// in the ACKs past it. A pop scans the queue: bounded, so is its cost.
pub(crate) const MAX_RECORDS: usize = 256;

/// What one owed ACK reports in its SACK option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckSack {
    /// The starts of the latest out-of-order segments of distinct blocks,
    /// most recent first, as `RecvRare::sacked` stood (`None`: nothing was
    /// held out of order).
    pub sacked: Option<[SeqNumber; 3]>,
    /// A duplicate's range to report as a D-SACK block.
    pub dsack: Option<(SeqNumber, SeqNumber)>,
}

/// One owed ACK's SACK state, with the connection it belongs to.
#[derive(Debug, Clone, Copy)]
struct Record {
    key: FlowKey,
    sack: AckSack,
}

/// The ACKs set aside, oldest first; a connection's records are in the
/// order its ACKs were owed.
#[derive(Debug, Default)]
pub(crate) struct OwedAcks {
    records: VecDeque<Record>,
}

impl OwedAcks {
    /// Sets aside the SACK state of `key`'s latest owed ACK; false when
    /// full (nothing is kept).
    pub(crate) fn push(&mut self, key: FlowKey, sack: AckSack) -> bool {
        if self.records.len() >= MAX_RECORDS {
            return false;
        }
        self.records.push_back(Record { key, sack });
        true
    }

    /// Takes back the SACK state of `key`'s oldest owed ACK, if one was
    /// set aside.
    pub(crate) fn pop(&mut self, key: &FlowKey) -> Option<AckSack> {
        let at = self.records.iter().position(|r| r.key == *key)?;
        self.records.remove(at).map(|r| r.sack)
    }

    /// Forgets everything set aside for `key` (its owed ACKs were dropped,
    /// or the connection went). Inlined where it is called, every
    /// removal among them: the test of an empty list is all it costs then.
    #[inline]
    pub(crate) fn forget(&mut self, key: &FlowKey) {
        if !self.records.is_empty() {
            self.forget_held(key);
        }
    }

    #[cold]
    #[inline(never)]
    fn forget_held(&mut self, key: &FlowKey) {
        self.records.retain(|r| r.key != *key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(port: u16) -> FlowKey {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        FlowKey::new(ip, 80, ip, port)
    }

    fn sack(n: u32) -> AckSack {
        AckSack {
            sacked: None,
            dsack: Some((SeqNumber(n), SeqNumber(n + 1))),
        }
    }

    #[test]
    fn each_connection_takes_its_own_back_in_order() {
        let mut q = OwedAcks::default();
        assert!(q.push(key(1), sack(1)));
        assert!(q.push(key(2), sack(2)));
        assert!(q.push(key(1), sack(3)));
        assert_eq!(q.pop(&key(1)), Some(sack(1)));
        assert_eq!(q.pop(&key(1)), Some(sack(3)));
        assert_eq!(q.pop(&key(1)), None);
        q.forget(&key(2));
        assert!(q.records.is_empty());
    }

    #[test]
    fn bounded() {
        let mut q = OwedAcks::default();
        for i in 0..MAX_RECORDS as u32 {
            assert!(q.push(key(1), sack(i)));
        }
        assert!(!q.push(key(2), sack(0)));
        assert_eq!(q.pop(&key(2)), None);
        assert_eq!(q.pop(&key(1)), Some(sack(0)));
    }
}
