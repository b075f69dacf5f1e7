//! Geo commands on sorted sets (redis 7.0.15 `geo.c`): GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH
//! GEOSEARCHSTORE GEORADIUS GEORADIUSBYMEMBER GEORADIUS_RO GEORADIUSBYMEMBER_RO.
//!
//! A geo set is a plain sorted set whose scores are 52-bit geohashes ([`super::geohash`] has
//! the arithmetic); every zset command works on it, and these commands work on any zset.
//!
//! # Replies (checked against redis-server: `tests/diff/geo.txt`)
//! - Distances: a bulk string with 4 decimals in both protocols (redis
//!   `addReplyDoubleDistance`, `fixedpoint_d2string`: `llrint(d * 10000)`).
//! - Coordinates: redis `addReplyHumanLongDouble`: `%.17Lf` with trailing zeros removed, a
//!   bulk string in RESP2 and a `,` double in RESP3.
//! - GEOPOS of a missing member: a null array (`*-1`); GEOHASH's: a null bulk.
//! - Searches: each result is the member alone, or `[member, dist?, hash?, [lon, lat]?]` in that
//!   order whatever the order of the options. Unsorted results come in the order the 9 cells
//!   are visited (centre, N, S, E, W, NE, NW, SE, SW), each in score order. Sorting uses the
//!   same algorithms as redis-server so that equal distances come out in the same order: a
//!   stable merge sort (glibc 2.36's `qsort`) when every result is returned, Redis's partial
//!   quicksort (`pqsort.c`) when COUNT cuts the list.
//!
//! # Reading less than Redis
//! Redis reads every member of the 9 cells around the centre (for 100 km in a dense set, some
//! 40,000 members to answer 3,000) and tests each. Here a cell of a large set is split into
//! quarters along the shape's outline (`prune`) and the parts provably outside the shape
//! (latitude and longitude lower bounds with a margin, `geohash::Probe::may_contain`) are never
//! read; each member read is tested exactly as Redis tests it. Skipped members would all have
//! been rejected, so the answer, its order and the ANY cut-off are unchanged (a unit test
//! compares with whole-cell reads).
//!
//! # Order of checks (redis `georadiusGeneric`)
//! The source key's type first, then the centre and radius of GEORADIUS*, then the options left
//! to right (each error as its option is read), then the cross checks (STORE with WITH*,
//! FROM*/BY* missing, ANY without COUNT). GEORADIUSBYMEMBER on a missing key does not read
//! its radius at all.
//!
//! # Effects and events
//! GEOADD is ZADD of the computed scores (Redis rewrites the command and calls `zaddCommand`):
//! the event is `zadd`, and the keychange feed carries exactly that ZADD. The STORE forms write a
//! concrete zset (event `geosearchstore` or `georadiusstore`, `del` when the result is empty);
//! the feed recreates the destination from its value (effect.rs's rule for other writes).

use super::geohash::{self, Shape, ShapeKind};
use super::zset::cmd::read;
use super::zset::score::parse_score;
use super::zset::{ZSetValue, as_zset};
use crate::Engine;
use crate::args;
use crate::call::Call;
use crate::effect;
use crate::error::{CmdError, c_str_lossy};
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;

const ERR_DECODE_MEMBER: CmdError = CmdError::Static("ERR could not decode requested zset member");
const ERR_UNIT: CmdError =
    CmdError::Static("ERR unsupported unit provided. please use M, KM, FT, MI");

// ---------------------------------------------------------------------------------------------
// Argument helpers
// ---------------------------------------------------------------------------------------------

/// A double argument (redis `getDoubleFromObjectOrReply`): `err` when it does not parse.
fn double_arg(a: &[u8], err: CmdError) -> Result<f64, CmdError> {
    parse_score(a).ok_or(err)
}

/// redis `extractLongLatOrReply`: both numbers first, then the range check.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<[f64; 2], CmdError> {
    let x = double_arg(lon, CmdError::NotFloat)?;
    let y = double_arg(lat, CmdError::NotFloat)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&x)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&y)
    {
        return Err(CmdError::Other(format!(
            "ERR invalid longitude,latitude pair {x:.6},{y:.6}"
        )));
    }
    Ok([x, y])
}

/// Metres per unit (redis `extractUnitOrReply`).
fn unit(a: &[u8]) -> Result<f64, CmdError> {
    if args::is(a, "m") {
        Ok(1.0)
    } else if args::is(a, "km") {
        Ok(1000.0)
    } else if args::is(a, "ft") {
        Ok(0.3048)
    } else if args::is(a, "mi") {
        Ok(1609.34)
    } else {
        Err(ERR_UNIT)
    }
}

/// `radius unit` → (radius, metres per unit) (redis `extractDistanceOrReply`).
fn radius_unit(r: &[u8], u: &[u8]) -> Result<(f64, f64), CmdError> {
    let d = double_arg(r, CmdError::Static("ERR need numeric radius"))?;
    if d < 0.0 {
        return Err(CmdError::Static("ERR radius cannot be negative"));
    }
    Ok((d, unit(u)?))
}

/// `width height unit` (redis `extractBoxOrReply`).
fn box_unit(w: &[u8], h: &[u8], u: &[u8]) -> Result<(f64, f64, f64), CmdError> {
    let w = double_arg(w, CmdError::Static("ERR need numeric width"))?;
    let h = double_arg(h, CmdError::Static("ERR need numeric height"))?;
    if h < 0.0 || w < 0.0 {
        return Err(CmdError::Static("ERR height or width cannot be negative"));
    }
    Ok((w, h, unit(u)?))
}

// ---------------------------------------------------------------------------------------------
// Reply formats
// ---------------------------------------------------------------------------------------------

/// redis `fixedpoint_d2string(d, 4)`: `llrint(d * 10^4)` printed with the dot before the last
/// four digits.
pub fn distance_text(d: f64, out: &mut Vec<u8>) {
    if d == 0.0 {
        out.extend_from_slice(b"0.0000");
        return;
    }
    let r = (d * 10000.0).round_ties_even();
    // llrint: out of range (and NaN) gives LLONG_MIN on x86-64.
    let sv = geohash::c_f64_to_i64(r);
    if sv < 0 {
        out.push(b'-');
    }
    let v = sv.unsigned_abs();
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(v).as_bytes();
    let pad = 5usize.saturating_sub(digits.len());
    let mut full = Vec::with_capacity(digits.len() + pad);
    full.resize(pad, b'0');
    full.extend_from_slice(digits);
    let int_len = full.len() - 4;
    out.extend_from_slice(&full[..int_len]);
    out.push(b'.');
    out.extend_from_slice(&full[int_len..]);
}

/// redis `ld2string(…, LD_STR_HUMAN)` of a double: `%.17Lf`, trailing zeros (and a trailing
/// dot) removed, `-0` as `0`.
pub fn human_text(v: f64, out: &mut Vec<u8>) {
    use std::io::Write;
    if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    let start = out.len();
    let _ = write!(out, "{v:.17}");
    if out[start..].contains(&b'.') {
        while out.last() == Some(&b'0') {
            out.pop();
        }
        if out.last() == Some(&b'.') {
            out.pop();
        }
    }
    if &out[start..] == b"-0" {
        out.truncate(start);
        out.push(b'0');
    }
}

fn write_coord(w: &mut resp::ReplyWriter<'_>, v: f64, buf: &mut Vec<u8>) {
    buf.clear();
    human_text(v, buf);
    w.double_text(buf);
}

// ---------------------------------------------------------------------------------------------
// GEOADD
// ---------------------------------------------------------------------------------------------

/// `GEOADD key [NX|XX] [CH] longitude latitude member [longitude latitude member …]` → members
/// added (or changed with CH). Runs ZADD with the computed scores, as Redis does.
pub fn geoadd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut longidx = 2;
    let (mut nx, mut xx) = (false, false);
    while longidx < argv.len() {
        let o = argv[longidx];
        if args::is(o, "nx") {
            nx = true;
        } else if args::is(o, "xx") {
            xx = true;
        } else if !args::is(o, "ch") {
            break;
        }
        longidx += 1;
    }
    let rest = argv.len() - longidx;
    if !rest.is_multiple_of(3) || (xx && nx) {
        return Err(CmdError::Syntax);
    }
    let mut texts: Vec<Vec<u8>> = Vec::with_capacity(rest / 3);
    for t in argv[longidx..].chunks_exact(3) {
        let [x, y] = lon_lat(t[0], t[1])?;
        let mut b = itoa::Buffer::new();
        texts.push(b.format(geohash::score_of(x, y)).as_bytes().to_vec());
    }
    let mut zargv: Vec<&[u8]> = Vec::with_capacity(longidx + 2 * texts.len());
    zargv.push(b"zadd");
    zargv.extend_from_slice(&argv[1..longidx]);
    for (t, s) in argv[longidx..].chunks_exact(3).zip(&texts) {
        zargv.push(s);
        zargv.push(t[2]);
    }
    let dirty = e.ks.dirty;
    let (now_us, spec) = (c.now_us, c.spec);
    {
        let (client, out) = c.parts();
        let mut zc = Call::new(client, &zargv, now_us, spec, out, None);
        super::zset::cmd::zadd(e, &mut zc)?;
    }
    if e.ks.dirty != dirty {
        zargv[0] = b"ZADD";
        effect::propagate(e, &zargv);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// GEOHASH GEOPOS GEODIST
// ---------------------------------------------------------------------------------------------

/// `GEOHASH key member [member …]` → the 11-character geohash of each, nil when missing.
pub fn geohash_cmd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let z = read(e, argv[1], c.now_ms)?;
    let mut w = c.w();
    w.array(argv.len() - 2);
    for m in &argv[2..] {
        match z.and_then(|z| z.score(m)) {
            None => w.null(),
            Some(s) => w.bulk(&geohash::standard_geohash(s)),
        }
    }
    Ok(())
}

/// `GEOPOS key member [member …]` → `[longitude, latitude]` of each, a null array when missing.
pub fn geopos(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let z = read(e, argv[1], c.now_ms)?;
    let mut w = c.w();
    let mut buf = Vec::with_capacity(32);
    w.array(argv.len() - 2);
    for m in &argv[2..] {
        match z.and_then(|z| z.score(m)) {
            None => w.null_array(),
            Some(s) => {
                let [lon, lat] = geohash::decode_score(s);
                w.array(2);
                write_coord(&mut w, lon, &mut buf);
                write_coord(&mut w, lat, &mut buf);
            }
        }
    }
    Ok(())
}

/// `GEODIST key member1 member2 [M|KM|FT|MI]` → the distance with 4 decimals, nil when the key
/// or a member is missing.
pub fn geodist(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let to_meter = match argv.len() {
        5 => unit(argv[4])?,
        n if n > 5 => return Err(CmdError::Syntax),
        _ => 1.0,
    };
    let Some(z) = read(e, argv[1], c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let (Some(s1), Some(s2)) = (z.score(argv[2]), z.score(argv[3])) else {
        c.w().null();
        return Ok(());
    };
    let [x1, y1] = geohash::decode_score(s1);
    let [x2, y2] = geohash::decode_score(s2);
    let mut b = Vec::with_capacity(24);
    distance_text(geohash::distance(x1, y1, x2, y2) / to_meter, &mut b);
    c.w().bulk(&b);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Searches
// ---------------------------------------------------------------------------------------------

/// One match (redis `geoPoint`).
#[derive(Clone, Copy, Debug)]
struct Point<'z> {
    lon: f64,
    lat: f64,
    /// Metres from the centre until the reply divides it by the unit.
    dist: f64,
    score: f64,
    member: &'z [u8],
}

/// How many levels below a search cell [`prune`] may split it (4^6 parts at most; far fewer
/// are visited, only those along the shape's outline).
const PRUNE_DEPTH: u8 = 6;

/// The score ranges of `cell` that may hold matches, in score order, adjacent ranges merged:
/// `cell` itself, or its four quarters (in score order) recursively, leaving out the parts
/// `probe` proves empty of matches. Scanning these ranges instead of the whole cell finds the
/// same members in the same order (every skipped member would have been rejected), without
/// reading the skipped ones: a member read is a cache miss.
fn prune(cell: geohash::Bits, probe: &geohash::Probe, depth: u8, out: &mut Vec<(u64, u64)>) {
    if !probe.may_contain(&geohash::decode(cell)) {
        return;
    }
    if depth == 0 || cell.step >= geohash::STEP_MAX {
        let lo = cell.align52();
        let hi = geohash::Bits {
            bits: cell.bits + 1,
            step: cell.step,
        }
        .align52();
        match out.last_mut() {
            Some(last) if last.1 == lo => last.1 = hi,
            _ => out.push((lo, hi)),
        }
        return;
    }
    for q in 0..4 {
        let child = geohash::Bits {
            bits: (cell.bits << 2) | q,
            step: cell.step + 1,
        };
        prune(child, probe, depth - 1, out);
    }
}

/// The members of `z` inside `shape`, in Redis's visiting order; with `limit > 0` (ANY) it stops
/// once that many were found (redis `membersOfAllNeighbors`).
fn search<'z>(z: &'z ZSetValue, shape: &Shape, limit: usize) -> Vec<Point<'z>> {
    search_pruned(z, shape, limit, prune_depth(z.len()))
}

/// How deep to split cells for a set of `n` members: not at all up to 512 (reading a small set
/// costs less than proving parts of it empty), then one level more per 4× members, up to
/// [`PRUNE_DEPTH`] (100,000 members: 4).
fn prune_depth(n: usize) -> u8 {
    let mut depth = 0u8;
    let mut m = n / 128;
    while m >= 4 && depth < PRUNE_DEPTH {
        m /= 4;
        depth += 1;
    }
    depth
}

/// [`search`] splitting cells at most `depth` levels (0: whole cells, as Redis reads them).
fn search_pruned<'z>(z: &'z ZSetValue, shape: &Shape, limit: usize, depth: u8) -> Vec<Point<'z>> {
    let cells = geohash::search_cells(shape);
    let probe = geohash::Probe::new(shape);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut ga: Vec<Point<'z>> = Vec::new();
    let full = |ga: &Vec<Point<'z>>| limit > 0 && ga.len() >= limit;
    // Index of the last cell searched; 0 also means "none yet", as in Redis (so the north cell is
    // never compared with the centre).
    let mut last_processed = 0usize;
    for (i, &cell) in cells.iter().enumerate() {
        if cell.is_zero() {
            continue;
        }
        if last_processed != 0 && cell == cells[last_processed] {
            continue;
        }
        if full(&ga) {
            break;
        }
        ranges.clear();
        prune(cell, &probe, depth, &mut ranges);
        for &(min, max) in &ranges {
            if full(&ga) {
                break;
            }
            z.for_each_in_half_open(min as f64, max as f64, |x, s| {
                let xy = geohash::decode_score(s);
                if let Some(d) = probe.within(xy) {
                    ga.push(Point {
                        lon: xy[0],
                        lat: xy[1],
                        dist: d,
                        score: s,
                        member: z.member_at(x),
                    });
                }
                !full(&ga)
            });
        }
        last_processed = i;
    }
    ga
}

/// redis `sort_gp_asc`: 1, 0 or -1 (a NaN distance compares as smaller both ways, as in C).
fn cmp_asc(a: &Point, b: &Point) -> i32 {
    if a.dist > b.dist {
        1
    } else if a.dist == b.dist {
        0
    } else {
        -1
    }
}

fn cmp_desc(a: &Point, b: &Point) -> i32 {
    -cmp_asc(a, b)
}

/// glibc 2.36 `qsort` (`msort.c`): a stable top-down merge sort, left element first on ties.
fn merge_sort<T: Copy>(v: &mut [T], cmp: fn(&T, &T) -> i32) {
    fn rec<T: Copy>(v: &mut [T], tmp: &mut Vec<T>, cmp: fn(&T, &T) -> i32) {
        let n = v.len();
        if n <= 1 {
            return;
        }
        let n1 = n / 2;
        rec(&mut v[..n1], tmp, cmp);
        rec(&mut v[n1..], tmp, cmp);
        tmp.clear();
        let (mut i, mut j) = (0, n1);
        while i < n1 && j < n {
            if cmp(&v[i], &v[j]) <= 0 {
                tmp.push(v[i]);
                i += 1;
            } else {
                tmp.push(v[j]);
                j += 1;
            }
        }
        tmp.extend_from_slice(&v[i..n1]);
        let k = tmp.len();
        v[..k].copy_from_slice(tmp);
    }
    let mut tmp = Vec::with_capacity(v.len());
    rec(v, &mut tmp, cmp);
}

/// redis `pqsort` (NetBSD's Bentley–McIlroy quicksort that only sorts partitions touching
/// positions `lrange..=rrange`), step for step, so ties come out where Redis puts them.
fn pqsort<T>(v: &mut [T], cmp: fn(&T, &T) -> i32, lrange: usize, rrange: usize) {
    fn med3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: fn(&T, &T) -> i32) -> usize {
        if cmp(&v[a], &v[b]) < 0 {
            if cmp(&v[b], &v[c]) < 0 {
                b
            } else if cmp(&v[a], &v[c]) < 0 {
                c
            } else {
                a
            }
        } else if cmp(&v[b], &v[c]) > 0 {
            b
        } else if cmp(&v[a], &v[c]) < 0 {
            a
        } else {
            c
        }
    }
    fn vecswap<T>(v: &mut [T], a: usize, b: usize, n: usize) {
        for i in 0..n {
            v.swap(a + i, b + i);
        }
    }
    fn rec<T>(
        v: &mut [T],
        mut base: usize,
        mut n: usize,
        cmp: fn(&T, &T) -> i32,
        l: usize,
        r: usize,
    ) {
        loop {
            if n < 7 {
                for pm in base + 1..base + n {
                    let mut pl = pm;
                    while pl > base && cmp(&v[pl - 1], &v[pl]) > 0 {
                        v.swap(pl, pl - 1);
                        pl -= 1;
                    }
                }
                return;
            }
            let mut pm = base + n / 2;
            if n > 7 {
                let mut pl = base;
                let mut pn = base + n - 1;
                if n > 40 {
                    let d = n / 8;
                    pl = med3(v, pl, pl + d, pl + 2 * d, cmp);
                    pm = med3(v, pm - d, pm, pm + d, cmp);
                    pn = med3(v, pn - 2 * d, pn - d, pn, cmp);
                }
                pm = med3(v, pl, pm, pn, cmp);
            }
            v.swap(base, pm);
            let (mut pa, mut pb) = (base + 1, base + 1);
            let (mut pc, mut pd) = (base + n - 1, base + n - 1);
            loop {
                while pb <= pc {
                    let c = cmp(&v[pb], &v[base]);
                    if c > 0 {
                        break;
                    }
                    if c == 0 {
                        v.swap(pa, pb);
                        pa += 1;
                    }
                    pb += 1;
                }
                while pb <= pc {
                    let c = cmp(&v[pc], &v[base]);
                    if c < 0 {
                        break;
                    }
                    if c == 0 {
                        v.swap(pc, pd);
                        pd -= 1;
                    }
                    pc -= 1;
                }
                if pb > pc {
                    break;
                }
                v.swap(pb, pc);
                pb += 1;
                pc -= 1;
            }
            let pn = base + n;
            let s = (pa - base).min(pb - pa);
            vecswap(v, base, pb - s, s);
            let s = (pd - pc).min(pn - pd - 1);
            vecswap(v, pb, pn - s, s);
            // Recurse into a partition only if it overlaps the wanted positions.
            let touches = |start: usize, len: usize| !(r < start || l >= start + len);
            let left = pb - pa;
            if left > 1 && touches(base, left) {
                rec(v, base, left, cmp, l, r);
            }
            let right = pd - pc;
            if right > 1 {
                base = pn - right;
                n = right;
                if touches(base, n) {
                    continue;
                }
            }
            return;
        }
    }
    let n = v.len();
    rec(v, 0, n, cmp, lrange, rrange);
}

/// Which command runs `search_generic` (redis `RADIUS_*` / `GEOSEARCH*` flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS / GEORADIUS_RO (`store`: STORE/STOREDIST accepted).
    Coords { store: bool },
    /// GEORADIUSBYMEMBER / GEORADIUSBYMEMBER_RO.
    Member { store: bool },
    /// GEOSEARCH.
    Search,
    /// GEOSEARCHSTORE.
    SearchStore,
}

impl Form {
    fn store_ok(self) -> bool {
        matches!(
            self,
            Form::Coords { store: true } | Form::Member { store: true }
        )
    }

    fn is_search(self) -> bool {
        matches!(self, Form::Search | Form::SearchStore)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    None,
    Asc,
    Desc,
}

/// redis `georadiusGeneric`.
fn search_generic(
    e: &mut Engine,
    c: &mut Call,
    src_idx: usize,
    form: Form,
) -> Result<(), CmdError> {
    let argv = c.argv;
    let now = c.now_ms;
    let zpos = match e.ks.lookup_read(argv[src_idx], now) {
        None => None,
        Some(i) => {
            as_zset(e.ks.value(i))?;
            Some(i)
        }
    };
    fn zobj(e: &Engine, zpos: Option<usize>) -> Option<&ZSetValue> {
        zpos.map(|i| as_zset(e.ks.value(i)).expect("checked zset"))
    }
    let mut storekey: Option<&[u8]> = None;
    let mut storedist = false;
    let mut xy = [0.0f64; 2];
    let mut kind = ShapeKind::Radius(0.0);
    let mut conversion = 1.0;
    let base = match form {
        Form::Coords { .. } => {
            xy = lon_lat(argv[2], argv[3])?;
            let (r, cv) = radius_unit(argv[4], argv[5])?;
            kind = ShapeKind::Radius(r);
            conversion = cv;
            6
        }
        Form::Member { .. } => {
            if let Some(z) = zobj(e, zpos) {
                let s = z.score(argv[2]).ok_or(ERR_DECODE_MEMBER)?;
                xy = geohash::decode_score(s);
                let (r, cv) = radius_unit(argv[3], argv[4])?;
                kind = ShapeKind::Radius(r);
                conversion = cv;
            }
            5
        }
        Form::Search => 2,
        Form::SearchStore => {
            storekey = Some(argv[1]);
            3
        }
    };
    let (mut withdist, mut withhash, mut withcoords) = (false, false, false);
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let mut sort = Order::None;
    let mut any = false;
    let mut count: i64 = 0;
    let opts = &argv[base.min(argv.len())..];
    let remaining = opts.len();
    let mut i = 0;
    while i < remaining {
        let arg = opts[i];
        if args::is(arg, "withdist") {
            withdist = true;
        } else if args::is(arg, "withhash") {
            withhash = true;
        } else if args::is(arg, "withcoord") {
            withcoords = true;
        } else if args::is(arg, "any") {
            any = true;
        } else if args::is(arg, "asc") {
            sort = Order::Asc;
        } else if args::is(arg, "desc") {
            sort = Order::Desc;
        } else if args::is(arg, "count") && i + 1 < remaining {
            count = args::int_arg(opts[i + 1])?;
            if count <= 0 {
                return Err(CmdError::Static("ERR COUNT must be > 0"));
            }
            i += 1;
        } else if args::is(arg, "store") && i + 1 < remaining && form.store_ok() {
            storekey = Some(opts[i + 1]);
            storedist = false;
            i += 1;
        } else if args::is(arg, "storedist") && i + 1 < remaining && form.store_ok() {
            storekey = Some(opts[i + 1]);
            storedist = true;
            i += 1;
        } else if args::is(arg, "storedist") && form == Form::SearchStore {
            storedist = true;
        } else if args::is(arg, "frommember") && i + 1 < remaining && form.is_search() && !fromloc {
            if let Some(z) = zobj(e, zpos) {
                let s = z.score(opts[i + 1]).ok_or(ERR_DECODE_MEMBER)?;
                xy = geohash::decode_score(s);
            }
            frommember = true;
            i += 1;
        } else if args::is(arg, "fromlonlat")
            && i + 2 < remaining
            && form.is_search()
            && !frommember
        {
            xy = lon_lat(opts[i + 1], opts[i + 2])?;
            fromloc = true;
            i += 2;
        } else if args::is(arg, "byradius") && i + 2 < remaining && form.is_search() && !bybox {
            let (r, cv) = radius_unit(opts[i + 1], opts[i + 2])?;
            kind = ShapeKind::Radius(r);
            conversion = cv;
            byradius = true;
            i += 2;
        } else if args::is(arg, "bybox") && i + 3 < remaining && form.is_search() && !byradius {
            let (w, h, cv) = box_unit(opts[i + 1], opts[i + 2], opts[i + 3])?;
            kind = ShapeKind::Box {
                width: w,
                height: h,
            };
            conversion = cv;
            bybox = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if storekey.is_some() && (withdist || withhash || withcoords) {
        return Err(CmdError::Other(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if form == Form::SearchStore {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        )));
    }
    if form.is_search() && !(frommember || fromloc) {
        return Err(CmdError::Other(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {}",
            c_str_lossy(argv[0], usize::MAX)
        )));
    }
    if form.is_search() && !(byradius || bybox) {
        return Err(CmdError::Other(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {}",
            c_str_lossy(argv[0], usize::MAX)
        )));
    }
    if any && count == 0 {
        return Err(CmdError::Static(
            "ERR the ANY argument requires COUNT argument",
        ));
    }
    if zpos.is_none() {
        match storekey {
            Some(dst) => {
                if e.ks.delete(dst, now) {
                    notify(e, class::GENERIC, "del", dst);
                }
                c.w().integer(0);
            }
            None => c.w().array(0),
        }
        return Ok(());
    }
    if count != 0 && sort == Order::None && !any {
        sort = Order::Asc;
    }
    let shape = Shape {
        xy,
        conversion,
        kind,
    };
    let limit = if any { count as usize } else { 0 };
    // The destination's hash seed, drawn before the source is borrowed.
    let seed = if storekey.is_some() {
        e.ks.next_random()
    } else {
        0
    };
    let Some(z) = zobj(e, zpos) else {
        return Ok(());
    };
    let mut ga = search(z, &shape, limit);
    if ga.is_empty() && storekey.is_none() {
        c.w().array(0);
        return Ok(());
    }
    let result_length = ga.len();
    let returned = if count == 0 || (result_length as i64) < count {
        result_length
    } else {
        count as usize
    };
    if sort != Order::None {
        let cmp = if sort == Order::Asc {
            cmp_asc
        } else {
            cmp_desc
        };
        if returned == result_length {
            merge_sort(&mut ga, cmp);
        } else {
            pqsort(&mut ga, cmp, 0, returned - 1);
        }
    }
    let ga = &ga[..returned];
    match storekey {
        None => {
            let options = usize::from(withdist) + usize::from(withcoords) + usize::from(withhash);
            let mut w = c.w();
            let mut buf = Vec::with_capacity(32);
            w.array(returned);
            for p in ga {
                if options > 0 {
                    w.array(options + 1);
                }
                w.bulk(p.member);
                if withdist {
                    buf.clear();
                    distance_text(p.dist / conversion, &mut buf);
                    w.bulk(&buf);
                }
                if withhash {
                    w.integer(geohash::c_f64_to_i64(p.score));
                }
                if withcoords {
                    w.array(2);
                    write_coord(&mut w, p.lon, &mut buf);
                    write_coord(&mut w, p.lat, &mut buf);
                }
            }
        }
        Some(dst) => {
            // Built as a skiplist, then a listpack if it fits (redis `georadiusGeneric`).
            let lim = e.config.encoding;
            let mut out = ZSetValue::new_skiplist(seed);
            for p in ga {
                out.insert(
                    p.member,
                    if storedist {
                        p.dist / conversion
                    } else {
                        p.score
                    },
                    &lim,
                );
            }
            let out = out.from_result(&lim);
            let dst = dst.to_vec();
            let existing = e.ks.lookup_write(&dst, now);
            if returned > 0 {
                let dirty = e.ks.dirty;
                e.ks.set(&dst, Value::ZSet(out), Keep::Nothing, existing);
                // Redis counts one change per member stored.
                e.ks.dirty = dirty + returned as u64;
                let event = if form.is_search() {
                    "geosearchstore"
                } else {
                    "georadiusstore"
                };
                notify(e, class::ZSET, event, &dst);
            } else if let Some(i) = existing {
                e.ks.remove_at(i);
                notify(e, class::GENERIC, "del", &dst);
            }
            c.w().integer(returned as i64);
        }
    }
    Ok(())
}

/// `GEORADIUS key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH]
/// [COUNT count [ANY]] [ASC|DESC] [STORE key] [STOREDIST key]` → matches, or with STORE their
/// number.
pub fn georadius(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 1, Form::Coords { store: true })
}

/// `GEORADIUSBYMEMBER key member radius unit …` (GEORADIUS around a member).
pub fn georadiusbymember(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 1, Form::Member { store: true })
}

/// `GEORADIUS_RO …`: GEORADIUS without STORE/STOREDIST.
pub fn georadius_ro(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 1, Form::Coords { store: false })
}

/// `GEORADIUSBYMEMBER_RO …`: GEORADIUSBYMEMBER without STORE/STOREDIST.
pub fn georadiusbymember_ro(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 1, Form::Member { store: false })
}

/// `GEOSEARCH key FROMMEMBER member|FROMLONLAT longitude latitude BYRADIUS radius unit|BYBOX
/// width height unit [ASC|DESC] [COUNT count [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]`.
pub fn geosearch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 1, Form::Search)
}

/// `GEOSEARCHSTORE destination source … [STOREDIST]` → the number of members stored.
pub fn geosearchstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    search_generic(e, c, 2, Form::SearchStore)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(d: f64) -> String {
        let mut b = Vec::new();
        distance_text(d, &mut b);
        String::from_utf8(b).unwrap()
    }

    fn human(v: f64) -> String {
        let mut b = Vec::new();
        human_text(v, &mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn formats_like_redis() {
        assert_eq!(dist(0.0), "0.0000");
        assert_eq!(dist(0.00005), "0.0000");
        assert_eq!(dist(0.7750), "0.7750");
        assert_eq!(dist(166274.15156960033), "166274.1516");
        assert_eq!(dist(12.5), "12.5000");
        assert_eq!(dist(-3.25), "-3.2500");
        assert_eq!(human(13.361389338970184), "13.36138933897018433");
        assert_eq!(human(-0.0), "0");
        assert_eq!(human(2.0), "2");
        assert_eq!(human(-180.0), "-180");
    }

    /// Pruning never changes a search: same members, same order, same distances as reading
    /// whole cells, over random sets (clustered and spread, poles and antimeridian) and random
    /// circles and boxes of every size, with and without ANY limits.
    #[test]
    fn pruned_searches_equal_whole_cell_reads() {
        let mut x: u64 = 0x9e0_5eed;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for round in 0..60 {
            let mut z = ZSetValue::new(round);
            let (cx, cy) = (rnd() * 360.0 - 180.0, rnd() * 170.0 - 85.0);
            let spread = [0.01, 0.5, 5.0, 60.0, 400.0][round as usize % 5];
            for i in 0..3000 {
                let lon = (cx + (rnd() - 0.5) * spread).clamp(-180.0, 180.0);
                let lat = (cy + (rnd() - 0.5) * spread).clamp(-85.05, 85.05);
                z.insert(
                    format!("m{i}").as_bytes(),
                    geohash::score_of(lon, lat) as f64,
                    &crate::types::EncodingLimits::DEFAULT,
                );
            }
            for _ in 0..20 {
                let center = [
                    (cx + (rnd() - 0.5) * spread).clamp(-180.0, 180.0),
                    (cy + (rnd() - 0.5) * spread).clamp(-85.05, 85.05),
                ];
                let size = [1.0, 100.0, 5_000.0, 200_000.0, 3_000_000.0, 15_000_000.0]
                    [(rnd() * 6.0) as usize];
                let kind = if rnd() < 0.5 {
                    ShapeKind::Radius(size * rnd())
                } else {
                    ShapeKind::Box {
                        width: size * rnd(),
                        height: size * rnd(),
                    }
                };
                let shape = Shape {
                    xy: center,
                    conversion: 1.0,
                    kind,
                };
                let limit = if rnd() < 0.2 {
                    1 + (rnd() * 20.0) as usize
                } else {
                    0
                };
                let key = |v: Vec<Point>| -> Vec<(Vec<u8>, u64)> {
                    v.iter()
                        .map(|p| (p.member.to_vec(), p.dist.to_bits()))
                        .collect()
                };
                let whole = key(search_pruned(&z, &shape, limit, 0));
                let pruned = key(search_pruned(&z, &shape, limit, PRUNE_DEPTH));
                assert_eq!(pruned, whole, "round {round}: {shape:?} limit {limit}");
            }
        }
    }

    #[test]
    fn prune_depth_grows_with_the_set() {
        assert_eq!(prune_depth(0), 0);
        assert_eq!(prune_depth(511), 0);
        assert_eq!(prune_depth(512), 1);
        assert_eq!(prune_depth(100_000), 4);
        assert_eq!(prune_depth(usize::MAX), PRUNE_DEPTH);
    }

    #[test]
    fn sorts_are_the_c_ones() {
        let mut v: Vec<(i32, u32)> = (0..200).map(|i| ((i * 7919 % 13) as i32, i)).collect();
        let mut w = v.clone();
        merge_sort(&mut v, |a, b| a.0 - b.0);
        w.sort_by_key(|p| p.0);
        assert_eq!(v, w, "stable");
        for k in [1usize, 5, 17, 100] {
            let mut p: Vec<(i32, u32)> = (0..200).map(|i| ((i * 7919 % 13) as i32, i)).collect();
            pqsort(&mut p, |a, b| a.0 - b.0, 0, k - 1);
            let keys: Vec<i32> = p[..k].iter().map(|x| x.0).collect();
            let want: Vec<i32> = w[..k].iter().map(|x| x.0).collect();
            assert_eq!(keys, want);
        }
    }
}
