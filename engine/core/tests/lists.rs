//! Lists and blocking commands through `Engine::exec`: O(1) memory accounting while a list
//! grows and shrinks, and the parked-client life cycle (park, wake by a push, FIFO order,
//! BLMOVE chains, timeouts in RESP2/RESP3, disconnects, MULTI/EXEC, type changes). Exact
//! replies of the non-blocking paths are compared with redis-server in `tests/diff/lists.txt`;
//! the same blocking scenarios run over sockets against both servers in
//! `tests/tests/blocking.rs`.

use std::time::Instant;

use engine_core::Proto;
use engine_core::keyspace::ENTRY_OVERHEAD;
use engine_core::types::list::{End, ListValue};

mod common;

use common::{T0, World, unblock};

#[test]
fn memory_is_accounted_incrementally_and_build_is_linear() {
    let mut w = World::new(1);
    const N: usize = 100_000;
    let elem = "x".repeat(10);
    let mut first = None;
    let start = Instant::now();
    for i in 0..N {
        if i == N - 1_000 {
            first = Some(start.elapsed());
        }
        w.cmd(1, &format!("RPUSH big {elem}"));
    }
    let total = start.elapsed();
    // The list's own count (entries and nodes); the key and entry overhead once.
    let same = |n: usize| {
        let mut l = ListValue::new();
        (0..n).for_each(|_| l.push(elem.as_bytes(), End::Tail));
        l.mem_size()
    };
    assert_eq!(
        w.engine.dataset_bytes() as usize,
        3 + ENTRY_OVERHEAD + same(N)
    );
    // 12 bytes an element (10 + length and back-length) and a node per 8 KB of them.
    assert!(same(N) < N * 13, "{}", same(N));
    // The last 1000 pushes take about 1% of the time, not more than a few times that (an
    // O(n) push would make them take ~2% of an O(n²) build, a constant factor far larger).
    let last = total - first.unwrap();
    assert!(
        last.as_secs_f64() < total.as_secs_f64() * 0.2 + 0.05,
        "last 1000 pushes {last:?} of {total:?}"
    );
    w.cmd(1, "LTRIM big 0 9");
    assert_eq!(
        w.engine.dataset_bytes() as usize,
        3 + ENTRY_OVERHEAD + same(10)
    );
    assert_eq!(w.cmd(1, "LPOP big 100").matches('$').count(), 10);
    assert_eq!(w.engine.dataset_bytes(), 0, "an emptied list is deleted");
    assert_eq!(w.cmd(1, "EXISTS big"), ":0\r\n");
}

#[test]
fn blpop_is_woken_by_a_push_from_another_client() {
    let mut w = World::new(2);
    w.park(2, "BLPOP k other 0");
    assert_eq!(w.engine.next_deadline_us(), None, "timeout 0 waits forever");
    assert!(w.deliveries().is_empty());
    assert_eq!(
        w.cmd(1, "LPUSH k a"),
        ":1\r\n",
        "the pusher sees the length after its push"
    );
    assert_eq!(w.deliveries(), [unblock(2, "*2\r\n$1\r\nk\r\n$1\r\na\r\n")]);
    assert_eq!(
        w.cmd(1, "EXISTS k"),
        ":0\r\n",
        "the woken pop emptied and deleted the list"
    );
    // Served means forgotten: a later push stays in the list.
    assert_eq!(w.cmd(1, "RPUSH k b"), ":1\r\n");
    assert!(w.deliveries().is_empty());
    assert_eq!(w.cmd(1, "LLEN k"), ":1\r\n");
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let mut w = World::new(4);
    w.park(2, "BRPOP k 0");
    w.park(3, "BLPOP k 5");
    w.park(4, "BLPOP k 0");
    assert_eq!(w.cmd(1, "RPUSH k a b"), ":2\r\n");
    assert_eq!(
        w.deliveries(),
        [
            unblock(2, "*2\r\n$1\r\nk\r\n$1\r\nb\r\n"),
            unblock(3, "*2\r\n$1\r\nk\r\n$1\r\na\r\n"),
        ]
    );
    // Client 4 is still parked; client 3's deadline is gone with it.
    assert_eq!(w.engine.next_deadline_us(), None);
    assert_eq!(w.cmd(1, "LPUSH k c"), ":1\r\n");
    assert_eq!(w.deliveries(), [unblock(4, "*2\r\n$1\r\nk\r\n$1\r\nc\r\n")]);
}

#[test]
fn timeouts_answer_a_null_array_in_each_protocol() {
    let mut w = World::new(3);
    w.clients[2].proto = Proto::Resp3;
    w.park(2, "BRPOP k 0.2");
    w.park(3, "BLMOVE k d LEFT RIGHT 0.5");
    assert_eq!(w.engine.next_deadline_us(), Some(T0 + 200_000));
    w.engine.timeouts(T0 + 199_999);
    assert!(w.deliveries().is_empty(), "not before the deadline");
    w.engine.timeouts(T0 + 200_000);
    assert_eq!(w.deliveries(), [unblock(2, "*-1\r\n")]);
    assert_eq!(w.engine.next_deadline_us(), Some(T0 + 500_000));
    w.engine.timeouts(T0 + 10_000_000);
    assert_eq!(
        w.deliveries(),
        [unblock(3, "_\r\n")],
        "RESP3 null, BLMOVE too"
    );
    assert_eq!(w.engine.next_deadline_us(), None);
    assert_eq!(w.cmd(1, "LPUSH k v"), ":1\r\n");
    assert!(w.deliveries().is_empty());
}

#[test]
fn a_disconnected_waiter_is_forgotten() {
    let mut w = World::new(3);
    w.park(2, "BLPOP k 3");
    w.park(3, "BLPOP k 0");
    w.engine.client_closed(2);
    w.engine.client_closed(3);
    assert_eq!(w.engine.next_deadline_us(), None);
    assert_eq!(w.cmd(1, "LPUSH k v"), ":1\r\n");
    assert!(w.deliveries().is_empty());
    assert_eq!(w.cmd(1, "LRANGE k 0 -1"), "*1\r\n$1\r\nv\r\n");
    w.engine.timeouts(T0 + 60_000_000);
    assert!(w.deliveries().is_empty());
}

#[test]
fn blmove_wakes_and_its_push_wakes_the_next_waiter() {
    let mut w = World::new(3);
    w.park(2, "BLMOVE src mid RIGHT LEFT 0");
    w.park(3, "BRPOPLPUSH mid dst 0");
    assert_eq!(w.cmd(1, "RPUSH src a b"), ":2\r\n");
    assert_eq!(
        w.deliveries(),
        [unblock(2, "$1\r\nb\r\n"), unblock(3, "$1\r\nb\r\n")]
    );
    assert_eq!(w.cmd(1, "LRANGE src 0 -1"), "*1\r\n$1\r\na\r\n");
    assert_eq!(w.cmd(1, "EXISTS mid"), ":0\r\n");
    assert_eq!(w.cmd(1, "LRANGE dst 0 -1"), "*1\r\n$1\r\nb\r\n");
}

#[test]
fn blmpop_served_and_with_data_present() {
    let mut w = World::new(2);
    w.cmd(1, "RPUSH b 1 2 3");
    assert_eq!(
        w.cmd(2, "BLMPOP 0 2 a b RIGHT COUNT 2"),
        "*2\r\n$1\r\nb\r\n*2\r\n$1\r\n3\r\n$1\r\n2\r\n"
    );
    w.cmd(1, "DEL b");
    w.park(2, "BLMPOP 0 2 a b LEFT COUNT 5");
    assert_eq!(w.cmd(1, "RPUSH b x y"), ":2\r\n");
    assert_eq!(
        w.deliveries(),
        [unblock(2, "*2\r\n$1\r\nb\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n")]
    );
}

#[test]
fn inside_exec_blocking_commands_answer_at_once_and_pushes_serve_after_exec() {
    let mut w = World::new(2);
    w.cmd(1, "MULTI");
    w.cmd(1, "BLPOP k 0");
    w.cmd(1, "BLMOVE k d LEFT LEFT 0");
    w.cmd(1, "BLMPOP 0 1 k LEFT");
    assert_eq!(w.cmd(1, "EXEC"), "*3\r\n*-1\r\n$-1\r\n*-1\r\n");
    w.park(2, "BLPOP k 0");
    w.cmd(1, "MULTI");
    w.cmd(1, "RPUSH k a b");
    w.cmd(1, "LPOP k");
    assert!(w.deliveries().is_empty());
    assert_eq!(w.cmd(1, "EXEC"), "*2\r\n:2\r\n$1\r\na\r\n");
    // Served after the transaction, with what it left.
    assert_eq!(w.deliveries(), [unblock(2, "*2\r\n$1\r\nk\r\n$1\r\nb\r\n")]);
}

#[test]
fn a_waiter_stays_parked_while_its_key_holds_another_type() {
    let mut w = World::new(2);
    w.park(2, "BLPOP k 0");
    w.cmd(1, "SET k str");
    w.cmd(1, "APPEND k more");
    assert!(w.deliveries().is_empty());
    w.cmd(1, "DEL k");
    w.cmd(1, "RPUSH k v");
    assert_eq!(w.deliveries(), [unblock(2, "*2\r\n$1\r\nk\r\n$1\r\nv\r\n")]);
}

#[test]
fn a_blmove_woken_onto_a_wrong_type_destination_gets_wrongtype() {
    let mut w = World::new(2);
    w.park(2, "BLMOVE src dst LEFT LEFT 0");
    w.cmd(1, "SET dst x");
    w.cmd(1, "RPUSH src a");
    assert_eq!(
        w.deliveries(),
        [unblock(
            2,
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        )]
    );
    assert_eq!(w.cmd(1, "LLEN src"), ":1\r\n", "nothing was moved");
}

#[test]
fn blocking_argument_errors_reply_without_parking() {
    let mut w = World::new(1);
    for (line, reply) in [
        ("BLPOP k -1", "-ERR timeout is negative\r\n"),
        (
            "BLPOP k x",
            "-ERR timeout is not a float or out of range\r\n",
        ),
        ("BLMOVE a b UP LEFT 0", "-ERR syntax error\r\n"),
        (
            "BLMPOP 0 0 k LEFT",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "BLMPOP x 1 k LEFT COUNT 0",
            "-ERR count should be greater than 0\r\n",
        ),
    ] {
        assert_eq!(w.cmd(1, line), reply, "{line}");
    }
    w.cmd(1, "SET s x");
    assert_eq!(
        w.cmd(1, "BRPOP nokey s 0"),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(w.engine.next_deadline_us(), None);
}
