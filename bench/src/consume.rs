//! `recached-bench stream-consume`: the consumer-group loop of a stream job queue, closed
//! loop. Each of `--clients` connections (one thread each) repeats
//! `XREADGROUP GROUP <group> c<i> COUNT <count> STREAMS <stream> >` then `XACK <stream>
//! <group> <ids…>` of the entries it got, until the group has delivered everything (a null
//! read) or `--seconds` pass. Prints `loops <n> entries <n> seconds <s> loops_per_s <x>
//! entries_per_s <x>`; with `--out`, also a result JSON (kind `stream-consume`).
//!
//! The stream and its group are prepared by the caller (e.g. scripts/bench-streams.sh), so
//! both servers compared start from the same entries.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use resp::Value;
use serde_json::json;

#[derive(clap::Args, Debug, Clone)]
pub struct ConsumeArgs {
    /// host:port of the server.
    #[arg(long)]
    pub target: String,
    #[arg(long, default_value = "q")]
    pub stream: String,
    #[arg(long, default_value = "g")]
    pub group: String,
    /// Consumer connections, each in its own thread.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// COUNT of each XREADGROUP.
    #[arg(long, default_value_t = 10)]
    pub count: usize,
    /// Upper bound on the run's length.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn request(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let mut req = Vec::new();
        resp::encode_request(&mut req, args);
        self.s.write_all(&req).map_err(|e| e.to_string())?;
        loop {
            if let Some((v, n)) = resp::decode(&self.buf).map_err(|e| e.to_string())? {
                self.buf.drain(..n);
                if let Value::Error(e) = &v {
                    return Err(String::from_utf8_lossy(e).into_owned());
                }
                return Ok(v);
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The entry IDs of an XREADGROUP reply (RESP2 `[[stream, [[id, fields]…]]]`).
fn entry_ids(v: &Value) -> Vec<Vec<u8>> {
    let mut ids = Vec::new();
    if let Value::Array(streams) = v {
        for s in streams {
            if let Value::Array(pair) = s
                && let Some(Value::Array(entries)) = pair.get(1)
            {
                for e in entries {
                    if let Value::Array(e) = e
                        && let Some(Value::Bulk(id)) = e.first()
                    {
                        ids.push(id.clone());
                    }
                }
            }
        }
    }
    ids
}

/// One consumer's loop: (loops, entries).
fn consume(a: &ConsumeArgs, i: usize, until: Instant) -> Result<(u64, u64), String> {
    let s = TcpStream::connect(&a.target).map_err(|e| format!("{}: {e}", a.target))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut c = Conn { s, buf: Vec::new() };
    let consumer = format!("c{i}");
    let count = a.count.to_string();
    let (mut loops, mut entries) = (0u64, 0u64);
    while Instant::now() < until {
        let v = c.request(&[
            b"XREADGROUP",
            b"GROUP",
            a.group.as_bytes(),
            consumer.as_bytes(),
            b"COUNT",
            count.as_bytes(),
            b"STREAMS",
            a.stream.as_bytes(),
            b">",
        ])?;
        let ids = entry_ids(&v);
        if ids.is_empty() {
            break; // the group delivered everything
        }
        let mut ack: Vec<&[u8]> = vec![b"XACK", a.stream.as_bytes(), a.group.as_bytes()];
        ack.extend(ids.iter().map(Vec::as_slice));
        match c.request(&ack)? {
            Value::Integer(n) if n == ids.len() as i64 => {}
            other => return Err(format!("XACK answered {other:?}, not {}", ids.len())),
        }
        loops += 1;
        entries += ids.len() as u64;
    }
    Ok((loops, entries))
}

pub fn run(a: &ConsumeArgs, out: &crate::OutArgs) -> Result<ExitCode, String> {
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(a.seconds);
    let handles: Vec<_> = (0..a.clients.max(1))
        .map(|i| {
            let a = a.clone();
            std::thread::spawn(move || consume(&a, i, until))
        })
        .collect();
    let (mut loops, mut entries) = (0u64, 0u64);
    for h in handles {
        let (l, e) = h.join().map_err(|_| "a consumer thread panicked")??;
        loops += l;
        entries += e;
    }
    let secs = start.elapsed().as_secs_f64();
    let (lps, eps) = (loops as f64 / secs, entries as f64 / secs);
    println!(
        "loops {loops} entries {entries} seconds {secs:.3} loops_per_s {lps:.0} entries_per_s {eps:.0}"
    );
    if out.out.is_some() {
        let labels = crate::doc::parse_labels(&out.labels)?;
        let params = json!({ "target": a.target, "clients": a.clients, "count": a.count });
        let results = json!({ "loops": loops, "entries": entries, "seconds": secs,
            "loops_per_s": lps, "entries_per_s": eps });
        crate::write_out(
            out,
            &crate::doc::new_doc("stream-consume", &labels, json!({}), params, results),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_a_group_read() {
        let reply = b"*1\r\n*2\r\n$1\r\nq\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n\
                      *2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
        let (v, _) = resp::decode(reply).unwrap().unwrap();
        assert_eq!(entry_ids(&v), vec![b"1-0".to_vec(), b"2-0".to_vec()]);
        assert!(entry_ids(&Value::Null).is_empty());
    }
}
