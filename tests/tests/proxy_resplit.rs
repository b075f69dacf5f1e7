//! Through the proxy, MGET / MSET / DEL / EXISTS / TOUCH over keys of several slots of one
//! engine keep working while one of those slots moves (issue 21; proxy/src/split.rs,
//! `per_slot`; docs/cluster.md, "Through the proxy").
//!
//! Two `recached server` engines in cluster mode and a `recached proxy` in front. Keys in
//! three slots A, B, S of engine 0 and one slot X of engine 1; slot S is put IMPORTING on
//! engine 1 and MIGRATING on engine 0 and some of its keys are MIGRATEd. Engine 0 then
//! refuses a batch over A, B and S (`-TRYAGAIN`: it lacks some of the keys), which the proxy
//! sends per slot; after the move ends (`SETSLOT … NODE`) it refuses it `-CROSSSLOT` (S is
//! elsewhere), sent per slot too. Through the proxy every MGET returns every value in key
//! order, EXISTS / TOUCH count every key, MSET sets every key on its owner, DEL deletes them
//! all, pipelined replies stay in order, and no reply is an error. Before the change, the
//! proxy retried the `-TRYAGAIN` for about a second, then passed it on.
//!
//! Processes are killed by PID when their guards drop; every wait is bounded.

mod common;

use common::*;
use std::time::Duration;

use engine_core::slot::{key_slot, slot_ranges};

/// A hash tag whose slot engine `engine` owns under the 2-engine map, not in `taken`.
fn tag_on(engine: u32, taken: &[u16]) -> String {
    let ranges = slot_ranges(2);
    (0..)
        .map(|i| format!("t{i}"))
        .find(|t| {
            let s = key_slot(t.as_bytes());
            !taken.contains(&s)
                && ranges
                    .iter()
                    .any(|&(a, b, o)| o == engine && (a..=b).contains(&s))
        })
        .unwrap()
}

/// `*n` of the bulk strings `values` ([`escape`]d, as [`cmd`] answers).
fn bulks(values: &[String]) -> String {
    let mut out = format!("*{}\\r\\n", values.len());
    for v in values {
        out.push_str(&format!("${}\\r\\n{v}\\r\\n", v.len()));
    }
    out
}

/// `cmd` with the keys appended.
fn with_keys<'a>(cmd: &'a str, keys: &'a [String]) -> Vec<&'a str> {
    let mut args = vec![cmd];
    args.extend(keys.iter().map(String::as_str));
    args
}

/// `GET key` on engine `port` after `ASKING` (a key of a slot importing there).
fn asking_get(port: u16, key: &str) -> String {
    let mut c = Resp::connect(port);
    assert_eq!(cmd(&mut c, &["ASKING"]), "+OK\\r\\n");
    cmd(&mut c, &["GET", key])
}

/// Two engines in cluster mode and a proxy reaching both: the cluster (dropped at the end),
/// the proxy's port, the engines' ports and node ids.
fn two_engines_and_a_proxy() -> (ClusterWithProxy, u16, (u16, u16), (String, String)) {
    let mut cl = ClusterWithProxy::start();
    let pport = cl.proxy_port;
    cl.proxy.wait_proxy_reaches_engines(pport, START_TIMEOUT);
    let ports: Vec<u16> = cl
        .nodes
        .split(',')
        .map(|a| a.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    let (e0, e1) = (ports[0], ports[1]);
    let id = |port| {
        let r = Resp::connect(port).cmd_str(&["CLUSTER", "MYID"]);
        let Value::Bulk(id) = parse_value(&r) else {
            panic!("CLUSTER MYID: {}", escape(&r));
        };
        String::from_utf8(id).unwrap()
    };
    let (id0, id1) = (id(e0), id(e1));
    (cl, pport, (e0, e1), (id0, id1))
}

#[test]
fn multi_key_commands_over_a_moving_slot_are_split_per_slot() {
    let (cl, pport, (e0, e1), (id0, id1)) = two_engines_and_a_proxy();

    let ta = tag_on(0, &[]);
    let tb = tag_on(0, &[key_slot(ta.as_bytes())]);
    let ts = tag_on(0, &[key_slot(ta.as_bytes()), key_slot(tb.as_bytes())]);
    let tx = tag_on(1, &[]);
    let keys =
        |tag: &str, n: usize| -> Vec<String> { (0..n).map(|i| format!("{{{tag}}}:{i}")).collect() };
    let (a, b, s, x) = (keys(&ta, 3), keys(&tb, 2), keys(&ts, 5), keys(&tx, 2));
    let value = |k: &str| format!("v-{k}");

    let mut c = Resp::connect(pport);
    for k in a.iter().chain(&b).chain(&s).chain(&x) {
        assert_eq!(cmd(&mut c, &["SET", k, &value(k)]), "+OK\\r\\n");
    }
    // No slot open: engine 0 runs a batch over its slots A and S.
    let mut direct = Resp::connect(e0);
    assert!(cmd(&mut direct, &["MGET", &a[0], &s[0]]).starts_with("*2"));

    // Slot S moves from engine 0 to engine 1; s[0] and s[1] are already there.
    let slot = key_slot(ts.as_bytes()).to_string();
    let setslot = |port, args: &[&str]| {
        let mut all = vec!["CLUSTER", "SETSLOT", &slot];
        all.extend_from_slice(args);
        assert_eq!(cmd(&mut Resp::connect(port), &all), "+OK\\r\\n");
    };
    setslot(e1, &["IMPORTING", &id0]);
    setslot(e0, &["MIGRATING", &id1]);
    let migrate = |ks: &[String]| {
        let p1 = e1.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &p1, "", "0", "5000", "KEYS"];
        args.extend(ks.iter().map(String::as_str));
        assert_eq!(cmd(&mut Resp::connect(e0), &args), "+OK\\r\\n");
    };
    migrate(&s[..2]);
    // What the proxy meets: engine 0 refuses the batch.
    let refused = cmd(&mut direct, &["MGET", &a[0], &s[0]]);
    assert!(refused.starts_with("-TRYAGAIN"), "{refused}");

    // All on engine 0 (forwarded whole), then split over both engines; each request's keys
    // of slot S are all on one side of the move.
    let mget = [
        a[0].clone(),
        s[0].clone(),
        b[0].clone(),
        s[1].clone(),
        a[1].clone(),
    ];
    let want: Vec<String> = mget.iter().map(|k| value(k)).collect();
    assert_eq!(cmd(&mut c, &with_keys("MGET", &mget)), bulks(&want));
    let split = [
        x[0].clone(),
        a[2].clone(),
        s[1].clone(),
        b[1].clone(),
        s[0].clone(),
    ];
    let want: Vec<String> = split.iter().map(|k| value(k)).collect();
    assert_eq!(cmd(&mut c, &with_keys("MGET", &split)), bulks(&want));
    let mut exists = split.to_vec();
    exists.push(format!("{{{ta}}}:none"));
    assert_eq!(cmd(&mut c, &with_keys("EXISTS", &exists)), ":5\\r\\n");

    // Every key, S's split across the move until a mover sends the rest 150 ms later: the
    // slot's own request is retried (TRYAGAIN) until then, the others are answered at once.
    let all: Vec<String> = a.iter().chain(&s).chain(&b).chain(&x).cloned().collect();
    let rest = s[2..].to_vec();
    let mover = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let p1 = e1.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &p1, "", "0", "5000", "KEYS"];
        args.extend(rest.iter().map(String::as_str));
        assert_eq!(cmd(&mut Resp::connect(e0), &args), "+OK\\r\\n");
    });
    let got = cmd(&mut c, &with_keys("MGET", &all));
    mover.join().unwrap();
    let want: Vec<String> = all.iter().map(|k| value(k)).collect();
    assert_eq!(got, bulks(&want));

    // S's keys are all on engine 1 now, the slot still open. MSET of every key, then of a
    // new key of S (engine 0 answers ASK for it) with keys of A and B: each on its owner.
    // (A new key of S together with other keys of S is refused by both engines until the
    // move ends, whatever the split: Redis's rule for a slot being imported.)
    let fresh = format!("{{{ts}}}:fresh");
    let news: Vec<(String, String)> = all
        .iter()
        .chain(std::iter::once(&fresh))
        .map(|k| (k.clone(), format!("n-{k}")))
        .collect();
    let mset = |pairs: &[(String, String)]| {
        let mut args = vec!["MSET"];
        for (k, v) in pairs {
            args.push(k);
            args.push(v);
        }
        cmd(&mut Resp::connect(pport), &args)
    };
    assert_eq!(mset(&news[..all.len()]), "+OK\\r\\n");
    let then: Vec<(String, String)> = news
        .iter()
        .filter(|(k, _)| *k == fresh || *k == a[2] || *k == b[1])
        .cloned()
        .collect();
    assert_eq!(mset(&then), "+OK\\r\\n");
    for (k, v) in &news {
        let on = if s.contains(k) || *k == fresh {
            asking_get(e1, k)
        } else if x.contains(k) {
            cmd(&mut Resp::connect(e1), &["GET", k])
        } else {
            cmd(&mut Resp::connect(e0), &["GET", k])
        };
        assert_eq!(
            on,
            format!("${}\\r\\n{v}\\r\\n", v.len()),
            "{k} on its owner"
        );
    }

    // Pipelined: the split requests' replies stay in request order.
    let mut batch = Vec::new();
    let enc = |args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        Resp::encode(&args)
    };
    batch.extend(enc(&with_keys("MGET", &all)));
    batch.extend(enc(&["GET", &x[1]]));
    batch.extend(enc(&with_keys("EXISTS", &all)));
    batch.extend(enc(&with_keys("TOUCH", &all)));
    batch.extend(enc(&["PING"]));
    c.send_raw(&batch);
    let want: Vec<String> = all.iter().map(|k| format!("n-{k}")).collect();
    assert_eq!(next(&mut c), bulks(&want));
    let vx = format!("n-{}", x[1]);
    assert_eq!(next(&mut c), format!("${}\\r\\n{vx}\\r\\n", vx.len()));
    assert_eq!(next(&mut c), format!(":{}\\r\\n", all.len()));
    assert_eq!(next(&mut c), format!(":{}\\r\\n", all.len()));
    assert_eq!(next(&mut c), "+PONG\\r\\n");

    // DEL of keys of A, S (moved and new), B and X: all deleted, on their owners too.
    let del = [
        a[0].clone(),
        s[0].clone(),
        b[0].clone(),
        fresh.clone(),
        s[3].clone(),
        x[0].clone(),
    ];
    assert_eq!(cmd(&mut c, &with_keys("DEL", &del)), ":6\\r\\n");
    assert_eq!(cmd(&mut Resp::connect(e0), &["GET", &a[0]]), "$-1\\r\\n");
    assert_eq!(cmd(&mut Resp::connect(e0), &["GET", &b[0]]), "$-1\\r\\n");
    assert_eq!(cmd(&mut Resp::connect(e1), &["GET", &x[0]]), "$-1\\r\\n");
    for k in [&s[0], &s[3], &fresh] {
        assert_eq!(asking_get(e1, k), "$-1\\r\\n", "{k}");
    }

    // The move ends: engine 0 now refuses a batch over A and S with CROSSSLOT (S is engine
    // 1's), which the proxy splits too, following S's MOVED.
    setslot(e1, &["NODE", &id1]);
    setslot(e0, &["NODE", &id1]);
    let refused = cmd(&mut Resp::connect(e0), &["MGET", &a[1], &s[1]]);
    assert!(refused.starts_with("-CROSSSLOT"), "{refused}");
    let keys = [a[1].clone(), s[1].clone(), b[1].clone(), s[2].clone()];
    let want: Vec<String> = keys.iter().map(|k| format!("n-{k}")).collect();
    assert_eq!(cmd(&mut c, &with_keys("MGET", &keys)), bulks(&want));
    assert_eq!(cmd(&mut c, &with_keys("EXISTS", &del)), ":0\\r\\n");
    assert_eq!(cmd(&mut c, &with_keys("UNLINK", &keys)), ":4\\r\\n");
    assert_eq!(cmd(&mut c, &with_keys("EXISTS", &all)), ":3\\r\\n");
    assert_eq!(
        cmd(&mut Resp::connect(e1), &["EXISTS", &s[1], &s[2]]),
        ":0\\r\\n"
    );
    drop(cl);
}

/// One slot, its keys on both sides of the move (or missing on the importing side): both
/// engines refuse a request over several of its keys with `-TRYAGAIN` for as long as the slot
/// is open, so the proxy sends such a request per key (`split::per_key`). Before that change
/// the client got `-TRYAGAIN` after about a second of retries.
#[test]
fn one_slot_requests_over_both_sides_of_a_move_are_split_per_key() {
    let (cl, pport, (e0, e1), (id0, id1)) = two_engines_and_a_proxy();
    let ts = tag_on(0, &[]);
    let s: Vec<String> = (0..6).map(|i| format!("{{{ts}}}:{i}")).collect();
    let mut c = Resp::connect(pport);
    for k in &s {
        assert_eq!(cmd(&mut c, &["SET", k, &format!("v-{k}")]), "+OK\\r\\n");
    }
    let slot = key_slot(ts.as_bytes()).to_string();
    for (port, args) in [(e1, ["IMPORTING", &id0]), (e0, ["MIGRATING", &id1])] {
        let mut all = vec!["CLUSTER", "SETSLOT", &slot];
        all.extend_from_slice(&args);
        assert_eq!(cmd(&mut Resp::connect(port), &all), "+OK\\r\\n");
    }
    let p1 = e1.to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &p1, "", "0", "5000", "KEYS"];
    args.extend(s[..3].iter().map(String::as_str));
    assert_eq!(cmd(&mut Resp::connect(e0), &args), "+OK\\r\\n");
    // What the proxy meets on both sides.
    let both = with_keys("MGET", &s);
    assert!(cmd(&mut Resp::connect(e0), &both).starts_with("-TRYAGAIN"));
    let mut asking = Resp::connect(e1);
    assert_eq!(cmd(&mut asking, &["ASKING"]), "+OK\\r\\n");
    assert!(cmd(&mut asking, &both).starts_with("-TRYAGAIN"));

    // Through the proxy: every value in key order; counts; a new key of the slot with old
    // ones; deletes. No error.
    let want: Vec<String> = s.iter().map(|k| format!("v-{k}")).collect();
    assert_eq!(cmd(&mut c, &both), bulks(&want));
    let mut exists = s.clone();
    exists.push(format!("{{{ts}}}:none"));
    assert_eq!(cmd(&mut c, &with_keys("EXISTS", &exists)), ":6\\r\\n");
    assert_eq!(cmd(&mut c, &with_keys("TOUCH", &exists)), ":6\\r\\n");
    let fresh = format!("{{{ts}}}:fresh");
    let mset = ["MSET", &s[0], "n0", &s[4], "n4", &fresh, "nf"];
    assert_eq!(cmd(&mut c, &mset), "+OK\\r\\n");
    assert_eq!(asking_get(e1, &s[0]), "$2\\r\\nn0\\r\\n");
    assert_eq!(
        cmd(&mut Resp::connect(e0), &["GET", &s[4]]),
        "$2\\r\\nn4\\r\\n"
    );
    assert_eq!(asking_get(e1, &fresh), "$2\\r\\nnf\\r\\n");
    assert_eq!(
        cmd(&mut c, &["MGET", &s[0], &s[4], &fresh, &s[5]]),
        bulks(&["n0".into(), "n4".into(), "nf".into(), format!("v-{}", s[5])])
    );
    // With a key of another slot of engine 0: split per slot, then S's request per key (a
    // gather inside a gather).
    let other = format!("{{{}}}:k", tag_on(0, &[key_slot(ts.as_bytes())]));
    assert_eq!(cmd(&mut c, &["SET", &other, "o"]), "+OK\\r\\n");
    assert_eq!(
        cmd(&mut c, &["MGET", &s[1], &other, &s[4], &s[0]]),
        bulks(&[format!("v-{}", s[1]), "o".into(), "n4".into(), "n0".into()])
    );
    assert_eq!(cmd(&mut c, &with_keys("DEL", &exists)), ":6\\r\\n");
    assert_eq!(cmd(&mut c, &with_keys("EXISTS", &s)), ":0\\r\\n");
    assert_eq!(cmd(&mut c, &["EXISTS", &fresh]), ":1\\r\\n");
    drop(cl);
}
