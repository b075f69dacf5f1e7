//! The engine's listening sockets: a plain and a TLS set, one listener per `bind` address
//! (Redis's `server.ipfd` and `server.tlsfd`).
//!
//! They are shared, single-threaded, between the loop (which accepts on them) and the engine
//! (whose CONFIG SET `port`, `tls-port` and `bind` re-bind them, `engine_core::cmd::
//! config_listen`): an `Rc<RefCell<_>>`, borrowed only for one accept or one re-bind, never
//! across a command. A re-bind closes the old listeners (connections already accepted are
//! other sockets and stay) and registers the new ones with the loop's poll under their
//! tokens; an event still pending for an old token finds the new listener and `WouldBlock`.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use engine_core::cmd::config_listen::{BINDADDR_MAX, ListenFailed, Listeners};
use log::warn;
use mio::net::TcpListener;
use mio::{Interest, Registry, Token};
use recached_net::listen;

/// Listener `i` of the plain set has token `TOKEN_BASE + i`, of the TLS set `TOKEN_BASE +
/// BINDADDR_MAX + i`: above the bus peers' tokens (`crate::bus`), below the signals'.
pub const TOKEN_BASE: usize = usize::MAX - 8 - 2 * BINDADDR_MAX;

// Listener tokens stay clear of the signals' (`usize::MAX - 2`) and the bus peers'.
const _: () = assert!(TOKEN_BASE + 2 * BINDADDR_MAX < usize::MAX - 3);
const _: () = assert!(crate::bus::BUS_TOKEN_TOP < TOKEN_BASE);

/// Which set a token belongs to (`Some(tls)`), if it is a listener's.
pub fn kind_of(token: Token) -> Option<bool> {
    match token.0.checked_sub(TOKEN_BASE)? {
        i if i < BINDADDR_MAX => Some(false),
        i if i < 2 * BINDADDR_MAX => Some(true),
        _ => None,
    }
}

/// Both sets and what re-binding them needs.
pub struct ListenSet {
    registry: Registry,
    plain: Vec<TcpListener>,
    tls: Vec<TcpListener>,
    /// The TLS settings; `None`: TLS was not configured at start.
    pub tls_config: Option<Arc<rustls::ServerConfig>>,
}

impl ListenSet {
    pub fn new(registry: Registry, tls_config: Option<Arc<rustls::ServerConfig>>) -> Self {
        ListenSet {
            registry,
            plain: Vec::new(),
            tls: Vec::new(),
            tls_config,
        }
    }

    /// The start: the plain set on `port` unless it is 0 with TLS on (Redis's `port 0`: TLS
    /// only; otherwise 0 picks a free port), the TLS set on `tls_port` if TLS is configured.
    /// Returns the two ports bound (0: none). Errors: an address cannot be bound, or none
    /// is (Redis: "Configured to not listen anywhere, exiting.").
    pub fn bind_at_start(
        &mut self,
        port: u16,
        tls_port: u16,
        bind: &[String],
    ) -> io::Result<(u16, u16)> {
        let tls = self.tls_config.is_some();
        let port = match port != 0 || !tls {
            true => self.listen(false, port, bind)?,
            false => 0,
        };
        let tls_port = match tls {
            true => self.listen(true, tls_port, bind)?,
            false => 0,
        };
        if self.plain.is_empty() && self.tls.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "Configured to not listen anywhere, exiting.",
            ));
        }
        Ok((port, tls_port))
    }

    /// The address of the first listener (the plain one, else the TLS one), for the log.
    pub fn first_addr(&self) -> Option<std::net::SocketAddr> {
        self.plain
            .iter()
            .chain(&self.tls)
            .find_map(|l| l.local_addr().ok())
    }

    /// The listeners of one set.
    pub fn of(&self, tls: bool) -> &[TcpListener] {
        if tls { &self.tls } else { &self.plain }
    }

    /// Closes set `tls`, then listens on `port` at every address of `bind` (none for port 0),
    /// as redis `changeListenPort`. Returns the port bound (the kernel's choice for 0 at
    /// start). Err: nothing of this set is left listening.
    pub fn listen(&mut self, tls: bool, port: u16, bind: &[String]) -> io::Result<u16> {
        let old = std::mem::take(if tls { &mut self.tls } else { &mut self.plain });
        for mut l in old {
            let _ = self.registry.deregister(&mut l);
        }
        if port == 0 {
            return Ok(0);
        }
        let (mut new, skipped) = listen::bind_all(bind, port)?;
        for e in skipped {
            warn!("Warning: {e}");
        }
        let base = TOKEN_BASE + if tls { BINDADDR_MAX } else { 0 };
        for (i, l) in new.iter_mut().enumerate() {
            self.registry
                .register(l, Token(base + i), Interest::READABLE)?;
        }
        let bound = new
            .first()
            .map_or(Ok(port), |l| l.local_addr().map(|a| a.port()))?;
        *(if tls { &mut self.tls } else { &mut self.plain }) = new;
        Ok(bound)
    }
}

/// The engine's handle on the shared set ([`Listeners`]).
pub struct Shared(pub Rc<RefCell<ListenSet>>);

impl Listeners for Shared {
    fn listen(&mut self, tls: bool, port: u16, bind: &[String]) -> Result<(), ListenFailed> {
        let Ok(mut set) = self.0.try_borrow_mut() else {
            return Err(ListenFailed);
        };
        // Redis's log line; CONFIG SET's error says "Check server logs."
        set.listen(tls, port, bind).map(|_| ()).map_err(|e| {
            warn!("Warning: {e}");
            ListenFailed
        })
    }

    fn tls_configured(&self) -> bool {
        self.0.try_borrow().is_ok_and(|s| s.tls_config.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_do_not_overlap() {
        assert_eq!(kind_of(Token(TOKEN_BASE)), Some(false));
        assert_eq!(kind_of(Token(TOKEN_BASE + BINDADDR_MAX)), Some(true));
        assert_eq!(kind_of(Token(TOKEN_BASE + 2 * BINDADDR_MAX)), None);
        assert_eq!(kind_of(Token(TOKEN_BASE - 1)), None);
    }
}
