//! Health checks and live reload for the supervisor (`fleet`).
//!
//! # PING health checks
//!
//! Every `health_check_interval_ms` the supervisor sends each running child that has answered
//! at least once since it started (so a long snapshot load is not mistaken for a hang) an
//! inline `PING` over a fresh connection, with `health_check_timeout_ms` for connect, write
//! and read. Any complete reply line counts as alive: the proxy may answer an error when an
//! engine behind it is down, which still proves its own loop runs. After
//! `health_check_failures` failed checks in a row the child is considered hung: SIGKILL (a
//! hung process may not handle SIGTERM), reaped, and restarted like a crashed one. A child
//! stopped with SIGSTOP, deadlocked or spinning is caught this way; a child that exited is
//! caught at once by SIGCHLD instead.
//!
//! # SIGHUP
//!
//! Re-reads the config file (the same `--config` the fleet started with) and applies what can
//! change without a restart: the `[supervisor]` section (timeouts, backoff, health checks) in
//! the supervisor, and the engine settings that `CONFIG SET` accepts (`hz`,
//! `proto-max-bulk-len`, `save` from `save_interval`/`save_changes`, the `maxmemory` family) on
//! every running engine. A restarted engine reads the same file, so it agrees. Settings that
//! need a restart (ports, `engines`, `bind`, `dir`, `cluster`, `nodes`) are logged as
//! ignored. An invalid file is refused as a whole and nothing changes.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use resp::Value;

use crate::config::FileConfig;
use crate::reply::ReplyReader;

/// Whether `host:port` answers a PING with a complete reply line within `timeout`.
pub fn ping(host: &str, port: u16, timeout: Duration) -> bool {
    let Ok(mut s) = recached_net::listen::connect(host, port, timeout) else {
        return false;
    };
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = Vec::new();
    let mut r = BufReader::new(s).take(4096);
    matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0 && line.ends_with(b"\r\n"))
}

use std::io::Read as _;

/// The `CONFIG SET` pairs an engine gets on SIGHUP, from the file's `[engine]` section.
pub fn live_engine_settings(cfg: &FileConfig) -> Vec<(&'static str, String)> {
    let e = cfg.engine_config();
    let save = if cfg.engine.save_interval == 0 {
        String::new()
    } else {
        format!("{} {}", cfg.engine.save_interval, cfg.engine.save_changes)
    };
    vec![
        ("hz", e.hz.to_string()),
        ("proto-max-bulk-len", e.proto_max_bulk_len.to_string()),
        ("save", save),
        ("maxmemory", e.maxmemory.to_string()),
        ("maxmemory-policy", e.maxmemory_policy.to_string()),
        ("maxmemory-samples", e.maxmemory_samples.to_string()),
        ("lfu-log-factor", e.lfu_log_factor.to_string()),
        ("lfu-decay-time", e.lfu_decay_time.to_string()),
    ]
}

/// Sends one `CONFIG SET name value` per setting to `host:port`; returns the settings the
/// engine refused or could not be asked about, with the reason.
pub fn push_settings(
    host: &str,
    port: u16,
    settings: &[(&'static str, String)],
    timeout: Duration,
) -> Vec<String> {
    let mut failed = Vec::new();
    let mut s = match recached_net::listen::connect(host, port, timeout) {
        Ok(s) => s,
        Err(e) => return vec![format!("{host}:{port}: {e}")],
    };
    let mut r = match s.try_clone() {
        Ok(c) => ReplyReader::new(c, 4096),
        Err(e) => return vec![format!("{host}:{port}: {e}")],
    };
    let ok = Value::Simple(b"OK".to_vec());
    if let Some(login) = crate::auth::fleet_login() {
        // The internal credential (crate::auth) when the fleet requires authentication.
        let answer = s.write_all(&login).and_then(|()| r.read());
        if !matches!(&answer, Ok(v) if *v == ok) {
            return vec![format!(
                "{host}:{port}: internal AUTH: {}",
                describe(&answer)
            )];
        }
    }
    for (name, value) in settings {
        let mut cmd = Vec::new();
        resp::encode_request(&mut cmd, &["CONFIG", "SET", name, value]);
        let answer = s.write_all(&cmd).and_then(|()| r.read());
        if !matches!(&answer, Ok(v) if *v == ok) {
            failed.push(format!("{name}={value:?}: {}", describe(&answer)));
            if answer.is_err() {
                break;
            }
        }
    }
    failed
}

/// A refused `CONFIG SET`/`AUTH` answer for the log: the error text, or what came instead.
fn describe(answer: &std::io::Result<Value>) -> String {
    match answer {
        Ok(Value::Error(e)) => format!("-{}", String::from_utf8_lossy(e)),
        Ok(other) => format!("{other:?}"),
        Err(e) => e.to_string(),
    }
}

/// Names of the settings that differ between `old` and `new` but need a fleet restart.
pub fn restart_only_changes(old: &FileConfig, new: &FileConfig) -> Vec<&'static str> {
    let mut v = Vec::new();
    if old.engines != new.engines {
        v.push("engines");
    }
    if old.bind != new.bind {
        v.push("bind");
    }
    if old.proxy_port != new.proxy_port {
        v.push("proxy_port");
    }
    if old.memcached_port != new.memcached_port {
        v.push("memcached_port");
    }
    if old.tls.memcached_port != new.tls.memcached_port {
        v.push("tls.memcached_port");
    }
    if old.memcached_user != new.memcached_user {
        v.push("memcached_user");
    }
    if old.engine_port_base != new.engine_port_base {
        v.push("engine_port_base");
    }
    if old.dir != new.dir {
        v.push("dir");
    }
    if old.cluster != new.cluster {
        v.push("cluster");
    }
    if old.nodes != new.nodes {
        v.push("nodes");
    }
    if old.announce_host != new.announce_host {
        v.push("announce_host");
    }
    if old.engine.on_corrupt_snapshot != new.engine.on_corrupt_snapshot {
        v.push("engine.on_corrupt_snapshot (read at each engine start)");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn ping_needs_a_reply_line_in_time() {
        // Nobody listening.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        assert!(!ping("127.0.0.1", port, Duration::from_millis(200)));
        // Listening but never answering (a hung process: the kernel accepts for it).
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::time::Instant::now();
        assert!(!ping("127.0.0.1", port, Duration::from_millis(200)));
        assert!(t.elapsed() < Duration::from_secs(2));
        // Answering.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 6];
            c.read_exact(&mut buf).unwrap();
            c.write_all(b"+PONG\r\n").unwrap();
        });
        assert!(ping("127.0.0.1", port, Duration::from_millis(2000)));
        h.join().unwrap();
    }

    #[test]
    fn live_settings_follow_the_file() {
        let cfg = crate::config::parse("[engine]\nhz = 20\nsave_interval = 0\n").unwrap();
        let s = live_engine_settings(&cfg);
        assert!(s.contains(&("hz", "20".into())));
        assert!(s.contains(&("save", String::new())));
        let cfg2 = crate::config::parse("engines = 3\n").unwrap();
        assert_eq!(restart_only_changes(&cfg, &cfg2), vec!["engines"]);
    }
}
