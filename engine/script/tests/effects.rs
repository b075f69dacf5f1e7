//! A script's writes reach the keychange feed as the commands it ran (effect replication),
//! never as EVAL; MONITOR shows them as `[db lua]`.

use engine_core::{Client, Config, Engine};

const T0: u64 = 1_767_225_600_000_000;

fn client(id: u64) -> Client {
    Client {
        id,
        addr: format!("127.0.0.1:{id}"),
        ..Client::default()
    }
}

fn run(e: &mut Engine, c: &mut Client, args: &[&str]) -> Vec<u8> {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    e.exec(c, &argv, T0, &mut out);
    out
}

fn delivered(e: &mut Engine, id: u64) -> String {
    let mut s = Vec::new();
    let mut all = Vec::new();
    e.take_deliveries(&mut all);
    for d in all {
        if d.client_id == id {
            s.extend_from_slice(&d.bytes);
        }
    }
    String::from_utf8_lossy(&s).into_owned()
}

#[test]
fn script_writes_reach_the_feed_as_commands() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let (mut feed, mut w) = (client(1), client(2));
    run(&mut e, &mut feed, &["FEED", "SUBSCRIBE"]);
    delivered(&mut e, 1);
    let out = run(
        &mut e,
        &mut w,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], ARGV[1]); redis.call('incr', KEYS[2]); return redis.call('get', KEYS[1])",
            "2",
            "a",
            "n",
            "v",
        ],
    );
    assert_eq!(out, b"$1\r\nv\r\n");
    let fed = delivered(&mut e, 1);
    assert!(
        fed.contains("$3\r\nset\r\n$1\r\na\r\n$1\r\nv\r\n"),
        "{fed:?}"
    );
    assert!(
        fed.contains("incr\r\n$1\r\nn") || fed.contains("INCR\r\n$1\r\nn"),
        "{fed:?}"
    );
    assert!(!fed.to_ascii_lowercase().contains("eval"), "{fed:?}");
}

#[test]
fn monitor_shows_eval_then_lua_lines() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let (mut m, mut w) = (client(1), client(2));
    run(&mut e, &mut m, &["MONITOR"]);
    run(
        &mut e,
        &mut w,
        &["EVAL", "return redis.call('set','k','1')", "0"],
    );
    let lines = delivered(&mut e, 1);
    let eval = lines.find("\"EVAL\"").expect("EVAL line");
    let lua = lines.find("[0 lua] \"set\" \"k\" \"1\"").expect("lua line");
    assert!(eval < lua, "{lines}");
}

#[test]
fn without_a_host_eval_is_unknown() {
    let mut e = Engine::new(Config::default());
    let mut c = client(1);
    let out = run(&mut e, &mut c, &["EVAL", "return 1", "0"]);
    assert!(out.starts_with(b"-ERR unknown command 'EVAL'"), "{out:?}");
}

/// A runaway script is stopped once it has run `BUSY_LIMIT`, even when it catches the error
/// with pcall, and the engine then serves the next command (a hang would fail the test run).
#[test]
fn a_runaway_script_is_stopped_and_the_engine_serves_on() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let mut c = client(1);
    for body in [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
        "local co = coroutine.wrap(function() while true do end end) co()",
    ] {
        let started = std::time::Instant::now();
        let out = String::from_utf8_lossy(&run(&mut e, &mut c, &["EVAL", body, "0"])).into_owned();
        assert!(
            out.starts_with(
                "-ERR Script ran longer than busy-reply-threshold (5000 ms) and was stopped"
            ),
            "{body}: {out}"
        );
        assert!(started.elapsed() >= recached_script::BUSY_LIMIT, "{body}");
        assert_eq!(run(&mut e, &mut c, &["PING"]), b"+PONG\r\n");
        assert_eq!(run(&mut e, &mut c, &["EVAL", "return 1", "0"]), b":1\r\n");
    }
}

#[test]
fn function_writes_reach_the_feed_and_monitor_as_commands() {
    let mut e = Engine::new(Config::default());
    recached_script::install(&mut e).unwrap();
    let (mut feed, mut m, mut w) = (client(1), client(2), client(3));
    run(&mut e, &mut feed, &["FEED", "SUBSCRIBE"]);
    run(&mut e, &mut m, &["MONITOR"]);
    delivered(&mut e, 1);
    let lib = "#!lua name=lib\nredis.register_function('setget', function(keys, args) \
               redis.call('set', keys[1], args[1]) return redis.call('get', keys[1]) end)";
    assert_eq!(
        run(&mut e, &mut w, &["FUNCTION", "LOAD", lib]),
        b"$3\r\nlib\r\n"
    );
    // Loading a library is not an effect.
    assert!(!delivered(&mut e, 1).contains("lib"));
    let out = run(&mut e, &mut w, &["FCALL", "setget", "1", "a", "v"]);
    assert_eq!(out, b"$1\r\nv\r\n");
    let mut all = Vec::new();
    e.take_deliveries(&mut all);
    let (mut fed, mut mon) = (String::new(), String::new());
    for d in all {
        let text = String::from_utf8_lossy(&d.bytes).into_owned();
        match d.client_id {
            1 => fed.push_str(&text),
            2 => mon.push_str(&text),
            _ => {}
        }
    }
    assert!(
        fed.contains("$3\r\nset\r\n$1\r\na\r\n$1\r\nv\r\n"),
        "{fed:?}"
    );
    assert!(!fed.to_ascii_lowercase().contains("fcall"), "{fed:?}");
    let fcall = mon.find("\"FCALL\"").expect("FCALL line");
    let lua = mon.find("[0 lua] \"set\" \"a\" \"v\"").expect("lua line");
    assert!(fcall < lua, "{mon:?}");
    // FCALL_RO of a writing function, and a read-only function that writes.
    assert_eq!(
        run(&mut e, &mut w, &["FCALL_RO", "setget", "1", "a", "v"]),
        b"-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
    let ro = "#!lua name=ro\nredis.register_function{function_name='w', callback=function(keys) \
              return redis.call('set', keys[1], 'x') end, flags={'no-writes'}}";
    run(&mut e, &mut w, &["FUNCTION", "LOAD", ro]);
    let out = String::from_utf8(run(&mut e, &mut w, &["FCALL_RO", "w", "1", "a"])).unwrap();
    assert!(
        out.starts_with("-ERR Write commands are not allowed from read-only scripts."),
        "{out}"
    );
    // SCRIPT FLUSH leaves the libraries alone; FUNCTION FLUSH drops them.
    run(&mut e, &mut w, &["SCRIPT", "FLUSH"]);
    assert_eq!(
        run(&mut e, &mut w, &["FCALL", "setget", "1", "a", "z"]),
        b"$1\r\nz\r\n"
    );
    run(&mut e, &mut w, &["FUNCTION", "FLUSH"]);
    assert_eq!(
        run(&mut e, &mut w, &["FCALL", "setget", "1", "a", "z"]),
        b"-ERR Function not found\r\n"
    );
}

#[test]
fn without_a_host_function_is_unknown() {
    let mut e = Engine::new(Config::default());
    let mut c = client(1);
    let out = String::from_utf8(run(&mut e, &mut c, &["FCALL", "f", "0"])).unwrap();
    assert!(out.starts_with("-ERR unknown command 'FCALL'"), "{out}");
}
