#!/usr/bin/env python3
"""Generate engine/core/src/command/table.rs from a running redis-server 7.0.

Redis keeps its command metadata declaratively (src/commands/*.json -> commands.def). We mirror
ALL of it, every command and subcommand of the server the script talks to, implemented here or
not: arity, flags, legacy key positions, ACL categories, tips, key specs and docs as Redis 7
reports them, so COMMAND / COMMAND INFO / COMMAND DOCS answer what clients expect and every part
(dispatch, ACL, cluster redirects, the proxy, the fan-out) finds keys from the same typed rows.

Typed, not strings: command flags become a `Flags` bitset, key-spec flags a `KeyFlags` bitset,
key specs `KeySpec { begin_search, find_keys }` values (command/mod.rs), so nothing looks a flag
up by name at run time. A flag name this script does not know stops it (Redis grew a flag:
add it to command/flags.rs first).

The handler is bound in the row: `handler: Some(h::<row>)`, where `h` is
engine/core/src/command/handlers.rs, the one hand-written list of implemented rows (one
`pub use path[ as row];` per line; a subcommand row `config|get` is exported as `config_get`).
A row whose handler is missing there is `None` and answers Redis's unknown command (or
subcommand) error; a misspelled export fails to compile.

Commands whose keys Redis finds with a `getkeys_proc` (src/db.c; `get_keys_function` in
src/commands/*.json) carry it as `getkeys: Some(GetKeys::…)` (GETKEYS below).

Usage: scripts/gen-command-table.py PORT > engine/core/src/command/table.rs
"""
import os, re, socket, sys

HERE = os.path.dirname(os.path.abspath(__file__))
HANDLERS = os.path.join(HERE, '..', 'engine', 'core', 'src', 'command', 'handlers.rs')

# Redis 7.0 src/commands/*.json "get_keys_function" -> our GetKeys variant (src/db.c).
# Generic(store, numkeys, first, step) is genericGetKeys(storeKeyOfs, keyCountOfs, firstKeyOfs, keyStep).
GETKEYS = {
    'zunionstore': 'GetKeys::Generic { store: 1, numkeys: 2, first: 3, step: 1 }',
    'zinterstore': 'GetKeys::Generic { store: 1, numkeys: 2, first: 3, step: 1 }',
    'zdiffstore': 'GetKeys::Generic { store: 1, numkeys: 2, first: 3, step: 1 }',
    'zunion': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'zinter': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'zdiff': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'zintercard': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'sintercard': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'eval': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'evalsha': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'eval_ro': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'evalsha_ro': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'fcall': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'fcall_ro': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'lmpop': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'zmpop': 'GetKeys::Generic { store: 0, numkeys: 1, first: 2, step: 1 }',
    'blmpop': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'bzmpop': 'GetKeys::Generic { store: 0, numkeys: 2, first: 3, step: 1 }',
    'sort': 'GetKeys::Sort',
    'sort_ro': 'GetKeys::SortRo',
    'migrate': 'GetKeys::Migrate',
    'georadius': 'GetKeys::Georadius',
    'georadiusbymember': 'GetKeys::Georadius',
    'xread': 'GetKeys::Xread',
    'xreadgroup': 'GetKeys::Xread',
    'set': 'GetKeys::Set',
    'bitfield': 'GetKeys::Bitfield',
}

# Where recached implements a later Redis's form of a command, the row says so here (with the
# Redis version that introduced it), rather than by editing the generated file.
OVERRIDES = {
    # Redis 7.2: ZRANK/ZREVRANK key member [WITHSCORE].
    'zrank': {'arity': -3},
    'zrevrank': {'arity': -3},
}

RUST_KEYWORDS = set('''as break const continue crate else enum extern false fn for if impl in let loop
match mod move mut pub ref return self static struct super trait true type unsafe use where while
async await dyn abstract become box do final macro override priv typeof unsized virtual yield try'''.split())


def export_name(row):
    """The name a row's handler has in handlers.rs: `config|get` -> `config_get`."""
    s = row.replace('|', '_').replace('-', '_')
    return s + '_' if s in RUST_KEYWORDS else s


def implemented():
    names = set()
    for line in open(HANDLERS):
        m = re.match(r'\s*pub use ([\w:]+?)(?: as (\w+))?;', line)
        if m:
            names.add(m.group(2) or m.group(1).rsplit('::', 1)[1])
    return names


def rd(f):
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t == b'+':
        return ('str', rest.decode())
    if t == b'-':
        raise RuntimeError(rest.decode())
    if t == b':':
        return ('int', int(rest))
    if t in (b'$', b'='):
        n = int(rest)
        if n < 0:
            return ('null',)
        d = f.read(n + 2)[:-2]
        return ('str', d.decode()[4:] if t == b'=' else d.decode())
    if t == b'_':
        return ('null',)
    if t in (b'*', b'~'):
        return ('arr', [rd(f) for _ in range(int(rest))])
    if t == b'%':
        items = []
        for _ in range(int(rest)):
            k = rd(f); v = rd(f)
            items.append((k[1], v))
        return ('map', items)
    if t == b'#':
        return ('bool', rest == b't')
    raise RuntimeError('unexpected %r' % line)


def cmd(sock, f, *args):
    out = b'*%d\r\n' % len(args)
    for a in args:
        a = a.encode()
        out += b'$%d\r\n%s\r\n' % (len(a), a)
    sock.sendall(out)
    return rd(f)


def rs(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'


def val(v):
    t = v[0]
    if t == 'str':
        return 'Val::Str(%s)' % rs(v[1])
    if t == 'int':
        return 'Val::Int(%d)' % v[1]
    if t == 'null':
        return 'Val::Null'
    if t == 'bool':
        return 'Val::Int(%d)' % int(v[1])
    if t == 'arr':
        return 'Val::Arr(&[%s])' % ', '.join(val(x) for x in v[1])
    if t == 'map':
        return 'Val::Map(&[%s])' % ', '.join('(%s, %s)' % (rs(k), val(x)) for k, x in v[1])


def strs(v):
    return '&[%s]' % ', '.join(rs(x[1]) for x in v[1])


def bits(names, ty, known):
    consts = []
    for n in names:
        c = n.upper()
        if c not in known:
            sys.exit('unknown %s flag %r: add it to engine/core/src/command/flags.rs' % (ty, n))
        consts.append('%s::%s' % (ty, c))
    if not consts:
        return '%s::empty()' % ty
    return consts[0] + ''.join('.union(%s)' % c for c in consts[1:])


def known_flags(ty):
    src = open(os.path.join(HERE, '..', 'engine', 'core', 'src', 'command', 'flags.rs')).read()
    block = re.search(r'pub struct %s: u\d+ \{(.*?)\n    \}' % ty, src, re.S).group(1)
    return set(re.findall(r'const (\w+) =', block))


def key_spec(ks, kflags):
    d = dict(ks[1])
    notes = 'Some(%s)' % rs(d['notes'][1]) if 'notes' in d else 'None'
    flags = bits([x[1] for x in d['flags'][1]], 'KeyFlags', kflags)
    bs = dict(d['begin_search'][1]); bspec = dict(bs['spec'][1])
    if bs['type'][1] == 'index':
        b = 'BeginSearch::Index(%d)' % bspec['index'][1]
    elif bs['type'][1] == 'keyword':
        b = 'BeginSearch::Keyword { keyword: %s, startfrom: %d }' % (rs(bspec['keyword'][1]), bspec['startfrom'][1])
    else:
        b = 'BeginSearch::Unknown'
    fk = dict(d['find_keys'][1]); fspec = dict(fk['spec'][1])
    if fk['type'][1] == 'range':
        k = 'FindKeys::Range { lastkey: %d, keystep: %d, limit: %d }' % (
            fspec['lastkey'][1], fspec['keystep'][1], fspec['limit'][1])
    elif fk['type'][1] == 'keynum':
        k = 'FindKeys::Keynum { keynumidx: %d, firstkey: %d, keystep: %d }' % (
            fspec['keynumidx'][1], fspec['firstkey'][1], fspec['keystep'][1])
    else:
        k = 'FindKeys::Unknown'
    return 'KeySpec { notes: %s, flags: %s, begin_search: %s, find_keys: %s }' % (notes, flags, b, k)


def spec(info, docs_by_name, impl, cflags, kflags, ind):
    name, arity, flags, first, last, step, acl, tips, keyspecs, subs = [x for x in info[1]]
    n = name[1]
    if 'arity' in OVERRIDES.get(n, {}):
        arity = ('int', OVERRIDES[n]['arity'])
    pad = ' ' * ind
    # Subcommands by name: Redis lists them in its dict's order, which changes with the
    # server's hash seed, so a sorted table regenerates identically.
    subs_sorted = sorted(subs[1], key=lambda x: x[1][0][1])
    subs_s = ''.join(spec(s, docs_by_name, impl, cflags, kflags, ind + 8) for s in subs_sorted)
    d = docs_by_name.get(n)
    handler = 'Some(h::%s)' % export_name(n) if export_name(n) in impl else 'None'
    ks = ''.join('\n%s        %s,' % (pad, key_spec(k, kflags)) for k in keyspecs[1])
    return (f"{pad}CommandSpec {{\n"
            f"{pad}    name: {rs(n)},\n"
            f"{pad}    arity: {arity[1]},\n"
            f"{pad}    flags: {bits([x[1] for x in flags[1]], 'Flags', cflags)},\n"
            f"{pad}    first_key: {first[1]},\n"
            f"{pad}    last_key: {last[1]},\n"
            f"{pad}    step: {step[1]},\n"
            f"{pad}    acl_categories: {strs(acl)},\n"
            f"{pad}    tips: {strs(tips)},\n"
            f"{pad}    key_specs: &[{ks}{chr(10) + pad + '    ' if ks else ''}],\n"
            f"{pad}    getkeys: {GETKEYS.get(n, 'None') if n not in GETKEYS else 'Some(' + GETKEYS[n] + ')'},\n"
            f"{pad}    handler: {handler},\n"
            f"{pad}    subcommands: &[\n{subs_s}{pad}    ],\n"
            f"{pad}    docs: {val(d) if d else 'Val::Map(&[])'},\n"
            f"{pad}}},\n")


def main():
    port = int(sys.argv[1])
    s = socket.create_connection(('127.0.0.1', port))
    f = s.makefile('rb')
    cmd(s, f, 'HELLO', '3')
    names = sorted(x[1] for x in cmd(s, f, 'COMMAND', 'LIST')[1] if '|' not in x[1])
    infos = cmd(s, f, 'COMMAND', 'INFO', *names)[1]
    docs = {}
    for c in names:
        r = cmd(s, f, 'COMMAND', 'DOCS', c)[1]
        for k, v in r:
            docs[k] = ('map', [(a, b) for a, b in v[1] if a != 'subcommands'])
            for sk, sv in dict(v[1]).get('subcommands', ('map', []))[1]:
                docs[sk] = sv
    ver = cmd(s, f, 'INFO', 'server')[1]
    ver = [l for l in ver.split('\r\n') if l.startswith('redis_version:')][0].split(':')[1]
    impl = implemented()
    cflags, kflags = known_flags('Flags'), known_flags('KeyFlags')
    print('// @generated by scripts/gen-command-table.py from redis-server %s (COMMAND INFO + COMMAND DOCS).' % ver)
    print('// Every Redis command and subcommand, implemented or not; handlers from handlers.rs.')
    print('// Do not edit by hand: change handlers.rs or the script and re-run it.')
    print('#![cfg_attr(rustfmt, rustfmt_skip)]')
    print('use super::{BeginSearch, CommandSpec, FindKeys, Flags, GetKeys, KeyFlags, KeySpec, Val};')
    print('use super::handlers as h;')
    print()
    print('pub static COMMANDS: &[CommandSpec] = &[')
    # Sorted by name (a test checks it; COMMAND lists them in this order).
    for i in sorted(infos, key=lambda i: i[1][0][1]):
        sys.stdout.write(spec(i, docs, impl, cflags, kflags, 4))
    print('];')
    # Handlers of recached-only rows (extra.rs) are bound there, by hand.
    with open(os.path.join(os.path.dirname(HANDLERS), 'extra.rs')) as f:
        extra = set(re.findall(r'\bh::(\w+)', f.read()))
    missing = impl - {export_name(n) for n in docs} - extra
    if missing:
        sys.exit('handlers.rs exports names that are no Redis row: %s' % sorted(missing))


main()
