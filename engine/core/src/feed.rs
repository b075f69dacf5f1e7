//! The keychange feed: subscribers, sequence numbers, frames, snapshots and the buffer bound.
//! The wire protocol is documented in docs/feed.md; which effect each command records is
//! [`crate::effect`]'s business.
//!
//! # Shape
//! - [`Feed`] lives in the engine: the subscribed connections (client ids, a handful at most:
//!   the fan-out and perhaps a tool), the last sequence number, and the capture state of the
//!   command running (keys it changed, effects a handler chose itself).
//! - An effect is one frame `["effect", seq, arg0, …]` (database 0) or
//!   `["effect-db", seq, db, arg0, …]` (any other database), encoded once and appended to a
//!   [`Delivery`] for each subscriber (coalesced with the previous delivery to the same
//!   subscriber when that is the last one queued, so one command's effects cost one buffer).
//!   RESP2 connections get arrays (`*`), RESP3 connections pushes (`>`); the two encodings
//!   differ only in the first byte.
//! - `FEED SNAPSHOT` (database 0) and `FEED SNAPSHOTDB db` write their frames straight into
//!   the command's reply: the command runs between two effects, so the snapshot is exactly
//!   the state after effect `seq`.
//!
//! # Buffer bound (`feed-buffer-limit`, bytes, 0 = none)
//! Each subscriber's unsent output is known approximately: the server reports the real figure
//! after each write attempt ([`set_pending_output`]) and the feed adds what it queues since.
//! Snapshot bytes are given as `credit`, which shrinks as the output drains, so they do not
//! count. When an effect is produced while `pending > limit + credit`, the subscriber is
//! marked `dropped`: effects are no longer queued for it and those queued but not yet handed
//! to the connection are discarded. When its pending output has fallen to `limit / 2`
//! (reported by the server, or checked by `cron`), `["overflow", seq]` is queued and effects
//! resume at `seq + 1`. Nothing ever waits for a subscriber.
//!
//! # Sequence numbers
//! `u64`, the first effect of a process is 1, contiguous for connected subscribers. With no
//! subscriber nothing is computed; if the keyspace changed meanwhile (`Keyspace::dirty`
//! moved), the next subscription skips one number so a resuming subscriber sees the gap.

use resp::Proto;

use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::EntryRef;
use crate::types::Value;
use crate::{Delivery, Engine};

/// Largest number of elements (list elements, hash fields, set members, zset members) in one
/// snapshot entry or recreate effect.
pub const ENTRY_MAX_ELEMENTS: usize = 1024;

/// `feed-buffer-limit` default: 64 MiB per subscriber.
pub const DEFAULT_BUFFER_LIMIT: u64 = 64 * 1024 * 1024;

/// One subscribed connection.
#[derive(Debug)]
struct Subscriber {
    client_id: u64,
    proto: Proto,
    /// Estimated unsent output bytes (see the module doc, *Buffer bound*).
    pending: u64,
    /// Snapshot bytes that may still be unsent; not counted against the limit.
    credit: u64,
    /// Over the limit: effects are skipped until the overflow marker is sent.
    dropped: bool,
}

/// The engine's feed state.
#[derive(Debug, Default)]
pub struct Feed {
    subs: Vec<Subscriber>,
    /// Sequence number of the last effect produced.
    seq: u64,
    /// Effects produced (encoded) since start (INFO `feed_effects`): stays put while nobody
    /// subscribes.
    effects: u64,
    /// `Keyspace::dirty` when the last subscriber left (see *Sequence numbers*).
    dirty_when_deaf: u64,
    /// The frame being encoded (reused).
    scratch: Vec<u8>,
    /// True between `effect::begin` and `effect::end` of a command: keyspace notifications
    /// add their key to `changed`.
    pub(crate) capturing: bool,
    /// Keys the running command reported as changed (`notify::notify`), with their database.
    pub(crate) changed: Vec<(usize, Box<[u8]>)>,
    /// Effects a handler chose itself (`effect::propagate`), replacing the default rule, with
    /// their database.
    pub(crate) chosen: Option<Vec<(usize, Vec<Vec<u8>>)>>,
}

impl Feed {
    /// Someone subscribes: effects must be computed.
    #[inline]
    pub fn is_active(&self) -> bool {
        !self.subs.is_empty()
    }

    /// Sequence number of the last effect.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Effects produced since start.
    pub fn effects(&self) -> u64 {
        self.effects
    }

    /// Number of subscribed connections.
    pub fn subscribers(&self) -> usize {
        self.subs.len()
    }

    /// Whether `client_id` is a feed connection (feed mode restricts its commands).
    pub fn is_subscriber(&self, client_id: u64) -> bool {
        self.subs.iter().any(|s| s.client_id == client_id)
    }

    /// Records one effect on database `db`: assigns the next sequence number and queues its
    /// frame for every subscriber that is not over its limit. `limit` is `feed-buffer-limit`.
    /// Database 0's frame is `["effect", seq, arg…]`, any other's
    /// `["effect-db", seq, db, arg…]`.
    pub(crate) fn emit(
        &mut self,
        deliveries: &mut Vec<Delivery>,
        limit: u64,
        db: usize,
        args: &[&[u8]],
    ) {
        self.seq += 1;
        self.effects += 1;
        let mut seq_buf = itoa::Buffer::new();
        let seq = seq_buf.format(self.seq).as_bytes();
        let frame = &mut self.scratch;
        frame.clear();
        if db == 0 {
            write_header(frame, Proto::Resp2, args.len() + 2);
            write_bulk(frame, b"effect");
            write_bulk(frame, seq);
        } else {
            write_header(frame, Proto::Resp2, args.len() + 3);
            write_bulk(frame, b"effect-db");
            write_bulk(frame, seq);
            write_bulk(frame, itoa::Buffer::new().format(db).as_bytes());
        }
        for a in args {
            write_bulk(frame, a);
        }
        for s in &mut self.subs {
            if s.dropped {
                continue;
            }
            if limit != 0 && s.pending > limit.saturating_add(s.credit) {
                s.dropped = true;
                // What is still queued in the core is discarded at once; bytes the server
                // already holds are written (they are within the limit).
                let id = s.client_id;
                let mut freed = 0u64;
                deliveries.retain(|d| {
                    let mine = d.client_id == id && !d.unblock;
                    if mine {
                        freed += d.bytes.len() as u64;
                    }
                    !mine
                });
                s.pending = s.pending.saturating_sub(freed);
                continue;
            }
            s.pending += frame.len() as u64;
            let tag = if s.proto == Proto::Resp3 { b'>' } else { b'*' };
            match deliveries.last_mut() {
                Some(d) if d.client_id == s.client_id && !d.unblock => {
                    let at = d.bytes.len();
                    d.bytes.extend_from_slice(frame);
                    d.bytes[at] = tag;
                }
                _ => {
                    let mut bytes = frame.clone();
                    bytes[0] = tag;
                    deliveries.push(Delivery {
                        client_id: s.client_id,
                        bytes,
                        unblock: false,
                    });
                }
            }
        }
    }

    /// Queues the overflow marker for every dropped subscriber whose pending output is down
    /// to half the limit.
    fn resume(&mut self, deliveries: &mut Vec<Delivery>, limit: u64) {
        for s in &mut self.subs {
            if s.dropped && (limit == 0 || s.pending <= limit / 2) {
                s.dropped = false;
                let mut seq_buf = itoa::Buffer::new();
                let mut bytes = Vec::with_capacity(32);
                frame(
                    &mut bytes,
                    s.proto,
                    &[b"overflow", seq_buf.format(self.seq).as_bytes()],
                );
                s.pending += bytes.len() as u64;
                deliveries.push(Delivery {
                    client_id: s.client_id,
                    bytes,
                    unblock: false,
                });
            }
        }
    }
}

/// Array (`*`) or push (`>`) header of `n` elements.
fn write_header(out: &mut Vec<u8>, proto: Proto, n: usize) {
    out.push(if proto == Proto::Resp3 { b'>' } else { b'*' });
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn write_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// One feed frame: an array (RESP2) or push (RESP3) of bulk strings.
pub fn frame(out: &mut Vec<u8>, proto: Proto, parts: &[&[u8]]) {
    write_header(out, proto, parts.len());
    for p in parts {
        write_bulk(out, p);
    }
}

/// Score text that ZADD parses back to the same `f64`: Rust's shortest round-trip decimal,
/// with `inf`/`-inf` as Redis spells them.
pub fn score_text(s: f64) -> String {
    if s.is_infinite() {
        return if s > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    format!("{s}")
}

/// The commands that rebuild a stream (Redis's AOF rewrite, `rewriteStreamObject`): its
/// entries with their IDs, its counters (XSETID), then each group, its consumers and its
/// pending entries (XCLAIM … FORCE JUSTID with the delivery time and count).
fn recreate_stream(key: &[u8], st: &crate::types::StreamValue, sink: &mut dyn FnMut(&[&[u8]])) {
    use crate::types::stream::StreamId;
    let mut args: Vec<Vec<u8>> = Vec::new();
    let mut emit = |args: &[Vec<u8>]| {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        sink(&refs);
    };
    if st.is_empty() {
        // An empty stream: created with a dummy entry trimmed away at once.
        let id = st.last_id.max(StreamId::new(0, 1));
        emit(&[
            b"XADD".to_vec(),
            key.to_vec(),
            b"MAXLEN".to_vec(),
            b"0".to_vec(),
            id.text().into_bytes(),
            b"x".to_vec(),
            b"y".to_vec(),
        ]);
    }
    for en in st.entries() {
        args.clear();
        args.extend([b"XADD".to_vec(), key.to_vec(), en.id.text().into_bytes()]);
        for (f, v) in en.fields() {
            args.push(f.to_vec());
            args.push(v.to_vec());
        }
        emit(&args);
    }
    emit(&[
        b"XSETID".to_vec(),
        key.to_vec(),
        st.last_id.text().into_bytes(),
        b"ENTRIESADDED".to_vec(),
        st.entries_added.to_string().into_bytes(),
        b"MAXDELETEDID".to_vec(),
        st.max_deleted_entry_id.text().into_bytes(),
    ]);
    for (name, g) in &st.groups {
        emit(&[
            b"XGROUP".to_vec(),
            b"CREATE".to_vec(),
            key.to_vec(),
            name.to_vec(),
            g.last_id.text().into_bytes(),
            b"ENTRIESREAD".to_vec(),
            g.entries_read.to_string().into_bytes(),
        ]);
        for cname in g.consumers().keys() {
            emit(&[
                b"XGROUP".to_vec(),
                b"CREATECONSUMER".to_vec(),
                key.to_vec(),
                name.to_vec(),
                cname.to_vec(),
            ]);
        }
        for (id, nack) in g.pel() {
            emit(&[
                b"XCLAIM".to_vec(),
                key.to_vec(),
                name.to_vec(),
                nack.consumer.to_vec(),
                b"0".to_vec(),
                id.text().into_bytes(),
                b"TIME".to_vec(),
                nack.delivery_time.to_string().into_bytes(),
                b"RETRYCOUNT".to_vec(),
                nack.delivery_count.to_string().into_bytes(),
                b"FORCE".to_vec(),
                b"JUSTID".to_vec(),
            ]);
        }
    }
}

/// Calls `sink` with the commands that recreate `key` holding `entry` on an empty replica:
/// the value in pieces of at most [`ENTRY_MAX_ELEMENTS`] elements, then `PEXPIREAT` when it
/// has a TTL.
pub fn recreate(key: &[u8], entry: &EntryRef<'_>, sink: &mut dyn FnMut(&[&[u8]])) {
    let mut args: Vec<&[u8]> = Vec::new();
    match entry.value {
        Value::Str(s) => {
            let mut buf = itoa::Buffer::new();
            sink(&[b"SET", key, s.bytes(&mut buf)]);
        }
        Value::List(l) => {
            let mut it = l.iter().peekable();
            while it.peek().is_some() {
                args.clear();
                args.extend_from_slice(&[b"RPUSH", key]);
                args.extend(it.by_ref().take(ENTRY_MAX_ELEMENTS));
                sink(&args);
            }
        }
        Value::Hash(h) => {
            let mut it = h.iter().peekable();
            while it.peek().is_some() {
                args.clear();
                args.extend_from_slice(&[b"HSET", key]);
                for (f, v) in it.by_ref().take(ENTRY_MAX_ELEMENTS) {
                    args.push(f);
                    args.push(v);
                }
                sink(&args);
            }
        }
        Value::Set(set) => {
            let mut it = set.iter().peekable();
            while it.peek().is_some() {
                // An intset's members are text made on the way out: hold them for the call.
                let chunk: Vec<_> = it.by_ref().take(ENTRY_MAX_ELEMENTS).collect();
                let mut sargs: Vec<&[u8]> = Vec::with_capacity(2 + chunk.len());
                sargs.extend_from_slice(&[b"SADD", key]);
                sargs.extend(chunk.iter().map(|m| &**m));
                sink(&sargs);
            }
        }
        Value::ZSet(z) => {
            let mut it = z.iter().peekable();
            while it.peek().is_some() {
                let chunk: Vec<(&[u8], f64)> = it.by_ref().take(ENTRY_MAX_ELEMENTS).collect();
                let scores: Vec<String> = chunk.iter().map(|&(_, s)| score_text(s)).collect();
                let mut zargs: Vec<&[u8]> = Vec::with_capacity(2 + 2 * chunk.len());
                zargs.extend_from_slice(&[b"ZADD", key]);
                for (&(m, _), s) in chunk.iter().zip(&scores) {
                    zargs.push(s.as_bytes());
                    zargs.push(m);
                }
                sink(&zargs);
            }
        }
        Value::Stream(st) => recreate_stream(key, st, sink),
    }
    if let Some(at) = entry.expire_at() {
        let mut buf = itoa::Buffer::new();
        sink(&[b"PEXPIREAT", key, buf.format(at).as_bytes()]);
    }
}

// ---------------------------------------------------------------------------------------------
// Engine hooks
// ---------------------------------------------------------------------------------------------

/// The server reports `client_id`'s unsent output after a write attempt. A no-op (one test)
/// unless someone subscribes.
pub fn set_pending_output(e: &mut Engine, client_id: u64, bytes: usize) {
    if e.feed.subs.is_empty() {
        return;
    }
    let Some(s) = e.feed.subs.iter_mut().find(|s| s.client_id == client_id) else {
        return;
    };
    let bytes = bytes as u64;
    // Bytes queued in the core but not yet routed to the connection are not in `bytes`.
    let queued: u64 = e
        .deliveries
        .iter()
        .filter(|d| d.client_id == client_id && !d.unblock)
        .map(|d| d.bytes.len() as u64)
        .sum();
    s.pending = bytes + queued;
    s.credit = s.credit.min(bytes);
    if s.dropped {
        e.feed.resume(&mut e.deliveries, e.config.feed_buffer_limit);
    }
}

/// Per tick: overflow markers for subscribers that drained.
pub fn cron(e: &mut Engine) {
    if e.feed.subs.iter().any(|s| s.dropped) {
        e.feed.resume(&mut e.deliveries, e.config.feed_buffer_limit);
    }
}

/// The connection is gone.
pub fn client_closed(e: &mut Engine, client_id: u64) {
    if e.feed.subs.is_empty() {
        return;
    }
    e.feed.subs.retain(|s| s.client_id != client_id);
    if e.feed.subs.is_empty() {
        e.feed.dirty_when_deaf = e.ks.dirty;
        e.ks.feed_on = false;
        e.ks.feed_dels.clear();
        e.feed.capturing = false;
        e.feed.changed.clear();
    }
}

/// Commands a feed connection may run (feed mode; see docs/feed.md).
pub fn allowed_in_feed_mode(name: &str) -> bool {
    name.starts_with("feed|") || matches!(name, "ping" | "quit")
}

/// The error for any other command in feed mode.
pub fn feed_mode_error(name: &str) -> String {
    format!("ERR Can't execute '{name}': only FEED, PING and QUIT are allowed on a feed connection")
}

// ---------------------------------------------------------------------------------------------
// FEED command
// ---------------------------------------------------------------------------------------------

const IN_MULTI: CmdError = CmdError::Static("ERR FEED is not allowed inside MULTI");

/// `FEED SUBSCRIBE` → `["subscribed", run_id, seq]`, then every effect.
pub fn feed_subscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.client.tx.in_exec {
        return Err(IN_MULTI);
    }
    let id = c.client.id;
    if !e.feed.is_subscriber(id) {
        if e.feed.subs.is_empty() {
            // Changes nobody heard: skip a number so a resuming subscriber sees a gap.
            if e.ks.dirty != e.feed.dirty_when_deaf {
                e.feed.seq += 1;
            }
            e.ks.feed_on = true;
        }
        e.feed.subs.push(Subscriber {
            client_id: id,
            proto: c.client.proto,
            pending: 0,
            credit: 0,
            dropped: false,
        });
    }
    let mut seq_buf = itoa::Buffer::new();
    let seq = seq_buf.format(e.feed.seq).as_bytes();
    let proto = c.client.proto;
    let run_id = e.run_id.clone();
    let (_, out) = c.parts();
    frame(out, proto, &[b"subscribed", run_id.as_bytes(), seq]);
    Ok(())
}

/// `FEED SNAPSHOT id prefix [prefix …]` → `snapshot`, `entry`…, `snapshot-end` frames of
/// database 0.
pub fn feed_snapshot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    snapshot(e, c, 0, 2)
}

/// `FEED SNAPSHOTDB db id prefix [prefix …]`: [`feed_snapshot`] of database `db`. (A separate
/// subcommand, not an option of SNAPSHOT: any word after the id is a prefix.)
pub fn feed_snapshotdb(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let db = resp::parse_i64(c.argv[2]).ok_or(CmdError::NotInteger)?;
    let db = crate::cmd::connection::db_index(e, db)?;
    snapshot(e, c, db, 3)
}

/// The snapshot of database `db`; `c.argv[at]` is the id, the prefixes follow.
fn snapshot(e: &mut Engine, c: &mut Call, db: usize, at: usize) -> Result<(), CmdError> {
    if c.client.tx.in_exec {
        return Err(IN_MULTI);
    }
    if !e.feed.is_subscriber(c.client.id) {
        // Its frames only make sense inside the stream (and a plain client would read them
        // as several replies).
        return Err(CmdError::Static(
            "ERR FEED SNAPSHOT needs FEED SUBSCRIBE first on this connection",
        ));
    }
    let id = c.argv[at];
    let prefixes = &c.argv[at + 1..];
    let now_ms = c.now_ms;
    let proto = c.client.proto;
    let client_id = c.client.id;
    let matches = |k: &[u8]| prefixes.iter().any(|p| k.starts_with(p));
    let live = |en: &EntryRef<'_>| en.expire_at().is_none_or(|at| now_ms <= at);
    let mut seq_buf = itoa::Buffer::new();
    let seq = seq_buf.format(e.feed.seq).as_bytes();
    let (_, out) = c.parts();
    let start = out.len();
    // One pass: the entries first, then the header (which needs their count) is moved in
    // front of them; a memmove is far cheaper than a second walk over every key.
    let mut nkeys = 0usize;
    // The database asked for, whichever one this connection selected.
    for (k, en) in e.db(db).iter_entries() {
        if !(matches(k) && live(&en)) {
            continue;
        }
        nkeys += 1;
        recreate(k, &en, &mut |args| {
            write_header(out, proto, args.len() + 2);
            write_bulk(out, b"entry");
            write_bulk(out, id);
            for a in args {
                write_bulk(out, a);
            }
        });
    }
    let mut header = Vec::with_capacity(64 + id.len());
    let mut n_buf = itoa::Buffer::new();
    frame(
        &mut header,
        proto,
        &[b"snapshot", id, seq, n_buf.format(nkeys).as_bytes()],
    );
    out.splice(start..start, header);
    frame(out, proto, &[b"snapshot-end", id, seq]);
    let bytes = (out.len() - start) as u64;
    if let Some(s) = e.feed.subs.iter_mut().find(|s| s.client_id == client_id) {
        s.credit = s.credit.saturating_add(bytes);
        s.pending = s.pending.saturating_add(bytes);
    }
    Ok(())
}

pub fn feed_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    crate::call::help(
        c,
        "FEED",
        &[
            "SUBSCRIBE",
            "    Turn this connection into the keychange feed: [\"subscribed\", run_id, seq],",
            "    then [\"effect\", seq, arg…] for every change of database 0 and",
            "    [\"effect-db\", seq, db, arg…] for every change of database db > 0.",
            "SNAPSHOT <id> <prefix> [<prefix> ...]",
            "    Stream the commands recreating every key of database 0 under the prefixes",
            "    (\"\" = all): [\"snapshot\", id, seq, nkeys], [\"entry\", id, arg…]…,",
            "    [\"snapshot-end\", id, seq].",
            "SNAPSHOTDB <db> <id> <prefix> [<prefix> ...]",
            "    The same for database <db>.",
            "HELP",
            "    Print this help.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_text_round_trips() {
        for s in [
            0.0,
            -0.0,
            1.5,
            -3.25,
            0.1,
            1e300,
            -1e-300,
            f64::MIN_POSITIVE,
            123456789.12345679,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let t = score_text(s);
            let back = crate::types::zset::score::parse_score(t.as_bytes())
                .unwrap_or_else(|| panic!("{t} does not parse"));
            assert_eq!(back.to_bits(), s.to_bits(), "{t}");
        }
    }

    #[test]
    fn frames_are_arrays_or_pushes_of_bulks() {
        let mut v = Vec::new();
        frame(&mut v, Proto::Resp2, &[b"effect", b"7", b"SET", b"k", b""]);
        assert_eq!(
            v,
            b"*5\r\n$6\r\neffect\r\n$1\r\n7\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
        v.clear();
        frame(&mut v, Proto::Resp3, &[b"overflow", b"9"]);
        assert_eq!(v, b">2\r\n$8\r\noverflow\r\n$1\r\n9\r\n");
    }
}
