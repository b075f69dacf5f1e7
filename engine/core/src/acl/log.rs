//! ACL LOG (redis `ACLLogMatchEntry` grouping, bounded), the INFO refusal counters, and the
//! failed-AUTH security events the server drains into its own log.

use std::collections::VecDeque;

use resp::ReplyWriter;

use super::Acl;
use crate::{Client, Engine};

/// ACL LOG keeps at most this many entries (redis `acllog-max-len` default).
const LOG_MAX_LEN: usize = 128;
/// Similar denials within this many ms are one ACL LOG entry with a count (redis
/// `ACL_LOG_GROUPING_MAX_TIME_DELTA`).
const LOG_GROUPING_MS: u64 = 60_000;
/// Security events waiting for the server's log; more are counted, not kept.
const SECURITY_EVENTS_MAX: usize = 64;

/// INFO stats counters (Redis 7.2 names `acl_access_denied_*`).
#[derive(Clone, Debug, Default)]
pub struct AclStats {
    pub denied_auth: u64,
    pub denied_cmd: u64,
    pub denied_key: u64,
    pub denied_channel: u64,
}

/// ACL LOG's entries (newest first) and the security events not yet drained; [`Acl`] holds one.
#[derive(Clone, Debug, Default)]
pub(super) struct AclLog {
    entries: VecDeque<LogEntry>,
    security_events: Vec<String>,
    security_events_dropped: u64,
}

#[derive(Clone, Debug)]
struct LogEntry {
    count: u64,
    reason: &'static str,
    context: &'static str,
    object: String,
    username: String,
    /// When the entry was created or last matched, Unix ms.
    time_ms: u64,
    client_info: String,
}

impl Acl {
    /// Queues one line for the server's log (bounded; the excess is only counted).
    pub(super) fn security_event(&mut self, line: String) {
        let log = &mut self.log;
        if log.security_events.len() < SECURITY_EVENTS_MAX {
            log.security_events.push(line);
        } else {
            log.security_events_dropped += 1;
        }
    }

    /// Moves pending security events (failed AUTH lines) into `into`; when some were dropped
    /// for the bound, a last line says how many.
    pub fn take_security_events(&mut self, into: &mut Vec<String>) {
        let log = &mut self.log;
        into.append(&mut log.security_events);
        if log.security_events_dropped > 0 {
            into.push(format!(
                "... and {} more failed AUTH attempts",
                log.security_events_dropped
            ));
            log.security_events_dropped = 0;
        }
    }

    /// Records a refusal or failed AUTH, grouped with a similar recent entry like Redis.
    pub(super) fn add_log(
        &mut self,
        reason: &'static str,
        who: &Who,
        object: String,
        username: String,
    ) {
        let context = if who.in_multi { "multi" } else { "toplevel" };
        let log = &mut self.log.entries;
        let found = log.iter().position(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && who.now_ms.saturating_sub(e.time_ms) <= LOG_GROUPING_MS
        });
        let entry = match found.and_then(|i| log.remove(i)) {
            Some(mut e) => {
                e.count += 1;
                e.time_ms = who.now_ms;
                e.client_info = who.client_info.clone();
                e
            }
            None => LogEntry {
                count: 1,
                reason,
                context,
                object,
                username,
                time_ms: who.now_ms,
                client_info: who.client_info.clone(),
            },
        };
        log.push_front(entry);
        log.truncate(LOG_MAX_LEN);
    }

    /// ACL LOG RESET.
    pub(super) fn clear_log(&mut self) {
        self.log.entries.clear();
    }

    /// ACL LOG [count]: the newest `count` entries as maps, ages taken at `now_ms`.
    pub(super) fn write_log(&self, count: usize, now_ms: u64, w: &mut ReplyWriter<'_>) {
        let entries: Vec<&LogEntry> = self.log.entries.iter().take(count).collect();
        w.array(entries.len());
        for en in entries {
            w.map(7);
            w.bulk(b"count");
            w.integer(en.count as i64);
            w.bulk(b"reason");
            w.bulk(en.reason.as_bytes());
            w.bulk(b"context");
            w.bulk(en.context.as_bytes());
            w.bulk(b"object");
            w.bulk(en.object.as_bytes());
            w.bulk(b"username");
            w.bulk(en.username.as_bytes());
            w.bulk(b"age-seconds");
            let mut age = Vec::new();
            crate::types::zset::score::fmt_reply(
                now_ms.saturating_sub(en.time_ms) as f64 / 1000.0,
                &mut age,
            );
            w.double_text(&age);
            w.bulk(b"client-info");
            w.bulk(en.client_info.as_bytes());
        }
    }
}

/// Who is asking, for ACL LOG entries and security events.
pub struct Who {
    pub addr: String,
    pub client_info: String,
    pub now_ms: u64,
    pub in_multi: bool,
    pub in_exec: bool,
}

impl Who {
    pub fn of(client: &Client, now_us: u64) -> Who {
        Who {
            addr: client.addr.clone(),
            client_info: crate::cmd::connection::client_info_line(client, now_us),
            now_ms: now_us / 1000,
            in_multi: client.tx.in_multi(),
            in_exec: client.tx.in_exec,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Engine side

impl Engine {
    /// Failed AUTH lines for the server's log (see [`Acl::take_security_events`]).
    pub fn take_security_events(&mut self, into: &mut Vec<String>) {
        self.acl.take_security_events(into);
    }

    /// Whether [`take_security_events`](Self::take_security_events) has anything.
    pub fn has_security_events(&self) -> bool {
        let log = &self.acl.log;
        !log.security_events.is_empty() || log.security_events_dropped > 0
    }
}
