//! The command table: what each command is, independent of how it runs.
//!
//! - `table.rs` is generated from a real redis-server 7.0 (`scripts/gen-command-table.py`):
//!   every Redis command and subcommand, implemented here or not, with arity, [`Flags`], the
//!   legacy first/last/step key positions, ACL categories, tips, typed [`KeySpec`]s, Redis's
//!   `getkeys_proc` ([`GetKeys`]), docs, and the **handler bound in the row**. So `COMMAND`,
//!   `COMMAND INFO` and `COMMAND DOCS` answer what clients expect, and every part finds keys
//!   from the same rows through one extractor, [`keys`] (ACL, cluster redirects, `COMMAND
//!   GETKEYS`, effects, the proxy's routing, the fan-out's scope).
//! - `handlers.rs` is the one hand-written list of implemented rows (`pub use` per row). A row
//!   without a handler is unimplemented: dispatch answers Redis's unknown command (or
//!   subcommand) error, and the `COMMAND` family leaves it out ([`implemented`]), as if the
//!   command did not exist. Rows stay in the table so the proxy can still route them by key
//!   and `COMMAND GETKEYS` answers for them as Redis does.
//! - `extra.rs` holds the few recached-only commands (FEED) in the same shape. Positions from
//!   [`lookup_index`] cover both: `0..COMMANDS.len()` are Redis's rows, the rest [`EXTRA`]'s.
//!
//! Arity follows Redis: `n > 0` exact argument count including the command name, `n < 0` at
//! least `-n` ([`CommandSpec::arity_ok`], redis `commandCheckArity`).

mod extra;
mod flags;
pub mod handlers;
pub mod keys;
mod table;

pub use extra::EXTRA;
pub use flags::{Flags, KeyFlags};
pub use keys::{KeyRef, Keys, fixed_key, keys, single_key_index};
pub use table::COMMANDS;

pub use crate::call::Handler;

/// Every row: Redis's table, then recached's own ([`EXTRA`]), implemented or not.
pub fn all() -> impl Iterator<Item = &'static CommandSpec> + Clone {
    COMMANDS.iter().chain(EXTRA.iter())
}

/// The top-level rows this engine runs (itself or through a subcommand): what `COMMAND`,
/// `COMMAND COUNT`, `COMMAND INFO` and `COMMAND DOCS` report.
pub fn implemented() -> impl Iterator<Item = &'static CommandSpec> + Clone {
    all().filter(|c| c.is_implemented())
}

/// Number of rows [`all`] yields; positions from [`lookup_index`] are below it.
pub fn count() -> usize {
    COMMANDS.len() + EXTRA.len()
}

/// The row at a position returned by [`lookup_index`] (`i < count()`).
pub fn spec_at(i: usize) -> &'static CommandSpec {
    match COMMANDS.get(i) {
        Some(c) => c,
        None => &EXTRA[i - COMMANDS.len()],
    }
}

/// A static reply-shaped value (docs). Maps are written as RESP3 maps or RESP2 flat arrays,
/// like Redis.
#[derive(Debug)]
pub enum Val {
    Str(&'static str),
    Int(i64),
    Null,
    Arr(&'static [Val]),
    Map(&'static [(&'static str, Val)]),
}

/// Where a key spec's search starts (redis `kspec_bs_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeginSearch {
    /// At argument `index` (1-based; `argv[0]` is the command name).
    Index(i32),
    /// After the first argument equal (any case) to `keyword`, searched from `startfrom`
    /// forwards (`> 0`) or from `argc + startfrom` backwards (`< 0`).
    Keyword {
        keyword: &'static str,
        startfrom: i32,
    },
    /// Keys cannot be found from the spec (the command's [`GetKeys`] finds them).
    Unknown,
}

/// How many keys follow the start (redis `kspec_fk_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FindKeys {
    /// From the start to `start + lastkey` (`lastkey >= 0`), to `argc + lastkey` (`< 0`,
    /// `limit` 0), or to `start + (argc - start) / limit + lastkey` (`limit > 0`), every
    /// `keystep` arguments.
    Range {
        lastkey: i32,
        keystep: i32,
        limit: i32,
    },
    /// The argument at `start + keynumidx` is the key count `n`; keys start at
    /// `start + firstkey`, every `keystep`.
    Keynum {
        keynumidx: i32,
        firstkey: i32,
        keystep: i32,
    },
    Unknown,
}

/// One key spec (Redis 7 `COMMAND INFO` field 9, `src/commands/*.json` "key_specs").
#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub notes: Option<&'static str>,
    pub flags: KeyFlags,
    pub begin_search: BeginSearch,
    pub find_keys: FindKeys,
}

/// Redis's per-command key finder (`getkeys_proc`, src/db.c), for commands whose key specs
/// are incomplete, carry variable flags, or do not fit a request (then Redis falls back to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetKeys {
    /// `genericGetKeys(store, numkeys, first, step)`: `argv[numkeys]` keys from `first`,
    /// then the destination at `store` (0: none).
    Generic {
        store: u8,
        numkeys: u8,
        first: u8,
        step: u8,
    },
    /// `sortGetKeys`: the sorted key, and the last `STORE` destination.
    Sort,
    /// `sortROGetKeys`: the sorted key.
    SortRo,
    /// `migrateGetKeys`: `argv[3]`, or the keys after `KEYS`.
    Migrate,
    /// `georadiusGetKeys`: the key, and the last `STORE`/`STOREDIST` destination.
    Georadius,
    /// `xreadGetKeys`: the first half of the arguments after `STREAMS`.
    Xread,
    /// `setGetKeys`: the key, read-write when `GET` is given.
    Set,
    /// `bitfieldGetKeys`: the key, read-only when only `GET`s are given.
    Bitfield,
}

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase name; subcommands are `container|sub` (e.g. `config|get`).
    pub name: &'static str,
    pub arity: i32,
    pub flags: Flags,
    /// Legacy key positions (1-based argv index; `last_key` -1 = last argument).
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub acl_categories: &'static [&'static str],
    pub tips: &'static [&'static str],
    pub key_specs: &'static [KeySpec],
    pub getkeys: Option<GetKeys>,
    /// `None`: not implemented here (see the module docs).
    pub handler: Option<Handler>,
    pub subcommands: &'static [CommandSpec],
    pub docs: Val,
}

impl CommandSpec {
    pub fn has_flag(&self, flag: Flags) -> bool {
        self.flags.contains(flag)
    }

    /// Name without the container prefix (`get` for `config|get`).
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('|').next().unwrap_or(self.name)
    }

    /// Looks up a subcommand by name, any case.
    pub fn subcommand(&self, sub: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands
            .iter()
            .find(|c| c.short_name().as_bytes().eq_ignore_ascii_case(sub))
    }

    /// Runs here, itself or through one of its subcommands.
    pub fn is_implemented(&self) -> bool {
        self.handler.is_some() || self.subcommands.iter().any(|s| s.handler.is_some())
    }

    /// redis `commandCheckArity`: `argc` counts the command name (and the subcommand).
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity > 0 {
            arity == argc
        } else {
            argc >= -arity
        }
    }

    /// redis `doesCommandHaveKeys`: a key finder, or a key spec that names real keys.
    pub fn has_keys(&self) -> bool {
        self.getkeys.is_some()
            || self
                .key_specs
                .iter()
                .any(|k| !k.flags.contains(KeyFlags::NOT_KEY))
    }
}

/// Looks up a command by name, any case, without allocating: the name is lowercased into a
/// stack buffer and looked up in a map of the table's names, built once. Finds every row,
/// implemented or not ([`CommandSpec::is_implemented`]).
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    lookup_index(name).map(spec_at)
}

/// The row `argv` names, resolving a container to its subcommand as redis
/// `lookupCommandLogic` does: `None` for an unknown command, or an unknown subcommand of a
/// container. Implemented or not.
pub fn lookup_argv(argv: &[&[u8]]) -> Option<&'static CommandSpec> {
    let top = lookup(argv.first()?)?;
    if argv.len() == 1 || top.subcommands.is_empty() {
        return Some(top);
    }
    top.subcommand(argv[1])
}

/// A row by full name, any case: `get`, or `config|get` for a subcommand.
pub fn lookup_fullname(name: &[u8]) -> Option<&'static CommandSpec> {
    match name.iter().position(|&b| b == b'|') {
        None => lookup(name),
        Some(p) => lookup(&name[..p])?.subcommand(&name[p + 1..]),
    }
}

/// Longest command name in the table is well below this; longer names are unknown at once.
const MAX_NAME: usize = 32;

/// Lowercase name → position in [`COMMANDS`] followed by [`EXTRA`]. Every command looks its
/// name up here: a binary search over ~240 names cost ~400 instructions, 15 % of an
/// unpipelined GET's user-space work (callgrind); hashing the name costs ~100. The keys are
/// the fixed table, so a fixed-seed hash cannot be flooded: a client's name only probes it.
fn by_name() -> &'static std::collections::HashMap<&'static [u8], usize, foldhash::fast::FixedState>
{
    static MAP: std::sync::OnceLock<
        std::collections::HashMap<&'static [u8], usize, foldhash::fast::FixedState>,
    > = std::sync::OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = std::collections::HashMap::with_capacity_and_hasher(
            count(),
            foldhash::fast::FixedState::with_seed(0x5245_4341_4348_4544),
        );
        for (i, c) in all().enumerate() {
            debug_assert!(c.name.len() <= MAX_NAME);
            map.insert(c.name.as_bytes(), i);
        }
        map
    })
}

/// Position of the command `name` (any case) in [`COMMANDS`] followed by [`EXTRA`].
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    by_name().get(&*lower).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_index_finds_every_row_in_any_case_and_nothing_else() {
        for (i, c) in all().enumerate() {
            let upper = c.name.to_ascii_uppercase();
            for name in [c.name.as_bytes(), upper.as_bytes()] {
                assert_eq!(lookup_index(name), Some(i), "{}", c.name);
                assert_eq!(spec_at(i).name, c.name);
            }
        }
        for name in [
            &b""[..],
            b"nosuch",
            b"ge",
            b"gett",
            b"config|get",
            &[b'a'; 100],
            b"G\xc9T",
        ] {
            assert_eq!(lookup_index(name), None);
        }
    }

    #[test]
    fn lookup_any_case() {
        let get = lookup(b"GeT").unwrap();
        assert_eq!(
            (get.arity, get.first_key, get.last_key, get.step),
            (2, 1, 1, 1)
        );
        assert!(lookup(b"config").unwrap().subcommand(b"GET").is_some());
        assert!(lookup(b"nosuch").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
        assert_eq!(
            lookup_fullname(b"CONFIG|Get").map(|c| c.name),
            Some("config|get")
        );
        assert_eq!(
            lookup_argv(&[b"object", b"ENCODING", b"k"]).map(|c| c.name),
            Some("object|encoding")
        );
        assert!(lookup_argv(&[b"object", b"nosuch"]).is_none());
    }

    #[test]
    fn table_is_sorted_and_names_are_unique() {
        assert!(COMMANDS.windows(2).all(|w| w[0].name < w[1].name));
        assert!(EXTRA.windows(2).all(|w| w[0].name < w[1].name));
        for c in EXTRA {
            assert!(
                COMMANDS.iter().all(|r| r.name != c.name),
                "{} twice",
                c.name
            );
        }
        assert_eq!(all().count(), count());
        for c in all() {
            assert!(std::ptr::eq(
                lookup(c.name.to_uppercase().as_bytes()).unwrap(),
                c
            ));
        }
    }

    /// The table holds all of Redis 7.0 (240 commands, 366 with subcommands, as
    /// `COMMAND COUNT` / `COMMAND LIST` on redis-server 7.0.15 say), plus FEED.
    #[test]
    fn table_holds_every_redis_command_and_subcommand() {
        assert_eq!(COMMANDS.len(), 240);
        let rows: usize = COMMANDS.iter().map(|c| 1 + c.subcommands.len()).sum();
        assert_eq!(rows, 366);
    }

    /// Every row has a handler or is unimplemented (`handler: None`); a container row has
    /// none of its own. Implemented rows are the ones the COMMAND family reports, and each
    /// has a subcommand or handler that dispatch reaches.
    #[test]
    fn every_row_has_a_handler_or_is_marked_unimplemented() {
        let mut implemented_rows = 0;
        for c in all() {
            if !c.subcommands.is_empty() {
                // Redis runs a container through its subcommands only (except COMMAND, which
                // also answers alone).
                assert!(c.handler.is_none() || c.name == "command", "{}", c.name);
            }
            for s in c.subcommands {
                assert!(s.subcommands.is_empty(), "{}: one level only", s.name);
                assert!(s.name.starts_with(&format!("{}|", c.name)), "{}", s.name);
                implemented_rows += usize::from(s.handler.is_some());
            }
            implemented_rows += usize::from(c.handler.is_some());
        }
        // handlers.rs exports one handler per implemented row, all of them bound.
        let exported = include_str!("handlers.rs")
            .lines()
            .filter(|l| l.starts_with("pub use "))
            .count();
        assert_eq!(implemented_rows, exported);
        assert!(implemented().count() < count());
        assert!(lookup(b"get").unwrap().is_implemented());
        assert!(lookup(b"xadd").unwrap().is_implemented());
        assert!(lookup(b"geoadd").unwrap().is_implemented());
        assert!(!lookup(b"psync").unwrap().is_implemented());
    }
}
