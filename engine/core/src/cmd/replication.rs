//! What Redis's `replication.c` answers that applies here: ROLE. An engine has no replicas
//! and replicates from nobody (browser replicas follow the keychange feed, docs/feed.md), so
//! it is a master with offset 0 and no replicas, as a lone redis-server reports.

use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;

/// ROLE → `["master", 0, []]`.
pub fn role(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut w = c.w();
    w.array(3);
    w.bulk(b"master");
    w.integer(0);
    w.array(0);
    Ok(())
}
