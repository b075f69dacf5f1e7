//! engine-core: the keyspace, the data types, the command table and the slot map.
//!
//! Pure: no I/O, no clock reads, no threads, no unsafe. Builds for `wasm32-unknown-unknown`
//! so the browser replica runs exactly this code. Time is an input (`now_us`, Unix
//! microseconds); the engine process (`engine/server`) owns sockets, the clock and the loop.
//!
//! # Layout
//!
//! - [`command`]: THE command table (`command/table.rs`, generated from redis-server 7.0.15's
//!   own metadata: every Redis command and subcommand, typed flags and key specs, the handler
//!   bound in each row from `command/handlers.rs`), lookup, and THE key extractor
//!   ([`command::keys`]) that ACL, cluster redirects, COMMAND GETKEYS, effects, the proxy and
//!   the fan-out all use.
//! - [`call`]: what a handler receives and returns ([`call::Call`], [`call::Handler`]) and the
//!   HELP reply writer: a leaf the table and the command files import.
//! - [`notify`]: keyspace notifications (`notify-keyspace-events`, redis `notify.c`): a leaf
//!   every write calls.
//! - [`dispatch`]: lookup → arity → handler → bookkeeping; the only place that writes the arity
//!   and unknown-command errors, and the one place a command's changes are observed.
//!
//! Floors: `command` and `call` at the bottom (data and types), `notify`, `keyspace` and the
//! data types above them, `cmd/*` and `dispatch` on top; a lower module never imports a
//! higher one for its types.
//! - [`error`]: every error reply, with Redis's exact text. [`args`]: integer/cursor/option
//!   parsing with Redis's acceptance rules. [`glob`]: Redis's `stringmatchlen`.
//! - [`keyspace`]: key → value + expiry (IndexMap + volatile index), lazy expiry on lookup,
//!   O(1) sampling, a SCAN cursor with Redis's guarantee, O(1) memory accounting.
//!   Databases (SELECT, MOVE, SWAPDB): `Engine` keeps one `keyspace::Db` per database and
//!   swaps the running client's into its keyspace (`Engine::use_db`, O(1), only when the
//!   database changes between commands).
//! - [`expire`]: the active, budgeted expiry cycle (Redis `expire.c`).
//! - [`evict`]: `maxmemory`, the eviction policies (Redis `evict.c`), LRU/LFU access tracking,
//!   the MEMORY command.
//! - [`types`]: one file per data type, value API first, then its commands (`string`, and
//!   `ldouble`, the 80-bit arithmetic INCRBYFLOAT needs).
//! - [`cmd`]: keyspace-generic (DEL, EXPIRE, SCAN…), connection (PING, HELLO, CLIENT…) and
//!   server commands (INFO, CONFIG, COMMAND…).
//! - [`slot`]: CRC16 hash slots and the jump-consistent-hash slot → instance map.
//! - [`effect`] and [`feed`]: the keychange feed — each change recorded as a deterministic
//!   one-key command with a sequence number, streamed to `FEED SUBSCRIBE` connections, with
//!   prefix snapshots and a bounded buffer (docs/feed.md).
//! - [`acl`]: `requirepass`, ACL users, AUTH, the permission check dispatch runs before every
//!   command (one branch when no password or user is set), protected mode; its rooms are
//!   `rules`, `check`, `commands` and `log`.
//! - [`script`]: the seam a script host (the server's Lua, `engine/script`) plugs into:
//!   [`script::Scripting`], installed in [`Engine::scripting`], and [`script::call`], which runs
//!   one command on a script's behalf with Redis's script rules.
//! - [`tracking`]: client-side caching (CLIENT TRACKING, redis `tracking.c`): the tracking
//!   table, BCAST prefixes, and the invalidation messages the dispatcher sends after each
//!   command (one test per change while no client tracks).
//! - [`snapshot`]: the snapshot format (write/load over caller-given streams) and SAVE, BGSAVE,
//!   LASTSAVE through the server's [`snapshot::Persistence`] hook.
//! - [`dump`]: Redis's DUMP payload format (RDB 10 objects, listpacks, CRC-64; docs/dump.md),
//!   DUMP, RESTORE and MIGRATE (its sockets through the server's [`dump::migrate::Sockets`]
//!   hook).
//!
//! # Contract with the server
//!
//! [`Engine::exec`] appends exactly one reply per command to `out` (except
//! [`Flow::ClientList`], whose reply the server writes, and [`Flow::Block`], whose reply comes
//! later as a [`Delivery`]), never panics on any argv, and returns
//! what the connection must do next. [`Engine::cron`] runs `hz` times a second. The server keeps
//! [`HostInfo`] and [`Engine::net`] current and fills [`Config::hash_seed`] with a random value.
#![forbid(unsafe_code)]

pub mod acl;
pub mod args;
pub mod blocking;
pub mod call;
pub mod chunked;
pub mod cmd;
pub mod command;
pub mod dispatch;
pub mod dump;
pub mod effect;
pub mod error;
pub mod evict;
pub mod expire;
pub mod feed;
pub mod glob;
pub mod keyspace;
pub mod keytable;
pub mod latency;
pub mod lazyfree;
pub mod monitor;
pub mod notify;
pub mod pause;
pub mod position_index;
pub mod script;
pub mod slot;
pub mod slotkeys;
pub mod slowlog;
pub mod snapshot;
#[cfg(test)]
mod test_rng;
pub mod tracking;
pub mod txlock;
pub mod types;

pub use resp::Proto;

/// Per-connection state the engine reads and changes (HELLO, CLIENT SETNAME, …).
/// The server creates one per connection and keeps it next to the socket.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// CLIENT ID: unique per engine process, increasing from 1.
    pub id: u64,
    /// CLIENT SETNAME / HELLO SETNAME.
    pub name: Option<Vec<u8>>,
    /// RESP version chosen with HELLO.
    pub proto: Proto,
    /// Peer address `ip:port` (CLIENT LIST `addr=`).
    pub addr: String,
    /// Local address `ip:port` (CLIENT LIST `laddr=`).
    pub laddr: String,
    /// Socket descriptor number, for CLIENT LIST `fd=`.
    pub fd: i64,
    /// When the connection was accepted, Unix µs.
    pub created_us: u64,
    /// When the last command ran, Unix µs.
    pub last_cmd_us: u64,
    /// Name of the last command run (`get`, `client|list`), for CLIENT LIST `cmd=`.
    pub last_cmd: &'static str,
    /// The selected database (SELECT; CLIENT LIST `db=`); HELLO and RESET set it back to 0.
    pub db: usize,
    /// MULTI queue and WATCHed keys.
    pub tx: cmd::tx::ClientTx,
    /// Pub/sub subscriptions.
    pub subs: cmd::pubsub::ClientSubs,
    /// READONLY / ASKING flags.
    pub cluster: cmd::cluster::ClientCluster,
    /// The connection's user and whether it authenticated ([`acl`]; set by
    /// [`Engine::init_client`]).
    pub auth: acl::ClientAuth,
    /// In MONITOR mode ([`monitor`]; CLIENT LIST flag `O`).
    pub monitor: bool,
    /// CLIENT REPLY: whether replies are sent; the server drops them ([`Client::after_reply`]).
    pub reply: ReplyMode,
    /// CLIENT NO-EVICT on (CLIENT LIST flag `e`; recached never evicts clients for memory).
    pub no_evict: bool,
    /// `TXDISCOVER ON` (the proxy's script connections, `crate::txlock`): a script touching
    /// an undeclared key of another engine before any write fails with `-TXNEEDKEY`.
    pub txdiscover: bool,
    /// Bytes in the connection's query buffer when its current command started, that command
    /// included (CLIENT LIST `qbuf=`; the server sets it).
    pub qbuf: usize,
    /// The connection's buffers as CLIENT LIST/INFO print them (the server sets them; all 0
    /// where there is no connection, as in a browser replica).
    pub buffers: Buffers,
}

/// A connection's buffer figures, bytes (CLIENT LIST `qbuf-free`, `rbs`, `rbp`, `obl`,
/// `oll`, `omem`, `tot-mem`; redis `networking.c` `catClientInfoString`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buffers {
    /// Free space in the query buffer after its unparsed bytes.
    pub qbuf_free: usize,
    /// Size of the reply buffer (allocated), and the most of it ever filled.
    pub reply_size: usize,
    pub reply_peak: usize,
    /// Reply bytes not yet written to the socket.
    pub reply_pending: usize,
    /// Everything the connection holds: its state, query buffer and reply buffer.
    pub total: usize,
}

impl Buffers {
    /// Redis's reply chunk: its static reply buffer holds this much, more goes to a list of
    /// blocks of this size (`PROTO_REPLY_CHUNK_BYTES`). recached keeps one buffer; `obl`, `oll`
    /// and `omem` describe its unwritten bytes as Redis's buffer and list would hold them.
    pub const CHUNK: usize = 16 * 1024;

    /// `(obl, oll, omem)`.
    pub fn reply_shape(&self) -> (usize, usize, usize) {
        let obl = self.reply_pending.min(Self::CHUNK);
        let rest = self.reply_pending - obl;
        (obl, rest.div_ceil(Self::CHUNK), rest)
    }
}

/// CLIENT REPLY's state (redis `CLIENT_REPLY_OFF`, `CLIENT_REPLY_SKIP`, `…_SKIP_NEXT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplyMode {
    #[default]
    On,
    /// CLIENT REPLY OFF: no reply until CLIENT REPLY ON.
    Off,
    /// The reply of the command running now is dropped.
    Skip,
    /// CLIENT REPLY SKIP ran: the next command's reply is dropped.
    SkipNext,
}

impl Client {
    /// After each command: drops what it wrote to `out` from `start` on when replies are off
    /// or skipped, and moves SKIP along (redis `call`: `SKIP_NEXT` → `SKIP` → on). The server
    /// calls it only while `reply` is not [`ReplyMode::On`].
    pub fn after_reply(&mut self, out: &mut Vec<u8>, start: usize) {
        match self.reply {
            ReplyMode::On => {}
            ReplyMode::Off => drop_replies(out, start),
            ReplyMode::Skip => {
                drop_replies(out, start);
                self.reply = ReplyMode::On;
            }
            ReplyMode::SkipNext => self.reply = ReplyMode::Skip,
        }
    }
}

/// Drops the replies in `out[start..]` but keeps pushes: RESP3 push frames and RESP2
/// (un)subscribe confirmations, which Redis sends whatever CLIENT REPLY says (it writes them
/// with `CLIENT_PUSHING`, which `prepareClientToWrite` lets through).
fn drop_replies(out: &mut Vec<u8>, start: usize) {
    let mut kept = start;
    let mut at = start;
    while let Ok(Some(n)) = resp::reply::frame_len(&out[at..]) {
        if is_push(&out[at..at + n]) {
            out.copy_within(at..at + n, kept);
            kept += n;
        }
        at += n;
    }
    out.truncate(kept);
}

/// A RESP3 push frame, or a RESP2 (un)subscribe confirmation (what Redis writes as a push).
fn is_push(frame: &[u8]) -> bool {
    frame.first() == Some(&b'>')
        || [
            &b"*3\r\n$9\r\nsubscribe\r\n"[..],
            b"*3\r\n$10\r\npsubscribe\r\n",
            b"*3\r\n$10\r\nssubscribe\r\n",
            b"*3\r\n$11\r\nunsubscribe\r\n",
            b"*3\r\n$12\r\npunsubscribe\r\n",
            b"*3\r\n$12\r\nsunsubscribe\r\n",
        ]
        .iter()
        .any(|p| frame.starts_with(p))
}

/// What the server must do after `exec`, beyond sending the bytes written to `out`.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep serving the connection.
    Continue,
    /// QUIT: flush the reply already written, then close.
    Close,
    /// CLIENT LIST: the core has no view of other connections; the server writes the reply
    /// (a verbatim string of [`Engine::client_info_line`] for each client).
    ClientList,
    /// CLIENT KILL: the filters are valid and no reply is written; the server kills every
    /// connection they match (this one after its reply), then writes
    /// [`cmd::connection::KillFilter::reply`].
    ClientKill(Box<cmd::connection::KillFilter>),
    /// A blocking command (BLPOP, BZPOPMIN, …) found nothing and wrote no reply: the client is
    /// parked. The server runs none of its further requests until a [`Delivery`] with
    /// `unblock: true` arrives for it (the reply, or the timeout's null).
    Block,
    /// Clients are paused (CLIENT PAUSE) and this command must wait: nothing was run or
    /// written; the server leaves the request in the client's input, runs nothing more of
    /// it, and runs it again once a [`Delivery`] with `unblock: true` arrives (`crate::pause`).
    Postpone,
    /// SHUTDOWN: the server saves as asked (or fails and writes
    /// [`cmd::server::SHUTDOWN_FAILED`]) and exits; no reply is written on success.
    Shutdown(cmd::server::Shutdown),
}

/// Bytes for a connection other than (or after) the one whose command just ran: pub/sub
/// messages and the replies of clients woken from a blocking command. `exec` and `cron` queue
/// them; the server drains them with [`Engine::take_deliveries`] after every command and every
/// tick, appends `bytes` to the client's output in order, and clears its parked state when
/// `unblock` is set. A delivery for a client that is gone is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub client_id: u64,
    pub bytes: Vec<u8>,
    pub unblock: bool,
}

/// Figures only the process knows; the server keeps them current (cheap fields on every
/// accept/close, RSS from a periodic timer) and INFO prints them.
#[derive(Clone, Debug, Default)]
pub struct HostInfo {
    pub pid: u32,
    /// The plain port (0: none), the TLS port (0: none) and the addresses both listen on
    /// (CONFIG GET/SET `port`, `tls-port`, `bind`).
    pub tcp_port: u16,
    pub tls_port: u16,
    pub bind: Vec<String>,
    pub started_us: u64,
    pub executable: String,
    pub config_file: String,
    pub connected_clients: u64,
    pub rss_bytes: u64,
    /// The wall clock, Unix µs, for TIME (a script sees one frozen time for key expiry,
    /// redis `scriptTimeSnapshot`, but TIME reads the clock) and to time each command
    /// (SLOWLOG, INFO commandstats `usec`; `crate::dispatch`). `None` (wasm, tests): the
    /// call's time, and commands are not timed.
    pub clock: Option<fn() -> u64>,
    /// CPU time used so far (INFO `cpu`, from `getrusage`); `None`: reported as 0.
    pub cpu: Option<fn() -> CpuTimes>,
    /// Fills the buffer with random bytes from the operating system (ACL GENPASS); `None`
    /// (wasm, tests): bytes from the engine's seeded generator.
    pub random: Option<fn(&mut [u8])>,
}

/// Process CPU times, µs (INFO `cpu`). The engine is one thread, so the main thread's times
/// are the process's.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTimes {
    pub sys_us: u64,
    pub user_us: u64,
    /// Of waited-for children (BGSAVE).
    pub children_sys_us: u64,
    pub children_user_us: u64,
}

/// Settings that `CONFIG GET`/`CONFIG SET` expose and the engine reads.
pub use crate::engine::{Config, Engine, NetStats, Stats};
mod engine;
