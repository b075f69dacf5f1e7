//! The single-threaded mio loop: accept, read → parse → execute → write, the `hz` timer and
//! the shutdown signals.
//!
//! # One iteration
//!
//! ```text
//! poll(timeout = 0 if work is queued, else time to the next timer tick)
//! now = clock (once)
//! for each event:  listener → accept up to ACCEPT_BATCH
//!                  signals  → return (graceful shutdown)
//!                  conn k   → serve(k)
//! serve every connection queued last time (read budget spent, or accept backlog)
//! timer due?       → engine.cron(now), RSS, shrink idle buffers
//! ```
//!
//! `serve` follows mio's rules (STYLE.md guideline 10; mio `examples/tcp_server.rs`): errors
//! first (a failed read or write closes the connection), then read, then write. It runs every
//! complete request already buffered, reads (one `read` per batch in the usual case, at most
//! `READ_BUDGET_PER_TURN` bytes per turn), runs the new requests, and writes the replies once
//! at the end, like Redis's `beforeSleep` writing pending replies before the next poll. WRITABLE
//! interest is registered only while output is left over, and dropped once it drains.
//!
//! Backpressure: while a connection's unwritten output is at `OUTPUT_HIGH_WATER`, its requests
//! are neither read nor executed; the kernel buffers fill and the client's writes block, so a
//! pipelining client that never reads costs bounded memory.
//!
//! Tokens: a connection's token is its slab key; the listener and signals take tokens at the
//! top of the range, which the slab never reaches (it holds at most `MAX_CLIENTS` entries).

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use engine_core::{Client, Delivery, Engine};
use log::{debug, info, warn};
use mio::event::Event;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use slab::Slab;

use crate::budget::{ACCEPT_BATCH, EVENTS_CAPACITY, MAX_CLIENTS, READ_BUDGET_PER_TURN};
use crate::conn::{Batch, CloseReason, Conn, ReadOutcome};
use crate::host::{self, RssReader};

const LISTENER: Token = Token(usize::MAX - 1);
const SIGNALS: Token = Token(usize::MAX - 2);

/// The highest `hz` honoured (Redis `CONFIG_MAX_HZ`).
const MAX_HZ: u32 = 500;

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

fn interrupted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
}

/// Why a connection is dropped without (further) replies.
#[derive(Debug)]
enum Disconnect {
    Io(io::Error),
    QueryBufLimit,
    Done(CloseReason),
}

pub struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    signals: Signals,
    conns: Slab<Conn>,
    pub engine: Engine,
    /// CLIENT ID of the next connection.
    next_client_id: u64,
    /// The argv vector reused by every command (see `conn::recycle`).
    argv: Vec<&'static [u8]>,
    /// Connections with work left for the next iteration (their read budget ran out).
    queued: Vec<usize>,
    /// The last accept stopped at `ACCEPT_BATCH`: more connections may be waiting.
    accept_backlog: bool,
    /// Accept failed (e.g. out of descriptors): retry on the next timer tick, not in a spin.
    accept_retry: bool,
    rss: RssReader,
    /// When the next timer tick is due, Unix µs.
    next_cron_us: u64,
    /// CLIENT ID → slab key, to route deliveries (pub/sub, woken blocked clients).
    ids: HashMap<u64, usize>,
    /// Scratch vector for draining the engine's deliveries.
    deliveries: Vec<Delivery>,
}

impl EventLoop {
    pub fn new(listener: TcpListener, engine: Engine) -> io::Result<EventLoop> {
        let poll = Poll::new()?;
        let mut listener = listener;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let mut signals = Signals::new([SIGTERM, SIGINT])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        Ok(EventLoop {
            poll,
            listener,
            signals,
            conns: Slab::new(),
            engine,
            next_client_id: 1,
            argv: Vec::new(),
            queued: Vec::new(),
            accept_backlog: false,
            accept_retry: false,
            rss: RssReader::new(),
            next_cron_us: 0,
            ids: HashMap::new(),
            deliveries: Vec::new(),
        })
    }

    fn cron_period_us(&self) -> u64 {
        1_000_000 / u64::from(self.engine.config.hz.clamp(1, MAX_HZ))
    }

    /// Runs until SIGTERM or SIGINT.
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut now = host::now_us();
        self.next_cron_us = now + self.cron_period_us();
        loop {
            let timeout = if !self.queued.is_empty() || self.accept_backlog {
                Duration::ZERO
            } else {
                // Wake for the next tick, or earlier for a blocked client's timeout.
                let due = match self.engine.next_deadline_us() {
                    Some(d) => d.min(self.next_cron_us),
                    None => self.next_cron_us,
                };
                Duration::from_micros(due.saturating_sub(now))
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if interrupted(&e) {
                    continue;
                }
                return Err(e);
            }
            now = host::now_us();

            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(now),
                    SIGNALS => {
                        if let Some(sig) = self.signals.pending().next() {
                            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                            info!("Received {name} scheduling shutdown...");
                            return Ok(());
                        }
                    }
                    Token(key) => self.on_conn_event(key, event, now),
                }
            }

            if self.accept_backlog {
                self.accept(now);
            }
            let queued = std::mem::take(&mut self.queued);
            for &key in &queued {
                if let Some(conn) = self.conns.get_mut(key)
                    && conn.queued
                {
                    conn.queued = false;
                    self.serve(key, now);
                }
            }
            // Give the allocation back for the next iteration.
            if self.queued.is_empty() {
                self.queued = queued;
                self.queued.clear();
            }

            if self.engine.next_deadline_us().is_some_and(|d| now >= d) {
                self.engine.timeouts(now);
                self.route_deliveries();
            }
            if now >= self.next_cron_us {
                self.cron(now);
                // Skip missed ticks after a stall instead of running them back to back.
                self.next_cron_us = (self.next_cron_us + self.cron_period_us()).max(now);
            }
        }
    }

    /// One timer tick: engine background work, host figures, buffer housekeeping.
    fn cron(&mut self, now: u64) {
        self.engine.cron(now);
        crate::snapshot::cron(&mut self.engine, now);
        self.route_deliveries();
        if let Some(rss) = self.rss.rss_bytes() {
            self.engine.host.rss_bytes = rss;
        }
        for (_, conn) in self.conns.iter_mut() {
            conn.shrink_idle_buffers(now);
        }
        if self.accept_retry {
            self.accept_retry = false;
            self.accept(now);
        }
    }

    fn accept(&mut self, now: u64) {
        for _ in 0..ACCEPT_BATCH {
            match self.listener.accept() {
                Ok((stream, _peer)) => self.add_conn(stream, now),
                Err(e) if would_block(&e) => {
                    self.accept_backlog = false;
                    return;
                }
                Err(e) if interrupted(&e) => {}
                // The peer gave up before we accepted: nothing to do.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: retrying at once would spin; wait for a tick.
                    warn!("Error accepting a client connection: {e}");
                    self.accept_backlog = false;
                    self.accept_retry = true;
                    return;
                }
            }
        }
        self.accept_backlog = true;
    }

    fn add_conn(&mut self, mut stream: TcpStream, now: u64) {
        self.engine.net.total_connections_received += 1;
        if self.conns.len() >= MAX_CLIENTS {
            self.engine.net.rejected_connections += 1;
            // Best effort, as Redis does (`acceptCommonHandler`); the socket is new and empty.
            let _ = stream.write(b"-ERR max number of clients reached\r\n");
            return;
        }
        // Replies go out as soon as they are written; Nagle would add up to 40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            debug!("TCP_NODELAY: {e}");
        }
        let addr = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let laddr = stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(key), Interest::READABLE)
        {
            warn!("Error registering a client connection: {e}");
            return;
        }
        let client = Client {
            id: self.next_client_id,
            addr,
            laddr,
            fd: i64::from(stream.as_raw_fd()),
            created_us: now,
            last_cmd_us: now,
            ..Client::default()
        };
        self.next_client_id += 1;
        self.ids.insert(client.id, key);
        debug!("Accepted {} (id={})", client.addr, client.id);
        entry.insert(Conn::new(stream, client, &self.engine));
        self.engine.host.connected_clients = self.conns.len() as u64;
    }

    fn on_conn_event(&mut self, key: usize, event: &Event, now: u64) {
        // Unknown tokens (a connection closed earlier in this batch) are ignored.
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            conn.readable = true;
        }
        if event.is_read_closed() || event.is_error() {
            // The FIN or error may sit behind data in the same edge: read until the read that
            // reports it, since a short read would otherwise end the batch and no edge follows.
            conn.hangup = true;
        }
        self.serve(key, now);
    }

    /// Runs buffered requests, reads and runs more, then writes the replies once.
    fn serve(&mut self, key: usize, now: u64) {
        let result = self.serve_inner(key, now);
        if let Some(conn) = self.conns.get_mut(key) {
            let net = &mut self.engine.net;
            net.total_net_input_bytes += std::mem::take(&mut conn.bytes_in);
            net.total_net_output_bytes += std::mem::take(&mut conn.bytes_out);
        }
        if let Err(why) = result {
            self.close(key, why);
        }
    }

    fn serve_inner(&mut self, key: usize, now: u64) -> Result<(), Disconnect> {
        let mut budget = READ_BUDGET_PER_TURN;
        // The last write attempt found the send buffer full: writing again now would only
        // return WouldBlock.
        let mut socket_full = false;
        loop {
            let conn = &mut self.conns[key];
            match conn.execute(&mut self.engine, now, &mut self.argv) {
                Batch::ClientList => {
                    self.reply_client_list(key, now);
                    continue;
                }
                Batch::Throttled => {
                    conn.flush().map_err(Disconnect::Io)?;
                    if conn.throttled() {
                        socket_full = true;
                        break; // resume on WRITABLE
                    }
                    continue;
                }
                Batch::Closing => break,
                Batch::Deliveries => {
                    self.route_deliveries();
                    continue;
                }
                // A parked client is still read (into its query buffer, bounded), so a peer
                // that disconnects while blocked is noticed and its state freed.
                Batch::NeedInput | Batch::Blocked => {}
            }
            if conn.peer_closed {
                conn.closing = Some(CloseReason::PeerClosed);
                break;
            }
            if !conn.readable {
                break;
            }
            if budget == 0 {
                if !conn.queued {
                    conn.queued = true;
                    self.queued.push(key);
                }
                break;
            }
            match conn.read() {
                ReadOutcome::Data { n, more } => {
                    budget = budget.saturating_sub(n);
                    conn.readable = more || conn.hangup;
                }
                ReadOutcome::Drained => conn.readable = false,
                ReadOutcome::Eof => {
                    conn.readable = false;
                    conn.peer_closed = true;
                }
                ReadOutcome::QueryBufLimit => return Err(Disconnect::QueryBufLimit),
                ReadOutcome::Error(e) => return Err(Disconnect::Io(e)),
            }
        }

        let conn = &mut self.conns[key];
        if !socket_full {
            conn.flush().map_err(Disconnect::Io)?;
        }
        // The keychange feed bounds each subscriber's unsent output (a no-op for others).
        self.engine
            .set_pending_output(conn.client.id, conn.out_pending());
        let pending = conn.out_pending() > 0;
        if let Some(reason) = conn.closing
            && !pending
        {
            return Err(Disconnect::Done(reason));
        }
        if pending != conn.write_interest {
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll
                .registry()
                .reregister(&mut conn.stream, Token(key), interest)
                .map_err(Disconnect::Io)?;
            conn.write_interest = pending;
        }
        Ok(())
    }

    /// CLIENT LIST: one `client_info_line` per connection, ascending client id, each ending
    /// in "\n", as one verbatim string (Redis `clientsCommand` → `getAllClientsInfoString`).
    fn reply_client_list(&mut self, key: usize, now: u64) {
        let mut lines: Vec<(u64, String)> = self
            .conns
            .iter()
            .map(|(_, c)| (c.client.id, self.engine.client_info_line(&c.client, now)))
            .collect();
        lines.sort_unstable_by_key(|&(id, _)| id);
        let mut text = String::with_capacity(lines.iter().map(|(_, l)| l.len() + 1).sum());
        for (_, line) in &lines {
            text.push_str(line);
            text.push('\n');
        }
        self.conns[key].reply_verbatim(text.as_bytes());
    }

    /// Appends the engine's queued deliveries to their connections' output, in order, and
    /// queues those connections so the next pass flushes them (and, for a client just
    /// unblocked, runs the requests it sent while parked). Deliveries for closed
    /// connections are dropped.
    fn route_deliveries(&mut self) {
        if !self.engine.has_deliveries() {
            return;
        }
        let mut deliveries = std::mem::take(&mut self.deliveries);
        self.engine.take_deliveries(&mut deliveries);
        for d in deliveries.drain(..) {
            let Some(&key) = self.ids.get(&d.client_id) else {
                continue;
            };
            let conn = &mut self.conns[key];
            conn.push_output(&d.bytes);
            if d.unblock {
                conn.blocked = false;
            }
            if !conn.queued {
                conn.queued = true;
                self.queued.push(key);
            }
        }
        self.deliveries = deliveries;
    }

    fn close(&mut self, key: usize, why: Disconnect) {
        let mut conn = self.conns.remove(key);
        self.ids.remove(&conn.client.id);
        self.engine.client_closed(conn.client.id);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        match &why {
            Disconnect::QueryBufLimit => warn!(
                "Closing client id={} addr={} that reached max query buffer length ({} bytes)",
                conn.client.id,
                conn.client.addr,
                conn.in_pending()
            ),
            Disconnect::Io(e) => debug!("Client id={} closed: {e}", conn.client.id),
            Disconnect::Done(reason) => debug!("Client id={} closed: {reason:?}", conn.client.id),
        }
        self.engine.host.connected_clients = self.conns.len() as u64;
    }
}
