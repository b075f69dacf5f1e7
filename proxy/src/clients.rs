//! CLIENT LIST / INFO / KILL over the proxy's own clients: parsing and the reply lines.
//! Pure; the event loop (`crate::event_loop`, which alone sees every client) gathers a
//! [`View`] of each client and applies the result.
//!
//! Lines use Redis 7.0's CLIENT LIST format (the engine's `client_info_line`): the fields the
//! proxy knows (`id addr laddr fd name age idle flags db sub psub multi cmd user resp`) and
//! Redis's placeholders for the others (`ssub=0 qbuf=0 … redir=-1`). Flags: `P` subscribed,
//! `x` in MULTI, `N` none. Errors are redis-server 7.0.15's (networking.c
//! clientCommand, clientKillCommand).

use std::fmt::Write;

/// Which clients CLIENT LIST TYPE / CLIENT KILL TYPE select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Normal,
    Pubsub,
    /// `master`, `replica`, `slave`: the proxy has none of these.
    Nothing,
}

/// A parsed CLIENT LIST / INFO / KILL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `CLIENT LIST [TYPE t | ID id …]`; `ids` empty = every id.
    List {
        kind: Option<Type>,
        ids: Vec<u64>,
    },
    /// `CLIENT INFO`: the caller's line.
    Info,
    Kill(Kill),
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: `error` for ERROR.
    Unblock {
        id: u64,
        error: bool,
    },
}

/// `CLIENT KILL addr` (old form) or `CLIENT KILL <filter value> …`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kill {
    /// Old form: `+OK` / `-ERR No such client` instead of a count.
    pub old_form: bool,
    pub id: Option<u64>,
    pub kind: Option<Type>,
    pub addr: Option<Vec<u8>>,
    pub laddr: Option<Vec<u8>>,
    pub user: Option<Vec<u8>>,
    /// Leave the calling client alone (new form default `yes`).
    pub skipme: bool,
}

/// What the proxy knows of one client.
pub struct View<'a> {
    pub id: u64,
    /// Unparsed input bytes (the caller's: with the request being answered, as Redis).
    pub qbuf: usize,
    pub addr: &'a str,
    pub laddr: &'a str,
    pub fd: i64,
    pub name: Option<&'a [u8]>,
    pub age: u64,
    pub idle: u64,
    pub db: usize,
    pub sub: usize,
    pub psub: usize,
    pub in_multi: bool,
    pub monitor: bool,
    pub cmd: &'a str,
    pub user: &'a str,
    pub resp: i64,
}

fn parse_type(t: &[u8]) -> Option<Type> {
    let t = t.to_ascii_lowercase();
    match &t[..] {
        b"normal" => Some(Type::Normal),
        b"pubsub" => Some(Type::Pubsub),
        b"master" | b"replica" | b"slave" => Some(Type::Nothing),
        _ => None,
    }
}

fn unknown_type(t: &[u8]) -> Vec<u8> {
    error(&format!(
        "ERR Unknown client type '{}'",
        String::from_utf8_lossy(t)
    ))
}

/// An error reply; CR/LF from user input become spaces, as Redis does.
fn error(text: &str) -> Vec<u8> {
    let mut out = b"-".to_vec();
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    out
}

const SYNTAX: &[u8] = b"-ERR syntax error\r\n";

/// A positive id (Redis `getRangeLongFromObjectOrReply(…, 1, LONG_MAX, …)`).
fn positive_id(a: &[u8]) -> Option<u64> {
    resp::parse_i64(a).filter(|&n| n >= 1).map(|n| n as u64)
}

/// `CLIENT LIST …` (args from `CLIENT`), arity already checked.
pub fn parse_list(args: &[&[u8]]) -> Result<Op, Vec<u8>> {
    let argc = args.len();
    if argc == 4 && args[2].eq_ignore_ascii_case(b"type") {
        let kind = parse_type(args[3]).ok_or_else(|| unknown_type(args[3]))?;
        return Ok(Op::List {
            kind: Some(kind),
            ids: Vec::new(),
        });
    }
    if argc > 3 && args[2].eq_ignore_ascii_case(b"id") {
        let ids = args[3..]
            .iter()
            .map(|a| positive_id(a).ok_or_else(|| error("ERR Invalid client ID")))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Op::List { kind: None, ids });
    }
    if argc != 2 {
        return Err(SYNTAX.to_vec());
    }
    Ok(Op::List {
        kind: None,
        ids: Vec::new(),
    })
}

/// `CLIENT KILL …` (args from `CLIENT`), arity already checked; `users`: known user names.
pub fn parse_kill(args: &[&[u8]], user_exists: impl Fn(&[u8]) -> bool) -> Result<Op, Vec<u8>> {
    if args.len() == 3 {
        return Ok(Op::Kill(Kill {
            old_form: true,
            addr: Some(args[2].to_vec()),
            ..Kill::default()
        }));
    }
    let mut k = Kill {
        skipme: true,
        ..Kill::default()
    };
    let mut i = 2;
    while i < args.len() {
        let Some(&value) = args.get(i + 1) else {
            return Err(SYNTAX.to_vec());
        };
        let filter = args[i].to_ascii_lowercase();
        match &filter[..] {
            b"id" => {
                let id = positive_id(value)
                    .ok_or_else(|| error("ERR client-id should be greater than 0"))?;
                k.id = Some(id);
            }
            b"type" => k.kind = Some(parse_type(value).ok_or_else(|| unknown_type(value))?),
            b"addr" => k.addr = Some(value.to_vec()),
            b"laddr" => k.laddr = Some(value.to_vec()),
            b"user" => {
                if !user_exists(value) {
                    return Err(error(&format!(
                        "ERR No such user '{}'",
                        String::from_utf8_lossy(value)
                    )));
                }
                k.user = Some(value.to_vec());
            }
            b"skipme" if value.eq_ignore_ascii_case(b"yes") => k.skipme = true,
            b"skipme" if value.eq_ignore_ascii_case(b"no") => k.skipme = false,
            _ => return Err(SYNTAX.to_vec()),
        }
        i += 2;
    }
    Ok(Op::Kill(k))
}

fn type_of(v: &View<'_>) -> Type {
    if v.sub + v.psub > 0 {
        Type::Pubsub
    } else {
        Type::Normal
    }
}

impl Kill {
    /// Whether client `v` is to be closed; `me`: the id of the client asking.
    pub fn matches(&self, v: &View<'_>, me: u64) -> bool {
        (!self.skipme || v.id != me)
            && self.id.is_none_or(|id| id == v.id)
            && self.kind.is_none_or(|t| t == type_of(v))
            && self.addr.as_deref().is_none_or(|a| a == v.addr.as_bytes())
            && self
                .laddr
                .as_deref()
                .is_none_or(|a| a == v.laddr.as_bytes())
            && self.user.as_deref().is_none_or(|u| u == v.user.as_bytes())
    }

    /// The reply once `killed` clients matched.
    pub fn reply(&self, killed: usize) -> Vec<u8> {
        match (self.old_form, killed) {
            (true, 0) => b"-ERR No such client\r\n".to_vec(),
            (true, _) => b"+OK\r\n".to_vec(),
            (false, n) => format!(":{n}\r\n").into_bytes(),
        }
    }
}

/// Whether CLIENT LIST `kind`/`ids` lists client `v`.
pub fn listed(kind: Option<Type>, ids: &[u64], v: &View<'_>) -> bool {
    kind.is_none_or(|t| t == type_of(v)) && (ids.is_empty() || ids.contains(&v.id))
}

/// One CLIENT LIST line (with its `\n`).
pub fn line(v: &View<'_>, out: &mut String) {
    let name = v.name.map(String::from_utf8_lossy).unwrap_or_default();
    let mut flags = String::new();
    if v.monitor {
        flags.push('O');
    }
    if v.sub + v.psub > 0 {
        flags.push('P');
    }
    if v.in_multi {
        flags.push('x');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let multi = if v.in_multi { 0 } else { -1 };
    let _ = writeln!(
        out,
        "id={} addr={} laddr={} fd={} name={name} age={} idle={} flags={flags} db={} sub={} \
         psub={} ssub=0 multi={multi} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 \
         obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={}",
        v.id,
        v.addr,
        v.laddr,
        v.fd,
        v.age,
        v.idle,
        v.db,
        v.sub,
        v.psub,
        v.qbuf,
        v.cmd,
        v.user,
        v.resp
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kill(args: &[&[u8]]) -> Result<Op, Vec<u8>> {
        parse_kill(args, |u| u == b"default")
    }

    #[test]
    fn kill_filters_and_errors_are_redis_s() {
        let err = |r: Result<Op, Vec<u8>>| String::from_utf8(r.unwrap_err()).unwrap();
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"ID", b"x"])),
            "-ERR client-id should be greater than 0\r\n"
        );
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"ID", b"0"])),
            "-ERR client-id should be greater than 0\r\n"
        );
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"foo", b"bar"])),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"ID", b"1", b"SKIPME"])),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"USER", b"nosuch"])),
            "-ERR No such user 'nosuch'\r\n"
        );
        assert_eq!(
            err(kill(&[b"CLIENT", b"KILL", b"TYPE", b"x"])),
            "-ERR Unknown client type 'x'\r\n"
        );
        let Ok(Op::Kill(k)) = kill(&[b"CLIENT", b"KILL", b"1.2.3.4:5"]) else {
            panic!()
        };
        assert!(k.old_form && !k.skipme);
        assert_eq!(k.reply(0), b"-ERR No such client\r\n");
        let Ok(Op::Kill(k)) = kill(&[b"client", b"kill", b"id", b"7", b"skipme", b"NO"]) else {
            panic!()
        };
        assert_eq!(
            (k.id, k.skipme, k.reply(1)),
            (Some(7), false, b":1\r\n".to_vec())
        );
    }

    #[test]
    fn list_arguments() {
        assert_eq!(
            parse_list(&[b"CLIENT", b"LIST", b"x"]).unwrap_err(),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(
            parse_list(&[b"CLIENT", b"LIST", b"ID", b"x"]).unwrap_err(),
            b"-ERR Invalid client ID\r\n"
        );
        assert_eq!(
            parse_list(&[b"CLIENT", b"LIST", b"ID", b"3", b"4"]).unwrap(),
            Op::List {
                kind: None,
                ids: vec![3, 4]
            }
        );
    }
}
