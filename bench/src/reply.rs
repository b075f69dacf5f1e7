//! Just enough to count replies: tell an error or a nil apart from a value, on top of
//! [`resp::decode`] (RESP2 and RESP3, nesting bounded by [`MAX_DEPTH`], malformed input is an
//! error). The load generator never needs the values themselves; the few replies that are
//! read (CLUSTER SLOTS, DBSIZE, INFO) use [`resp::Value`] directly.

use resp::Value;

/// Deepest aggregate nesting accepted (Redis's own replies nest 3–4 levels at most).
pub use resp::value::MAX_DEPTH;

/// What a complete reply was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Any non-error, non-nil reply.
    Value,
    /// A nil (a GET miss): `$-1`, `*-1` or `_`.
    Nil,
    /// An error reply; the text is its first word (`ERR`, `MOVED`, `WRONGTYPE`, …).
    Error(String),
}

/// Scans one reply at the start of `buf`: `Ok(None)` = incomplete, `Ok(Some((reply, len)))`
/// = a complete reply of `len` bytes, `Err` = not RESP.
pub fn scan(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some((value, len)) = resp::decode(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    Ok(Some((classify(&value), len)))
}

fn classify(v: &Value) -> Reply {
    match v {
        Value::Null => Reply::Nil,
        Value::Error(e) => {
            let word = e.split(|&b| b == b' ').next().unwrap_or_default();
            Reply::Error(String::from_utf8_lossy(word).into_owned())
        }
        // An attribute only annotates the reply that follows it.
        Value::Attribute { value, .. } => classify(value),
        _ => Reply::Value,
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
            scan(b"!9\r\nWRONGTYPE\r\n").unwrap(),
            Some((Reply::Error("WRONGTYPE".into()), 15))
        );
        assert_eq!(scan(b"_\r\n").unwrap(), Some((Reply::Nil, 3)));
        assert_eq!(
            scan(b"|1\r\n+a\r\n:1\r\n$-1\r\n").unwrap(),
            Some((Reply::Nil, 17))
        );
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(scan(deep.as_bytes()).is_err());
    }
}
