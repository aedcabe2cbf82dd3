#!/usr/bin/env python3
"""Restart time of `redstalk -b DIR` with N jobs in its log.

Puts N 16-byte jobs into a fresh `redstalk -b DIR` (pipelined, 10,000 at a time), kills
it with SIGKILL, starts it again on the same directory, and prints how long the start
took until it accepted a connection (wall clock, and the server's CPU time then, which a
loaded machine disturbs less), the server's own `binlog replayed` line (-V), and
`current-jobs-ready` afterwards.

Usage: bench/binlog-restart.py [REDSTALK] [N]   (defaults: target/release/redstalk,
1000000). Python 3 standard library only; a free loopback port, a temporary directory.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 10_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ms(pid):
    """User + system CPU time of process `pid` so far, in milliseconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


def start(binary, port, data):
    proc = subprocess.Popen(
        [binary, "-l", "127.0.0.1", "-p", str(port), "-b", data, "-V"],
        stderr=subprocess.PIPE)
    began = time.time()
    while True:
        try:
            return proc, socket.create_connection(("127.0.0.1", port)), time.time() - began
        except OSError:
            if proc.poll() is not None:
                sys.exit("redstalk exited: " + proc.stderr.read().decode())
            time.sleep(0.005)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target/release/redstalk")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    data = tempfile.mkdtemp(prefix="redstalk-restart-")
    port = free_port()
    try:
        proc, sock, _ = start(binary, port, data)
        request = b"".join(b"put %d 0 60 16\r\n%s\r\n" % (i % 1000, b"x" * 16) for i in range(CHUNK))
        replies = sock.makefile("rb")
        began = time.time()
        for _ in range(n // CHUNK):
            sock.sendall(request)
            for _ in range(CHUNK):
                line = replies.readline()
                assert line.startswith(b"INSERTED"), line
        put_s = time.time() - began
        sock.close()
        proc.kill()
        proc.wait()
        size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
        proc, sock, took = start(binary, port, data)
        cpu = cpu_ms(proc.pid)
        replies = sock.makefile("rb")
        sock.sendall(b"stats\r\n")
        length = int(replies.readline().split()[1])
        stats = replies.read(length + 2).decode()
        ready = re.search(r"current-jobs-ready: (\d+)", stats).group(1)
        proc.kill()
        said = proc.stderr.read().decode()
        line = re.search(r"binlog replayed.*", said)
        print(f"{n} jobs put in {put_s:.1f} s; log {size} bytes; kill -9; start to listening "
              f"{took * 1000:.0f} ms (server CPU {cpu} ms); current-jobs-ready {ready}")
        print(line.group(0) if line else said[-2000:])
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
