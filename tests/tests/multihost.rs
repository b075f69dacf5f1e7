//! A fleet across two hosts (issue 21, item 4): two network namespaces that this test creates
//! and deletes itself, joined by a veth pair whose addresses (10.77.0.1 and 10.77.0.2) exist
//! only inside them. Each "host" runs `recached start` with the same `nodes` list of four
//! engines (two per host); each supervisor starts only its own two, and its proxy routes over
//! all four.
//!
//! - Cluster clients see every node: CLUSTER NODES on any engine lists the four; `redis-cli -c`
//!   on host A reads keys that live on host B.
//! - 400 keys written through host A's proxy read back through host B's proxy.
//! - Host B's fleet stopped: host A's proxy keeps serving the keys of A's slots, and answers
//!   the keys of B's slots at once with `-ERR instance <i> (<host>:<port>) is unavailable`.
//!
//! The engines bind the namespace's address with `protected_mode = false` (no password: the
//! namespaces are reachable from nothing else). Needs root (or CAP_NET_ADMIN) for `ip netns`; without it the test says so and passes
//! without running. Cleanup: processes by PID, then `ip netns del` (which removes the veth
//! pair), also when an assertion fails.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOSTS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
const ENGINE_PORTS: [u16; 2] = [6400, 6401];
const PROXY_PORT: u16 = 6380;
const KEYS: usize = 400;

/// The two namespaces; deleted on drop.
struct Namespaces {
    names: [String; 2],
}

impl Namespaces {
    fn create() -> Option<Namespaces> {
        let id = std::process::id();
        let names = [format!("rc{id}a"), format!("rc{id}b")];
        let (va, vb) = (format!("rcv{id}a"), format!("rcv{id}b"));
        let ns = Namespaces {
            names: names.clone(),
        };
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), names[0].clone()],
            vec!["netns".into(), "add".into(), names[1].clone()],
            vec![
                "link".into(),
                "add".into(),
                va.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                vb.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                va.clone(),
                "netns".into(),
                names[0].clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                vb.clone(),
                "netns".into(),
                names[1].clone(),
            ],
        ];
        for (i, step) in steps.iter().enumerate() {
            if !ip(step) {
                if i == 0 {
                    return None; // no permission: nothing was created
                }
                panic!("ip {step:?} failed");
            }
        }
        for (k, (n, v)) in names.iter().zip([&va, &vb]).enumerate() {
            for step in [
                vec![
                    "-n",
                    n,
                    "addr",
                    "add",
                    &format!("{}/24", HOSTS[k]),
                    "dev",
                    v,
                ],
                vec!["-n", n, "link", "set", v, "up"],
                vec!["-n", n, "link", "set", "lo", "up"],
            ] {
                let step: Vec<String> = step.iter().map(|s| s.to_string()).collect();
                assert!(ip(&step), "ip {step:?} failed");
            }
        }
        Some(ns)
    }

    /// `ip netns exec <host k> <program> <args…>`: the program runs with the namespace's
    /// network only (the exec keeps the pid).
    fn command(&self, k: usize, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[k]]).arg(program);
        cmd
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn ip(args: &[String]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn nodes() -> Vec<String> {
    HOSTS
        .iter()
        .flat_map(|h| ENGINE_PORTS.iter().map(move |p| format!("{h}:{p}")))
        .collect()
}

/// `redis-cli` inside host `k`'s namespace.
fn cli(ns: &Namespaces, k: usize, args: &[&str]) -> String {
    let out = run_cmd(
        ns.command(k, std::path::Path::new("redis-cli")).args(args),
        Duration::from_secs(30),
    );
    out.stdout
}

/// One host's supervisor and its data dir.
struct Host {
    sup: Proc,
    dir: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        teardown_fleet(&mut self.sup, &self.dir.join("data/state.toml"), &self.dir);
    }
}

fn start_host(ns: &Namespaces, k: usize) -> Host {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("multihost-{}-{k}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let list: Vec<String> = nodes().iter().map(|n| format!("\"{n}\"")).collect();
    let config = dir.join("recached.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"{host}\"\nprotected_mode = false\nproxy_port = {PROXY_PORT}\nfanout_port = 0\nmetrics_port = 0\n\
             dir = \"{}\"\ncluster = true\nnodes = [{}]\n[engine]\nsave_interval = 0\n",
            dir.join("data").display(),
            list.join(", "),
            host = HOSTS[k]
        ),
    )
    .unwrap();
    let mut cmd = ns.command(k, &recached_bin());
    cmd.arg("start")
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "info");
    let sup = Proc::spawn(&format!("host-{k}"), cmd);
    Host { sup, dir }
}

/// Waits until `redis-cli -h host -p port PING` inside namespace `k` answers PONG.
fn wait_ping(ns: &Namespaces, k: usize, host: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cli(ns, k, &["-h", host, "-p", &port.to_string(), "PING"]).trim() != "PONG" {
        assert!(Instant::now() < deadline, "{host}:{port} never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_fleet_over_two_hosts_serves_from_both_and_fails_fast_for_a_dead_host() {
    let Some(ns) = Namespaces::create() else {
        eprintln!("skipped: cannot create network namespaces (needs root / CAP_NET_ADMIN)");
        return;
    };
    let mut hosts = vec![start_host(&ns, 0), start_host(&ns, 1)];
    for (k, host) in HOSTS.iter().enumerate() {
        for p in ENGINE_PORTS {
            wait_ping(&ns, k, host, p);
        }
        wait_ping(&ns, k, host, PROXY_PORT);
    }
    // Each supervisor started only its own engines, and the engines see all four nodes.
    let view = cli(&ns, 0, &["-h", HOSTS[0], "-p", "6400", "CLUSTER", "NODES"]);
    for n in nodes() {
        assert!(
            view.contains(&format!(" {n}@")),
            "{n} missing from:\n{view}"
        );
    }
    assert_eq!(view.lines().count(), 4, "{view}");
    // The proxy must reach the other host's engines before the writes.
    let a = HOSTS[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let set = cli(
            &ns,
            0,
            &[
                "-h", a, "-p", "6380", "MSET", "{x}probe", "1", "{y}probe", "1", "{z}probe", "1",
            ],
        );
        if set.trim() == "OK" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "proxy on A never reached every engine: {set}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Writes through A's proxy, reads through B's.
    let mut mset = vec!["-h", a, "-p", "6380", "MSET"];
    let kv: Vec<(String, String)> = (0..KEYS)
        .map(|i| (format!("mh:{i}"), format!("v{i}")))
        .collect();
    for (k, v) in &kv {
        mset.push(k);
        mset.push(v);
    }
    assert_eq!(cli(&ns, 0, &mset).trim(), "OK");
    let mut mget = vec!["-h", HOSTS[1], "-p", "6380", "MGET"];
    mget.extend(kv.iter().map(|(k, _)| k.as_str()));
    let got: Vec<String> = cli(&ns, 1, &mget).lines().map(str::to_string).collect();
    let want: Vec<String> = kv.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(got, want, "B's proxy reads what A's proxy wrote");
    // A cluster client on host A follows MOVED to host B.
    let owner = |key: &str| -> usize {
        let slot = engine_core::slot::key_slot(key.as_bytes());
        engine_core::slot::instance_for_slot(slot, 4) as usize
    };
    let on_b = kv
        .iter()
        .find(|(k, _)| owner(k) >= 2)
        .expect("a key on host B");
    let on_a = kv
        .iter()
        .find(|(k, _)| owner(k) < 2)
        .expect("a key on host A");
    assert_eq!(
        cli(&ns, 0, &["-c", "-h", a, "-p", "6400", "GET", &on_b.0]).trim(),
        on_b.1
    );

    // Host B goes down: A keeps serving its slots; B's slots fail at once, clearly.
    let b = hosts.pop().unwrap();
    drop(b);
    assert_eq!(
        cli(&ns, 0, &["-h", a, "-p", "6380", "GET", &on_a.0]).trim(),
        on_a.1
    );
    let t = Instant::now();
    let err = cli(&ns, 0, &["-h", a, "-p", "6380", "GET", &on_b.0]);
    assert!(
        err.contains("is unavailable") && err.contains("10.77.0.2:"),
        "a dead host's slot: {err:?}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "failed fast: {:?}",
        t.elapsed()
    );
    drop(hosts);
}
