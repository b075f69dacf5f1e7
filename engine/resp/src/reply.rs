//! Reply frame scanner for the proxy: how many bytes the first complete RESP2/RESP3 frame of a
//! backend's output takes, without decoding it.
//!
//! Frame shapes (spec: <https://redis.io/docs/latest/develop/reference/protocol-spec/>):
//!
//! | first byte | shape | children |
//! |---|---|---|
//! | `+` `-` `:` `_` `,` `#` `(` | one line up to `\r\n` | 0 |
//! | `$` `!` `=` | `<len>\r\n<len bytes>\r\n`; `$-1\r\n` is the RESP2 null | 0 |
//! | `*` `~` `>` | `<n>\r\n` then `n` frames; `*-1\r\n` is the RESP2 null array | n |
//! | `%` | `<n>\r\n` then `n` key/value pairs | 2n |
//! | <code>&#124;</code> (attribute) | `<n>\r\n` then `n` pairs, then the frame it annotates | 2n + 1 |
//!
//! **Attributes** are not frames of their own here: an attribute and the frame that follows it
//! are scanned as one unit (at the top level, `frame_len` covers both), because the attribute
//! only annotates that reply and a proxy forwards them together.
//!
//! Streamed strings and aggregates (`$?`, `*?`) are not supported: Redis never sends them.
//!
//! Nesting is handled with a counter of frames still to read, not recursion, so hostile input
//! like a million `*1\r\n` cannot overflow the stack. Lengths are strict decimal integers
//! (Redis `string2ll`); every line must end in `\r\n` and every bulk body must be followed by
//! `\r\n` (stricter than the request parser: a backend that breaks framing must be dropped, not
//! guessed at). Malformed input is [`ProtocolError::InvalidReply`].
//!
//! [`FrameScanner`] remembers its progress between calls, so a huge reply (an `LRANGE` of a
//! million elements) arriving in pieces is scanned in O(total bytes).

use crate::int::parse_i64;
use crate::parse::ProtocolError;

/// Byte length of the first complete frame of `buf`, `Ok(None)` if it is not complete yet.
/// One-shot form of [`FrameScanner::scan`].
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    FrameScanner::new().scan(buf)
}

/// Resumable frame scanner: call [`scan`](Self::scan) with the same growing buffer (same start)
/// until it returns `Ok(Some(n))`; the next call then starts a new frame at `buf[0]`.
#[derive(Clone, Debug, Default)]
pub struct FrameScanner {
    /// Offset of the next frame header not scanned yet.
    pos: usize,
    /// Frames still to read before the top-level frame is complete (0 = not started).
    pending: u64,
    /// Bytes from `pos` already searched for `\r` without finding it.
    scanned: usize,
}

impl FrameScanner {
    pub fn new() -> Self {
        FrameScanner::default()
    }

    /// Scans the first frame of `buf`. See the module docs for shapes and errors.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        if self.pending == 0 || buf.len() < self.pos + self.scanned {
            *self = FrameScanner {
                pos: 0,
                pending: 1,
                scanned: 0,
            };
        }
        let result = self.scan_inner(buf);
        if !matches!(result, Ok(None)) {
            self.pending = 0;
        }
        result
    }

    fn scan_inner(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        while self.pending > 0 {
            let from = self.pos + self.scanned;
            let Some(cr) = buf[from..].iter().position(|&b| b == b'\r') else {
                self.scanned = buf.len() - self.pos;
                return Ok(None);
            };
            let cr = from + cr;
            if cr + 1 >= buf.len() {
                self.scanned = cr - self.pos;
                return Ok(None);
            }
            if buf[cr + 1] != b'\n' {
                return Err(ProtocolError::InvalidReply("line not ended by CRLF"));
            }
            if cr == self.pos {
                return Err(ProtocolError::InvalidReply("empty line instead of a frame"));
            }
            let tag = buf[self.pos];
            let line = &buf[self.pos + 1..cr];
            let next = cr + 2;
            let children: u64 = match tag {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
                b'$' | b'!' | b'=' => {
                    let len = length(line, tag == b'$')?;
                    if let Some(len) = len {
                        let end = next
                            .checked_add(len)
                            .and_then(|e| e.checked_add(2))
                            .ok_or(ProtocolError::InvalidReply("bulk length too large"))?;
                        if buf.len() < end {
                            // Remember nothing partial: the header is re-read next time (a
                            // short line), the body is not scanned at all.
                            return Ok(None);
                        }
                        if &buf[end - 2..end] != b"\r\n" {
                            return Err(ProtocolError::InvalidReply("bulk not ended by CRLF"));
                        }
                        self.advance(end, 0)?;
                    } else {
                        self.advance(next, 0)?;
                    }
                    continue;
                }
                b'*' | b'~' | b'>' => length(line, tag == b'*')?.unwrap_or(0) as u64,
                b'%' => pairs(length(line, false)?)?,
                b'|' => pairs(length(line, false)?)?
                    .checked_add(1)
                    .ok_or(ProtocolError::InvalidReply("aggregate too large"))?,
                _ => return Err(ProtocolError::InvalidReply("unknown frame type")),
            };
            self.advance(next, children)?;
        }
        Ok(Some(self.pos))
    }

    /// One pending frame was read up to `next`; it brings `children` frames of its own.
    fn advance(&mut self, next: usize, children: u64) -> Result<(), ProtocolError> {
        self.pos = next;
        self.scanned = 0;
        self.pending = (self.pending - 1)
            .checked_add(children)
            .ok_or(ProtocolError::InvalidReply("aggregate too large"))?;
        Ok(())
    }
}

/// A length header: `Some(n)` for n ≥ 0, `None` for the RESP2 null `-1` where allowed.
fn length(line: &[u8], null_allowed: bool) -> Result<Option<usize>, ProtocolError> {
    match parse_i64(line) {
        Some(-1) if null_allowed => Ok(None),
        Some(n) if n >= 0 => usize::try_from(n)
            .map(Some)
            .map_err(|_| ProtocolError::InvalidReply("length too large")),
        _ => Err(ProtocolError::InvalidReply("invalid length")),
    }
}

fn pairs(n: Option<usize>) -> Result<u64, ProtocolError> {
    (n.unwrap_or(0) as u64)
        .checked_mul(2)
        .ok_or(ProtocolError::InvalidReply("aggregate too large"))
}
