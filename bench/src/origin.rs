//! A simulated slow origin (the database behind a cache) for the cache-aside scenarios:
//! `recached-bench origin --port P --latency-ms 20 --cpu-us 300 --value-size 1024`.
//!
//! It speaks enough RESP for a cache-aside client: `GET key` answers a value of `value_size`
//! bytes (the same bytes for every key), `SET` answers `+OK`, `PING` `+PONG`, and `INFO` a bulk
//! string with `origin_calls:<n>` (GETs served). Anything else is `-ERR unknown command`.
//!
//! Cost model: the two costs of a real origin are modelled separately.
//! - **CPU** (`cpu_us`): each GET busy-spins for that long while holding one process-wide lock,
//!   so the origin has the capacity of one core: at most `1e6 / cpu_us` GETs per second, and
//!   queueing appears when the offered load comes near it (like a saturated database).
//! - **Latency** (`latency_ms`): after the CPU part, the reply waits that long without using the
//!   CPU or the lock (disk or network wait). Connections wait in parallel.
//!
//! One thread per connection with blocking sockets (at most [`MAX_CONNECTIONS`]): the origin is
//! a model, not a contender, and its threads sleep most of the time.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use resp::{Proto, ReplyWriter};

/// Connections served at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 512;
/// Largest request accepted (the origin only ever sees GET/SET of one key).
const MAX_REQUEST: usize = 64 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct OriginParams {
    /// Port on 127.0.0.1 (0 = any free port; the chosen port is printed on stdout).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Wait per GET, in milliseconds (no CPU used).
    #[arg(long, default_value_t = 20.0)]
    pub latency_ms: f64,
    /// CPU per GET, in microseconds, serialised across all connections (one core).
    #[arg(long, default_value_t = 200)]
    pub cpu_us: u64,
    /// Size in bytes of each value returned.
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,
}

/// A running origin: its address, its GET counter and a stop flag.
pub struct Origin {
    pub addr: std::net::SocketAddr,
    pub calls: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A request's arguments and the bytes it took.
pub type ParsedRequest = (Vec<Vec<u8>>, usize);

/// Parses one request (an array of bulk strings) at the start of `buf`: `Ok(None)` when
/// incomplete; inline commands are not supported (clients send arrays).
pub fn parse_request(buf: &[u8]) -> Result<Option<ParsedRequest>, String> {
    fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let p = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((at + p, at + p + 2))
    }
    fn num(b: &[u8]) -> Result<usize, String> {
        resp::parse_i64(b)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| "Protocol error: bad length".to_string())
    }
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return Err("Protocol error: expected '*'".into());
    }
    let Some((eol, mut pos)) = line(buf, 1) else {
        return Ok(None);
    };
    let n = num(&buf[1..eol])?;
    if n > 1024 {
        return Err("Protocol error: too many arguments".into());
    }
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err("Protocol error: expected '$'".into());
        }
        let Some((eol, next)) = line(buf, pos + 1) else {
            return Ok(None);
        };
        let len = num(&buf[pos + 1..eol])?;
        if len > MAX_REQUEST {
            return Err("Protocol error: bulk too long".into());
        }
        if buf.len() < next + len + 2 {
            return Ok(None);
        }
        args.push(buf[next..next + len].to_vec());
        pos = next + len + 2;
    }
    Ok(Some((args, pos)))
}

fn serve(
    mut s: TcpStream,
    p: &OriginParams,
    cpu: &Mutex<()>,
    calls: &AtomicU64,
    stop: &AtomicBool,
    value_reply: &[u8],
) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        loop {
            let (args, used) = match parse_request(&buf) {
                Ok(Some(x)) => x,
                Ok(None) if buf.len() > MAX_REQUEST => return,
                Ok(None) => break,
                Err(e) => {
                    let _ = s.write_all(format!("-ERR {e}\r\n").as_bytes());
                    return;
                }
            };
            buf.drain(..used);
            let name = args
                .first()
                .map(|a| a.to_ascii_uppercase())
                .unwrap_or_default();
            let reply: Vec<u8> = match name.as_slice() {
                b"GET" if args.len() == 2 => {
                    {
                        let _core = cpu.lock().unwrap_or_else(|e| e.into_inner());
                        let until = Instant::now() + Duration::from_micros(p.cpu_us);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                    }
                    if p.latency_ms > 0.0 {
                        std::thread::sleep(Duration::from_secs_f64(p.latency_ms / 1000.0));
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                    value_reply.to_vec()
                }
                b"SET" => b"+OK\r\n".to_vec(),
                b"PING" => b"+PONG\r\n".to_vec(),
                b"INFO" => {
                    let body = format!(
                        "# Origin\r\norigin_calls:{}\r\n",
                        calls.load(Ordering::Relaxed)
                    );
                    let mut out = Vec::new();
                    ReplyWriter::new(&mut out, Proto::Resp2).bulk(body.as_bytes());
                    out
                }
                _ => b"-ERR unknown command\r\n".to_vec(),
            };
            if s.write_all(&reply).is_err() {
                return;
            }
        }
    }
}

/// Binds 127.0.0.1:`port` and serves in background threads until the returned value is dropped.
pub fn spawn(p: OriginParams) -> std::io::Result<Origin> {
    let listener = TcpListener::bind(("127.0.0.1", p.port))?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (calls2, stop2) = (calls.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let p = Arc::new(p);
        let cpu = Arc::new(Mutex::new(()));
        let live = Arc::new(AtomicUsize::new(0));
        let mut value_reply = Vec::new();
        ReplyWriter::new(&mut value_reply, Proto::Resp2).bulk(&vec![b'o'; p.value_size]);
        let value_reply: Arc<[u8]> = value_reply.into();
        for conn in listener.incoming() {
            if stop2.load(Ordering::SeqCst) {
                return;
            }
            let Ok(conn) = conn else { continue };
            if live.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                continue;
            }
            live.fetch_add(1, Ordering::SeqCst);
            let (p, cpu, calls, stop, live, vr) = (
                p.clone(),
                cpu.clone(),
                calls2.clone(),
                stop2.clone(),
                live.clone(),
                value_reply.clone(),
            );
            std::thread::spawn(move || {
                serve(conn, &p, &cpu, &calls, &stop, &vr);
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(Origin {
        addr,
        calls,
        stop,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_and_partial_requests() {
        let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let (args, used) = parse_request(req).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(used, req.len());
        for cut in 0..req.len() {
            assert_eq!(parse_request(&req[..cut]).unwrap(), None, "cut {cut}");
        }
        assert!(parse_request(b"GET k\r\n").is_err());
        assert!(parse_request(b"*x\r\n").is_err());
        assert!(parse_request(b"*-1\r\n").is_err());
        assert!(parse_request(b"*1\r\n$+1\r\nx\r\n").is_err());
    }

    #[test]
    fn get_costs_latency_and_is_counted() {
        let o = spawn(OriginParams {
            port: 0,
            latency_ms: 30.0,
            cpu_us: 100,
            value_size: 5,
        })
        .unwrap();
        let mut s = TcpStream::connect(o.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = Instant::now();
        s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap();
        let mut got = [0u8; 11];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"$5\r\nooooo\r\n");
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert_eq!(o.calls.load(Ordering::SeqCst), 1);
    }
}
