//! Authentication settings of the config file (`requirepass`, `protected_mode`, `[[users]]`)
//! and the internal credential the supervisor gives its children (docs/security.md).
//!
//! ```toml
//! requirepass = ""          # the default user's password; "" = none (Redis requirepass)
//! protected_mode = true     # no password + a client off loopback = refused (Redis)
//!
//! [[users]]                 # one per ACL user, rules as for ACL SETUSER
//! name = "app"
//! rules = "on >app-secret ~app:* +@all"
//! ```
//!
//! Engines and the proxy read the same file, so both enforce the same users. When any
//! password or user is configured, `recached start` generates a random internal password
//! once per run and hands it to every child in the environment variable
//! [`INTERNAL_AUTH_ENV`] (not on the command line, which `ps` shows): engines add the user
//! [`INTERNAL_USER`] (`on ~* &* +@all`) with it, and the proxy authenticates its own backend
//! connections with it, never with a client's credentials. A role started by hand without
//! the variable simply has no internal user.

use std::io::Read;

use engine_core::acl::{Acl, AclConfig, INTERNAL_USER};
use serde::Deserialize;

use crate::config::FileConfig;

pub use engine_core::acl::INTERNAL_AUTH_ENV;

/// One `[[users]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    /// ACL SETUSER rules separated by spaces (`on >pw ~app:* +@read`). A new user starts
    /// `off` with no permissions, as in Redis.
    #[serde(default)]
    pub rules: String,
}

/// The ACL settings every role starts from (without the internal user).
pub fn acl_config(file: &FileConfig) -> AclConfig {
    AclConfig {
        requirepass: file.requirepass.as_bytes().to_vec(),
        users: file
            .users
            .iter()
            .map(|u| {
                (
                    u.name.clone(),
                    u.rules
                        .split_ascii_whitespace()
                        .map(str::to_string)
                        .collect(),
                )
            })
            .collect(),
        protected_mode: file.protected_mode,
    }
}

/// Checks the users' rules (names, unknown commands, bad hashes), with ACL SETUSER's texts.
pub fn validate(file: &FileConfig) -> Result<(), String> {
    if file.users.iter().any(|u| u.name == INTERNAL_USER) {
        return Err(format!("users: the name {INTERNAL_USER:?} is reserved"));
    }
    let acl = Acl::from_config(&acl_config(file)).map_err(|e| format!("users: {e}"))?;
    let user = file.memcached_user.trim();
    if !user.is_empty() && acl.login_as(user.as_bytes()).is_none() {
        return Err(format!(
            "memcached_user {user:?} is not a user that is on (\"default\" or a [[users]] entry \
             with \"on\")"
        ));
    }
    Ok(())
}

/// An engine's ACL settings: the file's, plus the internal user when the supervisor passed
/// its password.
pub fn engine_acl(file: &FileConfig) -> AclConfig {
    let mut cfg = acl_config(file);
    if let Some(pw) = internal_password() {
        cfg.users.push((
            INTERNAL_USER.to_string(),
            ["on", &format!(">{pw}"), "~*", "&*", "+@all"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ));
    }
    cfg
}

/// The proxy's users: the config's, plus — when the fleet has an internal password — the
/// internal user limited to PING and INFO, so the supervisor's health checks and `/metrics`
/// can read the proxy of a fleet with a password (clients' commands never run as it).
pub fn proxy_acl(file: &FileConfig) -> AclConfig {
    let mut cfg = acl_config(file);
    if let Some(pw) = internal_password() {
        cfg.users.push((
            INTERNAL_USER.to_string(),
            ["on", &format!(">{pw}"), "+ping", "+info"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ));
    }
    cfg
}

/// The internal password from the environment (set by `recached start`), if any.
pub fn internal_password() -> Option<String> {
    std::env::var(INTERNAL_AUTH_ENV)
        .ok()
        .filter(|p| !p.is_empty())
}

/// A fresh internal password (64 hex digits from the system's random source) when the file
/// configures any authentication; `None` otherwise (children then need none).
pub fn new_internal_password(file: &FileConfig) -> std::io::Result<Option<String>> {
    if !acl_config(file).has_auth() {
        return Ok(None);
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(Some(bytes.iter().map(|b| format!("{b:02x}")).collect()))
}

/// The fleet's internal password, generated once by `recached start` ([`init_fleet_password`]).
static FLEET_PASSWORD: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Generates the internal password for this run of the fleet (if the file needs one).
pub fn init_fleet_password(file: &FileConfig) -> Result<(), String> {
    let pw = new_internal_password(file).map_err(|e| format!("internal password: {e}"))?;
    let _ = FLEET_PASSWORD.set(pw);
    Ok(())
}

/// The internal password children get in [`INTERNAL_AUTH_ENV`], if any.
pub fn fleet_password() -> Option<&'static str> {
    FLEET_PASSWORD.get().and_then(|p| p.as_deref())
}

/// `AUTH` with the internal credential, for the supervisor's own connections to engines.
pub fn fleet_login() -> Option<Vec<u8>> {
    let pw = fleet_password()?;
    let mut out = Vec::new();
    resp::encode_request(&mut out, &["AUTH", INTERNAL_USER, pw]);
    Some(out)
}

/// A warning for a fleet that protected mode would cut off: a non-loopback bind without any
/// password (the proxy and smart clients then reach engines from a non-loopback address).
pub fn protected_mode_warning(file: &FileConfig) -> Option<String> {
    let bind = file.bind.trim();
    let loopback = bind == "localhost"
        || bind
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (file.protected_mode && file.requirepass.is_empty() && !loopback).then(|| {
        format!(
            "bind = {bind:?} with no requirepass and protected_mode on: engines refuse every \
             client that is not on the loopback interface (set requirepass, or protected_mode = false)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_from_the_file_are_checked_and_converted() {
        let mut f = FileConfig::default();
        assert!(!acl_config(&f).has_auth());
        f.users.push(UserEntry {
            name: "app".into(),
            rules: "on >pw  ~app:* +@all".into(),
        });
        f.requirepass = "sec".into();
        let cfg = acl_config(&f);
        assert!(cfg.has_auth());
        assert_eq!(cfg.users[0].1, vec!["on", ">pw", "~app:*", "+@all"]);
        assert!(validate(&f).is_ok());
        f.users[0].rules = "+nosuchcommand".into();
        let err = validate(&f).unwrap_err();
        assert!(
            err.contains("Unknown command or category name in ACL"),
            "{err}"
        );
        f.users[0].name = INTERNAL_USER.into();
        assert!(validate(&f).unwrap_err().contains("reserved"));
        assert_eq!(new_internal_password(&f).unwrap().unwrap().len(), 64);
    }

    #[test]
    fn memcached_user_must_be_a_user_that_is_on() {
        let mut f = FileConfig::default();
        f.users.push(UserEntry {
            name: "cache".into(),
            rules: "on ~app:* +get".into(),
        });
        f.users.push(UserEntry {
            name: "sleepy".into(),
            rules: "off +@all".into(),
        });
        for ok in ["", "cache", "default"] {
            f.memcached_user = ok.into();
            assert!(validate(&f).is_ok(), "{ok}");
        }
        for bad in ["nobody", "sleepy"] {
            f.memcached_user = bad.into();
            let e = validate(&f).unwrap_err();
            assert!(e.contains(&format!("memcached_user \"{bad}\"")), "{e}");
        }
    }

    #[test]
    fn protected_mode_warning_only_for_open_remote_binds() {
        let mut f = FileConfig::default();
        assert!(protected_mode_warning(&f).is_none());
        f.bind = "0.0.0.0".into();
        assert!(protected_mode_warning(&f).is_some());
        f.requirepass = "x".into();
        assert!(protected_mode_warning(&f).is_none());
    }
}
