//! Sockets shared by every recached server role: the engine (`recached-server`), the proxy
//! (`recached-proxy`) and the fan-out (`recached-fanout`). Each of these exists once, here,
//! so the roles cannot drift apart (a listen queue of 128 on one port and 511 on another, a
//! bind address that resolves differently per role, two copies of the TLS driver).
//!
//! # Layout
//!
//! - [`listen`]: listening sockets ([`listen::bind`], with the one listen queue
//!   [`listen::TCP_BACKLOG`]) and address resolution ([`listen::listen_addr`] for a bind
//!   address and a port, [`listen::resolve`] for a `host:port` peer,
//!   [`listen::connect`] for the blocking probes of the supervisor).
//! - [`tls`]: rustls driven by hand over non-blocking mio sockets, with the `tls_*` settings
//!   (Redis names) and the server configuration built from the certificate files.
//! - [`Slab`]: connection slots. A connection's mio token is its slot index, reused once the
//!   connection is gone; the `slab` crate, re-exported so every loop uses the same one.
//! - [`signal`]: a shutdown flag set by SIGTERM/SIGINT, for loops that poll a flag.
//!
//! Nothing here knows RESP, HTTP or the engine: callers own their buffers and protocols.

pub mod listen;
pub mod signal;
pub mod tls;

/// Connection slots: the key of an entry is the connection's mio `Token`. Keys of removed
/// entries are reused first, so tokens stay below the number of connections ever open at
/// once and the loops' reserved tokens at the top of the range are never reached.
pub use slab::Slab;
