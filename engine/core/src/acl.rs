//! Authentication and access control: `requirepass`, ACL users, AUTH, the permission check
//! that runs before every command, ACL SETUSER / GETUSER / DELUSER / USERS / LIST / WHOAMI /
//! CAT / DRYRUN / LOG, and protected mode. Semantics and every error text follow redis 7.0
//! (`acl.c`, `server.c` `processCommand`, `networking.c` `clientAcceptHandler`) and were
//! checked against redis-server 7.0.15.
//!
//! # Model
//!
//! - A [`User`] has: on/off, `nopass` or a list of SHA-256 password hashes (`>pw` stores
//!   `sha256(pw)`, shown as `#<64 hex>`; the plain password is never kept), a command bitmap
//!   (one bit per table row, subcommands included: `+config|get`), allowed first arguments of
//!   otherwise denied commands (`+select|0`), key patterns (`~pat` read+write, `%R~pat`,
//!   `%W~pat`, `allkeys`) and channel patterns (`&pat`, `allchannels`). Selectors
//!   (`(…)`, Redis 7.0) are not supported: such a rule answers `Syntax error`.
//! - The `default` user always exists: `on nopass ~* &* +@all`, unless `requirepass` (or ACL
//!   SETUSER) changes it. `requirepass pw` = `resetpass >pw`; an empty `requirepass` = `nopass`
//!   (redis `ACLUpdateDefaultUserPassword`).
//! - A connection ([`ClientAuth`]) starts as the default user, authenticated iff the default
//!   user is `on` and `nopass` at that moment ([`Engine::init_client`], redis
//!   `clientSetDefaultAuth`); RESET goes back to that state. AUTH / HELLO AUTH switch user.
//!
//! # The check ([`check`], called by dispatch after the arity check, before cluster
//! redirection and MULTI queueing; redis `processCommand` order)
//!
//! 1. Authentication: while the default user needs a password and the connection has not
//!    authenticated, only `no_auth` commands run (AUTH, HELLO, QUIT, RESET); others get
//!    `-NOAUTH Authentication required.`
//! 2. Command: the row's bit (or an allowed first argument) — `-NOPERM this user has no
//!    permissions to run the '<fullname>' command`. `no_auth` commands are always allowed.
//! 3. Keys: each key found by the row's key specs (the helper cluster.rs uses for ownership
//!    checks) must match a pattern carrying the permissions its key spec needs (`access` →
//!    read, `insert`/`update`/`delete` → write) — `-NOPERM … access one of the keys used as
//!    arguments`.
//! 4. Channels: PUBLISH / SUBSCRIBE channels must match a channel pattern; a PSUBSCRIBE
//!    pattern must equal one literally (redis `ACLCheckChannelAgainstList`).
//!
//! While the only user is a fully open `default` ([`Acl::restricted`] false, the state of a
//! server with no password and no users) dispatch skips all of this with one branch.
//! Inside EXEC a queued command that is no longer allowed gets Redis's `-NOPERM ACLs rules
//! changed …` text. A connection whose user was deleted is closed at its next command (Redis
//! closes it at once; the core cannot reach other connections).
//!
//! # Logging
//!
//! Every refusal and failed AUTH is counted (INFO stats `acl_access_denied_auth`, `_cmd`,
//! `_key`, `_channel`, Redis 7.2's names) and recorded in ACL LOG (bounded to 128 entries,
//! grouped like Redis within 60 s). Failed AUTH attempts are also queued as one-line
//! security events (user name and address, never the password) that the server drains with
//! [`Engine::take_security_events`] into its log.
//!
//! # Protected mode
//!
//! [`Engine::protected_mode_refuses`]: with `protected-mode yes` and a default user that
//! needs no password, a connection from a non-loopback address gets [`PROTECTED_MODE_DENIED`]
//! (redis 7.0's text, byte for byte) and is closed; the server asks at accept time.

use std::collections::VecDeque;

use resp::ReplyWriter;

use crate::args;
use crate::command::{self, CommandSpec};
use crate::call::Call;
use crate::error::{CmdError, c_str_lossy};
use crate::{Client, Engine, Flow};

/// The user every connection starts as.
pub const DEFAULT_USER: &str = "default";

/// The user the proxy authenticates to engines with (supervisor-generated password, passed in
/// [`INTERNAL_AUTH_ENV`]; docs/security.md).
pub const INTERNAL_USER: &str = "recached-internal";

/// Environment variable carrying the internal password from the supervisor to its children.
pub const INTERNAL_AUTH_ENV: &str = "RECACHED_INTERNAL_PASSWORD";

pub const NOAUTH: &str = "NOAUTH Authentication required.";
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
pub const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, \
otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select \
the RESP protocol version at the same time";
pub const AUTH_NOPASS: &str = "ERR AUTH <password> called without any password configured for \
the default user. Are you sure your configuration is correct?";
const NOPERM_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";
const NOPERM_CHANNEL: &str =
    "NOPERM this user has no permissions to access one of the channels used as arguments";
const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may \
want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you \
have a Redis configuration file set) in order to store users in the Redis configuration.";

/// redis 7.0 `clientAcceptHandler`'s refusal, written before closing the connection.
pub const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Redis is running in protected mode because \
protected mode is enabled and no password is set for the default user. In this mode connections \
are only accepted from the loopback interface. If you want to connect from external computers to \
Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the \
command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the \
same host the server is running, however MAKE SURE Redis is not publicly accessible from internet \
if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just \
disable the protected mode by editing the Redis configuration file, and setting the protected mode \
option to 'no', and then restarting the server. 3) If you started the server manually just for \
testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password \
for the default user. NOTE: You only need to do one of the above things in order for the server \
to start accepting connections from the outside.\r\n";

/// Redis's categories, in its order (`ACLCommandCategories`): ACL CAT lists them so, and the
/// rule description tries them so.
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// ACL LOG keeps at most this many entries (redis `acllog-max-len` default).
const LOG_MAX_LEN: usize = 128;
/// Similar denials within this many ms are one ACL LOG entry with a count (redis
/// `ACL_LOG_GROUPING_MAX_TIME_DELTA`).
const LOG_GROUPING_MS: u64 = 60_000;
/// Security events waiting for the server's log; more are counted, not kept.
const SECURITY_EVENTS_MAX: usize = 64;

/// Key pattern permissions (redis `ACL_READ_PERMISSION` / `ACL_WRITE_PERMISSION`).
const PERM_R: u8 = 1;
const PERM_W: u8 = 2;
const PERM_RW: u8 = PERM_R | PERM_W;

/// The ACL settings a process starts with (the config file's `requirepass`, `[[users]]`,
/// `protected_mode`); engines and the proxy build their [`Acl`] from the same value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclConfig {
    /// `requirepass`: the default user's password; empty = none (`nopass`).
    pub requirepass: Vec<u8>,
    /// Users: `(name, rules)` with rules as for ACL SETUSER (`on >pw ~app:* +@all`).
    pub users: Vec<(String, Vec<String>)>,
    /// `protected-mode` (Redis default yes).
    pub protected_mode: bool,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig {
            requirepass: Vec::new(),
            users: Vec::new(),
            protected_mode: true,
        }
    }
}

impl AclConfig {
    /// Whether any password or user is configured (a fleet then needs an internal credential).
    pub fn has_auth(&self) -> bool {
        !self.requirepass.is_empty() || !self.users.is_empty()
    }
}

/// Per-connection authentication state.
#[derive(Clone, Debug, Default)]
pub struct ClientAuth {
    /// The user's id (0 = `default`).
    pub user_id: u64,
    /// The user's name; `None` = `default`.
    pub user_name: Option<String>,
    /// AUTH succeeded (or the default user needed no password when the connection started).
    pub authenticated: bool,
}

impl ClientAuth {
    pub fn name(&self) -> &str {
        self.user_name.as_deref().unwrap_or(DEFAULT_USER)
    }
}

/// Sanitize-payload flag (accepted and described, no effect: there is no RESTORE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sanitize {
    Unset,
    On,
    Skip,
}

#[derive(Clone, Debug)]
pub struct User {
    id: u64,
    name: Vec<u8>,
    enabled: bool,
    nopass: bool,
    sanitize: Sanitize,
    /// SHA-256 of each password, in the order added.
    passwords: Vec<[u8; 32]>,
    /// `+@all` was applied (and not undone by `-@all`): "can run future commands".
    allcommands: bool,
    /// One bit per command id ([`CommandIds`]).
    allowed: Vec<u64>,
    /// `(command id, allowed first arguments)` for `+select|0` rules.
    firstargs: Vec<(usize, Vec<Vec<u8>>)>,
    allkeys: bool,
    patterns: Vec<(Vec<u8>, u8)>,
    allchannels: bool,
    channels: Vec<Vec<u8>>,
}

/// Dense ids for table rows: top-level row `ci` is `top[ci]`, its subcommand `si` is
/// `top[ci] + 1 + si`.
#[derive(Clone, Debug)]
struct CommandIds {
    top: Vec<usize>,
    total: usize,
}

impl CommandIds {
    fn new() -> CommandIds {
        let mut top = Vec::with_capacity(command::count());
        let mut next = 0;
        for c in command::all() {
            top.push(next);
            next += 1 + c.subcommands.len();
        }
        CommandIds { top, total: next }
    }

    /// Id of a row handed out by the table (top-level or subcommand).
    fn of(&self, spec: &CommandSpec) -> Option<usize> {
        let (top_name, _) = spec.name.split_once('|').unwrap_or((spec.name, ""));
        let ci = command::lookup_index(top_name.as_bytes())?;
        let top = command::spec_at(ci);
        if std::ptr::eq(top, spec) {
            return Some(self.top[ci]);
        }
        let si = top.subcommands.iter().position(|s| std::ptr::eq(s, spec))?;
        Some(self.top[ci] + 1 + si)
    }
}

/// A row named in a rule: `get`, `config|get` (no deeper nesting).
#[derive(Clone, Copy)]
struct Row {
    spec: &'static CommandSpec,
    id: usize,
    /// Ids of its subcommands: `id + 1 ..= id + subs`.
    subs: usize,
    is_sub: bool,
}

fn row_by_name(ids: &CommandIds, name: &[u8]) -> Option<Row> {
    let mut parts = name.split(|&b| b == b'|');
    let first = parts.next()?;
    let sub = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let ci = command::lookup_index(first)?;
    let top = command::spec_at(ci);
    match sub {
        None => Some(Row {
            spec: top,
            id: ids.top[ci],
            subs: top.subcommands.len(),
            is_sub: false,
        }),
        Some(s) => {
            let si = top
                .subcommands
                .iter()
                .position(|c| c.short_name().as_bytes().eq_ignore_ascii_case(s))?;
            Some(Row {
                spec: &top.subcommands[si],
                id: ids.top[ci] + 1 + si,
                subs: 0,
                is_sub: true,
            })
        }
    }
}

/// Every row, parents before their subcommands, in table order.
fn all_rows(ids: &CommandIds) -> impl Iterator<Item = Row> + '_ {
    command::all().enumerate().flat_map(move |(ci, top)| {
        let id = ids.top[ci];
        std::iter::once(Row {
            spec: top,
            id,
            subs: top.subcommands.len(),
            is_sub: false,
        })
        .chain(top.subcommands.iter().enumerate().map(move |(si, s)| Row {
            spec: s,
            id: id + 1 + si,
            subs: 0,
            is_sub: true,
        }))
    })
}

/// Why ACL SETUSER refused a rule (redis `ACLSetUserStringError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleError {
    Syntax,
    UnknownCommand,
    KeyAfterAll,
    ChannelAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSub,
}

impl RuleError {
    fn text(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::KeyAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list of \
                 channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::FirstArgOfSub => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// redis `ACLStringHasSpaces`: `isspace` or NUL.
fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0))
}

fn parse_hash(hex: &[u8]) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let nib = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = (nib(pair[0])? << 4) | nib(pair[1])?;
    }
    Some(out)
}

fn hex(hash: &[u8; 32]) -> String {
    let mut s = String::with_capacity(64);
    for b in hash {
        s.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        s.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
    }
    s
}

impl User {
    /// A new user as ACL SETUSER creates it: `off resetchannels -@all`, no keys
    /// (redis 7.0 `ACLCreateUser` with `acl-pubsub-default resetchannels`).
    fn new(id: u64, name: &[u8], ids: &CommandIds) -> User {
        User {
            id,
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            sanitize: Sanitize::Unset,
            passwords: Vec::new(),
            allcommands: false,
            allowed: vec![0; ids.total.div_ceil(64)],
            firstargs: Vec::new(),
            allkeys: false,
            patterns: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
        }
    }

    /// redis `ACLChangeSelectorPerm`: the row and all its subcommands; forgets first args.
    fn change_perm(&mut self, row: Row, allow: bool) {
        for id in row.id..=row.id + row.subs {
            self.set_bit(id, allow);
            self.firstargs.retain(|(i, _)| *i != id);
        }
    }

    fn set_category(&mut self, ids: &CommandIds, cat: &str, allow: bool) {
        for row in all_rows(ids) {
            if has_category(row.spec, cat) {
                self.change_perm(row, allow);
            }
        }
    }

    fn set_all_commands(&mut self, allow: bool) {
        let fill = if allow { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|w| *w = fill);
        self.allcommands = allow;
        self.firstargs.clear();
    }

    /// Applies one ACL SETUSER rule (redis `ACLSetUser` + `ACLSetSelector`).
    fn apply(&mut self, ids: &CommandIds, op: &[u8]) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |kw: &str| op.eq_ignore_ascii_case(kw.as_bytes());
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize = Sanitize::Skip;
        } else if is("sanitize-payload") {
            self.sanitize = Sanitize::On;
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.allkeys = false;
            self.patterns.clear();
            self.allchannels = false;
            self.channels.clear();
            self.enabled = false;
            self.sanitize = Sanitize::On;
            self.set_all_commands(false);
        } else if is("clearselectors") {
            // No selectors besides the root one.
        } else if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.patterns.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all_commands(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all_commands(false);
        } else {
            match op[0] {
                b'>' | b'#' => {
                    let hash = if op[0] == b'>' {
                        sha256(&op[1..])
                    } else {
                        parse_hash(&op[1..]).ok_or(RuleError::BadHash)?
                    };
                    if !self.passwords.contains(&hash) {
                        self.passwords.push(hash);
                    }
                    self.nopass = false;
                }
                b'<' | b'!' => {
                    let hash = if op[0] == b'<' {
                        sha256(&op[1..])
                    } else {
                        parse_hash(&op[1..]).ok_or(RuleError::BadHash)?
                    };
                    let pos = self
                        .passwords
                        .iter()
                        .position(|h| *h == hash)
                        .ok_or(RuleError::NoSuchPassword)?;
                    self.passwords.remove(pos);
                }
                b'~' | b'%' => self.add_key_pattern(op)?,
                b'&' => {
                    if self.allchannels {
                        return Err(RuleError::ChannelAfterAll);
                    }
                    let pat = &op[1..];
                    if has_spaces(pat) {
                        return Err(RuleError::Syntax);
                    }
                    if !self.channels.iter().any(|c| c == pat) {
                        self.channels.push(pat.to_vec());
                    }
                }
                b'+' | b'-' if op.get(1) == Some(&b'@') => {
                    let cat = std::str::from_utf8(&op[2..])
                        .ok()
                        .and_then(|c| CATEGORIES.iter().find(|k| k.eq_ignore_ascii_case(c)))
                        .ok_or(RuleError::UnknownCommand)?;
                    self.set_category(ids, cat, op[0] == b'+');
                }
                b'+' => self.allow_command(ids, &op[1..])?,
                b'-' => {
                    let row = row_by_name(ids, &op[1..]).ok_or(RuleError::UnknownCommand)?;
                    self.change_perm(row, false);
                }
                _ => return Err(RuleError::Syntax),
            }
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::KeyAfterAll);
        }
        let (flags, offset) = if op[0] == b'%' {
            let mut flags = 0;
            let mut offset = 1;
            loop {
                match op.get(offset).map(u8::to_ascii_uppercase) {
                    Some(b'R') if flags & PERM_R == 0 => flags |= PERM_R,
                    Some(b'W') if flags & PERM_W == 0 => flags |= PERM_W,
                    Some(b'~') => {
                        offset += 1;
                        break;
                    }
                    // redis: a `%` rule without `~` (e.g. `%RW`) is taken as an empty pattern
                    // with those permissions only if the loop ends; anything else is an error.
                    None => break,
                    _ => return Err(RuleError::Syntax),
                }
                offset += 1;
            }
            (flags, offset)
        } else {
            (PERM_RW, 1)
        };
        let pat = &op[offset.min(op.len())..];
        if has_spaces(pat) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|(p, _)| p == pat) {
            Some((_, f)) => *f |= flags,
            None => self.patterns.push((pat.to_vec(), flags)),
        }
        Ok(())
    }

    /// `+cmd`, `+cmd|sub`, `+cmd|firstarg` (redis `ACLSetSelector`, the `+` branch).
    fn allow_command(&mut self, ids: &CommandIds, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let row = row_by_name(ids, name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(row, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let parent = row_by_name(ids, base).ok_or(RuleError::UnknownCommand)?;
        if parent.is_sub {
            return Err(RuleError::FirstArgOfSub);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if parent.subs > 0 {
            let row = row_by_name(ids, name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(row, true);
        } else {
            // `+select|0`: a first argument of an otherwise denied command.
            let lower = sub.to_ascii_lowercase();
            match self.firstargs.iter_mut().find(|(i, _)| *i == parent.id) {
                Some((_, list)) => {
                    if !list.iter().any(|a| a.eq_ignore_ascii_case(&lower)) {
                        list.push(sub.to_vec());
                    }
                }
                None => self.firstargs.push((parent.id, vec![sub.to_vec()])),
            }
        }
        Ok(())
    }

    /// The password check (redis `ACLCheckUserCredentials`), in constant time per hash.
    fn accepts(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let h = sha256(password);
        self.passwords.iter().fold(false, |ok, p| {
            ok | (p.iter().zip(&h).fold(0, |d, (a, b)| d | (a ^ b)) == 0)
        })
    }

    fn command_allowed(&self, id: usize, spec: &CommandSpec, argv: &[&[u8]]) -> bool {
        if self.bit(id) {
            return true;
        }
        // A first argument allowed by `+cmd|arg` (only for commands without subcommands).
        spec.subcommands.is_empty()
            && argv.len() > 1
            && self
                .firstargs
                .iter()
                .any(|(i, list)| *i == id && list.iter().any(|a| a.eq_ignore_ascii_case(argv[1])))
    }

    fn key_allowed(&self, key: &[u8], need: u8) -> bool {
        self.allkeys
            || self
                .patterns
                .iter()
                .any(|(p, f)| f & need == need && crate::glob::matches(p, key, false))
    }

    fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.allchannels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p == channel
                } else {
                    crate::glob::matches(p, channel, false)
                }
            })
    }

    fn fully_open(&self) -> bool {
        self.enabled
            && self.nopass
            && self.allcommands
            && self.allkeys
            && self.allchannels
            && self.allowed.iter().all(|w| *w == u64::MAX)
    }

    // ----- description (ACL LIST / GETUSER) -----

    fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Sanitize::Skip => f.push("skip-sanitize-payload"),
            Sanitize::On => f.push("sanitize-payload"),
            Sanitize::Unset => {}
        }
        f
    }

    fn keys_text(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        let mut parts = Vec::new();
        for (p, f) in &self.patterns {
            let prefix = match *f {
                PERM_R => "%R~",
                PERM_W => "%W~",
                _ => "~",
            };
            parts.push(format!("{prefix}{}", String::from_utf8_lossy(p)));
        }
        parts.join(" ")
    }

    fn channels_text(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        let parts: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        parts.join(" ")
    }

    /// redis `ACLDescribeSelectorCommandRules`: `+@all`/`-@all`, then the categories that fit
    /// best (greedy, in [`CATEGORIES`] order on ties), then single commands (table order),
    /// so that applying the text to a new user gives exactly this bitmap.
    fn command_rules(&self, ids: &CommandIds) -> String {
        let additive = !self.allcommands;
        let mut fake = User::new(0, b"", ids);
        let mut rules = String::new();
        if additive {
            rules.push_str("-@all ");
        } else {
            rules.push_str("+@all ");
            fake.set_all_commands(true);
        }
        // `temp` has the categories already emitted undone, so later choices count only
        // what is still left to explain.
        let mut temp = self.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, cat) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(ids, cat);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.set_category(ids, CATEGORIES[j], additive);
            temp.set_category(ids, CATEGORIES[j], !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for row in all_rows(ids) {
            let user_bit = self.bit(row.id);
            if user_bit != fake.bit(row.id) {
                rules.push(if user_bit { '+' } else { '-' });
                rules.push_str(row.spec.name);
                rules.push(' ');
                fake.change_perm(row, user_bit);
            }
            if !user_bit && let Some((_, list)) = self.firstargs.iter().find(|(i, _)| *i == row.id)
            {
                for a in list {
                    rules.push('+');
                    rules.push_str(row.spec.name);
                    rules.push('|');
                    rules.push_str(&String::from_utf8_lossy(a));
                    rules.push(' ');
                }
            }
        }
        rules.pop();
        rules
    }

    fn count_category(&self, ids: &CommandIds, cat: &str) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for row in all_rows(ids) {
            if has_category(row.spec, cat) {
                if self.bit(row.id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// The ACL LIST line (redis `ACLDescribeUser`), without the leading `user <name> `.
    fn describe(&self, ids: &CommandIds) -> String {
        let mut s = String::new();
        for f in self.flags() {
            s.push_str(f);
            s.push(' ');
        }
        for p in &self.passwords {
            s.push('#');
            s.push_str(&hex(p));
            s.push(' ');
        }
        if self.allkeys {
            s.push_str("~* ");
        } else {
            let keys = self.keys_text();
            if !self.patterns.is_empty() {
                s.push_str(&keys);
                s.push(' ');
            }
        }
        if self.allchannels {
            s.push_str("&* ");
        } else {
            s.push_str("resetchannels ");
            for c in &self.channels {
                s.push('&');
                s.push_str(&String::from_utf8_lossy(c));
                s.push(' ');
            }
        }
        s.push_str(&self.command_rules(ids));
        s
    }
}

fn has_category(spec: &CommandSpec, cat: &str) -> bool {
    spec.acl_categories
        .iter()
        .any(|c| c.strip_prefix('@') == Some(cat))
}

/// Why a command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not authenticated (`-NOAUTH`).
    NoAuth,
    /// The connection's user was deleted: close the connection.
    UserGone,
    Command,
    /// The key at this argv position.
    Key(usize),
    /// The channel at this argv position.
    Channel(usize),
}

/// INFO stats counters (Redis 7.2 names `acl_access_denied_*`).
#[derive(Clone, Debug, Default)]
pub struct AclStats {
    pub denied_auth: u64,
    pub denied_cmd: u64,
    pub denied_key: u64,
    pub denied_channel: u64,
}

#[derive(Clone, Debug)]
struct LogEntry {
    count: u64,
    reason: &'static str,
    context: &'static str,
    object: String,
    username: String,
    /// When the entry was created or last matched, Unix ms.
    time_ms: u64,
    client_info: String,
}

/// Users, the permission check's state, ACL LOG and counters.
#[derive(Clone, Debug)]
pub struct Acl {
    /// Sorted by name (ACL LIST / USERS order); `default` always present.
    users: Vec<User>,
    next_id: u64,
    restricted: bool,
    /// A user was deleted: connections may still name it, so the check stays on (it closes
    /// them) even if only an open `default` remains.
    deleted_any: bool,
    ids: CommandIds,
    pub stats: AclStats,
    log: VecDeque<LogEntry>,
    security_events: Vec<String>,
    security_events_dropped: u64,
    /// `protected-mode`.
    pub protected_mode: bool,
}

impl Default for Acl {
    fn default() -> Self {
        Acl::new()
    }
}

impl Acl {
    /// Only the open default user (`on nopass ~* &* +@all`).
    pub fn new() -> Acl {
        let ids = CommandIds::new();
        let mut default = User::new(0, DEFAULT_USER.as_bytes(), &ids);
        default.enabled = true;
        default.nopass = true;
        default.allkeys = true;
        default.allchannels = true;
        default.set_all_commands(true);
        Acl {
            users: vec![default],
            next_id: 1,
            restricted: false,
            deleted_any: false,
            ids,
            stats: AclStats::default(),
            log: VecDeque::new(),
            security_events: Vec::new(),
            security_events_dropped: 0,
            protected_mode: true,
        }
    }

    /// The ACL described by `cfg`: `requirepass`, then each user's rules in order.
    /// Errors name the user and the rule, like ACL SETUSER's.
    pub fn from_config(cfg: &AclConfig) -> Result<Acl, String> {
        let mut acl = Acl::new();
        acl.protected_mode = cfg.protected_mode;
        acl.set_requirepass(&cfg.requirepass);
        for (name, rules) in &cfg.users {
            let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
            acl.set_user(name.as_bytes(), &rules)
                .map_err(|e| format!("user {name:?}: {e}"))?;
        }
        Ok(acl)
    }

    /// False while the only user is the fully open default one: dispatch then skips
    /// [`check`] entirely.
    pub fn restricted(&self) -> bool {
        self.restricted
    }

    fn refresh(&mut self) {
        self.restricted =
            self.deleted_any || !(self.users.len() == 1 && self.users[0].fully_open());
    }

    fn default_user(&self) -> &User {
        self.user(DEFAULT_USER.as_bytes())
            .expect("the default user always exists")
    }

    fn user(&self, name: &[u8]) -> Option<&User> {
        self.users
            .binary_search_by(|u| u.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.users[i])
    }

    fn user_by_id(&self, id: u64) -> Option<&User> {
        self.users.iter().find(|u| u.id == id)
    }

    /// Whether a connection that has not authenticated must do so (redis `authRequired`).
    pub fn default_needs_auth(&self) -> bool {
        let d = self.default_user();
        !d.nopass || !d.enabled
    }

    /// Whether the default user is `nopass` (AUTH with only a password is then an error).
    pub fn default_nopass(&self) -> bool {
        self.default_user().nopass
    }

    /// A new connection's state (redis `clientSetDefaultAuth`).
    pub fn default_auth(&self) -> ClientAuth {
        ClientAuth {
            user_id: 0,
            user_name: None,
            authenticated: !self.default_needs_auth(),
        }
    }

    /// Whether protected mode refuses a connection from a non-loopback address.
    pub fn protected_mode_refuses_remote(&self) -> bool {
        self.protected_mode && self.default_user().nopass
    }

    /// redis `ACLUpdateDefaultUserPassword`: `resetpass` then `>pw`, or `nopass` when empty.
    pub fn set_requirepass(&mut self, pass: &[u8]) {
        let i = self
            .users
            .iter()
            .position(|u| u.name == DEFAULT_USER.as_bytes())
            .expect("the default user always exists");
        let ids = self.ids.clone();
        let u = &mut self.users[i];
        u.apply(&ids, b"resetpass").expect("resetpass is valid");
        if pass.is_empty() {
            u.apply(&ids, b"nopass").expect("nopass is valid");
        } else {
            let mut op = b">".to_vec();
            op.extend_from_slice(pass);
            u.apply(&ids, &op).expect(">password is valid");
        }
        self.refresh();
    }

    /// ACL SETUSER: all rules or none (applied to a copy first, like Redis). Creates the
    /// user if needed. The error is the text after `ERR `.
    pub fn set_user(&mut self, name: &[u8], rules: &[&[u8]]) -> Result<(), String> {
        if has_spaces(name) {
            return Err("Usernames can't contain spaces or null characters".into());
        }
        let pos = self.users.binary_search_by(|u| u.name.as_slice().cmp(name));
        let mut user = match pos {
            Ok(i) => self.users[i].clone(),
            Err(_) => User::new(self.next_id, name, &self.ids),
        };
        for op in rules {
            if op.first() == Some(&b'(') {
                // Selectors (Redis 7.0) are not supported: refused rather than half-applied.
                return Err(format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    c_str_lossy(op, usize::MAX),
                    RuleError::Syntax.text()
                ));
            }
            user.apply(&self.ids, op).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    c_str_lossy(op, usize::MAX),
                    e.text()
                )
            })?;
        }
        match pos {
            Ok(i) => self.users[i] = user,
            Err(i) => {
                self.next_id += 1;
                self.users.insert(i, user);
            }
        }
        self.refresh();
        Ok(())
    }

    /// ACL DELUSER: how many of `names` existed. `default` is refused.
    pub fn delete_users(&mut self, names: &[&[u8]]) -> Result<usize, CmdError> {
        if names.iter().any(|n| *n == DEFAULT_USER.as_bytes()) {
            return Err(CmdError::Static("ERR The 'default' user cannot be removed"));
        }
        let before = self.users.len();
        self.users.retain(|u| !names.contains(&u.name.as_slice()));
        let deleted = before - self.users.len();
        self.deleted_any |= deleted > 0;
        self.refresh();
        Ok(deleted)
    }

    /// AUTH / HELLO AUTH: switches `auth` to `user` if the password fits; else counts and
    /// logs the failure (`client` feeds ACL LOG's client-info) and leaves `auth` alone.
    pub fn authenticate(
        &mut self,
        auth: &mut ClientAuth,
        user: &[u8],
        password: &[u8],
        who: &Who,
    ) -> bool {
        match self.user(user) {
            Some(u) if u.accepts(password) => {
                auth.user_id = u.id;
                auth.user_name = (u.id != 0).then(|| String::from_utf8_lossy(&u.name).into_owned());
                auth.authenticated = true;
                true
            }
            _ => {
                self.stats.denied_auth += 1;
                let name = String::from_utf8_lossy(user).into_owned();
                self.add_log("auth", who, "AUTH".into(), name.clone());
                let shown: String = name.chars().take(128).collect();
                self.security_event(format!(
                    "Failed AUTH for user '{}' from {}",
                    shown.escape_debug(),
                    who.addr
                ));
                false
            }
        }
    }

    fn security_event(&mut self, line: String) {
        if self.security_events.len() < SECURITY_EVENTS_MAX {
            self.security_events.push(line);
        } else {
            self.security_events_dropped += 1;
        }
    }

    /// Moves pending security events (failed AUTH lines) into `into`; when some were dropped
    /// for the bound, a last line says how many.
    pub fn take_security_events(&mut self, into: &mut Vec<String>) {
        into.append(&mut self.security_events);
        if self.security_events_dropped > 0 {
            into.push(format!(
                "... and {} more failed AUTH attempts",
                self.security_events_dropped
            ));
            self.security_events_dropped = 0;
        }
    }

    /// The permission check (see the module docs). `Ok` = may run.
    pub fn check(
        &self,
        auth: &ClientAuth,
        spec: &CommandSpec,
        argv: &[&[u8]],
    ) -> Result<(), Denied> {
        if !auth.authenticated && self.default_needs_auth() && !spec.has_flag(crate::command::Flags::NO_AUTH) {
            return Err(Denied::NoAuth);
        }
        let Some(user) = self.user_by_id(auth.user_id) else {
            return Err(Denied::UserGone);
        };
        self.user_check(user, spec, argv)
    }

    /// Command, key and channel permissions of `user` (redis `ACLSelectorCheckCmd`).
    fn user_check(&self, user: &User, spec: &CommandSpec, argv: &[&[u8]]) -> Result<(), Denied> {
        if !user.allcommands || !user.allowed.iter().all(|w| *w == u64::MAX) {
            let allowed = spec.has_flag(crate::command::Flags::NO_AUTH)
                || self
                    .ids
                    .of(spec)
                    .is_some_and(|id| user.command_allowed(id, spec, argv));
            if !allowed {
                return Err(Denied::Command);
            }
        }
        if !user.allkeys && spec.has_keys() {
            check_keys(user, spec, argv)?;
        }
        if !user.allchannels {
            let (from, is_pattern) = match spec.name {
                "publish" | "spublish" => (Some(1..2.min(argv.len())), false),
                "subscribe" | "ssubscribe" => (Some(1..argv.len()), false),
                "psubscribe" => (Some(1..argv.len()), true),
                _ => (None, false),
            };
            if let Some(range) = from {
                for i in range {
                    if !user.channel_allowed(argv[i], is_pattern) {
                        return Err(Denied::Channel(i));
                    }
                }
            }
        }
        Ok(())
    }

    /// Counts a refusal, records it in ACL LOG, and gives the error line (without `-`).
    pub fn refuse(
        &mut self,
        denied: Denied,
        auth: &ClientAuth,
        spec: &CommandSpec,
        argv: &[&[u8]],
        who: &Who,
    ) -> String {
        let (reason, object, msg) = match denied {
            Denied::NoAuth | Denied::UserGone => return NOAUTH.to_string(),
            Denied::Command => {
                self.stats.denied_cmd += 1;
                (
                    "command",
                    spec.name.to_string(),
                    format!(
                        "NOPERM this user has no permissions to run the '{}' command",
                        spec.name
                    ),
                )
            }
            Denied::Key(i) => {
                self.stats.denied_key += 1;
                ("key", lossy(argv[i]), NOPERM_KEY.to_string())
            }
            Denied::Channel(i) => {
                self.stats.denied_channel += 1;
                ("channel", lossy(argv[i]), NOPERM_CHANNEL.to_string())
            }
        };
        self.add_log(reason, who, object, auth.name().to_string());
        if who.in_exec {
            // redis `execCommand`: the rules changed after the command was queued.
            let why = match denied {
                Denied::Command => "no permission to execute the command or subcommand",
                Denied::Key(_) => "no permission to touch the specified keys",
                _ => "no permission to access one of the channels used as arguments",
            };
            return format!(
                "NOPERM ACLs rules changed between the moment the transaction was accumulated \
                 and the EXEC call. This command is no longer allowed for the following reason: \
                 {why}"
            );
        }
        msg
    }

    fn add_log(&mut self, reason: &'static str, who: &Who, object: String, username: String) {
        let context = if who.in_multi { "multi" } else { "toplevel" };
        let found = self.log.iter().position(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && who.now_ms.saturating_sub(e.time_ms) <= LOG_GROUPING_MS
        });
        let entry = match found.and_then(|i| self.log.remove(i)) {
            Some(mut e) => {
                e.count += 1;
                e.time_ms = who.now_ms;
                e.client_info = who.client_info.clone();
                e
            }
            None => LogEntry {
                count: 1,
                reason,
                context,
                object,
                username,
                time_ms: who.now_ms,
                client_info: who.client_info.clone(),
            },
        };
        self.log.push_front(entry);
        self.log.truncate(LOG_MAX_LEN);
    }

    /// Names, sorted.
    pub fn user_names(&self) -> Vec<String> {
        self.users
            .iter()
            .map(|u| String::from_utf8_lossy(&u.name).into_owned())
            .collect()
    }

    /// ACL LIST lines.
    pub fn list(&self) -> Vec<String> {
        self.users
            .iter()
            .map(|u| {
                format!(
                    "user {} {}",
                    String::from_utf8_lossy(&u.name),
                    u.describe(&self.ids)
                )
            })
            .collect()
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Key permissions (see the module docs); `Err(Denied::Key(pos))` names the first refused key.
/// Keys and their flags come from the one extractor (redis `ACLSelectorCheckCmd` →
/// `getKeysFromCommandWithSpecs`): a request whose keys cannot be found checks none, and its
/// handler answers the real error.
fn check_keys(user: &User, spec: &CommandSpec, argv: &[&[u8]]) -> Result<(), Denied> {
    for k in crate::command::keys(spec, argv).as_slice() {
        if !user.key_allowed(argv[k.pos], key_spec_perms(k.flags)) {
            return Err(Denied::Key(k.pos));
        }
    }
    Ok(())
}

/// redis `ACLSelectorCheckKey`: `access` needs read; `insert`, `update`, `delete` need write.
pub fn key_spec_perms(flags: crate::command::KeyFlags) -> u8 {
    use crate::command::KeyFlags;
    let mut need = 0;
    if flags.contains(KeyFlags::ACCESS) {
        need |= PERM_R;
    }
    if flags.intersects(KeyFlags::INSERT | KeyFlags::UPDATE | KeyFlags::DELETE) {
        need |= PERM_W;
    }
    need
}

/// Who is asking, for ACL LOG entries and security events.
pub struct Who {
    pub addr: String,
    pub client_info: String,
    pub now_ms: u64,
    pub in_multi: bool,
    pub in_exec: bool,
}

impl Who {
    pub fn of(client: &Client, now_us: u64) -> Who {
        Who {
            addr: client.addr.clone(),
            client_info: crate::cmd::connection::client_info_line(client, now_us),
            now_ms: now_us / 1000,
            in_multi: client.tx.in_multi(),
            in_exec: client.tx.in_exec,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Engine side

/// Dispatch's hook: `Ok` = run; else the connection gets `Err`'s error line (or, for
/// `None`, is closed without a reply: its user was deleted).
pub(crate) fn check(
    e: &mut Engine,
    client: &mut Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_us: u64,
) -> Result<(), Option<String>> {
    match e.acl.check(&client.auth, spec, argv) {
        Ok(()) => Ok(()),
        Err(Denied::UserGone) => Err(None),
        Err(denied) => {
            let who = Who::of(client, now_us);
            Err(Some(e.acl.refuse(denied, &client.auth, spec, argv, &who)))
        }
    }
}

impl Engine {
    /// Sets a new connection's authentication state; the server calls it once per accepted
    /// connection (before its first command).
    pub fn init_client(&self, client: &mut Client) {
        client.auth = self.acl.default_auth();
    }

    /// Protected mode: whether a connection from a non-loopback peer must be refused with
    /// [`PROTECTED_MODE_DENIED`] (the server knows the peer; redis `clientAcceptHandler`).
    pub fn protected_mode_refuses(&self, peer_is_loopback: bool) -> bool {
        !peer_is_loopback && self.acl.protected_mode_refuses_remote()
    }

    /// Failed AUTH lines for the server's log (see [`Acl::take_security_events`]).
    pub fn take_security_events(&mut self, into: &mut Vec<String>) {
        self.acl.take_security_events(into);
    }

    /// Whether [`take_security_events`](Self::take_security_events) has anything.
    pub fn has_security_events(&self) -> bool {
        !self.acl.security_events.is_empty() || self.acl.security_events_dropped > 0
    }
}

/// After CONFIG SET: protected mode follows its flag; the default user's passwords follow
/// `requirepass` when it was set (only then, so ACL SETUSER default's passwords survive
/// other settings).
pub(crate) fn apply_config(e: &mut Engine, requirepass_set: bool) {
    e.acl.protected_mode = e.config.acl.protected_mode;
    if requirepass_set {
        let pass = e.config.acl.requirepass.clone();
        e.acl.set_requirepass(&pass);
    }
}

/// `AUTH [username] password` (redis `authCommand`).
pub fn auth(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let (user, pass) = if argv.len() == 2 {
        if e.acl.default_nopass() {
            return Err(CmdError::Static(AUTH_NOPASS));
        }
        (DEFAULT_USER.as_bytes(), argv[1])
    } else {
        (argv[1], argv[2])
    };
    let who = Who::of(c.client, c.now_us);
    if e.acl.authenticate(&mut c.client.auth, user, pass, &who) {
        c.w().ok();
        Ok(())
    } else {
        Err(CmdError::Static(WRONGPASS))
    }
}

/// ACL LOAD / ACL SAVE: recached has no ACL file.
pub fn acl_no_file(_e: &mut Engine, _c: &mut Call) -> Result<(), CmdError> {
    Err(CmdError::Static(NO_ACL_FILE))
}

pub fn acl_whoami(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let name = c.client.auth.name().to_string();
    c.w().bulk(name.as_bytes());
    Ok(())
}

pub fn acl_users(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    write_users(&e.acl, &mut c.w());
    Ok(())
}

pub fn acl_list(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    write_list(&e.acl, &mut c.w());
    Ok(())
}

pub fn acl_setuser(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let rules = &c.argv[3..];
    e.acl
        .set_user(c.argv[2], rules)
        .map_err(|m| CmdError::Other(format!("ERR {m}")))?;
    c.w().ok();
    Ok(())
}

pub fn acl_getuser(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    write_getuser(&e.acl, c.argv[2], &mut c.w());
    Ok(())
}

pub fn acl_deluser(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = e.acl.delete_users(&c.argv[2..])?;
    if e.acl.user_by_id(c.client.auth.user_id).is_none() {
        // Redis closes the connections of a deleted user, this one after the reply.
        c.flow = Flow::Close;
    }
    c.w().integer(n as i64);
    Ok(())
}

pub fn acl_cat(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let arg = c.argv.get(2).copied();
    write_cat(arg, &mut c.w())
}

pub fn acl_dryrun(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let text = dryrun(&e.acl, &c.argv[2..])?;
    match text {
        None => c.w().ok(),
        Some(t) => c.w().bulk(t.as_bytes()),
    }
    Ok(())
}

pub fn acl_log(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut count = 10usize;
    if let Some(a) = c.argv.get(2) {
        if args::is(a, "reset") {
            e.acl.log.clear();
            c.w().ok();
            return Ok(());
        }
        let n = args::int_arg(a)?;
        count = usize::try_from(n.max(0)).unwrap_or(0);
    }
    let now_ms = c.now_ms;
    let entries: Vec<LogEntry> = e.acl.log.iter().take(count).cloned().collect();
    let mut w = c.w();
    w.array(entries.len());
    for en in &entries {
        w.map(7);
        w.bulk(b"count");
        w.integer(en.count as i64);
        w.bulk(b"reason");
        w.bulk(en.reason.as_bytes());
        w.bulk(b"context");
        w.bulk(en.context.as_bytes());
        w.bulk(b"object");
        w.bulk(en.object.as_bytes());
        w.bulk(b"username");
        w.bulk(en.username.as_bytes());
        w.bulk(b"age-seconds");
        let mut age = Vec::new();
        crate::types::zset::score::fmt_reply(
            now_ms.saturating_sub(en.time_ms) as f64 / 1000.0,
            &mut age,
        );
        w.double_text(&age);
        w.bulk(b"client-info");
        w.bulk(en.client_info.as_bytes());
    }
    Ok(())
}

pub fn acl_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    crate::call::help(c, "ACL", HELP_LINES);
    Ok(())
}

/// ACL HELP lines (Redis's, minus GENPASS, which would need a system random source).
pub const HELP_LINES: &[&str] = &[
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

// ----- reply writers shared with the proxy -----

/// ACL USERS.
pub fn write_users(acl: &Acl, w: &mut ReplyWriter<'_>) {
    let names = acl.user_names();
    w.array(names.len());
    for n in &names {
        w.bulk(n.as_bytes());
    }
}

/// ACL LIST.
pub fn write_list(acl: &Acl, w: &mut ReplyWriter<'_>) {
    let lines = acl.list();
    w.array(lines.len());
    for l in &lines {
        w.bulk(l.as_bytes());
    }
}

/// ACL GETUSER: a map, or null for an unknown user.
pub fn write_getuser(acl: &Acl, name: &[u8], w: &mut ReplyWriter<'_>) {
    let Some(u) = acl.user(name) else {
        w.null();
        return;
    };
    w.map(6);
    w.bulk(b"flags");
    let flags = u.flags();
    w.set(flags.len());
    for f in flags {
        w.bulk(f.as_bytes());
    }
    w.bulk(b"passwords");
    w.array(u.passwords.len());
    for p in &u.passwords {
        w.bulk(hex(p).as_bytes());
    }
    w.bulk(b"commands");
    w.bulk(u.command_rules(&acl.ids).as_bytes());
    w.bulk(b"keys");
    w.bulk(u.keys_text().as_bytes());
    w.bulk(b"channels");
    w.bulk(u.channels_text().as_bytes());
    w.bulk(b"selectors");
    w.array(0);
}

/// ACL CAT [category].
pub fn write_cat(category: Option<&[u8]>, w: &mut ReplyWriter<'_>) -> Result<(), CmdError> {
    let Some(arg) = category else {
        w.array(CATEGORIES.len());
        for c in CATEGORIES {
            w.bulk(c.as_bytes());
        }
        return Ok(());
    };
    let cat = std::str::from_utf8(arg)
        .ok()
        .and_then(|a| CATEGORIES.iter().find(|c| c.eq_ignore_ascii_case(a)))
        .ok_or_else(|| {
            CmdError::Other(format!(
                "ERR Unknown category '{}'",
                c_str_lossy(arg, usize::MAX)
            ))
        })?;
    let ids = CommandIds::new();
    let names: Vec<&str> = all_rows(&ids)
        .filter(|r| has_category(r.spec, cat))
        .map(|r| r.spec.name)
        .collect();
    w.array(names.len());
    for n in names {
        w.bulk(n.as_bytes());
    }
    Ok(())
}

/// ACL DRYRUN username command [arg …]: `None` = allowed, else Redis's verbose reason.
pub fn dryrun(acl: &Acl, argv: &[&[u8]]) -> Result<Option<String>, CmdError> {
    let name = argv[0];
    let user = acl.user(name).ok_or_else(|| {
        CmdError::Other(format!(
            "ERR User '{}' not found",
            c_str_lossy(name, usize::MAX)
        ))
    })?;
    let cmd = &argv[1..];
    let not_found = || {
        CmdError::Other(format!(
            "ERR Command '{}' not found",
            c_str_lossy(cmd[0], usize::MAX)
        ))
    };
    let top = command::lookup(cmd[0]).ok_or_else(not_found)?;
    let spec = if !top.subcommands.is_empty() && cmd.len() >= 2 {
        top.subcommand(cmd[1]).ok_or_else(not_found)?
    } else {
        top
    };
    if !crate::dispatch::arity_ok(spec, cmd.len()) {
        return Err(CmdError::Arity(spec.name));
    }
    Ok(match acl.user_check(user, spec, cmd) {
        Ok(()) => None,
        Err(Denied::Key(i)) => Some(format!(
            "This user has no permissions to access the '{}' key",
            lossy(cmd[i])
        )),
        Err(Denied::Channel(i)) => Some(format!(
            "This user has no permissions to access the '{}' channel",
            lossy(cmd[i])
        )),
        Err(_) => Some(format!(
            "This user has no permissions to run the '{}' command",
            spec.name
        )),
    })
}

// ---------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), for password hashes: ACL LIST shows `#<sha256 hex>` like Redis, and
// the core stays free of dependencies that would complicate the wasm build.

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(v);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_vectors() {
        assert_eq!(
            hex(&sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Two blocks; and Redis's own hash of "pw" (ACL LIST after `>pw`).
        assert_eq!(
            hex(&sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            hex(&sha256(b"pw")),
            "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
        );
    }

    fn acl_with(rules: &[&str]) -> Acl {
        let mut acl = Acl::new();
        let r: Vec<&[u8]> = rules.iter().map(|s| s.as_bytes()).collect();
        acl.set_user(b"u", &r).unwrap();
        acl
    }

    fn line(acl: &Acl, name: &str) -> String {
        acl.list()
            .into_iter()
            .find(|l| l.starts_with(&format!("user {name} ")))
            .unwrap()
    }

    #[test]
    fn descriptions_match_redis() {
        let acl = Acl::new();
        assert_eq!(acl.list(), vec!["user default on nopass ~* &* +@all"]);
        assert!(!acl.restricted());
        let acl = acl_with(&[]);
        assert_eq!(line(&acl, "u"), "user u off resetchannels -@all");
        assert!(acl.restricted());
        let acl = acl_with(&["on", ">pw", "~app:*", "+@read"]);
        assert_eq!(
            line(&acl, "u"),
            "user u on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 \
             ~app:* resetchannels -@all +@read"
        );
        let acl = acl_with(&["+@all", "-get", "+@string"]);
        assert_eq!(line(&acl, "u"), "user u off resetchannels +@all");
        let acl = acl_with(&["+config", "-config|set"]);
        assert_eq!(
            line(&acl, "u"),
            "user u off resetchannels -@all +config -config|set"
        );
        let acl = acl_with(&["+select|0"]);
        assert_eq!(line(&acl, "u"), "user u off resetchannels -@all +select|0");
        let acl = acl_with(&["&x", "resetchannels", "&y"]);
        assert_eq!(line(&acl, "u"), "user u off resetchannels &y -@all");
        let acl = acl_with(&["reset"]);
        assert_eq!(
            line(&acl, "u"),
            "user u off sanitize-payload resetchannels -@all"
        );
        let acl = acl_with(&["%R~a", "%W~b", "%RW~c", "~d", "allchannels", "+ping"]);
        assert_eq!(line(&acl, "u"), "user u off %R~a %W~b ~c ~d &* -@all +ping");
    }

    #[test]
    fn rule_errors_match_redis() {
        let mut acl = Acl::new();
        let err = |acl: &mut Acl, r: &str| acl.set_user(b"x", &[r.as_bytes()]).unwrap_err();
        assert_eq!(
            err(&mut acl, "badrule"),
            "Error in ACL SETUSER modifier 'badrule': Syntax error"
        );
        assert!(err(&mut acl, "+nonexist").ends_with("Unknown command or category name in ACL"));
        assert!(err(&mut acl, "+@nonexist").ends_with("Unknown command or category name in ACL"));
        assert!(err(&mut acl, "+select|0|1").ends_with("Unknown command or category name in ACL"));
        assert!(
            err(&mut acl, "+config|get|x").ends_with("first-arg of a subcommand is not supported")
        );
        assert!(err(&mut acl, "+config|").ends_with("Syntax error"));
        assert!(err(&mut acl, "-select|0").ends_with("Unknown command or category name in ACL"));
        assert!(err(&mut acl, "#abc").ends_with("only lowercase hexadecimal characters"));
        assert!(err(&mut acl, "<nothere").ends_with("does not exist"));
        assert!(err(&mut acl, "%X~a").ends_with("Syntax error"));
        // A failed SETUSER creates nothing.
        assert_eq!(acl.user_names(), vec!["default"]);
        acl.set_user(b"x", &[b"allkeys"]).unwrap();
        assert!(err(&mut acl, "~y").contains("'allkeys' flag"));
        assert_eq!(
            acl.set_user(b"a b", &[]).unwrap_err(),
            "Usernames can't contain spaces or null characters"
        );
    }

    fn who() -> Who {
        Who {
            addr: "127.0.0.1:1".into(),
            client_info: String::new(),
            now_ms: 0,
            in_multi: false,
            in_exec: false,
        }
    }

    #[test]
    fn authentication_and_permissions() {
        let mut acl = Acl::new();
        acl.set_requirepass(b"sec");
        acl.set_user(b"app", &[b"on", b">pw", b"~app:*", b"+@all"])
            .unwrap();
        let mut auth = acl.default_auth();
        assert!(!auth.authenticated);
        let get = command::lookup(b"get").unwrap();
        let set = command::lookup(b"set").unwrap();
        let ping = command::lookup(b"auth").unwrap();
        assert_eq!(acl.check(&auth, get, &[b"get", b"k"]), Err(Denied::NoAuth));
        assert_eq!(acl.check(&auth, ping, &[b"auth", b"x"]), Ok(()));
        assert!(!acl.authenticate(&mut auth, b"app", b"bad", &who()));
        assert_eq!(acl.stats.denied_auth, 1);
        let mut events = Vec::new();
        acl.take_security_events(&mut events);
        assert_eq!(events, vec!["Failed AUTH for user 'app' from 127.0.0.1:1"]);
        assert!(acl.authenticate(&mut auth, b"app", b"pw", &who()));
        assert_eq!(auth.name(), "app");
        assert_eq!(acl.check(&auth, get, &[b"get", b"app:1"]), Ok(()));
        assert_eq!(
            acl.check(&auth, set, &[b"set", b"other:1", b"v"]),
            Err(Denied::Key(1))
        );
        let mget = command::lookup(b"mget").unwrap();
        assert_eq!(
            acl.check(&auth, mget, &[b"mget", b"app:1", b"other:2"]),
            Err(Denied::Key(2))
        );
        // Read-only pattern: GET passes, SET does not.
        acl.set_user(b"ro", &[b"on", b"nopass", b"%R~r:*", b"+@all"])
            .unwrap();
        assert!(acl.authenticate(&mut auth, b"ro", b"", &who()));
        assert_eq!(acl.check(&auth, get, &[b"get", b"r:1"]), Ok(()));
        assert_eq!(
            acl.check(&auth, set, &[b"set", b"r:1", b"v"]),
            Err(Denied::Key(1))
        );
        // Commands and first args.
        acl.set_user(b"c", &[b"on", b"nopass", b"allkeys", b"+get", b"+select|0"])
            .unwrap();
        assert!(acl.authenticate(&mut auth, b"c", b"", &who()));
        let select = command::lookup(b"select").unwrap();
        assert_eq!(acl.check(&auth, get, &[b"get", b"x"]), Ok(()));
        assert_eq!(
            acl.check(&auth, set, &[b"set", b"x", b"v"]),
            Err(Denied::Command)
        );
        assert_eq!(acl.check(&auth, select, &[b"select", b"0"]), Ok(()));
        assert_eq!(
            acl.check(&auth, select, &[b"select", b"1"]),
            Err(Denied::Command)
        );
        // A deleted user's connection is closed.
        assert_eq!(acl.delete_users(&[b"c", b"nobody"]), Ok(1));
        assert_eq!(
            acl.check(&auth, get, &[b"get", b"x"]),
            Err(Denied::UserGone)
        );
        // ... even once only an open default user is left.
        let mut open = Acl::new();
        open.set_user(b"t", &[b"on", b"nopass", b"allkeys", b"+@all"])
            .unwrap();
        let mut t = open.default_auth();
        assert!(open.authenticate(&mut t, b"t", b"", &who()));
        assert_eq!(open.delete_users(&[b"t"]), Ok(1));
        assert!(open.restricted());
        assert_eq!(open.check(&t, get, &[b"get", b"x"]), Err(Denied::UserGone));
        // Disabled users cannot authenticate.
        acl.set_user(b"app", &[b"off"]).unwrap();
        assert!(!acl.authenticate(&mut auth, b"app", b"pw", &who()));
    }

    #[test]
    fn channels() {
        let mut acl = Acl::new();
        acl.set_user(b"p", &[b"on", b"nopass", b"+@all", b"&news.*"])
            .unwrap();
        let mut auth = acl.default_auth();
        assert!(acl.authenticate(&mut auth, b"p", b"", &who()));
        let publish = command::lookup(b"publish").unwrap();
        let psub = command::lookup(b"psubscribe").unwrap();
        assert_eq!(
            acl.check(&auth, publish, &[b"publish", b"news.1", b"m"]),
            Ok(())
        );
        assert_eq!(
            acl.check(&auth, publish, &[b"publish", b"x", b"m"]),
            Err(Denied::Channel(1))
        );
        assert_eq!(acl.check(&auth, psub, &[b"psubscribe", b"news.*"]), Ok(()));
        assert_eq!(
            acl.check(&auth, psub, &[b"psubscribe", b"news.1*"]),
            Err(Denied::Channel(1))
        );
    }

    #[test]
    fn dryrun_texts() {
        let mut acl = Acl::new();
        acl.set_user(b"al", &[b"on", b"~app:*", b"+@read"]).unwrap();
        assert_eq!(
            dryrun(&acl, &[b"al", b"get", b"x"]).unwrap().unwrap(),
            "This user has no permissions to access the 'x' key"
        );
        assert_eq!(
            dryrun(&acl, &[b"al", b"set", b"app:x", b"1"])
                .unwrap()
                .unwrap(),
            "This user has no permissions to run the 'set' command"
        );
        assert_eq!(dryrun(&acl, &[b"al", b"get", b"app:x"]).unwrap(), None);
        assert!(dryrun(&acl, &[b"nobody", b"get", b"x"]).is_err());
        assert!(dryrun(&acl, &[b"al", b"nocmd"]).is_err());
    }
}
