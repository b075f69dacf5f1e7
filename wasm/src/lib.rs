//! The browser replica (placeholder).
//!
//! Issue 5 turns this crate into the WebAssembly build of `engine-core` that applies keychange
//! effects and answers reads from local memory. For now it only proves the pure crates build for
//! `wasm32-unknown-unknown`: it exports the hash-slot function.

/// Redis Cluster hash slot of the `len` bytes at `ptr` in the module's memory.
pub fn key_slot(key: &[u8]) -> u16 {
    engine_core::slot::key_slot(key)
}
