//! Fuzz target: the request parser never panics, never reports more bytes than it was given,
//! and gives the same requests whether the input arrives at once or in pieces.
//!
//! Input layout: byte 0 picks the read size for the chunked run (1..=64 bytes); the rest is
//! what the client sends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use resp::{Limits, ProtocolError, RequestParser};

#[derive(Debug, PartialEq)]
enum Event {
    Request(Vec<Vec<u8>>),
    Error(ProtocolError),
}

/// Runs a connection over `data` delivered in reads of `step` bytes (0 = all at once).
fn run(data: &[u8], step: usize, limits: Limits) -> Vec<Event> {
    let mut p = RequestParser::new(limits);
    let mut events = Vec::new();
    let mut rbuf: Vec<u8> = Vec::new();
    let mut fed = 0;
    while fed < data.len() {
        let next = if step == 0 { data.len() } else { (fed + step).min(data.len()) };
        rbuf.extend_from_slice(&data[fed..next]);
        fed = next;
        loop {
            match p.parse(&rbuf) {
                Ok(Some(n)) => {
                    assert!(n > 0 && n <= rbuf.len(), "consumed {n} of {}", rbuf.len());
                    let args = (0..p.argc()).map(|i| p.arg(&rbuf, i).to_vec()).collect();
                    events.push(Event::Request(args));
                    rbuf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    events.push(Event::Error(e));
                    return events;
                }
            }
        }
    }
    events
}

fn too_big(events: &[Event]) -> bool {
    matches!(
        events.last(),
        Some(Event::Error(
            ProtocolError::TooBigInline
                | ProtocolError::TooBigMbulkCount
                | ProtocolError::TooBigBulkCount
        ))
    )
}

fuzz_target!(|input: &[u8]| {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let step = usize::from(seed % 64) + 1;
    let whole = run(data, 0, Limits::default());
    let chunked = run(data, step, Limits::default());
    // "Too big" depends on how much of a line has arrived (as in Redis); otherwise the split
    // must not matter.
    if !too_big(&whole) && !too_big(&chunked) {
        assert_eq!(whole, chunked);
    }
    // Tiny limits reach every limit check; only the absence of panics is checked here.
    let tiny = Limits {
        max_bulk_len: 16,
        max_inline_len: 32,
        max_multibulk_len: 8,
    };
    let _ = run(data, step, tiny);
});
