//! The CLIENT subcommands of client-side caching: TRACKING, CACHING, GETREDIR, TRACKINGINFO
//! (redis `clientCommand`, its checks and error texts in its order).

use std::collections::BTreeSet;

use super::{disable, sync_log};
use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p …] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]` → OK
/// (redis `clientCommand` "tracking", its checks and texts in its order).
pub fn client_tracking(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let id = c.client.id;
    let mut redir: i64 = 0;
    let (mut bcast, mut optin, mut optout, mut noloop) = (false, false, false, false);
    let mut prefixes: Vec<&[u8]> = Vec::new();
    let mut j = 3;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        let a = argv[j];
        if a.eq_ignore_ascii_case(b"redirect") && more > 0 {
            j += 1;
            if redir != 0 {
                return Err(CmdError::Static(
                    "ERR A client can only redirect to a single other client",
                ));
            }
            redir = crate::args::parse_i64(argv[j]).ok_or(CmdError::NotInteger)?;
            if redir < 0 || !e.tracking.conns.contains_key(&(redir as u64)) {
                return Err(CmdError::Static(
                    "ERR The client ID you want redirect to does not exist",
                ));
            }
        } else if a.eq_ignore_ascii_case(b"bcast") {
            bcast = true;
        } else if a.eq_ignore_ascii_case(b"optin") {
            optin = true;
        } else if a.eq_ignore_ascii_case(b"optout") {
            optout = true;
        } else if a.eq_ignore_ascii_case(b"noloop") {
            noloop = true;
        } else if a.eq_ignore_ascii_case(b"prefix") && more > 0 {
            j += 1;
            prefixes.push(argv[j]);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if argv[2].eq_ignore_ascii_case(b"on") {
        if !bcast && !prefixes.is_empty() {
            return Err(CmdError::Static(
                "ERR PREFIX option requires BCAST mode to be enabled",
            ));
        }
        if let Some(t) = e.tracking.clients.get(&id)
            && t.bcast != bcast
        {
            return Err(CmdError::Static(
                "ERR You can't switch BCAST mode on/off before disabling tracking for this \
                 client, and then re-enabling it with a different mode.",
            ));
        }
        if bcast && (optin || optout) {
            return Err(CmdError::Static(
                "ERR OPTIN and OPTOUT are not compatible with BCAST",
            ));
        }
        if optin && optout {
            return Err(CmdError::Static(
                "ERR You can't specify both OPTIN mode and OPTOUT mode",
            ));
        }
        if let Some(t) = e.tracking.clients.get(&id)
            && ((optin && t.optout) || (optout && t.optin))
        {
            return Err(CmdError::Static(
                "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this \
                 client, and then re-enabling it with a different mode.",
            ));
        }
        if bcast {
            let existing = e.tracking.clients.get(&id).map(|t| &t.prefixes);
            check_prefix_collisions(existing, &prefixes)?;
        }
        enable(e, id, redir as u64, bcast, optin, optout, noloop, &prefixes);
    } else if argv[2].eq_ignore_ascii_case(b"off") {
        disable(e, id);
    } else {
        return Err(CmdError::Syntax);
    }
    c.w().ok();
    Ok(())
}

/// Whether `a` and `b` agree on their common length (redis `stringCheckPrefix`).
fn overlaps(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// redis `checkPrefixCollisionsOrReply`: no new prefix may overlap one the client has, nor
/// another new one.
fn check_prefix_collisions(
    existing: Option<&BTreeSet<Box<[u8]>>>,
    prefixes: &[&[u8]],
) -> Result<(), CmdError> {
    let s = |b: &[u8]| crate::error::c_str_lossy(b, usize::MAX);
    for (i, p) in prefixes.iter().enumerate() {
        if let Some(old) = existing.and_then(|set| set.iter().find(|o| overlaps(o, p))) {
            return Err(CmdError::Other(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single \
                 client must not overlap.",
                s(p),
                s(old)
            )));
        }
        if let Some(q) = prefixes[i + 1..].iter().find(|q| overlaps(p, q)) {
            return Err(CmdError::Other(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a \
                 single client must not overlap.",
                s(p),
                s(q)
            )));
        }
    }
    Ok(())
}

/// redis `enableTracking`.
#[allow(clippy::too_many_arguments)]
fn enable(
    e: &mut Engine,
    id: u64,
    redirect: u64,
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    prefixes: &[&[u8]],
) {
    e.tracking.reader = None;
    let t = e.tracking.clients.entry(id).or_default();
    t.broken_redir = false;
    t.redirect = redirect;
    t.bcast = bcast;
    t.optin = optin;
    t.optout = optout;
    t.noloop = noloop;
    if bcast {
        let empty: &[&[u8]] = &[b""];
        let list = if prefixes.is_empty() { empty } else { prefixes };
        for &p in list {
            let bs = e.tracking.prefixes.entry(p.into()).or_default();
            if bs.clients.insert(id) {
                e.tracking
                    .clients
                    .get_mut(&id)
                    .expect("just inserted")
                    .prefixes
                    .insert(p.into());
            }
        }
    }
    sync_log(e);
}

/// `CLIENT CACHING YES|NO` → OK (redis `clientCommand` "caching").
pub fn client_caching(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(t) = e.tracking.clients.get_mut(&c.client.id) else {
        return Err(CmdError::Static(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with \
             OPTIN or OPTOUT mode enabled",
        ));
    };
    let opt = c.argv[2];
    if opt.eq_ignore_ascii_case(b"yes") {
        if !t.optin {
            return Err(CmdError::Static(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            ));
        }
    } else if opt.eq_ignore_ascii_case(b"no") {
        if !t.optout {
            return Err(CmdError::Static(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            ));
        }
    } else {
        return Err(CmdError::Syntax);
    }
    if !t.caching {
        t.caching = true;
        e.tracking.caching += 1;
        e.tracking.reader = None;
    }
    c.w().ok();
    Ok(())
}

/// `CLIENT GETREDIR` → the redirect id, 0 for none, -1 when not tracking.
pub fn client_getredir(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let r = e
        .tracking
        .clients
        .get(&c.client.id)
        .map_or(-1, |t| t.redirect as i64);
    c.w().integer(r);
    Ok(())
}

/// `CLIENT TRACKINGINFO` → a map of `flags` (a set), `redirect` and `prefixes`, as Redis.
pub fn client_trackinginfo(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let t = e.tracking.clients.get(&c.client.id);
    let mut flags: Vec<&[u8]> = Vec::new();
    match t {
        None => flags.push(b"off"),
        Some(t) => {
            flags.push(b"on");
            if t.bcast {
                flags.push(b"bcast");
            }
            if t.optin {
                flags.push(b"optin");
                if t.caching {
                    flags.push(b"caching-yes");
                }
            }
            if t.optout {
                flags.push(b"optout");
                if t.caching {
                    flags.push(b"caching-no");
                }
            }
            if t.noloop {
                flags.push(b"noloop");
            }
            if t.broken_redir {
                flags.push(b"broken_redirect");
            }
        }
    }
    let mut w = c.w();
    w.map(3);
    w.bulk(b"flags");
    w.set(flags.len());
    for f in flags {
        w.bulk(f);
    }
    w.bulk(b"redirect");
    w.integer(t.map_or(-1, |t| t.redirect as i64));
    w.bulk(b"prefixes");
    match t {
        Some(t) => {
            w.array(t.prefixes.len());
            for p in &t.prefixes {
                w.bulk(p);
            }
        }
        None => w.array(0),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_overlap_as_redis_checks() {
        assert!(overlaps(b"FOO", b"FOOBAR"));
        assert!(overlaps(b"FOOBAR", b"FO"));
        assert!(overlaps(b"", b"x"));
        assert!(!overlaps(b"FOO", b"BAR"));
        let err = check_prefix_collisions(None, &[b"FOOBAR", b"FOO"]).unwrap_err();
        assert_eq!(
            err.message(),
            "ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'. Prefixes for a \
             single client must not overlap."
        );
        let mut old = BTreeSet::new();
        old.insert(b"BAR".to_vec().into_boxed_slice());
        let err = check_prefix_collisions(Some(&old), &[b"BARB"]).unwrap_err();
        assert!(
            err.message()
                .starts_with("ERR Prefix 'BARB' overlaps with an existing prefix 'BAR'")
        );
    }
}
