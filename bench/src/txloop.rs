//! `recached-bench tx-loop`: a transfer between two keys as one transaction, `MULTI / DECRBY
//! <a> <n> / INCRBY <b> <n> / EXEC`, written in one go (as a client library's transactional
//! pipeline does) by each of `--clients` connections (one thread each) — what
//! redis-benchmark cannot do (it repeats one command). Issue 20's performance clause
//! measures transactions over keys on one or several engines with it
//! (scripts/bench-transactions.sh).
//!
//! Keys: `--key-a` and `--key-b` with `__rand_int__` replaced by a number uniform in
//! `0..--keys` (as redis-benchmark does), so hash tags choose the engines: `{x}:a:__rand_int__`
//! and `{y}:b:__rand_int__` with tags on two engines make every transaction span both.
//!
//! - **Closed loop** (`--rate 0`, the default): each connection sends its next transaction when
//!   the previous one is answered: the peak rate.
//! - **Paced** (`--rate R`): R transactions per second in all, each connection on its own
//!   fixed schedule (`clients / R` apart, connections' phases spread evenly); the latency is
//!   counted from the intended start, so a late answer also charges the transactions queued
//!   behind it (no coordinated omission); a connection that falls behind sends at once.
//!
//! `--op rename`: instead, each connection `i` renames its own key back and forth between
//! `--key-a` and `--key-b` (with `__rand_int__` = `i`, set first), one `RENAME` per operation
//! (no conflicts between connections: the cost of the command spanning engines alone).
//!
//! Every EXEC must answer an array of two integers (every RENAME `+OK`); anything else is counted under its first
//! word (`EXECABORT`, `ERR`, `null`, …). A broken connection ends the run with an error.
//! `--warmup W`: the first W seconds are not counted. `--stop-file F`: every connection stops
//! as soon as F exists (for a background load whose end another measurement decides).
//! Prints `transactions <n> seconds <s> tps <x> p50_us <..> p99_us <..> max_us <..> errors
//! <n>`; with `--out`, a result JSON (kind `tx-loop`, latencies in microseconds).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;

#[derive(clap::Args, Debug, Clone)]
pub struct TxLoopArgs {
    /// host:port of the server.
    #[arg(long)]
    pub target: String,
    /// Connections, each in its own thread, one transaction in flight each.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// The debited key; `__rand_int__` is replaced by a random number below --keys.
    #[arg(long, default_value = "a:__rand_int__")]
    pub key_a: String,
    /// The credited key, likewise.
    #[arg(long, default_value = "b:__rand_int__")]
    pub key_b: String,
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Length of the counted run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of the same load first, not counted.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Transactions per second in all (0: closed loop, as fast as answers come).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Stop (and report) as soon as this file exists.
    #[arg(long)]
    pub stop_file: Option<PathBuf>,
    /// `transfer` (MULTI DECRBY INCRBY EXEC) or `rename` (RENAME a b, then b a, …).
    #[arg(long, default_value = "transfer")]
    pub op: String,
}

/// Largest latency kept (60 s in µs).
const HIST_MAX_US: u64 = 60_000_000;

struct Tally {
    hist: Histogram<u64>,
    transactions: u64,
    errors: BTreeMap<String, u64>,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("histogram bounds")
}

/// Reads one complete reply frame from `s` (buffer `buf`).
fn read_frame(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<resp::Value, String> {
    loop {
        if let Some((v, n)) = resp::decode(buf).map_err(|e| e.to_string())? {
            buf.drain(..n);
            return Ok(v);
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `None` if `v` is EXEC's success (an array of two integers), else the error's kind.
fn exec_failure(v: &resp::Value) -> Option<String> {
    use resp::Value;
    match v {
        Value::Array(items)
            if items.len() == 2 && items.iter().all(|i| matches!(i, Value::Integer(_))) =>
        {
            None
        }
        Value::Error(e) => Some(
            String::from_utf8_lossy(e)
                .split_whitespace()
                .next()
                .unwrap_or("error")
                .to_string(),
        ),
        Value::Null => Some("null".into()),
        other => Some(format!("unexpected {other:?}").chars().take(60).collect()),
    }
}

/// One connection's loop.
fn tx_loop(
    a: &TxLoopArgs,
    i: usize,
    t0: Instant,
    counted_from: Instant,
    until: Instant,
) -> Result<Tally, String> {
    let mut s = TcpStream::connect(&a.target).map_err(|e| format!("{}: {e}", a.target))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut rng = crate::rng::Rng::new(0x7a11 ^ (i as u64).wrapping_mul(0x9E37_79B9));
    let keys = a.keys.max(1);
    let mut tally = Tally {
        hist: new_hist(),
        transactions: 0,
        errors: BTreeMap::new(),
    };
    let clients = a.clients.max(1) as f64;
    let interval = (a.rate > 0.0).then(|| Duration::from_secs_f64(clients / a.rate));
    // Phases spread evenly over one interval, so the connections do not send in bursts.
    let mut next = t0 + interval.map_or(Duration::ZERO, |iv| iv.mul_f64(i as f64 / clients));
    let mut req = Vec::with_capacity(256);
    let mut checked_stop = Instant::now();
    let rename = a.op == "rename";
    let (ra, rb) = (
        a.key_a.replace("__rand_int__", &i.to_string()),
        a.key_b.replace("__rand_int__", &i.to_string()),
    );
    if rename {
        req.clear();
        resp::encode_request(&mut req, &[b"DEL", ra.as_bytes(), rb.as_bytes()]);
        resp::encode_request(&mut req, &[b"SET", ra.as_bytes(), b"value"]);
        s.write_all(&req).map_err(|e| e.to_string())?;
        read_frame(&mut s, &mut buf)?;
        read_frame(&mut s, &mut buf)?;
    }
    let mut forth = true;
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        if let Some(f) = &a.stop_file
            && now.duration_since(checked_stop) >= Duration::from_millis(50)
        {
            checked_stop = now;
            if f.exists() {
                break;
            }
        }
        let intended = match interval {
            Some(iv) => {
                if next > now {
                    std::thread::sleep(next - now);
                }
                let t = next;
                next += iv;
                t
            }
            None => now,
        };
        if rename {
            let (from, to) = if forth { (&ra, &rb) } else { (&rb, &ra) };
            req.clear();
            resp::encode_request(&mut req, &[b"RENAME", from.as_bytes(), to.as_bytes()]);
            s.write_all(&req).map_err(|e| e.to_string())?;
            let reply = read_frame(&mut s, &mut buf)?;
            let done = Instant::now();
            let failure = match &reply {
                resp::Value::Simple(v) if v == b"OK" => None,
                other => Some(exec_failure(other).unwrap_or_else(|| "unexpected".into())),
            };
            if failure.is_none() {
                forth = !forth;
            }
            if intended < counted_from {
                continue;
            }
            match failure {
                None => {
                    tally.transactions += 1;
                    let us = done.saturating_duration_since(intended).as_micros() as u64;
                    tally
                        .hist
                        .record(us.clamp(1, HIST_MAX_US))
                        .expect("clamped");
                }
                Some(kind) => *tally.errors.entry(kind).or_default() += 1,
            }
            continue;
        }
        let ka = a
            .key_a
            .replace("__rand_int__", &(rng.next_u64() % keys).to_string());
        let kb = a
            .key_b
            .replace("__rand_int__", &(rng.next_u64() % keys).to_string());
        let amount = (1 + rng.next_u64() % 10).to_string();
        req.clear();
        resp::encode_request(&mut req, &[b"MULTI"]);
        resp::encode_request(&mut req, &[b"DECRBY", ka.as_bytes(), amount.as_bytes()]);
        resp::encode_request(&mut req, &[b"INCRBY", kb.as_bytes(), amount.as_bytes()]);
        resp::encode_request(&mut req, &[b"EXEC"]);
        s.write_all(&req).map_err(|e| e.to_string())?;
        let mut queued_error = None;
        for _ in 0..3 {
            if let resp::Value::Error(e) = read_frame(&mut s, &mut buf)? {
                queued_error.get_or_insert_with(|| String::from_utf8_lossy(&e).into_owned());
            }
        }
        let exec = read_frame(&mut s, &mut buf)?;
        let done = Instant::now();
        if intended < counted_from {
            continue;
        }
        match exec_failure(&exec) {
            None => {
                tally.transactions += 1;
                let us = done.saturating_duration_since(intended).as_micros() as u64;
                tally
                    .hist
                    .record(us.clamp(1, HIST_MAX_US))
                    .expect("clamped");
            }
            Some(kind) => *tally.errors.entry(kind).or_default() += 1,
        }
        if let Some(e) = queued_error {
            *tally
                .errors
                .entry(format!(
                    "queued: {}",
                    e.chars().take(40).collect::<String>()
                ))
                .or_default() += 1;
        }
    }
    Ok(tally)
}

pub fn run(a: &TxLoopArgs, out: &crate::OutArgs) -> Result<ExitCode, String> {
    let t0 = Instant::now();
    let start = t0 + Duration::from_secs_f64(a.warmup);
    let until = start + Duration::from_secs_f64(a.seconds);
    let handles: Vec<_> = (0..a.clients.max(1))
        .map(|i| {
            let a = a.clone();
            std::thread::spawn(move || tx_loop(&a, i, t0, start, until))
        })
        .collect();
    let mut total = Tally {
        hist: new_hist(),
        transactions: 0,
        errors: BTreeMap::new(),
    };
    for h in handles {
        let t = h.join().map_err(|_| "a client thread panicked")??;
        total.hist.add(&t.hist).map_err(|e| e.to_string())?;
        total.transactions += t.transactions;
        for (k, n) in t.errors {
            *total.errors.entry(k).or_default() += n;
        }
    }
    let secs = Instant::now()
        .saturating_duration_since(start)
        .as_secs_f64();
    let tps = total.transactions as f64 / secs;
    let q = |p: f64| total.hist.value_at_quantile(p);
    let errors: u64 = total.errors.values().sum();
    println!(
        "transactions {} seconds {secs:.3} tps {tps:.0} p50_us {} p99_us {} max_us {} errors {errors}",
        total.transactions,
        q(0.5),
        q(0.99),
        total.hist.max()
    );
    if errors > 0 {
        println!("error kinds {:?}", total.errors);
    }
    if out.out.is_some() {
        let labels = crate::doc::parse_labels(&out.labels)?;
        let params = json!({ "target": a.target, "clients": a.clients, "op": a.op, "key_a": a.key_a,
            "key_b": a.key_b, "keys": a.keys, "seconds": a.seconds, "warmup": a.warmup,
            "rate": a.rate });
        let results = json!({ "transactions": total.transactions, "seconds": secs, "tps": tps,
            "latency_us": { "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999),
                "max": total.hist.max() },
            "errors": total.errors });
        crate::write_out(
            out,
            &crate::doc::new_doc("tx-loop", &labels, json!({}), params, results),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
