//! Blocking stream reads over streams on several instances through the proxy
//! (`crate::spread`): the first instance to answer releases the others, nothing is delivered
//! twice or lost from a group's pending list, timeouts give a null. Two real redis-servers
//! behind the proxy (see `common`).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// `blocked_clients` of backend `i`'s INFO.
fn blocked_on(f: &Fleet, i: usize) -> usize {
    let info = text(&f.backend(i).cmd(&["INFO", "clients"]));
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("blocked_clients")
}

/// Waits (bounded) until backend `i` has `n` blocked clients.
fn wait_blocked(f: &Fleet, i: usize, n: usize) {
    let got = wait_for(Duration::from_secs(5), || {
        (blocked_on(f, i) == n).then_some(())
    });
    assert!(
        got.is_some(),
        "instance {i}: blocked_clients never reached {n}"
    );
}

#[test]
fn xread_block_over_two_instances_takes_the_first_answer_and_releases_the_other() {
    let f = Fleet::start();
    let (a, b) = (key_on(0, "sa"), key_on(1, "sb"));
    let mut w = f.conn();
    assert_eq!(w.cmd(&["XADD", &a, "1-1", "f", "old"]), bulk("1-1"));
    let mut r = f.conn();
    // Nothing after `$`: both parts park on their instances.
    r.send(&["XREAD", "BLOCK", "0", "STREAMS", &a, &b, "$", "$"]);
    wait_blocked(&f, 0, 1);
    wait_blocked(&f, 1, 1);
    assert_eq!(w.cmd(&["XADD", &b, "5-1", "f", "new"]), bulk("5-1"));
    let want = format!(
        "*1\r\n*2\r\n${}\r\n{b}\r\n*1\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\nf\r\n$3\r\nnew\r\n",
        b.len()
    );
    assert_eq!(text(&r.reply()), want);
    // Instance 0's part was unblocked: nothing stays parked there.
    wait_blocked(&f, 0, 0);
    wait_blocked(&f, 1, 0);
    // The connection goes on, on every lane.
    assert_eq!(r.cmd(&["GET", &a]).first(), Some(&b'-'), "WRONGTYPE");
    assert_eq!(r.cmd(&["XLEN", &b]), int(1));

    // Data already there on one instance: answered at once, in the caller's key order.
    let t = Instant::now();
    let reply = text(&r.cmd(&["XREAD", "BLOCK", "0", "STREAMS", &b, &a, "0", "0"]));
    assert!(t.elapsed() < Duration::from_secs(4));
    let (pb, pa) = (reply.find(&b).unwrap(), reply.find(&a).unwrap());
    assert!(reply.starts_with("*2\r\n") && pb < pa, "{reply}");
    wait_blocked(&f, 0, 0);
    wait_blocked(&f, 1, 0);
}

#[test]
fn xread_block_over_two_instances_times_out_with_a_null() {
    let f = Fleet::start();
    let (a, b) = (key_on(0, "ta"), key_on(1, "tb"));
    let mut r = f.conn();
    let t = Instant::now();
    assert_eq!(
        r.cmd(&["XREAD", "BLOCK", "200", "STREAMS", &a, &b, "$", "$"]),
        b"*-1\r\n"
    );
    assert!(t.elapsed() >= Duration::from_millis(190));
    // RESP3: a null.
    let hello = r.cmd(&["HELLO", "3"]);
    assert_eq!(hello.first(), Some(&b'%'));
    assert_eq!(
        r.cmd(&["XREAD", "BLOCK", "100", "STREAMS", &a, &b, "$", "$"]),
        b"_\r\n"
    );
    // An error on one instance (a key of another type) is the reply; the other is released.
    let mut w = f.conn();
    assert_eq!(w.cmd(&["SET", &a, "x"]), b"+OK\r\n");
    let reply = r.cmd(&["XREAD", "BLOCK", "0", "STREAMS", &a, &b, "0", "$"]);
    assert!(text(&reply).starts_with("-WRONGTYPE"), "{}", text(&reply));
    wait_blocked(&f, 1, 0);
}

/// A consumer blocks on a group over two instances while a producer adds entries to both:
/// every entry reaches the consumer exactly once, and the group's pending lists hold exactly
/// what it received.
#[test]
fn xreadgroup_block_over_two_instances_loses_and_doubles_nothing() {
    let f = Fleet::start();
    let (a, b) = (key_on(0, "ga"), key_on(1, "gb"));
    let mut w = f.conn();
    for k in [&a, &b] {
        assert_eq!(
            w.cmd(&["XGROUP", "CREATE", k, "g", "$", "MKSTREAM"]),
            b"+OK\r\n"
        );
    }
    const N: usize = 200;
    let port = f.proxy.port;
    let (a2, b2) = (a.clone(), b.clone());
    let producer = thread::spawn(move || {
        let mut p = Conn::connect(port);
        for i in 0..N {
            let k = if i % 3 == 0 { &a2 } else { &b2 };
            let v = i.to_string();
            assert_eq!(p.cmd(&["XADD", k, "*", "n", &v]).first(), Some(&b'$'));
            if i % 10 == 0 {
                thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let mut r = f.conn();
    let mut seen = vec![0u32; N];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reads = 0;
    while seen.contains(&0) && Instant::now() < deadline && reads < 10 * N {
        reads += 1;
        let reply = text(&r.cmd(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "7",
            "BLOCK",
            "1000",
            "STREAMS",
            &a,
            &b,
            ">",
            ">",
        ]));
        assert!(!reply.is_empty() && !reply.starts_with('-'), "{reply}");
        // Values are the only 1-3 digit bulks after a `n` field.
        let mut lines = reply.lines();
        while let Some(l) = lines.next() {
            if l == "n" {
                lines.next(); // $len
                let v: usize = lines.next().unwrap().parse().unwrap();
                seen[v] += 1;
            }
        }
    }
    producer.join().unwrap();
    assert!(seen.iter().all(|&c| c == 1), "each entry once: {seen:?}");
    let mut pending = |k: &str| -> i64 {
        let r = text(&w.cmd(&["XPENDING", k, "g"]));
        r.lines().nth(1).unwrap()[1..].parse().unwrap()
    };
    assert_eq!(pending(&a) + pending(&b), N as i64);
    wait_blocked(&f, 0, 0);
    wait_blocked(&f, 1, 0);
}
