//! `recached fanout`: the WebSocket fan-out to browser replicas, in the foreground
//! (`recached_fanout`; wire protocol in docs/browser-protocol.md).
//!
//! Settings come from flags, else the config file (`bind`, `fanout_port`, `fanout_tokens`,
//! `[tls]` with its `fanout_port`), else the defaults. `recached start` runs it with
//! `--engines` set to the fleet's topology and `--config`, so `[tls] fanout_port` adds an
//! HTTPS + wss:// port beside the plain one. The TLS flags are the engines' and the proxy's
//! (`--tls-port`, `--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file`,
//! `--tls-auth-clients`); `--port 0 --tls-port P` serves TLS only (docs/security-tls.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::{Result, config};

/// Flags of `recached fanout`.
#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    /// HTTP + WebSocket port; default: the config's `fanout_port`, else its `proxy_port` + 100
    /// (6480). 0 picks a free port, or with a TLS port means TLS only.
    #[arg(long)]
    pub port: Option<u16>,
    /// Listen address; default: the config's `bind` (127.0.0.1).
    #[arg(long)]
    pub bind: Option<String>,
    /// Engines as `host:port`, comma separated, in instance order (the proxy's backends).
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    pub engines: Vec<String>,
    /// TOML config file (`bind`, `fanout_port`, `fanout_tokens`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Tokens file (`[tokens]` table: "token" = ["prefix", …]); default: the config's
    /// `fanout_tokens`; none = loopback origins only.
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// The replica module served at /recached.wasm (default: scripts/build-wasm.sh's output,
    /// or $RECACHED_WASM).
    #[arg(long)]
    pub wasm: Option<PathBuf>,
    /// Heartbeat period in milliseconds (ping + position message; silent browsers are closed
    /// after 2.5 periods).
    #[arg(long, default_value_t = 15_000)]
    pub heartbeat_ms: u64,
    /// Most bytes of keychanges queued for one browser before it is resynced.
    #[arg(long)]
    pub queue_bytes: Option<usize>,
    /// HTTPS + wss:// (default: the config's `[tls]`, with `[tls] fanout_port`).
    #[command(flatten)]
    pub tls: crate::tls_limits::TlsArgs,
    /// Most bytes queued for all browsers together; past it the largest queues are resynced.
    #[arg(long)]
    pub total_queue_bytes: Option<usize>,
    /// Broadcast pacing: when more than 32 browsers have output and most were written in the
    /// previous round, write them at most once per this many microseconds, so keychanges
    /// arriving meanwhile share one write (default 2000; 0 = every loop iteration).
    #[arg(long)]
    pub flush_delay_us: Option<u64>,
    /// How long the fan-out stays subscribed to the engines' keychange feeds after the last
    /// browser left, in milliseconds (default 30000; 0 = leave at once). With no browser it
    /// follows no feed, so the engines compute no effects.
    #[arg(long)]
    pub feed_linger_ms: Option<u64>,
}

pub fn run(args: FanoutArgs) -> Result<ExitCode> {
    let file = config::load(args.config.as_deref())?;
    let defaults = recached_fanout::FanoutOptions::default();
    let tokens = args
        .tokens
        .or_else(|| (!file.fanout_tokens.is_empty()).then(|| PathBuf::from(&file.fanout_tokens)));
    let tls = crate::tls_limits::tls_options(&file, &args.tls, file.tls.fanout_port)
        .map_err(|e| format!("fanout: {e}"))?;
    let opts = recached_fanout::FanoutOptions {
        port: args
            .port
            .or(file.fanout_port)
            .unwrap_or(file.proxy_port.wrapping_add(100)),
        bind: args.bind.unwrap_or(file.bind.clone()),
        engines: args.engines.iter().map(|e| e.trim().to_string()).collect(),
        tokens,
        wasm: args.wasm,
        heartbeat_ms: args.heartbeat_ms,
        queue_bytes: args.queue_bytes.unwrap_or(defaults.queue_bytes),
        tls,
        total_queue_bytes: args.total_queue_bytes.unwrap_or(defaults.total_queue_bytes),
        flush_delay_us: args.flush_delay_us.unwrap_or(defaults.flush_delay_us),
        feed_linger_ms: args.feed_linger_ms.unwrap_or(defaults.feed_linger_ms),
        ..defaults
    };
    recached_fanout::run_fanout(opts).map_err(|e| format!("fanout: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
