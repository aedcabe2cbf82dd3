"""greenstalk 2.0.0's own test_stats_job and test_stats_tube (its tests/test_greenstalk.py,
MIT licence), against the server under test.

greenstalk 2.0.0 hands YAML string values over as the server sent them: `"default"`,
quotes included, from a server answering as 1.13, and `default` from one answering as
1.12 (Debian 12's beanstalkd). So its suite passes against 1.12 and fails against 1.13;
redstalk with --compat 1.12 must give it exactly what beanstalkd 1.12 gives. The
expected values follow the release the server says it is (`version` in stats, quoted by
both), so the scenario holds against every server, and proves the switch against
memory-1.12. Exits non-zero on the first difference.
"""

import os
import sys

import greenstalk

assert greenstalk.__version__ == "2.0.0", greenstalk.__version__


def main():
    host, port = os.environ.get("BEANSTALK_ADDR", "127.0.0.1:11300").rsplit(":", 1)
    address = (host, int(port))
    with greenstalk.Client(address) as c:
        release = c.stats()["version"].strip('"')
    assert release in ("1.12", "1.13"), release
    # What greenstalk 2.0.0 reads for a string value: bare from 1.12, quoted from 1.13.
    string = (lambda v: v) if release == "1.12" else (lambda v: f'"{v}"')

    # test_stats_job, with a tube of its own and the id the put returned.
    with greenstalk.Client(address, use="gs20-job") as c:
        jid = c.put("job")
        got = c.stats_job(jid)
        want = {
            "id": jid,
            "tube": string("gs20-job"),
            "state": "ready",
            "pri": greenstalk.DEFAULT_PRIORITY,
            "age": got["age"] if got["age"] in (0, 1) else "0 or 1",
            "delay": 0,
            "ttr": greenstalk.DEFAULT_TTR,
            "time-left": 0,
            "file": 0,
            "reserves": 0,
            "timeouts": 0,
            "releases": 0,
            "buries": 0,
            "kicks": 0,
        }
        assert got == want, f"stats_job: got {got!r}, want {want!r}"
        c.delete(jid)

    # test_stats_tube: a connection that uses another tube and watches its own.
    with greenstalk.Client(address, use="gs20-other", watch="gs20-tube") as c:
        got = c.stats_tube("gs20-tube")
        want = {
            "name": string("gs20-tube"),
            "current-jobs-urgent": 0,
            "current-jobs-ready": 0,
            "current-jobs-reserved": 0,
            "current-jobs-delayed": 0,
            "current-jobs-buried": 0,
            "total-jobs": 0,
            "current-using": 0,
            "current-watching": 1,
            "current-waiting": 0,
            "cmd-delete": 0,
            "cmd-pause-tube": 0,
            "pause": 0,
            "pause-time-left": 0,
        }
        assert got == want, f"stats_tube: got {got!r}, want {want!r}"
    print(f"greenstalk 2.0.0 scenario: ok (server answers as {release})")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"greenstalk 2.0.0 scenario FAILED: {e}", file=sys.stderr)
        sys.exit(1)
