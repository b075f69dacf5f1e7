#!/usr/bin/env python3
"""User-space instructions per pipelined GET with and without client-side caching, counted by
callgrind (repeatable whatever the machine is doing, unlike scripts/bench-tracking.sh's timings).

    scripts/bench-instructions-tracking.py BIN MODE      (MODE: plain | warm | cold)
    CLIENTS=50 KEYS=2000 P=16 scripts/bench-instructions-tracking.py target/release/recached warm

BIN is run as `BIN server`, or as redis-server when its name ends in redis-server, under
`valgrind --tool=callgrind --instr-atstart=no`. KEYS keys `key:<n>` are loaded, CLIENTS RESP3
connections (HELLO 3; CLIENT TRACKING ON unless plain) each read every key once in their own
shuffled order, pipelines of P, all connections written before any is read:
  plain  no tracking; one uncounted pass, then one counted;
  warm   tracking; one uncounted pass (the table then holds every key × client), one counted;
  cold   tracking; one counted pass from an empty table (every GET inserts).
Prints `<bin> <mode> … instr/GET=<n>`; VG_ARGS adds valgrind flags (e.g. --cache-sim=yes, then
the per-GET cache events follow); KEEP=path keeps the callgrind file."""
import os, random, socket, subprocess, sys, tempfile, time

binp, mode = os.path.abspath(sys.argv[1]), sys.argv[2]
assert mode in ("plain", "warm", "cold"), "MODE: plain | warm | cold"
C = int(os.environ.get("CLIENTS", 50))
K = int(os.environ.get("KEYS", 2000))
P = int(os.environ.get("P", 16))
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
tmp = tempfile.mkdtemp(prefix="recached-instr-trk.")
out = os.path.join(tmp, "cg.out")
if binp.endswith("redis-server"):
    args = [binp, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
else:
    args = [binp, "server", "--port", str(port), "--bind", "127.0.0.1"]
vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
srv = subprocess.Popen(vg + os.environ.get("VG_ARGS", "").split() + args,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)


def conn():
    for _ in range(300):
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def send(sk, *a):
    sk.sendall(b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a))


def readn(sk, n):
    b = b""
    while len(b) < n:
        d = sk.recv(n - len(b))
        if not d:
            raise SystemExit("connection closed")
        b += d
    return b


def key(i):
    return b"key:%d" % i


try:
    ld = conn()
    ld.sendall(b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$3\r\nxxx\r\n" % (len(key(i)), key(i))
                        for i in range(K)))
    readn(ld, 5 * K)
    cs = []
    for i in range(C):
        c = conn()
        send(c, b"HELLO", b"3")
        send(c, b"PING")
        buf = b""
        while not buf.endswith(b"+PONG\r\n"):
            buf += c.recv(65536)
        if mode != "plain":
            send(c, b"CLIENT", b"TRACKING", b"ON")
            assert readn(c, 5) == b"+OK\r\n"
        cs.append(c)
    orders = []
    for i in range(C):
        o = list(range(K))
        random.Random(i).shuffle(o)
        orders.append(o)
    REPLY = b"$3\r\nxxx\r\n"

    def sweep():
        n = 0
        for start in range(0, K, P):
            for i, c in enumerate(cs):
                c.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key(k)), key(k))
                                   for k in orders[i][start:start + P]))
            for i, c in enumerate(cs):
                m = len(orders[i][start:start + P])
                r = readn(c, m * len(REPLY))
                assert r == REPLY * m, r[:80]
                n += m
        return n

    if mode != "cold":
        sweep()
    subprocess.run(["callgrind_control", "-i", "on", str(srv.pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n = sweep()
    # The dump holds what ran since instrumentation went on (shutdown goes to another file).
    subprocess.run(["callgrind_control", "-d", str(srv.pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
finally:
    srv.terminate()
    srv.wait()
total, rest = None, []
for line in open(out + ".1"):
    if line.startswith("summary:"):
        total = int(line.split()[1])
        rest = [int(x) for x in line.split()[2:]]
if os.environ.get("KEEP"):
    os.replace(out + ".1", os.environ["KEEP"])
for f in os.listdir(tmp):
    os.remove(os.path.join(tmp, f))
os.rmdir(tmp)
print(f"{os.path.basename(binp)} {mode} clients={C} keys={K} P={P} gets={n} "
      f"instr/GET={total / n:.0f}", " ".join(f"{x / n:.1f}" for x in rest))
