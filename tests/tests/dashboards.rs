//! The Grafana dashboards and Prometheus alert rules in `dashboards/`:
//! their structure, and the rules through `promtool check rules` and their
//! unit tests (`promtool test rules`). Every panel's query is evaluated
//! against a real Prometheus scraping a real daemon in `daemon_metrics.rs`.

use std::collections::HashSet;
use std::process::Command;

use flowlane_tests::{dashboard_queries, dashboards_dir};

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
