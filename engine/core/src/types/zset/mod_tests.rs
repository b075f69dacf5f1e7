//! Unit tests of `types/zset/mod.rs` (kept apart so the type's file stays one room).

const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;
use super::*;

#[test]
fn add_remove_rank_and_encoding() {
    let mut z = ZSetValue::new(9);
    let f = AddFlags::default();
    for (i, m) in ["c", "a", "b", "d"].iter().enumerate() {
        assert_eq!(
            z.add(m.as_bytes(), i as f64, f, &LIM),
            AddOutcome::Added(i as f64)
        );
    }
    assert_eq!(z.add(b"a", 1.0, f, &LIM), AddOutcome::Same(1.0));
    assert_eq!(z.add(b"a", 5.0, f, &LIM), AddOutcome::Updated(5.0));
    assert_eq!(
        z.add(b"a", 1.0, AddFlags { gt: true, ..f }, &LIM),
        AddOutcome::Nop
    );
    assert_eq!(
        z.add(b"a", f64::NEG_INFINITY, AddFlags { incr: true, ..f }, &LIM),
        AddOutcome::Updated(f64::NEG_INFINITY)
    );
    assert_eq!(
        z.plan_add(b"a", f64::INFINITY, AddFlags { incr: true, ..f }),
        AddOutcome::Nan
    );
    let order: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
    assert_eq!(order, [&b"a"[..], b"c", b"b", b"d"]);
    assert_eq!(z.rank(b"b", false), Some((2, 2.0)));
    assert_eq!(z.rank(b"b", true), Some((1, 2.0)));
    assert_eq!(z.remove(b"c"), Some(0.0));
    assert_eq!(z.remove(b"c"), None);
    assert_eq!(
        z.pop(true).map(|(m, s)| (m.to_vec(), s)),
        Some((b"d".to_vec(), 3.0))
    );
    z.check();
    assert_eq!(z.encoding(), "listpack");
    z.add(&[b'x'; 65], 1.0, f, &LIM);
    assert_eq!(z.encoding(), "skiplist");
    z.remove(&[b'x'; 65]);
    assert_eq!(z.encoding(), "skiplist", "conversion is for good");
    z.check();
}

#[test]
fn insert_refuses_nan_and_updates_duplicates() {
    let mut z = ZSetValue::new(4);
    assert!(!z.insert(b"a", f64::NAN, &LIM));
    assert!(z.is_empty());
    assert!(z.insert(b"a", 1.0, &LIM));
    assert!(z.insert(b"a", 2.0, &LIM));
    assert_eq!((z.len(), z.score(b"a")), (1, Some(2.0)));
    z.set_score(b"a", f64::NAN);
    assert_eq!(z.score(b"a"), Some(2.0));
    // A listpack accounts its buffer: length, member, score 2 (one byte each).
    assert_eq!(z.mem_size(), 3);
    z.check();
}

#[test]
fn listpack_keeps_minus_zero_as_zero() {
    let mut z = ZSetValue::new(1);
    z.add(b"a", -0.0, AddFlags::default(), &LIM);
    assert!(z.score(b"a").unwrap().is_sign_positive());
    let mut big = ZSetValue::new(1);
    big.add(&[b'y'; 70], 1.0, AddFlags::default(), &LIM);
    big.add(b"a", -0.0, AddFlags::default(), &LIM);
    assert!(big.score(b"a").unwrap().is_sign_negative());
    let small = big.clone();
    let mut small = small;
    small.remove(&[b'y'; 70]);
    let stored = small.from_result(&LIM);
    assert_eq!(stored.encoding(), "listpack");
    assert!(stored.score(b"a").unwrap().is_sign_positive());
    stored.check();
}

#[test]
fn many_members_convert_and_memory_is_exact() {
    let mut z = ZSetValue::new(5);
    for i in 0..129 {
        z.insert(format!("m{i}").as_bytes(), i as f64, &LIM);
        assert_eq!(z.encoding(), if i < 128 { "listpack" } else { "skiplist" });
    }
    let before = z.mem_size();
    z.remove(b"m5");
    assert_eq!(before - z.mem_size(), 2 + MEMBER_OVERHEAD);
    assert_eq!(z.remove_rank_range(10, 5), 5);
    assert_eq!(z.len(), 123);
    z.check();
    while z.pop(false).is_some() {}
    assert_eq!(z.mem_size(), 0);
    z.check();
}

/// Lex range starts and runs on random zsets, with equal scores (rank arithmetic) and mixed
/// scores (walks): the run always equals a plain walk under the same bound, never reaches
/// past the ends, and removing it keeps every invariant.
#[test]
fn lex_runs_agree_with_walks_and_keep_invariants() {
    let bounds = [
        "-", "+", "[m1", "(m1", "[m5", "(m50", "[m", "[n", "(m199", "[m2",
    ];
    for seed in [1u64, 2, 3, 4] {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let equal = seed % 2 == 0;
        let mut z = ZSetValue::new(seed);
        for step in 0..3000 {
            let m = format!("m{}", rand(200));
            let sc = if equal { 0.0 } else { rand(7) as f64 };
            match rand(4) {
                0 | 1 => {
                    z.insert(m.as_bytes(), sc, &LIM);
                }
                2 => {
                    z.remove(m.as_bytes());
                }
                _ => {
                    let r = LexRange::parse(
                        bounds[rand(10) as usize].as_bytes(),
                        bounds[rand(10) as usize].as_bytes(),
                    )
                    .unwrap();
                    let reverse = rand(2) == 0;
                    if let Some(start) = z.lex_start(&r, reverse) {
                        assert!(start < z.len());
                        let holds = |m: &[u8]| {
                            if reverse { r.gte_min(m) } else { r.lte_max(m) }
                        };
                        let walked = z
                            .walk(start, usize::MAX, reverse)
                            .take_while(|&(m, _)| holds(m))
                            .count();
                        let run = z.lex_run(start, &r, reverse, usize::MAX);
                        assert_eq!(run, walked, "seed {seed} step {step}");
                        assert_eq!(z.lex_run(start, &r, reverse, 1), 1);
                        if !reverse && rand(3) == 0 {
                            assert_eq!(z.remove_rank_range(start, run), run);
                        }
                    }
                }
            }
            if step % 250 == 0 {
                z.check();
            }
        }
        z.check();
    }
}

#[test]
fn scan_visits_everything_under_deletes() {
    let mut z = ZSetValue::new(2);
    for i in 0..500 {
        z.insert(format!("m{i}").as_bytes(), i as f64, &LIM);
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = 0;
    for round in 0..10_000 {
        cursor = z.scan(cursor, 7, |m, _| {
            seen.insert(m.to_vec());
        });
        // Delete a member that is not one of the stable ones (m0..m249).
        let victim = format!("m{}", 250 + (round * 37) % 250);
        z.remove(victim.as_bytes());
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(cursor, 0);
    for i in 0..250 {
        assert!(seen.contains(format!("m{i}").as_bytes()), "m{i} missed");
    }
    z.check();
}
