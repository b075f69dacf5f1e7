-- recached's Lua sandbox, run once per Lua state (chunk name "=recached"; see sandbox in
-- lib.rs). `I` holds the Rust functions: call, pcall, errtext, sha1hex, log, setresp, rand, seed.
local I = ...
local G = _G
local error, type, select, tostring, tonumber, floor = error, type, select, tostring, tonumber, math.floor
local math = math
local rawset0, setmetatable0, getmetatable0, pcall0 = rawset, setmetatable, getmetatable, pcall
local xpcall0, resume0 = xpcall, coroutine.resume

-- Vanilla Lua 5.1 has no read-only tables (Redis patches its Lua for them): protected tables
-- here are empty proxies whose reads go to the real table and whose writes fail.
local readonly = setmetatable0({}, {__mode = 'k'})
local function ro_error() error('Attempt to modify a readonly table', 2) end
local function protect(t, index)
  local p = {}
  local mt = {__index = index or t, __newindex = ro_error}
  mt.__metatable = setmetatable0({}, {__index = mt, __newindex = ro_error})
  readonly[p] = true
  readonly[mt.__metatable] = true
  return setmetatable0(p, mt)
end

-- redis.call, redis.pcall, sha1hex, log and setresp are Rust functions (lib.rs): a C
-- function keeps the caller's frame even when called as `return redis.call(...)`, so the
-- error handler still finds the script line.
local redis = {}
redis.call, redis.pcall, redis.sha1hex, redis.log, redis.setresp, redis.set_repl =
  I.call, I.pcall, I.sha1hex, I.log, I.setresp, I.set_repl
redis.acl_check_cmd = I.acl_check_cmd
redis.error_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if s:sub(1, 1) ~= '-' then s = '-' .. s end
  return {err = I.errtext(s)}
end
redis.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = s}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.REDIS_VERSION = I.version
redis.REDIS_VERSION_NUM = I.version_num

-- math.random / math.randomseed over Redis's lrand48 (rand.rs).
local function checkint(n, v)
  local x = tonumber(v)
  if x == nil then
    error("bad argument #" .. n .. " to 'random' (number expected, got " ..
      (v == nil and 'no value' or type(v)) .. ")", 3)
  end
  if x >= 0 then return floor(x) end
  return -floor(-x)
end
math.random = function(...)
  local n = select('#', ...)
  local r = I.rand()
  if n == 0 then return r end
  if n == 1 then
    local u = checkint(1, (...))
    if u < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * u) + 1
  end
  if n == 2 then
    local l, u = checkint(1, (...)), checkint(2, (select(2, ...)))
    if l > u then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (u - l + 1)) + l
  end
  error('wrong number of arguments', 2)
end
math.randomseed = function(v)
  local x = tonumber(v)
  if x == nil then
    error("bad argument #1 to 'randomseed' (number expected, got " ..
      (v == nil and 'no value' or type(v)) .. ")", 2)
  end
  I.seed(x >= 0 and floor(x) or -floor(-x))
end

-- A script past the busy limit is being stopped (lib.rs, BUSY_LIMIT): whatever catches an
-- error (pcall, xpcall, coroutine.resume) raises it again, so the stop reaches the top.
local function caught(ok, ...)
  if not ok and I.stopping() then error((...), 0) end
  if not ok then
    local e = I.plain_error((...))
    if e then return ok, e end
  end
  return ok, ...
end
-- A C library's error (clib.rs) reaches an xpcall handler as its string, as in Redis.
xpcall = function(...)
  local f, h = ...
  if select('#', ...) < 2 then error("bad argument #2 to 'xpcall' (value expected)", 2) end
  if type(h) ~= 'function' then return caught(xpcall0(...)) end
  return caught(xpcall0(f, function(e)
    if type(e) == 'userdata' then e = I.plain_error(e) or e end
    return h(e)
  end))
end
coroutine.resume = function(...) return caught(resume0(...)) end

-- Redis 7's pcall: an error table raised by redis.call is returned as its message.
local function pcall_result(ok, ...)
  if ok then return ok, ... end
  if I.stopping() then error((...), 0) end
  local e = ...
  if type(e) ~= 'table' then e = I.plain_error(e) or I.take_pending() or e end
  if type(e) == 'table' and type(e.err) == 'string' then return false, e.err end
  return false, e
end
pcall = function(...) return pcall_result(pcall0(...)) end

-- Writes that bypass the proxies fail as on Redis.
setmetatable = function(t, mt)
  if readonly[t] or t == G then error('Attempt to modify a readonly table', 0) end
  return setmetatable0(t, mt)
end
rawset = function(t, k, v)
  if readonly[t] or t == G then error('Attempt to modify a readonly table', 0) end
  return rawset0(t, k, v)
end

-- unpack is Redis's patched one (engine/script/src/baselib.rs, installed before this runs).

-- Redis 7.0's globals: no io, os, package, debug, dofile, loadfile, print.
dofile, loadfile, print = nil, nil, nil

-- Redis's embedded libraries: `bit` (bit.rs), `cjson`, `cmsgpack`, `struct` (cjson.rs,
-- cmsgpack.rs, struct_lib.rs).
bit, cjson, cmsgpack, struct = I.bit, I.cjson, I.cmsgpack, I.struct

-- Every global moves to the hidden table `real`; the global table itself becomes an empty,
-- protected proxy of it, so every function (loadstring's too) sees the same sandbox.
local real = {}
for k, v in next, G do real[k] = v end
for k in next, real do rawset0(G, k, nil) end
real.redis = protect(redis)
real.string = protect(real.string)
real.math = protect(real.math)
real.table = protect(real.table)
real.coroutine = protect(real.coroutine)
real.bit = protect(real.bit)
real.cjson = protect(real.cjson)
real.cmsgpack = protect(real.cmsgpack)
real.struct = protect(real.struct)
-- The strings' metatable is shared by every script: `getmetatable('')` gives a read-only view
-- of it, and its `__index` is the protected string table (Redis makes them read-only).
local smt = getmetatable0('')
smt.__index = real.string
smt.__metatable = protect(smt)
-- loadstring refuses precompiled (binary) chunks, as Redis's Lua does: it returns nil.
local loadstring0 = real.loadstring
real.loadstring = function(s, ...)
  if type(s) == 'string' and s:byte(1) == 27 then return nil end
  return loadstring0(s, ...)
end
real._G = G
setmetatable0(real, {__index = function(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end})
local gmt = {__index = real, __newindex = ro_error}
gmt.__metatable = setmetatable0({}, {__index = gmt, __newindex = ro_error})
readonly[gmt.__metatable] = true
setmetatable0(G, gmt)

-- The functions' Lua state (lib.rs, FUNCTION LOAD): while a library's code runs, the globals
-- are Redis's LIBRARY_API instead: only `redis` with register_function, log, the log levels
-- and the version; anything else is a nonexistent global. A function runs with the usual
-- globals and gets KEYS and ARGV as its two arguments (I.fcall).
if I.register_function then
  local lredis = {register_function = I.register_function, log = I.log,
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
    REDIS_VERSION = I.version, REDIS_VERSION_NUM = I.version_num}
  local lp = protect(lredis, function(_, k)
    local v = lredis[k]
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end)
  local load_env = setmetatable0({}, {__index = function(_, k)
    if k == 'redis' then return lp end
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end})
  I.load_mode = function(on) gmt.__index = on and load_env or real end
  I.fcall = function(f, h, keys, args)
    return xpcall0(function() return f(keys, args) end, h)
  end
end
return real
