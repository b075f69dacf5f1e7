//! Pub/sub and keyspace notifications against a real redis-server and a recached engine, with
//! the same expectations (exact frames) for both: messages between connections, patterns,
//! RESP2 arrays and RESP3 pushes, subscription counts, keyspace events for SET, DEL, EXPIRE
//! and expiry, and a subscriber that disconnects.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// `*n`/`>n` frame of bulk strings, escaped like [`escape`].
fn frame(head: &str, parts: &[&str]) -> String {
    let mut s = format!("{head}{}\\r\\n", parts.len());
    for p in parts {
        s.push_str(&format!("${}\\r\\n{p}\\r\\n", p.len()));
    }
    s
}

/// `[kind, name, count]` subscription frame.
fn sub_frame(head: &str, kind: &str, name: &str, count: i64) -> String {
    format!(
        "{head}3\\r\\n${}\\r\\n{kind}\\r\\n${}\\r\\n{name}\\r\\n:{count}\\r\\n",
        kind.len(),
        name.len()
    )
}

#[test]
fn subscribe_and_publish_between_clients() {
    on_both(|port, who| {
        let mut sub = Resp::connect(port);
        let mut publisher = Resp::connect(port);
        assert_eq!(
            cmd(&mut sub, &["SUBSCRIBE", "news"]),
            sub_frame("*", "subscribe", "news", 1),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "news", "hello"]),
            ":1\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut sub),
            frame("*", &["message", "news", "hello"]),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "other", "x"]),
            ":0\\r\\n",
            "{who}"
        );
        assert_quiet(&mut sub, who);
        // Subscribed mode (RESP2): most commands are refused, PING has its own shape.
        assert_eq!(
            cmd(&mut sub, &["GET", "k"]),
            "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut sub, &["PING"]),
            "*2\\r\\n$4\\r\\npong\\r\\n$0\\r\\n\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBSUB", "NUMSUB", "news", "other"]),
            "*4\\r\\n$4\\r\\nnews\\r\\n:1\\r\\n$5\\r\\nother\\r\\n:0\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn psubscribe_patterns_get_pmessage() {
    on_both(|port, who| {
        let mut sub = Resp::connect(port);
        let mut publisher = Resp::connect(port);
        assert_eq!(
            cmd(&mut sub, &["PSUBSCRIBE", "news.*"]),
            sub_frame("*", "psubscribe", "news.*", 1),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "news.tech", "m1"]),
            ":1\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut sub),
            frame("*", &["pmessage", "news.*", "news.tech", "m1"]),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "sports", "m2"]),
            ":0\\r\\n",
            "{who}"
        );
        // A channel and a pattern both matching: two deliveries, channel first.
        assert_eq!(
            cmd(&mut sub, &["SUBSCRIBE", "news.tech"]),
            sub_frame("*", "subscribe", "news.tech", 2),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "news.tech", "m3"]),
            ":2\\r\\n",
            "{who}"
        );
        assert_eq!(
            next(&mut sub),
            frame("*", &["message", "news.tech", "m3"]),
            "{who}"
        );
        assert_eq!(
            next(&mut sub),
            frame("*", &["pmessage", "news.*", "news.tech", "m3"]),
            "{who}"
        );
        assert_eq!(
            cmd(&mut publisher, &["PUBSUB", "NUMPAT"]),
            ":1\\r\\n",
            "{who}"
        );
        assert_quiet(&mut sub, who);
    });
}

#[test]
fn resp3_pushes_and_mixed_protocol_subscribers() {
    on_both(|port, who| {
        let mut s3 = Resp::connect(port);
        let mut s2 = Resp::connect(port);
        let mut publisher = Resp::connect(port);
        cmd(&mut s3, &["HELLO", "3"]);
        assert_eq!(
            cmd(&mut s3, &["SUBSCRIBE", "ch"]),
            sub_frame(">", "subscribe", "ch", 1),
            "{who}"
        );
        cmd(&mut s2, &["SUBSCRIBE", "ch"]);
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "ch", "hi"]),
            ":2\\r\\n",
            "{who}"
        );
        // Each subscriber gets the message in its own protocol.
        assert_eq!(next(&mut s3), frame(">", &["message", "ch", "hi"]), "{who}");
        assert_eq!(next(&mut s2), frame("*", &["message", "ch", "hi"]), "{who}");
        // RESP3 clients may run any command while subscribed.
        assert_eq!(cmd(&mut s3, &["GET", "nokey"]), "_\\r\\n", "{who}");
        assert_eq!(cmd(&mut s3, &["PING"]), "+PONG\\r\\n", "{who}");
        // Publishing to itself: Redis 7.0 writes the push before PUBLISH's reply.
        s3.send_raw(&Resp::encode(&[b"PUBLISH", b"ch", b"me"]));
        assert_eq!(next(&mut s3), frame(">", &["message", "ch", "me"]), "{who}");
        assert_eq!(next(&mut s3), ":2\\r\\n", "{who}");
        assert_eq!(next(&mut s2), frame("*", &["message", "ch", "me"]), "{who}");
        // HELLO 2 while subscribed: later messages come as RESP2 arrays.
        cmd(&mut s3, &["HELLO", "2"]);
        cmd(&mut publisher, &["PUBLISH", "ch", "again"]);
        assert_eq!(
            next(&mut s3),
            frame("*", &["message", "ch", "again"]),
            "{who}"
        );
        assert_eq!(
            next(&mut s2),
            frame("*", &["message", "ch", "again"]),
            "{who}"
        );
    });
}

#[test]
fn unsubscribe_counts() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        c.send_raw(&Resp::encode(&[b"SUBSCRIBE", b"a", b"b", b"c"]));
        for (i, ch) in ["a", "b", "c"].iter().enumerate() {
            assert_eq!(
                next(&mut c),
                sub_frame("*", "subscribe", ch, i as i64 + 1),
                "{who}"
            );
        }
        assert_eq!(
            cmd(&mut c, &["PSUBSCRIBE", "p*"]),
            sub_frame("*", "psubscribe", "p*", 4),
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["UNSUBSCRIBE", "b"]),
            sub_frame("*", "unsubscribe", "b", 3),
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["UNSUBSCRIBE", "nosuch"]),
            sub_frame("*", "unsubscribe", "nosuch", 3),
            "{who}"
        );
        // All remaining channels, in an order of the server's choosing.
        c.send_raw(&Resp::encode(&[b"UNSUBSCRIBE"]));
        let mut got = [next(&mut c), next(&mut c)];
        got.sort();
        let mut want = [
            sub_frame("*", "unsubscribe", "a", 2),
            sub_frame("*", "unsubscribe", "c", 2),
        ];
        want.sort();
        // The counts go 2 then 1 whatever the order: compare without them.
        let strip = |s: &String| s.rsplit_once(':').unwrap().0.to_string();
        assert_eq!(
            got.iter().map(strip).collect::<Vec<_>>(),
            want.iter().map(strip).collect::<Vec<_>>(),
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["PUNSUBSCRIBE"]),
            sub_frame("*", "punsubscribe", "p*", 0),
            "{who}"
        );
        // Out of subscribed mode: normal commands work again.
        assert_eq!(cmd(&mut c, &["GET", "x"]), "$-1\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut c, &["UNSUBSCRIBE"]),
            "*3\\r\\n$11\\r\\nunsubscribe\\r\\n$-1\\r\\n:0\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn keyspace_notifications_for_set_del_expire_and_expiry() {
    on_both(|port, who| {
        let mut sub = Resp::connect(port);
        let mut c = Resp::connect(port);
        assert_eq!(
            cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
            "+OK\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]),
            frame("*", &["notify-keyspace-events", "AKE"]),
            "{who}"
        );
        cmd(&mut sub, &["PSUBSCRIBE", "__key*__:*"]);
        let space = |key: &str, ev: &str| {
            frame(
                "*",
                &[
                    "pmessage",
                    "__key*__:*",
                    &format!("__keyspace@0__:{key}"),
                    ev,
                ],
            )
        };
        let event = |key: &str, ev: &str| {
            frame(
                "*",
                &[
                    "pmessage",
                    "__key*__:*",
                    &format!("__keyevent@0__:{ev}"),
                    key,
                ],
            )
        };
        cmd(&mut c, &["SET", "k", "v"]);
        assert_eq!(next(&mut sub), space("k", "set"), "{who}");
        assert_eq!(next(&mut sub), event("k", "set"), "{who}");
        cmd(&mut c, &["EXPIRE", "k", "100"]);
        assert_eq!(next(&mut sub), space("k", "expire"), "{who}");
        assert_eq!(next(&mut sub), event("k", "expire"), "{who}");
        cmd(&mut c, &["DEL", "k", "missing"]);
        assert_eq!(next(&mut sub), space("k", "del"), "{who}");
        assert_eq!(next(&mut sub), event("k", "del"), "{who}");
        // SET with EX: `set` then `expire`.
        cmd(&mut c, &["SET", "t", "v", "PX", "150"]);
        assert_eq!(next(&mut sub), space("t", "set"), "{who}");
        assert_eq!(next(&mut sub), event("t", "set"), "{who}");
        assert_eq!(next(&mut sub), space("t", "expire"), "{who}");
        assert_eq!(next(&mut sub), event("t", "expire"), "{who}");
        // Expiry without any access (the active cycle): `expired`.
        let started = Instant::now();
        assert_eq!(next(&mut sub), space("t", "expired"), "{who}");
        assert_eq!(next(&mut sub), event("t", "expired"), "{who}");
        assert!(started.elapsed() < Duration::from_secs(4), "{who}");
        // Lazy expiry on access, then the access itself.
        cmd(&mut c, &["CONFIG", "SET", "hz", "1"]);
        cmd(&mut c, &["SET", "lazy", "v", "PX", "50"]);
        for _ in 0..4 {
            next(&mut sub);
        }
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(cmd(&mut c, &["INCR", "lazy"]), ":1\\r\\n", "{who}");
        assert_eq!(next(&mut sub), space("lazy", "expired"), "{who}");
        assert_eq!(next(&mut sub), event("lazy", "expired"), "{who}");
        assert_eq!(next(&mut sub), space("lazy", "incrby"), "{who}");
        assert_eq!(next(&mut sub), event("lazy", "incrby"), "{who}");
        // RENAME: rename_from, rename_to; a failed command raises nothing.
        cmd(&mut c, &["RENAME", "lazy", "moved"]);
        assert_eq!(next(&mut sub), space("lazy", "rename_from"), "{who}");
        assert_eq!(next(&mut sub), event("lazy", "rename_from"), "{who}");
        assert_eq!(next(&mut sub), space("moved", "rename_to"), "{who}");
        assert_eq!(next(&mut sub), event("moved", "rename_to"), "{who}");
        cmd(&mut c, &["RENAME", "missing", "x"]);
        cmd(&mut c, &["PERSIST", "moved"]);
        assert_quiet(&mut sub, who);
        // Only the keyevent channel with `E` + `g`.
        cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Eg"]);
        cmd(&mut c, &["SET", "quiet", "v"]);
        cmd(&mut c, &["DEL", "quiet"]);
        assert_eq!(next(&mut sub), event("quiet", "del"), "{who}");
        assert_quiet(&mut sub, who);
    });
}

/// A RESP3 client subscribed to its own key's events reads them before its command's reply
/// (Redis 7.0 writes pushes into the output buffer as they happen).
#[test]
fn resp3_notifications_of_own_writes_come_first() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        cmd(&mut c, &["HELLO", "3"]);
        cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "K$"]);
        cmd(&mut c, &["SUBSCRIBE", "__keyspace@0__:mine"]);
        c.send_raw(&Resp::encode(&[b"SET", b"mine", b"v"]));
        assert_eq!(
            next(&mut c),
            frame(">", &["message", "__keyspace@0__:mine", "set"]),
            "{who}"
        );
        assert_eq!(next(&mut c), "+OK\\r\\n", "{who}");
    });
}

#[test]
fn disconnected_subscriber_is_forgotten() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        {
            let mut sub = Resp::connect(port);
            cmd(&mut sub, &["SUBSCRIBE", "gone"]);
            cmd(&mut sub, &["PSUBSCRIBE", "gone*"]);
            assert_eq!(
                cmd(&mut c, &["PUBSUB", "NUMSUB", "gone"]),
                "*2\\r\\n$4\\r\\ngone\\r\\n:1\\r\\n",
                "{who}"
            );
        }
        // The server notices the close asynchronously: poll, bounded.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let numsub = cmd(&mut c, &["PUBSUB", "NUMSUB", "gone"]);
            let numpat = cmd(&mut c, &["PUBSUB", "NUMPAT"]);
            if numsub == "*2\\r\\n$4\\r\\ngone\\r\\n:0\\r\\n" && numpat == ":0\\r\\n" {
                break;
            }
            assert!(Instant::now() < deadline, "{who}: still {numsub} {numpat}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cmd(&mut c, &["PUBLISH", "gone", "x"]), ":0\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["PUBSUB", "CHANNELS"]), "*0\\r\\n", "{who}");
    });
}

/// The (un)subscribe confirmations under `CLIENT REPLY OFF` / `SKIP`, RESP2 and RESP3: sent
/// whatever the reply mode (Redis 7.0 flags them as pushes), while an ordinary reply is not;
/// on redis-server, an engine and the proxy of a 2-engine fleet (which silenced them).
#[test]
fn subscribe_confirmations_ignore_client_reply_off() {
    let transcript = |port: u16| -> Vec<String> {
        let mut out = Vec::new();
        for proto in ["2", "3"] {
            let mut c = Resp::connect(port);
            out.push(format!("HELLO {proto}"));
            c.cmd_str(&["HELLO", proto]);
            for mode in ["OFF", "SKIP"] {
                send(&mut c, &["CLIENT", "REPLY", mode]);
                out.push(cmd(&mut c, &["SUBSCRIBE", "rc"]));
                out.push(cmd(&mut c, &["PSUBSCRIBE", "r*"]));
                // Silenced under OFF; under SKIP, SUBSCRIBE took the skipped turn.
                send(&mut c, &["PING"]);
                out.push(cmd(&mut c, &["UNSUBSCRIBE", "rc"]));
                out.push(cmd(&mut c, &["PUNSUBSCRIBE", "r*"]));
                out.push(cmd(&mut c, &["CLIENT", "REPLY", "ON"]));
            }
        }
        out
    };
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let want = transcript(redis_port);
    assert!(
        want.iter().any(|l| l.contains("subscribe")),
        "redis-server's transcript: {want:?}"
    );
    let engine_port = free_port();
    let _engine = start_engine(engine_port);
    assert_eq!(transcript(engine_port), want, "engine");
    let fleet = Fleet::start("pubsub-reply-off", 2);
    assert_eq!(transcript(fleet.proxy_port), want, "proxy");
}

/// PUBSUB NUMSUB and SHARDNUMSUB over channels of several engines: each count from the
/// channel's engine, in the caller's order, as redis-server answers the same subscriptions
/// (was: "not supported … its channels live on different instances").
#[test]
fn numsub_over_channels_of_several_engines_answers_as_redis() {
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let fleet = Fleet::start("pubsub-numsub", 2);
    // Channels on both engines of the fleet (the proxy subscribes a channel on its owner).
    let chans: Vec<String> = (0..6).map(|i| format!("numsub:{i}")).collect();
    let owners: std::collections::BTreeSet<u32> = chans
        .iter()
        .map(|c| engine_core::slot::instance_for_key(c.as_bytes(), 2))
        .collect();
    assert_eq!(owners.len(), 2, "the channels must span both engines");
    let transcript = |port: u16| -> Vec<String> {
        let mut subs: Vec<Resp> = Vec::new();
        for (i, ch) in chans.iter().enumerate().take(4) {
            for _ in 0..=i {
                let mut s = Resp::connect(port);
                assert!(cmd(&mut s, &["SUBSCRIBE", ch]).contains("subscribe"));
                subs.push(s);
            }
        }
        let mut c = Resp::connect(port);
        let mut out = Vec::new();
        for proto in ["2", "3"] {
            c.cmd_str(&["HELLO", proto]);
            let mut args = vec!["PUBSUB", "NUMSUB"];
            args.extend(chans.iter().rev().map(String::as_str));
            args.push("numsub:0");
            out.push(cmd(&mut c, &args));
            args[1] = "SHARDNUMSUB";
            out.push(cmd(&mut c, &args));
            out.push(cmd(&mut c, &["PUBSUB", "NUMSUB"]));
        }
        out
    };
    let want = transcript(redis_port);
    assert!(want[0].contains(":4"), "redis-server: {want:?}");
    assert_eq!(transcript(fleet.proxy_port), want, "proxy vs redis-server");
}
