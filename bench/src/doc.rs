//! The result file: one JSON object per measurement, under `bench/results/` (or `BENCH_RESULTS`).
//!
//! ```text
//! {
//!   "schema": "recached-bench/1",
//!   "kind": "loadgen" | "redis-benchmark" | "rss" | "memory",
//!   "labels": { "suite": "scaling", "run_id": "20250101T120000", "system": "recached-proxy",
//!               "engines": "2", "cpu_placement": "unpinned", "persistence": "none", … },
//!   "timestamp_unix_ms": 1735732800000,
//!   "host": { "cpus": 2, "kernel": "6.1.0", "os": "linux", "loadavg_1m": 1.5 },
//!   "versions": { "recached_bench": "0.1.0", "server": { "redis_version": "7.0.15", … }, … },
//!   "params": { every parameter of the run: requests, concurrency, value size, key
//!               distribution, pipeline depth, … },
//!   "results": { kind-specific figures; latencies in microseconds, rates per second }
//! }
//! ```
//!
//! Labels are free-form `key=value` pairs given by the scripts (`--label`); the report groups by
//! `suite` and takes the newest `run_id` of each suite. Versions of the binaries a script ran
//! are passed the same way (`--label recached_version=…`), since only the script knows them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

pub const SCHEMA: &str = "recached-bench/1";

/// Parses `key=value` labels.
pub fn parse_labels(labels: &[String]) -> Result<BTreeMap<String, String>, String> {
    labels
        .iter()
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("label {l:?} is not key=value"))
        })
        .collect()
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A result document with the common fields filled in.
pub fn new_doc(
    kind: &str,
    labels: &BTreeMap<String, String>,
    versions: Value,
    params: Value,
    results: Value,
) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut v = json!({ "recached_bench": env!("CARGO_PKG_VERSION") });
    if let (Some(m), Value::Object(extra)) = (v.as_object_mut(), versions) {
        m.extend(extra);
    }
    json!({
        "schema": SCHEMA,
        "kind": kind,
        "labels": labels,
        "timestamp_unix_ms": now,
        "host": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "os": std::env::consts::OS,
            "kernel": kernel(),
            // 1-minute load average when the result was written: how busy the machine was.
            "loadavg_1m": loadavg(),
        },
        "versions": v,
        "params": params,
        "results": results,
    })
}

/// Writes `doc` pretty-printed to `path` (creating parent folders).
pub fn write(path: &Path, doc: &Value) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    // A temporary file renamed over the result: a writer killed mid-write (the RSS sampler
    // rewrites its file every sample until the soak's SIGTERM) leaves the previous complete
    // document, never an empty or cut one.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, text + "\n").map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks that `v` is a result document; returns its total error count (`results.errors`,
/// an object of counts or a number; 0 when absent).
pub fn validate(v: &Value) -> Result<u64, String> {
    if v.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        return Err(format!("schema is not {SCHEMA:?}"));
    }
    for field in ["kind", "labels", "params", "results", "versions", "host"] {
        if v.get(field).is_none() {
            return Err(format!("missing field {field:?}"));
        }
    }
    Ok(match v["results"].get("errors") {
        Some(Value::Object(m)) => m.values().filter_map(Value::as_u64).sum(),
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("recached-doc-{}", std::process::id()));
        let path = dir.join("r.json");
        for n in 0..3 {
            write(&path, &serde_json::json!({ "n": n })).unwrap();
            let back: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(back["n"], n);
        }
        assert!(!dir.join("r.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
