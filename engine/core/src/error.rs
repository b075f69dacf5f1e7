//! Every error reply a command can produce, with Redis 7.0's exact text.
//!
//! Handlers return `Result<(), CmdError>`; the dispatcher writes the error (the Rust form of
//! Redis's `…OrReply` helpers). Texts are copied from redis 7.0 (`server.c` shared objects,
//! `t_string.c`, `expire.c`, `db.c`, `networking.c`, `config.c`) and checked against a real
//! redis-server 7.0.15. Error text that echoes user input has CR/LF replaced by spaces when it
//! is written ([`resp::ReplyWriter::error`]).

use std::fmt::Write as _;

/// A command failed; the connection stays open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`
    WrongType,
    /// `ERR syntax error`
    Syntax,
    /// `ERR value is not an integer or out of range`
    NotInteger,
    /// `ERR value is not a valid float`
    NotFloat,
    /// `ERR increment or decrement would overflow`
    Overflow,
    /// `ERR decrement would overflow` (DECRBY with i64::MIN)
    DecrementOverflow,
    /// `ERR increment would produce NaN or Infinity`
    NanOrInfinity,
    /// `ERR no such key`
    NoSuchKey,
    /// `ERR invalid expire time in '<fullname>' command`
    InvalidExpire(&'static str),
    /// `ERR string exceeds maximum allowed size (proto-max-bulk-len)`
    StringTooLong,
    /// `ERR offset is out of range`
    OffsetOutOfRange,
    /// `ERR invalid cursor`
    InvalidCursor,
    /// `ERR DB index is out of range`
    DbIndexOutOfRange,
    /// `ERR wrong number of arguments for '<fullname>' command` (also written by the
    /// dispatcher's arity check; a few commands re-check parity, e.g. MSET).
    Arity(&'static str),
    /// `ERR unknown subcommand '<sub>'. Try <CMD> HELP.`
    UnknownSubcommand { sub: Vec<u8>, container: Vec<u8> },
    /// A complete error line without the leading `-` (code included), built on the error path
    /// only (e.g. `ERR Unsupported option foo`).
    Other(String),
    /// A fixed error line without the leading `-` (code included).
    Static(&'static str),
}

/// `%.128s`-style rendering of user input as Redis prints it into error text: stops at the
/// first NUL (C string) and at `max` bytes; non-UTF-8 bytes are kept byte-for-byte where possible.
pub fn c_str_lossy(bytes: &[u8], max: usize) -> String {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bytes.len())
        .min(max);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl CmdError {
    /// `ERR Unsupported option <opt>` (EXPIRE family).
    pub fn unsupported_option(opt: &[u8]) -> CmdError {
        CmdError::Other(format!(
            "ERR Unsupported option {}",
            c_str_lossy(opt, usize::MAX)
        ))
    }

    /// The error line (without `-` and CRLF).
    pub fn message(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow::{Borrowed, Owned};
        match self {
            CmdError::WrongType => {
                Borrowed("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            CmdError::Syntax => Borrowed("ERR syntax error"),
            CmdError::NotInteger => Borrowed("ERR value is not an integer or out of range"),
            CmdError::NotFloat => Borrowed("ERR value is not a valid float"),
            CmdError::Overflow => Borrowed("ERR increment or decrement would overflow"),
            CmdError::DecrementOverflow => Borrowed("ERR decrement would overflow"),
            CmdError::NanOrInfinity => Borrowed("ERR increment would produce NaN or Infinity"),
            CmdError::NoSuchKey => Borrowed("ERR no such key"),
            CmdError::InvalidExpire(cmd) => {
                Owned(format!("ERR invalid expire time in '{cmd}' command"))
            }
            CmdError::StringTooLong => {
                Borrowed("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
            }
            CmdError::OffsetOutOfRange => Borrowed("ERR offset is out of range"),
            CmdError::InvalidCursor => Borrowed("ERR invalid cursor"),
            CmdError::DbIndexOutOfRange => Borrowed("ERR DB index is out of range"),
            CmdError::Arity(cmd) => Owned(arity_message(cmd)),
            CmdError::UnknownSubcommand { sub, container } => {
                let mut s = String::from("ERR unknown subcommand '");
                s.push_str(&c_str_lossy(sub, 128));
                let _ = write!(
                    s,
                    "'. Try {} HELP.",
                    c_str_lossy(container, usize::MAX).to_uppercase()
                );
                Owned(s)
            }
            CmdError::Other(s) => Owned(s.clone()),
            CmdError::Static(s) => Borrowed(s),
        }
    }
}

/// `ERR wrong number of arguments for '<fullname>' command` (redis `commandCheckArity`).
pub fn arity_message(fullname: &str) -> String {
    format!("ERR wrong number of arguments for '{fullname}' command")
}

/// `ERR unknown command '<name>', with args beginning with: '<a>' '<b>' ` (redis 7.0
/// `commandCheckExistence`): the name is cut at 128 bytes; arguments are appended while the
/// argument text is under 128 bytes, each cut so the text stays within 128 bytes.
pub fn unknown_command_message(argv: &[&[u8]]) -> String {
    let mut args = String::new();
    for a in &argv[1..] {
        if args.len() >= 128 {
            break;
        }
        let room = 128 - args.len();
        args.push('\'');
        args.push_str(&c_str_lossy(a, room));
        args.push_str("' ");
    }
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        c_str_lossy(argv[0], 128),
        args
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_command_text() {
        assert_eq!(
            unknown_command_message(&[b"foo", b"a", b"b"]),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            unknown_command_message(&[b"foo"]),
            "ERR unknown command 'foo', with args beginning with: "
        );
        let long = [b'x'; 200];
        let m = unknown_command_message(&[b"foo", &long, b"next"]);
        assert!(m.ends_with(&format!("'{}' ", "x".repeat(128))));
    }

    #[test]
    fn subcommand_text() {
        let e = CmdError::UnknownSubcommand {
            sub: b"foo".to_vec(),
            container: b"config".to_vec(),
        };
        assert_eq!(
            e.message(),
            "ERR unknown subcommand 'foo'. Try CONFIG HELP."
        );
    }
}
