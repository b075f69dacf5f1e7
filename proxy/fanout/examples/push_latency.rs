//! Push latency of the browser-replica path: a SET on a RESP port (the proxy, or an engine)
//! until it arrives as a `keychange` on a subscribed WebSocket of the fan-out. Driven by
//! scripts/push-latency.sh, which starts the fleet and the background load.
//!
//! ```text
//! push_latency latency --resp 127.0.0.1:6380 --ws ws://127.0.0.1:6480/ws [--n 10000]
//!     one subscriber; SET lat:k <i>, then wait for its keychange, n times (closed loop):
//!     p50/p90/p99/max of (arrival − send), microseconds
//! push_latency fanout --resp … --ws … --clients C [--topics T] [--rate 1000] [--seconds 10]
//!                     [--sample S]
//!     client i subscribes to `fan:<i % T>:` (T=1: every client sees every write); a writer
//!     SETs fan:<j % T>:k <send time µs> at `rate`/s; S clients (default max(100, T)) spread
//!     over the C are timed on every keychange, the others only count theirs.
//!     complete_clients = clients that received exactly the keychanges of their topic.
//! ```
//! Output: one line of `key=value` pairs (µs), for the script to print.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::{Events, Interest, Poll, Token};
use tungstenite::{Message, WebSocket};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn subscribe(ws_url: &str, prefix: &str) -> WebSocket<TcpStream> {
    let addr = ws_url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let stream = TcpStream::connect(&addr).expect("connect to the fan-out");
    stream.set_nodelay(true).unwrap();
    let (mut ws, _) = tungstenite::client(ws_url, stream).expect("WebSocket handshake");
    ws.send(Message::text(format!(
        r#"{{"type":"subscribe","prefixes":["{prefix}"]}}"#
    )))
    .unwrap();
    wait_up_to_date(&mut ws);
    ws
}

/// Reads until every instance announced by `hello` has sent `up-to-date`.
fn wait_up_to_date(ws: &mut WebSocket<TcpStream>) {
    let mut instances = usize::MAX;
    let mut up = 0;
    while up < instances {
        if let Message::Text(t) = ws.read().expect("read") {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            match v["type"].as_str() {
                Some("hello") => instances = v["instances"].as_u64().unwrap() as usize,
                Some("up-to-date") => up += 1,
                _ => {}
            }
        }
    }
}

fn percentiles(mut v: Vec<u64>) -> String {
    if v.is_empty() {
        return "n=0".into();
    }
    v.sort_unstable();
    let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    format!(
        "n={} p50={} p90={} p99={} max={}",
        v.len(),
        q(0.50),
        q(0.90),
        q(0.99),
        v[v.len() - 1]
    )
}

fn read_resp_line(s: &mut TcpStream) {
    let mut b = [0u8; 1];
    let mut last = 0u8;
    loop {
        s.read_exact(&mut b).unwrap();
        if last == b'\r' && b[0] == b'\n' {
            return;
        }
        last = b[0];
    }
}

fn latency(args: &[String]) {
    let n: usize = arg(args, "--n", "10000").parse().unwrap();
    let mut ws = subscribe(&arg(args, "--ws", "ws://127.0.0.1:6480/ws"), "lat:");
    let mut resp = TcpStream::connect(arg(args, "--resp", "127.0.0.1:6380")).unwrap();
    resp.set_nodelay(true).unwrap();
    let warmup = n / 20;
    let mut lat = Vec::with_capacity(n);
    for i in 0..n + warmup {
        let val = i.to_string();
        let mut cmd = Vec::new();
        resp::encode_request(&mut cmd, &["SET", "lat:k", &val]);
        let t0 = Instant::now();
        resp.write_all(&cmd).unwrap();
        let want = format!("\"{val}\"]");
        loop {
            match ws.read().unwrap() {
                Message::Text(t)
                    if t.as_str().contains("\"keychange\"")
                        && t.as_str().ends_with(&format!("{want}}}")) =>
                {
                    break;
                }
                _ => {}
            }
        }
        let us = t0.elapsed().as_micros() as u64;
        read_resp_line(&mut resp);
        if i >= warmup {
            lat.push(us);
        }
    }
    println!("latency {}", percentiles(lat));
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Counts the keychange frames in a server → client byte stream (unmasked frames,
/// RFC 6455 §5.2) without buffering it: only frame headers are parsed and payloads skipped,
/// so an untimed client costs one `read` per wakeup and a few comparisons per frame.
#[derive(Default)]
struct Counter {
    /// Header bytes of a frame whose header straddles two reads.
    hdr: Vec<u8>,
    /// Payload bytes of the current frame still to skip.
    skip: usize,
    keychanges: u64,
}

impl Counter {
    fn feed(&mut self, mut b: &[u8]) {
        const KC: &[u8] = br#"{"type":"keychange""#;
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len());
                self.skip -= n;
                b = &b[n..];
                continue;
            }
            // Complete the header (2, 4 or 10 bytes).
            let take = 10usize.saturating_sub(self.hdr.len()).min(b.len());
            let mut h = std::mem::take(&mut self.hdr);
            let had = h.len();
            h.extend_from_slice(&b[..take]);
            let need = match h.get(1).map(|x| x & 0x7f) {
                None => usize::MAX,
                Some(126) => 4,
                Some(127) => 10,
                Some(_) => 2,
            };
            if h.len() < need {
                self.hdr = h;
                return;
            }
            let len = match need {
                2 => (h[1] & 0x7f) as usize,
                4 => u16::from_be_bytes([h[2], h[3]]) as usize,
                _ => u64::from_be_bytes(h[2..10].try_into().unwrap()) as usize,
            };
            b = &b[need - had..];
            if h[0] & 0x0f == 1 {
                // A payload straddling the read counts as a keychange: after the subscribe
                // only keychanges (and, once a minute, heartbeats) are sent.
                let n = KC.len().min(b.len()).min(len);
                if n < KC.len().min(len) || b[..n] == KC[..n] {
                    self.keychanges += 1;
                }
            }
            self.skip = len;
        }
    }
}

/// Opens `count` subscribed clients, `batch` handshakes in flight at a time (the fan-out
/// snapshots them concurrently), client `i` subscribing to `prefix(i)`.
fn subscribe_all(
    ws_url: &str,
    count: usize,
    prefix: impl Fn(usize) -> String,
) -> Vec<mio::net::TcpStream> {
    let addr = ws_url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut out = Vec::with_capacity(count);
    let batch = 200;
    for first in (0..count).step_by(batch) {
        let mut open = Vec::new();
        for i in first..(first + batch).min(count) {
            let stream = TcpStream::connect(&addr).expect("connect to the fan-out");
            stream.set_nodelay(true).unwrap();
            let (mut ws, _) = tungstenite::client(ws_url, stream).expect("WebSocket handshake");
            ws.send(Message::text(format!(
                r#"{{"type":"subscribe","prefixes":["{}"]}}"#,
                prefix(i)
            )))
            .unwrap();
            open.push(ws);
        }
        for mut ws in open {
            wait_up_to_date(&mut ws);
            let s = ws.into_inner();
            s.set_nonblocking(true).unwrap();
            out.push(mio::net::TcpStream::from_std(s));
        }
    }
    out
}

/// Reads until a short read (edge-triggered: a short read means the socket was drained).
fn drain(s: &mut mio::net::TcpStream, chunk: &mut [u8], mut f: impl FnMut(&[u8])) {
    loop {
        match s.read(chunk) {
            Ok(0) => return,
            Ok(n) => {
                f(&chunk[..n]);
                if n < chunk.len() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// The timed clients: read as soon as data arrives, every keychange decoded and timed
/// (its value is the writer's send time, unix µs). Returns (latencies, keychanges per client).
fn timed_reader(mut socks: Vec<mio::net::TcpStream>, end: Instant) -> (Vec<u64>, Vec<u64>) {
    let mut poll = Poll::new().unwrap();
    for (j, s) in socks.iter_mut().enumerate() {
        poll.registry()
            .register(s, Token(j), Interest::READABLE)
            .unwrap();
    }
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); socks.len()];
    let mut counts = vec![0u64; socks.len()];
    let mut lat = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut texts = Vec::new();
    while Instant::now() < end {
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        for ev in events.iter() {
            let j = ev.token().0;
            drain(&mut socks[j], &mut chunk, |b| bufs[j].extend_from_slice(b));
            let now = unix_us();
            frames(&mut bufs[j], &mut texts);
            for t in texts.drain(..) {
                if t.starts_with(r#"{"type":"keychange""#)
                    && let Some(pos) = t.rfind("\",\"")
                    && let Ok(sent) = t[pos + 3..].trim_end_matches("\"]}").parse::<u64>()
                {
                    lat.push(now.saturating_sub(sent));
                    counts[j] += 1;
                }
            }
        }
    }
    (lat, counts)
}

/// Server → client frames (unmasked): returns complete text payloads, keeps the rest.
fn frames(buf: &mut Vec<u8>, out: &mut Vec<String>) {
    let mut at = 0;
    loop {
        let b = &buf[at..];
        if b.len() < 2 {
            break;
        }
        let (len, hdr) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
            127 if b.len() >= 10 => (
                u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => break,
            l => (l as usize, 2),
        };
        if b.len() < hdr + len {
            break;
        }
        if b[0] & 0x0f == 1 {
            out.push(String::from_utf8_lossy(&b[hdr..hdr + len]).into_owned());
        }
        at += hdr + len;
    }
    buf.drain(..at);
}

fn fanout(args: &[String]) {
    let clients: usize = arg(args, "--clients", "1000").parse().unwrap();
    let topics: usize = arg(args, "--topics", "1").parse::<usize>().unwrap().max(1);
    let rate: u64 = arg(args, "--rate", "1000").parse().unwrap();
    let seconds: u64 = arg(args, "--seconds", "10").parse().unwrap();
    // Enough timed clients for ~rate·seconds samples: each sees 1/topics of the writes.
    let default_sample = topics.max(100).to_string();
    let sample: usize = arg(args, "--sample", &default_sample)
        .parse::<usize>()
        .unwrap()
        .clamp(1, clients);
    let ws_url = arg(args, "--ws", "ws://127.0.0.1:6480/ws");
    let t = Instant::now();
    let topic = move |i: usize| i % topics;
    let socks = subscribe_all(&ws_url, clients, |i| format!("fan:{}:", topic(i)));
    eprintln!("{clients} subscribers connected in {:?}", t.elapsed());
    // Timed client j is the (j % stride)-th of the j-th group of `stride`: spread over the
    // C clients and, with several topics, over the topics too.
    let stride = (clients / sample).max(1);
    let mut is_timed = vec![false; clients];
    for j in 0..sample {
        is_timed[(j * stride + j % stride).min(clients - 1)] = true;
    }
    let timed = |i: usize| is_timed[i];
    // Timed clients get a thread that reads as soon as data arrives. The others are read by
    // a paced loop (every 10 ms, whatever is ready): a real browser has its own CPU, and on
    // this small machine the measuring process must not take the fan-out's; pacing also
    // spares the fan-out a wakeup per write (the reader is not waiting in epoll).
    let mut timed_socks = Vec::new();
    let mut timed_ids = Vec::new();
    let mut other = Vec::new();
    let mut other_ids = Vec::new();
    for (i, s) in socks.into_iter().enumerate() {
        if timed(i) {
            timed_socks.push(s);
            timed_ids.push(i);
        } else {
            other.push(s);
            other_ids.push(i);
        }
    }
    let end = Instant::now() + Duration::from_secs(seconds + 2);
    let timed_thread = std::thread::spawn(move || timed_reader(timed_socks, end));
    // The writer: SET fan:<i % topics>:k <send time µs> at `rate`/s, replies drained by a
    // second thread.
    let resp_addr = arg(args, "--resp", "127.0.0.1:6380");
    let writer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(resp_addr).unwrap();
        s.set_nodelay(true).unwrap();
        let mut r = s.try_clone().unwrap();
        let total = rate * seconds;
        let reader = std::thread::spawn(move || {
            for _ in 0..total {
                read_resp_line(&mut r);
            }
        });
        let start = Instant::now();
        for i in 0..total {
            let due = start + Duration::from_micros(i * 1_000_000 / rate);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            let v = unix_us().to_string();
            let key = format!("fan:{}:k", i % topics as u64);
            let mut cmd = Vec::new();
            resp::encode_request(&mut cmd, &["SET", &key, &v]);
            s.write_all(&cmd).unwrap();
        }
        reader.join().unwrap();
    });
    let mut poll = Poll::new().unwrap();
    for (j, s) in other.iter_mut().enumerate() {
        poll.registry()
            .register(s, Token(j), Interest::READABLE)
            .unwrap();
    }
    let mut counters: Vec<Counter> = (0..other.len()).map(|_| Counter::default()).collect();
    let mut events = Events::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 256 * 1024];
    while Instant::now() < end {
        let round = Instant::now();
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        for ev in events.iter() {
            let j = ev.token().0;
            let c = &mut counters[j];
            drain(&mut other[j], &mut chunk, |b| c.feed(b));
        }
        if let Some(d) = (round + Duration::from_millis(10)).checked_duration_since(Instant::now())
        {
            std::thread::sleep(d);
        }
    }
    writer.join().unwrap();
    let (lat, timed_counts) = timed_thread.join().unwrap();
    let total = rate * seconds;
    // Writes to topic t: the i < total with i % topics == t.
    let expected = |i: usize| {
        let t = topic(i) as u64;
        let k = topics as u64;
        total / k + u64::from(t < total % k)
    };
    let complete = timed_ids
        .iter()
        .zip(&timed_counts)
        .chain(other_ids.iter().zip(counters.iter().map(|c| &c.keychanges)))
        .filter(|&(&i, &n)| n == expected(i))
        .count();
    println!(
        "fanout clients={clients} topics={topics} rate={rate}/s seconds={seconds} complete_clients={complete} {}",
        percentiles(lat)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("latency") => latency(&args),
        Some("fanout") => fanout(&args),
        _ => eprintln!("usage: push_latency latency|fanout --resp HOST:PORT --ws URL …"),
    }
}
