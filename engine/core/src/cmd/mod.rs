//! Commands that are not tied to one data type.
//!
//! - [`keys`]: generic keyspace commands (DEL, EXPIRE, TTL, RENAME, KEYS, SCAN, FLUSHALL…),
//!   redis `db.c` / `expire.c`.
//! - [`connection`]: per-connection commands (PING, ECHO, SELECT, HELLO, RESET, QUIT, CLIENT).
//! - [`server`]: INFO, TIME, CONFIG; [`config_encoding`]: CONFIG's encoding parameters.
//! - [`replication`]: ROLE; [`lolwut`]: LOLWUT.
//! - [`command`]: COMMAND and its subcommands, from the command table (GETKEYS from its key
//!   extractor).
//! - [`tx`]: MULTI / EXEC / DISCARD / WATCH / UNWATCH.
//! - [`pubsub`]: SUBSCRIBE, PUBLISH, PUBSUB and keyspace notifications.
//! - [`cluster`]: CLUSTER *, READONLY, READWRITE, ASKING.

pub mod cluster;
pub mod command;
pub mod config_encoding;
pub mod config_listen;
pub mod config_stored;
#[rustfmt::skip]
pub mod config_table;
pub mod connection;
pub mod keys;
pub mod lolwut;
pub mod pubsub;
pub mod replication;
pub mod server;
pub mod tx;
