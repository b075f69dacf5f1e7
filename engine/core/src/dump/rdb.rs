//! RDB primitives (redis `rdb.c`): lengths, strings (plain, integer-encoded, LZF-compressed),
//! doubles, millisecond times; the CRC-64 of the payload trailer; LZF decompression.

use std::borrow::Cow;

use super::Bad;

/// Redis's CRC-64 (Jones polynomial, reflected; redis `crc64.c`), from the `crc` crate's
/// catalogue.
const CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// `crc64(0, data)` as Redis computes it.
pub fn crc64(data: &[u8]) -> u64 {
    CRC64.checksum(data)
}

/// `RDB_ENC_*`: the special string encodings after a length byte `11xxxxxx`.
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// `rdbSaveLen`.
pub fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// `rdbSaveRawString` without compression: a string of at most 11 bytes that is a canonical
/// integer fitting 32 bits is stored as an integer (`rdbTryIntegerEncoding`), anything else as
/// length + bytes.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11
        && let Some(v) = resp::parse_i64(s)
        && put_int_encoded(out, v)
    {
        return;
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// `rdbEncodeInteger`: false (nothing written) when `v` does not fit 32 bits.
fn put_int_encoded(out: &mut Vec<u8>, v: i64) -> bool {
    if let Ok(b) = i8::try_from(v) {
        out.extend_from_slice(&[0xC0 | ENC_INT8, b as u8]);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(0xC0 | ENC_INT16);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(0xC0 | ENC_INT32);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// `rdbSaveBinaryDoubleValue`: the IEEE bits, little-endian.
pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// `rdbSaveMillisecondTime`: i64 little-endian.
pub fn put_ms(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// A cursor over a payload; every read checks the bounds.
pub struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    pub fn new(b: &'a [u8]) -> Rd<'a> {
        Rd { b, pos: 0 }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        let end = self.pos.checked_add(n).ok_or(Bad)?;
        let s = self.b.get(self.pos..end).ok_or(Bad)?;
        self.pos = end;
        Ok(s)
    }

    /// Whether every byte was read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }

    pub fn u8(&mut self) -> Result<u8, Bad> {
        Ok(self.take(1)?[0])
    }

    fn arr<const N: usize>(&mut self) -> Result<[u8; N], Bad> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// `rdbLoadLenByRef`: `(value, is_encoded)`.
    fn len_enc(&mut self) -> Result<(u64, bool), Bad> {
        let first = self.u8()?;
        Ok(match first >> 6 {
            0 => (u64::from(first & 0x3f), false),
            1 => (u64::from(first & 0x3f) << 8 | u64::from(self.u8()?), false),
            2 => match first {
                0x80 => (u64::from(u32::from_be_bytes(self.arr()?)), false),
                0x81 => (u64::from_be_bytes(self.arr()?), false),
                _ => return Err(Bad),
            },
            _ => (u64::from(first & 0x3f), true),
        })
    }

    /// `rdbLoadLen` (an encoded-string marker is an error here).
    #[allow(clippy::len_without_is_empty)] // a length read from the payload, not a size
    pub fn len(&mut self) -> Result<u64, Bad> {
        match self.len_enc()? {
            (v, false) => Ok(v),
            _ => Err(Bad),
        }
    }

    /// A length used as a count of things still to read: each takes at least one byte, so a
    /// count above the bytes left is corrupt (and never pre-allocates beyond the input).
    pub fn count(&mut self) -> Result<usize, Bad> {
        let n = self.len()?;
        if n > (self.b.len() - self.pos) as u64 {
            return Err(Bad);
        }
        Ok(n as usize)
    }

    /// `rdbGenericLoadStringObject`: plain, integer-encoded (as its decimal digits) or LZF.
    pub fn string(&mut self) -> Result<Cow<'a, [u8]>, Bad> {
        let (len, encoded) = self.len_enc()?;
        if !encoded {
            let n = usize::try_from(len).map_err(|_| Bad)?;
            return Ok(Cow::Borrowed(self.take(n)?));
        }
        let v: i64 = match len as u8 {
            ENC_INT8 => i64::from(self.u8()? as i8),
            ENC_INT16 => i64::from(i16::from_le_bytes(self.arr()?)),
            ENC_INT32 => i64::from(i32::from_le_bytes(self.arr()?)),
            ENC_LZF => {
                let clen = usize::try_from(self.len()?).map_err(|_| Bad)?;
                let ulen = usize::try_from(self.len()?).map_err(|_| Bad)?;
                let src = self.take(clen)?;
                return lzf_decompress(src, ulen).map(Cow::Owned);
            }
            _ => return Err(Bad),
        };
        Ok(Cow::Owned(
            itoa::Buffer::new().format(v).as_bytes().to_vec(),
        ))
    }

    /// `rdbLoadBinaryDoubleValue`.
    pub fn f64_bin(&mut self) -> Result<f64, Bad> {
        Ok(f64::from_le_bytes(self.arr()?))
    }

    /// `rdbLoadDoubleValue` (RDB_TYPE_ZSET, version 1 sorted sets): a length byte, then the
    /// `%.17g` text; 253 = NaN, 254 = +inf, 255 = -inf.
    pub fn f64_text(&mut self) -> Result<f64, Bad> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let s = std::str::from_utf8(self.take(usize::from(n))?).map_err(|_| Bad)?;
                s.parse().map_err(|_| Bad)
            }
        }
    }

    /// `rdbLoadMillisecondTime`.
    pub fn ms(&mut self) -> Result<u64, Bad> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
}

// ---------------------------------------------------------------------------------------------
// LZF
// ---------------------------------------------------------------------------------------------

/// liblzf's `lzf_decompress` (what Redis uses for RDB strings); `ulen` is the exact size the
/// payload announces. A back reference can expand 3 bytes to 264, so a `ulen` beyond that
/// ratio is corrupt and nothing is allocated for it.
pub fn lzf_decompress(src: &[u8], ulen: usize) -> Result<Vec<u8>, Bad> {
    if ulen == 0 || ulen / 88 > src.len() {
        return Err(Bad);
    }
    let mut out = Vec::with_capacity(ulen);
    let mut i = 0;
    while i < src.len() {
        let ctrl = usize::from(src[i]);
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            out.extend_from_slice(src.get(i..i + n).ok_or(Bad)?);
            i += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*src.get(i).ok_or(Bad)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*src.get(i).ok_or(Bad)?) + 1;
            i += 1;
            let start = out.len().checked_sub(back).ok_or(Bad)?;
            // The copy may overlap what it appends (a run), so byte by byte.
            for k in 0..len + 2 {
                let byte = out[start + k];
                out.push(byte);
            }
        }
        if out.len() > ulen {
            return Err(Bad);
        }
    }
    if out.len() != ulen {
        return Err(Bad);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_crc64() {
        // redis crc64.c's test vector.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn lengths_and_strings_round_trip() {
        for n in [
            0u64,
            63,
            64,
            16383,
            16384,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
        ] {
            let mut b = Vec::new();
            put_len(&mut b, n);
            assert_eq!(Rd::new(&b).len(), Ok(n));
        }
        for s in [
            &b"12"[..],
            b"-129",
            b"70000",
            b"2147483648",
            b"007",
            b"abc",
            b"",
        ] {
            let mut b = Vec::new();
            put_string(&mut b, s);
            assert_eq!(&*Rd::new(&b).string().unwrap(), s);
        }
        let mut b = Vec::new();
        put_string(&mut b, b"-1");
        assert_eq!(b, [0xC0, 0xFF]);
    }

    #[test]
    fn lzf_literal_and_backref() {
        // "aaaaaaaaaa": literal "a", then a back reference of 9 bytes at distance 1.
        let c = [0x00, b'a', 0xE0, 0x00, 0x00];
        assert_eq!(lzf_decompress(&c, 10).unwrap(), b"aaaaaaaaaa");
        assert!(lzf_decompress(&c, 9).is_err());
        assert!(lzf_decompress(&[0x20, 0x05], 3).is_err());
    }
}
