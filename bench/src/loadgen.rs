//! The open-loop load generator behind `recached-bench run`.
//!
//! # Model
//!
//! ```text
//!   Schedule (Poisson, seeded) ──► request i, intended start t_i ──round robin──► connection c
//!                                                                                   │
//!        backlog (FIFO, keeps t_i) ──► in flight (≤ pipeline) ──► reply ──► latency = now − t_i
//! ```
//!
//! - Each thread owns a slice of the connections and one Poisson schedule at `rate / threads`
//!   (the superposition of independent Poisson processes is a Poisson process at the summed
//!   rate). Arrivals are dispatched to the thread's live connections round robin.
//! - A connection writes a request as soon as it has fewer than `pipeline` requests in flight;
//!   otherwise the request waits in that connection's backlog. **Its intended start time never
//!   changes**: a request stuck behind a slow one is charged for the whole wait. A closed-loop
//!   client would instead not have *sent* it yet and would leave the stall out of its figures
//!   (coordinated omission). Three HDR histograms (microseconds) are kept:
//!   `latency` (intended start → reply, the figure to quote), `service` (written → reply, what a
//!   closed-loop tool reports) and `lag` (intended start → written: the backlog plus this
//!   generator's own dispatch delay; when its p99 is large the generator or the server is saturated).
//! - One mio `Poll` per thread, non-blocking sockets, edge-triggered: every write runs until
//!   `WouldBlock`, every read until a short read. When the next arrival is less than [`SPIN_BELOW`] away the thread polls
//!   with a zero timeout (epoll's timeout has millisecond resolution), so at high rates a
//!   generator thread uses a core; on a 2-core machine it competes with the server under test.
//!   With `--nap-us N` it sleeps instead, at most N µs (and never past the next arrival), when
//!   a zero-timeout poll found nothing, with the thread's timer slack at 1 µs: the CPU goes to
//!   the servers, and a reply that arrives during a nap is timed up to N µs (+ the wake-up)
//!   late.
//! - Requests scheduled during the warm-up are sent but not recorded. After the last arrival the
//!   run drains for at most `drain_timeout` seconds; whatever is still unanswered then counts as
//!   an `unfinished` error.
//! - Errors never stop the run: an error reply counts under its first word (`ERR`, `MOVED`…), a
//!   broken connection fails its in-flight and backlogged requests (`io`) and is redialled every
//!   [`REDIAL_INTERVAL`]; while no connection of a thread is up, arrivals count as `unavailable`.
//!   A backlog over `max_backlog` requests sheds the new arrival as `overload`, so an overloaded
//!   server cannot make the generator's memory grow without bound.
//!
//! # Closed loop
//!
//! With `--closed-loop` there is no schedule: each thread keeps `its connections × pipeline`
//! requests outstanding, a new one issued (to the least loaded live connection of the key's
//! target) as soon as one is answered, for `--duration` after `--warmup`. Latency is then taken
//! from when the request was issued: the closed-loop view, for the peak throughput.
//!
//! # Protocols
//!
//! `--protocol resp` (the default) or `--protocol memcached`: the text protocol's `get` and
//! `set`, replies read whole and judged by [`crate::memcached`]; several targets are then
//! chosen by a hash of the key (libmemcached's one-at-a-time, modulo N), not by key number.
//!
//! # Targets
//!
//! One target, or several (`--target a,b`): each request goes to the target that owns its key,
//! by `key number mod N` (client-side sharding over independent servers) or, with `--cluster`,
//! by hash slot from the first target's CLUSTER SLOTS (a Redis Cluster or a recached fleet's
//! engines, direct). `--connections` is per target. MGET needs a single target.
//!
//! # Modes
//!
//! - `plain`: each request is one command from the mix (`get`, `set`, `mget`, `incr`). Keys are
//!   `<prefix><n>`; INCR uses `<prefix><n>:n` so it never meets a SET's string value. `tx` is a
//!   transfer as one transaction, `MULTI / DECRBY <prefix><n> 1 / INCRBY <tx-key-b-prefix><m> 1
//!   / EXEC`, written in one go and answered by its EXEC (an array; anything else counts as an
//!   error under its first word, `null` for a nil; an error queueing a command counts once).
//! - `cache-aside` (needs `--origin`; pipeline forced to 1): `GET key` at the cache; on a nil,
//!   `GET key` at the origin, then `SET key <value> [PX ttl]` at the cache. The latency is taken
//!   when the value is in hand (after the origin reply), as an application would return it; the
//!   connection stays busy until the SET is acknowledged. `origin_calls` counts origin GETs.

use std::collections::{BTreeMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

use resp::Value;

use crate::reply::{self, Reply};
use crate::rng::{KeyChooser, Rng};
use crate::schedule::Schedule;

/// Below this gap to the next arrival the loop polls without sleeping.
pub const SPIN_BELOW: Duration = Duration::from_millis(2);
/// How often a broken connection is redialled.
pub const REDIAL_INTERVAL: Duration = Duration::from_millis(100);
/// Connect timeout of each dial.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest latency the histograms hold (60 s, in µs); larger values are clamped to it.
const HIST_MAX_US: u64 = 60_000_000;
/// Read chunk size.
const READ_CHUNK: usize = 64 * 1024;
/// A reply larger than this (bytes) is treated as a protocol error rather than buffered forever.
const MAX_REPLY_BYTES: usize = 512 << 20;

/// Every parameter of a run; serialised as-is into the result JSON.
#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct LoadParams {
    /// The server under test, host:port (any RESP server: recached engine or proxy,
    /// redis-server, nutcracker). Several, comma separated: keys are sharded over them, by
    /// `key number mod N`, or by hash slot with `--cluster`.
    #[arg(long, default_value = "127.0.0.1:6380")]
    pub target: String,
    /// Route by Redis Cluster hash slot, with the slot map read from the first target's
    /// CLUSTER SLOTS (a recached fleet's engines or a Redis Cluster, direct).
    #[arg(long)]
    pub cluster: bool,
    /// Target arrival rate, requests per second (all connections together).
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Measured duration in seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Warm-up in seconds: requests scheduled in it are sent but not recorded.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// TCP connections (per target node).
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Most requests in flight per connection (1 = no pipelining).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Generator threads; connections are split between them.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the schedule and of the key choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Key space size: keys are `<key-prefix><n>` for n in 0..keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Key distribution: `uniform` or `zipf` (rank 0 hottest).
    #[arg(long, default_value = "uniform")]
    pub distribution: String,
    /// Zipf exponent (YCSB uses 0.99).
    #[arg(long, default_value_t = 0.99)]
    pub zipf_s: f64,
    /// Value size in bytes of SET (and of the cache fill in cache-aside mode).
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// Command mix as weights, e.g. `get:90,set:10` (get, set, mget, incr, tx).
    #[arg(long, default_value = "get:90,set:10")]
    pub mix: String,
    /// Key prefix of the credited key of a `tx` (the debited one has --key-prefix); a hash tag
    /// here and one in --key-prefix choose the engines the transaction spans.
    #[arg(long, default_value = "txb:")]
    pub tx_key_b_prefix: String,
    /// Keys per MGET.
    #[arg(long, default_value_t = 10)]
    pub mget: usize,
    /// TTL in ms given to SETs (PX); 0 = none.
    #[arg(long, default_value_t = 0)]
    pub ttl_ms: u64,
    /// `plain` or `cache-aside`.
    #[arg(long, default_value = "plain")]
    pub mode: String,
    /// The origin server (host:port) of cache-aside mode.
    #[arg(long)]
    pub origin: Option<String>,
    /// Close and redial each connection after this many replies (connection churn); 0 = never.
    #[arg(long, default_value_t = 0)]
    pub reconnect_every: u64,
    /// Seconds to wait for outstanding replies after the last arrival.
    #[arg(long, default_value_t = 5.0)]
    pub drain_timeout: f64,
    /// Most requests waiting per connection before new arrivals are shed (`overload`).
    #[arg(long, default_value_t = 100_000)]
    pub max_backlog: usize,
    /// Write the latency of each 250 ms of intended start times (after the warm-up) to this CSV
    /// file: `t_s,requests,p50_us,p99_us,max_us` (to see when in a run latency rose).
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    /// Sleep at most this many µs instead of spinning when the next arrival is near and
    /// nothing is ready (0 = spin, the default); a reply arriving during a nap is timed late
    /// by up to that much. For hosts where the generator's spinning would take a core the
    /// servers need.
    #[arg(long, default_value_t = 0)]
    pub nap_us: u64,
    /// Wire protocol: `resp`, or `memcached` (text protocol `get`/`set`; several targets are
    /// chosen by a hash of the key, as a memcached client with a server list does).
    #[arg(long, default_value = "resp")]
    pub protocol: String,
    /// Closed loop: no schedule (`--rate` is ignored); each thread keeps its connections ×
    /// pipeline requests outstanding, the next one sent when one is answered.
    #[arg(long)]
    pub closed_loop: bool,
    /// Stop the arrivals when this file appears (checked every 10 ms), before `--duration`
    /// ends: a run as long as some other job (a slot move), up to `--duration`.
    #[arg(long)]
    pub stop_file: Option<std::path::PathBuf>,
}

impl Default for LoadParams {
    fn default() -> Self {
        LoadParams {
            target: "127.0.0.1:6380".into(),
            cluster: false,
            rate: 10_000.0,
            duration: 10.0,
            warmup: 1.0,
            connections: 16,
            pipeline: 1,
            threads: 1,
            seed: 1,
            keys: 100_000,
            key_prefix: "key:".into(),
            distribution: "uniform".into(),
            zipf_s: 0.99,
            value_size: 64,
            mix: "get:90,set:10".into(),
            tx_key_b_prefix: "txb:".into(),
            mget: 10,
            ttl_ms: 0,
            mode: "plain".into(),
            origin: None,
            reconnect_every: 0,
            drain_timeout: 5.0,
            max_backlog: 100_000,
            stop_file: None,
            timeline: None,
            protocol: "resp".into(),
            closed_loop: false,
            nap_us: 0,
        }
    }
}

/// One command kind of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    Set,
    Mget,
    Incr,
    /// MULTI / DECRBY / INCRBY / EXEC.
    Tx,
}

/// Parses `get:90,set:10` into cumulative weights.
pub fn parse_mix(mix: &str) -> Result<Vec<(Op, u64)>, String> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for part in mix.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, w) = part.split_once(':').unwrap_or((part, "1"));
        let op = match name.to_ascii_lowercase().as_str() {
            "get" => Op::Get,
            "set" => Op::Set,
            "mget" => Op::Mget,
            "incr" => Op::Incr,
            "tx" => Op::Tx,
            other => {
                return Err(format!(
                    "mix: unknown command {other:?} (get, set, mget, incr, tx)"
                ));
            }
        };
        let w: u64 = w
            .parse()
            .map_err(|_| format!("mix: weight of {name} is not a whole number: {w:?}"))?;
        if w > 0 {
            total += w;
            out.push((op, total));
        }
    }
    if out.is_empty() {
        return Err(format!("mix {mix:?} has no command with a positive weight"));
    }
    Ok(out)
}

/// The checked, derived form of [`LoadParams`] that the threads share.
struct Plan {
    cache_aside: bool,
    /// `--protocol memcached`.
    memcached: bool,
    closed: bool,
    mix: Vec<(Op, u64)>,
    keys: KeyChooser,
    value: Vec<u8>,
    warmup_ns: u64,
    end_ns: u64,
    drain: Duration,
}

impl Plan {
    fn new(p: &LoadParams) -> Result<Plan, String> {
        if !(p.rate.is_finite() && p.rate > 0.0) {
            return Err(format!("rate must be > 0, got {}", p.rate));
        }
        if !(p.duration.is_finite() && p.duration > 0.0 && p.warmup >= 0.0) {
            return Err("duration must be > 0 and warmup ≥ 0".into());
        }
        if p.connections == 0 || p.pipeline == 0 || p.threads == 0 || p.mget == 0 {
            return Err("connections, pipeline, threads and mget must be ≥ 1".into());
        }
        if p.threads > p.connections {
            return Err("threads must not exceed connections".into());
        }
        let cache_aside = match p.mode.as_str() {
            "plain" => false,
            "cache-aside" if p.origin.is_some() => true,
            "cache-aside" => return Err("cache-aside mode needs --origin".into()),
            m => return Err(format!("mode must be plain or cache-aside, got {m:?}")),
        };
        let memcached = match p.protocol.as_str() {
            "resp" => false,
            "memcached" if cache_aside || p.cluster => {
                return Err("--protocol memcached has no cache-aside mode and no --cluster".into());
            }
            "memcached" => true,
            x => return Err(format!("protocol must be resp or memcached, got {x:?}")),
        };
        let mix = parse_mix(&p.mix)?;
        if memcached {
            crate::memcached::check_mix(&mix, &p.key_prefix)?;
        }
        let keys = match p.distribution.as_str() {
            "uniform" => KeyChooser::uniform(p.keys),
            "zipf" => KeyChooser::zipf(p.keys, p.zipf_s)?,
            d => return Err(format!("distribution must be uniform or zipf, got {d:?}")),
        };
        Ok(Plan {
            cache_aside,
            memcached,
            closed: p.closed_loop,
            mix,
            keys,
            value: vec![b'v'; p.value_size],
            warmup_ns: (p.warmup * 1e9) as u64,
            end_ns: ((p.warmup + p.duration) * 1e9) as u64,
            drain: Duration::from_secs_f64(p.drain_timeout.max(0.0)),
        })
    }

    fn pick_op(&self, rng: &mut Rng) -> Op {
        if self.cache_aside {
            return Op::Get;
        }
        let total = self.mix.last().map_or(1, |m| m.1);
        let x = rng.below(total);
        self.mix
            .iter()
            .find(|(_, cum)| x < *cum)
            .map_or(Op::Get, |m| m.0)
    }
}

/// What one run measured.
pub struct Outcome {
    pub latency: Histogram<u64>,
    pub service: Histogram<u64>,
    pub lag: Histogram<u64>,
    /// Recorded requests (scheduled after the warm-up) that completed without an error reply.
    pub ok: u64,
    /// Recorded requests that were scheduled (after the warm-up).
    pub scheduled: u64,
    pub errors: BTreeMap<String, u64>,
    pub origin_calls: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub reconnects: u64,
    /// Seconds from the first recorded arrival to the last reply.
    pub elapsed_s: f64,
    /// Latency per [`TIMELINE_BUCKET_NS`] of intended start after the warm-up (`--timeline`).
    pub timeline: Vec<Histogram<u64>>,
}

/// The width of one `--timeline` bucket.
pub const TIMELINE_BUCKET_NS: u64 = 250_000_000;

/// Two significant digits: a bucket's histogram stays small.
fn timeline_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("static histogram bounds are valid")
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("static histogram bounds are valid")
}

impl Outcome {
    fn new() -> Outcome {
        Outcome {
            latency: histogram(),
            service: histogram(),
            lag: histogram(),
            ok: 0,
            scheduled: 0,
            errors: BTreeMap::new(),
            origin_calls: 0,
            cache_hits: 0,
            cache_misses: 0,
            reconnects: 0,
            elapsed_s: 0.0,
            timeline: Vec::new(),
        }
    }

    fn merge(&mut self, o: Outcome) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.latency.add(&o.latency);
        let _ = self.service.add(&o.service);
        let _ = self.lag.add(&o.lag);
        self.ok += o.ok;
        self.scheduled += o.scheduled;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.origin_calls += o.origin_calls;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
        self.reconnects += o.reconnects;
        self.elapsed_s = self.elapsed_s.max(o.elapsed_s);
        for (i, h) in o.timeline.iter().enumerate() {
            if self.timeline.len() <= i {
                self.timeline.resize_with(i + 1, timeline_histogram);
            }
            let _ = self.timeline[i].add(h);
        }
    }

    /// The `--timeline` CSV.
    pub fn timeline_csv(&self) -> String {
        let mut out = String::from("t_s,requests,p50_us,p99_us,max_us\n");
        for (i, h) in self.timeline.iter().enumerate() {
            out.push_str(&format!(
                "{:.2},{},{},{},{}\n",
                (i as u64 * TIMELINE_BUCKET_NS) as f64 / 1e9,
                h.len(),
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.max()
            ));
        }
        out
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Completed requests per second over the measured window.
    pub fn achieved_rate(&self, duration: f64) -> f64 {
        self.ok as f64 / duration.max(self.elapsed_s).max(1e-9)
    }

    /// Percentile summary of one histogram, in microseconds.
    pub fn summary(h: &Histogram<u64>) -> serde_json::Value {
        let q = |x: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(x)
            }
        };
        serde_json::json!({
            "count": h.len(),
            "min": if h.is_empty() { 0 } else { h.min() },
            "mean": if h.is_empty() { 0.0 } else { (h.mean() * 10.0).round() / 10.0 },
            "p50": q(0.50), "p90": q(0.90), "p95": q(0.95), "p99": q(0.99), "p999": q(0.999),
            "max": if h.is_empty() { 0 } else { h.max() },
        })
    }

    fn add_error(&mut self, kind: &str, recorded: bool) {
        if recorded {
            *self.errors.entry(kind.to_string()).or_default() += 1;
        }
    }
}

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Plain request, or the cache GET of cache-aside.
    Cache,
    /// Cache-aside: the origin GET after a miss.
    Origin,
    /// Cache-aside: the SET that fills the cache (latency already recorded).
    Fill,
}

#[derive(Debug, Clone)]
struct Req {
    intended_ns: u64,
    sent_ns: u64,
    op: Op,
    key: u64,
    stage: Stage,
    recorded: bool,
    /// Replies still to come for it (4 for a `tx`: MULTI, two QUEUED, EXEC).
    frames: u8,
    /// A `tx` whose queueing failed: counted once, its EXECABORT not again.
    failed: bool,
}

/// One socket with its buffers.
struct Wire {
    stream: Option<TcpStream>,
    out: Vec<u8>,
    out_off: usize,
    inbuf: Vec<u8>,
}

impl Wire {
    fn new() -> Wire {
        Wire {
            stream: None,
            out: Vec::new(),
            out_off: 0,
            inbuf: Vec::new(),
        }
    }

    /// Writes until done or `WouldBlock`.
    fn flush(&mut self) -> std::io::Result<()> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        while self.out_off < self.out.len() {
            match s.write(&self.out[self.out_off..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.out_off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_off == self.out.len() {
            self.out.clear();
            self.out_off = 0;
        }
        Ok(())
    }

    /// Reads until a short read or `WouldBlock`; an orderly close is an error (a server never
    /// closes first). A short read emptied the socket's receive queue, and on Linux data (or
    /// a close) arriving after it is a new edge, so the read that would only say `WouldBlock`
    /// (one system call per reply) is skipped, as the proxy's loops do.
    fn fill(&mut self) -> std::io::Result<()> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match s.read(&mut chunk) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    if n < chunk.len() {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn reset(&mut self) {
        self.stream = None;
        self.out.clear();
        self.out_off = 0;
        self.inbuf.clear();
    }
}

/// One logical connection: the target socket and, in cache-aside mode, an origin socket.
struct Conn {
    /// Index into the worker's targets.
    target: usize,
    cache: Wire,
    origin: Wire,
    backlog: VecDeque<Req>,
    inflight: VecDeque<Req>,
    replies_since_dial: u64,
    /// When down: the earliest time to redial.
    redial_at: Option<Instant>,
}

struct Worker<'a> {
    params: &'a LoadParams,
    plan: &'a Plan,
    targets: &'a [SocketAddr],
    router: &'a Router,
    origin: Option<SocketAddr>,
    poll: Poll,
    conns: Vec<Conn>,
    /// Connection indices of each target.
    by_target: Vec<Vec<usize>>,
    rng: Rng,
    start: Instant,
    out: Outcome,
    /// Round-robin position per target.
    rr: Vec<usize>,
    key_buf: String,
}

/// Which target a key goes to.
pub enum Router {
    /// One target, or client-side sharding by `key number mod N`.
    Modulo(usize),
    /// Redis Cluster: slot → target index (16384 entries).
    Slots(Vec<usize>),
    /// memcached clients' server list: [`crate::memcached::server_for`] over N targets.
    Hash(usize),
}

/// Redis Cluster key slot: CRC16-XMODEM of the hash tag (the bytes between the first `{` and
/// the next `}`, if non-empty) or of the whole key, mod 16384 (Redis Cluster specification).
pub fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|o| {
            let rest = &key[o + 1..];
            let c = rest.iter().position(|&b| b == b'}')?;
            (c > 0).then(|| &rest[..c])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) & 0x3FFF
}

/// Reads CLUSTER SLOTS from `seed` and returns the nodes (in order of first appearance) and the
/// slot map. Every slot must be covered.
pub fn discover_cluster(seed: SocketAddr) -> Result<(Vec<SocketAddr>, Vec<usize>), String> {
    let mut s = std::net::TcpStream::connect_timeout(&seed, CONNECT_TIMEOUT)
        .map_err(|e| format!("{seed}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut req = Vec::new();
    resp::encode_request(&mut req, &["CLUSTER", "SLOTS"]);
    s.write_all(&req).map_err(|e| format!("{seed}: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let value = loop {
        match resp::decode(&buf) {
            Ok(Some((v, _))) => break v,
            Ok(None) => {}
            Err(e) => return Err(format!("{seed}: CLUSTER SLOTS: {e}")),
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(format!("{seed}: no complete CLUSTER SLOTS reply")),
            Ok(n) if buf.len() < 1 << 20 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return Err(format!("{seed}: CLUSTER SLOTS reply too large")),
        }
    };
    let Value::Array(ranges) = value else {
        return Err(format!("{seed}: CLUSTER SLOTS answered {value:?}"));
    };
    let mut nodes: Vec<SocketAddr> = Vec::new();
    let mut map = vec![usize::MAX; 16384];
    for r in ranges {
        let Value::Array(r) = r else { continue };
        let (Some(Value::Integer(a)), Some(Value::Integer(b)), Some(Value::Array(node))) =
            (r.first(), r.get(1), r.get(2))
        else {
            continue;
        };
        let (Some(Value::Bulk(host)), Some(Value::Integer(port))) = (node.first(), node.get(1))
        else {
            continue;
        };
        let host = String::from_utf8_lossy(host);
        let host = if host.is_empty() {
            seed.ip().to_string()
        } else {
            host.into_owned()
        };
        let addr = resolve(&format!("{host}:{port}"))?;
        let idx = nodes.iter().position(|n| *n == addr).unwrap_or_else(|| {
            nodes.push(addr);
            nodes.len() - 1
        });
        for slot in (*a).max(0)..=(*b).min(16383) {
            map[slot as usize] = idx;
        }
    }
    if map.contains(&usize::MAX) {
        return Err(format!("{seed}: CLUSTER SLOTS does not cover every slot"));
    }
    Ok((nodes, map))
}

/// Sets the calling thread's timer slack (Linux `PR_SET_TIMERSLACK`; the default 50 µs would
/// make a 20 µs nap last up to 70 µs). Elsewhere a no-op.
fn set_timer_slack_ns(ns: u64) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_TIMERSLACK, n) takes an integer and only changes this thread's
    // timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ns;
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))
}

impl<'a> Worker<'a> {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn key(&mut self, k: u64) -> Vec<u8> {
        use std::fmt::Write as _;
        self.key_buf.clear();
        let _ = write!(self.key_buf, "{}{}", self.params.key_prefix, k);
        self.key_buf.as_bytes().to_vec()
    }

    /// The key a request names first: INCR counters get a `:n` suffix, so they never meet
    /// a string value written by SET (which INCR would refuse as "not an integer").
    fn op_key(&mut self, op: Op, k: u64) -> Vec<u8> {
        let mut key = self.key(k);
        if op == Op::Incr {
            key.extend_from_slice(b":n");
        }
        key
    }

    /// Dials connection `i` (both wires); on failure schedules a redial.
    fn dial(&mut self, i: usize) -> bool {
        let mut ok = true;
        let target = self.targets[self.conns[i].target];
        for (side, addr) in [(0usize, Some(target)), (1, self.origin)] {
            let Some(addr) = addr else { continue };
            let stream =
                std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).and_then(|s| {
                    s.set_nodelay(true)?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                });
            match stream {
                Ok(s) => {
                    let mut s = TcpStream::from_std(s);
                    let token = Token(2 * i + side);
                    if self
                        .poll
                        .registry()
                        .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                        .is_err()
                    {
                        ok = false;
                        break;
                    }
                    let wire = if side == 0 {
                        &mut self.conns[i].cache
                    } else {
                        &mut self.conns[i].origin
                    };
                    wire.reset();
                    wire.stream = Some(s);
                }
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        let c = &mut self.conns[i];
        c.replies_since_dial = 0;
        if ok {
            c.redial_at = None;
        } else {
            c.cache.reset();
            c.origin.reset();
            c.redial_at = Some(Instant::now() + REDIAL_INTERVAL);
        }
        ok
    }

    fn is_up(&self, i: usize) -> bool {
        self.conns[i].redial_at.is_none() && self.conns[i].cache.stream.is_some()
    }

    /// Fails everything on connection `i` and marks it for a redial.
    fn fail(&mut self, i: usize, kind: &str) {
        let c = &mut self.conns[i];
        let reqs: Vec<Req> = c.inflight.drain(..).chain(c.backlog.drain(..)).collect();
        for side in [&mut c.cache, &mut c.origin] {
            if let Some(mut s) = side.stream.take() {
                let _ = self.poll.registry().deregister(&mut s);
            }
            side.reset();
        }
        c.redial_at = Some(Instant::now() + REDIAL_INTERVAL);
        for r in reqs {
            // A fill failing after its latency was taken is not a request error.
            if r.stage != Stage::Fill {
                self.out.add_error(kind, r.recorded);
            }
        }
    }

    /// Encodes the request's current stage onto the right wire.
    fn write_req(&mut self, i: usize, r: &Req) {
        let key = self.op_key(r.op, r.key);
        if self.plan.memcached {
            let exptime = crate::memcached::exptime(self.params.ttl_ms);
            let out = &mut self.conns[i].cache.out;
            crate::memcached::encode(out, r.op, &key, &self.plan.value, exptime);
            return;
        }
        let ttl = self.params.ttl_ms.to_string();
        let value = &self.plan.value;
        let mut buf = Vec::new();
        let args: &[&[u8]] = match (r.stage, r.op) {
            (Stage::Origin, _) | (Stage::Cache, Op::Get) => &[b"GET", &key],
            (Stage::Fill, _) | (Stage::Cache, Op::Set) if self.params.ttl_ms > 0 => {
                &[b"SET", &key, value, b"PX", ttl.as_bytes()]
            }
            (Stage::Fill, _) | (Stage::Cache, Op::Set) => &[b"SET", &key, value],
            (Stage::Cache, Op::Incr) => &[b"INCR", &key],
            (Stage::Cache, Op::Tx) => {
                let b = format!(
                    "{}{}",
                    self.params.tx_key_b_prefix,
                    self.plan.keys.pick(&mut self.rng)
                );
                let multi: &[&[u8]] = &[b"MULTI"];
                let exec: &[&[u8]] = &[b"EXEC"];
                resp::encode_request(&mut buf, multi);
                resp::encode_request(&mut buf, &[b"DECRBY".as_slice(), &key, b"1"]);
                resp::encode_request(&mut buf, &[b"INCRBY".as_slice(), b.as_bytes(), b"1"]);
                resp::encode_request(&mut buf, exec);
                &[]
            }
            (Stage::Cache, Op::Mget) => {
                let mut args: Vec<Vec<u8>> = vec![b"MGET".to_vec(), key];
                for _ in 1..self.params.mget {
                    let k = self.plan.keys.pick(&mut self.rng);
                    args.push(self.key(k));
                }
                // Owned keys: written here, nothing left for below.
                resp::encode_request(&mut buf, &args);
                &[]
            }
        };
        if !args.is_empty() {
            resp::encode_request(&mut buf, args);
        }
        let c = &mut self.conns[i];
        let wire = if r.stage == Stage::Origin {
            &mut c.origin
        } else {
            &mut c.cache
        };
        wire.out.extend_from_slice(&buf);
    }

    /// Moves backlog into flight up to the pipeline depth, then writes.
    fn pump(&mut self, i: usize) {
        if !self.is_up(i) {
            return;
        }
        let depth = if self.plan.cache_aside {
            1
        } else {
            self.params.pipeline
        };
        let now = self.now_ns();
        while self.conns[i].inflight.len() < depth {
            let Some(mut r) = self.conns[i].backlog.pop_front() else {
                break;
            };
            r.sent_ns = now;
            if r.recorded {
                self.out
                    .lag
                    .saturating_record(now.saturating_sub(r.intended_ns) / 1000);
            }
            self.write_req(i, &r);
            self.conns[i].inflight.push_back(r);
        }
        let c = &mut self.conns[i];
        if c.cache.flush().and_then(|_| c.origin.flush()).is_err() {
            self.fail(i, "io");
        }
    }

    /// Handles complete replies on one wire of connection `i`.
    fn on_replies(&mut self, i: usize, origin_side: bool) -> Result<(), String> {
        loop {
            let wire = if origin_side {
                &mut self.conns[i].origin
            } else {
                &mut self.conns[i].cache
            };
            let scanned = if self.plan.memcached {
                let op = self.conns[i].inflight.front().map_or(Op::Get, |r| r.op);
                let wire = &self.conns[i].cache;
                crate::memcached::scan(&wire.inbuf)?
                    .map(|(r, len)| (crate::memcached::classify(op, &r), len))
            } else {
                reply::scan(&wire.inbuf)?
            };
            let wire = if origin_side {
                &mut self.conns[i].origin
            } else {
                &mut self.conns[i].cache
            };
            let Some((reply, len)) = scanned else {
                if wire.inbuf.len() > MAX_REPLY_BYTES {
                    return Err("reply too large".into());
                }
                return Ok(());
            };
            wire.inbuf.drain(..len);
            let Some(mut r) = self.conns[i].inflight.pop_front() else {
                return Err("reply without a request".into());
            };
            if (r.stage == Stage::Origin) != origin_side {
                return Err("reply on the wrong connection".into());
            }
            if r.frames > 1 {
                // MULTI's +OK and the +QUEUED of a `tx`: the EXEC reply decides.
                r.frames -= 1;
                if let Reply::Error(word) = &reply
                    && !r.failed
                {
                    r.failed = true;
                    self.out.add_error(word, r.recorded);
                }
                self.conns[i].inflight.push_front(r);
                continue;
            }
            let now = self.now_ns();
            self.conns[i].replies_since_dial += 1;
            let timeline = self.params.timeline.is_some();
            let warmup_ns = self.plan.warmup_ns;
            let done = |out: &mut Outcome, r: &Req| {
                if r.recorded {
                    out.ok += 1;
                    let us = now.saturating_sub(r.intended_ns) / 1000;
                    out.latency.saturating_record(us);
                    if timeline {
                        let b =
                            (r.intended_ns.saturating_sub(warmup_ns) / TIMELINE_BUCKET_NS) as usize;
                        if out.timeline.len() <= b {
                            out.timeline.resize_with(b + 1, timeline_histogram);
                        }
                        out.timeline[b].saturating_record(us);
                    }
                    out.service
                        .saturating_record(now.saturating_sub(r.sent_ns) / 1000);
                }
            };
            match (&reply, r.stage) {
                (_, _) if r.failed => {}
                (Reply::Nil, Stage::Cache) if r.op == Op::Tx => {
                    self.out.add_error("null", r.recorded)
                }
                (Reply::Error(word), Stage::Fill) => {
                    // The value was already returned; a failed fill only shows as a later miss.
                    let _ = word;
                }
                (Reply::Error(word), _) => self.out.add_error(word, r.recorded),
                (_, Stage::Fill) => {}
                (Reply::Nil, Stage::Cache) if self.plan.cache_aside => {
                    if r.recorded {
                        self.out.cache_misses += 1;
                        self.out.origin_calls += 1;
                    }
                    r.stage = Stage::Origin;
                    self.write_req(i, &r);
                    self.conns[i].inflight.push_front(r);
                    continue;
                }
                (_, Stage::Origin) => {
                    done(&mut self.out, &r);
                    r.stage = Stage::Fill;
                    self.write_req(i, &r);
                    self.conns[i].inflight.push_front(r);
                    continue;
                }
                (_, Stage::Cache) => {
                    if self.plan.cache_aside && r.recorded {
                        self.out.cache_hits += 1;
                    } else if self.plan.memcached && r.op == Op::Get && r.recorded {
                        // A memcached get's hit or miss (the bench fills its keys first).
                        if reply == Reply::Nil {
                            self.out.cache_misses += 1;
                        } else {
                            self.out.cache_hits += 1;
                        }
                    }
                    done(&mut self.out, &r);
                }
            }
        }
    }

    /// Hands one arrival to the next live connection (round robin; closed loop: the least
    /// loaded). False when it could not be placed (no live connection, or overload).
    fn dispatch(&mut self, intended_ns: u64) -> bool {
        let recorded = intended_ns >= self.plan.warmup_ns;
        if recorded {
            self.out.scheduled += 1;
        }
        let op = self.plan.pick_op(&mut self.rng);
        let key = self.plan.keys.pick(&mut self.rng);
        let t = match self.router {
            Router::Modulo(n) => (key % (*n).max(1) as u64) as usize,
            Router::Slots(map) => {
                let k = self.op_key(op, key);
                map[key_slot(&k) as usize]
            }
            Router::Hash(n) => {
                let k = self.op_key(op, key);
                crate::memcached::server_for(&k, *n)
            }
        };
        let conns = &self.by_target[t];
        let n = conns.len();
        let live = (0..n)
            .map(|k| conns[(self.rr[t] + k) % n])
            .filter(|&i| self.is_up(i));
        let chosen = if self.plan.closed {
            let load = |i: usize| self.conns[i].backlog.len() + self.conns[i].inflight.len();
            live.min_by_key(|&i| load(i))
        } else {
            live.into_iter().next()
        };
        let Some(i) = chosen else {
            self.out.add_error("unavailable", recorded);
            return false;
        };
        self.rr[t] = (self.rr[t] + 1) % n;
        if self.conns[i].backlog.len() >= self.params.max_backlog {
            self.out.add_error("overload", recorded);
            return false;
        }
        self.conns[i].backlog.push_back(Req {
            intended_ns,
            sent_ns: 0,
            op,
            key,
            stage: Stage::Cache,
            recorded,
            frames: if op == Op::Tx { 4 } else { 1 },
            failed: false,
        });
        true
    }

    fn outstanding(&self) -> bool {
        self.conns
            .iter()
            .any(|c| !c.backlog.is_empty() || !c.inflight.is_empty())
    }

    fn run(mut self, schedule: Schedule) -> Result<Outcome, String> {
        for i in 0..self.conns.len() {
            if !self.dial(i) {
                let t = self.targets[self.conns[i].target];
                return Err(format!("cannot connect to {t}"));
            }
        }
        let mut events = Events::with_capacity(1024);
        let mut schedule = schedule.peekable();
        self.start = Instant::now();
        let mut drain_deadline: Option<Instant> = None;
        // The arrivals' end: the plan's, or earlier when the stop file appears.
        let mut end_ns = self.plan.end_ns;
        let mut stop_checked_ns = 0u64;
        loop {
            let now = self.now_ns();
            if let Some(f) = &self.params.stop_file
                && now >= stop_checked_ns + 10_000_000
                && now < end_ns
            {
                stop_checked_ns = now;
                if f.exists() {
                    end_ns = now;
                }
            }
            // 1. Arrivals that are due (closed loop: as many as the window has room for).
            let mut closed_stuck = false;
            if self.plan.closed {
                if now < end_ns {
                    let window = self.conns.len() * self.params.pipeline;
                    let mut have: usize = self
                        .conns
                        .iter()
                        .map(|c| c.backlog.len() + c.inflight.len())
                        .sum();
                    while have < window {
                        if !self.dispatch(now) {
                            closed_stuck = true;
                            break;
                        }
                        have += 1;
                    }
                }
            } else {
                while let Some(&t) = schedule.peek() {
                    if t > now || t >= end_ns {
                        break;
                    }
                    schedule.next();
                    self.dispatch(t);
                }
            }
            let arrivals_done = if self.plan.closed {
                now >= end_ns
            } else {
                schedule.peek().is_none_or(|&t| t >= end_ns)
            };
            // 2. Redials and churn.
            let wall = Instant::now();
            for i in 0..self.conns.len() {
                let c = &self.conns[i];
                let churn = self.params.reconnect_every > 0
                    && c.replies_since_dial >= self.params.reconnect_every
                    && c.inflight.is_empty();
                if churn {
                    let c = &mut self.conns[i];
                    for side in [&mut c.cache, &mut c.origin] {
                        if let Some(mut s) = side.stream.take() {
                            let _ = self.poll.registry().deregister(&mut s);
                        }
                    }
                    self.out.reconnects += 1;
                    self.dial(i);
                } else if c.redial_at.is_some_and(|at| at <= wall) {
                    self.out.reconnects += 1;
                    self.dial(i);
                }
                self.pump(i);
            }
            // 3. Done?
            if arrivals_done {
                let deadline =
                    *drain_deadline.get_or_insert_with(|| Instant::now() + self.plan.drain);
                if !self.outstanding() || Instant::now() >= deadline {
                    break;
                }
            }
            // 4. Wait for I/O or the next arrival.
            let next = schedule.peek().copied().filter(|&t| t < end_ns);
            let gap = match next {
                // Closed loop: replies wake the poll; a window that could not be filled (no
                // live connection) is retried after 10 ms, not in a busy loop of errors.
                _ if self.plan.closed && !arrivals_done && !closed_stuck => {
                    Duration::from_nanos(end_ns.saturating_sub(self.now_ns()))
                        .min(Duration::from_millis(10))
                        .max(SPIN_BELOW)
                }
                _ if self.plan.closed => Duration::from_millis(10),
                Some(t) => Duration::from_nanos(t.saturating_sub(self.now_ns())),
                None => Duration::from_millis(10),
            };
            let timeout = if gap < SPIN_BELOW {
                Duration::ZERO
            } else {
                gap - Duration::from_millis(1)
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("poll: {e}")),
            }
            if events.is_empty() && timeout.is_zero() {
                let nap = Duration::from_micros(self.params.nap_us);
                let until_next = next.map_or(nap, |t| {
                    Duration::from_nanos(t.saturating_sub(self.now_ns()))
                });
                if nap.is_zero() || until_next.is_zero() {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(nap.min(until_next));
                }
            }
            for ev in events.iter() {
                let i = ev.token().0 / 2;
                let origin_side = ev.token().0 % 2 == 1;
                if i >= self.conns.len() {
                    continue;
                }
                let wire = if origin_side {
                    &mut self.conns[i].origin
                } else {
                    &mut self.conns[i].cache
                };
                if wire.stream.is_none() {
                    continue;
                }
                let io = wire.fill().and_then(|_| wire.flush());
                // Replies that arrived before an error still count.
                if let Err(e) = self.on_replies(i, origin_side) {
                    log::debug!("connection {i}: {e}");
                    self.fail(i, "protocol");
                    continue;
                }
                if io.is_err() {
                    self.fail(i, "io");
                    continue;
                }
                self.pump(i);
            }
        }
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            let left: Vec<Req> = c.inflight.drain(..).chain(c.backlog.drain(..)).collect();
            for r in left {
                if r.stage != Stage::Fill {
                    self.out.add_error("unfinished", r.recorded);
                }
            }
        }
        self.out.elapsed_s =
            (self.start.elapsed().as_secs_f64() - self.plan.warmup_ns as f64 / 1e9).max(0.0);
        if end_ns < self.plan.end_ns {
            // Stopped early: the measured time ends with the last arrival, not the drain.
            self.out.elapsed_s = (end_ns.saturating_sub(self.plan.warmup_ns) as f64 / 1e9).max(0.0);
        }
        Ok(self.out)
    }
}

/// Runs the load described by `params` and returns what it measured.
pub fn run(params: &LoadParams) -> Result<Outcome, String> {
    let plan = Plan::new(params)?;
    let listed: Vec<SocketAddr> = params
        .target
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(resolve)
        .collect::<Result<_, _>>()?;
    let first = *listed.first().ok_or("no --target")?;
    let (targets, router) = if params.cluster {
        let (nodes, map) = discover_cluster(first)?;
        (nodes, Router::Slots(map))
    } else if plan.memcached {
        let n = listed.len();
        (listed, Router::Hash(n))
    } else {
        let n = listed.len();
        (listed, Router::Modulo(n))
    };
    if targets.len() > 1 && plan.mix.iter().any(|m| m.0 == Op::Mget) {
        return Err("mget needs a single target (its keys would span several servers)".into());
    }
    let (targets, router) = (&targets, &router);
    let origin = params.origin.as_deref().map(resolve).transpose()?;
    let root = Rng::new(params.seed);
    let threads = params.threads;
    let results: Vec<Result<Outcome, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let plan = &plan;
                // Per target: this thread's share of `connections`.
                let per_target =
                    params.connections / threads + usize::from(t < params.connections % threads);
                let mut rng = root.fork(t as u64);
                let schedule = Schedule::new(rng.fork(u64::MAX), params.rate / threads as f64);
                let keys_rng = rng.fork(1);
                rng = keys_rng;
                s.spawn(move || -> Result<Outcome, String> {
                    if params.nap_us > 0 {
                        set_timer_slack_ns(1000);
                    }
                    let poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
                    let conns: Vec<usize> = (0..targets.len())
                        .flat_map(|t| std::iter::repeat_n(t, per_target))
                        .collect();
                    let mut by_target = vec![Vec::new(); targets.len()];
                    for (i, &t) in conns.iter().enumerate() {
                        by_target[t].push(i);
                    }
                    let worker = Worker {
                        params,
                        plan,
                        targets,
                        router,
                        origin,
                        poll,
                        by_target,
                        rr: vec![0; targets.len()],
                        conns: conns
                            .iter()
                            .map(|&target| Conn {
                                target,
                                cache: Wire::new(),
                                origin: Wire::new(),
                                backlog: VecDeque::new(),
                                inflight: VecDeque::new(),
                                replies_since_dial: 0,
                                redial_at: None,
                            })
                            .collect(),
                        rng,
                        start: Instant::now(),
                        out: Outcome::new(),
                        key_buf: String::new(),
                    };
                    worker.run(schedule)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("generator thread panicked".into()))
            })
            .collect()
    });
    let mut total = Outcome::new();
    for r in results {
        total.merge(r?);
    }
    Ok(total)
}

/// Asks a RESP server for `INFO server` (1 s timeouts) and returns its version fields:
/// `redis_version`, and `recached_version` when the server is recached. Servers that do not
/// answer INFO (nutcracker closes the connection) give an empty map.
pub fn server_info(addr: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(sa) = resolve(addr) else { return out };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) else {
        return out;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut req = Vec::new();
    resp::encode_request(&mut req, &["INFO", "server"]);
    if s.write_all(&req).is_err() {
        return out;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && buf.len() < 1 << 20 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if matches!(reply::scan(&buf), Ok(Some(_)) | Err(_)) {
            break;
        }
    }
    for line in String::from_utf8_lossy(&buf).lines() {
        if let Some((k, v)) = line.split_once(':')
            && matches!(
                k,
                "redis_version" | "recached_version" | "redis_mode" | "os"
            )
        {
            out.insert(k.to_string(), v.trim().to_string());
        }
    }
    out
}
