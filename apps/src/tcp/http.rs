//! `http-server`: a fixed-response HTTP/1.1 server with keep-alive.
//!
//! Connection persistence follows RFC 9112 §9.3: an HTTP/1.1 request keeps
//! the connection open unless it carries the `close` connection option; an
//! HTTP/1.0 request closes it unless it carries `keep-alive`. Per RFC 9112
//! §9.6, a response after which the server closes says `Connection: close`
//! (clients such as wrk count a close without it as a read error), and an
//! HTTP/1.0 request that asked for keep-alive is answered with
//! `Connection: keep-alive` (RFC 9112 §C.2.2) so that the client knows it
//! was granted.

use flowlane_app::conn_state::{export_entry, import_entry};
use flowlane_app::{CloseReason, ConnHandle, ConnHandler, ConnMap, ConnState, Net, SynFilter};

use super::AllowFrom;

/// Requests larger than this (headers) reset the connection.
const MAX_REQUEST: usize = 16 * 1024;

/// What happens to the connection after the response to one request
/// (RFC 9112 §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persistence {
    /// HTTP/1.1 default: stays open, nothing said.
    KeepAlive,
    /// HTTP/1.0 with `Connection: keep-alive`: stays open, granted with
    /// `Connection: keep-alive`.
    KeepAliveHttp10,
    /// The server closes after the response, which says `Connection: close`.
    Close,
}

/// Whether the comma-separated `Connection` field `value` lists `option`
/// (RFC 9110 §7.6.1: a list of case-insensitive tokens).
fn lists_option(value: &[u8], option: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(option.as_bytes()))
}

/// The persistence a request head (request line and header fields, without
/// the blank line) asks for (RFC 9112 §9.3). Field names match
/// case-insensitively; several `Connection` fields combine; `close` wins.
fn persistence(head: &[u8]) -> Persistence {
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.trim_ascii_end());
    let request_line = lines.next().unwrap_or_default();
    let http10 = request_line
        .rsplit(|&b| b == b' ')
        .next()
        .is_some_and(|v| v.eq_ignore_ascii_case(b"HTTP/1.0"));
    let (mut close, mut keep_alive) = (false, false);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if !line[..colon].eq_ignore_ascii_case(b"connection") {
            continue;
        }
        let value = &line[colon + 1..];
        close |= lists_option(value, "close");
        keep_alive |= lists_option(value, "keep-alive");
    }
    match (close, http10, keep_alive) {
        (true, _, _) => Persistence::Close,
        (false, false, _) => Persistence::KeepAlive,
        (false, true, true) => Persistence::KeepAliveHttp10,
        (false, true, false) => Persistence::Close,
    }
}

/// The three responses, one per [`Persistence`], built once.
struct Responses {
    keep_alive: Vec<u8>,
    keep_alive_http10: Vec<u8>,
    close: Vec<u8>,
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
        }
    }

    fn for_request(&self, p: Persistence) -> &[u8] {
        match p {
            Persistence::KeepAlive => &self.keep_alive,
            Persistence::KeepAliveHttp10 => &self.keep_alive_http10,
            Persistence::Close => &self.close,
        }
    }
}

/// The end of the first complete request head in `input` (the index of its
/// blank line's `\r\n\r\n`).
fn head_end(input: &[u8]) -> Option<usize> {
    input.windows(4).position(|w| w == b"\r\n\r\n")
}

#[derive(Default)]
struct HttpConn {
    input: Vec<u8>,
    output: Vec<u8>,
    close_after: bool,
}

/// A fixed-response HTTP/1.1 server with keep-alive.
pub(super) struct Http {
    responses: Responses,
    conns: ConnMap<HttpConn>,
    allow: AllowFrom,
}

impl Http {
    /// A handler answering every request with `200 OK` and `body`, to
    /// the peers `allow` names.
    pub(super) fn new(body: &str, allow: AllowFrom) -> Http {
        Http {
            responses: Responses::new(body),
            conns: ConnMap::new(),
            allow,
        }
    }

    fn drive(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let st = self.conns.get_or_insert_with(conn, HttpConn::default);
        let mut buf = [0u8; 4096];
        let mut eof = false;
        loop {
            match net.recv(conn, &mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => st.input.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        while !st.close_after {
            let Some(end) = head_end(&st.input) else {
                break;
            };
            let mut p = persistence(&st.input[..end]);
            // The peer has finished sending: the last complete request's
            // response is the last on this connection (RFC 9112 §9.6).
            if eof && head_end(&st.input[end + 4..]).is_none() {
                p = Persistence::Close;
            }
            st.close_after = p == Persistence::Close;
            st.output.extend_from_slice(self.responses.for_request(p));
            st.input.drain(..end + 4);
        }
        if st.input.len() > MAX_REQUEST {
            let _ = net.abort(conn);
            return;
        }
        if eof {
            st.close_after = true;
        }
        if !st.output.is_empty() {
            if let Ok(n) = net.send(conn, &st.output) {
                st.output.drain(..n);
            }
        }
        if st.output.is_empty() && st.close_after {
            let _ = net.close(conn);
        }
    }
}

impl ConnHandler for Http {
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        self.allow.filter()
    }
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
        self.conns.insert(conn, HttpConn::default());
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(head: &str) -> Persistence {
        persistence(head.as_bytes())
    }

    #[test]
    fn http11_keeps_alive_unless_close_is_listed() {
        assert_eq!(p("GET / HTTP/1.1\r\nHost: a"), Persistence::KeepAlive);
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\ncOnNeCtIoN:   CLOSE  "),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nConnection: foo, close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: Upgrade,close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nConnection: keep-alive"),
            Persistence::KeepAlive
        );
    }

    #[test]
    fn http11_close_is_a_whole_token() {
        assert_eq!(
            p("GET / HTTP/1.1\r\nConnection: closed, foo"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nX-Connection: close"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p("GET /Connection:close HTTP/1.1\r\nHost: a"),
            Persistence::KeepAlive
        );
    }

    #[test]
    fn http10_closes_unless_keep_alive_is_listed() {
        assert_eq!(p("GET / HTTP/1.0\r\nHost: a"), Persistence::Close);
        assert_eq!(p("GET / HTTP/1.0"), Persistence::Close);
        assert_eq!(
            p("GET / HTTP/1.0\r\nConnection: Keep-Alive"),
            Persistence::KeepAliveHttp10
        );
        assert_eq!(
            p("GET / http/1.0\r\nconnection: foo ,keep-alive"),
            Persistence::KeepAliveHttp10
        );
        assert_eq!(
            p("GET / HTTP/1.0\r\nConnection: keep-alive, close"),
            Persistence::Close
        );
    }

    #[test]
    fn responses_say_connection_only_when_needed() {
        let r = Responses::new("hi");
        let text = |p| String::from_utf8(r.for_request(p).to_vec()).unwrap();
        let ka = text(Persistence::KeepAlive);
        assert!(!ka.to_ascii_lowercase().contains("connection:"), "{ka}");
        assert!(ka.ends_with("Server: flowlane\r\n\r\nhi"), "{ka}");
        let close = text(Persistence::Close);
        assert!(close.contains("\r\nConnection: close\r\n\r\nhi"), "{close}");
        let ka10 = text(Persistence::KeepAliveHttp10);
        assert!(
            ka10.contains("\r\nConnection: keep-alive\r\n\r\nhi"),
            "{ka10}"
        );
        for t in [ka, close, ka10] {
            assert!(t.starts_with("HTTP/1.1 200 OK\r\n"));
            assert!(t.contains("\r\nContent-Length: 2\r\n"));
        }
    }

    #[test]
    fn head_end_finds_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nGET"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
    }
}
