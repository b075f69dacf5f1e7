//! The zset type (redis `t_zset.c`): the value's API first, then its commands. (Stub: to be written.)

use crate::dispatch::Handler;

/// A stored zset. Keeps its own byte count so [`mem_size`](Self::mem_size) is O(1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZSetValue {
    bytes: usize,
}

impl ZSetValue {
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
