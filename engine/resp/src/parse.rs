//! Request parser (to be completed): see the module docs in lib.rs.
//!
//! API contract used by the engine and the proxy:
//!
//! ```ignore
//! let mut p = RequestParser::new(Limits::default());
//! // buf = the connection's read buffer, starting at the first unconsumed byte
//! match p.parse(buf) {
//!     Ok(Some(consumed)) => { for i in 0..p.argc() { let a: &[u8] = p.arg(buf, i); } /* drop `consumed` bytes */ }
//!     Ok(None) => { /* incomplete: read more, call parse again with the grown buffer (same start) */ }
//!     Err(e) => { /* reply "-{e}\r\n" (e.g. "-ERR Protocol error: invalid bulk length"), then close */ }
//! }
//! ```

/// Size limits enforced while parsing, before anything is buffered
/// (Redis names and defaults: `proto-max-bulk-len` 512 MB, inline 64 KB, multibulk 1M args).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `proto-max-bulk-len`: the largest accepted bulk string, in bytes.
    pub max_bulk_len: usize,
    /// The largest inline request line, in bytes (Redis `PROTO_INLINE_MAX_SIZE`, 64 KB).
    pub max_inline_len: usize,
    /// The largest multibulk count (Redis: 1024*1024).
    pub max_multibulk_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_multibulk_len: 1024 * 1024,
        }
    }
}

/// Malformed input. `Display` gives Redis's reply text without the leading `-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// `ERR Protocol error: invalid multibulk length`
    InvalidMultibulkLength,
    /// `ERR Protocol error: invalid bulk length`
    InvalidBulkLength,
    /// `ERR Protocol error: expected '$', got 'X'`
    ExpectedDollar(u8),
    /// `ERR Protocol error: too big inline request`
    TooBigInline,
    /// `ERR Protocol error: too big mbulk count string`
    TooBigMbulkCount,
    /// `ERR Protocol error: too big bulk count string`
    TooBigBulkCount,
    /// `ERR Protocol error: unbalanced quotes in request`
    UnbalancedQuotes,
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
                write!(f, "ERR Protocol error: expected '$', got '{}'", *c as char)
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
        }
    }
}

/// Resumable request parser; one per connection. Holds the argument ranges of the last
/// complete request and, while a request is incomplete, how far it got.
pub struct RequestParser {
    limits: Limits,
}

impl RequestParser {
    pub fn new(limits: Limits) -> Self {
        RequestParser { limits }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Parses one request from the start of `buf`. `Ok(Some(n))`: a complete request of `n`
    /// bytes (its arguments via [`argc`](Self::argc)/[`arg`](Self::arg)); `Ok(None)`: incomplete;
    /// an empty inline line is `Ok(Some(n))` with `argc() == 0` (the caller skips it).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let _ = buf;
        todo!()
    }

    /// Number of arguments of the last complete request.
    pub fn argc(&self) -> usize {
        todo!()
    }

    /// Argument `i` of the last complete request; `buf` must be the buffer given to `parse`.
    pub fn arg<'b>(&'b self, buf: &'b [u8], i: usize) -> &'b [u8] {
        let _ = (buf, i);
        todo!()
    }
}
