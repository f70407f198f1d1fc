//! The daemon's hints at their bound ([`flowlane_daemon::HINTS_AT_ONCE`])
//! and a scrape, all at once, against one healthy service polled as a
//! service polls its socket: every one is answered (the service takes
//! every client that arrives together, and the daemon opens one connection
//! per question, no probe first).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use flowlane_daemon::{Services, HINTS_AT_ONCE};
use flowlane_dataplane::control_socket::{ControlSocket, FlowQuery, Request, Response};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fl-at-once-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn hints_at_their_bound_and_a_scrape_are_answered_by_a_healthy_service() {
    let d = dir("healthy");
    let mut sock = ControlSocket::bind(&d.join("svc.2.sock")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let counters: Response = serde_json::from_str(concat!(
        r#"{"result":"counters","service":"bulk-sink","pid":7,"uptime_ns":1,"iface":"fl0","#,
        r#""rebalance":"off","queues":[],"moves":{"done":0,"failed":0,"recent":[]}}"#
    ))
    .unwrap();
    let svc = std::thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            sock.poll(|r| match r {
                Request::Counters => counters.clone(),
                _ => Response::Error {
                    message: "svc does not serve it".into(),
                },
            });
            std::thread::sleep(Duration::from_millis(2));
        }
        sock.clients_dropped()
    });
    let services = Arc::new(Services::new(d.clone(), Duration::from_millis(500)));
    let flow = FlowQuery {
        src: [10, 0, 0, 1].into(),
        sport: 1,
        dst: [10, 0, 0, 2].into(),
        dport: 2,
        proto: "tcp".into(),
    };
    let (mut bad_hints, mut bad_scrapes, rounds) = (0, 0, 20);
    let mut example = String::new();
    for _ in 0..rounds {
        let barrier = Arc::new(Barrier::new(HINTS_AT_ONCE + 1));
        let hints: Vec<_> = (0..HINTS_AT_ONCE)
            .map(|_| {
                let (s, f, b) = (services.clone(), flow.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    s.hint(&f)
                })
            })
            .collect();
        let (s, b) = (services.clone(), barrier.clone());
        let scrape = std::thread::spawn(move || {
            b.wait();
            s.scrape()
        });
        for h in hints {
            match h.join().unwrap() {
                Response::Error { message } if message.contains("does not serve") => {}
                other => {
                    bad_hints += 1;
                    example = format!("{other:?}");
                }
            }
        }
        let scrape = scrape.join().unwrap();
        if scrape.unanswered > 0 || scrape.services.len() != 1 {
            bad_scrapes += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let dropped = svc.join().unwrap();
    assert_eq!(
        (bad_hints, bad_scrapes, dropped),
        (0, 0, 0),
        "hints of {}, scrapes of {rounds} not answered by a healthy service, clients it dropped; e.g. {example}",
        rounds * HINTS_AT_ONCE
    );
    std::fs::remove_dir_all(&d).unwrap();
}
