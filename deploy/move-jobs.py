#!/usr/bin/env python3
"""Move the jobs of one beanstalk server to another: beanstalkd to redstalk, say.

    python3 deploy/move-jobs.py --from 127.0.0.1:11300 --to 127.0.0.1:11301
    python3 deploy/move-jobs.py --from 127.0.0.1:11300 --to 127.0.0.1:11301 --dry-run

Python 3.7 or later, nothing else. Addresses are HOST:PORT or unix:/path.

Tube by tube, it moves the ready, delayed and buried jobs, keeping each job's tube,
priority, TTR, body and remaining delay; buried jobs are buried again on the target, in
the same order. Each job is put on the target first and deleted from the source only
after the target answered INSERTED: an interruption can leave a job in both places,
never in neither. Job ids change (the target numbers its jobs itself); statistics
(stats-job counters included) and tube pauses are not moved.

Reserved jobs are not moved (a worker holds them). The script ends with exit status 2
when some are left; run it again once they are back or done.

Before running it, stop the source's workers (a worker could otherwise reserve a job
while it is being moved, and the job would run twice) and its producers (or put the
source in drain mode, `kill -USR1 <pid>`, so that late puts answer DRAINING).
"""

import argparse
import socket
import sys

# Buried jobs are put delayed (so no worker on the target can take them), then reserved
# by id and buried. Should the script stop in between, the job waits this long.
HOLD_SECONDS = 7 * 24 * 3600


class Beanstalk:
    """One connection, one command at a time."""

    def __init__(self, address):
        if address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(address[len("unix:"):])
        else:
            host, _, port = address.rpartition(":")
            self.sock = socket.create_connection((host.strip("[]"), int(port)))
        self.reader = self.sock.makefile("rb")
        self.address = address

    def call(self, line, body=None):
        """Send a command; return the reply's words and its data (or None)."""
        data = line.encode() + b"\r\n"
        if body is not None:
            data += body + b"\r\n"
        self.sock.sendall(data)
        reply = self.reader.readline()
        if not reply.endswith(b"\r\n"):
            raise ConnectionError(f"{self.address} closed the connection")
        words = reply[:-2].decode().split()
        if words[0] in ("OK", "FOUND", "RESERVED"):
            size = int(words[-1])
            payload = self.reader.read(size + 2)
            if len(payload) != size + 2:
                raise ConnectionError(f"{self.address} closed the connection")
            return words, payload[:-2]
        return words, None

    def expect(self, line, reply, body=None):
        words, data = self.call(line, body)
        if words[0] != reply:
            raise RuntimeError(f"{self.address}: `{line}` answered {' '.join(words)}")
        return words, data


def yaml_map(data):
    out = {}
    for line in data.decode().splitlines()[1:]:
        key, _, value = line.partition(": ")
        out[key] = value.strip('"')
    return out


def yaml_list(data):
    return [line[2:].strip('"') for line in data.decode().splitlines()[1:]]


def move_tube(src, dst, tube, counts):
    src.expect(f"use {tube}", "USING")
    dst.expect(f"use {tube}", "USING")
    for state in ("ready", "delayed", "buried"):
        while True:
            words, body = src.call(f"peek-{state}")
            if words[0] == "NOT_FOUND":
                break
            if words[0] != "FOUND":
                raise RuntimeError(f"{src.address}: peek-{state} answered {' '.join(words)}")
            job = words[1]
            words, data = src.call(f"stats-job {job}")
            if words[0] != "OK":
                continue  # gone meanwhile
            stats = yaml_map(data)
            if stats["state"] != state:
                continue  # reserved or kicked meanwhile
            pri, ttr = stats["pri"], stats["ttr"]
            delay = {"ready": "0", "delayed": stats["time-left"], "buried": HOLD_SECONDS}[state]
            words, _ = dst.expect(f"put {pri} {delay} {ttr} {len(body)}", "INSERTED", body)
            new = words[1]
            if state == "buried":
                dst.expect(f"reserve-job {new}", "RESERVED")
                dst.expect(f"bury {new} {pri}", "BURIED")
            words, _ = src.call(f"delete {job}")
            if words[0] != "DELETED":
                print(f"warning: job {job} of tube {tube} was put on the target as {new} "
                      f"but could not be deleted from the source ({' '.join(words)}): "
                      "it now exists twice", file=sys.stderr)
            counts[state] += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", required=True, metavar="ADDR",
                        help="the server to empty, HOST:PORT or unix:/path")
    parser.add_argument("--to", dest="target", required=True, metavar="ADDR",
                        help="the server to fill, HOST:PORT or unix:/path")
    parser.add_argument("--tube", action="append", metavar="NAME",
                        help="move only this tube (repeatable); default: every tube")
    parser.add_argument("--dry-run", action="store_true",
                        help="only show what the source holds")
    args = parser.parse_args()

    src = Beanstalk(args.source)
    _, data = src.expect("list-tubes", "OK")
    tubes = args.tube or yaml_list(data)
    dst = None if args.dry_run else Beanstalk(args.target)
    left = 0
    for tube in tubes:
        words, data = src.call(f"stats-tube {tube}")
        if words[0] != "OK":
            print(f"{tube}: no such tube on the source")
            continue
        before = yaml_map(data)
        if dst is not None:
            counts = {"ready": 0, "delayed": 0, "buried": 0}
            move_tube(src, dst, tube, counts)
            moved = ", ".join(f"{n} {state}" for state, n in counts.items())
            _, data = src.expect(f"stats-tube {tube}", "OK")
            after = yaml_map(data)
            print(f"{tube}: moved {moved}; {after['current-jobs-reserved']} reserved "
                  f"left on the source")
        else:
            after = before
            print(f"{tube}: " + ", ".join(
                f"{before['current-jobs-' + s]} {s}"
                for s in ("ready", "delayed", "buried", "reserved")))
        left += int(after["current-jobs-reserved"])
        if int(before["pause"]) > 0:
            print(f"{tube}: paused on the source; the pause is not moved")
    if dst is not None and left:
        print(f"{left} reserved jobs are still on the source: run again when they are "
              "back (or done)")
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, RuntimeError) as err:
        print(f"move-jobs: {err}", file=sys.stderr)
        sys.exit(1)
