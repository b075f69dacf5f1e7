//! HyperLogLog through `Engine::exec`: PFCOUNT's cache write (a read-only command that
//! changes the value: WATCH sees it, the header's cache bytes change), `hll-sparse-max-bytes`
//! through CONFIG, and estimates staying within the error bound. The bytes of every HLL are
//! compared with redis-server's in `tests/diff/hyperloglog.txt`.

mod common;

use common::Session;

fn get(s: &mut Session, key: &str) -> Vec<u8> {
    let (r, _) = s.raw(&[b"GET", key.as_bytes()]);
    let at = r.iter().position(|&b| b == b'\n').unwrap() + 1;
    r[at..r.len() - 2].to_vec()
}

#[test]
fn pfcount_caches_in_the_header_and_signals_watch() {
    let mut s = Session::new();
    assert_eq!(s.cmd("PFADD h a b c"), ":1\r\n");
    let before = get(&mut s, "h");
    assert_eq!(before[15] & 0x80, 0x80, "cache invalid after PFADD");
    assert_eq!(s.cmd("WATCH h"), "+OK\r\n");
    assert_eq!(s.cmd("PFCOUNT h"), ":3\r\n");
    assert_eq!(s.cmd("MULTI"), "+OK\r\n");
    s.cmd("PING");
    assert_eq!(s.cmd("EXEC"), "*-1\r\n", "the cache write is a change");
    let after = get(&mut s, "h");
    assert_eq!(&after[8..16], &3u64.to_le_bytes());
    assert_eq!(after[16..], before[16..]);
    // A second PFCOUNT reads the cache and changes nothing.
    assert_eq!(s.cmd("WATCH h"), "+OK\r\n");
    assert_eq!(s.cmd("PFCOUNT h"), ":3\r\n");
    assert_eq!(s.cmd("MULTI"), "+OK\r\n");
    s.cmd("PING");
    assert_eq!(s.cmd("EXEC"), "*1\r\n+PONG\r\n");
}

#[test]
fn sparse_limit_is_a_setting() {
    let mut s = Session::new();
    assert_eq!(
        s.cmd("CONFIG GET hll-sparse-max-bytes"),
        "*2\r\n$20\r\nhll-sparse-max-bytes\r\n$4\r\n3000\r\n"
    );
    assert_eq!(s.cmd("CONFIG SET hll-sparse-max-bytes 20"), "+OK\r\n");
    s.cmd("PFADD h a b c d e f g h i j");
    assert_eq!(s.cmd("PFDEBUG ENCODING h"), "+dense\r\n");
    assert_eq!(s.cmd("STRLEN h"), ":12304\r\n");
    assert_eq!(s.cmd("CONFIG SET hll-sparse-max-bytes 1kb"), "+OK\r\n");
    s.cmd("PFADD h2 a b c d e f g h i j");
    assert_eq!(s.cmd("PFDEBUG ENCODING h2"), "+sparse\r\n");
    assert_eq!(
        s.cmd("CONFIG SET hll-sparse-max-bytes -1"),
        "-ERR CONFIG SET failed (possibly related to argument 'hll-sparse-max-bytes') - argument must be a memory value\r\n"
    );
}

#[test]
fn estimates_within_the_error_bound_and_union() {
    let mut s = Session::new();
    for (key, n) in [("a", 5000u32), ("b", 20000)] {
        let mut argv: Vec<Vec<u8>> = vec![b"PFADD".to_vec(), key.as_bytes().to_vec()];
        argv.extend((0..n).map(|i| format!("{key}{i}").into_bytes()));
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        assert_eq!(s.raw(&refs).0, b":1\r\n");
        let got: f64 = s.cmd(&format!("PFCOUNT {key}"))[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(
            (got - f64::from(n)).abs() / f64::from(n) < 0.05,
            "{key}: {got}"
        );
    }
    let union: f64 = s.cmd("PFCOUNT a b")[1..].trim().parse().unwrap();
    assert!((union - 25000.0).abs() / 25000.0 < 0.05, "{union}");
    assert_eq!(s.cmd("PFMERGE c a b"), "+OK\r\n");
    assert_eq!(s.cmd("PFCOUNT c"), format!(":{union}\r\n"));
}
