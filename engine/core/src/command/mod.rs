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
/// stack buffer and binary-searched in [`COMMANDS`] (the generator sorts it by name).
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    lookup_index(name).map(spec_at)
}

/// Position of the command `name` (any case) in [`COMMANDS`] followed by [`EXTRA`].
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    const MAX_NAME: usize = 32;
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let by_name = |c: &CommandSpec| c.name.as_bytes().cmp(lower);
    COMMANDS.binary_search_by(by_name).ok().or_else(|| {
        EXTRA
            .binary_search_by(by_name)
            .ok()
            .map(|i| COMMANDS.len() + i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
