//! The supervisor's Prometheus endpoint: `GET http://<metrics_bind>:<metrics_port>/metrics`
//! answers the fleet's figures in the Prometheus text exposition format 0.0.4.
//!
//! # Shape
//! One thread (started by `recached start`, [`spawn`]) owns a blocking `TcpListener` and
//! serves one connection at a time: read the request head (at most [`MAX_REQUEST`] bytes, for
//! at most [`IO_TIMEOUT`]), answer, close. Only `GET /metrics` (and `/` with a pointer to it)
//! is served; anything else gets 404/405. Nothing is cached: each scrape reads the
//! supervisor's state file (`dir/state.toml`, written atomically on every change, so no lock
//! is shared with the supervisor loop) and sends one RESP `INFO` to each running child, with
//! [`CHILD_TIMEOUT`] for connect, write and read. A child that does not answer is reported
//! with `recached_up 0` and no other series. Work per scrape is bounded by the number of
//! children × [`CHILD_TIMEOUT`].
//!
//! The listener binds `metrics_bind` (default 127.0.0.1: metrics are not for the world).
//!
//! # Series (label `instance` = `engine-<i>`, `proxy-0`, `fanout-0`)
//! | series | type | source |
//! |---|---|---|
//! | `recached_up` | gauge | 1 if the child answered the RESP `INFO` (an error reply counts) |
//! | `recached_restarts_total` | counter | supervisor state |
//! | `recached_memory_bytes` | gauge | INFO `used_memory` (the logical estimate) |
//! | `recached_rss_bytes` | gauge | INFO `used_memory_rss` |
//! | `recached_maxmemory_bytes` | gauge | INFO `maxmemory` |
//! | `recached_keys` | gauge | INFO keyspace `dbN:keys`, summed over the databases |
//! | `recached_expired_keys_total` | counter | INFO `expired_keys` |
//! | `recached_evicted_keys_total` | counter | INFO `evicted_keys` |
//! | `recached_keyspace_hits_total` / `_misses_total` | counter | INFO stats |
//! | `recached_commands_total{command}` | counter | INFO commandstats `calls` |
//! | `recached_connected_clients` | gauge | INFO `connected_clients` (engines, proxy) |
//!
//! The proxy's figures per client protocol, label `protocol` = `resp` (proxy INFO `# Proxy`
//! and `# Clients`) or `memcached` (proxy INFO `# Memcached`, only while the memcached port
//! runs; docs/memcached.md):
//!
//! | series | type | `resp` | `memcached` |
//! |---|---|---|---|
//! | `recached_proxy_connections` | gauge | `connected_clients` | `memcached_connected_clients` |
//! | `recached_proxy_connections_received_total` | counter | `client_connections_received` | `memcached_total_connections_received` |
//! | `recached_proxy_requests_total` | counter | `total_requests` | `memcached_total_requests` |
//! | `recached_proxy_backend_errors_total` | counter | `backend_errors` | `memcached_backend_errors` |
//! | `recached_proxy_net_input_bytes_total` | counter | `client_net_input_bytes` | `memcached_net_input_bytes` |
//! | `recached_proxy_net_output_bytes_total` | counter | `client_net_output_bytes` | `memcached_net_output_bytes` |
//!
//! And the memcached port's own (label `protocol="memcached"` too, so one selector finds
//! every memcached series):
//!
//! | series | type | source |
//! |---|---|---|
//! | `recached_memcached_commands_total{command}` | counter | `mccmd_<command>:calls=N` (get, gets, gat, gats, set, add, replace, append, prepend, cas, touch, incr, decr, delete, flush_all, version, verbosity, quit, stats, mg, ms, md, ma, mn) |
//! | `recached_memcached_get_hits_total` / `_get_misses_total` | counter | `memcached_get_hits` / `_misses` (keys found / not found by get gets gat gats mg) |
//! | `recached_memcached_errors_total{kind}` | counter | `memcached_errors`, `_client_errors`, `_server_errors`: replies `ERROR`, `CLIENT_ERROR`, `SERVER_ERROR` |
//! | `recached_memcached_acl_denied_total` | counter | `memcached_acl_denied` (`memcached_user`'s refusals) |
//! | `recached_memcached_tls_errors_total` | counter | `memcached_tls_errors` |
//!
//! Engine series (`recached_commands_total`, `recached_keyspace_hits_total`, …) count what the
//! engines ran for both protocols (a memcached `get` is an `MGET` there).
//! | `recached_fanout_browsers` | gauge | fan-out INFO `connected_browsers` |
//! | `recached_fanout_keychanges_sent_total` | counter | fan-out INFO `keychanges_sent` |
//! | `recached_fanout_resyncs_total` | counter | fan-out INFO `resyncs` |
//!
//! Fan-out series appear only when the state lists a `fanout` child that answers a RESP
//! `INFO` with those fields; a field a child does not report is simply left out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use resp::Value;

use crate::fleet;
use crate::reply::ReplyReader;
use crate::state::{self, Role};

/// Longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Read/write timeout of a scraper's connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connect/read/write timeout per child INFO.
pub const CHILD_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest INFO reply accepted from a child.
const MAX_INFO: usize = 4 << 20;

/// Binds `bind:port` and serves metrics on a thread until the process exits. A bind failure
/// is returned (the caller logs it and runs the fleet without metrics).
pub fn spawn(bind: &str, port: u16, dir: PathBuf) -> std::io::Result<()> {
    let listener = TcpListener::bind((bind, port))?;
    log::info!("metrics on http://{}/metrics", listener.local_addr()?);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        if let Err(e) = serve(stream, &dir) {
                            log::debug!("metrics connection: {e}");
                        }
                    }
                    Err(e) => {
                        log::warn!("metrics accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
    Ok(())
}

/// One HTTP exchange.
fn serve(mut stream: TcpStream, dir: &Path) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = render(&scrape(dir));
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        ("GET", "/") => respond(
            &mut stream,
            "200 OK",
            "text/plain",
            "recached supervisor: metrics at /metrics\n",
        ),
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "not found\n"),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n",
        ),
    }
}

fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// What one scrape learned about one child.
#[derive(Debug, Default)]
pub struct ChildFigures {
    /// `engine-0`, `proxy-0`, `fanout-0`.
    pub instance: String,
    pub role: String,
    pub restarts: u64,
    /// The child's INFO fields (`None`: it did not answer).
    pub info: Option<Info>,
}

/// Parsed INFO: `field → value`, plus commandstats calls per command.
#[derive(Debug, Default)]
pub struct Info {
    pub fields: BTreeMap<String, String>,
    pub commands: BTreeMap<String, u64>,
    /// The proxy's memcached commands (`mccmd_<name>:calls=N`).
    pub memcached_commands: BTreeMap<String, u64>,
    pub keys: u64,
}

/// Reads the state file and asks each running child for INFO.
fn scrape(dir: &Path) -> Vec<ChildFigures> {
    let Some(state) = state::read(dir) else {
        return Vec::new();
    };
    state
        .children
        .iter()
        .map(|c| {
            let host = c.host.clone().unwrap_or_else(|| state.bind.clone());
            let request: &[&str] = match c.role {
                Role::Engine => &["INFO", "everything"],
                Role::Proxy => &["INFO", "proxy", "clients", "memcached"],
                Role::Fanout => &["INFO"],
            };
            // Engines and the proxy require the internal credential when the fleet has a
            // password (crate::auth); the fan-out's RESP side has no AUTH.
            let login = match c.role {
                Role::Engine | Role::Proxy => crate::auth::fleet_login(),
                Role::Fanout => None,
            };
            let info = c
                .pid
                .and_then(|_| fetch_info(fleet::connect_host(&host), c.port, login, request))
                .map(|text| parse_info(&text));
            ChildFigures {
                instance: format!("{}-{}", c.role, c.index),
                role: c.role.name().into(),
                restarts: c.restarts,
                info,
            }
        })
        .collect()
}

/// One INFO round trip, after `login` (an `AUTH` request) if given; `None` on any failure or
/// timeout, `Some("")` for an error reply (a refused login included).
fn fetch_info(host: &str, port: u16, login: Option<Vec<u8>>, request: &[&str]) -> Option<String> {
    let mut stream = recached_net::listen::connect(host, port, CHILD_TIMEOUT).ok()?;
    let mut r = ReplyReader::new(stream.try_clone().ok()?, MAX_INFO);
    if let Some(login) = login {
        stream.write_all(&login).ok()?;
        if r.read().ok()? != Value::Simple(b"OK".to_vec()) {
            // Answered, so up; without INFO fields.
            return Some(String::new());
        }
    }
    let mut req = Vec::new();
    resp::encode_request(&mut req, request);
    stream.write_all(&req).ok()?;
    match r.read().ok()? {
        // Alive but without INFO (the fan-out answers only PING in RESP): up, no fields.
        Value::Error(_) | Value::Simple(_) => Some(String::new()),
        Value::Bulk(text) | Value::Verbatim { text, .. } => {
            Some(String::from_utf8_lossy(&text).into_owned())
        }
        _ => None,
    }
}

/// `field:value` lines; `cmdstat_<name>:calls=N,…`; `dbN:keys=N,…` (summed).
pub fn parse_info(text: &str) -> Info {
    let mut info = Info::default();
    for line in text.lines() {
        let line = line.trim_end();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if let Some(cmd) = k.strip_prefix("cmdstat_") {
            if let Some(calls) = kv_field(v, "calls") {
                info.commands.insert(cmd.to_string(), calls);
            }
        } else if let Some(cmd) = k.strip_prefix("mccmd_") {
            if let Some(calls) = kv_field(v, "calls") {
                info.memcached_commands.insert(cmd.to_string(), calls);
            }
        } else if k.starts_with("db") && k[2..].bytes().all(|b| b.is_ascii_digit()) {
            info.keys += kv_field(v, "keys").unwrap_or(0);
        } else {
            info.fields.insert(k.to_string(), v.to_string());
        }
    }
    info
}

/// `name=N` inside `a=1,b=2`.
fn kv_field(v: &str, name: &str) -> Option<u64> {
    v.split(',')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
        .and_then(|n| n.parse().ok())
}

/// Label value escaping of the text format (`\`, `"`, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric family being written: `# HELP`, `# TYPE`, then samples.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

fn family<'a>(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out }
}

/// Series fed by one INFO field: (metric, type, help, field, roles it applies to).
const FIELD_SERIES: &[(&str, &str, &str, &str, &[&str])] = &[
    (
        "recached_memory_bytes",
        "gauge",
        "Logical memory estimate of the dataset plus baseline (INFO used_memory).",
        "used_memory",
        &["engine"],
    ),
    (
        "recached_rss_bytes",
        "gauge",
        "Resident set size of the process (INFO used_memory_rss).",
        "used_memory_rss",
        &["engine"],
    ),
    (
        "recached_maxmemory_bytes",
        "gauge",
        "Configured memory limit, 0 = none (INFO maxmemory).",
        "maxmemory",
        &["engine"],
    ),
    (
        "recached_expired_keys_total",
        "counter",
        "Keys deleted because their TTL passed.",
        "expired_keys",
        &["engine"],
    ),
    (
        "recached_evicted_keys_total",
        "counter",
        "Keys evicted by the maxmemory policy.",
        "evicted_keys",
        &["engine"],
    ),
    (
        "recached_keyspace_hits_total",
        "counter",
        "Reads that found their key.",
        "keyspace_hits",
        &["engine"],
    ),
    (
        "recached_keyspace_misses_total",
        "counter",
        "Reads that did not find their key.",
        "keyspace_misses",
        &["engine"],
    ),
    (
        "recached_connected_clients",
        "gauge",
        "Client connections.",
        "connected_clients",
        &["engine", "proxy"],
    ),
    (
        "recached_fanout_browsers",
        "gauge",
        "Browsers connected to the fan-out.",
        "connected_browsers",
        &["fanout"],
    ),
    (
        "recached_fanout_keychanges_sent_total",
        "counter",
        "Keychange messages the fan-out sent to browsers.",
        "keychanges_sent",
        &["fanout"],
    ),
    (
        "recached_fanout_resyncs_total",
        "counter",
        "Browser resyncs (gap, overflow or ring too short).",
        "resyncs",
        &["fanout"],
    ),
];

/// The proxy's series per protocol: (metric, type, help, RESP field, memcached field).
const PROTOCOL_SERIES: &[(&str, &str, &str, &str, &str)] = &[
    (
        "recached_proxy_connections",
        "gauge",
        "Client connections of the proxy, by protocol.",
        "connected_clients",
        "memcached_connected_clients",
    ),
    (
        "recached_proxy_connections_received_total",
        "counter",
        "Client connections the proxy accepted, by protocol.",
        "client_connections_received",
        "memcached_total_connections_received",
    ),
    (
        "recached_proxy_requests_total",
        "counter",
        "Requests the proxy routed, by protocol.",
        "total_requests",
        "memcached_total_requests",
    ),
    (
        "recached_proxy_backend_errors_total",
        "counter",
        "Requests (or parts) the proxy answered with an instance-unavailable error, by protocol.",
        "backend_errors",
        "memcached_backend_errors",
    ),
    (
        "recached_proxy_net_input_bytes_total",
        "counter",
        "Protocol bytes read from clients (plaintext on TLS ports), by protocol.",
        "client_net_input_bytes",
        "memcached_net_input_bytes",
    ),
    (
        "recached_proxy_net_output_bytes_total",
        "counter",
        "Protocol bytes written to clients (plaintext on TLS ports), by protocol.",
        "client_net_output_bytes",
        "memcached_net_output_bytes",
    ),
];

/// A label beyond `instance` and `protocol`.
type Label = Option<(&'static str, &'static str)>;

/// The memcached port's own series: (metric, help, field, extra label).
const MEMCACHED_SERIES: &[(&str, &str, &str, Label)] = &[
    (
        "recached_memcached_get_hits_total",
        "Keys found by memcached retrievals (get gets gat gats mg).",
        "memcached_get_hits",
        None,
    ),
    (
        "recached_memcached_get_misses_total",
        "Keys not found by memcached retrievals (get gets gat gats mg).",
        "memcached_get_misses",
        None,
    ),
    (
        "recached_memcached_errors_total",
        "memcached error replies, by kind (ERROR, CLIENT_ERROR, SERVER_ERROR).",
        "memcached_errors",
        Some(("kind", "error")),
    ),
    (
        "recached_memcached_errors_total",
        "",
        "memcached_client_errors",
        Some(("kind", "client_error")),
    ),
    (
        "recached_memcached_errors_total",
        "",
        "memcached_server_errors",
        Some(("kind", "server_error")),
    ),
    (
        "recached_memcached_acl_denied_total",
        "memcached requests refused by memcached_user's ACL rules.",
        "memcached_acl_denied",
        None,
    ),
    (
        "recached_memcached_tls_errors_total",
        "memcached TLS connections closed on a TLS error (bad handshake, plaintext client).",
        "memcached_tls_errors",
        None,
    ),
];

/// The proxy's per-protocol and memcached series (see the module docs).
fn render_protocols(out: &mut String, children: &[ChildFigures]) {
    let proxies: Vec<(&str, &Info)> = children
        .iter()
        .filter(|c| c.role == "proxy")
        .filter_map(|c| Some((c.instance.as_str(), c.info.as_ref()?)))
        .collect();
    let num =
        |info: &Info, field: &str| -> Option<u64> { info.fields.get(field)?.trim().parse().ok() };
    for (name, kind, help, resp_field, mc_field) in PROTOCOL_SERIES {
        let mut samples = Vec::new();
        for (inst, info) in &proxies {
            for (protocol, field) in [("resp", resp_field), ("memcached", mc_field)] {
                if let Some(v) = num(info, field) {
                    samples.push((*inst, protocol, v));
                }
            }
        }
        if samples.is_empty() {
            continue;
        }
        let mut f = family(out, name, kind, help);
        for (inst, protocol, v) in samples {
            f.sample(name, &[("instance", inst), ("protocol", protocol)], v);
        }
    }
    let mc: Vec<(&str, &Info)> = proxies
        .into_iter()
        .filter(|(_, i)| i.fields.contains_key("memcached_total_requests"))
        .collect();
    if mc.is_empty() {
        return;
    }
    let name = "recached_memcached_commands_total";
    let mut f = family(
        out,
        name,
        "counter",
        "memcached commands received by the proxy's memcached port, by command.",
    );
    for (inst, info) in &mc {
        for (cmd, calls) in &info.memcached_commands {
            f.sample(
                name,
                &[
                    ("instance", inst),
                    ("protocol", "memcached"),
                    ("command", cmd),
                ],
                *calls,
            );
        }
    }
    let mut open = "";
    for (name, help, field, label) in MEMCACHED_SERIES {
        let mut f = if *name != open {
            open = name;
            family(out, name, "counter", help)
        } else {
            Family { out: &mut *out }
        };
        for (inst, info) in &mc {
            let v = num(info, field).unwrap_or(0);
            let mut labels = vec![("instance", *inst), ("protocol", "memcached")];
            labels.extend(label.iter().copied());
            f.sample(name, &labels, v);
        }
    }
}

/// The exposition text for one scrape.
pub fn render(children: &[ChildFigures]) -> String {
    let mut out = String::with_capacity(4096);
    let mut f = family(
        &mut out,
        "recached_up",
        "gauge",
        "1 if the child answered INFO during this scrape.",
    );
    for c in children {
        f.sample(
            "recached_up",
            &[("instance", &c.instance), ("role", &c.role)],
            u64::from(c.info.is_some()),
        );
    }
    let mut f = family(
        &mut out,
        "recached_restarts_total",
        "counter",
        "Restarts of the child by the supervisor since the fleet started.",
    );
    for c in children {
        f.sample(
            "recached_restarts_total",
            &[("instance", &c.instance)],
            c.restarts,
        );
    }
    let engines: Vec<(&str, &Info)> = children
        .iter()
        .filter(|c| c.role == "engine")
        .filter_map(|c| Some((c.instance.as_str(), c.info.as_ref()?)))
        .collect();
    if !engines.is_empty() {
        let mut f = family(&mut out, "recached_keys", "gauge", "Keys stored.");
        for (inst, info) in &engines {
            f.sample("recached_keys", &[("instance", inst)], info.keys);
        }
    }
    for (name, kind, help, field, roles) in FIELD_SERIES {
        let samples: Vec<(&str, u64)> = children
            .iter()
            .filter(|c| roles.contains(&c.role.as_str()))
            .filter_map(|c| {
                let v = c.info.as_ref()?.fields.get(*field)?.trim().parse().ok()?;
                Some((c.instance.as_str(), v))
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        let mut f = family(&mut out, name, kind, help);
        for (inst, v) in samples {
            f.sample(name, &[("instance", inst)], v);
        }
    }
    render_protocols(&mut out, children);
    if engines.iter().any(|(_, i)| !i.commands.is_empty()) {
        let name = "recached_commands_total";
        let mut f = family(
            &mut out,
            name,
            "counter",
            "Commands run, by command (INFO commandstats calls).",
        );
        for (inst, info) in &engines {
            for (cmd, calls) in &info.commands {
                f.sample(name, &[("instance", inst), ("command", cmd)], *calls);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_and_renders_families() {
        let info = parse_info(
            "# Memory\r\nused_memory:1000\r\nused_memory_rss:4096\r\n# Stats\r\nevicted_keys:3\r\n\
             # Commandstats\r\ncmdstat_get:calls=5,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n\
             cmdstat_config|get:calls=1,usec=0\r\n# Keyspace\r\ndb0:keys=42,expires=1,avg_ttl=3\r\n",
        );
        assert_eq!(info.keys, 42);
        assert_eq!(info.commands["get"], 5);
        assert_eq!(info.commands["config|get"], 1);
        assert_eq!(info.fields["used_memory"], "1000");
        let text = render(&[
            ChildFigures {
                instance: "engine-0".into(),
                role: "engine".into(),
                restarts: 2,
                info: Some(info),
            },
            ChildFigures {
                instance: "proxy-0".into(),
                role: "proxy".into(),
                restarts: 0,
                info: None,
            },
        ]);
        assert!(text.contains("recached_up{instance=\"proxy-0\",role=\"proxy\"} 0\n"));
        assert!(text.contains("recached_restarts_total{instance=\"engine-0\"} 2\n"));
        assert!(text.contains("recached_memory_bytes{instance=\"engine-0\"} 1000\n"));
        assert!(text.contains("recached_keys{instance=\"engine-0\"} 42\n"));
        assert!(
            text.contains(
                "recached_commands_total{instance=\"engine-0\",command=\"config|get\"} 1\n"
            )
        );
        // A family appears once, with its TYPE before its samples.
        assert_eq!(
            text.matches("# TYPE recached_evicted_keys_total counter")
                .count(),
            1
        );
        assert!(!text.contains("fanout"));
        assert!(
            !text.contains("recached_memcached_"),
            "no memcached port, no series"
        );
    }

    #[test]
    fn proxy_series_are_labelled_by_protocol() {
        let info = parse_info(
            "# Clients\r\nconnected_clients:3\r\n\r\n# Memcached\r\n\
             memcached_connected_clients:2\r\nmemcached_total_connections_received:5\r\n\
             memcached_total_requests:9\r\nmemcached_get_hits:4\r\nmemcached_get_misses:1\r\n\
             memcached_errors:1\r\nmemcached_client_errors:2\r\nmemcached_server_errors:0\r\n\
             memcached_backend_errors:0\r\nmemcached_acl_denied:2\r\n\
             memcached_net_input_bytes:100\r\nmemcached_net_output_bytes:200\r\n\
             memcached_tls_errors:0\r\nmccmd_get:calls=5\r\nmccmd_set:calls=3\r\n\r\n\
             # Proxy\r\ntotal_requests:7\r\nbackend_errors:0\r\nclient_connections_received:4\r\n",
        );
        assert_eq!(info.memcached_commands["get"], 5);
        let text = render(&[ChildFigures {
            instance: "proxy-0".into(),
            role: "proxy".into(),
            restarts: 0,
            info: Some(info),
        }]);
        for line in [
            "recached_proxy_connections{instance=\"proxy-0\",protocol=\"resp\"} 3\n",
            "recached_proxy_connections{instance=\"proxy-0\",protocol=\"memcached\"} 2\n",
            "recached_proxy_requests_total{instance=\"proxy-0\",protocol=\"resp\"} 7\n",
            "recached_proxy_requests_total{instance=\"proxy-0\",protocol=\"memcached\"} 9\n",
            "recached_proxy_connections_received_total{instance=\"proxy-0\",protocol=\"resp\"} 4\n",
            "recached_proxy_net_output_bytes_total{instance=\"proxy-0\",protocol=\"memcached\"} 200\n",
            "recached_memcached_commands_total{instance=\"proxy-0\",protocol=\"memcached\",command=\"set\"} 3\n",
            "recached_memcached_get_hits_total{instance=\"proxy-0\",protocol=\"memcached\"} 4\n",
            "recached_memcached_errors_total{instance=\"proxy-0\",protocol=\"memcached\",kind=\"client_error\"} 2\n",
            "recached_memcached_acl_denied_total{instance=\"proxy-0\",protocol=\"memcached\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        // One HELP/TYPE per family, the error kinds included.
        assert_eq!(
            text.matches("# TYPE recached_memcached_errors_total counter")
                .count(),
            1
        );
        // RESP bytes are not in this INFO: no RESP sample for them.
        assert!(!text.contains("net_input_bytes_total{instance=\"proxy-0\",protocol=\"resp\"}"));
    }
}
