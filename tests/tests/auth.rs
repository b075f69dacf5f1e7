//! Authentication end to end (issue 8): a `recached start --engines 2` fleet whose config sets
//! `requirepass` and an ACL user limited to `~app:*`, then raw RESP, redis-cli and redis-py
//! against the proxy and the engines directly; and protected mode inside a network namespace
//! of its own (the only non-loopback address these tests use), with redis-server 7.0.15's
//! refusal text compared byte for byte.
//!
//! The AUTH/ACL error texts are checked against redis-server by tests/diff/auth.txt.
//! Cleanup: the fleet's Drop SIGKILLs the supervisor by PID, then every child PID listed in
//! `dir/state.toml`; every wait and client run is bounded in time.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine_core::slot::instance_for_key;

const CONFIG: &str = r#"
requirepass = "sec-pass"

[[users]]
name = "app"
rules = "on >app-pass ~app:* +@all"

[[users]]
name = "reader"
rules = "on >read-pass ~* +@read"
"#;

fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("authtest-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A key starting with `prefix` that engine `owner` (of 2) owns.
fn key_on(owner: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| instance_for_key(k.as_bytes(), 2) == owner)
        .unwrap()
}

fn s(reply: Vec<u8>) -> String {
    String::from_utf8_lossy(&reply).into_owned()
}

const NOAUTH: &str = "-NOAUTH Authentication required.\r\n";
const WRONGPASS: &str = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
const NOPERM_KEY: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

#[test]
fn every_port_requires_auth_and_key_patterns_hold_through_proxy_and_engines() {
    let fleet = Fleet::start_with("auth", 2, Some(CONFIG), &[]);
    let ports: Vec<u16> = std::iter::once(fleet.proxy_port)
        .chain(fleet.engine_ports.iter().copied())
        .collect();

    // Every port refuses an unauthenticated client, and a wrong password.
    for &p in &ports {
        let mut c = Resp::connect(p);
        assert_eq!(s(c.cmd_str(&["GET", "app:1"])), NOAUTH, "port {p}");
        assert_eq!(s(c.cmd_str(&["SET", "x", "1"])), NOAUTH, "port {p}");
        assert_eq!(s(c.cmd_str(&["AUTH", "wrong"])), WRONGPASS, "port {p}");
        assert_eq!(
            s(c.cmd_str(&["AUTH", "app", "wrong"])),
            WRONGPASS,
            "port {p}"
        );
        assert!(
            s(c.cmd_str(&["HELLO", "2"])).starts_with("-NOAUTH HELLO must be called"),
            "port {p}"
        );
        assert_eq!(s(c.cmd_str(&["AUTH", "sec-pass"])), "+OK\r\n", "port {p}");
        assert_eq!(s(c.cmd_str(&["PING"])), "+PONG\r\n", "port {p}");
    }

    // The `app` user through the proxy: app:* only, reads and writes.
    let mut app = Resp::connect(fleet.proxy_port);
    assert_eq!(s(app.cmd_str(&["AUTH", "app", "app-pass"])), "+OK\r\n");
    assert_eq!(s(app.cmd_str(&["ACL", "WHOAMI"])), "$3\r\napp\r\n");
    for i in 0..20 {
        // Keys on both engines: the proxy's internal credential reaches each of them.
        let k = format!("app:{i}");
        assert_eq!(s(app.cmd_str(&["SET", &k, "v"])), "+OK\r\n", "{k}");
    }
    assert_eq!(s(app.cmd_str(&["GET", "app:3"])), "$1\r\nv\r\n");
    assert_eq!(s(app.cmd_str(&["GET", "other:1"])), NOPERM_KEY);
    assert_eq!(s(app.cmd_str(&["SET", "other:1", "x"])), NOPERM_KEY);
    assert_eq!(s(app.cmd_str(&["MGET", "app:1", "other:1"])), NOPERM_KEY);
    assert_eq!(s(app.cmd_str(&["DEL", "other:1"])), NOPERM_KEY);
    assert_eq!(
        s(app.cmd_str(&["MGET", "app:1", "app:2"])),
        "*2\r\n$1\r\nv\r\n$1\r\nv\r\n"
    );
    // Inside MULTI a refused command aborts the transaction, as in Redis.
    assert_eq!(s(app.cmd_str(&["MULTI"])), "+OK\r\n");
    assert_eq!(s(app.cmd_str(&["SET", "other:2", "x"])), NOPERM_KEY);
    assert!(s(app.cmd_str(&["EXEC"])).starts_with("-EXECABORT"));

    // The same user on each engine directly (ACL runs before the cluster redirect).
    for (i, &p) in fleet.engine_ports.iter().enumerate() {
        let mut c = Resp::connect(p);
        assert_eq!(s(c.cmd_str(&["AUTH", "app", "app-pass"])), "+OK\r\n");
        let own = key_on(i as u32, "app:direct:");
        assert_eq!(s(c.cmd_str(&["SET", &own, "d"])), "+OK\r\n", "engine {i}");
        assert_eq!(s(c.cmd_str(&["GET", &own])), "$1\r\nd\r\n", "engine {i}");
        assert_eq!(
            s(c.cmd_str(&["GET", &key_on(i as u32, "other:")])),
            NOPERM_KEY
        );
        assert_eq!(
            s(c.cmd_str(&["SET", &key_on(i as u32, "other:"), "x"])),
            NOPERM_KEY
        );
        assert_eq!(
            s(c.cmd_str(&["GET", &key_on(1 - i as u32, "other:")])),
            NOPERM_KEY
        );
    }

    // A read-only user: GET anything, no writes.
    let mut reader = Resp::connect(fleet.proxy_port);
    assert_eq!(
        s(reader.cmd_str(&["AUTH", "reader", "read-pass"])),
        "+OK\r\n"
    );
    assert_eq!(s(reader.cmd_str(&["GET", "app:3"])), "$1\r\nv\r\n");
    assert_eq!(
        s(reader.cmd_str(&["SET", "app:3", "w"])),
        "-NOPERM this user has no permissions to run the 'set' command\r\n"
    );

    // redis-cli: -a (default user) and --user/--pass, proxy and engine (-c follows MOVED and
    // authenticates on the node it is sent to).
    let cli = |port: u16, args: &[&str]| redis_cli(port, args).trim().to_string();
    let pa = ["--no-auth-warning", "-a", "sec-pass"];
    let ua = ["--no-auth-warning", "--user", "app", "--pass", "app-pass"];
    assert_eq!(
        cli(
            fleet.proxy_port,
            &[&pa[..], &["SET", "cli:1", "a"]].concat()
        ),
        "OK"
    );
    assert_eq!(
        cli(fleet.proxy_port, &[&pa[..], &["GET", "cli:1"]].concat()),
        "a"
    );
    assert_eq!(
        cli(fleet.proxy_port, &[&ua[..], &["GET", "app:3"]].concat()),
        "v"
    );
    let e0 = fleet.engine_ports[0];
    assert_eq!(
        cli(e0, &[&ua[..], &["-c", "SET", "app:cli", "c"]].concat()),
        "OK"
    );
    assert_eq!(cli(e0, &[&ua[..], &["-c", "GET", "app:cli"]].concat()), "c");
    assert!(
        cli(e0, &[&ua[..], &["-c", "GET", "other:cli"]].concat()).contains("NOPERM"),
        "redis-cli as app reading other:*"
    );
    assert!(cli(e0, &["GET", "app:cli"]).contains("NOAUTH"));

    // redis-py with username/password and with a password only, against the proxy and an
    // engine; a wrong password raises AuthenticationError.
    let python = workspace_root().join("tests/cluster/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs redis-py into tests/cluster/.venv)",
        python.display()
    );
    let own0 = key_on(0, "app:py:");
    let script = format!(
        r#"
import redis, sys
proxy, engine = {proxy}, {engine}
r = redis.Redis(port=proxy, username="app", password="app-pass", socket_timeout=5)
r.set("app:py", "1"); assert r.get("app:py") == b"1"
try:
    r.get("other:py"); sys.exit("app read other:py")
except redis.exceptions.NoPermissionError:
    pass
d = redis.Redis(port=proxy, password="sec-pass", socket_timeout=5)
assert d.get("app:py") == b"1" and d.ping()
e = redis.Redis(port=engine, username="app", password="app-pass", socket_timeout=5)
e.set("{own0}", "2"); assert e.get("{own0}") == b"2"
try:
    redis.Redis(port=proxy, username="app", password="nope", socket_timeout=5).ping()
    sys.exit("wrong password accepted")
except redis.exceptions.AuthenticationError:
    pass
try:
    redis.Redis(port=engine, socket_timeout=5).get("app:py")
    sys.exit("no password accepted")
except redis.exceptions.AuthenticationError:
    pass
print("ok")
"#,
        proxy = fleet.proxy_port,
        engine = e0,
    );
    let res = run_cmd(
        Command::new(&python).args(["-c", &script]),
        Duration::from_secs(60),
    );
    let (ok, out) = (res.ok, res.text());
    assert!(ok && out.contains("ok"), "redis-py: {out}");

    // Failed attempts are counted in INFO and logged by the engine, without the password.
    let mut c = Resp::connect(e0);
    assert_eq!(
        s(c.cmd_str(&["AUTH", "app", "not-the-password"])),
        WRONGPASS
    );
    assert_eq!(s(c.cmd_str(&["AUTH", "sec-pass"])), "+OK\r\n");
    let info = s(c.cmd_str(&["INFO", "stats"]));
    let denied: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("acl_access_denied_auth:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no acl_access_denied_auth in {info}"));
    assert!(denied >= 2, "{info}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = fleet.engine_log(0);
        if log.contains("Failed AUTH for user 'app'") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        log.contains("Failed AUTH for user 'app' from 127.0.0.1:"),
        "{log}"
    );
    assert!(
        !log.contains("not-the-password") && !log.contains("app-pass"),
        "{log}"
    );
    // ACL LOG has the entry too.
    let acl_log = s(c.cmd_str(&["ACL", "LOG", "1"]));
    assert!(
        acl_log.contains("auth") && acl_log.contains("AUTH"),
        "{acl_log}"
    );
}

/// Protected mode, in a network namespace of our own: an engine and a redis-server bound to
/// 0.0.0.0 with no password; a client from 10.200.0.1 (non-loopback) gets Redis's -DENIED
/// text (compared with redis-server's), one from 127.0.0.1 is served; with a password set the
/// remote client is served after AUTH.
#[test]
fn protected_mode_refuses_remote_clients_like_redis() {
    let probe = Command::new("unshare")
        .args(["-rn", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot create a network namespace (unshare -rn)");
        return;
    }
    let dir = temp_dir("protected");
    let (port, rport) = (16379, 16380); // inside the new namespace: nothing else listens there
    let script = format!(
        r#"
set -u
ip link set lo up && ip addr add 10.200.0.1/32 dev lo || exit 3
timeout 30 {bin} server --port {port} --bind 0.0.0.0 > {dir}/engine.log 2>&1 &
EPID=$!
timeout 30 redis-server --port {rport} --bind 0.0.0.0 --save '' --appendonly no > {dir}/redis.log 2>&1 &
RPID=$!
for i in $(seq 1 100); do
  redis-cli -p {port} ping >/dev/null 2>&1 && redis-cli -p {rport} ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -h 10.200.0.1 -p {port} ping > {dir}/engine-remote.txt 2>&1
redis-cli -h 10.200.0.1 -p {rport} ping > {dir}/redis-remote.txt 2>&1
redis-cli -h 127.0.0.1 -p {port} ping > {dir}/engine-local.txt 2>&1
redis-cli -h 127.0.0.1 -p {port} config set requirepass pw > /dev/null 2>&1
redis-cli -h 10.200.0.1 -p {port} --no-auth-warning -a pw ping > {dir}/engine-remote-auth.txt 2>&1
kill $EPID $RPID
wait
"#,
        bin = recached_bin().display(),
        dir = dir.display(),
    );
    let res = run_cmd(
        Command::new("unshare").args(["-rn", "sh", "-c", &script]),
        Duration::from_secs(60),
    );
    let (ok, out) = (res.ok, res.text());
    assert!(ok, "namespace script failed: {out}");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let ours = read("engine-remote.txt");
    assert!(
        ours.contains("DENIED Redis is running in protected mode"),
        "engine: {ours}\nlog: {}",
        read("engine.log")
    );
    assert_eq!(
        ours,
        read("redis-remote.txt"),
        "the refusal differs from redis-server's"
    );
    assert_eq!(read("engine-local.txt").trim(), "PONG");
    assert_eq!(read("engine-remote-auth.txt").trim(), "PONG");
    let _ = std::fs::remove_dir_all(&dir);
}
