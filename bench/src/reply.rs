//! Just enough RESP to count replies: find where one complete reply ends and tell an error or a
//! nil apart from a value. The load generator never needs the values themselves.
//!
//! Covers RESP2 (`+ - : $ *`) and the RESP3 types a server may send when a client did not ask
//! for them (`_ , # ( = % ~ > |`), per the Redis protocol spec. `$-1` and `*-1` and `_` are nil.
//! Aggregates nest up to [`MAX_DEPTH`]; deeper input is a protocol error, so a hostile server
//! cannot make the scanner recurse without bound.

/// Deepest aggregate nesting accepted (Redis's own replies nest 3–4 levels at most).
pub const MAX_DEPTH: usize = 32;

/// What a complete reply was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Any non-error, non-nil reply.
    Value,
    /// A nil (a GET miss).
    Nil,
    /// An error reply; the text is its first word (`ERR`, `MOVED`, `WRONGTYPE`, …).
    Error(String),
}

/// Scans one reply at the start of `buf`: `Ok(None)` = incomplete, `Ok(Some((reply, len)))`
/// = a complete reply of `len` bytes, `Err` = not RESP.
pub fn scan(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    scan_at(buf, 0, 0)
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn parse_len(line: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(line)))
}

fn scan_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > MAX_DEPTH {
        return Err("reply nests too deep".into());
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(eol) = line_end(buf, at + 1) else {
        return Ok(None);
    };
    let line = &buf[at + 1..eol];
    let next = eol + 2;
    match kind {
        b'+' | b':' | b',' | b'#' | b'(' => Ok(Some((Reply::Value, next - at))),
        b'_' => Ok(Some((Reply::Nil, next - at))),
        b'-' => {
            let word = line.split(|&b| b == b' ').next().unwrap_or_default();
            let word = String::from_utf8_lossy(word).into_owned();
            Ok(Some((Reply::Error(word), next - at)))
        }
        b'$' | b'=' | b'!' => {
            let n = parse_len(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next - at)));
            }
            let end = next + n as usize + 2;
            if buf.len() < end {
                return Ok(None);
            }
            if kind == b'!' {
                let word = buf[next..end - 2]
                    .split(|&b| b == b' ')
                    .next()
                    .unwrap_or_default();
                return Ok(Some((
                    Reply::Error(String::from_utf8_lossy(word).into()),
                    end - at,
                )));
            }
            Ok(Some((Reply::Value, end - at)))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_len(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next - at)));
            }
            // Maps and attributes hold n pairs.
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = next;
            for _ in 0..items {
                match scan_at(buf, pos, depth + 1)? {
                    None => return Ok(None),
                    Some((_, len)) => pos += len,
                }
            }
            if kind == b'|' {
                // An attribute precedes the real reply.
                return Ok(scan_at(buf, pos, depth + 1)?.map(|(r, len)| (r, pos + len - at)));
            }
            Ok(Some((Reply::Value, pos - at)))
        }
        other => Err(format!("unexpected reply type byte {other:#04x}")),
    }
}

/// A parsed reply, for the few replies the generator reads (CLUSTER SLOTS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
    Nil,
    Error(String),
}

/// Parses one complete reply (RESP2 types) at the start of `buf`; `None` when incomplete or
/// not RESP2.
pub fn parse_value(buf: &[u8]) -> Option<(Value, usize)> {
    parse_value_at(buf, 0, 0)
}

fn parse_value_at(buf: &[u8], at: usize, depth: usize) -> Option<(Value, usize)> {
    if depth > MAX_DEPTH {
        return None;
    }
    let kind = *buf.get(at)?;
    let eol = line_end(buf, at + 1)?;
    let line = std::str::from_utf8(&buf[at + 1..eol]).ok()?;
    let next = eol + 2;
    match kind {
        b'+' => Some((Value::Bulk(line.as_bytes().to_vec()), next - at)),
        b'-' => Some((Value::Error(line.to_string()), next - at)),
        b':' => Some((Value::Int(line.parse().ok()?), next - at)),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((Value::Nil, next - at));
            }
            let end = next + n as usize;
            (buf.len() >= end + 2).then(|| (Value::Bulk(buf[next..end].to_vec()), end + 2 - at))
        }
        b'*' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((Value::Nil, next - at));
            }
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..n {
                let (v, len) = parse_value_at(buf, pos, depth + 1)?;
                items.push(v);
                pos += len;
            }
            Some((Value::Array(items), pos - at))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_each_type_and_reports_incomplete() {
        assert_eq!(scan(b"+OK\r\n").unwrap(), Some((Reply::Value, 5)));
        assert_eq!(scan(b":12\r\n+OK").unwrap(), Some((Reply::Value, 5)));
        assert_eq!(scan(b"$-1\r\n").unwrap(), Some((Reply::Nil, 5)));
        assert_eq!(scan(b"$3\r\nabc\r\n").unwrap(), Some((Reply::Value, 9)));
        assert_eq!(scan(b"$3\r\nab").unwrap(), None);
        assert_eq!(scan(b"+OK").unwrap(), None);
        assert_eq!(scan(b"").unwrap(), None);
        assert_eq!(
            scan(b"-MOVED 3999 127.0.0.1:6381\r\n").unwrap(),
            Some((Reply::Error("MOVED".into()), 28))
        );
        let mget = b"*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbc\r\n";
        assert_eq!(scan(mget).unwrap(), Some((Reply::Value, mget.len())));
        assert_eq!(scan(&mget[..mget.len() - 1]).unwrap(), None);
        assert_eq!(scan(b"*-1\r\n").unwrap(), Some((Reply::Nil, 5)));
        assert_eq!(
            scan(b"%1\r\n+a\r\n:1\r\n").unwrap(),
            Some((Reply::Value, 12))
        );
        assert!(scan(b"?x\r\n").is_err());
        assert!(scan(b"$x\r\n").is_err());
        assert_eq!(
            parse_value(b"*2\r\n:0\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n"),
            Some((
                Value::Array(vec![
                    Value::Int(0),
                    Value::Array(vec![Value::Bulk(b"127.0.0.1".to_vec()), Value::Int(7000)])
                ]),
                34
            ))
        );
        assert_eq!(parse_value(b"*2\r\n:0\r\n"), None);
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(scan(deep.as_bytes()).is_err());
    }
}
