//! Fuzz target: the proxy's routing, request splitting and reply merging
//! (`recached_proxy::{route, split}` and the key extractor `engine_core::command::keys`, all
//! pure).
//!
//! Input layout: byte 0 = number of instances (1..=4), byte 1 = a command-table row (low
//! byte) , byte 2 = argc (0..=15) then per argument a length byte and its bytes (short keys
//! collide across instances); the rest feeds the replies (one frame per part: a byte picks
//! well-formed shapes — the expected array, an integer, +OK, an error, nil — or raw bytes).
//!
//! Oracles:
//! - `route::plan` never panics, whatever the argv.
//! - A split request's parts are valid multibulk requests for existing instances, and
//!   together carry exactly the original arguments after the name (as a multiset), each
//!   part starting with the command name.
//! - `split::merge` never panics on any reply bytes, and for well-formed part replies writes
//!   exactly one complete RESP frame.
//! - The SCAN cursor encoding round-trips.
#![no_main]

use engine_core::command;
use libfuzzer_sys::fuzz_target;
use recached_proxy::route::{self, Fleet, Plan, Session};
use recached_proxy::split::{self, Merge};
use resp::{Limits, RequestParser};

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a
    }
}

/// Parses a request produced by the split into its arguments (panics if it is not one
/// complete multibulk request).
fn parse_request(req: &[u8]) -> Vec<Vec<u8>> {
    let mut p = RequestParser::new(Limits::default());
    let n = p
        .parse(req)
        .expect("part is valid RESP")
        .expect("part is complete");
    assert_eq!(n, req.len(), "part has trailing bytes");
    (0..p.argc()).map(|i| p.arg(req, i).to_vec()).collect()
}

/// One reply frame for a part whose request has `args` arguments.
fn reply(input: &mut Input<'_>, merge: &Merge, args: usize) -> (Vec<u8>, bool) {
    let kind = input.byte();
    let mut out = Vec::new();
    let well_formed = match kind % 6 {
        0 => {
            out.extend_from_slice(b"-ERR oops\r\n");
            true
        }
        1 => {
            out.extend_from_slice(format!(":{}\r\n", input.byte()).as_bytes());
            matches!(merge, Merge::Sum | Merge::Max)
        }
        2 => {
            out.extend_from_slice(b"+OK\r\n");
            matches!(merge, Merge::AllOk)
        }
        3 => {
            // An array of `args - 1` bulk strings (or nils): MGET / KEYS shapes.
            let n = args.saturating_sub(1);
            out.extend_from_slice(format!("*{n}\r\n").as_bytes());
            for _ in 0..n {
                if input.byte() & 1 == 0 {
                    out.extend_from_slice(b"$-1\r\n");
                } else {
                    out.extend_from_slice(b"$2\r\nvv\r\n");
                }
            }
            matches!(merge, Merge::Values(_) | Merge::Concat)
        }
        4 => {
            out.extend_from_slice(b"$-1\r\n");
            matches!(merge, Merge::AnyNonNil { .. })
        }
        _ => {
            let n = input.byte() as usize % 24;
            out.extend_from_slice(input.bytes(n));
            false
        }
    };
    (out, well_formed)
}

fn check_one_frame(out: &[u8]) {
    match resp::reply::frame_len(out) {
        Ok(Some(n)) => assert_eq!(n, out.len(), "merge wrote more than one frame: {out:?}"),
        other => panic!(
            "merge wrote a bad frame ({other:?}): {:?}",
            String::from_utf8_lossy(out)
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let n = 1 + input.byte() as usize % 4;
    let spec = command::spec_at(input.byte() as usize % command::count());
    let argc = input.byte() as usize % 16;
    let mut argv: Vec<Vec<u8>> = vec![
        spec.name
            .split('|')
            .next()
            .unwrap_or("")
            .as_bytes()
            .to_vec(),
    ];
    if let Some(sub) = spec.name.split('|').nth(1) {
        argv.push(sub.as_bytes().to_vec());
    }
    for _ in 0..argc {
        let len = input.byte() as usize % 6;
        argv.push(input.bytes(len).to_vec());
    }
    let refs: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();

    let mut fleet = Fleet::new(
        (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect(),
        6380,
    );
    fleet.up = (0..n).map(|i| input.byte() & 7 != 0 || i == 0).collect();
    let mut session = Session::default();
    let plan = route::plan(&refs[..], &mut session, &mut fleet);

    let (requests, merge): (Vec<Vec<u8>>, Merge) = match plan {
        Plan::Split { parts, merge } => {
            let mut carried: Vec<Vec<u8>> = Vec::new();
            for p in &parts {
                assert!(p.instance < n, "part for instance {} of {n}", p.instance);
                let args = parse_request(&p.request);
                assert!(
                    args[0].eq_ignore_ascii_case(&argv[0]),
                    "part lost the command name"
                );
                carried.extend(args.into_iter().skip(1));
            }
            let mut want: Vec<Vec<u8>> = argv[1..].to_vec();
            want.sort();
            carried.sort();
            assert_eq!(carried, want, "split lost or duplicated arguments");
            (parts.into_iter().map(|p| p.request).collect(), merge)
        }
        Plan::FanOut { request, merge } => {
            let req = request.unwrap_or_else(|| {
                let mut r = Vec::new();
                split::push_array_header(&mut r, refs.len());
                for a in &refs {
                    split::push_bulk(&mut r, a);
                }
                r
            });
            parse_request(&req);
            (vec![req; n], merge)
        }
        Plan::Rewrite {
            instance,
            request,
            merge,
            ..
        } => {
            assert!(instance < n);
            parse_request(&request);
            (vec![request], merge)
        }
        Plan::Forward(i) | Plan::Blocking(i) | Plan::Watch(i) => {
            assert!(i < n);
            return;
        }
        _ => return,
    };
    let mut replies = Vec::new();
    let mut all_well_formed = true;
    for req in &requests {
        let args = parse_request(req).len();
        let (r, ok) = reply(&mut input, &merge, args);
        all_well_formed &= ok;
        replies.push(r);
    }
    let refs: Vec<&[u8]> = replies.iter().map(|r| r.as_slice()).collect();
    let mut out = Vec::new();
    split::merge(&merge, &refs, &mut out);
    if all_well_formed {
        check_one_frame(&out);
    }

    // SCAN cursors: encode ∘ decode is the identity where encoding is possible.
    let cursor = u64::from_le_bytes({
        let b = input.bytes(8);
        let mut a = [0u8; 8];
        a[..b.len()].copy_from_slice(b);
        a
    });
    let (inst, backend) = split::scan_cursor_decode(cursor, n);
    assert!(inst < n);
    if backend != 0
        && let Some(enc) = split::scan_cursor_encode(backend, inst, n)
    {
        assert_eq!(split::scan_cursor_decode(enc, n), (inst, backend));
    }
});
