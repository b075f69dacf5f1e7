//! Splitting multi-key commands by instance, and merging the instances' replies.
//!
//! Pure functions over byte slices: no sockets, no state. The event loop sends each
//! [`Part`] to its instance, collects one reply per part (in part order) and calls
//! [`merge`] once all have arrived. The design follows twemproxy's `redis_fragment_argx`
//! and `redis_post_coalesce_*` (STYLE.md guideline 13), with the key → part map kept as
//! explicit data instead of pointers between messages.
//!
//! ```text
//!  client:  MGET  k0  k1  k2  k3  k4          (keys in the caller's order)
//!                 │   │   │   │   │
//!  instance_of:   1   0   1   1   0
//!                 │   │   │   │   │
//!  parts:   part 0 → instance 1: MGET k0 k2 k3      (parts in order of first appearance)
//!           part 1 → instance 0: MGET k1 k4
//!  seq:     k0→(0,0) k1→(1,0) k2→(0,1) k3→(0,2) k4→(1,1)     key index → (part, position)
//!
//!  replies: part 0: *3 [v0 v2 v3]    part 1: *2 [v1 v4]
//!  merge:   walk `seq` in key order, copy element `position` of reply `part`
//!           → *5 [v0 v1 v2 v3 v4]
//! ```
//!
//! Merge rules, per [`Merge`] kind: MGET re-emits values in key order; DEL, UNLINK, EXISTS,
//! TOUCH and DBSIZE add the integers; MSET and FLUSHALL/FLUSHDB answer `+OK` if every part
//! did; KEYS concatenates. **Any part that answered an error makes the whole reply that
//! error** (the first in part order), like twemproxy's `ferror` — except INFO, which reports
//! what it could gather, and RANDOMKEY, which only needs one instance to answer.
//!
//! SCAN goes to one instance at a time; its cursor carries the instance (see
//! [`scan_cursor_decode`]).
//!
//! # Parts refused while a slot moves: split again per slot
//!
//! A part holds the keys of one instance, often of several slots; an engine runs it while it
//! owns them all, and refuses it (`-CROSSSLOT`, `-TRYAGAIN`) while one of those slots is
//! moving or moved. Then [`per_slot`] cuts the refused request into one request per slot
//! (the same [`split`], a slot standing for the instance), each followed alone by the
//! redirect machinery, and [`merge`] joins their replies with the same rules into the reply
//! the part would have had (`crate::follow`, "a nested gather"). Per slot and not per key: a
//! slot is the unit a move keeps whole (a request of one slot is run, or answered `-ASK`,
//! `-MOVED`, `-TRYAGAIN`, never `-CROSSSLOT`), and it keeps the part's keys of one slot in one
//! request, as a Redis Cluster client would send them. A request of one slot is never cut:
//! its `-TRYAGAIN` (keys of the slot on both sides of the move) is retried as for any request.

use resp::Value;
use resp::reply::frame_len;

/// One sub-request: the full RESP request for `instance`.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    pub instance: usize,
    pub request: Vec<u8>,
}

/// The result of [`split`]: parts in order of first appearance of their instance, and for
/// each key of the original request (in order) where its value comes back.
#[derive(Debug, PartialEq, Eq)]
pub struct Split {
    pub parts: Vec<Part>,
    /// `seq[k] = (part index, position of key k among that part's keys)`.
    pub seq: Vec<(u32, u32)>,
}

/// How the replies of the parts (or of a fan-out to every instance) become one reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// MGET: an array of the values in the caller's key order; needs the split's `seq`.
    Values(Vec<(u32, u32)>),
    /// PUBSUB NUMSUB / SHARDNUMSUB: each name answered by its part as two elements (name,
    /// count), in the caller's order; `seq` as for [`Merge::Values`].
    ValuePairs(Vec<(u32, u32)>),
    /// DEL, UNLINK, EXISTS, TOUCH, DBSIZE: the sum of the integer replies.
    Sum,
    /// MSET, FLUSHALL, FLUSHDB: `+OK` if every part answered `+OK`.
    AllOk,
    /// KEYS: the arrays concatenated (in instance order).
    Concat,
    /// PUBSUB NUMPAT: the largest integer reply.
    Max,
    /// LASTSAVE: the smallest integer reply (the oldest save of the fleet).
    Min,
    /// BGSAVE, SCRIPT LOAD: the first part's reply when no part answered an error.
    First,
    /// CLIENT TRACKINGINFO of a client redirecting to this proxy client id: the first reply,
    /// its `redirect` field (the instance's id of the target's connection) set to the id.
    Redirect(u64),
    /// SCRIPT EXISTS: arrays of `:0`/`:1`, merged element by element: `:1` where every part
    /// answered `:1` (the script is usable whatever instance the keys land on).
    AllOf,
    /// CONFIG SET sent to every instance as `CONFIG GET <names>` (part `2i`) then the
    /// request (part `2i + 1`): `+OK` when every instance accepted it, else the first error,
    /// and the instances that accepted get their old values back ([`config_set_outcome`];
    /// `crate::client` sends those restores before the error is answered).
    ConfigSet,
    /// CONFIG GET answered by one instance: the value of `port` is `port`, the proxy's own
    /// (the port a client of the proxy uses), the rest as the instance gave it.
    ConfigGet {
        port: u16,
    },
    /// These bytes, once the restoring requests of a refused CONFIG SET were answered
    /// (their replies are dropped).
    Restored(Vec<u8>),
    /// The reply is these bytes once every part answered without an error (pub/sub
    /// confirmations written by the proxy, EXECABORT after the proxy's DISCARD).
    Fixed(Vec<u8>),
    /// RANDOMKEY sent to every instance: the first non-nil key, starting with part `start`.
    AnyNonNil {
        start: usize,
    },
    /// SCRIPT KILL / FUNCTION KILL sent to every instance: `+OK` if one killed its script,
    /// else an `-UNKILLABLE` or `-BUSY` if one answered it, else the first reply
    /// (`-NOTBUSY …`).
    Kill,
    /// `LATENCY LATEST`, `HISTORY`, `HISTOGRAM` (RESP3: `true`) over instances
    /// ([`crate::latency`]).
    LatencyLatest,
    LatencyHistory,
    LatencyHistogram(bool),
    /// XREAD/XREADGROUP (without BLOCK) over streams on several instances, split by
    /// [`split_stream_read`]: the streams the parts served, in the caller's key order (`seq`
    /// as for MGET), as an array of `[key, entries]` (RESP2) or a map (RESP3); a null when
    /// no part served any.
    StreamRead {
        seq: Vec<(u32, u32)>,
        /// The caller's keys, in order.
        keys: Vec<Vec<u8>>,
        proto: resp::Proto,
    },
    /// SCAN sent to one instance: rewrite the returned cursor (see [`scan_cursor_encode`]).
    Scan {
        instance: usize,
        instances: usize,
    },
    /// INFO: `header` (the proxy's own sections) then a `# Keyspace` section with the
    /// instances' `db0` keys and expires added up. Errors count as unavailable instances.
    Info {
        header: Vec<u8>,
        proxy_section: bool,
        /// The client's protocol: RESP3 gets a verbatim string (`=…txt:`), as from Redis.
        proto: resp::Proto,
    },
}

/// Groups the keys of a multi-key request by instance.
///
/// `args` is the whole request (`args[0]` is the command name, sent unchanged in each part);
/// keys are at `1, 1 + step, 1 + 2*step, …` and each key takes the `step - 1` arguments after
/// it along (MSET: `step` = 2, key then value). `args.len() - 1` must be a multiple of `step`
/// (the caller checks arity first).
pub fn split(args: &[&[u8]], step: usize, instance_of: impl Fn(&[u8]) -> usize) -> Split {
    let nkeys = (args.len() - 1) / step;
    // Pass 1: the instance of each key, parts in order of first appearance, keys per part.
    // A few instances: a linear search beats hashing.
    let mut instances: Vec<usize> = Vec::new(); // per part
    let mut part_keys: Vec<u32> = Vec::new();
    let mut seq = Vec::with_capacity(nkeys);
    for k in 0..nkeys {
        let instance = instance_of(args[1 + k * step]);
        let part = match instances.iter().position(|&i| i == instance) {
            Some(p) => p as u32,
            None => {
                instances.push(instance);
                part_keys.push(0);
                (instances.len() - 1) as u32
            }
        };
        seq.push((part, part_keys[part as usize]));
        part_keys[part as usize] += 1;
    }
    assemble(args, step, instances, &part_keys, seq)
}

/// [`split`]'s pass 2: each part's arguments (`instances[p]`, `part_keys[p]` keys), then its
/// request.
fn assemble(
    args: &[&[u8]],
    step: usize,
    instances: Vec<usize>,
    part_keys: &[u32],
    seq: Vec<(u32, u32)>,
) -> Split {
    let mut part_args: Vec<Vec<&[u8]>> = part_keys
        .iter()
        .map(|&keys| {
            let mut a = Vec::with_capacity(1 + keys as usize * step);
            a.push(args[0]);
            a
        })
        .collect();
    for (k, &(part, _)) in seq.iter().enumerate() {
        part_args[part as usize].extend_from_slice(&args[1 + k * step..1 + (k + 1) * step]);
    }
    let parts = instances
        .into_iter()
        .zip(part_args)
        .map(|(instance, a)| {
            let mut request = Vec::new();
            resp::encode_request(&mut request, &a);
            Part { instance, request }
        })
        .collect();
    Split { parts, seq }
}

/// The key-list commands split by instance (`crate::route`) and per slot ([`per_slot`]):
/// the lowercase name's `step` (arguments per key, the key first) and how the parts' replies
/// merge (MGET's `seq` is filled by the split).
pub fn key_list(name: &[u8]) -> Option<(usize, Merge)> {
    match name {
        b"mget" => Some((1, Merge::Values(Vec::new()))),
        b"del" | b"unlink" | b"exists" | b"touch" => Some((1, Merge::Sum)),
        b"mset" => Some((2, Merge::AllOk)),
        _ => None,
    }
}

/// A sub-request of [`per_slot`]: the keys of one slot.
#[derive(Debug, PartialEq, Eq)]
pub struct SlotPart {
    pub slot: u16,
    pub request: Vec<u8>,
}

/// A key-list request ([`key_list`]) whose keys span several slots, cut into one request per
/// slot (slots in order of first appearance, keys in the request's order), and how their
/// replies merge into the request's reply. `None`: one slot (nothing to cut), not a key-list
/// command, or not a well-formed request. Only for a request an engine refused (see the
/// module docs): it decodes the request again.
pub fn per_slot(request: &[u8]) -> Option<(Vec<SlotPart>, Merge)> {
    cut(request, false)
}

/// A key-list request of several keys cut into one request per key (in the request's order),
/// for a one-slot request an engine refused with `-TRYAGAIN` (some of its keys moved, some
/// not, or missing on the importing side: redis `getNodeByQuery`); a one-key request is never
/// refused so. `None`: one key, not a key-list command, or not well-formed.
pub fn per_key(request: &[u8]) -> Option<(Vec<SlotPart>, Merge)> {
    cut(request, true)
}

fn cut(request: &[u8], by_key: bool) -> Option<(Vec<SlotPart>, Merge)> {
    let Ok(Some((Value::Array(argv), _))) = resp::decode(request) else {
        return None;
    };
    let args: Vec<&[u8]> = argv
        .iter()
        .map(|a| match a {
            Value::Bulk(b) => Some(b.as_slice()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (step, merge) = key_list(&args.first()?.to_ascii_lowercase())?;
    if args.len() < 1 + step || !(args.len() - 1).is_multiple_of(step) {
        return None;
    }
    // Pass 1 of [`split`] with slots for instances, a slot's part found by a map: a part
    // may hold thousands of slots.
    let nkeys = (args.len() - 1) / step;
    let mut part_of_slot = std::collections::HashMap::new();
    let mut slots: Vec<usize> = Vec::new();
    let mut part_keys: Vec<u32> = Vec::new();
    let mut seq = Vec::with_capacity(nkeys);
    for k in 0..nkeys {
        let slot = engine_core::slot::key_slot(args[1 + k * step]);
        let part = if by_key {
            slots.push(usize::from(slot));
            part_keys.push(0);
            (slots.len() - 1) as u32
        } else {
            *part_of_slot.entry(slot).or_insert_with(|| {
                slots.push(usize::from(slot));
                part_keys.push(0);
                (slots.len() - 1) as u32
            })
        };
        seq.push((part, part_keys[part as usize]));
        part_keys[part as usize] += 1;
    }
    if slots.len() < 2 {
        return None;
    }
    let s = assemble(&args, step, slots, &part_keys, seq);
    let merge = match merge {
        Merge::Values(_) => Merge::Values(s.seq),
        other => other,
    };
    let parts = s
        .parts
        .into_iter()
        .map(|p| SlotPart {
            slot: p.instance as u16,
            request: p.request,
        })
        .collect();
    Some((parts, merge))
}

/// Writes the merged reply of `replies` (one complete RESP frame per part, in part order)
/// into `out`.
pub fn merge(merge: &Merge, replies: &[&[u8]], out: &mut Vec<u8>) {
    let tolerant = matches!(
        merge,
        Merge::Info { .. }
            | Merge::AnyNonNil { .. }
            | Merge::ConfigSet
            | Merge::Restored(_)
            | Merge::Kill
    );
    if !tolerant && let Some(err) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        out.extend_from_slice(err);
        return;
    }
    let ok = match merge {
        Merge::Values(seq) => merge_values(seq, replies, out),
        Merge::ValuePairs(seq) => merge_value_pairs(seq, replies, out),
        Merge::StreamRead { seq, keys, proto } => {
            merge_stream_read(seq, keys, *proto, replies, out)
        }
        Merge::Sum => merge_sum(replies, out),
        Merge::AllOk => {
            let all_ok = replies.iter().all(|r| *r == b"+OK\r\n");
            if all_ok {
                out.extend_from_slice(b"+OK\r\n");
            }
            all_ok
        }
        Merge::Concat => merge_concat(replies, out),
        Merge::AllOf => merge_all_of(replies, out),
        Merge::Max => match replies
            .iter()
            .map(|r| integer(r))
            .collect::<Option<Vec<i64>>>()
        {
            Some(all) => {
                out.push(b':');
                let max = all.into_iter().max().unwrap_or(0);
                out.extend_from_slice(itoa::Buffer::new().format(max).as_bytes());
                out.extend_from_slice(b"\r\n");
                true
            }
            None => false,
        },
        Merge::Min => match replies
            .iter()
            .map(|r| integer(r))
            .collect::<Option<Vec<i64>>>()
        {
            Some(all) => {
                out.push(b':');
                let min = all.into_iter().min().unwrap_or(0);
                out.extend_from_slice(itoa::Buffer::new().format(min).as_bytes());
                out.extend_from_slice(b"\r\n");
                true
            }
            None => false,
        },
        Merge::First => match replies.first() {
            Some(r) => {
                out.extend_from_slice(r);
                true
            }
            None => false,
        },
        Merge::Redirect(id) => match replies.first() {
            Some(r) => {
                const FIELD: &[u8] = b"$8\r\nredirect\r\n:";
                match r.windows(FIELD.len()).position(|w| w == FIELD) {
                    Some(at) => {
                        let start = at + FIELD.len();
                        let end = start
                            + r[start..]
                                .iter()
                                .position(|&b| b == b'\r')
                                .unwrap_or(r.len() - start);
                        out.extend_from_slice(&r[..start]);
                        out.extend_from_slice(itoa::Buffer::new().format(*id).as_bytes());
                        out.extend_from_slice(&r[end..]);
                    }
                    None => out.extend_from_slice(r),
                }
                true
            }
            None => false,
        },
        Merge::ConfigSet => {
            out.extend_from_slice(&config_set_outcome(replies).0);
            true
        }
        Merge::Fixed(bytes) | Merge::Restored(bytes) => {
            out.extend_from_slice(bytes);
            true
        }
        Merge::ConfigGet { port } => merge_config_get(*port, replies, out),
        Merge::AnyNonNil { start } => merge_any_non_nil(*start, replies, out),
        Merge::Kill => {
            let pick = replies
                .iter()
                .find(|r| r.starts_with(b"+OK"))
                .or_else(|| replies.iter().find(|r| r.starts_with(b"-UNKILLABLE")))
                // A script of the other kind (FUNCTION KILL of an EVAL) says so.
                .or_else(|| replies.iter().find(|r| r.starts_with(b"-BUSY")))
                .or_else(|| replies.first());
            if let Some(r) = pick {
                out.extend_from_slice(r);
            }
            pick.is_some()
        }
        Merge::Scan {
            instance,
            instances,
        } => merge_scan(*instance, *instances, replies, out),
        Merge::LatencyLatest => crate::latency::merge_latest(replies, out),
        Merge::LatencyHistory => crate::latency::merge_history(replies, out),
        Merge::LatencyHistogram(resp3) => crate::latency::merge_histogram(replies, *resp3, out),
        Merge::Info {
            header,
            proxy_section,
            proto,
        } => {
            merge_info(header, *proxy_section, *proto, replies, out);
            true
        }
    };
    if !ok {
        out.extend_from_slice(UNEXPECTED_REPLY);
    }
}

/// CONFIG SET's outcome from its parts ([`Merge::ConfigSet`]: per instance the `CONFIG GET`
/// reply, then the `CONFIG SET` reply): the client's reply, and the `CONFIG SET` requests
/// that put the old values back on the instances that accepted, when another refused.
pub fn config_set_outcome(replies: &[&[u8]]) -> (Vec<u8>, Vec<(usize, Vec<u8>)>) {
    let sets = replies.iter().skip(1).step_by(2);
    let Some(refused) = sets.clone().find(|r| !r.starts_with(b"+OK")) else {
        return (b"+OK\r\n".to_vec(), Vec::new());
    };
    let reply = match refused.first() {
        Some(b'-' | b'!') => refused.to_vec(),
        _ => UNEXPECTED_REPLY.to_vec(),
    };
    let mut restores = Vec::new();
    for (i, set) in sets.enumerate() {
        if !set.starts_with(b"+OK") {
            continue;
        }
        // RESP2: a flat array name, value, …; RESP3: a map.
        let pairs = config_pairs(replies[2 * i]).unwrap_or_default();
        if pairs.is_empty() {
            continue;
        }
        let mut argv: Vec<&[u8]> = vec![b"CONFIG", b"SET"];
        argv.extend(pairs.iter().map(Vec::as_slice));
        let mut request = Vec::new();
        resp::encode_request(&mut request, &argv);
        restores.push((i, request));
    }
    (reply, restores)
}

/// The name and value strings of a `CONFIG GET` reply (array or map), in order.
fn config_pairs(frame: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (line, mut at) = header_line(frame)?;
    let n = match line.first() {
        Some(b'*') => resp::parse_i64(&line[1..])?,
        Some(b'%') => resp::parse_i64(&line[1..])?.checked_mul(2)?,
        _ => return None,
    };
    let mut out = Vec::new();
    for _ in 0..n.max(0) {
        let len = frame_len(&frame[at..]).ok()??;
        out.push(bulk(&frame[at..at + len])??);
        at += len;
    }
    Some(out)
}

/// Sent when an instance answers with a shape the command cannot have (not a RESP server?).
pub const UNEXPECTED_REPLY: &[u8] = b"-ERR unexpected reply from an instance\r\n";

/// The elements of each part's array reply; None if one is not an array.
fn parts_elems<'a>(replies: &[&'a [u8]]) -> Option<Vec<Vec<&'a [u8]>>> {
    replies.iter().map(|r| array_elems(r)).collect()
}

fn merge_value_pairs(seq: &[(u32, u32)], replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(elems) = parts_elems(replies) else {
        return false;
    };
    let mut merged = Vec::new();
    push_array_header(&mut merged, 2 * seq.len());
    for &(part, pos) in seq {
        let e = elems.get(part as usize);
        for i in [2 * pos as usize, 2 * pos as usize + 1] {
            match e.and_then(|e| e.get(i)) {
                Some(v) => merged.extend_from_slice(v),
                None => return false,
            }
        }
    }
    out.extend_from_slice(&merged);
    true
}

fn merge_values(seq: &[(u32, u32)], replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(elems) = parts_elems(replies) else {
        return false;
    };
    let mut merged = Vec::new();
    push_array_header(&mut merged, seq.len());
    for &(part, pos) in seq {
        match elems.get(part as usize).and_then(|e| e.get(pos as usize)) {
            Some(v) => merged.extend_from_slice(v),
            None => return false,
        }
    }
    out.extend_from_slice(&merged);
    true
}

/// Splits `XREAD|XREADGROUP [options] STREAMS k… id…` (`streams` = the position of the first
/// key, `nkeys` keys) by instance: each part repeats the options and names its keys with
/// their IDs, in the caller's order.
///
/// ```text
///  client:  XREAD COUNT 2 STREAMS a b c  0 5 $       instance_of: a→1 b→0 c→1
///  parts:   part 0 → 1: XREAD COUNT 2 STREAMS a c 0 $
///           part 1 → 0: XREAD COUNT 2 STREAMS b 5
///  seq:     a→(0,0) b→(1,0) c→(0,1)
///  merge:   each part answers the streams it served (a subset, in its order); walking the
///           caller's keys, a key is taken from its part when it is that part's next served one
/// ```
pub fn split_stream_read(
    args: &[&[u8]],
    streams: usize,
    nkeys: usize,
    instance_of: impl Fn(&[u8]) -> usize,
) -> Split {
    let mut part_of_instance: Vec<usize> = Vec::new();
    let mut part_idx: Vec<Vec<usize>> = Vec::new();
    let mut seq = Vec::with_capacity(nkeys);
    for k in 0..nkeys {
        let instance = instance_of(args[streams + k]);
        let part = match part_of_instance.iter().position(|&i| i == instance) {
            Some(p) => p,
            None => {
                part_of_instance.push(instance);
                part_idx.push(Vec::new());
                part_of_instance.len() - 1
            }
        };
        seq.push((part as u32, part_idx[part].len() as u32));
        part_idx[part].push(k);
    }
    let parts = part_of_instance
        .iter()
        .zip(&part_idx)
        .map(|(&instance, keys)| {
            let mut a: Vec<&[u8]> = args[..streams].to_vec();
            a.extend(keys.iter().map(|&k| args[streams + k]));
            a.extend(keys.iter().map(|&k| args[streams + nkeys + k]));
            let mut request = Vec::new();
            resp::encode_request(&mut request, &a);
            Part { instance, request }
        })
        .collect();
    Split { parts, seq }
}

/// The `(key bulk, entries)` frames of an XREAD reply: a null, an array of `[key, entries]`
/// pairs (RESP2), or a map (RESP3).
fn stream_read_elems(frame: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let (line, mut at) = header_line(frame)?;
    let next = |at: &mut usize| -> Option<&[u8]> {
        let len = frame_len(&frame[*at..]).ok()??;
        let f = &frame[*at..*at + len];
        *at += len;
        Some(f)
    };
    match line.first() {
        Some(b'_') => Some(Vec::new()),
        Some(b'*') => {
            let n = resp::parse_i64(&line[1..])?;
            let mut v = Vec::new();
            for _ in 0..n.max(0) {
                let pair = next(&mut at)?;
                let (head, mut pat) = header_line(pair)?;
                if head != b"*2" {
                    return None;
                }
                let klen = frame_len(&pair[pat..]).ok()??;
                let key = &pair[pat..pat + klen];
                pat += klen;
                v.push((key, &pair[pat..]));
            }
            Some(v)
        }
        Some(b'%') => {
            let n = resp::parse_i64(&line[1..])?;
            let mut v = Vec::new();
            for _ in 0..n.max(0) {
                let key = next(&mut at)?;
                let entries = next(&mut at)?;
                v.push((key, entries));
            }
            Some(v)
        }
        _ => None,
    }
}

fn merge_stream_read(
    seq: &[(u32, u32)],
    keys: &[Vec<u8>],
    proto: resp::Proto,
    replies: &[&[u8]],
    out: &mut Vec<u8>,
) -> bool {
    let mut parts: Vec<Vec<(&[u8], &[u8])>> = Vec::with_capacity(replies.len());
    for r in replies {
        match stream_read_elems(r) {
            Some(e) => parts.push(e),
            None => return false,
        }
    }
    // `keys_of[p]`: the caller's key indexes part p asked for, in order. Its reply holds the
    // streams it served, a subsequence of them in the same order: matched by name.
    let mut keys_of: Vec<Vec<usize>> = vec![Vec::new(); parts.len()];
    for (k, &(p, _)) in seq.iter().enumerate() {
        match keys_of.get_mut(p as usize) {
            Some(v) => v.push(k),
            None => return false,
        }
    }
    let mut served: Vec<(usize, &[u8], &[u8])> = Vec::new();
    for (p, elems) in parts.iter().enumerate() {
        let mut pos = 0;
        for &(key, entries) in elems {
            let Some(name) = bulk_body(key) else {
                return false;
            };
            loop {
                let Some(&k) = keys_of[p].get(pos) else {
                    return false; // a stream the part was not asked for
                };
                pos += 1;
                if keys.get(k).is_some_and(|x| x == name) {
                    served.push((k, key, entries));
                    break;
                }
            }
        }
    }
    served.sort_by_key(|&(k, _, _)| k);
    if served.is_empty() {
        out.extend_from_slice(match proto {
            resp::Proto::Resp2 => b"*-1\r\n",
            resp::Proto::Resp3 => b"_\r\n",
        });
        return true;
    }
    let n = itoa::Buffer::new().format(served.len()).to_owned();
    match proto {
        resp::Proto::Resp2 => {
            push_array_header(out, served.len());
            for (_, key, entries) in served {
                out.extend_from_slice(b"*2\r\n");
                out.extend_from_slice(key);
                out.extend_from_slice(entries);
            }
        }
        resp::Proto::Resp3 => {
            out.push(b'%');
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b"\r\n");
            for (_, key, entries) in served {
                out.extend_from_slice(key);
                out.extend_from_slice(entries);
            }
        }
    }
    true
}

/// The bytes of a `$len\r\nbytes\r\n` frame.
pub(crate) fn bulk_body(frame: &[u8]) -> Option<&[u8]> {
    let (line, at) = header_line(frame)?;
    let len = usize::try_from(resp::parse_i64(line.strip_prefix(b"$")?)?).ok()?;
    frame.get(at..at + len)
}

fn merge_sum(replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let mut sum: i64 = 0;
    for r in replies {
        match integer(r) {
            Some(n) => sum = sum.saturating_add(n),
            None => return false,
        }
    }
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(sum).as_bytes());
    out.extend_from_slice(b"\r\n");
    true
}

fn merge_all_of(replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(parts) = replies
        .iter()
        .map(|r| array_elems(r))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let n = parts.first().map_or(0, Vec::len);
    if parts.iter().any(|p| p.len() != n) {
        return false;
    }
    push_array_header(out, n);
    for i in 0..n {
        let all = parts.iter().all(|p| p[i] == b":1\r\n");
        out.extend_from_slice(if all { b":1\r\n" } else { b":0\r\n" });
    }
    true
}

fn merge_concat(replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let mut all = Vec::new();
    for r in replies {
        match array_elems(r) {
            Some(e) => all.extend(e),
            None => return false,
        }
    }
    push_array_header(out, all.len());
    for e in all {
        out.extend_from_slice(e);
    }
    true
}

fn merge_any_non_nil(start: usize, replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let n = replies.len();
    let mut first_error = None;
    for i in 0..n {
        let r = replies[(start + i) % n];
        match r.first() {
            Some(b'$') if !r.starts_with(b"$-1\r\n") => {
                out.extend_from_slice(r);
                return true;
            }
            Some(b'-') => first_error = first_error.or(Some(r)),
            _ => {}
        }
    }
    if replies.iter().all(|r| r.first() == Some(&b'-'))
        && let Some(err) = first_error
    {
        out.extend_from_slice(err);
    } else if replies.iter().any(|r| r.first() == Some(&b'_')) {
        out.extend_from_slice(b"_\r\n"); // RESP3 links answered: their null
    } else {
        out.extend_from_slice(b"$-1\r\n");
    }
    true
}

fn merge_scan(instance: usize, instances: usize, replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let [reply] = replies else { return false };
    let Some(elems) = array_elems(reply) else {
        return false;
    };
    let [cursor, keys] = elems[..] else {
        return false;
    };
    let Some(backend_next) = bulk(cursor)
        .flatten()
        .and_then(|c| std::str::from_utf8(&c).ok()?.parse::<u64>().ok())
    else {
        return false;
    };
    match scan_cursor_encode(backend_next, instance, instances) {
        Some(next) => {
            push_array_header(out, 2);
            push_bulk(out, itoa::Buffer::new().format(next).as_bytes());
            out.extend_from_slice(keys);
        }
        None => {
            out.extend_from_slice(b"-ERR instance ");
            out.extend_from_slice(itoa::Buffer::new().format(instance).as_bytes());
            out.extend_from_slice(b" returned a SCAN cursor too large to encode\r\n");
        }
    }
    true
}

/// [`Merge::ConfigGet`]: the one reply (a RESP2 array of names and values, or a RESP3 map)
/// with the value after the name `port` replaced.
fn merge_config_get(port: u16, replies: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let [reply] = replies else { return false };
    let Some(elems) = aggregate_elems(reply, true) else {
        return false;
    };
    let Some((line, _)) = header_line(reply) else {
        return false;
    };
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
    for pair in elems.chunks(2) {
        out.extend_from_slice(pair[0]);
        match pair.get(1) {
            Some(_) if bulk(pair[0]).flatten().as_deref() == Some(b"port") => {
                push_bulk(out, itoa::Buffer::new().format(port).as_bytes());
            }
            Some(value) => out.extend_from_slice(value),
            None => {}
        }
    }
    true
}

/// Sections the proxy answers itself (see `route.rs` module docs).
const OWN_INFO_SECTIONS: [&str; 2] = ["server", "clients"];

/// `# Persistence` fields that add up over the instances (changes not yet saved, saves done,
/// saves running); the others (times, statuses, sizes of the last fork) are the first
/// instance's.
const PERSISTENCE_SUMMED: &[&str] = &[
    "rdb_changes_since_last_save",
    "rdb_saves",
    "rdb_bgsave_in_progress",
    "aof_rewrite_in_progress",
    "aof_rewrites",
    "current_save_keys_processed",
    "current_save_keys_total",
];

/// One merged INFO field: its name and the value summed over the instances.
enum InfoField {
    Sum(String, i128),
    /// `db0:keys=..,expires=..,avg_ttl=..`: sums, and the TTL total for a weighted mean.
    Db(String, u64, u64, u128),
    /// `name:a=1,b=2.5,…` (commandstats, errorstats, latencystats): integers summed,
    /// `usec_per_call` recomputed from the sums, other decimals the largest (a percentile of
    /// the fleet is at most the largest instance's).
    Stats(String, Vec<(String, StatValue)>),
    /// A decimal (`used_cpu_sys:0.123456`): summed, printed with as many decimals as given.
    Decimal(String, f64, usize),
    /// A flag or offset that a sum would falsify (`cluster_enabled`, `second_repl_offset`…):
    /// the first instance's value.
    First(String, String),
}

/// INFO fields kept from the first instance instead of summed over the instances.
const INFO_NOT_SUMMED: &[&str] = &[
    "cluster_enabled",
    "loading",
    "async_loading",
    "second_repl_offset",
    "repl_backlog_active",
    "repl_backlog_first_byte_offset",
    "aof_enabled",
    "mem_not_counted_for_evict",
    "lazyfreed_objects",
];

#[derive(Clone, Copy)]
enum StatValue {
    Int(i128),
    Decimal(f64),
}

/// The `a=1,b=2.5` subfields of a stats line, if every one is a number.
fn stat_fields(v: &str) -> Option<Vec<(String, StatValue)>> {
    v.split(',')
        .map(|f| {
            let (k, x) = f.split_once('=')?;
            let value = match x.parse::<i128>() {
                Ok(n) => StatValue::Int(n),
                Err(_) => StatValue::Decimal(x.parse::<f64>().ok()?),
            };
            Some((k.to_string(), value))
        })
        .collect()
}

fn merge_stats(into: &mut [(String, StatValue)], add: &[(String, StatValue)]) {
    for ((_, a), (_, b)) in into.iter_mut().zip(add) {
        *a = match (*a, *b) {
            (StatValue::Int(x), StatValue::Int(y)) => StatValue::Int(x + y),
            (StatValue::Decimal(x), StatValue::Decimal(y)) => StatValue::Decimal(x.max(y)),
            (x, _) => x,
        };
    }
    let int = |name: &str| {
        into.iter().find_map(|(k, v)| match v {
            StatValue::Int(n) if k == name => Some(*n),
            _ => None,
        })
    };
    if let (Some(usec), Some(calls)) = (int("usec"), int("calls"))
        && let Some((_, per)) = into.iter_mut().find(|(k, _)| k == "usec_per_call")
    {
        *per = StatValue::Decimal(if calls > 0 {
            usec as f64 / calls as f64
        } else {
            0.0
        });
    }
}

fn merge_info(
    header: &[u8],
    proxy_section: bool,
    proto: resp::Proto,
    replies: &[&[u8]],
    out: &mut Vec<u8>,
) {
    // (section title, fields) in order of first appearance across the instances.
    let mut sections: Vec<(String, Vec<InfoField>)> = Vec::new();
    let mut answered = 0usize;
    let mut blocked = 0u64;
    let mut in_clients = false;
    for r in replies {
        let Some(Some(text)) = bulk(r) else { continue };
        answered += 1;
        let text = String::from_utf8_lossy(&text);
        let mut current: Option<usize> = None;
        for line in text.split('\n') {
            let line = line.trim_end_matches('\r');
            if let Some(title) = line.strip_prefix("# ") {
                in_clients = title.eq_ignore_ascii_case("clients");
                let own = OWN_INFO_SECTIONS.contains(&title.to_ascii_lowercase().as_str());
                current = if own {
                    None
                } else {
                    Some(match sections.iter().position(|(t, _)| t == title) {
                        Some(i) => i,
                        None => {
                            sections.push((title.to_string(), Vec::new()));
                            sections.len() - 1
                        }
                    })
                };
                continue;
            }
            // The proxy's own `# Clients` carries the fleet's parked clients (a blocked
            // command holds a dedicated connection to one instance).
            if in_clients && let Some(n) = line.strip_prefix("blocked_clients:") {
                blocked += n.parse::<u64>().unwrap_or(0);
                continue;
            }
            let (Some(si), Some((k, v))) = (current, line.split_once(':')) else {
                continue;
            };
            let (title, fields) = &mut sections[si];
            let persistence = title == "Persistence";
            if k.starts_with("db") && v.starts_with("keys=") {
                let mut kv = [0u64; 3];
                for (i, name) in ["keys", "expires", "avg_ttl"].iter().enumerate() {
                    kv[i] = v
                        .split(',')
                        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(0);
                }
                let ttl_total = u128::from(kv[2]) * u128::from(kv[1]);
                match fields
                    .iter_mut()
                    .find(|f| matches!(f, InfoField::Db(n, ..) if n == k))
                {
                    Some(InfoField::Db(_, keys, exp, ttl)) => {
                        *keys += kv[0];
                        *exp += kv[1];
                        *ttl += ttl_total;
                    }
                    _ => fields.push(InfoField::Db(k.to_string(), kv[0], kv[1], ttl_total)),
                }
            } else if v.contains('=')
                && let Some(stats) = stat_fields(v)
            {
                match fields
                    .iter_mut()
                    .find(|f| matches!(f, InfoField::Stats(name, _) if name == k))
                {
                    Some(InfoField::Stats(_, have))
                        if have.len() == stats.len()
                            && have.iter().zip(&stats).all(|(a, b)| a.0 == b.0) =>
                    {
                        merge_stats(have, &stats)
                    }
                    Some(_) => {}
                    None => fields.push(InfoField::Stats(k.to_string(), stats)),
                }
            } else if INFO_NOT_SUMMED.contains(&k)
                || (persistence && !PERSISTENCE_SUMMED.contains(&k))
            {
                if !fields
                    .iter()
                    .any(|f| matches!(f, InfoField::First(name, _) if name == k))
                {
                    fields.push(InfoField::First(k.to_string(), v.to_string()));
                }
            } else if k.ends_with("_ratio") {
                // A ratio does not add up (mem_fragmentation_ratio is recomputed below).
            } else if let Some((_, decimals)) = v.split_once('.')
                && let Ok(x) = v.parse::<f64>()
                && !v.contains(['e', 'E'])
            {
                match fields
                    .iter_mut()
                    .find(|f| matches!(f, InfoField::Decimal(name, ..) if name == k))
                {
                    Some(InfoField::Decimal(_, sum, d)) => {
                        *sum += x;
                        *d = (*d).max(decimals.len());
                    }
                    _ => fields.push(InfoField::Decimal(k.to_string(), x, decimals.len())),
                }
            } else if let Ok(n) = v.parse::<i128>() {
                match fields
                    .iter_mut()
                    .find(|f| matches!(f, InfoField::Sum(name, _) if name == k))
                {
                    Some(InfoField::Sum(_, sum)) => *sum += n,
                    _ => fields.push(InfoField::Sum(k.to_string(), n)),
                }
            } else if !k.ends_with("_human")
                && !fields
                    .iter()
                    .any(|f| matches!(f, InfoField::First(name, _) if name == k))
            {
                // Words (`role:master`, `maxmemory_policy:…`): the first instance's.
                fields.push(InfoField::First(k.to_string(), v.to_string()));
            }
        }
    }
    // Databases in index order, as Redis lists them, whichever instance named one first.
    for (_, fields) in &mut sections {
        fields.sort_by_key(|f| match f {
            InfoField::Db(name, ..) => name[2..].parse::<usize>().unwrap_or(usize::MAX),
            _ => 0,
        });
    }
    let mut text = String::from_utf8_lossy(header).into_owned();
    if let Some(at) = text.find("connected_clients:") {
        let eol = at + text[at..].find("\r\n").map_or(0, |e| e + 2);
        text.insert_str(eol, &format!("blocked_clients:{blocked}\r\n"));
    }
    if proxy_section {
        text.push_str(&format!("instances_answering:{answered}\r\n\r\n"));
    }
    for (title, fields) in &sections {
        text.push_str(&format!("# {title}\r\n"));
        let sum_of = |name: &str| {
            fields.iter().find_map(|f| match f {
                InfoField::Sum(n, v) if n == name => Some(*v),
                _ => None,
            })
        };
        for f in fields {
            match f {
                InfoField::Sum(name, v) => {
                    text.push_str(&format!("{name}:{v}\r\n"));
                    let human = format!("{name}_human");
                    if title == "Memory" && name.starts_with("used_memory") {
                        text.push_str(&format!("{human}:{}\r\n", bytes_human(*v)));
                    }
                }
                InfoField::Decimal(name, sum, decimals) => {
                    text.push_str(&format!("{name}:{sum:.decimals$}\r\n"));
                }
                InfoField::First(name, v) => text.push_str(&format!("{name}:{v}\r\n")),
                InfoField::Stats(name, stats) => {
                    let subfields: Vec<String> = stats
                        .iter()
                        .map(|(k, v)| match v {
                            StatValue::Int(n) => format!("{k}={n}"),
                            // Redis prints these with `%.2f` (usec_per_call) or `%f`-like
                            // decimals (percentiles, `%.3f`).
                            StatValue::Decimal(x) if k == "usec_per_call" => format!("{k}={x:.2}"),
                            StatValue::Decimal(x) => format!("{k}={x:.3}"),
                        })
                        .collect();
                    text.push_str(&format!("{name}:{}\r\n", subfields.join(",")));
                }
                InfoField::Db(name, keys, exp, ttl) => {
                    if *keys > 0 {
                        let avg = if *exp > 0 { ttl / u128::from(*exp) } else { 0 };
                        text.push_str(&format!(
                            "{name}:keys={keys},expires={exp},avg_ttl={avg}\r\n"
                        ));
                    }
                }
            }
        }
        if title == "Memory"
            && let (Some(rss), Some(used)) = (sum_of("used_memory_rss"), sum_of("used_memory"))
            && used > 0
        {
            text.push_str(&format!(
                "mem_fragmentation_ratio:{:.2}\r\n",
                rss as f64 / used as f64
            ));
        }
        text.push_str("\r\n");
    }
    while text.ends_with("\r\n\r\n") {
        text.truncate(text.len() - 2);
    }
    // RESP2: a bulk string; RESP3: a verbatim string.
    resp::ReplyWriter::new(out, proto).verbatim(text.as_bytes());
}

/// Redis's `bytesToHuman`: B, K, M, G, T with two decimals.
fn bytes_human(n: i128) -> String {
    let d = n as f64;
    const UNITS: [(f64, &str); 4] = [
        (1024.0 * 1024.0 * 1024.0 * 1024.0, "T"),
        (1024.0 * 1024.0 * 1024.0, "G"),
        (1024.0 * 1024.0, "M"),
        (1024.0, "K"),
    ];
    for (size, unit) in UNITS {
        if d >= size {
            return format!("{:.2}{unit}", d / size);
        }
    }
    format!("{n}B")
}

/// SCAN cursor encoding: `proxy cursor = backend cursor × N + instance` (N = number of
/// instances). Cursor 0 starts instance 0; when instance `i` returns backend cursor 0 the
/// proxy returns `i + 1` (instance `i + 1`, backend cursor 0), and after the last instance 0.
/// Returns `(instance, backend cursor)`.
pub fn scan_cursor_decode(cursor: u64, instances: usize) -> (usize, u64) {
    let n = instances.max(1) as u64;
    ((cursor % n) as usize, cursor / n)
}

/// The proxy cursor to return after `instance` answered `backend_next`; `None` if
/// `backend_next × N + instance` does not fit in 64 bits (the client is told so rather than
/// given a cursor that would land on the wrong instance).
pub fn scan_cursor_encode(backend_next: u64, instance: usize, instances: usize) -> Option<u64> {
    if backend_next == 0 {
        return Some(if instance + 1 < instances {
            instance as u64 + 1
        } else {
            0
        });
    }
    backend_next
        .checked_mul(instances as u64)?
        .checked_add(instance as u64)
}

// ----- RESP helpers: building requests, reading replies -----

/// `*n\r\n`
pub fn push_array_header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$len\r\nbytes\r\n`
pub fn push_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// The header line of a frame (`*3`, `:12`) without `\r\n`, and the offset after it.
fn header_line(frame: &[u8]) -> Option<(&[u8], usize)> {
    let cr = frame.iter().position(|&b| b == b'\r')?;
    Some((&frame[..cr], cr + 2))
}

/// `:n` → n.
pub(crate) fn integer(frame: &[u8]) -> Option<i64> {
    match resp::decode(frame) {
        Ok(Some((Value::Integer(n), _))) => Some(n),
        _ => None,
    }
}

/// `$len\r\nbytes\r\n` (or RESP3 verbatim, its text) → Some(Some(bytes)); `$-1` →
/// Some(None); anything else → None.
fn bulk(frame: &[u8]) -> Option<Option<Vec<u8>>> {
    if frame.starts_with(b"$-1\r\n") {
        return Some(None);
    }
    match resp::decode(frame) {
        Ok(Some((Value::Bulk(b), _))) => Some(Some(b)),
        Ok(Some((Value::Verbatim { text, .. }, _))) => Some(Some(text)),
        _ => None,
    }
}

/// The element frames of an array (`*n` or RESP3 set `~n`); `*-1` gives no elements.
pub(crate) fn array_elems(frame: &[u8]) -> Option<Vec<&[u8]>> {
    aggregate_elems(frame, false)
}

/// [`array_elems`], and with `maps` a RESP3 map's keys and values, in turn.
pub(crate) fn aggregate_elems(frame: &[u8], maps: bool) -> Option<Vec<&[u8]>> {
    let (line, mut at) = header_line(frame)?;
    let n = match line.first() {
        Some(b'*' | b'~') => resp::parse_i64(&line[1..])?,
        Some(b'%') if maps => resp::parse_i64(&line[1..])?.checked_mul(2)?,
        _ => return None,
    };
    let mut elems = Vec::with_capacity(n.clamp(0, 1024) as usize);
    for _ in 0..n.max(0) {
        let len = frame_len(&frame[at..]).ok()??;
        elems.push(&frame[at..at + len]);
        at += len;
    }
    Some(elems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        resp::encode_request(&mut out, args);
        out
    }

    /// Instance = the key's first byte minus '0' (k0 → 0 is not used; keys are "0a", "1b").
    fn by_first_digit(key: &[u8]) -> usize {
        (key[0] - b'0') as usize
    }

    #[test]
    fn split_mget_groups_by_instance_in_first_appearance_order() {
        let args: &[&[u8]] = &[b"MGET", b"1a", b"0b", b"1c", b"1d", b"0e"];
        let s = split(args, 1, by_first_digit);
        assert_eq!(
            s.parts,
            vec![
                Part {
                    instance: 1,
                    request: req(&[b"MGET", b"1a", b"1c", b"1d"])
                },
                Part {
                    instance: 0,
                    request: req(&[b"MGET", b"0b", b"0e"])
                },
            ]
        );
        assert_eq!(s.seq, vec![(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]);
    }

    #[test]
    fn split_mset_keeps_values_with_keys() {
        let args: &[&[u8]] = &[b"mset", b"0a", b"va", b"1b", b"vb", b"0c", b"vc"];
        let s = split(args, 2, by_first_digit);
        assert_eq!(s.parts.len(), 2);
        assert_eq!(
            s.parts[0].request,
            req(&[b"mset", b"0a", b"va", b"0c", b"vc"])
        );
        assert_eq!(s.parts[1].request, req(&[b"mset", b"1b", b"vb"]));
        assert_eq!(s.seq, vec![(0, 0), (1, 0), (0, 1)]);
    }

    #[test]
    fn split_one_instance_is_one_part() {
        let args: &[&[u8]] = &[b"DEL", b"0a", b"0b"];
        let s = split(args, 1, by_first_digit);
        assert_eq!(s.parts.len(), 1);
        assert_eq!(s.parts[0].request, req(args));
    }

    /// A part of keys in three slots, refused by its engine, becomes one request per slot
    /// (slots in order of first appearance, keys in the part's order), and the slots'
    /// replies merge into the part's reply in its key order.
    #[test]
    fn per_slot_splits_a_refused_mget_and_merges_in_key_order() {
        use engine_core::slot::key_slot;
        let request = req(&[b"MGET", b"{a}1", b"{b}1", b"{a}2", b"{c}1", b"{b}2"]);
        let (parts, merge) = per_slot(&request).expect("three slots");
        assert_eq!(
            parts,
            vec![
                SlotPart {
                    slot: key_slot(b"a"),
                    request: req(&[b"MGET", b"{a}1", b"{a}2"]),
                },
                SlotPart {
                    slot: key_slot(b"b"),
                    request: req(&[b"MGET", b"{b}1", b"{b}2"]),
                },
                SlotPart {
                    slot: key_slot(b"c"),
                    request: req(&[b"MGET", b"{c}1"]),
                },
            ]
        );
        assert_eq!(
            merge,
            Merge::Values(vec![(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)])
        );
        let replies: [&[u8]; 3] = [
            b"*2\r\n$2\r\nA1\r\n$-1\r\n",
            b"*2\r\n$2\r\nB1\r\n$2\r\nB2\r\n",
            b"*1\r\n$2\r\nC1\r\n",
        ];
        let mut out = Vec::new();
        super::merge(&merge, &replies, &mut out);
        assert_eq!(
            out,
            b"*5\r\n$2\r\nA1\r\n$2\r\nB1\r\n$-1\r\n$2\r\nC1\r\n$2\r\nB2\r\n".to_vec()
        );
        // RESP3 nulls are elements like any other.
        let replies: [&[u8]; 3] = [b"*2\r\n_\r\n_\r\n", b"*2\r\n_\r\n_\r\n", b"*1\r\n_\r\n"];
        out.clear();
        super::merge(&merge, &replies, &mut out);
        assert_eq!(out, b"*5\r\n_\r\n_\r\n_\r\n_\r\n_\r\n".to_vec());
        // A slot whose request failed for good: its error is the part's reply.
        let replies: [&[u8]; 3] = [
            b"*2\r\n$2\r\nA1\r\n$-1\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"*1\r\n$2\r\nC1\r\n",
        ];
        out.clear();
        super::merge(&merge, &replies, &mut out);
        assert!(out.starts_with(b"-TRYAGAIN"));
    }

    #[test]
    fn per_slot_keeps_mset_values_with_their_keys_and_sums_counts() {
        let request = req(&[b"mset", b"{a}1", b"x", b"{b}1", b"y", b"{a}2", b"z"]);
        let (parts, merge) = per_slot(&request).expect("two slots");
        assert_eq!(merge, Merge::AllOk);
        let requests: Vec<&[u8]> = parts.iter().map(|p| p.request.as_slice()).collect();
        assert_eq!(
            requests,
            [
                req(&[b"mset", b"{a}1", b"x", b"{a}2", b"z"]).as_slice(),
                req(&[b"mset", b"{b}1", b"y"]).as_slice(),
            ]
        );
        let mut out = Vec::new();
        super::merge(&merge, &[b"+OK\r\n", b"+OK\r\n"], &mut out);
        assert_eq!(out, b"+OK\r\n");
        for name in [&b"DEL"[..], b"unlink", b"Exists", b"TOUCH"] {
            // A key named twice stays in its slot's request (EXISTS counts it twice, DEL once,
            // as the engine does with the whole part).
            let request = req(&[name, b"{a}1", b"{b}1", b"{a}1"]);
            let (parts, merge) = per_slot(&request).expect("two slots");
            assert_eq!(merge, Merge::Sum);
            assert_eq!(parts[0].request, req(&[name, b"{a}1", b"{a}1"]));
            assert_eq!(parts[1].request, req(&[name, b"{b}1"]));
            let mut out = Vec::new();
            super::merge(&merge, &[b":2\r\n", b":1\r\n"], &mut out);
            assert_eq!(out, b":3\r\n");
        }
    }

    #[test]
    fn per_slot_leaves_one_slot_and_other_requests_alone() {
        // One slot: not cut (its -TRYAGAIN is retried as for any request).
        assert_eq!(per_slot(&req(&[b"MGET", b"{a}1", b"{a}2"])), None);
        assert_eq!(per_slot(&req(&[b"DEL", b"k"])), None);
        // Not a key-list command, or malformed.
        assert_eq!(per_slot(&req(&[b"SUNION", b"{a}1", b"{b}1"])), None);
        assert_eq!(per_slot(&req(&[b"MSET", b"{a}1", b"x", b"{b}1"])), None);
        assert_eq!(per_slot(&req(&[b"MGET"])), None);
        assert_eq!(per_slot(b"*2\r\n$4\r\nMGET\r\n:1\r\n"), None);
        assert_eq!(per_slot(b"garbage"), None);
        assert_eq!(per_slot(b""), None);
    }

    #[test]
    fn merge_values_restores_key_order_with_nils() {
        let args: &[&[u8]] = &[b"MGET", b"1a", b"0b", b"1c", b"1d", b"0e"];
        let s = split(args, 1, by_first_digit);
        let r0: &[u8] = b"*3\r\n$2\r\nva\r\n$-1\r\n$2\r\nvd\r\n";
        let r1: &[u8] = b"*2\r\n$2\r\nvb\r\n$4\r\nv\r\ne\r\n";
        let mut out = Vec::new();
        merge(&Merge::Values(s.seq), &[r0, r1], &mut out);
        assert_eq!(
            out,
            b"*5\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n$2\r\nvd\r\n$4\r\nv\r\ne\r\n".to_vec()
        );
    }

    #[test]
    fn numsub_pairs_merge_in_the_caller_s_order() {
        // PUBSUB NUMSUB 1a 0b 1c: part 0 (instance 1) answered a and c, part 1 answered b.
        let seq = vec![(0, 0), (1, 0), (0, 1)];
        let r0: &[u8] = b"*4\r\n$2\r\n1a\r\n:2\r\n$2\r\n1c\r\n:0\r\n";
        let r1: &[u8] = b"*2\r\n$2\r\n0b\r\n:1\r\n";
        let mut out = Vec::new();
        merge(&Merge::ValuePairs(seq.clone()), &[r0, r1], &mut out);
        assert_eq!(
            out,
            b"*6\r\n$2\r\n1a\r\n:2\r\n$2\r\n0b\r\n:1\r\n$2\r\n1c\r\n:0\r\n".to_vec()
        );
        // A short part is not merged.
        assert!(!merge_value_pairs(&seq, &[r1, r1], &mut Vec::new()));
    }

    #[test]
    fn stream_reads_split_by_instance_and_merge_in_key_order() {
        let args: &[&[u8]] = &[
            b"XREAD", b"COUNT", b"2", b"STREAMS", b"1a", b"0b", b"1c", b"0d", b"0", b"5", b"$",
            b"7",
        ];
        let s = split_stream_read(args, 4, 4, by_first_digit);
        assert_eq!(
            s.parts,
            [
                Part {
                    instance: 1,
                    request: req(&[
                        b"XREAD", b"COUNT", b"2", b"STREAMS", b"1a", b"1c", b"0", b"$"
                    ]),
                },
                Part {
                    instance: 0,
                    request: req(&[
                        b"XREAD", b"COUNT", b"2", b"STREAMS", b"0b", b"0d", b"5", b"7"
                    ]),
                },
            ]
        );
        let keys: Vec<Vec<u8>> = [b"1a", b"0b", b"1c", b"0d"]
            .iter()
            .map(|k| k.to_vec())
            .collect();
        let e = |id: &str| {
            format!(
                "*1\r\n*2\r\n${}\r\n{id}\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
                id.len()
            )
        };
        // Part 0 served 1c only; part 1 served 0b and 0d.
        let r0 = format!("*1\r\n*2\r\n$2\r\n1c\r\n{}", e("3-0"));
        let r1 = format!(
            "*2\r\n*2\r\n$2\r\n0b\r\n{}*2\r\n$2\r\n0d\r\n{}",
            e("6-0"),
            e("8-0")
        );
        let mut out = Vec::new();
        let m = Merge::StreamRead {
            seq: s.seq.clone(),
            keys: keys.clone(),
            proto: resp::Proto::Resp2,
        };
        merge(&m, &[r0.as_bytes(), r1.as_bytes()], &mut out);
        let want = format!(
            "*3\r\n*2\r\n$2\r\n0b\r\n{}*2\r\n$2\r\n1c\r\n{}*2\r\n$2\r\n0d\r\n{}",
            e("6-0"),
            e("3-0"),
            e("8-0")
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
        // Nothing served anywhere: a null in the client's protocol.
        for (proto, null, nulls) in [
            (resp::Proto::Resp2, "*-1\r\n", ["*-1\r\n", "*-1\r\n"]),
            (resp::Proto::Resp3, "_\r\n", ["_\r\n", "_\r\n"]),
        ] {
            let mut out = Vec::new();
            let m = Merge::StreamRead {
                seq: s.seq.clone(),
                keys: keys.clone(),
                proto,
            };
            merge(&m, &[nulls[0].as_bytes(), nulls[1].as_bytes()], &mut out);
            assert_eq!(out, null.as_bytes());
        }
        // RESP3 maps.
        let r0 = format!("%1\r\n$2\r\n1a\r\n{}", e("1-0"));
        let r1 = format!("%1\r\n$2\r\n0d\r\n{}", e("9-0"));
        let mut out = Vec::new();
        let m = Merge::StreamRead {
            seq: s.seq,
            keys,
            proto: resp::Proto::Resp3,
        };
        merge(&m, &[r0.as_bytes(), r1.as_bytes()], &mut out);
        let want = format!("%2\r\n$2\r\n1a\r\n{}$2\r\n0d\r\n{}", e("1-0"), e("9-0"));
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn merge_any_error_wins() {
        let mut out = Vec::new();
        merge(
            &Merge::Values(vec![(0, 0), (1, 0)]),
            &[b"*1\r\n$1\r\na\r\n", b"-ERR instance 1 is unavailable\r\n"],
            &mut out,
        );
        assert_eq!(out, b"-ERR instance 1 is unavailable\r\n");
        out.clear();
        merge(&Merge::Sum, &[b":1\r\n", b"-WRONGTYPE x\r\n"], &mut out);
        assert_eq!(out, b"-WRONGTYPE x\r\n");
    }

    #[test]
    fn merge_sum_ok_concat() {
        let mut out = Vec::new();
        merge(&Merge::Sum, &[b":2\r\n", b":0\r\n", b":5\r\n"], &mut out);
        assert_eq!(out, b":7\r\n");
        out.clear();
        merge(&Merge::AllOk, &[b"+OK\r\n", b"+OK\r\n"], &mut out);
        assert_eq!(out, b"+OK\r\n");
        out.clear();
        merge(&Merge::AllOk, &[b"+OK\r\n", b":1\r\n"], &mut out);
        assert_eq!(out, UNEXPECTED_REPLY);
        out.clear();
        merge(
            &Merge::Concat,
            &[
                b"*1\r\n$1\r\na\r\n",
                b"*0\r\n",
                b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
            ],
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
        out.clear();
        merge(&Merge::Sum, &[b"+OK\r\n"], &mut out);
        assert_eq!(out, UNEXPECTED_REPLY);
    }

    #[test]
    fn merge_any_non_nil() {
        let mut out = Vec::new();
        let replies: &[&[u8]] = &[b"$1\r\na\r\n", b"$-1\r\n", b"$1\r\nc\r\n"];
        merge(&Merge::AnyNonNil { start: 1 }, replies, &mut out);
        assert_eq!(out, b"$1\r\nc\r\n");
        out.clear();
        merge(
            &Merge::AnyNonNil { start: 0 },
            &[b"-ERR down\r\n", b"$-1\r\n"],
            &mut out,
        );
        assert_eq!(out, b"$-1\r\n");
        out.clear();
        merge(
            &Merge::AnyNonNil { start: 0 },
            &[b"-ERR down\r\n"],
            &mut out,
        );
        assert_eq!(out, b"-ERR down\r\n");
    }

    #[test]
    fn scan_cursor_round_trip_and_instance_walk() {
        // Instance 1 of 3, backend cursor 7 → 7*3+1 = 22.
        assert_eq!(scan_cursor_encode(7, 1, 3), Some(22));
        assert_eq!(scan_cursor_decode(22, 3), (1, 7));
        assert_eq!(scan_cursor_decode(0, 3), (0, 0));
        // Backend done: next instance starts at backend cursor 0, the last one ends the scan.
        assert_eq!(scan_cursor_encode(0, 0, 3), Some(1));
        assert_eq!(scan_cursor_decode(1, 3), (1, 0));
        assert_eq!(scan_cursor_encode(0, 2, 3), Some(0));
        assert_eq!(scan_cursor_encode(u64::MAX / 2, 1, 3), None);
        assert_eq!(scan_cursor_encode(5, 0, 1), Some(5));
    }

    #[test]
    fn config_get_answers_the_proxys_port() {
        let merge = Merge::ConfigGet { port: 6380 };
        let mut out = Vec::new();
        let resp2: &[u8] = b"*4\r\n$4\r\nport\r\n$5\r\n17410\r\n$2\r\nhz\r\n$2\r\n10\r\n";
        super::merge(&merge, &[resp2], &mut out);
        assert_eq!(
            out,
            b"*4\r\n$4\r\nport\r\n$4\r\n6380\r\n$2\r\nhz\r\n$2\r\n10\r\n"
        );
        out.clear();
        let resp3: &[u8] = b"%1\r\n$4\r\nport\r\n$5\r\n17410\r\n";
        super::merge(&merge, &[resp3], &mut out);
        assert_eq!(out, b"%1\r\n$4\r\nport\r\n$4\r\n6380\r\n");
        out.clear();
        let none: &[u8] = b"*0\r\n";
        super::merge(&merge, &[none], &mut out);
        assert_eq!(out, none);
    }

    #[test]
    fn merge_scan_rewrites_cursor() {
        let mut out = Vec::new();
        let reply: &[u8] = b"*2\r\n$2\r\n12\r\n*1\r\n$1\r\nk\r\n";
        merge(
            &Merge::Scan {
                instance: 1,
                instances: 2,
            },
            &[reply],
            &mut out,
        );
        assert_eq!(out, b"*2\r\n$2\r\n25\r\n*1\r\n$1\r\nk\r\n");
        out.clear();
        let done: &[u8] = b"*2\r\n$1\r\n0\r\n*0\r\n";
        merge(
            &Merge::Scan {
                instance: 0,
                instances: 2,
            },
            &[done],
            &mut out,
        );
        assert_eq!(out, b"*2\r\n$1\r\n1\r\n*0\r\n");
    }

    #[test]
    fn resp3_nulls_and_verbatim_info() {
        let mut out = Vec::new();
        merge(
            &Merge::AnyNonNil { start: 0 },
            &[b"_\r\n", b"_\r\n"],
            &mut out,
        );
        assert_eq!(out, b"_\r\n");
        out.clear();
        let verbatim: &[u8] = b"=18\r\ntxt:# Stats\r\nx:1\r\n\r\n";
        merge(
            &Merge::Info {
                header: Vec::new(),
                proxy_section: false,
                proto: resp::Proto::Resp3,
            },
            &[verbatim, verbatim],
            &mut out,
        );
        assert_eq!(out, b"=18\r\ntxt:# Stats\r\nx:2\r\n\r\n");
    }

    #[test]
    fn merge_info_lists_databases_in_index_order() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        push_bulk(&mut a, b"# Keyspace\r\ndb10:keys=1,expires=0,avg_ttl=0\r\n");
        push_bulk(&mut b, b"# Keyspace\r\ndb2:keys=2,expires=0,avg_ttl=0\r\n");
        let mut out = Vec::new();
        merge_info(b"", false, resp::Proto::Resp2, &[&a, &b], &mut out);
        let text = String::from_utf8_lossy(&out);
        let (d2, d10) = (
            text.find("db2:keys=2").unwrap(),
            text.find("db10:keys=1").unwrap(),
        );
        assert!(d2 < d10, "{text}");
    }

    /// commandstats/errorstats/latencystats lines are summed per subfield (usec_per_call
    /// recomputed, percentiles the largest): the Tcl units read `errorstat_NOGROUP:count=1`
    /// and `cmdstat_xreadgroup:calls=1,…,failed_calls=1` through the proxy.
    #[test]
    fn merge_info_sums_stats_lines() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        push_bulk(
            &mut a,
            b"# CPU\r\nused_cpu_sys:0.250000\r\n\r\n# Replication\r\nrole:master\r\nsecond_repl_offset:-1\r\n\r\n\
              # Commandstats\r\ncmdstat_get:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\r\n\
              # Errorstats\r\nerrorstat_NOGROUP:count=1\r\n\r\n\
              # Latencystats\r\nlatency_percentiles_usec_get:p50=1.003,p99=4.015,p99.9=4.015\r\n",
        );
        push_bulk(
            &mut b,
            b"# CPU\r\nused_cpu_sys:1.250000\r\n\r\n# Replication\r\nsecond_repl_offset:-1\r\n\r\n\
              # Commandstats\r\ncmdstat_get:calls=2,usec=30,usec_per_call=15.00,rejected_calls=1,failed_calls=0\r\n\r\n\
              # Errorstats\r\nerrorstat_ERR:count=2\r\n\r\n\
              # Latencystats\r\nlatency_percentiles_usec_get:p50=2.007,p99=3.007,p99.9=3.007\r\n",
        );
        let mut out = Vec::new();
        merge_info(b"", false, resp::Proto::Resp2, &[&a, &b], &mut out);
        let text = String::from_utf8_lossy(&out);
        for line in [
            "used_cpu_sys:1.500000\r\n",
            "second_repl_offset:-1\r\n",
            "role:master\r\n",
            "cmdstat_get:calls=4,usec=40,usec_per_call=10.00,rejected_calls=1,failed_calls=0\r\n",
            "errorstat_NOGROUP:count=1\r\n",
            "errorstat_ERR:count=2\r\n",
            "latency_percentiles_usec_get:p50=2.007,p99=4.015,p99.9=4.015\r\n",
        ] {
            assert!(text.contains(line), "{line:?} in {text}");
        }
    }

    #[test]
    fn merge_info_adds_keyspace() {
        let mut out = Vec::new();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        push_bulk(
            &mut a,
            b"# Server\r\nredis_version:7.0.15\r\n\r\n# Memory\r\nused_memory:1048576\r\n\
              used_memory_human:1.00M\r\nused_memory_rss:4194304\r\nmaxmemory_policy:noeviction\r\n\r\n\
              # Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=100\r\n",
        );
        push_bulk(
            &mut b,
            b"# Memory\r\nused_memory:1048576\r\nused_memory_rss:4194304\r\n\r\n\
              # Keyspace\r\ndb0:keys=4,expires=3,avg_ttl=500\r\n",
        );
        merge(
            &Merge::Info {
                header: b"# Proxy\r\n".to_vec(),
                proxy_section: true,
                proto: resp::Proto::Resp2,
            },
            &[&a, &b, b"-ERR instance 2 down\r\n"],
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("instances_answering:2\r\n"), "{text}");
        // avg_ttl is the mean over all 4 volatile keys: (100*1 + 500*3) / 4.
        assert!(
            text.contains("db0:keys=7,expires=4,avg_ttl=400\r\n"),
            "{text}"
        );
        assert!(text.contains("used_memory:2097152\r\nused_memory_human:2.00M\r\n"));
        assert!(text.contains("mem_fragmentation_ratio:4.00\r\n"), "{text}");
        // The instances' Server section is not merged (the proxy's own comes first); words
        // are the first instance's (`role:master` is read by clients).
        assert!(!text.contains("redis_version"), "{text}");
        assert!(text.contains("maxmemory_policy:noeviction\r\n"), "{text}");
        assert!(text.starts_with("$"));
    }
}
