//! SIGTERM and SIGINT stop the engine gracefully: `run()` returns Ok and the process exits 0.
//! The engine runs in a child process (this test binary re-executed with `--exact`), so the
//! signal reaches only it.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const CHILD_ENV: &str = "RECACHED_TEST_ENGINE_PORT";

/// Not a test by itself: when the env var is set, this is the engine child process.
#[test]
fn engine_child_process() {
    let Ok(port) = std::env::var(CHILD_ENV) else {
        return;
    };
    let opts = recached_server::ServerOptions {
        port: port.parse().unwrap(),
        ..Default::default()
    };
    recached_server::run(opts).expect("run returns Ok on SIGTERM/SIGINT");
}

fn stops_on(signal: Signal) {
    let port = free_port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "engine_child_process", "--test-threads=1"])
        .env(CHILD_ENV, port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut up = false;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if !up {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = child.wait();
        panic!("engine child did not start");
    }
    let mut s = connect(port);
    roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");

    kill(pid, signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = child.wait();
            panic!("engine did not exit within 5 s of {signal}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "exit status {status}");
    expect_closed(&mut s);
}

#[test]
fn sigterm_stops_the_engine_gracefully() {
    stops_on(Signal::SIGTERM);
}

#[test]
fn sigint_stops_the_engine_gracefully() {
    stops_on(Signal::SIGINT);
}
