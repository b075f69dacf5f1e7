//! The recached engine process: one single-threaded mio loop around `engine-core`.
//!
//! `recached server --port P` calls [`run`], which binds the listener, fills the engine's
//! [`HostInfo`](engine_core::HostInfo) and serves RESP clients until SIGTERM or SIGINT.
//!
//! # Layout
//!
//! - [`event_loop`]: the loop: accept, serve (read → parse → execute → write), the `hz` timer,
//!   signals. Its module docs give the order of one iteration.
//! - [`conn`]: one connection: read buffer, parser, engine `Client`, output buffer, and the
//!   read / execute / flush steps with their edge-triggered rules.
//! - [`alloc`]: the global allocator (mimalloc) and its settings (docs/memory.md).
//! - [`bus`]: the links to the other engines of a cluster that carry PUBLISH to their
//!   subscribers (docs/cluster.md, "Pub/sub").
//! - [`budget`]: every named bound of the loop (accept batch, read budget, query buffer limit,
//!   output high-water mark) with its reason.
//! - [`host`]: the clock (Unix µs, read once per iteration) and RSS.
//! - [`listeners`]: the listening sockets, one per `bind` address, which CONFIG SET `port`
//!   and `bind` re-bind.
//! - [`tls`]: the TLS port: `recached-net`'s rustls driver and settings, re-exported
//!   (docs/security-tls.md). Listeners and their queue are `recached_net::listen`'s too.
//! - [`snapshot`]: load at start, SAVE/BGSAVE (fork), periodic and shutdown saves
//!   (docs/persistence.md).
//! - [`reshard`]: loading the staged snapshots of a fleet of another size, keeping this
//!   engine's slots (docs/operations.md, "Changing the number of engines").
//! - [`migrate`]: MIGRATE's cached blocking connections to other servers.
//!
//! The engine (`engine-core`) is pure; everything that touches sockets, the clock or the
//! process lives here.

pub mod alloc;
pub mod budget;
pub mod bus;
pub mod conn;
mod conns;
pub mod event_loop;
pub mod host;
pub mod listeners;
pub mod migrate;
pub mod nodes_file;
pub mod reshard;
pub mod snapshot;
pub use recached_net::tls;

use std::io;
use std::path::PathBuf;

use engine_core::{Engine, HostInfo};
use log::info;

/// Everything `recached server` needs; the `recached` binary fills it from flags and the
/// TOML config (config parsing lives in the binary, not here).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// TCP port (`--port`); 0 picks a free port (the chosen port is logged), unless a TLS
    /// port is set: then 0 means no plain listener, TLS only (Redis `port 0`).
    pub port: u16,
    /// Listen addresses (`--bind`), default 127.0.0.1; several separated by spaces, each as
    /// Redis's `bind` takes it (`-` prefix: optional, `*`: every IPv4 address, `::*`: every
    /// IPv6 one; see [`recached_net::listen::bind_all`]).
    pub bind: String,
    /// The config file the settings came from, if any (INFO `config_file`).
    pub config_file: Option<PathBuf>,
    /// Engine settings (CONFIG GET/SET names), including the cluster topology
    /// (`cluster_nodes`, `cluster_index`, `cluster_announce_host`; empty nodes = standalone;
    /// flags `--cluster-nodes h:p,h:p --cluster-index i`). See docs/cluster.md.
    pub engine: engine_core::Config,
    /// Snapshot dir, periodic save and corrupt-file policy (`--dir`; `[engine]` keys
    /// `save_interval`, `save_changes`, `on_corrupt_snapshot`). No dir = no snapshots.
    pub snapshot: snapshot::SnapshotOptions,
    /// The TLS listener (`tls_port`, certificate files, `tls_auth_clients`); port 0 = none.
    pub tls: tls::TlsOptions,
}

impl Default for ServerOptions {
    /// Port 6400 (the first engine of a fleet) on 127.0.0.1, no config file, default settings.
    fn default() -> Self {
        ServerOptions {
            port: 6400,
            bind: "127.0.0.1".to_string(),
            config_file: None,
            engine: engine_core::Config::default(),
            snapshot: snapshot::SnapshotOptions::default(),
            tls: tls::TlsOptions::default(),
        }
    }
}

/// Runs the engine in the foreground until SIGTERM/SIGINT (then returns `Ok(())`).
///
/// Errors: the bind address does not resolve or cannot be bound (e.g. port in use), or the
/// poller fails; each carries the address in its message.
pub fn run(opts: ServerOptions) -> io::Result<()> {
    alloc::configure();
    // A bad topology is a start-up error, not a silently standalone engine.
    let cluster = engine_core::cmd::cluster::Cluster::from_config(&opts.engine)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // Certificates are read before binding, so a bad file is a start-up error.
    let tls_config = if opts.tls.enabled() {
        Some(tls::server_config(&opts.tls)?)
    } else {
        None
    };
    // Bound before the snapshot loads, so a second engine on the port fails first.
    let poll = mio::Poll::new()?;
    let mut listeners = listeners::ListenSet::new(poll.registry().try_clone()?, tls_config);
    let bind_addrs = bind_list(&opts.bind);
    let (tcp_port, tls_port) = listeners.bind_at_start(opts.port, opts.tls.port, &bind_addrs)?;
    let local = listeners.first_addr().expect("a listener is bound");

    let cluster_desc = format!(
        "instance {} of {}",
        opts.engine.cluster_index,
        opts.engine.cluster_nodes.join(",")
    );
    let mut engine_config = opts.engine;
    // A per-process random seed for the keyspace hasher, so clients cannot choose keys that
    // all collide (the reason Redis seeds siphash at start, `dictSetHashFunctionSeed`).
    engine_config.hash_seed = host::random_seed();
    let mut engine = Engine::new(engine_config);
    // Lua scripting (EVAL, SCRIPT): the host lives outside engine-core (engine/script).
    if let Err(err) = recached_script::install(&mut engine) {
        log::error!("Lua scripting unavailable: {err}");
    }
    engine.migrate = Some(Box::new(migrate::MigrateSockets::default()));
    let started_us = host::now_us();
    engine.host = HostInfo {
        pid: std::process::id(),
        tcp_port,
        tls_port,
        bind: bind_addrs,
        started_us,
        clock: Some(host::now_us),
        cpu: Some(host::cpu_times),
        random: Some(host::random_bytes),
        executable: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        config_file: opts
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        connected_clients: 0,
        rss_bytes: host::RssReader::new().rss_bytes().unwrap_or(0),
    };

    // Loaded after binding (a second engine on the port fails first) and before serving.
    if let Err(e) =
        snapshot::load_at_start(&mut engine, &opts.snapshot, local.port(), host::now_us())
    {
        return Err(match e {
            snapshot::StartError::Io(e) => e,
            snapshot::StartError::Corrupt(msg) => {
                io::Error::new(io::ErrorKind::InvalidData, CorruptSnapshot(msg))
            }
        });
    }

    // The slot table a previous run acknowledged (CLUSTER SETSLOT, ADDSLOTS, MEET…) wins over
    // the one computed from the topology.
    let nodes_file = match (&opts.snapshot.dir, cluster.enabled()) {
        (Some(dir), true) => {
            let p = nodes_file::path(dir, local.port());
            nodes_file::load_at_start(&mut engine, &p)?;
            Some(p)
        }
        _ => None,
    };

    let plain = tcp_port != 0;
    let mut event_loop = event_loop::EventLoop::new(poll, listeners, engine)?;
    let requirepass = event_loop.engine.config.acl.requirepass.clone();
    event_loop.set_bus(bus::Bus::new(event_loop.engine.cluster(), &requirepass));
    event_loop.set_nodes_file(nodes_file, requirepass);
    if tls_port != 0 {
        info!("TLS listening on port {tls_port}");
    }
    info!(
        "recached engine pid={} listening on {local}{}",
        std::process::id(),
        if plain { "" } else { " (TLS only)" }
    );
    if cluster.enabled() {
        info!("cluster mode: {cluster_desc}");
    } else {
        info!("standalone mode (no cluster topology)");
    }
    info!("Ready to accept connections tcp on port {}", local.port());
    // SIGTERM/SIGINT: the final snapshot (a failed save is logged; the exit stays clean so the
    // supervisor does not restart a stopping engine). SHUTDOWN made its own save.
    if event_loop.run()? == event_loop::Stop::Signal {
        let _ = snapshot::shutdown(&mut event_loop.engine, host::now_us());
    }
    info!("recached engine is now ready to exit, bye bye...");
    Ok(())
}

/// The addresses of a `--bind` value: separated by spaces (`bind a b` in redis.conf).
fn bind_list(bind: &str) -> Vec<String> {
    bind.split_ascii_whitespace().map(str::to_string).collect()
}

/// The error [`run`] returns when `on_corrupt_snapshot = "refuse"` stopped the start; the
/// binary exits with [`snapshot::EXIT_CORRUPT_SNAPSHOT`] for it.
#[derive(Debug)]
pub struct CorruptSnapshot(pub String);

impl std::fmt::Display for CorruptSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CorruptSnapshot {}

/// Whether `e` (from [`run`]) is a refused corrupt snapshot.
pub fn is_corrupt_snapshot(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<CorruptSnapshot>())
}
