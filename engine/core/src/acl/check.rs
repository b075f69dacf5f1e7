//! The permission check dispatch runs before every command (see the `acl` module docs for
//! its order), AUTH's password check, and the authentication state: per connection
//! ([`ClientAuth`]), `requirepass` and protected mode.

use super::rules::{PERM_R, PERM_W, User, sha256};
use super::{Acl, DEFAULT_USER, NOAUTH, Who, lossy};
use crate::command::{CommandSpec, Flags, KeyFlags};
use crate::{Client, Engine};

const NOPERM_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";
const NOPERM_CHANNEL: &str =
    "NOPERM this user has no permissions to access one of the channels used as arguments";

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

impl User {
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
}

impl Acl {
    /// Whether a user of that name exists (CLIENT KILL USER).
    pub fn has_user(&self, name: &[u8]) -> bool {
        self.user(name).is_some()
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

    /// The state of a connection logged in as `user` without a password, for a port whose
    /// user is fixed by the configuration (the proxy's memcached port, `memcached_user`):
    /// `None` when there is no such user or it is off (Redis's AUTH refuses an off user too).
    pub fn login_as(&self, user: &[u8]) -> Option<ClientAuth> {
        let u = self.user(user).filter(|u| u.enabled)?;
        Some(ClientAuth {
            user_id: u.id,
            user_name: (u.id != 0).then(|| String::from_utf8_lossy(&u.name).into_owned()),
            authenticated: true,
        })
    }

    /// The permission check (see the module docs). `Ok` = may run.
    pub fn check(
        &self,
        auth: &ClientAuth,
        spec: &CommandSpec,
        argv: &[&[u8]],
    ) -> Result<(), Denied> {
        if !auth.authenticated && self.default_needs_auth() && !spec.has_flag(Flags::NO_AUTH) {
            return Err(Denied::NoAuth);
        }
        let Some(user) = self.user_by_id(auth.user_id) else {
            return Err(Denied::UserGone);
        };
        self.user_check(user, spec, argv)
    }

    /// redis `ACLUserCheckCmdWithUnrestrictedKeyAccess` for reads (SORT's BY and GET
    /// patterns name keys no key spec declares): the client's user may read every key
    /// (`allkeys`, or a `*` pattern with read permission).
    pub fn reads_all_keys(&self, auth: &ClientAuth) -> bool {
        !self.restricted()
            || self.user_by_id(auth.user_id).is_some_and(|u| {
                u.allkeys
                    || u.patterns
                        .iter()
                        .any(|(p, f)| p == b"*" && f & PERM_R == PERM_R)
            })
    }

    /// Command, key and channel permissions of `user` (redis `ACLSelectorCheckCmd`).
    pub(super) fn user_check(
        &self,
        user: &User,
        spec: &CommandSpec,
        argv: &[&[u8]],
    ) -> Result<(), Denied> {
        if !user.allcommands || !user.allowed.iter().all(|w| *w == u64::MAX) {
            let allowed = spec.has_flag(Flags::NO_AUTH)
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
fn key_spec_perms(flags: KeyFlags) -> u8 {
    let mut need = 0;
    if flags.contains(KeyFlags::ACCESS) {
        need |= PERM_R;
    }
    if flags.intersects(KeyFlags::INSERT | KeyFlags::UPDATE | KeyFlags::DELETE) {
        need |= PERM_W;
    }
    need
}

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
    pub fn init_client(&mut self, client: &mut Client) {
        client.auth = self.acl.default_auth();
        self.tracking.conn_opened(client.id, client.proto);
    }

    /// Protected mode: whether a connection from a non-loopback peer must be refused with
    /// [`PROTECTED_MODE_DENIED`](super::PROTECTED_MODE_DENIED) (the server knows the peer; redis `clientAcceptHandler`).
    pub fn protected_mode_refuses(&self, peer_is_loopback: bool) -> bool {
        !peer_is_loopback && self.acl.protected_mode_refuses_remote()
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
