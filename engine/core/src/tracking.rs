//! Client-side caching: key tracking and invalidation messages (redis `tracking.c`, Redis 7.0).
//!
//! A client turns tracking on with `CLIENT TRACKING ON`; from then on the keys its read-only
//! commands read are remembered in the **tracking table** (key → ids of the clients that may
//! cache it), and when such a key changes, by any client, a script, MULTI, expiry, eviction or
//! a FLUSH, each of those clients gets one invalidation message and the key leaves the table
//! (it is tracked again when read again). In **BCAST** mode nothing is remembered: the client
//! subscribes to key prefixes (`""` = every key) and hears of every change of a matching key.
//!
//! Messages (redis `sendTrackingMessage`), to the tracking client or its `REDIRECT` client:
//!
//! ```text
//! RESP3 target:                 >2 $10 invalidate *N <keys>       (FLUSH*: >2 invalidate _)
//! RESP2 redirect target that is subscribed (to anything):
//!                               *3 $7 message $20 __redis__:invalidate *N <keys>
//! redirect client gone:         >2 $21 tracking-redir-broken :<id>  (to a RESP3 tracking client)
//! ```
//!
//! A RESP2 client without a redirect gets nothing (RESP2 has no push frames). The FLUSH null
//! is encoded in the tracking client's own protocol, as Redis does.
//!
//! # How it hangs together
//!
//! - Files: the hooks and messages here, the CLIENT subcommands in `client.rs`, the table in
//!   `table.rs`.
//! - The keyspace reports each changed key (the same hook WATCH uses, redis
//!   `signalModifiedKey`) into `Keyspace::tracked` — `None` while no client tracks, so a
//!   change costs one test then. Deletions by expiry and eviction are marked as the server's
//!   (redis passes `c = NULL`), which matters for BCAST's NOLOOP.
//! - The dispatcher drains that log after every top-level command ([`after_command`]), after
//!   the eviction that precedes a command and the tracking-table limit ([`before_command`]),
//!   and [`cron`] after the expiry cycle. Invalidations for the client whose command is
//!   running are sent after its reply (redis `tracking_pending_keys`), except those caused
//!   before the command ran (eviction, the table limit), which precede it, as in Redis.
//! - BCAST keys gather per prefix and are sent after each top-level command and each tick
//!   (Redis sends them before it sleeps, so a pipeline of writes gets one message there and
//!   one per command here).
//! - Messages are [`crate::Delivery`]s: the server appends them to the target's output like
//!   pub/sub messages, whatever its `CLIENT REPLY` mode (redis `CLIENT_PUSHING`).
//! - The engine keeps every live connection's id and protocol ([`Tracking::conn_opened`],
//!   kept by `init_client`, HELLO and RESET): REDIRECT needs a client that exists, and the
//!   message's shape depends on the target's protocol.
//!
//! Like Redis, a client that disconnects or turns tracking off leaves its id in the table;
//! it is skipped when the key changes (INFO `tracking_total_items` counts it until then).
//! The table is bounded by `tracking-table-max-keys` ([`limit_used_slots`]): over it, random
//! keys are invalidated as if they changed, with an effort that grows while still over.
//!
//! # Cost of a tracked read
//!
//! A tracking client's GET adds one probe of the table (`table.rs`: one array of cache-line
//! buckets, short keys and close ids in the bucket, no allocation once the key is known,
//! "already tracked by this client" a bit test), its mode looked up once per run of its
//! commands (`Tracking::reader`), and a few inline tests before and after the command
//! (nothing logged, nothing pending, no BCAST prefix, no CLIENT CACHING waiting): ~250
//! instructions over an untracked GET's ~1,900 (callgrind, 50 clients, pipeline 16), where it
//! was ~550. The key's bucket is read before the command runs ([`before_command`]), so when
//! the table is larger than the caches its one miss overlaps the keyspace lookup's.

mod client;
mod table;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use resp::{Proto, ReplyWriter};

use crate::command::{CommandSpec, Flags};
use crate::{Client, Delivery, Engine};

/// `tracking-table-max-keys`'s default (Redis's).
pub const DEFAULT_MAX_KEYS: u64 = 1_000_000;

/// The pub/sub channel of RESP2 redirect clients.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// One tracking client's mode (redis `CLIENT_TRACKING_*` flags and
/// `client_tracking_redirection` / `client_tracking_prefixes`).
#[derive(Clone, Debug, Default)]
pub struct ClientTracking {
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    /// CLIENT CACHING YES (OPTIN) / NO (OPTOUT) given for the next command.
    pub caching: bool,
    pub noloop: bool,
    /// The redirect client was gone when a message was due (CLIENT LIST flag `R`).
    pub broken_redir: bool,
    /// 0 = none.
    pub redirect: u64,
    /// BCAST prefixes (sorted, as Redis's rax lists them).
    pub prefixes: BTreeSet<Box<[u8]>>,
}

/// One BCAST prefix (redis `bcastState`).
#[derive(Debug, Default)]
struct Bcast {
    /// Keys changed since the last broadcast → the id of the client that changed each last
    /// (0 = the server: expiry, eviction), for NOLOOP.
    keys: BTreeMap<Box<[u8]>, u64>,
    /// Clients subscribed to this prefix.
    clients: BTreeSet<u64>,
}

/// A message still to send to the running client after its reply.
#[derive(Debug)]
enum Pending {
    Key(Box<[u8]>),
    Flush,
}

use table::Table;

pub use client::{client_caching, client_getredir, client_tracking, client_trackinginfo};

/// The engine's tracking state (see the module docs).
#[derive(Debug)]
pub struct Tracking {
    /// Clients with tracking on (looked up after every command of theirs: a fast hasher).
    clients: HashMap<u64, ClientTracking, foldhash::fast::FixedState>,
    /// Every live connection → its protocol (redirect targets; see the module docs).
    conns: HashMap<u64, Proto, foldhash::fast::FixedState>,
    /// Key → ids of the clients that may cache it (redis `TrackingTable`; `table.rs`).
    table: Table,
    /// Clients whose CLIENT CACHING waits for their next command: while 0, a command's end
    /// looks no client up.
    caching: usize,
    /// The last client found to remember its reads (tracking, not BCAST, OPTIN/OPTOUT
    /// allowing): the reads of a pipeline look its mode up once. Any change of a client's
    /// mode resets it.
    reader: Option<u64>,
    /// BCAST prefix → its state (redis `PrefixTable`).
    prefixes: BTreeMap<Box<[u8]>, Bcast>,
    /// The client whose command runs now (0 = none: cron).
    current: u64,
    /// Messages for `current`, sent after its reply.
    pending: Vec<Pending>,
    /// A command run by a script read something (redis: the script's caller remembers the
    /// script's declared keys).
    script_read: bool,
    /// Rounds of the table limit that ended still over it (redis `timeout_counter`).
    limit_rounds: u32,
    /// What [`after_call`] found of the last command row it saw (its address): a pipeline
    /// of one command looks its flags and key position up once.
    last_row: (usize, Row),
    /// The key [`before_command`] touched (its address and length in the request) and its
    /// hash, so that [`after_call`] of the same command does not hash it again; set or
    /// cleared by every top-level command, taken by the next call's end.
    touched: Option<(usize, usize, u64)>,
}

/// What a command row means to [`after_call`] (from its flags and key specs alone).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Row {
    /// PUBSUB: never remembered.
    Never,
    /// A read (READONLY, not EVAL_RO and kin) or, when a script read something, any command:
    /// `read` says which; `fixed` is the one key's index when the row has a single fixed key
    /// (valid when the request reaches it; the row's general rule applies otherwise).
    Keys { read: bool, fixed: Option<u8> },
}

impl Row {
    fn of(spec: &CommandSpec) -> Row {
        if spec.has_flag(Flags::PUBSUB) {
            return Row::Never;
        }
        let read = spec.has_flag(Flags::READONLY)
            && !matches!(spec.name, "eval_ro" | "evalsha_ro" | "fcall_ro");
        let fixed = crate::command::single_key_index(spec).and_then(|i| u8::try_from(i).ok());
        Row::Keys { read, fixed }
    }
}

impl Tracking {
    /// Empty; `seed` keys the table's hasher (the engine's `hash_seed`).
    pub fn new(seed: u64) -> Tracking {
        Tracking {
            clients: HashMap::default(),
            conns: HashMap::default(),
            table: Table::new(seed),
            caching: 0,
            reader: None,
            prefixes: BTreeMap::new(),
            current: 0,
            pending: Vec::new(),
            script_read: false,
            limit_rounds: 0,
            last_row: (0, Row::Never),
            touched: None,
        }
    }

    /// Whether any client tracks (the dispatcher's one test).
    #[inline]
    pub fn active(&self) -> bool {
        !self.clients.is_empty()
    }

    /// Number of clients with tracking on (INFO `tracking_clients`).
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Keys in the tracking table (INFO `tracking_total_keys`).
    pub fn total_keys(&self) -> usize {
        self.table.len()
    }

    /// Client ids over all keys (INFO `tracking_total_items`).
    pub fn total_items(&self) -> u64 {
        self.table.items()
    }

    /// BCAST prefixes (INFO `tracking_total_prefixes`).
    pub fn total_prefixes(&self) -> usize {
        self.prefixes.len()
    }

    /// `client_id`'s mode, if it tracks.
    pub fn client(&self, client_id: u64) -> Option<&ClientTracking> {
        self.clients.get(&client_id)
    }

    /// A connection exists with `proto` (the server's `init_client`).
    pub fn conn_opened(&mut self, client_id: u64, proto: Proto) {
        self.conns.insert(client_id, proto);
    }

    /// A known connection switched protocol (HELLO, RESET).
    pub fn conn_proto(&mut self, client_id: u64, proto: Proto) {
        if let Some(p) = self.conns.get_mut(&client_id) {
            *p = proto;
        }
    }

    fn proto_of(&self, client_id: u64) -> Proto {
        self.conns.get(&client_id).copied().unwrap_or_default()
    }
}

/// The CLIENT LIST flag letters of `client_id` (`t`, `R`, `B`, in Redis's order) and its
/// `redir=` value (-1 when not tracking).
pub fn client_list_info(e: &Engine, client_id: u64) -> (&'static str, i64) {
    match e.tracking.clients.get(&client_id) {
        None => ("", -1),
        Some(t) => {
            let flags = match (t.broken_redir, t.bcast) {
                (false, false) => "t",
                (true, false) => "tR",
                (false, true) => "tB",
                (true, true) => "tRB",
            };
            (flags, t.redirect as i64)
        }
    }
}

/// Turns the keyspace's change log on while anyone tracks.
fn sync_log(e: &mut Engine) {
    let on = !e.tracking.clients.is_empty();
    if on != e.ks.tracked.is_some() {
        // Changes logged before the last client left are moot.
        e.ks.tracked = if on { Some(Vec::new()) } else { None };
    }
    if !on && !e.tracking.table.is_empty() {
        // Every id left names a client that no longer tracks: nothing would ever be sent
        // for them (Redis keeps them until each key changes or a FLUSH).
        e.tracking.table.clear();
    }
}

/// The connection closed (redis `freeClient` → `disableTracking`).
pub fn client_closed(e: &mut Engine, client_id: u64) {
    e.tracking.conns.remove(&client_id);
    disable(e, client_id);
}

/// RESET: tracking off (redis `clearClientConnectionState`).
pub fn reset_client(e: &mut Engine, client_id: u64) {
    disable(e, client_id);
}

/// redis `disableTracking`: leaves the client's BCAST prefixes; its ids stay in the table.
fn disable(e: &mut Engine, client_id: u64) {
    let Some(t) = e.tracking.clients.remove(&client_id) else {
        return;
    };
    e.tracking.reader = None;
    if t.caching {
        e.tracking.caching -= 1;
    }
    for p in &t.prefixes {
        if let Some(bs) = e.tracking.prefixes.get_mut(p) {
            bs.clients.remove(&client_id);
            if bs.clients.is_empty() {
                e.tracking.prefixes.remove(p);
            }
        }
    }
    sync_log(e);
}

// ---------------------------------------------------------------------------------------------
// The dispatcher's hooks
// ---------------------------------------------------------------------------------------------

/// Before a command runs (redis `processCommand`, after `performEvictions`): the table limit,
/// then invalidations caused so far (evicted keys), which reach the running client before its
/// reply. `client` is the client about to run. A read of one key also reads the key's
/// tracking bucket now ([`table::Table::touch`]): its cache miss then overlaps the command's
/// own lookup of the key, instead of following it in [`after_call`].
#[inline]
pub fn before_command(
    e: &mut Engine,
    client_id: u64,
    spec: &CommandSpec,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) {
    if e.blocking.rerun_of.is_some() {
        return; // a parked command served inside another client's: that one's hooks run
    }
    if let Row::Keys {
        read: true,
        fixed: Some(pos),
    } = row_of(e, spec)
        && let Some(key) = argv.get(pos as usize)
        && (e.tracking.reader == Some(client_id) || e.tracking.clients.contains_key(&client_id))
    {
        let hash = e.tracking.table.hash(key);
        std::hint::black_box(e.tracking.table.touch(hash));
        e.tracking.touched = Some((key.as_ptr() as usize, key.len(), hash));
    } else {
        e.tracking.touched = None;
    }
    e.tracking.current = client_id;
    let over = e.config.tracking_table_max_keys != 0
        && e.tracking.table.len() as u64 > e.config.tracking_table_max_keys;
    // Usually there is nothing to tell: a few tests inline, the work out of line.
    if over || changes_logged(e) {
        tell_before(e, client_id, over, out);
    }
}

#[inline(never)]
fn tell_before(e: &mut Engine, client_id: u64, over: bool, out: &mut Vec<u8>) {
    let first = e.deliveries.len();
    drain_changes(e, false);
    if over {
        limit_used_slots(e);
    }
    // This client's messages go out now, before whatever reply follows (QUEUED included).
    if e.deliveries[first..]
        .iter()
        .any(|d| d.client_id == client_id)
    {
        let mut i = first;
        while i < e.deliveries.len() {
            if e.deliveries[i].client_id == client_id {
                out.extend_from_slice(&e.deliveries.remove(i).bytes);
            } else {
                i += 1;
            }
        }
    }
}

/// What `spec` means to [`after_call`], from the cache of the last row seen.
#[inline]
fn row_of(e: &mut Engine, spec: &CommandSpec) -> Row {
    let addr = spec as *const CommandSpec as usize;
    if e.tracking.last_row.0 == addr {
        e.tracking.last_row.1
    } else {
        let row = Row::of(spec);
        e.tracking.last_row = (addr, row);
        row
    }
}

/// After a command ran (any: top level, inside EXEC, inside a script): remembers the keys a
/// read-only command read for a tracking client (redis `call` → `trackingRememberKeys`).
/// Called only while some client tracks.
pub fn after_call(e: &mut Engine, client: &Client, spec: &CommandSpec, argv: &[&[u8]]) {
    let touched = e.tracking.touched.take();
    if client.addr == crate::script::SCRIPT_CLIENT_ADDR {
        // A script's own command: its caller remembers the script's declared keys.
        if spec.has_flag(Flags::READONLY) {
            e.tracking.script_read = true;
        }
        return;
    }
    let script_read = std::mem::take(&mut e.tracking.script_read);
    let Row::Keys { read, fixed } = row_of(e, spec) else {
        return;
    };
    if !(read || script_read) {
        return;
    }
    let id = client.id;
    if e.tracking.reader != Some(id) {
        let Some(t) = e.tracking.clients.get(&id) else {
            return;
        };
        if t.bcast || (t.optin && !t.caching) || (t.optout && t.caching) {
            return;
        }
        e.tracking.reader = Some(id);
    }
    // One key at a fixed place (GET, HGET…) needs no key walk.
    if let Some(pos) = fixed
        && (pos as usize) < argv.len()
    {
        let key = argv[pos as usize];
        match touched {
            // The same bytes before_command hashed (this command's request).
            Some((at, len, hash)) if at == key.as_ptr() as usize && len == key.len() => {
                e.tracking.table.remember_hashed(hash, key, id)
            }
            _ => e.tracking.table.remember(key, id),
        }
        return;
    }
    if let Some(pos) = crate::command::fixed_key(spec, argv.len()) {
        e.tracking.table.remember(argv[pos], id);
        return;
    }
    for pos in crate::command::keys(spec, argv).positions() {
        e.tracking.table.remember(argv[pos], id);
    }
}

/// After a top-level command (not one run by EXEC or a script), once its reply is written and
/// pub/sub messages for the client are in place: invalidations caused by the command, then
/// BCAST messages; the running client's come after its reply. Clears CLIENT CACHING unless
/// the command was CLIENT or the client is inside MULTI (redis `resetClient`).
#[inline]
pub fn after_command(e: &mut Engine, client: &Client) {
    if e.blocking.rerun_of.is_some() {
        // A parked command served inside another client's command: its invalidations go
        // out with that command's, after this one's reply (queued by `blocking`).
        return;
    }
    // Usually nothing to do (a read): a few tests inline, the work out of line.
    if e.tracking.caching != 0
        || changes_logged(e)
        || !e.tracking.pending.is_empty()
        || !e.tracking.prefixes.is_empty()
    {
        tell_after(e, client);
    }
    e.tracking.current = 0;
}

#[inline(never)]
fn tell_after(e: &mut Engine, client: &Client) {
    if e.tracking.caching != 0
        && let Some(t) = e.tracking.clients.get_mut(&client.id)
        && t.caching
        && !client.tx.in_multi()
        && !client.last_cmd.starts_with("client|")
    {
        t.caching = false;
        e.tracking.caching -= 1;
        e.tracking.reader = None;
    }
    if changes_logged(e) || !e.tracking.pending.is_empty() {
        drain_changes(e, true);
    }
    if !e.tracking.prefixes.is_empty() {
        broadcast(e);
    }
}

/// Whether the keyspace logged a change since the last drain.
#[inline]
fn changes_logged(e: &Engine) -> bool {
    e.ks.tracked.as_ref().is_some_and(|log| !log.is_empty())
}

/// Timer tick: changes of the expiry cycle and eviction, the table limit, BCAST messages.
pub fn cron(e: &mut Engine) {
    e.tracking.current = 0;
    drain_changes(e, false);
    if e.tracking.clients.is_empty() {
        return;
    }
    if e.config.tracking_table_max_keys != 0 {
        limit_used_slots(e);
    }
    broadcast(e);
}

/// Invalidations for the keys the keyspace logged. `defer_current`: messages for the running
/// client wait until after its reply.
fn drain_changes(e: &mut Engine, defer_current: bool) {
    let Some(log) = e.ks.tracked.as_mut() else {
        return;
    };
    if log.is_empty() {
        if defer_current {
            send_pending(e);
        }
        return;
    }
    let mut log = std::mem::take(log);
    let current = e.tracking.current;
    for (key, by_server) in log.drain(..) {
        let modifier = if by_server { 0 } else { current };
        invalidate_key(e, &key, modifier, true, defer_current);
    }
    if let Some(l) = e.ks.tracked.as_mut() {
        *l = log; // keep the buffer
    }
    if defer_current {
        send_pending(e);
    }
}

/// redis `trackingInvalidateKey`: schedules `key` for BCAST (when `bcast`) and tells every
/// client in its table entry, then forgets the entry. `modifier`: the client that changed it
/// (0 = the server).
fn invalidate_key(e: &mut Engine, key: &[u8], modifier: u64, bcast: bool, defer_current: bool) {
    if bcast && !e.tracking.prefixes.is_empty() {
        for (p, bs) in e.tracking.prefixes.iter_mut() {
            if key.starts_with(p) {
                match bs.keys.get_mut(key) {
                    Some(m) => *m = modifier,
                    None => {
                        bs.keys.insert(key.into(), modifier);
                    }
                }
            }
        }
    }
    if let Some(ids) = e.tracking.table.remove(key) {
        tell(e, key, &ids, defer_current);
    }
}

/// Tells the clients `ids` that `key` changed (the rest of [`invalidate_key`]).
fn tell(e: &mut Engine, key: &[u8], ids: &table::Ids, defer_current: bool) {
    let current = e.tracking.current;
    for id in ids.iter() {
        let Some(t) = e.tracking.clients.get(&id) else {
            continue;
        };
        if t.bcast || (t.noloop && id == current && current != 0) {
            continue;
        }
        if id == current && defer_current {
            e.tracking.pending.push(Pending::Key(key.into()));
        } else {
            send(e, id, Payload::Keys(&[key]));
        }
    }
}

/// What a message carries.
enum Payload<'a> {
    Keys(&'a [&'a [u8]]),
    /// A pre-encoded array (BCAST).
    Encoded(&'a [u8]),
    /// FLUSH*: a null in the tracking client's protocol.
    Null,
}

/// redis `sendTrackingMessage`: to `id`, or its redirect client.
fn send(e: &mut Engine, id: u64, payload: Payload<'_>) {
    let Some(t) = e.tracking.clients.get_mut(&id) else {
        return;
    };
    let own_proto = e.tracking.conns.get(&id).copied().unwrap_or_default();
    let mut target = id;
    let redirected = t.redirect != 0;
    if redirected {
        if !e.tracking.conns.contains_key(&t.redirect) {
            t.broken_redir = true;
            if own_proto == Proto::Resp3 {
                let mut bytes = Vec::with_capacity(48);
                let mut w = ReplyWriter::new(&mut bytes, Proto::Resp3);
                w.push(2);
                w.bulk(b"tracking-redir-broken");
                w.integer(t.redirect as i64);
                deliver(e, id, bytes);
            }
            return;
        }
        target = t.redirect;
    }
    let proto = e.tracking.proto_of(target);
    let mut bytes = Vec::with_capacity(64);
    let mut w = ReplyWriter::new(&mut bytes, proto);
    if proto == Proto::Resp3 {
        w.push(2);
        w.bulk(b"invalidate");
    } else if redirected && e.pubsub.is_subscribed(target) {
        w.array(3);
        w.bulk(b"message");
        w.bulk(CHANNEL);
    } else {
        return;
    }
    match payload {
        Payload::Keys(keys) => {
            w.array(keys.len());
            for k in keys {
                w.bulk(k);
            }
        }
        Payload::Encoded(b) => bytes.extend_from_slice(b),
        Payload::Null => ReplyWriter::new(&mut bytes, own_proto).null(),
    }
    deliver(e, target, bytes);
}

fn deliver(e: &mut Engine, client_id: u64, bytes: Vec<u8>) {
    e.deliveries.push(Delivery {
        client_id,
        bytes,
        unblock: false,
    });
}

/// Sends what waited for the running client's reply (redis
/// `trackingHandlePendingKeyInvalidations`).
fn send_pending(e: &mut Engine) {
    if e.tracking.pending.is_empty() {
        return;
    }
    let current = e.tracking.current;
    for p in std::mem::take(&mut e.tracking.pending) {
        match p {
            Pending::Key(k) => send(e, current, Payload::Keys(&[&k])),
            Pending::Flush => send(e, current, Payload::Null),
        }
    }
}

/// FLUSHDB, FLUSHALL, SWAPDB (redis `trackingInvalidateKeysOnFlush`): every tracking client
/// hears "all keys" (a null), the running client after its reply; the table is emptied.
pub fn flushed(e: &mut Engine) {
    if e.tracking.clients.is_empty() && e.tracking.table.is_empty() {
        return;
    }
    // Changes before the flush are told first.
    let current = e.tracking.current;
    drain_changes(e, current != 0);
    let mut ids: Vec<u64> = e.tracking.clients.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if id == current {
            e.tracking.pending.push(Pending::Flush);
        } else {
            send(e, id, Payload::Null);
        }
    }
    e.tracking.table.clear();
}

/// redis `trackingLimitUsedSlots`: while the table holds more than `tracking-table-max-keys`
/// keys, random keys are invalidated as if they changed (not broadcast), at most
/// 100 × (rounds that ended still over + 1) per call.
pub fn limit_used_slots(e: &mut Engine) {
    let max = e.config.tracking_table_max_keys;
    if max == 0 || e.tracking.table.len() as u64 <= max {
        e.tracking.limit_rounds = 0;
        return;
    }
    let mut effort = 100 * (u64::from(e.tracking.limit_rounds) + 1);
    while effort > 0 && !e.tracking.table.is_empty() {
        effort -= 1;
        // As if it changed, without BCAST (redis `trackingInvalidateKey(…, 0)`).
        let r = e.ks.next_random();
        if let Some((key, ids)) = e.tracking.table.remove_random(r) {
            tell(e, key.as_bytes(), &ids, false);
        }
        if e.tracking.table.len() as u64 <= max {
            e.tracking.limit_rounds = 0;
            return;
        }
    }
    e.tracking.limit_rounds += 1;
}

/// redis `trackingBroadcastInvalidationMessages`: each prefix's changed keys (sorted) to its
/// clients, without the keys a NOLOOP client changed itself.
fn broadcast(e: &mut Engine) {
    if e.tracking.prefixes.is_empty() {
        return;
    }
    let mut sends: Vec<(u64, Vec<u8>)> = Vec::new();
    for bs in e.tracking.prefixes.values_mut() {
        if bs.keys.is_empty() {
            continue;
        }
        let keys = std::mem::take(&mut bs.keys);
        let all = encode_keys(&keys, None);
        for &id in &bs.clients {
            let noloop = e.tracking.clients.get(&id).is_some_and(|t| t.noloop);
            if noloop {
                if keys.values().any(|&m| m != id) {
                    sends.push((id, encode_keys(&keys, Some(id))));
                }
            } else {
                sends.push((id, all.clone()));
            }
        }
    }
    for (id, proto) in sends {
        send(e, id, Payload::Encoded(&proto));
    }
}

/// redis `trackingBuildBroadcastReply`: `*N` and the keys, skipping those `skip` changed.
fn encode_keys(keys: &BTreeMap<Box<[u8]>, u64>, skip: Option<u64>) -> Vec<u8> {
    let kept = || keys.iter().filter(move |(_, m)| Some(**m) != skip);
    let mut out = Vec::with_capacity(16 + keys.keys().map(|k| k.len() + 12).sum::<usize>());
    let mut w = ReplyWriter::new(&mut out, Proto::Resp2);
    w.array(kept().count());
    for (k, _) in kept() {
        w.bulk(k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::Config;

    fn conn(e: &mut Engine, id: u64) -> Client {
        let mut c = Client {
            id,
            ..Client::default()
        };
        e.init_client(&mut c);
        c
    }

    fn run(e: &mut Engine, c: &mut Client, args: &[&str]) -> Vec<u8> {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        e.exec(c, &argv, 1_000_000_000_000, &mut out);
        out
    }

    /// The bytes delivered to `id` since the last call, in order.
    fn delivered(e: &mut Engine, id: u64) -> Vec<u8> {
        let mut all = Vec::new();
        e.take_deliveries(&mut all);
        all.into_iter()
            .filter(|d| d.client_id == id)
            .flat_map(|d| d.bytes)
            .collect()
    }

    const INV_K: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";

    #[test]
    fn nobody_tracking_logs_nothing() {
        let mut e = Engine::new(Config::default());
        let mut a = conn(&mut e, 1);
        run(&mut e, &mut a, &["SET", "k", "1"]);
        assert!(e.ks.tracked.is_none());
        run(&mut e, &mut a, &["CLIENT", "TRACKING", "ON"]);
        assert!(e.ks.tracked.is_some());
        run(&mut e, &mut a, &["CLIENT", "TRACKING", "OFF"]);
        assert!(e.ks.tracked.is_none());
    }

    #[test]
    fn reads_are_remembered_and_writes_told_once() {
        let mut e = Engine::new(Config::default());
        let mut t = conn(&mut e, 1);
        let mut w = conn(&mut e, 2);
        run(&mut e, &mut t, &["HELLO", "3"]);
        assert_eq!(
            run(&mut e, &mut t, &["CLIENT", "TRACKING", "ON"]),
            b"+OK\r\n"
        );
        run(&mut e, &mut t, &["GET", "k"]);
        assert_eq!((e.tracking.total_keys(), e.tracking.total_items()), (1, 1));
        run(&mut e, &mut w, &["SET", "k", "1"]);
        assert_eq!(delivered(&mut e, 1), INV_K);
        assert_eq!(e.tracking.total_keys(), 0);
        run(&mut e, &mut w, &["SET", "k", "2"]);
        assert!(delivered(&mut e, 1).is_empty());
        // The client's own write: the push follows the reply (a delivery, after `out`).
        run(&mut e, &mut t, &["GET", "k"]);
        assert_eq!(run(&mut e, &mut t, &["DEL", "k"]), b":1\r\n");
        assert_eq!(delivered(&mut e, 1), INV_K);
        // Gone: its ids stay in the table until the key changes, then nothing is sent.
        let mut other = conn(&mut e, 3);
        run(&mut e, &mut other, &["CLIENT", "TRACKING", "ON"]);
        run(&mut e, &mut t, &["GET", "k"]);
        e.client_closed(1);
        assert_eq!(e.tracking.total_items(), 1);
        run(&mut e, &mut w, &["SET", "k", "3"]);
        assert!(delivered(&mut e, 1).is_empty());
        assert_eq!(e.tracking.total_items(), 0);
        // The last tracking client leaves: the table, all stale, is dropped.
        run(&mut e, &mut t, &["GET", "k"]);
        e.client_closed(3);
        assert_eq!((e.tracking.total_keys(), e.tracking.total_items()), (0, 0));
    }

    #[test]
    fn bcast_batches_a_command_per_prefix_without_noloop_keys() {
        let mut e = Engine::new(Config::default());
        let mut t = conn(&mut e, 1);
        let mut w = conn(&mut e, 2);
        run(&mut e, &mut t, &["HELLO", "3"]);
        run(
            &mut e,
            &mut t,
            &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "NOLOOP"],
        );
        run(&mut e, &mut w, &["MSET", "ab", "1", "aa", "1", "b", "1"]);
        assert_eq!(
            delivered(&mut e, 1),
            b">2\r\n$10\r\ninvalidate\r\n*2\r\n$2\r\naa\r\n$2\r\nab\r\n"
        );
        run(&mut e, &mut t, &["SET", "ax", "1"]);
        assert!(delivered(&mut e, 1).is_empty());
    }

    #[test]
    fn the_table_limit_invalidates_random_keys() {
        let mut e = Engine::new(Config::default());
        let mut t = conn(&mut e, 1);
        run(&mut e, &mut t, &["HELLO", "3"]);
        run(&mut e, &mut t, &["CLIENT", "TRACKING", "ON"]);
        let keys: Vec<String> = (0..250).map(|i| format!("k{i}")).collect();
        for k in &keys {
            run(&mut e, &mut t, &["GET", k]);
        }
        e.config.tracking_table_max_keys = 1;
        // 100 keys per round, then 200: Redis's growing effort.
        e.cron(1_000_000_000_000);
        assert_eq!(e.tracking.total_keys(), 150);
        e.cron(1_000_000_000_000);
        assert_eq!(e.tracking.total_keys(), 1);
        let pushes = delivered(&mut e, 1);
        assert_eq!(
            pushes.windows(10).filter(|w| w == b"invalidate").count(),
            249
        );
    }

    #[test]
    fn broadcast_reply_skips_own_keys() {
        let mut keys = BTreeMap::new();
        keys.insert(b"b".to_vec().into_boxed_slice(), 7);
        keys.insert(b"a".to_vec().into_boxed_slice(), 0);
        assert_eq!(encode_keys(&keys, None), b"*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(encode_keys(&keys, Some(7)), b"*1\r\n$1\r\na\r\n");
    }
}
