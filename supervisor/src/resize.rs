//! `recached resize N [--dir DIR | --config FILE]`: change the number of engines of a running
//! fleet, moving only the slots the slot map gives to another engine, while clients keep
//! working (issue 21, item 2; docs/operations.md, "Resizing a running fleet").
//!
//! # Steps
//!
//! 1. **Refusals, before anything changes.** An exclusive `flock` on `DIR/resize.lock`, held
//!    for the whole run (a second resize: `resize refused: another resize (pid P) is running on
//!    DIR`); a supervisor holding `DIR/recached.pid`; then the supervisor's own description
//!    (`describe`, `crate::fleet::control`): `cluster = true`, no explicit `nodes`, no re-shard
//!    at start still running. N == the current count with nothing left to finish: nothing to do.
//! 2. **A save on every engine** (`BGSAVE`, waited for), so every key that existed when the
//!    resize began is on disk.
//! 3. **Grow**: for each new engine `i`, `DIR/nodes-<port>.conf` (every node and slot owner, no
//!    slot of its own: `conf_for_new_node` from engine 0's `CLUSTER NODES`), then `grow`: the
//!    supervisor starts and supervises them. `CLUSTER MEET` of every node on every node that
//!    does not know it yet.
//! 4. **Moves** (`crate::slotmove`): the owner of each slot is read from the engines
//!    themselves (the node whose own `myself` line claims it; the target wins when two claim
//!    it, as after an interrupted commit); every slot whose owner differs from
//!    `instance_for_slot(slot, N)` moves to it. Slots left open by an interrupted resize
//!    (`MIGRATING`/`IMPORTING` in some engine's nodes.conf) are finished towards the target:
//!    **a re-run resumes, it never rolls back.** The moves go at `--pace` (`Pacer`). Then a
//!    checkpoint (a background save) on every destination
//!    and a sweep of keys on engines that do not own their slot.
//! 5. **Shrink**: `CLUSTER FORGET` of each retired engine on every remaining one; each retired
//!    engine must hold no key in any database; after [`RETIRE_GRACE`] (during which they
//!    answer `-MOVED` and every proxy refreshes its slot table), `retire`: the supervisor
//!    stops them and deletes their files.
//! 6. `DIR/layout` names the N-engine topology, so `recached start --engines N` on this dir
//!    is an ordinary start (each engine loads its `nodes-<port>.conf`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::fleet::control::{REPLY_FILE, REQUEST_FILE, Reply, Request};
use crate::slotmove::{ClusterView, GROUP, Mover, Node, bulk_text};
use crate::{DirArgs, Result, config, status};

/// The lock file in `dir`, held by a running resize.
pub const LOCK_FILE: &str = "resize.lock";
/// How long retired engines keep serving `-MOVED` before they stop: over twice the proxy's
/// periodic slot-table refresh (`recached_proxy::redirect::PERIODIC_REFRESH`, 1 s).
pub const RETIRE_GRACE: Duration = Duration::from_millis(2500);
/// How long the supervisor may take to answer a request (a retire waits for the engines'
/// `stop_timeout_ms` and their final save).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `CLUSTER MEET` may take to show on every node.
const MEET_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Args, Debug, Clone)]
pub struct ResizeArgs {
    /// The number of engines the fleet should run.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub engines: u16,
    /// Fraction of the time the move may keep the engines busy, in (0, 1]: after each slot,
    /// or group of slots, it sleeps (1 − pace) / pace times as long as the move took, leaving
    /// the rest to clients. 1 moves as fast as it can (as `redis-cli --cluster reshard` does).
    #[arg(long, default_value_t = DEFAULT_PACE, value_parser = parse_pace)]
    pub pace: f64,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub auth: status::AuthArgs,
}

/// `--pace`'s default: `scripts/bench-reshard.sh` measures it (docs/operations.md).
pub const DEFAULT_PACE: f64 = 0.25;

fn parse_pace(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!("{s}: the pace is a fraction in (0, 1], e.g. 0.25")),
    }
}

pub fn resize(args: &ResizeArgs) -> Result<ExitCode> {
    let n = args.engines as usize;
    let cfg = config::load(args.dir.config.as_deref())?;
    let dir = args.dir.dir.clone().unwrap_or(cfg.dir.clone());
    let dir = std::path::absolute(&dir).map_err(|e| format!("dir {}: {e}", dir.display()))?;
    let _lock = lock(&dir)?;
    let Some(sup_pid) = crate::pidfile::running_supervisor(&dir) else {
        return Err(format!(
            "resize refused: no fleet is running on {} (start it with `recached start`)",
            dir.display()
        ));
    };
    let info = request(&dir, sup_pid, "describe", 0)?;
    if !info.cluster {
        return Err(
            "resize refused: the fleet runs with cluster = false (engines that do not \
                    speak the cluster protocol cannot move slots)"
                .into(),
        );
    }
    if info.explicit_nodes {
        return Err(
            "resize refused: an explicit `nodes` topology (several hosts) is not \
                    supported yet"
                .into(),
        );
    }
    if info.reshard_running {
        return Err("resize refused: the re-shard of the last start is still running".into());
    }
    let login =
        status::login_with_config(&args.dir, &args.auth, info.config.as_deref().map(Path::new));
    let started = Instant::now();
    let current = info.engines;
    let mut mover = Mover::new(connect_nodes(&info.connect, &login));
    mover.ensure_all()?;
    if current == n && settled(&cluster_views(&mut mover)?, n) {
        println!(
            "recached: the fleet on {} already runs {n} engines",
            dir.display()
        );
        write_layout(&dir, &info.topology)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "recached: resizing the fleet on {} from {current} to {n} engines",
        dir.display()
    );
    for node in &mut mover.nodes {
        node.save_in_background()?;
    }
    mover.pacer = crate::slotmove::Pacer::new(args.pace);

    let mut topology = info.topology.clone();
    if n > current {
        let host = host_of(&topology[0]);
        let connect_host = host_of(&info.connect[0]);
        let base = info.engine_port_base;
        let nodes_text = bulk_text(&mover.nodes[0].ok(&["CLUSTER", "NODES"])?)?;
        for i in current..n {
            let port = base + i as u16;
            let addr = config::host_port(&host, port);
            let conf = conf_for_new_node(&nodes_text, &addr)?;
            write_durably(&dir.join(format!("nodes-{port}.conf")), &conf)?;
        }
        let reply = request(&dir, sup_pid, "grow", n)?;
        topology = reply.topology.clone();
        for i in current..n {
            mover
                .nodes
                .push(Node::new(&connect_host, base + i as u16, login.clone()));
        }
        mover.ensure_all()?;
        let started: Vec<String> = (current..n)
            .map(|i| format!("{i} (port {})", base + i as u16))
            .collect();
        println!("recached: started engine(s) {}", started.join(", "));
    }
    meet_all(&mut mover)?;

    // Owners as the engines see them, and the moves to the target map.
    let views = cluster_views(&mut mover)?;
    let owner = owners(&views, &mover, n);
    let target: Vec<usize> = (0..16384u16)
        .map(|s| engine_core::slot::instance_for_slot(s, n as u32) as usize)
        .collect();
    let mut plan: Vec<(u16, usize, usize)> = Vec::new();
    for s in 0..16384u16 {
        let (o, t) = (owner[s as usize], target[s as usize]);
        match o {
            Some(o) if o != t => plan.push((s, o, t)),
            None => mover.assign(s, t)?,
            Some(_) => {}
        }
    }
    let grouped = plan.len();
    // Slots left open by an interrupted run, already owned by their target: drain the other
    // side and close them.
    for (i, v) in views.iter().enumerate() {
        let Some(me) = v.myself() else { continue };
        for (s, _) in me.migrating.iter().chain(&me.importing) {
            let t = target[*s as usize];
            if owner[*s as usize] == Some(t) && !plan.iter().any(|p| p.0 == *s) {
                plan.push((*s, if i == t { t } else { i }, t));
            }
        }
    }
    let expected_moves = (0..16384u16)
        .filter(|&s| {
            engine_core::slot::instance_for_slot(s, current.max(1) as u32) as usize
                != target[s as usize]
        })
        .count();
    println!(
        "recached: {} slot(s) to move (the map from {current} to {n} engines moves {expected_moves})",
        plan.len()
    );
    let move_started = Instant::now();
    // Neighbouring slots with the same source and destination move as a group (`GROUP`,
    // `slotmove_group.rs`); the slots an interrupted run left open, one by one.
    let mut done = 0;
    let mut k = 0;
    while k < plan.len() {
        let (s, from, to) = plan[k];
        if from == to {
            mover.assign(s, to)?;
            k += 1;
            continue;
        }
        let mut end = k + 1;
        while end < (k + GROUP).min(grouped) && (plan[end].1, plan[end].2) == (from, to) {
            end += 1;
        }
        let slots: Vec<u16> = plan[k..end].iter().map(|p| p.0).collect();
        mover.move_slots(&slots, from, to)?;
        if (done + slots.len()) / 1024 > done / 1024 {
            println!(
                "recached: {} of {} slots moved, {} keys",
                done + slots.len(),
                plan.len(),
                mover.totals.keys
            );
        }
        done += slots.len();
        k = end;
    }
    let move_secs = move_started.elapsed().as_secs_f64();
    mover.checkpoint_all()?;
    mover.sweep(&target)?;
    mover.checkpoint_all()?;

    if n < current {
        let retired: Vec<(String, String)> = mover.nodes[n..]
            .iter()
            .map(|r| (r.id.clone(), r.addr()))
            .collect();
        for r in n..current {
            let dbs = mover.nodes[r].nonempty_dbs()?;
            if !dbs.is_empty() {
                return Err(format!(
                    "{} still holds keys in database(s) {dbs:?}; not retired (run resize again)",
                    mover.nodes[r].addr()
                ));
            }
        }
        for i in 0..n {
            let view = mover.nodes[i].cluster_nodes()?;
            for (id, _) in &retired {
                if view.nodes.iter().any(|l| &l.id == id) {
                    mover.nodes[i].ok(&["CLUSTER", "FORGET", id])?;
                }
            }
        }
        mover.nodes.truncate(n);
        // The retired engines keep answering -MOVED for their old slots a little longer:
        // proxies refresh their slot table at least every PERIODIC_REFRESH, so by the time
        // the engines stop none routes to them (cluster clients follow the -MOVED).
        std::thread::sleep(RETIRE_GRACE);
        let reply = request(&dir, sup_pid, "retire", n)?;
        topology = reply.topology;
        println!(
            "recached: retired {}",
            retired
                .iter()
                .map(|r| r.1.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    write_layout(&dir, &topology)?;
    let t = mover.totals;
    println!(
        "recached: the fleet on {} runs {n} engines: {} slot(s) and {} key(s) moved in {:.2}s \
         ({:.0} keys/s while moving; {:.2}s in all); {} key(s) kept on their destination, {} \
         restored after a restart, {} stray key(s) settled, {} retried slot attempt(s)",
        dir.display(),
        t.slots,
        t.keys,
        move_secs,
        t.keys as f64 / move_secs.max(1e-6),
        started.elapsed().as_secs_f64(),
        t.kept_on_destination,
        t.restored,
        t.strays,
        t.retries
    );
    Ok(ExitCode::SUCCESS)
}

/// `DIR/resize.lock`, locked exclusively and holding our pid; refused while another resize
/// holds it (the kernel drops the lock of a resize that died, so a stale file is taken over).
fn lock(dir: &Path) -> Result<Flock<File>> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("resize refused: {}: {e}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            let mut f: &File = &lock;
            let _ = f
                .set_len(0)
                .and_then(|_| f.rewind())
                .and_then(|_| f.write_all(format!("{}\n", std::process::id()).as_bytes()));
            Ok(lock)
        }
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(format!(
                "resize refused: another resize (pid {}) is running on {}",
                pid.trim(),
                dir.display()
            ))
        }
        Err((_, e)) => Err(format!("resize refused: {}: flock: {e}", path.display())),
    }
}

/// Writes a request, signals the supervisor and waits (bounded) for the reply to it.
fn request(dir: &Path, sup_pid: u32, op: &str, engines: usize) -> Result<Reply> {
    let id = format!("{}-{}", std::process::id(), crate::fleet::unix_ms());
    let req = Request {
        id: id.clone(),
        op: op.into(),
        engines,
    };
    let text = toml::to_string(&req).map_err(|e| e.to_string())?;
    write_durably(&dir.join(REQUEST_FILE), &text)?;
    if sup_pid == 0 {
        return Err("resize refused: the supervisor is still starting; try again".into());
    }
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGUSR1)
        .map_err(|e| format!("signalling the supervisor (pid {sup_pid}): {e}"))?;
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(t) = fs::read_to_string(dir.join(REPLY_FILE))
            && let Ok(reply) = toml::from_str::<Reply>(&t)
            && reply.id == id
        {
            if !reply.ok {
                return Err(reply.message);
            }
            return Ok(reply);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "the supervisor (pid {sup_pid}) did not answer the {op} request within {}s",
        REPLY_TIMEOUT.as_secs()
    ))
}

/// Temp file, fsync, rename, directory fsync.
fn write_durably(path: &Path, text: &str) -> Result<()> {
    let tmp: PathBuf = path.with_extension("tmp");
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(d) = path.parent() {
            File::open(d)?.sync_all()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    res.map_err(|e| format!("{}: {e}", path.display()))
}

fn write_layout(dir: &Path, topology: &[String]) -> Result<()> {
    crate::reshard::write_layout(
        dir,
        &crate::reshard::Layout {
            nodes: topology.to_vec(),
            staged_ms: 0,
        },
    )
    .map_err(|e| format!("{}: {e}", dir.join(crate::reshard::LAYOUT_FILE).display()))
}

fn host_of(addr: &str) -> String {
    engine_core::cmd::cluster::parse_node(addr)
        .map(|(h, _)| h)
        .unwrap_or_else(|_| "127.0.0.1".into())
}

fn connect_nodes(connect: &[String], login: &Option<Vec<u8>>) -> Vec<Node> {
    connect
        .iter()
        .filter_map(|a| engine_core::cmd::cluster::parse_node(a).ok())
        .map(|(h, p)| Node::new(&h, p, login.clone()))
        .collect()
}

fn cluster_views(mover: &mut Mover) -> Result<Vec<ClusterView>> {
    mover.nodes.iter_mut().map(|n| n.cluster_nodes()).collect()
}

/// Every slot claimed by exactly its target under N engines, nothing open, N nodes known.
fn settled(views: &[ClusterView], n: usize) -> bool {
    views.len() == n
        && views.iter().enumerate().all(|(i, v)| {
            v.nodes.len() == n
                && v.myself().is_some_and(|m| {
                    m.migrating.is_empty()
                        && m.importing.is_empty()
                        && m.slots.iter().all(|&s| {
                            engine_core::slot::instance_for_slot(s, n as u32) as usize == i
                        })
                        && m.slots.len()
                            == (0..16384u16)
                                .filter(|&s| {
                                    engine_core::slot::instance_for_slot(s, n as u32) as usize == i
                                })
                                .count()
                })
        })
}

/// The owner of each slot (node index): the node whose own `myself` line claims it; when
/// several do (an interrupted commit: the destination already claims it, the source still
/// does), the target under `n` engines wins if it is one of them, else one that is not
/// migrating it away.
fn owners(views: &[ClusterView], mover: &Mover, n: usize) -> Vec<Option<usize>> {
    let mut claims: Vec<Vec<usize>> = vec![Vec::new(); 16384];
    for (i, v) in views.iter().enumerate() {
        if let Some(m) = v.myself() {
            for &s in &m.slots {
                claims[s as usize].push(i);
            }
        }
    }
    let _ = mover;
    (0..16384u16)
        .map(|s| {
            let c = &claims[s as usize];
            let t = engine_core::slot::instance_for_slot(s, n as u32) as usize;
            if c.contains(&t) {
                return Some(t);
            }
            c.iter()
                .copied()
                .find(|&i| {
                    views[i]
                        .myself()
                        .is_some_and(|m| !m.migrating.iter().any(|(ms, _)| *ms == s))
                })
                .or(c.first().copied())
        })
        .collect()
}

/// `CLUSTER MEET` of every node on every node that does not list it yet; waits (bounded)
/// until each lists all of them.
fn meet_all(mover: &mut Mover) -> Result<()> {
    let addrs: Vec<(String, u16, String)> = mover
        .nodes
        .iter()
        .map(|n| (n.host.clone(), n.port, n.id.clone()))
        .collect();
    let deadline = Instant::now() + MEET_TIMEOUT;
    loop {
        let mut missing = 0;
        for i in 0..mover.nodes.len() {
            mover.ensure(i)?;
            let view = mover.nodes[i].cluster_nodes()?;
            for (host, port, id) in &addrs {
                if !view.nodes.iter().any(|l| &l.id == id) {
                    missing += 1;
                    mover.nodes[i].ok(&["CLUSTER", "MEET", host, &port.to_string()])?;
                }
            }
        }
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "CLUSTER MEET: the engines still do not all know each other after {}s",
                MEET_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The nodes.conf of a new engine `new_addr` that knows every node and slot owner of
/// `cluster_nodes` (a running engine's `CLUSTER NODES`) and owns no slot.
fn conf_for_new_node(cluster_nodes: &str, new_addr: &str) -> Result<String> {
    engine_core::cmd::cluster::conf::conf_for_new_node(cluster_nodes, new_addr)
}
