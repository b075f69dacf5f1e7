//! `stats`: the port's own counters (commands as memcached counts them) plus figures summed
//! over the engines' `INFO` (items, bytes, evictions), in memcached's `STAT <name> <value>`
//! lines and order (the subset clients and monitoring read; docs/memcached.md).

use resp::value::Value;

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
    fn sums_the_engines() {
        let a = Value::Bulk(b"# Keyspace\r\ndb0:keys=4,expires=0\r\nevicted_keys:2\r\n".to_vec());
        let b = Value::Bulk(b"db0:keys=2,expires=1\r\nevicted_keys:1\r\n".to_vec());
        let out = String::from_utf8(render(&[a, b], &Counters::default())).unwrap();
        assert!(out.contains("STAT curr_items 3\r\n"), "{out}");
        assert!(out.contains("STAT evictions 3\r\n"), "{out}");
        assert!(out.ends_with("END\r\n"));
    }
}
