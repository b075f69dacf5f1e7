//! The memcached text protocol for the load generator (`recached-bench run --protocol
//! memcached`, issue 22): request encoding, a full reply scanner, and the key-to-server choice
//! of a memcached client with a server list.
//!
//! # Requests
//!
//! ```text
//! get <key>\r\n
//! set <key> 0 <exptime> <n>\r\n<n bytes>\r\n        (exptime: --ttl-ms rounded up to seconds)
//! ```
//!
//! # Replies
//!
//! [`scan`] reads one whole reply: `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n` blocks
//! up to `END\r\n` (each data block must end in `\r\n` exactly where its length says), `END`
//! alone (a miss), `STORED`, the error lines `ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`, and
//! the other status words of protocol.txt (`NOT_STORED`, `EXISTS`, `NOT_FOUND`, `DELETED`,
//! `TOUCHED`, `OK`, `VERSION …`, a number). Anything else, an over-long line or a data block
//! not ending in `\r\n` is a protocol error (the generator then drops the connection). [`classify`]
//! then judges it against the request: a `get` wants `VALUE…END` (a hit) or `END` (a miss), a
//! `set` wants `STORED`; everything else is counted as an error under its first word.
//!
//! # Several servers
//!
//! With several `--target`s each key goes to `one_at_a_time(key) mod N` ([`server_for`]):
//! libmemcached's defaults (Jenkins' one-at-a-time hash, `MEMCACHED_DISTRIBUTION_MODULA`), so
//! two `memcached -t 1` processes are driven as one cache, the way an application's client
//! with a two-server list drives them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::loadgen::Op;
use crate::reply::Reply;

/// Longest reply line accepted (a `VALUE` line holds a key of ≤ 250 bytes and three numbers).
pub const MAX_LINE: usize = 4096;
/// Largest data block accepted (memcached's item size limit is 1 MB by default, at most 1 GB).
pub const MAX_DATA: usize = 1 << 30;

/// One complete memcached reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McReply {
    /// `VALUE … END` with this many values.
    Hit(usize),
    /// `END` alone.
    Miss,
    /// `STORED`.
    Stored,
    /// Another status line (`NOT_STORED`, `EXISTS`, `NOT_FOUND`, `DELETED`, `TOUCHED`, `OK`,
    /// `VERSION`, or `number` for a digits-only line): its first word.
    Status(String),
    /// `ERROR`, `CLIENT_ERROR …` or `SERVER_ERROR …`: its first word.
    Error(String),
}

/// The first `\r\n`-terminated line at `buf[from..]`: `Ok(None)` if incomplete.
fn line(buf: &[u8], from: usize) -> Result<Option<(&[u8], usize)>, String> {
    let rest = &buf[from.min(buf.len())..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) if i <= MAX_LINE => Ok(Some((&rest[..i], from + i + 2))),
        Some(_) => Err("reply line too long".into()),
        None if rest.len() > MAX_LINE + 1 => Err("reply line too long".into()),
        None => Ok(None),
    }
}

/// Scans one reply at the start of `buf`: `Ok(None)` = incomplete, `Ok(Some((reply, len)))` =
/// a complete reply of `len` bytes, `Err` = not a memcached reply.
pub fn scan(buf: &[u8]) -> Result<Option<(McReply, usize)>, String> {
    let Some((first, mut pos)) = line(buf, 0)? else {
        return Ok(None);
    };
    let word = first.split(|&b| b == b' ').next().unwrap_or_default();
    let reply = match word {
        b"VALUE" => {
            let mut header = first;
            let mut values = 0usize;
            loop {
                let f: Vec<&[u8]> = header.split(|&b| b == b' ').collect();
                if !(f.len() == 4 || f.len() == 5) || f[0] != b"VALUE" || f[1].is_empty() {
                    return Err(format!(
                        "bad VALUE line {:?}",
                        String::from_utf8_lossy(header)
                    ));
                }
                let num = |s: &[u8]| -> Option<u64> {
                    (!s.is_empty() && s.iter().all(u8::is_ascii_digit))
                        .then(|| std::str::from_utf8(s).ok()?.parse().ok())
                        .flatten()
                };
                let (Some(_flags), Some(n)) = (num(f[2]), num(f[3])) else {
                    return Err(format!(
                        "bad VALUE line {:?}",
                        String::from_utf8_lossy(header)
                    ));
                };
                if f.len() == 5 && num(f[4]).is_none() {
                    return Err("bad CAS in VALUE line".into());
                }
                let n = n as usize;
                if n > MAX_DATA {
                    return Err(format!("data block of {n} bytes"));
                }
                if buf.len() < pos + n + 2 {
                    return Ok(None);
                }
                if &buf[pos + n..pos + n + 2] != b"\r\n" {
                    return Err("data block does not end where its length says".into());
                }
                pos += n + 2;
                values += 1;
                let Some((next, after)) = line(buf, pos)? else {
                    return Ok(None);
                };
                pos = after;
                if next == b"END" {
                    break McReply::Hit(values);
                }
                header = next;
            }
        }
        b"END" if first.len() == 3 => McReply::Miss,
        b"STORED" if first.len() == 6 => McReply::Stored,
        b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR" => {
            McReply::Error(String::from_utf8_lossy(word).into_owned())
        }
        b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" | b"DELETED" | b"TOUCHED" | b"OK" | b"VERSION" => {
            McReply::Status(String::from_utf8_lossy(word).into_owned())
        }
        w if !w.is_empty() && first.iter().all(u8::is_ascii_digit) => {
            McReply::Status("number".into())
        }
        _ => {
            return Err(format!(
                "not a memcached reply: {:?}",
                String::from_utf8_lossy(&first[..first.len().min(64)])
            ));
        }
    };
    Ok(Some((reply, pos)))
}

/// Judges a reply against the request it answers: a `get` wants a hit ([`Reply::Value`]) or a
/// miss ([`Reply::Nil`]), a `set` wants `STORED` ([`Reply::Value`]); anything else is an error
/// named by its first word (`SERVER_ERROR`, `NOT_STORED`, `VALUE` for a `set` answered with a
/// value, …).
pub fn classify(op: Op, r: &McReply) -> Reply {
    match (op, r) {
        (_, McReply::Error(w)) => Reply::Error(w.clone()),
        (Op::Get, McReply::Hit(_)) => Reply::Value,
        (Op::Get, McReply::Miss) => Reply::Nil,
        (Op::Set, McReply::Stored) => Reply::Value,
        (_, McReply::Status(w)) => Reply::Error(w.clone()),
        (_, McReply::Hit(_)) => Reply::Error("VALUE".into()),
        (_, McReply::Miss) => Reply::Error("END".into()),
        (_, McReply::Stored) => Reply::Error("STORED".into()),
    }
}

/// Appends the request for `op` on `key` (only `get` and `set`; see [`check_mix`]).
pub fn encode(buf: &mut Vec<u8>, op: Op, key: &[u8], value: &[u8], exptime: u64) {
    match op {
        Op::Set => {
            let mut head = String::with_capacity(32);
            let _ = write!(head, " 0 {exptime} {}\r\n", value.len());
            buf.extend_from_slice(b"set ");
            buf.extend_from_slice(key);
            buf.extend_from_slice(head.as_bytes());
            buf.extend_from_slice(value);
            buf.extend_from_slice(b"\r\n");
        }
        _ => {
            buf.extend_from_slice(b"get ");
            buf.extend_from_slice(key);
            buf.extend_from_slice(b"\r\n");
        }
    }
}

/// `set`'s exptime for a TTL in milliseconds: whole seconds, rounded up (0 = never expires).
pub fn exptime(ttl_ms: u64) -> u64 {
    ttl_ms.div_ceil(1000)
}

/// Refuses what the memcached mode cannot send: commands other than get and set, and key
/// prefixes memcached would reject (keys ≤ 250 bytes, no spaces or control characters).
pub fn check_mix(mix: &[(Op, u64)], key_prefix: &str) -> Result<(), String> {
    if let Some((op, _)) = mix.iter().find(|(op, _)| !matches!(op, Op::Get | Op::Set)) {
        return Err(format!(
            "--protocol memcached sends get and set only, not {op:?}"
        ));
    }
    if key_prefix.len() > 230 || key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "--key-prefix {key_prefix:?}: memcached keys are ≤ 250 bytes without spaces or control characters"
        ));
    }
    Ok(())
}

/// Jenkins' one-at-a-time hash (libmemcached's default, `hashkit_one_at_a_time`).
pub fn one_at_a_time(key: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &b in key {
        h = h.wrapping_add(u32::from(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

/// The server (index into the target list) of `key` among `n`: `one_at_a_time(key) mod n`.
pub fn server_for(key: &[u8], n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (one_at_a_time(key) as usize) % n
    }
}

/// Asks a memcached server for `version` (1 s timeouts): `{"memcached_version": "1.6.18"}`,
/// or an empty map when it does not answer.
pub fn server_info(addr: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(sa) = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .ok()
        .and_then(|mut a| a.next())
    else {
        return out;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(1)) else {
        return out;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"version\r\n").is_err() {
        return out;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && buf.len() < 4096 && !buf.ends_with(b"\r\n") {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    if let Some(v) = String::from_utf8_lossy(&buf)
        .trim()
        .strip_prefix("VERSION ")
    {
        out.insert("memcached_version".into(), v.to_string());
    }
    out
}

/// Median of the values at `path` in `docs` (0 when none).
fn med(docs: &[&crate::report::Doc], path: &[&str]) -> f64 {
    crate::report::median(
        docs.iter()
            .map(|d| {
                let mut v = &d.v;
                for p in path {
                    v = &v[*p];
                }
                v.as_f64().unwrap_or(0.0)
            })
            .collect(),
    )
}

/// The report's section for `suite=memcached` (scripts/bench-memcached.sh): per workload and
/// system, the closed-loop peak and its ratio to `memcached -t 2`, then the open-loop
/// percentiles at half the system's own peak and at the common rate (half the slowest
/// system's peak in that round), each the median over the rounds.
pub fn report_section(md: &mut String, docs: &[&crate::report::Doc]) {
    md.push_str("## The memcached port (`scripts/bench-memcached.sh`)\n\n");
    md.push_str(
        "recached's memcached port (the proxy in front of 2 engines) against `memcached -t 2` \
         and two `memcached -t 1` processes (keys split by the client, one-at-a-time hash), \
         the same load from `recached-bench run --protocol memcached`, rounds interleaved. \
         *peak*: closed loop (each connection sends its next request when the last is \
         answered), requests/s. *½ own* and *common*: open loop (Poisson arrivals, latency \
         from each request's intended start) at half the system's own peak and at half the \
         slowest system's peak of the round. Latencies in ms; medians over the rounds. \
         Target (issue 22): ≥ 1.0× memcached -t 2's throughput at an equal or lower p99.\n\n",
    );
    crate::report::run_line(md, docs);
    let loads: Vec<f64> = docs
        .iter()
        .filter_map(|d| d.v["host"]["loadavg_1m"].as_f64())
        .collect();
    let _ = writeln!(
        md,
        "memcached {}; 1-minute load average as the results were written: {:.1} to {:.1}.\n",
        crate::report::label_values(docs, "memcached_version"),
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        loads.iter().copied().fold(0.0, f64::max),
    );
    let reference = "memcached-t2";
    let mut workloads: Vec<String> = Vec::new();
    let mut systems: Vec<String> = Vec::new();
    for d in docs {
        for (list, k) in [(&mut workloads, "workload"), (&mut systems, "system")] {
            let v = d.label(k).to_string();
            if !v.is_empty() && !list.contains(&v) {
                list.push(v);
            }
        }
    }
    // recached, the reference, the others; workloads by value size, then name.
    systems.sort_by_key(|s| (!s.starts_with("recached"), s != reference, s.clone()));
    workloads.sort_by_key(|w| {
        let digits: String = w.chars().take_while(char::is_ascii_digit).collect();
        let n: u64 = digits.parse().unwrap_or(0);
        let unit = if w[digits.len()..].starts_with("KB") {
            1024
        } else {
            1
        };
        (n * unit, w.clone())
    });
    let _ = writeln!(
        md,
        "| workload | system | peak/s | × {reference} | peak p99 | ½ own: rate/s | p50 | p95 | p99 | common: rate/s | p50 | p95 | p99 | errors | get hits | rounds |"
    );
    md.push_str(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let pick = |w: &str, s: &str, load: &str| -> Vec<&crate::report::Doc> {
        docs.iter()
            .copied()
            .filter(|d| {
                d.label("workload") == w && d.label("system") == s && d.label("load") == load
            })
            .collect()
    };
    let ms = |us: f64| crate::report::ms(us);
    let fmt_lat = |g: &[&crate::report::Doc]| -> [String; 4] {
        if g.is_empty() {
            return ["–".into(), "–".into(), "–".into(), "–".into()];
        }
        [
            crate::report::thousands(med(g, &["results", "achieved_rate"])),
            ms(med(g, &["results", "latency_us", "p50"])),
            ms(med(g, &["results", "latency_us", "p95"])),
            ms(med(g, &["results", "latency_us", "p99"])),
        ]
    };
    for w in &workloads {
        let ref_peak = med(&pick(w, reference, "peak"), &["results", "achieved_rate"]);
        for s in &systems {
            let peak = pick(w, s, "peak");
            if peak.is_empty() {
                continue;
            }
            let p = med(&peak, &["results", "achieved_rate"]);
            let half = pick(w, s, "half");
            let common = pick(w, s, "common");
            let errors: u64 = peak
                .iter()
                .chain(&half)
                .chain(&common)
                .map(|d| crate::doc::validate(&d.v).unwrap_or(0))
                .sum();
            // Share of gets that found their key, over every run of the row (the script fills
            // the key space first, so a low figure means the gets measured misses).
            let (hits, misses) =
                peak.iter()
                    .chain(&half)
                    .chain(&common)
                    .fold((0.0, 0.0), |a, d| {
                        (
                            a.0 + d.v["results"]["cache_hits"].as_f64().unwrap_or(0.0),
                            a.1 + d.v["results"]["cache_misses"].as_f64().unwrap_or(0.0),
                        )
                    });
            let hit_share = if hits + misses > 0.0 {
                format!("{:.1}%", 100.0 * hits / (hits + misses))
            } else {
                "–".into()
            };
            let [hr, h50, h95, h99] = fmt_lat(&half);
            let [cr, c50, c95, c99] = fmt_lat(&common);
            let _ = writeln!(
                md,
                "| {w} | {s} | {} | {} | {} | {hr} | {h50} | {h95} | {h99} | {cr} | {c50} | {c95} | {c99} | {errors} | {hit_share} | {} |",
                crate::report::thousands(p),
                if ref_peak > 0.0 {
                    format!("{:.2}", p / ref_peak)
                } else {
                    "–".into()
                },
                ms(med(&peak, &["results", "latency_us", "p99"])),
                peak.len(),
            );
        }
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_every_reply_shape_and_waits_for_incomplete_ones() {
        let hit = b"VALUE key:1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(scan(hit).unwrap(), Some((McReply::Hit(1), hit.len())));
        // Every strict prefix is incomplete, never an error or a shorter reply.
        for i in 0..hit.len() {
            assert_eq!(scan(&hit[..i]).unwrap(), None, "prefix {i}");
        }
        // A reply followed by the next one: only the first is consumed.
        let two = b"END\r\nSTORED\r\n";
        assert_eq!(scan(two).unwrap(), Some((McReply::Miss, 5)));
        assert_eq!(scan(&two[5..]).unwrap(), Some((McReply::Stored, 8)));
        // Data containing "\r\nEND\r\n" is skipped by its length, not searched.
        let tricky = b"VALUE k 5 7 99\r\n\r\nEND\r\n\r\nEND\r\n";
        assert_eq!(scan(tricky).unwrap(), Some((McReply::Hit(1), tricky.len())));
        let multi = b"VALUE a 0 1\r\nx\r\nVALUE b 1 2\r\nyz\r\nEND\r\n";
        assert_eq!(scan(multi).unwrap(), Some((McReply::Hit(2), multi.len())));
        let empty = b"VALUE a 0 0\r\n\r\nEND\r\n";
        assert_eq!(scan(empty).unwrap(), Some((McReply::Hit(1), empty.len())));
        assert_eq!(
            scan(b"SERVER_ERROR out of memory storing object\r\n").unwrap(),
            Some((McReply::Error("SERVER_ERROR".into()), 43))
        );
        assert_eq!(
            scan(b"CLIENT_ERROR bad data chunk\r\n").unwrap(),
            Some((McReply::Error("CLIENT_ERROR".into()), 29))
        );
        assert_eq!(
            scan(b"ERROR\r\n").unwrap(),
            Some((McReply::Error("ERROR".into()), 7))
        );
        assert_eq!(
            scan(b"NOT_STORED\r\n").unwrap(),
            Some((McReply::Status("NOT_STORED".into()), 12))
        );
        assert_eq!(
            scan(b"42\r\n").unwrap(),
            Some((McReply::Status("number".into()), 4))
        );
        assert_eq!(scan(b"STORED").unwrap(), None);
    }

    #[test]
    fn refuses_what_is_not_a_memcached_reply() {
        // A data block longer than its header says.
        assert!(scan(b"VALUE k 0 2\r\nabc\r\nEND\r\n").is_err());
        // Bad headers.
        assert!(scan(b"VALUE k 0\r\nab\r\nEND\r\n").is_err());
        assert!(scan(b"VALUE k x 2\r\nab\r\nEND\r\n").is_err());
        assert!(scan(b"VALUE k 0 -2\r\nab\r\nEND\r\n").is_err());
        // Something else after a value.
        assert!(scan(b"VALUE k 0 2\r\nab\r\nSTORED\r\n").is_err());
        // RESP is not memcached.
        assert!(scan(b"+OK\r\n").is_err());
        assert!(scan(b"$3\r\nabc\r\n").is_err());
        assert!(scan(b"STOREDX\r\n").is_err());
        // A line that never ends is refused once it is longer than any reply line.
        assert!(scan(&vec![b'V'; MAX_LINE + 2]).is_err());
    }

    #[test]
    fn classify_judges_the_reply_against_the_request() {
        assert_eq!(classify(Op::Get, &McReply::Hit(1)), Reply::Value);
        assert_eq!(classify(Op::Get, &McReply::Miss), Reply::Nil);
        assert_eq!(classify(Op::Set, &McReply::Stored), Reply::Value);
        assert_eq!(
            classify(Op::Set, &McReply::Status("NOT_STORED".into())),
            Reply::Error("NOT_STORED".into())
        );
        assert_eq!(
            classify(Op::Get, &McReply::Stored),
            Reply::Error("STORED".into())
        );
        assert_eq!(
            classify(Op::Set, &McReply::Miss),
            Reply::Error("END".into())
        );
        assert_eq!(
            classify(Op::Get, &McReply::Error("SERVER_ERROR".into())),
            Reply::Error("SERVER_ERROR".into())
        );
    }

    #[test]
    fn encodes_get_and_set_as_protocol_txt() {
        let mut b = Vec::new();
        encode(&mut b, Op::Get, b"key:7", b"", 0);
        encode(&mut b, Op::Set, b"key:7", b"vvvv", exptime(1500));
        assert_eq!(b, b"get key:7\r\nset key:7 0 2 4\r\nvvvv\r\n".to_vec());
        assert_eq!(exptime(0), 0);
        assert_eq!(exptime(1000), 1);
    }

    #[test]
    fn keys_go_to_servers_by_one_at_a_time_mod_n() {
        // Published test vectors of Jenkins' one-at-a-time hash.
        assert_eq!(one_at_a_time(b"a"), 0xca2e_9442);
        assert_eq!(
            one_at_a_time(b"The quick brown fox jumps over the lazy dog"),
            0x519e_91f5
        );
        // Computed independently (Python) for the generator's key names.
        let want = [1, 0, 1, 1, 0, 0, 1, 1, 0, 0];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(server_for(format!("key:{i}").as_bytes(), 2), *w, "key:{i}");
        }
        assert_eq!(server_for(b"anything", 1), 0);
        assert_eq!(server_for(b"anything", 0), 0);
        // Balanced within 3 % over 3 servers.
        let mut count = [0usize; 3];
        for i in 0..30_000 {
            count[server_for(format!("key:{i}").as_bytes(), 3)] += 1;
        }
        for c in count {
            assert!((9_700..=10_300).contains(&c), "{count:?}");
        }
    }

    /// A tiny memcached server (one thread per connection) that is server `me` of `n`: it
    /// answers `get` with `END` or a stored value and `set` with `STORED`, but answers
    /// `SERVER_ERROR wrong server` to a key the client should have sent elsewhere. Returns
    /// its port and its request count.
    fn tiny_server(me: usize, n: usize) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
        use std::io::BufRead;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = count.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(64) {
                let Ok(conn) = conn else { return };
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    let mut r = std::io::BufReader::new(conn);
                    let mut store = std::collections::HashMap::<Vec<u8>, Vec<u8>>::new();
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        c.fetch_add(1, Ordering::Relaxed);
                        let l = line.strip_suffix(b"\r\n").unwrap_or(&line).to_vec();
                        let f: Vec<&[u8]> = l.split(|&b| b == b' ').collect();
                        let mut reply = Vec::new();
                        let key = f.get(1).copied().unwrap_or_default().to_vec();
                        let wrong = server_for(&key, n) != me;
                        match f[0] {
                            b"set" => {
                                let len: usize =
                                    std::str::from_utf8(f[4]).unwrap().parse().unwrap();
                                let mut data = vec![0u8; len + 2];
                                r.read_exact(&mut data).unwrap();
                                data.truncate(len);
                                store.insert(key, data);
                                reply.extend_from_slice(b"STORED\r\n");
                            }
                            b"get" => {
                                if let Some(v) = store.get(&key) {
                                    reply.extend_from_slice(
                                        format!(
                                            "VALUE {} 0 {}\r\n",
                                            String::from_utf8_lossy(&key),
                                            v.len()
                                        )
                                        .as_bytes(),
                                    );
                                    reply.extend_from_slice(v);
                                    reply.extend_from_slice(b"\r\n");
                                }
                                reply.extend_from_slice(b"END\r\n");
                            }
                            _ => reply.extend_from_slice(b"ERROR\r\n"),
                        }
                        if wrong {
                            reply = b"SERVER_ERROR wrong server\r\n".to_vec();
                        }
                        if w.write_all(&reply).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, count)
    }

    /// Both loops of `run --protocol memcached` against two servers: every key reaches the
    /// server its hash names (a wrong one would answer an error), both servers get about half,
    /// gets of stored keys hit, and nothing is counted as an error.
    #[test]
    fn the_generator_speaks_memcached_to_the_server_each_key_hashes_to() {
        use std::sync::atomic::Ordering;
        let (pa, ca) = tiny_server(0, 2);
        let (pb, cb) = tiny_server(1, 2);
        // Closed loop; open loop spinning; open loop napping (≤ 20 µs) between arrivals.
        for (closed, nap_us) in [(true, 0), (false, 0), (false, 20)] {
            let params = crate::loadgen::LoadParams {
                target: format!("127.0.0.1:{pa},127.0.0.1:{pb}"),
                protocol: "memcached".into(),
                closed_loop: closed,
                nap_us,
                rate: 2000.0,
                duration: 0.5,
                warmup: 0.0,
                connections: 2,
                keys: 50,
                value_size: 10,
                mix: "get:1,set:1".into(),
                ..Default::default()
            };
            let o = crate::loadgen::run(&params).unwrap();
            assert_eq!(o.error_count(), 0, "closed {closed}: {:?}", o.errors);
            assert!(o.ok > 500, "closed {closed}: ok {}", o.ok);
            assert!(o.cache_hits > 0 && o.cache_misses > 0);
            if !closed {
                // Every arrival of the schedule was sent and answered, none much late.
                assert_eq!(o.ok, o.scheduled);
                let p50 = o.latency.value_at_quantile(0.5);
                assert!(p50 < 2_000, "nap {nap_us}: p50 {p50} µs");
            }
        }
        let (a, b) = (ca.load(Ordering::Relaxed), cb.load(Ordering::Relaxed));
        assert!(a > 0 && b > 0 && a.abs_diff(b) < (a + b) / 3, "{a} vs {b}");
        // A server that gets keys it does not own shows up as errors.
        let params = crate::loadgen::LoadParams {
            target: format!("127.0.0.1:{pb}"),
            protocol: "memcached".into(),
            closed_loop: true,
            duration: 0.2,
            warmup: 0.0,
            connections: 1,
            keys: 50,
            ..Default::default()
        };
        let o = crate::loadgen::run(&params).unwrap();
        assert!(
            o.errors.get("SERVER_ERROR").copied().unwrap_or(0) > 0,
            "{:?}",
            o.errors
        );
    }

    /// The report's section: one row per workload and system, the ratio to memcached -t 2's
    /// peak, the open-loop percentiles, in the order recached, memcached-t2, others.
    #[test]
    fn the_report_renders_the_memcached_suite() {
        let doc = |system: &str, load: &str, rate: f64, p99: u64| crate::report::Doc {
            path: format!("{system}-{load}.json"),
            v: crate::doc::new_doc(
                "loadgen",
                &crate::doc::parse_labels(&[
                    "suite=memcached".into(),
                    "run_id=r1".into(),
                    format!("system={system}"),
                    "workload=64B-get".into(),
                    format!("load={load}"),
                    "round=1".into(),
                ])
                .unwrap(),
                serde_json::json!({}),
                serde_json::json!({ "protocol": "memcached" }),
                serde_json::json!({ "achieved_rate": rate, "errors": {}, "cache_hits": 9,
                    "cache_misses": 1, "latency_us": { "p50": 100, "p95": 200, "p99": p99 } }),
            ),
        };
        let mut docs = Vec::new();
        for (system, peak) in [
            ("memcached-t1x2", 90_000.0),
            ("memcached-t2", 100_000.0),
            ("recached", 50_000.0),
        ] {
            docs.push(doc(system, "peak", peak, 900));
            docs.push(doc(system, "half", peak / 2.0, 1500));
            docs.push(doc(system, "common", 25_000.0, 2500));
        }
        let md = crate::report::render(&docs, "bench").markdown;
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| 64B-get")).collect();
        assert_eq!(
            rows,
            [
                "| 64B-get | recached | 50,000 | 0.50 | 0.90 | 25,000 | 0.10 | 0.20 | 1.50 | 25,000 | 0.10 | 0.20 | 2.50 | 0 | 90.0% | 1 |",
                "| 64B-get | memcached-t2 | 100,000 | 1.00 | 0.90 | 50,000 | 0.10 | 0.20 | 1.50 | 25,000 | 0.10 | 0.20 | 2.50 | 0 | 90.0% | 1 |",
                "| 64B-get | memcached-t1x2 | 90,000 | 0.90 | 0.90 | 45,000 | 0.10 | 0.20 | 1.50 | 25,000 | 0.10 | 0.20 | 2.50 | 0 | 90.0% | 1 |",
            ]
        );
    }

    #[test]
    fn memcached_mode_refuses_other_commands_and_bad_prefixes() {
        let mix = crate::loadgen::parse_mix("get:9,set:1").unwrap();
        assert!(check_mix(&mix, "key:").is_ok());
        let mix = crate::loadgen::parse_mix("get:9,incr:1").unwrap();
        assert!(check_mix(&mix, "key:").is_err());
        let mix = crate::loadgen::parse_mix("get:1").unwrap();
        assert!(check_mix(&mix, "a key").is_err());
        assert!(check_mix(&mix, &"k".repeat(240)).is_err());
    }
}
