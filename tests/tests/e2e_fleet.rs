//! End-to-end tests of the fleet (issue 2): `recached start` with 2 engines and the proxy on
//! free ports in a temp dir, used through the proxy with the real `redis-cli` and
//! `redis-benchmark`; an engine killed with SIGKILL is replaced within 2 s while the proxy keeps
//! serving the other instance's keys; `recached status` and `recached stop` work from outside;
//! a second `start` on the same dir is refused, and a stale pid file is taken over.
//!
//! Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor by PID, then every child PID recorded in
//! `dir/state.toml` (children also get SIGTERM from the kernel when the supervisor dies,
//! `PR_SET_PDEATHSIG`), so a failing test leaves no process behind. Every wait is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine_core::slot::instance_for_key;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long the whole fleet may take to accept connections.
const FLEET_START: Duration = Duration::from_secs(30);
/// The issue's bound: a killed engine is replaced and serving within this.
const RESTART_BOUND: Duration = Duration::from_secs(2);

/// A running `recached start` (the supervisor) and what it was started with.
struct Fleet {
    sup: Proc,
    dir: PathBuf,
    proxy_port: u16,
    engine_ports: Vec<u16>,
    /// Leave `dir` in place on drop (another fleet will use it).
    keep_dir: bool,
}

impl Fleet {
    /// `recached start --engines N` on free ports with `--dir dir`; waits until the proxy and
    /// every engine accept connections.
    fn start(engines: usize, dir: &Path) -> Fleet {
        let base = free_port_run(engines);
        let engine_ports: Vec<u16> = (0..engines).map(|i| base + i as u16).collect();
        let proxy_port = free_port_except(&engine_ports);
        let mut taken = engine_ports.clone();
        taken.push(proxy_port);
        // An explicit free fan-out port (the derived default, proxy port + 100, may be taken
        // on a shared machine, and then the fan-out is skipped); no metrics listener, whose
        // fixed default port would be shared by fleets of tests running in parallel.
        let fanout_port = free_port_except(&taken);
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .args(["--engines", &engines.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--proxy-port", &proxy_port.to_string()])
            .args(["--fanout-port", &fanout_port.to_string()])
            .args(["--metrics-port", "0"])
            .args(["--engine-port-base", &base.to_string()])
            .arg("--dir")
            .arg(dir)
            .env("RUST_LOG", "info");
        let mut sup = Proc::spawn("fleet", cmd);
        sup.wait_port(proxy_port, FLEET_START);
        for &p in &engine_ports {
            sup.wait_port(p, FLEET_START);
        }
        sup.wait_proxy_reaches_engines(proxy_port, FLEET_START);
        Fleet {
            sup,
            dir: dir.to_path_buf(),
            proxy_port,
            engine_ports,
            keep_dir: false,
        }
    }

    /// `dir/state.toml` as a table (written by the supervisor with temp file + rename).
    fn state(&self) -> toml::Table {
        let text = std::fs::read_to_string(self.dir.join("state.toml")).unwrap_or_else(|e| {
            panic!("read state.toml: {e}; supervisor log:\n{}", self.sup.log())
        });
        text.parse().expect("state.toml parses")
    }

    /// The pid of child `role`-`index` per the state file, if it has one.
    fn child_pid(&self, role: &str, index: i64) -> Option<u32> {
        child_pids(&self.state())
            .into_iter()
            .find(|(r, i, _)| r == role && *i == index)
            .map(|(_, _, pid)| pid)
    }

    /// Runs `recached <args…> --dir <dir>` to completion (bounded).
    fn cli(&self, args: &[&str]) -> CmdOut {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.push("--dir".into());
        all.push(self.dir.display().to_string());
        run_cmd(
            Command::new(recached_bin()).args(&all),
            Duration::from_secs(30),
        )
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Only a supervisor that is still running can have live children; once it is gone
        // the recorded pids may already belong to someone else.
        let was_running = self.sup.is_running();
        self.sup.kill();
        if was_running {
            kill_recorded_children(&self.dir.join("state.toml"));
        }
        if !self.keep_dir && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("fleet dir kept at {}", self.dir.display());
        }
    }
}

/// (role, index, pid) of every child with a pid in a parsed state file.
fn child_pids(state: &toml::Table) -> Vec<(String, i64, u32)> {
    let Some(children) = state.get("children").and_then(|c| c.as_array()) else {
        return vec![];
    };
    children
        .iter()
        .filter_map(|c| {
            let role = c.get("role")?.as_str()?.to_string();
            let index = c.get("index")?.as_integer()?;
            let pid = c.get("pid")?.as_integer()? as u32;
            Some((role, index, pid))
        })
        .collect()
}

/// A fresh, not yet existing directory for one fleet. The `e2e-` prefix keeps it apart from
/// `common`'s temp dirs (`<name>-<pid>-<n>` with its own counter, removed on reuse).
fn fleet_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("e2e-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn pid_alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

fn dbsize(port: u16) -> i64 {
    let reply = Resp::connect(port).cmd_str(&["DBSIZE"]);
    let text = String::from_utf8_lossy(&reply);
    text.strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("DBSIZE on {port} answered {}", escape(&reply)))
}

#[test]
fn fleet_serves_redis_clients_through_the_proxy_and_replaces_a_killed_engine() {
    let fleet = Fleet::start(2, &fleet_dir("fleet"));
    let proxy = fleet.proxy_port;

    // SET/GET through the proxy.
    assert_eq!(redis_cli(proxy, &["SET", "greeting", "hello"]).trim(), "OK");
    assert_eq!(redis_cli(proxy, &["GET", "greeting"]).trim(), "hello");

    // MGET of 50 keys spread over both instances, every fifth one missing.
    let keys: Vec<String> = (0..50).map(|i| format!("mget:{i}")).collect();
    let owners: Vec<u32> = keys
        .iter()
        .map(|k| instance_for_key(k.as_bytes(), 2))
        .collect();
    assert!(
        owners.contains(&0) && owners.contains(&1),
        "keys must span both instances"
    );
    let mut mset = vec!["MSET".to_string()];
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 5 != 0) {
        mset.push(k.clone());
        mset.push(format!("value-{i}"));
    }
    let mset: Vec<&str> = mset.iter().map(String::as_str).collect();
    assert_eq!(redis_cli(proxy, &mset).trim(), "OK");
    let mut mget = vec!["--no-raw", "MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let out = redis_cli(proxy, &mget);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 50, "MGET output:\n{out}");
    for (i, line) in lines.iter().enumerate() {
        let want = if i % 5 == 0 {
            format!("{}) (nil)", i + 1)
        } else {
            format!("{}) \"value-{i}\"", i + 1)
        };
        assert_eq!(line.trim(), want, "MGET element {i}; output:\n{out}");
    }

    // redis-benchmark through the proxy: completes, no error replies (redis-benchmark 7 exits
    // non-zero on the first error reply).
    let bench = run_cmd(
        Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &proxy.to_string()])
            .args([
                "-t",
                "set,get,incr,mset",
                "-n",
                "100000",
                "-P",
                "16",
                "-r",
                "100000",
            ])
            .arg("--csv"),
        Duration::from_secs(240),
    );
    let bench_all = format!("{}{}", bench.stdout, bench.stderr);
    assert_eq!(bench.code, Some(0), "redis-benchmark failed:\n{bench_all}");
    for t in ["\"SET\"", "\"GET\"", "\"INCR\"", "\"MSET (10 keys)\""] {
        assert!(
            bench.stdout.lines().any(|l| l.starts_with(t)),
            "no {t} result in:\n{bench_all}"
        );
    }
    assert!(
        !bench_all.contains("Error"),
        "redis-benchmark reported errors:\n{bench_all}"
    );

    // Both instances hold keys; the proxy's DBSIZE is their sum.
    let sizes: Vec<i64> = fleet.engine_ports.iter().map(|&p| dbsize(p)).collect();
    assert!(sizes.iter().all(|&n| n > 0), "engine DBSIZEs {sizes:?}");
    assert_eq!(
        dbsize(proxy),
        sizes.iter().sum::<i64>(),
        "engine DBSIZEs {sizes:?}"
    );

    // Kill -9 engine 0. Keys of engine 1 keep working through the proxy during the gap.
    let survivor_key = keys
        .iter()
        .enumerate()
        .find(|(i, k)| i % 5 != 0 && instance_for_key(k.as_bytes(), 2) == 1)
        .map(|(i, k)| (k.clone(), format!("value-{i}")))
        .expect("a key of instance 1");
    let victim_key = keys
        .iter()
        .find(|k| instance_for_key(k.as_bytes(), 2) == 0)
        .expect("a key of instance 0")
        .clone();
    let mut client = Resp::connect(proxy);
    let old_pid = fleet
        .child_pid("engine", 0)
        .expect("engine-0 pid in state.toml");
    kill(Pid::from_raw(old_pid as i32), Signal::SIGKILL).expect("kill -9 engine-0");
    let killed_at = Instant::now();
    let reply = client.cmd_str(&["GET", &survivor_key.0]);
    assert_eq!(
        reply,
        format!("${}\r\n{}\r\n", survivor_key.1.len(), survivor_key.1).into_bytes(),
        "GET of the surviving instance's key during the gap: {}",
        escape(&reply)
    );
    // A key of the dead instance gets an answer (an error while it is down), not a hang.
    let victim_reply = client.cmd_str(&["GET", &victim_key]);
    assert!(!victim_reply.is_empty());

    // The supervisor has a new engine-0 serving within 2 s.
    let restarted = loop {
        let new_pid = fleet.child_pid("engine", 0);
        if new_pid.is_some_and(|p| p != old_pid) && pings(fleet.engine_ports[0]) {
            break new_pid.unwrap();
        }
        assert!(
            killed_at.elapsed() < RESTART_BOUND,
            "no new engine-0 serving {RESTART_BOUND:?} after kill -9; supervisor log:\n{}",
            fleet.sup.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!pid_alive(old_pid) || restarted != old_pid);

    // The proxy reconnects by itself: engine 0's keys work again (the data died with it).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.cmd_str(&["SET", &victim_key, "again"]);
        if r == b"+OK\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "proxy still answers {} for engine 0",
            escape(&r)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(client.cmd_str(&["GET", &victim_key]), b"$5\r\nagain\r\n");

    // `recached status` lists every process, all up, with engine-0's restart counted.
    let st = fleet.cli(&["status"]);
    assert_eq!(st.code, Some(0), "status:\n{}{}", st.stdout, st.stderr);
    for (role, port) in [
        ("engine-0", fleet.engine_ports[0]),
        ("engine-1", fleet.engine_ports[1]),
        ("proxy-0", proxy),
    ] {
        let line = st
            .stdout
            .lines()
            .find(|l| l.starts_with(role))
            .unwrap_or_else(|| panic!("no {role} in status:\n{}", st.stdout));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[1], port.to_string(), "{line}");
        assert_eq!(cols[3], "up", "{line}");
        let restarts = if role == "engine-0" { "1" } else { "0" };
        assert_eq!(cols.last().copied(), Some(restarts), "{line}");
    }
    assert!(st.stdout.contains("supervisor"), "{}", st.stdout);
    let json = fleet.cli(&["status", "--json"]);
    assert!(
        json.stdout.contains("\"role\":\"engine-1\""),
        "{}",
        json.stdout
    );

    // `recached stop`: the supervisor exits 0 and every child pid is gone.
    let pids: Vec<u32> = child_pids(&fleet.state())
        .into_iter()
        .map(|(_, _, p)| p)
        .collect();
    // 2 engines, the proxy and the fan-out.
    assert_eq!(pids.len(), 4, "{pids:?}");
    let stop = fleet.cli(&["stop"]);
    assert_eq!(stop.code, Some(0), "stop:\n{}{}", stop.stdout, stop.stderr);
    let mut fleet = fleet;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = fleet.sup.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "supervisor still running after stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "supervisor exit {status}; log:\n{}",
        fleet.sup.log()
    );
    for pid in pids {
        assert!(!pid_alive(pid), "child {pid} survived stop");
    }
    assert!(
        !fleet.dir.join("recached.pid").exists(),
        "pid file left behind"
    );
    let log = fleet.sup.log();
    assert!(log.contains("fleet stopped"), "{log}");
}

#[test]
fn a_second_start_on_the_same_dir_is_refused_and_a_stale_pid_file_is_taken_over() {
    let dir = fleet_dir("fleet-lock");
    let mut first = Fleet::start(1, &dir);
    let sup_pid = first.sup.pid();

    // Same dir, other (free) ports: refused at once, naming the running supervisor.
    let second = run_cmd(
        Command::new(recached_bin())
            .arg("start")
            .args(["--engines", "1"])
            .args(["--proxy-port", &free_port_run(1).to_string()])
            .args(["--engine-port-base", &free_port_run(1).to_string()])
            .arg("--dir")
            .arg(&dir),
        Duration::from_secs(20),
    );
    assert_eq!(
        second.code,
        Some(1),
        "second start:\n{}{}",
        second.stdout,
        second.stderr
    );
    assert!(
        second.stderr.contains("already running") && second.stderr.contains(&sup_pid.to_string()),
        "{}",
        second.stderr
    );
    assert!(pings(first.proxy_port), "the first fleet must keep serving");

    // SIGKILL the supervisor: its children follow (PDEATHSIG), the pid file stays behind.
    let children: Vec<u32> = child_pids(&first.state())
        .into_iter()
        .map(|(_, _, p)| p)
        .collect();
    first.sup.kill();
    assert!(dir.join("recached.pid").exists());
    let deadline = Instant::now() + Duration::from_secs(10);
    while children.iter().any(|&p| pid_alive(p)) {
        assert!(
            Instant::now() < deadline,
            "children outlived their supervisor: {children:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = first.cli(&["status"]);
    assert_eq!(st.code, Some(1), "status of a dead fleet:\n{}", st.stdout);
    assert!(st.stdout.contains("no fleet"), "{}", st.stdout);

    // A new start on the same dir takes the stale pid file over.
    first.keep_dir = true;
    drop(first);
    let again = Fleet::start(1, &dir);
    assert!(pings(again.proxy_port));
    let pid_text = std::fs::read_to_string(dir.join("recached.pid")).unwrap();
    assert_eq!(pid_text.trim(), again.sup.pid().to_string());
    let log = again.sup.log();
    assert!(log.contains("stale pid file"), "{log}");
    let stop = again.cli(&["stop"]);
    assert_eq!(stop.code, Some(0), "{}{}", stop.stdout, stop.stderr);
}

#[test]
fn colliding_ports_are_refused_and_a_derived_fanout_port_on_an_engine_is_skipped() {
    // Explicit: the fan-out on engine 0's port. Refused before anything starts (it used to
    // start, report the fleet ready, and crash-loop the fan-out on "address in use").
    let dir = fleet_dir("fleet-ports");
    let engine = free_port_run(1);
    let proxy = free_port_except(&[engine]);
    let out = run_cmd(
        Command::new(recached_bin())
            .arg("start")
            .args([
                "--engines",
                "1",
                "--bind",
                "127.0.0.1",
                "--metrics-port",
                "0",
            ])
            .args(["--proxy-port", &proxy.to_string()])
            .args(["--engine-port-base", &engine.to_string()])
            .args(["--fanout-port", &engine.to_string()])
            .arg("--dir")
            .arg(&dir),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "port {engine} is set for both engine 0 and the fan-out"
        )),
        "{}",
        out.stderr
    );
    assert!(!pings(engine) && !pings(proxy), "nothing may have started");

    // Derived: engines at proxy port + 100 (the README's example of moving ports), no
    // --fanout-port: the fleet starts without a fan-out and says why.
    let base = free_port_run(102);
    let (proxy, engine) = (base, base + 100);
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .args([
            "--engines",
            "2",
            "--bind",
            "127.0.0.1",
            "--metrics-port",
            "0",
        ])
        .args(["--proxy-port", &proxy.to_string()])
        .args(["--engine-port-base", &engine.to_string()])
        .arg("--dir")
        .arg(&dir)
        .env("RUST_LOG", "info");
    let mut fleet = Fleet {
        sup: Proc::spawn("fleet-ports", cmd),
        dir: dir.clone(),
        proxy_port: proxy,
        engine_ports: vec![engine, engine + 1],
        keep_dir: false,
    };
    for p in [proxy, engine, engine + 1] {
        fleet.sup.wait_port(p, FLEET_START);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fleet.sup.log().contains("is another port of this fleet") {
        assert!(
            Instant::now() < deadline,
            "no warning:\n{}",
            fleet.sup.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = fleet.cli(&["status"]);
    assert_eq!(st.code, Some(0), "status:\n{}{}", st.stdout, st.stderr);
    assert!(!st.stdout.contains("fanout"), "{}", st.stdout);
    let stop = fleet.cli(&["stop"]);
    assert_eq!(stop.code, Some(0), "{}{}", stop.stdout, stop.stderr);
}

/// Kills a daemonized supervisor (not our child) by the PID in its pid file on drop; its
/// children follow through PDEATHSIG.
struct DaemonGuard(PathBuf);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.0.join("recached.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = pid
            && pid > 0
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn a_daemonized_fleet_returns_once_ready_and_stops_from_another_process() {
    let dir = fleet_dir("fleet-daemon");
    let _guard = DaemonGuard(dir.clone());
    let base = free_port_run(1);
    let proxy = free_port_except(&[base]);
    let start = run_cmd(
        Command::new(recached_bin())
            .arg("start")
            .args(["--engines", "1", "--daemonize"])
            .args(["--proxy-port", &proxy.to_string()])
            .args(["--engine-port-base", &base.to_string()])
            .arg("--dir")
            .arg(&dir),
        Duration::from_secs(30),
    );
    assert_eq!(
        start.code,
        Some(0),
        "start --daemonize:\n{}{}",
        start.stdout,
        start.stderr
    );
    // Returned only once ready: both ports answer right away.
    assert!(pings(proxy) && pings(base), "{}", start.stdout);
    let sup: u32 = std::fs::read_to_string(dir.join("recached.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(start.stdout.contains(&sup.to_string()), "{}", start.stdout);
    assert!(dir.join("logs/supervisor.log").exists());
    let dir_arg = dir.display().to_string();
    let status = run_cmd(
        Command::new(recached_bin()).args(["status", "--json", "--dir", &dir_arg]),
        Duration::from_secs(30),
    );
    assert_eq!(status.code, Some(0), "{}", status.stdout);
    assert!(
        status.stdout.contains("\"running\":true"),
        "{}",
        status.stdout
    );
    let stop = run_cmd(
        Command::new(recached_bin()).args(["stop", "--dir", &dir_arg]),
        Duration::from_secs(30),
    );
    assert_eq!(stop.code, Some(0), "{}{}", stop.stdout, stop.stderr);
    // The daemon is not our child: once stopped it is gone (or a zombie of init, briefly).
    let deadline = Instant::now() + Duration::from_secs(10);
    while pings(proxy) || pings(base) {
        assert!(Instant::now() < deadline, "fleet still serving after stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.join("recached.pid").exists());
}
