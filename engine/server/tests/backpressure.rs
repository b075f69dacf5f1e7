//! A client that pipelines forever and never reads its replies must not grow server memory
//! without bound: once its unwritten replies reach the output high-water mark the engine stops
//! reading from it, the kernel buffers fill and the client's writes block. Other clients keep
//! being served meanwhile. (Own test binary: it measures this process's RSS.)

mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn pipelining_client_that_never_reads_is_throttled() {
    let port = start_server();
    let rss_before = rss_bytes();

    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let hog = connect(port);
    hog.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let writer = {
        let (sent, stop) = (sent.clone(), stop.clone());
        let mut hog = hog.try_clone().unwrap();
        std::thread::spawn(move || {
            // 64 KB of PINGs, written again and again; at most 1 GB in total.
            let chunk = b"PING\r\n".repeat(64 * 1024 / 6);
            while !stop.load(Ordering::Relaxed) && sent.load(Ordering::Relaxed) < 1 << 30 {
                // An error is the write timeout (the server stopped reading): keep trying
                // until told to stop.
                if let Ok(n) = hog.write(&chunk) {
                    sent.fetch_add(n, Ordering::Relaxed);
                }
            }
        })
    };

    // Wait until the writer stalls: no progress for 1 s (at most 60 s in total).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = usize::MAX;
    let mut still_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = sent.load(Ordering::Relaxed);
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= Duration::from_secs(1) {
            break;
        }
    }
    let total = sent.load(Ordering::Relaxed);
    assert!(
        total < 128 << 20,
        "the server kept reading from a client that never reads: {total} bytes accepted"
    );

    // Another client is still served promptly.
    let mut other = connect(port);
    other
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let t = Instant::now();
    roundtrip(&mut other, b"PING\r\n", b"+PONG\r\n");
    assert!(t.elapsed() < Duration::from_secs(2));

    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes");

    stop.store(true, Ordering::Relaxed);
    // Closing the hog's socket unblocks the writer's next write with an error.
    hog.shutdown(std::net::Shutdown::Both).ok();
    writer.join().unwrap();
    roundtrip(&mut other, b"PING\r\n", b"+PONG\r\n");
}
