//! Glob-style pattern matching with redis `stringmatchlen` semantics (`util.c`, 7.0), used by
//! KEYS, SCAN MATCH and CONFIG GET.
//!
//! `*` any run, `?` one byte, `[abc]` set, `[^a]` negated set, `[a-z]` range (ends may be
//! given in either order), `\x` literal `x`; `nocase` folds ASCII case. Bytes compare as C
//! `char` (signed), as Redis does on x86, which only matters for ranges over bytes ≥ 0x80.
//! Like Redis, recursion is cut at depth 1000 and a failed `*` tail stops the search for longer
//! matches of earlier `*`s, so a pattern costs at most O(pattern × string) steps.

/// Does `string` match `pattern`?
pub fn matches(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, nocase, &mut skip_longer, 0)
}

fn lower(c: u8) -> i32 {
    // C `tolower` on a (signed) char value: only ASCII letters change.
    c.to_ascii_lowercase() as i8 as i32
}

fn match_impl(pat: &[u8], s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: u32) -> bool {
    if nesting > 1000 {
        return false;
    }
    let at = |i: usize| pat.get(i).copied().unwrap_or(0);
    let (mut p, mut j) = (0usize, 0usize);
    while p < pat.len() && j < s.len() {
        match pat[p] {
            b'*' => {
                while p + 1 < pat.len() && pat[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pat.len() {
                    return true;
                }
                while j < s.len() {
                    if match_impl(&pat[p + 1..], &s[j..], nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    j += 1;
                }
                *skip_longer = true;
                return false;
            }
            b'?' => j += 1,
            b'[' => {
                p += 1;
                let not = at(p) == b'^';
                if not {
                    p += 1;
                }
                let c = s[j];
                let mut matched = false;
                loop {
                    if at(p) == b'\\' && pat.len() - p >= 2 {
                        p += 1;
                        if pat[p] == c {
                            matched = true;
                        }
                    } else if at(p) == b']' && p < pat.len() {
                        break;
                    } else if p >= pat.len() {
                        // Unterminated set: step back so the outer advance ends the pattern.
                        p -= 1;
                        break;
                    } else if pat.len() - p >= 3 && pat[p + 1] == b'-' {
                        let (mut start, mut end) = (pat[p] as i8 as i32, pat[p + 2] as i8 as i32);
                        let mut cc = c as i8 as i32;
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        if nocase {
                            start = lower(start as u8);
                            end = lower(end as u8);
                            cc = lower(c);
                        }
                        p += 2;
                        if cc >= start && cc <= end {
                            matched = true;
                        }
                    } else if nocase {
                        if lower(pat[p]) == lower(c) {
                            matched = true;
                        }
                    } else if pat[p] == c {
                        matched = true;
                    }
                    p += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                j += 1;
            }
            first => {
                let mut lit = first;
                if first == b'\\' && pat.len() - p >= 2 {
                    p += 1;
                    lit = pat[p];
                }
                let same = if nocase {
                    lower(lit) == lower(s[j])
                } else {
                    lit == s[j]
                };
                if !same {
                    return false;
                }
                j += 1;
            }
        }
        p += 1;
        if j == s.len() {
            while p < pat.len() && pat[p] == b'*' {
                p += 1;
            }
            break;
        }
    }
    p >= pat.len() && j == s.len()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn table() {
        let cases: &[(&str, &str, bool, bool)] = &[
            // Redis quirk: the loop never runs for an empty string, so `*` does not match ""
            // (KEYS * and SCAN without MATCH bypass the matcher and do list the empty key).
            ("*", "", false, false),
            ("**", "", false, false),
            ("*", "anything", false, true),
            ("", "", false, true),
            ("", "a", false, false),
            ("a*", "abc", false, true),
            ("a*", "bac", false, false),
            ("*c", "abc", false, true),
            ("a*c", "ac", false, true),
            ("a*c", "abbbc", false, true),
            ("a*c", "abbbd", false, false),
            ("h?llo", "hello", false, true),
            ("h?llo", "hllo", false, false),
            ("h[ae]llo", "hallo", false, true),
            ("h[ae]llo", "hillo", false, false),
            ("h[^e]llo", "hallo", false, true),
            ("h[^e]llo", "hello", false, false),
            ("h[a-b]llo", "hbllo", false, true),
            ("h[b-a]llo", "hallo", false, true),
            ("h[a-b]llo", "hcllo", false, false),
            ("h\\*llo", "h*llo", false, true),
            ("h\\*llo", "hello", false, false),
            ("[\\]]", "]", false, true),
            ("HELLO", "hello", true, true),
            ("HELLO", "hello", false, false),
            ("h[A-Z]llo", "hello", true, true),
            ("[abc", "a", false, true),
            ("[abc", "d", false, false),
            ("a**", "a", false, true),
            ("*a*b*c*", "xaybzc", false, true),
            ("*a*b*c*", "xaybz", false, false),
            ("user:*", "user:1000", false, true),
            ("\\", "\\", false, true),
            ("a\\", "a\\", false, true),
            ("?", "", false, false),
            ("[]", "a", false, false),
        ];
        for &(p, s, nocase, want) in cases {
            assert_eq!(
                matches(p.as_bytes(), s.as_bytes(), nocase),
                want,
                "{p:?} vs {s:?}"
            );
        }
    }

    #[test]
    fn abusive_pattern_is_fast() {
        let pat = "a*".repeat(60) + "b";
        let s = "a".repeat(500);
        let t = std::time::Instant::now();
        assert!(!matches(pat.as_bytes(), s.as_bytes(), false));
        assert!(t.elapsed().as_secs() < 2);
    }
}
