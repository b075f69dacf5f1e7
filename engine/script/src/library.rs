//! FUNCTION and FCALL on the host: `redis.register_function` during FUNCTION LOAD, the
//! libraries' own Lua state, FCALL/FCALL_RO (through the same run path as EVAL) and the
//! FUNCTION subcommands (redis `functions.c`, `function_lua.c`). The payload format of
//! DUMP/RESTORE and the library bookkeeping are in [`crate::functions`].

use super::*;

/// `redis.register_function(name, fn)` or `redis.register_function{function_name=…,
/// callback=…, flags={…}, description=…}` (redis `luaRegisterFunction`), during FUNCTION LOAD.
pub(crate) fn register_function(
    lua: &Lua,
    p: &Pending,
    loading: &Loading,
    args: MultiValue,
) -> mlua::Result<()> {
    if loading.borrow().is_none() {
        return raise(
            lua,
            p,
            "redis.register_function can only be called on FUNCTION LOAD command",
        );
    }
    let mut flags = ScriptFlags::default();
    let (mut name, mut callback, mut desc) = (None, None, None);
    match args.len() {
        1 => {
            let Value::Table(t) = &args[0] else {
                return raise(
                    lua,
                    p,
                    "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
                );
            };
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Some(key) = lua_str(&k) else {
                    return raise(
                        lua,
                        p,
                        "named argument key given to redis.register_function is not a string",
                    );
                };
                let key = String::from_utf8_lossy(&key).to_ascii_lowercase();
                match key.as_str() {
                    "function_name" => match lua_str(&v) {
                        Some(n) => name = Some(n),
                        None => {
                            return raise(
                                lua,
                                p,
                                "function_name argument given to redis.register_function must be a string",
                            );
                        }
                    },
                    "description" => match lua_str(&v) {
                        Some(d) => desc = Some(d),
                        None => {
                            return raise(
                                lua,
                                p,
                                "description argument given to redis.register_function must be a string",
                            );
                        }
                    },
                    "callback" => match v {
                        Value::Function(f) => callback = Some(f),
                        _ => {
                            return raise(
                                lua,
                                p,
                                "callback argument given to redis.register_function must be a function",
                            );
                        }
                    },
                    "flags" => {
                        let Value::Table(ft) = v else {
                            return raise(
                                lua,
                                p,
                                "flags argument to redis.register_function must be a table representing function flags",
                            );
                        };
                        let mut i = 1;
                        loop {
                            let f: Value = ft.get(i)?;
                            if f.is_nil() {
                                break;
                            }
                            let flag = lua_str(&f)
                                .map(|f| String::from_utf8_lossy(&f).to_ascii_lowercase());
                            let slot = match flag.as_deref() {
                                Some("no-writes") => Some(&mut flags.no_writes),
                                Some("allow-oom") => Some(&mut flags.allow_oom),
                                Some("allow-stale") => Some(&mut flags.allow_stale),
                                Some("no-cluster") => Some(&mut flags.no_cluster),
                                Some("allow-cross-slot-keys") => {
                                    Some(&mut flags.allow_cross_slot_keys)
                                }
                                _ => None,
                            };
                            let known = slot.map(|s| *s = true);
                            if known.is_none() {
                                return raise(lua, p, "unknown flag given");
                            }
                            i += 1;
                        }
                    }
                    _ => {
                        return raise(lua, p, "unknown argument given to redis.register_function");
                    }
                }
            }
            if name.is_none() {
                return raise(
                    lua,
                    p,
                    "redis.register_function must get a function name argument",
                );
            }
            if callback.is_none() {
                return raise(
                    lua,
                    p,
                    "redis.register_function must get a callback argument",
                );
            }
        }
        2 => {
            let Some(n) = lua_str(&args[0]) else {
                return raise(
                    lua,
                    p,
                    "first argument to redis.register_function must be a string",
                );
            };
            let Value::Function(f) = &args[1] else {
                return raise(
                    lua,
                    p,
                    "second argument to redis.register_function must be a function",
                );
            };
            name = Some(n);
            callback = Some(f.clone());
        }
        _ => {
            return raise(
                lua,
                p,
                "wrong number of arguments to redis.register_function",
            );
        }
    }
    let (name, callback) = (name.expect("checked"), callback.expect("checked"));
    if !functions::valid_name(&name) {
        // Redis 7.0's text, "Library" included.
        return raise(
            lua,
            p,
            "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        );
    }
    let name = String::from_utf8_lossy(&name).into_owned();
    let mut guard = loading.borrow_mut();
    let list = guard.as_mut().expect("checked");
    if list.iter().any(|f| f.name == name) {
        drop(guard);
        return raise(lua, p, "Function already exists in the library");
    }
    list.push(functions::Func {
        name,
        callback,
        flags,
        desc,
    });
    Ok(())
}

impl LuaHost {
    /// Number of loaded libraries.
    pub fn libraries(&self) -> usize {
        self.libraries.libs.len()
    }

    /// Every library's code (its FUNCTION LOAD payload), by library name: what a snapshot
    /// keeps ([`engine_core::script::Scripting::library_codes`]).
    pub(crate) fn each_library_code(&self, each: &mut dyn FnMut(&[u8])) {
        for lib in self.libraries.libs.values() {
            each(&lib.code);
        }
    }

    /// Loads libraries a snapshot kept, all or none (as FUNCTION RESTORE APPEND: a name
    /// already loaded is an error); the error text without `ERR `.
    pub(crate) fn load_library_codes(&mut self, codes: &[Vec<u8>]) -> Result<(), String> {
        let mut fresh = functions::Libraries::default();
        for code in codes {
            self.create_library(&mut fresh, code, false)?;
        }
        self.libraries.join(fresh, false)
    }

    /// redis `functionsCreateWithLibraryCtx`: compiles and runs a library's code in the
    /// functions' state and links it into `libs`; the library name, or the error text
    /// (without `ERR `).
    fn create_library(
        &self,
        libs: &mut functions::Libraries,
        payload: &[u8],
        replace: bool,
    ) -> Result<String, String> {
        let (engine, name, end) = functions::metadata(payload)?;
        if !functions::valid_name(&name) {
            return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
        }
        if !engine.eq_ignore_ascii_case("lua") {
            return Err(format!("Engine '{engine}' not found"));
        }
        let name = String::from_utf8_lossy(&name).into_owned();
        if libs.libs.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let registered = self.run_library(&payload[end..])?;
        if registered.is_empty() {
            return Err("No functions registered".into());
        }
        let lib = functions::Library {
            code: payload.to_vec(),
            functions: registered
                .into_iter()
                .map(|f| (f.name.clone(), f))
                .collect(),
        };
        let old = libs.unlink(&name);
        if let Some(f) = libs.collision(&lib) {
            let err = format!("Function {f} already exists");
            if let Some(old) = old {
                libs.link(name, old);
            }
            return Err(err);
        }
        libs.link(name.clone(), lib);
        Ok(name)
    }

    /// Compiles `code` (chunk `@user_function`) and runs it in FUNCTION LOAD's environment;
    /// the functions it registered.
    fn run_library(&self, code: &[u8]) -> Result<Vec<functions::Func>, String> {
        let st = &self.fstate;
        let func = compile(&st.lua, code, "@user_function")
            .map_err(|msg| format!("Error compiling function: {msg}"))?;
        let load_mode = st.load_mode.as_ref().expect("the functions' state");
        *self.loading.borrow_mut() = Some(Vec::new());
        self.deadline.0.set(Some(Instant::now() + LOAD_LIMIT));
        self.deadline.2.set(true);
        st.pending.borrow_mut().take();
        let r = load_mode
            .call::<()>(true)
            .and_then(|()| st.xpcall.call::<MultiValue>((func, st.handler.clone())));
        let _ = load_mode.call::<()>(false);
        self.deadline.0.set(None);
        self.deadline.1.set(false);
        self.deadline.2.set(false);
        let registered = self.loading.borrow_mut().take().unwrap_or_default();
        let mut r = r
            .map_err(|e| format!("Error registering functions: {e}"))?
            .into_iter();
        if matches!(r.next(), Some(Value::Boolean(true))) {
            return Ok(registered);
        }
        let msg = match r.next() {
            Some(Value::Table(t)) => match t.raw_get::<Value>("err") {
                Ok(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                _ => "ERR unknown error".into(),
            },
            Some(other) => format!("{other:?}"),
            None => "ERR unknown error".into(),
        };
        Err(format!("Error registering functions: {msg}"))
    }

    pub(crate) fn fcall_generic(&mut self, e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
        let ro = c.spec.name == "fcall_ro";
        let Some(f) = self.libraries.find(c.argv[1]) else {
            return Err(CmdError::Static("ERR Function not found"));
        };
        let (name, func, flags) = (f.name.clone(), f.callback.clone(), f.flags);
        let numkeys = resp::parse_i64(c.argv[2])
            .ok_or(CmdError::Static("ERR Bad number of keys provided"))?;
        if numkeys > (c.argv.len() - 3) as i64 {
            return Err(CmdError::Static(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        if numkeys < 0 {
            return Err(CmdError::Static("ERR Number of keys can't be negative"));
        }
        self.invoke(e, c, true, (&func, &name), flags, ro, numkeys as usize)
    }

    pub(crate) fn function_cmd(&mut self, c: &mut Call) -> Result<(), CmdError> {
        let argc = c.argv.len();
        match c.spec.name {
            "function|load" => {
                let mut replace = false;
                let mut pos = 2;
                while pos < argc - 1 {
                    let arg = c.argv[pos];
                    pos += 1;
                    if arg.eq_ignore_ascii_case(b"replace") {
                        replace = true;
                        continue;
                    }
                    return Err(CmdError::Other(format!(
                        "ERR Unknown option given: {}",
                        String::from_utf8_lossy(arg)
                    )));
                }
                if pos >= argc {
                    return Err(CmdError::Static("ERR Function code is missing"));
                }
                let mut libs = std::mem::take(&mut self.libraries);
                let r = self.create_library(&mut libs, c.argv[pos], replace);
                self.libraries = libs;
                let name = r.map_err(|m| CmdError::Other(format!("ERR {m}")))?;
                c.w().bulk(name.as_bytes());
                Ok(())
            }
            "function|delete" => {
                let name = String::from_utf8_lossy(c.argv[2]).into_owned();
                if self.libraries.unlink(&name).is_none() {
                    return Err(CmdError::Static("ERR Library not found"));
                }
                c.w().ok();
                Ok(())
            }
            "function|flush" => {
                let ok = match argc {
                    2 => true,
                    3 => {
                        c.argv[2].eq_ignore_ascii_case(b"sync")
                            || c.argv[2].eq_ignore_ascii_case(b"async")
                    }
                    _ => return Err(subcommand_syntax(c)),
                };
                if !ok {
                    return Err(CmdError::Static(
                        "ERR FUNCTION FLUSH only supports SYNC|ASYNC option",
                    ));
                }
                self.libraries = functions::Libraries::default();
                let _ = self.fstate.lua.gc_collect();
                c.w().ok();
                Ok(())
            }
            "function|list" => self.function_list(c),
            "function|dump" => {
                let payload = functions::dump(&self.libraries);
                c.w().bulk(&payload);
                Ok(())
            }
            "function|restore" => {
                if argc > 4 {
                    return Err(subcommand_syntax(c));
                }
                #[derive(PartialEq)]
                enum Policy {
                    Append,
                    Replace,
                    Flush,
                }
                let policy = match c.argv.get(3) {
                    None => Policy::Append,
                    Some(p) if p.eq_ignore_ascii_case(b"append") => Policy::Append,
                    Some(p) if p.eq_ignore_ascii_case(b"replace") => Policy::Replace,
                    Some(p) if p.eq_ignore_ascii_case(b"flush") => Policy::Flush,
                    Some(_) => {
                        return Err(CmdError::Static(
                            "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                        ));
                    }
                };
                let payloads = functions::undump(c.argv[2])
                    .map_err(|m| CmdError::Other(format!("ERR {m}")))?;
                let mut fresh = functions::Libraries::default();
                for code in payloads {
                    self.create_library(&mut fresh, &code, false)
                        .map_err(|m| CmdError::Other(format!("ERR {m}")))?;
                }
                if policy == Policy::Flush {
                    self.libraries = fresh;
                } else {
                    self.libraries
                        .join(fresh, policy == Policy::Replace)
                        .map_err(|m| CmdError::Other(format!("ERR {m}")))?;
                }
                c.w().ok();
                Ok(())
            }
            "function|stats" => {
                let (nlib, nfunc) = (
                    self.libraries.libs.len() as i64,
                    self.libraries.function_count() as i64,
                );
                let mut w = c.w();
                w.map(2);
                w.bulk(b"running_script");
                w.null();
                w.bulk(b"engines");
                w.map(1);
                w.bulk(b"LUA");
                w.map(2);
                w.bulk(b"libraries_count");
                w.integer(nlib);
                w.bulk(b"functions_count");
                w.integer(nfunc);
                Ok(())
            }
            "function|kill" => Err(CmdError::Static(
                "NOTBUSY No scripts in execution right now.",
            )),
            "function|help" => {
                engine_core::call::help(c, "FUNCTION", FUNCTION_HELP);
                Ok(())
            }
            _ => Err(CmdError::Other(
                engine_core::error::unknown_command_message(c.argv),
            )),
        }
    }

    /// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE] (redis `functionListCommand`).
    fn function_list(&mut self, c: &mut Call) -> Result<(), CmdError> {
        let (mut with_code, mut pattern): (bool, Option<&[u8]>) = (false, None);
        let mut i = 2;
        while i < c.argv.len() {
            let arg = c.argv[i];
            if !with_code && arg.eq_ignore_ascii_case(b"withcode") {
                with_code = true;
            } else if pattern.is_none() && arg.eq_ignore_ascii_case(b"libraryname") {
                if i >= c.argv.len() - 1 {
                    return Err(CmdError::Static("ERR library name argument was not given"));
                }
                i += 1;
                pattern = Some(c.argv[i]);
            } else {
                return Err(CmdError::Other(format!(
                    "ERR Unknown argument {}",
                    String::from_utf8_lossy(arg)
                )));
            }
            i += 1;
        }
        let libs: Vec<(&String, &functions::Library)> = self
            .libraries
            .libs
            .iter()
            .filter(|(name, _)| {
                pattern.is_none_or(|p| engine_core::glob::matches(p, name.as_bytes(), true))
            })
            .collect();
        let mut w = c.w();
        w.array(libs.len());
        for (name, lib) in libs {
            w.map(if with_code { 4 } else { 3 });
            w.bulk(b"library_name");
            w.bulk(name.as_bytes());
            w.bulk(b"engine");
            w.bulk(b"LUA");
            w.bulk(b"functions");
            w.array(lib.functions.len());
            for f in lib.functions.values() {
                w.map(3);
                w.bulk(b"name");
                w.bulk(f.name.as_bytes());
                w.bulk(b"description");
                match &f.desc {
                    Some(d) => w.bulk(d),
                    None => w.null(),
                }
                w.bulk(b"flags");
                let names: Vec<&str> = [
                    (f.flags.no_writes, "no-writes"),
                    (f.flags.allow_oom, "allow-oom"),
                    (f.flags.allow_stale, "allow-stale"),
                    (f.flags.no_cluster, "no-cluster"),
                    (f.flags.allow_cross_slot_keys, "allow-cross-slot-keys"),
                ]
                .into_iter()
                .filter_map(|(on, n)| on.then_some(n))
                .collect();
                w.set(names.len());
                for n in names {
                    w.simple(n.as_bytes());
                }
            }
            if with_code {
                w.bulk(b"library_code");
                w.bulk(&lib.code);
            }
        }
        Ok(())
    }
}

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax(c: &Call) -> CmdError {
    CmdError::Other(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(c.argv[1])
    ))
}

const FUNCTION_HELP: &[&str] = &[
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];
