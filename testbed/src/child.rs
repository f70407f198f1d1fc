//! Child processes with a deadline, for every tool and test that runs one
//! (the measurement matrix's cells and delay line, the demo's and the
//! benchmarks' services, the integration tests' harness): no wait on a child
//! is unbounded, and a child asked to stop gets SIGTERM first, so that it can
//! release what it holds (XDP programs, namespaces), and SIGKILL only after
//! a grace period.

use std::io;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// How often a waiting caller looks at the child.
const POLL: Duration = Duration::from_millis(20);

/// Waits at most `limit` for `child` to exit: its status, or `None` when it
/// is still running at the deadline (it is left running).
pub fn wait_within(child: &mut Child, limit: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Waits at most `limit` for `child` to exit and collects its output; past
/// the deadline it is killed and the wait is an error.
pub fn output_within(mut child: Child, limit: Duration) -> Result<Output> {
    if wait_within(&mut child, limit)?.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        bail!("no result within {} s", limit.as_secs());
    }
    Ok(child.wait_with_output()?)
}

/// Asks `child` to stop (SIGTERM), so that it can release what it holds.
pub fn terminate(child: &Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
}

/// Stops `child`: SIGTERM, up to `grace` for it to exit, then SIGKILL; reaps
/// it. Returns its status when it exited within the grace period.
pub fn stop(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(st)) = child.try_wait() {
        return Some(st);
    }
    terminate(child);
    let st = wait_within(child, grace).ok().flatten();
    if st.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn deadline_kills_and_reports() {
        let c = Command::new("sleep").arg("5").spawn().unwrap();
        let t = Instant::now();
        let e = output_within(c, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("no result within 0 s"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(4));
        let c = Command::new("echo")
            .arg("hi")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let o = output_within(c, Duration::from_secs(10)).unwrap();
        assert_eq!(o.stdout, b"hi\n");
    }

    #[test]
    fn terminate_then_wait() {
        let mut c = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(wait_within(&mut c, Duration::from_millis(50))
            .unwrap()
            .is_none());
        terminate(&c);
        let st = wait_within(&mut c, Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert!(!st.success());
    }

    #[test]
    fn stop_terminates_then_kills() {
        let mut c = Command::new("sleep").arg("5").spawn().unwrap();
        let st = stop(&mut c, Duration::from_secs(5)).expect("exits on SIGTERM");
        assert!(!st.success());
        // A child that ignores SIGTERM is killed after the grace period.
        let mut c = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 5"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        assert_eq!(stop(&mut c, Duration::from_millis(200)), None);
        assert!(t.elapsed() < Duration::from_secs(3));
        assert!(c.try_wait().unwrap().is_some(), "reaped");
    }
}
