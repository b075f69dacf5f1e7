//! MONITOR: every command run, as one line to each client in monitor mode (redis
//! `monitorCommand` and `replicationFeedMonitors`, Redis 7.0).
//!
//! A line is a simple string written after the command ran, for commands that reached their
//! handler (not those refused before: unknown, arity, ACL, MOVED, queued in MULTI; EXEC's
//! commands each get their line, then EXEC's), except rows flagged `admin` or `skip_monitor`
//! (CONFIG, CLIENT LIST, MONITOR itself…):
//!
//! ```text
//! +<unix seconds>.<microseconds, 6 digits> [<db> <client ip:port>] "arg0" "arg1" …\r\n
//! ```
//!
//! Each argument is quoted as redis `sdscatrepr` does (`\\ \" \n \r \t \a \b`, other
//! unprintable bytes `\xhh`); AUTH's arguments and HELLO's `AUTH user pass` are shown as
//! `"(redacted)"`. The `<db>` is the client's database after the command (a `SELECT 1` shows 1).
//!
//! A client in monitor mode is refused commands that read or write the keyspace or may
//! replicate (`-ERR Replica can't interact with the keyspace`, as Redis treats monitors like
//! replicas); RESET ends monitor mode. Cost while nobody monitors: one emptiness test per
//! command.

use crate::call::Call;
use crate::command::{CommandSpec, Flags};
use crate::error::CmdError;
use crate::{Client, Delivery, Engine};

/// `MONITOR` → `+OK`; the connection then receives a line for every command. Inside
/// EXEC Redis refuses it (the client may not block); a second MONITOR is ignored without a
/// reply, as Redis does.
pub fn monitor(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.client.tx.in_exec {
        return Err(CmdError::Static(
            "ERR MONITOR isn't allowed for DENY BLOCKING client",
        ));
    }
    if c.client.monitor {
        return Ok(());
    }
    c.client.monitor = true;
    e.monitors.push(c.client.id);
    c.w().ok();
    Ok(())
}

/// Whether a monitor client is refused `spec` (redis `processCommand`: a replica may not run
/// read, write or may-replicate commands; Redis 7.0's may-replicate rows are listed by name,
/// since COMMAND INFO does not show that flag).
pub fn refused(client: &Client, spec: &CommandSpec) -> bool {
    client.monitor && touches_keyspace(spec)
}

/// Read, write and may-replicate rows: what a monitor (a replica, to Redis) may not run. The
/// proxy applies the same rule to its monitor clients.
pub fn touches_keyspace(spec: &CommandSpec) -> bool {
    spec.has_flag(Flags::WRITE)
        || spec.has_flag(Flags::READONLY)
        || matches!(
            spec.name,
            "publish" | "spublish" | "eval" | "evalsha" | "fcall" | "pfcount"
        )
}

/// The error for [`refused`].
pub const REFUSED: &str = "ERR Replica can't interact with the keyspace";

/// Ends monitor mode (RESET, disconnect).
pub fn stop(e: &mut Engine, client_id: u64) {
    e.monitors.retain(|&id| id != client_id);
}

/// After a command ran: its line to every monitor. The running client's own line (a monitor
/// running PING) follows its reply in `out`, as Redis appends it after the reply.
pub fn feed(
    e: &mut Engine,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
) {
    if spec.has_flag(Flags::ADMIN) || spec.has_flag(Flags::SKIP_MONITOR) {
        return;
    }
    feed_always(e, client, spec, argv, now_us, out);
}

/// [`feed`] without the flag test: EVAL (`skip_monitor`) feeds its own line before the
/// commands its script runs, as redis `evalCommand` does.
pub fn feed_always(
    e: &mut Engine,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
) {
    let line = line(client, spec, argv, now_us);
    for i in 0..e.monitors.len() {
        let id = e.monitors[i];
        if id == client.id {
            out.extend_from_slice(&line);
        } else {
            e.deliveries.push(Delivery {
                client_id: id,
                bytes: line.clone(),
                unblock: false,
            });
        }
    }
}

/// One MONITOR line (see the module docs).
pub fn line(client: &Client, spec: &CommandSpec, argv: &[&[u8]], now_us: u64) -> Vec<u8> {
    line_of(client.db, &client.addr, spec.name, argv, now_us)
}

/// One MONITOR line of the command `name` (a table row's name, for the redactions) run with
/// `argv` by the client at `addr` in database `db`; also the proxy's, for the commands it
/// answers itself.
pub fn line_of(db: usize, addr: &str, name: &str, argv: &[&[u8]], now_us: u64) -> Vec<u8> {
    let mut s = Vec::with_capacity(64 + argv.iter().map(|a| a.len() + 3).sum::<usize>());
    s.push(b'+');
    s.extend_from_slice(itoa::Buffer::new().format(now_us / 1_000_000).as_bytes());
    s.extend_from_slice(format!(".{:06} [", now_us % 1_000_000).as_bytes());
    s.extend_from_slice(itoa::Buffer::new().format(db).as_bytes());
    s.push(b' ');
    s.extend_from_slice(addr.as_bytes());
    s.push(b']');
    let redacted = |i: usize| match name {
        "auth" => i >= 1,
        "hello" => argv
            .iter()
            .enumerate()
            .skip(2)
            .any(|(j, a)| a.eq_ignore_ascii_case(b"auth") && (i == j + 1 || i == j + 2)),
        _ => false,
    };
    for (i, a) in argv.iter().enumerate() {
        s.push(b' ');
        if redacted(i) {
            s.extend_from_slice(b"\"(redacted)\"");
        } else {
            repr(&mut s, a);
        }
    }
    s.extend_from_slice(b"\r\n");
    s
}

/// redis `sdscatrepr`: a double-quoted, escaped copy of `bytes`.
pub fn repr(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_escapes_as_redis() {
        let mut s = Vec::new();
        repr(&mut s, b"a\"b\\c\n\r\t\x07\x08\x00\xff ~");
        assert_eq!(s, br#""a\"b\\c\n\r\t\a\b\x00\xff ~""#);
    }
}
