//! MULTI / EXEC / DISCARD / WATCH / UNWATCH (redis `multi.c`). (Stub: to be written.)

use crate::dispatch::Handler;

/// A connection's transaction state: MULTI queue, WATCHed keys.
#[derive(Clone, Debug, Default)]
pub struct ClientTx {}

/// The engine's WATCH registry (key → watching clients).
#[derive(Debug, Default)]
pub struct Watches {}

/// Handlers of this module's commands, by table name.
pub fn handler_for(name: &str) -> Option<Handler> {
    let _ = name;
    None
}
