//! A script that runs past `busy-reply-threshold` (issue 15, item 3; redis
//! `processEventsWhileBlocked`): other clients, old and new, get `-BUSY …`, SCRIPT KILL and
//! FUNCTION KILL stop a script that has not written (`-UNKILLABLE` otherwise), SHUTDOWN NOSAVE
//! stops the engine anyway, and the engine serves as before once the script is gone. Also
//! SHUTDOWN itself (save, NOSAVE, errors). Texts are redis-server 7.0.15's, as printed by
//! `redis-cli` against it for the same steps.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const BUSY_EVAL: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
const BUSY_FUNCTION: &[u8] = b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n";

/// An engine with `busy-reply-threshold` 10 ms.
fn engine() -> (Proc, u16) {
    let port = free_port();
    let p = start_engine(port);
    let mut c = Resp::connect(port);
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "10"]),
        b"+OK\r\n"
    );
    (p, port)
}

/// Sends `args` on `c` without reading the reply.
fn send(c: &mut Resp, args: &[&str]) {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.send_raw(&Resp::encode(&argv));
}

/// PINGs on `c` until the reply is `-BUSY …` (the script passed the threshold), at most 5 s.
fn wait_busy(c: &mut Resp) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = c.cmd_str(&["PING"]);
        if r.starts_with(b"-BUSY") || Instant::now() >= deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_read_only_script_gets_busy_and_script_kill_stops_it() {
    let (_p, port) = engine();
    let mut runner = Resp::connect(port);
    let mut other = Resp::connect(port);
    // Pipelined after the EVAL: answered once the script is gone, in order.
    let body = "local i = 0\nwhile true do i = i + 1 end";
    let mut pipeline = Resp::encode(&[b"EVAL", body.as_bytes(), b"0"]);
    pipeline.extend(Resp::encode(&[b"PING"]));
    runner.send_raw(&pipeline);
    assert_eq!(wait_busy(&mut other), BUSY_EVAL);
    // A connection opened while the script runs is accepted and refused the same way.
    let mut late = Resp::connect(port);
    assert_eq!(late.cmd_str(&["GET", "k"]), BUSY_EVAL);
    // A transaction: MULTI is allowed; EXEC is not ALLOW_BUSY in Redis 7.0, so it is refused
    // and discards the transaction with the BUSY text.
    assert_eq!(late.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(late.cmd_str(&["SET", "k", "v"]), BUSY_EVAL);
    assert_eq!(
        late.cmd_str(&["EXEC"]),
        [
            &b"-EXECABORT Transaction discarded because of: "[..],
            &BUSY_EVAL[1..]
        ]
        .concat()
    );
    // FUNCTION KILL does not stop an EVAL; SHUTDOWN without NOSAVE is refused.
    assert_eq!(other.cmd_str(&["FUNCTION", "KILL"]), BUSY_EVAL);
    assert_eq!(other.cmd_str(&["SHUTDOWN"]), BUSY_EVAL);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let sha = "5485ac7b11abac6760734f4b4ec80041904408bc";
    assert_eq!(
        String::from_utf8_lossy(&runner.read_frame()),
        format!(
            "-ERR Script killed by user with SCRIPT KILL... script: {sha}, on @user_script:2.\r\n"
        )
    );
    assert_eq!(runner.read_frame(), b"+PONG\r\n");
    assert_eq!(other.cmd_str(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        other.cmd_str(&["SCRIPT", "KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );
    assert_eq!(runner.cmd_str(&["SET", "k", "v"]), b"+OK\r\n");
}

#[test]
fn pcall_cannot_catch_script_kill() {
    let (_p, port) = engine();
    let mut runner = Resp::connect(port);
    let mut other = Resp::connect(port);
    send(
        &mut runner,
        &[
            "EVAL",
            "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
            "0",
        ],
    );
    assert_eq!(wait_busy(&mut other), BUSY_EVAL);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let r = runner.read_frame();
    assert!(r.starts_with(b"-ERR Script killed by user"), "{r:?}");
    assert_eq!(other.cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn a_busy_function_needs_function_kill_and_shows_in_function_stats() {
    let (_p, port) = engine();
    let mut runner = Resp::connect(port);
    let mut other = Resp::connect(port);
    let lib = "#!lua name=busy\nredis.register_function('spin', function() while 1 do end end)";
    assert_eq!(
        runner.cmd_str(&["FUNCTION", "LOAD", lib]),
        b"$4\r\nbusy\r\n"
    );
    send(&mut runner, &["FCALL", "spin", "0"]);
    assert_eq!(wait_busy(&mut other), BUSY_FUNCTION);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), BUSY_FUNCTION);
    let stats = String::from_utf8_lossy(&other.cmd_str(&["FUNCTION", "STATS"])).into_owned();
    assert!(
        stats.starts_with(
            "*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*3\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:"
        ),
        "{stats}"
    );
    assert!(
        stats.ends_with("$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:1\r\n"),
        "{stats}"
    );
    assert_eq!(other.cmd_str(&["FUNCTION", "KILL"]), b"+OK\r\n");
    let r = runner.read_frame();
    assert!(r.starts_with(b"-ERR Script killed by user"), "{r:?}");
    assert_eq!(other.cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn keys_a_busy_script_made_ready_are_served_after_it() {
    let (_p, port) = engine();
    let mut blocked = Resp::connect(port);
    let mut runner = Resp::connect(port);
    let mut other = Resp::connect(port);
    send(&mut blocked, &["BLPOP", "x", "0"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&other.cmd_str(&["INFO", "clients"]))
        .contains("blocked_clients:1")
    {
        assert!(Instant::now() < deadline, "BLPOP did not block");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Pushes y, spins until one more client has connected (the test's signal: connections
    // are accepted while a script is busy), then pushes z: a client served mid-script would
    // pop y.
    let script = "redis.call('lpush', KEYS[1], 'y')
        local function clients()
            return tonumber(string.match(redis.call('info', 'clients'), 'connected_clients:(%d+)'))
        end
        local n = clients()
        while clients() <= n do end
        redis.call('lpush', KEYS[1], 'z')
        return 'done'";
    send(&mut runner, &["EVAL", script, "1", "x"]);
    assert_eq!(wait_busy(&mut other), BUSY_EVAL);
    // Commands allowed while busy (HELLO) must not serve the blocked client.
    let hello = other.cmd_str(&["HELLO", "2", "SETNAME", "abortscript"]);
    assert!(hello.starts_with(b"*14\r\n"), "{hello:?}");
    assert_eq!(
        other.cmd_str(&["SCRIPT", "KILL"]),
        b"-UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.\r\n"
    );
    let (early, _) =
        blocked.read_until_close(Duration::from_millis(200), Duration::from_millis(300));
    assert!(
        early.is_empty(),
        "the blocked client was served mid-script: {early:?}"
    );
    let _signal = Resp::connect(port);
    assert_eq!(runner.read_frame(), b"$4\r\ndone\r\n");
    assert_eq!(blocked.read_frame(), b"*2\r\n$1\r\nx\r\n$1\r\nz\r\n");
    assert_eq!(
        other.cmd_str(&["LRANGE", "x", "0", "-1"]),
        b"*1\r\n$1\r\ny\r\n"
    );
}

#[test]
fn shutdown_nosave_stops_an_unkillable_script() {
    let (mut p, port) = engine();
    let mut runner = Resp::connect(port);
    let mut other = Resp::connect(port);
    send(
        &mut runner,
        &["EVAL", "redis.call('set','x','y') while true do end", "0"],
    );
    assert_eq!(wait_busy(&mut other), BUSY_EVAL);
    let r = other.cmd_str(&["SCRIPT", "KILL"]);
    assert!(r.starts_with(b"-UNKILLABLE"), "{r:?}");
    assert_eq!(other.cmd_str(&["SHUTDOWN", "SAVE"]), BUSY_EVAL);
    // No reply to anyone; the process exits.
    send(&mut other, &["SHUTDOWN", "NOSAVE"]);
    let (rest, closed) = runner.read_until_close(Duration::from_secs(3), Duration::from_secs(5));
    assert!(closed && rest.is_empty(), "{rest:?} closed={closed}");
    assert!(wait_exit(&mut p).success());
}

#[test]
fn shutdown_checks_its_options_then_saves_or_not() {
    let dir = std::env::temp_dir().join(format!("busy-script-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The snapshot file is named after the port: restarts use the same one.
    let port = free_port();
    let start = |dir: &std::path::Path| {
        let mut cmd = Command::new(recached_bin());
        cmd.args(["server", "--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir);
        let mut p = Proc::spawn(&format!("engine-{port}"), cmd);
        p.wait_port(port, START_TIMEOUT);
        (p, port)
    };
    let (mut p, port) = start(&dir);
    let mut c = Resp::connect(port);
    for (args, want) in [
        (
            &["SHUTDOWN", "ABORT"][..],
            &b"-ERR No shutdown in progress.\r\n"[..],
        ),
        (&["SHUTDOWN", "ABORT", "NOW"], b"-ERR syntax error\r\n"),
        (&["SHUTDOWN", "SAVE", "NOSAVE"], b"-ERR syntax error\r\n"),
        (&["SHUTDOWN", "LATER"], b"-ERR syntax error\r\n"),
    ] {
        assert_eq!(c.cmd_str(args), want, "{args:?}");
    }
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(
        c.cmd_str(&["SHUTDOWN"]),
        b"-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(c.cmd_str(&["DISCARD"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["SET", "kept", "1"]), b"+OK\r\n");
    // SHUTDOWN saves what changed, sends nothing and exits 0.
    send(&mut c, &["SHUTDOWN"]);
    let (rest, closed) = c.read_until_close(Duration::from_secs(3), Duration::from_secs(5));
    assert!(closed && rest.is_empty(), "{rest:?}");
    let status = wait_exit(&mut p);
    assert!(status.success(), "{status}");
    // Restarted on the same dir: the key is back. NOSAVE then drops a new change.
    let (mut p, port) = start(&dir);
    let mut c = Resp::connect(port);
    assert_eq!(c.cmd_str(&["GET", "kept"]), b"$1\r\n1\r\n");
    assert_eq!(c.cmd_str(&["SET", "dropped", "1"]), b"+OK\r\n");
    send(&mut c, &["SHUTDOWN", "NOSAVE"]);
    assert!(wait_exit(&mut p).success());
    let (_p, port) = start(&dir);
    let mut c = Resp::connect(port);
    assert_eq!(c.cmd_str(&["EXISTS", "kept", "dropped"]), b":1\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}

fn wait_exit(p: &mut Proc) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "the engine did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Through the proxy (issue 15, item 3): SCRIPT KILL and FUNCTION KILL reach the busy engine on
/// the client's own connections (the shared link waits behind the script), and the fleet
/// serves again once the script is gone.
#[test]
fn script_kill_and_function_kill_through_the_proxy() {
    let f = Fleet::start("busy-proxy", 2);
    let mut c = Resp::connect(f.proxy_port);
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "10"]),
        b"+OK\r\n"
    );
    let mut runner = Resp::connect(f.proxy_port);
    let mut other = Resp::connect(f.proxy_port);
    assert_eq!(
        other.cmd_str(&["SCRIPT", "KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );
    send(&mut runner, &["EVAL", "while true do end", "1", "{busy}k"]);
    std::thread::sleep(Duration::from_millis(50));
    // FUNCTION KILL names the wrong kind of script: the busy engine's text.
    assert_eq!(other.cmd_str(&["FUNCTION", "KILL"]), BUSY_EVAL);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let r = runner.read_frame();
    assert!(r.starts_with(b"-ERR Script killed by user"), "{r:?}");
    assert_eq!(other.cmd_str(&["SET", "{busy}k", "v"]), b"+OK\r\n");

    let lib = "#!lua name=busy\nredis.register_function('spin', function() while 1 do end end)";
    assert_eq!(
        runner.cmd_str(&["FUNCTION", "LOAD", lib]),
        b"$4\r\nbusy\r\n"
    );
    send(&mut runner, &["FCALL", "spin", "1", "{busy}k"]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), BUSY_FUNCTION);
    assert_eq!(other.cmd_str(&["FUNCTION", "KILL"]), b"+OK\r\n");
    let r = runner.read_frame();
    assert!(r.starts_with(b"-ERR Script killed by user"), "{r:?}");
    assert_eq!(other.cmd_str(&["GET", "{busy}k"]), b"$1\r\nv\r\n");
    assert_eq!(
        other.cmd_str(&["FUNCTION", "KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );
}

/// Through the proxy (issue 15, item 3): scripts take their own link to the engine, so while
/// one runs past the threshold, other clients' ordinary commands for that engine reach it
/// and get its `-BUSY` at once (a single Redis's answer) instead of waiting behind the
/// script, and so do other clients' scripts (another script link); a pipeline that mixes a
/// script with other commands, or of scripts alone, still runs in order; and the fleet
/// serves again once the script is killed.
#[test]
fn other_clients_get_busy_through_the_proxy() {
    let f = Fleet::start("busy-proxy-other", 2);
    let mut c = Resp::connect(f.proxy_port);
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "10"]),
        b"+OK\r\n"
    );
    // In order on one client: SET, a script reading it, GET after it.
    let mut pipeline = Resp::encode(&[b"SET", b"{busy}k", b"1"]);
    pipeline.extend(Resp::encode(&[
        b"EVAL",
        b"return redis.call('INCR', KEYS[1])",
        b"1",
        b"{busy}k",
    ]));
    pipeline.extend(Resp::encode(&[b"GET", b"{busy}k"]));
    c.send_raw(&pipeline);
    assert_eq!(c.read_frame(), b"+OK\r\n");
    assert_eq!(c.read_frame(), b":2\r\n");
    assert_eq!(c.read_frame(), b"$1\r\n2\r\n");

    let mut runner = Resp::connect(f.proxy_port);
    let mut other = Resp::connect(f.proxy_port);
    send(&mut runner, &["EVAL", "while true do end", "1", "{busy}k"]);
    // The other client's reads of that engine: -BUSY within the bound, not a hang.
    let deadline = Instant::now() + Duration::from_secs(5);
    let r = loop {
        let r = other.cmd_str(&["GET", "{busy}k"]);
        if r.starts_with(b"-BUSY") || Instant::now() >= deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(r, BUSY_EVAL);
    // Another client's script for that engine takes another script link: -BUSY too, at once.
    let mut third = Resp::connect(f.proxy_port);
    assert_eq!(
        third.cmd_str(&["EVAL", "return redis.call('GET', KEYS[1])", "1", "{busy}k"]),
        BUSY_EVAL
    );
    assert_eq!(
        third.cmd_str(&["FCALL", "nosuch", "1", "{busy}k"]),
        BUSY_EVAL
    );
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let r = runner.read_frame();
    assert!(r.starts_with(b"-ERR Script killed by user"), "{r:?}");
    assert_eq!(other.cmd_str(&["GET", "{busy}k"]), b"$1\r\n2\r\n");
    assert_eq!(runner.cmd_str(&["EVAL", "return 7", "0"]), b":7\r\n");
    // A pipeline of scripts from one client runs in order on one script link.
    let mut pipeline = Vec::new();
    for i in 0..50 {
        let n = i.to_string();
        pipeline.extend(Resp::encode(&[
            b"EVAL",
            b"redis.call('RPUSH', KEYS[1], ARGV[1]) return redis.call('LLEN', KEYS[1])",
            b"1",
            b"{busy}order",
            n.as_bytes(),
        ]));
    }
    third.send_raw(&pipeline);
    for i in 0..50 {
        assert_eq!(third.read_frame(), format!(":{}\r\n", i + 1).into_bytes());
    }
    let r = third.cmd_str(&["LRANGE", "{busy}order", "0", "-1"]);
    let want: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    let refs: Vec<&[u8]> = want.iter().map(|s| s.as_bytes()).collect();
    let mut expect = format!("*{}\r\n", refs.len()).into_bytes();
    for r in &refs {
        expect.extend(format!("${}\r\n", r.len()).into_bytes());
        expect.extend_from_slice(r);
        expect.extend_from_slice(b"\r\n");
    }
    assert_eq!(r, expect);
}
