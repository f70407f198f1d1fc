//! Asking several services at once: every socket connected, written to and
//! read without blocking, on one poll loop (mio) in the calling thread, all
//! under one deadline. Services that do not answer (stopped, stuck, their
//! backlog full, trickling an answer that never ends) cost a scrape, a hint
//! or the daemon's stop that deadline once, however many they are, and
//! never keep the others from being asked; an answer is read up to
//! [`control_socket::MAX_ANSWER`] bytes (a service that streams without end
//! is cut there); and once [`ask_all`] returns nothing of it is left (no
//! thread, every connection closed).

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flowlane_dataplane::control_socket::{self, AnswerReader, Request, Response};
use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token};

/// How soon a socket that could not be connected to for now (its backlog
/// full, or no file descriptor free here) is tried again.
const RETRY: Duration = Duration::from_millis(10);

/// Readiness events taken per wake-up (more wait for the next).
const EVENTS: usize = 256;

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

/// Why a socket gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nothing listens there (the connect was refused, or the file is
    /// gone): a service that ended and left its socket, not one that
    /// failed to answer.
    Gone(String),
    /// This process may not connect (permission denied: a service's socket
    /// is its user's alone).
    Refused(String),
    /// It did not answer within the deadline, or its answer was no
    /// response.
    Failed(String),
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::Gone(why) | NoAnswer::Refused(why) | NoAnswer::Failed(why) => {
                f.write_str(why)
            }
        }
    }
}

/// One socket's answer, or why there is none.
pub type Asked = Result<Answer, NoAnswer>;

/// Where one exchange is.
enum Stage {
    /// Not connected yet, and why: tried again every [`RETRY`].
    Waiting(&'static str),
    /// Connected: the request being written, then the answer read.
    Talking {
        stream: UnixStream,
        written: usize,
        answer: AnswerReader,
        pid: Option<u32>,
    },
    /// Answered, or failed (boxed: an answer is large).
    Done(Box<Asked>),
}

/// Asks each of `sockets` `request`, all at once, and waits at most
/// `within` for the answers: one per socket, in their order. A socket that
/// did not answer by then is an error saying so; its connection is closed
/// when this returns. The sockets need not be known to answer: one nothing
/// listens on is [`NoAnswer::Gone`] at once, so no connect need probe them
/// first.
pub fn ask_all(sockets: &[PathBuf], request: &Request, within: Duration) -> Vec<Asked> {
    let deadline = Instant::now() + within;
    let setup = control_socket::request_line(request)
        .map_err(|e| e.to_string())
        .and_then(|line| Ok((line, Poll::new().map_err(|e| format!("epoll: {e}"))?)));
    let (line, mut poll) = match setup {
        Ok(s) => s,
        Err(e) => {
            return sockets
                .iter()
                .map(|p| Err(NoAnswer::Failed(format!("cannot ask {}: {e}", p.display()))))
                .collect()
        }
    };
    let mut stages: Vec<Stage> = sockets.iter().map(|_| Stage::Waiting("")).collect();
    let mut events = Events::with_capacity(EVENTS);
    loop {
        let mut waiting = false;
        for (i, (stage, path)) in stages.iter_mut().zip(sockets).enumerate() {
            if let Stage::Waiting(_) = stage {
                *stage = connect(&poll, Token(i), path);
                waiting |= matches!(stage, Stage::Waiting(_));
            }
        }
        if stages.iter().all(|s| matches!(s, Stage::Done(_))) {
            break;
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        let wait = if waiting { left.min(RETRY) } else { left };
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!("asking the services: epoll: {e}");
                break;
            }
        }
        for event in &events {
            let i = event.token().0;
            if let (Some(stage), Some(path)) = (stages.get_mut(i), sockets.get(i)) {
                go_on(stage, &line, path);
            }
        }
    }
    stages
        .into_iter()
        .zip(sockets)
        .map(|(stage, path)| match stage {
            Stage::Done(answer) => *answer,
            Stage::Waiting(why) => Err(NoAnswer::Failed(format!(
                "no answer on {} within {} ms ({why})",
                path.display(),
                within.as_millis()
            ))),
            Stage::Talking { .. } => Err(NoAnswer::Failed(format!(
                "no answer on {} within {} ms",
                path.display(),
                within.as_millis()
            ))),
        })
        .collect()
}

/// Connects to `path` without waiting, and registers the connection with
/// `poll` as `token`; a full backlog or want of file descriptors waits to
/// be tried again.
fn connect(poll: &Poll, token: Token, path: &Path) -> Stage {
    let mut stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Stage::Waiting("its backlog full"),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::EMFILE | nix::libc::ENFILE)
            ) =>
        {
            return Stage::Waiting("no file descriptor free")
        }
        Err(e) => {
            let why = format!("no answer on {}: {e}", path.display());
            return Stage::Done(Box::new(Err(match e.kind() {
                ErrorKind::ConnectionRefused | ErrorKind::NotFound => NoAnswer::Gone(why),
                ErrorKind::PermissionDenied => NoAnswer::Refused(why),
                _ => NoAnswer::Failed(why),
            })));
        }
    };
    let pid = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .and_then(|c| u32::try_from(c.pid()).ok())
        .filter(|&p| p > 0);
    if let Err(e) =
        poll.registry()
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
    {
        return Stage::Done(Box::new(Err(NoAnswer::Failed(format!(
            "asking {}: epoll: {e}",
            path.display()
        )))));
    }
    Stage::Talking {
        stream,
        written: 0,
        answer: AnswerReader::default(),
        pid,
    }
}

/// Takes an exchange as far as it goes without waiting: the rest of the
/// request written, what came of the answer read (readiness is reported
/// on changes only: both are taken until they would block).
fn go_on(stage: &mut Stage, line: &[u8], path: &Path) {
    let Stage::Talking {
        stream,
        written,
        answer,
        pid,
    } = stage
    else {
        return;
    };
    let failed = |e: std::io::Error| {
        Some(Err(NoAnswer::Failed(format!(
            "talking to the service on {}: {e}",
            path.display()
        ))))
    };
    let outcome = 'go: {
        while *written < line.len() {
            match stream.write(&line[*written..]) {
                Ok(0) => break 'go failed(ErrorKind::WriteZero.into()),
                Ok(n) => *written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break 'go None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break 'go failed(e),
            }
        }
        loop {
            match answer.read_once(stream) {
                Ok(true) => {
                    break 'go Some(
                        answer
                            .response(path)
                            .map(|response| Answer {
                                response,
                                pid: *pid,
                            })
                            .map_err(|e| NoAnswer::Failed(e.to_string())),
                    )
                }
                Ok(false) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break 'go None,
                Err(e) => break 'go failed(e),
            }
        }
    };
    if let Some(done) = outcome {
        // The connection closed here (its registration goes with it).
        *stage = Stage::Done(Box::new(done));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A directory of its own for a test.
    fn dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fl-ask-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Sockets that take connections and never answer, and one whose
    /// backlog is full (a stopped service): all asked at once, the whole
    /// in about one deadline, each said.
    #[test]
    fn services_that_do_not_answer_cost_one_deadline_together() {
        let dir = dir("silent");
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
            let e = a.as_ref().unwrap_err().to_string();
            assert!(e.contains(&p.display().to_string()), "{e}");
        }
        assert!(answers[3]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("backlog full"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What a service that answers without end writes, again and again.
    const CHUNK: &[u8] = &[b' '; 64 * 1024];

    /// A service at `path` that writes with `talk` on every connection
    /// until the asker goes (its writes fail), each on a thread of its
    /// own; counts the connections it still holds and the bytes it got
    /// out.
    fn bad_service(
        path: &Path,
        talk: fn(&mut std::os::unix::net::UnixStream) -> std::io::Result<usize>,
    ) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let listener = UnixListener::bind(path).unwrap();
        let (open, sent) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (o, s) = (open.clone(), sent.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (o, s) = (o.clone(), s.clone());
                o.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    while let Ok(n) = talk(&mut stream) {
                        s.fetch_add(n, Ordering::SeqCst);
                    }
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (open, sent)
    }

    /// Waits (at most 5 s) until `count` is `want`, and says what it is.
    fn settles_at(count: &AtomicUsize, want: usize) -> usize {
        let began = Instant::now();
        while count.load(Ordering::SeqCst) != want && began.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        count.load(Ordering::SeqCst)
    }

    /// A service that answers without end: the answer is cut at its bound,
    /// well within the deadline, and the connection closed (the service
    /// sends no more).
    #[test]
    fn an_endless_answer_is_cut_and_closed() {
        let dir = dir("endless");
        let path = dir.join("endless.sock");
        let (open, sent) = bad_service(&path, |s| s.write_all(CHUNK).map(|()| CHUNK.len()));
        let within = Duration::from_secs(10);
        let began = Instant::now();
        let answers = ask_all(std::slice::from_ref(&path), &Request::Counters, within);
        assert!(began.elapsed() < within, "{:?}", began.elapsed());
        let e = answers[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        assert_eq!(settles_at(&open, 0), 0, "the connection is closed");
        let stopped_at = sent.load(Ordering::SeqCst);
        // What was read, and what the sockets' buffers held.
        assert!(
            stopped_at <= control_socket::MAX_ANSWER + (8 << 20),
            "{stopped_at}"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(sent.load(Ordering::SeqCst), stopped_at, "nothing more read");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A service that trickles an answer a byte at a time, never ending
    /// it: each ask ends at its deadline, and leaves nothing behind (no
    /// connection held open by a thread still reading).
    #[test]
    fn a_trickled_answer_leaves_nothing_behind() {
        let dir = dir("trickle");
        let path = dir.join("trickle.sock");
        let (open, _) = bad_service(&path, |s| {
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b" ").map(|()| 1)
        });
        let within = Duration::from_millis(150);
        for _ in 0..5 {
            let began = Instant::now();
            let answers = ask_all(std::slice::from_ref(&path), &Request::Counters, within);
            assert!(began.elapsed() < within * 2, "{:?}", began.elapsed());
            assert!(answers[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("no answer"));
        }
        assert_eq!(settles_at(&open, 0), 0, "connections left open");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
