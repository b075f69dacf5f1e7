//! `recached`: the one binary that holds every role, like `redis-server` and `redis-sentinel`
//! are one binary.
//!
//! ```text
//! recached server  --port P --bind ADDR [--config FILE]            one engine, foreground
//! recached proxy   --port P --bind ADDR --backends H:P,H:P,… [--config FILE]
//! recached start   [--config FILE] [--engines N] [--bind ADDR] [--proxy-port P]
//!                  [--engine-port-base P] [--dir DIR] [--daemonize]   the supervisor
//! recached stop    [--dir DIR | --config FILE]
//! recached status  [--dir DIR | --config FILE] [--json]
//! ```
//!
//! # Layout
//!
//! - `main.rs` (this file): flags (clap), logging, and the hand-off to each role. No role logic.
//! - [`config`]: the TOML file (`configs/recached.toml` documents every key), defaults, size
//!   suffixes, and how flags override it.
//! - [`fleet`]: `recached start` — the supervisor (pid file, children, restarts, signals).
//! - [`status`]: `recached stop` / `recached status`, and the tiny RESP client `status` uses.
//!
//! Every role also runs alone from the command line; nothing in `server` or `proxy` assumes a
//! supervisor started it. Exit status: 0 on success, 1 on any error (the message goes to the
//! log / stderr), 2 on bad flags (clap's convention).

mod config;
mod fleet;
mod status;

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
    },
    /// Start the fleet: N engines and one proxy, supervised (restarts, clean stop).
    Start(StartArgs),
    /// Stop the fleet running on a data dir (SIGTERM to its supervisor, then wait).
    Stop(DirArgs),
    /// Show each process of the fleet: role, port, pid, state, uptime, keys, memory, restarts.
    Status {
        #[command(flatten)]
        dir: DirArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
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
    /// Listen address of every engine and the proxy.
    #[arg(long)]
    pub bind: Option<String>,
    /// Proxy port.
    #[arg(long)]
    pub proxy_port: Option<u16>,
    /// Engine i listens on engine_port_base + i.
    #[arg(long)]
    pub engine_port_base: Option<u16>,
    /// Runtime directory: pid file, state file, logs/.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Detach from the terminal; returns once the fleet is started.
    #[arg(long)]
    pub daemonize: bool,
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
        Command::Server { port, bind, config } => run_server(port, bind, config),
        Command::Proxy {
            port,
            bind,
            backends,
            config,
        } => run_proxy(port, bind, backends, config),
        Command::Start(args) => fleet::start(args),
        Command::Stop(args) => status::stop(&args),
        Command::Status { dir, json } => status::status(&dir, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Errors of every role are reported as text; the roles' own I/O errors are wrapped with context.
pub type Result<T> = std::result::Result<T, String>;

fn run_server(
    port: Option<u16>,
    bind: Option<String>,
    config: Option<PathBuf>,
) -> Result<ExitCode> {
    let file = config::load(config.as_deref())?;
    let opts = recached_server::ServerOptions {
        port: port.unwrap_or(file.engine_port_base),
        bind: bind.unwrap_or(file.bind.clone()),
        config_file: config.map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
        engine: file.engine_config(),
    };
    recached_server::run(opts).map_err(|e| format!("server: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn run_proxy(
    port: Option<u16>,
    bind: Option<String>,
    backends: Vec<String>,
    config: Option<PathBuf>,
) -> Result<ExitCode> {
    let file = config::load(config.as_deref())?;
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
    };
    recached_proxy::run(opts).map_err(|e| format!("proxy: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
