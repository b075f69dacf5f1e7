//! The supervisor's Prometheus endpoint (issue 7, supervisor/src/metrics.rs): `recached start`
//! with 2 engines, some traffic through the proxy, then `GET /metrics` parsed by a real
//! Prometheus text-format parser (prometheus_client's `text_string_to_metric_families`, in
//! tests/cluster/.venv, installed by scripts/test.sh). Checks one series per instance, the
//! values against the traffic, a 404 for other paths, and that a stopped engine shows `up 0`.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FLEET_START: Duration = Duration::from_secs(20);

/// `n` ports that were free a moment ago, distinct.
fn ports(n: usize) -> Vec<u16> {
    let mut v: Vec<u16> = Vec::new();
    while v.len() < n {
        let p = free_port();
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// The first of 2 consecutive free ports.
fn port_pair(avoid: &[u16]) -> u16 {
    for _ in 0..200 {
        let p = free_port();
        if p < 65535
            && !avoid.contains(&p)
            && !avoid.contains(&(p + 1))
            && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
        {
            return p;
        }
    }
    panic!("no free port pair");
}

/// `GET path` on 127.0.0.1:`port`: (status line, body).
fn http_get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP head");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// Parses exposition text with prometheus_client; returns `name{k=v,…} value` lines, one per
/// sample, labels sorted (the parser's view, not our text).
fn parse_with_prometheus_client(text: &str) -> Vec<String> {
    let python = workspace_root().join("tests/cluster/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs prometheus_client into tests/cluster/.venv)",
        python.display()
    );
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name}{{{labels}}} {s.value:.0f}")
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn value_of(samples: &[String], prefix: &str) -> Option<u64> {
    samples
        .iter()
        .find(|l| {
            l.split_once(' ')
                .map(|x| x.1)
                .unwrap_or("")
                .starts_with(prefix)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

struct Fleet {
    sup: Proc,
    dir: PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // SIGTERM first so the supervisor stops its children; then make sure.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.sup.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.sup.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sup.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fleet_dir() -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn metrics_endpoint_serves_prometheus_text_per_instance() {
    let base = port_pair(&[]);
    let others = loop {
        let p = ports(2);
        if !p.contains(&base) && !p.contains(&(base + 1)) {
            break p;
        }
    };
    let (proxy_port, metrics_port) = (others[0], others[1]);
    let fanout_port = loop {
        let p = free_port();
        if ![base, base + 1, proxy_port, metrics_port].contains(&p) {
            break p;
        }
    };
    let dir = fleet_dir();
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .args(["--engines", "2", "--bind", "127.0.0.1"])
        .args(["--proxy-port", &proxy_port.to_string()])
        .args(["--engine-port-base", &base.to_string()])
        .args(["--metrics-port", &metrics_port.to_string()])
        .args(["--fanout-port", &fanout_port.to_string()])
        .arg("--dir")
        .arg(&dir);
    let mut sup = Proc::spawn("fleet-metrics", cmd);
    for p in [proxy_port, base, base + 1, metrics_port] {
        sup.wait_port(p, FLEET_START);
    }
    sup.wait_proxy_reaches_engines(proxy_port, FLEET_START);
    let fleet = Fleet { sup, dir };

    // Traffic: 100 SETs and 150 GETs (50 misses) through the proxy, one engine with a limit.
    let mut c = Resp::connect(proxy_port);
    for i in 0..100 {
        assert_eq!(
            c.cmd_str(&["SET", &format!("key:{i}"), "value"]),
            b"+OK\r\n"
        );
    }
    for i in 0..150 {
        c.cmd_str(&["GET", &format!("key:{i}")]);
    }
    Resp::connect(base).cmd_str(&["CONFIG", "SET", "maxmemory", "10mb"]);

    let (status, body) = http_get(metrics_port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let samples = parse_with_prometheus_client(&body);
    for inst in ["engine-0", "engine-1"] {
        for series in [
            "recached_memory_bytes",
            "recached_rss_bytes",
            "recached_keys",
            "recached_expired_keys_total",
            "recached_evicted_keys_total",
            "recached_keyspace_hits_total",
            "recached_keyspace_misses_total",
            "recached_connected_clients",
        ] {
            let want = format!("{series}{{instance={inst}}}");
            assert_eq!(
                samples
                    .iter()
                    .filter(|l| l.contains(&format!(" {want} ")))
                    .count(),
                1,
                "one {want} expected in\n{}",
                samples.join("\n")
            );
        }
        assert_eq!(
            value_of(
                &samples,
                &format!("recached_up{{instance={inst},role=engine}}")
            ),
            Some(1)
        );
        assert_eq!(
            value_of(
                &samples,
                &format!("recached_restarts_total{{instance={inst}}}")
            ),
            Some(0)
        );
    }
    let sum = |series: &str| -> u64 {
        ["engine-0", "engine-1"]
            .iter()
            .map(|i| value_of(&samples, &format!("{series}{{instance={i}}}")).unwrap_or(0))
            .sum()
    };
    assert_eq!(sum("recached_keys"), 100);
    assert_eq!(sum("recached_keyspace_hits_total"), 100);
    assert_eq!(sum("recached_keyspace_misses_total"), 50);
    let sets: u64 = ["engine-0", "engine-1"]
        .iter()
        .map(|i| {
            value_of(
                &samples,
                &format!("recached_commands_total{{command=set,instance={i}}}"),
            )
            .unwrap_or(0)
        })
        .sum();
    assert_eq!(sets, 100, "{}", samples.join("\n"));
    assert_eq!(
        value_of(&samples, "recached_maxmemory_bytes{instance=engine-0}"),
        Some(10 << 20)
    );
    // Counters are typed as counters, gauges as gauges (the parser's view).
    assert!(
        samples
            .iter()
            .any(|l| l.starts_with("counter recached_evicted_keys_total{"))
    );
    assert!(
        samples
            .iter()
            .any(|l| l.starts_with("gauge recached_memory_bytes{"))
    );
    // Proxy series.
    let requests = value_of(
        &samples,
        "recached_proxy_requests_total{instance=proxy-0,protocol=resp}",
    )
    .unwrap();
    assert!(requests >= 250, "proxy requests {requests}");
    assert_eq!(
        value_of(
            &samples,
            "recached_proxy_backend_errors_total{instance=proxy-0,protocol=resp}"
        ),
        Some(0)
    );
    // The fan-out answers RESP (PING only): up, but it reports no INFO fields yet, so its
    // series are left out.
    assert_eq!(
        value_of(&samples, "recached_up{instance=fanout-0,role=fanout}"),
        Some(1)
    );
    assert!(
        !body.contains("recached_fanout_"),
        "no fan-out INFO fields, no fan-out series"
    );

    assert_eq!(http_get(metrics_port, "/nope").0, "HTTP/1.1 404 Not Found");

    // A dead engine: up 0 (until the supervisor has restarted it), restarts counted after.
    let state = std::fs::read_to_string(fleet.dir.join("state.toml")).unwrap();
    let t: toml::Table = state.parse().unwrap();
    let pid = t["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ch| ch["role"].as_str() == Some("engine") && ch["index"].as_integer() == Some(1))
        .and_then(|ch| ch.get("pid")?.as_integer())
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let samples = parse_with_prometheus_client(&http_get(metrics_port, "/metrics").1);
        if value_of(&samples, "recached_restarts_total{instance=engine-1}") == Some(1)
            && value_of(&samples, "recached_up{instance=engine-1,role=engine}") == Some(1)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restart not reported:\n{}",
            samples.join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
