//! `stats`: the port's own counters (commands as memcached counts them) plus figures summed
//! over the engines' `INFO` (items, bytes, evictions), in memcached's `STAT <name> <value>`
//! lines and order (the subset clients and monitoring read; docs/memcached.md).

use resp::value::Value;

use super::meta::{MetaCmd, MetaRequest};
use super::parse::{Arith, CasOut, Request, StoreMode};

/// Counters of the memcached port (memcached's names; one per `STAT` line).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Process start, Unix seconds (for `uptime`).
    pub started: u64,
    /// Now, Unix seconds (set before rendering).
    pub now: u64,
    pub curr_connections: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
    pub cmd_get: u64,
    pub cmd_set: u64,
    pub cmd_flush: u64,
    pub cmd_touch: u64,
    pub cmd_meta: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub delete_misses: u64,
    pub delete_hits: u64,
    pub incr_misses: u64,
    pub incr_hits: u64,
    pub decr_misses: u64,
    pub decr_hits: u64,
    pub cas_misses: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    pub touch_misses: u64,
    pub store_too_large: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub threads: u64,
    pub max_connections: u64,
    pub limit_maxbytes: u64,
}

/// The memcached commands counted one by one ([`Totals::commands`], INFO `mccmd_<name>`,
/// the metrics' `recached_memcached_commands_total{command}`).
pub const COMMANDS: [&str; 24] = [
    "get",
    "gets",
    "gat",
    "gats",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "touch",
    "incr",
    "decr",
    "delete",
    "flush_all",
    "version",
    "verbosity",
    "quit",
    "stats",
    "mg",
    "ms",
    "md",
    "ma",
    "mn",
];

/// `req`'s index in [`COMMANDS`]; `None` for bad input (counted as an error, not a command).
pub fn command_index(req: &Request) -> Option<usize> {
    let name = match req {
        Request::Store { mode, .. } => match mode {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
            StoreMode::Cas => "cas",
        },
        Request::Get { cas, touch, .. } => match (touch.is_some(), *cas == CasOut::Yes) {
            (false, false) => "get",
            (false, true) => "gets",
            (true, false) => "gat",
            (true, true) => "gats",
        },
        Request::Touch { .. } => "touch",
        Request::Arith {
            op: Arith::Incr, ..
        } => "incr",
        Request::Arith {
            op: Arith::Decr, ..
        } => "decr",
        Request::Delete { .. } => "delete",
        Request::FlushAll { .. } => "flush_all",
        Request::Version => "version",
        Request::Verbosity { .. } => "verbosity",
        Request::Quit => "quit",
        Request::Stats { .. } => "stats",
        Request::Meta(MetaRequest::Noop) => "mn",
        Request::Meta(MetaRequest::Cmd { cmd, .. }) => match cmd {
            MetaCmd::Get => "mg",
            MetaCmd::Set => "ms",
            MetaCmd::Delete => "md",
            MetaCmd::Arith => "ma",
        },
        Request::Reject { .. } => return None,
    };
    COMMANDS.iter().position(|c| *c == name)
}

/// The port's figures for monitoring: counters that only grow (`stats reset` zeroes
/// [`Counters`], never these) and the connection gauge. The loop publishes a copy once per
/// iteration ([`Shared`]); the proxy's RESP side prints it as INFO `# Memcached`
/// ([`Totals::info`]), which the supervisor's `/metrics` reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Open connections (gauge).
    pub connected: u64,
    /// Connections accepted (over `maxclients` ones included, as Redis counts them).
    pub connections: u64,
    /// Requests parsed (bad input included).
    pub requests: u64,
    /// Per [`COMMANDS`] entry.
    pub commands: [u64; COMMANDS.len()],
    /// Keys found / not found by `get gets gat gats mg` (memcached's `get_hits`/`get_misses`).
    pub get_hits: u64,
    pub get_misses: u64,
    /// Replies `ERROR…`, `CLIENT_ERROR …`, `SERVER_ERROR …` (also when `noreply` hid them).
    pub errors: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    /// Request parts answered "instance unavailable" (the RESP side's `backend_errors`).
    pub backend_errors: u64,
    /// Requests refused by the ACL (`memcached_user`).
    pub acl_denied: u64,
    /// Protocol bytes in and out (plaintext on the TLS port).
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// TLS connections closed on a TLS error (memcached's `ssl_handshake_errors`).
    pub tls_errors: u64,
}

/// The copy of [`Totals`] the loop publishes.
pub type Shared = std::sync::Arc<std::sync::Mutex<Totals>>;

impl Totals {
    /// Counts one rendered reply's error class (memcached's three error words).
    pub fn count_reply(&mut self, reply: &[u8]) {
        if reply.starts_with(b"CLIENT_ERROR") {
            self.client_errors += 1;
        } else if reply.starts_with(b"SERVER_ERROR") {
            self.server_errors += 1;
        } else if reply.starts_with(b"ERROR") {
            self.errors += 1;
        }
    }

    /// INFO's `# Memcached` section (RESP line endings, a blank line after).
    pub fn info(&self) -> String {
        let mut s = format!(
            "# Memcached\r\nmemcached_connected_clients:{}\r\n\
             memcached_total_connections_received:{}\r\nmemcached_total_requests:{}\r\n\
             memcached_get_hits:{}\r\nmemcached_get_misses:{}\r\nmemcached_errors:{}\r\n\
             memcached_client_errors:{}\r\nmemcached_server_errors:{}\r\n\
             memcached_backend_errors:{}\r\nmemcached_acl_denied:{}\r\n\
             memcached_net_input_bytes:{}\r\nmemcached_net_output_bytes:{}\r\n\
             memcached_tls_errors:{}\r\n",
            self.connected,
            self.connections,
            self.requests,
            self.get_hits,
            self.get_misses,
            self.errors,
            self.client_errors,
            self.server_errors,
            self.backend_errors,
            self.acl_denied,
            self.bytes_read,
            self.bytes_written,
            self.tls_errors,
        );
        for (name, calls) in COMMANDS.iter().zip(self.commands) {
            if calls > 0 {
                s.push_str(&format!("mccmd_{name}:calls={calls}\r\n"));
            }
        }
        s.push_str("\r\n");
        s
    }
}

/// `field:value` of an INFO text, as a number (0 when absent).
fn info_field(info: &[u8], name: &str) -> u64 {
    for line in info.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(name.as_bytes())
            && let Some(v) = rest.strip_prefix(b":")
        {
            return std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .map_or(0, |f| f as u64);
        }
    }
    0
}

/// Keys of database 0 (`db0:keys=N,…`).
fn db0_keys(info: &[u8]) -> u64 {
    for line in info.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"db0:keys=") {
            let digits: Vec<u8> = rest
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .copied()
                .collect();
            return std::str::from_utf8(&digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

/// The `stats` reply from the engines' INFO replies and the port's counters.
pub fn render(infos: &[Value], c: &Counters) -> Vec<u8> {
    let (mut keys, mut bytes, mut evictions, mut expired, mut maxmemory) = (0, 0, 0, 0, 0);
    for info in infos {
        let text = match info {
            Value::Bulk(t) | Value::Verbatim { text: t, .. } => t.as_slice(),
            _ => continue,
        };
        keys += db0_keys(text);
        bytes += info_field(text, "used_memory_dataset");
        evictions += info_field(text, "evicted_keys");
        expired += info_field(text, "expired_keys");
        maxmemory += info_field(text, "maxmemory");
    }
    // Each memcached item is two keys (the value and its companion, exec::meta_key).
    let items = keys.div_ceil(2);
    let uptime = c.now.saturating_sub(c.started);
    let rows: Vec<(&str, String)> = vec![
        ("pid", std::process::id().to_string()),
        ("uptime", uptime.to_string()),
        ("time", c.now.to_string()),
        ("version", super::exec::VERSION.to_string()),
        ("pointer_size", (usize::BITS).to_string()),
        ("max_connections", c.max_connections.to_string()),
        ("curr_connections", c.curr_connections.to_string()),
        ("total_connections", c.total_connections.to_string()),
        ("rejected_connections", c.rejected_connections.to_string()),
        ("cmd_get", c.cmd_get.to_string()),
        ("cmd_set", c.cmd_set.to_string()),
        ("cmd_flush", c.cmd_flush.to_string()),
        ("cmd_touch", c.cmd_touch.to_string()),
        ("cmd_meta", c.cmd_meta.to_string()),
        ("get_hits", c.get_hits.to_string()),
        ("get_misses", c.get_misses.to_string()),
        ("get_expired", "0".to_string()),
        ("get_flushed", "0".to_string()),
        ("delete_misses", c.delete_misses.to_string()),
        ("delete_hits", c.delete_hits.to_string()),
        ("incr_misses", c.incr_misses.to_string()),
        ("incr_hits", c.incr_hits.to_string()),
        ("decr_misses", c.decr_misses.to_string()),
        ("decr_hits", c.decr_hits.to_string()),
        ("cas_misses", c.cas_misses.to_string()),
        ("cas_hits", c.cas_hits.to_string()),
        ("cas_badval", c.cas_badval.to_string()),
        ("touch_hits", c.touch_hits.to_string()),
        ("touch_misses", c.touch_misses.to_string()),
        ("store_too_large", c.store_too_large.to_string()),
        ("store_no_memory", "0".to_string()),
        ("bytes_read", c.bytes_read.to_string()),
        ("bytes_written", c.bytes_written.to_string()),
        ("limit_maxbytes", maxmemory.to_string()),
        ("threads", c.threads.to_string()),
        ("curr_items", items.to_string()),
        ("total_items", c.cmd_set.to_string()),
        ("expired_unfetched", "0".to_string()),
        ("evicted_unfetched", "0".to_string()),
        ("bytes", bytes.to_string()),
        ("evictions", evictions.to_string()),
        ("reclaimed", expired.to_string()),
    ];
    let mut out = Vec::new();
    for (name, value) in rows {
        out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"END\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_name_commands_and_classify_errors() {
        let req = |input: &[u8]| match super::super::parse::parse(input, 1 << 20) {
            super::super::parse::Parsed::Ready(r, _) => r,
            _ => panic!("incomplete"),
        };
        let name = |input: &[u8]| command_index(&req(input)).map(|i| COMMANDS[i]);
        assert_eq!(name(b"gats 1 a\r\n"), Some("gats"));
        assert_eq!(name(b"prepend a 0 0 1\r\nx\r\n"), Some("prepend"));
        assert_eq!(name(b"ma a\r\n"), Some("ma"));
        assert_eq!(name(b"flush_all\r\n"), Some("flush_all"));
        assert_eq!(name(b"bogus\r\n"), None);
        let mut t = Totals::default();
        for r in [
            &b"ERROR\r\n"[..],
            b"CLIENT_ERROR x\r\n",
            b"SERVER_ERROR y\r\n",
            b"END\r\n",
        ] {
            t.count_reply(r);
        }
        assert_eq!((t.errors, t.client_errors, t.server_errors), (1, 1, 1));
        t.commands[0] = 4;
        let info = t.info();
        assert!(info.starts_with("# Memcached\r\n"), "{info}");
        assert!(info.contains("\r\nmccmd_get:calls=4\r\n"), "{info}");
        assert!(!info.contains("mccmd_set"), "{info}");
        assert!(info.ends_with("\r\n\r\n"));
    }

    #[test]
    fn sums_the_engines() {
        let a = Value::Bulk(b"# Keyspace\r\ndb0:keys=4,expires=0\r\nevicted_keys:2\r\n".to_vec());
        let b = Value::Bulk(b"db0:keys=2,expires=1\r\nevicted_keys:1\r\n".to_vec());
        let out = String::from_utf8(render(&[a, b], &Counters::default())).unwrap();
        assert!(out.contains("STAT curr_items 3\r\n"), "{out}");
        assert!(out.contains("STAT evictions 3\r\n"), "{out}");
        assert!(out.ends_with("END\r\n"));
    }
}
