//! The **relay**: one batch of a slot's keys moved by the mover itself, between two recached
//! engines, so the source never waits for the destination.
//!
//! MIGRATE (Redis's way, and the mover's with any other node) blocks the source from the
//! moment it sends the batch until the destination has restored it: every client of the source
//! waits that long, about 190 µs per batch of 100 keys on a busy 2-core host, most of it the
//! destination's wake-up. The relay keeps the source serving meanwhile; only the batch's own
//! keys wait:
//!
//! 1. source: `TXLOCK ms KEYS n k… DUMP` — locks the keys (another connection's command on
//!    one of them is postponed, engine `txlock.rs`) and reads each one's `DUMP` payload and
//!    `PEXPIRETIME` in the same step. The reply is also the batch's backup (module docs of
//!    `slotmove`, *No key lost to a `kill -9`*): no second `DUMP` pass.
//! 2. destination: `RESTORE-ASKING k expiry payload ABSTTL` per key, pipelined: what MIGRATE
//!    sends, so the destination's feed records the same effects. `BUSYKEY`: the destination
//!    already has the key (it was moved before a restart of the source): its copy wins.
//! 3. source: `SLOTHANDOFF k…` + `TXUNLOCK`: the keys are deleted as MIGRATE deletes them
//!    (the feed's `MIGRATED k`), and the postponed commands run again — now finding their key
//!    gone, so they get the slot hold's wait or `-ASK`, as after a MIGRATE.
//!
//! Any failure between 1 and 3 drops the source connection, which releases its locks; the
//! slot's attempt is retried (`Mover::move_slot`), and the keys already restored are found by
//! the retry's `BUSYKEY`. A lock outlives a lost mover by at most [`LOCK_MS`].

use resp::Value;

use super::{Mover, Result};

/// `TXLOCK`'s timeout: a batch takes a millisecond or so; a batch of huge values more, so
/// this leaves room without letting a lost lock stall the keys' clients for long.
pub const LOCK_MS: &str = "10000";

impl Mover {
    /// Whether the batches of a slot can be relayed: both ends are recached engines
    /// (`TXLOCK`, `SLOTHANDOFF`); else MIGRATE.
    pub(super) fn can_relay(&self, src: usize, dst: usize) -> bool {
        self.nodes[src].recached && self.nodes[dst].recached
    }

    /// Moves `keys` (of database `db`, already selected on the source) from `src` to `dst`
    /// (module docs). Returns the keys restored on the destination.
    pub(super) fn relay(
        &mut self,
        src: usize,
        dst: usize,
        db: usize,
        keys: &[Vec<u8>],
    ) -> Result<u64> {
        let r = self.relay_locked(src, dst, db, keys);
        if r.is_err() {
            // The locks go with the connection.
            self.nodes[src].disconnect();
        }
        r
    }

    fn relay_locked(&mut self, src: usize, dst: usize, db: usize, keys: &[Vec<u8>]) -> Result<u64> {
        let n = keys.len().to_string();
        let mut lock: Vec<&[u8]> = vec![b"TXLOCK", LOCK_MS.as_bytes(), b"KEYS", n.as_bytes()];
        lock.extend(keys.iter().map(Vec::as_slice));
        lock.push(b"DUMP");
        let items = match self.nodes[src].call(&lock)? {
            Value::Array(a) if a.len() == 1 + 2 * keys.len() => a,
            other => {
                return Err(format!(
                    "{}: TXLOCK … DUMP: {}",
                    self.nodes[src].addr(),
                    describe(&other)
                ));
            }
        };
        // After the flags: each key's payload and expiry; a key gone meanwhile is not moved.
        let batch = super::backups_of(db, keys, items.into_iter().skip(1));
        let mut restored = 0;
        if !batch.is_empty() {
            self.nodes[dst].select(db)?;
            // Encoded from the backups themselves: no copy of a payload.
            let mut out = Vec::new();
            for b in &batch {
                let expiry = b.expire_at_ms.to_string();
                resp::encode_request(
                    &mut out,
                    &[
                        b"RESTORE-ASKING".as_slice(),
                        &b.key,
                        expiry.as_bytes(),
                        &b.payload,
                        b"ABSTTL",
                    ],
                );
            }
            for (v, b) in self.nodes[dst]
                .raw(&out, batch.len())?
                .into_iter()
                .zip(&batch)
            {
                match v {
                    Value::Error(e) if e.starts_with(b"BUSYKEY") => {
                        self.totals.kept_on_destination += 1;
                    }
                    Value::Error(e) => {
                        return Err(format!(
                            "{}: RESTORE-ASKING {}: {}",
                            self.nodes[dst].addr(),
                            super::escape(&b.key),
                            String::from_utf8_lossy(&e)
                        ));
                    }
                    _ => restored += 1,
                }
            }
        }
        // Only the keys read: a key of a migrating slot that is gone gets -ASK (or, with
        // others present, -TRYAGAIN), Redis's rule for every command.
        let mut out = Vec::new();
        if !batch.is_empty() {
            let mut handoff: Vec<&[u8]> = vec![b"SLOTHANDOFF"];
            handoff.extend(batch.iter().map(|b| b.key.as_slice()));
            resp::encode_request(&mut out, &handoff);
        }
        resp::encode_request(&mut out, &[b"TXUNLOCK"]);
        let sent = 1 + usize::from(!batch.is_empty());
        // Kept before the source lets go: from here the destination's copy is the only one.
        self.keep_backups(dst, batch);
        let replies = self.nodes[src].raw(&out, sent)?;
        if let Some(e) = replies.iter().find_map(|v| match v {
            Value::Error(e) => Some(e),
            _ => None,
        }) {
            return Err(format!(
                "{}: SLOTHANDOFF + TXUNLOCK: {}",
                self.nodes[src].addr(),
                String::from_utf8_lossy(e)
            ));
        }
        Ok(restored)
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => format!("{other:?}"),
    }
}
