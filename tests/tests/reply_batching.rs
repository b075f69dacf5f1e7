//! How the proxy writes the replies of a pipeline (`Client::holds_output` in
//! proxy/src/client.rs): like Redis, which runs the requests of one read and then writes
//! their replies at once, the proxy keeps ready replies back until the ones due before them
//! are in, so a pipelined `MULTI … EXEC` over two engines reaches its client in one write
//! (counted by INFO proxy `client_writes_processed`); but a reply before a blocking command
//! is written at once (Redis writes it before blocking).
//!
//! Run `cargo build -p recached` first.

mod common;

use common::*;

/// The proxy's `client_writes_processed` (INFO proxy): writes to client sockets so far.
fn client_writes(port: u16) -> u64 {
    let mut c = Resp::connect(port);
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "proxy"])).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("client_writes_processed:"))
        .unwrap_or_else(|| panic!("no client_writes_processed in {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends `payload` `times` times on one connection, each in one write and once the previous
/// replies are in, and returns how many writes the proxy made to its clients meanwhile (the
/// `INFO` asked before counts one: its own reply).
fn writes_for(port: u16, payload: &[u8], want: &[u8], times: u64) -> u64 {
    let mut c = Resp::connect(port);
    let before = client_writes(port);
    for i in 0..times {
        c.send_raw(payload);
        let mut got = Vec::new();
        while got.len() < want.len() {
            got.extend_from_slice(&c.read_frame());
        }
        assert_eq!(escape(&got), escape(want), "round {i}");
    }
    client_writes(port) - before - 1
}

#[test]
fn a_pipelined_transaction_over_two_engines_is_answered_in_one_write() {
    let fleet = Fleet::start("reply-batching", 2);
    let (a, b) = keys_on_two_engines("rb");
    let tx = [
        Resp::encode(&[b"MULTI"]),
        Resp::encode(&[b"SET", a.as_bytes(), b"1"]),
        Resp::encode(&[b"SET", b.as_bytes(), b"2"]),
        Resp::encode(&[b"EXEC"]),
    ]
    .concat();
    let want: &[u8] = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n+OK\r\n";
    // Without keeping replies back: `+OK`, then the `+QUEUED`s when the engines have queued
    // (the locks' round trip), then the EXEC array: two or three writes per transaction.
    let writes = writes_for(fleet.proxy_port, &tx, want, 20);
    assert_eq!(writes, 20, "writes for 20 pipelined transactions");
    // A plain pipeline over both engines: one write, not one per engine's batch.
    let pipeline = [
        Resp::encode(&[b"GET", a.as_bytes()]),
        Resp::encode(&[b"GET", b.as_bytes()]),
        Resp::encode(&[b"PING"]),
    ]
    .concat();
    let want: &[u8] = b"$1\r\n1\r\n$1\r\n2\r\n+PONG\r\n";
    let writes = writes_for(fleet.proxy_port, &pipeline, want, 20);
    assert_eq!(writes, 20, "writes for 20 pipelines");
}

#[test]
fn a_reply_before_a_blocking_command_is_not_kept_back() {
    let fleet = Fleet::start("reply-batching-blocking", 2);
    let (a, b) = keys_on_two_engines("rbb");
    let mut c = Resp::connect(fleet.proxy_port);
    assert_eq!(c.cmd_str(&["SET", &a, "v"]), b"+OK\r\n");
    // GET on one engine, then a BLPOP that blocks on the other (and one over both engines):
    // the GET's reply comes while the BLPOP waits.
    // An empty list on a's engine (a's name as its hash tag: a's slot).
    let a_list = format!("{{{a}}}:list");
    for blpop in [
        vec!["BLPOP", b.as_str(), "0"],
        vec!["BLPOP", &b, &a_list, "0"],
    ] {
        let mut w = Resp::connect(fleet.proxy_port);
        let mut req = Resp::encode(&[b"GET", a.as_bytes()]);
        let args: Vec<&[u8]> = blpop.iter().map(|s| s.as_bytes()).collect();
        req.extend_from_slice(&Resp::encode(&args));
        w.send_raw(&req);
        assert_eq!(
            escape(&w.read_frame()),
            escape(b"$1\r\nv\r\n"),
            "{blpop:?}: GET answered while the BLPOP waits"
        );
        assert_quiet(&mut w, "the BLPOP still waits");
        assert_eq!(c.cmd_str(&["RPUSH", &b, "x"]), b":1\r\n");
        assert_eq!(
            escape(&w.read_frame()),
            escape(format!("*2\r\n${}\r\n{b}\r\n$1\r\nx\r\n", b.len()).as_bytes()),
            "{blpop:?}: woken"
        );
    }
}
