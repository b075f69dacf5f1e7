//! recached-script: Lua scripting for the engine server — EVAL, EVALSHA, EVAL_RO, EVALSHA_RO,
//! SCRIPT, FUNCTION, FCALL and FCALL_RO, with Redis 7.0's API, conversions, sandbox and error texts (docs/scripting.md).
//!
//! Lua 5.1 comes from `mlua` (vendored, compiled from source); it lives in this crate so
//! engine-core stays pure and builds for wasm. [`LuaHost`] implements engine-core's
//! [`Scripting`] seam; the server installs it with [`install`]. A script reaches the keyspace
//! only through [`engine_core::script::call`], once per `redis.call`, so its writes are
//! recorded as the commands it ran (effect replication).
//!
//! # Layout
//! - this file: the host (script cache by SHA-1, EVAL*, SCRIPT *), running a script, and the
//!   error handler that gives errors their `script: <sha>, on @user_script:<line>.` suffix;
//! - [`convert`]: RESP ⇄ Lua conversions; `fastcall.rs`: `redis.call`/`redis.pcall` on Lua's
//!   C API (the hot path: arguments read in place, the reply pushed as it is read);
//! - `prelude.lua`: the `redis` table, Redis's `pcall`, `math.random` and the sandbox
//!   (protected globals), run once per Lua state;
//! - [`shebang`]: `#!lua flags=…`; [`rand`]: Redis's `lrand48`;
//! - the C libraries Redis embeds, rebuilt: [`bit`], [`cjson`], [`cmsgpack`], [`struct_lib`]
//!   (`struct`), over [`clib`] (their view of Lua's C API and glibc; their errors are plain
//!   strings, as `luaL_error`'s);
//! - [`functions`]: libraries, library metadata, FUNCTION DUMP/RESTORE payloads;
//! - `library.rs`: the host's side of functions (`register_function`, running a library's
//!   code, FCALL/FCALL_RO, the FUNCTION subcommands); the functions' Lua state is built here
//!   with the scripts' one.
//!
//! # Bounds
//! The Lua heap is capped ([`DEFAULT_MEMORY_LIMIT`]): a script that allocates past it gets an
//! error reply and the state stays usable. Lua's own limits turn deep recursion into a
//! `stack overflow` error; reply conversion stops at [`convert::MAX_DEPTH`]. A script past
//! `busy-reply-threshold` lends the instruction hook to the server's poller
//! ([`engine_core::script::BusyPoll`]): other clients get `-BUSY`, SCRIPT/FUNCTION KILL stop it
//! (`RunCtx::serve_while_busy`); without a poller it is stopped after [`BUSY_LIMIT`]. Not yet
//! here: SCRIPT DEBUG.

mod baselib;
pub mod bit;
pub mod cjson;
pub mod clib;
pub mod cmsgpack;
pub mod convert;
mod fastcall;
pub mod functions;
mod library;
pub mod rand;
pub mod shebang;
pub mod struct_lib;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use engine_core::call::{Call, ErrorReply};
use engine_core::error::CmdError;
use engine_core::script::{Busy, BusyPoll, RunFlags, ScriptRun, Scripting};
use engine_core::{Engine, Proto};
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::convert::{error_table, write_error};
use crate::shebang::ScriptFlags;

/// Cap on the Lua heap of one engine process.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 << 20;
/// `redis.REDIS_VERSION` and `REDIS_VERSION_NUM` (the version INFO reports).
const VERSION: &str = "7.0.15";
const VERSION_NUM: f64 = 0x07_00_0f as f64;
/// The chunk name of our own Lua code; the error handler skips its frames.
const INTERNAL: &str = "=recached";
/// How long a script run without the server's poller (an embedded engine: tests, fuzzing)
/// may take before it is stopped with an error (Redis's default `busy-reply-threshold`):
/// nobody could send SCRIPT KILL there. With a poller, a script past `busy-reply-threshold`
/// runs on and the server answers others `-BUSY` (docs/scripting.md, "Busy scripts").
/// Checked every [`DEADLINE_CHECK_INSTRUCTIONS`] Lua instructions.
pub const BUSY_LIMIT: std::time::Duration = std::time::Duration::from_millis(5000);
const DEADLINE_CHECK_INSTRUCTIONS: u32 = 100_000;
/// The error a script past [`BUSY_LIMIT`] gets (the usual `script: <sha>, on …` suffix
/// follows).
const STOPPED: &str = "Script ran longer than busy-reply-threshold (5000 ms) and was stopped";
/// The error a script stopped by SCRIPT KILL, FUNCTION KILL or SHUTDOWN NOSAVE gets (redis
/// `luaMaskCountHook`; the usual suffix follows).
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
/// The running script's deadline, whether it passed, and whether the code running is a
/// library's FUNCTION LOAD (then the limit is [`LOAD_LIMIT`]) (shared with the Lua hook and the
/// prelude's `I.stopping`).
type Deadline = Rc<(Cell<Option<Instant>>, Cell<bool>, Cell<bool>)>;
/// How long a library's code may run in FUNCTION LOAD (redis `LOAD_TIMEOUT_MS`).
const LOAD_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);
/// The engine and the run of the script now executing, for `redis.call`, `redis.pcall` and
/// `redis.setresp`, which are created once per Lua state (a closure created per run, as
/// `Lua::scope` does, and the protected table writes to install it cost more than the
/// commands a typical script runs). Null outside a run.
struct RunCtx {
    engine: Cell<*mut Engine>,
    run: Cell<*mut ScriptRun>,
    now_us: Cell<u64>,
    /// The server's poller for this run ([`BusyPoll`]), lent like `engine`; null when the
    /// caller has none (then a runaway script is stopped at [`BUSY_LIMIT`] instead).
    poller: Cell<Option<*mut (dyn BusyPoll + 'static)>>,
    /// When this run passes `busy-reply-threshold` (set only with a poller).
    busy_at: Cell<Option<Instant>>,
    /// What [`Engine::busy`] says of this run once it is busy: EVAL or function, name and
    /// (functions) the FCALL's arguments, kept here so a run that never gets busy costs no copy
    /// beyond the FCALL's arguments.
    busy: RefCell<Busy>,
    /// `redis.call`'s reused buffers ([`fastcall`]; only it touches them, one call at a time),
    /// and whether a call is using them (a finalizer's nested call then uses its own).
    scratch: std::cell::UnsafeCell<fastcall::Scratch>,
    scratch_busy: Cell<bool>,
}

impl RunCtx {
    fn new() -> RunCtx {
        RunCtx {
            engine: Cell::new(std::ptr::null_mut()),
            run: Cell::new(std::ptr::null_mut()),
            now_us: Cell::new(0),
            poller: Cell::new(None),
            busy_at: Cell::new(None),
            busy: RefCell::new(Busy::default()),
            scratch: Default::default(),
            scratch_busy: Cell::new(false),
        }
    }

    /// Called by the instruction hook of a run past `busy-reply-threshold`: marks the engine
    /// busy (logging it the first time), lets the server serve other clients once, and says
    /// whether SCRIPT KILL, FUNCTION KILL or SHUTDOWN NOSAVE asked the script to stop.
    fn serve_while_busy(&self) -> bool {
        let Some(poller) = self.poller.get() else {
            return false;
        };
        self.poller.set(None);
        let stop = self.with(|e, run, _| {
            let busy = e.busy.get_or_insert_with(|| {
                let b = self.busy.borrow().clone();
                log::warn!(
                    "Slow script detected: still in execution after {} milliseconds. You can \
                     try killing the script using the {} command. Script name is: {}.",
                    e.config.busy_reply_threshold,
                    if b.eval {
                        "SCRIPT KILL"
                    } else {
                        "FUNCTION KILL"
                    },
                    b.name
                );
                b
            });
            busy.wrote = run.wrote();
            // SAFETY: as for `engine` and `run` in `with` below: `LuaHost::run` stores this
            // pointer from a `&mut dyn BusyPoll` it holds for the whole run and does not use
            // while Lua runs, and nulls it right after; it is taken out above, so this is the
            // only reference made from it, and the poller cannot re-enter Lua (other clients'
            // EVAL/FCALL are refused while `e.busy` is set, and the host is taken out of the
            // engine anyway).
            unsafe { (*poller).serve(e) };
            e.busy.as_ref().is_some_and(|b| b.killed || b.shutdown)
        });
        self.poller.set(Some(poller));
        stop == Some(true)
    }

    /// Runs `f` with the running script's engine and run; `None` outside a run (or while they
    /// are already lent out).
    fn with<R>(&self, f: impl FnOnce(&mut Engine, &mut ScriptRun, u64) -> R) -> Option<R> {
        let (e, run) = (self.engine.get(), self.run.get());
        if e.is_null() || run.is_null() {
            return None;
        }
        // Lent out: a nested use (there is none: see below) would find null, never alias.
        self.engine.set(std::ptr::null_mut());
        self.run.set(std::ptr::null_mut());
        // SAFETY: `LuaHost::run` stores these pointers from its `&mut Engine` and
        // `&mut ScriptRun` right before it calls into Lua and nulls them right after, and it
        // does not touch either reference while Lua runs (the call is synchronous, one
        // thread: `Lua` and this `Rc` are not `Send`). So while non-null they point to live,
        // exclusively borrowed objects that nothing else uses. Taking them out above makes
        // this the only `&mut` made from them at any time: `script::call` cannot re-enter Lua
        // (EVAL/FCALL are `noscript` and the engine's script host is taken out while a script
        // runs), and even if it did, the nested use would get `None`.
        let out = unsafe { f(&mut *e, &mut *run, self.now_us.get()) };
        self.engine.set(e);
        self.run.set(run);
        Some(out)
    }
}

/// Run a GC step every this many scripts (redis `LUA_GC_CYCLE_PERIOD`).
const GC_PERIOD: u32 = 50;

/// A cached script: its compiled function is `State::compiled[index]` (a Lua table holds
/// them, not one mlua handle each: mlua keeps a handle's reference on an auxiliary Lua stack
/// that holds at most 8,000, and the cache is unbounded, like Redis's).
struct Script {
    index: i64,
    flags: ScriptFlags,
}

/// The Lua state and what hangs off it; rebuilt by SCRIPT FLUSH.
struct State {
    lua: Lua,
    /// The hidden table behind the protected globals (KEYS and ARGV are set there).
    globals: Table,
    xpcall: Function,
    handler: Function,
    /// The running script's engine and run ([`RunCtx`]).
    ctx: Rc<RunCtx>,
    /// The error table a Rust function of the `redis` table raised (see [`raise`]).
    pending: Pending,
    /// By SHA (hashed with foldhash: SipHash over 40 bytes was a visible part of an EVALSHA).
    scripts: HashMap<String, Script, foldhash::fast::RandomState>,
    /// The cached scripts' functions, by [`Script::index`].
    compiled: Table,
    /// The functions' state only: switches the globals to FUNCTION LOAD's environment.
    load_mode: Option<Function>,
    /// The functions' state only: `(f, handler, keys, args)` → xpcall of `f(keys, args)`.
    fcall: Option<Function>,
}

/// A function `redis.register_function` registered during a FUNCTION LOAD.
type Loading = Rc<RefCell<Option<Vec<functions::Func>>>>;

/// The script host the engine server installs (see the crate docs).
pub struct LuaHost {
    state: State,
    /// The functions' own Lua state (Redis keeps one for the LUA engine, apart from EVAL's:
    /// SCRIPT FLUSH does not touch it).
    fstate: State,
    libraries: functions::Libraries,
    /// Set while a library's code runs (FUNCTION LOAD/RESTORE).
    loading: Loading,
    memory_limit: usize,
    rand: Rc<Cell<rand::Rand48>>,
    /// When the running script is stopped ([`BUSY_LIMIT`]) and whether it is being stopped;
    /// `(None, false)` between scripts.
    deadline: Deadline,
    runs: u32,
    /// When a script is stopped ([`BUSY_LIMIT`]; tests and fuzzing lower it).
    busy_limit: std::time::Duration,
}

/// Installs a Lua host in `e` (the engine server calls this once at start).
pub fn install(e: &mut Engine) -> mlua::Result<()> {
    e.scripting = Some(Box::new(LuaHost::new(DEFAULT_MEMORY_LIMIT)?));
    Ok(())
}

impl LuaHost {
    /// A host whose Lua heap may grow to `memory_limit` bytes.
    pub fn new(memory_limit: usize) -> mlua::Result<LuaHost> {
        let rand = Rc::new(Cell::new(rand::Rand48::default()));
        let deadline: Deadline = Rc::new((Cell::new(None), Cell::new(false), Cell::new(false)));
        let loading: Loading = Rc::new(RefCell::new(None));
        Ok(LuaHost {
            state: State::new(memory_limit, rand.clone(), deadline.clone(), None)?,
            fstate: State::new(
                memory_limit,
                rand.clone(),
                deadline.clone(),
                Some(loading.clone()),
            )?,
            libraries: functions::Libraries::default(),
            loading,
            memory_limit,
            rand,
            deadline,
            runs: 0,
            busy_limit: BUSY_LIMIT,
        })
    }

    /// Stops scripts after `limit` instead of [`BUSY_LIMIT`] (their error text still says
    /// 5000 ms): for tests and fuzzing, where a runaway script should cost little time.
    pub fn set_busy_limit(&mut self, limit: std::time::Duration) {
        self.busy_limit = limit;
    }

    /// Number of scripts in the cache.
    pub fn cached(&self) -> usize {
        self.state.scripts.len()
    }

    /// Bytes the Lua heap uses.
    pub fn used_memory(&self) -> usize {
        self.state.lua.used_memory()
    }

    /// SCRIPT LOAD / EVAL's compile step: the script's SHA (lowercase hex), or the error
    /// reply text (with its code).
    fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        if self.state.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, skip) = shebang::parse(body).map_err(|m| format!("ERR {m}"))?;
        let func = compile(&self.state.lua, &body[skip..], "@user_script")
            .map_err(|msg| format!("ERR Error compiling script (new function): {msg}"))?;
        let index = self.state.scripts.len() as i64 + 1;
        self.state
            .compiled
            .raw_set(index, func)
            .map_err(|e| format!("ERR Error compiling script (new function): {e}"))?;
        self.state
            .scripts
            .insert(sha.clone(), Script { index, flags });
        Ok(sha)
    }

    fn eval_generic(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        let name = c.spec.name;
        let evalsha = name.starts_with("evalsha");
        let ro = name.ends_with("_ro");
        const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
        if evalsha && c.argv[1].len() != 40 {
            return Err(CmdError::Static(NOSCRIPT));
        }
        let numkeys = resp::parse_i64(c.argv[2]).ok_or(CmdError::Static(
            "ERR value is not an integer or out of range",
        ))?;
        let nargs = (c.argv.len() - 3) as i64;
        if numkeys > nargs {
            return Err(CmdError::Static(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        if numkeys < 0 {
            return Err(CmdError::Static("ERR Number of keys can't be negative"));
        }
        // EVALSHA: the SHA lowercased on the stack (it is 40 bytes), no allocation.
        let mut lower = [0u8; 40];
        let loaded;
        let sha: &str = if evalsha {
            lower.copy_from_slice(c.argv[1]);
            lower.make_ascii_lowercase();
            std::str::from_utf8(&lower).map_err(|_| CmdError::Static(NOSCRIPT))?
        } else {
            loaded = self.load(c.argv[1]).map_err(CmdError::Other)?;
            &loaded
        };
        let Some(script) = self.state.scripts.get(sha) else {
            return Err(CmdError::Static(NOSCRIPT));
        };
        let flags = script.flags;
        let func: Function = self
            .state
            .compiled
            .raw_get(script.index)
            .map_err(|e| CmdError::Other(format!("ERR {e}")))?;
        self.invoke(e, c, false, (&func, sha), flags, ro, numkeys as usize)
    }

    /// EVAL*/FCALL*'s common part once the callee is known: the flags' refusals, KEYS (the
    /// `numkeys` arguments after argv[2]) and ARGV, the run, and its reply written to `c`.
    #[allow(clippy::too_many_arguments)]
    fn invoke(
        &mut self,
        e: &mut Engine,
        c: &mut Call,
        fstate: bool,
        (func, name): (&Function, &str),
        flags: ScriptFlags,
        ro: bool,
        numkeys: usize,
    ) -> Result<(), CmdError> {
        let run_flags = prepare(e, flags, ro)?;
        let split = 3 + numkeys;
        let keys = &c.argv[3..split];
        let args = &c.argv[split..];
        let mut run = ScriptRun::new(e, c.client, run_flags, keys);
        let mut reply = Vec::new();
        let caller_proto = c.client.proto;
        let st = if fstate { &self.fstate } else { &self.state };
        if let Some(poller) = c.poller.take() {
            let p: *mut (dyn BusyPoll + '_) = poller;
            // SAFETY: only the lifetime bound of the trait object changes (same layout); the
            // pointer is used only during this run and cleared at its end (`RunCtx`).
            let p: *mut (dyn BusyPoll + 'static) = unsafe { std::mem::transmute(p) };
            st.ctx.poller.set(Some(p));
            let mut b = st.ctx.busy.borrow_mut();
            b.eval = !fstate;
            b.name.clear();
            b.name.push_str(name);
            b.started_ms = c.now_ms;
            if fstate {
                // FUNCTION STATS shows the FCALL while it is busy. The buffers are reused, so
                // an FCALL allocates nothing here once warm.
                b.argv.resize_with(c.argv.len(), Vec::new);
                for (dst, src) in b.argv.iter_mut().zip(c.argv) {
                    dst.clear();
                    dst.extend_from_slice(src);
                }
                (b.libraries, b.functions) =
                    (self.libraries.libs.len(), self.libraries.function_count());
            }
        }
        c.error_reply = self.run(
            fstate,
            e,
            &mut run,
            func,
            name,
            keys,
            args,
            c.now_us,
            caller_proto,
            &mut reply,
        );
        c.w().raw(&reply);
        Ok(())
    }

    /// Runs a compiled script with KEYS and ARGV set; its reply (or error) goes to `out` in
    /// the caller's protocol. Says how an error reply counts: an error table a `redis.call`
    /// or `redis.pcall` made was counted when the command failed (redis
    /// `ignore_err_stats_update`), any other error is new.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        fstate: bool,
        e: &mut Engine,
        run: &mut ScriptRun,
        func: &Function,
        sha: &str,
        keys: &[&[u8]],
        args: &[&[u8]],
        now_us: u64,
        caller: Proto,
        out: &mut Vec<u8>,
    ) -> Option<ErrorReply> {
        let st = if fstate { &self.fstate } else { &self.state };
        let started = Instant::now();
        if st.ctx.poller.get().is_some() {
            // The server serves others past the threshold; SCRIPT KILL stops the script.
            let threshold = std::time::Duration::from_millis(e.config.busy_reply_threshold);
            st.ctx.busy_at.set(Some(started + threshold));
        } else {
            self.deadline.0.set(Some(started + self.busy_limit));
        }
        let result = (|| -> mlua::Result<(bool, Value)> {
            let unlimited = Unlimited::new(&st.lua);
            let fcall_args = match (&st.fcall, fstate) {
                (Some(_), true) => Some((array(&st.lua, keys)?, array(&st.lua, args)?)),
                _ => {
                    set_keys_argv(&st.lua, &st.globals, keys, args)?;
                    None
                }
            };
            drop(unlimited);
            st.pending.borrow_mut().take();
            // No redis.call is in progress (one whose push an allocation error cut short
            // left the mark set).
            st.ctx.scratch_busy.set(false);
            // Lent to redis.call/pcall/setresp for the call ([`RunCtx::with`]); `e` and `run`
            // are not used until they are taken back.
            st.ctx.engine.set(&mut *e);
            st.ctx.run.set(&mut *run);
            st.ctx.now_us.set(now_us);
            // xpcall's first two results: whether the run succeeded, and its value or error.
            let r = match (&st.fcall, fcall_args) {
                (Some(fcall), Some((keys, args))) => {
                    fcall.call::<(bool, Value)>((func, &st.handler, keys, args))
                }
                _ => st.xpcall.call::<(bool, Value)>((func, &st.handler)),
            };
            st.ctx.engine.set(std::ptr::null_mut());
            st.ctx.run.set(std::ptr::null_mut());
            r
        })();
        self.deadline.0.set(None);
        self.deadline.1.set(false);
        st.ctx.poller.set(None);
        st.ctx.busy_at.set(None);
        e.busy = None;
        let script_proto = run.proto();
        let _unlimited = Unlimited::new(&st.lua);
        let how = |t: &Table| {
            if matches!(
                t.raw_get::<Value>("ignore_error_stats_update"),
                Ok(Value::Boolean(true))
            ) {
                ErrorReply::AlreadyCounted
            } else {
                ErrorReply::Counted
            }
        };
        let error_reply = match &result {
            Ok((true, Value::Table(t)))
                if matches!(t.raw_get::<Value>("err"), Ok(Value::String(_))) =>
            {
                Some(how(t))
            }
            Ok((true, _)) => None,
            Ok((false, Value::Table(t))) => Some(how(t)),
            _ => Some(ErrorReply::Counted),
        };
        match result {
            Ok((true, v)) => convert::lua_to_reply(&v, caller, script_proto, out),
            Ok((false, Value::Table(t))) => {
                let msg = match t.raw_get::<Value>("err") {
                    Ok(Value::String(s)) => s.as_bytes().to_vec(),
                    _ => b"ERR unknown error".to_vec(),
                };
                let mut text = msg;
                if let (Ok(Value::String(src)), Ok(line)) =
                    (t.raw_get::<Value>("source"), t.raw_get::<Value>("line"))
                    && let Some(line) = number(&line)
                {
                    text.extend_from_slice(format!(" script: {sha}, on ").as_bytes());
                    text.extend_from_slice(&src.as_bytes());
                    text.extend_from_slice(format!(":{line}.").as_bytes());
                }
                write_error(out, &text);
            }
            Ok((false, other)) => {
                let msg = match &other {
                    Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                    Value::Error(err) => err.to_string(),
                    _ => "execution failure".to_string(),
                };
                let msg: String = msg.chars().take(100).collect();
                write_error(
                    out,
                    format!("ERR Error running script {sha}, {msg}").as_bytes(),
                );
            }
            Err(err) => {
                let msg: String = err.to_string().chars().take(100).collect();
                write_error(
                    out,
                    format!("ERR Error running script {sha}, {msg}").as_bytes(),
                );
            }
        }
        // KEYS and ARGV stay set until the next EVAL replaces them, as in Redis
        // (`luaCallFunction` sets them and never clears them).
        self.runs += 1;
        if self.runs.is_multiple_of(GC_PERIOD) {
            let _ = st.lua.gc_step();
        }
        error_reply
    }

    fn script_cmd(&mut self, c: &mut Call) -> Result<(), CmdError> {
        match c.spec.name {
            "script|help" => {
                engine_core::call::help(
                    c,
                    "SCRIPT",
                    &[
                        "DEBUG (YES|SYNC|NO)",
                        "    Set the debug mode for subsequent scripts executed.",
                        "EXISTS <sha1> [<sha1> ...]",
                        "    Return information about the existence of the scripts in the script cache.",
                        "FLUSH [ASYNC|SYNC]",
                        "    Flush the Lua scripts cache. Very dangerous on replicas.",
                        "    When called without the optional mode argument, the behavior is determined by the",
                        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                        "    * ASYNC: Asynchronously flush the scripts cache.",
                        "    * SYNC: Synchronously flush the scripts cache.",
                        "KILL",
                        "    Kill the currently executing Lua script.",
                        "LOAD <script>",
                        "    Load a script into the scripts cache without executing it.",
                        "HELP",
                        "    Prints this help.",
                    ],
                );
                Ok(())
            }
            "script|flush" => {
                let ok = match c.argv.len() {
                    2 => true,
                    3 => {
                        c.argv[2].eq_ignore_ascii_case(b"sync")
                            || c.argv[2].eq_ignore_ascii_case(b"async")
                    }
                    _ => false,
                };
                if !ok {
                    return Err(CmdError::Static(
                        "ERR SCRIPT FLUSH only support SYNC|ASYNC option",
                    ));
                }
                // Redis resets the whole Lua state (`scriptingReset`), not only the cache.
                self.state = State::new(
                    self.memory_limit,
                    self.rand.clone(),
                    self.deadline.clone(),
                    None,
                )
                .map_err(|err| CmdError::Other(format!("ERR {err}")))?;
                c.w().ok();
                Ok(())
            }
            "script|exists" => {
                let found: Vec<bool> = c.argv[2..]
                    .iter()
                    .map(|s| {
                        let sha = String::from_utf8_lossy(s).to_ascii_lowercase();
                        self.state.scripts.contains_key(&sha)
                    })
                    .collect();
                let mut w = c.w();
                w.array(found.len());
                for f in found {
                    w.integer(i64::from(f));
                }
                Ok(())
            }
            "script|load" => {
                let sha = self.load(c.argv[2]).map_err(CmdError::Other)?;
                c.w().bulk(sha.as_bytes());
                Ok(())
            }
            "script|kill" => Err(CmdError::Static(
                "NOTBUSY No scripts in execution right now.",
            )),
            _ => Err(CmdError::Other(
                engine_core::error::unknown_command_message(c.argv),
            )),
        }
    }
}

impl Scripting for LuaHost {
    fn cached_scripts(&self) -> usize {
        self.cached()
    }

    fn may_write(&self, name: &str, argv: &[&[u8]]) -> bool {
        let flags = match (name, argv.get(1)) {
            ("eval", Some(body)) => shebang::parse(body).map(|f| f.0).ok(),
            ("evalsha", Some(sha)) => {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                self.state.scripts.get(&sha).map(|s| s.flags)
            }
            ("fcall", Some(f)) => self.libraries.find(f).map(|f| f.flags),
            _ => None,
        };
        // A script without a shebang (compat) may write whatever it declares.
        flags.is_none_or(|f| f.compat || !f.no_writes)
    }

    fn eval(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        self.eval_generic(e, c)
    }

    fn script(&mut self, _e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        self.script_cmd(c)
    }

    fn fcall(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        self.fcall_generic(e, c)
    }

    fn function(&mut self, _e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        self.function_cmd(c)
    }

    fn library_codes(&self, each: &mut dyn FnMut(&[u8])) {
        self.each_library_code(each)
    }

    fn load_libraries(&mut self, codes: &[Vec<u8>]) -> Result<(), String> {
        self.load_library_codes(codes)
    }
}

impl State {
    fn new(
        memory_limit: usize,
        rand: Rc<Cell<rand::Rand48>>,
        deadline: Deadline,
        loading: Option<Loading>,
    ) -> mlua::Result<State> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        // Every coroutine too (a global hook). Past the deadline every check raises, and the
        // prelude's pcall/xpcall/coroutine.resume raise again what they catch (`I.stopping`).
        // With the server's poller, a run past busy-reply-threshold instead serves other
        // clients at each check until it ends or is killed (`RunCtx::serve_while_busy`).
        let hook_deadline = deadline.clone();
        let ctx = Rc::new(RunCtx::new());
        let hook_ctx = ctx.clone();
        lua.set_global_hook(
            mlua::HookTriggers::new().every_nth_instruction(DEADLINE_CHECK_INSTRUCTIONS),
            move |_, _| match (hook_ctx.busy_at.get(), hook_deadline.0.get()) {
                (Some(at), _) if Instant::now() >= at => {
                    if hook_deadline.1.get() || hook_ctx.serve_while_busy() {
                        hook_deadline.1.set(true);
                        return Err(mlua::Error::external(KILLED));
                    }
                    Ok(mlua::VmState::Continue)
                }
                (_, Some(at)) if Instant::now() >= at => {
                    hook_deadline.1.set(true);
                    Err(mlua::Error::external(if hook_deadline.2.get() {
                        "FUNCTION LOAD timeout"
                    } else {
                        STOPPED
                    }))
                }
                _ => Ok(mlua::VmState::Continue),
            },
        )?;
        let hooks = lua.create_table()?;
        let pending: Pending = Rc::new(RefCell::new(None));
        // redis.call raises its error table, redis.pcall returns it (fastcall.rs).
        let (redis_call_fn, redis_pcall_fn) = fastcall::install(&lua, &ctx)?;
        hooks.raw_set("call", redis_call_fn)?;
        hooks.raw_set("pcall", redis_pcall_fn)?;
        let p = pending.clone();
        hooks.raw_set(
            "take_pending",
            lua.create_function(move |_, ()| Ok(p.borrow_mut().take()))?,
        )?;
        hooks.raw_set(
            "errtext",
            lua.create_function(|lua, s: mlua::LuaString| {
                lua.create_string(convert::error_text(&s.as_bytes()))
            })?,
        )?;
        let (c, p) = (ctx.clone(), pending.clone());
        hooks.raw_set(
            "acl_check_cmd",
            lua.create_function(move |lua, args: MultiValue| {
                let _unlimited = Unlimited::new(lua);
                if args.is_empty() {
                    return raise(
                        lua,
                        &p,
                        "Please specify at least one argument for this redis lib call",
                    );
                }
                let Some(argv) = args
                    .iter()
                    .map(convert::arg_bytes)
                    .collect::<Option<Vec<_>>>()
                else {
                    return raise(
                        lua,
                        &p,
                        "Lua redis lib command arguments must be strings or integers",
                    );
                };
                let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                match c.with(|e, run, _| engine_core::script::acl_check(e, run, &refs)) {
                    Some(Ok(allowed)) => Ok(allowed),
                    Some(Err(msg)) => raise(lua, &p, msg.trim_start_matches("ERR ")),
                    None => raise(
                        lua,
                        &p,
                        "redis.acl_check_cmd can only be called inside a script invocation",
                    ),
                }
            })?,
        )?;
        let p = pending.clone();
        hooks.raw_set(
            "sha1hex",
            lua.create_function(move |lua, args: MultiValue| {
                if args.len() != 1 {
                    return raise(lua, &p, "wrong number of arguments");
                }
                Ok(sha1_smol::Sha1::from(convert::tolstring(&args[0]))
                    .digest()
                    .to_string())
            })?,
        )?;
        let p = pending.clone();
        hooks.raw_set(
            "log",
            lua.create_function(move |lua, args: MultiValue| {
                if args.len() < 2 {
                    return raise(lua, &p, "redis.log() requires two arguments or more.");
                }
                let Some(level) = lua_number(&args[0]) else {
                    return raise(lua, &p, "First argument must be a number (log level).");
                };
                let level = level as i64;
                if !(0..=3).contains(&level) {
                    return raise(lua, &p, "Invalid debug level.");
                }
                let parts: Vec<String> = args
                    .iter()
                    .skip(1)
                    .filter(|v| {
                        matches!(v, Value::String(_) | Value::Integer(_) | Value::Number(_))
                    })
                    .map(|v| String::from_utf8_lossy(&convert::tolstring(v)).into_owned())
                    .collect();
                let msg = parts.join(" ");
                match level {
                    0 | 1 => log::debug!("{msg}"),
                    2 => log::info!("{msg}"),
                    _ => log::warn!("{msg}"),
                }
                Ok(())
            })?,
        )?;
        let (c, p) = (ctx.clone(), pending.clone());
        hooks.raw_set(
            "setresp",
            lua.create_function(move |lua, args: MultiValue| {
                if args.len() != 1 {
                    return raise(lua, &p, "redis.setresp() requires one argument.");
                }
                let v = lua_number(&args[0]).unwrap_or(0.0);
                if v != 2.0 && v != 3.0 {
                    return raise(lua, &p, "RESP version must be 2 or 3.");
                }
                let proto = if v == 3.0 { Proto::Resp3 } else { Proto::Resp2 };
                match c.with(|_, run, _| run.set_proto(proto)) {
                    Some(()) => Ok(()),
                    None => raise(
                        lua,
                        &p,
                        "redis.call/pcall can only be called inside a script invocation",
                    ),
                }
            })?,
        )?;
        let p = pending.clone();
        hooks.raw_set(
            "set_repl",
            lua.create_function(move |lua, args: MultiValue| {
                if args.len() != 1 {
                    return raise(lua, &p, "redis.set_repl() requires two arguments.");
                }
                let v = lua_number(&args[0]).unwrap_or(0.0) as i64;
                if v & !3 != 0 {
                    return raise(
                        lua,
                        &p,
                        "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                    );
                }
                Ok(())
            })?,
        )?;
        let r = rand.clone();
        hooks.raw_set(
            "rand",
            lua.create_function(move |_, ()| {
                let mut g = r.get();
                let v = g.unit();
                r.set(g);
                Ok(v)
            })?,
        )?;
        let r = rand;
        hooks.raw_set(
            "seed",
            lua.create_function(move |_, v: f64| {
                let mut g = r.get();
                g.seed(v as i64 as i32);
                r.set(g);
                Ok(())
            })?,
        )?;
        hooks.raw_set(
            "stopping",
            lua.create_function(move |_, ()| Ok(deadline.1.get()))?,
        )?;
        if let Some(loading) = loading {
            let p = pending.clone();
            hooks.raw_set(
                "register_function",
                lua.create_function(move |lua, args: MultiValue| {
                    library::register_function(lua, &p, &loading, args)
                })?,
            )?;
        }
        hooks.raw_set("bit", bit::table(&lua)?)?;
        let next: Function = lua.globals().raw_get("next")?;
        hooks.raw_set("cjson", cjson::table(&lua, &next)?)?;
        hooks.raw_set("cmsgpack", cmsgpack::table(&lua)?)?;
        hooks.raw_set("struct", struct_lib::table(&lua)?)?;
        // The string a C library's error is (clib.rs), for pcall.
        hooks.raw_set(
            "plain_error",
            lua.create_function(|lua, e: Value| clib::error_string(lua, &e))?,
        )?;
        hooks.raw_set("version", VERSION)?;
        hooks.raw_set("version_num", VERSION_NUM)?;
        baselib::install(&lua)?;
        let xpcall: Function = lua.globals().raw_get("xpcall")?;
        let tostring: Function = lua.globals().raw_get("tostring")?;
        let globals: Table = lua
            .load(include_str!("prelude.lua"))
            .set_name(INTERNAL)
            .set_mode(ChunkMode::Text)
            .call(hooks.clone())?;
        let p = pending.clone();
        let handler = lua.create_function(move |lua, err: Value| {
            let err = match err {
                Value::Table(t) => Value::Table(t),
                other => match clib::error_string(lua, &other)? {
                    Some(s) => s,
                    None => p.borrow_mut().take().map_or(other, Value::Table),
                },
            };
            error_handler(lua, &tostring, err)
        })?;
        lua.set_memory_limit(memory_limit)?;
        lua.set_named_registry_value(clib::OUTPUT_CAP, memory_limit)?;
        let load_mode: Option<Function> = hooks.raw_get("load_mode")?;
        let fcall: Option<Function> = hooks.raw_get("fcall")?;
        let compiled = lua.create_table()?;
        Ok(State {
            load_mode,
            fcall,
            lua,
            globals,
            xpcall,
            handler,
            ctx,
            pending,
            scripts: HashMap::default(),
            compiled,
        })
    }
}

/// The xpcall handler (redis `__redis__err__handler`): a non-table error becomes
/// `{err = "ERR " .. tostring(err)}`; the table gets `source` and `line` of the innermost
/// frame of script code (our own frames and C functions are skipped, as Redis skips the C
/// function that raised).
fn error_handler(lua: &Lua, tostring: &Function, err: Value) -> mlua::Result<Value> {
    let t = match err {
        Value::Table(t) => t,
        other => {
            let s: mlua::LuaString = match &other {
                Value::Error(e) => lua.create_string(e.to_string())?,
                _ => tostring.call(other)?,
            };
            let mut text = b"ERR ".to_vec();
            text.extend_from_slice(&s.as_bytes());
            error_table(lua, &text, false)?
        }
    };
    for level in 1..32 {
        let frame = lua.inspect_stack(level, |d| {
            let src = d.source();
            let source = src.source.as_deref().unwrap_or("").to_string();
            (src.what, source, d.current_line())
        });
        let Some((what, source, line)) = frame else {
            break;
        };
        if what == "C" || source == INTERNAL {
            continue;
        }
        t.raw_set("source", source)?;
        if let Some(line) = line {
            t.raw_set("line", line as f64)?;
        }
        break;
    }
    Ok(Value::Table(t))
}

/// Where a Rust function of the `redis` table leaves the error table it raises: mlua raises a
/// Rust error as an opaque value, so the error handler and `pcall` pick the table up here.
type Pending = Rc<RefCell<Option<Table>>>;

/// Raises `ERR <msg>` from a Rust function as Redis raises its error tables.
fn raise<T>(lua: &Lua, pending: &Pending, msg: &str) -> mlua::Result<T> {
    let t = error_table(lua, format!("ERR {msg}").as_bytes(), false)?;
    *pending.borrow_mut() = Some(t);
    Err(mlua::Error::runtime(msg.to_string()))
}

/// Compiles `code` as text (binary chunks are refused) under `chunk_name`; the compiler's
/// message on failure (Lua's own text for a syntax error).
fn compile(lua: &Lua, code: &[u8], chunk_name: &str) -> Result<Function, String> {
    lua.load(code)
        .set_name(chunk_name)
        .set_mode(ChunkMode::Text)
        .into_function()
        .map_err(|err| match err {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}

/// `lua_tonumber`: numbers, and strings that read as numbers.
fn lua_number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// A Lua array of byte strings (KEYS, ARGV).
/// Lifts the Lua heap limit while our own Rust code builds Lua values (KEYS/ARGV, `redis.call`
/// arguments and replies), restoring it on drop. With a limit set, mlua protects every
/// allocating call (a C closure created and `lua_pcall`ed per value: most of an EVALSHA's
/// instructions); without one it calls Lua directly. What is built here is bounded by the
/// request or the command's reply, which already sit in memory; the script's own code always
/// runs under the limit.
struct Unlimited<'a> {
    lua: &'a Lua,
    limit: usize,
}

impl<'a> Unlimited<'a> {
    fn new(lua: &'a Lua) -> Unlimited<'a> {
        let limit = lua.set_memory_limit(0).unwrap_or(0);
        Unlimited { lua, limit }
    }
}

impl Drop for Unlimited<'_> {
    fn drop(&mut self) {
        let _ = self.lua.set_memory_limit(self.limit);
    }
}

/// Sets the globals `KEYS` and `ARGV` (in `globals`, the table behind the protected ones) to
/// arrays of `keys` and `args`, in one pass over Lua's C API: through mlua's handles this
/// cost more than the commands a typical script runs.
fn set_keys_argv(lua: &Lua, globals: &Table, keys: &[&[u8]], args: &[&[u8]]) -> mlua::Result<()> {
    // SAFETY: `exec_raw` runs this in protected mode with `globals` at index 1 and room for 3
    // more values; each array needs 3 at a time (its name, the table, one string). An error (allocation) jumps out of a closure that holds only borrowed slices,
    // nothing to drop.
    unsafe {
        lua.exec_raw::<()>(globals, |l| {
            for (name, items) in [(b"KEYS", keys), (b"ARGV", args)] {
                mlua::ffi::lua_pushlstring(l, name.as_ptr().cast(), name.len());
                mlua::ffi::lua_createtable(l, items.len().min(1 << 16) as i32, 0);
                for (i, item) in items.iter().enumerate() {
                    mlua::ffi::lua_pushlstring(l, item.as_ptr().cast(), item.len());
                    mlua::ffi::lua_rawseti_(l, -2, (i + 1) as i32);
                }
                mlua::ffi::lua_rawset(l, 1);
            }
            mlua::ffi::lua_settop(l, 0);
        })
    }
}

fn array(lua: &Lua, items: &[&[u8]]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

fn number(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(n) => Some(*n),
        Value::Number(n) => Some(*n as i64),
        _ => None,
    }
}

/// redis `scriptPrepareForRun`: the refusals of a script's flags, then its run flags.
fn prepare(e: &Engine, flags: ScriptFlags, ro: bool) -> Result<RunFlags, CmdError> {
    if !flags.compat {
        // A script with flags and without `no-writes` counts as a write command (redis
        // `scriptFlagsToCmdFlags`), so a failed background save refuses it as `processCommand`
        // refuses writes.
        if !flags.no_writes && engine_core::snapshot::writes_denied(e) {
            return Err(CmdError::Static(engine_core::snapshot::MISCONF));
        }
        if !flags.no_writes && engine_core::snapshot::replicas_missing(e) {
            return Err(CmdError::Static(engine_core::snapshot::NOREPLICAS));
        }
        if flags.no_cluster && e.cluster_enabled() {
            return Err(CmdError::Static(
                "ERR Can not run script on cluster, 'no-cluster' flag is set.",
            ));
        }
        if !flags.no_writes && ro {
            return Err(CmdError::Static(
                "ERR Can not execute a script with write flag using *_ro command.",
            ));
        }
        if e.memory_over_limit() && !flags.allow_oom && !flags.no_writes {
            return Err(CmdError::Static(
                "OOM allow-oom flag is not set on the script, can not run it when used \
                 memory > 'maxmemory'",
            ));
        }
    }
    Ok(RunFlags {
        read_only: ro || (!flags.compat && flags.no_writes),
        allow_oom: !flags.compat && flags.allow_oom,
        allow_cross_slot: flags.compat || flags.allow_cross_slot_keys,
    })
}

/// A Lua string (or number, as `lua_isstring` accepts) as bytes.
fn lua_str(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => convert::arg_bytes(v),
        _ => None,
    }
}
