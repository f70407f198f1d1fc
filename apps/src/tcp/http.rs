//! `http-server`: a fixed-response HTTP/1.1 server with keep-alive.

use std::collections::HashMap;

use flowlane_app::{CloseReason, ConnHandle, ConnHandler, Net};

/// Requests larger than this (headers) reset the connection.
const MAX_REQUEST: usize = 16 * 1024;

#[derive(Default)]
struct HttpConn {
    input: Vec<u8>,
    output: Vec<u8>,
    close_after: bool,
}

/// A fixed-response HTTP/1.1 server with keep-alive.
pub(super) struct Http {
    response: Vec<u8>,
    conns: HashMap<ConnHandle, HttpConn>,
}

impl Http {
    /// A handler answering every request with `200 OK` and `body`.
    pub(super) fn new(body: &str) -> Http {
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: flowlane\r\n\r\n{}",
            body.len(),
            body
        )
        .into_bytes();
        Http {
            response,
            conns: HashMap::new(),
        }
    }

    fn drive(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let st = self.conns.entry(conn).or_default();
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
        while let Some(end) = st.input.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&st.input[..end]).to_ascii_lowercase();
            let http10 = head.lines().next().is_some_and(|l| l.ends_with("http/1.0"));
            if head.contains("\nconnection: close")
                || (http10 && !head.contains("\nconnection: keep-alive"))
            {
                st.close_after = true;
            }
            st.output.extend_from_slice(&self.response);
            st.input.drain(..end + 4);
            if st.close_after {
                break;
            }
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
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: CloseReason) {
        self.conns.remove(&conn);
    }
}
