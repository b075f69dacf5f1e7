//! Routing: what the proxy does with one parsed request. Pure apart from the [`Fleet`]
//! counters it reads; no sockets.
//!
//! Keys are found by the shared command table's one key extractor (`engine_core::command::keys`,
//! Redis 7.0's key specs and key finders), never from per-command predicates. A key goes to
//! `instance_for_key(key, N)` (CRC16 hash slot, then jump consistent hash over slot blocks;
//! `engine_core::slot`), instance `i` being the i-th `--backends` address.
//!
//! | request | plan |
//! |---|---|
//! | one key (GET, SET, INCR, EXPIRE, …) | forward the original bytes to the key's instance |
//! | MGET, DEL, UNLINK, EXISTS, TOUCH, MSET | one part per instance, merged in key order ([`crate::split`]); forwarded unsplit when every key is on one instance |
//! | MSETNX, RENAME, RENAMENX, SINTER, SMOVE, LMOVE, other multi-key | forwarded if every key is on one instance; else [`Plan::Gather`]: run atomically on one instance with the others' keys brought there (`crate::coord::Gather`, docs/transactions.md); MIGRATE `-CROSSSLOT` |
//! | movable keys (ZUNIONSTORE, ZINTER, SINTERCARD, LMPOP, ZMPOP, … with `numkeys`) | keys found by the one key extractor (`engine_core::command::keys`), then as above; a malformed `numkeys` is forwarded to any instance, which answers the syntax error |
//! | blocking (BLPOP, BRPOP, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, BRPOPLPUSH) | keys on one instance → [`Plan::Blocking`]: the client's dedicated connection to it ([`crate::dedicated`]); else [`Plan::GatherBlocking`] (`crate::coord::Wait`) |
//! | WATCH, MULTI, EXEC, DISCARD, UNWATCH | [`Plan::Watch`] / [`Plan::Multi`], then [`crate::tx`] decides while the transaction lasts; EXEC/DISCARD without MULTI get Redis's errors |
//! | SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE | [`Plan::PubSub`]: [`crate::pubsub`] (shard channels of several slots: `-CROSSSLOT`) |
//! | EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO | [`Plan::Script`]: the script link of the instance of their declared keys (none: any instance; several instances: [`Plan::Gather`]) |
//! | SCRIPT LOAD / FLUSH / EXISTS; FUNCTION LOAD / DELETE / RESTORE / FLUSH | every instance: the first reply if none failed (else the first error) / `+OK` from all / the AND; the other SCRIPT and FUNCTION subcommands (LIST, DUMP, STATS, KILL, HELP) go to one instance |
//! | PUBLISH, SPUBLISH | forwarded to the channel's instance (channels are routed like keys) |
//! | PUBSUB CHANNELS / SHARDCHANNELS / NUMPAT | every instance: channels concatenated / the largest count (each proxy pattern subscription is held by every instance) ; NUMSUB / SHARDNUMSUB forwarded when their channels share an instance |
//! | PING, ECHO, QUIT, SELECT, HELLO, RESET, CLIENT SETNAME/GETNAME/ID/SETINFO/NO-EVICT/NO-TOUCH, WAIT (`:0`, no replicas; Redis's argument errors) | answered by the proxy |
//! | SELECT n | the session's database ([`Session::db`], `0..databases`, Redis's errors): its requests then take the instances' links of that database (`crate::exec`, "Databases"); SWAPDB is sent to every instance (not atomic across them) |
//! | MONITOR | [`Plan::Monitor`]: `MONITOR` on the client's dedicated connection to every instance, `+OK` once all answered, then every instance's lines relayed as they come (`crate::exec`) |
//! | CLIENT REPLY ON/OFF/SKIP | the session's [`ReplyMode`]; `crate::exec` makes the reply slots of OFF/SKIP requests silent |
//! | CLIENT LIST / INFO / KILL | [`Plan::Clients`]: the event loop answers over the proxy's own clients ([`crate::clients`]) |
//! | DBSIZE, FLUSHALL, FLUSHDB, KEYS, RANDOMKEY, INFO | sent to every instance (on the links of the client's database), merged |
//! | SAVE, MEMORY PURGE, CONFIG RESETSTAT / BGSAVE / LASTSAVE | every instance: `+OK` from all / the first reply / the smallest (oldest); else the first error |
//! | CONFIG SET | [`Plan::ConfigSet`]: `CONFIG GET` of its names then the request, on every instance; all or nothing ([`Merge::ConfigSet`]: the error of the first instance that refused, answered once the others got their old values back). `port` is the proxy's: its own value is dropped from the request, another is answered by the proxy ([`Plan::ConfigSetPort`]) |
//! | SCAN | one instance at a time, the instance encoded in the cursor ([`crate::split::scan_cursor_decode`]) |
//! | CONFIG GET | [`Plan::Rewrite`] to the first instance that is up, `port` answered as the proxy's own ([`Merge::ConfigGet`]) |
//! | COMMAND, TIME, MEMORY DOCTOR / STATS / MALLOC-STATS (one instance's figures), every `… HELP`, an unknown CONFIG/MEMORY/OBJECT subcommand | forwarded to the first instance that is up |
//! | unknown, CONFIG REWRITE, CLIENT PAUSE/TRACKING/…, other keyless | `-ERR` naming the command; the connection stays open |
//!
//! Arity is checked here with the table's arity and Redis's exact error text, so a malformed
//! request never reaches key extraction.
//!
//! HELLO: `HELLO 2` and `HELLO 3` (each with `AUTH user pass` and `SETNAME name`) set the
//! client's protocol ([`Session::proto`]); any other version gets Redis's `-NOPROTO
//! unsupported protocol version`, HELLO without a version answers in the current protocol,
//! and RESET returns to RESP2. The reply is the map Redis sends (`%7` in RESP3, `*14` in
//! RESP2): `server: redis`, `version: 7.0.15`, `proto`, `id`, `mode: standalone` (to a
//! client the proxy is one standalone server), `role: master`, `modules: []`. A RESP3
//! client's requests go over each instance's RESP3 link and its dedicated connections are
//! switched with `HELLO 3` (`crate::exec`), so instance replies arrive in RESP3 unchanged;
//! what the proxy writes or merges itself (HELLO, CLIENT GETNAME's null, RANDOMKEY's null,
//! INFO's verbatim string, subscription confirmations as pushes) follows the client's
//! protocol.
//!
//! INFO [section …] (sections chosen as Redis does: none/`default`, `all`/`everything`, or
//! names) answers the proxy's own view of the sections that describe a process, and merges
//! the others from the same INFO sent to every instance:
//!
//! ```text
//! # Server       redis_version:7.0.15, recached_version, recached_role:proxy, process_id,
//!                tcp_port, uptime_in_seconds                       (the proxy's own)
//! # Clients      connected_clients (of the proxy)                   (the proxy's own)
//! # Persistence  loading:0            (ioredis waits while loading:1)
//! # Proxy        total_requests, backend_errors (requests answered "instance unavailable"),
//!                instances:N, instance<i>:addr=host:port,status=up|down,
//!                instances_answering:K (instances that answered this INFO)
//! # Memory, # Stats, other sections: integer and decimal fields (used_cpu_*) summed over
//!                the instances that answered (`*_human` recomputed from the sum,
//!                `mem_fragmentation_ratio` = summed RSS / summed used memory, other
//!                `*_ratio` dropped); `a=1,b=2` lines (commandstats, errorstats,
//!                latencystats) summed per subfield (`usec_per_call` recomputed,
//!                percentiles the largest); words (`role:master`) and flags/offsets
//!                (`cluster_enabled`, `second_repl_offset`) the first instance's
//! # Keyspace     db0:keys=<sum>,expires=<sum>,avg_ttl=<mean weighted by expires>
//!                (omitted when empty, as Redis)
//! ```
//!
//! A down instance does not fail INFO (clients use it as a health check); it shows as
//! `status=down` and its keys are missing from the sum.

use std::borrow::Cow;
use std::time::Instant;

use engine_core::command::{self, CommandSpec, Flags};

use crate::connection::{InfoSections, client, hello, info_header};
use crate::pubsub;
use crate::slots::{SlotMap, Slots};
use crate::split::{self, Merge, Part, push_bulk};

/// Argument access over a parsed request (the parser's ranges into the read buffer, or a
/// plain slice in tests): the key extractor's own trait, so routing hands requests to it as
/// they are.
pub use engine_core::command::keys::Argv as Args;

/// The per-connection state the proxy itself answers for.
#[derive(Debug, Default)]
pub struct Session {
    /// CLIENT ID: unique in this proxy process, from 1.
    pub id: u64,
    /// CLIENT SETNAME / HELLO SETNAME.
    pub name: Option<Vec<u8>>,
    /// WATCH / MULTI state ([`crate::tx`]).
    pub tx: crate::tx::Tx,
    /// Channels and patterns subscribed to ([`crate::pubsub`]).
    pub subs: pubsub::Subscriptions,
    /// The client's user ([`crate::auth`]).
    pub auth: engine_core::acl::ClientAuth,
    /// Peer address `ip:port` (ACL LOG, failed AUTH log lines).
    pub addr: String,
    /// The protocol chosen with `HELLO 2|3` (RESP2 until then, and again after RESET): the
    /// shape of every reply the proxy writes, and which instance links serve the client.
    pub proto: resp::Proto,
    /// CLIENT REPLY: whether replies are written ([`ReplyMode`]; `crate::exec` applies it).
    pub reply: ReplyMode,
    /// Local address `ip:port` of the connection (CLIENT LIST `laddr`).
    pub laddr: String,
    /// The last command routed, Redis's `a|b` name (CLIENT LIST `cmd`).
    pub last_cmd: &'static str,
    /// The SELECTed database (0 until SELECT, and again after RESET): which instance links
    /// serve the client (`crate::exec`, "Databases").
    pub db: usize,
    /// In MONITOR mode (until RESET or the end of the connection).
    pub monitor: bool,
    /// CLIENT TRACKING ON sent: its keyed requests take its own connections to the
    /// instances, where the instances track them (`crate::exec`, "Client-side caching").
    pub tracking: bool,
    /// The proxy client id its tracking redirects to (CLIENT TRACKING … REDIRECT id).
    pub redirect: Option<u64>,
    /// The CLIENT TRACKING ON request that turned tracking on without REDIRECT, sent again to
    /// an instance that starts serving slots (`crate::exec::extend_to`).
    pub tracking_request: Option<Vec<u8>>,
}

/// `CLIENT REPLY ON|OFF|SKIP`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    #[default]
    On,
    Off,
    /// The next command's reply is dropped, then `On` again.
    Skip,
}

/// What routing needs to know about the proxy as a whole.
#[derive(Debug)]
pub struct Fleet {
    /// `host:port` of each instance, in instance order.
    pub addrs: Vec<String>,
    /// The instances forward PUBLISH to each other ([`crate::tls::ProxyLimits::cluster_publish`]).
    pub cluster_publish: bool,
    /// Whether each instance's connection is up right now.
    pub up: Vec<bool>,
    /// Connected clients (INFO).
    pub clients: usize,
    /// Listening port (INFO).
    pub port: u16,
    /// The address it listens on (CONFIG SET `port`'s check, `crate::exec`).
    pub listen_ip: std::net::IpAddr,
    /// Start time (INFO uptime).
    pub started: Instant,
    /// Advanced by every RANDOMKEY, to spread the first instance asked.
    pub rotation: usize,
    /// Requests planned since start (INFO `total_requests`; metrics).
    pub requests: u64,
    /// Client connections accepted since start (INFO `client_connections_received`; metrics).
    pub connections_received: u64,
    /// Protocol bytes read from / written to clients (plaintext on the TLS port; INFO
    /// `client_net_input_bytes` / `client_net_output_bytes`; metrics).
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    /// Reads from and writes to client sockets that moved bytes (INFO
    /// `client_reads_processed` / `client_writes_processed`, as Redis's
    /// `total_reads_processed` / `total_writes_processed`).
    pub reads_processed: u64,
    pub writes_processed: u64,
    /// The memcached port's published figures (INFO `# Memcached`), when it runs.
    pub memcached: Option<crate::memcached::stats::Shared>,
    /// Requests (or parts of split requests) answered with an instance-unavailable error
    /// (INFO `backend_errors`; metrics).
    pub backend_errors: u64,
    /// Users and permissions of the proxy's clients ([`crate::auth`]).
    pub acl: engine_core::acl::Acl,
    /// `AUTH` sent first on every instance connection (internal credential), if any.
    pub login: Option<Vec<u8>>,
    /// Databases SELECT may choose (Redis `databases`; the engines' setting).
    pub databases: usize,
    /// Per instance, a connected dedicated connection nobody owns yet (`crate::exec`'s
    /// `conn_for`): its slab id.
    pub spares: Vec<Option<usize>>,
    /// Per instance, once known: whether it answers `TXID` (a recached engine: the id of a
    /// dedicated connection without a MONITOR line) or needs `CLIENT ID`
    /// (`Dedicated::ask_id`). Learned by the spare connections opened at start.
    pub txid: Vec<Option<bool>>,
    /// Ids of the connected clients (CLIENT TRACKING … REDIRECT checks its target exists).
    pub client_ids: std::collections::HashSet<u64>,
    /// Slot → instance ([`crate::slots`]): what every routing decision reads.
    pub slots: Slots,
    /// Links per instance in the proxy's link table (`crate::backend::link_index`).
    pub per_instance: usize,
}

impl Fleet {
    pub fn new(addrs: Vec<String>, port: u16) -> Self {
        Fleet {
            slots: Slots::jump(addrs.len()),
            per_instance: 1,
            up: vec![false; addrs.len()],
            addrs,
            clients: 0,
            port,
            listen_ip: std::net::IpAddr::from([127, 0, 0, 1]),
            started: Instant::now(),
            rotation: 0,
            requests: 0,
            connections_received: 0,
            net_input_bytes: 0,
            net_output_bytes: 0,
            reads_processed: 0,
            writes_processed: 0,
            memcached: None,
            backend_errors: 0,
            acl: engine_core::acl::Acl::new(),
            login: None,
            cluster_publish: false,
            databases: 16,
            spares: Vec::new(),
            txid: Vec::new(),
            client_ids: Default::default(),
        }
    }

    pub fn instances(&self) -> usize {
        self.addrs.len()
    }

    /// The link of instance `i` that decides whether it is up (database 0, RESP2, ordinary),
    /// also the one of fleet-wide requests that are not per database.
    pub fn primary(&self, i: usize) -> usize {
        i * self.per_instance
    }

    /// Whether instance `i` answers `TXID`, once known.
    pub fn txid_known(&self, i: usize) -> Option<bool> {
        self.txid.get(i).copied().flatten()
    }

    /// Instance `i` answered `TXID` (`ok`) or refused it.
    pub fn learned_txid(&mut self, i: usize, ok: bool) {
        if self.txid.len() <= i {
            self.txid.resize(i + 1, None);
        }
        self.txid[i] = Some(ok);
    }

    /// The instance whose primary link is link `link`, if it is one.
    pub fn primary_of(&self, link: usize) -> Option<usize> {
        link.is_multiple_of(self.per_instance)
            .then(|| link / self.per_instance)
    }
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Send the request unchanged to this instance; its reply is the reply.
    Forward(usize),
    /// Send the request unchanged to the first instance that is up.
    ForwardAny,
    /// Send each part to its instance, then merge.
    Split { parts: Vec<Part>, merge: Merge },
    /// Send `request` (or, if `None`, the request unchanged) to every instance, then merge.
    FanOut {
        request: Option<Vec<u8>>,
        merge: Merge,
    },
    /// Send a rewritten request to one instance and post-process its reply.
    Rewrite {
        instance: usize,
        request: Vec<u8>,
        merge: Merge,
    },
    /// A script (EVAL, EVALSHA, FCALL and their `_RO` forms) for this instance (`None`: its
    /// `numkeys` is 0, any instance), sent on its script link (`crate::backend`).
    Script(Option<usize>),
    /// Answer with these bytes.
    Reply(Cow<'static, [u8]>),
    /// Answer with these bytes, then close the connection (QUIT).
    ReplyThenClose(Cow<'static, [u8]>),
    /// A blocking command whose keys are all on this instance: send it on the client's
    /// dedicated connection to it.
    Blocking(usize),
    /// The request to every instance on the client's dedicated connections, then merged:
    /// SCRIPT KILL / FUNCTION KILL and CLIENT UNPAUSE, which must not wait behind a busy
    /// script or a paused request on the shared link (a busy engine still serves other
    /// connections a few commands; a paused one, non-paused commands).
    DedicatedFanOut(Merge),
    /// A blocking stream read over several instances: each part on the client's dedicated
    /// connection to its instance; the first answer releases the others (`crate::spread`).
    BlockingSplit { parts: Vec<Part>, merge: Merge },
    /// `WATCH` with every key on this instance: pin the client to it ([`crate::tx`]).
    Watch(usize),
    /// A command whose keys live on several instances and cannot be split (RENAME, SMOVE,
    /// MSETNX…): run gathered on one instance (`crate::coord::Gather`,
    /// docs/transactions.md).
    Gather,
    /// [`Plan::Gather`] for a request that may touch keys it does not declare, which its
    /// engine then asks for (`-TXNEEDKEY`): a script, or a SORT whose patterns name keys. Run
    /// again with them (`crate::coord::Scripts`).
    GatherDiscovering,
    /// A blocking command whose keys live on several instances (`crate::coord::Wait`).
    GatherBlocking,
    /// `WATCH` of keys on several instances: each instance's keys on the client's
    /// connection to it ([`crate::tx`], docs/transactions.md).
    WatchMany,
    /// `MULTI`: the client enters a transaction ([`crate::tx`]).
    Multi,
    /// A subscription command ([`crate::pubsub`]).
    PubSub(pubsub::Kind),
    /// `CLIENT TRACKING ON … REDIRECT <id>`: `args` the request's arguments, `at` the index
    /// of the proxy client id to redirect to, rewritten per instance (`crate::exec`,
    /// "Client-side caching").
    TrackingRedirect {
        args: Vec<Vec<u8>>,
        at: usize,
        target: u64,
    },
    /// CLIENT LIST / INFO / KILL: the event loop answers it, as it alone sees every client.
    Clients(crate::clients::Op),
    /// CONFIG SET: `get` (`CONFIG GET` of its names) then `request` (or, if `None`, the
    /// request unchanged), to every instance; merged by [`Merge::ConfigSet`] (all or nothing).
    ConfigSet {
        get: Vec<u8>,
        request: Option<Vec<u8>>,
    },
    /// CONFIG SET of the proxy's `port` to another port: answered by the proxy, nothing is
    /// changed ([`config_set_port`]).
    ConfigSetPort(u16),
    /// MONITOR: the client's dedicated connection to every instance turns into a monitor;
    /// their lines are relayed to it as they come (`crate::exec`, "MONITOR").
    Monitor,
}

/// `-CROSSSLOT …`, Redis Cluster's text (PROTOCOL-NOTES b3).
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// The instance that owns `key` in the initial map of `n` instances (the pure function the
/// slot table starts from, [`crate::slots`]); routing reads the table instead.
pub fn instance_of(key: &[u8], n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        engine_core::slot::instance_for_key(key, n as u32) as usize
    }
}

/// Decides what to do with one request (`argc() >= 1`).
pub fn plan<A: Args + ?Sized>(args: &A, session: &mut Session, fleet: &mut Fleet) -> Plan {
    fleet.requests += 1;
    let argc = args.argc();
    let n = &fleet.slots;
    let Some(spec) = command::lookup(args.arg(0)) else {
        return Plan::Reply(unknown_command(args).into());
    };
    // The row the keys are found from: a container's subcommand (OBJECT ENCODING k,
    // MEMORY USAGE k, XINFO STREAM k…) or the command itself.
    let row = match spec.subcommands.is_empty() || argc < 2 {
        true => spec,
        false => spec.subcommand(args.arg(1)).unwrap_or(spec),
    };
    if !spec.is_implemented() {
        // A Redis command the engines do not run yet: the key's engine answers it (today
        // Redis's unknown-command error); without a key, the proxy answers that itself.
        return match keys_instance(row, args, n) {
            Ok(Some(i)) => Plan::Forward(i),
            _ => Plan::Reply(unknown_command(args).into()),
        };
    }
    if !spec.arity_ok(argc) {
        return Plan::Reply(arity_error(spec.name).into());
    }
    session.last_cmd = row.name;
    // Hot path: rows with exactly one key (GET, SET, INCR, …; the legacy triple says which),
    // the key found by the one extractor.
    if spec.first_key > 0 && spec.first_key == spec.last_key && !spec.has_flag(Flags::MOVABLEKEYS) {
        if let Some(pos) = command::fixed_key(spec, argc) {
            return Plan::Forward(n.of(args.arg(pos)));
        }
        let keys = command::keys(spec, args);
        if keys.len() == 1 {
            let pos = keys.as_slice()[0].pos;
            return Plan::Forward(n.of(args.arg(pos)));
        }
    }
    // HELP of any container (OBJECT HELP, MEMORY HELP, CONFIG HELP…): any instance's text.
    if !std::ptr::eq(row, spec) && row.short_name() == "help" {
        return Plan::ForwardAny;
    }
    match spec.name {
        "mset" | "msetnx" if argc.is_multiple_of(2) => Plan::Reply(arity_error(spec.name).into()),
        // One table for the split by instance and the split per slot of a refused part.
        "mget" | "del" | "unlink" | "exists" | "touch" | "mset" => {
            let (step, merge) = split::key_list(spec.name.as_bytes()).expect("a key list");
            split_keys(args, step, merge, n)
        }
        "msetnx" => match same_instance(args, spec, n) {
            Some(i) => Plan::Forward(i),
            None => Plan::Gather,
        },
        "ping" => match argc {
            1 => reply_static(b"+PONG\r\n"),
            2 => Plan::Reply(bulk(args.arg(1)).into()),
            _ => Plan::Reply(arity_error(spec.name).into()),
        },
        "echo" => Plan::Reply(bulk(args.arg(1)).into()),
        "quit" => Plan::ReplyThenClose(Cow::Borrowed(b"+OK\r\n")),
        "reset" => {
            session.tracking = false;
            session.redirect = None;
            session.name = None;
            session.proto = resp::Proto::Resp2;
            session.db = 0;
            reply_static(b"+RESET\r\n")
        }
        // Redis's selectCommand: an `int` (getIntFromObjectOrReply), then the range.
        "select" => match resp::parse_i64(args.arg(1)).map(i32::try_from) {
            Some(Ok(n)) if n >= 0 && (n as usize) < fleet.databases => {
                session.db = n as usize;
                reply_static(b"+OK\r\n")
            }
            Some(Ok(_)) => reply_static(b"-ERR DB index is out of range\r\n"),
            Some(Err(_)) => reply_static(
                b"-ERR value is out of range, value must between -2147483648 and 2147483647\r\n",
            ),
            None => reply_static(b"-ERR value is not an integer or out of range\r\n"),
        },
        // Every instance swaps its two databases (not atomically across instances: a
        // client reading both databases meanwhile may see some instances swapped).
        "swapdb" => fan_out(Merge::AllOk),
        "hello" => hello(args, session),
        "client" => client(args, spec, session, fleet),
        "command" | "time" | "pfselftest" | "role" | "lolwut" => Plan::ForwardAny,
        // Only ACL GENPASS gets here (`crate::auth` answers the rest).
        "acl" => Plan::ForwardAny,
        // Every engine's log: lengths summed, entries concatenated in instance order (each
        // engine's newest first; ids are per engine), RESET everywhere.
        "slowlog" => match row.short_name() {
            "len" => fan_out(Merge::Sum),
            "reset" => fan_out(Merge::AllOk),
            "get" => fan_out(Merge::Concat),
            _ => Plan::ForwardAny,
        },
        // Every engine's latency monitor and histograms, merged (`crate::latency`).
        "latency" => match row.short_name() {
            "latest" => fan_out(Merge::LatencyLatest),
            "history" => fan_out(Merge::LatencyHistory),
            "reset" => fan_out(Merge::Sum),
            "histogram" => fan_out(Merge::LatencyHistogram(session.proto == resp::Proto::Resp3)),
            // DOCTOR, GRAPH, HELP: one instance's report.
            _ => Plan::ForwardAny,
        },
        "config" => config(args, row, fleet),
        "wait" => wait(args),
        "save" => fan_out(Merge::AllOk),
        "bgsave" => fan_out(Merge::First),
        "lastsave" => fan_out(Merge::Min),
        "memory" | "object" if !row.has_keys() => match row.short_name() {
            "purge" => fan_out(Merge::AllOk),
            // DOCTOR, STATS, MALLOC-STATS, an unknown subcommand: one instance answers.
            _ => Plan::ForwardAny,
        },
        // Scripts: EVAL* are routed by their declared keys (the `has_keys` arm below); the
        // script cache is kept the same on every instance, so EVALSHA works wherever the
        // keys land.
        "script" => match row.short_name() {
            "load" => fan_out(Merge::First),
            "flush" => fan_out(Merge::AllOk),
            "exists" => fan_out(Merge::AllOf),
            "kill" => Plan::DedicatedFanOut(Merge::Kill),
            _ => Plan::ForwardAny,
        },
        // Functions: FCALL/FCALL_RO go by their declared keys like EVAL; the libraries are kept
        // the same on every instance (changes go to all, and must succeed on all), so any
        // instance answers LIST, DUMP and STATS.
        "function" => match row.short_name() {
            "load" | "delete" | "restore" => fan_out(Merge::First),
            "flush" => fan_out(Merge::AllOk),
            "kill" => Plan::DedicatedFanOut(Merge::Kill),
            _ => Plan::ForwardAny,
        },
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            match keys_instance(row, args, n) {
                Ok(Some(i)) => Plan::Script(Some(i)),
                // No key, or a malformed `numkeys`: any instance gives the right reply.
                Ok(None) => Plan::Script(None),
                // Declared keys on several instances: run gathered (docs/transactions.md).
                Err(()) => Plan::GatherDiscovering,
            }
        }
        "dbsize" => fan_out(Merge::Sum),
        "flushall" | "flushdb" => fan_out(Merge::AllOk),
        "keys" => fan_out(Merge::Concat),
        "randomkey" => {
            fleet.rotation = fleet.rotation.wrapping_add(1);
            fan_out(Merge::AnyNonNil {
                start: fleet.rotation % n.instances().max(1),
            })
        }
        "info" => {
            // The instances get the client's own section arguments; the proxy answers the
            // sections that describe itself and merges the rest (see the module docs).
            let all: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
            let sections = InfoSections::new(&all[1..]);
            let mut request = Vec::new();
            resp::encode_request(&mut request, &all);
            Plan::FanOut {
                request: Some(request),
                merge: Merge::Info {
                    header: info_header(fleet, &sections),
                    proxy_section: sections.wants("proxy"),
                    proto: session.proto,
                },
            }
        }
        "scan" => scan(args, n),
        "multi" => Plan::Multi,
        "monitor" => Plan::Monitor,
        "exec" => reply_static(b"-ERR EXEC without MULTI\r\n"),
        "discard" => reply_static(b"-ERR DISCARD without MULTI\r\n"),
        "unwatch" => reply_static(b"+OK\r\n"),
        "watch" => match keys_instance(spec, args, n) {
            Ok(Some(i)) => Plan::Watch(i),
            _ => Plan::WatchMany,
        },
        "publish" | "spublish" => Plan::Forward(n.of(args.arg(1))),
        "pubsub" => pubsub_introspection(args, spec, n),
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => {
            Plan::PubSub(pubsub::Kind::from_name(spec.name.as_bytes()).expect("a subscription"))
        }
        "ssubscribe" | "sunsubscribe" => {
            Plan::PubSub(pubsub::Kind::from_name(spec.name.as_bytes()).expect("a subscription"))
        }
        _ if spec.has_flag(Flags::PUBSUB) => {
            not_supported(spec, "sharded pub/sub is not relayed (use SUBSCRIBE)")
        }
        // XREAD/XREADGROUP block only with a BLOCK option; without it they are plain
        // reads (and writes to a group) that the shared link carries.
        "xread" | "xreadgroup" if !stream_read_blocks(args) => match keys_instance(spec, args, n) {
            Ok(Some(i)) => Plan::Forward(i),
            Ok(None) => Plan::ForwardAny,
            // Streams on several instances: split, merged in the caller's key order.
            Err(()) => split_stream_read(args, n, session.proto),
        },
        // With BLOCK over several instances: every part parks on its instance until the first
        // answers (`crate::spread`).
        "xread" | "xreadgroup" if matches!(keys_instance(spec, args, n), Err(())) => {
            match split_stream_read(args, n, session.proto) {
                Plan::Split { parts, merge } => Plan::BlockingSplit { parts, merge },
                other => other,
            }
        }
        _ if spec.has_flag(Flags::BLOCKING) => match keys_instance(spec, args, n) {
            Ok(Some(i)) => Plan::Blocking(i),
            // A malformed `numkeys` (BZMPOP 1 0 …): no key, so the instance refuses it at
            // once with Redis's text, never blocking the shared link.
            Ok(None) => Plan::ForwardAny,
            // Keys on several instances: tried gathered, waiting between tries
            // (`crate::coord::Wait`, docs/transactions.md).
            Err(()) => Plan::GatherBlocking,
        },
        // SORT's BY/GET patterns name keys no key spec declares: sent like a script, to the
        // instance of its declared keys on a script link, which answers `-TXNEEDKEY` for
        // the keys it lacks; then it runs gathered with them (`crate::coord::Scripts`).
        "sort" | "sort_ro" if n.instances() > 1 && sort_patterns_read_keys(args) => {
            match keys_instance(row, args, n) {
                Ok(Some(i)) => Plan::Script(Some(i)),
                Ok(None) => Plan::ForwardAny,
                Err(()) => Plan::GatherDiscovering,
            }
        }
        _ if row.has_keys() => {
            match keys_instance(row, args, n) {
                Ok(Some(i)) => Plan::Forward(i),
                // No key, or a malformed `numkeys`: any instance gives the right reply.
                Ok(None) => Plan::ForwardAny,
                // MIGRATE talks to another server: its keys must be on one instance.
                Err(()) if spec.name == "migrate" => reply_static(CROSSSLOT),
                // Keys on several instances: run gathered on one (docs/transactions.md).
                Err(()) => Plan::Gather,
            }
        }
        _ => not_supported(spec, "it has no key to route by"),
    }
}

/// Whether a SORT's `BY` or `GET` pattern names keys (has a `*` and is not `#`; engine
/// `types/sort.rs`, *Patterns*). Options as SORT parses them; a malformed request is the
/// engine's to refuse.
pub(crate) fn sort_patterns_read_keys<A: Args + ?Sized>(args: &A) -> bool {
    let mut j = 2;
    while j < args.argc() {
        let a = args.arg(j);
        if a.eq_ignore_ascii_case(b"limit") {
            j += 3;
        } else if a.eq_ignore_ascii_case(b"store") {
            j += 2;
        } else if a.eq_ignore_ascii_case(b"by") || a.eq_ignore_ascii_case(b"get") {
            if j + 1 < args.argc() && args.arg(j + 1) != b"#" && args.arg(j + 1).contains(&b'*') {
                return true;
            }
            j += 2;
        } else {
            j += 1;
        }
    }
    false
}

/// XREAD/XREADGROUP without BLOCK whose streams live on several instances: one part per
/// instance (see [`split::split_stream_read`]).
fn split_stream_read<A: Args + ?Sized>(
    args: &A,
    n: impl SlotMap + Copy,
    proto: resp::Proto,
) -> Plan {
    let argc = args.argc();
    let all: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
    // STREAMS is followed by the keys, then as many IDs.
    let Some(streams) = stream_read_layout(args).0 else {
        return reply_static(CROSSSLOT);
    };
    let first = streams + 1;
    let nkeys = (argc - first) / 2;
    if nkeys == 0 || !(argc - first).is_multiple_of(2) {
        return reply_static(CROSSSLOT);
    }
    let s = split::split_stream_read(&all, first, nkeys, |k| n.of(k));
    Plan::Split {
        parts: s.parts,
        merge: Merge::StreamRead {
            seq: s.seq,
            keys: all[first..first + nkeys]
                .iter()
                .map(|k| k.to_vec())
                .collect(),
            proto,
        },
    }
}

/// Where an XREAD/XREADGROUP request's STREAMS keyword is and whether it has a BLOCK option,
/// reading its options as its parser does (GROUP takes two arguments, COUNT and BLOCK one).
fn stream_read_layout<A: Args + ?Sized>(args: &A) -> (Option<usize>, bool) {
    let mut block = false;
    let mut i = 1;
    while i < args.argc() {
        let a = args.arg(i);
        let more = args.argc() - i - 1;
        if a.eq_ignore_ascii_case(b"streams") {
            return (Some(i), block);
        } else if a.eq_ignore_ascii_case(b"group") && more >= 2 {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"block") && more >= 1 {
            block = true;
            i += 1;
        } else if a.eq_ignore_ascii_case(b"count") && more >= 1 {
            i += 1;
        }
        i += 1;
    }
    (None, block)
}

/// Whether an XREAD/XREADGROUP request has a BLOCK option (before STREAMS).
fn stream_read_blocks<A: Args + ?Sized>(args: &A) -> bool {
    stream_read_layout(args).1
}

/// The key argument positions of a request, from the one key extractor
/// (`engine_core::command::keys`); empty when the request does not fit the row's syntax (the
/// instance answers that error). PUBLISH's channel counts as its key (channels are routed like
/// keys).
pub fn request_keys<A: Args + ?Sized>(spec: &CommandSpec, args: &A) -> Vec<usize> {
    if spec.name == "publish" {
        return vec![1];
    }
    command::keys(spec, args).positions().collect()
}

/// The keys of a request, copied (none when the router answers it: unknown command, arity).
pub fn key_args<A: Args + ?Sized>(args: &A) -> Vec<Vec<u8>> {
    known_row(args)
        .map(|spec| {
            request_keys(spec, args)
                .into_iter()
                .map(|pos| args.arg(pos).to_vec())
                .collect()
        })
        .unwrap_or_default()
}

/// The keys of a request as sent (a multibulk), copied; none if it is not one or the router
/// answers it. For the rare paths that need a kept request's keys (a gathered run, a
/// script run again), so the hot paths keep the request only.
pub fn keys_of_request(raw: &[u8]) -> Vec<Vec<u8>> {
    let Ok(Some((resp::value::Value::Array(items), _))) = resp::value::decode(raw) else {
        return Vec::new();
    };
    let mut args: Vec<&[u8]> = Vec::with_capacity(items.len());
    for item in &items {
        match item {
            resp::value::Value::Bulk(b) => args.push(b),
            _ => return Vec::new(),
        }
    }
    key_args(&args[..])
}

/// The implemented row a request names (a container's subcommand row when it has one), if
/// its arity is right; `None` when the router answers it (unknown command, arity error).
pub fn known_row<A: Args + ?Sized>(args: &A) -> Option<&'static CommandSpec> {
    let top = command::lookup(args.arg(0)).filter(|c| c.is_implemented())?;
    let spec = if !top.subcommands.is_empty() && args.argc() >= 2 {
        top.subcommand(args.arg(1))?
    } else {
        top
    };
    spec.arity_ok(args.argc()).then_some(spec)
}

/// The one instance every key of the request lives on: `Ok(None)` without keys (or with
/// a malformed `numkeys`), `Err(())` when they live on several.
pub(crate) fn keys_instance<A: Args + ?Sized>(
    spec: &CommandSpec,
    args: &A,
    n: impl SlotMap + Copy,
) -> Result<Option<usize>, ()> {
    let mut owner = None;
    for pos in request_keys(spec, args) {
        let i = n.of(args.arg(pos));
        match owner {
            None => owner = Some(i),
            Some(o) if o != i => return Err(()),
            Some(_) => {}
        }
    }
    Ok(owner)
}

/// PUBSUB CHANNELS / NUMPAT / NUMSUB over the fleet.
fn pubsub_introspection<A: Args + ?Sized>(
    args: &A,
    spec: &'static CommandSpec,
    n: impl SlotMap + Copy,
) -> Plan {
    let sub = args.arg(1);
    let Some(sub_spec) = spec.subcommand(sub) else {
        let mut out = b"-ERR unknown subcommand '".to_vec();
        out.extend_from_slice(&sub[..sub.len().min(128)]);
        out.extend_from_slice(b"'. Try PUBSUB HELP.");
        sanitize_error(&mut out[1..]);
        out.extend_from_slice(b"\r\n");
        return Plan::Reply(out.into());
    };
    if !sub_spec.arity_ok(args.argc()) {
        return Plan::Reply(arity_error(sub_spec.name).into());
    }
    match sub_spec.short_name() {
        "channels" | "shardchannels" => fan_out(Merge::Concat),
        "numpat" => fan_out(Merge::Max),
        // Each channel's count from its instance (where the proxy subscribes it), merged in
        // the caller's order.
        "numsub" | "shardnumsub" => {
            if args.argc() == 2 {
                return reply_static(b"*0\r\n");
            }
            let mut instances: Vec<usize> = Vec::new();
            let mut names: Vec<Vec<&[u8]>> = Vec::new();
            let mut seq = Vec::with_capacity(args.argc() - 2);
            for i in 2..args.argc() {
                let inst = n.of(args.arg(i));
                let part = match instances.iter().position(|&x| x == inst) {
                    Some(p) => p,
                    None => {
                        instances.push(inst);
                        names.push(Vec::new());
                        instances.len() - 1
                    }
                };
                seq.push((part as u32, names[part].len() as u32));
                names[part].push(args.arg(i));
            }
            if let [only] = instances[..] {
                return Plan::Forward(only);
            }
            let parts = instances
                .into_iter()
                .zip(names)
                .map(|(instance, list)| {
                    let mut argv: Vec<&[u8]> = vec![args.arg(0), args.arg(1)];
                    argv.extend(list);
                    let mut request = Vec::new();
                    resp::encode_request(&mut request, &argv);
                    split::Part { instance, request }
                })
                .collect();
            Plan::Split {
                parts,
                merge: Merge::ValuePairs(seq),
            }
        }
        _ => not_supported(sub_spec, "sharded pub/sub is not relayed"),
    }
}

/// CONFIG SET `port` through the proxy: the port asked for is the proxy's (CONFIG GET `port`
/// answers it), not an instance's, whose ports are in the fleet's topology and refuse any
/// change. `None`: not a port (0..=65535), left to the instances' error. `Some(Ok)`: the
/// proxy's own port, nothing to change (as redis `updatePort` for an unchanged value): the
/// pair is dropped from the request. `Some(Err)`: another port, answered by
/// [`Plan::ConfigSetPort`].
fn config_set_port(value: &[u8], current: u16) -> Option<Result<(), Plan>> {
    let n = resp::parse_i64(value).filter(|n| (0..=65535).contains(n))? as u16;
    Some(if n == current {
        Ok(())
    } else {
        Err(Plan::ConfigSetPort(n))
    })
}

pub(crate) fn reply_static(bytes: &'static [u8]) -> Plan {
    Plan::Reply(Cow::Borrowed(bytes))
}

pub(crate) fn fan_out(merge: Merge) -> Plan {
    Plan::FanOut {
        request: None,
        merge,
    }
}

/// The engine's arity error text (`engine_core::error::arity_message`).
pub(crate) fn arity_error(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    resp::ReplyWriter::new(&mut out, resp::Proto::Resp2)
        .error(&engine_core::error::arity_message(name));
    out
}

/// The engine's unknown-command error text (`engine_core::error::unknown_command_message`).
fn unknown_command<A: Args + ?Sized>(args: &A) -> Vec<u8> {
    let argv: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
    let mut out = Vec::new();
    resp::ReplyWriter::new(&mut out, resp::Proto::Resp2)
        .error(&engine_core::error::unknown_command_message(&argv));
    out
}

/// An error line may echo user input: CR and LF become spaces (Redis does the same).
pub(crate) fn sanitize_error(text: &mut [u8]) {
    for b in text {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
}

pub(crate) fn not_supported(spec: &CommandSpec, why: &str) -> Plan {
    let name = spec.name.replace('|', " ").to_uppercase();
    Plan::Reply(
        format!("-ERR {name} is not supported by the recached proxy: {why}\r\n")
            .into_bytes()
            .into(),
    )
}

pub(crate) fn bulk(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + 16);
    push_bulk(&mut out, b);
    out
}

/// The instance every key of the request lives on, if there is one.
fn same_instance<A: Args + ?Sized>(
    args: &A,
    spec: &CommandSpec,
    n: impl SlotMap + Copy,
) -> Option<usize> {
    let mut owner = None;
    for pos in command::keys(spec, args).positions() {
        let i = n.of(args.arg(pos));
        match owner {
            None => owner = Some(i),
            Some(o) if o != i => return None,
            Some(_) => {}
        }
    }
    owner
}

/// Splits a key-list command; forwards it unchanged when all its keys are on one instance.
fn split_keys<A: Args + ?Sized>(
    args: &A,
    step: usize,
    merge: Merge,
    n: impl SlotMap + Copy,
) -> Plan {
    let argc = args.argc();
    let first = n.of(args.arg(1));
    if (1 + step..argc)
        .step_by(step)
        .all(|k| n.of(args.arg(k)) == first)
    {
        return Plan::Forward(first);
    }
    let all: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
    let s = split::split(&all, step, |k| n.of(k));
    let merge = match merge {
        Merge::Values(_) => Merge::Values(s.seq),
        other => other,
    };
    Plan::Split {
        parts: s.parts,
        merge,
    }
}

/// `SCAN cursor [MATCH p] [COUNT c] [TYPE t]`: sent to the cursor's instance with the
/// backend cursor in its place.
fn scan<A: Args + ?Sized>(args: &A, n: impl SlotMap + Copy) -> Plan {
    let cursor = std::str::from_utf8(args.arg(1))
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok());
    let Some(cursor) = cursor else {
        return reply_static(b"-ERR invalid cursor\r\n");
    };
    let (mut instance, mut backend_cursor) = split::scan_cursor_decode(cursor, n.instances());
    // An instance that serves no slot (retired after its slots moved, maybe stopped) holds
    // no key to return: the scan goes on at the next one that serves, from its start.
    if !n.serves(instance) {
        match (instance + 1..n.instances()).find(|&i| n.serves(i)) {
            Some(i) => (instance, backend_cursor) = (i, 0),
            None => return reply_static(b"*2\r\n$1\r\n0\r\n*0\r\n"),
        }
    }
    let cursor = itoa::Buffer::new().format(backend_cursor).to_owned();
    let mut argv: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
    argv[1] = cursor.as_bytes();
    let mut request = Vec::new();
    resp::encode_request(&mut request, &argv);
    Plan::Rewrite {
        instance,
        request,
        merge: Merge::Scan {
            instance,
            instances: n.instances(),
        },
    }
}

/// `CONFIG GET` from one instance; `SET` and `RESETSTAT` on every instance.
fn config<A: Args + ?Sized>(args: &A, row: &'static CommandSpec, fleet: &Fleet) -> Plan {
    let argc = args.argc();
    match row.short_name() {
        // One instance's values, with the proxy's own `port` (the one its clients use).
        "get" if row.arity_ok(argc) => {
            let argv: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
            let mut request = Vec::new();
            resp::encode_request(&mut request, &argv);
            Plan::Rewrite {
                instance: fleet.up.iter().position(|&up| up).unwrap_or(0),
                request,
                merge: Merge::ConfigGet { port: fleet.port },
            }
        }
        "set" => {
            // Redis's checks, before anything is changed (config.c configSetCommand).
            if !row.arity_ok(argc) {
                return Plan::Reply(arity_error(row.name).into());
            }
            if !argc.is_multiple_of(2) {
                return reply_static(b"-ERR syntax error\r\n");
            }
            // The proxy's `port` is the one its clients use ([`config_set_port`]).
            let mut names: Vec<usize> = (2..argc).step_by(2).collect();
            let mut rewritten = None;
            let ports: Vec<usize> = names
                .iter()
                .copied()
                .filter(|&i| args.arg(i).eq_ignore_ascii_case(b"port"))
                .collect();
            if let [i] = ports[..] {
                // An invalid value (or a duplicate) is left to the instances' own errors.
                match config_set_port(args.arg(i + 1), fleet.port) {
                    Some(Err(plan)) => return plan,
                    Some(Ok(())) => {
                        names.retain(|&n| n != i);
                        if names.is_empty() {
                            return reply_static(b"+OK\r\n");
                        }
                        let mut set: Vec<&[u8]> = vec![args.arg(0), args.arg(1)];
                        for &n in &names {
                            set.extend([args.arg(n), args.arg(n + 1)]);
                        }
                        let mut request = Vec::new();
                        resp::encode_request(&mut request, &set);
                        rewritten = Some(request);
                    }
                    None => {}
                }
            }
            let mut get: Vec<&[u8]> = vec![b"CONFIG", b"GET"];
            get.extend(names.iter().map(|&i| args.arg(i)));
            let mut request = Vec::new();
            resp::encode_request(&mut request, &get);
            Plan::ConfigSet {
                get: request,
                request: rewritten,
            }
        }
        "resetstat" if !row.arity_ok(argc) => Plan::Reply(arity_error(row.name).into()),
        "resetstat" => fan_out(Merge::AllOk),
        "rewrite" => not_supported(
            row,
            "the instances share the proxy's configuration file (send it to an instance)",
        ),
        // GET's arity error, and an unknown subcommand (the instance answers Redis's error).
        _ => Plan::ForwardAny,
    }
}

/// `WAIT numreplicas timeout`: there are no replicas, so `0` at once (Redis's argument
/// checks first, in its order: replicationWaitCommand, getTimeoutFromObjectOrReply).
fn wait<A: Args + ?Sized>(args: &A) -> Plan {
    if resp::parse_i64(args.arg(1)).is_none() {
        return reply_static(b"-ERR value is not an integer or out of range\r\n");
    }
    match resp::parse_i64(args.arg(2)) {
        None => reply_static(b"-ERR timeout is not an integer or out of range\r\n"),
        Some(t) if t < 0 => reply_static(b"-ERR timeout is negative\r\n"),
        Some(_) => reply_static(b":0\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::BAD_NAME;

    fn fleet(n: usize) -> Fleet {
        Fleet::new(
            (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect(),
            6380,
        )
    }

    fn run(args: &[&[u8]], n: usize) -> Plan {
        plan(args, &mut Session::default(), &mut fleet(n))
    }

    fn reply(p: Plan) -> Vec<u8> {
        match p {
            Plan::Reply(b) | Plan::ReplyThenClose(b) => b.into_owned(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    /// SCAN passes over an instance that serves no slot (retired: maybe stopped).
    #[test]
    fn scan_skips_instances_that_serve_no_slot() {
        let mut f = fleet(3);
        for slot in 0..engine_core::slot::SLOTS {
            if f.slots.owner(slot) == 1 {
                f.slots.set(slot, 0);
            }
        }
        let mut s = Session::default();
        // Cursor 1 = instance 1 from its start: goes to instance 2 instead.
        match plan(&[b"SCAN".as_slice(), b"1"][..], &mut s, &mut f) {
            Plan::Rewrite {
                instance, request, ..
            } => {
                assert_eq!(instance, 2);
                assert_eq!(request, b"*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n");
            }
            other => panic!("{other:?}"),
        }
        // Nothing serves after it: the scan is over.
        for slot in 0..engine_core::slot::SLOTS {
            if f.slots.owner(slot) == 2 {
                f.slots.set(slot, 0);
            }
        }
        assert_eq!(
            reply(plan(&[b"SCAN".as_slice(), b"1"][..], &mut s, &mut f)),
            b"*2\r\n$1\r\n0\r\n*0\r\n"
        );
    }

    #[test]
    fn scripts_route_by_declared_keys() {
        let (a, b) = keys_on_both();
        let s = b"return 1".as_slice();
        assert_eq!(
            run(&[b"EVAL", s, b"1", &a, b"x"], 2),
            Plan::Script(Some(instance_of(&a, 2)))
        );
        assert_eq!(run(&[b"EVALSHA_RO", s, b"0", b"x"], 2), Plan::Script(None));
        // Declared keys on both instances: run gathered on one.
        assert_eq!(run(&[b"EVAL", s, b"2", &a, &b], 2), Plan::GatherDiscovering);
        assert_eq!(
            reply(run(&[b"EVAL"], 2)),
            b"-ERR wrong number of arguments for 'eval' command\r\n".to_vec()
        );
        assert!(matches!(
            run(&[b"SCRIPT", b"LOAD", s], 2),
            Plan::FanOut {
                merge: Merge::First,
                ..
            }
        ));
        assert!(matches!(
            run(&[b"SCRIPT", b"EXISTS", b"x"], 2),
            Plan::FanOut {
                merge: Merge::AllOf,
                ..
            }
        ));
        assert!(matches!(
            run(&[b"SCRIPT", b"FLUSH"], 2),
            Plan::FanOut {
                merge: Merge::AllOk,
                ..
            }
        ));
        assert_eq!(
            run(&[b"FCALL", b"f", b"1", &a, b"x"], 2),
            Plan::Script(Some(instance_of(&a, 2)))
        );
        assert_eq!(run(&[b"FCALL_RO", b"f", b"0", b"x"], 2), Plan::Script(None));
        assert_eq!(
            run(&[b"FCALL", b"f", b"2", &a, &b], 2),
            Plan::GatherDiscovering
        );
        for sub in [&b"LOAD"[..], b"DELETE", b"RESTORE"] {
            assert!(matches!(
                run(&[b"FUNCTION", sub, b"x"], 2),
                Plan::FanOut {
                    merge: Merge::First,
                    ..
                }
            ));
        }
        assert!(matches!(
            run(&[b"FUNCTION", b"FLUSH"], 2),
            Plan::FanOut {
                merge: Merge::AllOk,
                ..
            }
        ));
        for sub in [&b"LIST"[..], b"DUMP", b"STATS"] {
            assert_eq!(run(&[b"FUNCTION", sub], 2), Plan::ForwardAny);
        }
        // KILL must not wait behind the busy script on the shared link.
        for cmd in [&b"FUNCTION"[..], b"SCRIPT"] {
            assert_eq!(run(&[cmd, b"KILL"], 2), Plan::DedicatedFanOut(Merge::Kill));
        }
        let mut out = Vec::new();
        crate::split::merge(
            &Merge::AllOf,
            &[b"*2\r\n:1\r\n:1\r\n", b"*2\r\n:0\r\n:1\r\n"],
            &mut out,
        );
        assert_eq!(out, b"*2\r\n:0\r\n:1\r\n");
    }

    /// Two keys that land on different instances out of 2.
    fn keys_on_both() -> (Vec<u8>, Vec<u8>) {
        let a = b"k0".to_vec();
        let ia = instance_of(&a, 2);
        let b = (1..1000)
            .map(|i| format!("k{i}").into_bytes())
            .find(|k| instance_of(k, 2) != ia)
            .unwrap();
        (a, b)
    }

    #[test]
    fn single_key_commands_forward_to_the_key_instance() {
        for key in [&b"foo"[..], b"bar", b"{user1000}.following"] {
            assert_eq!(run(&[b"GET", key], 3), Plan::Forward(instance_of(key, 3)));
            assert_eq!(
                run(&[b"set", key, b"v", b"EX", b"10"], 3),
                Plan::Forward(instance_of(key, 3))
            );
        }
    }

    #[test]
    fn arity_and_unknown_errors_use_redis_text() {
        assert_eq!(
            reply(run(&[b"GET"], 2)),
            b"-ERR wrong number of arguments for 'get' command\r\n"
        );
        assert_eq!(
            reply(run(&[b"FOO", b"a", b"b"], 2)),
            b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"
        );
        assert_eq!(
            reply(run(&[b"FOO"], 2)),
            b"-ERR unknown command 'FOO', with args beginning with: \r\n"
        );
        assert_eq!(
            reply(run(&[b"MSET", b"a"], 2)),
            b"-ERR wrong number of arguments for 'mset' command\r\n"
        );
        assert_eq!(
            reply(run(&[b"MSET", b"a", b"1", b"b"], 2)),
            b"-ERR wrong number of arguments for 'mset' command\r\n"
        );
        assert_eq!(
            reply(run(&[b"PING", b"a", b"b"], 2)),
            b"-ERR wrong number of arguments for 'ping' command\r\n"
        );
    }

    #[test]
    fn dump_restore_migrate_route_by_key() {
        let (a, b) = keys_on_both();
        let (ia, ib) = (instance_of(&a, 2), instance_of(&b, 2));
        assert_eq!(run(&[b"DUMP", &a], 2), Plan::Forward(ia));
        assert_eq!(
            run(&[b"RESTORE", &b, b"0", b"payload"], 2),
            Plan::Forward(ib)
        );
        let mig = |keys: &[&[u8]]| {
            let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", b"6379", b"", b"0", b"5"];
            args.push(b"KEYS");
            args.extend_from_slice(keys);
            run(&args, 2)
        };
        assert_eq!(
            run(&[b"MIGRATE", b"127.0.0.1", b"6379", &a, b"0", b"5"], 2),
            Plan::Forward(ia)
        );
        assert_eq!(mig(&[&a, &a]), Plan::Forward(ia));
        assert_eq!(reply(mig(&[&a, &b])), CROSSSLOT);
    }

    #[test]
    fn multi_key_on_one_instance_forwards_else_splits_or_refuses() {
        let (a, b) = keys_on_both();
        let ia = instance_of(&a, 2);
        assert_eq!(run(&[b"MGET", &a, &a], 2), Plan::Forward(ia));
        assert!(
            matches!(run(&[b"MGET", &a, &b], 2), Plan::Split { ref parts, .. } if parts.len() == 2)
        );
        assert!(matches!(
            run(&[b"DEL", &a, &b], 2),
            Plan::Split {
                merge: Merge::Sum,
                ..
            }
        ));
        assert!(matches!(
            run(&[b"MSET", &a, b"1", &b, b"2"], 2),
            Plan::Split {
                merge: Merge::AllOk,
                ..
            }
        ));
        // Keys on both instances, not splittable: run gathered on one.
        assert_eq!(run(&[b"RENAME", &a, &b], 2), Plan::Gather);
        assert_eq!(run(&[b"RENAME", &a, &a], 2), Plan::Forward(ia));
        assert_eq!(run(&[b"MSETNX", &a, b"1", &b, b"2"], 2), Plan::Gather);
        assert_eq!(run(&[b"MSETNX", &a, b"1"], 2), Plan::Forward(ia));
        // Hash tags keep keys together.
        assert_eq!(
            run(&[b"RENAME", b"{t}a", b"{t}b"], 2),
            Plan::Forward(instance_of(b"t", 2))
        );
    }

    #[test]
    fn local_answers() {
        assert_eq!(reply(run(&[b"PING"], 2)), b"+PONG\r\n");
        assert_eq!(reply(run(&[b"ping", b"hi"], 2)), b"$2\r\nhi\r\n");
        assert_eq!(reply(run(&[b"ECHO", b"x y"], 2)), b"$3\r\nx y\r\n");
        assert_eq!(reply(run(&[b"SELECT", b"0"], 2)), b"+OK\r\n");
        assert_eq!(reply(run(&[b"SELECT", b"15"], 2)), b"+OK\r\n");
        for bad in [&b"16"[..], b"-1", b"2147483647"] {
            assert_eq!(
                reply(run(&[b"SELECT", bad], 2)),
                b"-ERR DB index is out of range\r\n"
            );
        }
        assert_eq!(
            reply(run(&[b"SELECT", b"2147483648"], 2)),
            &b"-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"[..]
        );
        for bad in [&b"x"[..], b"99999999999999999999", b"1.0", b""] {
            assert_eq!(
                reply(run(&[b"SELECT", bad], 2)),
                b"-ERR value is not an integer or out of range\r\n"
            );
        }
        let mut session = Session::default();
        let mut f = fleet(2);
        assert_eq!(
            reply(plan(&[&b"SELECT"[..], b"3"][..], &mut session, &mut f)),
            b"+OK\r\n"
        );
        assert_eq!(session.db, 3);
        assert_eq!(
            reply(plan(&[&b"SELECT"[..], b"16"][..], &mut session, &mut f)),
            b"-ERR DB index is out of range\r\n"
        );
        assert_eq!(session.db, 3, "a refused SELECT changes nothing");
        assert_eq!(
            reply(plan(&[&b"RESET"[..]][..], &mut session, &mut f)),
            b"+RESET\r\n"
        );
        assert_eq!(session.db, 0);
        assert_eq!(
            reply(run(&[b"HELLO", b"4"], 2)),
            b"-NOPROTO unsupported protocol version\r\n"
        );
        assert!(matches!(run(&[b"QUIT"], 2), Plan::ReplyThenClose(_)));
        let hello = reply(run(&[b"HELLO", b"2"], 2));
        assert!(hello.starts_with(b"*14\r\n$6\r\nserver\r\n"));
        let mut session = Session {
            id: 7,
            ..Session::default()
        };
        let mut f = fleet(2);
        assert_eq!(
            reply(plan(
                &[&b"CLIENT"[..], b"SETNAME", b"app"][..],
                &mut session,
                &mut f
            )),
            b"+OK\r\n"
        );
        assert_eq!(
            reply(plan(
                &[&b"client"[..], b"getname"][..],
                &mut session,
                &mut f
            )),
            b"$3\r\napp\r\n"
        );
        assert_eq!(
            reply(plan(&[&b"CLIENT"[..], b"ID"][..], &mut session, &mut f)),
            b":7\r\n"
        );
        assert_eq!(
            reply(plan(
                &[&b"CLIENT"[..], b"SETNAME", b"a b"][..],
                &mut session,
                &mut f
            )),
            BAD_NAME
        );
    }

    #[test]
    fn hello_3_switches_the_session_to_resp3_until_reset() {
        let mut session = Session {
            id: 9,
            ..Session::default()
        };
        let mut f = fleet(2);
        fn ask(args: &[&[u8]], s: &mut Session, f: &mut Fleet) -> Vec<u8> {
            reply(plan(args, s, f))
        }
        // redis-server 7.0.15's HELLO 3 map, byte for byte (id aside).
        assert_eq!(
            ask(&[b"HELLO", b"3"], &mut session, &mut f),
            &b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
               $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:9\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
               $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"[..]
        );
        assert_eq!(session.proto, resp::Proto::Resp3);
        assert!(ask(&[b"HELLO"], &mut session, &mut f).starts_with(b"%7\r\n"));
        assert_eq!(
            ask(&[b"HELLO", b"4"], &mut session, &mut f),
            b"-NOPROTO unsupported protocol version\r\n"
        );
        assert_eq!(session.proto, resp::Proto::Resp3);
        assert_eq!(
            ask(&[b"CLIENT", b"GETNAME"], &mut session, &mut f),
            b"_\r\n"
        );
        match plan(&[&b"INFO"[..]][..], &mut session, &mut f) {
            Plan::FanOut {
                merge: Merge::Info { proto, .. },
                ..
            } => assert_eq!(proto, resp::Proto::Resp3),
            other => panic!("{other:?}"),
        }
        assert_eq!(ask(&[b"RESET"], &mut session, &mut f), b"+RESET\r\n");
        assert_eq!(session.proto, resp::Proto::Resp2);
        assert_eq!(
            ask(&[b"CLIENT", b"GETNAME"], &mut session, &mut f),
            b"$-1\r\n"
        );
        assert!(ask(&[b"HELLO"], &mut session, &mut f).starts_with(b"*14\r\n"));
    }

    #[test]
    fn keyless_commands_fan_out_or_are_refused() {
        assert!(matches!(
            run(&[b"DBSIZE"], 2),
            Plan::FanOut {
                merge: Merge::Sum,
                ..
            }
        ));
        assert!(matches!(
            run(&[b"KEYS", b"*"], 2),
            Plan::FanOut {
                merge: Merge::Concat,
                ..
            }
        ));
        assert!(matches!(
            run(&[b"FLUSHALL"], 2),
            Plan::FanOut {
                merge: Merge::AllOk,
                ..
            }
        ));
        assert_eq!(run(&[b"COMMAND"], 2), Plan::ForwardAny);
        assert!(matches!(
            run(&[b"CONFIG", b"SET", b"x", b"y"], 2),
            Plan::ConfigSet { .. }
        ));
        let r = reply(run(&[b"CONFIG", b"REWRITE"], 2));
        assert!(
            r.starts_with(b"-ERR CONFIG REWRITE is not supported"),
            "{}",
            String::from_utf8_lossy(&r)
        );
    }

    #[test]
    fn scan_rewrites_the_cursor_for_its_instance() {
        // Proxy cursor 7 with 2 instances = instance 1, backend cursor 3.
        match run(&[b"SCAN", b"7", b"COUNT", b"10"], 2) {
            Plan::Rewrite {
                instance, request, ..
            } => {
                assert_eq!(instance, 1);
                assert_eq!(
                    request,
                    b"*4\r\n$4\r\nSCAN\r\n$1\r\n3\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reply(run(&[b"SCAN", b"x"], 2)), b"-ERR invalid cursor\r\n");
        assert_eq!(
            reply(run(&[b"SCAN", b"18446744073709551616"], 2)),
            b"-ERR invalid cursor\r\n"
        );
    }

    #[test]
    fn every_single_key_command_of_the_table_routes_by_its_key() {
        // Lists, hashes, sets, sorted sets, strings…: one legacy key and no movable keys
        // means forwarded to the key's instance, whatever the command.
        let mut checked = 0;
        for spec in engine_core::command::COMMANDS {
            if spec.first_key <= 0
                || spec.first_key != spec.last_key
                || spec.has_flag(Flags::MOVABLEKEYS)
                || !spec.has_keys()
                || !spec.subcommands.is_empty()
            {
                continue;
            }
            let argc = (spec.arity.unsigned_abs() as usize).max(spec.first_key as usize + 1);
            let key = format!("key-of-{}", spec.name);
            let mut args: Vec<&[u8]> = vec![spec.name.as_bytes(); argc];
            for a in args.iter_mut().skip(1) {
                *a = b"1";
            }
            args[spec.first_key as usize] = key.as_bytes();
            assert_eq!(
                run(&args, 3),
                Plan::Forward(instance_of(key.as_bytes(), 3)),
                "{}",
                spec.name
            );
            checked += 1;
        }
        assert!(checked > 80, "only {checked} single-key commands");
    }

    #[test]
    fn rows_the_engines_do_not_run_route_by_key_or_answer_unknown() {
        // Regression (fuzz/regressions/split/): SORT alone once made the finder name a key
        // past the end. No key: the proxy answers Redis's unknown-command text itself.
        {
            let name = "PSYNC";
            assert_eq!(
                reply(run(&[name.as_bytes()], 2)),
                format!("-ERR unknown command '{name}', with args beginning with: \r\n")
                    .into_bytes(),
            );
        }
        // SORT, BITFIELD, MIGRATE and GEORADIUS are implemented (issue 18): alone they are
        // arity errors, as from redis-server.
        for name in ["sort", "sort_ro", "bitfield", "migrate", "georadius"] {
            assert_eq!(
                reply(run(&[name.to_uppercase().as_bytes()], 2)),
                format!("-ERR wrong number of arguments for '{name}' command\r\n").into_bytes(),
            );
        }
        // XREAD is implemented: alone it is an arity error.
        assert_eq!(
            reply(run(&[b"XREAD"], 2)),
            b"-ERR wrong number of arguments for 'xread' command\r\n".to_vec()
        );
        let key = b"k".as_slice();
        assert_eq!(
            run(&[b"XADD", key, b"*", b"f", b"v"], 3),
            Plan::Forward(instance_of(key, 3))
        );
        // Streams on two instances: split, one part each.
        let (a, b) =
            (0..100)
                .map(|i| format!("s{i}").into_bytes())
                .fold((None, None), |(a, b), k| match instance_of(&k, 2) {
                    0 if a.is_none() => (Some(k), b),
                    1 if b.is_none() => (a, Some(k)),
                    _ => (a, b),
                });
        let (a, b) = (a.unwrap(), b.unwrap());
        let split = [
            b"XREADGROUP".as_slice(),
            b"GROUP",
            b"streams",
            b"c",
            b"STREAMS",
            &a,
            &b,
            b">",
            b">",
        ];
        assert!(matches!(run(&split, 2), Plan::Split { ref parts, .. } if parts.len() == 2));
        // XREAD without BLOCK goes over the shared link; with BLOCK, a dedicated one.
        let read = [b"XREAD".as_slice(), b"COUNT", b"2", b"STREAMS", key, b"0"];
        assert_eq!(run(&read, 3), Plan::Forward(instance_of(key, 3)));
        let blocking = [b"XREAD".as_slice(), b"BLOCK", b"0", b"STREAMS", key, b"$"];
        assert_eq!(run(&blocking, 3), Plan::Blocking(instance_of(key, 3)));
    }

    #[test]
    fn every_subcommand_with_a_key_routes_by_its_key() {
        // OBJECT ENCODING k, MEMORY USAGE k, XINFO STREAM k, …: every subcommand row whose key
        // specs find a key (implemented by the engines or not) goes to the key's instance.
        let mut checked = Vec::new();
        for top in engine_core::command::all() {
            for sub in top.subcommands {
                if !sub.has_keys() || sub.has_flag(Flags::MOVABLEKEYS) {
                    continue;
                }
                let argc = (sub.arity.unsigned_abs() as usize).max(3);
                let key = format!("key-of-{}", sub.name);
                let mut args: Vec<&[u8]> = vec![b"1"; argc];
                args[0] = top.name.as_bytes();
                args[1] = sub.short_name().as_bytes();
                let keys = engine_core::command::keys(sub, args.as_slice());
                assert_eq!(keys.len(), 1, "{}", sub.name);
                args[keys.as_slice()[0].pos] = key.as_bytes();
                assert_eq!(
                    run(&args, 3),
                    Plan::Forward(instance_of(key.as_bytes(), 3)),
                    "{}",
                    sub.name
                );
                checked.push(sub.name);
            }
        }
        for name in [
            "object|encoding",
            "memory|usage",
            "xinfo|stream",
            "xgroup|create",
        ] {
            assert!(checked.contains(&name), "{name} not checked: {checked:?}");
        }
    }

    #[test]
    fn movable_keys_blocking_transactions_and_pubsub_plans() {
        let (a, b) = keys_on_both();
        let (ia, ib) = (instance_of(&a, 2), instance_of(&b, 2));
        // The destination alone must not route ZUNIONSTORE: its sources count too.
        assert_eq!(run(&[b"ZUNIONSTORE", &a, b"1", &b], 2), Plan::Gather);
        assert_eq!(run(&[b"ZUNIONSTORE", &a, b"1", &a], 2), Plan::Forward(ia));
        assert_eq!(
            run(&[b"LMPOP", b"2", &b, &b, b"LEFT"], 2),
            Plan::Forward(ib)
        );
        assert_eq!(run(&[b"SINTERCARD", b"2", &a, &b], 2), Plan::Gather);
        // A malformed numkeys: any instance answers the syntax error.
        assert_eq!(run(&[b"SINTERCARD", b"x", &a], 2), Plan::ForwardAny);
        assert_eq!(run(&[b"SINTER", &a, &b], 2), Plan::Gather);
        assert_eq!(run(&[b"SMOVE", &b, &b, b"m"], 2), Plan::Forward(ib));
        // Blocking commands get the client's dedicated connection to their instance.
        assert_eq!(run(&[b"BLPOP", &a, &a, b"0"], 2), Plan::Blocking(ia));
        // Over several instances: tried gathered, waiting between tries.
        assert_eq!(run(&[b"BLPOP", &a, &b, b"0"], 2), Plan::GatherBlocking);
        assert_eq!(
            run(&[b"BLMPOP", b"0", b"1", &b, b"LEFT"], 2),
            Plan::Blocking(ib)
        );
        assert_eq!(run(&[b"BRPOPLPUSH", &a, &b, b"0"], 2), Plan::GatherBlocking);
        assert_eq!(run(&[b"BZPOPMIN", &b, b"0"], 2), Plan::Blocking(ib));
        // A malformed numkeys: no key, so any instance answers the error (it cannot block).
        assert_eq!(
            run(&[b"BZMPOP", b"1", b"0", &a, b"MIN"], 2),
            Plan::ForwardAny
        );
        // Transactions.
        assert_eq!(run(&[b"MULTI"], 2), Plan::Multi);
        assert_eq!(run(&[b"WATCH", &a, &a], 2), Plan::Watch(ia));
        // Keys on two instances: each instance's keys are watched there (crate::tx).
        assert_eq!(run(&[b"WATCH", &a, &b], 2), Plan::WatchMany);
        assert_eq!(reply(run(&[b"EXEC"], 2)), b"-ERR EXEC without MULTI\r\n");
        assert_eq!(reply(run(&[b"UNWATCH"], 2)), b"+OK\r\n");
        // Pub/sub: channels route like keys.
        assert_eq!(run(&[b"PUBLISH", &b, b"m"], 2), Plan::Forward(ib));
        assert_eq!(
            run(&[b"SUBSCRIBE", b"c"], 2),
            Plan::PubSub(pubsub::Kind::Subscribe)
        );
        assert_eq!(
            run(&[b"punsubscribe"], 2),
            Plan::PubSub(pubsub::Kind::Punsubscribe)
        );
        assert!(matches!(
            run(&[b"PUBSUB", b"NUMPAT"], 2),
            Plan::FanOut {
                merge: Merge::Max,
                ..
            }
        ));
        assert_eq!(run(&[b"PUBSUB", b"NUMSUB", &a], 2), Plan::Forward(ia));
        // WAIT: no replicas, answered at once.
        assert_eq!(reply(run(&[b"WAIT", b"0", b"0"], 2)), b":0\r\n");
    }
}
