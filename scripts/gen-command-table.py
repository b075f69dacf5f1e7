#!/usr/bin/env python3
"""Generate engine/core/src/command/table.rs from a running redis-server 7.

Redis keeps its command metadata declaratively (src/commands/*.json -> commands.def).
We mirror the subset of commands recached implements, with the exact arity, flags,
ACL categories, tips, key specs and docs that Redis 7 reports, so COMMAND / COMMAND INFO /
COMMAND DOCS answer what clients such as redis-py expect (PROTOCOL-NOTES b4).

Usage: scripts/gen-command-table.py PORT > engine/core/src/command/table.rs
The list of implemented commands is COMMANDS below; adding a command = adding its name here,
re-running the script against redis-server and writing its handler.
"""
import socket, sys

COMMANDS = """
get set setnx setex psetex getset getdel getex mget mset msetnx incr decr incrby decrby
incrbyfloat append strlen getrange setrange substr del unlink exists touch type expire pexpire
expireat pexpireat ttl pttl expiretime pexpiretime persist rename renamenx keys scan randomkey
dbsize flushdb flushall select ping echo quit reset time info command config client hello
lpush rpush lpushx rpushx lpop rpop llen lrange lindex lset lrem ltrim linsert lpos lmove
rpoplpush lmpop blpop brpop blmove blmpop brpoplpush
hset hsetnx hget hmset hmget hdel hexists hgetall hkeys hvals hlen hstrlen hincrby hincrbyfloat
hrandfield hscan
sadd srem smembers sismember smismember scard spop srandmember smove sinter sintercard sunion
sdiff sinterstore sunionstore sdiffstore sscan
zadd zrem zscore zmscore zincrby zcard zcount zlexcount zrange zrangestore zrangebyscore
zrevrangebyscore zrangebylex zrevrangebylex zrevrange zrank zrevrank zpopmin zpopmax bzpopmin
bzpopmax zmpop bzmpop zremrangebyrank zremrangebyscore zremrangebylex zunion zinter zdiff
zunionstore zinterstore zdiffstore zintercard zrandmember zscan
copy object wait multi exec discard watch unwatch memory
subscribe psubscribe unsubscribe punsubscribe publish pubsub
cluster readonly readwrite asking
save bgsave lastsave
auth acl
""".split()

def rd(f):
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t in b'+':
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
        n = int(rest)
        items = []
        for _ in range(n):
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

def val(v, ind=0):
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

# Where recached implements a later Redis's form of a command, the row says so here (with the
# Redis version that introduced it), rather than by editing the generated file.
OVERRIDES = {
    # Redis 7.2: ZRANK/ZREVRANK key member [WITHSCORE].
    'zrank': {'arity': -3},
    'zrevrank': {'arity': -3},
}

def spec(info, docs_by_name, ind):
    name, arity, flags, first, last, step, acl, tips, keyspecs, subs = [x for x in info[1]]
    if 'arity' in OVERRIDES.get(name[1], {}):
        arity = ('int', OVERRIDES[name[1]]['arity'])
    n = name[1]
    pad = ' ' * ind
    subs_s = ''.join(spec(s, docs_by_name, ind + 8) for s in subs[1])
    d = docs_by_name.get(n)
    return (f"{pad}CommandSpec {{\n"
            f"{pad}    name: {rs(n)},\n"
            f"{pad}    arity: {arity[1]},\n"
            f"{pad}    flags: {strs(flags)},\n"
            f"{pad}    first_key: {first[1]},\n"
            f"{pad}    last_key: {last[1]},\n"
            f"{pad}    step: {step[1]},\n"
            f"{pad}    acl_categories: {strs(acl)},\n"
            f"{pad}    tips: {strs(tips)},\n"
            f"{pad}    key_specs: &[{', '.join(val(k) for k in keyspecs[1])}],\n"
            f"{pad}    subcommands: &[\n{subs_s}{pad}    ],\n"
            f"{pad}    docs: {val(d) if d else 'Val::Map(&[])'},\n"
            f"{pad}}},\n")

def main():
    port = int(sys.argv[1])
    s = socket.create_connection(('127.0.0.1', port))
    f = s.makefile('rb')
    cmd(s, f, 'HELLO', '3')
    infos = cmd(s, f, 'COMMAND', 'INFO', *COMMANDS)[1]
    docs = {}
    for c in COMMANDS:
        r = cmd(s, f, 'COMMAND', 'DOCS', c)[1]
        for k, v in r:
            docs[k] = ('map', [(a, b) for a, b in v[1] if a != 'subcommands'])
            for sk, sv in dict(v[1]).get('subcommands', ('map', []))[1]:
                docs[sk] = sv
    ver = cmd(s, f, 'INFO', 'server')[1]
    ver = [l for l in ver.split('\r\n') if l.startswith('redis_version:')][0].split(':')[1]
    print('// @generated by scripts/gen-command-table.py from redis-server %s (COMMAND INFO + COMMAND DOCS).' % ver)
    print('// The declarative command table: one row per command, Redis 7 metadata verbatim.')
    print('// Do not edit by hand: add the name to the script and re-run it.')
    print('#![cfg_attr(rustfmt, rustfmt_skip)]')
    print('use super::{CommandSpec, Val};')
    print()
    print('pub static COMMANDS: &[CommandSpec] = &[')
    # Sorted by name: command::lookup binary-searches this array.
    for i in sorted(infos, key=lambda i: i[1][0][1]):
        sys.stdout.write(spec(i, docs, 4))
    print('];')

main()
