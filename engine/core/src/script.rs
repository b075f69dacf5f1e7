//! The seam between the engine and a script host (redis `script.c`, Redis 7.0).
//!
//! engine-core runs no Lua: it stays pure and builds for `wasm32-unknown-unknown`. The engine
//! server installs a host ([`Scripting`], implemented by `engine/script` over mlua) in
//! [`Engine::scripting`]. EVAL/EVALSHA/EVAL_RO/EVALSHA_RO and the SCRIPT subcommands are rows
//! of the command table like any other; their handlers here take the host out of the engine,
//! hand it `&mut Engine` and the call, and put it back. Without a host (the browser replica,
//! unit tests) they answer Redis's unknown-command error, as before scripting existed.
//!
//! A script reaches the keyspace only through [`call`], once per `redis.call`/`redis.pcall`:
//!
//! ```text
//!  EVAL ─► dispatch ─► script::eval ─► host.eval(e, c) ─► Lua ─► redis.call(...)
//!                                                                   │
//!            dispatch::exec(e, run.client, argv) ◄── script::call ◄─┘  (checks first)
//! ```
//!
//! [`call`] applies `scriptCall`'s checks in Redis's order (lookup and arity, `noscript`, ACL
//! of the caller's user, writes from read-only scripts, OOM, cluster ownership), then runs the
//! command through the normal dispatcher with the script's own client ([`ScriptRun::client`]:
//! the caller's database, user and cluster flags, the protocol chosen by `redis.setresp`,
//! address `lua`, and [`ClientTx::in_exec`](crate::cmd::tx::ClientTx::in_exec) set). So every
//! command a script runs is bookkept as if a client had sent it: its writes become keychange
//! feed effects (effect replication, as Redis 7: the feed never sees EVAL itself), keyspace
//! notifications and WATCH invalidations are flushed after the EVAL as after EXEC, blocked
//! clients are served after it, MONITOR shows it as `[db lua]`, and blocking commands answer
//! at once as if their timeout had passed (redis `CLIENT_DENY_BLOCKING`).

use resp::{Proto, ReplyWriter};

use crate::call::Call;
use crate::command::{CommandSpec, Flags};
use crate::error::{CmdError, unknown_command_message};
use crate::{Client, Engine, Flow, slot};

/// A script host: the engine server installs one in [`Engine::scripting`].
pub trait Scripting {
    /// EVAL, EVALSHA, EVAL_RO or EVALSHA_RO (`c.spec.name` says which): runs the script and
    /// writes its reply (an error reply is written as `Ok`, like any handler's own reply).
    fn eval(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError>;
    /// A SCRIPT subcommand (`c.spec.name` is `script|load`, `script|exists`, …).
    fn script(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError>;
    /// FCALL or FCALL_RO (`c.spec.name` says which): runs a function of a loaded library.
    fn fcall(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError>;
    /// A FUNCTION subcommand (`c.spec.name` is `function|load`, `function|list`, …).
    fn function(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError>;
    /// The code of every loaded function library (its FUNCTION LOAD payload), handed to
    /// `each`: what a snapshot keeps of them (opaque to the core). None by default.
    /// Whether EVAL/EVALSHA/FCALL (`name`) with `argv` may write: unless its script declares
    /// `no-writes` (redis `evalGetCommandFlags`, for CLIENT PAUSE WRITE). An unknown script or
    /// function may (its error comes when it runs).
    fn may_write(&self, name: &str, argv: &[&[u8]]) -> bool {
        let _ = (name, argv);
        true
    }
    /// Scripts in the EVAL cache (INFO memory `number_of_cached_scripts`).
    fn cached_scripts(&self) -> usize {
        0
    }
    fn library_codes(&self, each: &mut dyn FnMut(&[u8])) {
        let _ = each;
    }
    /// Loads the libraries a snapshot kept (codes as [`Scripting::library_codes`] gave them)
    /// into a host that has none yet (start-up); the error text if one does not load.
    fn load_libraries(&mut self, codes: &[Vec<u8>]) -> Result<(), String> {
        let _ = codes;
        Err("this script host cannot load function libraries".into())
    }
}

/// The address of the client a script's commands run as ([`ScriptRun::client`]): how code
/// that sees only a `Client` tells a script's command (SORT, client-side caching).
pub const SCRIPT_CLIENT_ADDR: &str = "lua";

/// The error other clients get while an EVAL script is busy (redis `shared.slowevalerr`).
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
/// The same for a function (redis `shared.slowscripterr`).
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// A script that ran past `busy-reply-threshold` (redis `SCRIPT_TIMEDOUT`), in
/// [`Engine::busy`] while the host lets the server serve other clients from inside it:
///
/// ```text
///  Lua hook, every N instructions: past the threshold?
///    └─► e.busy = Some(Busy) ─► poller.serve(e) ─► other clients' commands ─► dispatch
///          (first time: logged)      (server)        ALLOW_BUSY only, else -BUSY …
///    ◄── killed / shutdown set by SCRIPT KILL, FUNCTION KILL or SHUTDOWN NOSAVE: the
///        script is stopped with an error it cannot catch
/// ```
///
/// The client running the script is not served meanwhile (redis `protectClient`), and keys
/// the script made ready for blocked clients are served only after it ends.
#[derive(Debug, Default, Clone)]
pub struct Busy {
    /// EVAL* (SCRIPT KILL stops it) rather than FCALL* (FUNCTION KILL).
    pub eval: bool,
    /// A write command ran (redis `SCRIPT_WRITE_DIRTY`): only SHUTDOWN NOSAVE stops it.
    pub wrote: bool,
    /// SCRIPT KILL or FUNCTION KILL was accepted (redis `SCRIPT_KILLED`).
    pub killed: bool,
    /// SHUTDOWN NOSAVE arrived: the script stops and the server exits after it.
    pub shutdown: bool,
    /// The function's name (FUNCTION STATS `running_script`), and the FCALL's arguments.
    pub name: String,
    pub argv: Vec<Vec<u8>>,
    /// When the script started, Unix ms.
    pub started_ms: u64,
    /// Loaded libraries and functions (FUNCTION STATS answers from here while busy).
    pub libraries: usize,
    pub functions: usize,
}

impl Busy {
    /// The `-BUSY …` text for other clients' commands.
    pub fn error(&self) -> &'static str {
        if self.eval { BUSY_EVAL } else { BUSY_FUNCTION }
    }
}

/// The server's side of a busy script (redis `processEventsWhileBlocked`): accept, read and
/// run other clients' requests once, without waiting, and write their replies. The host
/// calls it from the script's instruction hook while [`Engine::busy`] is set.
pub trait BusyPoll {
    fn serve(&mut self, e: &mut Engine);
}

/// SCRIPT KILL (`eval`) or FUNCTION KILL while a script is busy (redis `scriptKill`).
fn kill(e: &mut Engine, c: &mut Call, eval: bool) -> Result<(), CmdError> {
    let Some(busy) = &mut e.busy else {
        return Err(CmdError::Static(
            "NOTBUSY No scripts in execution right now.",
        ));
    };
    if busy.wrote {
        return Err(CmdError::Static(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. \
             You can either wait the script termination or kill the server in a hard way using \
             the SHUTDOWN NOSAVE command.",
        ));
    }
    if eval != busy.eval {
        return Err(CmdError::Static(busy.error()));
    }
    busy.killed = true;
    c.w().ok();
    Ok(())
}

/// FUNCTION STATS while a script is busy (the host is taken out; redis
/// `functionStatsCommand`): the running function, then the engine's counts.
fn function_stats_busy(busy: &Busy, c: &mut Call) {
    let running = (!busy.eval).then(|| {
        (
            busy.name.clone(),
            busy.argv.clone(),
            (c.now_ms.saturating_sub(busy.started_ms)) as i64,
        )
    });
    let mut w = c.w();
    w.map(2);
    w.bulk(b"running_script");
    match running {
        None => w.null(),
        Some((name, argv, ms)) => {
            w.map(3);
            w.bulk(b"name");
            w.bulk(name.as_bytes());
            w.bulk(b"command");
            w.array(argv.len());
            for a in &argv {
                w.bulk(a);
            }
            w.bulk(b"duration_ms");
            w.integer(ms);
        }
    }
    w.bulk(b"engines");
    w.map(1);
    w.bulk(b"LUA");
    w.map(2);
    w.bulk(b"libraries_count");
    w.integer(busy.libraries as i64);
    w.bulk(b"functions_count");
    w.integer(busy.functions as i64);
}

/// The rules a script run is under (redis `scriptRunCtx.flags`, from the shebang flags and
/// the command used).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunFlags {
    /// EVAL_RO/EVALSHA_RO or `flags=no-writes`: write commands are refused.
    pub read_only: bool,
    /// `flags=allow-oom`: deny-oom commands run even above `maxmemory`.
    pub allow_oom: bool,
    /// No shebang (compatibility mode) or `flags=allow-cross-slot-keys`.
    pub allow_cross_slot: bool,
}

/// One script invocation's state between its commands (redis `scriptRunCtx`).
pub struct ScriptRun {
    /// The client the script's commands run as.
    pub client: Client,
    flags: RunFlags,
    /// A write command ran (redis `SCRIPT_WRITE_DIRTY`): later OOM checks pass, and the
    /// script can no longer be killed.
    write_dirty: bool,
    /// Memory was above `maxmemory` when the script started (redis `pre_command_oom_state`).
    oom_at_start: bool,
    /// Cluster mode: the slot of the declared keys, then of the first key accessed (redis
    /// `original_client->slot`).
    slot: Option<u16>,
}

impl ScriptRun {
    /// A run for `caller` with `flags`; `declared` are the keys the script declared (EVAL's
    /// KEYS), whose slot later undeclared accesses must share.
    pub fn new(e: &Engine, caller: &Client, flags: RunFlags, declared: &[&[u8]]) -> ScriptRun {
        let mut client = Client {
            id: caller.id,
            db: caller.db,
            proto: Proto::Resp2,
            addr: SCRIPT_CLIENT_ADDR.to_string(),
            laddr: String::new(),
            auth: caller.auth.clone(),
            created_us: caller.created_us,
            ..Client::default()
        };
        client.cluster = caller.cluster.clone();
        // The caller's ASKING (cleared on it before the script ran) holds for every call.
        client.cluster.asking = caller.cluster.asked;
        client.txdiscover = caller.txdiscover;
        client.tx.in_exec = true;
        let slot = if e.cluster.enabled() {
            declared.first().map(|k| slot::key_slot(k))
        } else {
            None
        };
        ScriptRun {
            client,
            flags,
            write_dirty: false,
            oom_at_start: e.config.maxmemory != 0 && e.pre_command_oom,
            slot,
        }
    }

    /// The protocol replies to the script are written in (`redis.setresp`).
    pub fn proto(&self) -> Proto {
        self.client.proto
    }

    /// `redis.setresp(2|3)`.
    pub fn set_proto(&mut self, proto: Proto) {
        self.client.proto = proto;
    }

    /// Whether a write command has run (SCRIPT KILL refuses such a script).
    pub fn wrote(&self) -> bool {
        self.write_dirty
    }
}

/// Runs one command for a script (redis `scriptCall`). On success the command's reply, in
/// [`ScriptRun::proto`], is appended to `out` (an error reply of the command itself is a
/// success here: the script converts it). `Err` is a refusal before the command ran, with
/// Redis's text: either `msg` (the script prefixes `ERR`) or `-CODE msg`.
pub fn call(
    e: &mut Engine,
    run: &mut ScriptRun,
    argv: &[&[u8]],
    now_us: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let spec = match crate::dispatch::resolve(argv) {
        Ok((spec, Some(_))) if spec.arity_ok(argv.len()) => spec,
        Ok((spec, _)) if !spec.arity_ok(argv.len()) => {
            return Err(refused(
                e,
                spec,
                "Wrong number of args calling Redis command from script",
            ));
        }
        _ => {
            e.stats.rejected_calls += 1;
            crate::dispatch::count_error(e, b"ERR");
            return Err("Unknown Redis command called from script".into());
        }
    };
    if spec.has_flag(Flags::NOSCRIPT) {
        return Err(refused(
            e,
            spec,
            "This Redis command is not allowed from script",
        ));
    }
    if e.acl.restricted()
        && let Err(denied) = e.acl.check(&run.client.auth, spec, argv)
    {
        let who = crate::acl::Who::of(&run.client, now_us);
        let _ = e.acl.refuse(denied, &run.client.auth, spec, argv, &who);
        let why = match denied {
            crate::acl::Denied::Key(_) => {
                "no permissions to access one of the keys used as arguments"
            }
            crate::acl::Denied::Channel(_) => {
                "no permissions to access one of the channels used as arguments"
            }
            _ => "can't run this command or subcommand",
        };
        return Err(refused(
            e,
            spec,
            &format!("The user executing the script {why}"),
        ));
    }
    let write = spec.has_flag(Flags::WRITE);
    if run.flags.read_only && (write || may_replicate(spec)) {
        return Err(refused(
            e,
            spec,
            "Write commands are not allowed from read-only scripts.",
        ));
    }
    if !run.flags.allow_oom
        && !run.write_dirty
        && run.oom_at_start
        && e.config.maxmemory != 0
        && spec.has_flag(Flags::DENYOOM)
    {
        return Err(refused(e, spec, &format!("-{}", crate::evict::OOM_ERROR)));
    }
    if write && crate::snapshot::writes_denied(e) {
        // redis `scriptVerifyWriteCommandAllow`: the script gets the MISCONF error.
        return Err(format!("-{}", crate::snapshot::MISCONF));
    }
    if write && crate::snapshot::replicas_missing(e) {
        return Err(format!("-{}", crate::snapshot::NOREPLICAS));
    }
    let wrote_before = run.write_dirty;
    if write {
        run.write_dirty = true;
    }
    // After a write the script cannot be run again: its commands may no longer ask the proxy
    // for keys of other engines (cluster_check, SORT's patterns in `crate::types::sort`).
    if wrote_before {
        run.client.txdiscover = false;
    }
    if e.cluster.enabled() {
        cluster_check(e, run, spec, argv, wrote_before).map_err(|msg| refused(e, spec, &msg))?;
    }
    let before = out.len();
    match crate::dispatch::exec(e, &mut run.client, argv, now_us, out) {
        // SHUTDOWN is refused to scripts (`noscript`); a script's commands are never
        // postponed (`crate::pause`).
        Flow::Continue | Flow::Close | Flow::Shutdown(_) | Flow::Postpone => {}
        Flow::ClientList => {
            let line = e.client_info_line(&run.client, now_us) + "\n";
            ReplyWriter::new(out, run.client.proto).verbatim(line.as_bytes());
        }
        Flow::ClientKill(f) => f.reply(0, run.client.proto, out),
        // Blocking commands do not park for a script; one that wrote nothing timed out.
        Flow::Block => {
            if out.len() == before {
                ReplyWriter::new(out, run.client.proto).null_array();
            }
        }
    }
    Ok(())
}

/// `redis.acl_check_cmd(cmd, args…)` (redis `luaRedisAclCheckCmdPermissionsCommand`): whether
/// the script's user may run `argv` (command, subcommand, keys and channels), or Redis's error
/// when no command has that name.
pub fn acl_check(e: &Engine, run: &ScriptRun, argv: &[&[u8]]) -> Result<bool, &'static str> {
    let spec = match crate::dispatch::resolve(argv) {
        Ok((spec, _)) => spec,
        Err(_) => return Err("ERR Invalid command passed to redis.acl_check_cmd()"),
    };
    Ok(!e.acl.restricted() || e.acl.check(&run.client.auth, spec, argv).is_ok())
}

/// A refusal counted as Redis counts it (`rejected_calls`, the command's `rejected_calls`, and
/// its code in errorstats: `-CODE …` texts by their code, the others as `ERR`).
fn refused(e: &mut Engine, spec: &'static CommandSpec, msg: &str) -> String {
    e.stats.rejected_calls += 1;
    e.cmdstats.rejected(spec);
    match msg.strip_prefix('-') {
        Some(coded) => crate::dispatch::count_error(e, coded.as_bytes()),
        None => crate::dispatch::count_error(e, b"ERR"),
    }
    msg.to_string()
}

/// Rows Redis 7.0 flags `may-replicate` (COMMAND INFO does not show it; same list as
/// `monitor::touches_keyspace`): a read-only script may not run them either.
fn may_replicate(spec: &CommandSpec) -> bool {
    matches!(spec.name, "publish" | "spublish" | "pfcount")
}

/// redis `scriptVerifyClusterState`: every key of the command owned here, and (unless the
/// script allows cross-slot keys) in the slot of the keys used before.
fn cluster_check(
    e: &Engine,
    run: &mut ScriptRun,
    spec: &CommandSpec,
    argv: &[&[u8]],
    wrote_before: bool,
) -> Result<(), std::borrow::Cow<'static, str>> {
    let keys = crate::command::keys(spec, argv);
    let mut first = None;
    let db = run.client.db;
    for pos in keys.positions() {
        let s = slot::key_slot(argv[pos]);
        // A guest (a key of another engine brought here to run a script spanning engines,
        // `crate::txlock`) counts as local.
        // After ASKING, an importing slot's keys are local (redis `getNodeByQuery`).
        let asked_here = run.client.cluster.asked && e.cluster.importing.contains_key(&s);
        if !e.cluster.owns(s) && !asked_here && !e.locks.is_guest(db, argv[pos]) {
            // Through the proxy, before the script wrote anything: the proxy runs it again
            // with that key brought here (`crate::txlock`, docs/transactions.md).
            if run.client.txdiscover && !wrote_before {
                return Err(crate::txlock::need_key(argv[pos]).into());
            }
            return Err("Script attempted to access a non local key in a cluster node".into());
        }
        first.get_or_insert(s);
    }
    // A gathered run is the proxy's "one Redis": any slots, as on a single server.
    if let Some(s) = first
        && !run.flags.allow_cross_slot
        && !e.locks.holds_guests(run.client.id)
    {
        match run.slot {
            None => run.slot = Some(s),
            Some(have) if have != s => {
                return Err(
                    "Script attempted to access keys that do not hash to the same slot".into(),
                );
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Runs `f` with the host taken out of the engine (so it can use `&mut Engine`), or answers
/// the unknown-command error when none is installed.
fn with_host(
    e: &mut Engine,
    c: &mut Call,
    f: impl FnOnce(&mut dyn Scripting, &mut Engine, &mut Call) -> Result<(), CmdError>,
) -> Result<(), CmdError> {
    let Some(mut host) = e.scripting.take() else {
        return Err(CmdError::Other(unknown_command_message(c.argv)));
    };
    let r = f(host.as_mut(), e, c);
    // A script cannot install a host (SCRIPT is `noscript`): the slot is still empty.
    e.scripting = Some(host);
    r
}

/// `EVAL script numkeys [key …] [arg …]` (and EVALSHA, EVAL_RO, EVALSHA_RO): MONITOR sees the
/// EVAL line before the lines of the commands it runs (redis `evalCommand`), then the host
/// runs it.
pub fn eval(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    eval_like(e, c, |h, e, c| h.eval(e, c))
}

fn eval_like(
    e: &mut Engine,
    c: &mut Call,
    f: impl FnOnce(&mut dyn Scripting, &mut Engine, &mut Call) -> Result<(), CmdError>,
) -> Result<(), CmdError> {
    if e.scripting.is_none() {
        return Err(CmdError::Other(unknown_command_message(c.argv)));
    }
    if !e.monitors.is_empty() {
        let (now_us, argv, spec) = (c.now_us, c.argv, c.spec);
        let (client, out) = c.parts();
        crate::monitor::feed_always(e, client, spec, argv, now_us, out);
    }
    with_host(e, c, f)
}

/// `FCALL function numkeys [key …] [arg …]` (and FCALL_RO): MONITOR sees the FCALL line
/// before the commands the function runs (redis `fcallCommandGeneric`), then the host runs it.
pub fn fcall(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    eval_like(e, c, |h, e, c| h.fcall(e, c))
}

/// `FUNCTION LOAD|DELETE|FLUSH|LIST|DUMP|RESTORE|STATS|KILL|HELP …`: the host's.
pub fn function(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    match (c.spec.name, &e.busy) {
        ("function|kill", Some(_)) => return kill(e, c, false),
        ("function|stats", Some(busy)) => {
            let busy = busy.clone();
            function_stats_busy(&busy, c);
            return Ok(());
        }
        _ => {}
    }
    with_host(e, c, |h, e, c| h.function(e, c))
}

/// `SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP …`: the host's.
pub fn script(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.spec.name == "script|kill" && e.busy.is_some() {
        return kill(e, c, true);
    }
    with_host(e, c, |h, e, c| h.script(e, c))
}

impl Engine {
    /// Cluster mode (a topology was configured): the host refuses `no-cluster` scripts.
    pub fn cluster_enabled(&self) -> bool {
        self.cluster.enabled()
    }

    /// The last command found memory above `maxmemory` that eviction could not free (redis
    /// `pre_command_oom_state`): scripts without `allow-oom` may not start.
    pub fn memory_over_limit(&self) -> bool {
        self.config.maxmemory != 0 && self.pre_command_oom
    }
}
