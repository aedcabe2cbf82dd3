"""Helpers of bench/lua-replay and bench/prelude-cost: a private redis-server, a
redstalk in shared mode on it, MONITOR recordings, the scripts a build loads, and a
script rewritten as a Redis Function library (an emulation for measuring).

Python 3 standard library only.
"""

import hashlib
import os
import re
import socket
import subprocess
import threading
import time

import peers

# Commands of the recording not replayed: connection set-up, pub/sub, the monitor's own.
SKIPPED = {b"HELLO", b"CLIENT", b"SELECT", b"PING", b"SUBSCRIBE", b"SSUBSCRIBE",
           b"PSUBSCRIBE", b"UNSUBSCRIBE", b"SUNSUBSCRIBE", b"MONITOR", b"INFO", b"ECHO",
           b"COMMAND", b"READONLY", b"AUTH", b"CONFIG", b"SCRIPT"}

ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", "\\": b"\\",
           '"': b'"'}


def parse_args(text):
    """The arguments of a MONITOR line's command part (sdscatrepr quoting)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] != '"':
            i += 1
            continue
        i += 1
        arg = bytearray()
        while text[i] != '"':
            c = text[i]
            if c == "\\":
                e = text[i + 1]
                if e == "x":
                    arg.append(int(text[i + 2:i + 4], 16))
                    i += 4
                    continue
                arg += ESCAPES[e]
                i += 2
                continue
            arg += c.encode("latin-1")
            i += 1
        out.append(bytes(arg))
        i += 1
    return out


def resp(args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class Monitor(threading.Thread):
    """MONITOR on `port`, its lines kept (the client's own commands, not a script's)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"MONITOR\r\n")
        self.file = self.sock.makefile("rb")
        assert self.file.readline() == b"+OK\r\n"
        self.lines = []

    def run(self):
        for raw in self.file:
            self.lines.append(raw)

    def stop(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.join(5)

    def commands(self):
        """(client, args) of each command a client sent, in the order Redis ran them."""
        out = []
        for raw in self.lines:
            line = raw.decode("latin-1").rstrip("\r\n")
            m = re.match(r'^\+[0-9.]+ \[\d+ ([^\]]+)\] (.*)$', line)
            if not m or m.group(1) == "lua":
                continue
            out.append((m.group(1), parse_args(m.group(2))))
        return out


# A Redis without FUNCTION (renamed away): a build that calls its scripts as Redis
# Functions falls back to SCRIPT LOAD and EVALSHA on it, so its recording and its loaded
# scripts are of one form whatever the build.
NO_FUNCTIONS = ("--rename-command", "FUNCTION", "")


def start_redis(tmp, tag, extra=()):
    port = peers.free_port()
    d = os.path.join(tmp, tag)
    os.makedirs(d, exist_ok=True)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", d, *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peers.wait_port(port, proc, "redis-server")
    return port, proc


def start_redstalk(binary, rport, tmp, tag):
    bport = peers.free_port()
    proc = subprocess.Popen(
        [binary, "-l", "127.0.0.1", "-p", str(bport), "--redis",
         "redis://127.0.0.1:%d/0" % rport, "--redis-prefix", "replay", "--redis-mode",
         "shared"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, tag + ".log"), "wb"))
    peers.wait_port(bport, proc, binary)
    return bport, proc


def start_load(binary, tmp, tag, extra=()):
    """What `binary` sends a Redis (started with `extra`) as it starts: its commands."""
    rport, redis = start_redis(tmp, tag + "-load", extra)
    mon = Monitor(rport)
    mon.start()
    _, proc = start_redstalk(binary, rport, tmp, tag + "-load")
    time.sleep(1.0)
    proc.terminate()
    proc.wait()
    mon.stop()
    redis.terminate()
    redis.wait()
    return mon.commands()


def loaded_scripts(binary, tmp, tag):
    """The scripts `binary` loads at start on a Redis without FUNCTION, in its load
    order (their texts)."""
    texts = []
    for _, args in start_load(binary, tmp, tag, NO_FUNCTIONS):
        if len(args) == 3 and args[0].upper() == b"SCRIPT" and args[1].upper() == b"LOAD":
            if args[2] not in texts:
                texts.append(args[2])
    return texts


def loaded_libraries(binary, tmp, tag):
    """The Redis Function libraries `binary` loads at start, in its load order: (name,
    text) each; none for a build that calls its scripts by EVALSHA only."""
    libs = []
    for _, args in start_load(binary, tmp, tag + "-fn"):
        if len(args) >= 3 and args[0].upper() == b"FUNCTION" and args[1].upper() == b"LOAD":
            text = args[-1]
            name = re.match(rb"#!lua name=(\S+)", text).group(1)
            if (name, text) not in libs:
                libs.append((name, text))
    return libs


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b"-", b":"):
            return (kind, rest)
        if kind == b"$":
            n = int(rest)
            if n >= 0:
                data = self.file.read(n + 2)[:-2]
                return (kind, data)
            return (kind, None)
        if kind == b"*":
            n = int(rest)
            return (kind, [self.read() for _ in range(max(n, 0))])
        raise RuntimeError("unexpected reply %r" % line)

    def call(self, *args):
        self.sock.sendall(resp([a if isinstance(a, bytes) else str(a).encode() for a in args]))
        return self.read()


def info_fields(conn, section):
    _, text = conn.call("INFO", section)
    out = {}
    for line in text.decode().splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v
    return out


# The prelude's statements that run at every call of a script (the call's state): in a
# library they must run at every FCALL, so they move into the registered function.
PER_CALL = [
    (re.compile(rb"^local G = ns_group\(1\)$", re.M), b"G = ns_group(1)"),
    (re.compile(rb"^local GEN = table\.remove\(ARGV, 1\)$", re.M),
     b"GEN = table.remove(ARGV, 1)"),
    (re.compile(rb"^if CHECK_FIRST and not same_generation\(\) then\n  return namespace_lost\(\)\nend$",
                re.M), None),
    (re.compile(rb"^local NOW = nil$", re.M), b"NOW = nil"),
    (re.compile(rb"^local RET = false$", re.M), b"RET = false"),
    (re.compile(rb"^local LISTENED = nil$", re.M), b"LISTENED = nil"),
    (re.compile(rb"^local ID_BLOCK = nil$", re.M), b"ID_BLOCK = nil"),
    (re.compile(rb"^local PUTS_UNCOUNTED = nil$", re.M), b"PUTS_UNCOUNTED = nil"),
]


def as_library(text, body, name, own=None):
    """Script `text` (whose own part, after the prelude, is `body`) as a Redis Function
    library `name` with one function `name`: the prelude's helpers made once, at
    FUNCTION LOAD, and only the call's state and the script's own part (`own` in its
    place when given) run at each FCALL. An emulation for measuring (the per-call
    statements found by their text), not how redstalk would build one."""
    shebang, rest = text.split(b"\n", 1)
    assert rest.endswith(body), name
    prelude = rest[:len(rest) - len(body)]
    entry, names = [], []
    for pattern, stmt in PER_CALL:
        m = pattern.search(prelude)
        if not m:
            continue
        if stmt is None:
            # The generation check runs after G and GEN are set.
            check = b"if CHECK_FIRST and not same_generation() then return namespace_lost() end"
            prelude = prelude[:m.start()] + prelude[m.end():]
            entry.append(check)
            continue
        var = stmt.split(b" ", 1)[0]
        names.append(var)
        prelude = prelude[:m.start()] + b"local " + var + prelude[m.end():]
        entry.append(stmt)
    flags = b"{'no-writes'}" if b"no-writes" in shebang else b"{}"
    return b"\n".join([
        b"#!lua name=" + name,
        b"local KEYS, ARGV",
        prelude,
        b"redis.register_function{function_name='" + name + b"', flags=" + flags
        + b", callback=function(keys, args)",
        b"KEYS, ARGV = keys, args",
        *entry,
        body if own is None else own,
        b"end}",
    ])


def script_bodies(texts, lua_dir):
    """Each script's own part (its lua/<name>.lua), found as the end of its text; None
    for a script of no file there (the key layout's upgrade scripts)."""
    files = {f: open(os.path.join(lua_dir, f), "rb").read() for f in os.listdir(lua_dir)
             if f != "prelude.lua"}
    out = []
    for t in texts:
        found = [b for b in files.values() if t.endswith(b"\n" + b)]
        out.append(max(found, key=len) if found else None)
    return out


def sha1(text):
    return hashlib.sha1(text).hexdigest().encode()
