//! Blocking list commands over real sockets, against a real redis-server and a recached engine
//! with the same expectations (exact frames), so the expectations themselves are checked
//! against Redis: a BLPOP woken by another client's LPUSH (and the requests it pipelined
//! behind the BLPOP run after it), BRPOP timing out on time, FIFO service of two waiters,
//! BLMOVE waking and moving, a waiter that disconnects (nothing leaks: a later push stays in
//! the list), RESP3 nulls on timeout, and the keyspace events of list commands.
//!
//! Run `cargo build -p recached` first (the tests start `target/*/recached server`).

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Number of connections whose last command is `blocking_cmd` (CLIENT LIST `cmd=`), as seen
/// from a fresh connection.
fn clients_in(port: u16, blocking_cmd: &str) -> usize {
    let mut admin = Resp::connect(port);
    let list = admin.cmd_str(&["CLIENT", "LIST"]);
    let needle = format!(" cmd={blocking_cmd} ");
    String::from_utf8_lossy(&list).matches(&needle).count()
}

/// Waits (at most 5 s) until `n` connections are in `blocking_cmd`, so a following write
/// cannot overtake the blocking command on the server.
fn wait_parked(port: u16, blocking_cmd: &str, n: usize, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = clients_in(port, blocking_cmd);
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{who}: {got} clients in {blocking_cmd}, want {n}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn info_field(c: &mut Resp, field: &str) -> String {
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "clients"])).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO clients has no {field}: {info}"))
        .trim()
        .to_string()
}

#[test]
fn blpop_is_woken_by_lpush_from_another_client() {
    on_both(|port, who| {
        let mut waiter = Resp::connect(port);
        let mut pusher = Resp::connect(port);
        // The PING is pipelined behind the BLPOP: it must wait for the BLPOP's reply.
        let mut req = Resp::encode(&[b"BLPOP", b"k", b"0"]);
        req.extend_from_slice(&Resp::encode(&[b"PING"]));
        waiter.send_raw(&req);
        wait_parked(port, "blpop", 1, who);
        assert_quiet(&mut waiter, who);
        assert_eq!(cmd(&mut pusher, &["LPUSH", "k", "a"]), ":1\\r\\n", "{who}");
        assert_eq!(
            next(&mut waiter),
            "*2\\r\\n$1\\r\\nk\\r\\n$1\\r\\na\\r\\n",
            "{who}"
        );
        assert_eq!(next(&mut waiter), "+PONG\\r\\n", "{who}");
        assert_eq!(cmd(&mut pusher, &["EXISTS", "k"]), ":0\\r\\n", "{who}");
    });
}

#[test]
fn brpop_times_out_on_time_with_a_null_array() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        let start = Instant::now();
        assert_eq!(
            cmd(&mut c, &["BRPOP", "nokey", "0.2"]),
            "*-1\\r\\n",
            "{who}"
        );
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(190),
            "{who}: answered after {took:?}, before the 0.2 s timeout"
        );
        assert!(took < Duration::from_secs(2), "{who}: took {took:?}");
        // The connection is usable afterwards.
        assert_eq!(cmd(&mut c, &["PING"]), "+PONG\\r\\n", "{who}");
    });
}

#[test]
fn two_waiters_on_one_key_are_served_in_order() {
    on_both(|port, who| {
        let mut first = Resp::connect(port);
        let mut second = Resp::connect(port);
        let mut pusher = Resp::connect(port);
        send(&mut first, &["BLPOP", "k", "0"]);
        wait_parked(port, "blpop", 1, who);
        send(&mut second, &["BLPOP", "k", "0"]);
        wait_parked(port, "blpop", 2, who);
        assert_eq!(cmd(&mut pusher, &["RPUSH", "k", "a"]), ":1\\r\\n", "{who}");
        assert_eq!(
            next(&mut first),
            "*2\\r\\n$1\\r\\nk\\r\\n$1\\r\\na\\r\\n",
            "{who}"
        );
        assert_quiet(&mut second, who);
        assert_eq!(
            cmd(&mut pusher, &["RPUSH", "k", "b", "c"]),
            ":2\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut second),
            "*2\\r\\n$1\\r\\nk\\r\\n$1\\r\\nb\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut pusher, &["LRANGE", "k", "0", "-1"]),
            "*1\\r\\n$1\\r\\nc\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn blmove_wakes_and_moves() {
    on_both(|port, who| {
        let mut waiter = Resp::connect(port);
        let mut pusher = Resp::connect(port);
        send(&mut waiter, &["BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"]);
        wait_parked(port, "blmove", 1, who);
        assert_eq!(
            cmd(&mut pusher, &["RPUSH", "src", "x", "y"]),
            ":2\\r\\n",
            "{who}"
        );
        assert_eq!(next(&mut waiter), "$1\\r\\ny\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut pusher, &["LRANGE", "src", "0", "-1"]),
            "*1\\r\\n$1\\r\\nx\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut pusher, &["LRANGE", "dst", "0", "-1"]),
            "*1\\r\\n$1\\r\\ny\\r\\n",
            "{who}"
        );
        // BRPOPLPUSH with data present answers at once.
        assert_eq!(
            cmd(&mut waiter, &["BRPOPLPUSH", "src", "dst", "0"]),
            "$1\\r\\nx\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn a_client_disconnecting_while_blocked_leaks_nothing() {
    on_both(|port, who| {
        let mut admin = Resp::connect(port);
        {
            let mut gone = Resp::connect(port);
            send(&mut gone, &["BLPOP", "k", "0"]);
            let mut gone_too = Resp::connect(port);
            send(&mut gone_too, &["BLPOP", "k", "other", "100"]);
            wait_parked(port, "blpop", 2, who);
        } // both connections close here
        let deadline = Instant::now() + Duration::from_secs(5);
        while clients_in(port, "blpop") != 0 {
            assert!(
                Instant::now() < deadline,
                "{who}: closed waiters still listed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(info_field(&mut admin, "blocked_clients"), "0", "{who}");
        // Nobody is served any more: the pushed value stays in the list.
        assert_eq!(cmd(&mut admin, &["LPUSH", "k", "v"]), ":1\\r\\n", "{who}");
        assert_eq!(cmd(&mut admin, &["LLEN", "k"]), ":1\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut admin, &["RPUSH", "other", "w"]),
            ":1\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut admin, &["LLEN", "other"]), ":1\\r\\n", "{who}");
    });
}

#[test]
fn resp3_timeouts_answer_null() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        c.cmd_str(&["HELLO", "3"]);
        assert_eq!(cmd(&mut c, &["BLPOP", "nokey", "0.05"]), "_\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut c, &["BLMOVE", "nokey", "d", "LEFT", "LEFT", "0.05"]),
            "_\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["BLMPOP", "0.05", "1", "nokey", "LEFT"]),
            "_\\r\\n",
            "{who}"
        );
        // And woken replies are arrays as in RESP2.
        let mut pusher = Resp::connect(port);
        send(&mut c, &["BRPOP", "k", "5"]);
        wait_parked(port, "brpop", 1, who);
        assert_eq!(
            cmd(&mut pusher, &["RPUSH", "k", "a", "b"]),
            ":2\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut c),
            "*2\\r\\n$1\\r\\nk\\r\\n$1\\r\\nb\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn list_commands_emit_redis_keyspace_events() {
    on_both(|port, who| {
        let mut admin = Resp::connect(port);
        let mut sub = Resp::connect(port);
        assert_eq!(
            cmd(
                &mut admin,
                &["CONFIG", "SET", "notify-keyspace-events", "KEA"]
            ),
            "+OK\\r\\n",
            "{who}"
        );
        sub.cmd_str(&["PSUBSCRIBE", "__keyevent@0__:*"]);
        for line in [
            "RPUSH l a b c",
            "LPUSH l z",
            "LPUSHX nokey z",
            "LPOP l",
            "RPOP l 1",
            "LSET l 0 q",
            "LINSERT l BEFORE q w",
            "LINSERT l BEFORE nothere w",
            "LREM l 1 w",
            "LREM l 1 nothere",
            "LTRIM l 0 0",
            "LMOVE l l2 LEFT RIGHT",
            "RPUSHX l2 x",
            "RPOPLPUSH l2 l2",
            "LMPOP 1 l2 LEFT COUNT 5",
            "RPUSH b v",
            "BLPOP b 0",
        ] {
            let args: Vec<&str> = line.split(' ').collect();
            admin.cmd_str(&args);
        }
        let mut events = Vec::new();
        loop {
            let (bytes, _) =
                sub.read_until_close(Duration::from_millis(200), Duration::from_secs(2));
            if bytes.is_empty() {
                break;
            }
            let mut rest = &bytes[..];
            while let Ok(Some(n)) = frame_len(rest) {
                let v = parse_value(&rest[..n]);
                let parts = v.array().expect("pmessage array");
                let channel = parts[2].str().unwrap();
                let key = parts[3].str().unwrap();
                events.push(format!(
                    "{}:{key}",
                    channel.trim_start_matches("__keyevent@0__:")
                ));
                rest = &rest[n..];
            }
            assert!(rest.is_empty(), "{who}: partial frame");
            assert!(events.len() < 1000);
        }
        assert_eq!(
            events,
            [
                "rpush:l",
                "lpush:l",
                "lpop:l",
                "rpop:l",
                "lset:l",
                "linsert:l",
                "lrem:l",
                "ltrim:l",
                "rpush:l2",
                "lpop:l",
                "del:l",
                "rpush:l2",
                "lpush:l2",
                "rpop:l2",
                "lpop:l2",
                "del:l2",
                "rpush:b",
                "lpop:b",
                "del:b",
            ],
            "{who}"
        );
    });
}
