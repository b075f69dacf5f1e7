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
//!   user is `on` and `nopass` at that moment ([`Engine::init_client`](crate::Engine::init_client), redis
//!   `clientSetDefaultAuth`); RESET goes back to that state. AUTH / HELLO AUTH switch user.
//!
//! # The check ([`check()`], called by dispatch after the arity check, before cluster
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
//! [`Engine::take_security_events`](crate::Engine::take_security_events) into its log.
//!
//! # Protected mode
//!
//! [`Engine::protected_mode_refuses`](crate::Engine::protected_mode_refuses): with `protected-mode yes` and a default user that
//! needs no password, a connection from a non-loopback address gets [`PROTECTED_MODE_DENIED`]
//! (redis 7.0's text, byte for byte) and is closed; the server asks at accept time.
//!
//! # Layout
//!
//! - `rules`: users, their rules (ACL SETUSER parsing), command ids and categories, password
//!   hashes, and the ACL LIST / GETUSER / USERS / CAT renderings.
//! - `check`: the permission check dispatch runs before every command, AUTH, and the
//!   per-connection and `requirepass` / protected-mode state.
//! - `commands`: the AUTH and ACL command handlers, and ACL DRYRUN.
//! - `log`: ACL LOG entries, the refusal counters and the failed-AUTH security events.

mod check;
mod commands;
mod log;
mod rules;
#[cfg(test)]
mod tests;

pub use check::{ClientAuth, Denied};
pub(crate) use check::{apply_config, check};
pub use commands::{
    HELP_LINES, acl_cat, acl_deluser, acl_dryrun, acl_genpass, acl_getuser, acl_help, acl_list,
    acl_log, acl_no_file, acl_setuser, acl_users, acl_whoami, auth, dryrun,
};
pub use log::{AclStats, Who};
pub use rules::{CATEGORIES, User, sha256, write_cat, write_getuser, write_list, write_users};

use log::AclLog;
use rules::CommandIds;

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
    log: AclLog,
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
            log: AclLog::default(),
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
    /// [`check()`] entirely.
    pub fn restricted(&self) -> bool {
        self.restricted
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
