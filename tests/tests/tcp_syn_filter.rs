//! `echo-server --allow-from`: a handler's SYN filter in every execution
//! model, against kernel clients. On flowlane's TCP (run to completion,
//! and queue-pair mode, whose cores take the application thread's filter)
//! a peer outside the list gets an RST to its SYN (the kernel client sees
//! its connection refused) and the stack keeps nothing; on kernel sockets
//! the kernel completed the handshake, and the connection is reset at
//! accept before the handler hears of it. A peer on the list is served in
//! all of them. The bed's peer has 10.99.0.2 and fd99::2: only the first
//! is allowed.

mod tcp_common;

use flowlane_tests::{require_root, Bed};
use tcp_common::*;

/// Tries one echo from each of the peer's addresses; prints what each
/// saw: `echo`, `refused` (RST to the SYN), `reset` or `closed` (after
/// the handshake).
const CLIENT: &str = r#"
import socket
def attempt(family, host):
    s = socket.socket(family)
    s.settimeout(10)
    try:
        s.connect((host, 7))
    except ConnectionRefusedError:
        return "refused"
    except ConnectionResetError:
        # Reset after the handshake, before connect() returned.
        return "reset"
    try:
        s.sendall(b"ping")
        got = s.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    return "echo" if got == b"ping" else "closed"
print(attempt(socket.AF_INET, "10.99.0.1"), attempt(socket.AF_INET6, "fd99::1"))
"#;

#[test]
fn a_peer_outside_the_allow_list_is_refused_in_every_model() {
    if !require_root("a_peer_outside_the_allow_list_is_refused_in_every_model") {
        return;
    }
    for model in MODELS {
        let bed = Bed::up("synf", 2);
        let args = in_model(
            &["echo-server", "--port", "7", "--allow-from", "10.99.0.2"],
            model,
        );
        let app = start(&bed, &args, 60);
        let seen = peer_py(&bed, 30, CLIENT, &[]);
        let lines = app.stop();
        let total = totals(&lines);
        let (v4, v6) = seen.trim().split_once(' ').expect("two answers");
        assert_eq!(v4, "echo", "{model:?}: the allowed peer is served");
        assert_eq!(total["syn_refused"], 1, "{model:?}: {total}");
        assert_eq!(total["passive_opens"], 1, "{model:?}: only the allowed one");
        if model[1] == "xdp" {
            assert_eq!(v6, "refused", "{model:?}: refused at the SYN");
        } else {
            assert!(
                v6 == "reset" || v6 == "closed",
                "{model:?}: reset at accept, got {v6}"
            );
        }
    }
}
