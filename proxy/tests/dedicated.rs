//! End-to-end tests of what needs more than the shared multiplexed connection: multi-key
//! commands (CROSSSLOT or hash tags), blocking commands, transactions and pub/sub, through
//! the proxy in front of two real redis-servers (see `common`).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A hash tag whose keys live on `instance` (of 2).
fn tag_on(instance: usize) -> String {
    let k = key_on(instance, "t");
    format!("{{{k}}}")
}

/// Number of client connections a backend reports (CLIENT LIST lines, this one included).
fn clients_on(f: &Fleet, i: usize) -> usize {
    let list = f.backend(i).cmd(&["CLIENT", "LIST"]);
    text(&list).lines().filter(|l| l.starts_with("id=")).count()
}

#[test]
fn multi_key_commands_need_one_instance() {
    let f = Fleet::start();
    let mut c = f.conn();
    let (a, b) = (key_on(0, "s"), key_on(1, "s"));
    assert_eq!(c.cmd(&["SADD", &a, "x", "y"]), int(2));
    assert_eq!(c.cmd(&["SADD", &b, "y"]), int(1));
    for cmd in [
        vec!["SINTER", &a, &b],
        vec!["SUNIONSTORE", &a, &a, &b],
        vec!["SMOVE", &a, &b, "x"],
        vec!["LMOVE", &a, &b, "LEFT", "RIGHT"],
        vec!["RENAME", &a, &b],
        vec!["ZUNIONSTORE", &a, "2", &a, &b],
        vec!["ZINTER", "2", &a, &b],
        vec!["SINTERCARD", "2", &a, &b],
        vec!["ZINTERCARD", "2", &a, &b],
        vec!["LMPOP", "2", &a, &b, "LEFT"],
        vec!["ZMPOP", "2", &a, &b, "MIN"],
        // The destination alone decides nothing: its sources are on another instance.
        vec!["ZUNIONSTORE", &a, "1", &b],
    ] {
        // In front of redis-servers, which cannot lock keys for the proxy, the gathered run
        // is refused before anything changes (with recached engines these commands run:
        // tests/tests/transactions.rs).
        let reply = c.cmd(&cmd);
        assert!(
            reply.starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot"),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&reply)
        );
    }
    assert_eq!(c.cmd(&["SCARD", &a]), int(2));
    assert_eq!(c.cmd(&["SCARD", &b]), int(1));
    // Hash tags keep keys together: every form runs.
    let t = tag_on(1);
    let (x, y, d) = (format!("{t}x"), format!("{t}y"), format!("{t}d"));
    assert_eq!(c.cmd(&["SADD", &x, "1", "2", "3"]), int(3));
    assert_eq!(c.cmd(&["SADD", &y, "2", "3", "4"]), int(3));
    assert_eq!(c.cmd(&["SINTERSTORE", &d, &x, &y]), int(2));
    assert_eq!(c.cmd(&["SCARD", &d]), int(2));
    assert_eq!(c.cmd(&["SINTERCARD", "2", &x, &y]), int(2));
    assert_eq!(c.cmd(&["SMOVE", &x, &y, "1"]), int(1));
    let (z1, z2, zd) = (format!("{t}z1"), format!("{t}z2"), format!("{t}zd"));
    assert_eq!(c.cmd(&["ZADD", &z1, "1", "a", "2", "b"]), int(2));
    assert_eq!(c.cmd(&["ZADD", &z2, "3", "b"]), int(1));
    assert_eq!(c.cmd(&["ZUNIONSTORE", &zd, "2", &z1, &z2]), int(2));
    assert_eq!(c.cmd(&["ZSCORE", &zd, "b"]), bulk("5"));
    assert_eq!(c.cmd(&["ZINTERCARD", "2", &z1, &z2]), int(1));
    let (l1, l2) = (format!("{t}l1"), format!("{t}l2"));
    assert_eq!(c.cmd(&["RPUSH", &l1, "a", "b"]), int(2));
    assert_eq!(c.cmd(&["LMOVE", &l1, &l2, "LEFT", "RIGHT"]), bulk("a"));
    assert_eq!(
        c.cmd(&["LMPOP", "2", &l1, &l2, "LEFT"]),
        format!("*2\r\n${}\r\n{l1}\r\n*1\r\n$1\r\nb\r\n", l1.len()).into_bytes()
    );
    // A malformed numkeys reaches an instance, which answers its own syntax error.
    assert_eq!(
        c.cmd(&["SINTERCARD", "0", &x]),
        b"-ERR numkeys should be greater than 0\r\n"
    );
    // The data really is on the tag's instance.
    assert_eq!(f.backend(1).cmd(&["SCARD", &d]), int(2));
}

#[test]
fn blpop_waits_on_its_own_connection_without_stalling_others() {
    let f = Fleet::start();
    let t = tag_on(0);
    let list = format!("{t}queue");
    let mut waiter = f.conn();
    waiter.send(&["BLPOP", &list, "10"]);
    // A third client keeps getting fast replies for keys of the same instance while the
    // BLPOP is parked (on the shared connection it would wait behind it).
    thread::sleep(Duration::from_millis(100));
    let mut other = f.conn();
    let started = Instant::now();
    for i in 0..200 {
        let k = format!("{t}k{i}");
        assert_eq!(other.cmd(&["SET", &k, "v"]), b"+OK\r\n");
        assert_eq!(other.cmd(&["GET", &k]), bulk("v"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "400 round trips took {:?}",
        started.elapsed()
    );
    // Another proxy client's LPUSH wakes it.
    let mut pusher = f.conn();
    assert_eq!(pusher.cmd(&["LPUSH", &list, "job1"]), int(1));
    assert_eq!(
        waiter.reply(),
        format!("*2\r\n${}\r\n{list}\r\n$4\r\njob1\r\n", list.len()).into_bytes()
    );
    // The waiter's connection goes on working, for both instances, in order; a blocking
    // command times out with nil.
    waiter.send(&["BRPOP", &list, "0.2"]);
    waiter.send(&["SET", &key_on(1, "w"), "1"]);
    waiter.send(&["GET", &key_on(1, "w")]);
    let t0 = Instant::now();
    assert_eq!(waiter.reply(), b"*-1\r\n");
    assert!(t0.elapsed() >= Duration::from_millis(150));
    assert_eq!(waiter.reply(), b"+OK\r\n");
    assert_eq!(waiter.reply(), bulk("1"));
    // Keys on both instances: in front of redis-servers refused (recached engines wait:
    // tests/tests/transactions_gather.rs).
    assert!(
        waiter
            .cmd(&["BLPOP", &key_on(0, "q"), &key_on(1, "q"), "1"])
            .starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot")
    );
    // BLMPOP / BZPOPMIN / BLMOVE (movable and fixed keys) work on tagged keys.
    assert_eq!(pusher.cmd(&["RPUSH", &list, "a", "b"]), int(2));
    assert_eq!(
        waiter.cmd(&["BLMOVE", &list, &format!("{t}done"), "LEFT", "RIGHT", "1"]),
        bulk("a")
    );
    let r = waiter.cmd(&["BLMPOP", "1", "1", &list, "LEFT"]);
    assert!(r.starts_with(b"*2\r\n"), "{}", text(&r));
    let z = format!("{t}z");
    assert_eq!(pusher.cmd(&["ZADD", &z, "1", "m"]), int(1));
    assert!(waiter.cmd(&["BZPOPMIN", &z, "1"]).starts_with(b"*3\r\n"));
}

#[test]
fn transactions_run_on_the_instance_of_their_keys() {
    let f = Fleet::start();
    let mut c = f.conn();
    let t = tag_on(1);
    let (a, b) = (format!("{t}a"), format!("{t}b"));
    // A keyless command before the first key is held and runs in the transaction.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["PING"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["SET", &a, "1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["INCR", &a]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["GET", &b]), b"+QUEUED\r\n");
    assert_eq!(
        c.cmd(&["EXEC"]),
        b"*4\r\n+PONG\r\n+OK\r\n:2\r\n$-1\r\n".to_vec()
    );
    assert_eq!(f.backend(1).cmd(&["GET", &a]), bulk("2"));
    // Pipelined: SET on the shared connection, then a transaction reading it.
    c.send_raw(
        &[
            encode(&["SET", &b, "x"]),
            encode(&["MULTI"]),
            encode(&["APPEND", &b, "y"]),
            encode(&["EXEC"]),
            encode(&["GET", &b]),
        ]
        .concat(),
    );
    assert_eq!(c.reply(), b"+OK\r\n");
    assert_eq!(c.reply(), b"+OK\r\n");
    assert_eq!(c.reply(), b"+QUEUED\r\n");
    assert_eq!(c.reply(), b"*1\r\n:2\r\n");
    assert_eq!(c.reply(), bulk("xy"));
    // DISCARD, and EXEC/DISCARD outside MULTI.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &a, "gone"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["DISCARD"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", &a]), bulk("2"));
    assert_eq!(c.cmd(&["EXEC"]), b"-ERR EXEC without MULTI\r\n");
    assert_eq!(c.cmd(&["DISCARD"]), b"-ERR DISCARD without MULTI\r\n");
}

#[test]
fn watch_failure_and_success_through_the_proxy() {
    let f = Fleet::start();
    let mut a = f.conn();
    let mut b = f.conn();
    let t = tag_on(0);
    let k = format!("{t}balance");
    assert_eq!(a.cmd(&["SET", &k, "10"]), b"+OK\r\n");
    // Another client changes the watched key: EXEC answers nil and nothing runs.
    assert_eq!(a.cmd(&["WATCH", &k]), b"+OK\r\n");
    assert_eq!(a.cmd(&["GET", &k]), bulk("10"));
    assert_eq!(b.cmd(&["INCRBY", &k, "5"]), int(15));
    assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["DECRBY", &k, "10"]), b"+QUEUED\r\n");
    assert_eq!(a.cmd(&["EXEC"]), b"*-1\r\n");
    assert_eq!(a.cmd(&["GET", &k]), bulk("15"));
    // Untouched: it runs.
    assert_eq!(a.cmd(&["WATCH", &k]), b"+OK\r\n");
    assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["DECRBY", &k, "10"]), b"+QUEUED\r\n");
    assert_eq!(a.cmd(&["EXEC"]), b"*1\r\n:5\r\n");
    // WATCH of keys on two instances: a change on either aborts the EXEC.
    let (w0, w1) = (key_on(0, "w"), key_on(1, "w"));
    // (In front of redis-servers, which cannot lock keys for the proxy, such an EXEC is
    // refused and nothing runs; with recached engines it runs: tests/tests/transactions.rs.)
    assert_eq!(a.cmd(&["WATCH", &w0, &w1]), b"+OK\r\n");
    assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["SET", &w0, "mine"]), b"+QUEUED\r\n");
    assert!(a.cmd(&["EXEC"]).starts_with(b"-CROSSSLOT "));
    assert_eq!(b.cmd(&["EXISTS", &w0]), int(0));
    // UNWATCH.
    assert_eq!(a.cmd(&["WATCH", &k]), b"+OK\r\n");
    assert_eq!(a.cmd(&["UNWATCH"]), b"+OK\r\n");
    assert_eq!(b.cmd(&["SET", &k, "0"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["INCR", &k]), b"+QUEUED\r\n");
    assert_eq!(a.cmd(&["EXEC"]), b"*1\r\n:1\r\n");
}

/// In front of redis-servers (which have no TXLOCK), a transaction spanning instances is
/// queued on both and refused at EXEC: nothing runs, and the connection is back to normal.
/// With recached engines it runs atomically (tests/tests/transactions.rs).
#[test]
fn a_transaction_spanning_two_redis_servers_is_refused_at_exec() {
    let f = Fleet::start();
    let mut c = f.conn();
    let (a, b) = (key_on(0, "x"), key_on(1, "x"));
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &a, "1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["SET", &b, "1"]), b"+QUEUED\r\n");
    assert!(
        c.cmd(&["EXEC"])
            .starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot")
    );
    assert_eq!(c.cmd(&["EXISTS", &a]), int(0));
    assert_eq!(c.cmd(&["EXISTS", &b]), int(0));
    // A command with keys on both instances, split, before any other; DISCARD drops both.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["MSET", &a, "1", &b, "2"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["DISCARD"]), b"+OK\r\n");
    // Other commands over several instances make the transaction run gathered, which
    // redis-servers cannot do either.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SINTERSTORE", &a, &a, &b]), b"+QUEUED\r\n");
    assert!(c.cmd(&["EXEC"]).starts_with(b"-CROSSSLOT "));
    // The connection is back to normal.
    assert_eq!(c.cmd(&["SET", &b, "ok"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", &b]), bulk("ok"));
    assert_eq!(c.cmd(&["EXISTS", &a]), int(0));
}

#[test]
fn subscribe_receives_publish_from_another_client() {
    let f = Fleet::start();
    let mut sub = f.conn();
    let (c0, c1) = (key_on(0, "news"), key_on(1, "news"));
    // Channels of both instances in one SUBSCRIBE; counts are the client's total.
    sub.send(&["SUBSCRIBE", &c0, &c1]);
    let confirm = |ch: &str, n: i64| {
        format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n{ch}\r\n:{n}\r\n", ch.len()).into_bytes()
    };
    assert_eq!(sub.reply(), confirm(&c0, 1));
    assert_eq!(sub.reply(), confirm(&c1, 2));
    let mut publisher = f.conn();
    assert_eq!(publisher.cmd(&["PUBLISH", &c1, "hello"]), int(1));
    assert_eq!(publisher.cmd(&["PUBLISH", &c0, "world"]), int(1));
    assert_eq!(publisher.cmd(&["PUBLISH", "nobody", "x"]), int(0));
    let msg = |ch: &str, m: &str| {
        format!(
            "*3\r\n$7\r\nmessage\r\n${}\r\n{ch}\r\n${}\r\n{m}\r\n",
            ch.len(),
            m.len()
        )
        .into_bytes()
    };
    // Messages of one channel keep their order; those of channels on different instances
    // come over different connections and may arrive in either order (as in a cluster).
    let mut got = vec![sub.reply(), sub.reply()];
    got.sort();
    let mut want = vec![msg(&c1, "hello"), msg(&c0, "world")];
    want.sort();
    assert_eq!(got, want);
    // Subscribed mode: PING answers pong, other commands are refused.
    assert_eq!(sub.cmd(&["PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert!(
        sub.cmd(&["GET", "x"])
            .starts_with(b"-ERR Can't execute 'get'")
    );
    // UNSUBSCRIBE one, then the rest; then the connection is an ordinary one again.
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE", &c0]),
        format!(
            "*3\r\n$11\r\nunsubscribe\r\n${}\r\n{c0}\r\n:1\r\n",
            c0.len()
        )
        .into_bytes()
    );
    assert_eq!(publisher.cmd(&["PUBLISH", &c0, "lost"]), int(0));
    assert_eq!(
        sub.cmd(&["UNSUBSCRIBE"]),
        format!(
            "*3\r\n$11\r\nunsubscribe\r\n${}\r\n{c1}\r\n:0\r\n",
            c1.len()
        )
        .into_bytes()
    );
    assert_eq!(sub.cmd(&["SET", &c0, "v"]), b"+OK\r\n");
    assert_eq!(sub.cmd(&["GET", &c0]), bulk("v"));
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMPAT"]), int(0));
}

#[test]
fn psubscribe_receives_from_both_instances() {
    let f = Fleet::start();
    let mut sub = f.conn();
    assert_eq!(
        sub.cmd(&["PSUBSCRIBE", "ev:*"]),
        b"*3\r\n$10\r\npsubscribe\r\n$4\r\nev:*\r\n:1\r\n"
    );
    let (c0, c1) = (key_on(0, "ev:"), key_on(1, "ev:"));
    let mut publisher = f.conn();
    assert_eq!(publisher.cmd(&["PUBLISH", &c0, "zero"]), int(1));
    assert_eq!(publisher.cmd(&["PUBLISH", &c1, "one"]), int(1));
    let pmsg = |ch: &str, m: &str| {
        format!(
            "*4\r\n$8\r\npmessage\r\n$4\r\nev:*\r\n${}\r\n{ch}\r\n${}\r\n{m}\r\n",
            ch.len(),
            m.len()
        )
        .into_bytes()
    };
    let mut got = vec![sub.reply(), sub.reply()];
    got.sort();
    let mut want = vec![pmsg(&c0, "zero"), pmsg(&c1, "one")];
    want.sort();
    assert_eq!(got, want);
    // Per channel, order is kept.
    for i in 0..20 {
        assert_eq!(publisher.cmd(&["PUBLISH", &c1, &i.to_string()]), int(1));
    }
    for i in 0..20 {
        assert_eq!(sub.reply(), pmsg(&c1, &i.to_string()));
    }
    // Both instances hold the pattern; the count is the client's own.
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMPAT"]), int(1));
    assert_eq!(
        sub.cmd(&["PUNSUBSCRIBE"]),
        b"*3\r\n$12\r\npunsubscribe\r\n$4\r\nev:*\r\n:0\r\n"
    );
    assert_eq!(publisher.cmd(&["PUBLISH", &c1, "x"]), int(0));
    assert_eq!(sub.cmd(&["PING"]), b"+PONG\r\n");
}

#[test]
fn client_disconnect_frees_dedicated_connections() {
    let f = Fleet::start();
    let base = [clients_on(&f, 0), clients_on(&f, 1)];
    let mut blocked = f.conn();
    blocked.send(&["BLPOP", &key_on(0, "never"), "0"]);
    let mut sub = f.conn();
    assert!(sub.cmd(&["PSUBSCRIBE", "p*"]).starts_with(b"*3\r\n"));
    let mut tx = f.conn();
    assert_eq!(tx.cmd(&["WATCH", &key_on(1, "wk")]), b"+OK\r\n");
    // Instance 0: the BLPOP and the pattern; instance 1: the pattern and the WATCH; and on
    // each the warm spare the proxy keeps for the next client that needs one (dedicated.rs).
    let grown = wait_for(Duration::from_secs(5), || {
        let now = [clients_on(&f, 0), clients_on(&f, 1)];
        (now == [base[0] + 3, base[1] + 3]).then_some(())
    });
    assert!(
        grown.is_some(),
        "expected 3 more connections on each instance: {:?} vs {:?}",
        [clients_on(&f, 0), clients_on(&f, 1)],
        base
    );
    drop(blocked);
    drop(sub);
    drop(tx);
    // Every connection a client owned is closed; the spares, owned by nobody, stay.
    let freed = wait_for(Duration::from_secs(5), || {
        let now = [clients_on(&f, 0), clients_on(&f, 1)];
        (now == [base[0] + 1, base[1] + 1]).then_some(())
    });
    assert!(
        freed.is_some(),
        "dedicated connections still open: {:?} vs {:?} (+1 spare each)",
        [clients_on(&f, 0), clients_on(&f, 1)],
        base
    );
    // The proxy still serves.
    assert_eq!(f.conn().cmd(&["PING"]), b"+PONG\r\n");
}

#[test]
fn reset_and_keyless_transactions() {
    let f = Fleet::start();
    let mut c = f.conn();
    // Only keyless commands: they run on an instance that is up.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["PING"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["ECHO", "x"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["EXEC"]), b"*2\r\n+PONG\r\n$1\r\nx\r\n");
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["EXEC"]), b"*0\r\n");
    // RESET leaves a transaction and subscribed mode.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &key_on(0, "r"), "1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["RESET"]), b"+RESET\r\n");
    assert_eq!(c.cmd(&["EXISTS", &key_on(0, "r")]), int(0));
    assert!(
        c.cmd(&["SUBSCRIBE", "ch"])
            .starts_with(b"*3\r\n$9\r\nsubscribe")
    );
    assert_eq!(c.cmd(&["RESET"]), b"+RESET\r\n");
    assert_eq!(f.conn().cmd(&["PUBLISH", "ch", "x"]), int(0));
    assert_eq!(c.cmd(&["GET", &key_on(0, "r")]), b"$-1\r\n");
    // Subscription commands inside MULTI are refused and abort it.
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert!(
        c.cmd(&["SUBSCRIBE", "x"])
            .starts_with(b"-ERR SUBSCRIBE is not supported")
    );
    assert!(c.cmd(&["EXEC"]).starts_with(b"-EXECABORT"));
}

#[test]
fn a_dying_instance_fails_dedicated_connections_cleanly() {
    let mut f = Fleet::start();
    let mut blocked = f.conn();
    let list = key_on(1, "dq");
    blocked.send(&["BLPOP", &list, "0"]);
    let mut sub = f.conn();
    let ch = key_on(1, "dch");
    assert!(sub.cmd(&["SUBSCRIBE", &ch]).starts_with(b"*3\r\n"));
    thread::sleep(Duration::from_millis(100));
    f.redis[1].kill();
    // The parked BLPOP is answered with the instance error; the subscriber, whose
    // subscription is gone, is disconnected.
    let r = blocked.reply();
    assert!(
        r.starts_with(b"-ERR instance 1 (") && r.ends_with(b") is unavailable\r\n"),
        "{}",
        text(&r)
    );
    assert!(sub.closed());
    // While it is down, its blocking commands fail fast; the other instance works.
    let r = wait_for(Duration::from_secs(5), || {
        let r = blocked.cmd(&["BLPOP", &list, "0"]);
        r.starts_with(b"-ERR instance 1").then_some(r)
    });
    assert!(r.is_some());
    blocked.send(&["BLPOP", &key_on(0, "dq"), "0.1"]);
    assert_eq!(blocked.reply(), b"*-1\r\n");
}
