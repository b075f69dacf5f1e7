//! LOLWUT [VERSION v] (redis `lolwut.c`). Redis 7.0 answers a version other than 5 and 6
//! (its default is its own major, 7) with `Redis ver. <version>\n`; 5 and 6 draw random
//! computer art, which recached does not draw: they get the same line.

use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;

pub fn lolwut(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    // redis: with VERSION and a value, getLongFromObjectOrReply(…, NULL) on it.
    if c.argv.len() > 2
        && c.argv[1].eq_ignore_ascii_case(b"version")
        && crate::args::parse_i64(c.argv[2]).is_none()
    {
        return Err(CmdError::NotInteger);
    }
    let text = format!("Redis ver. {}\n", crate::cmd::connection::REDIS_VERSION);
    c.w().verbatim(text.as_bytes());
    Ok(())
}
