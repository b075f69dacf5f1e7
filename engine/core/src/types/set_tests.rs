//! Unit tests of `types/set.rs` (kept apart so the type's file stays one room).

const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;
use super::*;

fn set_of(members: &[&str]) -> SetValue {
    let mut s = SetValue::with_seed(5);
    for m in members {
        s.insert(m.as_bytes(), &LIM);
    }
    s
}

fn strs(v: Vec<Member>) -> Vec<String> {
    v.into_iter()
        .map(|m| String::from_utf8_lossy(&m).into_owned())
        .collect()
}

fn recount(s: &SetValue) -> usize {
    s.iter().map(|m| m.len() + MEMBER_OVERHEAD).sum()
}

#[test]
fn insert_remove_contains_and_bytes() {
    let mut s = SetValue::new();
    assert!(s.insert(b"a", &LIM));
    assert!(!s.insert(b"a", &LIM));
    assert!(s.insert(b"bb", &LIM));
    assert!(s.contains(b"a") && !s.contains(b"c"));
    assert_eq!(s.len(), 2);
    assert_eq!(s.mem_size(), 3 + 2 * MEMBER_OVERHEAD);
    assert!(s.remove(b"a"));
    assert!(!s.remove(b"a"));
    assert_eq!(s.mem_size(), recount(&s));
    assert_eq!(s.swap_remove_index(0).as_deref(), Some(&b"bb"[..]));
    assert!(s.is_empty());
    assert_eq!(s.mem_size(), 0);
}

#[test]
fn intset_rules() {
    let s = set_of(&["3", "-1", "10", "2"]);
    assert_eq!(s.encoding(), "intset");
    assert_eq!(strs(s.ordered()), ["-1", "2", "3", "10"]);
    // Not string2ll form: hashtable, and it stays one.
    for odd in ["01", "-0", "+1", " 1", "1.0", "a", "9223372036854775808"] {
        let mut s = set_of(&["1"]);
        s.insert(odd.as_bytes(), &LIM);
        assert_eq!(s.encoding(), "hashtable", "{odd}");
        s.remove(odd.as_bytes());
        assert_eq!(s.encoding(), "hashtable", "sticky after removing {odd}");
    }
    let mut s = SetValue::new();
    for i in 0..LIM.intset_entries() {
        s.insert(i.to_string().as_bytes(), &LIM);
    }
    assert_eq!(s.encoding(), "intset");
    s.insert(b"0", &LIM); // already there: no conversion
    assert_eq!(s.encoding(), "intset");
    s.insert(b"100000", &LIM);
    assert_eq!(s.encoding(), "hashtable");
}

#[test]
fn bytes_stay_exact_under_random_churn() {
    let mut s = SetValue::with_seed(2);
    let mut x: u64 = 1;
    for _ in 0..5000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let m = format!("m{}", (x >> 33) % 400);
        match (x >> 20) % 3 {
            0 => {
                s.remove(m.as_bytes());
            }
            1 if !s.is_empty() => {
                s.swap_remove_index(((x >> 40) as usize) % s.len());
            }
            _ => {
                s.insert(m.as_bytes(), &LIM);
            }
        }
        assert_eq!(s.mem_size(), recount(&s));
    }
}

#[test]
fn set_operations() {
    let a = set_of(&["1", "2", "3", "x"]);
    let b = set_of(&["2", "3", "4"]);
    let c = set_of(&["3", "x"]);
    let inter = compute(SetOp::Inter, &[Some(&a), Some(&b)], 0, &LIM);
    assert_eq!(strs(inter.ordered()), ["2", "3"]);
    assert_eq!(inter.encoding(), "intset");
    assert!(compute(SetOp::Inter, &[Some(&a), None], 0, &LIM).is_empty());
    let mut u = strs(compute(SetOp::Union, &[Some(&a), None, Some(&b)], 0, &LIM).ordered());
    u.sort();
    assert_eq!(u, ["1", "2", "3", "4", "x"]);
    let mut d = strs(compute(SetOp::Diff, &[Some(&a), Some(&b), Some(&c)], 0, &LIM).ordered());
    d.sort();
    assert_eq!(d, ["1"]);
    assert!(compute(SetOp::Diff, &[None, Some(&a)], 0, &LIM).is_empty());
    assert!(compute(SetOp::Diff, &[Some(&a), Some(&a)], 0, &LIM).is_empty());
    assert_eq!(inter_card(&[&a, &b, &c], 0), 1);
    assert_eq!(inter_card(&[&a, &b], 0), 2);
    assert_eq!(inter_card(&[&a, &b], 1), 1);
    assert_eq!(inter_card(&[&a], 0), 4);
}

#[test]
fn intset_scan_is_one_sorted_call_and_hashtable_scan_covers_all() {
    let s = set_of(&["5", "1", "3"]);
    let mut got = Vec::new();
    assert_eq!(s.scan(77, 1, |m| got.push(m.to_vec())), 0);
    assert_eq!(got, [b"1".to_vec(), b"3".to_vec(), b"5".to_vec()]);

    let mut s = SetValue::with_seed(3);
    for i in 0..300 {
        s.insert(format!("m{i}").as_bytes(), &LIM);
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = 0;
    for step in 0.. {
        assert!(step < 1000, "scan must end");
        cursor = s.scan(cursor, 10, |m| {
            seen.insert(m.to_vec());
        });
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(seen.len(), 300);
}
