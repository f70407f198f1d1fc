//! Child processes with a deadline: every wait on a child in the
//! integration tests is bounded, and a child past its deadline is killed.
//! The tests' panicking face of [`flowlane_testbed::child`], which the tools
//! use (a tool must not depend on the tests crate).

use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

/// How often a waiting test looks at the child.
const POLL: Duration = Duration::from_millis(20);

pub use flowlane_testbed::child::{stop, terminate};

/// Waits at most `limit` for `child` to exit: its status, or `None` when it
/// is still running at the deadline (it is left running).
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    flowlane_testbed::child::wait_within(child, limit).expect("child status")
}

/// Waits at most `limit` for `child` and returns its output and how long it
/// took; past the deadline it is killed and the test panics (a hang).
pub fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> (Output, Duration) {
    let t = Instant::now();
    if wait_within(&mut child, limit).is_some() {
        return (child.wait_with_output().expect("output"), t.elapsed());
    }
    let _ = child.kill();
    let o = child.wait_with_output().expect("output");
    panic!(
        "{what} still running after {limit:?} (hang): stderr {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Polls `ready` (at most `limit`) while `child` runs: `Ok` once it holds,
/// `Err(Some(status))` when the child exited first, `Err(None)` at the
/// deadline (the child is left running).
pub fn ready_within(
    child: &mut Child,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    while !ready() {
        if let Some(st) = child.try_wait().expect("child status") {
            return Err(Some(st));
        }
        if Instant::now() >= deadline {
            return Err(None);
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Stops `child` (if it still runs) and reaps it: SIGTERM first, SIGKILL
/// after 3 s. Many peers run under `timeout`, which passes SIGTERM on to the
/// program it runs; SIGKILL would kill `timeout` alone and leave that
/// program running, without its time limit, after the test.
pub fn kill_and_reap(child: &mut Child) {
    let _ = stop(child, Duration::from_secs(3));
}
