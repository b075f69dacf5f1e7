//! Executing one parsed request of a client: authentication, then the route plan
//! ([`route::plan`]) carried out — forwarded or split over the shared backend connections,
//! fanned out and merged, answered locally, or handed to a dedicated connection for a
//! transaction, a subscription or a blocking command. The mio loop (`crate::event_loop`)
//! owns the sockets and calls [`handle`] for each complete request.
//!
//! # Requests that need a dedicated connection
//!
//! [`handle`] takes each parsed request: an ordinary client goes straight to
//! [`route::plan`]; a client in a transaction goes through [`crate::tx`], a subscribed one
//! through [`crate::pubsub`]. A request for another lane than the client's last one
//! ([`Lane`]) is left unparsed ([`Flow::Wait`], the event loop pauses the client with
//! `wait_lane`) until the client's earlier replies are in, then parsed again.
//!
//! # RESP3 clients
//!
//! A client that said `HELLO 3` has its shared-lane requests sent over each instance's
//! RESP3 link (`crate::backend::link_index`, opened with `HELLO 3` by the first RESP3 request for
//! that instance), and its dedicated connections are switched with `HELLO 3` too, so every
//! instance reply (maps, sets, doubles, `_`, push messages) reaches it as the instance wrote
//! it. Reply slots and lanes work as for RESP2: each link answers in its own order. While
//! subscribed, a RESP3 client may run any command (as with Redis); messages are push frames
//! that join its output between replies.
//!
//! # Client-side caching
//!
//! `CLIENT TRACKING ON` goes to every instance on the client's dedicated connections
//! (`Plan::DedicatedFanOut`); from then on its single-instance requests take those
//! connections too (as a WATCHed instance's do), so each instance remembers the keys it
//! served this client and pushes `invalidate` frames on that connection, which are relayed to
//! the client like pub/sub messages (`crate::dedicated::is_message`). Requests split over
//! several instances (MGET of keys on different instances…) send each part on the client's
//! dedicated connection to its instance ([`dedicated_split`]); fan-outs (KEYS, SCAN, DBSIZE)
//! read no value and keep the shared links.
//!
//! REDIRECT names a proxy client (the id CLIENT ID answers through the proxy). A client that
//! subscribes to `__redis__:invalidate` is subscribed on every instance, and the proxy asks
//! each instance its id for that connection (`crate::pubsub::INVALIDATE`); a tracking
//! client's `REDIRECT <proxy id>` reaches each instance naming the target's connection to it
//! ([`tracking_redirect`]), so each instance sends the invalidations of its keys there and
//! the proxy relays them to the target (a PUBLISH on the channel, which every instance
//! delivers, is relayed once: `crate::dedicated::relay_message`). GETREDIR and TRACKINGINFO
//! answer the proxy id.
//!
//! # MONITOR
//!
//! MONITOR turns the client's dedicated connection to every instance into a monitor and
//! relays their lines as they come (each instance's in its order; lines of different
//! instances interleave as they arrive). A line shows the instance's view: the database and
//! the address of the proxy's connection that ran the command, not the application client's.
//! Only the proxy's clients' commands are relayed: lines of the instance's other clients
//! (the supervisor's health checks, the fan-out, `recached resize`, direct clients) and the
//! proxy's own `CLUSTER SLOTS` refreshes and `ASKING`s are dropped
//! (`crate::dedicated::monitor_line_shown`). A transaction that ends here without reaching an
//! instance (aborted while queueing, discarded, empty) gets the proxy's own lines for its
//! MULTI and its EXEC or DISCARD, with the client's address ([`feed_local_end`]); one aborted
//! on its instance is aborted there by an EXEC, so the instance shows it as Redis does.
//! While monitoring, the client is refused keyspace commands as by Redis (`-ERR Replica can't
//! interact with the keyspace`); RESET (or closing) ends it.
//!
//! # Databases
//!
//! A client's SELECTed database ([`Session::db`]) chooses the links its shared-lane requests
//! take the same way: each (protocol, database) pair has its own link per instance, opened
//! by the first request that needs it with `SELECT db` as its first request
//! ([`crate::backend::link_index`]), so requests are forwarded byte for byte and a database
//! costs nothing per request. A dedicated connection gets `SELECT db` (reply dropped) before
//! a request whenever its owner's database changed since the last one ([`sync_db`]); a
//! subscription does not depend on the database and sends none.
//!
//! # Scripts
//!
//! EVAL, EVALSHA, FCALL and their `_RO` forms ([`Plan::Script`]) take one of the **script
//! links** of their (protocol, database) pair ([`Lane::Script`]): the client's current one
//! while its earlier scripts are unanswered, else an idle one ([`script_link`]). A script
//! that runs past `busy-reply-threshold` then holds only its link: other clients' requests,
//! ordinary ones on the ordinary links and scripts on other script links, reach the
//! instance, which answers them `-BUSY` as a single Redis would (and `SCRIPT KILL`/`FUNCTION
//! KILL` go on the client's dedicated connections). Only when every script link of an
//! instance is taken does a script queue behind another. Like any lane switch, a client's
//! script after its ordinary requests (or the other way round) waits until the earlier
//! replies are in, so a pipeline mixing them still runs in order.

use std::time::Instant;

use mio::Registry;

use crate::auth::Gate;
use crate::backend::Backend;
use crate::client::{Replies, Waiter};
use crate::coord::{Coord, Coordinator, Gather, GatherEngine};
use crate::dedicated::{self, Dedicated, Lane};
use recached_net::Slab;

use crate::backend::HELLO3;
use crate::event_loop::{backend_token, dedicated_token, mark};
use crate::pubsub::{self, Kind};
use crate::route::{self, Args, Fleet, Plan, ReplyMode, Session};
use crate::slots::SlotMap;
use crate::split::{Merge, Part};
use crate::spread::{Spread, SpreadPart};
use crate::tx::{self, Step};

/// The proxy-wide state a request may touch (everything but the clients).
pub(crate) struct Ctx<'a> {
    pub(crate) registry: &'a Registry,
    pub(crate) backends: &'a mut [Backend],
    pub(crate) dedicated: &'a mut Slab<Dedicated>,
    pub(crate) fleet: &'a mut Fleet,
    pub(crate) dirty_backends: &'a mut Vec<usize>,
    pub(crate) dirty_dedicated: &'a mut Vec<usize>,
    /// MONITOR lines of commands answered here, for every monitoring client
    /// ([`feed_local_end`]).
    pub(crate) monitor_feed: &'a mut Vec<Vec<u8>>,
}

/// The requesting client's state (its read buffer is borrowed by the request's args).
pub(crate) struct Me<'a> {
    pub(crate) token: usize,
    pub(crate) id: u64,
    pub(crate) replies: &'a mut Replies,
    pub(crate) session: &'a mut Session,
    pub(crate) conns: &'a mut Vec<(usize, usize)>,
    pub(crate) lane: &'a mut Lane,
    /// Its blocking read over several instances in progress (`crate::spread`).
    pub(crate) spread: &'a mut Option<Spread>,
    /// Its execution spanning instances in progress (`crate::coord`).
    pub(crate) coord: &'a mut Option<Coordinator>,
    /// Its scripts in flight (`crate::coord::Scripts`).
    pub(crate) scripts: &'a mut crate::coord::Scripts,
    /// Its transaction's run again after slots moved (`crate::txmove`).
    pub(crate) txm: &'a mut crate::txmove::TxMoves,
    /// Its blocking commands sent again after slots moved (`crate::blockmove`).
    pub(crate) bmove: &'a mut crate::blockmove::BlockMoves,
}

impl Me<'_> {
    /// Switches to `lane` if the client may: its requests on another lane must all be
    /// answered first (`crate::dedicated`, "Lanes and ordering"). `false`: wait.
    fn enter_lane(&mut self, lane: Lane) -> bool {
        if *self.lane != lane {
            if self.replies.pending_len() > 0 {
                return false;
            }
            *self.lane = lane;
        }
        true
    }

    fn waiter(&self, seq: u64, part: u32) -> Waiter {
        Waiter {
            token: self.token,
            client_id: self.id,
            seq,
            part,
            hops: crate::client::Hops::NONE,
        }
    }

    /// A waiter whose reply is looked at for slot moves (`crate::txmove`): a queued
    /// command's, an EXEC's.
    fn tx_waiter(&self, seq: u64, part: u32) -> Waiter {
        Waiter {
            hops: crate::client::Hops {
                tx: true,
                ..crate::client::Hops::NONE
            },
            ..self.waiter(seq, part)
        }
    }
}

/// Decides and carries out one request of a client, under its CLIENT REPLY mode: with
/// OFF or SKIP its reply slots are silent (dropped when answered); SKIP lasts one command.
pub(crate) fn handle<A: Args + ?Sized>(
    args: &A,
    raw: &[u8],
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    let before = me.session.reply;
    if before == ReplyMode::On {
        return handle_request(args, raw, me, ctx);
    }
    let client_reply = args.argc() == 3
        && args.arg(0).eq_ignore_ascii_case(b"client")
        && args.arg(1).eq_ignore_ascii_case(b"reply");
    // `CLIENT REPLY ON` is answered (Redis clears the flag before replying). The
    // (un)subscribe confirmations are sent whatever the reply mode, in RESP2 too (Redis 7.0
    // sends them flagged CLIENT_PUSHING: pubsub.c, addReplyPubsubSubscribed).
    let push = crate::pubsub::Kind::from_name(args.arg(0)).is_some();
    let answered = push || (client_reply && args.arg(2).eq_ignore_ascii_case(b"on"));
    me.replies.silent = !answered;
    let flow = handle_request(args, raw, me, ctx);
    me.replies.silent = false;
    if flow == Flow::Wait {
        me.session.reply = before; // parsed again later
    } else if before == ReplyMode::Skip && !client_reply {
        me.session.reply = ReplyMode::On;
    }
    flow
}

fn handle_request<A: Args + ?Sized>(
    args: &A,
    raw: &[u8],
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    // Authentication and ACL ([`crate::auth`]): one branch while no password or user is set.
    if let Gate::Reply(reply) = crate::auth::gate(args, me.session, &mut ctx.fleet.acl) {
        me.replies.push_local(&reply, false);
        return Flow::Continue;
    }
    // HELLO, RESET and SELECT may change the protocol or the database, and so the instance
    // links that serve the client: like a lane switch, they wait until every earlier request
    // is answered (a `MOVE k 0` on database 1's link must run before a `GET k` that follows
    // on database 0's).
    let name = args.arg(0);
    if (name.len() == 5 || name.len() == 6)
        && me.replies.pending_len() > 0
        && (name.eq_ignore_ascii_case(b"hello")
            || name.eq_ignore_ascii_case(b"reset")
            || name.eq_ignore_ascii_case(b"select"))
    {
        return Flow::Wait;
    }
    // A monitor may not touch the keyspace (a replica, to Redis: `crate::exec`, "MONITOR").
    if me.session.monitor
        && let Some(spec) = engine_core::command::lookup(name)
        && spec.is_implemented()
        && spec.arity_ok(args.argc())
        && engine_core::monitor::touches_keyspace(spec)
    {
        me.replies
            .push_local(b"-ERR Replica can't interact with the keyspace\r\n", false);
        return Flow::Continue;
    }
    // Ordinary clients: one check, then the router. (A client whose transaction runs over
    // the shared links has no dedicated connection: while its EXEC is under way its later
    // requests wait below, as on the dedicated path.)
    if me.conns.is_empty() && !me.session.tx.active() && me.coord.is_none() {
        let plan = route::plan(args, me.session, ctx.fleet);
        return run_plan(plan, args, raw, me, ctx);
    }
    // An EXEC whose outcome may yet run the transaction again on the same connections
    // (`crate::txmove`): later requests wait for it.
    if me.txm.exec.is_some() {
        if me.replies.pending_len() > 0 {
            return Flow::Wait;
        }
        me.txm.exec = None; // answered by a path that does not look at moves
    }
    if args.arg(0).eq_ignore_ascii_case(b"reset") {
        // RESET ends transactions, WATCH and subscriptions: their connections are closed
        // once everything asked before is answered; the router then answers +RESET.
        if me.replies.pending_len() > 0 {
            return Flow::Wait;
        }
        for (_, id) in me.conns.drain(..) {
            if let Some(mut d) = ctx.dedicated.try_remove(id) {
                d.wire.close(ctx.registry);
            }
        }
        me.session.tx.reset();
        me.session.subs.clear();
        me.session.monitor = false;
        *me.lane = Lane::Shared;
    } else if me.session.subs.active() && me.session.proto == resp::Proto::Resp2 {
        // RESP2 subscribed mode; a RESP3 client keeps the full command set.
        return subscribed(args, raw, me, ctx);
    } else if me.session.tx.active() {
        return in_transaction(args, raw, me, ctx);
    } else if name.eq_ignore_ascii_case(b"hello") {
        let plan = route::plan(args, me.session, ctx.fleet);
        // Its dedicated connections follow at once, so messages on them change shape
        // with the client's replies.
        for &(_, id) in me.conns.iter() {
            if let Some(d) = ctx.dedicated.get_mut(id) {
                switch_proto(d, id, me.session.proto, ctx.dirty_dedicated);
            }
        }
        return run_plan(plan, args, raw, me, ctx);
    }
    let plan = route::plan(args, me.session, ctx.fleet);
    run_plan(plan, args, raw, me, ctx)
}

/// A request of a client inside WATCH or MULTI ([`crate::tx`]).
fn in_transaction<A: Args + ?Sized>(
    args: &A,
    raw: &[u8],
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    // A transaction already under way on its instances (not its first command).
    let in_multi = me.session.tx.multi && me.session.tx.pinned.is_some();
    // Moving between the parts of a transaction under way never waits (below).
    let never_waits = in_multi
        && me.coord.is_none()
        && me.spread.is_none()
        && matches!(*me.lane, Lane::Dedicated(_) | Lane::Spread);
    // A lane switch can only have to wait while replies are pending; only then is the
    // state kept to be restored (a clone holds every queued request: not per command).
    let before = (!never_waits && me.replies.pending_len() > 0).then(|| me.session.tx.clone());
    // EXEC keeps the queued requests, to run them again if a slot moved (`crate::txmove`).
    let exec = me.session.tx.multi && crate::txmove::is_exec(args.arg(0));
    if exec {
        me.txm.at_exec(&mut me.session.tx);
    }
    let queued = !exec && me.session.tx.multi;
    let kept = me.session.tx.unit_ends.len();
    // Over the shared links (`crate::txshared`): the parts kept so far, taken at the end.
    let shared = me.session.tx.shared;
    let ends = shared && (exec || crate::txmove::is_discard(args.arg(0)));
    let mut parts = match ends {
        true => std::mem::take(&mut me.session.tx.shared_parts),
        false => Vec::new(),
    };
    let step = me
        .session
        .tx
        .step(args, raw, &ctx.fleet.up, &ctx.fleet.slots);
    if exec && !shared {
        // The next transaction takes the shared links if this one spans instances.
        me.session.tx.spanned_last = matches!(step, Step::Coordinate { .. })
            || (me.session.tx.spanned_last && matches!(step, Step::Gather { .. }));
    }
    // A transaction on one instance takes its dedicated connection; one spanning instances
    // takes the connections to each (`crate::coord`). Over the shared links nothing is sent
    // before EXEC, which takes the shared lane (a gathered run: the dedicated connections).
    let lane = match &step {
        Step::Gather { .. } if shared => Some(Lane::Spread),
        _ if shared => exec.then_some(Lane::Shared),
        Step::Send { .. } if me.session.tx.spans_many() => Some(Lane::Spread),
        Step::Send { instance, .. } | Step::ExecAbort { instance } => {
            Some(Lane::Dedicated(*instance))
        }
        Step::SendParts { .. }
        | Step::Coordinate { .. }
        | Step::Gather { .. }
        | Step::EndAll { .. } => Some(Lane::Spread),
        _ => None,
    };
    // Inside MULTI nothing runs before EXEC, and EXEC (or DISCARD) follows the queued
    // commands on each of the transaction's connections: moving between them needs no wait
    // for earlier replies (the first queued command waited for those of the commands before
    // MULTI).
    let between_parts = never_waits && matches!(lane, Some(Lane::Dedicated(_) | Lane::Spread));
    if between_parts {
        *me.lane = lane.expect("matched");
    } else if let Some(lane) = lane
        && !me.enter_lane(lane)
    {
        if let Some(before) = before {
            me.session.tx = before; // decided again once the lane is free
        }
        return Flow::Wait;
    }
    // A request kept for a run again: its reply slot is the next one (`crate::txmove`).
    if queued && me.session.tx.unit_ends.len() > kept {
        me.txm.queued(me.replies.next_seq(), kept == 0);
    }
    if shared && !matches!(step, Step::Route | Step::Quit) {
        shared_step(step, args, raw, exec, ends, &mut parts, me, ctx);
        return Flow::Continue;
    }
    match step {
        Step::Reply(bytes) => me.replies.push_local(&bytes, false),
        Step::LocalEnd { reply, multi } => {
            me.replies.push_local(reply, false);
            feed_local_end(&multi, args, me, ctx);
        }
        Step::Quit => {
            me.replies.push_local(b"+OK\r\n", true);
            return Flow::StopReading;
        }
        Step::Route => {
            let plan = route::plan(args, me.session, ctx.fleet);
            // Between WATCH and MULTI, requests for the watched instance use its
            // connection (no lane switch, and reads see what WATCH saw).
            let plan = match plan {
                Plan::Forward(i) if me.session.tx.involves(i) => Plan::Blocking(i),
                other => other,
            };
            return run_plan(plan, args, raw, me, ctx);
        }
        Step::Send { instance, prelude } => match ready_conn(instance, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                for request in &prelude {
                    d.send(request, None, 1);
                }
                let seq = me.replies.push_plain();
                // A queued command (still in MULTI) or the EXEC: looked at for slot moves.
                let w = if queued && me.session.tx.multi {
                    me.tx_waiter(seq, 0)
                } else if exec {
                    me.txm.exec = Some(seq);
                    me.tx_waiter(seq, 0)
                } else {
                    if crate::txmove::is_discard(args.arg(0)) {
                        me.txm.discarded(seq);
                    }
                    me.waiter(seq, 0)
                };
                d.send(raw, Some(w), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            Err(error) => {
                me.session.tx.pin_failed(instance);
                me.replies.push_local(&error, false);
            }
        },
        Step::SendParts { parts, merge } => {
            let seq = me.replies.push_parts(parts.len(), merge);
            for (p, part) in parts.iter().enumerate() {
                match ready_conn(part.instance, me, ctx) {
                    Ok(id) => {
                        let d = ctx.dedicated.get_mut(id).expect("just looked up");
                        for request in &part.prelude {
                            d.send(request, None, 1);
                        }
                        let w = match queued && me.session.tx.multi {
                            true => me.tx_waiter(seq, p as u32),
                            false => me.waiter(seq, p as u32),
                        };
                        d.send(&part.request, Some(w), 1);
                        mark(&mut d.dirty, ctx.dirty_dedicated, id);
                    }
                    Err(error) => {
                        if me.session.tx.multi {
                            me.session.tx.aborted = true;
                        }
                        me.replies.fill(seq, p as u32, &error);
                    }
                }
            }
        }
        Step::Coordinate { engines, order } => {
            let seq = me.replies.push_plain();
            me.txm.exec = Some(seq);
            coordinate_at(seq, engines, order, me, ctx);
        }
        Step::Gather {
            unit,
            keys,
            engines,
        } => {
            let seq = me.replies.push_plain();
            me.txm.exec = Some(seq);
            gather(Some(seq), unit, keys, engines, true, me, ctx);
        }
        Step::EndAll { engines, reply } => {
            if !exec {
                me.txm.discarded(me.replies.next_seq());
            }
            let seq = me
                .replies
                .push_parts(engines.len(), Merge::Fixed(reply.into_owned()));
            for (p, &(instance, multi)) in engines.iter().enumerate() {
                let request: &[u8] = if multi {
                    b"*1\r\n$7\r\nDISCARD\r\n"
                } else {
                    b"*1\r\n$7\r\nUNWATCH\r\n"
                };
                match me.conns.iter().find(|(i, _)| *i == instance) {
                    Some(&(_, id)) if ctx.dedicated.get(id).is_some() => {
                        let d = ctx.dedicated.get_mut(id).expect("just looked up");
                        d.send(request, Some(me.waiter(seq, p as u32)), 1);
                        mark(&mut d.dirty, ctx.dirty_dedicated, id);
                    }
                    _ => me.replies.fill(seq, p as u32, b"+OK\r\n"),
                }
            }
        }
        Step::ExecAbort { instance } => match conn_for(instance, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                let seq = me
                    .replies
                    .push_parts(1, Merge::Fixed(tx::EXECABORT.to_vec()));
                // A GET without its key is refused while queueing, as the client's command
                // was here, so the instance's EXEC (the client's, as spelled) answers
                // EXECABORT and MONITOR shows it.
                d.send(b"*1\r\n$3\r\nGET\r\n", None, 1);
                d.send(raw, Some(me.waiter(seq, 0)), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            Err(_) => me.replies.push_local(tx::EXECABORT, false),
        },
    }
    Flow::Continue
}

/// A request of a transaction over the shared links (`crate::txshared`): a queued command
/// joins its instances' parts and is answered `+QUEUED` here; EXEC prepares and commits the
/// parts on the shared links (or runs the transaction on the dedicated path when a key is
/// held); DISCARD and an aborted EXEC are answered here (nothing was sent).
#[allow(clippy::too_many_arguments)]
fn shared_step<A: Args + ?Sized>(
    step: Step,
    args: &A,
    raw: &[u8],
    exec: bool,
    ends: bool,
    parts: &mut Vec<tx::SharedPart>,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) {
    let tx = &mut me.session.tx;
    match step {
        Step::Send { .. } | Step::SendParts { .. } if !ends && tx.unit_dropped => {
            // Past the bound on a transaction's requests (`tx::MAX_UNIT_BYTES`).
            tx.aborted = true;
            tx.shared_parts = Vec::new();
            me.replies.push_local(SHARED_TOO_BIG, false);
        }
        Step::Send { instance, prelude } if !ends => {
            for r in prelude.iter().map(Vec::as_slice).chain([raw]) {
                tx::queue_shared(&mut tx.shared_parts, instance, r);
            }
            me.replies.push_local(b"+QUEUED\r\n", false);
        }
        Step::SendParts { parts: split, .. } if !ends => {
            for part in &split {
                for r in part.prelude.iter().chain([&part.request]) {
                    tx::queue_shared(&mut tx.shared_parts, part.instance, r);
                }
            }
            me.replies.push_local(b"+QUEUED\r\n", false);
        }
        Step::Coordinate { order, .. } => shared_exec(order, std::mem::take(parts), me, ctx),
        // DISCARD of a transaction on one instance: nothing was sent.
        Step::Send { .. } if !exec => me.replies.push_local(b"+OK\r\n", false),
        Step::Send { instance, prelude } => {
            // EXEC of a transaction on one instance (with its held keyless commands, if
            // nothing else, in `prelude`).
            for r in &prelude {
                tx::queue_shared(parts, instance, r);
            }
            let commands = parts.iter().map(|p| p.commands).sum::<usize>();
            let order = (0..commands)
                .map(|index| crate::coord::Entry::One { instance, index })
                .collect();
            shared_exec(order, std::mem::take(parts), me, ctx);
        }
        Step::Gather { unit, keys, .. } => {
            // Nothing was sent to any instance: the gathered run starts from scratch.
            let seq = me.replies.push_plain();
            me.txm.exec = Some(seq);
            gather(Some(seq), unit, keys, Vec::new(), true, me, ctx);
        }
        Step::Reply(bytes) => me.replies.push_local(&bytes, false),
        Step::LocalEnd { reply, multi } => {
            me.replies.push_local(reply, false);
            feed_local_end(&multi, args, me, ctx);
        }
        Step::ExecAbort { .. } => me.replies.push_local(tx::EXECABORT, false),
        Step::EndAll { reply, .. } => me.replies.push_local(&reply, false),
        Step::SendParts { .. } => me.replies.push_local(b"+OK\r\n", false),
        Step::Route | Step::Quit => unreachable!("handled by the caller"),
    }
}

/// The MONITOR lines of a transaction that ended here without reaching an instance
/// ([`Step::LocalEnd`]): its MULTI, then its EXEC or DISCARD, as Redis shows them, with the
/// client's own address (no instance connection ran them).
fn feed_local_end<A: Args + ?Sized>(multi: &[u8], args: &A, me: &Me<'_>, ctx: &mut Ctx<'_>) {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let argv: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
    let (db, addr) = (me.session.db, &me.session.addr);
    let line =
        |name: &str, argv: &[&[u8]]| engine_core::monitor::line_of(db, addr, name, argv, now_us);
    ctx.monitor_feed.push(line("multi", &[multi]));
    ctx.monitor_feed.push(line("exec", &argv));
}

/// A command of a transaction over the shared links could not be kept: its requests pass
/// `tx::MAX_UNIT_BYTES` (the transaction is aborted, as Redis does on a queueing error).
const SHARED_TOO_BIG: &[u8] =
    b"-ERR transaction too large for the recached proxy (over 64 MiB of queued requests)\r\n";

/// EXEC over the shared links: `order` the client's replies, `parts` each instance's.
fn shared_exec(
    order: Vec<crate::coord::Entry>,
    parts: Vec<tx::SharedPart>,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) {
    let seq = me.replies.push_plain();
    me.txm.exec = Some(seq);
    me.session.tx.spanned_last = parts.len() > 1;
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let per = ctx.fleet.per_instance;
    let db = me.session.db;
    let parts = parts
        .into_iter()
        .map(|p| {
            let link = crate::backend::link_index(per, db, resp3, 0, p.instance);
            (p.instance, link, p.body, p.elements)
        })
        .collect();
    let t = crate::txshared::SharedTx::start(seq, me.id, parts, order);
    begin_coordinator(Coordinator::Shared(t), me, ctx);
}

/// EXEC of a transaction spanning instances: the coordinator starts on the client's
/// dedicated connections to them (`crate::coord`); its reply fills slot `seq`.
pub(crate) fn coordinate_at(
    seq: u64,
    engines: Vec<(usize, bool)>,
    order: Vec<crate::coord::Entry>,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) {
    let mut parts = Vec::with_capacity(engines.len());
    for (instance, multi) in engines {
        match me.conns.iter().find(|(i, _)| *i == instance) {
            Some(&(_, id)) if ctx.dedicated.get(id).is_some() => {
                parts.push(Coord::engine(instance, id, multi));
            }
            _ => {
                // The connection holding this part is gone (the instance failed): nothing
                // ran; the others' parts are dropped with their connections' state.
                let error = ctx.backends[ctx.fleet.primary(instance)]
                    .unavailable
                    .clone();
                for &(i, id) in me.conns.iter() {
                    if i != instance
                        && let Some(d) = ctx.dedicated.get_mut(id)
                    {
                        d.send(b"*1\r\n$7\r\nDISCARD\r\n", None, 1);
                        mark(&mut d.dirty, ctx.dirty_dedicated, id);
                    }
                }
                me.txm.answered_elsewhere(seq);
                me.replies.fill(seq, 0, &error);
                return;
            }
        }
    }
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let coord = Coordinator::Exec(Coord::start(seq, parts, order, resp3));
    begin_coordinator(coord, me, ctx);
}

/// Commands whose keys span instances and cannot be split, run gathered on one instance
/// (`crate::coord::Gather`): `unit` the requests, `keys` their keys, `engines` the
/// instances already taking part in the client's transaction (MULTI sent there or not).
pub(crate) fn gather(
    slot: Option<u64>,
    unit: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
    engines: Vec<(usize, bool)>,
    in_multi: bool,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) {
    // A new reply slot, or the one of a script run again (`crate::coord::Scripts`).
    let seq = slot.unwrap_or_else(|| me.replies.push_plain());
    let mut parts: Vec<GatherEngine> = Vec::new();
    let mut keys = keys;
    keys.sort_unstable();
    keys.dedup();
    let owners: Vec<usize> = keys.iter().map(|k| ctx.fleet.slots.of(k)).collect();
    let mut wanted: Vec<(usize, bool)> = engines;
    for &i in &owners {
        if !wanted.iter().any(|&(j, _)| j == i) {
            wanted.push((i, false));
        }
    }
    for (instance, multi) in wanted {
        let conn = match ready_conn(instance, me, ctx) {
            Ok(id) => id,
            Err(error) => {
                // Nothing ran; a transaction's streamed parts are dropped with DISCARD.
                for p in &parts {
                    if p.multi
                        && let Some(d) = ctx.dedicated.get_mut(p.conn)
                    {
                        d.send(b"*1\r\n$7\r\nDISCARD\r\n", None, 1);
                        mark(&mut d.dirty, ctx.dirty_dedicated, p.conn);
                    }
                }
                me.txm.answered_elsewhere(seq);
                me.replies.fill(seq, 0, &error);
                return;
            }
        };
        let own = keys
            .iter()
            .zip(&owners)
            .filter(|&(_, &o)| o == instance)
            .map(|(k, _)| k.clone())
            .collect();
        parts.push(GatherEngine {
            instance,
            conn,
            multi,
            keys: own,
        });
    }
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let coord = Coordinator::Gather(Gather::start(seq, parts, unit, in_multi, resp3));
    begin_coordinator(coord, me, ctx);
}

/// A blocking command whose keys span instances (`crate::coord::Wait`).
fn gather_blocking<A: Args + ?Sized>(args: &A, raw: &[u8], me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    let seq = me.replies.push_plain();
    let Some(spec) = route::known_row(args) else {
        me.replies.fill(seq, 0, route::CROSSSLOT);
        return;
    };
    let keys = route::key_args(args);
    // The keys it pops from, and its timeout (seconds; 0 = forever; a bad one is reported
    // by the first try).
    let (sources, timeout_at): (Vec<Vec<u8>>, usize) = match spec.name {
        "blmove" | "brpoplpush" => (vec![args.arg(1).to_vec()], args.argc() - 1),
        "blmpop" | "bzmpop" => (keys.clone(), 1),
        _ => (keys.clone(), args.argc() - 1),
    };
    let timeout_ms = std::str::from_utf8(args.arg(timeout_at))
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)
        .map_or(0, |t| ((t * 1000.0) as u64).max(1));
    let mut engines: Vec<(usize, usize, Vec<Vec<u8>>)> = Vec::new();
    let mut waits: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    let slots = &ctx.fleet.slots;
    let key_owners: Vec<usize> = keys.iter().map(|k| slots.of(k)).collect();
    let source_owners: Vec<usize> = sources.iter().map(|k| slots.of(k)).collect();
    let mut instances = key_owners.clone();
    instances.sort_unstable();
    instances.dedup();
    for instance in instances {
        let conn = match ready_conn(instance, me, ctx) {
            Ok(id) => id,
            Err(error) => {
                me.replies.fill(seq, 0, &error);
                return;
            }
        };
        let mut own: Vec<Vec<u8>> = keys
            .iter()
            .zip(&key_owners)
            .filter(|&(_, &o)| o == instance)
            .map(|(k, _)| k.clone())
            .collect();
        own.sort_unstable();
        own.dedup();
        engines.push((instance, conn, own));
        let here: Vec<Vec<u8>> = sources
            .iter()
            .zip(&source_owners)
            .filter(|&(_, &o)| o == instance)
            .map(|(k, _)| k.clone())
            .collect();
        if !here.is_empty() {
            waits.push((conn, here));
        }
    }
    let zset = spec.name.starts_with("bz");
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let wait =
        crate::coord::Wait::start(seq, engines, waits, raw.to_vec(), zset, timeout_ms, resp3);
    begin_coordinator(Coordinator::Wait(wait), me, ctx);
}

fn begin_coordinator(mut coord: Coordinator, me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    let seq = coord.seq();
    let (token, client_id) = (me.token, me.id);
    let links = Links {
        backends: ctx.backends,
        dirty: ctx.dirty_backends,
        registry: ctx.registry,
    };
    if let Some(reply) = send_outbox(
        &mut coord,
        token,
        client_id,
        ctx.dedicated,
        ctx.dirty_dedicated,
        links,
    ) {
        if reply == crate::txshared::FALLBACK {
            crate::txmove::rerun(&[], me, ctx);
            return;
        }
        me.txm.answered_elsewhere(seq);
        me.replies.fill(seq, 0, &reply);
        return;
    }
    *me.coord = Some(coord);
}

/// Sends what the coordinator asks for on the client's dedicated connections; a connection
/// that is gone answers the instance's unavailable error at once. `Some`: the reply.
pub(crate) fn send_outbox(
    coord: &mut Coordinator,
    token: usize,
    client_id: u64,
    dedicated: &mut Slab<Dedicated>,
    dirty_dedicated: &mut Vec<usize>,
    links: Links<'_>,
) -> Option<Vec<u8>> {
    let seq = coord.seq();
    if matches!(coord, Coordinator::Shared(_)) {
        return send_on_links(coord, token, client_id, links);
    }
    while !coord.outbox().is_empty() {
        for (conn, request, part) in std::mem::take(coord.outbox()) {
            if let Some(d) = dedicated.get_mut(conn) {
                let w = part.map(|part| Waiter {
                    token,
                    client_id,
                    seq,
                    part,
                    hops: crate::client::Hops::NONE,
                });
                d.send(&request, w, 1);
                mark(&mut d.dirty, dirty_dedicated, conn);
            } else if let Some(part) = part
                && let Some(reply) =
                    coord.answered(part, b"-ERR proxy: instance connection lost\r\n")
            {
                return Some(reply);
            }
        }
    }
    None
}

/// The shared links, for a coordinator that sends on them (`crate::txshared`).
pub(crate) struct Links<'a> {
    pub(crate) backends: &'a mut [Backend],
    pub(crate) dirty: &'a mut Vec<usize>,
    pub(crate) registry: &'a Registry,
}

/// Sends what a coordinator over the shared links asks for (its outbox names links); a link
/// that cannot take it answers its instance's unavailable error at once. `Some`: the reply.
fn send_on_links(
    coord: &mut Coordinator,
    token: usize,
    client_id: u64,
    links: Links<'_>,
) -> Option<Vec<u8>> {
    let seq = coord.seq();
    while !coord.outbox().is_empty() {
        for (i, request, part) in std::mem::take(coord.outbox()) {
            let Some(part) = part else { continue };
            let b = &mut links.backends[i];
            wake(b, i, links.registry, links.dirty);
            if b.accepts() {
                let w = Waiter {
                    token,
                    client_id,
                    seq,
                    part,
                    hops: crate::client::Hops::NONE,
                };
                b.send(&request, w);
                mark(&mut b.dirty, links.dirty, i);
            } else {
                let error = b.unavailable.clone();
                if let Some(reply) = coord.answered(part, &error) {
                    return Some(reply);
                }
            }
        }
    }
    None
}

/// A request of a subscribed client ([`crate::pubsub`]).
fn subscribed<A: Args + ?Sized>(args: &A, raw: &[u8], me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Flow {
    let name = args.arg(0);
    // Unknown commands and arity errors first, as Redis checks them first.
    let known = engine_core::command::lookup(name)
        .is_some_and(|spec| spec.is_implemented() && spec.arity_ok(args.argc()));
    if !known || name.eq_ignore_ascii_case(b"quit") {
        let plan = route::plan(args, me.session, ctx.fleet);
        return run_plan(plan, args, raw, me, ctx);
    }
    if let Some(kind) = Kind::from_name(name) {
        return subscription(kind, args, me, ctx);
    }
    let arg = (args.argc() > 1).then(|| args.arg(1));
    if let Some(reply) = pubsub::subscribed_mode_reply(name, arg) {
        me.replies.push_local(&reply, false);
    }
    Flow::Continue
}

/// SUBSCRIBE / PSUBSCRIBE / UNSUBSCRIBE / PUNSUBSCRIBE.
fn subscription<A: Args + ?Sized>(
    kind: Kind,
    args: &A,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    let names: Vec<&[u8]> = (1..args.argc()).map(|i| args.arg(i)).collect();
    // Shard channels of several slots: CROSSSLOT, as a Redis Cluster node answers.
    if kind.is_shard()
        && let Some((first, rest)) = names.split_first()
        && rest
            .iter()
            .any(|c| engine_core::slot::key_slot(c) != engine_core::slot::key_slot(first))
    {
        me.replies.push_local(route::CROSSSLOT, false);
        return Flow::Continue;
    }
    let nothing_to_send = matches!(
        kind,
        Kind::Unsubscribe | Kind::Punsubscribe | Kind::Sunsubscribe
    ) && !me.session.subs.active();
    if !nothing_to_send && !me.enter_lane(Lane::PubSub) {
        return Flow::Wait;
    }
    // A redirect target for client-side caching: every instance learns of it, and the
    // proxy learns each instance's id for it (`tracking_redirect`).
    let invalidate = kind == Kind::Subscribe && names.contains(&crate::pubsub::INVALIDATE);
    for i in me
        .session
        .subs
        .instances_needed(kind, &names, &ctx.fleet.slots)
    {
        match conn_for(i, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                // Asked before the connection is subscribed (a RESP2 subscriber may not
                // run CLIENT ID).
                if invalidate && d.engine_id.is_none() && (!d.pubsub || d.resp3) {
                    d.ask_id(ctx.fleet.txid_known(i) != Some(true));
                    mark(&mut d.dirty, ctx.dirty_dedicated, id);
                }
            }
            Err(error) => {
                me.replies.push_local(&error, false);
                return Flow::Continue;
            }
        }
    }
    let change = me
        .session
        .subs
        .apply_in(kind, &names, &ctx.fleet.slots, me.session.proto);
    if change.sends.is_empty() {
        me.replies.push_local(&change.reply, false);
        return Flow::Continue;
    }
    let seq = me
        .replies
        .push_parts(change.sends.len(), Merge::Fixed(change.reply));
    for (part, send) in change.sends.iter().enumerate() {
        let waiter = me.waiter(seq, part as u32);
        let found = me.conns.iter().find(|(i, _)| *i == send.instance);
        match found.and_then(|&(_, id)| Some((id, ctx.dedicated.get_mut(id)?))) {
            Some((id, d)) => {
                if matches!(kind, Kind::Subscribe | Kind::Psubscribe | Kind::Ssubscribe) {
                    d.pubsub = true;
                }
                match kind {
                    Kind::Subscribe => d.channels.extend(send.names.iter().cloned()),
                    Kind::Unsubscribe => d.channels.retain(|c| !send.names.contains(c)),
                    _ => {}
                }
                d.send(&send.request, Some(waiter), send.frames);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            None => {
                ctx.fleet.backend_errors += 1;
                let error = &ctx.backends[ctx.fleet.primary(send.instance)].unavailable;
                me.replies.fill(seq, part as u32, error);
            }
        }
    }
    Flow::Continue
}

/// CONFIG SET `port` to a port other than the proxy's (`crate::route::config_set_port`). A
/// port this host cannot listen on answers redis `updatePort`'s error, as redis-server
/// would. Any other is refused: the supervisor health-checks the proxy, and clients find it,
/// at the port of the fleet's configuration, so a proxy listening elsewhere would be
/// restarted there (docs/operations.md, "Ports of a running engine"). Nothing is changed
/// either way.
fn config_set_port(ip: std::net::IpAddr, port: u16) -> &'static [u8] {
    if port != 0 && std::net::TcpListener::bind((ip, port)).is_err() {
        return b"-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\r\n";
    }
    b"-ERR CONFIG SET failed (possibly related to argument 'port') - can't change the port of a fleet's proxy (its port is in the fleet's configuration)\r\n"
}

/// MONITOR: `MONITOR` on the client's dedicated connection to every instance (its lane is
/// the pub/sub one: what comes back is relayed unasked), `+OK` once all said `+OK`. A second
/// MONITOR gets no reply, as from Redis.
fn monitor(me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Flow {
    if me.session.monitor {
        return Flow::Continue;
    }
    if !me.enter_lane(Lane::PubSub) {
        return Flow::Wait;
    }
    let instances = serving(ctx);
    let n = instances.len();
    let mut ids = Vec::with_capacity(n);
    for i in instances {
        match conn_for(i, me, ctx) {
            Ok(id) => ids.push(id),
            Err(error) => {
                me.replies.push_local(&error, false);
                return Flow::Continue;
            }
        }
    }
    me.session.monitor = true;
    let seq = me.replies.push_parts(n, Merge::AllOk);
    for (part, id) in ids.into_iter().enumerate() {
        let waiter = me.waiter(seq, part as u32);
        let d = ctx.dedicated.get_mut(id).expect("just looked up");
        d.monitor = true;
        d.send(b"*1\r\n$7\r\nMONITOR\r\n", Some(waiter), 1);
        mark(&mut d.dirty, ctx.dirty_dedicated, id);
    }
    Flow::Continue
}

/// An instance started serving slots (a grow; `crate::slots::Slots::take_started`): what the
/// client holds on every instance — its patterns, MONITOR, CLIENT TRACKING without REDIRECT —
/// is set up there too, as if the instance had served when the client asked, so a message
/// published to a channel of the new instance's slots, its MONITOR lines and its keys'
/// invalidations reach the client. The instance's replies are dropped (the client had its
/// own); an instance that cannot be reached is skipped.
pub(crate) fn extend_to(instance: usize, me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    let patterns: Vec<Vec<u8>> = me
        .session
        .subs
        .pattern_names()
        .map(<[u8]>::to_vec)
        .collect();
    let tracking = me
        .session
        .tracking_request
        .clone()
        .filter(|_| me.session.tracking && me.session.redirect.is_none());
    if patterns.is_empty() && !me.session.monitor && tracking.is_none() {
        return;
    }
    let id = match conn_for(instance, me, ctx) {
        Ok(id) => id,
        Err(e) => {
            log::warn!(
                "client {}: instance {instance} serves slots now, but: {}",
                me.id,
                String::from_utf8_lossy(&e).trim_end()
            );
            return;
        }
    };
    let d = ctx.dedicated.get_mut(id).expect("just looked up");
    if let Some(request) = tracking {
        d.send(&request, None, 1);
    }
    if !patterns.is_empty() {
        d.pubsub = true;
        d.send(
            &names_request(b"PSUBSCRIBE", &patterns),
            None,
            patterns.len() as u32,
        );
    }
    if me.session.monitor {
        d.monitor = true;
        d.send(b"*1\r\n$7\r\nMONITOR\r\n", None, 1);
    }
    mark(&mut d.dirty, ctx.dirty_dedicated, id);
}

/// Client `owner`'s connection to an instance that gave its last slot away (retired by a
/// shrink): the channels it had subscribed there are subscribed again on their owners now,
/// confirmations dropped, so the client keeps getting their messages once the instance stops
/// (every PUBLISH reaches every engine).
pub(crate) fn resubscribe(owner: u64, channels: Vec<Vec<u8>>, me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    if me.id != owner {
        return; // the connection's client is gone (its slab token reused)
    }
    let mut by_owner: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for ch in channels {
        if ch.as_slice() == crate::pubsub::INVALIDATE || !me.session.subs.has_channel(&ch) {
            continue; // on every serving instance already, or unsubscribed since
        }
        let owner = ctx.fleet.slots.of(&ch);
        match by_owner.iter_mut().find(|(i, _)| *i == owner) {
            Some((_, list)) => list.push(ch),
            None => by_owner.push((owner, vec![ch])),
        }
    }
    for (instance, list) in by_owner {
        let id = match conn_for(instance, me, ctx) {
            Ok(id) => id,
            Err(e) => {
                log::warn!(
                    "client {}: {} channel(s) of a retired instance not subscribed again: {}",
                    me.id,
                    list.len(),
                    String::from_utf8_lossy(&e).trim_end()
                );
                continue;
            }
        };
        let d = ctx.dedicated.get_mut(id).expect("just looked up");
        d.pubsub = true;
        d.send(&names_request(b"SUBSCRIBE", &list), None, list.len() as u32);
        d.channels.extend(list);
        mark(&mut d.dirty, ctx.dirty_dedicated, id);
    }
}

/// `word name…` as a request (a (P)(UN)SUBSCRIBE the proxy sends on a client's behalf).
pub(crate) fn names_request(word: &[u8], names: &[Vec<u8>]) -> Vec<u8> {
    let mut args: Vec<&[u8]> = Vec::with_capacity(1 + names.len());
    args.push(word);
    args.extend(names.iter().map(Vec::as_slice));
    let mut request = Vec::new();
    resp::encode_request(&mut request, &args);
    request
}

/// The instances that own a slot. Fan-outs on dedicated connections leave out one that gave
/// all its slots away (retired by `recached resize`, perhaps stopped), as [`Plan::FanOut`]
/// does on the shared links.
fn serving(ctx: &Ctx<'_>) -> Vec<usize> {
    let slots = &ctx.fleet.slots;
    (0..ctx.fleet.instances())
        .filter(|&i| slots.serves(i))
        .collect()
}

/// The client's dedicated connection to `instance`, opened if it has none: its slab id,
/// or the error reply (limits of `crate::dedicated`, instance down).
#[inline]
fn conn_for(instance: usize, me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Result<usize, Vec<u8>> {
    let resp3 = me.session.proto == resp::Proto::Resp3;
    if let Some(&(_, id)) = me.conns.iter().find(|(i, _)| *i == instance) {
        if let Some(d) = ctx.dedicated.get_mut(id) {
            switch_proto(d, id, me.session.proto, ctx.dirty_dedicated);
        }
        return Ok(id);
    }
    let backend = &ctx.backends[ctx.fleet.primary(instance)];
    if !backend.accepts() {
        ctx.fleet.backend_errors += 1;
        return Err(backend.unavailable.clone());
    }
    if me.conns.len() >= dedicated::MAX_PER_CLIENT {
        return Err(dedicated::limit_error(true));
    }
    if ctx.dedicated.len() >= dedicated::MAX_TOTAL {
        return Err(dedicated::limit_error(false));
    }
    // A warm spare first: already connected, so a blocking command written on it reaches the
    // instance before requests other clients send after it on the shared link (a fresh
    // connection is still connecting then: Redis's order would be lost). Another spare is
    // opened for the next client.
    if let Some(id) = ctx.fleet.spares.get_mut(instance).and_then(Option::take)
        && let Some(d) = ctx.dedicated.get_mut(id)
    {
        d.owner_token = me.token;
        d.owner_id = me.id;
        if ctx.fleet.cluster_publish {
            d.instances = ctx.fleet.instances();
        }
        if resp3 {
            d.resp3 = true;
            d.send(HELLO3, None, 1);
            mark(&mut d.dirty, ctx.dirty_dedicated, id);
        }
        me.conns.push((instance, id));
        open_spare(instance, ctx);
        return Ok(id);
    }
    let id = open(instance, me.token, me.id, resp3, ctx)?;
    me.conns.push((instance, id));
    open_spare(instance, ctx);
    Ok(id)
}

/// The client's dedicated connection to `instance` ([`conn_for`]), made ready for an ordinary
/// request: out of subscribed mode, in the client's database.
#[inline]
pub(crate) fn ready_conn(
    instance: usize,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<usize, Vec<u8>> {
    let id = conn_for(instance, me, ctx)?;
    let d = ctx.dedicated.get_mut(id).expect("just looked up");
    d.pubsub = false;
    sync_db(d, id, me.session.db, ctx.dirty_dedicated);
    Ok(id)
}

/// Opens a spare dedicated connection to `instance` (see [`conn_for`]) if it has none and
/// the limits allow; owned by nobody (token `usize::MAX`, id 0) until a client takes it.
fn open_spare(instance: usize, ctx: &mut Ctx<'_>) {
    if ctx.fleet.spares.len() < ctx.fleet.instances() {
        ctx.fleet.spares.resize(ctx.fleet.instances(), None);
    }
    if ctx.fleet.spares[instance].is_some() || ctx.dedicated.len() + 1 >= dedicated::MAX_TOTAL {
        return;
    }
    if let Ok(id) = open(instance, usize::MAX, 0, false, ctx) {
        ctx.fleet.spares[instance] = Some(id);
    }
}

/// Opens a dedicated connection to `instance` for the client `(owner_token, owner_id)`.
fn open(
    instance: usize,
    owner_token: usize,
    owner_id: u64,
    resp3: bool,
    ctx: &mut Ctx<'_>,
) -> Result<usize, Vec<u8>> {
    let backend = &ctx.backends[ctx.fleet.primary(instance)];
    // The slab index is the token, so reserve the entry before registering.
    let id = ctx.dedicated.vacant_key();
    let token = dedicated_token(id);
    match Dedicated::connect(
        instance,
        backend.addr,
        owner_token,
        owner_id,
        ctx.registry,
        token,
        Instant::now(),
    ) {
        Ok(mut d) => {
            if ctx.fleet.cluster_publish {
                d.instances = ctx.fleet.instances();
            }
            if let Some(login) = &ctx.fleet.login {
                d.send(login, None, 1); // the internal credential; its reply is dropped
            }
            // Its id on the instance, for CLIENT UNBLOCK of a command blocked on it: asked
            // with TXID (no MONITOR line) where the instance is known to answer it; a spare
            // (no owner yet, nobody waits on it) asks TXID to learn that; else CLIENT ID.
            match ctx.fleet.txid_known(instance) {
                Some(ok) => d.ask_id(!ok),
                None if owner_token == usize::MAX => d.ask_id(false),
                None => d.ask_id(true),
            }
            if resp3 {
                d.resp3 = true;
                d.send(HELLO3, None, 1); // the client's protocol; its reply is dropped
            }
            let got = ctx.dedicated.insert(d);
            debug_assert_eq!(got, id);
            Ok(id)
        }
        Err(e) => {
            log::warn!("instance {instance}: dedicated connection: {e}");
            Err(backend.unavailable.clone())
        }
    }
}

/// Sends `HELLO 2|3` on dedicated connection `id` if it does not speak `proto` (the client
/// changed protocol since it was opened); the reply is dropped.
fn switch_proto(d: &mut Dedicated, id: usize, proto: resp::Proto, dirty: &mut Vec<usize>) {
    let resp3 = proto == resp::Proto::Resp3;
    if d.resp3 == resp3 {
        return;
    }
    d.resp3 = resp3;
    let hello: &[u8] = if resp3 {
        HELLO3
    } else {
        b"*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n"
    };
    d.send(hello, None, 1);
    mark(&mut d.dirty, dirty, id);
}

/// Sends `SELECT db` on dedicated connection `id` if another database is selected there (the
/// client SELECTed since its last request on it); the reply is dropped. Called before a
/// request whose meaning depends on the database (blocking commands, WATCH, transactions).
fn sync_db(d: &mut Dedicated, id: usize, db: usize, dirty: &mut Vec<usize>) {
    if d.db == db {
        return;
    }
    d.db = db;
    d.send(&crate::backend::select_request(db), None, 1);
    mark(&mut d.dirty, dirty, id);
}

/// Carries out a routing plan for one request of client `me`.
fn run_plan<A: Args + ?Sized>(
    plan: Plan,
    args: &A,
    raw: &[u8],
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    // A blocking command proper (not a tracking client's forward below): followed when its
    // slot moves (`crate::blockmove`).
    let blocking = matches!(plan, Plan::Blocking(_));
    // Client-side caching: the instance tracks what it serves this client on the client's
    // own connection, where its invalidations then arrive (see the module docs).
    let plan = match plan {
        Plan::Forward(i) | Plan::Script(Some(i)) if me.session.tracking => Plan::Blocking(i),
        Plan::Script(None) if me.session.tracking => {
            Plan::Blocking(ctx.fleet.up.iter().position(|&up| up).unwrap_or(0))
        }
        Plan::Split { parts, merge } if me.session.tracking => {
            return dedicated_split(parts, merge, me, ctx);
        }
        other => other,
    };
    match plan {
        Plan::Reply(bytes) => {
            me.replies.push_local(&bytes, false);
            Flow::Continue
        }
        Plan::ReplyThenClose(bytes) => {
            me.replies.push_local(&bytes, true);
            Flow::StopReading
        }
        Plan::ConfigSetPort(port) => {
            me.replies
                .push_local(config_set_port(ctx.fleet.listen_ip, port), false);
            Flow::Continue
        }
        Plan::Multi => {
            let tx = &mut me.session.tx;
            tx.open(raw);
            // No WATCH (else the transaction is under way there): a client whose last
            // transaction spanned instances takes the shared links (`crate::txshared`).
            tx.shared = tx.spanned_last && !me.session.tracking;
            me.replies.push_local(b"+OK\r\n", false);
            Flow::Continue
        }
        Plan::PubSub(kind) => subscription(kind, args, me, ctx),
        Plan::Monitor => monitor(me, ctx),
        Plan::Clients(op) => Flow::Clients(Box::new(op)),
        Plan::Gather | Plan::GatherDiscovering => {
            if !me.enter_lane(Lane::Spread) {
                return Flow::Wait;
            }
            let keys = route::key_args(args);
            // A script or a SORT with patterns may name more keys than it declares: its
            // gathered run asks for them and runs again (`crate::coord::Scripts`).
            let discovering = matches!(plan, Plan::GatherDiscovering);
            let slot = (me.scripts.retries.is_empty() && discovering).then(|| {
                let seq = me.replies.push_plain();
                me.scripts.retries.push_back(crate::coord::ScriptRetry {
                    seq,
                    request: raw.to_vec(),
                    keys: keys.clone(),
                    attempts: 1,
                    started: true,
                });
                seq
            });
            gather(slot, vec![raw.to_vec()], keys, Vec::new(), false, me, ctx);
            Flow::Continue
        }
        Plan::GatherBlocking => {
            if !me.enter_lane(Lane::Spread) {
                return Flow::Wait;
            }
            gather_blocking(args, raw, me, ctx);
            Flow::Continue
        }
        Plan::WatchMany => {
            me.session.tx.watching = true;
            in_transaction(args, raw, me, ctx)
        }
        Plan::Blocking(i) | Plan::Watch(i) => {
            if !me.enter_lane(Lane::Dedicated(i)) {
                return Flow::Wait;
            }
            match conn_for(i, me, ctx) {
                Ok(id) => {
                    if matches!(plan, Plan::Watch(_)) {
                        me.session.tx.watching = true;
                        me.session.tx.pinned = Some(i);
                    }
                    let d = ctx.dedicated.get_mut(id).expect("just looked up");
                    d.pubsub = false;
                    sync_db(d, id, me.session.db, ctx.dirty_dedicated);
                    let seq = me.replies.push_plain();
                    let w = if blocking {
                        me.bmove.sent(seq, raw, i);
                        crate::blockmove::waiter(me.token, me.id, seq)
                    } else {
                        me.waiter(seq, 0)
                    };
                    d.send(raw, Some(w), 1);
                    mark(&mut d.dirty, ctx.dirty_dedicated, id);
                }
                Err(error) => me.replies.push_local(&error, false),
            }
            Flow::Continue
        }
        Plan::BlockingSplit { parts, merge } => blocking_split(parts, merge, me, ctx),
        Plan::DedicatedFanOut(merge) => dedicated_fan_out(raw, merge, me, ctx),
        Plan::TrackingRedirect { args, at, target } => tracking_redirect(args, at, target, me, ctx),
        Plan::Script(target) => {
            let k = script_link(target, me, ctx);
            if !me.enter_lane(Lane::Script(k)) {
                return Flow::Wait;
            }
            // Kept in case it touches undeclared keys of other instances
            // (`crate::coord::Scripts`).
            if ctx.fleet.instances() > 1 {
                let seq = me.replies.next_seq();
                me.scripts.inflight.push_back((seq, raw.to_vec()));
            }
            execute(plan, raw, me, ctx);
            Flow::Continue
        }
        shared => {
            if !me.enter_lane(Lane::Shared) {
                return Flow::Wait;
            }
            execute(shared, raw, me, ctx);
            Flow::Continue
        }
    }
}

/// `raw` to every instance on the client's dedicated connections, merged with `merge`
/// ([`Plan::DedicatedFanOut`]).
fn dedicated_fan_out(raw: &[u8], merge: Merge, me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Flow {
    if !me.enter_lane(Lane::Spread) {
        return Flow::Wait;
    }
    let instances = serving(ctx);
    let seq = me.replies.push_parts(instances.len(), merge);
    for (part, i) in instances.into_iter().enumerate() {
        match conn_for(i, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                d.pubsub = false;
                d.send(raw, Some(me.waiter(seq, part as u32)), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            Err(error) => me.replies.fill(seq, part as u32, &error),
        }
    }
    Flow::Continue
}

/// `CLIENT TRACKING ON … REDIRECT <target>` (a proxy client id): to each instance on the
/// client's dedicated connection, naming instead the target's subscribed connection to that
/// instance by that instance's id for it (asked when the target subscribed to
/// `__redis__:invalidate`, `crate::pubsub::INVALIDATE`), so each instance sends the
/// invalidations of its keys there and the proxy relays them to the target. An instance the
/// target has no subscribed connection to gets the request without REDIRECT: like Redis
/// redirecting to a client that is not subscribed, nothing reaches the target from it.
fn tracking_redirect(
    args: Vec<Vec<u8>>,
    at: usize,
    target: u64,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) -> Flow {
    if !ctx.fleet.client_ids.contains(&target) {
        // redis `clientCommand` "tracking".
        me.replies.push_local(
            b"-ERR The client ID you want redirect to does not exist\r\n",
            false,
        );
        return Flow::Continue;
    }
    if !me.enter_lane(Lane::Spread) {
        return Flow::Wait;
    }
    let instances = serving(ctx);
    let n = instances.len();
    let ids: Vec<(usize, Option<u64>)> = instances
        .into_iter()
        .map(|i| {
            let id = ctx
                .dedicated
                .iter()
                .find(|(_, d)| d.owner_id == target && d.instance == i && d.pubsub)
                .and_then(|(_, d)| d.engine_id);
            (i, id)
        })
        .collect();
    me.session.tracking = true;
    me.session.redirect = Some(target);
    let seq = me.replies.push_parts(n, Merge::AllOk);
    for (part, (i, id)) in ids.into_iter().enumerate() {
        let mut a = args.clone();
        match id {
            Some(id) => a[at] = itoa::Buffer::new().format(id).as_bytes().to_vec(),
            None => {
                a.drain(at - 1..=at);
            }
        }
        let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
        let mut request = Vec::new();
        resp::encode_request(&mut request, &refs);
        match conn_for(i, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                d.pubsub = false;
                d.send(&request, Some(me.waiter(seq, part as u32)), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            Err(error) => me.replies.fill(seq, part as u32, &error),
        }
    }
    Flow::Continue
}

/// A blocking stream read over several instances (`crate::spread`): each part on the
/// client's dedicated connection to its instance; the first answer releases the others.
fn blocking_split(parts: Vec<Part>, merge: Merge, me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Flow {
    if !me.enter_lane(Lane::Spread) {
        return Flow::Wait;
    }
    let seq = me.replies.push_parts(parts.len(), merge);
    let mut spread = Spread::new(seq);
    let mut failed = Vec::new();
    for (p, part) in parts.iter().enumerate() {
        let conn = match ready_conn(part.instance, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                if d.engine_id.is_none() {
                    // Answered before the part: for its CLIENT UNBLOCK.
                    d.ask_id(ctx.fleet.txid_known(part.instance) != Some(true));
                }
                d.send(&part.request, Some(me.waiter(seq, p as u32)), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
                Some((id, d.engine_id))
            }
            Err(error) => {
                failed.push((p as u32, error));
                None
            }
        };
        spread.parts.push(SpreadPart {
            instance: part.instance,
            conn: conn.map_or(usize::MAX, |c| c.0),
            engine_id: conn.and_then(|c| c.1),
            answered: false,
        });
    }
    // A part that could not be sent answers first (its error is the reply): the others are
    // released at once.
    for (p, error) in failed {
        me.replies.followups.extend(spread.answered(p));
        me.replies.fill(seq, p, &error);
    }
    if !spread.done() {
        *me.spread = Some(spread);
    }
    Flow::Continue
}

/// A split request (MGET, MSET, DEL… over several instances) of a tracking client: each part
/// on the client's dedicated connection to its instance, so each instance tracks the keys it
/// served this client, then merged as on the shared links.
fn dedicated_split(parts: Vec<Part>, merge: Merge, me: &mut Me<'_>, ctx: &mut Ctx<'_>) -> Flow {
    if !me.enter_lane(Lane::Spread) {
        return Flow::Wait;
    }
    let seq = me.replies.push_parts(parts.len(), merge);
    for (p, part) in parts.iter().enumerate() {
        match ready_conn(part.instance, me, ctx) {
            Ok(id) => {
                let d = ctx.dedicated.get_mut(id).expect("just looked up");
                d.send(&part.request, Some(me.waiter(seq, p as u32)), 1);
                mark(&mut d.dirty, ctx.dirty_dedicated, id);
            }
            Err(error) => me.replies.fill(seq, p as u32, &error),
        }
    }
    Flow::Continue
}

/// The script link a script for `target` takes (`crate::backend`, "script links"): the
/// client's current one while it has replies pending (its scripts run in order), else the
/// first idle one of the instance (a busy script then never holds up another client's), else
/// the one with the fewest requests in flight.
fn script_link(target: Option<usize>, me: &Me<'_>, ctx: &Ctx<'_>) -> usize {
    if let Lane::Script(k) = *me.lane
        && me.replies.pending_len() > 0
    {
        return k;
    }
    let per = ctx.fleet.per_instance;
    let i = target.unwrap_or_else(|| ctx.fleet.up.iter().position(|&up| up).unwrap_or(0));
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let link = |k| &ctx.backends[crate::backend::link_index(per, me.session.db, resp3, k, i)];
    (1..=crate::backend::SCRIPT_LINKS)
        .min_by_key(|&k| link(k).inflight.len())
        .unwrap_or(1)
}

/// Carries out a plan on the shared backend connections.
fn execute(plan: Plan, raw: &[u8], me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    let n = ctx.fleet.instances();
    // The links of the client's protocol and database (see the module docs).
    let resp3 = me.session.proto == resp::Proto::Resp3;
    let kind = match (&plan, *me.lane) {
        (Plan::Script(_), Lane::Script(k)) => k,
        _ => 0,
    };
    let per = ctx.fleet.per_instance;
    let link_base = crate::backend::link_index(per, me.session.db, resp3, kind, 0);
    let (token, client_id) = (me.token, me.id);
    let replies = &mut *me.replies;
    let registry = ctx.registry;
    let mut send = |i: usize, request: &[u8], seq: u64, part: u32, replies: &mut Replies| {
        let i = i * per + link_base;
        wake(&mut ctx.backends[i], i, registry, ctx.dirty_backends);
        let sent = send_to(
            ctx.backends,
            ctx.dirty_backends,
            i,
            request,
            Waiter {
                token,
                client_id,
                seq,
                part,
                hops: crate::client::Hops::NONE,
            },
            replies,
        );
        if !sent {
            ctx.fleet.backend_errors += 1;
        }
    };
    match plan {
        Plan::Forward(i) => {
            let seq = replies.push_plain();
            send(i, raw, seq, 0, replies);
        }
        Plan::Script(Some(i)) => {
            let seq = replies.push_plain();
            send(i, raw, seq, 0, replies);
        }
        Plan::ForwardAny | Plan::Script(None) => {
            let i = ctx.fleet.up.iter().position(|&up| up).unwrap_or(0);
            let seq = replies.push_plain();
            send(i, raw, seq, 0, replies);
        }
        Plan::Split { parts, merge } => {
            let seq = replies.push_parts(parts.len(), merge);
            for (p, part) in parts.iter().enumerate() {
                send(part.instance, &part.request, seq, p as u32, replies);
            }
        }
        Plan::FanOut { request, merge } => {
            // Instances that own slots: one that gave all its slots away (retired, perhaps
            // stopped) holds no keys (`crate::redirect`).
            let slots = &ctx.fleet.slots;
            let serving = (0..n).filter(|&i| slots.serves(i)).count();
            let seq = replies.push_parts(serving, merge);
            let request = request.as_deref().unwrap_or(raw);
            for (part, i) in (0..n).filter(|&i| slots.serves(i)).enumerate() {
                send(i, request, seq, part as u32, replies);
            }
        }
        Plan::ConfigSet { get, request } => {
            // Per instance its old values, then the change: 2 parts each, in that order
            // on the instance's connection ([`Merge::ConfigSet`]).
            // Instances that own slots, as for a fan-out.
            let slots = &ctx.fleet.slots;
            let serving: Vec<usize> = (0..n).filter(|&i| slots.serves(i)).collect();
            let seq = replies.push_parts(2 * serving.len(), Merge::ConfigSet);
            let request = request.as_deref().unwrap_or(raw);
            for (part, i) in serving.into_iter().enumerate() {
                send(i, &get, seq, 2 * part as u32, replies);
                send(i, request, seq, 2 * part as u32 + 1, replies);
            }
        }
        Plan::Rewrite {
            instance,
            request,
            merge,
        } => {
            let seq = replies.push_parts(1, merge);
            send(instance, &request, seq, 0, replies);
        }
        Plan::Reply(_)
        | Plan::ReplyThenClose(_)
        | Plan::ConfigSetPort(_)
        | Plan::Blocking(_)
        | Plan::BlockingSplit { .. }
        | Plan::DedicatedFanOut(_)
        | Plan::TrackingRedirect { .. }
        | Plan::Watch(_)
        | Plan::WatchMany
        | Plan::Gather
        | Plan::GatherDiscovering
        | Plan::GatherBlocking
        | Plan::Multi
        | Plan::Clients(_)
        | Plan::Monitor
        | Plan::PubSub(_) => unreachable!("handled by run_plan"),
    }
}

/// Whether to keep parsing a client's input after a request.
#[derive(PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// QUIT (or a protocol error): answer what is pending, then close.
    StopReading,
    /// Leave the request unparsed until the client's earlier replies are in (lane switch).
    Wait,
    /// CLIENT LIST / INFO / KILL: the request is consumed; the event loop answers it (it
    /// sees every client), then goes on with the client's input. Boxed: every request
    /// returns a `Flow`, which stays two words instead of the 96 bytes of an `Op`.
    Clients(Box<crate::clients::Op>),
}

/// Link `i` (`b`), dormant until a client needs it, starts connecting; requests queue
/// while this first connect is under way.
fn wake(b: &mut Backend, i: usize, registry: &Registry, dirty: &mut Vec<usize>) {
    if b.dormant {
        b.dormant = false;
        b.connect(registry, backend_token(i), Instant::now(), true);
        // Dirty even if the connect failed at once: the loop learns of woken links so.
        mark(&mut b.dirty, dirty, i);
    }
}

/// Queues `request` on backend `i`, or answers the slot at once if the instance is down.
fn send_to(
    backends: &mut [Backend],
    dirty_backends: &mut Vec<usize>,
    i: usize,
    request: &[u8],
    w: Waiter,
    replies: &mut Replies,
) -> bool {
    let b = &mut backends[i];
    if b.accepts() {
        b.send(request, w);
        if !b.dirty {
            b.dirty = true;
            dirty_backends.push(i);
        }
        true
    } else {
        replies.fill(w.seq, w.part, &b.unavailable);
        false
    }
}
