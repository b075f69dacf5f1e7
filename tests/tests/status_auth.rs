//! `recached status` against a fleet with passwords (issue 8): a `recached start --engines 2`
//! fleet (and its fan-out) whose config sets `requirepass` and an ACL user; engines and the
//! proxy answer an unauthenticated PING with `-NOAUTH`, so status authenticates:
//!
//! - with nothing given, from the config's `requirepass` — the config named by `--config`,
//!   or with only `--dir` the one the fleet runs with (found in an engine's command line);
//! - from `REDISCLI_AUTH`, or `--user`/`--pass`, as redis-cli;
//! - a wrong password: every child still reported up (it answered), no keys or memory, a
//!   note on stderr;
//!
//! and never prints a password. The supervisor's `/metrics` reads the same children with the
//! fleet's internal credential (keys counted, no password in the output). Cleanup: the fleet's Drop SIGKILLs the supervisor by PID,
//! then every child PID listed in `dir/state.toml`; every wait is bounded in time.

mod common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const FLEET_START: Duration = Duration::from_secs(30);
const PASSWORD: &str = "status-secret-91f3";
const APP_PASSWORD: &str = "app-secret-5d2c";
const KEYS: usize = 25;

struct Fleet {
    sup: Proc,
    dir: PathBuf,
    config: PathBuf,
    proxy_port: u16,
    engine_ports: Vec<u16>,
    fanout_port: u16,
    metrics_port: u16,
}

impl Fleet {
    fn start(name: &str) -> Fleet {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = free_port_run(3);
        let fanout_port = free_port_except(&[base, base + 1, base + 2]);
        let metrics_port = free_port_except(&[base, base + 1, base + 2, fanout_port]);
        let config = dir.join("recached.toml");
        // The data dir comes from the file, so `status --config` finds the fleet.
        std::fs::write(
            &config,
            format!(
                "dir = {:?}\nrequirepass = \"{PASSWORD}\"\n\n[[users]]\nname = \"app\"\n\
                 rules = \"on >{APP_PASSWORD} ~app:* +@all\"\n",
                dir.join("data").display().to_string()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .args(["--engines", "2", "--bind", "127.0.0.1"])
            .args(["--proxy-port", &(base + 2).to_string()])
            .args(["--engine-port-base", &base.to_string()])
            .args(["--fanout-port", &fanout_port.to_string()])
            .args(["--metrics-port", &metrics_port.to_string()])
            .arg("--config")
            .arg(&config)
            .env_remove("REDISCLI_AUTH");
        let mut sup = Proc::spawn("status-auth-fleet", cmd);
        for p in [base, base + 1, base + 2, fanout_port, metrics_port] {
            sup.wait_port(p, FLEET_START);
        }
        Fleet {
            sup,
            dir,
            config,
            proxy_port: base + 2,
            engine_ports: vec![base, base + 1],
            fanout_port,
            metrics_port,
        }
    }

    /// `recached status --json <args>` with `env`; (exit code, JSON, stderr).
    fn status(&self, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
        let mut cmd = Command::new(recached_bin());
        cmd.arg("status")
            .arg("--json")
            .args(args)
            .env_remove("REDISCLI_AUTH");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run_cmd(&mut cmd, Duration::from_secs(20));
        for secret in [PASSWORD, APP_PASSWORD, "wrong-one"] {
            assert!(
                !out.text().contains(secret),
                "status printed a password:\n{}",
                out.text()
            );
        }
        let json: Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("status --json: {e}:\n{}", out.text()));
        (out.code, json, out.stderr)
    }

    fn dir_arg(&self) -> String {
        self.dir.join("data").display().to_string()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        teardown_fleet(&mut self.sup, &self.dir.join("data/state.toml"), &self.dir);
    }
}

/// The row of `role` (e.g. `engine-0`) in status' JSON.
fn row<'a>(json: &'a Value, role: &str) -> &'a Value {
    json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["role"] == role)
        .unwrap_or_else(|| panic!("no {role} in {json}"))
}

/// Every engine and the proxy up with keys and memory; the keys add up to [`KEYS`].
fn assert_full(json: &Value, f: &Fleet) {
    let mut total = 0;
    for (i, port) in f.engine_ports.iter().enumerate() {
        let r = row(json, &format!("engine-{i}"));
        assert_eq!(r["port"], *port, "{r}");
        assert_eq!(r["state"], "up", "{r}");
        total += r["keys"].as_u64().unwrap_or_else(|| panic!("no keys: {r}"));
        assert!(r["used_memory"].as_u64().unwrap_or(0) > 0, "no memory: {r}");
    }
    assert_eq!(total, KEYS as u64, "{json}");
    let p = row(json, "proxy-0");
    assert_eq!(p["port"], f.proxy_port);
    assert_eq!(
        (p["state"].as_str(), p["keys"].as_u64()),
        (Some("up"), Some(KEYS as u64)),
        "{p}"
    );
    let fan = row(json, "fanout-0");
    assert_eq!(fan["port"], f.fanout_port);
    assert_eq!(fan["state"], "up", "{fan}");
}

#[test]
fn status_authenticates_and_never_prints_the_password() {
    let f = Fleet::start("status-auth");
    let mut c = Resp::connect(f.proxy_port);
    assert_eq!(
        cmd(&mut c, &["PING"]),
        "-NOAUTH Authentication required.\\r\\n"
    );
    assert_eq!(cmd(&mut c, &["AUTH", PASSWORD]), "+OK\\r\\n");
    for i in 0..KEYS {
        assert_eq!(cmd(&mut c, &["SET", &format!("k:{i}"), "v"]), "+OK\\r\\n");
    }

    // From the config the fleet runs with: named by --config, or found from --dir alone.
    let (code, json, stderr) = f.status(&["--config", f.config.to_str().unwrap()], &[]);
    assert_eq!(code, Some(0), "{json}\n{stderr}");
    assert_full(&json, &f);
    let (code, json, stderr) = f.status(&["--dir", &f.dir_arg()], &[]);
    assert_eq!(code, Some(0), "{json}\n{stderr}");
    assert_full(&json, &f);
    assert!(stderr.is_empty(), "{stderr}");

    // redis-cli's sources: the environment, then --user/--pass (with redis-cli's warning).
    let (code, json, _) = f.status(&["--dir", &f.dir_arg()], &[("REDISCLI_AUTH", PASSWORD)]);
    assert_eq!(code, Some(0));
    assert_full(&json, &f);
    let (code, json, stderr) = f.status(
        &[
            "--dir",
            &f.dir_arg(),
            "--user",
            "app",
            "--pass",
            APP_PASSWORD,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{json}\n{stderr}");
    assert_full(&json, &f);
    assert!(stderr.contains("may not be safe"), "{stderr}");
    let (_, _, stderr) = f.status(
        &[
            "--dir",
            &f.dir_arg(),
            "--user",
            "app",
            "-a",
            APP_PASSWORD,
            "--no-auth-warning",
        ],
        &[],
    );
    assert!(stderr.is_empty(), "{stderr}");

    // A wrong password: up (each child answered), no keys or memory, and a note.
    let (code, json, stderr) =
        f.status(&["--dir", &f.dir_arg()], &[("REDISCLI_AUTH", "wrong-one")]);
    assert_eq!(code, Some(0), "{json}\n{stderr}");
    for role in ["engine-0", "engine-1", "proxy-0"] {
        let r = row(&json, role);
        assert_eq!(r["state"], "up", "{r}");
        assert!(r["keys"].is_null() && r["used_memory"].is_null(), "{r}");
    }
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(stderr.contains("engine-0"), "{stderr}");
}

/// `GET /metrics` from the supervisor: the body.
fn metrics_text(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn metrics_read_the_children_with_the_internal_credential() {
    let f = Fleet::start("metrics-auth");
    let mut c = Resp::connect(f.proxy_port);
    assert_eq!(cmd(&mut c, &["AUTH", PASSWORD]), "+OK\\r\\n");
    for i in 0..KEYS {
        assert_eq!(cmd(&mut c, &["SET", &format!("m:{i}"), "v"]), "+OK\\r\\n");
    }
    let text = metrics_text(f.metrics_port);
    let keys: u64 = text
        .lines()
        .filter(|l| l.starts_with("recached_keys{instance=\"engine-"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(keys, KEYS as u64, "{text}");
    // The proxy answered INFO (its request counter is there) and the engines their commands.
    assert!(text.contains("recached_proxy_requests_total{"), "{text}");
    assert!(text.contains("recached_commands_total{"), "{text}");
    assert!(!text.contains(PASSWORD) && !text.contains(APP_PASSWORD));
}
