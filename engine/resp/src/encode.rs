//! Reply encoder: appends RESP2 or RESP3 frames to an output buffer.
//!
//! Every function appends one frame (or a frame header such as an array length) to `out`.
//! Where RESP2 has no type of its own, the RESP3 type degrades the way Redis 7 does it
//! (redis `networking.c`, `addReplyMapLen`, `addReplyDouble`, `addReplyNull`…):
//!
//! | RESP3 | RESP2 |
//! |---|---|
//! | null `_` | null bulk `$-1` (or null array `*-1` via [`ReplyWriter::null_array`]) |
//! | map `%n` | array `*2n` |
//! | set `~n` | array `*n` |
//! | double `,d` | bulk string of the same text |
//! | boolean `#t` | integer `:1` |
//! | verbatim `=n\r\ntxt:…` | bulk string |
//! | push `>n` | array `*n` |

/// Protocol version of a connection, chosen with `HELLO 2|3` (default RESP2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Proto {
    #[default]
    Resp2,
    Resp3,
}

impl Proto {
    pub fn version(self) -> i64 {
        match self {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        }
    }
}

/// Writes replies for one connection into its output buffer.
pub struct ReplyWriter<'a> {
    pub out: &'a mut Vec<u8>,
    pub proto: Proto,
}

impl<'a> ReplyWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>, proto: Proto) -> Self {
        ReplyWriter { out, proto }
    }

    fn header(&mut self, tag: u8, n: i64) {
        self.out.push(tag);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// `+OK\r\n`
    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// Simple string `+s\r\n`. `s` must not contain CR or LF.
    pub fn simple(&mut self, s: &[u8]) {
        self.out.push(b'+');
        self.out.extend_from_slice(s);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Error `-msg\r\n`; `msg` starts with the error code (`ERR …`, `WRONGTYPE …`).
    /// CR and LF in `msg` (which may echo user input) become spaces, as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.out.push(b'-');
        self.out.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.out.extend_from_slice(b"\r\n");
    }

    /// Integer `:n\r\n`.
    pub fn integer(&mut self, n: i64) {
        self.header(b':', n);
    }

    /// Bulk string `$len\r\nbytes\r\n`.
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len() as i64);
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Null where a bulk string was expected: `$-1` (RESP2) / `_` (RESP3).
    pub fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.out.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.out.extend_from_slice(b"_\r\n"),
        }
    }

    /// Null where an array was expected: `*-1` (RESP2) / `_` (RESP3).
    pub fn null_array(&mut self) {
        match self.proto {
            Proto::Resp2 => self.out.extend_from_slice(b"*-1\r\n"),
            Proto::Resp3 => self.out.extend_from_slice(b"_\r\n"),
        }
    }

    /// Array header `*n\r\n`; the caller writes `n` elements next.
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// Map header: `%n` (RESP3) or `*2n` (RESP2); the caller writes `n` key/value pairs.
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.header(b'*', 2 * n as i64),
            Proto::Resp3 => self.header(b'%', n as i64),
        }
    }

    /// Set header: `~n` (RESP3) or `*n` (RESP2).
    pub fn set(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.header(b'*', n as i64),
            Proto::Resp3 => self.header(b'~', n as i64),
        }
    }

    /// Push header `>n` (RESP3) or `*n` (RESP2), for pub/sub messages and invalidations.
    pub fn push(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.header(b'*', n as i64),
            Proto::Resp3 => self.header(b'>', n as i64),
        }
    }

    /// Boolean: `#t`/`#f` (RESP3) or `:1`/`:0` (RESP2).
    pub fn boolean(&mut self, b: bool) {
        match self.proto {
            Proto::Resp2 => self.integer(b as i64),
            Proto::Resp3 => self
                .out
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// Double already formatted by the caller (Redis formats with `%.17g` and its own
    /// inf/nan spellings): `,text` (RESP3) or a bulk string (RESP2).
    pub fn double_text(&mut self, text: &[u8]) {
        match self.proto {
            Proto::Resp2 => self.bulk(text),
            Proto::Resp3 => {
                self.out.push(b',');
                self.out.extend_from_slice(text);
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Verbatim string (INFO, CLIENT INFO, CLIENT LIST): `=len\r\ntxt:…` (RESP3) or bulk (RESP2).
    pub fn verbatim(&mut self, text: &[u8]) {
        match self.proto {
            Proto::Resp2 => self.bulk(text),
            Proto::Resp3 => {
                self.header(b'=', text.len() as i64 + 4);
                self.out.extend_from_slice(b"txt:");
                self.out.extend_from_slice(text);
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Writes pre-encoded bytes as they are.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(proto: Proto, f: impl FnOnce(&mut ReplyWriter)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut ReplyWriter::new(&mut out, proto));
        out
    }

    #[test]
    fn resp2_and_resp3_shapes() {
        assert_eq!(w(Proto::Resp2, |r| r.null()), b"$-1\r\n");
        assert_eq!(w(Proto::Resp3, |r| r.null()), b"_\r\n");
        assert_eq!(w(Proto::Resp2, |r| r.map(2)), b"*4\r\n");
        assert_eq!(w(Proto::Resp3, |r| r.map(2)), b"%2\r\n");
        assert_eq!(w(Proto::Resp2, |r| r.double_text(b"1.5")), b"$3\r\n1.5\r\n");
        assert_eq!(w(Proto::Resp3, |r| r.double_text(b"1.5")), b",1.5\r\n");
        assert_eq!(w(Proto::Resp3, |r| r.verbatim(b"a")), b"=5\r\ntxt:a\r\n");
        assert_eq!(w(Proto::Resp2, |r| r.integer(-42)), b":-42\r\n");
        assert_eq!(w(Proto::Resp2, |r| r.bulk(b"")), b"$0\r\n\r\n");
        assert_eq!(w(Proto::Resp2, |r| r.error("ERR a\r\nb")), b"-ERR a  b\r\n");
    }
}
