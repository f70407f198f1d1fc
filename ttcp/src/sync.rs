//! The sender/receiver side channel: one TCP connection to the receiver's
//! control port carrying newline-delimited JSON messages.
//!
//! ```text
//! sender                                  receiver
//!   Hello{params, connections}  ───────▶  compare with its own flags
//!                               ◀───────  Accept | Reject{reason} | Busy{reason}
//!   (opens the data connections)
//!   Connected{n}                ───────▶  waits until n connections are accepted
//!                               ◀───────  Start            (both: t0 = now)
//!   warm-up W │ measured window T │ cool-down C      (both count bytes by phase)
//!   Done{summary}               ───────▶
//!                               ◀───────  Done{summary}
//! ```
//!
//! Both sides take t0 when `Start` leaves or arrives, so their windows differ by
//! one control-message latency (half an RTT): the warm-up absorbs it.
//! Every read on the channel has a deadline ([`CONTROL_TIMEOUT`] or a stated
//! longer one), so a dead peer is an error, never a hang.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Version of the control protocol; a different one is a mismatch.
pub const PROTO: u32 = 1;

/// Deadline for connecting to the control port and for each control reply that
/// does not wait on the test itself.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// Deadline for all data connections to be opened and accepted.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest control message (its JSON line, without the newline): 1 MiB.
/// The largest a side sends, the receiver's `Done` with the sender's report
/// nested in it, is a few kilobytes; a peer that streams more without a
/// newline (not flowlane-ttcp) is refused at this bound rather than
/// buffered.
pub const MAX_MSG: usize = 1 << 20;

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Bulk transfer sender → receiver.
    Throughput,
    /// Ping-pong of fixed-size messages; the receiver echoes.
    Latency,
    /// Ping-pong with computation between send and receive on the sender.
    Overlap,
}

/// The test parameters both sides must agree on (plus informative ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Protocol version ([`PROTO`]).
    pub proto: u32,
    /// `--backend`.
    pub backend: String,
    /// Mode.
    pub mode: Mode,
    /// `-p`: first data port.
    pub base_port: u16,
    /// `-P`: number of data ports.
    pub ports: u16,
    /// `-W` seconds.
    pub warmup_s: f64,
    /// `-t` seconds.
    pub duration_s: f64,
    /// `-C` seconds.
    pub cooldown_s: f64,
    /// `--msg-size` (latency and overlap modes).
    pub msg_size: usize,
    /// `-b` (informative: each side reads/writes with its own buffer).
    pub buffer: usize,
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    /// Sender → receiver: the test it wants.
    Hello {
        /// Sender's parameters.
        params: Params,
        /// Data connections it will open.
        connections: usize,
    },
    /// Receiver → sender: parameters agree.
    Accept,
    /// Receiver → sender: parameters disagree (the reason names the flags).
    Reject {
        /// One line naming the cause.
        reason: String,
    },
    /// Receiver → sender: another test is running.
    Busy {
        /// One line naming the cause.
        reason: String,
    },
    /// Sender → receiver: `n` data connections are open.
    Connected {
        /// Connections opened.
        n: usize,
    },
    /// Receiver → sender: t0, start the warm-up now.
    Start,
    /// Either way at the end: the side's measured summary.
    Done {
        /// Bytes counted in the measured window.
        bytes: u64,
        /// Measured window length (seconds) by the side's own clock.
        window_s: f64,
        /// Free-form JSON of that side's report.
        report: serde_json::Value,
    },
    /// Either way: the side gives up (one line naming the cause).
    Abort {
        /// One line naming the cause.
        reason: String,
    },
}

/// The flags that differ between the receiver's and the sender's parameters,
/// as one line (`-t (receiver 2, sender 3), -P (receiver 1, sender 2)`); `None`
/// when they agree.
pub fn mismatch(recv: &Params, send: &Params) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cmp = |flag: &str, r: String, s: String| {
        if r != s {
            out.push(format!("{flag} (receiver {r}, sender {s})"));
        }
    };
    cmp("protocol", recv.proto.to_string(), send.proto.to_string());
    // The backend is each side's own choice: TCP is TCP on the wire (a
    // flowlane receiver measures a kernel sender); both reports name theirs.
    cmp(
        "mode (--latency/--overlap-us)",
        format!("{:?}", recv.mode).to_lowercase(),
        format!("{:?}", send.mode).to_lowercase(),
    );
    cmp("-p", recv.base_port.to_string(), send.base_port.to_string());
    cmp("-P", recv.ports.to_string(), send.ports.to_string());
    cmp("-W", recv.warmup_s.to_string(), send.warmup_s.to_string());
    cmp(
        "-t",
        recv.duration_s.to_string(),
        send.duration_s.to_string(),
    );
    cmp(
        "-C",
        recv.cooldown_s.to_string(),
        send.cooldown_s.to_string(),
    );
    if recv.mode != Mode::Throughput {
        cmp(
            "--msg-size",
            recv.msg_size.to_string(),
            send.msg_size.to_string(),
        );
    }
    if out.is_empty() {
        None
    } else {
        Some(format!("mismatched flags: {}", out.join(", ")))
    }
}

/// Why connecting to `addr` failed, in one line (`wait`: how long it was
/// tried while refused).
fn connect_error(addr: SocketAddr, e: &std::io::Error, wait: Duration) -> anyhow::Error {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused if wait.is_zero() => anyhow!(
            "no receiver at {addr}: connection refused (start `flowlane-ttcp -r` there first, or check -m/--control-port)"
        ),
        ConnectionRefused => anyhow!(
            "no receiver at {addr}: connection refused for {} s (start `flowlane-ttcp -r` there first, or check -m/--control-port)",
            wait.as_secs_f64()
        ),
        TimedOut | WouldBlock => anyhow!(
            "receiver {addr} unreachable: no answer within {} s",
            CONTROL_TIMEOUT.as_secs()
        ),
        _ => anyhow!("receiver {addr} unreachable: {e}"),
    }
}

/// One end of the control channel.
#[derive(Debug)]
pub struct Ctl {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
    peer: SocketAddr,
}

impl Ctl {
    /// Wraps an accepted or connected stream.
    pub fn new(s: TcpStream) -> Result<Ctl> {
        s.set_nodelay(true)?;
        let peer = s.peer_addr()?;
        Ok(Ctl {
            wr: s.try_clone()?,
            rd: BufReader::new(s),
            peer,
        })
    }

    /// Connects to a receiver's control port within [`CONTROL_TIMEOUT`], with an
    /// error that names the cause.
    pub fn connect(addr: SocketAddr) -> Result<Ctl> {
        Ctl::connect_within(addr, Duration::ZERO)
    }

    /// [`Ctl::connect`], trying again while the port refuses until `wait`
    /// has passed: a receiver that is still starting (re-executing in a
    /// bed, binding its port) is not yet there.
    pub fn connect_within(addr: SocketAddr, wait: Duration) -> Result<Ctl> {
        let deadline = Instant::now() + wait;
        let s = loop {
            match TcpStream::connect_timeout(&addr, CONTROL_TIMEOUT) {
                Ok(s) => break s,
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(connect_error(addr, &e, wait)),
            }
        };
        Ctl::new(s)
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends one message.
    pub fn send(&mut self, m: &Msg) -> Result<()> {
        let mut line = serde_json::to_vec(m)?;
        line.push(b'\n');
        self.wr
            .write_all(&line)
            .with_context(|| format!("control channel to {}", self.peer))
    }

    /// Receives one message within `timeout`; `what` names what was awaited in
    /// the error. The peer's `Abort` is an error naming its reason.
    pub fn recv(&mut self, timeout: Duration, what: &str) -> Result<Msg> {
        let m = self.recv_msg(timeout, what)?;
        if let Msg::Abort { reason } = &m {
            bail!("peer {} gave up: {reason}", self.peer);
        }
        Ok(m)
    }

    /// The reason of the peer's `Abort`, when one arrives within `within`
    /// (or has arrived): asked by a side whose own run failed, since the
    /// peer's failure may be the cause (its data connections closed).
    pub fn peer_gave_up(&mut self, within: Duration) -> Option<String> {
        match self.recv_msg(within, "abort") {
            Ok(Msg::Abort { reason }) => Some(reason),
            _ => None,
        }
    }

    /// [`Ctl::recv`] with the peer's `Abort` returned as a message.
    fn recv_msg(&mut self, timeout: Duration, what: &str) -> Result<Msg> {
        let deadline = Instant::now() + timeout;
        let mut line: Vec<u8> = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "peer {} sent no {what} within {:.0} s",
                    self.peer,
                    timeout.as_secs_f64()
                );
            }
            self.rd.get_ref().set_read_timeout(Some(left))?;
            // At most the rest of a MAX_MSG line and its newline: never 0,
            // since a longer line without one was refused below.
            let room = (MAX_MSG + 1 - line.len()) as u64;
            match (&mut self.rd).take(room).read_until(b'\n', &mut line) {
                Ok(0) => bail!(
                    "peer {} closed the control channel while we waited for {what}",
                    self.peer
                ),
                Ok(_) if line.ends_with(b"\n") => break,
                Ok(_) if line.len() > MAX_MSG => bail!(
                    "peer {} sent a control line longer than {MAX_MSG} bytes while we waited \
                     for {what} (is it flowlane-ttcp?)",
                    self.peer
                ),
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("control channel to {}: {e} (waiting for {what})", self.peer),
            }
        }
        let m: Msg = serde_json::from_slice(line.trim_ascii_end()).with_context(|| {
            format!(
                "peer {} sent something that is not a flowlane-ttcp control message (is it flowlane-ttcp?)",
                self.peer
            )
        })?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn params() -> Params {
        Params {
            proto: PROTO,
            backend: "kernel".into(),
            mode: Mode::Throughput,
            base_port: 5001,
            ports: 1,
            warmup_s: 1.0,
            duration_s: 10.0,
            cooldown_s: 1.0,
            msg_size: 64,
            buffer: 65536,
        }
    }

    #[test]
    fn equal_params_agree() {
        assert_eq!(mismatch(&params(), &params()), None);
        // The buffer size is each side's own business; msg size only matters
        // when messages are echoed.
        let s = Params {
            buffer: 1024,
            msg_size: 1,
            ..params()
        };
        assert_eq!(mismatch(&params(), &s), None);
    }

    #[test]
    fn mismatch_names_every_flag() {
        let s = Params {
            duration_s: 3.0,
            ports: 4,
            backend: "flowlane".into(),
            ..params()
        };
        let m = mismatch(&params(), &s).unwrap();
        assert!(m.starts_with("mismatched flags: "), "{m}");
        assert!(m.contains("-t (receiver 10, sender 3)"), "{m}");
        assert!(m.contains("-P (receiver 1, sender 4)"), "{m}");
        assert!(!m.contains("--backend"), "{m}");
        assert!(!m.contains("-W"), "{m}");
        assert!(!m.contains('\n'));
        // Each agreed flag alone, named with both sides' values.
        let one = |s: Params, want: &str| {
            let m = mismatch(&params(), &s).unwrap();
            assert_eq!(m, format!("mismatched flags: {want}"));
        };
        one(
            Params {
                warmup_s: 2.5,
                ..params()
            },
            "-W (receiver 1, sender 2.5)",
        );
        one(
            Params {
                cooldown_s: 0.0,
                ..params()
            },
            "-C (receiver 1, sender 0)",
        );
        one(
            Params {
                base_port: 6001,
                ..params()
            },
            "-p (receiver 5001, sender 6001)",
        );
        one(
            Params {
                proto: PROTO + 1,
                ..params()
            },
            &format!("protocol (receiver {PROTO}, sender {})", PROTO + 1),
        );
        let lat = Params {
            mode: Mode::Latency,
            ..params()
        };
        let m = mismatch(
            &lat,
            &Params {
                msg_size: 2,
                ..lat.clone()
            },
        )
        .unwrap();
        assert!(m.contains("--msg-size (receiver 64, sender 2)"), "{m}");
        let m = mismatch(&params(), &lat).unwrap();
        assert!(m.contains("mode"), "{m}");
    }

    #[test]
    fn messages_round_trip_as_json_lines() {
        let msgs = vec![
            Msg::Hello {
                params: params(),
                connections: 16,
            },
            Msg::Accept,
            Msg::Reject { reason: "x".into() },
            Msg::Busy { reason: "y".into() },
            Msg::Connected { n: 3 },
            Msg::Start,
            Msg::Done {
                bytes: 7,
                window_s: 1.5,
                report: serde_json::json!({"a": 1}),
            },
        ];
        for m in msgs {
            let s = serde_json::to_string(&m).unwrap();
            assert!(!s.contains('\n'));
            assert_eq!(serde_json::from_str::<Msg>(&s).unwrap(), m);
        }
    }

    fn pair() -> (Ctl, Ctl) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Ctl::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, Ctl::new(b).unwrap())
    }

    #[test]
    fn exchange_over_loopback() {
        let (mut s, mut r) = pair();
        s.send(&Msg::Hello {
            params: params(),
            connections: 2,
        })
        .unwrap();
        match r.recv(Duration::from_secs(2), "hello").unwrap() {
            Msg::Hello { connections, .. } => assert_eq!(connections, 2),
            m => panic!("{m:?}"),
        }
        r.send(&Msg::Start).unwrap();
        assert_eq!(s.recv(Duration::from_secs(2), "start").unwrap(), Msg::Start);
    }

    #[test]
    fn silent_peer_times_out_with_a_named_cause() {
        let (mut s, _r) = pair();
        let t = Instant::now();
        let e = s
            .recv(Duration::from_millis(300), "the start message")
            .unwrap_err()
            .to_string();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(e.contains("no the start message within"), "{e}");
    }

    #[test]
    fn closed_peer_and_abort_and_garbage_are_errors() {
        let (mut s, r) = pair();
        drop(r);
        let e = s.recv(Duration::from_secs(2), "accept").unwrap_err();
        assert!(e.to_string().contains("closed the control channel"), "{e}");

        let (mut s, mut r) = pair();
        r.send(&Msg::Abort {
            reason: "only 3 of 4 connections arrived".into(),
        })
        .unwrap();
        let e = s.recv(Duration::from_secs(2), "start").unwrap_err();
        assert!(e.to_string().contains("gave up: only 3 of 4"), "{e}");
        // A side whose own run failed asks for the peer's reason.
        r.send(&Msg::Abort {
            reason: "interface xsk0 vanished".into(),
        })
        .unwrap();
        assert_eq!(
            s.peer_gave_up(Duration::from_secs(2)).as_deref(),
            Some("interface xsk0 vanished")
        );
        r.send(&Msg::Start).unwrap();
        assert_eq!(s.peer_gave_up(Duration::from_millis(100)), None);
        assert_eq!(s.peer_gave_up(Duration::from_millis(100)), None);

        let (mut s, r) = pair();
        (&r.wr).write_all(b"HTTP/1.1 400 Bad Request\r\n").unwrap();
        let e = s.recv(Duration::from_secs(2), "accept").unwrap_err();
        assert!(e.to_string().contains("not a flowlane-ttcp"), "{e}");
    }

    /// A peer that streams bytes without a newline (not flowlane-ttcp) is
    /// refused at [`MAX_MSG`], not buffered until the deadline.
    #[test]
    fn a_line_past_the_limit_is_refused_naming_it() {
        let (mut s, r) = pair();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 64 * 1024];
            // 2 MiB, no newline; the reader may refuse (and close) early.
            for _ in 0..32 {
                if (&r.wr).write_all(&chunk).is_err() {
                    break;
                }
            }
            r
        });
        let e = s
            .recv(Duration::from_secs(10), "hello")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("longer than {MAX_MSG} bytes")), "{e}");
        assert!(!e.contains('\n'), "{e}");
        drop(s);
        drop(writer.join().unwrap());
        // A message of the largest size is taken whole.
        let (mut s, mut r) = pair();
        let frame = r#"{"msg":"busy","reason":""}"#.len();
        let sent = Msg::Busy {
            reason: "y".repeat(MAX_MSG - frame),
        };
        assert_eq!(serde_json::to_vec(&sent).unwrap().len(), MAX_MSG);
        let want = sent.clone();
        let w = std::thread::spawn(move || r.send(&sent).map(|_| r));
        assert_eq!(s.recv(Duration::from_secs(10), "busy").unwrap(), want);
        w.join().unwrap().unwrap();
    }

    #[test]
    fn refused_connect_names_the_cause() {
        // Bind then drop: the port is (almost certainly) closed now.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = Ctl::connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("connection refused"), "{e}");
    }

    #[test]
    fn connect_waits_for_a_receiver_that_is_still_starting() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The receiver binds its control port 300 ms after the sender tries.
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let l = TcpListener::bind(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            let mut c = Ctl::new(s).unwrap();
            c.send(&Msg::Accept).unwrap();
        });
        let t = Instant::now();
        let mut c = Ctl::connect_within(addr, Duration::from_secs(10)).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            c.recv(Duration::from_secs(5), "accept").unwrap(),
            Msg::Accept
        );
        late.join().unwrap();
        // Refused past the wait: the error says for how long it was tried.
        let t = Instant::now();
        let e = Ctl::connect_within(addr, Duration::from_millis(200))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("connection refused for 0.2 s"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
}
