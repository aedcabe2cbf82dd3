"""A person at a telnet prompt, typing a beanstalk session one keystroke at a time.

Every keystroke is its own TCP segment, 5-20 ms apart (seeded, so every server sees the
same rhythm); Enter sends CR LF. Replies are read as they come and compared with the
replies beanstalkd gives, written once below. Some lines are interrupted by a pause of
more than a second (`{pause}`), which must change nothing. While a line is being typed,
nothing may arrive; after a `put` line, nothing may arrive until the body's line ends.

Expectation syntax: `> text` is typed then Enter (`\\xNN` types that byte: DEL is the
backspace key; Ctrl-C in telnet sends IAC IP, IAC DO TIMING-MARK); `< text` is one reply
line; `| text` is one YAML data line of the `OK <n>` reply above it (`OK *` when a value
is not exact: `*` matches anything, `LO..HI` an integer in that range); `eof` means the
server closes the connection. Values of pid, uptime, rusage-*, version, id, hostname,
os, platform in `stats` match anything. beanstalkd 1.12 does not quote name/tube/
version/hostname/os/platform; the replies of a server answering as 1.12 (the oracle,
redstalk --compat 1.12) are given the 1.13 quotes before comparing.
"""

import os
import random
import socket
import sys
import threading
import time

PAUSE = 1.3  # seconds, in the middle of a line

SESSION = r"""
> list-tubes
< OK 14
| ---
| - default
> use greetings
< USING greetings
> put 100 0 60 11
> hello world
< INSERTED 1
> put 200 0 60 4
> ci{pause}ao
< INSERTED 2
> list-tubes
< OK 26
| ---
| - default
| - greetings
> stats-tube gre{pause}etings
< OK 269
| ---
| name: "greetings"
| current-jobs-urgent: 2
| current-jobs-ready: 2
| current-jobs-reserved: 0
| current-jobs-delayed: 0
| current-jobs-buried: 0
| total-jobs: 2
| current-using: 1
| current-watching: 0
| current-waiting: 0
| cmd-delete: 0
| cmd-pause-tube: 0
| pause: 0
| pause-time-left: 0
> peek-ready
< FOUND 1 11
< hello world
> watch greetings
< WATCHING 2
> reserve
< RESERVED 1 11
< hello world
> stats-job 1
< OK *
| ---
| id: 1
| tube: "greetings"
| state: reserved
| pri: 100
| age: 1..15
| delay: 0
| ttr: 60
| time-left: 55..59
| file: 0
| reserves: 1
| timeouts: 0
| releases: 0
| buries: 0
| kicks: 0
> bury 1 50
< BURIED
> peek-buried
< FOUND 1 11
< hello world
> kick 5
< KICKED 1
> peek 1
< FOUND 1 11
< hello world
> reserve-with-{pause}timeout 0
< RESERVED 1 11
< hello world
> delete 1
< DELETED
> hello
< UNKNOWN_COMMAND
>
< UNKNOWN_COMMAND
> list-tubes\x20
< BAD_FORMAT
> STATS
< UNKNOWN_COMMAND
> \xff\xf4\xff\xfd\x06list-tube-used
< UNKNOWN_COMMAND
> uze\x7f\x7fse greetings
< UNKNOWN_COMMAND
> delete one
< BAD_FORMAT
> peek 99
< NOT_FOUND
> list-tube-used
< USING greetings
> list-tubes-watched
< OK 26
| ---
| - default
| - greetings
> ignore default
< WATCHING 1
> pause-tube greetings 0
< PAUSED
> stats-tube nosuch
< NOT_FOUND
> stats
< OK *
| ---
| current-jobs-urgent: 1
| current-jobs-ready: 1
| current-jobs-reserved: 0
| current-jobs-delayed: 0
| current-jobs-buried: 0
| cmd-put: 2
| cmd-peek: 2
| cmd-peek-ready: 1
| cmd-peek-delayed: 0
| cmd-peek-buried: 1
| cmd-reserve: 1
| cmd-reserve-with-timeout: 1
| cmd-delete: 1
| cmd-release: 0
| cmd-use: 1
| cmd-watch: 1
| cmd-ignore: 1
| cmd-bury: 1
| cmd-kick: 1
| cmd-touch: 0
| cmd-stats: 1
| cmd-stats-job: 1
| cmd-stats-tube: 2
| cmd-list-tubes: 2
| cmd-list-tube-used: 1
| cmd-list-tubes-watched: 1
| cmd-pause-tube: 1
| job-timeouts: 0
| total-jobs: 2
| max-job-size: 65535
| current-tubes: 2
| current-connections: 1
| current-producers: 1
| current-workers: 1
| current-waiting: 0
| total-connections: 1
| pid: *
| version: *
| rusage-utime: *
| rusage-stime: *
| uptime: *
| binlog-oldest-index: 0
| binlog-current-index: 0
| binlog-records-migrated: 0
| binlog-records-written: 0
| binlog-max-size: 10485760
| draining: false
| id: *
| hostname: *
| os: *
| platform: *
> quit
eof
"""

VOLATILE = {"pid", "uptime", "rusage-utime", "rusage-stime", "version", "id", "hostname", "os", "platform"}
QUOTED = {"name", "tube", "version", "hostname", "os", "platform"}


class Failure(Exception):
    pass


def parse_session(text):
    """[(typed line, [expected item]...)], items: ('line', s) | ('yaml', n, [lines]) | ('eof',)."""
    steps = []
    for raw in text.strip("\n").splitlines():
        if raw.startswith("> ") or raw == ">":
            steps.append((raw[2:], []))
        elif raw.startswith("< "):
            m = raw[2:]
            if m.startswith("OK "):
                steps[-1][1].append(["yaml", m[3:], []])
            else:
                steps[-1][1].append(["line", m])
        elif raw.startswith("| "):
            steps[-1][1][-1][2].append(raw[2:])
        elif raw == "eof":
            steps[-1][1].append(["eof"])
        else:
            raise ValueError(f"bad expectation line {raw!r}")
    for _, items in steps:
        for it in items:
            if it[0] == "yaml" and it[1] != "*":
                n = sum(len(s) + 1 for s in it[2])
                assert int(it[1]) == n, f"expectation OK {it[1]} but its lines are {n} bytes"
    return steps


class Terminal:
    """The socket, with a reader thread noting when bytes arrive."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a segment per key
        self.cond = threading.Condition()
        self.buf = b""
        self.eof = False
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        while True:
            try:
                chunk = self.sock.recv(4096)
            except OSError:
                chunk = b""
            with self.cond:
                if chunk:
                    self.buf += chunk
                else:
                    self.eof = True
                self.cond.notify_all()
            if not chunk:
                return

    def pending(self):
        with self.cond:
            return self.buf, self.eof

    def _take(self, pred, timeout=15.0):
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred(self.buf)
                if got is not None:
                    n, value = got
                    self.buf = self.buf[n:]
                    return value
                if self.eof:
                    raise Failure(f"connection closed; unread {self.buf!r}")
                left = end - time.monotonic()
                if left <= 0:
                    raise Failure(f"no complete reply within {timeout} s; have {self.buf!r}")
                self.cond.wait(left)

    def line(self):
        def pred(b):
            i = b.find(b"\r\n")
            return None if i < 0 else (i + 2, b[:i])

        return self._take(pred)

    def exactly(self, n):
        return self._take(lambda b: (n, b[:n]) if len(b) >= n else None)

    def wait_eof(self, timeout=15.0):
        end = time.monotonic() + timeout
        with self.cond:
            while not self.eof:
                left = end - time.monotonic()
                if left <= 0:
                    raise Failure("the connection stayed open after quit")
                self.cond.wait(left)
            if self.buf:
                raise Failure(f"bytes before the close: {self.buf!r}")


def type_line(term, text, rng, keystrokes):
    """Types text key by key, then Enter (CR LF); nothing may arrive meanwhile."""
    parts = text.split("{pause}")
    for k, part in enumerate(parts):
        if k:
            time.sleep(PAUSE)
        for ch in part.encode("latin-1").decode("unicode_escape").encode("latin-1"):
            buf, eof = term.pending()
            if buf or eof:
                raise Failure(f"reply {buf!r} (eof={eof}) arrived while typing {text!r}")
            term.sock.sendall(bytes([ch]))
            keystrokes[0] += 1
            time.sleep(rng.uniform(0.005, 0.020))
    buf, eof = term.pending()
    if buf or eof:
        raise Failure(f"reply {buf!r} (eof={eof}) arrived before Enter on {text!r}")
    term.sock.sendall(b"\r\n")
    keystrokes[0] += 1


def normalise_yaml(lines, oracle):
    out = []
    for ln in lines:
        key, sep, value = ln.partition(": ")
        if oracle and sep and key in QUOTED and not value.startswith('"'):
            value = f'"{value}"'
        out.append(key + sep + value)
    return out


def check_step(term, typed, items, oracle):
    for it in items:
        if it[0] == "line":
            got = term.line().decode("latin-1")
            if got != it[1]:
                raise Failure(f"after {typed!r}: got {got!r}, beanstalkd answers {it[1]!r}")
        elif it[0] == "yaml":
            head = term.line().decode("latin-1")
            if not head.startswith("OK "):
                raise Failure(f"after {typed!r}: got {head!r}, beanstalkd answers OK")
            n = int(head[3:])
            data = term.exactly(n + 2)
            if not data.endswith(b"\r\n") or b"\r\n" in data[:-2]:
                raise Failure(f"after {typed!r}: OK {n} is not the length of the data: {data!r}")
            text = data[:-2].decode("latin-1")
            if not text.endswith("\n"):
                raise Failure(f"after {typed!r}: YAML does not end in a newline: {text!r}")
            got = normalise_yaml(text[:-1].split("\n"), oracle)
            norm_n = sum(len(s) + 1 for s in got)
            if it[1] != "*" and norm_n != int(it[1]):
                raise Failure(f"after {typed!r}: OK {norm_n}, beanstalkd answers OK {it[1]}")
            want = it[2]
            for g, w in zip(got, want):
                gk, _, gv = g.partition(": ")
                wk, _, wv = w.partition(": ")
                if g == w or (gk == wk and (wv == "*" or (gk in VOLATILE and typed == "stats"))):
                    continue
                if gk == wk and ".." in wv and gv.isdigit():
                    lo, hi = (int(x) for x in wv.split(".."))
                    if lo <= int(gv) <= hi:
                        continue
                raise Failure(f"after {typed!r}: YAML line {g!r}, beanstalkd answers {w!r}")
            if len(got) != len(want):
                raise Failure(f"after {typed!r}: {len(got)} YAML lines, beanstalkd answers {len(want)}")
        elif it[0] == "eof":
            term.wait_eof()


def main():
    addr = os.environ.get("BEANSTALK_ADDR", "127.0.0.1:11300")
    oracle = os.environ.get("BEANSTALK_SERVER", "beanstalkd") in ("beanstalkd", "memory-1.12")
    steps = parse_session(SESSION)
    rng = random.Random(20240611)
    keystrokes = [0]
    term = Terminal(addr)
    started = time.monotonic()
    for typed, items in steps:
        type_line(term, typed, rng, keystrokes)
        if not items:  # a put line: the reply comes after the body
            if not typed.startswith("put "):
                raise ValueError(f"no reply expected for {typed!r}")
            time.sleep(0.3)
            buf, eof = term.pending()
            if buf or eof:
                raise Failure(f"reply {buf!r} (eof={eof}) arrived before the body of {typed!r}")
            continue
        check_step(term, typed, items, oracle)
        time.sleep(rng.uniform(0.05, 0.15))  # reading the reply
    elapsed = time.monotonic() - started
    pauses = SESSION.count("{pause}")
    bodies = sum(1 for typed, items in steps if not items)
    print(
        f"telnet: {len(steps) - bodies} commands and {bodies} bodies typed, {keystrokes[0]} keystrokes, "
        f"{pauses} pauses of {PAUSE} s mid-line, {elapsed:.1f} s"
    )
    print("telnet session: ok")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"telnet session FAILED: {e}", file=sys.stderr)
        sys.exit(1)
