//! The fan-out's cap on all browsers' queued bytes together (issue 5, `--total-queue-bytes`,
//! proxy/fanout/src/server/queue.rs *Queues*): one engine, `recached fanout` with a 16 MB total cap
//! and a per-browser `--queue-bytes` of 8 MB (larger than cap / browsers, so the total cap is
//! what binds), and WebSocket subscribers that complete the subscribe handshake
//! (docs/browser-protocol.md: `hello`, `subscribed`, `must-refetch` `initial`, `snapshot`,
//! `snapshot-end`, `up-to-date`) and then stop reading.
//!
//! - `stalled_browsers_are_shed_and_resynced`: 20 stalled subscribers, 300 writes of 200 KB
//!   under their prefix (1.2 GB of keychanges they would have to hold). Asserts: the fan-out's
//!   RSS stays below a bound derived from the cap (see [`rss_bound`]); INFO `queue_shed` > 0
//!   and `queued_bytes` is never seen above the cap; a fresh subscriber that reads gets a
//!   snapshot and then keychanges; a stalled subscriber that starts reading gets
//!   `must-refetch` `slow-consumer` and ends with the server's values, not a silent gap.
//!
//! The fan-out's counters come from its RESP `INFO` (`# Fanout` section: `queued_bytes`,
//! `queue_shed`), its RSS from `/proc/<pid>/status` (`VmRSS`). Every loop is bounded in
//! count and time; the engine and the fan-out are killed by PID on drop ([`Proc`]).

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tungstenite::{Message, WebSocket};

/// The total cap given to the fan-out (`--total-queue-bytes`).
const CAP: usize = 16_000_000;
/// Per-browser budget (`--queue-bytes`): larger than `CAP / STALLED`, so the total binds.
const PER_BROWSER: usize = 8_000_000;
/// Subscribers that stop reading after the handshake.
const STALLED: usize = 20;
/// Value size of each write, bytes.
const VALUE: usize = 200_000;
/// Writes through the engine (bounded).
const WRITES: usize = 300;
/// Distinct keys the writes cycle over: a snapshot of the prefix is `KEYS × VALUE` bytes, so
/// a resynced browser's snapshot stays small next to the cap.
const KEYS: usize = 4;
/// Prefix the subscribers ask for.
const PREFIX: &str = "cap:";

/// An engine and a fan-out with the caps above, on free ports.
struct Rig {
    _engine: Proc,
    fanout: Proc,
    engine_port: u16,
    fanout_port: u16,
}

impl Rig {
    fn start() -> Rig {
        let engine_port = free_port();
        let engine = start_engine(engine_port);
        let fanout_port = free_port_except(&[engine_port]);
        let mut cmd = Command::new(recached_bin());
        cmd.args(["fanout", "--port", &fanout_port.to_string()])
            .args(["--engines", &format!("127.0.0.1:{engine_port}")])
            .args(["--total-queue-bytes", &CAP.to_string()])
            .args(["--queue-bytes", &PER_BROWSER.to_string()])
            // Stalled subscribers send no pongs: with the default 15 s period they would be
            // closed after 37.5 s; a long period keeps them connected for the whole test.
            .args(["--heartbeat-ms", "120000"]);
        let mut fanout = Proc::spawn("fanout", cmd);
        fanout.wait_port(fanout_port, START_TIMEOUT);
        Rig {
            _engine: engine,
            fanout,
            engine_port,
            fanout_port,
        }
    }

    /// The fan-out's `INFO` fields (`name:value` lines of its `# Fanout` section).
    fn info(&self) -> HashMap<String, u64> {
        info(self.fanout_port)
    }
}

fn info(port: u16) -> HashMap<String, u64> {
    let mut c = Resp::connect(port);
    let reply = c.cmd_str(&["INFO"]);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim_end().split_once(':')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A browser-protocol client over a blocking WebSocket, keeping a model of the replica: the
/// subscribed keys' values (every write here is a plain `SET`, so a map suffices).
struct Sub {
    ws: WebSocket<TcpStream>,
    /// key → value, as the protocol's messages leave it.
    keys: HashMap<String, String>,
    /// `up-to-date` seen since the last `must-refetch`.
    up_to_date: bool,
    /// Reasons of every `must-refetch` received.
    refetches: Vec<String>,
    snapshots: usize,
    keychanges: usize,
    /// Sequence number of the last keychange or position message.
    seq: u64,
    /// Whether `seq` is a position this copy holds every effect up to (set by `snapshot`,
    /// cleared by `must-refetch`).
    positioned: bool,
    /// Keychanges whose `seq` was not the previous one + 1 while positioned: effects missed
    /// without a `must-refetch` (every effect of the engine in these tests touches the
    /// subscribed prefix, so sequence numbers of a positioned copy have no gaps).
    gaps: Vec<(u64, u64)>,
}

impl Sub {
    /// Connects (small receive buffer when `rcvbuf` is set), subscribes to `prefix` and reads
    /// until up to date.
    fn subscribe(port: u16, prefix: &str, rcvbuf: Option<usize>) -> Sub {
        let stream = match rcvbuf {
            Some(n) => connect_small(port, n),
            None => TcpStream::connect(("127.0.0.1", port)).expect("connect to the fan-out"),
        };
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://127.0.0.1:{port}/ws"
        ))
        .unwrap();
        let (ws, _) = tungstenite::client(req, stream).expect("WebSocket handshake");
        let mut s = Sub {
            ws,
            keys: HashMap::new(),
            up_to_date: false,
            refetches: Vec::new(),
            snapshots: 0,
            keychanges: 0,
            seq: 0,
            positioned: false,
            gaps: Vec::new(),
        };
        let msg = json!({"type": "subscribe", "prefixes": [prefix]});
        s.ws.send(Message::text(msg.to_string()))
            .expect("send subscribe");
        s.until(Duration::from_secs(20), |s| s.up_to_date)
            .expect("up to date after subscribing");
        s
    }

    /// Reads and applies one message; `Ok(None)` when none came within the read timeout.
    fn step(&mut self) -> Result<Option<Value>, String> {
        let m = match self.ws.read() {
            Ok(Message::Text(t)) => {
                serde_json::from_str::<Value>(t.as_str()).map_err(|e| e.to_string())?
            }
            Ok(Message::Close(c)) => return Err(format!("closed: {c:?}")),
            Ok(_) => return Ok(None),
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e.to_string()),
        };
        let arg = |i: usize| m["args"][i].as_str().unwrap_or_default().to_string();
        match m["type"].as_str().unwrap_or_default() {
            "must-refetch" => {
                // One instance: drop everything it owns, i.e. every key.
                self.keys.clear();
                self.up_to_date = false;
                self.positioned = false;
                self.refetches
                    .push(m["reason"].as_str().unwrap_or_default().to_string());
            }
            "snapshot" => {
                self.snapshots += 1;
                self.seq = m["seq"].as_u64().ok_or_else(|| format!("no seq in {m}"))?;
                self.positioned = true;
            }
            "entry" | "keychange" => {
                match arg(0).to_ascii_uppercase().as_str() {
                    "SET" => {
                        self.keys.insert(arg(1), arg(2));
                    }
                    "DEL" => {
                        self.keys.remove(&arg(1));
                    }
                    other => return Err(format!("unexpected command {other} in {m}")),
                }
                if m["type"] == "keychange" {
                    self.keychanges += 1;
                    let seq = m["seq"].as_u64().ok_or_else(|| format!("no seq in {m}"))?;
                    if self.positioned && seq != self.seq + 1 {
                        self.gaps.push((self.seq, seq));
                    }
                    self.seq = seq;
                }
            }
            "up-to-date" => {
                // Every effect here is under the prefix: the position is the last keychange.
                let seq = m["seq"].as_u64().ok_or_else(|| format!("no seq in {m}"))?;
                if self.positioned && seq != self.seq {
                    self.gaps.push((self.seq, seq));
                }
                self.seq = seq;
                self.up_to_date = true;
            }
            _ => {}
        }
        Ok(Some(m))
    }

    /// Reads until `done(self)` holds; an error after `limit`.
    fn until(&mut self, limit: Duration, done: impl Fn(&Sub) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while !done(self) {
            if Instant::now() > deadline {
                return Err(format!(
                    "not done within {limit:?} (refetches {:?}, keychanges {}, up to date {})",
                    self.refetches, self.keychanges, self.up_to_date
                ));
            }
            self.step()?;
        }
        Ok(())
    }

    /// Reads until nothing arrives for one read timeout (at most `limit`).
    fn drain(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.step()?.is_none() {
                return Ok(());
            }
        }
        Err(format!("still receiving after {limit:?}"))
    }
}

/// A value of `VALUE` bytes that names the write it came from (so a stale value is told apart).
fn value(n: usize) -> String {
    let head = format!("w{n:06}:");
    head.clone() + &"x".repeat(VALUE - head.len())
}

/// Samples the fan-out's RSS and INFO every 20 ms in a thread until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<Peaks>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default, Debug, Clone)]
struct Peaks {
    rss: usize,
    queued: u64,
    samples: usize,
}

impl Sampler {
    fn start(pid: u32, port: u16) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new(Peaks::default()));
        let (s, p) = (stop.clone(), peaks.clone());
        let thread = std::thread::spawn(move || {
            // Bounded: at most 10 minutes of samples even if never stopped.
            for _ in 0..30_000 {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let r = rss_bytes(pid).map(|b| b as usize).unwrap_or(0);
                let q = info(port).get("queued_bytes").copied().unwrap_or(0);
                let mut p = p.lock().unwrap();
                p.rss = p.rss.max(r);
                p.queued = p.queued.max(q);
                p.samples += 1;
                drop(p);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler {
            stop,
            peaks,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("sampler thread");
        }
        self.peaks.lock().unwrap().clone()
    }
}

/// Writes `SET <prefix><n mod KEYS> value(n)` for `n` in `range` through the engine, one reply
/// awaited per write (so the fan-out's feed sees them spread over time, as live traffic).
fn write_values(port: u16, range: std::ops::Range<usize>, prefix: &str) {
    write_keys(port, range, prefix, KEYS);
}

/// [`write_values`] over `keys` distinct keys.
fn write_keys(port: u16, range: std::ops::Range<usize>, prefix: &str, keys: usize) {
    let mut c = Resp::connect(port);
    for n in range {
        let key = format!("{prefix}{}", n % keys);
        let reply = c.cmd(&[b"SET", key.as_bytes(), value(n).as_bytes()]);
        assert_eq!(reply, b"+OK\r\n");
    }
}

/// The fan-out's ring of recent effects (proxy/fanout/src/feed.rs `RING_BYTES`: 64 MiB of
/// effect arguments), which the queue cap does not cover.
const RING_BYTES: usize = 64 << 20;
/// What the fan-out may hold beyond its queues and ring: per browser up to one chunk plus one
/// frame inside tungstenite and as much in the batch handed to the socket (server.rs
/// `DRAIN_CHUNK` = 256 KiB, frames here ~200 KB: 20 × ~0.9 MB ≈ 18 MB at worst), plus
/// allocator slack. Measured with bounded feed reads and the shed-after-drain cap: peaks of
/// 84–88 MB (`stalled_browsers_are_shed_and_resynced`) and 104–112 MB (large snapshots)
/// against this bound of ~230 MB. Without the total cap the first run peaks at ~200 MB, under
/// this bound: what catches a missing cap there is (b), `queued_bytes` (148 MB) and no shed.
const MARGIN: usize = 24 << 20;

/// Highest RSS allowed for a fan-out that started at `base` bytes and relayed `written`
/// bytes of values: `base`, the ring, the cap, and [`MARGIN`].
///
/// The ring keeps each effect's arguments (what `RING_BYTES` counts); the `keychange` JSON and
/// framed wire bytes built to relay an effect are dropped when the next effect arrives
/// (feed.rs `Ring::push`), but the allocator keeps freed pages for reuse, so the ring is
/// counted three times (arguments, JSON, wire bytes), as if they were all still held. Without the total cap the stalled browsers would hold `STALLED ×
/// PER_BROWSER` = 160 MB more.
fn rss_bound(base: usize, written: usize) -> usize {
    base + 3 * written.min(RING_BYTES) + CAP + MARGIN
}

/// The values the engine holds for `KEYS` keys under `prefix` after writes `0..writes`.
fn expected(prefix: &str, writes: usize) -> HashMap<String, String> {
    (writes.saturating_sub(KEYS)..writes)
        .map(|n| (format!("{prefix}{}", n % KEYS), value(n)))
        .collect()
}

/// Short text of a key → value map for assertion messages (values by their write number).
fn brief(keys: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = keys
        .iter()
        .map(|(k, v)| (k.clone(), v.chars().take(8).collect()))
        .collect();
    v.sort();
    v
}

#[test]
fn stalled_browsers_are_shed_and_resynced() {
    let rig = Rig::start();
    let pid = rig.fanout.pid();
    let mut stalled: Vec<Sub> = (0..STALLED)
        .map(|_| Sub::subscribe(rig.fanout_port, PREFIX, Some(4096)))
        .collect();
    let base = rss_bytes(pid).map(|b| b as usize).expect("fan-out RSS");
    let sampler = Sampler::start(pid, rig.fanout_port);
    write_values(rig.engine_port, 0..WRITES, PREFIX);
    // Once the writes stop, so does shedding: a browser that does not read is not sent
    // snapshot after snapshot (each shed, each asked of the engine) for ever.
    let mut shed = rig.info()["queue_shed"];
    let settled = (0..10).any(|_| {
        std::thread::sleep(Duration::from_millis(500));
        let now = rig.info()["queue_shed"];
        std::mem::replace(&mut shed, now) == now
    });
    let peaks = sampler.finish();
    let info = rig.info();
    let bound = rss_bound(base, WRITES * VALUE);
    eprintln!(
        "fan-out RSS: {base} before, peak {} (bound {bound}, margin used {}); queued_bytes \
         peak {} over {} samples; INFO after: {info:?}",
        peaks.rss,
        (peaks.rss as i64) - (rss_bound(base, WRITES * VALUE) - MARGIN) as i64,
        peaks.queued,
        peaks.samples
    );
    assert!(
        settled,
        "queue_shed still rising 5 s after the last write: {info:?}"
    );
    // (a) Memory stays bounded by the cap (plus what the cap does not cover, see rss_bound).
    assert!(
        peaks.rss < bound,
        "fan-out RSS peaked at {} bytes, bound {bound} (cap {CAP}, base {base})",
        peaks.rss
    );
    // (b) The cap bound: browsers were shed, and the queues were never seen above it.
    assert!(info["queue_shed"] > 0, "no queue was shed: {info:?}");
    assert!(peaks.samples > 0);
    assert!(
        peaks.queued <= CAP as u64,
        "queued_bytes {} above the cap {CAP}",
        peaks.queued
    );
    assert!(info["queued_bytes"] <= CAP as u64, "{info:?}");

    // (c) The fan-out still serves: a fresh subscriber gets a snapshot, then keychanges.
    let mut fresh = Sub::subscribe(rig.fanout_port, PREFIX, None);
    assert_eq!(fresh.snapshots, 1);
    assert_eq!(brief(&fresh.keys), brief(&expected(PREFIX, WRITES)));
    assert!(fresh.keys == expected(PREFIX, WRITES), "snapshot values");
    const MORE: usize = 8;
    write_values(rig.engine_port, WRITES..WRITES + MORE, PREFIX);
    fresh
        .until(Duration::from_secs(20), |s| s.keychanges >= MORE)
        .expect("keychanges after the snapshot");
    assert!(
        fresh.keys == expected(PREFIX, WRITES + MORE),
        "keychange values"
    );
    assert_eq!(fresh.refetches, ["initial"]);
    assert!(fresh.gaps.is_empty(), "fresh: gaps {:?}", fresh.gaps);

    // (d) A stalled subscriber that starts reading is told to refetch (`slow-consumer`) and
    // converges to the server's values; no keychange is skipped without a refetch.
    let want = expected(PREFIX, WRITES + MORE);
    let s = &mut stalled[0];
    s.until(Duration::from_secs(60), |s| {
        s.refetches.iter().any(|r| r == "slow-consumer") && s.up_to_date && s.keys == want
    })
    .unwrap_or_else(|e| {
        panic!(
            "stalled subscriber: {e}; holds {:?}, server {:?}",
            brief(&s.keys),
            brief(&want)
        )
    });
    s.drain(Duration::from_secs(30)).expect("drained");
    eprintln!(
        "stalled subscriber: {} refetches ({:?}…), {} snapshots, {} keychanges",
        s.refetches.len(),
        &s.refetches[..s.refetches.len().min(3)],
        s.snapshots,
        s.keychanges
    );
    assert!(s.up_to_date && s.keys == want, "{:?}", brief(&s.keys));
    assert!(
        s.gaps.is_empty(),
        "stalled: keychanges skipped without a refetch: {:?}",
        s.gaps
    );
    // Still live: one more write reaches both readers.
    write_values(rig.engine_port, WRITES + MORE..WRITES + MORE + 1, PREFIX);
    let want = expected(PREFIX, WRITES + MORE + 1);
    for (who, sub) in [("fresh", &mut fresh), ("stalled", &mut stalled[0])] {
        sub.until(Duration::from_secs(20), |s| s.keys == want)
            .unwrap_or_else(|e| panic!("{who}: {e}"));
        assert!(sub.gaps.is_empty(), "{who}: {:?}", sub.gaps);
    }
}

/// Shedding a browser that does not read must not turn into a loop: before the fix in
/// server.rs (`Browser::backlogged`) a shed browser got a new snapshot at once; with
/// snapshots of half the cap (40 keys × 200 KB = 8 MB) those were shed in turn, and
/// `queue_shed` kept rising (~110/s, each one a snapshot asked of the engine) long after the
/// last write, while snapshot data drained into tungstenite's unbounded buffer (fan-out RSS
/// 450-580 MB with a 16 MB cap). Now a shed browser's snapshot waits until it has read its
/// backlog.
///
/// Memory: the same [`rss_bound`] as `stalled_browsers_are_shed_and_resynced` (base + 3 ×
/// ring + cap + [`MARGIN`], ~230 MB here). Before the feed link read at most
/// `feed::READ_BUDGET` (1 MiB) per event it read each burst of snapshot frames whole (8 MB
/// per snapshot, many snapshots at once) and held it twice, and this run peaked at 203-551 MB
/// (5 runs); with the budget it peaks at 104-112 MB (12 runs), leaving about half the bound as
/// headroom for allocator and scheduling noise, while a return of whole-burst reads (which
/// exceeded the bound in 3 of 5 runs) is caught.
#[test]
fn shedding_settles_with_large_snapshots() {
    const BIG_KEYS: usize = 40;
    let rig = Rig::start();
    let mut stalled: Vec<Sub> = (0..STALLED)
        .map(|_| Sub::subscribe(rig.fanout_port, PREFIX, Some(4096)))
        .collect();
    let pid = rig.fanout.pid();
    let base = rss_bytes(pid).map(|b| b as usize).expect("fan-out RSS");
    let sampler = Sampler::start(pid, rig.fanout_port);
    write_keys(rig.engine_port, 0..WRITES, PREFIX, BIG_KEYS);
    let mut shed = rig.info()["queue_shed"];
    let settled = (0..10).any(|_| {
        std::thread::sleep(Duration::from_millis(500));
        let now = rig.info()["queue_shed"];
        std::mem::replace(&mut shed, now) == now
    });
    let peaks = sampler.finish();
    let bound = rss_bound(base, WRITES * VALUE);
    eprintln!(
        "fan-out RSS: {base} before, peak {} (bound {bound}, over base+3×ring+cap {}); \
         queued_bytes peak {} over {} samples",
        peaks.rss,
        (peaks.rss as i64) - (bound - MARGIN) as i64,
        peaks.queued,
        peaks.samples
    );
    assert!(
        settled,
        "queue_shed still rising 5 s after the last write: {shed}"
    );
    assert!(
        peaks.rss < bound,
        "fan-out RSS peaked at {} bytes, bound {bound} (cap {CAP}, base {base})",
        peaks.rss
    );
    assert!(shed > 0);
    let info = rig.info();
    assert!(info["queued_bytes"] <= CAP as u64, "{info:?}");
    // A stalled subscriber that reads again converges to the server's 40 values.
    let want: HashMap<String, String> = (WRITES - BIG_KEYS..WRITES)
        .map(|n| (format!("{PREFIX}{}", n % BIG_KEYS), value(n)))
        .collect();
    let s = &mut stalled[STALLED - 1];
    s.until(Duration::from_secs(60), |s| s.up_to_date && s.keys == want)
        .unwrap_or_else(|e| panic!("stalled subscriber: {e}; holds {:?}", brief(&s.keys)));
    assert!(
        s.refetches.iter().any(|r| r == "slow-consumer"),
        "{:?}",
        s.refetches
    );
    assert!(s.gaps.is_empty(), "{:?}", s.gaps);
}
