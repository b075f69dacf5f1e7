//! Listening sockets and address resolution.
//!
//! Shapes: a bind address is an IP address or a host name without a port (`--bind`,
//! `127.0.0.1`, `::`, `localhost`); a peer is `host:port` (`[::1]:6400` for IPv6). Ports are
//! TCP port numbers; 0 asks the kernel for a free one (read it back with `local_addr`).
//! Resolution takes the first address the system resolver returns, as redis-server and
//! redis-cli do.
//!
//! Errors are `io::Error`s whose message names the address, since they end a role's start
//! and an operator reads them in the log: "bind address \"x\" resolves to nothing",
//! "x:1: no address found", "Could not bind 127.0.0.1:6400: Address already in use".

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use mio::net::TcpListener;

/// Listen queue of every listening socket (Redis `tcp-backlog` 511; the kernel caps it at
/// `net.core.somaxconn`). mio and std use 128, which a connection storm overflows whenever
/// the loop is descheduled for a few milliseconds: each dropped SYN costs its client a 1 s
/// retransmission.
pub const TCP_BACKLOG: i32 = 511;

/// A non-blocking listener on `addr` with the listen queue [`TCP_BACKLOG`]. mio sets
/// SO_REUSEADDR and close-on-exec (also on accepted sockets); `listen` is called again to
/// raise its queue of 128, which Linux allows on a listening socket.
///
/// Errors: the address cannot be bound (in use, not local, no permission).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    use nix::sys::socket::{Backlog, listen};
    let listener = TcpListener::bind(addr)?;
    let backlog = Backlog::new(TCP_BACKLOG).unwrap_or(Backlog::MAXCONN);
    listen(&listener, backlog).map_err(io::Error::from)?;
    Ok(listener)
}

/// [`bind`] on `bind` (an IP address or host name) and `port`, with the address in the
/// error: "Could not bind 127.0.0.1:6400: Address already in use" (redis-server's words).
pub fn bind_on(bind_addr: &str, port: u16) -> io::Result<TcpListener> {
    let addr = listen_addr(bind_addr, port)?;
    bind(addr).map_err(|e| io::Error::new(e.kind(), format!("Could not bind {addr}: {e}")))
}

/// Listeners on `port` at every address of a Redis `bind` list (redis `listenToPort`): an IP
/// address or host name (IPv6 when it holds a `:`, each such socket `IPV6_V6ONLY` so `*` and
/// `::*` share a port), `*` for every IPv4 address, `::*` for every IPv6 one, and a `-` prefix
/// for an optional address, skipped when the host does not have it. An address family the
/// host lacks is skipped too. Port 0 asks the kernel for one port, then binds the other
/// addresses to that same port.
///
/// Returns the listeners and the skipped addresses' errors (to log); Err: the first address
/// that could not be bound, as "Could not create server TCP listening socket 127.0.0.1:6400:
/// Address already in use" (redis-server's log line), with every listener of the call closed.
pub fn bind_all(addrs: &[String], port: u16) -> io::Result<(Vec<TcpListener>, Vec<io::Error>)> {
    use nix::errno::Errno;
    let mut port = port;
    let (mut bound, mut skipped) = (Vec::new(), Vec::new());
    for entry in addrs {
        let optional = entry.starts_with('-');
        let addr = entry.strip_prefix('-').unwrap_or(entry);
        let err = match bind_one(addr, port) {
            Ok(l) => {
                port = l.local_addr()?.port();
                bound.push(l);
                continue;
            }
            Err(e) => e,
        };
        let errno = err.raw_os_error().map(Errno::from_raw);
        let skip = match errno {
            Some(Errno::EADDRNOTAVAIL) => optional,
            Some(
                Errno::ENOPROTOOPT
                | Errno::EPROTONOSUPPORT
                | Errno::ESOCKTNOSUPPORT
                | Errno::EPFNOSUPPORT
                | Errno::EAFNOSUPPORT,
            ) => true,
            _ => false,
        };
        let err = io::Error::new(
            err.kind(),
            format!("Could not create server TCP listening socket {addr}:{port}: {err}"),
        );
        if !skip {
            return Err(err);
        }
        skipped.push(err);
    }
    Ok((bound, skipped))
}

/// One listener of [`bind_all`] (redis `anetTcpServer`/`anetTcp6Server`).
fn bind_one(addr: &str, port: u16) -> io::Result<TcpListener> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, setsockopt, socket, sockopt,
    };
    // `[::1]` as the rest of recached writes IPv6 hosts.
    let addr = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr);
    let v6 = addr.contains(':');
    let sa = match addr {
        "*" => SocketAddr::from(([0u8; 4], port)),
        "::*" => SocketAddr::from(([0u16; 8], port)),
        _ => (addr, port)
            .to_socket_addrs()?
            .find(|a| a.is_ipv6() == v6)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address of that family"))?,
    };
    let family = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket(family, SockType::Stream, flags, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if v6 {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    nix::sys::socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(sa),
    )?;
    let backlog = Backlog::new(TCP_BACKLOG).unwrap_or(Backlog::MAXCONN);
    nix::sys::socket::listen(&fd, backlog)?;
    Ok(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// The addresses a server role (proxy, fan-out) listens on: the plain port, unless it is 0
/// while TLS is on (Redis's `port 0`: TLS only), and the TLS port with its rustls
/// configuration when TLS is enabled. Errors: an address that does not resolve, unreadable or
/// invalid certificate files.
#[allow(clippy::type_complexity)]
pub fn role_addrs(
    bind: &str,
    port: u16,
    tls: &crate::tls::TlsOptions,
) -> io::Result<(
    Option<SocketAddr>,
    Option<(SocketAddr, std::sync::Arc<rustls::ServerConfig>)>,
)> {
    let tls = if tls.enabled() {
        let cfg = crate::tls::server_config(tls)?;
        Some((listen_addr(bind, tls.port)?, cfg))
    } else {
        None
    };
    let plain = if port == 0 && tls.is_some() {
        None
    } else {
        Some(listen_addr(bind, port)?)
    };
    Ok((plain, tls))
}

/// The listeners of a server role from [`role_addrs`]: each bound ([`bind`]) and registered
/// for reads under its token (`tokens.0` plain, `tokens.1` TLS), the TLS one with its value
/// `T` (the rustls configuration). Errors name the TLS port: "TLS port 127.0.0.1:6443: Address
/// already in use".
#[allow(clippy::type_complexity)]
pub fn bind_role<T>(
    registry: &mio::Registry,
    plain: Option<SocketAddr>,
    tls: Option<(SocketAddr, T)>,
    tokens: (mio::Token, mio::Token),
) -> io::Result<(Option<TcpListener>, Option<(TcpListener, T)>)> {
    let bind_one = |addr: SocketAddr, token, what: &str| -> io::Result<TcpListener> {
        let mut l = bind(addr).map_err(|e| match what {
            "" => e,
            w => io::Error::new(e.kind(), format!("{w} {addr}: {e}")),
        })?;
        registry.register(&mut l, token, mio::Interest::READABLE)?;
        Ok(l)
    };
    let plain = plain.map(|a| bind_one(a, tokens.0, "")).transpose()?;
    let tls = tls
        .map(|(a, t)| Ok::<_, io::Error>((bind_one(a, tokens.1, "TLS port")?, t)))
        .transpose()?;
    Ok((plain, tls))
}

/// Resolves `bind` (an IP address or a host name, IPv6 without brackets) with `port` to the
/// first socket address.
pub fn listen_addr(bind: &str, port: u16) -> io::Result<SocketAddr> {
    let host = bind
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .unwrap_or(bind);
    (host, port).to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bind address {bind:?} resolves to nothing"),
        )
    })
}

/// Resolves a peer given as `host:port` (an engine, a backend) to its first address.
pub fn resolve(addr: &str) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr}: no address found"),
            )
        })
}

/// A blocking connection to `host` and `port` within `timeout`, with `timeout` as its read
/// and write timeout too: the supervisor's health checks and probes, which must never hang
/// on a stopped child.
pub fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    // Any resolver failure reads the same: the caller prefixes `host:port`.
    let unresolved = || io::Error::new(io::ErrorKind::InvalidInput, "address does not resolve");
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|_| unresolved())?
        .next()
        .ok_or_else(unresolved)?;
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            listen_addr("127.0.0.1", 6400).unwrap(),
            "127.0.0.1:6400".parse().unwrap()
        );
        assert_eq!(listen_addr("::1", 1).unwrap(), "[::1]:1".parse().unwrap());
        assert_eq!(listen_addr("[::1]", 1).unwrap(), "[::1]:1".parse().unwrap());
        assert_eq!(
            resolve("127.0.0.1:7").unwrap(),
            "127.0.0.1:7".parse().unwrap()
        );
        assert!(
            resolve("127.0.0.1")
                .unwrap_err()
                .to_string()
                .contains("127.0.0.1")
        );
    }

    #[test]
    fn binds_a_redis_bind_list() {
        let list = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Port 0: one port for every address; an optional address the host lacks is skipped.
        let (ls, skipped) = bind_all(&list(&["127.0.0.1", "-192.0.2.1"]), 0).unwrap();
        assert_eq!(ls.len(), 1);
        assert_eq!(skipped.len(), 1);
        let port = ls[0].local_addr().unwrap().port();
        let e = bind_all(&list(&["127.0.0.1"]), port).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "Could not create server TCP listening socket 127.0.0.1:{port}: "
            )),
            "{e}"
        );
        assert!(bind_all(&list(&["192.0.2.1"]), 0).is_err());
        assert!(bind_all(&[], 0).unwrap().0.is_empty());
    }

    #[test]
    fn binds_with_the_address_in_the_error() {
        let l = bind_on("127.0.0.1", 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = bind_on("127.0.0.1", port).unwrap_err();
        assert!(
            e.to_string().starts_with("Could not bind 127.0.0.1:"),
            "{e}"
        );
        let s = connect("127.0.0.1", port, Duration::from_secs(1)).unwrap();
        assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_secs(1)));
    }
}
