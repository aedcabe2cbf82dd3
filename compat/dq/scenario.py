"""zeromicro/go-queue `dq` on go-beanstalk, replayed byte for byte (Python stdlib only).

What dq sends (go-queue dq/*.go on go-beanstalk v0.2.0):

- Producer: one persistent connection per node. `Delay(body, d)` wraps the body once as
  `<unix-nanos of now+d>/<body>` and writes it to every node in parallel with
  `Put(wrapped, pri=2, delay=d, ttr=5s)`. go-beanstalk sends `use <tube>` lazily,
  pipelined with the first put in the same write (`use t\r\nput 2 1 5 n\r\nbody\r\n`),
  and prints durations as whole seconds. The job counts as written when at least two
  puts succeeded; its id is the joint id `endpoint/tube/id,endpoint/tube/id`.
- Revoke(jointId): every producer node sends `delete <id>` for its own entry.
- Consumer: one loop per node. go-beanstalk's TubeSet starts as {default}, dq adds its
  tube, so the first reserve is written as `watch <tube>\r\nreserve-with-timeout 5\r\n`
  (the WATCHING reply is skipped by the client). On RESERVED it sends `delete <id>` at
  once, then runs the guarded handler: md5 of the wrapped body, a SETNX-style lock (first
  one wins), unwrap (drop unparseable bodies or ones scheduled over 30 min ago).

BEANSTALK_ADDR and BEANSTALK_ADDR2 are the two dq nodes. For the redis server kind both
are redstalk instances on one Redis, serving one queue: every logical job exists twice
physically, consumers on both nodes see copies, and dq's dedup leaves one execution.
Exits non-zero on the first behaviour that is not beanstalkd's.
"""

import hashlib
import os
import socket
import sys
import threading
import time

TUBE = "dq-compat"
PRI_NORMAL = 2
TTR = 5  # defaultTimeToRun = 5 s
RESERVE_TIMEOUT = 5  # reserveTimeout = 5 s
TOLERANCE_NS = 30 * 60 * 10**9  # dq drops jobs scheduled more than 30 min ago
EARLY_TOLERANCE = 1.0  # dq tolerates firing up to ~1 s early (whole-second delays)
MAX_CHECK_BYTES = len(str(time.time_ns())) + 2
CLUSTERS = 3  # producer services, each with its own connection to every node
JOBS_PER_CLUSTER = 12  # delays cycle 0, 1, 2 s
REVOKED_PER_CLUSTER = 2  # delayed REVOKED_DELAY s, revoked right after they were written
# Long enough that a loaded machine stalling the producer between put and revoke does
# not let the job fire first (a revoke then finds it gone: not a wrong answer).
REVOKED_DELAY = 5
# A loaded machine delays replies (and this process) by seconds: only a wrong answer may
# fail the scenario; waits for what must happen are this much longer than needed.
LATE = 15
FOREIGN = b"not-dq-job\r\n"  # a body dq cannot unwrap
CONSUMER_SERVICES = 2  # dq consumer processes, each with one loop per node, one Redis lock


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Conn:
    """A go-beanstalk-like connection: buffered reads, one write per request."""

    def __init__(self, endpoint):
        host, port = endpoint.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Go's default
        self.buf = b""
        self.used = "default"
        self.watched = {"default"}

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Failure("connection closed by the server")
        self.buf += chunk

    def readline(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def read(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_resp(self):
        """textproto ReadLine, skipping the replies to pipelined use/watch/ignore."""
        skipped = []
        line = self.readline()
        while line.startswith("WATCHING ") or line.startswith("USING "):
            skipped.append(line)
            line = self.readline()
        return line, skipped

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def wrap(body, at_ns):
    return str(at_ns).encode() + b"/" + body


class ProducerNode:
    def __init__(self, endpoint, tube):
        self.endpoint = endpoint
        self.tube = tube
        self.conn = Conn(endpoint)
        self.pipelined_use = 0

    def send_put(self, wrapped, delay):
        """Conn.cmd(t, nil, body, "put", pri, dur(delay), dur(ttr)): one flush."""
        out = b""
        if self.conn.used != self.tube:
            out += b"use " + self.tube.encode() + b"\r\n"
            self.conn.used = self.tube
            self.pipelined_use += 1
        out += b"put %d %d %d %d\r\n" % (PRI_NORMAL, int(delay), TTR, len(wrapped))
        out += wrapped + b"\r\n"
        self.conn.send(out)

    def read_put(self):
        line, skipped = self.conn.read_resp()
        for s in skipped:
            check(s == "USING " + self.tube, f"{self.endpoint}: use answered {s!r}")
        if not line.startswith("INSERTED "):
            return None, line
        return f"{self.endpoint}/{self.tube}/{int(line.split()[1])}", None

    def revoke(self, joint_id):
        """producerNode.Revoke: delete this node's entry of the joint id."""
        for entry in joint_id.split(","):
            fields = entry.split("/")
            if len(fields) < 3 or fields[0] != self.endpoint or fields[1] != self.tube:
                continue
            self.conn.send(b"delete %d\r\n" % int(fields[2]))
            line, _ = self.conn.read_resp()
            return line
        return None


class ProducerCluster:
    def __init__(self, endpoints, tube):
        check(len(endpoints) >= 2, "dq needs at least 2 nodes")
        check(len(set(endpoints)) == len(endpoints), "dq endpoints must be distinct")
        self.nodes = [ProducerNode(e, tube) for e in endpoints]

    def delay(self, body, delay_s):
        """producerCluster.Delay: wrap once, put on every node in parallel."""
        target = time.time_ns() + delay_s * 10**9
        wrapped = wrap(body, target)
        for node in self.nodes:  # every write goes out before any reply is read
            node.send_put(wrapped, delay_s)
        ids, errors = [], []
        for node in self.nodes:
            jid, err = node.read_put()
            (ids.append(jid) if jid else errors.append(f"{node.endpoint}: {err}"))
        check(not errors, f"put failed: {errors}")
        check(len(ids) >= 2, f"only {len(ids)} puts succeeded")
        return ",".join(ids), wrapped, target

    def revoke(self, joint_id):
        return [node.revoke(joint_id) for node in self.nodes]

    def close(self):
        for node in self.nodes:
            node.conn.close()


class Guard:
    """guardedConsume: md5 of the wrapped body, first lock wins, then unwrap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {}
        self.executions = []  # (payload, target_ns, when_ns, node)
        self.suppressed = 0
        self.discarded = []

    def consume(self, node, wrapped, when_ns):
        key = hashlib.md5(wrapped).hexdigest()
        pos = wrapped.find(b"/", 0, MAX_CHECK_BYTES)
        try:
            target = int(wrapped[:pos]) if pos > 0 else None
        except ValueError:
            target = None
        with self.lock:
            if target is None or target + TOLERANCE_NS < time.time_ns():
                self.discarded.append((node, wrapped))
                return
            if key in self.keys:  # SET key NX PX 3600500 lost
                self.suppressed += 1
                return
            self.keys[key] = node
            self.executions.append((wrapped[pos + 1 :], target, when_ns, node))


class ConsumerNode(threading.Thread):
    def __init__(self, name, endpoint, tube, guard, stop):
        super().__init__(name=name, daemon=True)
        self.endpoint = endpoint
        self.tube = tube
        self.guard = guard
        self.stop = stop
        self.reserved = []  # (id, wrapped body, arrival ns)
        self.watching_replies = []
        self.timeouts = 0
        self.error = None
        self.first_write = None
        self.started = threading.Event()

    def run(self):
        try:
            self.loop()
        except Exception as e:  # reported by the main thread
            self.error = e

    def loop(self):
        conn = Conn(self.endpoint)
        tube_set = {"default"}
        try:
            while not self.stop.is_set():
                tube_set.add(self.tube)  # conn.TubeSet.Name[c.tube] = true
                out = b""
                for s in sorted(tube_set - conn.watched):
                    out += b"watch " + s.encode() + b"\r\n"
                for s in sorted(conn.watched - tube_set):
                    out += b"ignore " + s.encode() + b"\r\n"
                conn.watched = set(tube_set)
                out += b"reserve-with-timeout %d\r\n" % RESERVE_TIMEOUT
                if self.first_write is None:
                    self.first_write = out
                    self.started.set()
                conn.send(out)
                line, skipped = conn.read_resp()
                self.watching_replies += skipped
                if line == "TIMED_OUT":
                    self.timeouts += 1
                    continue
                parts = line.split()
                if len(parts) != 3 or parts[0] != "RESERVED":
                    raise Failure(f"{self.endpoint}: reserve answered {line!r}")
                jid, size = int(parts[1]), int(parts[2])
                data = conn.read(size + 2)
                when = time.time_ns()
                check(data[-2:] == b"\r\n", f"{self.endpoint}: body of {jid} not CRLF-terminated")
                body = data[:-2]
                self.reserved.append((jid, body, when))
                conn.send(b"delete %d\r\n" % jid)
                reply, _ = conn.read_resp()
                if reply != "DELETED":
                    raise Failure(f"{self.endpoint}: delete {jid} of a job it reserved answered {reply!r}")
                self.guard.consume(self.name, body, when)
        finally:
            conn.close()


def plain_put(endpoint, body):
    """A job that is not dq's, put into `default` by some other program."""
    c = Conn(endpoint)
    try:
        c.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        return c.readline()
    finally:
        c.close()


def stats_tube(endpoint, tube):
    c = Conn(endpoint)
    try:
        c.send(b"stats-tube " + tube.encode() + b"\r\n")
        head = c.readline()
        check(head.startswith("OK "), f"{endpoint}: stats-tube {tube} answered {head!r}")
        data = c.read(int(head.split()[1]) + 2).decode()
        out = {}
        for ln in data.splitlines()[1:]:
            if ": " in ln:
                k, v = ln.split(": ", 1)
                out[k] = v
        return out
    finally:
        c.close()


def main():
    addr1 = os.environ.get("BEANSTALK_ADDR", "127.0.0.1:11300")
    addr2 = os.environ.get("BEANSTALK_ADDR2")
    server = os.environ.get("BEANSTALK_SERVER", "beanstalkd")
    check(addr2, "BEANSTALK_ADDR2 is needed: dq insists on at least two nodes")
    shared = server in ("redis", "leader")  # both addresses serve one queue
    endpoints = [addr1, addr2]

    guard = Guard()
    stop = threading.Event()
    consumers = [
        ConsumerNode(f"svc{s + 1}/node{i + 1}", e, TUBE, guard, stop)
        for s in range(CONSUMER_SERVICES)
        for i, e in enumerate(endpoints)
    ]
    for c in consumers:
        c.start()
    for c in consumers:
        check(c.started.wait(LATE), f"{c.endpoint}: consumer never started")
        check(
            c.first_write == b"watch %s\r\nreserve-with-timeout 5\r\n" % TUBE.encode(),
            f"first consumer write was {c.first_write!r}",
        )
    time.sleep(0.2)  # the consumers are waiting in their first reserve

    # A job that is not dq's, put into `default` on each node: the consumers watch
    # `default` too, reserve and delete it, and the guard discards it (not wrapped).
    foreign = []
    for e in endpoints:
        line = plain_put(e, FOREIGN)
        check(line.startswith("INSERTED "), f"{e}: plain put answered {line!r}")
        foreign.append((e, int(line.split()[1])))

    # Producers: several services writing concurrently, each with its own connections.
    produced = []  # (joint id, wrapped, target, delay, revoked)
    produced_lock = threading.Lock()
    revoke_replies = []
    errors = []

    def produce(k):
        try:
            cluster = ProducerCluster(endpoints, TUBE)
            for i in range(JOBS_PER_CLUSTER + REVOKED_PER_CLUSTER):
                revoke = i >= JOBS_PER_CLUSTER
                delay = REVOKED_DELAY if revoke else (i % 3)
                payload = b'{"svc":%d,"n":%d,"kind":"%s"}' % (k, i, b"revoke" if revoke else b"run")
                joint, wrapped, target = cluster.delay(payload, delay)
                if revoke:
                    time.sleep(0.1)
                    replies = cluster.revoke(joint)
                    with produced_lock:
                        revoke_replies.append((joint, replies))
                with produced_lock:
                    produced.append((joint, wrapped, target, delay, revoke))
                time.sleep(0.03)
            with produced_lock:
                clusters.append(cluster)
        except Exception as e:
            errors.append(e)

    clusters = []
    threads = [threading.Thread(target=produce, args=(k,)) for k in range(CLUSTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    check(len(clusters) == CLUSTERS, "a producer service failed")

    for joint, replies in revoke_replies:
        check(replies == ["DELETED", "DELETED"], f"revoke {joint} before it fired answered {replies}")

    # Expected physical jobs, by the node that issued them.
    def parse_joint(joint):
        out = []
        for entry in joint.split(","):
            ep, tube, jid = entry.split("/")
            check(tube == TUBE, f"joint id {joint} names tube {tube}")
            out.append((ep, int(jid)))
        return out

    expected = {}  # (issuer endpoint, id) -> wrapped
    revoked_ids = set()
    for joint, wrapped, target, delay, revoke in produced:
        entries = parse_joint(joint)
        check([e for e, _ in entries] == endpoints, f"joint id {joint} does not name both nodes in order")
        for ep, jid in entries:
            (revoked_ids.add((ep, jid)) if revoke else expected.__setitem__((ep, jid), wrapped))
    for ep, jid in foreign:
        expected[(ep, jid)] = FOREIGN
    if shared:
        all_ids = [jid for (_, jid) in list(expected) + list(revoked_ids)]
        check(len(all_ids) == len(set(all_ids)), "job ids repeat across instances on one Redis")

    # Wait until every physical copy was consumed and the revoked jobs' time has passed.
    last_target = max(p[2] for p in produced)
    deadline = time.monotonic() + (last_target - time.time_ns()) / 1e9 + LATE
    while True:
        got = sum(len(c.reserved) for c in consumers)
        late_enough = time.time_ns() > last_target + 1_500_000_000
        if got >= len(expected) and late_enough:
            break
        for c in consumers:
            if c.error:
                raise c.error
        check(time.monotonic() < deadline, f"only {got} of {len(expected)} physical jobs reserved in time")
        time.sleep(0.05)

    # Revoking a job that already ran: both deletes are NOT_FOUND (dq reports an error).
    done_joint = next(p[0] for p in produced if not p[4] and p[3] == 0)
    replies = clusters[0].revoke(done_joint)
    check(replies == ["NOT_FOUND", "NOT_FOUND"], f"revoke of a consumed job answered {replies}")

    # Nothing left anywhere, while the producers still hold the tube.
    for e in endpoints:
        st = stats_tube(e, TUBE)
        for state in ("ready", "delayed", "reserved", "buried"):
            k = f"current-jobs-{state}"
            check(st.get(k) == "0", f"{e}: stats-tube {TUBE} {k} = {st.get(k)} after the run")

    # Graceful stop: each consumer finishes its reserve-with-timeout 5 (TIMED_OUT).
    stop.set()
    for c in consumers:
        c.join(RESERVE_TIMEOUT + LATE)
        check(not c.is_alive(), f"{c.endpoint}: consumer still blocked after its timeout")
        if c.error:
            raise c.error
    for cl in clusters:
        cl.close()

    # ---- verdicts ----
    by_node = {e: [r for c in consumers if c.endpoint == e for r in c.reserved] for e in endpoints}
    for c in consumers:
        check(c.watching_replies[:1] == ["WATCHING 2"], f"{c.endpoint}: watch answered {c.watching_replies}")
    for e, reserved in by_node.items():
        ids = [jid for jid, _, _ in reserved]
        check(len(ids) == len(set(ids)), f"{e}: a job id was reserved twice on one node")
    seen = {}  # (issuer, id) -> count
    for c in consumers:
        for jid, body, when in c.reserved:
            if shared:
                issuer = next((ep for ep, i in expected if i == jid), None)
                issuer = issuer or next((ep for ep, i in revoked_ids if i == jid), c.endpoint)
            else:
                issuer = c.endpoint
            key = (issuer, jid)
            check(key not in revoked_ids, f"revoked job {key} was reserved")
            check(key in expected, f"{c.endpoint} reserved unknown job {jid}: {body[:60]!r}")
            check(body == expected[key], f"job {key} came back as {body!r}, put as {expected[key]!r}")
            seen[key] = seen.get(key, 0) + 1
    check(all(n == 1 for n in seen.values()), "a physical job was reserved twice")
    check(set(seen) == set(expected), f"never reserved: {sorted(set(expected) - set(seen))}")
    split = 0
    if shared:
        check(all(by_node.values()), "one node's consumers never saw a job of the shared queue")
        nodes_of = {}
        for e, reserved in by_node.items():
            for _, b, _ in reserved:
                nodes_of.setdefault(b, set()).add(e)
        split = sum(1 for b, ns in nodes_of.items() if len(ns) == 2 and b != FOREIGN)
    else:
        for e, reserved in by_node.items():
            bodies = [b for _, b, _ in reserved]
            check(len(bodies) == len(set(bodies)), f"{e}: a logical job reached one node twice")

    logical = [p for p in produced if not p[4]]
    wanted = {p[1].split(b"/", 1)[1]: p for p in logical}
    ran = [e[0] for e in guard.executions]
    check(len(ran) == len(set(ran)), "a logical job ran twice despite the dedup")
    check(set(ran) == set(wanted), f"ran {len(ran)} jobs, wanted {len(wanted)}")
    revoked_payloads = {p[1].split(b"/", 1)[1] for p in produced if p[4]}
    check(not (set(ran) & revoked_payloads), "a revoked job ran")
    n_discarded = len(guard.discarded)
    check(n_discarded == len(foreign), f"discarded {n_discarded} foreign jobs, want {len(foreign)}")

    lateness = []
    for c in consumers:
        for jid, body, when in c.reserved:
            if body == FOREIGN:
                continue
            target = int(body.split(b"/", 1)[0])
            lateness.append((when - target) / 1e9)
    max_late, max_early = max(lateness), max(0.0, -min(lateness))
    # Late is only slow (a loaded machine); early would be wrong.
    check(max_late <= 1.0 + LATE, f"a job fired {max_late:.3f} s after its target time")
    check(max_early <= EARLY_TOLERANCE, f"a job fired {max_early:.3f} s before its target time")
    by_delay = {}
    for payload, target, when, node in guard.executions:
        d = wanted[payload][3]
        by_delay[d] = max(by_delay.get(d, 0.0), (when - target) / 1e9)

    per_node = ", ".join(f"node{i + 1} reserved {len(by_node[e])}" for i, e in enumerate(endpoints))
    if shared:
        per_node += f" ({split} logical jobs had their two copies on different nodes)"
    pipelined = sum(n.pipelined_use for cl in clusters for n in cl.nodes)
    figures = [
        f"dq on {server}: {len(produced)} jobs produced ({len(logical)} to run, "
        f"{len(revoked_payloads)} revoked before firing), {len(expected) - len(foreign)} physical "
        f"copies, {len(foreign)} foreign jobs in default, use+put pipelined {pipelined}x",
        f"  {len(consumers)} consumer loops: {per_node}",
        f"  handled {len(guard.executions)}, duplicates suppressed {guard.suppressed}, "
        f"discarded {n_discarded}",
        f"  max lateness {max_late * 1000:.1f} ms (first copy by delay: "
        + ", ".join(f"{d} s {v * 1000:.1f} ms" for d, v in sorted(by_delay.items()))
        + f"), max earliness {max_early * 1000:.1f} ms",
    ]
    print("\n".join(figures))
    print("dq conversation: ok")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"dq conversation FAILED: {e}", file=sys.stderr)
        sys.exit(1)
