//! What one memcached request does: [`plan`] turns a [`Request`] into RESP requests for the
//! engines that own its keys (a [`Job`]), and [`render`] turns their replies into memcached's
//! reply bytes. Pure: the clock and the CAS counter come in through [`Ctx`].
//!
//! # Mapping (docs/memcached.md)
//!
//! | memcached | engine request (instance of the key's slot) |
//! |---|---|
//! | `set add replace append prepend cas` | `EVALSHA <store> 2 key meta mode value flags exp cas new_cas` |
//! | `get gets k…` | `MGET k1 meta1 k2 meta2 …` per instance, merged in key order |
//! | `gat gats exp k…` | `EVALSHA <gat> 2N k1 meta1 … exp` per instance |
//! | `touch` / `delete` / `incr decr` | `EVALSHA <touch|delete|arith> 2 key meta …` |
//! | `flush_all [delay]` | `FLUSHDB` on every instance (now, or when the delay is over) |
//! | `stats` | `INFO` on every instance, summed, plus the port's own counters |
//!
//! The item is the Redis string `key` (exactly the value bytes, so `GET key` over RESP reads
//! it and the keychange feed sees a `SET`); its client flags and CAS unique live in the
//! companion string [`meta_key`] (`"<flags> <cas>"`), in the same slot and with the same
//! expiry. CAS uniques come from a counter in the proxy, seeded from the clock at start so
//! they keep growing across restarts.

use std::sync::OnceLock;

use super::parse::{Arith, CasOut, Request, StoreMode};
use super::scripts::Shas;
use super::stats::Counters;
use crate::slots::{SlotMap, Slots};

/// Relative expiry times up to this many seconds; larger ones are Unix times (memcached's
/// `REALTIME_MAXDELTA`, 30 days).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The version `version` and `stats` report: the memcached release whose protocol this port
/// follows (clients gate features such as the meta protocol on it).
pub const VERSION: &str = "1.6.18";

/// One engine request of a job.
#[derive(Debug)]
pub struct Part {
    pub instance: usize,
    pub request: Vec<u8>,
}

/// How the parts' replies become the memcached reply.
#[derive(Debug)]
pub enum Render {
    /// Known already (errors, `version`, …); the parts' replies (if any) are not read.
    Ready(Vec<u8>),
    /// A store script's status word.
    Store(StoreMode),
    /// A plain `set`: `STORED` unless a part failed.
    Stored,
    /// Retrieval: for key i, `at[i]` = (part, pair index in that part's array).
    Get {
        keys: Vec<Vec<u8>>,
        at: Vec<(usize, usize)>,
        cas: CasOut,
    },
    Touch,
    Delete,
    Arith(Arith),
    /// Every part answers OK → `OK`.
    Flush,
    /// `INFO` of every instance → `STAT` lines.
    Stats,
    /// A meta command's reply (`super::meta`).
    Meta(super::meta::MetaRender),
}

/// A planned request.
#[derive(Debug)]
pub struct Job {
    pub parts: Vec<Part>,
    pub render: Render,
    pub noreply: bool,
    /// `quit`, or input memcached closes on: close once the replies before it are out.
    pub close: bool,
}

impl Job {
    pub(super) fn local(reply: &[u8], noreply: bool) -> Job {
        Job {
            parts: Vec::new(),
            render: Render::Ready(reply.to_vec()),
            noreply,
            close: false,
        }
    }
}

/// What [`plan`] needs besides the request.
pub struct Ctx<'a> {
    /// The port's slot table (`super::event_loop`'s, following slot moves): keys route by
    /// it, and fan-outs (`stats`, `flush_all`) go to the instances that own slots.
    pub slots: &'a Slots,
    /// Unix time, ms.
    pub now_ms: u64,
    /// The next CAS unique.
    pub next_cas: &'a mut u64,
    pub shas: &'a Shas,
    pub counters: &'a mut Counters,
    /// `flush_all <delay>` with a positive delay sets this (Unix ms); the loop flushes then.
    pub flush_at: &'a mut Option<u64>,
}

/// A short string whose CRC16 slot is `slot`, for every slot: the decimal numbers from 0 on,
/// each kept for the first slot it hashes to (about 170,000 are tried, once per process).
fn slot_tags() -> &'static [Box<[u8]>] {
    static TAGS: OnceLock<Vec<Box<[u8]>>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags: Vec<Option<Box<[u8]>>> = vec![None; 16384];
        let mut left = tags.len();
        let mut i: u64 = 0;
        while left > 0 {
            let s = itoa::Buffer::new().format(i).as_bytes().to_vec();
            let slot = engine_core::slot::key_slot(&s) as usize;
            if tags[slot].is_none() {
                tags[slot] = Some(s.into_boxed_slice());
                left -= 1;
            }
            i += 1;
        }
        tags.into_iter().map(|t| t.expect("every slot")).collect()
    })
}

/// The companion key of item `key`: `__mc:{<tag>}:<key>`, where `<tag>` hashes to `key`'s
/// slot, so both live on the same engine (and move together) whatever `key` contains.
pub fn meta_key(key: &[u8]) -> Vec<u8> {
    let tag = &slot_tags()[engine_core::slot::key_slot(key) as usize];
    let mut m = Vec::with_capacity(key.len() + tag.len() + 8);
    m.extend_from_slice(b"__mc:{");
    m.extend_from_slice(tag);
    m.extend_from_slice(b"}:");
    m.extend_from_slice(key);
    m
}

/// memcached's exptime as the scripts' expiry argument: `0` none, `-1` expired, else the
/// absolute Unix time in ms (relative up to 30 days, else a Unix time in seconds; a negative
/// one or a Unix time already past means expired at once).
pub fn expiry(exptime: i64, now_ms: u64) -> Vec<u8> {
    let at = match exptime {
        0 => return b"0".to_vec(),
        e if e < 0 => return b"-1".to_vec(),
        e if e <= REALTIME_MAXDELTA => now_ms + e as u64 * 1000,
        e => {
            let at = e as u64 * 1000;
            if at <= now_ms {
                return b"-1".to_vec();
            }
            at
        }
    };
    itoa::Buffer::new().format(at).as_bytes().to_vec()
}

pub(super) fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::request::encode_request(&mut out, args);
    out
}

pub(super) fn take_cas(next: &mut u64) -> Vec<u8> {
    let c = *next;
    *next += 1;
    itoa::Buffer::new().format(c).as_bytes().to_vec()
}

/// Plans `req`.
pub fn plan(req: Request, ctx: &mut Ctx<'_>) -> Job {
    let slots = ctx.slots;
    match req {
        Request::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            cas,
            noreply,
        } => {
            ctx.counters.cmd_set += 1;
            let meta = meta_key(&key);
            let newcas = take_cas(ctx.next_cas);
            let exp = expiry(exptime, ctx.now_ms);
            let flags = itoa::Buffer::new().format(flags).as_bytes().to_vec();
            if mode == StoreMode::Set {
                let instance = slots.of(&key);
                return plain_set(
                    &key, &meta, &value, &flags, &exp, &newcas, instance, noreply,
                );
            }
            let cas_in = if mode == StoreMode::Cas {
                itoa::Buffer::new().format(cas).as_bytes().to_vec()
            } else {
                Vec::new()
            };
            let sha = ctx.shas.store.as_bytes();
            let request = request(&[
                b"EVALSHA",
                sha,
                b"2",
                &key,
                &meta,
                mode.word(),
                &value,
                &flags,
                &exp,
                &cas_in,
                &newcas,
                b"",
            ]);
            Job {
                parts: vec![Part {
                    instance: slots.of(&key),
                    request,
                }],
                render: Render::Store(mode),
                noreply,
                close: false,
            }
        }
        Request::Get { keys, cas, touch } => {
            // One request per instance, its keys in the caller's order.
            let mut parts: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
            let mut at = Vec::with_capacity(keys.len());
            for key in &keys {
                let i = slots.of(key);
                let p = match parts.iter().position(|(inst, _)| *inst == i) {
                    Some(p) => p,
                    None => {
                        parts.push((i, Vec::new()));
                        parts.len() - 1
                    }
                };
                at.push((p, parts[p].1.len() / 2));
                parts[p].1.push(key.clone());
                parts[p].1.push(meta_key(key));
            }
            if touch.is_some() {
                ctx.counters.cmd_touch += keys.len() as u64;
            }
            let exp = touch.map(|e| expiry(e, ctx.now_ms));
            let parts = parts
                .into_iter()
                .map(|(instance, args)| {
                    let mut out = Vec::new();
                    match &exp {
                        None => {
                            let mut all: Vec<&[u8]> = vec![b"MGET"];
                            all.extend(args.iter().map(Vec::as_slice));
                            resp::request::encode_request(&mut out, &all);
                        }
                        Some(exp) => {
                            let nkeys = itoa::Buffer::new().format(args.len()).to_owned();
                            let mut all: Vec<&[u8]> =
                                vec![b"EVALSHA", ctx.shas.gat.as_bytes(), nkeys.as_bytes()];
                            all.extend(args.iter().map(Vec::as_slice));
                            all.push(exp);
                            resp::request::encode_request(&mut out, &all);
                        }
                    }
                    Part {
                        instance,
                        request: out,
                    }
                })
                .collect();
            Job {
                parts,
                render: Render::Get { keys, at, cas },
                noreply: false,
                close: false,
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            ctx.counters.cmd_touch += 1;
            let exp = expiry(exptime, ctx.now_ms);
            let req = request(&[
                b"EVALSHA",
                ctx.shas.touch.as_bytes(),
                b"2",
                &key,
                &meta_key(&key),
                &exp,
            ]);
            single(slots.of(&key), req, Render::Touch, noreply)
        }
        Request::Delete { key, noreply } => {
            let req = delete_request(ctx.shas, &key);
            single(slots.of(&key), req, Render::Delete, noreply)
        }
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let newcas = take_cas(ctx.next_cas);
            let delta = itoa::Buffer::new().format(delta).as_bytes().to_vec();
            let word: &[u8] = match op {
                Arith::Incr => b"incr",
                Arith::Decr => b"decr",
            };
            let req = request(&[
                b"EVALSHA",
                ctx.shas.arith.as_bytes(),
                b"2",
                &key,
                &meta_key(&key),
                word,
                &delta,
                &newcas,
                b"",
                b"",
                b"",
                b"",
            ]);
            single(slots.of(&key), req, Render::Arith(op), noreply)
        }
        Request::FlushAll { delay, noreply } => {
            ctx.counters.cmd_flush += 1;
            // A positive delay is an expiry time (relative, or a Unix time, which may be past).
            let at = (delay > 0)
                .then(|| expiry(delay, ctx.now_ms))
                .and_then(|exp| std::str::from_utf8(&exp).ok()?.parse::<u64>().ok());
            *ctx.flush_at = at;
            if at.is_some() {
                return Job::local(b"OK\r\n", noreply);
            }
            Job {
                parts: flush_parts(slots),
                render: Render::Flush,
                noreply,
                close: false,
            }
        }
        Request::Version => Job::local(format!("VERSION {VERSION}\r\n").as_bytes(), false),
        Request::Verbosity { noreply } => Job::local(b"OK\r\n", noreply),
        Request::Quit => Job {
            parts: Vec::new(),
            render: Render::Ready(Vec::new()),
            noreply: false,
            close: true,
        },
        Request::Stats { arg } => match arg.as_deref() {
            None => Job {
                parts: serving(slots)
                    .map(|instance| Part {
                        instance,
                        request: request(&[b"INFO", b"all"]),
                    })
                    .collect(),
                render: Render::Stats,
                noreply: false,
                close: false,
            },
            Some(b"reset") => {
                *ctx.counters = Counters {
                    curr_connections: ctx.counters.curr_connections,
                    total_connections: ctx.counters.total_connections,
                    ..Counters::default()
                };
                Job::local(b"RESET\r\n", false)
            }
            Some(_) => Job::local(b"ERROR\r\n", false),
        },
        Request::Meta(m) => super::meta::plan(m, ctx),
        Request::Reject {
            reply,
            delete,
            noreply,
            ..
        } => {
            let mut line = reply.as_bytes().to_vec();
            line.extend_from_slice(b"\r\n");
            let mut job = Job::local(&line, noreply);
            if let Some(key) = delete {
                let req = delete_request(ctx.shas, &key);
                job.parts.push(Part {
                    instance: slots.of(&key),
                    request: req,
                });
            }
            job
        }
    }
}

/// A plain `set`: no script, two commands pipelined on the port's one connection to the
/// engine (the item, then its companion; or one `DEL` of both when already expired). No other
/// memcached request can come between them: every request of the port to that engine is on
/// that connection, in order.
#[allow(clippy::too_many_arguments)]
fn plain_set(
    key: &[u8],
    meta: &[u8],
    value: &[u8],
    flags: &[u8],
    exp: &[u8],
    newcas: &[u8],
    instance: usize,
    noreply: bool,
) -> Job {
    let mut record = flags.to_vec();
    record.push(b' ');
    record.extend_from_slice(newcas);
    let parts = match exp {
        b"-1" => vec![request(&[b"DEL", key, meta])],
        b"0" => vec![
            request(&[b"SET", key, value]),
            request(&[b"SET", meta, &record]),
        ],
        at => vec![
            request(&[b"SET", key, value, b"PXAT", at]),
            request(&[b"SET", meta, &record, b"PXAT", at]),
        ],
    };
    Job {
        parts: parts
            .into_iter()
            .map(|request| Part { instance, request })
            .collect(),
        render: Render::Stored,
        noreply,
        close: false,
    }
}

/// The delete script's request for `key` (no CAS compare, no invalidation).
fn delete_request(shas: &Shas, key: &[u8]) -> Vec<u8> {
    request(&[
        b"EVALSHA",
        shas.delete.as_bytes(),
        b"2",
        key,
        &meta_key(key),
        b"",
        b"",
        b"0",
        b"",
    ])
}

/// The instances that own slots (a retired one, which may be stopped, is left out, as the
/// RESP side's fan-outs do).
fn serving(slots: &Slots) -> impl Iterator<Item = usize> + '_ {
    (0..slots.instances()).filter(|&i| slots.serves(i))
}

/// `FLUSHDB` for every instance that owns slots.
pub fn flush_parts(slots: &Slots) -> Vec<Part> {
    serving(slots)
        .map(|instance| Part {
            instance,
            request: request(&[b"FLUSHDB"]),
        })
        .collect()
}

fn single(instance: usize, request: Vec<u8>, render: Render, noreply: bool) -> Job {
    Job {
        parts: vec![Part { instance, request }],
        render,
        noreply,
        close: false,
    }
}

/// An engine error as memcached's `SERVER_ERROR …` line. The tail Redis adds to an error
/// raised in a script (` script: <sha>, on @user_script:<line>.`) names the port's own
/// scripts, not the client's request: it is cut.
pub(super) fn server_error(msg: &[u8]) -> Vec<u8> {
    if msg.starts_with(b"OOM") {
        return b"SERVER_ERROR out of memory storing object\r\n".to_vec();
    }
    let msg = msg
        .windows(9)
        .position(|w| w == b" script: ")
        .map_or(msg, |i| &msg[..i]);
    let text: Vec<u8> = msg
        .iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect();
    [b"SERVER_ERROR ".as_slice(), &text, b"\r\n"].concat()
}

/// The first error among `replies`, as a memcached line.
fn first_error(replies: &[resp::value::Value]) -> Option<Vec<u8>> {
    replies.iter().find_map(|r| match r {
        resp::value::Value::Error(e) => Some(server_error(e)),
        _ => None,
    })
}

/// `"<flags> <cas>[ <state>]"` → (flags, cas, state); a missing companion is (0, 0, "").
pub(super) fn flags_cas(meta: Option<&resp::value::Value>) -> (&[u8], &[u8], &[u8]) {
    if let Some(resp::value::Value::Bulk(m)) = meta {
        let mut it = m.split(|&b| b == b' ');
        if let (Some(f), Some(c)) = (it.next(), it.next()) {
            return (f, c, it.next().unwrap_or(b""));
        }
    }
    (b"0", b"0", b"")
}

/// The memcached reply to `render` given its parts' raw RESP replies.
pub fn render(render: &Render, raw: &[Vec<u8>], counters: &mut Counters) -> Vec<u8> {
    use resp::value::Value;
    if let Render::Ready(reply) = render {
        return reply.clone();
    }
    let replies: Vec<Value> = raw
        .iter()
        .map(|r| match resp::value::decode(r) {
            Ok(Some((v, _))) => v,
            _ => Value::Error(b"ERR bad reply from the engine".to_vec()),
        })
        .collect();
    if let Some(err) = first_error(&replies) {
        return err;
    }
    let word = |v: &Value| -> Vec<u8> {
        match v {
            Value::Simple(s) | Value::Bulk(s) => s.clone(),
            Value::Integer(i) => itoa::Buffer::new().format(*i).as_bytes().to_vec(),
            _ => Vec::new(),
        }
    };
    let line = |s: &[u8]| [s, b"\r\n"].concat();
    match render {
        Render::Ready(_) => unreachable!("answered above"),
        Render::Stored => b"STORED\r\n".to_vec(),
        Render::Store(mode) => {
            let w = word(&replies[0]);
            if *mode == StoreMode::Cas {
                match w.as_slice() {
                    b"STORED" => counters.cas_hits += 1,
                    b"EXISTS" => counters.cas_badval += 1,
                    b"NOT_FOUND" => counters.cas_misses += 1,
                    _ => {}
                }
            }
            line(&w)
        }
        Render::Get { keys, at, cas } => {
            let mut out = Vec::new();
            for (key, &(p, j)) in keys.iter().zip(at) {
                let Value::Array(items) = &replies[p] else {
                    return server_error(b"ERR unexpected reply from the engine");
                };
                counters.cmd_get += 1;
                match items.get(2 * j) {
                    Some(Value::Bulk(v)) => {
                        counters.get_hits += 1;
                        let (flags, c, _) = flags_cas(items.get(2 * j + 1));
                        out.extend_from_slice(b"VALUE ");
                        out.extend_from_slice(key);
                        out.push(b' ');
                        out.extend_from_slice(flags);
                        out.push(b' ');
                        out.extend_from_slice(itoa::Buffer::new().format(v.len()).as_bytes());
                        if *cas == CasOut::Yes {
                            out.push(b' ');
                            out.extend_from_slice(c);
                        }
                        out.extend_from_slice(b"\r\n");
                        out.extend_from_slice(v);
                        out.extend_from_slice(b"\r\n");
                    }
                    _ => counters.get_misses += 1,
                }
            }
            out.extend_from_slice(b"END\r\n");
            out
        }
        Render::Touch => {
            if replies[0] == Value::Integer(1) {
                counters.touch_hits += 1;
                b"TOUCHED\r\n".to_vec()
            } else {
                counters.touch_misses += 1;
                b"NOT_FOUND\r\n".to_vec()
            }
        }
        Render::Delete => {
            if replies[0] == Value::Integer(1) {
                counters.delete_hits += 1;
                b"DELETED\r\n".to_vec()
            } else {
                counters.delete_misses += 1;
                b"NOT_FOUND\r\n".to_vec()
            }
        }
        Render::Arith(op) => {
            let (w, value) = match &replies[0] {
                Value::Array(a) => (
                    a.first().map(word).unwrap_or_default(),
                    a.get(1).map(word).unwrap_or_default(),
                ),
                _ => (Vec::new(), Vec::new()),
            };
            let (hits, misses) = match op {
                Arith::Incr => (&mut counters.incr_hits, &mut counters.incr_misses),
                Arith::Decr => (&mut counters.decr_hits, &mut counters.decr_misses),
            };
            match w.as_slice() {
                b"NOT_FOUND" => {
                    *misses += 1;
                    b"NOT_FOUND\r\n".to_vec()
                }
                b"NON_NUMERIC" => {
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_vec()
                }
                _ => {
                    *hits += 1;
                    line(&value)
                }
            }
        }
        Render::Flush => b"OK\r\n".to_vec(),
        Render::Stats => super::stats::render(&replies, counters),
        Render::Meta(m) => super::meta::render(m, &replies[0], counters),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_keep_the_engine_s_text_without_the_script_tail() {
        assert_eq!(
            server_error(
                b"WRONGTYPE Operation against a key holding the wrong kind of value script: \
                  870e7771, on @user_script:4."
            ),
            b"SERVER_ERROR WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        );
        assert_eq!(
            server_error(b"ERR a\r\nb"),
            b"SERVER_ERROR ERR a  b\r\n".to_vec()
        );
        assert_eq!(
            server_error(b"OOM command not allowed"),
            b"SERVER_ERROR out of memory storing object\r\n".to_vec()
        );
    }

    #[test]
    fn meta_key_shares_the_slot() {
        for key in [
            &b"k"[..],
            b"a}b",
            b"{x}y",
            b"{}z",
            b"user:{42}:name",
            b"\x01\xff",
        ] {
            let m = meta_key(key);
            assert_eq!(
                engine_core::slot::key_slot(&m),
                engine_core::slot::key_slot(key),
                "{key:?}"
            );
        }
    }

    #[test]
    fn expiry_rules() {
        let now = 1_700_000_000_000;
        assert_eq!(expiry(0, now), b"0");
        assert_eq!(expiry(-1, now), b"-1");
        assert_eq!(expiry(10, now), b"1700000010000");
        assert_eq!(expiry(REALTIME_MAXDELTA + 1, now), b"-1"); // a Unix time in 1970
        assert_eq!(expiry(1_800_000_000, now), b"1800000000000");
    }
}
