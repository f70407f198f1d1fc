//! The Grafana dashboards and Prometheus alert rules in `dashboards/`:
//! their structure, and the rules through `promtool check rules` and their
//! unit tests (`promtool test rules`). Every panel's query is evaluated
//! against a real Prometheus scraping a real daemon in `daemon_metrics.rs`.

use std::collections::{BTreeSet, HashSet};
use std::process::Command;

use flowlane_tests::{dashboard_queries, dashboards_dir, flowlane_metric_names};

/// The metrics the daemon exports that no panel shows, each with why. A
/// metric the daemon adds needs a panel (where an operator would look
/// when something goes wrong) or a line here.
const NOT_PANELED: &[(&str, &str)] = &[
    (
        "flowlane_build",
        "constant labels (the daemon's version), not a time series",
    ),
    (
        "flowlane_service",
        "constant labels (backend, interface, rebalancing mode): the boards' `service` variable is read from it",
    ),
    (
        "flowlane_nic",
        "constant labels of a NIC the daemon owns (driver, node, AF_XDP and XDP modes): `flowlane status` shows them",
    ),
    (
        "flowlane_nic_plan_part",
        "constant labels: who does each part of the plan on an owned NIC; `flowlane status` shows it",
    ),
    (
        "flowlane_nic_rx_queues",
        "an owned NIC's configuration, which changes only when the daemon plans again: `flowlane status`",
    ),
    (
        "flowlane_nic_rx_queues_max",
        "an owned NIC's configuration (its channel maximum), constant: `flowlane status`",
    ),
    (
        "flowlane_nic_rss_table_entries",
        "an owned NIC's configuration, constant: `flowlane status`",
    ),
    (
        "flowlane_nic_plan_changes",
        "the changes the daemon made to an owned NIC, listed one by one by `flowlane status`; a count of them over time says nothing more",
    ),
    (
        "flowlane_nic_changes",
        "as flowlane_nic_plan_changes, over the daemon's life: made at its start and at a new plan, listed by `flowlane status`",
    ),
    (
        "flowlane_nic_queue_packets",
        "an owned NIC's driver counters per queue (only where the driver keeps them): the queues board shows each service queue's own packets",
    ),
    (
        "flowlane_nic_queue_bytes",
        "an owned NIC's driver counters per queue (only where the driver keeps them): the queues board shows each service queue's own bytes",
    ),
    (
        "flowlane_nic_queue_alloc_failures",
        "an owned NIC's driver counter (only where the driver keeps it), no NIC of the test beds keeps it, so no panel of it could be checked against a real Prometheus (daemon_metrics.rs); the fill-ring starvation panel shows flowlane's side",
    ),
    (
        "flowlane_nic_queue_dropped_packets",
        "an owned NIC's driver counter (only where the driver keeps it), no NIC of the test beds keeps it, so no panel of it could be checked against a real Prometheus (daemon_metrics.rs); the interface's drops are on the overview",
    ),
];

/// The metric families `daemon/src/metrics.rs` exports: the `"flowlane_…"`
/// string literals of its code (every family's name is one; its tests
/// left out).
fn exported_metrics() -> BTreeSet<String> {
    let path = dashboards_dir().join("../daemon/src/metrics.rs");
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let code = source.split("#[cfg(test)]").next().unwrap();
    let names: BTreeSet<String> = code
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("flowlane_")
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect();
    // A sanity floor: the parse found the families.
    assert!(
        names.len() >= 60,
        "{} metrics in {}",
        names.len(),
        path.display()
    );
    names
}

/// Whether the boards' queries name `family`: itself, or a series the
/// encoder makes of it (`_total` of a counter, `_info`, a histogram's).
fn paneled(family: &str, named: &BTreeSet<String>) -> bool {
    ["", "_total", "_info", "_bucket", "_sum", "_count"]
        .iter()
        .any(|suffix| named.contains(&format!("{family}{suffix}")))
}

/// Exported metrics neither on a panel nor in [`NOT_PANELED`] (the test's
/// failures, one line each), for the boards' queries `named`.
fn unaccounted(exported: &BTreeSet<String>, named: &BTreeSet<String>) -> Vec<String> {
    let listed: HashSet<&str> = NOT_PANELED.iter().map(|(m, _)| *m).collect();
    let mut wrong = Vec::new();
    for m in exported {
        match (paneled(m, named), listed.contains(m.as_str())) {
            (false, false) => wrong.push(format!(
                "{m} has no panel: add one to dashboards/grafana, or list it in NOT_PANELED (dashboards.rs) with why"
            )),
            (true, true) => wrong.push(format!(
                "{m} has a panel: take it out of NOT_PANELED (dashboards.rs)"
            )),
            _ => {}
        }
    }
    for (m, why) in NOT_PANELED {
        if !exported.contains(*m) {
            wrong.push(format!(
                "{m} is in NOT_PANELED (dashboards.rs) but the daemon exports no such metric: take it out"
            ));
        }
        if why.is_empty() {
            wrong.push(format!("{m}: NOT_PANELED gives no reason"));
        }
    }
    wrong
}

#[test]
fn every_exported_metric_has_a_panel_or_a_reason_for_none() {
    let (queries, _) = dashboard_queries();
    let named: BTreeSet<String> = queries
        .iter()
        .flat_map(|q| flowlane_metric_names(&q.expr))
        .collect();
    let exported = exported_metrics();
    let wrong = unaccounted(&exported, &named);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The check itself: a metric the daemon adds without a panel fails it.
    let mut more = exported;
    more.insert("flowlane_tcp_new_counter".into());
    assert_eq!(
        unaccounted(&more, &named),
        ["flowlane_tcp_new_counter has no panel: add one to dashboards/grafana, or list it in NOT_PANELED (dashboards.rs) with why"]
    );
}

#[test]
fn every_dashboard_is_well_formed() {
    let (queries, boards) = dashboard_queries();
    let names: Vec<&str> = boards.iter().map(|(f, _)| f.as_str()).collect();
    for want in ["overview", "queues", "tcp", "rebalancing"] {
        assert!(
            names.contains(&format!("flowlane-{want}.json").as_str()),
            "no {want} dashboard in {names:?}"
        );
    }
    let mut uids = HashSet::new();
    for (file, b) in &boards {
        assert!(
            uids.insert(b["uid"].as_str().expect("uid")),
            "{file}: uid repeated"
        );
        assert!(
            b["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("flowlane")),
            "{file}"
        );
        assert!(b["schemaVersion"].as_u64().is_some(), "{file}");
        let vars: Vec<&str> = b["templating"]["list"]
            .as_array()
            .expect("templating")
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert!(
            vars.contains(&"datasource") && vars.contains(&"service"),
            "{file}: {vars:?}"
        );
        let panels = b["panels"].as_array().expect("panels");
        assert!(!panels.is_empty(), "{file}");
        let mut ids = HashSet::new();
        for p in panels {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(p["id"].as_u64().expect("id")),
                "{file}: {title}: id repeated"
            );
            assert!(!title.is_empty(), "{file}: a panel without a title");
            assert!(p["type"].as_str().is_some(), "{file}: {title}");
            for k in ["x", "y", "w", "h"] {
                assert!(
                    p["gridPos"][k].as_u64().is_some(),
                    "{file}: {title}: gridPos.{k}"
                );
            }
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}: {title}");
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{file}: {title}");
            let mut refs = HashSet::new();
            for t in targets {
                assert!(
                    refs.insert(t["refId"].as_str().expect("refId")),
                    "{file}: {title}"
                );
                let expr = t["expr"].as_str().expect("expr");
                assert!(expr.contains("flowlane_"), "{file}: {title}: {expr}");
                // Variables the dashboard defines, or Grafana's own.
                for var in expr.split('$').skip(1) {
                    let name: String = var
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    assert!(
                        name == "__rate_interval" || vars.contains(&name.as_str()),
                        "{file}: {title}: ${name} is not defined"
                    );
                }
            }
        }
    }
    assert!(queries.len() >= 30, "{} queries", queries.len());
}

/// The panels of what only a running rebalancing loop exports (the
/// learned move price), which `daemon_metrics.rs` cannot ask a real
/// Prometheus for (its service runs with its loop off): there is at least
/// one, each names only families the daemon exports (the daemon's own
/// tests show them on the page of a service with a loop), and each query
/// parses (`promtool check rules` on a recording rule of it).
#[test]
fn the_rebalancing_loop_s_panels_name_exported_families_and_parse() {
    let (queries, _) = dashboard_queries();
    let looped: Vec<_> = queries
        .iter()
        .filter(|q| q.rebalancing_loop_only())
        .collect();
    let exported = exported_metrics();
    let mut named = BTreeSet::new();
    for q in &looped {
        for name in flowlane_metric_names(&q.expr) {
            let one = BTreeSet::from([name.clone()]);
            assert!(
                exported.iter().any(|family| paneled(family, &one)),
                "{} / {}: {name} is no family the daemon exports",
                q.file,
                q.panel
            );
            named.insert(name);
        }
    }
    for family in [
        "flowlane_rebalance_move_cost_fixed_ns",
        "flowlane_rebalance_move_cost_per_connection_ns",
        "flowlane_rebalance_move_cost_observed",
    ] {
        assert!(named.contains(family), "no loop panel shows {family}");
    }
    let dir = std::env::temp_dir().join(format!("fl-loop-panels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rules = String::from("groups:\n  - name: loop_panels\n    rules:\n");
    for (i, q) in looped.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: loop_panel_{i}\n        expr: '{}'\n",
            q.promql().replace('\'', "''")
        ));
    }
    let file = dir.join("loop-panels.yml");
    std::fs::write(&file, rules).unwrap();
    let Some(out) = promtool(&["check", "rules", file.to_str().unwrap()]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool` on the rules, or a printed reason to skip.
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool")
        .args(args)
        .current_dir(dashboards_dir().join("prometheus"))
        .output()
    {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("skipped: promtool not available ({e}); scripts/setup.sh installs it");
            None
        }
    }
}

#[test]
fn the_alert_rules_load_and_pass_their_unit_tests() {
    for args in [
        &["check", "rules", "flowlane-alerts.yml"][..],
        &["test", "rules", "flowlane-alerts.test.yml"][..],
    ] {
        let Some(out) = promtool(args) else {
            return;
        };
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert has a unit test.
    let rules =
        std::fs::read_to_string(dashboards_dir().join("prometheus/flowlane-alerts.yml")).unwrap();
    let tests =
        std::fs::read_to_string(dashboards_dir().join("prometheus/flowlane-alerts.test.yml"))
            .unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no unit test"
        );
    }
}
