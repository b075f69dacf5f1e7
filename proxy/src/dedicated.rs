//! Dedicated instance connections: a client's own connection to one instance, for what
//! cannot share the multiplexed [`Backend`](crate::backend::Backend) connection.
//!
//! | client does | why it needs its own connection | lane |
//! |---|---|---|
//! | BLPOP, BRPOP, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, BRPOPLPUSH | the instance parks the connection until data arrives: every other client's reply would wait behind it | `Dedicated(i)` |
//! | WATCH, MULTI … EXEC/DISCARD | WATCH and the queued commands are state of the connection | `Dedicated(i)` |
//! | SUBSCRIBE, PSUBSCRIBE | a subscribed connection only takes (un)subscribe commands, and messages arrive unasked | `PubSub` |
//!
//! # Life
//!
//! A client has at most one dedicated connection per instance, opened on first need and
//! **kept for the rest of the client's life** (a worker looping on BLPOP, or an application
//! running transactions, reuses it; antirez's redis-cluster-proxy makes the same choice with
//! its "private connections"). It is closed when the client goes away (so an instance
//! unblocks a BLPOP of a client that disconnected), on RESET, or when the instance drops it.
//! Limits: [`MAX_PER_CLIENT`] per client and [`MAX_TOTAL`] for the whole proxy; over either,
//! the request gets `-ERR` ([`limit_error`]) and nothing else changes.
//!
//! If a dedicated connection fails, its in-flight requests get the instance's
//! `-ERR instance i (…) is unavailable`; a client whose transaction or subscriptions lived
//! on it is then disconnected after those replies (that state is gone, as if the server had
//! restarted, and client libraries reconnect and resubscribe). A blocking-only client keeps
//! its connection; its next blocking command opens a new dedicated connection.
//!
//! **Spares.** Opening a connection takes a connect (and HELLO/SELECT) before the first
//! request can go out, while another client's request on the shared link goes out at once:
//! a `BLPOP`/`XREADGROUP … BLOCK` followed by another client's `DEL` would run in the wrong
//! order on the instance. So the proxy keeps one connected spare per instance
//! (`Fleet::spares`, owned by nobody: token `usize::MAX`, id 0), hands it to the next client
//! that needs a dedicated connection and opens the next spare; and it flushes dedicated
//! connections before the shared links in each loop iteration.
//!
//! # Lanes and ordering
//!
//! Replies reach the client in request order through its reply slots whatever connection
//! answers (see `crate::client`). Execution order across connections is another matter: a
//! `SET k` on the shared connection followed by `MULTI`/`GET k` on a dedicated one could run
//! in either order. So each client records the *lane* of its last forwarded request
//! (shared, dedicated to instance i, pub/sub), and a request for another lane waits until
//! every earlier reply has arrived. Clients that never use dedicated connections never
//! change lane, so the shared hot path pays one comparison.
//!
//! # Matching replies
//!
//! Each request written gets an [`Expect`] at the back of `inflight`: how many reply frames
//! it produces (1, or one per channel for (un)subscribe commands) and which reply slot they
//! answer (`None`: swallow, for a transaction's `MULTI` the proxy sends on its own). While a
//! connection may be subscribed, frames starting `*3 message` or `*4 pmessage` are messages
//! ([`is_message`]) and go to the client as they come, not to `inflight`; on a RESP3
//! connection (the owner said `HELLO 3`, so the connection did too) a push frame `>3 message`
//! / `>4 pmessage` is always a message, since the client may run anything while subscribed.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use mio::{Registry, Token};

use crate::backend::Wire;
use crate::client::Waiter;

/// Most dedicated connections one client may hold (one per instance at most, so this only
/// binds in fleets larger than it).
pub const MAX_PER_CLIENT: usize = 64;
/// Most dedicated connections the proxy holds at once, all clients together.
pub const MAX_TOTAL: usize = 1024;
/// A subscribed client whose unsent output passes this is disconnected, like Redis's
/// `client-output-buffer-limit pubsub 32mb` hard limit.
pub const PUBSUB_OUTPUT_LIMIT: usize = 32 << 20;

/// The `-ERR` for a request that would need a dedicated connection over a limit.
pub fn limit_error(per_client: bool) -> Vec<u8> {
    if per_client {
        format!(
            "-ERR proxy: this client already holds {MAX_PER_CLIENT} dedicated instance \
             connections (the limit)\r\n"
        )
    } else {
        format!(
            "-ERR proxy: all {MAX_TOTAL} dedicated instance connections are in use \
             (blocking commands, transactions, pub/sub); try again later\r\n"
        )
    }
    .into_bytes()
}

/// Which connection(s) a client's last forwarded request went to (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lane {
    #[default]
    Shared,
    /// Script link `k` (`1..=SCRIPT_LINKS`, `crate::backend`): EVAL/EVALSHA/FCALL and their
    /// `_RO` forms.
    Script(usize),
    /// The client's dedicated connection to this instance.
    Dedicated(usize),
    /// The client's dedicated connections in subscribed mode.
    PubSub,
    /// Its dedicated connections to several instances, for one blocking read
    /// (`crate::spread`).
    Spread,
}

/// What one written request expects back.
#[derive(Debug)]
pub struct Expect {
    /// The slot to fill; `None` drops the reply.
    pub waiter: Option<Waiter>,
    /// Reply frames still to come for this request.
    pub frames: u32,
    /// The first error frame among them, which becomes the slot's reply.
    pub error: Option<Vec<u8>>,
    /// The reply is the connection's `CLIENT ID` ([`Dedicated::engine_id`]), not a slot's.
    pub capture_id: bool,
    /// That id was asked with `TXID`.
    pub txid: bool,
}

/// What a frame read from a dedicated connection is.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// The (last) reply frame of a request, for this slot.
    Reply(Waiter, &'a [u8]),
    /// A pub/sub message for the owning client.
    Message(&'a [u8]),
    /// The connection learned its instance client id ([`Dedicated::engine_id`]); `true`:
    /// from `TXID`.
    EngineId(u64, bool),
    /// The instance refused `TXID` (not a recached engine): ask it `CLIENT ID` from now on.
    IdRefused,
}

/// Whether a MONITOR line from an instance is relayed to the proxy's monitoring client: the
/// proxy shows what its own clients run, as a redis-server shows its clients' commands. So a
/// line goes through when the connection that ran the command is one of the proxy's (`own`:
/// the local addresses of its links and dedicated connections), or is not an address at all
/// (`lua`, a script's commands). Dropped: other clients of the instance (the supervisor's
/// health checks, the fan-out's `CLUSTER NODES`, `recached resize`, clients connected to the
/// engine directly), and the proxy's own `CLUSTER` (its slot map refresh; a client's CLUSTER
/// is refused by the proxy), `ASKING` (following `-ASK`), and `HELLO` and `AUTH` (a new
/// connection's set-up; a client's own HELLO and AUTH are answered by the proxy), which no
/// client sent.
pub fn monitor_line_shown(line: &[u8], own: &std::collections::HashSet<SocketAddr>) -> bool {
    // `+<time> [<db> <addr>] "<command>" …`
    let Some(open) = line.iter().position(|&b| b == b'[') else {
        return true;
    };
    let rest = &line[open + 1..];
    let Some(close) = rest.iter().position(|&b| b == b']') else {
        return true;
    };
    let Some(addr) = rest[..close].splitn(2, |&b| b == b' ').nth(1) else {
        return true;
    };
    let Some(addr) = std::str::from_utf8(addr)
        .ok()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        return true;
    };
    if !own.contains(&addr) {
        return false;
    }
    let command = rest[close + 1..]
        .strip_prefix(b" \"")
        .and_then(|c| c.split(|&b| b == b'"').next())
        .unwrap_or_default();
    ![&b"cluster"[..], b"asking", b"hello", b"auth"]
        .iter()
        .any(|upkeep| command.eq_ignore_ascii_case(upkeep))
}

/// A pub/sub message frame: RESP2 `message` / `pmessage` array or RESP3 push.
pub fn is_message(frame: &[u8]) -> bool {
    let body = match frame.first() {
        Some(b'*' | b'>') => &frame[1..],
        _ => return false,
    };
    body.starts_with(b"3\r\n$7\r\nmessage\r\n")
        || body.starts_with(b"4\r\n$8\r\npmessage\r\n")
        || body.starts_with(b"3\r\n$8\r\nsmessage\r\n")
        // Client-side caching's pushes (RESP3 only; a RESP2 redirect gets `message`s).
        || (frame[0] == b'>'
            && (body.starts_with(b"2\r\n$10\r\ninvalidate\r\n")
                || body.starts_with(b"2\r\n$21\r\ntracking-redir-broken\r\n")))
}

pub struct Dedicated {
    pub instance: usize,
    /// The owning client: slab token and id (tokens are reused; ids are not).
    pub owner_token: usize,
    pub owner_id: u64,
    pub wire: Wire,
    /// `Some(start)` while the connect is in progress (requests queue meanwhile).
    pub connecting: Option<Instant>,
    pub inflight: VecDeque<Expect>,
    /// A (P)SUBSCRIBE was sent since the last ordinary command: message frames may come.
    pub pubsub: bool,
    /// Listed in the loop's to-flush list this iteration.
    pub dirty: bool,
    /// Switched to RESP3 with `HELLO 3` (its owner is a RESP3 client).
    pub resp3: bool,
    /// Turned into a monitor (MONITOR sent): once its `+OK` is in, every frame is a line for
    /// the owner.
    pub monitor: bool,
    /// The database selected on it (`SELECT`, sent before a request when its owner's
    /// database differs, `crate::exec::sync_db`).
    pub db: usize,
    /// Instances of a fleet whose engines forward PUBLISH to each other; 0 otherwise. Then a
    /// `pmessage` (patterns are subscribed on every instance) is relayed only from its
    /// channel's instance ([`relay_pmessage`]).
    pub instances: usize,
    /// The instance's client id of this connection (`CLIENT ID`, asked before its first part), for
    /// `CLIENT UNBLOCK` of a blocking read spread over several instances (`crate::spread`).
    pub engine_id: Option<u64>,
    /// The channels subscribed on it (SUBSCRIBE, not patterns or shard channels): when the
    /// instance is retired and the connection closes, they are subscribed again on their
    /// owners (`crate::event_loop`, `fail_dedicated`).
    pub channels: Vec<Vec<u8>>,
}

/// Whether a `pmessage` frame read from `instance`'s connection is relayed, when every one of
/// `n` instances delivers each PUBLISH (cluster engines forward it): only the channel's own
/// instance relays it, so the client gets it once. Keyspace notifications
/// (`__keyspace@…`/`__keyevent@…`) are not forwarded between engines, so each engine's own
/// are relayed.
pub fn relay_pmessage(frame: &[u8], instance: usize, n: impl crate::slots::SlotMap + Copy) -> bool {
    // `*4\r\n$8\r\npmessage\r\n$<len>\r\n<pattern>\r\n$<len>\r\n<channel>\r\n…`
    let Some(rest) = frame
        .get(1..)
        .and_then(|b| b.strip_prefix(b"4\r\n$8\r\npmessage\r\n"))
    else {
        return true;
    };
    let Some((_pattern, rest)) = bulk(rest) else {
        return true;
    };
    let Some((channel, _)) = bulk(rest) else {
        return true;
    };
    channel.starts_with(b"__keyspace@")
        || channel.starts_with(b"__keyevent@")
        || n.of(channel) == instance
}

/// Whether a message frame read from `instance`'s connection is relayed, when every one of
/// `n` instances delivers each PUBLISH: a `pmessage` as [`relay_pmessage`] says; a
/// `message` on `__redis__:invalidate`, which the client is subscribed to on every instance
/// (`crate::pubsub::INVALIDATE`), only from the channel's instance when it is a PUBLISH (a
/// bulk payload), from any when it is an invalidation (an array of keys, or nil).
pub fn relay_message(frame: &[u8], instance: usize, n: impl crate::slots::SlotMap + Copy) -> bool {
    let channel = crate::pubsub::INVALIDATE;
    // `*3` (RESP2) or `>3` (a RESP3 push), then `message`, the channel and a bulk payload.
    let mut head = b"3\r\n$7\r\nmessage\r\n$20\r\n".to_vec();
    head.extend_from_slice(channel);
    head.extend_from_slice(b"\r\n$");
    // (`$-1` is the nil of a flush's invalidation, not a PUBLISH.)
    if frame
        .get(1..)
        .and_then(|f| f.strip_prefix(head.as_slice()))
        .is_some_and(|rest| !rest.starts_with(b"-1\r\n"))
    {
        return n.of(channel) == instance;
    }
    relay_pmessage(frame, instance, n)
}

/// One `$<len>\r\n<bytes>\r\n` at the start of `b`: the bytes and what follows.
fn bulk(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let b = b.strip_prefix(b"$")?;
    let end = b.iter().position(|&c| c == b'\r')?;
    let len = usize::try_from(resp::parse_i64(&b[..end])?).ok()?;
    let body = b.get(end + 2..end + 2 + len)?;
    Some((body, b.get(end + 4 + len..)?))
}

impl Dedicated {
    /// Starts a non-blocking connect to `addr`, registered under `token`.
    pub fn connect(
        instance: usize,
        addr: SocketAddr,
        owner_token: usize,
        owner_id: u64,
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> io::Result<Self> {
        let mut wire = Wire::new();
        wire.stream = Some(Wire::connect(addr, registry, token)?);
        Ok(Dedicated {
            instance,
            owner_token,
            owner_id,
            wire,
            connecting: Some(now),
            inflight: VecDeque::new(),
            pubsub: false,
            dirty: false,
            resp3: false,
            db: 0,
            monitor: false,
            instances: 0,
            engine_id: None,
            channels: Vec::new(),
        })
    }

    /// Queues a request producing `frames` reply frames for `waiter`.
    pub fn send(&mut self, request: &[u8], waiter: Option<Waiter>, frames: u32) {
        self.wire.out.extend_from_slice(request);
        self.inflight.push_back(Expect {
            waiter,
            frames,
            error: None,
            capture_id: false,
            txid: false,
        });
    }

    /// Queues `TXID` (CLIENT ID's answer, unseen by MONITOR: a recached engine's admin
    /// command) or, with `client_id` (an instance that refused TXID: not a recached engine),
    /// `CLIENT ID`; once. Its reply sets [`Dedicated::engine_id`].
    pub fn ask_id(&mut self, client_id: bool) {
        if self.engine_id.is_some() || self.inflight.iter().any(|e| e.capture_id) {
            return;
        }
        if client_id {
            self.wire
                .out
                .extend_from_slice(b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n");
        } else {
            self.wire.out.extend_from_slice(b"*1\r\n$4\r\nTXID\r\n");
        }
        self.inflight.push_back(Expect {
            waiter: None,
            frames: 1,
            error: None,
            capture_id: true,
            txid: !client_id,
        });
    }

    /// Calls `each` for every complete frame read so far that answers a slot or is a
    /// message. `Err`: a malformed frame or a reply nobody asked for; drop the connection.
    pub fn incoming(
        &mut self,
        slots: impl crate::slots::SlotMap + Copy,
        mut each: impl FnMut(Incoming<'_>),
    ) -> Result<(), String> {
        let Dedicated {
            wire,
            inflight,
            pubsub,
            instance,
            instances,
            monitor,
            engine_id,
            ..
        } = self;
        wire.frames(|frame| {
            // A monitor's lines: whatever arrives once nothing is awaited.
            if *monitor && inflight.is_empty() {
                each(Incoming::Message(frame));
                return Ok(());
            }
            // A RESP3 push is never a reply, whatever ran since the last SUBSCRIBE.
            if (*pubsub || frame.first() == Some(&b'>')) && is_message(frame) {
                if *instances < 2 || relay_message(frame, *instance, slots) {
                    each(Incoming::Message(frame));
                }
                return Ok(());
            }
            let Some(front) = inflight.front_mut() else {
                return Err("reply without a request".into());
            };
            if frame.first() == Some(&b'-') && front.error.is_none() {
                front.error = Some(frame.to_vec());
            }
            front.frames = front.frames.saturating_sub(1);
            if front.frames == 0 {
                let done = inflight.pop_front().expect("front exists");
                if done.capture_id {
                    if let Some(id) = frame
                        .strip_prefix(b":")
                        .and_then(|f| f.strip_suffix(b"\r\n"))
                        .and_then(resp::parse_i64)
                    {
                        *engine_id = Some(id as u64);
                        each(Incoming::EngineId(id as u64, done.txid));
                    } else if frame.first() == Some(&b'-') && done.txid {
                        each(Incoming::IdRefused);
                    }
                    return Ok(());
                }
                if let Some(w) = done.waiter {
                    each(Incoming::Reply(w, done.error.as_deref().unwrap_or(frame)));
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_of_other_clients_and_of_the_proxy_s_own_upkeep_are_dropped() {
        let own: std::collections::HashSet<SocketAddr> = [
            "127.0.0.1:46116".parse().unwrap(),
            "[::1]:7000".parse().unwrap(),
        ]
        .into();
        let shown = |line: &str| monitor_line_shown(line.as_bytes(), &own);
        assert!(shown(
            "+1796380846.302687 [0 127.0.0.1:46116] \"SET\" \"foo\" \"bar\"\r\n"
        ));
        assert!(shown("+1796380846.302687 [3 [::1]:7000] \"get\" \"k\"\r\n"));
        assert!(shown("+1796380846.302687 [0 lua] \"set\" \"k\" \"v\"\r\n"));
        // The supervisor's health check, another client of the engine.
        assert!(!shown(
            "+1796380846.820629 [0 127.0.0.1:46134] \"PING\"\r\n"
        ));
        // The proxy's slot map refresh and its ASKING, on its own link.
        assert!(!shown(
            "+1796380846.804476 [0 127.0.0.1:46116] \"CLUSTER\" \"SLOTS\"\r\n"
        ));
        assert!(!shown(
            "+1796380846.804476 [0 127.0.0.1:46116] \"asking\"\r\n"
        ));
        // A new link's set-up.
        assert!(!shown(
            "+1796380846.804476 [0 127.0.0.1:46116] \"HELLO\" \"3\"\r\n"
        ));
        assert!(!shown(
            "+1796380846.804476 [0 127.0.0.1:46116] \"AUTH\" \"(redacted)\"\r\n"
        ));
        // Not a MONITOR line: relayed unchanged.
        assert!(shown("+OK\r\n"));
    }

    /// Cluster engines deliver a PUBLISH on every instance: a pattern subscriber's copy is
    /// relayed from the channel's instance only; keyspace events from every instance.
    #[test]
    fn pmessages_relayed_once_from_the_channels_instance() {
        let frame = |ch: &str| {
            format!(
                "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n${}\r\n{ch}\r\n$1\r\nx\r\n",
                ch.len()
            )
            .into_bytes()
        };
        let ch = "news";
        let owner = crate::route::instance_of(ch.as_bytes(), 3);
        let relayed: Vec<usize> = (0..3)
            .filter(|&i| relay_pmessage(&frame(ch), i, 3))
            .collect();
        assert_eq!(relayed, vec![owner]);
        assert!((0..3).all(|i| relay_pmessage(&frame("__keyevent@0__:set"), i, 3)));
        let push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n";
        assert!((0..3).all(|i| relay_pmessage(push, i, 3)));
    }

    #[test]
    fn messages_are_told_from_confirmations() {
        assert!(is_message(
            b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
        ));
        assert!(is_message(
            b"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$1\r\nx\r\n"
        ));
        assert!(!is_message(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"));
        assert!(!is_message(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"));
        assert!(!is_message(b"$7\r\nmessage\r\n"));
        assert!(is_message(
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
        ));
        assert!(!is_message(b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"));
        // Client-side caching's pushes are relayed like messages; a reply array is not.
        assert!(is_message(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"));
        assert!(is_message(b">2\r\n$10\r\ninvalidate\r\n_\r\n"));
        assert!(is_message(b">2\r\n$21\r\ntracking-redir-broken\r\n:7\r\n"));
        assert!(!is_message(b"*2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"));
    }
}
