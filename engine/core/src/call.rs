//! What a command handler receives and returns: [`Call`] and [`Handler`].
//!
//! A leaf module: the command table binds handlers of this type in its rows, the command
//! files implement them, and dispatch builds the [`Call`]; none of them needs the others'
//! modules for it.

use resp::ReplyWriter;

use crate::command::CommandSpec;
use crate::error::CmdError;
use crate::{Client, Engine, Flow};

/// One command invocation as a handler sees it.
pub struct Call<'a> {
    pub client: &'a mut Client,
    /// `argv[0]` is the command name as sent.
    pub argv: &'a [&'a [u8]],
    /// Unix time, µs and ms.
    pub now_us: u64,
    pub now_ms: u64,
    /// The row being run (subcommand row for containers).
    pub spec: &'static CommandSpec,
    /// What the server must do after the reply (QUIT, CLIENT LIST).
    pub flow: Flow,
    out: &'a mut Vec<u8>,
    /// The server's poller for a script that runs past `busy-reply-threshold`
    /// ([`crate::script::BusyPoll`]); `None` where nobody else can be served (tests, wasm).
    pub poller: Option<&'a mut dyn crate::script::BusyPoll>,
    /// A handler that wrote an error reply itself (EVAL's, from the script) says how it counts
    /// (redis `afterErrorReply`); `None`: as the reply shows.
    pub error_reply: Option<ErrorReply>,
}

/// How an error reply a handler wrote counts in INFO (errorstats, `total_error_replies`) and in
/// the command's `failed_calls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// A new error: counted everywhere.
    Counted,
    /// An error already counted where it arose (a script handing back the error of a command
    /// it ran, redis `ERR_REPLY_FLAG_NO_STATS_UPDATE`): only the command's `failed_calls`.
    AlreadyCounted,
}

impl<'a> Call<'a> {
    /// A call of `spec` with `argv`, replying into `out` (dispatch builds these).
    pub(crate) fn new(
        client: &'a mut Client,
        argv: &'a [&'a [u8]],
        now_us: u64,
        spec: &'static CommandSpec,
        out: &'a mut Vec<u8>,
        poller: Option<&'a mut dyn crate::script::BusyPoll>,
    ) -> Self {
        Call {
            client,
            argv,
            now_us,
            now_ms: now_us / 1000,
            spec,
            flow: Flow::Continue,
            out,
            poller,
            error_reply: None,
        }
    }
}

impl Call<'_> {
    /// A writer for the reply, in the client's protocol.
    pub fn w(&mut self) -> ReplyWriter<'_> {
        ReplyWriter::new(self.out, self.client.proto)
    }

    /// The client and the output buffer at once (EXEC runs queued commands into `out`).
    pub fn parts(&mut self) -> (&mut Client, &mut Vec<u8>) {
        (self.client, self.out)
    }
}

/// A command implementation. It writes its reply through [`Call::w`] or returns an error
/// (written by the dispatcher); it never writes part of a reply and then fails.
pub type Handler = fn(&mut Engine, &mut Call<'_>) -> Result<(), CmdError>;

/// redis `addReplyHelp`: a header line then the given lines (which end with the HELP entry),
/// as status replies.
pub fn help(c: &mut Call, container: &str, lines: &[&str]) {
    let mut w = c.w();
    w.array(lines.len() + 1);
    w.simple(
        format!("{container} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:").as_bytes(),
    );
    for l in lines {
        w.simple(l.as_bytes());
    }
}
