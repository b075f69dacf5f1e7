//! Transactions spanning instances over the shared links (docs/transactions.md, "Over the
//! shared links"). Pure: a state machine fed with reply frames; the event loop sends what it
//! asks for on the instances' shared links of the client's protocol and database.
//!
//! A client whose last transaction spanned instances runs its next `MULTI` without `WATCH`
//! here (`crate::tx::Tx::shared`): the proxy answers `+QUEUED` itself and keeps each
//! instance's commands. At `EXEC`:
//!
//! 1. **Prepare**, every instance at once: `TXPREP txid timeout n₁ arg… n₂ arg…` queues that
//!    instance's commands in a transaction of their own on the engine and locks their keys
//!    without waiting (engine `txlock::txprep`). Many clients' transactions share each
//!    link's reads and writes, where the dedicated path costs two reads and two writes per
//!    instance per transaction.
//! 2. Every instance answered `:0` → **commit**: `TXCOMMIT txid` on each (its EXEC array),
//!    and the client gets the arrays merged in its order (`crate::coord::assemble`). Any
//!    other answer (a key held by another connection, a command refused while queueing, a
//!    slot moving, an instance down) → `TXABORT txid` where it was prepared, and the
//!    transaction **runs again on the dedicated path** (`crate::txmove::rerun`), which waits
//!    for locks in instance order and gives every error its usual form.
//!
//! **Isolation.** An engine does not hold up a connection's commands for the transactions
//! that same connection prepared (a command waiting there would hold up the `TXCOMMIT` queued
//! behind it). It need not: a transaction's commands run at its `TXCOMMIT`s, which the proxy
//! writes to every link in one go, and each link runs its requests in order; so a request
//! written on a link before them runs before the transaction on that engine, and any request
//! written after a reply that shows the transaction's effect on one engine comes after every
//! `TXCOMMIT` on every link. Other connections wait for the engine's locks until the
//! `TXCOMMIT` runs there (two-phase locking, as on the dedicated path).
//!
//! Two transactions of the proxy on one key need nothing of their own: the second one's
//! `TXPREP` finds the key held (`:4`) and it runs on the dedicated path.

use crate::coord::{COORD_PART, Entry};

/// The outcome that sends the transaction to the dedicated path (never a RESP frame).
pub const FALLBACK: &[u8] = b"\0fallback";

const STEP_PREP: u32 = 0;
const STEP_COMMIT: u32 = 1;
const STEP_ABORT: u32 = 2;

/// One instance's part: where it goes and what it answered.
#[derive(Debug)]
struct Part {
    instance: usize,
    link: usize,
    reply: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Preparing,
    Committing,
    Aborting,
}

/// One EXEC over the shared links.
#[derive(Debug)]
pub struct SharedTx {
    /// The client's reply slot.
    pub seq: u64,
    txid: String,
    parts: Vec<Part>,
    order: Vec<Entry>,
    phase: Phase,
    awaiting: usize,
    /// Requests to send: (link, request, part).
    pub outbox: Vec<(usize, Vec<u8>, Option<u32>)>,
}

impl SharedTx {
    /// Starts the EXEC in reply slot `seq` of client `client_id` (the two name the
    /// transaction on the links: unique in the proxy): `parts` are (instance, link, `TXPREP`
    /// arguments after the timeout, their number).
    pub fn start(
        seq: u64,
        client_id: u64,
        parts: Vec<(usize, usize, Vec<u8>, usize)>,
        order: Vec<Entry>,
    ) -> SharedTx {
        let txid = format!("{client_id}:{seq}");
        let timeout = crate::coord::LOCK_TIMEOUT_MS.to_string();
        let mut outbox = Vec::with_capacity(parts.len());
        let mut kept = Vec::with_capacity(parts.len());
        for (i, (instance, link, body, elements)) in parts.into_iter().enumerate() {
            let mut request = Vec::with_capacity(body.len() + 48);
            request.extend_from_slice(format!("*{}\r\n$6\r\nTXPREP\r\n", 3 + elements).as_bytes());
            for arg in [&txid, &timeout] {
                request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
            }
            request.extend_from_slice(&body);
            outbox.push((link, request, Some(COORD_PART + 4 * i as u32 + STEP_PREP)));
            kept.push(Part {
                instance,
                link,
                reply: None,
            });
        }
        SharedTx {
            seq,
            txid,
            awaiting: kept.len(),
            parts: kept,
            order,
            phase: Phase::Preparing,
            outbox,
        }
    }

    /// A frame for `part` arrived: `Some(reply)` once the transaction is over (the client's
    /// reply, or [`FALLBACK`]).
    pub fn answered(&mut self, part: u32, frame: &[u8]) -> Option<Vec<u8>> {
        let rel = part.checked_sub(COORD_PART)?;
        let (i, step) = ((rel / 4) as usize, rel % 4);
        let expected = match self.phase {
            Phase::Preparing => STEP_PREP,
            Phase::Committing => STEP_COMMIT,
            Phase::Aborting => STEP_ABORT,
        };
        if step != expected || i >= self.parts.len() {
            return None;
        }
        if step != STEP_ABORT {
            self.parts[i].reply = Some(frame.to_vec());
        }
        self.awaiting = self.awaiting.saturating_sub(1);
        if self.awaiting > 0 {
            return None;
        }
        match self.phase {
            Phase::Preparing => self.decide(),
            Phase::Committing => {
                let ends: Vec<(usize, &[u8])> = self
                    .parts
                    .iter()
                    .map(|p| {
                        (
                            p.instance,
                            p.reply.as_deref().unwrap_or(b"-ERR no reply\r\n"),
                        )
                    })
                    .collect();
                Some(crate::coord::assemble(&self.order, &ends))
            }
            Phase::Aborting => Some(FALLBACK.to_vec()),
        }
    }

    /// Every `TXPREP` answered: commit everywhere, or abort where prepared.
    fn decide(&mut self) -> Option<Vec<u8>> {
        let prepared = |p: &Part| p.reply.as_deref() == Some(b":0\r\n");
        let commit = self.parts.iter().all(prepared);
        let (verb, step) = if commit {
            ("TXCOMMIT", STEP_COMMIT)
        } else {
            ("TXABORT", STEP_ABORT)
        };
        let mut request = Vec::new();
        resp::encode_request(&mut request, &[verb, &self.txid]);
        self.awaiting = 0;
        for (i, p) in self.parts.iter().enumerate() {
            if commit || prepared(p) {
                let part = Some(COORD_PART + 4 * i as u32 + step);
                self.outbox.push((p.link, request.clone(), part));
                self.awaiting += 1;
            }
        }
        self.phase = if commit {
            Phase::Committing
        } else {
            Phase::Aborting
        };
        (self.awaiting == 0).then(|| FALLBACK.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(instance: usize, index: usize) -> Entry {
        Entry::One { instance, index }
    }

    #[test]
    fn commits_when_every_instance_prepared() {
        let mut t = SharedTx::start(
            7,
            42,
            vec![
                (0, 10, b"$1\r\n2\r\n$3\r\nGET\r\n$1\r\na\r\n".to_vec(), 3),
                (1, 11, b"$1\r\n2\r\n$3\r\nGET\r\n$1\r\nb\r\n".to_vec(), 3),
            ],
            vec![one(1, 0), one(0, 0)],
        );
        assert_eq!(t.outbox.len(), 2);
        assert_eq!(
            t.outbox[0].1,
            b"*6\r\n$6\r\nTXPREP\r\n$4\r\n42:7\r\n$5\r\n10000\r\n$1\r\n2\r\n$3\r\nGET\r\n$1\r\na\r\n"
        );
        assert_eq!((t.outbox[0].0, t.outbox[1].0), (10, 11));
        t.outbox.clear();
        assert_eq!(t.answered(COORD_PART, b":0\r\n"), None);
        assert!(
            t.outbox.is_empty(),
            "nothing is committed before every TXPREP answered"
        );
        assert_eq!(t.answered(COORD_PART + 4, b":0\r\n"), None);
        assert_eq!(t.outbox.len(), 2);
        assert!(t.outbox[1].1.ends_with(b"TXCOMMIT\r\n$4\r\n42:7\r\n"));
        assert_eq!(t.answered(COORD_PART + 1, b"*1\r\n$1\r\nx\r\n"), None);
        let reply = t.answered(COORD_PART + 5, b"*1\r\n$1\r\ny\r\n");
        assert_eq!(reply.as_deref(), Some(&b"*2\r\n$1\r\ny\r\n$1\r\nx\r\n"[..]));
    }

    #[test]
    fn a_refusal_aborts_where_prepared_then_falls_back() {
        let mut t = SharedTx::start(
            1,
            1,
            vec![(0, 0, Vec::new(), 0), (1, 5, Vec::new(), 0)],
            vec![],
        );
        t.outbox.clear();
        assert_eq!(t.answered(COORD_PART, b":0\r\n"), None);
        assert_eq!(t.answered(COORD_PART + 4, b":4\r\n"), None);
        assert_eq!(t.outbox.len(), 1, "TXABORT where it was prepared only");
        assert_eq!(t.outbox[0].0, 0);
        assert!(t.outbox[0].1.starts_with(b"*2\r\n$7\r\nTXABORT"));
        assert_eq!(
            t.answered(COORD_PART + 2, b"+OK\r\n").as_deref(),
            Some(FALLBACK)
        );
        // Nothing prepared anywhere: back to the dedicated path at once.
        let mut t = SharedTx::start(1, 1, vec![(0, 0, Vec::new(), 0)], vec![]);
        assert_eq!(
            t.answered(COORD_PART, b"-ERR instance 0 is unavailable\r\n")
                .as_deref(),
            Some(FALLBACK)
        );
    }
}
