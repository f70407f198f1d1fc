//! What an HTTP/1.1 server does with a connection at the service's stop,
//! http-server's handler and hyper-server's connections alike (nginx's
//! graceful shutdown, Go's `Server.Shutdown`): one between requests is
//! closed at once (a FIN: its client sees the end of the stream, not a
//! reset, and opens another elsewhere); one in the middle of a request
//! gets that response, saying `Connection: close` (RFC 9112 §9.6), and is
//! closed once it went. One accepted whose first request has not come (no
//! byte yet) is not idle but about to send it: a client that connected as
//! the stop began would read a FIN before its request as an empty reply
//! (the rolling-restart run, within 20 ms of SIGTERM). It is left open,
//! as Go leaves its new connections (`StateNew`), and its request is
//! answered as the last if it comes within the stop's drain; one that
//! sends nothing is reset at the drain's end.

/// Whether a connection may be closed at the stop once nothing is owed
/// either way: not while `fresh` (no byte of its first request came).
pub(super) fn closes_between_requests(fresh: bool) -> bool {
    !fresh
}
