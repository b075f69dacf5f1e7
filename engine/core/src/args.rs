//! Argument parsing with Redis's exact acceptance rules.
//!
//! - [`parse_i64`] is redis `string2ll` (`util.c`): optional `-`, no `+`, no leading zeros,
//!   no spaces, at most 20 characters, no overflow. `-0` is rejected, `0` accepted.
//! - [`parse_u64_cursor`] is the SCAN cursor rule (`strtoul` of the whole string).
//! - [`is`]: case-insensitive option keyword matching (`strcasecmp`).

use crate::error::CmdError;

/// Redis `string2ll`: the one strict decimal parser, `resp::parse_i64` (no sign but `-`, no
/// leading zeros, no spaces, fits an `i64`).
pub use resp::parse_i64;

/// Integer argument or `ERR value is not an integer or out of range`.
pub fn int_arg(s: &[u8]) -> Result<i64, CmdError> {
    parse_i64(s).ok_or(CmdError::NotInteger)
}

/// SCAN cursor (redis `parseScanCursorOrReply`): `strtoul(…, 10)` over the whole string, no
/// leading space, no overflow; a sign and leading zeros are accepted (`-1` wraps to 2^64-1).
pub fn parse_u64_cursor(s: &[u8]) -> Result<u64, CmdError> {
    let mut i = 0;
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        // `strtoul("")` parses nothing; redis checks `eptr[0] != '\0'`, so "" is cursor 0.
        if s.is_empty() {
            return Ok(0);
        }
        return Err(CmdError::InvalidCursor);
    }
    let mut v: u64 = 0;
    for &c in digits {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or(CmdError::InvalidCursor)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Case-insensitive keyword comparison (redis `strcasecmp` on option names).
#[inline]
pub fn is(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// `[start, end]` indexes clamped as Redis clamps LRANGE/ZRANGE ranks (`addListRangeReply`,
/// `zrangeGenericCommand`): negative counts from the end, both inclusive; `None` when the range
/// is empty.
pub fn clamp_index_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_rules() {
        assert_eq!(parse_u64_cursor(b"0"), Ok(0));
        assert_eq!(parse_u64_cursor(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse_u64_cursor(b"18446744073709551616"),
            Err(CmdError::InvalidCursor)
        );
        assert_eq!(parse_u64_cursor(b"abc"), Err(CmdError::InvalidCursor));
        assert_eq!(parse_u64_cursor(b"12x"), Err(CmdError::InvalidCursor));
        assert_eq!(parse_u64_cursor(b" 0"), Err(CmdError::InvalidCursor));
        assert_eq!(parse_u64_cursor(b""), Ok(0));
        assert_eq!(parse_u64_cursor(b"-1"), Ok(u64::MAX));
    }
}
