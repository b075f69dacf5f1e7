//! SORT and LCS through `Engine::exec`: SORT's pattern rule in cluster mode (issue 18: a
//! pattern is allowed when the keys it names are owned by this engine), the `sortstore`
//! event, a large numeric sort against a reference, and LCS's transient-memory bound. Exact
//! replies are compared with redis-server in `tests/diff/sort_lcs.txt`.

mod common;

use common::{Session, T0};
use engine_core::slot::instance_for_key;
use engine_core::{Client, Config, Engine};

#[test]
fn cluster_mode_allows_patterns_owned_here() {
    let mut s = Session {
        engine: Engine::new(Config {
            hash_seed: 7,
            cluster_nodes: vec!["127.0.0.1:7001".into(), "127.0.0.1:7002".into()],
            cluster_index: 0,
            ..Config::default()
        }),
        client: Client {
            id: 1,
            created_us: T0,
            ..Client::default()
        },
        now_us: T0,
    };
    // A tag owned here and one owned by the other engine.
    let tag = |mine: bool| {
        (0..)
            .map(|i| format!("t{i}"))
            .find(|t| (instance_for_key(t.as_bytes(), 2) == 0) == mine)
            .unwrap()
    };
    let (here, there) = (tag(true), tag(false));
    let l = format!("{{{here}}}l");
    assert_eq!(s.cmd(&format!("RPUSH {l} a b c")), ":3\r\n");
    assert_eq!(
        s.cmd(&format!(
            "MSET {{{here}}}w_a 3 {{{here}}}w_b 1 {{{here}}}w_c 2"
        )),
        "+OK\r\n"
    );
    assert_eq!(
        s.cmd(&format!(
            "SORT {l} BY {{{here}}}w_* GET # GET {{{here}}}w_*"
        )),
        "*6\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\nc\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n3\r\n"
    );
    let by_err = "-ERR BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.\r\n";
    let get_err = "-ERR GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.\r\n";
    assert_eq!(s.cmd(&format!("SORT {l} BY w_*")), by_err, "no tag");
    assert_eq!(s.cmd(&format!("SORT {l} BY {{{there}}}w_*")), by_err);
    assert_eq!(
        s.cmd(&format!("SORT {l} BY {{w_*}}")),
        by_err,
        "* in the tag"
    );
    assert_eq!(s.cmd(&format!("SORT {l} GET {{{there}}}w_*")), get_err);
    // No key read: always allowed.
    assert_eq!(
        s.cmd(&format!("SORT {l} BY nosort GET # GET const")),
        "*6\r\n$1\r\na\r\n$-1\r\n$1\r\nb\r\n$-1\r\n$1\r\nc\r\n$-1\r\n"
    );
}

#[test]
fn sortstore_event_and_large_numeric_sort() {
    let mut s = Session::new();
    let mut argv: Vec<Vec<u8>> = vec![b"RPUSH".to_vec(), b"l".to_vec()];
    let mut x: u64 = 12345;
    let mut want: Vec<(f64, String)> = Vec::new();
    for _ in 0..2000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = format!("{}.{}", (x >> 40) as i64 - (1 << 23), (x >> 20) % 1000);
        want.push((v.parse().unwrap(), v.clone()));
        argv.push(v.into_bytes());
    }
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    s.raw(&refs);
    want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
    assert_eq!(s.cmd("SORT l STORE out"), ":2000\r\n");
    let (r, _) = s.raw(&[b"LRANGE", b"out", b"0", b"-1"]);
    let got: Vec<String> = String::from_utf8(r)
        .unwrap()
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.starts_with('$') && !l.is_empty())
        .map(str::to_string)
        .collect();
    let want: Vec<String> = want.into_iter().map(|w| w.1).collect();
    assert_eq!(got, want);

    assert_eq!(s.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
    let mut sub = Client {
        id: 2,
        ..Default::default()
    };
    let mut out = Vec::new();
    s.engine.exec(
        &mut sub,
        &[b"SUBSCRIBE", b"__keyevent@0__:sortstore"],
        s.now_us,
        &mut out,
    );
    s.cmd("SORT l LIMIT 0 3 STORE out");
    let mut ds = Vec::new();
    s.engine.take_deliveries(&mut ds);
    assert_eq!(ds.len(), 1);
    assert!(String::from_utf8_lossy(&ds[0].bytes).ends_with("$3\r\nout\r\n"));
}

#[test]
fn lcs_memory_is_bounded() {
    let mut s = Session::new();
    let a = "x".repeat(600);
    s.cmd(&format!("SET a {a}"));
    s.cmd(&format!("SET b {a}"));
    assert_eq!(s.cmd("LCS a b LEN"), ":600\r\n");
    assert_eq!(s.cmd("CONFIG SET proto-max-bulk-len 1mb"), "+OK\r\n");
    let big = "y".repeat(600);
    s.cmd(&format!("SET c {big}{big}"));
    assert_eq!(
        s.cmd("LCS c c LEN"),
        "-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n"
    );
}

#[test]
fn sort_patterns_need_read_access_to_every_key() {
    let mut s = Session::new();
    s.cmd("RPUSH mylist 1");
    s.cmd("SET v1 1");
    let by = "-ERR BY option of SORT denied due to insufficient ACL permissions.\r\n";
    let get = "-ERR GET option of SORT denied due to insufficient ACL permissions.\r\n";
    assert_eq!(
        s.cmd("ACL SETUSER u on nopass +sort ~mylist ~v*"),
        "+OK\r\n"
    );
    assert_eq!(s.cmd("AUTH u x"), "+OK\r\n");
    assert_eq!(s.cmd("SORT mylist BY v*"), by);
    assert_eq!(s.cmd("SORT mylist GET #"), get);
    assert_eq!(s.cmd("SORT mylist BY nosort"), "*1\r\n$1\r\n1\r\n");
    let as_default = |s: &mut Session, rules: &str| {
        assert_eq!(s.cmd("AUTH default x"), "+OK\r\n");
        assert_eq!(
            s.cmd(&format!("ACL SETUSER u resetkeys {rules}")),
            "+OK\r\n"
        );
        assert_eq!(s.cmd("AUTH u x"), "+OK\r\n");
    };
    as_default(&mut s, "~mylist %W~*");
    assert_eq!(s.cmd("SORT mylist BY v*"), by, "write access is not enough");
    as_default(&mut s, "~mylist %R~*");
    assert_eq!(s.cmd("SORT mylist BY v* GET #"), "*1\r\n$1\r\n1\r\n");
}
