//! Key locks for transactions that span engines (docs/transactions.md).
//!
//! The proxy runs a `MULTI` whose commands live on several engines as one transaction per
//! engine, each on the client's own connection to that engine. To make the whole atomic it
//! first takes, engine by engine in ascending engine order, a lock on every key that engine's
//! part reads or writes, then sends every `EXEC` and releases each engine's locks right after
//! its `EXEC` (two-phase locking: no lock is taken after the first is released, so any
//! interleaving with other clients is equivalent to a serial one).
//!
//! | command | does | reply |
//! |---|---|---|
//! | `TXLOCK timeout-ms` | locks the keys of this connection's queued transaction (their key specs, in its database) and of its WATCH; waits while another connection holds one of them | `:flags`: 1 = a watched key changed (EXEC would answer a null), 2 = the transaction is flagged by a queueing error, or a queued command's slot moved since it was queued (EXEC would answer EXECABORT or the redirect); 0 = EXEC will run |
//! | `TXLOCK timeout-ms [KEYS n key…] [DUMP] [NOWAIT]` | also locks the `n` keys named; with `DUMP`, reads them too; with `NOWAIT`, answers `:4` and locks nothing when another connection holds one of the keys, instead of waiting | with `DUMP`: `[flags, payload₁, expiry₁, …]`: each key's `DUMP` payload (nil if missing) and `PEXPIRETIME` (-1: none, -2: missing) |
//! | `TXGUEST key…` | marks keys of other engines, restored here for the gathered execution of a command spanning engines, as **guests** until `TXUNLOCK` | `+OK` |
//! | `TXUNLOCK` | releases this connection's locks and guests | `+OK` |
//! | `TXWAIT LIST\|ZSET timeout key…` | waits, without reading or changing anything, until one of the keys holds a list (sorted set): the proxy's wait for a blocking command whose keys span engines | `:1`, or a null array at the timeout |
//! | `TXDISCOVER ON\|OFF` | on this connection, a script touching a key of another engine it did not declare, **before any write**, fails with `-TXNEEDKEY <key in hex>` instead of Redis Cluster's error, so the proxy can run it again with that key brought here | `+OK` |
//!
//! **Guests.** A command whose keys live on several engines (RENAME, SMOVE, a script…) runs on
//! one engine: the proxy restores the other engines' keys there as guests, runs it in one
//! MULTI/EXEC that ends by dumping and deleting the guests, and writes their new values back
//! to their owners. A guest counts as owned here by the cluster check (no `-MOVED`), and its
//! changes reach neither the keychange feed nor keyspace notifications: its owner's write-back
//! does (docs/transactions.md).
//!
//! Both run at once inside MULTI (like WATCH), need `@admin`, and are refused in scripts.
//!
//! **While a key is locked** by a connection, another connection's command is not run but
//! postponed (as under CLIENT PAUSE: it stays in its input and the connection counts as
//! blocked) until the lock is released, if it would touch a locked key: its own keys, the
//! queued commands' keys for EXEC, and — because their keys are not all known —
//! any script (EVAL, EVALSHA, FCALL) and any keyless write (FLUSHALL, FLUSHDB, SWAPDB).
//! A script of a connection that itself holds locks (queued in its transaction, or the
//! gathered unit it runs) waits only for its declared keys: it took its locks in the proxy's
//! ordered acquisition, and waiting after that for every other holder could deadlock two
//! such holders on one engine (its undeclared keys are then not isolated).
//! Keys are locked per (database, key), as WATCH watches them.
//!
//! **Bounds.** A lock lasts at most `timeout-ms` (the proxy asks for seconds, where a
//! transaction takes microseconds): past it the engine releases it and refuses the holder's
//! next command, whatever it is, with [`EXPIRED`] (its MULTI and WATCH are dropped) until it
//! sends `TXUNLOCK`, so a late `EXEC` never runs unprotected. A holder's connection closing
//! releases its locks.

use std::collections::{HashMap, HashSet};

use crate::call::Call;
use crate::command::{CommandSpec, Flags};
use crate::error::CmdError;
use crate::{Client, Delivery, Engine};

/// The error a connection whose lock expired gets until it sends `TXUNLOCK`.
pub const EXPIRED: &str =
    "ERR transaction lock expired before the transaction ran (TXLOCK timeout); send TXUNLOCK";

/// Longest lock a `TXLOCK` may ask for, in milliseconds.
pub const MAX_TIMEOUT_MS: i64 = 60_000;

#[derive(Debug, Default)]
pub struct Locks {
    /// Qualified key (`keyspace::qualify`) → holding connection. Probed for every command's
    /// keys while a lock is held: foldhash, seeded per process (a client's key only probes it).
    by_key: HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>,
    /// No holder's deadline is before this (a lower bound: the expiry scan is skipped before it).
    earliest_deadline_us: u64,
    holders: HashMap<u64, Holder>,
    /// Connections postponed by a lock, in the order they were postponed.
    postponed: Vec<u64>,
    /// Holders whose lock expired: refused until `TXUNLOCK`.
    expired: HashSet<u64>,
    /// Guest keys (qualified) → the connection that restored them.
    guests: HashMap<Box<[u8]>, u64>,
    /// Transactions `TXPREP` prepared, by (connection, transaction id): each its own client
    /// (its MULTI queue; its locks are held under that client's id).
    prepared: HashMap<(u64, Box<[u8]>), Client>,
    /// A prepared transaction's client id → the connection that prepared it.
    prepared_on: HashMap<u64, u64>,
    /// Ids given to prepared transactions so far (from [`PREPARED_BASE`]).
    next_prepared: u64,
}

/// First client id of the transactions `TXPREP` prepares: far above any connection's id.
const PREPARED_BASE: u64 = 1 << 62;

#[derive(Debug)]
struct Holder {
    keys: Vec<Box<[u8]>>,
    deadline_us: u64,
}

impl Locks {
    /// Whether any lock is held or any holder must be told its lock expired: the
    /// dispatcher's one test on the hot path.
    #[inline]
    pub fn active(&self) -> bool {
        !self.holders.is_empty() || !self.expired.is_empty()
    }

    /// Number of keys locked.
    pub fn locked_keys(&self) -> usize {
        self.by_key.len()
    }

    /// Whether `key` of database `db` is a guest here (one test while there is none).
    #[inline]
    pub fn is_guest(&self, db: usize, key: &[u8]) -> bool {
        !self.guests.is_empty() && self.guests.contains_key(&crate::keyspace::qualify(db, key))
    }

    /// Whether connection `client` has restored guests (runs gathered commands).
    pub fn holds_guests(&self, client: u64) -> bool {
        !self.guests.is_empty() && self.guests.values().any(|&c| c == client)
    }

    /// Whether another holder than `me` holds `q` (taking locks: each holder for itself).
    fn locked_by_other(&self, q: &[u8], me: u64) -> bool {
        self.by_key.get(q).is_some_and(|&h| h != me)
    }

    /// The connection a holder's commands arrive on: a prepared transaction's is the
    /// connection that prepared it.
    fn conn_of(&self, id: u64) -> u64 {
        if id < PREPARED_BASE {
            return id;
        }
        self.prepared_on.get(&id).copied().unwrap_or(id)
    }

    /// Whether a command of `me` must wait for `q`: held by another connection. The
    /// transactions a connection prepared (`TXPREP`) count as its own: a command postponed
    /// there would hold up the `TXCOMMIT` queued behind it, and a command that runs there
    /// before the `TXCOMMIT` runs before the transaction, whose commands run at its commit
    /// (docs/transactions.md, "Over the shared links").
    fn held_elsewhere(&self, q: &[u8], me: u64) -> bool {
        self.by_key
            .get(q)
            .is_some_and(|&h| h != me && self.conn_of(h) != self.conn_of(me))
    }

    /// [`Self::held_elsewhere`] of `key` in database `db` (every command's keys are looked
    /// up so while a lock is held anywhere: qualified without allocating).
    fn key_held_elsewhere(&self, db: usize, key: &[u8], me: u64) -> bool {
        crate::keyspace::with_qualified(db, key, |q| self.held_elsewhere(q, me))
    }

    fn other_holder(&self, me: u64) -> bool {
        let mine = self.conn_of(me);
        self.holders
            .keys()
            .any(|&h| h != me && self.conn_of(h) != mine)
    }
}

/// What the dispatcher does with a command while [`Locks::active`].
pub enum Verdict {
    Run,
    /// Wait for a lock to be released.
    Postpone,
    /// This connection's lock expired: refuse with [`EXPIRED`].
    Expired,
}

/// The dispatcher's check, before MULTI queueing (commands run by EXEC and scripts are never
/// checked: their transaction or script already passed).
pub fn check(
    e: &mut Engine,
    client: &mut Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_us: u64,
) -> Verdict {
    expire(e, now_us);
    if !e.locks.expired.is_empty() && e.locks.expired.contains(&client.id) {
        if spec.name == "txunlock" {
            return Verdict::Run;
        }
        crate::cmd::tx::reset_client(e, client);
        return Verdict::Expired;
    }
    if e.locks.holders.is_empty() {
        return Verdict::Run;
    }
    // Queued, not run: checked at EXEC.
    if client.tx.in_multi() && !crate::cmd::tx::runs_inside_multi(spec.name) {
        return Verdict::Run;
    }
    let me = client.id;
    let conflicts = match spec.name {
        // NOWAIT answers at once (its handler reports a held key).
        "txlock" if named_keys(argv).is_some_and(|o| o.nowait) => false,
        "txlock" => {
            let mut wanted = wanted_keys(e, client);
            let named = named_keys(argv).map(|o| o.keys).unwrap_or_default();
            wanted.extend(named.iter().map(|k| crate::keyspace::qualify(client.db, k)));
            wanted.iter().any(|q| e.locks.held_elsewhere(q, me))
        }
        "exec" => client.tx.queued_commands().any(|cmd| {
            let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
            crate::dispatch::resolve(&args)
                .is_ok_and(|(spec, _)| touches_locked(e, spec, &args, client.db, me))
        }),
        _ => touches_locked(e, spec, argv, client.db, me),
    };
    if conflicts {
        if !e.locks.postponed.contains(&me) {
            e.locks.postponed.push(me);
        }
        Verdict::Postpone
    } else {
        Verdict::Run
    }
}

/// Whether running `argv` could read or write a key another connection holds locked.
fn touches_locked(e: &Engine, spec: &CommandSpec, argv: &[&[u8]], db: usize, me: u64) -> bool {
    if matches!(
        spec.name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    ) {
        // A lock holder's script (queued in its transaction or gathered unit) is checked by
        // its declared keys, which it locked with TXLOCK in the proxy's ordered acquisition.
        // Waiting here for every other holder would be a wait after acquisition: two holders
        // with scripts on one engine would each wait for the other's unlock (a deadlock until
        // the locks expire).
        if e.locks.holders.contains_key(&me) {
            return crate::command::keys(spec, argv)
                .positions()
                .any(|pos| e.locks.key_held_elsewhere(db, argv[pos], me));
        }
        return e.locks.other_holder(me);
    }
    if !spec.has_keys() {
        return spec.has_flag(Flags::WRITE) && e.locks.other_holder(me);
    }
    crate::command::keys(spec, argv)
        .positions()
        .any(|pos| e.locks.key_held_elsewhere(db, argv[pos], me))
}

/// The keys `TXLOCK` locks for `client`: its watched keys and its queued commands' keys.
fn wanted_keys(e: &Engine, client: &Client) -> Vec<Box<[u8]>> {
    let mut keys = crate::cmd::tx::watched_keys(e, client.id);
    for cmd in client.tx.queued_commands() {
        let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
        let Ok((spec, _)) = crate::dispatch::resolve(&args) else {
            continue;
        };
        if !spec.has_keys() {
            continue;
        }
        for pos in crate::command::keys(spec, &args[..]).positions() {
            keys.push(crate::keyspace::qualify(client.db, args[pos]));
        }
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// `TXLOCK timeout-ms` (module docs). The dispatcher has postponed it while a key it wants
/// is held by another connection.
pub fn txlock(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let timeout = resp::parse_i64(c.argv[1])
        .filter(|t| (1..=MAX_TIMEOUT_MS).contains(t))
        .ok_or(CmdError::Static(
            "ERR TXLOCK timeout must be an integer of milliseconds from 1 to 60000",
        ))?;
    let o = named_keys(c.argv).ok_or(CmdError::Static("ERR syntax error"))?;
    let (named, dump) = (o.keys, o.dump);
    let mut keys = wanted_keys(e, c.client);
    keys.extend(
        named
            .iter()
            .map(|k| crate::keyspace::qualify(c.client.db, k)),
    );
    let me = c.client.id;
    // NOWAIT: a key another connection holds → `:4`, nothing locked.
    if o.nowait && keys.iter().any(|q| e.locks.locked_by_other(q, me)) {
        c.w().integer(4);
        return Ok(());
    }
    let deadline_us = c.now_us + timeout as u64 * 1000;
    e.locks.earliest_deadline_us = e.locks.earliest_deadline_us.min(deadline_us);
    let holder = e.locks.holders.entry(me).or_insert(Holder {
        keys: Vec::new(),
        deadline_us,
    });
    holder.deadline_us = deadline_us;
    for q in keys {
        if e.locks.by_key.insert(q.clone(), me).is_none() {
            holder.keys.push(q);
        }
    }
    let mut flags = 0;
    if crate::cmd::tx::watch_would_fail(e, c.client, c.now_ms) {
        flags |= 1;
    }
    if c.client.tx.flagged() || crate::cmd::cluster::queued_moved(e, c.client, c.now_ms) {
        flags |= 2;
    }
    if !dump {
        c.w().integer(flags);
        return Ok(());
    }
    // Each named key's payload and absolute expiry, read as DUMP and PEXPIRETIME would.
    let mut payloads = Vec::with_capacity(named.len());
    for key in &named {
        payloads.push(match e.ks.lookup_read_notouch(key, c.now_ms) {
            None => (None, -2),
            Some(i) => (
                Some(crate::dump::serialize_with(
                    e.ks.value(i),
                    e.config.encoding.list_max_listpack_size,
                )),
                e.ks.expire_at(i).map_or(-1, |t| t as i64),
            ),
        });
    }
    let mut w = c.w();
    w.array(1 + 2 * payloads.len());
    w.integer(flags);
    for (payload, expiry) in &payloads {
        match payload {
            Some(p) => w.bulk(p),
            None => w.null(),
        }
        w.integer(*expiry);
    }
    Ok(())
}

/// `[KEYS n key…] [DUMP]` after the timeout: the keys and whether to dump them.
fn named_keys<'a>(argv: &[&'a [u8]]) -> Option<Options<'a>> {
    let mut o = Options::default();
    let mut i = 2;
    while i < argv.len() {
        if argv[i].eq_ignore_ascii_case(b"keys") && o.keys.is_empty() {
            let n = usize::try_from(resp::parse_i64(argv.get(i + 1)?)?).ok()?;
            o.keys.extend_from_slice(argv.get(i + 2..i + 2 + n)?);
            i += 2 + n;
        } else if argv[i].eq_ignore_ascii_case(b"dump") {
            o.dump = true;
            i += 1;
        } else if argv[i].eq_ignore_ascii_case(b"nowait") {
            o.nowait = true;
            i += 1;
        } else {
            return None;
        }
    }
    Some(o)
}

/// `TXLOCK`'s options after the timeout.
#[derive(Default)]
struct Options<'a> {
    keys: Vec<&'a [u8]>,
    dump: bool,
    nowait: bool,
}

/// The script error asking the proxy to run a script again with `key` brought to the
/// engine: `-TXNEEDKEY <key in hex>` (module docs, `TXDISCOVER`).
pub fn need_key(key: &[u8]) -> String {
    let mut msg = String::from("-TXNEEDKEY ");
    for b in key {
        msg.push_str(&format!("{b:02x}"));
    }
    msg
}

/// The error (without its `-`) asking the proxy to run a command again with `keys` brought
/// to the engine: `TXNEEDKEY <hex>,<hex>… <option>` (SORT's patterns, `crate::types::sort`;
/// `option`, `BY` or `GET`, names the error to give if it cannot).
pub fn need_keys(keys: &[Vec<u8>], option: &str) -> String {
    let mut msg = String::from("TXNEEDKEY ");
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            msg.push(',');
        }
        for b in key {
            msg.push_str(&format!("{b:02x}"));
        }
    }
    msg.push(' ');
    msg.push_str(option);
    msg
}

/// `TXWAIT LIST|ZSET timeout key…` → `:1` once one of the keys holds a list (a sorted set),
/// a null array at the timeout (seconds, as BLPOP's; 0 = forever). Reads and changes
/// nothing: the proxy waits so for a blocking command whose keys span engines, then runs it
/// gathered (module docs).
pub fn txwait(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let kind = match c.argv[1] {
        a if a.eq_ignore_ascii_case(b"list") => "list",
        a if a.eq_ignore_ascii_case(b"zset") => "zset",
        _ => return Err(CmdError::Static("ERR syntax error")),
    };
    let deadline = crate::blocking::parse_timeout(c.argv[2], c.now_us)?;
    let keys: Vec<&[u8]> = c.argv[3..].to_vec();
    let ready = keys.iter().any(|k| {
        e.ks.lookup_read_notouch(k, c.now_ms)
            .is_some_and(|i| e.ks.value(i).type_name() == kind)
    });
    if ready {
        c.w().integer(1);
        return Ok(());
    }
    if !crate::blocking::block_for(e, c, &keys, deadline, None, Some(kind)) {
        c.w().null_array();
    }
    Ok(())
}

/// `TXDISCOVER ON|OFF` → `+OK` (module docs).
pub fn txdiscover(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.client.txdiscover = match c.argv[1] {
        a if a.eq_ignore_ascii_case(b"on") => true,
        a if a.eq_ignore_ascii_case(b"off") => false,
        _ => return Err(CmdError::Static("ERR syntax error")),
    };
    c.w().ok();
    Ok(())
}

/// `TXGUEST key…` → `+OK` (module docs).
pub fn txguest(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    for key in &c.argv[1..] {
        e.locks
            .guests
            .insert(crate::keyspace::qualify(c.client.db, key), c.client.id);
    }
    c.w().ok();
    Ok(())
}

/// `TXID` → `:id`: the connection's client id (CLIENT ID's reply). Admin, so MONITOR does not
/// show the proxy asking it of each connection it opens.
pub fn txid(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let id = c.client.id as i64;
    c.w().integer(id);
    Ok(())
}

/// `TXUNLOCK` → `+OK`: releases this connection's locks (and forgets an expired one).
pub fn txunlock(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    e.locks.expired.remove(&c.client.id);
    release(e, c.client.id);
    c.w().ok();
    Ok(())
}

/// Releases `client_id`'s locks and hands every postponed connection back to the server.
fn release(e: &mut Engine, client_id: u64) {
    if !e.locks.guests.is_empty() {
        e.locks.guests.retain(|_, &mut h| h != client_id);
    }
    let Some(h) = e.locks.holders.remove(&client_id) else {
        return;
    };
    for q in h.keys {
        e.locks.by_key.remove(&q);
    }
    for id in std::mem::take(&mut e.locks.postponed) {
        e.deliveries.push(Delivery {
            client_id: id,
            bytes: Vec::new(),
            unblock: true,
        });
    }
}

/// Locks past their deadline are released; their holders are refused until `TXUNLOCK`.
fn expire(e: &mut Engine, now_us: u64) {
    if now_us < e.locks.earliest_deadline_us {
        return;
    }
    let late: Vec<u64> = e
        .locks
        .holders
        .iter()
        .filter(|(_, h)| now_us >= h.deadline_us)
        .map(|(&id, _)| id)
        .collect();
    for id in late {
        e.locks.expired.insert(id);
        release(e, id);
    }
    e.locks.earliest_deadline_us = e
        .locks
        .holders
        .values()
        .map(|h| h.deadline_us)
        .min()
        .unwrap_or(u64::MAX);
}

/// Each cron tick.
pub fn cron(e: &mut Engine, now_us: u64) {
    if !e.locks.holders.is_empty() {
        expire(e, now_us);
    }
}

/// The connection is gone: its locks are released, and the transactions it prepared.
pub fn client_closed(e: &mut Engine, client_id: u64) {
    e.locks.postponed.retain(|&id| id != client_id);
    e.locks.expired.remove(&client_id);
    release(e, client_id);
    if !e.locks.prepared.is_empty() {
        let mine: Vec<(u64, Box<[u8]>)> = e
            .locks
            .prepared
            .keys()
            .filter(|(conn, _)| *conn == client_id)
            .cloned()
            .collect();
        for k in mine {
            if let Some(p) = e.locks.prepared.remove(&k) {
                drop_prepared(e, p);
            }
        }
    }
}

/// `TXPREP txid timeout-ms n₁ arg… n₂ arg…` → `:0` when the transaction is prepared: the
/// commands (each given as its argument count then its arguments) queued in a MULTI of a
/// transaction of its own, and every key they touch locked for it, as `MULTI` + the commands +
/// `TXLOCK timeout-ms NOWAIT` on a connection of its own would; it waits for `TXCOMMIT txid`
/// or `TXABORT txid` on this connection. Else nothing is left behind and the reply says why:
/// `:4` another connection holds one of the keys (or the engine is paused or a slot held:
/// nothing could be queued now), `:2` a command was refused while queueing (EXEC would
/// answer EXECABORT or a redirect). Several transactions may be prepared on one connection
/// (the proxy's shared links), each by its id (docs/transactions.md).
pub fn txprep(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let timeout = c.argv[2];
    resp::parse_i64(timeout)
        .filter(|t| (1..=MAX_TIMEOUT_MS).contains(t))
        .ok_or(CmdError::Static(
            "ERR TXPREP timeout must be an integer of milliseconds from 1 to 60000",
        ))?;
    let cmds = commands(&c.argv[3..]).ok_or(CmdError::Static("ERR syntax error"))?;
    let key = (c.client.id, Box::<[u8]>::from(c.argv[1]));
    if e.locks.prepared.contains_key(&key) {
        return Err(CmdError::Static(
            "ERR TXPREP transaction id already prepared on this connection",
        ));
    }
    let id = PREPARED_BASE + e.locks.next_prepared;
    e.locks.next_prepared += 1;
    let mut p = Client {
        id,
        db: c.client.db,
        proto: c.client.proto,
        addr: c.client.addr.clone(),
        laddr: c.client.laddr.clone(),
        auth: c.client.auth.clone(),
        created_us: c.client.created_us,
        ..Client::default()
    };
    e.locks.prepared_on.insert(id, c.client.id);
    let now = c.now_us;
    let mut out = Vec::with_capacity(16 * cmds.len());
    let mut flags = 0;
    if e.exec(&mut p, &[b"MULTI"], now, &mut out) != crate::Flow::Continue {
        flags = 4;
    }
    for cmd in &cmds {
        if flags != 0 {
            break;
        }
        out.clear();
        match e.exec(&mut p, cmd, now, &mut out) {
            crate::Flow::Continue if out == b"+QUEUED\r\n" => {}
            crate::Flow::Continue => flags = 2,
            // Paused, or a slot held by a resize: the proxy runs it on a connection of the
            // client's own, which can wait.
            _ => flags = 4,
        }
    }
    if flags == 0 {
        out.clear();
        e.exec(&mut p, &[b"TXLOCK", timeout, b"NOWAIT"], now, &mut out);
        flags = match out.as_slice() {
            b":0\r\n" => 0,
            b":4\r\n" => 4,
            _ => 2,
        };
    }
    if flags == 0 {
        e.locks.prepared.insert(key, p);
    } else {
        drop_prepared(e, p);
    }
    c.w().integer(flags);
    Ok(())
}

/// `n₁ arg… n₂ arg…` → the commands, or `None` when malformed or empty.
fn commands<'a>(mut args: &[&'a [u8]]) -> Option<Vec<Vec<&'a [u8]>>> {
    let mut cmds = Vec::new();
    while let Some((n, rest)) = args.split_first() {
        let n = usize::try_from(resp::parse_i64(n)?)
            .ok()
            .filter(|&n| n > 0)?;
        cmds.push(rest.get(..n)?.to_vec());
        args = &rest[n..];
    }
    (!cmds.is_empty()).then_some(cmds)
}

/// `TXCOMMIT txid` → the prepared transaction's `EXEC` reply (the array of its commands'
/// replies), its locks released; `-ERR` when no transaction `txid` is prepared on this
/// connection. Under `CLIENT PAUSE WRITE` a transaction that writes waits, as EXEC does.
pub fn txcommit(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = (c.client.id, Box::<[u8]>::from(c.argv[1]));
    let Some(mut p) = e.locks.prepared.remove(&key) else {
        return Err(CmdError::Static(
            "ERR TXCOMMIT no transaction prepared with this id on this connection",
        ));
    };
    if e.pause.active()
        && let Some(exec) = crate::command::lookup(b"exec")
        && crate::pause::postpones(e, &p, exec, &[b"EXEC"], c.now_us)
    {
        if !e.pause.postponed.contains(&c.client.id) {
            e.pause.postponed.push(c.client.id);
        }
        e.locks.prepared.insert(key, p);
        c.flow = crate::Flow::Postpone;
        return Ok(());
    }
    let now = c.now_us;
    let (_, out) = c.parts();
    let start = out.len();
    if e.exec(&mut p, &[b"EXEC"], now, out) == crate::Flow::Postpone {
        // A slot of a key it creates started moving since TXPREP (its other keys are locked
        // and cannot move): nothing ran.
        out.truncate(start);
        drop_prepared(e, p);
        return Err(CmdError::Static(
            "ERR TXCOMMIT the transaction was not run: a slot of its keys is moving",
        ));
    }
    drop_prepared(e, p);
    Ok(())
}

/// `TXABORT txid` → `+OK`: the prepared transaction is dropped, its locks released (nothing
/// to do when none is prepared with that id).
pub fn txabort(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = (c.client.id, Box::<[u8]>::from(c.argv[1]));
    if let Some(p) = e.locks.prepared.remove(&key) {
        drop_prepared(e, p);
    }
    c.w().ok();
    Ok(())
}

/// A prepared transaction is over: its locks released, its MULTI dropped.
fn drop_prepared(e: &mut Engine, mut p: Client) {
    crate::cmd::tx::reset_client(e, &mut p);
    e.locks.prepared_on.remove(&p.id);
    e.locks.expired.remove(&p.id);
    e.locks.postponed.retain(|&id| id != p.id);
    e.pause.postponed.retain(|&id| id != p.id);
    release(e, p.id);
}

#[cfg(test)]
mod tests {
    use crate::{Client, Config, Engine, Flow};

    fn run(e: &mut Engine, c: &mut Client, args: &[&str]) -> (Flow, Vec<u8>) {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        let flow = e.exec(c, &argv, 1_000_000, &mut out);
        (flow, out)
    }

    fn client(id: u64) -> Client {
        Client {
            id,
            ..Client::default()
        }
    }

    #[test]
    fn named_keys_conflict_and_guests_stay_out_of_other_holders() {
        let mut e = Engine::new(Config::default());
        let (mut a, mut b, mut c) = (client(1), client(2), client(3));
        run(&mut e, &mut c, &["SET", "k", "v"]);
        let (_, out) = run(
            &mut e,
            &mut a,
            &["TXLOCK", "5000", "KEYS", "1", "k", "DUMP"],
        );
        assert!(
            out.starts_with(b"*3\r\n:0\r\n$"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(out.ends_with(b":-1\r\n"));
        // NOWAIT: answered at once, nothing locked.
        let (flow, out) = run(
            &mut e,
            &mut b,
            &["TXLOCK", "5000", "KEYS", "1", "k", "NOWAIT"],
        );
        assert_eq!((flow, out), (Flow::Continue, b":4\r\n".to_vec()));
        assert!(!e.locks.holders.contains_key(&2));
        // Another TXLOCK naming the same key waits; so does any command on it.
        let (flow, _) = run(&mut e, &mut b, &["TXLOCK", "5000", "KEYS", "1", "k"]);
        assert_eq!(flow, Flow::Postpone);
        let (flow, _) = run(&mut e, &mut c, &["GET", "k"]);
        assert_eq!(flow, Flow::Postpone);
        let (flow, _) = run(&mut e, &mut c, &["GET", "other"]);
        assert_eq!(flow, Flow::Continue);
        // Guests belong to their connection and go with its TXUNLOCK.
        run(&mut e, &mut a, &["TXGUEST", "g"]);
        assert!(e.locks.is_guest(0, b"g"));
        assert!(e.locks.holds_guests(1) && !e.locks.holds_guests(2));
        let (_, out) = run(&mut e, &mut a, &["TXUNLOCK"]);
        assert_eq!(out, b"+OK\r\n");
        assert!(!e.locks.is_guest(0, b"g"));
        let (flow, out) = run(&mut e, &mut b, &["TXLOCK", "5000", "KEYS", "1", "k"]);
        assert_eq!((flow, out), (Flow::Continue, b":0\r\n".to_vec()));
    }
}
