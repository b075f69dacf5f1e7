//! Request parser: multibulk and inline requests, resumable across reads, no allocation per
//! request once warm.
//!
//! ```ignore
//! let mut p = RequestParser::new(Limits::default());
//! // buf = the connection's read buffer, starting at the first unconsumed byte
//! match p.parse(buf) {
//!     Ok(Some(consumed)) => { for i in 0..p.argc() { let a: &[u8] = p.arg(buf, i); } /* drop `consumed` bytes */ }
//!     Ok(None) => { /* incomplete: read more, call parse again with the grown buffer (same start) */ }
//!     Err(e) => { e.write_reply(&mut out); /* "-ERR Protocol error: …\r\n", then close */ }
//! }
//! ```
//!
//! # Shapes
//!
//! - **Multibulk** (first byte `*`): `*<count>\r\n` then `count` times `$<len>\r\n<len bytes>\r\n`.
//!   Arguments are `(start, end)` byte ranges into the caller's buffer: nothing is copied.
//! - **Inline** (any other first byte): one line ending in `\n` (an optional `\r` before it is
//!   dropped), split like Redis's `sdssplitargs`. Unquoted words are ranges into the buffer; a
//!   word with `"double"` or `'single'` quotes is unescaped into a scratch `Vec` kept by the
//!   parser. [`RequestParser::arg`] hides the difference.
//! - A complete request with no arguments (an empty or blank inline line, `*0`, `*-1`) is
//!   `Ok(Some(n))` with `argc() == 0`: the caller drops `n` bytes and sends no reply (Redis does
//!   the same).
//!
//! # Resuming
//!
//! An incomplete request is `Ok(None)`. The parser keeps how far it got (arguments parsed, the
//! offset of the next header, how far a line end was already searched for), so calling `parse`
//! again with the grown buffer (same start) only looks at new bytes: a request of a million
//! arguments that arrives a few bytes at a time costs O(total bytes), not O(n²). After
//! `Ok(Some(_))` or an error the next call starts a new request. If the buffer given is shorter
//! than the progress recorded (caller misuse), the parser starts over rather than panic.
//!
//! # Errors and limits (Redis 7.0 `networking.c`: `processMultibulkBuffer`,
//! `processInlineBuffer`, `string2ll` in `util.c`; each checked byte for byte against
//! redis-server 7.0.15)
//!
//! | input | result |
//! |---|---|
//! | `*` count not a strict integer (`*abc`, `*-0`, `*01`, `*+1`, `*`), or > `max_multibulk_len` | `invalid multibulk length` |
//! | `*` count ≤ 0 | empty request, consumed, no reply |
//! | bulk header not starting with `$` (checked once the whole line is in) | `expected '$', got 'f'` (CR/LF shown as a space, other bytes raw) |
//! | `$` length not a strict integer, < 0, or > `max_bulk_len` | `invalid bulk length`, before the body is buffered |
//! | no CR within `max_inline_len` (64 KB) bytes of a `*` / `$` header start | `too big mbulk count string` / `too big bulk count string` |
//! | no LF within `max_inline_len` bytes of an inline request | `too big inline request` |
//! | inline quote not closed, or closing quote followed by a non-space | `unbalanced quotes in request` |
//!
//! Quirks kept on purpose, because clients and tests observe them on real Redis:
//! - A header line ends at the first `\r`; the byte after it is skipped whatever it is, and the
//!   two bytes after a bulk body are skipped without checking they are `\r\n`
//!   (`*1\r\n$4\r\nPINGXY` is a valid PING).
//! - Redis finds line ends with `strchr`, which stops at a NUL byte: a NUL before the line end
//!   of a header or an inline request means "no line end yet", so the request waits and is then
//!   refused as too big (a NUL inside a bulk body is of course fine).
//! - The multibulk count limit of Redis 7 is `INT_MAX` (the 1M limit of Redis ≤ 6 is gone), so
//!   that is the default of [`Limits::max_multibulk_len`]. Memory still grows only with the
//!   arguments actually received (argument slots are reserved at most 1024 at a time).

use crate::int::parse_i64;

/// Size limits enforced while parsing, before anything is buffered
/// (Redis names and defaults: `proto-max-bulk-len` 512 MB, `PROTO_INLINE_MAX_SIZE` 64 KB,
/// multibulk count `INT_MAX` in Redis 7).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `proto-max-bulk-len`: the largest accepted bulk string, in bytes.
    pub max_bulk_len: usize,
    /// The largest inline request line, and the longest `*`/`$` header searched for its CR,
    /// in bytes (Redis `PROTO_INLINE_MAX_SIZE`, 64 KB).
    pub max_inline_len: usize,
    /// The largest multibulk count (Redis 7: `INT_MAX`; Redis ≤ 6: 1024*1024).
    pub max_multibulk_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_multibulk_len: i32::MAX as usize,
        }
    }
}

/// Malformed input. `Display` gives Redis's reply text without the leading `-`;
/// [`write_reply`](Self::write_reply) gives the exact wire bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// `ERR Protocol error: invalid multibulk length`
    InvalidMultibulkLength,
    /// `ERR Protocol error: invalid bulk length`
    InvalidBulkLength,
    /// `ERR Protocol error: expected '$', got 'X'` (X = the raw byte; CR and LF print as a space)
    ExpectedDollar(u8),
    /// `ERR Protocol error: too big inline request`
    TooBigInline,
    /// `ERR Protocol error: too big mbulk count string`
    TooBigMbulkCount,
    /// `ERR Protocol error: too big bulk count string`
    TooBigBulkCount,
    /// `ERR Protocol error: unbalanced quotes in request`
    UnbalancedQuotes,
    /// A malformed *reply* frame (see [`crate::reply`]); the text says what was wrong.
    /// Not a Redis error string: the proxy logs it and drops the backend connection.
    InvalidReply(&'static str),
}

impl ProtocolError {
    /// Appends the error reply exactly as Redis sends it: `-ERR Protocol error: …\r\n`.
    /// Differs from `format!("-{self}\r\n")` only for [`ExpectedDollar`](Self::ExpectedDollar)
    /// with a non-ASCII byte, which Redis echoes raw (`%c`) and `Display` cannot.
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        out.push(b'-');
        match self {
            ProtocolError::ExpectedDollar(c) => {
                out.extend_from_slice(b"ERR Protocol error: expected '$', got '");
                out.push(redis_error_byte(*c));
                out.push(b'\'');
            }
            other => out.extend_from_slice(other.to_string().as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Redis's `addReplyErrorFormat` turns CR and LF into spaces so the reply stays one line.
fn redis_error_byte(c: u8) -> u8 {
    match c {
        b'\r' | b'\n' => b' ',
        c => c,
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::InvalidMultibulkLength => {
                f.write_str("ERR Protocol error: invalid multibulk length")
            }
            ProtocolError::InvalidBulkLength => {
                f.write_str("ERR Protocol error: invalid bulk length")
            }
            ProtocolError::ExpectedDollar(c) => {
                write!(
                    f,
                    "ERR Protocol error: expected '$', got '{}'",
                    redis_error_byte(*c) as char
                )
            }
            ProtocolError::TooBigInline => {
                f.write_str("ERR Protocol error: too big inline request")
            }
            ProtocolError::TooBigMbulkCount => {
                f.write_str("ERR Protocol error: too big mbulk count string")
            }
            ProtocolError::TooBigBulkCount => {
                f.write_str("ERR Protocol error: too big bulk count string")
            }
            ProtocolError::UnbalancedQuotes => {
                f.write_str("ERR Protocol error: unbalanced quotes in request")
            }
            ProtocolError::InvalidReply(why) => {
                write!(f, "ERR Protocol error: invalid reply: {why}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Where one argument's bytes are: in the caller's buffer, or unescaped into the scratch.
#[derive(Clone, Copy, Debug)]
enum Span {
    Buf { start: usize, end: usize },
    Scratch { start: usize, end: usize },
}

/// Progress through the current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing parsed yet: the first byte decides multibulk or inline.
    Start,
    /// After the `*` header: `left` arguments to go; `bulk_len` is known once the current
    /// argument's `$` header is parsed.
    Multibulk {
        left: usize,
        bulk_len: Option<usize>,
    },
    /// Waiting for the line end of an inline request.
    Inline,
    /// The last call returned a complete request (its arguments stay readable) or an error;
    /// the next call starts afresh.
    Done,
}

/// Result of looking for a line end.
enum LineEnd {
    /// The terminator byte is at this offset and, for header lines, one more byte follows.
    At(usize),
    /// Not (yet) found.
    Missing,
}

/// Argument slots kept allocated between requests (more are freed after a request that
/// needed them).
const KEEP_ARGS: usize = 1024;
/// Scratch bytes kept allocated between requests (inline requests are at most 64 KB anyway).
const KEEP_SCRATCH: usize = 64 * 1024;

/// Resumable request parser; one per connection. Holds the argument ranges of the last
/// complete request and, while a request is incomplete, how far it got.
pub struct RequestParser {
    limits: Limits,
    phase: Phase,
    /// Offset of the first byte of the current request not consumed yet (a header or a body).
    pos: usize,
    /// Offset from which to continue searching for a line end; bytes in `pos..scan` hold none.
    scan: usize,
    /// A NUL byte was met before any line end: like Redis's `strchr`, never look further.
    nul_seen: bool,
    /// Arguments of the current request; reused (cleared, not freed) across requests.
    args: Vec<Span>,
    /// Unescaped bytes of quoted inline arguments; reused across requests.
    scratch: Vec<u8>,
}

impl RequestParser {
    pub fn new(limits: Limits) -> Self {
        RequestParser {
            limits,
            phase: Phase::Start,
            pos: 0,
            scan: 0,
            nul_seen: false,
            args: Vec::new(),
            scratch: Vec::new(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn reset(&mut self) {
        self.phase = Phase::Start;
        self.pos = 0;
        self.scan = 0;
        self.nul_seen = false;
        self.args.clear();
        self.scratch.clear();
        // Stay allocation-free for ordinary requests without pinning the memory of one huge
        // request to the connection for its lifetime.
        self.args.shrink_to(KEEP_ARGS);
        self.scratch.shrink_to(KEEP_SCRATCH);
    }

    /// Parses one request from the start of `buf`. `Ok(Some(n))`: a complete request of `n`
    /// bytes (its arguments via [`argc`](Self::argc)/[`arg`](Self::arg)); `Ok(None)`: incomplete;
    /// an empty inline line is `Ok(Some(n))` with `argc() == 0` (the caller skips it).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        if self.phase == Phase::Done || buf.len() < self.scan.max(self.pos) {
            self.reset();
        }
        let result = self.parse_inner(buf);
        if !matches!(result, Ok(None)) {
            self.phase = Phase::Done;
        }
        if result.is_err() {
            self.args.clear();
        }
        result
    }

    fn parse_inner(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        loop {
            match self.phase {
                Phase::Start => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first == b'*' {
                        let Some(cr) = self.find_header_end(buf) else {
                            return self.too_big(buf, ProtocolError::TooBigMbulkCount);
                        };
                        let count = parse_i64(&buf[1..cr])
                            .filter(|&n| n <= self.limits.max_multibulk_len as i64)
                            .ok_or(ProtocolError::InvalidMultibulkLength)?;
                        self.pos = cr + 2;
                        self.scan = self.pos;
                        if count <= 0 {
                            return Ok(Some(self.pos));
                        }
                        // `count` fits: it is at most `max_multibulk_len`, a usize.
                        let left = count as usize;
                        // Reserve only what a small request needs; a huge count grows the
                        // vector with the arguments that actually arrive (Redis: min(n, 1024)).
                        self.args.reserve(left.min(1024));
                        self.phase = Phase::Multibulk {
                            left,
                            bulk_len: None,
                        };
                    } else {
                        self.phase = Phase::Inline;
                    }
                }
                Phase::Multibulk { left, bulk_len } => {
                    return self.parse_multibulk(buf, left, bulk_len);
                }
                Phase::Inline => return self.parse_inline(buf),
                Phase::Done => unreachable!("parse resets a finished request first"),
            }
        }
    }

    /// Reads the arguments of a multibulk request whose `*` header is consumed.
    fn parse_multibulk(
        &mut self,
        buf: &[u8],
        mut left: usize,
        mut bulk_len: Option<usize>,
    ) -> Result<Option<usize>, ProtocolError> {
        while left > 0 {
            let len = match bulk_len {
                Some(len) => len,
                None => {
                    let Some(cr) = self.find_header_end(buf) else {
                        self.phase = Phase::Multibulk { left, bulk_len };
                        return self.too_big(buf, ProtocolError::TooBigBulkCount);
                    };
                    if buf[self.pos] != b'$' {
                        return Err(ProtocolError::ExpectedDollar(buf[self.pos]));
                    }
                    let len = parse_i64(&buf[self.pos + 1..cr])
                        .filter(|&n| n >= 0)
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|&n| n <= self.limits.max_bulk_len)
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    self.pos = cr + 2;
                    self.scan = self.pos;
                    len
                }
            };
            // The body plus the two bytes Redis skips after it (unchecked: see module docs).
            if buf.len() - self.pos < len.saturating_add(2) {
                self.phase = Phase::Multibulk {
                    left,
                    bulk_len: Some(len),
                };
                return Ok(None);
            }
            self.args.push(Span::Buf {
                start: self.pos,
                end: self.pos + len,
            });
            self.pos += len + 2;
            self.scan = self.pos;
            left -= 1;
            bulk_len = None;
        }
        Ok(Some(self.pos))
    }

    /// Reads an inline request: one line ending in `\n`, split like `sdssplitargs`.
    fn parse_inline(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let LineEnd::At(lf) = self.find_byte(buf, b'\n') else {
            return self.too_big(buf, ProtocolError::TooBigInline);
        };
        let end = if lf > 0 && buf[lf - 1] == b'\r' {
            lf - 1
        } else {
            lf
        };
        split_args(&buf[..end], &mut self.args, &mut self.scratch)?;
        Ok(Some(lf + 1))
    }

    /// Finds the `\r` ending the header line that starts at `self.pos`, requiring one more
    /// byte after it (Redis skips that byte unchecked).
    fn find_header_end(&mut self, buf: &[u8]) -> Option<usize> {
        match self.find_byte(buf, b'\r') {
            LineEnd::At(cr) if cr + 2 <= buf.len() => Some(cr),
            LineEnd::At(cr) => {
                // Found, but the byte after it is not in yet: look here again next time.
                self.scan = cr;
                None
            }
            LineEnd::Missing => None,
        }
    }

    /// Searches `buf[self.scan..]` for `byte`, stopping at a NUL as `strchr` does, and records
    /// how far it looked so the next call continues from there.
    fn find_byte(&mut self, buf: &[u8], byte: u8) -> LineEnd {
        if self.nul_seen {
            return LineEnd::Missing;
        }
        let from = self.scan;
        match buf[from..].iter().position(|&b| b == byte || b == 0) {
            Some(i) if buf[from + i] == byte => LineEnd::At(from + i),
            Some(i) => {
                self.nul_seen = true;
                self.scan = from + i;
                LineEnd::Missing
            }
            None => {
                self.scan = buf.len();
                LineEnd::Missing
            }
        }
    }

    /// No line end yet: wait, unless more than `max_inline_len` bytes of the line are in.
    fn too_big(&self, buf: &[u8], err: ProtocolError) -> Result<Option<usize>, ProtocolError> {
        if buf.len() - self.pos > self.limits.max_inline_len {
            Err(err)
        } else {
            Ok(None)
        }
    }

    /// Number of arguments of the last complete request (0 while a request is incomplete).
    #[inline]
    pub fn argc(&self) -> usize {
        if self.phase == Phase::Done {
            self.args.len()
        } else {
            0
        }
    }

    /// Argument `i` of the last complete request; `buf` must be the buffer given to `parse`.
    /// Panics if `i >= argc()` or `buf` is shorter than the request.
    #[inline]
    pub fn arg<'b>(&'b self, buf: &'b [u8], i: usize) -> &'b [u8] {
        assert!(i < self.argc(), "argument {i} of {}", self.argc());
        match self.args[i] {
            Span::Buf { start, end } => &buf[start..end],
            Span::Scratch { start, end } => &self.scratch[start..end],
        }
    }

    /// The arguments of the last complete request, in order.
    pub fn args<'b>(&'b self, buf: &'b [u8]) -> impl ExactSizeIterator<Item = &'b [u8]> + 'b {
        (0..self.argc()).map(move |i| self.arg(buf, i))
    }
}

/// C `isspace` in the "C" locale: the blanks `sdssplitargs` skips between arguments.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The bytes that end an unquoted argument in `sdssplitargs` (note: not `\v`/`\f`, which are
/// skipped between arguments but kept inside one).
fn ends_word(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline line into arguments exactly like Redis's `sdssplitargs` (`sds.c`).
/// `line` starts at offset 0 of the caller's buffer and holds no NUL (see `find_byte`); the
/// end of `line` plays the part of C's terminating NUL.
fn split_args(
    line: &[u8],
    args: &mut Vec<Span>,
    scratch: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    // C reads past the last byte as NUL; so do we.
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Ok(());
        }
        // Fast path: an unquoted word is a range of the buffer.
        let word_end = line[p..]
            .iter()
            .position(|&b| ends_word(b) || b == b'"' || b == b'\'')
            .map_or(line.len(), |i| p + i);
        if !matches!(at(word_end), b'"' | b'\'') {
            args.push(Span::Buf {
                start: p,
                end: word_end,
            });
            p = word_end + 1;
            continue;
        }
        // Slow path: the word has quotes; unescape it into the scratch.
        let start = scratch.len();
        scratch.extend_from_slice(&line[p..word_end]);
        p = word_end;
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = at(p);
            let mut done = false;
            if in_double {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && let (Some(hi), Some(lo)) = (hex_value(at(p + 2)), hex_value(at(p + 3)))
                {
                    scratch.push(hi * 16 + lo);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    scratch.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a blank or the end of the line.
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    scratch.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    scratch.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    scratch.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    other => scratch.push(other),
                }
            }
            if at(p) != 0 {
                p += 1;
            }
            if done {
                break;
            }
        }
        args.push(Span::Scratch {
            start,
            end: scratch.len(),
        });
    }
}

/// Splits `line` into owned arguments like Redis's `sdssplitargs`; `None` on unbalanced
/// quotes (a NUL byte ends the line, as in C).
pub fn split_line(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let (mut spans, mut scratch) = (Vec::new(), Vec::new());
    split_args(line, &mut spans, &mut scratch).ok()?;
    Some(
        spans
            .iter()
            .map(|s| match *s {
                Span::Buf { start, end } => line[start..end].to_vec(),
                Span::Scratch { start, end } => scratch[start..end].to_vec(),
            })
            .collect(),
    )
}
