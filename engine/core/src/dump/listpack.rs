//! Listpacks (redis `listpack.c`), ziplists (`ziplist.c`, read only: Redis 7.0 still loads
//! them from older payloads) and intsets (`intset.c`).
//!
//! A listpack: `total_bytes u32le, count u16le (65535 = unknown), entries, 0xFF`; each entry
//! is an encoding (7-bit uint, 13/16/24/32/64-bit int, 6/12/32-bit string length) with its
//! data, then a backlen of 1–5 bytes. Strings that are canonical integers are stored as
//! integers (`lpStringToInt64`), which is what makes our bytes equal Redis's.

use std::borrow::Cow;

use super::Bad;

/// One element of a listpack or ziplist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl<'a> Elem<'a> {
    /// The element as bytes (an integer as its decimal digits).
    pub fn bytes(self) -> Cow<'a, [u8]> {
        match self {
            Elem::Str(s) => Cow::Borrowed(s),
            Elem::Int(v) => Cow::Owned(itoa::Buffer::new().format(v).as_bytes().to_vec()),
        }
    }

    /// The element as an integer (a string must be a canonical one).
    pub fn int(self) -> Result<i64, Bad> {
        match self {
            Elem::Int(v) => Ok(v),
            Elem::Str(s) => resp::parse_i64(s).ok_or(Bad),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Listpack
// ---------------------------------------------------------------------------------------------

const LP_HDR: usize = 6;
const LP_EOF: u8 = 0xFF;

/// Bytes of the backlen for an entry of `l` bytes (`lpEncodeBacklen`).
fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// Parses a whole listpack, checking the header, every entry's bounds and backlen, the
/// terminator and the element count.
pub fn parse(lp: &[u8]) -> Result<Vec<Elem<'_>>, Bad> {
    if lp.len() < LP_HDR + 1 {
        return Err(Bad);
    }
    let total = u32::from_le_bytes(lp[0..4].try_into().expect("4")) as usize;
    let count = u16::from_le_bytes([lp[4], lp[5]]);
    if total != lp.len() || lp[total - 1] != LP_EOF {
        return Err(Bad);
    }
    let body = &lp[..total - 1];
    let mut out = Vec::new();
    let mut p = LP_HDR;
    while p < body.len() {
        let start = p;
        let b = body[p];
        let get = |from: usize, n: usize| body.get(from..from + n).ok_or(Bad);
        let (elem, len) = if b & 0x80 == 0 {
            (Elem::Int(i64::from(b)), 1)
        } else if b & 0xC0 == 0x80 {
            let n = usize::from(b & 0x3f);
            (Elem::Str(get(p + 1, n)?), 1 + n)
        } else if b & 0xE0 == 0xC0 {
            let uv = u64::from(b & 0x1f) << 8 | u64::from(*get(p + 1, 1)?.first().ok_or(Bad)?);
            let v = if uv >= 1 << 12 {
                uv as i64 - (1 << 13)
            } else {
                uv as i64
            };
            (Elem::Int(v), 2)
        } else if b & 0xF0 == 0xE0 {
            let n = usize::from(b & 0x0f) << 8 | usize::from(get(p + 1, 1)?[0]);
            (Elem::Str(get(p + 2, n)?), 2 + n)
        } else {
            match b {
                0xF0 => {
                    let n = u32::from_le_bytes(get(p + 1, 4)?.try_into().expect("4")) as usize;
                    (Elem::Str(get(p + 5, n)?), 5 + n)
                }
                0xF1 => {
                    let v = i16::from_le_bytes(get(p + 1, 2)?.try_into().expect("2"));
                    (Elem::Int(i64::from(v)), 3)
                }
                0xF2 => {
                    let s = get(p + 1, 3)?;
                    let v = i32::from_le_bytes([0, s[0], s[1], s[2]]) >> 8;
                    (Elem::Int(i64::from(v)), 4)
                }
                0xF3 => {
                    let v = i32::from_le_bytes(get(p + 1, 4)?.try_into().expect("4"));
                    (Elem::Int(i64::from(v)), 5)
                }
                0xF4 => {
                    let v = i64::from_le_bytes(get(p + 1, 8)?.try_into().expect("8"));
                    (Elem::Int(v), 9)
                }
                _ => return Err(Bad),
            }
        };
        p = start + len;
        let bl = backlen_size(len);
        let back = get(p, bl)?;
        if decode_backlen(back) != Some(len) {
            return Err(Bad);
        }
        p += bl;
        out.push(elem);
    }
    if count != u16::MAX && usize::from(count) != out.len() {
        return Err(Bad);
    }
    Ok(out)
}

/// Reads a backlen written by [`put_backlen`] (first byte most significant, 7 bits each).
fn decode_backlen(b: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for (i, &x) in b.iter().enumerate() {
        if (i > 0) != (x & 0x80 != 0) {
            return None;
        }
        v = v << 7 | usize::from(x & 0x7f);
    }
    Some(v)
}

/// `lpEncodeBacklen`.
fn put_backlen(out: &mut Vec<u8>, l: usize) {
    let n = backlen_size(l);
    for i in (0..n).rev() {
        let seven = ((l >> (7 * i)) & 0x7f) as u8;
        out.push(if i == n - 1 { seven } else { seven | 0x80 });
    }
}

/// Builds a listpack the way `lpAppend` does.
pub struct LpWriter {
    buf: Vec<u8>,
    count: usize,
}

impl Default for LpWriter {
    fn default() -> Self {
        LpWriter::new()
    }
}

impl LpWriter {
    pub fn new() -> LpWriter {
        LpWriter {
            buf: vec![0; LP_HDR],
            count: 0,
        }
    }

    /// Appends a string, as an integer when it is a canonical one (`lpStringToInt64`).
    pub fn str(&mut self, s: &[u8]) {
        if let Some(v) = resp::parse_i64(s) {
            return self.int(v);
        }
        let start = self.buf.len();
        let n = s.len();
        if n < 64 {
            self.buf.push(0x80 | n as u8);
        } else if n < 4096 {
            self.buf.push(0xE0 | (n >> 8) as u8);
            self.buf.push(n as u8);
        } else {
            self.buf.push(0xF0);
            self.buf.extend_from_slice(&(n as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(s);
        let l = self.buf.len() - start;
        put_backlen(&mut self.buf, l);
        self.count += 1;
    }

    /// Appends an integer (`lpEncodeIntegerGetType`).
    pub fn int(&mut self, v: i64) {
        let start = self.buf.len();
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let uv = if v < 0 { (1 << 13) + v } else { v } as u16;
            self.buf.push(0xC0 | (uv >> 8) as u8);
            self.buf.push(uv as u8);
        } else if let Ok(h) = i16::try_from(v) {
            self.buf.push(0xF1);
            self.buf.extend_from_slice(&h.to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&v) {
            self.buf.push(0xF2);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if let Ok(w) = i32::try_from(v) {
            self.buf.push(0xF3);
            self.buf.extend_from_slice(&w.to_le_bytes());
        } else {
            self.buf.push(0xF4);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        let l = self.buf.len() - start;
        put_backlen(&mut self.buf, l);
        self.count += 1;
    }

    /// Bytes the finished listpack will have.
    pub fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(LP_EOF);
        let total = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(usize::from(u16::MAX)) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

// ---------------------------------------------------------------------------------------------
// Ziplist (read only)
// ---------------------------------------------------------------------------------------------

/// Parses a whole ziplist: `zlbytes u32le, zltail u32le, zllen u16le, entries, 0xFF`; each
/// entry is `prevlen` (1 byte, or 0xFE + u32le), an encoding and its data.
pub fn parse_ziplist(zl: &[u8]) -> Result<Vec<Elem<'_>>, Bad> {
    if zl.len() < 11 {
        return Err(Bad);
    }
    let total = u32::from_le_bytes(zl[0..4].try_into().expect("4")) as usize;
    let count = u16::from_le_bytes([zl[8], zl[9]]);
    if total != zl.len() || zl[total - 1] != 0xFF {
        return Err(Bad);
    }
    let body = &zl[..total - 1];
    let get = |from: usize, n: usize| body.get(from..from + n).ok_or(Bad);
    let mut out = Vec::new();
    let mut p = 10;
    let mut prev = 0usize;
    while p < body.len() {
        let start = p;
        let prevlen = if body[p] < 254 {
            p += 1;
            usize::from(body[start])
        } else if body[p] == 254 {
            p += 5;
            u32::from_le_bytes(get(start + 1, 4)?.try_into().expect("4")) as usize
        } else {
            return Err(Bad);
        };
        if prevlen != prev {
            return Err(Bad);
        }
        let b = *get(p, 1)?.first().ok_or(Bad)?;
        let elem = match b >> 6 {
            0 => {
                let n = usize::from(b & 0x3f);
                p += 1;
                let s = get(p, n)?;
                p += n;
                Elem::Str(s)
            }
            1 => {
                let n = usize::from(b & 0x3f) << 8 | usize::from(get(p + 1, 1)?[0]);
                p += 2;
                let s = get(p, n)?;
                p += n;
                Elem::Str(s)
            }
            2 => {
                if b != 0x80 {
                    return Err(Bad);
                }
                let n = u32::from_be_bytes(get(p + 1, 4)?.try_into().expect("4")) as usize;
                p += 5;
                let s = get(p, n)?;
                p += n;
                Elem::Str(s)
            }
            _ => {
                p += 1;
                let (v, w) = match b {
                    0xC0 => (
                        i64::from(i16::from_le_bytes(get(p, 2)?.try_into().expect("2"))),
                        2,
                    ),
                    0xD0 => (
                        i64::from(i32::from_le_bytes(get(p, 4)?.try_into().expect("4"))),
                        4,
                    ),
                    0xE0 => (i64::from_le_bytes(get(p, 8)?.try_into().expect("8")), 8),
                    0xF0 => {
                        let s = get(p, 3)?;
                        (i64::from(i32::from_le_bytes([0, s[0], s[1], s[2]]) >> 8), 3)
                    }
                    0xFE => (i64::from(get(p, 1)?[0] as i8), 1),
                    0xF1..=0xFD => (i64::from(b & 0x0f) - 1, 0),
                    _ => return Err(Bad),
                };
                p += w;
                Elem::Int(v)
            }
        };
        prev = p - start;
        out.push(elem);
    }
    if count != u16::MAX && usize::from(count) != out.len() {
        return Err(Bad);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Intset
// ---------------------------------------------------------------------------------------------

/// Parses an intset: `encoding u32le (2, 4 or 8), length u32le, values` ascending, distinct.
pub fn parse_intset(is: &[u8]) -> Result<Vec<i64>, Bad> {
    if is.len() < 8 {
        return Err(Bad);
    }
    let enc = u32::from_le_bytes(is[0..4].try_into().expect("4")) as usize;
    let n = u32::from_le_bytes(is[4..8].try_into().expect("4")) as usize;
    if !matches!(enc, 2 | 4 | 8)
        || n.checked_mul(enc).and_then(|b| b.checked_add(8)) != Some(is.len())
    {
        return Err(Bad);
    }
    let vals: Vec<i64> = is[8..]
        .chunks_exact(enc)
        .map(|c| match enc {
            2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
            4 => i64::from(i32::from_le_bytes(c.try_into().expect("4"))),
            _ => i64::from_le_bytes(c.try_into().expect("8")),
        })
        .collect();
    if vals.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Bad);
    }
    Ok(vals)
}

/// An intset of `vals` (sorted here), in the narrowest encoding that holds them all.
pub fn write_intset(mut vals: Vec<i64>) -> Vec<u8> {
    vals.sort_unstable();
    let enc: usize = if vals.iter().all(|v| i16::try_from(*v).is_ok()) {
        2
    } else if vals.iter().all(|v| i32::try_from(*v).is_ok()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + enc * vals.len());
    out.extend_from_slice(&(enc as u32).to_le_bytes());
    out.extend_from_slice(&(vals.len() as u32).to_le_bytes());
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes()[..enc]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_round_trips_every_encoding() {
        let big = vec![b'x'; 5000];
        let mid = vec![b'y'; 300];
        let ints = [
            0i64,
            127,
            128,
            -1,
            -4096,
            4095,
            4096,
            -32768,
            32767,
            40000,
            -(1 << 23),
            (1 << 23) - 1,
            1 << 23,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MIN,
            i64::MAX,
        ];
        let mut w = LpWriter::new();
        for v in ints {
            w.int(v);
        }
        w.str(b"hello");
        w.str(&mid);
        w.str(&big);
        w.str(b"12");
        w.str(b"012");
        let lp = w.finish();
        let got = parse(&lp).unwrap();
        let mut want: Vec<Elem> = ints.iter().map(|&v| Elem::Int(v)).collect();
        want.extend([
            Elem::Str(b"hello"),
            Elem::Str(&mid),
            Elem::Str(&big),
            Elem::Int(12),
            Elem::Str(b"012"),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn listpack_of_redis() {
        // `RPUSH l a 1 hello` in redis-server 7.0.15, the node's listpack.
        let lp = b"\x13\x00\x00\x00\x03\x00\x81a\x02\x01\x01\x85hello\x06\xff";
        assert_eq!(
            parse(lp).unwrap(),
            [Elem::Str(b"a"), Elem::Int(1), Elem::Str(b"hello")]
        );
        let mut w = LpWriter::new();
        for s in [&b"a"[..], b"1", b"hello"] {
            w.str(s);
        }
        assert_eq!(w.finish(), lp);
        // Corruptions are refused, never panic.
        for i in 0..lp.len() {
            let mut c = lp.to_vec();
            c[i] ^= 0x5a;
            let _ = parse(&c);
            let _ = parse(&lp[..i]);
        }
    }

    #[test]
    fn intset_round_trips() {
        let is = write_intset(vec![3, -2, 70000]);
        assert_eq!(&is[0..4], &4u32.to_le_bytes());
        assert_eq!(parse_intset(&is).unwrap(), [-2, 3, 70000]);
        assert!(parse_intset(&is[..is.len() - 1]).is_err());
    }
}
