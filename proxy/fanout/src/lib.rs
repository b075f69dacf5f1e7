//! The WebSocket fan-out (`recached fanout`): relays every engine's keychange feed to browser
//! replicas, filtered by the key prefixes each browser asked for and may see.
//!
//! ```text
//!  engine 0 ──FEED SUBSCRIBE──► Link 0 ─┐ ring of recent effects (resume)
//!  engine 1 ──FEED SUBSCRIBE──► Link 1 ─┤
//!                 ▲ FEED SNAPSHOT id p… │ effects, snapshot entries (per instance, in seq order)
//!                 │                     ▼
//!                 └──────────── event loop (one mio thread) ──► Browser k: prefixes ∩ allowed,
//!                                  ▲   per-instance state, bounded queue ──► WebSocket /ws
//!                  HTTP GET / , /recached.js, /recached.wasm, /demo.*  (same port)
//! ```
//!
//! The links are connected (subscribed) only while at least one browser is subscribed, and
//! for `feed_linger_ms` after the last one left: with no browser the engines compute no
//! effects at all (server.rs, *Idle feeds*).
//!
//! # Layout
//!
//! - [`protocol`]: the browser wire protocol (JSON text frames; docs/browser-protocol.md):
//!   parsing browser messages, building fan-out messages, prefix rules. Pure.
//! - [`feed`]: one engine's feed link (the RESP side: `FEED SUBSCRIBE`, `FEED SNAPSHOT`,
//!   docs/feed.md), its messages, effect scopes from the command table, the ring.
//! - `http`: static assets (compiled in from `recached-www`, the crate that owns them) and
//!   the upgrade request on the same port.
//! - `server`: the mio loop, browsers, snapshots, resume, resync, heartbeats.
//! - [`topology`]: the cluster's nodes and slot table (`CLUSTER NODES`, read by a watcher
//!   thread): engines that join or leave, slots that move (server/cluster.rs).
//! - `tls`: the connection type, plain TCP or TLS ([`FanoutOptions::tls`]): HTTPS and
//!   wss:// on a TLS port, alongside the plain port or instead of it (`port` 0 with a TLS
//!   port, as Redis's `port 0`). Same pages, protocol, tokens and limits on both.
//!
//! # Dependencies
//!
//! `resp` (the feed's RESP), `engine-core` (the command table and its key extractor, for
//! effect scopes), `recached-net` (listeners, the TLS driver, the shutdown flag) and
//! `recached-www` (the web assets). It sits beside the proxy (`proxy/`, both are relays)
//! without depending on it.
//!
//! # Guarantees (DESIGN.md, "Keychange feed and browser replicas")
//!
//! Per instance a browser gets `must-refetch`, then a snapshot of its prefixes valid at
//! sequence number S (`snapshot`, `entry`…, `snapshot-end`), then every later effect touching
//! its keys in order (`keychange`), then `up-to-date`. A gap anywhere — an engine's
//! `overflow`, a sequence gap, an engine restart (new run id), a reconnect of the feed that
//! lost effects, the browser's own queue overflowing, an effect touching keys both inside and
//! outside its prefixes — restarts that sequence for the browsers concerned, never silently
//! skips. A browser that reconnects with `resume: [{instance, run, seq}]` is replayed the
//! effects after `seq` from the ring when the ring still holds all of them, else it gets
//! `must-refetch` and a fresh snapshot.
//!
//! # Access control
//!
//! With a tokens file (TOML, `[tokens]` table: `"<token>" = ["prefix", …]`) a browser must
//! present a known token in its `subscribe`, and sees only keys under that token's prefixes
//! whatever it asks for (the intersection, [`protocol::intersect`]); all access is read-only
//! (the protocol has no write message). Without tokens only loopback peers whose `Origin` (if
//! any) is a loopback host may open the WebSocket.

pub mod feed;
mod http;
pub mod protocol;
mod server;
mod tls;
pub mod topology;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use recached_net::listen::resolve;

/// Everything `recached fanout` needs.
#[derive(Clone, Debug)]
pub struct FanoutOptions {
    /// HTTP + WebSocket port (`--port`, default 6480); 0 picks a free port (logged), or,
    /// when a TLS port is set, means no plain port (TLS only).
    pub port: u16,
    /// Listen address, default 127.0.0.1.
    pub bind: String,
    /// Engines as `host:port`, in instance order (the same list as the proxy's backends).
    pub engines: Vec<String>,
    /// TOML tokens file; `None` = no tokens, loopback origins only.
    pub tokens: Option<PathBuf>,
    /// The module file served at `/recached.wasm` (default: `RECACHED_WASM`, else the module
    /// compiled into the binary, else scripts/build-wasm.sh's output).
    pub wasm: Option<PathBuf>,
    /// Heartbeat period, ms: a ping and a `heartbeat` message; a browser silent for 2.5
    /// periods is closed.
    pub heartbeat_ms: u64,
    /// Largest message a browser may send, bytes (WebSocket frames and messages).
    pub max_message: usize,
    /// Most bytes of keychanges queued for one browser before it is resynced.
    pub queue_bytes: usize,
    /// Most bytes of snapshot data queued for one browser before it is closed.
    pub snapshot_bytes: usize,
    /// Most bytes queued for all browsers together (keychanges and snapshot data); past it
    /// the largest queues are dropped and their browsers resynced.
    pub total_queue_bytes: usize,
    /// Pacing of broadcast flush rounds, µs: when more than 32 browsers have output and most
    /// were written in the previous round too, they are written at most once per this
    /// period, so keychanges arriving meanwhile share one write per browser (0 = every loop
    /// iteration). See server/queue.rs, *Pacing*.
    pub flush_delay_us: u64,
    /// Most browser and HTTP connections at once (both ports together); more are closed on
    /// accept.
    pub max_connections: usize,
    /// How long the feed links stay subscribed after the last browser left, ms (0 = leave
    /// at once). While no browser is subscribed the fan-out follows no feed, so the engines
    /// compute no effects; a browser that reconnects within this time resumes from the ring
    /// without a refetch. See server.rs, *Idle feeds*.
    pub feed_linger_ms: u64,
    /// HTTPS + wss:// (`--tls-port`, `--tls-cert-file`, …, the engines' names); `port` 0 =
    /// none. Client certificates are checked as on the engines (`tls_auth_clients`).
    pub tls: recached_net::tls::TlsOptions,
}

impl Default for FanoutOptions {
    fn default() -> Self {
        FanoutOptions {
            port: 6480,
            bind: "127.0.0.1".into(),
            engines: Vec::new(),
            tokens: None,
            wasm: None,
            heartbeat_ms: 15_000,
            max_message: 64 * 1024,
            queue_bytes: 8 << 20,
            snapshot_bytes: 512 << 20,
            total_queue_bytes: 1 << 30,
            flush_delay_us: 2_000,
            max_connections: 16_000,
            feed_linger_ms: 30_000,
            tls: recached_net::tls::TlsOptions::default(),
        }
    }
}

/// Token → allowed prefixes.
pub type Tokens = BTreeMap<String, Vec<Vec<u8>>>;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: BTreeMap<String, Vec<String>>,
}

/// Reads a tokens file: `[tokens]` then `"<token>" = ["prefix", …]`.
pub fn load_tokens(path: &std::path::Path) -> io::Result<Tokens> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    parse_tokens(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Parses the text of a tokens file.
pub fn parse_tokens(text: &str) -> Result<Tokens, String> {
    let f: TokensFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out = Tokens::new();
    for (token, prefixes) in f.tokens {
        if token.is_empty() {
            return Err("a token may not be empty".into());
        }
        let p: Vec<Vec<u8>> = prefixes.into_iter().map(String::into_bytes).collect();
        out.insert(token, protocol::normalize(&p));
    }
    Ok(out)
}

/// Runs the fan-out in the foreground until SIGTERM/SIGINT.
pub fn run_fanout(opts: FanoutOptions) -> io::Result<()> {
    recached_net::signal::until_signalled(|shutdown| run_fanout_until(opts, shutdown))
}

/// Runs the fan-out until `shutdown` is set (checked at least every 100 ms).
pub fn run_fanout_until(opts: FanoutOptions, shutdown: Arc<AtomicBool>) -> io::Result<()> {
    let server = bind_fanout(opts, shutdown)?;
    server.run()
}

/// A bound fan-out, not yet running (tests read the port first).
pub struct Fanout(server::Server);

impl Fanout {
    /// The plain port's address (the TLS port's when only TLS is served).
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }
    /// The TLS port's address, if one is served.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.0.tls_local_addr()
    }
    pub fn run(mut self) -> io::Result<()> {
        self.0.run()
    }
}

/// Binds the listener and resolves the engines.
pub fn bind_fanout(opts: FanoutOptions, shutdown: Arc<AtomicBool>) -> io::Result<Fanout> {
    if opts.engines.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the fan-out needs at least one engine (--engines HOST:PORT,…)",
        ));
    }
    let tokens = match &opts.tokens {
        Some(p) => Some(load_tokens(p)?),
        None => None,
    };
    // Redis's `port 0`: with a TLS port, no plain listener at all.
    let (listen, tls) = recached_net::listen::role_addrs(&opts.bind, opts.port, &opts.tls)?;
    let engines = opts
        .engines
        .iter()
        .map(|e| resolve(e))
        .collect::<io::Result<Vec<_>>>()?;
    let wasm = http::WasmModule::choose(opts.wasm.clone());
    let plain = listen.is_some();
    let server = server::Server::new(listen, tls, engines, tokens, wasm, &opts, shutdown)?;
    let mut urls = Vec::new();
    if plain {
        urls.push(format!("http://{}/", server.local_addr()));
    }
    if let Some(a) = server.tls_local_addr() {
        urls.push(format!("https://{a}/"));
    }
    log::info!(
        "fanout: {} (WebSocket /ws) relaying {} engine(s): {}{}",
        urls.join(" and "),
        opts.engines.len(),
        opts.engines.join(", "),
        if opts.tokens.is_some() {
            " (tokens required)"
        } else {
            " (no tokens: loopback origins only)"
        }
    );
    Ok(Fanout(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file() {
        let t = parse_tokens("[tokens]\n\"pub\" = [\"public:\", \"public:x\"]\nall = [\"*\"]\n")
            .unwrap();
        assert_eq!(t["pub"], vec![b"public:".to_vec()]);
        assert_eq!(t["all"], vec![Vec::<u8>::new()]);
        assert!(parse_tokens("[tokens]\n\"\" = []\n").is_err());
        assert!(parse_tokens("tokens = 1\n").is_err());
        assert!(parse_tokens("[tokens]\na = [\"x\"]\n[other]\n").is_err());
    }
}
