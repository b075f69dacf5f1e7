//! Databases through the proxy (issue 14, part 2): SELECT keeps each client's database and
//! everything the proxy sends on its behalf runs there — forwarded and split commands, fan-outs
//! (DBSIZE, FLUSHDB, KEYS, SCAN, RANDOMKEY, INFO keyspace), blocking commands and transactions
//! on dedicated connections, SWAPDB and MOVE — in RESP2 and RESP3, pipelined or not. Checked
//! against what each redis-server behind the proxy holds in each database.

mod common;

use std::time::Duration;

use common::*;

/// Keys of `keys()` that each instance holds in database `db`, summed (asked directly).
fn dbsize_direct(f: &Fleet, db: usize) -> i64 {
    (0..2)
        .map(|i| {
            let mut d = f.backend(i);
            assert_eq!(d.cmd(&["SELECT", &db.to_string()]), b"+OK\r\n");
            let r = text(&d.cmd(&["DBSIZE"]));
            r.trim_start_matches(':').trim_end().parse::<i64>().unwrap()
        })
        .sum()
}

#[test]
fn select_keeps_databases_apart_for_every_kind_of_command() {
    let f = Fleet::start();
    let keys = keys(20);
    let mut p = f.conn();
    // Database 0 holds a value under every key, database 1 another.
    for k in &keys {
        assert_eq!(p.cmd(&["SET", k, "zero"]), b"+OK\r\n");
    }
    assert_eq!(p.cmd(&["SELECT", "1"]), b"+OK\r\n");
    assert_eq!(p.cmd(&["GET", &keys[0]]), b"$-1\r\n");
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "one"]);
    }
    assert_eq!(p.cmd(&mset), b"+OK\r\n");
    assert_eq!(dbsize_direct(&f, 1), 20, "the split MSET ran in database 1");
    assert_eq!(dbsize_direct(&f, 0), 20);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let reply = text(&p.cmd(&mget));
    assert_eq!(reply.matches("one").count(), 20, "{reply}");
    assert_eq!(p.cmd(&["DBSIZE"]), b":20\r\n");
    let all = text(&p.cmd(&["KEYS", "*"]));
    assert!(all.starts_with("*20\r\n"), "{all}");
    // A full SCAN (one instance at a time, the instance in the cursor) sees database 1's keys.
    let (mut cursor, mut seen) = ("0".to_string(), 0);
    for _ in 0..10 {
        let r = text(&p.cmd(&["SCAN", &cursor, "COUNT", "1000"]));
        let lines: Vec<&str> = r.split("\r\n").collect();
        cursor = lines[2].to_string();
        seen += lines.iter().filter(|l| l.starts_with("key:")).count();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!((cursor.as_str(), seen), ("0", 20));
    assert!(text(&p.cmd(&["RANDOMKEY"])).contains("key:"));
    let info = text(&p.cmd(&["INFO", "keyspace"]));
    assert!(info.contains("db0:keys=20,expires=0"), "{info}");
    assert!(info.contains("db1:keys=20,expires=0"), "{info}");
    assert!(
        info.find("db0:").unwrap() < info.find("db1:").unwrap(),
        "{info}"
    );
    // CLIENT LIST / INFO name the database.
    assert!(text(&p.cmd(&["CLIENT", "INFO"])).contains(" db=1 "));
    // DEL (split) and FLUSHDB touch database 1 only.
    assert_eq!(p.cmd(&["DEL", &keys[0], &keys[1], &keys[2]]), b":3\r\n");
    assert_eq!(dbsize_direct(&f, 1), 17);
    assert_eq!(p.cmd(&["FLUSHDB"]), b"+OK\r\n");
    assert_eq!(dbsize_direct(&f, 1), 0);
    assert_eq!(
        dbsize_direct(&f, 0),
        20,
        "FLUSHDB on 1 left database 0 alone"
    );
    // MOVE from 0 to 2, then read it in 2; another client stays in 0.
    let mut other = f.conn();
    assert_eq!(other.cmd(&["GET", &keys[5]]), b"$4\r\nzero\r\n");
    assert_eq!(p.cmd(&["SELECT", "0"]), b"+OK\r\n");
    assert_eq!(p.cmd(&["MOVE", &keys[5], "2"]), b":1\r\n");
    assert_eq!(other.cmd(&["GET", &keys[5]]), b"$-1\r\n");
    assert_eq!(p.cmd(&["SELECT", "2"]), b"+OK\r\n");
    assert_eq!(p.cmd(&["GET", &keys[5]]), b"$4\r\nzero\r\n");
    // SWAPDB swaps on every instance: the client on 2 now sees 0's 19 keys.
    assert_eq!(p.cmd(&["SWAPDB", "0", "2"]), b"+OK\r\n");
    assert_eq!(p.cmd(&["DBSIZE"]), b":19\r\n");
    assert_eq!(other.cmd(&["DBSIZE"]), b":1\r\n");
    assert_eq!(
        p.cmd(&["SWAPDB", "0", "16"]),
        b"-ERR DB index is out of range\r\n"
    );
    // RESET goes back to 0.
    assert_eq!(p.cmd(&["RESET"]), b"+RESET\r\n");
    assert_eq!(p.cmd(&["DBSIZE"]), b":1\r\n");
}

#[test]
fn a_pipeline_that_selects_runs_in_order() {
    let f = Fleet::start();
    let k = key_on(1, "pipe:");
    let mut p = f.conn();
    // MOVE runs on database 1's link, the GET after it on database 0's: the GET must see it.
    let mut bytes = Vec::new();
    for args in [
        &["SELECT", "1"][..],
        &["SET", &k, "v"],
        &["MOVE", &k, "0"],
        &["SELECT", "0"],
        &["GET", &k],
        &["SELECT", "1"],
        &["EXISTS", &k],
    ] {
        bytes.extend(encode(args));
    }
    p.send_raw(&bytes);
    let replies: Vec<Vec<u8>> = (0..7).map(|_| p.reply()).collect();
    assert_eq!(
        replies,
        [
            &b"+OK\r\n"[..],
            b"+OK\r\n",
            b":1\r\n",
            b"+OK\r\n",
            b"$1\r\nv\r\n",
            b"+OK\r\n",
            b":0\r\n"
        ]
    );
}

#[test]
fn resp3_clients_have_their_own_database_links() {
    let f = Fleet::start();
    let k = key_on(0, "r3:");
    let mut p = f.conn();
    assert!(p.cmd(&["HELLO", "3"]).starts_with(b"%7\r\n"));
    assert_eq!(p.cmd(&["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(p.cmd(&["HSET", &k, "f", "v"]), b":1\r\n");
    assert_eq!(p.cmd(&["HGETALL", &k]), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    assert_eq!(p.cmd(&["GET", "nothing"]), b"_\r\n");
    let mut d = f.backend(0);
    assert_eq!(d.cmd(&["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(d.cmd(&["HGET", &k, "f"]), b"$1\r\nv\r\n");
    let mut r2 = f.conn();
    assert_eq!(r2.cmd(&["EXISTS", &k]), b":0\r\n");
    assert_eq!(r2.cmd(&["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(r2.cmd(&["EXISTS", &k]), b":1\r\n");
}

#[test]
fn blocking_commands_and_transactions_use_the_database() {
    let f = Fleet::start();
    let list = key_on(1, "q:");
    let mut waiter = f.conn();
    assert_eq!(waiter.cmd(&["SELECT", "4"]), b"+OK\r\n");
    waiter.send(&["BLPOP", &list, "5"]);
    std::thread::sleep(Duration::from_millis(100));
    let mut pusher = f.conn();
    // A push in database 0 does not wake a client blocked in database 4 …
    assert_eq!(pusher.cmd(&["RPUSH", &list, "zero"]), b":1\r\n");
    assert_eq!(pusher.cmd(&["SELECT", "4"]), b"+OK\r\n");
    // … a push in database 4 does.
    assert_eq!(pusher.cmd(&["RPUSH", &list, "four"]), b":1\r\n");
    let got = text(&waiter.reply());
    assert!(got.contains("four"), "{got}");
    // The dedicated connection follows a later SELECT.
    assert_eq!(waiter.cmd(&["SELECT", "0"]), b"+OK\r\n");
    assert_eq!(
        waiter.cmd(&["BLPOP", &list, "1"]),
        format!("*2\r\n${}\r\n{list}\r\n$4\r\nzero\r\n", list.len()).into_bytes()
    );
    // WATCH / MULTI / EXEC in database 5; a change in database 0 does not abort it.
    let mut t = f.conn();
    assert_eq!(t.cmd(&["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(t.cmd(&["WATCH", &list]), b"+OK\r\n");
    assert_eq!(pusher.cmd(&["SELECT", "0"]), b"+OK\r\n");
    assert_eq!(pusher.cmd(&["RPUSH", &list, "x"]), b":1\r\n");
    assert_eq!(t.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(t.cmd(&["RPUSH", &list, "five"]), b"+QUEUED\r\n");
    assert_eq!(t.cmd(&["EXEC"]), b"*1\r\n:1\r\n");
    let mut d = f.backend(1);
    assert_eq!(d.cmd(&["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(
        d.cmd(&["LRANGE", &list, "0", "-1"]),
        b"*1\r\n$4\r\nfive\r\n"
    );
    // A change in the watched database aborts.
    assert_eq!(t.cmd(&["WATCH", &list]), b"+OK\r\n");
    assert_eq!(pusher.cmd(&["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(pusher.cmd(&["RPUSH", &list, "y"]), b":2\r\n");
    assert_eq!(t.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(t.cmd(&["LLEN", &list]), b"+QUEUED\r\n");
    assert_eq!(t.cmd(&["EXEC"]), b"*-1\r\n");
}

#[test]
fn select_errors_match_redis_and_change_nothing() {
    let f = Fleet::start();
    let mut p = f.conn();
    let mut d = f.backend(0);
    assert_eq!(p.cmd(&["SELECT", "2"]), b"+OK\r\n");
    for bad in [
        "16",
        "-1",
        "x",
        "",
        "2147483648",
        "99999999999999999999",
        "1.5",
    ] {
        assert_eq!(
            text(&p.cmd(&["SELECT", bad])),
            text(&d.cmd(&["SELECT", bad])),
            "SELECT {bad:?}"
        );
    }
    assert_eq!(text(&p.cmd(&["SELECT"])), text(&d.cmd(&["SELECT"])));
    assert!(text(&p.cmd(&["CLIENT", "INFO"])).contains(" db=2 "));
}
