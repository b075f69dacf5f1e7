//! The EXEC of a transaction whose commands (or WATCHed keys) live on several instances
//! (docs/transactions.md). Pure: a state machine fed with reply frames; the event loop sends
//! what it asks for on the client's dedicated connections.
//!
//! Each instance already holds its part of the transaction: a `MULTI` and the commands
//! queued on the client's dedicated connection to it (and/or its WATCH), exactly as a
//! single-instance transaction. `EXEC` then:
//!
//! 1. **Locks**, one instance after the other in ascending instance order: `TXLOCK` on the
//!    instance's dedicated connection locks the keys of its queued commands and its watched
//!    keys (engine `txlock`), waiting while another transaction holds one; its reply says
//!    whether a watched key changed or a queued command was refused. Always taking locks in
//!    the same order, no two transactions wait for each other in a cycle.
//! 2. **Decides**: a refused command anywhere → `EXECABORT` for the whole; a changed watched
//!    key anywhere → the null reply; the instance reporting it is the last one locked.
//! 3. **Commits**: `EXEC` (or `UNWATCH` where only keys were watched) then `TXUNLOCK` on every
//!    instance at once, or **aborts**: `DISCARD` (or `UNWATCH`) then `TXUNLOCK`.
//! 4. **Answers** one array: the replies of the client's commands in the order it queued
//!    them, taken from the instances' EXEC arrays (a command split over instances — MGET,
//!    MSET, DEL, EXISTS, UNLINK, TOUCH — merged as outside a transaction).
//!
//! Every lock is taken before the first is released (two-phase locking), so the outcome is
//! that of some serial order of the transactions and every other command.

use crate::split::{self, Merge};

/// Longest a transaction's locks may be held (the engines release them past it and refuse
/// the late EXEC).
pub const LOCK_TIMEOUT_MS: u32 = 10_000;

/// Reply-slot parts at or above this are the coordinator's own frames (below
/// `crate::spread::UNBLOCK_PART`): `COORD_PART + 4 * engine + step`.
pub const COORD_PART: u32 = 1 << 30;
const STEP_LOCK: u32 = 0;
const STEP_END: u32 = 1;
const STEP_UNLOCK: u32 = 2;

/// Where one queued command's reply comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Element `index` of `instance`'s EXEC array.
    One { instance: usize, index: usize },
    /// A command split over instances: each part's element, merged.
    Split {
        parts: Vec<(usize, usize)>,
        merge: Merge,
    },
}

/// One instance taking part.
#[derive(Debug)]
pub struct Engine {
    pub instance: usize,
    /// The client's dedicated connection to it (slab id).
    pub conn: usize,
    /// A MULTI was sent there (else only WATCH).
    pub multi: bool,
    end_reply: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq)]
enum Phase {
    /// Every instance at once, `TXLOCK … NOWAIT`: the replies so far.
    Trying(Vec<Option<Vec<u8>>>),
    Locking,
    Ending,
}

/// One EXEC in progress (at most one per client: its lane holds later requests).
#[derive(Debug)]
pub struct Coord {
    /// The client's reply slot.
    pub seq: u64,
    engines: Vec<Engine>,
    order: Vec<Entry>,
    resp3: bool,
    phase: Phase,
    /// Engines locked so far (the next TXLOCK goes to `engines[locked]`).
    locked: usize,
    /// Set when the transaction will not run: the reply.
    abort: Option<Vec<u8>>,
    /// Frames still awaited while ending.
    awaiting: usize,
    /// Requests to send: (dedicated connection, request, part; `None`: reply dropped).
    pub outbox: Vec<(usize, Vec<u8>, Option<u32>)>,
}

/// A `TXLOCK … NOWAIT` reply of instance `engine` while trying every instance at once:
/// every reply once the last one is in.
fn record_try(
    replies: &mut Vec<Option<Vec<u8>>>,
    engine: usize,
    step: u32,
    frame: &[u8],
) -> Option<Vec<Option<Vec<u8>>>> {
    if step == STEP_LOCK
        && let Some(slot) = replies.get_mut(engine)
    {
        *slot = Some(frame.to_vec());
    }
    replies
        .iter()
        .all(Option::is_some)
        .then(|| std::mem::take(replies))
}

fn request(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_request(&mut out, args);
    out
}

impl Coord {
    /// Starts the EXEC: `engines` in any order (sorted here), `order` the queued commands.
    pub fn start(seq: u64, mut engines: Vec<Engine>, order: Vec<Entry>, resp3: bool) -> Coord {
        engines.sort_by_key(|e| e.instance);
        let mut c = Coord {
            seq,
            engines,
            order,
            resp3,
            phase: Phase::Locking,
            locked: 0,
            abort: None,
            awaiting: 0,
            outbox: Vec::new(),
        };
        if c.engines.len() > 1 {
            c.try_all();
        } else {
            c.lock_next();
        }
        c
    }

    /// Every instance's locks at once, without waiting: one round trip when no other
    /// transaction holds a key; else the locks taken are given back and taken again in
    /// instance order, waiting.
    fn try_all(&mut self) {
        let timeout = LOCK_TIMEOUT_MS.to_string();
        for (i, e) in self.engines.iter().enumerate() {
            self.outbox.push((
                e.conn,
                request(&["TXLOCK", &timeout, "NOWAIT"]),
                Some(COORD_PART + 4 * i as u32 + STEP_LOCK),
            ));
        }
        self.phase = Phase::Trying(vec![None; self.engines.len()]);
    }

    /// Every `TXLOCK … NOWAIT` answered: commit, abort, or take the locks in order.
    fn tried(&mut self, replies: Vec<Option<Vec<u8>>>) {
        let mut busy = false;
        for (i, r) in replies.iter().enumerate() {
            let frame = r.as_deref().unwrap_or(b"-ERR no reply\r\n");
            match int_of(frame) {
                None if frame.starts_with(b"-ERR unknown command") => {
                    self.abort
                        .get_or_insert_with(|| no_txlock(self.engines[i].instance));
                }
                None => {
                    self.abort.get_or_insert_with(|| frame.to_vec());
                }
                Some(4) => busy = true,
                Some(f) => self.flags(f),
            }
        }
        if self.abort.is_some() || !busy {
            self.locked = self.engines.len();
            return self.end();
        }
        // Give back what was taken, then lock in order (the TXUNLOCKs go first on each
        // connection).
        for (i, r) in replies.iter().enumerate() {
            if r.as_deref().and_then(int_of) != Some(4) {
                let conn = self.engines[i].conn;
                self.outbox.push((conn, request(&["TXUNLOCK"]), None));
            }
        }
        self.phase = Phase::Locking;
        self.locked = 0;
        self.lock_next();
    }

    /// Records a `TXLOCK` reply's flags: the transaction's outcome if it cannot run.
    fn flags(&mut self, f: i64) {
        if self.abort.is_some() {
            return;
        }
        if f & 2 != 0 {
            self.abort = Some(crate::tx::EXECABORT.to_vec());
        } else if f & 1 != 0 {
            self.abort = Some(if self.resp3 {
                b"_\r\n".to_vec()
            } else {
                b"*-1\r\n".to_vec()
            });
        }
    }

    pub fn engine(instance: usize, conn: usize, multi: bool) -> Engine {
        Engine {
            instance,
            conn,
            multi,
            end_reply: None,
        }
    }

    fn lock_next(&mut self) {
        let e = &self.engines[self.locked];
        let timeout = LOCK_TIMEOUT_MS.to_string();
        self.outbox.push((
            e.conn,
            request(&["TXLOCK", &timeout]),
            Some(COORD_PART + 4 * self.locked as u32 + STEP_LOCK),
        ));
    }

    /// Ends on every instance: EXEC (commit) or DISCARD, or UNWATCH where nothing was
    /// queued; then TXUNLOCK.
    fn end(&mut self) {
        self.phase = Phase::Ending;
        let commit = self.abort.is_none();
        for (i, e) in self.engines.iter().enumerate() {
            let end = match (e.multi, commit) {
                (true, true) => "EXEC",
                (true, false) => "DISCARD",
                (false, _) => "UNWATCH",
            };
            let base = COORD_PART + 4 * i as u32;
            self.outbox
                .push((e.conn, request(&[end]), Some(base + STEP_END)));
            self.outbox
                .push((e.conn, request(&["TXUNLOCK"]), Some(base + STEP_UNLOCK)));
            self.awaiting += 2;
        }
    }

    /// A frame for `part` arrived: `Some(reply)` once the client's reply is decided and
    /// every instance has ended.
    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        let rel = part.checked_sub(COORD_PART)?;
        let (engine, step) = ((rel / 4) as usize, rel % 4);
        if let Phase::Trying(replies) = &mut self.phase {
            if let Some(all) = record_try(replies, engine, step, frame) {
                self.tried(all);
            }
            return None;
        }
        match (&self.phase, step) {
            (Phase::Locking, STEP_LOCK) if engine == self.locked => {
                let flags = frame
                    .strip_prefix(b":")
                    .and_then(|f| f.strip_suffix(b"\r\n"))
                    .and_then(resp::parse_i64);
                match flags {
                    None if frame.starts_with(b"-ERR unknown command") => {
                        self.abort = Some(no_txlock(self.engines[engine].instance));
                    }
                    None => self.abort = Some(frame.to_vec()),
                    Some(f) if f & 2 != 0 => {
                        self.abort = Some(crate::tx::EXECABORT.to_vec());
                    }
                    Some(f) if f & 1 != 0 => {
                        self.abort = Some(if self.resp3 {
                            b"_\r\n".to_vec()
                        } else {
                            b"*-1\r\n".to_vec()
                        });
                    }
                    Some(_) => {}
                }
                self.locked += 1;
                if self.abort.is_none() && self.locked < self.engines.len() {
                    self.lock_next();
                } else {
                    self.end();
                }
                None
            }
            (Phase::Ending, STEP_END | STEP_UNLOCK) => {
                if step == STEP_END
                    && let Some(e) = self.engines.get_mut(engine)
                {
                    e.end_reply = Some(frame.to_vec());
                }
                self.awaiting = self.awaiting.saturating_sub(1);
                (self.awaiting == 0).then(|| self.reply())
            }
            _ => None,
        }
    }

    /// The client's reply, once every instance has ended.
    fn reply(&self) -> Vec<u8> {
        if let Some(abort) = &self.abort {
            return abort.clone();
        }
        let ends: Vec<(usize, &[u8])> = self
            .engines
            .iter()
            .filter(|e| e.multi)
            .map(|e| {
                let reply: &[u8] = e.end_reply.as_deref().unwrap_or(b"-ERR no reply\r\n");
                (e.instance, reply)
            })
            .collect();
        assemble(&self.order, &ends)
    }
}

/// The client's EXEC reply from each instance's EXEC reply (`ends`: instance, reply): the
/// replies of the queued commands in the client's order (`order`), split ones merged; or
/// the partial failure when an instance's EXEC did not answer an array.
pub fn assemble(order: &[Entry], ends: &[(usize, &[u8])]) -> Vec<u8> {
    // Each instance's EXEC array, split into its elements.
    let mut elements: Vec<(usize, Vec<&[u8]>)> = Vec::new();
    let mut failed: Vec<(usize, &[u8])> = Vec::new();
    for &(instance, reply) in ends {
        match array_elements(reply) {
            Some(items) => elements.push((instance, items)),
            None => failed.push((instance, reply)),
        }
    }
    if !failed.is_empty() {
        return partial_failure(&failed, elements.len());
    }
    let element = |instance: usize, index: usize| -> &[u8] {
        elements
            .iter()
            .find(|(i, _)| *i == instance)
            .and_then(|(_, items)| items.get(index).copied())
            .unwrap_or(b"-ERR proxy: missing transaction reply\r\n")
    };
    let mut out = Vec::new();
    split::push_array_header(&mut out, order.len());
    for entry in order {
        match entry {
            Entry::One { instance, index } => out.extend_from_slice(element(*instance, *index)),
            Entry::Split { parts, merge } => {
                let replies: Vec<&[u8]> = parts.iter().map(|&(i, idx)| element(i, idx)).collect();
                split::merge(merge, &replies, &mut out);
            }
        }
    }
    out
}

/// The reply when an instance has no `TXLOCK` (the proxy in front of servers other than
/// recached engines): Redis Cluster's refusal, saying why.
fn no_txlock(instance: usize) -> Vec<u8> {
    format!(
        "-CROSSSLOT Keys in request don't hash to the same slot (instance {instance} cannot \
         lock keys for a transaction spanning instances: it is not a recached engine)\r\n"
    )
    .into_bytes()
}

/// The error when some instances could not run their part after every lock was taken
/// (an instance died, or a lock outlived its timeout): the others' parts did run.
fn partial_failure(failed: &[(usize, &[u8])], ran: usize) -> Vec<u8> {
    let (instance, reply) = failed[0];
    let why = String::from_utf8_lossy(reply.strip_prefix(b"-").unwrap_or(reply))
        .trim_end()
        .to_string();
    let msg = if ran == 0 {
        format!("-ERR transaction not run: instance {instance}: {why}\r\n")
    } else {
        format!(
            "-ERR transaction partly run: {ran} instance(s) ran their commands, instance \
             {instance} did not: {why}\r\n"
        )
    };
    msg.into_bytes()
}

/// The elements of a RESP array reply (`*N` then N frames); `None` for anything else.
pub fn array_elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
    let rest = reply.strip_prefix(b"*")?;
    let end = rest.iter().position(|&b| b == b'\r')?;
    let n = usize::try_from(resp::parse_i64(&rest[..end])?).ok()?;
    let mut at = 1 + end + 2;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let len = resp::frame_len(reply.get(at..)?).ok()??;
        items.push(&reply[at..at + len]);
        at += len;
    }
    Some(items)
}

/// A blocking command whose keys span instances (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP,
/// BZPOPMIN, BZPOPMAX, BZMPOP): tried gathered (`Gather`: inside the target's MULTI it does
/// not block, and answers its null when nothing is there); while nothing is there and time
/// remains, the proxy waits on every instance of the keys it pops from with `TXWAIT` (which
/// reads and changes nothing) for at most [`WAIT_SLICE_MS`], then tries again. So it is
/// served within one slice of data arriving on another instance than the one that woke it,
/// and at once when it wakes the only one; a timeout answers the command's own null.
#[derive(Debug)]
pub struct Wait {
    pub seq: u64,
    engines: Vec<(usize, usize, Vec<Vec<u8>>)>,
    /// Per instance: its connection and the keys to wait on there.
    sources: Vec<(usize, Vec<Vec<u8>>)>,
    request: Vec<u8>,
    kind: &'static str,
    resp3: bool,
    deadline: Option<std::time::Instant>,
    attempt: Option<Gather>,
    waiting: usize,
    /// A `TXWAIT` of this round answered that a key holds data.
    woken: bool,
    /// `CLIENT UNBLOCK` of the client: `Some(true)` for ERROR. The wait ends at the end of
    /// its slice (at most [`WAIT_SLICE_MS`]) with a null, or `-UNBLOCKED`.
    unblocked: Option<bool>,
    pub outbox: Vec<(usize, Vec<u8>, Option<u32>)>,
}

/// Longest single wait on one instance before trying again.
pub const WAIT_SLICE_MS: u64 = 100;

/// Parts of a wait's `TXWAIT`s (the gathered attempts use `COORD_PART` + …).
const WAIT_PART: u32 = COORD_PART + (1 << 29);

impl Wait {
    /// `engines`: (instance, connection, the command's keys there); `sources`: the
    /// (connection, keys) to wait on; `timeout_ms` 0 = forever.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        seq: u64,
        engines: Vec<(usize, usize, Vec<Vec<u8>>)>,
        sources: Vec<(usize, Vec<Vec<u8>>)>,
        request: Vec<u8>,
        zset: bool,
        timeout_ms: u64,
        resp3: bool,
    ) -> Wait {
        let deadline = (timeout_ms > 0)
            .then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms));
        let mut w = Wait {
            seq,
            engines,
            sources,
            request,
            kind: if zset { "ZSET" } else { "LIST" },
            resp3,
            deadline,
            attempt: None,
            waiting: 0,
            woken: false,
            unblocked: None,
            outbox: Vec::new(),
        };
        w.try_once();
        w
    }

    fn try_once(&mut self) {
        let engines = self
            .engines
            .iter()
            .map(|(instance, conn, keys)| GatherEngine {
                instance: *instance,
                conn: *conn,
                multi: false,
                keys: keys.clone(),
            })
            .collect();
        let mut g = Gather::start(
            self.seq,
            engines,
            vec![self.request.clone()],
            false,
            self.resp3,
        );
        self.outbox.append(&mut g.outbox);
        self.attempt = Some(g);
    }

    fn wait(&mut self) {
        let slice = match self.deadline {
            None => WAIT_SLICE_MS,
            Some(d) => (d
                .saturating_duration_since(std::time::Instant::now())
                .as_millis() as u64)
                .clamp(1, WAIT_SLICE_MS),
        };
        let secs = format!("{}.{:03}", slice / 1000, slice % 1000);
        for (conn, keys) in &self.sources {
            let mut args: Vec<&[u8]> = vec![b"TXWAIT", self.kind.as_bytes(), secs.as_bytes()];
            args.extend(keys.iter().map(Vec::as_slice));
            self.outbox.push((*conn, encode(&args), Some(WAIT_PART)));
        }
        self.waiting = self.sources.len();
    }

    /// `CLIENT UNBLOCK` of its client (`error`: ERROR): it ends at the end of the current
    /// slice, as on a timeout.
    pub fn client_unblock(&mut self, error: bool) {
        self.unblocked = Some(error);
        self.deadline = Some(std::time::Instant::now());
    }

    fn is_null(reply: &[u8]) -> bool {
        matches!(reply, b"*-1\r\n" | b"$-1\r\n" | b"_\r\n")
    }

    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        if part == WAIT_PART {
            self.waiting = self.waiting.saturating_sub(1);
            self.woken |= frame == b":1\r\n";
            if self.waiting == 0 {
                let timed_out = self
                    .deadline
                    .is_some_and(|d| std::time::Instant::now() >= d);
                // Nothing arrived during the slice: wait again without trying (a key that
                // fills between a try and the next wait is seen by TXWAIT at once).
                if self.woken || timed_out || frame.first() == Some(&b'-') {
                    self.woken = false;
                    self.try_once();
                } else {
                    self.wait();
                }
            }
            return None;
        }
        let g = self.attempt.as_mut()?;
        let done = g.answered(part, frame);
        self.outbox.append(&mut g.outbox);
        let reply = done?;
        self.attempt = None;
        let timed_out = self
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d);
        if Self::is_null(&reply) && !timed_out {
            self.wait();
            return None;
        }
        if self.unblocked == Some(true) && Self::is_null(&reply) {
            return Some(b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_vec());
        }
        Some(reply)
    }
}

/// A client's coordinated execution in progress (at most one: its lane holds later
/// requests until it is answered).
#[derive(Debug)]
pub enum Coordinator {
    Exec(Coord),
    Gather(Gather),
    Wait(Wait),
    /// A transaction over the shared links (`crate::txshared`); its outbox names links.
    Shared(crate::txshared::SharedTx),
}

impl Coordinator {
    /// Its client's connections may close now: a blocking wait between attempts holds no
    /// lock and has changed nothing (its `TXWAIT`s end with their connections). Everything
    /// else finishes first.
    pub fn closable(&self) -> bool {
        matches!(self, Coordinator::Wait(w) if w.attempt.is_none())
    }

    /// An EXEC waiting for locks another transaction holds (the ordered acquisition after
    /// a conflict): it may take a while, so replies before it are not kept back for it.
    /// The wait of a blocking command over several instances, if this is one.
    pub fn wait_mut(&mut self) -> Option<&mut Wait> {
        match self {
            Coordinator::Wait(w) => Some(w),
            _ => None,
        }
    }

    pub fn contended(&self) -> bool {
        matches!(self, Coordinator::Exec(c) if c.phase == Phase::Locking)
    }

    pub fn seq(&self) -> u64 {
        match self {
            Coordinator::Exec(c) => c.seq,
            Coordinator::Gather(g) => g.seq,
            Coordinator::Wait(w) => w.seq,
            Coordinator::Shared(t) => t.seq,
        }
    }

    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        match self {
            Coordinator::Exec(c) => c.answered(part, frame),
            Coordinator::Gather(g) => g.answered(part, frame),
            Coordinator::Wait(w) => w.answered(part, frame),
            Coordinator::Shared(t) => t.answered(part, frame),
        }
    }

    pub fn outbox(&mut self) -> &mut Vec<(usize, Vec<u8>, Option<u32>)> {
        match self {
            Coordinator::Exec(c) => &mut c.outbox,
            Coordinator::Gather(g) => &mut g.outbox,
            Coordinator::Wait(w) => &mut w.outbox,
            Coordinator::Shared(t) => &mut t.outbox,
        }
    }
}

/// Most times a script is run again for undeclared keys of other instances before it gets
/// Redis Cluster's error.
pub const SCRIPT_RETRIES: u32 = 8;

/// A client's scripts on script links, in request order, and the one to run again.
///
/// Through the proxy a script goes to the instance of its declared keys (any instance when
/// it declares none). When it touches a key of another instance it did not declare, before
/// writing anything, the instance answers `-TXNEEDKEY <key in hex>` (engine `TXDISCOVER`,
/// set on the script links); the proxy then runs it gathered (`Gather`) with its declared
/// keys and every key discovered so far, as many times as it discovers new ones, up to
/// [`SCRIPT_RETRIES`]. A script that touches such a key after its first write gets Redis
/// Cluster's error, as on a cluster node.
#[derive(Debug, Default)]
pub struct Scripts {
    /// (reply slot, request) of each script in flight on a script link.
    pub inflight: std::collections::VecDeque<(u64, Vec<u8>)>,
    /// Scripts to run again, one at a time, in request order (the front one runs).
    pub retries: std::collections::VecDeque<ScriptRetry>,
}

#[derive(Debug)]
pub struct ScriptRetry {
    pub seq: u64,
    pub request: Vec<u8>,
    pub keys: Vec<Vec<u8>>,
    pub attempts: u32,
    /// The gathered run is under way.
    pub started: bool,
}

/// The keys a `-TXNEEDKEY <hex>[,<hex>…] …` reply asks for (one from a script, every key
/// SORT's patterns name elsewhere: engine `types/sort.rs`).
pub fn needed_keys(reply: &[u8]) -> Option<Vec<Vec<u8>>> {
    let rest = reply.strip_prefix(b"-TXNEEDKEY ")?;
    let list = &rest[..rest.iter().position(|&b| b == b' ' || b == b'\r')?];
    list.split(|&b| b == b',').map(unhex).collect()
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

/// Redis Cluster's error for a script that touched an undeclared key of another instance
/// too late (after a write) or too often: the `-TXNEEDKEY …` text rewritten. For SORT (its
/// `-TXNEEDKEY … BY|GET`), Redis's refusal of that pattern in cluster mode.
pub fn non_local_error(reply: &[u8]) -> Vec<u8> {
    let sort = |opt: &str| {
        format!(
            "-ERR {opt} option of SORT denied in Cluster mode when keys formed by the pattern \
             may be in different slots.\r\n"
        )
        .into_bytes()
    };
    if reply.ends_with(b" BY\r\n") {
        return sort("BY");
    }
    if reply.ends_with(b" GET\r\n") {
        return sort("GET");
    }
    let tail = reply
        .windows(8)
        .position(|w| w == b" script:")
        .map_or(&b"\r\n"[..], |i| &reply[i..]);
    let mut out = b"-ERR Script attempted to access a non local key in a cluster node".to_vec();
    out.extend_from_slice(tail);
    out
}

impl Scripts {
    /// A reply for slot `seq` arrived: whether it asks to run a script again (then
    /// [`Self::retry`] is set and the slot must not be filled yet).
    pub fn answered(&mut self, seq: u64, reply: &[u8]) -> bool {
        while self.inflight.front().is_some_and(|f| f.0 < seq) {
            self.inflight.pop_front();
        }
        if self.inflight.front().is_none_or(|f| f.0 != seq) {
            return false;
        }
        let (seq, request) = self.inflight.pop_front().expect("front checked");
        let Some(needed) = needed_keys(reply) else {
            return false;
        };
        let mut keys = crate::route::keys_of_request(&request);
        keys.extend(needed);
        self.retries.push_back(ScriptRetry {
            seq,
            request,
            keys,
            attempts: 1,
            started: false,
        });
        true
    }

    /// The script to start running again now, if any.
    pub fn next_retry(&mut self) -> Option<&mut ScriptRetry> {
        self.retries.front_mut().filter(|r| !r.started)
    }

    /// The gathered run of the script being retried answered `reply`: `Ok(true)` if it
    /// runs again (another key discovered), `Ok(false)` if `reply` is the answer; `Err`
    /// holds the answer to give instead (Redis Cluster's error, once retries are used up).
    pub fn retried(&mut self, seq: u64, reply: &[u8]) -> Result<bool, Vec<u8>> {
        let Some(r) = self.retries.front_mut().filter(|r| r.seq == seq) else {
            return Ok(false);
        };
        let Some(needed) = needed_keys(reply) else {
            self.retries.pop_front();
            return Ok(false);
        };
        let new: Vec<Vec<u8>> = needed.into_iter().filter(|k| !r.keys.contains(k)).collect();
        if r.attempts >= SCRIPT_RETRIES || new.is_empty() {
            self.retries.pop_front();
            return Err(non_local_error(reply));
        }
        r.keys.extend(new);
        r.attempts += 1;
        r.started = false;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(c: &mut Coord) -> Vec<(usize, String, u32)> {
        c.outbox
            .drain(..)
            .map(|(conn, r, p)| (conn, String::from_utf8_lossy(&r).into_owned(), p.unwrap()))
            .collect()
    }

    fn answer_all(c: &mut Coord, s: &[(usize, String, u32)], frame: &[u8]) -> Option<Vec<u8>> {
        let mut out = None;
        for (_, _, p) in s {
            out = c.answered(*p, frame);
        }
        out
    }

    #[test]
    fn locks_everywhere_at_once_then_execs_everywhere() {
        let engines = vec![Coord::engine(1, 11, true), Coord::engine(0, 10, true)];
        let order = vec![
            Entry::One {
                instance: 1,
                index: 0,
            },
            Entry::One {
                instance: 0,
                index: 0,
            },
            Entry::Split {
                parts: vec![(0, 1), (1, 1)],
                merge: Merge::Sum,
            },
        ];
        let mut c = Coord::start(5, engines, order, false);
        let s = sent(&mut c);
        assert_eq!(s.len(), 2, "both instances at once");
        assert!(
            s.iter()
                .all(|x| x.1.contains("TXLOCK") && x.1.contains("NOWAIT"))
        );
        assert_eq!(answer_all(&mut c, &s, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 4);
        assert!(s[0].1.contains("EXEC") && s[1].1.contains("TXUNLOCK"));
        assert_eq!(s[0].0, 10, "instance 0 first");
        assert_eq!(c.answered(s[0].2, b"*2\r\n$1\r\na\r\n:1\r\n"), None);
        assert_eq!(c.answered(s[1].2, b"+OK\r\n"), None);
        assert_eq!(c.answered(s[2].2, b"*2\r\n:7\r\n:2\r\n"), None);
        let reply = c.answered(s[3].2, b"+OK\r\n").expect("done");
        assert_eq!(reply, b"*3\r\n:7\r\n$1\r\na\r\n:3\r\n");
    }

    #[test]
    fn a_busy_key_falls_back_to_locking_in_instance_order() {
        let engines = vec![Coord::engine(0, 10, true), Coord::engine(1, 11, true)];
        let mut c = Coord::start(5, engines, vec![], false);
        let s = sent(&mut c);
        c.answered(s[0].2, b":0\r\n");
        assert_eq!(c.answered(s[1].2, b":4\r\n"), None);
        // Instance 0's lock is given back (reply dropped), then it is locked again, waiting.
        let out: Vec<_> = c.outbox.drain(..).collect();
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].0, out[0].2), (10, None));
        assert!(String::from_utf8_lossy(&out[0].1).contains("TXUNLOCK"));
        let s: Vec<(usize, String, u32)> = out[1..]
            .iter()
            .map(|(conn, r, p)| (*conn, String::from_utf8_lossy(r).into_owned(), p.unwrap()))
            .collect();
        assert_eq!(s[0].0, 10);
        assert!(s[0].1.contains("TXLOCK") && !s[0].1.contains("NOWAIT"));
        assert_eq!(c.answered(s[0].2, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, 11);
        assert_eq!(c.answered(s[0].2, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 4, "EXEC and TXUNLOCK on both");
    }

    #[test]
    fn a_changed_watched_key_aborts() {
        let engines = vec![Coord::engine(0, 10, false), Coord::engine(1, 11, true)];
        let mut c = Coord::start(1, engines, vec![], true);
        let s = sent(&mut c);
        c.answered(s[0].2, b":1\r\n");
        assert_eq!(c.answered(s[1].2, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 4, "ends on both");
        assert!(s[0].1.contains("UNWATCH") && s[2].1.contains("DISCARD"));
        assert_eq!(answer_all(&mut c, &s, b"+OK\r\n").unwrap(), b"_\r\n");
    }

    #[test]
    fn a_refused_command_anywhere_is_execabort() {
        let engines = vec![Coord::engine(0, 10, true), Coord::engine(1, 11, true)];
        let mut c = Coord::start(1, engines, vec![], false);
        let s = sent(&mut c);
        c.answered(s[0].2, b":0\r\n");
        c.answered(s[1].2, b":2\r\n");
        let s = sent(&mut c);
        assert_eq!(
            answer_all(&mut c, &s, b"+OK\r\n").unwrap(),
            crate::tx::EXECABORT
        );
    }

    #[test]
    fn scripts_discover_keys_until_the_retries_are_used_up() {
        assert_eq!(
            needed_keys(b"-TXNEEDKEY 6230 script: x\r\n"),
            Some(vec![b"b0".to_vec()])
        );
        assert_eq!(
            needed_keys(b"-TXNEEDKEY 6230,,6231 BY\r\n"),
            Some(vec![b"b0".to_vec(), Vec::new(), b"b1".to_vec()])
        );
        assert_eq!(needed_keys(b"-TXNEEDKEY 623 BY\r\n"), None);
        assert_eq!(needed_keys(b"-ERR x\r\n"), None);
        let mut s = Scripts::default();
        let eval = |key: &str| {
            let mut r = Vec::new();
            resp::encode_request(&mut r, &["EVAL", "return 1", "1", key]);
            r
        };
        s.inflight.push_back((3, eval("a")));
        s.inflight.push_back((5, eval("k")));
        assert!(!s.answered(3, b":1\r\n"));
        assert!(s.answered(5, b"-TXNEEDKEY 6230 script: x\r\n"));
        let r = s.retries.front().unwrap();
        // The declared key, read from the request, then the one the instance asked for.
        assert_eq!(
            (r.seq, r.keys.clone()),
            (5, vec![b"k".to_vec(), b"b0".to_vec()])
        );
        assert_eq!(s.retried(5, b"-TXNEEDKEY 6231 script: x\r\n"), Ok(true));
        // The same key again: it is not the key's absence that fails the script.
        let e = s.retried(5, b"-TXNEEDKEY 6231 script: sha, on @user_script:1.\r\n");
        assert_eq!(
            e,
            Err(b"-ERR Script attempted to access a non local key in a cluster node script: sha, on @user_script:1.\r\n".to_vec())
        );
        assert!(s.retries.is_empty());
    }

    #[test]
    fn array_elements_splits_nested_frames() {
        let r = b"*3\r\n*2\r\n$1\r\na\r\n$-1\r\n:5\r\n%1\r\n+k\r\n+v\r\n";
        let items = array_elements(r).unwrap();
        assert_eq!(
            items,
            vec![
                &b"*2\r\n$1\r\na\r\n$-1\r\n"[..],
                b":5\r\n",
                b"%1\r\n+k\r\n+v\r\n"
            ]
        );
        assert!(array_elements(b"*-1\r\n").is_none());
        assert!(array_elements(b"-ERR x\r\n").is_none());
    }
}

/// A key of another instance brought to a gathered command: (engine index, key, payload,
/// expiry), as fetched.
type Guest = (usize, Vec<u8>, Option<Vec<u8>>, i64);

/// The execution of commands whose keys live on several instances and cannot be split
/// (RENAME, SMOVE, SINTERSTORE, a script…, or a transaction holding one): **gathered** on one
/// instance (docs/transactions.md).
///
/// 1. **Locks** every instance at once without waiting (`TXLOCK … KEYS … [DUMP] NOWAIT`), as
///    [`Coord`] does: one round trip when no other transaction holds a key; else the locks
///    taken are given back and taken instance by instance in ascending order, waiting. Each
///    instance locks its keys of the unit (and its queued/watched keys), and every instance
///    but the target also returns its keys' payloads and expiries.
/// 2. **Runs** on the target (the highest instance owning a key): `TXGUEST` for the other
///    instances' keys, then one `MULTI`: each guest restored (`RESTORE … ABSTTL`), the unit's
///    commands as the client sent them, each guest dumped (`DUMP`, `PEXPIRETIME`) and deleted;
///    `EXEC`, `TXUNLOCK`. Streamed parts of a transaction are discarded first (their WATCH was
///    checked by `TXLOCK`, under the lock).
/// 3. **Writes back** each guest whose value or expiry changed to its owner (`RESTORE …
///    REPLACE ABSTTL`, or `DEL`), then `TXUNLOCK` there; the owner's write is what the feed,
///    keyspace notifications, WATCH and client-side caching see.
#[derive(Debug)]
pub struct Gather {
    pub seq: u64,
    engines: Vec<GatherEngine>,
    /// Index in `engines` of the instance that runs the unit.
    target: usize,
    unit: Vec<Vec<u8>>,
    /// A transaction's EXEC (the reply is the array of the unit's replies), else one command.
    in_multi: bool,
    resp3: bool,
    phase: GatherPhase,
    locked: usize,
    abort: Option<Vec<u8>>,
    /// The other instances' keys as fetched.
    guests: Vec<Guest>,
    result: Option<Vec<u8>>,
    write_failed: Option<(usize, Vec<u8>)>,
    awaiting: usize,
    pub outbox: Vec<(usize, Vec<u8>, Option<u32>)>,
}

#[derive(Debug)]
pub struct GatherEngine {
    pub instance: usize,
    pub conn: usize,
    /// MULTI was sent there (a streamed part of the transaction).
    pub multi: bool,
    /// The unit's keys it owns.
    pub keys: Vec<Vec<u8>>,
}

#[derive(Debug, PartialEq)]
enum GatherPhase {
    /// Every instance at once, `TXLOCK … NOWAIT`: the replies so far.
    Trying(Vec<Option<Vec<u8>>>),
    Locking,
    Aborting,
    Running,
    Writing,
}

const STEP_RUN: u32 = 1;
const STEP_WRITE: u32 = 3;

impl Gather {
    pub fn start(
        seq: u64,
        mut engines: Vec<GatherEngine>,
        unit: Vec<Vec<u8>>,
        in_multi: bool,
        resp3: bool,
    ) -> Gather {
        engines.sort_by_key(|e| e.instance);
        let target = engines
            .iter()
            .rposition(|e| !e.keys.is_empty())
            .unwrap_or(engines.len() - 1);
        let mut g = Gather {
            seq,
            engines,
            target,
            unit,
            in_multi,
            resp3,
            phase: GatherPhase::Locking,
            locked: 0,
            abort: None,
            guests: Vec::new(),
            result: None,
            write_failed: None,
            awaiting: 0,
            outbox: Vec::new(),
        };
        if g.engines.len() > 1 {
            let mut replies = vec![None; g.engines.len()];
            for (i, reply) in replies.iter_mut().enumerate() {
                if g.locks(i) {
                    g.lock(i, true);
                } else {
                    *reply = Some(b":0\r\n".to_vec());
                }
            }
            g.phase = GatherPhase::Trying(replies);
        } else {
            g.lock_or_run();
        }
        g
    }

    /// Whether instance `i` is locked before the run. Not the target of a lone command (or
    /// script): its keys are read and written inside the run's MULTI, which nothing can
    /// interleave, and its TXUNLOCK follows at once, so a lock there would only cost a round
    /// trip. Waiting for locks stays free of cycles: a gathered run holds locks only on
    /// instances below its target and waits only at its target (docs/transactions.md). A
    /// transaction's target is locked: its streamed part's WATCH is checked under the lock.
    fn locks(&self, i: usize) -> bool {
        i != self.target || self.in_multi || self.engines.len() == 1
    }

    /// Every `TXLOCK … NOWAIT` answered: run (or abort) with the locks taken, or give them
    /// back and take them in instance order.
    fn tried(&mut self, replies: Vec<Option<Vec<u8>>>) {
        let busy = |r: &Option<Vec<u8>>| r.as_deref().and_then(int_of) == Some(4);
        if !replies.iter().any(busy) {
            // In instance order, up to the first that says the unit will not run.
            for (i, r) in replies.iter().enumerate() {
                if self.abort.is_none() {
                    self.locked_reply(i, r.as_deref().unwrap_or(b"-ERR no reply\r\n"));
                }
            }
            self.locked = self.engines.len();
            return match self.abort {
                Some(_) => self.abort_all(),
                None => self.run(),
            };
        }
        for (i, r) in replies.iter().enumerate() {
            if !busy(r) && self.locks(i) {
                let conn = self.engines[i].conn;
                self.outbox.push((conn, request(&["TXUNLOCK"]), None));
            }
        }
        self.phase = GatherPhase::Locking;
        self.locked = 0;
        self.lock_or_run();
    }

    /// The next lock in instance order (waiting), or the run once every lock is held.
    fn lock_or_run(&mut self) {
        if self.locked < self.engines.len() && !self.locks(self.locked) {
            self.locked += 1;
        }
        if self.locked < self.engines.len() {
            self.lock(self.locked, false);
        } else {
            self.run();
        }
    }

    /// `TXLOCK` of instance `i`'s keys (`NOWAIT`: when trying every instance at once).
    fn lock(&mut self, i: usize, nowait: bool) {
        let e = &self.engines[i];
        let timeout = LOCK_TIMEOUT_MS.to_string();
        let n = e.keys.len().to_string();
        let mut args: Vec<&[u8]> = vec![b"TXLOCK", timeout.as_bytes()];
        if !e.keys.is_empty() {
            args.push(b"KEYS");
            args.push(n.as_bytes());
            args.extend(e.keys.iter().map(Vec::as_slice));
            if i != self.target {
                args.push(b"DUMP");
            }
        }
        if nowait {
            args.push(b"NOWAIT");
        }
        let mut req = Vec::new();
        resp::encode_request(&mut req, &args);
        self.outbox
            .push((e.conn, req, Some(COORD_PART + 4 * i as u32 + STEP_LOCK)));
    }

    fn part(i: usize, step: u32) -> Option<u32> {
        Some(COORD_PART + 4 * i as u32 + step)
    }

    /// Every instance drops its part and unlocks: the reply is `abort`.
    fn abort_all(&mut self) {
        self.phase = GatherPhase::Aborting;
        for (i, e) in self.engines.iter().enumerate() {
            let end = if e.multi { "DISCARD" } else { "UNWATCH" };
            self.outbox
                .push((e.conn, request(&[end]), Self::part(i, STEP_END)));
            self.outbox
                .push((e.conn, request(&["TXUNLOCK"]), Self::part(i, STEP_UNLOCK)));
            self.awaiting += 2;
        }
    }

    /// Every lock is held: run the unit on the target.
    fn run(&mut self) {
        self.phase = GatherPhase::Running;
        for (i, e) in self.engines.iter().enumerate() {
            if i != self.target && self.in_multi {
                let end = if e.multi { "DISCARD" } else { "UNWATCH" };
                self.outbox.push((e.conn, request(&[end]), None));
            }
        }
        let t = &self.engines[self.target];
        let conn = t.conn;
        let mut out: Vec<(Vec<u8>, Option<u32>)> = Vec::new();
        if t.multi {
            out.push((request(&["DISCARD"]), None));
        }
        // A lone script may discover undeclared keys (`Scripts`); inside a transaction it
        // gets Redis Cluster's error.
        out.push((
            request(&["TXDISCOVER", if self.in_multi { "OFF" } else { "ON" }]),
            None,
        ));
        if !self.guests.is_empty() {
            let mut args: Vec<&[u8]> = vec![b"TXGUEST"];
            args.extend(self.guests.iter().map(|g| g.1.as_slice()));
            let mut req = Vec::new();
            resp::encode_request(&mut req, &args);
            out.push((req, None));
        }
        out.push((request(&["MULTI"]), None));
        for (_, key, payload, expiry) in &self.guests {
            out.push((encode(&[b"DEL", key]), None));
            if let Some(p) = payload {
                let at = (*expiry).max(0).to_string();
                out.push((
                    encode(&[b"RESTORE", key, at.as_bytes(), p, b"ABSTTL"]),
                    None,
                ));
            }
        }
        for raw in &self.unit {
            out.push((raw.clone(), None));
        }
        for (_, key, _, _) in &self.guests {
            out.push((encode(&[b"DUMP", key]), None));
            out.push((encode(&[b"PEXPIRETIME", key]), None));
            out.push((encode(&[b"DEL", key]), None));
        }
        out.push((request(&["EXEC"]), Self::part(self.target, STEP_RUN)));
        out.push((request(&["TXUNLOCK"]), None));
        for (req, part) in out {
            self.outbox.push((conn, req, part));
        }
        self.awaiting = 1;
    }

    /// The target's EXEC reply: the client's reply, and the guests written back.
    fn ran(&mut self, reply: &[u8]) {
        let restores: usize = self
            .guests
            .iter()
            .map(|g| 1 + usize::from(g.2.is_some()))
            .sum();
        let Some(items) = array_elements(reply) else {
            // Not run (a command refused while queued there, or the instance failed):
            // nothing changed anywhere.
            self.result = Some(reply.to_vec());
            return self.write_back(Vec::new());
        };
        let unit = &items[restores.min(items.len())..];
        let (replies, dumps) = unit.split_at(self.unit.len().min(unit.len()));
        let mut out = Vec::new();
        if self.in_multi {
            split::push_array_header(&mut out, replies.len());
            for r in replies {
                out.extend_from_slice(r);
            }
        } else {
            out.extend_from_slice(
                replies
                    .first()
                    .copied()
                    .unwrap_or(b"-ERR proxy: no reply\r\n"),
            );
        }
        self.result = Some(out);
        let mut writes = Vec::new();
        for (g, triple) in self.guests.iter().zip(dumps.chunks(3)) {
            let (owner, key, payload, expiry) = g;
            let new_payload = bulk_payload(triple[0]);
            let new_expiry = int_of(triple.get(1).copied().unwrap_or(b":-2\r\n")).unwrap_or(-2);
            if new_payload.as_deref() == payload.as_deref()
                && (new_payload.is_none() || new_expiry == *expiry)
            {
                continue; // unchanged: nothing to write
            }
            let req = match new_payload {
                None => encode(&[b"DEL", key]),
                Some(p) => {
                    let at = new_expiry.max(0).to_string();
                    encode(&[b"RESTORE", key, at.as_bytes(), &p, b"REPLACE", b"ABSTTL"])
                }
            };
            writes.push((*owner, req));
        }
        self.write_back(writes);
    }

    fn write_back(&mut self, writes: Vec<(usize, Vec<u8>)>) {
        self.phase = GatherPhase::Writing;
        self.awaiting = 0;
        for (owner, req) in writes {
            let conn = self.engines[owner].conn;
            self.outbox.push((conn, req, Self::part(owner, STEP_WRITE)));
            self.awaiting += 1;
        }
        for (i, e) in self.engines.iter().enumerate() {
            if i != self.target {
                self.outbox
                    .push((e.conn, request(&["TXUNLOCK"]), Self::part(i, STEP_UNLOCK)));
                self.awaiting += 1;
            }
        }
    }

    /// A frame for `part`: `Some(reply)` once everything is over.
    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        let rel = part.checked_sub(COORD_PART)?;
        let (engine, step) = ((rel / 4) as usize, rel % 4);
        if let GatherPhase::Trying(replies) = &mut self.phase {
            if let Some(all) = record_try(replies, engine, step, frame) {
                self.tried(all);
            }
            return None;
        }
        match (&self.phase, step) {
            (GatherPhase::Locking, STEP_LOCK) if engine == self.locked => {
                self.locked_reply(engine, frame);
                self.locked += 1;
                if self.abort.is_some() {
                    self.abort_all();
                } else {
                    self.lock_or_run();
                }
                None
            }
            (GatherPhase::Running, STEP_RUN) => {
                self.ran(frame);
                (self.awaiting == 0).then(|| self.finish())
            }
            (GatherPhase::Aborting | GatherPhase::Writing, _) => {
                if step == STEP_WRITE && frame.first() == Some(&b'-') && self.write_failed.is_none()
                {
                    self.write_failed = Some((self.engines[engine].instance, frame.to_vec()));
                }
                self.awaiting = self.awaiting.saturating_sub(1);
                (self.awaiting == 0).then(|| self.finish())
            }
            _ => None,
        }
    }

    fn locked_reply(&mut self, engine: usize, frame: &[u8]) {
        let (flags, items) = match int_of(frame) {
            Some(f) => (f, Vec::new()),
            None => match array_elements(frame) {
                Some(items) if !items.is_empty() => match int_of(items[0]) {
                    Some(f) => (f, items[1..].to_vec()),
                    None => {
                        self.abort = Some(frame.to_vec());
                        return;
                    }
                },
                _ if frame.starts_with(b"-ERR unknown command") => {
                    self.abort = Some(no_txlock(self.engines[engine].instance));
                    return;
                }
                _ => {
                    self.abort = Some(frame.to_vec());
                    return;
                }
            },
        };
        if self.in_multi && flags & 2 != 0 {
            self.abort = Some(crate::tx::EXECABORT.to_vec());
            return;
        }
        if self.in_multi && flags & 1 != 0 {
            self.abort = Some(if self.resp3 {
                b"_\r\n".to_vec()
            } else {
                b"*-1\r\n".to_vec()
            });
            return;
        }
        if engine != self.target {
            let keys = &self.engines[engine].keys;
            for (k, pair) in keys.iter().zip(items.chunks(2)) {
                let payload = bulk_payload(pair[0]);
                let expiry = pair.get(1).and_then(|f| int_of(f)).unwrap_or(-2);
                self.guests.push((engine, k.clone(), payload, expiry));
            }
        }
    }

    fn finish(&self) -> Vec<u8> {
        if let Some(abort) = &self.abort {
            return abort.clone();
        }
        if let Some((instance, err)) = &self.write_failed {
            return partial_failure(&[(*instance, err.as_slice())], 1);
        }
        self.result
            .clone()
            .unwrap_or_else(|| b"-ERR proxy: no reply\r\n".to_vec())
    }
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_request(&mut out, args);
    out
}

fn int_of(frame: &[u8]) -> Option<i64> {
    frame
        .strip_prefix(b":")
        .and_then(|f| f.strip_suffix(b"\r\n"))
        .and_then(resp::parse_i64)
}

/// A bulk string's bytes; `None` for a nil (RESP2 `$-1` or RESP3 `_`) or anything else.
fn bulk_payload(frame: &[u8]) -> Option<Vec<u8>> {
    let rest = frame.strip_prefix(b"$")?;
    let end = rest.iter().position(|&b| b == b'\r')?;
    let len = usize::try_from(resp::parse_i64(&rest[..end])?).ok()?;
    rest.get(end + 2..end + 2 + len).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod gather_tests {
    use super::*;

    type Sent = Vec<(usize, String, Option<u32>)>;

    fn sent(g: &mut Gather) -> Sent {
        g.outbox
            .drain(..)
            .map(|(conn, r, p)| (conn, String::from_utf8_lossy(&r).into_owned(), p))
            .collect()
    }

    /// Instance `i` on connection `10 + i`, owning `key`.
    fn engine(i: usize, multi: bool, key: &[u8]) -> GatherEngine {
        GatherEngine {
            instance: i,
            conn: 10 + i,
            multi,
            keys: vec![key.to_vec()],
        }
    }

    /// RENAME a b with `a` on instance 0 (connection 10), `b` on instance 1 (11, the target);
    /// `in_multi`: inside a transaction streamed to both.
    fn rename_in(in_multi: bool) -> Gather {
        let engines = vec![engine(1, in_multi, b"b"), engine(0, in_multi, b"a")];
        let unit = vec![encode(&[b"RENAME", b"a", b"b"])];
        Gather::start(3, engines, unit, in_multi, false)
    }

    fn rename() -> Gather {
        rename_in(false)
    }

    #[test]
    fn locks_the_other_instances_at_once_then_runs_on_the_target() {
        let mut g = rename();
        let s = sent(&mut g);
        // A lone command: the target (instance 1) is not locked, its keys are read and
        // written inside the run's MULTI.
        assert_eq!(s.len(), 1, "instance 0 only: {s:?}");
        assert!(s[0].1.contains("TXLOCK") && s[0].1.contains("NOWAIT"));
        assert!(
            s[0].1.contains("DUMP") && s[0].0 == 10,
            "instance 0's key is a guest"
        );
        let locked = b"*3\r\n:0\r\n$3\r\npay\r\n:-1\r\n";
        assert_eq!(g.answered(s[0].2.unwrap(), locked), None);
        let s = sent(&mut g);
        assert!(
            s.iter().all(|x| x.0 == 11),
            "the run goes to the target: {s:?}"
        );
        assert!(s.iter().any(|x| x.1.contains("TXGUEST")));
        assert!(
            s.last().unwrap().1.contains("TXUNLOCK"),
            "the guests are dropped: {s:?}"
        );
        let exec = s.iter().find(|x| x.2.is_some()).expect("EXEC awaited");
        assert!(exec.1.contains("EXEC"));
        // DEL, RESTORE, RENAME, DUMP, PEXPIRETIME, DEL: `a` gone, so the owner deletes it.
        let ran = b"*6\r\n:0\r\n+OK\r\n+OK\r\n$-1\r\n:-2\r\n:0\r\n";
        assert_eq!(g.answered(exec.2.unwrap(), ran), None);
        let s = sent(&mut g);
        assert_eq!(s.len(), 2, "write back and unlock on instance 0: {s:?}");
        assert!(s[0].1.contains("DEL") && s[1].1.contains("TXUNLOCK") && s[0].0 == 10);
        assert_eq!(g.answered(s[0].2.unwrap(), b":1\r\n"), None);
        assert_eq!(g.answered(s[1].2.unwrap(), b"+OK\r\n").unwrap(), b"+OK\r\n");
    }

    #[test]
    fn a_busy_key_locks_in_instance_order() {
        let mut g = rename();
        let s = sent(&mut g);
        assert_eq!(g.answered(s[0].2.unwrap(), b":4\r\n"), None);
        let s = sent(&mut g);
        // Nothing to give back; instance 0 locked again, waiting.
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].0, 10);
        assert!(s[0].1.contains("DUMP") && !s[0].1.contains("NOWAIT"));
        let locked = b"*3\r\n:0\r\n$3\r\npay\r\n:-1\r\n";
        assert_eq!(g.answered(s[0].2.unwrap(), locked), None);
        let s = sent(&mut g);
        assert!(s.iter().all(|x| x.0 == 11), "then the run: {s:?}");
        assert!(s.iter().any(|x| x.1.contains("EXEC")));
    }

    #[test]
    fn a_transactions_target_is_locked_too() {
        let mut g = rename_in(true);
        let s = sent(&mut g);
        assert_eq!(s.len(), 2, "both instances at once: {s:?}");
        assert!(
            s.iter()
                .all(|x| x.1.contains("TXLOCK") && x.1.contains("NOWAIT"))
        );
        // A busy key: the target's lock is given back, then instance 0 is locked, waiting.
        assert_eq!(g.answered(s[0].2.unwrap(), b":4\r\n"), None);
        assert_eq!(g.answered(s[1].2.unwrap(), b":0\r\n"), None);
        let s = sent(&mut g);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!((s[0].0, s[0].2), (11, None));
        assert!(s[0].1.contains("TXUNLOCK"));
        assert!(s[1].0 == 10 && !s[1].1.contains("NOWAIT"));
        let locked = b"*3\r\n:0\r\n$3\r\npay\r\n:-1\r\n";
        assert_eq!(g.answered(s[1].2.unwrap(), locked), None);
        let s = sent(&mut g);
        assert_eq!(s.len(), 1);
        assert!(s[0].0 == 11 && s[0].1.contains("TXLOCK") && !s[0].1.contains("NOWAIT"));
    }
}
