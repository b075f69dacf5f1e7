//! The recached proxy: routes each command by key to one of N RESP backends.
//! (Skeleton: the loop is to be written.)

/// Everything `recached proxy` needs.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// TCP port (`--port`).
    pub port: u16,
    /// Listen address (`--bind`), default 127.0.0.1.
    pub bind: String,
    /// Backends as `host:port`, in instance order (instance i = backends[i]).
    pub backends: Vec<String>,
}

/// Runs the proxy in the foreground until SIGTERM/SIGINT.
pub fn run(opts: ProxyOptions) -> std::io::Result<()> {
    let _ = opts;
    todo!()
}
