//! The recached proxy: routes each command by key to one of N RESP backends (recached
//! engines or plain redis-servers), so clients see one server. (The WebSocket fan-out, the
//! other relay, is the crate beside this one: `recached-fanout`, folder `proxy/fanout`.)
//!
//! ```text
//!  clients ──► listener ──► Client (parser, reply slots) ──route──► Backend i (one shared,
//!                ▲                       │                            pipelined connection)
//!                │                       └─ blocking, WATCH/MULTI, ──► Dedicated (the client's
//!                │                          SUBSCRIBE                  own connection to i)
//!                └──── replies, in each client's request order ◄──────┘  FIFO per connection
//! ```
//!
//! # Layout
//!
//! - [`slots`]: the slot table (slot → instance) every routing decision reads; starts as
//!   the slot map over `--backends`, changed by redirects and `CLUSTER SLOTS`.
//! - `follow`: following slot moves, for both loops: the redirect decisions and bounds,
//!   the `CLUSTER SLOTS` refresh's timing, instances learned at run time. I/O-free state
//!   plus a trait each loop implements for its links.
//! - `redirect`: the redirect and `CLUSTER SLOTS` parsers, and the RESP loop's side of
//!   `follow` (its shared links).
//! - [`route`]: what to do with one request (forward by key, split, fan out, answer locally,
//!   use a dedicated connection, refuse with `-ERR`), from the shared command table. Pure.
//! - [`connection`]: what the proxy answers about the connection itself (HELLO, CLIENT, its
//!   own INFO sections), for `route`. Pure.
//! - [`split`]: splitting MGET/MSET/DEL/UNLINK/EXISTS/TOUCH by instance and merging replies
//!   in key order; SCAN cursor encoding. Pure.
//! - [`tx`]: WATCH / MULTI / EXEC / DISCARD / UNWATCH on one instance. Pure.
//! - [`pubsub`]: a client's subscriptions, (un)subscribe requests per instance, the
//!   confirmations the proxy writes. Pure.
//! - [`clients`]: CLIENT LIST / INFO / KILL over the proxy's own clients (parsing, lines).
//!   Pure.
//! - [`auth`]: the clients' `requirepass`/ACL users (engine-core's rules) and the internal
//!   credential on every instance connection.
//! - `client`: a client connection and its queue of reply slots (ordering under pipelining).
//! - `backend`: a shared backend connection, its in-flight FIFO and reconnect/backoff states;
//!   `Wire`, the socket buffers it shares with dedicated connections.
//! - `dedicated`: a client's own connection to one instance (blocking commands,
//!   transactions, pub/sub), its limits, and the lane rule that keeps execution in order.
//! - `event_loop`: the single-threaded mio loop tying them together: accept, read, write,
//!   timers and the connection slabs.
//! - `exec`: what one parsed request does: auth gate, route plan, then forwarding,
//!   split/fan-out, local replies, or the transaction / pub/sub / blocking handoffs.
//! - [`memcached`]: the memcached text/meta protocol port (`memcached_port`), its own loop
//!   on a thread of the proxy, items stored as the Redis strings of the same keys
//!   (docs/memcached.md).
//! - [`tls`]: the TLS client port (the engine's rustls driver) and [`tls::ProxyLimits`],
//!   the Redis-named limits on the proxy's own clients.
//!
//! # Behaviour worth knowing
//!
//! - Unlike twemproxy, a command the proxy cannot route gets an `-ERR` naming it and the
//!   connection stays open.
//! - Multi-key commands run when all their keys live on one instance (hash tags make that
//!   possible), else `-CROSSSLOT Keys in request don't hash to the same slot` (MGET, MSET,
//!   DEL, UNLINK, EXISTS, TOUCH are split instead).
//! - Blocking commands, transactions and subscriptions use a dedicated connection per
//!   (client, instance), kept for the client's life and closed with it; at most
//!   64 per client and 1024 in all (`-ERR` beyond). Transactions run on one instance: a
//!   command for another gets `-CROSSSLOT` and EXEC then answers `-EXECABORT`.
//!   Subscription counts are the client's channels plus patterns through the proxy.
//! - An instance that is down makes requests for its keys fail fast with
//!   `-ERR instance <i> (<host:port>) is unavailable`; other instances keep serving and the
//!   proxy reconnects by itself (100 ms backoff doubling to 1 s).
//! - RESP2 and RESP3 (`HELLO 3`): a RESP3 client's requests use a second, RESP3 connection
//!   per instance (opened by the first RESP3 client), so replies keep their RESP3 types;
//!   pub/sub messages reach it as push frames. The proxy presents database 0 only.
//! - A protocol error from a client gets Redis's exact `-ERR Protocol error: …` text, then the
//!   connection is closed after the replies before it are sent.
//! - Slots may move while the proxy runs: it follows `-MOVED` (table updated, request sent
//!   again to the new owner, `CLUSTER SLOTS` refresh), `-ASK` (`ASKING` + the request on
//!   the named node) and `-TRYAGAIN` (retried after 10 ms) itself, at most 5 redirects and
//!   100 retries per request, so clients see only the final reply, in order. An MGET, MSET,
//!   DEL, UNLINK, EXISTS or TOUCH over several slots that an engine refuses while one of
//!   them moves (`-CROSSSLOT`, `-TRYAGAIN`) is sent again per slot and the replies merged
//!   (`split::per_slot`); one slot's request refused `-TRYAGAIN` (its keys on both sides of
//!   the move), per key (`split::per_key`). A node it did not know becomes an instance without a restart; one
//!   that owns no slot any more is left out of fan-outs. Followed on the shared links (single-key and forwarded requests,
//!   scripts, each part of a split command) and by the memcached port (its own table,
//!   `memcached::event_loop::follow`); not on dedicated connections (blocking commands,
//!   transactions, subscriptions): there the node's error is passed on (docs/cluster.md,
//!   "Through the proxy").

pub mod auth;
mod backend;
mod blockmove;
mod client;
pub mod clients;
pub mod connection;
mod coord;
mod dedicated;
mod event_loop;
mod exec;
mod follow;
mod latency;
pub mod memcached;
pub mod pubsub;
mod redirect;
pub mod route;
pub mod slots;
pub mod split;
mod spread;
pub mod tls;
pub mod tx;
mod txmove;
mod txshared;

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use recached_net::listen::resolve;

/// Everything `recached proxy` needs.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// TCP port (`--port`); 0 picks a free port (logged), unless a TLS port is set: then 0
    /// means TLS only (Redis `port 0`).
    pub port: u16,
    /// Listen address (`--bind`), default 127.0.0.1.
    pub bind: String,
    /// Backends as `host:port`, in instance order (instance i = backends[i]); instances
    /// learned from the cluster at run time come after them (`redirect`).
    pub backends: Vec<String>,
    /// The TLS client port and its certificate files; port 0 = none.
    pub tls: tls::TlsOptions,
    /// Limits on the proxy's clients (Redis names and defaults).
    pub limits: tls::ProxyLimits,
    /// Client authentication (`requirepass`, users) and the instances' credential ([`auth`]).
    pub auth: auth::ProxyAuth,
    /// The memcached protocol port ([`memcached`]); 0 = none (or TLS only, with
    /// `memcached_tls_port`).
    pub memcached_port: u16,
    /// The memcached port over TLS (`[tls] memcached_port`, `--memcached-tls-port`), with
    /// the certificate settings of `tls`; 0 = none.
    pub memcached_tls_port: u16,
    /// `memcached_user`: the ACL user (of `auth.acl`) every memcached request runs as;
    /// `None` = no permission check (trusted networks; docs/memcached.md).
    pub memcached_user: Option<String>,
}

/// Runs the proxy in the foreground until SIGTERM/SIGINT, then returns `Ok(())`.
///
/// Errors: no backends, an address that does not resolve, or the listening port is taken.
pub fn run(opts: ProxyOptions) -> io::Result<()> {
    recached_net::signal::until_signalled(|shutdown| run_until(opts, shutdown))
}

/// Runs the proxy until `shutdown` is set (checked at least every 100 ms). For embedding
/// and tests; [`run`] sets the flag from SIGTERM/SIGINT.
pub fn run_until(opts: ProxyOptions, shutdown: Arc<AtomicBool>) -> io::Result<()> {
    if opts.backends.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the proxy needs at least one backend (--backends HOST:PORT,…)",
        ));
    }
    let (listen, tls) = recached_net::listen::role_addrs(&opts.bind, opts.port, &opts.tls)?;
    let backends = opts
        .backends
        .iter()
        .map(|b| Ok((b.clone(), resolve(b)?)))
        .collect::<io::Result<Vec<_>>>()?;
    let memcached_totals = memcached::stats::Shared::default();
    let memcached = if opts.memcached_port != 0 || opts.memcached_tls_port != 0 {
        let (handle, bound) = start_memcached(&opts, &backends, &memcached_totals, &shutdown)?;
        if let Some(addr) = bound.plain {
            log::info!("proxy: memcached protocol listening on {addr}");
        }
        if let Some(addr) = bound.tls {
            log::info!("proxy: memcached protocol over TLS listening on {addr}");
        }
        Some(handle)
    } else {
        None
    };
    let mut proxy = event_loop::Proxy::new(listen, tls, backends, opts.limits.clone(), shutdown)?;
    proxy.set_auth(&opts.auth)?;
    if memcached.is_some() {
        proxy.set_memcached_totals(memcached_totals);
    }
    if let Some(addr) = proxy.tls_addr() {
        log::info!("proxy: TLS listening on {addr}");
    }
    log::info!(
        "proxy: listening on {}{} in front of {} instance(s): {}",
        proxy.local_addr(),
        if listen.is_none() { " (TLS only)" } else { "" },
        opts.backends.len(),
        opts.backends.join(", ")
    );
    let result = proxy.run();
    if let Some(handle) = memcached {
        match handle.join() {
            Ok(Err(e)) => log::warn!("proxy: memcached port: {e}"),
            Err(_) => log::warn!("proxy: memcached port: its thread panicked"),
            Ok(Ok(())) => {}
        }
    }
    result
}

/// Starts the memcached port's thread: its listeners (plain unless `memcached_port` is 0,
/// TLS with the proxy's certificates when `memcached_tls_port` is set) and its ACL user.
fn start_memcached(
    opts: &ProxyOptions,
    backends: &[(String, std::net::SocketAddr)],
    totals: &memcached::stats::Shared,
    shutdown: &Arc<AtomicBool>,
) -> io::Result<(std::thread::JoinHandle<io::Result<()>>, memcached::Bound)> {
    let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
    let listen = (opts.memcached_port != 0)
        .then(|| resolve(&recached_net_host_port(&opts.bind, opts.memcached_port)))
        .transpose()?;
    let tls = if opts.memcached_tls_port != 0 {
        let t = tls::TlsOptions {
            port: opts.memcached_tls_port,
            ..opts.tls.clone()
        };
        let cfg = tls::server_config(&t)?;
        let addr = recached_net::listen::listen_addr(&opts.bind, opts.memcached_tls_port)?;
        Some((addr, cfg))
    } else {
        None
    };
    let gate = match &opts.memcached_user {
        None => {
            if opts.auth.acl.has_auth() {
                log::warn!(
                    "proxy: the memcached port has no memcached_user: memcached clients are not \
                     subject to requirepass or ACL users (bind it to a trusted network)"
                );
            }
            None
        }
        Some(user) => {
            let acl = engine_core::acl::Acl::from_config(&opts.auth.acl).map_err(invalid)?;
            let auth = acl.login_as(user.as_bytes()).ok_or_else(|| {
                invalid(format!(
                    "memcached_user {user:?} is not an ACL user that is on (requirepass's \
                     \"default\" or one of [[users]])"
                ))
            })?;
            Some(memcached::acl::Gate { acl, auth })
        }
    };
    let (bound, handle) = memcached::spawn(
        memcached::Options {
            listen,
            tls,
            gate,
            totals: totals.clone(),
            backends: backends.to_vec(),
            login: opts.auth.login_request(),
            item_max: memcached::ITEM_SIZE_MAX,
            maxclients: opts.limits.maxclients,
        },
        shutdown.clone(),
    )?;
    Ok((handle, bound))
}

/// `host:port`, bracketing an IPv6 host.
fn recached_net_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
