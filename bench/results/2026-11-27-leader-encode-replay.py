"""Issue 20 item 3 (bench/results/2026-11-27-leader-encode.md): Redis CPU per batch call
of leader mode's batch script, one argument per word (OLD, the script before) against a
new encoding, on a private redis-server.

usage: replay.py PORT CALLS ROUNDS NEW.lua FORM [KIND]
  OLD is old.lua in the working directory (the script text of fenced_script.rs before);
  FORM: mp (every command MessagePack-encoded), hybrid (HSET of bodies as one argument
  per word), final (as the code: bodies of 256 bytes or more on average one argument per
  word), struct (length-prefixed, read with struct.unpack);
  KIND: put16 (default), put128, put256, put1k, delete: a batch of four jobs on four
  tubes, as solo -c 10 makes them.
It sends CALLS calls of each form in turn, ROUNDS times, and reads Redis' used_cpu_user +
used_cpu_sys around each block.
"""
import socket, struct, sys, time
port = int(sys.argv[1]); K = int(sys.argv[2]); rounds = int(sys.argv[3])
OLD = open('old.lua').read(); NEW = open(sys.argv[4]).read()
def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str): a = a.encode()
        if isinstance(a, int): a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def readreply():
    line = f.readline()
    t = line[:1]
    if t == b"$":
        n = int(line[1:]);
        if n >= 0: f.read(n + 2)
        return line
    if t == b"*":
        for _ in range(int(line[1:])): readreply()
    return line
def cmd(*a):
    s.sendall(resp(a)); return readreply()
def load(src):
    s.sendall(resp(["SCRIPT", "LOAD", src])); line = f.readline(); sha = f.readline().strip().decode(); return sha
old_sha, new_sha = load(OLD), load(NEW)
cmd("SET", "L", "tok"); cmd("DEL", "L:commit")
KIND = sys.argv[6] if len(sys.argv) > 6 else "put16"
def commands(b):
    if KIND == "delete":
        cs = []
        for t in range(4):
            tube = "{bench}:t:tube%d" % t
            id_ = str(1000 + b * 4 + t)
            cs.append(["ZREM", tube + ":ready", id_.zfill(20)])
            cs.append(["HDEL", tube + ":jobs", id_])
            cs.append(["HDEL", tube + ":bodies", id_])
        cs.append(["HDEL", "{bench}:index"] + [str(1000 + b * 4 + t) for t in range(4)])
        return cs
    cs = []
    for t in range(4):
        tube = "{bench}:t:tube%d" % t
        id_ = str(1000 + b * 4 + t)
        cs.append(["ZADD", tube + ":ready", "1", id_.zfill(20)])
        cs.append(["HSET", tube + ":jobs", id_, "m" * 60])
        cs.append(["HSET", tube + ":bodies", id_, "b" * (1024 if KIND == "put1k" else int(KIND[3:]) if KIND[3:].isdigit() else 16)])
    idx = ["HSET", "{bench}:index"]
    for t in range(4): idx += [str(1000 + b * 4 + t), "tube%d" % t]
    cs.append(idx)
    return cs
def mphead(n):
    if n < 32: return bytes([0xa0 | n])
    if n < 256: return b"\xd9" + bytes([n])
    if n < 65536: return b"\xda" + struct.pack(">H", n)
    return b"\xdb" + struct.pack(">I", n)
def enc(w):
    if isinstance(w, str): w = w.encode()
    return w
def call(fmt, sha, seq, cs):
    head = ["EVALSHA", sha, 2, "L", "L:commit", "tok", seq, ""]
    if fmt == "old":
        args = []
        for c in cs: args += [len(c)] + c
    else:
        if sys.argv[5] == "final":
            args = []
            for c in cs:
                if c[1].endswith(":bodies") and c[0] == "HSET" and sum(len(enc(w)) for w in c[3::2]) >= 256 * ((len(c) - 2) // 2):
                    args += [len(c)] + c
                else:
                    args.append(b"".join(mphead(len(enc(w))) + enc(w) for w in c))
        elif sys.argv[5] == "hybrid":
            args = []
            for c in cs:
                if c[1].endswith(":bodies") and c[0] == "HSET":
                    args += [len(c)] + c
                else:
                    args.append(b"".join(mphead(len(enc(w))) + enc(w) for w in c))
        elif sys.argv[5] == "mp":
            args = [b"".join(mphead(len(enc(w))) + enc(w) for w in c) for c in cs]
        else:
            args = [struct.pack(">I", len(c)) + b"".join(struct.pack(">I", len(enc(w))) + enc(w) for w in c) for c in cs]
    return resp(head + args)
def cpu():
    s.sendall(resp(["INFO", "cpu"])); line = f.readline(); n = int(line[1:]); body = f.read(n + 2).decode()
    d = dict(l.split(":") for l in body.split("\r\n") if ":" in l)
    return float(d["used_cpu_sys"]) + float(d["used_cpu_user"])
seq = 0
res = {"old": [], "new": []}
for r in range(rounds):
    for fmt in ("old", "new"):
        sha = old_sha if fmt == "old" else new_sha
        payload = []
        for b in range(K):
            seq += 1
            payload.append(call(fmt, sha, seq, commands(b % 50)))
        data = b"".join(payload)
        c0 = cpu()
        # send in chunks of 100 calls, reading replies
        for i in range(0, K, 100):
            s.sendall(b"".join(payload[i:i+100]))
            for _ in range(len(payload[i:i+100])):
                line = readreply()
                if not line.startswith(b":1"): print("BAD", line); sys.exit(1)
        c1 = cpu()
        res[fmt].append((c1 - c0) * 1e6 / K)
for fmt in ("old", "new"):
    v = sorted(res[fmt]); print(fmt, "Redis CPU us per batch: runs", [round(x, 1) for x in res[fmt]], "median", round(v[len(v)//2], 2), "bytes/call", len(call(fmt, "x"*40, 1, commands(1))))
