//! RESP3 through the proxy: a client that said `HELLO 3` to the proxy (in front of two
//! redis-servers) gets, byte for byte, what the same client gets from one redis-server
//! holding the same data (the reference), apart from the connection id.

mod common;

use std::thread;
use std::time::Duration;

use common::*;

/// The fleet, a reference redis-server, and RESP3 connections to both.
struct Pair {
    fleet: Fleet,
    reference: Redis,
    proxy: Conn,
    direct: Conn,
}

impl Pair {
    fn start() -> Pair {
        let fleet = Fleet::start();
        let reference = Redis::start_free();
        let mut proxy = fleet.conn();
        let mut direct = Conn::connect(reference.port);
        let (p, d) = (proxy.cmd(&["HELLO", "3"]), direct.cmd(&["HELLO", "3"]));
        assert_eq!(
            without_id(&p),
            without_id(&d),
            "{} vs {}",
            text(&p),
            text(&d)
        );
        Pair {
            fleet,
            reference,
            proxy,
            direct,
        }
    }

    /// Sends `args` to both; asserts the replies are the same bytes and returns them.
    fn same(&mut self, args: &[&str]) -> Vec<u8> {
        let p = self.proxy.cmd(args);
        let d = self.direct.cmd(args);
        assert_eq!(text(&p), text(&d), "{args:?}");
        p
    }

    /// A second connection to each side, in RESP2.
    fn others(&self) -> (Conn, Conn) {
        (self.fleet.conn(), Conn::connect(self.reference.port))
    }
}

/// A HELLO reply with the value of `id` blanked (each server numbers its own clients).
fn without_id(reply: &[u8]) -> String {
    let t = text(reply);
    let Some(at) = t.find("$2\r\nid\r\n:") else {
        return t;
    };
    let start = at + "$2\r\nid\r\n:".len();
    let end = start + t[start..].find("\r\n").unwrap();
    format!("{}<id>{}", &t[..start], &t[end..])
}

#[test]
fn hello_3_switches_to_resp3_and_hello_4_is_refused() {
    let mut p = Pair::start();
    // The proxy's HELLO 3 is a map like redis-server's (checked in Pair::start).
    let hello = p.proxy.cmd(&["HELLO", "3"]);
    assert!(hello.starts_with(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"));
    assert!(text(&hello).contains("$5\r\nproto\r\n:3\r\n"));
    // HELLO without a version answers in the current protocol.
    let (a, b) = (p.proxy.cmd(&["HELLO"]), p.direct.cmd(&["HELLO"]));
    assert_eq!(without_id(&a), without_id(&b));
    p.same(&["HELLO", "4"]);
    assert_eq!(
        p.proxy.cmd(&["HELLO", "4"]),
        b"-NOPROTO unsupported protocol version\r\n"
    );
    // Still RESP3 after the refused HELLO 4: a missing key is `_`.
    assert_eq!(p.same(&["GET", "nosuchkey"]), b"_\r\n");
    p.same(&["CLIENT", "GETNAME"]);
    let (a, b) = (
        p.proxy.cmd(&["HELLO", "3", "SETNAME", "app"]),
        p.direct.cmd(&["HELLO", "3", "SETNAME", "app"]),
    );
    assert_eq!(without_id(&a), without_id(&b));
    p.same(&["CLIENT", "GETNAME"]);
    // RESET returns to RESP2.
    p.same(&["RESET"]);
    assert_eq!(p.same(&["GET", "nosuchkey"]), b"$-1\r\n");
    let (mut q, _) = p.others();
    assert_eq!(
        q.cmd(&["HELLO", "4"]),
        b"-NOPROTO unsupported protocol version\r\n"
    );
}

#[test]
fn replies_keep_their_resp3_types() {
    let mut p = Pair::start();
    let (a, b) = (key_on(0, "k"), key_on(1, "k"));
    let (h, s, z) = (key_on(1, "h"), key_on(0, "s"), key_on(1, "z"));
    p.same(&["SET", &a, "1"]);
    p.same(&["SET", &b, "2"]);
    assert_eq!(p.same(&["GET", &a]), bulk("1"));
    assert!(p.same(&["HGETALL", &h]).starts_with(b"%0"));
    p.same(&["HSET", &h, "f", "v", "g", "w"]);
    assert!(p.same(&["HGETALL", &h]).starts_with(b"%2\r\n"));
    p.same(&["SADD", &s, "m"]);
    assert_eq!(p.same(&["SMEMBERS", &s]), b"~1\r\n$1\r\nm\r\n");
    p.same(&["ZADD", &z, "1.5", "m"]);
    assert_eq!(p.same(&["ZSCORE", &z, "m"]), b",1.5\r\n");
    assert_eq!(p.same(&["ZSCORE", &z, "none"]), b"_\r\n");
    p.same(&["HEXISTS", &h, "f"]);
    p.same(&["OBJECT", "FREQ", &a]);
    // MGET across both instances, with missing keys on each: `_` nulls.
    let (ma, mb) = (key_on(0, "missing"), key_on(1, "missing"));
    assert_eq!(
        p.same(&["MGET", &a, &ma, &b, &mb]),
        b"*4\r\n$1\r\n1\r\n_\r\n$1\r\n2\r\n_\r\n"
    );
    assert_eq!(p.same(&["MSET", &a, "3", &b, "4"]), b"+OK\r\n");
    assert_eq!(p.same(&["EXISTS", &a, &b, &ma]), int(2));
    assert_eq!(p.same(&["DEL", &a, &b, &ma, &mb]), int(2));
    p.same(&["DBSIZE"]);
    p.same(&["KEYS", "nomatch*"]);
    assert_eq!(p.proxy.cmd(&["RANDOMKEY"]).first(), Some(&b'$'));
    // Errors are the same text in both protocols.
    p.same(&["GET", &h]);
    p.same(&["NOSUCHCOMMAND", "x"]);
    p.same(&["GET"]);
    p.same(&["PING"]);
    p.same(&["PING", "hi"]);
    p.same(&["ECHO", "hi"]);
    // INFO: a verbatim string (`=`), as redis-server sends a RESP3 client.
    let info = p.proxy.cmd(&["INFO", "keyspace"]);
    let direct = p.direct.cmd(&["INFO", "keyspace"]);
    assert!(direct.starts_with(b"="), "{}", text(&direct));
    assert!(info.starts_with(b"="), "{}", text(&info));
    let (pi, di) = (text(&info), text(&direct));
    let body = |t: &str| t.split_once("\r\n").unwrap().1.to_string();
    assert!(body(&pi).starts_with("txt:"), "{pi}");
    assert!(body(&di).starts_with("txt:"), "{di}");
    assert!(pi.contains("db0:keys=3,"), "{pi}");
    assert!(di.contains("db0:keys=3,"), "{di}");
    // A RESP2 client at the same time sees RESP2.
    let (mut q, mut r) = p.others();
    assert_eq!(q.cmd(&["HGETALL", &h]), r.cmd(&["HGETALL", &h]));
    assert!(q.cmd(&["HGETALL", &h]).starts_with(b"*4\r\n"));
    assert_eq!(q.cmd(&["ZSCORE", &z, "m"]), bulk("1.5"));
    assert_eq!(q.cmd(&["GET", "nosuchkey"]), b"$-1\r\n");
}

#[test]
fn scan_and_randomkey_in_resp3() {
    let mut p = Pair::start();
    // An empty fleet: RANDOMKEY's null is RESP3's.
    assert_eq!(p.same(&["RANDOMKEY"]), b"_\r\n");
    // SCAN through a proxy in front of the reference alone: the cursor is the instance's.
    let solo = Proxy::start(&[p.reference.port]);
    let mut c = Conn::connect(solo.port);
    c.cmd(&["HELLO", "3"]);
    for k in ["a", "b", "c"] {
        p.direct.cmd(&["SET", k, "1"]);
    }
    let d = p.direct.cmd(&["SCAN", "0", "COUNT", "100"]);
    assert_eq!(text(&c.cmd(&["SCAN", "0", "COUNT", "100"])), text(&d));
    // Over two instances: every key once, cursor and array as RESP3 sends them.
    let keys: Vec<String> = (0..20).map(|i| format!("scan:{i}")).collect();
    for k in &keys {
        p.proxy.cmd(&["SET", k, "1"]);
    }
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    for _ in 0..100 {
        let reply = p.proxy.cmd(&["SCAN", &cursor, "MATCH", "scan:*"]);
        assert!(reply.starts_with(b"*2\r\n$"), "{}", text(&reply));
        let Ok(Some((resp::Value::Array(v), _))) = resp::decode(&reply) else {
            panic!("{}", text(&reply));
        };
        let (resp::Value::Bulk(next), resp::Value::Array(found)) = (&v[0], &v[1]) else {
            panic!("{}", text(&reply));
        };
        for f in found {
            let resp::Value::Bulk(k) = f else { panic!() };
            seen.push(String::from_utf8(k.clone()).unwrap());
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    seen.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(seen, want);
}

#[test]
fn pubsub_messages_are_push_frames_between_replies() {
    let mut p = Pair::start();
    let ch = key_on(1, "ch");
    let (mut pub_p, mut pub_d) = p.others();
    let confirm = p.same(&["SUBSCRIBE", &ch]);
    assert!(
        confirm.starts_with(b">3\r\n$9\r\nsubscribe\r\n"),
        "{}",
        text(&confirm)
    );
    // Subscribed RESP3 clients keep the full command set; PING is +PONG, not the array.
    assert_eq!(p.same(&["PING"]), b"+PONG\r\n");
    let k = key_on(0, "k");
    p.same(&["SET", &k, "v"]);
    assert_eq!(p.same(&["GET", &k]), bulk("v"));
    assert_eq!(pub_p.cmd(&["PUBLISH", &ch, "hi"]), int(1));
    assert_eq!(pub_d.cmd(&["PUBLISH", &ch, "hi"]), int(1));
    let (m, n) = (p.proxy.reply(), p.direct.reply());
    assert_eq!(text(&m), text(&n));
    assert!(m.starts_with(b">3\r\n$7\r\nmessage\r\n"), "{}", text(&m));
    // A message and a reply on the same connection: each frame as Redis sends it.
    assert_eq!(p.same(&["PING"]), b"+PONG\r\n");
    p.same(&["PSUBSCRIBE", "c*"]);
    assert_eq!(pub_p.cmd(&["PUBLISH", &ch, "two"]), int(2));
    assert_eq!(pub_d.cmd(&["PUBLISH", &ch, "two"]), int(2));
    let mut got_p = vec![text(&p.proxy.reply()), text(&p.proxy.reply())];
    let mut got_d = vec![text(&p.direct.reply()), text(&p.direct.reply())];
    // The channel's instance and the pattern's come over different connections.
    got_p.sort();
    got_d.sort();
    assert_eq!(got_p, got_d);
    p.same(&["PUNSUBSCRIBE"]);
    p.same(&["UNSUBSCRIBE"]);
    p.same(&["UNSUBSCRIBE"]);
    assert_eq!(p.same(&["ZSCORE", "nokey", "m"]), b"_\r\n");
}

#[test]
fn blocking_and_transactions_speak_resp3() {
    let mut p = Pair::start();
    let list = key_on(1, "list");
    // A timed-out BLPOP: RESP3's null.
    assert_eq!(p.same(&["BLPOP", &list, "0.1"]), b"_\r\n");
    // BLPOP woken by another client.
    let (mut q, mut r) = p.others();
    p.proxy.send(&["BLPOP", &list, "5"]);
    p.direct.send(&["BLPOP", &list, "5"]);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(q.cmd(&["RPUSH", &list, "x"]), int(1));
    assert_eq!(r.cmd(&["RPUSH", &list, "x"]), int(1));
    let (a, b) = (p.proxy.reply(), p.direct.reply());
    assert_eq!(text(&a), text(&b));
    assert_eq!(
        a,
        format!("*2\r\n{}{}", text(&bulk(&list)), text(&bulk("x"))).as_bytes()
    );
    // MULTI/EXEC on one instance, with RESP3 types inside EXEC's reply.
    let t = format!("{{{}}}", key_on(0, "t"));
    let (h, z) = (format!("{t}h"), format!("{t}z"));
    p.same(&["MULTI"]);
    p.same(&["HSET", &h, "f", "v"]);
    p.same(&["ZADD", &z, "2.5", "m"]);
    p.same(&["HGETALL", &h]);
    p.same(&["ZSCORE", &z, "m"]);
    p.same(&["GET", &format!("{t}none")]);
    let exec = p.same(&["EXEC"]);
    assert!(
        text(&exec).contains("%1\r\n$1\r\nf\r\n$1\r\nv\r\n,2.5\r\n_\r\n"),
        "{}",
        text(&exec)
    );
    // WATCH, then a read on the watched instance, then EXEC.
    p.same(&["WATCH", &h]);
    p.same(&["HGETALL", &h]);
    p.same(&["MULTI"]);
    p.same(&["ZSCORE", &z, "none"]);
    p.same(&["EXEC"]);
}

/// A redis-server with `requirepass`, killed by PID on drop.
struct Locked(Redis);

impl Locked {
    fn start(pass: &str) -> Locked {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--requirepass", pass])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let r = Redis { port, child };
        wait_for(Duration::from_secs(10), || {
            let mut c = Conn::try_connect(port)?;
            (c.try_cmd(&["AUTH", pass])? == b"+OK\r\n").then_some(())
        })
        .expect("redis-server did not start");
        Locked(r)
    }
}

#[test]
fn hello_3_auth_through_a_proxy_that_logs_in_to_its_instances() {
    let redis = [Locked::start("inner"), Locked::start("inner")];
    let port = free_port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opts = recached_proxy::ProxyOptions {
        memcached_port: 0,
        memcached_tls_port: 0,
        memcached_user: None,
        port,
        bind: "127.0.0.1".into(),
        backends: redis
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.0.port))
            .collect(),
        tls: Default::default(),
        limits: Default::default(),
        auth: recached_proxy::auth::ProxyAuth {
            acl: engine_core::acl::AclConfig {
                requirepass: b"outer".to_vec(),
                ..Default::default()
            },
            backend: Some(("default".into(), "inner".into())),
        },
    };
    let flag = std::sync::Arc::clone(&stop);
    let proxy = thread::spawn(move || recached_proxy::run_until(opts, flag));
    let mut c = wait_for(Duration::from_secs(10), || {
        let mut c = Conn::try_connect(port)?;
        (c.try_cmd(&["PING"])?.starts_with(b"-NOAUTH")).then_some(c)
    })
    .expect("proxy did not start");
    assert!(
        c.cmd(&["HELLO", "3"])
            .starts_with(b"-NOAUTH HELLO must be called")
    );
    assert!(
        c.cmd(&["HELLO", "3", "AUTH", "default", "wrong"])
            .starts_with(b"-WRONGPASS")
    );
    let hello = c.cmd(&["HELLO", "3", "AUTH", "default", "outer"]);
    assert!(hello.starts_with(b"%7\r\n"), "{}", text(&hello));
    // The RESP3 links and the dedicated connection logged in, then said HELLO 3.
    let (h, l) = (key_on(0, "h"), key_on(1, "l"));
    assert_eq!(c.cmd(&["HSET", &h, "f", "v"]), int(1));
    assert_eq!(c.cmd(&["HGETALL", &h]), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    assert_eq!(c.cmd(&["GET", &l]), b"_\r\n");
    assert_eq!(c.cmd(&["BLPOP", &l, "0.1"]), b"_\r\n");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    proxy.join().unwrap().unwrap();
}
