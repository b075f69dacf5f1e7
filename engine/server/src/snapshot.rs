//! Snapshot I/O of the engine process: load at start, SAVE, BGSAVE (fork), the periodic save,
//! and the final save on a graceful shutdown. The format is `engine_core::snapshot`'s; this
//! module owns files, fork, fsync and the clock. See docs/persistence.md.
//!
//! # Files
//!
//! `dir/dump-<port>.rcs`: one file per engine, named by its port, so restarting the same fleet
//! over the same dir gives every instance its own data back (an instance owns the slots its
//! position in the topology gives it, and its port names that position).
//!
//! Writing (redis `rdbSave`): `dump-<port>.rcs.tmp` (foreground) or `dump-<port>.rcs.bgtmp`
//! (the BGSAVE child), written in 256 KiB chunks, `fsync`ed, renamed over the snapshot, then
//! the directory is `fsync`ed so the rename itself survives a power cut. A reader therefore
//! sees the old file or the new one, never half of one.
//!
//! # Load at start
//!
//! A missing file = empty keyspace. A file that fails to load (truncated, bad checksum,
//! unknown version, …) is logged with its path, the reason and the byte offset, and renamed
//! to `dump-<port>.rcs.corrupt-<unix seconds>` (a `-N` suffix if that exists: never
//! overwritten). Then, per `on_corrupt_snapshot`: `start-empty` serves an empty keyspace;
//! `refuse` exits with status [`EXIT_CORRUPT_SNAPSHOT`] (78, sysexits `EX_CONFIG`), which the
//! supervisor does not restart, since an automatic restart would find no file and come up
//! empty, the very thing `refuse` is for.
//!
//! # BGSAVE
//!
//! `fork()`: the child has a copy-on-write image of the keyspace as of the fork, serializes
//! it, renames the file and `_exit`s with 0 (or 1 on any error; it writes no log, it only
//! reports through its status). The parent keeps serving and reaps the child with
//! `waitpid(WNOHANG)` on its `hz` timer ([`cron`]); only then does it count the save
//! (`rdb_changes_since_last_save` drops by the changes made before the fork, as in Redis
//! `backgroundSaveDoneHandler`). One child at a time: BGSAVE while one runs answers
//! `-ERR Background save already in progress` (or, with SCHEDULE, runs once it ends).
//!
//! # Periodic and shutdown saves
//!
//! `save_interval` seconds (0 = never) and `save_changes` changes (at least 1): a BGSAVE starts
//! when both have passed since the last save (Redis `save <seconds> <changes>`). After a failed
//! background save the next periodic try waits [`RETRY_DELAY_US`] (Redis
//! `CONFIG_BGSAVE_RETRY_DELAY`). On SIGTERM/SIGINT a running child is killed and a foreground
//! save is made if anything changed since the last one (Redis `prepareForShutdown`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use engine_core::Engine;
use engine_core::snapshot::{self as format, Persistence};
use log::{error, info, warn};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// Exit status of an engine that refused to start over a corrupt snapshot (sysexits
/// `EX_CONFIG`); the supervisor does not restart it.
pub const EXIT_CORRUPT_SNAPSHOT: i32 = 78;
/// Wait after a failed background save before the next periodic try, µs.
pub const RETRY_DELAY_US: u64 = 5_000_000;
/// How much nicer than the engine a BGSAVE child runs (Linux `nice`): at +10 its CPU weight is
/// about a tenth of the engine's, so on busy cores the engines and the proxy go first and the
/// save uses what they leave (a save on saturated cores takes longer, never stops).
pub const CHILD_NICE: i32 = 10;

/// What to do when the snapshot at start cannot be loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCorrupt {
    /// Move it aside and serve an empty keyspace.
    #[default]
    StartEmpty,
    /// Move it aside and exit with [`EXIT_CORRUPT_SNAPSHOT`].
    Refuse,
}

impl OnCorrupt {
    /// `start-empty` | `refuse` (the config values).
    pub fn parse(s: &str) -> Option<OnCorrupt> {
        match s {
            "start-empty" => Some(OnCorrupt::StartEmpty),
            "refuse" => Some(OnCorrupt::Refuse),
            _ => None,
        }
    }
}

/// Snapshot settings of one engine.
#[derive(Clone, Debug, Default)]
pub struct SnapshotOptions {
    /// Directory of `dump-<port>.rcs`; `None` = snapshots disabled (SAVE/BGSAVE answer an
    /// error, nothing is loaded or written).
    pub dir: Option<PathBuf>,
    /// Seconds between periodic saves; 0 = no periodic save.
    pub save_interval: u64,
    /// Changes needed for a periodic save (0 is taken as 1).
    pub save_changes: u64,
    pub on_corrupt: OnCorrupt,
    /// `Some((index, count))`: the supervisor staged the snapshots of a fleet of another size
    /// (`reshard-*.rcs`); load all of them keeping instance `index` of `count`'s slots, and
    /// save before serving, instead of loading `dump-<port>.rcs` (`crate::reshard`).
    pub split: Option<(u32, u32)>,
}

/// Why [`load_at_start`] stops the start.
#[derive(Debug)]
pub enum StartError {
    /// `on_corrupt_snapshot = "refuse"` and the file was bad (already moved aside).
    Corrupt(String),
    Io(io::Error),
}

/// A running BGSAVE child.
struct BgChild {
    pid: Pid,
    started_us: u64,
    /// `engine.dirty()` at the fork: what the snapshot contains.
    dirty_at_fork: u64,
}

/// The engine's snapshot machinery; lives in `Engine::persistence` (see the core's
/// [`Persistence`]).
pub struct Snapshots {
    dir: PathBuf,
    path: PathBuf,
    tmp: PathBuf,
    bg_tmp: PathBuf,
    child: Option<BgChild>,
    /// BGSAVE SCHEDULE arrived while a child ran.
    scheduled: bool,
    /// When the last background save failed, µs (periodic retry delay).
    failed_at_us: Option<u64>,
}

/// `dir/dump-<port>.rcs`.
pub fn snapshot_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("dump-{port}.rcs"))
}

/// Installs the snapshot hook into `engine` and loads `dump-<port>.rcs` if it exists.
/// Nothing happens when `opts.dir` is `None`.
pub fn load_at_start(
    engine: &mut Engine,
    opts: &SnapshotOptions,
    port: u16,
    now_us: u64,
) -> Result<(), StartError> {
    let Some(dir) = &opts.dir else {
        info!("snapshots disabled (no dir)");
        return Ok(());
    };
    fs::create_dir_all(dir).map_err(|e| {
        StartError::Io(io::Error::new(
            e.kind(),
            format!("snapshot dir {}: {e}", dir.display()),
        ))
    })?;
    let dir = std::path::absolute(dir).map_err(StartError::Io)?;
    let path = snapshot_path(&dir, port);
    let snaps = Snapshots {
        tmp: path.with_extension("rcs.tmp"),
        bg_tmp: path.with_extension("rcs.bgtmp"),
        path: path.clone(),
        dir,
        child: None,
        scheduled: false,
        failed_at_us: None,
    };
    // A temp file left by a crash mid-save is garbage, never a snapshot.
    let _ = fs::remove_file(&snaps.tmp);
    let _ = fs::remove_file(&snaps.bg_tmp);
    engine.persist.enabled = true;
    engine.persist.save_interval = opts.save_interval;
    engine.persist.save_changes = opts.save_changes;
    engine.persistence = Some(Box::new(snaps));
    if let Some(split) = opts.split {
        return crate::reshard::split_at_start(engine, opts, split, now_us);
    }
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            info!("no snapshot at {}: starting empty", path.display());
            return Ok(());
        }
        Err(e) => {
            return Err(StartError::Io(io::Error::new(
                e.kind(),
                format!("snapshot {}: {e}", path.display()),
            )));
        }
    };
    let t0 = std::time::Instant::now();
    match format::load(engine, now_us / 1000, file) {
        Ok(st) => {
            let secs = t0.elapsed().as_secs_f64();
            info!(
                "loaded snapshot {}: {} keys ({} expired skipped), {} bytes in {:.3}s ({:.0} keys/s, {:.1} MB/s)",
                path.display(),
                st.keys,
                st.expired,
                st.bytes,
                secs,
                st.keys as f64 / secs.max(1e-9),
                st.bytes as f64 / 1e6 / secs.max(1e-9)
            );
            engine.persist.last_snapshot_bytes = st.bytes;
            engine.persist.last_save_time = st.created_ms / 1000;
            crate::reshard::report_foreign(engine, &path);
            Ok(())
        }
        Err(e) => {
            let aside = move_aside(&path, now_us / 1_000_000);
            let where_ = match &aside {
                Ok(p) => format!("moved aside to {}", p.display()),
                Err(err) => format!("could not be moved aside: {err}"),
            };
            error!(
                "snapshot {} refused: {} at byte offset {}; {where_}",
                path.display(),
                e.reason,
                e.offset
            );
            match opts.on_corrupt {
                OnCorrupt::StartEmpty => {
                    warn!("on_corrupt_snapshot = start-empty: serving an empty keyspace");
                    Ok(())
                }
                OnCorrupt::Refuse => Err(StartError::Corrupt(format!(
                    "snapshot {} is corrupt ({e}); on_corrupt_snapshot = refuse",
                    path.display()
                ))),
            }
        }
    }
}

/// Renames `path` to `path.corrupt-<ts>` (or `…-<ts>-N`), never replacing an existing file.
fn move_aside(path: &Path, ts: u64) -> io::Result<PathBuf> {
    let aside = link_aside(path, ts)?;
    fs::remove_file(path)?;
    Ok(aside)
}

/// Hard-links `path` to `path.corrupt-<ts>` (or `…-<ts>-N`, the first name free): a hard
/// link fails if the target exists, where a rename would silently replace it.
pub(crate) fn link_aside(path: &Path, ts: u64) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 0..1000 {
        let aside = if n == 0 {
            path.with_file_name(format!("{name}.corrupt-{ts}"))
        } else {
            path.with_file_name(format!("{name}.corrupt-{ts}-{n}"))
        };
        match fs::hard_link(path, &aside) {
            Ok(()) => return Ok(aside),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many corrupt snapshots kept aside"))
}

/// Writes the snapshot to `tmp`, fsyncs it, renames it to `path` and fsyncs `dir`.
fn write_file(
    engine: &Engine,
    now_ms: u64,
    tmp: &Path,
    path: &Path,
    dir: &Path,
) -> io::Result<u64> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    // Redis's `rdb-key-save-delay` (`debugDelay`): tests hold a save open with it.
    let delay = engine_core::cmd::config_stored::integer(&engine.config, "rdb-key-save-delay");
    let mut n = 0u64;
    let st = format::write_paced(engine, now_ms, &mut f, &mut || {
        n += 1;
        let usec = match delay {
            0 => return,
            d if d > 0 => d as u64,
            // 1 µs for one key in -d (a cheap counter instead of Redis's rand()).
            d => u64::from(n.is_multiple_of(d.unsigned_abs())),
        };
        if usec > 0 {
            std::thread::sleep(std::time::Duration::from_micros(usec));
        }
    })?;
    f.sync_all()?;
    drop(f);
    fs::rename(tmp, path)?;
    File::open(dir)?.sync_all()?;
    Ok(st.bytes)
}

impl Snapshots {
    fn record_save(&self, engine: &mut Engine, now_us: u64, dirty: u64, bytes: u64) {
        let p = &mut engine.persist;
        // Any successful save lifts MISCONF (redis `rdbSave` sets `lastbgsave_status` ok).
        p.last_bgsave_failed = false;
        p.dirty_at_last_save = dirty;
        p.last_save_time = now_us / 1_000_000;
        p.saves += 1;
        p.last_snapshot_bytes = bytes;
    }

    /// Foreground save (SAVE, shutdown).
    fn save_now(&mut self, engine: &mut Engine, now_us: u64) -> io::Result<()> {
        let t0 = std::time::Instant::now();
        let dirty = engine.dirty();
        match write_file(engine, now_us / 1000, &self.tmp, &self.path, &self.dir) {
            Ok(bytes) => {
                info!(
                    "DB saved on disk: {} ({} keys, {bytes} bytes, {:.3}s)",
                    self.path.display(),
                    engine.dbsize(),
                    t0.elapsed().as_secs_f64()
                );
                self.record_save(engine, now_us, dirty, bytes);
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&self.tmp);
                error!("Failed saving the DB to {}: {e}", self.path.display());
                Err(e)
            }
        }
    }

    /// Forks the BGSAVE child (at [`CHILD_NICE`]).
    fn start_bgsave(&mut self, engine: &mut Engine, now_us: u64) -> Result<(), String> {
        let dirty = engine.dirty();
        // SAFETY: the engine process is single-threaded (mio loop, signal-hook's self-pipe
        // needs no thread), so the child inherits no lock held by another thread. The child
        // only reads the keyspace, writes and renames its file, and leaves with `_exit`,
        // running no destructor, atexit handler or stdio flush of the parent's state.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                // Like Redis's `closeChildUnusedResourceAfterFork`: drop every inherited
                // descriptor (the listener, client sockets) so a port or a connection never
                // outlives the engine because a saving child still holds it; and die with
                // the engine, so an orphan never renames a file under a restarted engine.
                // SAFETY: plain system calls on descriptors this process no longer uses.
                unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                // Below the engines and the proxy (`CHILD_NICE`): the save takes idle cycles,
                // not the clients' (a child at the engine's priority raised the p99 of a
                // half-peak load sixfold on 2 cores; scripts/bench-reshard.sh).
                // SAFETY: a plain system call on this process; its result (the new nice
                // value, or -1 when it cannot be raised) does not matter.
                unsafe { libc::nice(CHILD_NICE) };
                let code =
                    match write_file(engine, now_us / 1000, &self.bg_tmp, &self.path, &self.dir) {
                        Ok(_) => 0,
                        Err(_) => {
                            let _ = fs::remove_file(&self.bg_tmp);
                            1
                        }
                    };
                // SAFETY: `_exit` is async-signal-safe and ends the child at once.
                unsafe { libc::_exit(code) }
            }
            Ok(ForkResult::Parent { child }) => {
                info!("Background saving started by pid {child}");
                self.child = Some(BgChild {
                    pid: child,
                    started_us: now_us,
                    dirty_at_fork: dirty,
                });
                engine.persist.bgsave_in_progress = true;
                engine.persist.current_bgsave_started = now_us / 1_000_000;
                Ok(())
            }
            Err(e) => {
                error!("Can't save in background: fork: {e}");
                engine.persist.last_bgsave_failed = true;
                self.failed_at_us = Some(now_us);
                Err(format!("ERR Background save failed: fork: {e}"))
            }
        }
    }

    /// Reaps a finished child (non-blocking).
    fn reap(&mut self, engine: &mut Engine, now_us: u64) {
        let Some(c) = &self.child else {
            return;
        };
        let status = match waitpid(c.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return,
            Ok(s) => s,
            Err(e) => {
                error!("waitpid on the background save child {}: {e}", c.pid);
                return;
            }
        };
        let c = self.child.take().expect("checked above");
        let p = &mut engine.persist;
        p.bgsave_in_progress = false;
        p.last_bgsave_time_sec = (now_us.saturating_sub(c.started_us) / 1_000_000) as i64;
        if matches!(status, WaitStatus::Exited(_, 0)) {
            let bytes = fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
            info!(
                "Background saving terminated with success: {} ({bytes} bytes, {:.3}s)",
                self.path.display(),
                now_us.saturating_sub(c.started_us) as f64 / 1e6
            );
            engine.persist.last_bgsave_failed = false;
            self.failed_at_us = None;
            self.record_save(engine, now_us, c.dirty_at_fork, bytes);
        } else {
            error!("Background saving failed: child {status:?}");
            let _ = fs::remove_file(&self.bg_tmp);
            engine.persist.last_bgsave_failed = true;
            self.failed_at_us = Some(now_us);
        }
    }

    /// One timer tick: reap, run a scheduled BGSAVE, start a periodic one when due.
    fn tick(&mut self, engine: &mut Engine, now_us: u64) {
        self.reap(engine, now_us);
        if self.child.is_some() {
            return;
        }
        if self.scheduled {
            self.scheduled = false;
            let _ = self.start_bgsave(engine, now_us);
            return;
        }
        let (interval, min_changes) = (engine.persist.save_interval, engine.persist.save_changes);
        if interval == 0 {
            return;
        }
        let changes = engine
            .dirty()
            .saturating_sub(engine.persist.dirty_at_last_save);
        let last = if engine.persist.last_save_time == 0 {
            engine.host.started_us
        } else {
            engine.persist.last_save_time * 1_000_000
        };
        let due = changes >= min_changes.max(1)
            && now_us.saturating_sub(last) >= interval.saturating_mul(1_000_000)
            && self
                .failed_at_us
                .is_none_or(|t| now_us.saturating_sub(t) >= RETRY_DELAY_US);
        if due {
            info!("{changes} changes in {interval} seconds. Saving...");
            let _ = self.start_bgsave(engine, now_us);
        }
    }

    /// Kills a running BGSAVE child (its file is not finished; the last good one stays).
    fn stop_child(&mut self, engine: &mut Engine) {
        if let Some(c) = self.child.take() {
            warn!("There is a child saving an .rcs. Killing it!");
            let _ = kill(c.pid, Signal::SIGKILL);
            let _ = waitpid(c.pid, None);
            let _ = fs::remove_file(&self.bg_tmp);
            engine.persist.bgsave_in_progress = false;
        }
    }

    /// Graceful shutdown: stop a running child, then save if anything changed.
    fn shutdown(&mut self, engine: &mut Engine, now_us: u64) -> io::Result<()> {
        self.stop_child(engine);
        let changes = engine
            .dirty()
            .saturating_sub(engine.persist.dirty_at_last_save);
        if changes == 0 && self.path.exists() {
            info!("no changes since the last save: snapshot kept as it is");
            return Ok(());
        }
        info!("Saving the final snapshot before exiting.");
        self.save_now(engine, now_us)
    }
}

impl Persistence for Snapshots {
    fn save(&mut self, engine: &mut Engine, now_us: u64) -> Result<(), String> {
        if self.child.is_some() {
            return Err("ERR Background save already in progress".into());
        }
        self.save_now(engine, now_us)
            .map_err(|e| format!("ERR {e}"))
    }

    fn bgsave(
        &mut self,
        engine: &mut Engine,
        now_us: u64,
        schedule: bool,
    ) -> Result<&'static str, String> {
        if self.child.is_some() {
            if schedule {
                self.scheduled = true;
                return Ok("Background saving scheduled");
            }
            return Err("ERR Background save already in progress".into());
        }
        self.start_bgsave(engine, now_us)?;
        Ok("Background saving started")
    }

    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Runs `f` on the engine's [`Snapshots`], if installed (taken out of the engine for the call).
fn with<R>(engine: &mut Engine, f: impl FnOnce(&mut Snapshots, &mut Engine) -> R) -> Option<R> {
    let mut hook = engine.persistence.take()?;
    let r = hook
        .as_any()
        .downcast_mut::<Snapshots>()
        .map(|s| f(s, engine));
    engine.persistence = Some(hook);
    r
}

/// The `hz` timer's part: reap a finished BGSAVE child, start a due periodic save.
pub fn cron(engine: &mut Engine, now_us: u64) {
    with(engine, |s, e| s.tick(e, now_us));
}

/// Graceful shutdown: kill a running BGSAVE child and make the final save.
pub fn shutdown(engine: &mut Engine, now_us: u64) -> io::Result<()> {
    with(engine, |s, e| s.shutdown(e, now_us)).unwrap_or(Ok(()))
}

/// SHUTDOWN's save: a running BGSAVE child is stopped, then `Some(false)` (NOSAVE) saves
/// nothing, `Some(true)` (SAVE) saves whatever changed, `None` saves as a signal's shutdown
/// does (only if anything changed). Without snapshots configured, SAVE fails.
pub fn shutdown_with(engine: &mut Engine, now_us: u64, save: Option<bool>) -> io::Result<()> {
    let r = with(engine, |s, e| match save {
        Some(false) => {
            s.stop_child(e);
            Ok(())
        }
        Some(true) => {
            s.stop_child(e);
            s.save_now(e, now_us)
        }
        None => s.shutdown(e, now_us),
    });
    match (r, save) {
        (Some(r), _) => r,
        (None, Some(true)) => Err(io::Error::other("no snapshot file is configured")),
        (None, _) => Ok(()),
    }
}

/// The running BGSAVE child's pid, if any (tests, INFO).
pub fn bgsave_child(engine: &mut Engine) -> Option<i32> {
    with(engine, |s, _| s.child.as_ref().map(|c| c.pid.as_raw())).flatten()
}
