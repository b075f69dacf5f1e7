//! The server surface through the proxy (issue 14, part 3): WAIT, SAVE/BGSAVE/LASTSAVE,
//! MEMORY and HELP subcommands, CONFIG SET/RESETSTAT, CLIENT LIST/INFO/KILL/REPLY/NO-EVICT/
//! NO-TOUCH. Each reply is compared with a redis-server's own where it is deterministic.
//! Two redis-servers per test (killed by PID on drop), the proxy on a thread; waits are
//! bounded retry loops.

mod common;

use std::time::Duration;

use common::*;

/// A proxy connection that said `HELLO 3` (or stays RESP2).
fn conn(f: &Fleet, resp3: bool) -> Conn {
    let mut c = f.conn();
    if resp3 {
        assert!(c.cmd(&["HELLO", "3"]).starts_with(b"%7\r\n"));
    }
    c
}

/// A direct connection to backend `i` in the same protocol.
fn direct(f: &Fleet, i: usize, resp3: bool) -> Conn {
    let mut c = f.backend(i);
    if resp3 {
        assert!(c.cmd(&["HELLO", "3"]).starts_with(b"%7\r\n"));
    }
    c
}

#[test]
fn wait_answers_zero_with_redis_argument_errors() {
    let f = Fleet::start();
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        let mut d = direct(&f, 0, resp3);
        // Deterministic on a redis-server without replicas: compared byte for byte.
        for args in [
            &["WAIT", "0", "0"][..],
            &["WAIT", "0", "100"],
            &["WAIT", "-1", "0"],
            &["WAIT"],
            &["WAIT", "0"],
            &["WAIT", "x", "0"],
            &["WAIT", "0", "x"],
            &["WAIT", "0", "-1"],
            &["WAIT", "0", "1.5"],
            &["WAIT", "99999999999999999999", "0"],
        ] {
            assert_eq!(text(&p.cmd(args)), text(&d.cmd(args)), "{args:?}");
        }
        // No replicas: 0 at once (a redis-server would wait for the timeout).
        assert_eq!(p.cmd(&["WAIT", "1", "0"]), b":0\r\n");
        assert_eq!(p.cmd(&["PING"]), b"+PONG\r\n");
    }
}

#[test]
fn save_bgsave_and_lastsave_cover_every_instance() {
    let f = Fleet::start();
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        let before: Vec<i64> = (0..2)
            .map(|i| {
                let r = f.backend(i).cmd(&["LASTSAVE"]);
                text(&r)[1..].trim().parse().unwrap()
            })
            .collect();
        assert_eq!(p.cmd(&["LASTSAVE"]), int(*before.iter().min().unwrap()));
        assert_eq!(p.cmd(&["SAVE"]), b"+OK\r\n");
        // SAVE ran on both: each instance's LASTSAVE moved to now (or stayed within it).
        let after: Vec<Vec<u8>> = (0..2).map(|i| f.backend(i).cmd(&["LASTSAVE"])).collect();
        let min = after
            .iter()
            .min_by_key(|r| text(r)[1..].trim().parse::<i64>().unwrap());
        assert_eq!(&p.cmd(&["LASTSAVE"]), min.unwrap());
        assert_eq!(p.cmd(&["BGSAVE"]), b"+Background saving started\r\n");
        // Wait until both background saves are over (bounded), so the next round can start.
        for i in 0..2 {
            wait_for(Duration::from_secs(10), || {
                let info = text(&f.backend(i).cmd(&["INFO", "persistence"]));
                info.contains("rdb_bgsave_in_progress:0").then_some(())
            })
            .expect("bgsave finished");
        }
        let mut d = direct(&f, 0, resp3);
        for args in [&["BGSAVE", "x"][..], &["SAVE", "x"], &["LASTSAVE", "x"]] {
            assert_eq!(text(&p.cmd(args)), text(&d.cmd(args)), "{args:?}");
        }
    }
}

#[test]
fn memory_object_and_help_subcommands_answer_as_redis() {
    let f = Fleet::start();
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        let mut d = direct(&f, 0, resp3);
        for args in [
            &["MEMORY", "HELP"][..],
            &["OBJECT", "HELP"],
            &["CONFIG", "HELP"],
            &["CLIENT", "HELP"],
            &["PUBSUB", "HELP"],
            &["MEMORY", "DOCTOR"],
            &["MEMORY", "PURGE"],
            &["MEMORY", "HELP", "x"],
            &["OBJECT", "HELP", "x"],
            &["MEMORY", "STATS", "x"],
            &["MEMORY", "NOSUCH"],
            &["OBJECT", "NOSUCH"],
            &["CONFIG", "NOSUCH"],
        ] {
            assert_eq!(text(&p.cmd(args)), text(&d.cmd(args)), "{args:?}");
        }
        // STATS and MALLOC-STATS: one instance's figures, in its shape.
        let stats = p.cmd(&["MEMORY", "STATS"]);
        let head = if resp3 { &b"%"[..] } else { b"*" };
        assert!(stats.starts_with(head), "{}", text(&stats));
        assert!(text(&stats).contains("peak.allocated"));
        let malloc = p.cmd(&["MEMORY", "MALLOC-STATS"]);
        assert!(
            malloc.starts_with(b"$") || malloc.starts_with(b"="),
            "{}",
            text(&malloc)
        );
    }
}

fn config_get(port: u16, name: &str) -> Vec<u8> {
    Conn::connect(port).cmd(&["CONFIG", "GET", name])
}

#[test]
fn config_set_applies_everywhere_all_or_nothing() {
    let f = Fleet::start();
    let ports = [f.redis[0].port, f.redis[1].port];
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        let mut d = direct(&f, 0, resp3);
        assert_eq!(
            p.cmd(&["CONFIG", "SET", "maxmemory-samples", "7"]),
            b"+OK\r\n"
        );
        for port in ports {
            assert_eq!(
                config_get(port, "maxmemory-samples"),
                b"*2\r\n$17\r\nmaxmemory-samples\r\n$1\r\n7\r\n"
            );
        }
        // Errors Redis gives, byte for byte, and nothing changed anywhere.
        for args in [
            &["CONFIG", "SET", "maxmemory-samples", "9", "hz", "abc"][..],
            &["CONFIG", "SET", "nosuch", "1"],
            &["CONFIG", "SET", "daemonize", "yes"],
            &["CONFIG", "SET", "hz"],
            &["CONFIG", "SET", "hz", "10", "x"],
            &["CONFIG", "SET", "hz", "10", "hz", "11"],
            &["CONFIG", "RESETSTAT", "x"],
        ] {
            assert_eq!(text(&p.cmd(args)), text(&d.cmd(args)), "{args:?}");
        }
        for port in ports {
            assert_eq!(
                config_get(port, "maxmemory-samples"),
                b"*2\r\n$17\r\nmaxmemory-samples\r\n$1\r\n7\r\n"
            );
        }
        assert_eq!(p.cmd(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
        assert_eq!(
            p.cmd(&["CONFIG", "SET", "maxmemory-samples", "5"]),
            b"+OK\r\n"
        );
    }
    // One instance refuses what the other accepts: the one that accepted is put back.
    // Instance 0's own port is taken for instance 1, a no-op for instance 0: instance 0
    // accepts (its maxmemory-samples changes), instance 1 refuses; 0 must be put back.
    let port0 = ports[0].to_string();
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        let r = p.cmd(&["CONFIG", "SET", "maxmemory-samples", "8", "port", &port0]);
        assert!(r.starts_with(b"-ERR CONFIG SET failed"), "{}", text(&r));
        for port in ports {
            assert_eq!(
                config_get(port, "maxmemory-samples"),
                b"*2\r\n$17\r\nmaxmemory-samples\r\n$1\r\n5\r\n",
                "instance on {port}"
            );
            let got = config_get(port, "port");
            assert_eq!(text(&got), text(&bulk_pair("port", &port.to_string())));
        }
        assert_eq!(p.cmd(&["PING"]), b"+PONG\r\n");
    }
}

fn bulk_pair(name: &str, value: &str) -> Vec<u8> {
    let mut out = b"*2\r\n".to_vec();
    out.extend(bulk(name));
    out.extend(bulk(value));
    out
}

/// The `field=value` of a CLIENT LIST line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// The text of a CLIENT LIST / INFO reply (bulk or verbatim).
fn list_text(r: &[u8]) -> String {
    let t = text(r);
    let body = &t[t.find("\r\n").unwrap() + 2..t.len() - 2];
    body.strip_prefix("txt:").unwrap_or(body).to_string()
}

#[test]
fn client_list_info_and_kill_over_the_proxy_s_clients() {
    let f = Fleet::start();
    let mut a = conn(&f, false);
    let mut b = conn(&f, true);
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", "alpha"]), b"+OK\r\n");
    let b_id = text(&b.cmd(&["CLIENT", "ID"]))[1..].trim().to_string();
    let list = a.cmd(&["CLIENT", "LIST"]);
    assert!(list.starts_with(b"$"), "{}", text(&list));
    let lines: Vec<String> = list_text(&list).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(field(&lines[0], "name"), "alpha");
    assert_eq!(field(&lines[0], "cmd"), "client|list");
    assert_eq!(field(&lines[0], "flags"), "N");
    assert_eq!(field(&lines[0], "resp"), "2");
    assert_eq!(field(&lines[1], "id"), b_id);
    assert_eq!(field(&lines[1], "resp"), "3");
    assert_eq!(
        field(&lines[1], "laddr"),
        format!("127.0.0.1:{}", f.proxy.port)
    );
    // The same fields, in the same order, as a redis-server's own line.
    let direct_line = list_text(&f.backend(0).cmd(&["CLIENT", "INFO"]));
    let names = |l: &str| -> Vec<String> {
        l.split(' ')
            .map(|f| f.split('=').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&lines[0]), names(direct_line.trim_end()));
    // CLIENT INFO in RESP3 is a verbatim string with the caller's line only.
    let info = b.cmd(&["CLIENT", "INFO"]);
    assert!(info.starts_with(b"="), "{}", text(&info));
    assert_eq!(field(&list_text(&info), "id"), b_id);
    // Errors as redis-server gives them.
    let mut d = f.backend(0);
    for args in [
        &["CLIENT", "LIST", "x"][..],
        &["CLIENT", "LIST", "ID", "x"],
        &["CLIENT", "LIST", "TYPE", "x"],
        &["CLIENT", "LIST", "TYPE", "master"],
        &["CLIENT", "INFO", "x"],
        &["CLIENT", "KILL", "1.2.3.4:5"],
        &["CLIENT", "KILL", "ID", "x"],
        &["CLIENT", "KILL", "ID", "0"],
        &["CLIENT", "KILL", "ID", "99999"],
        &["CLIENT", "KILL", "ID"],
        &["CLIENT", "KILL", "foo", "bar"],
        &["CLIENT", "KILL", "ADDR", "1.2.3.4:5"],
        &["CLIENT", "KILL", "LADDR", "1.2.3.4:5"],
        &["CLIENT", "KILL", "SKIPME", "x"],
        &["CLIENT", "KILL", "USER", "nosuch"],
        &["CLIENT", "KILL", "TYPE", "x"],
        &["CLIENT", "KILL", "MAXAGE", "5"],
        &["CLIENT", "KILL", "ID", "1", "SKIPME"],
        &["CLIENT", "NO-EVICT", "x"],
        &["CLIENT", "NO-EVICT", "on"],
        &["CLIENT", "NO-EVICT", "OFF"],
        &["CLIENT", "REPLY", "x"],
    ] {
        assert_eq!(text(&a.cmd(args)), text(&d.cmd(args)), "{args:?}");
    }
    assert_eq!(a.cmd(&["CLIENT", "NO-TOUCH", "on"]), b"+OK\r\n");
    // Only `a` itself matches SKIPME no with its id; TYPE normal SKIPME yes kills `b`...
    // but first: KILL ID of `b` closes `b`, and `a` goes on.
    assert_eq!(a.cmd(&["CLIENT", "KILL", "ID", &b_id]), b":1\r\n");
    assert!(b.closed());
    let lines = list_text(&a.cmd(&["CLIENT", "LIST"]));
    assert_eq!(lines.lines().count(), 1, "{lines}");
    // Old form by address, then a client killing itself gets its reply, then EOF.
    let mut c = f.conn();
    let c_addr = field(&list_text(&c.cmd(&["CLIENT", "INFO"])), "addr").to_string();
    assert_eq!(a.cmd(&["CLIENT", "KILL", &c_addr]), b"+OK\r\n");
    assert!(c.closed());
    let a_id = field(&list_text(&a.cmd(&["CLIENT", "INFO"])), "id").to_string();
    assert_eq!(a.cmd(&["CLIENT", "KILL", "ID", &a_id]), b":0\r\n");
    assert_eq!(
        a.cmd(&["CLIENT", "KILL", "ID", &a_id, "SKIPME", "no"]),
        b":1\r\n"
    );
    assert!(a.closed());
}

#[test]
fn client_reply_off_on_skip() {
    let f = Fleet::start();
    for resp3 in [false, true] {
        let mut p = conn(&f, resp3);
        // OFF: nothing for OFF itself nor what follows; ON answers +OK.
        p.send(&["CLIENT", "REPLY", "OFF"]);
        p.send(&["SET", "k", "1"]);
        p.send(&["PING"]);
        p.send(&["GET", "k"]);
        assert_eq!(p.cmd(&["CLIENT", "REPLY", "ON"]), b"+OK\r\n");
        assert_eq!(p.cmd(&["GET", "k"]), bulk("1"));
        // SKIP: nothing for SKIP and the next command only.
        p.send(&["CLIENT", "REPLY", "SKIP"]);
        p.send(&["INCR", "k"]);
        assert_eq!(p.cmd(&["INCR", "k"]), int(3));
        // The same transcript against a redis-server, byte for byte.
        let transcript = |c: &mut Conn| -> Vec<u8> {
            for args in [
                &["CLIENT", "REPLY", "SKIP"][..],
                &["SET", "t", "1"],
                &["CLIENT", "REPLY", "OFF"],
                &["INCR", "t"],
                &["CLIENT", "REPLY", "x"],
                &["MGET", "t", "k"],
                &["CLIENT", "REPLY", "ON"],
                &["GET", "t"],
            ] {
                c.send(args);
            }
            let mut out = c.reply();
            out.extend(c.reply());
            out
        };
        let mut d = direct(&f, 0, resp3);
        assert_eq!(text(&transcript(&mut p)), text(&transcript(&mut d)));
        assert_eq!(p.cmd(&["PING"]), b"+PONG\r\n");
    }
}
