//! Blocking stream reads over real sockets, against a real redis-server and a recached engine
//! with the same expectations (exact frames, escaped): XREAD BLOCK woken by another client's
//! XADD (with `$` meaning the last ID when it blocked), two XREADGROUP waiters served in order
//! with distinct entries, a timeout's null, CLIENT UNBLOCK, a waiter that disconnects (its
//! consumer never appears), an XREADGROUP told its stream was deleted, the keyspace events
//! of stream commands, and consumer connections dropped mid-read losing no entry.
//!
//! Run `cargo build -p recached` first (the tests start `target/*/recached server`).

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Waits (at most 5 s) until `n` clients are blocked (INFO `blocked_clients`).
fn wait_blocked(port: u16, n: usize, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut admin = Resp::connect(port);
    loop {
        let info = String::from_utf8_lossy(&admin.cmd_str(&["INFO", "clients"])).into_owned();
        let got = info
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .map(|v| v.trim().parse::<usize>().unwrap())
            .unwrap();
        if got == n {
            return;
        }
        assert!(Instant::now() < deadline, "{who}: {got} blocked, want {n}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn xread_block_is_woken_by_xadd_after_its_dollar() {
    on_both(|port, who| {
        let mut waiter = Resp::connect(port);
        let mut writer = Resp::connect(port);
        cmd(&mut writer, &["XADD", "s", "5-0", "f", "old"]);
        send(&mut waiter, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
        wait_blocked(port, 1, who);
        assert_eq!(cmd(&mut writer, &["XDEL", "s", "5-0"]), ":1\\r\\n", "{who}");
        assert_quiet(&mut waiter, who);
        cmd(&mut writer, &["XADD", "s", "6-0", "f", "new"]);
        assert_eq!(
            next(&mut waiter),
            "*1\\r\\n*2\\r\\n$1\\r\\ns\\r\\n*1\\r\\n*2\\r\\n$3\\r\\n6-0\\r\\n*2\\r\\n$1\\r\\nf\\r\\n$3\\r\\nnew\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn two_group_readers_are_served_in_order_with_distinct_entries() {
    on_both(|port, who| {
        let mut a = Resp::connect(port);
        let mut b = Resp::connect(port);
        let mut writer = Resp::connect(port);
        cmd(
            &mut writer,
            &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
        );
        send(
            &mut a,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "alice",
                "COUNT",
                "1",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
        );
        wait_blocked(port, 1, who);
        send(
            &mut b,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "bob",
                "COUNT",
                "1",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
        );
        wait_blocked(port, 2, who);
        cmd(&mut writer, &["XADD", "s", "1-0", "f", "a"]);
        assert_eq!(
            next(&mut a),
            "*1\\r\\n*2\\r\\n$1\\r\\ns\\r\\n*1\\r\\n*2\\r\\n$3\\r\\n1-0\\r\\n*2\\r\\n$1\\r\\nf\\r\\n$1\\r\\na\\r\\n",
            "{who}"
        );
        assert_quiet(&mut b, who);
        cmd(&mut writer, &["XADD", "s", "2-0", "f", "b"]);
        assert_eq!(
            next(&mut b),
            "*1\\r\\n*2\\r\\n$1\\r\\ns\\r\\n*1\\r\\n*2\\r\\n$3\\r\\n2-0\\r\\n*2\\r\\n$1\\r\\nf\\r\\n$1\\r\\nb\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut writer, &["XPENDING", "s", "g"]),
            "*4\\r\\n:2\\r\\n$3\\r\\n1-0\\r\\n$3\\r\\n2-0\\r\\n*2\\r\\n*2\\r\\n$5\\r\\nalice\\r\\n$1\\r\\n1\\r\\n*2\\r\\n$3\\r\\nbob\\r\\n$1\\r\\n1\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn timeouts_unblock_and_deletion() {
    on_both(|port, who| {
        let mut waiter = Resp::connect(port);
        let mut admin = Resp::connect(port);
        // A timeout answers a null array.
        assert_eq!(
            cmd(&mut waiter, &["XREAD", "BLOCK", "50", "STREAMS", "s", "$"]),
            "*-1\\r\\n",
            "{who}"
        );
        // CLIENT UNBLOCK … ERROR.
        let id = cmd(&mut waiter, &["CLIENT", "ID"]);
        let id = id
            .trim_start_matches(':')
            .trim_end_matches("\\r\\n")
            .to_string();
        send(&mut waiter, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
        wait_blocked(port, 1, who);
        assert_eq!(
            cmd(&mut admin, &["CLIENT", "UNBLOCK", &id, "ERROR"]),
            ":1\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut waiter),
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\\r\\n",
            "{who}"
        );
        // An XREADGROUP whose stream is deleted is told so.
        cmd(&mut admin, &["XGROUP", "CREATE", "t", "g", "$", "MKSTREAM"]);
        send(
            &mut waiter,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "t",
                ">",
            ],
        );
        wait_blocked(port, 1, who);
        cmd(&mut admin, &["DEL", "t"]);
        assert_eq!(
            next(&mut waiter),
            "-UNBLOCKED the stream key no longer exists\\r\\n",
            "{who}"
        );
        // A reader that disconnects while blocked leaves no consumer behind.
        cmd(&mut admin, &["XGROUP", "CREATE", "u", "g", "$", "MKSTREAM"]);
        {
            let mut gone = Resp::connect(port);
            send(
                &mut gone,
                &[
                    "XREADGROUP",
                    "GROUP",
                    "g",
                    "gone",
                    "BLOCK",
                    "0",
                    "STREAMS",
                    "u",
                    ">",
                ],
            );
            wait_blocked(port, 1, who);
        }
        wait_blocked(port, 0, who);
        cmd(&mut admin, &["XADD", "u", "1-0", "f", "v"]);
        assert_eq!(
            cmd(&mut admin, &["XINFO", "CONSUMERS", "u", "g"]),
            "*0\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn stream_commands_emit_redis_keyspace_events() {
    on_both(|port, who| {
        let mut admin = Resp::connect(port);
        let mut sub = Resp::connect(port);
        cmd(
            &mut admin,
            &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
        );
        sub.cmd_str(&["PSUBSCRIBE", "__keyevent@0__:*"]);
        for line in [
            "XADD s 1-0 f v",
            "XADD s MAXLEN 1 2-0 f v",
            "XADD s NOMKSTREAM 3-0 f v",
            "XDEL s 3-0",
            "XDEL s 9-0",
            "XTRIM s MAXLEN 0",
            "XTRIM s MAXLEN 0",
            "XSETID s 10-0",
            "XGROUP CREATE s g $",
            "XGROUP CREATECONSUMER s g c",
            "XREADGROUP GROUP g d STREAMS s >",
            "XGROUP SETID s g 0",
            "XGROUP DELCONSUMER s g c",
            "XGROUP DESTROY s g",
            "XGROUP CREATE n g $ MKSTREAM",
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
            assert!(events.len() < 1000);
        }
        assert_eq!(
            events,
            [
                "xadd:s",
                "xadd:s",
                "xtrim:s",
                "xadd:s",
                "xdel:s",
                "xtrim:s",
                "xsetid:s",
                "xgroup-create:s",
                // XREADGROUP on the empty stream serves nothing and creates no consumer.
                "xgroup-createconsumer:s",
                "xgroup-setid:s",
                "xgroup-delconsumer:s",
                "xgroup-destroy:s",
                "xgroup-create:n",
            ],
            "{who}"
        );
    });
}

/// Several consumers of one group over real sockets; one connection is dropped (as by
/// `kill -9` of its process) with an XREADGROUP it never read the reply of, another while
/// parked in XREADGROUP BLOCK. Every entry ends acknowledged or pending on a consumer, none
/// is lost or delivered twice to the survivors, and the dead consumer's entries are claimed.
#[test]
fn consumer_connections_killed_mid_read_lose_no_entry() {
    on_both(|port, who| {
        let mut w = Resp::connect(port);
        cmd(&mut w, &["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]);
        for i in 0..30 {
            cmd(
                &mut w,
                &["XADD", "q", &format!("{}-0", i + 1), "n", &i.to_string()],
            );
        }
        // c1 asks for 5 and dies before reading the reply.
        let mut c1 = Resp::connect(port);
        send(
            &mut c1,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c1",
                "COUNT",
                "5",
                "STREAMS",
                "q",
                ">",
            ],
        );
        std::thread::sleep(Duration::from_millis(100));
        drop(c1);
        // c2 reads 10 and acknowledges them.
        let mut c2 = Resp::connect(port);
        let got = cmd(
            &mut c2,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c2",
                "COUNT",
                "10",
                "STREAMS",
                "q",
                ">",
            ],
        );
        let ids: Vec<String> = (6..=15).map(|i| format!("{i}-0")).collect();
        for id in &ids {
            assert!(
                got.contains(&format!("${}\\r\\n{id}\\r\\n", id.len())),
                "{who}: {got}"
            );
        }
        let mut ack = vec!["XACK", "q", "g"];
        ack.extend(ids.iter().map(String::as_str));
        assert_eq!(cmd(&mut c2, &ack), ":10\\r\\n", "{who}");
        // c3 takes the rest, then parks for more and dies parked.
        let mut c3 = Resp::connect(port);
        let rest = cmd(
            &mut c3,
            &["XREADGROUP", "GROUP", "g", "c3", "STREAMS", "q", ">"],
        );
        assert!(
            rest.contains("$4\\r\\n16-0\\r\\n") && rest.contains("$4\\r\\n30-0\\r\\n"),
            "{who}"
        );
        send(
            &mut c3,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c3",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ],
        );
        wait_blocked(port, 1, who);
        drop(c3);
        wait_blocked(port, 0, who);
        // An entry added now is not lost to the dead waiter: the next reader gets it.
        cmd(&mut w, &["XADD", "q", "31-0", "n", "30"]);
        let mut c4 = Resp::connect(port);
        let new = cmd(
            &mut c4,
            &["XREADGROUP", "GROUP", "g", "c4", "STREAMS", "q", ">"],
        );
        assert!(new.contains("$4\\r\\n31-0\\r\\n"), "{who}: {new}");
        // 31 entries: 10 acknowledged, 21 pending (5 on c1, 15 on c3, 1 on c4).
        assert_eq!(
            cmd(&mut w, &["XPENDING", "q", "g"]),
            "*4\\r\\n:21\\r\\n$3\\r\\n1-0\\r\\n$4\\r\\n31-0\\r\\n*3\\r\\n*2\\r\\n$2\\r\\nc1\\r\\n$1\\r\\n5\\r\\n*2\\r\\n$2\\r\\nc3\\r\\n$2\\r\\n15\\r\\n*2\\r\\n$2\\r\\nc4\\r\\n$1\\r\\n1\\r\\n",
            "{who}"
        );
        // A survivor claims every pending entry, the dead consumers' included.
        let claimed = cmd(
            &mut c4,
            &[
                "XAUTOCLAIM",
                "q",
                "g",
                "c4",
                "0",
                "0-0",
                "COUNT",
                "100",
                "JUSTID",
            ],
        );
        assert!(
            claimed.starts_with("*3\\r\\n$3\\r\\n0-0\\r\\n*21\\r\\n$3\\r\\n1-0\\r\\n"),
            "{who}: {claimed}"
        );
        assert!(
            claimed.ends_with("$4\\r\\n31-0\\r\\n*0\\r\\n"),
            "{who}: {claimed}"
        );
    });
}
