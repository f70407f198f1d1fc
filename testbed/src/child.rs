//! Child processes with a deadline, for every tool and test that runs one
//! (the measurement matrix's cells and delay line, the demo's and the
//! benchmarks' services, the integration tests' harness): no wait on a child
//! is unbounded, and a child asked to stop gets SIGTERM first, so that it can
//! release what it holds (XDP programs, namespaces), and SIGKILL only after
//! a grace period.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output};
use std::thread::JoinHandle;
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

/// How long a child past [`output_within`]'s deadline has between SIGTERM
/// and SIGKILL.
pub const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Waits at most `limit` for `child` to exit and collects its output (its
/// piped stdout and stderr, read while it runs: a child that writes more
/// than a pipe holds, 64 KiB, would otherwise block until the deadline);
/// [`Watched::output_within`] of a child watched from now on.
pub fn output_within(child: Child, limit: Duration) -> Result<Output> {
    Watched::new(child).output_within(limit)
}

/// A reader of a child's pipe ([`drain`]).
type Reader = JoinHandle<io::Result<Vec<u8>>>;

/// A child whose piped stdout and stderr are read from the moment it is
/// watched, each on a thread of its own: a child that writes more than a
/// pipe holds (64 KiB) is never blocked on it while its caller waits on
/// something else (the other end of a measurement) before it collects
/// the output.
#[derive(Debug)]
pub struct Watched {
    child: Child,
    stdout: Option<Reader>,
    stderr: Option<Reader>,
}

impl Watched {
    /// Starts reading `child`'s piped stdout and stderr (those it has).
    pub fn new(mut child: Child) -> Watched {
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Watched {
            child,
            stdout,
            stderr,
        }
    }

    /// The child, to signal or stop ([`stop`]).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits at most `limit` for the child to exit and collects its output.
    /// Past the deadline it is stopped ([`stop`]: SIGTERM, SIGKILL after
    /// [`OUTPUT_GRACE`]) and the wait is an error; so it is when its output
    /// stays open after it exited, past the deadline and at least
    /// [`OUTPUT_GRACE`] (a process it started holds the pipe).
    pub fn output_within(mut self, limit: Duration) -> Result<Output> {
        let deadline = Instant::now() + limit;
        let Some(status) = wait_within(&mut self.child, limit)? else {
            stop(&mut self.child, OUTPUT_GRACE);
            bail!("no result within {} s", limit.as_secs());
        };
        let read_by = deadline.max(Instant::now() + OUTPUT_GRACE);
        let collect = |pipe: Option<Reader>| -> Result<Vec<u8>> {
            let Some(reader) = pipe else {
                return Ok(Vec::new());
            };
            while !reader.is_finished() {
                if Instant::now() > read_by {
                    bail!(
                        "no result within {} s: the program exited ({status}) but its output \
                         stays open (a process it started holds it)",
                        limit.as_secs()
                    );
                }
                std::thread::sleep(POLL);
            }
            match reader.join() {
                Ok(read) => Ok(read?),
                Err(_) => bail!("reading the program's output panicked"),
            }
        };
        Ok(Output {
            status,
            stdout: collect(self.stdout.take())?,
            stderr: collect(self.stderr.take())?,
        })
    }
}

/// Reads `pipe` to its end on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> Reader {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        pipe.read_to_end(&mut all).map(|_| all)
    })
}

/// Makes the child that `cmd` spawns get SIGTERM when the thread that
/// spawns it exits, the process killed (SIGKILL) included
/// (`PR_SET_PDEATHSIG`, prctl(2)): a helper that holds a bed (the matrix's
/// delay line) then releases it through its own SIGTERM handling instead
/// of outliving its parent. The spawning thread must live as long as the
/// child should. The spawn fails if the parent is already gone.
// The bed's one other `unsafe`: `pre_exec` and the two system calls it makes.
#[allow(unsafe_code)]
pub fn terminate_with_parent(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id();
    let hook = move || -> io::Result<()> {
        let term = libc::SIGTERM as libc::c_ulong;
        // SAFETY: PR_SET_PDEATHSIG takes a signal number; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, term, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent died before the prctl: the signal will never come.
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } as u32 != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: between fork and exec `hook` makes only async-signal-safe
    // system calls and allocates nothing.
    unsafe { cmd.pre_exec(hook) }
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

    /// A child that writes more than a pipe holds is read while it runs,
    /// not left blocked on its pipe until the deadline.
    #[test]
    fn output_beyond_a_pipe_is_read_while_the_child_runs() {
        let c = Command::new("head")
            .args(["-c", "200000", "/dev/zero"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = output_within(c, Duration::from_secs(10)).unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout.len(), 200_000);
        assert!(o.stderr.is_empty());
    }

    /// Output held open by a process the child started is waited for only
    /// so long: the wait stays bounded.
    #[test]
    fn output_held_open_after_exit_is_an_error_not_a_hang() {
        let c = Command::new("sh")
            .args(["-c", "sleep 5 & echo started"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        let e = output_within(c, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("stays open"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }

    /// Past the deadline a child gets SIGTERM first: one that stops on it
    /// can release what it holds (here: write its last words).
    #[test]
    fn the_deadline_sends_sigterm_first() {
        let dir = std::env::temp_dir().join(format!("fl-child-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let said = dir.join("said");
        let script = format!(
            "trap 'echo bye > {}; exit 0' TERM; while :; do sleep 0.05; done",
            said.display()
        );
        let c = Command::new("sh").args(["-c", &script]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let e = output_within(c, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("no result within"), "{e}");
        let words = std::fs::read_to_string(&said).unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(words, "bye\n", "the child was not asked to stop");
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
