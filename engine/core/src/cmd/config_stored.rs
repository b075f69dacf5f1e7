//! Redis 7.0 parameters that recached **stores without acting on** (`repl-backlog-size`,
//! `maxmemory-clients`, `lazyfree-lazy-user-del`, `activedefrag`, `latency-tracking` …): CONFIG
//! GET answers their value, CONFIG SET checks a new value exactly as redis-server does (type,
//! bounds, enum names, memory units, percentages; `config.c` `numericParseString`,
//! `numericBoundaryCheck`, `boolConfigSet`, `enumConfigSet`) and keeps it, so clients and
//! test suites that set them carry on. The parameters recached does act on are the rows of
//! `server::PARAMS`, which take precedence over this table.
//!
//! [`TABLE`](super::config_table::TABLE) is generated from Redis 7.0's `src/config.c` and a
//! running redis-server's defaults (`scripts/gen-config-table.py`).
//!
//! Values differing from the default live in `Config::stored` (cloned with the rest of the
//! configuration, so a failed multi-parameter CONFIG SET rolls them back too). Two of them are
//! read where they matter: `rdb-key-save-delay` (µs of sleep per key written by a save, a
//! negative value -N meaning 1 µs for one key in N, as redis `debugDelay`), which the engine
//! server applies to SAVE and BGSAVE ([`integer`]), and `rdbcompression` (`no` writes
//! snapshots uncompressed, format version 2; see `snapshot`).

use super::config_table::TABLE;
use crate::args;

/// How a parameter's value is checked and printed.
#[derive(Debug)]
pub enum Kind {
    /// `yes` / `no` (any case).
    Bool,
    /// Any string.
    Str,
    /// One of `values` (any case); with `flags`, a space-separated set of them (Redis's
    /// `MULTI_ARG_CONFIG` enums such as `shutdown-on-sigterm`).
    Enum {
        values: &'static [&'static str],
        flags: bool,
    },
    /// An integer in `lo..=hi`, optionally with memory units, as a percentage (`10%`, stored
    /// negative as Redis does) or in octal.
    Int {
        lo: i128,
        hi: i128,
        unsigned: bool,
        memory: bool,
        percent: bool,
        octal: bool,
    },
    /// A parameter with a parser of its own in Redis (`bind`, `replicaof`,
    /// `oom-score-adj-values`, `latency-tracking-info-percentiles`): kept as given.
    Special,
}

/// One stored parameter (see the module doc).
#[derive(Debug)]
pub struct Stored {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub kind: Kind,
    /// As redis-server 7.0's CONFIG GET prints it.
    pub default: &'static str,
    /// Redis's `IMMUTABLE_CONFIG`: CONFIG SET answers `can't set immutable config`.
    pub immutable: bool,
    /// Redis's `HIDDEN_CONFIG`: CONFIG GET answers it only when asked by its exact name.
    pub hidden: bool,
}

/// The stored parameter called `name` (or whose alias it is), any case.
pub fn find(name: &[u8]) -> Option<&'static Stored> {
    TABLE
        .iter()
        .find(|s| args::is(name, s.name) || s.alias.is_some_and(|a| args::is(name, a)))
}

/// The current value of the integer parameter `name` (0 when unknown or not an integer).
pub fn integer(config: &crate::Config, name: &str) -> i64 {
    find(name.as_bytes())
        .and_then(|s| crate::args::parse_i64(s.get(&config.stored).as_bytes()))
        .unwrap_or(0)
}

/// Every name (and alias) of the table, in table order.
pub fn names() -> impl Iterator<Item = (&'static str, &'static Stored)> {
    TABLE
        .iter()
        .flat_map(|s| std::iter::once((s.name, s)).chain(s.alias.map(|a| (a, s))))
}

impl Stored {
    /// The current value: the one set, else the default.
    pub fn get<'a>(
        &'static self,
        stored: &'a std::collections::BTreeMap<&'static str, String>,
    ) -> &'a str {
        stored.get(self.name).map_or(self.default, String::as_str)
    }

    /// Checks `v` as redis-server would and returns the value to keep, printed as its CONFIG
    /// GET would print it; the error is Redis's text after `- `.
    pub fn parse(&self, v: &[u8]) -> Result<String, String> {
        match &self.kind {
            Kind::Bool => match () {
                _ if args::is(v, "yes") => Ok("yes".into()),
                _ if args::is(v, "no") => Ok("no".into()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Str | Kind::Special => Ok(String::from_utf8_lossy(v).into_owned()),
            Kind::Enum { values, flags } => parse_enum(values, *flags, v),
            Kind::Int {
                lo,
                hi,
                unsigned,
                memory,
                percent,
                octal,
            } => {
                let n = parse_number(v, *memory, *percent, *octal)?;
                if *unsigned {
                    // Redis compares as unsigned long long: a negative number wraps above
                    // any bound.
                    let u = if n < 0 { n + (1i128 << 64) } else { n };
                    if u < *lo || u > *hi {
                        return Err(if *octal {
                            format!("argument must be between {lo:o} and {hi:o} inclusive")
                        } else {
                            format!("argument must be between {lo} and {hi} inclusive")
                        });
                    }
                } else if *percent && n < 0 {
                    if n < *lo {
                        return Err(format!(
                            "percentage argument must be less or equal to {}",
                            -lo
                        ));
                    }
                } else if n < *lo || n > *hi {
                    return Err(format!("argument must be between {lo} and {hi} inclusive"));
                }
                Ok(match () {
                    _ if *percent && n < 0 => format!("{}%", -n),
                    _ if *octal => format!("{n:o}"),
                    _ => n.to_string(),
                })
            }
        }
    }
}

/// redis `numericParseString`: memory units first, then `N%`, then octal, then a plain
/// integer only for parameters without those flags.
fn parse_number(v: &[u8], memory: bool, percent: bool, octal: bool) -> Result<i128, String> {
    if memory && let Some(n) = super::server::parse_memory(v) {
        // Stored in a signed long long, as Redis's `long long` result.
        return Ok(i128::from(n as i64));
    }
    if percent
        && v.len() > 1
        && v.last() == Some(&b'%')
        && let Some(n) = args::parse_i64(&v[..v.len() - 1])
        && n >= 0
    {
        return Ok(-i128::from(n));
    }
    if octal
        && let Ok(s) = std::str::from_utf8(v)
        && let Ok(n) = i64::from_str_radix(s, 8)
    {
        return Ok(i128::from(n));
    }
    if !memory
        && !percent
        && !octal
        && let Some(n) = args::parse_i64(v)
    {
        return Ok(i128::from(n));
    }
    Err(match (memory, percent, octal) {
        (true, true, _) => "argument must be a memory or percent value",
        (true, false, _) => "argument must be a memory value",
        (false, _, true) => "argument couldn't be parsed as an octal number",
        _ => "argument couldn't be parsed into an integer",
    }
    .into())
}

/// redis `enumConfigSet` / `configEnumGetValue`: one name, or (with `flags`) several
/// space-separated names printed back in table order.
fn parse_enum(values: &[&str], flags: bool, v: &[u8]) -> Result<String, String> {
    let bad = || {
        format!(
            "argument(s) must be one of the following: {}",
            values.join(", ")
        )
    };
    let find = |w: &[u8]| values.iter().position(|n| args::is(w, n));
    if !flags {
        return find(v).map(|i| values[i].to_string()).ok_or_else(bad);
    }
    let mut seen = vec![false; values.len()];
    for w in v.split(|b| *b == b' ').filter(|w| !w.is_empty()) {
        seen[find(w).ok_or_else(bad)?] = true;
    }
    let picked: Vec<&str> = values
        .iter()
        .zip(&seen)
        .filter(|(_, s)| **s)
        .map(|(n, _)| *n)
        .collect();
    if picked.is_empty() {
        return Err(bad());
    }
    Ok(picked.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_values_as_redis() {
        let mmc = find(b"maxmemory-clients").unwrap();
        assert_eq!(mmc.parse(b"10%"), Ok("10%".into()));
        assert_eq!(mmc.parse(b"1mb"), Ok("1048576".into()));
        assert_eq!(
            mmc.parse(b"200%"),
            Err("percentage argument must be less or equal to 100".into())
        );
        assert_eq!(
            mmc.parse(b"x"),
            Err("argument must be a memory or percent value".into())
        );
        let rbs = find(b"repl-backlog-size").unwrap();
        assert_eq!(
            rbs.parse(b"0"),
            Err("argument must be between 1 and 9223372036854775807 inclusive".into())
        );
        let lazy = find(b"lazyfree-lazy-user-del").unwrap();
        assert_eq!(lazy.parse(b"YES"), Ok("yes".into()));
        assert_eq!(
            lazy.parse(b"1"),
            Err("argument must be 'yes' or 'no'".into())
        );
        let sig = find(b"shutdown-on-sigterm").unwrap();
        assert_eq!(sig.parse(b"now save"), Ok("save now".into()));
        let perm = find(b"unixsocketperm").unwrap();
        assert_eq!(perm.parse(b"777"), Ok("777".into()));
        assert_eq!(
            perm.parse(b"1777"),
            Err("argument must be between 0 and 777 inclusive".into())
        );
        assert!(find(b"slaveof").is_some_and(|s| s.name == "replicaof" && s.immutable));
        assert!(find(b"key-load-delay").is_some_and(|s| s.hidden));
    }
}
