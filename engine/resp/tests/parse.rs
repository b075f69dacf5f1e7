//! Request parser tests. Expected texts and outcomes were checked against redis-server 7.0.15
//! by sending the same bytes (see the module docs of `resp::parse`).

use resp::{Limits, ProtocolError, RequestParser};

/// What a connection sees for one step of parsing.
#[derive(Debug, PartialEq, Eq, Clone)]
enum Event {
    Request(Vec<Vec<u8>>),
    Error(ProtocolError),
}

/// Parses every complete request of `buf` in one go; returns the events and the bytes left.
fn parse_all(buf: &[u8]) -> (Vec<Event>, usize) {
    let mut p = RequestParser::new(Limits::default());
    let mut events = Vec::new();
    let mut off = 0;
    loop {
        match p.parse(&buf[off..]) {
            Ok(Some(n)) => {
                assert!(n > 0, "a complete request consumes bytes");
                let args = p.args(&buf[off..]).map(|a| a.to_vec()).collect();
                events.push(Event::Request(args));
                off += n;
            }
            Ok(None) => return (events, buf.len() - off),
            Err(e) => {
                events.push(Event::Error(e));
                return (events, buf.len() - off);
            }
        }
    }
}

/// Feeds `buf` as a connection would receive it, in chunks ending at `cuts`, draining consumed
/// bytes from the front like a read buffer.
fn parse_chunked(buf: &[u8], cuts: &[usize]) -> (Vec<Event>, usize) {
    let mut p = RequestParser::new(Limits::default());
    let mut events = Vec::new();
    let mut rbuf: Vec<u8> = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&buf.len())) {
        rbuf.extend_from_slice(&buf[fed..cut]);
        fed = cut;
        loop {
            match p.parse(&rbuf) {
                Ok(Some(n)) => {
                    let args = p.args(&rbuf).map(|a| a.to_vec()).collect();
                    events.push(Event::Request(args));
                    rbuf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    events.push(Event::Error(e));
                    return (events, rbuf.len());
                }
            }
        }
    }
    (events, rbuf.len())
}

fn req(args: &[&[u8]]) -> Event {
    Event::Request(args.iter().map(|a| a.to_vec()).collect())
}

fn sample_pipeline() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nv\r\nx\n\r\n"); // binary-safe body
    b.extend_from_slice(b"*0\r\n*-1\r\n"); // empty requests
    b.extend_from_slice(b"PING\r\n");
    b.extend_from_slice(b"\r\n\n   \r\n"); // blank lines
    b.extend_from_slice(b"ECHO \"a\\x41\\n\\\"q\" 'it\\'s' plain\n");
    b.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n");
    b.extend_from_slice(b"*1\r\n$4\r\nPINGXY"); // Redis skips 2 bytes after a body, unchecked
    b.extend_from_slice(b"*2\r\n$4\r\nECHO\r\n$3\r\na\0b\r\n");
    b
}

fn sample_events() -> Vec<Event> {
    vec![
        req(&[b"SET", b"key", b"v\r\nx\n"]),
        Event::Request(vec![]),
        Event::Request(vec![]),
        req(&[b"PING"]),
        Event::Request(vec![]),
        Event::Request(vec![]),
        Event::Request(vec![]),
        req(&[b"ECHO", b"aA\n\"q", b"it's", b"plain"]),
        req(&[b"GET", b""]),
        req(&[b"PING"]),
        req(&[b"ECHO", b"a\0b"]),
    ]
}

#[test]
fn sample_pipeline_in_one_buffer() {
    assert_eq!(parse_all(&sample_pipeline()), (sample_events(), 0));
}

#[test]
fn sample_pipeline_split_at_every_offset() {
    let buf = sample_pipeline();
    for k in 0..=buf.len() {
        assert_eq!(
            parse_chunked(&buf, &[k]),
            (sample_events(), 0),
            "split at {k}"
        );
    }
    for k in 0..buf.len() {
        for j in k..buf.len() {
            assert_eq!(
                parse_chunked(&buf, &[k, j]),
                (sample_events(), 0),
                "split at {k},{j}"
            );
        }
    }
}

#[test]
fn sample_pipeline_byte_by_byte() {
    let buf = sample_pipeline();
    let cuts: Vec<usize> = (1..buf.len()).collect();
    assert_eq!(parse_chunked(&buf, &cuts), (sample_events(), 0));
}

#[test]
fn pipeline_of_thousands() {
    let mut buf = Vec::new();
    let mut expected = Vec::new();
    for i in 0..5000u32 {
        let k = format!("key:{i}");
        let v = format!("value-{}", i * 7);
        if i % 3 == 0 {
            buf.extend_from_slice(format!("SET {k} {v}\r\n").as_bytes());
        } else {
            buf.extend_from_slice(
                format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                    k.len(),
                    v.len()
                )
                .as_bytes(),
            );
        }
        expected.push(req(&[b"SET", k.as_bytes(), v.as_bytes()]));
    }
    assert_eq!(parse_all(&buf), (expected.clone(), 0));
    // Reads of an odd size, as a socket delivers them.
    let cuts: Vec<usize> = (1..buf.len()).step_by(1013).collect();
    assert_eq!(parse_chunked(&buf, &cuts), (expected, 0));
}

#[test]
fn inline_quoting_like_sdssplitargs() {
    let cases: &[(&[u8], &[&[u8]])] = &[
        (b"GET foo\r\n", &[b"GET", b"foo"]),
        (b"  GET\t foo  \n", &[b"GET", b"foo"]),
        (b"ECHO \"a\\x41\\n\"\r\n", &[b"ECHO", b"aA\n"]),
        (
            b"ECHO \"\\r\\t\\b\\a\\\\\\\"\\z\"\n",
            &[b"ECHO", b"\r\t\x08\x07\\\"z"],
        ),
        (b"ECHO \"\\x4g\"\n", &[b"ECHO", b"x4g"]), // not hex: `\x` is just `x`
        (b"ECHO \"\\xfF\"\n", &[b"ECHO", b"\xff"]),
        (b"ECHO 'a\\'b'\r\n", &[b"ECHO", b"a'b"]),
        (b"ECHO 'a\\nb'\n", &[b"ECHO", b"a\\nb"]), // no escapes in single quotes but \'
        (b"ECHO \"\"\r\n", &[b"ECHO", b""]),
        (b"ECHO ''\n", &[b"ECHO", b""]),
        (b"ECHO foo\"bar baz\"\n", &[b"ECHO", b"foobar baz"]), // quote mid-word
        (b"ECHO a\x0bb\r\n", &[b"ECHO", b"a\x0bb"]),           // \v is kept inside a word
        (b"\x0bECHO ab\r\n", &[b"ECHO", b"ab"]),               // ... and skipped between words
        (b"ECHO \"a\"\x0c\n", &[b"ECHO", b"a"]), // any isspace may follow a closing quote
        (b"GET a\r\r\n", &[b"GET", b"a"]),
        (b"SET k \"v w\"\tx\n", &[b"SET", b"k", b"v w", b"x"]),
    ];
    for (input, args) in cases {
        assert_eq!(
            parse_all(input),
            (vec![req(args)], 0),
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn empty_lines_are_empty_requests() {
    for input in [&b"\n"[..], b"\r\n", b"   \r\n", b"\t\n"] {
        let mut p = RequestParser::new(Limits::default());
        assert_eq!(p.parse(input), Ok(Some(input.len())));
        assert_eq!(p.argc(), 0);
    }
}

#[test]
fn malformed_requests_give_redis_errors() {
    use ProtocolError::*;
    let cases: &[(&[u8], ProtocolError, &str)] = &[
        (
            b"*abc\r\n",
            InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (
            b"*-0\r\n",
            InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (
            b"*01\r\n",
            InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (
            b"*+1\r\n",
            InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (b"*\r\n", InvalidMultibulkLength, "invalid multibulk length"),
        (
            b"*2147483648\r\n",
            InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (
            b"*1\r\nfoo\r\n",
            ExpectedDollar(b'f'),
            "expected '$', got 'f'",
        ),
        (
            b"*1\r\n\r\n",
            ExpectedDollar(b'\r'),
            "expected '$', got ' '",
        ),
        (
            b"*1\r\n\nX\r\n",
            ExpectedDollar(b'\n'),
            "expected '$', got ' '",
        ),
        (b"*1\r\n$-5\r\n", InvalidBulkLength, "invalid bulk length"),
        (b"*1\r\n$-0\r\n", InvalidBulkLength, "invalid bulk length"),
        (b"*1\r\n$abc\r\n", InvalidBulkLength, "invalid bulk length"),
        (
            b"*1\r\n$536870913\r\n",
            InvalidBulkLength,
            "invalid bulk length",
        ),
        (
            b"ECHO \"a\"b\r\n",
            UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
        (
            b"ECHO \"ab\r\n",
            UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
        (
            b"ECHO 'ab\n",
            UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
        (
            b"ECHO \"ab\\\"\n",
            UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
        (
            b"ECHO 'a'b\n",
            UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
    ];
    for (input, err, text) in cases {
        let shown = String::from_utf8_lossy(input);
        assert_eq!(
            parse_all(input).0,
            vec![Event::Error(err.clone())],
            "{shown}"
        );
        assert_eq!(err.to_string(), format!("ERR Protocol error: {text}"));
        let mut wire = Vec::new();
        err.write_reply(&mut wire);
        assert_eq!(wire, format!("-ERR Protocol error: {text}\r\n").as_bytes());
        // Same outcome however the bytes arrive.
        let cuts: Vec<usize> = (1..input.len()).collect();
        assert_eq!(
            parse_chunked(input, &cuts).0,
            vec![Event::Error(err.clone())],
            "{shown}"
        );
    }
    // Redis echoes a non-ASCII byte raw.
    let mut wire = Vec::new();
    ExpectedDollar(0x80).write_reply(&mut wire);
    assert_eq!(wire, b"-ERR Protocol error: expected '$', got '\x80'\r\n");
}

#[test]
fn bulk_length_limit_refused_before_body() {
    let limits = Limits {
        max_bulk_len: 10,
        ..Limits::default()
    };
    let mut p = RequestParser::new(limits);
    // Only the header is in: refused without waiting for 11 bytes of body.
    assert_eq!(
        p.parse(b"*1\r\n$11\r\n"),
        Err(ProtocolError::InvalidBulkLength)
    );
    let mut p = RequestParser::new(limits);
    assert_eq!(p.parse(b"*1\r\n$10\r\n0123456789\r\n"), Ok(Some(21)));
    // The default (512 MB) refuses one byte more, still with no body sent.
    let mut p = RequestParser::new(Limits::default());
    assert_eq!(p.parse(b"*1\r\n$536870912\r\n"), Ok(None));
    let mut p = RequestParser::new(Limits::default());
    assert_eq!(
        p.parse(b"*1\r\n$536870913\r\n"),
        Err(ProtocolError::InvalidBulkLength)
    );
}

#[test]
fn multibulk_count_limit() {
    let limits = Limits {
        max_multibulk_len: 3,
        ..Limits::default()
    };
    let mut p = RequestParser::new(limits);
    assert_eq!(p.parse(b"*3\r\n"), Ok(None));
    let mut p = RequestParser::new(limits);
    assert_eq!(
        p.parse(b"*4\r\n"),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    // Redis 7 accepts counts up to INT_MAX and waits for the arguments.
    let mut p = RequestParser::new(Limits::default());
    assert_eq!(p.parse(b"*2147483647\r\n"), Ok(None));
}

#[test]
fn negative_counts_of_any_size_are_empty_requests() {
    let (events, left) = parse_all(b"*-1\r\n*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(
        events,
        vec![
            Event::Request(vec![]),
            Event::Request(vec![]),
            req(&[b"PING"])
        ]
    );
    assert_eq!(left, 0);
}

#[test]
fn header_skips_byte_after_cr() {
    // The byte after a header's CR and the two after a body are skipped unchecked (Redis does).
    assert_eq!(parse_all(b"*1\rX$4\rXPINGXY"), (vec![req(&[b"PING"])], 0));
}

/// Sizes just below and above 64 KB without a line end (Redis: error when more than 65536
/// bytes of the line are in).
#[test]
fn too_big_lines() {
    let over = |prefix: &[u8], fill: u8, total: usize| {
        let mut b = prefix.to_vec();
        b.resize(total, fill);
        b
    };
    let limit = 64 * 1024;
    let cases: &[(&[u8], u8, usize, ProtocolError)] = &[
        (b"", b'x', limit, ProtocolError::TooBigInline),
        (b"*", b'1', limit, ProtocolError::TooBigMbulkCount),
        (b"*1\r\n$", b'1', 4 + limit, ProtocolError::TooBigBulkCount),
        (b"*1\r\n", b'$', 4 + limit, ProtocolError::TooBigBulkCount),
    ];
    for (prefix, fill, at_limit, err) in cases {
        let at = over(prefix, *fill, *at_limit);
        assert_eq!(parse_all(&at).0, vec![], "{err:?} at the limit waits");
        let above = over(prefix, *fill, at_limit + 1);
        assert_eq!(parse_all(&above).0, vec![Event::Error(err.clone())]);
        // Arriving in pieces gives the same error.
        let cuts: Vec<usize> = (1..above.len()).step_by(4096).collect();
        assert_eq!(
            parse_chunked(&above, &cuts).0,
            vec![Event::Error(err.clone())]
        );
    }
    let text = ProtocolError::TooBigInline.to_string();
    assert_eq!(text, "ERR Protocol error: too big inline request");
    assert_eq!(
        ProtocolError::TooBigMbulkCount.to_string(),
        "ERR Protocol error: too big mbulk count string"
    );
    assert_eq!(
        ProtocolError::TooBigBulkCount.to_string(),
        "ERR Protocol error: too big bulk count string"
    );
}

/// Redis finds line ends with `strchr`, which stops at NUL: the request waits, then is too big.
#[test]
fn nul_before_line_end_waits_like_strchr() {
    for (input, err) in [
        (&b"PING\0\r\n"[..], ProtocolError::TooBigInline),
        (b"*1\0\r\n", ProtocolError::TooBigMbulkCount),
        (b"*1\r\n$4\0\r\nPING\r\n", ProtocolError::TooBigBulkCount),
    ] {
        assert_eq!(parse_all(input).0, vec![]);
        let mut big = input.to_vec();
        big.resize(70_000, b'\n');
        assert_eq!(parse_all(&big).0, vec![Event::Error(err)]);
    }
}

#[test]
fn binary_bulk_with_crlf_inside() {
    let body: Vec<u8> = (0..=255u8)
        .chain(b"\r\n\r\n*1\r\n$".iter().copied())
        .collect();
    let mut buf = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", body.len()).into_bytes();
    buf.extend_from_slice(&body);
    buf.extend_from_slice(b"\r\n");
    let cuts: Vec<usize> = (1..buf.len()).collect();
    assert_eq!(
        parse_chunked(&buf, &cuts),
        (vec![req(&[b"ECHO", &body])], 0)
    );
}

/// Resuming must not look at bytes already parsed: overwrite them between calls with garbage
/// that would be a protocol error if re-read.
#[test]
fn resume_does_not_rescan_parsed_bytes() {
    let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n".to_vec();
    let mut p = RequestParser::new(Limits::default());
    let cut = 20; // after `$1\r\nk\r\n`
    assert_eq!(p.parse(&full[..cut]), Ok(None));
    let mut changed = full.clone();
    changed[..cut].copy_from_slice(&[b'#'; 20]);
    changed[0] = b'*'; // still looks like a multibulk start
    assert_eq!(p.parse(&changed), Ok(Some(full.len())));
    assert_eq!(p.argc(), 3);
    assert_eq!(p.arg(&changed, 2), b"value");

    // Same for an inline line: the searched part is not searched again.
    let mut p = RequestParser::new(Limits::default());
    assert_eq!(p.parse(b"ECHO abc"), Ok(None));
    assert_eq!(p.parse(b"ECHO abc\n"), Ok(Some(9)));
}

/// A million arguments arriving in small reads: linear time (a rescanning parser would take
/// hours here, so the bound is generous and the loop is bounded by the input size).
#[test]
fn million_arguments_in_small_pieces() {
    let n = 1_000_000usize;
    let mut buf = format!("*{n}\r\n").into_bytes();
    for _ in 0..n {
        buf.extend_from_slice(b"$1\r\na\r\n");
    }
    let started = std::time::Instant::now();
    let mut p = RequestParser::new(Limits::default());
    let mut end = 0;
    let result = loop {
        end = (end + 61).min(buf.len());
        match p.parse(&buf[..end]) {
            Ok(None) => assert!(end < buf.len(), "complete input must parse"),
            other => break other,
        }
    };
    assert_eq!(result, Ok(Some(buf.len())));
    assert_eq!(p.argc(), n);
    assert_eq!(p.arg(&buf, n - 1), b"a");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn state_resets_after_a_complete_request() {
    let mut p = RequestParser::new(Limits::default());
    let a = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    assert_eq!(p.parse(a), Ok(Some(a.len())));
    assert_eq!(p.argc(), 2);
    let b = b"PING\r\n";
    assert_eq!(p.parse(b), Ok(Some(6)));
    assert_eq!(p.argc(), 1);
    assert_eq!(p.arg(b, 0), b"PING");
    assert_eq!(p.parse(b"*1\r\n$4\r\nPI"), Ok(None));
    assert_eq!(p.argc(), 0, "no arguments while incomplete");
    // Caller misuse (a shorter buffer) restarts instead of panicking.
    assert_eq!(p.parse(b"*"), Ok(None));
    assert_eq!(p.parse(b"*1\r\n$1\r\nx\r\n"), Ok(Some(11)));
}
