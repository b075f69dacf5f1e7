//! The browser replica's web assets, as the fan-out serves them (docs/browser-protocol.md):
//! the demo page (`index.html`, `demo.js`, `demo.css`) and the replica's ES module
//! (`recached.js`, which drives the module ABI of `wasm/src/abi.rs`).
//!
//! They are compiled in from this folder, so a binary built anywhere (`cargo install`)
//! serves the page with no source tree around, and they reach it through Cargo's dependency
//! graph (`recached` → `recached-fanout` → this crate), not through a path across crates.
//! Each constant is the file's text, UTF-8.
//!
//! The WebAssembly module is compiled in too ([`RECACHED_WASM`]): `build.rs` builds the
//! `recached-wasm` crate for `wasm32-unknown-unknown` in a nested cargo build. Where that
//! cannot run it is empty, and the fan-out reads the module from the file
//! [`default_wasm_path`] names; `--wasm PATH` or `RECACHED_WASM` always take precedence (a
//! module rebuilt by scripts/build-wasm.sh is served without relinking).

use std::path::{Path, PathBuf};

/// `GET /`: the demo dashboard.
pub const INDEX_HTML: &str = include_str!("index.html");
/// `GET /demo.js`: the dashboard's script (imports `/recached.js`).
pub const DEMO_JS: &str = include_str!("demo.js");
/// `GET /demo.css`.
pub const DEMO_CSS: &str = include_str!("demo.css");
/// `GET /recached.js`: the replica's ES module.
pub const RECACHED_JS: &str = include_str!("recached.js");

/// `GET /recached.wasm`: the replica module built by `build.rs`; empty when it could not be
/// built (then [`default_wasm_path`] is read).
pub const RECACHED_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/recached.wasm"));

/// The file `/recached.wasm` is read from when [`RECACHED_WASM`] is empty and `--wasm` names
/// no file: `RECACHED_WASM` if set,
/// else scripts/build-wasm.sh's output, `<target>/www/recached.wasm`, with `<target>` the
/// `CARGO_TARGET_DIR` at run time or this workspace's `target/` (fixed at build time, so an
/// installed binary moved off this machine needs `--wasm` or `RECACHED_WASM`).
pub fn default_wasm_path() -> PathBuf {
    if let Some(p) = wasm_override() {
        return p;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("www/recached.wasm")
}

/// `RECACHED_WASM`, when set: a module file served instead of the embedded one.
pub fn wasm_override() -> Option<PathBuf> {
    std::env::var_os("RECACHED_WASM").map(PathBuf::from)
}
