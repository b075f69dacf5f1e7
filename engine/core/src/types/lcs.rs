//! LCS: the longest common subsequence of two strings (redis 7.0 `t_string.c` `lcsCommand`).
//!
//! The classic dynamic-programming table of `(len(a)+1) * (len(b)+1)` u32 lengths, then a
//! walk back from the end that takes the match when the bytes are equal and otherwise moves
//! `i` when `LCS(i-1, j) > LCS(i, j-1)`, else `j`. That tie-break decides which of several
//! equally long subsequences is answered, so it is Redis's exactly; so are the matched ranges
//! IDX reports (last match first, each `[[a_start, a_end], [b_start, b_end]]`).
//!
//! The table is transient memory bounded like Redis: more than `proto-max-bulk-len` bytes of
//! it is refused before anything is allocated.

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::types::Value;

/// What LCS answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The subsequence itself.
    String,
    /// `LEN`: its length.
    Len,
    /// `IDX`: the matched ranges and the length.
    Idx,
}

/// One matched range: `(a_start, a_end, b_start, b_end)`, inclusive.
type Range = (u32, u32, u32, u32);

/// The LCS of `a` and `b` and the contiguous matches along it (walking back from the end),
/// those of at least `min_len` bytes (0 = all).
fn lcs(a: &[u8], b: &[u8], min_len: u64, ranges: bool) -> (Vec<u8>, Vec<Range>) {
    let (alen, blen) = (a.len(), b.len());
    let w = blen + 1;
    let mut t = vec![0u32; (alen + 1) * w];
    for i in 1..=alen {
        for j in 1..=blen {
            t[i * w + j] = if a[i - 1] == b[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let mut idx = t[alen * w + blen] as usize;
    let mut result = vec![0u8; idx];
    let mut out = Vec::new();
    // The range being extended backwards, if any.
    let mut cur: Option<Range> = None;
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let emit;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            let (i0, j0) = ((i - 1) as u32, (j - 1) as u32);
            cur = Some(match cur {
                None => (i0, i0, j0, j0),
                // A match right after a match is always contiguous.
                Some((s, e, bs, be)) => {
                    debug_assert!(s == i as u32 && bs == j as u32);
                    (s - 1, e, bs - 1, be)
                }
            });
            let (s, _, bs, _) = cur.expect("just set");
            emit = s == 0 || bs == 0;
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = cur.is_some();
        }
        if emit && let Some(r) = cur.take() {
            let len = u64::from(r.1 - r.0 + 1);
            if ranges && (min_len == 0 || len >= min_len) {
                out.push(r);
            }
        }
    }
    (result, out)
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`.
pub fn lcs_cmd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut vals: [Vec<u8>; 2] = Default::default();
    let mut wrong = false;
    for (n, key) in argv[1..3].iter().enumerate() {
        if let Some(i) = e.ks.lookup_read(key, c.now_ms) {
            match e.ks.value(i) {
                Value::Str(s) => vals[n] = s.bytes(&mut itoa::Buffer::new()).to_vec(),
                _ => wrong = true,
            }
        }
    }
    if wrong {
        return Err(CmdError::Static(
            "ERR The specified keys must contain string values",
        ));
    }
    let (mut len, mut idx, mut withlen, mut min_len) = (false, false, false, 0i64);
    let mut j = 3;
    while j < argv.len() {
        let opt = argv[j];
        if args::is(opt, "idx") {
            idx = true;
        } else if args::is(opt, "len") {
            len = true;
        } else if args::is(opt, "withmatchlen") {
            withlen = true;
        } else if args::is(opt, "minmatchlen") && j + 1 < argv.len() {
            min_len = int_arg(argv[j + 1])?.max(0);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if len && idx {
        return Err(CmdError::Static(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    let want = if idx {
        Want::Idx
    } else if len {
        Want::Len
    } else {
        Want::String
    };
    let [a, b] = &vals;
    if a.len() as u64 >= u64::from(u32::MAX - 1) || b.len() as u64 >= u64::from(u32::MAX - 1) {
        return Err(CmdError::Static("ERR String too long for LCS"));
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells.saturating_mul(4) > e.config.proto_max_bulk_len {
        return Err(CmdError::Static(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let (result, ranges) = lcs(a, b, min_len as u64, want == Want::Idx);
    let mut w = c.w();
    match want {
        Want::String => w.bulk(&result),
        Want::Len => w.integer(result.len() as i64),
        Want::Idx => {
            w.map(2);
            w.bulk(b"matches");
            w.array(ranges.len());
            for (s, e, bs, be) in ranges {
                w.array(2 + usize::from(withlen));
                w.array(2);
                w.integer(i64::from(s));
                w.integer(i64::from(e));
                w.array(2);
                w.integer(i64::from(bs));
                w.integer(i64::from(be));
                if withlen {
                    w.integer(i64::from(e - s + 1));
                }
            }
            w.bulk(b"len");
            w.integer(result.len() as i64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_doc_example() {
        let (s, r) = lcs(b"ohmytext", b"mynewtext", 0, true);
        assert_eq!(s, b"mytext");
        assert_eq!(r, vec![(4, 7, 5, 8), (2, 3, 0, 1)]);
        let (_, r) = lcs(b"ohmytext", b"mynewtext", 4, true);
        assert_eq!(r, vec![(4, 7, 5, 8)]);
        assert_eq!(lcs(b"", b"abc", 0, true), (vec![], vec![]));
    }
}
