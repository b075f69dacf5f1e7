//! Moving slots: SETSLOT, ASK / TRYAGAIN / ASKING, ADDSLOTS / DELSLOTS, MEET / FORGET, the
//! nodes file and the slot index, checked against redis 7.0's semantics and texts.

use super::tests::{client, engine, run};
use super::*;
use crate::Flow;

const NODES: [&str; 2] = ["127.0.0.1:7000", "127.0.0.1:7001"];

/// Two keys of one slot owned by node 0 of 2, and that slot.
fn slot_keys() -> (String, String, u16) {
    let tag = (0..)
        .map(|k| format!("{{m{k}}}"))
        .find(|k| slot::instance_for_key(k.as_bytes(), 2) == 0)
        .unwrap();
    let s = slot::key_slot(tag.as_bytes());
    (format!("{tag}a"), format!("{tag}b"), s)
}

/// The text of a RESP2 bulk string reply.
fn bulk_text(reply: &str) -> String {
    let body = &reply[reply.find("\r\n").unwrap() + 2..];
    body.strip_suffix("\r\n").unwrap().to_string()
}

#[test]
fn a_migrating_slot_asks_and_an_importing_slot_needs_asking() {
    let (mut e0, mut e1) = (engine(&NODES, 0), engine(&NODES, 1));
    let (mut c0, mut c1) = (client(), client());
    let (k1, k2, s) = slot_keys();
    let (id0, id1) = (node_id(NODES[0]), node_id(NODES[1]));
    let ss = s.to_string();
    assert_eq!(run(&mut e0, &mut c0, &["SET", &k1, "v"]), "+OK\r\n");
    // Only the owner may migrate, only a non-owner import, only known nodes.
    assert_eq!(
        run(
            &mut e1,
            &mut c1,
            &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id0]
        ),
        format!("-ERR I'm not the owner of hash slot {s}\r\n")
    );
    assert_eq!(
        run(
            &mut e0,
            &mut c0,
            &["CLUSTER", "SETSLOT", &ss, "IMPORTING", &id1]
        ),
        format!("-ERR I'm already the owner of hash slot {s}\r\n")
    );
    assert_eq!(
        run(
            &mut e0,
            &mut c0,
            &["CLUSTER", "SETSLOT", &ss, "MIGRATING", "abc"]
        ),
        "-ERR I don't know about node abc\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "SETSLOT", &ss, "BOGUS"]),
        "-ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "SETSLOT", "16384", "STABLE"]),
        "-ERR Invalid or out of range slot\r\n"
    );
    let g0 = e0.cluster().generation();
    assert_eq!(
        run(
            &mut e1,
            &mut c1,
            &["CLUSTER", "SETSLOT", &ss, "IMPORTING", &id0]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        run(
            &mut e0,
            &mut c0,
            &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1]
        ),
        "+OK\r\n"
    );
    assert!(e0.cluster().generation() > g0, "a change is saved");
    assert!(run(&mut e0, &mut c0, &["CLUSTER", "NODES"]).contains(&format!(" [{s}->-{id1}]\n")));
    assert!(run(&mut e1, &mut c1, &["CLUSTER", "NODES"]).contains(&format!(" [{s}-<-{id0}]\n")));
    // Source: a key still here is served; a missing one is asked for at the target; a
    // request with both cannot be served anywhere.
    assert_eq!(run(&mut e0, &mut c0, &["GET", &k1]), "$1\r\nv\r\n");
    let ask = format!("-ASK {s} 127.0.0.1:7001\r\n");
    assert_eq!(run(&mut e0, &mut c0, &["GET", &k2]), ask);
    assert_eq!(run(&mut e0, &mut c0, &["SET", &k2, "x"]), ask);
    assert_eq!(
        run(&mut e0, &mut c0, &["MGET", &k1, &k2]),
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
    );
    // Target: without ASKING the owner is still the source.
    let moved = format!("-MOVED {s} 127.0.0.1:7000\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["GET", &k2]), moved);
    assert_eq!(run(&mut e1, &mut c1, &["ASKING"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["SET", &k2, "w"]), "+OK\r\n");
    assert_eq!(
        run(&mut e1, &mut c1, &["GET", &k2]),
        moved,
        "ASKING is one-shot"
    );
    // ASKING then MULTI holds for the transaction, EXEC's commands included, and ends with
    // EXEC (or DISCARD), as in Redis.
    assert_eq!(run(&mut e1, &mut c1, &["ASKING"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["MULTI"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["SET", &k2, "t"]), "+QUEUED\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["GET", &k2]), "+QUEUED\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["EXEC"]), "*2\r\n+OK\r\n$1\r\nt\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["GET", &k2]), moved, "EXEC ends it");
    assert_eq!(run(&mut e1, &mut c1, &["ASKING"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["MULTI"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["DISCARD"]), "+OK\r\n");
    assert_eq!(
        run(&mut e1, &mut c1, &["GET", &k2]),
        moved,
        "DISCARD ends it"
    );
    assert_eq!(run(&mut e1, &mut c1, &["ASKING"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["SET", &k2, "w"]), "+OK\r\n");
    assert_eq!(run(&mut e1, &mut c1, &["ASKING"]), "+OK\r\n");
    assert_eq!(
        run(&mut e1, &mut c1, &["MGET", &k1, &k2]),
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
    );
    // MIGRATE's RESTORE-ASKING needs no ASKING.
    let dump = {
        let mut out = Vec::new();
        let argv: Vec<&[u8]> = vec![b"DUMP", k1.as_bytes()];
        e0.exec(&mut c0, &argv, 1_700_000_000_000_000, &mut out);
        out
    };
    let payload = &dump[dump.iter().position(|&b| b == b'\n').unwrap() + 1..dump.len() - 2];
    let mut out = Vec::new();
    let argv: Vec<&[u8]> = vec![b"RESTORE-ASKING", k1.as_bytes(), b"0", payload];
    e1.exec(&mut c1, &argv, 1_700_000_000_000_000, &mut out);
    assert_eq!(out, b"+OK\r\n");
    // The source cannot give the slot away while it holds a key of it.
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "SETSLOT", &ss, "NODE", &id1]),
        format!(
            "-ERR Can't assign hashslot {s} to a different node while I still hold keys for \
             this hash slot.\r\n"
        )
    );
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":1\r\n"
    );
    assert_eq!(run(&mut e0, &mut c0, &["DEL", &k1]), ":1\r\n");
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":0\r\n"
    );
    // Target first (as redis-cli does): the import closes and its epoch is bumped.
    assert_eq!(
        run(&mut e1, &mut c1, &["CLUSTER", "SETSLOT", &ss, "NODE", &id1]),
        "+OK\r\n"
    );
    assert!(
        run(&mut e1, &mut c1, &["CLUSTER", "INFO"]).contains("cluster_my_epoch:2\r\n"),
        "the importing node already holds the greatest epoch: redis keeps it"
    );
    assert_eq!(run(&mut e1, &mut c1, &["GET", &k2]), "$1\r\nw\r\n");
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "SETSLOT", &ss, "NODE", &id1]),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut c0, &["GET", &k1]),
        format!("-MOVED {s} 127.0.0.1:7001\r\n")
    );
    assert!(!run(&mut e0, &mut c0, &["CLUSTER", "NODES"]).contains('['));
    assert!(!e0.cluster().open_slots() && !e1.cluster().open_slots());
    assert_eq!(
        run(&mut e0, &mut c0, &["CLUSTER", "BUMPEPOCH"]),
        "+BUMPED 3\r\n",
        "node 0 (epoch 1) does not hold the greatest epoch it knows (2)"
    );
    assert_eq!(
        run(&mut e1, &mut c1, &["CLUSTER", "BUMPEPOCH"]),
        "+STILL 2\r\n"
    );
}

#[test]
fn addslots_delslots_and_unserved_slots() {
    let mut e = engine(&NODES, 0);
    let mut c = client();
    let (k, _, s) = slot_keys();
    let ss = s.to_string();
    let next = (s + 1).to_string();
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "ADDSLOTS", &ss]),
        format!("-ERR Slot {s} is already busy\r\n")
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "DELSLOTS", &ss]),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "DELSLOTS", &ss]),
        format!("-ERR Slot {s} is already unassigned\r\n")
    );
    assert_eq!(
        run(&mut e, &mut c, &["GET", &k]),
        "-CLUSTERDOWN Hash slot not served\r\n"
    );
    let info = run(&mut e, &mut c, &["CLUSTER", "INFO"]);
    assert!(
        info.contains("cluster_state:fail\r\n")
            && info.contains("cluster_slots_assigned:16383\r\n")
    );
    assert_eq!(
        run(
            &mut e,
            &mut c,
            &["CLUSTER", "ADDSLOTSRANGE", &ss, &ss, &ss, &ss]
        ),
        format!("-ERR Slot {s} specified multiple times\r\n")
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "ADDSLOTSRANGE", &next, &ss]),
        format!("-ERR start slot number {next} is greater than end slot number {s}\r\n")
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "ADDSLOTSRANGE", &ss]),
        "-ERR wrong number of arguments for 'cluster|addslotsrange' command\r\n"
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "ADDSLOTS", "x"]),
        "-ERR Invalid or out of range slot\r\n"
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "ADDSLOTSRANGE", &ss, &ss]),
        "+OK\r\n"
    );
    assert_eq!(run(&mut e, &mut c, &["GET", &k]), "$-1\r\n");
    assert!(run(&mut e, &mut c, &["CLUSTER", "INFO"]).contains("cluster_state:ok\r\n"));
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "SET-CONFIG-EPOCH", "5"]),
        "-ERR The user can assign a config epoch only when the node does not know any other node.\r\n"
    );
}

#[test]
fn meet_forget_and_the_nodes_file() {
    let mut e = engine(&NODES, 0);
    let mut c = client();
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "MEET", "127.0.0.1", "7002"]),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "MEET", "127.0.0.1", "7002"]),
        "+OK\r\n"
    );
    let id2 = node_id("127.0.0.1:7002");
    let nodes = bulk_text(&run(&mut e, &mut c, &["CLUSTER", "NODES"]));
    assert_eq!(nodes.matches('\n').count(), 3, "{nodes}");
    assert!(nodes.contains(&format!("{id2} 127.0.0.1:7002@0 master - 0 ")));
    // Give node 2 a slot, open another, and read it all back from the nodes file.
    let (_, _, s) = slot_keys();
    let ss = s.to_string();
    let s2 = (s + 1).to_string();
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "SETSLOT", &ss, "NODE", &id2]),
        "+OK\r\n"
    );
    assert_eq!(
        run(
            &mut e,
            &mut c,
            &["CLUSTER", "SETSLOT", &s2, "MIGRATING", &id2]
        ),
        "+OK\r\n"
    );
    let conf = e.cluster().to_conf();
    assert!(
        conf.ends_with("vars currentEpoch 2 lastVoteEpoch 0\n"),
        "{conf}"
    );
    let mut again = engine(&NODES, 0);
    again.load_cluster_conf(&conf).unwrap();
    assert_eq!(again.cluster().to_conf(), conf);
    assert!(again.cluster().open_slots());
    // The file of another node is refused without a change.
    let mut other = engine(&NODES, 1);
    let before = other.cluster().to_conf();
    assert!(
        other
            .load_cluster_conf(&conf)
            .unwrap_err()
            .contains("but this engine is")
    );
    assert_eq!(other.cluster().to_conf(), before);
    // A new node's file: every node and owner, no slot of its own, epoch 0.
    let new = conf::conf_for_new_node(&nodes, "127.0.0.1:7003").unwrap();
    let mut e3 = engine(&["127.0.0.1:7003"], 0);
    e3.load_cluster_conf(&new).unwrap();
    let mut c3 = client();
    let n3 = bulk_text(&run(&mut e3, &mut c3, &["CLUSTER", "NODES"]));
    assert!(
        n3.contains("127.0.0.1:7003@0 myself,master - 0 0 0 connected\n"),
        "{n3}"
    );
    assert_eq!(n3.matches('\n').count(), 4);
    assert!(conf::conf_for_new_node(&nodes, "127.0.0.1:7002").is_err());
    // FORGET: the node's slots are unassigned, its open slots closed.
    assert_eq!(run(&mut e, &mut c, &["CLUSTER", "FORGET", &id2]), "+OK\r\n");
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "FORGET", &id2]),
        format!("-ERR Unknown node {id2}\r\n")
    );
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "FORGET", &node_id(NODES[0])]),
        "-ERR I tried hard but I can't forget myself...\r\n"
    );
    assert!(!e.cluster().open_slots());
    assert!(run(&mut e, &mut c, &["CLUSTER", "INFO"]).contains("cluster_slots_assigned:16383\r\n"));
}

#[test]
fn the_slot_index_follows_later_inserts() {
    let mut e = engine(&NODES, 0);
    let mut c = client();
    let (k1, k2, s) = slot_keys();
    let ss = s.to_string();
    run(&mut e, &mut c, &["SET", &k1, "v"]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &ss, "10"]),
        format!("*1\r\n${}\r\n{k1}\r\n", k1.len())
    );
    // Built now; a key added afterwards (and one renamed in) is listed too.
    run(&mut e, &mut c, &["SET", "{x}tmp", "v"]);
    run(&mut e, &mut c, &["RENAME", "{x}tmp", &k2]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":2\r\n",
        "RENAME into the slot"
    );
    run(&mut e, &mut c, &["DEL", &k1]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &ss, "10"]),
        format!("*1\r\n${}\r\n{k2}\r\n", k2.len())
    );
    // Other databases have their own keys (SELECT is allowed on cluster engines).
    run(&mut e, &mut c, &["SELECT", "1"]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":0\r\n"
    );
    run(&mut e, &mut c, &["FLUSHALL"]);
    run(&mut e, &mut c, &["SELECT", "0"]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":0\r\n"
    );
}

/// `SLOTKEYSBUILD count` (reply.rs): the slot indexes of every database listed in steps, the
/// reply counting the keys still to list; what the steps missed meanwhile (keys inserted,
/// removed, or a step left unfinished) reads right through GETKEYSINSLOT.
#[test]
fn slotkeysbuild_lists_every_database_in_steps() {
    let mut e = engine(&NODES, 0);
    let mut c = client();
    let (k1, _, s) = slot_keys();
    let ss = s.to_string();
    // Keys this node owns: k1's hash tag, so all in slot `s`.
    let tag = &k1[..k1.len() - 1];
    for i in 0..30 {
        assert_eq!(
            run(&mut e, &mut c, &["SET", &format!("{tag}x{i}"), "v"]),
            "+OK\r\n"
        );
    }
    run(&mut e, &mut c, &["SELECT", "2"]);
    for i in 0..20 {
        assert_eq!(
            run(&mut e, &mut c, &["SET", &format!("{tag}y{i}"), "v"]),
            "+OK\r\n"
        );
    }
    assert_eq!(run(&mut e, &mut c, &["SLOTKEYSBUILD", "25"]), ":25\r\n");
    // Between steps: a key of the slot inserted in db 2, one of db 0 deleted.
    run(&mut e, &mut c, &["SET", &k1, "v"]);
    run(&mut e, &mut c, &["SELECT", "0"]);
    run(&mut e, &mut c, &["DEL", &format!("{tag}x29")]);
    // db 0 finishes its 5; db 2 lists 5 of its 20 (k1 sits above its walk: listed already).
    assert_eq!(run(&mut e, &mut c, &["SLOTKEYSBUILD", "10"]), ":15\r\n");
    // Left unfinished: the first GETKEYSINSLOT finishes the walk of its database.
    run(&mut e, &mut c, &["SELECT", "2"]);
    assert!(
        run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &ss, "100"]).starts_with("*21\r\n"),
        "db 2's 20 keys and k1"
    );
    assert_eq!(run(&mut e, &mut c, &["SLOTKEYSBUILD", "1000"]), ":0\r\n");
    run(&mut e, &mut c, &["SELECT", "0"]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &ss]),
        ":29\r\n",
        "db 0's keys but the deleted one, each once"
    );
    assert_eq!(
        run(&mut e, &mut c, &["SLOTKEYSBUILD", "0"]),
        "-ERR SLOTKEYSBUILD count must be a positive integer\r\n"
    );
    let mut standalone = Engine::new(Config::default());
    assert_eq!(
        run(&mut standalone, &mut c, &["SLOTKEYSBUILD", "10"]),
        "-ERR This instance has cluster support disabled\r\n"
    );
}

/// `SLOTHOLD` (hold.rs): while the mover holds a migrating slot, a request that would get
/// `-ASK` is postponed (keys still here run), a `BYPASS` connection gets Redis's `-ASK`, and
/// the slot's `SETSLOT NODE` wakes the postponed connection, whose request then gets `-MOVED`.
/// A hold also ends with its holder's connection and at its timeout.
#[test]
fn a_held_slot_postpones_what_would_be_asked() {
    let mut e0 = engine(&NODES, 0);
    let (k1, k2, s) = slot_keys();
    let id1 = node_id(NODES[1]);
    let ss = s.to_string();
    let with_id = |id| Client { id, ..client() };
    let (mut mover, mut app, mut proxy) = (with_id(1), with_id(2), with_id(3));
    let now = 1_700_000_000_000_000u64;
    let exec = |e: &mut Engine, c: &mut Client, args: &[&str], now: u64| {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        let flow = e.exec(c, &argv, now, &mut out);
        (flow, String::from_utf8_lossy(&out).into_owned())
    };
    assert_eq!(run(&mut e0, &mut mover, &["SET", &k1, "v"]), "+OK\r\n");
    // Only a slot migrating from here can be held.
    assert_eq!(
        run(&mut e0, &mut mover, &["SLOTHOLD", &ss, "1000"]),
        format!("-ERR hash slot {s} is not migrating from this node\r\n")
    );
    assert_eq!(
        run(&mut e0, &mut mover, &["SLOTHOLD", &ss, "10001"]),
        "-ERR SLOTHOLD timeout must be an integer of milliseconds from 0 to 10000\r\n"
    );
    assert_eq!(
        run(
            &mut e0,
            &mut mover,
            &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut mover, &["SLOTHOLD", &ss, "1000"]),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut app, &["SLOTHOLD", &ss, "1000"]),
        format!("-ERR hash slot {s} is held by another connection\r\n")
    );
    assert_eq!(run(&mut e0, &mut proxy, &["SLOTHOLD", "BYPASS"]), "+OK\r\n");
    // A key still here is served; one already gone waits (or is asked for, bypassing).
    assert_eq!(run(&mut e0, &mut app, &["GET", &k1]), "$1\r\nv\r\n");
    assert_eq!(
        exec(&mut e0, &mut app, &["GET", &k2], now),
        (Flow::Postpone, String::new())
    );
    assert_eq!(
        run(&mut e0, &mut proxy, &["GET", &k2]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
    assert!(!e0.has_deliveries());
    // The move ends: the postponed connection is woken and its request goes to the owner.
    assert_eq!(run(&mut e0, &mut mover, &["DEL", &k1]), ":1\r\n");
    assert_eq!(
        run(
            &mut e0,
            &mut mover,
            &["CLUSTER", "SETSLOT", &ss, "NODE", &id1]
        ),
        "+OK\r\n"
    );
    let mut woken = Vec::new();
    e0.take_deliveries(&mut woken);
    assert_eq!(woken.len(), 1);
    assert!(woken[0].unblock && woken[0].client_id == 2);
    assert_eq!(
        run(&mut e0, &mut app, &["GET", &k2]),
        format!("-MOVED {s} 127.0.0.1:7001\r\n")
    );
    // A hold ends with its holder's connection, and at its timeout.
    let mut e0 = engine(&NODES, 0);
    for c in [&mut mover, &mut app] {
        c.cluster = Default::default();
    }
    run(
        &mut e0,
        &mut mover,
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1],
    );
    assert_eq!(
        run(&mut e0, &mut mover, &["SLOTHOLD", &ss, "1000"]),
        "+OK\r\n"
    );
    assert_eq!(
        exec(&mut e0, &mut app, &["GET", &k2], now).0,
        Flow::Postpone
    );
    e0.client_closed(1);
    let mut woken = Vec::new();
    e0.take_deliveries(&mut woken);
    assert_eq!(woken.len(), 1);
    assert_eq!(
        run(&mut e0, &mut app, &["GET", &k2]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
    assert_eq!(
        run(&mut e0, &mut app, &["SLOTHOLD", &ss, "1000"]),
        "+OK\r\n"
    );
    assert_eq!(
        exec(&mut e0, &mut mover, &["GET", &k2], now).0,
        Flow::Postpone
    );
    // 1000 ms later (the test engine's clock is `now`).
    let (flow, reply) = exec(&mut e0, &mut mover, &["GET", &k2], now + 1_000_000);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(reply, format!("-ASK {s} 127.0.0.1:7001\r\n"));
}

/// EXEC checks its queued commands again, as redis `getNodeByQuery` does: a slot that moved
/// after a command was queued makes EXEC answer the redirect and drops the transaction, so
/// none of it runs (the proxy then runs it again on the new owners).
#[test]
fn exec_refuses_a_transaction_whose_slot_moved_after_queueing() {
    let mut e0 = engine(&NODES, 0);
    let mut c = client();
    let (k1, k2, s) = slot_keys();
    let other = (0..)
        .map(|i| format!("other{i}"))
        .find(|k| slot::instance_for_key(k.as_bytes(), 2) == 0 && slot::key_slot(k.as_bytes()) != s)
        .unwrap();
    let id1 = node_id(NODES[1]);
    let ss = s.to_string();
    assert_eq!(run(&mut e0, &mut c, &["SET", &k1, "old"]), "+OK\r\n");
    assert_eq!(run(&mut e0, &mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(run(&mut e0, &mut c, &["SET", &other, "x"]), "+QUEUED\r\n");
    assert_eq!(run(&mut e0, &mut c, &["SET", &k2, "new"]), "+QUEUED\r\n");
    // k2's slot moves away (k1, also in it, went with it) before EXEC.
    let mut mover = client();
    assert_eq!(run(&mut e0, &mut mover, &["DEL", &k1]), ":1\r\n");
    assert_eq!(
        run(
            &mut e0,
            &mut mover,
            &["CLUSTER", "SETSLOT", &ss, "NODE", &id1]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e0, &mut c, &["EXEC"]),
        format!("-MOVED {s} 127.0.0.1:7001\r\n")
    );
    // Nothing ran, and the transaction is gone.
    assert_eq!(run(&mut e0, &mut c, &["GET", &other]), "$-1\r\n");
    assert_eq!(
        run(&mut e0, &mut c, &["EXEC"]),
        "-ERR EXEC without MULTI\r\n"
    );
    // Migrating, the key moved after it was queued: -ASK; with the key still here, EXEC runs.
    let mut e0 = engine(&NODES, 0);
    run(&mut e0, &mut mover, &["SET", &k1, "here"]);
    run(
        &mut e0,
        &mut mover,
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1],
    );
    assert_eq!(run(&mut e0, &mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(run(&mut e0, &mut c, &["SET", &other, "x"]), "+QUEUED\r\n");
    assert_eq!(run(&mut e0, &mut c, &["GET", &k1]), "+QUEUED\r\n");
    assert_eq!(run(&mut e0, &mut mover, &["DEL", &k1]), ":1\r\n");
    assert_eq!(
        run(&mut e0, &mut c, &["EXEC"]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
    assert_eq!(run(&mut e0, &mut c, &["GET", &other]), "$-1\r\n");
    run(&mut e0, &mut mover, &["CLUSTER", "SETSLOT", &ss, "STABLE"]);
    run(&mut e0, &mut mover, &["SET", &k1, "here"]);
    run(
        &mut e0,
        &mut mover,
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1],
    );
    assert_eq!(run(&mut e0, &mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(run(&mut e0, &mut c, &["GET", &k1]), "+QUEUED\r\n");
    assert_eq!(run(&mut e0, &mut c, &["EXEC"]), "*1\r\n$4\r\nhere\r\n");
}

/// A client parked on a key whose slot then moves away is answered `-MOVED` to the new owner
/// at the next cron tick and unblocked (redis `clusterRedirectBlockedClientIfNeeded`); one
/// parked on a slot being imported here keeps waiting.
#[test]
fn a_parked_client_whose_slot_moved_away_gets_moved() {
    let mut e0 = engine(&NODES, 0);
    let (k1, _, s) = slot_keys();
    let id1 = node_id(NODES[1]);
    let ss = s.to_string();
    let now = 1_700_000_000_000_000u64;
    let mut blocked = Client { id: 7, ..client() };
    let argv: Vec<&[u8]> = vec![b"BLPOP", k1.as_bytes(), b"0"];
    let mut out = Vec::new();
    assert_eq!(e0.exec(&mut blocked, &argv, now, &mut out), Flow::Block);
    let mut admin = Client { id: 8, ..client() };
    // Imported back here: still waiting.
    run(
        &mut e0,
        &mut admin,
        &["CLUSTER", "SETSLOT", &ss, "NODE", &id1],
    );
    run(
        &mut e0,
        &mut admin,
        &["CLUSTER", "SETSLOT", &ss, "IMPORTING", &id1],
    );
    e0.cron(now);
    let mut got = Vec::new();
    e0.take_deliveries(&mut got);
    assert!(got.is_empty(), "{got:?}");
    // Served elsewhere: -MOVED, unblocked.
    run(&mut e0, &mut admin, &["CLUSTER", "SETSLOT", &ss, "STABLE"]);
    e0.cron(now);
    e0.take_deliveries(&mut got);
    assert_eq!(got.len(), 1);
    assert!(got[0].unblock && got[0].client_id == 7);
    assert_eq!(
        String::from_utf8_lossy(&got[0].bytes),
        format!("-MOVED {s} 127.0.0.1:7001\r\n")
    );
    assert_eq!(e0.blocking.len(), 0);
}

/// The relay of `recached resize` (supervisor `slotmove_relay.rs`) on the source: the batch's
/// keys are locked and read in one step, another connection's command on one of them waits
/// (a key outside the batch is served), and once `SLOTHANDOFF` has deleted them and the lock
/// is gone, the waiting command runs again and is asked to go to the new owner.
#[test]
fn a_relayed_batch_postpones_its_keys_then_asks_for_them() {
    let mut e0 = engine(&NODES, 0);
    let (k1, k2, s) = slot_keys();
    let ss = s.to_string();
    let id1 = node_id(NODES[1]);
    let with_id = |id| Client { id, ..client() };
    let (mut mover, mut app) = (with_id(1), with_id(2));
    let now = 1_700_000_000_000_000u64;
    assert_eq!(run(&mut e0, &mut mover, &["SET", &k1, "v"]), "+OK\r\n");
    assert_eq!(run(&mut e0, &mut mover, &["SET", &k2, "w"]), "+OK\r\n");
    run(
        &mut e0,
        &mut mover,
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &id1],
    );
    let locked = run(
        &mut e0,
        &mut mover,
        &["TXLOCK", "5000", "KEYS", "1", &k1, "DUMP"],
    );
    assert!(locked.starts_with("*3\r\n:0\r\n$"), "{locked:?}");
    let mut out = Vec::new();
    let get: [&[u8]; 2] = [b"GET", k1.as_bytes()];
    assert_eq!(e0.exec(&mut app, &get, now, &mut out), Flow::Postpone);
    assert!(out.is_empty());
    assert_eq!(run(&mut e0, &mut app, &["GET", &k2]), "$1\r\nw\r\n");
    assert_eq!(run(&mut e0, &mut mover, &["SLOTHANDOFF", &k1]), ":1\r\n");
    // Like any command of a migrating slot, one whose keys are all gone is asked elsewhere
    // (so the mover names only keys it read).
    assert_eq!(
        run(&mut e0, &mut mover, &["SLOTHANDOFF", &k1]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
    assert_eq!(run(&mut e0, &mut mover, &["TXUNLOCK"]), "+OK\r\n");
    let mut woken = Vec::new();
    e0.take_deliveries(&mut woken);
    assert!(woken.iter().any(|d| d.unblock && d.client_id == 2));
    assert_eq!(
        run(&mut e0, &mut app, &["GET", &k1]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
    // A key outside any batch can still be handed off; then it is asked for too.
    assert_eq!(run(&mut e0, &mut mover, &["SLOTHANDOFF", &k2]), ":1\r\n");
    assert_eq!(
        run(&mut e0, &mut app, &["GET", &k2]),
        format!("-ASK {s} 127.0.0.1:7001\r\n")
    );
}
