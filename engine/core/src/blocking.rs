//! Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP):
//! parked clients, readiness and timeouts (redis `blocked.c`, `timeout.c`).
//!
//! The core has no view of sockets. The life of a blocking command:
//!
//! 1. **Park.** Its handler parses its timeout with [`parse_timeout`] (which gives the
//!    deadline), looks at its keys and, if nothing can be served, calls [`block`]. `block`
//!    registers `(client id, protocol, a copy of argv, keys, deadline)` and sets
//!    `c.flow = Flow::Block`; the handler writes **no** reply and returns `Ok(())`. The server
//!    then runs none of that client's further requests until a [`Delivery`] with `unblock`
//!    arrives for it. When blocking is not allowed (inside EXEC, redis `CLIENT_DENY_BLOCKING`),
//!    `block` returns `false` and registers nothing: the handler writes its "nothing" reply
//!    itself (BLPOP/BLMPOP/BZ*: null array; BLMOVE/BRPOPLPUSH: null bulk — as Redis).
//! 2. **Ready.** After every command that changed the keyspace, each of its arguments that has
//!    a parked client is marked ready ([`after_command`], one call in `dispatch::exec`; an
//!    argument that is not really a key only costs a harmless re-run). Handlers that add
//!    elements may also call [`signal_ready`] directly. Redis 7.0 does the same with
//!    `signalKeyAsReady` from `dbAdd`.
//! 3. **Serve.** Once the command is over (and, for a transaction, once EXEC is over), the
//!    ready keys are served ([`handle_ready`]): for each ready key that holds a value of the
//!    type a waiter wants, its waiters are re-run in the order they blocked (FIFO, like Redis),
//!    each through the normal dispatcher with a temporary [`Client`] carrying its id and
//!    protocol. A re-run that finds data writes its reply, which is queued as a `Delivery`
//!    with `unblock: true`, and the client is forgotten; a re-run that calls [`block`] again
//!    leaves the client parked where it was (same deadline, same place in the queues).
//!    Re-runs that write (BLMOVE pushing into its destination) make more keys ready; the loop
//!    runs until no key is ready, bounded by [`MAX_RERUNS_PER_ROUND`].
//! 4. **Time out.** [`Engine::next_deadline_us`](crate::Engine::next_deadline_us) is the
//!    earliest deadline; `Engine::timeouts(now)` answers every client whose deadline is
//!    `<= now` with a null array (RESP2 `*-1`, RESP3 `_`: redis `replyToBlockedClientTimedOut`
//!    uses `addReplyNullArray` for lists and sorted sets, BLMOVE included).
//! 5. **Disconnect.** `Engine::client_closed(id)` forgets a parked client ([`Blocking::remove`]).
//!
//! # Differences from Redis 7.0
//! - A woken command is re-run as a whole (Redis 7.2's approach), so a BLPOP on several keys
//!   pops from the first non-empty key in argument order, not necessarily from the key that
//!   became ready (they differ only when one transaction fills several of its keys).
//! - A waiter whose key now holds another type stays parked (7.0); a woken BLMOVE whose
//!   destination has the wrong type gets WRONGTYPE and is unblocked (7.0 too).
//!
//! # Timeouts
//! Seconds as a `long double` (`strtold` grammar, [`LongDouble::parse`]); the value is
//! truncated to whole milliseconds, so `0.0004` and `-0.0004` mean "forever" like `0`, exactly
//! as `getTimeoutFromObjectOrReply` computes it. Errors: `ERR timeout is not a float or out of
//! range`, `ERR timeout is negative` (also for `inf` and values past i64 ms, which the C cast
//! turns into `LLONG_MIN`).
//!
//! # Cost and bounds
//! With nothing parked every hook is one `is_empty` test. Memory per parked client is its argv
//! copy (bounded by the request size limits) plus one entry per distinct key.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use resp::{Proto, ReplyWriter};

use crate::call::Call;
use crate::dispatch;
use crate::error::CmdError;
use crate::types::ldouble::LongDouble;
use crate::{Client, Delivery, Engine, Flow};

/// Upper bound on re-runs in one [`handle_ready`] round: every serving re-run removes a parked
/// client and a re-run that finds nothing writes nothing, so the loop ends by itself; this is
/// a guard against a bug turning into a hang. Keys still ready stay queued for the next round.
pub const MAX_RERUNS_PER_ROUND: usize = 1_000_000;

/// One parked client.
#[derive(Debug)]
struct Parked {
    proto: Proto,
    /// The blocking command as sent (name first), re-run when a key is ready.
    argv: Vec<Vec<u8>>,
    /// The database it runs in (SELECT).
    db: usize,
    /// Distinct keys it waits on, in argument order, `keyspace::qualify`d by `db`.
    keys: Vec<Box<[u8]>>,
    /// Unix µs; `None` = timeout 0 (forever).
    deadline_us: Option<u64>,
    /// TYPE name of the value it can be served from (`list`, `zset`, `stream`).
    kind: &'static str,
    /// Re-run even when the key is gone or holds another type (XREADGROUP, which then
    /// answers `-UNBLOCKED`, redis `unblockDeletedStreamReadgroupClients`).
    rerun_when_gone: bool,
    /// The connection's local address (the host a `-MOVED` announces, [`redirect_moved`]).
    laddr: String,
}

/// The engine's registry of parked clients.
#[derive(Debug, Default)]
pub struct Blocking {
    /// Parked clients by client id.
    parked: HashMap<u64, Parked>,
    /// Key → ids of the clients waiting on it, in the order they blocked.
    by_key: HashMap<Box<[u8]>, VecDeque<u64>>,
    /// `(deadline µs, client id)`, earliest first.
    deadlines: BTreeSet<(u64, u64)>,
    /// Keys marked ready and not yet served, oldest first; `ready_set` dedups them.
    ready: VecDeque<Box<[u8]>>,
    ready_set: HashSet<Box<[u8]>>,
    /// The client whose command is being re-run (its [`block`] call keeps it parked).
    pub(crate) rerun_of: Option<u64>,
    /// [`handle_ready`] is running: nested commands only mark keys.
    serving: bool,
    /// Buffer for qualifying a key without allocating ([`Blocking::mark_ready`]).
    scratch: Vec<u8>,
}

impl Blocking {
    /// Nobody is parked.
    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// Number of parked clients (INFO `blocked_clients`).
    pub fn len(&self) -> usize {
        self.parked.len()
    }

    /// Whether `client_id` is parked (CLIENT LIST flag `b`).
    pub fn is_blocked(&self, client_id: u64) -> bool {
        self.parked.contains_key(&client_id)
    }

    /// Number of keys some client waits on (INFO `blocking_keys`).
    pub fn keys(&self) -> usize {
        self.by_key.len()
    }

    /// The earliest deadline, Unix µs.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.deadlines.first().map(|&(d, _)| d)
    }

    /// Forgets a parked client (disconnect, timeout, served). Returns its protocol if it was
    /// parked.
    pub fn remove(&mut self, client_id: u64) -> Option<Proto> {
        self.take(client_id).map(|p| p.proto)
    }

    /// Forgets a parked client and returns what it was parked with.
    fn take(&mut self, client_id: u64) -> Option<Parked> {
        let p = self.parked.remove(&client_id)?;
        self.unlink(client_id, &p);
        Some(p)
    }

    /// Removes `client_id`'s entries from the key queues and the deadline set.
    fn unlink(&mut self, client_id: u64, p: &Parked) {
        for k in &p.keys {
            if let Some(q) = self.by_key.get_mut(k) {
                q.retain(|&id| id != client_id);
                if q.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        if let Some(d) = p.deadline_us {
            self.deadlines.remove(&(d, client_id));
        }
    }

    /// Marks `key` ready if a client waits on it.
    /// Keys are waited on per (database, key), as in Redis.
    fn mark_ready(&mut self, db: usize, key: &[u8]) {
        self.scratch.clear();
        self.scratch.extend_from_slice(&(db as u32).to_le_bytes());
        self.scratch.extend_from_slice(key);
        let q = &self.scratch[..];
        if self.by_key.contains_key(q) && !self.ready_set.contains(q) {
            self.ready_set.insert(q.into());
            self.ready.push_back(q.into());
        }
    }
}

/// redis `getTimeoutFromObjectOrReply` (seconds): the deadline in Unix µs for `arg` at
/// `now_us`, or `None` for "block forever" (a timeout that truncates to 0 ms).
pub fn parse_timeout(arg: &[u8], now_us: u64) -> Result<Option<u64>, CmdError> {
    const NOT_FLOAT: CmdError = CmdError::Static("ERR timeout is not a float or out of range");
    const NEGATIVE: CmdError = CmdError::Static("ERR timeout is negative");
    let ld = LongDouble::parse(arg).ok_or(NOT_FLOAT)?;
    if !ld.is_finite() {
        return Err(NEGATIVE); // (long long)±inf is LLONG_MIN on x86-64
    }
    // `(long long)(ftval * 1000.0)`: from the value's exact decimal text (`%.17Lf`), the
    // integer part times 1000 plus the first three decimals, truncated toward zero.
    let mut text = Vec::new();
    ld.format_human(&mut text);
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, &text[..]),
    };
    let (int_part, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(p) => (&digits[..p], &digits[p + 1..]),
        None => (digits, &digits[digits.len()..]),
    };
    let mut ms: i128 = 0;
    for &d in int_part.iter().chain(frac.iter().chain(b"000").take(3)) {
        if !d.is_ascii_digit() {
            return Err(NOT_FLOAT);
        }
        ms = ms * 10 + i128::from(d - b'0');
        if ms > i128::from(i64::MAX) {
            // Past i64: the C cast yields LLONG_MIN.
            return Err(NEGATIVE);
        }
    }
    if negative && ms > 0 {
        return Err(NEGATIVE);
    }
    let ms = ms as u64;
    if ms == 0 {
        return Ok(None);
    }
    Ok(Some(now_us.saturating_add(ms.saturating_mul(1000))))
}

/// Parks the client running `c` on `keys` until `deadline_us` (`None` = forever): sets
/// `c.flow = Flow::Block`; the caller writes no reply. Returns `false` (and parks nothing)
/// when blocking is not allowed here (inside EXEC): the caller then writes its "nothing"
/// reply. Duplicate keys are waited on once.
pub fn block(e: &mut Engine, c: &mut Call, keys: &[&[u8]], deadline_us: Option<u64>) -> bool {
    block_with_argv(e, c, keys, deadline_us, None)
}

/// Whether the command running for `client_id` is a parked command being re-run.
pub fn is_rerun(e: &Engine, client_id: u64) -> bool {
    e.blocking.rerun_of == Some(client_id)
}

/// [`block`], re-running `argv` instead of the command as sent when given (XREAD parks with
/// `$` replaced by the ID it stood for when it blocked).
pub fn block_with_argv(
    e: &mut Engine,
    c: &mut Call,
    keys: &[&[u8]],
    deadline_us: Option<u64>,
    argv: Option<Vec<Vec<u8>>>,
) -> bool {
    block_for(e, c, keys, deadline_us, argv, None)
}

/// [`block_with_argv`] waiting for a value of type `kind` (`"list"`, `"zset"`) whatever the
/// command (`crate::txlock` TXWAIT).
pub fn block_for(
    e: &mut Engine,
    c: &mut Call,
    keys: &[&[u8]],
    deadline_us: Option<u64>,
    argv: Option<Vec<Vec<u8>>>,
    kind: Option<&'static str>,
) -> bool {
    let id = c.client.id;
    if e.blocking.rerun_of == Some(id) {
        // A re-run that still finds nothing: the client stays parked as it was.
        c.flow = Flow::Block;
        return true;
    }
    if crate::cmd::tx::denies_blocking(c.client) {
        return false;
    }
    // A client has at most one parked command (the server runs nothing else for it).
    e.blocking.remove(id);
    let db = e.current_db();
    let mut uniq: Vec<Box<[u8]>> = Vec::with_capacity(keys.len());
    for &k in keys {
        let q = crate::keyspace::qualify(db, k);
        if !uniq.contains(&q) {
            uniq.push(q);
        }
    }
    for k in &uniq {
        e.blocking
            .by_key
            .entry(k.clone())
            .or_default()
            .push_back(id);
    }
    if let Some(d) = deadline_us {
        e.blocking.deadlines.insert((d, id));
    }
    let kind = if let Some(kind) = kind {
        kind
    } else if c.spec.acl_categories.contains(&"@sortedset") {
        "zset"
    } else if c.spec.acl_categories.contains(&"@stream") {
        "stream"
    } else {
        "list"
    };
    e.blocking.parked.insert(
        id,
        Parked {
            proto: c.client.proto,
            db,
            argv: argv.unwrap_or_else(|| c.argv.iter().map(|a| a.to_vec()).collect()),
            keys: uniq,
            deadline_us,
            kind,
            rerun_when_gone: c.spec.name == "xreadgroup",
            // Only a cluster's engine ever announces a host to a parked client.
            laddr: if e.cluster.enabled() {
                c.client.laddr.clone()
            } else {
                String::new()
            },
        },
    );
    c.flow = Flow::Block;
    true
}

/// Marks `key` ready: a client waiting on it will be re-run once the current command (or
/// EXEC) is over. Cheap when nobody waits.
pub fn signal_ready(e: &mut Engine, key: &[u8]) {
    if !e.blocking.is_empty() {
        let db = e.current_db();
        e.blocking.mark_ready(db, key);
    }
}

/// SWAPDB of `a` and `b`: every waited-on key of either database is ready (redis
/// `scanDatabaseForReadyKeys` for keys that now exist, `scanDatabaseForDeletedStreams` for
/// XREADGROUP waiters whose stream went away).
pub fn db_swapped(e: &mut Engine, a: usize, b: usize) {
    keys_of_dbs_ready(e, &[a, b]);
}

/// FLUSHDB/FLUSHALL of `db`: every waited-on key there is ready (an XREADGROUP waiter
/// answers that its stream no longer exists; the others keep waiting).
pub fn db_flushed(e: &mut Engine, db: usize) {
    keys_of_dbs_ready(e, &[db]);
}

fn keys_of_dbs_ready(e: &mut Engine, dbs: &[usize]) {
    if e.blocking.is_empty() {
        return;
    }
    let ready: Vec<(usize, Box<[u8]>)> = e
        .blocking
        .by_key
        .keys()
        .filter_map(|q| {
            let (db, k) = crate::keyspace::unqualify(q);
            dbs.contains(&db).then(|| (db, k.into()))
        })
        .collect();
    for (db, k) in ready {
        e.blocking.mark_ready(db, &k);
    }
}

/// The dispatcher's hook, after every handler while someone is parked: when the command
/// changed the keyspace (`changed`), every argument with a waiter is marked ready; then,
/// unless this command runs inside EXEC or is itself a re-run, ready keys are served — but not
/// by a command another client sends while a script is busy: the script has not finished, and
/// its writes are served after it (redis `call`, `!isInsideYieldingLongCommand()`).
pub fn after_command(e: &mut Engine, client: &Client, argv: &[&[u8]], changed: bool, now_us: u64) {
    if changed {
        let db = e.current_db();
        for a in argv.iter().skip(1) {
            e.blocking.mark_ready(db, a);
        }
    }
    if !client.tx.in_exec && !e.blocking.serving && e.busy.is_none() && !e.blocking.ready.is_empty()
    {
        handle_ready(e, now_us);
    }
}

/// Serves ready keys (see the module doc, step 3). Replies go to `e.deliveries`.
pub fn handle_ready(e: &mut Engine, now_us: u64) {
    if e.blocking.serving {
        return;
    }
    e.blocking.serving = true;
    let prev_db = e.current_db();
    let now_ms = now_us / 1000;
    let mut reruns = 0;
    'keys: while let Some(key) = e.blocking.ready.pop_front() {
        e.blocking.ready_set.remove(&key);
        let Some(q) = e.blocking.by_key.get(&key) else {
            continue;
        };
        let waiters: Vec<u64> = q.iter().copied().collect();
        let (db, k) = crate::keyspace::unqualify(&key);
        for id in waiters {
            if reruns >= MAX_RERUNS_PER_ROUND {
                e.blocking.ready.push_front(key.clone());
                e.blocking.ready_set.insert(key);
                break 'keys;
            }
            let Some((kind, anyway)) = e
                .blocking
                .parked
                .get(&id)
                .map(|p| (p.kind, p.rerun_when_gone))
            else {
                continue; // served through another key in this round
            };
            // A re-run swaps databases itself; look in the key's own each time.
            e.use_db(db);
            let servable =
                e.ks.lookup_write(k, now_ms)
                    .is_some_and(|i| e.ks.value(i).type_name() == kind);
            if !servable && !anyway {
                continue; // emptied or another type: it keeps waiting
            }
            reruns += 1;
            rerun(e, id, now_us);
        }
    }
    e.use_db(prev_db);
    e.blocking.serving = false;
}

/// Re-runs parked client `id`'s command; queues its reply and forgets it unless it blocks
/// again.
fn rerun(e: &mut Engine, id: u64, now_us: u64) {
    let Some(p) = e.blocking.parked.remove(&id) else {
        return;
    };
    let argv: Vec<&[u8]> = p.argv.iter().map(Vec::as_slice).collect();
    let mut client = Client {
        id,
        proto: p.proto,
        db: p.db,
        ..Client::default()
    };
    let mut out = Vec::new();
    e.blocking.rerun_of = Some(id);
    let flow = dispatch::exec(e, &mut client, &argv, now_us, &mut out);
    e.blocking.rerun_of = None;
    drop(argv);
    if flow == Flow::Block {
        e.blocking.parked.insert(id, p);
        return;
    }
    e.blocking.unlink(id, &p);
    e.deliveries.push(Delivery {
        client_id: id,
        bytes: out,
        unblock: true,
    });
}

/// A parked command answered without a re-run (timeout, CLIENT UNBLOCK) counts as a call of
/// its command then, as Redis counts it when it unblocks (`updateStatsOnUnblock`).
fn count_answered(e: &mut Engine, p: &Parked, failed: bool) {
    if let Some(spec) = p.argv.first().and_then(|name| crate::command::lookup(name)) {
        e.cmdstats.called(spec, failed, 0, false);
        if failed {
            e.stats.failed_calls += 1;
            *e.stats.errors.entry("UNBLOCKED".to_string()).or_insert(0) += 1;
        }
    }
}

/// CLIENT UNBLOCK: answers parked client `id` as if it timed out (a null array) or, with
/// `error`, with `-UNBLOCKED client unblocked via CLIENT UNBLOCK`. Returns whether it was
/// parked.
pub fn unblock(e: &mut Engine, id: u64, error: bool) -> bool {
    let Some(p) = e.blocking.take(id) else {
        return false;
    };
    count_answered(e, &p, error);
    let proto = p.proto;
    let mut bytes = Vec::new();
    let mut w = ReplyWriter::new(&mut bytes, proto);
    if error {
        w.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
    } else {
        w.null_array();
    }
    e.deliveries.push(Delivery {
        client_id: id,
        bytes,
        unblock: true,
    });
    true
}

/// Answers every parked client whose deadline is `<= now_us` with a null array in its
/// protocol (see the module doc, step 4).
pub fn timeouts(e: &mut Engine, now_us: u64) {
    while let Some(&(d, id)) = e.blocking.deadlines.first() {
        if d > now_us {
            break;
        }
        e.blocking.deadlines.pop_first();
        let Some(p) = e.blocking.take(id) else {
            continue;
        };
        count_answered(e, &p, false);
        let proto = p.proto;
        let mut bytes = Vec::with_capacity(5);
        ReplyWriter::new(&mut bytes, proto).null_array();
        e.deliveries.push(Delivery {
            client_id: id,
            bytes,
            unblock: true,
        });
    }
}

/// Cluster mode, each cron tick: a parked client whose keys' slot moved away (its owner
/// changed, and it is not being imported here) is answered the `-MOVED` (or `-CLUSTERDOWN`)
/// a new request would get and unblocked, instead of waiting for pushes that now go to the
/// new owner (redis `clientsCronHandleTimeout` → `clusterRedirectBlockedClientIfNeeded`; all
/// of a blocking command's keys are in one slot, so the first decides).
pub fn redirect_moved(e: &mut Engine) {
    if e.blocking.parked.is_empty() || !e.cluster.enabled() {
        return;
    }
    let mut gone = Vec::new();
    for (&id, p) in &e.blocking.parked {
        let Some((_, key)) = p.keys.first().map(|q| crate::keyspace::unqualify(q)) else {
            continue;
        };
        if let Some(bytes) = crate::cmd::cluster::blocked_redirect(e, key, &p.laddr) {
            gone.push((id, bytes));
        }
    }
    for (id, bytes) in gone {
        if let Some(p) = e.blocking.take(id) {
            count_answered(e, &p, false);
            e.deliveries.push(Delivery {
                client_id: id,
                bytes,
                unblock: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000_000;

    #[test]
    fn timeout_grammar() {
        let ok = |s: &str| parse_timeout(s.as_bytes(), NOW);
        assert_eq!(ok("0"), Ok(None));
        assert_eq!(ok("-0"), Ok(None));
        assert_eq!(ok("0.0004"), Ok(None));
        assert_eq!(
            ok("-0.0004"),
            Ok(None),
            "truncates to 0 ms before the sign check"
        );
        assert_eq!(ok("1"), Ok(Some(NOW + 1_000_000)));
        assert_eq!(ok("0.2"), Ok(Some(NOW + 200_000)));
        assert_eq!(ok("0x10"), Ok(Some(NOW + 16_000_000)));
        let neg = Err(CmdError::Static("ERR timeout is negative"));
        let nf = Err(CmdError::Static(
            "ERR timeout is not a float or out of range",
        ));
        for s in [
            "-1",
            "inf",
            "-inf",
            "1e30",
            "1e400",
            "9223372036854775807",
            "1.5e17",
        ] {
            assert_eq!(ok(s), neg, "{s}");
        }
        for s in ["abc", "nan", " 1", "1 ", "", "1x"] {
            assert_eq!(ok(s), nf, "{s}");
        }
        assert!(ok("9223372036854775").unwrap().is_some());
    }
}
