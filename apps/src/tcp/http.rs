//! `http-server`: a fixed-response HTTP/1.1 server with keep-alive.
//!
//! Connection persistence follows RFC 9112 §9.3: an HTTP/1.1 request keeps
//! the connection open unless it carries the `close` connection option; an
//! HTTP/1.0 request closes it unless it carries `keep-alive`. Per RFC 9112
//! §9.6, a response after which the server closes says `Connection: close`
//! (clients such as wrk count a close without it as a read error), and an
//! HTTP/1.0 request that asked for keep-alive is answered with
//! `Connection: keep-alive` (RFC 9112 §C.2.2) so that the client knows it
//! was granted. After its last response (a refusal's too) the server
//! half-closes and lingers (§9.6): it drops what the peer still sends until
//! the peer's FIN, [`LINGER`] at most (up to a second more: it is looked for
//! once a second), and closes then, so that no reset for unread bytes
//! destroys that response.
//!
//! At the service's stop (`ConnHandler::on_stop`) a connection ends as
//! [`super::http_stop`] says, hyper-server's alike: at once between
//! requests (a FIN), after the response under way otherwise (saying
//! `Connection: close` if it is still to be made, RFC 9112 §9.6), after
//! its first request's if none came yet. The stop waits for those, for
//! its drain; what is still open after it is reset.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane_app::conn_state::{export_entry, import_entry};
use flowlane_app::{
    AtStop, CloseReason, ConnHandle, ConnHandler, ConnMap, ConnState, Net, SynFilter,
};
use serde::Serialize;

use super::http_framing::{parse_head, BodySkip, Head, HeadScan, Persistence, Refusal, MAX_HEAD};
use super::http_stop;
use super::idle::{IdleSweep, SWEEP};
use super::AllowFrom;

/// Responses queued on a connection before its requests are read further:
/// a peer that sends requests and reads no response holds at most this
/// much here (then its requests wait in the stack, whose window closes).
const OUTPUT_BATCH: usize = 64 * 1024;

/// Bytes read from the connection at a time.
const READ: usize = 4096;

/// How long a connection the server is closing reads what its peer still
/// sends before it is closed anyway (RFC 9112 §9.6's lingering close;
/// ends up to a second later: it is looked for once a second).
const LINGER: Duration = Duration::from_secs(2);

/// The capacity a connection's input or output keeps once what it holds
/// fits: past it, what a burst grew (a pipelined batch, a long head) is
/// given back, and an idle kept-alive connection holds little.
const KEEP: usize = 8 * 1024;

/// How long before its idle deadline a connection's unacknowledged bytes
/// are looked at (`Net::info`), at each of the idle sweep's looks (a
/// second apart): two looks, so that queue-pair mode, where a look gets
/// the figures the network core gave for the previous one, has two
/// figures to compare by the deadline.
const ACK_LOOK: Duration = Duration::from_secs(2 * SWEEP.as_secs());

/// Bytes of body that extend a request's deadline by a second (Apache's
/// `mod_reqtimeout` `MinRate` alike): a body must come at least this fast,
/// on average, once the `--idle-timeout` it starts with is spent.
const BODY_RATE: u64 = 500;

/// What the HTTP server refused or timed out, over all its cores (the
/// service's summary: `application`).
#[derive(Debug, Default, Serialize)]
pub(super) struct HttpCounters {
    /// Requests answered (`100 Continue` not counted).
    pub(super) requests: AtomicU64,
    /// Requests answered `400 Bad Request` (a request line or body framing
    /// that cannot be read), the connection then closed.
    pub(super) bad_request: AtomicU64,
    /// Heads longer than 16 KiB, answered `431`, the connection then closed.
    pub(super) head_too_large: AtomicU64,
    /// Request lines longer than 16 KiB, answered `414` (RFC 9112 §3), the
    /// connection then closed.
    pub(super) uri_too_long: AtomicU64,
    /// `CONNECT` requests, answered `501` (RFC 9110 §9.3.6, §9.1: no tunnel
    /// here), the connection then closed.
    pub(super) not_implemented: AtomicU64,
    /// Connections closed after `--idle-timeout` without a byte either way:
    /// between requests (a FIN), or in the middle of one (a reset).
    pub(super) idle_closed: AtomicU64,
    /// Of those, the ones in the middle of a request.
    pub(super) idle_reset: AtomicU64,
    /// Connections reset, bytes still coming, because a request was not
    /// complete (head and body) within `--idle-timeout` of its first byte,
    /// plus a second per 500 bytes of its body (slowloris, R-U-Dead-Yet).
    pub(super) request_timeout: AtomicU64,
    /// Connections closed after their last response because the peer had
    /// not closed within the linger (RFC 9112 §9.6: 2 to 3 s).
    pub(super) linger_expired: AtomicU64,
}

/// The responses, one per [`Persistence`], built once; a `HEAD` request's
/// is the same without its body.
struct Responses {
    keep_alive: Vec<u8>,
    keep_alive_http10: Vec<u8>,
    close: Vec<u8>,
    body_len: usize,
}

impl Responses {
    fn new(body: &str) -> Responses {
        let build = |connection: &str| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: flowlane\r\n{connection}\r\n{body}",
                body.len(),
            )
            .into_bytes()
        };
        Responses {
            keep_alive: build(""),
            keep_alive_http10: build("Connection: keep-alive\r\n"),
            close: build("Connection: close\r\n"),
            body_len: body.len(),
        }
    }

    fn for_request(&self, p: Persistence, head_only: bool) -> &[u8] {
        let full = match p {
            Persistence::KeepAlive => &self.keep_alive,
            Persistence::KeepAliveHttp10 => &self.keep_alive_http10,
            Persistence::Close => &self.close,
        };
        if head_only {
            &full[..full.len() - self.body_len]
        } else {
            full
        }
    }
}

/// Gives back the capacity of `v` past [`KEEP`] once what it holds fits
/// in [`KEEP`] (all of it once it is empty).
fn give_back(v: &mut Vec<u8>) {
    if v.capacity() > KEEP && v.len() <= KEEP {
        v.shrink_to_fit();
    }
}

/// An error response, after which the connection closes.
fn refusal_response(r: Refusal) -> &'static [u8] {
    match r {
        Refusal::BadRequest => {
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nServer: flowlane\r\nConnection: close\r\n\r\n"
        }
        Refusal::HeadTooLarge => {
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nServer: flowlane\r\nConnection: close\r\n\r\n"
        }
        Refusal::UriTooLong => {
            b"HTTP/1.1 414 URI Too Long\r\nContent-Length: 0\r\nServer: flowlane\r\nConnection: close\r\n\r\n"
        }
        Refusal::NotImplemented => {
            b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nServer: flowlane\r\nConnection: close\r\n\r\n"
        }
    }
}

/// The answer owed to a request whose body is being skipped.
#[derive(Debug, Clone, Copy)]
struct Owed {
    persistence: Persistence,
    head_only: bool,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    /// Requests are read and answered.
    #[default]
    Open,
    /// The last response went, with the server's FIN after it, at the time
    /// held; what the peer still sends is read and dropped until its FIN
    /// (or [`LINGER`]), then the connection is closed. RFC 9112 §9.6: a
    /// close with unread bytes would be a reset, and a reset can destroy
    /// the response before the peer reads it (a 431 almost always: the
    /// rest of the head it answers is unread).
    Lingering(Duration),
    /// Closed: only `on_closed` is to come.
    Closed,
}

/// One connection's state.
#[derive(Default)]
struct HttpConn {
    /// Received bytes not yet taken by a request (from `pos` on).
    input: Vec<u8>,
    pos: usize,
    /// Responses not yet taken by the send buffer.
    output: Vec<u8>,
    /// The body being skipped, and the answer owed once it ends.
    body: Option<(BodySkip, Owed)>,
    /// Close once `output` went.
    close_after: bool,
    /// When a byte last moved either way (taken by `Net::send` or
    /// `Net::recv`, or acknowledged by the peer: [`HttpConn::acknowledged`]).
    active: Duration,
    /// At the idle sweep's last look near the deadline: the bytes sent
    /// that the peer had not acknowledged yet, and `active` then.
    unacked: Option<(Duration, usize)>,
    /// When the first bytes of the request being read came (none between
    /// requests): a request must be complete within the idle timeout of
    /// its start, extended by a second per [`BODY_RATE`] bytes of its body,
    /// however its bytes trickle in (slowloris in the head, R-U-Dead-Yet
    /// in the body: a byte a minute would otherwise hold the connection
    /// for good; nginx's `client_header_timeout`, Apache's
    /// `mod_reqtimeout` alike).
    request_began: Option<Duration>,
    /// Bytes of the current request's body taken so far.
    body_read: u64,
    /// Where the search for the end of the head that `input[pos..]`
    /// starts with stands.
    scan: HeadScan,
    phase: Phase,
    /// The service is stopping: the next response is the last (it says
    /// `Connection: close`), and the connection closes once nothing is
    /// owed either way.
    stopping: bool,
    /// No byte has come yet: a connection just accepted is not idle at a
    /// stop but about to send its first request, which is answered
    /// ([`super::http_stop`]).
    fresh: bool,
}

/// What answering the requests held came to.
enum Step {
    /// More input is needed.
    Read,
    /// `OUTPUT_BATCH` is reached: send first.
    Send,
    /// The connection closes once `output` went.
    Close,
}

impl HttpConn {
    /// A connection accepted at `now`, nothing come yet.
    fn new(now: Duration) -> HttpConn {
        HttpConn {
            active: now,
            fresh: true,
            ..HttpConn::default()
        }
    }

    /// Answers the requests the input holds while the output has room.
    /// `peer_done`: the peer closed and everything it sent was read (the
    /// last request's response then says `Connection: close`).
    fn answer(&mut self, r: &Responses, peer_done: bool, counters: &HttpCounters) -> Step {
        loop {
            if self.close_after {
                return Step::Close;
            }
            if self.output.len() >= OUTPUT_BATCH {
                return Step::Send;
            }
            let rest = &self.input[self.pos..];
            if let Some((skip, owed)) = &mut self.body {
                match skip.skip(rest) {
                    Ok((n, false)) => {
                        self.pos += n;
                        self.body_read += n as u64;
                        return Step::Read;
                    }
                    Ok((n, true)) => {
                        let owed = *owed;
                        self.pos += n;
                        self.scan = HeadScan::default();
                        self.body = None;
                        self.respond(r, owed, peer_done, counters);
                    }
                    Err(e) => self.refuse(e, counters),
                }
                continue;
            }
            match self.scan.parse(rest) {
                Ok(None) => return Step::Read,
                Ok(Some((head, n))) => {
                    self.pos += n;
                    self.take(r, head, peer_done, counters);
                }
                Err(e) => self.refuse(e, counters),
            }
        }
    }

    /// A request's head was read: its response now, or once its body went.
    fn take(&mut self, r: &Responses, head: Head, peer_done: bool, counters: &HttpCounters) {
        let owed = Owed {
            persistence: head.persistence,
            head_only: head.head_only,
        };
        match BodySkip::new(head.body) {
            None => self.respond(r, owed, peer_done, counters),
            Some(skip) => {
                if head.expect_continue {
                    self.output
                        .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                self.body = Some((skip, owed));
            }
        }
    }

    fn respond(&mut self, r: &Responses, owed: Owed, peer_done: bool, counters: &HttpCounters) {
        let mut p = owed.persistence;
        // The peer has finished sending and no other request follows: this
        // response is the last on the connection (RFC 9112 §9.6). One that
        // cannot be read follows still: it is refused next (400).
        if peer_done && matches!(parse_head(&self.input[self.pos..]), Ok(None)) {
            p = Persistence::Close;
        }
        // The service is stopping: this response is the last.
        if self.stopping {
            p = Persistence::Close;
        }
        self.request_began = None;
        self.body_read = 0;
        self.close_after = p == Persistence::Close;
        self.output
            .extend_from_slice(r.for_request(p, owed.head_only));
        counters.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn refuse(&mut self, e: Refusal, counters: &HttpCounters) {
        let c = match e {
            Refusal::BadRequest => &counters.bad_request,
            Refusal::HeadTooLarge => &counters.head_too_large,
            Refusal::UriTooLong => &counters.uri_too_long,
            Refusal::NotImplemented => &counters.not_implemented,
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.output.extend_from_slice(refusal_response(e));
        self.body = None;
        self.close_after = true;
    }

    /// Nothing owed either way: between requests.
    fn between_requests(&self) -> bool {
        self.output.is_empty() && self.body.is_none() && self.pos == self.input.len()
    }

    /// The last response is in the send buffer: the server's FIN after
    /// it, then lingering (RFC 9112 §9.6: half close first, read on
    /// until the peer closes). Nothing more is kept of the connection.
    fn start_linger(&mut self, net: &mut dyn Net, conn: ConnHandle, now: Duration) {
        self.input = Vec::new();
        self.output = Vec::new();
        self.pos = 0;
        self.body = None;
        self.scan = HeadScan::default();
        if net.shutdown_write(conn).is_err() {
            // Gone already.
            self.phase = Phase::Closed;
            return;
        }
        self.phase = Phase::Lingering(now);
        self.linger(net, conn);
    }

    /// Lingering: drops what the peer sent; closes once it closed and
    /// everything was read (a close then resets nothing).
    fn linger(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.discard(conn);
        if net.is_eof(conn) {
            let _ = net.close(conn);
            self.phase = Phase::Closed;
        }
    }

    /// Notes that bytes moved (`active` is `now`) if the peer acknowledged
    /// bytes of its responses since the sweep's last look with no byte
    /// moved otherwise (fewer of the bytes the backend holds for it are
    /// unsent or unacknowledged: `Net::info`, which on kernel sockets
    /// counts the kernel's queue too): a peer that reads its responses,
    /// though too slowly for `Net::send` to take more of them within the
    /// timeout (a stack wakes a writer once a third of its send buffer is
    /// free, which a slow reader may take longer than that to free), is not
    /// idle. Keeps the figure for the next look.
    fn acknowledged(&mut self, net: &dyn Net, conn: ConnHandle, now: Duration) {
        let Ok(info) = net.info(conn) else {
            return;
        };
        let left = info.unsent + info.unacked;
        if matches!(self.unacked, Some((at, before)) if at == self.active && left < before) {
            self.active = now;
        }
        self.unacked = Some((self.active, left));
    }

    /// The time the idle sweep counts from: the last byte either way, or
    /// the start of the request being read (plus its body's credit) if
    /// earlier; none after the last response (the linger's own deadline
    /// bounds a closing connection).
    fn idle_since(&self) -> Duration {
        match self.phase {
            Phase::Open => self
                .request_since()
                .map_or(self.active, |t| t.min(self.active)),
            Phase::Lingering(_) | Phase::Closed => Duration::MAX,
        }
    }

    /// The time a request's deadline counts from: its first byte, plus a
    /// second per [`BODY_RATE`] bytes of its body.
    fn request_since(&self) -> Option<Duration> {
        let credit = Duration::from_millis(self.body_read.saturating_mul(1000) / BODY_RATE);
        self.request_began.map(|t| t.saturating_add(credit))
    }

    /// Drops the input taken already, and gives back the capacity past
    /// [`KEEP`] of a buffer whose contents fit in it: what a burst grew is
    /// not held for the connection's life.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.input.drain(..self.pos);
            self.pos = 0;
        }
        give_back(&mut self.input);
        give_back(&mut self.output);
    }

    /// The time the linger sweep counts from: lingering connections only.
    fn lingering_since(&self) -> Duration {
        match self.phase {
            Phase::Lingering(since) => since,
            Phase::Open | Phase::Closed => Duration::MAX,
        }
    }
}

/// A fixed-response HTTP/1.1 server with keep-alive.
pub(super) struct Http {
    responses: Responses,
    conns: ConnMap<HttpConn>,
    allow: AllowFrom,
    idle: IdleSweep,
    /// Finds the connections that lingered [`LINGER`].
    linger: IdleSweep,
    counters: Arc<HttpCounters>,
}

impl Http {
    /// A handler answering every request with `200 OK` and `body`, to
    /// the peers `allow` names; closing connections idle for
    /// `idle_timeout`; counting into `counters` (shared by the cores).
    pub(super) fn new(
        body: &str,
        allow: AllowFrom,
        idle_timeout: Option<Duration>,
        counters: Arc<HttpCounters>,
    ) -> Http {
        Http {
            responses: Responses::new(body),
            conns: ConnMap::new(),
            allow,
            idle: IdleSweep::new(idle_timeout),
            linger: IdleSweep::new(Some(LINGER)),
            counters,
        }
    }

    /// Answers what `conn` asked, as far as its send buffer takes it; reads
    /// its requests only while fewer than `OUTPUT_BATCH` bytes of responses
    /// wait (a peer that does not read its responses is held by its own
    /// window, not by this server's memory).
    fn drive(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let now = net.now();
        let st = self.conns.get_or_insert_with(conn, || HttpConn::new(now));
        match st.phase {
            Phase::Open => {}
            Phase::Lingering(_) => return st.linger(net, conn),
            Phase::Closed => return,
        }
        let mut buf = [0u8; READ];
        loop {
            // Consumed input goes once all of it was, or a read's worth
            // (one move per read, not per request, when requests come
            // pipelined).
            if st.pos > 0 && (st.pos == st.input.len() || st.pos >= READ) {
                st.input.drain(..st.pos);
                st.pos = 0;
            }
            let step = st.answer(&self.responses, net.is_eof(conn), &self.counters);
            if !st.output.is_empty() {
                match net.send(conn, &st.output) {
                    Ok(n) => {
                        st.output.drain(..n);
                        st.active = now;
                    }
                    Err(flowlane_app::Error::WouldBlock) => {}
                    Err(_) => return,
                }
            }
            if !st.output.is_empty() {
                // `on_writable` follows (`Net::send`'s contract).
                st.compact();
                return;
            }
            match step {
                Step::Close => {
                    st.start_linger(net, conn, now);
                    return;
                }
                Step::Send => {}
                Step::Read => {
                    // A head is bounded by `parse_head`; read no further
                    // than one past it.
                    let room = (MAX_HEAD + 1 + st.pos)
                        .saturating_sub(st.input.len())
                        .clamp(1, READ);
                    match net.recv(conn, &mut buf[..room]) {
                        Ok(0) => {
                            // The peer closed with a request unfinished:
                            // nothing can complete it.
                            st.close_after = true;
                        }
                        Ok(n) => {
                            st.input.extend_from_slice(&buf[..n]);
                            st.fresh = false;
                            st.active = now;
                            st.request_began.get_or_insert(now);
                        }
                        Err(_)
                            if st.stopping
                                && st.between_requests()
                                && http_stop::closes_between_requests(st.fresh) =>
                        {
                            // Stopping, and nothing owed either way (the
                            // response under way at the stop went): the
                            // end of the stream, a FIN.
                            let _ = net.close(conn);
                            st.phase = Phase::Closed;
                            return;
                        }
                        Err(_) => {
                            // Nothing more to read for now: memory past
                            // what the connection holds goes back (not on
                            // every pass, where a pipelined burst would
                            // free and grow its buffers again each time).
                            st.compact();
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Closes the connections idle for longer than the timeout (bytes the
    /// peer acknowledged count as moved: [`HttpConn::acknowledged`], looked
    /// at from [`ACK_LOOK`] before the deadline on): with a
    /// FIN between requests, with a reset in the middle of one; resets
    /// those whose request is overdue though bytes still come; and closes
    /// those that lingered [`LINGER`] after their last response, dropping
    /// what their peer sent (a reset follows only if it sends more).
    fn sweep(&mut self, net: &mut dyn Net) {
        let now = net.now();
        for conn in self.linger.due(now, &self.conns, HttpConn::lingering_since) {
            self.counters.linger_expired.fetch_add(1, Ordering::Relaxed);
            net.discard(conn);
            let _ = net.close(conn);
            if let Some(st) = self.conns.get_mut(conn) {
                st.phase = Phase::Closed;
            }
        }
        let limit = self.idle.limit().unwrap_or(Duration::MAX);
        let near = self
            .idle
            .due_within(now, &self.conns, HttpConn::idle_since, ACK_LOOK);
        for conn in near {
            let Some(st) = self.conns.get_mut(conn) else {
                continue;
            };
            st.acknowledged(net, conn, now);
            if now.saturating_sub(st.idle_since()) <= limit {
                continue;
            }
            let Some(st) = self.conns.remove(conn) else {
                continue;
            };
            if now.saturating_sub(st.active) <= limit {
                // Bytes came within the timeout, but the request they
                // belong to is overdue.
                self.counters
                    .request_timeout
                    .fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(conn);
                continue;
            }
            self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            if st.between_requests() {
                let _ = net.close(conn);
            } else {
                self.counters.idle_reset.fetch_add(1, Ordering::Relaxed);
                let _ = net.abort(conn);
            }
        }
    }
}

impl ConnHandler for Http {
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        self.allow.filter()
    }
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
        self.conns.insert(conn, HttpConn::new(net.now()));
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.drive(net, conn);
    }
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        export_entry(&mut self.conns, conn)
    }
    fn on_import(&mut self, _net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        import_entry(&mut self.conns, conn, state);
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: CloseReason) {
        self.conns.remove(conn);
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        self.sweep(net);
    }
    /// Closes the connection once nothing is owed either way: at once
    /// between requests, after the response under way otherwise (module
    /// docs); one already closing finishes as it was.
    fn on_stop(&mut self, net: &mut dyn Net, conn: ConnHandle) -> AtStop {
        if let Some(st) = self.conns.get_mut(conn) {
            st.stopping = true;
        }
        self.drive(net, conn);
        AtStop::Finish
    }
}

#[cfg(test)]
mod tests {
    //! The server against one fake connection (`OneConn`): what the peer
    //! sent is readable, sends go to `sent` (as far as `send_room` takes
    //! them).
    use super::*;
    use flowlane_app::testing::OneConn;

    /// A connection at 1 s with nothing read or sent.
    fn fake() -> OneConn {
        OneConn {
            now: Duration::from_secs(1),
            ..OneConn::default()
        }
    }

    fn c() -> ConnHandle {
        ConnHandle::from_parts(0, 0)
    }

    fn server(idle: Option<Duration>) -> (Http, Arc<HttpCounters>) {
        let counters = Arc::new(HttpCounters::default());
        let allow = AllowFrom::default();
        (Http::new("hi", allow, idle, counters.clone()), counters)
    }

    fn answered(counters: &HttpCounters) -> u64 {
        counters.requests.load(Ordering::Relaxed)
    }

    #[test]
    fn responses_say_connection_only_when_needed_and_head_has_no_body() {
        let r = Responses::new("hi");
        let text = |p, head| String::from_utf8(r.for_request(p, head).to_vec()).unwrap();
        let ka = text(Persistence::KeepAlive, false);
        assert!(!ka.to_ascii_lowercase().contains("connection:"), "{ka}");
        assert!(ka.ends_with("Server: flowlane\r\n\r\nhi"), "{ka}");
        let close = text(Persistence::Close, false);
        assert!(close.contains("\r\nConnection: close\r\n\r\nhi"), "{close}");
        let ka10 = text(Persistence::KeepAliveHttp10, false);
        assert!(
            ka10.contains("\r\nConnection: keep-alive\r\n\r\nhi"),
            "{ka10}"
        );
        for t in [ka, close, ka10] {
            assert!(t.starts_with("HTTP/1.1 200 OK\r\n"));
            assert!(t.contains("\r\nContent-Length: 2\r\n"));
        }
        let head = text(Persistence::KeepAlive, true);
        assert!(head.ends_with("Server: flowlane\r\n\r\n"), "{head}");
        assert!(head.contains("\r\nContent-Length: 2\r\n"));
    }

    #[test]
    fn a_peer_that_reads_no_response_holds_a_bounded_output_and_its_requests_wait() {
        // Requests (empty heads are no requests) pipelined without end; no
        // response is ever read.
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.send_room = Some(0);
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\r\n\r\n".repeat(40_000);
        let total = net.inbox.len();
        for _ in 0..100 {
            h.on_data(&mut net, c());
        }
        let st = h.conns.get(c()).unwrap();
        let held = st.output.len() + st.input.len();
        assert!(held < 2 * OUTPUT_BATCH, "{held} bytes held");
        assert!(net.inbox.len() > total / 2, "the rest waits in the stack");
        let before = answered(&counters);
        // The peer reads: everything is answered, in batches.
        net.send_room = None;
        for _ in 0..1000 {
            h.on_writable(&mut net, c());
            if net.inbox.is_empty() {
                break;
            }
        }
        assert!(net.inbox.is_empty());
        assert!(answered(&counters) > before);
        assert_eq!(answered(&counters), 40_000);
        assert_eq!(net.sent_text().matches("HTTP/1.1 200 OK").count(), 40_000);
    }

    #[test]
    fn head_chunked_and_sized_bodies_and_100_continue_are_framed() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        let body = vec![b'x'; 20_000];
        let mut req = Vec::new();
        req.extend_from_slice(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n");
        req.extend_from_slice(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        req.extend_from_slice(b"5\r\nhello\r\n0\r\n\r\n");
        req.extend_from_slice(
            b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n",
        );
        req.extend_from_slice(&body);
        req.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        // In pieces, as a network delivers them.
        for piece in req.chunks(1000) {
            net.inbox.extend_from_slice(piece);
            h.on_data(&mut net, c());
        }
        let text = net.sent_text();
        let full = "Content-Length: 2\r\nServer: flowlane\r\n\r\nhi";
        let expected = [
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nServer: flowlane\r\n\r\n",
            "HTTP/1.1 200 OK",
            full,
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 200 OK",
            full,
            "HTTP/1.1 200 OK",
            full,
        ];
        let mut at = 0;
        for e in expected {
            let i = text[at..]
                .find(e)
                .unwrap_or_else(|| panic!("{e:?} after {at} in {text:?}"));
            at += i + e.len();
        }
        assert_eq!(at, text.len(), "{text:?}");
        assert!(
            !text.starts_with(&format!("{}hi", expected[0])),
            "HEAD without body"
        );
        assert_eq!(answered(&counters), 4);
        assert!(!net.closed() && !net.reset);
    }

    #[test]
    fn unreadable_requests_are_answered_400_or_431_and_closed() {
        for (req, want, too_large) in [
            (b"GET /\r\n\r\n".to_vec(), "HTTP/1.1 400 Bad Request", false),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n".to_vec(),
                "HTTP/1.1 400",
                false,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
                "HTTP/1.1 400",
                false,
            ),
            (
                [
                    &b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..],
                    &vec![b'a'; MAX_HEAD],
                ]
                .concat(),
                "HTTP/1.1 431",
                true,
            ),
        ] {
            let (mut h, counters) = server(None);
            let mut net = fake();
            net.inbox = req;
            h.on_data(&mut net, c());
            assert!(net.sent_text().starts_with(want), "{}", net.sent_text());
            assert!(
                net.did("shutdown") && !net.closed(),
                "a FIN after the answer"
            );
            net.peer_fin = true;
            h.on_peer_closed(&mut net, c());
            assert!(net.closed() && !net.reset, "closed once the peer did");
            let (bad, large) = (
                counters.bad_request.load(Ordering::Relaxed),
                counters.head_too_large.load(Ordering::Relaxed),
            );
            assert_eq!((bad, large), if too_large { (0, 1) } else { (1, 0) });
        }
    }

    #[test]
    fn a_partial_send_finishes_at_on_writable() {
        let (mut h, _) = server(None);
        let mut net = fake();
        net.send_room = Some(10);
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        assert_eq!(net.sent.len(), 10);
        net.send_room = None;
        h.on_writable(&mut net, c());
        let text = net.sent_text();
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
        assert!(text.ends_with("Connection: close\r\n\r\nhi"));
        assert!(net.did("shutdown"));
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        assert!(net.closed() && !net.reset);
    }

    /// At the stop a connection between requests is closed at once (a
    /// FIN); one whose response is under way is closed once it went; a
    /// request still coming is answered `Connection: close`, then the
    /// connection closes.
    #[test]
    fn a_stop_closes_idle_connections_and_finishes_responses_under_way() {
        // Between requests.
        let (mut h, _) = server(None);
        let mut net = fake();
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        h.on_accept(&mut net, c());
        h.on_data(&mut net, c());
        assert!(!net.did("close"));
        assert_eq!(h.on_stop(&mut net, c()), AtStop::Finish);
        assert!(net.closed(), "{:?}", net.calls);
        // A response under way: the rest goes, then the close.
        let (mut h, _) = server(None);
        let mut net = fake();
        net.send_room = Some(10);
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        h.on_accept(&mut net, c());
        h.on_data(&mut net, c());
        assert_eq!(h.on_stop(&mut net, c()), AtStop::Finish);
        assert!(!net.did("close"), "closed with the response unsent");
        net.send_room = None;
        h.on_writable(&mut net, c());
        assert!(
            net.sent_text().ends_with("\r\n\r\nhi"),
            "{}",
            net.sent_text()
        );
        assert!(net.closed(), "{:?}", net.calls);
        // A request coming in part: answered as the last one.
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = b"GET / HTTP/1.1\r\n".to_vec();
        h.on_accept(&mut net, c());
        h.on_data(&mut net, c());
        assert_eq!(h.on_stop(&mut net, c()), AtStop::Finish);
        assert!(!net.did("close") && !net.did("shutdown"));
        net.inbox.extend_from_slice(b"Host: a\r\n\r\n");
        h.on_data(&mut net, c());
        assert_eq!(answered(&counters), 1);
        assert!(net.sent_text().contains("Connection: close\r\n"));
        assert!(net.did("shutdown"), "{:?}", net.calls);
    }

    /// A connection accepted as the stop began, its request not come yet,
    /// is not idle: closed then, its client read the FIN as an empty reply
    /// to the request it sent a moment later (the rolling-restart run,
    /// kernel backend, within 20 ms of the stop). It is answered, as the
    /// last response, then closed.
    #[test]
    fn a_connection_whose_first_request_has_not_come_is_answered_after_a_stop() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        h.on_accept(&mut net, c());
        h.on_data(&mut net, c());
        assert_eq!(h.on_stop(&mut net, c()), AtStop::Finish);
        assert!(
            !net.did("close"),
            "closed before its request: {:?}",
            net.calls
        );
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        assert_eq!(answered(&counters), 1);
        assert!(net.sent_text().contains("Connection: close\r\n"));
        assert!(net.did("shutdown"), "{:?}", net.calls);
    }

    #[test]
    fn the_peer_s_fin_makes_the_last_response_say_close() {
        let (mut h, _) = server(None);
        let mut net = fake();
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        assert!(net.sent_text().contains("Connection: close\r\n"));
        assert!(net.closed());
        // A request cut short by the FIN: closed, nothing answered.
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = b"GET / HTT".to_vec();
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        assert!(net.sent.is_empty() && net.closed());
        assert_eq!(answered(&counters), 0);
    }

    #[test]
    fn idle_connections_are_closed_and_counted() {
        let idle = Duration::from_secs(60);
        // Between requests: a FIN.
        let (mut h, counters) = server(Some(idle));
        let mut net = fake();
        h.on_accept(&mut net, c());
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        net.now += Duration::from_secs(59);
        h.on_tick(&mut net);
        assert!(!net.closed());
        net.now += Duration::from_secs(2);
        h.on_tick(&mut net);
        assert!(net.closed() && !net.reset);
        // In the middle of a request (a slow client's head): a reset.
        let (mut h, counters2) = server(Some(idle));
        let mut net = fake();
        h.on_accept(&mut net, c());
        net.inbox = b"GET / HTTP/1.1\r\nHost:".to_vec();
        h.on_data(&mut net, c());
        net.now += Duration::from_secs(61);
        h.on_tick(&mut net);
        assert!(net.reset);
        let load = |c: &HttpCounters| {
            (
                c.idle_closed.load(Ordering::Relaxed),
                c.idle_reset.load(Ordering::Relaxed),
            )
        };
        assert_eq!((load(&counters), load(&counters2)), ((1, 0), (1, 1)));
        // A head trickling in, a byte every 30 s: reset once its start is
        // older than the timeout, though a byte came 30 s ago.
        let (mut h, counters3) = server(Some(idle));
        let mut net = fake();
        h.on_accept(&mut net, c());
        for &b in b"GET / HTTP/1.1\r\nHost: a\r\nX: " {
            net.inbox = vec![b];
            h.on_data(&mut net, c());
            h.on_tick(&mut net);
            if net.reset {
                break;
            }
            net.now += Duration::from_secs(30);
        }
        assert!(net.reset, "a head may not take longer than the timeout");
        assert!(net.now <= Duration::from_secs(100), "{:?}", net.now);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(
            (
                load(&counters3.request_timeout),
                load(&counters3.idle_closed)
            ),
            (1, 0),
            "bytes came: overdue, not idle"
        );
        // No timeout: never.
        let (mut h, _) = server(None);
        let mut net = fake();
        h.on_accept(&mut net, c());
        net.now += Duration::from_secs(3600);
        h.on_tick(&mut net);
        assert!(!net.closed() && !net.reset);
    }

    #[test]
    fn a_peer_sending_empty_lines_forever_is_refused_431() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = b"\r\n".repeat(12_000);
        h.on_data(&mut net, c());
        let st = h.conns.get(c()).unwrap();
        assert!(
            st.input.len() <= MAX_HEAD + 1,
            "{} bytes held",
            st.input.len()
        );
        assert!(
            net.sent_text().starts_with("HTTP/1.1 431"),
            "{}",
            net.sent_text()
        );
        assert_eq!(counters.head_too_large.load(Ordering::Relaxed), 1);
        assert!(net.did("shutdown") && !net.reset);
    }

    #[test]
    fn a_refusal_lingers_so_that_no_reset_destroys_it() {
        // A 20,000-byte head: the server reads MAX_HEAD + 1 bytes of it,
        // answers 431, and must not close with the rest unread (a reset).
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = [
            &b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..],
            &vec![b'a'; 20_000],
            b"\r\n\r\n",
        ]
        .concat();
        h.on_data(&mut net, c());
        assert!(
            net.sent_text().starts_with("HTTP/1.1 431"),
            "{}",
            net.sent_text()
        );
        assert!(net.did("shutdown") && !net.closed() && !net.reset);
        assert_eq!(counters.head_too_large.load(Ordering::Relaxed), 1);
        // What the peer still sends is dropped, nothing answered.
        let sent = net.sent.len();
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        assert!(net.inbox.is_empty() && !net.closed() && !net.reset);
        assert_eq!(net.sent.len(), sent);
        assert_eq!(answered(&counters), 0);
        // The peer's FIN: closed, without a reset.
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        assert!(net.closed() && !net.reset);
    }

    #[test]
    fn a_linger_ends_after_two_seconds_and_is_not_idle() {
        let (mut h, counters) = server(Some(Duration::from_secs(1)));
        let mut net = fake();
        h.on_accept(&mut net, c());
        net.inbox = b"GET /\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        assert!(net.did("shutdown") && !net.closed());
        assert_eq!(counters.bad_request.load(Ordering::Relaxed), 1);
        net.now += Duration::from_millis(1500);
        h.on_tick(&mut net);
        assert!(!net.closed() && !net.reset, "still lingering");
        // Bytes come, but no FIN: closed at the deadline, what came dropped
        // first (no reset for it).
        net.inbox = b"more".to_vec();
        net.now += Duration::from_millis(1500);
        h.on_tick(&mut net);
        assert!(net.closed() && !net.reset);
        assert!(net.inbox.is_empty());
        assert_eq!(counters.idle_closed.load(Ordering::Relaxed), 0);
        assert_eq!(counters.linger_expired.load(Ordering::Relaxed), 1);
        // Nothing more is done for it.
        net.now += Duration::from_secs(10);
        h.on_tick(&mut net);
        h.on_data(&mut net, c());
        assert_eq!(counters.idle_closed.load(Ordering::Relaxed), 0);
        assert!(!net.reset);
    }

    /// R-U-Dead-Yet: a head, then its body a byte every 30 s (a large
    /// `Content-Length`, or a chunk size of zeros without end): reset
    /// once the request is older than the timeout plus its body's credit.
    #[test]
    fn a_body_trickling_in_is_reset_when_its_request_is_overdue() {
        let idle = Duration::from_secs(60);
        for (head, byte) in [
            (
                &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n"[..],
                b'x',
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                b'0',
            ),
        ] {
            let (mut h, counters) = server(Some(idle));
            let mut net = fake();
            h.on_accept(&mut net, c());
            net.inbox = head.to_vec();
            h.on_data(&mut net, c());
            let start = net.now;
            while !net.reset && net.now < start + Duration::from_secs(600) {
                net.now += Duration::from_secs(30);
                net.inbox = vec![byte];
                h.on_data(&mut net, c());
                h.on_tick(&mut net);
            }
            assert!(net.reset, "{:?}", String::from_utf8_lossy(head));
            assert!(net.now <= start + Duration::from_secs(180), "{:?}", net.now);
            assert_eq!(counters.request_timeout.load(Ordering::Relaxed), 1);
            assert_eq!(answered(&counters), 0);
        }
        // A body at a fair rate is not: 2,000 bytes a second for 200 s.
        let (mut h, counters) = server(Some(idle));
        let mut net = fake();
        h.on_accept(&mut net, c());
        net.inbox = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 400000\r\n\r\n".to_vec();
        h.on_data(&mut net, c());
        for _ in 0..200 {
            net.now += Duration::from_secs(1);
            net.inbox = vec![b'x'; 2000];
            h.on_data(&mut net, c());
            h.on_tick(&mut net);
        }
        assert!(!net.reset);
        assert_eq!(answered(&counters), 1);
    }

    /// With the peer's FIN in, a request that cannot be read after one
    /// answered is refused (400) and counted, not dropped unanswered.
    #[test]
    fn a_malformed_request_before_the_peer_s_fin_is_refused() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /\r\n\r\n".to_vec();
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        let text = net.sent_text();
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        assert!(text.contains("HTTP/1.1 400 Bad Request"), "{text}");
        assert_eq!(answered(&counters), 1);
        assert_eq!(counters.bad_request.load(Ordering::Relaxed), 1);
        assert!(net.closed() && !net.reset);
    }

    /// What a burst grew (a pipelined batch of responses) is given back
    /// once it went: an idle kept-alive connection does not keep its peak.
    #[test]
    fn a_burst_s_buffers_are_given_back_once_drained() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.send_room = Some(0);
        net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(5_000);
        h.on_data(&mut net, c());
        let st = h.conns.get(c()).unwrap();
        assert!(st.output.capacity() > KEEP, "the burst is held");
        net.send_room = None;
        for _ in 0..1000 {
            h.on_writable(&mut net, c());
            if net.inbox.is_empty() {
                break;
            }
        }
        h.on_writable(&mut net, c());
        assert_eq!(answered(&counters), 5_000);
        let st = h.conns.get(c()).unwrap();
        assert!(st.between_requests());
        assert!(
            st.output.capacity() <= KEEP && st.input.capacity() <= KEEP,
            "{} and {} bytes kept",
            st.output.capacity(),
            st.input.capacity()
        );
        // A long head, alike.
        let (mut h, _) = server(None);
        let mut net = fake();
        let long = [
            &b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..],
            &vec![b'a'; 15_000],
            b"\r\n\r\n",
        ]
        .concat();
        for piece in long.chunks(1000) {
            net.inbox = piece.to_vec();
            h.on_data(&mut net, c());
        }
        assert!(net.sent_text().starts_with("HTTP/1.1 200 OK"));
        let st = h.conns.get(c()).unwrap();
        assert!(st.input.capacity() <= KEEP, "{}", st.input.capacity());
    }

    #[test]
    fn a_request_line_too_long_is_refused_414() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = [&b"GET /"[..], &vec![b'a'; MAX_HEAD]].concat();
        h.on_data(&mut net, c());
        assert!(
            net.sent_text().starts_with("HTTP/1.1 414 URI Too Long\r\n"),
            "{}",
            net.sent_text()
        );
        assert_eq!(counters.uri_too_long.load(Ordering::Relaxed), 1);
        assert!(net.did("shutdown"));
    }

    #[test]
    fn requests_fed_a_byte_at_a_time_are_answered() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        let req = b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nabGET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for &b in req {
            net.inbox.push(b);
            h.on_data(&mut net, c());
        }
        assert_eq!(answered(&counters), 3);
        assert_eq!(net.sent_text().matches("HTTP/1.1 200 OK").count(), 3);
    }

    /// CONNECT asks for a tunnel: refused 501 (RFC 9110 §9.3.6, §9.1), not
    /// answered 200 with a body the client would take for the tunnel's;
    /// what follows its head (tunnel bytes) is not read as requests, and
    /// the connection closes.
    #[test]
    fn connect_is_refused_501_and_closed() {
        let (mut h, counters) = server(None);
        let mut net = fake();
        net.inbox = [
            &b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"[..],
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ]
        .concat();
        h.on_data(&mut net, c());
        let text = net.sent_text();
        assert_eq!(
            text,
            "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nServer: flowlane\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(counters.not_implemented.load(Ordering::Relaxed), 1);
        assert_eq!(answered(&counters), 0);
        assert!(net.did("shutdown") && !net.reset, "a FIN after the answer");
        net.peer_fin = true;
        h.on_peer_closed(&mut net, c());
        assert!(net.closed() && !net.reset);
        assert_eq!(net.sent_text(), text, "nothing more answered");
    }

    /// A peer that reads a long response slowly: the send buffer frees a
    /// little at a time, and the stack wakes the writer only once a third
    /// of it is free, later than `--idle-timeout`. The bytes the peer
    /// acknowledges move, so it is not idle and gets the whole response;
    /// once it stops acknowledging, it is closed at the timeout.
    #[test]
    fn a_slow_reader_is_not_idle_while_it_acknowledges() {
        let idle = Duration::from_secs(2);
        let body = "x".repeat(120_000);
        // The send buffer, and what the peer reads (and acknowledges) in
        // 100 ms: 5,000 bytes a second, a third of the buffer in 4 s.
        let (buffer, read) = (60_000, 500);
        for stop_at in [None, Some(Duration::from_secs(10))] {
            let counters = Arc::new(HttpCounters::default());
            let mut h = Http::new(&body, AllowFrom::default(), Some(idle), counters.clone());
            let mut net = fake();
            net.send_room = Some(buffer);
            net.unacked = Some(0);
            h.on_accept(&mut net, c());
            net.inbox = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
            h.on_data(&mut net, c());
            assert_eq!(net.sent.len(), buffer);
            let total = h.responses.for_request(Persistence::KeepAlive, false).len();
            let start = net.now;
            let mut freed = 0;
            let mut acked = 0;
            while !net.reset && net.now < start + Duration::from_secs(60) {
                net.now += Duration::from_millis(100);
                let reading = stop_at.is_none_or(|t| net.now < start + t);
                let unacked = net.unacked.as_mut().unwrap();
                let n = if reading { read.min(*unacked) } else { 0 };
                *unacked -= n;
                freed += n;
                acked += n;
                if freed >= buffer / 3 || (freed > 0 && *unacked == 0) {
                    net.send_room = net.send_room.map(|r| r + freed);
                    freed = 0;
                    h.on_writable(&mut net, c());
                }
                h.on_tick(&mut net);
                if acked == total {
                    break;
                }
            }
            let (closed, reset) = (
                counters.idle_closed.load(Ordering::Relaxed),
                counters.idle_reset.load(Ordering::Relaxed),
            );
            match stop_at {
                None => {
                    assert!(
                        !net.reset && !net.closed(),
                        "reset at {:?}",
                        net.now - start
                    );
                    assert_eq!(net.sent.len(), total);
                    assert_eq!((closed, reset), (0, 0));
                }
                Some(t) => {
                    assert!(net.reset, "a peer that stopped reading is idle");
                    let after = net.now - start - t;
                    assert!(after > idle && after <= idle + 2 * SWEEP, "{after:?}");
                    assert_eq!((closed, reset), (1, 1));
                }
            }
        }
    }
}
