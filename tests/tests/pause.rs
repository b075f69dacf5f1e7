//! CLIENT PAUSE / UNPAUSE (issue 19), against a real redis-server and a recached engine side
//! by side, and through the proxy: paused writes wait (and what a client pipelined after them
//! waits behind them), reads do not under WRITE, UNPAUSE and the timeout release the waiting
//! clients in order, keys do not expire while paused, errors are Redis's.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn servers() -> Vec<(&'static str, Proc, u16)> {
    let (rp, ep) = (free_port(), free_port());
    vec![
        ("redis-server", start_redis(rp), rp),
        ("recached", start_engine(ep), ep),
    ]
}

fn send(c: &mut Resp, args: &[&str]) {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.send_raw(&Resp::encode(&argv));
}

/// `blocked_clients` of INFO clients.
fn blocked(c: &mut Resp) -> i64 {
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "clients"])).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("blocked_clients")
}

fn wait_blocked(c: &mut Resp, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while blocked(c) != n {
        assert!(
            Instant::now() < deadline,
            "blocked_clients never reached {n}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn paused_writes_wait_and_run_in_order_when_unpaused() {
    for (name, _p, port) in servers() {
        let mut admin = Resp::connect(port);
        assert_eq!(
            admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
            b"+OK\r\n"
        );
        // Reads are served; a write waits, and so does what the same client sent after it.
        let mut a = Resp::connect(port);
        assert_eq!(a.cmd_str(&["GET", "k"]), b"$-1\r\n", "{name}");
        send(&mut a, &["SET", "k", "1"]);
        send(&mut a, &["GET", "k"]);
        let mut b = Resp::connect(port);
        send(&mut b, &["APPEND", "k", "2"]);
        wait_blocked(&mut admin, 2);
        assert_eq!(
            admin.cmd_str(&["GET", "k"]),
            b"$-1\r\n",
            "{name}: nothing ran"
        );
        // Arity errors are answered at once.
        assert_eq!(
            admin.cmd_str(&["SET", "k"]),
            b"-ERR wrong number of arguments for 'set' command\r\n"
        );
        assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
        assert_eq!(a.read_frame(), b"+OK\r\n", "{name}");
        assert_eq!(a.read_frame(), b"$1\r\n1\r\n", "{name}");
        assert_eq!(b.read_frame(), b":2\r\n", "{name}");
        assert_eq!(admin.cmd_str(&["GET", "k"]), b"$2\r\n12\r\n");
        assert_eq!(blocked(&mut admin), 0);
        // Errors.
        assert_eq!(
            admin.cmd_str(&["CLIENT", "PAUSE", "10", "READ"]),
            b"-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n"
        );
        assert_eq!(
            admin.cmd_str(&["CLIENT", "PAUSE", "-1"]),
            b"-ERR timeout is negative\r\n"
        );
        assert_eq!(
            admin.cmd_str(&["CLIENT", "PAUSE", "x"]),
            b"-ERR timeout is not an integer or out of range\r\n"
        );
    }
}

#[test]
fn a_pause_ends_by_itself_and_keys_do_not_expire_meanwhile() {
    for (name, _p, port) in servers() {
        let mut admin = Resp::connect(port);
        assert_eq!(admin.cmd_str(&["SET", "t", "v", "PX", "100"]), b"+OK\r\n");
        assert_eq!(
            admin.cmd_str(&["CLIENT", "PAUSE", "800", "WRITE"]),
            b"+OK\r\n"
        );
        std::thread::sleep(Duration::from_millis(300));
        // Past its TTL: reads as missing, but is still there (not expired while paused).
        assert_eq!(admin.cmd_str(&["GET", "t"]), b"$-1\r\n", "{name}");
        assert_eq!(admin.cmd_str(&["DBSIZE"]), b":1\r\n", "{name}");
        let mut w = Resp::connect(port);
        let t = Instant::now();
        assert_eq!(w.cmd_str(&["SET", "x", "1"]), b"+OK\r\n", "{name}");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{name}: the SET waited for the pause to end"
        );
        // After the pause the key expires as usual.
        assert_eq!(admin.cmd_str(&["GET", "t"]), b"$-1\r\n");
        assert_eq!(
            admin.cmd_str(&["DBSIZE"]),
            b":1\r\n",
            "{name}: only x is left"
        );
    }
}

#[test]
fn pause_through_the_proxy() {
    let f = Fleet::start("pause-proxy", 2);
    let mut admin = Resp::connect(f.proxy_port);
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        b"+OK\r\n"
    );
    let mut w = Resp::connect(f.proxy_port);
    send(&mut w, &["SET", "p", "1"]);
    std::thread::sleep(Duration::from_millis(200));
    let mut direct: Vec<Resp> = f.engine_ports.iter().map(|&p| Resp::connect(p)).collect();
    assert_eq!(
        direct.iter_mut().map(blocked).sum::<i64>(),
        1,
        "the SET waits on its engine"
    );
    assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    assert_eq!(w.read_frame(), b"+OK\r\n");
    assert_eq!(w.cmd_str(&["GET", "p"]), b"$1\r\n1\r\n");
}
