//! `recached start`: the supervisor of one fleet (N engines, proxy, fan-out, metrics endpoint).
//!
//! # Lifecycle
//!
//! 1. **Config.** Defaults < `--config FILE` < flags. `dir` is made absolute, `dir/logs/` is
//!    created, and every port is test-bound once so a busy port fails the start at once
//!    instead of turning into a crash loop.
//! 2. **Pid file** `dir/recached.pid` (`crate::pidfile`): opened and locked with `flock(LOCK_EX|LOCK_NB)` for the
//!    supervisor's whole life, then the pid is written into it. A second `start` on the same
//!    dir cannot take the lock and is refused with the running pid. A stale file (its process
//!    died, even by SIGKILL) holds no lock — the kernel drops it with the last descriptor — so
//!    the next `start` takes it over; pid reuse cannot fool this, unlike `kill(pid, 0)`.
//! 3. **`--daemonize`** (optional, `crate::daemon`): fork, `setsid`, `chdir /`, stdin from `/dev/null`,
//!    stdout/stderr to `dir/logs/supervisor.log`. The parent waits on a pipe until the child
//!    reports the fleet ready (or failed) and exits 0 (or 1), so `start --daemonize && status`
//!    has no race. The fork happens before any thread exists.
//! 4. **Signals.** SIGTERM, SIGINT and SIGCHLD set flags and write a byte to a self-pipe
//!    (signal-hook); the loop blocks on that pipe with a timeout, so a dead child is noticed
//!    at once, not on the next poll tick.
//! 5. **Children.** Engines i = 0..N on `engine_port_base + i` (or, with an explicit `nodes`
//!    topology, the nodes whose host is an address of this machine); in cluster mode each gets
//!    the whole topology and its own index (`--cluster-nodes h:p,… --cluster-index i`, see
//!    docs/cluster.md). Once they accept connections
//!    (at most 10 s), the proxy with the engines as backends, so the proxy's first connect to
//!    each backend succeeds instead of leaving it down for a reconnect backoff. Each child is
//!    `current_exe()` re-executed with its role's flags
//!    (`ps` shows `recached server --port 6401 …`): fork+exec, so no thread, lock or
//!    descriptor is inherited by accident (std opens files close-on-exec). stdout/stderr are
//!    appended to `dir/logs/<role>-<i>.log` (`engine-0.log`, …, `proxy-0.log`). Each child gets
//!    its own process group, so a terminal's Ctrl-C reaches only the supervisor, which then
//!    stops the children in order; and `PR_SET_PDEATHSIG(SIGTERM)`, so children do not outlive
//!    a supervisor that was SIGKILLed.
//! 6. **Restarts.** Children are reaped with `waitpid(pid, WNOHANG)` (`Child::try_wait`). One
//!    that ran at least `min_healthy_uptime_ms` is restarted at once; one that died sooner is a
//!    quick death and waits `restart_backoff_initial_ms · 2^(k-1)` (k = quick deaths in a row,
//!    capped at `restart_backoff_max_ms`); from 5 in a row the log calls it a crash loop.
//! 7. **State file** `dir/state.toml` (`crate::state`; temp file + rename, so readers never
//!    see half a file): per child role, index, port, pid, state, restarts, start time.
//!    `recached status` reads it.
//!
//!    **Health, SIGHUP, refused starts** (`health`): children that answered once are
//!    PINGed every `health_check_interval_ms`; `health_check_failures` failures in a row =
//!    hung: SIGKILL and restart. SIGHUP re-reads the config and applies the live settings.
//!    An engine that exits with status 78 (it refused a corrupt snapshot, see
//!    docs/persistence.md) is not restarted: its state stays `failed`. Engines get
//!    `--dir DIR`, so each keeps `DIR/dump-<port>.rcs`.
//!    **Re-shard** (`crate::reshard`): before the engines start, snapshots written for
//!    another layout (another engine count) are staged as `reshard-*.rcs`; the engines start
//!    with `--reshard-split I/N`, load their slots from all of them and save; then the staged
//!    files are deleted. docs/operations.md, "Changing the number of engines".
//! 8. **Stop.** On SIGTERM/SIGINT (`recached stop` sends SIGTERM): SIGTERM to every child,
//!    wait up to `stop_timeout_ms`, SIGKILL what is left, reap all, remove the state and pid
//!    files, exit 0.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub(crate) mod control;

use crate::config::{self, FileConfig};
use crate::daemon::daemonize;
use crate::pidfile::PidFile;
use crate::state::{self, ChildState, FleetState, Role, RunState, STATE_FILE};
use crate::{Result, StartArgs};

/// Quick deaths in a row from which the log reports a crash loop.
const CRASH_LOOP_DEATHS: u32 = 5;
/// How long `start` waits for every child to accept connections before it reports the fleet
/// ready (it keeps supervising either way).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn start(args: StartArgs) -> Result<ExitCode> {
    let mut cfg = config::load(args.config.as_deref())?;
    if let Some(n) = args.engines {
        cfg.engines = n;
    }
    if let Some(b) = &args.bind {
        cfg.bind = b.clone();
    }
    if let Some(p) = args.proxy_port {
        cfg.proxy_port = p;
    }
    if let Some(p) = args.memcached_port {
        cfg.memcached_port = p;
    }
    if let Some(p) = args.memcached_tls_port {
        cfg.tls.memcached_port = p;
    }
    if let Some(u) = &args.memcached_user {
        cfg.memcached_user = u.clone();
    }
    if let Some(p) = args.engine_port_base {
        cfg.engine_port_base = p;
    }
    if let Some(d) = &args.dir {
        cfg.dir = d.clone();
    }
    if let Some(p) = args.metrics_port {
        cfg.metrics_port = p;
    }
    // The fan-out is optional: an explicit port must be free like every other; the derived
    // default (proxy_port + 100) is skipped with a warning when busy, so fleets on other
    // ports (tests, a second fleet) never fail for it.
    let fanout_explicit = args.fanout_port.or(cfg.fanout_port).is_some();
    let fanout_port = args
        .fanout_port
        .or(cfg.fanout_port)
        .unwrap_or(cfg.proxy_port.wrapping_add(100));
    cfg.fanout_port = Some(0);
    let taken = fleet_ports(&cfg).iter().any(|(_, p)| *p == fanout_port);
    cfg.fanout_port = Some(fanout_port);
    if !fanout_explicit && fanout_port != 0 && taken {
        log::warn!(
            "fan-out port {fanout_port} (proxy_port + 100) is another port of this fleet: no \
             fan-out for this fleet (set --fanout-port or fanout_port)"
        );
        cfg.fanout_port = Some(0);
    } else if !fanout_explicit
        && fanout_port != 0
        && TcpListener::bind((cfg.bind.as_str(), fanout_port)).is_err()
    {
        log::warn!(
            "fan-out port {fanout_port} (proxy_port + 100) is busy: no fan-out for this fleet \
             (set --fanout-port or fanout_port)"
        );
        cfg.fanout_port = Some(0);
    }
    cfg.validate()?;
    crate::auth::init_fleet_password(&cfg)?;
    if let Some(w) = crate::auth::protected_mode_warning(&cfg) {
        log::warn!("{w}");
    }
    let dir =
        std::path::absolute(&cfg.dir).map_err(|e| format!("dir {}: {e}", cfg.dir.display()))?;
    fs::create_dir_all(dir.join("logs")).map_err(|e| format!("dir {}: {e}", dir.display()))?;
    let config_file = match &args.config {
        Some(p) => Some(fs::canonicalize(p).map_err(|e| format!("config {}: {e}", p.display()))?),
        None => None,
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;

    let pid_file = PidFile::acquire(&dir)?;
    check_ports_free(&cfg)?;

    let ready_pipe = if args.daemonize {
        Some(daemonize(&dir.join("logs").join("supervisor.log"))?)
    } else {
        None
    };
    pid_file.write_pid(std::process::id())?;
    // After any daemonize fork (no thread may exist before it); a busy port costs the metrics
    // only, not the fleet.
    if cfg.metrics_port != 0
        && let Err(e) = crate::metrics::spawn(&cfg.metrics_bind, cfg.metrics_port, dir.clone())
    {
        log::error!("metrics {}:{}: {e}", cfg.metrics_bind, cfg.metrics_port);
    }

    // Before any engine starts: snapshots of another layout are staged (crate::reshard).
    let local: Vec<u16> = cfg.local_engines().iter().map(|e| e.2).collect();
    let plan = crate::reshard::prepare(&dir, &cfg.topology(), &local, args.reshard, unix_ms())
        .map_err(|e| format!("re-shard in {}: {e}", dir.display()))?;
    let signals = Signals::install().map_err(|e| format!("signal handlers: {e}"))?;
    let mut sup = Supervisor::new(cfg, dir.clone(), exe, config_file, signals);
    sup.reshard = plan.active.then_some(plan);
    log::info!(
        "supervisor pid {} on {}: {} engines ({}) of a {}-instance {}, proxy on {}:{}",
        std::process::id(),
        dir.display(),
        sup.engine_count,
        sup.slots
            .iter()
            .filter(|s| s.role == Role::Engine)
            .map(|s| config::host_port(&s.host, s.port))
            .collect::<Vec<_>>()
            .join(","),
        sup.cfg.topology().len(),
        if sup.cfg.cluster {
            "cluster"
        } else {
            "fleet (standalone engines)"
        },
        sup.cfg.bind,
        sup.cfg.proxy_port
    );
    sup.spawn_all();
    sup.readiness = Some(Readiness {
        deadline: Instant::now() + READY_TIMEOUT,
        pending: sup.slots.iter().map(|s| (s.host.clone(), s.port)).collect(),
        pipe: ready_pipe,
    });
    sup.run();
    sup.shutdown();
    let _ = fs::remove_file(dir.join(STATE_FILE));
    pid_file.release();
    log::info!("fleet stopped");
    Ok(ExitCode::SUCCESS)
}

/// Every port the fleet listens on, with what listens there: engines, proxy, fan-out,
/// metrics, and the TLS ports of `[tls]` (0 = none, left out).
fn fleet_ports(cfg: &FileConfig) -> Vec<(String, u16)> {
    let mut ports = Vec::new();
    for (i, _, port) in cfg.local_engines() {
        ports.push((format!("engine {i}"), port));
        if cfg.tls.engine_port_base != 0 {
            ports.push((
                format!("engine {i} (TLS)"),
                cfg.tls.engine_port_base.wrapping_add(i as u16),
            ));
        }
    }
    ports.push(("the proxy".to_string(), cfg.proxy_port));
    ports.push(("the proxy (TLS)".to_string(), cfg.tls.proxy_port));
    ports.push(("the memcached port".to_string(), cfg.memcached_port));
    ports.push((
        "the memcached port (TLS)".to_string(),
        cfg.tls.memcached_port,
    ));
    ports.push(("the fan-out".to_string(), cfg.fanout_port.unwrap_or(0)));
    ports.push(("the fan-out (TLS)".to_string(), cfg.tls.fanout_port));
    ports.push(("the metrics endpoint".to_string(), cfg.metrics_port));
    ports.retain(|(_, p)| *p != 0);
    ports
}

/// Two listeners of the fleet on one port: the second would crash-loop on "address in use"
/// after the fleet reported itself started, so it is refused up front.
fn check_ports_distinct(cfg: &FileConfig) -> Result<()> {
    let ports = fleet_ports(cfg);
    for (i, (who, port)) in ports.iter().enumerate() {
        if let Some((first, _)) = ports[..i].iter().find(|(_, p)| p == port) {
            return Err(format!(
                "port {port} is set for both {first} and {who}: give each its own port \
                 (--proxy-port, --engine-port-base, --fanout-port, --metrics-port, [tls])"
            ));
        }
    }
    Ok(())
}

/// Refuses ports already taken, before anything is spawned.
fn check_ports_free(cfg: &FileConfig) -> Result<()> {
    check_ports_distinct(cfg)?;
    let engines = cfg.local_engines();
    if engines.is_empty() {
        return Err(format!(
            "none of the nodes {:?} is an address of this machine",
            cfg.nodes
        ));
    }
    let listeners = engines
        .into_iter()
        .map(|(_, host, port)| (host, port))
        .chain(std::iter::once((cfg.bind.clone(), cfg.proxy_port)))
        .chain(
            [cfg.memcached_port, cfg.tls.memcached_port]
                .into_iter()
                .filter(|&p| p != 0)
                .map(|p| (cfg.bind.clone(), p)),
        )
        .chain(
            cfg.fanout_port
                .filter(|&p| p != 0)
                .map(|p| (cfg.bind.clone(), p)),
        );
    for (host, port) in listeners {
        TcpListener::bind((host.as_str(), port))
            .map_err(|e| format!("cannot listen on {host}:{port}: {e}"))?;
    }
    Ok(())
}

/// Flags plus a self-pipe; see step 4.
struct Signals {
    term: Arc<AtomicBool>,
    /// SIGHUP arrived: reload the config (see `health`).
    hup: Arc<AtomicBool>,
    /// SIGUSR1 arrived: a `recached resize` request is waiting (`control`).
    usr1: Arc<AtomicBool>,
    wake: UnixStream,
}

impl Signals {
    fn install() -> io::Result<Signals> {
        use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1};
        let term = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        let usr1 = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGHUP, hup.clone())?;
        signal_hook::flag::register(SIGUSR1, usr1.clone())?;
        let (wake, write_end) = UnixStream::pair()?;
        for sig in [SIGTERM, SIGINT] {
            // The flag is set before the pipe is written (registration order), so a woken
            // loop always sees it.
            signal_hook::flag::register(sig, term.clone())?;
        }
        for sig in [SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGUSR1] {
            signal_hook::low_level::pipe::register(sig, OwnedFd::from(write_end.try_clone()?))?;
        }
        Ok(Signals {
            term,
            hup,
            usr1,
            wake,
        })
    }

    /// Blocks until a signal arrives or `timeout` passes, then drains the pipe.
    fn wait(&mut self, timeout: Duration) {
        let timeout = timeout.max(Duration::from_millis(1));
        let _ = self.wake.set_nonblocking(false);
        let _ = self.wake.set_read_timeout(Some(timeout));
        let mut buf = [0u8; 64];
        // Timeout, EINTR and data all mean: go look.
        let _ = self.wake.read(&mut buf);
        let _ = self.wake.set_nonblocking(true);
        while matches!(self.wake.read(&mut buf), Ok(n) if n > 0) {}
    }
}

/// One supervised child slot: the process currently filling it, or when to start the next.
struct Slot {
    role: Role,
    /// Instance index in the topology (engines), 0 for the proxy.
    index: usize,
    /// Listen address (`--bind`).
    host: String,
    port: u16,
    child: Option<Child>,
    started: Instant,
    started_unix_ms: u64,
    restarts: u64,
    quick_deaths: u32,
    /// Set while dead: when to start it again.
    restart_at: Option<Instant>,
    /// Exited with a status that forbids a restart (78: refused a corrupt snapshot).
    failed: bool,
    /// The current process answered a PING at least once (health checks start then).
    answered: bool,
    /// Failed PINGs in a row.
    ping_failures: u32,
}

impl Slot {
    fn label(&self) -> String {
        format!("{}-{}", self.role.name(), self.index)
    }

    /// What the state file says about this slot.
    fn run_state(&self, fleet_stopping: bool) -> RunState {
        if fleet_stopping {
            RunState::Stopping
        } else if self.child.is_some() {
            RunState::Running
        } else if self.failed {
            RunState::Failed
        } else {
            RunState::Restarting
        }
    }
}

struct Supervisor {
    cfg: FileConfig,
    engine_count: usize,
    dir: PathBuf,
    exe: PathBuf,
    config_file: Option<PathBuf>,
    signals: Signals,
    slots: Vec<Slot>,
    started_unix_ms: u64,
    /// Until the fleet first accepts connections (or READY_TIMEOUT passes).
    readiness: Option<Readiness>,
    /// When the next round of PING health checks is due.
    next_health_check: Instant,
    /// A re-shard in progress: its engines start with `--reshard-split` until it is finished
    /// (`crate::reshard`).
    reshard: Option<crate::reshard::Plan>,
}

/// The start-up readiness check (see `check_readiness`).
struct Readiness {
    deadline: Instant,
    /// Listeners (host, port) that have not accepted a connection yet.
    pending: Vec<(String, u16)>,
    /// `--daemonize`: the parent waits for one byte, `1` ready or `0` not.
    pipe: Option<File>,
}

impl Supervisor {
    fn new(
        cfg: FileConfig,
        dir: PathBuf,
        exe: PathBuf,
        config_file: Option<PathBuf>,
        signals: Signals,
    ) -> Supervisor {
        let mut slots: Vec<Slot> = cfg
            .local_engines()
            .into_iter()
            .map(|(i, host, port)| Slot::new(Role::Engine, i, host, port))
            .collect();
        let engine_count = slots.len();
        slots.push(Slot::new(Role::Proxy, 0, cfg.bind.clone(), cfg.proxy_port));
        if let Some(port) = cfg.fanout_port.filter(|&p| p != 0) {
            slots.push(Slot::new(Role::Fanout, 0, cfg.bind.clone(), port));
        }
        Supervisor {
            cfg,
            engine_count,
            dir,
            exe,
            config_file,
            signals,
            slots,
            started_unix_ms: unix_ms(),
            readiness: None,
            next_health_check: Instant::now(),
            reshard: None,
        }
    }

    fn stopping(&self) -> bool {
        self.signals.term.load(Ordering::SeqCst)
    }

    /// Engines first; the proxy once they accept connections (bounded by READY_TIMEOUT), so
    /// its first connect to each backend succeeds (a refused first connect would leave the
    /// instance down for the proxy's reconnect backoff).
    fn spawn_all(&mut self) {
        let engines: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].role == Role::Engine)
            .collect();
        for &i in &engines {
            self.spawn(i);
        }
        self.write_state();
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut pending: Vec<(String, u16)> = engines
            .iter()
            .map(|&i| {
                (
                    connect_host(&self.slots[i].host).to_string(),
                    self.slots[i].port,
                )
            })
            .collect();
        while !pending.is_empty() && Instant::now() < deadline && !self.stopping() {
            pending.retain(|(host, port)| !accepts(host, *port));
            if !pending.is_empty() {
                self.signals.wait(Duration::from_millis(20));
            }
        }
        if !pending.is_empty() {
            log::warn!(
                "engine ports {pending:?} do not accept connections yet; starting the proxy anyway"
            );
        }
        for i in 0..self.slots.len() {
            if matches!(self.slots[i].role, Role::Proxy | Role::Fanout) {
                self.spawn(i);
            }
        }
        self.write_state();
    }

    /// The argv of slot `i`'s role (after the executable).
    fn child_args(&self, i: usize) -> Vec<String> {
        let slot = &self.slots[i];
        let mut args = vec![
            slot.role.subcommand().to_string(),
            "--port".into(),
            slot.port.to_string(),
            "--bind".into(),
            slot.host.clone(),
        ];
        if slot.role == Role::Engine {
            args.push("--dir".into());
            args.push(self.dir.display().to_string());
        }
        // An engine that already saved its split restarts from its own snapshot, which may
        // hold writes made since.
        if slot.role == Role::Engine
            && self.reshard.as_ref().is_some_and(|r| {
                r.split.contains(&slot.port)
                    && !crate::reshard::saved(&self.dir, slot.port, r.staged_ms)
            })
        {
            args.push("--reshard-split".into());
            args.push(format!("{}/{}", slot.index, self.cfg.topology().len()));
        }
        if slot.role == Role::Engine && self.cfg.cluster {
            args.push("--cluster-nodes".into());
            args.push(self.cfg.topology().join(","));
            args.push("--cluster-index".into());
            args.push(slot.index.to_string());
        }
        if matches!(slot.role, Role::Proxy | Role::Fanout) {
            // The proxy routes over the whole topology, and the fan-out follows every
            // engine's feed, in instance order (the slot map's numbering): the local engines
            // for an implicit topology, every node otherwise.
            let backends: Vec<String> = if self.cfg.nodes.is_empty() {
                self.slots
                    .iter()
                    .filter(|s| s.role == Role::Engine)
                    .map(|s| config::host_port(connect_host(&s.host), s.port))
                    .collect()
            } else {
                self.cfg.topology()
            };
            args.push(
                if slot.role == Role::Proxy {
                    "--backends"
                } else {
                    "--engines"
                }
                .into(),
            );
            args.push(backends.join(","));
        }
        // TLS ports (`[tls]`): the children read the certificate files from the config.
        let tls_port = match slot.role {
            Role::Engine => crate::tls_limits::engine_tls_port(&self.cfg, slot.index),
            Role::Proxy => Some(self.cfg.tls.proxy_port).filter(|&p| p != 0),
            Role::Fanout => None,
        };
        if let Some(p) = tls_port {
            args.push("--tls-port".into());
            args.push(p.to_string());
        }
        if slot.role == Role::Proxy && self.cfg.memcached_port != 0 {
            args.push("--memcached-port".into());
            args.push(self.cfg.memcached_port.to_string());
        }
        if slot.role == Role::Proxy && self.cfg.tls.memcached_port != 0 {
            args.push("--memcached-tls-port".into());
            args.push(self.cfg.tls.memcached_port.to_string());
        }
        if slot.role == Role::Proxy && !self.cfg.memcached_user.trim().is_empty() {
            args.push("--memcached-user".into());
            args.push(self.cfg.memcached_user.trim().to_string());
        }
        if let Some(c) = &self.config_file {
            args.push("--config".into());
            args.push(c.display().to_string());
        }
        args
    }

    fn spawn(&mut self, i: usize) {
        let args = self.child_args(i);
        let label = self.slots[i].label();
        let log_path = self.dir.join("logs").join(format!("{label}.log"));
        match self.spawn_process(&args, &log_path) {
            Ok(child) => {
                log::info!(
                    "{label} started: pid {}, port {}, log {}",
                    child.id(),
                    self.slots[i].port,
                    log_path.display()
                );
                let slot = &mut self.slots[i];
                slot.child = Some(child);
                slot.started = Instant::now();
                slot.started_unix_ms = unix_ms();
                slot.restart_at = None;
                slot.answered = false;
                slot.ping_failures = 0;
            }
            Err(e) => {
                log::error!("{label}: cannot start: {e}");
                self.schedule_restart(i, Duration::ZERO);
            }
        }
    }

    fn spawn_process(&self, args: &[String], log_path: &Path) -> io::Result<Child> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)?;
        // A marker between runs makes each restart easy to find in the appended log.
        let _ = writeln!(
            log,
            "--- recached {} (started by supervisor pid {}) ---",
            args.join(" "),
            std::process::id()
        );
        let supervisor = nix::unistd::getpid();
        let mut cmd = Command::new(&self.exe);
        if let Some(pw) = crate::auth::fleet_password() {
            // The internal credential (crate::auth): in the environment, not in `ps`.
            cmd.env(crate::auth::INTERNAL_AUTH_ENV, pw);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only makes two
        // async-signal-safe system calls (prctl, getppid); it neither allocates nor locks.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)
                    .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
                // The supervisor may have died before prctl took effect: then nobody would
                // ever send the death signal, so give up now.
                if nix::unistd::getppid() != supervisor {
                    return Err(io::Error::from_raw_os_error(Errno::ESRCH as i32));
                }
                Ok(())
            });
        }
        cmd.spawn()
    }

    fn schedule_restart(&mut self, i: usize, uptime: Duration) {
        let slot = &mut self.slots[i];
        let (delay, quick_deaths) = restart_delay(&self.cfg.supervisor, uptime, slot.quick_deaths);
        slot.quick_deaths = quick_deaths;
        if slot.quick_deaths >= CRASH_LOOP_DEATHS {
            log::error!(
                "{}: crash loop ({} quick deaths in a row); next start in {} ms, see its log",
                slot.label(),
                slot.quick_deaths,
                delay.as_millis()
            );
        } else if !delay.is_zero() {
            log::warn!("{}: restarting in {} ms", slot.label(), delay.as_millis());
        }
        slot.restart_at = Some(Instant::now() + delay);
    }

    /// Step 6: reap, restart, write state; until SIGTERM/SIGINT.
    fn run(&mut self) {
        while !self.stopping() {
            let mut changed = false;
            for i in 0..self.slots.len() {
                let Some(child) = self.slots[i].child.as_mut() else {
                    continue;
                };
                let status = match child.try_wait() {
                    Ok(Some(status)) => status,
                    Ok(None) => continue,
                    Err(e) => {
                        log::error!("{}: waitpid: {e}", self.slots[i].label());
                        continue;
                    }
                };
                let pid = child.id();
                let uptime = self.slots[i].started.elapsed();
                self.slots[i].child = None;
                changed = true;
                if self.stopping() {
                    break;
                }
                log::warn!(
                    "{} (pid {pid}) {} after {:.1}s",
                    self.slots[i].label(),
                    describe_exit(status),
                    uptime.as_secs_f64()
                );
                if status.code() == Some(recached_server::snapshot::EXIT_CORRUPT_SNAPSHOT) {
                    log::error!(
                        "{} refused to start over a corrupt snapshot (on_corrupt_snapshot = \"refuse\"): \
                         not restarting it; see its log, then restart the fleet",
                        self.slots[i].label()
                    );
                    self.slots[i].failed = true;
                    continue;
                }
                self.schedule_restart(i, uptime);
            }
            if self.stopping() {
                break;
            }
            let now = Instant::now();
            for i in 0..self.slots.len() {
                if self.slots[i].restart_at.is_some_and(|t| t <= now) {
                    self.slots[i].restarts += 1;
                    self.spawn(i);
                    changed = true;
                }
            }
            if self.signals.hup.swap(false, Ordering::SeqCst) {
                self.reload();
            }
            if self.signals.usr1.swap(false, Ordering::SeqCst) {
                self.handle_resize_request();
                changed = true;
            }
            if self.health_checks() {
                changed = true;
            }
            self.check_reshard();
            if changed {
                self.write_state();
            }
            self.check_readiness();
            // While waiting for readiness, look again every 50 ms.
            let tick = if self.readiness.is_some() {
                Duration::from_millis(50)
            } else {
                Duration::from_secs(1)
            };
            let next = self
                .slots
                .iter()
                .filter_map(|s| s.restart_at)
                .min()
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(tick)
                .min(tick);
            self.signals.wait(next);
        }
    }

    /// Once every splitting engine has saved its snapshot, deletes the staged files
    /// (`crate::reshard::finish`); from then on restarts load `dump-<port>.rcs` as usual.
    fn check_reshard(&mut self) {
        let Some(plan) = &self.reshard else {
            return;
        };
        if !crate::reshard::all_saved(&self.dir, &plan.split, plan.staged_ms) {
            return;
        }
        match crate::reshard::finish(&self.dir, &self.cfg.topology()) {
            Ok(n) => {
                log::info!(
                    "re-shard finished: every engine saved its slots; {n} staged snapshot(s) deleted"
                );
                self.reshard = None;
            }
            // Tried again next turn; a restart would redo the split from the staged files.
            Err(e) => log::error!("re-shard: deleting the staged snapshots: {e}"),
        }
    }

    /// Checks, once per loop turn until done, whether every child accepts TCP connections;
    /// then logs it and tells a waiting `--daemonize` parent. Never blocks the loop.
    fn check_readiness(&mut self) {
        let Some(r) = self.readiness.as_mut() else {
            return;
        };
        r.pending
            .retain(|(host, port)| !accepts(connect_host(host), *port));
        let ready = r.pending.is_empty();
        if !ready && Instant::now() < r.deadline {
            return;
        }
        if ready {
            log::info!("fleet ready: redis-cli -p {} (proxy)", self.cfg.proxy_port);
        } else {
            log::warn!(
                "ports {:?} do not accept connections after {}s; see {}",
                r.pending,
                READY_TIMEOUT.as_secs(),
                self.dir.join("logs").display()
            );
        }
        if let Some(mut w) = r.pipe.take() {
            // The parent prints the outcome and exits; an error here only means it is gone.
            let _ = w.write_all(if ready { b"1" } else { b"0" });
        }
        self.readiness = None;
    }

    /// Step 7 (health): one round of PING health checks when due; true if a child was replaced.
    fn health_checks(&mut self) -> bool {
        let s = &self.cfg.supervisor;
        if s.health_check_interval_ms == 0 || Instant::now() < self.next_health_check {
            return false;
        }
        self.next_health_check = Instant::now() + Duration::from_millis(s.health_check_interval_ms);
        let timeout = Duration::from_millis(s.health_check_timeout_ms.max(1));
        let limit = s.health_check_failures.max(1);
        let mut replaced = false;
        for i in 0..self.slots.len() {
            // Only RESP speakers get a PING (the fan-out speaks HTTP/WebSocket).
            let resp = matches!(self.slots[i].role, Role::Engine | Role::Proxy);
            if !resp || self.slots[i].child.is_none() || self.stopping() {
                continue;
            }
            let host = connect_host(&self.slots[i].host).to_string();
            let alive = crate::health::ping(&host, self.slots[i].port, timeout);
            let slot = &mut self.slots[i];
            if alive {
                slot.answered = true;
                slot.ping_failures = 0;
                continue;
            }
            if !slot.answered {
                continue; // still starting (e.g. loading its snapshot)
            }
            slot.ping_failures += 1;
            log::warn!(
                "{}: no answer to PING ({} of {limit})",
                slot.label(),
                slot.ping_failures
            );
            if slot.ping_failures < limit {
                continue;
            }
            let Some(mut child) = slot.child.take() else {
                continue;
            };
            log::error!(
                "{} (pid {}) is hung (no PING reply {limit} times in a row): SIGKILL and restart",
                slot.label(),
                child.id()
            );
            let _ = child.kill();
            let _ = child.wait();
            let uptime = slot.started.elapsed();
            self.schedule_restart(i, uptime);
            replaced = true;
        }
        replaced
    }

    /// SIGHUP: re-read the config file and apply the settings that can change live.
    fn reload(&mut self) {
        let Some(path) = self.config_file.clone() else {
            log::info!("SIGHUP: no config file to reload (started without --config)");
            return;
        };
        let new = match config::load(Some(&path)) {
            Ok(c) => c,
            Err(e) => {
                log::error!("SIGHUP: {e}; keeping the current settings");
                return;
            }
        };
        let ignored = crate::health::restart_only_changes(&self.cfg, &new);
        if !ignored.is_empty() {
            log::warn!(
                "SIGHUP: changes to {} need a fleet restart; ignored",
                ignored.join(", ")
            );
        }
        self.cfg.supervisor = new.supervisor.clone();
        self.cfg.engine = new.engine.clone();
        let settings = crate::health::live_engine_settings(&new);
        let timeout = Duration::from_millis(self.cfg.supervisor.health_check_timeout_ms.max(100));
        for slot in &self.slots {
            if slot.role != Role::Engine || slot.child.is_none() {
                continue;
            }
            let failed = crate::health::push_settings(
                connect_host(&slot.host),
                slot.port,
                &settings,
                timeout,
            );
            if !failed.is_empty() {
                log::warn!("SIGHUP: {} refused: {}", slot.label(), failed.join("; "));
            }
        }
        log::info!("SIGHUP: configuration reloaded from {}", path.display());
    }

    /// Step 8.
    fn shutdown(&mut self) {
        log::info!("stopping: SIGTERM to every child");
        for slot in &mut self.slots {
            slot.restart_at = None;
            if let Some(child) = &slot.child {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            }
        }
        self.write_state();
        let deadline = Instant::now() + Duration::from_millis(self.cfg.supervisor.stop_timeout_ms);
        loop {
            for slot in &mut self.slots {
                if let Some(child) = slot.child.as_mut()
                    && !matches!(child.try_wait(), Ok(None))
                {
                    slot.child = None;
                }
            }
            if self.slots.iter().all(|s| s.child.is_none()) {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            self.signals.wait(Duration::from_millis(50));
        }
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                log::warn!(
                    "{} (pid {}) did not exit in time: SIGKILL",
                    slot.label(),
                    child.id()
                );
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    fn write_state(&self) {
        let state = FleetState {
            supervisor_pid: std::process::id(),
            started_unix_ms: self.started_unix_ms,
            bind: self.cfg.bind.clone(),
            children: self
                .slots
                .iter()
                .map(|s| ChildState {
                    role: s.role,
                    index: s.index,
                    host: Some(s.host.clone()),
                    port: s.port,
                    pid: s.child.as_ref().map(|c| c.id()),
                    state: s.run_state(self.stopping()),
                    restarts: s.restarts,
                    started_unix_ms: s.started_unix_ms,
                })
                .collect(),
        };
        if let Err(e) = state::write(&self.dir, &state) {
            log::error!("state file {}: {e}", self.dir.join(STATE_FILE).display());
        }
    }
}

/// Step 6's rule: the wait before the next start of a child that ran for `uptime`, and the
/// new count of quick deaths in a row (`quick_deaths` is the count before this death).
fn restart_delay(
    s: &config::SupervisorSection,
    uptime: Duration,
    quick_deaths: u32,
) -> (Duration, u32) {
    if uptime >= Duration::from_millis(s.min_healthy_uptime_ms) {
        return (Duration::ZERO, 0);
    }
    let k = quick_deaths.saturating_add(1);
    let ms = s
        .restart_backoff_initial_ms
        .saturating_mul(1u64 << (k - 1).min(32))
        .min(s.restart_backoff_max_ms);
    (Duration::from_millis(ms), k)
}

impl Slot {
    fn new(role: Role, index: usize, host: String, port: u16) -> Slot {
        Slot {
            role,
            index,
            host,
            port,
            child: None,
            started: Instant::now(),
            started_unix_ms: 0,
            restarts: 0,
            quick_deaths: 0,
            restart_at: None,
            failed: false,
            answered: false,
            ping_failures: 0,
        }
    }
}

/// Whether `host:port` accepts a TCP connection now (100 ms connect timeout).
fn accepts(host: &str, port: u16) -> bool {
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
        })
}

/// The address to connect to for a listen address: a wildcard bind is reached on loopback.
pub fn connect_host(bind: &str) -> &str {
    match bind {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" | "[::]" => "::1",
        b => b,
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("was killed by {sig}"),
            Err(_) => format!("was killed by signal {s}"),
        },
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_backoff_doubles_on_quick_deaths_and_resets_after_a_healthy_run() {
        let s = config::SupervisorSection::default();
        let quick = Duration::from_millis(50);
        let healthy = Duration::from_millis(s.min_healthy_uptime_ms);
        assert_eq!(restart_delay(&s, healthy, 7), (Duration::ZERO, 0));
        assert_eq!(restart_delay(&s, quick, 0), (Duration::from_millis(100), 1));
        assert_eq!(restart_delay(&s, quick, 1), (Duration::from_millis(200), 2));
        assert_eq!(
            restart_delay(&s, quick, 4),
            (Duration::from_millis(1600), 5)
        );
        assert_eq!(
            restart_delay(&s, quick, 9),
            (Duration::from_millis(30_000), 10)
        );
        assert_eq!(
            restart_delay(&s, quick, u32::MAX).0,
            Duration::from_millis(30_000)
        );
    }
}
