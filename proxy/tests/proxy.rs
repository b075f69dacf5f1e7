//! End-to-end tests of the proxy in front of two real redis-servers.
//!
//! Each test starts its own two `redis-server`s on free ports (killed by PID when the guard
//! drops) and runs the proxy in-process on a thread (`run_until`, stopped through its flag).
//! Clients speak raw RESP over `TcpStream`, and a few checks go through `redis-cli`.
//! Every wait is a bounded retry loop.

mod common;

use std::io::Write;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use recached_proxy::route::instance_of;

#[test]
fn set_get_and_every_key_lands_on_its_instance() {
    let f = Fleet::start();
    let mut c = f.conn();
    assert_eq!(c.cmd(&["SET", "foo", "bar"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", "foo"]), bulk("bar"));
    assert_eq!(c.cmd(&["GET", "nosuch"]), b"$-1\r\n");
    let ks = keys(100);
    for k in &ks {
        assert_eq!(c.cmd(&["SET", k, &format!("v-{k}")]), b"+OK\r\n");
    }
    let mut direct = [f.backend(0), f.backend(1)];
    for k in &ks {
        let owner = instance_of(k.as_bytes(), 2);
        assert_eq!(
            direct[owner].cmd(&["GET", k]),
            bulk(&format!("v-{k}")),
            "{k} on {owner}"
        );
        assert_eq!(
            direct[1 - owner].cmd(&["EXISTS", k]),
            int(0),
            "{k} not on {}",
            1 - owner
        );
    }
    // redis-cli through the proxy.
    let out = Command::new("redis-cli")
        .args(["-p", &f.proxy.port.to_string(), "GET", "foo"])
        .output()
        .expect("redis-cli must be installed");
    assert_eq!(text(&out.stdout).trim(), "bar");
}

#[test]
fn mget_of_50_keys_returns_values_in_order_with_nils() {
    let f = Fleet::start();
    let mut c = f.conn();
    let ks = keys(50);
    for (i, k) in ks.iter().enumerate() {
        if i % 3 != 0 {
            assert_eq!(c.cmd(&["SET", k, &format!("value{i}")]), b"+OK\r\n");
        }
    }
    let mut args = vec!["MGET"];
    args.extend(ks.iter().map(|s| s.as_str()));
    let mut expected = b"*50\r\n".to_vec();
    for i in 0..50 {
        if i % 3 == 0 {
            expected.extend_from_slice(b"$-1\r\n");
        } else {
            expected.extend_from_slice(&bulk(&format!("value{i}")));
        }
    }
    assert_eq!(text(&c.cmd(&args)), text(&expected));

    // The same through redis-cli: one line per value, empty for nil.
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(f.proxy.port.to_string())
        .args(&args)
        .output()
        .unwrap();
    let lines: Vec<String> = text(&out.stdout).lines().map(|l| l.to_string()).collect();
    assert_eq!(lines.len(), 50, "{lines:?}");
    for (i, l) in lines.iter().enumerate() {
        let want = if i % 3 == 0 {
            String::new()
        } else {
            format!("value{i}")
        };
        assert_eq!(l, &want);
    }

    // MSET across instances, then read back.
    let mut mset = vec!["MSET".to_string()];
    for k in &ks {
        mset.push(k.clone());
        mset.push(format!("m-{k}"));
    }
    let mset: Vec<&str> = mset.iter().map(|s| s.as_str()).collect();
    assert_eq!(c.cmd(&mset), b"+OK\r\n");
    let r = c.cmd(&args);
    let mut expected = b"*50\r\n".to_vec();
    for k in &ks {
        expected.extend_from_slice(&bulk(&format!("m-{k}")));
    }
    assert_eq!(text(&r), text(&expected));
}

#[test]
fn pipelined_mixed_commands_keep_their_order() {
    let f = Fleet::start();
    let mut c = f.conn();
    let a = key_on(0, "a");
    let b = key_on(1, "b");
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for round in 0..200 {
        let v = format!("v{round}");
        batch.extend(encode(&["SET", &a, &v]));
        expected.extend(b"+OK\r\n");
        batch.extend(encode(&["INCR", &b]));
        expected.extend(int(round + 1));
        batch.extend(encode(&["PING"]));
        expected.extend(b"+PONG\r\n");
        batch.extend(encode(&["MGET", &b, &a, "nosuch"]));
        expected.extend(
            format!(
                "*3\r\n{}{}$-1\r\n",
                text(&bulk(&(round + 1).to_string())),
                text(&bulk(&v))
            )
            .as_bytes(),
        );
        batch.extend(encode(&["GET", &a]));
        expected.extend(bulk(&v));
        batch.extend(encode(&["EXISTS", &a, &b, &a]));
        expected.extend(int(3));
    }
    // Inline form too.
    batch.extend(format!("GET {a}\r\n").as_bytes());
    expected.extend(bulk("v199"));
    c.send_raw(&batch);
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let r = c.reply();
        assert!(!r.is_empty(), "connection ended after {} bytes", got.len());
        got.extend(r);
    }
    assert_eq!(text(&got), text(&expected));
}

#[test]
fn del_exists_touch_unlink_sum_across_instances() {
    let f = Fleet::start();
    let mut c = f.conn();
    let ks = keys(20);
    for k in &ks {
        c.cmd(&["SET", k, "x"]);
    }
    let mut exists = vec!["EXISTS"];
    exists.extend(ks.iter().map(|s| s.as_str()));
    exists.push("missing");
    exists.push(&ks[0]); // counted twice, as Redis does
    assert_eq!(c.cmd(&exists), int(21));
    let mut touch = vec!["TOUCH"];
    touch.extend(ks.iter().map(|s| s.as_str()));
    assert_eq!(c.cmd(&touch), int(20));
    let mut del = vec!["DEL"];
    del.extend(ks[..10].iter().map(|s| s.as_str()));
    del.push("missing");
    assert_eq!(c.cmd(&del), int(10));
    let mut unlink = vec!["UNLINK"];
    unlink.extend(ks.iter().map(|s| s.as_str()));
    assert_eq!(c.cmd(&unlink), int(10));
    assert_eq!(c.cmd(&exists), int(0));
}

#[test]
fn fan_out_dbsize_keys_flushall_and_scan_sees_every_key_once() {
    let f = Fleet::start();
    let mut c = f.conn();
    let ks = keys(300);
    for k in &ks {
        c.cmd(&["SET", k, "1"]);
    }
    assert_eq!(c.cmd(&["DBSIZE"]), int(300));
    let d0 = f.backend(0).cmd(&["DBSIZE"]);
    let d1 = f.backend(1).cmd(&["DBSIZE"]);
    assert!(d0 != int(0) && d1 != int(0), "both instances hold keys");
    assert!(c.cmd(&["KEYS", "*"]).starts_with(b"*300\r\n"));

    // SCAN to the end: every key exactly once.
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut cursor = "0".to_string();
    for _ in 0..1000 {
        let r = c.cmd(&["SCAN", &cursor, "COUNT", "17"]);
        let t = text(&r);
        let lines: Vec<&str> = t.split("\r\n").collect();
        // *2, $n, cursor, *k, then ($len, key) pairs.
        assert_eq!(lines[0], "*2", "{t}");
        cursor = lines[2].to_string();
        let k: usize = lines[3][1..].parse().unwrap();
        for j in 0..k {
            *seen.entry(lines[5 + 2 * j].to_string()).or_default() += 1;
        }
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0", "SCAN did not finish");
    assert_eq!(seen.len(), 300);
    assert!(seen.values().all(|&n| n == 1), "a key came back twice");
    assert_eq!(c.cmd(&["SCAN", "abc"]), b"-ERR invalid cursor\r\n");

    let r = c.cmd(&["RANDOMKEY"]);
    assert!(r.starts_with(b"$") && r != b"$-1\r\n");
    let info = text(&c.cmd(&["INFO"]));
    assert!(info.contains("db0:keys=300,"), "{info}");
    // Sections are honoured: the instances' memory figures are summed, the proxy's own
    // sections are left out unless asked for.
    let info = text(&c.cmd(&["INFO", "memory", "keyspace"]));
    assert!(info.contains("# Memory\r\nused_memory:"), "{info}");
    assert!(info.contains("db0:keys=300,"), "{info}");
    assert!(
        !info.contains("# Server") && !info.contains("# Proxy"),
        "{info}"
    );
    let info = text(&c.cmd(&["INFO", "PROXY"]));
    assert!(info.contains("instances_answering:2"), "{info}");
    assert!(!info.contains("# Keyspace\r\ndb0"), "{info}");
    assert_eq!(c.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), int(0));
}

#[test]
fn unroutable_commands_get_an_error_and_the_connection_stays_open() {
    let f = Fleet::start();
    let mut c = f.conn();
    assert_eq!(
        c.cmd(&["NOSUCHCMD", "x"]),
        b"-ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' \r\n"
    );
    // (CONFIG SET is routed now; CONFIG REWRITE is still refused.)
    let r = c.cmd(&["CONFIG", "REWRITE"]);
    assert!(
        r.starts_with(b"-ERR CONFIG REWRITE is not supported"),
        "{}",
        text(&r)
    );
    let (a, b) = (key_on(0, "r"), key_on(1, "r"));
    // Keys on both instances: in front of redis-servers (no TXLOCK) refused, nothing
    // changed; recached engines run them gathered (tests/tests/transactions.rs).
    assert!(
        c.cmd(&["RENAME", &a, &b])
            .starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot")
    );
    assert!(
        c.cmd(&["MSETNX", &a, "1", &b, "2"])
            .starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot")
    );
    assert_eq!(c.cmd(&["EXISTS", &a, &b]), b":0\r\n");
    assert_eq!(c.cmd(&["SET", "{t}x", "1"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["RENAME", "{t}x", "{t}y"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", "{t}y"]), bulk("1"));
    assert_eq!(
        c.cmd(&["GET"]),
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    // Databases 0..15 are served (proxy/tests/databases.rs); 16 is out of range.
    assert_eq!(
        c.cmd(&["SELECT", "16"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        c.cmd(&["HELLO", "4"]),
        b"-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(c.cmd(&["ECHO", "hi"]), bulk("hi"));
    assert!(c.cmd(&["COMMAND", "COUNT"]).starts_with(b":"));
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(c.cmd(&["QUIT"]), b"+OK\r\n");
    assert!(c.closed());
}

#[test]
fn subcommands_with_a_key_go_to_the_key_instance() {
    // OBJECT ENCODING k, MEMORY USAGE k, XINFO STREAM k: the key is found from the subcommand
    // row's key specs (the one key extractor), on either instance. Rows the engines do not
    // run yet (XADD, XINFO) route the same way: these backends are redis-servers.
    let f = Fleet::start();
    let mut c = f.conn();
    for i in 0..2 {
        let (n, s, x) = (key_on(i, "n"), key_on(i, "s"), key_on(i, "x"));
        assert_eq!(c.cmd(&["SET", &n, "12345"]), b"+OK\r\n");
        assert_eq!(c.cmd(&["SET", &s, "abc"]), b"+OK\r\n");
        assert_eq!(
            c.cmd(&["OBJECT", "ENCODING", &n]),
            bulk("int"),
            "instance {i}"
        );
        assert_eq!(
            c.cmd(&["object", "encoding", &s]),
            bulk("embstr"),
            "instance {i}"
        );
        let usage = c.cmd(&["MEMORY", "USAGE", &s, "SAMPLES", "0"]);
        assert!(usage.starts_with(b":"), "{}", text(&usage));
        assert_eq!(f.backend(i).cmd(&["EXISTS", &s]), int(1));
        assert!(
            c.cmd(&["XADD", &x, "1-1", "f", "v"])
                .starts_with(b"$3\r\n1-1")
        );
        let info = c.cmd(&["XINFO", "STREAM", &x]);
        assert!(info.starts_with(b"*"), "{}", text(&info));
    }
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "nosuchkey"]), b"$-1\r\n");
    assert_eq!(
        c.cmd(&["OBJECT", "ENCODING"]),
        b"-ERR wrong number of arguments for 'object|encoding' command\r\n"
    );
}

#[test]
fn protocol_error_gets_redis_text_then_close() {
    let f = Fleet::start();
    let mut c = f.conn();
    c.send_raw(b"PING\r\n*1\r\n$x\r\n");
    assert_eq!(c.reply(), b"+PONG\r\n");
    assert_eq!(c.reply(), b"-ERR Protocol error: invalid bulk length\r\n");
    assert!(c.closed());
}

#[test]
fn a_dead_instance_fails_fast_and_is_reconnected() {
    let mut f = Fleet::start();
    let mut c = f.conn();
    let (k0, k1) = (key_on(0, "d"), key_on(1, "d"));
    assert_eq!(c.cmd(&["SET", &k0, "zero"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &k1, "one"]), b"+OK\r\n");
    let port1 = f.redis[1].port;
    f.redis[1].kill();

    // Instance 1's keys: a fast error naming it; instance 0 keeps serving.
    let want = format!("-ERR instance 1 (127.0.0.1:{port1}) is unavailable\r\n");
    let started = Instant::now();
    let got = wait_for(Duration::from_secs(5), || {
        let r = c.cmd(&["GET", &k1]);
        (text(&r) == want).then_some(())
    });
    assert!(got.is_some(), "no unavailable error");
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(text(&c.cmd(&["GET", &k1])), want);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "error was not fast"
        );
        assert_eq!(c.cmd(&["GET", &k0]), bulk("zero"));
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // A split touching the dead instance fails as a whole; the connection stays usable.
    assert_eq!(text(&c.cmd(&["MGET", &k0, &k1])), want);
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");

    // Restart on the same port: the proxy reconnects by itself.
    f.redis[1] = Redis::start(port1);
    let back = wait_for(Duration::from_secs(5), || {
        (c.cmd(&["SET", &k1, "again"]) == b"+OK\r\n").then_some(())
    });
    assert!(back.is_some(), "proxy did not reconnect");
    assert_eq!(c.cmd(&["GET", &k1]), bulk("again"));
    assert_eq!(
        text(&c.cmd(&["MGET", &k0, &k1])),
        text(&[b"*2\r\n".to_vec(), bulk("zero"), bulk("again")].concat())
    );
}

/// A link woken by its first request while its instance is down (database 1's link here)
/// is retried like any other: the event loop's per-iteration checks visit only the links
/// that are not dormant, and learn of a woken one even when its first connect failed.
#[test]
fn a_link_woken_while_its_instance_is_down_is_retried() {
    let mut f = Fleet::start();
    let mut c = f.conn();
    let k1 = key_on(1, "w");
    let port1 = f.redis[1].port;
    f.redis[1].kill();
    assert_eq!(c.cmd(&["SELECT", "1"]), b"+OK\r\n");
    let want = format!("-ERR instance 1 (127.0.0.1:{port1}) is unavailable\r\n");
    let down = wait_for(Duration::from_secs(5), || {
        (text(&c.cmd(&["GET", &k1])) == want).then_some(())
    });
    assert!(down.is_some(), "no unavailable error on database 1");
    f.redis[1] = Redis::start(port1);
    let back = wait_for(Duration::from_secs(5), || {
        (c.cmd(&["SET", &k1, "one"]) == b"+OK\r\n").then_some(())
    });
    assert!(back.is_some(), "database 1's link was not retried");
    assert_eq!(c.cmd(&["GET", &k1]), bulk("one"));
    let mut d = f.backend(1);
    assert_eq!(d.cmd(&["SELECT", "1"]), b"+OK\r\n");
    assert_eq!(d.cmd(&["GET", &k1]), bulk("one"), "written in database 1");
}

#[test]
fn concurrent_pipelining_clients_each_get_their_own_replies() {
    let f = Fleet::start();
    let port = f.proxy.port;
    let threads: Vec<_> = (0..6)
        .map(|t| {
            thread::spawn(move || {
                let mut c = Conn::connect(port);
                for round in 0..20 {
                    let mut batch = Vec::new();
                    let mut expected = Vec::new();
                    for i in 0..50 {
                        let k = format!("c{t}:k{i}");
                        let v = format!("t{t}r{round}i{i}");
                        batch.extend(encode(&["SET", &k, &v]));
                        expected.extend(b"+OK\r\n");
                        batch.extend(encode(&["GET", &k]));
                        expected.extend(bulk(&v));
                        if i % 10 == 9 {
                            let ks: Vec<String> =
                                (i - 9..=i).map(|j| format!("c{t}:k{j}")).collect();
                            let mut args = vec!["MGET"];
                            args.extend(ks.iter().map(|s| s.as_str()));
                            batch.extend(encode(&args));
                            expected.extend(b"*10\r\n");
                            for j in i - 9..=i {
                                expected.extend(bulk(&format!("t{t}r{round}i{j}")));
                            }
                        }
                    }
                    c.send_raw(&batch);
                    let mut got = Vec::new();
                    while got.len() < expected.len() {
                        let r = c.reply();
                        assert!(!r.is_empty(), "connection ended");
                        got.extend(r);
                    }
                    assert_eq!(text(&got), text(&expected), "client {t} round {round}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_slow_reader_is_paused_and_resumed_without_losing_replies() {
    // 4000 GETs of a 64 KB value = 256 MB of replies, far over the 16 MB output bound: the
    // proxy must stop reading this client's requests, then resume as it reads.
    let f = Fleet::start();
    let mut c = f.conn();
    let value = "v".repeat(64 * 1024);
    assert_eq!(c.cmd(&["SET", "big", &value]), b"+OK\r\n");
    const N: usize = 4000;
    let mut writer = c.s.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let one = encode(&["GET", "big"]);
        for _ in 0..N {
            writer.write_all(&one).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(300)); // let the proxy hit its bound
    let want = bulk(&value);
    let start = Instant::now();
    for i in 0..N {
        let r = c.reply();
        assert!(r == want, "reply {i} wrong ({} bytes)", r.len());
        assert!(start.elapsed() < Duration::from_secs(60));
    }
    sender.join().unwrap();
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
}
