//! Reading replies over a blocking socket for the supervisor's own small clients (`status`,
//! `metrics`, the SIGHUP `CONFIG SET`s): [`resp::decode`] over a buffer that keeps the bytes
//! of a pipelined next reply. Requests are written with [`resp::encode_request`].

use std::io::{Error, ErrorKind, Read};

use resp::Value;

/// Replies from one connection, in order.
pub struct ReplyReader<R> {
    inner: R,
    /// Bytes read; those from `pos` on are not decoded yet (the start of the next reply).
    buf: Vec<u8>,
    /// Where the next reply starts in `buf`: replies of a pipeline are taken without moving
    /// the rest each time (`recached resize` reads hundreds per batch).
    pos: usize,
    /// A reply still incomplete after this many bytes is refused.
    max: usize,
}

impl<R: Read> ReplyReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        ReplyReader {
            inner,
            buf: Vec::new(),
            pos: 0,
            max,
        }
    }

    /// The next reply. Errors: the read's own (a timeout included), `UnexpectedEof` when the
    /// peer closes mid-reply, `InvalidData` for malformed input or a reply over `max` bytes.
    pub fn read(&mut self) -> std::io::Result<Value> {
        loop {
            match resp::decode(&self.buf[self.pos..]) {
                Ok(Some((v, n))) => {
                    self.pos += n;
                    if self.pos == self.buf.len() {
                        self.buf.clear();
                        self.pos = 0;
                    }
                    return Ok(v);
                }
                Ok(None) if self.buf.len() - self.pos > self.max => {
                    return Err(Error::new(ErrorKind::InvalidData, "reply too large"));
                }
                Ok(None) => {}
                Err(e) => return Err(Error::new(ErrorKind::InvalidData, e.to_string())),
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            // Up to 64 KiB at the end of `buf`: a batch of DUMP payloads arrives in one read.
            let len = self.buf.len();
            self.buf.resize(len + (64 << 10), 0);
            let got = self.inner.read(&mut self.buf[len..]);
            self.buf.truncate(len + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => return Err(Error::new(ErrorKind::UnexpectedEof, "truncated reply")),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_truncated_and_oversized() {
        let input = b"+PONG\r\n:42\r\n$3\r\nabc\r\n-ERR x\r\n*2\r\n$1\r\na\r\n:1\r\n+PON";
        let mut r = ReplyReader::new(&input[..], 64);
        assert_eq!(r.read().unwrap(), Value::Simple(b"PONG".to_vec()));
        assert_eq!(r.read().unwrap(), Value::Integer(42));
        assert_eq!(r.read().unwrap(), Value::Bulk(b"abc".to_vec()));
        assert_eq!(r.read().unwrap(), Value::Error(b"ERR x".to_vec()));
        let pair = vec![Value::Bulk(b"a".to_vec()), Value::Integer(1)];
        assert_eq!(r.read().unwrap(), Value::Array(pair));
        assert_eq!(r.read().unwrap_err().kind(), ErrorKind::UnexpectedEof);
        let mut big = ReplyReader::new(&b"$99999999999\r\n"[..], 64);
        assert_eq!(big.read().unwrap_err().kind(), ErrorKind::InvalidData);
        let mut bad = ReplyReader::new(&b"?\r\n"[..], 64);
        assert_eq!(bad.read().unwrap_err().kind(), ErrorKind::InvalidData);
    }
}
