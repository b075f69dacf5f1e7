//! `recached-bench get-loop`: pipelined GETs of random keys, closed loop, optionally with
//! client-side caching on (`CLIENT TRACKING ON`) for every connection — what redis-benchmark
//! cannot do (it has no tracking flag). Issue 19's performance clause measures the cost of
//! tracking with it (scripts/bench-tracking.sh).
//!
//! Each of `--clients` connections (one thread each) sends `HELLO 3` (both ways, so the two
//! runs differ only in tracking), then `CLIENT TRACKING ON` with `--tracking`, then repeats:
//! write `--pipeline` requests `GET key:<n>` (`n` uniform in `0..keys`), read as many replies
//! (push frames, none expected in a read-only workload, are counted apart), for `--seconds`.
//! With `--warmup W`, the first W seconds are not counted. Prints `requests <n> pushes <n>
//! seconds <s> rps <x>`; with `--out`, a result JSON (kind
//! `get-loop`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use resp::Value;
use serde_json::json;

#[derive(clap::Args, Debug, Clone)]
pub struct GetLoopArgs {
    /// host:port of the server.
    #[arg(long)]
    pub target: String,
    /// Connections, each in its own thread.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Requests written before their replies are read.
    #[arg(long, default_value_t = 16)]
    pub pipeline: usize,
    /// Keys `key:0` … `key:<keys-1>` (the caller loads them).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Length of the run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// `CLIENT TRACKING ON` on every connection first.
    #[arg(long)]
    pub tracking: bool,
    /// Seconds of the same load first, not counted (with tracking: the table fills up, so
    /// the counted part measures the steady state of lookups).
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Reads one reply frame; `Ok(true)` for a push frame.
    fn read_frame(&mut self) -> Result<(Value, bool), String> {
        loop {
            if let Some((v, n)) = resp::decode(&self.buf).map_err(|e| e.to_string())? {
                self.buf.drain(..n);
                let push = matches!(v, Value::Push(_));
                if let Value::Error(e) = &v {
                    return Err(String::from_utf8_lossy(e).into_owned());
                }
                return Ok((v, push));
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one request and reads its reply (pushes before it are skipped).
    fn request(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        let mut req = Vec::new();
        resp::encode_request(&mut req, args);
        self.s.write_all(&req).map_err(|e| e.to_string())?;
        loop {
            let (v, push) = self.read_frame()?;
            if !push {
                return Ok(v);
            }
        }
    }
}

/// One connection's loop: (requests, pushes).
fn get_loop(
    a: &GetLoopArgs,
    i: usize,
    counted_from: Instant,
    until: Instant,
) -> Result<(u64, u64), String> {
    let s = TcpStream::connect(&a.target).map_err(|e| format!("{}: {e}", a.target))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut c = Conn { s, buf: Vec::new() };
    c.request(&[b"HELLO", b"3"])?;
    if a.tracking {
        c.request(&[b"CLIENT", b"TRACKING", b"ON"])?;
    }
    let mut rng = crate::rng::Rng::new(0x5eed ^ i as u64);
    let keys = a.keys.max(1);
    let (mut requests, mut pushes) = (0u64, 0u64);
    let mut batch = Vec::new();
    while Instant::now() < until {
        batch.clear();
        for _ in 0..a.pipeline.max(1) {
            let key = format!("key:{}", rng.next_u64() % keys);
            resp::encode_request(&mut batch, &[b"GET", key.as_bytes()]);
        }
        c.s.write_all(&batch).map_err(|e| e.to_string())?;
        let mut got = 0;
        while got < a.pipeline.max(1) {
            let (_, push) = c.read_frame()?;
            if push {
                pushes += 1;
            } else {
                got += 1;
            }
        }
        if Instant::now() >= counted_from {
            requests += got as u64;
        }
    }
    Ok((requests, pushes))
}

pub fn run(a: &GetLoopArgs, out: &crate::OutArgs) -> Result<ExitCode, String> {
    let start = Instant::now() + Duration::from_secs_f64(a.warmup);
    let until = start + Duration::from_secs_f64(a.seconds);
    let handles: Vec<_> = (0..a.clients.max(1))
        .map(|i| {
            let a = a.clone();
            std::thread::spawn(move || get_loop(&a, i, start, until))
        })
        .collect();
    let (mut requests, mut pushes) = (0u64, 0u64);
    for h in handles {
        let (r, p) = h.join().map_err(|_| "a client thread panicked")??;
        requests += r;
        pushes += p;
    }
    let secs = Instant::now()
        .saturating_duration_since(start)
        .as_secs_f64();
    let rps = requests as f64 / secs;
    println!("requests {requests} pushes {pushes} seconds {secs:.3} rps {rps:.0}");
    if out.out.is_some() {
        let labels = crate::doc::parse_labels(&out.labels)?;
        let params = json!({ "target": a.target, "clients": a.clients, "pipeline": a.pipeline,
            "keys": a.keys, "tracking": a.tracking, "warmup": a.warmup });
        let results = json!({ "requests": requests, "pushes": pushes, "seconds": secs,
            "rps": rps });
        crate::write_out(
            out,
            &crate::doc::new_doc("get-loop", &labels, json!({}), params, results),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
