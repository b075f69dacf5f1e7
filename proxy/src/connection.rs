//! What the proxy answers about the connection itself, for [`crate::route::plan`]: `HELLO`
//! (RESP2/RESP3 switch, AUTH, SETNAME), `CLIENT` (the proxy's own clients), and the proxy's own
//! INFO sections. Pure: the session and fleet state in, a [`Plan`] out.

use engine_core::command::CommandSpec;

use crate::route::{Args, Fleet, Plan, ReplyMode, Session};
use crate::route::{arity_error, bulk, not_supported, reply_static, sanitize_error};

/// Redis `clientSetName`: no spaces, newlines or other characters outside `!`..`~`.
pub(crate) fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

pub(crate) const BAD_NAME: &[u8] =
    b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n";

/// `HELLO [protover [AUTH user pass] [SETNAME name]]` (Redis `helloCommand`): RESP2 or RESP3.
pub(crate) fn hello<A: Args + ?Sized>(args: &A, session: &mut Session) -> Plan {
    let argc = args.argc();
    let mut proto = session.proto;
    if argc >= 2 {
        // Redis's own checks and texts (networking.c helloCommand).
        match resp::parse_i64(args.arg(1)) {
            Some(2) => proto = resp::Proto::Resp2,
            Some(3) => proto = resp::Proto::Resp3,
            Some(_) => return reply_static(b"-NOPROTO unsupported protocol version\r\n"),
            None => {
                return reply_static(
                    b"-ERR Protocol version is not an integer or out of range\r\n",
                );
            }
        }
    }
    // Options take effect left to right (Redis `helloCommand`): a name set before a bad
    // option stays; only the protocol switch waits for the whole request.
    let mut i = 2;
    while i < argc {
        let opt = args.arg(i);
        let more = argc - i - 1;
        if opt.eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            let n = args.arg(i + 1);
            if !valid_client_name(n) {
                return reply_static(BAD_NAME);
            }
            session.name = Some(n.to_vec());
            i += 2;
        } else {
            let mut out = b"-ERR Syntax error in HELLO option '".to_vec();
            out.extend_from_slice(opt);
            sanitize_error(&mut out[1..]);
            out.extend_from_slice(b"'\r\n");
            return Plan::Reply(out.into());
        }
    }
    // The switch happens before the reply, so the reply is already in the new protocol
    // (a map for RESP3), as Redis does it.
    session.proto = proto;
    let mut out = Vec::new();
    let mut w = resp::ReplyWriter::new(&mut out, proto);
    w.map(7);
    for (k, v) in [
        ("server", "redis"),
        ("version", "7.0.15"),
        ("proto", ""),
        ("id", ""),
        ("mode", "standalone"),
        ("role", "master"),
    ] {
        w.bulk(k.as_bytes());
        match k {
            "proto" => w.integer(proto.version()),
            "id" => w.integer(session.id as i64),
            _ => w.bulk(v.as_bytes()),
        }
    }
    w.bulk(b"modules");
    w.array(0);
    Plan::Reply(out.into())
}

pub(crate) fn client<A: Args + ?Sized>(
    args: &A,
    spec: &'static CommandSpec,
    session: &mut Session,
    fleet: &Fleet,
) -> Plan {
    let sub = args.arg(1);
    let argc = args.argc();
    // NO-TOUCH (Redis 7.2) is not in the 7.0 table either; the proxy has no LRU to spare.
    if sub.eq_ignore_ascii_case(b"NO-TOUCH") {
        if argc != 3 {
            return Plan::Reply(arity_error("client|no-touch").into());
        }
        return on_off(args.arg(2));
    }
    // SETINFO (Redis 7.2) is not in the 7.0 table; clients send it on connect and ignore errors.
    if sub.eq_ignore_ascii_case(b"SETINFO") {
        if argc != 4 {
            return Plan::Reply(arity_error("client|setinfo").into());
        }
        let attr = args.arg(2);
        if attr.eq_ignore_ascii_case(b"LIB-NAME") || attr.eq_ignore_ascii_case(b"LIB-VER") {
            return reply_static(b"+OK\r\n");
        }
        let mut out = b"-ERR Unrecognized option '".to_vec();
        out.extend_from_slice(attr);
        sanitize_error(&mut out[1..]);
        out.extend_from_slice(b"'\r\n");
        return Plan::Reply(out.into());
    }
    let Some(sub_spec) = spec.subcommand(sub) else {
        let mut out = b"-ERR unknown subcommand '".to_vec();
        out.extend_from_slice(&sub[..sub.len().min(128)]);
        out.extend_from_slice(b"'. Try CLIENT HELP.");
        sanitize_error(&mut out[1..]);
        out.extend_from_slice(b"\r\n");
        return Plan::Reply(out.into());
    };
    if !sub_spec.arity_ok(argc) {
        return Plan::Reply(arity_error(sub_spec.name).into());
    }
    match sub_spec.short_name() {
        "setname" => {
            let name = args.arg(2);
            if !valid_client_name(name) {
                return reply_static(BAD_NAME);
            }
            session.name = (!name.is_empty()).then(|| name.to_vec());
            reply_static(b"+OK\r\n")
        }
        "getname" => match &session.name {
            Some(n) => Plan::Reply(bulk(n).into()),
            None if session.proto == resp::Proto::Resp3 => reply_static(b"_\r\n"),
            None => reply_static(b"$-1\r\n"),
        },
        "id" => Plan::Reply(format!(":{}\r\n", session.id).into_bytes().into()),
        // The proxy evicts nothing; the instances' own clients are the proxy's links.
        "no-evict" => on_off(args.arg(2)),
        "reply" => {
            let mode = args.arg(2);
            // OFF and SKIP answer nothing, not even to themselves (Redis clientCommand).
            if mode.eq_ignore_ascii_case(b"on") {
                session.reply = ReplyMode::On;
                reply_static(b"+OK\r\n")
            } else if mode.eq_ignore_ascii_case(b"off") {
                session.reply = ReplyMode::Off;
                reply_static(b"")
            } else if mode.eq_ignore_ascii_case(b"skip") {
                session.reply = ReplyMode::Skip;
                reply_static(b"")
            } else {
                reply_static(b"-ERR syntax error\r\n")
            }
        }
        // Every engine pauses its clients, the proxy's links among them: requests queue on
        // the links until the pause ends (with WRITE, reads behind a paused write on the same
        // link wait too). UNPAUSE goes on the client's own connections: a shared link may be
        // held by a paused request.
        "pause" => Plan::FanOut {
            request: None,
            merge: crate::split::Merge::AllOk,
        },
        "unpause" => Plan::DedicatedFanOut(crate::split::Merge::AllOk),
        "info" => Plan::Clients(crate::clients::Op::Info),
        // Redis's order of checks (networking.c, clientCommand "unblock").
        "unblock" => {
            let error = if argc == 4 {
                let mode = args.arg(3);
                if mode.eq_ignore_ascii_case(b"timeout") {
                    false
                } else if mode.eq_ignore_ascii_case(b"error") {
                    true
                } else {
                    return reply_static(
                        b"-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n",
                    );
                }
            } else {
                false
            };
            match resp::parse_i64(args.arg(2)) {
                Some(id) => Plan::Clients(crate::clients::Op::Unblock {
                    id: u64::try_from(id).unwrap_or(0),
                    error,
                }),
                None => reply_static(b"-ERR value is not an integer or out of range\r\n"),
            }
        }
        "list" | "kill" => {
            let all: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
            let op = match sub_spec.short_name() {
                "list" => crate::clients::parse_list(&all),
                _ => crate::clients::parse_kill(&all, |u| {
                    fleet.acl.user_names().iter().any(|n| n.as_bytes() == u)
                }),
            };
            match op {
                Ok(op) => Plan::Clients(op),
                Err(e) => Plan::Reply(e.into()),
            }
        }
        // Client-side caching (docs/feed.md, "Client-side caching"): every instance tracks
        // the keys it serves the client on the client's own connections to it; their push
        // invalidations are relayed like messages. The state is the same on every instance,
        // so any one answers GETREDIR and TRACKINGINFO.
        "tracking" => {
            let all: Vec<&[u8]> = (2..argc).map(|i| args.arg(i)).collect();
            let on = all[0].eq_ignore_ascii_case(b"on");
            // REDIRECT names a proxy client: each instance gets that client's own
            // connection to it instead (`crate::exec`, "Client-side caching"). A value that
            // is not an id is left for the instances to refuse with Redis's text.
            let redirect = all
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"redirect"))
                .filter(|&r| r + 1 < all.len());
            if on
                && let Some(r) = redirect
                && let Some(target) = resp::parse_i64(all[r + 1]).filter(|n| *n > 0)
            {
                return Plan::TrackingRedirect {
                    args: (0..argc).map(|i| args.arg(i).to_vec()).collect(),
                    at: r + 3,
                    target: target as u64,
                };
            }
            if on {
                session.tracking = true;
                session.redirect = None;
                let argv: Vec<&[u8]> = (0..argc).map(|i| args.arg(i)).collect();
                let mut request = Vec::new();
                resp::encode_request(&mut request, &argv);
                session.tracking_request = Some(request);
            } else if all[0].eq_ignore_ascii_case(b"off") {
                session.tracking = false;
                session.redirect = None;
                session.tracking_request = None;
            }
            Plan::DedicatedFanOut(crate::split::Merge::AllOk)
        }
        "caching" => Plan::DedicatedFanOut(crate::split::Merge::AllOk),
        // A redirect names a proxy client, which the instances know by other ids.
        "getredir" if session.tracking && session.redirect.is_some() => {
            let mut out = Vec::new();
            resp::ReplyWriter::new(&mut out, session.proto)
                .integer(session.redirect.unwrap_or(0) as i64);
            Plan::Reply(out.into())
        }
        "trackinginfo" if session.tracking && session.redirect.is_some() => {
            Plan::DedicatedFanOut(crate::split::Merge::Redirect(session.redirect.unwrap_or(0)))
        }
        "getredir" | "trackinginfo" => Plan::DedicatedFanOut(crate::split::Merge::First),
        _ => not_supported(
            sub_spec,
            "the proxy answers CLIENT SETNAME, GETNAME, ID, SETINFO, INFO, LIST, KILL, \
             UNBLOCK, NO-EVICT, NO-TOUCH, REPLY, PAUSE, UNPAUSE and TRACKING",
        ),
    }
}

/// `on` / `off` (any case) → `+OK`, else Redis's syntax error.
fn on_off(arg: &[u8]) -> Plan {
    if arg.eq_ignore_ascii_case(b"on") || arg.eq_ignore_ascii_case(b"off") {
        reply_static(b"+OK\r\n")
    } else {
        reply_static(b"-ERR syntax error\r\n")
    }
}

/// Which INFO sections a client asked for, by Redis's rules (`genRedisInfoString`): none or
/// `default` = the default sections, `all`/`everything` = every section, else the named ones
/// (any case).
pub struct InfoSections {
    all: bool,
    default: bool,
    named: Vec<String>,
}

impl InfoSections {
    pub fn new(args: &[&[u8]]) -> InfoSections {
        let named: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        InfoSections {
            all: named.iter().any(|s| s == "all" || s == "everything"),
            default: named.is_empty() || named.iter().any(|s| s == "default"),
            named,
        }
    }

    /// Whether the proxy's own section `name` (server, clients, persistence, memcached,
    /// proxy) is included; all of them are default sections.
    pub fn wants(&self, name: &str) -> bool {
        self.all || self.default || self.named.iter().any(|s| s == name)
    }
}

/// The proxy's own INFO sections (those requested); [`Merge::Info`] appends
/// `instances_answering` to `# Proxy` and the instances' merged sections.
pub(crate) fn info_header(fleet: &Fleet, sections: &InfoSections) -> Vec<u8> {
    let mut s = String::new();
    if sections.wants("server") {
        s.push_str(&format!(
            "# Server\r\nredis_version:7.0.15\r\nrecached_version:{}\r\nrecached_role:proxy\r\n\
             process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            fleet.port,
            fleet.started.elapsed().as_secs(),
        ));
    }
    if sections.wants("clients") {
        s.push_str(&format!(
            "# Clients\r\nconnected_clients:{}\r\n\r\n",
            fleet.clients
        ));
    }
    if sections.wants("memcached")
        && let Some(totals) = &fleet.memcached
        && let Ok(t) = totals.lock()
    {
        // The memcached port's figures (its loop publishes them once per iteration).
        s.push_str(&t.info());
    }
    if sections.wants("proxy") {
        s.push_str(&format!(
            "# Proxy\r\ntotal_requests:{}\r\nbackend_errors:{}\r\n\
             client_connections_received:{}\r\nclient_net_input_bytes:{}\r\n\
             client_net_output_bytes:{}\r\nclient_reads_processed:{}\r\n\
             client_writes_processed:{}\r\ninstances:{}\r\n",
            fleet.requests,
            fleet.backend_errors,
            fleet.connections_received,
            fleet.net_input_bytes,
            fleet.net_output_bytes,
            fleet.reads_processed,
            fleet.writes_processed,
            fleet.instances()
        ));
        for (i, addr) in fleet.addrs.iter().enumerate() {
            let status = if fleet.up[i] { "up" } else { "down" };
            s.push_str(&format!("instance{i}:addr={addr},status={status}\r\n"));
        }
    }
    s.into_bytes()
}
