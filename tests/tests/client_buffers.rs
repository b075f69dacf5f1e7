//! CLIENT LIST's buffer fields (issue 19: "real values for qbuf, omem, tot-mem"), checked on
//! redis-server 7.0.15 and an engine alike: an idle client holds some memory and an empty
//! reply backlog; a subscriber that stops reading piles replies up, which shows as `omem`
//! (and `oll` blocks of 16 KiB behind a full `obl`) and in `tot-mem`; once it reads them
//! all, `omem` is back to 0.

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The `name=` field of the CLIENT LIST line whose `name=` is `who`, as a number.
fn field(list: &str, who: &str, name: &str) -> i64 {
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name={who} ")))
        .unwrap_or_else(|| panic!("no client {who} in {list}"));
    let v = line
        .split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    v.parse().unwrap_or_else(|_| panic!("{name}={v} in {line}"))
}

fn client_list(c: &mut Resp) -> String {
    let r = c.cmd_str(&["CLIENT", "LIST"]);
    parse_value(&r).str().unwrap_or_default().to_string()
}

#[test]
fn buffer_fields_follow_the_reply_backlog() {
    on_both(|port, who| {
        let mut admin = Resp::connect(port);
        assert_eq!(admin.cmd_str(&["CLIENT", "SETNAME", "admin"]), b"+OK\r\n");
        let list = client_list(&mut admin);
        // The caller's own request counts in its `qbuf` (26 bytes of `CLIENT LIST`).
        assert_eq!(field(&list, "admin", "qbuf"), 26, "{who}: {list}");
        assert!(
            field(&list, "admin", "tot-mem") > 0,
            "{who}: idle tot-mem in {list}"
        );
        assert!(field(&list, "admin", "rbs") > 0, "{who}: rbs in {list}");
        assert!(field(&list, "admin", "qbuf-free") >= 0, "{who}: {list}");
        assert_eq!(field(&list, "admin", "omem"), 0, "{who}: {list}");
        assert_eq!(field(&list, "admin", "oll"), 0, "{who}: {list}");

        // A subscriber with a small receive buffer that stops reading.
        let mut sub = connect_small(port, 4096);
        sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sub.write_all(&Resp::encode(&[b"CLIENT", b"SETNAME", b"slow"]))
            .unwrap();
        sub.write_all(&Resp::encode(&[b"SUBSCRIBE", b"ch"]))
            .unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = Vec::new();
        while !got.ends_with(b":1\r\n") {
            let n = sub.read(&mut buf).unwrap();
            assert!(n > 0, "{who}: subscriber closed");
            got.extend_from_slice(&buf[..n]);
        }
        // 7 MB: more than the kernel's largest send buffer (`tcp_wmem` max, 4 MB by default),
        // so part of it must wait in the server's output buffer (3 MB could all be absorbed
        // by send-buffer autotuning on a loaded machine: omem 145 was seen).
        let message = "x".repeat(10_000);
        for _ in 0..700 {
            assert_eq!(admin.cmd_str(&["PUBLISH", "ch", &message]), b":1\r\n");
        }
        let list = client_list(&mut admin);
        let (omem, oll, obl) = (
            field(&list, "slow", "omem"),
            field(&list, "slow", "oll"),
            field(&list, "slow", "obl"),
        );
        assert!(
            omem > 100_000,
            "{who}: omem {omem} after 7 MB unread: {list}"
        );
        assert!(oll > 0, "{who}: oll {oll}: {list}");
        assert!(obl > 0, "{who}: obl {obl}: {list}");
        assert!(
            field(&list, "slow", "tot-mem") > omem,
            "{who}: tot-mem vs omem: {list}"
        );

        // Read everything: the backlog is gone.
        let total = 700 * (message.len() + 30);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut read = 0;
        while read < total && Instant::now() < deadline {
            read += sub.read(&mut buf).unwrap();
        }
        assert_eq!(admin.cmd_str(&["PING"]), b"+PONG\r\n");
        let list = client_list(&mut admin);
        assert_eq!(
            field(&list, "slow", "omem"),
            0,
            "{who}: after reading: {list}"
        );
        assert_eq!(
            field(&list, "slow", "oll"),
            0,
            "{who}: after reading: {list}"
        );
    });
}

/// The query buffer as Redis accounts it (Tcl `unit/querybuf`): `qbuf` + `qbuf-free` is the
/// buffer's allocation, at least Redis's 16 KiB read size and under its 32 KiB resize
/// threshold for a client that sent small commands, and freed (0) once that client has been
/// idle for over 2 s; a 400 KB request leaves a large one that later small requests bring
/// back down (not to 0: Redis trims it to about the recent peak, and an idle trim then has
/// nothing left to free).
#[test]
fn query_buffer_is_sized_and_freed_as_redis() {
    on_both(|port, who| {
        let mut admin = Resp::connect(port);
        let alloc = |admin: &mut Resp, name: &str| {
            let list = client_list(admin);
            field(&list, name, "qbuf") + field(&list, name, "qbuf-free")
        };
        let mut idle = Resp::connect(port);
        assert_eq!(idle.cmd_str(&["CLIENT", "SETNAME", "idle"]), b"+OK\r\n");
        let a = alloc(&mut admin, "idle");
        assert!((16384..32768).contains(&a), "{who}: fresh query buffer {a}");

        let mut c = Resp::connect(port);
        assert_eq!(c.cmd_str(&["CLIENT", "SETNAME", "q"]), b"+OK\r\n");
        let big = "A".repeat(400_000);
        assert_eq!(c.cmd_str(&["SET", "x", &big]), b"+OK\r\n");
        let a = alloc(&mut admin, "q");
        assert!(a > 32768, "{who}: after a 400 KB request {a}");
        let deadline = Instant::now() + Duration::from_secs(5);
        let small = loop {
            assert_eq!(c.cmd_str(&["SET", "x", "small"]), b"+OK\r\n");
            let b = alloc(&mut admin, "q");
            if b < a || Instant::now() >= deadline {
                break b;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            small > 0 && small < a,
            "{who}: after small requests {small} (was {a})"
        );

        // The first client, idle for over 2 s: freed (`clientsCronResizeQueryBuffer`).
        let deadline = Instant::now() + Duration::from_secs(8);
        let freed = loop {
            std::thread::sleep(Duration::from_millis(250));
            let b = alloc(&mut admin, "idle");
            if b == 0 || Instant::now() >= deadline {
                break b;
            }
        };
        assert_eq!(freed, 0, "{who}: idle client's query buffer");
    });
}
