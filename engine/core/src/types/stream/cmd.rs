//! Stream commands without consumer-group administration: XADD XRANGE XREVRANGE XLEN XDEL
//! XTRIM XSETID XREAD XREADGROUP (redis 7.0.15 `t_stream.c`, same argument order, replies
//! and error texts; `tests/diff/streams.txt` checks them against a real redis-server).
//!
//! # Effects (keychange feed)
//! Every write chooses its effects with [`effect::propagate`], as Redis rewrites its
//! replication stream: XADD with `*` (or `ms-*`) becomes XADD with the ID assigned, and a
//! trim becomes `XTRIM key MINID <first id>` (or `MAXLEN 0`), which removes the same entries
//! on a replica whatever its node layout; XREADGROUP becomes one
//! `XCLAIM … FORCE JUSTID` per entry delivered plus `XGROUP SETID … ENTRIESREAD`, as in
//! redis `streamPropagateXCLAIM` / `streamPropagateGroupID`.
//!
//! # Blocking (XREAD/XREADGROUP BLOCK)
//! Through [`crate::blocking`]: the command is parked with `$` replaced by the stream's last
//! ID at the time (redis resolves it when blocking), and re-run when a key it waits on
//! changes. A re-run XREAD reads at most 1000 entries when no COUNT was given
//! (`XREAD_BLOCKED_DEFAULT_COUNT`); a re-run XREADGROUP whose stream was deleted or replaced
//! by another type answers `-UNBLOCKED the stream key no longer exists`, and one whose group
//! was destroyed `-NOGROUP the consumer group this client was blocked on no longer exists`
//! (redis `blocked.c`).

use resp::ReplyWriter;

use super::{
    AppendError, Dir, EntryRef, IdMode, NodeLimits, StreamId, StreamValue, Trim, parse_id,
    parse_interval_id,
};
use crate::Engine;
use crate::args::{self, int_arg};
use crate::blocking;
use crate::call::Call;
use crate::effect;
use crate::error::{CmdError, c_str_lossy};
use crate::keyspace::Keep;
use crate::notify::{class, notify, notify_unwatched};
use crate::types::Value;

/// redis `XREAD_BLOCKED_DEFAULT_COUNT`.
const XREAD_BLOCKED_DEFAULT_COUNT: usize = 1000;

/// The stream inside `v`, or WRONGTYPE.
pub fn as_stream(v: &Value) -> Result<&StreamValue, CmdError> {
    match v {
        Value::Stream(s) => Ok(s),
        _ => Err(CmdError::WrongType),
    }
}

/// The stream inside `v` (type checked before).
pub fn stream_mut(v: &mut Value) -> &mut StreamValue {
    match v {
        Value::Stream(s) => s,
        _ => unreachable!("type checked before the update"),
    }
}

/// Looks `key` up for reading: `None` if missing, WRONGTYPE if not a stream.
pub fn read_stream(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        Some(i) => {
            as_stream(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// Looks `key` up before a write: `None` if missing, WRONGTYPE if not a stream.
pub fn write_stream(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_write(key, now_ms) {
        Some(i) => {
            as_stream(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// The node limits from the configuration.
pub fn limits(e: &Engine) -> NodeLimits {
    NodeLimits {
        max_entries: e.config.stream_node_max_entries,
        max_bytes: e.config.stream_node_max_bytes,
    }
}

/// Writes one entry: `[id, [field, value, …]]`.
pub fn write_entry(w: &mut ReplyWriter, en: &EntryRef) {
    w.array(2);
    w.bulk(en.id.text().as_bytes());
    w.array(en.num_fields() * 2);
    for (f, v) in en.fields() {
        w.bulk(f);
        w.bulk(v);
    }
}

/// A `%s` of user input in an error line.
pub fn show(b: &[u8]) -> String {
    c_str_lossy(b, usize::MAX).replace(['\r', '\n'], " ")
}

// ---------------------------------------------------------------------------------------------
// XADD / XTRIM
// ---------------------------------------------------------------------------------------------

/// redis `streamAddTrimArgs`.
struct AddTrimArgs {
    id: StreamId,
    id_given: bool,
    seq_given: bool,
    no_mkstream: bool,
    trim: Trim,
    approx: bool,
    limit: u64,
}

/// redis `streamParseAddOrTrimArgsOrReply`: returns the parsed options and the position of
/// the ID (XADD).
fn parse_add_trim(
    e: &Engine,
    argv: &[&[u8]],
    xadd: bool,
) -> Result<(AddTrimArgs, usize), CmdError> {
    let mut a = AddTrimArgs {
        id: StreamId::MIN,
        id_given: false,
        seq_given: true,
        no_mkstream: false,
        trim: Trim::None,
        approx: false,
        limit: 0,
    };
    const BOTH: CmdError = CmdError::Static(
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
    );
    let mut limit_given = false;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        let opt = argv[i];
        if xadd && opt == b"*" {
            break;
        } else if args::is(opt, "maxlen") && more > 0 {
            if a.trim != Trim::None {
                return Err(BOTH);
            }
            a.approx = false;
            let next = argv[i + 1];
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let n = int_arg(argv[i + 1])?;
            if n < 0 {
                return Err(CmdError::Static("ERR The MAXLEN argument must be >= 0."));
            }
            i += 1;
            a.trim = Trim::MaxLen(n as u64);
        } else if args::is(opt, "minid") && more > 0 {
            if a.trim != Trim::None {
                return Err(BOTH);
            }
            a.approx = false;
            let next = argv[i + 1];
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let (id, _) = parse_id(argv[i + 1], 0, IdMode::Strict)?;
            i += 1;
            a.trim = Trim::MinId(id);
        } else if args::is(opt, "limit") && more > 0 {
            let n = int_arg(argv[i + 1])?;
            if n < 0 {
                return Err(CmdError::Static("ERR The LIMIT argument must be >= 0."));
            }
            a.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && args::is(opt, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let (id, seq_given) = parse_id(opt, 0, IdMode::StrictSeqStar)?;
            a.id = id;
            a.seq_given = seq_given;
            a.id_given = true;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if a.limit != 0 && a.trim == Trim::None {
        return Err(CmdError::Static(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.trim == Trim::None {
        return Err(CmdError::Static(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !a.approx {
            return Err(CmdError::Static(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if a.approx {
        let l = 100u64.saturating_mul(e.config.stream_node_max_entries);
        a.limit = if l == 0 { 10_000 } else { l.min(1_000_000) };
    } else {
        a.limit = 0;
    }
    Ok((a, i))
}

/// The effect of a trim that removed entries: the same entries on any replica.
fn propagate_trim(e: &mut Engine, key: &[u8], s_first: StreamId, s_len: u64) {
    if s_len == 0 {
        effect::propagate(e, &[b"XTRIM", key, b"MAXLEN", b"0"]);
    } else {
        effect::propagate(e, &[b"XTRIM", key, b"MINID", s_first.text().as_bytes()]);
    }
}

/// `XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value
/// [field value …]` → the ID added (bulk), nil with NOMKSTREAM on a missing key.
pub fn xadd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (a, idpos) = parse_add_trim(e, argv, true)?;
    let field_pos = idpos + 1;
    let nargs = argv.len().saturating_sub(field_pos);
    if argv.len() < field_pos + 2 || !nargs.is_multiple_of(2) {
        return Err(CmdError::Arity("xadd"));
    }
    if a.id_given && a.seq_given && a.id.is_zero() {
        return Err(CmdError::Static(
            "ERR The ID specified in XADD must be greater than 0-0",
        ));
    }
    let key = argv[1];
    let existing = write_stream(e, key, c.now_ms)?;
    if existing.is_none() && a.no_mkstream {
        c.w().null();
        return Ok(());
    }
    let last = existing.map_or(StreamId::MIN, |i| {
        as_stream(e.ks.value(i)).expect("checked").last_id
    });
    if last == StreamId::MAX {
        return Err(CmdError::Static(
            "ERR The stream has exhausted the last possible ID, unable to add more items",
        ));
    }
    // redis `streamNextID` for `*`.
    let (use_id, seq_given) = if a.id_given {
        (a.id, a.seq_given)
    } else if c.now_ms > last.ms {
        (StreamId::new(c.now_ms, 0), true)
    } else {
        (last.incr().expect("not the last ID"), true)
    };
    let lim = limits(e);
    let pairs = &argv[field_pos..];
    // Checked before anything changes, so a refused XADD changes (and records) nothing.
    let empty = StreamValue::new();
    let target = match existing {
        Some(i) => as_stream(e.ks.value(i))?,
        None => &empty,
    };
    target
        .check_append(pairs, use_id, seq_given)
        .map_err(append_error)?;
    let i = match existing {
        Some(i) => i,
        None => {
            e.ks.set(key, Value::Stream(Box::default()), Keep::Nothing, None)
        }
    };
    let id =
        e.ks.update(i, |v| stream_mut(v).append(pairs, use_id, seq_given, lim))
            .expect("checked above");
    let idtext = id.text();
    c.w().bulk(idtext.as_bytes());
    notify(e, class::STREAM, "xadd", key);
    let mut effect_args: Vec<&[u8]> = vec![b"XADD", key, idtext.as_bytes()];
    effect_args.extend_from_slice(pairs);
    effect::propagate(e, &effect_args);
    if a.trim != Trim::None {
        let (n, first, len) = e.ks.update(i, |v| {
            let s = stream_mut(v);
            let n = s.trim(a.trim, a.approx, a.limit);
            (n, s.first_id, s.length)
        });
        if n > 0 {
            notify(e, class::STREAM, "xtrim", key);
            propagate_trim(e, key, first, len);
        }
    }
    blocking::signal_ready(e, key);
    Ok(())
}

fn append_error(err: AppendError) -> CmdError {
    match err {
        AppendError::NotGreater => CmdError::Static(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        ),
        AppendError::TooLarge => CmdError::Static("ERR Elements are too large to be stored"),
    }
}

/// `XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]` → number of entries removed.
pub fn xtrim(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (a, _) = parse_add_trim(e, c.argv, false)?;
    let key = c.argv[1];
    let Some(i) = write_stream(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let probe = as_stream(e.ks.value(i))?;
    // Nothing to do: no update (no change counted).
    let (n, first, len) = if probe.is_empty() {
        (0, StreamId::MIN, 0)
    } else {
        e.ks.update(i, |v| {
            let s = stream_mut(v);
            let n = s.trim(a.trim, a.approx, a.limit);
            (n, s.first_id, s.length)
        })
    };
    if n > 0 {
        notify(e, class::STREAM, "xtrim", key);
        propagate_trim(e, key, first, len);
    } else {
        effect::suppress(e);
    }
    c.w().integer(n as i64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XRANGE / XREVRANGE / XLEN / XDEL / XSETID
// ---------------------------------------------------------------------------------------------

fn xrange_generic(e: &mut Engine, c: &mut Call, dir: Dir) -> Result<(), CmdError> {
    let argv = c.argv;
    let (start_arg, end_arg) = match dir {
        Dir::Forward => (argv[2], argv[3]),
        Dir::Reverse => (argv[3], argv[2]),
    };
    let (mut start, startex) = parse_interval_id(start_arg, 0)?;
    if startex {
        start = start
            .incr()
            .ok_or(CmdError::Static("ERR invalid start ID for the interval"))?;
    }
    let (mut end, endex) = parse_interval_id(end_arg, u64::MAX)?;
    if endex {
        end = end
            .decr()
            .ok_or(CmdError::Static("ERR invalid end ID for the interval"))?;
    }
    let mut count: i64 = -1;
    let mut j = 4;
    while j < argv.len() {
        let additional = argv.len() - j - 1;
        if args::is(argv[j], "count") && additional >= 1 {
            count = int_arg(argv[j + 1])?.max(0);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let Some(i) = read_stream(e, argv[1], c.now_ms)? else {
        c.w().array(0);
        return Ok(());
    };
    if count == 0 {
        c.w().null_array();
        return Ok(());
    }
    let s = as_stream(e.ks.value(i))?;
    let limit = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    let entries: Vec<EntryRef> = s.range(start, end, dir).take(limit).collect();
    let mut w = c.w();
    w.array(entries.len());
    for en in &entries {
        write_entry(&mut w, en);
    }
    Ok(())
}

/// `XRANGE key start end [COUNT count]` → entries.
pub fn xrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xrange_generic(e, c, Dir::Forward)
}

/// `XREVRANGE key end start [COUNT count]` → entries, newest first.
pub fn xrevrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xrange_generic(e, c, Dir::Reverse)
}

/// `XLEN key` → number of entries.
pub fn xlen(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match read_stream(e, c.argv[1], c.now_ms)? {
        Some(i) => as_stream(e.ks.value(i))?.len(),
        None => 0,
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `XDEL key id [id …]` → number of entries deleted.
pub fn xdel(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let Some(i) = write_stream(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let ids = c.argv[2..]
        .iter()
        .map(|a| parse_id(a, 0, IdMode::Strict).map(|(id, _)| id))
        .collect::<Result<Vec<_>, _>>()?;
    let any = {
        let s = as_stream(e.ks.value(i))?;
        ids.iter().any(|&id| s.get(id).is_some())
    };
    let n = if any {
        e.ks.update(i, |v| stream_mut(v).delete_ids(&ids))
    } else {
        0
    };
    if n > 0 {
        notify(e, class::STREAM, "xdel", key);
        effect::propagate(e, c.argv);
    }
    c.w().integer(n as i64);
    Ok(())
}

/// `XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]` → OK.
pub fn xsetid(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (id, _) = parse_id(argv[2], 0, IdMode::Strict)?;
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        if args::is(argv[i], "entriesadded") && more > 0 {
            entries_added = int_arg(argv[i + 1])?;
            if entries_added < 0 {
                return Err(CmdError::Static("ERR entries_added must be positive"));
            }
            i += 2;
        } else if args::is(argv[i], "maxdeletedid") && more > 0 {
            max_xdel = parse_id(argv[i + 1], 0, IdMode::Strict)?.0;
            if id < max_xdel {
                return Err(CmdError::Static(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = argv[1];
    let Some(i) = write_stream(e, key, c.now_ms)? else {
        return Err(CmdError::NoSuchKey);
    };
    let s = as_stream(e.ks.value(i))?;
    if s.length > 0 {
        if id < s.last_valid_id() {
            return Err(CmdError::Static(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            ));
        }
        if entries_added != -1 && s.length > entries_added as u64 {
            return Err(CmdError::Static(
                "ERR The entries_added specified in XSETID is smaller than the target stream length",
            ));
        }
    }
    e.ks.update(i, |v| {
        let s = stream_mut(v);
        s.last_id = id;
        if entries_added != -1 {
            s.entries_added = entries_added as u64;
        }
        if !max_xdel.is_zero() {
            s.max_deleted_entry_id = max_xdel;
        }
    });
    c.w().ok();
    notify_unwatched(e, class::STREAM, "xsetid", key);
    effect::propagate(e, argv);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XREAD / XREADGROUP
// ---------------------------------------------------------------------------------------------

/// `XREAD [COUNT n] [BLOCK ms] STREAMS key … id …` → per stream with new entries
/// `[key, entries]` (RESP3: a map), nil when none (after BLOCK's timeout).
pub fn xread(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xread_generic(e, c, false)
}

/// `XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key … id …`.
pub fn xreadgroup(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    xread_generic(e, c, true)
}

/// A stream XREAD/XREADGROUP will serve now.
struct Serve {
    /// Index among the streams.
    k: usize,
    /// Read the consumer's pending entries (XREADGROUP with an ID other than `>`).
    history: bool,
}

fn xread_generic(e: &mut Engine, c: &mut Call, group_mode: bool) -> Result<(), CmdError> {
    let argv = c.argv;
    let rerun = blocking::is_rerun(e, c.client.id);
    let mut timeout_ms: Option<u64> = None;
    let mut count: usize = 0;
    let mut streams_arg = 0;
    let mut nstreams = 0;
    let mut noack = false;
    let mut group: Option<(&[u8], &[u8])> = None;
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        let o = argv[i];
        if args::is(o, "block") && more > 0 {
            if c.client.addr == "lua" {
                return Err(CmdError::Other(format!(
                    "ERR {} command is not allowed with BLOCK option from scripts",
                    show(argv[0])
                )));
            }
            i += 1;
            let t = resp::parse_i64(argv[i]).ok_or(CmdError::Static(
                "ERR timeout is not an integer or out of range",
            ))?;
            if t < 0 {
                return Err(CmdError::Static("ERR timeout is negative"));
            }
            timeout_ms = Some(t as u64);
        } else if args::is(o, "count") && more > 0 {
            i += 1;
            count = int_arg(argv[i])?.max(0) as usize;
        } else if args::is(o, "streams") && more > 0 {
            streams_arg = i + 1;
            let n = argv.len() - streams_arg;
            if !n.is_multiple_of(2) {
                return Err(CmdError::Static(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            nstreams = n / 2;
            break;
        } else if args::is(o, "group") && more >= 2 {
            if !group_mode {
                return Err(CmdError::Static(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            group = Some((argv[i + 1], argv[i + 2]));
            i += 2;
        } else if args::is(o, "noack") {
            if !group_mode {
                return Err(CmdError::Static(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if streams_arg == 0 {
        return Err(CmdError::Syntax);
    }
    if group_mode && group.is_none() {
        return Err(CmdError::Static("ERR Missing GROUP option for XREADGROUP"));
    }
    if rerun && count == 0 {
        count = XREAD_BLOCKED_DEFAULT_COUNT;
    }
    let keys = &argv[streams_arg..streams_arg + nstreams];
    let id_args = &argv[streams_arg + nstreams..];
    // IDs (`$` resolved, `>` = MAX) and the stream positions.
    let mut ids: Vec<StreamId> = Vec::with_capacity(nstreams);
    let mut dollar_resolved = false;
    for (k, key) in keys.iter().enumerate() {
        let pos = match e.ks.lookup_read(key, c.now_ms) {
            Some(p) if as_stream(e.ks.value(p)).is_ok() => Some(p),
            Some(_) if rerun && group_mode => {
                return Err(CmdError::Static(
                    "UNBLOCKED the stream key no longer exists",
                ));
            }
            // A re-run XREAD reads the keys that are streams (one may have changed type).
            Some(_) if rerun => None,
            Some(_) => return Err(CmdError::WrongType),
            None => None,
        };
        if let Some((gname, _)) = group {
            let has_group = pos.is_some_and(|p| {
                as_stream(e.ks.value(p))
                    .expect("checked")
                    .groups
                    .contains_key(gname)
            });
            if !has_group {
                if rerun {
                    return Err(if pos.is_none() {
                        CmdError::Static("UNBLOCKED the stream key no longer exists")
                    } else {
                        CmdError::Static(
                            "NOGROUP the consumer group this client was blocked on no longer exists",
                        )
                    });
                }
                return Err(CmdError::Other(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    show(key),
                    show(gname)
                )));
            }
        }
        let arg = id_args[k];
        if arg == b"$" {
            if group_mode {
                return Err(CmdError::Static(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            dollar_resolved = true;
            ids.push(pos.map_or(StreamId::MIN, |p| {
                as_stream(e.ks.value(p)).expect("checked").last_id
            }));
            continue;
        } else if arg == b">" {
            if !group_mode {
                return Err(CmdError::Static(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            ids.push(StreamId::MAX);
            continue;
        }
        ids.push(parse_id(arg, 0, IdMode::Strict)?.0);
    }
    // Which streams are served now (redis: `serve_synchronously`).
    let mut serve: Vec<Serve> = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let Some(p) = e.ks.lookup_read(key, c.now_ms) else {
            continue;
        };
        let Ok(s) = as_stream(e.ks.value(p)) else {
            continue;
        };
        let gt = ids[k];
        if let Some((gname, _)) = group {
            if gt != StreamId::MAX {
                serve.push(Serve { k, history: true });
            } else if s.length > 0 {
                let g = &s.groups[gname];
                if s.last_valid_id() > g.last_id {
                    serve.push(Serve { k, history: false });
                }
            }
        } else if s.length > 0 && s.last_valid_id() > gt {
            serve.push(Serve { k, history: false });
        }
    }
    if !serve.is_empty() {
        let proto = c.client.proto;
        let now_ms = c.now_ms;
        let mut out = Vec::new();
        {
            let mut w = ReplyWriter::new(&mut out, proto);
            match proto {
                resp::Proto::Resp2 => w.array(serve.len()),
                resp::Proto::Resp3 => w.map(serve.len()),
            }
        }
        for sv in &serve {
            let key = keys[sv.k];
            {
                let mut w = ReplyWriter::new(&mut out, proto);
                if proto == resp::Proto::Resp2 {
                    w.array(2);
                }
                w.bulk(key);
            }
            let p =
                e.ks.lookup_write(key, now_ms)
                    .expect("served stream exists");
            // `>` reads after the group's last ID (redis: `*gt = *last`).
            let gt = match group {
                Some((gname, _)) if !sv.history => as_stream(e.ks.value(p))?.groups[gname].last_id,
                _ => ids[sv.k],
            };
            let start = gt.incr().unwrap_or(StreamId::MAX);
            match group {
                None => {
                    let s = as_stream(e.ks.value(p))?;
                    let entries: Vec<EntryRef> = s
                        .range(start, StreamId::MAX, Dir::Forward)
                        .take(if count == 0 { usize::MAX } else { count })
                        .collect();
                    let mut w = ReplyWriter::new(&mut out, proto);
                    w.array(entries.len());
                    for en in &entries {
                        write_entry(&mut w, en);
                    }
                }
                Some((gname, cname)) => {
                    let read = e.ks.update(p, |v| {
                        group_read(
                            stream_mut(v),
                            gname,
                            cname,
                            start,
                            count,
                            sv.history,
                            noack,
                            now_ms,
                            &mut out,
                            proto,
                        )
                    });
                    if read.consumer_created {
                        notify_unwatched(e, class::STREAM, "xgroup-createconsumer", key);
                    }
                    propagate_group_read(e, key, gname, cname, &read);
                }
            }
        }
        let (_, dst) = c.parts();
        dst.extend_from_slice(&out);
        return Ok(());
    }
    if let Some(t) = timeout_ms {
        let deadline = (t > 0).then(|| c.now_us.saturating_add(t.saturating_mul(1000)));
        // Park with `$` replaced by the IDs it meant now.
        let argv_parked: Option<Vec<Vec<u8>>> = dollar_resolved.then(|| {
            let mut v: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
            for (k, id) in ids.iter().enumerate() {
                if id_args[k] == b"$" {
                    v[streams_arg + nstreams + k] = id.text().into_bytes();
                }
            }
            v
        });
        if blocking::block_with_argv(e, c, keys, deadline, argv_parked) {
            return Ok(());
        }
    }
    c.w().null_array();
    Ok(())
}

/// What one XREADGROUP read of a stream did (for its effects).
pub struct GroupRead {
    consumer_created: bool,
    /// Entries that became (or stayed) pending: ID, delivery time, count.
    claimed: Vec<(StreamId, u64, u64)>,
    /// The group's last ID and entries-read after the read.
    last_id: StreamId,
    entries_read: i64,
    /// The read advanced the group's last ID.
    advanced: bool,
}

/// redis `streamReplyWithRange` with a group (and `…FromConsumerPEL` for history): writes
/// the entries array to `out`, updates the group.
#[allow(clippy::too_many_arguments)]
fn group_read(
    s: &mut StreamValue,
    gname: &[u8],
    cname: &[u8],
    start: StreamId,
    count: usize,
    history: bool,
    noack: bool,
    now_ms: u64,
    out: &mut Vec<u8>,
    proto: resp::Proto,
) -> GroupRead {
    let limit = if count == 0 { usize::MAX } else { count };
    let consumer_created = s
        .group_mut(gname, |g| g.ensure_consumer(cname, now_ms))
        .unwrap_or(false);
    let mut claimed = Vec::new();
    let mut advanced = false;
    if history {
        let ids: Vec<StreamId> = s.groups[gname]
            .consumer(cname)
            .map(|cons| cons.pel.range(start..).take(limit).copied().collect())
            .unwrap_or_default();
        let mut found = Vec::with_capacity(ids.len());
        {
            let mut w = ReplyWriter::new(out, proto);
            w.array(ids.len());
            for &id in &ids {
                match s.get(id) {
                    Some(en) => {
                        write_entry(&mut w, &en);
                        found.push(id);
                    }
                    None => {
                        w.array(2);
                        w.bulk(id.text().as_bytes());
                        w.null_array();
                    }
                }
            }
        }
        s.group_mut(gname, |g| {
            for id in found {
                if let Some(n) = g.nack_mut(id) {
                    n.delivery_time = now_ms;
                    n.delivery_count += 1;
                    claimed.push((id, n.delivery_time, n.delivery_count));
                }
            }
        });
    } else {
        // First pass: the entries and, for each, what the lag bookkeeping needs.
        let mut delivered: Vec<(StreamId, bool, Option<u64>)> = Vec::new();
        {
            let mut w = ReplyWriter::new(out, proto);
            let entries: Vec<EntryRef> = s
                .range(start, StreamId::MAX, Dir::Forward)
                .take(limit)
                .collect();
            w.array(entries.len());
            for en in &entries {
                write_entry(&mut w, en);
                delivered.push((
                    en.id,
                    s.range_has_tombstones(Some(en.id), None),
                    s.estimate_distance(en.id),
                ));
            }
        }
        let entries_added = s.entries_added;
        s.group_mut(gname, |g| {
            for &(id, tomb, est) in &delivered {
                if id > g.last_id {
                    if g.entries_read != super::group::INVALID_ENTRIES_READ && !tomb {
                        g.entries_read += 1;
                    } else if entries_added != 0 {
                        g.entries_read =
                            est.map_or(super::group::INVALID_ENTRIES_READ, |n| n as i64);
                    }
                    g.last_id = id;
                    advanced = true;
                }
                if !noack {
                    g.deliver(id, cname, now_ms);
                    claimed.push((id, now_ms, 1));
                }
            }
        });
    }
    let g = &s.groups[gname];
    GroupRead {
        consumer_created,
        claimed,
        last_id: g.last_id,
        entries_read: g.entries_read,
        advanced,
    }
}

/// XREADGROUP's effects (see the module doc).
fn propagate_group_read(e: &mut Engine, key: &[u8], gname: &[u8], cname: &[u8], r: &GroupRead) {
    if r.consumer_created {
        effect::propagate(e, &[b"XGROUP", b"CREATECONSUMER", key, gname, cname]);
    }
    let last = r.last_id.text();
    for &(id, time, n) in &r.claimed {
        let (id, time, n) = (id.text(), time.to_string(), n.to_string());
        effect::propagate(
            e,
            &[
                b"XCLAIM",
                key,
                gname,
                cname,
                b"0",
                id.as_bytes(),
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
    if r.advanced || (!r.consumer_created && r.claimed.is_empty()) {
        let read = r.entries_read.to_string();
        effect::propagate(
            e,
            &[
                b"XGROUP",
                b"SETID",
                key,
                gname,
                last.as_bytes(),
                b"ENTRIESREAD",
                read.as_bytes(),
            ],
        );
    }
}
