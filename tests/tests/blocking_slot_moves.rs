//! A blocking command through the proxy whose slot moves while it is parked still gets its
//! data: the engine it parked on unblocks it with `-MOVED` at its next cron tick, and the
//! proxy sends the same command to the new owner on the client's dedicated connection
//! (proxy/src/blockmove.rs, docs/cluster.md "Through the proxy"); a push there then answers
//! it. The slot is empty, so the move by hand is SETSLOT NODE on both engines (the
//! destination first, as `redis-cli --cluster reshard` does).

mod common;

use std::time::{Duration, Instant};

use common::*;
use engine_core::slot::{instance_for_key, key_slot};

/// A key that engine 0 owns (distinct per `name`), and its slot.
fn key_on_engine0(name: &str) -> (String, String) {
    let key = (0..)
        .map(|i| format!("{name}{i}"))
        .find(|t| instance_for_key(t.as_bytes(), 2) == 0)
        .unwrap();
    let slot = key_slot(key.as_bytes()).to_string();
    (key, slot)
}

impl Moving {
    /// Waits (a few seconds at most) until engine 0 has no client blocked any more: it
    /// unblocked the parked one with -MOVED (its cron runs 10 times a second).
    fn wait_unblocked_on_engine0(&self) {
        let mut e0 = Resp::connect(self.ports[0]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let info = String::from_utf8_lossy(&e0.cmd_str(&["INFO", "clients"])).into_owned();
            if info.contains("blocked_clients:0") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "still blocked on engine 0: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until engine 0 has a blocked client (the command reached it).
    fn wait_blocked_on_engine0(&self) {
        let mut e0 = Resp::connect(self.ports[0]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let info = String::from_utf8_lossy(&e0.cmd_str(&["INFO", "clients"])).into_owned();
            if info.contains("blocked_clients:1") {
                return;
            }
            assert!(Instant::now() < deadline, "not blocked on engine 0: {info}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// (1) BLPOP parked on engine 0; the slot moves to engine 1; LPUSH through the proxy lands
/// there and answers the BLPOP, sent again there by the proxy.
#[test]
fn a_parked_blpop_follows_its_slot_to_the_new_owner() {
    let m = Moving::start();
    let (k, slot) = key_on_engine0("bmove-list");
    let mut blocked = Resp::connect(m.fleet.proxy_port);
    send(&mut blocked, &["BLPOP", &k, "0"]);
    m.wait_blocked_on_engine0();
    m.give_to_engine1(&slot);
    m.wait_unblocked_on_engine0();
    // Sent again on engine 1, where it parks (or finds the push below).
    std::thread::sleep(Duration::from_millis(200));
    let mut pusher = Resp::connect(m.fleet.proxy_port);
    assert_eq!(escape(&pusher.cmd_str(&["LPUSH", &k, "v"])), ":1\\r\\n");
    let got = escape(&blocked.read_frame());
    assert_eq!(
        got,
        format!("*2\\r\\n${}\\r\\n{k}\\r\\n$1\\r\\nv\\r\\n", k.len())
    );
    // The list is on engine 1 now, emptied by the pop.
    let count = Resp::connect(m.ports[1]).cmd_str(&["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!(escape(&count), ":0\\r\\n");
    // The client carries on normally.
    assert_eq!(escape(&blocked.cmd_str(&["PING"])), "+PONG\\r\\n");
}

/// (2) The same with BZPOPMIN (and a timeout that is not 0: it starts again on engine 1).
#[test]
fn a_parked_bzpopmin_follows_its_slot_to_the_new_owner() {
    let m = Moving::start();
    let (k, slot) = key_on_engine0("bmove-zset");
    let mut blocked = Resp::connect(m.fleet.proxy_port);
    send(&mut blocked, &["BZPOPMIN", &k, "30"]);
    m.wait_blocked_on_engine0();
    m.give_to_engine1(&slot);
    m.wait_unblocked_on_engine0();
    std::thread::sleep(Duration::from_millis(200));
    let mut pusher = Resp::connect(m.fleet.proxy_port);
    assert_eq!(escape(&pusher.cmd_str(&["ZADD", &k, "1", "m"])), ":1\\r\\n");
    let got = escape(&blocked.read_frame());
    assert_eq!(
        got,
        format!(
            "*3\\r\\n${}\\r\\n{k}\\r\\n$1\\r\\nm\\r\\n$1\\r\\n1\\r\\n",
            k.len()
        )
    );
    assert_eq!(escape(&blocked.cmd_str(&["PING"])), "+PONG\\r\\n");
}

/// (3) A slot that moved before the command came (the proxy not told): the first engine
/// answers -MOVED at once, the command parks at the new owner.
#[test]
fn a_blpop_on_a_slot_moved_before_parks_at_the_new_owner() {
    let m = Moving::start();
    let (k, slot) = key_on_engine0("bmove-before");
    m.give_to_engine1(&slot);
    let mut blocked = Resp::connect(m.fleet.proxy_port);
    send(&mut blocked, &["BLPOP", &k, "0"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut e1 = Resp::connect(m.ports[1]);
    assert_eq!(escape(&e1.cmd_str(&["RPUSH", &k, "w"])), ":1\\r\\n");
    let got = escape(&blocked.read_frame());
    assert_eq!(
        got,
        format!("*2\\r\\n${}\\r\\n{k}\\r\\n$1\\r\\nw\\r\\n", k.len())
    );
}

/// (4) XREAD … BLOCK with `$`: sent again on engine 1, it answers the entry added there.
#[test]
fn a_parked_xread_block_follows_its_slot_to_the_new_owner() {
    let m = Moving::start();
    let (k, slot) = key_on_engine0("bmove-stream");
    let mut blocked = Resp::connect(m.fleet.proxy_port);
    send(&mut blocked, &["XREAD", "BLOCK", "0", "STREAMS", &k, "$"]);
    m.wait_blocked_on_engine0();
    m.give_to_engine1(&slot);
    m.wait_unblocked_on_engine0();
    std::thread::sleep(Duration::from_millis(200));
    let mut pusher = Resp::connect(m.fleet.proxy_port);
    assert_eq!(
        escape(&pusher.cmd_str(&["XADD", &k, "5-1", "f", "v"])),
        "$3\\r\\n5-1\\r\\n"
    );
    let got = escape(&blocked.read_frame());
    assert_eq!(
        got,
        format!(
            "*1\\r\\n*2\\r\\n${}\\r\\n{k}\\r\\n*1\\r\\n*2\\r\\n$3\\r\\n5-1\\r\\n*2\\r\\n$1\\r\\nf\\r\\n$1\\r\\nv\\r\\n",
            k.len()
        )
    );
}
