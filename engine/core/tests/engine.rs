//! Engine-level tests: commands through `Engine::exec` with a fake clock, replies compared
//! byte for byte with what redis-server 7.0.15 answers for the same input.

use std::collections::HashMap;

use engine_core::{Client, Config, Engine, Flow, Proto};

/// 2026-01-01T00:00:00Z in µs: a fixed, realistic "now".
const T0: u64 = 1_767_225_600_000_000;

struct Session {
    engine: Engine,
    client: Client,
    now_us: u64,
}

impl Session {
    fn new() -> Session {
        let mut engine = Engine::new(Config {
            hash_seed: 42,
            ..Config::default()
        });
        engine.host.started_us = T0;
        Session {
            engine,
            client: Client {
                id: 7,
                created_us: T0,
                ..Client::default()
            },
            now_us: T0,
        }
    }

    /// Runs one command given as space-separated words; returns the raw reply.
    fn cmd(&mut self, line: &str) -> String {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.cmd_argv(&argv).0
    }

    fn cmd_argv(&mut self, argv: &[&[u8]]) -> (String, Flow) {
        let mut out = Vec::new();
        let flow = self
            .engine
            .exec(&mut self.client, argv, self.now_us, &mut out);
        (String::from_utf8_lossy(&out).into_owned(), flow)
    }

    fn advance_ms(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }
}

/// (command, exact reply) pairs; replies recorded from redis-server 7.0.15.
fn transcript(s: &mut Session, steps: &[(&str, &str)]) {
    for (cmd, want) in steps {
        assert_eq!(s.cmd(cmd), *want, "reply to {cmd:?}");
    }
}

#[test]
fn strings_transcript() {
    let mut s = Session::new();
    transcript(
        &mut s,
        &[
            ("SET k v", "+OK\r\n"),
            ("GET k", "$1\r\nv\r\n"),
            ("SET k v NX", "$-1\r\n"),
            ("SET k w XX GET", "$1\r\nv\r\n"),
            ("SET k v NX XX", "-ERR syntax error\r\n"),
            (
                "SET k v EX 0",
                "-ERR invalid expire time in 'set' command\r\n",
            ),
            (
                "SET k v EX 9223372036854775",
                "-ERR invalid expire time in 'set' command\r\n",
            ),
            ("SET k v KEEPTTL EX 10", "-ERR syntax error\r\n"),
            (
                "SETEX k -1 v",
                "-ERR invalid expire time in 'setex' command\r\n",
            ),
            ("SETNX k x", ":0\r\n"),
            ("GETSET k z", "$1\r\nw\r\n"),
            ("GETDEL k", "$1\r\nz\r\n"),
            ("GETDEL k", "$-1\r\n"),
            ("INCR n", ":1\r\n"),
            ("INCRBY n 9223372036854775806", ":9223372036854775807\r\n"),
            ("INCR n", "-ERR increment or decrement would overflow\r\n"),
            (
                "DECRBY n -9223372036854775808",
                "-ERR decrement would overflow\r\n",
            ),
            (
                "INCRBY n abc",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("SET f 10.5", "+OK\r\n"),
            ("INCR f", "-ERR value is not an integer or out of range\r\n"),
            ("INCRBYFLOAT f 0.1", "$4\r\n10.6\r\n"),
            ("INCRBYFLOAT f abc", "-ERR value is not a valid float\r\n"),
            ("SET f 1e4932", "+OK\r\n"),
            (
                "INCRBYFLOAT f 1e4932",
                "-ERR increment would produce NaN or Infinity\r\n",
            ),
            ("SET s Hello", "+OK\r\n"),
            ("APPEND s World", ":10\r\n"),
            ("GETRANGE s -5 -1", "$5\r\nWorld\r\n"),
            ("GETRANGE s -1 -5", "$0\r\n\r\n"),
            ("GETRANGE s 3 100", "$7\r\nloWorld\r\n"),
            ("SUBSTR s 0 0", "$1\r\nH\r\n"),
            ("SETRANGE s 12 !", ":13\r\n"),
            ("GET s", "$13\r\nHelloWorld\0\0!\r\n"),
            ("SETRANGE s -1 x", "-ERR offset is out of range\r\n"),
            (
                "SETRANGE s 536870912 x",
                "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
            ),
            ("STRLEN s", ":13\r\n"),
            (
                "MSET a 1 b",
                "-ERR wrong number of arguments for 'mset' command\r\n",
            ),
            ("MSETNX a 1 b 2", ":1\r\n"),
            ("MSETNX b 3 c 4", ":0\r\n"),
            ("MGET a b c", "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n"),
        ],
    );
}

#[test]
fn dispatch_errors() {
    let mut s = Session::new();
    transcript(
        &mut s,
        &[
            (
                "foo a b",
                "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n",
            ),
            (
                "GET",
                "-ERR wrong number of arguments for 'get' command\r\n",
            ),
            (
                "CONFIG",
                "-ERR wrong number of arguments for 'config' command\r\n",
            ),
            (
                "CONFIG foo",
                "-ERR unknown subcommand 'foo'. Try CONFIG HELP.\r\n",
            ),
            (
                "config GET",
                "-ERR wrong number of arguments for 'config|get' command\r\n",
            ),
            (
                "PING a b",
                "-ERR wrong number of arguments for 'ping' command\r\n",
            ),
            ("SELECT 16", "-ERR DB index is out of range\r\n"),
            ("SELECT 0", "+OK\r\n"),
            ("HELLO 4", "-NOPROTO unsupported protocol version\r\n"),
            (
                "EXPIRE k 10 nx xx",
                "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
            ),
            ("EXPIRE k 10 foo", "-ERR Unsupported option foo\r\n"),
            ("RENAME nokey x", "-ERR no such key\r\n"),
            ("SCAN abc", "-ERR invalid cursor\r\n"),
            ("SCAN 0 COUNT 0", "-ERR syntax error\r\n"),
            ("FLUSHALL foo", "-ERR syntax error\r\n"),
            (
                "COMMAND GETKEYS get a b",
                "-ERR Invalid number of arguments specified for command\r\n",
            ),
            (
                "COMMAND GETKEYS ping",
                "-ERR wrong number of arguments for 'command|getkeys' command\r\n",
            ),
            (
                "COMMAND GETKEYS ping x",
                "-ERR The command has no key arguments\r\n",
            ),
            (
                "COMMAND GETKEYS mset a 1 b 2",
                "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            ),
            (
                "CONFIG SET hz abc",
                "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer\r\n",
            ),
            ("CONFIG SET hz 1000", "+OK\r\n"),
            ("CONFIG GET hz", "*2\r\n$2\r\nhz\r\n$3\r\n500\r\n"),
            ("CONFIG GET HZ", "*2\r\n$2\r\nHZ\r\n$3\r\n500\r\n"),
        ],
    );
}

#[test]
fn command_info_matches_redis_bytes() {
    let mut s = Session::new();
    // redis-server 7.0.15, RESP2.
    let get = "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n";
    assert_eq!(s.cmd("COMMAND INFO get"), get);
    assert_eq!(s.cmd("COMMAND INFO nosuch"), "*1\r\n$-1\r\n");
    // RESP3: sets, maps, null.
    s.cmd("HELLO 3");
    assert_eq!(s.client.proto, Proto::Resp3);
    let info = s.cmd("COMMAND INFO get");
    assert!(
        info.starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n"),
        "{info}"
    );
    assert!(info.ends_with("$5\r\nlimit\r\n:0\r\n~0\r\n"), "{info}");
    assert_eq!(s.cmd("COMMAND INFO nosuch"), "*1\r\n_\r\n");
    let docs = s.cmd("COMMAND DOCS getset");
    assert!(
        docs.contains("$9\r\ndoc_flags\r\n~1\r\n+deprecated\r\n"),
        "{docs}"
    );
    // Every command entry has 10 fields, subcommands included.
    let all = s.cmd("COMMAND");
    let count = s.cmd("COMMAND COUNT");
    let n: usize = count[1..count.len() - 2].parse().unwrap();
    assert!(all.starts_with(&format!("*{n}\r\n*10\r\n")));
}

#[test]
fn lazy_and_active_expiry_with_fake_clock() {
    let mut s = Session::new();
    assert_eq!(s.cmd("SET k v PX 100"), "+OK\r\n");
    assert_eq!(s.cmd("PTTL k"), ":100\r\n");
    s.advance_ms(100);
    assert_eq!(
        s.cmd("GET k"),
        "$1\r\nv\r\n",
        "still alive at its expiry millisecond"
    );
    s.advance_ms(1);
    assert_eq!(s.cmd("GET k"), "$-1\r\n");
    assert_eq!(s.cmd("TTL k"), ":-2\r\n");

    // Active expiry: keys nobody touches again are reclaimed by cron, a bounded amount per call.
    let budget = engine_core::expire::EXPIRE_KEYS_PER_CRON as u64;
    let volatile = 2 * budget + 2000;
    for i in 0..volatile {
        s.cmd(&format!("SET v{i} x PX 50"));
    }
    for i in 0..1000 {
        s.cmd(&format!("SET p{i} x"));
    }
    assert_eq!(s.engine.dbsize(), volatile + 1000);
    s.advance_ms(51);
    s.engine.cron(s.now_us);
    let after_one = s.engine.dbsize();
    assert!(after_one < volatile + 1000, "cron reclaims");
    assert!(
        volatile + 1000 - after_one <= budget,
        "one cron call is bounded by its budget"
    );
    for _ in 0..50 {
        s.advance_ms(100);
        s.engine.cron(s.now_us);
    }
    // Redis's sampler stops when <= 25 % of a sample is expired; a small tail may remain,
    // but it is never served.
    assert!(
        s.engine.dbsize() <= 1000 + volatile / 4,
        "dbsize {}",
        s.engine.dbsize()
    );
    assert_eq!(s.cmd("GET v1"), "$-1\r\n");
    assert_eq!(s.cmd("GET p1"), "$1\r\nx\r\n");
    let info = s.cmd("INFO stats");
    let expired: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("expired_keys:"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(expired >= volatile * 3 / 4, "expired_keys {expired}");
}

#[test]
fn expire_family_semantics() {
    let mut s = Session::new();
    let now_s = T0 / 1_000_000;
    transcript(
        &mut s,
        &[
            ("SET k v", "+OK\r\n"),
            ("EXPIRE k 100", ":1\r\n"),
            ("TTL k", ":100\r\n"),
            ("EXPIRE k 50 GT", ":0\r\n"),
            ("EXPIRE k 200 GT", ":1\r\n"),
            ("EXPIRE k 300 LT", ":0\r\n"),
            ("EXPIRE k 10 NX", ":0\r\n"),
            ("PERSIST k", ":1\r\n"),
            ("EXPIRE k 10 XX", ":0\r\n"),
            ("EXPIRE k 10 GT", ":0\r\n"),
            ("EXPIRE k 10 LT", ":1\r\n"),
            ("PTTL k", ":10000\r\n"),
            (
                "EXPIRE k 9223372036854775807",
                "-ERR invalid expire time in 'expire' command\r\n",
            ),
            ("EXPIRE k -1", ":1\r\n"),
            ("EXISTS k", ":0\r\n"),
            ("SET k v", "+OK\r\n"),
            ("EXPIRETIME k", ":-1\r\n"),
            ("EXPIRETIME nokey", ":-2\r\n"),
        ],
    );
    assert_eq!(s.cmd(&format!("EXPIREAT k {}", now_s + 1000)), ":1\r\n");
    assert_eq!(s.cmd("EXPIRETIME k"), format!(":{}\r\n", now_s + 1000));
    assert_eq!(
        s.cmd("PEXPIRETIME k"),
        format!(":{}\r\n", (now_s + 1000) * 1000)
    );
    assert_eq!(s.cmd("SET k v2 KEEPTTL"), "+OK\r\n");
    assert_eq!(s.cmd("TTL k"), ":1000\r\n");
    assert_eq!(s.cmd("RENAME k k2"), "+OK\r\n");
    assert_eq!(s.cmd("TTL k2"), ":1000\r\n");
    assert_eq!(s.cmd("GETEX k2 PERSIST"), "$2\r\nv2\r\n");
    assert_eq!(s.cmd("TTL k2"), ":-1\r\n");
    assert_eq!(s.cmd("GETEX k2 EXAT 1"), "$2\r\nv2\r\n");
    assert_eq!(s.cmd("EXISTS k2"), ":0\r\n");
}

#[test]
fn connection_commands_and_flows() {
    let mut s = Session::new();
    s.client.addr = "127.0.0.1:5000".into();
    s.client.laddr = "127.0.0.1:6400".into();
    s.client.fd = 9;
    assert_eq!(
        s.cmd("CLIENT SETNAME a b"),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(s.cmd("CLIENT SETNAME app"), "+OK\r\n");
    s.advance_ms(3000);
    let info = s.cmd("CLIENT INFO");
    let line = "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6400 fd=9 name=app age=3 idle=0 flags=N db=0 \
                sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
                oll=0 omem=0 tot-mem=0 events=r cmd=client|info user=default redir=-1 resp=2\n";
    assert_eq!(info, format!("${}\r\n{line}\r\n", line.len()));
    let (out, flow) = s.cmd_argv(&[b"client", b"list"]);
    assert_eq!((out.as_str(), flow), ("", Flow::ClientList));
    let (out, flow) = s.cmd_argv(&[b"QUIT"]);
    assert_eq!((out.as_str(), flow), ("+OK\r\n", Flow::Close));
    assert_eq!(
        s.cmd("HELLO 3 SETNAME x"),
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    );
    assert_eq!(s.cmd("GET nokey"), "_\r\n");
    assert_eq!(s.cmd("RESET"), "+RESET\r\n");
    assert_eq!(
        (s.client.proto, s.client.name.clone()),
        (Proto::Resp2, None)
    );
    assert_eq!(
        s.cmd("HELLO 3 AUTH bob pw"),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        s.client.proto,
        Proto::Resp2,
        "a failed HELLO changes nothing"
    );
}

#[test]
fn info_sections() {
    let mut s = Session::new();
    s.cmd("SET a 1");
    s.cmd("SET b 2 EX 100");
    let all = s.cmd("INFO");
    for h in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Replication",
        "# Keyspace",
    ] {
        assert!(all.contains(&format!("{h}\r\n")), "{h} missing");
    }
    assert!(all.contains("redis_version:7.0.15\r\n"));
    assert!(all.contains("loading:0\r\n"));
    assert!(
        all.contains("db0:keys=2,expires=1,avg_ttl=100000\r\n"),
        "{all}"
    );
    let mem = s.cmd("INFO memory");
    assert!(!mem.contains("# Server"));
    let used: u64 = mem
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .parse()
        .unwrap();
    s.cmd("SET big xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    let mem = s.cmd("INFO memory");
    let used2: u64 = mem
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(used2 >= used + 90, "{used} -> {used2}");
    s.cmd("FLUSHALL");
    assert!(s.cmd("INFO keyspace").ends_with("# Keyspace\r\n\r\n"));
    assert_eq!(s.cmd("INFO nosuchsection"), "$0\r\n\r\n");
}

#[test]
fn scan_command_returns_every_stable_key() {
    let mut s = Session::new();
    for i in 0..500 {
        s.cmd(&format!("SET stable:{i} v"));
        s.cmd(&format!("SET churn:{i} v"));
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    for round in 0..10_000 {
        let reply = s.cmd(&format!("SCAN {cursor} MATCH stable:* COUNT 7"));
        let mut lines = reply.split("\r\n");
        assert_eq!(lines.next(), Some("*2"));
        lines.next(); // $len of the cursor
        cursor = lines.next().unwrap().to_string();
        let n: usize = lines.next().unwrap()[1..].parse().unwrap();
        for _ in 0..n {
            lines.next();
            seen.insert(lines.next().unwrap().to_string());
        }
        s.cmd(&format!("DEL churn:{}", round % 500));
        s.cmd(&format!("SET new:{round} v"));
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    assert_eq!(seen.len(), 500);
}

/// Random commands against a HashMap model with a fake clock.
#[test]
fn model_random_ops() {
    let mut s = Session::new();
    let mut model: HashMap<String, (String, Option<u64>)> = HashMap::new();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for _ in 0..20_000 {
        let key = format!("k{}", next(50));
        let now_ms = s.now_us / 1000;
        if model
            .get(&key)
            .is_some_and(|(_, at)| at.is_some_and(|at| now_ms > at))
        {
            model.remove(&key);
        }
        match next(8) {
            0 => {
                let v = format!("v{}", next(1000));
                assert_eq!(s.cmd(&format!("SET {key} {v}")), "+OK\r\n");
                model.insert(key, (v, None));
            }
            1 => {
                let want = match model.get(&key) {
                    Some((v, _)) => format!("${}\r\n{v}\r\n", v.len()),
                    None => "$-1\r\n".into(),
                };
                assert_eq!(s.cmd(&format!("GET {key}")), want);
            }
            2 => {
                let want = if model.remove(&key).is_some() {
                    ":1\r\n"
                } else {
                    ":0\r\n"
                };
                assert_eq!(s.cmd(&format!("DEL {key}")), want);
            }
            3 => {
                let ms = next(200) + 1;
                let want = if let Some(e) = model.get_mut(&key) {
                    e.1 = Some(now_ms + ms);
                    ":1\r\n"
                } else {
                    ":0\r\n"
                };
                assert_eq!(s.cmd(&format!("PEXPIRE {key} {ms}")), want);
            }
            4 => {
                let want = match model.get(&key) {
                    None => ":-2\r\n".to_string(),
                    Some((_, None)) => ":-1\r\n".to_string(),
                    Some((_, Some(at))) => format!(":{}\r\n", at - now_ms),
                };
                assert_eq!(s.cmd(&format!("PTTL {key}")), want);
            }
            5 => {
                let tail = format!("{}", next(10));
                let e = model.entry(key.clone()).or_insert((String::new(), None));
                e.0.push_str(&tail);
                assert_eq!(
                    s.cmd(&format!("APPEND {key} {tail}")),
                    format!(":{}\r\n", e.0.len())
                );
            }
            6 => s.advance_ms(next(30)),
            _ => {
                if next(10) == 0 {
                    s.engine.cron(s.now_us);
                }
                let live = model
                    .values()
                    .filter(|(_, at)| at.is_none_or(|at| now_ms <= at))
                    .count();
                let reply = s.cmd("KEYS *");
                assert!(
                    reply.starts_with(&format!("*{live}\r\n")),
                    "{reply} vs {live}"
                );
            }
        }
    }
}

/// Arbitrary argument vectors never panic and always get exactly one reply.
#[test]
fn garbage_never_panics() {
    let mut s = Session::new();
    let names: Vec<&str> = engine_core::command::COMMANDS
        .iter()
        .map(|c| c.name)
        // QUIT closes; MONITOR turns the connection into a monitor, which Redis answers no
        // reply to a second MONITOR and refuses keyspace commands (tests/tests/monitor.rs).
        .filter(|n| *n != "quit" && *n != "monitor")
        .collect();
    let words: &[&[u8]] = &[
        b"",
        b"0",
        b"-1",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"1e400",
        b"nan",
        b"inf",
        b"EX",
        b"PX",
        b"NX",
        b"XX",
        b"GET",
        b"KEEPTTL",
        b"PERSIST",
        b"COUNT",
        b"MATCH",
        b"TYPE",
        b"*",
        b"[",
        b"\\",
        b"k",
        b"\x00\xff",
        b"LIST",
        b"INFO",
        b"SETNAME",
        b"AUTH",
        b"3",
        b"2",
        b"ID",
        b"get",
        b"hz",
    ];
    let mut rng = 99u64;
    let mut next = |n: usize| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 33) as usize) % n
    };
    for _ in 0..30_000 {
        let mut argv: Vec<&[u8]> = vec![names[next(names.len())].as_bytes()];
        for _ in 0..next(6) {
            argv.push(words[next(words.len())]);
        }
        let (out, flow) = s.cmd_argv(&argv);
        assert!(
            !out.is_empty() || flow == Flow::ClientList || flow == Flow::Block,
            "no reply to {argv:?}"
        );
        // HELLO 3 may switch protocol; switch back so replies stay comparable.
        s.client.proto = Proto::Resp2;
        if s.engine.dbsize() > 1000 {
            s.cmd("FLUSHALL");
        }
    }
}
