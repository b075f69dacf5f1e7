//! Fuzz target: the fan-out's WebSocket message handling (`recached_fanout::protocol`,
//! pure): browser messages in, prefix authorization, and messages out.
//!
//! Input layout: byte 0 picks a mode; the rest is the payload.
//! - 0: the payload (lossy UTF-8) is one browser text frame for `parse_client`: never panics,
//!   and an accepted `subscribe` respects the stated bounds (≤ 64 prefixes of ≤ 1024 bytes).
//! - 1: the payload is split on 0x00 into requested prefixes and, after a 0x01, allowed ones:
//!   `intersect` never widens access — every key a granted prefix selects is selected by an
//!   allowed prefix and by a requested one (checked on the prefixes and their extensions).
//! - 2: the payload is a key or value: `push_bytes` then `parse_client` round-trips it as a
//!   subscribe prefix (UTF-8 as a JSON string, other bytes as base64), and a `keychange`
//!   carrying it is valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recached_fanout::protocol::{self, ClientMsg, MAX_PREFIX_LEN, MAX_PREFIXES};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            let text = String::from_utf8_lossy(payload);
            if let Ok(ClientMsg::Subscribe { prefixes, .. }) = protocol::parse_client(&text) {
                assert!(prefixes.len() <= MAX_PREFIXES);
                assert!(prefixes.iter().all(|p| p.len() <= MAX_PREFIX_LEN));
            }
        }
        1 => {
            let (req, allowed) = match payload.iter().position(|&b| b == 1) {
                Some(i) => (&payload[..i], &payload[i + 1..]),
                None => (payload, &b""[..]),
            };
            let split = |b: &[u8]| -> Vec<Vec<u8>> {
                b.split(|&c| c == 0).take(16).map(|p| p.to_vec()).collect()
            };
            let (req, allowed) = (split(req), split(allowed));
            // Regression (fuzz/regressions/fanout/, test
            // `intersect_never_widens_the_allowed_prefix`): `intersect` once stripped a second
            // trailing `*`, granting `a` to a token for `a**`.
            let granted = protocol::intersect(&req, &allowed);
            let (nreq, nallowed) = (protocol::normalize(&req), protocol::normalize(&allowed));
            for g in &granted {
                for key in [g.clone(), [g.as_slice(), b"x"].concat()] {
                    assert!(
                        protocol::matches(&nallowed, &key),
                        "granted {g:?} beyond allowed"
                    );
                    assert!(
                        protocol::matches(&nreq, &key),
                        "granted {g:?} beyond requested"
                    );
                }
            }
        }
        _ => {
            if payload.len() > MAX_PREFIX_LEN {
                return;
            }
            let mut msg = String::from(r#"{"type":"subscribe","prefixes":["#);
            protocol::push_bytes(&mut msg, payload);
            msg.push_str("]}");
            match protocol::parse_client(&msg) {
                Ok(ClientMsg::Subscribe { prefixes, .. }) => {
                    assert_eq!(prefixes, vec![payload.to_vec()], "round trip of {msg}")
                }
                other => panic!("{msg} → {other:?}"),
            }
            let change = protocol::keychange(0, 1, payload, &[b"SET", payload, payload]);
            if let Err(e) = serde_json::from_str::<serde_json::Value>(change.trim_end()) {
                panic!("keychange is not JSON ({e}): {change}");
            }
        }
    }
});
