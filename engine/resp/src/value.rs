//! Reply decoder: turns the first complete RESP2/RESP3 reply of a buffer into an owned
//! [`Value`], for the roles that read a server's replies (supervisor, bench, proxy, wasm).
//! Not the engine's hot path: data is copied into `Vec<u8>`s.
//!
//! # Shapes (spec: <https://redis.io/docs/latest/develop/reference/protocol-spec/>)
//!
//! | first byte | wire | [`Value`] |
//! |---|---|---|
//! | `+` | `+<line>\r\n` | `Simple` |
//! | `-` / `!` | `-<line>\r\n` / `!<len>\r\n<bytes>\r\n` | `Error` |
//! | `:` | `:<i64>\r\n` | `Integer` |
//! | `$` | `$<len>\r\n<bytes>\r\n` | `Bulk` (`$-1` is `Null`) |
//! | `_` | `_\r\n` | `Null` |
//! | `*` `~` `>` | `<n>\r\n` then `n` values | `Array` (`*-1` is `Null`), `Set`, `Push` |
//! | `%` | `<n>\r\n` then `n` key/value pairs | `Map` |
//! | <code>&#124;</code> | `<n>\r\n` then `n` pairs, then the value they annotate | `Attribute` |
//! | `,` | `,<double>\r\n` (`inf`, `-inf`, `nan` included) | `Double` |
//! | `#` | `#t\r\n` / `#f\r\n` | `Boolean` |
//! | `(` | `(<[-]digits>\r\n` | `BigNumber` (the digits) |
//! | `=` | `=<len>\r\n<fmt>:<text>\r\n` | `Verbatim` |
//!
//! # Results and errors
//!
//! [`decode`] returns `Ok(Some((value, consumed)))` for a complete reply (bytes after it are
//! left alone), `Ok(None)` while the reply is incomplete (read more, call again with the grown
//! buffer), and [`ProtocolError::InvalidReply`] for malformed input: a line not ended by
//! `\r\n`, a bulk body not followed by `\r\n`, an unknown first byte, a length or integer not in
//! Redis `string2ll` form ([`crate::parse_i64`]), a bad double, boolean or big number, or a
//! verbatim string without its `fmt:` prefix. Framing is as strict as [`crate::frame_len`].
//!
//! # Bounds
//!
//! Aggregates nest at most [`MAX_DEPTH`] deep (recursion stays shallow on hostile input such as
//! a million `*1\r\n`); a line or bulk longer than [`MAX_LEN`] is an error at once, so a peer
//! cannot make the caller buffer without end. Nothing is allocated from a declared length
//! before the bytes are there: memory is O(buffer). Each call decodes from the start, so a
//! caller reading a huge reply in many pieces should wait for [`crate::FrameScanner`] first.

use crate::int::parse_i64;
use crate::parse::ProtocolError;

/// Deepest nesting of aggregates accepted (Redis replies nest a handful of levels).
pub const MAX_DEPTH: usize = 128;
/// Longest line or bulk accepted, in bytes (Redis `proto-max-bulk-len` default, 512 MB).
pub const MAX_LEN: usize = 512 * 1024 * 1024;

/// One decoded reply. `Debug` shows byte strings as (lossy) text: `Error("ERR no")`.
#[derive(Clone, PartialEq)]
pub enum Value {
    Simple(Vec<u8>),
    /// `-…` or `!…`: the message without the `-`, starting with the code (`ERR …`).
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    /// `_`, and RESP2's null bulk `$-1` and null array `*-1`.
    Null,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Set(Vec<Value>),
    Push(Vec<Value>),
    Double(f64),
    Boolean(bool),
    /// The digits as sent, with an optional leading `-`.
    BigNumber(Vec<u8>),
    /// `format` is the three bytes before the `:` (`txt`, `mkd`).
    Verbatim {
        format: [u8; 3],
        text: Vec<u8>,
    },
    /// Attributes and the value they annotate, kept together.
    Attribute {
        attrs: Vec<(Value, Value)>,
        value: Box<Value>,
    },
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            Value::Simple(s) => f.debug_tuple("Simple").field(&text(s)).finish(),
            Value::Error(s) => f.debug_tuple("Error").field(&text(s)).finish(),
            Value::Integer(n) => f.debug_tuple("Integer").field(n).finish(),
            Value::Bulk(s) => f.debug_tuple("Bulk").field(&text(s)).finish(),
            Value::Null => f.write_str("Null"),
            Value::Array(v) => f.debug_tuple("Array").field(v).finish(),
            Value::Map(v) => f.debug_tuple("Map").field(v).finish(),
            Value::Set(v) => f.debug_tuple("Set").field(v).finish(),
            Value::Push(v) => f.debug_tuple("Push").field(v).finish(),
            Value::Double(d) => f.debug_tuple("Double").field(d).finish(),
            Value::Boolean(b) => f.debug_tuple("Boolean").field(b).finish(),
            Value::BigNumber(s) => f.debug_tuple("BigNumber").field(&text(s)).finish(),
            Value::Verbatim { format, text: t } => f
                .debug_struct("Verbatim")
                .field("format", &text(format))
                .field("text", &text(t))
                .finish(),
            Value::Attribute { attrs, value } => f
                .debug_struct("Attribute")
                .field("attrs", attrs)
                .field("value", value)
                .finish(),
        }
    }
}

/// Decodes the first reply of `buf`. See the module docs for shapes, errors and bounds.
pub fn decode(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtocolError> {
    let mut pos = 0;
    Ok(value(buf, &mut pos, 0)?.map(|v| (v, pos)))
}

type Step<T> = Result<Option<T>, ProtocolError>;

fn bad<T>(why: &'static str) -> Result<T, ProtocolError> {
    Err(ProtocolError::InvalidReply(why))
}

/// Reads the value at `*pos` inside `depth` enclosing aggregates; advances `*pos` past it.
fn value(buf: &[u8], pos: &mut usize, depth: usize) -> Step<Value> {
    let Some((tag, line, next)) = line(buf, *pos)? else {
        return Ok(None);
    };
    let v = match tag {
        b'+' => Value::Simple(line.to_vec()),
        b'-' => Value::Error(line.to_vec()),
        b':' => match parse_i64(line) {
            Some(n) => Value::Integer(n),
            None => return bad("invalid integer"),
        },
        b'_' if line.is_empty() => Value::Null,
        b'_' => return bad("invalid null"),
        b'#' => match line {
            b"t" => Value::Boolean(true),
            b"f" => Value::Boolean(false),
            _ => return bad("invalid boolean"),
        },
        b',' => match std::str::from_utf8(line).ok().and_then(|s| s.parse().ok()) {
            Some(d) => Value::Double(d),
            None => return bad("invalid double"),
        },
        b'(' => {
            let digits = line.strip_prefix(b"-").unwrap_or(line);
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return bad("invalid big number");
            }
            Value::BigNumber(line.to_vec())
        }
        b'$' | b'!' | b'=' => {
            let Some(len) = length(line, tag == b'$')? else {
                *pos = next;
                return Ok(Some(Value::Null));
            };
            if len > MAX_LEN {
                return bad("bulk too long");
            }
            let end = next + len + 2;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[end - 2..end] != b"\r\n" {
                return bad("bulk not ended by CRLF");
            }
            let body = &buf[next..end - 2];
            *pos = end;
            return Ok(Some(match tag {
                b'$' => Value::Bulk(body.to_vec()),
                b'!' => Value::Error(body.to_vec()),
                _ => match body {
                    [a, b, c, b':', text @ ..] => Value::Verbatim {
                        format: [*a, *b, *c],
                        text: text.to_vec(),
                    },
                    _ => return bad("verbatim string without a format"),
                },
            }));
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            if depth >= MAX_DEPTH {
                return bad("aggregates nested too deep");
            }
            let Some(n) = length(line, tag == b'*')? else {
                *pos = next;
                return Ok(Some(Value::Null));
            };
            *pos = next;
            // Capacity from what the buffer can hold (a value takes ≥ 3 bytes), not from `n`.
            let room = (buf.len() - next) / 3;
            if matches!(tag, b'%' | b'|') {
                let mut pairs = Vec::with_capacity(n.min(room / 2));
                for _ in 0..n {
                    let Some(k) = value(buf, pos, depth + 1)? else {
                        return Ok(None);
                    };
                    let Some(v) = value(buf, pos, depth + 1)? else {
                        return Ok(None);
                    };
                    pairs.push((k, v));
                }
                if tag == b'%' {
                    return Ok(Some(Value::Map(pairs)));
                }
                let Some(v) = value(buf, pos, depth + 1)? else {
                    return Ok(None);
                };
                return Ok(Some(Value::Attribute {
                    attrs: pairs,
                    value: Box::new(v),
                }));
            }
            let mut items = Vec::with_capacity(n.min(room));
            for _ in 0..n {
                let Some(v) = value(buf, pos, depth + 1)? else {
                    return Ok(None);
                };
                items.push(v);
            }
            return Ok(Some(match tag {
                b'*' => Value::Array(items),
                b'~' => Value::Set(items),
                _ => Value::Push(items),
            }));
        }
        _ => return bad("unknown frame type"),
    };
    *pos = next;
    Ok(Some(v))
}

/// The line at `at`: its first byte, the rest up to `\r\n`, and the offset after `\r\n`.
fn line(buf: &[u8], at: usize) -> Step<(u8, &[u8], usize)> {
    let rest = &buf[at..];
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        if rest.len() > MAX_LEN {
            return bad("line too long");
        }
        return Ok(None);
    };
    if cr > MAX_LEN {
        return bad("line too long");
    }
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') if cr == 0 => bad("empty line instead of a frame"),
        Some(b'\n') => Ok(Some((rest[0], &rest[1..cr], at + cr + 2))),
        Some(_) => bad("line not ended by CRLF"),
    }
}

/// A length header: `Some(n)` for n ≥ 0, `None` for the RESP2 null `-1` where allowed.
fn length(line: &[u8], null_allowed: bool) -> Result<Option<usize>, ProtocolError> {
    match parse_i64(line) {
        Some(-1) if null_allowed => Ok(None),
        Some(n) if n >= 0 => match usize::try_from(n) {
            Ok(n) => Ok(Some(n)),
            Err(_) => bad("length too large"),
        },
        _ => bad("invalid length"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Value::*;

    fn b(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    /// Every reply shape with its decoded value.
    fn cases() -> Vec<(&'static [u8], Value)> {
        vec![
            (b"+OK\r\n", Simple(b("OK"))),
            (b"+\r\n", Simple(Vec::new())),
            (b"-ERR no\r\n", Error(b("ERR no"))),
            (b":0\r\n", Integer(0)),
            (b":-9223372036854775808\r\n", Integer(i64::MIN)),
            (b"$3\r\nfoo\r\n", Bulk(b("foo"))),
            (b"$0\r\n\r\n", Bulk(Vec::new())),
            (b"$4\r\na\r\nb\r\n", Bulk(b("a\r\nb"))),
            (b"$-1\r\n", Null),
            (b"*-1\r\n", Null),
            (b"_\r\n", Null),
            (b"*0\r\n", Array(vec![])),
            (
                b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n",
                Array(vec![Bulk(b("a")), Null, Integer(7)]),
            ),
            (
                b"*2\r\n*1\r\n+x\r\n*0\r\n",
                Array(vec![Array(vec![Simple(b("x"))]), Array(vec![])]),
            ),
            (
                b"%2\r\n+a\r\n:1\r\n$1\r\nb\r\n_\r\n",
                Map(vec![(Simple(b("a")), Integer(1)), (Bulk(b("b")), Null)]),
            ),
            (b"~2\r\n:1\r\n:2\r\n", Set(vec![Integer(1), Integer(2)])),
            (
                b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
                Push(vec![Bulk(b("message")), Bulk(b("c")), Bulk(b("m"))]),
            ),
            (b",1.5\r\n", Double(1.5)),
            (b",-2\r\n", Double(-2.0)),
            (b",inf\r\n", Double(f64::INFINITY)),
            (b",-inf\r\n", Double(f64::NEG_INFINITY)),
            (b"#t\r\n", Boolean(true)),
            (b"#f\r\n", Boolean(false)),
            (
                b"(3492890328409238509324850943850943825024385\r\n",
                BigNumber(b("3492890328409238509324850943850943825024385")),
            ),
            (b"(-1\r\n", BigNumber(b("-1"))),
            (b"!9\r\nERR x\r\nyz\r\n", Error(b("ERR x\r\nyz"))),
            (
                b"=8\r\ntxt:a\r\nb\r\n",
                Verbatim {
                    format: *b"txt",
                    text: b("a\r\nb"),
                },
            ),
            (
                b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
                Attribute {
                    attrs: vec![(Simple(b("ttl")), Integer(3))],
                    value: Box::new(Bulk(b("v"))),
                },
            ),
        ]
    }

    #[test]
    fn decodes_every_shape_and_leaves_the_rest() {
        for (wire, want) in cases() {
            assert_eq!(
                decode(wire),
                Ok(Some((want.clone(), wire.len()))),
                "{wire:?}"
            );
            let mut two = wire.to_vec();
            two.extend_from_slice(b"+next\r\n");
            assert_eq!(decode(&two), Ok(Some((want, wire.len()))), "{wire:?}");
        }
        assert!(matches!(decode(b",nan\r\n"), Ok(Some((Double(d), 6))) if d.is_nan()));
    }

    #[test]
    fn incomplete_at_every_cut_point() {
        for (wire, _) in cases() {
            for cut in 0..wire.len() {
                assert_eq!(decode(&wire[..cut]), Ok(None), "{wire:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn malformed() {
        for wire in [
            &b"\r\n"[..],
            b"?x\r\n",
            b"+OK\rx",
            b":\r\n",
            b":01\r\n",
            b":+1\r\n",
            b":1.0\r\n",
            b":9223372036854775808\r\n",
            b"$-2\r\n",
            b"$01\r\nx\r\n",
            b"$x\r\n",
            b"$3\r\nfooXY",
            b"!-1\r\n",
            b"=-1\r\n",
            b"=3\r\ntxt\r\n",
            b"=4\r\ntxt-\r\n",
            b"*-2\r\n",
            b"~-1\r\n",
            b"%-1\r\n",
            b"|-1\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*2\r\n:1\r\n?\r\n",
            b"_x\r\n",
            b"#x\r\n",
            b"#\r\n",
            b",\r\n",
            b",1.5x\r\n",
            b"(\r\n",
            b"(-\r\n",
            b"(1a\r\n",
            b"$9223372036854775807\r\n",
        ] {
            assert!(
                matches!(decode(wire), Err(ProtocolError::InvalidReply(_))),
                "{wire:?} gave {:?}",
                decode(wire)
            );
        }
    }

    #[test]
    fn depth_is_bounded() {
        let mut ok = b"*1\r\n".repeat(MAX_DEPTH);
        ok.extend_from_slice(b":1\r\n");
        assert!(matches!(decode(&ok), Ok(Some((_, n))) if n == ok.len()));
        // One level more is refused even before the rest has arrived.
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(decode(&deep).is_err());
        let hostile = b"%1\r\n".repeat(1_000_000);
        assert!(decode(&hostile).is_err());
    }

    #[test]
    fn debug_shows_text() {
        let v = Array(vec![Error(b("ERR x")), Bulk(vec![b'a', 0xff]), Integer(1)]);
        let want = "Array([Error(\"ERR x\"), Bulk(\"a\u{fffd}\"), Integer(1)])";
        assert_eq!(format!("{v:?}"), want);
    }

    #[test]
    fn huge_declared_lengths_allocate_nothing_up_front() {
        assert_eq!(decode(b"*2147483647\r\n:1\r\n"), Ok(None));
        assert_eq!(decode(b"%2147483647\r\n"), Ok(None));
        assert_eq!(decode(b"$536870912\r\nab"), Ok(None));
        assert!(decode(b"$536870913\r\n").is_err());
    }
}
