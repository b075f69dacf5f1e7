//! Reply frame scanner tests.

use resp::{FrameScanner, ProtocolError, frame_len};

/// Frames that each must be scanned as exactly one unit.
const FRAMES: &[&[u8]] = &[
    b"+OK\r\n",
    b"-ERR unknown command 'x'\r\n",
    b":-42\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"$0\r\n\r\n",
    b"$5\r\na\r\nb\n\r\n", // CRLF inside a bulk body
    b"_\r\n",
    b",3.14\r\n",
    b"#t\r\n",
    b"(3492890328409238509324850943850943825024385\r\n",
    b"!21\r\nSYNTAX invalid syntax\r\n",
    b"=15\r\ntxt:Some string\r\n",
    b"*0\r\n",
    b"*3\r\n:1\r\n$-1\r\n+x\r\n",
    b"*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n*0\r\n",
    b"%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n:1\r\n:2\r\n",
    b"~2\r\n+a\r\n+b\r\n",
    b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n",
    // An attribute travels with the frame it annotates.
    b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:2039123\r\n:9543892\r\n",
    b"*2\r\n|1\r\n+ttl\r\n:3600\r\n+v\r\n:1\r\n",
];

#[test]
fn each_frame_alone_and_in_a_stream() {
    let mut stream = Vec::new();
    for f in FRAMES {
        assert_eq!(
            frame_len(f),
            Ok(Some(f.len())),
            "{}",
            String::from_utf8_lossy(f)
        );
        // Any proper prefix is incomplete.
        for k in 0..f.len() {
            assert_eq!(
                frame_len(&f[..k]),
                Ok(None),
                "{} at {k}",
                String::from_utf8_lossy(f)
            );
        }
        stream.extend_from_slice(f);
    }
    // One scanner over a stream, split at every offset, drained like a read buffer.
    for cut in 0..=stream.len() {
        let mut s = FrameScanner::new();
        let mut rbuf = Vec::new();
        let mut got = Vec::new();
        for piece in [&stream[..cut], &stream[cut..]] {
            rbuf.extend_from_slice(piece);
            while let Some(n) = s.scan(&rbuf).unwrap() {
                got.push(rbuf.drain(..n).collect::<Vec<u8>>());
            }
        }
        assert!(rbuf.is_empty());
        assert_eq!(got, FRAMES, "split at {cut}");
    }
}

#[test]
fn byte_by_byte_resumes() {
    let stream: Vec<u8> = FRAMES.concat();
    let mut s = FrameScanner::new();
    let mut start = 0;
    let mut got = 0;
    for end in 1..=stream.len() {
        if let Some(n) = s.scan(&stream[start..end]).unwrap() {
            assert_eq!(&stream[start..start + n], FRAMES[got]);
            got += 1;
            start += n;
        }
    }
    assert_eq!(got, FRAMES.len());
}

#[test]
fn malformed_frames() {
    for bad in [
        &b"?1\r\n"[..],
        b"\r\n", // found by the fuzz target: no type byte
        b"*1\r\n\r\n",
        b"+OK\rX",
        b"$3\r\nabcXY",
        b"$-2\r\n",
        b"$abc\r\n",
        b"*-2\r\n",
        b"%-1\r\n",
        b"~01\r\n",
        b"!-1\r\n",
        b"*1\r\n$?\r\n",
        b"$99999999999999999999\r\n",
    ] {
        assert!(
            matches!(frame_len(bad), Err(ProtocolError::InvalidReply(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // Counts that overflow the pending counter are errors, not panics.
    let mut b = Vec::new();
    for _ in 0..3 {
        b.extend_from_slice(b"%9223372036854775807\r\n");
    }
    assert!(matches!(frame_len(&b), Err(ProtocolError::InvalidReply(_))));
}

/// Hostile nesting: a million levels is a counter, not a million stack frames.
#[test]
fn deep_nesting_does_not_recurse() {
    let depth = 1_000_000;
    let mut b = b"*1\r\n".repeat(depth);
    assert_eq!(frame_len(&b), Ok(None));
    b.extend_from_slice(b":1\r\n");
    assert_eq!(frame_len(&b), Ok(Some(b.len())));
}

/// A big array arriving in pieces is scanned once (resuming at the next header).
#[test]
fn large_array_in_pieces() {
    let n = 200_000;
    let mut b = format!("*{n}\r\n").into_bytes();
    for i in 0..n {
        b.extend_from_slice(format!("${}\r\n{i}\r\n", i.to_string().len()).as_bytes());
    }
    let mut s = FrameScanner::new();
    let mut end = 0;
    let result = loop {
        end = (end + 97).min(b.len());
        match s.scan(&b[..end]) {
            Ok(None) => assert!(end < b.len()),
            other => break other,
        }
    };
    assert_eq!(result, Ok(Some(b.len())));
}
