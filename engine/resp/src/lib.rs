//! RESP, the Redis serialization protocol: a request parser and a reply encoder.
//!
//! Pure and `wasm32`-safe: no I/O, no allocation per request on the hot path.
//!
//! - [`parse`]: turns bytes from a connection's read buffer into argument ranges
//!   (multibulk `*N\r\n$L\r\n…` and inline `GET foo\r\n` requests). Resumable: an incomplete
//!   request is `Ok(None)`, never an error; malformed input is a [`ProtocolError`] whose text is
//!   Redis's `Protocol error: …` reply (redis `networking.c`, `processMultibulkBuffer`).
//! - [`reply`]: [`frame_len`] / [`FrameScanner`] find where the first complete reply frame
//!   (RESP2 or RESP3, nested aggregates included) of a backend's output ends; used by the proxy.
//! - [`encode`]: writes replies straight into an output `Vec<u8>` in RESP2 or RESP3
//!   ([`Proto`]), so the same handler code serves both protocol versions.
//!
//! - [`request`]: [`encode_request`] writes a command as a multibulk, for every role that
//!   talks to a server (supervisor, bench, proxy, wasm replica).
//! - [`value`]: [`decode`] reads the first complete RESP2/RESP3 reply of a buffer into an
//!   owned [`Value`] (bounded depth and lengths; incomplete is `Ok(None)`).
//! - [`parse_i64`]: the one strict decimal integer parser (Redis `string2ll`).
//!
//! Spec: <https://redis.io/docs/latest/develop/reference/protocol-spec/>.
#![forbid(unsafe_code)]

pub mod encode;
mod int;
pub mod parse;
pub mod reply;
pub mod request;
pub mod value;

pub use encode::{Proto, ReplyWriter};
pub use int::parse_i64;
pub use parse::{Limits, ProtocolError, RequestParser};
pub use reply::{FrameScanner, frame_len};
pub use request::encode_request;
pub use value::{Value, decode};
