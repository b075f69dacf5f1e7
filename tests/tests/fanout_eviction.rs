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
use std::process::Command;
use std::time::Duration;

#[test]
fn browser_replica_sees_evicted_keys_deleted() {
    let (dir, wasm) = browser_env(false);
    let engine_port = free_port();
    let _engine = start_engine(engine_port);
    let fanout_port = free_port_except(&[engine_port]);
    let mut cmd = Command::new(recached_bin());
    cmd.args(["fanout", "--port", &fanout_port.to_string()])
        .args(["--engines", &format!("127.0.0.1:{engine_port}")])
        .args(["--wasm", wasm.to_str().unwrap()]);
    let mut fanout = Proc::spawn("fanout", cmd);
    fanout.wait_port(fanout_port, START_TIMEOUT);
    let out = run_node(
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
