//! The meta protocol (`mg`, `ms`, `md`, `ma`, `mn`; memcached's `doc/protocol.txt`, "Meta
//! Get" … "Meta No-Op"): the parser, the plan (one EVALSHA on the key's engine) and the reply.
//!
//! Flags follow memcached 1.6.18's shared pre-parse (`_meta_flag_preparse`): every known
//! flag is accepted by every meta command (and ignored where it means nothing), a repeated
//! flag is `CLIENT_ERROR duplicate flag`, numeric tokens are checked with memcached's error
//! texts, return flags come back in the order they were asked. Supported: `v k f t c s q O T
//! N I C F M D J E u P L` (`E`, a client-chosen CAS, is from later 1.6 releases). Not
//! supported, answered `CLIENT_ERROR invalid flag`: `b` (base64 keys), `h`, `l`, `R`.

use super::exec::{self, Ctx, Job, Part, Render, expiry, take_cas};
use super::parse::{self, BAD_FORMAT, KEY_MAX, Request};
use super::stats::Counters;
use crate::slots::SlotMap;
use resp::value::Value;

/// Longest opaque token (memcached `MFLAG_MAX_OPAQUE_LENGTH`).
const OPAQUE_MAX: usize = 32;
/// Most tokens on a meta line, the terminator included (memcached `MFLAG_MAX_OPT_LENGTH`).
const MAX_TOKENS: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    Get,
    Set,
    Delete,
    Arith,
}

/// A meta request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaRequest {
    /// `mn`: answered `MN` in order (a pipeline's end marker).
    Noop,
    Cmd {
        cmd: MetaCmd,
        key: Vec<u8>,
        /// (flag, token) in request order.
        flags: Vec<(u8, Vec<u8>)>,
        /// `ms`'s data block.
        value: Vec<u8>,
    },
}

/// What [`parse`] found.
pub enum Outcome {
    Incomplete,
    Ready(Request, usize),
}

fn reject(reply: &'static str, swallow: usize) -> Request {
    Request::Reject {
        reply,
        swallow,
        delete: None,
        noreply: false,
    }
}

/// Checks the flags (memcached's pre-parse); `Err` = the error text.
fn check_flags(t: &[&[u8]]) -> Result<Vec<(u8, Vec<u8>)>, &'static str> {
    let mut seen = [false; 128];
    let mut out = Vec::with_capacity(t.len());
    for tok in t {
        let f = tok[0];
        if f >= 127 || seen[f as usize] {
            return Err("CLIENT_ERROR duplicate flag");
        }
        seen[f as usize] = true;
        let arg = &tok[1..];
        match f {
            b'N' | b'T' => {
                if parse::parse_i32(arg).is_none() {
                    return Err("CLIENT_ERROR bad token in command line format");
                }
            }
            b'C' | b'E' => {
                if parse::parse_u64(arg).is_none() {
                    return Err("CLIENT_ERROR bad token in command line format");
                }
            }
            b'F' => {
                if parse::parse_u64(arg).is_none() {
                    return Err(BAD_FORMAT);
                }
            }
            b'M' => {
                if tok.len() != 2 {
                    return Err("CLIENT_ERROR incorrect length for M token");
                }
            }
            b'J' => {
                if parse::parse_u64(arg).is_none() {
                    return Err("CLIENT_ERROR invalid numeric initial value");
                }
            }
            b'D' => {
                if parse::parse_u64(arg).is_none() {
                    return Err("CLIENT_ERROR invalid numeric delta value");
                }
            }
            b'O' => {
                if tok.len() > OPAQUE_MAX {
                    return Err("CLIENT_ERROR opaque token too long");
                }
            }
            b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'u' | b'q' | b'I' | b'P' | b'L' => {}
            _ => return Err("CLIENT_ERROR invalid flag"),
        }
        out.push((f, arg.to_vec()));
    }
    Ok(out)
}

/// A meta command whose tokens are `t` (its line ends at `line_end` in `buf`).
pub fn parse(t: &[&[u8]], buf: &[u8], line_end: usize, item_max: usize) -> Outcome {
    let cmd = match t[0] {
        b"mn" => return Outcome::Ready(Request::Meta(MetaRequest::Noop), line_end),
        b"mg" => MetaCmd::Get,
        b"ms" => MetaCmd::Set,
        b"md" => MetaCmd::Delete,
        b"ma" => MetaCmd::Arith,
        _ => return Outcome::Ready(reject(parse::ERROR, 0), line_end),
    };
    let done = |r| Outcome::Ready(r, line_end);
    if t.len() < 2 {
        return done(reject(parse::ERROR, 0));
    }
    if t[1].len() > KEY_MAX {
        return done(reject(BAD_FORMAT, 0));
    }
    let key = t[1].to_vec();
    if cmd != MetaCmd::Set {
        if t.len() + 1 > MAX_TOKENS {
            return done(reject("CLIENT_ERROR options flags too long", 0));
        }
        return match check_flags(&t[2..]) {
            Ok(flags) => done(Request::Meta(MetaRequest::Cmd {
                cmd,
                key,
                flags,
                value: Vec::new(),
            })),
            Err(e) if cmd == MetaCmd::Get => done(reject(e, 0)),
            Err(_) => done(reject("CLIENT_ERROR invalid or duplicate flag", 0)),
        };
    }
    // ms <key> <datalen> <flags>*
    if t.len() == 2 {
        return done(reject(BAD_FORMAT, 0));
    }
    if t.len() + 1 > MAX_TOKENS {
        return done(reject("CLIENT_ERROR options flags too long", 0));
    }
    let vlen = match parse::parse_i32(t[2]) {
        Some(v) if v >= 0 => v as usize,
        _ => return done(reject(BAD_FORMAT, 0)),
    };
    let swallow = vlen + 2;
    let flags = match check_flags(&t[3..]) {
        Ok(f) => f,
        Err(e) => return done(reject(e, swallow)),
    };
    if let Some((_, m)) = flags.iter().find(|(f, _)| *f == b'M')
        && !matches!(m[0], b'E' | b'A' | b'P' | b'R' | b'S')
    {
        return done(reject("CLIENT_ERROR invalid mode for ms M token", swallow));
    }
    if key.len() + vlen + parse::ITEM_OVERHEAD > item_max {
        return done(reject(parse::TOO_LARGE, swallow));
    }
    let end = line_end + swallow;
    if buf.len() < end {
        return Outcome::Incomplete;
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Outcome::Ready(reject(parse::BAD_CHUNK, 0), end);
    }
    Outcome::Ready(
        Request::Meta(MetaRequest::Cmd {
            cmd,
            key,
            flags,
            value: buf[line_end..end - 2].to_vec(),
        }),
        end,
    )
}

/// How a meta reply is built.
#[derive(Debug)]
pub struct MetaRender {
    cmd: MetaCmd,
    key: Vec<u8>,
    flags: Vec<(u8, Vec<u8>)>,
    now_ms: u64,
    /// The CAS a successful write gives the item.
    new_cas: Vec<u8>,
}

impl MetaRender {
    fn has(&self, f: u8) -> bool {
        self.flags.iter().any(|(g, _)| *g == f)
    }

    fn token(&self, f: u8) -> Option<&[u8]> {
        self.flags
            .iter()
            .find(|(g, _)| *g == f)
            .map(|(_, t)| t.as_slice())
    }

    /// The expiry argument of time flag `f` (`T`, `N`), "" when absent.
    fn exp_arg(&self, f: u8) -> Vec<u8> {
        self.token(f)
            .and_then(parse::parse_i32)
            .map(|e| expiry(e, self.now_ms))
            .unwrap_or_default()
    }

    /// Seconds left for an expiry argument (`t` after a `T`/`N`): -1 for none.
    fn ttl_of(&self, exp: &[u8]) -> i64 {
        match exp {
            b"0" | b"" => -1,
            b"-1" => 0,
            at => {
                let at: u64 = std::str::from_utf8(at)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                (at.saturating_sub(self.now_ms) as i64 + 999) / 1000
            }
        }
    }

    /// Appends ` O…` and ` k…` in request order (the flags every reply carries).
    fn opaque_key(&self, out: &mut Vec<u8>) {
        for (f, t) in &self.flags {
            match f {
                b'O' => {
                    out.push(b' ');
                    out.push(b'O');
                    out.extend_from_slice(t);
                }
                b'k' => {
                    out.extend_from_slice(b" k");
                    out.extend_from_slice(&self.key);
                }
                _ => {}
            }
        }
    }
}

/// Plans a meta request.
pub fn plan(req: MetaRequest, ctx: &mut Ctx<'_>) -> Job {
    let MetaRequest::Cmd {
        cmd,
        key,
        flags,
        value,
    } = req
    else {
        return Job::local(b"MN\r\n", false);
    };
    let new_cas = match flags.iter().find(|(f, _)| *f == b'E') {
        Some((_, t)) => t.clone(),
        None => take_cas(ctx.next_cas),
    };
    let r = MetaRender {
        cmd,
        key,
        flags,
        now_ms: ctx.now_ms,
        new_cas,
    };
    let meta = exec::meta_key(&r.key);
    let shas = ctx.shas;
    let cas_in = r.token(b'C').unwrap_or_default().to_vec();
    let yes = |f: u8| -> &[u8] { if r.has(f) { b"1" } else { b"" } };
    let request = match cmd {
        MetaCmd::Get => exec::request(&[
            b"EVALSHA",
            shas.mg.as_bytes(),
            b"2",
            &r.key,
            &meta,
            &r.exp_arg(b'T'),
            &r.exp_arg(b'N'),
            &r.new_cas,
        ]),
        MetaCmd::Set => {
            ctx.counters.cmd_set += 1;
            let mode: &[u8] = match r.token(b'M').map(|m| m[0]) {
                Some(b'E') => b"add",
                Some(b'A') => b"append",
                Some(b'P') => b"prepend",
                Some(b'R') => b"replace",
                _ => b"set",
            };
            let flags = r
                .token(b'F')
                .and_then(parse::parse_u64)
                .map_or(0, |f| f as u32);
            let exp = r.exp_arg(b'T');
            let exp = if exp.is_empty() { b"0".to_vec() } else { exp };
            // memcached: add with a CAS works as add (the CAS is not compared).
            let cas_in: &[u8] = if mode == b"add" { b"" } else { &cas_in };
            exec::request(&[
                b"EVALSHA",
                shas.store.as_bytes(),
                b"2",
                &r.key,
                &meta,
                mode,
                &value,
                itoa::Buffer::new().format(flags).as_bytes(),
                &exp,
                cas_in,
                &r.new_cas,
                yes(b'I'),
            ])
        }
        MetaCmd::Delete => exec::request(&[
            b"EVALSHA",
            shas.delete.as_bytes(),
            b"2",
            &r.key,
            &meta,
            &cas_in,
            yes(b'I'),
            &r.new_cas,
            &r.exp_arg(b'T'),
        ]),
        MetaCmd::Arith => {
            let op: &[u8] = match r.token(b'M').map(|m| m[0]) {
                None | Some(b'I' | b'+') => b"incr",
                Some(b'D' | b'-') => b"decr",
                Some(_) => {
                    return Job::local(b"CLIENT_ERROR invalid mode for ma M token\r\n", false);
                }
            };
            let num = |f: u8, default: u64| {
                let v = r.token(f).and_then(parse::parse_u64).unwrap_or(default);
                itoa::Buffer::new().format(v).as_bytes().to_vec()
            };
            exec::request(&[
                b"EVALSHA",
                shas.arith.as_bytes(),
                b"2",
                &r.key,
                &meta,
                op,
                &num(b'D', 1),
                &r.new_cas,
                &r.exp_arg(b'N'),
                &num(b'J', 0),
                &cas_in,
                &r.exp_arg(b'T'),
            ])
        }
    };
    Job {
        parts: vec![Part {
            instance: ctx.slots.of(&r.key),
            request,
        }],
        render: Render::Meta(r),
        noreply: false,
        close: false,
    }
}

fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Integer(i)) => *i,
        _ => 0,
    }
}

fn bytes(v: Option<&Value>) -> &[u8] {
    match v {
        Some(Value::Bulk(b) | Value::Simple(b)) => b,
        _ => b"",
    }
}

/// The reply to a meta command from its script's reply (errors were answered before).
pub fn render(r: &MetaRender, reply: &Value, counters: &mut Counters) -> Vec<u8> {
    let quiet = r.has(b'q');
    let mut out = Vec::new();
    let num = |out: &mut Vec<u8>, f: u8, n: &[u8]| {
        out.push(b' ');
        out.push(f);
        out.extend_from_slice(n);
    };
    match r.cmd {
        MetaCmd::Get => {
            let Value::Array(a) = reply else {
                return exec::server_error(b"ERR unexpected reply from the engine");
            };
            if int(a.first()) == 0 {
                counters.get_misses += 1;
                if quiet {
                    return Vec::new();
                }
                out.extend_from_slice(b"EN");
                r.opaque_key(&mut out);
                out.extend_from_slice(b"\r\n");
                return out;
            }
            counters.get_hits += 1;
            let value = bytes(a.get(1));
            let (flags, cas, state) = exec::flags_cas(a.get(2));
            let pttl = int(a.get(3));
            let created = int(a.get(4)) == 1;
            let won = int(a.get(5)) == 1;
            if r.has(b'v') {
                out.extend_from_slice(b"VA ");
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
            } else {
                out.extend_from_slice(b"HD");
            }
            // `t` shows the TTL as of its place in the flags: after a `T` (or an `N` that
            // created the item) before it, else the stored one.
            let mut ttl = if pttl < 0 { -1 } else { (pttl + 999) / 1000 };
            if created {
                ttl = -1;
            }
            for (f, t) in &r.flags {
                match f {
                    b'T' => ttl = r.ttl_of(&r.exp_arg(b'T')),
                    b'N' if created => ttl = r.ttl_of(&r.exp_arg(b'N')),
                    b's' => num(
                        &mut out,
                        b's',
                        itoa::Buffer::new().format(value.len()).as_bytes(),
                    ),
                    b't' => num(&mut out, b't', itoa::Buffer::new().format(ttl).as_bytes()),
                    b'c' => num(&mut out, b'c', cas),
                    b'f' => num(&mut out, b'f', flags),
                    b'O' => num(&mut out, b'O', t),
                    b'k' => num(&mut out, b'k', &r.key),
                    _ => {}
                }
            }
            let sent = state.contains(&b'T');
            if sent {
                out.extend_from_slice(b" Z");
            }
            if state.contains(&b'X') {
                out.extend_from_slice(b" X");
            }
            if won || created {
                out.extend_from_slice(b" W");
            }
            out.extend_from_slice(b"\r\n");
            if r.has(b'v') {
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        MetaCmd::Set => {
            let w = bytes(Some(reply));
            let code: &[u8] = match w {
                b"STORED" => b"HD",
                b"NOT_STORED" => b"NS",
                b"EXISTS" => b"EX",
                b"NOT_FOUND" => b"NF",
                _ => return exec::server_error(w),
            };
            if quiet && code == b"HD" {
                return Vec::new();
            }
            out.extend_from_slice(code);
            for (f, t) in &r.flags {
                match f {
                    b'O' => num(&mut out, b'O', t),
                    b'k' => num(&mut out, b'k', &r.key),
                    b'c' if code == b"HD" => num(&mut out, b'c', &r.new_cas),
                    b'c' => num(&mut out, b'c', b"0"),
                    _ => {}
                }
            }
            out.extend_from_slice(b"\r\n");
        }
        MetaCmd::Delete => {
            let code: &[u8] = match int(Some(reply)) {
                1 => {
                    counters.delete_hits += 1;
                    b"HD"
                }
                0 => {
                    counters.delete_misses += 1;
                    b"NF"
                }
                _ => b"EX",
            };
            if quiet && code == b"HD" {
                return Vec::new();
            }
            out.extend_from_slice(code);
            r.opaque_key(&mut out);
            out.extend_from_slice(b"\r\n");
        }
        MetaCmd::Arith => {
            let Value::Array(a) = reply else {
                return exec::server_error(b"ERR unexpected reply from the engine");
            };
            match bytes(a.first()) {
                b"OK" | b"CREATED" => {
                    if quiet {
                        return Vec::new();
                    }
                    let value = bytes(a.get(1));
                    let pttl = int(a.get(3));
                    if r.has(b'v') {
                        out.extend_from_slice(b"VA ");
                        out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    for (f, t) in &r.flags {
                        match f {
                            b'c' => num(&mut out, b'c', bytes(a.get(2))),
                            b't' => {
                                let ttl = if pttl < 0 { -1 } else { (pttl + 999) / 1000 };
                                num(&mut out, b't', itoa::Buffer::new().format(ttl).as_bytes())
                            }
                            b'O' => num(&mut out, b'O', t),
                            b'k' => num(&mut out, b'k', &r.key),
                            _ => {}
                        }
                    }
                    out.extend_from_slice(b"\r\n");
                    if r.has(b'v') {
                        out.extend_from_slice(value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                b"NON_NUMERIC" => {
                    return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
                        .to_vec();
                }
                w => {
                    out.extend_from_slice(if w == b"EXISTS" { b"EX" } else { b"NF" });
                    r.opaque_key(&mut out);
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(input: &[u8]) -> Request {
        match parse::parse(input, 1 << 20) {
            parse::Parsed::Ready(r, _) => r,
            other => panic!("{other:?}"),
        }
    }

    fn reply_of(input: &[u8]) -> &'static str {
        match parsed(input) {
            Request::Reject { reply, .. } => reply,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flag_errors() {
        assert_eq!(reply_of(b"mg k v x\r\n"), "CLIENT_ERROR invalid flag");
        assert_eq!(reply_of(b"mg k v v\r\n"), "CLIENT_ERROR duplicate flag");
        assert_eq!(
            reply_of(b"ma k Dx\r\n"),
            "CLIENT_ERROR invalid or duplicate flag"
        );
        assert_eq!(reply_of(b"mg\r\n"), parse::ERROR);
        assert_eq!(reply_of(b"mz\r\n"), parse::ERROR);
        assert_eq!(reply_of(b"ms k\r\n"), BAD_FORMAT);
        assert_eq!(
            reply_of(b"ms k 1 MX\r\nx\r\n"),
            "CLIENT_ERROR invalid mode for ms M token"
        );
    }

    #[test]
    fn ms_reads_its_block() {
        match parsed(b"ms k 2 T10 F3\r\nhi\r\n") {
            Request::Meta(MetaRequest::Cmd {
                cmd, flags, value, ..
            }) => {
                assert_eq!(cmd, MetaCmd::Set);
                assert_eq!(value, b"hi");
                assert_eq!(flags, vec![(b'T', b"10".to_vec()), (b'F', b"3".to_vec())]);
            }
            other => panic!("{other:?}"),
        }
    }
}
