//! The browser replica's web assets, as the fan-out serves them (docs/browser-protocol.md):
//! the demo page (`index.html`, `demo.js`, `demo.css`) and the replica's ES module
//! (`recached.js`, which drives the module ABI of `wasm/src/abi.rs`).
//!
//! They are compiled in from this folder, so a binary built anywhere (`cargo install`)
//! serves the page with no source tree around, and they reach it through Cargo's dependency
//! graph (`recached` → `recached-fanout` → this crate), not through a path across crates.
//! Each constant is the file's text, UTF-8.
//!
//! The WebAssembly module itself is not compiled in: it is the `recached-wasm` crate built
//! for `wasm32-unknown-unknown` by scripts/build-wasm.sh, a separate cargo build that a
//! native build cannot run. The fan-out reads it at request time from the path
//! [`default_wasm_path`] names unless `--wasm PATH` says otherwise.

use std::path::{Path, PathBuf};

/// `GET /`: the demo dashboard.
pub const INDEX_HTML: &str = include_str!("index.html");
/// `GET /demo.js`: the dashboard's script (imports `/recached.js`).
pub const DEMO_JS: &str = include_str!("demo.js");
/// `GET /demo.css`.
pub const DEMO_CSS: &str = include_str!("demo.css");
/// `GET /recached.js`: the replica's ES module.
pub const RECACHED_JS: &str = include_str!("recached.js");

/// Where `/recached.wasm` is read from unless `--wasm` names a file: `RECACHED_WASM` if set,
/// else scripts/build-wasm.sh's output, `<target>/www/recached.wasm`, with `<target>` the
/// `CARGO_TARGET_DIR` at run time or this workspace's `target/` (fixed at build time, so an
/// installed binary moved off this machine needs `--wasm` or `RECACHED_WASM`).
pub fn default_wasm_path() -> PathBuf {
    if let Some(p) = std::env::var_os("RECACHED_WASM") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("www/recached.wasm")
}
