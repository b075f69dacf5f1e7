//! CONFIG SET `port` and `bind` re-bind the listening socket at once, as redis-server's apply
//! functions do (`changeListenPort`, `changeBindAddr`; Tcl `unit/introspection` "CONFIG SET
//! rollback on apply error"): the same steps go to redis-server 7.0.15 and to an engine and
//! must give the same replies. The old port refuses, the new one accepts, a connection made
//! before keeps working; a port in use (or an address the host lacks) fails with Redis's text,
//! rolls back every value of the call and leaves the old listener serving.
//!
//! An engine that is part of a fleet (started with a cluster topology) refuses a new address
//! instead: the proxy, the other engines' `-MOVED` and the supervisor know it by its port
//! (docs/operations.md, "Ports of a running engine").

mod common;

use common::*;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

fn refuses(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
}

/// CONFIG GET port's reply, escaped.
fn get_port(port: u16) -> String {
    let p = port.to_string();
    format!("*2\\r\\n$4\\r\\nport\\r\\n${}\\r\\n{p}\\r\\n", p.len())
}

#[test]
fn config_set_port_and_bind_rebind_the_listener() {
    on_both(|port, who| {
        let mut old_conn = Resp::connect(port);
        let new = free_port_except(&[port]);

        // Re-bind: the old port refuses, the new one serves, the open connection stays.
        assert_eq!(
            cmd(&mut old_conn, &["CONFIG", "SET", "port", &new.to_string()]),
            "+OK\\r\\n",
            "{who}"
        );
        assert!(refuses(port), "{who}: the old port still accepts");
        assert_eq!(cmd(&mut old_conn, &["PING"]), "+PONG\\r\\n", "{who}");
        let mut c = Resp::connect(new);
        assert_eq!(cmd(&mut c, &["PING"]), "+PONG\\r\\n", "{who}");
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "port"]),
            get_port(new),
            "{who}"
        );

        // A port in use: Redis's error, every value of the call rolled back, the current
        // port still serving.
        let taken = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let busy = taken.local_addr().unwrap().port().to_string();
        let maxmemory = cmd(&mut c, &["CONFIG", "GET", "maxmemory"]);
        assert_eq!(
            cmd(
                &mut c,
                &["CONFIG", "SET", "maxmemory", "10000001", "port", &busy]
            ),
            "-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "maxmemory"]),
            maxmemory,
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "port"]),
            get_port(new),
            "{who}"
        );
        assert_eq!(
            cmd(&mut Resp::connect(new), &["PING"]),
            "+PONG\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut old_conn, &["PING"]), "+PONG\\r\\n", "{who}");

        // bind: the same address re-binds; one the host does not have fails and rolls back.
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "bind"]),
            "*2\\r\\n$4\\r\\nbind\\r\\n$9\\r\\n127.0.0.1\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "SET", "bind", "127.0.0.1"]),
            "+OK\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut Resp::connect(new), &["PING"]),
            "+PONG\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "SET", "bind", "192.0.2.1"]),
            "-ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses.\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut c, &["CONFIG", "GET", "bind"]),
            "*2\\r\\n$4\\r\\nbind\\r\\n$9\\r\\n127.0.0.1\\r\\n",
            "{who}"
        );
        assert_eq!(
            cmd(&mut Resp::connect(new), &["PING"]),
            "+PONG\\r\\n",
            "{who}"
        );
        assert_eq!(cmd(&mut c, &["PING"]), "+PONG\\r\\n", "{who}");
        drop(taken);
    });
}

#[test]
fn a_fleet_engine_keeps_its_port() {
    let port = free_port();
    let node = format!("127.0.0.1:{port}");
    let mut command = Command::new(recached_bin());
    command.args(["server", "--port", &port.to_string(), "--bind", "127.0.0.1"]);
    command.args(["--cluster-nodes", &node, "--cluster-index", "0"]);
    let mut engine = Proc::spawn("engine-fleet-rebind", command);
    engine.wait_port(port, START_TIMEOUT);
    let mut c = Resp::connect(port);
    let other = free_port_except(&[port]).to_string();
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "port", &other]),
        "-ERR CONFIG SET failed (possibly related to argument 'port') - can't change the address of a fleet engine (its port is in the topology)\\r\\n"
    );
    // Setting the current values (as a config sweep does) stays OK and changes nothing.
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "port", &port.to_string()]),
        "+OK\\r\\n"
    );
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "bind", "127.0.0.1"]),
        "+OK\\r\\n"
    );
    assert_eq!(cmd(&mut Resp::connect(port), &["PING"]), "+PONG\\r\\n");
}

/// Through the proxy, `port` is the proxy's own (CONFIG GET answers it). Setting it to itself
/// is OK and the other parameters of the request apply; a port this host cannot listen on
/// gets redis-server's text (Redis's introspection.tcl, "CONFIG SET rollback on apply
/// error"); any other port is refused, since the fleet's configuration names the proxy's
/// port. Nothing changes on a refusal.
#[test]
fn through_the_proxy_port_is_the_proxy_s() {
    let fleet = Fleet::start("rebind-proxy", 2);
    let px = fleet.proxy_port.to_string();
    let mut c = Resp::connect(fleet.proxy_port);
    let maxmemory = |c: &mut Resp| cmd(c, &["CONFIG", "GET", "maxmemory"]);
    let before = maxmemory(&mut c);
    assert_eq!(cmd(&mut c, &["CONFIG", "SET", "port", &px]), "+OK\\r\\n");
    let taken = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let busy = taken.local_addr().unwrap().port().to_string();
    assert_eq!(
        cmd(
            &mut c,
            &["CONFIG", "SET", "maxmemory", "12345678", "port", &busy]
        ),
        "-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\\r\\n"
    );
    assert_eq!(maxmemory(&mut c), before, "nothing changed");
    let other = free_port_except(&[fleet.proxy_port]).to_string();
    assert_eq!(
        cmd(
            &mut c,
            &["CONFIG", "SET", "port", &other, "maxmemory", "12345678"]
        ),
        "-ERR CONFIG SET failed (possibly related to argument 'port') - can't change the port of a fleet's proxy (its port is in the fleet's configuration)\\r\\n"
    );
    assert_eq!(maxmemory(&mut c), before, "nothing changed");
    assert_eq!(
        cmd(
            &mut c,
            &["CONFIG", "SET", "PORT", &px, "maxmemory", "12345678"]
        ),
        "+OK\\r\\n"
    );
    for port in &fleet.engine_ports {
        assert_eq!(
            maxmemory(&mut Resp::connect(*port)),
            "*2\\r\\n$9\\r\\nmaxmemory\\r\\n$8\\r\\n12345678\\r\\n",
            "every engine"
        );
    }
    assert_eq!(
        cmd(&mut c, &["CONFIG", "GET", "port"]),
        get_port(fleet.proxy_port)
    );
    drop(taken);
}
