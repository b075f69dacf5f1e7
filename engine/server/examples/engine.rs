//! Runs one engine in the foreground without the `recached` binary, for benchmarking the loop:
//! `cargo run --release -p recached-server --example engine -- [PORT]` (default 6400).
//! No logger is installed, so nothing is printed; stop it with Ctrl-C or SIGTERM.

fn main() -> std::io::Result<()> {
    let port = std::env::args()
        .nth(1)
        .map(|p| p.parse().expect("PORT must be a number"))
        .unwrap_or(6400);
    recached_server::run(recached_server::ServerOptions {
        port,
        ..Default::default()
    })
}
