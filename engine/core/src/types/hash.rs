//! The hash type (redis `t_hash.c`): the value's API first, then its commands. (Stub: to be written.)

use crate::dispatch::Handler;

/// A stored hash. Keeps its own byte count so [`mem_size`](Self::mem_size) is O(1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HashValue {
    bytes: usize,
}

impl HashValue {
    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        self.bytes
    }
}

/// Handlers of this type's commands, by table name.
pub fn handler_for(name: &str) -> Option<Handler> {
    let _ = name;
    None
}
