//! The Redis Cluster protocol: CLUSTER *, READONLY, READWRITE, ASKING (redis `cluster.c`). (Stub: to be written.)

use crate::dispatch::Handler;

/// Handlers of this module's commands, by table name.
pub fn handler_for(name: &str) -> Option<Handler> {
    let _ = name;
    None
}
