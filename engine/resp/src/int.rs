//! The one strict decimal integer parser, Redis's `string2ll` (`util.c`), used for RESP
//! lengths and wherever a role reads an integer the way Redis does.

/// Redis `string2ll`: a strict decimal i64. Optional `-`, no `+`, no leading zeros (`0` itself
/// is fine, `-0` is not), no blanks, at most 20 bytes, no overflow. `None` if `s` is not one.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE is 21: longer strings are refused before looking at them.
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_rules() {
        for (s, v) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-1", Some(-1)),
            ("10", Some(10)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("00000000000000000001", None),
            ("-0", None),
            ("01", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("1\r", None),
            ("-", None),
            ("", None),
            ("1a", None),
            ("1.0", None),
            ("١", None),
        ] {
            assert_eq!(parse_i64(s.as_bytes()), v, "{s:?}");
        }
    }
}
