//! `recached`: the one binary that holds every role, like `redis-server` and `redis-sentinel`
//! are one binary.
//!
//! ```text
//! recached server  --port P --bind ADDR [--config FILE] [--dir DIR]  one engine, foreground
//!                  [--cluster-nodes H:P,H:P,… --cluster-index I] [--cluster-announce-host H]
//!                  [--reshard-split I/N]   (set by start: load the staged snapshots, reshard.rs)
//! recached proxy   --port P --bind ADDR --backends H:P,H:P,… [--config FILE]
//!   (server, proxy) [--tls-port P --tls-cert-file F --tls-key-file F [--tls-ca-cert-file F]
//!                   [--tls-auth-clients no|yes|optional]] [--maxclients N] [--timeout S]
//!                   [--client-query-buffer-limit SIZE] [--client-output-buffer-limit "…"]
//! recached fanout  --port P --bind ADDR --engines H:P,H:P,… [--tokens FILE]   browser replicas
//!                  [--tls-port P --tls-cert-file F --tls-key-file F …]   (HTTPS + wss://)
//! recached start   [--config FILE] [--engines N] [--bind ADDR] [--proxy-port P]
//!                  [--engine-port-base P] [--dir DIR] [--daemonize]   the supervisor
//!                  [--fanout-port P]                   (default proxy port + 100; 0 = none)
//!                  [--metrics-port P]                  (Prometheus at /metrics, metrics.rs)
//!                  [--reshard]                         (re-shard the snapshots, reshard.rs)
//! recached stop    [--dir DIR | --config FILE]
//! recached resize  N [--dir DIR | --config FILE] [--user U] [--pass P]   engines of a running
//!                  fleet (resize.rs, slotmove.rs; the supervisor's side: fleet/control.rs)
//! recached status  [--dir DIR | --config FILE] [--json] [--user U] [--pass P]
//!                  (or $REDISCLI_AUTH, else the config's requirepass)
//! ```
//!
//! # Layout
//!
//! - `main.rs` (this file): flags (clap), logging, and the hand-off to each role. No role logic.
//! - [`config`]: the TOML file (`configs/recached.toml` documents every key), defaults, size
//!   suffixes, and how flags override it.
//! - [`fleet`]: `recached start` — the supervisor (children, restarts, signals).
//! - [`pidfile`], [`daemon`], [`state`]: its pid file lock, `--daemonize`, and the
//!   `state.toml` that `status` and `metrics` read (child [`state::Role`] and
//!   [`state::RunState`]).
//! - [`health`]: the supervisor's PING health checks and SIGHUP reload.
//! - [`metrics`]: the supervisor's Prometheus endpoint (a thread, not a child).
//! - [`fanout`]: `recached fanout` — flags and config for `recached_fanout`.
//! - [`status`]: `recached stop` / `recached status`.
//! - [`reply`]: reading RESP replies over a blocking socket, for `status`, `metrics` and `health`.
//! - [`auth`], [`tls_limits`]: the security sections of the config and their flags.
//! - The benchmark tools are a separate binary, `recached-bench` (crate `bench/`), so that this
//!   production binary carries none of their code or dependencies.
//!
//! Every role also runs alone from the command line; nothing in `server`, `proxy` or `fanout`
//! assumes a supervisor started it. Exit status: 0 on success, 1 on any error (the message
//! goes to the log / stderr), 2 on bad flags (clap's convention).

mod auth;
mod config;
mod daemon;
mod fanout;
mod fleet;
mod health;
mod metrics;
mod pidfile;
mod reply;
mod reshard;
mod resize;
mod slotmove;
mod state;
mod status;
mod tls_limits;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "recached",
    version,
    about = "A Redis-compatible cache: one engine process per core behind a sharding proxy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one engine in the foreground (like `redis-server --port P`).
    Server {
        /// TCP port; default: the config's `engine_port_base` (6400). 0 picks a free port.
        #[arg(long)]
        port: Option<u16>,
        /// Listen address; default: the config's `bind` (127.0.0.1).
        #[arg(long)]
        bind: Option<String>,
        /// TOML config file; its `[engine]` section supplies the engine settings.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Snapshot directory (`dump-<port>.rcs`); default: the config file's `dir` when
        /// --config is given, else none (no snapshots). docs/persistence.md.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Number of databases (Redis `databases`); default: the config's `[engine]
        /// databases` (16).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
        databases: Option<u32>,
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        tls: tls_limits::TlsArgs,
        #[command(flatten)]
        limits: tls_limits::LimitArgs,
    },
    /// Run the sharding proxy in the foreground in front of any RESP servers.
    Proxy {
        /// TCP port; default: the config's `proxy_port` (6380).
        #[arg(long)]
        port: Option<u16>,
        /// Listen address; default: the config's `bind` (127.0.0.1).
        #[arg(long)]
        bind: Option<String>,
        /// Backends as `host:port`, comma separated, in instance order.
        #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
        backends: Vec<String>,
        /// TOML config file (validated; the proxy reads `bind`/`proxy_port` from it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The memcached protocol port (docs/memcached.md); default: the config's
        /// `memcached_port` (0 = none; with --memcached-tls-port, TLS only).
        #[arg(long)]
        memcached_port: Option<u16>,
        /// The memcached protocol over TLS, with the proxy's certificate settings
        /// (--tls-cert-file …); default: the config's `[tls] memcached_port` (0 = none).
        #[arg(long)]
        memcached_tls_port: Option<u16>,
        /// The ACL user every memcached request runs as (`default` or a `[[users]]` name);
        /// default: the config's `memcached_user` (none: no permission check).
        #[arg(long)]
        memcached_user: Option<String>,
        #[command(flatten)]
        tls: tls_limits::TlsArgs,
        #[command(flatten)]
        limits: tls_limits::LimitArgs,
    },
    /// Run the WebSocket fan-out to browser replicas in the foreground (docs/browser-protocol.md).
    Fanout(fanout::FanoutArgs),
    /// Start the fleet (N engines, proxy, fan-out, metrics endpoint), supervised: restarts,
    /// clean stop.
    Start(StartArgs),
    /// Stop the fleet running on a data dir (SIGTERM to its supervisor, then wait).
    Stop(DirArgs),
    /// Change the number of engines of a running fleet, moving only the slots that change
    /// owner while clients keep working (docs/operations.md, "Resizing a running fleet").
    Resize(resize::ResizeArgs),
    /// Show each process of the fleet: role, port, pid, state, uptime, keys, memory, restarts.
    Status {
        #[command(flatten)]
        dir: DirArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        auth: status::AuthArgs,
    },
}

/// Flags of `recached start`; each one overrides the same key of the config file.
#[derive(Args, Debug, Default, Clone)]
pub struct StartArgs {
    /// TOML config file (see configs/recached.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Number of engine processes; 0 = one per core.
    #[arg(long)]
    pub engines: Option<usize>,
    /// Listen address of every engine, the proxy and the fan-out (the metrics endpoint uses
    /// the config's `metrics_bind`).
    #[arg(long)]
    pub bind: Option<String>,
    /// Proxy port.
    #[arg(long)]
    pub proxy_port: Option<u16>,
    /// The proxy's memcached protocol port; 0 = none (the default). docs/memcached.md.
    #[arg(long)]
    pub memcached_port: Option<u16>,
    /// The proxy's memcached protocol over TLS (`[tls] memcached_port`; certificates from
    /// `[tls]`); 0 = none (the default).
    #[arg(long)]
    pub memcached_tls_port: Option<u16>,
    /// The ACL user every memcached request runs as (`memcached_user`); default none: no
    /// permission check (trusted networks).
    #[arg(long)]
    pub memcached_user: Option<String>,
    /// Engine i listens on engine_port_base + i.
    #[arg(long)]
    pub engine_port_base: Option<u16>,
    /// Port of the WebSocket fan-out (browser replicas); 0 = no fan-out. Default: the
    /// config's `fanout_port`, else the proxy port + 100 (6480), skipped with a warning when
    /// that derived port is busy.
    #[arg(long)]
    pub fanout_port: Option<u16>,
    /// Runtime directory: pid file, state file, logs/, snapshots. Default: the config's `dir`
    /// (recached-data, relative to the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Detach from the terminal; returns once the fleet is started.
    #[arg(long)]
    pub daemonize: bool,
    /// Re-shard the snapshots in `dir` even if they match the layout (e.g. one copied in
    /// from another fleet): every key goes to the engine that owns its slot.
    #[arg(long)]
    pub reshard: bool,
    /// Port of the Prometheus endpoint (`/metrics`); 0 = disabled. Default: the config's
    /// `metrics_port` (6490).
    #[arg(long)]
    pub metrics_port: Option<u16>,
}

/// Cluster topology flags of `recached server` (docs/cluster.md). Without them the engine is
/// standalone, unless the config file has `cluster = true` and an explicit `nodes` list that
/// contains this engine's port.
#[derive(Args, Debug, Default, Clone)]
pub struct ClusterArgs {
    /// Every instance of the fleet as host:port, comma separated, in instance order.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub cluster_nodes: Vec<String>,
    /// This engine's position in --cluster-nodes (0-based).
    #[arg(long, requires = "cluster_nodes")]
    pub cluster_index: Option<usize>,
    /// Host announced for wildcard (0.0.0.0) nodes; default: the address the client connected to.
    #[arg(long)]
    pub cluster_announce_host: Option<String>,
    /// Set by `recached start` after a change of engine count: load every staged snapshot
    /// (`DIR/reshard-*.rcs`) keeping the slots of instance I of N, save, then serve
    /// (docs/operations.md, "Changing the number of engines").
    #[arg(long, value_name = "I/N", value_parser = parse_split)]
    pub reshard_split: Option<(u32, u32)>,
}

/// `I/N` with I < N.
fn parse_split(s: &str) -> std::result::Result<(u32, u32), String> {
    let (i, n) = s.split_once('/').ok_or("expected INDEX/COUNT")?;
    let i: u32 = i.trim().parse().map_err(|_| "bad INDEX")?;
    let n: u32 = n.trim().parse().map_err(|_| "bad COUNT")?;
    if i >= n {
        return Err(format!("index {i} is not below the count {n}"));
    }
    Ok((i, n))
}

/// Which fleet `stop`/`status` address: its data dir, given directly or through the config file.
#[derive(Args, Debug, Default, Clone)]
pub struct DirArgs {
    /// Runtime directory of the fleet.
    #[arg(long, conflicts_with = "config")]
    pub dir: Option<PathBuf>,
    /// The config file the fleet was started with (its `dir` is used).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let result = match cli.command {
        Command::Server {
            port,
            bind,
            config,
            dir,
            databases,
            cluster,
            tls,
            limits,
        } => run_server(port, bind, (config, databases), dir, cluster, (tls, limits)),
        Command::Proxy {
            port,
            bind,
            backends,
            config,
            memcached_port,
            memcached_tls_port,
            memcached_user,
            tls,
            limits,
        } => run_proxy(
            port,
            bind,
            backends,
            (config, (memcached_port, memcached_tls_port, memcached_user)),
            (tls, limits),
        ),
        Command::Fanout(args) => fanout::run(args),
        Command::Start(args) => fleet::start(args),
        Command::Stop(args) => status::stop(&args),
        Command::Resize(args) => resize::resize(&args),
        Command::Status { dir, json, auth } => status::status(&dir, &auth, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `--memcached-port`, `--memcached-tls-port`, `--memcached-user` of `recached proxy`.
type MemcachedArgs = (Option<u16>, Option<u16>, Option<String>);

/// Errors of every role are reported as text; the roles' own I/O errors are wrapped with context.
pub type Result<T> = std::result::Result<T, String>;

fn run_server(
    port: Option<u16>,
    bind: Option<String>,
    (config, databases): (Option<PathBuf>, Option<u32>),
    dir: Option<PathBuf>,
    cluster: ClusterArgs,
    (tls, limits): (tls_limits::TlsArgs, tls_limits::LimitArgs),
) -> Result<ExitCode> {
    let file = config::load(config.as_deref())?;
    let snapshot_dir = dir.or_else(|| config.is_some().then(|| file.dir.clone()));
    if cluster.reshard_split.is_some() && snapshot_dir.is_none() {
        return Err("server: --reshard-split needs a snapshot dir (--dir)".into());
    }
    let mut snapshot = file.snapshot_options(snapshot_dir);
    snapshot.split = cluster.reshard_split;
    let port = port.unwrap_or(file.engine_port_base);
    let bind = bind.unwrap_or(file.bind.clone());
    let mut engine = file.engine_config();
    if let Some(n) = databases {
        engine.databases = n as usize;
    }
    tls_limits::apply_engine_limits(&file, &limits, &mut engine)
        .map_err(|e| format!("server: {e}"))?;
    let tls = tls_limits::tls_options(&file, &tls, file.tls.engine_port_base)
        .map_err(|e| format!("server: {e}"))?;
    if !cluster.cluster_nodes.is_empty() {
        engine.cluster_nodes = cluster
            .cluster_nodes
            .iter()
            .map(|n| n.trim().to_string())
            .collect();
        engine.cluster_index = match cluster.cluster_index {
            Some(i) => i,
            None if engine.cluster_nodes.len() == 1 => 0,
            None => return Err("server: --cluster-nodes needs --cluster-index".into()),
        };
    } else if file.cluster && !file.nodes.is_empty() {
        // By config: this engine is the node with its port (and, if several, its bind host).
        let parsed: Vec<(String, u16)> = file
            .nodes
            .iter()
            .filter_map(|n| engine_core::cmd::cluster::parse_node(n).ok())
            .collect();
        let mine: Vec<usize> = (0..parsed.len()).filter(|&i| parsed[i].1 == port).collect();
        let index = match mine.as_slice() {
            [i] => *i,
            many => *many.iter().find(|&&i| parsed[i].0 == bind).ok_or_else(|| {
                format!(
                    "server: port {port} does not name one node of `nodes`; pass --cluster-index"
                )
            })?,
        };
        engine.cluster_nodes = file.nodes.clone();
        engine.cluster_index = index;
    }
    engine.cluster_announce_host = cluster
        .cluster_announce_host
        .unwrap_or_else(|| file.announce_host.clone());
    let opts = recached_server::ServerOptions {
        port,
        bind,
        config_file: config.map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
        engine,
        snapshot,
        tls,
    };
    match recached_server::run(opts) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if recached_server::is_corrupt_snapshot(&e) => {
            log::error!("server: {e}");
            Ok(ExitCode::from(
                recached_server::snapshot::EXIT_CORRUPT_SNAPSHOT as u8,
            ))
        }
        Err(e) => Err(format!("server: {e}")),
    }
}

fn run_proxy(
    port: Option<u16>,
    bind: Option<String>,
    backends: Vec<String>,
    (config, memcached): (Option<PathBuf>, MemcachedArgs),
    (tls, limits): (tls_limits::TlsArgs, tls_limits::LimitArgs),
) -> Result<ExitCode> {
    let (memcached_port, memcached_tls_port, memcached_user) = memcached;
    let file = config::load(config.as_deref())?;
    let memcached_tls_port = memcached_tls_port.unwrap_or(file.tls.memcached_port);
    if memcached_tls_port != 0
        && (tls.tls_cert_file.is_none() && file.tls.cert_file.trim().is_empty()
            || tls.tls_key_file.is_none() && file.tls.key_file.trim().is_empty())
    {
        return Err(
            "proxy: --memcached-tls-port needs --tls-cert-file and --tls-key-file (or [tls] in \
             the config)"
                .into(),
        );
    }
    let memcached_user = memcached_user
        .unwrap_or_else(|| file.memcached_user.clone())
        .trim()
        .to_string();
    let tls = tls_limits::tls_options(&file, &tls, file.tls.proxy_port)
        .map_err(|e| format!("proxy: {e}"))?;
    let limits = tls_limits::proxy_limits(&file, &limits).map_err(|e| format!("proxy: {e}"))?;
    // The same allocator settings as the engines (freed memory returned at once): a client
    // closed at its output limit gives its buffers back to the OS, not just to the allocator.
    recached_server::alloc::configure();
    let backends: Vec<String> = backends
        .into_iter()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    if backends.is_empty() {
        return Err("proxy: --backends needs at least one host:port".into());
    }
    let opts = recached_proxy::ProxyOptions {
        port: port.unwrap_or(file.proxy_port),
        bind: bind.unwrap_or(file.bind.clone()),
        backends,
        tls,
        limits,
        auth: recached_proxy::auth::ProxyAuth {
            acl: auth::proxy_acl(&file),
            backend: auth::internal_password()
                .map(|pw| (engine_core::acl::INTERNAL_USER.to_string(), pw)),
        },
        memcached_port: memcached_port.unwrap_or(file.memcached_port),
        memcached_tls_port,
        memcached_user: (!memcached_user.is_empty()).then_some(memcached_user),
    };
    recached_proxy::run(opts).map_err(|e| format!("proxy: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
