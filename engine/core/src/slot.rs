//! Hash slots and the slot → instance map: the one place that decides which engine owns a key.
//! The proxy, every engine (`-MOVED`, `CLUSTER SLOTS`) and the fan-out all call these
//! functions, so they agree by construction.
//!
//! # Key → slot (Redis Cluster spec, "Key distribution model" and "Hash tags"; redis
//! `cluster.c` `keyHashSlot`)
//!
//! `slot = CRC16(tag) & 0x3FFF`, one of [`SLOTS`] = 16384, where CRC16 is CRC-16/XMODEM
//! (poly 0x1021, init 0, no reflection, no final xor; `CRC16("123456789") = 0x31C3`) and
//! `tag` is the **hash tag**: the bytes between the first `{` and the first `}` after it, if
//! at least one byte lies between them; otherwise the whole key. So `{user1000}.following`
//! and `user1000` share slot 3443, while `foo{}{bar}` hashes whole. Smart clients compute the
//! same function, so this must never change.
//!
//! # Slot → instance (ours; DESIGN.md "Key → instance")
//!
//! The 16384 slots form 256 contiguous **blocks** of [`BLOCK_SLOTS`] = 64 slots. Block `b`
//! belongs to instance `jump_hash(b, n)` of the `n` instances (Lamping & Veach, "A Fast,
//! Minimal Memory, Consistent Hash Algorithm", 2014, <https://arxiv.org/abs/1406.2294>):
//!
//! - no table and no coordination: a pure function of `(slot, n)`;
//! - growing the fleet from `n` to `n + 1` instances moves about `1/(n+1)` of the blocks, and
//!   every moved block goes to the new instance `n` (only appending instances is supported;
//!   removing one from the middle would renumber the rest);
//! - blocks instead of single slots keep [`slot_ranges`] (the `CLUSTER SLOTS` reply) short:
//!   at most 256 ranges (80 for 2 instances, about 240 from 8 on, after merging neighbours
//!   with the same owner), whereas jump-hashing each slot would give thousands of one-slot
//!   ranges. The price is granularity: with 256 blocks an instance's share varies by about
//!   ±`sqrt(256/n)` blocks around `256/n` (e.g. 28–38 blocks each for n = 8).
//!
//! `n == 0` is treated as 1. Changing [`BLOCK_SLOTS`] or the hash moves every user's keys to
//! other instances; the tests pin the resulting table.
//!
//! `jump_hash` is written here (a few lines) rather than taken from the `jump-consistent-hash`
//! crate, whose `wrapping_mul(..) + 1` panics on overflow in debug builds for some keys
//! (e.g. 2313046976756913067; see CRATES.md).

/// Number of hash slots (Redis Cluster spec).
pub const SLOTS: u16 = 16384;

/// Slots per block: the unit the slot → instance map assigns.
pub const BLOCK_SLOTS: u16 = 64;

/// Number of blocks (256).
const BLOCKS: u16 = SLOTS / BLOCK_SLOTS;

/// The hash tag of `key` if it has a non-empty one, else the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The Redis Cluster hash slot of `key` (0..16384).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) & (SLOTS - 1)
}

/// Jump consistent hash: the bucket in `0..buckets` of `key`, exactly as in the paper
/// (64-bit LCG step, then a float division). `buckets == 0` is treated as 1.
pub fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    let buckets = i64::from(buckets.max(1));
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2862933555777941757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    // 0 <= b < buckets <= u32::MAX.
    b as u32
}

/// The instance (0..n) that owns `slot`. Slots ≥ 16384 are reduced mod 16384.
pub fn instance_for_slot(slot: u16, n: u32) -> u32 {
    let block = (slot % SLOTS) / BLOCK_SLOTS;
    jump_hash(u64::from(block), n)
}

/// The instance (0..n) that owns `key`.
pub fn instance_for_key(key: &[u8], n: u32) -> u32 {
    instance_for_slot(key_slot(key), n)
}

/// Inclusive slot ranges `(start, end, instance)` covering all 16384 slots, sorted by start,
/// with neighbouring blocks of the same instance merged: the shape of `CLUSTER SLOTS`.
pub fn slot_ranges(n: u32) -> Vec<(u16, u16, u32)> {
    let mut ranges: Vec<(u16, u16, u32)> = Vec::new();
    for block in 0..BLOCKS {
        let start = block * BLOCK_SLOTS;
        let end = start + BLOCK_SLOTS - 1;
        let owner = jump_hash(u64::from(block), n);
        match ranges.last_mut() {
            Some(last) if last.2 == owner => last.1 = end,
            _ => ranges.push((start, end, owner)),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_check_value() {
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31C3
        );
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 0x3FFF);
    }

    /// Values from PROTOCOL-NOTES.md b1, confirmed with `CLUSTER KEYSLOT` on redis-server 7.0.
    #[test]
    fn key_slot_known_values() {
        let cases: &[(&[u8], u16)] = &[
            (b"foo", 12182),
            (b"bar", 5061),
            (b"hello", 866),
            (b"somekey", 11058),
            (b"foo{hash_tag}", 2515),
            (b"bar{hash_tag}", 2515),
            (b"{user1000}.following", 3443),
            (b"{user1000}.followers", 3443),
            (b"user1000", 3443),
            (b"foo{}{bar}", 8363),
            (b"foo{{bar}}zap", 4015),
            (b"foo{bar}{zap}", 5061),
            (b"{}", 15257),
            (b"", 0),
        ];
        for (key, slot) in cases {
            assert_eq!(key_slot(key), *slot, "{}", String::from_utf8_lossy(key));
        }
        // The tag rule in isolation.
        assert_eq!(hash_tag(b"{bar"), b"{bar");
        assert_eq!(hash_tag(b"a}b{c}"), b"c");
        assert_eq!(hash_tag(b"{}x{y}"), b"{}x{y}");
        assert_eq!(key_slot(b"{{bar}}"), key_slot(b"{bar"));
    }

    #[test]
    fn jump_hash_known_values() {
        assert_eq!(jump_hash(0, 60), 0);
        assert_eq!(jump_hash(1, 60), 55);
        assert_eq!(jump_hash(2, 60), 46);
        // The jump-consistent-hash crate overflows (debug panic) on this key; we wrap.
        let b = jump_hash(2313046976756913067, 60);
        assert!(b < 60);
        assert_eq!(jump_hash(12345, 0), 0);
        assert_eq!(jump_hash(u64::MAX, 1), 0);
        assert!(jump_hash(u64::MAX, u32::MAX) < u32::MAX);
    }

    /// The table every deployment depends on. Changing it scatters every user's keys over
    /// different instances after an upgrade: do not "fix" these numbers.
    ///
    /// Written out once from the implementation: for n = 1..8 instances, the owner of each of
    /// the 256 blocks (one digit per block, 64 blocks per line). `slot_ranges(n)` must equal
    /// the ranges these digits spell, merged.
    #[test]
    fn slot_ranges_pinned() {
        #[rustfmt::skip]
        const OWNERS: [&str; 32] = [
            // n = 1
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000",
            // n = 2
            "0000111000111000011100011100011110001110001111000111000111000011",
            "1000111000011100011100011110001110001111000111000111000011100011",
            "1000011100011100011110001110001111000111000111000011100011100001",
            "1100011100011110001110001111000111000111000011100011100001110001",
            // n = 3
            "0002112002221000212200221100212210021120022111002121002111000221",
            "1002112000211100212100211120022110021121002112002221000212200221",
            "1000222100211200221110021210021112002211002112000211100212100021",
            "1200221100211210021120022211002122002211000222100211200221110021",
            // n = 4
            "0033112002221003212203231100213310331120022113032321003113003221",
            "1002132003311303233100311330322110021321033112002221003212200221",
            "1003222103313300231130323210031132032211002132003311300232100321",
            "3203231100213310331120022211032122002211003222100213200231130323",
            // n = 5
            "0033142042221004244403431400243310331420422113032321043113003221",
            "1042134003311303244100411430342110424321033142042221004242204421",
            "4003244103314300231140323210431132032211042132003311304234100421",
            "3403431100244410331420422214042422044214003222104213400231130324",
            // n = 6
            "0033145042551054244503431505253310531420452113032321043113003521",
            "1042134053515503244105415430342150524321033142042221004245504451",
            "4053244105515305551140323210431132035211042132003315304235105425",
            "5403431505254410531420422214042422044214003225104213405551150324",
            // n = 7
            "0663145042651054244603631506253610631420452113032321043163063561",
            "6062664056515503244105416630342150524321063142046221064245504451",
            "4063644105615305651140323210431632035216062632066315304265105425",
            "5403631506264410531420462214642422044214063665106216405551150324",
            // n = 8
            "0663145047751057274603631506253710631420452173732321043163063561",
            "6062664056515503247105416630342150524321763142046271064245504451",
            "4063647107675705651740323210431632735216062637066315704265105725",
            "7403671707264417531420462214642422044214073665106276405571750327",
        ];
        for n in 1..=8u32 {
            let owners: Vec<u32> = OWNERS[(n as usize - 1) * 4..n as usize * 4]
                .concat()
                .bytes()
                .map(|d| u32::from(d - b'0'))
                .collect();
            assert_eq!(owners.len(), usize::from(BLOCKS));
            let mut expected: Vec<(u16, u16, u32)> = Vec::new();
            for (block, &owner) in owners.iter().enumerate() {
                let start = block as u16 * BLOCK_SLOTS;
                match expected.last_mut() {
                    Some(last) if last.2 == owner => last.1 = start + BLOCK_SLOTS - 1,
                    _ => expected.push((start, start + BLOCK_SLOTS - 1, owner)),
                }
            }
            assert_eq!(slot_ranges(n), expected, "n = {n}");
        }
        // The same table, literally, for the start of n = 2 and the range counts.
        assert_eq!(
            slot_ranges(2)[..6],
            [
                (0, 255, 0),
                (256, 447, 1),
                (448, 639, 0),
                (640, 831, 1),
                (832, 1087, 0),
                (1088, 1279, 1)
            ]
        );
        let counts: Vec<usize> = (1..=8).map(|n| slot_ranges(n).len()).collect();
        assert_eq!(counts, [1, 80, 148, 178, 201, 219, 234, 242]);
    }

    #[test]
    fn ranges_cover_every_slot_and_agree_with_instance_for_slot() {
        for n in [0, 1, 2, 3, 5, 8, 13, 64, 300] {
            let ranges = slot_ranges(n);
            let mut next = 0u32;
            for &(start, end, owner) in &ranges {
                assert_eq!(u32::from(start), next, "contiguous, sorted");
                assert!(start <= end);
                assert!(owner < n.max(1));
                for slot in [start, end, (start + end) / 2] {
                    assert_eq!(instance_for_slot(slot, n), owner);
                }
                next = u32::from(end) + 1;
            }
            assert_eq!(next, u32::from(SLOTS));
            assert!(ranges.windows(2).all(|w| w[0].2 != w[1].2), "merged");
        }
        assert_eq!(slot_ranges(0), slot_ranges(1));
        assert_eq!(slot_ranges(1), vec![(0, 16383, 0)]);
    }

    /// Growing from n to n+1 moves about 1/(n+1) of the slots, all to the new instance.
    #[test]
    fn growth_moves_few_slots_to_the_new_instance() {
        for n in 1..=16u32 {
            let mut moved = 0u32;
            for slot in 0..SLOTS {
                let (before, after) = (instance_for_slot(slot, n), instance_for_slot(slot, n + 1));
                if before != after {
                    assert_eq!(after, n, "slot {slot} moved to an old instance");
                    moved += 1;
                }
            }
            let fraction = f64::from(moved) / f64::from(SLOTS);
            let ideal = 1.0 / f64::from(n + 1);
            assert!(
                (fraction - ideal).abs() < 0.5 * ideal,
                "n = {n}: moved {fraction:.4}, ideal {ideal:.4}"
            );
        }
    }

    #[test]
    fn instance_for_key_uses_the_slot() {
        for n in 1..=8 {
            assert_eq!(
                instance_for_key(b"{user1000}.following", n),
                instance_for_key(b"user1000", n)
            );
            assert_eq!(instance_for_key(b"foo", n), instance_for_slot(12182, n));
        }
    }
}
