//! Authentication at the proxy: the proxy enforces the same `requirepass` and ACL users as the
//! engines (built from the same config with `engine_core::acl`), and authenticates its own
//! instance connections with an internal credential, never a client's (docs/security.md).
//!
//! # Clients ([`gate`], run on every request before routing)
//!
//! - While the only user is the open `default` one, only AUTH and ACL are looked at (they are
//!   answered here: AUTH without a password configured gets Redis's error).
//! - Otherwise the request's row is found in the command table (unknown commands and arity
//!   errors are left to the router, which answers them as Redis does, before any
//!   authentication error), then [`Acl::check`]: `-NOAUTH`, `-NOPERM` with Redis's texts,
//!   counted and recorded like on an engine. A refused command inside MULTI aborts the
//!   transaction (EXEC then answers `-EXECABORT`), as Redis does.
//! - AUTH, HELLO … AUTH and ACL WHOAMI / USERS / LIST / GETUSER / CAT / DRYRUN / HELP are
//!   answered by the proxy from its own state; RESET returns to the default user. ACL
//!   SETUSER / DELUSER / LOG / LOAD / SAVE / GENPASS get an `-ERR`: the proxy's users come
//!   from the config file, and a change through one process would not reach the others.
//!
//! # Instances
//!
//! With [`ProxyAuth::backend`] set, every connection to an instance (the shared one and each
//! dedicated one) starts with `AUTH <user> <password>` whose reply is consumed here; a
//! refused AUTH is logged (the instance then answers `-NOAUTH` to what follows, which
//! reaches the clients).

use engine_core::acl::{self, Acl, AclConfig, ClientAuth, Who};
use engine_core::command::CommandSpec;
use resp::{Proto, ReplyWriter};

use crate::route::{Args, Session};

/// The proxy's authentication settings.
#[derive(Clone, Debug, Default)]
pub struct ProxyAuth {
    /// Users and `requirepass` for the proxy's clients (same as the engines').
    pub acl: AclConfig,
    /// `(user, password)` the proxy sends to every instance connection; `None` = no AUTH.
    pub backend: Option<(String, String)>,
}

impl ProxyAuth {
    /// The AUTH request sent first on instance connections, if any.
    pub fn login_request(&self) -> Option<Vec<u8>> {
        let (user, pass) = self.backend.as_ref()?;
        let mut out = Vec::new();
        resp::encode_request(&mut out, &["AUTH", user, pass]);
        Some(out)
    }
}

/// The router's verdict on a request, as far as authentication goes.
pub enum Gate {
    /// Route it.
    Pass,
    /// Answer with these bytes (one complete reply).
    Reply(Vec<u8>),
}

fn error(msg: &str) -> Gate {
    let mut out = Vec::new();
    ReplyWriter::new(&mut out, Proto::Resp2).error(msg);
    Gate::Reply(out)
}

/// The row a request runs, if it exists and its arity is right (else the router answers).
fn row<A: Args + ?Sized>(args: &A) -> Option<&'static CommandSpec> {
    crate::route::known_row(args)
}

/// Decides whether a client's request may be routed (see the module docs).
#[inline]
pub fn gate<A: Args + ?Sized>(args: &A, session: &mut Session, acl: &mut Acl) -> Gate {
    let name = args.arg(0);
    // The common case (no password, no users, not AUTH/ACL/HELLO): a few tests inline, on
    // every request (MULTI and EXEC have the lengths of AUTH and HELLO, not their letters).
    let maybe_auth = (3..=5).contains(&name.len()) && matches!(name[0] | 0x20, b'a' | b'h');
    if !(acl.restricted() || maybe_auth) {
        return Gate::Pass;
    }
    gate_checked(args, session, acl)
}

/// [`gate`] past its common case.
#[inline(never)]
fn gate_checked<A: Args + ?Sized>(args: &A, session: &mut Session, acl: &mut Acl) -> Gate {
    let name = args.arg(0);
    let local = name.eq_ignore_ascii_case(b"auth") || name.eq_ignore_ascii_case(b"acl");
    let is_hello = name.eq_ignore_ascii_case(b"hello");
    if !acl.restricted() && !local && !is_hello {
        return Gate::Pass;
    }
    if name.eq_ignore_ascii_case(b"reset") {
        session.auth = ClientAuth::default();
        return Gate::Pass;
    }
    let Some(spec) = row(args) else {
        return Gate::Pass;
    };
    let argv: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
    let who = Who {
        addr: session.addr.clone(),
        client_info: format!(
            "id={} addr={} user={} (proxy)",
            session.id,
            session.addr,
            session.auth.name()
        ),
        now_ms: now_ms(),
        in_multi: session.tx.multi,
        in_exec: false,
    };
    match spec.name {
        "auth" => return auth(&argv, session, acl, &who),
        "hello" => return hello(&argv, session, acl, &who),
        _ => {}
    }
    if let Err(denied) = acl.check(&session.auth, spec, &argv) {
        if session.tx.multi {
            session.tx.aborted = true;
        }
        return error(&acl.refuse(denied, &session.auth, spec, &argv, &who));
    }
    // ACL GENPASS is random bytes: any engine answers it.
    if spec.name.starts_with("acl|") && spec.name != "acl|genpass" {
        return acl_command(spec, &argv, session, acl);
    }
    Gate::Pass
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// AUTH [user] password (redis `authCommand`).
fn auth(argv: &[&[u8]], session: &mut Session, acl: &mut Acl, who: &Who) -> Gate {
    if argv.len() > 3 {
        return error("ERR syntax error");
    }
    let (user, pass) = if argv.len() == 2 {
        if acl.default_nopass() {
            return error(acl::AUTH_NOPASS);
        }
        (acl::DEFAULT_USER.as_bytes(), argv[1])
    } else {
        (argv[1], argv[2])
    };
    if acl.authenticate(&mut session.auth, user, pass, who) {
        Gate::Reply(b"+OK\r\n".to_vec())
    } else {
        error(acl::WRONGPASS)
    }
}

/// HELLO [2|3 [AUTH user pass] [SETNAME name]]: authenticates, then lets the router answer.
/// Options take effect left to right, as in Redis `helloCommand`: a name set before a failed
/// AUTH stays, and an AUTH that succeeded before a bad option stays.
fn hello(argv: &[&[u8]], session: &mut Session, acl: &mut Acl, who: &Who) -> Gate {
    if argv.len() >= 2 && !matches!(resp::parse_i64(argv[1]), Some(2 | 3)) {
        return Gate::Pass; // NOPROTO or a bad version: the router's answer
    }
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        if argv[i].eq_ignore_ascii_case(b"auth") && more >= 2 {
            if !acl.authenticate(&mut session.auth, argv[i + 1], argv[i + 2], who) {
                return error(acl::WRONGPASS);
            }
            i += 3;
        } else if argv[i].eq_ignore_ascii_case(b"setname") && more >= 1 {
            if !crate::connection::valid_client_name(argv[i + 1]) {
                return Gate::Pass; // the router's answer
            }
            session.name = Some(argv[i + 1].to_vec());
            i += 2;
        } else {
            return Gate::Pass; // syntax error: the router's answer
        }
    }
    if !session.auth.authenticated && acl.default_needs_auth() {
        return error(acl::HELLO_NOAUTH);
    }
    Gate::Pass
}

/// ACL subcommands, answered from the proxy's own state.
fn acl_command(spec: &CommandSpec, argv: &[&[u8]], session: &mut Session, acl: &mut Acl) -> Gate {
    let mut out = Vec::new();
    let mut w = ReplyWriter::new(&mut out, session.proto);
    let result = match spec.name {
        "acl|whoami" => {
            w.bulk(session.auth.name().as_bytes());
            Ok(())
        }
        "acl|users" => {
            acl::write_users(acl, &mut w);
            Ok(())
        }
        "acl|list" => {
            acl::write_list(acl, &mut w);
            Ok(())
        }
        "acl|getuser" => {
            acl::write_getuser(acl, argv[2], &mut w);
            Ok(())
        }
        "acl|cat" => acl::write_cat(argv.get(2).copied(), &mut w),
        "acl|dryrun" => acl::dryrun(acl, &argv[2..]).map(|r| match r {
            None => w.ok(),
            Some(t) => w.bulk(t.as_bytes()),
        }),
        "acl|help" => {
            w.array(acl::HELP_LINES.len() + 1);
            w.simple(b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
            for l in acl::HELP_LINES {
                w.simple(l.as_bytes());
            }
            Ok(())
        }
        other => {
            let sub = other.trim_start_matches("acl|").to_ascii_uppercase();
            return error(&format!(
                "ERR ACL {sub} is not supported by the recached proxy: its users come from the \
                 config file ([[users]], requirepass)"
            ));
        }
    };
    match result {
        Ok(()) => Gate::Reply(out),
        Err(e) => error(&e.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl() -> Acl {
        Acl::from_config(&AclConfig {
            requirepass: b"sec".to_vec(),
            users: vec![(
                "app".into(),
                ["on", ">pw", "~app:*", "+@all"].map(String::from).to_vec(),
            )],
            protected_mode: true,
        })
        .unwrap()
    }

    fn run(args: &[&[u8]], session: &mut Session, acl: &mut Acl) -> Option<Vec<u8>> {
        match gate(args, session, acl) {
            Gate::Pass => None,
            Gate::Reply(r) => Some(r),
        }
    }

    #[test]
    fn unauthenticated_clients_are_refused_until_auth() {
        let mut acl = acl();
        let mut s = Session::default();
        let noauth = Some(b"-NOAUTH Authentication required.\r\n".to_vec());
        assert_eq!(run(&[b"GET", b"k"], &mut s, &mut acl), noauth);
        // Unknown commands and arity errors are the router's.
        assert_eq!(run(&[b"NOPE"], &mut s, &mut acl), None);
        assert_eq!(run(&[b"GET"], &mut s, &mut acl), None);
        assert!(
            run(&[b"HELLO", b"2"], &mut s, &mut acl)
                .unwrap()
                .starts_with(b"-NOAUTH HELLO must be called")
        );
        assert_eq!(
            run(&[b"AUTH", b"bad"], &mut s, &mut acl),
            Some(format!("-{}\r\n", acl::WRONGPASS).into_bytes())
        );
        assert_eq!(
            run(&[b"AUTH", b"sec"], &mut s, &mut acl),
            Some(b"+OK\r\n".to_vec())
        );
        assert_eq!(run(&[b"GET", b"k"], &mut s, &mut acl), None);
        assert_eq!(
            run(&[b"ACL", b"WHOAMI"], &mut s, &mut acl),
            Some(b"$7\r\ndefault\r\n".to_vec())
        );
        // RESET: back to the default user, unauthenticated.
        assert_eq!(run(&[b"RESET"], &mut s, &mut acl), None);
        assert_eq!(run(&[b"GET", b"k"], &mut s, &mut acl), noauth);
        assert_eq!(acl.stats.denied_auth, 1);
    }

    #[test]
    fn hello_3_authenticates_like_hello_2() {
        let mut acl = acl();
        let mut s = Session::default();
        assert_eq!(
            run(
                &[b"HELLO", b"3", b"AUTH", b"app", b"nope"],
                &mut s,
                &mut acl
            ),
            Some(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n".to_vec())
        );
        assert_eq!(
            run(&[b"HELLO", b"3", b"AUTH", b"app", b"pw"], &mut s, &mut acl),
            None
        );
        assert!(s.auth.authenticated);
    }

    #[test]
    fn key_patterns_apply_through_the_proxy() {
        let mut acl = acl();
        let mut s = Session::default();
        assert_eq!(
            run(&[b"HELLO", b"2", b"AUTH", b"app", b"pw"], &mut s, &mut acl),
            None
        );
        assert_eq!(run(&[b"SET", b"app:1", b"v"], &mut s, &mut acl), None);
        let noperm =
            b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";
        assert_eq!(
            run(&[b"GET", b"other:1"], &mut s, &mut acl),
            Some(noperm.to_vec())
        );
        assert_eq!(
            run(&[b"MGET", b"app:1", b"other:1"], &mut s, &mut acl),
            Some(noperm.to_vec())
        );
        // Inside MULTI a refusal aborts the transaction.
        s.tx.multi = true;
        assert!(run(&[b"SET", b"other:1", b"v"], &mut s, &mut acl).is_some());
        assert!(s.tx.aborted);
        assert!(
            run(&[b"ACL", b"SETUSER", b"x"], &mut s, &mut acl)
                .unwrap()
                .starts_with(b"-ERR ACL SETUSER is not supported by the recached proxy")
        );
    }

    #[test]
    fn open_default_user_only_answers_auth() {
        let mut acl = Acl::new();
        let mut s = Session::default();
        assert_eq!(run(&[b"GET", b"k"], &mut s, &mut acl), None);
        assert_eq!(
            run(&[b"AUTH", b"x"], &mut s, &mut acl),
            Some(format!("-{}\r\n", acl::AUTH_NOPASS).into_bytes())
        );
        assert_eq!(
            run(&[b"AUTH", b"default", b"x"], &mut s, &mut acl),
            Some(b"+OK\r\n".to_vec())
        );
    }

    #[test]
    fn login_request_is_a_multibulk_auth() {
        let a = ProxyAuth {
            acl: AclConfig::default(),
            backend: Some(("u".into(), "p".into())),
        };
        assert_eq!(
            a.login_request().unwrap(),
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n"
        );
    }
}
