//! The TOML configuration file and its defaults.
//!
//! One file serves every role: `recached start --config F` reads the fleet keys, and passes
//! `--config F` on to each engine it starts, so `recached server --config F` reads the same
//! `[engine]` section. `configs/recached.toml` lists every key with its default; the defaults
//! here and there must stay equal (a unit test parses that file and compares).
//!
//! Precedence: built-in default < config file < command-line flag.
//!
//! Unknown keys are an error (`deny_unknown_fields`): a typo such as `proxy-port` must not be
//! silently ignored. Errors read like `config recached.toml: TOML parse error at line 3, …`.
//!
//! Sizes (`proto_max_bulk_len`) take an integer number of bytes or a string with Redis's
//! suffixes, case-insensitive (redis.conf header, `memtoull` in Redis `util.c`):
//! `1k` = 1000, `1kb` = 1024, `1m` = 1000², `1mb` = 1024², `1g` = 1000³, `1gb` = 1024³.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Visitor};

/// Default runtime directory, relative to the working directory of `recached start` (like
/// Redis's `dir ./`); it is made absolute when the fleet starts so children and a daemonized
/// supervisor (which changes directory to `/`) agree on it.
pub const DEFAULT_DIR: &str = "recached-data";

/// The whole file. Top-level keys describe the fleet; `[engine]` and `[supervisor]` are tables.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Number of engine processes; 0 = one per core (`std::thread::available_parallelism`).
    pub engines: usize,
    /// Listen address of every engine and of the proxy.
    pub bind: String,
    /// Port of the proxy.
    pub proxy_port: u16,
    /// The proxy's memcached protocol port (docs/memcached.md); 0 = none.
    pub memcached_port: u16,
    /// The ACL user (`default` or one of `[[users]]`) every memcached request runs as; empty
    /// = no permission check, the port is for trusted networks (docs/memcached.md).
    pub memcached_user: String,
    /// Engine i listens on `engine_port_base + i`.
    pub engine_port_base: u16,
    /// Runtime directory: `recached.pid`, `state.toml`, `logs/`.
    pub dir: PathBuf,
    /// Engines speak the Redis Cluster protocol (`-MOVED`, CLUSTER SLOTS, …) so smart clients
    /// can skip the proxy; `false` = plain standalone engines (docs/cluster.md).
    pub cluster: bool,
    /// Explicit topology for fleets spanning machines: every instance as `host:port`, in
    /// instance order, the same list on every machine. Empty = `engines` instances on
    /// `bind:engine_port_base+i`. The supervisor starts only the nodes whose host is an
    /// address of this machine.
    pub nodes: Vec<String>,
    /// Host the engines announce to cluster clients for the implicit topology (instead of
    /// `bind`); empty = `bind`, and for a wildcard bind the address each client connected to.
    pub announce_host: String,
    /// Fleet-wide memory limit, divided evenly among the engines of the topology (each gets
    /// `maxmemory_total / N`); 0 = none. `[engine] maxmemory`, when non-zero, wins.
    pub maxmemory_total: Size,
    /// Port of the supervisor's Prometheus endpoint (`/metrics`); 0 = disabled.
    pub metrics_port: u16,
    /// Listen address of the Prometheus endpoint (loopback unless opened on purpose).
    pub metrics_bind: String,
    /// Port of the WebSocket fan-out to browser replicas (HTTP + `/ws`); 0 = no fan-out.
    /// Unset = `proxy_port + 100` (6480 with the default proxy port), and then a port that is
    /// busy at start only skips the fan-out (with a warning) instead of failing the start.
    pub fanout_port: Option<u16>,
    /// The fan-out's tokens file (`[tokens]`: "token" = ["prefix", …]); empty = no tokens,
    /// only loopback origins may connect (docs/browser-protocol.md).
    pub fanout_tokens: String,
    /// The default user's password on engines and the proxy (Redis `requirepass`); "" = none.
    pub requirepass: String,
    /// Redis `protected-mode`: without a password, refuse clients off the loopback interface.
    pub protected_mode: bool,
    /// ACL users (`[[users]]` name + rules), enforced by engines and the proxy (`crate::auth`).
    pub users: Vec<crate::auth::UserEntry>,
    pub engine: EngineSection,
    pub supervisor: SupervisorSection,
    /// `[tls]`: certificate files and TLS ports (`crate::tls_limits`).
    pub tls: crate::tls_limits::TlsSection,
    /// `[limits]`: maxclients, timeout, query/output buffer limits (`crate::tls_limits`).
    pub limits: crate::tls_limits::LimitsSection,
}

/// `[engine]`: the settings of each engine process, mapped onto [`engine_core::Config`].
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// Background ticks per second (active expiry), 1..=500 as in Redis.
    pub hz: u32,
    /// Largest bulk string a request may carry, bytes (Redis `proto-max-bulk-len`, ≥ 1mb).
    pub proto_max_bulk_len: Size,
    /// Memory limit of each engine (Redis `maxmemory`); 0 = none (see `maxmemory_total`).
    pub maxmemory: Size,
    /// What to do at the limit (Redis `maxmemory-policy`): noeviction, allkeys-lru, …
    pub maxmemory_policy: String,
    /// Keys sampled per eviction round (Redis `maxmemory-samples`).
    pub maxmemory_samples: u32,
    /// Number of databases SELECT can choose from (Redis `databases`, default 16).
    pub databases: usize,
    /// LFU counter growth (Redis `lfu-log-factor`).
    pub lfu_log_factor: u32,
    /// Minutes per LFU counter decay step (Redis `lfu-decay-time`).
    pub lfu_decay_time: u32,
    /// Most fields a hash keeps in a listpack (Redis `hash-max-listpack-entries`, alias
    /// `hash_max_ziplist_entries`; default 512).
    #[serde(alias = "hash_max_ziplist_entries")]
    pub hash_max_listpack_entries: u64,
    /// Longest field or value a listpack hash keeps, bytes (`hash-max-listpack-value`; 64).
    #[serde(alias = "hash_max_ziplist_value")]
    pub hash_max_listpack_value: Size,
    /// Most integers a set keeps in an intset (`set-max-intset-entries`; 512).
    pub set_max_intset_entries: u64,
    /// Most members a sorted set keeps in a listpack (`zset-max-listpack-entries`; 128).
    #[serde(alias = "zset_max_ziplist_entries")]
    pub zset_max_listpack_entries: u64,
    /// Longest member a listpack sorted set keeps, bytes (`zset-max-listpack-value`; 64).
    #[serde(alias = "zset_max_ziplist_value")]
    pub zset_max_listpack_value: Size,
    /// Quicklist node size (`list-max-listpack-size`: entries if > 0, -1..-5 = 4..64 KB; -2).
    #[serde(alias = "list_max_ziplist_size")]
    pub list_max_listpack_size: i64,
    /// Quicklist nodes left uncompressed at each end (`list-compress-depth`; 0). Accepted;
    /// recached does not compress lists.
    pub list_compress_depth: i64,
    /// Entries per stream node, 0 = no limit (`stream-node-max-entries`; 100).
    pub stream_node_max_entries: u64,
    /// Bytes per stream node, 0 = no limit (`stream-node-max-bytes`; 4096).
    pub stream_node_max_bytes: Size,
    /// Seconds between periodic snapshots (BGSAVE); 0 = none (docs/persistence.md).
    pub save_interval: u64,
    /// Changes needed since the last snapshot for a periodic one (0 counts as 1).
    pub save_changes: u64,
    /// A snapshot that fails to load at start is moved aside; then `start-empty` serves an
    /// empty keyspace, `refuse` exits (status 78, not restarted by the supervisor).
    pub on_corrupt_snapshot: String,
}

/// `[supervisor]`: how `recached start` watches its children.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SupervisorSection {
    /// After SIGTERM, how long children get to exit before SIGKILL, milliseconds.
    pub stop_timeout_ms: u64,
    /// A child that ran at least this long before dying is restarted at once, milliseconds;
    /// one that died sooner counts as a quick death and is restarted after a backoff.
    pub min_healthy_uptime_ms: u64,
    /// First backoff after a quick death, milliseconds; doubles on each further quick death.
    pub restart_backoff_initial_ms: u64,
    /// Upper bound of the backoff, milliseconds.
    pub restart_backoff_max_ms: u64,
    /// How often each child is PINGed, milliseconds; 0 = no health checks.
    pub health_check_interval_ms: u64,
    /// Connect/reply timeout of one PING, milliseconds.
    pub health_check_timeout_ms: u64,
    /// Failed PINGs in a row after which a child is killed and restarted (hung).
    pub health_check_failures: u32,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            engines: 0,
            bind: "127.0.0.1".into(),
            proxy_port: 6380,
            memcached_port: 0,
            memcached_user: String::new(),
            engine_port_base: 6400,
            dir: PathBuf::from(DEFAULT_DIR),
            cluster: true,
            nodes: Vec::new(),
            announce_host: String::new(),
            maxmemory_total: Size(0),
            metrics_port: 6490,
            metrics_bind: "127.0.0.1".into(),
            fanout_port: None,
            fanout_tokens: String::new(),
            requirepass: String::new(),
            protected_mode: true,
            users: Vec::new(),
            engine: EngineSection::default(),
            supervisor: SupervisorSection::default(),
            tls: Default::default(),
            limits: Default::default(),
        }
    }
}

impl Default for EngineSection {
    fn default() -> Self {
        let core = engine_core::Config::default();
        EngineSection {
            hz: core.hz,
            proto_max_bulk_len: Size(core.proto_max_bulk_len),
            maxmemory: Size(core.maxmemory),
            maxmemory_policy: core.maxmemory_policy.to_string(),
            maxmemory_samples: core.maxmemory_samples,
            databases: core.databases,
            lfu_log_factor: core.lfu_log_factor,
            lfu_decay_time: core.lfu_decay_time,
            hash_max_listpack_entries: core.encoding.hash_max_listpack_entries,
            hash_max_listpack_value: Size(core.encoding.hash_max_listpack_value),
            set_max_intset_entries: core.encoding.set_max_intset_entries,
            zset_max_listpack_entries: core.encoding.zset_max_listpack_entries,
            zset_max_listpack_value: Size(core.encoding.zset_max_listpack_value),
            list_max_listpack_size: core.encoding.list_max_listpack_size,
            list_compress_depth: core.list_compress_depth,
            stream_node_max_entries: core.stream_node_max_entries,
            stream_node_max_bytes: Size(core.stream_node_max_bytes),
            save_interval: 300,
            save_changes: 100,
            on_corrupt_snapshot: "start-empty".into(),
        }
    }
}

impl Default for SupervisorSection {
    fn default() -> Self {
        SupervisorSection {
            stop_timeout_ms: 10_000,
            min_healthy_uptime_ms: 5_000,
            restart_backoff_initial_ms: 100,
            restart_backoff_max_ms: 30_000,
            health_check_interval_ms: 1_000,
            health_check_timeout_ms: 1_000,
            health_check_failures: 3,
        }
    }
}

impl FileConfig {
    /// The engine settings as `engine-core` wants them; settings the file does not name keep
    /// engine-core's own defaults.
    pub fn engine_config(&self) -> engine_core::Config {
        let core = engine_core::Config::default();
        let e = &self.engine;
        engine_core::Config {
            hz: e.hz,
            proto_max_bulk_len: e.proto_max_bulk_len.0,
            maxmemory: self.engine_maxmemory(),
            maxmemory_policy: engine_core::evict::MAXMEMORY_POLICIES
                .iter()
                .find(|p| p.eq_ignore_ascii_case(e.maxmemory_policy.trim()))
                .copied()
                .unwrap_or(core.maxmemory_policy),
            maxmemory_samples: e.maxmemory_samples,
            databases: e.databases,
            lfu_log_factor: e.lfu_log_factor,
            lfu_decay_time: e.lfu_decay_time,
            encoding: engine_core::types::EncodingLimits {
                hash_max_listpack_entries: e.hash_max_listpack_entries,
                hash_max_listpack_value: e.hash_max_listpack_value.0,
                set_max_intset_entries: e.set_max_intset_entries,
                zset_max_listpack_entries: e.zset_max_listpack_entries,
                zset_max_listpack_value: e.zset_max_listpack_value.0,
                list_max_listpack_size: e.list_max_listpack_size,
            },
            list_compress_depth: e.list_compress_depth,
            stream_node_max_entries: e.stream_node_max_entries,
            stream_node_max_bytes: e.stream_node_max_bytes.0,
            acl: crate::auth::engine_acl(self),
            ..core
        }
    }

    /// The encoding settings' ranges, as Redis's CONFIG SET checks them (`config.c`).
    fn validate_encoding(&self) -> Result<(), String> {
        let e = &self.engine;
        let max = i64::MAX as u64;
        let counts = [
            ("hash_max_listpack_entries", e.hash_max_listpack_entries),
            ("hash_max_listpack_value", e.hash_max_listpack_value.0),
            ("set_max_intset_entries", e.set_max_intset_entries),
            ("zset_max_listpack_entries", e.zset_max_listpack_entries),
            ("zset_max_listpack_value", e.zset_max_listpack_value.0),
            ("stream_node_max_entries", e.stream_node_max_entries),
            ("stream_node_max_bytes", e.stream_node_max_bytes.0),
        ];
        for (name, v) in counts {
            if v > max {
                return Err(format!("engine.{name} must be between 0 and {max}"));
            }
        }
        let int = i64::from(i32::MIN)..=i64::from(i32::MAX);
        if !int.contains(&e.list_max_listpack_size) {
            return Err(format!(
                "engine.list_max_listpack_size must be between {} and {}",
                i32::MIN,
                i32::MAX
            ));
        }
        if !(0..=i64::from(i32::MAX)).contains(&e.list_compress_depth) {
            return Err(format!(
                "engine.list_compress_depth must be between 0 and {}",
                i32::MAX
            ));
        }
        Ok(())
    }

    /// Each engine's `maxmemory`: `[engine] maxmemory` if set, else the fleet total divided by
    /// the number of instances in the topology.
    pub fn engine_maxmemory(&self) -> u64 {
        if self.engine.maxmemory.0 != 0 {
            return self.engine.maxmemory.0;
        }
        let n = self.topology().len().max(1) as u64;
        self.maxmemory_total.0 / n
    }

    /// The snapshot settings of an engine whose data dir is `dir` (`None` = no snapshots).
    pub fn snapshot_options(
        &self,
        dir: Option<PathBuf>,
    ) -> recached_server::snapshot::SnapshotOptions {
        let e = &self.engine;
        recached_server::snapshot::SnapshotOptions {
            dir,
            save_interval: e.save_interval,
            save_changes: e.save_changes,
            on_corrupt: recached_server::snapshot::OnCorrupt::parse(&e.on_corrupt_snapshot)
                .unwrap_or_default(),
            split: None,
        }
    }

    /// `engines`, with 0 resolved to the number of cores.
    pub fn engine_count(&self) -> usize {
        if self.engines == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            self.engines
        }
    }

    /// The fleet topology: every instance as `host:port`, in instance order (what the engines
    /// get as `--cluster-nodes`). Implicit: `engines` instances on `announce_host` (else
    /// `bind`) at `engine_port_base + i`.
    pub fn topology(&self) -> Vec<String> {
        if !self.nodes.is_empty() {
            return self.nodes.iter().map(|n| n.trim().to_string()).collect();
        }
        let host = if self.announce_host.trim().is_empty() {
            self.bind.trim()
        } else {
            self.announce_host.trim()
        };
        (0..self.engine_count())
            .map(|i| host_port(host, self.engine_port_base + i as u16))
            .collect()
    }

    /// The engines this machine runs: `(instance index, listen address, port)`. Implicit
    /// topology: all of them on `bind`. Explicit `nodes`: those whose host is an address of
    /// this machine, listening on `bind` if that is a wildcard, else on the node's host.
    pub fn local_engines(&self) -> Vec<(usize, String, u16)> {
        if self.nodes.is_empty() {
            return (0..self.engine_count())
                .map(|i| (i, self.bind.clone(), self.engine_port_base + i as u16))
                .collect();
        }
        let wildcard = engine_core::cmd::cluster::is_wildcard(self.bind.trim());
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let (host, port) = engine_core::cmd::cluster::parse_node(n).ok()?;
                is_local_host(&host).then(|| {
                    let listen = if wildcard { self.bind.clone() } else { host };
                    (i, listen, port)
                })
            })
            .collect()
    }

    /// Checks that do not fit the types: ranges, and ports that would collide.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            let (host, port) = engine_core::cmd::cluster::parse_node(n)?;
            if engine_core::cmd::cluster::is_wildcard(&host) {
                return Err(format!(
                    "nodes: {n:?} needs the host clients reach it at, not a wildcard"
                ));
            }
            if !seen.insert((host, port)) {
                return Err(format!("nodes: {n:?} is listed twice"));
            }
        }
        if self.nodes.len() > MAX_ENGINES {
            return Err(format!("nodes: at most {MAX_ENGINES} entries"));
        }
        if self.announce_host.contains(char::is_whitespace) {
            return Err("announce_host must be a host name or address".into());
        }
        if !(1..=500).contains(&self.engine.hz) {
            return Err(format!(
                "engine.hz must be between 1 and 500, got {}",
                self.engine.hz
            ));
        }
        // Redis refuses proto-max-bulk-len below 1mb (config.c); we keep the same floor.
        if recached_server::snapshot::OnCorrupt::parse(&self.engine.on_corrupt_snapshot).is_none() {
            return Err(format!(
                "engine.on_corrupt_snapshot must be \"start-empty\" or \"refuse\", got {:?}",
                self.engine.on_corrupt_snapshot
            ));
        }
        if self.engine.proto_max_bulk_len.0 < 1024 * 1024 {
            return Err("engine.proto_max_bulk_len must be at least 1mb".into());
        }
        if !engine_core::evict::MAXMEMORY_POLICIES
            .iter()
            .any(|p| p.eq_ignore_ascii_case(self.engine.maxmemory_policy.trim()))
        {
            return Err(format!(
                "engine.maxmemory_policy must be one of {}",
                engine_core::evict::MAXMEMORY_POLICIES.join(", ")
            ));
        }
        if self.engine.databases == 0 || self.engine.databases > i32::MAX as usize {
            return Err("engine.databases must be at least 1".into());
        }
        if self.engine.maxmemory_samples == 0 || self.engine.maxmemory_samples > i32::MAX as u32 {
            return Err("engine.maxmemory_samples must be at least 1".into());
        }
        self.validate_encoding()?;
        if self.engines > MAX_ENGINES {
            return Err(format!(
                "engines must be at most {MAX_ENGINES}, got {}",
                self.engines
            ));
        }
        let n = self.engine_count() as u32;
        let last = self.engine_port_base as u32 + n - 1;
        if self.nodes.is_empty() && (self.engine_port_base == 0 || last > u16::MAX as u32) {
            return Err(format!(
                "engine ports {}..={last} do not fit in 1..=65535",
                self.engine_port_base
            ));
        }
        if self.proxy_port == 0 {
            return Err("proxy_port must not be 0".into());
        }
        if self.nodes.is_empty()
            && (self.engine_port_base as u32..=last).contains(&(self.proxy_port as u32))
        {
            return Err(format!(
                "proxy_port {} falls inside the engine ports {}..={last}",
                self.proxy_port, self.engine_port_base
            ));
        }
        if self.bind.trim().is_empty() {
            return Err("bind must not be empty".into());
        }
        crate::tls_limits::validate(self)?;
        crate::auth::validate(self)?;
        let s = &self.supervisor;
        if s.restart_backoff_initial_ms == 0
            || s.restart_backoff_initial_ms > s.restart_backoff_max_ms
        {
            return Err(
                "supervisor: need 0 < restart_backoff_initial_ms <= restart_backoff_max_ms".into(),
            );
        }
        Ok(())
    }
}

/// More engines than this is a typo, not a fleet (each one is a process with its own port).
pub const MAX_ENGINES: usize = 1024;

/// `host:port`, with brackets around an IPv6 address.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Whether `host` names this machine: it resolves to an address a socket can be bound to
/// here (binding port 0 succeeds on local addresses only; EADDRNOTAVAIL otherwise).
pub fn is_local_host(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    (host, 0)
        .to_socket_addrs()
        .map(|mut addrs| addrs.any(|a| std::net::TcpListener::bind(a).is_ok()))
        .unwrap_or(false)
}

/// Reads and validates the file, or returns the defaults when there is none.
pub fn load(path: Option<&Path>) -> Result<FileConfig, String> {
    let cfg = match path {
        None => FileConfig::default(),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| format!("config {}: {e}", p.display()))?;
            parse(&text).map_err(|e| format!("config {}: {e}", p.display()))?
        }
    };
    cfg.validate().map_err(|e| match path {
        Some(p) => format!("config {}: {e}", p.display()),
        None => e,
    })?;
    Ok(cfg)
}

/// Parses TOML text (no validation beyond the types).
pub fn parse(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

/// A byte count: an integer, or a string with a Redis size suffix (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

/// Parses `"512mb"`, `"1k"`, `"100"`; `None` for anything else or on overflow.
pub fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    if num.is_empty() {
        return None;
    }
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a byte count: an integer or a string such as \"512mb\" (k, kb, m, mb, g, gb)",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v)
                    .map(Size)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(SizeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_redis_suffixes() {
        assert_eq!(parse_size("512mb"), Some(512 * 1024 * 1024));
        assert_eq!(parse_size("1k"), Some(1000));
        assert_eq!(parse_size("1KB"), Some(1024));
        assert_eq!(parse_size("2g"), Some(2_000_000_000));
        assert_eq!(parse_size("1gb"), Some(1 << 30));
        assert_eq!(parse_size("42"), Some(42));
        assert_eq!(parse_size("mb"), None);
        assert_eq!(parse_size("1tb"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999gb"), None);
    }

    #[test]
    fn the_annotated_file_equals_the_defaults() {
        let text = include_str!("../../configs/recached.toml");
        assert_eq!(parse(text).unwrap(), FileConfig::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let e = parse("proxy-port = 1\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = parse("[engine]\nhz = 10\nmaxmem = 3\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = parse("[engine]\nproto_max_bulk_len = \"12zb\"\n").unwrap_err();
        assert!(e.contains("512mb"), "{e}");
        let c = parse("[engine]\nproto_max_bulk_len = \"2mb\"\nhz = 100\n").unwrap();
        assert_eq!(c.engine.proto_max_bulk_len, Size(2 << 20));
        assert_eq!(c.engine_config().hz, 100);
        assert_eq!(c.engine_config().proto_max_bulk_len, 2 << 20);
        let c = parse("engines = 2\nproxy_port = 6401\n").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .contains("inside the engine ports")
        );
        let c = parse("[engine]\nhz = 0\n").unwrap();
        assert!(c.validate().is_err());
        let c = parse("engine_port_base = 65535\nengines = 2\n").unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn tls_fanout_port_beside_the_shared_tls_keys() {
        let c = parse("[tls]\ncert_file = \"a\"\nkey_file = \"b\"\nfanout_port = 6481\n").unwrap();
        assert_eq!(c.tls.fanout_port, 6481);
        assert_eq!(c.tls.cert_file, "a");
        c.validate().unwrap();
        let e = parse("[tls]\nfanout_prot = 1\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        assert!(parse("[tls]\nfanout_port = 70000\n").is_err());
        assert!(parse("[tls]\nfanout_port = \"x\"\n").is_err());
        let c = parse("[tls]\nfanout_port = 6481\n").unwrap();
        assert!(c.validate().unwrap_err().contains("cert_file"));
    }

    #[test]
    fn topology_implicit_and_explicit() {
        let c = parse("engines = 2\nengine_port_base = 7000\n").unwrap();
        assert!(c.cluster);
        assert_eq!(c.topology(), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert_eq!(
            c.local_engines(),
            [
                (0, "127.0.0.1".to_string(), 7000),
                (1, "127.0.0.1".to_string(), 7001)
            ]
        );
        let c = parse("engines = 1\nbind = \"::1\"\nannounce_host = \"\"\n").unwrap();
        assert_eq!(c.topology(), ["[::1]:6400"]);
        let c = parse("engines = 1\nannounce_host = \"cache.example\"\n").unwrap();
        assert_eq!(c.topology(), ["cache.example:6400"]);
        // Explicit nodes: only the local ones are started (192.0.2.x is TEST-NET, never local).
        let c = parse("nodes = [\"127.0.0.1:7000\", \"192.0.2.1:7000\", \"127.0.0.1:7001\"]\n")
            .unwrap();
        c.validate().unwrap();
        assert_eq!(c.topology().len(), 3);
        assert_eq!(
            c.local_engines(),
            [
                (0, "127.0.0.1".to_string(), 7000),
                (2, "127.0.0.1".to_string(), 7001)
            ]
        );
        for bad in [
            "nodes = [\"0.0.0.0:7000\"]\n",
            "nodes = [\"a:1\", \"a:1\"]\n",
            "nodes = [\"a\"]\n",
            "cluster = false\nnodes = [\"a:0\"]\n",
        ] {
            assert!(parse(bad).unwrap().validate().is_err(), "{bad}");
        }
        assert!(!parse("cluster = false\n").unwrap().cluster);
    }

    #[test]
    fn maxmemory_per_engine_or_divided_fleet_total() {
        let c = parse("engines = 4\nmaxmemory_total = \"1gb\"\n").unwrap();
        assert_eq!(c.engine_config().maxmemory, (1 << 30) / 4);
        let c = parse("engines = 4\nmaxmemory_total = \"1gb\"\n[engine]\nmaxmemory = \"20mb\"\n")
            .unwrap();
        assert_eq!(c.engine_config().maxmemory, 20 << 20);
        let c = parse("[engine]\nmaxmemory_policy = \"allkeys-lru\"\nmaxmemory_samples = 10\n")
            .unwrap();
        c.validate().unwrap();
        assert_eq!(c.engine_config().maxmemory_policy, "allkeys-lru");
        assert_eq!(c.engine_config().maxmemory_samples, 10);
        let c = parse("[engine]\nmaxmemory_policy = \"lru\"\n").unwrap();
        assert!(c.validate().unwrap_err().contains("allkeys-lru"));
    }

    #[test]
    fn encoding_settings_reach_the_engine_with_redis_aliases() {
        let d = parse("").unwrap().engine_config();
        assert_eq!(d.encoding, engine_core::types::EncodingLimits::DEFAULT);
        assert_eq!(
            (d.encoding.list_max_listpack_size, d.list_compress_depth),
            (-2, 0)
        );
        let c = parse(
            "[engine]\nhash_max_ziplist_entries = 10\nhash_max_listpack_value = \"1kb\"\n\
             set_max_intset_entries = 3\nzset_max_listpack_entries = 0\n\
             zset_max_ziplist_value = 7\nlist_max_ziplist_size = 5\nlist_compress_depth = 2\n\
             stream_node_max_bytes = \"8kb\"\nstream_node_max_entries = 50\n",
        )
        .unwrap();
        c.validate().unwrap();
        let e = c.engine_config();
        assert_eq!(
            e.encoding,
            engine_core::types::EncodingLimits {
                hash_max_listpack_entries: 10,
                hash_max_listpack_value: 1024,
                set_max_intset_entries: 3,
                zset_max_listpack_entries: 0,
                zset_max_listpack_value: 7,
                list_max_listpack_size: 5,
            }
        );
        assert_eq!(e.list_compress_depth, 2);
        assert_eq!(
            (e.stream_node_max_bytes, e.stream_node_max_entries),
            (8192, 50)
        );
        let bad = parse("[engine]\nlist_compress_depth = -1\n").unwrap();
        assert!(bad.validate().unwrap_err().contains("list_compress_depth"));
        let bad = parse("[engine]\nlist_max_listpack_size = 3000000000\n").unwrap();
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("list_max_listpack_size")
        );
    }
}
