//! `recached-bench memory`: one memory-per-data-shape sample of a running server, as a result
//! document of kind `memory` ([`crate::doc`]). Driven by `scripts/bench-memory-shapes.sh`,
//! which starts a fresh server per shape and run, fills it, then calls this once.
//!
//! What is recorded (`results`):
//! - `keys`: DBSIZE at the time of the sample. With `--expect-keys N` a different DBSIZE is an
//!   error (`errors: 1`, exit status 1): the shape table is only meaningful for a known DBSIZE.
//! - `rss_bytes`: VmRSS of `--pid` from `/proc/PID/status` (what the OS charges the process),
//!   read by us rather than taken from the server, so both servers are measured the same way.
//! - `used_memory`: the server's own `INFO memory` `used_memory` (recached: the logical
//!   estimate of docs/memory.md; redis-server: what its allocator reports as allocated).
//! - `server_rss_bytes`: the server's `used_memory_rss`, when it reports one.
//!
//! `params` carries the shape (`shape`, free text `describe`, `elements` = items stored in all:
//! keys for strings, fields/members/elements for collections, `value_size`) as the script
//! passes them, plus the target and pid. Sizes in bytes.
//!
//! Queries use a blocking socket with 5 s timeouts and a 4 MiB reply cap, so a stuck or
//! hostile server ends the sample with an error instead of hanging or growing memory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use resp::Value;

/// Reply size cap: INFO memory is a few KiB.
const MAX_REPLY: usize = 4 << 20;
const TIMEOUT: Duration = Duration::from_secs(5);

/// `recached-bench memory` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct MemoryArgs {
    /// The server, host:port.
    #[arg(long)]
    pub target: String,
    /// Process whose RSS is read (the server's pid).
    #[arg(long)]
    pub pid: u32,
    /// Data shape name (strings, hashes, …; `empty` for the fresh process).
    #[arg(long)]
    pub shape: String,
    /// What the shape holds, in words (shown in the report).
    #[arg(long, default_value = "")]
    pub describe: String,
    /// Items stored in all (keys, fields, members or list elements).
    #[arg(long, default_value_t = 0)]
    pub elements: u64,
    /// Value size in bytes (of a string value, hash field value, …), 0 when not applicable.
    #[arg(long, default_value_t = 0)]
    pub value_size: u64,
    /// DBSIZE the server must report; anything else is recorded as an error.
    #[arg(long)]
    pub expect_keys: Option<u64>,
}

/// Sends one command (arguments as bulk strings) and parses the reply.
fn command(s: &mut TcpStream, args: &[&str]) -> Result<Value, String> {
    let mut req = Vec::new();
    resp::encode_request(&mut req, args);
    s.write_all(&req).map_err(|e| format!("{}: {e}", args[0]))?;
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        match resp::decode(&buf) {
            Ok(Some((v, _))) => return Ok(v),
            Ok(None) => {}
            Err(e) => return Err(format!("{}: {e}", args[0])),
        }
        if buf.len() > MAX_REPLY || Instant::now() > deadline {
            return Err(format!("{}: no complete reply", args[0]));
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err(format!("{}: connection closed", args[0])),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("{}: {e}", args[0])),
        }
    }
}

/// `field:value` lines of an INFO reply.
fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines()
        .filter_map(|l| l.trim_end().split_once(':'))
        .find(|(k, _)| *k == field)
        .and_then(|(_, v)| v.parse().ok())
}

/// Connects and reads DBSIZE and INFO memory: (keys, used_memory, used_memory_rss).
fn query(target: &str) -> Result<(u64, Option<u64>, Option<u64>), String> {
    let addr: SocketAddr = target
        .to_socket_addrs()
        .map_err(|e| format!("{target}: {e}"))?
        .next()
        .ok_or_else(|| format!("{target}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{target}: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    let keys = match command(&mut s, &["DBSIZE"])? {
        Value::Integer(n) if n >= 0 => n as u64,
        other => return Err(format!("DBSIZE answered {other:?}")),
    };
    let info = match command(&mut s, &["INFO", "memory"])? {
        Value::Bulk(b) | Value::Verbatim { text: b, .. } => {
            String::from_utf8_lossy(&b).into_owned()
        }
        other => return Err(format!("INFO memory answered {other:?}")),
    };
    Ok((
        keys,
        info_field(&info, "used_memory"),
        info_field(&info, "used_memory_rss"),
    ))
}

/// Takes the sample and writes it (see the module docs).
pub fn sample(args: &MemoryArgs, out: &crate::OutArgs) -> Result<ExitCode, String> {
    let labels = crate::doc::parse_labels(&out.labels)?;
    let (keys, used, server_rss) = query(&args.target)?;
    let rss = crate::rss_bytes(args.pid)
        .ok_or_else(|| format!("no VmRSS for pid {} (not running?)", args.pid))?;
    let mut error_lines = Vec::new();
    if let Some(want) = args.expect_keys.filter(|&w| w != keys) {
        error_lines.push(format!("DBSIZE is {keys}, expected {want}"));
    }
    let server = crate::loadgen::server_info(&args.target);
    let params = json!({
        "shape": args.shape,
        "describe": args.describe,
        "elements": args.elements,
        "value_size": args.value_size,
        "expect_keys": args.expect_keys,
        "target": args.target,
        "pid": args.pid,
    });
    let results = json!({
        "keys": keys,
        "rss_bytes": rss,
        "used_memory": used,
        "server_rss_bytes": server_rss,
        "errors": error_lines.len(),
        "error_lines": error_lines,
    });
    println!(
        "{} {}: keys {keys}, RSS {:.1} MiB, used_memory {}",
        args.target,
        args.shape,
        rss as f64 / 1048576.0,
        used.map_or("?".into(), |u| format!("{:.1} MiB", u as f64 / 1048576.0)),
    );
    let doc = crate::doc::new_doc(
        "memory",
        &labels,
        json!({ "server": server }),
        params,
        results,
    );
    if let Some(path) = &out.out {
        crate::doc::write(path, &doc)?;
    }
    for l in &error_lines {
        eprintln!("memory: {l}");
    }
    Ok(if error_lines.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info =
            "# Memory\r\nused_memory:1234\r\nused_memory_human:1.21K\r\nused_memory_rss:8192\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1234));
        assert_eq!(info_field(info, "used_memory_rss"), Some(8192));
        assert_eq!(info_field(info, "used_memory_human"), None);
        assert_eq!(info_field(info, "maxmemory"), None);
    }
}
