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
    /// Requests to send: (dedicated connection, request, part).
    pub outbox: Vec<(usize, Vec<u8>, u32)>,
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
        c.lock_next();
        c
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
            COORD_PART + 4 * self.locked as u32 + STEP_LOCK,
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
                .push((e.conn, request(&[end]), base + STEP_END));
            self.outbox
                .push((e.conn, request(&["TXUNLOCK"]), base + STEP_UNLOCK));
            self.awaiting += 2;
        }
    }

    /// A frame for `part` arrived: `Some(reply)` once the client's reply is decided and
    /// every instance has ended.
    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        let rel = part.checked_sub(COORD_PART)?;
        let (engine, step) = ((rel / 4) as usize, rel % 4);
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
        // Each instance's EXEC array, split into its elements.
        let mut elements: Vec<(usize, Vec<&[u8]>)> = Vec::new();
        let mut failed: Vec<(usize, &[u8])> = Vec::new();
        for e in self.engines.iter().filter(|e| e.multi) {
            let reply = e.end_reply.as_deref().unwrap_or(b"-ERR no reply\r\n");
            match array_elements(reply) {
                Some(items) => elements.push((e.instance, items)),
                None => failed.push((e.instance, reply)),
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
        split::push_array_header(&mut out, self.order.len());
        for entry in &self.order {
            match entry {
                Entry::One { instance, index } => out.extend_from_slice(element(*instance, *index)),
                Entry::Split { parts, merge } => {
                    let replies: Vec<&[u8]> =
                        parts.iter().map(|&(i, idx)| element(i, idx)).collect();
                    split::merge(merge, &replies, &mut out);
                }
            }
        }
        out
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(c: &mut Coord) -> Vec<(usize, String, u32)> {
        c.outbox
            .drain(..)
            .map(|(conn, r, p)| (conn, String::from_utf8_lossy(&r).into_owned(), p))
            .collect()
    }

    #[test]
    fn locks_in_instance_order_then_execs_everywhere() {
        let engines = vec![Coord::engine(1, 11, true), Coord::engine(0, 10, true)];
        let order = vec![
            Entry::One { instance: 1, index: 0 },
            Entry::One { instance: 0, index: 0 },
            Entry::Split {
                parts: vec![(0, 1), (1, 1)],
                merge: Merge::Sum,
            },
        ];
        let mut c = Coord::start(5, engines, order, false);
        let s = sent(&mut c);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, 10, "instance 0 is locked first");
        assert!(s[0].1.contains("TXLOCK"));
        assert_eq!(c.answered(s[0].2, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, 11);
        assert_eq!(c.answered(s[0].2, b":0\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 4);
        assert!(s[0].1.contains("EXEC") && s[1].1.contains("TXUNLOCK"));
        assert_eq!(c.answered(s[0].2, b"*2\r\n$1\r\na\r\n:1\r\n"), None);
        assert_eq!(c.answered(s[1].2, b"+OK\r\n"), None);
        assert_eq!(c.answered(s[2].2, b"*2\r\n:7\r\n:2\r\n"), None);
        let reply = c.answered(s[3].2, b"+OK\r\n").expect("done");
        assert_eq!(reply, b"*3\r\n:7\r\n$1\r\na\r\n:3\r\n");
    }

    #[test]
    fn a_changed_watched_key_aborts_before_locking_further() {
        let engines = vec![Coord::engine(0, 10, false), Coord::engine(1, 11, true)];
        let mut c = Coord::start(1, engines, vec![], true);
        let s = sent(&mut c);
        assert_eq!(c.answered(s[0].2, b":1\r\n"), None);
        let s = sent(&mut c);
        assert_eq!(s.len(), 4, "ends on both, locks no more");
        assert!(s[0].1.contains("UNWATCH") && s[2].1.contains("DISCARD"));
        let mut out = None;
        for (_, _, p) in &s {
            out = c.answered(*p, b"+OK\r\n");
        }
        assert_eq!(out.unwrap(), b"_\r\n");
    }

    #[test]
    fn a_refused_command_anywhere_is_execabort() {
        let engines = vec![Coord::engine(0, 10, true), Coord::engine(1, 11, true)];
        let mut c = Coord::start(1, engines, vec![], false);
        let s = sent(&mut c);
        c.answered(s[0].2, b":0\r\n");
        let s = sent(&mut c);
        c.answered(s[0].2, b":2\r\n");
        let s = sent(&mut c);
        let mut out = None;
        for (_, _, p) in &s {
            out = c.answered(*p, b"+OK\r\n");
        }
        assert_eq!(out.unwrap(), crate::tx::EXECABORT);
    }

    #[test]
    fn array_elements_splits_nested_frames() {
        let r = b"*3\r\n*2\r\n$1\r\na\r\n$-1\r\n:5\r\n%1\r\n+k\r\n+v\r\n";
        let items = array_elements(r).unwrap();
        assert_eq!(items, vec![&b"*2\r\n$1\r\na\r\n$-1\r\n"[..], b":5\r\n", b"%1\r\n+k\r\n+v\r\n"]);
        assert!(array_elements(b"*-1\r\n").is_none());
        assert!(array_elements(b"-ERR x\r\n").is_none());
    }
}
