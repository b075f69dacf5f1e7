//! The Redis Cluster protocol: CLUSTER *, READONLY, READWRITE, ASKING (redis `cluster.c`). (Stub: to be written.)

use crate::dispatch::Handler;

/// A connection's cluster flags (READONLY, ASKING).
#[derive(Clone, Debug, Default)]
pub struct ClientCluster {}

/// Handlers of this module's commands, by table name.
pub fn handler_for(name: &str) -> Option<Handler> {
    let _ = name;
    None
}
