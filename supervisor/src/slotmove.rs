//! Moving slots between running engines, the way `redis-cli --cluster reshard` does
//! (redis 7.0 `src/redis-cli.c`, `clusterManagerMoveSlot`), plus what a fleet without
//! replicas needs so that a `kill -9` of either engine loses no key. Used by `recached resize`
//! (`crate::resize`); works against any Redis Cluster 7.0 node (the unit test runs it against
//! `redis-server --cluster-enabled yes`).
//!
//! # One slot ([`Mover::move_slot`])
//!
//! 1. `CLUSTER SETSLOT s IMPORTING <src>` on the destination, then `SETSLOT s MIGRATING <dst>`
//!    on the source: from now on the source answers `-ASK` for keys of `s` it no longer has,
//!    and the destination accepts them after `ASKING`.
//! 2. For every database that holds keys (`INFO keyspace`, read after step 1, so a key created
//!    later goes to the destination through `-ASK`): `SELECT db`, then
//!    `CLUSTER GETKEYSINSLOT s 100` and `MIGRATE host port "" db timeout KEYS …` until empty.
//!    Between two recached engines each batch is **relayed** instead of MIGRATEd
//!    (`slotmove_relay.rs`): locked and read on the source (`TXLOCK … DUMP`), restored on the
//!    destination by the mover, then deleted on the source (`SLOTHANDOFF`), so the source
//!    keeps serving while the destination restores.
//! 3. `SETSLOT s NODE <dst>` on the destination first (the commit point, redis-cli's order:
//!    issue redis#7116), then on the source, then on every other engine (pipelined).
//!
//! Between two recached engines, neighbouring slots go through these steps 16 at a time,
//! each step pipelined over the group (`slotmove_group.rs`, [`GROUP`]).
//!
//! # No key lost to a `kill -9`
//!
//! Engines persist by snapshot only, so a key MIGRATE moved lives only in the destination's
//! memory until the destination saves. Therefore, before each MIGRATE the mover takes a
//! **backup** of the batch (`DUMP` and `PEXPIRETIME` of each key, pipelined), kept in its own
//! memory until the destination has completed a save (a **checkpoint**, a `BGSAVE` that began
//! after the keys arrived: every [`CHECKPOINT_BYTES`] of backups and at the end; the engine
//! forks and keeps serving, where a `SAVE` would stop it for the whole dataset). Every connection remembers the engine's `run_id`;
//! a reconnect that finds another `run_id` means the engine restarted (from its snapshot): the
//! backups of keys moved to it are restored (`ASKING` + `RESTORE … ABSTTL`; `BUSYKEY` = the
//! engine's snapshot already had the key, which is then at least as new, and it is kept).
//!
//! A source that restarted may hold stale copies of keys it had already handed over (its
//! snapshot predates the move). The **destination's copy wins**: a `BUSYKEY` from MIGRATE
//! makes the mover `DEL` the source's copy, and [`Mover::sweep`] (run at the start and end of
//! every resize) deletes or moves every key that sits on an engine which does not own its slot
//! (it opens the slot as `IMPORTING` on that engine, so `ASKING` lets it touch the key,
//! then `SETSLOT STABLE`). A key only on the non-owner is moved to the owner, never dropped.
//! Writes an engine accepted after its last snapshot are lost by a `kill -9` as always
//! (docs/persistence.md); `resize` saves every engine before it moves anything.
//!
//! # Pace
//!
//! A move competes with the clients for the engines and the machine's cores: at full speed
//! (`pace` 1.0, redis-cli's way) the source and destination are busy back to back, and on a
//! host whose cores already serve clients their latency rises tenfold and more
//! (`scripts/bench-reshard.sh`). With a [`Pacer`] of pace `p` < 1 the mover, after each slot
//! or group (its batches and its commit) and each `SCAN` page, sleeps `(1 − p) / p` times as
//! long as the work took, so its requests keep the engines busy about `p` of the time. Moving
//! one slot, it never sleeps in the middle of it: the source holds the slot meanwhile (`SLOTHOLD`,
//! [`Mover::hold`]), and clients of its moved keys wait for the commit. A group rests after
//! each of its steps (`slotmove_group.rs` says why), its slots held meanwhile; never while a
//! relayed batch holds its keys' locks.
//!
//! Every wait is bounded: connects and replies by [`IO_TIMEOUT`], a restarted engine by
//! [`RECONNECT_TIMEOUT`], a save by [`SAVE_TIMEOUT`], a slot by [`SLOT_ATTEMPTS`] attempts.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use resp::Value;

use crate::reply::ReplyReader;

/// Connect, write and read timeout of one command (MIGRATE of a batch included).
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a lost engine may take to come back (the supervisor restarts it with backoff and
/// it loads its snapshot) before the resize gives up.
pub const RECONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Keys per `GETKEYSINSLOT` / `MIGRATE` round (redis-cli's `--cluster-pipeline` default is 10).
pub const BATCH: usize = 100;
/// Longest a source holds a slot it moves (`SLOTHOLD`, see `Mover::hold`), ms: a slot of
/// ordinary size moves in about a millisecond; a huge one (a hash tag holding most keys) may
/// outlast it, and then gets Redis's `-ASK` for the rest of its move.
const HOLD_MS: &str = "2000";
/// MIGRATE's own timeout, ms (redis-cli's default 60000 is for slow links; this is loopback).
const MIGRATE_TIMEOUT_MS: &str = "10000";
/// Bytes of backups (keys and DUMP payloads) kept for one destination before a checkpoint
/// (a background save there, then the backups are dropped): bounds the mover's memory. Each
/// checkpoint writes the destination's whole dataset, so a bound in bytes rather than in keys
/// keeps small-value moves from saving over and over.
pub const CHECKPOINT_BYTES: usize = 64 << 20;
/// How long one background save may take.
const SAVE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a node's list of databases holding keys is reused between slots
/// ([`Node::nonempty_dbs_reused`]).
const DBS_REUSE: Duration = Duration::from_millis(100);
/// How often a background save's progress is polled (`INFO persistence`).
const SAVE_POLL: Duration = Duration::from_millis(10);
/// Attempts at one slot before the resize stops (each failed attempt reconnects first).
pub const SLOT_ATTEMPTS: u32 = 5;
/// A reply larger than this is refused.
const MAX_REPLY: usize = 512 << 20;

pub type Result<T> = std::result::Result<T, String>;

/// One engine: its address, node id and a connection that survives restarts.
pub struct Node {
    pub host: String,
    pub port: u16,
    pub id: String,
    /// `AUTH …` sent first on every connection, if the fleet needs one.
    login: Option<Vec<u8>>,
    conn: Option<(TcpStream, ReplyReader<TcpStream>)>,
    /// The database the connection has selected.
    db: usize,
    /// `run_id` of the process last connected to; another one = it restarted.
    run_id: String,
    /// Bumped whenever `run_id` changes (backups remember the generation they went to).
    pub generation: u32,
    /// The last [`Node::nonempty_dbs`] answer and when it came ([`Node::nonempty_dbs_reused`]).
    dbs_seen: Option<(Instant, Vec<usize>)>,
    /// A recached engine (`INFO server` has `recached_version`): batches between two of
    /// them are relayed (`slotmove_relay.rs`) instead of MIGRATEd.
    pub recached: bool,
    /// Its slot index was built in steps on this connection (`Mover::build_slot_index`).
    pub slot_keys_ready: bool,
}

impl Node {
    pub fn new(host: &str, port: u16, login: Option<Vec<u8>>) -> Node {
        Node {
            host: host.to_string(),
            port,
            id: String::new(),
            login,
            conn: None,
            db: 0,
            run_id: String::new(),
            generation: 0,
            dbs_seen: None,
            recached: false,
            slot_keys_ready: false,
        }
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Connects if not connected, retrying until [`RECONNECT_TIMEOUT`]; reads `run_id` and
    /// `CLUSTER MYID`. Returns whether the engine restarted since the last connection.
    pub fn ensure(&mut self) -> Result<bool> {
        if self.conn.is_some() {
            return Ok(false);
        }
        let deadline = Instant::now() + RECONNECT_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.connect_once() {
                Ok(restarted) => return Ok(restarted),
                Err(e) => last = e,
            }
            self.conn = None;
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{}: not reachable for {}s: {last}",
            self.addr(),
            RECONNECT_TIMEOUT.as_secs()
        ))
    }

    fn connect_once(&mut self) -> Result<bool> {
        let s = recached_net::listen::connect(&self.host, self.port, IO_TIMEOUT)
            .map_err(|e| e.to_string())?;
        let _ = s.set_read_timeout(Some(IO_TIMEOUT));
        let _ = s.set_write_timeout(Some(IO_TIMEOUT));
        let _ = s.set_nodelay(true);
        let r = s.try_clone().map_err(|e| e.to_string())?;
        self.conn = Some((s, ReplyReader::new(r, MAX_REPLY)));
        self.db = 0;
        if let Some(login) = self.login.clone() {
            self.raw(&login, 1)?;
        }
        // An engine still loading its snapshot answers -LOADING: wait for it like a connect.
        let info = bulk_text(&self.call(&["INFO", "server"])?)?;
        let run_id = info_field(&info, "run_id").unwrap_or_default();
        self.recached = info_field(&info, "recached_version").is_some();
        self.id = bulk_text(&self.call(&["CLUSTER", "MYID"])?)?;
        let restarted = !self.run_id.is_empty() && self.run_id != run_id;
        if restarted || self.run_id.is_empty() {
            self.generation += u32::from(restarted);
            self.run_id = run_id;
        }
        Ok(restarted)
    }

    /// Drops the connection (and whatever it holds on the engine: its key locks).
    pub fn disconnect(&mut self) {
        self.conn = None;
        self.slot_keys_ready = false;
    }

    /// Writes `bytes` (`n` requests) and reads `n` replies. An I/O error drops the connection.
    fn raw(&mut self, bytes: &[u8], n: usize) -> Result<Vec<Value>> {
        let addr = self.addr();
        let Some((w, r)) = self.conn.as_mut() else {
            return Err(format!("{addr}: not connected"));
        };
        let res = (|| {
            w.write_all(bytes)?;
            (0..n)
                .map(|_| r.read())
                .collect::<std::io::Result<Vec<_>>>()
        })();
        match res {
            Ok(v) => {
                if let Some(e) = v.iter().find_map(|v| match v {
                    Value::Error(e) if e.starts_with(b"LOADING") => Some(e),
                    _ => None,
                }) {
                    self.conn = None;
                    return Err(format!("{addr}: {}", String::from_utf8_lossy(e)));
                }
                Ok(v)
            }
            Err(e) => {
                self.conn = None;
                Err(format!("{addr}: {e}"))
            }
        }
    }

    /// Writes encoded requests; their replies are read by [`Node::raw`] with no bytes.
    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let addr = self.addr();
        let Some((w, _)) = self.conn.as_mut() else {
            return Err(format!("{addr}: not connected"));
        };
        w.write_all(bytes).map_err(|e| {
            self.conn = None;
            format!("{addr}: {e}")
        })
    }

    /// One command; its reply, which may be an error reply (`Value::Error`).
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value> {
        let mut out = Vec::new();
        resp::encode_request(&mut out, args);
        Ok(self.raw(&out, 1)?.remove(0))
    }

    /// Several commands in one write; their replies in order.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Result<Vec<Value>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for c in cmds {
            resp::encode_request(&mut out, c);
        }
        self.raw(&out, cmds.len())
    }

    /// One command that must not answer an error.
    pub fn ok<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value> {
        match self.call(args)? {
            Value::Error(e) => Err(format!(
                "{}: {}: {}",
                self.addr(),
                args.iter()
                    .map(|a| String::from_utf8_lossy(a.as_ref()).into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                String::from_utf8_lossy(&e)
            )),
            v => Ok(v),
        }
    }

    /// A snapshot holding every write this engine acknowledged before the call, taken by a
    /// fork (`BGSAVE`) so the engine keeps serving: waits out a background save already
    /// running (it may have forked before those writes), starts one, and waits until
    /// `rdb_saves` has grown with `rdb_last_bgsave_status:ok` (`INFO persistence`, redis 7.0's
    /// fields). Bounded by [`SAVE_TIMEOUT`].
    pub fn save_in_background(&mut self) -> Result<()> {
        let deadline = Instant::now() + SAVE_TIMEOUT;
        let persistence = |n: &mut Node| -> Result<(bool, u64, bool)> {
            let info = bulk_text(&n.ok(&["INFO", "persistence"])?)?;
            let field = |name: &str| info_field(&info, name).unwrap_or_default();
            Ok((
                field("rdb_bgsave_in_progress") == "1",
                field("rdb_saves").parse().unwrap_or(0),
                field("rdb_last_bgsave_status") == "ok",
            ))
        };
        let wait_idle = |n: &mut Node| -> Result<(u64, bool)> {
            loop {
                let (running, saves, ok) = persistence(n)?;
                if !running {
                    return Ok((saves, ok));
                }
                if Instant::now() > deadline {
                    return Err(format!("{}: a background save did not end", n.addr()));
                }
                std::thread::sleep(SAVE_POLL);
            }
        };
        loop {
            let (before, _) = wait_idle(self)?;
            match self.call(&["BGSAVE"])? {
                // A periodic save forked between the two requests: wait for it, then ours.
                Value::Error(e) if e.windows(11).any(|w| w == b"in progress") => continue,
                Value::Error(e) => {
                    return Err(format!(
                        "{}: BGSAVE: {}",
                        self.addr(),
                        String::from_utf8_lossy(&e)
                    ));
                }
                _ => {}
            }
            let (after, ok) = wait_idle(self)?;
            return if after > before && ok {
                Ok(())
            } else {
                Err(format!(
                    "{}: the background save failed (rdb_last_bgsave_status:err; see its log)",
                    self.addr()
                ))
            };
        }
    }

    /// `SELECT db` unless already selected. Database 0 is never selected explicitly, so a
    /// Redis Cluster node (which refuses SELECT) works for database 0.
    fn select(&mut self, db: usize) -> Result<()> {
        if self.db != db {
            self.ok(&["SELECT", &db.to_string()])?;
            self.db = db;
        }
        Ok(())
    }

    /// [`Node::nonempty_dbs`], or its last answer if younger than [`DBS_REUSE`]: one
    /// `INFO keyspace` per many slots instead of one per slot. A database that got its first
    /// keys meanwhile is caught at the slot's commit: the source refuses `SETSLOT NODE` while
    /// it holds keys of the slot (redis's rule), and the retry asks afresh.
    pub fn nonempty_dbs_reused(&mut self) -> Result<Vec<usize>> {
        if let Some((at, dbs)) = &self.dbs_seen
            && at.elapsed() < DBS_REUSE
        {
            return Ok(dbs.clone());
        }
        self.nonempty_dbs()
    }

    /// Databases holding keys now (`INFO keyspace`: `db3:keys=…`).
    pub fn nonempty_dbs(&mut self) -> Result<Vec<usize>> {
        let info = bulk_text(&self.ok(&["INFO", "keyspace"])?)?;
        let dbs: Vec<usize> = info
            .lines()
            .filter_map(|l| {
                let (db, rest) = l.strip_prefix("db")?.split_once(':')?;
                let keys: u64 = rest
                    .strip_prefix("keys=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                (keys > 0).then(|| db.parse().ok()).flatten()
            })
            .collect();
        self.dbs_seen = Some((Instant::now(), dbs.clone()));
        Ok(dbs)
    }

    /// This node's own view: `CLUSTER NODES`.
    pub fn cluster_nodes(&mut self) -> Result<ClusterView> {
        let text = bulk_text(&self.ok(&["CLUSTER", "NODES"])?)?;
        Ok(ClusterView::parse(&text))
    }
}

/// The text of a bulk, simple or verbatim reply.
pub fn bulk_text(v: &Value) -> Result<String> {
    match v {
        Value::Bulk(b) | Value::Simple(b) | Value::Verbatim { text: b, .. } => {
            Ok(String::from_utf8_lossy(b).into_owned())
        }
        Value::Error(e) => Err(String::from_utf8_lossy(e).into_owned()),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// `name:value` from an INFO text.
pub fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLine {
    pub id: String,
    /// `host:port` (the `@busport` cut off).
    pub addr: String,
    pub myself: bool,
    pub epoch: u64,
    /// Slots this line says the node owns.
    pub slots: Vec<u16>,
    /// `[s->-id]`: migrating to `id` (on the myself line only).
    pub migrating: Vec<(u16, String)>,
    /// `[s-<-id]`: importing from `id`.
    pub importing: Vec<(u16, String)>,
}

/// A parsed `CLUSTER NODES` reply.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub nodes: Vec<NodeLine>,
}

impl ClusterView {
    pub fn parse(text: &str) -> ClusterView {
        let mut nodes = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                continue;
            }
            let mut n = NodeLine {
                id: f[0].to_string(),
                addr: f[1].split('@').next().unwrap_or("").to_string(),
                myself: f[2].split(',').any(|x| x == "myself"),
                epoch: f[6].parse().unwrap_or(0),
                ..NodeLine::default()
            };
            for s in &f[8..] {
                if let Some(inner) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                    if let Some((slot, id)) = inner.split_once("->-") {
                        if let Ok(slot) = slot.parse() {
                            n.migrating.push((slot, id.to_string()));
                        }
                    } else if let Some((slot, id)) = inner.split_once("-<-")
                        && let Ok(slot) = slot.parse()
                    {
                        n.importing.push((slot, id.to_string()));
                    }
                    continue;
                }
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    n.slots.extend(a..=b);
                }
            }
            nodes.push(n);
        }
        ClusterView { nodes }
    }

    pub fn myself(&self) -> Option<&NodeLine> {
        self.nodes.iter().find(|n| n.myself)
    }
}

/// A key moved to a destination and not yet covered by a checkpoint there.
struct Backup {
    db: usize,
    key: Vec<u8>,
    /// Unix ms; 0 = no TTL.
    expire_at_ms: i64,
    payload: Vec<u8>,
}

/// What a resize did, for its report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub slots: usize,
    pub keys: u64,
    /// Keys deleted from a source because the destination already had them.
    pub kept_on_destination: u64,
    /// Keys restored from the mover's backups into a restarted destination.
    pub restored: u64,
    /// Keys found on an engine that does not own their slot, and settled by `sweep`.
    pub strays: u64,
    /// Slot attempts that failed and were retried.
    pub retries: u64,
}

/// The engines, the backups and the counters of one resize.
pub struct Mover {
    pub nodes: Vec<Node>,
    /// Per destination node index: backups since its last checkpoint, and the generation of
    /// the engine they are in.
    backups: HashMap<usize, (u32, Vec<Backup>, usize)>,
    pub totals: Totals,
    /// Full speed unless the caller sets a pace.
    pub pacer: Pacer,
}

/// Sleeps between units of work so that they take about `pace` of the wall time (module docs,
/// "Pace"). The work clock runs from the end of one rest to the start of the next.
pub struct Pacer {
    pace: f64,
    since: Instant,
}

impl Pacer {
    /// `pace` in (0, 1]; 1 (or more) never sleeps.
    pub fn new(pace: f64) -> Pacer {
        Pacer {
            pace: pace.clamp(0.01, 1.0),
            since: Instant::now(),
        }
    }

    /// Ends a unit of work: sleeps `(1 − pace) / pace` times its duration.
    pub fn rest(&mut self) {
        if self.pace < 1.0 {
            let busy = self.since.elapsed();
            std::thread::sleep(busy.mul_f64((1.0 - self.pace) / self.pace));
        }
        self.since = Instant::now();
    }
}

/// How the keys of a slot are taken from a node in [`Mover::drain`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    /// The node owns the slot and has it MIGRATING: plain commands.
    Migrating,
    /// The node does not own the slot (stray keys): it has the slot IMPORTING, so every
    /// command is prefixed with ASKING.
    Stray,
}

impl Mover {
    pub fn new(nodes: Vec<Node>) -> Mover {
        Mover {
            nodes,
            backups: HashMap::new(),
            totals: Totals::default(),
            pacer: Pacer::new(1.0),
        }
    }

    /// Connects to node `i` (waiting for a restart to finish); if it restarted, restores the
    /// backups of the keys moved to it since its last checkpoint.
    pub fn ensure(&mut self, i: usize) -> Result<()> {
        if self.nodes[i].ensure()? {
            log::warn!(
                "{} restarted: restoring the keys moved to it since its last save",
                self.nodes[i].addr()
            );
            self.restore_backups(i)?;
        }
        Ok(())
    }

    pub fn ensure_all(&mut self) -> Result<()> {
        (0..self.nodes.len()).try_for_each(|i| self.ensure(i))
    }

    fn restore_backups(&mut self, i: usize) -> Result<()> {
        let Some((_, list, _)) = self.backups.get(&i) else {
            return Ok(());
        };
        let mut by_db: HashMap<usize, Vec<Vec<Vec<u8>>>> = HashMap::new();
        for b in list {
            let cmd = by_db.entry(b.db).or_default();
            cmd.push(vec![b"ASKING".to_vec()]);
            cmd.push(vec![
                b"RESTORE".to_vec(),
                b.key.clone(),
                b.expire_at_ms.to_string().into_bytes(),
                b.payload.clone(),
                b"ABSTTL".to_vec(),
            ]);
        }
        let mut restored = 0;
        for (db, cmds) in by_db {
            self.nodes[i].select(db)?;
            for chunk in cmds.chunks(2 * BATCH) {
                for v in self.nodes[i].pipeline(chunk)? {
                    match v {
                        Value::Simple(s) if s == b"OK" => restored += 1,
                        Value::Simple(_) => {}
                        Value::Error(e) if e.starts_with(b"BUSYKEY") => {}
                        Value::Error(e) => {
                            return Err(format!(
                                "{}: restoring a moved key: {}",
                                self.nodes[i].addr(),
                                String::from_utf8_lossy(&e)
                            ));
                        }
                        _ => {}
                    }
                }
            }
        }
        // Re-tagged: they are in this generation now, until its next checkpoint.
        let generation = self.nodes[i].generation;
        if let Some(entry) = self.backups.get_mut(&i) {
            entry.0 = generation;
        }
        self.totals.restored += restored;
        Ok(())
    }

    /// A background save on node `i` if it holds backed-up keys ([`Node::save_in_background`]),
    /// then drops them. A restart between the keys' arrival and the save is caught by the
    /// reconnect (another `run_id`), which restores them first.
    pub fn checkpoint(&mut self, i: usize) -> Result<()> {
        if self.backups.get(&i).is_none_or(|(_, l, _)| l.is_empty()) {
            return Ok(());
        }
        let mut last = String::new();
        for _ in 0..SLOT_ATTEMPTS {
            self.ensure(i)?;
            let generation = self.nodes[i].generation;
            match self.nodes[i].save_in_background() {
                Ok(())
                    if self
                        .backups
                        .get(&i)
                        .is_some_and(|(g, _, _)| *g == generation) =>
                {
                    self.backups.remove(&i);
                    return Ok(());
                }
                Ok(()) => {}
                // The engine refused or failed the save: no point in asking again.
                Err(e) if self.nodes[i].conn.is_some() => return Err(e),
                // Lost the engine: reconnect (restores the backups) and save again.
                Err(e) => last = e,
            }
        }
        Err(format!(
            "{}: the save kept failing: {last}",
            self.nodes[i].addr()
        ))
    }

    /// [`Mover::checkpoint`] of `dst` once its backups reach [`CHECKPOINT_BYTES`].
    fn checkpoint_if_due(&mut self, dst: usize) -> Result<()> {
        if self
            .backups
            .get(&dst)
            .is_some_and(|(_, _, bytes)| *bytes >= CHECKPOINT_BYTES)
        {
            self.checkpoint(dst)?;
        }
        Ok(())
    }

    pub fn checkpoint_all(&mut self) -> Result<()> {
        (0..self.nodes.len()).try_for_each(|i| self.checkpoint(i))
    }

    /// Moves slot `s` from node `src` to node `dst` (see the module docs), retrying after a
    /// lost connection. Returns the keys moved.
    pub fn move_slot(&mut self, s: u16, src: usize, dst: usize) -> Result<u64> {
        self.move_slot_from(s, src, dst, true)
    }

    /// [`Mover::move_slot`]; `planned`: the source owns the slot and the destination does not,
    /// as the caller read them (else the first attempt asks both, as a retry does).
    fn move_slot_from(&mut self, s: u16, src: usize, dst: usize, planned: bool) -> Result<u64> {
        let mut last = String::new();
        for attempt in 0..SLOT_ATTEMPTS {
            if attempt > 0 {
                self.totals.retries += 1;
                log::warn!("slot {s}: attempt {} after: {last}", attempt + 1);
            }
            let r = self.try_move_slot(s, src, dst, planned && attempt == 0);
            self.pacer.rest();
            match r {
                Ok(n) => {
                    self.totals.slots += 1;
                    self.totals.keys += n;
                    self.checkpoint_if_due(dst)?;
                    return Ok(n);
                }
                Err(e) => last = e,
            }
            // Reconnect both (bounded); a restarted destination gets its backups back.
            self.ensure(src)?;
            self.ensure(dst)?;
        }
        Err(format!(
            "slot {s}: giving up after {SLOT_ATTEMPTS} attempts: {last}"
        ))
    }

    /// `first`: the plan's view holds (the source owns the slot, the destination does not),
    /// so the two `CLUSTER NODES` round trips are saved; a retry asks both.
    fn try_move_slot(&mut self, s: u16, src: usize, dst: usize, first: bool) -> Result<u64> {
        self.ensure(src)?;
        self.ensure(dst)?;
        let slot = s.to_string();
        let (src_id, dst_id) = (self.nodes[src].id.clone(), self.nodes[dst].id.clone());
        let owns = |v: ClusterView| v.myself().is_some_and(|m| m.slots.contains(&s));
        let (dst_owns, src_owns) = if first {
            (false, true)
        } else {
            (
                owns(self.nodes[dst].cluster_nodes()?),
                owns(self.nodes[src].cluster_nodes()?),
            )
        };
        // A retry after the destination's commit (step 3) finds the slot owned there: what
        // the source still holds is then either still its own (it had not been told yet:
        // MIGRATING again) or stray (settled through IMPORTING + ASKING).
        let mode = if src_owns || !dst_owns {
            if !dst_owns {
                self.nodes[dst].ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])?;
            }
            self.nodes[src].ok(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])?;
            self.hold(src, &slot);
            From::Migrating
        } else {
            self.nodes[src].ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &dst_id])?;
            From::Stray
        };
        let moved = self.drain(s, src, dst, mode, first)?;
        if mode == From::Stray {
            self.nodes[src].ok(&["CLUSTER", "SETSLOT", &slot, "STABLE"])?;
        }
        self.assign(s, dst)?;
        Ok(moved)
    }

    /// `SLOTHOLD s` on the source of a move: until the slot's commit, a smart client's
    /// request for a key already moved waits there instead of getting `-ASK` (which a client
    /// that does not know the destination yet cannot follow: redis-py; engine
    /// `cmd/cluster/hold.rs`), then gets `-MOVED`. Ends with the source's `SETSLOT NODE`, or
    /// after [`HOLD_MS`]. An engine that refuses it only leaves Redis's `-ASK` in place.
    fn hold(&mut self, src: usize, slot: &str) {
        if let Err(e) = self.nodes[src].ok(&["SLOTHOLD", slot, HOLD_MS]) {
            log::debug!("slot {slot}: no hold: {e}");
        }
    }

    /// `SETSLOT s NODE <owner>` on the owner first, then every other node (pipelined).
    pub fn assign(&mut self, s: u16, owner: usize) -> Result<()> {
        self.assign_slots(&[s], owner)
    }

    /// [`Mover::assign`] of several slots: each node's requests in one write.
    pub fn assign_slots(&mut self, slots: &[u16], owner: usize) -> Result<()> {
        let id = self.nodes[owner].id.clone();
        let mut req = Vec::new();
        for s in slots {
            resp::encode_request(
                &mut req,
                &["CLUSTER", "SETSLOT", &s.to_string(), "NODE", &id],
            );
        }
        let slot = match slots {
            [s] => s.to_string(),
            _ => format!("{}…{}", slots[0], slots[slots.len() - 1]),
        };
        let fail = |n: &Node, e: &[u8]| {
            format!(
                "{}: CLUSTER SETSLOT {slot} NODE {id}: {}",
                n.addr(),
                String::from_utf8_lossy(e)
            )
        };
        for v in self.nodes[owner].raw(&req, slots.len())? {
            if let Value::Error(e) = v {
                return Err(fail(&self.nodes[owner], &e));
            }
        }
        // The others in parallel (each saves its nodes.conf before it answers): all the
        // requests first, then the replies.
        let others: Vec<usize> = (0..self.nodes.len()).filter(|&i| i != owner).collect();
        // Every reply of a request that was written is read, even after an error: a reply
        // left unread would be taken for the answer to the connection's next command.
        let mut first_err: Option<String> = None;
        let mut sent = Vec::with_capacity(others.len());
        for &i in &others {
            match self.ensure(i).and_then(|()| self.nodes[i].send(&req)) {
                Ok(()) => sent.push(i),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        for i in sent {
            match self.nodes[i].raw(&[], slots.len()) {
                Ok(replies) => {
                    if let Some(Value::Error(e)) =
                        replies.iter().find(|v| matches!(v, Value::Error(_)))
                    {
                        first_err.get_or_insert(fail(&self.nodes[i], e));
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Moves every key of slot `s` from `src` to `dst`, database by database; a key the
    /// destination already has is deleted from the source (the destination's copy wins).
    /// `reuse_dbs`: the source's list of databases holding keys may be a recent one (a
    /// slot's first attempt; see [`Node::nonempty_dbs_reused`]).
    fn drain(
        &mut self,
        s: u16,
        src: usize,
        dst: usize,
        mode: From,
        reuse_dbs: bool,
    ) -> Result<u64> {
        let slot = s.to_string();
        let (host, port) = (
            self.nodes[dst].host.clone(),
            self.nodes[dst].port.to_string(),
        );
        let asking = |cmd: Vec<Vec<u8>>| -> Vec<Vec<Vec<u8>>> {
            match mode {
                From::Stray => vec![vec![b"ASKING".to_vec()], cmd],
                From::Migrating => vec![cmd],
            }
        };
        let mut moved = 0;
        let dbs = if reuse_dbs {
            self.nodes[src].nonempty_dbs_reused()?
        } else {
            self.nodes[src].nonempty_dbs()?
        };
        for db in dbs {
            self.nodes[src].select(db)?;
            let mut rounds = 0usize;
            loop {
                rounds += 1;
                if rounds > 1_000_000 {
                    return Err(format!("slot {s}: keys keep arriving on the source"));
                }
                let keys = match self.nodes[src].ok(&[
                    "CLUSTER",
                    "GETKEYSINSLOT",
                    &slot,
                    &BATCH.to_string(),
                ])? {
                    Value::Array(a) => a,
                    other => return Err(format!("GETKEYSINSLOT: {other:?}")),
                };
                let keys: Vec<Vec<u8>> = keys
                    .into_iter()
                    .filter_map(|k| match k {
                        Value::Bulk(b) => Some(b),
                        _ => None,
                    })
                    .collect();
                if keys.is_empty() {
                    break;
                }
                // Fewer keys than asked for: the slot had no more in this database, and none
                // can appear on the source now (a write of a missing key of the slot is sent
                // to the destination: -ASK), so no GETKEYSINSLOT to see it empty. (A key left
                // behind anyway makes the source refuse the commit, and the slot is retried.)
                let last = keys.len() < BATCH;
                if mode == From::Migrating && self.can_relay(src, dst) {
                    moved += self.relay(src, dst, db, &keys)?;
                    if last {
                        break;
                    }
                    continue;
                }
                self.backup(src, dst, db, &keys, mode)?;
                let mut migrate: Vec<Vec<u8>> = [
                    "MIGRATE",
                    &host,
                    &port,
                    "",
                    &db.to_string(),
                    MIGRATE_TIMEOUT_MS,
                    "KEYS",
                ]
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect();
                migrate.extend(keys.iter().cloned());
                let reply = self.nodes[src].pipeline(&asking(migrate))?.pop();
                match reply {
                    Some(Value::Simple(_)) if last => {
                        moved += keys.len() as u64;
                        break;
                    }
                    Some(Value::Simple(_)) => moved += keys.len() as u64,
                    // Redis words it `ERR Target instance replied with error: BUSYKEY …`.
                    Some(Value::Error(e)) if e.windows(7).any(|w| w == b"BUSYKEY") => {
                        moved += self.settle_busy(src, dst, db, &keys, mode)?;
                    }
                    Some(Value::Error(e)) => {
                        return Err(format!(
                            "{}: MIGRATE slot {s}: {}",
                            self.nodes[src].addr(),
                            String::from_utf8_lossy(&e)
                        ));
                    }
                    other => return Err(format!("MIGRATE: {other:?}")),
                }
                // No rest here: the slot is held until its commit (`hold`); `move_slot`
                // rests after it.
            }
        }
        Ok(moved)
    }

    /// After a BUSYKEY: of `keys`, those still on the source are deleted there when the
    /// destination has them, else migrated one by one. Returns the keys that went over.
    fn settle_busy(
        &mut self,
        src: usize,
        dst: usize,
        db: usize,
        keys: &[Vec<u8>],
        mode: From,
    ) -> Result<u64> {
        self.nodes[dst].select(db)?;
        let mut moved = 0;
        for k in keys {
            let ask = |c: Vec<Vec<u8>>| -> Vec<Vec<Vec<u8>>> {
                match mode {
                    From::Stray => vec![vec![b"ASKING".to_vec()], c],
                    From::Migrating => vec![c],
                }
            };
            let on_src = self.nodes[src].pipeline(&ask(vec![b"EXISTS".to_vec(), k.clone()]))?;
            if on_src.last() != Some(&Value::Integer(1)) {
                moved += 1; // the MIGRATE took it before the busy key stopped it
                continue;
            }
            let on_dst = self.nodes[dst].pipeline(&[
                vec![b"ASKING".to_vec()],
                vec![b"EXISTS".to_vec(), k.clone()],
            ])?;
            if on_dst.last() == Some(&Value::Integer(1)) {
                self.nodes[src].pipeline(&ask(vec![b"DEL".to_vec(), k.clone()]))?;
                self.totals.kept_on_destination += 1;
            } else {
                let c: Vec<Vec<u8>> = [
                    "MIGRATE",
                    &self.nodes[dst].host.clone(),
                    &self.nodes[dst].port.to_string(),
                ]
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .chain([
                    k.clone(),
                    db.to_string().into_bytes(),
                    MIGRATE_TIMEOUT_MS.as_bytes().to_vec(),
                ])
                .collect();
                let r = self.nodes[src].pipeline(&ask(c))?;
                if let Some(Value::Error(e)) = r.last() {
                    return Err(format!(
                        "MIGRATE {}: {}",
                        escape(k),
                        String::from_utf8_lossy(e)
                    ));
                }
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// `DUMP` + `PEXPIRETIME` of `keys` on the source, kept until the destination's next
    /// checkpoint.
    fn backup(
        &mut self,
        src: usize,
        dst: usize,
        db: usize,
        keys: &[Vec<u8>],
        mode: From,
    ) -> Result<()> {
        let mut cmds = Vec::with_capacity(keys.len() * 4);
        for k in keys {
            for c in [b"DUMP".as_slice(), b"PEXPIRETIME"] {
                if mode == From::Stray {
                    cmds.push(vec![b"ASKING".to_vec()]);
                }
                cmds.push(vec![c.to_vec(), k.clone()]);
            }
        }
        let replies = self.nodes[src].pipeline(&cmds)?;
        let replies = replies
            .into_iter()
            .filter(|v| !matches!(v, Value::Simple(s) if s == b"OK"));
        let batch = backups_of(db, keys, replies);
        self.keep_backups(dst, batch);
        Ok(())
    }

    /// Keeps `batch`, moved (or about to be) to `dst`, until `dst`'s next checkpoint.
    fn keep_backups(&mut self, dst: usize, batch: Vec<Backup>) {
        let generation = self.nodes[dst].generation;
        let entry = self
            .backups
            .entry(dst)
            .or_insert((generation, Vec::new(), 0));
        for b in batch {
            // The bytes it holds, plus the struct and the Vecs' headers.
            entry.2 += b.key.len() + b.payload.len() + std::mem::size_of::<Backup>();
            entry.1.push(b);
        }
    }

    /// Settles every key held by an engine that does not own its slot (`owner_of[s]` = node
    /// index): moved to the owner, or deleted when the owner has it. O(keys): one `SCAN` of
    /// each database of each engine. Returns the strays found.
    pub fn sweep(&mut self, owner_of: &[usize]) -> Result<u64> {
        let mut found = 0;
        for i in 0..self.nodes.len() {
            self.ensure(i)?;
            let mut stray_slots: Vec<u16> = Vec::new();
            for db in self.nodes[i].nonempty_dbs()? {
                self.nodes[i].select(db)?;
                let mut cursor = "0".to_string();
                let deadline = Instant::now() + RECONNECT_TIMEOUT * 10;
                loop {
                    let r = self.nodes[i].ok(&["SCAN", &cursor, "COUNT", "1000"])?;
                    let Value::Array(mut parts) = r else {
                        return Err(format!("SCAN: {r:?}"));
                    };
                    let keys = match parts.pop() {
                        Some(Value::Array(k)) => k,
                        _ => Vec::new(),
                    };
                    cursor = parts
                        .pop()
                        .map(|c| bulk_text(&c))
                        .transpose()?
                        .unwrap_or_default();
                    for k in keys {
                        if let Value::Bulk(k) = k {
                            let s = engine_core::slot::key_slot(&k);
                            if owner_of[s as usize] != i && !stray_slots.contains(&s) {
                                stray_slots.push(s);
                            }
                        }
                    }
                    self.pacer.rest();
                    if cursor == "0" || cursor.is_empty() {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(format!("{}: SCAN did not finish", self.nodes[i].addr()));
                    }
                }
            }
            for s in stray_slots {
                let owner = owner_of[s as usize];
                let slot = s.to_string();
                let owner_id = self.nodes[owner].id.clone();
                self.nodes[i].ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &owner_id])?;
                let before = self.totals.kept_on_destination;
                let n = self.drain(s, i, owner, From::Stray, false)?;
                self.nodes[i].ok(&["CLUSTER", "SETSLOT", &slot, "STABLE"])?;
                let settled = n + self.totals.kept_on_destination - before;
                log::warn!(
                    "{}: {settled} key(s) of slot {s}, owned by {}, settled ({n} moved there)",
                    self.nodes[i].addr(),
                    self.nodes[owner].addr()
                );
                found += settled;
            }
        }
        self.totals.strays += found;
        Ok(found)
    }
}

/// The backups of `keys` from their `DUMP` payload and `PEXPIRETIME`, two values per key in
/// key order (a `DUMP` reply's, or `TXLOCK … DUMP`'s); a key gone meanwhile (nil payload:
/// expired or deleted) has nothing to keep and is left out.
fn backups_of(db: usize, keys: &[Vec<u8>], values: impl Iterator<Item = Value>) -> Vec<Backup> {
    let mut values = values;
    let mut batch = Vec::with_capacity(keys.len());
    for k in keys {
        let (dump, pexp) = (values.next(), values.next());
        let Some(Value::Bulk(payload)) = dump else {
            continue;
        };
        let expire_at_ms = match pexp {
            Some(Value::Integer(t)) if t > 0 => t,
            _ => 0,
        };
        batch.push(Backup {
            db,
            key: k.clone(),
            expire_at_ms,
            payload,
        });
    }
    batch
}

fn escape(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[path = "slotmove_relay.rs"]
mod relay;

#[path = "slotmove_group.rs"]
mod group;

pub use group::GROUP;

#[cfg(test)]
#[path = "slotmove_tests.rs"]
mod tests;
