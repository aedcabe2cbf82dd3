"""A producer/worker session with greenstalk (PyPI), used as a newcomer would.

Run against any beanstalk server: BEANSTALK_ADDR=host:port python3 greenstalk_scenario.py
Exits non-zero on the first behaviour that differs from beanstalkd's.
"""

import os
import sys
import time

import greenstalk


def main() -> None:
    host, port = os.environ.get("BEANSTALK_ADDR", "127.0.0.1:11300").rsplit(":", 1)
    addr = (host, int(port))
    binary = b"\x00binary\r\nbody\xff"
    with greenstalk.Client(addr, use="emails", watch=["emails"]) as producer, greenstalk.Client(
        addr, watch=["emails"]
    ) as worker, greenstalk.Client(addr, watch=["emails"], encoding=None) as raw:
        # put, reserve, delete; a binary body comes back byte for byte
        first = producer.put("hello", priority=10, ttr=30)
        urgent = producer.put(binary, priority=1, ttr=30)
        job = raw.reserve(timeout=1)
        assert (job.id, job.body) == (urgent, binary), (job.id, job.body)
        raw.delete(job)
        job = worker.reserve(timeout=1)
        assert (job.id, job.body) == (first, "hello"), (job.id, job.body)

        # stats-job of a reserved job
        stats = worker.stats_job(job)
        assert stats["state"] == "reserved" and stats["tube"] == "emails", stats
        assert stats["reserves"] == 1 and stats["ttr"] == 30, stats

        # bury and kick
        worker.bury(job)
        assert producer.peek_buried().id == first
        assert producer.stats_tube("emails")["current-jobs-buried"] == 1
        assert producer.kick(10) == 1
        assert producer.peek_ready().id == first

        # release with a delay: reservable again after about a second
        job = worker.reserve(timeout=1)
        worker.release(job, delay=1)
        assert producer.stats_tube("emails")["current-jobs-delayed"] == 1
        started = time.monotonic()
        job = worker.reserve(timeout=3)
        waited = time.monotonic() - started
        assert job.id == first and 0.9 <= waited < 1.5, (job.id, waited)

        # touch, then delete
        worker.touch(job)
        worker.delete(job)
        try:
            worker.reserve(timeout=0)
            raise AssertionError("expected TIMED_OUT")
        except greenstalk.TimedOutError:
            pass

        # server stats parse, and the tube lists
        stats = producer.stats()
        assert stats["total-jobs"] == 2 and stats["current-jobs-ready"] == 0, stats
        assert "emails" in producer.tubes()
        assert producer.using() == "emails"
        assert worker.watching() == ["emails"]
    print("greenstalk scenario: ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"greenstalk scenario FAILED: {e!r}", file=sys.stderr)
        raise
