//! MULTI / EXEC / DISCARD / WATCH against a real redis-server and a recached engine, with the
//! same expectations (exact reply bytes) for both, so the expectations are checked too.
//!
//! Covers what one connection in the differential cases cannot: WATCH broken by another
//! client, by expiry (lazy and active), by FLUSHALL from another client, and a watching client
//! that disconnects.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn multi_exec_replies_in_order_with_runtime_errors_inline() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        assert_eq!(cmd(&mut c, &["MULTI"]), "+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["SET", "a", "x"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["INCR", "a"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["APPEND", "a", "y"]), "+QUEUED\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "*3\\r\\n+OK\\r\\n-ERR value is not an integer or out of range\\r\\n:2\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut c, &["GET", "a"]), "$2\\r\\nxy\\r\\n", "{who}");
        // Nothing runs before EXEC: another client sees the old value meanwhile.
        let mut other = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["SET", "a", "new"]);
        assert_eq!(cmd(&mut other, &["GET", "a"]), "$2\\r\\nxy\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut other, &["GET", "a"]), "$3\\r\\nnew\\r\\n", "{who}");
    });
}

#[test]
fn queue_time_errors_abort_with_execabort() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        assert_eq!(cmd(&mut c, &["SET", "k", "1"]), "+QUEUED\\r\\n", "{who}");
        assert!(
            cmd(&mut c, &["NOSUCH"]).starts_with("-ERR unknown command"),
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut c, &["GET", "k"]), "$-1\\r\\n", "{who}");
        // Arity errors abort too; MULTI state is gone after EXEC.
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET"]);
        assert!(cmd(&mut c, &["EXEC"]).starts_with("-EXECABORT"), "{who}");
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "-ERR EXEC without MULTI\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn discard_drops_the_queue_and_the_watches() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        let mut other = Resp::connect(port);
        cmd(&mut c, &["WATCH", "w"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["SET", "d", "1"]);
        assert_eq!(cmd(&mut c, &["DISCARD"]), "+OK\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["GET", "d"]), "$-1\\r\\n", "{who}");
        // The WATCH went with DISCARD: a change now does not fail the next transaction.
        cmd(&mut other, &["SET", "w", "changed"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "w"]);
        assert_eq!(
            cmd(&mut c, &["EXEC"]),
            "*1\\r\\n$7\\r\\nchanged\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["DISCARD"]),
            "-ERR DISCARD without MULTI\\r\\n",
            "{who}"
        );
    });
}

#[test]
fn watch_fails_when_another_client_writes_the_key() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        let mut other = Resp::connect(port);
        cmd(&mut c, &["SET", "bal", "10"]);
        // Unchanged: EXEC runs.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n:15\\r\\n", "{who}");
        // Changed by another client between WATCH and EXEC: null array, nothing applied.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut other, &["INCRBY", "bal", "100"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        assert_eq!(cmd(&mut c, &["GET", "bal"]), "$3\\r\\n115\\r\\n", "{who}");
        // Changed during MULTI (after queueing began) also counts.
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["INCRBY", "bal", "5"]);
        cmd(&mut other, &["DEL", "bal"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // FLUSHALL from another client touches an existing watched key.
        cmd(&mut c, &["SET", "f", "1"]);
        cmd(&mut c, &["WATCH", "f", "never-existed"]);
        cmd(&mut other, &["FLUSHALL"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // ... but not a missing one.
        cmd(&mut c, &["WATCH", "never-existed"]);
        cmd(&mut other, &["FLUSHALL"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+PONG\\r\\n", "{who}");
        // RESP3: the failed EXEC is a RESP3 null.
        cmd(&mut c, &["HELLO", "3"]);
        cmd(&mut c, &["WATCH", "bal"]);
        cmd(&mut other, &["SET", "bal", "0"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "bal"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "_\\r\\n", "{who}");
    });
}

#[test]
fn watch_fails_when_the_key_expires() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        // Expires while watched, never accessed: EXEC sees it expired (Redis 7).
        cmd(&mut c, &["SET", "e1", "v", "PX", "200"]);
        cmd(&mut c, &["WATCH", "e1"]);
        std::thread::sleep(Duration::from_millis(400));
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // Expires and is reclaimed by the active cycle or another client's read.
        let mut other = Resp::connect(port);
        cmd(&mut c, &["SET", "e2", "v", "PX", "200"]);
        cmd(&mut c, &["WATCH", "e2"]);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(cmd(&mut other, &["GET", "e2"]), "$-1\\r\\n", "{who}");
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*-1\\r\\n", "{who}");
        // Already expired when watched: its reclamation is not a change.
        cmd(&mut c, &["SET", "e3", "v", "PX", "100"]);
        std::thread::sleep(Duration::from_millis(300));
        cmd(&mut c, &["WATCH", "e3"]);
        assert_eq!(cmd(&mut other, &["GET", "e3"]), "$-1\\r\\n", "{who}");
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["PING"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+PONG\\r\\n", "{who}");
    });
}

#[test]
fn nesting_and_watch_inside_multi_are_refused_without_aborting() {
    on_both(|port, who| {
        let mut c = Resp::connect(port);
        cmd(&mut c, &["MULTI"]);
        assert_eq!(
            cmd(&mut c, &["MULTI"]),
            "-ERR MULTI calls can not be nested\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["WATCH", "x"]),
            "-ERR WATCH inside MULTI is not allowed\\r\\n",
            "{who}"
        );
        cmd(&mut c, &["SET", "x", "1"]);
        assert_eq!(cmd(&mut c, &["EXEC"]), "*1\\r\\n+OK\\r\\n", "{who}");
    });
}

/// A watching client that disconnects leaves nothing behind: its key can be written freely and
/// another client's WATCH on it works normally (engine only: the registry is internal).
#[test]
fn disconnecting_watcher_is_forgotten() {
    let port = free_port();
    let _engine = start_engine(port);
    let mut c = Resp::connect(port);
    for i in 0..200 {
        let mut w = Resp::connect(port);
        cmd(&mut w, &["WATCH", &format!("k{i}"), "shared"]);
        cmd(&mut w, &["MULTI"]);
        cmd(&mut w, &["SET", "shared", "x"]);
        drop(w);
    }
    // Disconnects are processed asynchronously; the engine must stay responsive and correct.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        cmd(&mut c, &["SET", "shared", "y"]);
        cmd(&mut c, &["WATCH", "shared"]);
        cmd(&mut c, &["MULTI"]);
        cmd(&mut c, &["GET", "shared"]);
        if cmd(&mut c, &["EXEC"]) == "*1\\r\\n$1\\r\\ny\\r\\n" {
            break;
        }
        assert!(Instant::now() < deadline, "EXEC never succeeded");
    }
    assert_eq!(cmd(&mut c, &["GET", "shared"]), "$1\\r\\ny\\r\\n");
}
