"""greenstalk (PyPI, 2.1.x) speaking redstalk's protocol extensions (docs/EXTENSIONS.md)
through its own low-level send: Client._send_cmd(line, expected word) writes a line and
returns the reply's other words (raising greenstalk's error for UNKNOWN_COMMAND,
BAD_FORMAT, NOT_FOUND...), _int_cmd and _list_cmd are its one-number and YAML-list
forms, and _read_chunk(n) reads a body. The helpers below are the few lines a user
needs; the rest checks what they get.

EXT_ADDR: a redstalk with extensions on. EXT_OFF_ADDRS: comma-separated servers that
must answer list-extensions UNKNOWN_COMMAND (beanstalkd, redstalk --extensions off).
"""

import os
import sys
import time

import greenstalk

TUBE = "compat-ext-greenstalk"


# --- what a user writes -------------------------------------------------------------
def extensions(c):
    """The extension families the server serves; none on beanstalkd. Probe before a put
    in ms: beanstalkd answers it BAD_FORMAT and reads its body as commands."""
    try:
        return set(c._list_cmd(b"list-extensions"))
    except greenstalk.UnknownCommandError:
        return set()


def put_ms(c, body, delay_ms, priority=greenstalk.DEFAULT_PRIORITY, ttr=60):
    buf = body.encode()
    return c._int_cmd(b"put %d %dms %d %d\r\n%b" % (priority, delay_ms, ttr, len(buf), buf), b"INSERTED")


def put_key(c, body, tag, delay=0, priority=greenstalk.DEFAULT_PRIORITY, ttr=60):
    """A put tagged idp:<key>[:<window>] or rpl:<key>[:<window>]: (id, None) for a new
    job, (id, its state) for the key's existing one; CONFLICT raises
    greenstalk.UnknownResponseError."""
    buf = body.encode()
    line = b"put %d %b %d %d %b\r\n%b" % (priority, str(delay).encode(), ttr, len(buf), tag.encode(), buf)
    id, *state = c._send_cmd(line, b"INSERTED")
    return int(id), state[0].decode() if state else None


def find_key(c, key):
    """(id, state) of the key's job in the used tube, or None."""
    try:
        id, state = c._send_cmd(b"find-key %b" % key.encode(), b"FOUND_KEY")
        return int(id), state.decode()
    except greenstalk.NotFoundError:
        return None


def reserve_batch(c, n, timeout=0):
    """Up to n ready jobs at once (waiting up to timeout seconds for the first)."""
    k = c._int_cmd(b"reserve-batch %d %d" % (n, timeout), b"RESERVED_BATCH")
    jobs = []
    for _ in range(k):
        id, size = (int(w) for w in greenstalk._parse_response(c._reader.readline(), b"RESERVED"))
        jobs.append(greenstalk.Job(id, c._read_chunk(size).decode()))
    return jobs


def batch(c, verb, reply, ids, *params):
    """delete-batch, release-batch <pri> <delay>, touch-batch, bury-batch <pri>: (ids done,
    the ids missing)."""
    line = b" ".join([verb] + [str(p).encode() for p in params] + [b"%d" % i for i in ids])
    done, _, *missing = c._send_cmd(line, reply)
    return int(done), [int(i) for i in missing]


def flush_tube(c, tube):
    return c._int_cmd(b"flush-tube %b" % tube.encode(), b"FLUSHED")


# --- the checks -----------------------------------------------------------------------
def fail(what):
    sys.exit(f"greenstalk extensions: {what}")


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return greenstalk.Client((host, int(port)), use=TUBE, watch=TUBE)


def without_extensions(addr):
    with connect(addr) as c:
        try:
            c._list_cmd(b"list-extensions")
            fail(f"{addr} answered list-extensions")
        except greenstalk.UnknownCommandError:
            pass
        if extensions(c) != set():
            fail(f"{addr}: extensions() is not empty")
        c.delete(c.put("the connection still serves"))


def delay_in_ms(c):
    start = time.monotonic()
    id = put_ms(c, "soon", 700)
    stats = c.stats_job(id)
    # stats-job keeps whole seconds, rounded down; the job waits while 700 ms have not
    # passed since the put (which was sent after `start`).
    if time.monotonic() - start < 0.7 and (stats["state"], stats["delay"]) != ("delayed", 0):
        fail(f"a job put with 700ms is {stats['state']} with delay {stats['delay']}")
    job = c.reserve(timeout=10)
    waited = time.monotonic() - start
    if job.id != id or not 0.7 <= waited <= 5.7:
        fail(f"the 700ms job came after {waited:.3f} s (job {job.id}, put {id})")
    c.delete(job)


def keys(c):
    id, state = put_key(c, "order 7", "idp:order-7")
    if state is not None:
        fail(f"the first idp put answered an existing job ({state})")
    if put_key(c, "order 7 again", "idp:order-7") != (id, "READY"):
        fail("the second idp put was not deduped to the first job")
    if find_key(c, "order-7") != (id, "READY") or c.peek(id).body != "order 7":
        fail(f"find-key order-7: {find_key(c, 'order-7')} (put {id})")
    c._send_cmd(b"delete-key order-7", b"DELETED")
    if find_key(c, "order-7") is not None:
        fail("order-7 found after delete-key")


def batches(c):
    ids = [c.put(f"job {i}") for i in range(12)]
    got = reserve_batch(c, 10, 1)
    if [j.id for j in got] != ids[:10] or got[3].body != "job 3":
        fail(f"reserve-batch 10 1 got {got}")
    # A repeated id is missing the second time.
    done, missing = batch(c, b"delete-batch", b"DELETED_BATCH", [j.id for j in got] + [ids[0]])
    if (done, missing) != (10, [ids[0]]):
        fail(f"delete-batch: {done} done, missing {missing}")
    rest = reserve_batch(c, 10, 1)
    if [j.id for j in rest] != ids[10:]:
        fail(f"the second reserve-batch got {rest}")
    if batch(c, b"release-batch", b"RELEASED_BATCH", [j.id for j in rest], 0, "60000ms") != (2, []):
        fail("release-batch")
    if c.stats_tube(TUBE)["current-jobs-delayed"] != 2:
        fail("the released jobs are not delayed")
    if flush_tube(c, TUBE) != 2:
        fail("flush-tube did not flush the 2 jobs")
    stats = c.stats_tube(TUBE)
    left = {k: v for k, v in stats.items() if k.startswith("current-jobs-") and v}
    if left:
        fail(f"after flush-tube: {left}")


def main():
    for addr in filter(None, os.environ.get("EXT_OFF_ADDRS", "").split(",")):
        without_extensions(addr)
    with connect(os.environ["EXT_ADDR"]) as c:
        served = extensions(c)
        if not {"milliseconds", "keys", "batches", "flush"} <= served:
            fail(f"list-extensions named {sorted(served)}")
        delay_in_ms(c)
        keys(c)
        batches(c)
    print(f"greenstalk extensions: ok ({', '.join(sorted(served))}; {os.environ.get('EXT_OFF_ADDRS')} without)")


# dq_keys.py imports the functions a user writes from here.
if __name__ == "__main__":
    main()
