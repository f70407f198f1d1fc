//! The crate's error type.
//!
//! Every message says what is wrong and, where there is one, what to do about it: these
//! errors end up in front of an operator running the control CLI.

use thiserror::Error;

/// Result alias for this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong while building a plan.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// An RSS key shorter than the 32-bit window the Toeplitz hash slides over it.
    #[error(
        "RSS key is {len} bytes long; the Toeplitz hash needs at least 4 \
         (NICs use 40 or 52 bytes: the Microsoft verification key, or the NIC's own as `ethtool -x` prints it)"
    )]
    KeyTooShort {
        /// Length of the rejected key, in bytes.
        len: usize,
    },
    /// A character that is not a hex digit (or a separator where one is not allowed).
    #[error(
        "RSS key text has {found:?} at offset {offset}: expected hex digits, \
         either plain (\"6d5a56da...\") or colon-separated bytes (\"6d:5a:56:da:...\")"
    )]
    KeyBadChar {
        /// Byte offset of the offending character in the input text.
        offset: usize,
        /// The offending character.
        found: char,
    },
    /// A colon-separated group that is not exactly two hex digits.
    #[error(
        "RSS key text has a group of {digits} hex digits at offset {offset}: in colon style \
         every byte is written as exactly two digits (\"6d:5a:...\", as `ethtool -x` prints it)"
    )]
    KeyBadGroup {
        /// Byte offset of the start of the group.
        offset: usize,
        /// Number of digits the group had.
        digits: usize,
    },
    /// Plain hex with an odd number of digits.
    #[error("RSS key text has {digits} hex digits, an odd number: every byte needs two digits")]
    KeyOddDigits {
        /// Number of digits in the input.
        digits: usize,
    },
    /// An indirection table whose size is not a power of two in 1..=65536.
    #[error(
        "indirection table size {size} is invalid: it must be a power of two from 1 to 65536 \
         (the NIC reports its size in `ethtool -x`; 64, 128, 512 and 2048 are common)"
    )]
    TableSize {
        /// The rejected size.
        size: usize,
    },
    /// An indirection table built over no queue at all.
    #[error("an indirection table needs at least one queue (with a nonzero weight) to point at")]
    NoQueues,
    /// The same queue listed twice where each queue must appear once: in a list of queues
    /// to spread a table over, in a list of weights, or in a load snapshot's worker loads.
    #[error(
        "queue {queue} is listed twice; list every queue once (a queue takes more of the \
         traffic by having more entries of the indirection table, not by a second listing)"
    )]
    DuplicateQueue {
        /// The repeated queue.
        queue: u16,
    },
    /// Two indirection tables of different sizes compared entry by entry.
    #[error(
        "indirection tables of {ours} and {theirs} entries cannot be compared bucket by bucket; \
         resize with `ethtool -X <if> equal <n>` first or build the target at the NIC's size"
    )]
    TableSizeMismatch {
        /// Size of `self`.
        ours: usize,
        /// Size of the other table.
        theirs: usize,
    },
    /// A synthetic topology with a zero-sized level.
    #[error("synthetic topology {what} must be at least 1")]
    EmptySynthetic {
        /// Which level was zero.
        what: &'static str,
    },
    /// A topology snapshot that contradicts itself.
    #[error("inconsistent topology snapshot: {0}")]
    InconsistentTopology(String),
    /// The hwloc library failed to load or describe a topology.
    #[error("hwloc could not build the topology: {0}")]
    Hwloc(String),
    /// A NUMA node that the topology does not have.
    #[error(
        "NUMA node {node} is not in the topology (nodes: {known:?}); check the NIC's numa_node"
    )]
    UnknownNode {
        /// The node that was asked for.
        node: u32,
        /// Nodes the topology does have.
        known: Vec<u32>,
    },
    /// A logical CPU that the topology does not have.
    #[error(
        "CPU {cpu} is not in the topology; the core budget may only name existing logical CPUs"
    )]
    UnknownCpu {
        /// The CPU that was named.
        cpu: u32,
    },
    /// More queues than usable CPUs.
    #[error(
        "{queues} queues need {queues} CPUs but only {allowed} are allowed after reservations; \
         reduce the queue count (`ethtool -L <if> combined {allowed}`) or widen the core budget"
    )]
    NotEnoughCpus {
        /// Queues asked for.
        queues: usize,
        /// CPUs available to them.
        allowed: usize,
    },
    /// More queues than a 16-bit queue index can name.
    #[error("{queues} queues requested; queue indices are 16-bit, so at most 65536")]
    TooManyQueues {
        /// Queues asked for.
        queues: usize,
    },
    /// A CPU list (as in `smp_affinity_list`) that does not parse.
    #[error("CPU list {input:?} is malformed: {reason} (expected e.g. \"0-3,8,10-11\")")]
    CpuList {
        /// The text that was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An indirection table pointing at a queue that has no CPU in the placement plan.
    #[error(
        "the indirection table sends buckets to queue {queue}, which the placement plan gives no CPU; \
         plan at least as many queues as the table uses"
    )]
    QueueNotPlaced {
        /// The queue without a placement.
        queue: u16,
    },
    /// A load snapshot (or a rebalancing plan) naming a bucket the indirection table does not
    /// have.
    #[error(
        "bucket {bucket} is outside the indirection table of {size} entries; take the load \
         snapshot and the table from the same NIC configuration"
    )]
    BucketOutOfRange {
        /// The bucket named.
        bucket: usize,
        /// The table's size.
        size: usize,
    },
    /// A load snapshot listing the same bucket twice.
    #[error("bucket {bucket} is listed twice in the load snapshot; report every bucket once")]
    DuplicateBucket {
        /// The repeated bucket.
        bucket: usize,
    },
    /// A load snapshot (or a rebalancing move) that puts a bucket on another queue than the
    /// indirection table does.
    #[error(
        "bucket {bucket} is on queue {claimed} in the load snapshot or plan but on queue {table} \
         in the indirection table; read the table again and take a fresh snapshot"
    )]
    BucketOwnerMismatch {
        /// The bucket.
        bucket: usize,
        /// The queue the snapshot or plan says owns it.
        claimed: u16,
        /// The queue the table sends it to.
        table: u16,
    },
    /// An indirection table sending buckets to a queue whose worker the load snapshot lacks.
    #[error(
        "the indirection table sends buckets to queue {queue}, but the load snapshot has no \
         worker for it; report the load of every queue the table uses"
    )]
    QueueWithoutLoad {
        /// The queue without a worker load.
        queue: u16,
    },
    /// A rebalancing setting out of its range.
    #[error("rebalancing setting `{field}` is invalid: {reason}")]
    RebalanceConfig {
        /// The setting.
        field: &'static str,
        /// What is wrong with it, and the range it must be in.
        reason: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message is true whichever caller shows it (`testbed set-rss
    /// --spread`, the weighted tables, a service's `--rebalance auto`): it names
    /// no option that only some of them have (there is no weights flag).
    #[test]
    fn a_duplicate_queue_says_what_to_do_in_every_caller_s_terms() {
        let text = Error::DuplicateQueue { queue: 0 }.to_string();
        assert!(
            text.starts_with("queue 0 is listed twice; list every queue once"),
            "{text}"
        );
        assert!(
            text.contains("more entries of the indirection table"),
            "{text}"
        );
        assert!(!text.contains("weights"), "{text}");
    }
}
