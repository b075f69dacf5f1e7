//! The engine's part of a re-shard at start (docs/operations.md, "Changing the number of
//! engines"); the supervisor's part is `supervisor/src/reshard.rs`.
//!
//! When the supervisor finds snapshots written by a fleet of another layout, it renames them
//! to **staged files** `reshard-*.rcs` before starting any engine, so no engine can overwrite
//! a file another one still has to read, and starts each engine with `--reshard I/N`. Such an
//! engine ([`split_at_start`]):
//!
//! 1. reads every staged file, newest first (header `created_ms`), keeping the keys whose
//!    slot instance `I` of `N` owns (`engine_core::snapshot::reshard::Split`: TTLs, every
//!    database, the newest copy of a key, the newest file's FUNCTION libraries);
//! 2. saves its own `dump-<port>.rcs` (temp file, fsync, rename) **before serving**, so once
//!    that file exists the engine's keys no longer depend on the staged files; the supervisor
//!    deletes them when every such engine has saved.
//!
//! A staged file that does not load is logged with the reason and byte offset and copied to
//! `<name>.corrupt-<unix seconds>` (a hard link: every engine reads the same file, so none
//! may take it away from the others); then `on_corrupt_snapshot` decides as for an ordinary
//! snapshot (`start-empty`: go on without it; `refuse`: exit 78).
//!
//! After an ordinary load, [`report_foreign`] logs keys of slots this engine does not own
//! (a snapshot copied in from elsewhere): they are answered with `-MOVED` and never deleted
//! here, since their owner may not have them; `recached start --reshard` moves them.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use engine_core::Engine;
use engine_core::slot::instance_for_slot;
use engine_core::snapshot::reshard::{self as core, HEADER_LEN, Split};
use log::{error, info, warn};

use crate::snapshot::{OnCorrupt, SnapshotOptions, StartError};

/// Staged files are `reshard-<anything>.rcs` in the snapshot dir.
pub const STAGED_PREFIX: &str = "reshard-";
/// The extension of snapshots and staged files.
pub const EXT: &str = ".rcs";

/// The staged files in `dir`, by name.
pub fn staged_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir)? {
        let name = ent?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(STAGED_PREFIX) && name.ends_with(EXT) {
            out.push(dir.join(&*name));
        }
    }
    out.sort();
    Ok(out)
}

/// The `created_ms` in the header of the snapshot at `path`; `None` if it has no readable
/// header (its full load then says why).
pub fn file_created_ms(path: &Path) -> Option<u64> {
    let mut h = [0u8; HEADER_LEN];
    File::open(path).ok()?.read_exact(&mut h).ok()?;
    core::created_ms(&h)
}

/// Step 1 and 2 of the module docs. The snapshot hook must be installed (`load_at_start`).
pub fn split_at_start(
    engine: &mut Engine,
    opts: &SnapshotOptions,
    (index, count): (u32, u32),
    now_us: u64,
) -> Result<(), StartError> {
    let dir = opts.dir.as_deref().expect("split needs a snapshot dir");
    let dir = std::path::absolute(dir).map_err(StartError::Io)?;
    let t0 = Instant::now();
    let mut files: Vec<(u64, PathBuf)> = staged_files(&dir)
        .map_err(StartError::Io)?
        .into_iter()
        .map(|p| (file_created_ms(&p).unwrap_or(0), p))
        .collect();
    // Newest first: a key in several files keeps the newest copy.
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    info!(
        "re-sharding: instance {index} of {count} loads its slots from {} staged snapshot(s)",
        files.len()
    );
    let mut split = Split::new(engine);
    let owns = |slot: u16| instance_for_slot(slot, count) == index;
    for (_, path) in &files {
        let file = File::open(path).map_err(|e| {
            StartError::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        })?;
        let before = split.stats;
        match split.add(now_us / 1000, file, owns) {
            Ok(st) => info!(
                "  {}: {} keys read, {} kept here, {} of other instances, {} older copies, {} expired",
                path.display(),
                st.keys + st.expired,
                split.stats.kept - before.kept,
                split.stats.others - before.others,
                split.stats.older_copies - before.older_copies,
                st.expired
            ),
            Err(e) => {
                let kept = keep_aside(path, now_us / 1_000_000);
                error!(
                    "staged snapshot {} refused: {} at byte offset {}; {kept}",
                    path.display(),
                    e.reason,
                    e.offset
                );
                if opts.on_corrupt == OnCorrupt::Refuse {
                    return Err(StartError::Corrupt(format!(
                        "staged snapshot {} is corrupt ({e}); on_corrupt_snapshot = refuse",
                        path.display()
                    )));
                }
                warn!("on_corrupt_snapshot = start-empty: going on without it");
            }
        }
    }
    let st = split
        .finish(engine)
        .map_err(|e| StartError::Corrupt(format!("re-sharded snapshots refused: {e}")))?;
    let secs = t0.elapsed().as_secs_f64();
    info!(
        "re-sharded in {secs:.3}s: {} keys kept (slots of instance {index} of {count}), {} left \
         to the other instances, {} older copies dropped, {} expired; {} files, {} bytes \
         ({:.0} keys/s)",
        st.kept,
        st.others,
        st.older_copies,
        st.expired,
        st.files,
        st.bytes,
        (st.kept + st.others + st.older_copies) as f64 / secs.max(1e-9)
    );
    // Before serving: from here on this engine's keys live in its own snapshot.
    crate::snapshot::shutdown_with(engine, now_us, Some(true)).map_err(|e| {
        StartError::Io(io::Error::new(
            e.kind(),
            format!("saving the re-sharded snapshot: {e}"),
        ))
    })?;
    Ok(())
}

/// Hard-links a bad staged file to `<path>.corrupt-<ts>` (or `-N`); the file itself stays
/// for the other engines. Returns what happened, for the log line.
fn keep_aside(path: &Path, ts: u64) -> String {
    match crate::snapshot::link_aside(path, ts) {
        Ok(aside) => format!("kept as {}", aside.display()),
        Err(e) => format!("could not be kept aside: {e}"),
    }
}

/// After an ordinary load: logs keys this engine holds but does not own (see the module docs).
pub fn report_foreign(engine: &Engine, path: &Path) {
    let n = core::foreign_keys(engine);
    if n > 0 {
        warn!(
            "{n} keys in {} belong to slots of other instances: they answer -MOVED and are \
             kept here until a re-shard moves them (`recached start --reshard`, \
             docs/operations.md)",
            path.display()
        );
    }
}
