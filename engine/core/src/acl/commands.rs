//! The AUTH and ACL command handlers (bound in the command table's rows through `command/handlers.rs`), and
//! ACL DRYRUN's check-as-that-user, which the proxy answers with too.

use super::check::Denied;
use super::rules::{write_cat, write_getuser, write_list, write_users};
use super::{AUTH_NOPASS, Acl, DEFAULT_USER, WRONGPASS, Who, lossy};
use crate::args;
use crate::call::Call;
use crate::command;
use crate::error::{CmdError, c_str_lossy};
use crate::{Engine, Flow};

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may \
want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you \
have a Redis configuration file set) in order to store users in the Redis configuration.";

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
            e.acl.clear_log();
            c.w().ok();
            return Ok(());
        }
        let n = args::int_arg(a)?;
        count = usize::try_from(n.max(0)).unwrap_or(0);
    }
    let now_ms = c.now_ms;
    e.acl.write_log(count, now_ms, &mut c.w());
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

// ----- ACL DRYRUN (the proxy answers it with this too) -----

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
    if !spec.arity_ok(cmd.len()) {
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

/// ACL GENPASS [bits]: `bits` (default 256, 1–4096) random bits as ⌈bits/4⌉ hex digits, from
/// the host's random source (redis `getRandomHexChars`).
pub fn acl_genpass(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            crate::error::c_str_lossy(c.argv[1], 128)
        )));
    }
    let bits = match c.argv.get(2) {
        None => 256,
        Some(a) => crate::args::int_arg(a)?,
    };
    if !(1..=4096).contains(&bits) {
        return Err(CmdError::Static(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
        ));
    }
    let chars = (bits as usize).div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    e.random_bytes(&mut bytes);
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in &bytes {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.truncate(chars);
    c.w().bulk(hex.as_bytes());
    Ok(())
}
