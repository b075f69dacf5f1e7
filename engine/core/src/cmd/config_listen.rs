//! CONFIG GET/SET `port`, `tls-port` and `bind`: where the engine listens, re-bound at once
//! as redis-server does (`config.c` `updatePort`, `applyTLSPort`, `applyBind`; `server.c`
//! `changeListenPort`, `changeBindAddr`).
//!
//! The values live in [`HostInfo`](crate::HostInfo) (`tcp_port`, `tls_port`, `bind`); the
//! sockets are the server's, reached through [`Listeners`] (engine-core opens none). Without
//! it (the browser replica, unit tests) a new value is only recorded.
//!
//! As in Redis, CONFIG SET first sets every value and then applies: `port` and `tls-port`
//! when their value changed, `bind` always (its setter has no "unchanged" case), each apply
//! once, in the order the parameters were named. A failed apply restores every value, runs
//! the applies again with the old values (so the old port listens again) and answers Redis's
//! text: "Unable to listen on this port. Check server logs." or "Failed to bind to specified
//! addresses.". Connections already accepted are never touched.
//!
//! **Fleet engines refuse a new address.** An engine started with a cluster topology is named
//! by its `host:port` in that topology: the proxy connects to it there, every engine's
//! `-MOVED` and CLUSTER SLOTS send clients there, the supervisor health-checks it there.
//! Nothing would follow a re-bound engine (there is no cluster bus to announce it, as Redis
//! Cluster's gossip does), so it would silently drop out of the fleet and be restarted on its
//! old port. Such an engine answers `can't change the address of a fleet engine` instead;
//! setting the current value stays OK. docs/operations.md, "Ports of a running engine".

use super::server::{Param, int_in};
use crate::Engine;

/// The server's listening sockets (installed as [`Engine::listeners`]).
pub trait Listeners {
    /// Closes the plain (`tls` false) or TLS listeners, then listens on `port` at every
    /// address of `bind` (none if `port` is 0 or `bind` is empty), as redis
    /// `changeListenPort`. Err (the server logs why): an address could not be bound; that
    /// kind is then left without a listener.
    fn listen(&mut self, tls: bool, port: u16, bind: &[String]) -> Result<(), ListenFailed>;
    /// Whether the TLS listener has a certificate to serve with.
    fn tls_configured(&self) -> bool;
}

/// An address could not be listened on (the server logged which and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenFailed;

/// redis `CONFIG_BINDADDR_MAX`.
pub const BINDADDR_MAX: usize = 16;

const FLEET: &str = "can't change the address of a fleet engine (its port is in the topology)";
const UNABLE_TO_LISTEN: &str = "Unable to listen on this port. Check server logs.";

/// A port: an integer in 0..=65535 (`createIntConfig("port", … 0, 65535 …)`).
fn port_value(e: &Engine, v: &[u8], current: u16) -> Result<u16, &'static str> {
    let n = int_in(v, 0, 65535).map_err(|why| match why {
        "argument out of range" => "argument must be between 0 and 65535 inclusive",
        why => why,
    })? as u16;
    if n != current && e.cluster.enabled() {
        return Err(FLEET);
    }
    Ok(n)
}

/// `bind`'s value as redis `setConfigBindOption` takes it: split at every space (Redis's
/// `sdssplitlen`, so two spaces make an empty address, which fails to bind); empty = none.
fn bind_value(v: &[u8]) -> Result<Vec<String>, &'static str> {
    if v.is_empty() {
        return Ok(Vec::new());
    }
    let addrs: Vec<String> = v
        .split(|&b| b == b' ')
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if addrs.len() > BINDADDR_MAX {
        return Err("Too many bind addresses specified.");
    }
    Ok(addrs)
}

/// The rows `cmd::server` appends to its parameter table.
pub(crate) const PARAMS: &[Param] = &[
    Param {
        name: "port",
        get: |e| e.host.tcp_port.to_string(),
        set: Some(|e, v| {
            e.host.tcp_port = port_value(e, v, e.host.tcp_port)?;
            Ok(())
        }),
    },
    Param {
        name: "tls-port",
        get: |e| e.host.tls_port.to_string(),
        set: Some(|e, v| {
            e.host.tls_port = port_value(e, v, e.host.tls_port)?;
            Ok(())
        }),
    },
    Param {
        name: "bind",
        get: |e| e.host.bind.join(" "),
        set: Some(|e, v| {
            let addrs = bind_value(v)?;
            if addrs != e.host.bind && e.cluster.enabled() {
                return Err(FLEET);
            }
            e.host.bind = addrs;
            Ok(())
        }),
    },
];

/// Where the engine listens: what CONFIG SET restores when an apply fails.
#[derive(Clone, Debug)]
pub(crate) struct Saved {
    port: u16,
    tls_port: u16,
    bind: Vec<String>,
}

pub(crate) fn save(e: &Engine) -> Saved {
    Saved {
        port: e.host.tcp_port,
        tls_port: e.host.tls_port,
        bind: e.host.bind.clone(),
    }
}

/// Puts back the values of `saved` (a value that failed to parse was not applied yet).
pub(crate) fn restore(e: &mut Engine, saved: Saved) {
    e.host.tcp_port = saved.port;
    e.host.tls_port = saved.tls_port;
    e.host.bind = saved.bind;
}

/// One apply function (redis `updatePort`, `applyTLSPort`, `applyBind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Apply {
    Port,
    TlsPort,
    Bind,
}

/// After every value of a CONFIG SET is set: runs the applies the named parameters need, in
/// their order. Err: the parameter whose apply failed and Redis's reason; every listen value
/// is then back as `saved` and the old listeners are re-opened.
pub(crate) fn apply<'a>(
    e: &mut Engine,
    names: impl Iterator<Item = &'a [u8]>,
    saved: &Saved,
) -> Result<(), (&'static str, &'static str)> {
    let mut applies: Vec<Apply> = Vec::new();
    for name in names {
        let a = match () {
            _ if crate::args::is(name, "port") && e.host.tcp_port != saved.port => Apply::Port,
            _ if crate::args::is(name, "tls-port") && e.host.tls_port != saved.tls_port => {
                Apply::TlsPort
            }
            // Redis re-binds even to the same addresses; a fleet engine keeps its sockets.
            _ if crate::args::is(name, "bind") && !e.cluster.enabled() => Apply::Bind,
            _ => continue,
        };
        if !applies.contains(&a) {
            applies.push(a);
        }
    }
    for &a in &applies {
        if let Err(why) = run(e, a) {
            restore(e, saved.clone());
            // redis `restoreBackupConfig`: every apply again, failures only logged.
            for &b in &applies {
                let _ = run(e, b);
            }
            let name = match a {
                Apply::Port => "port",
                Apply::TlsPort => "tls-port",
                Apply::Bind => "bind",
            };
            return Err((name, why));
        }
    }
    Ok(())
}

fn run(e: &mut Engine, a: Apply) -> Result<(), &'static str> {
    let (port, tls_port) = (e.host.tcp_port, e.host.tls_port);
    let bind = &e.host.bind;
    let Some(l) = e.listeners.as_mut() else {
        return Ok(());
    };
    match a {
        Apply::Port => l.listen(false, port, bind).map_err(|_| UNABLE_TO_LISTEN),
        Apply::TlsPort => {
            if !l.tls_configured() {
                return Err("Unable to update TLS configuration. Check server logs.");
            }
            l.listen(true, tls_port, bind).map_err(|_| UNABLE_TO_LISTEN)
        }
        // redis `changeBindAddr`: both kinds closed first, then both re-opened; a failure
        // leaves neither (the rollback re-opens the old ones).
        Apply::Bind => {
            let _ = l.listen(false, 0, bind);
            let _ = l.listen(true, 0, bind);
            let ok = l.listen(false, port, bind).is_ok()
                && (tls_port == 0 || l.listen(true, tls_port, bind).is_ok());
            if ok {
                Ok(())
            } else {
                let _ = l.listen(false, 0, bind);
                let _ = l.listen(true, 0, bind);
                Err("Failed to bind to specified addresses.")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Records each listen; ports in `busy` fail.
    type Log = Rc<RefCell<Vec<(bool, u16, Vec<String>)>>>;

    #[derive(Clone, Default)]
    struct Fake {
        log: Log,
        busy: Vec<u16>,
    }

    impl Listeners for Fake {
        fn listen(&mut self, tls: bool, port: u16, bind: &[String]) -> Result<(), ListenFailed> {
            self.log.borrow_mut().push((tls, port, bind.to_vec()));
            if self.busy.contains(&port) {
                Err(ListenFailed)
            } else {
                Ok(())
            }
        }
        fn tls_configured(&self) -> bool {
            false
        }
    }

    fn engine(fake: &Fake, cfg: Config) -> Engine {
        let mut e = Engine::new(cfg);
        e.host.tcp_port = 7000;
        e.host.bind = vec!["127.0.0.1".into()];
        e.listeners = Some(Box::new(fake.clone()));
        e
    }

    fn run_cmd(e: &mut Engine, args: &[&str]) -> String {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        e.exec(&mut crate::Client::default(), &argv, 1, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn port_rebinds_and_rolls_back() {
        let fake = Fake {
            busy: vec![7002],
            ..Default::default()
        };
        let mut e = engine(&fake, Config::default());
        // The same value applies nothing.
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "port", "7000"]),
            "+OK\r\n"
        );
        assert!(fake.log.borrow().is_empty());
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "port", "7001"]),
            "+OK\r\n"
        );
        assert_eq!(fake.log.borrow().last().unwrap().1, 7001);
        assert_eq!(
            run_cmd(
                &mut e,
                &["CONFIG", "SET", "maxmemory", "10000001", "port", "7002"]
            ),
            "-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\r\n"
        );
        // Rolled back: the old port listens again, maxmemory is back.
        assert_eq!(fake.log.borrow().last().unwrap().1, 7001);
        assert_eq!(e.host.tcp_port, 7001);
        assert_eq!(e.config.maxmemory, 0);
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "port", "65536"]),
            "-ERR CONFIG SET failed (possibly related to argument 'port') - argument must be between 0 and 65535 inclusive\r\n"
        );
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "tls-port", "7003"]),
            "-ERR CONFIG SET failed (possibly related to argument 'tls-port') - Unable to update TLS configuration. Check server logs.\r\n"
        );
        assert_eq!(e.host.tls_port, 0);
    }

    #[test]
    fn bind_always_rebinds_and_rolls_back() {
        let fake = Fake::default();
        let mut e = engine(&fake, Config::default());
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "bind", "127.0.0.1"]),
            "+OK\r\n"
        );
        // Closed (plain, TLS), then the plain one opened again.
        assert_eq!(fake.log.borrow().len(), 3);
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "GET", "bind"]),
            "*2\r\n$4\r\nbind\r\n$9\r\n127.0.0.1\r\n"
        );
        let many = vec!["127.0.0.1"; 17].join(" ");
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "bind", &many]),
            "-ERR CONFIG SET failed (possibly related to argument 'bind') - Too many bind addresses specified.\r\n"
        );
        let fake = Fake {
            busy: vec![7000],
            ..Default::default()
        };
        let mut e = engine(&fake, Config::default());
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "bind", "127.0.0.2"]),
            "-ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses.\r\n"
        );
        assert_eq!(e.host.bind, vec!["127.0.0.1".to_string()]);
    }

    #[test]
    fn fleet_engines_keep_their_address() {
        let fake = Fake::default();
        let cfg = Config {
            cluster_nodes: vec!["127.0.0.1:7000".into(), "127.0.0.1:7001".into()],
            ..Config::default()
        };
        let mut e = engine(&fake, cfg);
        assert!(e.cluster.enabled());
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "port", "7000"]),
            "+OK\r\n"
        );
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "bind", "127.0.0.1"]),
            "+OK\r\n"
        );
        assert!(fake.log.borrow().is_empty());
        assert_eq!(
            run_cmd(&mut e, &["CONFIG", "SET", "port", "7005"]),
            format!("-ERR CONFIG SET failed (possibly related to argument 'port') - {FLEET}\r\n")
        );
        assert_eq!(e.host.tcp_port, 7000);
    }
}
