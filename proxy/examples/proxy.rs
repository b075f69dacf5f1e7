//! A bare proxy binary for benchmarks and manual tests, independent of the supervisor crate:
//! `cargo run --release -p recached-proxy --example proxy -- --port 6380 --backends 127.0.0.1:6400,127.0.0.1:6401`
//! (the product binary is `recached proxy …`).

fn main() {
    let mut opts = recached_proxy::ProxyOptions {
        memcached_port: 0,
        memcached_tls_port: 0,
        memcached_user: None,
        port: 6380,
        bind: "127.0.0.1".into(),
        backends: Vec::new(),
        tls: Default::default(),
        limits: Default::default(),
        auth: Default::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--port" => opts.port = value.parse().expect("--port takes a number"),
            "--bind" => opts.bind = value,
            "--backends" => opts.backends = value.split(',').map(str::to_string).collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    if let Err(e) = recached_proxy::run(opts) {
        eprintln!("proxy: {e}");
        std::process::exit(1);
    }
}
