"""go-queue dq's "cancel unpaid order" pattern rewritten with keys (docs/EXTENSIONS.md,
*Keys*), on ONE endpoint, through greenstalk's own low-level send (_send_cmd).

dq (compat/dq/scenario.py replays it) writes every delayed job to two or three nodes,
keeps a table from its joint id to the physical ids to revoke it, and dedupes in the
consumer with a Redis SETNX on the body's md5. With keys the order id is the job's key:

- schedule:  put 2 1800 5 <n> rpl:order-<n>:<window>   (dq's priority, 30 min, TTR 5 s;
             the body wrapped as dq does, `<unix-nanos due>/<body>`)
- move:      the same put again with the new delay (same id, body replaced), or
             retime-key order-<n> <delay>
- revoke:    delete-key order-<n>   (the order was paid)
- retry:     put ... idp:order-<n>:<window> after the job ran: INSERTED <id> DELETED,
             no second job
- consumer:  dq's loop (reserve, delete at once, unwrap, run) on two connections, with
             no SETNX: every order's job runs exactly once.

Delays are hundreds of ms: not run before its delay (exact), at most 5 s late.
EXT_ADDR: a redstalk with extensions on (host:port).
"""

import os
import sys
import threading
import time

import greenstalk
from greenstalk_ext import find_key, put_key

TUBE = "compat-dq-keys"
WINDOW = 60  # seconds the key stays taken after its job is deleted
LATE = 5.0
DQ_PRI, DQ_TTR = 2, 5  # what dq puts with


# --- what a user writes (put_key and find_key: greenstalk_ext.py's) -----------------
def schedule(c, order, delay):
    """dq's Delay() with the order id as key: schedules, or moves while it waits."""
    due = time.time_ns() + (int(delay[:-2]) * 10**6 if delay.endswith("ms") else int(delay) * 10**9)
    return put_key(c, f"{due}/cancel order {order}", f"rpl:order-{order}:{WINDOW}", delay, DQ_PRI, DQ_TTR)


# --- the checks -----------------------------------------------------------------------
def fail(what):
    sys.exit(f"dq keys: {what}")


def conflict(call):
    try:
        call()
    except greenstalk.UnknownResponseError as e:
        return e.status.decode(), [v.decode() for v in e.values]
    fail("no CONFLICT")


host, port = os.environ["EXT_ADDR"].rsplit(":", 1)
addr = (host, int(port))
runs = []  # (job id, body, monotonic time it ran)
lock = threading.Lock()
stop = threading.Event()


def consumer():
    """dq's consumer loop, minus the SETNX: reserve, delete at once, unwrap, run."""
    with greenstalk.Client(addr, watch=TUBE) as c:
        while not stop.is_set():
            try:
                job = c.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            c.delete(job)
            now = time.monotonic()
            due, _, body = job.body.partition("/")
            if time.time_ns() - int(due) > 30 * 60 * 10**9:  # dq drops what is 30 min late
                continue
            with lock:
                runs.append((job.id, body, now))


def wait_runs(n):
    end = time.monotonic() + 10 + LATE
    while time.monotonic() < end:
        with lock:
            if len(runs) >= n:
                return
        time.sleep(0.02)
    fail(f"{len(runs)} of {n} jobs ran: {runs}")


workers = [threading.Thread(target=consumer, daemon=True) for _ in range(2)]
for w in workers:
    w.start()
sent = {}  # order -> (id, delay in s, monotonic time before the put or retime was sent)
with greenstalk.Client(addr, use=TUBE) as p:
    if "keys" not in set(p._list_cmd(b"list-extensions")):
        fail("list-extensions does not name keys")
    # order 1: scheduled in 300 ms and left alone; a retried put while it waits is deduped.
    t = time.monotonic()
    id1, state = schedule(p, 1, "300ms")
    if state is not None:
        fail(f"order 1 answered an existing job ({state})")
    sent[1] = (id1, 0.3, t)
    got = put_key(p, "0/cancel order 1", f"idp:order-1:{WINDOW}", "300ms", DQ_PRI, DQ_TTR)
    # Delayed while 300 ms have not passed; a stalled producer may find it further on.
    late = {"DELAYED", "READY", "RESERVED", "DELETED"} if time.monotonic() - t >= 0.3 else {"DELAYED"}
    if got[0] != id1 or got[1] not in late:
        fail(f"a retried idp put of order 1 (job {id1}) answered {got}")
    # order 2: 30 minutes, as dq schedules it, then moved to 500 ms by putting it again.
    id2, _ = schedule(p, 2, "1800")
    t = time.monotonic()
    if schedule(p, 2, "500ms") != (id2, "DELAYED"):
        fail("moving order 2 by a rpl put did not keep its job")
    sent[2] = (id2, 0.5, t)
    # order 3: 30 minutes, then moved to 700 ms by retime-key.
    id3, _ = schedule(p, 3, "1800")
    t = time.monotonic()
    p._send_cmd(b"retime-key order-3 700ms", b"RETIMED")
    sent[3] = (id3, 0.7, t)
    # order 4: 30 minutes, then paid: revoked by key; scheduling it again is refused.
    id4, _ = schedule(p, 4, "1800")
    p._send_cmd(b"delete-key order-4", b"DELETED")
    if find_key(p, "order-4") != (id4, "DELETED"):
        fail(f"order 4 after delete-key: {find_key(p, 'order-4')}")
    got = conflict(lambda: schedule(p, 4, "1800"))
    if got != ("CONFLICT", [str(id4), "DELETED"]):
        fail(f"rescheduling paid order 4: {got}")
    if len({id1, id2, id3, id4}) != 4:
        fail(f"ids {id1} {id2} {id3} {id4}")

    wait_runs(3)
    # The producer retries order 1's put after its job ran (a lost INSERTED): deduped.
    if put_key(p, "0/cancel order 1", f"idp:order-1:{WINDOW}", "300ms", DQ_PRI, DQ_TTR) != (id1, "DELETED"):
        fail("a put of order 1 after its job ran was not deduped by its window")
    if find_key(p, "order-1") != (id1, "DELETED"):
        fail(f"order 1 after it ran: {find_key(p, 'order-1')}")
    time.sleep(1)  # room for a second run of anything, which must not come
    stop.set()
    for w in workers:
        w.join()
    stats = p.stats_tube(TUBE)

ran = {id: (body, at) for id, body, at in runs}
if sorted(id for id, _, _ in runs) != sorted([id1, id2, id3]):
    fail(f"jobs ran {sorted(id for id, _, _ in runs)}, not each of {[id1, id2, id3]} once")
for order, (id, delay, t) in sent.items():
    body, at = ran[id]
    if body != f"cancel order {order}":
        fail(f"job {id} of order {order} ran with {body!r}")
    if not delay <= at - t <= delay + LATE:
        fail(f"order {order} ({delay} s) ran after {at - t:.3f} s")
left = {k: v for k, v in stats.items() if k.startswith("current-jobs-") and v}
if stats["total-jobs"] != 4 or left:
    fail(f"tube: total-jobs {stats['total-jobs']} (4 made; a move or dedupe makes none), {left}")
waits = ", ".join(f"order {o} {ran[sent[o][0]][1] - sent[o][2]:.3f} s" for o in sent)
print(f"dq keys: ok (orders 1-3 ran once each: {waits}; order 4 revoked; retry deduped)")
