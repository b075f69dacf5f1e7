//! Pub/sub and keyspace notifications, with redis 7.0 `pubsub.c` / `notify.c` semantics.
//!
//! # Commands
//! SUBSCRIBE PSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE PUBLISH, the sharded SSUBSCRIBE SUNSUBSCRIBE
//! SPUBLISH (Redis 7.0), PUBSUB CHANNELS / NUMSUB / NUMPAT / SHARDCHANNELS / SHARDNUMSUB /
//! HELP, and recached's internal PUBLISHLOCAL (below).
//!
//! # Shard channels
//! A separate registry, as in Redis 7.0 (`pubSubShardType`): shard channels match no pattern,
//! a message is `[smessage, channel, payload]`, and the count in an `ssubscribe` /
//! `sunsubscribe` frame is the client's shard channels only (a `subscribe` frame's count
//! leaves them out). Subscribed mode counts all three kinds. In cluster mode the channel is
//! the key for slot purposes (`cluster::redirect`: `-MOVED` to the owner, `-CROSSSLOT` for
//! channels of several slots, even local ones, as redis-server 7.0.15 answers).
//!
//! # Cluster-wide PUBLISH
//! Redis Cluster broadcasts PUBLISH over its bus, so a subscriber on any node receives it;
//! the reply counts only this node's receivers. Here a PUBLISH from a client in a cluster of
//! several engines also queues, per call, one [`Delivery`] for [`BUS_CLIENT_ID`] carrying
//! `PUBLISHLOCAL channel message` as a RESP request; the server (engine/server `bus.rs`)
//! sends it to every other engine, where PUBLISHLOCAL delivers locally and is never
//! forwarded again. Riding the delivery queue costs the hot path nothing: the server already
//! checks that queue after each command.
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
    /// Shard channels (SSUBSCRIBE).
    shard: usize,
    /// The protocol the registry has for this client.
    proto: Proto,
}

impl ClientSubs {
    /// Channels, patterns and shard channels (redis `clientTotalPubSubSubscriptionCount`):
    /// non-zero means subscribed (flag `P`, subscribed mode, the pub/sub output class).
    pub fn count(&self) -> usize {
        self.channels + self.patterns + self.shard
    }

    /// Shard channels subscribed (CLIENT LIST `ssub=`).
    pub fn shard_channels(&self) -> usize {
        self.shard
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
    shard: IndexSet<Box<[u8]>>,
}

impl Subscriber {
    fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty() && self.shard.is_empty()
    }
}

/// The engine's channel and pattern registry, and the notification setting.
#[derive(Debug, Default)]
pub struct PubSub {
    /// Channel → subscribed client ids.
    channels: HashMap<Box<[u8]>, IndexSet<u64>>,
    /// Pattern → subscribed client ids.
    patterns: IndexMap<Box<[u8]>, IndexSet<u64>>,
    /// Shard channel → subscribed client ids.
    shard: HashMap<Box<[u8]>, IndexSet<u64>>,
    clients: HashMap<u64, Subscriber>,
    /// `notify-keyspace-events` as [`class`] bits.
    pub(crate) notify_flags: u32,
}

impl PubSub {
    /// Whether `client_id` subscribes to any channel, pattern or shard channel (redis
    /// `CLIENT_PUBSUB`).
    pub fn is_subscribed(&self, client_id: u64) -> bool {
        self.clients.contains_key(&client_id)
    }

    /// Channels with at least one subscriber (INFO `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Distinct patterns subscribed (INFO `pubsub_patterns`, PUBSUB NUMPAT).
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// Shard channels with at least one subscriber (INFO `pubsubshard_channels`).
    pub fn shard_channel_count(&self) -> usize {
        self.shard.len()
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

/// The delivery id of the cluster bus: deliveries for it are requests for the other engines
/// (module docs). CLIENT IDs count up from 1 and never reach it.
pub const BUS_CLIENT_ID: u64 = u64::MAX;

/// Encodes `[smessage, channel, payload]` in `proto`.
fn smessage_frame(proto: Proto, channel: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + channel.len() + payload.len());
    let mut w = ReplyWriter::new(&mut out, proto);
    w.push(3);
    w.bulk(b"smessage");
    w.bulk(channel);
    w.bulk(payload);
    out
}

/// Sends `payload` to every subscriber of shard channel `channel` (redis
/// `pubsubPublishMessage` with `pubSubShardType`); returns the number of deliveries.
pub fn spublish(e: &mut Engine, channel: &[u8], payload: &[u8]) -> i64 {
    let ps = &e.pubsub;
    let Some(ids) = ps.shard.get(channel) else {
        return 0;
    };
    let mut frames: [Option<Vec<u8>>; 2] = [None, None];
    for id in ids {
        let proto = ps.clients.get(id).map(|s| s.proto).unwrap_or_default();
        let f = frames[(proto == Proto::Resp3) as usize]
            .get_or_insert_with(|| smessage_frame(proto, channel, payload));
        e.deliveries.push(Delivery {
            client_id: *id,
            bytes: f.clone(),
            unblock: false,
        });
    }
    ids.len() as i64
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
    Shard,
}

impl Kind {
    fn sub_name(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
            Kind::Shard => b"ssubscribe",
        }
    }

    fn unsub_name(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// The set of `kind` in a client's registry entry.
fn set_of(sub: &mut Subscriber, kind: Kind) -> &mut IndexSet<Box<[u8]>> {
    match kind {
        Kind::Channel => &mut sub.channels,
        Kind::Pattern => &mut sub.patterns,
        Kind::Shard => &mut sub.shard,
    }
}

/// Adds one subscription; returns false if the client already had it.
fn add(e: &mut Engine, client: &mut Client, kind: Kind, name: &[u8]) -> bool {
    let ps = &mut e.pubsub;
    let sub = ps.clients.entry(client.id).or_insert_with(|| Subscriber {
        proto: client.proto,
        ..Default::default()
    });
    if !set_of(sub, kind).insert(name.into()) {
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
        Kind::Shard => {
            ps.shard.entry(name.into()).or_default().insert(client.id);
            client.subs.shard += 1;
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
        Kind::Shard => {
            if let Some(ids) = ps.shard.get_mut(name) {
                ids.swap_remove(&id);
                if ids.is_empty() {
                    ps.shard.remove(name);
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
    if !set_of(sub, kind).swap_remove(name) {
        return false;
    }
    if sub.is_empty() {
        ps.clients.remove(&client.id);
    }
    remove_from_registry(ps, kind, name, client.id);
    match kind {
        Kind::Channel => client.subs.channels -= 1,
        Kind::Pattern => client.subs.patterns -= 1,
        Kind::Shard => client.subs.shard -= 1,
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
            Kind::Shard => s.shard.iter().cloned().collect(),
        })
        .unwrap_or_default()
}

/// Writes one `[kind, name|null, count]` frame. The count is the client's shard channels for
/// the shard kind, its channels + patterns otherwise (redis `subscriptionCount` per type).
fn write_sub_frame(c: &mut Call, kind: Kind, sub: bool, name: Option<&[u8]>) {
    let s = &c.client.subs;
    let count = match kind {
        Kind::Shard => s.shard,
        _ => s.channels + s.patterns,
    } as i64;
    let mut w = c.w();
    w.push(3);
    w.bulk(if sub {
        kind.sub_name()
    } else {
        kind.unsub_name()
    });
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
    for ch in &sub.shard {
        remove_from_registry(&mut e.pubsub, Kind::Shard, ch, client_id);
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
        write_sub_frame(c, kind, true, Some(name));
    }
    Ok(())
}

fn unsubscribe_generic(e: &mut Engine, c: &mut Call, kind: Kind) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() == 1 {
        let names = names_of(e, c.client.id, kind);
        if names.is_empty() {
            write_sub_frame(c, kind, false, None);
        }
        for name in &names {
            remove(e, c.client, kind, name);
            write_sub_frame(c, kind, false, Some(name));
        }
    } else {
        for name in &argv[1..] {
            remove(e, c.client, kind, name);
            write_sub_frame(c, kind, false, Some(name));
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

/// `SSUBSCRIBE shardchannel [shardchannel …]` → one `[ssubscribe, channel, count]` frame per
/// channel, `count` being the client's shard channels.
pub fn ssubscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    // redis `ssubscribeCommand`: refused for a client that expects one reply per command (a
    // transaction's EXEC).
    if c.client.tx.in_exec {
        return Err(CmdError::Other(
            "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client".into(),
        ));
    }
    subscribe_generic(e, c, Kind::Shard)
}

/// `SUNSUBSCRIBE [shardchannel …]`, like UNSUBSCRIBE for shard channels.
pub fn sunsubscribe(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    unsubscribe_generic(e, c, Kind::Shard)
}

/// `SPUBLISH shardchannel message` → number of this engine's clients that received it (the
/// owner's: cluster::redirect sent the request there).
pub fn spublish_cmd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = spublish(e, c.argv[1], c.argv[2]);
    c.w().integer(n);
    Ok(())
}

/// `PUBLISH channel message` → number of this engine's clients that received it; in a
/// cluster of several engines the message also goes to every other engine (module docs).
pub fn publish_cmd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = publish(e, c.argv[1], c.argv[2]);
    if e.cluster.has_peers() {
        let mut bytes = Vec::with_capacity(48 + c.argv[1].len() + c.argv[2].len());
        resp::encode_request(&mut bytes, &[b"PUBLISHLOCAL", c.argv[1], c.argv[2]]);
        e.deliveries.push(Delivery {
            client_id: BUS_CLIENT_ID,
            bytes,
            unblock: false,
        });
    }
    c.w().integer(n);
    Ok(())
}

/// `PUBLISHLOCAL channel message` (recached-only, sent by the cluster bus): PUBLISH to this
/// engine's subscribers only, never forwarded; answers the local count like PUBLISH.
pub fn publishlocal(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
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

/// `PUBSUB CHANNELS [pattern]` → active channels (matching the pattern); SHARDCHANNELS: shard
/// channels.
pub fn pubsub_channels(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(subcommand_syntax_error(c));
    }
    let map = if c.spec.name == "pubsub|shardchannels" {
        &e.pubsub.shard
    } else {
        &e.pubsub.channels
    };
    let pat = c.argv.get(2).copied();
    let names: Vec<&[u8]> = map
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

/// `PUBSUB NUMSUB [channel …]` → flat array `channel, count, …` (SHARDNUMSUB: shard channels).
pub fn pubsub_numsub(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let shard = c.spec.name == "pubsub|shardnumsub";
    let argv = c.argv;
    let mut w = c.w();
    w.array((argv.len() - 2) * 2);
    for ch in &argv[2..] {
        w.bulk(ch);
        let map = if shard {
            &e.pubsub.shard
        } else {
            &e.pubsub.channels
        };
        let n = map.get(*ch).map_or(0, |ids| ids.len());
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

    fn reply(e: &mut Engine, c: &mut crate::Client, args: &[&str]) -> String {
        let mut out = Vec::new();
        run(e, c, args, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn client(id: u64, proto: Proto) -> crate::Client {
        crate::Client {
            id,
            proto,
            ..Default::default()
        }
    }

    /// Redis 7.0.15's shapes: `ssubscribe`/`sunsubscribe` frames count shard channels only,
    /// `subscribe` frames leave them out, subscribed mode counts all; messages are
    /// `smessage` arrays (RESP2) or pushes (RESP3); patterns never match shard channels.
    #[test]
    fn sharded_subscribe_and_publish_shapes() {
        let mut e = Engine::new(Config::default());
        let mut s2 = client(1, Proto::Resp2);
        let mut s3 = client(2, Proto::Resp3);
        let mut p = client(3, Proto::Resp2);
        assert_eq!(
            reply(&mut e, &mut s2, &["SSUBSCRIBE", "b", "{b}y"]),
            "*3\r\n$10\r\nssubscribe\r\n$1\r\nb\r\n:1\r\n\
             *3\r\n$10\r\nssubscribe\r\n$4\r\n{b}y\r\n:2\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut s2, &["SUBSCRIBE", "x"]),
            "*3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut s2, &["PING"]),
            "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
        );
        assert!(reply(&mut e, &mut s2, &["GET", "b"]).starts_with("-ERR Can't execute 'get'"));
        assert_eq!(
            reply(&mut e, &mut s3, &["SSUBSCRIBE", "b"]),
            ">3\r\n$10\r\nssubscribe\r\n$1\r\nb\r\n:1\r\n"
        );
        run(&mut e, &mut p, &["PSUBSCRIBE", "*"], &mut Vec::new());
        let mut p2 = client(4, Proto::Resp2);
        e.deliveries.clear();
        assert_eq!(reply(&mut e, &mut p2, &["SPUBLISH", "b", "hi"]), ":2\r\n");
        let got: Vec<(u64, String)> = e
            .deliveries
            .drain(..)
            .map(|d| (d.client_id, String::from_utf8(d.bytes).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "*3\r\n$8\r\nsmessage\r\n$1\r\nb\r\n$2\r\nhi\r\n".into()),
                (2, ">3\r\n$8\r\nsmessage\r\n$1\r\nb\r\n$2\r\nhi\r\n".into()),
            ]
        );
        // PUBLISH does not reach shard subscribers (only the pattern one here).
        assert_eq!(reply(&mut e, &mut p2, &["PUBLISH", "b", "hi"]), ":1\r\n");
        e.deliveries.clear();
        // Hash order, as in Redis.
        let all = reply(&mut e, &mut p2, &["PUBSUB", "SHARDCHANNELS"]);
        assert!(
            all == "*2\r\n$1\r\nb\r\n$4\r\n{b}y\r\n" || all == "*2\r\n$4\r\n{b}y\r\n$1\r\nb\r\n",
            "{all}"
        );
        assert_eq!(
            reply(&mut e, &mut p2, &["PUBSUB", "SHARDCHANNELS", "{b*"]),
            "*1\r\n$4\r\n{b}y\r\n"
        );
        assert_eq!(
            reply(
                &mut e,
                &mut p2,
                &["PUBSUB", "SHARDNUMSUB", "b", "{b}y", "zz"]
            ),
            "*6\r\n$1\r\nb\r\n:2\r\n$4\r\n{b}y\r\n:1\r\n$2\r\nzz\r\n:0\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut p2, &["PUBSUB", "NUMSUB", "b"]),
            "*2\r\n$1\r\nb\r\n:0\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut s2, &["SUNSUBSCRIBE"]),
            "*3\r\n$12\r\nsunsubscribe\r\n$1\r\nb\r\n:1\r\n\
             *3\r\n$12\r\nsunsubscribe\r\n$4\r\n{b}y\r\n:0\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut s2, &["SUNSUBSCRIBE"]),
            "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"
        );
        // Still subscribed to `x`: subscribed mode holds until every kind is gone.
        assert!(reply(&mut e, &mut s2, &["GET", "b"]).starts_with("-ERR"));
        reply(&mut e, &mut s2, &["UNSUBSCRIBE"]);
        assert_eq!(reply(&mut e, &mut s2, &["PING"]), "+PONG\r\n");
        assert_eq!(
            reply(&mut e, &mut s3, &["SUNSUBSCRIBE", "b"]),
            ">3\r\n$12\r\nsunsubscribe\r\n$1\r\nb\r\n:0\r\n"
        );
        assert_eq!(
            reply(&mut e, &mut s3, &["SUNSUBSCRIBE"]),
            ">3\r\n$12\r\nsunsubscribe\r\n_\r\n:0\r\n"
        );
        assert_eq!(e.pubsub.shard_channel_count(), 0);
        // SSUBSCRIBE in a transaction is refused at EXEC, like redis 7.0.
        reply(&mut e, &mut p2, &["MULTI"]);
        reply(&mut e, &mut p2, &["SSUBSCRIBE", "b"]);
        assert_eq!(
            reply(&mut e, &mut p2, &["EXEC"]),
            "*1\r\n-ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client\r\n"
        );
        // A closed connection leaves nothing behind.
        reply(&mut e, &mut s3, &["SSUBSCRIBE", "c"]);
        client_closed(&mut e, 2);
        assert_eq!(reply(&mut e, &mut p2, &["SPUBLISH", "c", "m"]), ":0\r\n");
    }

    /// In a cluster of several engines, a client's PUBLISH also queues one PUBLISHLOCAL for
    /// the bus; PUBLISHLOCAL and standalone PUBLISH queue none (no loops, no cost).
    #[test]
    fn cluster_publish_is_forwarded_once() {
        let mut e = Engine::new(Config {
            cluster_nodes: vec!["127.0.0.1:7000".into(), "127.0.0.1:7001".into()],
            cluster_index: 0,
            ..Config::default()
        });
        let mut s = client(1, Proto::Resp2);
        let mut p = client(2, Proto::Resp2);
        reply(&mut e, &mut s, &["SUBSCRIBE", "ch"]);
        assert_eq!(reply(&mut e, &mut p, &["PUBLISH", "ch", "m"]), ":1\r\n");
        let got: Vec<(u64, Vec<u8>)> = e
            .deliveries
            .drain(..)
            .map(|d| (d.client_id, d.bytes))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    1,
                    b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n".to_vec()
                ),
                (
                    BUS_CLIENT_ID,
                    b"*3\r\n$12\r\nPUBLISHLOCAL\r\n$2\r\nch\r\n$1\r\nm\r\n".to_vec()
                ),
            ]
        );
        assert_eq!(
            reply(&mut e, &mut p, &["PUBLISHLOCAL", "ch", "m"]),
            ":1\r\n"
        );
        assert!(e.deliveries.drain(..).all(|d| d.client_id == 1));
        let mut st = Engine::new(Config::default());
        assert_eq!(reply(&mut st, &mut p, &["PUBLISH", "ch", "m"]), ":0\r\n");
        assert!(!st.has_deliveries());
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
