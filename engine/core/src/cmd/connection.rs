//! Connection commands: PING ECHO QUIT RESET SELECT HELLO and CLIENT
//! (SETNAME GETNAME ID INFO LIST KILL HELP), with redis 7.0 `networking.c` / `server.c` semantics.
//!
//! SELECT chooses one of `databases` databases (per connection, `Client::db`).
//! HELLO's AUTH option and RESET's return to the default user follow `crate::acl`.

use std::fmt::Write as _;

use crate::args::{self, int_arg};
use crate::call::{Call, help};
use crate::error::{CmdError, c_str_lossy};
use crate::{Client, Engine, Flow, Proto};

/// Version reported to clients, which gate features on it (HELLO, INFO `redis_version`).
pub const REDIS_VERSION: &str = "7.0.15";

/// `PING [message]` → PONG | message.
pub fn ping(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() <= 2 && crate::cmd::pubsub::resp2_subscribed(c.client) {
        // RESP2 subscribed mode: `[pong, message|""]` (redis `pingCommand`).
        let m = c.argv.get(1).copied().unwrap_or(b"");
        let mut w = c.w();
        w.array(2);
        w.bulk(b"pong");
        w.bulk(m);
        return Ok(());
    }
    match c.argv.len() {
        1 => c.w().simple(b"PONG"),
        2 => {
            let m = c.argv[1];
            c.w().bulk(m)
        }
        _ => return Err(CmdError::Arity("ping")),
    }
    Ok(())
}

/// `ECHO message` → message.
pub fn echo(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let m = c.argv[1];
    c.w().bulk(m);
    Ok(())
}

/// `QUIT` → OK, then the server closes the connection.
pub fn quit(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.w().ok();
    c.flow = Flow::Close;
    Ok(())
}

/// `RESET` → RESET: back to RESP2, no name, database 0, the default user (authenticated only
/// if it needs no password), like redis `clearClientConnectionState`.
pub fn reset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.client.monitor {
        c.client.monitor = false;
        crate::monitor::stop(e, c.client.id);
    }
    crate::cmd::tx::reset_client(e, c.client);
    crate::cmd::pubsub::reset_client(e, c.client);
    crate::tracking::reset_client(e, c.client.id);
    e.init_client(c.client);
    c.client.proto = Proto::Resp2;
    e.tracking.conn_proto(c.client.id, Proto::Resp2);
    c.client.name = None;
    c.client.db = 0;
    c.w().simple(b"RESET");
    Ok(())
}

/// `SELECT index` → OK; `ERR DB index is out of range` outside `0..databases`. Also in
/// cluster mode, where Redis 7.0 answers `ERR SELECT is not allowed in cluster mode` and
/// Valkey 9 allows every database (docs/cluster.md "Databases": the proxy's database links
/// and smart clients rely on it). The dispatcher swaps the client's database in before
/// each of its commands.
pub fn select(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let id = int_arg(c.argv[1])?;
    if i32::try_from(id).is_err() {
        // redis `getRangeLongFromObjectOrReply` (INT_MIN..INT_MAX), its wording included.
        return Err(CmdError::Static(
            "ERR value is out of range, value must between -2147483648 and 2147483647",
        ));
    }
    c.client.db = db_index(e, id)?;
    c.w().ok();
    Ok(())
}

/// A database number in `0..databases` (redis `selectDb`'s range check).
pub(crate) fn db_index(e: &Engine, id: i64) -> Result<usize, CmdError> {
    usize::try_from(id)
        .ok()
        .filter(|&n| n < e.databases())
        .ok_or(CmdError::DbIndexOutOfRange)
}

/// redis `clientSetNameOrReply`: empty clears the name; bytes outside `!`..`~` are refused.
fn set_name(client: &mut Client, name: &[u8]) -> Result<(), CmdError> {
    if name.is_empty() {
        client.name = None;
        return Ok(());
    }
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(CmdError::Static(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    client.name = Some(name.to_vec());
    Ok(())
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]` → server properties map.
pub fn hello(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut ver = None;
    let mut j = 1;
    if argv.len() >= 2 {
        let v = args::parse_i64(argv[1]).ok_or(CmdError::Static(
            "ERR Protocol version is not an integer or out of range",
        ))?;
        if !(2..=3).contains(&v) {
            return Err(CmdError::Static("NOPROTO unsupported protocol version"));
        }
        ver = Some(v);
        j = 2;
    }
    // redis `helloCommand`: options take effect left to right, so an error stops there and
    // keeps what came before it (a name set, a user authenticated); only the protocol switch
    // waits for the whole request to succeed.
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if args::is(argv[j], "auth") && more >= 2 {
            let who = crate::acl::Who::of(c.client, c.now_us);
            if !e
                .acl
                .authenticate(&mut c.client.auth, argv[j + 1], argv[j + 2], &who)
            {
                return Err(CmdError::Static(crate::acl::WRONGPASS));
            }
            j += 3;
        } else if args::is(argv[j], "setname") && more >= 1 {
            set_name(c.client, argv[j + 1])?;
            j += 2;
        } else {
            return Err(CmdError::Other(format!(
                "ERR Syntax error in HELLO option '{}'",
                c_str_lossy(argv[j], usize::MAX)
            )));
        }
    }
    if !c.client.auth.authenticated && e.acl.default_needs_auth() {
        return Err(CmdError::Static(crate::acl::HELLO_NOAUTH));
    }
    if let Some(v) = ver {
        c.client.proto = if v == 3 { Proto::Resp3 } else { Proto::Resp2 };
        e.tracking.conn_proto(c.client.id, c.client.proto);
    }
    let (id, proto) = (c.client.id as i64, c.client.proto.version());
    let mode = crate::cmd::cluster::mode(e);
    let mut w = c.w();
    w.map(7);
    w.bulk(b"server");
    w.bulk(b"redis");
    w.bulk(b"version");
    w.bulk(REDIS_VERSION.as_bytes());
    w.bulk(b"proto");
    w.integer(proto);
    w.bulk(b"id");
    w.integer(id);
    w.bulk(b"mode");
    w.bulk(mode.as_bytes());
    w.bulk(b"role");
    w.bulk(b"master");
    w.bulk(b"modules");
    w.array(0);
    Ok(())
}

/// `CLIENT REPLY ON|OFF|SKIP` (redis `clientCommand` "reply"): ON answers `+OK`; OFF and SKIP
/// answer nothing (the server drops replies as [`crate::Client::after_reply`] says). SKIP while
/// OFF changes nothing.
pub fn client_reply(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    use crate::ReplyMode;
    match c.argv[2].to_ascii_lowercase().as_slice() {
        b"on" => {
            c.client.reply = ReplyMode::On;
            c.w().ok();
        }
        b"off" => c.client.reply = ReplyMode::Off,
        b"skip" => {
            if c.client.reply != ReplyMode::Off {
                c.client.reply = ReplyMode::SkipNext;
            }
        }
        _ => return Err(CmdError::Syntax),
    }
    Ok(())
}

/// `CLIENT NO-EVICT ON|OFF` → OK (CLIENT LIST flag `e`).
pub fn client_no_evict(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.client.no_evict = match c.argv[2].to_ascii_lowercase().as_slice() {
        b"on" => true,
        b"off" => false,
        _ => return Err(CmdError::Syntax),
    };
    c.w().ok();
    Ok(())
}

/// `CLIENT SETNAME name` → OK.
pub fn client_setname(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = c.argv[2];
    set_name(c.client, n)?;
    c.w().ok();
    Ok(())
}

/// `CLIENT GETNAME` → name | nil.
pub fn client_getname(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    match c.client.name.clone() {
        Some(n) => c.w().bulk(&n),
        None => c.w().null(),
    }
    Ok(())
}

/// `CLIENT ID` → integer.
pub fn client_id(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let id = c.client.id as i64;
    c.w().integer(id);
    Ok(())
}

/// `CLIENT UNBLOCK id [TIMEOUT|ERROR]` → 1 if client `id` was parked in a blocking command
/// and is now answered (a timeout's null reply, or `-UNBLOCKED …` with ERROR), else 0.
pub fn client_unblock(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 4 {
        return Err(CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            crate::error::c_str_lossy(c.argv[1], 128)
        )));
    }
    let mut error = false;
    if let Some(reason) = c.argv.get(3) {
        if args::is(reason, "timeout") {
            error = false;
        } else if args::is(reason, "error") {
            error = true;
        } else {
            return Err(CmdError::Static(
                "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ));
        }
    }
    let id = int_arg(c.argv[2])?;
    let done = id > 0 && crate::blocking::unblock(e, id as u64, error);
    c.w().integer(done as i64);
    Ok(())
}

/// `CLIENT INFO` → this connection's CLIENT LIST line.
pub fn client_info(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut line = e.client_info_line(c.client, c.now_us);
    line.push('\n');
    c.w().verbatim(line.as_bytes());
    Ok(())
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id …]` → verbatim text, written by the
/// server (it alone knows every connection). TYPE other than `normal` lists nothing (there
/// are no replica or pub/sub clients yet). An ID filter is validated, but [`Flow::ClientList`]
/// carries no filter, so the server lists every client.
pub fn client_list(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() == 4 && args::is(argv[2], "type") {
        let t = argv[3];
        if args::is(t, "normal") {
            c.flow = Flow::ClientList;
        } else if ["master", "replica", "slave", "pubsub"]
            .iter()
            .any(|n| args::is(t, n))
        {
            c.w().verbatim(b"");
        } else {
            return Err(CmdError::Other(format!(
                "ERR Unknown client type '{}'",
                c_str_lossy(t, usize::MAX)
            )));
        }
        return Ok(());
    }
    if argv.len() > 3 && args::is(argv[2], "id") {
        let mut any = false;
        for a in &argv[3..] {
            let id = args::parse_i64(a).ok_or(CmdError::Static("ERR Invalid client ID"))?;
            any |= id >= 1;
        }
        if !any {
            // No id can match (ids start at 1): Redis answers an empty list.
            c.w().verbatim(b"");
            return Ok(());
        }
    } else if argv.len() != 2 {
        return Err(CmdError::Syntax);
    }
    c.flow = Flow::ClientList;
    Ok(())
}

/// CLIENT KILL's filters (redis 7.0 `clientCommand` "kill"): a client is killed when every
/// filter given matches it. The core sees one connection only, so [`client_kill`] parses and
/// validates the filters and the server applies them to every connection
/// ([`Flow::ClientKill`]), then writes [`KillFilter::reply`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KillFilter {
    /// `ADDR ip:port` (the peer address, as CLIENT LIST `addr=`).
    pub addr: Option<Vec<u8>>,
    /// `LADDR ip:port` (the local address, as CLIENT LIST `laddr=`).
    pub laddr: Option<Vec<u8>>,
    /// `TYPE`: `Some(true)` = pubsub, `Some(false)` = normal; master and replica match no
    /// connection recached has, so they set [`KillFilter::none`].
    pub pubsub: Option<bool>,
    /// `ID n` (≥ 1).
    pub id: Option<u64>,
    /// `USER name` (an existing user).
    pub user: Option<Vec<u8>>,
    /// `SKIPME yes|no`: spare the calling connection (default yes; the old form kills it too).
    pub skipme: bool,
    /// The old form `CLIENT KILL ip:port`: `+OK` / `-ERR No such client` instead of a count.
    pub old_form: bool,
    /// A filter no connection can match (`TYPE master|replica|slave`).
    pub none: bool,
}

impl KillFilter {
    /// Whether `target` is to be killed by the connection `me` (a client id).
    pub fn matches(&self, target: &Client, me: u64) -> bool {
        !self.none
            && self
                .addr
                .as_deref()
                .is_none_or(|a| a == target.addr.as_bytes())
            && self
                .laddr
                .as_deref()
                .is_none_or(|a| a == target.laddr.as_bytes())
            && self.pubsub.is_none_or(|p| p == (target.subs.count() > 0))
            && self.id.is_none_or(|id| id == target.id)
            && self
                .user
                .as_deref()
                .is_none_or(|u| u == target.auth.name().as_bytes())
            && !(self.skipme && target.id == me)
    }

    /// The reply once `killed` connections were killed.
    pub fn reply(&self, killed: usize, proto: Proto, out: &mut Vec<u8>) {
        let mut w = resp::ReplyWriter::new(out, proto);
        match (self.old_form, killed) {
            (true, 0) => w.error("ERR No such client"),
            (true, _) => w.ok(),
            (false, n) => w.integer(n as i64),
        }
    }
}

/// `CLIENT KILL ip:port` | `CLIENT KILL <filter> <value> …` → validates the filters, in
/// Redis's order and with its texts, and hands them to the server ([`Flow::ClientKill`]).
pub fn client_kill(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut f = KillFilter {
        skipme: true,
        ..KillFilter::default()
    };
    if argv.len() == 3 {
        f.addr = Some(argv[2].to_vec());
        f.old_form = true;
        f.skipme = false; // with the old form a client may kill itself
    } else {
        let mut i = 2;
        while i < argv.len() {
            let (opt, Some(v)) = (argv[i], argv.get(i + 1).copied()) else {
                return Err(CmdError::Syntax);
            };
            if args::is(opt, "id") {
                let id = args::parse_i64(v)
                    .filter(|n| *n >= 1)
                    .ok_or(CmdError::Static("ERR client-id should be greater than 0"))?;
                f.id = Some(id as u64);
            } else if args::is(opt, "type") {
                if args::is(v, "normal") {
                    f.pubsub = Some(false);
                } else if args::is(v, "pubsub") {
                    f.pubsub = Some(true);
                } else if ["master", "replica", "slave"]
                    .iter()
                    .any(|t| args::is(v, t))
                {
                    f.none = true;
                } else {
                    return Err(CmdError::Other(format!(
                        "ERR Unknown client type '{}'",
                        c_str_lossy(v, usize::MAX)
                    )));
                }
            } else if args::is(opt, "addr") {
                f.addr = Some(v.to_vec());
            } else if args::is(opt, "laddr") {
                f.laddr = Some(v.to_vec());
            } else if args::is(opt, "user") {
                if !e.acl.has_user(v) {
                    return Err(CmdError::Other(format!(
                        "ERR No such user '{}'",
                        c_str_lossy(v, usize::MAX)
                    )));
                }
                f.user = Some(v.to_vec());
            } else if args::is(opt, "skipme") {
                f.skipme = if args::is(v, "yes") {
                    true
                } else if args::is(v, "no") {
                    false
                } else {
                    return Err(CmdError::Syntax);
                };
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
    }
    c.flow = Flow::ClientKill(Box::new(f));
    Ok(())
}

/// `CLIENT HELP` → the subcommands recached implements.
pub fn client_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    help(
        c,
        "CLIENT",
        &[
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Print this help.",
        ],
    );
    Ok(())
}

/// One CLIENT LIST line in redis 7.0's field order (`catClientInfoString`). Buffer and memory
/// figures live in the server; they are reported as 0 here.
pub fn client_info_line(client: &Client, now_us: u64) -> String {
    client_info_line_with(client, now_us, ("", -1))
}

/// [`client_info_line`] with the client's tracking flags (`t`, `R`, `B`) and `redir=` value
/// (`crate::tracking::client_list_info`).
pub fn client_info_line_with(client: &Client, now_us: u64, tracking: (&str, i64)) -> String {
    let age = now_us.saturating_sub(client.created_us) / 1_000_000;
    let idle = now_us.saturating_sub(client.last_cmd_us.max(client.created_us)) / 1_000_000;
    let name = client
        .name
        .as_deref()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let cmd = if client.last_cmd.is_empty() {
        "NULL"
    } else {
        client.last_cmd
    };
    // Flag letters in redis `catClientInfoString` order; `N` when none.
    let mut flags = String::new();
    if client.monitor {
        flags.push('O');
    }
    if client.subs.count() > 0 {
        flags.push('P');
    }
    if client.tx.in_multi() {
        flags.push('x');
    }
    flags.push_str(tracking.0);
    if client.cluster.readonly {
        flags.push('r');
    }
    if client.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let multi = client.tx.queued().map_or(-1, |n| n as i64);
    let b = &client.buffers;
    let (obl, oll, omem) = b.reply_shape();
    let mut s = String::with_capacity(256);
    let _ = write!(
        s,
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db={} sub={} psub={} \
         ssub={} multi={multi} qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs={} rbp={} \
         obl={obl} oll={oll} omem={omem} tot-mem={} events=r cmd={} user={} redir={} resp={}",
        client.id,
        client.addr,
        client.laddr,
        client.fd,
        name,
        age,
        idle,
        client.db,
        client.subs.channels(),
        client.subs.patterns(),
        client.subs.shard_channels(),
        client.qbuf,
        b.qbuf_free,
        b.reply_size,
        b.reply_peak,
        b.total,
        cmd,
        client.auth.name(),
        tracking.1,
        client.proto.version()
    );
    s
}
