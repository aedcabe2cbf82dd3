"""go-queue `dq` with real redundancy: three endpoints, each its own failure domain.

dq writes every job to each endpoint and counts it written when at least two puts
succeeded (producercluster.go: minWrittenRobots = 2); consumers run one loop per
endpoint and a lock drops the second copy. Pointed at redstalk, that only buys
redundancy when the endpoints fail independently: two endpoints on one namespace store
each job twice in one queue, and with two endpoints dq cannot write at all while one is
down. The layout docs/SCALING.md recommends is three endpoints in three namespaces on
separate Redis servers (or on three primaries of a cluster). This scenario runs dq's
wire behaviour (scenario.py's connections and dedup guard) against that layout:

1. consumers on all three endpoints; producers write a first half of the jobs;
2. one endpoint's whole failure domain dies (its redstalk and its redis-server, kill -9):
   every later write still reaches two endpoints, so dq counts it written;
3. every logical job runs exactly once (copies on the dead endpoint are never needed),
   nothing is left on the live endpoints, no revoked job runs;
4. dq on just two endpoints while one is down refuses the write (one put of two): the
   layout a user must avoid.

Environment: BEANSTALK_ADDRS (three host:port, comma-separated), DQ_DOWN_PIDS (the pids
of the third endpoint's processes, killed in step 2). Exits non-zero on a failure.
"""

import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenario as dq  # noqa: E402  (dq's wire behaviour lives there)

TUBE = "dq-layout"
JOBS_PER_PHASE = 8  # per producer service; delays cycle 0, 1, 2 s
REVOKED_PER_PHASE = 1
RECONNECT_PAUSE = 1.0  # dq's consumer sleeps a second after an error


class Producer:
    """producerCluster.insert: put on every node, written when >= 2 succeeded, else revoke."""

    def __init__(self, endpoints):
        self.endpoints = endpoints
        self.nodes = {}
        self.failed_puts = 0

    def _node(self, e):
        node = self.nodes.get(e)
        if node is None:
            node = dq.ProducerNode(e, TUBE)  # go-beanstalk dials again after a failure
            self.nodes[e] = node
        return node

    def _put(self, e, wrapped, delay):
        try:
            node = self._node(e)
            node.send_put(wrapped, delay)
            jid, err = node.read_put()
            if jid is None:
                raise dq.Failure(f"{e}: put answered {err!r}")
            return jid
        except (OSError, dq.Failure):
            node = self.nodes.pop(e, None)
            if node is not None:
                node.conn.close()
            self.failed_puts += 1
            return None

    def delay(self, body, delay_s):
        target = time.time_ns() + delay_s * 10**9
        wrapped = dq.wrap(body, target)
        ids = [j for j in (self._put(e, wrapped, delay_s) for e in self.endpoints) if j]
        if len(ids) >= 2:
            return ",".join(ids), wrapped, target
        for jid in ids:  # dq revokes a write that did not reach two nodes
            self.revoke(jid)
        return None, wrapped, target

    def revoke(self, joint):
        replies = []
        for entry in joint.split(","):
            e, _, jid = entry.split("/")
            node = self.nodes.get(e)
            if node is None:
                continue
            node.conn.send(b"delete %d\r\n" % int(jid))
            replies.append(node.conn.read_resp()[0])
        return replies

    def close(self):
        for node in self.nodes.values():
            node.conn.close()


class Consumer(dq.ConsumerNode):
    """consumerNode.consumeEvents: on an error, log, drop the connection, sleep 1 s, dial again."""

    def __init__(self, name, endpoint, guard, stop):
        super().__init__(name, endpoint, TUBE, guard, stop)
        self.errors = 0

    def run(self):
        while not self.stop.is_set():
            try:
                self.loop()
            except (OSError, dq.Failure):
                self.errors += 1
                self.started.set()
                self.stop.wait(RECONNECT_PAUSE)


def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def refused(endpoint):
    try:
        socket.create_connection(tuple(endpoint.rsplit(":", 1)), timeout=2).close()
        return False
    except OSError:
        return True


def produce(endpoints, phase, services, produced, lock):
    def run(k):
        p = Producer(endpoints)
        for i in range(JOBS_PER_PHASE + REVOKED_PER_PHASE):
            revoke = i >= JOBS_PER_PHASE
            delay = dq.REVOKED_DELAY if revoke else i % 3
            body = b'{"phase":%d,"svc":%d,"n":%d}' % (phase, k, i)
            joint, wrapped, target = p.delay(body, delay)
            dq.check(joint is not None, f"phase {phase}: dq could not write {body!r} to two of {len(endpoints)} nodes")
            if revoke:
                time.sleep(0.1)
                replies = p.revoke(joint)
                dq.check(replies == ["DELETED"] * len(replies), f"revoke {joint} answered {replies}")
            with lock:
                produced.append((joint, wrapped, target, revoke, p.failed_puts))
            time.sleep(0.03)
        p.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(services)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    endpoints = [e for e in os.environ.get("BEANSTALK_ADDRS", "").split(",") if e]
    down_pids = [int(p) for p in os.environ.get("DQ_DOWN_PIDS", "").split(",") if p]
    dq.check(len(endpoints) == 3, "BEANSTALK_ADDRS must name three endpoints")
    dq.check(down_pids, "DQ_DOWN_PIDS must name the third endpoint's processes")
    live, dead = endpoints[:2], endpoints[2]

    guard, stop = dq.Guard(), threading.Event()
    consumers = [Consumer(f"svc{s + 1}/node{i + 1}", e, guard, stop) for s in range(2) for i, e in enumerate(endpoints)]
    for c in consumers:
        c.start()
    for c in consumers:
        dq.check(c.started.wait(dq.LATE), f"{c.endpoint}: consumer never started")

    produced, lock = [], threading.Lock()
    # phase 1 writes through producers whose threads raise on a failed write: surface it
    errors = []

    def phase(n, eps):
        try:
            produce(eps, n, dq.CLUSTERS, produced, lock)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    phase(1, endpoints)
    dq.check(not errors, f"phase 1: {errors[:1]}")
    before = len(produced)

    killed_at = time.monotonic()
    kill(down_pids)
    deadline = killed_at + dq.LATE
    while not refused(dead):
        dq.check(time.monotonic() < deadline, f"{dead} still accepts connections after kill -9")
        time.sleep(0.05)

    # Two endpoints, one of them down: dq cannot write (the layout to avoid). The put
    # that reached the live endpoint is revoked, before its delay ends (so it never runs;
    # phase 2's later jobs keep the run going past its time).
    two = Producer([live[0], dead])
    joint, _, _ = two.delay(b"two-endpoints", dq.REVOKED_DELAY)
    two.close()
    dq.check(joint is None, "dq wrote to two endpoints with one of them down")

    # Phase 2: the producers keep all three endpoints configured, as dq would.
    phase(2, endpoints)
    dq.check(not errors, f"phase 2: {errors[:1]}")
    during = produced[before:]
    dq.check(all(len(j.split(",")) == 2 for j, *_ in during), "a write during the outage did not name two nodes")
    failed = sum(1 for j, *_ in during if dead in j)
    dq.check(failed == 0, "a write during the outage names the dead endpoint")


    # Every logical job runs once; copies on the live endpoints are all consumed.
    runnable = {w.split(b"/", 1)[1] for _, w, _, rev, _ in produced if not rev}
    revoked = {w.split(b"/", 1)[1] for _, w, _, rev, _ in produced if rev}
    last = max(t for _, _, t, _, _ in produced)
    wait_until = time.monotonic() + (last - time.time_ns()) / 1e9 + dq.LATE
    while True:
        ran = {e[0] for e in guard.executions}
        if runnable <= ran and time.time_ns() > last + 1_500_000_000:
            break
        dq.check(time.monotonic() < wait_until, f"ran {len(ran & runnable)} of {len(runnable)} logical jobs in time")
        time.sleep(0.05)
    for e in live:
        st = dq.stats_tube(e, TUBE)
        for state in ("ready", "delayed", "reserved", "buried"):
            k = f"current-jobs-{state}"
            dq.check(st.get(k) == "0", f"{e}: stats-tube {TUBE} {k} = {st.get(k)} after the run")
    stop.set()
    for c in consumers:
        c.join(dq.RESERVE_TIMEOUT + dq.LATE)
        dq.check(not c.is_alive(), f"{c.name}: consumer still blocked after its timeout")

    ran = [e[0] for e in guard.executions]
    dq.check(len(ran) == len(set(ran)), "a logical job ran twice despite the dedup")
    dq.check(set(ran) == runnable, f"ran {len(set(ran))} jobs, wanted {len(runnable)}")
    dq.check(not (set(ran) & revoked), "a revoked job ran")
    stranded = sum(1 for j, _, _, rev, _ in produced[:before] if not rev and dead in j)
    by_node = {e: sum(len(c.reserved) for c in consumers if c.endpoint == e) for e in endpoints}
    print(
        f"dq layout, 3 endpoints in 3 namespaces on 3 redis-servers: {len(produced)} writes "
        f"({before} before, {len(during)} after kill -9 of endpoint 3 and its Redis, each on 2 endpoints)"
    )
    print(
        f"  ran {len(ran)} logical jobs once each ({stranded} of them had a copy stranded on the dead endpoint), "
        f"duplicates suppressed {guard.suppressed}, revoked {len(revoked)} never ran"
    )
    print(
        "  reserved per endpoint: "
        + ", ".join(f"node{i + 1} {by_node[e]}" for i, e in enumerate(endpoints))
        + f"; consumer reconnect errors {sum(c.errors for c in consumers)}"
    )
    print("  dq on 2 endpoints with one down: write refused (1 put of 2), as go-queue does")
    print("dq layout: ok")


if __name__ == "__main__":
    try:
        main()
    except dq.Failure as e:
        print(f"dq layout FAILED: {e}", file=sys.stderr)
        sys.exit(1)
