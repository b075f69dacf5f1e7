//! The shutdown flag of the proxy's and the fan-out's loops: SIGTERM and SIGINT set it, the
//! loop checks it at least every 100 ms and returns. (The engine's loop takes the signals as
//! poll events instead, `signal-hook-mio`, to save its final snapshot at once.)

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Runs `body` with a flag that SIGTERM/SIGINT set; the handlers are removed when it returns,
/// so a role embedded in a test process leaves the signals as it found them.
///
/// Errors: the handlers cannot be installed, or whatever `body` returns.
pub fn until_signalled(body: impl FnOnce(Arc<AtomicBool>) -> io::Result<()>) -> io::Result<()> {
    let shutdown = Arc::new(AtomicBool::new(false));
    let mut ids = Vec::new();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        ids.push(signal_hook::flag::register(sig, Arc::clone(&shutdown))?);
    }
    let result = body(shutdown);
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    result
}
