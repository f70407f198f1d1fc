//! Why a matrix cell failed, in one line: what both of its ends said, the
//! delay line's or the offloads' error beside the cell's own, and a cell
//! whose ends succeeded but measured nothing.

use std::process::Output;

use anyhow::{anyhow, Result};

/// One end's stderr as one line, without the JSON report lines (flowlane's
/// `dataplane` counters) that go with its report; its exit status when it
/// said nothing else.
fn said(o: &Output) -> String {
    let text = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !(l.starts_with('{') && serde_json::from_str::<serde_json::Value>(l).is_ok()))
        .collect();
    if lines.is_empty() {
        format!("exited with {} and said nothing", o.status)
    } else {
        lines.join(" ")
    }
}

/// The error of a cell whose two ends exited: `None` when both succeeded,
/// else what each failed end said (the receiver first), so that the real
/// cause is kept when both fail (the other end's error often only says
/// that its peer went away).
pub(super) fn cell_error(tx: &Output, rx: &Output) -> Option<String> {
    let failed: Vec<String> = [(rx, "receiver"), (tx, "sender")]
        .into_iter()
        .filter(|(o, _)| !o.status.success())
        .map(|(o, who)| format!("{who}: {}", said(o)))
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// The error of a cell whose receiver failed before its sender ended (it
/// could not start), as [`cell_error`] writes it.
pub(super) fn receiver_error(rx: &Output) -> String {
    format!("receiver: {}", said(rx))
}

/// `first`'s result, failed too when `then` failed (a delay line that did
/// not stop cleanly, offloads not given back): both errors when both did.
pub(super) fn both<T>(first: Result<T>, then: Result<()>) -> Result<T> {
    match (first, then) {
        (r, Ok(())) => r,
        (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(anyhow!("{a:#}; {b:#}")),
    }
}

/// Why a throughput cell whose ends succeeded has no figures: the
/// receiver's report counted no payload byte in the measured window.
pub(super) fn nothing_measured(rx: &serde_json::Value) -> Option<String> {
    match rx.pointer("/bytes/measured").and_then(|b| b.as_u64()) {
        Some(0) => Some("no payload byte arrived in the measured window".into()),
        Some(_) => None,
        None => Some("the receiver's report has no measured byte count".into()),
    }
}

/// Why a latency cell whose ends succeeded has no figures: the measuring
/// end reported no latency, or no round trip finished in its window.
pub(super) fn no_round_trip(latency: &serde_json::Value) -> Option<String> {
    if latency.is_null() {
        return Some("the sender reported no latency figures".into());
    }
    match latency["round_trips"].as_u64() {
        Some(0) => Some("no round trip finished in the measured window".into()),
        Some(_) => None,
        None => Some("the sender's latency report has no round-trip count".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn out(code: i32, stderr: &str) -> Output {
        Output {
            // A wait status: the exit code in the second byte.
            status: ExitStatus::from_raw(code << 8),
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn both_ends_failing_keep_both_causes() {
        let ok = out(0, "");
        assert_eq!(cell_error(&ok, &ok), None);
        let tx = out(
            1,
            "flowlane-ttcp: error: peer 10.99.0.1:5000 closed the control channel\n",
        );
        let rx = out(
            1,
            "{\"event\":\"dataplane\",\"queues\":[]}\nflowlane-ttcp: error: only 3 of 4 data connections arrived\n",
        );
        let e = cell_error(&tx, &rx).unwrap();
        assert_eq!(
            e,
            "receiver: flowlane-ttcp: error: only 3 of 4 data connections arrived; \
             sender: flowlane-ttcp: error: peer 10.99.0.1:5000 closed the control channel"
        );
        // One end alone, and an end that said nothing.
        let e = cell_error(&tx, &ok).unwrap();
        assert!(e.starts_with("sender: ") && !e.contains("receiver"), "{e}");
        let e = cell_error(&ok, &out(2, "")).unwrap();
        assert_eq!(e, "receiver: exited with exit status: 2 and said nothing");
    }

    #[test]
    fn a_second_error_is_added_not_swapped_in() {
        let cell: Result<u32> = Err(anyhow!("sender: no result within 93 s"));
        let line = Err(anyhow!(
            "the delay line failed (exit status: 1): lost its hooks"
        ));
        let e = both(cell, line).unwrap_err().to_string();
        assert_eq!(
            e,
            "sender: no result within 93 s; the delay line failed (exit status: 1): lost its hooks"
        );
        assert_eq!(both(Ok(7), Ok(())).unwrap(), 7);
        let e = both(Ok(7), Err(anyhow!("offloads"))).unwrap_err();
        assert_eq!(e.to_string(), "offloads");
        let e = both::<u32>(Err(anyhow!("cell")), Ok(())).unwrap_err();
        assert_eq!(e.to_string(), "cell");
    }

    #[test]
    fn cells_that_measured_nothing_are_failures() {
        let rx = |n: u64| serde_json::json!({"bytes": {"measured": n}});
        assert_eq!(nothing_measured(&rx(5)), None);
        assert!(nothing_measured(&rx(0))
            .unwrap()
            .contains("no payload byte"));
        assert!(nothing_measured(&serde_json::json!({})).is_some());

        let lat = |n: u64| serde_json::json!({"round_trips": n, "rtt_p50_us": 0.0});
        assert_eq!(no_round_trip(&lat(10)), None);
        assert!(no_round_trip(&lat(0)).unwrap().contains("no round trip"));
        assert!(no_round_trip(&serde_json::Value::Null)
            .unwrap()
            .contains("no latency"));
    }
}
