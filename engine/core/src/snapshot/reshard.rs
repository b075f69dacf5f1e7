//! Re-sharding at load: building one engine's keyspace from the snapshots of a fleet of
//! another size (docs/operations.md, "Changing the number of engines").
//!
//! When the engine count changes, the slot map changes, so the keys of a slot may sit in
//! another engine's snapshot. The supervisor then moves every snapshot aside (staged files)
//! and each new engine reads **all** of them through a [`Split`], keeping only the keys whose
//! slot it owns:
//!
//! - every file is read with the ordinary loader (checksum, databases, expiry: keys expired
//!   by now are not kept), one at a time, so memory holds the result plus one file;
//! - files are added **newest first** (their header's `created_ms`, see [`created_ms`]); a
//!   key already taken from a newer file is skipped, so when a key sits in several files (a
//!   copied-in snapshot, a key written on two layouts) the newest copy wins;
//! - FUNCTION libraries are the same on every engine (FUNCTION LOAD goes to all of them), so
//!   only the newest file's libraries are loaded, once;
//! - keys of slots this engine does not own are counted (they are their owners' to load), as
//!   are older copies, so the engine can log what went where.
//!
//! Pure like the rest of the crate: the engine process opens the files and hands in readers.
//! [`foreign_keys`] counts keys an engine holds but does not own, for the report after an
//! ordinary load.

use std::io::Read;

use super::{Libs, LoadError, LoadStats, load_into};
use crate::Engine;
use crate::keyspace::{Db, Keyspace, switch};

/// Header bytes [`created_ms`] needs: magic, version, created_ms.
pub const HEADER_LEN: usize = 20;

/// The `created_ms` of a snapshot from its first [`HEADER_LEN`] bytes; `None` if they are not
/// a snapshot header (the full load then reports why).
pub fn created_ms(header: &[u8]) -> Option<u64> {
    if header.len() < HEADER_LEN || &header[..8] != super::MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(header[12..20].try_into().ok()?))
}

/// What a [`Split`] did, over every file added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitStats {
    /// Files added.
    pub files: u64,
    /// Keys kept: this engine owns their slot.
    pub kept: u64,
    /// Keys of slots other instances own (they load them from the same files).
    pub others: u64,
    /// Older copies of keys already taken from a newer file.
    pub older_copies: u64,
    /// Keys that had expired by the load (not kept).
    pub expired: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// An engine's keyspace being built from several snapshots; see the module docs.
pub struct Split {
    ks: Keyspace,
    dbs: Vec<Db>,
    /// The newest file's libraries, once one was added.
    libs: Option<Libs>,
    seed: u64,
    /// The encoding thresholds in force: loaded values are built under them.
    limits: crate::types::EncodingLimits,
    pub stats: SplitStats,
}

impl Split {
    /// An empty result shaped like `e` (its databases and hash seed).
    pub fn new(e: &Engine) -> Split {
        let seed = e.config.hash_seed;
        Split {
            ks: Keyspace::new(seed),
            dbs: (0..e.databases()).map(|n| Db::new(n, seed)).collect(),
            libs: None,
            seed,
            limits: e.config.encoding,
            stats: SplitStats::default(),
        }
    }

    /// Reads one snapshot and keeps the keys whose slot `owns` accepts, unless a newer file
    /// added before already gave them. Call newest file first. On error nothing of this file
    /// is kept (what earlier files gave stays).
    pub fn add<R: Read>(
        &mut self,
        now_ms: u64,
        input: R,
        owns: impl Fn(u16) -> bool,
    ) -> Result<LoadStats, LoadError> {
        let mut ks = Keyspace::new(self.seed);
        let mut dbs: Vec<Db> = (0..self.dbs.len()).map(|n| Db::new(n, self.seed)).collect();
        let mut libs = Libs::default();
        let st = load_into(&mut ks, &mut dbs, &mut libs, now_ms, input, &self.limits)?;
        self.stats.files += 1;
        self.stats.expired += st.expired;
        self.stats.bytes += st.bytes;
        if self.libs.is_none() {
            self.libs = Some(libs);
        }
        for n in 0..self.dbs.len() {
            switch(&mut ks, &mut dbs, n);
            switch(&mut self.ks, &mut self.dbs, n);
            // Taking the last entry each time is O(1) (a swap_remove of the last position).
            while !ks.is_empty() {
                let (key, entry) = ks.remove_at(ks.len() - 1);
                if !owns(crate::slot::key_slot(&key)) {
                    self.stats.others += 1;
                } else if self.ks.data.contains(&key) {
                    self.stats.older_copies += 1;
                } else {
                    let at = entry.expire_at();
                    self.ks.insert_loaded(&key, entry.value, at);
                    self.stats.kept += 1;
                }
            }
        }
        Ok(st)
    }

    /// Installs the result in `e`, whose keyspace must be empty (start-up), and hands the
    /// newest file's FUNCTION libraries to its script host.
    pub fn finish(mut self, e: &mut Engine) -> Result<SplitStats, LoadError> {
        if (0..e.databases()).any(|n| !e.db(n).is_empty()) {
            return Err(LoadError {
                offset: 0,
                reason: "the keyspace is not empty".into(),
                io: None,
            });
        }
        if let Some(libs) = self.libs.take().filter(|l| !l.codes.is_empty()) {
            let loaded = match e.scripting.as_mut() {
                Some(host) => host.load_libraries(&libs.codes),
                None => Err("no script host to load them into".into()),
            };
            loaded.map_err(|m| LoadError {
                offset: libs.at,
                reason: format!("function libraries: {m}"),
                io: None,
            })?;
        }
        e.use_db(0);
        switch(&mut self.ks, &mut self.dbs, 0);
        // Loading is not a change (the engine saves the result itself right after).
        self.ks.dirty = e.ks.dirty;
        e.ks = self.ks;
        e.dbs = self.dbs;
        e.persist.dirty_at_last_save = e.ks.dirty;
        e.persist.last_load_keys_loaded = self.stats.kept;
        e.persist.last_load_keys_expired = self.stats.expired;
        Ok(self.stats)
    }
}

/// Keys (every database, expired ones included) whose slot this engine does not own in its
/// cluster topology; 0 for a standalone engine, which owns every slot.
pub fn foreign_keys(e: &Engine) -> u64 {
    if !e.cluster.enabled() {
        return 0;
    }
    (0..e.databases())
        .map(|n| {
            e.db(n)
                .iter_entries()
                .filter(|(k, _)| !e.cluster.owns(crate::slot::key_slot(k)))
                .count() as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Keep;
    use crate::slot::instance_for_slot;
    use crate::snapshot::write;
    use crate::types::{StrValue, Value};

    fn engine() -> Engine {
        Engine::new(crate::Config {
            hash_seed: 7,
            ..Default::default()
        })
    }

    fn set(e: &mut Engine, db: usize, key: &str, val: &str, expire: Option<u64>) {
        e.use_db(db);
        let i = e.ks.set(
            key.as_bytes(),
            Value::Str(StrValue::from_slice(val.as_bytes())),
            Keep::Nothing,
            None,
        );
        if let Some(at) = expire {
            e.ks.set_expire(i, at);
        }
        e.use_db(0);
    }

    fn snap(e: &Engine, now_ms: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write(e, now_ms, &mut out).unwrap();
        out
    }

    /// (value, expiry) of `key` in database `db`.
    fn get(e: &mut Engine, db: usize, key: &str) -> Option<(Vec<u8>, Option<u64>)> {
        e.use_db(db);
        let r = e.ks.lookup_read_notouch(key.as_bytes(), 0).map(|i| {
            let v = match e.ks.value(i) {
                Value::Str(StrValue::Raw(b)) => b.clone(),
                _ => b"<other>".to_vec(),
            };
            (v, e.ks.expire_at(i))
        });
        e.use_db(0);
        r
    }

    #[test]
    fn every_key_lands_on_exactly_one_owner_with_its_expiry_and_database() {
        // Two old engines, each with half the keys (by the 2-instance map), some in db 1 and
        // some with an expiry; split into 3.
        let mut old = [engine(), engine()];
        for k in 0..300 {
            let key = format!("k{k}");
            let owner = crate::slot::instance_for_key(key.as_bytes(), 2) as usize;
            let db = k % 4 / 3; // one in four in database 1
            set(
                &mut old[owner],
                db,
                &key,
                &format!("v{k}"),
                (k % 5 == 0).then_some(9_000),
            );
        }
        let files: Vec<Vec<u8>> = old.iter().map(|e| snap(e, 100)).collect();
        let mut total = 0;
        for me in 0..3u32 {
            let mut split = Split::new(&engine());
            for f in &files {
                split
                    .add(100, &f[..], |s| instance_for_slot(s, 3) == me)
                    .unwrap();
            }
            let mut e = engine();
            let st = split.finish(&mut e).unwrap();
            assert_eq!(st.files, 2);
            assert_eq!(st.kept + st.others, 300);
            total += st.kept;
            for k in 0..300 {
                let key = format!("k{k}");
                let db = k % 4 / 3;
                let mine = crate::slot::instance_for_key(key.as_bytes(), 3) == me;
                let want =
                    mine.then(|| (format!("v{k}").into_bytes(), (k % 5 == 0).then_some(9_000)));
                assert_eq!(get(&mut e, db, &key), want, "{key} on {me}");
            }
        }
        assert_eq!(total, 300);
    }

    #[test]
    fn the_newest_file_wins_and_expired_keys_stay_out() {
        let mut older = engine();
        set(&mut older, 0, "dup", "old", None);
        set(&mut older, 0, "gone", "x", Some(50));
        let mut newer = engine();
        set(&mut newer, 0, "dup", "new", None);
        let (fo, fn_) = (snap(&older, 10), snap(&newer, 20));
        assert_eq!(created_ms(&fo), Some(10));
        assert_eq!(created_ms(&fn_), Some(20));
        assert_eq!(created_ms(b"RECACHED"), None);
        let mut split = Split::new(&engine());
        split.add(100, &fn_[..], |_| true).unwrap();
        split.add(100, &fo[..], |_| true).unwrap();
        let mut e = engine();
        let st = split.finish(&mut e).unwrap();
        assert_eq!((st.kept, st.older_copies, st.expired), (1, 1, 1));
        assert_eq!(get(&mut e, 0, "dup").unwrap().0, b"new");
        assert_eq!(get(&mut e, 0, "gone"), None);
    }

    #[test]
    fn a_bad_file_keeps_what_earlier_files_gave() {
        let mut a = engine();
        set(&mut a, 0, "a", "1", None);
        let good = snap(&a, 10);
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 13] ^= 1;
        let mut split = Split::new(&engine());
        split.add(100, &good[..], |_| true).unwrap();
        assert!(split.add(100, &bad[..], |_| true).is_err());
        let mut e = engine();
        assert_eq!(split.finish(&mut e).unwrap().kept, 1);
        assert_eq!(e.dbsize(), 1);
    }

    #[test]
    fn foreign_keys_are_counted_in_cluster_mode_only() {
        let mut e = engine();
        for k in 0..50 {
            set(&mut e, 0, &format!("f{k}"), "v", None);
        }
        assert_eq!(foreign_keys(&e), 0);
        let mut c = Engine::new(crate::Config {
            cluster_nodes: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            cluster_index: 0,
            ..Default::default()
        });
        let mut want = 0;
        for k in 0..50 {
            let key = format!("f{k}");
            set(&mut c, 0, &key, "v", None);
            want += u64::from(crate::slot::instance_for_key(key.as_bytes(), 2) != 0);
        }
        assert_eq!(foreign_keys(&c), want);
    }
}
