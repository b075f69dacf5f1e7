//! Hash slots and the slot → instance map. (To be completed.)
//!
//! - `key_slot(key) = CRC16-XMODEM(hash tag or key) mod 16384` (Redis Cluster spec, "Key
//!   distribution model" and "Hash tags").

/// Number of hash slots (Redis Cluster spec).
pub const SLOTS: u16 = 16384;

/// The Redis Cluster hash slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    let _ = key;
    todo!()
}
