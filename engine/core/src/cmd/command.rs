//! COMMAND (COUNT INFO DOCS GETKEYS GETKEYSANDFLAGS LIST HELP), answered from the one command
//! table (`command/table.rs`, Redis 7.0.15's own metadata) and its key extractor.
//!
//! Reply shapes are Redis's: flags and ACL categories are sets of status strings, tips a set
//! of bulk strings, key specs a set of maps, subcommands an array (a set when empty); in docs,
//! `flags`/`doc_flags` are sets of status strings, `history` a set, `subcommands` a map (redis
//! `server.c` `addReplyCommandInfo` / `addReplyCommandDocs` / `addReplyCommandKeySpecs`).
//! Entries are listed in table order rather than Redis's hash order, and only implemented
//! rows are listed (`command::implemented`); GETKEYS answers for every row.

use resp::ReplyWriter;

use crate::Engine;
use crate::args;
use crate::call::{Call, help};
use crate::command::{self, BeginSearch, CommandSpec, FindKeys, Flags, KeyFlags, KeySpec, Val};
use crate::error::CmdError;
use crate::glob;

/// Writes a table value; `key` is the map key it sits under, which decides Redis's set /
/// status-string shapes (see the module doc).
pub fn write_val(w: &mut ReplyWriter<'_>, v: &Val, key: Option<&str>) {
    match v {
        Val::Str(s) => w.bulk(s.as_bytes()),
        Val::Int(n) => w.integer(*n),
        Val::Null => w.null(),
        Val::Arr(items) => match key {
            Some("flags") | Some("doc_flags") => {
                w.set(items.len());
                for it in *items {
                    match it {
                        Val::Str(s) => w.simple(s.as_bytes()),
                        other => write_val(w, other, None),
                    }
                }
            }
            Some("history") => {
                w.set(items.len());
                for it in *items {
                    write_val(w, it, None);
                }
            }
            _ => {
                w.array(items.len());
                for it in *items {
                    write_val(w, it, None);
                }
            }
        },
        Val::Map(pairs) => {
            w.map(pairs.len());
            for (k, v) in *pairs {
                w.bulk(k.as_bytes());
                write_val(w, v, Some(k));
            }
        }
    }
}

/// One COMMAND / COMMAND INFO entry: the 10 fields of redis `addReplyCommandInfo`.
fn write_entry(w: &mut ReplyWriter<'_>, spec: &CommandSpec) {
    w.array(10);
    w.bulk(spec.name.as_bytes());
    w.integer(i64::from(spec.arity));
    w.set(spec.flags.names().count());
    for f in spec.flags.names() {
        w.simple(f.as_bytes());
    }
    w.integer(i64::from(spec.first_key));
    w.integer(i64::from(spec.last_key));
    w.integer(i64::from(spec.step));
    w.set(spec.acl_categories.len());
    for a in spec.acl_categories {
        w.simple(a.as_bytes());
    }
    w.set(spec.tips.len());
    for t in spec.tips {
        w.bulk(t.as_bytes());
    }
    w.set(spec.key_specs.len());
    for k in spec.key_specs {
        write_key_spec(w, k);
    }
    if spec.subcommands.is_empty() {
        w.set(0);
    } else {
        w.array(spec.subcommands.len());
        for s in spec.subcommands {
            write_entry(w, s);
        }
    }
}

/// One key spec as redis `addReplyCommandKeySpecs` writes it.
fn write_key_spec(w: &mut ReplyWriter<'_>, k: &KeySpec) {
    w.map(3 + usize::from(k.notes.is_some()));
    if let Some(notes) = k.notes {
        w.bulk(b"notes");
        w.bulk(notes.as_bytes());
    }
    w.bulk(b"flags");
    write_key_flags(w, k.flags);
    w.bulk(b"begin_search");
    w.map(2);
    w.bulk(b"type");
    match k.begin_search {
        BeginSearch::Index(i) => {
            w.bulk(b"index");
            w.bulk(b"spec");
            w.map(1);
            w.bulk(b"index");
            w.integer(i64::from(i));
        }
        BeginSearch::Keyword { keyword, startfrom } => {
            w.bulk(b"keyword");
            w.bulk(b"spec");
            w.map(2);
            w.bulk(b"keyword");
            w.bulk(keyword.as_bytes());
            w.bulk(b"startfrom");
            w.integer(i64::from(startfrom));
        }
        BeginSearch::Unknown => {
            w.bulk(b"unknown");
            w.bulk(b"spec");
            w.map(0);
        }
    }
    w.bulk(b"find_keys");
    w.map(2);
    w.bulk(b"type");
    let fields: [(&str, i32); 3] = match k.find_keys {
        FindKeys::Range {
            lastkey,
            keystep,
            limit,
        } => {
            w.bulk(b"range");
            [("lastkey", lastkey), ("keystep", keystep), ("limit", limit)]
        }
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            keystep,
        } => {
            w.bulk(b"keynum");
            [
                ("keynumidx", keynumidx),
                ("firstkey", firstkey),
                ("keystep", keystep),
            ]
        }
        FindKeys::Unknown => {
            w.bulk(b"unknown");
            w.bulk(b"spec");
            w.map(0);
            return;
        }
    };
    w.bulk(b"spec");
    w.map(3);
    for (name, n) in fields {
        w.bulk(name.as_bytes());
        w.integer(i64::from(n));
    }
}

/// Key-spec flags as a set of status strings (redis `addReplyFlagsForKeyArgs`).
fn write_key_flags(w: &mut ReplyWriter<'_>, flags: KeyFlags) {
    w.set(flags.names().count());
    for f in flags.names() {
        w.simple(f.as_bytes());
    }
}

/// One COMMAND DOCS value (redis `addReplyCommandDocs`): the stored docs plus, for a
/// container, a `subcommands` map.
fn write_docs(w: &mut ReplyWriter<'_>, spec: &CommandSpec) {
    let Val::Map(pairs) = &spec.docs else {
        w.map(0);
        return;
    };
    let subs = !spec.subcommands.is_empty();
    w.map(pairs.len() + usize::from(subs));
    for (k, v) in *pairs {
        w.bulk(k.as_bytes());
        write_val(w, v, Some(k));
    }
    if subs {
        w.bulk(b"subcommands");
        w.map(spec.subcommands.len());
        for s in spec.subcommands {
            w.bulk(s.name.as_bytes());
            write_docs(w, s);
        }
    }
}

/// A row COMMAND INFO / DOCS report, by full name (`get`, `config|get`): implemented ones
/// only, as if the others did not exist.
fn lookup_fullname(name: &[u8]) -> Option<&'static CommandSpec> {
    command::lookup_fullname(name).filter(|c| c.is_implemented())
}

/// `COMMAND` → every entry.
pub fn command(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut w = c.w();
    w.array(command::implemented().count());
    for spec in command::implemented() {
        write_entry(&mut w, spec);
    }
    Ok(())
}

/// `COMMAND COUNT` → number of commands.
pub fn command_count(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.w().integer(command::implemented().count() as i64);
    Ok(())
}

/// `COMMAND INFO [name …]` → entries, nil for unknown names; all entries without names.
pub fn command_info(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() == 2 {
        return command(e, c);
    }
    let names = &c.argv[2..];
    let mut w = c.w();
    w.array(names.len());
    for n in names {
        match lookup_fullname(n) {
            Some(spec) => write_entry(&mut w, spec),
            None => w.null(),
        }
    }
    Ok(())
}

/// `COMMAND DOCS [name …]` → map name → docs; unknown names are left out.
pub fn command_docs(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let mut w = c.w();
    if argv.len() == 2 {
        w.map(command::implemented().count());
        for spec in command::implemented() {
            w.bulk(spec.name.as_bytes());
            write_docs(&mut w, spec);
        }
        return Ok(());
    }
    let specs: Vec<&CommandSpec> = argv[2..]
        .iter()
        .filter_map(|n| lookup_fullname(n))
        .collect();
    w.map(specs.len());
    for spec in specs {
        w.bulk(spec.name.as_bytes());
        write_docs(&mut w, spec);
    }
    Ok(())
}

/// `COMMAND GETKEYS command [arg …]` → the key arguments; `COMMAND GETKEYSANDFLAGS` → each
/// with its key-spec flags. Any row of Redis's table answers, implemented here or not, from
/// the one key extractor (redis `getKeysSubcommandImpl`, with its error texts).
pub fn command_getkeys(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    getkeys(c, false)
}

pub fn command_getkeysandflags(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    getkeys(c, true)
}

fn getkeys(c: &mut Call, with_flags: bool) -> Result<(), CmdError> {
    let cmd = &c.argv[2..];
    let Some(spec) = command::lookup_argv(cmd) else {
        return Err(CmdError::Static("ERR Invalid command specified"));
    };
    if !spec.has_keys() {
        return Err(CmdError::Static("ERR The command has no key arguments"));
    }
    if !spec.arity_ok(cmd.len()) {
        return Err(CmdError::Static(
            "ERR Invalid number of arguments specified for command",
        ));
    }
    let keys = command::keys(spec, cmd);
    if keys.is_empty() {
        if spec.has_flag(Flags::NO_MANDATORY_KEYS) {
            c.w().array(0);
            return Ok(());
        }
        return Err(CmdError::Static(
            "ERR Invalid arguments specified for command",
        ));
    }
    let mut w = c.w();
    w.array(keys.len());
    for k in keys.as_slice() {
        if with_flags {
            w.array(2);
            w.bulk(cmd[k.pos]);
            write_key_flags(&mut w, k.flags);
        } else {
            w.bulk(cmd[k.pos]);
        }
    }
    Ok(())
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]` → command names,
/// subcommands included.
pub fn command_list(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    enum Filter<'a> {
        All,
        Module,
        AclCat(&'a [u8]),
        Pattern(&'a [u8]),
    }
    let filter = match argv.len() {
        2 => Filter::All,
        5 if args::is(argv[2], "filterby") => {
            if args::is(argv[3], "module") {
                Filter::Module
            } else if args::is(argv[3], "aclcat") {
                Filter::AclCat(argv[4])
            } else if args::is(argv[3], "pattern") {
                Filter::Pattern(argv[4])
            } else {
                return Err(CmdError::Syntax);
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let keep = |s: &CommandSpec| match &filter {
        Filter::All => true,
        Filter::Module => false,
        Filter::AclCat(cat) => s
            .acl_categories
            .iter()
            .any(|a| a.as_bytes()[1..].eq_ignore_ascii_case(cat)),
        Filter::Pattern(p) => glob::matches(p, s.name.as_bytes(), true),
    };
    let mut names: Vec<&str> = Vec::new();
    for spec in command::implemented() {
        if keep(spec) {
            names.push(spec.name);
        }
        for sub in spec.subcommands {
            if keep(sub) {
                names.push(sub.name);
            }
        }
    }
    let mut w = c.w();
    w.array(names.len());
    for n in names {
        w.bulk(n.as_bytes());
    }
    Ok(())
}

/// COMMAND HELP.
pub fn command_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    help(
        c,
        "COMMAND",
        &[
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "HELP",
            "    Print this help.",
        ],
    );
    Ok(())
}
