//! A MULTI/EXEC through the proxy whose keys' slot is moving (`-ASK`), or moved before the
//! proxy learned it (`-MOVED`), still succeeds for the client: every queued command answers
//! `+QUEUED` and EXEC the array of a single run, the values land on the slot's new owner
//! (proxy/src/txmove.rs, docs/transactions.md "Slots that move"). With WATCH in effect EXEC
//! answers the null reply instead. The slot is moved by hand with raw commands, as
//! `redis-cli --cluster reshard` does (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE).

mod common;

use common::*;
use engine_core::slot::{instance_for_key, key_slot};

/// Two keys sharing one slot that engine 0 owns (distinct per `name`), and that slot.
fn keys_on_engine0(name: &str) -> (String, String, String) {
    let tag = (0..)
        .map(|i| format!("{name}{i}"))
        .find(|t| instance_for_key(t.as_bytes(), 2) == 0)
        .unwrap();
    let slot = key_slot(tag.as_bytes()).to_string();
    (format!("{{{tag}}}a"), format!("{{{tag}}}b"), slot)
}

impl Moving {
    /// Opens the slot's move from engine 0 to engine 1 and MIGRATEs `moved` there.
    fn start_move(&self, slot: &str, moved: &[&str]) {
        let mut e0 = Resp::connect(self.ports[0]);
        let mut e1 = Resp::connect(self.ports[1]);
        assert_ok(
            &mut e1,
            &["CLUSTER", "SETSLOT", slot, "IMPORTING", &self.ids[0]],
        );
        assert_ok(
            &mut e0,
            &["CLUSTER", "SETSLOT", slot, "MIGRATING", &self.ids[1]],
        );
        let port = self.ports[1].to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend_from_slice(moved);
        assert_ok(&mut e0, &migrate);
    }

    /// `GET key` on engine `i` itself (after ASKING, so an importing slot answers too).
    fn on_engine(&self, i: usize, key: &str) -> String {
        let mut c = Resp::connect(self.ports[i]);
        assert_ok(&mut c, &["ASKING"]);
        escape(&c.cmd_str(&["GET", key]))
    }
}

fn proxy(m: &Moving) -> Resp {
    Resp::connect(m.fleet.proxy_port)
}

/// -ASK: the first key already moved, the slot still migrating; the second still at the
/// source. Then -MOVED: the move committed on both engines, the proxy not told.
#[test]
fn a_transaction_follows_ask_then_moved() {
    let m = Moving::start();
    let (k, k2, slot) = keys_on_engine0("txask");
    let mut p = proxy(&m);
    assert_ok(&mut p, &["SET", &k, "old"]);
    assert_ok(&mut p, &["SET", &k2, "10"]);
    m.start_move(&slot, &[&k]);
    // (1) -ASK path: SET k is asked to engine 1, INCR k2 still runs at engine 0.
    assert_ok(&mut p, &["MULTI"]);
    assert_eq!(escape(&p.cmd_str(&["SET", &k, "v1"])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["INCR", &k2])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["EXEC"])), "*2\\r\\n+OK\\r\\n:11\\r\\n");
    assert_eq!(m.on_engine(1, &k), "$2\\r\\nv1\\r\\n");
    let count = Resp::connect(m.ports[0]).cmd_str(&["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!(escape(&count), ":1\\r\\n", "only k2 left at the source");
    assert_eq!(m.on_engine(0, &k2), "$2\\r\\n11\\r\\n");
    // The rest of the slot moves and the move commits; the proxy has not been told.
    m.start_move_rest(&slot, &[&k2]);
    m.give_to_engine1(&slot);
    // (2) -MOVED path.
    assert_ok(&mut p, &["MULTI"]);
    assert_eq!(escape(&p.cmd_str(&["SET", &k, "v2"])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["INCR", &k2])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["GET", &k])), "+QUEUED\\r\\n");
    assert_eq!(
        escape(&p.cmd_str(&["EXEC"])),
        "*3\\r\\n+OK\\r\\n:12\\r\\n$2\\r\\nv2\\r\\n"
    );
    assert_eq!(m.on_engine(1, &k), "$2\\r\\nv2\\r\\n");
    assert_eq!(m.on_engine(1, &k2), "$2\\r\\n12\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["GET", &k2])), "$2\\r\\n12\\r\\n");
}

impl Moving {
    /// MIGRATEs more keys of a slot already migrating.
    fn start_move_rest(&self, _slot: &str, moved: &[&str]) {
        let port = self.ports[1].to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend_from_slice(moved);
        assert_ok(&mut Resp::connect(self.ports[0]), &migrate);
    }
}

/// (3) A pipelined transaction (one write) over a slot that moved, with a key of the other
/// engine in it too: a transaction over two engines, coordinated.
#[test]
fn a_pipelined_transaction_follows_a_move() {
    let m = Moving::start();
    let (k, k2, slot) = keys_on_engine0("txpipe");
    let other = (0..)
        .map(|i| format!("txpipe-other{i}"))
        .find(|t| instance_for_key(t.as_bytes(), 2) == 1)
        .unwrap();
    let mut p = proxy(&m);
    assert_ok(&mut p, &["SET", &k2, "5"]);
    m.start_move(&slot, &[&k2]);
    let mut batch = Vec::new();
    for args in [
        &["MULTI"][..],
        &["SET", &k, "p1"],
        &["INCR", &k2],
        &["SET", &other, "o"],
        &["EXEC"],
    ] {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        batch.extend(Resp::encode(&a));
    }
    p.send_raw(&batch);
    let replies: Vec<String> = (0..5).map(|_| escape(&p.read_frame())).collect();
    assert_eq!(
        replies,
        [
            "+OK\\r\\n",
            "+QUEUED\\r\\n",
            "+QUEUED\\r\\n",
            "+QUEUED\\r\\n",
            "*3\\r\\n+OK\\r\\n:6\\r\\n+OK\\r\\n"
        ]
    );
    // k was missing at the source: asked to engine 1 with k2.
    assert_eq!(m.on_engine(1, &k), "$2\\r\\np1\\r\\n");
    assert_eq!(m.on_engine(1, &k2), "$1\\r\\n6\\r\\n");
    assert_eq!(m.on_engine(1, &other), "$1\\r\\no\\r\\n");
    // And again once committed (-MOVED), pipelined.
    m.give_to_engine1(&slot);
    let mut batch = Vec::new();
    for args in [&["MULTI"][..], &["INCR", &k2], &["GET", &k], &["EXEC"]] {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        batch.extend(Resp::encode(&a));
    }
    p.send_raw(&batch);
    let replies: Vec<String> = (0..4).map(|_| escape(&p.read_frame())).collect();
    assert_eq!(
        replies,
        [
            "+OK\\r\\n",
            "+QUEUED\\r\\n",
            "+QUEUED\\r\\n",
            "*2\\r\\n:7\\r\\n$2\\r\\np1\\r\\n"
        ]
    );
}

/// (4) WATCH on a key whose slot moved: EXEC answers the null reply, which clients read as
/// "retry"; the retry (a new WATCH, MULTI, EXEC) then succeeds.
#[test]
fn a_watched_transaction_over_a_moved_slot_answers_null() {
    let m = Moving::start();
    let (k, _k2, slot) = keys_on_engine0("txwatch");
    let mut p = proxy(&m);
    assert_ok(&mut p, &["SET", &k, "1"]);
    assert_ok(&mut p, &["WATCH", &k]);
    m.start_move(&slot, &[&k]);
    m.give_to_engine1(&slot);
    assert_ok(&mut p, &["MULTI"]);
    assert_eq!(escape(&p.cmd_str(&["INCR", &k])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["EXEC"])), "*-1\\r\\n");
    assert_eq!(m.on_engine(1, &k), "$1\\r\\n1\\r\\n", "nothing ran");
    // RESP3: `_`.
    let mut p3 = proxy(&m);
    assert!(p3.cmd_str(&["HELLO", "3"]).starts_with(b"%"));
    let (j, _, slot2) = keys_on_engine0("txwatch3");
    assert_ok(&mut p3, &["SET", &j, "1"]);
    assert_ok(&mut p3, &["WATCH", &j]);
    m.start_move(&slot2, &[&j]);
    m.give_to_engine1(&slot2);
    assert_ok(&mut p3, &["MULTI"]);
    assert_eq!(escape(&p3.cmd_str(&["INCR", &j])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p3.cmd_str(&["EXEC"])), "_\\r\\n");
    // The client's retry: the proxy knows the new owner now.
    assert_ok(&mut p, &["WATCH", &k]);
    assert_ok(&mut p, &["MULTI"]);
    assert_eq!(escape(&p.cmd_str(&["INCR", &k])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["EXEC"])), "*1\\r\\n:2\\r\\n");
}

/// The slot moves after the commands were queued and before EXEC: the engine checks the
/// queued commands again at EXEC (as Redis does) and refuses EXEC with the redirect, having
/// run none of them; the proxy runs the transaction again on the new owner, and the client
/// gets the array of one run.
#[test]
fn a_slot_moved_between_queueing_and_exec_runs_the_transaction_once() {
    let m = Moving::start();
    let (k, k2, slot) = keys_on_engine0("txlate");
    let mut p = proxy(&m);
    assert_ok(&mut p, &["SET", &k, "old"]);
    assert_ok(&mut p, &["SET", &k2, "20"]);
    assert_ok(&mut p, &["MULTI"]);
    assert_eq!(escape(&p.cmd_str(&["SET", &k, "late"])), "+QUEUED\\r\\n");
    assert_eq!(escape(&p.cmd_str(&["INCR", &k2])), "+QUEUED\\r\\n");
    // Now the whole slot moves and commits, behind the queued transaction's back.
    m.start_move(&slot, &[&k, &k2]);
    m.give_to_engine1(&slot);
    assert_eq!(escape(&p.cmd_str(&["EXEC"])), "*2\\r\\n+OK\\r\\n:21\\r\\n");
    // One run, on the new owner; nothing was left behind at the source.
    assert_eq!(m.on_engine(1, &k), "$4\\r\\nlate\\r\\n");
    assert_eq!(m.on_engine(1, &k2), "$2\\r\\n21\\r\\n");
    let count = Resp::connect(m.ports[0]).cmd_str(&["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!(escape(&count), ":0\\r\\n");
}
