//! A line key-value server on flowlane's application API: `SET key value`
//! answers `OK`, `GET key` answers `VALUE value` or `NOTFOUND`, `QUIT`
//! closes. One handler, run on kernel sockets (no root needed) either on
//! the network cores (run to completion) or on an application thread
//! (`--queue-pair`); each core keeps one map, shared by its connections.
//!
//! ```sh
//! cargo run -p flowlane-apps --example kv -- --port 7070 --queue-pair
//! printf 'SET a 1\nGET a\nQUIT\n' | nc 127.0.0.1 7070
//! ```
//!
//! Per-connection state (the partial line, replies not sent yet) lives in
//! a slab slot named by the connection's user-data word. A line may arrive
//! in several pieces (`Net::peek` shows one): the handler gathers it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane_app::{
    CloseReason, ConnHandle, ConnHandler, IntoSetupResult, Net, Setup, SetupExt, StopError,
};
use flowlane_kernel::{KernelConfig, KernelService};
use flowlane_qp::{QueuePairConfig, QueuePairs};

/// Longest line taken; a longer one resets the connection.
const MAX_LINE: usize = 4096;
/// Replies held for a connection that does not read them; past it the
/// handler reads no more requests until the peer takes some.
const MAX_PENDING: usize = 64 * 1024;

#[derive(Default)]
struct Conn {
    line: Vec<u8>,
    out: Vec<u8>,
    /// `QUIT` came: the rest of the input is dropped.
    quit: bool,
    /// Writing was shut down after the last reply.
    shut: bool,
}

#[derive(Default)]
struct Kv {
    map: HashMap<Vec<u8>, Vec<u8>>,
    conns: Vec<Conn>, // by user-data word - 1
    free: Vec<usize>,
}

impl Kv {
    fn answer(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut words = line.splitn(3, |&b| b == b' ');
        Some(match (words.next(), words.next(), words.next()) {
            (Some(b"SET"), Some(k), Some(v)) => {
                self.map.insert(k.to_vec(), v.to_vec());
                b"OK\n".to_vec()
            }
            (Some(b"GET"), Some(k), None) => match self.map.get(k) {
                Some(v) => [b"VALUE ", &v[..], b"\n"].concat(),
                None => b"NOTFOUND\n".to_vec(),
            },
            (Some(b"QUIT"), None, None) => return None,
            _ => b"ERROR\n".to_vec(),
        })
    }

    /// Sends what is pending, then reads and answers whole lines while the
    /// replies keep up.
    fn serve(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let Ok(word @ 1..) = net.user_data(conn) else {
            return;
        };
        let slot = word as usize - 1;
        loop {
            let out = &mut self.conns[slot].out;
            while !out.is_empty() {
                match net.send(conn, out) {
                    Ok(n) => drop(out.drain(..n)),
                    Err(_) => break, // on_writable comes
                }
            }
            if out.len() > MAX_PENDING {
                return;
            }
            let c = &mut self.conns[slot];
            if c.quit {
                // A close with input unread would reset the connection and
                // destroy the replies on their way: end writing, drop what
                // the client still sends, close at its FIN.
                if c.out.is_empty() && !c.shut {
                    c.shut = net.shutdown_write(conn).is_ok();
                }
                net.discard(conn);
                break;
            }
            let piece = match net.peek(conn) {
                Ok(p) if !p.is_empty() => p,
                _ => break,
            };
            let Some(end) = piece.iter().position(|&b| b == b'\n') else {
                if c.line.len() + piece.len() > MAX_LINE {
                    let _ = net.abort(conn);
                    return;
                }
                c.line.extend_from_slice(piece);
                let n = piece.len();
                let _ = net.consume(conn, n);
                continue;
            };
            let mut line = std::mem::take(&mut c.line);
            line.extend_from_slice(&piece[..end]);
            let _ = net.consume(conn, end + 1);
            match self.answer(&line) {
                Some(reply) => self.conns[slot].out.extend_from_slice(&reply),
                None => self.conns[slot].quit = true,
            }
            line.clear();
            self.conns[slot].line = line; // keep its capacity
        }
        if net.is_eof(conn) && self.conns[slot].out.is_empty() {
            let _ = net.close(conn);
        }
    }
}

impl ConnHandler for Kv {
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(Conn::default());
            self.conns.len() - 1
        });
        let _ = net.set_user_data(conn, slot as u64 + 1);
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.serve(net, conn);
    }
    fn on_closed(&mut self, net: &mut dyn Net, conn: ConnHandle, _why: CloseReason) {
        if let Ok(word @ 1..) = net.user_data(conn) {
            self.conns[word as usize - 1] = Conn::default();
            self.free.push(word as usize - 1);
        }
    }
}

fn main() {
    let mut port = 7070;
    let mut cores = 1;
    let mut queue_pair = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |what: &str| -> u32 {
            match args.next().and_then(|v| v.parse().ok()) {
                Some(n) => n,
                None => exit(format!("{what} takes a number")),
            }
        };
        match a.as_str() {
            "--port" => match u16::try_from(number("--port")) {
                Ok(p @ 1..) => port = p,
                _ => exit("a port must be 1-65535"),
            },
            "--cores" => cores = number("--cores"),
            "--queue-pair" => queue_pair = true,
            _ => exit("usage: kv [--port 7070] [--cores 1] [--queue-pair]"),
        }
    }
    // The cores: kernel-socket loops, unpinned, on every address.
    let kernel = KernelConfig::new(cores.max(1));
    // The service's set-up, the same whichever runs the handlers.
    let listen = move |s: &mut dyn Setup| s.listen(port, Kv::default());
    // Queue-pair mode: the handlers on one application thread; the cores
    // relay their connections to it.
    let qp = queue_pair.then(|| {
        let config = QueuePairConfig::new(&kernel.cores).with_app_threads(1);
        Arc::new(QueuePairs::start(config, listen).unwrap_or_else(|e| exit(e)))
    });
    let on_core = qp.clone();
    let service = KernelService::start(kernel, move |core| match &on_core {
        Some(qp) => qp.setup_core(core).into_setup_result(),
        None => listen(core).into_setup_result(),
    })
    .unwrap_or_else(|e| exit(e));
    eprintln!("kv: serving port {port} (Ctrl-C stops)");
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).expect("signal handler");
    }
    while !stop.load(Ordering::Relaxed) && !service.failed() {
        std::thread::sleep(Duration::from_millis(100));
    }
    // The cores first (their drain), then the application threads; what
    // failed in either, as one error.
    let (_, cores) = service.stop();
    let threads = qp.map_or(Ok(()), |qp| qp.stop());
    if let Err(e) = StopError::collect(cores.err().into_iter().chain(threads.err())) {
        exit(e);
    }
}

fn exit(why: impl std::fmt::Display) -> ! {
    // `{:#}`: a start error's line and its causes.
    eprintln!("kv: {why:#}");
    std::process::exit(1)
}
