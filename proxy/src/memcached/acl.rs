//! ACL on the memcached port (`memcached_user`): every request is checked against one ACL user
//! of the fleet (engine-core's [`Acl`], the rules the RESP side enforces), as the RESP
//! commands it runs. Pure.
//!
//! memcached's text protocol has no login (SASL is binary-protocol only, and its ASCII
//! `authfile` login is a plaintext `set`), so the port does not authenticate connections: the
//! configured user is the identity of every memcached client, and network access to the port
//! (bind address, firewall, TLS client certificates) decides who is a memcached client.
//!
//! # The mapping ([`checks`])
//!
//! | memcached | checked as |
//! |---|---|
//! | `get gets k…` | `GET k` for each key |
//! | `gat gats e k…` | `GETEX k` for each key |
//! | `set cas`, `add`, `replace`; `ms` (modes S E R) | `SET k v` |
//! | `append prepend`; `ms` modes A P | `APPEND k v` |
//! | `touch k e` | `EXPIRE k e` |
//! | `incr`; `ma` (mode I) | `INCRBY k d` |
//! | `decr`; `ma` mode D | `DECRBY k d` |
//! | `delete`, `md` | `DEL k` |
//! | `mg` | `GET k`; also `EXPIRE k` with `T`, `SET k` with `N` |
//! | `ma` with `N` | also `SET k` |
//! | `flush_all` | `FLUSHDB` |
//! | `stats` | `INFO` |
//! | `version`, `verbosity`, `quit`, `mn` | nothing (connection-level, answered by the port) |
//!
//! Only the item key is checked, never its companion `__mc:{…}:k` (an implementation detail:
//! a user with `~app:*` uses memcached items `app:*`). A too-large `set` that memcached
//! answers with `SERVER_ERROR object too large for cache` also deletes its key; without `DEL`
//! permission on that key the delete is skipped and the reply is the same.
//!
//! # The refusal
//!
//! `CLIENT_ERROR ` followed by Redis's NOPERM text (`NOPERM this user has no permissions to
//! run the 'set' command`, `… to access one of the keys used as arguments`): memcached's class
//! for a request the client may not make (the server is fine; compare memcached's own
//! `CLIENT_ERROR unauthenticated`), so clients raise their client-error exception
//! (pymemcache's `MemcacheClientError`) and the connection stays open. It names the RESP
//! command, so an operator knows which permission to grant. As every memcached error it is
//! suppressed by `noreply` (memcached's `out_string`); refusals are counted either way (the
//! proxy's INFO `memcached_acl_denied`, the metrics' `recached_memcached_acl_denied_total`).

use engine_core::acl::{Acl, ClientAuth, Who};
use engine_core::command::{self, CommandSpec};

use super::meta::{MetaCmd, MetaRequest};
use super::parse::{Arith, Request, StoreMode};

/// The user every request of the port runs as, and the rules.
#[derive(Clone, Debug)]
pub struct Gate {
    pub acl: Acl,
    pub auth: ClientAuth,
}

/// One RESP command a memcached request is checked as.
pub struct Check<'a> {
    pub spec: &'static CommandSpec,
    pub argv: Vec<&'a [u8]>,
}

fn row(name: &str) -> &'static CommandSpec {
    command::lookup(name.as_bytes()).expect("a command of the table")
}

fn check<'a>(name: &str, argv: Vec<&'a [u8]>) -> Check<'a> {
    Check {
        spec: row(name),
        argv,
    }
}

/// The RESP commands `req` is checked as (see the module docs). Empty: nothing to check.
pub fn checks(req: &Request) -> Vec<Check<'_>> {
    match req {
        Request::Store {
            mode, key, value, ..
        } => {
            let name = match mode {
                StoreMode::Append | StoreMode::Prepend => "append",
                _ => "set",
            };
            vec![check(name, vec![name.as_bytes(), key, value])]
        }
        Request::Get { keys, touch, .. } => keys
            .iter()
            .map(|k| match touch {
                None => check("get", vec![b"get", k]),
                Some(_) => check("getex", vec![b"getex", k]),
            })
            .collect(),
        Request::Touch { key, .. } => vec![check("expire", vec![b"expire", key, b"0"])],
        Request::Arith { op, key, .. } => {
            let name = match op {
                Arith::Incr => "incrby",
                Arith::Decr => "decrby",
            };
            vec![check(name, vec![name.as_bytes(), key, b"1"])]
        }
        Request::Delete { key, .. } => vec![check("del", vec![b"del", key])],
        Request::FlushAll { .. } => vec![check("flushdb", vec![b"flushdb"])],
        Request::Stats { .. } => vec![check("info", vec![b"info"])],
        Request::Reject {
            delete: Some(key), ..
        } => vec![check("del", vec![b"del", key])],
        Request::Version
        | Request::Verbosity { .. }
        | Request::Quit
        | Request::Reject { .. }
        | Request::Meta(MetaRequest::Noop) => Vec::new(),
        Request::Meta(MetaRequest::Cmd {
            cmd,
            key,
            flags,
            value,
        }) => {
            let has = |f: u8| flags.iter().any(|(g, _)| *g == f);
            let mode = flags
                .iter()
                .find(|(f, _)| *f == b'M')
                .and_then(|(_, t)| t.first().copied());
            let mut v = Vec::new();
            match cmd {
                MetaCmd::Get => {
                    v.push(check("get", vec![b"get", key]));
                    if has(b'T') {
                        v.push(check("expire", vec![b"expire", key, b"0"]));
                    }
                    if has(b'N') {
                        v.push(check("set", vec![b"set", key, b""]));
                    }
                }
                MetaCmd::Set => {
                    let name = match mode {
                        Some(b'A' | b'a' | b'P' | b'p') => "append",
                        _ => "set",
                    };
                    v.push(check(name, vec![name.as_bytes(), key, value]));
                }
                MetaCmd::Delete => v.push(check("del", vec![b"del", key])),
                MetaCmd::Arith => {
                    let name = match mode {
                        Some(b'D' | b'd' | b'-') => "decrby",
                        _ => "incrby",
                    };
                    v.push(check(name, vec![name.as_bytes(), key, b"1"]));
                    if has(b'N') {
                        v.push(check("set", vec![b"set", key, b""]));
                    }
                }
            }
            v
        }
    }
}

impl Gate {
    /// `None`: `req` may run. `Some(line)`: the refusal (without CRLF), counted and logged in
    /// the ACL's stats and log like a RESP refusal.
    pub fn refuse(&mut self, req: &Request, addr: &str, id: u64, now_ms: u64) -> Option<String> {
        for c in checks(req) {
            if let Err(denied) = self.acl.check(&self.auth, c.spec, &c.argv) {
                let who = Who {
                    addr: addr.to_string(),
                    client_info: format!(
                        "id={id} addr={addr} user={} (memcached)",
                        self.auth.name()
                    ),
                    now_ms,
                    in_multi: false,
                    in_exec: false,
                };
                let msg = self.acl.refuse(denied, &self.auth, c.spec, &c.argv, &who);
                return Some(format!("CLIENT_ERROR {msg}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_core::acl::AclConfig;

    fn gate(rules: &[&str]) -> Gate {
        let acl = Acl::from_config(&AclConfig {
            requirepass: b"sec".to_vec(),
            users: vec![("mc".into(), rules.iter().map(|s| s.to_string()).collect())],
            protected_mode: true,
        })
        .unwrap();
        let auth = acl.login_as(b"mc").unwrap();
        Gate { acl, auth }
    }

    fn parse(input: &[u8]) -> Request {
        match super::super::parse::parse(input, 1 << 20) {
            super::super::parse::Parsed::Ready(r, _) => r,
            _ => panic!("incomplete"),
        }
    }

    #[test]
    fn keys_and_commands_are_checked_as_resp() {
        let mut g = gate(&["on", "~app:*", "+get", "+set", "+getex"]);
        let ok = |g: &mut Gate, input: &[u8]| g.refuse(&parse(input), "x", 1, 0);
        assert_eq!(ok(&mut g, b"get app:1 app:2\r\n"), None);
        assert_eq!(
            ok(&mut g, b"get app:1 other\r\n").as_deref(),
            Some(
                "CLIENT_ERROR NOPERM this user has no permissions to access one of the keys \
                 used as arguments"
            )
        );
        assert_eq!(ok(&mut g, b"set app:1 0 0 1\r\nx\r\n"), None);
        assert_eq!(ok(&mut g, b"add app:1 0 0 1\r\nx\r\n"), None);
        assert_eq!(
            ok(&mut g, b"append app:1 0 0 1\r\nx\r\n").as_deref(),
            Some("CLIENT_ERROR NOPERM this user has no permissions to run the 'append' command")
        );
        assert!(ok(&mut g, b"delete app:1\r\n").unwrap().contains("'del'"));
        assert!(
            ok(&mut g, b"incr app:1 1\r\n")
                .unwrap()
                .contains("'incrby'")
        );
        assert!(ok(&mut g, b"flush_all\r\n").unwrap().contains("'flushdb'"));
        assert_eq!(ok(&mut g, b"version\r\n"), None);
        assert_eq!(ok(&mut g, b"mg app:1 v\r\n"), None);
        assert!(
            ok(&mut g, b"mg app:1 v T10\r\n")
                .unwrap()
                .contains("'expire'")
        );
        assert_eq!(ok(&mut g, b"gat 10 app:1\r\n"), None);
        assert!(ok(&mut g, b"ma app:1\r\n").unwrap().contains("'incrby'"));
        assert_eq!(g.acl.stats.denied_cmd, 6);
        assert_eq!(g.acl.stats.denied_key, 1);
    }

    #[test]
    fn read_only_user() {
        let mut g = gate(&["on", "~*", "+@read"]);
        let ok = |g: &mut Gate, input: &[u8]| g.refuse(&parse(input), "x", 1, 0);
        assert_eq!(ok(&mut g, b"gets a b\r\n"), None);
        assert_eq!(ok(&mut g, b"mg a v f\r\n"), None);
        assert!(ok(&mut g, b"ms a 1\r\nx\r\n").is_some());
        assert!(ok(&mut g, b"md a\r\n").is_some());
        assert!(ok(&mut g, b"touch a 10\r\n").is_some());
        // A too-large set refuses either way; its delete needs DEL.
        assert!(ok(&mut g, b"set a 0 0 2000000\r\n").is_some());
    }

    #[test]
    fn off_and_unknown_users_cannot_be_the_ports_user() {
        let acl = Acl::from_config(&AclConfig {
            requirepass: Vec::new(),
            users: vec![("mc".into(), vec!["off".into(), "+@all".into()])],
            protected_mode: true,
        })
        .unwrap();
        assert!(acl.login_as(b"mc").is_none());
        assert!(acl.login_as(b"nobody").is_none());
        assert!(acl.login_as(b"default").is_some());
    }
}
