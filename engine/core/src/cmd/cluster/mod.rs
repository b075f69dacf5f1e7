//! The Redis Cluster protocol on one engine: slot ownership (`-MOVED` / `-CROSSSLOT` before a
//! command runs), CLUSTER SLOTS / SHARDS / NODES / MYID / INFO / KEYSLOT / COUNTKEYSINSLOT /
//! GETKEYSINSLOT / HELP, READONLY, READWRITE and ASKING, with Redis 7.0's reply shapes
//! (redis `cluster.c`; shapes checked byte for byte against redis-server 7.0.15 started with
//! `--cluster-enabled yes`). docs/cluster.md is the user-facing description.
//!
//! # Topology
//!
//! [`Config::cluster_nodes`] lists every instance of the fleet as `host:port`, in instance
//! order (the slot map numbers them `0..n`); [`Config::cluster_index`] is this engine's
//! position. An empty list is **standalone**: the engine owns every key, every CLUSTER
//! subcommand, READONLY, READWRITE and ASKING answer
//! `-ERR This instance has cluster support disabled` (like a Redis without `cluster-enabled`),
//! INFO says `redis_mode:standalone` / `cluster_enabled:0` and HELLO `mode: standalone`.
//! There is no cluster bus. Every engine starts from the same jump-hash map of the same list
//! ([`crate::slot`]); after that the slot table is data: CLUSTER SETSLOT / ADDSLOTS /
//! DELSLOTS / MEET / FORGET (`admin.rs`) change it on the node they are sent to, and tools
//! send them to every node, as `redis-cli --cluster` does. Each node keeps its table in its
//! nodes file (`conf.rs`).
//!
//! # Announced hosts
//!
//! A node entry (CLUSTER SLOTS/SHARDS/NODES, `-MOVED`) announces the host written in the
//! topology. A wildcard host (`0.0.0.0`, `::`, `*` or empty, what a fleet bound to every
//! interface gets) is replaced by [`Config::cluster_announce_host`] if set, else by the local
//! address of the asking client's connection (`Client::laddr`): the address the client used to
//! reach this engine, which reaches its siblings on the same machine too (Dragonfly's emulated
//! cluster does the same). A host is never announced empty or NULL: ioredis skips such nodes.
//!
//! # Node ids
//!
//! 40 lowercase hex digits derived from the node's `host:port` exactly as written in the
//! topology ([`node_id`]: two FNV-1a-64 hashes expanded with splitmix64). So an instance keeps
//! its id across restarts, and every engine names every node the same way without talking to
//! it. Changing a node's address changes its id (as a new Redis node would get a new id).
//!
//! # Ownership check ([`redirect`], called by dispatch before the handler)
//!
//! Keys come from the command table: the legacy `first/last/step` positions, or the key specs
//! for the `movablekeys` commands (ZUNIONSTORE, LMPOP, …: `begin_search` index/keyword,
//! `find_keys` range/keynum; an invalid `numkeys` yields no keys, like Redis's getkeys procs,
//! so the handler reports the real error). One slot computation per key, no allocation.
//!
//! - no key, or every key owned here → runs here, **even across slots** (the proxy sends
//!   split MGET/MSET/DEL batches that span slots of one instance);
//! - some key owned elsewhere and all keys in one slot → `-MOVED <slot> <host>:<port>`;
//! - some key owned elsewhere and the keys in several slots → `-CROSSSLOT Keys in request
//!   don't hash to the same slot`. This is also Redis's precedence for mixed cases: Redis
//!   checks "several slots" before "which node", so a request mixing local and remote slots
//!   gets CROSSSLOT, never MOVED.
//!
//! Redis answers CROSSSLOT for any multi-slot request, local or not; we relax only the
//! all-local case. Inside MULTI the check runs when a command is queued (as in Redis); EXEC
//! does not re-check the queued commands together (Redis does, and answers CROSSSLOT for a
//! transaction spanning slots): a transaction whose keys are all owned here runs.
//! READONLY/READWRITE only set a flag (there are no replicas).
//!
//! # Moving slots (redis `getNodeByQuery`)
//!
//! While a slot is MIGRATING here, a request whose keys are all here runs; one whose keys
//! are all gone gets `-ASK <slot> <host>:<port>` of the target; one with some of each (or
//! spanning several local slots) gets `-TRYAGAIN`. While a slot is IMPORTING here, a
//! request after `ASKING` (or RESTORE-ASKING, which MIGRATE sends) runs here, unless it has
//! several keys and some are missing (`-TRYAGAIN`); without ASKING it gets `-MOVED` to the
//! owner. MIGRATE itself always runs on an open slot. Keys are looked up only when a slot is
//! open, so the ordinary check stays one CRC16 and one array read per key. A slot nobody
//! serves (after DELSLOTS) gets `-CLUSTERDOWN Hash slot not served`.
//!
//! # Keys per slot
//!
//! COUNTKEYSINSLOT, GETKEYSINSLOT and SETSLOT NODE's check read the slot index
//! (`crate::slotkeys`), built by one walk at first use and dropped when no slot moves.
//!
//! # Cluster state
//!
//! `cluster_state:ok` while every slot has an owner: with no bus an engine cannot tell that a
//! sibling is down, and answering `fail` would stop ioredis from using the instances that
//! are up. A down instance shows as connection errors for its own slots only (the
//! supervisor restarts it).

use std::fmt::Write as _;

use crate::command::CommandSpec;
use crate::error::CmdError;
use crate::slot::{self, SLOTS};
use crate::{Client, Config, Engine};

/// A connection's cluster flags.
#[derive(Clone, Debug, Default)]
pub struct ClientCluster {
    /// READONLY was sent (cleared by READWRITE). No replicas exist, so nothing reads it.
    pub readonly: bool,
    /// ASKING was sent before the current command (cleared after the next command, except
    /// inside MULTI, as redis `resetClient` does).
    pub asking: bool,
    /// The command running now came right after ASKING: a script it runs may use keys of a
    /// slot importing here (redis `scriptVerifyClusterState` copies the caller's
    /// `CLIENT_ASKING` to the script client; ours is cleared before the command runs).
    pub asked: bool,
}

/// `-ERR This instance has cluster support disabled` (redis `cluster.c`).
const DISABLED: &str = "ERR This instance has cluster support disabled";
/// The CROSSSLOT reply, exact Redis text.
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
/// A multi-key request whose keys are split by a slot migration (redis
/// `CLUSTER_REDIR_UNSTABLE`).
pub const TRYAGAIN: &[u8] = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
/// A key in a slot no node serves (redis `CLUSTER_REDIR_DOWN_UNBOUND`).
pub const UNBOUND: &[u8] = b"-CLUSTERDOWN Hash slot not served\r\n";

/// The owner of a slot nobody serves (after DELSLOTS).
pub(crate) const UNASSIGNED: u16 = u16::MAX;

/// One instance of the fleet.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// `host:port` as written in the topology or in CLUSTER MEET: what the id derives from
    /// and what the nodes file keeps.
    pub(crate) addr: String,
    /// Host as written; `None` for a wildcard (announced per client).
    pub(crate) host: Option<String>,
    pub(crate) port: u16,
    pub(crate) id: String,
    /// The node's config epoch (redis `configEpoch`).
    pub(crate) epoch: u64,
}

impl Node {
    /// A node at `host:port`, as written.
    pub(crate) fn new(host: &str, port: u16, epoch: u64) -> Node {
        let addr = format!("{host}:{port}");
        Node {
            id: node_id(&addr),
            addr,
            host: (!is_wildcard(host)).then(|| host.to_string()),
            port,
            epoch,
        }
    }
}

/// The fleet as this engine sees it: built from [`Config`] by [`Cluster::from_config`]
/// (the jump-hash map of the topology), replaced by the nodes file at start
/// ([`Cluster::load_conf`]), changed by CLUSTER SETSLOT/ADDSLOTS/DELSLOTS/MEET/FORGET
/// (`admin.rs`).
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Empty = standalone.
    pub(crate) nodes: Vec<Node>,
    /// This engine's index in `nodes`.
    pub(crate) me: usize,
    /// `owner[slot]`: the node index serving each slot, or [`UNASSIGNED`] (one CRC16 and
    /// one array read per key on the hot path).
    pub(crate) owner: Vec<u16>,
    /// Slots this node serves and is moving to another node (redis `migrating_slots_to`).
    pub(crate) migrating: std::collections::BTreeMap<u16, usize>,
    /// Slots another node serves and this node is receiving (redis `importing_slots_from`).
    pub(crate) importing: std::collections::BTreeMap<u16, usize>,
    /// redis `currentEpoch`.
    pub(crate) current_epoch: u64,
    /// Host announced for wildcard nodes, if configured.
    announce_host: Option<String>,
    /// Bumped on every change of nodes, owners or open slots: the server saves the nodes
    /// file and rebuilds its peer links when it moves (see [`Cluster::generation`]).
    pub(crate) generation: u64,
}

/// Parses `host:port` (`[v6]:port` for IPv6). Errors name the bad entry.
pub fn parse_node(s: &str) -> Result<(String, u16), String> {
    let s = s.trim();
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("cluster node {s:?}: expected host:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("cluster node {s:?}: bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), port))
}

/// A host that means "every interface": announced as the client's local address instead.
pub fn is_wildcard(host: &str) -> bool {
    matches!(host, "" | "*" | "0.0.0.0" | "::" | "[::]")
}

/// The node id of `host:port` (see the module docs): 40 lowercase hex digits.
pub fn node_id(addr: &str) -> String {
    fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
        bytes.iter().fold(seed, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
    fn splitmix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let a = fnv1a(0xcbf2_9ce4_8422_2325, addr.as_bytes());
    let b = fnv1a(0x6c62_272e_07bb_0142, addr.as_bytes());
    let words = [splitmix(a), splitmix(b), splitmix(a ^ b.rotate_left(32))];
    let mut id = String::with_capacity(48);
    for w in words {
        let _ = write!(id, "{w:016x}");
    }
    id.truncate(40);
    id
}

impl Cluster {
    /// The topology of `config`, or why it is invalid (bad `host:port`, index out of range,
    /// the same address twice).
    pub fn from_config(config: &Config) -> Result<Cluster, String> {
        if config.cluster_nodes.is_empty() {
            return Ok(Cluster::default());
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(config.cluster_nodes.len());
        for entry in &config.cluster_nodes {
            let (host, port) = parse_node(entry)?;
            let node = Node::new(&host, port, nodes.len() as u64 + 1);
            if nodes.iter().any(|n| n.id == node.id) {
                return Err(format!("cluster node {} is listed twice", node.addr));
            }
            nodes.push(node);
        }
        let n = nodes.len();
        if config.cluster_index >= n {
            return Err(format!(
                "cluster index {} is outside the {n} cluster nodes",
                config.cluster_index
            ));
        }
        let owner = (0..SLOTS)
            .map(|s| slot::instance_for_slot(s, n as u32) as u16)
            .collect();
        let announce = config.cluster_announce_host.trim();
        Ok(Cluster {
            nodes,
            me: config.cluster_index,
            owner,
            migrating: Default::default(),
            importing: Default::default(),
            current_epoch: n as u64,
            announce_host: (!announce.is_empty()).then(|| announce.to_string()),
            generation: 0,
        })
    }

    /// Whether the engine runs in cluster mode (a topology was given).
    /// Cluster mode with other engines to reach (PUBLISH is forwarded to them).
    pub fn has_peers(&self) -> bool {
        self.nodes.len() > 1
    }

    /// The other engines' index, host (`None` for a wildcard: this machine) and port.
    pub fn peers(&self) -> impl Iterator<Item = (usize, Option<&str>, u16)> {
        let me = self.me;
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != me)
            .map(|(i, n)| (i, n.host.as_deref(), n.port))
    }

    pub fn enabled(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Whether this instance serves `slot` (standalone: every slot).
    pub fn owns(&self, slot: u16) -> bool {
        !self.enabled() || usize::from(self.owner[usize::from(slot)]) == self.me
    }

    /// The node index serving `slot`, or [`UNASSIGNED`].
    #[inline]
    pub(crate) fn owner_of(&self, slot: u16) -> u16 {
        self.owner[usize::from(slot)]
    }

    /// Moves on every change of the nodes, slot owners, open slots or epochs: the server
    /// compares it after each command to save the nodes file (and rebuild its peer links).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether some slot is migrating or importing here (the ownership check then looks
    /// the keys up).
    fn has_open_slots(&self) -> bool {
        !self.migrating.is_empty() || !self.importing.is_empty()
    }

    /// See [`has_open_slots`](Self::has_open_slots).
    pub fn open_slots(&self) -> bool {
        self.has_open_slots()
    }

    /// Inclusive slot ranges and their node, in slot order (unassigned slots left out).
    pub fn ranges(&self) -> Vec<(u16, u16, u16)> {
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for (s, &o) in self.owner.iter().enumerate() {
            if o == UNASSIGNED {
                continue;
            }
            let s = s as u16;
            match out.last_mut() {
                Some((_, end, owner)) if *owner == o && *end + 1 == s => *end = s,
                _ => out.push((s, s, o)),
            }
        }
        out
    }

    /// Records a change (see [`generation`](Self::generation)).
    pub(crate) fn changed(&mut self) {
        self.generation += 1;
    }

    /// This engine's own `host:port` as written.
    pub fn my_addr(&self) -> Option<&str> {
        self.nodes.get(self.me).map(|n| n.addr.as_str())
    }

    /// The host to announce for node `i` to `client`.
    fn host<'a>(&'a self, i: usize, client: &'a Client) -> &'a str {
        self.host_for(i, &client.laddr)
    }

    /// [`Self::host`] for a connection whose local address is `laddr`.
    fn host_for<'a>(&'a self, i: usize, laddr: &'a str) -> &'a str {
        if let Some(h) = &self.nodes[i].host {
            return h;
        }
        if let Some(h) = &self.announce_host {
            return h;
        }
        local_ip(laddr)
    }

    /// `<host>:<port>` of node `i` as announced to a connection whose local address is
    /// `laddr` (MOVED, ASK).
    fn endpoint(&self, i: usize, laddr: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(self.host_for(i, laddr).as_bytes());
        out.push(b':');
        out.extend_from_slice(itoa::Buffer::new().format(self.nodes[i].port).as_bytes());
    }
}

/// The IP part of `Client::laddr` (`1.2.3.4:p` or `[::1]:p`); 127.0.0.1 when unknown.
fn local_ip(laddr: &str) -> &str {
    match laddr.rsplit_once(':') {
        Some((ip, _)) if !ip.is_empty() => ip.trim_start_matches('[').trim_end_matches(']'),
        _ => "127.0.0.1",
    }
}

/// `redis_mode` / HELLO `mode`.
pub fn mode(e: &Engine) -> &'static str {
    if e.cluster.enabled() {
        "cluster"
    } else {
        "standalone"
    }
}

/// INFO `cluster_enabled`.
pub fn enabled(e: &Engine) -> bool {
    e.cluster.enabled()
}

// ---------------------------------------------------------------------------------------------
// Ownership check

/// Accumulates keys: one CRC16 and one table read per key; keys of open slots are looked up.
struct KeyCheck<'a> {
    cluster: &'a Cluster,
    /// Guests of a gathered command spanning engines count as owned here (`crate::txlock`).
    locks: &'a crate::txlock::Locks,
    /// The database the keys are looked up in (open slots only).
    db: &'a crate::keyspace::Db,
    now_ms: u64,
    first: Option<(u16, &'a [u8])>,
    /// Two different keys (redis `multiple_keys`).
    multiple: bool,
    cross: bool,
    remote: bool,
    unbound: bool,
    /// A key's slot is migrating from here / importing here (redis `migrating_slot`,
    /// `importing_slot`).
    migrating: Option<u16>,
    importing: bool,
    missing: u32,
    existing: u32,
}

impl<'a> KeyCheck<'a> {
    /// Adds a key; `false` once the answer is certain (stop looking).
    fn add(&mut self, key: &'a [u8]) -> bool {
        let s = slot::key_slot(key);
        match self.first {
            None => self.first = Some((s, key)),
            Some((f, k)) => {
                if f != s {
                    self.cross = true;
                } else if k != key {
                    self.multiple = true;
                }
            }
        }
        let owner = self.cluster.owner_of(s);
        if owner == UNASSIGNED {
            self.unbound = true;
            return false;
        }
        if usize::from(owner) != self.cluster.me && !self.locks.is_guest(self.db.index, key) {
            self.remote = true;
        }
        if self.cluster.has_open_slots() {
            let open = if usize::from(owner) == self.cluster.me {
                let m = self.cluster.migrating.contains_key(&s);
                if m {
                    self.migrating = Some(s);
                }
                m
            } else {
                let i = self.cluster.importing.contains_key(&s);
                self.importing |= i;
                i
            };
            // redis looks keys up with LOOKUP_NOEXPIRE: a logically expired key is missing.
            if open {
                if self.db.peek_expired(key, self.now_ms) == Some(false) {
                    self.existing += 1;
                } else {
                    self.missing += 1;
                }
            }
        }
        !(self.cross && self.remote)
    }
}

/// The ownership check, run by dispatch before a command's handler (see the module docs).
/// What the cluster check decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The command may run here.
    Run,
    /// `-MOVED`, `-ASK`, `-TRYAGAIN`, `-CLUSTERDOWN` or `-CROSSSLOT` was written to `out`.
    Refused,
    /// It would get `-ASK`/`-TRYAGAIN` for a slot a `SLOTHOLD` holds (`hold.rs`): nothing was
    /// written; the caller postpones it, or asks again with `holds` false.
    Held(u16),
}

/// The cluster check (redis `getNodeByQuery`). Standalone engines answer [`Route::Run`] at
/// once. `holds`: whether a slot hold may answer [`Route::Held`].
pub fn redirect(
    e: &Engine,
    client: &mut Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
    holds: bool,
    out: &mut Vec<u8>,
) -> Route {
    let cluster = &e.cluster;
    if !cluster.enabled() {
        return Route::Run;
    }
    // ASKING applies to the next command only (redis `resetClient` clears CLIENT_ASKING
    // after each command but ASKING itself, except inside MULTI). `ASKING` then `MULTI`
    // keeps it for the whole transaction, the commands EXEC runs included, as in Redis
    // (`resetClient` after MULTI finds the client in MULTI); EXEC and DISCARD clear it
    // (`crate::cmd::tx`).
    let asking = client.cluster.asking;
    // A script's client keeps its caller's ASKING for every command the script runs (redis
    // `scriptVerifyClusterState` copies `CLIENT_ASKING` to each call).
    if asking
        && spec.name != "asking"
        && spec.name != "multi"
        && !client.tx.in_multi()
        && !client.tx.in_exec
        && client.addr != crate::script::SCRIPT_CLIENT_ADDR
    {
        client.cluster.asking = false;
    }
    client.cluster.asked = asking;
    // EXEC: its queued commands again, each as when it was queued, since a slot may have
    // moved meanwhile (redis `getNodeByQuery` walks `mstate` for EXEC).
    if spec.name == "exec" && client.tx.in_multi() && !client.tx.in_exec {
        return exec_route(e, client, now_ms, holds, out);
    }
    // The one key extractor (redis `getNodeByQuery` → `getKeysFromCommandWithSpecs`): a
    // request whose keys cannot be found is keyless here, so its handler answers the error.
    let keys = crate::command::keys(spec, argv);
    // The common case, one key and no slot open: one CRC16 and one table read.
    if keys.len() == 1 && !cluster.has_open_slots() {
        let key = argv[keys.positions().next().unwrap_or(0)];
        let s = slot::key_slot(key);
        let owner = cluster.owner_of(s);
        if usize::from(owner) == cluster.me || e.locks.is_guest(client.db, key) {
            return Route::Run;
        }
        if owner == UNASSIGNED {
            out.extend_from_slice(UNBOUND);
        } else {
            moved(cluster, s, usize::from(owner), &client.laddr, out);
        }
        return Route::Refused;
    }
    let mut check = KeyCheck {
        cluster,
        locks: &e.locks,
        db: e.db(client.db),
        now_ms,
        first: None,
        multiple: false,
        cross: false,
        remote: false,
        unbound: false,
        migrating: None,
        importing: false,
        missing: 0,
        existing: 0,
    };
    for pos in keys.positions() {
        if !check.add(argv[pos]) {
            break;
        }
    }
    // Shard channels (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH) are `not_key` in the key specs but
    // hash like keys (redis `getNodeByQuery`, `pubsubshard_included`); and unlike keys, any
    // two slots are CROSSSLOT even when both are local, as redis-server 7.0.15 answers. Only
    // keyless PUBSUB rows reach this test, so keyed commands pay nothing. A shard channel is
    // served by the slot's owner until the move ends (no lookup: channels are not keys).
    if keys.is_empty() && spec.flags.contains(crate::command::Flags::PUBSUB) {
        let channels = match spec.name {
            "ssubscribe" | "sunsubscribe" => &argv[1..],
            "spublish" => &argv[1..2],
            _ => &[][..],
        };
        for ch in channels {
            check.add(ch);
        }
        check.migrating = None;
        check.importing = false;
        if check.cross && !check.unbound {
            out.extend_from_slice(CROSSSLOT);
            return Route::Refused;
        }
    }
    let Some((slot, _)) = check.first else {
        return Route::Run;
    };
    if check.unbound {
        out.extend_from_slice(UNBOUND);
        return Route::Refused;
    }
    if check.cross && check.remote {
        out.extend_from_slice(CROSSSLOT);
        return Route::Refused;
    }
    let open = check.migrating.is_some() || check.importing;
    // MIGRATE works on the local keys of an open slot (redis: "we need to be able to freely
    // move keys among instances").
    if open && spec.name == "migrate" {
        return Route::Run;
    }
    if let Some(s) = check.migrating
        && check.missing > 0
    {
        if holds && e.cluster_holds.active() && e.cluster_holds.holds(s) {
            return Route::Held(s);
        }
        // Some keys are still here and some are gone: nowhere has them all. A request over
        // several local slots (the proxy's split batches) cannot be sent to one node either.
        if check.existing > 0 || check.cross {
            out.extend_from_slice(TRYAGAIN);
        } else {
            out.extend_from_slice(b"-ASK ");
            out.extend_from_slice(itoa::Buffer::new().format(s).as_bytes());
            out.push(b' ');
            cluster.endpoint(cluster.migrating[&s], &client.laddr, out);
            out.extend_from_slice(b"\r\n");
        }
        return Route::Refused;
    }
    if check.importing && (asking || spec.flags.contains(crate::command::Flags::ASKING)) {
        if (check.multiple || check.cross) && check.missing > 0 {
            out.extend_from_slice(TRYAGAIN);
            return Route::Refused;
        }
        return Route::Run;
    }
    if !check.remote {
        return Route::Run;
    }
    // Remote and not CROSSSLOT: every key is in this one slot.
    moved(
        cluster,
        slot,
        usize::from(cluster.owner_of(slot)),
        &client.laddr,
        out,
    );
    Route::Refused
}

/// Whether EXEC would be refused now because a queued command's slot moved since it was
/// queued (`TXLOCK` reports it as a refused transaction: the proxy's coordinator then runs no
/// engine's part, `crate::txlock`).
pub fn queued_moved(e: &Engine, client: &mut Client, now_ms: u64) -> bool {
    client.tx.in_multi() && exec_route(e, client, now_ms, false, &mut Vec::new()) != Route::Run
}

/// [`redirect`] of EXEC: the first queued command that may not run here gives EXEC's answer
/// (the dispatcher then discards the transaction, as redis `processCommand` does), so no
/// transaction runs in part because one of its slots moved after it was queued.
fn exec_route(
    e: &Engine,
    client: &mut Client,
    now_ms: u64,
    holds: bool,
    out: &mut Vec<u8>,
) -> Route {
    let multi = client.tx.take();
    // The queued commands are checked outside MULTI here: keep ASKING as EXEC found it.
    let (asking, asked) = (client.cluster.asking, client.cluster.asked);
    let mut route = Route::Run;
    for argv in multi.iter().flat_map(|m| m.commands()) {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let Ok((spec, _)) = crate::dispatch::resolve(&args) else {
            continue;
        };
        client.cluster.asking = asking;
        route = redirect(e, client, spec, &args, now_ms, holds, out);
        if route != Route::Run {
            break;
        }
    }
    client.cluster.asking = asking;
    client.cluster.asked = asked;
    client.tx.restore(multi);
    route
}

/// A client parked on `key` (BLPOP…) whose slot is no longer served here and is not being
/// imported: the error that unblocks it, `-MOVED` to the owner or `-CLUSTERDOWN` (redis
/// `clusterRedirectBlockedClientIfNeeded`, run from its clients cron). `laddr`: the client's
/// local address, for the announced host.
pub(crate) fn blocked_redirect(e: &Engine, key: &[u8], laddr: &str) -> Option<Vec<u8>> {
    let cluster = &e.cluster;
    if !cluster.enabled() {
        return None;
    }
    let s = slot::key_slot(key);
    let owner = cluster.owner_of(s);
    if usize::from(owner) == cluster.me || cluster.importing.contains_key(&s) {
        return None;
    }
    if owner == UNASSIGNED {
        return Some(UNBOUND.to_vec());
    }
    let mut out = Vec::new();
    moved(cluster, s, usize::from(owner), laddr, &mut out);
    Some(out)
}

/// `-MOVED <slot> <host>:<port>` of node `owner`.
fn moved(cluster: &Cluster, slot: u16, owner: usize, laddr: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"-MOVED ");
    out.extend_from_slice(itoa::Buffer::new().format(slot).as_bytes());
    out.push(b' ');
    cluster.endpoint(owner, laddr, out);
    out.extend_from_slice(b"\r\n");
}

// ---------------------------------------------------------------------------------------------
// Commands

/// The cluster, or the standalone error.
fn cluster_of(e: &Engine) -> Result<&Cluster, CmdError> {
    if e.cluster.enabled() {
        Ok(&e.cluster)
    } else {
        Err(CmdError::Static(DISABLED))
    }
}

/// Runs `f` with database `db`'s slot index (built by one walk if absent, or finished if
/// `SLOTKEYSBUILD` left it part-built) and a test of whether a key is live in that database.
pub(crate) fn with_slot_keys<R>(
    e: &mut Engine,
    db: usize,
    now_ms: u64,
    f: impl FnOnce(&mut crate::slotkeys::SlotKeys, &dyn Fn(&[u8]) -> bool) -> R,
) -> R {
    let d = e.db_mut(db);
    d.walk_slot_keys(usize::MAX, now_ms);
    let mut sk = d.slot_keys.take().expect("walked: present");
    let d = e.db(db);
    let live = |k: &[u8]| d.peek_expired(k, now_ms) == Some(false);
    let r = f(&mut sk, &live);
    e.db_mut(db).slot_keys = Some(sk);
    r
}

/// The cluster to change, or the standalone error.
fn cluster_mut(e: &mut Engine) -> Result<&mut Cluster, CmdError> {
    if e.cluster.enabled() {
        Ok(&mut e.cluster)
    } else {
        Err(CmdError::Static(DISABLED))
    }
}

mod admin;
pub mod conf;
pub mod hold;
mod reply;

pub use admin::*;
pub use reply::*;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_moves;
