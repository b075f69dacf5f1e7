//! Blocking sorted-set pops (BZPOPMIN, BZPOPMAX, BZMPOP) against a real redis-server and a
//! recached engine, with the same expectations (exact frames) for both: woken by a ZADD from
//! another client, a timeout answers nil on time, RESP3 nil, and a client that disconnects
//! while blocked takes nothing with it.

mod common;

use common::*;
use std::thread::sleep;
use std::time::{Duration, Instant};

#[test]
fn bzpopmin_woken_by_zadd() {
    on_both(|port, name| {
        let mut a = Resp::connect(port);
        let mut b = Resp::connect(port);
        let mut w = Resp::connect(port);
        send(&mut a, &["BZPOPMIN", "other", "k", "0"]);
        send(&mut b, &["BZPOPMAX", "k", "0"]);
        // Let both park before the write (if one has not, it pops at once: same reply).
        sleep(Duration::from_millis(150));
        assert_eq!(
            cmd(&mut w, &["ZADD", "k", "1", "a", "2", "b", "3", "c"]),
            ":3\\r\\n"
        );
        assert_eq!(
            next(&mut a),
            "*3\\r\\n$1\\r\\nk\\r\\n$1\\r\\na\\r\\n$1\\r\\n1\\r\\n",
            "{name}"
        );
        assert_eq!(
            next(&mut b),
            "*3\\r\\n$1\\r\\nk\\r\\n$1\\r\\nc\\r\\n$1\\r\\n3\\r\\n",
            "{name}"
        );
        assert_eq!(
            cmd(&mut w, &["ZRANGE", "k", "0", "-1"]),
            "*1\\r\\n$1\\r\\nb\\r\\n"
        );
        // Both connections serve commands again.
        assert_eq!(cmd(&mut a, &["PING"]), "+PONG\\r\\n", "{name}");
        assert_eq!(cmd(&mut b, &["ZCARD", "k"]), ":1\\r\\n", "{name}");
    });
}

#[test]
fn bzmpop_woken_with_count() {
    on_both(|port, name| {
        let mut a = Resp::connect(port);
        let mut w = Resp::connect(port);
        send(
            &mut a,
            &["BZMPOP", "5", "2", "z1", "z2", "MIN", "COUNT", "2"],
        );
        sleep(Duration::from_millis(150));
        assert_eq!(
            cmd(&mut w, &["ZADD", "z2", "5", "x", "1.5", "y", "9", "z"]),
            ":3\\r\\n"
        );
        assert_eq!(
            next(&mut a),
            "*2\\r\\n$2\\r\\nz2\\r\\n*2\\r\\n*2\\r\\n$1\\r\\ny\\r\\n$3\\r\\n1.5\\r\\n*2\\r\\n$1\\r\\nx\\r\\n$1\\r\\n5\\r\\n",
            "{name}"
        );
    });
}

#[test]
fn timeout_returns_nil_on_time() {
    on_both(|port, name| {
        let mut a = Resp::connect(port);
        let t = Instant::now();
        assert_eq!(
            cmd(&mut a, &["BZPOPMIN", "k", "0.3"]),
            "*-1\\r\\n",
            "{name}"
        );
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(280) && took < Duration::from_secs(3),
            "{name}: {took:?}"
        );
        // RESP3: the null type.
        let hello = a.cmd_str(&["HELLO", "3"]);
        assert!(hello.starts_with(b"%"), "{name}");
        assert_eq!(cmd(&mut a, &["BZPOPMAX", "k", "0.1"]), "_\\r\\n", "{name}");
        assert_eq!(
            cmd(&mut a, &["BZMPOP", "0.1", "1", "k", "MAX"]),
            "_\\r\\n",
            "{name}"
        );
    });
}

#[test]
fn disconnect_while_blocked_leaks_nothing() {
    on_both(|port, name| {
        let mut a = Resp::connect(port);
        let mut w = Resp::connect(port);
        send(&mut a, &["BZPOPMIN", "k", "0"]);
        sleep(Duration::from_millis(150));
        drop(a);
        sleep(Duration::from_millis(150));
        assert_eq!(cmd(&mut w, &["ZADD", "k", "1", "a"]), ":1\\r\\n");
        // Nobody took the member.
        assert_eq!(cmd(&mut w, &["ZCARD", "k"]), ":1\\r\\n", "{name}");
        // A later waiter is still served.
        let mut b = Resp::connect(port);
        assert_eq!(
            cmd(&mut b, &["BZPOPMIN", "k", "1"]),
            "*3\\r\\n$1\\r\\nk\\r\\n$1\\r\\na\\r\\n$1\\r\\n1\\r\\n",
            "{name}"
        );
    });
}
