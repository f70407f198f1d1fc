//! HTTP/1.1 request framing for `http-server` (RFC 9112), sans I/O: where a
//! request's head ends and what it asks for (HEAD, persistence, 100-continue),
//! and how long its body is (§6.3). A body is skipped as it arrives (the
//! fixed response does not read it), never held whole.

/// Longest request head (request line and fields): past it, 431.
pub(super) const MAX_HEAD: usize = 16 * 1024;

/// Longest chunk extension, and longest trailer section, of a chunked body.
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
    /// A request line or framing that cannot be read (an invalid or
    /// conflicting `Content-Length`, a transfer coding other than chunked
    /// last, a malformed chunk): 400, as §6.3 asks.
    BadRequest,
}

/// The head at the start of `input`, with the bytes it takes (empty lines
/// before it included: §2.2); `Ok(None)` while it is incomplete.
pub(super) fn parse_head(input: &[u8]) -> Result<Option<(Head, usize)>, Refusal> {
    let skip = input
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(input.len());
    let rest = &input[skip..];
    let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if rest.len() > MAX_HEAD {
            Err(Refusal::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    if end > MAX_HEAD {
        return Err(Refusal::HeadTooLarge);
    }
    let head = read_head(&rest[..end])?;
    Ok(Some((head, skip + end + 4)))
}

/// Reads a complete head (without its blank line).
fn read_head(head: &[u8]) -> Result<Head, Refusal> {
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.trim_ascii_end());
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::BadRequest);
    };
    // The version's name is case-sensitive (RFC 9112 §2.3); taken in any
    // case, as before.
    let v1 = version.len() == 8 && version[..7].eq_ignore_ascii_case(b"HTTP/1.");
    if method.is_empty() || target.is_empty() || !v1 {
        return Err(Refusal::BadRequest);
    }
    let http10 = version.eq_ignore_ascii_case(b"HTTP/1.0");
    let (mut close, mut keep_alive, mut continue_) = (false, false, false);
    let mut length: Option<u64> = None;
    let mut coding: Option<bool> = None;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"connection") {
            close |= lists(value, "close");
            keep_alive |= lists(value, "keep-alive");
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // A list of identical values is one value (§6.3 item 5).
            for v in value.split(|&b| b == b',') {
                let n = decimal(v.trim_ascii()).ok_or(Refusal::BadRequest)?;
                if length.is_some_and(|l| l != n) {
                    return Err(Refusal::BadRequest);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only the last coding of all the fields counts: chunked or not.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            coding = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"expect") {
            continue_ = value.eq_ignore_ascii_case(b"100-continue");
        }
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
    Ok(Head {
        persistence,
        head_only: method == b"HEAD",
        expect_continue: continue_ && !http10 && body != BodyLength::Bytes(0),
        body,
    })
}

/// Whether the comma-separated field value lists `option` (RFC 9110
/// §7.6.1: case-insensitive tokens).
fn lists(value: &[u8], option: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(option.as_bytes()))
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

/// A chunked body's reading position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// In a chunk-size line: the size so far and its digits.
    Size { size: u64, digits: u8 },
    /// In a chunk extension (skipped), `len` bytes of it so far.
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
}

impl BodySkip {
    /// The skipper for a body of `length` (none for a zero length).
    pub(super) fn new(length: BodyLength) -> Option<BodySkip> {
        match length {
            BodyLength::Bytes(0) => None,
            BodyLength::Bytes(n) => Some(BodySkip::Bytes(n)),
            BodyLength::Chunked => Some(BodySkip::Chunked(Chunk::Size { size: 0, digits: 0 })),
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
        *self = match *self {
            Chunk::Size { size, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' if digits < 15 => Chunk::Size {
                    size: size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0)),
                    digits: digits + 1,
                },
                b';' | b' ' | b'\t' if digits > 0 => Chunk::Ext { size, len: 0 },
                b'\r' if digits > 0 => Chunk::SizeLf { size },
                _ => return bad,
            },
            Chunk::Ext { size, len } => match b {
                b'\r' => Chunk::SizeLf { size },
                _ if len < MAX_CHUNK_META => Chunk::Ext { size, len: len + 1 },
                _ => return bad,
            },
            Chunk::SizeLf { size } => match b {
                b'\n' if size == 0 => Chunk::Trailer { len: 0, line: 0 },
                b'\n' => Chunk::Data(size),
                _ => return bad,
            },
            Chunk::Data(_) => unreachable!("data is skipped in bulk"),
            Chunk::DataEnd { lf: false } if b == b'\r' => Chunk::DataEnd { lf: true },
            Chunk::DataEnd { lf: true } if b == b'\n' => Chunk::Size { size: 0, digits: 0 },
            Chunk::DataEnd { .. } => return bad,
            Chunk::Trailer { len, .. } if len >= MAX_CHUNK_META => return bad,
            Chunk::Trailer { len, line } => match b {
                // An empty line ends the trailer section, and the body.
                b'\n' if line == 0 => return Ok(true),
                b'\n' => Chunk::Trailer {
                    len: len + 1,
                    line: 0,
                },
                b'\r' => Chunk::Trailer { len: len + 1, line },
                _ => Chunk::Trailer {
                    len: len + 1,
                    line: line + 1,
                },
            },
        };
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Head, Refusal> {
        let with_end = format!("{text}\r\n\r\n");
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
    fn heads_are_found_after_empty_lines_and_bounded() {
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        let (h, n) = parse_head(b"\r\n\r\nGET / HTTP/1.1\r\n\r\nGET")
            .unwrap()
            .unwrap();
        assert_eq!((h.head_only, h.body, n), (false, BodyLength::Bytes(0), 22));
        // Empty lines alone are no request.
        assert_eq!(parse_head(b"\r\n\r\n\r\n\r\n"), Ok(None));
        let long = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse_head(&long), Err(Refusal::HeadTooLarge));
        assert_eq!(parse_head(&long[..MAX_HEAD]), Ok(None));
        assert_eq!(head("GET /"), Err(Refusal::BadRequest));
        assert_eq!(head("GET / HTTP/1.1 x"), Err(Refusal::BadRequest));
        assert_eq!(head("GET / SPDY/3"), Err(Refusal::BadRequest));
    }

    #[test]
    fn head_requests_and_100_continue() {
        assert!(head("HEAD / HTTP/1.1").unwrap().head_only);
        assert!(!head("GET / HTTP/1.1").unwrap().head_only);
        let h = head("PUT / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-Continue").unwrap();
        assert!(h.expect_continue);
        assert!(
            !head("PUT / HTTP/1.1\r\nExpect: 100-continue")
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
            b("POST / HTTP/1.1\r\nContent-Length: 12"),
            Ok(BodyLength::Bytes(12))
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: 3, 3"),
            Ok(BodyLength::Bytes(3))
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: 3, 4"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: -1"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: +1"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked"),
            Ok(BodyLength::Chunked)
        );
        assert_eq!(
            b("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip"),
            Err(Refusal::BadRequest)
        );
        assert_eq!(
            b("POST / HTTP/1.0\r\nTransfer-Encoding: chunked"),
            Err(Refusal::BadRequest)
        );
        // Both: chunked wins, and the connection closes after the response.
        let h = head("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked").unwrap();
        assert_eq!(
            (h.body, h.persistence),
            (BodyLength::Chunked, Persistence::Close)
        );
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
        ] {
            assert_eq!(
                skip_all(BodyLength::Chunked, &[bad, &b"0\r\n\r\n"[..]].concat(), 1),
                Err(Refusal::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
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
        let long_trailer = [&b"0\r\n"[..], &vec![b't'; MAX_CHUNK_META + 1], b"\r\n\r\n"].concat();
        assert_eq!(
            skip_all(BodyLength::Chunked, &long_trailer, 64),
            Err(Refusal::BadRequest)
        );
    }
}
