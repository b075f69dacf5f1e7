//! CLIENT PAUSE / UNPAUSE (redis `networking.c` pauseClients, `server.c` processCommand).
//!
//! While clients are paused, a command that would run — with `ALL` any command, with `WRITE`
//! one that may replicate (a write, EXEC of a transaction holding one, PUBLISH, SPUBLISH,
//! PFCOUNT, and EVAL/EVALSHA/FCALL unless the script declares `no-writes`) — is not run: the
//! dispatcher answers [`Flow::Postpone`](crate::Flow::Postpone), the server leaves the request
//! in the client's input and runs nothing more of it, and the client counts as blocked
//! (INFO `blocked_clients`). When the pause ends (UNPAUSE, its time passing — checked by each
//! command and each cron tick — or a pause of a lesser kind replacing it) every postponed
//! client gets an empty unblocking delivery, and the server runs its input again, in the
//! order the clients were postponed; a command still paused is postponed again.
//!
//! Commands that fail their checks (arity, ACL…) are answered at once, as in Redis. Queued
//! transaction commands are accepted (only EXEC is postponed), and a pause asked for inside
//! a transaction starts once EXEC is over. While paused, keys are neither expired nor evicted:
//! a key past its TTL reads as missing but stays (`crate::keyspace`), as Redis does so that a
//! paused primary and its replicas keep the same data.

use crate::call::Call;
use crate::command::{CommandSpec, Flags};
use crate::error::CmdError;
use crate::{Client, Delivery, Engine};

/// What is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Kind {
    #[default]
    Off,
    Write,
    All,
}

#[derive(Debug, Default)]
pub struct Pause {
    pub kind: Kind,
    /// Unix µs the pause ends at.
    pub end_us: u64,
    /// Postponed clients, in the order they were postponed.
    pub postponed: Vec<u64>,
}

impl Pause {
    /// Whether keys must not be expired or evicted now.
    #[inline]
    pub fn active(&self) -> bool {
        self.kind != Kind::Off
    }
}

/// Whether `client`'s command must wait (and the pause, if its time passed, is ended first).
pub fn postpones(
    e: &mut Engine,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_us: u64,
) -> bool {
    if now_us >= e.pause.end_us {
        end(e);
        return false;
    }
    match e.pause.kind {
        Kind::Off => false,
        Kind::All => true,
        Kind::Write => may_replicate(e, client, spec, argv),
    }
}

/// redis `is_may_replicate_command` with the script's flags (`evalGetCommandFlags`).
fn may_replicate(e: &Engine, client: &Client, spec: &CommandSpec, argv: &[&[u8]]) -> bool {
    match spec.name {
        "exec" => client.tx.queued_commands().any(|argv| {
            let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            crate::dispatch::resolve(&args)
                .is_ok_and(|(spec, _)| spec.name != "exec" && may_replicate(e, client, spec, &args))
        }),
        "publish" | "spublish" | "pfcount" => true,
        "eval" | "evalsha" | "fcall" => e
            .scripting
            .as_ref()
            .is_none_or(|s| s.may_write(spec.name, argv)),
        _ => spec.has_flag(Flags::WRITE),
    }
}

/// Ends the pause: every postponed client is handed back to the server to run again.
pub fn end(e: &mut Engine) {
    e.pause.kind = Kind::Off;
    e.pause.end_us = 0;
    e.ks.expire_paused = false;
    for id in std::mem::take(&mut e.pause.postponed) {
        e.deliveries.push(Delivery {
            client_id: id,
            bytes: Vec::new(),
            unblock: true,
        });
    }
}

/// Each cron tick: a pause whose time has passed ends.
pub fn cron(e: &mut Engine, now_us: u64) {
    if e.pause.active() && now_us >= e.pause.end_us {
        end(e);
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL]: the longer end and the stricter kind of this and any
/// pause in force (redis `pauseClients`).
pub fn client_pause(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 4 {
        return Err(CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            crate::error::c_str_lossy(c.argv[1], 128)
        )));
    }
    let kind = match c.argv.get(3) {
        None => Kind::All,
        Some(m) if m.eq_ignore_ascii_case(b"write") => Kind::Write,
        Some(m) if m.eq_ignore_ascii_case(b"all") => Kind::All,
        Some(_) => {
            return Err(CmdError::Static(
                "ERR CLIENT PAUSE mode must be WRITE or ALL",
            ));
        }
    };
    // getTimeoutFromObjectOrReply(…, UNIT_MILLISECONDS): an integer of ms, not negative.
    let ms = match crate::args::parse_i64(c.argv[2]) {
        Some(ms) if ms >= 0 => ms as u64,
        Some(_) => return Err(CmdError::Static("ERR timeout is negative")),
        None => {
            return Err(CmdError::Static(
                "ERR timeout is not an integer or out of range",
            ));
        }
    };
    let end_us = c.now_us.saturating_add(ms.saturating_mul(1000));
    // Never less strict nor shorter than a pause in force (one purpose: the command's).
    e.pause.kind = e.pause.kind.max(kind);
    e.pause.end_us = e.pause.end_us.max(end_us);
    e.ks.expire_paused = true;
    c.w().simple(b"OK");
    Ok(())
}

/// CLIENT UNPAUSE.
pub fn client_unpause(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if e.pause.active() {
        end(e);
    }
    c.w().simple(b"OK");
    Ok(())
}
