//! HTTP/1.1 request framing for `http-server` (RFC 9112), sans I/O: where a
//! request's head ends and what it asks for (HEAD, persistence, 100-continue;
//! CONNECT refused), and how long its body is (§6.3). A body is skipped as it
//! arrives (the fixed response does not read it), never held whole.

/// Longest request head: its request line, its fields, the blank line that
/// ends it and any empty lines before it (RFC 9112 §2.2) together; past it,
/// 431 (414 where the request line alone is that long: §3).
pub(super) const MAX_HEAD: usize = 16 * 1024;

/// Longest chunk-size line (its size, leading zeros included, and its
/// extensions), and longest trailer section, of a chunked body: a size
/// line of zeros without end is refused, not read forever.
const MAX_CHUNK_META: usize = 4096;

/// What happens to the connection after the response to one request
/// (RFC 9112 §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persistence {
    /// HTTP/1.1 default: stays open, nothing said.
    KeepAlive,
    /// HTTP/1.0 with `Connection: keep-alive`: stays open, granted with
    /// `Connection: keep-alive`.
    KeepAliveHttp10,
    /// The server closes after the response, which says `Connection: close`.
    Close,
}

/// A request head, as far as a fixed-response server needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) persistence: Persistence,
    /// `HEAD`: the response without its body (RFC 9110 §9.3.2).
    pub(super) head_only: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request with a body: the client
    /// waits for `100 Continue` before it sends the body (RFC 9110 §10.1.1).
    pub(super) expect_continue: bool,
    /// How the body is framed.
    pub(super) body: BodyLength,
}

/// A request body's length (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyLength {
    /// `Content-Length` bytes (0: no body, as when neither field is there).
    Bytes(u64),
    /// The chunked transfer coding.
    Chunked,
}

/// Why a request is answered with an error and the connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The head is longer than [`MAX_HEAD`]: 431.
    HeadTooLarge,
    /// The request line alone does not end within [`MAX_HEAD`]: 414, as
    /// RFC 9112 §3 asks of a request-target longer than the server parses.
    UriTooLong,
    /// A request line, field line or framing that cannot be read (a line
    /// not ended by CRLF, a method that is no token, a target with control
    /// bytes, a version other than `HTTP/1.<digit>`, a folded line, a field
    /// name with whitespace before its colon, an invalid or conflicting
    /// `Content-Length`, a transfer coding other than chunked last, a
    /// malformed chunk): 400, as §2.2, §3, §5.1, §5.2 and §6.3 ask.
    BadRequest,
    /// `CONNECT`, which asks for a tunnel (RFC 9110 §9.3.6) that this
    /// server does not open: 501, as RFC 9110 §9.1 asks of a method not
    /// implemented (§15.6.2); a `2xx` would tell the client the tunnel was
    /// established. What follows its head would be tunnel bytes, not
    /// requests: the connection closes.
    NotImplemented,
}

/// The head at the start of `input`, with the bytes it takes (empty lines
/// before it included: §2.2); `Ok(None)` while it is incomplete. Scans all
/// of `input`: a head arriving in pieces is better read by a [`HeadScan`].
pub(super) fn parse_head(input: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
    HeadScan::default().parse(input)
}

/// The search for the end of a head that arrives in pieces: each call
/// looks only at the bytes that came since the last (a head fed one byte at
/// a time costs its length, not its length squared).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HeadScan {
    /// Where the head starts, past the empty lines before it, once a byte
    /// other than CR or LF came.
    start: Option<usize>,
    /// Where the request line ends (its CRLF), once it did.
    line_end: Option<usize>,
    /// Bytes looked at: before `start` is known, all CR or LF; after, every
    /// CR or LF before `from` is part of a CRLF, and no CRLFCRLF begins
    /// before it.
    from: usize,
}

impl HeadScan {
    /// [`parse_head`] of `input`, which must be the input of the previous
    /// call with bytes appended (a shorter one starts over). Once it
    /// returns a head or a refusal the scan starts over, for the next head.
    pub(super) fn parse(&mut self, input: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
        if self.from > input.len() {
            *self = HeadScan::default();
        }
        let done = self.scan(input);
        if !matches!(done, Ok(None)) {
            *self = HeadScan::default();
        }
        done
    }

    /// The refusal of a head past [`MAX_HEAD`]: 414 while its request line
    /// is what did not end within it (RFC 9112 §3), else 431.
    fn too_large(&self) -> Refusal {
        match (self.start, self.line_end) {
            (Some(_), None) => Refusal::UriTooLong,
            (Some(_), Some(e)) if e + 2 > MAX_HEAD => Refusal::UriTooLong,
            _ => Refusal::HeadTooLarge,
        }
    }

    fn scan(&mut self, input: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
        // RFC 9112 §2.2: empty lines before the request line are ignored,
        // but they count against the limit (else a peer sending CRLF
        // forever would be read forever).
        let start = match self.start {
            Some(s) => s,
            None => {
                let p = input[self.from..]
                    .iter()
                    .position(|&b| b != b'\r' && b != b'\n');
                let Some(p) = p else {
                    self.from = input.len();
                    return self.incomplete(input);
                };
                self.start = Some(self.from + p);
                self.from + p
            }
        };
        let mut i = self.from.max(start);
        let end = loop {
            let Some(p) = input[i..].iter().position(|&b| b == b'\r' || b == b'\n') else {
                self.from = input.len();
                return self.incomplete(input);
            };
            i += p;
            // RFC 9112 §2.2: the line terminator is CRLF. A bare CR is
            // invalid; a bare LF, which some recipients take as a line end,
            // is refused as soon as it comes (§2.2 lets a server refuse
            // it), since this head's end is found at CRLFCRLF only: one
            // framing, no room for another reading of the same bytes, and
            // no head that waits for an end it will never get. (An LF
            // after a CR is stepped over with it: one found here is bare.)
            if input[i] == b'\n' {
                return Err(Refusal::BadRequest);
            }
            match input.get(i + 1) {
                Some(b'\n') => {}
                Some(_) => return Err(Refusal::BadRequest),
                None => {
                    self.from = i;
                    return self.incomplete(input);
                }
            }
            self.line_end.get_or_insert(i);
            // A CRLF at `i`: the head ends if another follows at once.
            match (input.get(i + 2), input.get(i + 3)) {
                (Some(b'\r'), Some(b'\n')) => break i,
                (None, _) | (Some(b'\r'), None) => {
                    self.from = i;
                    return self.incomplete(input);
                }
                _ => i += 2,
            }
        };
        if end + 4 > MAX_HEAD {
            return Err(self.too_large());
        }
        let head = read_head(&input[start..end])?;
        Ok(Some((head, end + 4)))
    }

    /// No end yet: more input is needed, unless `input` is past
    /// [`MAX_HEAD`] already.
    fn incomplete(&self, input: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
        if input.len() > MAX_HEAD {
            Err(self.too_large())
        } else {
            Ok(None)
        }
    }
}

/// The lines of a head (without its blank line), split at CRLF only: a CR
/// or LF left in a line is a bare one.
fn crlf_lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(2).position(|w| w == b"\r\n") {
            Some(i) => {
                rest = Some(&r[i + 2..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// `tchar` (RFC 9110 §5.6.2): what a token, a field name, is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `v` without the optional whitespace (SP, HTAB: RFC 9110 §5.6.3) around
/// it.
fn trim_ows(v: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let Some(first) = v.iter().position(|b| !ows(b)) else {
        return &[];
    };
    let last = v.iter().rposition(|b| !ows(b)).unwrap_or(first);
    &v[first..=last]
}

/// Reads a complete head (without its blank line), in which every CR and
/// LF is a CRLF already ([`HeadScan`] refuses bare ones: RFC 9112 §2.2).
fn read_head(head: &[u8]) -> Result<Head, Refusal> {
    let mut lines = crlf_lines(head);
    let request_line = lines.next().unwrap_or_default();
    // Trailing whitespace is forgiven, as before.
    let request_line = request_line.trim_ascii_end();
    // RFC 9112 §3: request-line = method SP request-target SP HTTP-version.
    let mut parts = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::BadRequest);
    };
    // §3.1: the method is a token; §3.2: a target is URI characters, no
    // control byte or DEL among them; §2.3: HTTP-version = "HTTP/" DIGIT
    // "." DIGIT, its name case-sensitive (a minor version above 1 is
    // answered as 1.1: RFC 9110 §2.5).
    let v1 = version.len() == 8 && version.starts_with(b"HTTP/1.") && version[7].is_ascii_digit();
    if method.is_empty()
        || !method.iter().all(|&b| is_tchar(b))
        || target.is_empty()
        || target.iter().any(|&b| b.is_ascii_control())
        || !v1
    {
        return Err(Refusal::BadRequest);
    }
    let http10 = version == b"HTTP/1.0";
    let (mut close, mut keep_alive, mut continue_) = (false, false, false);
    let mut length: Option<u64> = None;
    let mut coding: Option<bool> = None;
    let mut hosts = 0u32;
    for line in lines {
        // §5.2: a line folded onto the previous one (obs-fold) is refused
        // (400), as is whitespace before the first field (§2.2).
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(Refusal::BadRequest);
        }
        // §5: field-line = field-name ":" OWS field-value OWS.
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Refusal::BadRequest)?;
        let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
        // §5.1: a field name is a token, and whitespace between it and
        // the colon MUST be answered 400 (it would otherwise drop, or
        // rename, a field such as `Transfer-Encoding : chunked`).
        // RFC 9110 §5.5: a NUL in a value is invalid.
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) || value.contains(&0) {
            return Err(Refusal::BadRequest);
        }
        if name.eq_ignore_ascii_case(b"connection") {
            close |= lists(value, "close");
            keep_alive |= lists(value, "keep-alive");
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // A list of identical values is one value (§6.3 item 5).
            for v in value.split(|&b| b == b',') {
                let n = decimal(trim_ows(v)).ok_or(Refusal::BadRequest)?;
                if length.is_some_and(|l| l != n) {
                    return Err(Refusal::BadRequest);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only the last coding of all the fields counts: chunked or not.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            coding = Some(trim_ows(last).eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"expect") {
            continue_ = value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"host") {
            if !valid_host(value) {
                return Err(Refusal::BadRequest);
            }
            hosts += 1;
        }
    }
    // §3.2: "A server MUST respond with a 400 (Bad Request) status code to
    // any HTTP/1.1 request message that lacks a Host header field and to
    // any request message that contains more than one Host header field
    // line or a Host header field with an invalid field value."
    if hosts > 1 || (hosts == 0 && !http10) {
        return Err(Refusal::BadRequest);
    }
    let body = match coding {
        // §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
        // framing; §6.3 item 4: chunked not last, 400.
        Some(_) if http10 => return Err(Refusal::BadRequest),
        Some(false) => return Err(Refusal::BadRequest),
        Some(true) => BodyLength::Chunked,
        None => BodyLength::Bytes(length.unwrap_or(0)),
    };
    // §6.1: both fields: Transfer-Encoding wins, and the connection closes
    // after the response.
    let both = coding.is_some() && length.is_some();
    let persistence = match (close || both, http10, keep_alive) {
        (true, _, _) => Persistence::Close,
        (false, false, _) => Persistence::KeepAlive,
        (false, true, true) => Persistence::KeepAliveHttp10,
        (false, true, false) => Persistence::Close,
    };
    // RFC 9110 §9.3.6, §9.1: no tunnel here (the method is
    // case-sensitive).
    if method == b"CONNECT" {
        return Err(Refusal::NotImplemented);
    }
    Ok(Head {
        persistence,
        head_only: method == b"HEAD",
        expect_continue: continue_ && !http10 && body != BodyLength::Bytes(0),
        body,
    })
}

/// Whether `value` can be a Host field's: `uri-host [ ":" port ]` (RFC
/// 9112 §3.2, RFC 3986 §3.2.2): empty (a target without an authority), or
/// a registered name or IPv4 address (unreserved, percent-encoded and
/// sub-delims characters) or an IP literal in brackets, then digits after
/// a colon. Anything else (spaces, a second colon outside brackets, a
/// userinfo `@`, control bytes) is invalid.
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.first() {
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(end) => {
                let literal = &value[1..end];
                // IPv6 or IPvFuture, a zone ID (RFC 6874: `%25` and
                // unreserved characters) included.
                let ok = !literal.is_empty()
                    && literal.iter().all(|&b| {
                        b.is_ascii_alphanumeric() || b":.%-_~".contains(&b) || is_sub_delim(b)
                    });
                if !ok {
                    return false;
                }
                (&value[..0], &value[end + 1..])
            }
            None => return false,
        },
        _ => match value.iter().position(|&b| b == b':') {
            Some(c) => (&value[..c], &value[c..]),
            None => (value, &value[value.len()..]),
        },
    };
    let reg_name = host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b) || is_sub_delim(b));
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    reg_name && port_ok
}

/// RFC 3986 §2.2 sub-delims.
fn is_sub_delim(b: u8) -> bool {
    b"!$&'()*+,;=".contains(&b)
}

/// Whether the comma-separated field value lists `option` (RFC 9110
/// §7.6.1: case-insensitive tokens).
fn lists(value: &[u8], option: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| trim_ows(t).eq_ignore_ascii_case(option.as_bytes()))
}

/// A `Content-Length` value: decimal digits only (§8.6), within u64.
fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A body being skipped as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodySkip {
    /// Bytes left of a `Content-Length` body.
    Bytes(u64),
    /// Where a chunked body is (RFC 9112 §7.1).
    Chunked(Chunk),
}

/// A chunked body's reading position (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// In a chunk-size line: the size so far, and its digits so far
    /// (leading zeros included).
    Size { size: u64, len: usize },
    /// Whitespace after the size (BWS): a `;` must follow (§7.1.1);
    /// `len` bytes of the size line so far.
    ExtSpace { size: u64, len: usize },
    /// In a chunk extension (skipped), `len` bytes of the size line so far.
    Ext { size: u64, len: usize },
    /// The size line's CR seen; its LF next.
    SizeLf { size: u64 },
    /// Bytes left of a chunk's data.
    Data(u64),
    /// The CRLF after a chunk's data (`lf`: its CR seen).
    DataEnd { lf: bool },
    /// In the trailer section after the last chunk: bytes of it so far,
    /// and of its current line.
    Trailer { len: usize, line: usize },
    /// A trailer line's CR seen, its LF next (`last`: the line was empty,
    /// the one that ends the body).
    TrailerLf { len: usize, last: bool },
}

impl BodySkip {
    /// The skipper for a body of `length` (none for a zero length).
    pub(super) fn new(length: BodyLength) -> Option<BodySkip> {
        match length {
            BodyLength::Bytes(0) => None,
            BodyLength::Bytes(n) => Some(BodySkip::Bytes(n)),
            BodyLength::Chunked => Some(BodySkip::Chunked(Chunk::Size { size: 0, len: 0 })),
        }
    }

    /// Skips what of the body `input` starts with: the bytes taken, and
    /// whether the body ended there.
    pub(super) fn skip(&mut self, input: &[u8]) -> Result<(usize, bool), Refusal> {
        match self {
            BodySkip::Bytes(left) => {
                let k = (*left).min(input.len() as u64);
                *left -= k;
                Ok((k as usize, *left == 0))
            }
            BodySkip::Chunked(c) => {
                let mut i = 0;
                while i < input.len() {
                    if let Chunk::Data(left) = c {
                        let k = (*left).min((input.len() - i) as u64);
                        *left -= k;
                        i += k as usize;
                        if *left == 0 {
                            *c = Chunk::DataEnd { lf: false };
                        }
                        continue;
                    }
                    let b = input[i];
                    i += 1;
                    if c.byte(b)? {
                        return Ok((i, true));
                    }
                }
                Ok((i, false))
            }
        }
    }
}

impl Chunk {
    /// One byte outside chunk data; true once the body ended.
    fn byte(&mut self, b: u8) -> Result<bool, Refusal> {
        let bad = Err(Refusal::BadRequest);
        let space = b == b' ' || b == b'\t';
        *self = match *self {
            // §7.1: chunk-size = 1*HEXDIG. At most 15 significant digits
            // (the size stays below 2^60); leading zeros count against
            // the line's bound only.
            Chunk::Size { len, .. } if len >= MAX_CHUNK_META => return bad,
            Chunk::Size { size, len } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' if size < 1 << 56 => Chunk::Size {
                    size: size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0)),
                    len: len + 1,
                },
                b';' if len > 0 => Chunk::Ext { size, len: len + 1 },
                _ if space && len > 0 => Chunk::ExtSpace { size, len: len + 1 },
                b'\r' if len > 0 => Chunk::SizeLf { size },
                _ => return bad,
            },
            // §7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name
            // [ BWS "=" BWS chunk-ext-val ] ): whitespace after the size
            // leads to a `;`, nothing else.
            Chunk::ExtSpace { len, .. } if len >= MAX_CHUNK_META => return bad,
            Chunk::ExtSpace { size, len } => match b {
                b';' => Chunk::Ext { size, len: len + 1 },
                _ if space => Chunk::ExtSpace { size, len: len + 1 },
                _ => return bad,
            },
            // Names, values and quoted strings are skipped unread, but
            // none of them holds a control byte other than HTAB (§7.1.1,
            // RFC 9110 §5.6.4): a bare LF here would end the line for a
            // reader that takes LF alone (§2.2), and frame the body
            // otherwise than this one does.
            Chunk::Ext { size, len } => match b {
                b'\r' => Chunk::SizeLf { size },
                b'\t' | 0x20..=0x7e | 0x80..=0xff if len < MAX_CHUNK_META => {
                    Chunk::Ext { size, len: len + 1 }
                }
                _ => return bad,
            },
            Chunk::SizeLf { size } => match b {
                b'\n' if size == 0 => Chunk::Trailer { len: 0, line: 0 },
                b'\n' => Chunk::Data(size),
                _ => return bad,
            },
            // Data is skipped in bulk (`BodySkip::skip`); a byte here
            // would be a bug, refused rather than a panic.
            Chunk::Data(_) => return bad,
            Chunk::DataEnd { lf: false } if b == b'\r' => Chunk::DataEnd { lf: true },
            Chunk::DataEnd { lf: true } if b == b'\n' => Chunk::Size { size: 0, len: 0 },
            Chunk::DataEnd { .. } => return bad,
            // §7.1.2: trailer lines end in CRLF, as a head's do (§2.2);
            // a bare LF or CR is refused.
            Chunk::Trailer { len, .. } if len >= MAX_CHUNK_META => return bad,
            Chunk::Trailer { len, line } => match b {
                b'\r' => Chunk::TrailerLf {
                    len: len + 1,
                    last: line == 0,
                },
                b'\n' => return bad,
                _ => Chunk::Trailer {
                    len: len + 1,
                    line: line + 1,
                },
            },
            Chunk::TrailerLf { len, last } => match b {
                // An empty line ends the trailer section, and the body.
                b'\n' if last => return Ok(true),
                b'\n' => Chunk::Trailer {
                    len: len + 1,
                    line: 0,
                },
                _ => return bad,
            },
        };
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of `text` with its blank line; a `Host` field added to a
    /// request line alone (RFC 9112 §3.2: HTTP/1.1 requests carry one).
    fn head(text: &str) -> Result<Head, Refusal> {
        let host = if text.contains("\r\n") || !text.ends_with("HTTP/1.1") {
            ""
        } else {
            "\r\nHost: a"
        };
        let with_end = format!("{text}{host}\r\n\r\n");
        parse_head(with_end.as_bytes()).map(|h| h.expect("complete").0)
    }

    fn p(text: &str) -> Persistence {
        head(text).unwrap().persistence
    }

    #[test]
    fn http11_keeps_alive_unless_close_is_listed() {
        assert_eq!(p("GET / HTTP/1.1\r\nHost: a"), Persistence::KeepAlive);
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\ncOnNeCtIoN:   CLOSE  "),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: Upgrade,close"),
            Persistence::Close
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive"),
            Persistence::KeepAlive
        );
    }

    #[test]
    fn http11_close_is_a_whole_token() {
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed, foo"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p("GET / HTTP/1.1\r\nHost: a\r\nX-Connection: close"),
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
            p("GET / HTTP/1.0\r\nconnection: foo ,keep-alive"),
            Persistence::KeepAliveHttp10
        );
        assert_eq!(
            p("GET / HTTP/1.0\r\nConnection: keep-alive, close"),
            Persistence::Close
        );
    }

    #[test]
    fn heads_are_found_after_empty_lines_and_bounded() {
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        let (h, n) = parse_head(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nGET")
            .unwrap()
            .unwrap();
        assert_eq!((h.head_only, h.body, n), (false, BodyLength::Bytes(0), 31));
        // Empty lines alone are no request.
        assert_eq!(parse_head(b"\r\n\r\n\r\n\r\n"), Ok(None));
        let long = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse_head(&long), Err(Refusal::UriTooLong));
        assert_eq!(parse_head(&long[..MAX_HEAD]), Ok(None));
        assert_eq!(head("GET /"), Err(Refusal::BadRequest));
        assert_eq!(head("GET / HTTP/1.1 x"), Err(Refusal::BadRequest));
        assert_eq!(head("GET / SPDY/3"), Err(Refusal::BadRequest));
    }

    /// RFC 9112 §2.2: a bare LF ends no line here; refused at once, not
    /// waited on for a CRLFCRLF that never comes.
    #[test]
    fn heads_with_bare_lf_or_cr_are_refused_as_they_come() {
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\nHost: a\n\n"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(parse_head(b"GET / HTTP/1.0\n\n"), Err(Refusal::BadRequest));
        assert_eq!(parse_head(b"GET / HTTP/1.0\n"), Err(Refusal::BadRequest));
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: a\r\r"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n\n"),
            Err(Refusal::BadRequest)
        );
        // A CR at the end waits for its LF.
        assert_eq!(parse_head(b"GET / HTTP/1.1\r"), Ok(None));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), Ok(None));
        // Fed a byte at a time: refused at the bare LF.
        let req = b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n";
        let mut scan = HeadScan::default();
        let refused = (1..=req.len()).find(|&end| scan.parse(&req[..end]).is_err());
        assert_eq!(refused, Some(b"GET / HTTP/1.1\r\nHost: a\n".len()));
        // Empty lines before the request line may end in LF alone.
        assert!(matches!(
            parse_head(b"\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Ok(Some(_))
        ));
    }

    /// RFC 9112 §3: the method is a token, the target has no control
    /// bytes, the version is `HTTP/1.<digit>` (case-sensitive, §2.3), and
    /// a request line longer than the server reads is answered 414.
    #[test]
    fn request_lines_are_checked() {
        for bad in [
            "G(T / HTTP/1.1",
            "G\x01T / HTTP/1.1",
            "GET /\x01 HTTP/1.1",
            "GET /a\x7fb HTTP/1.1",
            "GET /\tb HTTP/1.1",
            "GET / HTTP/1.A",
            "GET / http/1.1",
            "GET / HTTP/2.0",
            "GET / HTTP/1.10",
            "GET / HTTP/1.",
        ] {
            assert_eq!(head(bad), Err(Refusal::BadRequest), "{bad:?}");
        }
        assert_eq!(p("PATCH /a?b=c%20d HTTP/1.1"), Persistence::KeepAlive);
        assert_eq!(
            p("GET / HTTP/1.2\r\nHost: a"),
            Persistence::KeepAlive,
            "as 1.1"
        );
        assert_eq!(p("M-SEARCH * HTTP/1.1"), Persistence::KeepAlive);
        // A target past MAX_HEAD: 414, ended or not; a long field: 431.
        let target = "a".repeat(MAX_HEAD);
        let line = format!("GET /{target} HTTP/1.1");
        assert_eq!(parse_head(line.as_bytes()), Err(Refusal::UriTooLong));
        assert_eq!(head(&line), Err(Refusal::UriTooLong));
        let field = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {target}");
        assert_eq!(head(&field), Err(Refusal::HeadTooLarge));
        assert_eq!(parse_head(field.as_bytes()), Err(Refusal::HeadTooLarge));
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request without a Host field, any
    /// request with two, or a Host field whose value is no `uri-host [":"
    /// port]`, is answered 400; HTTP/1.0 may go without.
    #[test]
    fn host_fields_are_required_and_checked() {
        let h = |fields: &str| parse_head(format!("GET / HTTP/1.1{fields}\r\n\r\n").as_bytes());
        assert!(matches!(h(""), Err(Refusal::BadRequest)));
        assert!(matches!(
            h("\r\nHost: a\r\nHost: a"),
            Err(Refusal::BadRequest)
        ));
        for good in [
            "",
            "example.com",
            "example.com:8080",
            "10.0.0.1:80",
            "[::1]:80",
            "[fe80::1%25eth0]",
            "a-b_c~d.%41",
            "x:",
        ] {
            assert!(
                matches!(h(&format!("\r\nHost: {good}")), Ok(Some(_))),
                "{good:?}"
            );
        }
        for bad in [
            "a b",
            "a:b",
            "a:80:80",
            "user@host",
            "[::1",
            "[]",
            "[::1]x",
            "a/b",
            "a\x01",
        ] {
            assert!(
                matches!(h(&format!("\r\nHost: {bad}")), Err(Refusal::BadRequest)),
                "{bad:?}"
            );
        }
        let old = |fields: &str| parse_head(format!("GET / HTTP/1.0{fields}\r\n\r\n").as_bytes());
        assert!(matches!(old(""), Ok(Some(_))));
        assert!(matches!(
            old("\r\nHost: a\r\nHost: b"),
            Err(Refusal::BadRequest)
        ));
    }

    /// RFC 9110 §9.3.6: a `2xx` to CONNECT says a tunnel was established;
    /// none is, so it is refused (501), once its head could be read.
    #[test]
    fn connect_is_not_implemented() {
        let connect = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443";
        assert_eq!(head(connect), Err(Refusal::NotImplemented));
        assert_eq!(
            head("CONNECT example.com:443 HTTP/1.0"),
            Err(Refusal::NotImplemented)
        );
        // Framing that cannot be read is refused as such first.
        assert_eq!(
            head("CONNECT example.com:443 HTTP/1.1\r\nHost: a\r\nHost: b"),
            Err(Refusal::BadRequest)
        );
        // Methods are case-sensitive (§9.1): `connect` is another one.
        assert!(head("connect example.com:443 HTTP/1.1\r\nHost: a").is_ok());
        assert!(head("GET / HTTP/1.1\r\nHost: a").is_ok());
    }

    #[test]
    fn head_requests_and_100_continue() {
        assert!(head("HEAD / HTTP/1.1").unwrap().head_only);
        assert!(!head("GET / HTTP/1.1").unwrap().head_only);
        let h =
            head("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-Continue").unwrap();
        assert!(h.expect_continue);
        assert!(
            !head("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue")
                .unwrap()
                .expect_continue
        );
        assert!(
            !head("PUT / HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue")
                .unwrap()
                .expect_continue
        );
    }

    #[test]
    fn body_length_follows_rfc_9112_section_6_3() {
        let b = |t: &str| head(t).map(|h| h.body);
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12"),
            Ok(BodyLength::Bytes(12))
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3"),
            Ok(BodyLength::Bytes(3))
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, Chunked"),
            Ok(BodyLength::Chunked)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.0\r\nTransfer-Encoding: chunked"),
            Err(Refusal::BadRequest)
        );
        // Both: chunked wins, and the connection closes after the response.
        let h =
            head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked")
                .unwrap();
        assert_eq!(
            (h.body, h.persistence),
            (BodyLength::Chunked, Persistence::Close)
        );
    }

    #[test]
    fn empty_lines_before_a_head_count_against_its_limit() {
        // A peer sending CRLF forever is refused, not read forever.
        assert_eq!(
            parse_head(&b"\r\n".repeat(MAX_HEAD)),
            Err(Refusal::HeadTooLarge)
        );
        assert_eq!(parse_head(&b"\r\n".repeat(MAX_HEAD / 2)), Ok(None));
        assert_eq!(
            parse_head(&b"\r\n".repeat(MAX_HEAD / 2 + 1)),
            Err(Refusal::HeadTooLarge)
        );
        // Empty lines, head and blank line: MAX_HEAD bytes at most.
        let with = |total: usize| {
            let (pre, line, end) = (
                &b"\r\n\r\n"[..],
                &b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..],
                b"\r\n\r\n",
            );
            let pad = vec![b'a'; total - pre.len() - line.len() - end.len()];
            [pre, line, &pad, end].concat()
        };
        let at_limit = with(MAX_HEAD);
        assert_eq!(
            parse_head(&at_limit).map(|h| h.map(|(_, n)| n)),
            Ok(Some(MAX_HEAD))
        );
        assert_eq!(parse_head(&with(MAX_HEAD + 1)), Err(Refusal::HeadTooLarge));
    }

    #[test]
    fn whitespace_before_a_field_s_colon_is_refused() {
        for bad in [
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding\t: chunked",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 5",
            "GET / HTTP/1.1\r\nHost: a\r\n: empty name",
            "GET / HTTP/1.1\r\nHost: a\r\nX Y: z",
            "GET / HTTP/1.1\r\nHost: a\r\nX@: z",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b",
        ] {
            assert_eq!(head(bad), Err(Refusal::BadRequest), "{bad:?}");
        }
        // Whitespace after the colon, and around the value, is fine.
        assert_eq!(
            head("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked \t").map(|h| h.body),
            Ok(BodyLength::Chunked)
        );
        assert_eq!(
            head("GET / HTTP/1.1\r\nHost: a\r\nX-!#$%&'*+-.^_`|~09: v").map(|h| h.body),
            Ok(BodyLength::Bytes(0))
        );
    }

    #[test]
    fn lines_end_in_crlf_and_are_neither_folded_nor_without_colon() {
        for bad in [
            // Bare LF, bare CR (RFC 9112 §2.2).
            "GET / HTTP/1.1\nHost: a",
            "GET / HTTP/1.1\r\nHost: a\nContent-Length: 5",
            "GET / HTTP/1.1\rHost: a",
            "GET / HTTP/1.1\r\nHost: a\rb",
            // obs-fold (§5.2), whitespace before the first field (§2.2).
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n 6",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb",
            "GET / HTTP/1.1\r\n Host: a",
            // A field line without a colon (§5).
            "GET / HTTP/1.1\r\nHost a",
            "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding chunked",
        ] {
            assert_eq!(head(bad), Err(Refusal::BadRequest), "{bad:?}");
        }
        assert!(head("GET / HTTP/1.1\r\nHost: a\r\nX:").is_ok());
    }

    #[test]
    fn a_head_fed_in_pieces_is_scanned_once() {
        let req = b"\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
        let whole = parse_head(req);
        let mut scan = HeadScan::default();
        let mut got = Ok(None);
        for end in 1..=req.len() {
            got = scan.parse(&req[..end]);
            if got != Ok(None) {
                break;
            }
            // Nothing before the last 3 bytes is looked at again.
            assert!(scan.from + 3 >= end, "{end}: {scan:?}");
        }
        assert_eq!(got, whole);
        assert_eq!(scan, HeadScan::default(), "starts over for the next head");
        // Bytes looked at are not looked at again: a blank line put behind
        // the scan's back, where it looked already, goes unseen.
        let mut scan = HeadScan::default();
        assert_eq!(
            scan.parse(b"GET / HTTP/1.1\r\nHost: a\r\nX: abcdef"),
            Ok(None)
        );
        assert_eq!(
            scan.parse(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n: abcdefg"),
            Ok(None)
        );
        assert!(
            parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n: abcdefg").is_ok_and(|h| h.is_some())
        );
        // Refused in pieces as whole.
        let mut scan = HeadScan::default();
        let crlf = b"\r\n".repeat(MAX_HEAD);
        let mut refused = None;
        for end in (1..=crlf.len()).step_by(7) {
            if let Err(e) = scan.parse(&crlf[..end]) {
                refused = Some((e, end));
                break;
            }
        }
        assert_eq!(refused.map(|(e, _)| e), Some(Refusal::HeadTooLarge));
        assert!(refused.is_some_and(|(_, end)| end <= MAX_HEAD + 7));
    }

    /// Skips `body` fed in pieces of `step` bytes; returns what was left
    /// after the body's end.
    fn skip_all(length: BodyLength, body: &[u8], step: usize) -> Result<Vec<u8>, Refusal> {
        let mut s = BodySkip::new(length).expect("a body");
        let mut at = 0;
        while at < body.len() {
            let end = (at + step).min(body.len());
            let (n, done) = s.skip(&body[at..end])?;
            at += n;
            if done {
                return Ok(body[at..].to_vec());
            }
            assert_eq!(at, end, "everything short of the end is taken");
        }
        panic!("the body did not end");
    }

    #[test]
    fn bodies_are_skipped_in_any_pieces() {
        let chunked =
            b"5\r\nhello\r\n1A;name=v\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(
                skip_all(BodyLength::Chunked, chunked, step).unwrap(),
                b"NEXT",
                "{step}"
            );
            assert_eq!(
                skip_all(BodyLength::Bytes(5), b"helloNEXT", step).unwrap(),
                b"NEXT"
            );
        }
        assert_eq!(
            skip_all(BodyLength::Chunked, b"0\r\n\r\nX", 1).unwrap(),
            b"X"
        );
        // Whitespace and extensions after the size; quoted values; leading
        // zeros do not count against the 15 digits (§7.1: 1*HEXDIG).
        for ok in [
            &b"5 ;a\r\nhello\r\n0\r\n\r\nX"[..],
            b"5\t \t;a=\"q \\\" ;\"\t;b\r\nhello\r\n0\r\n\r\nX",
            b"00000000000000005\r\nhello\r\n0\r\n\r\nX",
            b"0000000000000000000000\r\n\r\nX",
            b"00fffffffffffffff;x\r\n0\r\n\r\nX",
        ] {
            // The last one's chunk never ends: its 2^60 - 1 bytes are
            // not there; it must get past its size line.
            let mut s = BodySkip::new(BodyLength::Chunked).unwrap();
            let r = s.skip(ok);
            if ok.starts_with(b"00f") {
                assert_eq!(r, Ok((ok.len(), false)));
                assert_eq!(
                    s,
                    BodySkip::Chunked(Chunk::Data((1 << 60) - 1 - b"0\r\n\r\nX".len() as u64))
                );
            } else {
                assert_eq!(
                    skip_all(BodyLength::Chunked, ok, 1).unwrap(),
                    b"X",
                    "{ok:?}"
                );
            }
        }
        assert_eq!(BodySkip::new(BodyLength::Bytes(0)), None);
    }

    #[test]
    fn malformed_chunks_are_refused() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\nhello",
            b"1234567890123456\r\n",
            // Chunk extensions: BWS then `;` after the size, no control
            // bytes but HTAB (RFC 9112 §7.1.1).
            b"2;\nxx\r\n45\r\n",
            b"5 6\r\nhello\r\n",
            b"5 \r\nhello\r\n",
            b"5\t=\r\nhello\r\n",
            b"5;a=\x01\r\nhello\r\n",
            b"5;a=\x7f\r\nhello\r\n",
            b"5;a\rb\r\nhello\r\n",
        ] {
            assert_eq!(
                skip_all(BodyLength::Chunked, &[bad, &b"0\r\n\r\n"[..]].concat(), 1),
                Err(Refusal::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Trailer lines end in CRLF (§7.1.2).
        for bad_trailer in [&b"0\r\nX: 1\n\r\n"[..], b"0\r\n\n", b"0\r\nX: 1\r\r\n\r\n"] {
            assert_eq!(
                skip_all(BodyLength::Chunked, bad_trailer, 1),
                Err(Refusal::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad_trailer)
            );
        }
        let long_ext = [
            &b"1;"[..],
            &vec![b'e'; MAX_CHUNK_META + 1],
            b"\r\nx\r\n0\r\n\r\n",
        ]
        .concat();
        assert_eq!(
            skip_all(BodyLength::Chunked, &long_ext, 64),
            Err(Refusal::BadRequest)
        );
        // A size line of leading zeros without end (§7.1 bounds nothing
        // there): refused, not read forever.
        let zeros = [&vec![b'0'; MAX_CHUNK_META + 1][..], b"\r\n\r\n"].concat();
        assert_eq!(
            skip_all(BodyLength::Chunked, &zeros, 64),
            Err(Refusal::BadRequest)
        );
        let long_trailer = [&b"0\r\n"[..], &vec![b't'; MAX_CHUNK_META + 1], b"\r\n\r\n"].concat();
        assert_eq!(
            skip_all(BodyLength::Chunked, &long_trailer, 64),
            Err(Refusal::BadRequest)
        );
    }
}
