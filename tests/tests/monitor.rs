//! MONITOR against redis-server and an engine (the same expectations run on both, so they are
//! checked against Redis too): which commands produce a line, the line's format with the
//! clock and the client address normalized, quoting, redaction, the database shown, the
//! monitor connection's own restrictions, and RESET ending monitor mode.

mod common;

use common::*;
use std::time::{SystemTime, UNIX_EPOCH};

/// `+<secs>.<usecs> [<db> 127.0.0.1:<port>] …` → `+T [<db> ADDR] …`, checking the clock
/// is within 60 s of ours and the address is the worker's.
fn normalize(line: &str, worker_addr: &str, server: &str) -> String {
    let body = line
        .strip_prefix('+')
        .unwrap_or_else(|| panic!("[{server}] not a simple string: {line}"));
    let (stamp, rest) = body.split_once(' ').unwrap();
    let (secs, usecs) = stamp.split_once('.').unwrap();
    assert_eq!(usecs.len(), 6, "[{server}] microseconds in {line}");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (secs.parse::<i64>().unwrap() - now).abs() < 60,
        "[{server}] clock in {line}"
    );
    let rest = rest.strip_prefix('[').unwrap();
    let (db, rest) = rest.split_once(' ').unwrap();
    let (addr, rest) = rest.split_once(']').unwrap();
    let who = if addr == worker_addr {
        "WORKER"
    } else {
        "OTHER"
    };
    format!("+T [{db} {who}]{rest}")
}

/// The worker connection's `ip:port`, from its CLIENT INFO.
fn addr_of(c: &mut Resp) -> String {
    let info = String::from_utf8_lossy(&c.cmd_str(&["CLIENT", "INFO"])).into_owned();
    info.split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string()
}

/// Reads `n` monitor lines (simple strings), normalized.
fn lines(m: &mut Resp, n: usize, worker: &str, server: &str) -> Vec<String> {
    (0..n)
        .map(|_| {
            let f = String::from_utf8_lossy(&m.read_frame()).into_owned();
            normalize(f.trim_end_matches("\r\n"), worker, server)
        })
        .collect()
}

#[test]
fn monitor_lines_match_redis() {
    on_both(|port, server| {
        let mut m = Resp::connect(port);
        let mut w = Resp::connect(port);
        let worker = addr_of(&mut w);
        assert_eq!(cmd(&mut m, &["MONITOR"]), "+OK\\r\\n", "[{server}]");
        // Not shown: refused before running (unknown, arity), admin rows (CONFIG, CLIENT
        // LIST), commands queued in MULTI (shown when EXEC runs them, before EXEC).
        for args in [
            &["SET", "k", "a \"b\"\n\\\t\u{1}"][..],
            &["NOSUCHCOMMAND", "x"],
            &["GET"],
            &["CONFIG", "GET", "maxmemory"],
            &["CLIENT", "LIST"],
            &["GET", "k"],
            &["SELECT", "2"],
            &["MULTI"],
            &["INCR", "n"],
            &["EXEC"],
            &["AUTH", "someone", "secret"],
            &["HELLO", "2", "AUTH", "default", "pw", "SETNAME", "w"],
            &["ECHO", "bytes\u{7f}"],
        ] {
            w.cmd_str(args);
        }
        let expected = [
            "+T [0 WORKER] \"SET\" \"k\" \"a \\\"b\\\"\\n\\\\\\t\\x01\"",
            "+T [0 WORKER] \"GET\" \"k\"",
            "+T [2 WORKER] \"SELECT\" \"2\"",
            "+T [2 WORKER] \"MULTI\"",
            "+T [2 WORKER] \"INCR\" \"n\"",
            "+T [2 WORKER] \"EXEC\"",
            "+T [2 WORKER] \"AUTH\" \"(redacted)\" \"(redacted)\"",
            "+T [2 WORKER] \"HELLO\" \"2\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"w\"",
            "+T [2 WORKER] \"ECHO\" \"bytes\\x7f\"",
        ];
        assert_eq!(
            lines(&mut m, expected.len(), &worker, server),
            expected,
            "[{server}]"
        );
        assert_quiet(&mut m, server);
        // The monitor itself: no keyspace access; other commands are answered, then shown.
        assert_eq!(
            cmd(&mut m, &["GET", "k"]),
            "-ERR Replica can't interact with the keyspace\\r\\n",
            "[{server}]"
        );
        assert_eq!(
            cmd(&mut m, &["PUBLISH", "c", "x"]),
            "-ERR Replica can't interact with the keyspace\\r\\n",
            "[{server}]"
        );
        assert_eq!(cmd(&mut m, &["PING"]), "+PONG\\r\\n", "[{server}]");
        let own = lines(&mut m, 1, &worker, server);
        assert_eq!(own, ["+T [0 OTHER] \"PING\""], "[{server}]");
        // A second MONITOR gets no reply at all (redis `monitorCommand`).
        send(&mut m, &["MONITOR"]);
        assert_quiet(&mut m, server);
        // CLIENT LIST shows the monitor with flag O.
        let list = String::from_utf8_lossy(&w.cmd_str(&["CLIENT", "LIST"])).into_owned();
        assert!(list.contains(" flags=O "), "[{server}] {list}");
        // RESET ends monitor mode.
        assert_eq!(cmd(&mut m, &["RESET"]), "+RESET\\r\\n", "[{server}]");
        assert!(cmd(&mut m, &["GET", "k"]).starts_with('$'), "[{server}]");
        w.cmd_str(&["PING"]);
        assert_quiet(&mut m, server);
    });
}

/// The commands a MONITOR shows for a transaction the worker spells in lower case, as the
/// Tcl client does (Redis's introspection.tcl, "MONITOR correctly handles multi-exec
/// cases"): the part after the address, of the lines from the worker's MULTI to its EXEC
/// (another connection's lines, such as a proxy's periodic CLUSTER SLOTS, are skipped).
fn transaction_lines(port: u16) -> Vec<String> {
    let mut m = Resp::connect(port);
    let mut w = Resp::connect(port);
    assert_eq!(cmd(&mut m, &["MONITOR"]), "+OK\\r\\n");
    for args in [&["multi"][..], &["set", "foo", "bar"], &["exec"]] {
        w.cmd_str(args);
    }
    let mut shown = commands_until(&mut m, |c| c == "\"exec\"");
    shown.retain(|c| ["\"multi\"", "\"set\" \"foo\" \"bar\"", "\"exec\""].contains(&c.as_str()));
    shown
}

/// The commands (each line's part after the address) of the monitor `m`'s next lines, up to
/// and including the first for which `last` holds; at most 100 lines.
fn commands_until(m: &mut Resp, last: impl Fn(&str) -> bool) -> Vec<String> {
    let mut shown = Vec::new();
    for _ in 0..100 {
        let line = String::from_utf8_lossy(&m.read_frame()).into_owned();
        let (_, command) = line.trim_end().split_once("] ").expect("a monitor line");
        shown.push(command.to_string());
        if last(command) {
            return shown;
        }
    }
    panic!("not found among 100 monitor lines: {shown:?}");
}

#[test]
fn monitor_through_the_proxy_shows_multi_as_the_client_spelled_it() {
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let want = transaction_lines(redis_port);
    assert_eq!(want, ["\"multi\"", "\"set\" \"foo\" \"bar\"", "\"exec\""]);
    let fleet = Fleet::start("monitor-multi", 2);
    assert_eq!(
        transaction_lines(fleet.proxy_port),
        want,
        "through the proxy"
    );
}

/// Through the proxy, MONITOR shows what the proxy's clients run, as a redis-server shows its
/// clients' commands: not the fleet's upkeep (the supervisor's health-check `PING`s and the
/// proxy's `CLUSTER SLOTS` refresh, each about once a second, and its new links' `HELLO`) nor
/// a client connected to an engine directly.
#[test]
fn monitor_through_the_proxy_shows_only_the_proxy_s_clients() {
    let fleet = Fleet::start("monitor-own", 2);
    let mut monitor = Resp::connect(fleet.proxy_port);
    assert_eq!(monitor.cmd_str(&["MONITOR"]), b"+OK\r\n");
    let mut c = Resp::connect(fleet.proxy_port);
    // RESP3, as redis-py and node-redis by default: the proxy opens RESP3 links (`HELLO 3`).
    assert!(c.cmd_str(&["HELLO", "3"]).starts_with(b"%"));
    assert_eq!(c.cmd_str(&["SET", "mo:first", "1"]), b"+OK\r\n");
    let mut direct: Vec<Resp> = fleet
        .engine_ports
        .iter()
        .map(|&p| Resp::connect(p))
        .collect();
    // 2.5 s: two rounds of health checks and of the proxy's periodic refresh at least. Each
    // round a direct client writes a key on the engine that owns it (the other answers
    // -MOVED): a command an engine runs, for another client than the proxy's.
    for i in 0..5 {
        let key = format!("mo:direct{i}");
        let ran = direct
            .iter_mut()
            .map(|d| d.cmd_str(&["SET", &key, "1"]))
            .filter(|r| r == b"+OK\r\n")
            .count();
        assert_eq!(ran, 1, "{key} is written on its one owner");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(c.cmd_str(&["GET", "mo:direct4"]), b"$1\r\n1\r\n");
    assert_eq!(c.cmd_str(&["SET", "mo:last", "1"]), b"+OK\r\n");
    let lines = commands_until(&mut monitor, |c| c.contains("\"mo:last\""));
    assert_eq!(
        lines,
        [
            "\"SET\" \"mo:first\" \"1\"",
            "\"GET\" \"mo:direct4\"",
            "\"SET\" \"mo:last\" \"1\""
        ],
        "only the proxy's client's commands"
    );
}

/// The MONITOR lines of transactions that end without running: aborted by a command refused
/// while queueing (with and without a queued command before it), discarded, and empty. The
/// proxy answers some of them without an instance; each shows what redis-server shows
/// (Redis's introspection.tcl, "MONITOR correctly handles multi-exec cases").
fn ended_transaction_lines(port: u16) -> Vec<String> {
    let mut m = Resp::connect(port);
    let mut w = Resp::connect(port);
    assert_eq!(cmd(&mut m, &["MONITOR"]), "+OK\\r\\n");
    let script: &[&[&str]] = &[
        &["MULTI"],
        &["syntax", "error"],
        &["EXEC"],
        &["multi"],
        &["set", "mo:t", "1"],
        &["bogus"],
        &["exec"],
        &["MULTI"],
        &["set", "mo:t", "2"],
        &["DISCARD"],
        &["MULTI"],
        &["discard"],
        &["MULTI"],
        &["EXEC"],
        &["set", "mo:t", "end"],
    ];
    let mut replies = Vec::new();
    for args in script {
        replies.push(cmd(&mut w, args));
    }
    assert!(replies[2].starts_with("-EXECABORT"), "{replies:?}");
    assert!(replies[6].starts_with("-EXECABORT"), "{replies:?}");
    assert_eq!(cmd(&mut w, &["GET", "mo:t"]), "$3\\r\\nend\\r\\n");
    let mut shown = vec![format!("{replies:?}")];
    shown.extend(commands_until(&mut m, |c| c.contains("\"end\"")));
    shown
}

#[test]
fn monitor_through_the_proxy_shows_transactions_that_did_not_run_as_redis() {
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let want = ended_transaction_lines(redis_port);
    assert_eq!(want.len(), 12, "redis-server's own lines: {want:?}");
    let fleet = Fleet::start("monitor-ended", 2);
    assert_eq!(
        ended_transaction_lines(fleet.proxy_port),
        want,
        "through the proxy"
    );
}
