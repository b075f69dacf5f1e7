//! Pub/sub and keyspace notifications (redis `pubsub.c`, `notify.c`). (Stub: to be written.)

use crate::Engine;
use crate::dispatch::Handler;

/// A connection's subscriptions (channels, patterns), for the subscribed-mode rules.
#[derive(Clone, Debug, Default)]
pub struct ClientSubs {}

/// The engine's channel and pattern registry.
#[derive(Debug, Default)]
pub struct PubSub {}

/// Keyspace notification classes (`notify-keyspace-events` flags; redis `server.h`
/// `NOTIFY_*`). Pass one to [`notify`].
pub mod class {
    pub const GENERIC: u32 = 1 << 2; // g
    pub const STRING: u32 = 1 << 3; // $
    pub const LIST: u32 = 1 << 4; // l
    pub const SET: u32 = 1 << 5; // s
    pub const HASH: u32 = 1 << 6; // h
    pub const ZSET: u32 = 1 << 7; // z
    pub const EXPIRED: u32 = 1 << 8; // x
    pub const EVICTED: u32 = 1 << 9; // e
    pub const NEW: u32 = 1 << 14; // n
}

/// Records keyspace event `event` (Redis's event name: "lpush", "hset", "del", …) of class
/// `class` for `key`, publishing to `__keyspace@0__:<key>` / `__keyevent@0__:<event>` when
/// `notify-keyspace-events` enables it (redis `notifyKeyspaceEvent`). Call it once per real
/// modification, after the change, exactly where Redis does.
pub fn notify(e: &mut Engine, class: u32, event: &str, key: &[u8]) {
    let _ = (e, class, event, key);
}

/// Handlers of this module's commands, by table name.
pub fn handler_for(name: &str) -> Option<Handler> {
    let _ = name;
    None
}
