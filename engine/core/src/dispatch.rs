//! Command dispatch: lookup → arity → handler → bookkeeping (redis `processCommand` / `call`).
//!
//! - Lookup is case-insensitive and allocation-free over the generated table
//!   ([`crate::command::all`]: Redis's rows plus recached's own): the name is lowercased on the
//!   stack and found in a hash map built with [`Handlers`] (Redis keeps its commands in a dict
//!   for the same reason). A container command (CONFIG, CLIENT, COMMAND) with at least
//!   one argument resolves to its subcommand row (`config|get`), like redis
//!   `lookupCommandLogic`.
//! - The arity check here is the only place that writes
//!   `ERR wrong number of arguments for '<fullname>' command`; handlers assume their arity.
//! - [`handler_for`] / [`Handlers`] map table rows to handler functions by name, once, when the engine is built:
//!   one declarative mapping, no per-command predicates elsewhere.
//! - Bookkeeping: command and error counters, the client's last command, and the change
//!   counter (`Keyspace::dirty`, bumped by every keyspace mutation) compared before/after so
//!   write effects are observed in one place.

use resp::ReplyWriter;

use crate::command::CommandSpec;
use crate::error::{CmdError, unknown_command_message};
use crate::{Client, Engine, Flow};

/// One command invocation as a handler sees it.
pub struct Call<'a> {
    pub client: &'a mut Client,
    /// `argv[0]` is the command name as sent.
    pub argv: &'a [&'a [u8]],
    /// Unix time, µs and ms.
    pub now_us: u64,
    pub now_ms: u64,
    /// The row being run (subcommand row for containers).
    pub spec: &'static CommandSpec,
    /// What the server must do after the reply (QUIT, CLIENT LIST).
    pub flow: Flow,
    out: &'a mut Vec<u8>,
}

impl Call<'_> {
    /// A writer for the reply, in the client's protocol.
    pub fn w(&mut self) -> ReplyWriter<'_> {
        ReplyWriter::new(self.out, self.client.proto)
    }

    /// The client and the output buffer at once (EXEC runs queued commands into `out`).
    pub fn parts(&mut self) -> (&mut Client, &mut Vec<u8>) {
        (self.client, self.out)
    }
}

/// A command implementation. It writes its reply through [`Call::w`] or returns an error
/// (written by the dispatcher); it never writes part of a reply and then fails.
pub type Handler = fn(&mut Engine, &mut Call<'_>) -> Result<(), CmdError>;

/// The handler of a table row, by full name. Rows without a handler (subcommands that exist in
/// Redis but not here) answer as an unknown subcommand.
pub fn handler_for(name: &str) -> Option<Handler> {
    use crate::cmd::{connection as conn, keys, server};
    use crate::types::string as s;
    Some(match name {
        // strings
        "get" => s::get,
        "set" => s::set,
        "setnx" => s::setnx,
        "setex" => s::setex,
        "psetex" => s::psetex,
        "getset" => s::getset,
        "getdel" => s::getdel,
        "getex" => s::getex,
        "mget" => s::mget,
        "mset" => s::mset,
        "msetnx" => s::msetnx,
        "incr" => s::incr,
        "decr" => s::decr,
        "incrby" => s::incrby,
        "decrby" => s::decrby,
        "incrbyfloat" => s::incrbyfloat,
        "append" => s::append,
        "strlen" => s::strlen,
        "getrange" | "substr" => s::getrange,
        "setrange" => s::setrange,
        // keyspace
        "del" | "unlink" => keys::del,
        "exists" => keys::exists,
        "touch" => keys::touch,
        "type" => keys::type_,
        "expire" => keys::expire,
        "pexpire" => keys::pexpire,
        "expireat" => keys::expireat,
        "pexpireat" => keys::pexpireat,
        "ttl" => keys::ttl,
        "pttl" => keys::pttl,
        "expiretime" => keys::expiretime,
        "pexpiretime" => keys::pexpiretime,
        "persist" => keys::persist,
        "rename" => keys::rename,
        "renamenx" => keys::renamenx,
        "keys" => keys::keys,
        "scan" => keys::scan,
        "randomkey" => keys::randomkey,
        "dbsize" => keys::dbsize,
        "flushdb" | "flushall" => keys::flush,
        "copy" => keys::copy,
        "object|encoding" => keys::object_encoding,
        "object|refcount" => keys::object_refcount,
        "object|idletime" => keys::object_idletime,
        "object|freq" => keys::object_freq,
        "object|help" => keys::object_help,
        "wait" => keys::wait,
        // connection
        "select" => conn::select,
        "ping" => conn::ping,
        "echo" => conn::echo,
        "quit" => conn::quit,
        "reset" => conn::reset,
        "hello" => conn::hello,
        "client|setname" => conn::client_setname,
        "client|getname" => conn::client_getname,
        "client|id" => conn::client_id,
        "client|info" => conn::client_info,
        "client|list" => conn::client_list,
        "client|help" => conn::client_help,
        // server
        "time" => server::time,
        "info" => server::info,
        "config|get" => server::config_get,
        "config|set" => server::config_set,
        "config|resetstat" => server::config_resetstat,
        "config|help" => server::config_help,
        "command" => server::command,
        "command|count" => server::command_count,
        "command|info" => server::command_info,
        "command|docs" => server::command_docs,
        "command|getkeys" => server::command_getkeys,
        "command|list" => server::command_list,
        "command|help" => server::command_help,
        // One module per data type / feature owns its rows (see each `handler_for`).
        _ => {
            use crate::cmd::{cluster, pubsub, tx};
            use crate::types::{hash, list, set, zset};
            return list::handler_for(name)
                .or_else(|| hash::handler_for(name))
                .or_else(|| set::handler_for(name))
                .or_else(|| zset::handler_for(name))
                .or_else(|| tx::handler_for(name))
                .or_else(|| pubsub::handler_for(name))
                .or_else(|| cluster::handler_for(name))
                .or_else(|| crate::evict::handler_for(name))
                .or_else(|| crate::snapshot::handler_for(name))
                .or_else(|| crate::feed::handler_for(name))
                .or_else(|| crate::acl::handler_for(name));
        }
    })
}

/// Handlers per table row: `(row handler, subcommand handlers)`, built once per engine; rows
/// are numbered as [`crate::command::lookup_index`] numbers them.
pub struct Handlers {
    rows: Vec<(Option<Handler>, Vec<Option<Handler>>)>,
}

impl Handlers {
    pub fn new() -> Handlers {
        let rows = crate::command::all()
            .map(|c| {
                (
                    handler_for(c.name),
                    c.subcommands.iter().map(|s| handler_for(s.name)).collect(),
                )
            })
            .collect();
        Handlers { rows }
    }
}

impl Default for Handlers {
    fn default() -> Self {
        Handlers::new()
    }
}

/// Position of a top-level command in the table, any case.
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    crate::command::lookup_index(name)
}

/// The row and handler `argv` resolves to, or the error Redis gives for an unknown
/// command or subcommand.
pub fn resolve(
    handlers: &Handlers,
    argv: &[&[u8]],
) -> Result<(&'static CommandSpec, Option<Handler>), CmdError> {
    let Some(ci) = crate::command::lookup_index(argv[0]) else {
        return Err(CmdError::Other(unknown_command_message(argv)));
    };
    let top = crate::command::spec_at(ci);
    if argv.len() >= 2 && !top.subcommands.is_empty() {
        let sub = argv[1];
        return match top
            .subcommands
            .iter()
            .position(|s| s.short_name().as_bytes().eq_ignore_ascii_case(sub))
        {
            Some(si) => Ok((&top.subcommands[si], handlers.rows[ci].1[si])),
            None => Err(CmdError::UnknownSubcommand {
                sub: sub.to_vec(),
                container: argv[0].to_vec(),
            }),
        };
    }
    Ok((top, handlers.rows[ci].0))
}

/// redis `commandCheckArity`.
pub fn arity_ok(spec: &CommandSpec, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(spec.arity);
    if arity > 0 {
        arity == argc
    } else {
        argc >= -arity
    }
}

/// Runs one command (see [`Engine::exec`]).
pub fn exec(
    e: &mut Engine,
    client: &mut Client,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
) -> Flow {
    if argv.is_empty() {
        return Flow::Continue;
    }
    let resolved = resolve(&e.handlers, argv);
    let (spec, handler) = match resolved {
        Ok(x) => x,
        Err(err) => {
            e.stats.rejected_calls += 1;
            crate::cmd::tx::flag_error(client);
            ReplyWriter::new(out, client.proto).error(&err.message());
            return Flow::Continue;
        }
    };
    if !arity_ok(spec, argv.len()) {
        e.stats.rejected_calls += 1;
        let msg = crate::error::arity_message(spec.name);
        reject(e, client, spec, &msg, out);
        return Flow::Continue;
    }
    let Some(handler) = handler else {
        e.stats.rejected_calls += 1;
        crate::cmd::tx::flag_error(client);
        if !spec.name.contains('|') {
            // A table row whose handler is not written yet: as if the command did not exist.
            let err = CmdError::Other(unknown_command_message(argv));
            ReplyWriter::new(out, client.proto).error(&err.message());
            return Flow::Continue;
        }
        // A Redis subcommand recached does not implement.
        let err = CmdError::UnknownSubcommand {
            sub: argv[1].to_vec(),
            container: argv[0].to_vec(),
        };
        ReplyWriter::new(out, client.proto).error(&err.message());
        return Flow::Continue;
    };
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
    if !crate::cmd::cluster::redirect(e, client, spec, argv, out) {
        e.stats.rejected_calls += 1;
        crate::cmd::tx::flag_error(client);
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
    client.last_cmd = spec.name;
    client.last_cmd_us = now_us;
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
    let dirty_before = e.ks.dirty;
    let reply_start = out.len();
    // Keychange feed: `None` (one test) unless someone subscribes (effect.rs).
    let feed_mark = crate::effect::begin(e);
    let mut call = Call {
        client: &mut *client,
        argv,
        now_us,
        now_ms: now_us / 1000,
        spec,
        flow: Flow::Continue,
        out: &mut *out,
    };
    let failed = if let Err(err) = handler(e, &mut call) {
        e.stats.failed_calls += 1;
        call.w().error(&err.message());
        true
    } else {
        false
    };
    e.cmdstats.called(spec, failed);
    if e.ks.dirty != dirty_before {
        // Single place where a command's changes are observed: the keychange feed and
        // snapshot scheduling hang off this counter.
        e.stats.dirty_commands += 1;
    }
    let flow = call.flow;
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
    crate::cmd::pubsub::flush_events(e);
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
}
