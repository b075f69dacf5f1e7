//! Data types: one file per type, the value's API first and its commands after it
//! (redis `t_string.c` layout).
//!
//! - [`string`]: strings (integer-encoded or raw bytes); GET/SET/INCR… handlers.
//! - [`ldouble`]: 80-bit x87 long double arithmetic and Redis's formatting, for INCRBYFLOAT.

pub mod ldouble;
pub mod string;

pub use string::StrValue;

/// A stored value. Only strings exist so far; every command checks the type through
/// `string::as_str` and friends so new types slot in without touching the keyspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(StrValue),
}

impl Value {
    /// TYPE / SCAN TYPE name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
        }
    }

    /// Bytes this value accounts for in `used_memory` (payload only; the keyspace adds the
    /// per-entry overhead).
    pub fn mem_size(&self) -> usize {
        match self {
            Value::Str(s) => s.mem_size(),
        }
    }
}
