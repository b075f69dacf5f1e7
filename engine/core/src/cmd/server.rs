//! Server commands: TIME, INFO and CONFIG (GET SET RESETSTAT HELP). COMMAND is
//! `super::command`.

use std::fmt::Write as _;

use crate::Engine;
use crate::args;
use crate::call::Call;
use crate::call::help;
use crate::cmd::config_stored;
use crate::cmd::connection::REDIS_VERSION;
use crate::command::CommandSpec;
use crate::engine::MAXMEMORY_POLICIES;
use crate::error::{CmdError, c_str_lossy};
use crate::glob;

/// `TIME` → [unix seconds, microseconds] as bulk strings.
pub fn time(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let now = e.host.clock.map_or(c.now_us, |clock| clock());
    let (s, us) = (now / 1_000_000, now % 1_000_000);
    let mut w = c.w();
    w.array(2);
    w.bulk(itoa::Buffer::new().format(s).as_bytes());
    w.bulk(itoa::Buffer::new().format(us).as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// INFO
// ---------------------------------------------------------------------------------------------

/// Sections INFO knows, in Redis's order (`genRedisInfoString`); `all`/`everything` select them
/// all, `default` (and no argument) all but [`NOT_DEFAULT`].
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
    "keyspace",
];
/// The sections only `all`/`everything`/their names select.
const NOT_DEFAULT: &[&str] = &["commandstats", "latencystats"];

/// INFO `commandstats` counters per table row (redis `cmdstat_*`). The core has no clock, so
/// `usec` is not measured and reads 0.
#[derive(Debug, Default)]
pub struct CommandStats {
    /// Keyed by the row's address (rows are `'static`), in first-use order. Counted on every
    /// command, so a fixed-seed foldhash rather than SipHash (keys are our own addresses, not
    /// client input).
    rows: std::collections::HashMap<
        usize,
        (usize, &'static str, CmdStat),
        foldhash::fast::FixedState,
    >,
}

#[derive(Debug, Default)]
struct CmdStat {
    calls: u64,
    usec: u64,
    rejected: u64,
    failed: u64,
    /// LATENCY HISTOGRAM: calls by duration, bucket `i` holding durations up to 2^i µs
    /// (`crate::latency`).
    hist: [u32; crate::latency::BUCKETS],
    /// INFO latencystats: durations in ns, kept while `latency-tracking` is on (created on
    /// first use, as Redis does).
    hdr: Option<Box<crate::latency::Hdr>>,
    /// Calls under [`SHORT_US`] µs not yet in `hdr`, by whole µs: nearly every call is one
    /// of these, and counting one costs an increment where recording into the histogram
    /// costs ~70 instructions (callgrind, pipelined GET). Added to `hdr` when read.
    short: [u64; SHORT_US],
}

/// Durations counted apart before they reach a latency histogram ([`CmdStat::short`]).
const SHORT_US: usize = 32;

impl CommandStats {
    fn row(&mut self, spec: &'static CommandSpec) -> &mut CmdStat {
        let n = self.rows.len();
        &mut self
            .rows
            .entry(std::ptr::from_ref(spec) as usize)
            .or_insert((n, spec.name, CmdStat::default()))
            .2
    }

    /// A command ran for `usec` µs (`failed`: it answered an error); `track`:
    /// `latency-tracking` is on.
    pub fn called(&mut self, spec: &'static CommandSpec, failed: bool, usec: u64, track: bool) {
        let r = self.row(spec);
        r.calls += 1;
        r.usec += usec;
        r.failed += u64::from(failed);
        let b = crate::latency::bucket(usec);
        r.hist[b] = r.hist[b].saturating_add(1);
        if track {
            match r.short.get_mut(usec as usize) {
                Some(n) => *n += 1,
                None => crate::latency::record(&mut r.hdr, usec, 1),
            }
        }
    }

    /// `(command name, its latency histogram)` of every command tracked, in first-use order,
    /// short calls included (a copy of the histogram: INFO is rare, commands are not).
    pub fn latency_histograms(&self) -> Vec<(&'static str, crate::latency::Hdr)> {
        let mut rows: Vec<_> = self
            .rows
            .values()
            .filter(|r| r.2.hdr.is_some() || r.2.short.iter().any(|&n| n != 0))
            .collect();
        rows.sort_by_key(|r| r.0);
        rows.iter()
            .map(|(_, name, st)| {
                let mut h = st.hdr.clone();
                for (usec, &calls) in st.short.iter().enumerate() {
                    if calls != 0 {
                        crate::latency::record(&mut h, usec as u64, calls);
                    }
                }
                (*name, *h.expect("made by record"))
            })
            .collect()
    }

    /// `(command name, calls, duration buckets)` of every command that ran, in first-use order.
    pub fn histograms(&self) -> Vec<(&'static str, u64, [u32; crate::latency::BUCKETS])> {
        let mut rows: Vec<_> = self.rows.values().filter(|r| r.2.calls > 0).collect();
        rows.sort_by_key(|r| r.0);
        rows.iter()
            .map(|(_, name, st)| (*name, st.calls, st.hist))
            .collect()
    }

    /// A command was refused before running.
    pub fn rejected(&mut self, spec: &'static CommandSpec) {
        self.row(spec).rejected += 1;
    }

    /// `cmdstat_<name>:calls=…` lines, in first-use order.
    fn write(&self, s: &mut String) {
        let mut rows: Vec<_> = self.rows.values().collect();
        rows.sort_by_key(|r| r.0);
        for (_, name, st) in rows {
            let _ = write!(
                s,
                "cmdstat_{name}:calls={},usec={},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
                st.calls,
                st.usec,
                if st.calls > 0 {
                    st.usec as f64 / st.calls as f64
                } else {
                    0.0
                },
                st.rejected,
                st.failed
            );
        }
    }
}

/// Baseline reported in `used_memory_startup` (an empty redis-server reports about this much).
pub const USED_MEMORY_STARTUP: u64 = 870_000;

/// `INFO [section …]` → the text of the selected sections (`# Name` headers, `field:value` lines,
/// sections separated by a blank line, CRLF line ends), as a bulk/verbatim string.
pub fn info(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut want = [false; SECTIONS.len()];
    let defaults = |want: &mut [bool]| {
        for (w, s) in want.iter_mut().zip(SECTIONS) {
            *w |= !NOT_DEFAULT.contains(s);
        }
    };
    if c.argv.len() == 1 {
        defaults(&mut want);
    }
    for a in &c.argv[1..] {
        if args::is(a, "default") {
            defaults(&mut want);
        } else if args::is(a, "all") || args::is(a, "everything") {
            want = [true; SECTIONS.len()];
        } else if args::is(a, "module_list") {
            want[SECTIONS.iter().position(|s| *s == "modules").unwrap_or(0)] = true;
        } else if let Some(i) = SECTIONS.iter().position(|s| args::is(a, s)) {
            want[i] = true;
        }
    }
    let text = info_text(e, c.now_us, &want);
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// redis `bytesToHuman`.
fn human(n: u64) -> String {
    let units = [
        (1u64 << 50, 'P'),
        (1 << 40, 'T'),
        (1 << 30, 'G'),
        (1 << 20, 'M'),
        (1 << 10, 'K'),
    ];
    for (size, unit) in units {
        if n >= size {
            return format!("{:.2}{unit}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

fn info_text(e: &mut Engine, now_us: u64, want: &[bool]) -> String {
    let mut s = String::with_capacity(2048);
    let mut first = true;
    let now_ms = now_us / 1000;
    let used = USED_MEMORY_STARTUP + e.dataset_bytes();
    e.used_memory_peak = e.used_memory_peak.max(used);
    for (i, name) in SECTIONS.iter().enumerate() {
        if !want[i] {
            continue;
        }
        if !first {
            s.push_str("\r\n");
        }
        first = false;
        let title = match *name {
            "cpu" => "CPU".to_string(),
            _ => {
                let mut t = name.to_string();
                t[..1].make_ascii_uppercase();
                t
            }
        };
        let _ = write!(s, "# {title}\r\n");
        let mut line = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(s, "{k}:{v}\r\n");
        };
        match *name {
            "server" => {
                let up = now_us.saturating_sub(e.host.started_us) / 1_000_000;
                line("redis_version", &REDIS_VERSION);
                line("recached_version", &env!("CARGO_PKG_VERSION"));
                line("redis_git_sha1", &"00000000");
                line("redis_git_dirty", &0);
                line("redis_build_id", &"0");
                line("redis_mode", &crate::cmd::cluster::mode(e));
                line("arch_bits", &(usize::BITS));
                line("process_id", &e.host.pid);
                line("process_supervised", &"no");
                line("run_id", &e.run_id);
                line("tcp_port", &e.host.tcp_port);
                line("server_time_usec", &now_us);
                line("uptime_in_seconds", &up);
                line("uptime_in_days", &(up / 86400));
                line("hz", &e.config.hz);
                line("configured_hz", &e.config.hz);
                line("executable", &e.host.executable);
                line("config_file", &e.host.config_file);
                line("io_threads_active", &0);
            }
            "clients" => {
                line("connected_clients", &e.host.connected_clients);
                line("cluster_connections", &0);
                line("maxclients", &e.config.maxclients);
                line(
                    "blocked_clients",
                    &(e.blocking.len() + e.pause.postponed.len()),
                );
                line("tracking_clients", &e.tracking.clients());
                line("clients_in_timeout_table", &0);
                // recached: keychange feed connections (docs/feed.md; the fan-out while it
                // serves browsers).
                line("feed_subscribers", &e.feed.subscribers());
            }
            "memory" => {
                let rss = e.host.rss_bytes;
                line("used_memory", &used);
                line("used_memory_human", &human(used));
                line("used_memory_rss", &rss);
                line("used_memory_rss_human", &human(rss));
                line("used_memory_peak", &e.used_memory_peak);
                line("used_memory_peak_human", &human(e.used_memory_peak));
                line(
                    "used_memory_peak_perc",
                    &format!(
                        "{:.2}%",
                        used as f64 * 100.0 / e.used_memory_peak.max(1) as f64
                    ),
                );
                line("used_memory_startup", &USED_MEMORY_STARTUP);
                let scripts = e.scripting.as_ref().map_or(0, |h| h.cached_scripts());
                line("number_of_cached_scripts", &scripts);
                line("used_memory_dataset", &e.ks.used_bytes());
                line("maxmemory", &e.config.maxmemory);
                line("maxmemory_human", &human(e.config.maxmemory));
                line("maxmemory_policy", &e.config.maxmemory_policy);
                line(
                    "mem_fragmentation_ratio",
                    &format!("{:.2}", rss as f64 / used as f64),
                );
                // Redis: replication and AOF buffers, which recached does not have.
                line("mem_not_counted_for_evict", &0);
                line("mem_allocator", &"libc");
                line("lazyfree_pending_objects", &e.ks.lazy_free_pending());
                line("lazyfreed_objects", &e.ks.stats.lazyfreed_objects);
            }
            "persistence" => crate::snapshot::info_lines(e, now_us, &mut line),
            "stats" => {
                let st = &e.stats;
                line(
                    "total_connections_received",
                    &e.net.total_connections_received,
                );
                line("total_commands_processed", &st.total_commands_processed);
                line("instantaneous_ops_per_sec", &e.ops_per_sec);
                line("total_net_input_bytes", &e.net.total_net_input_bytes);
                line("total_net_output_bytes", &e.net.total_net_output_bytes);
                line("rejected_connections", &e.net.rejected_connections);
                line("expired_keys", &e.ks.stats.expired_keys);
                line("evicted_keys", &e.evict.evicted_keys);
                line("keyspace_hits", &e.ks.stats.keyspace_hits);
                line("keyspace_misses", &e.ks.stats.keyspace_misses);
                line("pubsub_channels", &e.pubsub.channel_count());
                line("pubsub_patterns", &e.pubsub.pattern_count());
                line("pubsubshard_channels", &e.pubsub.shard_channel_count());
                line("tracking_total_keys", &e.tracking.total_keys());
                line("tracking_total_items", &e.tracking.total_items());
                line("tracking_total_prefixes", &e.tracking.total_prefixes());
                // recached: keychange feed effects produced (none while nobody subscribes).
                line("feed_effects", &e.feed.effects());
                line(
                    "migrate_cached_sockets",
                    &e.migrate.as_ref().map_or(0, |m| m.cached()),
                );
                line(
                    "total_error_replies",
                    &(st.rejected_calls + st.failed_calls),
                );
                // Redis 7.2's names (7.0 has no such counters).
                let acl = &e.acl.stats;
                line("acl_access_denied_auth", &acl.denied_auth);
                line("acl_access_denied_cmd", &acl.denied_cmd);
                line("acl_access_denied_key", &acl.denied_key);
                line("acl_access_denied_channel", &acl.denied_channel);
            }
            "replication" => {
                line("role", &"master");
                line("connected_slaves", &0);
                line("master_failover_state", &"no-failover");
                line("master_replid", &e.run_id);
                line("master_repl_offset", &0);
                line("second_repl_offset", &-1);
                line("repl_backlog_active", &0);
            }
            "cpu" => {
                // Seconds with 6 decimals, as redis-server prints `struct rusage` times.
                let t = e.host.cpu.map(|f| f()).unwrap_or_default();
                let secs = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
                line("used_cpu_sys", &secs(t.sys_us));
                line("used_cpu_user", &secs(t.user_us));
                line("used_cpu_sys_children", &secs(t.children_sys_us));
                line("used_cpu_user_children", &secs(t.children_user_us));
                line("used_cpu_sys_main_thread", &secs(t.sys_us));
                line("used_cpu_user_main_thread", &secs(t.user_us));
            }
            "cluster" => {
                line(
                    "cluster_enabled",
                    &u8::from(crate::cmd::cluster::enabled(e)),
                );
            }
            "keyspace" => {
                // Every non-empty database, in order (redis `genRedisInfoString`).
                for n in 0..e.databases() {
                    if e.db(n).is_empty() {
                        continue;
                    }
                    let (keys, avg) = e.with_db(n, |e| (e.ks.len(), e.ks.avg_ttl_ms(now_ms, 100)));
                    let expires = e.db(n).volatile_len();
                    let _ = write!(s, "db{n}:keys={keys},expires={expires},avg_ttl={avg}\r\n");
                }
            }
            "errorstats" => {
                for (code, n) in &e.stats.errors {
                    let _ = write!(s, "errorstat_{code}:count={n}\r\n");
                }
            }
            "commandstats" => e.cmdstats.write(&mut s),
            // Only the header while `latency-tracking` is off, as Redis.
            "latencystats" if e.config.latency_tracking => {
                crate::latency::write_latencystats(e, &mut s)
            }
            _ => {}
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// CONFIG
// ---------------------------------------------------------------------------------------------

/// Applies a CONFIG SET value, or gives the reason it is refused (Redis's wording).
pub(crate) type Setter = fn(&mut Engine, &[u8]) -> Result<(), &'static str>;

/// A parameter CONFIG GET/SET knows.
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) get: fn(&Engine) -> String,
    /// None = immutable (`can't set immutable config`), unless the value equals the current one.
    pub(crate) set: Option<Setter>,
}

/// Every parameter: [`PARAMS`], then the encoding thresholds
/// ([`super::config_encoding::PARAMS`]) and the listening address
/// ([`super::config_listen::PARAMS`]).
fn all_params() -> impl Iterator<Item = &'static Param> {
    PARAMS
        .iter()
        .chain(super::config_encoding::PARAMS)
        .chain(super::config_listen::PARAMS)
}

/// The parameters, in a fixed order (Redis answers in its hash order).
const PARAMS: &[Param] = &[
    Param {
        name: "proto-max-bulk-len",
        get: |e| e.config.proto_max_bulk_len.to_string(),
        set: Some(|e, v| {
            let n = parse_memory(v).ok_or("argument must be a memory value")?;
            if n < 1024 * 1024 || n > i64::MAX as u64 {
                return Err("argument must be between 1048576 and 9223372036854775807 inclusive");
            }
            e.config.proto_max_bulk_len = n;
            Ok(())
        }),
    },
    Param {
        name: "hz",
        get: |e| e.config.hz.to_string(),
        set: Some(|e, v| {
            let n = args::parse_i64(v).ok_or("argument couldn't be parsed into an integer")?;
            if !(0..=i64::from(i32::MAX)).contains(&n) {
                return Err("argument must be between 0 and 2147483647 inclusive");
            }
            // Redis clamps to 1..=500 (CONFIG_MIN_HZ, CONFIG_MAX_HZ).
            e.config.hz = n.clamp(1, 500) as u32;
            Ok(())
        }),
    },
    Param {
        name: "timeout",
        get: |e| e.config.timeout.to_string(),
        set: Some(|e, v| {
            let n = args::parse_i64(v).ok_or("argument couldn't be parsed into an integer")?;
            if !(0..=i64::from(i32::MAX)).contains(&n) {
                return Err("argument must be between 0 and 2147483647 inclusive");
            }
            e.config.timeout = n as u64;
            Ok(())
        }),
    },
    Param {
        name: "maxclients",
        get: |e| e.config.maxclients.to_string(),
        set: Some(|e, v| {
            let n = args::parse_i64(v).ok_or("argument couldn't be parsed into an integer")?;
            if !(1..=i64::from(u32::MAX)).contains(&n) {
                return Err("argument must be between 1 and 4294967295 inclusive");
            }
            e.config.maxclients = n as u64;
            Ok(())
        }),
    },
    Param {
        name: "client-query-buffer-limit",
        get: |e| e.config.client_query_buffer_limit.to_string(),
        set: Some(|e, v| {
            let n = parse_memory(v).ok_or("argument must be a memory value")?;
            if n < 1024 * 1024 || n > i64::MAX as u64 {
                return Err("argument must be between 1048576 and 9223372036854775807 inclusive");
            }
            e.config.client_query_buffer_limit = n;
            Ok(())
        }),
    },
    Param {
        name: "client-output-buffer-limit",
        get: |e| e.config.client_output_buffer_limit.to_string(),
        set: Some(|e, v| {
            e.config.client_output_buffer_limit.apply(v)?;
            Ok(())
        }),
    },
    Param {
        name: "save",
        get: crate::snapshot::save_param,
        set: Some(crate::snapshot::set_save_param),
    },
    // recached has no replicas: `min-replicas-to-write` > 0 (with a non-zero max lag) refuses
    // writes with NOREPLICAS, as a Redis primary without good replicas does.
    Param {
        name: "min-replicas-to-write",
        get: |e| e.config.min_replicas_to_write.to_string(),
        set: Some(|e, v| {
            e.config.min_replicas_to_write = int_in(v, 0, i64::from(i32::MAX))? as u64;
            Ok(())
        }),
    },
    Param {
        name: "min-replicas-max-lag",
        get: |e| e.config.min_replicas_max_lag.to_string(),
        set: Some(|e, v| {
            e.config.min_replicas_max_lag = int_in(v, 0, i64::from(i32::MAX))? as u64;
            Ok(())
        }),
    },
    Param {
        name: "min-slaves-to-write",
        get: |e| e.config.min_replicas_to_write.to_string(),
        set: Some(|e, v| {
            e.config.min_replicas_to_write = int_in(v, 0, i64::from(i32::MAX))? as u64;
            Ok(())
        }),
    },
    Param {
        name: "min-slaves-max-lag",
        get: |e| e.config.min_replicas_max_lag.to_string(),
        set: Some(|e, v| {
            e.config.min_replicas_max_lag = int_in(v, 0, i64::from(i32::MAX))? as u64;
            Ok(())
        }),
    },
    Param {
        name: "stop-writes-on-bgsave-error",
        get: |e| {
            if e.config.stop_writes_on_bgsave_error {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: Some(|e, v| {
            e.config.stop_writes_on_bgsave_error = match () {
                _ if args::is(v, "yes") => true,
                _ if args::is(v, "no") => false,
                _ => return Err("argument must be 'yes' or 'no'"),
            };
            Ok(())
        }),
    },
    Param {
        name: "appendonly",
        get: |_| "no".into(),
        set: None,
    },
    Param {
        name: "hll-sparse-max-bytes",
        get: |e| e.config.hll_sparse_max_bytes.to_string(),
        set: Some(|e, v| {
            let n = parse_memory(v).ok_or("argument must be a memory value")?;
            if n > i64::MAX as u64 {
                return Err("argument must be between 0 and 9223372036854775807 inclusive");
            }
            e.config.hll_sparse_max_bytes = n;
            Ok(())
        }),
    },
    Param {
        name: "maxmemory",
        get: |e| e.config.maxmemory.to_string(),
        set: Some(|e, v| {
            e.config.maxmemory = parse_memory(v).ok_or("argument must be a memory value")?;
            Ok(())
        }),
    },
    Param {
        name: "sanitize-dump-payload",
        get: |e| e.config.sanitize_dump_payload.to_string(),
        set: Some(|e, v| {
            e.config.sanitize_dump_payload = ["no", "yes", "clients"]
                .into_iter()
                .find(|p| args::is(v, p))
                .ok_or("argument(s) must be one of the following: no, yes, clients")?;
            Ok(())
        }),
    },
    Param {
        name: "maxmemory-policy",
        get: |e| e.config.maxmemory_policy.to_string(),
        set: Some(|e, v| {
            e.config.maxmemory_policy = MAXMEMORY_POLICIES
                .iter()
                .find(|p| args::is(v, p))
                .ok_or(
                    "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
                     volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction",
                )?;
            Ok(())
        }),
    },
    Param {
        name: "databases",
        get: |e| e.databases().to_string(),
        set: None,
    },
    Param {
        name: "maxmemory-samples",
        get: |e| e.config.maxmemory_samples.to_string(),
        set: Some(|e, v| {
            e.config.maxmemory_samples = int_in(v, 1, i64::from(i32::MAX))? as u32;
            Ok(())
        }),
    },
    Param {
        name: "slowlog-log-slower-than",
        get: |e| e.slowlog.slower_than.to_string(),
        set: Some(|e, v| {
            e.slowlog.slower_than = int_in(v, -1, i64::MAX)?;
            Ok(())
        }),
    },
    Param {
        name: "slowlog-max-len",
        get: |e| e.slowlog.max_len.to_string(),
        set: Some(|e, v| {
            // Applied at the next entry, as Redis trims only when it logs.
            e.slowlog.max_len = int_in(v, 0, i64::MAX)? as u64;
            Ok(())
        }),
    },
    Param {
        name: "latency-monitor-threshold",
        get: |e| e.latency.threshold_ms.to_string(),
        set: Some(|e, v| {
            e.latency.threshold_ms = int_in(v, 0, i64::MAX)? as u64;
            crate::latency::sync_clock(e);
            Ok(())
        }),
    },
    Param {
        name: "latency-tracking",
        get: |e| {
            if e.config.latency_tracking {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: Some(|e, v| {
            e.config.latency_tracking = match () {
                _ if args::is(v, "yes") => true,
                _ if args::is(v, "no") => false,
                _ => return Err("argument must be 'yes' or 'no'"),
            };
            Ok(())
        }),
    },
    Param {
        name: "latency-tracking-info-percentiles",
        get: |e| crate::latency::format_percentiles(&e.config.latency_tracking_percentiles),
        set: Some(|e, v| {
            e.config.latency_tracking_percentiles = crate::latency::parse_percentiles(v)?;
            Ok(())
        }),
    },
    Param {
        name: "busy-reply-threshold",
        get: |e| e.config.busy_reply_threshold.to_string(),
        set: Some(|e, v| {
            e.config.busy_reply_threshold = int_in(v, 0, i64::MAX)? as u64;
            Ok(())
        }),
    },
    Param {
        name: "lua-time-limit",
        get: |e| e.config.busy_reply_threshold.to_string(),
        set: Some(|e, v| {
            e.config.busy_reply_threshold = int_in(v, 0, i64::MAX)? as u64;
            Ok(())
        }),
    },
    Param {
        name: "lfu-log-factor",
        get: |e| e.config.lfu_log_factor.to_string(),
        set: Some(|e, v| {
            e.config.lfu_log_factor = int_in(v, 0, i64::from(i32::MAX))? as u32;
            Ok(())
        }),
    },
    Param {
        name: "lfu-decay-time",
        get: |e| e.config.lfu_decay_time.to_string(),
        set: Some(|e, v| {
            e.config.lfu_decay_time = int_in(v, 0, i64::from(i32::MAX))? as u32;
            Ok(())
        }),
    },
    Param {
        name: "stream-node-max-entries",
        get: |e| e.config.stream_node_max_entries.to_string(),
        set: Some(|e, v| {
            e.config.stream_node_max_entries = int_in(v, 0, i64::MAX)? as u64;
            Ok(())
        }),
    },
    Param {
        name: "stream-node-max-bytes",
        get: |e| e.config.stream_node_max_bytes.to_string(),
        set: Some(|e, v| {
            let n = parse_memory(v).ok_or("argument must be a memory value")?;
            if n > i64::MAX as u64 {
                return Err("argument must be between 0 and 9223372036854775807 inclusive");
            }
            e.config.stream_node_max_bytes = n;
            Ok(())
        }),
    },
    Param {
        name: "tracking-table-max-keys",
        get: |e| e.config.tracking_table_max_keys.to_string(),
        set: Some(|e, v| {
            e.config.tracking_table_max_keys = int_in(v, 0, i64::MAX)? as u64;
            Ok(())
        }),
    },
    Param {
        name: "feed-buffer-limit",
        get: |e| e.config.feed_buffer_limit.to_string(),
        set: Some(|e, v| {
            e.config.feed_buffer_limit =
                parse_memory(v).ok_or("argument must be a memory value")?;
            Ok(())
        }),
    },
    Param {
        name: "notify-keyspace-events",
        get: |e| crate::notify::format_notify_flags(e.pubsub.notify_flags()),
        set: Some(crate::notify::set_notify_flags),
    },
    Param {
        name: "daemonize",
        get: |_| "no".into(),
        set: None,
    },
    Param {
        name: "cluster-enabled",
        get: |e| {
            if crate::cmd::cluster::enabled(e) {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: None,
    },
    // The default user's password (applied by `acl::apply_config` once the whole CONFIG SET
    // succeeded; "" = nopass).
    Param {
        name: "requirepass",
        get: |e| String::from_utf8_lossy(&e.config.acl.requirepass).into_owned(),
        set: Some(|e, v| {
            e.config.acl.requirepass = v.to_vec();
            Ok(())
        }),
    },
    Param {
        name: "protected-mode",
        get: |e| {
            if e.config.acl.protected_mode {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: Some(|e, v| {
            e.config.acl.protected_mode = match () {
                _ if args::is(v, "yes") => true,
                _ if args::is(v, "no") => false,
                _ => return Err("argument must be 'yes' or 'no'"),
            };
            Ok(())
        }),
    },
];

/// One class's `client-output-buffer-limit`: bytes of unsent replies. Over `hard` (non-zero)
/// the client is closed at once; over `soft` (non-zero) for `soft_seconds` in a row it is
/// closed too (Redis `checkClientOutputBufferLimits`, `networking.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

impl OutputLimit {
    /// No limit (the `normal` class default, `0 0 0`).
    pub const NONE: OutputLimit = OutputLimit {
        hard: 0,
        soft: 0,
        soft_seconds: 0,
    };

    /// Whether `used` bytes break the limit, given when the client first went over the soft
    /// limit (`soft_since_us`, updated here: set on crossing, cleared below it).
    pub fn exceeded(&self, used: u64, soft_since_us: &mut Option<u64>, now_us: u64) -> bool {
        if self.hard != 0 && used >= self.hard {
            return true;
        }
        if self.soft != 0 && used >= self.soft {
            let since = *soft_since_us.get_or_insert(now_us);
            return now_us.saturating_sub(since) >= self.soft_seconds * 1_000_000;
        }
        *soft_since_us = None;
        false
    }
}

/// `client-output-buffer-limit` for the three classes Redis has. `replica` is kept (and
/// printed as `slave`, as Redis does) so CONFIG GET/SET round-trip; recached has no replica
/// links, so only `normal` and `pubsub` apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    pub normal: OutputLimit,
    pub replica: OutputLimit,
    pub pubsub: OutputLimit,
}

impl Default for OutputLimits {
    /// Redis's defaults: `normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60`.
    fn default() -> Self {
        OutputLimits {
            normal: OutputLimit::NONE,
            replica: OutputLimit {
                hard: 256 << 20,
                soft: 64 << 20,
                soft_seconds: 60,
            },
            pubsub: OutputLimit {
                hard: 32 << 20,
                soft: 8 << 20,
                soft_seconds: 60,
            },
        }
    }
}

impl std::fmt::Display for OutputLimits {
    /// Redis's CONFIG GET text: `normal 0 0 0 slave 268435456 67108864 60 pubsub …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let classes = [
            ("normal", &self.normal),
            ("slave", &self.replica),
            ("pubsub", &self.pubsub),
        ];
        for (i, (name, l)) in classes.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name} {} {} {}", l.hard, l.soft, l.soft_seconds)?;
        }
        Ok(())
    }
}

impl OutputLimits {
    /// Applies `<class> <hard> <soft> <soft seconds>` groups (class `normal`, `replica`/`slave`
    /// or `pubsub`, sizes with memory units); all or nothing, with Redis's error texts
    /// (`config.c` `updateClientOutputBufferLimit`). An empty value changes nothing.
    pub fn apply(&mut self, v: &[u8]) -> Result<(), &'static str> {
        let words: Vec<&[u8]> = v.split(|b| *b == b' ').filter(|w| !w.is_empty()).collect();
        if !words.len().is_multiple_of(4) {
            return Err("Wrong number of arguments in buffer limit configuration.");
        }
        let mut next = *self;
        for group in words.chunks_exact(4) {
            let class = match group[0].to_ascii_lowercase().as_slice() {
                b"normal" => &mut next.normal,
                b"replica" | b"slave" => &mut next.replica,
                b"pubsub" => &mut next.pubsub,
                _ => return Err("Invalid client class specified in buffer limit configuration."),
            };
            const BAD: &str =
                "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
            let hard = parse_memory(group[1]).ok_or(BAD)?;
            let soft = parse_memory(group[2]).ok_or(BAD)?;
            let soft_seconds = args::parse_i64(group[3]).filter(|n| *n >= 0).ok_or(BAD)? as u64;
            *class = OutputLimit {
                hard,
                soft,
                soft_seconds,
            };
        }
        *self = next;
        Ok(())
    }
}

/// An integer config value within `lo..=hi`, with Redis's error texts (static, as setters
/// return `&'static str`: only the ranges the parameters use are spelled out).
pub(crate) fn int_in(v: &[u8], lo: i64, hi: i64) -> Result<i64, &'static str> {
    let n = args::parse_i64(v).ok_or("argument couldn't be parsed into an integer")?;
    if n < lo || n > hi {
        return Err(match (lo, hi) {
            (1, 2147483647) => "argument must be between 1 and 2147483647 inclusive",
            (0, 2147483647) => "argument must be between 0 and 2147483647 inclusive",
            (-2147483648, 2147483647) => {
                "argument must be between -2147483648 and 2147483647 inclusive"
            }
            (0, i64::MAX) => "argument must be between 0 and 9223372036854775807 inclusive",
            (-1, i64::MAX) => "argument must be between -1 and 9223372036854775807 inclusive",
            _ => "argument out of range",
        });
    }
    Ok(n)
}

/// redis `memtoull`: a non-negative integer with an optional b/k/kb/m/mb/g/gb unit (any case);
/// an empty number is 0, as in Redis.
pub(crate) fn parse_memory(v: &[u8]) -> Option<u64> {
    let split = v
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if num.is_empty() {
        // `strtoull("")` is 0 without an error, so Redis takes "" and "mb" as 0.
        return Some(0);
    }
    std::str::from_utf8(num)
        .ok()?
        .parse::<u64>()
        .ok()?
        .checked_mul(mul)
}

fn find_param(name: &[u8]) -> Option<&'static Param> {
    all_params().find(|p| args::is(name, p.name))
}

/// `CONFIG GET pattern [pattern …]` → map of matching parameters. A pattern without glob
/// characters is looked up by name and answered under the name as given.
pub fn config_get(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut found: Vec<(std::borrow::Cow<'static, [u8]>, Source)> = Vec::new();
    let add = |found: &mut Vec<(std::borrow::Cow<'static, [u8]>, Source)>, name, src: Source| {
        if !found.iter().any(|(_, s)| s.same(&src)) {
            found.push((name, src));
        }
    };
    for pat in &c.argv[2..] {
        if !pat.iter().any(|b| matches!(b, b'[' | b'*' | b'?')) {
            if let Some(p) = find_param(pat) {
                add(&mut found, pat.to_vec().into(), Source::Param(p));
            } else if let Some(s) = config_stored::find(pat) {
                add(
                    &mut found,
                    pat.to_vec().into(),
                    Source::Stored(s, pat.to_ascii_lowercase()),
                );
            }
            continue;
        }
        for p in all_params() {
            if glob::matches(pat, p.name.as_bytes(), true) {
                add(&mut found, p.name.as_bytes().into(), Source::Param(p));
            }
        }
        // A stored parameter and each of its names once (Redis lists an alias beside its
        // name); hidden ones only by exact name; those PARAMS acts on are listed above.
        for (name, s) in config_stored::names() {
            if !s.hidden
                && find_param(name.as_bytes()).is_none()
                && glob::matches(pat, name.as_bytes(), true)
            {
                add(
                    &mut found,
                    name.as_bytes().into(),
                    Source::Stored(s, name.as_bytes().to_vec()),
                );
            }
        }
    }
    let values: Vec<String> = found
        .iter()
        .map(|(_, src)| match src {
            Source::Param(p) => (p.get)(e),
            Source::Stored(s, _) => s.get(&e.config.stored).to_string(),
        })
        .collect();
    let mut w = c.w();
    w.map(found.len());
    for ((name, _), v) in found.iter().zip(&values) {
        w.bulk(name);
        w.bulk(v.as_bytes());
    }
    Ok(())
}

/// Where a CONFIG GET row comes from: a parameter recached acts on, or a stored one under
/// one of its names.
enum Source {
    Param(&'static Param),
    Stored(&'static config_stored::Stored, Vec<u8>),
}

impl Source {
    /// The same row: a parameter once, a stored one once per name.
    fn same(&self, other: &Source) -> bool {
        match (self, other) {
            (Source::Param(a), Source::Param(b)) => std::ptr::eq(*a, *b),
            (Source::Stored(a, x), Source::Stored(b, y)) => std::ptr::eq(*a, *b) && x == y,
            _ => false,
        }
    }
}

/// Parameters Redis 7.0 marks `IMMUTABLE_CONFIG` (config.c): CONFIG SET refuses them even
/// with the current value. Other rows without a setter are settings Redis can change and
/// recached cannot; those accept their current value only.
const IMMUTABLE: &[&str] = &["databases", "cluster-enabled", "daemonize"];

/// `CONFIG SET parameter value [parameter value …]` → OK; all or nothing, Redis's error texts
/// and order (redis `configSetCommand`): an odd count is a syntax error; every name is checked
/// before any value, and the first bad name wins (an unknown one, an immutable one, a
/// duplicate); a bad value restores what was set before it and names the parameter by its
/// canonical (lowercase) name.
pub fn config_set(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() % 2 == 1 {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(&[u8], &[u8])> = argv[2..].chunks_exact(2).map(|p| (p[0], p[1])).collect();
    let fail = |name: &[u8], why: &str| {
        CmdError::Other(format!(
            "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
            c_str_lossy(name, usize::MAX)
        ))
    };
    let mut params: Vec<Source> = Vec::new();
    for (name, value) in &pairs {
        let src = match (find_param(name), config_stored::find(name)) {
            (Some(p), _) => {
                if IMMUTABLE.contains(&p.name)
                    || (p.set.is_none() && (p.get)(e).as_bytes() != *value)
                {
                    return Err(fail(name, "can't set immutable config"));
                }
                Source::Param(p)
            }
            (None, Some(s)) => {
                if s.immutable {
                    return Err(fail(name, "can't set immutable config"));
                }
                Source::Stored(s, Vec::new())
            }
            (None, None) => {
                return Err(CmdError::Other(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                    c_str_lossy(name, usize::MAX)
                )));
            }
        };
        if params.iter().any(|q| q.same(&src)) {
            return Err(fail(name, "duplicate parameter"));
        }
        params.push(src);
    }
    let saved = e.config.clone();
    let saved_notify = e.pubsub.notify_flags();
    let saved_listen = super::config_listen::save(e);
    for (src, (_, value)) in params.iter().zip(&pairs) {
        let (name, result) = match src {
            Source::Param(p) => match p.set {
                Some(set) => (p.name, set(e, value).map_err(String::from)),
                None => continue,
            },
            Source::Stored(s, _) => (
                s.name,
                s.parse(value).map(|v| {
                    if v == s.default {
                        e.config.stored.remove(s.name);
                    } else {
                        e.config.stored.insert(s.name, v);
                    }
                }),
            ),
        };
        if let Err(why) = result {
            e.config = saved;
            crate::notify::restore_notify_flags(e, saved_notify);
            crate::evict::apply_config(e);
            super::config_listen::restore(e, saved_listen);
            return Err(fail(name.as_bytes(), &why));
        }
    }
    // Sockets last (redis applies after every value is set): a port in use rolls all back.
    let names = pairs.iter().map(|(n, _)| *n);
    if let Err((name, why)) = super::config_listen::apply(e, names, &saved_listen) {
        e.config = saved;
        crate::notify::restore_notify_flags(e, saved_notify);
        crate::evict::apply_config(e);
        return Err(fail(name.as_bytes(), why));
    }
    // The policy and LFU settings decide how lookups stamp keys.
    crate::evict::apply_config(e);
    let requirepass = pairs.iter().any(|(n, _)| args::is(n, "requirepass"));
    crate::acl::apply_config(e, requirepass);
    c.w().ok();
    Ok(())
}

/// `CONFIG RESETSTAT` → OK; zeroes the INFO counters.
pub fn config_resetstat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    e.stats = Default::default();
    e.ks.stats = Default::default();
    e.evict.evicted_keys = 0;
    e.cmdstats = Default::default();
    e.acl.stats = Default::default();
    e.net = Default::default();
    e.used_memory_peak = USED_MEMORY_STARTUP + e.dataset_bytes();
    c.w().ok();
    Ok(())
}

/// CONFIG HELP.
pub fn config_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    help(
        c,
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "HELP",
            "    Prints this help.",
        ],
    );
    Ok(())
}

/// SHUTDOWN's options (redis `shutdownCommand`): `save` is `Some(true)` for SAVE,
/// `Some(false)` for NOSAVE, `None` to save as the server's own shutdown would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shutdown {
    pub save: Option<bool>,
    /// NOW (Redis: do not wait for lagging replicas; recached has none) and FORCE (exit even
    /// when the save fails).
    pub now: bool,
    pub force: bool,
}

/// What SHUTDOWN answers when its save failed and FORCE was not given (redis
/// `finishShutdown`); the server keeps running.
pub const SHUTDOWN_FAILED: &str = "ERR Errors trying to SHUTDOWN. Check logs.";

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: checks the options and hands the exit to
/// the server ([`crate::Flow::Shutdown`]). ABORT answers as Redis does with no shutdown
/// pending (recached never waits for replicas, so none ever is). While a script is busy only
/// NOSAVE is accepted (it stops the script).
pub fn shutdown(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut s = Shutdown::default();
    let (mut abort, mut nosave) = (false, false);
    for a in &c.argv[1..] {
        match a.to_ascii_lowercase().as_slice() {
            b"nosave" => nosave = true,
            b"save" => s.save = Some(true),
            b"now" => s.now = true,
            b"force" => s.force = true,
            b"abort" => abort = true,
            _ => return Err(CmdError::Syntax),
        }
    }
    let flags = nosave || s.save.is_some() || s.now || s.force;
    if (abort && flags) || (nosave && s.save.is_some()) {
        return Err(CmdError::Syntax);
    }
    if abort {
        return Err(CmdError::Static("ERR No shutdown in progress."));
    }
    if nosave {
        s.save = Some(false);
    }
    if let Some(busy) = &mut e.busy {
        if !nosave {
            return Err(CmdError::Static(busy.error()));
        }
        busy.shutdown = true;
    }
    c.flow = crate::Flow::Shutdown(s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of equal durations are counted, then recorded: the histogram INFO reads is the
    /// one every call recorded one by one gives, pending calls included.
    #[test]
    fn latency_runs_add_up_to_every_call() {
        let get = crate::command::lookup(b"get").expect("GET");
        let set = crate::command::lookup(b"set").expect("SET");
        let mut stats = CommandStats::default();
        let mut want: Option<Box<crate::latency::Hdr>> = None;
        let durations = [0, 0, 0, 1, 1, 0, 7, 7, 7, 7, 2500, 0, 0, 3];
        for (i, &us) in durations.iter().enumerate() {
            stats.called(get, false, us, true);
            crate::latency::record(&mut want, us, 1);
            // Another command between calls keeps its own run.
            if i % 4 == 0 {
                stats.called(set, false, 9, true);
            }
            // Untracked calls are not recorded.
            stats.called(get, false, 123, false);
        }
        let rows = stats.latency_histograms();
        let names: Vec<_> = rows.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["get", "set"]);
        let (got, want) = (&rows[0].1, want.expect("recorded"));
        assert_eq!(got.len(), durations.len() as u64);
        for q in [0.0, 10.0, 50.0, 75.0, 90.0, 99.0, 100.0] {
            assert_eq!(
                got.value_at_quantile(q / 100.0),
                want.value_at_quantile(q / 100.0)
            );
        }
        assert_eq!(rows[1].1.len(), 4);
    }
}
