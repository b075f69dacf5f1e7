//! The memcached text and meta protocol parser: bytes → [`Request`]. Pure (no I/O, no clock).
//!
//! One call looks at the front of a connection's input and answers [`Parsed::Incomplete`]
//! (wait for more bytes, never an error), [`Parsed::Close`] (memcached closes the
//! connection: a line longer than 2048 bytes without a newline that is not a `get`/`gets`),
//! or [`Parsed::Ready`] with a request and the bytes it used. Bad input is a request too,
//! [`Request::Reject`], carrying memcached's exact reply and how many bytes of an unwanted
//! data block to drop as they arrive (`swallow`), so a half-sent oversized value is never
//! buffered.
//!
//! The rules follow memcached 1.6's `proto_text.c` (`process_command_ascii`, checked byte for
//! byte against memcached 1.6.18 by `tests/memcached.rs`): tokens are separated by one or
//! more spaces, a line ends with `\n` (a `\r` before it is dropped), command names are case
//! sensitive, each command has memcached's token counts (a wrong count is `ERROR`), a key
//! longer than 250 bytes or a bad number is `CLIENT_ERROR bad command line format`, and a
//! storage command's data block is exactly `<bytes>` bytes then `\r\n` (else `CLIENT_ERROR
//! bad data chunk`, after consuming `<bytes>` + 2 bytes, as memcached does).

use super::meta::{self, MetaRequest};

/// Longest key (memcached `KEY_MAX_LENGTH`).
pub const KEY_MAX: usize = 250;
/// A line with no newline after this many bytes closes the connection unless it is a
/// `get`/`gets` (memcached `try_read_command_ascii`).
pub const LINE_MAX: usize = 2048;
/// Our bound on a multiget line (memcached's is unbounded): the connection is closed past it.
pub const GET_LINE_MAX: usize = 1 << 20;
/// Bytes of an item beyond its key and value (memcached's item header, CAS and the two
/// terminators): a value fits when `key + value + ITEM_OVERHEAD <= item_size_max`.
pub const ITEM_OVERHEAD: usize = 59;

pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
pub const BAD_CHUNK: &str = "CLIENT_ERROR bad data chunk";
pub const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";
pub const ERROR: &str = "ERROR";

/// The storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreMode {
    /// The mode word the store script reads (`scripts::STORE`).
    pub fn word(self) -> &'static [u8] {
        match self {
            StoreMode::Set => b"set",
            StoreMode::Add => b"add",
            StoreMode::Replace => b"replace",
            StoreMode::Append => b"append",
            StoreMode::Prepend => b"prepend",
            StoreMode::Cas => b"cas",
        }
    }
}

/// Whether a retrieval answers the CAS unique (`gets`, `gats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasOut {
    No,
    Yes,
}

/// incr or decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Incr,
    Decr,
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`, `cas … <cas
    /// unique> [noreply]`, then the data block.
    Store {
        mode: StoreMode,
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        value: Vec<u8>,
        cas: u64,
        noreply: bool,
    },
    /// `get|gets <key>*`, `gat|gats <exptime> <key>*`.
    Get {
        keys: Vec<Vec<u8>>,
        cas: CasOut,
        touch: Option<i64>,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        key: Vec<u8>,
        exptime: i64,
        noreply: bool,
    },
    /// `incr|decr <key> <value> [noreply]`.
    Arith {
        op: Arith,
        key: Vec<u8>,
        delta: u64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]`.
    Delete {
        key: Vec<u8>,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Version,
    /// `verbosity <level> [noreply]`: answered OK, nothing changes.
    Verbosity {
        noreply: bool,
    },
    Quit,
    /// `stats` (general statistics only; a sub-command gets memcached's answer for an unknown
    /// one, `ERROR`, except `reset`, `settings`).
    Stats {
        arg: Option<Vec<u8>>,
    },
    /// A meta command (`mg`, `ms`, `md`, `ma`, `mn`).
    Meta(MetaRequest),
    /// Bad input: the reply (without CRLF), then drop `swallow` more bytes as they arrive.
    /// `delete`: the key a too-large `set` removes (memcached unlinks the old item).
    Reject {
        reply: &'static str,
        swallow: usize,
        delete: Option<Vec<u8>>,
        noreply: bool,
    },
}

/// The outcome of looking at the front of the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Incomplete,
    Close,
    Ready(Request, usize),
}

fn reject(reply: &'static str, noreply: bool) -> Request {
    Request::Reject {
        reply,
        swallow: 0,
        delete: None,
        noreply,
    }
}

/// Splits a line into tokens on runs of spaces (memcached's `tokenize_command`).
pub fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect()
}

/// An unsigned decimal as `strtoull` + memcached's `safe_strtoull`: digits only (a `-` is
/// refused), within u64.
pub fn parse_u64(t: &[u8]) -> Option<u64> {
    let t = t.strip_prefix(b"+").unwrap_or(t);
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in t {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// A signed decimal within i32 (memcached's `safe_strtol`).
pub fn parse_i32(t: &[u8]) -> Option<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = parse_u64(digits)? as i128;
    let v = if neg { -v } else { v };
    (i128::from(i32::MIN)..=i128::from(i32::MAX))
        .contains(&v)
        .then_some(v as i64)
}

/// Flags as `safe_strtoul` on a 64-bit machine: any u64, truncated to 32 bits.
fn parse_flags(t: &[u8]) -> Option<u32> {
    parse_u64(t).map(|v| v as u32)
}

/// Looks at the front of `buf`. `item_max`: memcached's `item_size_max`.
pub fn parse(buf: &[u8], item_max: usize) -> Parsed {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > LINE_MAX {
            let start = buf.iter().take(100).take_while(|&&b| b == b' ').count();
            let rest = &buf[start..];
            if start < 100
                && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
                && buf.len() <= GET_LINE_MAX
            {
                return Parsed::Incomplete;
            }
            return Parsed::Close;
        }
        return Parsed::Incomplete;
    };
    let mut line = &buf[..nl];
    if line.len() > 1 && line.ends_with(b"\r") {
        line = &line[..line.len() - 1];
    }
    let used = nl + 1;
    let t = tokens(line);
    // memcached: fewer than one token, or a command shorter than two bytes, is ERROR.
    if t.is_empty() || t[0].len() < 2 {
        return Parsed::Ready(reject(ERROR, false), used);
    }
    let n = t.len();
    let noreply = t.last() == Some(&&b"noreply"[..]);
    let req = match t[0] {
        c if c.len() == 2 && c[0] == b'm' => match meta::parse(&t, buf, used, item_max) {
            meta::Outcome::Incomplete => return Parsed::Incomplete,
            meta::Outcome::Ready(req, used) => return Parsed::Ready(req, used),
        },
        b"get" | b"gets" | b"gat" | b"gats" => get(&t),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            return store(&t, buf, used, item_max);
        }
        b"incr" | b"decr" if n == 3 || n == 4 => {
            let op = if t[0] == b"incr" {
                Arith::Incr
            } else {
                Arith::Decr
            };
            if t[1].len() > KEY_MAX {
                reject(BAD_FORMAT, noreply)
            } else {
                match parse_u64(t[2]) {
                    Some(delta) => Request::Arith {
                        op,
                        key: t[1].to_vec(),
                        delta,
                        noreply,
                    },
                    None => reject("CLIENT_ERROR invalid numeric delta argument", noreply),
                }
            }
        }
        b"delete" if (2..=4).contains(&n) => {
            // `delete <key> 0` is accepted for old clients; any other extra token is not.
            let extra = n - 2 - usize::from(noreply);
            if t[1].len() > KEY_MAX {
                reject(BAD_FORMAT, noreply)
            } else if extra > 1 || (extra == 1 && t[2] != b"0") {
                reject(
                    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                    noreply,
                )
            } else {
                Request::Delete {
                    key: t[1].to_vec(),
                    noreply,
                }
            }
        }
        b"touch" if n == 3 || n == 4 => {
            if t[1].len() > KEY_MAX {
                reject(BAD_FORMAT, noreply)
            } else {
                match parse_i32(t[2]) {
                    Some(exptime) => Request::Touch {
                        key: t[1].to_vec(),
                        exptime,
                        noreply,
                    },
                    None => reject("CLIENT_ERROR invalid exptime argument", noreply),
                }
            }
        }
        b"flush_all" if n <= 3 => {
            let delay = if n - usize::from(noreply) == 2 {
                parse_i32(t[1])
            } else {
                Some(0)
            };
            match delay {
                Some(delay) => Request::FlushAll { delay, noreply },
                None => reject("CLIENT_ERROR invalid exptime argument", noreply),
            }
        }
        b"version" => Request::Version,
        b"quit" => Request::Quit,
        b"verbosity" if n == 2 || n == 3 => {
            if parse_u64(t[1]).is_some() || t[1] == b"noreply" {
                Request::Verbosity { noreply }
            } else {
                reject(BAD_FORMAT, noreply)
            }
        }
        b"stats" => Request::Stats {
            arg: t.get(1).map(|a| a.to_vec()),
        },
        _ => reject(ERROR, false),
    };
    Parsed::Ready(req, used)
}

fn get(t: &[&[u8]]) -> Request {
    let (cas, touch) = match t[0] {
        b"get" => (CasOut::No, false),
        b"gets" => (CasOut::Yes, false),
        b"gat" => (CasOut::No, true),
        _ => (CasOut::Yes, true),
    };
    let first = if touch { 2 } else { 1 };
    // `get` alone is ERROR; `gat <exptime>` with no key is an empty answer (`END`).
    if t.len() < 2 {
        return reject(ERROR, false);
    }
    let touch = if touch {
        match parse_i32(t[1]) {
            Some(e) => Some(e),
            None => return reject("CLIENT_ERROR invalid exptime argument", false),
        }
    } else {
        None
    };
    if t[first..].iter().any(|k| k.len() > KEY_MAX) {
        return reject(BAD_FORMAT, false);
    }
    Request::Get {
        keys: t[first..].iter().map(|k| k.to_vec()).collect(),
        cas,
        touch,
    }
}

/// A storage command: its line is `buf[..line_end]`; the data block follows.
fn store(t: &[&[u8]], buf: &[u8], line_end: usize, item_max: usize) -> Parsed {
    let mode = match t[0] {
        b"set" => StoreMode::Set,
        b"add" => StoreMode::Add,
        b"replace" => StoreMode::Replace,
        b"append" => StoreMode::Append,
        b"prepend" => StoreMode::Prepend,
        _ => StoreMode::Cas,
    };
    let n = t.len();
    let want = if mode == StoreMode::Cas { 6 } else { 5 };
    if n != want && n != want + 1 {
        return Parsed::Ready(reject(ERROR, false), line_end);
    }
    let noreply = t.last() == Some(&&b"noreply"[..]);
    let bad = Parsed::Ready(reject(BAD_FORMAT, noreply), line_end);
    if t[1].len() > KEY_MAX {
        return bad;
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_flags(t[2]), parse_i32(t[3]), parse_i32(t[4]))
    else {
        return bad;
    };
    let cas = if mode == StoreMode::Cas {
        match parse_u64(t[5]) {
            Some(c) => c,
            None => return bad,
        }
    } else {
        0
    };
    if vlen < 0 {
        return bad;
    }
    let vlen = vlen as usize;
    if t[1].len() + vlen + ITEM_OVERHEAD > item_max {
        return Parsed::Ready(
            Request::Reject {
                reply: TOO_LARGE,
                swallow: vlen + 2,
                delete: (mode == StoreMode::Set).then(|| t[1].to_vec()),
                noreply,
            },
            line_end,
        );
    }
    let end = line_end + vlen + 2;
    if buf.len() < end {
        return Parsed::Incomplete;
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Parsed::Ready(reject(BAD_CHUNK, noreply), end);
    }
    Parsed::Ready(
        Request::Store {
            mode,
            key: t[1].to_vec(),
            flags,
            exptime,
            value: buf[line_end..end - 2].to_vec(),
            cas,
            noreply,
        },
        end,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    fn ready(input: &[u8]) -> (Request, usize) {
        match parse(input, MAX) {
            Parsed::Ready(r, n) => (r, n),
            other => panic!("{other:?} for {input:?}"),
        }
    }

    fn reply_of(input: &[u8]) -> &'static str {
        match ready(input).0 {
            Request::Reject { reply, .. } => reply,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn set_and_data_block() {
        assert_eq!(parse(b"set k 1 2 3\r\nab", MAX), Parsed::Incomplete);
        let (r, n) = ready(b"set k 1 2 3\r\nabc\r\nget k\r\n");
        assert_eq!(n, 18);
        assert_eq!(
            r,
            Request::Store {
                mode: StoreMode::Set,
                key: b"k".to_vec(),
                flags: 1,
                exptime: 2,
                value: b"abc".to_vec(),
                cas: 0,
                noreply: false
            }
        );
        // A wrong-length block: the error, then bytes + 2 consumed (memcached parses the rest).
        assert_eq!(
            ready(b"set a 0 0 3\r\nabcd\r\n"),
            (reject(BAD_CHUNK, false), 18)
        );
    }

    #[test]
    fn bad_lines() {
        assert_eq!(reply_of(b"set k 0 0\r\n"), ERROR);
        assert_eq!(reply_of(b"set k 0 0 -1\r\n"), BAD_FORMAT);
        assert_eq!(reply_of(b"set k x 0 1\r\n"), BAD_FORMAT);
        assert_eq!(reply_of(b"GET k\r\n"), ERROR);
        assert_eq!(reply_of(b"\r\n"), ERROR);
        assert_eq!(reply_of(b"get\r\n"), ERROR);
        let long = [b"get ".as_slice(), &[b'k'; 251], b"\r\n"].concat();
        assert_eq!(reply_of(&long), BAD_FORMAT);
        assert_eq!(
            reply_of(b"incr n -1\r\n"),
            "CLIENT_ERROR invalid numeric delta argument"
        );
        assert_eq!(parse(&[b'x'; 3000], MAX), Parsed::Close);
        let mut get = b"get ".to_vec();
        get.extend_from_slice(&[b'k'; 3000]);
        assert_eq!(parse(&get, MAX), Parsed::Incomplete);
    }

    #[test]
    fn too_large_swallows() {
        let line = b"set k 0 0 2000000\r\n";
        let (r, n) = ready(line);
        assert_eq!(n, line.len());
        assert_eq!(
            r,
            Request::Reject {
                reply: TOO_LARGE,
                swallow: 2_000_002,
                delete: Some(b"k".to_vec()),
                noreply: false
            }
        );
        // The boundary measured on memcached 1.6.18: key + value <= 1048517.
        let ok = format!("set k 0 0 {}\r\n", 1_048_516);
        assert_eq!(parse(ok.as_bytes(), 1 << 20), Parsed::Incomplete);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_flags(b"4294967296"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
    }
}
