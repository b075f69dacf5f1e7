//! Keyspace notifications (redis `notify.c`): the `notify-keyspace-events` classes, and
//! [`notify`], which every write calls once per changed key.
//!
//! A leaf for the command files: they import this module, and it reaches pub/sub only to
//! publish (`crate::cmd::pubsub::publish`). [`notify`] publishes `<event>` on
//! `__keyspace@<db>__:<key>` (flag K) and `<key>` on `__keyevent@<db>__:<event>` (flag E) when the
//! setting enables the event's class. Events the keyspace causes by itself (`expired`, `new`,
//! `keymiss`) are logged there and published by [`flush_events`] in order, before the command's
//! own events. With the setting empty, `notify` is one test and nothing is allocated.

use crate::Engine;
use crate::keyspace::KsEvent;

/// Keyspace notification classes (`notify-keyspace-events` flags; redis `server.h`
/// `NOTIFY_*`). Pass one to [`notify`].
pub mod class {
    pub const KEYSPACE: u32 = 1 << 0; // K
    pub const KEYEVENT: u32 = 1 << 1; // E
    pub const GENERIC: u32 = 1 << 2; // g
    pub const STRING: u32 = 1 << 3; // $
    pub const LIST: u32 = 1 << 4; // l
    pub const SET: u32 = 1 << 5; // s
    pub const HASH: u32 = 1 << 6; // h
    pub const ZSET: u32 = 1 << 7; // z
    pub const EXPIRED: u32 = 1 << 8; // x
    pub const EVICTED: u32 = 1 << 9; // e
    pub const STREAM: u32 = 1 << 10; // t
    pub const KEY_MISS: u32 = 1 << 11; // m
    pub const LOADED: u32 = 1 << 12; // (modules only)
    pub const MODULE: u32 = 1 << 13; // d
    pub const NEW: u32 = 1 << 14; // n
    /// `A`: every class but `m` and `n`.
    pub const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// Flag letters in the order redis `keyspaceEventsFlagsToString` prints them (after `A`).
const CLASS_LETTERS: &[(u32, char)] = &[
    (class::GENERIC, 'g'),
    (class::STRING, '$'),
    (class::LIST, 'l'),
    (class::SET, 's'),
    (class::HASH, 'h'),
    (class::ZSET, 'z'),
    (class::EXPIRED, 'x'),
    (class::EVICTED, 'e'),
    (class::STREAM, 't'),
    (class::NEW, 'n'),
];

/// redis `keyspaceEventsStringToFlags`; `None` for an unknown letter.
pub fn parse_notify_flags(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &b in s {
        flags |= match b {
            b'A' => class::ALL,
            b'g' => class::GENERIC,
            b'$' => class::STRING,
            b'l' => class::LIST,
            b's' => class::SET,
            b'h' => class::HASH,
            b'z' => class::ZSET,
            b'x' => class::EXPIRED,
            b'e' => class::EVICTED,
            b'K' => class::KEYSPACE,
            b'E' => class::KEYEVENT,
            b't' => class::STREAM,
            b'm' => class::KEY_MISS,
            b'd' => class::MODULE,
            b'n' => class::NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// redis `keyspaceEventsFlagsToString`: `A` for all classes (hiding `n`), then K, E, m.
pub fn format_notify_flags(flags: u32) -> String {
    let mut s = String::new();
    if flags & class::ALL == class::ALL {
        s.push('A');
    } else {
        for &(bit, ch) in CLASS_LETTERS {
            if flags & bit != 0 {
                s.push(ch);
            }
        }
    }
    for (bit, ch) in [
        (class::KEYSPACE, 'K'),
        (class::KEYEVENT, 'E'),
        (class::KEY_MISS, 'm'),
    ] {
        if flags & bit != 0 {
            s.push(ch);
        }
    }
    s
}

/// CONFIG SET notify-keyspace-events.
pub fn set_notify_flags(e: &mut Engine, value: &[u8]) -> Result<(), &'static str> {
    let flags =
        parse_notify_flags(value).ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?;
    restore_notify_flags(e, flags);
    Ok(())
}

/// Sets the `notify-keyspace-events` flags ([`class`] bits) and what the keyspace logs.
pub fn restore_notify_flags(e: &mut Engine, flags: u32) {
    e.pubsub.notify_flags = flags;
    // The keyspace logs only what can be published.
    let mut mask = 0;
    if flags & (class::KEYSPACE | class::KEYEVENT) != 0 {
        for (bit, ev) in [
            (class::EXPIRED, KsEvent::Expired),
            (class::NEW, KsEvent::New),
            (class::KEY_MISS, KsEvent::Miss),
        ] {
            if flags & bit != 0 {
                mask |= ev.bit();
            }
        }
    }
    e.ks.event_mask = mask;
    if mask == 0 {
        e.ks.events.clear();
    }
}

/// Records keyspace event `event` (Redis's event name: "lpush", "hset", "del", …) of class
/// `class` for `key`, publishing to `__keyspace@<db>__:<key>` / `__keyevent@<db>__:<event>` when
/// `notify-keyspace-events` enables it (redis `notifyKeyspaceEvent`). Call it once per real
/// modification, after the change, exactly where Redis does. It also reports the change to
/// WATCH (redis `signalModifiedKey`), so a write that calls it may fail other transactions.
pub fn notify(e: &mut Engine, class: u32, event: &str, key: &[u8]) {
    // The keychange feed learns which keys the command changed, and which were evicted
    // (one test when unused).
    crate::effect::note_changed(e, class, key);
    // Redis pairs every write's notification with `signalModifiedKey`: WATCH learns of in-place
    // changes here (a no-op when no key is watched).
    e.ks.signal_modified(key);
    if e.pubsub.notify_flags == 0 {
        return;
    }
    // Events the keyspace logged during this command (a lazily expired key, a new key)
    // happened first.
    flush_events(e);
    publish_event(e, e.current_db(), class, event, key);
}

/// [`notify`] for a change Redis does not report to WATCH (it calls `notifyKeyspaceEvent`
/// without `signalModifiedKey`): the stream group events (`xgroup-*`) and `xsetid`.
pub fn notify_unwatched(e: &mut Engine, class: u32, event: &str, key: &[u8]) {
    crate::effect::note_changed(e, class, key);
    if e.pubsub.notify_flags == 0 {
        return;
    }
    flush_events(e);
    publish_event(e, e.current_db(), class, event, key);
}

/// Publishes `event` of database `db` (Redis's `__keyspace@<db>__` / `__keyevent@<db>__`).
fn publish_event(e: &mut Engine, db: usize, class: u32, event: &str, key: &[u8]) {
    let flags = e.pubsub.notify_flags;
    if flags & class == 0 || !e.pubsub.has_subscribers() {
        return;
    }
    // A guest's events come from its owner's write-back (`crate::txlock`).
    if e.locks.is_guest(db, key) {
        return;
    }
    if flags & class::KEYSPACE != 0 {
        let mut chan = Vec::with_capacity(20 + key.len());
        chan.extend_from_slice(format!("__keyspace@{db}__:").as_bytes());
        chan.extend_from_slice(key);
        crate::cmd::pubsub::publish(e, &chan, event.as_bytes());
    }
    if flags & class::KEYEVENT != 0 {
        let mut chan = Vec::with_capacity(20 + event.len());
        chan.extend_from_slice(format!("__keyevent@{db}__:").as_bytes());
        chan.extend_from_slice(event.as_bytes());
        crate::cmd::pubsub::publish(e, &chan, key);
    }
}

/// Publishes the events the keyspace logged (`expired`, `new`, `keymiss`), oldest first.
/// Called by [`notify`], by the dispatcher after each command and after each cron tick.
pub fn flush_events(e: &mut Engine) {
    if e.ks.events.is_empty() {
        return;
    }
    let mut events = std::mem::take(&mut e.ks.events);
    for (ev, db, key) in events.drain(..) {
        let (class, name) = match ev {
            KsEvent::Expired => (class::EXPIRED, "expired"),
            KsEvent::New => (class::NEW, "new"),
            KsEvent::Miss => (class::KEY_MISS, "keymiss"),
        };
        publish_event(e, db, class, name, &key);
    }
    if e.ks.events.is_empty() {
        e.ks.events = events; // keep the buffer
    }
}
