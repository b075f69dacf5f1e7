//! Commands that are not tied to one data type.
//!
//! - [`keys`]: generic keyspace commands (DEL, EXPIRE, TTL, RENAME, KEYS, SCAN, FLUSHALL…),
//!   redis `db.c` / `expire.c`.
//! - [`connection`]: per-connection commands (PING, ECHO, SELECT, HELLO, RESET, QUIT, CLIENT).
//! - [`server`]: INFO, TIME, CONFIG and COMMAND (introspection generated from the table).

pub mod connection;
pub mod keys;
pub mod server;
