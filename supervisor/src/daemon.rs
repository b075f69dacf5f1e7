//! `recached start --daemonize` (step 3 of the lifecycle in `crate::fleet`): fork, `setsid`,
//! `chdir /`, output to the supervisor log, and the pipe on which the parent waits until the
//! fleet is ready so that `start --daemonize && status` has no race.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

use crate::Result;

/// Step 3 of the lifecycle. Returns, in the daemon, the write end of the readiness pipe:
/// write `1` (ready) or `0` (not ready) once and the waiting parent exits 0 or 1.
pub fn daemonize(log_path: &Path) -> Result<File> {
    use nix::unistd::{ForkResult, fork, setsid};
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| format!("log {}: {e}", log_path.display()))?;
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the process is single-threaded at this point (clap, env_logger and config
    // loading start no threads; signal handlers are installed only after the fork), so the
    // child may run arbitrary code, allocate and take locks after fork.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Parent { child } => {
            drop(w);
            let mut byte = [0u8; 1];
            let n = File::from(r).read(&mut byte).unwrap_or(0);
            // Exit without running destructors: the pid file's Flock must not be unlocked
            // here, the lock belongs to the open file description the daemon shares.
            if n == 1 && byte[0] == b'1' {
                println!(
                    "recached: fleet started (supervisor pid {child}); log: {}",
                    log_path.display()
                );
                std::process::exit(0);
            }
            eprintln!(
                "recached: the fleet is not ready yet (supervisor pid {child} keeps trying); see {}",
                log_path.display()
            );
            std::process::exit(1);
        }
        ForkResult::Child => {
            drop(r);
            setsid().map_err(|e| format!("setsid: {e}"))?;
            std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
            let null = File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
            nix::unistd::dup2_stdin(&null).map_err(|e| format!("dup2: {e}"))?;
            nix::unistd::dup2_stdout(&log).map_err(|e| format!("dup2: {e}"))?;
            nix::unistd::dup2_stderr(&log).map_err(|e| format!("dup2: {e}"))?;
            Ok(File::from(w))
        }
    }
}
