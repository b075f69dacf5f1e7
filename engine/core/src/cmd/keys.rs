//! Generic keyspace commands, with redis 7.0 `db.c` and `expire.c` semantics.
//!
//! DEL UNLINK EXISTS TOUCH TYPE EXPIRE PEXPIRE EXPIREAT PEXPIREAT (NX XX GT LT) TTL PTTL
//! EXPIRETIME PEXPIRETIME PERSIST RENAME RENAMENX KEYS SCAN RANDOMKEY DBSIZE FLUSHDB FLUSHALL
//! COPY OBJECT WAIT.
//!
//! Keyspace notifications are raised where redis 7.0 raises them: `del`, `expire`, `persist`,
//! `rename_from` + `rename_to`, `copy_to` (all class `g`); FLUSHALL/FLUSHDB raise none.

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::glob;
use crate::keyspace::Keyspace;
use crate::notify::{class, notify};

/// `DEL key [key …]` → number of keys removed.
pub fn del(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    remove_keys(e, c, Keyspace::delete)
}

/// `UNLINK key [key …]` → how many of the keys existed; as DEL, but values that are costly to
/// free are freed later by the cron (`crate::lazyfree`).
pub fn unlink(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    remove_keys(e, c, Keyspace::unlink)
}

/// DEL / UNLINK: `remove` each key, a `del` event per key removed, the count as the reply.
fn remove_keys(
    e: &mut Engine,
    c: &mut Call,
    remove: fn(&mut Keyspace, &[u8], u64) -> bool,
) -> Result<(), CmdError> {
    let mut n = 0;
    for k in &c.argv[1..] {
        if remove(&mut e.ks, k, c.now_ms) {
            notify(e, class::GENERIC, "del", k);
            n += 1;
        }
    }
    c.w().integer(n);
    Ok(())
}

/// `EXISTS key [key …]` → how many of the keys exist (a key named twice counts twice); the
/// keys' idle times are left alone, as Redis does.
pub fn exists(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut n = 0;
    for k in &c.argv[1..] {
        n += i64::from(e.ks.lookup_read_notouch(k, c.now_ms).is_some());
    }
    c.w().integer(n);
    Ok(())
}

/// `TOUCH key [key …]` → how many of the keys exist; their access time is updated.
pub fn touch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut n = 0;
    for k in &c.argv[1..] {
        n += i64::from(e.ks.lookup_read(k, c.now_ms).is_some());
    }
    c.w().integer(n);
    Ok(())
}

/// `TYPE key` → `+string` … or `+none` (the idle time is left alone).
pub fn type_(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let name = match e.ks.lookup_read_notouch(c.argv[1], c.now_ms) {
        Some(i) => e.ks.value(i).type_name(),
        None => "none",
    };
    c.w().simple(name.as_bytes());
    Ok(())
}

/// Conditions of EXPIRE and friends (7.0).
#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

/// redis `parseExtendedExpireArgumentsOrReply`.
fn parse_expire_flags(argv: &[&[u8]]) -> Result<ExpireFlags, CmdError> {
    let mut f = ExpireFlags::default();
    for a in argv {
        if args::is(a, "nx") {
            f.nx = true;
        } else if args::is(a, "xx") {
            f.xx = true;
        } else if args::is(a, "gt") {
            f.gt = true;
        } else if args::is(a, "lt") {
            f.lt = true;
        } else {
            return Err(CmdError::unsupported_option(a));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CmdError::Static(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(CmdError::Static(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

/// Unit and base of an EXPIRE variant.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

/// redis `expireGenericCommand`: `basetime` is now (relative forms) or 0 (absolute forms).
/// → 1 if the TTL was set (or the key deleted because the time is past), 0 if the key is
/// missing or a condition failed.
fn expire_generic(e: &mut Engine, c: &mut Call, base_ms: i64, unit: Unit) -> Result<(), CmdError> {
    let flags = parse_expire_flags(&c.argv[3..])?;
    let mut when = int_arg(c.argv[2])?;
    let bad = CmdError::InvalidExpire(c.spec.name);
    if unit == Unit::Seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(bad);
        }
        when *= 1000;
    }
    if when > i64::MAX - base_ms {
        return Err(bad);
    }
    when += base_ms;
    let Some(i) = e.ks.lookup_write(c.argv[1], c.now_ms) else {
        c.w().integer(0);
        return Ok(());
    };
    let current = e.ks.expire_at(i).map(|t| t as i64);
    let refuse = (flags.nx && current.is_some())
        || (flags.xx && current.is_none())
        || (flags.gt && current.is_none_or(|cur| when <= cur))
        || (flags.lt && current.is_some_and(|cur| when >= cur));
    if refuse {
        c.w().integer(0);
        return Ok(());
    }
    // redis `checkAlreadyExpired`: a time not in the future deletes the key now.
    let key = c.argv[1];
    if when <= c.now_ms as i64 {
        e.ks.remove_at(i);
        notify(e, class::GENERIC, "del", key);
    } else {
        e.ks.set_expire(i, when as u64);
        notify(e, class::GENERIC, "expire", key);
    }
    c.w().integer(1);
    Ok(())
}

/// EXPIRE key seconds [NX|XX|GT|LT].
pub fn expire(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let now = c.now_ms as i64;
    expire_generic(e, c, now, Unit::Seconds)
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT].
pub fn pexpire(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let now = c.now_ms as i64;
    expire_generic(e, c, now, Unit::Millis)
}

/// EXPIREAT key unix-seconds [NX|XX|GT|LT].
pub fn expireat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    expire_generic(e, c, 0, Unit::Seconds)
}

/// PEXPIREAT key unix-ms [NX|XX|GT|LT].
pub fn pexpireat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    expire_generic(e, c, 0, Unit::Millis)
}

/// What a TTL variant reports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TtlOut {
    RemainingSeconds,
    RemainingMillis,
    AbsoluteSeconds,
    AbsoluteMillis,
}

/// redis `ttlGenericCommand`: -2 missing, -1 no TTL; seconds round to nearest.
fn ttl_generic(e: &mut Engine, c: &mut Call, out: TtlOut) -> Result<(), CmdError> {
    let Some(i) = e.ks.lookup_read_notouch(c.argv[1], c.now_ms) else {
        c.w().integer(-2);
        return Ok(());
    };
    let Some(at) = e.ks.expire_at(i) else {
        c.w().integer(-1);
        return Ok(());
    };
    let at = at as i64;
    let now = c.now_ms as i64;
    let v = match out {
        TtlOut::RemainingSeconds => ((at - now).max(0) + 500) / 1000,
        TtlOut::RemainingMillis => (at - now).max(0),
        TtlOut::AbsoluteSeconds => (at + 500) / 1000,
        TtlOut::AbsoluteMillis => at,
    };
    c.w().integer(v);
    Ok(())
}

/// `TTL key` → seconds left | -1 | -2.
pub fn ttl(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    ttl_generic(e, c, TtlOut::RemainingSeconds)
}

/// `PTTL key` → ms left | -1 | -2.
pub fn pttl(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    ttl_generic(e, c, TtlOut::RemainingMillis)
}

/// `EXPIRETIME key` → Unix seconds | -1 | -2.
pub fn expiretime(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    ttl_generic(e, c, TtlOut::AbsoluteSeconds)
}

/// `PEXPIRETIME key` → Unix ms | -1 | -2.
pub fn pexpiretime(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    ttl_generic(e, c, TtlOut::AbsoluteMillis)
}

/// `PERSIST key` → 1 if a TTL was removed, else 0.
pub fn persist(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match e.ks.lookup_write(c.argv[1], c.now_ms) {
        Some(i) => e.ks.persist(i),
        None => false,
    };
    if n {
        notify(e, class::GENERIC, "persist", c.argv[1]);
    }
    c.w().integer(i64::from(n));
    Ok(())
}

/// redis `renameGenericCommand`.
fn rename_generic(e: &mut Engine, c: &mut Call, nx: bool) -> Result<(), CmdError> {
    let (from, to) = (c.argv[1], c.argv[2]);
    let Some(i) = e.ks.lookup_write(from, c.now_ms) else {
        return Err(CmdError::NoSuchKey);
    };
    if from == to {
        if nx {
            c.w().integer(0)
        } else {
            c.w().ok()
        }
        return Ok(());
    }
    if nx && e.ks.lookup_write(to, c.now_ms).is_some() {
        c.w().integer(0);
        return Ok(());
    }
    // The lookup of `to` may have deleted an expired key and moved `from`: look it up again.
    let i = if nx {
        e.ks.lookup_write(from, c.now_ms).expect("present above")
    } else {
        i
    };
    e.ks.rename(i, to, c.now_ms);
    notify(e, class::GENERIC, "rename_from", from);
    notify(e, class::GENERIC, "rename_to", to);
    if nx {
        c.w().integer(1)
    } else {
        c.w().ok()
    }
    Ok(())
}

/// `RENAME key newkey` → OK; `ERR no such key`.
pub fn rename(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    rename_generic(e, c, false)
}

/// `RENAMENX key newkey` → 1 | 0; `ERR no such key`.
pub fn renamenx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    rename_generic(e, c, true)
}

/// `KEYS pattern` → every live key matching (O(N), like Redis).
pub fn keys(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let pattern = c.argv[1];
    let all = pattern == b"*";
    let mut found: Vec<&[u8]> = Vec::new();
    e.ks.for_each_live(c.now_ms, |k, _| {
        if all || glob::matches(pattern, k, false) {
            found.push(k);
        }
    });
    let mut w = c.w();
    w.array(found.len());
    for k in found {
        w.bulk(k);
    }
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]` → [next cursor, [keys…]].
pub fn scan(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cursor = args::parse_u64_cursor(c.argv[1])?;
    let mut count: i64 = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut type_name: Option<&[u8]> = None;
    let argv = c.argv;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        if args::is(argv[i], "count") && more >= 1 {
            count = int_arg(argv[i + 1])?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
        } else if args::is(argv[i], "match") && more >= 1 {
            let p = argv[i + 1];
            pattern = if p == b"*" { None } else { Some(p) };
        } else if args::is(argv[i], "type") && more >= 1 {
            type_name = Some(argv[i + 1]);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let next = e.ks.scan(cursor, count as usize, c.now_ms, |k, v| {
        if let Some(t) = type_name
            && !v.type_name().as_bytes().eq_ignore_ascii_case(t)
        {
            return;
        }
        if let Some(p) = pattern
            && !glob::matches(p, k, false)
        {
            return;
        }
        keys.push(k.to_vec());
    });
    let mut w = c.w();
    w.array(2);
    w.bulk(itoa::Buffer::new().format(next).as_bytes());
    w.array(keys.len());
    for k in &keys {
        w.bulk(k);
    }
    Ok(())
}

/// `RANDOMKEY` → a random live key | nil.
pub fn randomkey(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    // Expired keys met on the way are reclaimed, as in redis `dbRandomKey`; each try either
    // returns or deletes a key, so this ends.
    while let Some(i) = e.ks.random_position() {
        if e.ks.expired_at(i, c.now_ms) {
            e.ks.expire_now(i);
            continue;
        }
        let k = e.ks.get_at(i).0.to_vec();
        c.w().bulk(&k);
        return Ok(());
    }
    c.w().null();
    Ok(())
}

/// `DBSIZE` → number of keys.
pub fn dbsize(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = e.ks.len() as i64;
    c.w().integer(n);
    Ok(())
}

/// `FLUSHDB|FLUSHALL [ASYNC|SYNC]` → OK. ASYNC releases the old entries from `cron`.
pub fn flush(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let lazy = match c.argv.len() {
        1 => false,
        2 if args::is(c.argv[1], "sync") => false,
        2 if args::is(c.argv[1], "async") => true,
        _ => return Err(CmdError::Syntax),
    };
    e.ks.flush(lazy);
    let db = e.current_db();
    crate::blocking::db_flushed(e, db);
    crate::tracking::flushed(e);
    c.w().ok();
    Ok(())
}

/// `FLUSHALL [ASYNC|SYNC]` → OK: [`flush`] of every database.
pub fn flushall(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let lazy = match c.argv.len() {
        1 => false,
        2 if args::is(c.argv[1], "sync") => false,
        2 if args::is(c.argv[1], "async") => true,
        _ => return Err(CmdError::Syntax),
    };
    for n in 0..e.databases() {
        if !e.db(n).is_empty() {
            e.with_db(n, |e| e.ks.flush(lazy));
            crate::blocking::db_flushed(e, n);
            // Keychange feed: each database emptied is flushed on its own (docs/feed.md).
            crate::effect::propagate_db(e, n, &[b"FLUSHALL"]);
        }
    }
    crate::tracking::flushed(e);
    c.w().ok();
    Ok(())
}

/// `MOVE key db` → 1 if moved, 0 if the key is missing here or exists there (redis
/// `moveCommand`, its checks in its order). The value and TTL move as they are.
pub fn move_(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let id = int_arg(c.argv[2])?;
    if i32::try_from(id).is_err() {
        // redis `getIntFromObjectOrReply`, its wording included.
        return Err(CmdError::Static(
            "ERR value is out of range, value must between -2147483648 and 2147483647",
        ));
    }
    let dst = crate::cmd::connection::db_index(e, id)?;
    let src = e.current_db();
    if dst == src {
        return Err(CmdError::Static(
            "ERR source and destination objects are the same",
        ));
    }
    let key = c.argv[1];
    let now_ms = c.now_ms;
    let Some(i) = e.ks.lookup_write(key, now_ms) else {
        c.w().integer(0);
        return Ok(());
    };
    if e.with_db(dst, |e| e.ks.lookup_write(key, now_ms).is_some()) {
        c.w().integer(0);
        return Ok(());
    }
    let (_, entry) = e.ks.remove_at(i);
    let expire_at = entry.expire_at();
    e.with_db(dst, |e| {
        let d =
            e.ks.set(key, entry.value, crate::keyspace::Keep::Nothing, None);
        if let Some(at) = expire_at {
            e.ks.set_expire(d, at);
        }
        crate::blocking::signal_ready(e, key);
    });
    notify(e, class::GENERIC, "move_from", key);
    e.with_db(dst, |e| notify(e, class::GENERIC, "move_to", key));
    c.w().integer(1);
    Ok(())
}

/// `SWAPDB index1 index2` → OK: the two databases exchange their data (redis
/// `dbSwapDatabases`); clients stay on their index, WATCHes of keys present in either fail,
/// and clients blocked on a key the swap brings are served.
pub fn swapdb(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    // redis `getIntFromObjectOrReply` with its own message for either failure.
    let parse = |a: &[u8], msg: &'static str| {
        resp::parse_i64(a)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or(CmdError::Static(msg))
    };
    let a = parse(c.argv[1], "ERR invalid first DB index")?;
    let b = parse(c.argv[2], "ERR invalid second DB index")?;
    let (a, b) = (
        crate::cmd::connection::db_index(e, a)?,
        crate::cmd::connection::db_index(e, b)?,
    );
    if a != b {
        e.swap_dbs(a, b);
        crate::tracking::flushed(e);
    }
    e.ks.dirty += 1;
    c.w().ok();
    Ok(())
}

/// `COPY source destination [DB 0] [REPLACE]` → 1 if copied, 0 if the source is missing or
/// the destination exists (without REPLACE); the TTL is copied too. `DB n` writes into
/// database `n` (redis `copyCommand`).
pub fn copy(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut replace = false;
    let src_db = e.current_db();
    let mut dst_db = src_db;
    let mut j = 3;
    while j < argv.len() {
        if args::is(argv[j], "replace") {
            replace = true;
        } else if args::is(argv[j], "db") && j + 1 < argv.len() {
            let db = int_arg(argv[j + 1])?;
            if i32::try_from(db).is_err() {
                // redis `getIntFromObjectOrReply`, its wording included.
                return Err(CmdError::Static(
                    "ERR value is out of range, value must between -2147483648 and 2147483647",
                ));
            }
            dst_db = crate::cmd::connection::db_index(e, db)?;
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let (src, dst) = (argv[1], argv[2]);
    if src_db == dst_db && src == dst {
        return Err(CmdError::Static(
            "ERR source and destination objects are the same",
        ));
    }
    let Some(i) = e.ks.lookup_read(src, c.now_ms) else {
        c.w().integer(0);
        return Ok(());
    };
    let value = e.ks.value(i).clone();
    let expire_at = e.ks.expire_at(i);
    let now_ms = c.now_ms;
    // The destination may be another database: swapped in for the write, then back.
    let copied = e.with_db(dst_db, |e| {
        if let Some(d) = e.ks.lookup_write(dst, now_ms) {
            if !replace {
                return false;
            }
            // Redis deletes and re-adds, so the destination is a `new` key again.
            e.ks.remove_at(d);
        }
        let d = e.ks.set(dst, value, crate::keyspace::Keep::Nothing, None);
        if let Some(at) = expire_at {
            e.ks.set_expire(d, at);
        }
        notify(e, class::GENERIC, "copy_to", dst);
        true
    });
    c.w().integer(i64::from(copied));
    Ok(())
}

/// The value at `key` for OBJECT (no hit/miss accounting, like redis `LOOKUP_NOTOUCH`), or a
/// null reply when it is missing.
fn object_lookup(e: &mut Engine, c: &mut Call) -> Option<usize> {
    // OBJECT does not count as an access (redis `LOOKUP_NOTOUCH`).
    let found = e.ks.lookup_notouch(c.argv[2], c.now_ms);
    if found.is_none() {
        c.w().null();
    }
    found
}

/// OBJECT ENCODING of a value: what Redis 7.0 would report for the same data (see each type's
/// `encoding`).
fn encoding_of(v: &crate::types::Value) -> &'static str {
    use crate::types::Value;
    match v {
        Value::Str(s) => s.encoding(),
        Value::Hash(h) => h.encoding(),
        Value::Set(s) => s.encoding(),
        Value::ZSet(z) => z.encoding(),
        // Redis 7.0 keeps every list in a quicklist.
        Value::List(_) => "quicklist",
        Value::Stream(_) => "stream",
    }
}

/// `OBJECT ENCODING key` → encoding name | nil.
pub fn object_encoding(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if let Some(i) = object_lookup(e, c) {
        let enc = encoding_of(e.ks.value(i));
        c.w().bulk(enc.as_bytes());
    }
    Ok(())
}

/// Whether integers 0..9999 are shared objects (redis `tryObjectEncoding`: not under an LRU or
/// LFU eviction policy with a memory limit).
fn shared_integers(e: &Engine) -> bool {
    let p = e.config.maxmemory_policy;
    e.config.maxmemory == 0 || !(p.ends_with("lru") || p.ends_with("lfu"))
}

/// `OBJECT REFCOUNT key` → 1, or 2147483647 for a shared integer 0..9999 (as Redis).
pub fn object_refcount(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if let Some(i) = object_lookup(e, c) {
        let shared = matches!(
            e.ks.value(i),
            crate::types::Value::Str(crate::types::StrValue::Int(n)) if (0..10_000).contains(n)
        ) && shared_integers(e);
        c.w().integer(if shared { i32::MAX as i64 } else { 1 });
    }
    Ok(())
}

/// `OBJECT IDLETIME key` → seconds since last access (the LRU clock, `crate::evict`); under
/// an LFU policy it is refused like Redis.
pub fn object_idletime(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if let Some(i) = object_lookup(e, c) {
        if e.config.maxmemory_policy.ends_with("lfu") {
            return Err(CmdError::Static(
                "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ));
        }
        let idle = crate::evict::object_idletime(e, i, c.now_ms);
        c.w().integer(idle as i64);
    }
    Ok(())
}

/// `OBJECT FREQ key` → refused unless an LFU policy is set (Redis's text); then the key's
/// decayed logarithmic access counter (`crate::evict`).
pub fn object_freq(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if let Some(i) = object_lookup(e, c) {
        if !e.config.maxmemory_policy.ends_with("lfu") {
            return Err(CmdError::Static(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ));
        }
        let freq = crate::evict::object_freq(e, i, c.now_ms);
        c.w().integer(i64::from(freq));
    }
    Ok(())
}

/// OBJECT HELP.
pub fn object_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(LINES.len());
    for l in LINES {
        w.simple(l.as_bytes());
    }
    Ok(())
}

/// `WAIT numreplicas timeout` → 0: an engine has no replicas, so no write is ever acknowledged
/// (Redis would block until the timeout first when `numreplicas` > 0; answering at once is the
/// useful behaviour here, as nothing could arrive).
pub fn wait(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    int_arg(c.argv[1])?;
    let timeout = args::parse_i64(c.argv[2]).ok_or(CmdError::Static(
        "ERR timeout is not an integer or out of range",
    ))?;
    if timeout < 0 {
        return Err(CmdError::Static("ERR timeout is negative"));
    }
    c.w().integer(0);
    Ok(())
}
