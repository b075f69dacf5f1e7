//! The proxy's CLIENT surface: `CLIENT UNBLOCK id [TIMEOUT|ERROR]` through the proxy, against a real redis-server with
//! the same transcript: the blocked client's BLPOP (one engine), BLMPOP over keys of both
//! engines (a gathered wait) and XREAD BLOCK over streams of both engines (a spread read) end
//! with a null or `-UNBLOCKED …`, the caller gets `:1`; `:0` for a client that is not
//! blocked; Redis's errors for a bad id or reason. (Redis's own `client unblock tests` in
//! unit/type/list.tcl.)
//!
//! Run `cargo build -p recached` first.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn wait_blocked(c: &mut Resp, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while blocked_clients(c) == 0 {
        assert!(Instant::now() < deadline, "{who}: the client never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The transcript: each blocking command, unblocked each way; then the refusals.
fn transcript(port: u16) -> Vec<String> {
    let (l1, l2) = keys_on_two_engines("cu:l");
    let (s1, s2) = keys_on_two_engines("cu:s");
    let mut c = Resp::connect(port);
    let mut blocked = Resp::connect(port);
    let id = String::from_utf8(blocked.cmd_str(&["CLIENT", "ID"])).unwrap();
    let id = id.trim().trim_start_matches(':').to_string();
    let mut out = Vec::new();
    let commands: [Vec<&str>; 3] = [
        vec!["BLPOP", &l1, "0"],
        vec!["BLMPOP", "0", "2", &l1, &l2, "LEFT"],
        vec!["XREAD", "BLOCK", "0", "STREAMS", &s1, &s2, "$", "$"],
    ];
    for command in &commands {
        for mode in [None, Some("TIMEOUT"), Some("ERROR")] {
            send(&mut blocked, command);
            wait_blocked(&mut c, &format!("{command:?}"));
            let mut unblock = vec!["CLIENT", "UNBLOCK", id.as_str()];
            unblock.extend(mode);
            out.push(format!("{command:?} {mode:?}: {}", cmd(&mut c, &unblock)));
            out.push(format!("  blocked client: {}", next(&mut blocked)));
        }
    }
    // The lists and streams are untouched, and the client works.
    out.push(cmd(&mut c, &["EXISTS", &l1, &l2, &s1, &s2]));
    out.push(cmd(&mut blocked, &["PING"]));
    out.push(cmd(&mut c, &["CLIENT", "UNBLOCK", &id]));
    out.push(cmd(&mut c, &["CLIENT", "UNBLOCK", "asd"]));
    out.push(cmd(&mut c, &["CLIENT", "UNBLOCK", &id, "NEVER"]));
    out.push(cmd(&mut c, &["CLIENT", "UNBLOCK"]));
    out
}

#[test]
fn client_unblock_through_the_proxy_as_on_redis() {
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let want = transcript(redis_port);
    assert!(
        want[0].ends_with(":1\\r\\n"),
        "redis-server's own transcript: {want:?}"
    );
    let fleet = Fleet::start("client-unblock", 2);
    let got = transcript(fleet.proxy_port);
    assert_eq!(got, want, "through the proxy");
}

/// What the proxy does to learn the ids it needs for CLIENT UNBLOCK stays out of MONITOR (an
/// admin command, `TXID`, where Redis would show `CLIENT ID`), and CLIENT LIST / INFO count
/// the caller's own request in its `qbuf`, as Redis does (Redis's introspection.tcl through
/// the proxy).
#[test]
fn the_proxys_own_requests_stay_out_of_monitor_and_qbuf_counts_the_request() {
    let fleet = Fleet::start("client-unblock-monitor", 2);
    let mut monitor = Resp::connect(fleet.proxy_port);
    assert_eq!(monitor.cmd_str(&["MONITOR"]), b"+OK\r\n");
    // New clients: each BLPOP opens a dedicated connection to its key's engine.
    let (a, b) = keys_on_two_engines("cu:m");
    for k in [&a, &b] {
        let mut c = Resp::connect(fleet.proxy_port);
        assert_eq!(c.cmd_str(&["BLPOP", k, "0.01"]), b"*-1\r\n");
        assert_eq!(c.cmd_str(&["SET", "cu:m:last", k]), b"+OK\r\n");
    }
    let mut lines = Vec::new();
    loop {
        let line = String::from_utf8_lossy(&monitor.read_frame()).into_owned();
        let last = line.contains("\"cu:m:last\"") && line.contains(&format!("\"{b}\""));
        lines.push(line);
        if last {
            break;
        }
    }
    for line in &lines {
        assert!(
            !line.contains("\"ID\"") && !line.to_ascii_uppercase().contains("TXID"),
            "an internal request in MONITOR: {lines:?}"
        );
    }
    assert_eq!(lines.len(), 4, "BLPOP and SET, twice: {lines:?}");

    let mut c = Resp::connect(fleet.proxy_port);
    for sub in ["LIST", "INFO"] {
        let text = String::from_utf8_lossy(&c.cmd_str(&["CLIENT", sub])).into_owned();
        // `CLIENT LIST` and `CLIENT INFO` are 26 bytes each.
        assert!(text.contains("qbuf=26 "), "CLIENT {sub}: {text}");
    }
}
