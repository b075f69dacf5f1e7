//! UNLINK and FLUSHALL ASYNC free big values later, counted as Redis counts them (issue 19,
//! Tcl `unit/lazyfree`; `engine/core/src/lazyfree.rs`), on redis-server and an engine alike:
//! INFO `lazyfreed_objects` grows by one for an unlinked value that is costly to free (a
//! 1,000-member set, a stream of 200 nodes), not for a small one (a string, a stream of one
//! node whose group was destroyed), by the number of keys for FLUSHALL ASYNC, and
//! `lazyfree_pending_objects` drains to 0.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn memory_field(c: &mut Resp, name: &str) -> i64 {
    let r = c.cmd_str(&["INFO", "memory"]);
    let text = parse_value(&r).str().unwrap_or_default().to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (at most 5 s) for nothing to be pending, then answers `lazyfreed_objects`.
fn freed(c: &mut Resp) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    while memory_field(c, "lazyfree_pending_objects") != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(memory_field(c, "lazyfree_pending_objects"), 0);
    memory_field(c, "lazyfreed_objects")
}

#[test]
fn unlink_and_flush_async_count_lazily_freed_objects() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        assert_eq!(c.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
        assert_eq!(freed(&mut c), 0, "{who}");
        assert_eq!(c.cmd_str(&["SET", "s", "v"]), b"+OK\r\n");
        assert_eq!(c.cmd_str(&["UNLINK", "s"]), b":1\r\n");
        assert_eq!(freed(&mut c), 0, "{who}: a string is freed at once");

        let mut sadd: Vec<String> = vec!["SADD".into(), "big".into()];
        sadd.extend((0..1000).map(|i| format!("member:{i}")));
        let refs: Vec<&str> = sadd.iter().map(String::as_str).collect();
        assert_eq!(c.cmd_str(&refs), b":1000\r\n");
        assert_eq!(c.cmd_str(&["UNLINK", "big", "nosuch"]), b":1\r\n");
        assert_eq!(c.cmd_str(&["EXISTS", "big"]), b":0\r\n", "{who}");
        assert_eq!(
            freed(&mut c),
            1,
            "{who}: a 1,000-member set is freed lazily"
        );

        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "stream-node-max-entries", "5"]),
            b"+OK\r\n"
        );
        for i in 0..1000 {
            let r = c.cmd_str(&["XADD", "st", "*", "f", &i.to_string()]);
            assert!(r.starts_with(b"$"), "{who}: {}", escape(&r));
        }
        assert_eq!(c.cmd_str(&["UNLINK", "st"]), b":1\r\n");
        assert_eq!(
            freed(&mut c),
            2,
            "{who}: a stream of 200 nodes is freed lazily"
        );

        assert!(c.cmd_str(&["XADD", "one", "*", "a", "b"]).starts_with(b"$"));
        assert_eq!(
            c.cmd_str(&["XGROUP", "CREATE", "one", "g", "$"]),
            b"+OK\r\n"
        );
        assert_eq!(c.cmd_str(&["XGROUP", "DESTROY", "one", "g"]), b":1\r\n");
        assert_eq!(c.cmd_str(&["UNLINK", "one"]), b":1\r\n");
        assert_eq!(
            freed(&mut c),
            2,
            "{who}: a one-node stream is freed at once"
        );

        for i in 0..10 {
            assert_eq!(c.cmd_str(&["SET", &format!("k{i}"), "v"]), b"+OK\r\n");
        }
        assert_eq!(c.cmd_str(&["FLUSHALL", "ASYNC"]), b"+OK\r\n");
        assert_eq!(freed(&mut c), 12, "{who}: FLUSHALL ASYNC counts its keys");
        assert_eq!(c.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
        assert_eq!(memory_field(&mut c, "lazyfreed_objects"), 0, "{who}");
    });
}
