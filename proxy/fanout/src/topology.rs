//! The fleet's cluster topology as the fan-out learns it: which engines exist and which
//! slots each serves, read with `CLUSTER NODES` every [`POLL`] by a watcher thread.
//!
//! Since slots move between running engines (CLUSTER SETSLOT, MIGRATE, `redis-cli --cluster
//! reshard`, `recached resize`), the slot → engine map is data, not the jump hash of the
//! engine count. The fan-out needs it for three things (server/cluster.rs):
//!
//! - browsers drop an instance's keys by it (`must-refetch`, `flush`): it is sent to them
//!   as a `slots` message (docs/browser-protocol.md, *Slots*);
//! - an engine that joins (`CLUSTER MEET`) gets a feed link, one that leaves (`CLUSTER
//!   FORGET`) loses its own;
//! - a change of owners means keys moved: browsers resync.
//!
//! # Why a thread
//!
//! A feed connection may only send `FEED`, `PING` and `QUIT`, so the table is read on a side
//! connection. A blocking client on its own thread (one request per [`POLL`], loopback) is
//! far simpler than another non-blocking state machine in the loop, and it never delays the
//! loop: results cross an mpsc channel and wake the loop with a [`mio::Waker`]. Only a
//! changed topology is sent.
//!
//! # Which engine is asked
//!
//! The first engine (in the order: engines that serve slots, then the others, then the
//! `--engines` list) that answers. An engine being retired has given its slots away first,
//! so the answer comes from an engine whose view is current. A standalone engine answers
//! `-ERR This instance has cluster support disabled`: nothing is sent and the watcher asks
//! again every [`STANDALONE_POLL`] (the fan-out then keeps the jump-hash map of N).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use engine_core::slot::SLOTS;

/// How often the table is read.
pub const POLL: Duration = Duration::from_millis(500);
/// How often a standalone fleet is asked again (it may be restarted in cluster mode).
const STANDALONE_POLL: Duration = Duration::from_secs(5);
/// Connect, read and write timeouts of the side connection.
const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest `CLUSTER NODES` reply accepted.
const MAX_REPLY: usize = 16 << 20;

/// One node of `CLUSTER NODES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// 40 hex digits.
    pub id: String,
    /// `host:port` as announced.
    pub addr: String,
    /// Config epoch: moves between two reads that leave the owners as they were still
    /// show here (an importing node takes a new epoch).
    pub epoch: u64,
}

/// Nodes and slot owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// Per slot, the index in `nodes` of its owner (`None`: nobody serves it).
    pub owners: Vec<Option<u16>>,
}

/// Parses a `CLUSTER NODES` reply. Open slots (`[s->-id]`, `[s-<-id]`) are skipped: a slot
/// belongs to its owner until `SETSLOT NODE`.
pub fn parse_nodes(text: &str) -> Result<Topology, String> {
    let mut nodes = Vec::new();
    let mut owners = vec![None; usize::from(SLOTS)];
    for line in text.lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() < 8 {
            return Err(format!("bad CLUSTER NODES line {line:?}"));
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        let epoch = f[6].parse().map_err(|_| format!("bad epoch in {line:?}"))?;
        let index = u16::try_from(nodes.len()).map_err(|_| "too many nodes")?;
        nodes.push(Node {
            id: f[0].to_string(),
            addr: addr.to_string(),
            epoch,
        });
        for range in &f[8..] {
            if range.starts_with('[') {
                continue;
            }
            let slot = |s: &str| {
                s.parse::<u16>()
                    .ok()
                    .filter(|&s| s < SLOTS)
                    .ok_or_else(|| format!("bad slot {range:?}"))
            };
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (slot(a)?, slot(b)?),
                None => (slot(range)?, slot(range)?),
            };
            for s in a..=b {
                owners[usize::from(s)] = Some(index);
            }
        }
    }
    if nodes.is_empty() {
        return Err("no node in CLUSTER NODES".into());
    }
    Ok(Topology { nodes, owners })
}

/// Starts the watcher thread; topologies arrive on the returned channel, each followed by a
/// wake of `waker`. It stops when `shutdown` is set or the receiver is dropped.
pub fn spawn(
    seeds: Vec<SocketAddr>,
    waker: Arc<mio::Waker>,
    shutdown: Arc<AtomicBool>,
) -> io::Result<Receiver<Topology>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("fanout-topology".into())
        .spawn(move || watch(seeds, &tx, &waker, &shutdown))?;
    Ok(rx)
}

fn watch(seeds: Vec<SocketAddr>, tx: &Sender<Topology>, waker: &mio::Waker, stop: &AtomicBool) {
    let mut last: Option<Topology> = None;
    let mut conn: Option<(SocketAddr, TcpStream)> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut wait = POLL;
        let mut order = preferred(last.as_ref());
        for &s in &seeds {
            if !order.contains(&s) {
                order.push(s);
            }
        }
        for addr in order {
            if conn.as_ref().is_none_or(|(a, _)| *a != addr) {
                conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
                    .ok()
                    .map(|s| (addr, s));
                if let Some((_, s)) = &mut conn {
                    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
                    if authenticate(s).is_err() {
                        conn = None;
                    }
                }
            }
            let Some((_, s)) = conn.as_mut() else {
                continue;
            };
            match query(s) {
                Ok(Some(text)) => match parse_nodes(&text) {
                    Ok(t) => {
                        if last.as_ref() != Some(&t) {
                            if tx.send(t.clone()).is_err() {
                                return;
                            }
                            let _ = waker.wake();
                            last = Some(t);
                        }
                        break;
                    }
                    Err(e) => log::warn!("fanout: CLUSTER NODES from {addr}: {e}"),
                },
                Ok(None) => {
                    // Standalone engines: no table to follow.
                    wait = STANDALONE_POLL;
                    break;
                }
                Err(e) => {
                    log::debug!("fanout: CLUSTER NODES from {addr}: {e}");
                    conn = None;
                }
            }
        }
        // Sleep in short steps so that shutdown is seen quickly.
        let mut slept = Duration::ZERO;
        while slept < wait && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            slept += Duration::from_millis(50);
        }
    }
}

/// The addresses of `t`'s nodes, those serving slots first.
fn preferred(t: Option<&Topology>) -> Vec<SocketAddr> {
    let Some(t) = t else { return Vec::new() };
    let serving = |i: usize| t.owners.contains(&Some(i as u16));
    let mut out = Vec::new();
    for pass in [true, false] {
        for (i, n) in t.nodes.iter().enumerate() {
            if serving(i) == pass
                && let Ok(a) = recached_net::listen::resolve(&n.addr)
                && !out.contains(&a)
            {
                out.push(a);
            }
        }
    }
    out
}

/// `AUTH` with the fleet's internal credential when the supervisor handed one (as the feed
/// links do).
fn authenticate(s: &mut TcpStream) -> io::Result<()> {
    let Ok(pw) = std::env::var(engine_core::acl::INTERNAL_AUTH_ENV) else {
        return Ok(());
    };
    let user = engine_core::acl::INTERNAL_USER.as_bytes();
    match request(s, &[b"AUTH", user, pw.as_bytes()])? {
        resp::Value::Error(e) => Err(io::Error::other(String::from_utf8_lossy(&e).into_owned())),
        _ => Ok(()),
    }
}

/// `CLUSTER NODES` → its text, `None` when cluster support is disabled.
fn query(s: &mut TcpStream) -> io::Result<Option<String>> {
    match request(s, &[b"CLUSTER", b"NODES"])? {
        resp::Value::Bulk(b) | resp::Value::Verbatim { text: b, .. } => {
            Ok(Some(String::from_utf8_lossy(&b).into_owned()))
        }
        resp::Value::Error(_) => Ok(None),
        other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
    }
}

/// Sends one request and reads its reply.
fn request(s: &mut TcpStream, argv: &[&[u8]]) -> io::Result<resp::Value> {
    let mut out = Vec::new();
    resp::encode_request(&mut out, argv);
    s.write_all(&out)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((v, _)) = resp::decode(&buf).map_err(|e| io::Error::other(e.to_string()))? {
            return Ok(v);
        }
        if buf.len() > MAX_REPLY {
            return Err(io::Error::other("reply too large"));
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nodes_and_skips_open_slots() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let text = format!(
            "{a} 127.0.0.1:7000@0 myself,master - 0 0 1 connected 0-99 200 [100->-{b}]\n\
             {b} 127.0.0.1:7001@0 master - 0 1700000000000 3 connected 100-199 201-16383\n"
        );
        let t = parse_nodes(&text).unwrap();
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[1].addr, "127.0.0.1:7001");
        assert_eq!(t.nodes[1].epoch, 3);
        assert_eq!(t.owners[0], Some(0));
        assert_eq!(t.owners[99], Some(0));
        assert_eq!(t.owners[100], Some(1), "open slots stay with their owner");
        assert_eq!(t.owners[200], Some(0));
        assert_eq!(t.owners[16383], Some(1));
        // A node without slots, an unassigned slot.
        let t = parse_nodes(&format!(
            "{a} h:1@0 master - 0 0 1 connected 1-16383\n{b} h:2@0 master - 0 0 0 connected\n"
        ))
        .unwrap();
        assert_eq!(t.owners[0], None);
        assert!(parse_nodes("").is_err());
        assert!(parse_nodes("x y z\n").is_err());
    }
}
