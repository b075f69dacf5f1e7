//! SORT and SORT_RO (redis 7.0 `sort.c`): sort a list, set or sorted set, numerically or
//! `ALPHA`, by the elements or by keys named after them (`BY pattern`), keep a `LIMIT`ed
//! slice, answer the elements or keys named after them (`GET pattern`, `GET #`), or store the
//! result as a list (`STORE`).
//!
//! # Patterns
//! The first `*` of a pattern is replaced by the element: `w_*` names the string key
//! `w_<elem>`, `h_*->f` the field `f` of the hash `h_<elem>` (redis `lookupKeyByPattern`).
//! `#` is the element itself. A pattern without `*` names no key: as `BY` it means "don't
//! sort" (the container's own order, LIMIT applied, and for a list or sorted set DESC
//! reverses it); as `GET` it answers nil.
//!
//! # Order
//! Numeric sort reads each weight with glibc `strtod` rules (the whole C string must be a
//! number, no NaN, no ERANGE; else `One or more scores can't be converted into double`); equal
//! weights are ordered by the elements' bytes, so the order is total. `ALPHA` compares bytes
//! (Redis's `strcoll` under the C/C.UTF-8 locale it runs with; up to a NUL, like a C string,
//! unless storing, where Redis compares whole strings); with `BY`, a missing weight sorts
//! first. The sort is stable, like glibc's `qsort` (a merge sort), so remaining ties keep the
//! container's order. A set sorted with a constant `BY` is sorted `ALPHA` anyway when the
//! result is stored or the caller is a script, as Redis does for replication's sake.
//!
//! # Cluster mode
//! Redis 7.0 refuses `BY`/`GET` patterns outright in cluster mode; here (issue 18) a pattern
//! is allowed when every key it can name is owned by this engine, the one that owns the
//! sorted key: its hash tag (as Redis 7.4's `patternHashSlot` finds it, before any `*`)
//! names a slot this engine owns. Otherwise the answer is Redis 7.4's error (`BY option of
//! SORT denied in Cluster mode when keys formed by the pattern may be in different slots.`).
//! `GET #` and patterns without `*` read no key and are always allowed.
//!
//! Through the proxy a fleet is one Redis, so SORT reads keys of any engine there: on the
//! proxy's script links (`TXDISCOVER ON`; in a script, until its first write) a pattern the
//! rule above refuses is checked key by key instead. When every key it names is owned here
//! or is a guest (a key of another engine brought here by the proxy's gathered run,
//! `crate::txlock`), SORT runs; otherwise it answers `-TXNEEDKEY <hex>,<hex>… BY|GET`
//! listing them all (and the option whose error applies if they cannot be brought), before
//! it writes anything, and the proxy runs it again gathered with those keys
//! (docs/transactions.md).
//! A connection that holds guests but has no `TXDISCOVER` gets the error above for a key
//! that is neither.
//!
//! # ACL
//! As in Redis, `BY` with a pattern and every `GET` need a user that may read every key
//! (`allkeys` or `%R~*`): `… denied due to insufficient ACL permissions.`

use std::cmp::Ordering;

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::slot;
use crate::types::Value;
use crate::types::list::{End, ListValue};
use crate::types::zset::score::strtod;

const ERR_SCORES: CmdError =
    CmdError::Static("ERR One or more scores can't be converted into double");
const ERR_BY_CLUSTER: CmdError = CmdError::Static(
    "ERR BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.",
);
const ERR_GET_CLUSTER: CmdError = CmdError::Static(
    "ERR GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.",
);

const ERR_BY_ACL: CmdError =
    CmdError::Static("ERR BY option of SORT denied due to insufficient ACL permissions.");
const ERR_GET_ACL: CmdError =
    CmdError::Static("ERR GET option of SORT denied due to insufficient ACL permissions.");

/// The bytes a C function sees of `s`: up to the first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
}

/// redis 7.4 `patternHashSlot`: the one slot every key a pattern can name hashes to, if any.
fn pattern_slot(pat: &[u8]) -> Option<u16> {
    let mut open: Option<usize> = None;
    let mut empty_tag = false;
    for (i, &b) in pat.iter().enumerate() {
        match b {
            b'*' | b'?' | b'[' | b'\\' => return None,
            b'{' if open.is_none() && !empty_tag => open = Some(i),
            b'}' if open == Some(i.wrapping_sub(1)) => {
                open = None;
                empty_tag = true;
            }
            b'}' if open.is_some() => {
                return Some(crc(&pat[open.expect("checked") + 1..i]));
            }
            _ => {}
        }
    }
    Some(crc(pat))
}

/// The slot of exactly these bytes (no hash-tag rule).
fn crc(b: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(b) & (slot::SLOTS - 1)
}

/// Whether this engine may read the keys `pat` names (see the module doc, *Cluster mode*).
fn pattern_allowed(e: &Engine, pat: &[u8]) -> bool {
    !e.cluster.enabled()
        || pat == b"#"
        || !pat.contains(&b'*')
        || pattern_slot(pat).is_some_and(|s| e.cluster.owns(s))
}

/// The key `pat` names for element `subst`, and the hash field after `->` if any; None for
/// `#` and for a pattern without `*` (redis `lookupKeyByPattern`).
fn pattern_key<'p>(pat: &'p [u8], subst: &[u8]) -> Option<(Vec<u8>, Option<&'p [u8]>)> {
    if pat == b"#" {
        return None;
    }
    let star = pat.iter().position(|&b| b == b'*')?;
    let after = &pat[star + 1..];
    let (post, field) = match after.windows(2).position(|w| w == b"->") {
        Some(f) if f + 2 < after.len() => (&after[..f], Some(&after[f + 2..])),
        _ => (after, None),
    };
    let mut key = Vec::with_capacity(pat.len() + subst.len());
    key.extend_from_slice(&pat[..star]);
    key.extend_from_slice(subst);
    key.extend_from_slice(post);
    Some((key, field))
}

/// Most keys one `-TXNEEDKEY` may ask for; a SORT naming more keys of other engines gets the
/// cluster error instead (each is a round trip's payload in the proxy's gathered run).
const MAX_NEEDED_KEYS: usize = 100_000;

/// The keys `o`'s patterns name for the elements `v` that are neither owned here nor guests
/// (module docs, *Cluster mode*), in order of first use, each once.
fn keys_elsewhere(e: &Engine, c: &Call, o: &Opts<'_>, v: &[Item]) -> Vec<Vec<u8>> {
    let by = o.by.filter(|_| !o.dontsort);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for it in v {
        for pat in by.iter().chain(o.gets.iter()) {
            let Some((key, _)) = pattern_key(pat, &it.obj) else {
                continue;
            };
            let s = slot::key_slot(&key);
            let asked = c.client.cluster.asked && e.cluster.importing.contains_key(&s);
            if e.cluster.owns(s) || asked || e.locks.is_guest(c.client.db, &key) {
                continue;
            }
            if seen.insert(key.clone()) {
                out.push(key);
            }
        }
    }
    out
}

/// redis `lookupKeyByPattern`: the value `pat` names for element `subst`.
fn lookup_by_pattern(e: &mut Engine, pat: &[u8], subst: &[u8], now_ms: u64) -> Option<Vec<u8>> {
    if pat == b"#" {
        return Some(subst.to_vec());
    }
    let (key, field) = pattern_key(pat, subst)?;
    let i = e.ks.lookup_read(&key, now_ms)?;
    match (e.ks.value(i), field) {
        (Value::Hash(h), Some(f)) => h.get(f).map(<[u8]>::to_vec),
        (Value::Str(s), None) => Some(s.bytes(&mut itoa::Buffer::new()).to_vec()),
        _ => None,
    }
}

/// Parsed options.
struct Opts<'a> {
    desc: bool,
    alpha: bool,
    limit: (i64, i64),
    store: Option<&'a [u8]>,
    by: Option<&'a [u8]>,
    /// `BY` without `*`: keep the container's order.
    dontsort: bool,
    gets: Vec<&'a [u8]>,
    /// A pattern the cluster rule refuses, allowed if every key it names is local (module
    /// docs, *Cluster mode*): the error for a key that is not, `BY`'s if BY's pattern is one.
    check_keys: Option<CmdError>,
}

fn parse_opts<'a>(
    e: &Engine,
    c: &Call<'_>,
    argv: &[&'a [u8]],
    read_only: bool,
) -> Result<Opts<'a>, CmdError> {
    let mut o = Opts {
        desc: false,
        alpha: false,
        limit: (0, -1),
        store: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
        check_keys: None,
    };
    // Through the proxy, or in its gathered run: checked key by key (module docs). A script's
    // client has TXDISCOVER until the script's first write (`crate::script`).
    let per_key = e.cluster.enabled() && (c.client.txdiscover || e.locks.holds_guests(c.client.id));
    let mut j = 2;
    while j < argv.len() {
        let a = argv[j];
        let left = argv.len() - j - 1;
        if args::is(a, "asc") {
            o.desc = false;
        } else if args::is(a, "desc") {
            o.desc = true;
        } else if args::is(a, "alpha") {
            o.alpha = true;
        } else if args::is(a, "limit") && left >= 2 {
            o.limit = (int_arg(argv[j + 1])?, int_arg(argv[j + 2])?);
            j += 2;
        } else if !read_only && args::is(a, "store") && left >= 1 {
            o.store = Some(argv[j + 1]);
            j += 1;
        } else if args::is(a, "by") && left >= 1 {
            let pat = argv[j + 1];
            o.by = Some(pat);
            if pat.contains(&b'*') && !pattern_allowed(e, pat) && per_key {
                // The first refused pattern's error, as Redis's parse would give it.
                o.check_keys.get_or_insert(ERR_BY_CLUSTER);
            }
            if !pat.contains(&b'*') {
                o.dontsort = true;
            } else if !pattern_allowed(e, pat) && !per_key {
                return Err(ERR_BY_CLUSTER);
            } else if !e.acl.reads_all_keys(&c.client.auth) {
                return Err(ERR_BY_ACL);
            }
            j += 1;
        } else if args::is(a, "get") && left >= 1 {
            if !pattern_allowed(e, argv[j + 1]) {
                if !per_key {
                    return Err(ERR_GET_CLUSTER);
                }
                o.check_keys.get_or_insert(ERR_GET_CLUSTER);
            }
            // Redis 7.0 asks this of every GET, `#` included.
            if !e.acl.reads_all_keys(&c.client.auth) {
                return Err(ERR_GET_ACL);
            }
            o.gets.push(argv[j + 1]);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// One element to sort: the element and its weight.
struct Item {
    obj: Vec<u8>,
    score: f64,
    /// ALPHA with BY: the weight's bytes (None = missing).
    cmp: Option<Vec<u8>>,
}

impl Item {
    fn new(obj: &[u8]) -> Item {
        Item {
            obj: obj.to_vec(),
            score: 0.0,
            cmp: None,
        }
    }
}

/// redis `sortCompare`.
fn compare(a: &Item, b: &Item, o: &Opts<'_>) -> Ordering {
    let cmp = if !o.alpha {
        a.score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.obj.cmp(&b.obj))
    } else if o.by.is_some() {
        match (&a.cmp, &b.cmp) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) if o.store.is_some() => x.cmp(y),
            (Some(x), Some(y)) => c_str(x).cmp(c_str(y)),
        }
    } else if o.store.is_some() {
        a.obj.cmp(&b.obj)
    } else {
        c_str(&a.obj).cmp(c_str(&b.obj))
    };
    if o.desc { cmp.reverse() } else { cmp }
}

/// A numeric weight as Redis reads it (`strtod` of the C string, all of it), or None.
fn weight(s: &[u8]) -> Option<f64> {
    let cs = c_str(s);
    let r = strtod(cs);
    (r.len == cs.len() && !r.erange && !r.value.is_nan()).then_some(r.value)
}

fn sort_generic(e: &mut Engine, c: &mut Call, read_only: bool) -> Result<(), CmdError> {
    let argv = c.argv;
    let now = c.now_ms;
    let mut o = parse_opts(e, c, argv, read_only)?;
    let found = e.ks.lookup_read(argv[1], now);
    if let Some(i) = found
        && !matches!(
            e.ks.value(i),
            Value::List(_) | Value::Set(_) | Value::ZSet(_)
        )
    {
        return Err(CmdError::WrongType);
    }
    // redis `sortCommandGeneric` converts the sorted set it sorts to a skiplist for good
    // (SORT_RO too): OBJECT ENCODING shows it.
    if let Some(i) = found {
        e.ks.reencode(i, |v| {
            if let Value::ZSet(z) = v {
                z.to_skiplist();
            }
        });
    }
    let is_set = found.is_some_and(|i| matches!(e.ks.value(i), Value::Set(_)));
    // Scripts run as a client whose address is "lua" (crate::script::ScriptRun).
    let in_script = c.client.addr == "lua";
    if o.dontsort && is_set && (o.store.is_some() || in_script) {
        // A set's order is not deterministic: sort it for replication and scripts.
        o.dontsort = false;
        o.alpha = true;
        o.by = None;
    }
    let len = match found.map(|i| e.ks.value(i)) {
        Some(Value::List(l)) => l.len(),
        Some(Value::Set(s)) => s.len(),
        Some(Value::ZSet(z)) => z.len(),
        _ => 0,
    } as i64;
    // LIMIT, clamped into the container (redis's arithmetic, signed).
    let mut start = o.limit.0.max(0).min(len);
    let count = o.limit.1.max(-1).min(len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    // Load the elements; a list or sorted set kept in its order loads only the range.
    let mut v: Vec<Item> = Vec::new();
    match found.map(|i| e.ks.value(i)) {
        Some(Value::List(l)) if o.dontsort && end >= start => {
            let n = (end - start + 1) as usize;
            if o.desc {
                v.extend(l.iter().rev().skip(start as usize).take(n).map(Item::new));
            } else {
                v.extend(l.iter().skip(start as usize).take(n).map(Item::new));
            }
            end -= start;
            start = 0;
        }
        // An empty range of a list kept in its order: nothing to load.
        Some(Value::List(_)) if o.dontsort => {}
        Some(Value::List(l)) => v.extend(l.iter().map(Item::new)),
        Some(Value::Set(s)) => v.extend(s.iter().map(|m| Item::new(&m))),
        Some(Value::ZSet(z)) if o.dontsort => {
            let n = (end - start + 1).max(0) as usize;
            let skip = start.max(0) as usize;
            if n > 0 {
                let from = if o.desc { z.len() - 1 - skip } else { skip };
                v.extend(z.walk(from, n, o.desc).map(|(m, _)| Item::new(m)));
            }
            end -= start;
            start = 0;
        }
        Some(Value::ZSet(z)) => v.extend(z.iter().map(|(m, _)| Item::new(m))),
        _ => {}
    }
    if let Some(refused) = o.check_keys.take() {
        let elsewhere = keys_elsewhere(e, c, &o, &v);
        if !elsewhere.is_empty() {
            if !c.client.txdiscover || elsewhere.len() > MAX_NEEDED_KEYS {
                return Err(refused);
            }
            let option = if refused == ERR_BY_CLUSTER {
                "BY"
            } else {
                "GET"
            };
            return Err(CmdError::Other(crate::txlock::need_keys(
                &elsewhere, option,
            )));
        }
    }
    if !o.dontsort {
        let mut bad = false;
        for it in &mut v {
            let by = match o.by {
                Some(pat) => match lookup_by_pattern(e, pat, &it.obj, now) {
                    Some(b) => b,
                    None => continue,
                },
                None => {
                    if !o.alpha {
                        match weight(&it.obj) {
                            Some(w) => it.score = w,
                            None => bad = true,
                        }
                    }
                    continue;
                }
            };
            if o.alpha {
                it.cmp = Some(by);
            } else {
                match weight(&by) {
                    Some(w) => it.score = w,
                    None => bad = true,
                }
            }
        }
        if bad {
            return Err(ERR_SCORES);
        }
        v.sort_by(|a, b| compare(a, b, &o));
    }
    let range = if end >= start {
        start as usize..end as usize + 1
    } else {
        0..0
    };
    let rows = range.len();
    let outputlen = if o.gets.is_empty() {
        rows
    } else {
        o.gets.len() * rows
    };
    // Every GET value is looked up before anything is written.
    let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(outputlen);
    for it in &v[range.clone()] {
        if o.gets.is_empty() {
            out.push(Some(it.obj.clone()));
        }
        for pat in &o.gets {
            out.push(lookup_by_pattern(e, pat, &it.obj, now));
        }
    }
    match o.store {
        None => {
            let mut w = c.w();
            w.array(outputlen);
            for x in &out {
                match x {
                    Some(b) => w.bulk(b),
                    None => w.null(),
                }
            }
        }
        Some(dest) => {
            if outputlen > 0 {
                let mut l = ListValue::with_fill(e.config.encoding.list_max_listpack_size);
                for x in &out {
                    l.push(x.as_deref().unwrap_or_default(), End::Tail);
                }
                let existing = e.ks.lookup_write(dest, now);
                let dirty = e.ks.dirty;
                e.ks.set(dest, Value::List(Box::new(l)), Keep::Nothing, existing);
                // Redis counts one change per element stored.
                e.ks.dirty = dirty + outputlen as u64;
                notify(e, class::LIST, "sortstore", dest);
            } else if e.ks.delete(dest, now) {
                notify(e, class::GENERIC, "del", dest);
            }
            c.w().integer(outputlen as i64);
        }
    }
    Ok(())
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern …] [ASC|DESC] [ALPHA]
/// [STORE destination]` → the sorted elements, or with STORE their number.
pub fn sort(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    sort_generic(e, c, false)
}

/// `SORT_RO key …`: SORT without STORE.
pub fn sort_ro(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    sort_generic(e, c, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_slots_like_redis_7_4() {
        assert_eq!(pattern_slot(b"w_*"), None);
        assert_eq!(pattern_slot(b"{t}w_*"), Some(crc(b"t")));
        assert_eq!(pattern_slot(b"w_{t}_*->f"), Some(crc(b"t")));
        assert_eq!(pattern_slot(b"{w_*}"), None);
        assert_eq!(pattern_slot(b"{}x*"), None);
        assert_eq!(pattern_slot(b"fixed"), Some(crc(b"fixed")));
    }

    #[test]
    fn weights_follow_strtod() {
        assert_eq!(weight(b"1.5"), Some(1.5));
        assert_eq!(weight(b" 2"), Some(2.0));
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b"3\x00junk"), Some(3.0));
        assert_eq!(weight(b"1e400"), None);
        assert_eq!(weight(b"nan"), None);
        assert_eq!(weight(b"2x"), None);
        assert_eq!(weight(b"-inf"), Some(f64::NEG_INFINITY));
    }
}
