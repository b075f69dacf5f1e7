"""redis-py's RedisCluster (newest release, default settings) reading a key whose slot an
engine holds while it moves it to a node the client does not know (tests/tests/slot_hold.rs).

    .venv/bin/python redis_py_slot_hold.py --port P --key K

Connects to the engine on P, prints the nodes it knows as one JSON line, then GETs K (the
engine postpones it until the move ends, then answers -MOVED, which redis-py follows) and
prints one JSON line: the value, or the exception an application would see, and the nodes it
knows after. Without the hold the engine answers -ASK for a node redis-py does not know, and
redis-py 8.1 and 8.2 fail with AttributeError (as against redis-server 7.0.15: docs/cluster.md).
"""
import argparse
import json
import sys

from redis.cluster import RedisCluster

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--key", required=True)
a = p.parse_args()

rc = RedisCluster(host="127.0.0.1", port=a.port, socket_timeout=20)
print(json.dumps({"nodes": sorted(n.name for n in rc.get_nodes())}), flush=True)
out = {}
try:
    v = rc.get(a.key)
    out["value"] = v.decode() if v is not None else None
except Exception as e:  # what the application would see
    out["error"] = f"{type(e).__name__}: {e}"
out["nodes_after"] = sorted(n.name for n in rc.get_nodes())
print(json.dumps(out), flush=True)
sys.exit(0)
