//! Fuzz target: Lua scripts through EVAL (and EVALSHA, SCRIPT, FUNCTION LOAD, FCALL) on an
//! engine with the Lua host installed.
//!
//! The input is cut at `0xFF` bytes into up to [`MAX_SCRIPTS`] pieces. A piece's first byte
//! picks the command and how the rest becomes Lua source: as raw bytes (the parser and
//! compiler's error paths); as tokens, one per byte, from [`TOKENS`] (keywords, operators,
//! the sandbox's libraries: `redis`, `cjson`, `cmsgpack`, `struct`, `bit`, `string`,
//! `table`, `math`, `coroutine`, and literals whose bytes follow the token), so most scripts
//! parse and reach the libraries; or as one library call on the bytes themselves
//! ([`library_call`]: JSON, msgpack and struct formats and data straight from the fuzzer). Its second byte sets KEYS/ARGV: up to 3 keys
//! from a small set and up to 3 arguments, edge numbers or binary bytes.
//!
//! Oracle: no panic or crash (a bad script never takes the engine), every reply is one or
//! more complete RESP frames, and no command outlives the busy limit by more than
//! [`SLACK`]: the host stops a runaway script (lowered here to [`BUSY_LIMIT`] so such inputs
//! stay cheap), whatever the script does.
//!
//! Bounds: the Lua heap is capped at 64 MB, so allocation storms end in an error early.
//!
//! Each input gets a new engine and host (about a third of the speed of one kept across
//! inputs, but runs are reproducible and LeakSanitizer stays meaningful: a kept one trips it
//! on mlua's lazily shared reference counts, whose pointers point one past their allocation).
#![no_main]

use std::time::{Duration, Instant};

use engine_core::{Client, Config, Engine};
use libfuzzer_sys::fuzz_target;
use recached_script::LuaHost;

const MAX_SCRIPTS: usize = 6;
/// The host's busy limit in this target.
const BUSY_LIMIT: Duration = Duration::from_millis(100);
/// How long past the busy limit a command may take (C functions such as string.rep run to
/// their end before the next check; the fuzzer's sanitizers slow everything).
const SLACK: Duration = Duration::from_secs(3);

const KEYS: &[&[u8]] = &[b"k", b"h", b"{t}a", b"l"];

const WORDS: &[&[u8]] = &[
    b"0",
    b"1",
    b"-1",
    b"1.5",
    b"1e308",
    b"nan",
    b"inf",
    b"9223372036854775807",
    b"[1,2,{\"a\":null}]",
    b"{\"k\":[true,false,1e400]}",
    b"\x93\x01\xa1a\xc0",
    b"\x81\xa1k\x92\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\xc3",
    b">i2c0",
    b"",
];

/// Source tokens. `#N`, `#S` and `#B` take their value from the next input byte: a number,
/// a short string literal, a byte string literal (escaped).
const TOKENS: &[&str] = &[
    // structure
    "local",
    "x",
    "y",
    "t",
    "f",
    "i",
    "=",
    "==",
    "~=",
    "<",
    "<=",
    ">",
    ">=",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ";",
    ".",
    ":",
    "..",
    "...",
    "+",
    "-",
    "*",
    "/",
    "%",
    "^",
    "#",
    "and",
    "or",
    "not",
    "if",
    "then",
    "else",
    "elseif",
    "end",
    "while",
    "do",
    "for",
    "in",
    "repeat",
    "until",
    "function",
    "return",
    "break",
    "nil",
    "true",
    "false",
    "\n",
    // idioms
    "for i=1,#N do",
    "while true do",
    "local t = {}",
    "t[#t+1] =",
    "return t",
    "x = x ..",
    "local x = ",
    "(function(...) return ... end)(",
    "t.a = t",
    "t[1] = t",
    "function f(",
    // literals
    "#N",
    "#N",
    "#S",
    "#B",
    "0",
    "-1",
    "1e308",
    "2^53",
    "2^63",
    "-2^63",
    "1/0",
    "0/0",
    "0.1",
    "''",
    "'a'",
    "'\\0'",
    "string.rep('x', #N)",
    "string.rep('[', #N)",
    "string.rep('\\145', #N)",
    // globals
    "KEYS",
    "ARGV",
    "KEYS[1]",
    "ARGV[1]",
    "ARGV[2]",
    "_G",
    "pcall",
    "error",
    "type",
    "tostring",
    "tonumber",
    "select",
    "unpack",
    "next",
    "pairs",
    "ipairs",
    "rawget",
    "rawset",
    "setmetatable",
    "getmetatable",
    "loadstring",
    "assert",
    "gcinfo",
    "xpcall",
    // redis
    "redis.call(",
    "redis.pcall(",
    "redis.call('set', KEYS[1],",
    "redis.call('get', KEYS[1])",
    "redis.call('incr', 'n')",
    "redis.call('hset', 'h', 'f',",
    "redis.call('rpush', 'l',",
    "redis.call('lrange', 'l', 0, -1)",
    "redis.call('hgetall', 'h')",
    "redis.error_reply(",
    "redis.status_reply(",
    "redis.sha1hex(",
    "redis.log(redis.LOG_DEBUG,",
    "redis.setresp(3)",
    "redis.setresp(2)",
    "redis.set_repl(",
    "{err='x'}",
    "{ok='x'}",
    "{double=1.5}",
    "{map={a=1}}",
    "{set={a=true}}",
    "{big_number='1'}",
    // cjson
    "cjson.encode(",
    "cjson.decode(",
    "cjson.null",
    "cjson.new()",
    "cjson.encode_max_depth(",
    "cjson.decode_max_depth(",
    "cjson.encode_number_precision(",
    "cjson.encode_sparse_array(",
    "cjson.encode_invalid_numbers(",
    "cjson.decode_invalid_numbers(",
    "cjson.encode_keep_buffer(",
    "'[1,2,3]'",
    "'{\"a\":{\"b\":[]}}'",
    "'\"\\\\u00e9\\\\ud83d\\\\ude00\"'",
    "'[1e400, nan, 0x1p3]'",
    // cmsgpack
    "cmsgpack.pack(",
    "cmsgpack.unpack(",
    "cmsgpack.unpack_one(",
    "cmsgpack.unpack_limit(",
    // struct
    "struct.pack(",
    "struct.unpack(",
    "struct.size(",
    "'>iI3bBhHlLTfdc0sx'",
    "'!4 i9 c2'",
    "'<i33'",
    // bit
    "bit.band(",
    "bit.bor(",
    "bit.bxor(",
    "bit.lshift(",
    "bit.tohex(",
    "bit.tobit(",
    // string, table, math, coroutine
    "string.format('%5.2f %s %q', ",
    "string.byte(",
    "string.char(",
    "string.sub(",
    "string.find(",
    "string.gsub(",
    "string.gmatch(",
    "string.match(",
    "string.upper(",
    "table.insert(t,",
    "table.remove(t)",
    "table.concat(t, ','",
    "table.sort(t)",
    "math.floor(",
    "math.huge",
    "math.random(",
    "math.randomseed(",
    "math.fmod(",
    "math.max(",
    "coroutine.wrap(",
    "coroutine.create(",
    "coroutine.resume(",
    "coroutine.yield(",
];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
}

/// Lua source from tokens (see [`TOKENS`]).
fn tokens(input: &mut Input<'_>) -> Vec<u8> {
    let mut src = Vec::new();
    while let Some(b) = input.byte() {
        let tok = TOKENS[b as usize % TOKENS.len()];
        let p = |input: &mut Input<'_>| input.byte().unwrap_or(0);
        match tok {
            "#N" => {
                let n = p(input);
                let text = match n % 4 {
                    0 => format!("{}", n / 4),
                    1 => format!("{}", (n as i8) as i64 * 1000),
                    2 => format!("{}.{}", n / 4, n % 7),
                    _ => format!("{}", 1i64 << (n % 64)),
                };
                src.extend_from_slice(text.as_bytes());
            }
            "#S" => {
                let n = p(input);
                src.extend_from_slice(format!("'s{n}'").as_bytes());
            }
            "#B" => {
                let n = p(input) as usize % 8;
                src.push(b'\'');
                for _ in 0..n {
                    src.extend_from_slice(format!("\\{}", p(input)).as_bytes());
                }
                src.push(b'\'');
            }
            t => src.extend_from_slice(t.as_bytes()),
        }
        src.push(b' ');
    }
    src
}

/// A C library called on the input's bytes (as Lua string literals), so the fuzzer steers
/// the decoders' input directly: the first byte picks the call, the second where the bytes
/// split into two arguments.
fn library_call(input: &mut Input<'_>) -> Vec<u8> {
    const CALLS: &[&str] = &[
        "return cjson.encode(cjson.decode(A))",
        "return cmsgpack.pack(cmsgpack.unpack(A))",
        "return {cmsgpack.unpack_one(A, #B)}",
        "return {cmsgpack.unpack_limit(A, #B % 5, #B % 3)}",
        "return {struct.unpack(A, B)}",
        "return struct.pack(A, B, #B, -#B, 1.5, B)",
        "return struct.size(A)",
        "return cjson.encode(cmsgpack.unpack(A))",
        "return cmsgpack.pack(cjson.decode(A))",
        "return {pcall(cjson.decode, A)}",
        "return struct.unpack('>i4c0', A)",
    ];
    let call = CALLS[input.byte().unwrap_or(0) as usize % CALLS.len()];
    let split = input.byte().unwrap_or(0) as usize;
    let bytes = input.0;
    let (a, b) = bytes.split_at(split.min(bytes.len()));
    let lit = |x: &[u8]| {
        let mut s = b"'".to_vec();
        for c in x {
            s.extend_from_slice(format!("\\{c}").as_bytes());
        }
        s.push(b'\'');
        s
    };
    let mut out = Vec::new();
    for part in call.as_bytes().split_inclusive(|&c| c == b'A' || c == b'B') {
        match part.split_last() {
            Some((b'A', head)) => {
                out.extend_from_slice(head);
                out.extend_from_slice(&lit(a));
            }
            Some((b'B', head)) => {
                out.extend_from_slice(head);
                out.extend_from_slice(&lit(b));
            }
            _ => out.extend_from_slice(part),
        }
    }
    out
}

/// Every reply is a sequence of complete RESP frames.
fn check_frames(out: &[u8]) {
    let mut rest = out;
    while !rest.is_empty() {
        match resp::reply::frame_len(rest) {
            Ok(Some(n)) => rest = &rest[n..],
            Ok(None) => panic!("incomplete reply: {:?}", String::from_utf8_lossy(out)),
            Err(e) => panic!("malformed reply ({e}): {:?}", String::from_utf8_lossy(out)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut engine = Engine::new(Config::default());
    let mut host = match LuaHost::new(64 << 20) {
        Ok(h) => h,
        Err(e) => panic!("Lua host: {e}"),
    };
    host.set_busy_limit(BUSY_LIMIT);
    engine.scripting = Some(Box::new(host));
    let mut client = Client {
        id: 1,
        ..Client::default()
    };
    let now_us: u64 = 1_700_000_000_000_000;
    let mut out = Vec::new();
    let mut last_sha: Vec<u8> = Vec::new();
    for (n, piece) in data.split(|&b| b == 0xFF).take(MAX_SCRIPTS).enumerate() {
        let mut input = Input(piece);
        let (Some(mode), Some(kv)) = (input.byte(), input.byte()) else {
            continue;
        };
        let src = match mode & 0x41 {
            0 | 0x40 => tokens(&mut input),
            1 => input.0.to_vec(),
            _ => library_call(&mut input),
        };
        let nkeys = (kv & 3).min(3) as usize;
        let nargs = ((kv >> 2) & 3) as usize;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for i in 0..nkeys {
            keys.push(KEYS[(kv as usize >> 4).wrapping_add(i) % KEYS.len()].to_vec());
        }
        let mut args: Vec<Vec<u8>> = Vec::new();
        for i in 0..nargs {
            args.push(WORDS[(kv as usize).wrapping_mul(7).wrapping_add(i) % WORDS.len()].to_vec());
        }
        let numkeys = keys.len().to_string().into_bytes();
        let mut argv: Vec<Vec<u8>> = match (mode >> 1) % 8 {
            // EVAL most of the time.
            0..=3 => vec![b"EVAL".to_vec(), src, numkeys],
            4 => vec![b"EVAL_RO".to_vec(), src, numkeys],
            5 if !last_sha.is_empty() => vec![b"EVALSHA".to_vec(), last_sha.clone(), numkeys],
            5 => vec![b"SCRIPT".to_vec(), b"FLUSH".to_vec()],
            6 => {
                let mut code = format!("#!lua name=lib{n}\n").into_bytes();
                code.extend_from_slice(b"redis.register_function('f', function(KEYS, ARGV) ");
                code.extend_from_slice(&src);
                code.extend_from_slice(b" end)");
                let mut out = Vec::new();
                let load: Vec<&[u8]> = vec![b"FUNCTION", b"LOAD", b"REPLACE", &code];
                engine.exec(&mut client, &load, now_us, &mut out);
                check_frames(&out);
                vec![b"FCALL".to_vec(), b"f".to_vec(), numkeys]
            }
            _ => vec![b"SCRIPT".to_vec(), b"LOAD".to_vec(), src],
        };
        if argv[0] != b"SCRIPT" {
            argv.extend(keys);
            argv.extend(args);
        }
        let refs: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();
        out.clear();
        let started = Instant::now();
        engine.exec(&mut client, &refs, now_us, &mut out);
        let took = started.elapsed();
        assert!(
            took < BUSY_LIMIT + SLACK,
            "{} took {took:?}: {:?}",
            String::from_utf8_lossy(&argv[0]),
            String::from_utf8_lossy(&argv[1])
        );
        check_frames(&out);
        if argv[0] == b"SCRIPT" && argv[1] == b"LOAD" && out.first() == Some(&b'$') {
            // "$40\r\n<sha>\r\n"
            if let Some(sha) = out.get(5..45) {
                last_sha = sha.to_vec();
            }
        }
    }
});
