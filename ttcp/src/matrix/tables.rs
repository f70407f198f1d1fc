//! The matrix's markdown tables: all cells, the backends side by side, and
//! the latency rows (`table.md`, and what the matrix prints).

use super::results::Cell;

fn fmt(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "—".into())
}

/// An error as the text of one table cell: its lines joined, its `|`
/// escaped, so that the row stays one markdown row.
fn cell_text(e: &str) -> String {
    e.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The side-by-side table (one row per cell; backends side by side once there are two).
pub fn table(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| backend (role) | connections | buffer | delay (each way) | RTT added | Mbit/s | cycles/B system | cycles/B receiver proc | cycles/B receiver data threads | cycles/B sender proc | cycles/B sender data threads | % of one CPU per Gbit/s (system) | retrans (sender) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in cells {
        s.push_str(&format!(
            "| {} | {} | {} | {} ms | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            c.label(),
            c.connections,
            c.buffer,
            c.delay_ms,
            c.rtt_added_ms
                .map(|r| format!("{r:.2} ms"))
                .unwrap_or_else(|| "—".into()),
            c.error
                .as_ref()
                .map(|e| format!("failed: {}", cell_text(e)))
                .unwrap_or_else(|| fmt(c.mbit_s, 0)),
            fmt(c.cycles_per_byte_system, 2),
            fmt(c.cycles_per_byte_receiver, 2),
            fmt(c.cycles_per_byte_receiver_threads, 2),
            fmt(c.cycles_per_byte_sender, 2),
            fmt(c.cycles_per_byte_sender_threads, 2),
            fmt(c.pct_one_cpu_per_gbit_system, 1),
            c.retrans_sender
                .map(|r| r.to_string())
                .unwrap_or_else(|| "—".into()),
        ));
    }
    s
}

/// Kernel and flowlane side by side: one row per (connections, buffer,
/// delay), Mbit/s and cycles/byte of each backend and role. The data threads
/// are those of the tested side: flowlane's workers (TCP and AF_XDP rings:
/// all of its work) or the kernel backend's event loops (copies only: the
/// kernel's TCP runs in softirq), so compare the system-wide column first.
pub fn side_by_side(cells: &[Cell]) -> String {
    let mut backends: Vec<String> = Vec::new();
    let mut keys: Vec<(usize, usize, f64)> = Vec::new();
    for c in cells {
        if !backends.contains(&c.label()) {
            backends.push(c.label());
        }
        let k = (c.connections, c.buffer, c.delay_ms);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut s = String::from("| connections | buffer | delay (each way) |");
    for b in &backends {
        s.push_str(&format!(
            " {b} Mbit/s | {b} cycles/B system | {b} cycles/B data threads |"
        ));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(3 + 3 * backends.len()));
    s.push_str("|\n");
    for (n, buf, d) in keys {
        s.push_str(&format!("| {n} | {buf} | {d} ms |"));
        for b in &backends {
            let c = cells.iter().find(|c| {
                c.label() == *b && c.connections == n && c.buffer == buf && c.delay_ms == d
            });
            match c {
                Some(c) if c.error.is_none() => s.push_str(&format!(
                    " {} | {} | {} |",
                    fmt(c.mbit_s, 0),
                    fmt(c.cycles_per_byte_system, 2),
                    fmt(c.tested_threads_cycles_per_byte(), 2)
                )),
                Some(_) => s.push_str(" failed | — | — |"),
                None => s.push_str(" — | — | — |"),
            }
        }
        s.push('\n');
    }
    s
}

/// Latency rows: one per (backend, message size, delay), the round trips
/// measured and RTT percentiles in microseconds (p99 and p99.9 are — under
/// [`crate::report::P99_MIN_ROUND_TRIPS`] and
/// [`crate::report::P999_MIN_ROUND_TRIPS`] round trips).
pub fn latency_table(rows: &[serde_json::Value]) -> String {
    let mut s = String::from(
        "| backend (echo) | message | delay (each way) | round trips | round trips/s | p50 µs | p90 µs | p99 µs | p99.9 µs |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let l = &r["latency"];
        let f = |k: &str, d: usize| fmt(l.get(k).and_then(|x| x.as_f64()), d);
        if let Some(e) = r["error"].as_str() {
            s.push_str(&format!(
                "| {} | {} | {} ms | failed: {} | | | | | |\n",
                r["backend"].as_str().unwrap_or("?"),
                r["msg_size"],
                r["delay_ms"],
                cell_text(e)
            ));
            continue;
        }
        s.push_str(&format!(
            "| {} | {} | {} ms | {} | {} | {} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["msg_size"],
            r["delay_ms"],
            f("round_trips", 0),
            f("round_trips_per_s", 0),
            f("rtt_p50_us", 0),
            f("rtt_p90_us", 0),
            f("rtt_p99_us", 0),
            f("rtt_p999_us", 0),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::results::test_cell as cell;

    #[test]
    fn tables_from_synthetic_cells() {
        let cells = vec![
            cell(1, 0.0, 5000.0),
            cell(16, 0.0, 4000.0),
            cell(1, 10.0, 900.0),
        ];
        let t = table(&cells);
        assert_eq!(t.lines().count(), 5);
        assert!(
            t.contains("| kernel | 16 | 65536 | 0 ms | — | 4000 |"),
            "{t}"
        );
        let mut f = cell(16, 0.0, 4500.0);
        f.backend = "flowlane".into();
        let mut both = cells;
        both.push(f);
        let sbs = side_by_side(&both);
        assert_eq!(sbs.lines().count(), 2 + 3, "{sbs}");
        assert!(
            sbs.contains("| 16 | 65536 | 0 ms | 4000 | 3.00 | 0.50 | 4500 | 3.00 | 0.50 |"),
            "{sbs}"
        );
        assert!(
            sbs.contains("| 1 | 65536 | 0 ms | 5000 | 3.00 | 0.50 | — | — | — |"),
            "{sbs}"
        );
    }

    #[test]
    fn an_error_of_several_lines_stays_one_row() {
        let mut c = cell(1, 0.0, 0.0);
        c.error = Some("sender: gave up\nreceiver: a | b\n".into());
        let t = table(&[c]);
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(
            t.contains("failed: sender: gave up receiver: a \\| b |"),
            "{t}"
        );
        let rows = [serde_json::json!({
            "backend": "kernel", "msg_size": 64, "delay_ms": 0.0,
            "error": "no round trip\nfinished",
        })];
        let t = latency_table(&rows);
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(t.contains("failed: no round trip finished |"), "{t}");
    }

    /// The round trips behind the percentiles are shown, and a tail
    /// percentile too few of them cannot give is n/a.
    #[test]
    fn latency_rows_show_their_round_trips() {
        let rows = [serde_json::json!({
            "backend": "flowlane", "msg_size": 64, "delay_ms": 0.0,
            "latency": {"round_trips": 250, "round_trips_per_s": 125.0, "rtt_p50_us": 30.0,
                        "rtt_p90_us": 40.0, "rtt_p99_us": 55.0, "rtt_p999_us": null},
        })];
        let t = latency_table(&rows);
        assert!(t.contains("| round trips | round trips/s |"), "{t}");
        assert!(
            t.contains("| flowlane | 64 | 0.0 ms | 250 | 125 | 30 | 40 | 55 | — |"),
            "{t}"
        );
    }
}
