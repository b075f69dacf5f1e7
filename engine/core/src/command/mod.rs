//! The command table: what each command is, independent of how it runs.
//!
//! `table.rs` is generated from a real redis-server 7 (`scripts/gen-command-table.py`): arity,
//! flags, first/last/step key positions, ACL categories, tips, key specs and docs are Redis's
//! own, so `COMMAND`, `COMMAND INFO` and `COMMAND DOCS` answer what clients expect and the
//! proxy finds keys from the same rows. Arity follows Redis: `n > 0` exact argument count
//! including the command name, `n < 0` at least `-n`.
//!
//! `extra.rs` holds the few recached-only commands (FEED) in the same shape. Positions from
//! [`lookup_index`] cover both: `0..COMMANDS.len()` are Redis's rows, the rest [`EXTRA`]'s
//! ([`spec_at`]); [`all`] and [`count`] are the union that COMMAND and friends report.

mod extra;
mod table;

pub use extra::EXTRA;
pub use table::COMMANDS;

/// Every row: Redis's table, then recached's own ([`EXTRA`]).
pub fn all() -> impl Iterator<Item = &'static CommandSpec> + Clone {
    COMMANDS.iter().chain(EXTRA.iter())
}

/// Number of top-level commands (COMMAND COUNT).
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

/// A static reply-shaped value (key specs, docs). Maps are written as RESP3 maps or RESP2
/// flat arrays, like Redis.
#[derive(Debug)]
pub enum Val {
    Str(&'static str),
    Int(i64),
    Null,
    Arr(&'static [Val]),
    Map(&'static [(&'static str, Val)]),
}

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase name; subcommands are `container|sub` (e.g. `config|get`).
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    /// Legacy key positions (1-based argv index; `last_key` -1 = last argument).
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub acl_categories: &'static [&'static str],
    pub tips: &'static [&'static str],
    pub key_specs: &'static [Val],
    pub subcommands: &'static [CommandSpec],
    pub docs: Val,
}

impl CommandSpec {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
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
}

/// Looks up a command by name, any case, without allocating: the name is lowercased into a
/// stack buffer and looked up in a map of the table's names, built once.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    lookup_index(name).map(spec_at)
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
    }

    #[test]
    fn table_is_sorted_for_binary_search() {
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
}
