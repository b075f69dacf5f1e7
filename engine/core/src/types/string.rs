//! Strings: the value API, then the string commands.
//!
//! # Value
//! Like Redis (`object.c` `tryObjectEncoding`), a string that is the canonical decimal form of
//! an i64 (the `string2ll` grammar) is kept as an integer; anything else as raw bytes. The two
//! encodings are indistinguishable to clients: GET of `Int(12)` answers `"12"`.
//!
//! # Commands
//! GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX INCR DECR INCRBY DECRBY
//! INCRBYFLOAT APPEND STRLEN GETRANGE SETRANGE SUBSTR, with redis 7.0 `t_string.c` semantics
//! (option grammar of `parseExtendedStringArgumentsOrReply`, expire checks of
//! `getExpireMillisecondsOrReply`, index clamping of `getrangeCommand`).

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;
use crate::types::ldouble::LongDouble;

/// redis `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`: the longest string a SET stores `embstr`.
pub const EMBSTR_SIZE_LIMIT: usize = 44;

/// A string value.
///
/// OBJECT ENCODING tells three kinds apart, as Redis does: `int`, `embstr` (a string of at
/// most 44 bytes stored whole by SET, INCRBYFLOAT, RESTORE…) and `raw` (a longer one, or any
/// string created or changed in place by APPEND, SETRANGE, SETBIT, BITFIELD, BITOP, PFADD…:
/// redis `dbUnshareStringValue` / `createRawStringObject`). The enum must stay 24 bytes (see
/// `types::Value`), so the difference lives in the buffer's spare capacity: a string stored
/// whole has none ([`from_slice`](Self::from_slice), [`from_vec`](Self::from_vec)); one made
/// raw keeps at least one spare byte ([`raw`](Self::raw), [`modify`](Self::modify)), and
/// cloning (COPY) keeps it.
#[derive(Debug)]
pub enum StrValue {
    /// Canonical decimal integer (what `INCR` works on without parsing).
    Int(i64),
    /// Any other byte string.
    Raw(Vec<u8>),
}

/// Equal bytes, encoding aside (`Int(3)` equals an `embstr` "3", as a replica that got the
/// value from a SET holds the first while the server's INCRBYFLOAT made the second).
impl PartialEq for StrValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StrValue::Int(a), StrValue::Int(b)) => a == b,
            (StrValue::Raw(a), StrValue::Raw(b)) => a == b,
            _ => {
                let (mut x, mut y) = (itoa::Buffer::new(), itoa::Buffer::new());
                self.bytes(&mut x) == other.bytes(&mut y)
            }
        }
    }
}

impl Eq for StrValue {}

/// Keeps the spare capacity that marks a raw string (see [`StrValue`]).
impl Clone for StrValue {
    fn clone(&self) -> Self {
        match self {
            StrValue::Int(n) => StrValue::Int(*n),
            StrValue::Raw(v) => {
                let mut c = Vec::with_capacity(v.capacity());
                c.extend_from_slice(v);
                StrValue::Raw(c)
            }
        }
    }
}

/// Gives `v` the spare byte that marks a raw string.
pub(crate) fn mark_raw(v: &mut Vec<u8>) {
    if v.capacity() == v.len() {
        v.reserve_exact(1);
    }
}

impl StrValue {
    /// Stores `bytes`, integer-encoded when they are a canonical i64.
    pub fn from_slice(bytes: &[u8]) -> StrValue {
        match args::parse_i64(bytes) {
            Some(n) => StrValue::Int(n),
            // `to_vec` allocates exactly: no spare byte, so `embstr` when short.
            None => StrValue::Raw(bytes.to_vec()),
        }
    }

    /// Like [`from_slice`](Self::from_slice) but takes ownership of the buffer.
    pub fn from_vec(mut bytes: Vec<u8>) -> StrValue {
        match args::parse_i64(&bytes) {
            Some(n) => StrValue::Int(n),
            None => {
                if bytes.len() <= EMBSTR_SIZE_LIMIT && bytes.capacity() != bytes.len() {
                    bytes.shrink_to_fit();
                }
                StrValue::Raw(bytes)
            }
        }
    }

    /// A string stored whole and never integer-encoded: `embstr` up to 44 bytes even when it
    /// reads as an integer (INCRBYFLOAT's result: redis `createStringObjectFromLongDouble`
    /// skips `tryObjectEncoding`, so `INCRBYFLOAT k 1` on "2" leaves an `embstr` "3").
    pub fn whole(mut bytes: Vec<u8>) -> StrValue {
        if bytes.capacity() != bytes.len() {
            bytes.shrink_to_fit();
        }
        StrValue::Raw(bytes)
    }

    /// A string Redis creates `raw` whatever its length (SETRANGE or SETBIT on a new key,
    /// BITOP's result, a new HyperLogLog).
    pub fn raw(mut bytes: Vec<u8>) -> StrValue {
        mark_raw(&mut bytes);
        StrValue::Raw(bytes)
    }

    /// Whether this is a raw string (see [`StrValue`]).
    pub fn is_raw(&self) -> bool {
        matches!(self, StrValue::Raw(v) if v.capacity() != v.len() || v.len() > EMBSTR_SIZE_LIMIT)
    }

    /// Changes the bytes in place (APPEND, SETRANGE, SETBIT…): an integer turns into its
    /// digits first, and the result is `raw`, as Redis unshares the value
    /// (`dbUnshareStringValue`).
    pub fn modify<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        let v = self.make_raw();
        let r = f(v);
        mark_raw(v);
        r
    }

    /// The bytes a client sees; `buf` holds the digits of an integer.
    pub fn bytes<'a>(&'a self, buf: &'a mut itoa::Buffer) -> &'a [u8] {
        match self {
            StrValue::Int(n) => buf.format(*n).as_bytes(),
            StrValue::Raw(v) => v,
        }
    }

    /// STRLEN.
    pub fn len(&self) -> usize {
        match self {
            StrValue::Int(n) => itoa::Buffer::new().format(*n).len(),
            StrValue::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value as an integer (redis `getLongLongFromObject`).
    pub fn to_i64(&self) -> Option<i64> {
        match self {
            StrValue::Int(n) => Some(*n),
            StrValue::Raw(v) => args::parse_i64(v),
        }
    }

    /// Bytes accounted in `used_memory`.
    pub fn mem_size(&self) -> usize {
        match self {
            StrValue::Int(_) => 8,
            StrValue::Raw(v) => v.capacity(),
        }
    }

    /// OBJECT ENCODING, by redis `tryObjectEncoding`'s rules: `int` for a canonical i64,
    /// `embstr` up to 44 bytes ([`EMBSTR_SIZE_LIMIT`]) stored whole, `raw` beyond and for a
    /// string created or changed in place (see [`StrValue`]).
    pub fn encoding(&self) -> &'static str {
        match self {
            StrValue::Int(_) => "int",
            _ if self.is_raw() => "raw",
            StrValue::Raw(_) => "embstr",
        }
    }

    /// The buffer, converting an integer to its digits first; callers that change it go
    /// through [`modify`](Self::modify), which marks the result raw.
    fn make_raw(&mut self) -> &mut Vec<u8> {
        if let StrValue::Int(n) = *self {
            *self = StrValue::Raw(itoa::Buffer::new().format(n).as_bytes().to_vec());
        }
        match self {
            StrValue::Raw(v) => v,
            StrValue::Int(_) => unreachable!("converted above"),
        }
    }
}

/// The string inside `v`, or WRONGTYPE.
pub fn as_str(v: &Value) -> Result<&StrValue, CmdError> {
    match v {
        Value::Str(s) => Ok(s),
        #[allow(unreachable_patterns)]
        _ => Err(CmdError::WrongType),
    }
}

fn as_str_mut(v: &mut Value) -> Result<&mut StrValue, CmdError> {
    match v {
        Value::Str(s) => Ok(s),
        #[allow(unreachable_patterns)]
        _ => Err(CmdError::WrongType),
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// Condition of a SET (`NX`/`XX`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SetCond {
    Always,
    Nx,
    Xx,
}

/// The expiry part of SET/GETEX options, before it is turned into an absolute time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ExpireOpt<'a> {
    None,
    /// Relative seconds (`EX`) / ms (`PX`), absolute seconds (`EXAT`) / ms (`PXAT`).
    Ex(&'a [u8]),
    Px(&'a [u8]),
    ExAt(&'a [u8]),
    PxAt(&'a [u8]),
    KeepTtl,
    Persist,
}

/// Which command's option grammar applies (redis `COMMAND_SET` / `COMMAND_GET`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum OptGrammar {
    Set,
    GetEx,
}

struct SetOpts<'a> {
    cond: SetCond,
    get: bool,
    expire: ExpireOpt<'a>,
}

/// redis `parseExtendedStringArgumentsOrReply`: NX XX GET KEEPTTL PERSIST EX PX EXAT PXAT, each
/// allowed only when it does not conflict with one already seen; anything else is a syntax error.
fn parse_set_opts<'a>(argv: &[&'a [u8]], grammar: OptGrammar) -> Result<SetOpts<'a>, CmdError> {
    let mut o = SetOpts {
        cond: SetCond::Always,
        get: false,
        expire: ExpireOpt::None,
    };
    let mut j = 0;
    while j < argv.len() {
        let a = argv[j];
        let next = argv.get(j + 1).copied();
        let no_expire = o.expire == ExpireOpt::None;
        if args::is(a, "nx") && o.cond != SetCond::Xx && grammar == OptGrammar::Set {
            o.cond = SetCond::Nx;
        } else if args::is(a, "xx") && o.cond != SetCond::Nx && grammar == OptGrammar::Set {
            o.cond = SetCond::Xx;
        } else if args::is(a, "get") && grammar == OptGrammar::Set {
            o.get = true;
        } else if args::is(a, "keepttl")
            && grammar == OptGrammar::Set
            && (no_expire || o.expire == ExpireOpt::KeepTtl)
        {
            o.expire = ExpireOpt::KeepTtl;
        } else if args::is(a, "persist")
            && grammar == OptGrammar::GetEx
            && (no_expire || o.expire == ExpireOpt::Persist)
        {
            o.expire = ExpireOpt::Persist;
        } else if let Some(n) = next
            .filter(|_| args::is(a, "ex") && matches!(o.expire, ExpireOpt::None | ExpireOpt::Ex(_)))
        {
            o.expire = ExpireOpt::Ex(n);
            j += 1;
        } else if let Some(n) = next
            .filter(|_| args::is(a, "px") && matches!(o.expire, ExpireOpt::None | ExpireOpt::Px(_)))
        {
            o.expire = ExpireOpt::Px(n);
            j += 1;
        } else if let Some(n) = next.filter(|_| {
            args::is(a, "exat") && matches!(o.expire, ExpireOpt::None | ExpireOpt::ExAt(_))
        }) {
            o.expire = ExpireOpt::ExAt(n);
            j += 1;
        } else if let Some(n) = next.filter(|_| {
            args::is(a, "pxat") && matches!(o.expire, ExpireOpt::None | ExpireOpt::PxAt(_))
        }) {
            o.expire = ExpireOpt::PxAt(n);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// redis `getExpireMillisecondsOrReply`: the absolute expiry in Unix ms, or
/// `invalid expire time in '<cmd>' command` for a non-positive time or an overflow.
fn expire_at_ms(
    opt: ExpireOpt<'_>,
    now_ms: i64,
    cmd: &'static str,
) -> Result<Option<i64>, CmdError> {
    let (arg, seconds, relative) = match opt {
        ExpireOpt::Ex(a) => (a, true, true),
        ExpireOpt::Px(a) => (a, false, true),
        ExpireOpt::ExAt(a) => (a, true, false),
        ExpireOpt::PxAt(a) => (a, false, false),
        ExpireOpt::None | ExpireOpt::KeepTtl | ExpireOpt::Persist => return Ok(None),
    };
    let bad = CmdError::InvalidExpire(cmd);
    let mut ms = int_arg(arg)?;
    if ms <= 0 || (seconds && ms > i64::MAX / 1000) {
        return Err(bad);
    }
    if seconds {
        ms *= 1000;
    }
    if relative {
        // Redis adds with C overflow (a wrapped, negative sum) and then rejects `<= 0`.
        ms = ms.checked_add(now_ms).ok_or(bad.clone())?;
    }
    if ms <= 0 {
        return Err(bad);
    }
    Ok(Some(ms))
}

/// `GET key` → bulk | nil; WRONGTYPE.
pub fn get(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    match e.ks.lookup_read(key, c.now_ms) {
        None => c.w().null(),
        Some(i) => {
            let s = as_str(e.ks.value(i))?;
            let mut buf = itoa::Buffer::new();
            c.w().bulk(s.bytes(&mut buf));
        }
    }
    Ok(())
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ts-ms|KEEPTTL]` → OK | nil | old value.
pub fn set(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = parse_set_opts(&c.argv[3..], OptGrammar::Set)?;
    let (key, val) = (c.argv[1], c.argv[2]);
    set_generic(e, c, key, val, o, "set", SetReplies::Set)
}

/// Which replies a SET variant sends (redis `setGenericCommand`'s `ok_reply`/`abort_reply`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetReplies {
    /// `+OK` / nil.
    Set,
    /// `:1` / `:0` (SETNX).
    Integer,
}

fn set_generic(
    e: &mut Engine,
    c: &mut Call,
    key: &[u8],
    val: &[u8],
    o: SetOpts<'_>,
    cmd: &'static str,
    replies: SetReplies,
) -> Result<(), CmdError> {
    let now = c.now_ms as i64;
    let when = expire_at_ms(o.expire, now, cmd)?;
    let existing = e.ks.lookup_write(key, c.now_ms);
    if o.get {
        // SET … GET answers the old value (or nil) and fails on a non-string before changing anything.
        match existing {
            None => c.w().null(),
            Some(i) => {
                let s = as_str(e.ks.value(i))?;
                let mut buf = itoa::Buffer::new();
                c.w().bulk(s.bytes(&mut buf));
            }
        }
    }
    let found = existing.is_some();
    if (o.cond == SetCond::Nx && found) || (o.cond == SetCond::Xx && !found) {
        if !o.get {
            match replies {
                SetReplies::Set => c.w().null(),
                SetReplies::Integer => c.w().integer(0),
            }
        }
        return Ok(());
    }
    let keep = if o.expire == ExpireOpt::KeepTtl {
        Keep::Ttl
    } else {
        Keep::Nothing
    };
    let idx =
        e.ks.set(key, Value::Str(StrValue::from_slice(val)), keep, existing);
    notify(e, class::STRING, "set", key);
    if let Some(at) = when {
        e.ks.set_expire(idx, at as u64);
        notify(e, class::GENERIC, "expire", key);
    }
    if !o.get {
        match replies {
            SetReplies::Set => c.w().ok(),
            SetReplies::Integer => c.w().integer(1),
        }
    }
    Ok(())
}

/// `SETNX key value` → 1 if set, 0 if the key existed.
pub fn setnx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = SetOpts {
        cond: SetCond::Nx,
        get: false,
        expire: ExpireOpt::None,
    };
    let (key, val) = (c.argv[1], c.argv[2]);
    set_generic(e, c, key, val, o, "setnx", SetReplies::Integer)
}

/// `SETEX key seconds value` → OK.
pub fn setex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = SetOpts {
        cond: SetCond::Always,
        get: false,
        expire: ExpireOpt::Ex(c.argv[2]),
    };
    let (key, val) = (c.argv[1], c.argv[3]);
    set_generic(e, c, key, val, o, "setex", SetReplies::Set)
}

/// `PSETEX key milliseconds value` → OK.
pub fn psetex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = SetOpts {
        cond: SetCond::Always,
        get: false,
        expire: ExpireOpt::Px(c.argv[2]),
    };
    let (key, val) = (c.argv[1], c.argv[3]);
    set_generic(e, c, key, val, o, "psetex", SetReplies::Set)
}

/// `GETSET key value` → old value | nil; clears the TTL.
pub fn getset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = SetOpts {
        cond: SetCond::Always,
        get: true,
        expire: ExpireOpt::None,
    };
    let (key, val) = (c.argv[1], c.argv[2]);
    set_generic(e, c, key, val, o, "getset", SetReplies::Set)
}

/// `GETDEL key` → value | nil; deletes the key.
pub fn getdel(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(i) = e.ks.lookup_read(c.argv[1], c.now_ms) else {
        c.w().null();
        return Ok(());
    };
    {
        let s = as_str(e.ks.value(i))?;
        let mut buf = itoa::Buffer::new();
        c.w().bulk(s.bytes(&mut buf));
    }
    e.ks.remove_at(i);
    notify(e, class::GENERIC, "del", c.argv[1]);
    Ok(())
}

/// `GETEX key [EX s|PX ms|EXAT ts|PXAT ts-ms|PERSIST]` → value | nil.
pub fn getex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let o = parse_set_opts(&c.argv[2..], OptGrammar::GetEx)?;
    let Some(i) = e.ks.lookup_read(c.argv[1], c.now_ms) else {
        c.w().null();
        return Ok(());
    };
    as_str(e.ks.value(i))?;
    let when = expire_at_ms(o.expire, c.now_ms as i64, "getex")?;
    {
        let s = as_str(e.ks.value(i))?;
        let mut buf = itoa::Buffer::new();
        c.w().bulk(s.bytes(&mut buf));
    }
    let absolute = matches!(o.expire, ExpireOpt::ExAt(_) | ExpireOpt::PxAt(_));
    match when {
        // redis `checkAlreadyExpired`: an absolute time not in the future deletes the key.
        Some(at) if absolute && at <= c.now_ms as i64 => {
            e.ks.remove_at(i);
            notify(e, class::GENERIC, "del", c.argv[1]);
        }
        Some(at) => {
            e.ks.set_expire(i, at as u64);
            notify(e, class::GENERIC, "expire", c.argv[1]);
        }
        None if o.expire == ExpireOpt::Persist && e.ks.persist(i) => {
            notify(e, class::GENERIC, "persist", c.argv[1]);
        }
        None => {}
    }
    Ok(())
}

/// `MGET key [key …]` → array of values, nil for missing or non-string keys.
pub fn mget(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let keys = &c.argv[1..];
    c.w().array(keys.len());
    let mut buf = itoa::Buffer::new();
    for k in keys {
        match e.ks.lookup_read(k, c.now_ms) {
            Some(i) => match e.ks.value(i) {
                Value::Str(s) => c.w().bulk(s.bytes(&mut buf)),
                #[allow(unreachable_patterns)]
                _ => c.w().null(),
            },
            None => c.w().null(),
        }
    }
    Ok(())
}

/// `MSET key value [key value …]` → OK.
pub fn mset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len().is_multiple_of(2) {
        return Err(CmdError::Arity("mset"));
    }
    for kv in c.argv[1..].chunks_exact(2) {
        let existing = e.ks.lookup_write(kv[0], c.now_ms);
        e.ks.set(
            kv[0],
            Value::Str(StrValue::from_slice(kv[1])),
            Keep::Nothing,
            existing,
        );
        notify(e, class::STRING, "set", kv[0]);
    }
    c.w().ok();
    Ok(())
}

/// `MSETNX key value [key value …]` → 1 if all were set, 0 (and nothing set) if any key existed.
pub fn msetnx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len().is_multiple_of(2) {
        return Err(CmdError::Arity("msetnx"));
    }
    for kv in c.argv[1..].chunks_exact(2) {
        if e.ks.lookup_write(kv[0], c.now_ms).is_some() {
            c.w().integer(0);
            return Ok(());
        }
    }
    for kv in c.argv[1..].chunks_exact(2) {
        let existing = e.ks.lookup_write(kv[0], c.now_ms);
        e.ks.set(
            kv[0],
            Value::Str(StrValue::from_slice(kv[1])),
            Keep::Nothing,
            existing,
        );
        notify(e, class::STRING, "set", kv[0]);
    }
    c.w().integer(1);
    Ok(())
}

/// redis `incrDecrCommand`: adds `by` to the integer at `key` (0 if missing), keeping the TTL.
fn incr_generic(e: &mut Engine, c: &mut Call, by: i64) -> Result<(), CmdError> {
    let key = c.argv[1];
    let existing = e.ks.lookup_write(key, c.now_ms);
    let old = match existing {
        Some(i) => as_str(e.ks.value(i))?
            .to_i64()
            .ok_or(CmdError::NotInteger)?,
        None => 0,
    };
    let new = old.checked_add(by).ok_or(CmdError::Overflow)?;
    match existing {
        Some(i) => e.ks.update(i, |v| *v = Value::Str(StrValue::Int(new))),
        None => {
            e.ks.set(key, Value::Str(StrValue::Int(new)), Keep::Nothing, None);
        }
    }
    notify(e, class::STRING, "incrby", key);
    c.w().integer(new);
    Ok(())
}

/// `INCR key` → new value.
pub fn incr(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    incr_generic(e, c, 1)
}

/// `DECR key` → new value.
pub fn decr(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    incr_generic(e, c, -1)
}

/// `INCRBY key increment` → new value.
pub fn incrby(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let by = int_arg(c.argv[2])?;
    incr_generic(e, c, by)
}

/// `DECRBY key decrement` → new value; `decrement would overflow` for i64::MIN.
pub fn decrby(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let by = int_arg(c.argv[2])?;
    if by == i64::MIN {
        return Err(CmdError::DecrementOverflow);
    }
    incr_generic(e, c, -by)
}

/// `INCRBYFLOAT key increment` → new value as a bulk string (80-bit long double arithmetic,
/// printed like redis `ld2string(…, LD_STR_HUMAN)`); keeps the TTL.
pub fn incrbyfloat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let existing = e.ks.lookup_write(key, c.now_ms);
    let old = match existing {
        Some(i) => {
            let s = as_str(e.ks.value(i))?;
            let mut buf = itoa::Buffer::new();
            LongDouble::parse(s.bytes(&mut buf)).ok_or(CmdError::NotFloat)?
        }
        None => LongDouble::ZERO,
    };
    let incr = LongDouble::parse(c.argv[2]).ok_or(CmdError::NotFloat)?;
    let sum = old.plus(incr);
    if !sum.is_finite() {
        return Err(CmdError::NanOrInfinity);
    }
    let mut text = Vec::new();
    sum.format_human(&mut text);
    c.w().bulk(&text);
    let value = Value::Str(StrValue::whole(text));
    match existing {
        Some(i) => e.ks.update(i, |v| *v = value),
        None => {
            e.ks.set(key, value, Keep::Nothing, None);
        }
    }
    notify(e, class::STRING, "incrbyfloat", key);
    Ok(())
}

/// redis `checkStringLength`.
fn check_len(e: &Engine, len: u64) -> Result<(), CmdError> {
    if len > e.config.proto_max_bulk_len {
        return Err(CmdError::StringTooLong);
    }
    Ok(())
}

/// `APPEND key value` → new length.
pub fn append(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, tail) = (c.argv[1], c.argv[2]);
    let len = match e.ks.lookup_write(key, c.now_ms) {
        None => {
            e.ks.set(
                key,
                Value::Str(StrValue::from_slice(tail)),
                Keep::Nothing,
                None,
            );
            tail.len()
        }
        Some(i) => {
            let cur = as_str(e.ks.value(i))?.len();
            check_len(e, (cur + tail.len()) as u64)?;
            e.ks.update(i, |v| {
                as_str_mut(v).expect("checked above").modify(|s| {
                    s.extend_from_slice(tail);
                    s.len()
                })
            })
        }
    };
    notify(e, class::STRING, "append", key);
    c.w().integer(len as i64);
    Ok(())
}

/// `STRLEN key` → length (0 if missing).
pub fn strlen(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match e.ks.lookup_read(c.argv[1], c.now_ms) {
        None => 0,
        Some(i) => as_str(e.ks.value(i))?.len(),
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `GETRANGE key start end (and SUBSTR)` → substring; negative indexes count from the end,
/// out-of-range indexes are clamped.
pub fn getrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut start = int_arg(c.argv[2])?;
    let mut end = int_arg(c.argv[3])?;
    let Some(i) = e.ks.lookup_read(c.argv[1], c.now_ms) else {
        c.w().bulk(b"");
        return Ok(());
    };
    let s = as_str(e.ks.value(i))?;
    let mut buf = itoa::Buffer::new();
    let bytes = s.bytes(&mut buf);
    let len = bytes.len() as i64;
    if start < 0 && end < 0 && start > end {
        c.w().bulk(b"");
        return Ok(());
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        c.w().bulk(b"");
    } else {
        c.w().bulk(&bytes[start as usize..=end as usize]);
    }
    Ok(())
}

/// `SETRANGE key offset value` → new length; zero-pads; `offset is out of range` if negative.
pub fn setrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, val) = (c.argv[1], c.argv[3]);
    let offset = int_arg(c.argv[2])?;
    if offset < 0 {
        return Err(CmdError::OffsetOutOfRange);
    }
    let offset = offset as u64;
    let new_len = |e: &Engine| -> Result<(), CmdError> {
        check_len(e, offset.saturating_add(val.len() as u64))
    };
    let len = match e.ks.lookup_write(key, c.now_ms) {
        None => {
            if val.is_empty() {
                c.w().integer(0);
                return Ok(());
            }
            new_len(e)?;
            let mut v = vec![0u8; offset as usize + val.len()];
            v[offset as usize..].copy_from_slice(val);
            let n = v.len();
            e.ks.set(key, Value::Str(StrValue::raw(v)), Keep::Nothing, None);
            n
        }
        Some(i) => {
            let cur = as_str(e.ks.value(i))?.len();
            if val.is_empty() {
                c.w().integer(cur as i64);
                return Ok(());
            }
            new_len(e)?;
            e.ks.update(i, |v| {
                as_str_mut(v).expect("checked above").modify(|s| {
                    let end = offset as usize + val.len();
                    if s.len() < end {
                        s.resize(end, 0);
                    }
                    s[offset as usize..end].copy_from_slice(val);
                    s.len()
                })
            })
        }
    };
    notify(e, class::STRING, "setrange", key);
    c.w().integer(len as i64);
    Ok(())
}
