//! The kernel backend: Linux TCP sockets, one mio event loop per thread, each
//! thread pinned as the `-m` mapping says. Receiver threads each listen on every
//! data port with `SO_REUSEPORT`, so the kernel spreads connections over them.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::backend::{rtt_histogram, Backend, DataThreads, Phase, Shared, ThreadStats, Workers};
use crate::plan::Plan;
use crate::sync::{Mode, CONNECT_TIMEOUT};

/// Kernel sockets through mio.
#[derive(Debug)]
pub struct Kernel;

const TICK: Duration = Duration::from_millis(10);

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: Option<usize>) -> Result<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    flowlane_kernel::pin_to(cpu as u32)
        .map_err(|e| anyhow!("cannot pin to CPU {cpu}: {e} (is it online and allowed?)"))
}

/// A non-blocking `SO_REUSEPORT` listener (flowlane's kernel backend's).
fn reuseport_listener(addr: SocketAddr) -> Result<TcpListener> {
    flowlane_kernel::reuseport_listener(addr).with_context(|| format!("cannot listen on {addr}"))
}

fn data_port(plan: &Plan, conn_index: usize) -> u16 {
    plan.params.base_port + (conn_index % usize::from(plan.params.ports)) as u16
}

impl Backend for Kernel {
    fn name(&self) -> &'static str {
        "kernel"
    }

    fn data_threads(&self) -> DataThreads {
        DataThreads {
            prefix: "ttcp-",
            label:
                "event-loop threads ttcp-rx*/ttcp-tx* (kernel TCP work in softirq is not theirs)",
        }
    }

    fn start_receiver(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let mut handles = Vec::new();
        for (i, &cpu) in plan.threads.iter().enumerate() {
            // Bind here, in the caller, so that errors come before any sync.
            let listeners = (0..plan.params.ports)
                .map(|p| reuseport_listener(SocketAddr::new(plan.addr, plan.params.base_port + p)))
                .collect::<Result<Vec<_>>>()?;
            let plan = plan.clone();
            let shared = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("ttcp-rx{i}"))
                    .spawn(move || {
                        let r = pin(cpu).and_then(|_| receiver_loop(&plan, &shared, listeners));
                        if let Err(e) = &r {
                            shared.fail(format!("{e:#}"));
                        }
                        r
                    })?,
            );
        }
        Ok(Workers::new(handles))
    }

    fn start_sender(&self, plan: &Plan, shared: Arc<Shared>) -> Result<Workers> {
        let mut handles = Vec::new();
        for (i, &cpu) in plan.threads.iter().enumerate() {
            let plan = plan.clone();
            let shared = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("ttcp-tx{i}"))
                    .spawn(move || {
                        let r = pin(cpu).and_then(|_| sender_thread(i, &plan, &shared));
                        if let Err(e) = &r {
                            shared.fail(format!("{e:#}"));
                        }
                        r
                    })?,
            );
        }
        Ok(Workers::new(handles))
    }
}

struct RxConn {
    s: TcpStream,
    /// Bytes still to echo back (latency/overlap modes).
    pending: Vec<u8>,
}

fn receiver_loop(
    plan: &Plan,
    shared: &Shared,
    mut listeners: Vec<TcpListener>,
) -> Result<ThreadStats> {
    let echo = plan.params.mode != Mode::Throughput;
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let nl = listeners.len();
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(i), Interest::READABLE)?;
    }
    let mut conns: Vec<Option<RxConn>> = Vec::new();
    let mut buf = vec![0u8; plan.params.buffer.max(plan.params.msg_size)];
    let mut st = ThreadStats::default();
    while !shared.stopping() {
        poll.poll(&mut events, Some(TICK))?;
        for ev in events.iter() {
            let t = ev.token().0;
            if t < nl {
                loop {
                    match listeners[t].accept() {
                        Ok((mut s, _)) => {
                            if echo {
                                s.set_nodelay(true)?;
                            }
                            let _ = shared.local.set(s.local_addr()?);
                            let tok = Token(nl + conns.len());
                            let int = if echo {
                                Interest::READABLE | Interest::WRITABLE
                            } else {
                                Interest::READABLE
                            };
                            poll.registry().register(&mut s, tok, int)?;
                            conns.push(Some(RxConn {
                                s,
                                pending: Vec::new(),
                            }));
                            st.connections += 1;
                            shared.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => bail!("accept on port {}: {e}", plan.params.base_port + t as u16),
                    }
                }
                continue;
            }
            let ci = t - nl;
            let Some(c) = conns.get_mut(ci).and_then(Option::as_mut) else {
                continue;
            };
            let closed = serve(c, &mut buf, echo, shared, &mut st)?;
            if closed {
                if let Some(mut c) = conns[ci].take() {
                    let _ = poll.registry().deregister(&mut c.s);
                }
            }
        }
    }
    Ok(st)
}

/// Drains a readable connection (echoing when asked); `true` when the peer closed.
fn serve(
    c: &mut RxConn,
    buf: &mut [u8],
    echo: bool,
    shared: &Shared,
    st: &mut ThreadStats,
) -> Result<bool> {
    loop {
        if echo && !flush(c)? {
            return Ok(false); // wait for WRITABLE before reading more
        }
        match c.s.read(buf) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                st.add(shared.phase_at(Instant::now()), n);
                if echo {
                    c.pending.extend_from_slice(&buf[..n]);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if echo {
                    flush(c)?;
                }
                return Ok(false);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Ok(true)
            }
            Err(e) => return Err(anyhow!("receive: {e}")),
        }
    }
}

/// Writes pending echo bytes; `true` when all went out.
fn flush(c: &mut RxConn) -> Result<bool> {
    while !c.pending.is_empty() {
        match c.s.write(&c.pending) {
            Ok(n) => {
                c.pending.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                c.pending.clear();
                return Ok(true);
            }
            Err(e) => return Err(anyhow!("echo: {e}")),
        }
    }
    Ok(true)
}

/// Opens this thread's connections and waits until all are established.
fn connect_all(
    idx: usize,
    plan: &Plan,
    shared: &Shared,
    poll: &mut Poll,
    nodelay: bool,
) -> Result<Vec<TcpStream>> {
    let l = plan.conns_per_thread;
    let mut conns = Vec::with_capacity(l);
    for i in 0..l {
        let to = SocketAddr::new(plan.addr, data_port(plan, idx * l + i));
        let mut s = TcpStream::connect(to).with_context(|| format!("connect to {to}"))?;
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        conns.push(s);
    }
    let mut up = vec![false; l];
    let mut n_up = 0;
    let mut events = Events::with_capacity(1024);
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while n_up < l {
        if shared.stopping() {
            return Ok(conns);
        }
        if Instant::now() > deadline {
            bail!(
                "only {n_up} of {l} connections to {} were established within {} s",
                plan.addr,
                CONNECT_TIMEOUT.as_secs()
            );
        }
        poll.poll(&mut events, Some(TICK))?;
        for ev in events.iter() {
            let i = ev.token().0;
            if up[i] {
                continue;
            }
            let s = &conns[i];
            let to = SocketAddr::new(plan.addr, data_port(plan, idx * l + i));
            if let Some(e) = s.take_error()? {
                bail!("connect to {to}: {e}");
            }
            match s.peer_addr() {
                Ok(_) => {
                    up[i] = true;
                    n_up += 1;
                    if nodelay {
                        s.set_nodelay(true)?;
                    }
                    let _ = shared.local.set(s.local_addr()?);
                    shared.connected.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::NotConnected => {}
                Err(e) => bail!("connect to {to}: {e}"),
            }
        }
    }
    Ok(conns)
}

fn wait_for_t0(shared: &Shared) -> Option<Instant> {
    loop {
        if shared.stopping() {
            return None;
        }
        if let Some(t0) = shared.t0() {
            return Some(t0);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sender_thread(idx: usize, plan: &Plan, shared: &Shared) -> Result<ThreadStats> {
    let mode = plan.params.mode;
    let mut poll = Poll::new()?;
    let mut conns = connect_all(idx, plan, shared, &mut poll, mode != Mode::Throughput)?;
    let mut st = ThreadStats {
        connections: conns.len(),
        ..ThreadStats::default()
    };
    let Some(t0) = wait_for_t0(shared) else {
        return Ok(st);
    };
    let end = t0 + shared.schedule.end();
    match mode {
        Mode::Throughput => bulk_send(plan, shared, &mut poll, &mut conns, end, &mut st)?,
        Mode::Latency | Mode::Overlap => {
            ping_pong(plan, shared, &mut poll, &mut conns[0], end, &mut st)?
        }
    }
    Ok(st)
}

fn bulk_send(
    plan: &Plan,
    shared: &Shared,
    poll: &mut Poll,
    conns: &mut [TcpStream],
    end: Instant,
    st: &mut ThreadStats,
) -> Result<()> {
    let buf = vec![0x5au8; plan.params.buffer];
    let mut ready: VecDeque<usize> = (0..conns.len()).collect();
    let mut is_ready = vec![true; conns.len()];
    let mut events = Events::with_capacity(1024);
    loop {
        let now = Instant::now();
        if now >= end || shared.stopping() {
            return Ok(());
        }
        let timeout = if ready.is_empty() {
            TICK
        } else {
            Duration::ZERO
        };
        poll.poll(&mut events, Some(timeout))?;
        for ev in events.iter() {
            let i = ev.token().0;
            if ev.is_writable() && !is_ready[i] {
                is_ready[i] = true;
                ready.push_back(i);
            }
        }
        for _ in 0..ready.len() {
            let Some(i) = ready.pop_front() else { break };
            match conns[i].write(&buf) {
                Ok(n) => {
                    st.add(shared.phase_at(Instant::now()), n);
                    ready.push_back(i);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => is_ready[i] = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => ready.push_back(i),
                Err(e) => {
                    let ph = shared.phase_at(Instant::now());
                    if matches!(ph, Phase::Cooldown | Phase::Post) {
                        // The receiver stops at its own end of the cool-down.
                        return Ok(());
                    }
                    bail!("send to {}: {e} (during {ph:?})", plan.addr);
                }
            }
        }
    }
}

/// Busy computation for `d` (the "application work" of the overlap test).
pub fn compute_for(d: Duration) -> Duration {
    let s = Instant::now();
    let mut x: u64 = 1;
    while s.elapsed() < d {
        for _ in 0..64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
    std::hint::black_box(x);
    s.elapsed()
}

/// Latency and overlap modes on one connection: send a message, (compute,) wait
/// for the echo; iterations sent in the measured window are recorded.
fn ping_pong(
    plan: &Plan,
    shared: &Shared,
    poll: &mut Poll,
    s: &mut TcpStream,
    end: Instant,
    st: &mut ThreadStats,
) -> Result<()> {
    let m = plan.params.msg_size;
    let msg = vec![0x11u8; m];
    let mut rbuf = vec![0u8; m];
    let compute = Duration::from_micros(plan.overlap_us);
    let overlap = plan.params.mode == Mode::Overlap;
    let mut hist = rtt_histogram();
    let mut events = Events::with_capacity(16);
    let out_of_time = |shared: &Shared| Instant::now() >= end || shared.stopping();
    'outer: loop {
        if out_of_time(shared) {
            break;
        }
        let t_send = Instant::now();
        let phase = shared.phase_at(t_send);
        // Send (partial writes wait for WRITABLE).
        let mut sent = 0;
        let mut got = 0;
        let mut compute_ns = 0;
        let mut done_at_compute_end = false;
        let mut t_after_compute = t_send;
        loop {
            if sent < m {
                match s.write(&msg[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        if matches!(phase, Phase::Cooldown | Phase::Post) {
                            break 'outer;
                        }
                        bail!("send to {}: {e}", plan.addr);
                    }
                }
            }
            if overlap && compute_ns == 0 && sent == m {
                compute_ns = compute_for(compute).as_nanos() as u64;
                t_after_compute = Instant::now();
                // Progress check: how much of the reply arrived while computing.
                got += read_some(s, &mut rbuf[got..])?;
                done_at_compute_end = got == m;
            }
            if sent == m {
                got += read_some(s, &mut rbuf[got..])?;
                if got == m {
                    break;
                }
            }
            if out_of_time(shared) {
                break 'outer;
            }
            poll.poll(&mut events, Some(TICK))?;
        }
        let t_done = Instant::now();
        st.add(phase, 2 * m);
        if phase == Phase::Measured {
            let rtt = (t_done - t_send).as_nanos() as u64;
            hist.record(rtt.max(1))
                .map_err(|e| anyhow!("histogram: {e:?}"))?;
            if overlap {
                let o = &mut st.overlap;
                o.iterations += 1;
                o.compute_ns += compute_ns;
                o.total_ns += rtt;
                o.wait_ns += (t_done - t_after_compute).as_nanos() as u64;
                o.reply_done_at_compute_end += u64::from(done_at_compute_end);
            }
        }
    }
    st.rtt_ns = Some(hist);
    Ok(())
}

/// Reads what is there without blocking; 0 when nothing is.
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => bail!("the receiver closed the connection"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => bail!("receive echo: {e}"),
        }
    }
    Ok(got)
}
