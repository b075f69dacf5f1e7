//! Blocking commands (BLPOP, BRPOP, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP): parked
//! clients, readiness and timeouts (redis `blocked.c`). (Stub: to be written.)
//!
//! The core has no view of sockets: a blocking command that finds nothing returns
//! [`crate::Flow::Block`] and is recorded here; a later write that makes one of its keys ready
//! re-runs it and queues the reply as a [`crate::Delivery`] with `unblock`; `Engine::timeouts`
//! answers the ones whose deadline passed.

/// The engine's registry of parked clients.
#[derive(Debug, Default)]
pub struct Blocking {}
