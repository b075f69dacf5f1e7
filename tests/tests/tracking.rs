//! Client-side caching (CLIENT TRACKING, issue 19) against a real redis-server and a recached
//! engine, with the same expectations (exact frames) for both: RESP3 push invalidations on the
//! tracking connection, RESP2 invalidations through a REDIRECT client subscribed to
//! `__redis__:invalidate`, BCAST prefixes, NOLOOP, OPTIN + CACHING, FLUSHALL's null, expiry,
//! `tracking-redir-broken`, the order of a client's own invalidation after its reply, and the
//! INFO counters. Error texts are in tests/diff/tracking.txt.

mod common;

use common::*;
use std::time::Duration;

/// `>2 $10 invalidate *N keys…` (escaped).
fn inv(keys: &[&str]) -> String {
    let mut s = format!(">2\\r\\n$10\\r\\ninvalidate\\r\\n*{}\\r\\n", keys.len());
    for k in keys {
        s.push_str(&format!("${}\\r\\n{k}\\r\\n", k.len()));
    }
    s
}

/// `*3 message __redis__:invalidate *N keys…` (escaped): the RESP2 redirect message.
fn inv_msg(keys: &[&str]) -> String {
    let mut s = "*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n".to_string();
    s.push_str(&format!("*{}\\r\\n", keys.len()));
    for k in keys {
        s.push_str(&format!("${}\\r\\n{k}\\r\\n", k.len()));
    }
    s
}

/// A RESP3 connection (HELLO 3's reply, which holds the id, is read and dropped).
fn resp3(port: u16) -> Resp {
    let mut c = Resp::connect(port);
    c.cmd_str(&["HELLO", "3"]);
    c
}

fn client_id(c: &mut Resp) -> String {
    let r = cmd(c, &["CLIENT", "ID"]);
    r.trim_start_matches(':')
        .trim_end_matches("\\r\\n")
        .to_string()
}

fn info_field(c: &mut Resp, field: &str) -> String {
    let raw = String::from_utf8_lossy(&c.cmd_str(&["INFO", "everything"])).into_owned();
    raw.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO has no {field}"))
        .trim()
        .to_string()
}

#[test]
fn resp3_invalidation_after_another_clients_write() {
    on_both(|port, who| {
        let mut t = resp3(port);
        let mut w = Resp::connect(port);
        assert_eq!(
            cmd(&mut t, &["CLIENT", "TRACKING", "ON"]),
            "+OK\\r\\n",
            "{who}"
        );
        cmd(&mut w, &["MSET", "a", "1", "b", "2"]);
        assert_eq!(cmd(&mut t, &["GET", "a"]), "$1\\r\\n1\\r\\n", "{who}");
        // b was not read: its change is not told.
        cmd(&mut w, &["SET", "b", "3"]);
        cmd(&mut w, &["SET", "a", "4"]);
        assert_eq!(next(&mut t), inv(&["a"]), "{who}");
        // Told once: the key left the table until read again.
        cmd(&mut w, &["SET", "a", "5"]);
        assert_quiet(&mut t, who);
        // MGET remembers every key; DEL of two tells both, one message each.
        cmd(&mut t, &["MGET", "a", "b"]);
        cmd(&mut w, &["DEL", "a", "b"]);
        assert_eq!(next(&mut t), inv(&["a"]), "{who}");
        assert_eq!(next(&mut t), inv(&["b"]), "{who}");
        // FLUSHALL: a null, whatever was cached.
        cmd(&mut t, &["GET", "c"]);
        cmd(&mut w, &["FLUSHALL"]);
        assert_eq!(
            next(&mut t),
            ">2\\r\\n$10\\r\\ninvalidate\\r\\n_\\r\\n",
            "{who}"
        );
        assert_eq!(info_field(&mut w, "tracking_clients"), "1", "{who}");
        assert_eq!(info_field(&mut w, "tracking_total_keys"), "0", "{who}");
    });
}

#[test]
fn own_write_is_told_after_the_reply_unless_noloop() {
    on_both(|port, who| {
        let mut t = resp3(port);
        cmd(&mut t, &["CLIENT", "TRACKING", "ON"]);
        cmd(&mut t, &["HSET", "h", "f", "1"]);
        cmd(&mut t, &["HGET", "h", "f"]);
        assert_eq!(cmd(&mut t, &["HDEL", "h", "f"]), ":1\\r\\n", "{who}");
        assert_eq!(next(&mut t), inv(&["h"]), "{who}");
        // Inside MULTI: after EXEC's reply.
        cmd(&mut t, &["SET", "x", "1"]);
        cmd(&mut t, &["GET", "x"]);
        cmd(&mut t, &["MULTI"]);
        cmd(&mut t, &["INCR", "x"]);
        assert_eq!(cmd(&mut t, &["EXEC"]), "*1\\r\\n:2\\r\\n", "{who}");
        assert_eq!(next(&mut t), inv(&["x"]), "{who}");
        // NOLOOP: the client's own writes are not told.
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "NOLOOP"]);
        cmd(&mut t, &["GET", "x"]);
        assert_eq!(cmd(&mut t, &["SET", "x", "9"]), "+OK\\r\\n", "{who}");
        assert_quiet(&mut t, who);
    });
}

#[test]
fn resp2_redirect_to_a_subscribed_client() {
    on_both(|port, who| {
        let mut r = Resp::connect(port);
        let id = client_id(&mut r);
        cmd(&mut r, &["SUBSCRIBE", "__redis__:invalidate"]);
        let mut t = Resp::connect(port);
        let mut w = Resp::connect(port);
        assert_eq!(
            cmd(&mut t, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]),
            "+OK\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut t, &["CLIENT", "GETREDIR"]),
            format!(":{id}\\r\\n"),
            "{who}"
        );
        cmd(&mut t, &["GET", "k"]);
        cmd(&mut w, &["SET", "k", "v"]);
        assert_eq!(next(&mut r), inv_msg(&["k"]), "{who}");
        assert_quiet(&mut t, who);
        // FLUSHDB: the value is a RESP2 null (the tracking client's protocol).
        cmd(&mut t, &["GET", "k"]);
        cmd(&mut w, &["FLUSHDB"]);
        assert_eq!(
            next(&mut r),
            "*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n$-1\\r\\n",
            "{who}"
        );
        // The redirect client goes away: a RESP2 tracking client is not told, but the flag
        // shows in CLIENT LIST (t, R) and TRACKINGINFO.
        drop(r);
        std::thread::sleep(Duration::from_millis(100));
        cmd(&mut t, &["GET", "k"]);
        cmd(&mut w, &["SET", "k", "2"]);
        let line = cmd(&mut t, &["CLIENT", "INFO"]);
        assert!(line.contains(" flags=tR "), "{who}: {line}");
        assert!(line.contains(&format!(" redir={id} ")), "{who}: {line}");
        assert_eq!(
            cmd(&mut t, &["CLIENT", "TRACKINGINFO"]),
            format!(
                "*6\\r\\n$5\\r\\nflags\\r\\n*2\\r\\n$2\\r\\non\\r\\n$15\\r\\nbroken_redirect\\r\\n\
                 $8\\r\\nredirect\\r\\n:{id}\\r\\n$8\\r\\nprefixes\\r\\n*0\\r\\n"
            ),
            "{who}"
        );
    });
}

#[test]
fn resp3_tracking_redir_broken() {
    on_both(|port, who| {
        let mut r = Resp::connect(port);
        let id = client_id(&mut r);
        let mut t = resp3(port);
        let mut w = Resp::connect(port);
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]);
        cmd(&mut t, &["GET", "k"]);
        drop(r);
        std::thread::sleep(Duration::from_millis(100));
        cmd(&mut w, &["SET", "k", "v"]);
        assert_eq!(
            next(&mut t),
            format!(">2\\r\\n$21\\r\\ntracking-redir-broken\\r\\n:{id}\\r\\n"),
            "{who}"
        );
    });
}

#[test]
fn bcast_prefixes_and_noloop() {
    on_both(|port, who| {
        let mut t = resp3(port);
        let mut w = Resp::connect(port);
        assert_eq!(
            cmd(
                &mut t,
                &[
                    "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a:", "PREFIX", "b:"
                ]
            ),
            "+OK\\r\\n",
            "{who}"
        );
        // One command, one message per prefix, keys sorted.
        cmd(&mut w, &["MSET", "a:2", "1", "a:1", "1", "c:1", "1"]);
        assert_eq!(next(&mut t), inv(&["a:1", "a:2"]), "{who}");
        cmd(&mut w, &["SET", "b:x", "1"]);
        assert_eq!(next(&mut t), inv(&["b:x"]), "{who}");
        cmd(&mut w, &["SET", "c:2", "1"]);
        assert_quiet(&mut t, who);
        assert_eq!(info_field(&mut w, "tracking_total_prefixes"), "2", "{who}");
        // NOLOOP: keys this client changed are left out.
        cmd(&mut t, &["CLIENT", "TRACKING", "OFF"]);
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP"]);
        assert_eq!(cmd(&mut t, &["SET", "mine", "1"]), "+OK\\r\\n", "{who}");
        cmd(&mut w, &["SET", "theirs", "1"]);
        assert_eq!(next(&mut t), inv(&["theirs"]), "{who}");
        assert_quiet(&mut t, who);
        // Expiry is the server's change: told even to NOLOOP.
        cmd(&mut t, &["SET", "soon", "1", "PX", "50"]);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(next(&mut t), inv(&["soon"]), "{who}");
    });
}

#[test]
fn optin_caching_and_the_table_limit() {
    on_both(|port, who| {
        let mut t = resp3(port);
        let mut w = Resp::connect(port);
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "OPTIN"]);
        cmd(&mut t, &["GET", "no"]);
        assert_eq!(
            cmd(&mut t, &["CLIENT", "CACHING", "YES"]),
            "+OK\\r\\n",
            "{who}"
        );
        cmd(&mut t, &["GET", "yes"]);
        cmd(&mut w, &["MSET", "no", "1", "yes", "1"]);
        assert_eq!(next(&mut t), inv(&["yes"]), "{who}");
        assert_quiet(&mut t, who);
        // tracking-table-max-keys: over it, keys are invalidated until it holds.
        cmd(&mut t, &["CLIENT", "TRACKING", "OFF"]);
        cmd(&mut t, &["CLIENT", "TRACKING", "ON"]);
        cmd(&mut t, &["MGET", "k1", "k2", "k3"]);
        assert_eq!(info_field(&mut w, "tracking_total_keys"), "3", "{who}");
        cmd(&mut w, &["CONFIG", "SET", "tracking-table-max-keys", "1"]);
        for _ in 0..2 {
            let f = next(&mut t);
            assert!(
                f.starts_with(">2\\r\\n$10\\r\\ninvalidate\\r\\n*1\\r\\n$2\\r\\nk"),
                "{who}: {f}"
            );
        }
        assert_eq!(info_field(&mut w, "tracking_total_keys"), "1", "{who}");
    });
}

/// Through the proxy of a 2-engine fleet: a RESP3 client's tracking is on at every engine
/// (its own connections), keys on both engines are told by push on the client's connection,
/// FLUSHALL's null comes from every engine, and REDIRECT to a client that is not connected
/// gets Redis's error.
#[test]
fn through_the_proxy_resp3() {
    let fleet = Fleet::start("tracking", 2);
    let port = fleet.proxy_port;
    let mut t = resp3(port);
    let mut w = Resp::connect(port);
    assert_eq!(cmd(&mut t, &["CLIENT", "TRACKING", "ON"]), "+OK\\r\\n");
    assert_eq!(cmd(&mut t, &["CLIENT", "GETREDIR"]), ":0\\r\\n");
    // Keys spread over both engines (no hash tags), read one by one.
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for k in &keys {
        cmd(&mut w, &["SET", k, "1"]);
        assert_eq!(cmd(&mut t, &["GET", k]), "$1\\r\\n1\\r\\n");
    }
    for k in &keys {
        cmd(&mut w, &["SET", k, "2"]);
    }
    let mut told: Vec<String> = (0..keys.len()).map(|_| next(&mut t)).collect();
    told.sort();
    let mut want: Vec<String> = keys.iter().map(|k| inv(&[k])).collect();
    want.sort();
    assert_eq!(told, want);
    assert_quiet(&mut t, "proxy");
    // An MGET over both engines is tracked on each.
    let all: Vec<&str> = ["MGET"]
        .into_iter()
        .chain(keys.iter().map(String::as_str))
        .collect();
    assert!(cmd(&mut t, &all).starts_with("*8\\r\\n"));
    cmd(&mut w, &["DEL", "k1", "k2", "k3"]);
    let mut told: Vec<String> = (0..3).map(|_| next(&mut t)).collect();
    told.sort();
    assert_eq!(told, vec![inv(&["k1"]), inv(&["k2"]), inv(&["k3"])]);
    // A write by the client itself: the reply first, then the push.
    cmd(&mut t, &["GET", "k0"]);
    assert_eq!(cmd(&mut t, &["SET", "k0", "3"]), "+OK\\r\\n");
    assert_eq!(next(&mut t), inv(&["k0"]));
    // FLUSHALL: each engine tells its null.
    cmd(&mut w, &["FLUSHALL"]);
    for _ in 0..2 {
        assert_eq!(next(&mut t), ">2\\r\\n$10\\r\\ninvalidate\\r\\n_\\r\\n");
    }
    // REDIRECT names a proxy client; one that is not connected gets Redis's error.
    assert_eq!(
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]),
        "-ERR The client ID you want redirect to does not exist\\r\\n"
    );
    assert_eq!(cmd(&mut t, &["CLIENT", "TRACKING", "OFF"]), "+OK\\r\\n");
    cmd(&mut t, &["GET", "k1"]);
    cmd(&mut w, &["SET", "k1", "4"]);
    assert_quiet(&mut t, "proxy");
}

/// Through the proxy of a 2-engine fleet, a RESP2 client tracks with REDIRECT to another
/// proxy client subscribed to `__redis__:invalidate` (issue 19: "a RESP2 redirect client"):
/// the ids are the proxy's (CLIENT ID, GETREDIR, TRACKINGINFO), invalidations of keys on both
/// engines reach the redirect client once each, FLUSHDB's null comes from every engine, and a
/// PUBLISH on that channel is delivered once.
#[test]
fn through_the_proxy_resp2_redirect() {
    let fleet = Fleet::start("tracking-redirect", 2);
    let port = fleet.proxy_port;
    let mut r = Resp::connect(port);
    let id = client_id(&mut r);
    assert_eq!(
        cmd(&mut r, &["SUBSCRIBE", "__redis__:invalidate"]),
        "*3\\r\\n$9\\r\\nsubscribe\\r\\n$20\\r\\n__redis__:invalidate\\r\\n:1\\r\\n"
    );
    let mut t = Resp::connect(port);
    let mut w = Resp::connect(port);
    assert_eq!(
        cmd(&mut t, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]),
        "+OK\\r\\n"
    );
    assert_eq!(cmd(&mut t, &["CLIENT", "GETREDIR"]), format!(":{id}\\r\\n"));
    assert_eq!(
        cmd(&mut t, &["CLIENT", "TRACKINGINFO"]),
        format!(
            "*6\\r\\n$5\\r\\nflags\\r\\n*1\\r\\n$2\\r\\non\\r\\n\
             $8\\r\\nredirect\\r\\n:{id}\\r\\n$8\\r\\nprefixes\\r\\n*0\\r\\n"
        )
    );
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for k in &keys {
        cmd(&mut w, &["SET", k, "1"]);
        assert_eq!(cmd(&mut t, &["GET", k]), "$1\\r\\n1\\r\\n");
    }
    for &p in &fleet.engine_ports {
        let n = cmd(&mut Resp::connect(p), &["DBSIZE"]);
        assert_ne!(n, ":0\\r\\n", "keys on both engines");
    }
    for k in &keys {
        cmd(&mut w, &["SET", k, "2"]);
    }
    let mut told: Vec<String> = (0..keys.len()).map(|_| next(&mut r)).collect();
    told.sort();
    let mut want: Vec<String> = keys.iter().map(|k| inv_msg(&[k])).collect();
    want.sort();
    assert_eq!(told, want);
    assert_quiet(&mut r, "redirect client");
    assert_quiet(&mut t, "tracking client");
    // FLUSHDB: a null from each engine.
    cmd(&mut t, &["GET", "k1"]);
    cmd(&mut w, &["FLUSHDB"]);
    for _ in 0..2 {
        assert_eq!(
            next(&mut r),
            "*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n$-1\\r\\n"
        );
    }
    // A PUBLISH on the channel: once, although the client listens on every engine.
    assert_eq!(
        cmd(&mut w, &["PUBLISH", "__redis__:invalidate", "hi"]),
        ":1\\r\\n"
    );
    assert_eq!(
        next(&mut r),
        "*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n$2\\r\\nhi\\r\\n"
    );
    assert_quiet(&mut r, "redirect client after PUBLISH");
    assert_eq!(cmd(&mut t, &["CLIENT", "TRACKING", "OFF"]), "+OK\\r\\n");
    assert_eq!(cmd(&mut t, &["CLIENT", "GETREDIR"]), ":-1\\r\\n");
}
