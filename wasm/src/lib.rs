//! The browser replica: `engine-core` compiled to WebAssembly, applying the keychange feed and
//! answering reads from local memory.
//!
//! There is no JavaScript reimplementation of any data type: a snapshot entry or a keychange is
//! an argv (`SET k v PXAT t`, `HSET h f v`, `ZADD z 1 m`, `DEL k`, …) run through the same
//! [`engine_core::Engine::exec`] the server runs, and a read (`GET`, `HGETALL`, `ZRANGE`, …)
//! is answered by the same handlers, in RESP2.
//!
//! # Layout
//!
//! - [`Replica`]: the engine plus the rules below; plain Rust, unit-tested natively.
//! - `abi` (wasm32 only): the exported C ABI that `www/recached.js` calls (see its doc).
//!
//! # Time and expiry
//!
//! The replica follows its primaries the way a Redis replica does (redis `db.c`
//! `expireIfNeeded`: "a replica does not expire keys itself, it waits for the master's DEL"):
//!
//! - Effects and snapshot entries are applied with `now = 0`, so no key is ever expired while
//!   applying: the primary applied the effect when the key was live, and its DEL for an expired
//!   key arrives as an effect of its own. Applying with the browser's clock instead would let a
//!   key whose TTL passed in transit be dropped here and rebuilt from a partial effect (an
//!   `HSET` after expiry would create a one-field hash the server never had).
//! - Reads run with the caller's clock (`now_ms`, the page's `Date.now()`), so a key whose
//!   `PEXPIREAT` has passed reads as missing and TTL counts down locally. In replica mode the
//!   keyspace does not delete such a key on read ([`engine_core::Engine::set_replica_mode`]);
//!   the primary's DEL removes it.
//!
//! # Read-only
//!
//! [`Replica::read`] refuses every command whose table row lacks the `readonly` flag (PING and
//! ECHO excepted), and RANDOMKEY, with `-ERR replica is read-only: '<name>'`, so a page cannot
//! diverge from the server by writing locally.

#[cfg(target_arch = "wasm32")]
mod abi;

use engine_core::{Client, Config, Engine};

/// One replica: an engine holding the keys of the subscribed prefixes of every instance.
pub struct Replica {
    engine: Engine,
    client: Client,
    /// Output of the last command (RESP2), reused across calls.
    out: Vec<u8>,
    /// The fleet's slot table (slot → instance, [`UNASSIGNED`] for none) once the fan-out
    /// sent one (`slots`); until then the jump-hash map of N instances.
    owners: Option<Vec<u16>>,
}

/// An owner in [`Replica::set_owners`] for a slot no instance serves: its keys are dropped
/// by the refetch of any instance.
pub const UNASSIGNED: u16 = u16::MAX;

/// Commands a replica answers though their row lacks the `readonly` flag: they touch no key.
const ALWAYS_ALLOWED: &[&[u8]] = &[b"ping", b"echo"];
/// Read-only commands a replica refuses: RANDOMKEY retries until it meets a live key, and in
/// replica mode expired keys are never reclaimed, so it could spin.
const REFUSED: &[&[u8]] = &[b"randomkey"];

impl Default for Replica {
    fn default() -> Self {
        Self::new()
    }
}

impl Replica {
    /// An empty replica (standalone engine: it owns every key, so no `-MOVED`).
    pub fn new() -> Replica {
        let mut engine = Engine::new(Config::default());
        engine.set_replica_mode(true);
        Replica {
            engine,
            client: Client::default(),
            out: Vec::with_capacity(256),
            owners: None,
        }
    }

    /// Applies one effect or snapshot entry. `Err(text)` carries the engine's error reply
    /// (e.g. `WRONGTYPE …`): the replica has diverged and the caller should resync.
    pub fn apply(&mut self, argv: &[&[u8]]) -> Result<(), String> {
        if argv.is_empty() {
            return Err("ERR empty effect".into());
        }
        self.out.clear();
        self.engine.exec(&mut self.client, argv, 0, &mut self.out);
        match self.out.first() {
            Some(b'-') => Err(String::from_utf8_lossy(&self.out[1..])
                .trim_end()
                .to_string()),
            _ => Ok(()),
        }
    }

    /// Runs a read-only command at `now_ms` (Unix ms) and returns its RESP2 reply.
    pub fn read(&mut self, argv: &[&[u8]], now_ms: u64) -> &[u8] {
        self.out.clear();
        let Some(name) = argv.first() else {
            self.out.extend_from_slice(b"-ERR empty command\r\n");
            return &self.out;
        };
        let allowed = !REFUSED.iter().any(|a| a.eq_ignore_ascii_case(name))
            && (ALWAYS_ALLOWED.iter().any(|a| a.eq_ignore_ascii_case(name))
                || engine_core::command::lookup(name).is_some_and(|spec| {
                    // A container (`OBJECT ENCODING`) is judged by its subcommand's row.
                    let row = argv
                        .get(1)
                        .and_then(|sub| spec.subcommand(sub))
                        .unwrap_or(spec);
                    row.has_flag(engine_core::command::Flags::READONLY)
                }));
        if !allowed {
            let shown: String = String::from_utf8_lossy(name)
                .chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect();
            self.out
                .extend_from_slice(format!("-ERR replica is read-only: '{shown}'\r\n").as_bytes());
            return &self.out;
        }
        let now_us = now_ms.saturating_mul(1000);
        self.engine
            .exec(&mut self.client, argv, now_us, &mut self.out);
        &self.out
    }

    /// Adopts the fleet's slot table (the fan-out's `slots` message): `owners[slot]` is the
    /// instance serving it, [`UNASSIGNED`] for none. Ignored unless it has one entry per
    /// slot. From then on [`Replica::drop_instance`] drops by this table, since slots move
    /// between running engines (docs/browser-protocol.md, *Slots*).
    pub fn set_owners(&mut self, owners: Vec<u16>) -> bool {
        if owners.len() != usize::from(engine_core::slot::SLOTS) {
            return false;
        }
        self.owners = Some(owners);
        true
    }

    /// Whether instance `instance` of `n` serves `key`: by the table of [`Replica::set_owners`]
    /// if one was set, else by the jump-hash map of `n` instances (`engine_core::slot`).
    fn owned_by(&self, key: &[u8], instance: u32, n: u32) -> bool {
        match &self.owners {
            Some(t) => {
                let owner = t[usize::from(engine_core::slot::key_slot(key))];
                owner == UNASSIGNED || u32::from(owner) == instance
            }
            None => engine_core::slot::instance_for_key(key, n.max(1)) == instance,
        }
    }

    /// Deletes every key that instance `instance` of an `n`-instance fleet owns (the slot
    /// table, else the slot map of `engine_core::slot`): the fan-out's `must-refetch` and
    /// `flush` for one instance.
    pub fn drop_instance(&mut self, instance: u32, n: u32) -> usize {
        let keys = self.all_keys();
        let mut dropped = 0;
        for k in keys {
            if self.owned_by(&k, instance, n) {
                self.out.clear();
                self.engine
                    .exec(&mut self.client, &[b"DEL", &k], 0, &mut self.out);
                dropped += 1;
            }
        }
        dropped
    }

    /// Deletes every key.
    pub fn clear(&mut self) {
        self.out.clear();
        self.engine
            .exec(&mut self.client, &[b"FLUSHALL", b"SYNC"], 0, &mut self.out);
    }

    /// Number of keys held, expired ones not yet deleted by their primary included.
    pub fn len(&mut self) -> usize {
        self.out.clear();
        self.engine
            .exec(&mut self.client, &[b"DBSIZE"], 0, &mut self.out);
        parse_int(&self.out).unwrap_or(0).max(0) as usize
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Every stored key (expired ones included: `KEYS *` at time 0).
    fn all_keys(&mut self) -> Vec<Vec<u8>> {
        self.out.clear();
        self.engine
            .exec(&mut self.client, &[b"KEYS", b"*"], 0, &mut self.out);
        parse_bulk_array(&self.out)
    }
}

/// `:N\r\n` → N.
fn parse_int(reply: &[u8]) -> Option<i64> {
    match resp::decode(reply) {
        Ok(Some((resp::Value::Integer(n), _))) => Some(n),
        _ => None,
    }
}

/// An array of bulk strings (the reply of KEYS) → its items; anything else → empty.
fn parse_bulk_array(reply: &[u8]) -> Vec<Vec<u8>> {
    match resp::decode(reply) {
        Ok(Some((resp::Value::Array(items), _))) => items
            .into_iter()
            .filter_map(|v| match v {
                resp::Value::Bulk(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(r: &mut Replica, argv: &[&str], now_ms: u64) -> String {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(r.read(&argv, now_ms)).into_owned()
    }

    fn apply(r: &mut Replica, argv: &[&str]) -> Result<(), String> {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        r.apply(&argv)
    }

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn effects_then_reads() {
        let mut r = Replica::new();
        apply(&mut r, &["SET", "a", "1"]).unwrap();
        apply(&mut r, &["HSET", "h", "f", "v", "g", "w"]).unwrap();
        apply(&mut r, &["ZADD", "z", "2", "b", "1", "a"]).unwrap();
        apply(&mut r, &["RPUSH", "l", "x", "y"]).unwrap();
        apply(&mut r, &["SADD", "s", "m"]).unwrap();
        assert_eq!(read(&mut r, &["GET", "a"], NOW), "$1\r\n1\r\n");
        assert_eq!(read(&mut r, &["HGET", "h", "g"], NOW), "$1\r\nw\r\n");
        assert_eq!(
            read(&mut r, &["ZRANGE", "z", "0", "-1"], NOW),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            read(&mut r, &["LRANGE", "l", "0", "-1"], NOW),
            "*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
        );
        assert_eq!(read(&mut r, &["SMEMBERS", "s"], NOW), "*1\r\n$1\r\nm\r\n");
        assert_eq!(r.len(), 5);
        assert!(
            apply(&mut r, &["HSET", "a", "f", "v"])
                .unwrap_err()
                .starts_with("WRONGTYPE")
        );
    }

    #[test]
    fn writes_are_refused_on_read() {
        let mut r = Replica::new();
        assert!(read(&mut r, &["SET", "a", "1"], NOW).starts_with("-ERR replica is read-only"));
        assert!(read(&mut r, &["FLUSHALL"], NOW).starts_with("-ERR replica is read-only"));
        assert!(read(&mut r, &["CONFIG", "SET", "hz", "5"], NOW).starts_with("-ERR replica"));
        assert_eq!(read(&mut r, &["PING"], NOW), "+PONG\r\n");
        assert!(read(&mut r, &["RANDOMKEY"], NOW).starts_with("-ERR replica"));
        assert_eq!(read(&mut r, &["GET", "a"], NOW), "$-1\r\n");
        assert!(read(&mut r, &[], NOW).starts_with("-ERR"));
    }

    #[test]
    fn expiry_is_local_and_never_deletes() {
        let mut r = Replica::new();
        let at = (NOW + 1000).to_string();
        apply(&mut r, &["SET", "k", "v", "PXAT", &at]).unwrap();
        apply(&mut r, &["HSET", "h", "f", "v"]).unwrap();
        apply(&mut r, &["PEXPIREAT", "h", &at]).unwrap();
        assert_eq!(read(&mut r, &["GET", "k"], NOW), "$1\r\nv\r\n");
        assert_eq!(read(&mut r, &["PTTL", "k"], NOW), ":1000\r\n");
        // Past the TTL: missing to reads, but still held until the primary's DEL…
        assert_eq!(read(&mut r, &["GET", "k"], NOW + 1001), "$-1\r\n");
        assert_eq!(read(&mut r, &["EXISTS", "k", "h"], NOW + 1001), ":0\r\n");
        assert_eq!(r.len(), 2);
        // …so an effect the primary applied before the expiry still finds the whole hash.
        apply(&mut r, &["HSET", "h", "g", "w"]).unwrap();
        apply(&mut r, &["PERSIST", "h"]).unwrap();
        assert_eq!(read(&mut r, &["HLEN", "h"], NOW + 5000), ":2\r\n");
        apply(&mut r, &["DEL", "k"]).unwrap();
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn drop_instance_keeps_other_instances() {
        let mut r = Replica::new();
        for i in 0..50 {
            apply(&mut r, &["SET", &format!("k{i}"), "v"]).unwrap();
        }
        let owned0 = (0..50)
            .filter(|i| engine_core::slot::instance_for_key(format!("k{i}").as_bytes(), 2) == 0)
            .count();
        assert!(owned0 > 0 && owned0 < 50);
        assert_eq!(r.drop_instance(0, 2), owned0);
        assert_eq!(r.len(), 50 - owned0);
        r.clear();
        assert!(r.is_empty());
    }

    /// Once the fan-out sent the slot table, refetches drop by it, not by the jump hash.
    #[test]
    fn drop_instance_follows_the_slot_table() {
        let mut r = Replica::new();
        for i in 0..50 {
            apply(&mut r, &["SET", &format!("k{i}"), "v"]).unwrap();
        }
        let slot = |i: usize| usize::from(engine_core::slot::key_slot(format!("k{i}").as_bytes()));
        // Instance 2 (a third engine) took k0's slot; k1's slot is unassigned.
        let mut owners = vec![0u16; usize::from(engine_core::slot::SLOTS)];
        owners[slot(0)] = 2;
        owners[slot(1)] = UNASSIGNED;
        assert!(!r.set_owners(vec![0; 10]), "a table has one owner per slot");
        assert!(r.set_owners(owners));
        assert_eq!(r.drop_instance(1, 2), 1, "only the unassigned slot's key");
        assert_eq!(r.drop_instance(2, 3), 1);
        assert_eq!(read(&mut r, &["EXISTS", "k0", "k1", "k2"], NOW), ":1\r\n");
        assert_eq!(r.drop_instance(0, 3), 48);
        assert!(r.is_empty());
    }
}
