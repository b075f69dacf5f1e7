//! Effects: the deterministic, one-key commands that reproduce each change of the keyspace
//! (docs/feed.md has the full table; Redis's `propagate` / `alsoPropagate` is the model).
//!
//! # How a command's effect is found
//! The dispatcher calls [`begin`] before a handler and [`end`] after it, only while someone
//! subscribes to the feed (otherwise `begin` is one test and returns `None`). In between,
//! every keyspace notification (`notify::notify`, which every write calls for each key
//! it changed, exactly when it changed it) adds its key to `Feed::changed`. `end` then:
//! 1. records `DEL k` for keys deleted by expiry or eviction meanwhile (the keyspace logs them,
//!    see [`record_deleted`]) — they happened before the command's own change;
//! 2. stops unless the command has the `write` flag and itself changed the keyspace
//!    (`Keyspace::dirty` moved by more than the deletions of step 1);
//! 3. uses the effects the handler chose with [`propagate`], if any; else applies the rule
//!    for the command name ([`derive`]): *as sent* for deterministic one-key commands,
//!    rewritten from the state after the command for clock/random/float-dependent or
//!    multi-key ones, and for anything else the **recreate** rule: for each changed key,
//!    `DEL k` followed by the commands that rebuild its current value and TTL (the same
//!    commands a snapshot sends). That fallback is always correct, so a command missing
//!    from the table costs bytes, never divergence.
//!
//! Every effect names at most one key, at `arg1` (FLUSHALL names none), so a subscriber can
//! filter by prefix with one comparison.
//!
//! # Databases
//! Every effect belongs to one database: the one its key lives in (`Feed::changed` and
//! `Keyspace::feed_dels` hold `(database, key)`; a plain [`emit`] is the running command's
//! database). Commands that reach into another database (MOVE, COPY … DB, SWAPDB, FLUSHALL)
//! thus become effects on each database they changed, each applicable to a replica holding
//! that one database: MOVE = `DEL k` in the source, `k`'s new state in the destination;
//! SWAPDB = for each of the two, `FLUSHALL` then every key of its new content; FLUSHALL =
//! `FLUSHALL` in each database that was not empty (chosen by its handler, [`propagate_db`]).
//!
//! # Reading the reply
//! Only SPOP needs it (which members were popped): the reply bytes the handler wrote are
//! parsed ([`reply_bulks`]); anything unexpected falls back to the recreate rule.

use resp::Proto;

use crate::Engine;
use crate::command::CommandSpec;
use crate::feed;
use crate::types::Value;

/// State saved by [`begin`] for [`end`].
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    dirty: u64,
    dels: u64,
    capturing: bool,
}

/// Records `DEL key` for a key removed outside a command's own logic. Costs one test when
/// nobody subscribes. Ordered with expiry deletions; emitted before the effect of the command
/// during which it happened. (Eviction needs no call: its `evicted` notification records it,
/// see [`note_changed`].)
pub fn record_deleted(e: &mut Engine, key: &[u8]) {
    e.ks.feed_deleted(key);
}

/// For a handler whose change the rules here do not describe: records `args` as one of this
/// command's effects, replacing the default rule (call once per effect, in order). `args`
/// must name at most one key, at `args[1]`.
pub fn propagate(e: &mut Engine, args: &[&[u8]]) {
    let db = e.current_db();
    propagate_db(e, db, args);
}

/// For a write that turned out to change nothing a replica must see: records no effect
/// (instead of the recreate rule). Effects chosen before or after still count.
pub fn suppress(e: &mut Engine) {
    if e.feed.capturing {
        e.feed.chosen.get_or_insert_with(Vec::new);
    }
}

/// [`propagate`] for an effect on database `db` (a handler that changes another database
/// than the one it runs on).
pub fn propagate_db(e: &mut Engine, db: usize, args: &[&[u8]]) {
    if e.feed.capturing {
        e.feed
            .chosen
            .get_or_insert_with(Vec::new)
            .push((db, args.iter().map(|a| a.to_vec()).collect()));
    }
}

/// Called by `notify::notify` for every key a command changes, and for every evicted
/// key (`class::EVICTED`, sent by `evict.rs` after the key left the keyspace): an eviction is
/// recorded as `DEL key` from here, so eviction code needs no call of its own.
#[inline]
pub fn note_changed(e: &mut Engine, class: u32, key: &[u8]) {
    if !e.ks.feed_on {
        return;
    }
    if class == crate::notify::class::EVICTED {
        e.ks.feed_deleted(key);
    } else if e.feed.capturing {
        // The database the key is in: a command reaching into another one (MOVE, COPY … DB)
        // notifies with that database swapped in.
        let db = e.current_db();
        e.feed.changed.push((db, key.into()));
    }
}

/// Emits the `DEL` effects the keyspace logged (expiry, eviction), oldest first.
pub fn flush_deleted(e: &mut Engine) {
    if e.ks.feed_dels.is_empty() {
        return;
    }
    let dels = std::mem::take(&mut e.ks.feed_dels);
    for (db, k) in &dels {
        emit_db(e, *db, &[b"DEL", k]);
    }
    // Give the allocation back.
    let mut dels = dels;
    dels.clear();
    if e.ks.feed_dels.is_empty() {
        e.ks.feed_dels = dels;
    }
}

/// One effect on the running command's database, to every subscriber.
fn emit(e: &mut Engine, args: &[&[u8]]) {
    let db = e.current_db();
    emit_db(e, db, args);
}

/// One effect on database `db`, to every subscriber.
fn emit_db(e: &mut Engine, db: usize, args: &[&[u8]]) {
    // A guest's changes reach the feed from its owner (`crate::txlock`).
    if args.len() > 1 && e.locks.is_guest(db, args[1]) {
        return;
    }
    e.feed
        .emit(&mut e.deliveries, e.config.feed_buffer_limit, db, args);
}

/// Before a handler runs. `None` (and nothing else) when nobody subscribes.
#[inline]
pub fn begin(e: &mut Engine) -> Option<Mark> {
    if !e.feed.is_active() {
        return None;
    }
    Some(begin_slow(e))
}

fn begin_slow(e: &mut Engine) -> Mark {
    flush_deleted(e);
    let mark = Mark {
        dirty: e.ks.dirty,
        dels: e.ks.feed_del_count,
        capturing: e.feed.capturing,
    };
    if !mark.capturing {
        e.feed.changed.clear();
        e.feed.chosen = None;
    }
    e.feed.capturing = true;
    mark
}

/// After a handler: records the command's effects (see the module doc). `reply` is the
/// reply it wrote, in `proto`.
pub fn end(
    e: &mut Engine,
    mark: Mark,
    spec: &CommandSpec,
    argv: &[&[u8]],
    reply: &[u8],
    proto: Proto,
) {
    flush_deleted(e);
    // A nested command (inside EXEC) must not take the outer command's capture state away;
    // the outer one (EXEC) is not a write and records nothing of its own.
    e.feed.capturing = mark.capturing;
    let chosen = e.feed.chosen.take();
    let changed = std::mem::take(&mut e.feed.changed);
    if !e.feed.is_active() {
        return;
    }
    if let Some(list) = chosen {
        for (db, args) in &list {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            emit_db(e, *db, &refs);
        }
        return;
    }
    let own = (e.ks.dirty - mark.dirty).saturating_sub(e.ks.feed_del_count - mark.dels);
    if own == 0 || !spec.has_flag(crate::command::Flags::WRITE) {
        return;
    }
    derive(e, spec, argv, reply, proto, changed);
}

/// The effect verb of a key that left this engine by MIGRATE for another cluster node:
/// `MIGRATED k`. Not a command: a replica of this one engine deletes `k`; one merging
/// every engine's feed (the fan-out) keeps it, since the target's feed brings its copy.
pub const MIGRATED: &[u8] = b"MIGRATED";

/// A key and the database it is in.
type DbKey = (usize, Box<[u8]>);

/// `changed` sorted and deduplicated (order between different keys does not matter: each
/// key's effects are independent), databases in the order they were changed; when no key was reported, the command's key arguments
/// that it may write (the one extractor's keys, less those its key specs mark read-only) in
/// the running command's database.
fn changed_keys(
    e: &Engine,
    spec: &CommandSpec,
    argv: &[&[u8]],
    mut changed: Vec<DbKey>,
) -> Vec<DbKey> {
    if changed.is_empty() {
        let db = e.current_db();
        return crate::command::keys(spec, argv)
            .as_slice()
            .iter()
            .filter(|k| !k.flags.contains(crate::command::KeyFlags::RO))
            .map(|k| (db, argv[k.pos].into()))
            .collect();
    }
    // Databases in the order the command changed them (MOVE: the source, then the
    // destination); keys sorted within each.
    let mut dbs: Vec<usize> = Vec::new();
    for (db, _) in &changed {
        if !dbs.contains(db) {
            dbs.push(*db);
        }
    }
    changed.sort_unstable();
    changed.dedup();
    if dbs.len() > 1 {
        changed.sort_by_key(|(db, _)| dbs.iter().position(|d| d == db));
    }
    changed
}

/// `key` in the running command's database.
fn here(e: &Engine, key: &[u8]) -> DbKey {
    (e.current_db(), key.into())
}

fn is(a: &[u8], word: &str) -> bool {
    a.eq_ignore_ascii_case(word.as_bytes())
}

/// The rule for each command (docs/feed.md, *Effects*).
fn derive(
    e: &mut Engine,
    spec: &CommandSpec,
    argv: &[&[u8]],
    reply: &[u8],
    proto: Proto,
    changed: Vec<DbKey>,
) {
    let _ = proto;
    match spec.name {
        "set" if argv.len() == 3 => emit(e, argv),
        "setnx" | "getset" | "getdel" | "append" | "incr" | "decr" | "incrby" | "decrby"
        | "setrange" | "persist" | "lpush" | "rpush" | "lpushx" | "rpushx" | "lpop" | "rpop"
        | "lset" | "lrem" | "ltrim" | "linsert" | "hset" | "hmset" | "hsetnx" | "hdel"
        | "hincrby" | "sadd" | "srem" | "zadd" | "zincrby" | "zrem" | "zremrangebyscore"
        | "zremrangebyrank" | "zremrangebylex" | "zpopmin" | "zpopmax" | "setbit" | "bitfield" => {
            emit(e, argv)
        }
        "set" | "setex" | "psetex" | "incrbyfloat" => string_state(e, argv[1]),
        "expire" | "pexpire" | "expireat" | "pexpireat" | "getex" => ttl_state(e, argv[1]),
        "hincrbyfloat" => match field_value(e, argv[1], argv[2]) {
            Some(v) => emit(e, &[b"HSET", argv[1], argv[2], &v]),
            None => recreate_keys(e, &[here(e, argv[1])]),
        },
        "mset" | "msetnx" => {
            for pair in argv[1..].chunks_exact(2) {
                emit(e, &[b"SET", pair[0], pair[1]]);
            }
        }
        "del" | "unlink" => {
            for (db, k) in changed_keys(e, spec, argv, changed) {
                emit_db(e, db, &[b"DEL", &k]);
            }
        }
        // A key MIGRATE handed to another node of the cluster (not COPY: the only keys it
        // changes are those it deleted after the target took them). The target's feed
        // carries the key's new copy (its RESTORE's effects), so a subscriber merging every
        // engine's feed must not delete it on this one's word: the two feeds race
        // (docs/feed.md, *Keys that move*). Standalone, the key leaves the fleet: `DEL`.
        // SLOTHANDOFF: the same deletion, when `recached resize` relays the keys itself.
        "migrate" | "slothandoff" => {
            let verb: &[u8] = if e.cluster.enabled() {
                MIGRATED
            } else {
                b"DEL"
            };
            for (db, k) in changed_keys(e, spec, argv, changed) {
                emit_db(e, db, &[verb, &k]);
            }
        }
        // FLUSHALL's handler chooses its effects (one per database it emptied); this is
        // FLUSHDB, or FLUSHALL run by a caller that did not capture.
        "flushdb" => emit(e, &[b"FLUSHALL"]),
        "flushall" => {
            for db in 0..e.databases() {
                emit_db(e, db, &[b"FLUSHALL"]);
            }
        }
        "swapdb" => {
            // Each of the two databases starts over from its new content.
            let index = |a: &[u8]| {
                resp::parse_i64(a)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n < e.databases())
            };
            let (Some(a), Some(b)) = (index(argv[1]), index(argv[2])) else {
                return;
            };
            if a == b {
                return;
            }
            for db in [a, b] {
                emit_db(e, db, &[b"FLUSHALL"]);
                e.with_db(db, |e| {
                    let keys: Vec<DbKey> =
                        e.ks.iter_entries().map(|(k, _)| (db, k.into())).collect();
                    recreate_keys(e, &keys);
                });
            }
        }
        "spop" => match reply_bulks(reply) {
            Some(members) if !members.is_empty() => {
                let mut args: Vec<&[u8]> = vec![b"SREM", argv[1]];
                args.extend(members);
                emit(e, &args);
            }
            _ => recreate_keys(e, &changed_keys(e, spec, argv, changed)),
        },
        "smove" => {
            if argv[1] != argv[2] {
                emit(e, &[b"SREM", argv[1], argv[3]]);
                emit(e, &[b"SADD", argv[2], argv[3]]);
            }
        }
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => {
            let pop: &[u8] = match spec.name {
                "blpop" => b"LPOP",
                "brpop" => b"RPOP",
                "bzpopmin" => b"ZPOPMIN",
                _ => b"ZPOPMAX",
            };
            let keys = changed_keys(e, spec, argv, changed);
            match &keys[..] {
                [(db, k)] => emit_db(e, *db, &[pop, k]),
                _ => recreate_keys(e, &keys),
            }
        }
        "lmpop" | "blmpop" | "zmpop" | "bzmpop" => {
            let keys = changed_keys(e, spec, argv, changed);
            match (&keys[..], mpop_effect(spec.name, argv)) {
                ([(db, k)], Some((pop, count))) => match count {
                    Some(n) => emit_db(e, *db, &[pop, k, n]),
                    None => emit_db(e, *db, &[pop, k]),
                },
                _ => recreate_keys(e, &keys),
            }
        }
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" => {
            let (src, dst) = (argv[1], argv[2]);
            let (from, to): (&[u8], &[u8]) = match spec.name {
                "lmove" | "blmove" => (argv[3], argv[4]),
                _ => (b"RIGHT", b"LEFT"),
            };
            if src == dst {
                emit(e, &[b"LMOVE", src, dst, from, to]);
                return;
            }
            let left = is(to, "left");
            let moved = match e.ks.get_entry(dst).map(|en| en.value) {
                Some(Value::List(l)) => if left {
                    l.iter().next()
                } else {
                    l.iter().next_back()
                }
                .map(<[u8]>::to_vec),
                _ => None,
            };
            match moved {
                Some(elem) => {
                    let pop: &[u8] = if is(from, "left") { b"LPOP" } else { b"RPOP" };
                    let push: &[u8] = if left { b"LPUSH" } else { b"RPUSH" };
                    emit(e, &[pop, src]);
                    emit(e, &[push, dst, &elem]);
                }
                None => recreate_keys(e, &[here(e, src), here(e, dst)]),
            }
        }
        _ => recreate_keys(e, &changed_keys(e, spec, argv, changed)),
    }
}

/// `(pop command, count)` for LMPOP/BLMPOP/ZMPOP/BZMPOP:
/// `[timeout] numkeys key… LEFT|RIGHT|MIN|MAX [COUNT n]` (already validated by the handler).
fn mpop_effect<'a>(name: &str, argv: &[&'a [u8]]) -> Option<(&'static [u8], Option<&'a [u8]>)> {
    let base = if name.starts_with('b') { 2 } else { 1 };
    let numkeys: usize = std::str::from_utf8(argv.get(base)?).ok()?.parse().ok()?;
    let dir_at = base.checked_add(1)?.checked_add(numkeys)?;
    let dir = argv.get(dir_at)?;
    let pop: &'static [u8] = if is(dir, "left") {
        b"LPOP"
    } else if is(dir, "right") {
        b"RPOP"
    } else if is(dir, "min") {
        b"ZPOPMIN"
    } else if is(dir, "max") {
        b"ZPOPMAX"
    } else {
        return None;
    };
    let count = match argv.get(dir_at + 1) {
        None => None,
        Some(w) if is(w, "count") && argv.len() == dir_at + 3 => Some(argv[dir_at + 2]),
        Some(_) => return None,
    };
    Some((pop, count))
}

/// `SET k v [PXAT t]` from the stored string (`DEL k` if gone).
fn string_state(e: &mut Engine, key: &[u8]) {
    let state = match e.ks.get_entry(key) {
        None => None,
        Some(en) => match &en.value {
            Value::Str(s) => {
                let mut buf = itoa::Buffer::new();
                Some((s.bytes(&mut buf).to_vec(), en.expire_at()))
            }
            _ => return recreate_keys(e, &[here(e, key)]),
        },
    };
    match state {
        None => emit(e, &[b"DEL", key]),
        Some((v, None)) => emit(e, &[b"SET", key, &v]),
        Some((v, Some(at))) => {
            let mut buf = itoa::Buffer::new();
            emit(e, &[b"SET", key, &v, b"PXAT", buf.format(at).as_bytes()]);
        }
    }
}

/// `PEXPIREAT k t`, `PERSIST k`, or `DEL k`, from the key's state.
fn ttl_state(e: &mut Engine, key: &[u8]) {
    match e.ks.get_entry(key).map(|en| en.expire_at()) {
        None => emit(e, &[b"DEL", key]),
        Some(None) => emit(e, &[b"PERSIST", key]),
        Some(Some(at)) => {
            let mut buf = itoa::Buffer::new();
            emit(e, &[b"PEXPIREAT", key, buf.format(at).as_bytes()]);
        }
    }
}

/// The stored value of hash field `field` of `key`.
fn field_value(e: &Engine, key: &[u8], field: &[u8]) -> Option<Vec<u8>> {
    match &e.ks.get_entry(key)?.value {
        Value::Hash(h) => h.get(field).map(<[u8]>::to_vec),
        _ => None,
    }
}

/// The recreate rule: for each key, `DEL k`, then its current value and TTL (if it exists),
/// in the key's database.
fn recreate_keys(e: &mut Engine, keys: &[DbKey]) {
    for (db, k) in keys {
        let db = *db;
        emit_db(e, db, &[b"DEL", k]);
        e.with_db(db, |e| {
            let Some(entry) = e.ks.get_entry(k) else {
                return;
            };
            let feed = &mut e.feed;
            let deliveries = &mut e.deliveries;
            let limit = e.config.feed_buffer_limit;
            feed::recreate(k, &entry, &mut |args| {
                feed.emit(deliveries, limit, db, args)
            });
        });
    }
}

/// The bulk strings of a reply that is one bulk string, a null, or an array/set/push of bulk
/// strings (RESP2 or RESP3). `None` for anything else.
pub fn reply_bulks(reply: &[u8]) -> Option<Vec<&[u8]>> {
    fn line(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let rest = b.get(at..)?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        Some((&rest[..end], at + end + 2))
    }
    fn num(s: &[u8]) -> Option<i64> {
        std::str::from_utf8(s).ok()?.parse().ok()
    }
    // One element at `at`: Some(bulk) or None for a null; plus the next position.
    fn elem(b: &[u8], at: usize) -> Option<(Option<&[u8]>, usize)> {
        let (head, next) = line(b, at)?;
        match head.first()? {
            b'$' => {
                let n = num(&head[1..])?;
                if n < 0 {
                    return Some((None, next));
                }
                let end = next.checked_add(n as usize)?;
                let data = b.get(next..end)?;
                if b.get(end..end + 2)? != b"\r\n" {
                    return None;
                }
                Some((Some(data), end + 2))
            }
            b'_' => Some((None, next)),
            _ => None,
        }
    }
    let (head, mut at) = line(reply, 0)?;
    match head.first()? {
        b'*' | b'~' | b'>' => {
            let n = num(&head[1..])?;
            let mut v = Vec::with_capacity(n.clamp(0, 1024) as usize);
            for _ in 0..n.max(0) {
                let (x, next) = elem(reply, at)?;
                v.push(x?);
                at = next;
            }
            Some(v)
        }
        _ => {
            let (x, _) = elem(reply, 0)?;
            Some(x.into_iter().collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_bulks_shapes() {
        assert_eq!(reply_bulks(b"$1\r\na\r\n"), Some(vec![&b"a"[..]]));
        assert_eq!(reply_bulks(b"$-1\r\n"), Some(vec![]));
        assert_eq!(reply_bulks(b"_\r\n"), Some(vec![]));
        assert_eq!(
            reply_bulks(b"*2\r\n$1\r\na\r\n$0\r\n\r\n"),
            Some(vec![&b"a"[..], &b""[..]])
        );
        assert_eq!(reply_bulks(b"~1\r\n$2\r\nab\r\n"), Some(vec![&b"ab"[..]]));
        assert_eq!(reply_bulks(b"*0\r\n"), Some(vec![]));
        assert_eq!(reply_bulks(b"-ERR x\r\n"), None);
        assert_eq!(reply_bulks(b":1\r\n"), None);
        assert_eq!(reply_bulks(b"*2\r\n$1\r\na\r\n"), None);
        assert_eq!(reply_bulks(b"$5\r\nab\r\n"), None);
    }
}
