//! MULTI / EXEC / DISCARD / WATCH / UNWATCH with redis 7.0 `multi.c` semantics.
//!
//! # Queueing (the dispatcher's part, `dispatch::exec`)
//! After MULTI every command except EXEC, DISCARD, MULTI, WATCH, QUIT and RESET is checked
//! (lookup, arity, subscribed mode) and, if it passes, copied into the client's queue and answered
//! `+QUEUED`. A command refused at that point flags the transaction ([`flag_error`]), and EXEC
//! then answers `-EXECABORT Transaction discarded because of previous errors.`. When EXEC itself
//! is refused (`EXEC x`: arity), the reply is `-EXECABORT Transaction discarded because of:
//! <reason>` and the transaction is discarded (redis `execCommandAbort`).
//!
//! # EXEC
//! Runs the queued commands in order through the normal dispatcher and writes their replies as
//! one array (RESP2 `*N` / RESP3 `*N`); a runtime error is one element of that array. A
//! transaction whose WATCHed key changed answers a null array (`*-1` / `_`). While EXEC runs,
//! [`ClientTx::in_exec`] is set: blocking commands must not park (they answer as if timed out,
//! redis `CLIENT_DENY_BLOCKING`), and the subscribed-mode rules do not apply (Redis runs queued
//! commands through `call`, past `processCommand`'s checks).
//!
//! # WATCH
//! [`Watches`] maps each watched key to its watchers and each watching client to its keys and
//! its "dirty" flag (redis `CLIENT_DIRTY_CAS`). The keyspace reports changes of watched keys
//! (`Keyspace::touched`: structural changes by itself, in-place ones through each write's
//! keyspace notification; see `keyspace.rs` *Hooks*); [`process_touched`] turns those into
//! dirty flags after each command and each cron tick. As in Redis 7.0:
//! - a key modified by any client (the watcher included), deleted, expired, renamed, or present
//!   at FLUSHALL/FLUSHDB makes the transaction fail;
//! - a watched key that expires before EXEC fails it too (`isWatchedKeyExpired`), but a key that
//!   was already expired when WATCHed does not, unless it is written again; its deletion by
//!   expiry alone is not a change (`watchedKey.expired`).
//!
//! EXEC, DISCARD, UNWATCH, RESET and disconnecting forget the client's watched keys.
//!
//! # Bounds
//! A queue holds at most [`MAX_QUEUED_BYTES`] of arguments; a command beyond that is refused
//! (and flags the transaction), so a client cannot grow the engine's memory without bound.

use std::collections::HashMap;

use crate::call::Call;
use crate::dispatch;
use crate::error::CmdError;
use crate::{Client, Engine, Flow};

/// Most argument bytes (plus a per-argument overhead) one MULTI queue may hold.
pub const MAX_QUEUED_BYTES: usize = 1 << 30;
/// Bytes accounted per queued argument beyond its length (the Vec header).
const ARG_OVERHEAD: usize = 24;

/// A connection's transaction state: the MULTI queue and whether EXEC is running.
#[derive(Clone, Debug, Default)]
pub struct ClientTx {
    /// `Some` between MULTI and EXEC/DISCARD.
    multi: Option<Multi>,
    /// True while EXEC runs this client's queued commands (blocking commands must not block).
    pub in_exec: bool,
    /// Number of keys this client WATCHes (0 = nothing to look up in [`Watches`]).
    watching: usize,
}

impl ClientTx {
    /// Between MULTI and EXEC/DISCARD.
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Commands queued since MULTI (CLIENT LIST `multi=`), `None` outside MULTI.
    pub fn queued(&self) -> Option<usize> {
        self.multi.as_ref().map(|m| m.queue.len())
    }

    /// A queued command is a write (redis `mstate.cmd_flags & CMD_WRITE`; looked up only when
    /// asked, on the refused-writes path).
    /// The queued commands of an open transaction (none outside one).
    pub fn queued_commands(&self) -> impl Iterator<Item = &Vec<Vec<u8>>> {
        self.multi.iter().flat_map(|m| m.queue.iter())
    }

    /// Inside MULTI and flagged by a queueing error: EXEC would answer EXECABORT.
    pub fn flagged(&self) -> bool {
        self.multi.as_ref().is_some_and(|m| m.aborted)
    }

    /// Takes the open transaction out (see [`Self::restore`]), for a walk over its queue
    /// that needs the client meanwhile (EXEC's cluster check).
    pub(crate) fn take(&mut self) -> Option<Multi> {
        self.multi.take()
    }

    /// Puts back what [`Self::take`] took.
    pub(crate) fn restore(&mut self, multi: Option<Multi>) {
        self.multi = multi;
    }

    pub fn queued_write(&self) -> bool {
        self.queued_commands().any(|argv| {
            let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            crate::dispatch::resolve(&args)
                .is_ok_and(|(spec, _)| spec.has_flag(crate::command::Flags::WRITE))
        })
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Multi {
    /// Queued commands, argv each (name first).
    queue: Vec<Vec<Vec<u8>>>,
    /// Accounted bytes of `queue` (see [`MAX_QUEUED_BYTES`]).
    bytes: usize,
    /// A command was refused while queueing (redis `CLIENT_DIRTY_EXEC`).
    aborted: bool,
}

impl Multi {
    /// The queued commands, argv each.
    pub(crate) fn commands(&self) -> &[Vec<Vec<u8>>] {
        &self.queue
    }
}

/// One client watching one key.
#[derive(Debug, Clone, Copy)]
struct Watcher {
    client: u64,
    /// The key was stored but already expired when WATCHed (redis `watchedKey.expired`).
    expired: bool,
}

/// One watching client.
#[derive(Debug, Default)]
struct ClientWatch {
    keys: Vec<Box<[u8]>>,
    /// A watched key changed (redis `CLIENT_DIRTY_CAS`).
    dirty: bool,
}

/// The engine's WATCH registry (key → watching clients, client → keys).
#[derive(Debug, Default)]
pub struct Watches {
    by_key: HashMap<Box<[u8]>, Vec<Watcher>>,
    by_client: HashMap<u64, ClientWatch>,
}

impl Watches {
    /// Number of watched keys (all clients).
    pub fn keys(&self) -> usize {
        self.by_key.len()
    }
}

/// Whether a blocking command run by `client` must answer at once instead of parking
/// (inside EXEC, redis `CLIENT_DENY_BLOCKING`): it then replies as if its timeout had passed.
pub fn denies_blocking(client: &Client) -> bool {
    client.tx.in_exec
}

// ---------------------------------------------------------------------------------------------
// The dispatcher's hooks
// ---------------------------------------------------------------------------------------------

/// Commands that run at once even inside MULTI (redis `processCommand`).
pub fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset" | "txlock" | "txunlock"
    )
}

/// A command was refused (unknown, arity, subscribed mode): flags an open transaction.
pub fn flag_error(client: &mut Client) {
    if let Some(m) = &mut client.tx.multi {
        m.aborted = true;
    }
}

/// The reply when EXEC itself is refused with `err` (`ERR …`): the transaction is discarded
/// and the reason is quoted without its error code (redis `execCommandAbort`).
pub fn exec_refused(e: &mut Engine, client: &mut Client, err: &str) -> String {
    discard_transaction(e, client);
    let reason = err.strip_prefix("ERR ").unwrap_or(err);
    format!("EXECABORT Transaction discarded because of: {reason}")
}

/// Queues `argv` in the open transaction; the caller answers `+QUEUED`. Over
/// [`MAX_QUEUED_BYTES`] the command is refused and the transaction flagged (`Err`).
pub fn queue(client: &mut Client, argv: &[&[u8]]) -> Result<(), CmdError> {
    let Some(m) = &mut client.tx.multi else {
        return Ok(());
    };
    if m.aborted {
        // Redis stops storing commands once the transaction cannot run.
        return Ok(());
    }
    let size: usize = argv.iter().map(|a| a.len() + ARG_OVERHEAD).sum();
    if m.bytes.saturating_add(size) > MAX_QUEUED_BYTES {
        m.aborted = true;
        return Err(CmdError::Static(
            "ERR MULTI queue limit reached (too many queued bytes)",
        ));
    }
    m.bytes += size;
    m.queue.push(argv.iter().map(|a| a.to_vec()).collect());
    Ok(())
}

/// Turns the keyspace's reports of changed watched keys into dirty flags (redis
/// `touchWatchedKey`). Called by the dispatcher after each command and by `cron`.
pub fn process_touched(e: &mut Engine) {
    if e.ks.touched.is_empty() {
        return;
    }
    let touched = std::mem::take(&mut e.ks.touched);
    for q in &touched {
        let (db, key) = crate::keyspace::unqualify(q);
        let stored = e.db(db).peek_expired(key, 0).is_some();
        let Some(watchers) = e.watches.by_key.get_mut(q) else {
            continue;
        };
        for w in watchers.iter_mut() {
            if w.expired && !stored {
                // It was already expired when watched and is now gone: no logical change.
                w.expired = false;
                continue;
            }
            if let Some(cw) = e.watches.by_client.get_mut(&w.client) {
                cw.dirty = true;
            }
        }
    }
    // Give the buffer back so steady watching does not allocate per command.
    let mut touched = touched;
    touched.clear();
    e.ks.touched = touched;
}

/// Forgets every key `client_id` watches.
fn unwatch_all(e: &mut Engine, client_id: u64) {
    let Some(cw) = e.watches.by_client.remove(&client_id) else {
        return;
    };
    for key in cw.keys {
        if let Some(ws) = e.watches.by_key.get_mut(&key) {
            ws.retain(|w| w.client != client_id);
            if ws.is_empty() {
                e.watches.by_key.remove(&key);
                let (db, k) = crate::keyspace::unqualify(&key);
                e.db_mut(db).watched.remove(k);
            }
        }
    }
}

fn unwatch_client(e: &mut Engine, client: &mut Client) {
    if client.tx.watching > 0 {
        unwatch_all(e, client.id);
        client.tx.watching = 0;
    }
}

/// redis `discardTransaction`: drops the queue and the watched keys.
pub(crate) fn discard_transaction(e: &mut Engine, client: &mut Client) {
    client.tx.multi = None;
    unwatch_client(e, client);
}

/// RESET: leaves MULTI and forgets watched keys (redis `clearClientConnectionState`).
pub fn reset_client(e: &mut Engine, client: &mut Client) {
    discard_transaction(e, client);
}

/// The connection is gone: forget its watched keys.
pub fn client_closed(e: &mut Engine, client_id: u64) {
    unwatch_all(e, client_id);
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// `MULTI` → OK; `ERR MULTI calls can not be nested`.
pub fn multi(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.client.tx.in_multi() {
        return Err(CmdError::Static("ERR MULTI calls can not be nested"));
    }
    c.client.tx.multi = Some(Multi::default());
    c.w().ok();
    Ok(())
}

/// `DISCARD` → OK; `ERR DISCARD without MULTI`. Also forgets watched keys.
pub fn discard(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if !c.client.tx.in_multi() {
        return Err(CmdError::Static("ERR DISCARD without MULTI"));
    }
    discard_transaction(e, c.client);
    // An `ASKING` sent before MULTI lasted for the transaction only (cmd/cluster).
    c.client.cluster.asking = false;
    c.w().ok();
    Ok(())
}

/// `WATCH key [key …]` → OK; `ERR WATCH inside MULTI is not allowed`.
pub fn watch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.client.tx.in_multi() {
        return Err(CmdError::Static("ERR WATCH inside MULTI is not allowed"));
    }
    let id = c.client.id;
    let db = e.current_db();
    let cw = e.watches.by_client.entry(id).or_default();
    // No point in watching more once the transaction is bound to fail.
    if !cw.dirty {
        for &key in &c.argv[1..] {
            // Keys are watched per (database, key), as in Redis.
            let q = crate::keyspace::qualify(db, key);
            // Already watched by this client? (Ask the key's watcher list, usually short,
            // not the client's key list, so WATCH of N keys stays O(N).)
            if e.watches
                .by_key
                .get(&q)
                .is_some_and(|ws| ws.iter().any(|w| w.client == id))
            {
                continue;
            }
            let expired = e.ks.peek_expired(key, c.now_ms) == Some(true);
            cw.keys.push(q.clone());
            let ws = e.watches.by_key.entry(q).or_default();
            if ws.is_empty() {
                e.ks.data.watched.insert(key.into());
            }
            ws.push(Watcher {
                client: id,
                expired,
            });
        }
    }
    c.client.tx.watching = cw.keys.len();
    if cw.keys.is_empty() && !cw.dirty {
        e.watches.by_client.remove(&id);
    }
    c.w().ok();
    Ok(())
}

/// `UNWATCH` → OK.
pub fn unwatch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    unwatch_client(e, c.client);
    c.w().ok();
    Ok(())
}

/// The qualified keys `client_id` watches (`crate::txlock`).
pub fn watched_keys(e: &Engine, client_id: u64) -> Vec<Box<[u8]>> {
    e.watches
        .by_client
        .get(&client_id)
        .map(|cw| cw.keys.clone())
        .unwrap_or_default()
}

/// Whether EXEC would answer a null now because of WATCH (`crate::txlock`).
pub fn watch_would_fail(e: &mut Engine, client: &Client, now_ms: u64) -> bool {
    watch_failed(e, client, now_ms)
}

/// Whether the EXEC of `client` must fail because of WATCH: a watched key changed, or one
/// that was live when watched has expired since (redis `isWatchedKeyExpired`).
fn watch_failed(e: &mut Engine, client: &Client, now_ms: u64) -> bool {
    if client.tx.watching == 0 {
        return false;
    }
    process_touched(e);
    let Some(cw) = e.watches.by_client.get(&client.id) else {
        return false;
    };
    if cw.dirty {
        return true;
    }
    cw.keys.iter().any(|q| {
        let (db, k) = crate::keyspace::unqualify(q);
        e.db(db).peek_expired(k, now_ms) == Some(true)
            && e.watches
                .by_key
                .get(q)
                .is_some_and(|ws| ws.iter().any(|w| w.client == client.id && !w.expired))
    })
}

/// `EXEC` → array of the queued commands' replies | null array (WATCH failed);
/// `EXECABORT …` (a command was refused while queueing); `ERR EXEC without MULTI`.
pub fn exec(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let result = exec_queued(e, c);
    // An `ASKING` sent before MULTI lasted for the transaction only (cmd/cluster).
    c.client.cluster.asking = false;
    result
}

fn exec_queued(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(m) = c.client.tx.multi.take() else {
        return Err(CmdError::Static("ERR EXEC without MULTI"));
    };
    if m.aborted {
        unwatch_client(e, c.client);
        return Err(CmdError::Static(
            "EXECABORT Transaction discarded because of previous errors.",
        ));
    }
    if watch_failed(e, c.client, c.now_ms) {
        unwatch_client(e, c.client);
        c.w().null_array();
        return Ok(());
    }
    unwatch_client(e, c.client);
    let now_us = c.now_us;
    // A script queued in the transaction can still run past busy-reply-threshold.
    let mut poller = c.poller.take();
    let (client, out) = c.parts();
    resp::ReplyWriter::new(out, client.proto).array(m.queue.len());
    client.tx.in_exec = true;
    let mut argv: Vec<&[u8]> = Vec::new();
    for cmd in &m.queue {
        argv.clear();
        argv.extend(cmd.iter().map(|a| a.as_slice()));
        let before = out.len();
        let poller: Option<&mut dyn crate::script::BusyPoll> = match poller.as_mut() {
            Some(p) => Some(&mut **p),
            None => None,
        };
        match dispatch::exec_polling(e, client, &argv, now_us, out, poller) {
            // SHUTDOWN is refused inside MULTI (`no-multi`).
            // Commands EXEC runs are never postponed (`crate::pause`).
            Flow::Continue | Flow::Close | Flow::Shutdown(_) | Flow::Postpone => {}
            // The core cannot list other connections: this one's line stands for the list.
            Flow::ClientList => {
                let line = e.client_info_line(client, now_us) + "\n";
                resp::ReplyWriter::new(out, client.proto).verbatim(line.as_bytes());
            }
            // Nor can it kill other connections: CLIENT KILL inside EXEC kills nothing.
            Flow::ClientKill(f) => f.reply(0, client.proto, out),
            // A blocking command must not park inside EXEC (see `denies_blocking`); if one
            // did not write its reply, answer for it as a timeout so the array stays whole.
            Flow::Block => {
                if out.len() == before {
                    resp::ReplyWriter::new(out, client.proto).null_array();
                }
            }
        }
    }
    client.tx.in_exec = false;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Client, Config, Engine};

    fn run(e: &mut Engine, c: &mut Client, args: &[&str], now_us: u64) -> Vec<u8> {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        e.exec(c, &argv, now_us, &mut out);
        out
    }

    #[test]
    fn watch_registry_follows_clients() {
        let mut e = Engine::new(Config::default());
        let mut a = Client {
            id: 1,
            ..Default::default()
        };
        let mut b = Client {
            id: 2,
            ..Default::default()
        };
        const T: u64 = 1_000_000;
        run(&mut e, &mut a, &["SADD", "k", "m"], T);
        run(&mut e, &mut a, &["WATCH", "k", "k", "j"], T);
        run(&mut e, &mut b, &["WATCH", "k"], T);
        assert_eq!(e.watches.keys(), 2);
        assert_eq!(e.ks.data.watched.len(), 2);
        // SREM of an absent member changes nothing (Redis signals nothing); SET of j does.
        run(&mut e, &mut b, &["SREM", "k", "x"], T);
        run(&mut e, &mut b, &["SET", "j", "1"], T);
        run(&mut e, &mut a, &["MULTI"], T);
        run(&mut e, &mut a, &["PING"], T);
        assert_eq!(run(&mut e, &mut a, &["EXEC"], T), b"*-1\r\n");
        // EXEC forgot a's keys; b still watches k, which is unchanged.
        assert_eq!(e.watches.keys(), 1);
        run(&mut e, &mut b, &["MULTI"], T);
        run(&mut e, &mut b, &["GET", "j"], T);
        assert_eq!(run(&mut e, &mut b, &["EXEC"], T), b"*1\r\n$1\r\n1\r\n");
        assert_eq!(e.watches.keys(), 0);
        assert!(e.ks.data.watched.is_empty() && e.ks.touched.is_empty());
        // A closed connection leaves nothing behind.
        run(&mut e, &mut a, &["WATCH", "z"], T);
        run(&mut e, &mut a, &["MULTI"], T);
        e.client_closed(1);
        assert_eq!(e.watches.keys(), 0);
        assert!(e.ks.data.watched.is_empty());
    }
}
