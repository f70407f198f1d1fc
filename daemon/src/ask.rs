//! Asking several services at once: each socket on a thread, all of them
//! under one deadline, so that services that do not answer (stopped, stuck,
//! their backlog full) cost a scrape, a hint or the daemon's stop that
//! deadline once, not each.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use flowlane_dataplane::control_socket::{self, Request, Response};

/// Threads asking at once, at most (more sockets wait for a free one).
const ASKING_MAX: usize = 64;

/// One service's answer, and the process that gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What the service answered.
    pub response: Response,
    /// The process listening on the socket, as this process sees it
    /// (`SO_PEERCRED`: the host's pid for a daemon in the host's pid
    /// namespace, whatever a service in a container calls itself); None
    /// where it cannot be told (a process outside this one's namespace).
    pub pid: Option<u32>,
}

/// Asks each of `sockets` `request`, all at once, and waits at most
/// `within` for the answers: one per socket, in their order. A socket that
/// did not answer by then is an error saying so; its thread ends on its
/// own (its connect, write and read each bounded by `within`).
pub fn ask_all(
    sockets: &[PathBuf],
    request: &Request,
    within: Duration,
) -> Vec<Result<Answer, String>> {
    let deadline = Instant::now() + within;
    let mut got: Vec<Option<Result<Answer, String>>> = vec![None; sockets.len()];
    let work = Arc::new((sockets.to_vec(), request.clone(), AtomicUsize::new(0)));
    let (tx, rx) = mpsc::channel();
    for _ in 0..sockets.len().min(ASKING_MAX) {
        let (work, tx) = (work.clone(), tx.clone());
        let asker = move || {
            let (paths, request, next) = &*work;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = paths.get(i) else { return };
                if Instant::now() >= deadline || tx.send((i, ask(path, request, within))).is_err() {
                    return;
                }
            }
        };
        // Fewer threads than asked for (a limit reached): those started
        // take the rest, or the deadline counts them unanswered.
        if std::thread::Builder::new()
            .name("flowlane-ask".into())
            .spawn(asker)
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((i, answer)) => got[i] = Some(answer),
            // The deadline, or every thread done.
            Err(_) => break,
        }
    }
    got.into_iter()
        .zip(sockets)
        .map(|(answer, path)| {
            answer.unwrap_or_else(|| {
                Err(format!(
                    "no answer on {} within {} ms",
                    path.display(),
                    within.as_millis()
                ))
            })
        })
        .collect()
}

/// Asks the service at `path`, and who it is.
fn ask(path: &std::path::Path, request: &Request, within: Duration) -> Result<Answer, String> {
    let stream = control_socket::connect_within(path, within)
        .map_err(|e| format!("no answer on {}: {e}", path.display()))?;
    let pid = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .and_then(|c| u32::try_from(c.pid()).ok())
        .filter(|&p| p > 0);
    let response =
        control_socket::request_on(stream, path, request, within).map_err(|e| e.to_string())?;
    Ok(Answer { response, pid })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// Sockets that take connections and never answer, and one whose
    /// backlog is full (a stopped service): all asked at once, the whole
    /// in about one deadline, each said.
    #[test]
    fn services_that_do_not_answer_cost_one_deadline_together() {
        let dir = std::env::temp_dir().join(format!("fl-ask-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let silent: Vec<(PathBuf, UnixListener)> = (0..3)
            .map(|i| {
                let p = dir.join(format!("silent{i}.sock"));
                let l = UnixListener::bind(&p).unwrap();
                (p, l)
            })
            .collect();
        let (full, _listener, _held) = crate::registry::tests::full_backlog(&dir, "full");
        let mut paths: Vec<PathBuf> = silent.iter().map(|(p, _)| p.clone()).collect();
        paths.push(full);
        let within = Duration::from_millis(300);
        let began = Instant::now();
        let answers = ask_all(&paths, &Request::Status, within);
        let took = began.elapsed();
        assert!(took < within * 2, "took {took:?}");
        assert_eq!(answers.len(), 4);
        for (a, p) in answers.iter().zip(&paths) {
            let e = a.as_ref().unwrap_err();
            assert!(e.contains(&p.display().to_string()), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
