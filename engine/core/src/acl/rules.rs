//! Users and their rules: the [`User`] record, ACL SETUSER rule parsing (redis `ACLSetUser`),
//! dense command ids and categories, password hashes, and the renderings of ACL LIST, GETUSER,
//! USERS and CAT (shared with the proxy).

use resp::ReplyWriter;
use sha2::{Digest, Sha256};

use super::{Acl, DEFAULT_USER};
use crate::command::{self, CommandSpec};
use crate::error::{CmdError, c_str_lossy};

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

/// Key pattern permissions (redis `ACL_READ_PERMISSION` / `ACL_WRITE_PERMISSION`).
pub(super) const PERM_R: u8 = 1;
pub(super) const PERM_W: u8 = 2;
pub(super) const PERM_RW: u8 = PERM_R | PERM_W;

/// Sanitize-payload flag (accepted and described, no effect: there is no RESTORE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sanitize {
    Unset,
    On,
    Skip,
}

#[derive(Clone, Debug)]
pub struct User {
    pub(super) id: u64,
    pub(super) name: Vec<u8>,
    pub(super) enabled: bool,
    pub(super) nopass: bool,
    pub(super) sanitize: Sanitize,
    /// SHA-256 of each password, in the order added.
    pub(super) passwords: Vec<[u8; 32]>,
    /// `+@all` was applied (and not undone by `-@all`): "can run future commands".
    pub(super) allcommands: bool,
    /// One bit per command id ([`CommandIds`]).
    pub(super) allowed: Vec<u64>,
    /// `(command id, allowed first arguments)` for `+select|0` rules.
    pub(super) firstargs: Vec<(usize, Vec<Vec<u8>>)>,
    pub(super) allkeys: bool,
    pub(super) patterns: Vec<(Vec<u8>, u8)>,
    pub(super) allchannels: bool,
    pub(super) channels: Vec<Vec<u8>>,
}

/// Dense ids for table rows: top-level row `ci` is `top[ci]`, its subcommand `si` is
/// `top[ci] + 1 + si`.
#[derive(Clone, Debug)]
pub(super) struct CommandIds {
    top: Vec<usize>,
    total: usize,
}

impl CommandIds {
    pub(super) fn new() -> CommandIds {
        let mut top = Vec::with_capacity(command::count());
        let mut next = 0;
        for c in command::all() {
            top.push(next);
            next += 1 + c.subcommands.len();
        }
        CommandIds { top, total: next }
    }

    /// Id of a row handed out by the table (top-level or subcommand).
    pub(super) fn of(&self, spec: &CommandSpec) -> Option<usize> {
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

pub(super) fn hex(hash: &[u8; 32]) -> String {
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
    pub(super) fn new(id: u64, name: &[u8], ids: &CommandIds) -> User {
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

    pub(super) fn bit(&self, id: usize) -> bool {
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

    pub(super) fn set_all_commands(&mut self, allow: bool) {
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

    pub(super) fn fully_open(&self) -> bool {
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

impl Acl {
    fn refresh(&mut self) {
        self.restricted =
            self.deleted_any || !(self.users.len() == 1 && self.users[0].fully_open());
    }

    pub(super) fn default_user(&self) -> &User {
        self.user(DEFAULT_USER.as_bytes())
            .expect("the default user always exists")
    }

    pub(super) fn user(&self, name: &[u8]) -> Option<&User> {
        self.users
            .binary_search_by(|u| u.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.users[i])
    }

    pub(super) fn user_by_id(&self, id: u64) -> Option<&User> {
        self.users.iter().find(|u| u.id == id)
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

/// SHA-256 of `data`: password hashes, shown as `#<64 hex>` by ACL LIST like Redis.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}
