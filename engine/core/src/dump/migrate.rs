//! MIGRATE (redis `migrateCommand`): DUMP the keys, send `[AUTH] [SELECT] RESTORE…` to the
//! target over a cached connection, read the replies, delete the keys the target took unless
//! COPY. Blocking with the timeout, like Redis.
//!
//! `SLOTHANDOFF key…` is the source's last step of a move that `recached resize` runs itself
//! (supervisor `slotmove`, *Relay*): the keys, locked here with `TXLOCK … DUMP`, have been
//! restored on the slot's new owner with `RESTORE-ASKING`, so they are deleted here as
//! MIGRATE deletes the keys its target took (keyspace event `del`; the feed records
//! `MIGRATED k` in cluster mode). The source never waits for the target meanwhile.
//!
//! The core does no I/O: the server installs [`Sockets`] in [`Engine::migrate`] (its cache of
//! connections by `host:port`, each remembering the database last selected, as Redis's
//! `migrateCachedSocket`). Without it (a library user, the browser replica) MIGRATE fails as
//! an unreachable target does.

use crate::Engine;
use crate::args;
use crate::call::Call;
use crate::error::CmdError;
use crate::notify::{class, notify};

/// A failed socket operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoFail {
    /// It ran out of time (redis retries other failures once, never a timeout).
    pub timed_out: bool,
}

/// One cached connection to a target.
pub trait Conn {
    /// The database the connection has selected, if known.
    fn last_db(&self) -> Option<i64>;
    fn set_last_db(&mut self, db: Option<i64>);
    /// Writes all of `buf` within `timeout_ms`.
    fn write_all(&mut self, buf: &[u8], timeout_ms: u64) -> Result<(), IoFail>;
    /// Reads one reply line within `timeout_ms`, without its CRLF (redis `connSyncReadLine`).
    fn read_line(&mut self, timeout_ms: u64) -> Result<Vec<u8>, IoFail>;
}

/// The server's connection cache.
pub trait Sockets: Send {
    /// The connection to `host:port`, cached or opened now within `timeout_ms`; `None` when
    /// it cannot be opened.
    fn get(&mut self, host: &[u8], port: &[u8], timeout_ms: u64) -> Option<&mut dyn Conn>;
    /// Drops the cached connection to `host:port` (after an error: the next use reconnects).
    fn close(&mut self, host: &[u8], port: &[u8]);
    /// Connections cached (INFO `migrate_cached_sockets`).
    fn cached(&self) -> usize;
    /// Closes connections unused for too long ([`Engine::cron`], redis
    /// `migrateCloseTimedoutSockets`).
    fn cron(&mut self) {}
}

const CONNECT_ERR: &str = "IOERR error or timeout connecting to the client";

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password]
/// [AUTH2 username password] [KEYS key…]` → `OK`, `NOKEY`, or Redis's IOERR / target errors.
pub fn migrate(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (mut copy, mut replace) = (false, false);
    let mut username: Option<&[u8]> = None;
    let mut password: Option<&[u8]> = None;
    let (mut first_key, mut num_keys) = (3, 1);
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if args::is(argv[j], "copy") {
            copy = true;
        } else if args::is(argv[j], "replace") {
            replace = true;
        } else if args::is(argv[j], "auth") {
            if more == 0 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            password = Some(argv[j]);
        } else if args::is(argv[j], "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            username = Some(argv[j + 1]);
            password = Some(argv[j + 2]);
            j += 2;
        } else if args::is(argv[j], "keys") {
            if !argv[3].is_empty() {
                return Err(CmdError::Static(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            first_key = j + 1;
            num_keys = argv.len() - j - 1;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let mut timeout = resp::parse_i64(argv[5]).ok_or(CmdError::NotInteger)?;
    let dbid = resp::parse_i64(argv[4]).ok_or(CmdError::NotInteger)?;
    if timeout <= 0 {
        timeout = 1000;
    }
    let timeout = timeout as u64;
    // The keys here (all missing: NOKEY, not an error: they may just have expired).
    let mut items: Vec<(&[u8], i64, Vec<u8>)> = Vec::new();
    for &key in &argv[first_key..first_key + num_keys] {
        if let Some(i) = e.ks.lookup_read(key, c.now_ms) {
            let ttl = match e.ks.expire_at(i) {
                None => 0,
                Some(at) => (at as i64 - c.now_ms as i64).max(1),
            };
            let fill = e.config.encoding.list_max_listpack_size;
            items.push((key, ttl, super::serialize_with(e.ks.value(i), fill)));
        }
    }
    if items.is_empty() {
        c.w().simple(b"NOKEY");
        return Ok(());
    }
    let Some(mut sockets) = e.migrate.take() else {
        return Err(CmdError::Static(CONNECT_ERR));
    };
    let result = run(
        e,
        c,
        &mut *sockets,
        &items,
        Options {
            copy,
            replace,
            username,
            password,
            dbid,
            timeout,
            // redis sends RESTORE-ASKING in cluster mode, so a target importing the slot
            // accepts the keys (`getNodeByQuery`, CMD_ASKING).
            asking: e.cluster.enabled(),
        },
    );
    e.migrate = Some(sockets);
    result
}

struct Options<'a> {
    copy: bool,
    replace: bool,
    username: Option<&'a [u8]>,
    password: Option<&'a [u8]>,
    dbid: i64,
    timeout: u64,
    asking: bool,
}

/// The exchange with the target, retried once on a socket error that is not a timeout when
/// nothing was processed yet (redis's `try_again` / `socket_err`).
fn run(
    e: &mut Engine,
    c: &mut Call,
    sockets: &mut dyn Sockets,
    items: &[(&[u8], i64, Vec<u8>)],
    o: Options<'_>,
) -> Result<(), CmdError> {
    let (host, port) = (c.argv[1], c.argv[2]);
    let mut may_retry = true;
    loop {
        let Some(conn) = sockets.get(host, port, o.timeout) else {
            return Err(CmdError::Static(CONNECT_ERR));
        };
        let mut cmd = Vec::new();
        if let Some(pw) = o.password {
            array(&mut cmd, if o.username.is_some() { 3 } else { 2 });
            bulk(&mut cmd, b"AUTH");
            if let Some(u) = o.username {
                bulk(&mut cmd, u);
            }
            bulk(&mut cmd, pw);
        }
        let select = conn.last_db() != Some(o.dbid);
        if select {
            array(&mut cmd, 2);
            bulk(&mut cmd, b"SELECT");
            bulk(&mut cmd, itoa::Buffer::new().format(o.dbid).as_bytes());
        }
        for (key, ttl, payload) in items {
            array(&mut cmd, if o.replace { 5 } else { 4 });
            bulk(
                &mut cmd,
                if o.asking {
                    b"RESTORE-ASKING"
                } else {
                    b"RESTORE"
                },
            );
            bulk(&mut cmd, key);
            bulk(&mut cmd, itoa::Buffer::new().format(*ttl).as_bytes());
            bulk(&mut cmd, payload);
            if o.replace {
                bulk(&mut cmd, b"REPLACE");
            }
        }
        // What failed, if the socket did: (writing?, timed out?).
        let mut fail: Option<(bool, bool)> = None;
        let mut auth_reply = Vec::new();
        let mut select_reply = Vec::new();
        if let Err(f) = conn.write_all(&cmd, o.timeout) {
            fail = Some((true, f.timed_out));
        }
        if fail.is_none() && o.password.is_some() {
            match conn.read_line(o.timeout) {
                Ok(l) => auth_reply = l,
                Err(f) => fail = Some((false, f.timed_out)),
            }
        }
        if fail.is_none() && select {
            match conn.read_line(o.timeout) {
                Ok(l) => select_reply = l,
                Err(f) => fail = Some((false, f.timed_out)),
            }
        }
        if fail.is_none() {
            let mut target_error: Option<String> = None;
            let mut socket_error: Option<IoFail> = None;
            let mut done = 0;
            for (key, _, _) in items {
                let line = match conn.read_line(o.timeout) {
                    Ok(l) => l,
                    Err(f) => {
                        socket_error = Some(f);
                        break;
                    }
                };
                done += 1;
                let err = [&auth_reply, &select_reply, &line]
                    .into_iter()
                    .find(|l| l.first() == Some(&b'-'));
                if let Some(errline) = err {
                    if target_error.is_none() {
                        conn.set_last_db(None);
                        target_error = Some(format!(
                            "ERR Target instance replied with error: {}",
                            String::from_utf8_lossy(&errline[1..])
                        ));
                    }
                } else if !o.copy {
                    hand_off(e, key, c.now_ms);
                }
            }
            if target_error.is_none() && socket_error.is_none() {
                // Success: the next MIGRATE to this target needs no SELECT.
                conn.set_last_db(Some(o.dbid));
                c.w().ok();
                return Ok(());
            }
            if let Some(f) = socket_error {
                sockets.close(host, port);
                if target_error.is_none() {
                    if done == 0 && may_retry && !f.timed_out {
                        may_retry = false;
                        continue;
                    }
                    return Err(CmdError::Static(
                        "IOERR error or timeout reading to target instance",
                    ));
                }
            }
            let msg = target_error.expect("a target error");
            return Err(CmdError::Other(msg));
        }
        let (writing, timed_out) = fail.expect("a socket failure");
        sockets.close(host, port);
        if !timed_out && may_retry {
            may_retry = false;
            continue;
        }
        return Err(CmdError::Other(format!(
            "IOERR error or timeout {} to target instance",
            if writing { "writing" } else { "reading" }
        )));
    }
}

/// Deletes a key another node has taken: `del` to keyspace notifications, like Redis's MIGRATE
/// (the feed's `MIGRATED k` is derived from the command, `crate::effect`). Whether it existed.
fn hand_off(e: &mut Engine, key: &[u8], now_ms: u64) -> bool {
    let gone = e.ks.delete(key, now_ms);
    if gone {
        notify(e, class::GENERIC, "del", key);
    }
    gone
}

/// `SLOTHANDOFF key [key …]` (module docs) → the number of keys deleted.
pub fn slothandoff(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut n = 0;
    for key in &c.argv[1..] {
        n += i64::from(hand_off(e, key, c.now_ms));
    }
    c.w().integer(n);
    Ok(())
}
