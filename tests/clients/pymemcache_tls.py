"""pymemcache (tests/clients/requirements.txt) over TLS (`tls_context`) against the recached
proxy's memcached TLS port. Run by tests/tests/memcached_tls.rs:

    python pymemcache_tls.py <memcached TLS port> <CA file> [<client cert> <client key>]

set/get/get_many over 100 keys (both engines), gets + cas, incr, touch, delete, a 500 KB
value, flags kept through a serde; then a client that trusts another CA is refused at the
handshake. Prints one line per check, `ok` last; any failure exits 1 (60 s watchdog)."""

import ssl
import sys

import pymemcache
from pymemcache.client.base import Client

from common import check, watchdog

watchdog(60)
port, ca = int(sys.argv[1]), sys.argv[2]
print("pymemcache", pymemcache.__version__, flush=True)

ctx = ssl.create_default_context(cafile=ca)
if len(sys.argv) > 4:
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
c = Client(("127.0.0.1", port), tls_context=ctx)

check(c.set("tls:greeting", b"over tls") is True, "set")
check(c.get("tls:greeting") == b"over tls", "get")
print("set/get", flush=True)

items = {f"tls:k{i}": f"v{i}".encode() for i in range(100)}
check(c.set_many(items) == [], "set_many")
got = c.get_many(list(items) + ["tls:missing"])
check(got == items, f"get_many: {len(got)} of {len(items)}")
print("get_many 100", flush=True)

value, cas = c.gets("tls:greeting")
check(value == b"over tls" and cas is not None, "gets")
check(c.cas("tls:greeting", b"swapped", cas) is True, "cas")
check(c.cas("tls:greeting", b"lost", cas) is False, "cas race lost")
check(c.get("tls:greeting") == b"swapped", "after cas")
print("gets/cas", flush=True)

c.set("tls:n", b"41")
check(c.incr("tls:n", 1) == 42, "incr")
check(c.touch("tls:n", 100) is True, "touch")
check(c.delete("tls:n") is True, "delete")
check(c.get("tls:n") is None, "deleted")
print("incr/touch/delete", flush=True)

big = bytes(range(256)) * 2000
check(c.set("tls:big", big) is True, "big set")
check(c.get("tls:big") == big, "big get")
print("500 KB value", flush=True)


class KeepFlags:
    def serialize(self, key, value):
        return value[0], value[1]

    def deserialize(self, key, value, flags):
        return (value, flags)


fc = Client(("127.0.0.1", port), tls_context=ctx, serde=KeepFlags())
fc.set("tls:flags", (b"x", 77))
check(fc.get("tls:flags") == (b"x", 77), "flags")
print("flags", flush=True)

# A client that trusts only the system roots refuses our test certificate.
other = Client(("127.0.0.1", port), tls_context=ssl.create_default_context())
try:
    other.get("tls:greeting")
    check(False, "a client trusting another CA was served")
except ssl.SSLError:
    print("untrusted CA refused", flush=True)

c.close()
print("ok", flush=True)
