//! Push latency of the browser-replica path: a SET on a RESP port (the proxy, or an engine)
//! until it arrives as a `keychange` on a subscribed WebSocket of the fan-out. Driven by
//! scripts/push-latency.sh, which starts the fleet and the background load.
//!
//! ```text
//! push_latency latency --resp 127.0.0.1:6380 --ws ws://127.0.0.1:6480/ws [--n 10000]
//!     one subscriber; SET lat:k <i>, then wait for its keychange, n times (closed loop):
//!     p50/p90/p99/max of (arrival − send), microseconds
//! push_latency fanout --resp … --ws … --clients C [--rate 1000] [--seconds 10] [--sample 100]
//!     C subscribers of `fan:`; a writer SETs fan:k <send time µs> at `rate`/s; `sample`
//!     clients spread over the C are timed (the others just drain their socket)
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
    // Wait until every instance is up to date.
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
    ws
}

fn percentiles(mut v: Vec<u64>) -> String {
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
        let cmd = format!(
            "*3\r\n$3\r\nSET\r\n$5\r\nlat:k\r\n${}\r\n{val}\r\n",
            val.len()
        );
        let t0 = Instant::now();
        resp.write_all(cmd.as_bytes()).unwrap();
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
    let rate: u64 = arg(args, "--rate", "1000").parse().unwrap();
    let seconds: u64 = arg(args, "--seconds", "10").parse().unwrap();
    let sample: usize = arg(args, "--sample", "100")
        .parse::<usize>()
        .unwrap()
        .min(clients);
    let ws_url = arg(args, "--ws", "ws://127.0.0.1:6480/ws");
    let t = Instant::now();
    let mut socks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let ws = subscribe(&ws_url, "fan:");
        let s = ws.into_inner();
        s.set_nonblocking(true).unwrap();
        socks.push(mio::net::TcpStream::from_std(s));
    }
    eprintln!("{clients} subscribers connected in {:?}", t.elapsed());
    let stride = (clients / sample.max(1)).max(1);
    let timed = |i: usize| i.is_multiple_of(stride) && i / stride < sample;
    // Timed clients are read as soon as data arrives; the others are drained every 10 ms
    // (a real browser has its own CPU: this keeps the measuring process from being the
    // bottleneck on a small machine, while the fan-out still writes to every socket).
    let mut poll = Poll::new().unwrap();
    for (i, s) in socks.iter_mut().enumerate() {
        if timed(i) {
            poll.registry()
                .register(s, Token(i), Interest::READABLE)
                .unwrap();
        }
    }
    let mut next_sweep = Instant::now();
    // The writer: SET fan:k <send time µs> at `rate`/s, replies drained by a second thread.
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
            let cmd = format!("*3\r\n$3\r\nSET\r\n$5\r\nfan:k\r\n${}\r\n{v}\r\n", v.len());
            s.write_all(cmd.as_bytes()).unwrap();
        }
        reader.join().unwrap();
    });
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); clients];
    let mut lat = Vec::new();
    let mut received = vec![0u64; clients];
    let mut events = Events::with_capacity(4096);
    let mut chunk = vec![0u8; 64 * 1024];
    let end = Instant::now() + Duration::from_secs(seconds + 2);
    let mut texts = Vec::new();
    while Instant::now() < end {
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        if Instant::now() >= next_sweep {
            next_sweep = Instant::now() + Duration::from_millis(10);
            for i in (0..clients).filter(|&i| !timed(i)) {
                while let Ok(n) = socks[i].read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    received[i] +=
                        chunk[..n].windows(9).filter(|w| w == b"keychange").count() as u64;
                }
            }
        }
        for ev in events.iter() {
            let i = ev.token().0;
            loop {
                match socks[i].read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => bufs[i].extend_from_slice(&chunk[..n]),
                    Err(_) => break,
                }
            }
            if timed(i) {
                let now = unix_us();
                frames(&mut bufs[i], &mut texts);
                for t in texts.drain(..) {
                    if let Some(pos) = t.rfind("\",\"")
                        && let Ok(sent) = t[pos + 3..].trim_end_matches("\"]}").parse::<u64>()
                    {
                        lat.push(now.saturating_sub(sent));
                        received[i] += 1;
                    }
                }
            }
        }
    }
    writer.join().unwrap();
    let expected = rate * seconds;
    // Untimed clients count `keychange` substrings (one may straddle two reads: 1% slack).
    let complete = received
        .iter()
        .filter(|&&r| r >= expected * 99 / 100)
        .count();
    println!(
        "fanout clients={clients} rate={rate}/s seconds={seconds} complete_clients={complete} {}",
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
