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
