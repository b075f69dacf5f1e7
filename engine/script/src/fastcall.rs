//! `redis.call` and `redis.pcall` on Lua's C API, as Redis's `luaRedisGenericCommand` does it.
//!
//! They are the hot path of every script: a script doing INCR + EXPIRE spends more in the two
//! calls' glue than in the commands. So the arguments are read in place from the Lua stack
//! (no value handles, no copies of string arguments), the command runs through
//! [`engine_core::script::call`] into a reused buffer, and its RESP reply is pushed onto the
//! Lua stack as it is read (redis `redisProtocolToLuaType`; the table of conversions is in
//! [`crate::convert`]). Reading the arguments in place also lifts mlua's per-callback stack
//! check, so `redis.call("lpush", "l", unpack(a))` with 7,999 elements works as in Redis
//! (tests/unit/scripting.tcl, "Script check unpack with massive arguments").
//!
//! # Lua errors and Rust frames
//! Lua 5.1 raises errors with `longjmp`. Jumping over a Rust frame is sound only when the frame
//! holds nothing to drop (a "plain old frame", RFC 2945). So the work that needs owned Rust
//! values ([`run_command`]: the argv, the command) happens in a function that calls no Lua API
//! that can raise, and has returned before anything is pushed; the frames that push (and may
//! raise: an allocation past the heap cap, or `lua_error` for `redis.call`'s error) hold only
//! integers, raw pointers and borrowed slices.

use std::ffi::{c_int, c_void};
use std::rc::Rc;

use engine_core::Proto;
use mlua::{Function, Lua, ffi};

use crate::RunCtx;

/// What `redis.call`/`redis.pcall` reuse from one call to the next, so that a call allocates
/// nothing once warm (beyond what the command itself does).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Number arguments formatted as Redis formats them (`%.17g`).
    nums: Vec<u8>,
    /// Where each argument's bytes are.
    spans: Vec<Span>,
    /// The argv of the call in progress; empty between calls (its slices borrow the Lua
    /// arguments and `nums` only while the call runs).
    argv: Vec<&'static [u8]>,
    /// The command's reply (RESP, in the script's protocol), or a refusal's error text.
    out: Vec<u8>,
}

#[derive(Clone, Copy)]
enum Span {
    /// A Lua string argument (valid while the argument is on the stack, i.e. for the call).
    Lua(*const u8, usize),
    /// `nums[start..end]`.
    Num(usize, usize),
}

/// What [`run_command`] did; owns nothing (it crosses raising frames).
#[derive(Clone, Copy)]
enum Outcome {
    /// The reply is in `Scratch::out`, in this protocol.
    Reply(Proto),
    /// Refused before running: the error text is in `Scratch::out` (counted by the engine).
    Refused,
    /// One of the fixed errors (not counted as a command error).
    Static(&'static [u8]),
}

/// Returns `(redis.call, redis.pcall)`: C closures whose upvalue is `ctx` (light userdata).
/// `ctx` must outlive the Lua state: the state's owner holds an `Rc` to it (and the mlua
/// callbacks living in the state hold more).
pub(crate) fn install(lua: &Lua, ctx: &Rc<RunCtx>) -> mlua::Result<(Function, Function)> {
    let p = Rc::as_ptr(ctx) as *mut c_void;
    let closure = |f: ffi::lua_CFunction| -> mlua::Result<Function> {
        // SAFETY: `exec_raw` gives the state with room for 3 values; this pushes the pointer
        // and turns it into the closure's upvalue (leaving the closure, which is returned).
        // `redis_call`/`redis_pcall` follow the C API contract (see there).
        unsafe {
            lua.exec_raw((), |l| {
                ffi::lua_pushlightuserdata(l, p);
                ffi::lua_pushcclosure(l, f, 1);
            })
        }
    };
    Ok((closure(redis_call)?, closure(redis_pcall)?))
}

/// `redis.call`: the reply, or the error table raised.
unsafe extern "C-unwind" fn redis_call(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as a C function with upvalue 1 set by `install`.
    unsafe { generic(l, true) }
}

/// `redis.pcall`: the reply, or the error table returned.
unsafe extern "C-unwind" fn redis_pcall(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as for `redis_call`.
    unsafe { generic(l, false) }
}

/// SAFETY (for the C API): Lua calls a C function with at least `LUA_MINSTACK` (20) free
/// slots above its arguments, which are popped before anything is pushed; this pushes at most
/// 5 before [`push_reply`], which checks for room per level of nesting. The upvalue is the `RunCtx` pointer `install` stored, alive for
/// the state's life. This frame and the pushing frames hold nothing to drop (module docs).
unsafe fn generic(l: *mut ffi::lua_State, raise: bool) -> c_int {
    unsafe {
        let ctx = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const RunCtx);
        // Any allocation while the reply is pushed may run a `__gc` finalizer (a `newproxy`'s,
        // which Redis 7 allows), and so Lua code and a nested redis.call: that one gets a
        // scratch of its own, freed before it returns (leaked only if an allocation error
        // jumps out of its push; `LuaHost::run` clears the busy mark at each run).
        let nested = ctx.scratch_busy.replace(true);
        let s: *mut Scratch = if nested {
            Box::into_raw(Box::default())
        } else {
            ctx.scratch.get()
        };
        // SAFETY: `s` is this call's alone: the shared scratch while no other call is
        // between here and its release below, else a fresh one.
        let outcome = run_command(l, ctx, &mut *s);
        // The arguments are done with (the reply is in the scratch): popped, as Redis pops
        // them, so that a call with thousands of them still has room for its reply.
        ffi::lua_settop(l, 0);
        let out: &[u8] = &(*s).out;
        let ok = match outcome {
            Outcome::Reply(proto) => {
                let top = ffi::lua_gettop(l);
                let mut pos = 0;
                if !push_reply(l, out, &mut pos, proto) {
                    ffi::lua_settop(l, top);
                    push_error_table(l, &[b"ERR reached lua stack limit"], false);
                }
                out.first() != Some(&b'-')
            }
            Outcome::Refused => {
                push_error_table(l, &[out], true);
                false
            }
            Outcome::Static(text) => {
                push_error_table(l, &[text], false);
                false
            }
        };
        if nested {
            drop(Box::from_raw(s));
        } else {
            ctx.scratch_busy.set(false);
        }
        if !ok && raise {
            // The error handler and `pcall` take the table as it is (redis `luaError`).
            ffi::lua_error(l);
        }
        1
    }
}

/// Reads the arguments and runs the command; leaves the reply (or a refusal's text) in the
/// scratch. Calls only Lua API functions that cannot raise (`lua_gettop`, `lua_type`,
/// `lua_tolstring` of a string, `lua_tonumber`), and drops everything it owns before it
/// returns.
///
/// SAFETY: `l` is the state of a running C function (see [`generic`]).
unsafe fn run_command(l: *mut ffi::lua_State, ctx: &RunCtx, s: &mut Scratch) -> Outcome {
    s.nums.clear();
    s.spans.clear();
    let n = unsafe { ffi::lua_gettop(l) };
    if n == 0 {
        return Outcome::Static(
            b"ERR Please specify at least one argument for this redis lib call",
        );
    }
    for i in 1..=n {
        // SAFETY: `i` is a valid index (1..=top).
        match unsafe { ffi::lua_type(l, i) } {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                // SAFETY: a string: no conversion, no allocation; the bytes live while the
                // argument is on the stack, which outlasts the call.
                let p = unsafe { ffi::lua_tolstring(l, i, &mut len) };
                s.spans.push(Span::Lua(p as *const u8, len));
            }
            ffi::LUA_TNUMBER => {
                let start = s.nums.len();
                // SAFETY: a number.
                crate::convert::arg_number(unsafe { ffi::lua_tonumber(l, i) }, &mut s.nums);
                s.spans.push(Span::Num(start, s.nums.len()));
            }
            _ => {
                return Outcome::Static(
                    b"ERR Lua redis lib command arguments must be strings or integers",
                );
            }
        }
    }
    s.argv.clear();
    for span in &s.spans {
        let arg: &[u8] = match *span {
            // SAFETY: see the LUA_TSTRING arm.
            Span::Lua(p, len) => unsafe { std::slice::from_raw_parts(p, len) },
            Span::Num(a, b) => &s.nums[a..b],
        };
        // SAFETY: the slice is used only by the command below, while the arguments are on
        // the stack and `nums` is not touched; `argv` is cleared right after, so no slice
        // outlives its bytes.
        s.argv
            .push(unsafe { std::mem::transmute::<&[u8], &'static [u8]>(arg) });
    }
    s.out.clear();
    let done = ctx.with(|e, run, now_us| {
        engine_core::script::call(e, run, &s.argv, now_us, &mut s.out).map(|()| run.proto())
    });
    s.argv.clear();
    match done {
        None => {
            Outcome::Static(b"ERR redis.call/pcall can only be called inside a script invocation")
        }
        Some(Ok(proto)) => Outcome::Reply(proto),
        Some(Err(msg)) => {
            s.out.clear();
            s.out
                .extend_from_slice(&crate::convert::error_text(msg.as_bytes()));
            Outcome::Refused
        }
    }
}

/// Pushes `{err = <parts joined>, ignore_error_stats_update = true if counted}`.
///
/// SAFETY: room for 5 values on the stack (table, key, 3 parts); may raise (allocation).
unsafe fn push_error_table(l: *mut ffi::lua_State, parts: &[&[u8]], counted: bool) {
    unsafe {
        ffi::lua_createtable(l, 0, 2);
        ffi::lua_pushlstring(l, c"err".as_ptr(), 3);
        for part in parts {
            ffi::lua_pushlstring(l, part.as_ptr().cast(), part.len());
        }
        if parts.len() > 1 {
            ffi::lua_concat(l, parts.len() as c_int);
        }
        ffi::lua_rawset(l, -3);
        if counted {
            ffi::lua_pushlstring(l, c"ignore_error_stats_update".as_ptr(), 25);
            ffi::lua_pushboolean(l, 1);
            ffi::lua_rawset(l, -3);
        }
    }
}

/// The line at `buf[*pos..]` (without its CRLF); moves `pos` past it.
fn line<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let rest = buf.get(*pos..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    *pos += end + 2;
    Some(&rest[..end])
}

/// `len` bytes at `buf[*pos..]` followed by CRLF; moves `pos` past them.
fn bulk<'a>(buf: &'a [u8], pos: &mut usize, len: usize) -> Option<&'a [u8]> {
    let b = buf.get(*pos..pos.checked_add(len)?)?;
    *pos += len + 2;
    Some(b)
}

/// Pushes the value encoded at `buf[*pos..]` as a Lua value (the conversions of
/// [`crate::convert`]); `false` when the stack has no room for deeper nesting (Lua's limit:
/// Redis panics there). A reply that is not RESP (never, from the engine) becomes an error
/// table.
///
/// SAFETY: a running C function's state; may raise (allocation). Holds nothing to drop.
unsafe fn push_reply(l: *mut ffi::lua_State, buf: &[u8], pos: &mut usize, proto: Proto) -> bool {
    unsafe {
        if ffi::lua_checkstack(l, 6) == 0 {
            return false;
        }
        let Some(head) = line(buf, pos) else {
            push_error_table(l, &[b"ERR unreadable reply"], false);
            return true;
        };
        let (kind, rest) = match head.split_first() {
            Some((k, r)) => (*k, r),
            None => (0, &b""[..]),
        };
        let count = || resp::parse_i64(rest);
        let push_str = |s: &[u8]| {
            ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
        };
        let null = || {
            if proto == Proto::Resp2 {
                ffi::lua_pushboolean(l, 0)
            } else {
                ffi::lua_pushnil(l)
            }
        };
        // `{key = <value on top>}`.
        let wrap = |key: &std::ffi::CStr| {
            ffi::lua_createtable(l, 0, 1);
            ffi::lua_insert(l, -2);
            ffi::lua_setfield(l, -2, key.as_ptr());
        };
        match (kind, count()) {
            (b':', Some(n)) => ffi::lua_pushnumber(l, n as f64),
            (b'$' | b'*', Some(-1)) | (b'_', _) => null(),
            (b'$', Some(n)) if n >= 0 => match bulk(buf, pos, n as usize) {
                Some(b) => push_str(b),
                None => push_error_table(l, &[b"ERR unreadable reply"], false),
            },
            (b'+', _) => {
                push_str(rest);
                wrap(c"ok");
            }
            (b'-', _) => {
                let (code, msg) = crate::convert::error_parts(head);
                push_error_table(l, &[code, b" ", msg], true);
            }
            (b'*' | b'>', Some(n)) if n >= 0 => {
                ffi::lua_createtable(l, n.min(1 << 16) as c_int, 0);
                for i in 1..=n {
                    if !push_reply(l, buf, pos, proto) {
                        return false;
                    }
                    ffi::lua_rawseti_(l, -2, i as c_int);
                }
            }
            (b'%' | b'~', Some(n)) if n >= 0 => {
                let set = kind == b'~';
                ffi::lua_createtable(l, 0, n.min(1 << 16) as c_int);
                for _ in 0..n {
                    if !push_reply(l, buf, pos, proto) {
                        return false;
                    }
                    if set {
                        ffi::lua_pushboolean(l, 1);
                    } else if !push_reply(l, buf, pos, proto) {
                        return false;
                    }
                    if ffi::lua_type(l, -2) == ffi::LUA_TNIL {
                        ffi::lua_settop(l, -3); // a nil key: left out, as Redis does
                    } else {
                        ffi::lua_rawset(l, -3);
                    }
                }
                wrap(if set { c"set" } else { c"map" });
            }
            (b'#', _) => ffi::lua_pushboolean(l, c_int::from(rest == b"t")),
            (b',', _) => {
                let d = std::str::from_utf8(rest)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .unwrap_or(0.0);
                ffi::lua_pushnumber(l, d);
                wrap(c"double");
            }
            (b'(', _) => {
                push_str(rest);
                wrap(c"big_number");
            }
            (b'=', Some(n)) if n >= 4 => match bulk(buf, pos, n as usize) {
                Some(b) => {
                    ffi::lua_createtable(l, 0, 2);
                    push_str(&b[4..]);
                    ffi::lua_setfield(l, -2, c"string".as_ptr());
                    push_str(&b[..3]);
                    ffi::lua_setfield(l, -2, c"format".as_ptr());
                    wrap(c"verbatim_string");
                }
                None => push_error_table(l, &[b"ERR unreadable reply"], false),
            },
            (b'|', Some(n)) if n >= 0 => {
                // An attribute: read and dropped; the value it annotates follows.
                for _ in 0..2 * n {
                    if !push_reply(l, buf, pos, proto) {
                        return false;
                    }
                    ffi::lua_settop(l, -2);
                }
                return push_reply(l, buf, pos, proto);
            }
            _ => push_error_table(l, &[b"ERR unreadable reply"], false),
        }
        true
    }
}
