//! Relaying an effect: which browsers it concerns and what each of them gets.
//!
//! # Routing an effect
//!
//! An effect whose keys the command table knows goes only to the browsers found in the
//! prefix index (`PrefixIndex`: prefix → browsers; per key one hash lookup per distinct
//! prefix length in use), so its cost is proportional to the browsers concerned, not to all
//! browsers: with one prefix per browser a keychange costs the same for 10 or 10,000
//! browsers. A sequence gap, a `FLUSHALL` or an effect without known keys still visits every
//! browser (all of them resync or see it).
//!
//! Each browser visited gets one [`Relay`]: skip, the whole effect, the visible keys of a
//! `DEL`, defer (inside a snapshot), or resync. [`action`] decides it from the browser's
//! state for the instance and [`visible`] from its prefixes; `Server::relay` carries it out.
//! A replay (resume from the ring, or the effects deferred during a snapshot) goes through
//! [`visible`] alone (`Server::deliver`): the browser is live by then.
//!
//! # Databases
//!
//! A browser follows one database of every engine (`subscribe`'s `db`, default 0). The
//! prefix index is kept per database, so an effect only meets browsers of its own database;
//! [`visible`] and [`action`] skip an effect of another database for the paths that visit
//! every browser (flush, unknown effect, replay). Sequence numbers stay per engine: a gap
//! resyncs the browsers of every database, and the effects of other databases count as
//! covered, like keys outside a browser's prefixes.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use super::Server;
use super::queue::Kind;
use super::resync::Inst;
use crate::feed::{Effect, Scope};
use crate::protocol;

/// What one browser gets for one effect of one instance.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Relay {
    /// Nothing: none of its keys is visible, or the browser does not follow the instance
    /// (not subscribed, waiting for a snapshot, or inside one that already covers it).
    Skip,
    /// The whole effect, framed once for every browser ([`Effect::wire`]).
    Whole,
    /// A `DEL`/`UNLINK` of which only these key positions are visible: relayed as a `DEL` of
    /// them (each key of a `DEL` is independent).
    Keys(Vec<usize>),
    /// Newer than the snapshot the browser is receiving: held until that snapshot ends.
    Defer,
    /// The browser's copy of the instance cannot follow: `must-refetch` for this reason,
    /// then a new snapshot.
    Resync(&'static str),
}

/// What a browser live on the instance, following database `db` with `prefixes`, gets for
/// `e`.
pub(super) fn visible(prefixes: &[Vec<u8>], db: usize, e: &Effect) -> Relay {
    if e.db != db {
        return Relay::Skip;
    }
    match &e.scope {
        Scope::Flush => Relay::Whole,
        Scope::Unknown => Relay::Resync("unknown-effect"),
        // The key stays: the target's feed brings its copy (feed.rs, `Scope::Moved`).
        Scope::Moved => Relay::Skip,
        Scope::Keys(pos) => {
            // Counted first: this runs once per browser per effect, and the common
            // cases (none or all keys visible) need no list.
            let seen = |&p: &usize| protocol::matches(prefixes, &e.args[p]);
            let n = pos.iter().filter(|p| seen(p)).count();
            if n == 0 {
                Relay::Skip
            } else if n == pos.len() {
                Relay::Whole
            } else if e.args[0].eq_ignore_ascii_case(b"del")
                || e.args[0].eq_ignore_ascii_case(b"unlink")
            {
                Relay::Keys(pos.iter().copied().filter(|p| seen(p)).collect())
            } else {
                // Keys inside and outside the prefixes (RENAME across them, …): the
                // effect cannot be relayed without leaking; refetch this instance.
                Relay::Resync("partial-effect")
            }
        }
    }
}

/// What a browser in state `inst` for the instance, following database `db` with
/// `prefixes`, gets for `e`; `gap`: the feed skipped sequence numbers just before `e`.
pub(super) fn action(inst: &Inst, prefixes: &[Vec<u8>], db: usize, e: &Effect, gap: bool) -> Relay {
    match inst {
        Inst::Live if gap => Relay::Resync("feed-gap"),
        Inst::Live => visible(prefixes, db, e),
        Inst::Snapshot { seq: Some(s), .. } if e.seq > *s => {
            if gap {
                Relay::Resync("feed-gap")
            } else if e.db != db {
                Relay::Skip
            } else {
                Relay::Defer
            }
        }
        _ => Relay::Skip,
    }
}

/// Browsers by subscribed prefix, so an effect reaches the browsers whose prefixes match
/// one of its keys without testing every browser: for a key, one hash lookup per distinct
/// prefix length in use (usually one or two lengths), e.g. `fan:7:k` → `""`, `"fan:7:"`.
#[derive(Default)]
pub(super) struct PrefixIndex {
    by_prefix: HashMap<Vec<u8>, Vec<usize>>,
    /// Prefix length → how many prefixes of that length are indexed.
    lens: BTreeMap<usize, usize>,
}

impl PrefixIndex {
    pub(super) fn is_empty(&self) -> bool {
        self.by_prefix.is_empty()
    }

    pub(super) fn insert(&mut self, prefixes: &[Vec<u8>], idx: usize) {
        for p in prefixes {
            self.by_prefix.entry(p.clone()).or_default().push(idx);
            *self.lens.entry(p.len()).or_default() += 1;
        }
    }

    /// Removal scans the prefix's list: O(browsers on that prefix), paid once per close.
    pub(super) fn remove(&mut self, prefixes: &[Vec<u8>], idx: usize) {
        for p in prefixes {
            let Some(list) = self.by_prefix.get_mut(p.as_slice()) else {
                continue;
            };
            let Some(at) = list.iter().position(|&x| x == idx) else {
                continue;
            };
            list.swap_remove(at);
            if list.is_empty() {
                self.by_prefix.remove(p.as_slice());
            }
            if let Some(n) = self.lens.get_mut(&p.len()) {
                *n -= 1;
                if *n == 0 {
                    self.lens.remove(&p.len());
                }
            }
        }
    }

    /// Appends the browsers with a prefix of one of `keys` to `out`, each once.
    pub(super) fn candidates<'a>(
        &self,
        keys: impl Iterator<Item = &'a [u8]>,
        out: &mut Vec<usize>,
    ) {
        let mut lists = 0;
        for key in keys {
            for &len in self.lens.keys() {
                if len > key.len() {
                    break;
                }
                if let Some(list) = self.by_prefix.get(&key[..len]) {
                    out.extend_from_slice(list);
                    lists += 1;
                }
            }
        }
        if lists > 1 {
            // A browser under several matching prefixes (or keys) is relayed the effect once.
            out.sort_unstable();
            out.dedup();
        }
    }
}

impl Server {
    /// Effect `seq` of instance `i` arrived: it joins the ring, then goes to the browsers it
    /// concerns.
    pub(super) fn relay_effect(&mut self, i: usize, seq: u64, db: usize, args: Vec<Vec<u8>>) {
        let link = &mut self.links[i];
        let gap = link.seq.is_some_and(|s| s + 1 != seq);
        if gap {
            log::warn!(
                "fanout: instance {i}: effect {seq} after {:?}: gap, browsers refetch",
                link.seq
            );
        }
        link.seq = Some(seq);
        let e = Rc::new(Effect::new(seq, db, args));
        link.ring.push(Rc::clone(&e));
        if e.scope == Scope::Moved {
            self.slots_moving();
            if !gap {
                return;
            }
        }
        if !gap && let Scope::Keys(pos) = &e.scope {
            // Only browsers with a prefix of one of its keys can be concerned: a
            // Live one relays it, one in a snapshot defers it (for any other the
            // relay would find no visible key and skip it).
            let mut cand = std::mem::take(&mut self.candidates);
            if let Some(index) = self.index.get(&e.db) {
                index.candidates(pos.iter().map(|&p| e.args[p].as_slice()), &mut cand);
            }
            for &idx in &cand {
                self.relay_to(idx, i, &e, false);
            }
            cand.clear();
            self.candidates = cand;
            return;
        }
        // A gap, a flush or an effect without known keys concerns every browser.
        for idx in self.slots() {
            self.relay_to(idx, i, &e, gap);
        }
    }

    /// Relays `e` of instance `i` to browser `idx` according to its state ([`action`]).
    fn relay_to(&mut self, idx: usize, i: usize, e: &Rc<Effect>, gap: bool) {
        let Some(b) = self.browser(idx) else { return };
        let act = action(
            &b.inst[i],
            b.prefixes.as_deref().unwrap_or(&[]),
            b.db,
            e,
            gap,
        );
        self.relay(idx, i, e, act);
    }

    /// Relays effect `e` of instance `i` to a live browser, filtered by its prefixes.
    pub(super) fn deliver(&mut self, idx: usize, i: usize, e: &Rc<Effect>) {
        let Some(b) = self.browser(idx) else { return };
        let act = visible(b.prefixes.as_deref().unwrap_or(&[]), b.db, e);
        self.relay(idx, i, e, act);
    }

    /// Carries out `act` for browser `idx`.
    fn relay(&mut self, idx: usize, i: usize, e: &Rc<Effect>, act: Relay) {
        match act {
            Relay::Skip => {}
            Relay::Whole => self.push_wire(idx, e.wire(i)),
            Relay::Keys(visible) => {
                let mut argv: Vec<&[u8]> = vec![b"DEL"];
                argv.extend(visible.iter().map(|&p| e.args[p].as_slice()));
                let frame = protocol::keychange(i, e.seq, argv[1], &argv);
                self.push(idx, frame.into(), Kind::Live);
            }
            Relay::Defer => {
                if let Some(b) = self.browser(idx)
                    && let Inst::Snapshot { deferred, .. } = &mut b.inst[i]
                {
                    deferred.push(Rc::clone(e));
                }
            }
            Relay::Resync(reason) => {
                if reason == "unknown-effect" {
                    log::warn!(
                        "fanout: effect {} of instance {i} ({}) has no key the table can find: resync",
                        e.seq,
                        String::from_utf8_lossy(&e.args[0])
                    );
                }
                self.resync(idx, i, reason);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::resync::Inst;
    use super::{PrefixIndex, Relay};
    use crate::feed::Effect;

    /// [`super::action`] for a browser of database 0.
    fn action(inst: &Inst, p: &[Vec<u8>], e: &Effect, gap: bool) -> Relay {
        super::action(inst, p, 0, e, gap)
    }

    fn action2(inst: &Inst, p: &[Vec<u8>], db: usize, e: &Effect, gap: bool) -> Relay {
        super::action(inst, p, db, e, gap)
    }

    fn found(ix: &PrefixIndex, keys: &[&str]) -> Vec<usize> {
        let mut out = Vec::new();
        ix.candidates(keys.iter().map(|k| k.as_bytes()), &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn prefix_index_finds_each_concerned_browser_once() {
        let mut ix = PrefixIndex::default();
        let p = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        ix.insert(&p(&["fan:1:"]), 1);
        ix.insert(&p(&["fan:10:"]), 10);
        ix.insert(&p(&["fan:1:", "other:"]), 2);
        ix.insert(&p(&[""]), 7);
        assert_eq!(found(&ix, &["fan:1:k"]), vec![1, 2, 7]);
        assert_eq!(found(&ix, &["fan:10:k"]), vec![7, 10]);
        assert_eq!(found(&ix, &["fan:1:k", "other:x"]), vec![1, 2, 7]);
        assert_eq!(found(&ix, &["fan:"]), vec![7]);
        assert_eq!(found(&ix, &[""]), vec![7]);
        ix.remove(&p(&[""]), 7);
        ix.remove(&p(&["fan:1:", "other:"]), 2);
        assert_eq!(found(&ix, &["fan:1:k", "other:x"]), vec![1]);
        assert_eq!(found(&ix, &["zzz"]), Vec::<usize>::new());
        // Removing what is not there changes nothing.
        ix.remove(&p(&["fan:1:"]), 99);
        assert_eq!(found(&ix, &["fan:1:"]), vec![1]);
        ix.remove(&p(&["fan:1:"]), 1);
        ix.remove(&p(&["fan:10:"]), 10);
        assert!(ix.by_prefix.is_empty() && ix.lens.is_empty());
    }

    #[test]
    fn one_action_per_browser_and_effect() {
        let args = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let p = args(&["a:"]);
        let set = Effect::new(5, 0, args(&["SET", "a:1", "x"]));
        let del = Effect::new(5, 0, args(&["DEL", "a:1", "b:1"]));
        let rename = Effect::new(5, 0, args(&["RENAME", "a:1", "b:1"]));
        let other_db = Effect::new(5, 2, args(&["SET", "a:1", "x"]));
        let flush_other = Effect::new(5, 2, args(&["FLUSHALL"]));
        let snap = |seq| Inst::Snapshot {
            id: 1,
            seq,
            deferred: Vec::new(),
        };
        assert_eq!(action(&Inst::Live, &p, &set, false), Relay::Whole);
        assert_eq!(
            action(&Inst::Live, &args(&["b:"]), &set, false),
            Relay::Skip
        );
        assert_eq!(action(&Inst::Live, &p, &del, false), Relay::Keys(vec![1]));
        assert_eq!(
            action(&Inst::Live, &p, &rename, false),
            Relay::Resync("partial-effect")
        );
        assert_eq!(
            action(&Inst::Live, &p, &set, true),
            Relay::Resync("feed-gap")
        );
        assert_eq!(action(&snap(Some(4)), &p, &set, false), Relay::Defer);
        assert_eq!(
            action(&snap(Some(4)), &p, &set, true),
            Relay::Resync("feed-gap")
        );
        assert_eq!(action(&snap(Some(5)), &p, &set, false), Relay::Skip);
        assert_eq!(action(&snap(None), &p, &set, false), Relay::Skip);
        assert_eq!(action(&Inst::Waiting, &p, &set, true), Relay::Skip);
        assert_eq!(action(&Inst::Idle, &p, &set, false), Relay::Skip);
        // Databases: only the browser's own.
        assert_eq!(action(&Inst::Live, &p, &other_db, false), Relay::Skip);
        assert_eq!(action(&Inst::Live, &p, &flush_other, false), Relay::Skip);
        assert_eq!(action2(&Inst::Live, &p, 2, &other_db, false), Relay::Whole);
        assert_eq!(
            action2(&Inst::Live, &p, 2, &flush_other, false),
            Relay::Whole
        );
        assert_eq!(action2(&Inst::Live, &p, 2, &set, false), Relay::Skip);
        assert_eq!(action(&snap(Some(4)), &p, &other_db, false), Relay::Skip);
        assert_eq!(
            action2(&snap(Some(4)), &p, 2, &other_db, false),
            Relay::Defer
        );
        assert_eq!(
            action(&Inst::Live, &p, &other_db, true),
            Relay::Resync("feed-gap"),
            "a gap concerns every database"
        );
    }
}
