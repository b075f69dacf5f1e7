//! Bad input through the proxy (issue 14): malformed HELLO, SELECT (out of range / not an
//! integer only), SWAPDB, CLIENT KILL and CONFIG SET, each followed by reads that prove nothing
//! changed. The same steps go to a standalone redis-server 7.0 (the reference, not one of the
//! proxy's backends) and through the proxy (in front of two redis-servers); every reply must be
//! byte-identical, and the connection must still answer afterwards. The steps are those of
//! `tests/diff/bad_input.txt` that hold for a fleet (SWAPDB is sent to every instance, so its
//! errors are the instances'), without `requirepass` (the proxy has its own users).

mod common;

use common::*;

/// The steps, in order; each reply is compared.
const STEPS: &[&[&str]] = &[
    &["SET", "k", "v"],
    &["HELLO", "abc"],
    &["GET", "nokey"],
    &["HELLO", ""],
    &["HELLO", "99999999999999999999"],
    &["HELLO", "4"],
    &["HELLO", "-1"],
    &["HELLO", "3", "AUTH"],
    &["HELLO", "3", "AUTH", "default"],
    &["HELLO", "3", "auth", "default"],
    &["HELLO", "3", "SETNAME"],
    &["HELLO", "2", "setname"],
    &["HELLO", "3", "BOGUS"],
    &["HELLO", "3", "bogus", "value"],
    &["HELLO", "3", "AUTH", "nosuchuser", "pass"],
    &["HELLO", "3", "AUTH", "nosuchuser", "pass", "SETNAME", "n1"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "3", "SETNAME", "a b"],
    &["HELLO", "3", "SETNAME", "a\nb"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "3", "SETNAME", "n2", "BOGUS"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "3", "SETNAME", "n3", "AUTH", "nosuchuser", "pass"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "3", "SETNAME", "n4", "AUTH"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "abc", "SETNAME", "n5"],
    &["CLIENT", "GETNAME"],
    &["HELLO", "4", "SETNAME", "n6"],
    &["CLIENT", "GETNAME"],
    &["GET", "nokey"],
    &["GET", "k"],
    &["CLIENT", "SETNAME", ""],
    &["GET", "k"],
    &["SELECT", "16"],
    &["GET", "k"],
    &["SELECT", "-1"],
    &["SELECT", "abc"],
    &["GET", "k"],
    &["DBSIZE"],
    &["SELECT", "16"],
    &["GET", "k"],
    &["GET", "k"],
    &["DBSIZE"],
    &["DBSIZE"],
    // A valid SELECT, then SWAPDB (sent to every instance): equal indexes succeed and change
    // nothing; the first bad index is reported, Redis's texts.
    &["SELECT", "2"],
    &["SET", "k2", "two"],
    &["SWAPDB", "0", "0"],
    &["SWAPDB", "2", "2"],
    &["GET", "k2"],
    &["SWAPDB", "0", "16"],
    &["SWAPDB", "16", "0"],
    &["SWAPDB", "-1", "0"],
    &["SWAPDB", "0", "-1"],
    &["SWAPDB", "abc", "0"],
    &["SWAPDB", "0", "abc"],
    &["SWAPDB", "abc", "16"],
    &["SWAPDB", "1.5", "0"],
    &["SWAPDB", "0", "2147483648"],
    &["SWAPDB", "", "0"],
    &["SWAPDB", "0"],
    &["SWAPDB", "0", "1", "2"],
    &["GET", "k2"],
    &["DBSIZE"],
    &["SELECT", "0"],
    &["GET", "k"],
    &["GET", "k2"],
    &["CLIENT", "KILL", "1.2.3.4:5"],
    &["CLIENT", "KILL", "127.0.0.1:1"],
    &["CLIENT", "KILL", "nonsense"],
    &["CLIENT", "KILL", "ID"],
    &["CLIENT", "KILL", "ADDR"],
    &["CLIENT", "KILL", "LADDR"],
    &["CLIENT", "KILL", "SKIPME"],
    &["CLIENT", "KILL", "ID", "abc"],
    &["CLIENT", "KILL", "ID", "0"],
    &["CLIENT", "KILL", "ID", "-5"],
    &["CLIENT", "KILL", "ID", "1.5"],
    &["CLIENT", "KILL", "ID", "99999999999999999999"],
    &["CLIENT", "KILL", "ID", "999999"],
    &["CLIENT", "KILL", "id", "999999", "skipme", "no"],
    &["CLIENT", "KILL", "TYPE", "bogus"],
    &["CLIENT", "KILL", "type", "BoGuS"],
    &["CLIENT", "KILL", "TYPE", "master"],
    &["CLIENT", "KILL", "TYPE", "replica"],
    &["CLIENT", "KILL", "TYPE", "slave"],
    &["CLIENT", "KILL", "TYPE", "pubsub", "ID", "999999"],
    &["CLIENT", "KILL", "TYPE", "normal", "ID", "999999"],
    &["CLIENT", "KILL", "ADDR", "1.2.3.4:5"],
    &["CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "no"],
    &["CLIENT", "KILL", "LADDR", "1.2.3.4:5"],
    &["CLIENT", "KILL", "USER", "nosuchuser"],
    &["CLIENT", "KILL", "USER", "default", "ID", "999999"],
    &["CLIENT", "KILL", "SKIPME", "maybe"],
    &["CLIENT", "KILL", "SKIPME", "yes", "ID", "999999"],
    &["CLIENT", "KILL", "SKIPME", "YES", "ADDR", "1.2.3.4:5"],
    &["CLIENT", "KILL", "FOO", "bar"],
    &["CLIENT", "KILL", "MAXAGE", "10"],
    &["CLIENT", "KILL", "ID", "999999", "TYPE"],
    &["CLIENT", "KILL", "ID", "999999", "FOO"],
    &["CLIENT", "KILL", "ID", "abc", "TYPE", "bogus"],
    &["CLIENT", "KILL", "TYPE", "bogus", "ID", "abc"],
    &["CLIENT", "KILL", "FOO", "bar", "ID", "abc"],
    &["CLIENT", "KILL", "ID", "999999", "USER", "nosuchuser"],
    &["CLIENT", "KILL", "ID", "999999", "SKIPME", "maybe"],
    &["CLIENT", "KILL"],
    &["GET", "k"],
    &["CONFIG", "SET", "nosuchparameter", "1"],
    &["CONFIG", "SET", "daemonize", "no"],
    &["CONFIG", "SET", "daemonize", "yes"],
    &["CONFIG", "GET", "daemonize"],
    &["CONFIG", "SET", "databases", "16"],
    &["CONFIG", "SET", "databases", "32"],
    &["CONFIG", "GET", "databases"],
    &["CONFIG", "SET", "cluster-enabled", "no"],
    &["CONFIG", "SET", "maxmemory", "100", "maxmemory", "200"],
    &["CONFIG", "SET", "maxmemory", "100", "MAXMEMORY", "200"],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "SET", "maxmemory", "abc"],
    &["CONFIG", "SET", "MAXMEMORY", "abc"],
    &["CONFIG", "SET", "maxmemory", "-1"],
    &["CONFIG", "SET", "maxmemory", "1.5mb"],
    &["CONFIG", "SET", "maxmemory", "10xb"],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "SET", "maxmemory-policy", "bogus"],
    &["CONFIG", "SET", "maxmemory-policy", ""],
    &["CONFIG", "GET", "maxmemory-policy"],
    &[
        "CONFIG",
        "SET",
        "maxmemory",
        "100",
        "maxmemory-policy",
        "bogus",
    ],
    &["CONFIG", "GET", "maxmemory"],
    &[
        "CONFIG",
        "SET",
        "maxmemory-policy",
        "allkeys-lru",
        "maxmemory",
        "abc",
    ],
    &["CONFIG", "GET", "maxmemory-policy"],
    &[
        "CONFIG",
        "SET",
        "maxmemory",
        "100",
        "maxmemory-samples",
        "0",
    ],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "GET", "maxmemory-samples"],
    &["CONFIG", "SET", "hz", "abc"],
    &["CONFIG", "SET", "HZ", "abc"],
    &["CONFIG", "SET", "hz", "-1"],
    &["CONFIG", "GET", "hz"],
    &["CONFIG", "SET", "timeout", "abc"],
    &["CONFIG", "SET", "maxmemory", "100", "hz"],
    &["CONFIG", "SET", "maxmemory", "100", "hz", "10", "timeout"],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "SET", "maxmemory", "100", "nosuchparameter", "1"],
    &["CONFIG", "SET", "nosuchparameter", "1", "daemonize", "no"],
    &["CONFIG", "SET", "daemonize", "no", "nosuchparameter", "1"],
    &["CONFIG", "SET", "daemonize", "no", "maxmemory", "abc"],
    &["CONFIG", "SET", "maxmemory", "abc", "daemonize", "no"],
    &["CONFIG", "SET", "maxmemory", "abc", "maxmemory", "1"],
    &["CONFIG", "SET", "maxmemory", "1", "maxmemory", "abc"],
    &[
        "CONFIG",
        "SET",
        "maxmemory",
        "1",
        "nosuchparameter",
        "1",
        "maxmemory",
        "2",
    ],
    &[
        "CONFIG",
        "SET",
        "maxmemory",
        "1",
        "databases",
        "16",
        "maxmemory",
        "2",
    ],
    &[
        "CONFIG",
        "SET",
        "maxmemory",
        "1",
        "maxmemory",
        "2",
        "databases",
        "16",
    ],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "SET", "protected-mode", "maybe"],
    &["CONFIG", "SET", "notify-keyspace-events", "Z"],
    &["CONFIG", "GET", "notify-keyspace-events"],
    &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0"],
    &["CONFIG", "SET", "client-output-buffer-limit", "bogus 0 0 0"],
    &["CONFIG", "GET", "client-output-buffer-limit"],
    &["CONFIG", "SET", "save", "100"],
    &["CONFIG", "SET", "save", "abc 1"],
    &["CONFIG", "GET", "save"],
    &["GET", "k"],
    &["DBSIZE"],
];

fn run(resp3: bool) {
    let f = Fleet::start();
    let reference = Redis::start_free();
    let mut p = f.conn();
    let mut r = Conn::connect(reference.port);
    if resp3 {
        assert!(p.cmd(&["HELLO", "3"]).starts_with(b"%7\r\n"));
        assert!(r.cmd(&["HELLO", "3"]).starts_with(b"%7\r\n"));
    }
    let mut mismatches = Vec::new();
    for step in STEPS {
        let (want, got) = (r.cmd(step), p.cmd(step));
        if want != got {
            mismatches.push(format!(
                "{step:?}\n  redis {}\n  proxy {}",
                text(&want),
                text(&got)
            ));
        }
        // The connection is kept: the next request is answered.
        assert_eq!(p.cmd(&["PING"]), r.cmd(&["PING"]), "after {step:?}");
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches (resp3={resp3}):\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    // Nothing changed: the key, the settings and the protocol are what they were.
    for read in [
        &["GET", "k"][..],
        &["GET", "nokey"],
        &["DBSIZE"],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "GET", "maxmemory-policy"],
        &["CONFIG", "GET", "hz"],
        &["CLIENT", "GETNAME"],
    ] {
        assert_eq!(text(&p.cmd(read)), text(&r.cmd(read)), "{read:?}");
    }
}

#[test]
fn bad_input_resp2_answers_as_redis_and_keeps_the_connection() {
    run(false);
}

#[test]
fn bad_input_resp3_answers_as_redis_and_keeps_the_connection() {
    run(true);
}
