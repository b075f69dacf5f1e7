//! The recached engine process: one single-threaded mio loop around `engine-core`.
//! (Skeleton: the loop is to be written.)
use std::path::PathBuf;

/// Everything `recached server` needs; the `recached` binary fills it from flags and the
/// TOML config (config parsing lives in the binary, not here).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// TCP port (`--port`); 0 picks a free port (the chosen port is logged).
    pub port: u16,
    /// Listen address (`--bind`), default 127.0.0.1.
    pub bind: String,
    /// The config file the settings came from, if any (INFO `config_file`).
    pub config_file: Option<PathBuf>,
    /// Engine settings (CONFIG GET/SET names).
    pub engine: engine_core::Config,
}

/// Runs the engine in the foreground until SIGTERM/SIGINT or SHUTDOWN.
pub fn run(opts: ServerOptions) -> std::io::Result<()> {
    let _ = opts;
    todo!()
}
