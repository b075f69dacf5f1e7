//! The memcached text and meta protocol on the proxy (`memcached_port`, issue 22): memcached
//! clients use the fleet unchanged, and a memcached item is the Redis string of the same key.
//!
//! ```text
//!  memcached clients ──► listener ──► Conn (input, parse::parse) ──exec::plan──► link i
//!                                         ▲                                        │
//!                                         └──── exec::render, in request order ◄───┘
//! ```
//!
//! # Layout
//!
//! - [`parse`]: bytes → [`parse::Request`], memcached 1.6's tokens, limits and errors. Pure.
//! - [`meta`]: the meta commands' parser. Pure.
//! - [`exec`]: a request → RESP requests per instance (a [`exec::Job`]), and the engines'
//!   replies → memcached's reply bytes; the item/companion key mapping and expiry rules. Pure.
//! - [`scripts`]: the Lua scripts that make each write one atomic engine-side step.
//! - [`stats`]: `stats` from the port's counters and the engines' INFO; [`stats::Totals`],
//!   the figures the proxy's INFO `# Memcached` and the fleet's metrics report.
//! - [`acl`]: `memcached_user`: each request checked as the RESP commands it runs. Pure.
//! - `event_loop`: the mio loop on its own thread, with its own link to each engine; the
//!   plain and TLS listeners (`memcached_port`, `[tls] memcached_port`). Its `follow`: the
//!   port's slot table, following `-MOVED`/`-ASK`/`-TRYAGAIN`, nodes learned at run time.
//!
//! # Why a thread of its own
//!
//! The port shares nothing with the RESP side but the engines: its requests never join a
//! RESP client's transaction, subscription or blocking read, so it runs its own small loop
//! (one more connection per engine) instead of adding a second protocol to every state of
//! the RESP loop. Keys route by a slot table of the same kind ([`crate::slots::Slots`]), kept
//! by this loop (`event_loop::follow` says why it is not the RESP loop's).

pub mod acl;
pub mod exec;
pub mod meta;
pub mod parse;
pub mod scripts;
pub mod stats;

mod event_loop;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

pub use event_loop::Options;

/// memcached's default `item_size_max` (1 MB).
pub const ITEM_SIZE_MAX: usize = 1 << 20;

/// The bound addresses of a started port: plain and TLS (either may be absent, not both).
pub struct Bound {
    pub plain: Option<SocketAddr>,
    pub tls: Option<SocketAddr>,
}

/// Binds the memcached port(s) and runs the loop on a new thread until `shutdown` is set.
/// Returns the bound addresses and the thread.
pub fn spawn(
    opts: Options,
    shutdown: Arc<AtomicBool>,
) -> io::Result<(Bound, JoinHandle<io::Result<()>>)> {
    let mut lp = event_loop::Loop::new(opts, shutdown)?;
    let bound = Bound {
        plain: lp.local_addr(),
        tls: lp.tls_addr(),
    };
    let handle = std::thread::Builder::new()
        .name("memcached".into())
        .spawn(move || lp.run())?;
    Ok((bound, handle))
}
