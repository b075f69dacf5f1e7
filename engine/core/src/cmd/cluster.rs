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
//! There is no cluster bus: every engine computes the same slot map from the same list
//! ([`crate::slot`]), so nothing is negotiated and nothing can disagree.
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
//! READONLY/READWRITE only set a flag (there are no replicas); ASKING sets a flag that no
//! check reads, because slots never migrate (no `-ASK`, no `-TRYAGAIN`).
//!
//! # Keys per slot
//!
//! COUNTKEYSINSLOT and GETKEYSINSLOT walk the keyspace (O(keys), one CRC16 per key) instead of
//! keeping a per-slot index: an index would put a CRC16 and a counter update on every insert
//! and delete of every deployment, for two commands that only operators and resharding tools
//! send (and recached does not reshard). Like Redis, keys that have expired but are not yet
//! reclaimed are counted (as DBSIZE counts them).
//!
//! # Cluster state
//!
//! `cluster_state:ok` always: with no bus an engine cannot tell that a sibling is down, and
//! answering `fail` would stop ioredis from using the instances that are up. A down instance
//! shows as connection errors for its own slots only (the supervisor restarts it).

use std::fmt::Write as _;

use crate::call::Call;
use crate::command::CommandSpec;
use crate::error::CmdError;
use crate::slot::{self, SLOTS};
use crate::{Client, Config, Engine};

/// A connection's cluster flags.
#[derive(Clone, Debug, Default)]
pub struct ClientCluster {
    /// READONLY was sent (cleared by READWRITE). No replicas exist, so nothing reads it.
    pub readonly: bool,
    /// ASKING was sent before the current command (cleared after the next command).
    pub asking: bool,
}

/// `-ERR This instance has cluster support disabled` (redis `cluster.c`).
const DISABLED: &str = "ERR This instance has cluster support disabled";
/// The CROSSSLOT reply, exact Redis text.
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// One instance of the fleet.
#[derive(Clone, Debug)]
struct Node {
    /// Host as written in the topology; `None` for a wildcard (announced per client).
    host: Option<String>,
    port: u16,
    id: String,
}

/// The fleet as this engine sees it; built once from [`Config`] by [`Cluster::from_config`].
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Empty = standalone.
    nodes: Vec<Node>,
    /// This engine's index in `nodes`.
    me: u32,
    /// `owner[block]`: the instance of each 64-slot block (`slot::instance_for_slot`
    /// precomputed, so the hot path is one CRC16 and one array read per key).
    owner: Vec<u32>,
    /// Host announced for wildcard nodes, if configured.
    announce_host: Option<String>,
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
            let addr = format!("{host}:{port}");
            let id = node_id(&addr);
            if nodes.iter().any(|n| n.id == id) {
                return Err(format!("cluster node {addr} is listed twice"));
            }
            nodes.push(Node {
                host: (!is_wildcard(&host)).then_some(host),
                port,
                id,
            });
        }
        let n = nodes.len() as u32;
        if config.cluster_index >= nodes.len() {
            return Err(format!(
                "cluster index {} is outside the {n} cluster nodes",
                config.cluster_index
            ));
        }
        let owner = (0..SLOTS / slot::BLOCK_SLOTS)
            .map(|b| slot::instance_for_slot(b * slot::BLOCK_SLOTS, n))
            .collect();
        let announce = config.cluster_announce_host.trim();
        Ok(Cluster {
            nodes,
            me: config.cluster_index as u32,
            owner,
            announce_host: (!announce.is_empty()).then(|| announce.to_string()),
        })
    }

    /// Whether the engine runs in cluster mode (a topology was given).
    /// Cluster mode with other engines to reach (PUBLISH is forwarded to them).
    pub fn has_peers(&self) -> bool {
        self.nodes.len() > 1
    }

    /// The other engines' index, host (`None` for a wildcard: this machine) and port.
    pub fn peers(&self) -> impl Iterator<Item = (usize, Option<&str>, u16)> {
        let me = self.me as usize;
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != me)
            .map(|(i, n)| (i, n.host.as_deref(), n.port))
    }

    pub fn enabled(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Whether this instance owns `slot` (standalone: every slot).
    pub fn owns(&self, slot: u16) -> bool {
        !self.enabled() || self.owner_of(slot) == self.me
    }

    /// The instance that owns `slot`.
    fn owner_of(&self, slot: u16) -> u32 {
        self.owner[usize::from(slot / slot::BLOCK_SLOTS)]
    }

    /// The host to announce for node `i` to `client`.
    fn host<'a>(&'a self, i: usize, client: &'a Client) -> &'a str {
        if let Some(h) = &self.nodes[i].host {
            return h;
        }
        if let Some(h) = &self.announce_host {
            return h;
        }
        local_ip(&client.laddr)
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

/// The verdict on one request's keys.
enum Verdict {
    Here,
    Moved(u16),
    CrossSlot,
}

/// Accumulates keys: one CRC16 and one table read per key.
struct KeyCheck<'a> {
    cluster: &'a Cluster,
    /// Guests of a gathered command spanning engines count as owned here (`crate::txlock`).
    locks: &'a crate::txlock::Locks,
    db: usize,
    first_slot: Option<u16>,
    cross: bool,
    remote: bool,
}

impl KeyCheck<'_> {
    /// Adds a key; `false` once the answer is certainly CROSSSLOT (stop looking).
    fn add(&mut self, key: &[u8]) -> bool {
        let s = slot::key_slot(key);
        match self.first_slot {
            None => self.first_slot = Some(s),
            Some(f) if f != s => self.cross = true,
            Some(_) => {}
        }
        if self.cluster.owner_of(s) != self.cluster.me && !self.locks.is_guest(self.db, key) {
            self.remote = true;
        }
        !(self.cross && self.remote)
    }

    fn verdict(&self) -> Verdict {
        match (self.remote, self.cross, self.first_slot) {
            (false, _, _) | (_, _, None) => Verdict::Here,
            (true, false, Some(s)) => Verdict::Moved(s),
            (true, true, _) => Verdict::CrossSlot,
        }
    }
}

/// The ownership check, run by dispatch before a command's handler (see the module docs).
/// Returns true when the command may run here; otherwise writes `-MOVED` or `-CROSSSLOT` to
/// `out` and returns false. Standalone engines return true at once.
pub fn redirect(
    e: &Engine,
    client: &mut Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> bool {
    let cluster = &e.cluster;
    if !cluster.enabled() {
        return true;
    }
    // ASKING applies to the next command only (redis resets CLIENT_ASKING after each call).
    if spec.name != "asking" {
        client.cluster.asking = false;
    }
    let mut check = KeyCheck {
        cluster,
        locks: &e.locks,
        db: client.db,
        first_slot: None,
        cross: false,
        remote: false,
    };
    // The one key extractor (redis `getNodeByQuery` → `getKeysFromCommandWithSpecs`): a
    // request whose keys cannot be found is keyless here, so its handler answers the error.
    let keys = crate::command::keys(spec, argv);
    for pos in keys.positions() {
        if !check.add(argv[pos]) {
            break;
        }
    }
    // Shard channels (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH) are `not_key` in the key specs but
    // hash like keys (redis `getNodeByQuery`, `pubsubshard_included`); and unlike keys, any
    // two slots are CROSSSLOT even when both are local, as redis-server 7.0.15 answers. Only
    // keyless PUBSUB rows reach this test, so keyed commands pay nothing.
    if keys.is_empty() && spec.flags.contains(crate::command::Flags::PUBSUB) {
        let channels = match spec.name {
            "ssubscribe" | "sunsubscribe" => &argv[1..],
            "spublish" => &argv[1..2],
            _ => &[][..],
        };
        for ch in channels {
            check.add(ch);
        }
        if check.cross {
            out.extend_from_slice(CROSSSLOT);
            return false;
        }
    }
    match check.verdict() {
        Verdict::Here => true,
        Verdict::CrossSlot => {
            out.extend_from_slice(CROSSSLOT);
            false
        }
        Verdict::Moved(slot) => {
            let owner = cluster.owner_of(slot) as usize;
            out.extend_from_slice(b"-MOVED ");
            out.extend_from_slice(itoa::Buffer::new().format(slot).as_bytes());
            out.push(b' ');
            out.extend_from_slice(cluster.host(owner, client).as_bytes());
            out.push(b':');
            out.extend_from_slice(
                itoa::Buffer::new()
                    .format(cluster.nodes[owner].port)
                    .as_bytes(),
            );
            out.extend_from_slice(b"\r\n");
            false
        }
    }
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

/// Inclusive slot ranges per instance, in slot order: `ranges[i]` for instance `i`.
fn ranges_by_instance(c: &Cluster) -> Vec<Vec<(u16, u16)>> {
    let mut by = vec![Vec::new(); c.nodes.len()];
    for (start, end, owner) in slot::slot_ranges(c.nodes.len() as u32) {
        by[owner as usize].push((start, end));
    }
    by
}

/// `CLUSTER SLOTS` → `[[start, end, [host, port, id, {}]], …]`: one entry per range, sorted
/// by slot, node metadata an empty map (RESP3) / empty array (RESP2) like redis 7.0.
pub fn slots(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let ranges = slot::slot_ranges(cl.nodes.len() as u32);
    // The writer borrows the call, hosts borrow its client: look them up first.
    let hosts: Vec<String> = (0..cl.nodes.len())
        .map(|i| cl.host(i, c.client).to_string())
        .collect();
    let mut w = c.w();
    w.array(ranges.len());
    for (start, end, owner) in ranges {
        let node = &cl.nodes[owner as usize];
        w.array(3);
        w.integer(i64::from(start));
        w.integer(i64::from(end));
        w.array(4);
        w.bulk(hosts[owner as usize].as_bytes());
        w.integer(i64::from(node.port));
        w.bulk(node.id.as_bytes());
        w.map(0);
    }
    Ok(())
}

/// `CLUSTER SHARDS` → one shard per instance: `{slots: [s, e, …], nodes: [{id, port, ip,
/// endpoint, [hostname,] role, replication-offset, health}]}` (redis 7.0 field order).
pub fn shards(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let by = ranges_by_instance(cl);
    let hosts: Vec<String> = (0..cl.nodes.len())
        .map(|i| cl.host(i, c.client).to_string())
        .collect();
    let mut w = c.w();
    w.array(cl.nodes.len());
    for (i, node) in cl.nodes.iter().enumerate() {
        let host = hosts[i].as_bytes();
        let is_ip = hosts[i].parse::<std::net::IpAddr>().is_ok();
        w.map(2);
        w.bulk(b"slots");
        w.array(by[i].len() * 2);
        for &(s, e) in &by[i] {
            w.integer(i64::from(s));
            w.integer(i64::from(e));
        }
        w.bulk(b"nodes");
        w.array(1);
        w.map(if is_ip { 7 } else { 8 });
        w.bulk(b"id");
        w.bulk(node.id.as_bytes());
        w.bulk(b"port");
        w.integer(i64::from(node.port));
        w.bulk(b"ip");
        w.bulk(host);
        w.bulk(b"endpoint");
        w.bulk(host);
        if !is_ip {
            w.bulk(b"hostname");
            w.bulk(host);
        }
        w.bulk(b"role");
        w.bulk(b"master");
        w.bulk(b"replication-offset");
        w.integer(0);
        w.bulk(b"health");
        w.bulk(b"online");
    }
    Ok(())
}

/// `CLUSTER NODES` → one line per node: `<id> <host>:<port>@0 <flags> - 0 <pong-ms> <epoch>
/// connected <slot ranges…>`. The bus port is 0 (there is no cluster bus); `pong-ms` is now
/// for the other nodes (they are considered reachable), 0 for myself, as Redis prints.
/// A bulk string (RESP2) / verbatim `txt` string (RESP3).
pub fn nodes(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let by = ranges_by_instance(cl);
    let mut text = String::new();
    for (i, node) in cl.nodes.iter().enumerate() {
        let me = i as u32 == cl.me;
        let _ = write!(
            text,
            "{} {}:{}@0 {} - 0 {} {} connected",
            node.id,
            cl.host(i, c.client),
            node.port,
            if me { "myself,master" } else { "master" },
            if me { 0 } else { c.now_ms },
            i + 1
        );
        for &(s, e) in &by[i] {
            if s == e {
                let _ = write!(text, " {s}");
            } else {
                let _ = write!(text, " {s}-{e}");
            }
        }
        text.push('\n');
    }
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// `CLUSTER MYID` → this node's id.
pub fn myid(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    c.w().bulk(cl.nodes[cl.me as usize].id.as_bytes());
    Ok(())
}

/// `CLUSTER INFO` → Redis's fields, as a bulk (RESP2) / verbatim `txt` (RESP3) string.
pub fn info(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let n = cl.nodes.len();
    // Masters serving at least one slot (with many instances some may own none).
    let size = ranges_by_instance(cl)
        .iter()
        .filter(|r| !r.is_empty())
        .count();
    let mut text = String::new();
    for (k, v) in [
        ("cluster_state", "ok".to_string()),
        ("cluster_slots_assigned", SLOTS.to_string()),
        ("cluster_slots_ok", SLOTS.to_string()),
        ("cluster_slots_pfail", "0".into()),
        ("cluster_slots_fail", "0".into()),
        ("cluster_known_nodes", n.to_string()),
        ("cluster_size", size.to_string()),
        ("cluster_current_epoch", n.to_string()),
        ("cluster_my_epoch", (cl.me + 1).to_string()),
        ("cluster_stats_messages_sent", "0".into()),
        ("cluster_stats_messages_received", "0".into()),
        ("total_cluster_links_buffer_limit_exceeded", "0".into()),
    ] {
        let _ = write!(text, "{k}:{v}\r\n");
    }
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// `CLUSTER KEYSLOT key` → the key's hash slot.
pub fn keyslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot::key_slot(c.argv[2]);
    c.w().integer(i64::from(s));
    Ok(())
}

/// A slot argument: an integer (else `ERR value is not an integer or out of range`).
fn slot_arg(arg: &[u8]) -> Result<i64, CmdError> {
    crate::args::int_arg(arg)
}

/// `CLUSTER COUNTKEYSINSLOT slot` → keys held here in `slot` (walks the keyspace).
pub fn countkeysinslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot_arg(c.argv[2])?;
    if !(0..i64::from(SLOTS)).contains(&s) {
        return Err(CmdError::Static("ERR Invalid slot"));
    }
    let n = (0..e.ks.len())
        .filter(|&i| i64::from(slot::key_slot(e.ks.get_at(i).0)) == s)
        .count();
    c.w().integer(n as i64);
    Ok(())
}

/// `CLUSTER GETKEYSINSLOT slot count` → up to `count` keys held here in `slot`.
pub fn getkeysinslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot_arg(c.argv[2])?;
    let max = slot_arg(c.argv[3])?;
    if !(0..i64::from(SLOTS)).contains(&s) || max < 0 {
        return Err(CmdError::Static("ERR Invalid slot or number of keys"));
    }
    let keys: Vec<usize> = (0..e.ks.len())
        .filter(|&i| i64::from(slot::key_slot(e.ks.get_at(i).0)) == s)
        .take(usize::try_from(max).unwrap_or(usize::MAX))
        .collect();
    let mut w = c.w();
    w.array(keys.len());
    for i in keys {
        w.bulk(e.ks.get_at(i).0);
    }
    Ok(())
}

/// `CLUSTER LINKS` → no links (there is no cluster bus).
pub fn links(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.w().array(0);
    Ok(())
}

/// The index of the node named `id`, or redis's `ERR Unknown node <id>`.
fn known_node(cl: &Cluster, id: &[u8]) -> Result<usize, CmdError> {
    cl.nodes
        .iter()
        .position(|n| n.id.as_bytes() == id)
        .ok_or_else(|| {
            CmdError::Other(format!(
                "ERR Unknown node {}",
                crate::error::c_str_lossy(id, 128)
            ))
        })
}

/// `CLUSTER REPLICAS|SLAVES node-id` → no replicas.
pub fn replicas(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    known_node(cluster_of(e)?, c.argv[2])?;
    c.w().array(0);
    Ok(())
}

/// `CLUSTER COUNT-FAILURE-REPORTS node-id` → 0.
pub fn count_failure_reports(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    known_node(cluster_of(e)?, c.argv[2])?;
    c.w().integer(0);
    Ok(())
}

/// `CLUSTER SAVECONFIG` → OK (the configuration is the topology; nothing to save).
pub fn saveconfig(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.w().ok();
    Ok(())
}

/// Subcommands that change the slot map or membership: the map is a function of the topology.
pub fn not_supported(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    Err(CmdError::Other(format!(
        "ERR CLUSTER {} is not supported: recached derives the slot map from the fleet \
         topology (see docs/cluster.md)",
        c.spec.short_name().to_uppercase()
    )))
}

/// `READONLY` → OK (sets the flag; there are no replicas).
pub fn readonly(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.readonly = true;
    c.w().ok();
    Ok(())
}

/// `READWRITE` → OK.
pub fn readwrite(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.readonly = false;
    c.w().ok();
    Ok(())
}

/// `ASKING` → OK.
pub fn asking(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.asking = true;
    c.w().ok();
    Ok(())
}

/// `CLUSTER HELP` → redis 7.0's text, trimmed to what recached answers.
pub fn help(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    const LINES: &[&str] = &[
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "    Output format is an array where each array element is a map containing attributes of a link",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(LINES.len());
    for l in LINES {
        w.simple(l.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Proto;

    fn engine(nodes: &[&str], index: usize) -> Engine {
        Engine::new(Config {
            cluster_nodes: nodes.iter().map(|s| s.to_string()).collect(),
            cluster_index: index,
            ..Config::default()
        })
    }

    fn run(e: &mut Engine, client: &mut Client, args: &[&str]) -> String {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        e.exec(client, &argv, 1_700_000_000_000_000, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn client() -> Client {
        Client {
            laddr: "10.1.2.3:7000".into(),
            ..Client::default()
        }
    }

    /// A key whose slot instance `i` of `n` owns, with the hash tag `{t<k>}`.
    fn key_on(i: u32, n: u32, skip: usize) -> String {
        (0..)
            .map(|k| format!("{{t{k}}}"))
            .filter(|k| slot::instance_for_key(k.as_bytes(), n) == i)
            .nth(skip)
            .unwrap()
    }

    /// Shard channels hash like keys: MOVED to the owner, CROSSSLOT across slots even when
    /// every slot is local (redis-server 7.0.15 in a cluster), local ones run; SUNSUBSCRIBE
    /// alone and PUBLISH stay keyless.
    #[test]
    fn shard_channels_are_routed_by_slot() {
        let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
        let mut e = engine(&nodes, 0);
        let mut c = client();
        let (l1, l2, r) = (key_on(0, 2, 0), key_on(0, 2, 1), key_on(1, 2, 0));
        let rs = slot::key_slot(r.as_bytes());
        let moved = format!("-MOVED {rs} 127.0.0.1:7001\r\n");
        let cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
        assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &r]), moved);
        assert_eq!(run(&mut e, &mut c, &["SPUBLISH", &r, "m"]), moved);
        assert_eq!(run(&mut e, &mut c, &["SUNSUBSCRIBE", &r]), moved);
        assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &l2]), cross);
        assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &r]), cross);
        assert_eq!(run(&mut e, &mut c, &["PUBLISH", &r, "m"]), ":0\r\n");
        let tagged = format!("{l1}x");
        assert_eq!(
            run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &tagged]),
            format!(
                "*3\r\n$10\r\nssubscribe\r\n${}\r\n{l1}\r\n:1\r\n\
                 *3\r\n$10\r\nssubscribe\r\n${}\r\n{tagged}\r\n:2\r\n",
                l1.len(),
                tagged.len()
            )
        );
        assert_eq!(
            run(&mut e, &mut c, &["SUNSUBSCRIBE", &l1]),
            format!(
                "*3\r\n$12\r\nsunsubscribe\r\n${}\r\n{l1}\r\n:1\r\n",
                l1.len()
            )
        );
        assert!(run(&mut e, &mut c, &["SUNSUBSCRIBE"]).starts_with("*3\r\n$12\r\nsunsubscribe"));
        // Standalone: every channel is local, nothing is checked.
        let mut st = Engine::new(Config::default());
        assert_eq!(run(&mut st, &mut c, &["SPUBLISH", &l1, "m"]), ":0\r\n");
    }

    #[test]
    fn node_ids_are_stable_hex_and_distinct() {
        let a = node_id("127.0.0.1:6400");
        assert_eq!(a.len(), 40);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(a, node_id("127.0.0.1:6400"));
        assert_ne!(a, node_id("127.0.0.1:6401"));
        // Pinned: an instance must keep its id across releases, not only across restarts.
        assert_eq!(a, "296f236d1334cbf2411394005eef19d3d25be02e");
    }

    #[test]
    fn standalone_answers_cluster_support_disabled() {
        let mut e = Engine::new(Config::default());
        let mut c = client();
        for cmd in [
            &["CLUSTER", "INFO"][..],
            &["CLUSTER", "SLOTS"],
            &["CLUSTER", "KEYSLOT", "foo"],
            &["CLUSTER", "HELP"],
            &["CLUSTER", "MEET", "a", "1"],
            &["READONLY"],
            &["READWRITE"],
            &["ASKING"],
        ] {
            assert_eq!(
                run(&mut e, &mut c, cmd),
                "-ERR This instance has cluster support disabled\r\n",
                "{cmd:?}"
            );
        }
        assert_eq!(
            run(&mut e, &mut c, &["CLUSTER", "NOSUCH"]),
            "-ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.\r\n"
        );
        // Owns everything.
        assert_eq!(
            run(&mut e, &mut c, &["MSET", "foo", "1", "bar", "2"]),
            "+OK\r\n"
        );
    }

    #[test]
    fn ownership_moved_crossslot_and_local_multislot() {
        let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
        let mut e0 = engine(&nodes, 0);
        let mut c = client();
        let (l1, l2) = (key_on(0, 2, 0), key_on(0, 2, 1));
        let (r1, r2) = (key_on(1, 2, 0), key_on(1, 2, 1));
        assert_ne!(slot::key_slot(l1.as_bytes()), slot::key_slot(l2.as_bytes()));
        assert_ne!(slot::key_slot(r1.as_bytes()), slot::key_slot(r2.as_bytes()));
        assert_eq!(run(&mut e0, &mut c, &["SET", &l1, "v"]), "+OK\r\n");
        let rs = slot::key_slot(r1.as_bytes());
        assert_eq!(
            run(&mut e0, &mut c, &["GET", &r1]),
            format!("-MOVED {rs} 127.0.0.1:7001\r\n")
        );
        // All keys here, several slots: runs (the proxy relies on it).
        assert_eq!(
            run(&mut e0, &mut c, &["MSET", &l1, "a", &l2, "b"]),
            "+OK\r\n"
        );
        // Remote, one slot (same key twice, or hash-tagged keys): MOVED.
        let tagged = format!("x{r1}");
        assert_eq!(
            run(&mut e0, &mut c, &["MGET", &r1, &tagged]),
            format!("-MOVED {rs} 127.0.0.1:7001\r\n")
        );
        // Remote across slots, and mixed local + remote: CROSSSLOT.
        let cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
        assert_eq!(run(&mut e0, &mut c, &["MGET", &r1, &r2]), cross);
        assert_eq!(run(&mut e0, &mut c, &["DEL", &l1, &r1]), cross);
        assert_eq!(run(&mut e0, &mut c, &["MSET", &r1, "1", &l1, "2"]), cross);
        // Keyless commands run locally.
        assert_eq!(run(&mut e0, &mut c, &["DBSIZE"]), ":2\r\n");
        // The other engine sees the mirror image.
        let mut e1 = engine(&nodes, 1);
        assert_eq!(run(&mut e1, &mut c, &["SET", &r1, "v"]), "+OK\r\n");
        let ls = slot::key_slot(l1.as_bytes());
        assert_eq!(
            run(&mut e1, &mut c, &["GET", &l1]),
            format!("-MOVED {ls} 127.0.0.1:7000\r\n")
        );
    }

    #[test]
    fn movable_keys_come_from_key_specs() {
        let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
        let mut e0 = engine(&nodes, 0);
        let mut c = client();
        let (l1, r1, r2) = (key_on(0, 2, 0), key_on(1, 2, 0), key_on(1, 2, 1));
        let cmd = |args: &[&str]| {
            let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let spec = crate::dispatch::resolve(&argv).unwrap().0;
            let mut out = Vec::new();
            let ok = redirect(&e0, &mut client(), spec, &argv, &mut out);
            (ok, String::from_utf8_lossy(&out).into_owned())
        };
        // ZUNIONSTORE dst numkeys key…: dst by index, sources by keynum.
        assert!(cmd(&["ZUNIONSTORE", &l1, "1", &l1]).0);
        assert!(
            cmd(&["ZUNIONSTORE", &l1, "1", &r1])
                .1
                .starts_with("-CROSSSLOT")
        );
        let (ok, out) = cmd(&["ZUNIONSTORE", &r1, "1", &r1, "WEIGHTS", "2"]);
        assert!(!ok && out.starts_with("-MOVED"), "{out}");
        // WEIGHTS values are not keys.
        assert!(cmd(&["ZUNIONSTORE", &l1, "1", &l1, "WEIGHTS", &r1]).0);
        // LMPOP numkeys key… LEFT; an invalid numkeys leaves the error to the handler.
        assert!(
            cmd(&["LMPOP", "2", &r1, &r2, "LEFT"])
                .1
                .starts_with("-CROSSSLOT")
        );
        assert!(cmd(&["LMPOP", "x", &r1, "LEFT"]).0);
        assert!(cmd(&["LMPOP", "5", &r1, "LEFT"]).0);
        assert!(cmd(&["BLMPOP", "0", "1", &l1, "LEFT"]).0);
        assert!(!cmd(&["BLMPOP", "0", "1", &r1, "LEFT"]).0);
        let _ = run(&mut e0, &mut c, &["PING"]);
    }

    #[test]
    fn wildcard_hosts_announce_the_clients_local_address() {
        let mut e = engine(&["0.0.0.0:7000", "0.0.0.0:7001"], 0);
        let mut c = client();
        let r1 = key_on(1, 2, 0);
        let rs = slot::key_slot(r1.as_bytes());
        assert_eq!(
            run(&mut e, &mut c, &["GET", &r1]),
            format!("-MOVED {rs} 10.1.2.3:7001\r\n")
        );
        let mut v6 = Client {
            laddr: "[::1]:7000".into(),
            ..Client::default()
        };
        assert_eq!(
            run(&mut e, &mut v6, &["GET", &r1]),
            format!("-MOVED {rs} ::1:7001\r\n")
        );
        let mut e = Engine::new(Config {
            cluster_nodes: vec!["0.0.0.0:7000".into(), "0.0.0.0:7001".into()],
            cluster_announce_host: "cache.example".into(),
            ..Config::default()
        });
        assert_eq!(
            run(&mut e, &mut c, &["GET", &r1]),
            format!("-MOVED {rs} cache.example:7001\r\n")
        );
    }

    #[test]
    fn slots_reply_shape_resp2_and_resp3() {
        let mut e = engine(&["127.0.0.1:7000", "127.0.0.1:7001"], 0);
        let mut c = client();
        let out = run(&mut e, &mut c, &["CLUSTER", "SLOTS"]);
        let id0 = node_id("127.0.0.1:7000");
        let ranges = slot::slot_ranges(2);
        assert!(out.starts_with(&format!(
            "*{}\r\n*3\r\n:0\r\n:255\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n{id0}\r\n*0\r\n*3\r\n:256\r\n:447\r\n",
            ranges.len()
        )), "{out}");
        c.proto = Proto::Resp3;
        let out = run(&mut e, &mut c, &["CLUSTER", "SLOTS"]);
        assert!(out.contains(&format!("{id0}\r\n%0\r\n")), "{out}");
    }

    #[test]
    fn info_nodes_shards_myid_keyslot_counts() {
        let mut e = engine(&["127.0.0.1:7000", "127.0.0.1:7001"], 1);
        let mut c = client();
        let info = run(&mut e, &mut c, &["CLUSTER", "INFO"]);
        assert!(info.starts_with("$"), "{info}");
        assert!(info.contains("\r\ncluster_state:ok\r\n"), "{info}");
        assert!(info.contains("cluster_known_nodes:2\r\n"), "{info}");
        assert!(info.contains("cluster_my_epoch:2\r\n"), "{info}");
        let id1 = node_id("127.0.0.1:7001");
        assert_eq!(
            run(&mut e, &mut c, &["CLUSTER", "MYID"]),
            format!("$40\r\n{id1}\r\n")
        );
        let nodes = run(&mut e, &mut c, &["CLUSTER", "NODES"]);
        assert!(
            nodes.contains(&format!(
                "{id1} 127.0.0.1:7001@0 myself,master - 0 0 2 connected 256-447 "
            )),
            "{nodes}"
        );
        assert!(
            nodes.contains(" master - 0 1700000000000 1 connected 0-255 448-639 "),
            "{nodes}"
        );
        let shards = run(&mut e, &mut c, &["CLUSTER", "SHARDS"]);
        assert!(
            shards.starts_with("*2\r\n*4\r\n$5\r\nslots\r\n*"),
            "{shards}"
        );
        assert!(
            shards.contains("$6\r\nhealth\r\n$6\r\nonline\r\n"),
            "{shards}"
        );
        c.proto = Proto::Resp3;
        assert!(run(&mut e, &mut c, &["CLUSTER", "INFO"]).starts_with("="));
        assert!(run(&mut e, &mut c, &["CLUSTER", "SHARDS"]).starts_with("*2\r\n%2\r\n"));
        c.proto = Proto::Resp2;
        assert_eq!(
            run(&mut e, &mut c, &["CLUSTER", "KEYSLOT", "foo"]),
            ":12182\r\n"
        );
        // Counting keys per slot (slot 12182 = foo's, owned by instance 0 for n = 2? either way
        // the count is of keys held here).
        let key = key_on(1, 2, 0);
        let s = slot::key_slot(key.as_bytes()).to_string();
        run(&mut e, &mut c, &["SET", &key, "1"]);
        run(&mut e, &mut c, &["SET", &format!("a{key}"), "1"]);
        assert_eq!(
            run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
            ":2\r\n"
        );
        let keys = run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
        assert!(keys.starts_with("*1\r\n"), "{keys}");
        assert_eq!(
            run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &s, "0"]),
            "*0\r\n"
        );
        for (args, err) in [
            (
                &["CLUSTER", "COUNTKEYSINSLOT", "x"][..],
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                &["CLUSTER", "COUNTKEYSINSLOT", "16384"],
                "-ERR Invalid slot\r\n",
            ),
            (
                &["CLUSTER", "COUNTKEYSINSLOT", "-1"],
                "-ERR Invalid slot\r\n",
            ),
            (
                &["CLUSTER", "GETKEYSINSLOT", "1", "-1"],
                "-ERR Invalid slot or number of keys\r\n",
            ),
            (
                &["CLUSTER", "GETKEYSINSLOT", "x", "1"],
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                &["CLUSTER", "KEYSLOT"],
                "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n",
            ),
            (
                &["READONLY", "x"],
                "-ERR wrong number of arguments for 'readonly' command\r\n",
            ),
        ] {
            assert_eq!(run(&mut e, &mut c, args), err, "{args:?}");
        }
        for cmd in ["READONLY", "READWRITE", "ASKING"] {
            assert_eq!(run(&mut e, &mut c, &[cmd]), "+OK\r\n");
        }
        assert!(
            run(&mut e, &mut c, &["CLUSTER", "MEET", "h", "1"])
                .starts_with("-ERR CLUSTER MEET is not supported")
        );
    }

    #[test]
    fn bad_topologies_are_refused() {
        let cfg = |nodes: &[&str], index| Config {
            cluster_nodes: nodes.iter().map(|s| s.to_string()).collect(),
            cluster_index: index,
            ..Config::default()
        };
        assert!(Cluster::from_config(&cfg(&["a:1", "a:1"], 0)).is_err());
        assert!(Cluster::from_config(&cfg(&["a:1"], 1)).is_err());
        assert!(Cluster::from_config(&cfg(&["a"], 0)).is_err());
        assert!(Cluster::from_config(&cfg(&["a:0"], 0)).is_err());
        assert!(Cluster::from_config(&cfg(&["a:x"], 0)).is_err());
        assert!(
            Cluster::from_config(&cfg(&["[::1]:7000", "b:2"], 1))
                .unwrap()
                .enabled()
        );
        assert!(!Cluster::from_config(&cfg(&[], 0)).unwrap().enabled());
    }
}
