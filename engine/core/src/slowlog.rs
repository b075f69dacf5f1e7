//! SLOWLOG (redis `slowlog.c`, 7.0): the commands that ran at least
//! `slowlog-log-slower-than` µs (default 10,000; negative: off; 0: every command), newest
//! first, at most `slowlog-max-len` (default 128) kept.
//!
//! An entry is `[id, unix time s, duration µs, argv, "ip:port", client name]`. Its argv keeps
//! at most 32 arguments (the 32nd becomes `... (N more arguments)`) of at most 128 bytes each
//! (then `... (N more bytes)`), and Redis's redactions: AUTH and HELLO's AUTH credentials,
//! ACL SETUSER's rules, CONFIG SET of `masterauth`/`masteruser`/TLS passphrases, MIGRATE's
//! AUTH/AUTH2 credentials (`redactClientCommandArgument`). EXEC is not logged (the commands it
//! ran are); a command that blocked is logged when it is answered; commands a script runs
//! are not (only the EVAL/FCALL). Durations come from the host's timer
//! ([`crate::HostInfo::timer`]); without one (wasm) nothing is logged.

use std::collections::VecDeque;

use crate::call::Call;
use crate::command::{CommandSpec, Flags};
use crate::error::CmdError;
use crate::{Client, Engine};

const MAX_ARGC: usize = 32;
const MAX_STRING: usize = 128;
const REDACTED: &[u8] = b"(redacted)";

#[derive(Debug)]
pub struct SlowLog {
    entries: VecDeque<Entry>,
    next_id: u64,
    /// `slowlog-log-slower-than`, µs.
    pub slower_than: i64,
    /// `slowlog-max-len`.
    pub max_len: u64,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: VecDeque::new(),
            next_id: 0,
            slower_than: 10_000,
            max_len: 128,
        }
    }
}

#[derive(Debug)]
struct Entry {
    id: u64,
    time_s: u64,
    duration_us: u64,
    argv: Vec<Vec<u8>>,
    peer: String,
    name: Vec<u8>,
}

impl SlowLog {
    /// Whether a command of this duration is logged.
    #[inline]
    pub fn wants(&self, duration_us: u64) -> bool {
        self.slower_than >= 0 && duration_us >= self.slower_than as u64
    }

    /// Logs a command that ran `duration_us` (the caller checked [`SlowLog::wants`]).
    pub fn push(
        &mut self,
        spec: &CommandSpec,
        argv: &[&[u8]],
        client: &Client,
        now_us: u64,
        duration_us: u64,
    ) {
        if spec.has_flag(Flags::SKIP_SLOWLOG) {
            return;
        }
        let argc = argv.len().min(MAX_ARGC);
        let mut kept = Vec::with_capacity(argc);
        for (i, a) in argv.iter().take(argc).enumerate() {
            if argc < argv.len() && i == argc - 1 {
                kept.push(format!("... ({} more arguments)", argv.len() - argc + 1).into_bytes());
            } else if redacted(spec, argv, i) {
                kept.push(REDACTED.to_vec());
            } else if a.len() > MAX_STRING {
                let mut s = a[..MAX_STRING].to_vec();
                s.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes(),
                );
                kept.push(s);
            } else {
                kept.push(a.to_vec());
            }
        }
        self.entries.push_front(Entry {
            id: self.next_id,
            time_s: now_us / 1_000_000,
            duration_us,
            argv: kept,
            peer: client.addr.clone(),
            name: client.name.clone().unwrap_or_default(),
        });
        self.next_id += 1;
        self.trim();
    }

    fn trim(&mut self) {
        while self.entries.len() as u64 > self.max_len {
            self.entries.pop_back();
        }
    }
}

/// Whether argument `i` is one Redis redacts for `spec` (its `redactClientCommandArgument`
/// calls: authCommand, helloCommand, aclCommand SETUSER, configSetCommand, migrateCommand).
fn redacted(spec: &CommandSpec, argv: &[&[u8]], i: usize) -> bool {
    let after = |word: &[u8], n: usize| {
        argv.iter()
            .enumerate()
            .skip(1)
            .any(|(j, a)| a.eq_ignore_ascii_case(word) && i > j && i <= j + n)
    };
    match spec.name {
        "auth" => i >= 1,
        "hello" => after(b"auth", 2),
        "acl|setuser" => i >= 2,
        "config|set" => {
            i >= 3
                && i % 2 == 1
                && [
                    b"masterauth".as_slice(),
                    b"masteruser",
                    b"tls-key-file-pass",
                    b"tls-client-key-file-pass",
                ]
                .iter()
                .any(|p| argv[i - 1].eq_ignore_ascii_case(p))
        }
        "migrate" => after(b"auth", 1) || after(b"auth2", 2),
        _ => false,
    }
}

/// SLOWLOG GET [count]: the newest `count` entries (default 10, -1: all).
pub fn slowlog_get(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let count = match c.argv.get(2) {
        None => 10,
        Some(a) => match crate::args::parse_i64(a) {
            Some(n) if n >= -1 => {
                if n == -1 {
                    usize::MAX
                } else {
                    n as usize
                }
            }
            _ => {
                return Err(CmdError::Static(
                    "ERR count should be greater than or equal to -1",
                ));
            }
        },
    };
    let n = e.slowlog.entries.len().min(count);
    let mut w = c.w();
    w.array(n);
    for entry in e.slowlog.entries.iter().take(n) {
        w.array(6);
        w.integer(entry.id as i64);
        w.integer(entry.time_s as i64);
        w.integer(entry.duration_us as i64);
        w.array(entry.argv.len());
        for a in &entry.argv {
            w.bulk(a);
        }
        w.bulk(entry.peer.as_bytes());
        w.bulk(&entry.name);
    }
    Ok(())
}

pub fn slowlog_len(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.w().integer(e.slowlog.entries.len() as i64);
    Ok(())
}

pub fn slowlog_reset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    e.slowlog.entries.clear();
    c.w().simple(b"OK");
    Ok(())
}

pub fn slowlog_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    const HELP: &[&str] = &[
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "    Entries are made of:",
        "    id, timestamp, time in microseconds, arguments array, client IP and port,",
        "    client name",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(HELP.len());
    for line in HELP {
        w.simple(line.as_bytes());
    }
    Ok(())
}
