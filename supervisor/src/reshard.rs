//! Restarting a fleet with another engine count without stranding a key (issue 21, item 1;
//! docs/operations.md, "Changing the number of engines"). The engines' part is
//! `recached_server::reshard`.
//!
//! # Why
//!
//! An engine owns the slots its position in the topology gives it and loads
//! `dump-<port>.rcs`. Change the number of engines and the slot map changes: a key whose slot
//! moved would sit, unreadable, in an engine that answers `-MOVED` for it.
//!
//! # The layout file
//!
//! `dir/layout` records the topology (`host:port` of every instance, in order) the snapshots
//! in `dir` were written for, and `staged_ms`, the Unix ms at which a re-shard staged the
//! snapshots (0 = none in progress). Written with temp file + rename + directory fsync.
//!
//! # Deciding, before any engine starts ([`prepare`])
//!
//! - **Nothing staged.** The snapshots match when the layout file names this topology and
//!   every `dump-<port>.rcs` is a local engine's (without a layout file, an older dir: when the
//!   dump ports are exactly the local engines' ports). Then the start is ordinary. Otherwise
//!   (or with `start --reshard`) every `dump-*.rcs` is renamed to a staged
//!   `reshard-<port>.rcs`, the directory fsynced, and the layout written with `staged_ms` =
//!   now: every engine starts with `--reshard-split I/N` and loads its slots from all staged
//!   files. Renaming first means no engine can overwrite a file another still has to read.
//! - **Staged files present**: a re-shard was interrupted (supervisor killed, machine down).
//!   It is redone from the staged files. A `dump-<port>.rcs` written since `staged_ms` was
//!   saved by an engine that had finished its split: if the topology is the same and the
//!   engine is local, that engine starts ordinarily from it (it may hold writes made since)
//!   and only the others split again; for another topology, it is renamed to
//!   `dump-<port>.rcs.interrupted-<unix s>` (kept, not loaded: the writes made in those
//!   seconds between the split and the crash are not in the new fleet). A dump older than
//!   `staged_ms` was never staged (a crash mid-staging, or a file copied in): it is staged.
//!
//! # Finishing ([`finish`])
//!
//! A splitting engine saves `dump-<port>.rcs` before it serves. Once every splitting engine's
//! dump is newer than `staged_ms` ([`all_saved`]), the supervisor deletes the staged files,
//! fsyncs the directory and writes `staged_ms = 0`. An engine that crashes before saving is
//! restarted with the same flag and splits again; one that crashes after saving restarts from
//! its own snapshot, like any engine.
//!
//! Staging also deletes every `nodes-<port>.conf` (the slot table a live `recached resize`
//! or CLUSTER SETSLOT left): the split gives each engine the slots of the default map for
//! the new count, and an engine loading an older table over it would refuse its own keys.
//!
//! A topology with engines on other hosts is not re-sharded here (each host sees only its own
//! files; item 4 of issue 21): the start is ordinary and the engines log keys they do not own.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use recached_server::reshard::{EXT, STAGED_PREFIX, file_created_ms, staged_files};

/// The layout file's name in `dir`.
pub const LAYOUT_FILE: &str = "layout";

/// What `dir/layout` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub nodes: Vec<String>,
    /// When a re-shard staged the snapshots (Unix ms); 0 = none in progress.
    pub staged_ms: u64,
}

/// Reads `dir/layout`; `None` if it is missing or unreadable (an older dir).
pub fn read_layout(dir: &Path) -> Option<Layout> {
    let text = fs::read_to_string(dir.join(LAYOUT_FILE)).ok()?;
    let mut l = Layout::default();
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("nodes", v)) => l.nodes = v.split(',').map(|n| n.trim().to_string()).collect(),
            Some(("staged_ms", v)) => l.staged_ms = v.trim().parse().ok()?,
            _ => {}
        }
    }
    (!l.nodes.is_empty()).then_some(l)
}

/// Writes `dir/layout` atomically and durably.
pub fn write_layout(dir: &Path, l: &Layout) -> io::Result<()> {
    let tmp = dir.join(format!("{LAYOUT_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    write!(
        f,
        "# the fleet the snapshots in this dir belong to (written by recached start; \
         docs/operations.md)\nnodes {}\nstaged_ms {}\n",
        l.nodes.join(","),
        l.staged_ms
    )?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(LAYOUT_FILE))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `dump-<port>.rcs` files in `dir`, with their port.
fn dump_files(dir: &Path) -> io::Result<Vec<(u16, PathBuf)>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir)? {
        let name = ent?.file_name();
        let name = name.to_string_lossy();
        if let Some(port) = name
            .strip_prefix("dump-")
            .and_then(|r| r.strip_suffix(EXT))
            .and_then(|p| p.parse::<u16>().ok())
        {
            out.push((port, dir.join(&*name)));
        }
    }
    out.sort();
    Ok(out)
}

/// Renames `path` (a `dump-<port>.rcs`) to a free staged name, `reshard-<port>.rcs` or
/// `reshard-<port>-<n>.rcs`, never replacing a staged file.
fn stage(dir: &Path, port: u16, path: &Path) -> io::Result<PathBuf> {
    for n in 0..1000 {
        let to = if n == 0 {
            dir.join(format!("{STAGED_PREFIX}{port}{EXT}"))
        } else {
            dir.join(format!("{STAGED_PREFIX}{port}-{n}{EXT}"))
        };
        // A hard link fails if the target exists (rename would replace it).
        match fs::hard_link(path, &to) {
            Ok(()) => {
                fs::remove_file(path)?;
                return Ok(to);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many staged snapshots of one port"))
}

/// What the start has to do: the local engine ports that must split (empty = an ordinary
/// start) and the layout's `staged_ms`.
#[derive(Debug, Default)]
pub struct Plan {
    /// A re-shard is in progress: [`finish`] once [`all_saved`].
    pub active: bool,
    pub split: BTreeSet<u16>,
    pub staged_ms: u64,
}

/// See the module docs. `topology`: every instance in order; `local`: this machine's
/// engine ports; `force`: `start --reshard`; `now_ms`: the clock.
pub fn prepare(
    dir: &Path,
    topology: &[String],
    local: &[u16],
    force: bool,
    now_ms: u64,
) -> io::Result<Plan> {
    let staged = staged_files(dir)?;
    let dumps = dump_files(dir)?;
    let layout = read_layout(dir);
    let local_set: BTreeSet<u16> = local.iter().copied().collect();
    if local.len() != topology.len() {
        if !staged.is_empty() || force {
            log::error!(
                "snapshots are not re-sharded for a topology with engines on other hosts; \
                 staged files stay in {}",
                dir.display()
            );
        }
        return Ok(Plan::default());
    }
    let this = Layout {
        nodes: topology.to_vec(),
        staged_ms: 0,
    };
    if staged.is_empty() {
        let dump_ports: BTreeSet<u16> = dumps.iter().map(|(p, _)| *p).collect();
        let matches = match &layout {
            Some(l) => l.nodes == topology && dump_ports.is_subset(&local_set),
            None => dumps.is_empty() || dump_ports == local_set,
        };
        if (matches && !force) || dumps.is_empty() {
            if layout.as_ref() != Some(&this) {
                write_layout(dir, &this)?;
            }
            return Ok(Plan::default());
        }
        for (port, path) in &dumps {
            let to = stage(dir, *port, path)?;
            log::info!("re-shard: staged {} as {}", path.display(), to.display());
        }
        remove_node_confs(dir)?;
        sync_dir(dir)?;
        write_layout(
            dir,
            &Layout {
                staged_ms: now_ms,
                ..this
            },
        )?;
        log::warn!(
            "re-sharding {} snapshot(s) written for {} into {} engines ({})",
            dumps.len(),
            layout
                .as_ref()
                .map(|l| format!("{} instances", l.nodes.len()))
                .unwrap_or_else(|| "another layout".into()),
            topology.len(),
            if force {
                "--reshard"
            } else {
                "the layout changed"
            }
        );
        return Ok(Plan {
            active: true,
            split: local_set,
            staged_ms: now_ms,
        });
    }
    // An interrupted re-shard.
    let prev = layout.unwrap_or_default();
    let same = prev.nodes == topology && prev.staged_ms > 0;
    let mut done = BTreeSet::new();
    for (port, path) in &dumps {
        let created = file_created_ms(path).unwrap_or(0);
        if prev.staged_ms > 0 && created >= prev.staged_ms {
            if same && local_set.contains(port) {
                done.insert(*port);
                continue;
            }
            let aside =
                path.with_file_name(format!("dump-{port}{EXT}.interrupted-{}", now_ms / 1000));
            fs::rename(path, &aside)?;
            log::warn!(
                "re-shard: {} was written by an interrupted re-shard into another layout; \
                 kept as {} (not loaded)",
                path.display(),
                aside.display()
            );
        } else {
            let to = stage(dir, *port, path)?;
            log::info!("re-shard: staged {} as {}", path.display(), to.display());
        }
    }
    remove_node_confs(dir)?;
    sync_dir(dir)?;
    let staged_ms = if same {
        prev.staged_ms
    } else {
        write_layout(
            dir,
            &Layout {
                staged_ms: now_ms,
                ..this
            },
        )?;
        now_ms
    };
    let split: BTreeSet<u16> = local_set.difference(&done).copied().collect();
    log::warn!(
        "re-shard interrupted before: redoing it from {} staged snapshot(s) on {} engine(s) \
         ({} had finished)",
        staged_files(dir)?.len(),
        split.len(),
        done.len()
    );
    Ok(Plan {
        active: true,
        split,
        staged_ms,
    })
}

/// Deletes every `nodes-<port>.conf` (the slot table a `recached resize` or CLUSTER SETSLOT
/// left): a re-shard at start gives every slot to its owner under the default map of the new
/// count, and an engine that loaded an older table over it would refuse keys it was given.
fn remove_node_confs(dir: &Path) -> io::Result<()> {
    for ent in fs::read_dir(dir)? {
        let name = ent?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("nodes-") && name.ends_with(".conf") {
            fs::remove_file(dir.join(&*name))?;
            log::info!("re-shard: removed the slot table {name} (the new layout's map applies)");
        }
    }
    Ok(())
}

/// Whether the engine on `port` has saved its snapshot since `staged_ms` (so it has finished
/// its split).
pub fn saved(dir: &Path, port: u16, staged_ms: u64) -> bool {
    file_created_ms(&dir.join(format!("dump-{port}{EXT}"))).is_some_and(|c| c >= staged_ms)
}

/// Whether every port in `split` has [`saved`].
pub fn all_saved(dir: &Path, split: &BTreeSet<u16>, staged_ms: u64) -> bool {
    split.iter().all(|&port| saved(dir, port, staged_ms))
}

/// Deletes the staged files and marks the layout settled; returns how many were deleted.
pub fn finish(dir: &Path, topology: &[String]) -> io::Result<usize> {
    let staged = staged_files(dir)?;
    for f in &staged {
        fs::remove_file(f)?;
    }
    sync_dir(dir)?;
    write_layout(
        dir,
        &Layout {
            nodes: topology.to_vec(),
            staged_ms: 0,
        },
    )?;
    Ok(staged.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("recached-reshard-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file with a snapshot header written at `created_ms` (all `prepare` reads).
    fn dump(dir: &Path, name: &str, created_ms: u64) {
        let mut h = b"RECACHED".to_vec();
        h.extend_from_slice(&2u32.to_le_bytes());
        h.extend_from_slice(&created_ms.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes());
        fs::write(dir.join(name), h).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != LAYOUT_FILE)
            .collect();
        v.sort();
        v
    }

    fn topo(n: u16) -> (Vec<String>, Vec<u16>) {
        let ports: Vec<u16> = (0..n).map(|i| 7000 + i).collect();
        (
            ports.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
            ports,
        )
    }

    #[test]
    fn same_layout_is_an_ordinary_start_and_another_count_stages_every_dump() {
        let d = tmp("plain");
        let (t2, p2) = topo(2);
        // An older dir without a layout file, dumps of exactly the local ports: ordinary.
        dump(&d, "dump-7000.rcs", 10);
        dump(&d, "dump-7001.rcs", 10);
        let plan = prepare(&d, &t2, &p2, false, 100).unwrap();
        assert!(!plan.active && plan.split.is_empty());
        assert_eq!(read_layout(&d).unwrap().nodes, t2);
        // Three engines now: both dumps staged, every engine splits, and the slot tables a
        // live resize left are gone (the default map of 3 applies).
        fs::write(d.join("nodes-7000.conf"), "x").unwrap();
        let (t3, p3) = topo(3);
        let plan = prepare(&d, &t3, &p3, false, 200).unwrap();
        assert!(plan.active);
        assert_eq!(plan.split, p3.iter().copied().collect());
        assert_eq!(names(&d), ["reshard-7000.rcs", "reshard-7001.rcs"]);
        assert_eq!(
            read_layout(&d).unwrap(),
            Layout {
                nodes: t3.clone(),
                staged_ms: 200
            }
        );
        // Not finished until every splitting engine saved after staging.
        dump(&d, "dump-7000.rcs", 250);
        dump(&d, "dump-7001.rcs", 250);
        assert!(!all_saved(&d, &plan.split, plan.staged_ms));
        dump(&d, "dump-7002.rcs", 260);
        assert!(all_saved(&d, &plan.split, plan.staged_ms));
        assert_eq!(finish(&d, &t3).unwrap(), 2);
        assert_eq!(
            names(&d),
            ["dump-7000.rcs", "dump-7001.rcs", "dump-7002.rcs"]
        );
        assert_eq!(read_layout(&d).unwrap().staged_ms, 0);
        assert!(!prepare(&d, &t3, &p3, false, 300).unwrap().active);
        // --reshard stages even a matching layout.
        assert!(prepare(&d, &t3, &p3, true, 400).unwrap().active);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn an_interrupted_reshard_is_redone_keeping_engines_that_finished() {
        let d = tmp("interrupted");
        let (t3, p3) = topo(3);
        dump(&d, "reshard-7000.rcs", 10);
        dump(&d, "reshard-7001.rcs", 10);
        write_layout(
            &d,
            &Layout {
                nodes: t3.clone(),
                staged_ms: 100,
            },
        )
        .unwrap();
        // Engine 1 had saved its split; a dump older than staging was copied in later.
        dump(&d, "dump-7001.rcs", 150);
        dump(&d, "dump-7002.rcs", 50);
        let plan = prepare(&d, &t3, &p3, false, 500).unwrap();
        assert!(plan.active);
        assert_eq!(plan.split, [7000, 7002].into_iter().collect());
        assert_eq!(plan.staged_ms, 100);
        assert_eq!(
            names(&d),
            [
                "dump-7001.rcs",
                "reshard-7000.rcs",
                "reshard-7001.rcs",
                "reshard-7002.rcs"
            ]
        );
        // Restarted with another count instead: the finished engine's dump is kept aside,
        // never loaded, and everything splits again from the staged files.
        let (t2, p2) = topo(2);
        let plan = prepare(&d, &t2, &p2, false, 9_000).unwrap();
        assert_eq!(plan.split, p2.iter().copied().collect());
        assert_eq!(plan.staged_ms, 9_000);
        assert_eq!(
            names(&d),
            [
                "dump-7001.rcs.interrupted-9",
                "reshard-7000.rcs",
                "reshard-7001.rcs",
                "reshard-7002.rcs"
            ]
        );
        // A staged name is never replaced.
        dump(&d, "dump-7000.rcs", 1);
        prepare(&d, &t2, &p2, false, 10_000).unwrap();
        assert!(names(&d).contains(&"reshard-7000-1.rcs".to_string()));
        let _ = fs::remove_dir_all(&d);
    }
}
