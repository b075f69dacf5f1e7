//! The engine loop over real sockets: pipelining, partial requests, protocol errors, QUIT,
//! CLIENT LIST. Each test starts its own in-process engine on a free port.

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;

#[test]
fn pipeline_of_10000_commands_in_one_write_gets_10000_replies_in_order() {
    let port = start_server();
    let mut s = connect(port);
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for i in 0..10_000u32 {
        let v = format!("v{i}");
        req.extend_from_slice(&cmd(&[b"ECHO", v.as_bytes()]));
        expected.extend_from_slice(&bulk(v.as_bytes()));
    }
    s.write_all(&req).unwrap();
    expect_reply(&mut s, &expected);
    // The connection still serves afterwards.
    roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn mixed_inline_and_multibulk_pipeline_with_set_get() {
    let port = start_server();
    let mut s = connect(port);
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for i in 0..2_000u32 {
        let (k, v) = (format!("key:{i}"), format!("value-{i}"));
        req.extend_from_slice(&cmd(&[b"SET", k.as_bytes(), v.as_bytes()]));
        req.extend_from_slice(format!("GET {k}\r\n").as_bytes());
        expected.extend_from_slice(b"+OK\r\n");
        expected.extend_from_slice(&bulk(v.as_bytes()));
    }
    s.write_all(&req).unwrap();
    expect_reply(&mut s, &expected);
}

#[test]
fn request_split_byte_by_byte_over_many_writes() {
    let port = start_server();
    let mut s = connect(port);
    let mut req = cmd(&[b"SET", b"foo", b"bar"]);
    req.extend_from_slice(b"GET foo\r\n");
    req.extend_from_slice(&cmd(&[b"GET", b"foo"]));
    for b in &req {
        s.write_all(std::slice::from_ref(b)).unwrap();
        // TCP_NODELAY plus a pause makes each byte its own segment and usually its own read.
        std::thread::sleep(Duration::from_millis(1));
    }
    expect_reply(&mut s, b"+OK\r\n$3\r\nbar\r\n$3\r\nbar\r\n");
}

#[test]
fn large_bulk_value_across_many_reads() {
    let port = start_server();
    let mut s = connect(port);
    let value: Vec<u8> = (0..3_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = cmd(&[b"SET", b"big", &value]);
    req.extend_from_slice(&cmd(&[b"GET", b"big"]));
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&req).unwrap())
    };
    expect_reply(&mut s, b"+OK\r\n");
    assert_eq!(read_bulk(&mut s), value);
    writer.join().unwrap();
}

#[test]
fn protocol_error_gets_the_exact_reply_and_the_connection_is_closed() {
    let port = start_server();
    // Requests before the bad one run; the bad one gets Redis's text; nothing after it runs.
    let mut s = connect(port);
    s.write_all(b"PING\r\n*abc\r\nPING\r\n").unwrap();
    expect_reply(
        &mut s,
        b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n",
    );
    expect_closed(&mut s);

    let mut s = connect(port);
    s.write_all(b"*1\r\n+foo\r\n").unwrap();
    expect_reply(&mut s, b"-ERR Protocol error: expected '$', got '+'\r\n");
    expect_closed(&mut s);

    // A bulk over proto-max-bulk-len (512 MB) is refused from its header, before buffering.
    let mut s = connect(port);
    s.write_all(b"*1\r\n$600000000\r\n").unwrap();
    expect_reply(&mut s, b"-ERR Protocol error: invalid bulk length\r\n");
    expect_closed(&mut s);

    // The server still serves others.
    let mut s = connect(port);
    roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn empty_requests_are_skipped() {
    let port = start_server();
    let mut s = connect(port);
    s.write_all(b"\r\n\r\n*0\r\nPING\r\n").unwrap();
    expect_reply(&mut s, b"+PONG\r\n");
}

#[test]
fn quit_replies_ok_then_closes_and_later_requests_do_not_run() {
    let port = start_server();
    let mut s = connect(port);
    s.write_all(b"PING\r\nQUIT\r\nSET after quit\r\n").unwrap();
    expect_reply(&mut s, b"+PONG\r\n+OK\r\n");
    expect_closed(&mut s);
    let mut s = connect(port);
    roundtrip(&mut s, b"GET after\r\n", b"$-1\r\n");
}

#[test]
fn peer_half_close_still_gets_its_replies() {
    let port = start_server();
    let mut s = connect(port);
    s.write_all(b"PING\r\nECHO hello\r\n").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    expect_reply(&mut s, b"+PONG\r\n$5\r\nhello\r\n");
    expect_closed(&mut s);
}

#[test]
fn client_list_shows_both_connections_in_id_order() {
    let port = start_server();
    let mut a = connect(port);
    let mut b = connect(port);
    // Make sure both are accepted before listing.
    roundtrip(&mut a, b"PING\r\n", b"+PONG\r\n");
    roundtrip(&mut b, b"PING\r\n", b"+PONG\r\n");
    a.write_all(b"CLIENT LIST\r\n").unwrap();
    let text = String::from_utf8(read_bulk(&mut a)).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text:?}");
    let a_addr = format!("addr={}", a.local_addr().unwrap());
    let b_addr = format!("addr={}", b.local_addr().unwrap());
    assert!(lines[0].contains(&a_addr), "{text:?}");
    assert!(lines[1].contains(&b_addr), "{text:?}");
    let laddr = format!("laddr=127.0.0.1:{port}");
    assert!(lines.iter().all(|l| l.contains(&laddr)), "{text:?}");
    let id = |l: &str| -> u64 {
        l.split(' ')
            .find_map(|f| f.strip_prefix("id="))
            .expect("id=")
            .parse()
            .unwrap()
    };
    assert!(id(lines[0]) < id(lines[1]), "{text:?}");

    // A command pipelined after CLIENT LIST is answered after its reply.
    a.write_all(b"CLIENT LIST\r\nPING\r\n").unwrap();
    let _ = read_bulk(&mut a);
    expect_reply(&mut a, b"+PONG\r\n");

    // After b closes, the list shrinks to one line (bounded wait for the close to be seen).
    drop(b);
    let mut n = 0;
    for _ in 0..200 {
        a.write_all(b"CLIENT LIST\r\n").unwrap();
        n = String::from_utf8(read_bulk(&mut a))
            .unwrap()
            .lines()
            .count();
        if n == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(n, 1);
}

/// The `id=` of the connection `s` (CLIENT ID).
fn client_id(s: &mut std::net::TcpStream) -> u64 {
    s.write_all(b"CLIENT ID\r\n").unwrap();
    let line = read_line(s);
    std::str::from_utf8(&line[1..]).unwrap().parse().unwrap()
}

#[test]
fn client_kill_closes_the_matching_connections_and_spares_the_caller() {
    let port = start_server();
    let mut a = connect(port);
    let mut b = connect(port);
    let mut c = connect(port);
    let b_id = client_id(&mut b);
    let a_id = client_id(&mut a);
    roundtrip(&mut c, b"PING\r\n", b"+PONG\r\n");
    // By id: b is closed, a goes on.
    a.write_all(&cmd(&[
        b"CLIENT",
        b"KILL",
        b"ID",
        b_id.to_string().as_bytes(),
    ]))
    .unwrap();
    expect_reply(&mut a, b":1\r\n");
    expect_closed(&mut b);
    // Gone now: the filter form counts 0, the old form says no such client.
    a.write_all(&cmd(&[
        b"CLIENT",
        b"KILL",
        b"ID",
        b_id.to_string().as_bytes(),
    ]))
    .unwrap();
    expect_reply(&mut a, b":0\r\n");
    let c_addr = c.local_addr().unwrap().to_string();
    a.write_all(&cmd(&[b"CLIENT", b"KILL", b"127.0.0.1:1"]))
        .unwrap();
    expect_reply(&mut a, b"-ERR No such client\r\n");
    // The old form by address.
    a.write_all(&cmd(&[b"CLIENT", b"KILL", c_addr.as_bytes()]))
        .unwrap();
    expect_reply(&mut a, b"+OK\r\n");
    expect_closed(&mut c);
    // SKIPME (default yes) spares the caller; SKIPME no kills it after its reply.
    let me = a_id.to_string();
    a.write_all(&cmd(&[b"CLIENT", b"KILL", b"ID", me.as_bytes()]))
        .unwrap();
    expect_reply(&mut a, b":0\r\n");
    a.write_all(&cmd(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]))
        .unwrap();
    expect_reply(&mut a, b":0\r\n");
    a.write_all(&cmd(&[
        b"CLIENT",
        b"KILL",
        b"ID",
        me.as_bytes(),
        b"SKIPME",
        b"no",
    ]))
    .unwrap();
    expect_reply(&mut a, b":1\r\n");
    expect_closed(&mut a);
    // The server goes on.
    let mut d = connect(port);
    roundtrip(&mut d, b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn config_set_proto_max_bulk_len_applies_to_the_next_request() {
    let port = start_server();
    let mut s = connect(port);
    // Pipelined in one write: the new limit already applies to the request after CONFIG SET.
    s.write_all(b"CONFIG SET proto-max-bulk-len 1mb\r\n*2\r\n$4\r\nECHO\r\n$2000000\r\n")
        .unwrap();
    expect_reply(
        &mut s,
        b"+OK\r\n-ERR Protocol error: invalid bulk length\r\n",
    );
    expect_closed(&mut s);
    let mut s = connect(port);
    roundtrip(
        &mut s,
        b"CONFIG SET proto-max-bulk-len 512mb\r\n",
        b"+OK\r\n",
    );
    let value = vec![b'x'; 2_000_000];
    s.write_all(&cmd(&[b"ECHO", &value])).unwrap();
    assert_eq!(read_bulk(&mut s), value);
}

/// The value of `field:` in an INFO reply.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

#[test]
fn info_reports_the_host_figures_the_loop_keeps_current() {
    let port = start_server();
    let mut a = connect(port);
    let mut b = connect(port);
    roundtrip(&mut b, b"PING\r\n", b"+PONG\r\n");
    a.write_all(b"INFO\r\n").unwrap();
    let info = String::from_utf8(read_bulk(&mut a)).unwrap();
    assert_eq!(
        info_field(&info, "tcp_port"),
        Some(port.to_string()),
        "{info}"
    );
    assert_eq!(
        info_field(&info, "process_id"),
        Some(std::process::id().to_string())
    );
    assert_eq!(info_field(&info, "connected_clients").as_deref(), Some("2"));
    drop(b);
    // The close and a timer tick (hz 10) are seen within a bounded wait.
    let mut ok = false;
    for _ in 0..300 {
        a.write_all(b"INFO\r\n").unwrap();
        let info = String::from_utf8(read_bulk(&mut a)).unwrap();
        let rss: u64 = info_field(&info, "used_memory_rss")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if info_field(&info, "connected_clients").as_deref() == Some("1") && rss > 0 {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        ok,
        "connected_clients:1 and used_memory_rss > 0 not reported"
    );
}
