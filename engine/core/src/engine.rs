//! The engine: one keyspace plus settings, statistics and the command handlers.
//!
//! Everything the engine does happens in [`Engine::exec`] (one command) and [`Engine::cron`]
//! (background work per timer tick); both take the time as an argument, so the same code runs
//! in the server process and in the browser replica.

use crate::dispatch;
use crate::expire;
use crate::keyspace::Keyspace;
use crate::{Client, Flow, HostInfo};

/// Settings visible through CONFIG GET/SET (Redis names).
#[derive(Clone, Debug)]
pub struct Config {
    /// `proto-max-bulk-len`, bytes: the largest bulk string a client may send, and the largest
    /// string APPEND/SETRANGE may build.
    pub proto_max_bulk_len: u64,
    /// `hz`: background tasks per second (active expiry). Clamped to 1..=500 like Redis.
    pub hz: u32,
    /// `hll-sparse-max-bytes`: the largest sparse HyperLogLog before it turns dense
    /// (`types::hyperloglog`; Redis default 3000).
    pub hll_sparse_max_bytes: u64,
    /// `list-compress-depth`, Redis default 0: quicklist nodes left uncompressed at each end.
    /// Accepted and reported with Redis's range (0..=2^31-1); recached does not compress list
    /// nodes (nothing a client can observe depends on it: replies and OBJECT ENCODING are the
    /// same either way).
    pub list_compress_depth: i64,
    /// The listpack/intset thresholds of hashes, sets and sorted sets
    /// (`hash-max-listpack-entries`…, `set-max-intset-entries`) and the quicklist node size
    /// (`list-max-listpack-size`; see `types::encoding`).
    pub encoding: crate::types::EncodingLimits,
    /// `sanitize-dump-payload` (`no`, `yes`, `clients`; Redis default `no`): accepted and
    /// reported; RESTORE always checks a payload as deeply as `yes` would (`crate::dump`).
    pub sanitize_dump_payload: &'static str,
    /// Seed for the keyspace hasher and sampling RNG; the server fills it randomly so hash
    /// flooding cannot be planned. Tests use fixed seeds.
    pub hash_seed: u64,
    /// `maxclients` (reported; the server enforces it).
    pub maxclients: u64,
    /// `timeout`: idle client timeout in seconds, 0 = never (reported; the server enforces it).
    pub timeout: u64,
    /// `maxmemory`, bytes, 0 = no limit (see `crate::evict`).
    pub maxmemory: u64,
    /// `maxmemory-policy` (one of `MAXMEMORY_POLICIES`).
    pub maxmemory_policy: &'static str,
    /// `maxmemory-samples`: keys sampled per eviction round (Redis default 5).
    pub maxmemory_samples: u32,
    /// `busy-reply-threshold` (alias `lua-time-limit`), ms: a script running longer lets the
    /// server answer other clients `-BUSY` and accept SCRIPT/FUNCTION KILL (docs/scripting.md).
    pub busy_reply_threshold: u64,
    /// `stop-writes-on-bgsave-error` (Redis default yes): after a failed background save,
    /// write commands get `-MISCONF …` until a save succeeds (`crate::snapshot::writes_denied`).
    pub stop_writes_on_bgsave_error: bool,
    /// `min-replicas-to-write` / `min-replicas-max-lag` (Redis defaults 0 and 10): with both
    /// non-zero, writes get `-NOREPLICAS` (recached has no replicas; `crate::snapshot::
    /// refused_write`).
    pub min_replicas_to_write: u64,
    pub min_replicas_max_lag: u64,
    /// `databases`: how many databases SELECT can choose from (Redis default 16, at least 1).
    pub databases: usize,
    /// `lfu-log-factor` (Redis default 10).
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`, minutes (Redis default 1).
    pub lfu_decay_time: u32,
    /// Cluster topology: every instance of the fleet as `host:port`, in instance order (the
    /// slot map numbers them `0..n`). Empty = standalone (owns every key, CLUSTER disabled).
    /// See `cmd::cluster` and docs/cluster.md.
    pub cluster_nodes: Vec<String>,
    /// This engine's position in `cluster_nodes`.
    pub cluster_index: usize,
    /// Host announced for nodes whose host is a wildcard (`0.0.0.0`); empty = the local
    /// address of the asking client's connection.
    pub cluster_announce_host: String,
    /// `requirepass`, users and `protected-mode` (see `crate::acl`, docs/security.md).
    pub acl: crate::acl::AclConfig,
    /// `feed-buffer-limit`, bytes, 0 = none: unsent output a keychange feed subscriber may
    /// accumulate before it is told to resync (see `crate::feed`, docs/feed.md).
    pub feed_buffer_limit: u64,
    /// `client-query-buffer-limit`, bytes (Redis default 1gb, at least 1mb): unparsed input
    /// of one connection above it closes the connection (enforced by the server).
    pub client_query_buffer_limit: u64,
    /// `client-output-buffer-limit`: hard/soft limits per client class (normal, replica,
    /// pubsub), Redis's defaults (enforced by the server; see `cmd::server::OutputLimits`).
    pub client_output_buffer_limit: crate::cmd::server::OutputLimits,
    /// `stream-node-max-entries`: entries per stream node, 0 = no limit (Redis default 100).
    pub stream_node_max_entries: u64,
    /// `stream-node-max-bytes`: bytes per stream node, 0 = no limit (Redis default 4096).
    pub stream_node_max_bytes: u64,
    /// `tracking-table-max-keys`: keys the client-side caching table may hold before random
    /// ones are invalidated, 0 = no limit (Redis default 1000000; `crate::tracking`).
    pub tracking_table_max_keys: u64,
    /// `latency-tracking` (default yes): per-command latency histograms for INFO
    /// latencystats; `latency-tracking-info-percentiles` (default 50 99 99.9).
    pub latency_tracking: bool,
    pub latency_tracking_percentiles: Vec<f64>,
    /// Parameters stored without effect, by name, where set to other than their default
    /// (`crate::cmd::config_stored`).
    pub stored: std::collections::BTreeMap<&'static str, String>,
}

/// Values `maxmemory-policy` accepts, in Redis's order (its error text lists them so).
pub const MAXMEMORY_POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];

impl Default for Config {
    fn default() -> Self {
        Config {
            proto_max_bulk_len: 512 * 1024 * 1024,
            hz: 10,
            hll_sparse_max_bytes: 3000,
            list_compress_depth: 0,
            encoding: crate::types::EncodingLimits::DEFAULT,
            sanitize_dump_payload: "no",
            hash_seed: 0,
            maxclients: 10000,
            timeout: 0,
            maxmemory: 0,
            maxmemory_policy: "noeviction",
            maxmemory_samples: 5,
            busy_reply_threshold: 5000,
            stop_writes_on_bgsave_error: true,
            min_replicas_to_write: 0,
            min_replicas_max_lag: 10,
            databases: 16,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            cluster_nodes: Vec::new(),
            cluster_index: 0,
            cluster_announce_host: String::new(),
            acl: Default::default(),
            feed_buffer_limit: crate::feed::DEFAULT_BUFFER_LIMIT,
            client_query_buffer_limit: 1024 * 1024 * 1024,
            client_output_buffer_limit: crate::cmd::server::OutputLimits::default(),
            stream_node_max_entries: crate::types::stream::NODE_MAX_ENTRIES,
            stream_node_max_bytes: crate::types::stream::NODE_MAX_BYTES,
            tracking_table_max_keys: crate::tracking::DEFAULT_MAX_KEYS,
            stored: Default::default(),
            latency_tracking: true,
            latency_tracking_percentiles: vec![50.0, 99.0, 99.9],
        }
    }
}

/// Counters INFO reports (reset by CONFIG RESETSTAT), besides the keyspace's own.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Commands run (handler called), like redis `stat_numcommands`.
    pub total_commands_processed: u64,
    /// Commands refused before running: unknown command/subcommand, wrong arity.
    pub rejected_calls: u64,
    /// Commands that ran and answered an error.
    pub failed_calls: u64,
    /// The reply being written is an error already counted where it arose (see
    /// `crate::call::ErrorReply`): the errorstats count skips it once.
    pub error_counted: bool,
    /// Commands that changed the keyspace.
    pub dirty_commands: u64,
    /// Keys removed by the active expiry cycle (also counted in `expired_keys`).
    pub active_expired_keys: u64,
    /// Error replies by code (the error's first word: `ERR`, `WRONGTYPE`, `NOGROUP`…), for
    /// INFO `errorstats` (redis `errors` rax, at most [`ERRORSTATS_LIMIT`] codes).
    pub errors: std::collections::BTreeMap<String, u64>,
}

/// redis `ERRORSTATS_LIMIT`: distinct error codes tracked; later new codes are not.
pub const ERRORSTATS_LIMIT: usize = 128;

/// Network counters only the server sees; it adds to them (on accept, refusal, read and
/// write) and INFO `stats` prints them.
#[derive(Clone, Debug, Default)]
pub struct NetStats {
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_net_input_bytes: u64,
    pub total_net_output_bytes: u64,
}

pub struct Engine {
    pub config: Config,
    pub host: HostInfo,
    /// Connection and byte counters, kept current by the server.
    pub net: NetStats,
    /// The keyspace with the running command's database swapped in (between commands, the
    /// last one used); see [`Engine::use_db`]. Code outside a command reads a given database
    /// with [`Engine::db`] or swaps it in with [`Engine::with_db`].
    pub(crate) ks: Keyspace,
    /// Every database's data, `databases` slots; the slot of the database now in `ks` holds
    /// an empty placeholder.
    pub(crate) dbs: Vec<crate::keyspace::Db>,
    pub(crate) stats: Stats,
    /// INFO `run_id`: 40 hex digits derived from the hash seed.
    pub(crate) run_id: String,
    /// INFO `used_memory_peak`, updated by `cron` and INFO.
    pub(crate) used_memory_peak: u64,
    /// INFO `instantaneous_ops_per_sec`, sampled by `cron`.
    pub(crate) ops_per_sec: u64,
    /// `(time µs, total_commands_processed)` at the last ops sample.
    ops_sample: (u64, u64),
    /// Output for other connections (pub/sub messages, woken blocked clients); see
    /// [`crate::Delivery`].
    pub(crate) deliveries: Vec<crate::Delivery>,
    /// Clients in MONITOR mode, in the order they asked (`crate::monitor`).
    pub(crate) monitors: Vec<u64>,
    /// Parked clients of blocking commands.
    pub(crate) blocking: crate::blocking::Blocking,
    /// Channels and patterns with their subscribers.
    pub(crate) pubsub: crate::cmd::pubsub::PubSub,
    /// WATCHed keys.
    pub(crate) watches: crate::cmd::tx::Watches,
    /// The fleet topology and slot owners (standalone when empty).
    pub(crate) cluster: crate::cmd::cluster::Cluster,
    /// Eviction pool and counter (maxmemory).
    pub(crate) evict: crate::evict::Evictor,
    /// INFO commandstats counters.
    pub(crate) cmdstats: crate::cmd::server::CommandStats,
    /// LATENCY events (`crate::latency`; the histograms live in `cmdstats`).
    pub(crate) latency: crate::latency::Latency,
    /// CLIENT PAUSE (`crate::pause`).
    pub(crate) pause: crate::pause::Pause,
    /// Key locks of transactions spanning engines (`crate::txlock`).
    pub(crate) locks: crate::txlock::Locks,
    /// Slots held by `recached resize` (`crate::cmd::cluster::hold`).
    pub(crate) cluster_holds: crate::cmd::cluster::hold::Holds,
    /// SLOWLOG (`crate::slowlog`).
    pub(crate) slowlog: crate::slowlog::SlowLog,
    /// `(now_us, timer)` when the last timed command ended (`crate::dispatch`).
    pub(crate) timer_mark: (u64, u64),
    /// Snapshot state INFO `persistence` and LASTSAVE report (kept by the server's hook).
    pub persist: crate::snapshot::PersistInfo,
    /// The server's SAVE/BGSAVE implementation; `None` = snapshots disabled (wasm, tests).
    pub persistence: Option<Box<dyn crate::snapshot::Persistence>>,
    /// MIGRATE's connections to other servers, installed by the engine process
    /// ([`crate::dump::migrate`]); `None`: MIGRATE cannot connect.
    pub migrate: Option<Box<dyn crate::dump::migrate::Sockets>>,
    /// The listening sockets, installed by the engine process (CONFIG SET `port`, `bind`;
    /// [`crate::cmd::config_listen`]); `None`: a new address is only recorded.
    pub listeners: Option<Box<dyn crate::cmd::config_listen::Listeners>>,
    /// Keychange feed subscribers and sequence numbers (`crate::feed`, `crate::effect`).
    pub(crate) feed: crate::feed::Feed,
    /// Users, permissions, ACL LOG (`crate::acl`).
    pub(crate) acl: crate::acl::Acl,
    /// The Lua host (EVAL, SCRIPT) the server installs; `None` = no scripting (wasm, tests).
    /// Taken out while a script runs, so the script can call back into the engine
    /// (`crate::script`).
    pub scripting: Option<Box<dyn crate::script::Scripting>>,
    /// Set while a script runs past `busy-reply-threshold` and the server serves other
    /// clients from inside it (redis `SCRIPT_TIMEDOUT`; `crate::script::Busy`).
    pub busy: Option<crate::script::Busy>,
    /// redis `server.pre_command_oom_state`: the last command found memory above `maxmemory`
    /// that eviction could not free (set by dispatch's maxmemory check; scripts read it).
    pub(crate) pre_command_oom: bool,
    /// Client-side caching: tracking clients, the tracking table, BCAST prefixes
    /// (`crate::tracking`).
    pub(crate) tracking: crate::tracking::Tracking,
}

impl Engine {
    /// Random bytes: the host's random source, else the engine's seeded generator.
    pub fn random_bytes(&mut self, buf: &mut [u8]) {
        if let Some(fill) = self.host.random {
            fill(buf);
            return;
        }
        for chunk in buf.chunks_mut(8) {
            let r = self.ks.next_random().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    pub fn new(config: Config) -> Engine {
        let mut ks = Keyspace::new(config.hash_seed);
        // An invalid topology is refused by the server before it gets here (it calls
        // `Cluster::from_config` itself); a library user who passes one gets a standalone engine.
        let cluster = crate::cmd::cluster::Cluster::from_config(&config).unwrap_or_default();
        let run_id = (0..3)
            .map(|_| format!("{:016x}", ks.next_random()))
            .collect::<String>()[..40]
            .to_string();
        // An invalid user list is refused by the server before it gets here; a library user
        // who passes one gets an engine nobody can use (fail closed), not an open one.
        let acl = crate::acl::Acl::from_config(&config.acl).unwrap_or_else(|_| {
            let mut acl = crate::acl::Acl::new();
            let _ = acl.set_user(crate::acl::DEFAULT_USER.as_bytes(), &[b"off"]);
            acl
        });
        let dbs = (0..config.databases.max(1))
            .map(|i| crate::keyspace::Db::new(i, config.hash_seed))
            .collect();
        let tracking = crate::tracking::Tracking::new(config.hash_seed);
        let mut e = Engine {
            acl,
            ks,
            dbs,
            config,
            host: HostInfo::default(),
            net: NetStats::default(),
            stats: Stats::default(),
            deliveries: Vec::new(),
            blocking: Default::default(),
            pubsub: Default::default(),
            watches: Default::default(),
            cluster,
            persist: Default::default(),
            persistence: None,
            migrate: None,
            listeners: None,
            feed: Default::default(),
            run_id,
            used_memory_peak: crate::cmd::server::USED_MEMORY_STARTUP,
            ops_per_sec: 0,
            ops_sample: (0, 0),
            evict: Default::default(),
            monitors: Vec::new(),
            scripting: None,
            busy: None,
            pre_command_oom: false,
            cmdstats: Default::default(),
            latency: Default::default(),
            pause: Default::default(),
            locks: Default::default(),
            cluster_holds: Default::default(),
            slowlog: Default::default(),
            timer_mark: (u64::MAX, 0),
            tracking,
        };
        crate::evict::apply_config(&mut e);
        e
    }

    /// The slot table (cluster mode), for the server's nodes file and peer links.
    pub fn cluster(&self) -> &crate::cmd::cluster::Cluster {
        &self.cluster
    }

    /// Adopts a nodes file at start (`Cluster::load_conf`).
    pub fn load_cluster_conf(&mut self, text: &str) -> Result<(), String> {
        self.cluster.load_conf(text)
    }

    /// Number of databases (`databases`).
    pub fn databases(&self) -> usize {
        self.dbs.len()
    }

    /// Index of the database now in `ks` (the running command's).
    #[inline]
    pub fn current_db(&self) -> usize {
        self.ks.data.index
    }

    /// Swaps database `n` (< [`databases`](Self::databases)) into the keyspace: two
    /// `mem::swap`s of a few words, done only when a command runs on another database than
    /// the previous one, so the hot path costs one comparison.
    #[inline]
    pub fn use_db(&mut self, n: usize) {
        if self.ks.data.index != n {
            crate::keyspace::switch(&mut self.ks, &mut self.dbs, n);
        }
    }

    /// Database `n`'s data, wherever it is now.
    pub fn db(&self, n: usize) -> &crate::keyspace::Db {
        if self.ks.data.index == n {
            &self.ks.data
        } else {
            &self.dbs[n]
        }
    }

    /// Database `n`'s data, wherever it is now, to change in place (WATCH bookkeeping).
    pub fn db_mut(&mut self, n: usize) -> &mut crate::keyspace::Db {
        if self.ks.data.index == n {
            &mut self.ks.data
        } else {
            &mut self.dbs[n]
        }
    }

    /// SWAPDB `a` `b` (`a != b`): the two databases exchange their data; WATCHes of keys
    /// present in either fail and blocked clients whose key now exists are served (redis
    /// `dbSwapDatabases` → `touchAllWatchedKeysInDb`, `scanDatabaseForReadyKeys`).
    pub fn swap_dbs(&mut self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let (dx, dy) = (self.db(x), self.db(y));
            let hit: Vec<Box<[u8]>> = dx
                .watched
                .iter()
                .filter(|k| dx.contains(k) || dy.contains(k))
                .map(|k| crate::keyspace::qualify(x, k))
                .collect();
            self.ks.touched.extend(hit);
        }
        let cur = self.current_db();
        if a == cur || b == cur {
            let other = if a == cur { b } else { a };
            crate::keyspace::Db::swap_data(&mut self.ks.data, &mut self.dbs[other]);
        } else {
            let (lo, hi) = (a.min(b), a.max(b));
            let (x, y) = self.dbs.split_at_mut(hi);
            crate::keyspace::Db::swap_data(&mut x[lo], &mut y[0]);
        }
        crate::blocking::db_swapped(self, a, b);
    }

    /// Runs `f` with database `n` swapped in, then swaps the previous one back.
    pub fn with_db<R>(&mut self, n: usize, f: impl FnOnce(&mut Engine) -> R) -> R {
        let prev = self.current_db();
        self.use_db(n);
        let r = f(self);
        self.use_db(prev);
        r
    }

    /// Runs one command. `argv[0]` is the command name (any case). The reply (one RESP frame,
    /// in `client.proto`) is appended to `out`. `now_us`: Unix time in microseconds.
    pub fn exec(
        &mut self,
        client: &mut Client,
        argv: &[&[u8]],
        now_us: u64,
        out: &mut Vec<u8>,
    ) -> Flow {
        dispatch::exec(self, client, argv, now_us, out)
    }

    /// [`Engine::exec`] for a server that can serve its other clients while a script runs
    /// past `busy-reply-threshold` (`poller`, see [`crate::script::BusyPoll`]).
    pub fn exec_with_poller(
        &mut self,
        client: &mut Client,
        argv: &[&[u8]],
        now_us: u64,
        out: &mut Vec<u8>,
        poller: &mut dyn crate::script::BusyPoll,
    ) -> Flow {
        dispatch::exec_polling(self, client, argv, now_us, out, Some(poller))
    }

    /// Background work for one tick of the server's timer: the active expiry cycle (Redis
    /// `activeExpireCycle`, bounded by [`expire::EXPIRE_KEYS_PER_CRON`] sampled keys) and
    /// releasing entries of an asynchronous flush. Called `hz` times per second.
    /// Moves every queued [`crate::Delivery`] into `into` (appending, in queue order).
    pub fn take_deliveries(&mut self, into: &mut Vec<crate::Delivery>) {
        into.append(&mut self.deliveries);
    }

    /// True when [`take_deliveries`](Self::take_deliveries) would return something.
    pub fn has_deliveries(&self) -> bool {
        !self.deliveries.is_empty()
    }

    /// Replica mode (the browser replica, `wasm/`): expired keys read as missing but are
    /// never deleted locally, not even by SCAN; the primary's DEL effect removes them. The
    /// replica never runs `cron` (no active expiry) and must not serve RANDOMKEY.
    pub fn set_replica_mode(&mut self, on: bool) {
        self.ks.replica = on;
    }

    /// The connection of `client_id` is gone: forget its subscriptions, parked command and
    /// transaction state, so nothing leaks and nothing is delivered to it.
    pub fn client_closed(&mut self, client_id: u64) {
        self.blocking.remove(client_id);
        self.pause.postponed.retain(|&id| id != client_id);
        crate::cmd::tx::client_closed(self, client_id);
        crate::cmd::pubsub::client_closed(self, client_id);
        crate::feed::client_closed(self, client_id);
        crate::monitor::stop(self, client_id);
        crate::tracking::client_closed(self, client_id);
        crate::txlock::client_closed(self, client_id);
        crate::cmd::cluster::hold::client_closed(self, client_id);
    }

    /// The server reports the unsent output of connection `client_id` after a write attempt
    /// (the keychange feed's buffer bound; a no-op for connections that are not feed
    /// subscribers, one test when nobody subscribes).
    pub fn set_pending_output(&mut self, client_id: u64, bytes: usize) {
        crate::feed::set_pending_output(self, client_id, bytes);
    }

    /// Sequence number of the last keychange feed effect.
    pub fn feed_seq(&self) -> u64 {
        self.feed.seq()
    }

    /// Number of keychange feed subscribers.
    pub fn feed_subscribers(&self) -> usize {
        self.feed.subscribers()
    }

    /// Whether `client_id` is a keychange feed connection (like a Redis replica link, it is
    /// exempt from the idle `timeout`).
    pub fn is_feed_subscriber(&self, client_id: u64) -> bool {
        self.feed.is_subscriber(client_id)
    }

    /// The earliest time (Unix µs) at which `cron` has something due for a parked client (a
    /// blocking command's timeout), so the server can wake up for it; `None` if nothing waits.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.blocking.next_deadline_us()
    }

    /// Answers parked clients whose timeout has passed (a null reply, queued as a
    /// [`crate::Delivery`] with `unblock`). The server calls it when
    /// [`next_deadline_us`](Self::next_deadline_us) is due; `cron` need not.
    pub fn timeouts(&mut self, now_us: u64) {
        crate::blocking::timeouts(self, now_us);
    }

    pub fn cron(&mut self, now_us: u64) {
        // Active expiry in every database with volatile keys (Redis `activeExpireCycle` walks
        // its databases the same way), each with the full budget; the database in use before
        // is back in `ks` at the end.
        crate::pause::cron(self, now_us);
        crate::txlock::cron(self, now_us);
        crate::cmd::cluster::hold::cron(self, now_us);
        crate::blocking::redirect_moved(self);
        crate::slotkeys::cron(self, now_us / 1000);
        // The cycle is timed for LATENCY's `expire-cycle` event (redis `activeExpireCycle`):
        // the expiry of every database, the values it expires freed inside.
        crate::latency::sync_clock(self);
        let started = self.host.clock.map(|clock| clock());
        let prev = self.current_db();
        // Nothing expires or is evicted while clients are paused (`crate::pause`).
        for n in 0..self.dbs.len() {
            if self.pause.active() || self.db(n).volatile_len() == 0 {
                continue;
            }
            self.use_db(n);
            let removed =
                expire::active_cycle(&mut self.ks, now_us / 1000, expire::EXPIRE_KEYS_PER_CRON);
            self.stats.active_expired_keys += removed as u64;
        }
        self.use_db(prev);
        // A key table growing (`crate::position_index`) moves some buckets on every cron too,
        // so one that stops growing does not keep two tables (Redis: `incrementallyRehash`).
        for n in 0..self.dbs.len() {
            self.db_mut(n)
                .rehash_step(crate::position_index::CRON_BUCKETS);
        }
        if let (Some(t0), Some(clock)) = (started, self.host.clock) {
            crate::latency::after_expire_cycle(self, clock().saturating_sub(t0), now_us);
        }
        if let Some(m) = self.migrate.as_mut() {
            m.cron();
        }
        self.ks.lazy_free_step(expire::LAZY_FREE_PER_CRON);
        if !self.pause.active() {
            crate::evict::cron(self, now_us / 1000);
        }
        // Keys the cycle (or eviction) removed become DEL effects; drained subscribers resume.
        crate::effect::flush_deleted(self);
        crate::feed::cron(self);
        // Keys the cycle expired or eviction removed: invalidations; the tracking table's
        // bound; BCAST messages (one test while nobody tracks).
        crate::tracking::cron(self);
        // Keys the cycle expired: `expired` notifications and failed WATCHes.
        crate::notify::flush_events(self);
        crate::cmd::tx::process_touched(self);
        let used = crate::cmd::server::USED_MEMORY_STARTUP + self.dataset_bytes();
        self.used_memory_peak = self.used_memory_peak.max(used);
        // Ops/sec over the last ≥ 100 ms (Redis averages 16 such samples).
        let (t0, n0) = self.ops_sample;
        let elapsed = now_us.saturating_sub(t0);
        if elapsed >= 100_000 {
            let n = self.stats.total_commands_processed;
            if t0 != 0 {
                self.ops_per_sec = n.saturating_sub(n0) * 1_000_000 / elapsed;
            }
            self.ops_sample = (now_us, n);
        }
    }

    /// One CLIENT LIST / CLIENT INFO line (no trailing newline) for `client`, with Redis 7.0's
    /// fields in Redis's order (`networking.c` `catClientInfoString`). Buffer figures the core
    /// does not know are 0.
    pub fn client_info_line(&self, client: &Client, now_us: u64) -> String {
        crate::cmd::connection::client_info_line_with(
            client,
            now_us,
            crate::tracking::client_list_info(self, client.id),
        )
    }

    /// Number of keys (DBSIZE), including expired keys not yet reclaimed, like Redis.
    /// Number of keys in database 0 (DBSIZE of a fresh connection).
    pub fn dbsize(&self) -> u64 {
        self.db(0).len() as u64
    }

    /// Keys with a TTL, all databases.
    pub fn expires_count(&self) -> u64 {
        (0..self.dbs.len())
            .map(|n| self.db(n).volatile_len() as u64)
            .sum()
    }

    /// Logical memory estimate of the dataset, bytes (INFO `used_memory` minus the baseline),
    /// all databases.
    pub fn dataset_bytes(&self) -> u64 {
        // `dbs` holds a placeholder (0 bytes) for the database in `ks`.
        self.ks.used_bytes() as u64 + self.dbs.iter().map(|d| d.used_bytes() as u64).sum::<u64>()
    }

    /// Changes made since start (redis `server.dirty`): snapshots and the keychange feed
    /// compare it to decide whether anything happened.
    pub fn dirty(&self) -> u64 {
        self.ks.dirty
    }
}

#[cfg(test)]
mod tests {
    use crate::{Client, Config, Engine};

    /// A key table that stops growing mid-growth is finished by the cron, not left with two
    /// tables (and lookups probing both) until the next insert.
    #[test]
    fn the_cron_finishes_a_growth_no_insert_continues() {
        let now_us = 1_767_225_600_000_000;
        let mut e = Engine::new(Config::default());
        let mut out = Vec::new();
        let mut n = 0;
        while !e.db(0).is_rehashing() {
            assert!(n < 100_000, "no incremental growth in 100,000 keys");
            let key = format!("key:{n}");
            let argv: Vec<&[u8]> = vec![b"SET", key.as_bytes(), b"v"];
            e.exec(&mut Client::default(), &argv, now_us, &mut out);
            n += 1;
        }
        let mut crons = 0;
        while e.db(0).is_rehashing() {
            assert!(crons < 100, "the cron does not finish the growth");
            e.cron(now_us + crons * 100_000);
            crons += 1;
        }
        out.clear();
        e.exec(&mut Client::default(), &[b"DBSIZE"], now_us, &mut out);
        assert_eq!(out, format!(":{n}\r\n").into_bytes());
        out.clear();
        e.exec(
            &mut Client::default(),
            &[b"GET", b"key:0"],
            now_us,
            &mut out,
        );
        assert_eq!(out, b"$1\r\nv\r\n");
    }
}
