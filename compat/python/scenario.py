"""A producer/worker session with greenstalk (PyPI), used as a newcomer would.

Run against any beanstalk server: BEANSTALK_ADDR=host:port python3 scenario.py
Covers the whole client API: put with priority, delay and TTR; reserve,
reserve-with-timeout and reserve-job; touch; release with a delay; bury, kick, kick-job;
the four peeks; stats, stats-tube and stats-job as parsed by the client; list-tubes,
list-tube-used, list-tubes-watched; use, watch, ignore; pause-tube; delete; binary
bodies; the 65535-byte limit. Exits non-zero on the first behaviour that differs from
beanstalkd's.
"""

import os
import sys
import time

import greenstalk

STATS_KEYS = [
    "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
    "current-jobs-buried", "cmd-put", "cmd-peek", "cmd-peek-ready", "cmd-peek-delayed",
    "cmd-peek-buried", "cmd-reserve", "cmd-reserve-with-timeout", "cmd-delete", "cmd-release",
    "cmd-use", "cmd-watch", "cmd-ignore", "cmd-bury", "cmd-kick", "cmd-touch", "cmd-stats",
    "cmd-stats-job", "cmd-stats-tube", "cmd-list-tubes", "cmd-list-tube-used",
    "cmd-list-tubes-watched", "cmd-pause-tube", "job-timeouts", "total-jobs", "max-job-size",
    "current-tubes", "current-connections", "current-producers", "current-workers",
    "current-waiting", "total-connections", "pid", "version", "rusage-utime", "rusage-stime",
    "uptime", "binlog-oldest-index", "binlog-current-index", "binlog-records-migrated",
    "binlog-records-written", "binlog-max-size", "draining", "id", "hostname", "os", "platform",
]  # fmt: skip


JOB_STATS_KEYS = [
    "id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file", "reserves",
    "timeouts", "releases", "buries", "kicks",
]  # fmt: skip


def raises(exc, fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except exc as e:
        return e
    raise AssertionError(f"expected {exc.__name__} from {fn.__name__}{args}, got {result!r}")


def job_stats(**overrides):
    """stats-job as greenstalk parses it, for a fresh job; fields overridden by name."""
    base = {
        "id": 0, "tube": "default", "state": "ready", "pri": 2**16, "age": 0, "delay": 0,
        "ttr": 60, "time-left": 0, "file": 0, "reserves": 0, "timeouts": 0, "releases": 0,
        "buries": 0, "kicks": 0,
    }  # fmt: skip
    for k, v in overrides.items():
        base[k.replace("_", "-")] = v
    assert list(base) == JOB_STATS_KEYS, overrides
    return base


def tube_stats(name, **overrides):
    base = {
        "name": name, "current-jobs-urgent": 0, "current-jobs-ready": 0,
        "current-jobs-reserved": 0, "current-jobs-delayed": 0, "current-jobs-buried": 0,
        "total-jobs": 0, "current-using": 0, "current-watching": 0, "current-waiting": 0,
        "cmd-delete": 0, "cmd-pause-tube": 0, "pause": 0, "pause-time-left": 0,
    }  # fmt: skip
    for k, v in overrides.items():
        key = k.replace("_", "-")
        assert key in base, k
        base[key] = v
    return base


def same(got, want, what):
    assert got == want and list(got) == list(want), f"{what}: got {got!r}, want {want!r}"


# A loaded machine delays replies (and this process) by seconds: only a wrong answer may
# fail the scenario. Something early is wrong; late is only slow, by up to this much.
LATE = 5.0
# A reserve that must find a job already there waits this long at most (it is answered
# at once; the bound only ends a wrong answer).
READY = 10


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def main() -> None:
    host, port = os.environ.get("BEANSTALK_ADDR", "127.0.0.1:11300").rsplit(":", 1)
    addr = (host, int(port))
    puts = {"parsed": 0, "inserted": 0}

    def put(client, body, **kw):
        puts["parsed"] += 1
        jid = client.put(body, **kw)
        puts["inserted"] += 1
        return jid

    # ---- use, watch, ignore and the three lists, on a fresh server ----
    with greenstalk.Client(addr) as first:
        same(first.tubes(), ["default"], "list-tubes on a fresh server")
        assert first.using() == "default"
        same(first.watching(), ["default"], "list-tubes-watched on connect")
    with greenstalk.Client(addr, use="l-one", watch=["l-two", "l-three"]) as c:
        # greenstalk watched l-two and l-three, then ignored default
        same(c.tubes(), ["default", "l-one", "l-two", "l-three"], "list-tubes in creation order")
        assert c.using() == "l-one", c.using()
        # beanstalkd moves the last watched tube into the hole default left
        same(c.watching(), ["l-three", "l-two"], "list-tubes-watched after ignoring default")
        assert c.watch("l-two") == 2  # already watched: no-op
        assert c.ignore("l-two") == 1
        assert c.ignore("nonexistent") == 1  # not watched: success, unchanged
        raises(greenstalk.NotIgnoredError, c.ignore, "l-three")
        assert c.watch("default") == 2
        c.use("l-four")
        assert c.using() == "l-four"
        raises(greenstalk.NotFoundError, c.stats_tube, "l-one")  # nobody holds it any more
        same(c.stats_tube("l-four"), tube_stats("l-four", current_using=1), "stats-tube of a new tube")
        same(c.stats_tube("l-three"), tube_stats("l-three", current_watching=1), "stats-tube l-three")
        raises(greenstalk.BadFormatError, c.use, "-bad")
    with greenstalk.Client(addr) as c:
        same(c.tubes(), ["default"], "list-tubes after the tubes lost their last reference")

    binary = b"\x00binary\r\nbody\xff"
    with greenstalk.Client(addr, use="emails", watch=["emails"]) as producer, greenstalk.Client(
        addr, watch=["emails"]
    ) as worker, greenstalk.Client(addr, watch=["emails"], encoding=None) as raw:
        # ---- put, reserve, delete; a binary body comes back byte for byte ----
        first = put(producer, "hello", priority=10, ttr=30)
        urgent = put(producer, binary, priority=1, ttr=30)
        job = raw.reserve(timeout=READY)
        assert (job.id, job.body) == (urgent, binary), (job.id, job.body)
        raw.delete(job)
        raises(greenstalk.NotFoundError, raw.delete, job)
        job = worker.reserve()  # plain reserve: a job is ready
        assert (job.id, job.body) == (first, "hello"), (job.id, job.body)
        raises(greenstalk.NotFoundError, producer.delete, job)  # reserved by another
        raises(greenstalk.NotFoundError, producer.touch, job)

        # ---- stats-job of a reserved job, compared whole ----
        same(
            worker.stats_job(job),
            job_stats(id=first, tube="emails", state="reserved", pri=10, ttr=30, time_left=29, reserves=1),
            "stats-job of a reserved job",
        )

        # ---- bury with a priority, peek-buried, kick ----
        worker.bury(job, priority=12)
        assert producer.peek_buried().id == first
        raises(greenstalk.NotFoundError, producer.peek_ready)
        same(
            producer.stats_tube("emails"),
            tube_stats(
                "emails", current_jobs_buried=1, total_jobs=2, current_using=1, current_watching=3,
                cmd_delete=1,
            ),
            "stats-tube with a buried job",
        )
        assert producer.kick(10) == 1
        assert producer.peek_ready().id == first
        assert worker.stats_job(first)["pri"] == 12 and worker.stats_job(first)["buries"] == 1

        # ---- release with a priority and a delay: reservable again after about a second ----
        job = worker.reserve(timeout=READY)
        worker.release(job, priority=11, delay=1)
        assert producer.stats_tube("emails")["current-jobs-delayed"] == 1
        assert producer.peek_delayed().id == first
        same(
            worker.stats_job(first),
            job_stats(
                id=first, tube="emails", state="delayed", pri=11, delay=1, ttr=30, reserves=2, releases=1,
                buries=1, kicks=1,
            ),
            "stats-job of a released, delayed job",
        )
        job, waited = timed(worker.reserve, timeout=READY)
        assert job.id == first and 0.9 <= waited < 1.5 + LATE, (job.id, waited)

        # ---- touch, then delete ----
        worker.touch(job)
        worker.delete(job)
        raises(greenstalk.TimedOutError, worker.reserve, timeout=0)
        raises(greenstalk.NotFoundError, producer.peek, first)

    # ---- put with priority, delay and TTR; the delayed state; kick-job and kick ----
    with greenstalk.Client(addr, use="sched", watch="sched") as c:
        later = put(c, "later", priority=7, delay=2, ttr=17)
        same(
            c.stats_job(later),
            job_stats(id=later, tube="sched", state="delayed", pri=7, delay=2, ttr=17, time_left=1),
            "stats-job of a delayed job",
        )
        assert c.peek_delayed().id == later
        raises(greenstalk.NotFoundError, c.peek_ready)
        raises(greenstalk.NotFoundError, c.peek_buried)
        raises(greenstalk.TimedOutError, c.reserve, timeout=0)
        c.kick_job(later)
        raises(greenstalk.NotFoundError, c.kick_job, later)  # ready now: nothing to kick
        assert c.stats_job(later)["state"] == "ready" and c.stats_job(later)["kicks"] == 1
        quick = put(c, "ttr zero", delay=1, ttr=0)
        assert c.stats_job(quick)["ttr"] == 1  # TTR below a second becomes one
        assert c.kick(5) == 1  # no buried job: kicks the delayed one
        raises(greenstalk.NotFoundError, c.peek_delayed)
        same(
            c.stats_tube("sched"),
            tube_stats(
                "sched", current_jobs_urgent=1, current_jobs_ready=2, total_jobs=2, current_using=1,
                current_watching=1,
            ),
            "stats-tube with two ready jobs",
        )
        job = c.reserve()
        assert (job.id, job.body) == (later, "later")  # pri 7 before 65536
        c.delete(job)

        # reserve-with-timeout waits for a delayed job to become ready
        soon = put(c, "in a second", delay=1)
        c.delete(quick)
        job, waited = timed(c.reserve, timeout=READY)
        assert job.id == soon and 0.9 <= waited < 1.5 + LATE, (job.id, waited)

        # touch restarts the TTR
        c.release(job)
        c.delete(job)
        short = put(c, "short ttr", ttr=30)
        job = c.reserve(timeout=0)
        assert job.id == short
        left = c.stats_job(short)["time-left"]
        assert 25 <= left <= 29, left
        time.sleep(1.2)
        before = c.stats_job(short)["time-left"]
        assert 20 <= before <= 28, before
        c.touch(job)
        after = c.stats_job(short)["time-left"]
        assert after > before or after == 29, (before, after)
        c.delete(job)

        # bury and kick-job of a buried job
        buried = put(c, "to bury", priority=3)
        job = c.reserve(timeout=0)
        c.bury(job, priority=4)
        assert c.peek_buried().id == buried
        raises(greenstalk.NotFoundError, c.bury, job)  # not reserved any more
        c.kick_job(buried)
        same(
            c.stats_job(buried),
            job_stats(id=buried, tube="sched", pri=4, reserves=1, buries=1, kicks=1),
            "stats-job after bury and kick-job",
        )

        # reserve-job takes a job by id, ready or delayed, whatever the watch list
        delayed = put(c, "by id", delay=60)
        job = c.reserve_job(delayed)
        assert (job.id, job.body) == (delayed, "by id")
        raises(greenstalk.NotFoundError, c.reserve_job, delayed)  # already reserved
        c.delete(job)
        job = c.reserve_job(buried)
        c.delete(job)

    # ---- pause-tube ----
    with greenstalk.Client(addr, use="paused", watch="paused") as c:
        held = put(c, "held")
        c.pause_tube("paused", 1)
        st = c.stats_tube("paused")
        assert st["pause"] == 1 and st["pause-time-left"] == 0 and st["cmd-pause-tube"] == 1, st
        raises(greenstalk.TimedOutError, c.reserve, timeout=0)
        assert c.peek_ready().id == held  # peeks ignore the pause
        job, waited = timed(c.reserve, timeout=READY)
        assert job.id == held and 0.8 <= waited < 1.5 + LATE, (job.id, waited)
        c.delete(job)
        c.pause_tube("paused", 0)  # unpause at once
        raises(greenstalk.NotFoundError, c.pause_tube, "no-such-tube", 1)

    # ---- binary bodies and the size limit ----
    with greenstalk.Client(addr, use="bin", watch="bin", encoding=None) as c:
        bodies = [
            b"",
            b"\r\n",
            b"\x00",
            bytes(range(256)),
            b"line one\r\nline two\nthree\r",
            b"\r\ndelete 1\r\nput 0 0 1 1\r\nx\r\n",
            b"ends in crlf\r\n\r\n",
        ]
        ids = [put(c, b) for b in bodies]
        for jid, body in zip(ids, bodies):
            assert c.peek(jid).body == body, (jid, c.peek(jid).body)
            job = c.reserve(timeout=0)
            assert (job.id, job.body) == (jid, body), (job.id, job.body, jid, body)
            c.delete(job)
        largest = put(c, b"\xab" * 65535)
        job = c.reserve(timeout=0)
        assert job.id == largest and job.body == b"\xab" * 65535, (job.id, len(job.body))
        assert c.stats_job(job)["state"] == "reserved"
        c.delete(job)
        puts["parsed"] += 1  # counted by cmd-put, though refused
        raises(greenstalk.JobTooBigError, c.put, b"\xab" * 65536)
        after = put(c, b"next")  # no desync, and JOB_TOO_BIG used no id
        assert after == largest + 1, (largest, after)
        c.delete(after)

    # ---- server stats, parsed by the client ----
    with greenstalk.Client(addr) as c:
        # The clients before this one have closed; a loaded server may not have seen
        # their hang-ups yet.
        deadline = time.monotonic() + LATE
        stats = c.stats()
        while stats["current-connections"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = c.stats()
        assert list(stats) == STATS_KEYS, list(stats)
        assert stats["cmd-put"] == puts["parsed"], (stats["cmd-put"], puts)
        assert stats["total-jobs"] == puts["inserted"], (stats["total-jobs"], puts)
        for key in ("current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved"):
            assert stats[key] == 0, (key, stats[key])
        assert stats["current-jobs-delayed"] == 0 and stats["current-jobs-buried"] == 0, stats
        assert stats["max-job-size"] == 65535 and stats["draining"] == "false", stats
        assert stats["current-connections"] == 1 and stats["current-waiting"] == 0, stats
        assert stats["cmd-stats"] >= 1 and stats["cmd-pause-tube"] == 3, stats
        assert stats["current-tubes"] == 1 and c.tubes() == ["default"], (stats, c.tubes())
        assert isinstance(stats["version"], str) and isinstance(stats["pid"], int), stats
    print(f"greenstalk scenario: ok ({puts['parsed']} puts, {puts['inserted']} jobs)")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"greenstalk scenario FAILED: {e!r}", file=sys.stderr)
        raise
