//! MONITOR through the proxy: one `+OK`, then the lines of every instance (here two
//! redis-servers), the monitor refused keyspace commands as by Redis, CLIENT LIST flag `O`,
//! RESET ending it.

mod common;

use std::time::Duration;

use common::*;

/// The command part of a MONITOR line (`"SET" "k" "v"`), after the `[db addr]`.
fn command_of(line: &[u8]) -> String {
    let text = text(line);
    assert!(text.starts_with('+') && text.ends_with("\r\n"), "{text:?}");
    let (_, rest) = text.split_once("] ").unwrap_or_else(|| panic!("{text:?}"));
    rest.trim_end().to_string()
}

#[test]
fn monitor_relays_every_instance() {
    let f = Fleet::start();
    let mut m = f.conn();
    assert_eq!(m.cmd(&["MONITOR"]), b"+OK\r\n");
    let (a, b) = (key_on(0, "m:"), key_on(1, "m:"));
    let mut w = f.conn();
    assert_eq!(w.cmd(&["SET", &a, "on 0"]), b"+OK\r\n");
    assert_eq!(w.cmd(&["SET", &b, "on 1"]), b"+OK\r\n");
    assert_eq!(w.cmd(&["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(w.cmd(&["GET", &a]), b"$-1\r\n");
    // Database 3's link to instance 0 opens with `SELECT 3`, which the monitor sees too.
    let lines: Vec<Vec<u8>> = (0..4).map(|_| m.reply()).collect();
    let get = lines
        .iter()
        .find(|l| command_of(l).starts_with("\"GET\""))
        .unwrap();
    assert!(text(get).contains(" [3 127.0.0.1:"), "{}", text(get));
    let mut seen: Vec<String> = lines.iter().map(|l| command_of(l)).collect();
    // Lines of different instances may interleave; each instance's come in order.
    seen.sort();
    let mut want = vec![
        format!("\"SET\" \"{a}\" \"on 0\""),
        format!("\"SET\" \"{b}\" \"on 1\""),
        "\"SELECT\" \"3\"".to_string(),
        format!("\"GET\" \"{a}\""),
    ];
    want.sort();
    assert_eq!(seen, want);
    // The monitor: keyspace commands refused, others answered.
    assert_eq!(
        m.cmd(&["GET", &a]),
        b"-ERR Replica can't interact with the keyspace\r\n"
    );
    assert_eq!(m.cmd(&["PING"]), b"+PONG\r\n");
    let list = text(&w.cmd(&["CLIENT", "LIST"]));
    assert!(list.contains(" flags=O "), "{list}");
    // A second MONITOR gets no reply (as from Redis): the next reply is PING's.
    m.send(&["MONITOR"]);
    assert_eq!(m.cmd(&["PING"]), b"+PONG\r\n");
    // RESET ends it: keyspace commands work again and no more lines come.
    assert_eq!(m.cmd(&["RESET"]), b"+RESET\r\n");
    assert_eq!(w.cmd(&["SET", &b, "in 3"]), b"+OK\r\n");
    assert_eq!(m.cmd(&["GET", &b]), bulk("on 1"));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(m.cmd(&["PING"]), b"+PONG\r\n", "no line after RESET");
}
