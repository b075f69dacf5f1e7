//! The Lua scripts that run each memcached operation as one engine-side step (EVALSHA),
//! so `cas`, `add`, `append`/`prepend` and `incr`/`decr` are atomic on the engine that owns
//! the key. Every script takes `KEYS[1]` = the item (a plain Redis string holding exactly the
//! value bytes) and `KEYS[2]` = its companion (`"<flags> <cas>"`, same slot, same expiry;
//! see [`super::exec::meta_key`]). The proxy loads them on every engine connection
//! (`SCRIPT LOAD`, before any request) and calls them by SHA1.
//!
//! Expiry arguments: `"0"` = none, `"-1"` = already expired (the item is deleted), else an
//! absolute Unix time in ms (`PXAT`).

/// `EVALSHA store 2 item meta mode value flags exp cas_in new_cas invalidate` → a status
/// word: `STORED`, `NOT_STORED`, `EXISTS`, `NOT_FOUND`. `cas_in` "" = no compare (the text
/// `cas` and meta `ms … C<cas>` pass one, in any mode); `invalidate` "1" (`ms I`): a `cas_in`
/// older than the item's stores the value marked stale instead of answering EXISTS.
pub const STORE: &str = r#"
local k, m = KEYS[1], KEYS[2]
local mode, val, flags, exp, casin, newcas = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('GET', k)
local state = ''
if casin ~= '' then
  if not cur then return 'NOT_FOUND' end
  local meta = redis.call('GET', m)
  local c = meta and string.match(meta, '^%d+ (%d+)') or '0'
  if c ~= casin then
    if ARGV[7] == '1' and #casin <= #c and (#casin < #c or casin < c) then
      state = ' X'
    else
      return 'EXISTS'
    end
  end
end
if mode == 'add' then
  if cur then return 'NOT_STORED' end
elseif mode == 'replace' or mode == 'append' or mode == 'prepend' then
  if not cur then return 'NOT_STORED' end
end
if mode == 'append' or mode == 'prepend' then
  if mode == 'append' then
    redis.call('APPEND', k, val)
  else
    redis.call('SET', k, val .. cur, 'KEEPTTL')
  end
  local meta = redis.call('GET', m)
  local f = meta and string.match(meta, '^(%d+)') or '0'
  local ttl = redis.call('PTTL', k)
  if ttl > 0 then
    redis.call('SET', m, f .. ' ' .. newcas .. state, 'PX', ttl)
  else
    redis.call('SET', m, f .. ' ' .. newcas .. state)
  end
  return 'STORED'
end
if exp == '-1' then
  redis.call('DEL', k, m)
elseif exp == '0' then
  redis.call('SET', k, val)
  redis.call('SET', m, flags .. ' ' .. newcas .. state)
else
  redis.call('SET', k, val, 'PXAT', exp)
  redis.call('SET', m, flags .. ' ' .. newcas .. state, 'PXAT', exp)
end
return 'STORED'
"#;

/// `EVALSHA mg 2 item meta touch_exp vivify_exp new_cas` (meta get) → `{0}` on a miss, else
/// `{1, value, meta_before, pttl_before, created, won}`. `touch_exp` / `vivify_exp` "" =
/// none. The companion's third field is the item's meta state: `T` (a win token was sent),
/// `X` (stale, `md … I`); a hit on a stale item that sent no token yet wins it.
pub const MG: &str = r#"
local k, m = KEYS[1], KEYS[2]
local touch, viv, newcas = ARGV[1], ARGV[2], ARGV[3]
local v = redis.call('GET', k)
if not v then
  if viv == '' then return {0} end
  if viv ~= '-1' then
    if viv == '0' then
      redis.call('SET', k, '')
      redis.call('SET', m, '0 ' .. newcas .. ' T')
    else
      redis.call('SET', k, '', 'PXAT', viv)
      redis.call('SET', m, '0 ' .. newcas .. ' T', 'PXAT', viv)
    end
  end
  return {1, '', '0 ' .. newcas, -1, 1, 1}
end
local meta = redis.call('GET', m) or '0 0'
local ttl = redis.call('PTTL', k)
local won = 0
local st = string.match(meta, '^%d+ %d+ (%a+)') or ''
if string.find(st, 'X') and not string.find(st, 'T') then
  won = 1
  local f, c = string.match(meta, '^(%d+) (%d+)')
  redis.call('SET', m, f .. ' ' .. c .. ' XT', 'KEEPTTL')
end
if touch == '-1' then
  redis.call('DEL', k, m)
elseif touch == '0' then
  redis.call('PERSIST', k)
  redis.call('PERSIST', m)
elseif touch ~= '' then
  redis.call('PEXPIREAT', k, touch)
  redis.call('PEXPIREAT', m, touch)
end
return {1, v, meta, ttl, 0, won}
"#;

/// `EVALSHA touch 2N item1 meta1 … exp` (gat/gats): for each pair, the value and its
/// companion (nil, nil on a miss), after setting the new expiry on both.
pub const GAT: &str = r#"
local exp = ARGV[1]
local out = {}
for i = 1, #KEYS, 2 do
  local v = redis.call('GET', KEYS[i])
  if v then
    local meta = redis.call('GET', KEYS[i + 1])
    if exp == '-1' then
      redis.call('DEL', KEYS[i], KEYS[i + 1])
    elseif exp == '0' then
      redis.call('PERSIST', KEYS[i])
      redis.call('PERSIST', KEYS[i + 1])
    else
      redis.call('PEXPIREAT', KEYS[i], exp)
      redis.call('PEXPIREAT', KEYS[i + 1], exp)
    end
    out[#out + 1] = v
    out[#out + 1] = meta or false
  else
    out[#out + 1] = false
    out[#out + 1] = false
  end
end
return out
"#;

/// `EVALSHA touch 2 item meta exp` → 1 (touched) or 0 (no such item).
pub const TOUCH: &str = r#"
local exp = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if exp == '-1' then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif exp == '0' then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
else
  redis.call('PEXPIREAT', KEYS[1], exp)
  redis.call('PEXPIREAT', KEYS[2], exp)
end
return 1
"#;

/// `EVALSHA delete 2 item meta cas_in invalidate new_cas ttl_exp` → 1 (deleted), 0 (no
/// such item), -1 (`cas_in` given and different). `cas_in` "" = no compare; `invalidate` "1"
/// (`md I`): the item stays, marked stale with a new CAS (and `ttl_exp` if not "").
pub const DELETE: &str = r#"
local k, m = KEYS[1], KEYS[2]
local casin, inval, newcas, exp = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if casin ~= '' or inval == '1' then
  if redis.call('EXISTS', k) == 0 then return 0 end
  local meta = redis.call('GET', m) or '0 0'
  local f, c = string.match(meta, '^(%d+) (%d+)')
  if casin ~= '' and casin ~= c then return -1 end
  if inval == '1' then
    redis.call('SET', m, f .. ' ' .. newcas .. ' X', 'KEEPTTL')
    if exp == '-1' then
      redis.call('DEL', k, m)
    elseif exp == '0' then
      redis.call('PERSIST', k)
      redis.call('PERSIST', m)
    elseif exp ~= '' then
      redis.call('PEXPIREAT', k, exp)
      redis.call('PEXPIREAT', m, exp)
    end
    return 1
  end
end
local n = redis.call('DEL', k)
redis.call('DEL', m)
return n
"#;

/// `EVALSHA arith 2 item meta incr|decr delta new_cas vivify_exp initial cas_in touch_exp` →
/// `{status, value, cas, pttl}`; status `OK`, `CREATED` (a miss with `vivify_exp`: the item is
/// `initial`), `NOT_FOUND`, `NON_NUMERIC`, `EXISTS` (`cas_in` differs). "" = not given.
/// 64-bit unsigned arithmetic on two 32-bit halves (Lua numbers are doubles): incr wraps,
/// decr stops at 0. As memcached, a result shorter than the stored text is padded with
/// spaces to the old length (memcached rewrites the item in place), and the stored text is
/// read like `strtoull`: leading spaces, at least one digit, then the end or a space.
pub const ARITH: &str = r#"
local k, m = KEYS[1], KEYS[2]
local op, delta, newcas, viv, initial, casin, touch = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local function expire(e)
  if e == '-1' then
    redis.call('DEL', k, m)
  elseif e == '0' then
    redis.call('PERSIST', k)
    redis.call('PERSIST', m)
  elseif e ~= '' then
    redis.call('PEXPIREAT', k, e)
    redis.call('PEXPIREAT', m, e)
  end
end
local cur = redis.call('GET', k)
if not cur then
  if viv == '' then return {'NOT_FOUND'} end
  redis.call('SET', k, initial)
  redis.call('SET', m, '0 ' .. newcas)
  expire(viv)
  if touch ~= '' then expire(touch) end
  return {'CREATED', initial, newcas, redis.call('PTTL', k)}
end
local meta = redis.call('GET', m)
local f = meta and string.match(meta, '^(%d+)') or '0'
if casin ~= '' then
  local c = meta and string.match(meta, '^%d+ (%d+)') or '0'
  if c ~= casin then return {'EXISTS'} end
end
local B = 4294967296
local function parse(s)
  local d, rest = string.match(s, '^%s*(%d*)(.*)$')
  if not d or d == '' or (rest ~= '' and not string.match(rest, '^%s')) then return nil end
  local hi, lo = 0, 0
  for i = 1, #d do
    lo = lo * 10 + (string.byte(d, i) - 48)
    local c = math.floor(lo / B)
    lo = lo - c * B
    hi = hi * 10 + c
    if hi >= B then return nil end
  end
  return hi, lo
end
local function fmt(hi, lo)
  local digits = {}
  repeat
    local rh = hi % 10
    hi = (hi - rh) / 10
    local v = rh * B + lo
    local rl = v % 10
    lo = (v - rl) / 10
    digits[#digits + 1] = string.char(48 + rl)
  until hi == 0 and lo == 0
  return string.reverse(table.concat(digits))
end
local hi, lo = parse(cur)
if not hi then return {'NON_NUMERIC'} end
local dh, dl = parse(delta)
if op == 'incr' then
  lo = lo + dl
  local c = math.floor(lo / B)
  lo = lo - c * B
  hi = (hi + dh + c) % B
elseif hi < dh or (hi == dh and lo < dl) then
  hi, lo = 0, 0
else
  hi = hi - dh
  lo = lo - dl
  if lo < 0 then
    lo = lo + B
    hi = hi - 1
  end
end
local s = fmt(hi, lo)
local stored = s
if #s < #cur then stored = s .. string.rep(' ', #cur - #s) end
redis.call('SET', k, stored, 'KEEPTTL')
local ttl = redis.call('PTTL', k)
if ttl > 0 then
  redis.call('SET', m, f .. ' ' .. newcas, 'PX', ttl)
else
  redis.call('SET', m, f .. ' ' .. newcas)
end
expire(touch)
return {'OK', s, newcas, redis.call('PTTL', k)}
"#;

/// Every script, in the order [`Shas`] lists them.
pub const ALL: [&str; 6] = [STORE, GAT, TOUCH, DELETE, ARITH, MG];

/// The scripts' SHA1s (lowercase hex), as EVALSHA wants them.
#[derive(Clone, Debug)]
pub struct Shas {
    pub store: String,
    pub gat: String,
    pub touch: String,
    pub delete: String,
    pub arith: String,
    pub mg: String,
}

impl Default for Shas {
    fn default() -> Self {
        let h = |s: &str| sha1_smol::Sha1::from(s).digest().to_string();
        Shas {
            store: h(STORE),
            gat: h(GAT),
            touch: h(TOUCH),
            delete: h(DELETE),
            arith: h(ARITH),
            mg: h(MG),
        }
    }
}

/// `SCRIPT LOAD` of every script, as requests (sent first on each engine connection).
pub fn load_requests() -> Vec<Vec<u8>> {
    ALL.iter()
        .map(|s| {
            let mut out = Vec::new();
            resp::request::encode_request(&mut out, &[b"SCRIPT".as_slice(), b"LOAD", s.as_bytes()]);
            out
        })
        .collect()
}
