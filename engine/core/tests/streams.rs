//! Streams through `Engine::exec`: blocking XREAD/XREADGROUP (wake by XADD, `$` fixed when
//! blocking, FIFO order, timeouts in RESP2/RESP3, CLIENT UNBLOCK, disconnects, MULTI/EXEC,
//! deletion and type change while blocked, XGROUP DESTROY), a consumer group whose consumer
//! dies mid-read losing nothing, memory accounting, and keyspace notifications. Exact replies
//! of the non-blocking paths are compared with redis-server in `tests/diff/streams.txt`.

use engine_core::{Flow, Proto};

mod common;

use common::{T0, World, unblock};

/// INFO clients, as client 1.
fn blocked(w: &mut World) -> String {
    w.cmd(1, "INFO clients")
}

/// `[[key, [[id, [f, v]]]]]` in RESP2.
fn one_entry(key: &str, id: &str, f: &str, v: &str) -> String {
    format!(
        "*1\r\n*2\r\n${}\r\n{key}\r\n*1\r\n*2\r\n${}\r\n{id}\r\n*2\r\n${}\r\n{f}\r\n${}\r\n{v}\r\n",
        key.len(),
        id.len(),
        f.len(),
        v.len()
    )
}

#[test]
fn xread_block_dollar_is_fixed_when_blocking() {
    let mut w = World::new(2);
    w.cmd(1, "XADD s 5-0 f old");
    w.park(2, "XREAD BLOCK 0 STREAMS s $");
    // A write that does not add past the ID the client saw wakes nobody.
    w.cmd(1, "XDEL s 5-0");
    assert!(w.deliveries().is_empty());
    w.cmd(1, "XADD s 6-0 f new");
    assert_eq!(
        w.deliveries(),
        [unblock(2, &one_entry("s", "6-0", "f", "new"))]
    );
    assert!(blocked(&mut w).contains("blocked_clients:0\r\n"));
}

#[test]
fn xread_block_on_a_missing_stream_waits_for_its_creation() {
    let mut w = World::new(2);
    w.park(2, "XREAD BLOCK 0 STREAMS nosuch $");
    w.cmd(1, "LPUSH other x");
    assert!(w.deliveries().is_empty());
    w.cmd(1, "XADD nosuch 1-1 a b");
    assert_eq!(
        w.deliveries(),
        [unblock(2, &one_entry("nosuch", "1-1", "a", "b"))]
    );
}

#[test]
fn xread_waiters_are_woken_first_come_first_served_and_all_see_the_entry() {
    let mut w = World::new(4);
    w.cmd(1, "XADD s 1-0 f v");
    w.park(2, "XREAD BLOCK 0 STREAMS s 1-0");
    w.park(3, "XREAD BLOCK 0 STREAMS s $");
    w.park(4, "XREAD COUNT 5 BLOCK 0 STREAMS s 1-0");
    w.cmd(1, "XADD s 2-0 f w");
    let d = w.deliveries();
    assert_eq!(
        d.iter().map(|d| d.client_id).collect::<Vec<_>>(),
        [2, 3, 4],
        "in the order they blocked"
    );
    for x in d {
        assert_eq!(x.bytes, one_entry("s", "2-0", "f", "w").into_bytes());
    }
}

#[test]
fn xreadgroup_waiters_share_entries_without_duplicates_in_fifo_order() {
    let mut w = World::new(4);
    w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
    w.park(2, "XREADGROUP GROUP g alice COUNT 1 BLOCK 0 STREAMS s >");
    w.park(3, "XREADGROUP GROUP g bob COUNT 1 BLOCK 0 STREAMS s >");
    // MULTI: both entries arrive in one go; each waiter takes one, in order.
    w.cmd(1, "MULTI");
    w.cmd(1, "XADD s 1-0 f a");
    w.cmd(1, "XADD s 2-0 f b");
    w.cmd(1, "EXEC");
    assert_eq!(
        w.deliveries(),
        [
            unblock(2, &one_entry("s", "1-0", "f", "a")),
            unblock(3, &one_entry("s", "2-0", "f", "b")),
        ]
    );
    assert_eq!(
        w.cmd(1, "XPENDING s g - + 10"),
        "*2\r\n*4\r\n$3\r\n1-0\r\n$5\r\nalice\r\n:0\r\n:1\r\n*4\r\n$3\r\n2-0\r\n$3\r\nbob\r\n:0\r\n:1\r\n"
    );
}

#[test]
fn timeouts_answer_a_null_array_in_each_protocol() {
    let mut w = World::new(3);
    w.clients[2].proto = Proto::Resp3;
    w.park(2, "XREAD BLOCK 200 STREAMS s $");
    w.park(3, "XREAD BLOCK 500 STREAMS t 0");
    assert_eq!(w.engine.next_deadline_us(), Some(T0 + 200_000));
    w.engine.timeouts(T0 + 199_999);
    assert!(w.deliveries().is_empty());
    w.engine.timeouts(T0 + 200_000);
    assert_eq!(w.deliveries(), [unblock(2, "*-1\r\n")]);
    w.engine.timeouts(T0 + 500_000);
    assert_eq!(w.deliveries(), [unblock(3, "_\r\n")]);
    assert_eq!(w.engine.next_deadline_us(), None);
}

#[test]
fn block_argument_errors_reply_without_parking() {
    let mut w = World::new(1);
    assert_eq!(
        w.cmd(1, "XREAD BLOCK -1 STREAMS s $"),
        "-ERR timeout is negative\r\n"
    );
    assert_eq!(
        w.cmd(1, "XREAD BLOCK 1.5 STREAMS s $"),
        "-ERR timeout is not an integer or out of range\r\n"
    );
    assert_eq!(
        w.cmd(1, "XREADGROUP GROUP g c BLOCK 0 STREAMS s >"),
        "-NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option\r\n"
    );
    assert!(blocked(&mut w).contains("blocked_clients:0\r\n"));
}

#[test]
fn client_unblock_with_timeout_or_error() {
    let mut w = World::new(3);
    w.park(2, "XREAD BLOCK 0 STREAMS s $");
    w.park(3, "XREAD BLOCK 0 STREAMS s $");
    assert_eq!(w.cmd(1, "CLIENT UNBLOCK 2"), ":1\r\n");
    assert_eq!(w.deliveries(), [unblock(2, "*-1\r\n")]);
    assert_eq!(w.cmd(1, "CLIENT UNBLOCK 3 ERROR"), ":1\r\n");
    assert_eq!(
        w.deliveries(),
        [unblock(
            3,
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
        )]
    );
    assert_eq!(w.cmd(1, "CLIENT UNBLOCK 3"), ":0\r\n");
    assert_eq!(
        w.cmd(1, "CLIENT UNBLOCK 3 FOO"),
        "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n"
    );
    assert!(blocked(&mut w).contains("blocked_clients:0\r\n"));
}

#[test]
fn a_disconnected_reader_is_forgotten_and_takes_nothing() {
    let mut w = World::new(3);
    w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
    w.park(2, "XREADGROUP GROUP g dead BLOCK 0 STREAMS s >");
    w.park(3, "XREADGROUP GROUP g live BLOCK 0 STREAMS s >");
    w.engine.client_closed(2);
    w.cmd(1, "XADD s 1-0 f v");
    assert_eq!(
        w.deliveries(),
        [unblock(3, &one_entry("s", "1-0", "f", "v"))]
    );
    // The dead consumer never existed: nothing is pending for it.
    assert_eq!(
        w.cmd(1, "XPENDING s g"),
        "*4\r\n:1\r\n$3\r\n1-0\r\n$3\r\n1-0\r\n*1\r\n*2\r\n$4\r\nlive\r\n$1\r\n1\r\n"
    );
}

#[test]
fn xreadgroup_is_told_when_its_stream_or_group_goes_away() {
    let mut w = World::new(2);
    for (change, err) in [
        ("DEL s", "-UNBLOCKED the stream key no longer exists\r\n"),
        ("SET s x", "-UNBLOCKED the stream key no longer exists\r\n"),
        ("FLUSHALL", "-UNBLOCKED the stream key no longer exists\r\n"),
        (
            "XGROUP DESTROY s g",
            "-NOGROUP the consumer group this client was blocked on no longer exists\r\n",
        ),
    ] {
        w.cmd(1, "DEL s");
        w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
        w.park(2, "XREADGROUP GROUP g c BLOCK 0 STREAMS s >");
        w.cmd(1, change);
        assert_eq!(w.deliveries(), [unblock(2, err)], "{change}");
    }
    // XREAD keeps waiting through a deletion and is served by the new stream.
    w.cmd(1, "DEL s");
    w.cmd(1, "XADD s 5-0 f v");
    w.park(2, "XREAD BLOCK 0 STREAMS s $");
    w.cmd(1, "DEL s");
    w.cmd(1, "SET s x");
    w.cmd(1, "DEL s");
    assert!(w.deliveries().is_empty());
    w.cmd(1, "XADD s 6-0 f v");
    assert_eq!(
        w.deliveries(),
        [unblock(2, &one_entry("s", "6-0", "f", "v"))]
    );
}

#[test]
fn inside_exec_block_answers_at_once() {
    let mut w = World::new(1);
    w.cmd(1, "MULTI");
    w.cmd(1, "XREAD BLOCK 0 STREAMS s $");
    assert_eq!(w.cmd(1, "EXEC"), "*1\r\n*-1\r\n");
    assert!(blocked(&mut w).contains("blocked_clients:0\r\n"));
}

#[test]
fn a_blocked_xread_without_count_reads_at_most_1000() {
    let mut w = World::new(2);
    w.park(2, "XREAD BLOCK 0 STREAMS s 0");
    w.cmd(1, "MULTI");
    for i in 1..=1005 {
        w.cmd(1, &format!("XADD s {i}-0 f v"));
    }
    w.cmd(1, "EXEC");
    let d = w.deliveries();
    assert_eq!(d.len(), 1);
    let text = String::from_utf8(d[0].bytes.clone()).unwrap();
    assert!(text.contains("*1000\r\n"), "{}", &text[..80]);
    assert!(!text.contains("1001-0"));
}

/// A consumer group with several consumers, one of which dies mid-read (its connection
/// closed while parked, or after reading without acknowledging): every entry is delivered
/// once and then acknowledged or pending, none is lost.
#[test]
fn consumers_crashing_lose_no_entry() {
    let mut w = World::new(4);
    w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
    let ids_in = |text: &str| -> Vec<String> {
        text.split("\r\n")
            .filter(|p| p.contains('-') && p.starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut acked = 0usize;
    let mut take = |w: &mut World, client: u64, text: &str| {
        for id in ids_in(text) {
            assert!(!seen.contains(&id), "{id} delivered twice");
            seen.push(id.clone());
            // c2 acknowledges what it read; c3 never does (it "crashes" after reading).
            if client == 2 {
                assert_eq!(w.cmd(1, &format!("XACK s g {id}")), ":1\r\n");
                acked += 1;
            }
        }
    };
    for round in 0..50u64 {
        for client in [2, 3] {
            let line = format!("XREADGROUP GROUP g c{client} COUNT 2 BLOCK 0 STREAMS s >");
            let (flow, out) = w.run(client, &line);
            if flow == Flow::Continue {
                take(&mut w, client, &out);
            }
        }
        if round % 5 == 0 {
            w.engine.client_closed(3); // dies while parked
        }
        for k in 0..3 {
            w.cmd(1, &format!("XADD s {}-{k} f v", round + 1));
        }
        for d in w.deliveries() {
            take(&mut w, d.client_id, &String::from_utf8(d.bytes).unwrap());
        }
    }
    w.engine.client_closed(2);
    w.engine.client_closed(3);
    // Whatever nobody read is picked up with `>` by a survivor.
    let rest = w.cmd(4, "XREADGROUP GROUP g c4 STREAMS s >");
    let fresh = ids_in(&rest).len();
    // XPENDING's summary starts `*4\r\n:<count>`.
    let summary = w.cmd(1, "XPENDING s g");
    let pending: usize = summary.split("\r\n").nth(1).unwrap()[1..].parse().unwrap();
    assert_eq!(w.cmd(1, "XLEN s"), ":150\r\n");
    assert_eq!(seen.len() + fresh, 150, "every entry was delivered once");
    assert_eq!(
        acked + pending,
        150,
        "every delivered entry is acknowledged or pending"
    );
    // The crashed consumer's entries can be claimed by a survivor.
    let claimed = w.cmd(4, "XAUTOCLAIM s g c4 0 0 COUNT 1000 JUSTID");
    assert!(claimed.starts_with("*3\r\n$3\r\n0-0\r\n"), "{claimed}");
    assert_eq!(
        ids_in(&claimed).len(),
        pending + 1,
        "all pending, and the 0-0 cursor"
    );
}

#[test]
fn memory_is_accounted_and_returns_when_emptied() {
    let mut w = World::new(1);
    let used = |w: &mut World| w.engine.dataset_bytes();
    let base = used(&mut w);
    w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
    let empty = used(&mut w);
    for i in 1..=500 {
        w.cmd(1, &format!("XADD s {i}-0 field value{i} other x"));
    }
    let full = used(&mut w);
    assert!(full > empty + 500 * 10, "{full} vs {empty}");
    assert!(
        full < empty + 500 * 80,
        "about Redis's bytes per entry: {}",
        (full - empty) / 500
    );
    w.cmd(1, "XREADGROUP GROUP g c STREAMS s >");
    let with_pel = used(&mut w);
    assert!(with_pel > full);
    w.cmd(1, "XGROUP DELCONSUMER s g c");
    assert_eq!(used(&mut w), full, "the PEL's bytes are given back");
    w.cmd(1, "XTRIM s MAXLEN 0");
    assert_eq!(
        used(&mut w),
        empty,
        "trimmed to nothing: the empty stream's bytes"
    );
    w.cmd(1, "DEL s");
    assert_eq!(used(&mut w), base);
}

#[test]
fn type_encoding_and_scan_type() {
    let mut w = World::new(1);
    w.cmd(1, "XADD s 1-0 f v");
    w.cmd(1, "SET k v");
    assert_eq!(w.cmd(1, "TYPE s"), "+stream\r\n");
    assert_eq!(w.cmd(1, "OBJECT ENCODING s"), "$6\r\nstream\r\n");
    assert_eq!(
        w.cmd(1, "SCAN 0 TYPE stream"),
        "*2\r\n$1\r\n0\r\n*1\r\n$1\r\ns\r\n"
    );
}

/// Random stream commands over random words (the fuzz target's idea, here run on every
/// test): nothing panics, and each command writes exactly one reply or parks.
#[test]
fn random_arguments_never_panic() {
    const NAMES: &[&str] = &[
        "XADD",
        "XRANGE",
        "XREVRANGE",
        "XLEN",
        "XDEL",
        "XTRIM",
        "XSETID",
        "XREAD",
        "XREADGROUP",
        "XGROUP",
        "XACK",
        "XPENDING",
        "XCLAIM",
        "XAUTOCLAIM",
        "XINFO",
        // Valid beginnings, so the random tail reaches past argument checks.
        "XADD s * f v",
        "XADD t 5-* f v",
        "XGROUP CREATE s g $ MKSTREAM",
        "XGROUP CREATE t g 0",
        "XREADGROUP GROUP g c STREAMS s >",
        "XREADGROUP GROUP g c COUNT 2 STREAMS s t > 0",
        "XREAD STREAMS s t 0",
        "XCLAIM s g c 0",
        "XAUTOCLAIM s g c 0",
        "XPENDING s g - + 10",
        "XINFO STREAM s",
        "XTRIM s MAXLEN ~",
        "XREADGROUP GROUP g c BLOCK 10 STREAMS s >",
        "XREAD BLOCK 10 STREAMS s $",
    ];
    const WORDS: &[&str] = &[
        "s",
        "t",
        "g",
        "c",
        "0",
        "1",
        "-1",
        "5-*",
        "1-1",
        "0-0",
        "(1-1",
        "(",
        "-",
        "+",
        "$",
        ">",
        "*",
        "~",
        "=",
        "MAXLEN",
        "MINID",
        "LIMIT",
        "NOMKSTREAM",
        "COUNT",
        "BLOCK",
        "STREAMS",
        "GROUP",
        "NOACK",
        "CREATE",
        "SETID",
        "DESTROY",
        "CREATECONSUMER",
        "DELCONSUMER",
        "HELP",
        "MKSTREAM",
        "ENTRIESREAD",
        "ENTRIESADDED",
        "MAXDELETEDID",
        "IDLE",
        "TIME",
        "RETRYCOUNT",
        "FORCE",
        "JUSTID",
        "LASTID",
        "FULL",
        "STREAM",
        "GROUPS",
        "CONSUMERS",
        "f",
        "v",
        "18446744073709551615-18446744073709551615",
        "18446744073709551615",
        "9223372036854775807",
    ];
    let mut w = World::new(3);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut parked = [false; 3];
    for step in 0..30_000 {
        let who = 1 + next(3);
        if parked[who - 1] {
            if next(4) == 0 {
                w.engine.client_closed(who as u64);
                parked[who - 1] = false;
            }
            continue;
        }
        let mut line = vec![NAMES[next(NAMES.len())]];
        for _ in 0..next(9) {
            line.push(WORDS[next(WORDS.len())]);
        }
        let line = line.join(" ");
        let (flow, out) = w.run(who as u64, &line);
        match flow {
            Flow::Block => {
                assert_eq!(out, "", "{line}");
                parked[who - 1] = true;
            }
            _ => assert!(out.ends_with("\r\n"), "{line}: {out:?}"),
        }
        if step % 100 == 0 {
            w.now_us += 50_000;
            w.engine.timeouts(w.now_us);
        }
        for d in w.deliveries() {
            if d.unblock {
                parked[d.client_id as usize - 1] = false;
            }
        }
    }
}

/// A parked command counts as one call of its command when it is answered, whether by a
/// re-run, a timeout or CLIENT UNBLOCK (redis `updateStatsOnUnblock`), and its error by code.
#[test]
fn parked_commands_count_once_when_answered() {
    let mut w = World::new(3);
    w.cmd(1, "XGROUP CREATE s g $ MKSTREAM");
    w.park(2, "XREADGROUP GROUP g c BLOCK 0 STREAMS s >");
    w.cmd(1, "XGROUP DESTROY s g");
    w.deliveries();
    w.park(3, "XREAD BLOCK 100 STREAMS s $");
    w.engine.timeouts(T0 + 100_000);
    w.deliveries();
    let stats = w.cmd(1, "INFO commandstats");
    assert!(
        stats.contains(
            "cmdstat_xreadgroup:calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1"
        ),
        "{stats}"
    );
    assert!(stats.contains("cmdstat_xread:calls=1,"), "{stats}");
    assert!(
        w.cmd(1, "INFO errorstats")
            .contains("errorstat_NOGROUP:count=1\r\n")
    );
}
