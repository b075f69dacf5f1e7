//! Request encoder: the one way every role (supervisor, bench, proxy, wasm replica) writes a
//! command to a Redis-compatible server.
//!
//! Shape: a RESP multibulk, `*<N>\r\n` then for each argument `$<len>\r\n<bytes>\r\n`. Arguments
//! are binary-safe (CR, LF and NUL inside an argument are fine); nothing can fail.

/// Appends `args` to `out` as one multibulk request.
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_request(&mut out, &["GET", "k"]);
/// assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
/// ```
pub fn encode_request<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    let body: usize = args.iter().map(|a| a.as_ref().len() + 16).sum();
    out.reserve(body + 16);
    header(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn header(out: &mut Vec<u8>, tag: u8, n: usize) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, RequestParser};

    fn enc<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_request(&mut out, args);
        out
    }

    #[test]
    fn shapes() {
        assert_eq!(enc::<&str>(&[]), b"*0\r\n");
        assert_eq!(enc(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(
            enc(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
        let bin: &[&[u8]] = &[b"a\r\nb", b"\0"];
        assert_eq!(enc(bin), b"*2\r\n$4\r\na\r\nb\r\n$1\r\n\0\r\n");
        assert_eq!(enc(&vec![String::from("x"); 10])[..5], *b"*10\r\n");
        assert_eq!(enc(&[vec![b'v'; 12]]), b"*1\r\n$12\r\nvvvvvvvvvvvv\r\n");
        // Appends, never clears.
        let mut out = b"+x".to_vec();
        encode_request(&mut out, &["A"]);
        assert_eq!(out, b"+x*1\r\n$1\r\nA\r\n");
    }

    #[test]
    fn round_trips_through_the_request_parser() {
        let args: Vec<Vec<u8>> = vec![
            b"MSET".to_vec(),
            b"k\r\n".to_vec(),
            vec![0, 255],
            Vec::new(),
        ];
        let buf = enc(&args);
        let mut p = RequestParser::new(Limits::default());
        assert_eq!(p.parse(&buf), Ok(Some(buf.len())));
        let got: Vec<&[u8]> = (0..p.argc()).map(|i| p.arg(&buf, i)).collect();
        assert_eq!(got, args.iter().map(Vec::as_slice).collect::<Vec<_>>());
    }
}
