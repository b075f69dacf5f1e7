//! Shape tests: replies that legitimately differ between redis-server and the engine (ids,
//! clocks, counters: CLIENT ID, TIME, INFO, HELLO's id…) are checked by shape instead of byte
//! for byte (the rest is `differential.rs`), on both servers, which validates the checks too.

mod common;

use common::*;
use std::time::Duration;

/// Collects failed shape checks instead of stopping at the first.
struct Checks {
    server: &'static str,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str, reply: &[u8]) {
        if !ok {
            self.failed
                .push(format!("[{}] {what}: got {}", self.server, escape(reply)));
        }
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Checks the replies that cannot be byte-identical, on one server.
fn check_shapes(server: &'static str, port: u16) -> Vec<String> {
    let mut c = Checks {
        server,
        failed: Vec::new(),
    };
    let mut conn = Resp::connect(port);
    conn.cmd_str(&["FLUSHALL"]);

    // TIME: two bulk strings of digits, seconds near our clock, microseconds < 1e6.
    let r = conn.cmd_str(&["TIME"]);
    let ok = match parse_value(&r).array() {
        Some([Value::Bulk(s), Value::Bulk(us)]) => {
            let (s, us) = (String::from_utf8_lossy(s), String::from_utf8_lossy(us));
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            is_digits(&s)
                && is_digits(&us)
                && (s.parse::<i64>().unwrap() - now).abs() <= 5
                && us.parse::<i64>().unwrap() < 1_000_000
        }
        _ => false,
    };
    c.check(ok, "TIME is [seconds, microseconds]", &r);

    // INFO: sections and fields clients read; keyspace line after a write.
    conn.cmd_str(&["SET", "a", "1"]);
    conn.cmd_str(&["SET", "b", "1", "EX", "100"]);
    let r = conn.cmd_str(&["INFO"]);
    let info = parse_value(&r).str().unwrap_or_default();
    for needle in [
        "# Server\r\n",
        "redis_version:",
        "# Clients\r\n",
        "connected_clients:",
        "# Memory\r\n",
        "used_memory:",
        "# Stats\r\n",
        "# Keyspace\r\n",
        "db0:keys=2,expires=1,avg_ttl=",
    ] {
        c.check(
            info.contains(needle),
            &format!("INFO contains {needle:?}"),
            &r,
        );
    }
    c.check(
        info.lines()
            .all(|l| l.is_empty() || l.starts_with('#') || l.contains(':')),
        "INFO lines are `# Section` or `field:value`",
        &r,
    );
    for (section, has, lacks) in [
        ("server", "# Server\r\n", "# Keyspace"),
        ("keyspace", "db0:keys=2", "# Server"),
        ("clients", "connected_clients:", "# Keyspace"),
        ("memory", "used_memory:", "# Server"),
        ("stats", "# Stats\r\n", "# Server"),
    ] {
        let r = conn.cmd_str(&["INFO", section]);
        let t = parse_value(&r).str().unwrap_or_default();
        c.check(
            t.contains(has) && !t.contains(lacks),
            &format!("INFO {section} has {has:?}, not {lacks:?}"),
            &r,
        );
    }

    // Databases: INFO keyspace lists every non-empty database in order; CLIENT INFO `db=`
    // follows SELECT (on a second connection, so this one stays on database 0).
    let mut dbc = Resp::connect(port);
    for (db, keys) in [("3", &["x"][..]), ("12", &["y", "z"][..])] {
        dbc.cmd_str(&["SELECT", db]);
        for k in keys {
            dbc.cmd_str(&["SET", k, "1", "EX", "100"]);
        }
    }
    let r = dbc.cmd_str(&["CLIENT", "INFO"]);
    let t = parse_value(&r).str().unwrap_or_default();
    c.check(
        t.contains(" db=12 "),
        "CLIENT INFO shows db=12 after SELECT 12",
        &r,
    );
    let r = conn.cmd_str(&["INFO", "keyspace"]);
    let t = parse_value(&r).str().unwrap_or_default();
    let dbs: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("db"))
        .map(|l| l.split(",avg_ttl=").next().unwrap_or(""))
        .collect();
    c.check(
        dbs == [
            "db0:keys=2,expires=1",
            "db3:keys=1,expires=1",
            "db12:keys=2,expires=2",
        ],
        "INFO keyspace lists db0, db3, db12",
        &r,
    );
    dbc.cmd_str(&["SELECT", "3"]);
    dbc.cmd_str(&["FLUSHDB"]);
    dbc.cmd_str(&["SELECT", "12"]);
    dbc.cmd_str(&["FLUSHDB"]);

    // CLIENT ID / INFO / LIST and HELLO's id agree; ids differ between connections.
    let r = conn.cmd_str(&["CLIENT", "ID"]);
    let id = as_int(&parse_value(&r)).unwrap_or(-1);
    c.check(id > 0, "CLIENT ID is a positive integer", &r);
    let mut other = Resp::connect(port);
    let r2 = other.cmd_str(&["CLIENT", "ID"]);
    let id2 = as_int(&parse_value(&r2)).unwrap_or(-1);
    c.check(
        id2 > 0 && id2 != id,
        "a second connection has another id",
        &r2,
    );
    conn.cmd_str(&["CLIENT", "SETNAME", "shape-test"]);
    let r = conn.cmd_str(&["CLIENT", "INFO"]);
    let t = parse_value(&r).str().unwrap_or_default();
    c.check(
        t.starts_with(&format!("id={id} addr=127.0.0.1:"))
            && t.contains(" name=shape-test ")
            && t.contains(" db=0 ")
            && t.ends_with('\n'),
        "CLIENT INFO is `id=<id> addr=… name=shape-test … db=0 …\\n`",
        &r,
    );
    let r = conn.cmd_str(&["CLIENT", "LIST"]);
    let t = parse_value(&r).str().unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    c.check(
        lines.len() >= 2
            && lines
                .iter()
                .all(|l| l.starts_with("id=") && l.contains(" addr="))
            && lines
                .iter()
                .any(|l| l.starts_with(&format!("id={id} ")) && l.contains("name=shape-test"))
            && lines.iter().any(|l| l.starts_with(&format!("id={id2} "))),
        "CLIENT LIST has a line `id=… addr=…` per connection",
        &r,
    );

    // HELLO 3: a map of 7 fields in Redis's order; HELLO 2: the same as a flat array.
    let expect_keys = [
        "server", "version", "proto", "id", "mode", "role", "modules",
    ];
    for (proto, r) in [
        (3, conn.cmd_str(&["HELLO", "3"])),
        (2, conn.cmd_str(&["HELLO", "2"])),
    ] {
        let pairs: Vec<(Value, Value)> = match parse_value(&r) {
            Value::Map(m) if proto == 3 => m,
            Value::Array(v) if proto == 2 && v.len() % 2 == 0 => {
                v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()
            }
            _ => Vec::new(),
        };
        let keys: Vec<String> = pairs.iter().filter_map(|(k, _)| k.str()).collect();
        let get = |k: &str| pairs.iter().find(|(x, _)| x.str().as_deref() == Some(k));
        let ok = keys == expect_keys
            && get("proto").map(|(_, v)| as_int(v)) == Some(Some(proto))
            && get("id").map(|(_, v)| as_int(v)) == Some(Some(id))
            && get("mode").and_then(|(_, v)| v.str()).as_deref() == Some("standalone")
            && get("role").and_then(|(_, v)| v.str()).as_deref() == Some("master")
            && get("modules").map(|(_, v)| v.clone()) == Some(Value::Array(vec![]))
            && get("server").and_then(|(_, v)| v.str()).is_some()
            && get("version").and_then(|(_, v)| v.str()).is_some();
        c.check(
            ok,
            &format!("HELLO {proto} lists {expect_keys:?} with proto {proto} and id {id}"),
            &r,
        );
    }

    // COMMAND COUNT / COMMAND / COMMAND INFO: entries of 10 fields, our commands present.
    let r = conn.cmd_str(&["COMMAND", "COUNT"]);
    let n = as_int(&parse_value(&r)).unwrap_or(0);
    c.check(n >= 40, "COMMAND COUNT >= 40", &r);
    for args in [&["COMMAND"][..], &["COMMAND", "INFO"][..]] {
        let r = conn.cmd_str(args);
        let v = parse_value(&r);
        let entries = v.array().unwrap_or(&[]);
        let names: Vec<String> = entries
            .iter()
            .filter_map(|e| e.array().and_then(|f| f.first()).and_then(|x| x.str()))
            .collect();
        let ok = entries.len() as i64 == n
            && entries
                .iter()
                .all(|e| e.array().is_some_and(|f| f.len() == 10))
            && [
                "get",
                "set",
                "mget",
                "scan",
                "incrbyfloat",
                "client",
                "command",
            ]
            .iter()
            .all(|x| names.iter().any(|y| y == x));
        c.check(
            ok,
            &format!("{args:?}: COMMAND COUNT entries of 10 fields"),
            &r[..r.len().min(300)],
        );
    }

    // PTTL / TTL of a fresh key: close to the value set.
    conn.cmd_str(&["SET", "p", "v", "PX", "100000"]);
    let r = conn.cmd_str(&["PTTL", "p"]);
    let ms = as_int(&parse_value(&r)).unwrap_or(-9);
    c.check(
        (95_000..=100_000).contains(&ms),
        "PTTL of PX 100000 in 95000..=100000",
        &r,
    );
    conn.cmd_str(&["PEXPIRE", "p", "5500"]);
    let r = conn.cmd_str(&["TTL", "p"]);
    let s = as_int(&parse_value(&r)).unwrap_or(-9);
    c.check(
        (5..=6).contains(&s),
        "TTL of PEXPIRE 5500 rounds to 5 or 6",
        &r,
    );

    // RANDOMKEY returns one of the keys.
    conn.cmd_str(&["FLUSHALL"]);
    conn.cmd_str(&["MSET", "k1", "1", "k2", "2", "k3", "3"]);
    for _ in 0..10 {
        let r = conn.cmd_str(&["RANDOMKEY"]);
        let k = parse_value(&r).str().unwrap_or_default();
        c.check(
            ["k1", "k2", "k3"].contains(&k.as_str()),
            "RANDOMKEY is an existing key",
            &r,
        );
    }

    // SCAN with a small COUNT: a full iteration returns every key at least once.
    conn.cmd_str(&["FLUSHALL"]);
    let mut all = Vec::new();
    for i in 0..300 {
        all.push(format!("key:{i}"));
    }
    let mut mset = vec!["MSET".to_string()];
    for k in &all {
        mset.push(k.clone());
        mset.push("v".into());
    }
    let mset: Vec<&str> = mset.iter().map(|s| s.as_str()).collect();
    conn.cmd_str(&mset);
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        calls += 1;
        let r = conn.cmd_str(&["SCAN", &cursor, "COUNT", "7"]);
        let v = parse_value(&r);
        let Some([Value::Bulk(cur), Value::Array(keys)]) = v.array() else {
            c.check(false, "SCAN reply is [cursor, [keys]]", &r);
            break;
        };
        seen.extend(keys.iter().filter_map(|k| k.str()));
        cursor = String::from_utf8_lossy(cur).into_owned();
        if cursor == "0" || calls > 2000 {
            break;
        }
    }
    let r = format!("{} keys seen in {calls} calls", seen.len()).into_bytes();
    c.check(
        cursor == "0" && all.iter().all(|k| seen.contains(k)) && seen.len() == all.len(),
        "SCAN COUNT 7 iteration returns all 300 keys and ends at cursor 0",
        &r,
    );
    let r = conn.cmd_str(&["SCAN", "0", "MATCH", "key:1*", "COUNT", "1000"]);
    let ok = match parse_value(&r).array() {
        Some([_, Value::Array(keys)]) => keys
            .iter()
            .all(|k| k.str().is_some_and(|s| s.starts_with("key:1"))),
        _ => false,
    };
    c.check(ok, "SCAN MATCH key:1* returns only matching keys", &r);

    // Expiry: a key with a TTL disappears in time; DBSIZE drops (lazy or active expiry).
    conn.cmd_str(&["FLUSHALL"]);
    conn.cmd_str(&["SET", "gone", "v", "PX", "100"]);
    std::thread::sleep(Duration::from_millis(300));
    let r = conn.cmd_str(&["GET", "gone"]);
    c.check(r == b"$-1\r\n", "a key is gone after its PX", &r);
    // Active expiry: keys never touched again still leave the keyspace.
    for i in 0..50 {
        conn.cmd_str(&["SET", &format!("act:{i}"), "v", "PX", "100"]);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut r;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        r = conn.cmd_str(&["DBSIZE"]);
        if r == b":0\r\n" || std::time::Instant::now() > deadline {
            break;
        }
    }
    c.check(
        r == b":0\r\n",
        "active expiry empties DBSIZE within 5 s",
        &r,
    );

    // QUIT: +OK, then the server closes.
    let mut q = Resp::connect(port);
    q.send_raw(&Resp::encode(&[b"QUIT"]));
    let (bytes, closed) = q.read_until_close(Duration::from_millis(500), Duration::from_secs(3));
    c.check(
        bytes == b"+OK\r\n" && closed,
        "QUIT answers +OK and closes",
        &bytes,
    );

    c.failed
}

fn assert_shapes(failed: Vec<String>) {
    assert!(
        failed.is_empty(),
        "shape checks failed:\n{}",
        failed.join("\n")
    );
}

/// The shape checks hold for redis-server itself (so they test the right thing).
#[test]
fn shapes_redis() {
    let port = free_port();
    let _p = start_redis(port);
    assert_shapes(check_shapes("redis", port));
}

/// The shape checks hold for the engine.
#[test]
fn shapes_engine() {
    let port = free_port();
    let _p = start_engine(port);
    assert_shapes(check_shapes("ours", port));
}
