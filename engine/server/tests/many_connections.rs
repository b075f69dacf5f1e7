//! Many connections opening and closing leave no descriptors, slab entries or memory behind.
//! (Own test binary: it counts this process's descriptors and RSS.)

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn listed_clients(s: &mut std::net::TcpStream) -> usize {
    s.write_all(b"CLIENT LIST\r\n").unwrap();
    String::from_utf8(read_bulk(s)).unwrap().lines().count()
}

#[test]
fn connections_open_and_close_without_leaks() {
    let port = start_server();
    let mut watcher = connect(port);
    roundtrip(&mut watcher, b"PING\r\n", b"+PONG\r\n");
    let fds_before = open_fds();

    // Warm-up round, then measure RSS over a larger number of rounds.
    let round = |n: usize| {
        for i in 0..n {
            let mut s = connect(port);
            if i % 2 == 0 {
                roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");
            } else {
                // Some leave with unread replies and a partial request in the buffer.
                s.write_all(b"PING\r\n*2\r\n$3\r\nGET\r\n").unwrap();
            }
        }
    };
    round(200);
    let rss_before = rss_bytes();
    round(2_000);

    // Closes are asynchronous: wait (bounded) until only the watcher is left.
    let mut n = usize::MAX;
    for _ in 0..500 {
        n = listed_clients(&mut watcher);
        if n == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(n, 1, "connections left open on the server");
    let fds_after = open_fds();
    assert!(
        fds_after <= fds_before + 2,
        "descriptors leaked: {fds_before} before, {fds_after} after"
    );
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(
        grown < 16 << 20,
        "RSS grew by {grown} bytes over 2000 connections"
    );
}
