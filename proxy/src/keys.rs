//! Finding a request's key arguments from the command table's **key specs**, for commands
//! whose keys the legacy `first_key`/`last_key`/`step` triple cannot describe (flag
//! `movablekeys`: `ZUNIONSTORE dst numkeys k…`, `LMPOP numkeys k…`, `BLMPOP timeout numkeys
//! k…`, `SINTERCARD numkeys k…`, …). Pure: argument positions in, argument positions out.
//!
//! A key spec (Redis 7 `COMMAND INFO`, `src/commands/*.json`) has two steps:
//!
//! | step | type | fields | meaning |
//! |---|---|---|---|
//! | `begin_search` | `index` | `index` | the search starts at argument `index` |
//! | | `keyword` | `keyword`, `startfrom` | the search starts after the first argument equal (any case) to `keyword`, looked for from `startfrom` forwards (`startfrom` > 0) or from `argc + startfrom` backwards (< 0); no keyword → this spec has no keys |
//! | `find_keys` | `range` | `lastkey`, `keystep`, `limit` | keys from the start to `start + lastkey` (`lastkey` ≥ 0), or to `argc + lastkey` (< 0, `limit` 0), or to `start + (argc − start) / limit + lastkey` (`limit` > 0), every `keystep` |
//! | | `keynum` | `keynumidx`, `firstkey`, `keystep` | the argument at `start + keynumidx` is the number of keys `n`; keys from `start + firstkey`, `n` of them, every `keystep` |
//!
//! This follows Redis 7.0's `getKeysUsingKeySpecs` (`src/db.c`) with all-or-nothing
//! semantics (`GET_KEYSPEC_DEFAULT`): a spec whose numbers do not fit the request (a
//! `numkeys` that is not a non-negative integer, keys past the end, `numkeys` 0) makes the
//! whole extraction [`KeysError::Invalid`]. Such a request is a syntax error the instance
//! itself will report, so the proxy forwards it to any instance for its error reply.
//! Positions past the end inside a valid range are skipped, as Redis does for commands with
//! a variable arity.

use engine_core::command::{CommandSpec, Val};

/// Why no key list could be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysError {
    /// The request does not fit a spec (bad `numkeys`, keys past the end): a syntax error.
    Invalid,
    /// The spec itself has a shape this extractor does not know (`unknown` begin_search).
    Unsupported,
}

/// The argument positions (1-based, `args[0]` is the command name) of every key of a
/// request with `argc` arguments, in spec order. `arg(i)` reads argument `i`
/// (`numkeys` values and keywords are read through it).
pub fn key_positions<'a>(
    spec: &CommandSpec,
    argc: usize,
    arg: impl Fn(usize) -> &'a [u8],
) -> Result<Vec<usize>, KeysError> {
    let mut keys = Vec::new();
    for ks in spec.key_specs {
        let (bs, fk) = (field(ks, "begin_search"), field(ks, "find_keys"));
        let (Some(bs), Some(fk)) = (bs, fk) else {
            return Err(KeysError::Unsupported);
        };
        let argc_i = argc as i64;
        let first = match (str_field(bs, "type"), field(bs, "spec")) {
            (Some("index"), Some(s)) => int_field(s, "index").ok_or(KeysError::Unsupported)?,
            (Some("keyword"), Some(s)) => {
                let keyword = str_field(s, "keyword").ok_or(KeysError::Unsupported)?;
                let from = int_field(s, "startfrom").ok_or(KeysError::Unsupported)?;
                match find_keyword(keyword.as_bytes(), from, argc_i, &arg) {
                    Some(pos) => pos + 1,
                    None => continue, // keyword absent: this spec names no key here
                }
            }
            _ => return Err(KeysError::Unsupported),
        };
        let (first, last, step) = match (str_field(fk, "type"), field(fk, "spec")) {
            (Some("range"), Some(s)) => {
                let lastkey = int_field(s, "lastkey").ok_or(KeysError::Unsupported)?;
                let step = int_field(s, "keystep").ok_or(KeysError::Unsupported)?;
                let limit = int_field(s, "limit").unwrap_or(0);
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc_i + lastkey
                } else {
                    first + ((argc_i - first) / limit + lastkey)
                };
                (first, last, step)
            }
            (Some("keynum"), Some(s)) => {
                let idx = int_field(s, "keynumidx").ok_or(KeysError::Unsupported)?;
                let firstkey = int_field(s, "firstkey").ok_or(KeysError::Unsupported)?;
                let step = int_field(s, "keystep").ok_or(KeysError::Unsupported)?;
                let at = first + idx;
                if at < 0 || at >= argc_i {
                    return Err(KeysError::Invalid);
                }
                let numkeys = parse_count(arg(at as usize)).ok_or(KeysError::Invalid)?;
                let first = first + firstkey;
                (first, first + numkeys - 1, step)
            }
            _ => return Err(KeysError::Unsupported),
        };
        // Redis: "First or last is out of bounds, which indicates a syntax error".
        if last >= argc_i || last < first || first >= argc_i || first < 1 {
            return Err(KeysError::Invalid);
        }
        let step = step.max(1) as usize;
        keys.extend((first as usize..=last as usize).step_by(step));
    }
    Ok(keys)
}

/// Position of `keyword` (any case) searched from `from` forwards or `argc + from`
/// backwards, never at position 0 nor at the last argument when searching forwards
/// (a key must follow it), as Redis's loop bounds do.
fn find_keyword<'a>(
    keyword: &[u8],
    from: i64,
    argc: i64,
    arg: &impl Fn(usize) -> &'a [u8],
) -> Option<i64> {
    let (start, end) = if from > 0 {
        (from, argc - 1)
    } else {
        (argc + from, 0)
    };
    let mut i = start;
    while i != end {
        if i >= argc || i < 1 {
            break;
        }
        if arg(i as usize).eq_ignore_ascii_case(keyword) {
            return Some(i);
        }
        i += if start <= end { 1 } else { -1 };
    }
    None
}

/// A `numkeys` argument: a non-negative decimal that fits an `i64` (Redis `string2ll`).
fn parse_count(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse::<i64>().ok().filter(|n| *n >= 0)
}

fn field<'v>(v: &'v Val, name: &str) -> Option<&'v Val> {
    match v {
        Val::Map(entries) => entries.iter().find(|(k, _)| *k == name).map(|(_, v)| v),
        _ => None,
    }
}

fn int_field(v: &Val, name: &str) -> Option<i64> {
    match field(v, name)? {
        Val::Int(n) => Some(*n),
        _ => None,
    }
}

fn str_field<'v>(v: &'v Val, name: &str) -> Option<&'v str> {
    match field(v, name)? {
        Val::Str(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_core::command::lookup;

    fn keys(args: &[&str]) -> Result<Vec<usize>, KeysError> {
        let spec = lookup(args[0].as_bytes()).expect("command in the table");
        key_positions(spec, args.len(), |i| args[i].as_bytes())
    }

    #[test]
    fn keynum_commands() {
        assert_eq!(keys(&["SINTERCARD", "2", "a", "b"]), Ok(vec![2, 3]));
        assert_eq!(
            keys(&["SINTERCARD", "2", "a", "b", "LIMIT", "5"]),
            Ok(vec![2, 3])
        );
        assert_eq!(keys(&["LMPOP", "1", "a", "LEFT"]), Ok(vec![2]));
        assert_eq!(
            keys(&["BLMPOP", "0", "2", "a", "b", "LEFT"]),
            Ok(vec![3, 4])
        );
        assert_eq!(keys(&["BZMPOP", "1.5", "1", "z", "MIN"]), Ok(vec![3]));
        assert_eq!(
            keys(&["ZMPOP", "2", "a", "b", "MAX", "COUNT", "3"]),
            Ok(vec![2, 3])
        );
        assert_eq!(
            keys(&["ZINTER", "2", "a", "b", "WITHSCORES"]),
            Ok(vec![2, 3])
        );
        assert_eq!(keys(&["ZINTERCARD", "1", "a"]), Ok(vec![2]));
        assert_eq!(keys(&["ZDIFF", "3", "a", "b", "c"]), Ok(vec![2, 3, 4]));
    }

    #[test]
    fn destination_plus_keynum() {
        // Two specs: the destination (range) then the sources (keynum).
        assert_eq!(
            keys(&["ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2"]),
            Ok(vec![1, 3, 4])
        );
        assert_eq!(keys(&["ZINTERSTORE", "d", "1", "a"]), Ok(vec![1, 3]));
        assert_eq!(keys(&["ZDIFFSTORE", "d", "2", "a", "b"]), Ok(vec![1, 3, 4]));
    }

    #[test]
    fn bad_numkeys_is_invalid() {
        // Not a number, negative, zero, or more keys than arguments: the instance answers
        // the syntax error.
        assert_eq!(keys(&["SINTERCARD", "x", "a"]), Err(KeysError::Invalid));
        assert_eq!(keys(&["SINTERCARD", "-1", "a"]), Err(KeysError::Invalid));
        assert_eq!(keys(&["SINTERCARD", "0", "a"]), Err(KeysError::Invalid));
        assert_eq!(
            keys(&["SINTERCARD", "5", "a", "b"]),
            Err(KeysError::Invalid)
        );
        assert_eq!(keys(&["LMPOP", "01", "a", "LEFT"]), Err(KeysError::Invalid));
        assert_eq!(
            keys(&["ZUNIONSTORE", "d", "99999999999999999999", "a"]),
            Err(KeysError::Invalid)
        );
    }

    #[test]
    fn range_specs_match_the_legacy_triple() {
        // For commands without movable keys the specs and first/last/step agree.
        assert_eq!(keys(&["GET", "a"]), Ok(vec![1]));
        assert_eq!(keys(&["MSET", "a", "1", "b", "2"]), Ok(vec![1, 3]));
        assert_eq!(keys(&["BLPOP", "a", "b", "0"]), Ok(vec![1, 2]));
        assert_eq!(keys(&["LMOVE", "a", "b", "LEFT", "RIGHT"]), Ok(vec![1, 2]));
        assert_eq!(keys(&["SMOVE", "a", "b", "m"]), Ok(vec![1, 2]));
        assert_eq!(keys(&["WATCH", "a", "b", "c"]), Ok(vec![1, 2, 3]));
        assert_eq!(keys(&["PING"]), Ok(vec![]));
    }

    // Specs the current table does not contain (keyword search, range with a limit), built
    // as Redis 7 declares them for XREAD and GEORADIUS … STORE.
    static XREAD: CommandSpec = CommandSpec {
        name: "xread",
        arity: -4,
        flags: &["movablekeys"],
        first_key: 0,
        last_key: 0,
        step: 0,
        acl_categories: &[],
        tips: &[],
        key_specs: &[Val::Map(&[
            (
                "begin_search",
                Val::Map(&[
                    ("type", Val::Str("keyword")),
                    (
                        "spec",
                        Val::Map(&[("keyword", Val::Str("STREAMS")), ("startfrom", Val::Int(1))]),
                    ),
                ]),
            ),
            (
                "find_keys",
                Val::Map(&[
                    ("type", Val::Str("range")),
                    (
                        "spec",
                        Val::Map(&[
                            ("lastkey", Val::Int(-1)),
                            ("keystep", Val::Int(1)),
                            ("limit", Val::Int(2)),
                        ]),
                    ),
                ]),
            ),
        ])],
        subcommands: &[],
        docs: Val::Null,
    };

    static GEORADIUS_STORE: CommandSpec = CommandSpec {
        name: "georadius",
        arity: -6,
        flags: &["movablekeys"],
        first_key: 1,
        last_key: 1,
        step: 1,
        acl_categories: &[],
        tips: &[],
        key_specs: &[Val::Map(&[
            (
                "begin_search",
                Val::Map(&[
                    ("type", Val::Str("keyword")),
                    (
                        "spec",
                        Val::Map(&[("keyword", Val::Str("STORE")), ("startfrom", Val::Int(6))]),
                    ),
                ]),
            ),
            (
                "find_keys",
                Val::Map(&[
                    ("type", Val::Str("range")),
                    (
                        "spec",
                        Val::Map(&[
                            ("lastkey", Val::Int(0)),
                            ("keystep", Val::Int(1)),
                            ("limit", Val::Int(0)),
                        ]),
                    ),
                ]),
            ),
        ])],
        subcommands: &[],
        docs: Val::Null,
    };

    fn with(spec: &CommandSpec, args: &[&str]) -> Result<Vec<usize>, KeysError> {
        key_positions(spec, args.len(), |i| args[i].as_bytes())
    }

    #[test]
    fn keyword_search_and_limited_range() {
        // XREAD COUNT 2 STREAMS a b 0 0: keys are the first half after STREAMS.
        assert_eq!(
            with(
                &XREAD,
                &["XREAD", "COUNT", "2", "streams", "a", "b", "0", "0"]
            ),
            Ok(vec![4, 5])
        );
        // No STREAMS keyword: no keys from this spec.
        assert_eq!(with(&XREAD, &["XREAD", "COUNT", "2"]), Ok(vec![]));
        // The keyword as the last argument has no key after it and is not matched.
        assert_eq!(with(&XREAD, &["XREAD", "a", "STREAMS"]), Ok(vec![]));
        assert_eq!(
            with(
                &GEORADIUS_STORE,
                &["GEORADIUS", "k", "1", "2", "3", "km", "STORE", "dst"]
            ),
            Ok(vec![7])
        );
        assert_eq!(
            with(&GEORADIUS_STORE, &["GEORADIUS", "k", "1", "2", "3", "km"]),
            Ok(vec![])
        );
    }
}
