//! Command flags and key-spec flags as typed bitsets.
//!
//! The constants are declared in the order Redis 7.0 writes them in `COMMAND INFO`
//! (`addReplyFlagsForCommand` and `addReplyFlagsForKeyArgs`, src/server.c), and [`Flags::names`]
//! / [`KeyFlags::names`] walk them in that order, so a row's reply is Redis's byte for byte.
//! The generator (scripts/gen-command-table.py) refuses a flag name it does not find here.

bitflags::bitflags! {
    /// Command flags (redis `CMD_*`), as `COMMAND INFO` reports them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Flags: u32 {
        const WRITE = 1 << 0;
        const READONLY = 1 << 1;
        const DENYOOM = 1 << 2;
        const MODULE = 1 << 3;
        const ADMIN = 1 << 4;
        const PUBSUB = 1 << 5;
        const NOSCRIPT = 1 << 6;
        const BLOCKING = 1 << 7;
        const LOADING = 1 << 8;
        const STALE = 1 << 9;
        const SKIP_MONITOR = 1 << 10;
        const SKIP_SLOWLOG = 1 << 11;
        const ASKING = 1 << 12;
        const FAST = 1 << 13;
        const NO_AUTH = 1 << 14;
        const NO_MANDATORY_KEYS = 1 << 15;
        const NO_ASYNC_LOADING = 1 << 16;
        const NO_MULTI = 1 << 17;
        const MOVABLEKEYS = 1 << 18;
        const ALLOW_BUSY = 1 << 19;
    }

    /// Key-spec flags (redis `CMD_KEY_*`): how a command uses the keys a spec finds.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct KeyFlags: u16 {
        const RO = 1 << 0;
        const RW = 1 << 1;
        const OW = 1 << 2;
        const RM = 1 << 3;
        const ACCESS = 1 << 4;
        const UPDATE = 1 << 5;
        const INSERT = 1 << 6;
        const DELETE = 1 << 7;
        const NOT_KEY = 1 << 8;
        const INCOMPLETE = 1 << 9;
        const VARIABLE_FLAGS = 1 << 10;
    }
}

/// Reply names in Redis's order.
const FLAG_NAMES: [&str; 20] = [
    "write",
    "readonly",
    "denyoom",
    "module",
    "admin",
    "pubsub",
    "noscript",
    "blocking",
    "loading",
    "stale",
    "skip_monitor",
    "skip_slowlog",
    "asking",
    "fast",
    "no_auth",
    "no_mandatory_keys",
    "no_async_loading",
    "no_multi",
    "movablekeys",
    "allow_busy",
];

const KEY_FLAG_NAMES: [&str; 11] = [
    "RO",
    "RW",
    "OW",
    "RM",
    "access",
    "update",
    "insert",
    "delete",
    "not_key",
    "incomplete",
    "variable_flags",
];

impl Flags {
    /// The set flags' names, in Redis's reply order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        FLAG_NAMES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.bits() & (1 << i) != 0)
            .map(|(_, n)| *n)
    }
}

impl KeyFlags {
    /// The set flags' names, in Redis's reply order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        KEY_FLAG_NAMES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.bits() & (1 << i) != 0)
            .map(|(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_bits() {
        // Each constant's name (lowercased) is its reply name, so the two lists cannot drift.
        for (name, f) in Flags::all().iter_names() {
            assert_eq!(f.names().collect::<Vec<_>>(), [name.to_lowercase()]);
        }
        for (name, f) in KeyFlags::all().iter_names() {
            assert_eq!(
                f.names().map(str::to_lowercase).collect::<Vec<_>>(),
                [name.to_lowercase()]
            );
        }
        assert_eq!(
            (Flags::WRITE | Flags::FAST).names().collect::<Vec<_>>(),
            ["write", "fast"]
        );
    }
}
