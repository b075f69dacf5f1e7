//! Command dispatch: lookup → arity → handler → bookkeeping (redis `processCommand` / `call`).
//!
//! - Lookup is case-insensitive and allocation-free over the generated table
//!   ([`crate::command::lookup`]: Redis's rows plus recached's own, each with its handler): the
//!   name is lowercased on the stack and found in a hash map (Redis keeps its commands in a
//!   dict for the same reason). A container command (CONFIG, CLIENT, COMMAND) with at least
//!   one argument resolves to its subcommand row (`config|get`), like redis
//!   `lookupCommandLogic`. Rows without a handler answer Redis's unknown command or
//!   subcommand error.
//! - The arity check here is the only place that writes
//!   `ERR wrong number of arguments for '<fullname>' command`; handlers assume their arity.
//! - Bookkeeping: command and error counters, the client's last command, and the change
//!   counter (`Keyspace::dirty`, bumped by every keyspace mutation) compared before/after so
//!   write effects are observed in one place.

use resp::ReplyWriter;

use crate::command::{CommandSpec, Flags};
use crate::error::{CmdError, unknown_command_message};
use crate::{Client, Engine, Flow};

pub use crate::call::{Call, Handler};

/// The row and handler `argv` resolves to, or the error Redis gives for an unknown command
/// or subcommand. A top-level row that is not implemented ([`CommandSpec::is_implemented`])
/// answers as an unknown command; an unimplemented subcommand resolves with no handler and is
/// refused after the arity check, as an unknown subcommand (see [`exec`]).
pub fn resolve(argv: &[&[u8]]) -> Result<(&'static CommandSpec, Option<Handler>), CmdError> {
    let top = match crate::command::lookup(argv[0]) {
        Some(top) if top.handler.is_some() || top.is_implemented() => top,
        _ => return Err(CmdError::Other(unknown_command_message(argv))),
    };
    if argv.len() >= 2 && !top.subcommands.is_empty() {
        let sub = argv[1];
        return match top.subcommand(sub) {
            Some(s) => Ok((s, s.handler)),
            None => Err(CmdError::UnknownSubcommand {
                sub: sub.to_vec(),
                container: argv[0].to_vec(),
            }),
        };
    }
    Ok((top, top.handler))
}

/// Runs one command (see [`Engine::exec`]), counting an error reply by its code for INFO
/// `errorstats` (redis `afterErrorReply`; commands run by EXEC count their own).
pub fn exec(
    e: &mut Engine,
    client: &mut Client,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
) -> Flow {
    exec_polling(e, client, argv, now_us, out, None)
}

/// [`exec`] with the server's poller for busy scripts (see [`Engine::exec_with_poller`]); an
/// error reply is counted by its code (INFO `errorstats`).
pub fn exec_polling(
    e: &mut Engine,
    client: &mut Client,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
    poller: Option<&mut dyn crate::script::BusyPoll>,
) -> Flow {
    let start = out.len();
    let flow = exec_inner(e, client, argv, now_us, out, poller);
    if out.get(start) == Some(&b'-') && !std::mem::take(&mut e.stats.error_counted) {
        count_error(e, &out[start + 1..]);
    }
    flow
}

/// Counts an error reply (`line` after its `-`) by its code in INFO `errorstats`.
pub(crate) fn count_error(e: &mut Engine, line: &[u8]) {
    let end = line
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(line.len());
    let code = String::from_utf8_lossy(&line[..end]).into_owned();
    let n = e.stats.errors.len();
    match e.stats.errors.get_mut(&code) {
        Some(c) => *c += 1,
        None if n < crate::engine::ERRORSTATS_LIMIT => {
            e.stats.errors.insert(code, 1);
        }
        None => {}
    }
}

fn exec_inner(
    e: &mut Engine,
    client: &mut Client,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
    poller: Option<&mut dyn crate::script::BusyPoll>,
) -> Flow {
    if argv.is_empty() {
        return Flow::Continue;
    }
    let (spec, handler) = match resolve(argv) {
        Ok(x) => x,
        Err(err) => {
            e.stats.rejected_calls += 1;
            crate::cmd::tx::flag_error(client);
            ReplyWriter::new(out, client.proto).error(&err.message());
            return Flow::Continue;
        }
    };
    if !spec.arity_ok(argv.len()) {
        e.stats.rejected_calls += 1;
        let msg = crate::error::arity_message(spec.name);
        reject(e, client, spec, &msg, out);
        return Flow::Continue;
    }
    let Some(handler) = handler else {
        e.stats.rejected_calls += 1;
        crate::cmd::tx::flag_error(client);
        // A container sent alone has failed its arity check above; this is a Redis subcommand
        // recached does not implement.
        let err = CmdError::UnknownSubcommand {
            sub: argv.get(1).map_or_else(Vec::new, |s| s.to_vec()),
            container: argv[0].to_vec(),
        };
        ReplyWriter::new(out, client.proto).error(&err.message());
        return Flow::Continue;
    };
    // `no-multi` rows (SAVE, SHUTDOWN, SYNC, PSYNC) inside MULTI (redis `processCommand`, after
    // authentication, which a client in MULTI has passed).
    if client.tx.in_multi() && !client.tx.in_exec && spec.has_flag(crate::command::Flags::NO_MULTI)
    {
        e.stats.rejected_calls += 1;
        reject(
            e,
            client,
            spec,
            "ERR Command not allowed inside a transaction",
            out,
        );
        return Flow::Continue;
    }
    // Authentication and ACL permissions (acl.rs): one branch while the only user is the open
    // default one. Before cluster redirection and MULTI queueing, as in redis `processCommand`.
    if e.acl.restricted()
        && let Err(refusal) = crate::acl::check(e, client, spec, argv, now_us)
    {
        e.stats.rejected_calls += 1;
        let Some(msg) = refusal else {
            return Flow::Close; // the connection's user was deleted
        };
        reject(e, client, spec, &msg, out);
        return Flow::Continue;
    }
    // Cluster mode: a key owned by another instance gets -MOVED / -CROSSSLOT before anything
    // runs or is queued (redis `processCommand` → `getNodeByQuery`). Standalone: a no-op.
    // Inside MULTI the error also aborts the transaction (EXECABORT), as in Redis.
    // A slot `recached resize` holds (cmd/cluster/hold.rs): what would get -ASK waits instead
    // (never inside EXEC or a script), then runs again.
    let asking = client.cluster.asking;
    let mut route = crate::cmd::cluster::redirect(e, client, spec, argv, now_us / 1000, true, out);
    if let crate::cmd::cluster::Route::Held(slot) = route {
        if !client.tx.in_exec && crate::cmd::cluster::hold::postpones(e, client, slot, now_us) {
            client.cluster.asking = asking;
            return Flow::Postpone;
        }
        client.cluster.asking = asking;
        route = crate::cmd::cluster::redirect(e, client, spec, argv, now_us / 1000, false, out);
    }
    if route != crate::cmd::cluster::Route::Run {
        e.stats.rejected_calls += 1;
        if spec.name == "exec" && !client.tx.in_exec {
            // A queued command's slot moved: the transaction is dropped, none of it runs.
            crate::cmd::tx::discard_transaction(e, client);
            client.cluster.asking = false;
        } else {
            crate::cmd::tx::flag_error(client);
        }
        return Flow::Continue;
    }
    // A client in MONITOR mode is treated as a replica: no keyspace access (monitor.rs).
    if crate::monitor::refused(client, spec) {
        e.stats.rejected_calls += 1;
        reject(e, client, spec, crate::monitor::REFUSED, out);
        return Flow::Continue;
    }
    // maxmemory: evict first; a denyoom command (or anything queued in MULTI) is refused when
    // nothing can be evicted (redis `processCommand` → `performEvictions`; see evict.rs).
    if !client.tx.in_exec
        && e.config.maxmemory != 0
        && crate::evict::before_command(e, client, spec, now_us / 1000)
    {
        e.stats.rejected_calls += 1;
        e.cmdstats.rejected(spec);
        reject(e, client, spec, crate::evict::OOM_ERROR, out);
        return Flow::Continue;
    }
    // Client-side caching: the tracking table's bound and the invalidations of keys evicted
    // above reach this client before its reply (redis `processCommand`); one test while
    // nobody tracks.
    if !client.tx.in_exec && e.tracking.active() {
        crate::tracking::before_command(e, client.id, spec, argv, out);
    }
    // A script past busy-reply-threshold: only ALLOW_BUSY commands run (redis
    // `processCommand`; the script's own commands and EXEC's run inside `in_exec`).
    if let Some(busy) = &e.busy
        && !client.tx.in_exec
        && !spec.has_flag(crate::command::Flags::ALLOW_BUSY)
    {
        let msg = busy.error();
        e.stats.rejected_calls += 1;
        reject(e, client, spec, msg, out);
        return Flow::Continue;
    }
    // A failed background save stops writes (redis `writeCommandsDeniedByDiskError`); the first
    // test is one load while saves succeed.
    if (e.persist.last_bgsave_failed || e.config.min_replicas_to_write != 0)
        && !client.tx.in_exec
        && let Some(msg) = crate::snapshot::refused_write(e, client, spec)
    {
        e.stats.rejected_calls += 1;
        reject(e, client, spec, msg, out);
        return Flow::Continue;
    }
    client.last_cmd = spec.name;
    client.last_cmd_us = now_us;
    // CLIENT PAUSE (redis `processCommand`, before MULTI queueing; commands run by EXEC are
    // never postponed).
    if e.pause.active()
        && !client.tx.in_exec
        && crate::pause::postpones(e, client, spec, argv, now_us)
    {
        e.pause.postponed.push(client.id);
        return Flow::Postpone;
    }
    // Key locks of a transaction spanning engines (txlock.rs): one test while none is held.
    if e.locks.active() && !client.tx.in_exec {
        match crate::txlock::check(e, client, spec, argv, now_us) {
            crate::txlock::Verdict::Run => {}
            crate::txlock::Verdict::Postpone => return Flow::Postpone,
            crate::txlock::Verdict::Expired => {
                e.stats.rejected_calls += 1;
                ReplyWriter::new(out, client.proto).error(crate::txlock::EXPIRED);
                return Flow::Continue;
            }
        }
    }
    // Subscribed mode and MULTI queueing (redis `processCommand`); commands run by EXEC skip
    // both, as Redis runs them through `call` directly.
    if !client.tx.in_exec {
        use crate::cmd::{pubsub, tx};
        if pubsub::resp2_subscribed(client) && !pubsub::allowed_when_subscribed(spec.name) {
            e.stats.rejected_calls += 1;
            let msg = pubsub::subscribed_context_error(spec.name);
            reject(e, client, spec, &msg, out);
            return Flow::Continue;
        }
        // Feed mode: a FEED SUBSCRIBE connection only carries the feed (docs/feed.md).
        if e.feed.is_active()
            && !crate::feed::allowed_in_feed_mode(spec.name)
            && e.feed.is_subscriber(client.id)
        {
            e.stats.rejected_calls += 1;
            reject(
                e,
                client,
                spec,
                &crate::feed::feed_mode_error(spec.name),
                out,
            );
            return Flow::Continue;
        }
        if client.tx.in_multi() && !tx::runs_inside_multi(spec.name) {
            match tx::queue(client, argv) {
                Ok(()) => ReplyWriter::new(out, client.proto).simple(b"QUEUED"),
                Err(err) => ReplyWriter::new(out, client.proto).error(&err.message()),
            }
            return Flow::Continue;
        }
    }
    e.stats.total_commands_processed += 1;
    // Databases: the client's database is swapped into `e.ks` (O(1)) when it is not the one
    // there already, and left there: clients of one database, whichever, pay one comparison.
    if client.db != e.ks.data.index {
        e.use_db(client.db);
    }
    let dirty_before = e.ks.dirty;
    let reply_start = out.len();
    // Keychange feed: `None` (one test) unless someone subscribes (effect.rs).
    let feed_mark = crate::effect::begin(e);
    // Shortens the poller's object lifetime to the call's (the match arm is a coercion site).
    #[allow(clippy::needless_match)]
    let poller: Option<&mut dyn crate::script::BusyPoll> = match poller {
        Some(p) => Some(p),
        None => None,
    };
    let mut call = Call::new(&mut *client, argv, now_us, spec, &mut *out, poller);
    // One clock reading per command (the host's wall clock, which `now_us` also comes from):
    // a command starts when the previous one of the same loop iteration ended, the first one
    // at the iteration's `now_us`. Socket reads and writes between commands count towards the
    // next one (redis times `c->cmd->proc` alone).
    let started = match e.host.clock {
        Some(_) if e.timer_mark.0 == now_us => Some(e.timer_mark.1),
        Some(_) => Some(now_us),
        None => None,
    };
    let failed = if let Err(err) = handler(e, &mut call) {
        e.stats.failed_calls += 1;
        call.w().error(&err.message());
        true
    } else {
        match call.error_reply {
            None => false,
            Some(crate::call::ErrorReply::Counted) => {
                e.stats.failed_calls += 1;
                true
            }
            Some(crate::call::ErrorReply::AlreadyCounted) => {
                e.stats.error_counted = true;
                true
            }
        }
    };
    // A command that parks is counted (and logged) when it is answered (its re-run), as in
    // Redis. Commands EXEC runs are timed one by one; EXEC itself skips the slowlog.
    // The duration to log in SLOWLOG, once the call's borrow of `client` is over.
    let mut slow = None;
    if call.flow != Flow::Block {
        let duration = match (started, e.host.clock) {
            (Some(t0), Some(t)) => {
                let end = t();
                e.timer_mark = (now_us, end);
                end.saturating_sub(t0)
            }
            _ => 0,
        };
        // Durations are only known where the host has a clock (not in a browser replica).
        let track = e.config.latency_tracking && started.is_some();
        e.cmdstats.called(spec, failed, duration, track);
        if started.is_some() {
            crate::latency::after_command(e, spec.has_flag(Flags::FAST), duration, now_us);
            slow = e.slowlog.wants(duration).then_some(duration);
        }
    }
    if e.ks.dirty != dirty_before {
        // Single place where a command's changes are observed: the keychange feed and
        // snapshot scheduling hang off this counter.
        e.stats.dirty_commands += 1;
    }
    let flow = call.flow;
    if let Some(us) = slow {
        e.slowlog.push(spec, argv, client, now_us, us);
    }
    // Client-side caching: a tracking client remembers the keys it read (one test while
    // nobody tracks).
    if e.tracking.active() {
        crate::tracking::after_call(e, client, spec, argv);
    }
    if !e.monitors.is_empty() {
        crate::monitor::feed(e, client, spec, argv, now_us, out);
    }
    if let Some(mark) = feed_mark {
        // Before blocked clients are served: their pops come after this command's change.
        crate::effect::end(e, mark, spec, argv, &out[reply_start..], client.proto);
    }
    if !e.blocking.is_empty() {
        // Parked clients waiting on keys this command wrote are served (blocking.rs).
        crate::blocking::after_command(e, client, argv, e.ks.dirty != dirty_before, now_us);
    }
    if !client.tx.in_exec {
        after_command(e, client, out, reply_start);
    }
    flow
}

/// A command refused before running (arity, subscribed mode): flags an open MULTI, and when
/// the refused command is EXEC, discards the transaction with `EXECABORT … because of: <why>`
/// (redis `rejectCommand` → `execCommandAbort`).
fn reject(e: &mut Engine, client: &mut Client, spec: &CommandSpec, msg: &str, out: &mut Vec<u8>) {
    crate::cmd::tx::flag_error(client);
    if spec.name == "exec" {
        let msg = crate::cmd::tx::exec_refused(e, client, msg);
        ReplyWriter::new(out, client.proto).error(&msg);
    } else {
        ReplyWriter::new(out, client.proto).error(msg);
    }
}

/// After a command (not one run inside EXEC): publishes the keyspace events the keyspace
/// logged, turns changes of WATCHed keys into failed transactions, and moves pub/sub messages
/// addressed to this very client in front of its reply (`reply_start`), where Redis 7.0 writes
/// them (a RESP3 client subscribed to a channel it publishes to, or to its own keyspace events).
fn after_command(e: &mut Engine, client: &mut Client, out: &mut Vec<u8>, reply_start: usize) {
    crate::notify::flush_events(e);
    crate::cmd::tx::process_touched(e);
    crate::cmd::pubsub::sync_proto(e, client);
    let id = client.id;
    if e.deliveries.iter().any(|d| d.client_id == id && !d.unblock) {
        let mut own = Vec::new();
        e.deliveries.retain(|d| {
            if d.client_id == id && !d.unblock {
                own.extend_from_slice(&d.bytes);
                false
            } else {
                true
            }
        });
        out.splice(reply_start..reply_start, own);
    }
    // Client-side caching: invalidations this command caused, this client's after its reply.
    if e.tracking.active() {
        crate::tracking::after_command(e, client);
    }
}
