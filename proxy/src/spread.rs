//! Blocking stream reads over several instances: `XREAD … BLOCK` / `XREADGROUP … BLOCK`
//! naming streams that live on more than one instance (issue 17, "through the proxy").
//!
//! # How
//!
//! The request is split by instance as a non-blocking read is ([`crate::split`]), and each
//! part, `BLOCK` included, goes on the client's dedicated connection to its instance. Each
//! instance answers at once if its streams have data, else parks the part. The first part to
//! answer (data, an error, or a timeout) *releases* the others: the proxy sends
//! `CLIENT UNBLOCK <id>` for each still-parked part on the instance's shared link (`id`: the
//! instance's client id of the dedicated connection, asked with `CLIENT ID` just before its
//! first part, [`crate::dedicated::Dedicated::engine_id`]). An unblocked part answers a null, as
//! after its timeout. The slot's reply is the merge of every part's reply in the caller's key
//! order ([`crate::split::Merge::StreamRead`]), so:
//!
//! - entries two instances served at about the same time (one was unblocked too late) are
//!   all delivered in the one reply: for `XREADGROUP >` every entry added to the consumer's
//!   pending list reaches it, none is delivered twice;
//! - with a timeout and nothing served, every part times out and the reply is a null.
//!
//! A `CLIENT UNBLOCK` may find its part not parked yet (its request still on the way, e.g.
//! behind a fresh connection's connect): it answers `:0`, and is sent again while the part is
//! unanswered, so a `BLOCK 0` part never stays parked after the reply is decided.
//! Redis answers such a read as soon as any named stream has data; here the reply comes one
//! round trip to the other instances later.

use crate::client::Followup;

/// Reply-slot part numbers at or above this are `CLIENT UNBLOCK` replies of part
/// `part - UNBLOCK_PART` (they never fill the slot).
pub const UNBLOCK_PART: u32 = 1 << 31;

/// A client's blocking read over several instances in progress (at most one: the client's
/// lane keeps later requests until its reply is in).
#[derive(Debug)]
pub struct Spread {
    /// The reply slot.
    pub seq: u64,
    pub parts: Vec<SpreadPart>,
    /// Some part answered: the others are being unblocked.
    pub released: bool,
    /// `CLIENT UNBLOCK … ERROR` of the client: the parts are unblocked with an error.
    pub unblock_error: bool,
}

#[derive(Debug)]
pub struct SpreadPart {
    pub instance: usize,
    /// The dedicated connection (slab id) carrying the part.
    pub conn: usize,
    /// The instance's client id of that connection, once known.
    pub engine_id: Option<u64>,
    pub answered: bool,
}

impl Spread {
    pub fn new(seq: u64) -> Self {
        Spread {
            seq,
            parts: Vec::new(),
            released: false,
            unblock_error: false,
        }
    }

    /// Part `part` answered: the `CLIENT UNBLOCK`s to send now (on the first answer, one per
    /// parked part whose connection's id is known; the others follow [`Spread::id_known`]).
    pub fn answered(&mut self, part: u32) -> Vec<Followup> {
        if let Some(p) = self.parts.get_mut(part as usize) {
            p.answered = true;
        }
        if self.released {
            return Vec::new();
        }
        self.released = true;
        (0..self.parts.len() as u32)
            .filter_map(|p| self.unblock(p))
            .collect()
    }

    /// The client was unblocked (`CLIENT UNBLOCK` through the proxy): every parked part is
    /// unblocked the same way (TIMEOUT: each answers a null, so the read does; ERROR: each
    /// answers `-UNBLOCKED`). `false` if the read was already released.
    pub fn client_unblock(&mut self, error: bool) -> Option<Vec<Followup>> {
        if self.released {
            return None;
        }
        self.released = true;
        self.unblock_error = error;
        Some(
            (0..self.parts.len() as u32)
                .filter_map(|p| self.unblock(p))
                .collect(),
        )
    }

    /// Dedicated connection `conn` learned its instance client id: the `CLIENT UNBLOCK` to
    /// send if its part is parked in a released read.
    pub fn id_known(&mut self, conn: usize, engine_id: u64) -> Option<Followup> {
        let p = self.parts.iter().position(|p| p.conn == conn)?;
        self.parts[p].engine_id = Some(engine_id);
        if self.released {
            self.unblock(p as u32)
        } else {
            None
        }
    }

    /// A `CLIENT UNBLOCK` of part `part` answered `reply`: `:0` while the part is still
    /// unanswered means it was not parked yet; send it again.
    pub fn unblock_answered(&mut self, part: u32, reply: &[u8]) -> Option<Followup> {
        if reply == b":0\r\n" {
            self.unblock(part)
        } else {
            None
        }
    }

    /// Every part answered: the read is over.
    pub fn done(&self) -> bool {
        self.parts.iter().all(|p| p.answered)
    }

    fn unblock(&self, part: u32) -> Option<Followup> {
        let p = self.parts.get(part as usize)?;
        if p.answered {
            return None;
        }
        let id = itoa::Buffer::new().format(p.engine_id?).to_owned();
        let mut request = Vec::new();
        if self.unblock_error {
            resp::encode_request(
                &mut request,
                &[b"CLIENT".as_slice(), b"UNBLOCK", id.as_bytes(), b"ERROR"],
            );
        } else {
            resp::encode_request(
                &mut request,
                &[b"CLIENT".as_slice(), b"UNBLOCK", id.as_bytes()],
            );
        }
        Some(Followup {
            instance: p.instance,
            request,
            seq: self.seq,
            part: UNBLOCK_PART + part,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(conn: usize, engine_id: Option<u64>) -> SpreadPart {
        SpreadPart {
            instance: conn,
            conn,
            engine_id,
            answered: false,
        }
    }

    #[test]
    fn the_first_answer_unblocks_the_parked_parts_once() {
        let mut s = Spread::new(7);
        s.parts = vec![part(0, Some(10)), part(1, Some(11)), part(2, None)];
        let sent = s.answered(0);
        assert_eq!(sent.len(), 1, "part 2's id is not known yet");
        assert_eq!(sent[0].instance, 1);
        assert_eq!(sent[0].part, UNBLOCK_PART + 1);
        assert_eq!(
            sent[0].request,
            b"*3\r\n$6\r\nCLIENT\r\n$7\r\nUNBLOCK\r\n$2\r\n11\r\n"
        );
        // Part 2's connection learns its id: unblocked then.
        let late = s.id_known(2, 12).expect("released and parked");
        assert_eq!(late.part, UNBLOCK_PART + 2);
        // A second answer sends nothing more.
        assert!(s.answered(1).is_empty());
        assert!(!s.done());
        // Part 2 was not parked yet: unblocked again; once answered, not any more.
        assert!(s.unblock_answered(2, b":0\r\n").is_some());
        assert!(s.unblock_answered(2, b":1\r\n").is_none());
        s.answered(2);
        assert!(s.unblock_answered(2, b":0\r\n").is_none());
        assert!(s.done());
    }

    #[test]
    fn ids_learned_before_the_release_send_nothing() {
        let mut s = Spread::new(1);
        s.parts = vec![part(0, None), part(1, None)];
        assert!(s.id_known(1, 5).is_none());
        let sent = s.answered(0);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].instance, 1);
    }
}
