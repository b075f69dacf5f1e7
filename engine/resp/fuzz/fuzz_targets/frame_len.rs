//! Fuzz target: the reply frame scanner never panics, never reports more bytes than it was
//! given, is resumable (reads of any size give the same frames), and agrees with itself on the
//! prefix it reports (a frame's length is also its length when it is the whole input).
//!
//! Input layout: byte 0 picks the read size for the chunked run (1..=64 bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use resp::{FrameScanner, frame_len};

fuzz_target!(|input: &[u8]| {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let step = usize::from(seed % 64) + 1;
    let one_shot = frame_len(data);
    if let Ok(Some(n)) = one_shot {
        assert!(n > 0 && n <= data.len());
        assert_eq!(frame_len(&data[..n]), Ok(Some(n)));
    }
    let mut scanner = FrameScanner::new();
    let mut end = 0;
    let chunked = loop {
        end = (end + step).min(data.len());
        match scanner.scan(&data[..end]) {
            Ok(None) if end < data.len() => continue,
            other => break other,
        }
    };
    assert_eq!(one_shot, chunked);
});
