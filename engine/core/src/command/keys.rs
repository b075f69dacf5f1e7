//! THE key extractor: which arguments of a request are keys, from the command table's row.
//!
//! One function, [`keys`], for every part that needs keys: ACL key permissions, cluster
//! redirects (-MOVED / -CROSSSLOT), `COMMAND GETKEYS` / `GETKEYSANDFLAGS`, the keychange
//! effects, the proxy's routing and the fan-out's scope. It follows Redis 7.0's
//! `getKeysFromCommandWithSpecs` (src/db.c) exactly, so all of them agree with redis-server:
//!
//! 1. When the row has a key spec that names real keys and none with `variable_flags`, the key
//!    specs are walked (`getKeysUsingKeySpecs`, all or nothing):
//!
//!    | step | type | meaning |
//!    |---|---|---|
//!    | begin_search | `index` | the search starts at argument `index` |
//!    | | `keyword` | after the first argument equal (any case) to `keyword`, looked for from `startfrom` forwards (`> 0`) or from `argc + startfrom` backwards (`< 0`); no keyword: this spec names no key |
//!    | find_keys | `range` | keys to `start + lastkey` (`>= 0`), `argc + lastkey` (`< 0`, `limit` 0) or `start + (argc - start) / limit + lastkey`, every `keystep` |
//!    | | `keynum` | `argv[start + keynumidx]` keys (Redis `string2ll`, `>= 0`) from `start + firstkey`, every `keystep` |
//!
//!    A spec that does not fit the request (bad `numkeys`, a range past the end, `unknown`) or
//!    is `incomplete` fails the whole walk.
//! 2. Otherwise, or when the walk failed, the row's [`GetKeys`] finder runs (Redis's
//!    `getkeys_proc`), with its own leniency (`atoi` for counts, last `STORE` wins…).
//! 3. No finder: no keys.
//!
//! Positions are 1-based argv indexes (`argv[0]` is the command name; for a subcommand row,
//! `argv[1]` is the subcommand). Pure and allocation-free for up to [`INLINE`] keys.

use super::{BeginSearch, CommandSpec, FindKeys, GetKeys, KeyFlags};

/// One key argument: its position and how the command uses it (empty flags where Redis's
/// finder gives none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRef {
    pub pos: usize,
    pub flags: KeyFlags,
}

/// Keys kept without allocating; more spill to the heap.
pub const INLINE: usize = 4;

/// The keys of one request, in Redis's order.
#[derive(Clone, Debug)]
pub struct Keys {
    len: usize,
    inline: [KeyRef; INLINE],
    heap: Vec<KeyRef>,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            len: 0,
            inline: [KeyRef {
                pos: 0,
                flags: KeyFlags::empty(),
            }; INLINE],
            heap: Vec::new(),
        }
    }
}

impl Keys {
    fn push(&mut self, pos: usize, flags: KeyFlags) {
        let k = KeyRef { pos, flags };
        if self.len < INLINE {
            self.inline[self.len] = k;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline);
            }
            self.heap.push(k);
        }
        self.len += 1;
    }

    fn clear(&mut self) {
        self.len = 0;
        self.heap.clear();
    }

    pub fn as_slice(&self) -> &[KeyRef] {
        if self.len <= INLINE {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key positions.
    pub fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.as_slice().iter().map(|k| k.pos)
    }
}

/// The arguments of a request, however the caller holds them (a slice of slices in the engine,
/// offsets into a read buffer in the proxy).
pub trait Argv {
    /// Number of arguments, the command name included.
    fn argc(&self) -> usize;
    /// Argument `i < argc()`.
    fn arg(&self, i: usize) -> &[u8];
}

impl Argv for [&[u8]] {
    fn argc(&self) -> usize {
        self.len()
    }
    fn arg(&self, i: usize) -> &[u8] {
        self[i]
    }
}

/// The keys of `argv` for `spec` (module docs). An empty result for a row that has keys
/// ([`CommandSpec::has_keys`]) means the request does not fit its syntax.
pub fn keys<A: Argv + ?Sized>(spec: &CommandSpec, argv: &A) -> Keys {
    if let Some((pos, flags)) = single_index(spec, argv.argc()) {
        let mut out = Keys::default();
        out.push(pos, flags);
        return out;
    }
    let mut out = Keys::default();
    let mut real_spec = false;
    let mut variable = false;
    for ks in spec.key_specs {
        real_spec |= !ks.flags.contains(KeyFlags::NOT_KEY);
        variable |= ks.flags.contains(KeyFlags::VARIABLE_FLAGS);
    }
    if real_spec && !variable && from_specs(spec, argv, &mut out) {
        return out;
    }
    out.clear();
    if let Some(g) = spec.getkeys {
        from_finder(g, argv, &mut out);
    }
    out
}

/// The position of the one key of a row that always has exactly one, at a fixed place, when
/// the request reaches it: one key spec naming one index (GET, INCR, HSET…), or Redis's SET
/// and BITFIELD finders (key 1, whose flags depend on the rest). `None`: ask [`keys`], which
/// gives the same position for these rows. For hot paths that route by the key (the proxy):
/// it spares ~70 to ~170 instructions per request (callgrind).
#[inline]
pub fn fixed_key(spec: &CommandSpec, argc: usize) -> Option<usize> {
    if let Some((pos, _)) = single_index(spec, argc) {
        return Some(pos);
    }
    match spec.getkeys {
        Some(GetKeys::Set | GetKeys::Bitfield) if argc > 1 => Some(1),
        _ => None,
    }
}

/// The index [`fixed_key`] gives for every request long enough to reach it, when the row has
/// one key spec naming one index.
pub fn single_key_index(spec: &CommandSpec) -> Option<usize> {
    single_index(spec, usize::MAX).map(|(pos, _)| pos)
}

/// A row whose one key spec names one index reached by the request: the key and its flags,
/// as the general walk ([`from_specs`]) would find them.
#[inline]
fn single_index(spec: &CommandSpec, argc: usize) -> Option<(usize, KeyFlags)> {
    if let [ks] = spec.key_specs
        && let BeginSearch::Index(i) = ks.begin_search
        && let FindKeys::Range { lastkey: 0, .. } = ks.find_keys
        && !ks
            .flags
            .intersects(KeyFlags::NOT_KEY | KeyFlags::VARIABLE_FLAGS | KeyFlags::INCOMPLETE)
        && i >= 1
        && (i as usize) < argc
    {
        return Some((i as usize, ks.flags));
    }
    None
}

/// redis `getKeysUsingKeySpecs` with `GET_KEYSPEC_DEFAULT`: false when a spec fails.
fn from_specs<A: Argv + ?Sized>(spec: &CommandSpec, argv: &A, out: &mut Keys) -> bool {
    let argc = argv.argc() as i64;
    for ks in spec.key_specs {
        if ks.flags.contains(KeyFlags::NOT_KEY) {
            continue;
        }
        let first = match ks.begin_search {
            BeginSearch::Index(i) => i64::from(i),
            BeginSearch::Keyword { keyword, startfrom } => {
                match find_keyword(argv, keyword.as_bytes(), i64::from(startfrom)) {
                    Some(i) => i + 1,
                    None => continue,
                }
            }
            BeginSearch::Unknown => return false,
        };
        let (first, last, step) = match ks.find_keys {
            FindKeys::Range {
                lastkey,
                keystep,
                limit,
            } => {
                let (lastkey, limit) = (i64::from(lastkey), i64::from(limit));
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + (argc - first) / limit + lastkey
                };
                (first, last, i64::from(keystep))
            }
            FindKeys::Keynum {
                keynumidx,
                firstkey,
                keystep,
            } => {
                let at = first + i64::from(keynumidx);
                // Redis checks `keynumidx >= argc` only; reading past the end is our guard.
                if i64::from(keynumidx) >= argc || at < 0 || at >= argc {
                    return false;
                }
                let Some(numkeys) = resp::parse_i64(argv.arg(at as usize)).filter(|n| *n >= 0)
                else {
                    return false;
                };
                let first = first + i64::from(firstkey);
                // Redis casts the count to int.
                (
                    first,
                    first + i64::from(numkeys as i32) - 1,
                    i64::from(keystep),
                )
            }
            FindKeys::Unknown => return false,
        };
        // "First or last is out of bounds, which indicates a syntax error".
        if last >= argc || last < first || first >= argc || first < 1 || step < 1 {
            return false;
        }
        let mut i = first;
        while i <= last {
            out.push(i as usize, ks.flags);
            i += step;
        }
        if ks.flags.contains(KeyFlags::INCOMPLETE) {
            return false;
        }
    }
    true
}

/// The keyword's position, searched as Redis's loop does: never position 0, and forwards
/// never the last argument (a key must follow it).
fn find_keyword<A: Argv + ?Sized>(argv: &A, keyword: &[u8], startfrom: i64) -> Option<i64> {
    let argc = argv.argc() as i64;
    let (start, end) = if startfrom > 0 {
        (startfrom, argc - 1)
    } else {
        (argc + startfrom, 1)
    };
    let mut i = start;
    while i != end {
        if i >= argc || i < 1 {
            break;
        }
        if argv.arg(i as usize).eq_ignore_ascii_case(keyword) {
            return Some(i);
        }
        i += if start <= end { 1 } else { -1 };
    }
    None
}

/// Redis's `getkeys_proc` finders (src/db.c), argument for argument.
fn from_finder<A: Argv + ?Sized>(g: GetKeys, argv: &A, out: &mut Keys) {
    let argc = argv.argc();
    // Redis's finders trust the arity check that runs before them (the key at 1 always
    // exists); callers here may ask first (the proxy routes rows it does not check), so a
    // request too short for its key names none.
    if argc < 2 {
        return;
    }
    let is = |i: usize, word: &str| argv.arg(i).eq_ignore_ascii_case(word.as_bytes());
    let none = KeyFlags::empty();
    match g {
        GetKeys::Generic {
            store,
            numkeys,
            first,
            step,
        } => {
            let (store, first, step) = (store as usize, first as usize, step as usize);
            if numkeys as usize >= argc {
                return;
            }
            let num = atoi(argv.arg(numkeys as usize));
            // "Don't return any key if the command is going to reply with syntax error".
            if num < 1 || num as i64 > (argc as i64 - first as i64) / step as i64 {
                return;
            }
            for i in 0..num as usize {
                out.push(first + i * step, none);
            }
            if store != 0 {
                out.push(store, none);
            }
        }
        GetKeys::SortRo => out.push(1, KeyFlags::RO | KeyFlags::ACCESS),
        GetKeys::Sort => {
            out.push(1, KeyFlags::RO | KeyFlags::ACCESS);
            let mut store = None;
            let mut i = 2;
            while i < argc {
                // Redis's skip list is checked in order; `store` matches inside the same loop,
                // so only an argument that is none of limit/get/by is tested for it.
                if is(i, "limit") {
                    i += 2;
                } else if is(i, "get") || is(i, "by") {
                    i += 1;
                } else if is(i, "store") && i + 1 < argc {
                    store = Some(i + 1);
                }
                i += 1;
            }
            if let Some(pos) = store {
                out.push(pos, KeyFlags::OW | KeyFlags::UPDATE);
            }
        }
        GetKeys::Migrate => {
            let (mut first, mut num) = (3, 1);
            if argc > 6 {
                let mut i = 6;
                while i < argc {
                    if is(i, "keys") {
                        if !argv.arg(3).is_empty() {
                            num = 0; // a syntax error migrateCommand reports
                        } else {
                            first = i + 1;
                            num = argc - first;
                        }
                        break;
                    }
                    if is(i, "auth") {
                        i += 1;
                    } else if is(i, "auth2") {
                        i += 2;
                    }
                    i += 1;
                }
            }
            let flags = KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::DELETE;
            for i in 0..num {
                if first + i < argc {
                    out.push(first + i, flags);
                }
            }
        }
        GetKeys::Georadius => {
            let mut stored = None;
            let mut i = 5;
            while i < argc {
                if (is(i, "store") || is(i, "storedist")) && i + 1 < argc {
                    stored = Some(i + 1);
                    i += 1;
                }
                i += 1;
            }
            out.push(1, none);
            if let Some(pos) = stored {
                out.push(pos, none);
            }
        }
        GetKeys::Xread => {
            let mut streams = None;
            let mut i = 1;
            while i < argc {
                if is(i, "block") || is(i, "count") {
                    i += 1;
                } else if is(i, "group") {
                    i += 2;
                } else if is(i, "noack") {
                } else if is(i, "streams") {
                    streams = Some(i);
                    break;
                } else {
                    break;
                }
                i += 1;
            }
            let Some(s) = streams else { return };
            let num = argc - s - 1;
            if num == 0 || !num.is_multiple_of(2) {
                return;
            }
            for pos in s + 1..argc - num / 2 {
                out.push(pos, none);
            }
        }
        GetKeys::Set => {
            let get = (3..argc).any(|i| is(i, "get"));
            out.push(
                1,
                if get {
                    KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE
                } else {
                    KeyFlags::OW | KeyFlags::UPDATE
                },
            );
        }
        GetKeys::Bitfield => {
            let mut readonly = true;
            let mut i = 2;
            while i < argc {
                let rem = argc - i - 1;
                if is(i, "get") && rem >= 2 {
                    i += 2;
                } else if (is(i, "set") || is(i, "incrby")) && rem >= 3 {
                    readonly = false;
                    break;
                } else if is(i, "overflow") && rem >= 1 {
                    i += 1;
                } else {
                    readonly = false; // a syntax error: assume the worst, as Redis
                    break;
                }
                i += 1;
            }
            out.push(
                1,
                if readonly {
                    KeyFlags::RO | KeyFlags::ACCESS
                } else {
                    KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE
                },
            );
        }
    }
}

/// C `atoi` as glibc has it (`(int)strtol(s, NULL, 10)`): leading spaces, a sign, digits up to
/// the first non-digit, 0 when there are none. Redis's count-based finders read counts so.
fn atoi(b: &[u8]) -> i32 {
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let mut n: i64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        // strtol saturates at LONG_MAX / LONG_MIN.
        n = n.saturating_mul(10).saturating_add(i64::from(b[i] - b'0'));
        i += 1;
    }
    let n = if neg { n.saturating_neg() } else { n };
    n as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::lookup_argv;

    fn k(args: &[&str]) -> Vec<usize> {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let spec = lookup_argv(&argv).expect("a row");
        keys(spec, argv.as_slice()).positions().collect()
    }

    #[test]
    fn single_and_range_keys() {
        assert_eq!(k(&["GET", "a"]), [1]);
        assert_eq!(k(&["MSET", "a", "1", "b", "2"]), [1, 3]);
        assert_eq!(k(&["BLPOP", "a", "b", "0"]), [1, 2]);
        assert_eq!(k(&["PING"]), Vec::<usize>::new());
        assert_eq!(k(&["OBJECT", "ENCODING", "k"]), [2]);
        assert_eq!(k(&["MEMORY", "USAGE", "k", "SAMPLES", "5"]), [2]);
        assert_eq!(k(&["XINFO", "STREAM", "s", "FULL"]), [2]);
    }

    #[test]
    fn keynum_specs_and_their_fallbacks() {
        assert_eq!(k(&["ZUNIONSTORE", "d", "2", "a", "b"]), [1, 3, 4]);
        assert_eq!(k(&["LMPOP", "2", "a", "b", "LEFT"]), [2, 3]);
        assert_eq!(k(&["BLMPOP", "0", "2", "a", "b", "LEFT"]), [3, 4]);
        assert_eq!(k(&["EVAL", "s", "2", "a", "b", "x"]), [3, 4]);
        assert_eq!(k(&["EVAL", "s", "0"]), Vec::<usize>::new());
        // "2x" is no integer for the spec; Redis's finder reads it with atoi, destination last.
        assert_eq!(k(&["ZUNIONSTORE", "d", "2x", "a", "b"]), [3, 4, 1]);
        assert_eq!(k(&["SINTERCARD", "5", "a"]), Vec::<usize>::new());
    }

    #[test]
    fn keyword_specs_and_finders() {
        assert_eq!(
            k(&["XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0"]),
            [4, 5]
        );
        assert_eq!(
            k(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "0"]),
            [5]
        );
        assert_eq!(
            k(&["GEORADIUS", "k", "1", "2", "3", "km", "STORE", "d"]),
            [1, 7]
        );
        assert_eq!(k(&["SORT", "k", "BY", "x", "STORE", "d"]), [1, 5]);
        assert_eq!(k(&["SORT_RO", "k", "BY", "x"]), [1]);
        assert_eq!(
            k(&["MIGRATE", "h", "1", "", "0", "5", "KEYS", "a", "b"]),
            [7, 8]
        );
        assert_eq!(k(&["MIGRATE", "h", "1", "k", "0", "5"]), [3]);
        assert_eq!(k(&["SET", "k", "v", "GET"]), [1]);
    }

    #[test]
    fn key_flags_come_from_the_spec_or_the_finder() {
        let argv: [&[u8]; 4] = [b"SET", b"k", b"v", b"GET"];
        let got = keys(lookup_argv(&argv).unwrap(), &argv[..]);
        assert_eq!(
            got.as_slice()[0].flags,
            KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE
        );
        let argv: [&[u8]; 2] = [b"GET", b"k"];
        let got = keys(lookup_argv(&argv).unwrap(), &argv[..]);
        assert_eq!(got.as_slice()[0].flags, KeyFlags::RO | KeyFlags::ACCESS);
    }

    #[test]
    fn fixed_key_agrees_with_the_general_walk() {
        let mut fixed = 0;
        for spec in crate::command::all().flat_map(|c| std::iter::once(c).chain(c.subcommands)) {
            for argc in 1..6 {
                let args: Vec<&[u8]> = vec![b"get"; argc];
                if let Some((pos, flags)) = single_index(spec, argc) {
                    let mut general = Keys::default();
                    assert!(
                        from_specs(spec, args.as_slice(), &mut general),
                        "{}",
                        spec.name
                    );
                    assert_eq!(general.as_slice(), [KeyRef { pos, flags }], "{}", spec.name);
                }
                if let Some(pos) = fixed_key(spec, argc) {
                    let all: Vec<usize> = keys(spec, args.as_slice()).positions().collect();
                    assert_eq!(all, [pos], "{}", spec.name);
                    fixed += 1;
                }
            }
        }
        assert!(fixed > 300, "{fixed}");
    }

    #[test]
    fn keys_are_always_inside_the_request_whatever_its_length() {
        // Bad input never panics: any row, any argument count (arity unchecked), any words.
        let words: [&[u8]; 6] = [b"1", b"0", b"store", b"STREAMS", b"keys", b"get"];
        for spec in crate::command::all().flat_map(|c| std::iter::once(c).chain(c.subcommands)) {
            for argc in 0..9 {
                for w in words {
                    let mut args: Vec<&[u8]> = vec![w; argc];
                    if argc > 0 {
                        args[0] = spec.name.as_bytes();
                    }
                    for k in keys(spec, args.as_slice()).as_slice() {
                        assert!(k.pos >= 1 && k.pos < argc, "{} argc {argc}", spec.name);
                    }
                    if let Some(pos) = fixed_key(spec, argc) {
                        assert!(pos >= 1 && pos < argc, "{}", spec.name);
                    }
                }
            }
        }
    }

    #[test]
    fn many_keys_spill_to_the_heap_in_order() {
        let args: Vec<String> = std::iter::once("DEL".to_string())
            .chain((0..10).map(|i| format!("k{i}")))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(k(&args), (1..=10).collect::<Vec<_>>());
    }

    #[test]
    fn atoi_is_c_atoi() {
        assert_eq!(atoi(b"12"), 12);
        assert_eq!(atoi(b" -3x"), -3);
        assert_eq!(atoi(b"x"), 0);
        assert_eq!(atoi(b"+7"), 7);
        assert_eq!(atoi(b""), 0);
    }
}
