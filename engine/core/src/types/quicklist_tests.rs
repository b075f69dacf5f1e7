//! Tests of the quicklist: the list API on small cases, the entry coding, and a seeded model
//! test (random operations against a `VecDeque<Vec<u8>>`) under several node limits.

use std::collections::VecDeque;

use super::*;

fn list(items: &[&str]) -> ListValue {
    items.iter().map(|s| s.as_bytes()).collect()
}

fn items(l: &ListValue) -> Vec<String> {
    l.iter()
        .map(|x| String::from_utf8_lossy(x).into_owned())
        .collect()
}

#[test]
fn entries_walk_both_ways() {
    for n in [0, 1, 127, 128, 129, 16_383, 16_384, 70_000] {
        let e: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let size = entry_size(n);
        let mut buf = vec![0xAA; size + 2];
        write_entry(&mut buf[1..=size], &e);
        let (a, b, next) = entry_at(&buf, 1);
        assert_eq!((&buf[a..b], next), (&e[..], size + 1), "n={n}");
        assert_eq!(entry_before(&buf, size + 1), 1, "n={n}");
    }
    assert_eq!(entry_size(8), 10, "as a listpack: 1 + 8 + 1");
}

#[test]
fn push_pop_and_accounting() {
    let mut l = ListValue::new();
    l.push(b"b", End::Head);
    l.push(b"a", End::Head);
    l.push(b"cc", End::Tail);
    assert_eq!(items(&l), ["a", "b", "cc"]);
    assert_eq!(l.mem_size(), 3 + 3 + 4 + NODE_OVERHEAD);
    assert_eq!(l.pop(End::Tail).as_deref(), Some(&b"cc"[..]));
    assert_eq!(l.pop(End::Head).as_deref(), Some(&b"a"[..]));
    assert_eq!(l.pop(End::Head).as_deref(), Some(&b"b"[..]));
    assert_eq!(l.pop(End::Head), None);
    assert_eq!(l.mem_size(), 0);
    assert_eq!(l.encoding(), "quicklist");
    l.check();
}

#[test]
fn indexes_and_ranges() {
    let mut l = list(&["a", "b", "c", "d"]);
    assert_eq!(l.get(0), Some(&b"a"[..]));
    assert_eq!(l.get(-1), Some(&b"d"[..]));
    assert_eq!(l.get(-4), Some(&b"a"[..]));
    assert_eq!(l.get(-5), None);
    assert_eq!(l.get(4), None);
    assert_eq!(l.get(i64::MIN), None);
    assert!(l.set(-2, b"CCC"));
    assert!(!l.set(9, b"x"));
    assert_eq!(items(&l), ["a", "b", "CCC", "d"]);
    l.check();
    assert_eq!(l.clamp_range(0, -1), Some((0, 3)));
    assert_eq!(l.clamp_range(-100, 1), Some((0, 1)));
    assert_eq!(l.clamp_range(2, 100), Some((2, 3)));
    assert_eq!(l.clamp_range(3, 2), None);
    assert_eq!(l.clamp_range(4, 10), None);
    assert_eq!(l.clamp_range(i64::MIN, i64::MAX), Some((0, 3)));
    assert_eq!(l.clamp_range(-1, -2), None);
    assert!(l.range(1, 2).eq([&b"b"[..], b"CCC"]));
    assert!(l.range(1, 2).rev().eq([&b"CCC"[..], b"b"]));
}

#[test]
fn insert_remove_trim() {
    let mut l = list(&["a", "x", "b", "x", "c", "x"]);
    assert_eq!(l.insert(b"b", b"B", false), Some(7));
    assert_eq!(l.insert(b"c", b"C", true), Some(8));
    assert_eq!(l.insert(b"zz", b"C", true), None);
    assert_eq!(items(&l), ["a", "x", "B", "b", "x", "c", "C", "x"]);
    assert_eq!(l.remove(-2, b"x"), 2);
    assert_eq!(items(&l), ["a", "x", "B", "b", "c", "C"]);
    let mut m = list(&["x", "a", "x", "x"]);
    assert_eq!(m.remove(2, b"x"), 2);
    assert_eq!(items(&m), ["a", "x"]);
    let mut m = list(&["x", "a", "x", "x"]);
    assert_eq!(m.remove(0, b"x"), 3);
    assert_eq!(items(&m), ["a"]);
    assert_eq!(m.remove(i64::MIN, b"a"), 1);
    assert!(m.is_empty());
    assert_eq!(m.mem_size(), 0);
    l.trim(1, 2);
    assert_eq!(items(&l), ["x", "B", "b"]);
    l.check();
    l.trim(10, 10);
    assert!(l.is_empty());
    assert_eq!(l.mem_size(), 0);
}

#[test]
fn nodes_follow_the_fill() {
    // 8-byte elements: 10-byte entries, 819 to an 8 KB node.
    let mut l = ListValue::new();
    for i in 0..10_000 {
        l.push(format!("el{i:06}").as_bytes(), End::Tail);
    }
    assert_eq!(l.node_count(), 10_000usize.div_ceil(819));
    assert_eq!(l.mem_size(), 10_000 * 10 + l.node_count() * NODE_OVERHEAD);
    let mut l = ListValue::with_fill(3);
    for i in 0..10 {
        l.push(format!("{i}").as_bytes(), End::Head);
    }
    assert_eq!(l.node_count(), 4);
    // A large element gets a node of its own; 0 = one entry a node.
    let mut l = ListValue::new();
    l.push(b"a", End::Tail);
    l.push(&[7; 9000], End::Tail);
    l.push(b"b", End::Tail);
    assert_eq!(l.node_count(), 3);
    let mut l = ListValue::with_fill(0);
    (0..5).for_each(|_| l.push(b"x", End::Head));
    assert_eq!(l.node_count(), 5);
    l.check();
    // Equality ignores how the nodes are cut.
    let a: ListValue = [&b"1"[..], b"2", b"3"].into_iter().collect();
    let mut b = ListValue::with_fill(1);
    [&b"1"[..], b"2", b"3"]
        .iter()
        .for_each(|x| b.push(x, End::Tail));
    assert_eq!(a, b);
}

/// xorshift64, seeded: the same sequence every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// An element: mostly one of a few short values (so LREM/LINSERT/LPOS find matches), some
/// empty, some of a few KB, a few larger than any 8 KB node.
fn element(r: &mut Rng) -> Vec<u8> {
    match r.below(100) {
        0..=4 => Vec::new(),
        5..=9 => vec![b'k'; 100 + r.below(3000) as usize],
        10 => vec![b'h'; 8_200 + r.below(2_000) as usize],
        _ => vec![b'a' + r.below(4) as u8; 1 + r.below(3) as usize],
    }
}

/// The model's LREM.
fn model_remove(m: &mut VecDeque<Vec<u8>>, count: i64, v: &[u8]) -> usize {
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let idx: Vec<usize> = if count >= 0 {
        (0..m.len()).filter(|&i| m[i] == v).take(limit).collect()
    } else {
        (0..m.len())
            .rev()
            .filter(|&i| m[i] == v)
            .take(limit)
            .collect()
    };
    let mut idx = idx;
    idx.sort_unstable();
    for &i in idx.iter().rev() {
        m.remove(i);
    }
    idx.len()
}

fn run_model(fill: i64, seed: u64, steps: usize) {
    let mut r = Rng(seed);
    let mut l = ListValue::with_fill(fill);
    let mut m: VecDeque<Vec<u8>> = VecDeque::new();
    let mut most_nodes = 0;
    for step in 0..steps {
        let v = element(&mut r);
        let len = m.len() as i64;
        let index = r.below(2 * len as u64 + 4) as i64 - len - 2;
        // Grow for the first half, shrink for the second (pushes are 4 of 18 choices, else 0).
        let op = r.below(18);
        let op = match op {
            14..=17 if step < steps / 2 => op - 14,
            14..=17 => 4 + op % 2,
            _ => op,
        };
        match op {
            0 | 1 => {
                l.push(&v, End::Head);
                m.push_front(v);
            }
            2 | 3 => {
                l.push(&v, End::Tail);
                m.push_back(v);
            }
            4 => assert_eq!(l.pop(End::Head), m.pop_front()),
            5 => assert_eq!(l.pop(End::Tail), m.pop_back()),
            6 => {
                let want = if index < 0 { len + index } else { index };
                let want = usize::try_from(want).ok().and_then(|i| m.get(i));
                assert_eq!(l.get(index), want.map(|x| &x[..]));
            }
            7 => {
                let i = if index < 0 { len + index } else { index };
                let ok = (0..len).contains(&i);
                assert_eq!(l.set(index, &v), ok);
                if ok {
                    m[i as usize] = v;
                }
            }
            8 => {
                let after = r.below(2) == 1;
                let pivot = element(&mut r);
                let got = l.insert(&pivot, &v, after);
                match m.iter().position(|x| *x == pivot) {
                    Some(p) => {
                        m.insert(p + usize::from(after), v);
                        assert_eq!(got, Some(m.len()));
                    }
                    None => assert_eq!(got, None),
                }
            }
            9 => {
                let count = r.below(7) as i64 - 3;
                assert_eq!(l.remove(count, &v), model_remove(&mut m, count, &v));
            }
            10 => {
                let (a, b) = (r.below(4) as usize, r.below(4) as usize);
                l.trim(a, b);
                let b = b.min(m.len());
                m.truncate(m.len() - b);
                let a = a.min(m.len());
                m.drain(..a);
            }
            11 => {
                let end = r.below(2 * len as u64 + 4) as i64 - len - 2;
                let got = l.clamp_range(index, end);
                match got {
                    Some((from, to)) => {
                        let want = m.range(from..=to).map(|x| &x[..]);
                        assert!(l.range(from, to).eq(want.clone()), "step {step}");
                        assert!(l.range(from, to).rev().eq(want.rev()), "step {step}");
                        assert_eq!(l.range(from, to).len(), to - from + 1);
                    }
                    None => {
                        let s = if index < 0 {
                            (len + index).max(0)
                        } else {
                            index
                        };
                        let e = if end < 0 { len + end } else { end };
                        assert!(s > e || s >= len);
                    }
                }
            }
            12 => {
                // LPOS: the first match from either end, as list.rs walks it.
                let head = l.iter().position(|x| x == v);
                assert_eq!(head, m.iter().position(|x| *x == v));
                let tail = l.iter().rev().position(|x| x == v);
                assert_eq!(tail, m.iter().rev().position(|x| *x == v));
            }
            _ => {
                // Mixed walk from both ends meeting in the middle.
                let mut it = l.iter();
                let mut front = 0;
                let mut back = m.len();
                loop {
                    let x = if r.below(2) == 0 {
                        let x = it.next();
                        if x.is_some() {
                            assert_eq!(x, Some(&m[front][..]));
                            front += 1;
                        }
                        x
                    } else {
                        let x = it.next_back();
                        if x.is_some() {
                            back -= 1;
                            assert_eq!(x, Some(&m[back][..]));
                        }
                        x
                    };
                    if x.is_none() {
                        break;
                    }
                }
                assert_eq!(front, back);
            }
        }
        assert_eq!(l.len(), m.len(), "fill {fill} step {step}");
        l.check();
        let nodes_bytes = l.mem_size() - l.node_count() * NODE_OVERHEAD;
        assert_eq!(nodes_bytes, l.bytes);
        most_nodes = most_nodes.max(l.node_count());
    }
    // Several nodes even with 64 KB ones (the large elements fill them quickly).
    assert!(most_nodes >= 4, "fill {fill}: at most {most_nodes} nodes");
    assert!(l.iter().eq(m.iter().map(|x| &x[..])), "fill {fill}");
}

#[test]
fn model_small_counts() {
    for fill in [1, 2, 3] {
        run_model(fill, 0x2545_f491_4f6c_dd1d ^ fill as u64, 6_000);
    }
}

#[test]
fn model_byte_limits_and_default() {
    for fill in [0, -1, -2, -5, 128] {
        run_model(fill, 0x9e37_79b9_7f4a_7c15 ^ fill as u64, 30_000);
    }
}

/// Long runs of pushes at one end and pops at the other (a queue) and LTRIM caps keep every
/// node within its limit and the dead room bounded.
#[test]
fn queue_and_capped_list() {
    let mut l = ListValue::new();
    for i in 0..50_000u32 {
        l.push(&i.to_be_bytes(), End::Tail);
        if i % 3 != 0 {
            assert!(l.pop(End::Head).is_some());
        }
    }
    l.check();
    let mut c = ListValue::new();
    for i in 0..20_000u32 {
        c.push(&i.to_be_bytes(), End::Head);
        c.trim(0, c.len().saturating_sub(100));
    }
    assert_eq!(c.len(), 100);
    assert_eq!(c.get(0), Some(&19_999u32.to_be_bytes()[..]));
    c.check();
}
