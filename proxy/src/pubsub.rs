//! Pub/sub through the proxy: a client's subscriptions, and what a (un)subscribe request
//! sends to which instance. Pure; the event loop owns the connections.
//!
//! Channels are routed by name like keys (`instance_of(channel)`, hash tags included), so
//! `PUBLISH ch` (forwarded on the shared connection) reaches the one instance where every
//! proxy client subscribed to `ch` is listening. Patterns may match channels of any
//! instance, so `PSUBSCRIBE` is sent to every instance and each `PUBLISH` is delivered once
//! (it runs on one instance only). A client that subscribes gets a dedicated connection per
//! instance it needs (`crate::dedicated`), in subscribed mode. When the instances are
//! cluster engines, each PUBLISH is also forwarded to every other engine (docs/cluster.md,
//! "Pub/sub"): a channel subscriber still hears it once (only the channel's instance holds
//! its subscription), and a pattern's `pmessage` is relayed only from the channel's instance
//! (`dedicated::relay_pmessage`; keyspace notifications, which stay on their engine, from
//! every instance).
//!
//! # Replies
//!
//! The proxy keeps the client's channel and pattern sets itself and writes the
//! confirmations (`*3 subscribe <channel> :<count>`, …) as one Redis server would: one per
//! argument, in argument order, where **count is the number of channels plus patterns the
//! client is subscribed to through the proxy** (a pattern counts once, although every
//! instance holds it). The confirmations are sent only once every instance involved
//! confirmed, so a message published after the client saw its confirmation is delivered.
//! Only channels and patterns that change state are sent to instances (`SUBSCRIBE a a` sends
//! `a` once, `UNSUBSCRIBE x` for a channel not subscribed sends nothing).
//!
//! Messages are relayed unchanged (RESP2 `message` / `pmessage` arrays, RESP3 pushes on a
//! RESP3 client's connections, where confirmations are pushes too) as they arrive.
//! Those of one channel keep their order; messages of channels on different instances come
//! over different connections and may interleave differently from their PUBLISH order, as
//! with a Redis Cluster client subscribed on several nodes.
//!
//! While subscribed (count > 0) a RESP2 client may only send (P)SUBSCRIBE, (P)UNSUBSCRIBE,
//! PING, QUIT and RESET; anything else gets Redis 7's RESP2 error text. A RESP3 client may
//! send anything, as with Redis. PING answers
//! `*2 pong <arg or "">` as Redis does in that mode.
//!
//! # Shard channels
//! SSUBSCRIBE / SUNSUBSCRIBE go to the channel's instance, like SUBSCRIBE, one request per
//! slot (an instance answers `-CROSSSLOT` to shard channels of several slots, and so does the
//! proxy to a client's request naming several: `crate::exec`). Their confirmations count the
//! client's shard channels only, as Redis 7.0 does; subscribed mode counts every kind.
//! `smessage` frames are relayed like messages.

use std::collections::BTreeSet;

/// The channel on which Redis sends a RESP2 redirect target the invalidations of client-side
/// caching. A client subscribed to it through the proxy is subscribed on every instance
/// (each sends the invalidations of its own keys), and a tracking client's REDIRECT to it
/// names those connections (`crate::exec`, "Client-side caching").
pub const INVALIDATE: &[u8] = b"__redis__:invalidate";

use crate::slots::SlotMap;
use crate::split::{push_array_header, push_bulk};
use resp::{Proto, ReplyWriter};

/// A client's subscriptions through the proxy.
#[derive(Debug, Default)]
pub struct Subscriptions {
    // Ordered sets: `UNSUBSCRIBE` without arguments then answers in a stable order.
    channels: BTreeSet<Vec<u8>>,
    patterns: BTreeSet<Vec<u8>>,
    /// Shard channels (SSUBSCRIBE), each on its channel's instance.
    shard: BTreeSet<Vec<u8>>,
}

/// The six subscription commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Subscribe,
    Psubscribe,
    Unsubscribe,
    Punsubscribe,
    Ssubscribe,
    Sunsubscribe,
}

impl Kind {
    pub fn from_name(name: &[u8]) -> Option<Kind> {
        [
            (&b"subscribe"[..], Kind::Subscribe),
            (b"psubscribe", Kind::Psubscribe),
            (b"unsubscribe", Kind::Unsubscribe),
            (b"punsubscribe", Kind::Punsubscribe),
            (b"ssubscribe", Kind::Ssubscribe),
            (b"sunsubscribe", Kind::Sunsubscribe),
        ]
        .into_iter()
        .find(|(n, _)| name.eq_ignore_ascii_case(n))
        .map(|(_, k)| k)
    }

    fn word(self) -> &'static [u8] {
        match self {
            Kind::Subscribe => b"subscribe",
            Kind::Psubscribe => b"psubscribe",
            Kind::Unsubscribe => b"unsubscribe",
            Kind::Punsubscribe => b"punsubscribe",
            Kind::Ssubscribe => b"ssubscribe",
            Kind::Sunsubscribe => b"sunsubscribe",
        }
    }

    /// SSUBSCRIBE / SUNSUBSCRIBE: shard channels, counted apart in confirmations.
    pub fn is_shard(self) -> bool {
        matches!(self, Kind::Ssubscribe | Kind::Sunsubscribe)
    }

    fn is_pattern(self) -> bool {
        matches!(self, Kind::Psubscribe | Kind::Punsubscribe)
    }

    fn adds(self) -> bool {
        matches!(self, Kind::Subscribe | Kind::Psubscribe | Kind::Ssubscribe)
    }
}

/// One request for one instance's dedicated connection.
#[derive(Debug, PartialEq, Eq)]
pub struct Send {
    pub instance: usize,
    pub request: Vec<u8>,
    /// Confirmation frames it produces (one per channel or pattern sent).
    pub frames: u32,
    /// The channels or patterns it names.
    pub names: Vec<Vec<u8>>,
}

/// What a (un)subscribe request does: the confirmations for the client (sent once every
/// [`Send`] is confirmed) and the requests for instances.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    pub reply: Vec<u8>,
    pub sends: Vec<Send>,
}

impl Subscriptions {
    /// Channels plus patterns: the count in confirmations.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Channels subscribed to (CLIENT LIST `sub`).
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// Patterns subscribed to (CLIENT LIST `psub`).
    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }

    /// Whether the client is subscribed to channel `name`.
    pub fn has_channel(&self, name: &[u8]) -> bool {
        self.channels.contains(name)
    }

    /// The patterns subscribed to, in order.
    pub fn pattern_names(&self) -> impl Iterator<Item = &[u8]> {
        self.patterns.iter().map(Vec::as_slice)
    }

    /// Shard channels subscribed to (CLIENT LIST `ssub`).
    pub fn shard_channels(&self) -> usize {
        self.shard.len()
    }

    /// The count in a confirmation of `kind`: shard channels for SSUBSCRIBE/SUNSUBSCRIBE,
    /// channels + patterns otherwise (Redis 7.0 counts the two apart).
    fn count_for(&self, kind: Kind) -> usize {
        if kind.is_shard() {
            self.shard.len()
        } else {
            self.count()
        }
    }

    /// Whether the client is in subscribed mode (any kind).
    pub fn active(&self) -> bool {
        self.count() > 0 || !self.shard.is_empty()
    }

    /// Forgets everything (RESET; the dedicated connections are closed by the caller).
    pub fn clear(&mut self) {
        self.channels.clear();
        self.patterns.clear();
        self.shard.clear();
    }

    /// Instances that need a dedicated connection before `kind` with `names` can run
    /// (checked before [`Self::apply`] so a refused request changes nothing).
    pub fn instances_needed(
        &self,
        kind: Kind,
        names: &[&[u8]],
        n: impl SlotMap + Copy,
    ) -> Vec<usize> {
        let mut out: Vec<usize> = match kind {
            Kind::Subscribe => names
                .iter()
                .filter(|c| !self.channels.contains(**c))
                .flat_map(|c| match *c == INVALIDATE {
                    true => (0..n.instances()).filter(|&i| n.serves(i)).collect(),
                    false => vec![n.of(c)],
                })
                .collect(),
            Kind::Ssubscribe => names
                .iter()
                .filter(|c| !self.shard.contains(**c))
                .map(|c| n.of(c))
                .collect(),
            // Every instance that owns a slot (one retired by a resize is left out).
            Kind::Psubscribe if names.iter().any(|p| !self.patterns.contains(*p)) => {
                (0..n.instances()).filter(|&i| n.serves(i)).collect()
            }
            _ => Vec::new(),
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Applies `kind` with `names` (the arguments after the command name; empty for
    /// "every channel/pattern" with the unsubscribe forms) among `n` instances; the
    /// confirmations are RESP2.
    pub fn apply(&mut self, kind: Kind, names: &[&[u8]], n: impl SlotMap + Copy) -> Change {
        self.apply_in(kind, names, n, Proto::Resp2)
    }

    /// [`Self::apply`] with the confirmations in `proto` (RESP3: push frames, `_` for nil).
    pub fn apply_in(
        &mut self,
        kind: Kind,
        names: &[&[u8]],
        n: impl SlotMap + Copy,
        proto: Proto,
    ) -> Change {
        let mut reply = Vec::new();
        // Per instance: the names to send, in argument order.
        let mut per_instance: Vec<Vec<Vec<u8>>> = vec![Vec::new(); n.instances().max(1)];
        let all: Vec<Vec<u8>>;
        let names: Vec<&[u8]> = if names.is_empty() && !kind.adds() {
            let set = if kind.is_pattern() {
                &self.patterns
            } else if kind.is_shard() {
                &self.shard
            } else {
                &self.channels
            };
            all = set.iter().cloned().collect();
            all.iter().map(|v| v.as_slice()).collect()
        } else {
            names.to_vec()
        };
        if names.is_empty() {
            // UNSUBSCRIBE with nothing subscribed: one confirmation with a nil name.
            confirmation(&mut reply, kind, None, self.count_for(kind), proto);
        }
        for name in names {
            let set = if kind.is_pattern() {
                &mut self.patterns
            } else if kind.is_shard() {
                &mut self.shard
            } else {
                &mut self.channels
            };
            let changed = if kind.adds() {
                set.insert(name.to_vec())
            } else {
                set.remove(name)
            };
            if changed {
                if kind.is_pattern() || (!kind.is_shard() && name == INVALIDATE) {
                    // Every instance that owns a slot (one retired by a resize is left out).
                    for (i, list) in per_instance.iter_mut().enumerate() {
                        if n.serves(i) {
                            list.push(name.to_vec());
                        }
                    }
                } else {
                    per_instance[n.of(name)].push(name.to_vec());
                }
            }
            confirmation(&mut reply, kind, Some(name), self.count_for(kind), proto);
        }
        // An instance checks shard channels like keys: one request per slot (SUNSUBSCRIBE
        // of every shard channel may name channels of several slots).
        let per_instance: Vec<(usize, Vec<Vec<u8>>)> = per_instance
            .into_iter()
            .enumerate()
            .flat_map(|(instance, list)| {
                if !kind.is_shard() {
                    return vec![(instance, list)];
                }
                let mut by_slot: std::collections::BTreeMap<u16, Vec<Vec<u8>>> = Default::default();
                for name in list {
                    by_slot
                        .entry(engine_core::slot::key_slot(&name))
                        .or_default()
                        .push(name);
                }
                by_slot.into_values().map(|l| (instance, l)).collect()
            })
            .collect();
        let sends = per_instance
            .into_iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(instance, list)| {
                let mut args: Vec<&[u8]> = Vec::with_capacity(1 + list.len());
                args.push(kind.word());
                args.extend(list.iter().map(Vec::as_slice));
                let mut request = Vec::new();
                resp::encode_request(&mut request, &args);
                Send {
                    instance,
                    request,
                    frames: list.len() as u32,
                    names: list,
                }
            })
            .collect();
        Change { reply, sends }
    }
}

/// `*3\r\n$<len>\r\n<kind>\r\n$<len>\r\n<name>\r\n:<count>\r\n` (name nil when `None`);
/// in RESP3 a push (`>3`), as Redis sends it (`addReplyPubsubSubscribed`).
fn confirmation(out: &mut Vec<u8>, kind: Kind, name: Option<&[u8]>, count: usize, proto: Proto) {
    let mut w = ReplyWriter::new(out, proto);
    w.push(3);
    w.bulk(kind.word());
    match name {
        Some(n) => w.bulk(n),
        None => w.null(),
    }
    w.integer(count as i64);
}

/// What a subscribed client's non-subscription command gets: PING's `pong` array, or
/// Redis 7's "only … allowed in this context" error. `None` for the commands handled
/// elsewhere (the four subscription commands, QUIT, RESET).
pub fn subscribed_mode_reply(name: &[u8], arg: Option<&[u8]>) -> Option<Vec<u8>> {
    if Kind::from_name(name).is_some()
        || name.eq_ignore_ascii_case(b"quit")
        || name.eq_ignore_ascii_case(b"reset")
    {
        return None;
    }
    let mut out = Vec::new();
    if name.eq_ignore_ascii_case(b"ping") {
        push_array_header(&mut out, 2);
        push_bulk(&mut out, b"pong");
        push_bulk(&mut out, arg.unwrap_or(b""));
        return Some(out);
    }
    let mut lower = name[..name.len().min(128)].to_ascii_lowercase();
    for b in &mut lower {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"-ERR Can't execute '");
    out.extend_from_slice(&lower);
    out.extend_from_slice(
        b"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this \
          context\r\n",
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::instance_of;

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).replace("\r\n", " ")
    }

    /// A channel name that lands on `instance` of 2.
    fn channel_on(instance: usize) -> Vec<u8> {
        (0..1000)
            .map(|i| format!("ch{i}").into_bytes())
            .find(|c| instance_of(c, 2) == instance)
            .unwrap()
    }

    /// Shard channels: confirmations count shard channels only, one request per slot, and
    /// they keep the client in subscribed mode.
    #[test]
    fn shard_channels_count_apart_and_go_one_slot_per_request() {
        let mut s = Subscriptions::default();
        s.apply(Kind::Subscribe, &[b"news"], 2);
        let c = s.apply(Kind::Ssubscribe, &[b"{t}a", b"{t}b"], 2);
        assert_eq!(
            c.reply,
            b"*3\r\n$10\r\nssubscribe\r\n$4\r\n{t}a\r\n:1\r\n\
              *3\r\n$10\r\nssubscribe\r\n$4\r\n{t}b\r\n:2\r\n"
                .to_vec()
        );
        assert_eq!(c.sends.len(), 1);
        assert_eq!(c.sends[0].instance, instance_of(b"{t}a", 2));
        s.apply(Kind::Ssubscribe, &[b"x"], 2);
        // SUNSUBSCRIBE of everything: channels of different slots, separate requests.
        let c = s.apply(Kind::Sunsubscribe, &[], 2);
        assert_eq!(c.sends.len(), 2);
        assert_eq!(c.sends.iter().map(|s| s.frames).sum::<u32>(), 3);
        assert!(s.active());
        s.apply(Kind::Unsubscribe, &[], 2);
        assert!(!s.active());
    }

    #[test]
    fn subscribe_counts_like_one_server_and_sends_new_channels_once() {
        let mut s = Subscriptions::default();
        let (a, b) = (channel_on(0), channel_on(1));
        let c = s.apply(Kind::Subscribe, &[&a, &b, &a], 2);
        assert_eq!(
            text(&c.reply),
            format!(
                "*3 $9 subscribe ${} {} :1 *3 $9 subscribe ${} {} :2 *3 $9 subscribe ${} {} :2 ",
                a.len(),
                text(&a),
                b.len(),
                text(&b),
                a.len(),
                text(&a)
            )
        );
        assert_eq!(c.sends.len(), 2);
        assert_eq!((c.sends[0].instance, c.sends[0].frames), (0, 1));
        assert_eq!((c.sends[1].instance, c.sends[1].frames), (1, 1));
        // Already subscribed: confirmed locally, nothing sent.
        let again = s.apply(Kind::Subscribe, &[&a], 2);
        assert!(again.sends.is_empty());
        assert!(text(&again.reply).ends_with(":2 "));
        assert!(s.instances_needed(Kind::Subscribe, &[&a], 2).is_empty());
    }

    #[test]
    fn patterns_go_to_every_instance_and_count_once() {
        let mut s = Subscriptions::default();
        assert_eq!(
            s.instances_needed(Kind::Psubscribe, &[b"p*"], 3),
            vec![0, 1, 2]
        );
        let c = s.apply(Kind::Psubscribe, &[b"p*"], 3);
        assert_eq!(c.sends.len(), 3);
        assert_eq!(c.reply, b"*3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:1\r\n");
        let c = s.apply(Kind::Punsubscribe, &[], 3);
        assert_eq!(c.sends.len(), 3);
        assert_eq!(c.reply, b"*3\r\n$12\r\npunsubscribe\r\n$2\r\np*\r\n:0\r\n");
        assert!(!s.active());
    }

    #[test]
    fn resp3_confirmations_are_pushes() {
        let mut s = Subscriptions::default();
        let c = s.apply_in(Kind::Subscribe, &[b"a"], 1, Proto::Resp3);
        assert_eq!(c.reply, b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
        s.apply_in(Kind::Unsubscribe, &[], 1, Proto::Resp3);
        let c = s.apply_in(Kind::Unsubscribe, &[], 1, Proto::Resp3);
        assert_eq!(c.reply, b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n");
    }

    #[test]
    fn unsubscribe_forms() {
        let mut s = Subscriptions::default();
        // Nothing subscribed: one confirmation with a nil channel, nothing sent.
        let c = s.apply(Kind::Unsubscribe, &[], 2);
        assert_eq!(c.reply, b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
        assert!(c.sends.is_empty());
        // Unknown channels are confirmed with the current count, nothing sent.
        let c = s.apply(Kind::Unsubscribe, &[b"x"], 2);
        assert_eq!(c.reply, b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nx\r\n:0\r\n");
        assert!(c.sends.is_empty());
        s.apply(Kind::Subscribe, &[b"a", b"b"], 2);
        s.apply(Kind::Psubscribe, &[b"p*"], 2);
        let c = s.apply(Kind::Unsubscribe, &[], 2);
        assert_eq!(
            c.reply,
            b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n\
              *3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n"
        );
        assert_eq!(c.sends.iter().map(|s| s.frames).sum::<u32>(), 2);
        assert!(s.active());
    }

    #[test]
    fn subscribed_mode_allows_only_pubsub_ping_quit_reset() {
        assert_eq!(
            subscribed_mode_reply(b"PING", None).unwrap(),
            b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
        );
        assert_eq!(
            subscribed_mode_reply(b"ping", Some(b"x")).unwrap(),
            b"*2\r\n$4\r\npong\r\n$1\r\nx\r\n"
        );
        assert_eq!(
            subscribed_mode_reply(b"GET", Some(b"a")).unwrap(),
            &b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT \
               / RESET are allowed in this context\r\n"[..]
        );
        for ok in [&b"SUBSCRIBE"[..], b"punsubscribe", b"QUIT", b"reset"] {
            assert_eq!(subscribed_mode_reply(ok, None), None);
        }
    }
}
