//! The matrix's results: one [`Cell`] per tested combination, as written to
//! `results.json` (its field names are the file's keys).

use serde::Serialize;

/// One cell's result.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Backend under test.
    pub backend: String,
    /// Its role: `receiver` or `sender` (the other end is kernel TCP).
    pub role: String,
    /// Connections.
    pub connections: usize,
    /// Buffer size per write/read.
    pub buffer: usize,
    /// One-way delay added in each direction (ms).
    pub delay_ms: f64,
    /// Round-trip time the delay line really added (ms): twice the delay
    /// plus twice its mean lateness.
    pub rtt_added_ms: Option<f64>,
    /// The delay line's report (frames, drops, lateness).
    pub delay_line: Option<serde_json::Value>,
    /// Receiver throughput (Mbit/s).
    pub mbit_s: Option<f64>,
    /// System-wide cycles per byte (receiver's window).
    pub cycles_per_byte_system: Option<f64>,
    /// Receiver process cycles per byte.
    pub cycles_per_byte_receiver: Option<f64>,
    /// Receiver data threads' cycles per byte (flowlane: its workers; kernel:
    /// the event-loop threads, without the kernel's softirq work).
    pub cycles_per_byte_receiver_threads: Option<f64>,
    /// Sender process cycles per byte.
    pub cycles_per_byte_sender: Option<f64>,
    /// Sender data threads' cycles per byte.
    pub cycles_per_byte_sender_threads: Option<f64>,
    /// System % of one CPU per Gbit/s.
    pub pct_one_cpu_per_gbit_system: Option<f64>,
    /// Segments the sender retransmitted in the measured window: for kernel
    /// TCP its namespace's counter, for a flowlane sender flowlane's own
    /// TCP counters (all queues) read at the window's edges; `None` when
    /// the sender's report has no such figure.
    pub retrans_sender: Option<u64>,
    /// The flowlane receiver's `--rebalance` (`off`, `auto`) in this
    /// cell; `None` where the tested backend is no flowlane receiver.
    pub rebalance: Option<String>,
    /// The RSS buckets the flowlane receiver moved in this cell (its
    /// `move` lines); `None` where the tested backend is no flowlane
    /// receiver, or the cell failed before its receiver's output was read.
    pub rss_moves: Option<Vec<serde_json::Value>>,
    /// Whether the bed's RSS table had changed by the end of the cell and
    /// was put back as it was before it (`false`: it was as found); `None`
    /// where the tested backend is no flowlane receiver.
    pub rss_table_put_back: Option<bool>,
    /// Error, when the cell failed.
    pub error: Option<String>,
    /// Receiver report.
    pub receiver: Option<serde_json::Value>,
    /// Sender report.
    pub sender: Option<serde_json::Value>,
}

impl Cell {
    /// Cycles per byte of the tested backend's data threads (its workers or
    /// event loops), whichever role it had.
    pub fn tested_threads_cycles_per_byte(&self) -> Option<f64> {
        if self.role == "sender" {
            self.cycles_per_byte_sender_threads
        } else {
            self.cycles_per_byte_receiver_threads
        }
    }

    /// The name tables and plots give the cell's series: the backend when it
    /// receives, `<backend>-sender` when it sends.
    pub fn label(&self) -> String {
        if self.role == "sender" {
            format!("{}-sender", self.backend)
        } else {
            self.backend.clone()
        }
    }
}

/// A successful kernel-receiver cell for the tables' and plots' tests.
#[cfg(test)]
pub(super) fn test_cell(c: usize, d: f64, mbit: f64) -> Cell {
    Cell {
        backend: "kernel".into(),
        role: "receiver".into(),
        connections: c,
        buffer: 65536,
        delay_ms: d,
        rtt_added_ms: None,
        delay_line: None,
        mbit_s: Some(mbit),
        cycles_per_byte_system: Some(3.0),
        cycles_per_byte_receiver: Some(1.0),
        cycles_per_byte_receiver_threads: Some(0.5),
        cycles_per_byte_sender: Some(1.5),
        cycles_per_byte_sender_threads: Some(1.4),
        pct_one_cpu_per_gbit_system: Some(30.0),
        retrans_sender: Some(0),
        rebalance: None,
        rss_moves: None,
        rss_table_put_back: None,
        error: None,
        receiver: None,
        sender: None,
    }
}
