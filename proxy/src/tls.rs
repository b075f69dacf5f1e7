//! TLS on the proxy's client port, and the proxy's client limits.
//!
//! The rustls driver is `recached-net`'s (shared with the engine and the fan-out): one
//! socket read per batch decrypted from memory, plaintext handed to rustls only while its
//! encrypted backlog is small. This module adapts it to the proxy's client buffers
//! ([`crate::client::Client`]). Backend connections to the engines stay plain TCP: they are
//! on loopback or a trusted network (docs/security-tls.md).
//!
//! [`ProxyLimits`] carries the Redis-named limits the proxy enforces on its own clients:
//! `maxclients`, `client-query-buffer-limit`, `proto-max-bulk-len`, the pub/sub class of
//! `client-output-buffer-limit` (a subscriber that does not read its messages), and
//! `timeout` (idle clients). Normal clients are bounded by backpressure instead
//! (`event_loop`: parsing stops while 16 MB of replies are unsent), plus the normal class's
//! limits if an operator sets them.

pub use recached_net::tls::{
    AuthClients, PlainSink, SCRATCH_LEN, TlsConn, TlsOptions, TlsRead, server_config,
};

use engine_core::cmd::server::OutputLimits;

/// The proxy's limits for its clients (Redis names and defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyLimits {
    /// `maxclients`: one more client gets `-ERR max number of clients reached` and is closed.
    pub maxclients: usize,
    /// `client-query-buffer-limit`, bytes of unparsed input per client (Redis 1gb).
    pub client_query_buffer_limit: usize,
    /// `proto-max-bulk-len`, bytes: the largest bulk string a request may carry (Redis 512mb).
    pub proto_max_bulk_len: usize,
    /// `client-output-buffer-limit` (normal and pubsub classes apply).
    pub client_output_buffer_limit: OutputLimits,
    /// `timeout`, seconds without a request after which an idle client is closed; 0 = never.
    /// Subscribed clients and clients waiting on a blocking command are exempt.
    pub timeout: u64,
    /// The instances are cluster engines that forward every PUBLISH to each other (the
    /// config's `cluster`, docs/cluster.md "Pub/sub"): a pattern subscribed on every
    /// instance then gets each message from every instance, and the proxy relays it only
    /// from the channel's instance ([`crate::dedicated`]).
    pub cluster_publish: bool,
    /// `databases`: how many databases SELECT may choose (the engines' setting, Redis's
    /// default 16).
    pub databases: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            maxclients: 10_000,
            client_query_buffer_limit: 1 << 30,
            proto_max_bulk_len: 512 << 20,
            // Redis's defaults; the pub/sub hard limit is the one `crate::dedicated` names.
            databases: 16,
            client_output_buffer_limit: OutputLimits {
                pubsub: engine_core::cmd::server::OutputLimit {
                    hard: crate::dedicated::PUBSUB_OUTPUT_LIMIT as u64,
                    ..OutputLimits::default().pubsub
                },
                ..OutputLimits::default()
            },
            timeout: 0,
            cluster_publish: false,
        }
    }
}

/// A client's read buffer as a [`PlainSink`]: `rbuf[rstart..rend]` is unparsed input, the
/// buffer is grown (or compacted) like [`crate::client::Client::reserve_read`], up to the
/// query buffer limit.
pub(crate) struct ClientBuf<'a> {
    pub rbuf: &'a mut Vec<u8>,
    pub rstart: &'a mut usize,
    pub rend: &'a mut usize,
    pub limit: usize,
}

impl PlainSink for ClientBuf<'_> {
    fn space(&mut self) -> Option<&mut [u8]> {
        if *self.rend - *self.rstart > self.limit {
            return None;
        }
        crate::client::reserve(self.rbuf, self.rstart, self.rend);
        Some(&mut self.rbuf[*self.rend..])
    }

    fn filled(&mut self, n: usize) {
        *self.rend += n;
    }
}
