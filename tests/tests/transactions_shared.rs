//! Transactions spanning engines over the proxy's shared links (docs/transactions.md, "Over
//! the shared links"; `proxy/src/txshared.rs`, engine `TXPREP`/`TXCOMMIT`/`TXABORT` in
//! engine/core/src/txlock.rs): a client whose last transaction spanned engines runs the next
//! one as `TXPREP` + `TXCOMMIT` on the links every client shares, and falls back to its own
//! connections when a key is held.
//!
//! Run `cargo build -p recached` first.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `calls=` of `name` in an engine's INFO commandstats (0 when never called).
fn calls(port: u16, name: &str) -> u64 {
    let mut c = Resp::connect(port);
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "commandstats"])).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A command's reply as text (not escaped).
fn raw(c: &mut Resp, args: &[&str]) -> String {
    String::from_utf8_lossy(&c.cmd_str(args)).into_owned()
}

fn raw_frame(c: &mut Resp) -> String {
    String::from_utf8_lossy(&c.read_frame()).into_owned()
}

/// The port of the engine holding `key` (an existing key).
fn engine_of(fleet: &Fleet, key: &str) -> u16 {
    fleet
        .engine_ports
        .iter()
        .copied()
        .find(|&p| raw(&mut Resp::connect(p), &["EXISTS", key]) == ":1\r\n")
        .expect("the key's engine")
}

/// `MULTI`, the commands, `EXEC`, as one write.
fn multi(cmds: &[&[&str]]) -> Vec<u8> {
    let mut out = Resp::encode(&[b"MULTI"]);
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        out.extend_from_slice(&Resp::encode(&args));
    }
    out.extend_from_slice(&Resp::encode(&[b"EXEC"]));
    out
}

fn transfer(a: &str, b: &str) -> Vec<u8> {
    multi(&[&["DECRBY", a, "3"], &["INCRBY", b, "3"], &["MGET", a, b]])
}

/// A 2-engine fleet, keys `a` and `b` on its two engines (7 and 13), and a client whose
/// last transaction spanned both (it ran on its own connections): its next takes the shared
/// links.
fn after_one_transfer(name: &str, prefix: &str) -> (Fleet, String, String, Resp) {
    let fleet = Fleet::start(name, 2);
    let (a, b) = keys_on_two_engines(prefix);
    let mut c = Resp::connect(fleet.proxy_port);
    assert_eq!(raw(&mut c, &["MSET", &a, "10", &b, "10"]), "+OK\r\n");
    c.send_raw(&transfer(&a, &b));
    read_n(&mut c, 5);
    (fleet, a, b, c)
}

fn read_n(c: &mut Resp, n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| c.read_frame()).collect()
}

#[test]
fn engine_prepares_commits_and_aborts_transactions_by_id_on_one_connection() {
    let port = free_port();
    let mut engine = start_engine(port);
    let mut link = Resp::connect(port);
    let mut other = Resp::connect(port);
    assert_eq!(raw(&mut link, &["SET", "a", "10"]), "+OK\r\n");
    // Two transactions prepared on one connection, each by its id.
    assert_eq!(
        raw(
            &mut link,
            &[
                "TXPREP", "t1", "5000", "3", "DECRBY", "a", "4", "2", "GET", "a"
            ]
        ),
        ":0\r\n"
    );
    assert_eq!(
        raw(&mut link, &["TXPREP", "t2", "5000", "3", "SET", "b", "1"]),
        ":0\r\n"
    );
    // Its keys are locked for the other connections, not for this one (the proxy keeps its
    // other clients off them), nor taken twice.
    send(&mut other, &["GET", "a"]);
    assert_quiet(&mut other, "GET a waits for t1");
    assert_eq!(raw(&mut link, &["GET", "a"]), "$2\r\n10\r\n");
    assert_eq!(
        raw(&mut link, &["TXPREP", "t3", "5000", "3", "SET", "a", "0"]),
        ":4\r\n"
    );
    assert_eq!(
        raw(&mut link, &["TXCOMMIT", "t1"]),
        "*2\r\n:6\r\n$1\r\n6\r\n"
    );
    assert_eq!(raw_frame(&mut other), "$1\r\n6\r\n");
    assert_eq!(raw(&mut link, &["TXABORT", "t2"]), "+OK\r\n");
    assert_eq!(raw(&mut other, &["EXISTS", "b"]), ":0\r\n");
    // A command refused while queueing: nothing is left prepared.
    assert_eq!(
        raw(
            &mut link,
            &["TXPREP", "t4", "5000", "1", "NOSUCH", "3", "SET", "b", "1"]
        ),
        ":2\r\n"
    );
    assert!(raw(&mut link, &["TXCOMMIT", "t4"]).starts_with("-ERR TXCOMMIT no transaction"));
    // Malformed: counts that do not match the arguments.
    assert_eq!(
        raw(&mut link, &["TXPREP", "t5", "5000", "3", "GET", "a"]),
        "-ERR syntax error\r\n"
    );
    // A connection that closes releases what it prepared.
    assert_eq!(
        raw(&mut link, &["TXPREP", "t6", "5000", "3", "SET", "a", "x"]),
        ":0\r\n"
    );
    drop(link);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if raw(&mut other, &["SET", "a", "y"]) == "+OK\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lock left by a closed connection"
        );
    }
    assert_eq!(raw(&mut other, &["GET", "a"]), "$1\r\ny\r\n");
    engine.kill();
}

#[test]
fn a_client_whose_transactions_span_engines_uses_the_shared_links() {
    let fleet = Fleet::start("tx-shared", 2);
    let (a, b) = keys_on_two_engines("txs");
    let mut c = Resp::connect(fleet.proxy_port);
    assert_eq!(raw(&mut c, &["MSET", &a, "100", &b, "100"]), "+OK\r\n");
    let prep_before: u64 = fleet.engine_ports.iter().map(|&p| calls(p, "txprep")).sum();
    for round in 0..10u64 {
        c.send_raw(&transfer(&a, &b));
        let (x, y) = (100 - 3 * (round + 1), 100 + 3 * (round + 1));
        let want = format!(
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:{x}\r\n:{y}\r\n*2\r\n${}\r\n{x}\r\n${}\r\n{y}\r\n",
            x.to_string().len(),
            y.to_string().len()
        );
        assert_eq!(
            escape(&read_n(&mut c, 5)),
            escape(want.as_bytes()),
            "round {round}"
        );
    }
    // The first ran on the client's own connections; the nine after it over the shared
    // links, TXPREP on each engine.
    let prep: u64 = fleet.engine_ports.iter().map(|&p| calls(p, "txprep")).sum();
    assert_eq!(
        prep - prep_before,
        18,
        "TXPREPs for nine transactions on two engines"
    );
    // RESP3 and another database: the links of the client's protocol and database.
    assert!(raw(&mut c, &["HELLO", "3"]).starts_with("%7"));
    assert_eq!(raw(&mut c, &["SELECT", "2"]), "+OK\r\n");
    for _ in 0..2 {
        c.send_raw(&multi(&[
            &["HSET", &a, "f", "1"],
            &["HGETALL", &a],
            &["SADD", &b, "m"],
        ]));
        let got = read_n(&mut c, 5);
        assert!(
            got.ends_with(b"*3\r\n:0\r\n%1\r\n$1\r\nf\r\n$1\r\n1\r\n:0\r\n")
                || got.ends_with(b"*3\r\n:1\r\n%1\r\n$1\r\nf\r\n$1\r\n1\r\n:1\r\n"),
            "{}",
            escape(&got)
        );
    }
    assert_eq!(raw(&mut c, &["SELECT", "0"]), "+OK\r\n");
    // The hash went to database 2: database 0's `a` is still the string.
    assert_eq!(raw(&mut c, &["TYPE", &a]), "+string\r\n");
    // Errors keep Redis's forms: an error inside EXEC's array, a queueing error aborting.
    c.send_raw(&multi(&[&["INCR", &a], &["LPUSH", &b, "x"]]));
    let got = read_n(&mut c, 4);
    assert!(
        escape(&got).contains("-WRONGTYPE Operation against a key holding the wrong kind of value"),
        "{}",
        escape(&got)
    );
    c.send_raw(&multi(&[&["INCR", &a], &["INCR"], &["INCR", &b]]));
    let got = read_n(&mut c, 5);
    assert!(
        got.ends_with(b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
        "{}",
        escape(&got)
    );
}

#[test]
fn a_key_locked_elsewhere_sends_the_transaction_to_the_dedicated_path() {
    let (fleet, a, b, mut c) = after_one_transfer("tx-shared-fallback", "txf");
    // Another connection holds b's lock on its engine (as a transaction of another proxy).
    let b_port = engine_of(&fleet, &b);
    let mut holder = Resp::connect(b_port);
    assert_eq!(
        raw(&mut holder, &["TXLOCK", "5000", "KEYS", "1", &b]),
        ":0\r\n"
    );
    let aborts: u64 = fleet
        .engine_ports
        .iter()
        .map(|&p| calls(p, "txabort"))
        .sum();
    c.send_raw(&transfer(&a, &b));
    let got = read_n(&mut c, 4);
    assert_eq!(
        escape(&got),
        escape(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n")
    );
    assert_quiet(&mut c, "EXEC waits for the lock");
    // The engine of a prepared its part, then dropped it.
    let after: u64 = fleet
        .engine_ports
        .iter()
        .map(|&p| calls(p, "txabort"))
        .sum();
    assert_eq!(
        after - aborts,
        1,
        "TXABORT where the transaction was prepared"
    );
    assert_eq!(raw(&mut holder, &["TXUNLOCK"]), "+OK\r\n");
    assert_eq!(
        escape(&c.read_frame()),
        escape(b"*3\r\n:4\r\n:16\r\n*2\r\n$1\r\n4\r\n$2\r\n16\r\n")
    );
}

#[test]
fn a_prepared_transaction_is_isolated_from_other_connections_until_its_commit() {
    let (fleet, a, b, mut c) = after_one_transfer("tx-shared-wait", "txw");
    let (a_port, b_port) = (engine_of(&fleet, &a), engine_of(&fleet, &b));
    // b's engine pauses: the next transaction is prepared on a's engine and waits there for
    // its TXPREP on b's.
    let mut admin = Resp::connect(b_port);
    assert_eq!(
        raw(&mut admin, &["CLIENT", "PAUSE", "700", "ALL"]),
        "+OK\r\n"
    );
    let started = Instant::now();
    c.send_raw(&transfer(&a, &b));
    std::thread::sleep(Duration::from_millis(100));
    // A client of a's engine directly waits for the transaction's lock on a, then sees the
    // transaction whole.
    let mut direct = Resp::connect(a_port);
    send(&mut direct, &["GET", &a]);
    assert_quiet(&mut direct, "a direct GET of a prepared key");
    // Through the proxy, on the link that prepared it, a GET runs at once, before the
    // transaction (whose commands run at its TXCOMMITs, written to every link in one go).
    let mut r = Resp::connect(fleet.proxy_port);
    assert_eq!(raw(&mut r, &["GET", &a]), "$1\r\n7\r\n");
    assert!(started.elapsed() < Duration::from_millis(600));
    assert_eq!(
        escape(&read_n(&mut c, 5)),
        escape(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:4\r\n:16\r\n*2\r\n$1\r\n4\r\n$2\r\n16\r\n")
    );
    assert_eq!(raw_frame(&mut direct), "$1\r\n4\r\n");
    assert!(started.elapsed() >= Duration::from_millis(500));
    // After it, every path sees it.
    assert_eq!(
        raw(&mut r, &["MGET", &a, &b]),
        "*2\r\n$1\r\n4\r\n$2\r\n16\r\n"
    );
}
