//! Unit tests of `hash.rs` (the value: encodings, order, byte counts, SCAN; the helpers).

const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;
use super::*;

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The byte count recomputed from scratch, for checking the incremental one.
fn recount(h: &HashValue) -> usize {
    let hdr = |n: usize| if n < 128 { 1 } else { 2 };
    h.iter()
        .map(|(f, v)| match h.is_listpack() {
            true => hdr(f.len()) + f.len() + hdr(v.len()) + v.len(),
            false => f.len() + v.len() + FIELD_OVERHEAD,
        })
        .sum()
}

#[test]
fn set_get_remove_and_bytes() {
    let mut h = HashValue::with_seed(7);
    assert!(h.is_empty());
    assert!(h.set(b"a", b"1", &LIM));
    assert!(h.set(b"b", b"22", &LIM));
    assert!(!h.set(b"a", b"333", &LIM));
    assert_eq!(h.get(b"a"), Some(&b"333"[..]));
    assert_eq!(h.get(b"zz"), None);
    assert_eq!(h.len(), 2);
    assert_eq!(h.mem_size(), recount(&h));
    // A listpack: one length byte per short string.
    assert_eq!(h.mem_size(), (1 + 1) + (1 + 3) + (1 + 1) + (1 + 2));
    assert!(h.remove(b"a"));
    assert!(!h.remove(b"a"));
    assert_eq!(h.mem_size(), (1 + 1) + (1 + 2));
    assert!(h.remove(b"b"));
    assert_eq!(h.mem_size(), 0);
    assert!(h.is_empty());
}

#[test]
fn listpack_keeps_insertion_order_through_deletes() {
    let mut h = HashValue::new();
    for f in ["a", "b", "c", "d", "e"] {
        h.set(f.as_bytes(), b"v", &LIM);
    }
    h.remove(b"b");
    h.set(b"c", b"w", &LIM); // update in place
    h.set(b"f", b"v", &LIM);
    let order: Vec<&[u8]> = h.iter().map(|(f, _)| f).collect();
    assert_eq!(order, [&b"a"[..], b"c", b"d", b"e", b"f"]);
    assert_eq!(h.encoding(), "listpack");
}

#[test]
fn encoding_thresholds_are_sticky() {
    let mut h = HashValue::new();
    for i in 0..LIM.hash_max_listpack_entries as usize {
        h.set(format!("f{i}").as_bytes(), b"v", &LIM);
    }
    assert_eq!(h.encoding(), "listpack");
    h.set(b"one-more", b"v", &LIM);
    assert_eq!(h.encoding(), "hashtable");
    h.remove(b"one-more");
    assert_eq!(h.encoding(), "hashtable", "Redis never converts back");

    let mut h = HashValue::new();
    h.set(b"f", &[b'x'; LIM.hash_max_listpack_value as usize], &LIM);
    assert_eq!(h.encoding(), "listpack");
    h.set(
        b"f",
        &[b'x'; LIM.hash_max_listpack_value as usize + 1],
        &LIM,
    );
    assert_eq!(h.encoding(), "hashtable");
    let mut h = HashValue::new();
    h.set(
        &[b'k'; LIM.hash_max_listpack_value as usize + 1],
        b"v",
        &LIM,
    );
    assert_eq!(h.encoding(), "hashtable");
}

#[test]
fn conversion_keeps_order_contents_and_recounts_bytes() {
    let mut h = HashValue::with_seed(5);
    for i in 0..10 {
        h.set(format!("f{i}").as_bytes(), format!("v{i}").as_bytes(), &LIM);
    }
    h.remove(b"f3");
    let before: Vec<(Vec<u8>, Vec<u8>)> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
    let lp = h.clone();
    h.try_conversion([&[b'x'; 65][..]], &LIM);
    assert_eq!(h.encoding(), "hashtable");
    let after: Vec<(Vec<u8>, Vec<u8>)> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
    assert_eq!(before, after);
    assert_eq!(h, lp, "same contents across encodings");
    assert_eq!(h.mem_size(), recount(&h));
    assert_eq!(h.get(b"f7"), Some(&b"v7"[..]));
    assert_eq!(lp.get_index(3), Some((&b"f4"[..], &b"v4"[..])));
}

#[test]
fn listpack_matches_an_ordered_model_under_random_churn() {
    // The reply order Redis gives: append new fields, update in place, close gaps on delete.
    let mut h = HashValue::with_seed(2);
    let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut r = rng(11);
    for _ in 0..5000 {
        let f = format!("f{}", r() % 60).into_bytes();
        let v = vec![b'v'; (r() % 200) as usize % 65]; // ≤ 64: stays a listpack
        let at = model.iter().position(|(mf, _)| *mf == f);
        if r().is_multiple_of(3) {
            assert_eq!(h.remove(&f), at.is_some());
            if let Some(i) = at {
                model.remove(i);
            }
        } else {
            assert_eq!(h.set(&f, &v, &LIM), at.is_none());
            match at {
                Some(i) => model[i].1 = v,
                None => model.push((f, v)),
            }
        }
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(h.len(), model.len());
        assert!(
            h.iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .eq(model.iter().cloned())
        );
        assert_eq!(h.mem_size(), recount(&h));
    }
}

#[test]
fn bytes_stay_exact_under_random_churn() {
    let mut h = HashValue::with_seed(1);
    let mut r = rng(3);
    for _ in 0..5000 {
        let f = format!("f{}", r() % 300);
        let v = vec![b'v'; (r() % 100) as usize];
        if r().is_multiple_of(3) {
            h.remove(f.as_bytes());
        } else {
            h.set(f.as_bytes(), &v, &LIM);
        }
        assert_eq!(h.mem_size(), recount(&h));
    }
}

#[test]
fn listpack_scan_returns_everything_at_once() {
    let mut h = HashValue::new();
    for i in 0..50 {
        h.set(format!("f{i}").as_bytes(), b"v", &LIM);
    }
    let mut n = 0;
    assert_eq!(h.scan(0, 1, |_, _| n += 1), 0);
    assert_eq!(n, 50);
    // Any cursor: a listpack ignores it, like Redis.
    n = 0;
    assert_eq!(h.scan(12345, 1, |_, _| n += 1), 0);
    assert_eq!(n, 50);
}

#[test]
fn hashtable_scan_sees_every_stable_field_despite_churn() {
    for seed in 0..10u64 {
        let mut r = rng(seed);
        let mut h = HashValue::with_seed(seed);
        for i in 0..500 {
            h.set(format!("stable{i}").as_bytes(), b"v", &LIM);
        }
        for i in 0..200 {
            h.set(format!("churn{i}").as_bytes(), b"v", &LIM);
        }
        assert_eq!(h.encoding(), "hashtable");
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut steps = 0;
        loop {
            cursor = h.scan(cursor, 7, |f, _| {
                seen.insert(f.to_vec());
            });
            // Churn between calls: delete and add non-stable fields.
            let victim = format!("churn{}", r() % 200);
            h.remove(victim.as_bytes());
            h.set(format!("new{}", r() % 1000).as_bytes(), b"v", &LIM);
            steps += 1;
            assert!(steps < 10_000, "scan must end");
            if cursor == 0 {
                break;
            }
        }
        for i in 0..500 {
            assert!(
                seen.contains(format!("stable{i}").as_bytes()),
                "seed {seed}: stable{i} missed"
            );
        }
    }
}

#[test]
fn sample_distinct_is_distinct_and_in_range() {
    let mut r = rng(9);
    for (len, count) in [(10, 1), (10, 9), (10, 3), (1000, 5), (1000, 400), (2, 1)] {
        let s = sample_distinct(len, count, &mut r);
        assert_eq!(s.len(), count);
        let set: std::collections::HashSet<_> = s.iter().collect();
        assert_eq!(set.len(), count, "distinct");
        assert!(s.iter().all(|&p| p < len));
    }
    // Every position gets picked sometimes (uniformity, coarsely).
    let mut hits = [0u32; 10];
    for _ in 0..2000 {
        for p in sample_distinct(10, 2, &mut r) {
            hits[p] += 1;
        }
    }
    assert!(hits.iter().all(|&h| h > 250), "{hits:?}");
}

#[test]
fn scan_opts_grammar() {
    assert_eq!(parse_scan_opts(&[]), Ok((10, None)));
    assert_eq!(
        parse_scan_opts(&[b"COUNT", b"5", b"match", b"a*"]),
        Ok((5, Some(&b"a*"[..])))
    );
    assert_eq!(parse_scan_opts(&[b"MATCH", b"*"]), Ok((10, None)));
    assert_eq!(parse_scan_opts(&[b"COUNT", b"0"]), Err(CmdError::Syntax));
    assert_eq!(parse_scan_opts(&[b"COUNT"]), Err(CmdError::Syntax));
    assert_eq!(parse_scan_opts(&[b"TYPE", b"hash"]), Err(CmdError::Syntax));
    assert_eq!(
        parse_scan_opts(&[b"COUNT", b"x"]),
        Err(CmdError::NotInteger)
    );
}

#[test]
fn scan_range_steps_down() {
    assert_eq!(scan_range(10, 0, 3), (7, 7..10));
    assert_eq!(scan_range(10, 7, 3), (4, 4..7));
    assert_eq!(scan_range(10, 2, 3), (0, 0..2));
    assert_eq!(scan_range(10, 99, 3), (7, 7..10));
    assert_eq!(scan_range(0, 0, 3), (0, 0..0));
}

#[test]
fn the_value_itself_stays_small() {
    // Boxed per key: the table is boxed again so a listpack hash pays only its buffer's header.
    assert!(std::mem::size_of::<HashValue>() <= 40);
}
