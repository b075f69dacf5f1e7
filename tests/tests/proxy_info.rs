//! INFO through the proxy of a 2-engine fleet, section by section where the proxy merges the
//! engines' own: `# Persistence` adds up the changes not yet saved (Redis's bitops.tcl reads
//! `rdb_changes_since_last_save` through the proxy) and keeps the first engine's times and
//! statuses, each field once.
//!
//! Run `cargo build -p recached` first.

mod common;

use common::*;

fn field(info: &str, name: &str) -> Vec<String> {
    info.lines()
        .filter_map(|l| l.trim_end().strip_prefix(&format!("{name}:")))
        .map(str::to_string)
        .collect()
}

#[test]
fn persistence_is_merged_over_the_engines() {
    let fleet = Fleet::start("proxy-info", 2);
    let (a, b) = keys_on_two_engines("pi");
    let mut c = Resp::connect(fleet.proxy_port);
    for k in [&a, &a, &b] {
        assert_eq!(c.cmd_str(&["SET", k, "v"]), b"+OK\r\n");
    }
    let engines: i64 = fleet
        .engine_ports
        .iter()
        .map(|&p| {
            let info = String::from_utf8_lossy(&Resp::connect(p).cmd_str(&["INFO", "persistence"]))
                .into_owned();
            field(&info, "rdb_changes_since_last_save")[0]
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert!(engines >= 3, "each SET is a change: {engines}");
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "persistence"])).into_owned();
    assert_eq!(
        field(&info, "rdb_changes_since_last_save"),
        [engines.to_string()],
        "{info}"
    );
    assert_eq!(field(&info, "rdb_last_bgsave_status"), ["ok"], "{info}");
    assert_eq!(field(&info, "loading"), ["0"], "{info}");
    assert_eq!(
        field(&info, "rdb_current_bgsave_time_sec"),
        ["-1"],
        "{info}"
    );
}

/// `CONFIG GET port` through the proxy is the proxy's port, the one its clients connect to
/// (an engine's port is no address for them), in RESP2 and RESP3; other values are an
/// engine's.
#[test]
fn config_get_port_is_the_proxys() {
    let fleet = Fleet::start("proxy-config-port", 2);
    let port = fleet.proxy_port.to_string();
    let mut c = Resp::connect(fleet.proxy_port);
    let want = format!(
        "*4\r\n$4\r\nport\r\n${}\r\n{port}\r\n$9\r\ndatabases\r\n$2\r\n16\r\n",
        port.len()
    );
    assert_eq!(
        String::from_utf8_lossy(&c.cmd_str(&["CONFIG", "GET", "port", "databases"])),
        want
    );
    c.cmd_str(&["HELLO", "3"]);
    let want = format!("%1\r\n$4\r\nport\r\n${}\r\n{port}\r\n", port.len());
    assert_eq!(
        String::from_utf8_lossy(&c.cmd_str(&["CONFIG", "GET", "port"])),
        want
    );
    assert_eq!(
        c.cmd_str(&["CONFIG", "GET"]),
        b"-ERR wrong number of arguments for 'config|get' command\r\n"
    );
}
