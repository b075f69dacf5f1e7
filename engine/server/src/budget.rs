//! Named budgets of the event loop: every loop iteration does bounded work, and every buffer has
//! a ceiling (STYLE.md guideline 9; Redis `networking.c`, `server.h`).
//!
//! Sizes are bytes, counts are per wakeup of one connection (a "turn") unless stated otherwise.
//!
//! The limits an operator sets (Redis names: `maxclients`, `client-query-buffer-limit`,
//! `client-output-buffer-limit`, `timeout`, `proto-max-bulk-len`) are settings in
//! `engine_core::Config`, not constants here; `event_loop` documents how each is enforced.

/// Connections accepted per readable event of the listener; the rest wait for the next loop
/// iteration so a connection storm cannot starve clients already connected
/// (Redis `MAX_ACCEPTS_PER_CALL` = 1000).
pub const ACCEPT_BATCH: usize = 1000;

/// Initial read buffer of a connection, allocated on its first read. Large enough for a
/// pipelined batch of small commands in one `read` (Redis `PROTO_IOBUF_LEN` = 16 KB).
pub const READ_CHUNK: usize = 16 * 1024;

/// Least free space at the end of the read buffer before a `read`; below it the buffer is
/// compacted or grown, so one system call can still take a useful amount.
pub const READ_MIN_SPACE: usize = 4 * 1024;

/// Unparsed bytes up to this size are moved to the front of the read buffer when space is
/// needed; moving more would cost more than it saves, so the buffer grows instead.
pub const COMPACT_MAX: usize = 64 * 1024;

/// Bytes read from one connection per turn before it yields to the others (it is queued to
/// continue on the next loop iteration), so a fast sender cannot monopolise the loop.
pub const READ_BUDGET_PER_TURN: usize = 1024 * 1024;

/// Reply bytes waiting to be written above which a connection's requests are neither read nor
/// executed until the socket drains (backpressure: a pipelining client that never reads its
/// replies cannot grow server memory without bound). One reply may overshoot it by its own size.
pub const OUTPUT_HIGH_WATER: usize = 512 * 1024;

/// An idle buffer whose capacity is above this is released (back to empty) once it is empty,
/// so one burst does not pin memory for the life of the connection
/// (Redis `clientsCronResizeQueryBuffer` / `clientsCronResizeOutputBuffer`).
pub const BUF_SHRINK_ABOVE: usize = 256 * 1024;

/// A connection idle this long (µs since its last command) gives back its empty buffers, so
/// thousands of idle clients cost a few hundred bytes each instead of `READ_CHUNK`
/// (Redis frees an idle client's query buffer after 2 s, `clientsCronResizeQueryBuffer`).
pub const IDLE_BUF_FREE_US: u64 = 2_000_000;

/// Largest number of readiness events taken from one `poll` call.
pub const EVENTS_CAPACITY: usize = 1024;
