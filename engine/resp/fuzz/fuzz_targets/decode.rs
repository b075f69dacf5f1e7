//! Fuzz target: the reply decoder never panics, never reports more bytes than it was given,
//! and frames exactly what the frame scanner frames whenever it decodes a value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use resp::{decode, frame_len};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(Some((_, n))) => {
            assert!(n > 0 && n <= data.len());
            assert_eq!(frame_len(data), Ok(Some(n)));
            assert!(matches!(decode(&data[..n]), Ok(Some((_, m))) if m == n));
        }
        Ok(None) => assert!(!matches!(frame_len(data), Ok(Some(_)))),
        Err(_) => {}
    }
});
