//! Fuzz target: command execution over a random keyspace.
//!
//! The input is decoded into up to [`MAX_COMMANDS`] commands run by two clients against one
//! engine, with the clock moving forward between them (so expiry, blocking timeouts and
//! `cron` run too). Names come from the command table (subcommands from their container's
//! list), keys from a small set so types collide (WRONGTYPE paths), and arguments from a
//! mix of numbers at the edges (0, -1, i64::MIN/MAX, inf, nan), option keywords (streams
//! included: IDs, `$`, `>`, GROUP/STREAMS/BLOCK…) and raw
//! bytes.
//!
//! Oracle: no panic (the engine's rule: bad input never panics), and every reply is one or
//! more complete, well-formed RESP frames with nothing left over (a handler that writes a
//! half frame or two replies for one command desynchronizes every client after it).
//!
//! Bounds: `proto-max-bulk-len` is 1 MB so SETRANGE/SETBIT/APPEND cannot ask for 512 MB,
//! and the few commands whose count argument legitimately sizes the reply (SRANDMEMBER -n,
//! …) are skipped when the count is huge: a 10⁹-element reply is Redis's behaviour, not a
//! bug, and would only exhaust the fuzzer's memory.
//!
//! Input layout, per command: bytes `a`, `b`: the command is row `(a | (b & 0x10) << 4) %
//! count` of the table, run by client `(b >> 3) & 1` with `b % 8` extra arguments, each a
//! selector byte (see [`arg`]) and its payload. `b >= 0xF0` instead advances the clock by
//! `a` × 10 ms and runs `cron` and the blocking timeouts. A client parked by a blocking
//! command runs nothing (as in the server) until a delivery unblocks it.
#![no_main]

use engine_core::{Client, Config, Engine, Flow, command};
use libfuzzer_sys::fuzz_target;

const MAX_COMMANDS: usize = 64;

const KEYS: &[&[u8]] = &[b"k", b"k2", b"{t}a", b"{t}b", b"h", b"s", b"z", b"l"];

const WORDS: &[&[u8]] = &[
    b"0",
    b"1",
    b"-1",
    b"2",
    b"10",
    b"-10",
    b"100",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"1.5",
    b"-0.0",
    b"inf",
    b"-inf",
    b"+inf",
    b"nan",
    b"1e308",
    b"(1",
    b"[a",
    b"(a",
    b"-",
    b"+",
    b"",
    b" ",
    b"EX",
    b"PX",
    b"EXAT",
    b"PXAT",
    b"NX",
    b"XX",
    b"GT",
    b"LT",
    b"CH",
    b"INCR",
    b"KEEPTTL",
    b"GET",
    b"WITHSCORES",
    b"WITHSCORE",
    b"LIMIT",
    b"BYSCORE",
    b"BYLEX",
    b"REV",
    b"COUNT",
    b"MATCH",
    b"TYPE",
    b"*",
    b"a*",
    b"h?",
    b"[a-z]",
    b"LEFT",
    b"RIGHT",
    b"BEFORE",
    b"AFTER",
    b"RANK",
    b"MAXLEN",
    b"WEIGHTS",
    b"AGGREGATE",
    b"SUM",
    b"MIN",
    b"MAX",
    b"FIELDS",
    b"IDX",
    b"LEN",
    b"MINMATCHLEN",
    b"ABSTTL",
    b"REPLACE",
    b"DB",
    b"ASYNC",
    b"SYNC",
    b"SCHEDULE",
    b"NOW",
    b"RESET",
    // bitmaps, BITFIELD, HyperLogLog, SORT, LCS
    b"BIT",
    b"BYTE",
    b"AND",
    b"XOR",
    b"NOT",
    b"OVERFLOW",
    b"WRAP",
    b"SAT",
    b"FAIL",
    b"INCRBY",
    b"i8",
    b"u63",
    b"i64",
    b"#3",
    b"WITHMATCHLEN",
    b"BY",
    b"nosort",
    b"w_*",
    b"h_*->f",
    b"#",
    b"ALPHA",
    b"DESC",
    b"STORE",
    b"GETREG",
    b"DECODE",
    b"TODENSE",
    b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x7f\xfe\x80",
    // geo
    b"FROMMEMBER",
    b"FROMLONLAT",
    b"BYRADIUS",
    b"BYBOX",
    b"WITHDIST",
    b"WITHCOORD",
    b"WITHHASH",
    b"ANY",
    b"ASC",
    b"STOREDIST",
    b"km",
    b"mi",
    b"ft",
    b"13.361389",
    b"38.115556",
    b"85.05112878",
    b"-180",
    b"20000",
    // Streams.
    b"STREAMS",
    b"GROUP",
    b"BLOCK",
    b"NOACK",
    b"MKSTREAM",
    b"NOMKSTREAM",
    b"ENTRIESREAD",
    b"ENTRIESADDED",
    b"MAXDELETEDID",
    b"MINID",
    b"JUSTID",
    b"FORCE",
    b"IDLE",
    b"TIME",
    b"RETRYCOUNT",
    b"LASTID",
    b"FULL",
    b"~",
    b"=",
    b"$",
    b">",
    b"0-0",
    b"1-1",
    b"5-*",
    b"(1-1",
    b"18446744073709551615-18446744073709551615",
];

/// Count arguments that size a reply (Redis answers |count| elements).
const SIZED_BY_COUNT: &[&str] = &["srandmember", "hrandfield", "zrandmember", "lpos"];

/// Commands too slow for a fuzzing run by design (PFSELFTEST adds 10 million elements).
const SLOW: &[&str] = &["pfselftest"];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a.to_vec()
    }
}

/// One argument: selector `s % 5` = 0 key, 1 word, 2 small integer, 3 raw bytes (length
/// from the next byte, ≤ 32), 4 a value repeated (length ≤ 255 × 64, listpack/quicklist
/// conversions).
fn arg(input: &mut Input<'_>) -> Option<Vec<u8>> {
    let s = input.byte()?;
    let p = input.byte().unwrap_or(0);
    Some(match s % 5 {
        0 => KEYS[p as usize % KEYS.len()].to_vec(),
        1 => WORDS[p as usize % WORDS.len()].to_vec(),
        2 => (p as i8).to_string().into_bytes(),
        3 => input.bytes(p as usize % 33),
        _ => vec![b'x'; p as usize * 64],
    })
}

/// Every reply is a sequence of complete RESP frames.
fn check_frames(out: &[u8], what: &str) {
    let mut rest = out;
    while !rest.is_empty() {
        match resp::reply::frame_len(rest) {
            Ok(Some(n)) => rest = &rest[n..],
            Ok(None) => panic!(
                "{what}: incomplete reply frame: {:?}",
                String::from_utf8_lossy(out)
            ),
            Err(e) => panic!(
                "{what}: malformed reply ({e}): {:?}",
                String::from_utf8_lossy(out)
            ),
        }
    }
}

/// Routes deliveries: checks their frames and unparks the clients they wake.
fn drain(
    engine: &mut Engine,
    deliveries: &mut Vec<engine_core::Delivery>,
    clients: &[Client; 2],
    blocked: &mut [bool; 2],
) {
    engine.take_deliveries(deliveries);
    for d in deliveries.drain(..) {
        check_frames(&d.bytes, "delivery");
        if d.unblock
            && let Some(i) = clients.iter().position(|c| c.id == d.client_id)
        {
            blocked[i] = false;
        }
    }
}

fn too_large_count(name: &str, argv: &[Vec<u8>]) -> bool {
    SIZED_BY_COUNT.contains(&name)
        && argv.iter().skip(2).any(|a| {
            std::str::from_utf8(a)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .is_some_and(|n| n.unsigned_abs() > 10_000)
        })
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mut config = Config::default();
    config.proto_max_bulk_len = 1 << 20;
    config.hash_seed = 7;
    // Half the runs under a small maxmemory, so eviction runs inside commands.
    if data.first().is_some_and(|b| b & 1 == 1) {
        config.maxmemory = 64 * 1024;
        config.maxmemory_policy = "allkeys-lru";
    }
    // Half the runs with tiny encoding thresholds, so values cross from listpack/intset to
    // hashtable/skiplist within a few commands (CONFIG SET may move them again), and lists
    // span many quicklist nodes.
    if data.first().is_some_and(|b| b & 2 == 2) {
        config.encoding = engine_core::types::EncodingLimits {
            hash_max_listpack_entries: 4,
            hash_max_listpack_value: 8,
            set_max_intset_entries: 4,
            zset_max_listpack_entries: 4,
            zset_max_listpack_value: 8,
            // Lists of two-element nodes: pushes, LINSERT, LSET and LREM split and merge nodes.
            list_max_listpack_size: 2,
        };
    }
    let mut engine = Engine::new(config);
    let mut clients = [
        Client {
            id: 1,
            ..Client::default()
        },
        Client {
            id: 2,
            ..Client::default()
        },
    ];
    let mut now_us: u64 = 1_700_000_000_000_000;
    let mut out = Vec::new();
    let mut deliveries = Vec::new();
    let ncmds = command::count();
    let mut blocked = [false; 2];
    for _ in 0..MAX_COMMANDS {
        let (Some(a), Some(b)) = (input.byte(), input.byte()) else {
            break;
        };
        if b >= 0xF0 {
            now_us += u64::from(a) * 10_000;
            engine.cron(now_us);
            engine.timeouts(now_us);
            drain(&mut engine, &mut deliveries, &clients, &mut blocked);
            continue;
        }
        let mut who = usize::from((b >> 3) & 1);
        if blocked[who] {
            who = 1 - who;
        }
        if blocked[who] {
            // Both parked (e.g. BLPOP with no timeout): the second one disconnects.
            engine.client_closed(clients[who].id);
            clients[who] = Client {
                id: clients[who].id + 2,
                ..Client::default()
            };
            blocked[who] = false;
        }
        let spec = command::spec_at((usize::from(a) | usize::from(b & 0x10) << 4) % ncmds);
        let argc = b % 8;
        let mut argv: Vec<Vec<u8>> = vec![spec.name.as_bytes().to_vec()];
        if !spec.subcommands.is_empty() {
            let i = input.byte().unwrap_or(0) as usize % spec.subcommands.len();
            argv.push(spec.subcommands[i].short_name().as_bytes().to_vec());
        }
        for _ in 0..argc {
            match arg(&mut input) {
                Some(a) => argv.push(a),
                None => break,
            }
        }
        if too_large_count(spec.name, &argv) || SLOW.contains(&spec.name) {
            continue;
        }
        let refs: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();
        out.clear();
        let flow = engine.exec(&mut clients[who], &refs, now_us, &mut out);
        if flow == Flow::Block {
            assert!(
                out.is_empty(),
                "{}: a blocked command wrote a reply",
                spec.name
            );
            blocked[who] = true;
        } else {
            check_frames(&out, spec.name);
        }
        if flow == Flow::Close {
            // QUIT: the connection is gone; a new one takes its place.
            engine.client_closed(clients[who].id);
            clients[who] = Client {
                id: clients[who].id + 2,
                ..Client::default()
            };
            blocked[who] = false;
        }
        drain(&mut engine, &mut deliveries, &clients, &mut blocked);
        now_us += 1_000;
    }
    for c in &clients {
        engine.client_closed(c.id);
    }
});
