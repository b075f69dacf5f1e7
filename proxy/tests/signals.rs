//! `run()` returns `Ok(())` on SIGTERM. A test binary of its own: the signal goes to the
//! whole test process, and only this proxy has a handler for it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn sigterm_stops_run_cleanly() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The backend need not exist: the proxy still starts and answers PING itself.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = recached_proxy::ProxyOptions {
        memcached_port: 0,
        memcached_tls_port: 0,
        memcached_user: None,
        port,
        bind: "127.0.0.1".into(),
        backends: vec![format!("127.0.0.1:{dead}")],
        tls: Default::default(),
        limits: Default::default(),
        auth: Default::default(),
    };
    let proxy = std::thread::spawn(move || recached_proxy::run(opts));
    // Wait until it answers (the handler is installed before the listener opens).
    let start = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(b"PING\r\nGET k\r\n").unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 256];
            while !buf.ends_with(b"unavailable\r\n") {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            assert_eq!(
                String::from_utf8_lossy(&buf),
                format!("+PONG\r\n-ERR instance 0 (127.0.0.1:{dead}) is unavailable\r\n")
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "proxy did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    while !proxy.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "run() did not return"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.join().unwrap().expect("run() returns Ok on SIGTERM");
}
