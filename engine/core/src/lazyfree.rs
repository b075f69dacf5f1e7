//! UNLINK and FLUSHALL/FLUSHDB ASYNC (redis `lazyfree.c`): a value that costs more than
//! [`LAZYFREE_THRESHOLD`] allocations to free is not freed by the command that removed it but
//! handed to the keyspace's graveyard and released later by the cron, a bounded amount per
//! call ([`Keyspace::lazy_free_step`](crate::keyspace::Keyspace::lazy_free_step)). Redis frees
//! it on a background thread; an engine has one thread, so the work moves off the command's
//! latency onto the cron's. INFO `lazyfree_pending_objects` counts what waits,
//! `lazyfreed_objects` what was freed so (reset by CONFIG RESETSTAT), as Redis.

use crate::types::Value;

/// redis `LAZYFREE_THRESHOLD`: values whose free effort is at most this are freed at once.
pub const LAZYFREE_THRESHOLD: usize = 64;

/// redis `lazyfreeGetFreeEffort`: about how many allocations freeing `v` takes. Compact
/// encodings (listpack, intset) and strings are one allocation; a list counts its quicklist
/// nodes; a stream its nodes, plus per consumer group one and the first group's pending
/// entries.
pub fn free_effort(v: &Value) -> usize {
    match v {
        Value::Str(_) => 1,
        Value::List(l) => l.node_count(),
        Value::Hash(h) if h.encoding() == "hashtable" => h.len(),
        Value::Set(s) if s.encoding() == "hashtable" => s.len(),
        Value::ZSet(z) if z.encoding() == "skiplist" => z.len(),
        Value::Hash(_) | Value::Set(_) | Value::ZSet(_) => 1,
        Value::Stream(s) => {
            let groups = s.groups.len();
            let first_pel = s.groups.values().next().map_or(0, |g| g.pel().len());
            s.node_count() + groups * (1 + first_pel)
        }
    }
}
