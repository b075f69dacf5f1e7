//! The module's exports: a hand-written C ABI over one [`Replica`] per module instance.
//!
//! Why not wasm-bindgen: the boundary is two byte buffers and five calls, which a plain
//! `extern "C"` ABI covers in ~80 lines of Rust and ~40 of JavaScript, while wasm-bindgen
//! needs `wasm-bindgen-cli` pinned to the crate's exact version (about 6 minutes to install
//! on a clean CI machine) and generates glue the page must load. See docs/browser-protocol.md.
//!
//! # Calling convention
//!
//! All integers are `u32`/`i32`, times are `f64` Unix milliseconds (a JavaScript number).
//!
//! 1. `rc_input(len) -> ptr`: makes the input buffer `len` bytes long and returns its address;
//!    the caller writes `len` bytes there (`new Uint8Array(memory.buffer, ptr, len)`; take the
//!    view *after* the call, since growing memory detaches old views).
//! 2. The input is one or more RESP multibulk commands (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`).
//!    - `rc_apply(len) -> i32`: applies every command in the input as an effect / snapshot
//!      entry; returns how many were applied, or `-(1 + index)` of the first that failed
//!      (its error text is then the output) or `-1 - count` style for malformed RESP
//!      (`i32::MIN`, output = the protocol error).
//!    - `rc_read(len, now_ms) -> u32`: runs the one read command in the input and returns the
//!      length of its RESP2 reply; `rc_output()` is the reply's address.
//! 3. `rc_drop_instance(i, n) -> u32` deletes the keys instance `i` of `n` owns (returns how
//!    many), `rc_clear()` deletes everything, `rc_len() -> u32` counts keys.
//!
//! One module instance holds one replica; instantiate the module again for another.

use std::cell::RefCell;

use resp::{Limits, RequestParser};

use crate::Replica;

struct State {
    replica: Replica,
    input: Vec<u8>,
    output: Vec<u8>,
    parser: RequestParser,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State {
        replica: Replica::new(),
        input: Vec::new(),
        output: Vec::new(),
        parser: RequestParser::new(Limits::default()),
    });
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_input(len: u32) -> u32 {
    STATE.with_borrow_mut(|s| {
        s.input.clear();
        s.input.resize(len as usize, 0);
        s.input.as_mut_ptr() as u32
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_output() -> u32 {
    STATE.with_borrow(|s| s.output.as_ptr() as u32)
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_output_len() -> u32 {
    STATE.with_borrow(|s| s.output.len() as u32)
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_apply(len: u32) -> i32 {
    STATE.with_borrow_mut(|s| {
        let State {
            replica,
            input,
            output,
            parser,
        } = s;
        output.clear();
        let buf = &input[..(len as usize).min(input.len())];
        let mut at = 0;
        let mut applied = 0i32;
        while at < buf.len() {
            match parser.parse(&buf[at..]) {
                Ok(Some(n)) => {
                    let argv: Vec<&[u8]> = parser.args(&buf[at..]).collect();
                    at += n;
                    if argv.is_empty() {
                        continue;
                    }
                    if let Err(e) = replica.apply(&argv) {
                        output.extend_from_slice(e.as_bytes());
                        return -(1 + applied);
                    }
                    applied += 1;
                }
                Ok(None) => {
                    output.extend_from_slice(b"ERR incomplete command");
                    return i32::MIN;
                }
                Err(e) => {
                    output.extend_from_slice(e.to_string().as_bytes());
                    return i32::MIN;
                }
            }
        }
        applied
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_read(len: u32, now_ms: f64) -> u32 {
    STATE.with_borrow_mut(|s| {
        let State {
            replica,
            input,
            output,
            parser,
        } = s;
        output.clear();
        let buf = &input[..(len as usize).min(input.len())];
        match parser.parse(buf) {
            Ok(Some(_)) => {
                let argv: Vec<&[u8]> = parser.args(buf).collect();
                let now = if now_ms.is_finite() && now_ms > 0.0 {
                    now_ms as u64
                } else {
                    0
                };
                output.extend_from_slice(replica.read(&argv, now));
            }
            Ok(None) => output.extend_from_slice(b"-ERR incomplete command\r\n"),
            Err(e) => e.write_reply(output),
        }
        output.len() as u32
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_drop_instance(instance: u32, n: u32) -> u32 {
    STATE.with_borrow_mut(|s| s.replica.drop_instance(instance, n) as u32)
}

/// The slot table from the input buffer: 16384 owners, u16 little-endian (65535 = none).
/// Returns 1 when adopted, 0 for a buffer of the wrong size.
#[unsafe(no_mangle)]
pub extern "C" fn rc_set_owners(len: u32) -> u32 {
    STATE.with_borrow_mut(|s| {
        let buf = &s.input[..(len as usize).min(s.input.len())];
        let owners: Vec<u16> = buf
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        u32::from(buf.len() % 2 == 0 && s.replica.set_owners(owners))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_clear() {
    STATE.with_borrow_mut(|s| s.replica.clear())
}

#[unsafe(no_mangle)]
pub extern "C" fn rc_len() -> u32 {
    STATE.with_borrow_mut(|s| s.replica.len() as u32)
}
