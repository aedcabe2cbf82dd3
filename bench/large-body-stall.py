#!/usr/bin/env python3
"""How much one client's large jobs slow another client's small ones.

One connection puts and deletes jobs of SIZE bytes in a loop; another times
`put` + `delete` of a 3-byte job, for SECONDS. Prints how many large cycles ran
and the small cycle's latency (p50, p99, max). The server must accept SIZE
(`-z`). Any beanstalkd-protocol server:

    bench/large-body-stall.py 127.0.0.1:11300 [--size 33554432] [--seconds 5]

Results with their commands: bench/results/2026-11-24-large-body-stall.md.
"""
import argparse
import socket
import threading
import time


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s, s.makefile("rb")


def cycle(sock, rfile, body):
    sock.sendall(b"put 0 0 60 %d\r\n" % len(body) + body + b"\r\n")
    line = rfile.readline()
    if not line.startswith(b"INSERTED "):
        raise SystemExit("put answered %r" % line)
    sock.sendall(b"delete %d\r\n" % int(line.split()[1]))
    line = rfile.readline()
    if line != b"DELETED\r\n":
        raise SystemExit("delete answered %r" % line)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("addr")
    p.add_argument("--size", type=int, default=32 * 1024 * 1024)
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    stop = threading.Event()
    large = [0]

    def loop():
        s, f = connect(a.addr)
        body = b"x" * a.size
        while not stop.is_set():
            cycle(s, f, body)
            large[0] += 1

    t = threading.Thread(target=loop)
    t.start()
    s, f = connect(a.addr)
    lat = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        cycle(s, f, b"abc")
        lat.append((time.monotonic() - t0) * 1000)
    stop.set()
    t.join()
    lat.sort()
    print(
        "%s: %d large cycles of %d bytes; small put+delete n=%d p50 %.2f ms p99 %.1f ms max %.1f ms"
        % (a.addr, large[0], a.size, len(lat), lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1])
    )


if __name__ == "__main__":
    main()
