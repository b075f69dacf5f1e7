//! The pid file `dir/recached.pid` and its lock (step 2 of the lifecycle in `crate::fleet`):
//! at most one supervisor per dir, and how `stop` and `status` find the running one. The lock
//! is `flock`, so a file left by a dead process holds no lock and is simply taken over.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::Result;

/// Pid file name inside `dir`.
pub const PID_FILE: &str = "recached.pid";

/// The locked pid file, held for the supervisor's whole life.
pub struct PidFile {
    path: PathBuf,
    lock: Flock<File>,
}

impl PidFile {
    /// Opens and locks `dir/recached.pid`; refused (naming the running pid) while another
    /// supervisor holds the lock, a stale file is taken over.
    pub fn acquire(dir: &Path) -> Result<PidFile> {
        let path = dir.join(PID_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("pid file {}: {e}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                let mut old = String::new();
                let _ = (&*lock).read_to_string(&mut old);
                if !old.trim().is_empty() {
                    log::warn!(
                        "taking over stale pid file {} (pid {} is gone)",
                        path.display(),
                        old.trim()
                    );
                }
                Ok(PidFile { path, lock })
            }
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                Err(format!(
                    "a fleet is already running on {} (supervisor pid {}); stop it with `recached stop --dir {}`",
                    dir.display(),
                    pid.trim(),
                    dir.display()
                ))
            }
            Err((_, e)) => Err(format!("pid file {}: flock: {e}", path.display())),
        }
    }

    /// Replaces the file's content with `pid` (after any daemonize fork: the daemon's pid).
    pub fn write_pid(&self, pid: u32) -> Result<()> {
        let mut f: &File = &self.lock;
        let res = f
            .set_len(0)
            .and_then(|_| f.rewind())
            .and_then(|_| f.write_all(format!("{pid}\n").as_bytes()))
            .and_then(|_| f.sync_all());
        res.map_err(|e| format!("pid file {}: {e}", self.path.display()))
    }

    /// Removes the file while still holding the lock, then unlocks (drop).
    pub fn release(self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Is a fleet running on `dir`? Returns the supervisor pid from the pid file if its lock is
/// held. Used by `stop` and `status`.
pub fn running_supervisor(dir: &Path) -> Option<u32> {
    let file = File::open(dir.join(PID_FILE)).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => None,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut s = String::new();
            file.read_to_string(&mut s).ok()?;
            // The lock is taken a moment before the pid is written; 0 stands for "starting".
            Some(s.trim().parse().unwrap_or(0))
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_and_a_stale_file_is_taken_over() {
        let dir = std::env::temp_dir().join(format!("recached-pidtest-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let first = PidFile::acquire(&dir).unwrap();
        first.write_pid(4242).unwrap();
        assert_eq!(running_supervisor(&dir), Some(4242));
        let err = PidFile::acquire(&dir).err().expect("second lock must fail");
        assert!(
            err.contains("already running") && err.contains("4242"),
            "{err}"
        );
        // Dropping without release = a process that died: the file stays, the lock goes.
        drop(first);
        assert!(dir.join(PID_FILE).exists());
        assert_eq!(running_supervisor(&dir), None);
        let again = PidFile::acquire(&dir).unwrap();
        again.release();
        assert!(!dir.join(PID_FILE).exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
