//! Pub/sub and keyspace notifications, with redis 7.0 `pubsub.c` / `notify.c` semantics.
//!
//! # Commands
//! SUBSCRIBE PSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE PUBLISH, PUBSUB CHANNELS / NUMSUB / NUMPAT /
//! SHARDCHANNELS / SHARDNUMSUB / HELP. Shard channels (SSUBSCRIBE, SPUBLISH) are not offered,
//! so the SHARD* subcommands always report none.
//!
//! # Frames
//! Each (un)subscription is answered with one frame `[kind, channel, count]` where `count` is
//! the client's channels + patterns after the change; a message is `[message, channel,
//! payload]` or `[pmessage, pattern, channel, payload]`. They are arrays in RESP2 and pushes
//! (`>`) in RESP3, encoded in *each subscriber's* protocol: the registry keeps every
//! subscribed client's protocol, kept current by the dispatcher ([`sync_proto`]) when HELLO
//! changes it. Messages for other connections are queued as `Delivery { unblock: false }`;
//! the dispatcher moves the ones for the running connection in front of its reply, which is
//! where Redis 7.0 writes them (e.g. a RESP3 client subscribed to its own channel reads the
//! message, then PUBLISH's `:1`).
//!
//! # Subscribed mode (RESP2)
//! A RESP2 client with at least one subscription may only run (P)SUBSCRIBE, (P)UNSUBSCRIBE,
//! PING, QUIT and RESET ([`allowed_when_subscribed`], checked by the dispatcher); PING then
//! answers `[pong, message|""]`. RESP3 clients may run anything.
//!
//! # Keyspace notifications
//! `crate::notify` (redis `notify.c`): [`crate::notify::notify`] publishes `<event>` on `__keyspace@0__:<key>` (flag K) and `<key>` on
//! `__keyevent@0__:<event>` (flag E) when `notify-keyspace-events` enables the event's class.
//! Events the keyspace causes by itself (`expired`, `new`, `keymiss`) are logged there and
//! published by [`crate::notify::flush_events`] in order, before the command's own events. With the setting
//! empty, `notify` is one test and nothing is allocated.
//!
//! # Order
//! Channel subscribers are served in subscription order; patterns in the order they were first
//! subscribed (Redis walks a hash table, so its order among patterns is arbitrary).

use indexmap::{IndexMap, IndexSet};
use resp::{Proto, ReplyWriter};
use std::collections::HashMap;

use crate::call::Call;
use crate::error::{CmdError, c_str_lossy};
use crate::{Client, Delivery, Engine, glob};

/// A connection's subscription counts, for the subscribed-mode rules.
#[derive(Clone, Debug, Default)]
pub struct ClientSubs {
    channels: usize,
    patterns: usize,
    /// The protocol the registry has for this client.
    proto: Proto,
}

impl ClientSubs {
    /// Channels plus patterns (redis `clientSubscriptionsCount`).
    pub fn count(&self) -> usize {
        self.channels + self.patterns
    }

    /// Channels subscribed (CLIENT LIST `sub=`).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Patterns subscribed (CLIENT LIST `psub=`).
    pub fn patterns(&self) -> usize {
        self.patterns
    }
}

/// One subscribed client in the registry.
#[derive(Debug, Default)]
struct Subscriber {
    proto: Proto,
    channels: IndexSet<Box<[u8]>>,
    patterns: IndexSet<Box<[u8]>>,
}

/// The engine's channel and pattern registry, and the notification setting.
#[derive(Debug, Default)]
pub struct PubSub {
    /// Channel → subscribed client ids.
    channels: HashMap<Box<[u8]>, IndexSet<u64>>,
    /// Pattern → subscribed client ids.
    patterns: IndexMap<Box<[u8]>, IndexSet<u64>>,
    clients: HashMap<u64, Subscriber>,
    /// `notify-keyspace-events` as [`class`] bits.
    pub(crate) notify_flags: u32,
}

impl PubSub {
    /// Channels with at least one subscriber (INFO `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Distinct patterns subscribed (INFO `pubsub_patterns`, PUBSUB NUMPAT).
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// The `notify-keyspace-events` flags ([`class`] bits).
    pub fn notify_flags(&self) -> u32 {
        self.notify_flags
    }

    /// Whether any client subscribes to a channel or a pattern.
    pub fn has_subscribers(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

/// Encodes a message frame in `proto`: `[kind, (pattern,) channel, payload]`.
fn message_frame(proto: Proto, pattern: Option<&[u8]>, channel: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + channel.len() + payload.len());
    let mut w = ReplyWriter::new(&mut out, proto);
    match pattern {
        None => {
            w.push(3);
            w.bulk(b"message");
        }
        Some(p) => {
            w.push(4);
            w.bulk(b"pmessage");
            w.bulk(p);
        }
    }
    w.bulk(channel);
    w.bulk(payload);
    out
}

/// Sends `payload` to every subscriber of `channel` and of every matching pattern (redis
/// `pubsubPublishMessage`); returns the number of deliveries.
pub fn publish(e: &mut Engine, channel: &[u8], payload: &[u8]) -> i64 {
    let ps = &e.pubsub;
    let mut n = 0;
    let proto_of = |id: &u64| ps.clients.get(id).map(|s| s.proto).unwrap_or_default();
    if let Some(ids) = ps.channels.get(channel) {
        // One encoding per protocol, made when first needed.
        let mut frames: [Option<Vec<u8>>; 2] = [None, None];
        for id in ids {
            let proto = proto_of(id);
            let f = frames[(proto == Proto::Resp3) as usize]
                .get_or_insert_with(|| message_frame(proto, None, channel, payload));
            e.deliveries.push(Delivery {
                client_id: *id,
                bytes: f.clone(),
                unblock: false,
            });
            n += 1;
        }
    }
    for (pat, ids) in &ps.patterns {
        if !glob::matches(pat, channel, false) {
            continue;
        }
        let mut frames: [Option<Vec<u8>>; 2] = [None, None];
        for id in ids {
            let proto = proto_of(id);
            let f = frames[(proto == Proto::Resp3) as usize]
                .get_or_insert_with(|| message_frame(proto, Some(pat), channel, payload));
            e.deliveries.push(Delivery {
                client_id: *id,
                bytes: f.clone(),
                unblock: false,
            });
            n += 1;
        }
    }
    n
}

/// Which registry a (un)subscription is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Channel,
    Pattern,
}

impl Kind {
    fn sub_name(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
        }
    }

    fn unsub_name(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
        }
    }
}

/// Adds one subscription; returns false if the client already had it.
fn add(e: &mut Engine, client: &mut Client, kind: Kind, name: &[u8]) -> bool {
    let ps = &mut e.pubsub;
    let sub = ps.clients.entry(client.id).or_insert_with(|| Subscriber {
        proto: client.proto,
        ..Default::default()
    });
    let set = match kind {
        Kind::Channel => &mut sub.channels,
        Kind::Pattern => &mut sub.patterns,
    };
    if !set.insert(name.into()) {
        return false;
    }
    match kind {
        Kind::Channel => {
            ps.channels
                .entry(name.into())
                .or_default()
                .insert(client.id);
            client.subs.channels += 1;
        }
        Kind::Pattern => {
            ps.patterns
                .entry(name.into())
                .or_default()
                .insert(client.id);
            client.subs.patterns += 1;
        }
    }
    client.subs.proto = sub.proto;
    true
}

/// Removes client `id`'s subscription from the channel/pattern side of the registry.
fn remove_from_registry(ps: &mut PubSub, kind: Kind, name: &[u8], id: u64) {
    match kind {
        Kind::Channel => {
            if let Some(ids) = ps.channels.get_mut(name) {
                ids.swap_remove(&id);
                if ids.is_empty() {
                    ps.channels.remove(name);
                }
            }
        }
        Kind::Pattern => {
            if let Some(ids) = ps.patterns.get_mut(name) {
                ids.swap_remove(&id);
                if ids.is_empty() {
                    ps.patterns.shift_remove(name);
                }
            }
        }
    }
}

/// Removes one subscription; returns false if the client did not have it.
fn remove(e: &mut Engine, client: &mut Client, kind: Kind, name: &[u8]) -> bool {
    let ps = &mut e.pubsub;
    let Some(sub) = ps.clients.get_mut(&client.id) else {
        return false;
    };
    let set = match kind {
        Kind::Channel => &mut sub.channels,
        Kind::Pattern => &mut sub.patterns,
    };
    if !set.swap_remove(name) {
        return false;
    }
    if sub.channels.is_empty() && sub.patterns.is_empty() {
        ps.clients.remove(&client.id);
    }
    remove_from_registry(ps, kind, name, client.id);
    match kind {
        Kind::Channel => client.subs.channels -= 1,
        Kind::Pattern => client.subs.patterns -= 1,
    }
    true
}

/// The client's current channels or patterns.
fn names_of(e: &Engine, id: u64, kind: Kind) -> Vec<Box<[u8]>> {
    e.pubsub
        .clients
        .get(&id)
        .map(|s| match kind {
            Kind::Channel => s.channels.iter().cloned().collect(),
            Kind::Pattern => s.patterns.iter().cloned().collect(),
        })
        .unwrap_or_default()
}

/// Writes one `[kind, name|null, count]` frame.
fn write_sub_frame(c: &mut Call, kind: &[u8], name: Option<&[u8]>) {
    let count = c.client.subs.count() as i64;
    let mut w = c.w();
    w.push(3);
    w.bulk(kind);
    match name {
        Some(n) => w.bulk(n),
        None => w.null(),
    }
    w.integer(count);
}

/// The connection is gone: forget its subscriptions (nothing is sent).
pub fn client_closed(e: &mut Engine, client_id: u64) {
    let Some(sub) = e.pubsub.clients.remove(&client_id) else {
        return;
    };
    for ch in &sub.channels {
        remove_from_registry(&mut e.pubsub, Kind::Channel, ch, client_id);
    }
    for p in &sub.patterns {
        remove_from_registry(&mut e.pubsub, Kind::Pattern, p, client_id);
    }
}

/// RESET: drops every subscription without replying (redis `clearClientConnectionState`).
pub fn reset_client(e: &mut Engine, client: &mut Client) {
    client_closed(e, client.id);
    client.subs = ClientSubs::default();
}

/// Keeps the registry's protocol for a subscribed client current (HELLO may change it).
/// Cheap when nothing changed; the dispatcher calls it after each command.
pub fn sync_proto(e: &mut Engine, client: &mut Client) {
    if client.subs.count() == 0 || client.subs.proto == client.proto {
        return;
    }
    if let Some(s) = e.pubsub.clients.get_mut(&client.id) {
        s.proto = client.proto;
    }
    client.subs.proto = client.proto;
}

/// Commands a RESP2 client in subscribed mode may run (redis `processCommand`).
pub fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "ping"
            | "subscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "sunsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "quit"
            | "reset"
    )
}

/// Whether `client` is in RESP2 subscribed mode (PING answers `[pong, msg]`, most commands
/// are refused).
pub fn resp2_subscribed(client: &Client) -> bool {
    client.subs.count() > 0 && client.proto == Proto::Resp2
}

/// The error for a command refused in subscribed mode (`fullname`: `get`, `config|get`).
pub fn subscribed_context_error(fullname: &str) -> String {
    format!(
        "ERR Can't execute '{fullname}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

fn subscribe_generic(e: &mut Engine, c: &mut Call, kind: Kind) -> Result<(), CmdError> {
    let argv = c.argv;
    for name in &argv[1..] {
        add(e, c.client, kind, name);
        write_sub_frame(c, kind.sub_name(), Some(name));
    }
    Ok(())
}

fn unsubscribe_generic(e: &mut Engine, c: &mut Call, kind: Kind) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() == 1 {
        let names = names_of(e, c.client.id, kind);
        if names.is_empty() {
            write_sub_frame(c, kind.unsub_name(), None);
        }
        for name in &names {
            remove(e, c.client, kind, name);
            write_sub_frame(c, kind.unsub_name(), Some(name));
        }
    } else {
        for name in &argv[1..] {
            remove(e, c.client, kind, name);
            write_sub_frame(c, kind.unsub_name(), Some(name));
        }
    }
    Ok(())
}

/// `SUBSCRIBE channel [channel …]` → one `[subscribe, channel, count]` frame per channel.
pub fn subscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    subscribe_generic(e, c, Kind::Channel)
}

/// `PSUBSCRIBE pattern [pattern …]` → one `[psubscribe, pattern, count]` frame per pattern.
pub fn psubscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    subscribe_generic(e, c, Kind::Pattern)
}

/// `UNSUBSCRIBE [channel …]` → one `[unsubscribe, channel, count]` frame per channel (all
/// the client's channels when none is named; `[unsubscribe, null, count]` if it has none).
pub fn unsubscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    unsubscribe_generic(e, c, Kind::Channel)
}

/// `PUNSUBSCRIBE [pattern …]`, like UNSUBSCRIBE for patterns.
pub fn punsubscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    unsubscribe_generic(e, c, Kind::Pattern)
}

/// `PUBLISH channel message` → number of clients that received it.
pub fn publish_cmd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = publish(e, c.argv[1], c.argv[2]);
    c.w().integer(n);
    Ok(())
}

/// redis `addReplySubcommandSyntaxError`.
fn subcommand_syntax_error(c: &Call) -> CmdError {
    CmdError::Other(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
        c_str_lossy(c.argv[1], 128)
    ))
}

/// `PUBSUB CHANNELS [pattern]` → active channels (matching the pattern).
pub fn pubsub_channels(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(subcommand_syntax_error(c));
    }
    let pat = c.argv.get(2).copied();
    let names: Vec<&[u8]> = e
        .pubsub
        .channels
        .keys()
        .map(|k| &**k)
        .filter(|k| pat.is_none_or(|p| glob::matches(p, k, false)))
        .collect();
    let mut w = c.w();
    w.array(names.len());
    for n in names {
        w.bulk(n);
    }
    Ok(())
}

/// `PUBSUB SHARDCHANNELS [pattern]` → empty (no shard channels here).
pub fn pubsub_shardchannels(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(subcommand_syntax_error(c));
    }
    c.w().array(0);
    Ok(())
}

/// `PUBSUB NUMSUB [channel …]` → flat array `channel, count, …` (SHARDNUMSUB: counts are 0).
pub fn pubsub_numsub(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let shard = c.spec.name == "pubsub|shardnumsub";
    let argv = c.argv;
    let mut w = c.w();
    w.array((argv.len() - 2) * 2);
    for ch in &argv[2..] {
        w.bulk(ch);
        let n = if shard {
            0
        } else {
            e.pubsub.channels.get(*ch).map_or(0, |ids| ids.len())
        };
        w.integer(n as i64);
    }
    Ok(())
}

/// `PUBSUB NUMPAT` → number of distinct patterns subscribed.
pub fn pubsub_numpat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = e.pubsub.patterns.len() as i64;
    c.w().integer(n);
    Ok(())
}

/// `PUBSUB HELP`.
pub fn pubsub_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(LINES.len());
    for l in LINES {
        w.simple(l.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Engine};

    #[test]
    fn notify_flags_parse_and_format_like_redis() {
        for (input, canonical) in [
            ("KEA", "AKE"),
            ("Kx", "xK"),
            ("Ex$lshzgtdmKA", "AKEm"),
            ("g$lshzxetKEn", "g$lshzxetnKE"),
            ("AKEn", "AKE"),
            ("Km", "Km"),
            ("", ""),
        ] {
            let flags = crate::notify::parse_notify_flags(input.as_bytes()).unwrap();
            assert_eq!(
                crate::notify::format_notify_flags(flags),
                canonical,
                "{input}"
            );
        }
        assert_eq!(crate::notify::parse_notify_flags(b"Z"), None);
    }

    fn run(e: &mut Engine, c: &mut crate::Client, args: &[&str], out: &mut Vec<u8>) {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        e.exec(c, &argv, 1_000_000, out);
    }

    /// Disabled notifications log nothing; enabled ones reach a pattern subscriber in its
    /// protocol, expired-key events first.
    #[test]
    fn keyspace_events_are_delivered_in_order() {
        let mut e = Engine::new(Config::default());
        let mut sub = crate::Client {
            id: 1,
            ..Default::default()
        };
        let mut writer = crate::Client {
            id: 2,
            ..Default::default()
        };
        let mut out = Vec::new();
        run(
            &mut e,
            &mut sub,
            &["PSUBSCRIBE", "__keyevent@0__:*"],
            &mut out,
        );
        run(&mut e, &mut writer, &["SET", "k", "v"], &mut out);
        assert!(e.deliveries.is_empty() && e.ks.events.is_empty());
        run(
            &mut e,
            &mut writer,
            &["CONFIG", "SET", "notify-keyspace-events", "Exg$"],
            &mut out,
        );
        run(
            &mut e,
            &mut writer,
            &["SET", "t", "v", "PX", "10"],
            &mut out,
        );
        e.deliveries.clear();
        // 1 s later (the clock is an argument): the lazy expiry comes before the write's event.
        let argv: [&[u8]; 3] = [b"APPEND", b"t", b"x"];
        e.exec(&mut writer, &argv, 2_000_000, &mut out);
        let frames: Vec<Vec<u8>> = e.deliveries.iter().map(|d| d.bytes.clone()).collect();
        assert_eq!(
            frames,
            vec![
                message_frame(
                    Proto::Resp2,
                    Some(b"__keyevent@0__:*"),
                    b"__keyevent@0__:expired",
                    b"t"
                ),
                message_frame(
                    Proto::Resp2,
                    Some(b"__keyevent@0__:*"),
                    b"__keyevent@0__:append",
                    b"t"
                ),
            ]
        );
        assert!(e.deliveries.iter().all(|d| d.client_id == 1 && !d.unblock));
    }
}
