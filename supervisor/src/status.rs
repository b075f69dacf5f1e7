//! `recached stop` and `recached status`, run from any terminal against a fleet's dir.
//!
//! Both find the fleet through `dir/recached.pid`: a fleet is running when that file's
//! `flock` is held (see `fleet`), which stays right even after a SIGKILL or pid reuse.
//!
//! - `stop`: SIGTERM to the supervisor, then wait, bounded by the config's `stop_timeout_ms`
//!   plus 5 s, until the lock is released (the supervisor releases it when it exits; its pid
//!   may linger as a zombie of whoever started it, so the pid alone cannot tell). Exit 0 when
//!   stopped or when nothing was running, 1 when it did not stop in time.
//! - `status`: reads `dir/state.toml` and asks each child, over one connection with a 500 ms
//!   timeout, `PING`, `DBSIZE` and `INFO memory` (pipelined), then prints a table (or JSON):
//!   role, port, pid, state, uptime, keys, used memory, restarts. State is `up` when PING
//!   answered `+PONG`, `down` when the port did not answer, or the supervisor's own state
//!   (`restarting`, `stopping`) when it has no process. Exit 0 when every child is up, 1
//!   otherwise (also when no fleet runs), so scripts can poll it.
//!
//! # Passwords
//!
//! With `requirepass` or ACL users configured, engines and the proxy answer an
//! unauthenticated `PING` with `-NOAUTH` (as Redis does), so the probe starts with
//! `AUTH [user] password` when it has a credential, taken from, in order (redis-cli's
//! sources, then the fleet's own file):
//!
//! 1. `--pass`/`-a` (with `--user`), as redis-cli; a warning says a password in argv is
//!    visible to `ps` (silenced with `--no-auth-warning`, as redis-cli);
//! 2. the `REDISCLI_AUTH` environment variable, as redis-cli;
//! 3. the config file's `requirepass` (the default user): the `--config` given, else the
//!    one the fleet runs with, found in an engine's command line (`--config <absolute
//!    path>`, which `recached start` passes to every child).
//!
//! The supervisor's internal credential (`crate::auth`) lives only in its children's
//! environment and is never used here. The password is never printed. A child that
//! answers `-NOAUTH`/`-WRONGPASS` is up (it answered) but shows no keys or memory, and a
//! note on stderr says which credential to give.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use clap::Args;

use resp::Value;

use crate::fleet::{connect_host, unix_ms};
use crate::pidfile::running_supervisor;
use crate::reply::ReplyReader;
use crate::state::{self, FleetState, Role, RunState};
use crate::{DirArgs, Result, config};

/// The environment variable redis-cli reads a password from; `recached status` reads it too.
pub const AUTH_ENV: &str = "REDISCLI_AUTH";

/// Credential flags of `recached status` (redis-cli's names).
#[derive(Args, Debug, Default, Clone)]
pub struct AuthArgs {
    /// ACL user to authenticate as (with --pass); default: the default user.
    #[arg(long)]
    pub user: Option<String>,
    /// Password for the engines and the proxy; default: $REDISCLI_AUTH, else the config's
    /// requirepass. Visible to `ps`: prefer the environment variable.
    #[arg(short = 'a', long = "pass", visible_alias = "password")]
    pub pass: Option<String>,
    /// Do not warn about a password given on the command line.
    #[arg(long)]
    pub no_auth_warning: bool,
}

/// `AUTH [user] password` as a RESP command.
fn auth_command(user: Option<&str>, pass: &str) -> Vec<u8> {
    let mut args: Vec<&[u8]> = vec![b"AUTH"];
    if let Some(u) = user {
        args.push(u.as_bytes());
    }
    args.push(pass.as_bytes());
    let mut out = Vec::new();
    resp::encode_request(&mut out, &args);
    out
}

/// The `--config` an engine of the fleet was started with (absolute, see `fleet`).
fn config_of_fleet(state: &FleetState) -> Option<PathBuf> {
    state
        .children
        .iter()
        .filter(|c| c.role == Role::Engine)
        .filter_map(|c| c.pid)
        .find_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let mut args = cmd.split(|&b| b == 0);
            args.find(|a| *a == b"--config")?;
            let path = PathBuf::from(String::from_utf8(args.next()?.to_vec()).ok()?);
            (path.is_absolute() && path.is_file()).then_some(path)
        })
}

/// The AUTH command the probes start with, if any credential is known (see the module doc).
fn login(args: &DirArgs, auth: &AuthArgs, state: Option<&FleetState>) -> Option<Vec<u8>> {
    if let Some(p) = &auth.pass {
        if !auth.no_auth_warning {
            eprintln!(
                "Warning: Using a password with '-a' or '--pass' on the command line may not be safe."
            );
        }
        return Some(auth_command(auth.user.as_deref(), p));
    }
    if let Some(p) = std::env::var(AUTH_ENV).ok().filter(|p| !p.is_empty()) {
        return Some(auth_command(auth.user.as_deref(), &p));
    }
    let path = args
        .config
        .clone()
        .or_else(|| state.and_then(config_of_fleet))?;
    let cfg = config::load(Some(&path)).ok()?;
    (!cfg.requirepass.is_empty()).then(|| auth_command(None, &cfg.requirepass))
}

/// The AUTH command for a fleet whose config file is `config` (from its supervisor), by the
/// same rules as `status`: --pass, $REDISCLI_AUTH, else the config's requirepass.
pub fn login_with_config(
    args: &DirArgs,
    auth: &AuthArgs,
    config: Option<&Path>,
) -> Option<Vec<u8>> {
    if auth.pass.is_some() || std::env::var(AUTH_ENV).is_ok_and(|p| !p.is_empty()) {
        return login(args, auth, None);
    }
    let path = args
        .config
        .clone()
        .or_else(|| config.map(Path::to_path_buf))?;
    let cfg = config::load(Some(&path)).ok()?;
    (!cfg.requirepass.is_empty()).then(|| auth_command(None, &cfg.requirepass))
}

/// Connect, write and read timeout of each status probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// A reply larger than this is not what we asked for (INFO memory is ~1 KB).
const MAX_REPLY: usize = 1 << 20;

/// The dir and the stop timeout of the fleet `args` names.
fn target(args: &DirArgs) -> Result<(PathBuf, u64)> {
    let cfg = config::load(args.config.as_deref())?;
    let dir = args.dir.clone().unwrap_or(cfg.dir);
    let dir = std::path::absolute(&dir).map_err(|e| format!("dir {}: {e}", dir.display()))?;
    Ok((dir, cfg.supervisor.stop_timeout_ms))
}

pub fn stop(args: &DirArgs) -> Result<ExitCode> {
    let (dir, stop_timeout_ms) = target(args)?;
    let Some(pid) = running_supervisor(&dir) else {
        println!("recached: no fleet is running on {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    };
    let wait = Duration::from_millis(stop_timeout_ms) + Duration::from_secs(5);
    let deadline = Instant::now() + wait;
    // pid 0 = the supervisor holds the lock but has not written its pid yet (it is starting).
    let mut signalled = false;
    while Instant::now() < deadline {
        if running_supervisor(&dir).is_none() {
            println!("recached: fleet on {} stopped", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        if !signalled {
            let pid = running_supervisor(&dir).unwrap_or(pid);
            if pid > 0 {
                kill(Pid::from_raw(pid as i32), Signal::SIGTERM)
                    .map_err(|e| format!("kill -TERM {pid}: {e}"))?;
                signalled = true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "the supervisor (pid {pid}) on {} did not stop within {} ms",
        dir.display(),
        wait.as_millis()
    ))
}

/// One row of the status table.
struct Row {
    role: String,
    port: Option<u16>,
    pid: Option<u32>,
    state: String,
    uptime_s: Option<u64>,
    keys: Option<u64>,
    used_memory: Option<u64>,
    restarts: Option<u64>,
}

pub fn status(args: &DirArgs, auth: &AuthArgs, json: bool) -> Result<ExitCode> {
    let (dir, _) = target(args)?;
    let Some(sup_pid) = running_supervisor(&dir) else {
        if json {
            println!(
                "{{\"dir\":{},\"running\":false,\"processes\":[]}}",
                json_str(&dir.display().to_string())
            );
        } else {
            println!("recached: no fleet is running on {}", dir.display());
        }
        return Ok(ExitCode::FAILURE);
    };
    let state = state::read(&dir);
    let login = login(args, auth, state.as_ref());
    let mut auth_notes = Vec::new();
    let now = unix_ms();
    let mut rows = vec![Row {
        role: "supervisor".into(),
        port: None,
        pid: Some(sup_pid),
        state: "up".into(),
        uptime_s: state
            .as_ref()
            .map(|s| now.saturating_sub(s.started_unix_ms) / 1000),
        keys: None,
        used_memory: None,
        restarts: None,
    }];
    let mut all_up = state.is_some();
    if let Some(state) = &state {
        for c in &state.children {
            let host = connect_host(c.host.as_deref().unwrap_or(&state.bind));
            let probe = if c.pid.is_some() {
                probe(host, c.port, login.as_deref())
            } else {
                None
            };
            if let Some(e) = probe.as_ref().and_then(|p| p.auth_error.as_ref()) {
                auth_notes.push(format!("{}-{} (port {}): {e}", c.role, c.index, c.port));
            }
            let up = probe.as_ref().is_some_and(|p| p.pong);
            all_up &= up;
            rows.push(Row {
                role: format!("{}-{}", c.role, c.index),
                port: Some(c.port),
                pid: c.pid,
                state: match (&probe, c.pid) {
                    (_, None) => c.state.name().into(),
                    (Some(p), _) if p.pong => "up".into(),
                    _ if c.state != RunState::Running => c.state.name().into(),
                    _ => "down".into(),
                },
                uptime_s: c.pid.map(|_| now.saturating_sub(c.started_unix_ms) / 1000),
                keys: probe.as_ref().and_then(|p| p.keys),
                used_memory: probe.as_ref().and_then(|p| p.used_memory),
                restarts: Some(c.restarts),
            });
        }
    }
    if json {
        print_json(&dir, &rows);
    } else {
        print_table(&dir, &rows);
    }
    if !auth_notes.is_empty() {
        let hint = if login.is_some() {
            "the password given was refused"
        } else {
            "give a password with --pass/-a (and --user), $REDISCLI_AUTH, or --config"
        };
        eprintln!(
            "recached status: no keys or memory from {} ({hint})",
            auth_notes.join("; ")
        );
    }
    Ok(if all_up {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_table(dir: &std::path::Path, rows: &[Row]) {
    let dash = || "-".to_string();
    println!("fleet on {}", dir.display());
    println!(
        "{:<12} {:>6} {:>8} {:<10} {:>9} {:>10} {:>11} {:>8}",
        "ROLE", "PORT", "PID", "STATE", "UPTIME", "KEYS", "USED_MEMORY", "RESTARTS"
    );
    for r in rows {
        println!(
            "{:<12} {:>6} {:>8} {:<10} {:>9} {:>10} {:>11} {:>8}",
            r.role,
            r.port.map_or_else(dash, |p| p.to_string()),
            r.pid.map_or_else(dash, |p| p.to_string()),
            r.state,
            r.uptime_s.map_or_else(dash, human_duration),
            r.keys.map_or_else(dash, |k| k.to_string()),
            r.used_memory.map_or_else(dash, human_bytes),
            r.restarts.map_or_else(dash, |n| n.to_string()),
        );
    }
}

fn print_json(dir: &std::path::Path, rows: &[Row]) {
    fn opt<T: ToString>(v: Option<T>) -> String {
        v.map_or_else(|| "null".into(), |v| v.to_string())
    }
    let procs: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"role\":{},\"port\":{},\"pid\":{},\"state\":{},\"uptime_s\":{},\"keys\":{},\"used_memory\":{},\"restarts\":{}}}",
                json_str(&r.role),
                opt(r.port),
                opt(r.pid),
                json_str(&r.state),
                opt(r.uptime_s),
                opt(r.keys),
                opt(r.used_memory),
                opt(r.restarts)
            )
        })
        .collect();
    println!(
        "{{\"dir\":{},\"running\":true,\"processes\":[{}]}}",
        json_str(&dir.display().to_string()),
        procs.join(",")
    );
}

/// A JSON string literal (RFC 8259 §7: quote, backslash and control characters escaped).
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn human_duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Like Redis's `used_memory_human` (1024-based, B/K/M/G).
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["K", "M", "G", "T"];
    if b < 1024 {
        return format!("{b}B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2}{}", UNITS[unit])
}

/// What one child answered.
#[derive(Debug, Default)]
struct Probe {
    /// `+PONG`, or an authentication error to PING (the process answers: it is up).
    pong: bool,
    keys: Option<u64>,
    used_memory: Option<u64>,
    /// `-NOAUTH …` / `-WRONGPASS …`: the credential is missing or wrong.
    auth_error: Option<String>,
}

/// Whether an error reply is about authentication (Redis's NOAUTH and WRONGPASS codes).
fn is_auth_error(e: &str) -> bool {
    e.starts_with("NOAUTH") || e.starts_with("WRONGPASS")
}

/// [`AUTH`, ] PING, DBSIZE, INFO memory in one pipeline; `None` if the port does not
/// answer at all. `login`: an AUTH command to send first.
fn probe(host: &str, port: u16, login: Option<&[u8]>) -> Option<Probe> {
    let mut stream = recached_net::listen::connect(host, port, PROBE_TIMEOUT).ok()?;
    let mut req = login.unwrap_or_default().to_vec();
    for cmd in [&["PING"][..], &["DBSIZE"], &["INFO", "memory"]] {
        resp::encode_request(&mut req, cmd);
    }
    stream.write_all(&req).ok()?;
    let mut r = ReplyReader::new(stream, MAX_REPLY);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    // Each reply is read even if an earlier one was an error, to stay in step.
    let mut p = Probe::default();
    if login.is_some() {
        // The fan-out answers AUTH with an error of its own (it has no passwords): only
        // WRONGPASS matters here.
        if let Ok(Value::Error(e)) = r.read()
            && is_auth_error(&text(&e))
        {
            p.auth_error = Some(text(&e));
        }
    }
    match r.read() {
        Ok(Value::Simple(s)) => p.pong = s == b"PONG",
        Ok(Value::Error(e)) if is_auth_error(&text(&e)) => {
            p.pong = true;
            p.auth_error.get_or_insert(text(&e));
        }
        _ => {}
    }
    if let Ok(Value::Integer(n)) = r.read() {
        p.keys = u64::try_from(n).ok();
    }
    if let Ok(Value::Bulk(info) | Value::Verbatim { text: info, .. }) = r.read() {
        p.used_memory = info_field(&text(&info), "used_memory").and_then(|v| v.parse().ok());
    }
    Some(p)
}

/// `field:value` from an INFO reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info = "# Memory\r\nused_memory:123456\r\nfoo:1\r\n";
        assert_eq!(info_field(info, "used_memory"), Some("123456"));
        assert_eq!(info_field(info, "foo"), Some("1"));
        assert_eq!(info_field(info, "bar"), None);
    }

    #[test]
    fn auth_commands() {
        assert_eq!(
            auth_command(None, "p w"),
            b"*2\r\n$4\r\nAUTH\r\n$3\r\np w\r\n".to_vec()
        );
        assert_eq!(
            auth_command(Some("app"), "x"),
            b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$1\r\nx\r\n".to_vec()
        );
        assert!(is_auth_error("NOAUTH Authentication required."));
        assert!(is_auth_error(
            "WRONGPASS invalid username-password pair or user is disabled."
        ));
        assert!(!is_auth_error("ERR this is the recached fan-out"));
    }

    #[test]
    fn formats() {
        assert_eq!(json_str("a\"b\\\n\u{1}"), "\"a\\\"b\\\\\\n\\u0001\"");
        assert_eq!(human_bytes(1000), "1000B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 << 20), "3.00M");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(61), "1m01s");
        assert_eq!(human_duration(7200), "2h00m");
    }
}
