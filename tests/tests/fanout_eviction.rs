//! Issue 7: "A browser replica subscribed to evicted keys sees them deleted", through the real
//! path: one engine (allkeys-lru, a limit set by the test), `recached fanout` following its
//! keychange feed, and a Node replica running the real `wasm/www/recached.js` +
//! `recached.wasm` (tests/browser/eviction.test.mjs, which states the workload and what it
//! asserts). Evicted keys must reach the replica as DEL keychanges (DESIGN.md: "expiry/eviction
//! → DEL"), and the keys the engine kept must equal the replica's.
//!
//! Needs node and tests/browser/node_modules (scripts/test.sh installs them; lib.mjs imports
//! playwright-core); Chromium is not used. Every wait is bounded; the engine and the fan-out
//! are killed by PID on drop ([`Proc`]), node after its time limit.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// tests/browser (node_modules checked) and the wasm module (built if missing).
fn node_env() -> (PathBuf, PathBuf) {
    let dir = workspace_root().join("tests/browser");
    let modules = dir.join("node_modules/playwright-core");
    assert!(
        modules.exists(),
        "{} missing: run scripts/test.sh (npm ci in tests/browser)",
        modules.display()
    );
    let out = Command::new(workspace_root().join("scripts/build-wasm.sh"))
        .output()
        .expect("run scripts/build-wasm.sh");
    assert!(
        out.status.success(),
        "build-wasm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wasm = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (dir, wasm)
}

/// Runs `node <script>` in `dir` with `envs`, killed after `limit`; panics on failure.
/// (The same runner as tests/tests/fanout.rs.)
fn node(dir: &Path, script: &str, envs: &[(&str, String)], limit: Duration) -> String {
    let log = dir.join(format!("{script}.{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new("node");
    cmd.current_dir(dir)
        .args(["--experimental-websocket", "--no-warnings", script])
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn node");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{script} failed ({s}):\n{out}"),
        None => panic!("{script} did not finish within {limit:?}:\n{out}"),
    }
}

#[test]
fn browser_replica_sees_evicted_keys_deleted() {
    let (dir, wasm) = node_env();
    let engine_port = free_port();
    let _engine = start_engine(engine_port);
    let fanout_port = free_port_except(&[engine_port]);
    let mut cmd = Command::new(recached_bin());
    cmd.args(["fanout", "--port", &fanout_port.to_string()])
        .args(["--engines", &format!("127.0.0.1:{engine_port}")])
        .args(["--wasm", wasm.to_str().unwrap()]);
    let mut fanout = Proc::spawn("fanout", cmd);
    fanout.wait_port(fanout_port, START_TIMEOUT);
    let out = node(
        &dir,
        "eviction.test.mjs",
        &[
            ("FANOUT_PORT", fanout_port.to_string()),
            ("ENGINE_PORT", engine_port.to_string()),
            ("WASM", wasm.display().to_string()),
        ],
        Duration::from_secs(90),
    );
    assert!(out.contains("eviction: "), "{out}");
    eprintln!("{out}");
    // The engine counted what the replica saw deleted.
    let evicted: u64 = redis_cli(engine_port, &["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .expect("evicted_keys")
        .trim()
        .parse()
        .unwrap();
    assert!(evicted >= 400, "evicted_keys {evicted}");
}
