//! Consumer-group commands and introspection: XGROUP (CREATE SETID DESTROY CREATECONSUMER
//! DELCONSUMER HELP), XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO (STREAM [FULL], GROUPS,
//! CONSUMERS, HELP) — redis 7.0.15 `t_stream.c`, same replies and error texts.
//!
//! Effects: XGROUP and XACK are recorded as sent, except that `$` becomes the concrete ID;
//! XCLAIM/XAUTOCLAIM become one `XCLAIM … TIME t RETRYCOUNT n FORCE JUSTID LASTID id` per
//! entry claimed, as redis `streamPropagateXCLAIM` writes them (entries found deleted are
//! dropped from the PEL with `XACK`).

use resp::ReplyWriter;

use super::cmd::{as_stream, read_stream, show, stream_mut, write_entry, write_stream};
use super::group::INVALID_ENTRIES_READ;
use super::{Dir, EntryRef, IdMode, StreamId, StreamValue, parse_id, parse_interval_id};
use crate::Engine;
use crate::args::{self, int_arg};
use crate::blocking;
use crate::call::{self, Call};
use crate::effect;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify_unwatched};
use crate::types::Value;

/// redis `addReplySubcommandSyntaxError`.
fn subcommand_syntax(c: &Call) -> CmdError {
    CmdError::Other(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        show(&c.argv[1][..c.argv[1].len().min(128)]),
        show(c.argv[0]).to_uppercase()
    ))
}

fn nogroup_for_key(group: &[u8], key: &[u8]) -> CmdError {
    CmdError::Other(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        show(group),
        show(key)
    ))
}

fn nogroup_key_or_group(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Other(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        show(key),
        show(group)
    ))
}

// ---------------------------------------------------------------------------------------------
// XGROUP
// ---------------------------------------------------------------------------------------------

/// `XGROUP HELP`.
pub fn xgroup_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    call::help(
        c,
        "XGROUP",
        &[
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
            "HELP",
            "    Prints this help.",
        ],
    );
    Ok(())
}

/// `XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]` → OK; BUSYGROUP if it exists.
pub fn xgroup_create(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xgroup_generic(e, c)
}
/// `XGROUP SETID key group id|$ [ENTRIESREAD n]` → OK.
pub fn xgroup_setid(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xgroup_generic(e, c)
}
/// `XGROUP DESTROY key group` → 1 | 0.
pub fn xgroup_destroy(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xgroup_generic(e, c)
}
/// `XGROUP CREATECONSUMER key group consumer` → 1 if created, 0 if it existed.
pub fn xgroup_createconsumer(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xgroup_generic(e, c)
}
/// `XGROUP DELCONSUMER key group consumer` → the number of entries it had pending.
pub fn xgroup_delconsumer(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xgroup_generic(e, c)
}

/// redis `xgroupCommand` (its checks in its order).
fn xgroup_generic(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let opt = argv[1];
    let (key, grp) = (argv[2], argv[3]);
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    let create = args::is(opt, "create");
    let setid = args::is(opt, "setid");
    let mut i = 5;
    while i < argv.len() {
        if create && args::is(argv[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && args::is(argv[i], "entriesread") && i + 1 < argv.len() {
            entries_read = int_arg(argv[i + 1])?;
            if entries_read < 0 && entries_read != INVALID_ENTRIES_READ {
                return Err(CmdError::Static(
                    "ERR value for ENTRIESREAD must be positive or -1",
                ));
            }
            i += 2;
        } else {
            return Err(subcommand_syntax(c));
        }
    }
    let pos = write_stream(e, key, c.now_ms)?;
    if !mkstream {
        let Some(p) = pos else {
            return Err(CmdError::Static(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        };
        let s = as_stream(e.ks.value(p))?;
        if !s.groups.contains_key(grp)
            && (setid || args::is(opt, "createconsumer") || args::is(opt, "delconsumer"))
        {
            return Err(nogroup_for_key(grp, key));
        }
    }
    let n = argv.len();
    if create && (5..=8).contains(&n) {
        let id = if argv[4] == b"$" {
            pos.map_or(StreamId::MIN, |p| {
                as_stream(e.ks.value(p)).expect("checked").last_id
            })
        } else {
            parse_id(argv[4], 0, IdMode::Strict)?.0
        };
        let p = match pos {
            Some(p) => {
                if as_stream(e.ks.value(p))?.groups.contains_key(grp) {
                    return Err(CmdError::Static(
                        "BUSYGROUP Consumer Group name already exists",
                    ));
                }
                p
            }
            None => {
                e.ks.set(key, Value::Stream(Box::default()), Keep::Nothing, None)
            }
        };
        e.ks.update(p, |v| stream_mut(v).create_group(grp, id, entries_read));
        c.w().ok();
        notify_unwatched(e, class::STREAM, "xgroup-create", key);
        let (idt, er) = (id.text(), entries_read.to_string());
        let mut eff: Vec<&[u8]> = vec![
            b"XGROUP",
            b"CREATE",
            key,
            grp,
            idt.as_bytes(),
            b"ENTRIESREAD",
            er.as_bytes(),
        ];
        if mkstream {
            eff.push(b"MKSTREAM");
        }
        effect::propagate(e, &eff);
    } else if setid && (n == 5 || n == 7) {
        let p = pos.expect("checked");
        let id = if argv[4] == b"$" {
            as_stream(e.ks.value(p))?.last_id
        } else {
            parse_id(argv[4], 0, IdMode::Loose)?.0
        };
        e.ks.update(p, |v| {
            stream_mut(v).group_mut(grp, |g| {
                g.last_id = id;
                g.entries_read = entries_read;
            })
        });
        c.w().ok();
        notify_unwatched(e, class::STREAM, "xgroup-setid", key);
        let (idt, er) = (id.text(), entries_read.to_string());
        effect::propagate(
            e,
            &[
                b"XGROUP",
                b"SETID",
                key,
                grp,
                idt.as_bytes(),
                b"ENTRIESREAD",
                er.as_bytes(),
            ],
        );
    } else if args::is(opt, "destroy") && n == 4 {
        let p = pos.expect("checked");
        if as_stream(e.ks.value(p))?.groups.contains_key(grp) {
            e.ks.update(p, |v| stream_mut(v).destroy_group(grp));
            c.w().integer(1);
            notify_unwatched(e, class::STREAM, "xgroup-destroy", key);
            effect::propagate(e, argv);
            blocking::signal_ready(e, key);
        } else {
            c.w().integer(0);
        }
    } else if args::is(opt, "createconsumer") && n == 5 {
        let p = pos.expect("checked");
        let exists = as_stream(e.ks.value(p))?.groups[grp]
            .consumer(argv[4])
            .is_some();
        if exists {
            c.w().integer(0);
        } else {
            let now = c.now_ms;
            e.ks.update(p, |v| {
                stream_mut(v).group_mut(grp, |g| g.create_consumer(argv[4], now))
            });
            c.w().integer(1);
            notify_unwatched(e, class::STREAM, "xgroup-createconsumer", key);
            effect::propagate(e, argv);
        }
    } else if args::is(opt, "delconsumer") && n == 5 {
        let p = pos.expect("checked");
        let exists = as_stream(e.ks.value(p))?.groups[grp]
            .consumer(argv[4])
            .is_some();
        let mut pending = 0;
        if exists {
            pending =
                e.ks.update(p, |v| {
                    stream_mut(v).group_mut(grp, |g| g.delete_consumer(argv[4]))
                })
                .flatten()
                .unwrap_or(0);
            notify_unwatched(e, class::STREAM, "xgroup-delconsumer", key);
            effect::propagate(e, argv);
        }
        c.w().integer(pending as i64);
    } else {
        return Err(subcommand_syntax(c));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XACK / XPENDING
// ---------------------------------------------------------------------------------------------

/// `XACK key group id [id …]` → number of entries acknowledged.
pub fn xack(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, grp) = (c.argv[1], c.argv[2]);
    let pos = read_stream(e, key, c.now_ms)?;
    let Some(p) = pos.filter(|&p| {
        as_stream(e.ks.value(p))
            .expect("checked")
            .groups
            .contains_key(grp)
    }) else {
        c.w().integer(0);
        return Ok(());
    };
    let ids = c.argv[3..]
        .iter()
        .map(|a| parse_id(a, 0, IdMode::Strict).map(|(id, _)| id))
        .collect::<Result<Vec<_>, _>>()?;
    let any = {
        let g = &as_stream(e.ks.value(p))?.groups[grp];
        ids.iter().any(|id| g.nack(*id).is_some())
    };
    let mut n = 0;
    if any {
        n =
            e.ks.update(p, |v| {
                stream_mut(v).group_mut(grp, |g| ids.iter().filter(|&&id| g.ack(id)).count())
            })
            .unwrap_or(0);
        effect::propagate(e, c.argv);
    }
    c.w().integer(n as i64);
    Ok(())
}

/// `XPENDING key group [[IDLE min-idle] start end count [consumer]]` → the summary
/// `[count, first, last, [[consumer, n]…]]`, or the entries `[id, consumer, idle ms, count]`.
pub fn xpending(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (key, grp) = (argv[1], argv[2]);
    let justinfo = argv.len() == 3;
    if argv.len() != 3 && (argv.len() < 6 || argv.len() > 9) {
        return Err(CmdError::Syntax);
    }
    let mut minidle: i64 = 0;
    let mut count: i64 = 0;
    let (mut start, mut end) = (StreamId::MIN, StreamId::MAX);
    let mut consumer: Option<&[u8]> = None;
    if argv.len() >= 6 {
        let mut si = 3;
        if args::is(argv[3], "idle") {
            minidle = int_arg(argv[4])?;
            if argv.len() < 8 {
                return Err(CmdError::Syntax);
            }
            si += 2;
        }
        count = int_arg(argv[si + 2])?.max(0);
        let (s, sx) = parse_interval_id(argv[si], 0)?;
        start = if sx {
            s.incr()
                .ok_or(CmdError::Static("ERR invalid start ID for the interval"))?
        } else {
            s
        };
        let (en, ex) = parse_interval_id(argv[si + 1], u64::MAX)?;
        end = if ex {
            en.decr()
                .ok_or(CmdError::Static("ERR invalid end ID for the interval"))?
        } else {
            en
        };
        if si + 3 < argv.len() {
            consumer = Some(argv[si + 3]);
        }
    }
    let pos = read_stream(e, key, c.now_ms)?;
    let Some(p) = pos.filter(|&p| {
        as_stream(e.ks.value(p))
            .expect("checked")
            .groups
            .contains_key(grp)
    }) else {
        return Err(nogroup_key_or_group(key, grp));
    };
    let now = c.now_ms;
    let g = &as_stream(e.ks.value(p))?.groups[grp];
    let mut w = c.w();
    if justinfo {
        w.array(4);
        w.integer(g.pel().len() as i64);
        if g.pel().is_empty() {
            w.null();
            w.null();
            w.null_array();
        } else {
            w.bulk(g.pel().keys().next().expect("non-empty").text().as_bytes());
            w.bulk(
                g.pel()
                    .keys()
                    .next_back()
                    .expect("non-empty")
                    .text()
                    .as_bytes(),
            );
            let owners: Vec<(&Box<[u8]>, usize)> = g
                .consumers()
                .iter()
                .filter(|(_, cons)| !cons.pel.is_empty())
                .map(|(n, cons)| (n, cons.pel.len()))
                .collect();
            w.array(owners.len());
            for (name, n) in owners {
                w.array(2);
                w.bulk(name);
                w.bulk(n.to_string().as_bytes());
            }
        }
        return Ok(());
    }
    let ids: Vec<StreamId> = match consumer {
        Some(name) => match g.consumer(name) {
            Some(cons) => cons.pel.range(start..).copied().collect(),
            None => {
                w.array(0);
                return Ok(());
            }
        },
        None => g.pel().range(start..).map(|(id, _)| *id).collect(),
    };
    let mut rows = Vec::new();
    for id in ids {
        if count == 0 || id > end {
            break;
        }
        let nack = g.nack(id).expect("pending");
        let idle = now as i64 - nack.delivery_time as i64;
        if minidle != 0 && idle < minidle {
            continue;
        }
        count -= 1;
        rows.push((id, nack, idle.max(0)));
    }
    w.array(rows.len());
    for (id, nack, idle) in rows {
        w.array(4);
        w.bulk(id.text().as_bytes());
        w.bulk(&nack.consumer);
        w.integer(idle);
        w.integer(nack.delivery_count as i64);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XCLAIM / XAUTOCLAIM
// ---------------------------------------------------------------------------------------------

/// One claim's effect (redis `streamPropagateXCLAIM`).
fn propagate_claim(
    e: &mut Engine,
    key: &[u8],
    grp: &[u8],
    id: StreamId,
    claimed: Option<(&[u8], u64, u64)>,
    last: StreamId,
) {
    let idt = id.text();
    match claimed {
        Some((cons, time, n)) => {
            let (time, n, last) = (time.to_string(), n.to_string(), last.text());
            effect::propagate(
                e,
                &[
                    b"XCLAIM",
                    key,
                    grp,
                    cons,
                    b"0",
                    idt.as_bytes(),
                    b"TIME",
                    time.as_bytes(),
                    b"RETRYCOUNT",
                    n.as_bytes(),
                    b"FORCE",
                    b"JUSTID",
                    b"LASTID",
                    last.as_bytes(),
                ],
            );
        }
        // The entry was deleted: it leaves the PEL.
        None => effect::propagate(e, &[b"XACK", key, grp, idt.as_bytes()]),
    }
}

/// `XCLAIM key group consumer min-idle-time id [id …] [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]` → the entries (or IDs) claimed.
pub fn xclaim(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (key, grp, cname) = (argv[1], argv[2], argv[3]);
    let pos = read_stream(e, key, c.now_ms)?;
    let Some(p) = pos.filter(|&p| {
        as_stream(e.ks.value(p))
            .expect("checked")
            .groups
            .contains_key(grp)
    }) else {
        return Err(nogroup_key_or_group(key, grp));
    };
    let minidle = resp::parse_i64(argv[4])
        .ok_or(CmdError::Static(
            "ERR Invalid min-idle-time argument for XCLAIM",
        ))?
        .max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < argv.len() {
        match parse_id(argv[j], 0, IdMode::Strict) {
            Ok((id, _)) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = c.now_ms as i64;
    let (mut force, mut justid) = (false, false);
    let mut retrycount: i64 = -1;
    let mut deliverytime: i64 = -1;
    let mut last_id = StreamId::MIN;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        let opt = argv[j];
        if args::is(opt, "force") {
            force = true;
        } else if args::is(opt, "justid") {
            justid = true;
        } else if args::is(opt, "idle") && more > 0 {
            j += 1;
            let v = resp::parse_i64(argv[j]).ok_or(CmdError::Static(
                "ERR Invalid IDLE option argument for XCLAIM",
            ))?;
            deliverytime = now.wrapping_sub(v);
        } else if args::is(opt, "time") && more > 0 {
            j += 1;
            deliverytime = resp::parse_i64(argv[j]).ok_or(CmdError::Static(
                "ERR Invalid TIME option argument for XCLAIM",
            ))?;
        } else if args::is(opt, "retrycount") && more > 0 {
            j += 1;
            retrycount = resp::parse_i64(argv[j]).ok_or(CmdError::Static(
                "ERR Invalid RETRYCOUNT option argument for XCLAIM",
            ))?;
        } else if args::is(opt, "lastid") && more > 0 {
            j += 1;
            last_id = parse_id(argv[j], 0, IdMode::Strict)?.0;
        } else {
            return Err(CmdError::Other(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                show(opt)
            )));
        }
        j += 1;
    }
    let deliverytime = if deliverytime != -1 && !(deliverytime < 0 || deliverytime > now) {
        deliverytime as u64
    } else {
        now as u64
    };
    // Plan on the current state, then apply.
    let s = as_stream(e.ks.value(p))?;
    let g = &s.groups[grp];
    let bump_last = last_id > g.last_id;
    let mut gone = Vec::new();
    let mut take = Vec::new();
    for &id in &ids {
        let nack = g.nack(id);
        if s.get(id).is_none() {
            if nack.is_some() && !gone.contains(&id) {
                gone.push(id);
            }
            continue;
        }
        match nack {
            None if !force => continue,
            Some(n)
                if !n.consumer.is_empty()
                    && minidle != 0
                    && now - (n.delivery_time as i64) < minidle =>
            {
                continue;
            }
            _ => {}
        }
        take.push(id);
    }
    let changed = bump_last || !gone.is_empty() || !take.is_empty();
    let mut claimed: Vec<(StreamId, u64, u64)> = Vec::new();
    let mut created = false;
    if changed {
        let now_u = c.now_ms;
        e.ks.update(p, |v| {
            stream_mut(v).group_mut(grp, |g| {
                if bump_last {
                    g.last_id = last_id;
                }
                for &id in &gone {
                    g.ack(id);
                }
                for &id in &take {
                    if g.nack(id).is_none() {
                        g.force_create(id, now_u);
                    }
                    if !created && g.consumer(cname).is_none() {
                        created = g.create_consumer(cname, now_u);
                    } else {
                        g.touch_consumer(cname, now_u);
                    }
                    g.assign(id, cname);
                    let n = g.nack_mut(id).expect("pending");
                    n.delivery_time = deliverytime;
                    if retrycount >= 0 {
                        n.delivery_count = retrycount as u64;
                    } else if !justid {
                        n.delivery_count += 1;
                    }
                    claimed.push((id, n.delivery_time, n.delivery_count));
                }
            })
        });
    }
    if created {
        notify_unwatched(e, class::STREAM, "xgroup-createconsumer", key);
    }
    let s = as_stream(e.ks.value(p))?;
    let glast = s.groups[grp].last_id;
    let mut out = Vec::new();
    {
        let mut w = ReplyWriter::new(&mut out, c.client.proto);
        w.array(claimed.len());
        for &(id, _, _) in &claimed {
            if justid {
                w.bulk(id.text().as_bytes());
            } else {
                write_entry(&mut w, &s.get(id).expect("exists"));
            }
        }
    }
    c.parts().1.extend_from_slice(&out);
    for &id in &gone {
        propagate_claim(e, key, grp, id, None, glast);
    }
    for &(id, t, n) in &claimed {
        propagate_claim(e, key, grp, id, Some((cname, t, n)), glast);
    }
    if bump_last && claimed.is_empty() {
        let lt = glast.text();
        let er = as_stream(e.ks.value(p))?.groups[grp]
            .entries_read
            .to_string();
        effect::propagate(
            e,
            &[
                b"XGROUP",
                b"SETID",
                key,
                grp,
                lt.as_bytes(),
                b"ENTRIESREAD",
                er.as_bytes(),
            ],
        );
    }
    Ok(())
}

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]` →
/// `[next start, claimed entries (or IDs), deleted IDs]`.
pub fn xautoclaim(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (key, grp, cname) = (argv[1], argv[2], argv[3]);
    let minidle = resp::parse_i64(argv[4])
        .ok_or(CmdError::Static(
            "ERR Invalid min-idle-time argument for XAUTOCLAIM",
        ))?
        .max(0);
    let (mut start, sx) = parse_interval_id(argv[5], 0)?;
    if sx {
        start = start
            .incr()
            .ok_or(CmdError::Static("ERR invalid start ID for the interval"))?;
    }
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if args::is(argv[j], "count") && more > 0 {
            let max_count = i64::MAX / 16;
            count = match resp::parse_i64(argv[j + 1]) {
                Some(n) if (1..=max_count).contains(&n) => n,
                Some(_) => return Err(CmdError::Static("ERR COUNT must be > 0")),
                None => return Err(CmdError::NotInteger),
            };
            j += 1;
        } else if args::is(argv[j], "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let pos = read_stream(e, key, c.now_ms)?;
    let Some(p) = pos.filter(|&p| {
        as_stream(e.ks.value(p))
            .expect("checked")
            .groups
            .contains_key(grp)
    }) else {
        return Err(nogroup_key_or_group(key, grp));
    };
    let now = c.now_ms;
    // Plan: walk the PEL from `start`.
    let s = as_stream(e.ks.value(p))?;
    let g = &s.groups[grp];
    let mut attempts = count.saturating_mul(10);
    let mut left = count;
    let mut deleted = Vec::new();
    let mut take = Vec::new();
    let mut it = g.pel().range(start..);
    let mut next = None;
    loop {
        if attempts == 0 || left == 0 {
            next = it.next().map(|(id, _)| *id);
            break;
        }
        attempts -= 1;
        let Some((&id, nack)) = it.next() else {
            break;
        };
        if s.get(id).is_none() {
            deleted.push(id);
            left -= 1;
            continue;
        }
        if minidle != 0 && (now as i64 - nack.delivery_time as i64) < minidle {
            continue;
        }
        take.push(id);
        left -= 1;
    }
    let mut created = false;
    let mut claimed: Vec<(StreamId, u64, u64)> = Vec::new();
    if !deleted.is_empty() || !take.is_empty() {
        e.ks.update(p, |v| {
            stream_mut(v).group_mut(grp, |g| {
                for &id in &deleted {
                    g.ack(id);
                }
                for &id in &take {
                    if !created && g.consumer(cname).is_none() {
                        created = g.create_consumer(cname, now);
                    } else {
                        g.touch_consumer(cname, now);
                    }
                    g.assign(id, cname);
                    let n = g.nack_mut(id).expect("pending");
                    n.delivery_time = now;
                    if !justid {
                        n.delivery_count += 1;
                    }
                    claimed.push((id, n.delivery_time, n.delivery_count));
                }
            })
        });
    }
    if created {
        notify_unwatched(e, class::STREAM, "xgroup-createconsumer", key);
    }
    let s = as_stream(e.ks.value(p))?;
    let glast = s.groups[grp].last_id;
    let mut out = Vec::new();
    {
        let mut w = ReplyWriter::new(&mut out, c.client.proto);
        w.array(3);
        w.bulk(next.unwrap_or(StreamId::MIN).text().as_bytes());
        w.array(claimed.len());
        for &(id, _, _) in &claimed {
            if justid {
                w.bulk(id.text().as_bytes());
            } else {
                write_entry(&mut w, &s.get(id).expect("exists"));
            }
        }
        w.array(deleted.len());
        for id in &deleted {
            w.bulk(id.text().as_bytes());
        }
    }
    c.parts().1.extend_from_slice(&out);
    for &id in &deleted {
        propagate_claim(e, key, grp, id, None, glast);
    }
    for &(id, t, n) in &claimed {
        propagate_claim(e, key, grp, id, Some((cname, t, n)), glast);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XINFO
// ---------------------------------------------------------------------------------------------

/// `XINFO HELP`.
pub fn xinfo_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    call::help(
        c,
        "XINFO",
        &[
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
            "HELP",
            "    Prints this help.",
        ],
    );
    Ok(())
}

/// Looks up the stream XINFO reports on: `ERR no such key`, WRONGTYPE.
fn xinfo_stream_at(e: &mut Engine, c: &Call) -> Result<usize, CmdError> {
    read_stream(e, c.argv[2], c.now_ms)?.ok_or(CmdError::NoSuchKey)
}

fn write_lag(w: &mut ReplyWriter, lag: Option<i64>) {
    match lag {
        Some(n) => w.integer(n),
        None => w.null(),
    }
}

fn write_entries_read(w: &mut ReplyWriter, n: i64) {
    if n != INVALID_ENTRIES_READ {
        w.integer(n);
    } else {
        w.null();
    }
}

/// `XINFO CONSUMERS key group` → per consumer `{name, pending, idle}`.
pub fn xinfo_consumers(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let p = xinfo_stream_at(e, c)?;
    let (key, grp) = (c.argv[2], c.argv[3]);
    let now = c.now_ms as i64;
    let s = as_stream(e.ks.value(p))?;
    let g = s.groups.get(grp).ok_or_else(|| nogroup_for_key(grp, key))?;
    let mut w = c.w();
    w.array(g.consumers().len());
    for (name, cons) in g.consumers() {
        w.map(3);
        w.bulk(b"name");
        w.bulk(name);
        w.bulk(b"pending");
        w.integer(cons.pel.len() as i64);
        w.bulk(b"idle");
        w.integer((now - cons.seen_time as i64).max(0));
    }
    Ok(())
}

/// `XINFO GROUPS key` → per group `{name, consumers, pending, last-delivered-id,
/// entries-read, lag}`.
pub fn xinfo_groups(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let p = xinfo_stream_at(e, c)?;
    let s = as_stream(e.ks.value(p))?;
    let mut w = c.w();
    w.array(s.groups.len());
    for (name, g) in &s.groups {
        w.map(6);
        w.bulk(b"name");
        w.bulk(name);
        w.bulk(b"consumers");
        w.integer(g.consumers().len() as i64);
        w.bulk(b"pending");
        w.integer(g.pel().len() as i64);
        w.bulk(b"last-delivered-id");
        w.bulk(g.last_id.text().as_bytes());
        w.bulk(b"entries-read");
        write_entries_read(&mut w, g.entries_read);
        w.bulk(b"lag");
        write_lag(&mut w, s.group_lag(g));
    }
    Ok(())
}

/// Radix tree node count Redis would report for `keys` 128-bit keys (XINFO STREAM
/// `radix-tree-nodes`): exact for IDs that differ only in their last bytes (what redis-server
/// 7.0.15 reports for small explicit IDs), an estimate otherwise (it depends on how the
/// rax compresses the keys' common prefixes).
fn rax_nodes(keys: usize) -> usize {
    match keys {
        0 => 1,
        1 => 2,
        n => 2 * n + 2,
    }
}

/// `XINFO STREAM key [FULL [COUNT n]]`.
pub fn xinfo_stream(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let p = xinfo_stream_at(e, c)?;
    let opts = &c.argv[3..];
    let mut full = true;
    let mut count: i64 = 10;
    if opts.is_empty() {
        full = false;
    } else {
        if (opts.len() != 1 && opts.len() != 3) || !args::is(opts[0], "full") {
            return Err(subcommand_syntax(c));
        }
        if opts.len() == 3 {
            if !args::is(opts[1], "count") {
                return Err(subcommand_syntax(c));
            }
            count = int_arg(opts[2])?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let limit = if count == 0 {
        usize::MAX
    } else {
        count as usize
    };
    let s: &StreamValue = as_stream(e.ks.value(p))?;
    let mut w = c.w();
    w.map(if full { 9 } else { 10 });
    w.bulk(b"length");
    w.integer(s.length as i64);
    w.bulk(b"radix-tree-keys");
    w.integer(s.node_count() as i64);
    w.bulk(b"radix-tree-nodes");
    w.integer(rax_nodes(s.node_count()) as i64);
    w.bulk(b"last-generated-id");
    w.bulk(s.last_id.text().as_bytes());
    w.bulk(b"max-deleted-entry-id");
    w.bulk(s.max_deleted_entry_id.text().as_bytes());
    w.bulk(b"entries-added");
    w.integer(s.entries_added as i64);
    w.bulk(b"recorded-first-entry-id");
    w.bulk(s.first_id.text().as_bytes());
    if !full {
        w.bulk(b"groups");
        w.integer(s.groups.len() as i64);
        w.bulk(b"first-entry");
        match s.range(StreamId::MIN, StreamId::MAX, Dir::Forward).next() {
            Some(en) => write_entry(&mut w, &en),
            None => w.null(),
        }
        w.bulk(b"last-entry");
        match s.range(StreamId::MIN, StreamId::MAX, Dir::Reverse).next() {
            Some(en) => write_entry(&mut w, &en),
            None => w.null(),
        }
        return Ok(());
    }
    w.bulk(b"entries");
    let entries: Vec<EntryRef> = s.entries().take(limit).collect();
    w.array(entries.len());
    for en in &entries {
        write_entry(&mut w, en);
    }
    w.bulk(b"groups");
    w.array(s.groups.len());
    for (name, g) in &s.groups {
        w.map(7);
        w.bulk(b"name");
        w.bulk(name);
        w.bulk(b"last-delivered-id");
        w.bulk(g.last_id.text().as_bytes());
        w.bulk(b"entries-read");
        write_entries_read(&mut w, g.entries_read);
        w.bulk(b"lag");
        write_lag(&mut w, s.group_lag(g));
        w.bulk(b"pel-count");
        w.integer(g.pel().len() as i64);
        w.bulk(b"pending");
        let pel: Vec<_> = g.pel().iter().take(limit).collect();
        w.array(pel.len());
        for (id, nack) in pel {
            w.array(4);
            w.bulk(id.text().as_bytes());
            w.bulk(&nack.consumer);
            w.integer(nack.delivery_time as i64);
            w.integer(nack.delivery_count as i64);
        }
        w.bulk(b"consumers");
        w.array(g.consumers().len());
        for (cname, cons) in g.consumers() {
            w.map(4);
            w.bulk(b"name");
            w.bulk(cname);
            w.bulk(b"seen-time");
            w.integer(cons.seen_time as i64);
            w.bulk(b"pel-count");
            w.integer(cons.pel.len() as i64);
            w.bulk(b"pending");
            let ids: Vec<_> = cons.pel.iter().take(limit).collect();
            w.array(ids.len());
            for id in ids {
                let nack = g.nack(*id).expect("pending");
                w.array(3);
                w.bulk(id.text().as_bytes());
                w.integer(nack.delivery_time as i64);
                w.integer(nack.delivery_count as i64);
            }
        }
    }
    Ok(())
}
